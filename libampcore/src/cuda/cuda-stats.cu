/*
 * cuda-stats.cu — the optional `stats_into` member: min/max/amax over the finite values, NaN and
 * ±inf counts, overflow / underflow / zero counts relative to the autocast dtype and the sum of
 * squares, in one fused pass.
 *
 * One kernel per tensor: each thread reads 16-byte vectors of the storage type (4 f32 or 8 f16/bf16
 * values) over a grid-strided range and keeps 32-bit counters; warps and then the block combine by
 * shuffles, and each block adds its total into the caller's amp_stats slot with atomics. The slot
 * starts empty (amp_stats_empty(): the frontend uploads empty slots before use) and comes back
 * unfinished: amp_stats_finish() derives amax and the NaN range on the host. Nothing waits; the
 * instrumentation downloads a step's slots once (instrument.c). Thresholds are those of stats.c
 * (AMP-SEMANTICS §5).
 */
#include "cuda-impl.h"

#include <math.h>

#define STATS_BLOCK 256
#define STATS_MAX_BLOCKS 1024

struct cuda_stats_result {
    float min, max;
    unsigned long long nan, pinf, ninf, over, under, zero;
    double sumsq;
};

struct stats_limits {
    float overflow, min_normal;
};

// One thread's running numbers (32-bit counts: a thread sees far fewer than 2^32 values).
struct thread_acc {
    float mn, mx, ss;
    unsigned nan, pinf, ninf, over, under, zero;
};

__device__ __forceinline__ void acc_value(thread_acc &a, float v, stats_limits lim) {
    if (!isfinite(v)) {
        a.nan += isnan(v);
        a.pinf += v == INFINITY;
        a.ninf += v == -INFINITY;
        return;
    }
    a.mn = fminf(a.mn, v);
    a.mx = fmaxf(a.mx, v);
    a.ss = fmaf(v, v, a.ss);
    const float m = fabsf(v);
    a.zero += m == 0.0f;
    a.over += m >= lim.overflow;
    a.under += m != 0.0f && m < lim.min_normal;
}

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

__device__ __forceinline__ cuda_stats_result shfl_down(const cuda_stats_result &r, int d) {
    cuda_stats_result o;
    o.min = __shfl_down_sync(0xffffffffu, r.min, d);
    o.max = __shfl_down_sync(0xffffffffu, r.max, d);
    o.nan = __shfl_down_sync(0xffffffffu, r.nan, d);
    o.pinf = __shfl_down_sync(0xffffffffu, r.pinf, d);
    o.ninf = __shfl_down_sync(0xffffffffu, r.ninf, d);
    o.over = __shfl_down_sync(0xffffffffu, r.over, d);
    o.under = __shfl_down_sync(0xffffffffu, r.under, d);
    o.zero = __shfl_down_sync(0xffffffffu, r.zero, d);
    o.sumsq = __shfl_down_sync(0xffffffffu, r.sumsq, d);
    return o;
}

// The block's total in thread 0 (blockDim.x a multiple of 32, at most 1024).
__device__ cuda_stats_result block_reduce(cuda_stats_result r) {
    __shared__ cuda_stats_result warps[32];
    for (int d = 16; d > 0; d /= 2) stats_combine(r, shfl_down(r, d));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warps[warp] = r;
    __syncthreads();
    if (warp == 0) {
        const int n = blockDim.x / 32;
        r = lane < n ? warps[lane] : cuda_stats_result{INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0.0};
        for (int d = 16; d > 0; d /= 2) stats_combine(r, shfl_down(r, d));
    }
    return r;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Float min/max by atomics on the bit patterns (ordered like the values for one sign).
__device__ __forceinline__ void atomic_min_float(float *a, float v) {
    if (v >= 0.0f) atomicMin((int *)a, __float_as_int(v));
    else atomicMax((unsigned *)a, __float_as_uint(v));
}

__device__ __forceinline__ void atomic_max_float(float *a, float v) {
    if (v >= 0.0f) atomicMax((int *)a, __float_as_int(v));
    else atomicMin((unsigned *)a, __float_as_uint(v));
}

// Thread 0 adds the block's total into the slot.
__device__ void block_add_to_slot(amp_stats *slot, const thread_acc &a, int64_t n) {
    cuda_stats_result r = {a.mn, a.mx, a.nan, a.pinf, a.ninf, a.over, a.under, a.zero, (double)a.ss};
    r = block_reduce(r);
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) slot->numel = n;
    if (r.min <= r.max) { // the block saw a finite value (+ 0.0f: -0 would misorder the bits)
        atomic_min_float(&slot->min, r.min + 0.0f);
        atomic_max_float(&slot->max, r.max + 0.0f);
        atomicAdd(&slot->sumsq, r.sumsq);
    }
    atomicAdd((unsigned long long *)&slot->n_nan, r.nan);
    atomicAdd((unsigned long long *)&slot->n_posinf, r.pinf);
    atomicAdd((unsigned long long *)&slot->n_neginf, r.ninf);
    atomicAdd((unsigned long long *)&slot->n_overflow, r.over);
    atomicAdd((unsigned long long *)&slot->n_underflow, r.under);
    atomicAdd((unsigned long long *)&slot->n_zero, r.zero);
}

template <typename T>
__global__ void __launch_bounds__(STATS_BLOCK)
    stats_kernel(amp_stats *slot, const T *x, int64_t n, bool aligned, stats_limits lim) {
    constexpr int N = 16 / sizeof(T);
    thread_acc a = {INFINITY, -INFINITY, 0.0f, 0, 0, 0, 0, 0, 0};
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t nvec = aligned ? n / N : 0;
    for (int64_t i = first; i < nvec; i += stride) {
        const uint4 raw = reinterpret_cast<const uint4 *>(x)[i];
        const T *v = reinterpret_cast<const T *>(&raw);
#pragma unroll
        for (int k = 0; k < N; k++) acc_value(a, to_float(v[k]), lim);
    }
    for (int64_t i = nvec * N + first; i < n; i += stride) acc_value(a, to_float(x[i]), lim);
    block_add_to_slot(slot, a, n);
}

// Integer tensors (rare: the instrumentation reads floating tensors).
__global__ void __launch_bounds__(STATS_BLOCK)
    stats_kernel_any(amp_stats *slot, const void *x, amp_dtype xt, int64_t n, stats_limits lim) {
    thread_acc a = {INFINITY, -INFINITY, 0.0f, 0, 0, 0, 0, 0, 0};
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        acc_value(a, cuda_load(xt, x, i), lim);
    block_add_to_slot(slot, a, n);
}

void cuda_stats_into(void *bctx, const amp_tensor_t *x, amp_dtype target, amp_stats *slots,
                     int64_t slot) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(x);
    const int64_t n = cuda_numel(x);
    stats_limits lim = {INFINITY, 0.0f};
    if (target == AMP_DTYPE_F16) lim = {65520.0f, 6.103515625e-05f};
    if (target == AMP_DTYPE_BF16) lim = {3.3961775292304854e38f, 1.1754943508222875e-38f};
    const void *p = amp_tensor_ptr(x);
    const bool aligned = ((uintptr_t)p & 15) == 0;
    const int64_t per_block = (int64_t)STATS_BLOCK * 16; // 16 values per thread at least
    int blocks = (int)((n + per_block - 1) / per_block);
    blocks = blocks < 1 ? 1 : blocks > STATS_MAX_BLOCKS ? STATS_MAX_BLOCKS : blocks;
    amp_stats *out = slots + slot;
    switch (x->dtype) {
    case AMP_DTYPE_F32:
        stats_kernel<float><<<blocks, STATS_BLOCK, 0, c->stream>>>(out, (const float *)p, n, aligned, lim);
        break;
    case AMP_DTYPE_F16:
        stats_kernel<__half><<<blocks, STATS_BLOCK, 0, c->stream>>>(out, (const __half *)p, n, aligned, lim);
        break;
    case AMP_DTYPE_BF16:
        stats_kernel<__nv_bfloat16>
            <<<blocks, STATS_BLOCK, 0, c->stream>>>(out, (const __nv_bfloat16 *)p, n, aligned, lim);
        break;
    default:
        stats_kernel_any<<<blocks, STATS_BLOCK, 0, c->stream>>>(out, p, x->dtype, n, lim);
        break;
    }
    CUDA_LAUNCH_CHECK();
}
