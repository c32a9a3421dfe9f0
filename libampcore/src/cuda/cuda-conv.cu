/*
 * cuda-conv.cu — conv2d's im2col / col2im (the frontend runs the product through cuBLASLt).
 *
 * cols (N, C*kh*kw, oh*ow): row (c*kh + i)*kw + j, column oy*ow + ox holds
 * x[c, oy*stride - padding + i, ox*stride - padding + j], or 0 outside the image. col2im gives
 * each input pixel one thread that sums its covering windows in f32 in the CPU's order (output
 * rows, then columns) and rounds once: no atomics, deterministic.
 */
#include "cuda-impl.h"

static void conv_check(const amp_conv_desc *d, const amp_tensor_t *cols, const amp_tensor_t *img) {
    CUDA_ASSERT_CONTIGUOUS(cols);
    CUDA_ASSERT_CONTIGUOUS(img);
    AMP_ASSERT(d->stride >= 1 && d->padding >= 0 && d->kh >= 1 && d->kw >= 1);
    AMP_ASSERT(cols->dtype == img->dtype, "(cols %s, image %s)", amp_dtype_name(cols->dtype),
               amp_dtype_name(img->dtype));
    AMP_ASSERT(cuda_numel(img) == d->n * d->c * d->h * d->w);
    AMP_ASSERT(cuda_numel(cols) == d->n * d->c * d->kh * d->kw * d->oh * d->ow);
}

template <typename T>
__global__ void im2col_kernel(T *__restrict__ cols, const T *__restrict__ x, amp_conv_desc d,
                              int64_t total) {
    const int64_t L = d.oh * d.ow;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t l = i % L, row = i / L; // row = (n*C + c)*kh*kw + ki*kw + kj
        const int64_t kj = row % d.kw, ki = (row / d.kw) % d.kh, nc = row / (d.kw * d.kh);
        const int64_t oy = l / d.ow, ox = l % d.ow;
        const int64_t iy = oy * d.stride - d.padding + ki, ix = ox * d.stride - d.padding + kj;
        const bool in = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w;
        cols[i] = in ? x[(nc * d.h + iy) * d.w + ix] : T(0.0f);
    }
}

void cuda_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x) {
    cuda_ctx *c = cuda_of(bctx);
    conv_check(d, cols, x);
    const int64_t total = cuda_numel(cols);
    if (total == 0) return;
    CUDA_DISPATCH_FLOAT(x->dtype, T, {
        im2col_kernel<T><<<cuda_grid(total, 256, 4), 256, 0, c->stream>>>(
            (T *)amp_tensor_ptr(cols), (const T *)amp_tensor_ptr(x), *d, total);
    });
    CUDA_LAUNCH_CHECK();
}

template <typename T>
__global__ void col2im_kernel(T *__restrict__ dx, const T *__restrict__ cols, amp_conv_desc d,
                              int64_t total) {
    const int64_t s = d.stride, L = d.oh * d.ow, CK = d.c * d.kh * d.kw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t x = i % d.w, y = (i / d.w) % d.h, c = (i / (d.w * d.h)) % d.c,
                      n = i / (d.w * d.h * d.c);
        const int64_t hy = y + d.padding, wx = x + d.padding;
        const int64_t oy0 = hy < d.kh ? 0 : (hy - d.kh) / s + 1;
        const int64_t oy1 = hy / s + 1 < d.oh ? hy / s + 1 : d.oh;
        const int64_t ox0 = wx < d.kw ? 0 : (wx - d.kw) / s + 1;
        const int64_t ox1 = wx / s + 1 < d.ow ? wx / s + 1 : d.ow;
        float v = 0.0f;
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = ox0; ox < ox1; ox++) {
                const int64_t row = (c * d.kh + (hy - oy * s)) * d.kw + (wx - ox * s);
                v += cuda_io<T>::load(cols[(n * CK + row) * L + oy * d.ow + ox]);
            }
        dx[i] = cuda_io<T>::store(v);
    }
}

void cuda_col2im(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx, const amp_tensor_t *cols) {
    cuda_ctx *c = cuda_of(bctx);
    conv_check(d, cols, dx);
    CUDA_ASSERT_FLOAT(dx);
    const int64_t total = cuda_numel(dx);
    if (total == 0) return;
    CUDA_DISPATCH_FLOAT(dx->dtype, T, {
        col2im_kernel<T><<<cuda_grid(total, 256, 4), 256, 0, c->stream>>>(
            (T *)amp_tensor_ptr(dx), (const T *)amp_tensor_ptr(cols), *d, total);
    });
    CUDA_LAUNCH_CHECK();
}
