/*
 * ops-linalg.c — the GEMM-class ops (linear, mm, bmm, matmul, addmm) and conv2d (im2col + GEMM),
 * forward and backward. All run as one backend GEMM with f32 accumulation; a 1-D bias is added
 * in the GEMM epilogue before the single rounding, as cuBLASLt's bias epilogue does.
 */
#include "amp-impl.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// One GEMM node for every matrix product:
//   y (..., m, n) = a (..., m, k) @ op(b) [+ bias (n)]
// where b is either shared, (k, n) or with bt (n, k) like a linear weight, or batched with the
// same leading dims as a.

typedef struct gemm_shape {
    int64_t batch, m, n, k;
    bool shared_b;
} gemm_shape;

static gemm_shape gemm_shape_of(const amp_tensor_t *a, const amp_tensor_t *b, bool bt) {
    gemm_shape g = {0};
    char s1[64], s2[64];
    AMP_ASSERT(a->ndim >= 1 && b->ndim >= 2, "(matmul of %s and %s)", amp_shape_str(a, s1, 64),
               amp_shape_str(b, s2, 64));
    g.k = a->shape[a->ndim - 1];
    int64_t bk = bt ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    g.n = bt ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    AMP_ASSERT(bk == g.k, "(mat1 and mat2 shapes cannot be multiplied: %s and %s)",
               amp_shape_str(a, s1, 64), amp_shape_str(b, s2, 64));
    g.shared_b = b->ndim == 2;
    if (g.shared_b) { // every leading dim of a folds into m (k may be 0)
        g.batch = 1;
        g.m = 1;
        for (int i = 0; i < a->ndim - 1; i++)
            g.m *= a->shape[i];
        return g;
    }
    AMP_ASSERT(a->ndim == b->ndim, "(batched matmul needs equal ranks: %s and %s)",
               amp_shape_str(a, s1, 64), amp_shape_str(b, s2, 64));
    g.batch = 1;
    for (int i = 0; i < a->ndim - 2; i++) {
        AMP_ASSERT(a->shape[i] == b->shape[i], "(batch dims differ: %s and %s)",
                   amp_shape_str(a, s1, 64), amp_shape_str(b, s2, 64));
        g.batch *= a->shape[i];
    }
    g.m = a->shape[a->ndim - 2];
    return g;
}

// Whether node n's backward takes a linear's bias gradient (the sum of dy's rows) through the
// backend's gemm_bgrad, beside its weight-gradient GEMM (from column sums that the backward which
// wrote dy may have taken: no pass over dy of its own).
static bool bias_in_gemm(const amp_ctx_t *ctx, const amp_node *n, const gemm_shape *g) {
    const amp_tensor_t *bias = n->in[2];
    return ctx->be->gemm_bgrad && bias && bias->requires_grad && n->in[1]->requires_grad &&
           n->i[0] && g->shared_b && bias->ndim == 1 && bias->shape[0] == g->n;
}

static void gemm_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *a = n->in[0], *b = n->in[1], *bias = n->in[2];
    amp_tensor_t *ad = n->saved[0], *bd = n->saved[1];
    bool bt = n->i[0];
    gemm_shape g = gemm_shape_of(a, b, bt);
    amp_tensor_t *dyd = amp_dense(ctx, dy), *dbias = NULL;
    if (a->requires_grad) { // da = dy @ op(b)^T
        amp_tensor_t *da = amp_scratch_new(ctx, a->dtype, a->ndim, a->shape);
        amp_gemm_desc d = {.batch = g.batch,
                           .m = g.m,
                           .n = g.k,
                           .k = g.n,
                           .trans_b = !bt,
                           .stride_a = g.m * g.n,
                           .stride_b = g.shared_b ? 0 : g.k * g.n,
                           .stride_c = g.m * g.k,
                           .alpha = 1.0f};
        ctx->be->gemm(ctx->bctx, &d, da, dyd, bd, NULL);
        amp_grad_accumulate(ctx, a, da);
    }
    if (b->requires_grad) {
        amp_tensor_t *db = amp_scratch_new(ctx, b->dtype, b->ndim, b->shape);
        // shared b: the batch folds into the reduction dim (rows = batch * m)
        int64_t batch = g.shared_b ? 1 : g.batch;
        amp_gemm_desc d = {.batch = batch, .k = g.m, .trans_a = true, .alpha = 1.0f};
        if (!bt) { // db (k, n) = a^T @ dy
            d.m = g.k, d.n = g.n;
            d.stride_a = g.m * g.k, d.stride_b = g.m * g.n, d.stride_c = g.k * g.n;
            ctx->be->gemm(ctx->bctx, &d, db, ad, dyd, NULL);
        } else { // db (n, k) = dy^T @ a
            d.m = g.n, d.n = g.k;
            d.stride_a = g.m * g.n, d.stride_b = g.m * g.k, d.stride_c = g.k * g.n;
            if (bias_in_gemm(ctx, n, &g)) {
                dbias = amp_scratch_new(ctx, bias->dtype, 1, bias->shape);
                ctx->be->gemm_bgrad(ctx->bctx, &d, db, dyd, ad, dbias);
            } else {
                ctx->be->gemm(ctx->bctx, &d, db, dyd, ad, NULL);
            }
        }
        amp_grad_accumulate(ctx, b, db);
    }
    if (bias && bias->requires_grad)
        amp_grad_accumulate(ctx, bias,
                            dbias ? dbias : amp_sum_to(ctx, dy, bias->ndim, bias->shape));
}

// in = {a, b, bias-or-NULL} after autocast. The caller describes the op to the instrumentation.
static amp_tensor_t *gemm_run(amp_ctx_t *ctx, const char *op, amp_tensor_t **in, bool bt) {
    amp_tensor_t *a = in[0], *b = in[1], *bias = in[2];
    AMP_ASSERT(amp_dtype_is_float(a->dtype) && a->dtype == b->dtype,
               "(%s: expected both operands to have the same floating dtype, got %s and %s)", op,
               amp_dtype_name(a->dtype), amp_dtype_name(b->dtype));
    gemm_shape g = gemm_shape_of(a, b, bt);
    int64_t shape[AMP_MAX_DIMS];
    int ndim = a->ndim;
    memcpy(shape, a->shape, sizeof shape);
    shape[ndim - 1] = g.n;
    amp_tensor_t *y = amp_scratch_new(ctx, a->dtype, ndim, shape);
    amp_tensor_t *ad = amp_dense(ctx, a), *bd = amp_dense(ctx, b), *bias1 = NULL;
    amp_gemm_desc d = {.batch = g.batch,
                       .m = g.m,
                       .n = g.n,
                       .k = g.k,
                       .trans_b = bt,
                       .stride_a = g.m * g.k,
                       .stride_b = g.shared_b ? 0 : g.k * g.n,
                       .stride_c = g.m * g.n,
                       .alpha = 1.0f};
    if (bias) {
        AMP_ASSERT(bias->dtype == a->dtype, "(%s: bias is %s, operands %s)", op,
                   amp_dtype_name(bias->dtype), amp_dtype_name(a->dtype));
        if (bias->ndim == 1 && bias->shape[0] == g.n) {
            bias1 = amp_dense(ctx, bias);
        } else { // a full bias: C starts as the broadcast bias
            ctx->be->copy(ctx->bctx, y, amp_expand(ctx, bias, ndim, shape));
            d.beta = 1.0f;
        }
    }
    ctx->be->gemm(ctx->bctx, &d, y, ad, bd, bias1);
    amp_node *n = amp_node_record(ctx, op, gemm_backward, y, in, 3);
    if (n) {
        n->i[0] = bt;
        amp_node_save(n, 0, ad);
        amp_node_save(n, 1, bd);
        // each operand for the other's gradient, as PyTorch saves them: a weight written
        // between the forward and the backward of a layer whose input needs no gradient is fine
        n->reads = (b->requires_grad ? AMP_READS_SAVED(0) : 0) |
                   (a->requires_grad ? AMP_READS_SAVED(1) : 0);
    }
    return y;
}

static amp_tensor_t *gemm_op(amp_ctx_t *ctx, const char *op, amp_tensor_t **in, bool bt) {
    amp_tensor_t *y = gemm_run(ctx, op, in, bt);
    amp_instr_op(ctx, op, amp_autocast_policy(op), y, in, in[2] ? 3 : 2);
    return y;
}

int64_t amp_linear_bias_cols(const amp_ctx_t *ctx, const amp_tensor_t *y) {
    const amp_node *n = y->node;
    if (!n || n->backward != gemm_backward || n->out != y) return 0;
    const gemm_shape g = gemm_shape_of(n->in[0], n->in[1], n->i[0]);
    return bias_in_gemm(ctx, n, &g) ? g.n : 0;
}

amp_tensor_t *amp_linear(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b) {
    AMP_ASSERT(w->ndim == 2 && (!b || b->ndim == 1), "(linear weight must be 2-D, bias 1-D)");
    amp_tensor_t *in[3] = {x, w, b};
    amp_autocast_apply(ctx, "linear", in, 3);
    return gemm_op(ctx, "linear", in, true);
}

amp_tensor_t *amp_mm(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    AMP_ASSERT(a->ndim == 2 && b->ndim == 2, "(mm needs 2-D operands)");
    amp_tensor_t *in[3] = {a, b, NULL};
    amp_autocast_apply(ctx, "mm", in, 2);
    return gemm_op(ctx, "mm", in, false);
}

amp_tensor_t *amp_bmm(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    AMP_ASSERT(a->ndim == 3 && b->ndim == 3, "(bmm needs 3-D operands)");
    amp_tensor_t *in[3] = {a, b, NULL};
    amp_autocast_apply(ctx, "bmm", in, 2);
    return gemm_op(ctx, "bmm", in, false);
}

static void broadcast_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_grad_accumulate(ctx, n->in[0], amp_sum_to(ctx, dy, n->in[0]->ndim, n->in[0]->shape));
}

// x expanded to shape (torch's expand, and the copy a batched GEMM then makes of it), with its
// gradient summed back to x's shape.
static amp_tensor_t *broadcast_to(amp_ctx_t *ctx, amp_tensor_t *x, int ndim, const int64_t *shape) {
    amp_tensor_t *y = amp_scratch_new(ctx, x->dtype, ndim, shape);
    ctx->be->copy(ctx->bctx, y, amp_expand(ctx, x, ndim, shape));
    amp_node *n = amp_node_record(ctx, "expand", broadcast_backward, y, &x, 1);
    if (n) n->reads = 0;
    return y;
}

// a and b with their leading (batch) dims broadcast to one shape, as torch.matmul does, when b
// has any (a (..., M, K) @ (K, N) folds a's into M instead).
static void broadcast_batch(amp_ctx_t *ctx, amp_tensor_t **a, amp_tensor_t **b) {
    amp_tensor_t *x = *a, *y = *b;
    if (y->ndim <= 2) return;
    const int nb = (x->ndim > y->ndim ? x->ndim : y->ndim) - 2; // batch dims of the result
    int64_t batch[AMP_MAX_DIMS];
    char s1[AMP_SHAPE_STR_MAX], s2[AMP_SHAPE_STR_MAX];
    for (int i = 0; i < nb; i++) { // aligned from the right, a missing dim counts as 1
        const int ia = i - (nb - (x->ndim - 2)), ib = i - (nb - (y->ndim - 2));
        const int64_t da = ia >= 0 ? x->shape[ia] : 1, db = ib >= 0 ? y->shape[ib] : 1;
        AMP_ASSERT(da == db || da == 1 || db == 1,
                   "(matmul: the batch dims of %s and %s cannot be broadcast together)",
                   amp_shape_str(x, s1, sizeof s1), amp_shape_str(y, s2, sizeof s2));
        batch[i] = da == 1 ? db : da;
    }
    amp_tensor_t **t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        amp_tensor_t *v = *t[k];
        int64_t shape[AMP_MAX_DIMS];
        memcpy(shape, batch, (size_t)nb * sizeof *batch);
        shape[nb] = v->shape[v->ndim - 2];
        shape[nb + 1] = v->shape[v->ndim - 1];
        bool same = v->ndim == nb + 2;
        for (int i = 0; same && i < nb; i++)
            same = v->shape[i] == batch[i];
        if (!same) *t[k] = broadcast_to(ctx, v, nb + 2, shape);
    }
}

// torch.matmul: a 1-D operand is a row (a) or a column (b) taken out of the result again, and
// the batch dims broadcast.
amp_tensor_t *amp_matmul(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    AMP_ASSERT(a->ndim >= 1 && b->ndim >= 1, "(matmul: both arguments need at least 1 dimension)");
    amp_tensor_t *in[3] = {a, b, NULL};
    amp_autocast_apply(ctx, "matmul", in, 2);
    amp_tensor_t *operands[2] = {in[0], in[1]}; // as the caller gave them (cast): the op's record
    const bool row = a->ndim == 1, col = b->ndim == 1;
    if (row) in[0] = amp_reshape(ctx, in[0], 2, (int64_t[]){1, a->shape[0]});
    if (col) in[1] = amp_reshape(ctx, in[1], 2, (int64_t[]){b->shape[0], 1});
    broadcast_batch(ctx, &in[0], &in[1]);
    amp_tensor_t *y = gemm_run(ctx, "matmul", in, false), *out = y;
    if (row || col) {
        int64_t shape[AMP_MAX_DIMS];
        int nd = 0;
        for (int i = 0; i < y->ndim; i++)
            if (!(row && i == y->ndim - 2) && !(col && i == y->ndim - 1)) shape[nd++] = y->shape[i];
        out = amp_reshape(ctx, y, nd, shape);
    }
    amp_instr_op(ctx, "matmul", amp_autocast_policy("matmul"), out, operands, 2);
    y->stat_epoch = out->stat_epoch; // (the GEMM's backward finds its output's numbers: out's)
    y->stat_entry = out->stat_entry;
    return out;
}

amp_tensor_t *amp_addmm(amp_ctx_t *ctx, amp_tensor_t *bias, amp_tensor_t *a, amp_tensor_t *b) {
    AMP_ASSERT(a->ndim == 2 && b->ndim == 2, "(addmm needs 2-D operands)");
    amp_tensor_t *in[3] = {a, b, bias}, *cast[3] = {bias, a, b};
    amp_autocast_apply(ctx, "addmm", cast, 3);
    in[0] = cast[1], in[1] = cast[2], in[2] = cast[0];
    return gemm_op(ctx, "addmm", in, false);
}

// ---------------------------------------------------------------------------------------------
// conv2d: cols (N, C*kh*kw, L) = im2col(x); y (N, O, L) = W (O, C*kh*kw) @ cols; + bias (O)
// added like PyTorch does after the convolution (a separate rounding). cols live only while a
// product needs them: the backward makes them again from x (an im2col is a fraction of a GEMM's
// time, and the columns are C*kh*kw times x's size), as cuDNN never keeps them. Columns that
// would exceed amp_conv_cols_max bytes (48 MiB) are made for a slice of the batch at a time: the
// output and the input gradient image by image as before (the same values), an f32 weight gradient
// summed over the slices in f32 (beta = 1). A 16-bit weight gradient is not sliced: summing the
// slices' products in its own dtype would round each partial sum.
int64_t amp_conv_cols_max = (int64_t)48 << 20;

// Images per slice whose scratch (`per_image` bytes an image: the columns, and for the weight
// gradient the permuted dy too) fits amp_conv_cols_max, the slices as even as they can be (64
// images of 1.1 MiB: two of 32, not 42 and 22).
static int64_t conv_slice_images(int64_t n, int64_t per_image) {
    if (n == 0) return 1; // an empty batch: no slice (the loops over it do not run)
    int64_t k = per_image > 0 ? amp_conv_cols_max / per_image : n;
    k = k < 1 ? 1 : k > n ? n : k;
    const int64_t slices = (n + k - 1) / k;
    return (n + slices - 1) / slices;
}

// Images [n0, n0 + k) of t (contiguous, images along dim 0): t itself when that is all of it,
// else a view, which images_done() lets go of (a view would keep t's gradient from being handed
// over without a copy).
static amp_tensor_t *images(amp_ctx_t *ctx, amp_tensor_t *t, int64_t n0, int64_t k) {
    if (n0 == 0 && k == t->shape[0]) return t;
    int64_t shape[AMP_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] = k;
    return amp_view_new(ctx, t, t->ndim, shape, t->stride, t->offset + n0 * t->stride[0]);
}

static void images_done(amp_tensor_t *v, const amp_tensor_t *t) {
    if (v != t) amp_tensor_release_storage(v);
}

// d for images [n0, n0 + per) of its batch (fewer at the end).
static amp_conv_desc conv_slice(amp_conv_desc d, int64_t n0, int64_t per) {
    d.n = d.n - n0 < per ? d.n - n0 : per;
    return d;
}

// C[i] (m, n) = op(A) (m, k) @ B[i] (k, n) for each of `images` images, A shared.
static amp_gemm_desc per_image_gemm(int64_t images, int64_t m, int64_t n, int64_t k, bool trans_a) {
    return (amp_gemm_desc){.batch = images,
                           .m = m,
                           .n = n,
                           .k = k,
                           .trans_a = trans_a,
                           .stride_b = k * n,
                           .stride_c = m * n,
                           .alpha = 1.0f};
}

static amp_conv_desc conv_desc(const amp_tensor_t *x, const amp_tensor_t *w, int stride,
                               int padding) {
    amp_conv_desc d = {.n = x->shape[0],
                       .c = x->shape[1],
                       .h = x->shape[2],
                       .w = x->shape[3],
                       .kh = w->shape[2],
                       .kw = w->shape[3],
                       .stride = stride,
                       .padding = padding};
    d.oh = (d.h + 2 * padding - d.kh) / stride + 1;
    d.ow = (d.w + 2 * padding - d.kw) / stride + 1;
    return d;
}

// Frees t's storage now unless it is also base's (amp_dense hands back an already dense tensor).
static void drop_copy(amp_tensor_t *t, const amp_tensor_t *base) {
    if (t->buf != base->buf) amp_tensor_drop(t);
}

static void conv2d_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0], *w = n->in[1], *b = n->in[2], *xd = n->saved[0], *wd = n->saved[1];
    amp_conv_desc d = conv_desc(x, w, (int)n->i[0], (int)n->i[1]);
    int64_t O = w->shape[0], CK = d.c * d.kh * d.kw, L = d.oh * d.ow;
    amp_tensor_t *dyd = amp_dense(ctx, dy); // (N, O, oh, ow)
    const int64_t esize = (int64_t)amp_dtype_size(x->dtype);
    const int64_t per = conv_slice_images(d.n, CK * L * esize);
    if (w->requires_grad) { // dW (O, CK) = dy' (O, N*L) @ cols'^T, cols' (CK, N*L): a GEMM a slice
        const int64_t k =
            w->dtype == AMP_DTYPE_F32 ? conv_slice_images(d.n, (CK + O) * L * esize) : d.n;
        amp_tensor_t *dw = amp_scratch_new(ctx, w->dtype, w->ndim, w->shape);
        if (d.n == 0) ctx->be->fill(ctx->bctx, dw, 0.0f); // an empty batch: no slice writes it
        for (int64_t n0 = 0; n0 < d.n; n0 += k) {
            amp_conv_desc dr = conv_slice(d, n0, k);
            dr.by_row = true;
            int64_t ps[3] = {O, dr.n, L}, pst[3] = {L, O * L, 1};
            amp_tensor_t *dyp = amp_dense(
                ctx, amp_view_new(ctx, dyd, 3, ps, pst, dyd->offset + n0 * dyd->stride[0]));
            amp_tensor_t *colsp = amp_scratch_new(ctx, x->dtype, 2, (int64_t[]){CK, dr.n * L});
            amp_tensor_t *xs = images(ctx, xd, n0, dr.n);
            ctx->be->im2col(ctx->bctx, &dr, colsp, xs);
            images_done(xs, xd);
            const amp_gemm_desc g = {.batch = 1,
                                     .m = O,
                                     .n = CK,
                                     .k = dr.n * L,
                                     .trans_b = true,
                                     .alpha = 1.0f,
                                     .beta = n0 > 0 ? 1.0f : 0.0f}; // later slices add to dW
            ctx->be->gemm(ctx->bctx, &g, dw, dyp, colsp, NULL);
            amp_tensor_drop(colsp);
            drop_copy(dyp, dyd);
        }
        amp_grad_accumulate(ctx, w, dw);
    }
    if (x->requires_grad) { // dcols[n] = W^T @ dy[n]; dx = col2im(dcols), a slice at a time
        amp_tensor_t *dx = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
        for (int64_t n0 = 0; n0 < d.n; n0 += per) {
            const amp_conv_desc ds = conv_slice(d, n0, per);
            amp_tensor_t *dcols = amp_scratch_new(ctx, x->dtype, 3, (int64_t[]){ds.n, CK, L});
            const amp_gemm_desc g = per_image_gemm(ds.n, CK, L, O, true);
            amp_tensor_t *dys = images(ctx, dyd, n0, ds.n), *dxs = images(ctx, dx, n0, ds.n);
            ctx->be->gemm(ctx->bctx, &g, dcols, wd, dys, NULL);
            ctx->be->col2im(ctx->bctx, &ds, dxs, dcols);
            amp_tensor_drop(dcols);
            images_done(dys, dyd);
            images_done(dxs, dx);
        }
        amp_grad_accumulate(ctx, x, dx);
    }
    if (b && b->requires_grad) {
        amp_tensor_t *db = amp_scratch_new(ctx, b->dtype, 3, (int64_t[]){1, O, 1});
        amp_tensor_t *dy3 = amp_view_new(ctx, dyd, 3, (int64_t[]){d.n, O, L},
                                         (int64_t[]){O * L, L, 1}, dyd->offset);
        ctx->be->reduce_sum(ctx->bctx, db, dy3, 1.0f); // (an empty batch's: zeros)
        amp_grad_accumulate(ctx, b, amp_view_new(ctx, db, 1, &O, (int64_t[]){1}, db->offset));
    }
}

amp_tensor_t *amp_conv2d(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b,
                         int stride, int padding) {
    AMP_ASSERT(x->ndim == 4 && w->ndim == 4 && x->shape[1] == w->shape[1],
               "(conv2d needs x (N, C, H, W) and w (O, C, kh, kw) with matching C)");
    AMP_ASSERT(stride >= 1 && padding >= 0, "(conv2d stride %d padding %d)", stride, padding);
    char ws[AMP_SHAPE_STR_MAX], bs[AMP_SHAPE_STR_MAX];
    AMP_ASSERT(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]),
               "(conv2d: given weight of size %s, expected bias to be 1-dimensional with %lld "
               "elements, but got bias of size %s instead)",
               amp_shape_str(w, ws, sizeof ws), (long long)w->shape[0],
               amp_shape_str(b, bs, sizeof bs));
    amp_require_float("conv2d", x);
    amp_require_float("conv2d", w);
    amp_tensor_t *in[3] = {x, w, b};
    amp_autocast_apply(ctx, "conv2d", in, 3);
    x = in[0], w = in[1], b = in[2];
    AMP_ASSERT(x->dtype == w->dtype && (!b || b->dtype == x->dtype),
               "(conv2d: input, weight and bias dtypes differ: %s, %s and %s)",
               amp_dtype_name(x->dtype), amp_dtype_name(w->dtype),
               b ? amp_dtype_name(b->dtype) : "no bias");
    amp_conv_desc d = conv_desc(x, w, stride, padding);
    AMP_ASSERT(d.oh > 0 && d.ow > 0, "(conv2d kernel larger than the padded input)");
    int64_t O = w->shape[0], CK = d.c * d.kh * d.kw, L = d.oh * d.ow;
    amp_tensor_t *xd = amp_dense(ctx, x), *wd = amp_dense(ctx, w);
    amp_tensor_t *y = amp_scratch_new(ctx, x->dtype, 4, (int64_t[]){d.n, O, d.oh, d.ow});
    const int64_t per = conv_slice_images(d.n, CK * L * (int64_t)amp_dtype_size(x->dtype));
    for (int64_t n0 = 0; n0 < d.n; n0 += per) {
        const amp_conv_desc ds = conv_slice(d, n0, per);
        amp_tensor_t *cols = amp_scratch_new(ctx, x->dtype, 3, (int64_t[]){ds.n, CK, L});
        amp_tensor_t *xs = images(ctx, xd, n0, ds.n), *ys = images(ctx, y, n0, ds.n);
        ctx->be->im2col(ctx->bctx, &ds, cols, xs);
        const amp_gemm_desc g = per_image_gemm(ds.n, O, L, CK, false);
        ctx->be->gemm(ctx->bctx, &g, ys, wd, cols, NULL);
        amp_tensor_drop(cols);
        images_done(xs, xd);
        images_done(ys, y);
    }
    if (b) {
        amp_tensor_t *bv = amp_view_new(ctx, b, 4, (int64_t[]){d.n, O, d.oh, d.ow},
                                        (int64_t[]){0, b->stride[0], 0, 0}, b->offset);
        ctx->be->binary(ctx->bctx, AMP_BINARY_ADD, y, y, bv);
    }
    amp_node *n = amp_node_record(ctx, "conv2d", conv2d_backward, y, in, 3);
    if (n) {
        n->i[0] = stride;
        n->i[1] = padding;
        amp_node_save(n, 0, xd);
        amp_node_save(n, 1, wd);
        n->reads = (w->requires_grad ? AMP_READS_SAVED(0) : 0) | // the input for dW
                   (x->requires_grad ? AMP_READS_SAVED(1) : 0);  // the weight for dx
    }
    amp_instr_op(ctx, "conv2d", AMP_POLICY_LOWER_PRECISION_FP, y, in, b ? 3 : 2);
    return y;
}
