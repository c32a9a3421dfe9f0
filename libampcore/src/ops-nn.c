/*
 * ops-nn.c — the neural-network ops: softmax and log_softmax, layer_norm, embedding, max_pool2d
 * and the losses (nll_loss, cross_entropy as log_softmax + nll_loss like PyTorch's decomposition,
 * mse_loss, binary_cross_entropy), forward and backward. nll_loss skips the rows whose target is
 * -100 (PyTorch's default ignore_index); the backends count the rest, forward and backward, on
 * their device, so the node saves only the targets.
 */
#include "amp-impl.h"

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax (fp32_set_opt_dtype: under autocast an f16 input gives an f32 output
// without being cast first)

static void softmax_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0];
    amp_tensor_t *dx = amp_grad_scratch(ctx, x);
    ctx->be->softmax_backward(ctx->bctx, n->i[0], dx, amp_dense(ctx, dy), n->out);
    amp_grad_accumulate(ctx, x, dx);
}

static amp_tensor_t *softmax_op(amp_ctx_t *ctx, const char *op, amp_tensor_t *x, int dim,
                                bool log) {
    amp_require_float(op, x);
    if (x->ndim == 0) { // torch takes dim 0 or -1 and normalises the one element
        AMP_ASSERT(dim == 0 || dim == -1, "(%s dim %d out of range for a 0-dim tensor)", op, dim);
        amp_tensor_t *y = softmax_op(ctx, op, amp_reshape(ctx, x, 1, (int64_t[]){1}), 0, log);
        return amp_reshape(ctx, y, 0, NULL);
    }
    if (dim < 0) dim += x->ndim;
    AMP_ASSERT(dim >= 0 && dim < x->ndim, "(%s dim out of range)", op);
    if (dim != x->ndim - 1) { // move dim last, normalise, move it back
        amp_tensor_t *t = amp_transpose(ctx, x, dim, -1);
        return amp_transpose(ctx, softmax_op(ctx, op, t, -1, log), dim, -1);
    }
    amp_tensor_t *in[1] = {x};
    amp_dtype dt = amp_autocast_apply(ctx, op, in, 1);
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    // A softmax that autocast widens (f16 scores, f32 probabilities) is followed by the cast back
    // that the next GEMM makes, which reads y whole anyway: its statistics wait for that cast
    // (or, failing that, for the statistics kernel) rather than slow the row kernel down.
    if (amp_dtype_size(dt) <= amp_dtype_size(x->dtype)) amp_instr_arm(ctx, y);
    ctx->be->softmax(ctx->bctx, log, y, amp_dense(ctx, x));
    amp_node *n = amp_node_record(ctx, op, softmax_backward, y, &x, 1);
    if (n) {
        n->i[0] = log;
        n->reads = AMP_READS_OUT; // not its input
        n->narrow_dy = true;      // (every backend loads dy by its dtype)
    }
    amp_instr_op(ctx, op, AMP_POLICY_FP32_SET_OPT_DTYPE, y, &x, 1);
    return y;
}

amp_tensor_t *amp_softmax(amp_ctx_t *ctx, amp_tensor_t *x, int dim) {
    return softmax_op(ctx, "softmax", x, dim, false);
}

amp_tensor_t *amp_log_softmax(amp_ctx_t *ctx, amp_tensor_t *x, int dim) {
    return softmax_op(ctx, "log_softmax", x, dim, true);
}

// ---------------------------------------------------------------------------------------------
// layer_norm over the last dim (fp32 under autocast)

static void layer_norm_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0], *w = n->in[1], *b = n->in[2];
    amp_tensor_t *dw = w ? amp_scratch_new(ctx, w->dtype, 1, w->shape) : NULL;
    amp_tensor_t *db = b ? amp_scratch_new(ctx, b->dtype, 1, b->shape) : NULL;
    amp_tensor_t *dx = amp_grad_scratch(ctx, x);
    ctx->be->layer_norm_backward(ctx->bctx, dx, dw, db, amp_dense(ctx, dy), n->saved[0],
                                 n->saved[1], n->saved[2], w ? n->saved[3] : NULL);
    amp_grad_accumulate(ctx, x, dx);
    if (w) amp_grad_accumulate(ctx, w, dw);
    if (b) amp_grad_accumulate(ctx, b, db);
}

amp_tensor_t *amp_layer_norm(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *w, amp_tensor_t *b,
                             float eps) {
    amp_require_float("layer_norm", x);
    AMP_ASSERT(x->ndim >= 1, "(layer_norm normalises the last dim: a 0-dim tensor has none)");
    int64_t C = x->shape[x->ndim - 1];
    AMP_ASSERT((!w || (w->ndim == 1 && w->shape[0] == C)) &&
                   (!b || (b->ndim == 1 && b->shape[0] == C)),
               "(layer_norm weight and bias must have %lld elements)", (long long)C);
    amp_tensor_t *in[3] = {x, w, b};
    amp_dtype dt = amp_autocast_apply(ctx, "layer_norm", in, 3);
    x = in[0], w = in[1], b = in[2];
    AMP_ASSERT((!w || w->dtype == x->dtype) && (!b || b->dtype == x->dtype),
               "(layer_norm: weight/bias dtype differs from the input's)");
    int64_t rows = C ? amp_tensor_numel(x) / C : 0;
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    amp_tensor_t *mean = amp_scratch_new(ctx, AMP_DTYPE_F32, 1, &rows);
    amp_tensor_t *rstd = amp_scratch_new(ctx, AMP_DTYPE_F32, 1, &rows);
    amp_tensor_t *xd = amp_dense(ctx, x), *wd = w ? amp_dense(ctx, w) : NULL;
    amp_instr_arm(ctx, y);
    ctx->be->layer_norm(ctx->bctx, y, mean, rstd, xd, wd, b ? amp_dense(ctx, b) : NULL, eps);
    amp_node *n = amp_node_record(ctx, "layer_norm", layer_norm_backward, y, in, 3);
    if (n) {
        amp_node_save(n, 0, xd);
        amp_node_save(n, 1, mean);
        amp_node_save(n, 2, rstd);
        amp_node_save(n, 3, wd);
        // the dense input, weight and row statistics: not the output, which the next op casts
        n->reads =
            AMP_READS_SAVED(0) | AMP_READS_SAVED(1) | AMP_READS_SAVED(2) | AMP_READS_SAVED(3);
        n->narrow_dy = true; // (every backend loads dy by its dtype)
    }
    amp_instr_op(ctx, "layer_norm", AMP_POLICY_FP32, y, in, 1 + (w != NULL) + (b != NULL));
    return y;
}

// ---------------------------------------------------------------------------------------------
// embedding

static void embedding_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *w = n->in[0];
    amp_tensor_t *dw = amp_scratch_new(ctx, w->dtype, w->ndim, w->shape);
    ctx->be->embedding_backward(ctx->bctx, dw, amp_dense(ctx, dy), n->saved[0]);
    amp_grad_accumulate(ctx, w, dw);
}

amp_tensor_t *amp_embedding(amp_ctx_t *ctx, amp_tensor_t *idx, amp_tensor_t *w) {
    AMP_ASSERT(idx->dtype == AMP_DTYPE_I32 || idx->dtype == AMP_DTYPE_I64,
               "(embedding indices must be i32 or i64, got %s)", amp_dtype_name(idx->dtype));
    AMP_ASSERT(w->ndim == 2 && idx->ndim < AMP_MAX_DIMS, "(embedding weight must be (V, C))");
    amp_tensor_t *in[1] = {w};
    amp_dtype dt = amp_autocast_apply(ctx, "embedding", in, 1);
    int64_t shape[AMP_MAX_DIMS];
    for (int i = 0; i < idx->ndim; i++)
        shape[i] = idx->shape[i];
    shape[idx->ndim] = w->shape[1];
    amp_tensor_t *y = amp_scratch_new(ctx, dt, idx->ndim + 1, shape);
    amp_tensor_t *id = amp_dense(ctx, idx);
    ctx->be->embedding(ctx->bctx, y, id, amp_dense(ctx, w));
    amp_node *n = amp_node_record(ctx, "embedding", embedding_backward, y, &w, 1);
    if (n) {
        amp_node_save(n, 0, id);
        n->reads = AMP_READS_SAVED(0); // the indices only
    }
    amp_instr_op(ctx, "embedding", AMP_POLICY_NATIVE, y, &w, 1);
    return y;
}

// ---------------------------------------------------------------------------------------------
// max_pool2d (no padding)

static void max_pool2d_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0];
    amp_tensor_t *dx = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    ctx->be->max_pool2d_backward(ctx->bctx, dx, amp_dense(ctx, dy), n->saved[0], (int)n->i[0],
                                 (int)n->i[1]);
    amp_grad_accumulate(ctx, x, dx);
}

amp_tensor_t *amp_max_pool2d(amp_ctx_t *ctx, amp_tensor_t *x, int kernel, int stride) {
    AMP_ASSERT(x->ndim == 4, "(max_pool2d needs (N, C, H, W))");
    AMP_ASSERT(kernel >= 1 && stride >= 1,
               "(max_pool2d: kernel %d and stride %d must be greater than zero)", kernel, stride);
    AMP_ASSERT(x->shape[2] >= kernel && x->shape[3] >= kernel,
               "(max_pool2d kernel larger than input)");
    amp_tensor_t *in[1] = {x};
    amp_dtype dt = amp_autocast_apply(ctx, "max_pool2d", in, 1);
    int64_t shape[4] = {x->shape[0], x->shape[1], (x->shape[2] - kernel) / stride + 1,
                        (x->shape[3] - kernel) / stride + 1};
    amp_tensor_t *y = amp_scratch_new(ctx, dt, 4, shape);
    amp_tensor_t *argmax = amp_scratch_new(ctx, AMP_DTYPE_I32, 4, shape);
    ctx->be->max_pool2d(ctx->bctx, y, argmax, amp_dense(ctx, x), kernel, stride);
    amp_node *n = amp_node_record(ctx, "max_pool2d", max_pool2d_backward, y, &x, 1);
    if (n) {
        amp_node_save(n, 0, argmax);
        n->i[0] = kernel;
        n->i[1] = stride;
        n->reads = AMP_READS_SAVED(0); // the input's shape only
    }
    amp_instr_op(ctx, "max_pool2d", AMP_POLICY_NATIVE, y, &x, 1);
    return y;
}

// ---------------------------------------------------------------------------------------------
// Losses (mean reduction)

static void nll_loss_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *logp = n->in[0];
    amp_tensor_t *dx = amp_grad_scratch(ctx, logp);
    ctx->be->nll_loss_backward(ctx->bctx, dx, dy, n->saved[0]);
    amp_grad_accumulate(ctx, logp, dx);
}

amp_tensor_t *amp_nll_loss(amp_ctx_t *ctx, amp_tensor_t *logp, amp_tensor_t *target) {
    AMP_ASSERT(logp->ndim == 2 && target->ndim == 1 && target->shape[0] == logp->shape[0],
               "(nll_loss needs logp (N, C) and target (N))");
    AMP_ASSERT(target->dtype == AMP_DTYPE_I32 || target->dtype == AMP_DTYPE_I64,
               "(nll_loss target must be i32 or i64)");
    amp_tensor_t *in[1] = {logp};
    amp_dtype dt = amp_autocast_apply(ctx, "nll_loss", in, 1);
    logp = in[0];
    amp_tensor_t *y = amp_scratch_new(ctx, dt, 0, NULL);
    amp_tensor_t *t = amp_dense(ctx, target);
    ctx->be->nll_loss(ctx->bctx, y, amp_dense(ctx, logp), t);
    amp_node *n = amp_node_record(ctx, "nll_loss", nll_loss_backward, y, &logp, 1);
    if (n) {
        amp_node_save(n, 0, t);
        n->reads = AMP_READS_SAVED(0); // the targets, not the log-probabilities
    }
    amp_instr_op(ctx, "nll_loss", AMP_POLICY_FP32, y, &logp, 1);
    return y;
}

amp_tensor_t *amp_cross_entropy(amp_ctx_t *ctx, amp_tensor_t *logits, amp_tensor_t *target) {
    amp_tensor_t *logp = amp_log_softmax(ctx, logits, 1);
    amp_tensor_t *loss = amp_nll_loss(ctx, logp, target);
    amp_tensor_drop(logp); // internal: it goes once log_softmax's backward has read it
    return loss;
}

amp_tensor_t *amp_mse_loss(amp_ctx_t *ctx, amp_tensor_t *input, amp_tensor_t *target) {
    amp_tensor_t *in[2] = {input, target};
    amp_autocast_apply(ctx, "mse_loss", in, 2);
    amp_tensor_t *d = amp_sub(ctx, in[0], in[1]);
    return amp_mean(ctx, amp_mul(ctx, d, d));
}

// Whether every element of p is in [0, 1] (none NaN).
static bool all_probabilities(const amp_tensor_t *p) {
    amp_stats s;
    amp_tensor_stats(p, AMP_DTYPE_F32, &s);
    return s.numel == 0 ||
           (s.n_nan == 0 && s.n_posinf == 0 && s.n_neginf == 0 && s.min >= 0.0f && s.max <= 1.0f);
}

// PyTorch's own derivatives of binary_cross_entropy (mean), not those of the logs it clamps (whose
// log(p) backward is 0 / 0 = NaN at p = 0 or 1): dp = dy * (p - t) / max((1 - p) * p, 1e-12) / N,
// dt = -logit(p) * dy / N, each step rounded to p's (or t's) dtype like PyTorch's kernels.
static void bce_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *p = amp_dense(ctx, n->in[0]), *t = n->in[1];
    const amp_dtype pt = p->dtype, tt = t->dtype;
    amp_tensor_t *omp = amp_scratch_new(ctx, p->dtype, p->ndim, p->shape); // 1 - p
    ctx->be->unary(ctx->bctx, AMP_UNARY_SCALE, -1.0f, omp, p);
    ctx->be->unary(ctx->bctx, AMP_UNARY_ADD_SCALAR, 1.0f, omp, omp);
    amp_tensor_t *numel = amp_scratch_new(ctx, p->dtype, 0, NULL); // div_(input.numel())
    ctx->be->fill(ctx->bctx, numel, (float)amp_tensor_numel(p));
    if (n->in[0]->requires_grad) {
        amp_tensor_t *den = amp_compute_binary(ctx, AMP_BINARY_MUL, pt, omp, p, false);
        ctx->be->unary(ctx->bctx, AMP_UNARY_CLAMP_MIN, 1e-12f, den, den); // EPSILON
        amp_tensor_t *dp = amp_compute_binary(ctx, AMP_BINARY_SUB, pt, p, t, false);
        dp = amp_compute_binary(ctx, AMP_BINARY_MUL, pt, dy, dp, false);
        dp = amp_compute_binary(ctx, AMP_BINARY_DIV, pt, dp, den, false);
        amp_grad_accumulate(ctx, n->in[0],
                            amp_compute_binary(ctx, AMP_BINARY_DIV, pt, dp, numel, false));
    }
    if (t->requires_grad) {
        amp_tensor_t *lg =
            amp_compute_binary(ctx, AMP_BINARY_DIV, pt, p, omp, false); // logit(p), negated
        ctx->be->unary(ctx->bctx, AMP_UNARY_LOG, 0.0f, lg, lg);
        ctx->be->unary(ctx->bctx, AMP_UNARY_SCALE, -1.0f, lg, lg);
        lg = amp_compute_binary(ctx, AMP_BINARY_MUL, tt, lg, dy, false);
        amp_grad_accumulate(ctx, t, amp_compute_binary(ctx, AMP_BINARY_DIV, tt, lg, numel, false));
    }
}

amp_status amp_binary_cross_entropy(amp_ctx_t *ctx, amp_tensor_t *p, amp_tensor_t *target,
                                    amp_tensor_t **out) {
    amp_clear_error();
    if (out) *out = NULL;
    const char *null = !out ? "out" : !ctx ? "ctx" : !p ? "p" : !target ? "target" : NULL;
    if (null)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_binary_cross_entropy: %s is NULL",
                             null);
    amp_dtype dts[2] = {p->dtype, target->dtype}, dt;
    if (ctx->ac.enabled) {
        amp_status s = amp_autocast_decision("binary_cross_entropy", 2, dts, ctx->ac.dtype, &dt);
        if (s != AMP_OK) return s;
    }
    amp_require_float("binary_cross_entropy", p);
    amp_require_float("binary_cross_entropy", target);
    char s1[64], s2[64];
    AMP_ASSERT(amp_same_shape(p, target),
               "(binary_cross_entropy: target size %s differs from input size %s)",
               amp_shape_str(target, s1, sizeof s1), amp_shape_str(p, s2, sizeof s2));
    // PyTorch's CPU check; on a device it would wait for the device (PyTorch checks it in the
    // kernel, where an error is fatal), so there it is left out
    if (ctx->device == AMP_DEVICE_CPU && !all_probabilities(p))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "all elements of input should be between 0 and 1");
    // -(t * log(p) + (1 - t) * log1p(-p)), each log clamped at -100 like PyTorch's kernels
    // ((t - 1) * log1p(-p) - t * log(p), the same bits); one node for the whole loss, whose
    // backward is PyTorch's
    const bool grad = amp_set_grad_enabled(ctx, false);
    amp_tensor_t *logp = amp_clamp_min(ctx, amp_log(ctx, p), -100.0f);
    amp_tensor_t *log1mp =
        amp_clamp_min(ctx, amp_log1p(ctx, amp_mul_scalar(ctx, p, -1.0)), -100.0f);
    amp_tensor_t *omt = amp_add_scalar(ctx, amp_mul_scalar(ctx, target, -1.0), 1.0);
    amp_tensor_t *sum = amp_add(ctx, amp_mul(ctx, target, logp), amp_mul(ctx, omt, log1mp));
    *out = amp_mul_scalar(ctx, amp_mean(ctx, sum), -1.0);
    amp_set_grad_enabled(ctx, grad);
    amp_tensor_t *in[2] = {p, target};
    amp_node *n = amp_node_record(ctx, "binary_cross_entropy", bce_backward, *out, in, 2);
    if (n) n->reads = AMP_READS_IN(0) | AMP_READS_IN(1);
    return AMP_OK;
}
