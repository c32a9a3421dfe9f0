/*
 * cpu-elementwise.c — the CPU backend's elementwise ops: unary activations and their backward,
 * broadcasting binary arithmetic, reduce_sum (the gradient of a broadcast), masked_fill and the
 * dropout mask.
 *
 * Each op widens its inputs chunk by chunk into float buffers, computes in float with the same
 * formula (and the same operation order) as PyTorch's CUDA kernel, and rounds once on store.
 */
#include "cpu-impl.h"

#include <math.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Unary forward

// t: the input's dtype, to which pow rounds its exponent and intermediate products as PyTorch
// does.
static void unary_chunk(amp_unary_op op, float alpha, amp_dtype t, float *v, int64_t n) {
    switch (op) {
    case AMP_UNARY_RELU: // clamp_min(x, 0): NaN propagates
        for (int64_t i = 0; i < n; i++)
            v[i] = (v[i] > 0.0f || isnan(v[i])) ? v[i] : 0.0f;
        return;
    case AMP_UNARY_GELU:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] * 0.5f * (1.0f + erff(v[i] * AMP_GELU_SQRT1_2));
        return;
    case AMP_UNARY_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float x = v[i], x_cube = x * x * x;
            float inner = AMP_GELU_TANH_BETA * (x + AMP_GELU_TANH_KAPPA * x_cube);
            v[i] = 0.5f * x * (1.0f + tanhf(inner));
        }
        return;
    case AMP_UNARY_TANH:
        for (int64_t i = 0; i < n; i++)
            v[i] = tanhf(v[i]);
        return;
    case AMP_UNARY_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            v[i] = 1.0f / (1.0f + expf(-v[i]));
        return;
    case AMP_UNARY_EXP:
        for (int64_t i = 0; i < n; i++)
            v[i] = expf(v[i]);
        return;
    case AMP_UNARY_LOG:
        for (int64_t i = 0; i < n; i++)
            v[i] = logf(v[i]);
        return;
    case AMP_UNARY_LOG1P:
        for (int64_t i = 0; i < n; i++)
            v[i] = log1pf(v[i]);
        return;
    case AMP_UNARY_POW:
        for (int64_t i = 0; i < n; i++)
            v[i] = amp_pow_scalar(v[i], alpha, t);
        return;
    case AMP_UNARY_SCALE:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] * alpha;
        return;
    case AMP_UNARY_ADD_SCALAR:
        for (int64_t i = 0; i < n; i++)
            v[i] = v[i] + alpha;
        return;
    case AMP_UNARY_CLAMP_MIN: // NaN propagates
        for (int64_t i = 0; i < n; i++)
            v[i] = (v[i] < alpha) ? alpha : v[i];
        return;
    }
    amp_abort(__FILE__, __LINE__, "unknown unary op %d", (int)op);
}

void amp_cpu_unary(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *y,
                   const amp_tensor_t *x) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(x);
    CPU_ASSERT_FLOAT(y);
    const int64_t n = cpu_numel(y);
    AMP_ASSERT(cpu_numel(x) == n);
    const char *xp = amp_tensor_ptr(x);
    char *yp = amp_tensor_ptr(y);
    const int64_t xs = (int64_t)amp_dtype_size(x->dtype), ys = (int64_t)amp_dtype_size(y->dtype);
    float buf[CPU_CHUNK];
    for (int64_t i = 0; i < n; i += CPU_CHUNK) {
        int64_t c = n - i < CPU_CHUNK ? n - i : CPU_CHUNK;
        amp_cpu_load_f32(x->dtype, xp + i * xs, 1, c, buf);
        unary_chunk(op, alpha, x->dtype, buf, c);
        amp_cpu_store_f32(y->dtype, yp + i * ys, c, buf);
    }
}

// ---------------------------------------------------------------------------------------------
// Unary backward: PyTorch's derivative formulas (threshold_backward, GeluBackward, tanh_backward,
// sigmoid_backward and the autograd formulas of exp, log, pow), one rounding at the end.

static void unary_backward_chunk(amp_unary_op op, float alpha, amp_dtype t, float *g,
                                 const float *x, const float *y, int64_t n) {
    switch (op) {
    case AMP_UNARY_RELU: // threshold_backward(dy, y, 0): a NaN output passes the gradient
        for (int64_t i = 0; i < n; i++)
            g[i] = y[i] <= 0.0f ? 0.0f : g[i];
        return;
    case AMP_UNARY_GELU:
        for (int64_t i = 0; i < n; i++) {
            float cdf = 0.5f * (1.0f + erff(x[i] * AMP_GELU_SQRT1_2));
            float pdf = expf(-0.5f * x[i] * x[i]) * AMP_GELU_PDF_BETA;
            g[i] = g[i] * (cdf + x[i] * pdf);
        }
        return;
    case AMP_UNARY_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float xv = x[i], x_sq = xv * xv, x_cube = x_sq * xv;
            float inner = AMP_GELU_TANH_BETA * (xv + AMP_GELU_TANH_KAPPA * x_cube);
            float tanh_inner = tanhf(inner);
            float left = 0.5f * xv, right = 1.0f + tanh_inner;
            float left_derivative = 0.5f * right;
            float tanh_derivative = 1.0f - tanh_inner * tanh_inner;
            float inner_derivative =
                AMP_GELU_TANH_BETA * (1.0f + 3.0f * AMP_GELU_TANH_KAPPA * x_sq);
            float right_derivative = left * tanh_derivative * inner_derivative;
            g[i] = g[i] * (left_derivative + right_derivative);
        }
        return;
    case AMP_UNARY_TANH:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] * (1.0f - y[i] * y[i]);
        return;
    case AMP_UNARY_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] * (1.0f - y[i]) * y[i];
        return;
    case AMP_UNARY_EXP:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] * y[i];
        return;
    case AMP_UNARY_LOG:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] / x[i];
        return;
    case AMP_UNARY_LOG1P: // PyTorch's grad / (self + 1), self + 1 a tensor of self's dtype
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] / amp_rounded(t, x[i] + 1.0f);
        return;
    case AMP_UNARY_POW:
        for (int64_t i = 0; i < n; i++)
            g[i] = amp_pow_backward_scalar(g[i], x[i], alpha, t);
        return;
    case AMP_UNARY_SCALE:
        for (int64_t i = 0; i < n; i++)
            g[i] = g[i] * alpha;
        return;
    case AMP_UNARY_ADD_SCALAR:
        return;
    case AMP_UNARY_CLAMP_MIN: // where(x >= min, dy, 0): nothing flows back through a NaN
        for (int64_t i = 0; i < n; i++)
            g[i] = x[i] >= alpha ? g[i] : 0.0f;
        return;
    }
    amp_abort(__FILE__, __LINE__, "unknown unary op %d", (int)op);
}

// Loads elements [i, i + c) of t (contiguous) into buf; t may be NULL when the op ignores it.
static void load_chunk(const amp_tensor_t *t, int64_t i, int64_t c, float *buf) {
    if (!t) return;
    const char *p = amp_tensor_ptr(t);
    amp_cpu_load_f32(t->dtype, p + i * (int64_t)amp_dtype_size(t->dtype), 1, c, buf);
}

void amp_cpu_unary_backward(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *dx,
                            const amp_tensor_t *dy, const amp_tensor_t *x, const amp_tensor_t *y,
                            int64_t bias_cols) {
    (void)bctx;
    (void)bias_cols; // the bias gradient is summed where it is asked for
    const int64_t n = cpu_numel(dx);
    CPU_ASSERT_CONTIGUOUS(dx);
    CPU_ASSERT_CONTIGUOUS(dy);
    CPU_ASSERT_FLOAT(dx);
    AMP_ASSERT(cpu_numel(dy) == n);
    const amp_tensor_t *xn = amp_unary_backward_needs_x(op) ? x : NULL;
    const amp_tensor_t *yn = amp_unary_backward_needs_y(op) ? y : NULL;
    if (amp_unary_backward_needs_x(op)) {
        AMP_ASSERT(x != NULL && cpu_numel(x) == n, "(op %d needs x)", (int)op);
        CPU_ASSERT_CONTIGUOUS(x);
    }
    if (amp_unary_backward_needs_y(op)) {
        AMP_ASSERT(y != NULL && cpu_numel(y) == n, "(op %d needs y)", (int)op);
        CPU_ASSERT_CONTIGUOUS(y);
    }
    char *dxp = amp_tensor_ptr(dx);
    const int64_t dxs = (int64_t)amp_dtype_size(dx->dtype);
    float g[CPU_CHUNK], xb[CPU_CHUNK], yb[CPU_CHUNK];
    for (int64_t i = 0; i < n; i += CPU_CHUNK) {
        int64_t c = n - i < CPU_CHUNK ? n - i : CPU_CHUNK;
        load_chunk(dy, i, c, g);
        load_chunk(xn, i, c, xb);
        load_chunk(yn, i, c, yb);
        unary_backward_chunk(op, alpha, xn ? xn->dtype : dx->dtype, g, xb, yb, c);
        amp_cpu_store_f32(dx->dtype, dxp + i * dxs, c, g);
    }
}

// ---------------------------------------------------------------------------------------------
// Binary

static void binary_chunk(amp_binary_op op, float *a, const float *b, int64_t n) {
    switch (op) {
    case AMP_BINARY_ADD:
        for (int64_t i = 0; i < n; i++)
            a[i] = a[i] + b[i];
        return;
    case AMP_BINARY_SUB:
        for (int64_t i = 0; i < n; i++)
            a[i] = a[i] - b[i];
        return;
    case AMP_BINARY_MUL:
        for (int64_t i = 0; i < n; i++)
            a[i] = a[i] * b[i];
        return;
    case AMP_BINARY_DIV:
        for (int64_t i = 0; i < n; i++)
            a[i] = a[i] / b[i];
        return;
    }
    amp_abort(__FILE__, __LINE__, "unknown binary op %d", (int)op);
}

void amp_cpu_binary(void *bctx, amp_binary_op op, amp_tensor_t *y, const amp_tensor_t *a,
                    const amp_tensor_t *b) {
    (void)bctx;
    CPU_ASSERT_FLOAT(y);
    AMP_ASSERT(a->ndim == y->ndim && b->ndim == y->ndim);
    for (int d = 0; d < y->ndim; d++)
        AMP_ASSERT(a->shape[d] == y->shape[d] && b->shape[d] == y->shape[d], "(dim %d)", d);

    cpu_iter it; // y's own strides: a contiguous y, or a slice of a gradient
    amp_cpu_iter_init(&it, y->ndim, y->shape, 3,
                      (const int64_t *[]){y->stride, a->stride, b->stride});
    const int64_t ys = (int64_t)amp_dtype_size(y->dtype), as = (int64_t)amp_dtype_size(a->dtype),
                  bs = (int64_t)amp_dtype_size(b->dtype);
    char *yp = amp_tensor_ptr(y);
    const char *ap = amp_tensor_ptr(a), *bp = amp_tensor_ptr(b);
    float av[CPU_CHUNK], bv[CPU_CHUNK];
    for (int64_t r = 0; r < it.rows; r++, amp_cpu_iter_next(&it)) {
        for (int64_t j = 0; j < it.len; j += CPU_CHUNK) {
            int64_t c = it.len - j < CPU_CHUNK ? it.len - j : CPU_CHUNK;
            amp_cpu_load_f32(a->dtype, ap + (it.off[1] + j * it.step[1]) * as, it.step[1], c, av);
            amp_cpu_load_f32(b->dtype, bp + (it.off[2] + j * it.step[2]) * bs, it.step[2], c, bv);
            binary_chunk(op, av, bv, c);
            if (it.step[0] == 1)
                amp_cpu_store_f32(y->dtype, yp + (it.off[0] + j) * ys, c, av);
            else
                for (int64_t e = 0; e < c; e++)
                    amp_cpu_store_f32(y->dtype, yp + (it.off[0] + (j + e) * it.step[0]) * ys, 1,
                                      &av[e]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// reduce_sum: f32 accumulators, one per output element. Where the reduced elements are a
// contiguous run (the innermost dims are reduced), the run is summed pairwise; elsewhere rows
// are added in order.

// Pairwise sum of a contiguous run of n elements of dtype t. f16/bf16 runs are widened a block
// at a time and the block sums combined pairwise like a binary counter.
static float run_sum(amp_dtype t, const char *p, int64_t n) {
    if (t == AMP_DTYPE_F32) return amp_cpu_sum_f32((const float *)p, n);
    float buf[CPU_CHUNK * 16], level[64];
    const int64_t block = (int64_t)(sizeof buf / sizeof buf[0]), es = (int64_t)amp_dtype_size(t);
    uint64_t count = 0; // bit l set: level[l] holds the sum of 2^l blocks
    for (int64_t i = 0; i < n; i += block) {
        int64_t c = n - i < block ? n - i : block;
        amp_cpu_load_f32(t, p + i * es, 1, c, buf);
        float s = amp_cpu_sum_f32(buf, c);
        int l = 0;
        for (; count >> l & 1; l++)
            s = level[l] + s;
        level[l] = s;
        count++;
    }
    float total = 0.0f;
    for (int l = 0; l < 64; l++)
        if (count >> l & 1) total = level[l] + total;
    return total;
}

void amp_cpu_reduce_sum(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, float alpha) {
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(x);
    CPU_ASSERT_FLOAT(y);
    AMP_ASSERT(x->ndim == y->ndim);
    int64_t xstride[AMP_MAX_DIMS], ystride[AMP_MAX_DIMS];
    amp_contiguous_strides(x->ndim, x->shape, xstride);
    amp_contiguous_strides(y->ndim, y->shape, ystride);
    for (int d = 0; d < x->ndim; d++) {
        AMP_ASSERT(y->shape[d] == x->shape[d] || y->shape[d] == 1, "(dim %d)", d);
        if (y->shape[d] != x->shape[d]) ystride[d] = 0; // summed over
    }
    const int64_t ny = cpu_numel(y);
    float *acc = amp_cpu_workspace(bctx, (size_t)(ny > 0 ? ny : 1));
    memset(acc, 0, (size_t)ny * sizeof(float));

    cpu_iter it;
    amp_cpu_iter_init(&it, x->ndim, x->shape, 2, (const int64_t *[]){xstride, ystride});
    const char *xp = amp_tensor_ptr(x);
    const int64_t xs = (int64_t)amp_dtype_size(x->dtype);
    float buf[CPU_CHUNK];
    for (int64_t r = 0; r < it.rows; r++, amp_cpu_iter_next(&it)) {
        const char *row = xp + it.off[0] * xs;
        if (it.step[1] == 0) { // the whole row goes into one output
            acc[it.off[1]] += run_sum(x->dtype, row, it.len);
            continue;
        }
        for (int64_t j = 0; j < it.len; j += CPU_CHUNK) {
            int64_t c = it.len - j < CPU_CHUNK ? it.len - j : CPU_CHUNK;
            amp_cpu_load_f32(x->dtype, row + j * xs, 1, c, buf);
            float *a = acc + it.off[1] + j * it.step[1];
            for (int64_t i = 0; i < c; i++)
                a[i * it.step[1]] += buf[i];
        }
    }
    for (int64_t i = 0; i < ny; i++)
        acc[i] *= alpha;
    amp_cpu_store_f32(y->dtype, amp_tensor_ptr(y), ny, acc);
}

// ---------------------------------------------------------------------------------------------
// masked_fill and the dropout mask

void amp_cpu_masked_fill(void *bctx, amp_tensor_t *y, const amp_tensor_t *x,
                         const amp_tensor_t *mask, float value) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(y);
    AMP_ASSERT(x->ndim == y->ndim && mask->ndim == y->ndim);
    for (int d = 0; d < y->ndim; d++)
        AMP_ASSERT(x->shape[d] == y->shape[d] && mask->shape[d] == y->shape[d], "(dim %d)", d);
    int64_t ystride[AMP_MAX_DIMS];
    amp_contiguous_strides(y->ndim, y->shape, ystride);
    cpu_iter it;
    amp_cpu_iter_init(&it, y->ndim, y->shape, 3,
                      (const int64_t *[]){ystride, x->stride, mask->stride});
    const size_t ysz = amp_dtype_size(y->dtype), xsz = amp_dtype_size(x->dtype);
    char fill[8];
    cpu_store(y->dtype, fill, 0, value);
    char *yp = amp_tensor_ptr(y);
    const char *xp = amp_tensor_ptr(x);
    const void *mp = amp_tensor_ptr(mask);
    const bool same = x->dtype == y->dtype; // unmasked values keep their bits (NaN payloads)
    for (int64_t r = 0; r < it.rows; r++, amp_cpu_iter_next(&it)) {
        for (int64_t j = 0; j < it.len; j++) {
            char *dst = yp + (it.off[0] + j) * (int64_t)ysz;
            int64_t xi = it.off[1] + j * it.step[1];
            if (cpu_load_index(mask->dtype, mp, it.off[2] + j * it.step[2]) != 0)
                cpu_copy_elem(dst, fill, ysz);
            else if (same)
                cpu_copy_elem(dst, xp + xi * (int64_t)xsz, ysz);
            else
                cpu_store(y->dtype, dst, 0, amp_load_f32(x->dtype, xp, xi));
        }
    }
}

void amp_cpu_dropout_mask(void *bctx, amp_tensor_t *mask, float p, uint64_t seed, uint64_t offset) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(mask);
    CPU_ASSERT_FLOAT(mask);
    // 1 - p in double, like Python's `1 - p`, then the reciprocal of the float keep probability.
    const float keep = (float)(1.0 - (double)p);
    const float scale = 1.0f / keep;
    const int64_t n = cpu_numel(mask);
    char *mp = amp_tensor_ptr(mask);
    const int64_t ms = (int64_t)amp_dtype_size(mask->dtype);
    float buf[CPU_CHUNK];
    for (int64_t i = 0; i < n; i += CPU_CHUNK) {
        int64_t c = n - i < CPU_CHUNK ? n - i : CPU_CHUNK;
        for (int64_t j = 0; j < c; j++)
            buf[j] = amp_rng_uniform(seed, offset + (uint64_t)(i + j)) < p ? 0.0f : scale;
        amp_cpu_store_f32(mask->dtype, mp + i * ms, c, buf);
    }
}
