/*
 * amp-impl.h — libampcore internals: the tensor and context structs, the autograd node, the
 * backend table every device implements, and the assertion macro. Not installed.
 *
 * The frontend (tensor.c, ops_*.c, autograd.c, autocast.c) decides dtypes and shapes, allocates
 * outputs and records the tape; a backend only computes, on contiguous tensors unless a member
 * says otherwise. All floating math is done in f32 (PyTorch's opmath) and rounded once to the
 * output dtype with round-to-nearest-even.
 */
#ifndef AMP_IMPL_H
#define AMP_IMPL_H

#include "amp-train.h"
#include "amp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Broken invariants abort with file:line (the library never calls exit()).

typedef void (*amp_abort_hook)(const char *msg);
// Installs a hook called with the message before abort(); returns the previous one.
amp_abort_hook amp_set_abort_hook(amp_abort_hook hook);
_Noreturn void amp_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

_Noreturn void amp_abort_assert(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// amp_abort's last words (record.c): when the process records, msg goes in as META `abort` and
// the buffered records are written out before the abort, so that the report can say why the
// program died. Nothing is written when this thread already holds the record writer's locks
// (an abort inside it) or another thread does.
void amp_record_last_words(const char *msg);

// Records the statistics s of the tensor r names (step, layer, op, kind, dtypes: r's numbers are
// filled from s here), as libampcore's instrumentation and amp_record_tensor_stats_many do.
struct amp_rec_tensor_stats;
void amp_record_stats_of(struct amp_rec_tensor_stats *r, const amp_stats *s);

// AMP_ASSERT(cond) or AMP_ASSERT(cond, "(format)", args...)
#define AMP_ASSERT(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) amp_abort_assert(__FILE__, __LINE__, #cond, " " __VA_ARGS__);                 \
    } while (0)

// Sets the thread's last-error message and returns s.
amp_status amp_set_error(amp_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Empties it: the first thing every public function that returns an amp_status does (amp.h's
// amp_last_error: "" after a call that returned AMP_OK). Internal callers use the variants that
// leave it alone (amp_autocast_decision), so that an op does not empty the program's message.
void amp_clear_error(void);
// The thread's message saved and put back around the library's own calls of functions that set
// or empty it, where the call the program made returns no status (amp_record_stop, an op's first
// record: those leave amp_last_error() as it was).
typedef struct amp_error_kept {
    char msg[1024];
} amp_error_kept;
void amp_error_keep(amp_error_kept *k);
void amp_error_put_back(const amp_error_kept *k);
// amp_autocast_decide without amp_clear_error (for ops).
amp_status amp_autocast_decision(const char *op, int n, const amp_dtype *in,
                                 amp_dtype autocast_dtype, amp_dtype *out);

void *amp_xmalloc(size_t n) __attribute__((returns_nonnull)); // aborts on failure
void *amp_xcalloc(size_t n, size_t m) __attribute__((returns_nonnull));
void *amp_xrealloc(void *p, size_t n) __attribute__((returns_nonnull));
// Makes room for one more element in a growable array arr of n used and cap allocated elements
// (doubling, 64 at first).
#define AMP_GROW(arr, n, cap)                                                                      \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? 2 * (cap) : 64;                                                        \
            (arr) = amp_xrealloc((arr), (cap) * sizeof *(arr));                                    \
        }                                                                                          \
    } while (0)
// *sum += n, held at INT64_MAX/INT64_MIN (sums of what a damaged database holds).
static inline void amp_add_sat(int64_t *sum, int64_t n) {
    if (__builtin_add_overflow(*sum, n, sum)) *sum = n > 0 ? INT64_MAX : INT64_MIN;
}
char *amp_xstrdup(const char *s) __attribute__((returns_nonnull));
// The length of the valid UTF-8 sequence at s of at most n bytes (SIZE_MAX for a NUL-terminated
// string: the NUL ends a sequence): 1 to 4, 0 when there is none (a stray continuation byte, a
// sequence cut short, an overlong form, a surrogate, a code point beyond U+10FFFF).
size_t amp_utf8_seq(const char *s, size_t n);
// len, or less: the length of s's first len bytes without the UTF-8 character that s[len]
// continues (one that would be split there).
size_t amp_utf8_cut(const char *s, size_t len);
// printf into buf[n] at offset k (the length of what is there): returns k plus what was
// written, or would have been, so that a cut text stays cut (k >= n: nothing is written).
size_t amp_appendf(char *buf, size_t n, size_t k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
size_t amp_vappendf(char *buf, size_t n, size_t k, const char *fmt, va_list ap);
// Whether s starts with a C1 control character (U+0080..U+009F, two bytes in UTF-8: CSI, NEL,
// ... which terminals act on): what prints text from elsewhere shows it as the C0 controls.
bool amp_c1_control(const char *s);
// qsort(3) of n elements at base, which may be NULL when n is 0 (qsort's may not, even then).
static inline void amp_sort(void *base, size_t n, size_t size,
                            int (*cmp)(const void *, const void *)) {
    if (n > 1) qsort(base, n, size, cmp);
}
// bsearch(3) for key among the n sorted elements at base, which may be NULL when n is 0.
static inline void *amp_search(const void *key, const void *base, size_t n, size_t size,
                               int (*cmp)(const void *, const void *)) {
    return n ? bsearch(key, base, n, size, cmp) : NULL;
}
// s with each control character (a newline, the escape of a terminal sequence) made '?', in
// place: a message that quotes a file name or SQLite's words stays one plain line. Returns s.
char *amp_one_line(char *s);
// A new directory named prefix + six characters mkdtemp(3) picks: its path in buf (n bytes), or
// NULL with errno set (ENAMETOOLONG when the name does not fit).
char *amp_make_temp_dir(char *buf, size_t n, const char *prefix);
// CRC-32 (IEEE, as zlib's) of n bytes: a checkpoint's trailer (checkpoint.c).
uint32_t amp_crc32(const void *data, size_t n);
// The last component of path (path itself when it has no '/').
static inline const char *amp_base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}
// s as a number of steps (AMPPROBE_STATS_EVERY, --stats-every): digits only, 1 to INT_MAX, into
// *out. NULL when it is one, else why not ("expected a positive number of steps", "too large").
const char *amp_parse_count(const char *s, int *out);
// s as AMPPROBE_TRACE and --trace take it: a comma list of amp, cuda and nvtx, into *mask
// (AMP_TRACE_* of amp-record.h). False for anything else (an empty list, another word).
bool amp_parse_trace(const char *s, unsigned *mask);
// The names of a trace mask as --trace spells them, each once and in order ("amp,cuda,nvtx").
void amp_trace_names(unsigned mask, char *out, size_t n);
// "dir/name", malloc'd (aborts on failure).
char *amp_path_join(const char *dir, const char *name) __attribute__((returns_nonnull));
// argv as a shell would read it back: words joined by spaces, each one with characters beyond
// [A-Za-z0-9-_./=:,+@%] (or empty) in single quotes ('\'' for a quote); malloc'd.
char *amp_shell_join(char *const *argv) __attribute__((returns_nonnull));
// The folder of the running binary (/proc/self/exe without its last component) in buf (n
// bytes), or NULL when it cannot be read or does not fit.
char *amp_exe_dir(char *buf, size_t n);

// f16 -> f32 of every bit pattern (filled when the library loads): a lookup instead of
// amp_f16_to_f32's branches on hot paths. Identical results by construction.
extern float amp_f16_table[65536];
static inline float amp_f16_to_f32_fast(uint16_t h) {
    return amp_f16_table[h];
}

// Element i of host memory p holding dtype t, as f32 (integers converted).
static inline float amp_load_f32(amp_dtype t, const void *p, int64_t i) {
    switch (t) {
    case AMP_DTYPE_F32:
        return ((const float *)p)[i];
    case AMP_DTYPE_F16:
        return amp_f16_to_f32_fast(((const uint16_t *)p)[i]);
    case AMP_DTYPE_BF16:
        return amp_bf16_to_f32(((const uint16_t *)p)[i]);
    case AMP_DTYPE_I32:
        return (float)((const int32_t *)p)[i];
    case AMP_DTYPE_I64:
        return (float)((const int64_t *)p)[i];
    default:
        break;
    }
    amp_abort(__FILE__, __LINE__, "bad dtype %d", (int)t);
}

// ---------------------------------------------------------------------------------------------
// Storage and tensors

typedef struct amp_buffer {
    int refcount;
    void *data; // backend memory (host for the CPU backend); NULL once dropped (amp_tensor_drop)
    size_t nbytes;
    bool droppable; // an op's output, not a gradient nor persistent, not dropped yet
    // dropped while backward nodes of the tape read it; how many of them have yet to run, counted
    // when a backward starts (amp_backward_count_dropped)
    bool drop_pending;
    int32_t readers_left;
    // bumped by every write that is not an op's (host writes, optimizer steps): which values an
    // autocast copy made ahead was made from (amp_tensor.precast)
    uint32_t version;
} amp_buffer;

struct amp_node;

struct amp_tensor {
    amp_ctx_t *ctx;
    amp_dtype dtype;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t stride[AMP_MAX_DIMS]; // elements; 0 on broadcast dims of an expanded view
    int64_t offset;               // elements from buf->data
    amp_buffer *buf;
    // a contiguous copy amp_dense made of a view: the storage it copied (a reference held) and
    // that storage's version then, so that a backward that reads the copy still aborts when the
    // original was written since (PyTorch saves the view itself)
    amp_buffer *copy_of;
    uint32_t copy_of_version;
    bool persistent;    // made by amp_tensor_new*(), freed by amp_tensor_free()
    int32_t optim_refs; // optimizers holding it (a parameter or their state): not freed
    bool requires_grad;
    bool is_view;
    bool is_grad; // a gradient buffer (survives the backward node that made it)
    // accumulated gradient (same shape, contiguous), in t's dtype or, for a leaf or a tensor
    // whose node reads any dtype (amp_node.narrow_dy), a narrower float one holding the values
    // exactly (a widening cast's backward hands its gradient on): amp_tensor_grad() widens it
    amp_tensor_t *grad;
    struct amp_node *node; // the op that produced it; NULL for leaves
    int32_t layer;         // layer id of the producing op (-1: none)
    char *name;
    int8_t inf_fill; // -1/+1: holds -inf/+inf on purpose (an attention mask)
    // An f32 parameter that autocast's cached cast lowered (precast_want: the dtype of the last
    // region's cast): the optimizer step that updates it also writes its value in that dtype into
    // precast, the next region's cast made ahead (amp_precast_take), valid while precast_version
    // is buf->version. Bit for bit the cast (one rounding of the same f32 value), without reading
    // the f32 weights again. precast_wanted: a region cast it since the last copy was written (a
    // parameter no region casts between two steps gets no copy, and gives its storage back).
    bool precast_wanted;
    amp_dtype precast_want;
    amp_buffer *precast; // the copy, in precast_dtype
    amp_dtype precast_dtype;
    uint32_t precast_version;
    // instrumentation bookkeeping (instrument.c): the statistics entry of this tensor and the
    // backward entries that contributed to its gradient, valid while *_epoch is current
    // and the entry holding the statistics of its gradient as last written (grad_entry, valid
    // while grad_epoch and the backward pass grad_backward are current; -1: none)
    uint32_t stat_epoch, contrib_epoch, grad_epoch;
    int32_t stat_entry, grad_entry, grad_backward;
    uint8_t n_contrib;
    int32_t contrib[4];
};

// Elements of t by its shape (amp_tensor_numel, inline for the backends, which do not link the
// frontend).
static inline int64_t amp_numel(const amp_tensor_t *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

// Whether t is laid out row-major with no gaps (size-1 dims' strides free), and the row-major
// strides of a shape: inline for the backends.
static inline bool amp_is_contiguous(const amp_tensor_t *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

static inline void amp_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
}

// The dims of a loop over nops operands of one shape (their strides), fewest: size-1 dims left
// out, a dim merged into the one outside it where every operand steps over it evenly. Writes the
// loop's shape and each operand's strides; returns its dims (>= 1: a single element is one dim
// of 1, an empty shape one dim of 0).
static inline int amp_coalesce_dims(int ndim, const int64_t *shape, int nops,
                                    const int64_t *const *strides, int64_t *out_shape,
                                    int64_t (*out_stride)[AMP_MAX_DIMS]) {
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0) { // nothing to visit
            out_shape[0] = 0;
            return 1;
        }
        if (shape[d] == 1) continue;
        bool merge = nd > 0;
        for (int o = 0; o < nops && merge; o++)
            merge = strides[o][d] * shape[d] == out_stride[o][nd - 1];
        if (merge) {
            out_shape[nd - 1] *= shape[d];
            for (int o = 0; o < nops; o++)
                out_stride[o][nd - 1] = strides[o][d];
            continue;
        }
        out_shape[nd] = shape[d];
        for (int o = 0; o < nops; o++)
            out_stride[o][nd] = strides[o][d];
        nd++;
    }
    if (nd == 0) { // a single element
        out_shape[0] = 1;
        for (int o = 0; o < nops; o++)
            out_stride[o][0] = 0;
        return 1;
    }
    return nd;
}

// Host and device code: the CUDA backend's kernels use these too.
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define AMP_HD __host__ __device__
#else
#define AMP_HD
#endif

// v as a floating dtype t holds it (rounded to nearest even for f16 and bf16), back in f32.
static inline AMP_HD float amp_rounded(amp_dtype t, float v) {
#ifdef __CUDA_ARCH__
    if (t == AMP_DTYPE_F16) return __half2float(__float2half_rn(v));
    if (t == AMP_DTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
#else
    return amp_round_to(t, v);
#endif
}

// PyTorch's GELU constants, computed in double and rounded to float like its
// `constexpr opmath_t`.
#define AMP_GELU_SQRT1_2 ((float)M_SQRT1_2)
#define AMP_GELU_TANH_BETA ((float)(M_SQRT2 * M_2_SQRTPI * 0.5)) // sqrt(2/pi)
#define AMP_GELU_TANH_KAPPA 0.044715f
#define AMP_GELU_PDF_BETA ((float)(M_2_SQRTPI * M_SQRT1_2 * 0.5)) // 1/sqrt(2 pi)

// The target that nll_loss and cross_entropy skip: PyTorch's default ignore_index (padding).
#define AMP_NLL_IGNORE_INDEX (-100)

// x ** e for an element of a tensor of dtype t as PyTorch's CUDA kernel computes it (before the
// result is rounded to t). The exponent is a double, as PyTorch's Scalar is: 0 and 1 give 1 and
// x, 0.5, -0.5 and -1 go to sqrt, rsqrt (CUDA's rsqrtf on the GPU, 1 / sqrt on the CPU as
// PyTorch's CPU kernel) and the reciprocal; any other exponent is first rounded to t, then 2, 3
// and -2 are x * x, x * x * x and 1 / (x * x), each product of two values of t rounded to t
// (at::Half and at::BFloat16 arithmetic), and the rest powf.
static inline AMP_HD float amp_pow_scalar(float x, double e, amp_dtype t) {
    if (e == 0.0) return 1.0f;
    if (e == 1.0) return x;
    if (e == 0.5) return sqrtf(x);
#ifdef __CUDA_ARCH__
    if (e == -0.5) return rsqrtf(x);
#else
    if (e == -0.5) return 1.0f / sqrtf(x);
#endif
    if (e == -1.0) return 1.0f / x;
    const float et = amp_rounded(t, (float)e);
    if (et == 2.0f) return x * x;
    if (et == 3.0f) return amp_rounded(t, x * x) * x;
    if (et == -2.0f) return 1.0f / amp_rounded(t, x * x);
    return powf(x, et);
}

// PyTorch's pow_backward, dy * (e * x ** (e - 1)) for an element of a tensor of dtype t: three
// tensor ops, each result rounded to t (the last one by the caller's store); 0 for e == 0.
static inline AMP_HD float amp_pow_backward_scalar(float dy, float x, float e, amp_dtype t) {
    if (e == 0.0f) return 0.0f;
    const float p = amp_rounded(t, amp_pow_scalar(x, (double)e - 1.0, t));
    return dy * amp_rounded(t, e * p);
}

// Pointer to the first element of t (offset applied).
static inline void *amp_tensor_ptr(const amp_tensor_t *t) {
    return (char *)t->buf->data + t->offset * (int64_t)amp_dtype_size(t->dtype);
}

// Whether t's elements fill a run of memory exactly once in some order (a transpose or permute of
// a contiguous tensor), the run starting at t's first element: statistics, which do not depend on
// the order, can read the run (and a copy of t can add the run's held ones). Inline for the
// backends.
static inline bool amp_tensor_fills_run(const amp_tensor_t *t) {
    int64_t stride[AMP_MAX_DIMS], shape[AMP_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) { // by stride, the size-1 dims left out (insertion sort)
        if (t->shape[d] == 1) continue;
        if (t->stride[d] <= 0) return false; // broadcast
        int k = n++;
        for (; k > 0 && stride[k - 1] > t->stride[d]; k--) {
            stride[k] = stride[k - 1];
            shape[k] = shape[k - 1];
        }
        stride[k] = t->stride[d];
        shape[k] = t->shape[d];
    }
    int64_t expect = 1;
    for (int k = 0; k < n; k++) {
        if (stride[k] != expect) return false;
        expect *= shape[k];
    }
    return true;
}

// Scratch tensor with fresh contiguous, uninitialised storage (freed by amp_ctx_reset), and one
// filled with zeros.
amp_tensor_t *amp_scratch_new(amp_ctx_t *ctx, amp_dtype dt, int ndim, const int64_t *shape);
amp_tensor_t *amp_scratch_zeros(amp_ctx_t *ctx, amp_dtype dt, int ndim, const int64_t *shape);
// Frees the scratch tensors made since the list held `mark` of them, except gradient buffers
// (what one backward node leaves behind once it has run).
void amp_scratch_release_from(amp_ctx_t *ctx, size_t mark);
// Frees t's storage now (t stays a valid, empty struct until amp_ctx_reset).
void amp_tensor_release_storage(amp_tensor_t *t);
// Storage dropped with amp_tensor_drop while backward nodes read it goes after the last of them
// has run: when a backward starts, its readers on the tape are counted; after node n's backward,
// the dropped storage it was the last to read is freed (a node that ran is consumed: a second
// backward through it aborts before it could read what went).
void amp_backward_count_dropped(amp_ctx_t *ctx);
void amp_node_release_dropped(amp_ctx_t *ctx, const struct amp_node *n);
// The autocast copy of an f32 parameter made ahead by the optimizer (amp_tensor.precast):
// amp_precast_want notes that the region cast p to t (at the region's end); amp_precast_target
// gives the tensor the optimizer step writes p's new value into (a struct of the caller's, p's
// shape, on storage that no tensor of the tape shares: a fresh buffer when the old one is still
// read), or NULL (giving back the old copy's storage) when no region cast p since the last copy;
// amp_precast_written marks p updated (and the copy, when `written`, made from its new value);
// amp_precast_take gives a scratch tensor on the copy when it holds p's values in dtype t, else
// NULL.
void amp_precast_want(amp_tensor_t *p, amp_dtype t);
amp_tensor_t *amp_precast_target(amp_tensor_t *p, amp_tensor_t *out);
void amp_precast_written(amp_tensor_t *p, bool written);
amp_tensor_t *amp_precast_take(amp_ctx_t *ctx, amp_tensor_t *p, amp_dtype t);
// Scratch view sharing x's storage with the given shape/strides/offset.
amp_tensor_t *amp_view_new(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset);
bool amp_same_shape(const amp_tensor_t *a, const amp_tensor_t *b);
// "(8, 64)" into buf: t's shape, or the dims of a shape; AMP_SHAPE_STR_MAX bytes hold any.
#define AMP_SHAPE_STR_MAX 160
const char *amp_shape_str(const amp_tensor_t *t, char *buf, size_t n);
const char *amp_dims_str(int ndim, const int64_t *shape, char *buf, size_t n);
// Aborts, naming the shape, unless a tensor of dtype dt can have it: no dim negative, and the
// product of the dims (a zero counted as one, so that no partial product overflows either: numel,
// strides, byte offsets) times the dtype's size fits in int64.
void amp_check_shape(amp_dtype dt, int ndim, const int64_t *shape);

// ---------------------------------------------------------------------------------------------
// Autograd nodes

typedef struct amp_node amp_node;
// Receives the gradient of node->out (dy, contiguous, dtype of out, or a narrower floating dtype
// holding the same values where the node says it reads one: amp_node.narrow_dy) and accumulates
// the input gradients with amp_grad_accumulate(). Runs with grad recording and autocast disabled.
typedef void (*amp_backward_fn)(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy);

#define AMP_NODE_MAX_IN 4
// What a node's backward reads of the tensors it was recorded with (amp_node.reads):
// amp_tensor_drop keeps storage that a backward of the tape reads until that backward has run.
// Nodes read everything unless their op says less.
#define AMP_READS_IN(i) (1u << (i))
#define AMP_READS_OUT (1u << 4)
#define AMP_READS_SAVED(i) (1u << (8 + (i)))
#define AMP_READS_ALL 0x0F1Fu
struct amp_node {
    const char *op; // PyTorch op name ("linear", "softmax")
    amp_backward_fn backward;
    amp_tensor_t *out;
    amp_tensor_t *in[AMP_NODE_MAX_IN]; // the op's inputs after autocast casts
    int n_in;
    amp_tensor_t *saved[AMP_NODE_MAX_IN]; // extra tensors kept for backward
    float f[4];                           // op arguments
    int64_t i[4];
    int32_t layer;
    uint16_t reads; // AMP_READS_* bits: what the backward reads of in, out and saved
    // The versions of their storage (amp_buffer.version) when the node was recorded with in,
    // out and saved: the backward aborts when one that it reads has been written since (PyTorch's
    // "modified by an inplace operation").
    uint32_t in_version[AMP_NODE_MAX_IN], out_version, saved_version[AMP_NODE_MAX_IN];
    // The backward reads dy in any floating dtype: a widening cast's backward (an f32 softmax
    // output cast to f16 for a matmul) hands its incoming gradient on as out's first gradient
    // instead of widening it into a copy (the same values: widening is exact).
    bool narrow_dy;
    // Its backward has run and it reads something: as PyTorch frees a node's saved tensors after
    // its backward, a later backward reaching it aborts (gradients would count twice).
    bool consumed;
};

// Records out as produced by op (when grad is enabled and an input requires grad) and returns
// the node, or NULL when nothing is recorded.
amp_node *amp_node_record(amp_ctx_t *ctx, const char *op, amp_backward_fn bw, amp_tensor_t *out,
                          amp_tensor_t *const *in, int n_in);
// n->saved[k] = t (may be NULL), a tensor its backward reads, at the version its storage has now.
static inline void amp_node_save(amp_node *n, int k, amp_tensor_t *t) {
    n->saved[k] = t;
    n->saved_version[k] = t && t->buf ? t->buf->version : 0;
}
// t.grad += g (allocating t.grad as needed; g's shape must equal t's, dtype is cast). A first
// gradient that is a backward's own scratch output becomes t.grad itself, without a copy (g must
// not be written to afterwards).
void amp_grad_accumulate(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g);
// The same for the last use of dy, the gradient the running backward node received, by that node
// (g is dy or a view of it): a first gradient takes dy's storage over instead of a copy.
void amp_grad_accumulate_last(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g, amp_tensor_t *dy);
// A fresh gradient buffer for t (uninitialised, t's dtype and shape): t's own when t is
// persistent (in no list: t frees it), else scratch.
amp_tensor_t *amp_grad_new(amp_ctx_t *ctx, const amp_tensor_t *t);
// t.grad = g (t's own gradient struct, a persistent tensor's when t is one), freeing the old one.
void amp_grad_replace(amp_tensor_t *t, amp_tensor_t *g);
// A backward's buffer for x's gradient (scratch shaped like x), armed for the instrumentation
// (amp_instr_arm) when x takes a gradient: call it right before the backend call that writes it,
// and hand the buffer to amp_grad_accumulate.
amp_tensor_t *amp_grad_scratch(amp_ctx_t *ctx, const amp_tensor_t *x);
// t.grad's slice that starts at `start` along dim += g (the gradient of a split piece); t.grad
// starts as zeros.
void amp_grad_accumulate_slice(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g, int dim,
                               int64_t start);

// ---------------------------------------------------------------------------------------------
// The backend table (ggml-backend style). Every member is required unless marked optional.

typedef enum amp_unary_op {
    AMP_UNARY_RELU,
    AMP_UNARY_GELU,      // exact erf form
    AMP_UNARY_GELU_TANH, // tanh approximation
    AMP_UNARY_TANH,
    AMP_UNARY_SIGMOID,
    AMP_UNARY_EXP,
    AMP_UNARY_LOG,
    AMP_UNARY_LOG1P,      // log(1 + x), exact near 0 (binary_cross_entropy's log1p(-p))
    AMP_UNARY_POW,        // x ** alpha
    AMP_UNARY_SCALE,      // x * alpha
    AMP_UNARY_ADD_SCALAR, // x + alpha
    AMP_UNARY_CLAMP_MIN   // max(x, alpha); NaN stays NaN, gradient passes where x >= alpha
} amp_unary_op;

// What a unary op's backward reads besides dy: its input x (GELU, log, log1p, pow, clamp_min) or
// its output y (ReLU, tanh, sigmoid, exp); a scaling or an added scalar neither. The backends'
// unary backward and the autograd node (what amp_tensor_drop keeps) go by these.
static inline bool amp_unary_backward_needs_x(amp_unary_op op) {
    return op == AMP_UNARY_GELU || op == AMP_UNARY_GELU_TANH || op == AMP_UNARY_LOG ||
           op == AMP_UNARY_LOG1P || op == AMP_UNARY_POW || op == AMP_UNARY_CLAMP_MIN;
}
static inline bool amp_unary_backward_needs_y(amp_unary_op op) {
    return op == AMP_UNARY_RELU || op == AMP_UNARY_TANH || op == AMP_UNARY_SIGMOID ||
           op == AMP_UNARY_EXP;
}

typedef enum amp_binary_op {
    AMP_BINARY_ADD,
    AMP_BINARY_SUB,
    AMP_BINARY_MUL,
    AMP_BINARY_DIV
} amp_binary_op;

typedef struct amp_gemm_desc {
    int64_t batch, m, n, k;
    bool trans_a, trans_b; // A stored (m, k) or, transposed, (k, m); B (k, n) or (n, k)
    int64_t stride_a, stride_b, stride_c; // elements between batch items (0: shared)
    float alpha, beta;                    // C = alpha * op(A) op(B) + bias + beta * C
} amp_gemm_desc;

// conv2d makes the im2col columns of at most this many bytes at a time (a slice of the batch);
// 48 MiB, lowered by tests to reach the slicing with small tensors (ops-linalg.c).
extern int64_t amp_conv_cols_max;

typedef struct amp_conv_desc {
    int64_t n, c, h, w; // input (N, C, H, W)
    int64_t kh, kw;     // kernel
    int64_t oh, ow;     // output spatial size
    int stride, padding;
    bool by_row; // im2col: cols laid out (C*kh*kw, N, oh*ow), rows of all images together
} amp_conv_desc;

// What a scale update did, as the backend's scale_update writes it (i32 words; the scales are
// f32 bit patterns): the scale before and after, the summed found_inf, whether an optimizer that
// stepped had a non-finite gradient (its step was skipped), the growth tracker after.
enum {
    AMP_REC_BEFORE,
    AMP_REC_AFTER,
    AMP_REC_FOUND_INF,
    AMP_REC_SKIPPED,
    AMP_REC_TRACKER,
    AMP_SCALE_REC
};

typedef struct amp_backend_i {
    const char *name;

    // Memory. alloc returns uninitialised memory or NULL (every op overwrites its output; the
    // frontend fills what must start as zeros).
    void *(*alloc)(void *bctx, size_t nbytes);
    void (*free)(void *bctx, void *p);
    void (*upload)(void *bctx, void *dst, const void *host, size_t nbytes);
    void (*download)(void *bctx, void *host, const void *src, size_t nbytes);
    // Optional, all four or none (the instrumentation then downloads a step's statistics at its
    // end): host memory the device copies into without staging (pinned), a copy into it queued
    // behind the work queued so far without waiting, and a wait for the copies queued so far.
    void *(*host_alloc)(void *bctx, size_t nbytes);
    void (*host_free)(void *bctx, void *p);
    void (*download_async)(void *bctx, void *host, const void *src, size_t nbytes);
    void (*download_wait)(void *bctx);

    // dst (contiguous, same shape) = src (any strides, also 0) converted to dst's dtype.
    void (*copy)(void *bctx, amp_tensor_t *dst, const amp_tensor_t *src);
    void (*fill)(void *bctx, amp_tensor_t *dst, float v);

    // y = f(x) elementwise (x, y contiguous; dtypes may differ).
    void (*unary)(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *y, const amp_tensor_t *x);
    // dx = dy * f'(x); y = f(x) is passed too (sigmoid/tanh/exp use it). bias_cols > 0: dx is
    // the gradient of a linear's output with that many features, whose bias gradient the linear's
    // gemm_bgrad takes next, and the backend may sum dx's columns as it writes dx to give it then.
    void (*unary_backward)(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *dx,
                           const amp_tensor_t *dy, const amp_tensor_t *x, const amp_tensor_t *y,
                           int64_t bias_cols);
    // y = a op b, where a and b are views already expanded to y's shape (strides may be 0) and
    // y is contiguous or a view whose elements do not overlap (a slice of a gradient; a may be
    // that same view); dtypes may differ, math in f32.
    void (*binary)(void *bctx, amp_binary_op op, amp_tensor_t *y, const amp_tensor_t *a,
                   const amp_tensor_t *b);
    // y = alpha * sum of x over the dims where y's shape is 1 and x's is not (same ndim, both
    // contiguous); f32 accumulation.
    void (*reduce_sum)(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, float alpha);

    // Batched GEMM on contiguous A, B, C of one floating dtype; bias (n elements, C's dtype, may be
    // NULL) is added in f32 before the single rounding to C's dtype.
    void (*gemm)(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                 const amp_tensor_t *b, const amp_tensor_t *bias);
    // Optional (NULL: the frontend sums the rows itself). C (m, n) = A^T B as gemm (batch 1,
    // trans_a, alpha 1, beta 0, no bias), and bgrad (m elements, C's dtype) = the sum of A's rows
    // in f32, rounded once: a linear's weight gradient dy^T x and its bias gradient in one pass.
    void (*gemm_bgrad)(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                       const amp_tensor_t *b, amp_tensor_t *bgrad);

    // Softmax / log-softmax over the last dim (rows = numel / last dim). y may be wider (f32).
    void (*softmax)(void *bctx, bool log, amp_tensor_t *y, const amp_tensor_t *x);
    // dx = softmax backward given y and dy.
    void (*softmax_backward)(void *bctx, bool log, amp_tensor_t *dx, const amp_tensor_t *dy,
                             const amp_tensor_t *y);
    // Over the last dim; mean and rstd (f32, one per row) are written for backward. w, b optional.
    void (*layer_norm)(void *bctx, amp_tensor_t *y, amp_tensor_t *mean, amp_tensor_t *rstd,
                       const amp_tensor_t *x, const amp_tensor_t *w, const amp_tensor_t *b,
                       float eps);
    // dx = input gradient; dw, db (may be NULL) are overwritten (not accumulated).
    void (*layer_norm_backward)(void *bctx, amp_tensor_t *dx, amp_tensor_t *dw, amp_tensor_t *db,
                                const amp_tensor_t *dy, const amp_tensor_t *x,
                                const amp_tensor_t *mean, const amp_tensor_t *rstd,
                                const amp_tensor_t *w);
    // y (..., C) = w[idx]; backward overwrites dw (V, C) with the scatter-add of dy.
    void (*embedding)(void *bctx, amp_tensor_t *y, const amp_tensor_t *idx, const amp_tensor_t *w);
    void (*embedding_backward)(void *bctx, amp_tensor_t *dw, const amp_tensor_t *dy,
                               const amp_tensor_t *idx);
    // cols (N, C*kh*kw, oh*ow) from x (N, C, H, W), or (C*kh*kw, N, oh*ow) with d->by_row, and
    // back from (N, C*kh*kw, oh*ow) (col2im overwrites dx, summing).
    void (*im2col)(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x);
    void (*col2im)(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx, const amp_tensor_t *cols);
    // y (N, C, oh, ow) = max over kernel windows; argmax (i32, same shape as y) = flat h*W+w.
    void (*max_pool2d)(void *bctx, amp_tensor_t *y, amp_tensor_t *argmax, const amp_tensor_t *x,
                       int kernel, int stride);
    // dx overwritten: zeros, plus dy scattered to the argmax positions (kernel and stride those of
    // the forward: with stride >= kernel no two windows share an element).
    void (*max_pool2d_backward)(void *bctx, amp_tensor_t *dx, const amp_tensor_t *dy,
                                const amp_tensor_t *argmax, int kernel, int stride);
    // loss (f32, one element) = -mean of logp[row, target[row]] over the rows whose target (i32/
    // i64) is not AMP_NLL_IGNORE_INDEX: divided by their count, the total weight (NaN for none).
    void (*nll_loss)(void *bctx, amp_tensor_t *loss, const amp_tensor_t *logp,
                     const amp_tensor_t *target);
    // dlogp overwritten: -dloss / total weight at the target positions of the rows not ignored,
    // zeros elsewhere (all of dlogp when every row is). The backend counts the total weight again
    // from target, on its device, in the same pass: no host sync, nothing saved by the forward.
    void (*nll_loss_backward)(void *bctx, amp_tensor_t *dlogp, const amp_tensor_t *dloss,
                              const amp_tensor_t *target);
    // y = x where mask == 0, else value; mask (i32) is a view expanded to x's shape.
    void (*masked_fill)(void *bctx, amp_tensor_t *y, const amp_tensor_t *x,
                        const amp_tensor_t *mask, float value);
    // mask[i] = 0 with probability p else 1/(1-p), from a counter-based RNG (seed, offset + i)
    // so every backend draws the same mask.
    void (*dropout_mask)(void *bctx, amp_tensor_t *mask, float p, uint64_t seed, uint64_t offset);

    // The GradScaler and the optimizers keep their state in tensors of the backend, so that a
    // step never has to wait for the device (AMP-SEMANTICS.md §4):
    // _amp_foreach_non_finite_check_and_unscale_: for each grad, found_inf (f32, one element) = 1
    // if any input value is not finite; then grad = grad * inv_scale (f32, one element) in f32
    // unless inv_scale == 1 (pure check). from[k] (from may be NULL), when set, is grads[k]'s
    // input instead: a narrower gradient of the same shape, read, and grads[k] written (f32)
    // even when inv_scale == 1.
    void (*unscale)(void *bctx, amp_tensor_t *const *grads, const amp_tensor_t *const *from, int n,
                    const amp_tensor_t *inv_scale, amp_tensor_t *found_inf);
    // GradScaler.update(): found_inf = the sum of found_infs[0..n) (f32, one element each), then
    // _amp_update_scale_ on scale (f32) and tracker (i32) in place, and inv_scale =
    // float32(1 / double(scale)). rec (i32[AMP_SCALE_REC]) gets what the update did.
    void (*scale_update)(void *bctx, amp_tensor_t *scale, amp_tensor_t *inv_scale,
                         amp_tensor_t *tracker, amp_tensor_t *const *found_infs,
                         const bool *stepped, int n, const amp_scaler_params *p, amp_tensor_t *rec);
    // One optimizer step over n parameters (f32) and their gradients (f32, or a narrower float
    // dtype whose values are the gradient's); m and v (may be NULL for SGD without
    // momentum) are optimizer state of the same shape. counts (i64) holds the update counts:
    // counts[idx[k]] is parameter k's, counts[idx[n]] the optimizer's own; all n + 1 are
    // incremented first and parameter k's bias corrections use its new count. When found_inf
    // (f32, one element; may be NULL) is not zero, nothing changes: the GradScaler's skipped
    // step, decided where the gradients are.
    // lowered (may be NULL; so may its entries): a 16-bit tensor of params[k]'s shape that gets
    // params[k]'s value after the step rounded to its dtype (its value as it is, on a skipped
    // step): the next autocast region's cast of the parameter, made ahead.
    void (*optim_step)(void *bctx, const amp_optim_params *p, amp_tensor_t *const *params,
                       amp_tensor_t *const *grads, amp_tensor_t *const *m, amp_tensor_t *const *v,
                       amp_tensor_t *const *lowered, int n, amp_tensor_t *counts,
                       const int32_t *idx, const amp_tensor_t *found_inf);
    // Statistics of each x[k] (contiguous; n <= AMP_STATS_BATCH) relative to target added into
    // slots[slot[k]], an amp_stats in memory from alloc that holds amp_stats_empty(), by fused
    // device reductions queued on the stream (many tensors per launch): no wait. The backend may
    // hold them back until a later kernel reads x[k] anyway, but never past a write to or a free
    // of x[k]'s buffer or the slots', nor past a download or synchronize. The frontend applies
    // amp_stats_finish() after downloading (optional: without it the frontend computes them on
    // the host). A backend with stats_into may also compute an output's statistics in the
    // kernel that writes it, when the instrumentation has armed the context's sink for that
    // output (amp_stats_sink below). sumsq false: the sum of squares is not wanted (only
    // parameters' gradients need it), and a kernel that adds the rest may leave it out.
    void (*stats_into)(void *bctx, const amp_tensor_t *const *x, int n, amp_dtype target,
                       amp_stats *slots, const int64_t *slot, bool sumsq);
    void (*synchronize)(void *bctx); // optional
    void (*release)(void *bctx);     // frees the backend context
} amp_backend_i;

// The CPU backend (always available).
const amp_backend_i *amp_cpu_backend(void);
void *amp_cpu_backend_init(void);

// ---------------------------------------------------------------------------------------------
// Context

typedef struct amp_autocast_frame {
    bool enabled;
    amp_dtype dtype;
    bool cache_enabled;
} amp_autocast_frame;

typedef struct amp_cast_cache_entry {
    amp_tensor_t *src;
    amp_tensor_t *cast;
} amp_cast_cache_entry;

#define AMP_LAYER_DEPTH_MAX 32
#define AMP_AUTOCAST_DEPTH_MAX 32

// The statistics of the next output a backend op writes, computed in the producing kernel: the
// instrumentation arms the sink right before the backend call that writes `out` (a forward op's
// output, a gradient buffer); a backend kernel that writes `out` may add out's statistics
// relative to `target` into `slot` (device memory holding amp_stats_empty()) while it stores the
// values, and sets `taken`. When nothing took it, the instrumentation reads out itself.
typedef struct amp_stats_sink {
    const amp_tensor_t *out; // NULL: not armed
    amp_stats *slot;
    amp_dtype target;
    bool taken;
} amp_stats_sink;

struct amp_ctx {
    amp_device device;
    const amp_backend_i *be;
    void *bctx;
    uint64_t seed;
    uint64_t rng;            // host RNG state (init, randn)
    uint64_t dropout_offset; // advances per dropout call

    // the tensors the context owns: scratch ones (freed by amp_ctx_reset) and persistent ones
    amp_tensor_t **scratch;
    size_t n_scratch, cap_scratch;
    amp_tensor_t **persist;
    size_t n_persist, cap_persist;
    size_t mem_in_use, mem_peak; // bytes of tensor storage (amp_ctx_memory)

    amp_node **tape;
    size_t n_tape, cap_tape;
    bool grad_enabled;
    bool in_backward;
    bool drops_pending; // amp_tensor_drop kept storage that a backward reads (until the reset)

    // named layers: registry of qualified names (id = index) and the stack of open ones
    char **layer_names;
    int32_t *layer_parent;
    int32_t n_layers, cap_layers;
    int32_t layer_stack[AMP_LAYER_DEPTH_MAX];
    int layer_depth;

    // autocast: the current state, the saved frames of enclosing regions, the cast cache
    amp_autocast_frame ac;
    amp_autocast_frame ac_saved[AMP_AUTOCAST_DEPTH_MAX];
    int ac_depth;
    amp_cast_cache_entry *cast_cache;
    size_t n_cast_cache, cap_cast_cache;

    int64_t step;            // training steps ended (amp_ctx_step_end)
    bool nvtx;               // push NVTX ranges for layers and backward nodes
    amp_dtype run_dtype;     // dtype of the last enabled autocast region (f16 before any)
    struct amp_instr *instr; // NULL when instrumentation is off
    amp_stats_sink sink;     // armed by the instrumentation for the op about to run
};

// The most tensors one stats_into call takes (amp_tensors_stats_into hands it more in turns).
#define AMP_STATS_BATCH 64

// amp_tensor_stats into slots[slot] (memory from the backend's alloc, holding amp_stats_empty()
// on a device) without waiting for the device; the caller downloads the slots when it needs the
// numbers and applies amp_stats_finish() to each.
void amp_tensor_stats_into(const amp_tensor_t *t, amp_dtype target, amp_stats *slots, int64_t slot);
// The same for n tensors of one context at once (slots[slot[k]] for t[k]); sumsq false lets a
// device backend leave the sum of squares out (stats_into).
void amp_tensors_stats_into(const amp_tensor_t *const *t, int n, amp_dtype target, amp_stats *slots,
                            const int64_t *slot, bool sumsq);
// A slot before any value: min +inf, max -inf, zero counts.
amp_stats amp_stats_empty(void);
// Derives amax, and the NaN range of a tensor without finite values, from min and max.
void amp_stats_finish(amp_stats *s);

struct amp_instr;
void amp_instr_op_slow(amp_ctx_t *ctx, const char *op, amp_cast_policy policy, amp_tensor_t *out,
                       amp_tensor_t *const *in, int n);
static inline void amp_instr_op(amp_ctx_t *ctx, const char *op, amp_cast_policy policy,
                                amp_tensor_t *out, amp_tensor_t *const *in, int n) {
    if (__builtin_expect(ctx->instr != NULL, 0)) amp_instr_op_slow(ctx, op, policy, out, in, n);
}
void amp_instr_work_begins_slow(amp_ctx_t *ctx);
// A layer or an autocast region begins: before the first op of the step or of the forward after a
// backward (gradient accumulation's next micro-batch), what the program did since the step or the
// backward ended (loading a batch, logging) is no op's time; the first op's span starts at the
// last such call instead (an op's span otherwise starts where the previous op's ended).
static inline void amp_instr_work_begins(amp_ctx_t *ctx) {
    if (__builtin_expect(ctx->instr != NULL, 0)) amp_instr_work_begins_slow(ctx);
}
void amp_instr_arm_slow(amp_ctx_t *ctx, const amp_tensor_t *out);
// Right before the backend call that writes an op's output (or a gradient buffer): lets the
// backend compute out's statistics in the producing kernel (amp_stats_sink). The op's
// amp_instr_op (amp_instr_grad for a gradient) then uses them.
static inline void amp_instr_arm(amp_ctx_t *ctx, const amp_tensor_t *out) {
    if (__builtin_expect(ctx->instr != NULL, 0)) amp_instr_arm_slow(ctx, out);
}

void amp_instr_input_slow(amp_ctx_t *ctx, amp_tensor_t *x);
// Right before the backend call of an op whose kernel reads x whole (a cast): queues x's
// statistics now when x is data that no op of this batch has read (the input batch), so that the
// kernel adds them as it reads x (cuda_fuse_take_input) instead of a launch of their own after it.
static inline void amp_instr_input(amp_ctx_t *ctx, amp_tensor_t *x) {
    if (__builtin_expect(ctx->instr != NULL, 0)) amp_instr_input_slow(ctx, x);
}

static inline int32_t amp_ctx_current_layer(const amp_ctx_t *ctx) {
    return ctx->layer_depth > 0 ? ctx->layer_stack[ctx->layer_depth - 1] : -1;
}

// ---------------------------------------------------------------------------------------------
// Autocast inside ops

// Applies op's autocast policy to its floating tensor inputs (in place in the array, casts
// recorded on the tape) and returns the dtype the op computes in / outputs. Aborts for a
// banned op (amp_binary_cross_entropy checks first) and on a promote error.
amp_dtype amp_autocast_apply(amp_ctx_t *ctx, const char *op, amp_tensor_t **in, int n);
// Clears the weight-cast cache (outermost region ended).
void amp_autocast_clear_cache(amp_ctx_t *ctx);
// Native type promotion of two dtypes: floating over integer, f16+bf16 -> f32, i32+i64 -> i64.
amp_dtype amp_promote_types(amp_dtype a, amp_dtype b);
// The error for an op without an integer kernel in PyTorch (gelu, softmax, layer_norm) given an
// integer tensor of dtype t ("gelu takes floating tensors only ...", as amp_autocast_decide says):
// sets the last error and returns AMP_ERR_INVALID_ARGUMENT. amp_require_float aborts with it when
// x is an integer tensor.
amp_status amp_int_input_error(const char *op, amp_dtype t);
void amp_require_float(const char *op, const amp_tensor_t *x);

// The features of the linear that made y when its backward takes the bias gradient through the
// backend's gemm_bgrad (a backward that writes y's gradient may sum its columns on the way:
// amp_backend_i.unary_backward), else 0.
int64_t amp_linear_bias_cols(const amp_ctx_t *ctx, const amp_tensor_t *y);
// x cast to dtype t (x itself when equal), recorded for autograd; amp_cast_made records the cast
// of x into y (x's shape, another dtype), which holds the values already.
amp_tensor_t *amp_cast(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype t);
amp_tensor_t *amp_cast_made(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *y);

// ---------------------------------------------------------------------------------------------
// Helpers for ops (ops-view.c); none of them records on the tape.

// x itself when contiguous, else a contiguous scratch copy.
amp_tensor_t *amp_dense(amp_ctx_t *ctx, amp_tensor_t *x);
// A view of x broadcast to shape (numpy rules; stride 0 on broadcast dims).
amp_tensor_t *amp_expand(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape);
// The broadcast shape of a and b; false when they do not broadcast.
bool amp_broadcast_shape(const amp_tensor_t *a, const amp_tensor_t *b, int *ndim, int64_t *shape);
// a op b broadcast, computed into a new scratch tensor of dtype dt (not recorded; `output`: it is
// an op's output, for the instrumentation; ops-pointwise.c).
amp_tensor_t *amp_compute_binary(amp_ctx_t *ctx, amp_binary_op op, amp_dtype dt, amp_tensor_t *a,
                                 amp_tensor_t *b, bool output);
// g summed down to shape (the backward of a broadcast); g itself when already that shape.
amp_tensor_t *amp_sum_to(amp_ctx_t *ctx, amp_tensor_t *g, int ndim, const int64_t *shape);

// ---------------------------------------------------------------------------------------------
// Instrumentation (instrument.c). Ops call amp_instr_op() once their output is computed; it
// costs one predictable branch when instrumentation is off.
// (amp_instr_op() is defined after struct amp_ctx above.)
void amp_instr_init(amp_ctx_t *ctx); // turns instrumentation on when the process records
// Which recording the process is in (record.c): another number after amp_record_stop or start.
uint64_t amp_record_session(void);
void amp_instr_free(amp_ctx_t *ctx);
// Backward: before node n runs with the gradient dy of its output; after each gradient is
// accumulated into t->grad (the write armed by amp_instr_arm); once the tape is done.
void amp_instr_backward_node(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy);
void amp_instr_grad(amp_ctx_t *ctx, amp_tensor_t *t);
void amp_instr_backward_end(amp_ctx_t *ctx);
// Whether the gradient about to be written into t is its first, from a node that passes its own
// incoming gradient on unchanged (a reshape's or permute's, copied into a buffer of t's own, or a
// widening cast's, widened into one): the node's numbers serve for it, so the write need not be
// armed.
bool amp_instr_grad_passed_on(const amp_ctx_t *ctx, const amp_tensor_t *t);
// An enabled autocast region of dtype t begins (META autocast_dtype, once per dtype).
void amp_instr_autocast_dtype(amp_ctx_t *ctx, amp_dtype t);
// The GradScaler's settings, once, when its scale is created (META scaler.*).
void amp_instr_scaler_settings(amp_ctx_t *ctx, float init_scale, double growth_factor,
                               double backoff_factor, int growth_interval);
// Every GradScaler update (from scaler.c): rec (i32 [AMP_SCALE_REC]) is what it did, read when
// the step is processed.
void amp_instr_scale(amp_ctx_t *ctx, const amp_tensor_t *rec);

// The optimizer step, skipped on the device when found_inf (f32 [1], may be NULL) is not zero:
// GradScaler.step() without a wait (optim.c).
void amp_optim_step_unless(amp_optim_t *opt, const amp_tensor_t *found_inf);
// The context the optimizer was made in.
amp_ctx_t *amp_optim_ctx(const amp_optim_t *opt);

// ---------------------------------------------------------------------------------------------
// NVTX ranges for CUDA captures (nvtx.c): pushed only when ctx->nvtx is set.

bool amp_nvtx_wanted(void); // an NVTX tool is injected into this process
void amp_nvtx_push(const char *name);
void amp_nvtx_pop(void);

// ---------------------------------------------------------------------------------------------
// Counter-based RNG shared by backends (splitmix64 of seed and counter).
static inline uint64_t amp_rng_hash(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
// Uniform in [0, 1) with 24 bits.
static inline float amp_rng_uniform(uint64_t seed, uint64_t counter) {
    return (float)(amp_rng_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

// ---------------------------------------------------------------------------------------------
// The GradScaler's arithmetic, run by the host (scaler.c, the CPU backend) and by the CUDA
// backend's kernel alike.

#ifdef __CUDACC__
#define AMP_HOST_DEVICE __host__ __device__
#else
#define AMP_HOST_DEVICE
#endif

// _amp_update_scale_ (AMP-SEMANTICS.md §4.2): found_inf is the summed found_inf.
AMP_HOST_DEVICE static inline void amp_scale_update_step(float *scale, int32_t *tracker,
                                                         float found_inf, double growth_factor,
                                                         double backoff_factor,
                                                         int growth_interval) {
    if (found_inf != 0.0f) { // `if (*found_inf)`: NaN counts as found
        *scale = (float)((double)*scale * backoff_factor);
        *tracker = 0;
        return;
    }
    // Incremented before the exact compare; wraps like the int32 it is (never UB here).
    const int32_t successful = (int32_t)((uint32_t)*tracker + 1u);
    if (successful == growth_interval) {
        const float grown = (float)((double)*scale * growth_factor);
        if (isfinite(grown)) *scale = grown; // never grow to inf (PR #98876)
        *tracker = 0;
    } else {
        *tracker = successful;
    }
}

// unscale_'s inv_scale: float32(1.0 / double(scale)).
AMP_HOST_DEVICE static inline float amp_inv_scale_of(float scale) {
    return (float)(1.0 / (double)scale);
}

// update() given the summed found_inf and whether an optimizer that stepped had a non-finite
// gradient: scale, inv_scale and tracker in place, and rec (i32 [AMP_SCALE_REC]) what it did.
// The backends' scale_update (the CPU one, the CUDA kernel) end with it.
AMP_HOST_DEVICE static inline void amp_scale_update_record(float *scale, float *inv_scale,
                                                           int32_t *tracker, float found_inf,
                                                           bool skipped, const amp_scaler_params *p,
                                                           int32_t *rec) {
    memcpy(&rec[AMP_REC_BEFORE], scale, 4);
    amp_scale_update_step(scale, tracker, found_inf, p->growth_factor, p->backoff_factor,
                          p->growth_interval);
    *inv_scale = amp_inv_scale_of(*scale);
    memcpy(&rec[AMP_REC_AFTER], scale, 4);
    memcpy(&rec[AMP_REC_FOUND_INF], &found_inf, 4);
    rec[AMP_REC_SKIPPED] = skipped;
    rec[AMP_REC_TRACKER] = *tracker;
}

// Adam's scalars for a parameter's step-th update, in double as torch.optim computes them in
// Python, passed on as floats: the step size -lr / (1 - beta1^step) and sqrt(1 - beta2^step).
AMP_HOST_DEVICE static inline void amp_adam_step_scalars(double lr, double beta1, double beta2,
                                                         int64_t step, float *step_size,
                                                         float *bc2_sqrt) {
    const double bc1 = 1.0 - pow(beta1, (double)step);
    const double bc2 = 1.0 - pow(beta2, (double)step);
    *step_size = (float)-(lr / bc1);
    *bc2_sqrt = (float)sqrt(bc2);
}

// The device (or host) address of a one-element f32 tensor: the GradScaler's scalars.
static inline float *amp_f32_scalar(const amp_tensor_t *t) {
    AMP_ASSERT(t->dtype == AMP_DTYPE_F32 && amp_numel(t) == 1, "(%s, %lld elements)",
               amp_dtype_name(t->dtype), (long long)amp_numel(t));
    return (float *)amp_tensor_ptr(t);
}

#endif // AMP_IMPL_H
