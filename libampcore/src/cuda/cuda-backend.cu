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
#include <utility>

// ---------------------------------------------------------------------------------------------
// Abort: this module's amp_abort / amp_abort_assert forward to the host's.

static void (*host_abort)(const char *file, int line, const char *fmt, ...);
// The host's NVTX ranges (NULL: no NVTX tool injected)
static void (*host_nvtx_push)(const char *name);
static void (*host_nvtx_pop)(void);

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
    it->ndim = amp_coalesce_dims(ndim, shape, nops, strides, it->shape, it->stride);
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

static bool held_buffer(const cuda_ctx *c, const char *base);
static void held_release(cuda_ctx *c, const void *base);

static void be_free(void *bctx, void *p) {
    cuda_ctx *c = cuda_of(bctx);
    const char *b = (const char *)p, *e = b + cuda_pool_free(&c->pool, p);
    cuda_colsum_guard(c, b, (size_t)(e - b));
    // the slots the statistics go to: all launched; a held tensor's buffer: its own launched
    // (before anything else can have the memory: one stream)
    if (!c->n_held) return;
    if (b < c->slots_hi && c->slots_lo < e)
        cuda_held_flush(c);
    else if (held_buffer(c, b))
        held_release(c, b);
}

static void be_upload(void *bctx, void *dst, const void *host, size_t nbytes) {
    cuda_ctx *c = cuda_of(bctx);
    if (!nbytes) return;
    cuda_held_guard(c, dst, nbytes);
    cuda_colsum_guard(c, dst, nbytes);
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
    if (!c->downloaded)
        CUDA_CHECK(cudaEventCreateWithFlags(&c->downloaded, cudaEventDisableTiming));
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
    if (c->colsum.partial) cuda_pool_free(&c->pool, c->colsum.partial);
    if (c->gemm_ws) cuda_pool_free(&c->pool, c->gemm_ws);
    cuda_pool_release(&c->pool);
    CUBLAS_CHECK(cublasLtDestroy(c->lt));
    if (c->downloaded) CUDA_CHECK(cudaEventDestroy(c->downloaded));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    free(c);
}

// ---------------------------------------------------------------------------------------------
// Held statistics (cuda_ctx.held)

#define HELD_MASK (2 * CUDA_HELD_MAX - 1)

static int held_home(const char *base) { // Fibonacci hashing of the buffer's address
    return (int)(((uintptr_t)base * 0x9E3779B97F4A7C15ull) >> 40) & HELD_MASK;
}

// Removes entry i, shifting back the entries after it that probed past it (a later entry may
// move into i).
static void held_remove(cuda_ctx *c, int i) {
    for (int j = (i + 1) & HELD_MASK; c->held[j].base; j = (j + 1) & HELD_MASK) {
        const int home = held_home(c->held[j].base);
        if (((j - home) & HELD_MASK) >= ((j - i) & HELD_MASK)) { // home at or before i
            c->held[i] = c->held[j];
            i = j;
        }
    }
    c->held[i].base = NULL;
    c->n_held--;
}

// Launches the statistics of the held entries `which` picks and removes them from the table:
// one launch per autocast dtype among them (nearly always one).
template <typename P> static void held_launch(cuda_ctx *c, P which) {
    cuda_stats_job jobs[CUDA_HELD_MAX];
    amp_dtype targets[CUDA_HELD_MAX];
    int n = 0;
    for (int i = 0; i <= HELD_MASK;) {
        const cuda_held &h = c->held[i];
        if (!h.base || !which(h)) {
            i++;
            continue;
        }
        targets[n] = h.target;
        jobs[n++] = {h.data, h.numel, h.slot, h.dtype};
        held_remove(c, i); // an entry may have moved into i: looked at again
    }
    // in the host's "ampprobe.stats" range, as its own statistics launches are: a capture then
    // attributes these kernels too, whatever free, fill or flush launched them
    if (n && host_nvtx_push) host_nvtx_push("ampprobe.stats");
    for (int done = 0; done < n;) {
        const amp_dtype target = targets[done];
        int k = done;
        for (int i = done; i < n; i++)
            if (targets[i] == target) {
                std::swap(jobs[i], jobs[k]);
                std::swap(targets[i], targets[k]);
                k++;
            }
        CUDA_CHECK(cuda_stats_launch(jobs + done, k - done, target, c->stream));
        done = k;
    }
    if (n && host_nvtx_pop) host_nvtx_pop();
}

void cuda_held_flush(cuda_ctx *c) {
    if (c->n_held) held_launch(c, [](const cuda_held &) { return true; });
}

// Launches the held statistics of the buffer at base alone: the others keep waiting for a kernel
// that reads their tensors anyway.
static void held_release(cuda_ctx *c, const void *base) {
    held_launch(c, [base](const cuda_held &h) { return h.base == base; });
}

static void hold(cuda_ctx *c, const amp_tensor_t *t, const cuda_stats_job &job, amp_dtype target,
                 bool sumsq) {
    if (c->n_held == CUDA_HELD_MAX) cuda_held_flush(c);
    const char *base = (const char *)t->buf->data;
    int i = held_home(base);
    while (c->held[i].base)
        i = (i + 1) & HELD_MASK;
    c->held[i] = {base, base + t->buf->nbytes, job.data, job.numel, job.slot, job.dtype, target,
                  sumsq};
    const char *slot = (const char *)job.slot;
    if (!c->n_held++) c->slots_lo = c->slots_hi = slot;
    if (slot < c->slots_lo) c->slots_lo = slot;
    if (slot + sizeof(amp_stats) > c->slots_hi) c->slots_hi = slot + sizeof(amp_stats);
}

// Whether an entry of the table holds the buffer at base.
static bool held_buffer(const cuda_ctx *c, const char *base) {
    for (int i = held_home(base); c->held[i].base; i = (i + 1) & HELD_MASK)
        if (c->held[i].base == base) return true;
    return false;
}

void cuda_held_guard(cuda_ctx *c, const void *lo, size_t bytes) {
    if (!c->n_held || !lo) return;
    const char *p = (const char *)lo;
    held_launch(c, [p, bytes](const cuda_held &h) { return h.base < p + bytes && p < h.end; });
}

void cuda_held_guard_tensor(cuda_ctx *c, const amp_tensor_t *t) {
    if (t && c->n_held && held_buffer(c, (const char *)t->buf->data)) held_release(c, t->buf->data);
}

void cuda_held_guard_tensors(cuda_ctx *c, const amp_tensor_t *const *t, int n) {
    if (!c->n_held) return;
    const char **held = (const char **)malloc((size_t)n * sizeof *held);
    AMP_ASSERT(held != NULL || n == 0, "(out of host memory)");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t[i] && held_buffer(c, (const char *)t[i]->buf->data))
            held[k++] = (const char *)t[i]->buf->data;
    if (k)
        held_launch(c, [held, k](const cuda_held &h) {
            for (int i = 0; i < k; i++)
                if (h.base == held[i]) return true;
            return false;
        });
    free(held);
}

bool cuda_held_take(cuda_ctx *c, const amp_tensor_t *t, bool with_sumsq, amp_stats **slot,
                    amp_dtype *target) {
    if (!c->n_held) return false;
    const char *base = (const char *)t->buf->data;
    const void *data = amp_tensor_ptr(t);
    const int64_t numel = cuda_numel(t);
    int i = held_home(base);
    for (; c->held[i].base; i = (i + 1) & HELD_MASK) {
        const cuda_held &h = c->held[i];
        if (h.base == base && h.data == data && h.numel == numel && h.dtype == t->dtype) break;
    }
    if (!c->held[i].base || (c->held[i].sumsq && !with_sumsq)) return false;
    *slot = c->held[i].slot;
    *target = c->held[i].target;
    held_remove(c, i);
    return true;
}

// ---------------------------------------------------------------------------------------------
// The table

// stats_into: the fused statistics kernel (cuda-stats.cu) on the context's stream, many tensors
// per launch, once the statistics of floating tensors have waited in cuda_ctx.held for a kernel
// that reads the tensor anyway to add them.
void cuda_stats_into(void *bctx, const amp_tensor_t *const *x, int n, amp_dtype target,
                     amp_stats *slots, const int64_t *slot, bool sumsq) {
    AMP_ASSERT(n >= 0 && n <= AMP_STATS_BATCH, "(%d tensors)", n);
    cuda_ctx *c = cuda_of(bctx);
    cuda_stats_job jobs[AMP_STATS_BATCH];
    int n_jobs = 0;
    for (int k = 0; k < n; k++) {
        CUDA_ASSERT_CONTIGUOUS(x[k]);
        const cuda_stats_job job = {amp_tensor_ptr(x[k]), cuda_numel(x[k]), slots + slot[k],
                                    x[k]->dtype};
        if (c->defer_stats && amp_dtype_is_float(job.dtype) && job.numel > 0)
            hold(c, x[k], job, target, sumsq);
        else
            jobs[n_jobs++] = job;
    }
    if (n_jobs) CUDA_CHECK(cuda_stats_launch(jobs, n_jobs, target, c->stream));
}

// The table's wrappers. FLUSHING: a member that reads device memory wholesale (the step's
// statistics among it) launches the held statistics first. WRITES: a member guards the buffers
// of its tensor arguments at the positions OUT (after bctx), which it writes.
template <auto F> struct flushing;
template <typename R, typename... A, R (*F)(void *, A...)> struct flushing<F> {
    static R call(void *bctx, A... a) {
        cuda_held_flush(cuda_of(bctx));
        return F(bctx, a...);
    }
};
#define FLUSHING(f) flushing<f>::call

template <int... OUT> struct outs {
    template <typename... A> static void guard(cuda_ctx *c, const A &...a) {
        if (c->n_held || c->colsum.data) {
            const std::tuple<const A &...> args(a...);
            (guard_one(c, std::get<OUT>(args)), ...);
        }
    }
    static void guard_one(cuda_ctx *c, const amp_tensor_t *t) {
        cuda_held_guard_tensor(c, t);
        if (t && t->buf) cuda_colsum_guard(c, t->buf->data, t->buf->nbytes);
    }
};
template <auto F, typename O> struct writes;
template <typename O, typename R, typename... A, R (*F)(void *, A...)> struct writes<F, O> {
    static R call(void *bctx, A... a) {
        O::guard(cuda_of(bctx), a...);
        return F(bctx, a...);
    }
};
#define WRITES(f, ...) writes<f, outs<__VA_ARGS__>>::call

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
    .copy = WRITES(cuda_copy, 0),
    .fill = WRITES(cuda_fill, 0),
    .unary = WRITES(cuda_unary, 2),
    .unary_backward = WRITES(cuda_unary_backward, 2),
    .binary = WRITES(cuda_binary, 1),
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
    .unscale = WRITES(cuda_unscale, 4), // takes or guards the gradients itself
    .scale_update = WRITES(cuda_scale_update, 0, 1, 2, 7),
    .optim_step = WRITES(cuda_optim_step, 7), // the parameters, their state and copies: itself
    .stats_into = cuda_stats_into,
    .synchronize = FLUSHING(be_synchronize),
    .release = FLUSHING(be_release),
};

// The peak of device bytes held by live tensors and scratch: in the pool's blocks (sizes rounded
// up to 2 MiB steps above 1 MiB), and in the sizes asked for (512-byte steps: the benchmark's
// counterpart of torch.cuda.max_memory_allocated, which counts those); reset restarts both from
// the bytes held now. Exported for probe/bench/cuda_bench.c, which finds them with dlsym.
static size_t peak_of(size_t *peak, size_t in_use, int reset) {
    const size_t was = *peak;
    if (reset) *peak = in_use;
    return was;
}

extern "C" __attribute__((visibility("default"))) size_t amp_cuda_peak_bytes(int reset) {
    cuda_pool *p = last_ctx ? &last_ctx->pool : NULL;
    return p ? peak_of(&p->peak_bytes, p->in_use_bytes, reset) : 0;
}

extern "C" __attribute__((visibility("default"))) size_t amp_cuda_peak_requested_bytes(int reset) {
    cuda_pool *p = last_ctx ? &last_ctx->pool : NULL;
    return p ? peak_of(&p->peak_requested, p->in_use_requested, reset) : 0;
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
    host_nvtx_push = host->nvtx_push;
    host_nvtx_pop = host->nvtx_pop;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        // (the runtime says "driver version is insufficient" when there is no driver at all)
        snprintf(err, errlen, "no GPU available: %s",
                 e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than the CUDA "
                                                    "runtime this build uses"
                 : e == cudaErrorNoDevice         ? "the driver sees no CUDA device"
                 : e != cudaSuccess               ? cudaGetErrorString(e)
                                                  : "the driver lists none");
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
