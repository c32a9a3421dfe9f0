/*
 * cuda-norm.cu — layer_norm over the last dim, forward and backward.
 *
 * Forward and dx: a block per row (striding over the rows when the output's statistics are
 * added as it is stored, cuda-fuse.h). Forward: the two-pass mean and biased variance of the CPU
 * reference, mean and rstd (f32) written for backward. A row of one dtype throughout (x, y, w, b;
 * dx, x, w: the f32 residual stream of a transformer under autocast, with dy of that dtype or a
 * narrower one, amp_node.narrow_dy) of at most ROW_K values a thread is read once into registers
 * by kernels compiled for those dtypes; others go through the generic kernels, which load every
 * value by its dtype, as often as they use it. Both do the same arithmetic in the same order: the
 * same bits. Backward: one block per row for dx with PyTorch's formula
 * rstd / C * (C * w * dy - x_hat * sum(w * dy * x_hat) - sum(w * dy)); dw and db are column sums
 * over the rows, split into f32 partials and finished by a second small kernel.
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

template <bool S>
__global__ void layer_norm_kernel(void *y, amp_dtype yt, float *mean, float *rstd, const void *x,
                                  amp_dtype xt, const void *w, amp_dtype wt, const void *b,
                                  amp_dtype bt, float eps, int64_t rows, int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * C;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += cuda_load(xt, x, base + j);
        const float mu = cuda_block_sum(s) / (float)C;
        float q = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float d = cuda_load(xt, x, base + j) - mu;
            q += d * d;
        }
        const float var = cuda_block_sum(q) / (float)C;
        const float rs = 1.0f / sqrtf(var + eps);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            float o = (cuda_load(xt, x, base + j) - mu) * rs;
            if (w) o = o * cuda_load(wt, w, j);
            if (b) o = o + cuda_load(bt, b, j);
            cuda_store(yt, y, base + j, o);
            if (S) acc_stored(acc, amp_rounded(yt, o), f.lim);
        }
        if (threadIdx.x == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
    cuda_fuse_end<S>(f, acc);
}

static int norm_block(int64_t C) {
    return C <= 256 ? 64 : C <= 1024 ? 256 : 512;
}

#define ROW_K 4 // values a thread holds of a row in the typed kernels (C <= ROW_K * block)

// The forward for one dtype, the row in registers.
template <bool S, typename T>
__global__ void layer_norm_row_kernel(T *__restrict__ y, float *mean, float *rstd,
                                      const T *__restrict__ x, const T *w, const T *b, float eps,
                                      int64_t rows, int C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        float v[ROW_K], s = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_K; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            v[k] = j < C ? cuda_io<T>::load(xr[j]) : 0.0f;
            if (j < C) s += v[k];
        }
        const float mu = cuda_block_sum(s) / (float)C;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_K; k++) {
            const float d = v[k] - mu;
            if (threadIdx.x + k * blockDim.x < C) q += d * d;
        }
        const float var = cuda_block_sum(q) / (float)C;
        const float rs = 1.0f / sqrtf(var + eps);
#pragma unroll
        for (int k = 0; k < ROW_K; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            if (j >= C) break;
            float o = (v[k] - mu) * rs;
            if (w) o = o * cuda_io<T>::load(w[j]);
            if (b) o = o + cuda_io<T>::load(b[j]);
            const T t = cuda_io<T>::store(o);
            yr[j] = t;
            if (S) acc_stored(acc, cuda_io<T>::load(t), f.lim);
        }
        if (threadIdx.x == 0) {
            mean[r] = mu;
            rstd[r] = rs;
        }
    }
    cuda_fuse_end<S>(f, acc);
}

// Whether a row's tensors share one floating dtype (NULL ones aside) and a row fits ROW_K values
// a thread: the typed kernels.
static bool row_typed(int64_t C, amp_dtype dt, std::initializer_list<const amp_tensor_t *> ts) {
    if (!amp_dtype_is_float(dt) || C > ROW_K * norm_block(C)) return false;
    for (const amp_tensor_t *t : ts)
        if (t && t->dtype != dt) return false;
    return true;
}

void cuda_layer_norm(void *bctx, amp_tensor_t *y, amp_tensor_t *mean, amp_tensor_t *rstd,
                     const amp_tensor_t *x, const amp_tensor_t *w, const amp_tensor_t *b,
                     float eps) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(x);
    CUDA_ASSERT_FLOAT(y);
    const int64_t C = x->ndim > 0 ? x->shape[x->ndim - 1] : 1, n = cuda_numel(x);
    const int64_t rows = C > 0 ? n / C : 0;
    AMP_ASSERT(cuda_numel(y) == n);
    AMP_ASSERT(mean->dtype == AMP_DTYPE_F32 && cuda_numel(mean) == rows);
    AMP_ASSERT(rstd->dtype == AMP_DTYPE_F32 && cuda_numel(rstd) == rows);
    AMP_ASSERT(!w || cuda_numel(w) == C, "(weight must have %lld elements)", (long long)C);
    AMP_ASSERT(!b || cuda_numel(b) == C, "(bias must have %lld elements)", (long long)C);
    if (rows == 0) return;
    AMP_ASSERT(rows <= INT32_MAX);
    const cuda_fuse f = cuda_fuse_take(y);
    const unsigned grid = (unsigned)rows;
    if (row_typed(C, y->dtype, {x, w, b})) {
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            auto kernel = layer_norm_row_kernel<true, T>;
            CUDA_FUSE_DISPATCH(
                f, S,
                layer_norm_row_kernel<S, T>
                <<<cuda_fuse_grid(f, grid, norm_block(C), kernel), norm_block(C), 0, c->stream>>>(
                    (T *)amp_tensor_ptr(y), (float *)amp_tensor_ptr(mean),
                    (float *)amp_tensor_ptr(rstd), (const T *)amp_tensor_ptr(x),
                    w ? (const T *)amp_tensor_ptr(w) : NULL,
                    b ? (const T *)amp_tensor_ptr(b) : NULL, eps, rows, (int)C, f));
        });
        CUDA_LAUNCH_CHECK();
        return;
    }
    CUDA_FUSE_DISPATCH(
        f, S,
        layer_norm_kernel<S><<<cuda_fuse_grid(f, grid, norm_block(C), layer_norm_kernel<S>),
                               norm_block(C), 0, c->stream>>>(
            amp_tensor_ptr(y), y->dtype, (float *)amp_tensor_ptr(mean),
            (float *)amp_tensor_ptr(rstd), amp_tensor_ptr(x), x->dtype,
            w ? amp_tensor_ptr(w) : NULL, w ? w->dtype : AMP_DTYPE_F32,
            b ? amp_tensor_ptr(b) : NULL, b ? b->dtype : AMP_DTYPE_F32, eps, rows, C, f));
    CUDA_LAUNCH_CHECK();
}

template <bool S>
__global__ void layer_norm_dx_kernel(void *dx, amp_dtype dxt, const void *dy, amp_dtype dyt,
                                     const void *x, amp_dtype xt, const float *mean,
                                     const float *rstd, const void *w, amp_dtype wt, int64_t rows,
                                     int64_t C, cuda_fuse fs) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * C;
        const float mu = mean[r], rs = rstd[r];
        float s1 = 0.0f, s2 = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float g = cuda_load(dyt, dy, base + j) * (w ? cuda_load(wt, w, j) : 1.0f);
            const float xh = (cuda_load(xt, x, base + j) - mu) * rs;
            s1 += g;
            s2 += g * xh;
        }
        s1 = cuda_block_sum(s1);
        s2 = cuda_block_sum(s2);
        const float fC = (float)C, term = (1.0f / fC) * rs;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float wv = w ? cuda_load(wt, w, j) : 1.0f;
            const float xh = (cuda_load(xt, x, base + j) - mu) * rs;
            float f = fC * wv * cuda_load(dyt, dy, base + j);
            f -= xh * s2;
            f -= s1;
            cuda_store(dxt, dx, base + j, f * term);
            if (S) acc_stored(acc, amp_rounded(dxt, f * term), fs.lim);
        }
    }
    cuda_fuse_end<S>(fs, acc);
}

// dx for one dtype (dy's G: T's, or a narrower one that a widening cast handed on), dy's and x's
// row in registers.
template <bool S, typename T, typename G>
__global__ void layer_norm_dx_row_kernel(T *__restrict__ dx, const G *__restrict__ dy,
                                         const T *__restrict__ x, const float *mean,
                                         const float *rstd, const T *w, int64_t rows, int C,
                                         cuda_fuse fs) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * C;
        const float mu = mean[r], rs = rstd[r];
        float gy[ROW_K], xh[ROW_K], s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < ROW_K; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            gy[k] = xh[k] = 0.0f;
            if (j >= C) continue;
            gy[k] = cuda_io<G>::load(dy[base + j]);
            xh[k] = (cuda_io<T>::load(x[base + j]) - mu) * rs;
            const float g = gy[k] * (w ? cuda_io<T>::load(w[j]) : 1.0f);
            s1 += g;
            s2 += g * xh[k];
        }
        s1 = cuda_block_sum(s1);
        s2 = cuda_block_sum(s2);
        const float fC = (float)C, term = (1.0f / fC) * rs;
#pragma unroll
        for (int k = 0; k < ROW_K; k++) {
            const int j = threadIdx.x + k * blockDim.x;
            if (j >= C) break;
            const float wv = w ? cuda_io<T>::load(w[j]) : 1.0f;
            float f = fC * wv * gy[k];
            f -= xh[k] * s2;
            f -= s1;
            const T t = cuda_io<T>::store(f * term);
            dx[base + j] = t;
            if (S) acc_stored(acc, cuda_io<T>::load(t), fs.lim);
        }
    }
    cuda_fuse_end<S>(fs, acc);
}

// partial[chunk][0 or 1][col]: sums of dy * x_hat and dy over the chunk's rows, in row order,
// with the loads of four rows in flight together (a thread per column walks down its rows).
template <typename G, typename X>
__global__ void layer_norm_dwdb_kernel(float *partial, const G *__restrict__ dy,
                                       const X *__restrict__ x, const float *mean,
                                       const float *rstd, int64_t rows, int64_t C,
                                       int64_t rows_per_chunk) {
    constexpr int U = 4;
    const int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= C) return;
    const int64_t r0 = blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float sw = 0.0f, sb = 0.0f;
    int64_t r = r0;
    for (; r + U <= r1; r += U) {
        float g[U], xv[U];
#pragma unroll
        for (int k = 0; k < U; k++) {
            g[k] = cuda_io<G>::load(dy[(r + k) * C + col]);
            xv[k] = cuda_io<X>::load(x[(r + k) * C + col]);
        }
#pragma unroll
        for (int k = 0; k < U; k++) {
            sw += g[k] * ((xv[k] - mean[r + k]) * rstd[r + k]);
            sb += g[k];
        }
    }
    for (; r < r1; r++) {
        const float g = cuda_io<G>::load(dy[r * C + col]);
        sw += g * ((cuda_io<X>::load(x[r * C + col]) - mean[r]) * rstd[r]);
        sb += g;
    }
    partial[(blockIdx.y * 2) * C + col] = sw;
    partial[(blockIdx.y * 2 + 1) * C + col] = sb;
}

__global__ void layer_norm_dwdb_finish_kernel(void *dw, amp_dtype dwt, void *db, amp_dtype dbt,
                                              const float *partial, int chunks, int64_t C) {
    const int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sw += partial[(2 * k) * C + col];
        sb += partial[(2 * k + 1) * C + col];
    }
    if (dw) cuda_store(dwt, dw, col, sw);
    if (db) cuda_store(dbt, db, col, sb);
}

void cuda_layer_norm_backward(void *bctx, amp_tensor_t *dx, amp_tensor_t *dw, amp_tensor_t *db,
                              const amp_tensor_t *dy, const amp_tensor_t *x,
                              const amp_tensor_t *mean, const amp_tensor_t *rstd,
                              const amp_tensor_t *w) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dx);
    CUDA_ASSERT_CONTIGUOUS(dy);
    CUDA_ASSERT_CONTIGUOUS(x);
    CUDA_ASSERT_FLOAT(dx);
    const int64_t C = x->ndim > 0 ? x->shape[x->ndim - 1] : 1, n = cuda_numel(x);
    const int64_t rows = C > 0 ? n / C : 0;
    AMP_ASSERT(cuda_numel(dx) == n && cuda_numel(dy) == n);
    AMP_ASSERT(mean->dtype == AMP_DTYPE_F32 && cuda_numel(mean) == rows);
    AMP_ASSERT(rstd->dtype == AMP_DTYPE_F32 && cuda_numel(rstd) == rows);
    AMP_ASSERT(!w || cuda_numel(w) == C);
    AMP_ASSERT(!dw || cuda_numel(dw) == C);
    AMP_ASSERT(!db || cuda_numel(db) == C);
    if (C == 0) return;
    const float *mp = (const float *)amp_tensor_ptr(mean),
                *rp = (const float *)amp_tensor_ptr(rstd);
    if (rows > 0) {
        AMP_ASSERT(rows <= INT32_MAX);
        const cuda_fuse f = cuda_fuse_take(dx);
        const unsigned grid = (unsigned)rows;
        if (row_typed(C, dx->dtype, {x, w}) && amp_dtype_is_float(dy->dtype) &&
            amp_dtype_size(dy->dtype) <= amp_dtype_size(dx->dtype)) {
            CUDA_DISPATCH_FLOAT(
                dx->dtype, T, CUDA_DISPATCH_FLOAT(dy->dtype, D, {
                    // (dy is never wider here: only the instances with a dy no wider are compiled)
                    using G = std::conditional_t<sizeof(D) <= sizeof(T), D, T>;
                    auto kernel = layer_norm_dx_row_kernel<true, T, G>;
                    CUDA_FUSE_DISPATCH(
                        f, S,
                        layer_norm_dx_row_kernel<S, T, G>
                        <<<cuda_fuse_grid(f, grid, norm_block(C), kernel), norm_block(C), 0,
                           c->stream>>>((T *)amp_tensor_ptr(dx), (const G *)amp_tensor_ptr(dy),
                                        (const T *)amp_tensor_ptr(x), mp, rp,
                                        w ? (const T *)amp_tensor_ptr(w) : NULL, rows, (int)C, f));
                }));
        } else {
            CUDA_FUSE_DISPATCH(
                f, S,
                layer_norm_dx_kernel<S>
                <<<cuda_fuse_grid(f, grid, norm_block(C), layer_norm_dx_kernel<S>), norm_block(C),
                   0, c->stream>>>(amp_tensor_ptr(dx), dx->dtype, amp_tensor_ptr(dy), dy->dtype,
                                   amp_tensor_ptr(x), x->dtype, mp, rp,
                                   w ? amp_tensor_ptr(w) : NULL, w ? w->dtype : AMP_DTYPE_F32, rows,
                                   C, f));
        }
    }
    CUDA_LAUNCH_CHECK();
    if (!dw && !db) return;
    const int64_t col_blocks = (C + 255) / 256;
    int64_t per; // a few waves of blocks
    const int chunks =
        (int)cuda_split(rows, (4 * cuda_sm_count() + col_blocks - 1) / col_blocks, rows, &per);
    float *partial = (float *)cuda_scratch(c, (size_t)chunks * 2 * (size_t)C * sizeof(float));
    CUDA_DISPATCH_FLOAT(
        dy->dtype, G, CUDA_DISPATCH_FLOAT(x->dtype, X, {
            layer_norm_dwdb_kernel<G, X>
                <<<dim3((unsigned)col_blocks, (unsigned)chunks), 256, 0, c->stream>>>(
                    partial, (const G *)amp_tensor_ptr(dy), (const X *)amp_tensor_ptr(x), mp, rp,
                    rows, C, per);
        }));
    CUDA_LAUNCH_CHECK();
    layer_norm_dwdb_finish_kernel<<<(unsigned)col_blocks, 256, 0, c->stream>>>(
        dw ? amp_tensor_ptr(dw) : NULL, dw ? dw->dtype : AMP_DTYPE_F32,
        db ? amp_tensor_ptr(db) : NULL, db ? db->dtype : AMP_DTYPE_F32, partial, chunks, C);
    CUDA_LAUNCH_CHECK();
}
