/*
 * cpu-backend.c — the CPU reference backend's table and context, host memory, copy and fill, and
 * the helpers every CPU op shares (dtype-converting row loads and stores, the pairwise sum, the
 * strided iterator, the scratch workspace).
 *
 * The CPU backend is the oracle the CUDA backend is tested against: it computes every op in f32
 * and rounds once per stored element, like PyTorch's kernels.
 */
#include "cpu-impl.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// Context and workspace

void *amp_cpu_backend_init(void) {
    return amp_xcalloc(1, sizeof(amp_cpu_ctx));
}

static void cpu_release(void *bctx) {
    amp_cpu_ctx *c = bctx;
    if (!c) return;
    free(c->ws);
    free(c);
}

float *amp_cpu_workspace(void *bctx, size_t n) {
    amp_cpu_ctx *c = bctx;
    AMP_ASSERT(c != NULL, "(the CPU backend needs its context from amp_cpu_backend_init)");
    if (n > c->ws_floats) {
        free(c->ws);
        c->ws = amp_xmalloc(n * sizeof(float));
        c->ws_floats = n;
    }
    return c->ws;
}

// ---------------------------------------------------------------------------------------------
// Memory: host allocations

static void *cpu_alloc(void *bctx, size_t nbytes) {
    (void)bctx;
    return malloc(nbytes ? nbytes : 1); // uninitialised, as on a device
}

static void cpu_free(void *bctx, void *p) {
    (void)bctx;
    free(p);
}

static void cpu_memcpy(void *bctx, void *dst, const void *src, size_t nbytes) {
    (void)bctx;
    if (nbytes) memcpy(dst, src, nbytes);
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

void amp_cpu_load_f32(amp_dtype t, const void *p, int64_t stride, int64_t n, float *out) {
    switch (t) {
    case AMP_DTYPE_F32: {
        const float *s = p;
        if (stride == 1)
            memcpy(out, s, (size_t)n * sizeof(float));
        else
            for (int64_t i = 0; i < n; i++)
                out[i] = s[i * stride];
        return;
    }
    case AMP_DTYPE_F16: {
        const uint16_t *s = p;
        for (int64_t i = 0; i < n; i++) // amp_f16_table: a lookup, identical by construction
            out[i] = amp_f16_table[s[i * stride]];
        return;
    }
    case AMP_DTYPE_BF16: {
        const uint16_t *s = p;
        for (int64_t i = 0; i < n; i++)
            out[i] = amp_bf16_to_f32(s[i * stride]);
        return;
    }
    default:
        for (int64_t i = 0; i < n; i++)
            out[i] = amp_load_f32(t, p, i * stride);
        return;
    }
}

void amp_cpu_store_f32(amp_dtype t, void *p, int64_t n, const float *in) {
    switch (t) {
    case AMP_DTYPE_F32:
        memcpy(p, in, (size_t)n * sizeof(float));
        return;
    case AMP_DTYPE_F16: {
        uint16_t *d = p;
        for (int64_t i = 0; i < n; i++)
            d[i] = amp_f32_to_f16(in[i]);
        return;
    }
    case AMP_DTYPE_BF16: {
        uint16_t *d = p;
        for (int64_t i = 0; i < n; i++)
            d[i] = amp_f32_to_bf16(in[i]);
        return;
    }
    default:
        for (int64_t i = 0; i < n; i++)
            cpu_store(t, p, i, in[i]);
        return;
    }
}

float amp_cpu_sum_f32(const float *x, int64_t n) {
    if (n <= 64) {
        float acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += x[i + j];
        for (; i < n; i++)
            acc[i & 7] += x[i];
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    int64_t half = (n / 2 + 7) & ~(int64_t)7; // keep the halves' blocks aligned to eight
    return amp_cpu_sum_f32(x, half) + amp_cpu_sum_f32(x + half, n - half);
}

void amp_cpu_iter_init(cpu_iter *it, int ndim, const int64_t *shape, int nops,
                       const int64_t *const *strides) {
    AMP_ASSERT(nops >= 1 && nops <= CPU_ITER_OPS);
    AMP_ASSERT(ndim >= 0 && ndim <= AMP_MAX_DIMS);
    memset(it, 0, sizeof *it);
    it->nops = nops;
    it->ndim = amp_coalesce_dims(ndim, shape, nops, strides, it->shape, it->stride);
    it->len = it->shape[it->ndim - 1];
    it->rows = 1;
    for (int d = 0; d < it->ndim - 1; d++)
        it->rows *= it->shape[d];
    for (int o = 0; o < nops; o++)
        it->step[o] = it->stride[o][it->ndim - 1];
}

void amp_cpu_iter_next(cpu_iter *it) {
    for (int d = it->ndim - 2; d >= 0; d--) {
        for (int o = 0; o < it->nops; o++)
            it->off[o] += it->stride[o][d];
        if (++it->idx[d] < it->shape[d]) return;
        for (int o = 0; o < it->nops; o++)
            it->off[o] -= it->stride[o][d] * it->shape[d];
        it->idx[d] = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// copy and fill

static void cpu_copy_row_int(amp_tensor_t *dst, void *d, const amp_tensor_t *src, const void *s,
                             int64_t stride, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        int64_t v = cpu_load_index(src->dtype, s, i * stride);
        if (dst->dtype == AMP_DTYPE_I32)
            ((int32_t *)d)[i] = (int32_t)v;
        else
            ((int64_t *)d)[i] = v;
    }
}

static void cpu_copy_row_same(size_t esize, char *d, const char *s, int64_t stride, int64_t n) {
    if (stride == 1) {
        memcpy(d, s, (size_t)n * esize);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        cpu_copy_elem(d + i * (int64_t)esize, s + i * stride * (int64_t)esize, esize);
}

void amp_cpu_copy(void *bctx, amp_tensor_t *dst, const amp_tensor_t *src) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(dst);
    AMP_ASSERT(dst->ndim == src->ndim && cpu_numel(dst) == cpu_numel(src));
    for (int d = 0; d < dst->ndim; d++)
        AMP_ASSERT(dst->shape[d] == src->shape[d]);

    int64_t dstride[AMP_MAX_DIMS];
    amp_contiguous_strides(dst->ndim, dst->shape, dstride);
    cpu_iter it;
    amp_cpu_iter_init(&it, dst->ndim, dst->shape, 2, (const int64_t *[]){dstride, src->stride});

    const size_t dsz = amp_dtype_size(dst->dtype), ssz = amp_dtype_size(src->dtype);
    char *d = amp_tensor_ptr(dst);
    const char *s = amp_tensor_ptr(src);
    const bool ints = !amp_dtype_is_float(dst->dtype) && !amp_dtype_is_float(src->dtype);
    float buf[CPU_CHUNK];
    for (int64_t r = 0; r < it.rows; r++, amp_cpu_iter_next(&it)) {
        char *drow = d + it.off[0] * (int64_t)dsz;
        const char *srow = s + it.off[1] * (int64_t)ssz;
        if (dst->dtype == src->dtype) { // bit-exact, NaN payloads included
            cpu_copy_row_same(dsz, drow, srow, it.step[1], it.len);
        } else if (ints) { // no detour through float for large i64 values
            cpu_copy_row_int(dst, drow, src, srow, it.step[1], it.len);
        } else {
            for (int64_t j = 0; j < it.len; j += CPU_CHUNK) {
                int64_t n = it.len - j < CPU_CHUNK ? it.len - j : CPU_CHUNK;
                amp_cpu_load_f32(src->dtype, srow + j * it.step[1] * (int64_t)ssz, it.step[1], n,
                                 buf);
                amp_cpu_store_f32(dst->dtype, drow + j * (int64_t)dsz, n, buf);
            }
        }
    }
}

void amp_cpu_fill(void *bctx, amp_tensor_t *dst, float v) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(dst);
    const int64_t n = cpu_numel(dst);
    const size_t esize = amp_dtype_size(dst->dtype);
    char one[8];
    cpu_store(dst->dtype, one, 0, v); // round (or truncate, for integers) once
    char *d = amp_tensor_ptr(dst);
    for (int64_t i = 0; i < n; i++)
        cpu_copy_elem(d + i * (int64_t)esize, one, esize);
}

// ---------------------------------------------------------------------------------------------
// The table

static const amp_backend_i cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .copy = amp_cpu_copy,
    .fill = amp_cpu_fill,
    .unary = amp_cpu_unary,
    .unary_backward = amp_cpu_unary_backward,
    .binary = amp_cpu_binary,
    .reduce_sum = amp_cpu_reduce_sum,
    .gemm = amp_cpu_gemm,
    .softmax = amp_cpu_softmax,
    .softmax_backward = amp_cpu_softmax_backward,
    .layer_norm = amp_cpu_layer_norm,
    .layer_norm_backward = amp_cpu_layer_norm_backward,
    .embedding = amp_cpu_embedding,
    .embedding_backward = amp_cpu_embedding_backward,
    .im2col = amp_cpu_im2col,
    .col2im = amp_cpu_col2im,
    .max_pool2d = amp_cpu_max_pool2d,
    .max_pool2d_backward = amp_cpu_max_pool2d_backward,
    .nll_loss = amp_cpu_nll_loss,
    .nll_loss_backward = amp_cpu_nll_loss_backward,
    .masked_fill = amp_cpu_masked_fill,
    .dropout_mask = amp_cpu_dropout_mask,
    .unscale = amp_cpu_unscale,
    .scale_update = amp_cpu_scale_update,
    .optim_step = amp_cpu_optim_step,
    .synchronize = NULL, // host work is finished when a call returns
    .release = cpu_release,
};

const amp_backend_i *amp_cpu_backend(void) {
    return &cpu_backend;
}
