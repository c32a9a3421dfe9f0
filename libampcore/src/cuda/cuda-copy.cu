/*
 * cuda-copy.cu — copy (any strides, also 0, into a contiguous tensor, converting the dtype) and
 * fill.
 *
 * A contiguous same-dtype copy is one device-to-device memcpy; a contiguous dtype conversion is a
 * typed kernel moving 8 elements per thread and step; a strided same-dtype copy is a tiled
 * shared-memory transpose when the source's contiguous dim is not the last (16-bit values in
 * aligned pairs where they can go), else gathers whole 16-byte runs when the innermost dim is
 * contiguous and aligned, else single elements; anything else goes through the generic strided
 * iterator. Same-dtype copies move bits (NaN payloads survive), integer-to-integer copies never
 * pass through float. When the instrumentation wants the statistics of dst (a cast's output, a
 * gradient buffer's first write), a contiguous floating copy runs the typed kernel, which adds them
 * as it stores (cuda-fuse.h), and a strided same-dtype copy adds them in its gather or tile kernel;
 * both also add the statistics held for the source when they read a whole tensor (a cast of the
 * logits, a gradient permuted back).
 */
#include "cuda-fuse.h"
#include "cuda-impl.h"

// One element converted from S to D; the same type keeps its bits (NaN payloads).
template <typename S, typename D> struct convert {
    static __device__ __forceinline__ D one(S v) { return cuda_io<D>::store(cuda_io<S>::load(v)); }
};
template <typename T> struct convert<T, T> {
    static __device__ __forceinline__ T one(T v) { return v; }
};

// dst = src converted, 8 elements a vector (dst and src aligned to 8 elements), 64 bytes of src
// loaded per thread and step before any is converted (a fusing launch is a wave or a few, whose
// threads loop: more bytes in flight); the statistics of dst (f) and of src (fi: the logits cast to
// f32) as they go by, src's also into `also` (dst's slot, when they are the same numbers).
template <bool ST, typename S, typename D>
__global__ void convert_kernel(D *__restrict__ dst, const S *__restrict__ src, int64_t n,
                               cuda_fuse f, cuda_fuse fi, cuda_fuse also) {
    constexpr int U = 64 / sizeof(vec8<S>);
    const int64_t n8 = n / 8, stride = (int64_t)gridDim.x * blockDim.x;
    stored_stats<ST, D> st(f);
    stored_stats<ST, S> sti(fi);
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n8; i0 += U * stride) {
        vec8<S> a[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * stride < n8) a[u] = ((const vec8<S> *)src)[i0 + u * stride];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u * stride >= n8) break;
            vec8<D> b;
#pragma unroll
            for (int j = 0; j < 8; j++)
                b.v[j] = convert<S, D>::one(a[u].v[j]);
            ((vec8<D> *)dst)[i0 + u * stride] = b; // stored before any statistics
#pragma unroll
            for (int j = 0; j < 8; j += 16 / (int)sizeof(S))
                sti.values(a[u].v + j, fi.lim);
#pragma unroll
            for (int j = 0; j < 8; j += 16 / (int)sizeof(D))
                st.values(b.v + j, f.lim);
        }
    }
    for (int64_t i = n8 * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const S u = src[i];
        const D v = convert<S, D>::one(u);
        dst[i] = v;
        st.value(v, f.lim);
        sti.value(u, fi.lim);
    }
    st.end(f);
    sti.end(fi);
    cuda_fuse_end<ST>(also, sti.a);
}

// The statistics a same-dtype strided copy adds (S) of the values of T it moves: dst's (f, a
// gradient buffer's first write) and the source's (fi: held for the tensor it reads whole), the
// same numbers, gathered once. first() is a copy, not a reference: a reference picked at run time
// makes the compiler keep the kernel parameters in a local-memory frame to point into.
struct copy_stats {
    cuda_fuse f, fi;
    __host__ __device__ cuda_fuse first(void) const { return f.slot ? f : fi; }
};

template <typename T, typename E> __device__ __forceinline__ T bits_as(E e) {
    static_assert(sizeof(T) == sizeof(E), "a unit of one value");
    T v;
    __builtin_memcpy(&v, &e, sizeof v);
    return v;
}

template <bool S, typename T>
__device__ __forceinline__ void copy_stats_end(stored_stats<S, T> &st, const copy_stats &cs) {
    st.end(cs.first());
    if (cs.f.slot) cuda_fuse_end<S>(cs.fi, st.a);
}

// dst[i] = src[offset of i]: one element (or one 16-byte run) of E per index, four of them
// loaded per thread and step before any is stored (more bytes in flight).
template <bool S, typename T, typename E>
__global__ void gather_kernel(E *__restrict__ dst, const E *__restrict__ src, cuda_iter it,
                              int64_t n, copy_stats cs) {
    constexpr int U = 4;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    stored_stats<S, T> st(cs.first());
    const stats_limits lim = cs.first().lim;
    for (int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i0 < n; i0 += U * stride) {
        E v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i0 + u * stride < n) v[u] = src[cuda_iter_offset(it, 1, i0 + u * stride)];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (i0 + u * stride >= n) break;
            dst[i0 + u * stride] = v[u];
            if constexpr (S && sizeof(E) == 16)
                st.values(reinterpret_cast<const T *>(&v[u]), lim);
            else if constexpr (S)
                st.value(bits_as<T>(v[u]), lim);
        }
    }
    copy_stats_end(st, cs);
}

// A transposing copy: dim a of the source is its contiguous one, the output's is the last dim;
// 32 x 32 tiles go through shared memory so both the reads and the writes are coalesced. The
// other dims (batch) are walked by blockIdx.z.
typedef struct transpose_desc {
    int nb; // batch dims
    int64_t bshape[AMP_MAX_DIMS], bsrc[AMP_MAX_DIMS], bdst[AMP_MAX_DIMS];
    int64_t na, nl;       // sizes of dim a and of the last dim
    int64_t dst_a, src_l; // the dst stride of a, the src stride of the last dim
    int64_t batches;
} transpose_desc;

// The source and output offsets of batch b.
__device__ __forceinline__ void transpose_batch(const transpose_desc &t, int64_t b, int64_t *so,
                                                int64_t *d_o) {
    *so = *d_o = 0;
    for (int k = t.nb - 1; k >= 0; k--) {
        *so += (b % t.bshape[k]) * t.bsrc[k];
        *d_o += (b % t.bshape[k]) * t.bdst[k];
        b /= t.bshape[k];
    }
}

template <bool S, typename T, typename E>
__global__ void transpose_kernel(E *__restrict__ dst, const E *__restrict__ src, transpose_desc t,
                                 copy_stats cs) {
    __shared__ E tile[32][33];
    stored_stats<S, T> st(cs.first());
    const stats_limits lim = cs.first().lim;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t a0 = blockIdx.y * 32, l0 = blockIdx.x * 32;
    for (int64_t b = blockIdx.z; b < t.batches; b += gridDim.z) {
        int64_t so, d_o;
        transpose_batch(t, b, &so, &d_o);
        for (int k = ty; k < 32; k += 8) {
            const int64_t a = a0 + tx, l = l0 + k;
            if (a < t.na && l < t.nl) {
                const E v = src[so + a + l * t.src_l];
                tile[k][tx] = v;
                if constexpr (S) st.value(bits_as<T>(v), lim);
            }
        }
        __syncthreads();
        for (int k = ty; k < 32; k += 8) {
            const int64_t a = a0 + k, l = l0 + tx;
            if (a < t.na && l < t.nl) dst[d_o + a * t.dst_a + l] = tile[tx][k];
        }
        __syncthreads();
    }
    copy_stats_end(st, cs);
}

// The same for 16-bit values in pairs, when every pair is 4-byte aligned on both sides (dims a and
// the last even, and so every stride and offset): 64 x 64 tiles, each thread loading 8 pairs of
// neighbours along a and storing 8 pairs along the last dim, so a warp moves 128 bytes a row and a
// thread has 8 loads in flight (the 32 x 32 kernel above moves 64 bytes a row, 4 loads a thread).
// The tile's rows are 65 values apart: both phases' 16-bit accesses then fall in distinct banks.
// Five blocks a multiprocessor, with the statistics too (48 registers; 54 without the bound).
template <bool S, typename T>
__global__ void __launch_bounds__(256, 5)
    transpose_pairs_kernel(uint32_t *__restrict__ dst, const uint32_t *__restrict__ src,
                           transpose_desc t, copy_stats cs) {
    __shared__ uint16_t tile[64][65];
    stored_stats<S, T> st(cs.first());
    const stats_limits lim = cs.first().lim;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t a0 = blockIdx.y * 64, l0 = blockIdx.x * 64;
    const int64_t a = a0 + 2 * tx, l = l0 + 2 * tx; // this thread's pair: loaded, stored
    const int rows_l = (int)min(t.nl - l0, (int64_t)64), rows_a = (int)min(t.na - a0, (int64_t)64);
    const bool whole = rows_l == 64 && rows_a == 64;
    for (int64_t b = blockIdx.z; b < t.batches; b += gridDim.z) {
        int64_t so, d_o;
        transpose_batch(t, b, &so, &d_o);
        // rows l0 + ty + 8 k of the source, pairs (a, a + 1)
        const uint32_t *p = src + (so + a + (l0 + ty) * t.src_l) / 2;
        const int64_t p_step = 4 * t.src_l;
        uint32_t v[8];
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (whole || (a < t.na && ty + 8 * k < rows_l)) v[k] = p[k * p_step];
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (whole || (a < t.na && ty + 8 * k < rows_l)) {
                tile[ty + 8 * k][2 * tx] = (uint16_t)v[k];
                tile[ty + 8 * k][2 * tx + 1] = (uint16_t)(v[k] >> 16);
                if (S && !whole) {
                    st.value(bits_as<T>((uint16_t)v[k]), lim);
                    st.value(bits_as<T>((uint16_t)(v[k] >> 16)), lim);
                }
            }
        if (S && whole) { // the 16 values as two 16-byte vectors (their order does not matter)
            st.values(reinterpret_cast<const T *>(v), lim);
            st.values(reinterpret_cast<const T *>(v + 4), lim);
        }
        __syncthreads();
        // rows a0 + ty + 8 k of the output, pairs (l, l + 1)
        uint32_t *q = dst + (d_o + (a0 + ty) * t.dst_a + l) / 2;
        const int64_t q_step = 4 * t.dst_a;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (whole || (l < t.nl && ty + 8 * k < rows_a)) {
                const uint32_t lo = tile[2 * tx][ty + 8 * k], hi = tile[2 * tx + 1][ty + 8 * k];
                q[k * q_step] = lo | hi << 16;
            }
        __syncthreads();
    }
    copy_stats_end(st, cs);
}

// Whether t's copy can go in pairs of 16-bit values (transpose_pairs_kernel).
static bool transpose_pairs_apply(const void *dst, const void *src, const transpose_desc &t) {
    bool even = t.na % 2 == 0 && t.nl % 2 == 0 && t.dst_a % 2 == 0 && t.src_l % 2 == 0 &&
                ((uintptr_t)dst & 3) == 0 && ((uintptr_t)src & 3) == 0;
    for (int k = 0; k < t.nb && even; k++)
        even = t.bsrc[k] % 2 == 0 && t.bdst[k] % 2 == 0;
    return even;
}

// Caps grid.z of a fusing transpose at about one wave: each block ends in atomics on the slots.
static dim3 transpose_wave(dim3 grid, const void *kernel) {
    const unsigned wave = (unsigned)cuda_resident_blocks(kernel, 256), tiles = grid.x * grid.y;
    if (tiles < wave && grid.z > wave / tiles) grid.z = wave / tiles;
    return grid;
}

// Runs the tiled transpose when some dim other than the last is the source's contiguous one.
template <typename E>
static void transpose_launch(cuda_ctx *c, void *dst, const void *src, const transpose_desc &t,
                             dim3 grid, amp_dtype dt, const copy_stats &cs) {
    if (!cs.first().slot) {
        transpose_kernel<false, float, E>
            <<<grid, dim3(32, 8), 0, c->stream>>>((E *)dst, (const E *)src, t, cs);
        return;
    }
    CUDA_DISPATCH_FLOAT(dt, T, {
        if constexpr (sizeof(T) == sizeof(E)) {
            auto kernel = transpose_kernel<true, T, E>;
            kernel<<<transpose_wave(grid, (const void *)kernel), dim3(32, 8), 0, c->stream>>>(
                (E *)dst, (const E *)src, t, cs);
        } else {
            AMP_ASSERT(false, "(%s in units of %d bytes)", amp_dtype_name(dt), (int)sizeof(E));
        }
    });
}

static void transpose_pairs_launch(cuda_ctx *c, void *dst, const void *src, const transpose_desc &t,
                                   amp_dtype dt, const copy_stats &cs) {
    const dim3 grid((unsigned)((t.nl + 63) / 64), (unsigned)((t.na + 63) / 64),
                    (unsigned)(t.batches < 65535 ? t.batches : 65535));
    uint32_t *d = (uint32_t *)dst;
    const uint32_t *s = (const uint32_t *)src;
    if (!cs.first().slot) {
        transpose_pairs_kernel<false, __half><<<grid, dim3(32, 8), 0, c->stream>>>(d, s, t, cs);
    } else if (dt == AMP_DTYPE_F16) {
        auto kernel = transpose_pairs_kernel<true, __half>;
        kernel<<<transpose_wave(grid, (const void *)kernel), dim3(32, 8), 0, c->stream>>>(d, s, t,
                                                                                          cs);
    } else {
        AMP_ASSERT(dt == AMP_DTYPE_BF16, "(%s in pairs of 16-bit values)", amp_dtype_name(dt));
        auto kernel = transpose_pairs_kernel<true, __nv_bfloat16>;
        kernel<<<transpose_wave(grid, (const void *)kernel), dim3(32, 8), 0, c->stream>>>(d, s, t,
                                                                                          cs);
    }
}

static bool transpose(cuda_ctx *c, void *dst, const void *src, const cuda_iter &it, amp_dtype dt,
                      const copy_stats &cs) {
    const size_t esize = amp_dtype_size(dt);
    const int last = it.ndim - 1;
    int a = -1;
    for (int d = 0; d < last; d++)
        if (it.stride[1][d] == 1) a = d;
    if (a < 0 || it.stride[1][last] == 1 || esize > 4) return false;
    transpose_desc t = {};
    t.na = it.shape[a];
    t.nl = it.shape[last];
    t.dst_a = it.stride[0][a];
    t.src_l = it.stride[1][last];
    t.batches = 1;
    for (int d = 0; d < last; d++) {
        if (d == a) continue;
        t.bshape[t.nb] = it.shape[d];
        t.bsrc[t.nb] = it.stride[1][d];
        t.bdst[t.nb] = it.stride[0][d];
        t.nb++;
        t.batches *= it.shape[d];
    }
    const dim3 grid((unsigned)((t.nl + 31) / 32), (unsigned)((t.na + 31) / 32),
                    (unsigned)(t.batches < 65535 ? t.batches : 65535));
    if (grid.y > 65535) return false;
    if (esize == 2 && transpose_pairs_apply(dst, src, t))
        transpose_pairs_launch(c, dst, src, t, dt, cs);
    else if (esize == 2)
        transpose_launch<uint16_t>(c, dst, src, t, grid, dt, cs);
    else
        transpose_launch<uint32_t>(c, dst, src, t, grid, dt, cs);
    CUDA_LAUNCH_CHECK();
    return true;
}

template <typename E>
static void gather_launch(cuda_ctx *c, void *dst, const void *src, const cuda_iter &it, int64_t n,
                          int per_thread, amp_dtype dt, const copy_stats &cs) {
    const unsigned grid = cuda_grid(n, 256, per_thread);
    if (!cs.first().slot) {
        gather_kernel<false, float, E>
            <<<grid, 256, 0, c->stream>>>((E *)dst, (const E *)src, it, n, cs);
        return;
    }
    CUDA_DISPATCH_FLOAT(dt, T, {
        if constexpr (sizeof(E) == 16 || sizeof(E) == sizeof(T)) {
            auto kernel = gather_kernel<true, T, E>;
            kernel<<<cuda_fuse_grid(cs.first(), grid, 256, kernel), 256, 0, c->stream>>>(
                (E *)dst, (const E *)src, it, n, cs);
        } else {
            AMP_ASSERT(false, "(%s in units of %d bytes)", amp_dtype_name(dt), (int)sizeof(E));
        }
    });
}

// Same-dtype strided copy in units of E (2, 4, 8 or 16 bytes): it's strides in elements of
// esize bytes are rescaled to units of E when the innermost run allows (else E = esize).
static void gather(cuda_ctx *c, void *dst, const void *src, cuda_iter it, int64_t n, amp_dtype dt,
                   const copy_stats &cs) {
    const size_t esize = amp_dtype_size(dt);
    const int last = it.ndim - 1;
    const int64_t per = 16 / (int64_t)esize;
    bool vec = it.stride[1][last] == 1 && it.shape[last] % per == 0 && ((uintptr_t)dst & 15) == 0 &&
               ((uintptr_t)src & 15) == 0;
    for (int d = 0; d < last && vec; d++)
        vec = it.stride[1][d] % per == 0;
    if (vec) {
        it.shape[last] /= per;
        for (int d = 0; d < last; d++)
            it.stride[1][d] /= per;
        n /= per;
        gather_launch<uint4>(c, dst, src, it, n, 2, dt, cs);
    } else if (esize == 2) {
        gather_launch<uint16_t>(c, dst, src, it, n, 4, dt, cs);
    } else if (esize == 4) {
        gather_launch<uint32_t>(c, dst, src, it, n, 4, dt, cs);
    } else {
        gather_launch<uint64_t>(c, dst, src, it, n, 4, dt, cs);
    }
    CUDA_LAUNCH_CHECK();
}

__global__ void strided_copy_kernel(char *__restrict__ dst, amp_dtype dt,
                                    const char *__restrict__ src, amp_dtype st, cuda_iter it,
                                    int64_t n) {
    const int dsz = dt == AMP_DTYPE_F32 || dt == AMP_DTYPE_I32 ? 4 : dt == AMP_DTYPE_I64 ? 8 : 2;
    const bool ints = (dt == AMP_DTYPE_I32 || dt == AMP_DTYPE_I64) &&
                      (st == AMP_DTYPE_I32 || st == AMP_DTYPE_I64);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t so = cuda_iter_offset(it, 1, i);
        if (dt == st) {
            if (dsz == 2)
                ((uint16_t *)dst)[i] = ((const uint16_t *)src)[so];
            else if (dsz == 4)
                ((uint32_t *)dst)[i] = ((const uint32_t *)src)[so];
            else
                ((uint64_t *)dst)[i] = ((const uint64_t *)src)[so];
        } else if (ints) {
            const int64_t v = cuda_load_index(st, src, so);
            if (dt == AMP_DTYPE_I32)
                ((int32_t *)dst)[i] = (int32_t)v;
            else
                ((int64_t *)dst)[i] = v;
        } else {
            cuda_store(dt, dst, i, cuda_load(st, src, so));
        }
    }
}

void cuda_copy(void *bctx, amp_tensor_t *dst, const amp_tensor_t *src) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dst);
    AMP_ASSERT(dst->ndim == src->ndim);
    for (int d = 0; d < dst->ndim; d++)
        AMP_ASSERT(dst->shape[d] == src->shape[d], "(dim %d)", d);
    const int64_t n = cuda_numel(dst);
    if (n == 0) return;
    const bool typed = amp_is_contiguous(src) && amp_dtype_is_float(src->dtype) &&
                       amp_dtype_is_float(dst->dtype) &&
                       ((uintptr_t)amp_tensor_ptr(src) & 31) == 0 &&
                       ((uintptr_t)amp_tensor_ptr(dst) & 31) == 0;
    const cuda_fuse f = typed ? cuda_fuse_take(dst) : cuda_fuse{};
    if (amp_is_contiguous(src) && src->dtype == dst->dtype && !f.slot) {
        CUDA_CHECK(cudaMemcpyAsync(amp_tensor_ptr(dst), amp_tensor_ptr(src),
                                   (size_t)n * amp_dtype_size(dst->dtype), cudaMemcpyDeviceToDevice,
                                   c->stream));
        return;
    }
    if (typed) {
        const cuda_fuse fi = cuda_fuse_take_input(c, src);
        const bool widening = amp_dtype_size(dst->dtype) > amp_dtype_size(src->dtype);
        // a widening cast keeps every value: when both are wanted under one target, dst's
        // numbers are src's, gathered once (the 16-bit ones go in pairs)
        const bool same = widening && f.slot && fi.slot && cuda_fuse_same_target(f, fi);
        const cuda_fuse fd = same ? cuda_fuse{} : f, also = same ? f : cuda_fuse{};
        const unsigned grid = cuda_grid(n, 256, 8);
        // a large widening cast (it writes twice what it reads) runs faster on four waves of
        // blocks than on one, a smaller one slower (gpt's casts to f32 on an H200: 50M and 67M
        // values 117 -> 98 and 154 -> 129 us, 6M values 17 -> 21 us)
        const unsigned waves = widening && n >= ((int64_t)1 << 25) ? 4 : 1;
        CUDA_DISPATCH_FLOAT(
            src->dtype, S, CUDA_DISPATCH_FLOAT(dst->dtype, D, {
                auto kernel = convert_kernel<true, S, D>;
                CUDA_FUSE_DISPATCH2(
                    f, fi, ST,
                    convert_kernel<ST, S, D>
                    <<<cuda_fuse_grid(f, fi, grid, 256, kernel, waves), 256, 0, c->stream>>>(
                        (D *)amp_tensor_ptr(dst), (const S *)amp_tensor_ptr(src), n, fd, fi, also));
            }));
        CUDA_LAUNCH_CHECK();
        return;
    }
    int64_t dstride[AMP_MAX_DIMS];
    amp_contiguous_strides(dst->ndim, dst->shape, dstride);
    cuda_iter it;
    const int64_t *strides[2] = {dstride, src->stride};
    cuda_iter_init(&it, dst->ndim, dst->shape, 2, strides);
    if (src->dtype == dst->dtype && it.small) {
        // the numbers of what moves: dst's when wanted, and src's when held for the tensor it
        // reads whole (a gradient permuted back), under the same target
        copy_stats cs = {cuda_fuse_take(dst), {}};
        if (amp_tensor_fills_run(src)) {
            cs.fi = cuda_fuse_take_input(c, src);
            AMP_ASSERT(!cs.f.slot || !cs.fi.slot || cuda_fuse_same_target(cs.f, cs.fi),
                       "(a copy's statistics under two targets)");
        }
        if (transpose(c, amp_tensor_ptr(dst), amp_tensor_ptr(src), it, dst->dtype, cs)) return;
        gather(c, amp_tensor_ptr(dst), amp_tensor_ptr(src), it, n, dst->dtype, cs);
        return;
    }
    strided_copy_kernel<<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(
        (char *)amp_tensor_ptr(dst), dst->dtype, (const char *)amp_tensor_ptr(src), src->dtype, it,
        n);
    CUDA_LAUNCH_CHECK();
}

__global__ void fill_kernel(void *dst, amp_dtype dt, float v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cuda_store(dt, dst, i, v);
}

void cuda_fill(void *bctx, amp_tensor_t *dst, float v) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(dst);
    const int64_t n = cuda_numel(dst);
    if (n == 0) return;
    if (v == 0.0f && !signbit(v)) { // all-zero bits in every dtype
        CUDA_CHECK(cudaMemsetAsync(amp_tensor_ptr(dst), 0, (size_t)n * amp_dtype_size(dst->dtype),
                                   c->stream));
        return;
    }
    fill_kernel<<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(amp_tensor_ptr(dst), dst->dtype, v, n);
    CUDA_LAUNCH_CHECK();
}
