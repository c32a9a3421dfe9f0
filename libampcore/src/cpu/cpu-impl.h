/*
 * cpu-impl.h — internals shared by the CPU reference backend's files: the backend context and its
 * scratch workspace, element loads and stores that convert the storage dtype to and from f32,
 * the strided iterator, and the op entry points that cpu-backend.c puts into the table.
 *
 * Every floating load widens the storage dtype to float exactly, every store rounds once with
 * the dtype's round-to-nearest-even conversion from dtype.c, so a value only ever changes where
 * PyTorch rounds it too.
 */
#ifndef AMP_CPU_IMPL_H
#define AMP_CPU_IMPL_H

#include "amp-impl.h"

#include <stdint.h>
#include <string.h>

// Elements converted per stack chunk by the row helpers (1 KiB of floats).
#define CPU_CHUNK 256

// The backend context: one per amp context, used by one thread at a time.
typedef struct amp_cpu_ctx {
    float *ws;        // grow-only scratch (packed GEMM panels, f32 accumulators)
    size_t ws_floats; // capacity of ws
} amp_cpu_ctx;

// A scratch buffer of at least n floats, valid until the next call (one per op).
float *amp_cpu_workspace(void *bctx, size_t n);

// ---------------------------------------------------------------------------------------------
// Element access

static inline void cpu_store(amp_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case AMP_DTYPE_F32:
        ((float *)p)[i] = v;
        return;
    case AMP_DTYPE_F16:
        ((uint16_t *)p)[i] = amp_f32_to_f16(v);
        return;
    case AMP_DTYPE_BF16:
        ((uint16_t *)p)[i] = amp_f32_to_bf16(v);
        return;
    case AMP_DTYPE_I32:
        ((int32_t *)p)[i] = (int32_t)v;
        return;
    case AMP_DTYPE_I64:
        ((int64_t *)p)[i] = (int64_t)v;
        return;
    default:
        break;
    }
    amp_abort(__FILE__, __LINE__, "bad dtype %d", (int)t);
}

// Copies one element of esize bytes (2, 4 or 8): a fixed-size copy the compiler inlines.
static inline void cpu_copy_elem(void *d, const void *s, size_t esize) {
    switch (esize) {
    case 2:
        memcpy(d, s, 2);
        return;
    case 4:
        memcpy(d, s, 4);
        return;
    default:
        memcpy(d, s, 8);
        return;
    }
}

// An integer tensor element (class indices, masks); i32 or i64 only.
static inline int64_t cpu_load_index(amp_dtype t, const void *p, int64_t i) {
    AMP_ASSERT(t == AMP_DTYPE_I32 || t == AMP_DTYPE_I64, "(index dtype %s)", amp_dtype_name(t));
    return t == AMP_DTYPE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

// out[0..n) = p[0], p[stride], ... widened to float.
void amp_cpu_load_f32(amp_dtype t, const void *p, int64_t stride, int64_t n, float *out);
// p[0..n) (contiguous) = in rounded to t.
void amp_cpu_store_f32(amp_dtype t, void *p, int64_t n, const float *in);

// Sum of n floats, pairwise down to blocks of at most 64 (each summed in eight interleaved
// partial sums), so the error grows with log(n) rather than n; deterministic.
float amp_cpu_sum_f32(const float *x, int64_t n);

static inline int64_t cpu_numel(const amp_tensor_t *t) {
    return amp_numel(t);
}

// Last dim (1 for a 0-dim tensor) and the number of rows above it.
static inline int64_t cpu_row_len(const amp_tensor_t *t) {
    return t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
}

#define CPU_ASSERT_CONTIGUOUS(t) AMP_ASSERT(amp_is_contiguous(t), "(%s must be contiguous)", #t)
#define CPU_ASSERT_FLOAT(t)                                                                        \
    AMP_ASSERT(amp_dtype_is_float((t)->dtype), "(%s is %s)", #t, amp_dtype_name((t)->dtype))

// ---------------------------------------------------------------------------------------------
// Strided iteration: walks a shape row by row (a row is the innermost dim) for up to
// CPU_ITER_OPS operands, each with its own strides (0 on broadcast dims). Size-1 dims are dropped
// and neighbouring dims merged where every operand steps evenly across them, so a contiguous
// tensor is one long row.
//
//     cpu_iter it;
//     amp_cpu_iter_init(&it, y->ndim, y->shape, 2, (const int64_t *[]){ystride, x->stride});
//     for (int64_t r = 0; r < it.rows; r++, amp_cpu_iter_next(&it))
//         ... it.len elements at it.off[op] + j * it.step[op] ...

#define CPU_ITER_OPS 3

typedef struct cpu_iter {
    int nops, ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t stride[CPU_ITER_OPS][AMP_MAX_DIMS];
    int64_t idx[AMP_MAX_DIMS];  // position of the current row in the outer dims
    int64_t rows, len;          // number of rows, elements per row
    int64_t off[CPU_ITER_OPS];  // element offset of the current row, per operand
    int64_t step[CPU_ITER_OPS]; // element stride along a row, per operand
} cpu_iter;

void amp_cpu_iter_init(cpu_iter *it, int ndim, const int64_t *shape, int nops,
                       const int64_t *const *strides);
void amp_cpu_iter_next(cpu_iter *it);

// ---------------------------------------------------------------------------------------------
// Ops (signatures of the amp_backend_i members they implement)

void amp_cpu_copy(void *bctx, amp_tensor_t *dst, const amp_tensor_t *src);
void amp_cpu_fill(void *bctx, amp_tensor_t *dst, float v);

void amp_cpu_unary(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *y,
                   const amp_tensor_t *x);
void amp_cpu_unary_backward(void *bctx, amp_unary_op op, float alpha, amp_tensor_t *dx,
                            const amp_tensor_t *dy, const amp_tensor_t *x, const amp_tensor_t *y,
                            int64_t bias_cols);
void amp_cpu_binary(void *bctx, amp_binary_op op, amp_tensor_t *y, const amp_tensor_t *a,
                    const amp_tensor_t *b);
void amp_cpu_reduce_sum(void *bctx, amp_tensor_t *y, const amp_tensor_t *x, float alpha);
void amp_cpu_masked_fill(void *bctx, amp_tensor_t *y, const amp_tensor_t *x,
                         const amp_tensor_t *mask, float value);
void amp_cpu_dropout_mask(void *bctx, amp_tensor_t *mask, float p, uint64_t seed, uint64_t offset);

void amp_cpu_gemm(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                  const amp_tensor_t *b, const amp_tensor_t *bias);

void amp_cpu_softmax(void *bctx, bool log, amp_tensor_t *y, const amp_tensor_t *x);
void amp_cpu_softmax_backward(void *bctx, bool log, amp_tensor_t *dx, const amp_tensor_t *dy,
                              const amp_tensor_t *y);
void amp_cpu_layer_norm(void *bctx, amp_tensor_t *y, amp_tensor_t *mean, amp_tensor_t *rstd,
                        const amp_tensor_t *x, const amp_tensor_t *w, const amp_tensor_t *b,
                        float eps);
void amp_cpu_layer_norm_backward(void *bctx, amp_tensor_t *dx, amp_tensor_t *dw, amp_tensor_t *db,
                                 const amp_tensor_t *dy, const amp_tensor_t *x,
                                 const amp_tensor_t *mean, const amp_tensor_t *rstd,
                                 const amp_tensor_t *w);
void amp_cpu_embedding(void *bctx, amp_tensor_t *y, const amp_tensor_t *idx, const amp_tensor_t *w);
void amp_cpu_embedding_backward(void *bctx, amp_tensor_t *dw, const amp_tensor_t *dy,
                                const amp_tensor_t *idx);
void amp_cpu_nll_loss(void *bctx, amp_tensor_t *loss, const amp_tensor_t *logp,
                      const amp_tensor_t *target);
void amp_cpu_nll_loss_backward(void *bctx, amp_tensor_t *dlogp, const amp_tensor_t *dloss,
                               const amp_tensor_t *target);

void amp_cpu_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols, const amp_tensor_t *x);
void amp_cpu_col2im(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx, const amp_tensor_t *cols);
void amp_cpu_max_pool2d(void *bctx, amp_tensor_t *y, amp_tensor_t *argmax, const amp_tensor_t *x,
                        int kernel, int stride);
void amp_cpu_max_pool2d_backward(void *bctx, amp_tensor_t *dx, const amp_tensor_t *dy,
                                 const amp_tensor_t *argmax, int kernel, int stride);

void amp_cpu_unscale(void *bctx, amp_tensor_t *const *grads, const amp_tensor_t *const *from, int n,
                     const amp_tensor_t *inv_scale, amp_tensor_t *found_inf);
void amp_cpu_scale_update(void *bctx, amp_tensor_t *scale, amp_tensor_t *inv_scale,
                          amp_tensor_t *tracker, amp_tensor_t *const *found_infs,
                          const bool *stepped, int n, const amp_scaler_params *p,
                          amp_tensor_t *rec);
void amp_cpu_optim_step(void *bctx, const amp_optim_params *p, amp_tensor_t *const *params,
                        amp_tensor_t *const *grads, amp_tensor_t *const *m, amp_tensor_t *const *v,
                        amp_tensor_t *const *lowered, int n, amp_tensor_t *counts,
                        const int32_t *idx, const amp_tensor_t *found_inf);

#endif // AMP_CPU_IMPL_H
