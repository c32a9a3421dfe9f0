/*
 * cuda-conv.cu — conv2d's im2col / col2im (the frontend runs the product through cuBLASLt).
 *
 * cols (N, C*kh*kw, oh*ow): row (c*kh + i)*kw + j, column oy*ow + ox holds
 * x[c, oy*stride - padding + i, ox*stride - padding + j], or 0 outside the image (by_row: the
 * same rows laid out (C*kh*kw, N, oh*ow)). col2im gives
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

// Blocks take rows of cols (one (n, c, ki, kj) each) in turn and their threads walk along the
// row: a row's coordinates are worked out once, a value's in 32-bit arithmetic (L < 2^31).
template <typename T>
__global__ void im2col_kernel(T *__restrict__ cols, const T *__restrict__ x, amp_conv_desc d,
                              int64_t rows) {
    const int64_t CK = d.c * d.kh * d.kw;
    const int L = (int)(d.oh * d.ow), ow = (int)d.ow, h = (int)d.h, w = (int)d.w;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) { // n*CK + row, or row*N + n (by_row)
        const int64_t n = d.by_row ? r % d.n : r / CK, row = d.by_row ? r / d.n : r % CK;
        const int kj = (int)(row % d.kw), ki = (int)(row / d.kw % d.kh);
        const T *plane = x + (n * d.c + row / (d.kw * d.kh)) * d.h * d.w;
        T *out = cols + r * L;
        for (int l = threadIdx.x; l < L; l += blockDim.x) {
            const int oy = l / ow, ox = l - oy * ow;
            const int iy = oy * d.stride - d.padding + ki, ix = ox * d.stride - d.padding + kj;
            const bool in = iy >= 0 && iy < h && ix >= 0 && ix < w;
            out[l] = in ? plane[iy * w + ix] : T(0.0f);
        }
    }
}

void cuda_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x) {
    cuda_ctx *c = cuda_of(bctx);
    conv_check(d, cols, x);
    const int64_t rows = d->n * d->c * d->kh * d->kw, L = d->oh * d->ow;
    if (rows == 0 || L == 0) return;
    AMP_ASSERT(L < INT32_MAX / 2 && d->h * d->w < INT32_MAX, "(im2col rows of %lld)", (long long)L);
    const unsigned threads = L >= 256 ? 256 : (unsigned)((L + 31) / 32 * 32);
    const unsigned blocks = rows < 2048 ? (unsigned)rows : 2048; // a few waves of long blocks
    CUDA_DISPATCH_FLOAT(x->dtype, T, {
        im2col_kernel<T><<<blocks, threads, 0, c->stream>>>((T *)amp_tensor_ptr(cols),
                                                            (const T *)amp_tensor_ptr(x), *d, rows);
    });
    CUDA_LAUNCH_CHECK();
}

// A thread per input pixel, its coordinates in I: 32 bits when the image has fewer than 2^31
// elements (64-bit division is slow).
template <typename T, typename I>
__global__ void col2im_kernel(T *__restrict__ dx, const T *__restrict__ cols, amp_conv_desc d,
                              I total) {
    const I s = d.stride, oh = (I)d.oh, ow = (I)d.ow, kh = (I)d.kh, kw = (I)d.kw;
    const I h = (I)d.h, w = (I)d.w, C = (I)d.c;
    const int64_t L = d.oh * d.ow, CK = d.c * d.kh * d.kw;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total;
         i += (I)gridDim.x * blockDim.x) {
        const I x = i % w, y = i / w % h, c = i / (w * h) % C, n = i / (w * h * C);
        const I hy = y + d.padding, wx = x + d.padding;
        const I oy0 = hy < kh ? 0 : (hy - kh) / s + 1, oy1 = hy / s + 1 < oh ? hy / s + 1 : oh;
        const I ox0 = wx < kw ? 0 : (wx - kw) / s + 1, ox1 = wx / s + 1 < ow ? wx / s + 1 : ow;
        const T *img = cols + (int64_t)n * CK * L;
        float v = 0.0f;
        for (I oy = oy0; oy < oy1; oy++)
            for (I ox = ox0; ox < ox1; ox++) {
                const I row = (c * kh + (hy - oy * s)) * kw + (wx - ox * s);
                v += cuda_io<T>::load(img[(int64_t)row * L + oy * ow + ox]);
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
    const unsigned grid = cuda_grid(total, 256, 4);
    CUDA_DISPATCH_FLOAT(dx->dtype, T, {
        if (total < INT32_MAX / 2) // (the grid-stride index stays below 2^31)
            col2im_kernel<T, int><<<grid, 256, 0, c->stream>>>(
                (T *)amp_tensor_ptr(dx), (const T *)amp_tensor_ptr(cols), *d, (int)total);
        else
            col2im_kernel<T, int64_t><<<grid, 256, 0, c->stream>>>(
                (T *)amp_tensor_ptr(dx), (const T *)amp_tensor_ptr(cols), *d, total);
    });
    CUDA_LAUNCH_CHECK();
}
