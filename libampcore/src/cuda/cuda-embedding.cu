/*
 * cuda-embedding.cu — embedding lookup y[r] = w[idx[r]] and its backward, the scatter-add of dy
 * into dw (overwritten). The backward accumulates in f32 with atomics (dw itself when it is f32,
 * else scratch converted once), so the summation order of repeated indices is not fixed; the
 * tests hold it to the CPU with a tolerance. An out-of-range index leaves the row untouched.
 */
#include "cuda-impl.h"

__global__ void embedding_kernel(void *y, amp_dtype yt, const void *idx, amp_dtype it,
                                 const void *w, amp_dtype wt, int64_t n, int64_t V, int64_t C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * C;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C, j = i % C, v = cuda_load_index(it, idx, r);
        if (v < 0 || v >= V) continue;
        cuda_store(yt, y, i, cuda_load(wt, w, v * C + j));
    }
}

void cuda_embedding(void *bctx, amp_tensor_t *y, const amp_tensor_t *idx, const amp_tensor_t *w) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(idx);
    CUDA_ASSERT_CONTIGUOUS(w);
    AMP_ASSERT(w->ndim == 2);
    AMP_ASSERT(idx->dtype == AMP_DTYPE_I32 || idx->dtype == AMP_DTYPE_I64);
    const int64_t V = w->shape[0], C = w->shape[1], n = cuda_numel(idx);
    AMP_ASSERT(cuda_numel(y) == n * C);
    if (n * C == 0) return;
    embedding_kernel<<<cuda_grid(n * C, 256, 4), 256, 0, c->stream>>>(
        amp_tensor_ptr(y), y->dtype, amp_tensor_ptr(idx), idx->dtype, amp_tensor_ptr(w), w->dtype,
        n, V, C);
    CUDA_LAUNCH_CHECK();
}

__global__ void embedding_backward_kernel(float *acc, const void *dy, amp_dtype dyt,
                                          const void *idx, amp_dtype it, int64_t n, int64_t V,
                                          int64_t C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * C;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / C, j = i % C, v = cuda_load_index(it, idx, r);
        if (v < 0 || v >= V) continue;
        atomicAdd(&acc[v * C + j], cuda_load(dyt, dy, i));
    }
}

__global__ void f32_store_kernel(void *dst, amp_dtype dt, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cuda_store(dt, dst, i, src[i]);
}

void cuda_embedding_backward(void *bctx, amp_tensor_t *dw, const amp_tensor_t *dy,
                             const amp_tensor_t *idx) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dw);
    CUDA_ASSERT_CONTIGUOUS(dy);
    CUDA_ASSERT_CONTIGUOUS(idx);
    CUDA_ASSERT_FLOAT(dw);
    AMP_ASSERT(dw->ndim == 2);
    const int64_t V = dw->shape[0], C = dw->shape[1], n = cuda_numel(idx);
    AMP_ASSERT(cuda_numel(dy) == n * C);
    const bool direct = dw->dtype == AMP_DTYPE_F32;
    float *acc = direct ? (float *)amp_tensor_ptr(dw)
                        : (float *)cuda_scratch(c, (size_t)(V * C > 0 ? V * C : 1) * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)(V * C) * sizeof(float), c->stream));
    if (n * C > 0) {
        embedding_backward_kernel<<<cuda_grid(n * C, 256, 4), 256, 0, c->stream>>>(
            acc, amp_tensor_ptr(dy), dy->dtype, amp_tensor_ptr(idx), idx->dtype, n, V, C);
        CUDA_LAUNCH_CHECK();
    }
    if (!direct && V * C > 0) {
        f32_store_kernel<<<cuda_grid(V * C, 256, 4), 256, 0, c->stream>>>(amp_tensor_ptr(dw),
                                                                          dw->dtype, acc, V * C);
        CUDA_LAUNCH_CHECK();
    }
}
