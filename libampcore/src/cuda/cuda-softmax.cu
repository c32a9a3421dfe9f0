/*
 * cuda-softmax.cu — softmax / log_softmax over the last dim and their backward, and nll_loss
 * (mean reduction) with its backward: the pieces of cross-entropy.
 *
 * A warp per row for rows of up to 1024 elements (attention's rows: each element read once into
 * registers, where softmax keeps its exp from the sum to the store; warp shuffles for the max and
 * the sum, several rows per block), a block per row for longer ones (held in registers up to 16
 * values a thread: a vocabulary's logits); both stride over the rows when the instrumentation caps
 * the grid to add the output's statistics as it is stored (cuda-fuse.h): max, then the f32 sum of
 * exp(x - max), then the store (log_softmax is x - max - log(sum), as the CPU and PyTorch compute
 * it). A masked (-inf) entry gives exactly 0; an all -inf row gives NaN, like PyTorch. nll_loss
 * never leaves the device: the loss and its gradient read dloss there, so there is no host sync in
 * the loss. It has PyTorch's defaults: the mean over the rows whose target is not -100
 * (ignore_index), NaN when all are; the backward counts those rows again in its one launch.
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

#include <math.h>

#include <type_traits>

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
        const float logsum = logf(s);
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
            const float v = cuda_io<TX>::load(xr[j]);
            const TY o = cuda_io<TY>::store(log ? v - mx - logsum : expf(v - mx) / s);
            yr[j] = o;
            if (S) acc_stored(acc, cuda_io<TY>::load(o), f.lim);
        }
    }
    cuda_fuse_end<S>(f, acc);
}

// The same for rows of at most E * B elements (B threads a block), each read once into registers:
// the same sums in the same order, the thread's values at fixed offsets from its first.
template <bool S, typename TX, typename TY, int E, int B>
__global__ void __launch_bounds__(B)
    softmax_reg_kernel(bool log, TY *__restrict__ y, const TX *__restrict__ x, int64_t rows,
                       int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    const int n = (int)C - (int)threadIdx.x; // this thread's values: those of k * B < n
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TX *xr = x + r * C + threadIdx.x;
        TY *yr = y + r * C + threadIdx.x;
        float v[E];
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < E; k++) {
            v[k] = k * B < n ? cuda_io<TX>::load(xr[k * B]) : -INFINITY;
            mx = fmaxf(mx, v[k]);
        }
        mx = cuda_block_max(mx);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < E; k++)
            if (k * B < n) {
                const float e = expf(v[k] - mx);
                s += e;
                if (!log) v[k] = e; // softmax divides it by the sum: computed once
            }
        s = cuda_block_sum(s);
        const float logsum = logf(s);
#pragma unroll
        for (int k = 0; k < E; k++)
            if (k * B < n) {
                const TY o = cuda_io<TY>::store(log ? v[k] - mx - logsum : v[k] / s);
                yr[k * B] = o;
                if (S) acc_stored(acc, cuda_io<TY>::load(o), f.lim);
            }
    }
    cuda_fuse_end<S>(f, acc);
}

// Rows of at most 32 * E elements: a warp per row (WARP_ROWS_BLOCK / 32 rows per block), lane l
// holding elements l, l + 32, ...
#define WARP_ROWS_MAX 1024
#define WARP_ROWS_BLOCK 256

// The row a warp works on first, and the step to its next (every lane agrees).
#define FOR_WARP_ROW(r, rows)                                                                      \
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < (rows);       \
         r += (int64_t)gridDim.x * (blockDim.x / 32))

// A lane's E values of a row (lane + 32 k, those below C) into st: 16 bytes at a time when the
// lane holds all E (`whole`), one by one otherwise.
template <bool S, typename T, int E>
__device__ __forceinline__ void lane_stats(stored_stats<S, T> &st, stats_limits lim,
                                           const T (&v)[E], bool whole, int lane, int64_t C) {
    constexpr int V = 16 / sizeof(T);
    if constexpr (E % V == 0)
        if (whole) {
#pragma unroll
            for (int k = 0; k < E; k += V)
                st.values(v + k, lim);
            return;
        }
#pragma unroll
    for (int k = 0; k < E; k++)
        if (lane + 32 * k < C) st.value(v[k], lim);
}

template <bool S, typename TX, typename TY, int E>
__global__ void softmax_warp_kernel(bool log, TY *__restrict__ y, const TX *__restrict__ x,
                                    int64_t rows, int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    const int lane = threadIdx.x & 31;
    FOR_WARP_ROW(r, rows) {
        const TX *xr = x + r * C;
        TY *yr = y + r * C;
        float v[E];
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t j = lane + 32 * k;
            v[k] = j < C ? cuda_io<TX>::load(xr[j]) : -INFINITY;
            mx = fmaxf(mx, v[k]);
        }
        mx = cuda_warp_max(mx);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < E; k++)
            if (lane + 32 * k < C) {
                const float e = expf(v[k] - mx);
                s += e;
                if (!log) v[k] = e; // softmax divides it by the sum: computed once
            }
        s = cuda_warp_sum(s);
        const float logsum = logf(s);
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t j = lane + 32 * k;
            if (j < C) {
                const TY o = cuda_io<TY>::store(log ? v[k] - mx - logsum : v[k] / s);
                yr[j] = o;
                if (S) acc_stored(acc, cuda_io<TY>::load(o), f.lim);
            }
        }
    }
    cuda_fuse_end<S>(f, acc);
}

// Runs `launch` (a generic lambda taking E as a compile-time constant) with the smallest of a
// few register widths that holds a row of C elements.
template <typename F> static void warp_rows_dispatch(int64_t C, F launch) {
    if (C <= 128)
        launch(std::integral_constant<int, 4>());
    else if (C <= 512)
        launch(std::integral_constant<int, 16>());
    else
        launch(std::integral_constant<int, 32>());
}

// Runs `launch` for a block per row of C elements (rows longer than WARP_ROWS_MAX) with the
// values E a thread holds of the row and the threads B a block: E 0 for a row too long to hold.
template <typename F> static void row_blocks_dispatch(int64_t C, F launch) {
    using std::integral_constant;
    if (C <= 8 * 256)
        launch(integral_constant<int, 8>(), integral_constant<int, 256>());
    else if (C <= 8 * 512)
        launch(integral_constant<int, 8>(), integral_constant<int, 512>());
    else if (C <= 16 * 512) // a vocabulary of 8192
        launch(integral_constant<int, 16>(), integral_constant<int, 512>());
    else
        launch(integral_constant<int, 0>(), integral_constant<int, 512>());
}

static unsigned warp_rows_grid(int64_t rows) {
    return (unsigned)((rows + WARP_ROWS_BLOCK / 32 - 1) / (WARP_ROWS_BLOCK / 32));
}

template <typename TX, typename TY>
static void softmax_launch(cuda_ctx *c, bool log, const cuda_fuse &f, TY *y, const TX *x,
                           int64_t rows, int64_t C) {
    if (C <= WARP_ROWS_MAX) {
        const unsigned grid = warp_rows_grid(rows);
        warp_rows_dispatch(C, [&](auto e) {
            constexpr int E = decltype(e)::value;
            CUDA_FUSE_DISPATCH(
                f, S,
                softmax_warp_kernel<S, TX, TY, E>
                <<<cuda_fuse_grid(f, grid, WARP_ROWS_BLOCK, softmax_warp_kernel<S, TX, TY, E>),
                   WARP_ROWS_BLOCK, 0, c->stream>>>(log, y, x, rows, C, f));
        });
        return;
    }
    row_blocks_dispatch(C, [&](auto e, auto b) {
        constexpr int E = decltype(e)::value, B = decltype(b)::value;
        CUDA_FUSE_DISPATCH(f, S, {
            if constexpr (E > 0)
                softmax_reg_kernel<S, TX, TY, E, B>
                    <<<cuda_fuse_grid(f, (unsigned)rows, B, softmax_reg_kernel<S, TX, TY, E, B>), B,
                       0, c->stream>>>(log, y, x, rows, C, f);
            else
                softmax_kernel<S, TX, TY>
                    <<<cuda_fuse_grid(f, (unsigned)rows, B, softmax_kernel<S, TX, TY>), B, 0,
                       c->stream>>>(log, y, x, rows, C, f);
        });
    });
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
    const cuda_fuse f = cuda_fuse_take(y);
    CUDA_DISPATCH_FLOAT(x->dtype, TX, CUDA_DISPATCH_FLOAT(y->dtype, TY, {
                            softmax_launch(c, log, f, (TY *)amp_tensor_ptr(y),
                                           (const TX *)amp_tensor_ptr(x), rows, C);
                        }));
    CUDA_LAUNCH_CHECK();
}

// One value of the backward: dx from dy's g and y's value, given the row's sum s (log_softmax: of
// g; softmax: of g * y), the same in every kernel below.
__device__ __forceinline__ float softmax_dx(bool log, float g, float y, float s) {
    return log ? g - expf(y) * s : y * (g - s);
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
            const TDX o = cuda_io<TDX>::store(softmax_dx(log, g, yv, s));
            dx[base + j] = o;
            if (S) acc_stored(acc, cuda_io<TDX>::load(o), f.lim);
        }
    }
    cuda_fuse_end<S>(f, acc);
}

// The same for rows of at most E * B elements, dy and y each read once into registers (the same
// sums in the same order).
template <bool S, typename TDX, typename TG, typename TY, int E, int B>
__global__ void __launch_bounds__(B)
    softmax_backward_reg_kernel(bool log, TDX *__restrict__ dx, const TG *__restrict__ dy,
                                const TY *__restrict__ y, int64_t rows, int64_t C, cuda_fuse f) {
    thread_acc acc = acc_empty();
    const int n = (int)C - (int)threadIdx.x; // this thread's values: those of k * B < n
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = r * C + threadIdx.x;
        float g[E], yv[E];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < E; k++)
            if (k * B < n) {
                g[k] = cuda_io<TG>::load(dy[base + k * B]);
                yv[k] = cuda_io<TY>::load(y[base + k * B]);
                s += log ? g[k] : g[k] * yv[k];
            }
        s = cuda_block_sum(s);
#pragma unroll
        for (int k = 0; k < E; k++)
            if (k * B < n) {
                const TDX o = cuda_io<TDX>::store(softmax_dx(log, g[k], yv[k], s));
                dx[base + k * B] = o;
                if (S) acc_stored(acc, cuda_io<TDX>::load(o), f.lim);
            }
    }
    cuda_fuse_end<S>(f, acc);
}

// The same, a warp per row of at most 32 * E elements. Its statistics go 16 bytes of registers at a
// time (16-bit values in pairs, cuda-fuse.h) where the lane holds E values of every row: dx's, and
// dy's when they are held for it (fi: attention's softmax, whose dy a GEMM wrote and only this
// kernel reads whole). The statistics instance of 16 values a lane is held to 80 registers: three
// blocks a multiprocessor, as with dx's numbers alone.
template <bool S, typename TDX, typename TG, typename TY, int E>
__global__ void __launch_bounds__(WARP_ROWS_BLOCK, (S && E == 16) ? 3 : 1)
    softmax_backward_warp_kernel(bool log, TDX *__restrict__ dx, const TG *__restrict__ dy,
                                 const TY *__restrict__ y, int64_t rows, int64_t C, cuda_fuse f,
                                 cuda_fuse fi) {
    stored_stats<S, TDX> st(f);
    stored_stats<S, TG> sti(fi);
    const int lane = threadIdx.x & 31;
    const bool whole = lane + 32 * (E - 1) < C;
    FOR_WARP_ROW(r, rows) {
        const int64_t base = r * C;
        TG g[E];
        float yv[E];
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t j = lane + 32 * k;
            g[k] = j < C ? dy[base + j] : cuda_io<TG>::store(0.0f);
            yv[k] = j < C ? cuda_io<TY>::load(y[base + j]) : 0.0f;
            s += log ? cuda_io<TG>::load(g[k]) : cuda_io<TG>::load(g[k]) * yv[k];
        }
        if (S) lane_stats(sti, fi.lim, g, whole, lane, C);
        s = cuda_warp_sum(s);
        constexpr int V = 16 / sizeof(TDX), G = E % V == 0 ? V : 1; // dx's values a group
#pragma unroll
        for (int k0 = 0; k0 < E; k0 += G) {
            TDX o[G];
#pragma unroll
            for (int k = k0; k < k0 + G; k++) {
                const int64_t j = lane + 32 * k;
                const float gk = cuda_io<TG>::load(g[k]);
                o[k - k0] = cuda_io<TDX>::store(softmax_dx(log, gk, yv[k], s));
                if (j < C) dx[base + j] = o[k - k0];
            }
            if (S) lane_stats(st, f.lim, o, whole, lane + 32 * k0, C);
        }
    }
    st.end(f);
    sti.end(fi);
}

template <typename TDX, typename TG, typename TY>
static void softmax_backward_launch(cuda_ctx *c, bool log, const cuda_fuse &f, const cuda_fuse &fi,
                                    TDX *dx, const TG *dy, const TY *y, int64_t rows, int64_t C) {
    if (C <= WARP_ROWS_MAX) {
        const unsigned grid = warp_rows_grid(rows);
        warp_rows_dispatch(C, [&](auto e) {
            constexpr int E = decltype(e)::value;
            CUDA_FUSE_DISPATCH2(f, fi, S, {
                auto kernel = softmax_backward_warp_kernel<S, TDX, TG, TY, E>;
                kernel<<<cuda_fuse_grid(f, fi, grid, WARP_ROWS_BLOCK, kernel), WARP_ROWS_BLOCK, 0,
                         c->stream>>>(log, dx, dy, y, rows, C, f, fi);
            });
        });
        return;
    }
    row_blocks_dispatch(C, [&](auto e, auto b) {
        constexpr int E = decltype(e)::value, B = decltype(b)::value;
        CUDA_FUSE_DISPATCH(f, S, {
            if constexpr (E > 0)
                softmax_backward_reg_kernel<S, TDX, TG, TY, E, B>
                    <<<cuda_fuse_grid(f, (unsigned)rows, B,
                                      softmax_backward_reg_kernel<S, TDX, TG, TY, E, B>),
                       B, 0, c->stream>>>(log, dx, dy, y, rows, C, f);
            else
                softmax_backward_kernel<S, TDX, TG, TY>
                    <<<cuda_fuse_grid(f, (unsigned)rows, B,
                                      softmax_backward_kernel<S, TDX, TG, TY>),
                       B, 0, c->stream>>>(log, dx, dy, y, rows, C, f);
        });
    });
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
    // dy's held numbers, where a warp per row adds them (a block per row runs slower with them than
    // the statistics kernel takes to read dy)
    const cuda_fuse fi = C <= WARP_ROWS_MAX ? cuda_fuse_take_input(c, dy) : cuda_fuse{};
    CUDA_DISPATCH_FLOAT(dx->dtype, TDX,
                        CUDA_DISPATCH_FLOAT(dy->dtype, TG, CUDA_DISPATCH_FLOAT(y->dtype, TY, {
                                                softmax_backward_launch(
                                                    c, log, f, fi, (TDX *)amp_tensor_ptr(dx),
                                                    (const TG *)amp_tensor_ptr(dy),
                                                    (const TY *)amp_tensor_ptr(y), rows, C);
                                            })));
    CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------
// nll_loss: one block sums -logp[r, target[r]] and counts the rows (the total weight) over the
// targets that are not AMP_NLL_IGNORE_INDEX; the backward is one block too, counting again before
// it writes (PyTorch's reduced backward is one block as well). Any other target outside [0, C)
// gives a NaN loss, the device cannot abort the host (the CPU backend asserts), and no gradient
// at its row.

__global__ void nll_loss_kernel(void *loss, amp_dtype lt, const void *logp, amp_dtype pt,
                                const void *target, amp_dtype tt, int64_t N, int64_t C) {
    float s = 0.0f, kept = 0.0f; // counts in f32 like PyTorch's total_weight: exact to 2^24 rows
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        const int64_t t = cuda_load_index(tt, target, r);
        if (t == AMP_NLL_IGNORE_INDEX) continue;
        s += (t >= 0 && t < C) ? -cuda_load(pt, logp, r * C + t) : NAN;
        kept += 1.0f;
    }
    s = cuda_block_sum(s);
    kept = cuda_block_sum(kept);
    if (threadIdx.x == 0) cuda_store(lt, loss, 0, s / kept); // 0 / 0: NaN when all are ignored
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

// The statistics of dlogp (f), when wanted, come from the values this kernel writes and the fill's
// zeros around them: each thread counts the C - 1 or C zeros of its rows.
template <bool S>
__global__ void nll_loss_backward_kernel(void *dlogp, amp_dtype dt, const void *dloss, amp_dtype lt,
                                         const void *target, amp_dtype tt, int64_t N, int64_t C,
                                         cuda_fuse f) {
    float kept = 0.0f;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x)
        kept += cuda_load_index(tt, target, r) != AMP_NLL_IGNORE_INDEX ? 1.0f : 0.0f;
    kept = cuda_block_sum(kept);
    const float g = -(cuda_load(lt, dloss, 0) / kept);
    thread_acc a = acc_empty();
    int64_t zeros = 0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
        const int64_t t = cuda_load_index(tt, target, r);
        const bool in = t >= 0 && t < C;
        if (in) cuda_store(dt, dlogp, r * C + t, g);
        if (S && in) acc_stored(a, amp_rounded(dt, g), f.lim);
        zeros += in ? C - 1 : C;
    }
    if (S && zeros > 0) {
        a.zero += (unsigned)zeros;
        if (0.0f < f.lim.min_normal) a.small += (unsigned)zeros;
        a.mn = fminf(a.mn, 0.0f);
        a.mx = fmaxf(a.mx, 0.0f);
    }
    cuda_fuse_end<S>(f, a);
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
    // (a thread's 32-bit counts hold its rows' values: N C / 1024 of them; no values, no numbers
    // to add: the instrumentation's own launch gives an empty tensor's)
    const bool fuse = C > 0 && N * C < ((int64_t)1 << 40);
    const cuda_fuse f = fuse ? cuda_fuse_take(dlogp) : cuda_fuse{NULL, 0, {}};
    CUDA_FUSE_DISPATCH(f, S,
                       nll_loss_backward_kernel<S><<<1, 1024, 0, c->stream>>>(
                           amp_tensor_ptr(dlogp), dlogp->dtype, amp_tensor_ptr(dloss), dloss->dtype,
                           amp_tensor_ptr(target), target->dtype, N, C, f));
    CUDA_LAUNCH_CHECK();
}
