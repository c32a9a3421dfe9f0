/*
 * cuda-softmax.cu — softmax / log_softmax over the last dim and their backward, and nll_loss
 * (mean reduction) with its backward: the pieces of cross-entropy.
 *
 * A block per row (striding over the rows when the instrumentation caps the grid to add the
 * output's statistics as it is stored, cuda-fuse.h): max, then the f32 sum of exp(x - max),
 * then the store (log_softmax is x - (max + log(sum)), as the CPU and PyTorch compute it). A masked
 * (-inf) entry gives exactly 0; an all -inf row gives NaN, like PyTorch. nll_loss never leaves the
 * device: the loss and its gradient read dloss there, so there is no host sync in the loss.
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

#include <math.h>

template <bool S, typename TX, typename TY>
__global__ void softmax_kernel(bool log, TY *__restrict__ y, const TX *__restrict__ x, int64_t rows,
                               int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TX *xr = x + r * C;
        TY *yr = y + r * C;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            mx = fmaxf(mx, cuda_io<TX>::load(xr[j]));
        mx = cuda_block_max(mx);
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
            s += expf(cuda_io<TX>::load(xr[j]) - mx);
        s = cuda_block_sum(s);
        const float logsum = mx + logf(s);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float v = cuda_io<TX>::load(xr[j]);
            const TY o = cuda_io<TY>::store(log ? v - logsum : expf(v - mx) / s);
            yr[j] = o;
            if (S) acc_stored(acc, cuda_io<TY>::load(o), f.lim);
        }
    }
    cuda_fuse_end<S>(f, acc);
}

// The same for rows of at most 8 * blockDim.x elements, each read once into registers.
template <bool S, typename TX, typename TY>
__global__ void softmax_reg_kernel(bool log, TY *__restrict__ y, const TX *__restrict__ x,
                                   int64_t rows, int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TX *xr = x + r * C;
        TY *yr = y + r * C;
        float v[8];
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            v[k] = j < C ? cuda_io<TX>::load(xr[j]) : -INFINITY;
            mx = fmaxf(mx, v[k]);
        }
        mx = cuda_block_max(mx);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (threadIdx.x + (int64_t)k * blockDim.x < C) s += expf(v[k] - mx);
        s = cuda_block_sum(s);
        const float logsum = mx + logf(s);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int64_t j = threadIdx.x + (int64_t)k * blockDim.x;
            if (j < C) {
                const TY o = cuda_io<TY>::store(log ? v[k] - logsum : expf(v[k] - mx) / s);
                yr[j] = o;
                if (S) acc_stored(acc, cuda_io<TY>::load(o), f.lim);
            }
        }
    }
    cuda_fuse_end<S>(f, acc);
}

static int row_block(int64_t C) {
    return C <= 128 ? 32 : C <= 512 ? 128 : C <= 2048 ? 256 : 512;
}

void cuda_softmax(void *bctx, bool log, amp_tensor_t *y, const amp_tensor_t *x) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(x);
    CUDA_ASSERT_FLOAT(y);
    CUDA_ASSERT_FLOAT(x);
    const int64_t C = x->ndim > 0 ? x->shape[x->ndim - 1] : 1, n = cuda_numel(x);
    AMP_ASSERT(cuda_numel(y) == n && (y->ndim > 0 ? y->shape[y->ndim - 1] : 1) == C);
    if (n == 0 || C == 0) return;
    const int64_t rows = n / C;
    AMP_ASSERT(rows <= INT32_MAX);
    const int block = row_block(C);
    const cuda_fuse f = cuda_fuse_take(y);
    const unsigned grid = (unsigned)rows;
    CUDA_DISPATCH_FLOAT(
        x->dtype, TX, CUDA_DISPATCH_FLOAT(y->dtype, TY, {
            TY *yp = (TY *)amp_tensor_ptr(y);
            const TX *xp = (const TX *)amp_tensor_ptr(x);
            CUDA_FUSE_DISPATCH(f, S, {
                if (C <= 8 * block)
                    softmax_reg_kernel<S, TX, TY>
                        <<<cuda_fuse_grid(f, grid, block, softmax_reg_kernel<S, TX, TY>), block, 0,
                           c->stream>>>(log, yp, xp, rows, C, f);
                else
                    softmax_kernel<S, TX, TY>
                        <<<cuda_fuse_grid(f, grid, block, softmax_kernel<S, TX, TY>), block, 0,
                           c->stream>>>(log, yp, xp, rows, C, f);
            });
        }));
    CUDA_LAUNCH_CHECK();
}

// dx from dy and y, typed (under autocast softmax runs in f32 while dx is f16/bf16).
template <bool S, typename TDX, typename TG, typename TY>
__global__ void softmax_backward_kernel(bool log, TDX *__restrict__ dx, const TG *__restrict__ dy,
                                        const TY *__restrict__ y, int64_t rows, int64_t C,
                                        cuda_fuse f) {
    thread_acc acc = acc_empty();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * C;
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float g = cuda_io<TG>::load(dy[base + j]);
            s += log ? g : g * cuda_io<TY>::load(y[base + j]);
        }
        s = cuda_block_sum(s);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float g = cuda_io<TG>::load(dy[base + j]), yv = cuda_io<TY>::load(y[base + j]);
            const TDX o = cuda_io<TDX>::store(log ? g - expf(yv) * s : yv * (g - s));
            dx[base + j] = o;
            if (S) acc_stored(acc, cuda_io<TDX>::load(o), f.lim);
        }
    }
    cuda_fuse_end<S>(f, acc);
}

void cuda_softmax_backward(void *bctx, bool log, amp_tensor_t *dx, const amp_tensor_t *dy,
                           const amp_tensor_t *y) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dx);
    CUDA_ASSERT_CONTIGUOUS(dy);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_FLOAT(dx);
    const int64_t C = y->ndim > 0 ? y->shape[y->ndim - 1] : 1, n = cuda_numel(y);
    AMP_ASSERT(cuda_numel(dx) == n && cuda_numel(dy) == n);
    if (n == 0 || C == 0) return;
    CUDA_ASSERT_FLOAT(dy);
    CUDA_ASSERT_FLOAT(y);
    const int64_t rows = n / C;
    AMP_ASSERT(rows <= INT32_MAX);
    const cuda_fuse f = cuda_fuse_take(dx);
    const unsigned grid = (unsigned)rows;
    CUDA_DISPATCH_FLOAT(
        dx->dtype, TDX,
        CUDA_DISPATCH_FLOAT(dy->dtype, TG, CUDA_DISPATCH_FLOAT(y->dtype, TY, {
                                CUDA_FUSE_DISPATCH(
                                    f, S,
                                    softmax_backward_kernel<S, TDX, TG, TY>
                                    <<<cuda_fuse_grid(f, grid, row_block(C),
                                                      softmax_backward_kernel<S, TDX, TG, TY>),
                                       row_block(C), 0, c->stream>>>(log, (TDX *)amp_tensor_ptr(dx),
                                                                     (const TG *)amp_tensor_ptr(dy),
                                                                     (const TY *)amp_tensor_ptr(y),
                                                                     rows, C, f));
                            })));
    CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------
// nll_loss: one block sums -logp[r, target[r]]; an out-of-range target gives a NaN loss (the
// device cannot abort the host; the CPU backend asserts).

__global__ void nll_loss_kernel(void *loss, amp_dtype lt, const void *logp, amp_dtype pt,
                                const void *target, amp_dtype tt, int64_t N, int64_t C) {
    float s = 0.0f;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        const int64_t t = cuda_load_index(tt, target, r);
        s += (t >= 0 && t < C) ? -cuda_load(pt, logp, r * C + t) : NAN;
    }
    s = cuda_block_sum(s);
    if (threadIdx.x == 0) cuda_store(lt, loss, 0, s / (float)N);
}

void cuda_nll_loss(void *bctx, amp_tensor_t *loss, const amp_tensor_t *logp,
                   const amp_tensor_t *target) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(logp);
    CUDA_ASSERT_CONTIGUOUS(target);
    AMP_ASSERT(logp->ndim == 2 && cuda_numel(target) == logp->shape[0] && cuda_numel(loss) == 1);
    AMP_ASSERT(target->dtype == AMP_DTYPE_I32 || target->dtype == AMP_DTYPE_I64);
    nll_loss_kernel<<<1, 1024, 0, c->stream>>>(
        amp_tensor_ptr(loss), loss->dtype, amp_tensor_ptr(logp), logp->dtype,
        amp_tensor_ptr(target), target->dtype, logp->shape[0], logp->shape[1]);
    CUDA_LAUNCH_CHECK();
}

__global__ void nll_loss_backward_kernel(void *dlogp, amp_dtype dt, const void *dloss, amp_dtype lt,
                                         const void *target, amp_dtype tt, int64_t N, int64_t C) {
    const float g = -(cuda_load(lt, dloss, 0) / (float)N);
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < N;
         r += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = cuda_load_index(tt, target, r);
        if (t >= 0 && t < C) cuda_store(dt, dlogp, r * C + t, g);
    }
}

void cuda_nll_loss_backward(void *bctx, amp_tensor_t *dlogp, const amp_tensor_t *dloss,
                            const amp_tensor_t *target) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dlogp);
    CUDA_ASSERT_CONTIGUOUS(target);
    CUDA_ASSERT_FLOAT(dlogp);
    AMP_ASSERT(dlogp->ndim == 2 && cuda_numel(target) == dlogp->shape[0] && cuda_numel(dloss) == 1);
    const int64_t N = dlogp->shape[0], C = dlogp->shape[1];
    cuda_fill(bctx, dlogp, 0.0f);
    if (N == 0) return;
    nll_loss_backward_kernel<<<cuda_grid(N, 256), 256, 0, c->stream>>>(
        amp_tensor_ptr(dlogp), dlogp->dtype, amp_tensor_ptr(dloss), dloss->dtype,
        amp_tensor_ptr(target), target->dtype, N, C);
    CUDA_LAUNCH_CHECK();
}
