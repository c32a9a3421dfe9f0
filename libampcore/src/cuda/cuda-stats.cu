/*
 * cuda-stats.cu — min/max over the finite values, NaN and ±inf counts, overflow / underflow / zero
 * counts relative to the autocast dtype and the sum of squares, in one fused pass per tensor, for
 * many tensors per launch (cuda-stats.h). The CUDA backend's stats_into member and the PyTorch
 * bridge's module (libampstats_cuda.so) both launch it.
 *
 * A launch carries up to JOBS tensors in its parameters; each gets a run of blocks sized to its
 * length (capped), so one launch covers a layer's parameter gradients as well as one large
 * activation. Each thread reads 16-byte vectors of the storage type (4 f32 or 8 f16/bf16 values)
 * over a block-strided range of its tensor and keeps 32-bit counters; warps and then the block
 * combine by shuffles, and each block adds its total into the tensor's slot with atomics. Nothing
 * waits. Thresholds are those of stats.c (AMP-SEMANTICS §5).
 */
#include "cuda-impl.h"
#include "cuda-stats.h"

#include <float.h>
#include <math.h>

#define STATS_BLOCK 256
#define STATS_BLOCKS_PER_SM 4 // resident at once (__launch_bounds__ below)
#define JOBS 48               // tensors per launch (the parameters stay under 4 KiB)

struct stats_limits {
    float overflow, min_normal; // min_normal 0: no underflow counted (an f32 target)
};

struct stats_launch_params {
    stats_limits lim;
    amp_dtype target;
    int n;
    int first_block[JOBS + 1]; // job j owns blocks [first_block[j], first_block[j + 1])
    cuda_stats_job job[JOBS];
};

// One thread's running numbers (32-bit counts: a thread sees far fewer than 2^32 values). `small`
// counts the finite values below min_normal, zeros included: underflow = small - zero.
struct thread_acc {
    float mn, mx, ss;
    unsigned nan, pinf, ninf, over, small, zero;
};

// A finite value (the common case: no test for NaN or inf). OVER and SMALL drop the comparisons
// that cannot count anything: a finite value of the target's own 16-bit type never overflows it,
// and an f32 target counts neither.
template <bool OVER, bool SMALL>
__device__ __forceinline__ void acc_finite(thread_acc &a, float v, stats_limits lim) {
    const float m = fabsf(v);
    a.mn = fminf(a.mn, v);
    a.mx = fmaxf(a.mx, v);
    a.ss = fmaf(v, v, a.ss);
    a.zero += m == 0.0f;
    if (OVER) a.over += m >= lim.overflow;
    if (SMALL) a.small += m < lim.min_normal;
}

// Any value: NaN and ±inf counted, a finite one as above.
__device__ __forceinline__ void acc_value(thread_acc &a, float v, stats_limits lim) {
    if (!(fabsf(v) <= FLT_MAX)) { // rare: a branch that the warp almost never diverges on
        a.nan += isnan(v);
        a.pinf += v == INFINITY;
        a.ninf += v == -INFINITY;
        return;
    }
    acc_finite<true, true>(a, v, lim);
}

struct block_total {
    float min, max;
    unsigned long long nan, pinf, ninf, over, under, zero;
    double sumsq;
};

__device__ __forceinline__ void total_combine(block_total &a, const block_total &b) {
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

__device__ __forceinline__ block_total shfl_down(const block_total &r, int d) {
    block_total o;
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
__device__ block_total block_reduce(block_total r) {
    __shared__ block_total warps[32];
    for (int d = 16; d > 0; d /= 2) total_combine(r, shfl_down(r, d));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warps[warp] = r;
    __syncthreads();
    if (warp == 0) {
        const int n = blockDim.x / 32;
        r = lane < n ? warps[lane] : block_total{INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0.0};
        for (int d = 16; d > 0; d /= 2) total_combine(r, shfl_down(r, d));
    }
    return r;
}

// Float min/max by atomics on the bit patterns (ordered like the values for one sign).
__device__ __forceinline__ void atomic_min_float(float *a, float v) {
    if (v >= 0.0f) atomicMin((int *)a, __float_as_int(v));
    else atomicMax((unsigned *)a, __float_as_uint(v));
}

__device__ __forceinline__ void atomic_max_float(float *a, float v) {
    if (v >= 0.0f) atomicMax((int *)a, __float_as_int(v));
    else atomicMin((unsigned *)a, __float_as_uint(v));
}

// Thread 0 adds the block's total into the slot; the job's first block also sets numel.
__device__ void block_add_to_slot(const cuda_stats_job &job, bool first, const thread_acc &a,
                                  stats_limits lim) {
    const unsigned under = lim.min_normal > 0.0f ? a.small - a.zero : 0u;
    block_total r = {a.mn, a.mx, a.nan, a.pinf, a.ninf, a.over, under, a.zero, (double)a.ss};
    r = block_reduce(r);
    if (threadIdx.x != 0) return;
    amp_stats *slot = job.slot;
    if (first) slot->numel = job.numel;
    // Up to a thousand blocks end together on one slot: atomics only where they change something.
    // The slot's min only falls and its max only rises, so a stale read can only be less tight.
    if (r.min <= r.max) { // the block saw a finite value (+ 0.0f: -0 would misorder the bits)
        if (r.min < __ldcg(&slot->min)) atomic_min_float(&slot->min, r.min + 0.0f);
        if (r.max > __ldcg(&slot->max)) atomic_max_float(&slot->max, r.max + 0.0f);
        atomicAdd(&slot->sumsq, r.sumsq);
    }
    const struct {
        unsigned long long n;
        int64_t *to;
    } counts[] = {{r.nan, &slot->n_nan},         {r.pinf, &slot->n_posinf},
                  {r.ninf, &slot->n_neginf},     {r.over, &slot->n_overflow},
                  {r.under, &slot->n_underflow}, {r.zero, &slot->n_zero}};
    for (const auto &c : counts)
        if (c.n) atomicAdd((unsigned long long *)c.to, c.n);
}

// One 16-byte vector: the plain path when all its values are finite, else value by value.
template <typename T, bool OVER, bool SMALL>
__device__ __forceinline__ void acc_vector(thread_acc &a, const uint4 &raw, stats_limits lim) {
    constexpr int N = 16 / sizeof(T);
    const T *v = reinterpret_cast<const T *>(&raw);
    float f[N];
    bool finite = true;
#pragma unroll
    for (int k = 0; k < N; k++) {
        f[k] = cuda_io<T>::load(v[k]);
        finite &= fabsf(f[k]) <= FLT_MAX;
    }
    if (finite) {
#pragma unroll
        for (int k = 0; k < N; k++) acc_finite<OVER, SMALL>(a, f[k], lim);
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) acc_value(a, f[k], lim);
    }
}

// This thread's share of a floating tensor: 16-byte vectors when the memory is aligned, two in
// flight per thread, then the tail one element at a time. `block` of `blocks` is this block's
// place among the job's blocks.
template <typename T, bool OVER, bool SMALL>
__device__ __forceinline__ void acc_tensor(thread_acc &a, const T *x, int64_t n, int block,
                                           int blocks, stats_limits lim) {
    constexpr int N = 16 / sizeof(T);
    const int64_t first = block * (int64_t)blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)blocks * blockDim.x;
    const int64_t nvec = ((uintptr_t)x & 15) == 0 ? n / N : 0;
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    for (int64_t i = first; i < nvec; i += 2 * stride) {
        const uint4 r0 = __ldg(xv + i);
        const bool two = i + stride < nvec;
        uint4 r1 = {};
        if (two) r1 = __ldg(xv + i + stride);
        acc_vector<T, OVER, SMALL>(a, r0, lim);
        if (two) acc_vector<T, OVER, SMALL>(a, r1, lim);
    }
    for (int64_t i = nvec * N + first; i < n; i += stride) acc_value(a, cuda_io<T>::load(x[i]), lim);
}

// The tensor's storage type and which comparisons can count, chosen once per block.
template <typename T>
__device__ __forceinline__ void acc_typed(thread_acc &a, const cuda_stats_job &job, bool same16,
                                          int block, int blocks, stats_limits lim) {
    const T *x = (const T *)job.data;
    const bool small = lim.min_normal > 0.0f, over = small && !same16;
    if (over) acc_tensor<T, true, true>(a, x, job.numel, block, blocks, lim);
    else if (small) acc_tensor<T, false, true>(a, x, job.numel, block, blocks, lim);
    else acc_tensor<T, false, false>(a, x, job.numel, block, blocks, lim);
}

// This block's share of one job, added into the job's slot.
__device__ __forceinline__ void stats_job(const cuda_stats_job &job, int block, int blocks,
                                          stats_limits lim, amp_dtype target) {
    thread_acc a = {INFINITY, -INFINITY, 0.0f, 0, 0, 0, 0, 0, 0};
    switch (job.dtype) { // the same for the whole block
    case AMP_DTYPE_F32:
        acc_typed<float>(a, job, false, block, blocks, lim);
        break;
    case AMP_DTYPE_F16:
        acc_typed<__half>(a, job, target == AMP_DTYPE_F16, block, blocks, lim);
        break;
    case AMP_DTYPE_BF16:
        acc_typed<__nv_bfloat16>(a, job, target == AMP_DTYPE_BF16, block, blocks, lim);
        break;
    default: // integer tensors (rare: the instrumentation reads floating tensors)
        for (int64_t i = block * (int64_t)blockDim.x + threadIdx.x; i < job.numel;
             i += (int64_t)blocks * blockDim.x)
            acc_value(a, cuda_load(job.dtype, job.data, i), lim);
        break;
    }
    block_add_to_slot(job, block == 0, a, lim);
}

// Many jobs: each block finds its job among the parameters' runs of blocks.
__global__ void __launch_bounds__(STATS_BLOCK, STATS_BLOCKS_PER_SM)
    stats_kernel(const __grid_constant__ stats_launch_params p) {
    int j = 0;
    while (j + 1 < p.n && (int)blockIdx.x >= p.first_block[j + 1]) j++;
    const int first = p.first_block[j];
    stats_job(p.job[j], blockIdx.x - first, p.first_block[j + 1] - first, p.lim, p.target);
}

// One job (the common call): small parameters launch faster than the many-job block.
__global__ void __launch_bounds__(STATS_BLOCK, STATS_BLOCKS_PER_SM)
    stats_kernel_one(const cuda_stats_job job, stats_limits lim, amp_dtype target) {
    stats_job(job, blockIdx.x, gridDim.x, lim, target);
}

// Blocks for one tensor: one per 16 values a thread, at most one wave of the device (a second,
// partial wave only adds a tail; the blocks stride over the rest).
static int64_t max_blocks(void) {
    static int64_t wave; // the device's resident blocks, asked once
    if (!wave) {
        int dev = 0, sms = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            sms <= 0)
            sms = 132;
        wave = (int64_t)sms * STATS_BLOCKS_PER_SM;
    }
    return wave;
}

cudaError_t cuda_stats_launch(const cuda_stats_job *jobs, int n, amp_dtype target,
                              cudaStream_t stream) {
    stats_launch_params p;
    p.target = target;
    p.lim = {INFINITY, 0.0f};
    if (target == AMP_DTYPE_F16) p.lim = {65520.0f, 6.103515625e-05f};
    if (target == AMP_DTYPE_BF16) p.lim = {3.3961775292304854e38f, 1.1754943508222875e-38f};
    const int64_t per_block = (int64_t)STATS_BLOCK * 16; // 16 values per thread at least
    if (n == 1) {
        if (jobs[0].numel <= 0) return cudaSuccess;
        const int64_t b = (jobs[0].numel + per_block - 1) / per_block;
        stats_kernel_one<<<b > max_blocks() ? (int)max_blocks() : (int)b, STATS_BLOCK, 0,
                           stream>>>(jobs[0], p.lim, target);
        return cudaGetLastError();
    }
    for (int done = 0; done < n;) {
        p.n = 0;
        p.first_block[0] = 0;
        for (; done < n && p.n < JOBS; done++) {
            if (jobs[done].numel <= 0) continue;
            int64_t b = (jobs[done].numel + per_block - 1) / per_block;
            b = b > max_blocks() ? max_blocks() : b;
            p.job[p.n] = jobs[done];
            p.first_block[p.n + 1] = p.first_block[p.n] + (int)b;
            p.n++;
        }
        if (p.n == 0) break;
        stats_kernel<<<p.first_block[p.n], STATS_BLOCK, 0, stream>>>(p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

__global__ void stats_reset_kernel(amp_stats *slots, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        amp_stats e = {};
        e.min = INFINITY;
        e.max = -INFINITY;
        slots[i] = e;
    }
}

cudaError_t cuda_stats_reset(amp_stats *slots, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    stats_reset_kernel<<<cuda_grid(n, 128), 128, 0, stream>>>(slots, n);
    return cudaGetLastError();
}
