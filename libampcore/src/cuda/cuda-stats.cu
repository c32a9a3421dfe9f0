/*
 * cuda-stats.cu — min/max over the finite values, NaN and ±inf counts, overflow / underflow / zero
 * counts relative to the autocast dtype and the sum of squares, in one fused pass per tensor, for
 * many tensors per launch (cuda-stats.h). The CUDA backend's stats_into member and the PyTorch
 * bridge's module (libampstats_cuda.so) both launch it.
 *
 * A launch carries up to JOBS tensors in its parameters; each gets a run of blocks sized to its
 * length (capped), so one launch covers a layer's parameter gradients as well as one large
 * activation. Each thread reads 16-byte vectors of the storage type (4 f32 or 8 f16/bf16 values)
 * over a block-strided range of its tensor and keeps 32-bit counters (a 16-bit tensor of the
 * autocast dtype goes two values an instruction through half2/bfloat162 min, max and compares:
 * cuda-fuse.h); warps and then the block combine by shuffles, and each block adds its total into
 * the tensor's slot with atomics. Nothing waits. Thresholds are those of stats.c (AMP-SEMANTICS
 * §5). The per-value and per-block pieces are in cuda-fuse.h, which the backend's kernels also
 * use to fuse the statistics of the outputs they write.
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"
#include "cuda-stats.h"

#define STATS_BLOCK 256
#define STATS_BLOCKS_PER_SM 4 // resident at once (__launch_bounds__ below)
#define JOBS 48               // tensors per launch (the parameters stay under 4 KiB)

struct stats_launch_params {
    stats_limits lim;
    int n;
    int first_block[JOBS + 1]; // job j owns blocks [first_block[j], first_block[j + 1])
    cuda_stats_job job[JOBS];
};

// One 16-byte vector: the plain path when all its values are finite and within the target's
// range, else value by value.
template <typename T, bool SMALL>
__device__ __forceinline__ void acc_vector(thread_acc &a, const T *v, stats_limits lim) {
    constexpr int N = 16 / sizeof(T);
    float f[N];
    bool plain = true;
#pragma unroll
    for (int k = 0; k < N; k++) {
        f[k] = cuda_io<T>::load(v[k]);
        plain &= fabsf(f[k]) < lim.overflow;
    }
    if (plain) {
#pragma unroll
        for (int k = 0; k < N; k++)
            acc_finite<SMALL>(a, f[k], lim);
    } else {
#pragma unroll
        for (int k = 0; k < N; k++)
            acc_value(a, f[k], lim);
    }
}

// This thread's share of a floating tensor: vector(v) for each 16-byte vector (v its values)
// when the memory is aligned, two in flight per thread; then value(f) for the tail one element at
// a time. `block` of `blocks` is this block's place among the job's blocks.
template <typename T, typename Vector, typename Value>
__device__ __forceinline__ void for_share(const T *x, int64_t n, int block, int blocks,
                                          Vector vector, Value value) {
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
        vector(reinterpret_cast<const T *>(&r0));
        if (two) vector(reinterpret_cast<const T *>(&r1));
    }
    for (int64_t i = nvec * N + first; i < n; i += stride)
        value(cuda_io<T>::load(x[i]));
}

// The tensor's storage type and which comparisons can count, chosen once per block: a 16-bit
// tensor of the target's own type in pairs (cuda-fuse.h), others value by value.
template <typename T>
__device__ __forceinline__ void acc_typed(thread_acc &a, const cuda_stats_job &job, int block,
                                          int blocks, stats_limits lim) {
    const T *x = (const T *)job.data;
    const int64_t n = job.numel;
    auto value = [&](float v) { acc_value(a, v, lim); };
    if constexpr (sizeof(T) == 2) {
        if (pairs_apply<T>(lim)) {
            acc_pairs<T> p = acc_pairs_empty<T>();
            auto pairs = [&](const T *v) { acc_pairs_vector<T, true>(p, a, v, lim); };
            for_share(x, n, block, blocks, pairs, value);
            acc_pairs_end(p, a);
            return;
        }
    }
    auto counted = [&](const T *v) { acc_vector<T, true>(a, v, lim); };
    auto uncounted = [&](const T *v) { acc_vector<T, false>(a, v, lim); };
    if (lim.min_normal > 0.0f)
        for_share(x, n, block, blocks, counted, value);
    else
        for_share(x, n, block, blocks, uncounted, value);
}

// This block's share of one job, added into the job's slot.
__device__ __forceinline__ void stats_job(const cuda_stats_job &job, int block, int blocks,
                                          stats_limits lim) {
    thread_acc a = acc_empty();
    switch (job.dtype) { // the same for the whole block
    case AMP_DTYPE_F32:
        acc_typed<float>(a, job, block, blocks, lim);
        break;
    case AMP_DTYPE_F16:
        acc_typed<__half>(a, job, block, blocks, lim);
        break;
    case AMP_DTYPE_BF16:
        acc_typed<__nv_bfloat16>(a, job, block, blocks, lim);
        break;
    default: // integer tensors (rare: the instrumentation reads floating tensors)
        for (int64_t i = block * (int64_t)blockDim.x + threadIdx.x; i < job.numel;
             i += (int64_t)blocks * blockDim.x)
            acc_value(a, cuda_load(job.dtype, job.data, i), lim);
        break;
    }
    block_add_to_slot(job.slot, job.numel, block == 0, a, lim);
}

// Many jobs: each block finds its job among the parameters' runs of blocks.
__global__ void __launch_bounds__(STATS_BLOCK, STATS_BLOCKS_PER_SM)
    stats_kernel(const __grid_constant__ stats_launch_params p) {
    int j = 0;
    while (j + 1 < p.n && (int)blockIdx.x >= p.first_block[j + 1])
        j++;
    const int first = p.first_block[j];
    stats_job(p.job[j], blockIdx.x - first, p.first_block[j + 1] - first, p.lim);
}

// One job (the common call): small parameters launch faster than the many-job block.
__global__ void __launch_bounds__(STATS_BLOCK, STATS_BLOCKS_PER_SM)
    stats_kernel_one(const cuda_stats_job job, stats_limits lim) {
    stats_job(job, blockIdx.x, gridDim.x, lim);
}

int cuda_sm_count(void) {
    static int sms;
    if (!sms) {
        int dev = 0, n = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            n <= 0)
            n = 132;
        sms = n;
    }
    return sms;
}

int cuda_resident_blocks(const void *kernel, int block) {
    static struct {
        const void *kernel;
        int block, blocks;
    } cache[64];
    static int n;
    for (int i = 0; i < n; i++)
        if (cache[i].kernel == kernel && cache[i].block == block) return cache[i].blocks;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0) != cudaSuccess ||
        per_sm < 1)
        per_sm = 1;
    const int blocks = per_sm * cuda_sm_count();
    if (n < 64) cache[n++] = {kernel, block, blocks};
    return blocks;
}

// Blocks for one tensor: one per 16 values a thread, at most one wave of the device (a second,
// partial wave only adds a tail; the blocks stride over the rest).
static int64_t max_blocks(void) {
    return (int64_t)cuda_sm_count() * STATS_BLOCKS_PER_SM;
}

cudaError_t cuda_stats_launch(const cuda_stats_job *jobs, int n, amp_dtype target,
                              cudaStream_t stream) {
    stats_launch_params p;
    p.lim = stats_limits_of(target);
    const int64_t per_block = (int64_t)STATS_BLOCK * 16; // 16 values per thread at least
    if (n == 1) {
        if (jobs[0].numel <= 0) return cudaSuccess;
        const int64_t b = (jobs[0].numel + per_block - 1) / per_block;
        const int grid = b > max_blocks() ? (int)max_blocks() : (int)b;
        stats_kernel_one<<<grid, STATS_BLOCK, 0, stream>>>(jobs[0], p.lim);
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
         i += (int64_t)gridDim.x * blockDim.x)
        slots[i] = cuda_stats_empty();
}

cudaError_t cuda_stats_reset(amp_stats *slots, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    stats_reset_kernel<<<cuda_grid(n, 128), 128, 0, stream>>>(slots, n);
    return cudaGetLastError();
}
