/*
 * cuda-unary.cu — elementwise activations and their backward (PyTorch's formulas, the same
 * constants and operation order as the CPU reference), one f32 evaluation and one rounding per
 * element. Inputs and outputs are contiguous; the 16-bit fast path moves 8 elements (16 bytes)
 * per load when x and y share a dtype. The kernels add the statistics of what they store when
 * the instrumentation asks (cuda-fuse.h).
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

#include <type_traits>

// t: the input's dtype, to which pow rounds its exponent and intermediate products as PyTorch
// does.
__device__ __forceinline__ float unary_f(amp_unary_op op, float alpha, amp_dtype t, float v) {
    switch (op) {
    case AMP_UNARY_RELU:
        return (v > 0.0f || isnan(v)) ? v : 0.0f;
    case AMP_UNARY_GELU:
        return v * 0.5f * (1.0f + erff(v * AMP_GELU_SQRT1_2));
    case AMP_UNARY_GELU_TANH: {
        const float cube = v * v * v, inner = AMP_GELU_TANH_BETA * (v + AMP_GELU_TANH_KAPPA * cube);
        return 0.5f * v * (1.0f + tanhf(inner));
    }
    case AMP_UNARY_TANH:
        return tanhf(v);
    case AMP_UNARY_SIGMOID:
        return 1.0f / (1.0f + expf(-v));
    case AMP_UNARY_EXP:
        return expf(v);
    case AMP_UNARY_LOG:
        return logf(v);
    case AMP_UNARY_LOG1P:
        return log1pf(v);
    case AMP_UNARY_POW:
        return amp_pow_scalar(v, alpha, t);
    case AMP_UNARY_SCALE:
        return v * alpha;
    case AMP_UNARY_ADD_SCALAR:
        return v + alpha;
    case AMP_UNARY_CLAMP_MIN:
        return v < alpha ? alpha : v;
    }
    return v;
}

__device__ __forceinline__ float unary_df(amp_unary_op op, float alpha, amp_dtype t, float g,
                                          float x, float y) {
    switch (op) {
    case AMP_UNARY_RELU:
        return y <= 0.0f ? 0.0f : g;
    case AMP_UNARY_GELU: {
        const float cdf = 0.5f * (1.0f + erff(x * AMP_GELU_SQRT1_2));
        const float pdf = expf(-0.5f * x * x) * AMP_GELU_PDF_BETA;
        return g * (cdf + x * pdf);
    }
    case AMP_UNARY_GELU_TANH: {
        const float x_sq = x * x, x_cube = x_sq * x;
        const float inner = AMP_GELU_TANH_BETA * (x + AMP_GELU_TANH_KAPPA * x_cube);
        const float t = tanhf(inner);
        const float left = 0.5f * x, right = 1.0f + t;
        const float left_derivative = 0.5f * right;
        const float tanh_derivative = 1.0f - t * t;
        const float inner_derivative =
            AMP_GELU_TANH_BETA * (1.0f + 3.0f * AMP_GELU_TANH_KAPPA * x_sq);
        return g * (left_derivative + left * tanh_derivative * inner_derivative);
    }
    case AMP_UNARY_TANH:
        return g * (1.0f - y * y);
    case AMP_UNARY_SIGMOID:
        return g * (1.0f - y) * y;
    case AMP_UNARY_EXP:
        return g * y;
    case AMP_UNARY_LOG:
        return g / x;
    case AMP_UNARY_LOG1P: // PyTorch's grad / (self + 1), self + 1 a tensor of self's dtype
        return g / amp_rounded(t, x + 1.0f);
    case AMP_UNARY_POW:
        return amp_pow_backward_scalar(g, x, alpha, t);
    case AMP_UNARY_SCALE:
        return g * alpha;
    case AMP_UNARY_ADD_SCALAR:
        return g;
    case AMP_UNARY_CLAMP_MIN:
        return x >= alpha ? g : 0.0f;
    }
    return g;
}

// y = f(x), any dtypes.
template <bool S>
__global__ void unary_kernel(amp_unary_op op, float alpha, void *y, amp_dtype yt, const void *x,
                             amp_dtype xt, int64_t n, cuda_fuse f) {
    thread_acc a = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = unary_f(op, alpha, xt, cuda_load(xt, x, i));
        cuda_store(yt, y, i, v);
        if (S) acc_stored(a, amp_rounded(yt, v), f.lim);
    }
    cuda_fuse_end<S>(f, a);
}

// The vectorised kernels take the op as a template argument OP too: >= 0 fixes it at compile
// time (the GELUs, whose erf/tanh leave little to spare against the card's bandwidth, and the
// scaling of attention scores, 50M values a launch on gpt: no switch per element), -1 reads it
// from `op`.
#define UNARY_OP(OP, op) ((OP) >= 0 ? (amp_unary_op)(OP) : (op))

// Runs `launch` (a generic lambda taking the op as a compile-time constant) for op.
template <typename F> static void unary_op_dispatch(amp_unary_op op, F launch) {
    if (op == AMP_UNARY_GELU)
        launch(std::integral_constant<int, AMP_UNARY_GELU>());
    else if (op == AMP_UNARY_GELU_TANH)
        launch(std::integral_constant<int, AMP_UNARY_GELU_TANH>());
    else if (op == AMP_UNARY_SCALE)
        launch(std::integral_constant<int, AMP_UNARY_SCALE>());
    else
        launch(std::integral_constant<int, -1>());
}

// Vectors of 16 bytes per thread and step in the vectorised kernels, all loaded before the math
// (more bytes in flight: these kernels stream memory).
#define UNARY_U 2

// y = f(x) for one 16-bit or f32 dtype, UNARY_U vectors of 16 bytes per thread and step; the
// statistics of y (f) and of x (fi: the linear's output a GELU reads) as they go by.
template <bool S, typename T, int OP>
__global__ void unary_vec_kernel(amp_unary_op op_, float alpha, T *__restrict__ y,
                                 const T *__restrict__ x, int64_t n, cuda_fuse f, cuda_fuse fi) {
    const amp_unary_op op = UNARY_OP(OP, op_);
    constexpr int V = 16 / sizeof(T);
    const int64_t nv = n / V, stride = (int64_t)gridDim.x * blockDim.x;
    stored_stats<S, T> st(f);
    stored_stats<S, T> sti(fi);
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < nv;
         i0 += UNARY_U * stride) {
        uint4 raw[UNARY_U];
#pragma unroll
        for (int u = 0; u < UNARY_U; u++)
            if (i0 + u * stride < nv) raw[u] = ((const uint4 *)x)[i0 + u * stride];
#pragma unroll
        for (int u = 0; u < UNARY_U; u++) {
            if (i0 + u * stride >= nv) break;
            T *v = (T *)&raw[u];
            sti.values(v, fi.lim);
#pragma unroll
            for (int j = 0; j < V; j++)
                v[j] = cuda_io<T>::store(
                    unary_f(op, alpha, cuda_io<T>::dtype, cuda_io<T>::load(v[j])));
            ((uint4 *)y)[i0 + u * stride] = raw[u];
            st.values(v, f.lim);
        }
    }
    for (int64_t i = nv * V + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const T xv = x[i],
                v = cuda_io<T>::store(unary_f(op, alpha, cuda_io<T>::dtype, cuda_io<T>::load(xv)));
        y[i] = v;
        st.value(v, f.lim);
        sti.value(xv, fi.lim);
    }
    st.end(f);
    sti.end(fi);
}

static bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

void cuda_unary(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *y, const amp_tensor_t *x) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(x);
    CUDA_ASSERT_FLOAT(y);
    const int64_t n = cuda_numel(y);
    AMP_ASSERT(cuda_numel(x) == n);
    if (n == 0) return;
    void *yp = amp_tensor_ptr(y);
    const void *xp = amp_tensor_ptr(x);
    const cuda_fuse f = cuda_fuse_take(y);
    if (x->dtype == y->dtype && aligned16(yp) && aligned16(xp)) {
        const cuda_fuse fi = cuda_fuse_take_input(c, x);
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            const unsigned grid = cuda_grid(n, 256, UNARY_U * 16 / (int)sizeof(T));
            unary_op_dispatch(op, [&](auto k) {
                constexpr int OP = decltype(k)::value;
                auto kernel = unary_vec_kernel<true, T, OP>;
                CUDA_FUSE_DISPATCH2(
                    f, fi, S,
                    unary_vec_kernel<S, T, OP>
                    <<<cuda_fuse_grid(f, fi, grid, 256, kernel), 256, 0, c->stream>>>(
                        op, alpha, (T *)yp, (const T *)xp, n, f, fi));
            });
        });
    } else {
        const unsigned grid = cuda_grid(n, 256, 4);
        CUDA_FUSE_DISPATCH(f, S,
                           unary_kernel<S>
                           <<<cuda_fuse_grid(f, grid, 256, unary_kernel<S>), 256, 0, c->stream>>>(
                               op, alpha, yp, y->dtype, xp, x->dtype, n, f));
    }
    CUDA_LAUNCH_CHECK();
}

// dx = dy * f'(x); x or y may be NULL when the op does not read it.
template <bool S>
__global__ void unary_backward_kernel(amp_unary_op op, float alpha, void *dx, amp_dtype dxt,
                                      const void *dy, amp_dtype dyt, const void *x, amp_dtype xt,
                                      const void *y, amp_dtype yt, int64_t n, cuda_fuse f) {
    thread_acc a = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float xv = x ? cuda_load(xt, x, i) : 0.0f, yv = y ? cuda_load(yt, y, i) : 0.0f;
        const float v = unary_df(op, alpha, x ? xt : dxt, cuda_load(dyt, dy, i), xv, yv);
        cuda_store(dxt, dx, i, v);
        if (S) acc_stored(a, amp_rounded(dxt, v), f.lim);
    }
    cuda_fuse_end<S>(f, a);
}

// The same for one dtype everywhere, 16 bytes per operand per step. C: also the column sums of
// dx as a (rows, cols) matrix whose row the grid's stride covers a whole number of times (so a
// thread's V columns stay the same): thread t's sums of the values it stored go to
// colsum[t * V, + V), which the grid's threads fill as (stride * V / cols, cols) partial sums.
template <bool S, bool C, typename T, int OP>
__global__ void unary_backward_vec_kernel(amp_unary_op op_, float alpha, T *__restrict__ dx,
                                          const T *__restrict__ dy, const T *__restrict__ x,
                                          const T *__restrict__ y, int64_t n, cuda_fuse f,
                                          cuda_fuse fi, float *__restrict__ colsum) {
    const amp_unary_op op = UNARY_OP(OP, op_);
    constexpr int V = 16 / sizeof(T);
    const int64_t nv = n / V, stride = (int64_t)gridDim.x * blockDim.x;
    stored_stats<S, T> st(f);
    stored_stats<S, T> sti(fi); // dx's, and dy's (a linear's input gradient)
    float cs[C ? V : 1] = {};
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < nv;
         i0 += UNARY_U * stride) {
        uint4 graw[UNARY_U], xraw[UNARY_U], yraw[UNARY_U];
#pragma unroll
        for (int u = 0; u < UNARY_U; u++) {
            const int64_t i = i0 + u * stride;
            graw[u] = xraw[u] = yraw[u] = make_uint4(0, 0, 0, 0);
            if (i >= nv) continue;
            graw[u] = ((const uint4 *)dy)[i];
            if (x) xraw[u] = ((const uint4 *)x)[i];
            if (y) yraw[u] = ((const uint4 *)y)[i];
        }
#pragma unroll
        for (int u = 0; u < UNARY_U; u++) {
            if (i0 + u * stride >= nv) break;
            T *g = (T *)&graw[u], *xv = (T *)&xraw[u], *yv = (T *)&yraw[u];
            sti.values(g, fi.lim);
#pragma unroll
            for (int j = 0; j < V; j++)
                g[j] =
                    cuda_io<T>::store(unary_df(op, alpha, cuda_io<T>::dtype, cuda_io<T>::load(g[j]),
                                               cuda_io<T>::load(xv[j]), cuda_io<T>::load(yv[j])));
            ((uint4 *)dx)[i0 + u * stride] = graw[u];
            st.values(g, f.lim);
            if constexpr (C)
#pragma unroll
                for (int j = 0; j < V; j++)
                    cs[j] += cuda_io<T>::load(g[j]);
        }
    }
    if constexpr (C) { // (no tail: n is a whole number of rows of whole vectors)
        float4 *out = (float4 *)(colsum + (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V);
#pragma unroll
        for (int j = 0; j < V / 4; j++)
            out[j] = make_float4(cs[4 * j], cs[4 * j + 1], cs[4 * j + 2], cs[4 * j + 3]);
    }
    for (int64_t i = nv * V + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float xv = x ? cuda_io<T>::load(x[i]) : 0.0f, yv = y ? cuda_io<T>::load(y[i]) : 0.0f;
        const T g = dy[i], v = cuda_io<T>::store(
                               unary_df(op, alpha, cuda_io<T>::dtype, cuda_io<T>::load(g), xv, yv));
        dx[i] = v;
        st.value(v, f.lim);
        sti.value(g, fi.lim);
    }
    st.end(f);
    sti.end(fi);
}

// Blocks of 256 threads for the column sums of n values in rows of cols, V a thread a step: a
// multiple of the blocks whose threads cover a whole number of rows, near `want` and at most
// `most` (one wave); 0 when there is none (cols not a whole number of vectors, or more blocks
// to a row than a wave).
static unsigned colsum_grid(int64_t n, int64_t cols, int V, unsigned want, unsigned most) {
    if (cols <= 0 || cols % V != 0 || n % cols != 0) return 0;
    int64_t a = cols, b = 256 * (int64_t)V; // blocks to a whole number of rows: cols / gcd
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    const int64_t m = cols / a;
    if (m > most) return 0;
    const int64_t g = (want < most ? want : most) / m * m;
    return (unsigned)(g > m ? g : m);
}

// The device memory for `floats` partial sums (cuda_ctx.colsum.partial, grow-only).
static float *colsum_partials(cuda_ctx *c, size_t floats) {
    const size_t bytes = floats * sizeof(float);
    if (bytes > c->colsum.partial_bytes) {
        if (c->colsum.partial) cuda_pool_free(&c->pool, c->colsum.partial);
        c->colsum.partial = (float *)cuda_pool_alloc(&c->pool, bytes);
        AMP_ASSERT(c->colsum.partial, "(out of device memory for %zu bytes of column sums)", bytes);
        c->colsum.partial_bytes = bytes;
    }
    return c->colsum.partial;
}

void cuda_unary_backward(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *dx,
                         const amp_tensor_t *dy, const amp_tensor_t *x, const amp_tensor_t *y,
                         int64_t bias_cols) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dx);
    CUDA_ASSERT_CONTIGUOUS(dy);
    CUDA_ASSERT_FLOAT(dx);
    const int64_t n = cuda_numel(dx);
    AMP_ASSERT(cuda_numel(dy) == n);
    const amp_tensor_t *xn = amp_unary_backward_needs_x(op) ? x : NULL,
                       *yn = amp_unary_backward_needs_y(op) ? y : NULL;
    if (xn) {
        AMP_ASSERT(cuda_numel(xn) == n, "(op %d needs x)", (int)op);
        CUDA_ASSERT_CONTIGUOUS(xn);
    }
    if (yn) {
        AMP_ASSERT(cuda_numel(yn) == n, "(op %d needs y)", (int)op);
        CUDA_ASSERT_CONTIGUOUS(yn);
    }
    AMP_ASSERT(!amp_unary_backward_needs_x(op) || xn, "(op %d needs x)", (int)op);
    AMP_ASSERT(!amp_unary_backward_needs_y(op) || yn, "(op %d needs y)", (int)op);
    if (n == 0) return;
    void *dxp = amp_tensor_ptr(dx);
    const void *dyp = amp_tensor_ptr(dy), *xp = xn ? amp_tensor_ptr(xn) : NULL,
               *yp = yn ? amp_tensor_ptr(yn) : NULL;
    const bool same = dy->dtype == dx->dtype && (!xn || xn->dtype == dx->dtype) &&
                      (!yn || yn->dtype == dx->dtype);
    const bool al =
        aligned16(dxp) && aligned16(dyp) && (!xp || aligned16(xp)) && (!yp || aligned16(yp));
    const cuda_fuse f = cuda_fuse_take(dx);
    if (same && al) {
        const cuda_fuse fi = cuda_fuse_take_input(c, dy);
        CUDA_DISPATCH_FLOAT(dx->dtype, T, {
            constexpr int V = 16 / (int)sizeof(T);
            const unsigned grid = cuda_grid(n, 256, UNARY_U * V);
            unary_op_dispatch(op, [&](auto k) {
                constexpr int OP = decltype(k)::value;
                CUDA_FUSE_DISPATCH2(f, fi, S, {
                    auto plain = unary_backward_vec_kernel<S, false, T, OP>;
                    auto summing = unary_backward_vec_kernel<S, true, T, OP>;
                    const unsigned cgrid =
                        bias_cols > 0
                            ? colsum_grid(n, bias_cols, V, grid,
                                          cuda_resident_blocks((const void *)summing, 256))
                            : 0;
                    if (cgrid == 0) {
                        plain<<<cuda_fuse_grid(f, fi, grid, 256, plain), 256, 0, c->stream>>>(
                            op, alpha, (T *)dxp, (const T *)dyp, (const T *)xp, (const T *)yp, n, f,
                            fi, nullptr);
                    } else {
                        const int64_t threads = (int64_t)cgrid * 256;
                        float *partial = colsum_partials(c, (size_t)(threads * V));
                        summing<<<cgrid, 256, 0, c->stream>>>(op, alpha, (T *)dxp, (const T *)dyp,
                                                              (const T *)xp, (const T *)yp, n, f,
                                                              fi, partial);
                        c->colsum.data = (const char *)dxp;
                        c->colsum.rows = n / bias_cols;
                        c->colsum.cols = bias_cols;
                        c->colsum.parts = (int)(threads * V / bias_cols);
                        c->colsum.dtype = dx->dtype;
                    }
                });
            });
        });
    } else {
        const unsigned grid = cuda_grid(n, 256, 4);
        const amp_dtype xt = xn ? xn->dtype : AMP_DTYPE_F32, yt = yn ? yn->dtype : AMP_DTYPE_F32;
        CUDA_FUSE_DISPATCH(
            f, S,
            unary_backward_kernel<S>
            <<<cuda_fuse_grid(f, grid, 256, unary_backward_kernel<S>), 256, 0, c->stream>>>(
                op, alpha, dxp, dx->dtype, dyp, dy->dtype, xp, xt, yp, yt, n, f));
    }
    CUDA_LAUNCH_CHECK();
}
