/*
 * cuda-maxpool.cu — max_pool2d (no padding) with its argmax (flat h*W + w per plane) and the
 * backward of dy to the argmax positions. As in PyTorch a NaN takes over its window (the last NaN
 * wins). Windows that do not overlap (stride >= kernel, the common 2x2 pooling) make each input
 * element the argmax of at most one window: the backward writes each window's elements once, in
 * dx's own dtype, from a thread per window. Overlapping windows are summed in f32 (atomics into dx
 * itself when f32, else into scratch), in no fixed order.
 */
#include "cuda-impl.h"

#include <math.h>

// I: the index type, 32-bit when the input has fewer than 2^31 elements (most do), whose
// divisions cost a fraction of 64-bit ones.
template <typename I>
__global__ void max_pool2d_kernel(void *y, amp_dtype yt, int32_t *argmax, const void *x,
                                  amp_dtype xt, I H, I W, I oh, I ow, int kernel, int stride,
                                  I total) {
    for (I o = blockIdx.x * (I)blockDim.x + threadIdx.x; o < total;
         o += (I)gridDim.x * blockDim.x) {
        const I ox = o % ow, oy = (o / ow) % oh, p = o / (ow * oh);
        const I h0 = oy * stride, w0 = ox * stride;
        float mx = -INFINITY;
        I at = h0 * W + w0;
        for (I h = h0; h < h0 + kernel; h++)
            for (I w = w0; w < w0 + kernel; w++) {
                const float v = cuda_load(xt, x, p * H * W + h * W + w);
                if (v > mx || isnan(v)) {
                    at = h * W + w;
                    mx = v;
                }
            }
        cuda_store(yt, y, o, mx);
        argmax[o] = (int32_t)at;
    }
}

void cuda_max_pool2d(void *bctx, amp_tensor_t *y, amp_tensor_t *argmax, const amp_tensor_t *x,
                     int kernel, int stride) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(argmax);
    CUDA_ASSERT_CONTIGUOUS(x);
    AMP_ASSERT(x->ndim == 4 && y->ndim == 4 && argmax->ndim == 4);
    AMP_ASSERT(argmax->dtype == AMP_DTYPE_I32 && cuda_numel(argmax) == cuda_numel(y));
    AMP_ASSERT(kernel >= 1 && stride >= 1);
    const int64_t H = x->shape[2], W = x->shape[3], oh = y->shape[2], ow = y->shape[3];
    AMP_ASSERT(y->shape[0] * y->shape[1] == x->shape[0] * x->shape[1]);
    AMP_ASSERT((oh - 1) * stride + kernel <= H && (ow - 1) * stride + kernel <= W,
               "(windows must lie inside the input)");
    const int64_t total = cuda_numel(y);
    if (total == 0) return;
    const unsigned grid = cuda_grid(total, 256, 2);
    if (cuda_numel(x) <= INT32_MAX / 2) // (room for the grid stride past the end)
        max_pool2d_kernel<int32_t><<<grid, 256, 0, c->stream>>>(
            amp_tensor_ptr(y), y->dtype, (int32_t *)amp_tensor_ptr(argmax), amp_tensor_ptr(x),
            x->dtype, (int32_t)H, (int32_t)W, (int32_t)oh, (int32_t)ow, kernel, stride,
            (int32_t)total);
    else
        max_pool2d_kernel<int64_t><<<grid, 256, 0, c->stream>>>(
            amp_tensor_ptr(y), y->dtype, (int32_t *)amp_tensor_ptr(argmax), amp_tensor_ptr(x),
            x->dtype, H, W, oh, ow, kernel, stride, total);
    CUDA_LAUNCH_CHECK();
}

// Non-overlapping windows, a thread per window: each element of the window gets dy when it is
// the window's argmax, else 0 (dx's elements outside every window are zeroed before).
template <typename I>
__global__ void max_pool2d_backward_disjoint_kernel(void *dx, amp_dtype dxt, const void *dy,
                                                    amp_dtype dyt, const int32_t *argmax, I H, I W,
                                                    I oh, I ow, int kernel, int stride, I total) {
    for (I o = blockIdx.x * (I)blockDim.x + threadIdx.x; o < total;
         o += (I)gridDim.x * blockDim.x) {
        const I ox = o % ow, oy = (o / ow) % oh, p = o / (ow * oh);
        const I at = argmax[o], h0 = oy * stride, w0 = ox * stride;
        const float g = cuda_load(dyt, dy, o);
        for (I h = h0; h < h0 + kernel; h++)
            for (I w = w0; w < w0 + kernel; w++)
                cuda_store(dxt, dx, p * H * W + h * W + w, h * W + w == at ? g : 0.0f);
    }
}

__global__ void max_pool2d_backward_kernel(float *acc, const void *dy, amp_dtype dyt,
                                           const int32_t *argmax, int64_t L, int64_t HW,
                                           int64_t total) {
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total;
         o += (int64_t)gridDim.x * blockDim.x) {
        const int32_t at = argmax[o];
        if (at < 0 || at >= HW) continue;
        atomicAdd(&acc[(o / L) * HW + at], cuda_load(dyt, dy, o));
    }
}

__global__ void pool_store_kernel(void *dst, amp_dtype dt, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cuda_store(dt, dst, i, src[i]);
}

void cuda_max_pool2d_backward(void *bctx, amp_tensor_t *dx, const amp_tensor_t *dy,
                              const amp_tensor_t *argmax, int kernel, int stride) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dx);
    CUDA_ASSERT_CONTIGUOUS(dy);
    CUDA_ASSERT_CONTIGUOUS(argmax);
    CUDA_ASSERT_FLOAT(dx);
    AMP_ASSERT(dx->ndim == 4 && dy->ndim == 4 && argmax->dtype == AMP_DTYPE_I32);
    AMP_ASSERT(cuda_numel(argmax) == cuda_numel(dy));
    AMP_ASSERT(dy->shape[0] * dy->shape[1] == dx->shape[0] * dx->shape[1]);
    const int64_t HW = dx->shape[2] * dx->shape[3], L = dy->shape[2] * dy->shape[3];
    const int64_t nx = cuda_numel(dx), total = cuda_numel(dy);
    if (nx == 0) return;
    if (stride >= kernel) {
        const int64_t H = dx->shape[2], W = dx->shape[3], oh = dy->shape[2], ow = dy->shape[3];
        if (stride > kernel || oh * stride != H || ow * stride != W) // elements in no window
            CUDA_CHECK(
                cudaMemsetAsync(amp_tensor_ptr(dx), 0, nx * amp_dtype_size(dx->dtype), c->stream));
        if (total > 0) {
            const unsigned grid = cuda_grid(total, 256, 4);
            const int32_t *am = (const int32_t *)amp_tensor_ptr(argmax);
            if (nx <= INT32_MAX / 2)
                max_pool2d_backward_disjoint_kernel<int32_t><<<grid, 256, 0, c->stream>>>(
                    amp_tensor_ptr(dx), dx->dtype, amp_tensor_ptr(dy), dy->dtype, am, (int32_t)H,
                    (int32_t)W, (int32_t)oh, (int32_t)ow, kernel, stride, (int32_t)total);
            else
                max_pool2d_backward_disjoint_kernel<int64_t><<<grid, 256, 0, c->stream>>>(
                    amp_tensor_ptr(dx), dx->dtype, amp_tensor_ptr(dy), dy->dtype, am, H, W, oh, ow,
                    kernel, stride, total);
            CUDA_LAUNCH_CHECK();
        }
        return;
    }
    const bool direct = dx->dtype == AMP_DTYPE_F32;
    float *acc =
        direct ? (float *)amp_tensor_ptr(dx) : (float *)cuda_scratch(c, (size_t)nx * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)nx * sizeof(float), c->stream));
    if (total > 0) {
        max_pool2d_backward_kernel<<<cuda_grid(total, 256, 4), 256, 0, c->stream>>>(
            acc, amp_tensor_ptr(dy), dy->dtype, (const int32_t *)amp_tensor_ptr(argmax), L, HW,
            total);
        CUDA_LAUNCH_CHECK();
    }
    if (!direct) {
        pool_store_kernel<<<cuda_grid(nx, 256, 4), 256, 0, c->stream>>>(amp_tensor_ptr(dx),
                                                                        dx->dtype, acc, nx);
        CUDA_LAUNCH_CHECK();
    }
}
