/*
 * cuda-impl.h — internals shared by the CUDA backend's files (libampcore_cuda.so): the backend
 * context (stream, cuBLASLt handle, memory pool, GEMM plan cache), the checking macros, the
 * device-side element loads and stores, the launch helpers, and the op entry points that
 * cuda-backend.cu puts into the table.
 *
 * Every op runs on the context's one stream, so memory handed back to the pool can be reused by
 * the next op without events: stream order already separates them. Math is f32 (PyTorch's
 * opmath) with one round-to-nearest-even store per element, like the CPU reference.
 */
#ifndef AMP_CUDA_IMPL_H
#define AMP_CUDA_IMPL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

#define _Noreturn [[noreturn]]
extern "C" {
#include "amp-impl.h"
#include "cuda-loader.h"
}
#undef _Noreturn

// ---------------------------------------------------------------------------------------------
// Errors: every CUDA / cuBLASLt call goes through one macro naming the statement; a failure is a
// broken invariant here (the device was there when the context opened) and aborts with file:line.

#define CUDA_CHECK(stmt)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (stmt);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            amp_abort(__FILE__, __LINE__, "CUDA error %s (%s) in %s", cudaGetErrorName(e_),        \
                      cudaGetErrorString(e_), #stmt);                                              \
    } while (0)

#define CUBLAS_CHECK(stmt)                                                                         \
    do {                                                                                           \
        cublasStatus_t s_ = (stmt);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            amp_abort(__FILE__, __LINE__, "cuBLASLt error %d in %s", (int)s_, #stmt);              \
    } while (0)

// After every kernel launch.
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

#define CUDA_ASSERT_CONTIGUOUS(t) AMP_ASSERT(amp_is_contiguous(t), "(%s must be contiguous)", #t)
#define CUDA_ASSERT_FLOAT(t)                                                                       \
    AMP_ASSERT(amp_dtype_is_float((t)->dtype), "(%s is %s)", #t, amp_dtype_name((t)->dtype))

// The module links none of libampcore's tensor code: amp-impl.h's inline helpers serve it.
static inline int64_t cuda_numel(const amp_tensor_t *t) {
    return amp_numel(t);
}

// ---------------------------------------------------------------------------------------------
// Memory pool (cuda-alloc.cu): cudaMalloc'ed blocks kept by rounded size and reused.

typedef struct cuda_block {
    void *ptr;
    size_t bytes;     // rounded size (the block's)
    size_t requested; // the size asked for, in 512-byte steps (what a tensor holds)
} cuda_block;

// The cached free blocks of one rounded size (a stack: the last freed is reused first).
typedef struct cuda_bin {
    size_t bytes; // 0: empty slot
    void **ptrs;
    int n, cap;
} cuda_bin;

typedef struct cuda_pool {
    cuda_bin *bins; // open-addressing table keyed by size
    size_t cap_bins, n_bins;
    cuda_block *live; // open-addressing table keyed by ptr (ptr == NULL: empty)
    size_t cap_live, n_live;
    size_t in_use_bytes, peak_bytes, reserved_bytes;
    // the same in the sizes asked for (PyTorch's torch.cuda.memory_allocated counts these)
    size_t in_use_requested, peak_requested;
} cuda_pool;

void *cuda_pool_alloc(cuda_pool *p, size_t nbytes);
size_t cuda_pool_free(cuda_pool *p, void *ptr); // returns the block's (rounded) bytes
void cuda_pool_release(cuda_pool *p);           // cudaFree()s everything cached

// ---------------------------------------------------------------------------------------------
// The backend context

#define CUDA_GEMM_PLANS 128

typedef struct cuda_gemm_key {
    int dtype, epilogue, beta_nonzero, trans_a, trans_b; // epilogue: a cublasLtEpilogue_t
    int64_t align; // pointer alignments packed: the heuristic's answer depends on them
    int64_t batch, m, n, k, stride_a, stride_b, stride_c;
} cuda_gemm_key;

typedef struct cuda_gemm_plan {
    cuda_gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
} cuda_gemm_plan;

// One tensor's statistics held (cuda_ctx.held): its buffer, its memory and its slot.
typedef struct cuda_held {
    const char *base, *end; // the tensor's buffer (base NULL: an empty entry of the table)
    const void *data;
    int64_t numel;
    amp_stats *slot;
    amp_dtype dtype, target;
    bool sumsq; // the sum of squares is wanted (stats_into)
} cuda_held;
#define CUDA_HELD_MAX (4 * AMP_STATS_BATCH)

typedef struct cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cuda_pool pool;
    void *gemm_ws; // cuBLASLt workspace
    size_t gemm_ws_bytes;
    cuda_gemm_plan plans[CUDA_GEMM_PLANS]; // heuristics cached per shape
    int n_plans;
    void *scratch; // grow-only device scratch for ops (f32 accumulators, partial sums)
    size_t scratch_bytes;
    // Statistics queued but not launched (stats_into): each waits until a kernel that reads its
    // tensor whole anyway adds them as it goes (a GELU after the linear that wrote the tensor,
    // the cast of the logits, the column sums of a bias gradient, the unscale of the gradients,
    // the optimizer step over the parameters: cuda_held_take), or until anything is about to
    // write or free the tensor's buffer (cuda_held_guard: that buffer's go, the others keep
    // waiting), or the step's figures are read (all go together, in few launches). An
    // open-addressing table by buffer (linear probing), at most CUDA_HELD_MAX.
    cuda_held held[2 * CUDA_HELD_MAX];
    int n_held;
    const char *slots_lo, *slots_hi; // the slots of the held statistics lie in [lo, hi)
    bool defer_stats;       // held used (AMPPROBE_STATS_FUSED=0: every tensor read at once)
    cudaEvent_t downloaded; // recorded after each download_async (NULL before the first)
    // The column sums of the last gradient that an activation's backward wrote for a linear with
    // a bias (cuda_unary_backward's bias_cols): f32 partial sums [colsum.parts][colsum.cols] of the
    // tensor at colsum.data, valid until anything writes or frees its buffer (cuda_colsum_guard);
    // cuda_gemm_bgrad adds them up into the bias gradient instead of taking it in the GEMM.
    struct {
        const char *data; // the start of the gradient (NULL: none)
        int64_t rows, cols;
        int parts;
        amp_dtype dtype;
        float *partial; // device memory of the pool, grow-only
        size_t partial_bytes;
    } colsum;
} cuda_ctx;

// Launches the held statistics, if any. Every backend member that writes or frees device memory
// guards what it writes first (the table in cuda-backend.cu: the held statistics of those buffers
// launched), and one that reads it wholesale (a download, a synchronize) launches them all.
void cuda_held_flush(cuda_ctx *c);
// Forgets the held column sums (cuda_ctx.colsum) when [lo, lo + bytes) overlaps their tensor.
static inline void cuda_colsum_guard(cuda_ctx *c, const void *lo, size_t bytes) {
    const char *p = (const char *)lo, *d = c->colsum.data;
    if (d && p < d + c->colsum.rows * c->colsum.cols * amp_dtype_size(c->colsum.dtype) &&
        d < p + bytes)
        c->colsum.data = NULL;
}
// Launches the held statistics of the tensors whose buffers overlap [lo, lo + bytes) (the others
// stay held).
void cuda_held_guard(cuda_ctx *c, const void *lo, size_t bytes);
// The same for t's buffer (t may be NULL): found by the buffer's address.
void cuda_held_guard_tensor(cuda_ctx *c, const amp_tensor_t *t);
// The same for the buffers of t[0..n) (NULLs skipped), in one launch.
void cuda_held_guard_tensors(cuda_ctx *c, const amp_tensor_t *const *t, int n);
// t's held statistics (of its whole memory), taken by the caller's kernel, which must add t's
// statistics relative to *target into *slot, and their sum of squares unless it was not wanted
// (with_sumsq false: a kernel that leaves it out takes only those): false when none are held for
// t, or only some that want the sum of squares and with_sumsq is false.
bool cuda_held_take(cuda_ctx *c, const amp_tensor_t *t, bool with_sumsq, amp_stats **slot,
                    amp_dtype *target);

// Device scratch of at least nbytes, valid for the current op (stream-ordered reuse).
void *cuda_scratch(cuda_ctx *c, size_t nbytes);

// ---------------------------------------------------------------------------------------------
// Element access on the device

__device__ __forceinline__ float cuda_load(amp_dtype t, const void *p, int64_t i) {
    switch (t) {
    case AMP_DTYPE_F32:
        return ((const float *)p)[i];
    case AMP_DTYPE_F16:
        return __half2float(((const __half *)p)[i]);
    case AMP_DTYPE_BF16:
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case AMP_DTYPE_I32:
        return (float)((const int32_t *)p)[i];
    default:
        return (float)((const int64_t *)p)[i];
    }
}

__device__ __forceinline__ void cuda_store(amp_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case AMP_DTYPE_F32:
        ((float *)p)[i] = v;
        return;
    case AMP_DTYPE_F16:
        ((__half *)p)[i] = __float2half_rn(v);
        return;
    case AMP_DTYPE_BF16:
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
        return;
    case AMP_DTYPE_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        return;
    default:
        ((int64_t *)p)[i] = (int64_t)v;
        return;
    }
}

__device__ __forceinline__ int64_t cuda_load_index(amp_dtype t, const void *p, int64_t i) {
    return t == AMP_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

// Typed access for the templated fast paths.
template <typename T> struct cuda_io;
template <> struct cuda_io<float> {
    static constexpr amp_dtype dtype = AMP_DTYPE_F32;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct cuda_io<__half> {
    static constexpr amp_dtype dtype = AMP_DTYPE_F16;
    static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <> struct cuda_io<__nv_bfloat16> {
    static constexpr amp_dtype dtype = AMP_DTYPE_BF16;
    static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 store(float v) {
        return __float2bfloat16_rn(v);
    }
};

// Eight elements moved as one aligned load or store.
template <typename T> struct alignas(8 * sizeof(T)) vec8 { T v[8]; };

// Runs the statement(s) with T typedef-ed to the C++ type of the floating dtype dt.
#define CUDA_DISPATCH_FLOAT(dt, T, ...)                                                            \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case AMP_DTYPE_F32: {                                                                      \
            typedef float T;                                                                       \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case AMP_DTYPE_F16: {                                                                      \
            typedef __half T;                                                                      \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        case AMP_DTYPE_BF16: {                                                                     \
            typedef __nv_bfloat16 T;                                                               \
            __VA_ARGS__;                                                                           \
        } break;                                                                                   \
        default:                                                                                   \
            amp_abort(__FILE__, __LINE__, "not a floating dtype: %s", amp_dtype_name(dt));         \
        }                                                                                          \
    } while (0)

// Warp- and block-wide reductions (blockDim.x a multiple of 32, at most 1024); every thread of
// the block gets the result.
__device__ __forceinline__ float cuda_warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cuda_warp_max(float v) {
    for (int o = 16; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float cuda_block_sum(float v) {
    __shared__ float part[32];
    __syncthreads(); // part may still be read by a previous call
    v = cuda_warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    v = lane < (int)(blockDim.x / 32) ? part[lane] : 0.0f;
    return cuda_warp_sum(v);
}

__device__ __forceinline__ float cuda_block_max(float v) {
    __shared__ float part[32];
    __syncthreads();
    v = cuda_warp_max(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    v = lane < (int)(blockDim.x / 32) ? part[lane] : -INFINITY;
    return cuda_warp_max(v);
}

// ---------------------------------------------------------------------------------------------
// Strided iteration: a shape with up to AMP_MAX_DIMS dims (size-1 dims dropped, dims merged where
// every operand steps evenly across them) and per-operand strides, passed by value to kernels.

#define CUDA_ITER_OPS 3

typedef struct cuda_iter {
    int ndim;
    bool small; // fewer than 2^31 elements: index arithmetic in 32 bits (64-bit division is slow)
    int64_t shape[AMP_MAX_DIMS];
    int64_t stride[CUDA_ITER_OPS][AMP_MAX_DIMS];
} cuda_iter;

void cuda_iter_init(cuda_iter *it, int ndim, const int64_t *shape, int nops,
                    const int64_t *const *strides);

// Element offsets of linear index i (row-major over it's shape) for operand op.
__device__ __forceinline__ int64_t cuda_iter_offset(const cuda_iter &it, int op, int64_t i) {
    int64_t off = 0;
    if (it.small) {
        uint32_t j = (uint32_t)i;
        for (int d = it.ndim - 1; d >= 0; d--) {
            const uint32_t s = (uint32_t)it.shape[d];
            off += (int64_t)(j % s) * it.stride[op][d];
            j /= s;
        }
        return off;
    }
    for (int d = it.ndim - 1; d >= 0; d--) {
        const int64_t s = it.shape[d];
        off += (i % s) * it.stride[op][d];
        i /= s;
    }
    return off;
}

// Grid for n elements with `block` threads, each thread handling `per` elements, capped.
static inline unsigned cuda_grid(int64_t n, int block, int per = 1) {
    int64_t g = (n + (int64_t)block * per - 1) / ((int64_t)block * per);
    if (g < 1) g = 1;
    if (g > 65535 * 32) g = 65535 * 32;
    return (unsigned)g;
}

static inline cuda_ctx *cuda_of(void *bctx) {
    return (cuda_ctx *)bctx;
}

// ---------------------------------------------------------------------------------------------
// Ops (signatures of the amp_backend_i members they implement)

void cuda_copy(void *bctx, amp_tensor_t *dst, const amp_tensor_t *src);
void cuda_fill(void *bctx, amp_tensor_t *dst, float v);
void cuda_unary(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *y, const amp_tensor_t *x);
void cuda_unary_backward(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *dx,
                         const amp_tensor_t *dy, const amp_tensor_t *x, const amp_tensor_t *y,
                         int64_t bias_cols);
void cuda_binary(void *bctx, amp_binary_op op, amp_tensor_t *y, const amp_tensor_t *a,
                 const amp_tensor_t *b);
void cuda_masked_fill(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, const amp_tensor_t *mask,
                      float value);
void cuda_dropout_mask(void *bctx, amp_tensor_t *mask, float p, uint64_t seed, uint64_t offset);
void cuda_reduce_sum(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, float alpha);
// y (cols elements) = the sums of the columns of partial (parts, cols) in f32, rounded once.
void cuda_sum_partials(cuda_ctx *c, amp_tensor_t *y, const float *partial, int parts, int64_t cols);
void cuda_gemm(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
               const amp_tensor_t *b, const amp_tensor_t *bias);
void cuda_gemm_bgrad(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                     const amp_tensor_t *b, amp_tensor_t *bgrad);
void cuda_gemm_release(cuda_ctx *c);
void cuda_softmax(void *bctx, bool log, amp_tensor_t *y, const amp_tensor_t *x);
void cuda_softmax_backward(void *bctx, bool log, amp_tensor_t *dx, const amp_tensor_t *dy,
                           const amp_tensor_t *y);
void cuda_nll_loss(void *bctx, amp_tensor_t *loss, const amp_tensor_t *logp,
                   const amp_tensor_t *target);
void cuda_nll_loss_backward(void *bctx, amp_tensor_t *dlogp, const amp_tensor_t *dloss,
                            const amp_tensor_t *target);
void cuda_layer_norm(void *bctx, amp_tensor_t *y, amp_tensor_t *mean, amp_tensor_t *rstd,
                     const amp_tensor_t *x, const amp_tensor_t *w, const amp_tensor_t *b,
                     float eps);
void cuda_layer_norm_backward(void *bctx, amp_tensor_t *dx, amp_tensor_t *dw, amp_tensor_t *db,
                              const amp_tensor_t *dy, const amp_tensor_t *x,
                              const amp_tensor_t *mean, const amp_tensor_t *rstd,
                              const amp_tensor_t *w);
void cuda_embedding(void *bctx, amp_tensor_t *y, const amp_tensor_t *idx, const amp_tensor_t *w);
void cuda_embedding_backward(void *bctx, amp_tensor_t *dw, const amp_tensor_t *dy,
                             const amp_tensor_t *idx);
void cuda_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x);
void cuda_col2im(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx, const amp_tensor_t *cols);
void cuda_max_pool2d(void *bctx, amp_tensor_t *y, amp_tensor_t *argmax, const amp_tensor_t *x,
                     int kernel, int stride);
void cuda_max_pool2d_backward(void *bctx, amp_tensor_t *dx, const amp_tensor_t *dy,
                              const amp_tensor_t *argmax, int kernel, int stride);
void cuda_unscale(void *bctx, amp_tensor_t *const *grads, const amp_tensor_t *const *from, int n,
                  const amp_tensor_t *inv_scale, amp_tensor_t *found_inf);
void cuda_scale_update(void *bctx, amp_tensor_t *scale, amp_tensor_t *inv_scale,
                       amp_tensor_t *tracker, amp_tensor_t *const *found_infs, const bool *stepped,
                       int n, const amp_scaler_params *p, amp_tensor_t *rec);
void cuda_optim_step(void *bctx, const amp_optim_params *p, amp_tensor_t *const *params,
                     amp_tensor_t *const *grads, amp_tensor_t *const *m, amp_tensor_t *const *v,
                     amp_tensor_t *const *lowered, int n, amp_tensor_t *counts, const int32_t *idx,
                     const amp_tensor_t *found_inf);
void cuda_stats_into(void *bctx, const amp_tensor_t *const *x, int n, amp_dtype target,
                     amp_stats *slots, const int64_t *slot);

#endif // AMP_CUDA_IMPL_H
