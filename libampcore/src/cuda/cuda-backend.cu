/*
 * cuda-backend.cu — the CUDA backend's entry symbol, context and table: device memory through
 * the pool, host<->device copies on the context's stream, the shared strided-iterator setup,
 * and the abort path that hands broken invariants back to libampcore's abort hook.
 *
 * amp_cuda_backend_open() is the only exported symbol of libampcore_cuda.so (everything else
 * is hidden). It answers "no device" with the CUDA runtime's own words when there is no driver
 * or GPU, so `--device cuda` can say why.
 */
#include "cuda-impl.h"
#include "cuda-stats.h"

#include <stdarg.h>
#include <string.h>

#include <tuple>

// ---------------------------------------------------------------------------------------------
// Abort: this module's amp_abort / amp_abort_assert forward to the host's.

static void (*host_abort)(const char *file, int line, const char *fmt, ...);

extern "C" void amp_abort(const char *file, int line, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (host_abort) host_abort(file, line, "%s", msg);
    fprintf(stderr, "libampcore_cuda %s:%d: %s\n", file, line, msg);
    abort();
}

extern "C" void amp_abort_assert(const char *file, int line, const char *cond, const char *fmt,
                                 ...) {
    char detail[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    amp_abort(file, line, "assertion failed: %s%s", cond, detail);
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

void cuda_iter_init(cuda_iter *it, int ndim, const int64_t *shape, int nops,
                    const int64_t *const *strides) {
    AMP_ASSERT(nops >= 1 && nops <= CUDA_ITER_OPS && ndim >= 0 && ndim <= AMP_MAX_DIMS);
    memset(it, 0, sizeof *it);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        const int nd = it->ndim;
        bool merge = nd > 0;
        for (int o = 0; o < nops && merge; o++)
            merge = strides[o][d] * shape[d] == it->stride[o][nd - 1];
        if (merge) { // the outer dim steps over this one evenly
            it->shape[nd - 1] *= shape[d];
            for (int o = 0; o < nops; o++)
                it->stride[o][nd - 1] = strides[o][d];
            continue;
        }
        it->shape[nd] = shape[d];
        for (int o = 0; o < nops; o++)
            it->stride[o][nd] = strides[o][d];
        it->ndim++;
    }
    if (it->ndim == 0) { // one element
        it->ndim = 1;
        it->shape[0] = 1;
    }
    int64_t n = 1;
    for (int d = 0; d < it->ndim; d++)
        n *= it->shape[d];
    it->small = n <= INT32_MAX;
}

void *cuda_scratch(cuda_ctx *c, size_t nbytes) {
    if (nbytes > c->scratch_bytes) {
        if (c->scratch) cuda_pool_free(&c->pool, c->scratch);
        c->scratch = cuda_pool_alloc(&c->pool, nbytes);
        AMP_ASSERT(c->scratch != NULL, "(out of device memory for %zu bytes of scratch)", nbytes);
        c->scratch_bytes = nbytes;
    }
    return c->scratch;
}

// ---------------------------------------------------------------------------------------------
// Memory

// The last context opened: amp_cuda_peak_bytes() reports its pool's peak.
static cuda_ctx *last_ctx;

static void *be_alloc(void *bctx, size_t nbytes) {
    return cuda_pool_alloc(&cuda_of(bctx)->pool, nbytes); // uninitialised, like the table says
}

static void be_free(void *bctx, void *p) {
    cuda_ctx *c = cuda_of(bctx);
    cuda_pending_flush(c);
    cuda_held_guard(c, p, 1); // the buffer that starts at p
    cuda_pool_free(&c->pool, p);
}

static void be_upload(void *bctx, void *dst, const void *host, size_t nbytes) {
    cuda_ctx *c = cuda_of(bctx);
    if (!nbytes) return;
    cuda_pending_flush(c);
    cuda_held_guard(c, dst, nbytes);
    // From pageable memory the copy has returned once the source was staged: host may change.
    CUDA_CHECK(cudaMemcpyAsync(dst, host, nbytes, cudaMemcpyHostToDevice, c->stream));
}

static void be_download(void *bctx, void *host, const void *src, size_t nbytes) {
    cuda_ctx *c = cuda_of(bctx);
    if (!nbytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

static void *be_host_alloc(void *bctx, size_t nbytes) {
    (void)bctx;
    void *p = NULL;
    return cudaMallocHost(&p, nbytes) == cudaSuccess ? p : NULL;
}

static void be_host_free(void *bctx, void *p) {
    (void)bctx;
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

static void be_download_async(void *bctx, void *host, const void *src, size_t nbytes) {
    cuda_ctx *c = cuda_of(bctx);
    if (!nbytes) return;
    if (!c->downloaded) CUDA_CHECK(cudaEventCreateWithFlags(&c->downloaded, cudaEventDisableTiming));
    CUDA_CHECK(cudaMemcpyAsync(host, src, nbytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaEventRecord(c->downloaded, c->stream));
}

static void be_download_wait(void *bctx) {
    cuda_ctx *c = cuda_of(bctx);
    if (c->downloaded) CUDA_CHECK(cudaEventSynchronize(c->downloaded));
}

static void be_synchronize(void *bctx) {
    CUDA_CHECK(cudaStreamSynchronize(cuda_of(bctx)->stream));
}

static void be_release(void *bctx) {
    cuda_ctx *c = cuda_of(bctx);
    if (!c) return;
    if (last_ctx == c) last_ctx = NULL;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    cuda_gemm_release(c);
    if (c->scratch) cuda_pool_free(&c->pool, c->scratch);
    if (c->gemm_ws) cuda_pool_free(&c->pool, c->gemm_ws);
    cuda_pool_release(&c->pool);
    CUBLAS_CHECK(cublasLtDestroy(c->lt));
    if (c->downloaded) CUDA_CHECK(cudaEventDestroy(c->downloaded));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    free(c);
}

// ---------------------------------------------------------------------------------------------
// The table

static void hold(cuda_ctx *c, const amp_tensor_t *t, const cuda_stats_job &job,
                 amp_dtype target);

// stats_into: the fused statistics kernel (cuda-stats.cu) on the context's stream, many tensors
// per launch. A lone floating tensor (an op's output that its kernel could not add) waits for the
// next backend call: when that call's kernel reads it whole (the GELU after a linear, the cast of
// the logits, the residual add), it adds them as it reads instead of a launch of their own. A
// batch's floating tensors wait in cuda_ctx.held for the unscale or the optimizer step.
void cuda_stats_into(void *bctx, const amp_tensor_t *const *x, int n, amp_dtype target,
                     amp_stats *slots, const int64_t *slot) {
    AMP_ASSERT(n >= 0 && n <= AMP_STATS_BATCH, "(%d tensors)", n);
    cuda_ctx *c = cuda_of(bctx);
    cuda_pending_flush(c);
    cuda_stats_job jobs[AMP_STATS_BATCH];
    int n_jobs = 0;
    for (int k = 0; k < n; k++) {
        CUDA_ASSERT_CONTIGUOUS(x[k]);
        const cuda_stats_job job = {amp_tensor_ptr(x[k]), cuda_numel(x[k]), slots + slot[k],
                                    x[k]->dtype};
        const bool defer = c->defer_stats && amp_dtype_is_float(job.dtype) && job.numel > 0;
        if (defer && n == 1) {
            c->pending = {job.data, job.numel, job.slot, job.dtype, target};
            return;
        }
        if (defer && c->n_held < CUDA_HELD_MAX)
            hold(c, x[k], job, target);
        else
            jobs[n_jobs++] = job;
    }
    if (n_jobs) CUDA_CHECK(cuda_stats_launch(jobs, n_jobs, target, c->stream));
}

void cuda_pending_flush(cuda_ctx *c) {
    if (!c->pending.slot) return;
    const cuda_stats_job job = {c->pending.data, c->pending.numel, c->pending.slot,
                                c->pending.dtype};
    c->pending.slot = NULL;
    CUDA_CHECK(cuda_stats_launch(&job, 1, c->pending.target, c->stream));
}

// ---------------------------------------------------------------------------------------------
// Held statistics (cuda_ctx.held, sorted by buffer: buffers do not overlap, so their ends are in
// order too, and a guard is a binary search)

static void hold(cuda_ctx *c, const amp_tensor_t *t, const cuda_stats_job &job, amp_dtype target) {
    const char *base = (const char *)t->buf->data;
    int i = c->n_held++;
    for (; i > 0 && c->held[i - 1].base > base; i--)
        c->held[i] = c->held[i - 1];
    c->held[i] = {base, base + t->buf->nbytes, job.data, job.numel, job.slot, job.dtype, target};
}

// The first held entry whose buffer ends after p.
static int held_after(const cuda_ctx *c, const char *p) {
    int lo = 0, hi = c->n_held;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (c->held[mid].end > p)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void cuda_held_flush(cuda_ctx *c) {
    while (c->n_held) { // one launch per autocast dtype (a batch has one)
        const amp_dtype target = c->held[0].target;
        cuda_stats_job jobs[CUDA_HELD_MAX];
        int n_jobs = 0, kept = 0;
        for (int k = 0; k < c->n_held; k++) {
            const cuda_held &h = c->held[k];
            if (h.target == target)
                jobs[n_jobs++] = {h.data, h.numel, h.slot, h.dtype};
            else
                c->held[kept++] = h;
        }
        c->n_held = kept;
        CUDA_CHECK(cuda_stats_launch(jobs, n_jobs, target, c->stream));
    }
}

void cuda_held_guard(cuda_ctx *c, const void *lo, size_t bytes) {
    if (!c->n_held || !lo) return;
    const int i = held_after(c, (const char *)lo);
    if (i < c->n_held && c->held[i].base < (const char *)lo + bytes) cuda_held_flush(c);
}

void cuda_held_guard_tensor(cuda_ctx *c, const amp_tensor_t *t) {
    if (t) cuda_held_guard(c, t->buf->data, t->buf->nbytes);
}

bool cuda_held_take(cuda_ctx *c, const amp_tensor_t *t, amp_stats **slot, amp_dtype *target) {
    if (!c->n_held) return false;
    const void *data = amp_tensor_ptr(t);
    const int64_t numel = cuda_numel(t);
    for (int k = held_after(c, (const char *)t->buf->data);
         k < c->n_held && c->held[k].base == (const char *)t->buf->data; k++) {
        const cuda_held &h = c->held[k];
        if (h.data != data || h.numel != numel || h.dtype != t->dtype) continue;
        *slot = h.slot;
        *target = h.target;
        c->n_held--;
        for (; k < c->n_held; k++)
            c->held[k] = c->held[k + 1];
        return true;
    }
    return false;
}

static void flush_all(cuda_ctx *c) {
    cuda_pending_flush(c);
    cuda_held_flush(c);
}

// The table's wrappers. FLUSHING: a member that reads or copies device memory wholesale (the
// step's statistics among it) launches everything pending and held first. WRITES: a member
// launches the pending statistics (unless it may take them: cuda_fuse_take_input, TAKES) and
// guards the buffers of its tensor arguments at the positions OUT (after bctx), which it writes.
template <auto F> struct flushing;
template <typename R, typename... A, R (*F)(void *, A...)> struct flushing<F> {
    static R call(void *bctx, A... a) {
        flush_all(cuda_of(bctx));
        return F(bctx, a...);
    }
};
#define FLUSHING(f) flushing<f>::call

template <bool PENDING, int... OUT> struct outs {
    template <typename... A> static void guard(cuda_ctx *c, const A &...a) {
        if (PENDING) cuda_pending_flush(c);
        if (c->n_held) {
            const std::tuple<const A &...> args(a...);
            (cuda_held_guard_tensor(c, std::get<OUT>(args)), ...);
        }
    }
};
template <auto F, typename O> struct writes;
template <typename O, typename R, typename... A, R (*F)(void *, A...)> struct writes<F, O> {
    static R call(void *bctx, A... a) {
        O::guard(cuda_of(bctx), a...);
        return F(bctx, a...);
    }
};
#define WRITES(f, ...) writes<f, outs<true, __VA_ARGS__>>::call
#define TAKES(f, ...) writes<f, outs<false, __VA_ARGS__>>::call

static const amp_backend_i cuda_backend = {
    .name = "cuda",
    .alloc = be_alloc,
    .free = be_free,
    .upload = be_upload,
    .download = FLUSHING(be_download),
    .host_alloc = be_host_alloc,
    .host_free = be_host_free,
    .download_async = FLUSHING(be_download_async),
    .download_wait = be_download_wait,
    .copy = TAKES(cuda_copy, 0),
    .fill = WRITES(cuda_fill, 0),
    .unary = TAKES(cuda_unary, 2),
    .unary_backward = TAKES(cuda_unary_backward, 2),
    .binary = TAKES(cuda_binary, 1),
    .reduce_sum = WRITES(cuda_reduce_sum, 0),
    .gemm = WRITES(cuda_gemm, 1),
    .gemm_bgrad = WRITES(cuda_gemm_bgrad, 1, 4),
    .softmax = WRITES(cuda_softmax, 1),
    .softmax_backward = WRITES(cuda_softmax_backward, 1),
    .layer_norm = WRITES(cuda_layer_norm, 0, 1, 2),
    .layer_norm_backward = WRITES(cuda_layer_norm_backward, 0, 1, 2),
    .embedding = WRITES(cuda_embedding, 0),
    .embedding_backward = WRITES(cuda_embedding_backward, 0),
    .im2col = WRITES(cuda_im2col, 1),
    .col2im = WRITES(cuda_col2im, 1),
    .max_pool2d = WRITES(cuda_max_pool2d, 0, 1),
    .max_pool2d_backward = WRITES(cuda_max_pool2d_backward, 0),
    .nll_loss = WRITES(cuda_nll_loss, 0),
    .nll_loss_backward = WRITES(cuda_nll_loss_backward, 0),
    .masked_fill = WRITES(cuda_masked_fill, 0),
    .dropout_mask = WRITES(cuda_dropout_mask, 0),
    .unscale = WRITES(cuda_unscale, 3), // takes or guards the gradients itself
    .scale_update = WRITES(cuda_scale_update, 0, 1, 2, 7),
    .optim_step = WRITES(cuda_optim_step, 6), // the same for the parameters and their state
    .stats_into = cuda_stats_into,
    .synchronize = FLUSHING(be_synchronize),
    .release = FLUSHING(be_release),
};


// The peak of device bytes held by live tensors and scratch (the benchmark's counterpart of
// torch.cuda.max_memory_allocated); reset restarts it from the bytes held now. Exported for
// probe/bench/cuda_bench.c, which finds it with dlsym.
extern "C" __attribute__((visibility("default"))) size_t amp_cuda_peak_bytes(int reset) {
    if (!last_ctx) return 0;
    size_t peak = last_ctx->pool.peak_bytes;
    if (reset) last_ctx->pool.peak_bytes = last_ctx->pool.in_use_bytes;
    return peak;
}

extern "C" __attribute__((visibility("default"))) const amp_backend_i *
amp_cuda_backend_open(const amp_cuda_host *host, void **bctx, char *err, size_t errlen) {
    *bctx = NULL;
    if (!host || host->abi != AMP_CUDA_MODULE_ABI) {
        snprintf(err, errlen, "CUDA backend module ABI mismatch (libampcore %d, module %d)",
                 host ? host->abi : -1, AMP_CUDA_MODULE_ABI);
        return NULL;
    }
    host_abort = host->abort;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "no CUDA driver/GPU available (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    CUDA_CHECK(cudaGetDevice(&c->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    const char *fused = getenv("AMPPROBE_STATS_FUSED"); // "0": every tensor read on its own
    c->defer_stats = !(fused && strcmp(fused, "0") == 0);
    c->gemm_ws_bytes = 32u << 20;
    c->gemm_ws = cuda_pool_alloc(&c->pool, c->gemm_ws_bytes);
    AMP_ASSERT(c->gemm_ws != NULL, "(no device memory for the cuBLASLt workspace)");
    last_ctx = c;
    *bctx = c;
    return &cuda_backend;
}
