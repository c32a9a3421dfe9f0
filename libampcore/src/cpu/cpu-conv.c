/*
 * cpu-conv.c — the CPU backend's convolution and pooling helpers: im2col / col2im (conv2d as a
 * GEMM, with stride and zero padding) and max_pool2d (no padding) with its argmax and backward.
 *
 * col2im and the pooling backward sum in f32 per input pixel, visiting the contributions in
 * PyTorch's CUDA order (output rows, then output columns), and round once.
 */
#include "cpu-impl.h"

#include <math.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// im2col / col2im. cols (N, C*kh*kw, oh*ow): row (c*kh + i)*kw + j, column oy*ow + ox holds
// x[c, oy*stride - padding + i, ox*stride - padding + j], or 0 outside the image; by_row lays the
// same rows out (C*kh*kw, N, oh*ow).

static void conv_check(const amp_conv_desc *d, const amp_tensor_t *cols, const amp_tensor_t *img) {
    CPU_ASSERT_CONTIGUOUS(cols);
    CPU_ASSERT_CONTIGUOUS(img);
    AMP_ASSERT(d->stride >= 1 && d->padding >= 0 && d->kh >= 1 && d->kw >= 1);
    AMP_ASSERT(cols->dtype == img->dtype, "(cols %s, image %s)", amp_dtype_name(cols->dtype),
               amp_dtype_name(img->dtype));
    AMP_ASSERT(cpu_numel(img) == d->n * d->c * d->h * d->w);
    AMP_ASSERT(cpu_numel(cols) == d->n * d->c * d->kh * d->kw * d->oh * d->ow);
}

void amp_cpu_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x) {
    (void)bctx;
    conv_check(d, cols, x);
    const size_t es = amp_dtype_size(x->dtype);
    const char zero[8] = {0}; // a zero of any dtype, for the padding
    const char *xp = amp_tensor_ptr(x);
    char *cp = amp_tensor_ptr(cols);
    const int64_t L = d->oh * d->ow, CK = d->c * d->kh * d->kw;
    for (int64_t n = 0; n < d->n; n++) {
        for (int64_t c = 0; c < d->c; c++) {
            const char *plane = xp + ((n * d->c + c) * d->h * d->w) * (int64_t)es;
            for (int64_t i = 0; i < d->kh; i++) {
                for (int64_t j = 0; j < d->kw; j++) {
                    const int64_t row = (c * d->kh + i) * d->kw + j;
                    char *out = cp + (d->by_row ? row * d->n + n : n * CK + row) * L * (int64_t)es;
                    for (int64_t oy = 0; oy < d->oh; oy++) {
                        const int64_t iy = oy * d->stride - d->padding + i;
                        for (int64_t ox = 0; ox < d->ow; ox++, out += es) {
                            const int64_t ix = ox * d->stride - d->padding + j;
                            const bool in = iy >= 0 && iy < d->h && ix >= 0 && ix < d->w;
                            cpu_copy_elem(out, in ? plane + (iy * d->w + ix) * (int64_t)es : zero,
                                          es);
                        }
                    }
                }
            }
        }
    }
}

void amp_cpu_col2im(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx,
                    const amp_tensor_t *cols) {
    conv_check(d, cols, dx);
    CPU_ASSERT_FLOAT(dx);
    const int64_t s = d->stride, L = d->oh * d->ow, CK = d->c * d->kh * d->kw;
    float *acc = amp_cpu_workspace(bctx, (size_t)(d->w > 0 ? d->w : 1));
    const void *cp = amp_tensor_ptr(cols);
    char *dp = amp_tensor_ptr(dx);
    const int64_t es = (int64_t)amp_dtype_size(dx->dtype);
    for (int64_t n = 0; n < d->n; n++) {
        for (int64_t c = 0; c < d->c; c++) {
            for (int64_t y = 0; y < d->h; y++) {
                // The output rows / columns whose window covers (y, x): [start, end).
                const int64_t hy = y + d->padding;
                const int64_t oy0 = hy < d->kh ? 0 : (hy - d->kh) / s + 1;
                const int64_t oy1 = hy / s + 1 < d->oh ? hy / s + 1 : d->oh;
                for (int64_t x = 0; x < d->w; x++) {
                    const int64_t wx = x + d->padding;
                    const int64_t ox0 = wx < d->kw ? 0 : (wx - d->kw) / s + 1;
                    const int64_t ox1 = wx / s + 1 < d->ow ? wx / s + 1 : d->ow;
                    float v = 0.0f;
                    for (int64_t oy = oy0; oy < oy1; oy++) {
                        for (int64_t ox = ox0; ox < ox1; ox++) {
                            const int64_t i = hy - oy * s, j = wx - ox * s;
                            const int64_t row = (c * d->kh + i) * d->kw + j;
                            v +=
                                amp_load_f32(cols->dtype, cp, (n * CK + row) * L + oy * d->ow + ox);
                        }
                    }
                    acc[x] = v;
                }
                amp_cpu_store_f32(dx->dtype, dp + (((n * d->c + c) * d->h + y) * d->w) * es, d->w,
                                  acc);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// max_pool2d

void amp_cpu_max_pool2d(void *bctx, amp_tensor_t *y, amp_tensor_t *argmax, const amp_tensor_t *x,
                        int kernel, int stride) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(argmax);
    CPU_ASSERT_CONTIGUOUS(x);
    AMP_ASSERT(x->ndim == 4 && y->ndim == 4 && argmax->ndim == 4);
    AMP_ASSERT(argmax->dtype == AMP_DTYPE_I32 && cpu_numel(argmax) == cpu_numel(y));
    AMP_ASSERT(kernel >= 1 && stride >= 1);
    const int64_t planes = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t oh = y->shape[2], ow = y->shape[3];
    AMP_ASSERT(y->shape[0] * y->shape[1] == planes);
    AMP_ASSERT((oh - 1) * stride + kernel <= H && (ow - 1) * stride + kernel <= W,
               "(windows must lie inside the input)");
    const void *xp = amp_tensor_ptr(x);
    void *yp = amp_tensor_ptr(y);
    int32_t *ap = amp_tensor_ptr(argmax);
    for (int64_t p = 0; p < planes; p++) {
        for (int64_t oy = 0; oy < oh; oy++) {
            for (int64_t ox = 0; ox < ow; ox++) {
                const int64_t h0 = oy * stride, w0 = ox * stride;
                // PyTorch: start at -inf with the window's first position; a NaN always takes
                // over (the last NaN in the window wins).
                float max = -INFINITY;
                int64_t at = h0 * W + w0;
                for (int64_t h = h0; h < h0 + kernel; h++) {
                    for (int64_t w = w0; w < w0 + kernel; w++) {
                        const float v = amp_load_f32(x->dtype, xp, p * H * W + h * W + w);
                        if (v > max || isnan(v)) {
                            at = h * W + w;
                            max = v;
                        }
                    }
                }
                const int64_t o = (p * oh + oy) * ow + ox;
                cpu_store(y->dtype, yp, o, max);
                ap[o] = (int32_t)at;
            }
        }
    }
}

void amp_cpu_max_pool2d_backward(void *bctx, amp_tensor_t *dx, const amp_tensor_t *dy,
                                 const amp_tensor_t *argmax, int kernel, int stride) {
    (void)kernel, (void)stride; // the argmax positions say it all
    CPU_ASSERT_CONTIGUOUS(dx);
    CPU_ASSERT_CONTIGUOUS(dy);
    CPU_ASSERT_CONTIGUOUS(argmax);
    CPU_ASSERT_FLOAT(dx);
    AMP_ASSERT(dx->ndim == 4 && dy->ndim == 4 && argmax->dtype == AMP_DTYPE_I32);
    AMP_ASSERT(cpu_numel(argmax) == cpu_numel(dy));
    const int64_t planes = dx->shape[0] * dx->shape[1], HW = dx->shape[2] * dx->shape[3];
    const int64_t L = dy->shape[2] * dy->shape[3];
    AMP_ASSERT(dy->shape[0] * dy->shape[1] == planes);
    float *acc = amp_cpu_workspace(bctx, (size_t)(HW > 0 ? HW : 1));
    const int32_t *ap = amp_tensor_ptr(argmax);
    const void *gp = amp_tensor_ptr(dy);
    char *dp = amp_tensor_ptr(dx);
    const int64_t es = (int64_t)amp_dtype_size(dx->dtype);
    for (int64_t p = 0; p < planes; p++) {
        memset(acc, 0, (size_t)HW * sizeof(float));
        for (int64_t o = 0; o < L; o++) { // output order = PyTorch's per-pixel summation order
            const int32_t at = ap[p * L + o];
            AMP_ASSERT(at >= 0 && at < HW, "(argmax %d out of range)", (int)at);
            acc[at] += amp_load_f32(dy->dtype, gp, p * L + o);
        }
        amp_cpu_store_f32(dx->dtype, dp + p * HW * es, HW, acc);
    }
}
