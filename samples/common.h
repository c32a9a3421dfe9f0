/*
 * common.h — what the three sample programs (mlp, simple_cnn, tiny_gpt) share: the command line
 * (common flags plus each model's shape flags), the fault catalogue (--fault), deterministic
 * synthetic data helpers, parameter and Linear-layer helpers, and the training loop (autocast per
 * precision, GradScaler, optimizer, checkpoint, one printed line per step).
 *
 * A sample's main() reads:
 *
 *     sample_opts o;
 *     int rc = sample_parse_args(&spec, argc, argv, &o);  // --help, or a bad flag: exit code
 *     if (rc != SAMPLE_CONTINUE) return rc;
 *     if (!model_memory_fits(&o)) return 1;                // sample_memory_fits: message printed
 *     amp_ctx_t *ctx = sample_ctx_new(&o);                 // NULL: message printed
 *     if (!ctx) return 1;
 *     model m; model_init(&m, ctx, &o);                     // parameters and data
 *     rc = sample_train(&o, ctx, &m.params, model_loss, &m);
 *     model_free(&m);
 *     amp_ctx_free(ctx);
 *     return rc;
 *
 * The faults reproduce the classic AMP failures through the numerics (never by editing statistics
 * or bypassing the GradScaler); the table in common.c documents each one, and --help prints it.
 */
#ifndef SAMPLES_COMMON_H
#define SAMPLES_COMMON_H

#include "amp-train.h"
#include "amp.h"

// ---------------------------------------------------------------------------------------------
// Faults (--fault NAME)

typedef enum sample_fault {
    SAMPLE_FAULT_NONE,
    SAMPLE_FAULT_ATTN_OVERFLOW,  // tiny_gpt only: attention logits of one block exceed 65504
    SAMPLE_FAULT_GRAD_UNDERFLOW, // mis-normalised loss: gradients below fp16's 2^-24
    SAMPLE_FAULT_NAN_INPUT,      // one NaN in one input batch
    SAMPLE_FAULT_LOG_ZERO,       // hand-written cross-entropy takes log(0)
    SAMPLE_FAULT_SCALE_THRASH,   // GradScaler grows every step and backs off: sawtooth
} sample_fault;

#define SAMPLE_ATTN_OVERFLOW_STEP 3   // first step whose attention logits overflow
#define SAMPLE_ATTN_OVERFLOW_GAIN 1e6 // replaces 1/sqrt(d_head): q.k of 0.066 becomes > 65504
#define SAMPLE_NAN_INPUT_STEP 5       // the one step whose input carries a NaN
#define SAMPLE_LOG_ZERO_STEP 5        // first step whose logits are scaled into log(0)
#define SAMPLE_LOG_ZERO_GAIN 1e4     // a target logit 0.011 below the max gets probability 0 in f32
#define SAMPLE_UNDERFLOW_FACTOR 1e-8 // every logit gradient <= 1e-8 < 2^-25: rounds to 0 in fp16

// ---------------------------------------------------------------------------------------------
// Command line

typedef struct sample_opts {
    amp_device device;
    amp_dtype precision; // F32 (no autocast), F16 (autocast + GradScaler), BF16 (autocast)
    int64_t steps, batch;
    uint64_t seed;
    double lr;     // a double, as torch.optim's
    bool lr_given; // --lr given (else the spec's default for the optimizer)
    amp_optim_kind optimizer;
    float init_scale;    // 0: not given (65536, or what the fault sets)
    int growth_interval; // 0: not given (2000, or what the fault sets)
    sample_fault fault;
    const char *save_path; // NULL: do not save
    const char *load_path; // NULL: start from the initialisation
    bool quiet;            // only the final line
    const char *prog;      // "mlp", prefixes every message
} sample_opts;

// A model-specific integer flag (--image, --layers): value holds the default and gets the
// parsed value, which must be a positive multiple of multiple_of.
typedef struct sample_int_flag {
    const char *name; // "--image"
    const char *help;
    int64_t *value;
    int64_t multiple_of;
} sample_int_flag;

typedef struct sample_spec {
    const char *name;     // program name, "mlp"
    const char *summary;  // one line for --help
    int64_t steps, batch; // defaults
    double lr_adam;       // default --lr for adam and adamw
    double lr_sgd;        // default --lr for sgd (momentum 0.9)
    bool has_attention;   // accepts --fault attn-overflow
    const sample_int_flag *shape_flags;
    int n_shape_flags;
} sample_spec;

#define SAMPLE_CONTINUE (-1) // sample_parse_args: go on and train

// Parses argv into *o (defaults from spec). Returns SAMPLE_CONTINUE, 0 after --help, 2 after
// printing one line "name: --flag: what was wrong" on stderr, or 1 after printing that --save's
// path cannot be written (checked now, so that no run trains for a checkpoint it cannot save).
int sample_parse_args(const sample_spec *spec, int argc, char **argv, sample_opts *o);
// A constraint between flags that a model checks after parsing: prints "name: flag: message" on
// stderr and returns 2 (the exit code).
int sample_usage_error(const sample_opts *o, const char *flag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// The context on o->device, seeded with o->seed; NULL after printing amp_last_error().
amp_ctx_t *sample_ctx_new(const sample_opts *o);

// ---------------------------------------------------------------------------------------------
// Memory: sizes that come from flags, checked before anything is allocated

// a * b and a + b for sizes (a, b >= 0), saturating at INT64_MAX instead of overflowing: a
// saturated size is more than any allocation can give, and is reported as such.
int64_t sample_mul(int64_t a, int64_t b);
int64_t sample_add(int64_t a, int64_t b);

// Bytes a model's parameters cost while it trains, at least: `floats` in all, in `tensors`
// tensors, each with the library's records of it (so that --depth 1000000000 of width 1 counts
// too), its gradient and the optimizer's state (o->optimizer: Adam's exp_avg and exp_avg_sq, SGD's
// momentum buffer), and under autocast (fp16, bf16) the 16-bit copies of the `cast_floats` of them
// that lower-precision ops (linear, conv2d) read. All of these are held at once at the optimizer
// step: the copies from the forward are freed only after it, and the optimizer writes the next
// step's from the updated weights.
int64_t sample_param_bytes(const sample_opts *o, int64_t floats, int64_t tensors,
                           int64_t cast_floats);

// Some memory a run holds at once (a lower bound), what it is and the flags that size it.
typedef struct sample_mem_part {
    const char *what; // "the data (4 batches of --batch x --width floats)"
    int64_t bytes;    // INT64_MAX: more than a 64-bit size holds
} sample_mem_part;

// Whether the parts fit together; false after printing one line, "prog: out of memory: ...",
// that names the largest part. The library aborts when a tensor's storage cannot be allocated,
// so a sample adds up what its flags ask for before it makes a tensor: on the CPU it maps the
// total once, untouched (the kernel refuses at once what it could never back); on CUDA, whose
// memory the host cannot probe, only a total that overflows 64 bits is caught.
bool sample_memory_fits(const sample_opts *o, const sample_mem_part *parts, int n);

// calloc(count, size) for host buffers: on failure, or when count x size overflows, prints
// "prog: out of memory allocating WHAT (N bytes)" and exits with status 1, the status of an
// error the library reports (never abort(), which says nothing and dumps core).
void *sample_calloc(const char *what, int64_t count, size_t size);

// ---------------------------------------------------------------------------------------------
// Deterministic host random numbers for the synthetic data (splitmix64)

typedef struct sample_rng {
    uint64_t state;
} sample_rng;

sample_rng sample_rng_new(uint64_t seed, uint64_t stream);
uint64_t sample_rng_next(sample_rng *r);
int32_t sample_rng_below(sample_rng *r, int32_t n); // uniform in [0, n)
float sample_rng_uniform(sample_rng *r);            // uniform in [0, 1)
float sample_rng_normal(sample_rng *r);             // N(0, 1)

// The data set: a few batches made once, persistent (they stay on the device), cycled through.
#define SAMPLE_DATA_BATCHES 4

typedef struct sample_batch {
    amp_tensor_t *x; // model input (float features or i32 tokens)
    amp_tensor_t *y; // i32 targets
} sample_batch;

// Frees every batch's tensors.
void sample_data_free(sample_batch data[SAMPLE_DATA_BATCHES]);

// ---------------------------------------------------------------------------------------------
// Parameters

typedef struct sample_params {
    amp_tensor_t **t;
    int n, cap;
} sample_params;

// A new zero-filled f32 parameter that requires grad, named (checkpoints match by name) and
// appended to ps.
amp_tensor_t *sample_param(sample_params *ps, amp_ctx_t *ctx, const char *name, int ndim,
                           const int64_t *shape);
// Frees every parameter and the list.
void sample_params_free(sample_params *ps);

// nn.Linear: weight (out, in) and bias (out), both U(-1/sqrt(in), 1/sqrt(in)) like PyTorch.
typedef struct sample_linear {
    char layer[32]; // layer name relative to the enclosing layer ("qkv")
    amp_tensor_t *w, *b;
} sample_linear;

// prefix ("" or "blocks.0.attn") qualifies the parameter names: "blocks.0.attn.qkv.weight".
void sample_linear_init(sample_linear *l, sample_params *ps, amp_ctx_t *ctx, const char *prefix,
                        const char *layer, int64_t in, int64_t out, bool bias);
typedef enum sample_act { SAMPLE_ACT_NONE, SAMPLE_ACT_GELU } sample_act;

// x (..., in) -> act(x W^T + b) (..., out), inside the layer's own name.
amp_tensor_t *sample_linear_forward(amp_ctx_t *ctx, const sample_linear *l, amp_tensor_t *x,
                                    sample_act act);

// ---------------------------------------------------------------------------------------------
// One training step, as the model's loss function sees it

#define SAMPLE_STEP_MAX_TEMPS 4

typedef struct sample_step {
    amp_ctx_t *ctx;
    const sample_opts *opts;
    int64_t index; // the step's number: from 0, after --load from the checkpoint's step count
    amp_tensor_t *temps[SAMPLE_STEP_MAX_TEMPS]; // persistent tensors freed when the step ends
    int n_temps;
} sample_step;

// The batch this step trains on.
const sample_batch *sample_step_batch(const sample_step *s,
                                      const sample_batch data[SAMPLE_DATA_BATCHES]);
// Whether fault f acts on this step (the one step of nan-input, every step from the first
// faulty one for the others).
bool sample_fault_now(const sample_step *s, sample_fault f);
// A float input batch as the model sees it: x itself, or on --fault nan-input's step a copy whose
// first element is NaN.
amp_tensor_t *sample_input(sample_step *s, amp_tensor_t *x);
// For inputs that are not floats (tokens): zeros of this shape with a NaN in element 0, to add
// where floats first enter; only on --fault nan-input's step, else NULL.
amp_tensor_t *sample_nan_input(sample_step *s, int ndim, const int64_t *shape);
// Classification loss on fp32 logits (N, C) (cast here) and i32 targets (N): amp_cross_entropy,
// or under --fault log-zero the hand-written -mean(log(softmax(logits)[target])).
amp_tensor_t *sample_loss(sample_step *s, amp_tensor_t *logits, amp_tensor_t *target);

// Computes the scalar f32 loss of one step (called inside the autocast region).
typedef amp_tensor_t *(*sample_loss_fn)(void *model, sample_step *s);

// The training loop: --load, o->steps steps (zero_grad, forward + loss under autocast, scaled
// backward, scaler step and update, step end, reset), one line per step, the summary, --save.
// After --load the steps are numbered on from the checkpoint's count of optimizer steps (printed,
// recorded, and what the faults' steps and the data batches go by).
// Returns the exit code: 0, or 1 after printing amp_last_error() when a call failed.
int sample_train(const sample_opts *o, amp_ctx_t *ctx, const sample_params *ps, sample_loss_fn loss,
                 void *model);

#endif // SAMPLES_COMMON_H
