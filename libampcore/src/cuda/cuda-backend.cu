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
    cuda_pool_free(&cuda_of(bctx)->pool, p);
}

static void be_upload(void *bctx, void *dst, const void *host, size_t nbytes) {
    cuda_ctx *c = cuda_of(bctx);
    if (!nbytes) return;
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

// stats_into: the fused statistics kernel (cuda-stats.cu) on the context's stream, many tensors
// per launch. A lone floating tensor (an op's output that its kernel could not add) waits for the
// next backend call: when that call's kernel reads it whole (the GELU after a linear, the cast of
// the logits, the residual add), it adds them as it reads instead of a launch of their own.
void cuda_stats_into(void *bctx, const amp_tensor_t *const *x, int n, amp_dtype target,
                     amp_stats *slots, const int64_t *slot) {
    AMP_ASSERT(n >= 0 && n <= AMP_STATS_BATCH, "(%d tensors)", n);
    cuda_ctx *c = cuda_of(bctx);
    cuda_pending_flush(c);
    cuda_stats_job jobs[AMP_STATS_BATCH];
    for (int k = 0; k < n; k++) {
        CUDA_ASSERT_CONTIGUOUS(x[k]);
        jobs[k] = {amp_tensor_ptr(x[k]), cuda_numel(x[k]), slots + slot[k], x[k]->dtype};
    }
    if (n == 1 && c->defer_stats && amp_dtype_is_float(x[0]->dtype) && jobs[0].numel > 0) {
        c->pending = {jobs[0].data, jobs[0].numel, jobs[0].slot, jobs[0].dtype, target};
        return;
    }
    CUDA_CHECK(cuda_stats_launch(jobs, n, target, c->stream));
}

void cuda_pending_flush(cuda_ctx *c) {
    if (!c->pending.slot) return;
    const cuda_stats_job job = {c->pending.data, c->pending.numel, c->pending.slot,
                                c->pending.dtype};
    c->pending.slot = NULL;
    CUDA_CHECK(cuda_stats_launch(&job, 1, c->pending.target, c->stream));
}

// A table member that launches the pending statistics first: every one that touches device
// memory in use (not alloc and the host-memory members), but the ops that may take them
// (cuda_fuse_take_input), which launch them themselves on their other paths.
template <auto F> struct flushing;
template <typename R, typename... A, R (*F)(void *, A...)> struct flushing<F> {
    static R call(void *bctx, A... a) {
        cuda_pending_flush(cuda_of(bctx));
        return F(bctx, a...);
    }
};
#define FLUSHING(f) flushing<f>::call

static const amp_backend_i cuda_backend = {
    .name = "cuda",
    .alloc = be_alloc,
    .free = FLUSHING(be_free),
    .upload = FLUSHING(be_upload),
    .download = FLUSHING(be_download),
    .host_alloc = be_host_alloc,
    .host_free = be_host_free,
    .download_async = FLUSHING(be_download_async),
    .download_wait = be_download_wait,
    .copy = cuda_copy,
    .fill = FLUSHING(cuda_fill),
    .unary = cuda_unary,
    .unary_backward = cuda_unary_backward,
    .binary = cuda_binary,
    .reduce_sum = FLUSHING(cuda_reduce_sum),
    .gemm = FLUSHING(cuda_gemm),
    .gemm_bgrad = FLUSHING(cuda_gemm_bgrad),
    .softmax = FLUSHING(cuda_softmax),
    .softmax_backward = FLUSHING(cuda_softmax_backward),
    .layer_norm = FLUSHING(cuda_layer_norm),
    .layer_norm_backward = FLUSHING(cuda_layer_norm_backward),
    .embedding = FLUSHING(cuda_embedding),
    .embedding_backward = FLUSHING(cuda_embedding_backward),
    .im2col = FLUSHING(cuda_im2col),
    .col2im = FLUSHING(cuda_col2im),
    .max_pool2d = FLUSHING(cuda_max_pool2d),
    .max_pool2d_backward = FLUSHING(cuda_max_pool2d_backward),
    .nll_loss = FLUSHING(cuda_nll_loss),
    .nll_loss_backward = FLUSHING(cuda_nll_loss_backward),
    .masked_fill = FLUSHING(cuda_masked_fill),
    .dropout_mask = FLUSHING(cuda_dropout_mask),
    .unscale = FLUSHING(cuda_unscale),
    .scale_update = FLUSHING(cuda_scale_update),
    .optim_step = FLUSHING(cuda_optim_step),
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
