/*
 * tensor.c — the context and its tensors: creation, storage, host copies, views and their
 * gradients. Persistent tensors live until amp_tensor_free() (or, when the tape holds them, until
 * amp_ctx_reset()); op outputs (scratch) until amp_ctx_reset(). Storage is refcounted so views can
 * outlive nothing but share freely.
 */
#include "amp-impl.h"
#include "cuda-loader.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Context

amp_status amp_ctx_new(amp_device dev, uint64_t seed, amp_ctx_t **out) {
    amp_clear_error();
    if (!out) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_ctx_new: out is NULL");
    *out = NULL;
    const amp_backend_i *be = NULL;
    void *bctx = NULL;
    switch (dev) {
    case AMP_DEVICE_CPU:
        be = amp_cpu_backend();
        bctx = amp_cpu_backend_init();
        break;
    case AMP_DEVICE_CUDA: {
        amp_status st = amp_cuda_backend_load(&be, &bctx);
        if (st != AMP_OK) return st;
        break;
    }
    default:
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "unknown device %d", (int)dev);
    }
    amp_ctx_t *ctx = amp_xcalloc(1, sizeof *ctx);
    ctx->device = dev;
    ctx->be = be;
    ctx->bctx = bctx;
    ctx->seed = seed;
    ctx->rng = seed ^ 0x5DEECE66Dull;
    ctx->grad_enabled = true;
    ctx->ac.dtype = AMP_DTYPE_F16;
    ctx->ac.cache_enabled = true;
    ctx->run_dtype = AMP_DTYPE_F16;
    ctx->nvtx = dev == AMP_DEVICE_CUDA && amp_nvtx_wanted();
    amp_instr_init(ctx);
    *out = ctx;
    return AMP_OK;
}

bool amp_device_parse(const char *s, amp_device *out) {
    if (!s) return false;
    if (strcmp(s, "cpu") == 0)
        *out = AMP_DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0)
        *out = AMP_DEVICE_CUDA;
    else
        return false;
    return true;
}

amp_device amp_ctx_device(const amp_ctx_t *ctx) {
    return ctx->device;
}

amp_rng_state amp_ctx_rng_state(const amp_ctx_t *ctx) {
    return (amp_rng_state){ctx->seed, ctx->rng, ctx->dropout_offset};
}

void amp_ctx_set_rng_state(amp_ctx_t *ctx, amp_rng_state st) {
    ctx->seed = st.seed;
    ctx->rng = st.host;
    ctx->dropout_offset = st.dropout_offset;
}

void amp_ctx_memory(const amp_ctx_t *ctx, size_t *in_use, size_t *peak) {
    if (in_use) *in_use = ctx->mem_in_use;
    if (peak) *peak = ctx->mem_peak;
}

// What a storage of nbytes counts for in amp_ctx_memory: PyTorch's caching allocator rounds
// each block up to 512 bytes.
static size_t counted_bytes(size_t nbytes) {
    return (nbytes + 511) / 512 * 512;
}

static void buffer_free_data(amp_ctx_t *ctx, amp_buffer *b) {
    ctx->be->free(ctx->bctx, b->data);
    b->data = NULL;
    ctx->mem_in_use -= counted_bytes(b->nbytes);
}

static void buffer_release(amp_ctx_t *ctx, amp_buffer *b) {
    if (!b || --b->refcount > 0) return;
    if (b->data) buffer_free_data(ctx, b); // NULL: dropped already
    free(b);
}

// Frees t's own resources (not its list entry).
static void tensor_destroy(amp_tensor_t *t) {
    if (t->grad && t->persistent) tensor_destroy(t->grad);
    buffer_release(t->ctx, t->precast);
    buffer_release(t->ctx, t->copy_of);
    buffer_release(t->ctx, t->buf);
    free(t->name);
    free(t);
}

void amp_ctx_reset(amp_ctx_t *ctx) {
    for (size_t i = 0; i < ctx->n_scratch; i++)
        tensor_destroy(ctx->scratch[i]);
    ctx->n_scratch = 0;
    for (size_t i = 0; i < ctx->n_tape; i++)
        free(ctx->tape[i]);
    ctx->n_tape = 0;
    ctx->n_cast_cache = 0;
    ctx->drops_pending = false;
}

void amp_ctx_free(amp_ctx_t *ctx) {
    if (!ctx) return;
    amp_ctx_reset(ctx);
    amp_instr_free(ctx);
    for (size_t i = 0; i < ctx->n_persist; i++)
        tensor_destroy(ctx->persist[i]);
    for (int32_t i = 0; i < ctx->n_layers; i++)
        free(ctx->layer_names[i]);
    free(ctx->layer_names);
    free(ctx->layer_parent);
    if (ctx->be->release) ctx->be->release(ctx->bctx);
    free(ctx->persist);
    free(ctx->scratch);
    free(ctx->tape);
    free(ctx->cast_cache);
    free(ctx);
}

// ---------------------------------------------------------------------------------------------
// Creation

static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

// Fresh storage of nbytes (uninitialised), one reference.
static amp_buffer *buffer_new(amp_ctx_t *ctx, size_t nbytes) {
    amp_buffer *b = amp_xcalloc(1, sizeof *b);
    b->refcount = 1;
    b->nbytes = nbytes;
    b->data = ctx->be->alloc(ctx->bctx, nbytes ? nbytes : 1);
    if (!b->data)
        amp_abort(__FILE__, __LINE__, "%s backend: out of memory allocating %zu bytes",
                  ctx->be->name, nbytes);
    ctx->mem_in_use += counted_bytes(nbytes);
    if (ctx->mem_in_use > ctx->mem_peak) ctx->mem_peak = ctx->mem_in_use;
    return b;
}

void amp_check_shape(amp_dtype dt, int ndim, const int64_t *shape) {
    char s[AMP_SHAPE_STR_MAX];
    int64_t bytes = (int64_t)amp_dtype_size(dt);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            amp_abort(__FILE__, __LINE__, "invalid shape %s: dimension %d is %lld",
                      amp_dims_str(ndim, shape, s, sizeof s), i, (long long)shape[i]);
        if (__builtin_mul_overflow(bytes, shape[i] ? shape[i] : 1, &bytes))
            amp_abort(__FILE__, __LINE__,
                      "shape %s of %s is too large: its size in bytes overflows int64",
                      amp_dims_str(ndim, shape, s, sizeof s), amp_dtype_name(dt));
    }
}

// A tensor struct with fresh storage, in no list.
static amp_tensor_t *tensor_alloc(amp_ctx_t *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    AMP_ASSERT(ndim >= 0 && ndim <= AMP_MAX_DIMS, "(ndim %d)", ndim);
    AMP_ASSERT((unsigned)dt < AMP_DTYPE_COUNT);
    amp_check_shape(dt, ndim, shape);
    amp_tensor_t *t = amp_xcalloc(1, sizeof *t);
    t->ctx = ctx;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    amp_contiguous_strides(ndim, t->shape, t->stride);
    t->layer = -1;
    t->buf = buffer_new(ctx, (size_t)shape_numel(ndim, shape) * amp_dtype_size(dt));
    return t;
}

static void list_push(amp_tensor_t ***list, size_t *n, size_t *cap, amp_tensor_t *t) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        *list = amp_xrealloc(*list, *cap * sizeof **list);
    }
    (*list)[(*n)++] = t;
}

amp_tensor_t *amp_scratch_new(amp_ctx_t *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor_t *t = tensor_alloc(ctx, dt, ndim, shape);
    t->buf->droppable = true;
    list_push(&ctx->scratch, &ctx->n_scratch, &ctx->cap_scratch, t);
    return t;
}

amp_tensor_t *amp_scratch_zeros(amp_ctx_t *ctx, amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor_t *t = amp_scratch_new(ctx, dt, ndim, shape);
    ctx->be->fill(ctx->bctx, t, 0.0f);
    return t;
}

void amp_scratch_release_from(amp_ctx_t *ctx, size_t mark) {
    size_t kept = mark;
    for (size_t i = mark; i < ctx->n_scratch; i++) {
        amp_tensor_t *t = ctx->scratch[i];
        if (t->is_grad)
            ctx->scratch[kept++] = t;
        else
            tensor_destroy(t);
    }
    ctx->n_scratch = kept;
}

// The storage that node n's backward reads (n->reads), each once, into b[] (NODE_READS_MAX);
// returns how many.
#define NODE_READS_MAX (2 * AMP_NODE_MAX_IN + 1) // its inputs, its output, its saved tensors
static int node_reads(const amp_node *n, amp_buffer **b) {
    const amp_tensor_t *t[NODE_READS_MAX];
    int nt = 0, nb = 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->reads & AMP_READS_IN(i)) t[nt++] = n->in[i];
    if (n->reads & AMP_READS_OUT) t[nt++] = n->out;
    for (int i = 0; i < AMP_NODE_MAX_IN; i++)
        if (n->reads & AMP_READS_SAVED(i)) t[nt++] = n->saved[i];
    for (int i = 0; i < nt; i++) {
        if (!t[i] || !t[i]->buf) continue;
        bool seen = false;
        for (int k = 0; k < nb && !seen; k++)
            seen = b[k] == t[i]->buf;
        if (!seen) b[nb++] = t[i]->buf;
    }
    return nb;
}

void amp_tensor_drop(amp_tensor_t *t) {
    if (!t || !t->buf || !t->buf->droppable) return;
    amp_ctx_t *ctx = t->ctx;
    amp_buffer *b = t->buf;
    b->droppable = false;
    for (size_t i = 0; i < ctx->n_tape; i++) {
        amp_buffer *read[NODE_READS_MAX];
        int n = node_reads(ctx->tape[i], read);
        for (int k = 0; k < n; k++)
            if (read[k] == b) { // a backward reads it: it goes after the last one that does
                b->drop_pending = ctx->drops_pending = true;
                return;
            }
    }
    buffer_free_data(ctx, b);
}

// (Counted over the whole tape: nodes recorded after the drop may read the storage too.) Without
// a pending drop there is nothing to count, check or free: these return at once.
void amp_backward_count_dropped(amp_ctx_t *ctx) {
    if (!ctx->drops_pending) return;
    for (int pass = 0; pass < 2; pass++) // zero the counts, then count
        for (size_t i = 0; i < ctx->n_tape; i++) {
            amp_buffer *read[NODE_READS_MAX];
            int n = node_reads(ctx->tape[i], read);
            for (int k = 0; k < n; k++)
                if (read[k]->drop_pending)
                    read[k]->readers_left = pass ? read[k]->readers_left + 1 : 0;
        }
}

void amp_node_release_dropped(amp_ctx_t *ctx, const amp_node *n) {
    if (!ctx->drops_pending) return;
    amp_buffer *read[NODE_READS_MAX];
    int nb = node_reads(n, read);
    for (int k = 0; k < nb; k++)
        if (read[k]->drop_pending && --read[k]->readers_left == 0 && read[k]->data)
            buffer_free_data(ctx, read[k]);
}

void amp_tensor_release_storage(amp_tensor_t *t) {
    buffer_release(t->ctx, t->buf);
    t->buf = NULL;
}

amp_tensor_t *amp_view_new(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset) {
    amp_tensor_t *t = amp_xcalloc(1, sizeof *t);
    t->ctx = ctx;
    t->dtype = x->dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->stride[i] = stride[i];
    }
    t->offset = offset;
    t->buf = x->buf;
    t->buf->refcount++;
    t->is_view = true;
    t->inf_fill = x->inf_fill;
    t->stat_epoch = x->stat_epoch; // the instrumentation reads a view's numbers off its base
    t->stat_entry = x->stat_entry;
    t->layer = -1;
    list_push(&ctx->scratch, &ctx->n_scratch, &ctx->cap_scratch, t);
    return t;
}

// t (zeroed first) as a contiguous tensor of dtype dt with like's shape over storage b, in no list
// (no reference taken).
static void tensor_over(amp_tensor_t *t, amp_ctx_t *ctx, amp_dtype dt, const amp_tensor_t *like,
                        amp_buffer *b) {
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
    t->dtype = dt;
    t->ndim = like->ndim;
    memcpy(t->shape, like->shape, sizeof t->shape);
    amp_contiguous_strides(t->ndim, t->shape, t->stride);
    t->buf = b;
    t->layer = -1;
}

// ---------------------------------------------------------------------------------------------
// Autocast's copies of parameters, made ahead by the optimizer

void amp_precast_want(amp_tensor_t *p, amp_dtype t) {
    p->precast_wanted = true;
    p->precast_want = t;
}

amp_tensor_t *amp_precast_target(amp_tensor_t *p, amp_tensor_t *out) {
    if (!p->precast_wanted) { // no region cast it since the last copy
        buffer_release(p->ctx, p->precast);
        p->precast = NULL;
        return NULL;
    }
    const size_t nbytes = (size_t)amp_tensor_numel(p) * amp_dtype_size(p->precast_want);
    // a copy that a tensor of the tape still reads (the last region's cast) stays as it is
    if (p->precast && (p->precast->refcount > 1 || p->precast->nbytes != nbytes)) {
        buffer_release(p->ctx, p->precast);
        p->precast = NULL;
    }
    if (!p->precast) p->precast = buffer_new(p->ctx, nbytes);
    p->precast_dtype = p->precast_want;
    tensor_over(out, p->ctx, p->precast_dtype, p, p->precast);
    return out;
}

void amp_precast_written(amp_tensor_t *p, bool written) {
    p->buf->version++;
    if (!written) return;
    p->precast_version = p->buf->version;
    p->precast_wanted = false; // until a region casts it again
}

amp_tensor_t *amp_precast_take(amp_ctx_t *ctx, amp_tensor_t *p, amp_dtype t) {
    if (!p->precast || p->precast_dtype != t || p->precast_version != p->buf->version) return NULL;
    amp_tensor_t *y = amp_xcalloc(1, sizeof *y);
    tensor_over(y, ctx, t, p, p->precast);
    y->buf->refcount++;
    list_push(&ctx->scratch, &ctx->n_scratch, &ctx->cap_scratch, y);
    return y;
}

amp_tensor_t *amp_tensor_new(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape) {
    amp_tensor_t *x = tensor_alloc(ctx, t, ndim, shape);
    ctx->be->fill(ctx->bctx, x, 0.0f);
    x->persistent = true;
    list_push(&ctx->persist, &ctx->n_persist, &ctx->cap_persist, x);
    return x;
}

amp_tensor_t *amp_tensor_from(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape,
                              const void *host) {
    amp_tensor_t *x = amp_tensor_new(ctx, t, ndim, shape);
    amp_tensor_write(x, host);
    return x;
}

amp_tensor_t *amp_tensor_from_f32(amp_ctx_t *ctx, amp_dtype t, int ndim, const int64_t *shape,
                                  const float *host) {
    amp_tensor_t *x = amp_tensor_new(ctx, t, ndim, shape);
    amp_tensor_write_f32(x, host);
    return x;
}

// Whether a node of the tape was recorded with t or t's gradient (as an input, its output or a
// tensor saved for its backward).
static bool tape_refers_to(const amp_ctx_t *ctx, const amp_tensor_t *t) {
    for (size_t i = 0; i < ctx->n_tape; i++) {
        const amp_node *n = ctx->tape[i];
        const amp_tensor_t *refs[2 * AMP_NODE_MAX_IN + 1];
        int nr = 0;
        for (int k = 0; k < n->n_in; k++)
            refs[nr++] = n->in[k];
        for (int k = 0; k < AMP_NODE_MAX_IN; k++)
            refs[nr++] = n->saved[k];
        refs[nr++] = n->out;
        for (int k = 0; k < nr; k++)
            if (refs[k] && (refs[k] == t || refs[k] == t->grad)) return true;
    }
    return false;
}

// A persistent tensor let go of: destroyed, or kept until amp_ctx_reset when the tape was recorded
// with it (or its gradient), as PyTorch's graph keeps what it saved alive: a backward may still
// read it or accumulate its gradient.
static void destroy_untaped(amp_ctx_t *ctx, amp_tensor_t *t) {
    if (tape_refers_to(ctx, t))
        list_push(&ctx->scratch, &ctx->n_scratch, &ctx->cap_scratch, t);
    else
        tensor_destroy(t);
}

void amp_tensor_free(amp_tensor_t *t) {
    if (!t || !t->persistent) return;
    if (t->optim_refs > 0) {
        char s[AMP_SHAPE_STR_MAX];
        amp_abort(__FILE__, __LINE__,
                  "amp_tensor_free of tensor '%s' (%s %s), which an optimizer holds (a parameter "
                  "or its state): free the optimizer first",
                  amp_tensor_name(t), amp_dtype_name(t->dtype), amp_shape_str(t, s, sizeof s));
    }
    if (t->is_grad) { // its tensor's grad pointer would dangle
        char s[AMP_SHAPE_STR_MAX];
        amp_abort(__FILE__, __LINE__,
                  "amp_tensor_free of a gradient (%s %s), which the tensor it belongs to owns: "
                  "drop a gradient with amp_tensor_zero_grad of its tensor (amp_optim_zero_grad "
                  "for an optimizer's parameters)",
                  amp_dtype_name(t->dtype), amp_shape_str(t, s, sizeof s));
    }
    amp_ctx_t *ctx = t->ctx;
    for (size_t i = 0; i < ctx->n_cast_cache;) // freed inside an autocast region that cast it
        if (ctx->cast_cache[i].src == t)
            ctx->cast_cache[i] = ctx->cast_cache[--ctx->n_cast_cache];
        else
            i++;
    for (size_t i = 0; i < ctx->n_persist; i++) {
        if (ctx->persist[i] == t) {
            ctx->persist[i] = ctx->persist[--ctx->n_persist];
            break;
        }
    }
    destroy_untaped(ctx, t);
}

// xorshift64* on the context's host RNG.
static uint64_t rng_next(amp_ctx_t *ctx) {
    uint64_t x = ctx->rng ? ctx->rng : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    ctx->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static double rng_uniform(amp_ctx_t *ctx) { // (0, 1)
    return ((double)(rng_next(ctx) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// PyTorch's normal_ and uniform_ refuse an integer tensor (they raise for 'Int' and 'Long'):
// rounded random values in an integer tensor would be nobody's intent, so these abort too.
static void require_float_fill(const char *fn, const char *torch_fn, const amp_tensor_t *t) {
    AMP_ASSERT(amp_dtype_is_float(t->dtype),
               "(%s of an %s tensor: PyTorch's %s has no integer kernel; fill a floating tensor "
               "and cast it with amp_to)",
               fn, amp_dtype_name(t->dtype), torch_fn);
}

void amp_tensor_randn(amp_tensor_t *t, float std) {
    require_float_fill("amp_tensor_randn", "normal_", t);
    int64_t n = amp_tensor_numel(t);
    float *v = amp_xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i += 2) { // Box-Muller, two values per draw
        double r = sqrt(-2.0 * log(rng_uniform(t->ctx))), a = 2.0 * M_PI * rng_uniform(t->ctx);
        v[i] = (float)(r * cos(a)) * std;
        if (i + 1 < n) v[i + 1] = (float)(r * sin(a)) * std;
    }
    amp_tensor_write_f32(t, v);
    free(v);
}

void amp_tensor_uniform(amp_tensor_t *t, float bound) {
    require_float_fill("amp_tensor_uniform", "uniform_", t);
    int64_t n = amp_tensor_numel(t);
    float *v = amp_xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((2.0 * rng_uniform(t->ctx) - 1.0) * bound);
    amp_tensor_write_f32(t, v);
    free(v);
}

// ---------------------------------------------------------------------------------------------
// Queries and host copies

amp_dtype amp_tensor_dtype(const amp_tensor_t *t) {
    return t->dtype;
}
int amp_tensor_ndim(const amp_tensor_t *t) {
    return t->ndim;
}
int64_t amp_tensor_numel(const amp_tensor_t *t) {
    return amp_numel(t);
}

int64_t amp_tensor_dim(const amp_tensor_t *t, int i) {
    if (i < 0) i += t->ndim;
    AMP_ASSERT(i >= 0 && i < t->ndim, "(dim %d of a %d-dim tensor)", i, t->ndim);
    return t->shape[i];
}

bool amp_tensor_is_contiguous(const amp_tensor_t *t) {
    return amp_is_contiguous(t);
}

bool amp_same_shape(const amp_tensor_t *a, const amp_tensor_t *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *amp_dims_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = amp_appendf(buf, n, 0, "(");
    for (int i = 0; i < ndim; i++)
        k = amp_appendf(buf, n, k, i ? ", %lld" : "%lld", (long long)shape[i]);
    amp_appendf(buf, n, k, ndim == 1 ? ",)" : ")");
    return buf;
}

const char *amp_shape_str(const amp_tensor_t *t, char *buf, size_t n) {
    return amp_dims_str(t->ndim, t->shape, buf, n);
}

// A contiguous tensor with t's contents in dtype dt (t itself when already so).
static amp_tensor_t *contiguous_as(const amp_tensor_t *t, amp_dtype dt) {
    if (t->dtype == dt && amp_tensor_is_contiguous(t)) return (amp_tensor_t *)t;
    amp_tensor_t *c = tensor_alloc(t->ctx, dt, t->ndim, t->shape);
    t->ctx->be->copy(t->ctx->bctx, c, t);
    return c;
}

static void release_temp(const amp_tensor_t *t, amp_tensor_t *c) {
    if (c != t) tensor_destroy(c);
}

// A host copy of a tensor whose storage was dropped (amp_tensor_drop) aborts, also while backward
// nodes that read it keep the storage (drop_pending: the caller said it is done with it; ops it
// feeds are recorded as readers) (`what`: "amp_tensor_read reads").
static void require_storage(const amp_tensor_t *t, const char *what) {
    AMP_ASSERT(t->buf && t->buf->data && !t->buf->drop_pending,
               "(%s a tensor whose storage was dropped with amp_tensor_drop)", what);
}

// host, the program's side of a copy, is there (NULL only for no elements).
static void require_host(const amp_tensor_t *t, const void *host, const char *fn) {
    AMP_ASSERT(host || amp_tensor_numel(t) == 0, "(%s: NULL host data for %lld elements)", fn,
               (long long)amp_tensor_numel(t));
}

void amp_tensor_read(const amp_tensor_t *t, void *out) {
    require_storage(t, "amp_tensor_read reads");
    require_host(t, out, "amp_tensor_read");
    amp_tensor_t *c = contiguous_as(t, t->dtype);
    c->ctx->be->download(c->ctx->bctx, out, amp_tensor_ptr(c),
                         (size_t)amp_tensor_numel(c) * amp_dtype_size(c->dtype));
    release_temp(t, c);
}

void amp_tensor_write(amp_tensor_t *t, const void *in) {
    require_storage(t, "amp_tensor_write writes");
    require_host(t, in, "amp_tensor_write");
    AMP_ASSERT(amp_tensor_is_contiguous(t), "(amp_tensor_write needs a contiguous tensor)");
    t->ctx->be->upload(t->ctx->bctx, amp_tensor_ptr(t), in,
                       (size_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype));
    t->buf->version++;
}

void amp_tensor_read_f32(const amp_tensor_t *t, float *out) {
    require_storage(t, "amp_tensor_read_f32 reads");
    require_host(t, out, "amp_tensor_read_f32");
    amp_tensor_t *c = contiguous_as(t, AMP_DTYPE_F32);
    c->ctx->be->download(c->ctx->bctx, out, amp_tensor_ptr(c), (size_t)amp_tensor_numel(c) * 4);
    release_temp(t, c);
}

void amp_tensor_write_f32(amp_tensor_t *t, const float *in) {
    require_storage(t, "amp_tensor_write_f32 writes");
    require_host(t, in, "amp_tensor_write_f32");
    amp_ctx_t *ctx = t->ctx;
    AMP_ASSERT(amp_dtype_is_float(t->dtype) || amp_tensor_is_contiguous(t),
               "(amp_tensor_write_f32 writes an integer tensor only when it is contiguous, got a "
               "%s view)",
               amp_dtype_name(t->dtype));
    amp_tensor_t *tmp = tensor_alloc(ctx, AMP_DTYPE_F32, t->ndim, t->shape);
    ctx->be->upload(ctx->bctx, amp_tensor_ptr(tmp), in, (size_t)amp_tensor_numel(t) * 4);
    if (amp_tensor_is_contiguous(t)) {
        ctx->be->copy(ctx->bctx, t, tmp);
    } else { // copy writes contiguous tensors, binary also a view (exactly: t = tmp * 1)
        amp_tensor_t *one = tensor_alloc(ctx, AMP_DTYPE_F32, 0, NULL);
        ctx->be->fill(ctx->bctx, one, 1.0f);
        amp_tensor_t ones = *one; // broadcast to t's shape
        ones.ndim = t->ndim;
        memcpy(ones.shape, t->shape, sizeof ones.shape);
        memset(ones.stride, 0, sizeof ones.stride);
        ctx->be->binary(ctx->bctx, AMP_BINARY_MUL, t, tmp, &ones);
        tensor_destroy(one);
    }
    t->buf->version++;
    tensor_destroy(tmp);
}

float amp_tensor_item(const amp_tensor_t *t) {
    AMP_ASSERT(amp_tensor_numel(t) == 1, "(item() of a tensor with %lld elements)",
               (long long)amp_tensor_numel(t));
    require_storage(t, "amp_tensor_item reads");
    float v;
    amp_tensor_read_f32(t, &v);
    return v;
}

void amp_tensor_set_name(amp_tensor_t *t, const char *name) {
    free(t->name);
    t->name = name ? amp_xstrdup(name) : NULL;
}

const char *amp_tensor_name(const amp_tensor_t *t) {
    return t->name ? t->name : "";
}

void amp_tensor_set_requires_grad(amp_tensor_t *t, bool requires_grad) {
    AMP_ASSERT(!requires_grad || amp_dtype_is_float(t->dtype),
               "(only floating tensors can require grad)");
    AMP_ASSERT(requires_grad || !t->node,
               "(you can only change requires_grad flags of leaf variables: an op's output that "
               "requires grad keeps it)"); // (PyTorch's message; detach it with a copy instead)
    t->requires_grad = requires_grad;
}

bool amp_tensor_requires_grad(const amp_tensor_t *t) {
    return t->requires_grad;
}

// Frees t's gradient (its storage; the struct too when t owns it: a persistent tensor's gradient
// is in no list).
static void grad_free(amp_tensor_t *t) {
    amp_tensor_t *g = t->grad;
    if (!g) return;
    t->grad = NULL;
    if (t->persistent)
        destroy_untaped(t->ctx, g);
    else if (!tape_refers_to(t->ctx, g)) // (else an op read it since: whole until the reset)
        amp_tensor_release_storage(g);   // (the struct stays in the scratch list)
}

// t's gradient replaced by a copy in a fresh buffer of t's own, in t's dtype.
static void grad_copy_to_own(amp_tensor_t *t) {
    amp_tensor_t *c = amp_grad_new(t->ctx, t);
    t->ctx->be->copy(t->ctx->bctx, c, t->grad);
    amp_grad_replace(t, c);
}

amp_tensor_t *amp_tensor_grad(const amp_tensor_t *t) {
    // a narrower gradient is widened once, where it is kept (its dtype is t's own business)
    if (t->grad && t->grad->dtype != t->dtype) grad_copy_to_own((amp_tensor_t *)t);
    return t->grad;
}

void amp_grad_replace(amp_tensor_t *t, amp_tensor_t *g) {
    grad_free(t);
    t->grad = g;
}

void amp_tensor_zero_grad(amp_tensor_t *t) {
    if (t) grad_free(t);
}

// ---------------------------------------------------------------------------------------------
// Gradient accumulation

amp_tensor_t *amp_grad_new(amp_ctx_t *ctx, const amp_tensor_t *t) {
    amp_tensor_t *c = tensor_alloc(ctx, t->dtype, t->ndim, t->shape);
    c->persistent = t->persistent; // a persistent tensor owns its gradient
    c->is_grad = true;
    if (!t->persistent) list_push(&ctx->scratch, &ctx->n_scratch, &ctx->cap_scratch, c);
    return c;
}

// g can become t's gradient as it is: a scratch tensor of t's dtype with contiguous storage of
// its own (no view shares it) that is no other tensor's gradient, for a tensor that does not
// own its gradient across steps (a persistent one gets a copy of its own).
static bool stealable(const amp_tensor_t *t, const amp_tensor_t *g) {
    return !t->persistent && !g->persistent && !g->is_view && !g->is_grad && g->buf &&
           g->buf->refcount == 1 && g->offset == 0 && g->dtype == t->dtype &&
           amp_tensor_is_contiguous(g);
}

// Whether g's dtype can be t's gradient's: t's own, or a narrower floating one (whose values
// widen exactly) when t is a leaf (whatever reads a leaf's gradient widens it or reads it by
// dtype: amp_tensor_grad, the GradScaler's unscale, the optimizers, the statistics) or the node
// that made t reads a gradient of any dtype (amp_node.narrow_dy).
static bool grad_dtype_ok(const amp_tensor_t *t, const amp_tensor_t *g) {
    if (g->dtype == t->dtype) return true;
    return (!t->node || (t->node->narrow_dy && t->node->out == t)) &&
           amp_dtype_is_float(g->dtype) && amp_dtype_is_float(t->dtype) &&
           amp_dtype_size(g->dtype) < amp_dtype_size(t->dtype);
}

// g, dy itself or a view of its storage alone, can become t's first gradient by taking dy's
// storage over: dy is a gradient that autograd releases after the node now running, which leaves
// the storage to t.grad. A persistent t takes it only in a narrower dtype (a copy of its own in
// t's dtype would cost what the widening does) and whole (its gradient outlives the step).
static bool takeable(const amp_tensor_t *t, const amp_tensor_t *g, const amp_tensor_t *dy) {
    return !t->grad && dy->is_grad && !dy->persistent && dy->buf && g->buf == dy->buf &&
           dy->buf->refcount == (g == dy ? 1 : 2) && grad_dtype_ok(t, g) &&
           amp_tensor_is_contiguous(g) &&
           (!t->persistent || (g->dtype != t->dtype && g->offset == 0 &&
                               (size_t)amp_numel(g) * amp_dtype_size(g->dtype) == g->buf->nbytes));
}

// A persistent tensor's gradient struct (in no list, like amp_grad_new's) over g's storage.
static amp_tensor_t *grad_adopt(const amp_tensor_t *g) {
    amp_tensor_t *c = amp_xcalloc(1, sizeof *c);
    tensor_over(c, g->ctx, g->dtype, g, g->buf);
    c->buf->refcount++;
    c->buf->droppable = false;
    c->persistent = c->is_grad = true;
    return c;
}

amp_tensor_t *amp_grad_scratch(amp_ctx_t *ctx, const amp_tensor_t *x) {
    amp_tensor_t *dx = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    if (x->requires_grad) amp_instr_arm(ctx, dx);
    return dx;
}

void amp_grad_accumulate_last(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g, amp_tensor_t *dy) {
    if (!t->requires_grad) return;
    if (!takeable(t, g, dy)) {
        amp_grad_accumulate(ctx, t, g);
        return;
    }
    char s1[64], s2[64];
    AMP_ASSERT(amp_same_shape(t, g), "(gradient %s for a tensor of shape %s)",
               amp_shape_str(g, s1, sizeof s1), amp_shape_str(t, s2, sizeof s2));
    if (t->persistent) {
        t->grad = grad_adopt(g);
    } else {
        int64_t stride[AMP_MAX_DIMS];
        amp_contiguous_strides(t->ndim, t->shape, stride);
        t->grad = g != dy ? g : amp_view_new(ctx, dy, t->ndim, t->shape, stride, dy->offset);
        t->grad->is_grad = true; // kept past the node, which releases dy's hold on the storage
    }
    if (ctx->instr && ctx->in_backward) amp_instr_grad(ctx, t);
}

// g, a gradient that autograd still holds for another use (an add hands its incoming gradient to
// both operands), can become t's first gradient by sharing g's storage: whatever writes into a
// shared gradient later writes a buffer of its own instead (own_grad).
static bool shareable(const amp_tensor_t *t, const amp_tensor_t *g) {
    return !t->persistent && g->is_grad && !g->persistent && g->buf && g->dtype == t->dtype &&
           amp_tensor_is_contiguous(g);
}

// Whether gradient g's storage is shared (a shared gradient, a view of one, or an incoming
// gradient taken over while the node that passed it still runs): no write into it.
static bool grad_shared(const amp_tensor_t *g) {
    return !g->persistent && g->buf->refcount > 1;
}

// Whether t's gradient can be summed into where it is: not shared, and in t's dtype (a narrower
// first gradient, takeable() above, is widened before anything is added to it).
static bool grad_writable(const amp_tensor_t *t) {
    return !grad_shared(t->grad) && t->grad->dtype == t->dtype;
}

// Gives t a gradient buffer of its own, in its dtype, holding its gradient so far, when its
// gradient is not writable.
static void own_grad(amp_tensor_t *t) {
    if (!grad_writable(t)) grad_copy_to_own(t);
}

void amp_grad_accumulate_slice(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g, int dim,
                               int64_t start) {
    if (!t->requires_grad) return;
    AMP_ASSERT(g->ndim == t->ndim && dim >= 0 && dim < t->ndim && start >= 0 &&
               start + g->shape[dim] <= t->shape[dim]);
    for (int d = 0; d < t->ndim; d++)
        AMP_ASSERT(d == dim || g->shape[d] == t->shape[d], "(slice gradient, dim %d)", d);
    if (!t->grad) {
        t->grad = amp_grad_new(ctx, t);
        ctx->be->fill(ctx->bctx, t->grad, 0.0f);
    } else {
        own_grad(t);
    }
    amp_tensor_t *slice = amp_view_new(ctx, t->grad, g->ndim, g->shape, t->grad->stride,
                                       t->grad->offset + start * t->grad->stride[dim]);
    amp_tensor_t *gc = contiguous_as(g, t->dtype);
    ctx->be->binary(ctx->bctx, AMP_BINARY_ADD, slice, slice, gc);
    release_temp(g, gc);
    if (ctx->instr && ctx->in_backward) amp_instr_grad(ctx, t);
}

void amp_grad_accumulate(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g) {
    if (!t->requires_grad) return;
    char s1[64], s2[64];
    AMP_ASSERT(amp_same_shape(t, g), "(gradient %s for a tensor of shape %s)",
               amp_shape_str(g, s1, sizeof s1), amp_shape_str(t, s2, sizeof s2));
    // the instrumentation follows gradients (a parameter's is read at the end of backward)
    const bool instr = ctx->instr && ctx->in_backward,
               arm = instr && !t->persistent && !amp_instr_grad_passed_on(ctx, t);
    if (!t->grad && stealable(t, g)) {
        g->is_grad = true; // the backward's own output becomes the gradient: no copy
        g->buf->droppable = false;
        t->grad = g;
    } else if (!t->grad && shareable(t, g)) { // no copy: written into by no one (own_grad)
        int64_t stride[AMP_MAX_DIMS];
        amp_contiguous_strides(t->ndim, t->shape, stride);
        t->grad = amp_view_new(ctx, g, t->ndim, t->shape, stride, g->offset);
        t->grad->is_grad = true;
    } else if (!t->grad) {
        amp_tensor_t *c = amp_grad_new(ctx, t);
        if (arm) amp_instr_arm(ctx, c);
        ctx->be->copy(ctx->bctx, c, g);
        t->grad = c;
    } else {
        amp_tensor_t *gc = contiguous_as(g, t->dtype);
        amp_tensor_t *old = t->grad;
        if (grad_writable(t)) { // in place
            if (arm) amp_instr_arm(ctx, old);
            ctx->be->binary(ctx->bctx, AMP_BINARY_ADD, old, old, gc);
        } else { // shared or narrower: the sum into a buffer of its own
            amp_tensor_t *c = amp_grad_new(ctx, t);
            if (arm) amp_instr_arm(ctx, c);
            ctx->be->binary(ctx->bctx, AMP_BINARY_ADD, c, old, gc);
            amp_grad_replace(t, c);
        }
        release_temp(g, gc);
    }
    if (instr) amp_instr_grad(ctx, t);
}
