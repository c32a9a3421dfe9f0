/*
 * amp.h — libampcore: an instrumented mixed-precision (AMP) training runtime in C.
 *
 * Tensors (f32, f16, bf16, i32, i64) live in a context; ops build an autograd tape; autocast
 * follows PyTorch's CUDA op lists exactly (also on the CPU backend, so fp16 trouble can be
 * reproduced without a GPU); amp-train.h adds GradScaler, optimizers and checkpoints.
 *
 * Memory: the context owns every tensor. Tensors made by amp_tensor_new*() are persistent until
 * amp_tensor_free(); tensors returned by ops are scratch and live until amp_ctx_reset(), which
 * also drops the autograd tape, or until amp_tensor_drop() when no backward reads them. A training
 * step therefore reads:
 *
 *     amp_ctx_t *ctx;
 *     amp_ctx_new(AMP_DEVICE_CPU, 42, &ctx);
 *     amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){10, 64});
 *     amp_tensor_set_requires_grad(w, true);
 *     ...
 *     amp_autocast_begin(ctx, true, AMP_DTYPE_F16, true);
 *     amp_layer_begin(ctx, "fc");
 *     amp_tensor_t *logits = amp_linear(ctx, x, w, NULL);     // (B, 10) fp16
 *     amp_layer_end(ctx);
 *     amp_tensor_t *loss = amp_cross_entropy(ctx, logits, y); // fp32 (autocast policy)
 *     amp_autocast_end(ctx);
 *     amp_backward(ctx, loss);
 *     ... optimizer step ...
 *     amp_ctx_reset(ctx);
 *
 * Errors the user or the environment can cause return an amp_status, and amp_last_error() has
 * the message (naming the file, value or op). Programming errors (shape mismatches, wrong
 * dtypes passed to an op) abort with file:line through AMP_ASSERT.
 */
#ifndef AMP_H
#define AMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Status codes

#define AMP_STATUS_MAP(X)                                                                          \
    X(OK, "ok")                                                                                    \
    X(ERR_INVALID_ARGUMENT, "invalid argument")                                                    \
    X(ERR_NO_DEVICE, "device not available")                                                       \
    X(ERR_NOMEM, "out of memory")                                                                  \
    X(ERR_IO, "i/o error")                                                                         \
    X(ERR_CORRUPT, "corrupt or truncated file")                                                    \
    X(ERR_MISMATCH, "file does not match the model")                                               \
    X(ERR_AUTOCAST_BANNED, "op is unsafe to autocast")                                             \
    X(ERR_AUTOCAST_DTYPE, "unexpected floating dtype under autocast")                              \
    X(ERR_SCALER_STATE, "GradScaler called out of order")                                          \
    X(ERR_SCALER_FP16_GRADS, "attempting to unscale FP16 gradients")                               \
    X(ERR_UNSUPPORTED, "not supported")

typedef enum amp_status {
#define AMP_STATUS_ENUM(name, msg) AMP_##name,
    AMP_STATUS_MAP(AMP_STATUS_ENUM)
#undef AMP_STATUS_ENUM
} amp_status;

// Short name of a status ("ERR_CORRUPT").
const char *amp_status_name(amp_status s);
// One-line description of a status ("corrupt or truncated file").
const char *amp_status_str(amp_status s);
// The detailed message of the error the last call that returns an amp_status (any of the
// library's) returned on this thread, PyTorch's wording where PyTorch raises; "" when that call
// returned AMP_OK, or before any such call. Calls that return no status (ops, tensor functions)
// leave it as it was.
const char *amp_last_error(void);

// ---------------------------------------------------------------------------------------------
// Data types and conversions (round to nearest even, bit-exact with PyTorch)

typedef enum amp_dtype {
    AMP_DTYPE_F32,
    AMP_DTYPE_F16,
    AMP_DTYPE_BF16,
    AMP_DTYPE_I32,
    AMP_DTYPE_I64,
    AMP_DTYPE_COUNT
} amp_dtype;

const char *amp_dtype_name(amp_dtype t); // "f32", "f16", "bf16", "i32", "i64"
// Accepts the names above, fp32/fp16, and PyTorch's float32/float/float16/half/bfloat16/int32/
// int/int64/long; false for anything else (NULL included).
bool amp_dtype_parse(const char *s, amp_dtype *out);
size_t amp_dtype_size(amp_dtype t); // bytes per element
bool amp_dtype_is_float(amp_dtype t);

uint16_t amp_f32_to_f16(float x); // NaN -> 0x7E00 | sign
float amp_f16_to_f32(uint16_t h);
uint16_t amp_f32_to_bf16(float x); // NaN -> 0x7FC0
float amp_bf16_to_f32(uint16_t h);
// x rounded to dtype t and back (f32: x itself).
float amp_round_to(amp_dtype t, float x);

// ---------------------------------------------------------------------------------------------
// Context

typedef enum amp_device { AMP_DEVICE_CPU, AMP_DEVICE_CUDA } amp_device;

typedef struct amp_ctx amp_ctx_t;
typedef struct amp_tensor amp_tensor_t;

// Creates a context on a device. seed drives dropout and amp_tensor_randn.
// AMP_ERR_NO_DEVICE when the device's backend is not available (message says why);
// AMP_ERR_INVALID_ARGUMENT for a NULL out.
amp_status amp_ctx_new(amp_device dev, uint64_t seed, amp_ctx_t **out);
void amp_ctx_free(amp_ctx_t *ctx);
amp_device amp_ctx_device(const amp_ctx_t *ctx);
bool amp_device_parse(const char *s, amp_device *out); // "cpu", "cuda"; false otherwise
// Frees every scratch tensor (op outputs) and the autograd tape; persistent tensors and their
// gradients stay. Call once per training step, after the optimizer step, and under gradient
// accumulation after each micro-batch's backward too (the gradients add up across the resets).
void amp_ctx_reset(amp_ctx_t *ctx);
// Ends the current training step (steps count from 0) with its loss value, for the
// instrumentation's step records (time, loss). Call once per optimizer step. A NaN loss is a
// NaN loss (the report says the training broke).
void amp_ctx_step_end(amp_ctx_t *ctx, float loss);
// The same for a loop that does not read its loss on the host: `loss` (one element, floating)
// is read by the instrumentation, which on the GPU copies it back with the step's statistics,
// behind the step's work, instead of waiting for it. Nothing is read when recording is off.
void amp_ctx_step_end_loss(amp_ctx_t *ctx, const amp_tensor_t *loss);
// The number the current step has (the next step, between steps): amp_ctx_step_end's count.
int64_t amp_ctx_step_index(const amp_ctx_t *ctx);
// Sets the number the next step gets (step >= 0), for a run resumed from a checkpoint: its steps,
// their records (AMP_STEPS, statistics, ops, events) and AMPPROBE_STATS_EVERY's sampling (steps
// that are multiples of it) go on from the checkpoint's count instead of restarting at 0. Call it
// between steps, before the first op of the step it numbers.
void amp_ctx_set_step_index(amp_ctx_t *ctx, int64_t step);
// The context's random state (torch.get_rng_state()): where amp_tensor_randn/uniform's generator
// and dropout's masks go on. A checkpoint saved with an optimizer carries its context's state and
// amp_checkpoint_load restores it, so a resumed run draws the masks the uninterrupted one would
// have (set another state after the load to draw others); amp_ctx_set_rng_state puts back a
// state amp_ctx_rng_state read.
typedef struct amp_rng_state {
    uint64_t seed;           // amp_ctx_new's; dropout masks hash (seed, element counter)
    uint64_t host;           // the generator amp_tensor_randn and amp_tensor_uniform draw from
    uint64_t dropout_offset; // the element counter: mask elements dropout has drawn so far
} amp_rng_state;
amp_rng_state amp_ctx_rng_state(const amp_ctx_t *ctx);
void amp_ctx_set_rng_state(amp_ctx_t *ctx, amp_rng_state st);
// Bytes of tensor storage the context holds now and the most it held at once since it was made
// (either may be NULL), each storage counted rounded up to 512 bytes, as PyTorch's caching
// allocator counts torch.cuda.memory_allocated(); a backend's own scratch (cuBLASLt's workspace)
// is not counted. The instrumentation records the peak with every step (AMP_STEPS).
void amp_ctx_memory(const amp_ctx_t *ctx, size_t *in_use, size_t *peak);

// ---------------------------------------------------------------------------------------------
// Tensors

#define AMP_MAX_DIMS 6

// Persistent tensors, zero-filled / from host data in the dtype's own storage format / from f32
// values rounded to the dtype. A negative dim, or a shape whose size in bytes overflows int64,
// aborts naming the shape.
amp_tensor_t *amp_tensor_new(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape);
amp_tensor_t *amp_tensor_from(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape,
                              const void *host);
amp_tensor_t *amp_tensor_from_f32(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape,
                                  const float *host);
// Fills with N(0, std^2) (or U(-bound, bound) for amp_tensor_uniform) from the context's RNG.
// A floating t only: an integer one aborts (PyTorch's normal_ and uniform_ have no integer kernel).
void amp_tensor_randn(amp_tensor_t *t, float std);
void amp_tensor_uniform(amp_tensor_t *t, float bound);
// Frees a persistent tensor (and its gradient). NULL is a no-op; scratch tensors are ignored.
// The caller must not use t afterwards. When the autograd tape was recorded with t (or its
// gradient), as PyTorch's graph keeps what it saved alive, t's memory stays until amp_ctx_reset:
// a backward of the tape still reads t and accumulates its gradient. A parameter (or the state)
// of an optimizer cannot be freed before the optimizer: that aborts. Nor can a gradient
// (amp_tensor_grad's), which belongs to its tensor: amp_tensor_zero_grad drops it.
void amp_tensor_free(amp_tensor_t *t);
// Says the caller will not read the storage of t (an op's output, or a view of one) again: it is
// freed now unless a backward of the tape reads it, and then as soon as the last backward node
// that reads it has run (or at amp_ctx_reset, when one of them never runs). PyTorch frees a
// forward intermediate once no reference and no backward keeps it; a C program says which ones
// it is done with (an attention's scores once the softmax has run: the softmax's backward reads
// only its output; a linear's output once the GELU has read it: gone after the GELU's backward).
// Views of the storage go with it; reading it afterwards aborts where an op checks its inputs,
// and so does a second backward through a node that read it. Persistent tensors, gradients,
// NULL and a second call are left alone.
void amp_tensor_drop(amp_tensor_t *t);

amp_dtype amp_tensor_dtype(const amp_tensor_t *t);
int amp_tensor_ndim(const amp_tensor_t *t);
int64_t amp_tensor_dim(const amp_tensor_t *t, int i); // i < 0 counts from the end
int64_t amp_tensor_numel(const amp_tensor_t *t);
bool amp_tensor_is_contiguous(const amp_tensor_t *t);
// Copies to / from host memory as f32 (rounding on write), in t's row-major order; work on views
// (of a floating tensor, for amp_tensor_write_f32: an integer t must be contiguous).
void amp_tensor_read_f32(const amp_tensor_t *t, float *out);
void amp_tensor_write_f32(amp_tensor_t *t, const float *in);
// Raw storage-format copies (i32 labels, f16 bits) in t's row-major order: amp_tensor_read works
// on views, amp_tensor_write needs a contiguous t. Every host copy (amp_tensor_item too) of a
// tensor whose storage was dropped (amp_tensor_drop) aborts.
void amp_tensor_read(const amp_tensor_t *t, void *out);
void amp_tensor_write(amp_tensor_t *t, const void *in);
float amp_tensor_item(const amp_tensor_t *t); // numel must be 1

void amp_tensor_set_name(amp_tensor_t *t, const char *name);
const char *amp_tensor_name(const amp_tensor_t *t);
// (Turning it off on an op's output aborts, as in PyTorch: only leaves may change it.)
void amp_tensor_set_requires_grad(amp_tensor_t *t, bool requires_grad);
bool amp_tensor_requires_grad(const amp_tensor_t *t);
// The accumulated gradient (same dtype and shape), or NULL when there is none. (A gradient kept
// in a narrower dtype inside, such as a parameter's from autocast's cast, is widened here.)
amp_tensor_t *amp_tensor_grad(const amp_tensor_t *t);
// Drops the gradient (torch's zero_grad(set_to_none=True)). NULL is a no-op.
void amp_tensor_zero_grad(amp_tensor_t *t);

// ---------------------------------------------------------------------------------------------
// Named layers: every op records the innermost layer around it ("blocks.1.attn.qkv").

// Enters a child of the current layer. The name may itself contain dots.
void amp_layer_begin(amp_ctx_t *ctx, const char *name);
void amp_layer_beginf(amp_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void amp_layer_end(amp_ctx_t *ctx);
// Qualified name of the current layer ("" at the top).
const char *amp_layer_current(const amp_ctx_t *ctx);

// ---------------------------------------------------------------------------------------------
// Autocast (PyTorch's CUDA policy, whatever the device)

typedef enum amp_cast_policy {
    AMP_POLICY_NATIVE,             // unlisted: ordinary type promotion
    AMP_POLICY_LOWER_PRECISION_FP, // cast floating inputs to the autocast dtype
    AMP_POLICY_FP32,               // cast floating inputs to f32
    AMP_POLICY_FP32_SET_OPT_DTYPE, // compute and output f32 without casting inputs
    AMP_POLICY_FP32_APPEND_DTYPE,  // norm: output f32
    AMP_POLICY_PROMOTE,            // widest floating input type
    AMP_POLICY_BANNED              // raises (binary_cross_entropy)
} amp_cast_policy;

// Enters an autocast region, like `with torch.autocast("cuda", dtype, enabled, cache_enabled)`.
// dtype is AMP_DTYPE_F16 or AMP_DTYPE_BF16. Regions nest; the weight-cast cache is cleared
// when the outermost region ends.
void amp_autocast_begin(amp_ctx_t *ctx, bool enabled, amp_dtype dtype, bool cache_enabled);
void amp_autocast_end(amp_ctx_t *ctx);
bool amp_autocast_is_enabled(const amp_ctx_t *ctx);
amp_dtype amp_autocast_dtype(const amp_ctx_t *ctx);

// The policy of a PyTorch op name ("mm", "softmax", "binary_cross_entropy", ...); unlisted names
// (and NULL) are AMP_POLICY_NATIVE.
amp_cast_policy amp_autocast_policy(const char *op);
const char *amp_cast_policy_name(amp_cast_policy p);
// The dtype an op returns under autocast, given the dtypes of its tensor arguments in call
// order (integer tensors allowed: PyTorch's promotion, such as f32 for exp or div of integers
// and i64 for sum of i32). AMP_ERR_AUTOCAST_BANNED for banned ops and AMP_ERR_AUTOCAST_DTYPE for
// a promote over f16 and bf16, with PyTorch's message. Scalar arguments are not given, and count
// as integers where that matters: pow, clamp_min, add and mul of an integer tensor stay integer
// here as pow(x, 2) does in PyTorch, while amp_pow, amp_clamp_min and amp_*_scalar, whose
// scalars are floating, return f32 for one. AMP_ERR_INVALID_ARGUMENT for an op
// without an integer kernel in PyTorch given only integer tensors ("gelu takes floating tensors
// only") and for a lower-precision op (a GEMM, a convolution) given an integer tensor beside
// floating ones (autocast leaves it, and PyTorch's op raises a dtype mismatch),
// for a NULL op, in or out, and for a value that is no dtype.
amp_status amp_autocast_decide(const char *op, int n, const amp_dtype *in, amp_dtype autocast_dtype,
                               amp_dtype *out);

// ---------------------------------------------------------------------------------------------
// Ops. Inputs may be views; outputs are new scratch tensors. Floating math accumulates in f32.
// Shapes in comments: (B, T, C) etc.

amp_tensor_t *amp_linear(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b);
// x (..., in), w (out, in), b (out) or NULL -> (..., out)
// torch.matmul: (..., M, K) @ (..., K, N) with the leading dims broadcast ((3, 4) @ (2, 4, 5),
// (2, 1, 3, 4) @ (3, 4, 5)), (..., M, K) @ (K, N) as one GEMM, and a 1-D operand taken as a row
// (first) or a column (second) that the result drops again ((K,) @ (K,) is 0-dim)
amp_tensor_t *amp_matmul(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);
amp_tensor_t *amp_mm(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);  // (M, K) @ (K, N)
amp_tensor_t *amp_bmm(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b); // (B, M, K) @ (B, K, N)
amp_tensor_t *amp_addmm(amp_ctx_t *ctx, amp_tensor_t *bias, amp_tensor_t *a, amp_tensor_t *b);
// x (N, Cin, H, W), w (Cout, Cin, kh, kw), b (Cout) or NULL: floating tensors (an integer one
// aborts, as a bias of another size does); N = 0 gives an empty (0, Cout, oh, ow) output.
amp_tensor_t *amp_conv2d(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b,
                         int stride, int padding);
amp_tensor_t *amp_max_pool2d(amp_ctx_t *ctx, amp_tensor_t *x, int kernel, int stride);

// Integer x: tanh, sigmoid, exp and log compute in f32 (PyTorch's default dtype), as do pow and
// clamp_min (their scalar is a float); relu (an integer result in PyTorch) and gelu (no integer
// kernel in PyTorch: "gelu takes floating tensors only") abort, as do softmax, log_softmax,
// layer_norm, sum and mean.
amp_tensor_t *amp_relu(amp_ctx_t *ctx, amp_tensor_t *x);
amp_tensor_t *amp_gelu(amp_ctx_t *ctx, amp_tensor_t *x, bool tanh_approx);
amp_tensor_t *amp_tanh(amp_ctx_t *ctx, amp_tensor_t *x);
amp_tensor_t *amp_sigmoid(amp_ctx_t *ctx, amp_tensor_t *x);
amp_tensor_t *amp_exp(amp_ctx_t *ctx, amp_tensor_t *x);
amp_tensor_t *amp_log(amp_ctx_t *ctx, amp_tensor_t *x);
amp_tensor_t *amp_log1p(amp_ctx_t *ctx, amp_tensor_t *x); // log(1 + x), exact near 0
amp_tensor_t *amp_pow(amp_ctx_t *ctx, amp_tensor_t *x, float exponent);
amp_tensor_t *amp_clamp_min(amp_ctx_t *ctx, amp_tensor_t *x, float min);

amp_tensor_t *amp_softmax(amp_ctx_t *ctx, amp_tensor_t *x, int dim);
amp_tensor_t *amp_log_softmax(amp_ctx_t *ctx, amp_tensor_t *x, int dim);
// Normalises over the last dim; w and b (C) may be NULL.
amp_tensor_t *amp_layer_norm(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b,
                             float eps);
// idx (...) i32/i64, w (V, C) -> (..., C)
amp_tensor_t *amp_embedding(amp_ctx_t *ctx, amp_tensor_t *idx, amp_tensor_t *w);

// Elementwise with broadcasting (numpy rules) and PyTorch type promotion: an integer tensor with
// a floating one is cast to the floating dtype (no gradient flows to it); div of two integer
// tensors is true division in f32 (PyTorch's default dtype). add, sub and mul of two integer
// tensors (an integer tensor in PyTorch) are not computed: they abort. The scalar ops take their
// scalar as a float: an integer x gives f32, as in PyTorch.
amp_tensor_t *amp_add(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);
amp_tensor_t *amp_sub(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);
amp_tensor_t *amp_mul(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);
amp_tensor_t *amp_div(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b);
amp_tensor_t *amp_add_scalar(amp_ctx_t *ctx, amp_tensor_t *x, double s);
amp_tensor_t *amp_mul_scalar(amp_ctx_t *ctx, amp_tensor_t *x, double s);

amp_tensor_t *amp_sum(amp_ctx_t *ctx, amp_tensor_t *x);  // all elements -> 0-dim
amp_tensor_t *amp_mean(amp_ctx_t *ctx, amp_tensor_t *x); // all elements -> 0-dim
// Where mask (i32, broadcastable to x) is non-zero, value (e.g. -INFINITY for a causal mask). A
// finite value beyond an f16/bf16 result's range (-1e9 in f16) aborts with PyTorch's message, as
// does one that an i32/i64 result cannot hold (inf, NaN, beyond its range).
amp_tensor_t *amp_masked_fill(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *mask, float value);
// Zeroes elements with probability p and scales the rest by 1/(1-p); identity when !training.
// An integer x aborts when training with p > 0 (PyTorch raises: it scales a mask of x's dtype by
// 1/(1-p) in place).
amp_tensor_t *amp_dropout(amp_ctx_t *ctx, amp_tensor_t *x, float p, bool training);

// Losses (mean reduction). logits (N, C), target (N) i32/i64 class indices. cross_entropy and
// nll_loss have PyTorch's defaults: a target of -100 (ignore_index: padding) is skipped, the loss
// is the mean over the other rows, NaN when every row is skipped (or N = 0), and such a row gets a
// zero gradient. Any other target outside [0, C) aborts on the CPU and gives a NaN loss on CUDA.
amp_tensor_t *amp_cross_entropy(amp_ctx_t *ctx, amp_tensor_t *logits, amp_tensor_t *target);
amp_tensor_t *amp_nll_loss(amp_ctx_t *ctx, amp_tensor_t *logp, amp_tensor_t *target);
amp_tensor_t *amp_mse_loss(amp_ctx_t *ctx, amp_tensor_t *input, amp_tensor_t *target);
// Banned under autocast exactly as in PyTorch (AMP_ERR_AUTOCAST_BANNED); else *out = BCE (mean).
// A NULL ctx, p, target or out is AMP_ERR_INVALID_ARGUMENT.
// On the CPU, p outside [0, 1] (NaN included) is AMP_ERR_INVALID_ARGUMENT ("all elements of input
// should be between 0 and 1"); on CUDA it is not checked (it would wait for the device: PyTorch
// checks it in the kernel), and the loss is NaN.
amp_status amp_binary_cross_entropy(amp_ctx_t *ctx, amp_tensor_t *p, amp_tensor_t *target,
                                    amp_tensor_t **out);

// Views share storage with their input (gradients flow through them). reshape gives a view where
// PyTorch's does (x's strides allow the new shape), else a copy; one -1 allowed in shape.
amp_tensor_t *amp_reshape(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape);
amp_tensor_t *amp_transpose(amp_ctx_t *ctx, amp_tensor_t *x, int d0, int d1);
amp_tensor_t *amp_permute(amp_ctx_t *ctx, amp_tensor_t *x, const int *perm);
// torch.split(x, size, dim): the first max of its views into out; returns how many views
// torch.split gives (ceil(len / size); one empty view of a dimension of length 0), which may be
// more than max, as snprintf returns the length it would have written.
int amp_split(amp_ctx_t *ctx, amp_tensor_t *x, int64_t size, int dim, amp_tensor_t **out, int max);
amp_tensor_t *amp_contiguous(amp_ctx_t *ctx, amp_tensor_t *x);
// x.to(dtype); differentiable (the gradient is cast back) to a floating dtype. An integer result
// is not differentiable, as in PyTorch: it requires no grad and no gradient flows back through it.
amp_tensor_t *amp_to(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype t);

// ---------------------------------------------------------------------------------------------
// Numerics of one tensor, in one pass (what the instrumentation records per layer)

typedef struct amp_stats {
    int64_t numel;
    float min, max, amax; // over the finite values; NaN when none is finite
    int64_t n_nan, n_posinf, n_neginf;
    int64_t n_overflow;  // finite values that round to inf in the target dtype
    int64_t n_underflow; // non-zero values that round to zero or a subnormal in the target dtype
    int64_t n_zero;
    double sumsq; // sum of the squares of the finite values
} amp_stats;

// Statistics of t relative to target (AMP_DTYPE_F16 or AMP_DTYPE_BF16; f32 counts nothing as
// overflow or underflow).
void amp_tensor_stats(const amp_tensor_t *t, amp_dtype target, amp_stats *out);

// ---------------------------------------------------------------------------------------------
// Autograd

// Backpropagates from a scalar (numel 1) tensor, seeding its gradient with 1. Gradients
// accumulate into persistent tensors that require grad. A tensor that a backward reads (an input
// of mul, the output of exp) and that was written since the op ran (amp_tensor_write*, an
// optimizer step, through any view of its storage) aborts with PyTorch's message "one of the
// variables needed for gradient computation has been modified by an inplace operation". As in
// PyTorch, a matmul, conv2d or mul reads each operand only for the other's gradient: a weight
// whose input needs none (the data) may be written between the forward and the backward. A
// second backward that reaches a node whose backward has run and read something (exp, mul, a
// matmul; not add, sum or a cast) aborts with PyTorch's "Trying to backward through the graph a
// second time" (there is no retain_graph: run the forward again).
void amp_backward(amp_ctx_t *ctx, amp_tensor_t *loss);
// torch.no_grad(): ops record no tape while disabled. Returns the previous setting.
bool amp_set_grad_enabled(amp_ctx_t *ctx, bool enabled);

#ifdef __cplusplus
}
#endif
#endif // AMP_H
