/*
 * cuda-reduce.cu — reduce_sum: y = alpha * x summed over the dims where y has size 1 (the
 * gradient of a broadcast), f32 accumulation.
 *
 * After merging neighbouring dims of one kind the shape is (R, K) — rows summed into one row, a
 * linear's bias gradient —, (A, K, L) summed over A and L — a convolution's bias gradient — or
 * anything else. (R, K) runs as coalesced column sums split over R into f32 partials and a
 * second pass; (A, K, L) as blocks per channel and slice of A walking contiguous runs of L, with
 * the same second pass; anything else gives each output one or more blocks
 * (enough to fill the GPU) whose threads stride over a slice of its reduced elements, with the
 * blocks' partial sums added by the same second pass.
 */
#include "cuda-fuse.h"

// Shape and x-strides of one class of dims (kept or reduced), outermost first.
typedef struct reduce_dims {
    int ndim;
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    int64_t count;
} reduce_dims;

// Offset of index i of d in x; 32-bit arithmetic when x has fewer than 2^31 elements.
__device__ __forceinline__ int64_t dims_offset(const reduce_dims &d, int64_t i, bool small) {
    int64_t off = 0;
    if (small) {
        uint32_t j = (uint32_t)i;
        for (int k = d.ndim - 1; k >= 0; k--) {
            off += (int64_t)(j % (uint32_t)d.shape[k]) * d.stride[k];
            j /= (uint32_t)d.shape[k];
        }
        return off;
    }
    for (int k = d.ndim - 1; k >= 0; k--) {
        off += (i % d.shape[k]) * d.stride[k];
        i /= d.shape[k];
    }
    return off;
}

#define REDUCE_BLOCK 256

// Output o = blockIdx.x, reduced elements [blockIdx.y * per, +per): partial[blockIdx.y][o].
__global__ void reduce_general_kernel(float *partial, const void *x, amp_dtype xt, reduce_dims kept,
                                      reduce_dims red, int64_t per, bool small) {
    const int64_t o = blockIdx.x, base = dims_offset(kept, o, small);
    const int64_t r0 = blockIdx.y * per, r1 = r0 + per < red.count ? r0 + per : red.count;
    float s = 0.0f;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
        s += cuda_load(xt, x, base + dims_offset(red, r, small));
    s = cuda_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.y * kept.count + o] = s;
}

// Column sums of x (rows, cols) in 16-byte vectors of T (cols a whole number of them, x 16-byte
// aligned): a block is 32 vectors of columns by 8 lanes of rows, rows split into gridDim.y chunks,
// the lanes' sums added in shared memory: partial[chunk][col]. x's held statistics (fi) are
// added as it is read (a linear's output gradient that no activation's backward wrote).
template <bool S, typename T>
__global__ void __launch_bounds__(256)
    reduce_cols_vec_kernel(float *partial, const T *x, int64_t rows, int64_t cols,
                           int64_t rows_per_chunk, cuda_fuse fi) {
    constexpr int V = 16 / sizeof(T);
    const int64_t cv = blockIdx.x * 32 + threadIdx.x, vcols = cols / V;
    const int64_t r0 = blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float s[V] = {};
    stored_stats<S, T> st(fi);
    if (cv < vcols) {
#pragma unroll 4
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
            const uint4 raw = ((const uint4 *)(x + r * cols))[cv];
            const T *v = (const T *)&raw;
#pragma unroll
            for (int j = 0; j < V; j++)
                s[j] += cuda_io<T>::load(v[j]);
            st.values(v, fi.lim);
        }
    }
    st.end(fi);
    __shared__ float lanes[8][32 * V];
#pragma unroll
    for (int j = 0; j < V; j++)
        lanes[threadIdx.y][threadIdx.x * V + j] = s[j];
    __syncthreads();
    // thread (x, y) adds up columns x + 32 * j of the block's 32 * V, over the 8 lanes
    for (int j = threadIdx.y; j < V; j += 8) {
        const int k = threadIdx.x + 32 * j;
        const int64_t col = blockIdx.x * 32 * (int64_t)V + k;
        if (col >= cols) continue;
        float t = 0.0f;
#pragma unroll
        for (int l = 0; l < 8; l++)
            t += lanes[l][k];
        partial[blockIdx.y * cols + col] = t;
    }
}

// Column sums of x (rows, cols), rows split into gridDim.y chunks: partial[chunk][col].
__global__ void reduce_cols_kernel(float *partial, const void *x, amp_dtype xt, int64_t rows,
                                   int64_t cols, int64_t rows_per_chunk) {
    const int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const int64_t r0 = blockIdx.y * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float s = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        s += cuda_load(xt, x, r * cols + col);
    partial[blockIdx.y * cols + col] = s;
}

// (A, K, L) summed over A and L: block (k, slice of A) sums its rows of L: partial[slice][k].
__global__ void reduce_channels_kernel(float *partial, const void *x, amp_dtype xt, int64_t A,
                                       int64_t K, int64_t L, int64_t a_per) {
    const int64_t k = blockIdx.x, a0 = blockIdx.y * a_per;
    const int64_t a1 = a0 + a_per < A ? a0 + a_per : A;
    float s = 0.0f;
    for (int64_t a = a0; a < a1; a++) {
        const int64_t base = (a * K + k) * L;
        for (int64_t l = threadIdx.x; l < L; l += blockDim.x)
            s += cuda_load(xt, x, base + l);
    }
    s = cuda_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.y * K + k] = s;
}

// y[col] = alpha * the sum of partial[k][col] over k < chunks: a block is 32 columns by 32
// lanes of k, the lanes' sums added in shared memory (in a fixed order: the same bits every run).
__global__ void __launch_bounds__(1024)
    reduce_partials_kernel(void *y, amp_dtype yt, const float *partial, int chunks, int64_t cols,
                           float alpha) {
    const int64_t col = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (col < cols) {
#pragma unroll 4
        for (int k = threadIdx.y; k < chunks; k += 32)
            s += partial[k * cols + col];
    }
    __shared__ float lanes[32][33];
    lanes[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
    float t = 0.0f;
#pragma unroll
    for (int l = 0; l < 32; l++)
        t += lanes[l][threadIdx.x];
    cuda_store(yt, y, col, t * alpha);
}

static void sum_partials(cuda_ctx *c, void *y, amp_dtype yt, const float *partial, int chunks,
                         int64_t cols, float alpha) {
    reduce_partials_kernel<<<(unsigned)((cols + 31) / 32), dim3(32, 32), 0, c->stream>>>(
        y, yt, partial, chunks, cols, alpha);
    CUDA_LAUNCH_CHECK();
}

void cuda_sum_partials(cuda_ctx *c, amp_tensor_t *y, const float *partial, int parts,
                       int64_t cols) {
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_FLOAT(y);
    AMP_ASSERT(cuda_numel(y) == cols && parts > 0);
    sum_partials(c, amp_tensor_ptr(y), y->dtype, partial, parts, cols, 1.0f);
}

// x's dims with y's size-1 ones marked summed over (kind[d] = 1), size-1 dims of x dropped and
// neighbours of one kind merged into one (x is contiguous); returns how many dims are left.
static int merge_dims(const amp_tensor_t *y, const amp_tensor_t *x, int kind[], int64_t shape[],
                      int64_t stride[]) {
    int64_t xstride[AMP_MAX_DIMS];
    amp_contiguous_strides(x->ndim, x->shape, xstride);
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        AMP_ASSERT(y->shape[d] == x->shape[d] || y->shape[d] == 1, "(dim %d)", d);
        if (x->shape[d] == 1) continue;
        const int k = y->shape[d] != x->shape[d];
        if (nd > 0 && kind[nd - 1] == k) { // contiguous x: the outer dim steps over this one
            shape[nd - 1] *= x->shape[d];
            stride[nd - 1] = xstride[d];
            continue;
        }
        kind[nd] = k;
        shape[nd] = x->shape[d];
        stride[nd] = xstride[d];
        nd++;
    }
    return nd;
}

// (rows, cols) summed over rows in 16-byte vectors (cols a whole number of them, x aligned to 16).
static void sum_cols_vec(cuda_ctx *c, amp_tensor_t *y, const amp_tensor_t *x, int64_t rows,
                         int64_t cols, float alpha) {
    const int V = 16 / (int)amp_dtype_size(x->dtype);
    const unsigned col_blocks = (unsigned)((cols / V + 31) / 32);
    int64_t per; // about two waves of 256-thread blocks, at least 8 rows a lane
    const int64_t chunks = cuda_split(rows, (2 * 8 * cuda_sm_count() + col_blocks - 1) / col_blocks,
                                      (rows + 63) / 64, &per);
    float *partial = (float *)cuda_scratch(c, (size_t)(chunks * cols) * sizeof(float));
    const void *xp = amp_tensor_ptr(x);
    const cuda_fuse fi = cuda_fuse_take_input(c, x);
    CUDA_DISPATCH_FLOAT(x->dtype, T, {
        CUDA_FUSE_DISPATCH(fi, S,
                           reduce_cols_vec_kernel<S, T>
                           <<<dim3(col_blocks, (unsigned)chunks), dim3(32, 8), 0, c->stream>>>(
                               partial, (const T *)xp, rows, cols, per, fi));
    });
    CUDA_LAUNCH_CHECK();
    sum_partials(c, amp_tensor_ptr(y), y->dtype, partial, (int)chunks, cols, alpha);
}

// (rows, cols) summed over rows: coalesced column sums.
static void sum_cols(cuda_ctx *c, amp_tensor_t *y, const amp_tensor_t *x, int64_t rows,
                     int64_t cols, float alpha) {
    const int64_t col_blocks = (cols + 255) / 256;
    int64_t per; // about two waves of blocks
    const int64_t chunks =
        cuda_split(rows, (2 * cuda_sm_count() + col_blocks - 1) / col_blocks, rows, &per);
    float *partial = (float *)cuda_scratch(c, (size_t)(chunks * cols) * sizeof(float));
    reduce_cols_kernel<<<dim3((unsigned)col_blocks, (unsigned)chunks), 256, 0, c->stream>>>(
        partial, amp_tensor_ptr(x), x->dtype, rows, cols, per);
    CUDA_LAUNCH_CHECK();
    sum_partials(c, amp_tensor_ptr(y), y->dtype, partial, (int)chunks, cols, alpha);
}

// (A, K, L) summed over A and L: a block per channel and slice of A.
static void sum_channels(cuda_ctx *c, amp_tensor_t *y, const amp_tensor_t *x, int64_t A, int64_t K,
                         int64_t L, float alpha) {
    int64_t per; // a few waves of blocks
    const int64_t slices = cuda_split(A, (4 * cuda_sm_count() + K - 1) / K, A, &per);
    float *partial = (float *)cuda_scratch(c, (size_t)(slices * K) * sizeof(float));
    reduce_channels_kernel<<<dim3((unsigned)K, (unsigned)slices), REDUCE_BLOCK, 0, c->stream>>>(
        partial, amp_tensor_ptr(x), x->dtype, A, K, L, per);
    CUDA_LAUNCH_CHECK();
    sum_partials(c, amp_tensor_ptr(y), y->dtype, partial, (int)slices, K, alpha);
}

// Any other shape: nd merged dims of x, kind[d] = 1 where summed over.
static void sum_general(cuda_ctx *c, amp_tensor_t *y, const amp_tensor_t *x, int nd,
                        const int kind[], const int64_t shape[], const int64_t stride[],
                        float alpha) {
    reduce_dims kept = {0, {0}, {0}, 1}, red = {0, {0}, {0}, 1};
    for (int d = 0; d < nd; d++) {
        reduce_dims *r = kind[d] ? &red : &kept;
        r->shape[r->ndim] = shape[d];
        r->stride[r->ndim] = stride[d];
        r->ndim++;
        r->count *= shape[d];
    }
    if (kept.ndim == 0) kept = {1, {1}, {0}, 1};
    if (red.ndim == 0) red = {1, {1}, {0}, 1};
    const int64_t ny = cuda_numel(y);
    AMP_ASSERT(kept.count == ny && ny <= INT32_MAX);
    int64_t per; // enough blocks to fill the GPU a few times over, each summing >= 1024 elements
    const int64_t splits =
        cuda_split(red.count, (4 * cuda_sm_count() + ny - 1) / ny, (red.count + 1023) / 1024, &per);
    float *partial = (float *)cuda_scratch(c, (size_t)(splits * ny) * sizeof(float));
    reduce_general_kernel<<<dim3((unsigned)ny, (unsigned)splits), REDUCE_BLOCK, 0, c->stream>>>(
        partial, amp_tensor_ptr(x), x->dtype, kept, red, per, cuda_numel(x) <= INT32_MAX);
    CUDA_LAUNCH_CHECK();
    sum_partials(c, amp_tensor_ptr(y), y->dtype, partial, (int)splits, ny, alpha);
}

void cuda_reduce_sum(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, float alpha) {
    cuda_ctx *c = cuda_of(bctx);
    CUDA_ASSERT_CONTIGUOUS(y);
    CUDA_ASSERT_CONTIGUOUS(x);
    CUDA_ASSERT_FLOAT(y);
    AMP_ASSERT(x->ndim == y->ndim);
    if (cuda_numel(y) == 0) return;
    if (cuda_numel(x) == 0) { // a sum over nothing (a bias's gradient over an empty batch): 0
        cuda_fill(bctx, y, 0.0f);
        return;
    }
    int kind[AMP_MAX_DIMS];
    int64_t shape[AMP_MAX_DIMS], stride[AMP_MAX_DIMS];
    const int nd = merge_dims(y, x, kind, shape, stride);
    if (nd == 2 && kind[0] == 1 && kind[1] == 0) { // (R, K): column sums
        const int V = 16 / (int)amp_dtype_size(x->dtype);
        if (amp_dtype_is_float(x->dtype) && shape[1] % V == 0 &&
            ((uintptr_t)amp_tensor_ptr(x) & 15) == 0)
            return sum_cols_vec(c, y, x, shape[0], shape[1], alpha);
        if (shape[1] >= 64) return sum_cols(c, y, x, shape[0], shape[1], alpha);
    }
    if (nd == 3 && kind[0] == 1 && kind[1] == 0 && kind[2] == 1)
        return sum_channels(c, y, x, shape[0], shape[1], shape[2], alpha);
    sum_general(c, y, x, nd, kind, shape, stride, alpha);
}
