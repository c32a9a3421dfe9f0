/*
 * cuda-binary.cu — broadcasting binary arithmetic, masked_fill and the dropout mask.
 *
 * Operands arrive as views already expanded to the output's shape (stride 0 on broadcast dims);
 * the strided iterator merges what it can, and the all-contiguous one-dtype case (residual adds,
 * gradient accumulation) runs a 16-bytes-per-thread typed kernel, as does a tensor plus a value
 * per channel (a convolution's bias: one value for each run of a vector or more). The dropout
 * mask draws from the same counter-based RNG as the CPU backend (splitmix64 of seed and element
 * index), so both backends produce the same mask. Binary ops and masked_fill add the statistics
 * of what they store when the instrumentation asks (cuda-fuse.h), and an add those of an operand
 * whose statistics wait (cuda_ctx.held).
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

__device__ __forceinline__ float binary_f(amp_binary_op op, float a, float b) {
    switch (op) {
    case AMP_BINARY_ADD:
        return a + b;
    case AMP_BINARY_SUB:
        return a - b;
    case AMP_BINARY_MUL:
        return a * b;
    case AMP_BINARY_DIV:
        return a / b;
    }
    return a;
}

// y_linear: y is contiguous (element i at i), else a slice stored through its strides. The
// statistics of y (f) and of operand `fi_of` (1: a, 2: b; contiguous, read whole: fi) as they go.
template <bool S>
__global__ void binary_kernel(amp_binary_op op, void *y, amp_dtype yt, const void *a, amp_dtype at,
                              const void *b, amp_dtype bt, cuda_iter it, int64_t n, bool y_linear,
                              cuda_fuse f, cuda_fuse fi, int fi_of) {
    thread_acc acc = acc_empty(), acci = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float av = cuda_load(at, a, cuda_iter_offset(it, 1, i));
        const float bv = cuda_load(bt, b, cuda_iter_offset(it, 2, i));
        const float v = binary_f(op, av, bv);
        cuda_store(yt, y, y_linear ? i : cuda_iter_offset(it, 0, i), v);
        if (S && f.slot) acc_stored(acc, amp_rounded(yt, v), f.lim);
        if (S && fi.slot) acc_value<false>(acci, fi_of == 1 ? av : bv, fi.lim);
    }
    cuda_fuse_end<S>(f, acc);
    cuda_fuse_end<S>(fi, acci);
}

// y (f32) = a op b, all contiguous, a and b of any floating dtypes (the residual add of an f32
// stream and a 16-bit branch under autocast): the generic kernel's arithmetic, indexed directly
// and loaded by type. a or b may be y: a thread loads its U elements of both before it stores
// any, which also keeps U of them in flight (a fusing launch is one wave whose threads loop).
template <bool S, typename TA, typename TB>
__global__ void binary_f32_kernel(amp_binary_op op, float *y, const TA *a, const TB *b, int64_t n,
                                  cuda_fuse f, cuda_fuse fi, int fi_of) {
    constexpr int U = 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    thread_acc acc = acc_empty(), acci = acc_empty();
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n; i0 += U * stride) {
        float av[U], bv[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * stride < n) {
                av[u] = cuda_io<TA>::load(a[i0 + u * stride]);
                bv[u] = cuda_io<TB>::load(b[i0 + u * stride]);
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u * stride >= n) break;
            const float v = binary_f(op, av[u], bv[u]);
            y[i0 + u * stride] = v;
            if (S && f.slot) acc_stored(acc, v, f.lim);
            if (S && fi.slot) acc_value<false>(acci, fi_of == 1 ? av[u] : bv[u], fi.lim);
        }
    }
    cuda_fuse_end<S>(f, acc);
    cuda_fuse_end<S>(fi, acci);
}

template <bool S, typename T>
__global__ void binary_vec_kernel(amp_binary_op op, T *__restrict__ y, const T *a, const T *b,
                                  int64_t n, cuda_fuse f, cuda_fuse fi, int fi_of) {
    constexpr int V = 16 / sizeof(T);
    const int64_t nv = n / V;
    stored_stats<S, T> st(f);
    stored_stats<S, T> sti(fi); // operand fi_of's (1: a, 2: b)
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 ar = ((const uint4 *)a)[i], br = ((const uint4 *)b)[i];
        T *av = (T *)&ar, *bv = (T *)&br;
        if (S && fi.slot) { // the operand's vector by value: a pointer picked at run time would
            const uint4 ir = fi_of == 1 ? ar : br; // put both vectors in a local-memory frame
            sti.values((const T *)&ir, fi.lim);
        }
#pragma unroll
        for (int j = 0; j < V; j++)
            av[j] =
                cuda_io<T>::store(binary_f(op, cuda_io<T>::load(av[j]), cuda_io<T>::load(bv[j])));
        ((uint4 *)y)[i] = ar;
        st.values(av, f.lim);
    }
    for (int64_t i = nv * V + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const T ai = a[i], bi = b[i],
                v = cuda_io<T>::store(binary_f(op, cuda_io<T>::load(ai), cuda_io<T>::load(bi)));
        y[i] = v;
        st.value(v, f.lim);
        sti.value(fi_of == 1 ? ai : bi, fi.lim);
    }
    st.end(f);
    sti.end(fi);
}

static bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

// One dtype, every operand's innermost dim contiguous (a slice of a gradient plus a piece's
// gradient): 16-byte vectors, it counting in vectors.
template <bool S, typename T>
__global__ void binary_rows_kernel(amp_binary_op op, T *y, const T *a, const T *b, cuda_iter it,
                                   int64_t nv, cuda_fuse f) {
    constexpr int V = 16 / sizeof(T);
    thread_acc acc = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nv;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 ar = ((const uint4 *)a)[cuda_iter_offset(it, 1, i)];
        const uint4 br = ((const uint4 *)b)[cuda_iter_offset(it, 2, i)];
        T *av = (T *)&ar;
        const T *bv = (const T *)&br;
#pragma unroll
        for (int j = 0; j < V; j++) {
            av[j] =
                cuda_io<T>::store(binary_f(op, cuda_io<T>::load(av[j]), cuda_io<T>::load(bv[j])));
            if (S) acc_stored(acc, cuda_io<T>::load(av[j]), f.lim);
        }
        ((uint4 *)y)[cuda_iter_offset(it, 0, i)] = ar;
    }
    cuda_fuse_end<S>(f, acc);
}

// y = a op b[channel], y and a contiguous, b's value for element i at ((i / inner) % C) * sb, inner
// a multiple of V: one b value per 16-byte vector, 32-bit index arithmetic (nv < 2^31).
template <bool S, typename T>
__global__ void binary_channel_kernel(amp_binary_op op, T *y, const T *a, const T *b, int nv,
                                      int inner_v, int C, int64_t sb, cuda_fuse f) {
    constexpr int V = 16 / sizeof(T);
    thread_acc acc = acc_empty();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        uint4 ar = ((const uint4 *)a)[i];
        T *av = (T *)&ar;
        const float bv = cuda_io<T>::load(b[(int64_t)(i / inner_v % C) * sb]);
#pragma unroll
        for (int j = 0; j < V; j++) {
            av[j] = cuda_io<T>::store(binary_f(op, cuda_io<T>::load(av[j]), bv));
            if (S) acc_stored(acc, cuda_io<T>::load(av[j]), f.lim);
        }
        ((uint4 *)y)[i] = ar;
    }
    cuda_fuse_end<S>(f, acc);
}

// Whether the merged it is y and a contiguous alike and b broadcast along all dims but (at most)
// one, that dim's extent C and stride sb and what follows it, inner, a multiple of V elements.
static bool iter_channel(const cuda_iter *it, int64_t V, int64_t *inner, int64_t *C, int64_t *sb) {
    int64_t run = 1;
    *inner = 0, *C = 1, *sb = 0;
    for (int d = it->ndim - 1; d >= 0; d--) {
        if (it->stride[0][d] != run || it->stride[1][d] != run) return false;
        if (it->stride[2][d] != 0) {
            if (*inner) return false; // a second dim of b
            *inner = run, *C = it->shape[d], *sb = it->stride[2][d];
        }
        run *= it->shape[d];
    }
    if (!*inner) *inner = run; // b is one value
    return it->small && *inner % V == 0;
}

// it (3 operands) in units of V elements when every operand's innermost dim is contiguous, a
// multiple of V long and every other stride a multiple of V; false otherwise.
static bool iter_in_vectors(cuda_iter *it, int64_t V) {
    const int last = it->ndim - 1;
    if (!it->small || it->shape[last] % V != 0) return false;
    for (int o = 0; o < 3; o++) {
        if (it->stride[o][last] != 1) return false;
        for (int d = 0; d < last; d++)
            if (it->stride[o][d] % V != 0) return false;
    }
    it->shape[last] /= V;
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < last; d++)
            it->stride[o][d] /= V;
    return true;
}

// The held statistics of an operand that the vectorised and the generic kernels read whole and in
// order (contiguous, y too): the residual add of a linear's output. *of: 1 for a, 2 for b.
static cuda_fuse take_operand(cuda_ctx *c, const amp_tensor_t *y, const amp_tensor_t *a,
                              const amp_tensor_t *b, int *of) {
    if (!amp_is_contiguous(y)) return cuda_fuse{};
    for (const amp_tensor_t *o : {a, b}) {
        if (!amp_is_contiguous(o)) continue;
        const cuda_fuse f = cuda_fuse_take_input(c, o);
        if (f.slot) {
            *of = o == a ? 1 : 2;
            return f;
        }
    }
    return cuda_fuse{};
}

void cuda_binary(void *bctx, amp_binary_op op, amp_tensor_t *y, const amp_tensor_t *a,
                 const amp_tensor_t *b) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_FLOAT(y);
    AMP_ASSERT(a->ndim == y->ndim && b->ndim == y->ndim);
    for (int d = 0; d < y->ndim; d++)
        AMP_ASSERT(a->shape[d] == y->shape[d] && b->shape[d] == y->shape[d], "(dim %d)", d);
    const int64_t n = cuda_numel(y);
    if (n == 0) return;
    void *yp = amp_tensor_ptr(y);
    const void *ap = amp_tensor_ptr(a), *bp = amp_tensor_ptr(b);
    const cuda_fuse f = cuda_fuse_take(y);
    int fi_of = 0;
    if (amp_is_contiguous(y) && amp_is_contiguous(a) && amp_is_contiguous(b) &&
        a->dtype == y->dtype && b->dtype == y->dtype && aligned16(yp) && aligned16(ap) &&
        aligned16(bp)) {
        const cuda_fuse fi = take_operand(c, y, a, b, &fi_of);
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            const unsigned grid = cuda_grid(n, 256, 16 / (int)sizeof(T));
            CUDA_FUSE_DISPATCH2(
                f, fi, S,
                binary_vec_kernel<S, T>
                <<<cuda_fuse_grid(f, fi, grid, 256, binary_vec_kernel<true, T>), 256, 0,
                   c->stream>>>(op, (T *)yp, (const T *)ap, (const T *)bp, n, f, fi, fi_of));
        });
        CUDA_LAUNCH_CHECK();
        return;
    }
    const int64_t *strides[3] = {y->stride, a->stride, b->stride}; // y: contiguous or a slice
    cuda_iter it;
    cuda_iter_init(&it, y->ndim, y->shape, 3, strides);
    const int64_t V = 16 / (int64_t)amp_dtype_size(y->dtype);
    int64_t inner, C, sb;
    if (a->dtype == y->dtype && b->dtype == y->dtype && aligned16(yp) && aligned16(ap) &&
        iter_channel(&it, V, &inner, &C, &sb)) {
        const int64_t nv = n / V;
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            const unsigned grid = cuda_grid(nv, 256);
            CUDA_FUSE_DISPATCH(
                f, S,
                binary_channel_kernel<S, T>
                <<<cuda_fuse_grid(f, grid, 256, binary_channel_kernel<S, T>), 256, 0, c->stream>>>(
                    op, (T *)yp, (const T *)ap, (const T *)bp, (int)nv, (int)(inner / V), (int)C,
                    sb, f));
        });
        CUDA_LAUNCH_CHECK();
        return;
    }
    if (a->dtype == y->dtype && b->dtype == y->dtype && aligned16(yp) && aligned16(ap) &&
        aligned16(bp) && iter_in_vectors(&it, V)) {
        const int64_t nv = n / V;
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            const unsigned grid = cuda_grid(nv, 256);
            CUDA_FUSE_DISPATCH(
                f, S,
                binary_rows_kernel<S, T>
                <<<cuda_fuse_grid(f, grid, 256, binary_rows_kernel<S, T>), 256, 0, c->stream>>>(
                    op, (T *)yp, (const T *)ap, (const T *)bp, it, nv, f));
        });
        CUDA_LAUNCH_CHECK();
        return;
    }
    const cuda_fuse fi = take_operand(c, y, a, b, &fi_of);
    const unsigned grid = cuda_grid(n, 256, 4);
    if (y->dtype == AMP_DTYPE_F32 && amp_dtype_is_float(a->dtype) && amp_dtype_is_float(b->dtype) &&
        amp_is_contiguous(y) && amp_is_contiguous(a) && amp_is_contiguous(b)) {
        CUDA_DISPATCH_FLOAT(
            a->dtype, TA, CUDA_DISPATCH_FLOAT(b->dtype, TB, {
                auto kernel = binary_f32_kernel<true, TA, TB>;
                CUDA_FUSE_DISPATCH2(
                    f, fi, S,
                    binary_f32_kernel<S, TA, TB>
                    <<<cuda_fuse_grid(f, fi, grid, 256, kernel), 256, 0, c->stream>>>(
                        op, (float *)yp, (const TA *)ap, (const TB *)bp, n, f, fi, fi_of));
            }));
        CUDA_LAUNCH_CHECK();
        return;
    }
    CUDA_FUSE_DISPATCH2(
        f, fi, S,
        binary_kernel<S>
        <<<cuda_fuse_grid(f, fi, grid, 256, binary_kernel<true>), 256, 0, c->stream>>>(
            op, yp, y->dtype, ap, a->dtype, bp, b->dtype, it, n, amp_is_contiguous(y), f, fi,
            fi_of));
    CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------
// masked_fill: unmasked values keep their bits when x and y share a dtype.

template <bool S>
__global__ void masked_fill_kernel(void *y, amp_dtype yt, const void *x, amp_dtype xt,
                                   const void *mask, amp_dtype mt, float value, cuda_iter it,
                                   int64_t n, cuda_fuse f) {
    const bool same = xt == yt;
    const bool wide = yt == AMP_DTYPE_F32 || yt == AMP_DTYPE_I32;
    thread_acc acc = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t xo = cuda_iter_offset(it, 1, i);
        if (cuda_load_index(mt, mask, cuda_iter_offset(it, 2, i)) != 0)
            cuda_store(yt, y, i, value);
        else if (same && wide)
            ((uint32_t *)y)[i] = ((const uint32_t *)x)[xo];
        else if (same && yt != AMP_DTYPE_I64)
            ((uint16_t *)y)[i] = ((const uint16_t *)x)[xo];
        else
            cuda_store(yt, y, i, cuda_load(xt, x, xo));
        if (S) acc_stored(acc, cuda_load(yt, y, i), f.lim); // floating y only (cuda_fuse_take)
    }
    cuda_fuse_end<S>(f, acc);
}

// The common case (an attention mask): one floating dtype, x contiguous, an i32 mask broadcast.
template <bool S, typename T>
__global__ void masked_fill_typed_kernel(T *__restrict__ y, const T *__restrict__ x,
                                         const int32_t *__restrict__ mask, float value,
                                         cuda_iter it, int64_t n, cuda_fuse f) {
    const T fill = cuda_io<T>::store(value);
    thread_acc acc = acc_empty();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const T v = mask[cuda_iter_offset(it, 2, i)] != 0 ? fill : x[i];
        y[i] = v;
        if (S) acc_stored(acc, cuda_io<T>::load(v), f.lim);
    }
    cuda_fuse_end<S>(f, acc);
}

// The same with the mask one row (inner elements) repeated, 8 elements per thread and step.
template <bool S, typename T>
__global__ void masked_fill_rows_kernel(T *__restrict__ y, const T *__restrict__ x,
                                        const int32_t *__restrict__ mask, float value,
                                        uint32_t inner8, int64_t n8, cuda_fuse f) {
    const T fill = cuda_io<T>::store(value);
    stored_stats<S, T> st(f); // 16-bit values in pairs, a vector of the fill at once
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const vec8<T> a = ((const vec8<T> *)x)[i];
        const vec8<int32_t> m = ((const vec8<int32_t> *)mask)[(uint32_t)i % inner8];
        vec8<T> o;
#pragma unroll
        for (int j = 0; j < 8; j++)
            o.v[j] = m.v[j] != 0 ? fill : a.v[j];
        ((vec8<T> *)y)[i] = o;
#pragma unroll
        for (int j = 0; j < 8; j += 16 / (int)sizeof(T))
            st.values(o.v + j, f.lim);
    }
    st.end(f);
}

static bool aligned_to(const void *p, size_t a) {
    return ((uintptr_t)p % a) == 0;
}

void cuda_masked_fill(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, const amp_tensor_t *mask,
                      float value) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    AMP_ASSERT(x->ndim == y->ndim && mask->ndim == y->ndim);
    AMP_ASSERT(mask->dtype == AMP_DTYPE_I32 || mask->dtype == AMP_DTYPE_I64);
    for (int d = 0; d < y->ndim; d++)
        AMP_ASSERT(x->shape[d] == y->shape[d] && mask->shape[d] == y->shape[d], "(dim %d)", d);
    const int64_t n = cuda_numel(y);
    if (n == 0) return;
    int64_t ystride[AMP_MAX_DIMS];
    amp_contiguous_strides(y->ndim, y->shape, ystride);
    const int64_t *strides[3] = {ystride, x->stride, mask->stride};
    cuda_iter it;
    cuda_iter_init(&it, y->ndim, y->shape, 3, strides);
    const cuda_fuse f = cuda_fuse_take(y);
    if (x->dtype == y->dtype && amp_dtype_is_float(y->dtype) && amp_is_contiguous(x) &&
        mask->dtype == AMP_DTYPE_I32 && it.small) {
        const int last = it.ndim - 1;
        const int64_t inner = it.shape[last];
        const bool rows =
            it.stride[2][last] == 1 && (it.ndim == 1 || (it.ndim == 2 && it.stride[2][0] == 0));
        const size_t vec = 8 * amp_dtype_size(y->dtype);
        if (rows && inner % 8 == 0 && aligned_to(amp_tensor_ptr(y), vec) &&
            aligned_to(amp_tensor_ptr(x), vec) && aligned_to(amp_tensor_ptr(mask), 32)) {
            CUDA_DISPATCH_FLOAT(y->dtype, T, {
                const unsigned grid = cuda_grid(n / 8, 256, 2);
                CUDA_FUSE_DISPATCH(f, S,
                                   masked_fill_rows_kernel<S, T>
                                   <<<cuda_fuse_grid(f, grid, 256, masked_fill_rows_kernel<S, T>),
                                      256, 0, c->stream>>>((T *)amp_tensor_ptr(y),
                                                           (const T *)amp_tensor_ptr(x),
                                                           (const int32_t *)amp_tensor_ptr(mask),
                                                           value, (uint32_t)(inner / 8), n / 8, f));
            });
            CUDA_LAUNCH_CHECK();
            return;
        }
        CUDA_DISPATCH_FLOAT(y->dtype, T, {
            const unsigned grid = cuda_grid(n, 256, 4);
            CUDA_FUSE_DISPATCH(
                f, S,
                masked_fill_typed_kernel<S, T>
                <<<cuda_fuse_grid(f, grid, 256, masked_fill_typed_kernel<S, T>), 256, 0,
                   c->stream>>>((T *)amp_tensor_ptr(y), (const T *)amp_tensor_ptr(x),
                                (const int32_t *)amp_tensor_ptr(mask), value, it, n, f));
        });
        CUDA_LAUNCH_CHECK();
        return;
    }
    const unsigned grid = cuda_grid(n, 256, 4);
    CUDA_FUSE_DISPATCH(f, S,
                       masked_fill_kernel<S>
                       <<<cuda_fuse_grid(f, grid, 256, masked_fill_kernel<S>), 256, 0, c->stream>>>(
                           amp_tensor_ptr(y), y->dtype, amp_tensor_ptr(x), x->dtype,
                           amp_tensor_ptr(mask), mask->dtype, value, it, n, f));
    CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------
// dropout mask

// amp_rng_hash / amp_rng_uniform of amp-impl.h, on the device.
__device__ __forceinline__ float rng_uniform(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void dropout_mask_kernel(void *mask, amp_dtype mt, float p, float scale, uint64_t seed,
                                    uint64_t offset, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cuda_store(mt, mask, i, rng_uniform(seed, offset + (uint64_t)i) < p ? 0.0f : scale);
}

void cuda_dropout_mask(void *bctx, amp_tensor_t *mask, float p, uint64_t seed, uint64_t offset) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(mask);
    CUDA_ASSERT_FLOAT(mask);
    const int64_t n = cuda_numel(mask);
    if (n == 0) return;
    const float keep = (float)(1.0 - (double)p); // as the CPU backend: Python's `1 - p`
    dropout_mask_kernel<<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(
        amp_tensor_ptr(mask), mask->dtype, p, 1.0f / keep, seed, offset, n);
    CUDA_LAUNCH_CHECK();
}
