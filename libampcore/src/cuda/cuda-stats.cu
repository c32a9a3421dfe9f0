/*
 * cuda-stats.cu — the optional `stats_into` member: min/max/amax over the finite values, NaN and
 * ±inf counts, overflow / underflow / zero counts relative to the autocast dtype and the sum of
 * squares, in one fused pass.
 *
 * Blocks reduce grid-strided slices into per-block partials and one block combines them into the
 * caller's amp_stats slot in device memory, all queued on the stream: nothing waits. The
 * instrumentation downloads a step's slots once (instrument.c). Thresholds are those of stats.c
 * (AMP-SEMANTICS §5).
 */
#include "cuda-impl.h"

#include <math.h>

#define STATS_BLOCK 256
#define STATS_MAX_BLOCKS 512

struct cuda_stats_result {
    float min, max;
    unsigned long long nan, pinf, ninf, over, under, zero;
    double sumsq;
};

__device__ __forceinline__ void stats_combine(cuda_stats_result &a, const cuda_stats_result &b) {
    a.min = fminf(a.min, b.min);
    a.max = fmaxf(a.max, b.max);
    a.nan += b.nan;
    a.pinf += b.pinf;
    a.ninf += b.ninf;
    a.over += b.over;
    a.under += b.under;
    a.zero += b.zero;
    a.sumsq += b.sumsq;
}

__device__ void stats_block_reduce(cuda_stats_result &r, cuda_stats_result *out) {
    __shared__ cuda_stats_result part[STATS_BLOCK];
    part[threadIdx.x] = r;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) stats_combine(part[threadIdx.x], part[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}

__global__ void __launch_bounds__(STATS_BLOCK)
    stats_kernel(cuda_stats_result *partial, const void *x, amp_dtype xt, int64_t n, float overflow,
                 float min_normal) {
    cuda_stats_result r = {INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0.0};
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = cuda_load(xt, x, i);
        if (isnan(v)) {
            r.nan++;
            continue;
        }
        if (isinf(v)) {
            if (v > 0)
                r.pinf++;
            else
                r.ninf++;
            continue;
        }
        r.min = fminf(r.min, v);
        r.max = fmaxf(r.max, v);
        r.sumsq += (double)v * v;
        const float a = fabsf(v);
        r.zero += a == 0.0f;
        r.over += a >= overflow;
        r.under += a != 0.0f && a < min_normal;
    }
    stats_block_reduce(r, &partial[blockIdx.x]);
}

// Combines the partials and writes the finished amp_stats (NaN range when nothing is finite).
__global__ void __launch_bounds__(STATS_BLOCK)
    stats_finish_kernel(amp_stats *out, const cuda_stats_result *partial, int blocks, int64_t n) {
    cuda_stats_result r = {INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0.0};
    for (int i = threadIdx.x; i < blocks; i += blockDim.x)
        stats_combine(r, partial[i]);
    __shared__ cuda_stats_result total;
    stats_block_reduce(r, &total);
    __syncthreads();
    if (threadIdx.x != 0) return;
    const cuda_stats_result t = total;
    const bool any = n - (int64_t)(t.nan + t.pinf + t.ninf) > 0;
    amp_stats s;
    s.numel = n;
    s.min = any ? t.min : NAN;
    s.max = any ? t.max : NAN;
    s.amax = any ? fmaxf(fabsf(t.min), fabsf(t.max)) : NAN;
    s.n_nan = (int64_t)t.nan;
    s.n_posinf = (int64_t)t.pinf;
    s.n_neginf = (int64_t)t.ninf;
    s.n_overflow = (int64_t)t.over;
    s.n_underflow = (int64_t)t.under;
    s.n_zero = (int64_t)t.zero;
    s.sumsq = t.sumsq;
    *out = s;
}

void cuda_stats_into(void *bctx, const amp_tensor_t *x, amp_dtype target, amp_stats *slots,
                     int64_t slot) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(x);
    const int64_t n = cuda_numel(x);
    float overflow = INFINITY, min_normal = 0.0f;
    if (target == AMP_DTYPE_F16) overflow = 65520.0f, min_normal = 6.103515625e-05f;
    if (target == AMP_DTYPE_BF16)
        overflow = 3.3961775292304854e38f, min_normal = 1.1754943508222875e-38f;
    if (!c->stats_dev) {
        c->stats_dev = (cuda_stats_result *)cuda_pool_alloc(
            &c->pool, STATS_MAX_BLOCKS * sizeof(cuda_stats_result));
        AMP_ASSERT(c->stats_dev != NULL);
    }
    int blocks = (int)((n + STATS_BLOCK * 8 - 1) / (STATS_BLOCK * 8));
    blocks = blocks < 1 ? 1 : blocks > STATS_MAX_BLOCKS ? STATS_MAX_BLOCKS : blocks;
    // the partials are reused by the next call: stream order makes that safe
    stats_kernel<<<blocks, STATS_BLOCK, 0, c->stream>>>(c->stats_dev, amp_tensor_ptr(x), x->dtype,
                                                        n, overflow, min_normal);
    CUDA_LAUNCH_CHECK();
    stats_finish_kernel<<<1, STATS_BLOCK, 0, c->stream>>>(slots + slot, c->stats_dev, blocks, n);
    CUDA_LAUNCH_CHECK();
}
