/*
 * cuda-copy.cu — copy (any strides, also 0, into a contiguous tensor, converting the dtype) and
 * fill.
 *
 * A contiguous same-dtype copy is one device-to-device memcpy; a contiguous dtype conversion is a
 * typed kernel moving 8 elements per thread and step; a strided same-dtype copy is a tiled
 * shared-memory transpose when the source's contiguous dim is not the last, else gathers whole
 * 16-byte runs when the innermost dim is contiguous and aligned, else single elements; anything
 * else goes through the generic strided iterator. Same-dtype copies move bits (NaN payloads
 * survive), integer-to-integer copies never pass through float. When the instrumentation wants
 * the statistics of dst (a cast's output, a gradient buffer's first write), a contiguous
 * floating copy runs the typed kernel, which adds them as it stores (cuda-fuse.h).
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

// dst = src converted, 8 elements per thread and step (dst and src aligned to 8 elements); the
// statistics of dst (f) and of src (fi: the logits cast to f32) as they go by.
template <bool ST, typename S, typename D>
__global__ void convert_kernel(D *__restrict__ dst, const S *__restrict__ src, int64_t n,
                               cuda_fuse f, cuda_fuse fi) {
    const int64_t n8 = n / 8;
    stored_stats<ST, D> st(f);
    stored_stats<ST, S> sti(fi);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        const vec8<S> a = ((const vec8<S> *)src)[i];
#pragma unroll
        for (int j = 0; j < 8; j += 16 / (int)sizeof(S)) sti.values(a.v + j, fi.lim);
        vec8<D> b;
#pragma unroll
        for (int j = 0; j < 8; j++) b.v[j] = convert<S, D>::one(a.v[j]);
        ((vec8<D> *)dst)[i] = b;
#pragma unroll
        for (int j = 0; j < 8; j += 16 / (int)sizeof(D)) st.values(b.v + j, f.lim);
        st.step();
        sti.step();
    }
    for (int64_t i = n8 * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const S u = src[i];
        const D v = convert<S, D>::one(u);
        dst[i] = v;
        st.value(v, f.lim);
        sti.value(u, fi.lim);
    }
    st.end(f);
    sti.end(fi);
}

// dst[i] = src[offset of i]: one element (or one 16-byte run) of E per index.
template <typename E>
__global__ void gather_kernel(E *__restrict__ dst, const E *__restrict__ src, cuda_iter it,
                              int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[cuda_iter_offset(it, 1, i)];
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

template <typename E>
__global__ void transpose_kernel(E *__restrict__ dst, const E *__restrict__ src, transpose_desc t) {
    __shared__ E tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t a0 = blockIdx.y * 32, l0 = blockIdx.x * 32;
    for (int64_t b = blockIdx.z; b < t.batches; b += gridDim.z) {
        int64_t so = 0, d_o = 0, r = b;
        for (int k = t.nb - 1; k >= 0; k--) {
            so += (r % t.bshape[k]) * t.bsrc[k];
            d_o += (r % t.bshape[k]) * t.bdst[k];
            r /= t.bshape[k];
        }
        for (int k = ty; k < 32; k += 8) {
            const int64_t a = a0 + tx, l = l0 + k;
            if (a < t.na && l < t.nl) tile[k][tx] = src[so + a + l * t.src_l];
        }
        __syncthreads();
        for (int k = ty; k < 32; k += 8) {
            const int64_t a = a0 + k, l = l0 + tx;
            if (a < t.na && l < t.nl) dst[d_o + a * t.dst_a + l] = tile[tx][k];
        }
        __syncthreads();
    }
}

// Runs the tiled transpose when some dim other than the last is the source's contiguous one.
static bool transpose(cuda_ctx *c, void *dst, const void *src, const cuda_iter &it, size_t esize) {
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
    if (esize == 2)
        transpose_kernel<uint16_t>
            <<<grid, dim3(32, 8), 0, c->stream>>>((uint16_t *)dst, (const uint16_t *)src, t);
    else
        transpose_kernel<uint32_t>
            <<<grid, dim3(32, 8), 0, c->stream>>>((uint32_t *)dst, (const uint32_t *)src, t);
    CUDA_LAUNCH_CHECK();
    return true;
}

// Same-dtype strided copy in units of E (2, 4, 8 or 16 bytes): it's strides in elements of
// esize bytes are rescaled to units of E when the innermost run allows (else E = esize).
static void gather(cuda_ctx *c, void *dst, const void *src, cuda_iter it, int64_t n, size_t esize) {
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
        gather_kernel<uint4>
            <<<cuda_grid(n, 256, 2), 256, 0, c->stream>>>((uint4 *)dst, (const uint4 *)src, it, n);
    } else if (esize == 2) {
        gather_kernel<uint16_t><<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(
            (uint16_t *)dst, (const uint16_t *)src, it, n);
    } else if (esize == 4) {
        gather_kernel<uint32_t><<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(
            (uint32_t *)dst, (const uint32_t *)src, it, n);
    } else {
        gather_kernel<uint64_t><<<cuda_grid(n, 256, 4), 256, 0, c->stream>>>(
            (uint64_t *)dst, (const uint64_t *)src, it, n);
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
    const bool typed = cuda_is_contiguous(src) && amp_dtype_is_float(src->dtype) &&
                       amp_dtype_is_float(dst->dtype) &&
                       ((uintptr_t)amp_tensor_ptr(src) & 31) == 0 &&
                       ((uintptr_t)amp_tensor_ptr(dst) & 31) == 0;
    const cuda_fuse f = typed ? cuda_fuse_take(dst) : cuda_fuse{};
    if (cuda_is_contiguous(src) && src->dtype == dst->dtype && !f.slot) {
        CUDA_CHECK(cudaMemcpyAsync(amp_tensor_ptr(dst), amp_tensor_ptr(src),
                                   (size_t)n * amp_dtype_size(dst->dtype), cudaMemcpyDeviceToDevice,
                                   c->stream));
        return;
    }
    if (typed) {
        const cuda_fuse fi = cuda_fuse_take_input(c, src);
        const unsigned grid = cuda_grid(n, 256, 8);
        CUDA_DISPATCH_FLOAT(
            src->dtype, S, CUDA_DISPATCH_FLOAT(dst->dtype, D, {
                auto kernel = convert_kernel<true, S, D>;
                CUDA_FUSE_DISPATCH2(
                    f, fi, ST,
                    convert_kernel<ST, S, D>
                    <<<cuda_fuse_grid(f, fi, grid, 256, kernel), 256, 0, c->stream>>>(
                        (D *)amp_tensor_ptr(dst), (const S *)amp_tensor_ptr(src), n, f, fi));
            }));
        CUDA_LAUNCH_CHECK();
        return;
    }
    int64_t dstride[AMP_MAX_DIMS];
    cuda_contiguous_strides(dst->ndim, dst->shape, dstride);
    cuda_iter it;
    const int64_t *strides[2] = {dstride, src->stride};
    cuda_iter_init(&it, dst->ndim, dst->shape, 2, strides);
    if (src->dtype == dst->dtype && it.small) {
        if (transpose(c, amp_tensor_ptr(dst), amp_tensor_ptr(src), it, amp_dtype_size(dst->dtype)))
            return;
        gather(c, amp_tensor_ptr(dst), amp_tensor_ptr(src), it, n, amp_dtype_size(dst->dtype));
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
