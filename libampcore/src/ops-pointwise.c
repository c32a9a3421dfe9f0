/*
 * ops-pointwise.c — elementwise ops (activations, exp/log/pow, scalar and broadcasting binary
 * arithmetic), reductions to a scalar, masked_fill and dropout, with their backward passes.
 * Output dtypes follow autocast and PyTorch's type promotion (a 0-dim tensor does not widen a
 * dimensioned one of the same category).
 */
#include "amp-impl.h"

#include <math.h>

// x in floating dtype dt when it is an integer tensor, as PyTorch's TensorIterator casts an
// integer operand to the op's floating type; not recorded (an integer tensor has no gradient).
static amp_tensor_t *as_float(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype dt) {
    if (amp_dtype_is_float(x->dtype)) return x;
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    ctx->be->copy(ctx->bctx, y, x);
    return y;
}

// ---------------------------------------------------------------------------------------------
// Unary ops

static void unary_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0], *xd = n->saved[0];
    amp_tensor_t *dx = amp_grad_scratch(ctx, x);
    ctx->be->unary_backward(ctx->bctx, (amp_unary_op)n->i[0], n->f[0], dx, amp_dense(ctx, dy), xd,
                            n->out, amp_linear_bias_cols(ctx, x));
    amp_grad_accumulate(ctx, x, dx);
}

// An integer x as a unary op takes it: in f32, PyTorch's default dtype, for the ops that compute
// integers in it (exp, tanh: amp_autocast_decide says which) and for the scalar ops, whose scalar
// is a float (an integer tensor times 0.5 is f32 in PyTorch). gelu has no integer kernel in
// PyTorch, and relu's integer result libampcore does not compute: both abort.
static amp_tensor_t *unary_int_input(amp_ctx_t *ctx, const char *op, amp_unary_op kind,
                                     amp_tensor_t *x) {
    amp_dtype dt;
    if (amp_autocast_decision(op, 1, &x->dtype, AMP_DTYPE_F16, &dt) != AMP_OK)
        amp_abort(__FILE__, __LINE__, "%s", amp_last_error());
    const bool scalar = kind == AMP_UNARY_POW || kind == AMP_UNARY_SCALE ||
                        kind == AMP_UNARY_ADD_SCALAR || kind == AMP_UNARY_CLAMP_MIN;
    AMP_ASSERT(scalar || amp_dtype_is_float(dt),
               "(%s of an %s tensor is %s in PyTorch; libampcore computes in floating point only: "
               "cast it with amp_to)",
               op, amp_dtype_name(x->dtype), amp_dtype_name(dt));
    return as_float(ctx, x, AMP_DTYPE_F32);
}

static amp_tensor_t *unary(amp_ctx_t *ctx, const char *op, amp_unary_op kind, float alpha,
                           amp_tensor_t *x) {
    if (!amp_dtype_is_float(x->dtype)) x = unary_int_input(ctx, op, kind, x);
    amp_tensor_t *in[1] = {x};
    amp_dtype dt = amp_autocast_apply(ctx, op, in, 1);
    x = in[0];
    amp_tensor_t *xd = amp_dense(ctx, x);
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    amp_instr_arm(ctx, y);
    ctx->be->unary(ctx->bctx, kind, alpha, y, xd);
    amp_node *n = amp_node_record(ctx, op, unary_backward, y, &x, 1);
    if (n) {
        n->i[0] = kind;
        n->f[0] = alpha;
        amp_node_save(n, 0, xd);
        n->reads = (amp_unary_backward_needs_x(kind) ? AMP_READS_SAVED(0) : 0) | // x, dense
                   (amp_unary_backward_needs_y(kind) ? AMP_READS_OUT : 0);
    }
    amp_instr_op(ctx, op, amp_autocast_policy(op), y, &x, 1);
    return y;
}

amp_tensor_t *amp_relu(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "relu", AMP_UNARY_RELU, 0, x);
}
amp_tensor_t *amp_tanh(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "tanh", AMP_UNARY_TANH, 0, x);
}
amp_tensor_t *amp_exp(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "exp", AMP_UNARY_EXP, 0, x);
}
amp_tensor_t *amp_log(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "log", AMP_UNARY_LOG, 0, x);
}
amp_tensor_t *amp_log1p(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "log1p", AMP_UNARY_LOG1P, 0, x);
}

amp_tensor_t *amp_sigmoid(amp_ctx_t *ctx, amp_tensor_t *x) {
    return unary(ctx, "sigmoid", AMP_UNARY_SIGMOID, 0, x);
}

amp_tensor_t *amp_gelu(amp_ctx_t *ctx, amp_tensor_t *x, bool tanh_approx) {
    return unary(ctx, "gelu", tanh_approx ? AMP_UNARY_GELU_TANH : AMP_UNARY_GELU, 0, x);
}

amp_tensor_t *amp_pow(amp_ctx_t *ctx, amp_tensor_t *x, float exponent) {
    return unary(ctx, "pow", AMP_UNARY_POW, exponent, x);
}

amp_tensor_t *amp_clamp_min(amp_ctx_t *ctx, amp_tensor_t *x, float min) {
    return unary(ctx, "clamp_min", AMP_UNARY_CLAMP_MIN, min, x);
}

amp_tensor_t *amp_mul_scalar(amp_ctx_t *ctx, amp_tensor_t *x, double s) {
    return unary(ctx, "mul", AMP_UNARY_SCALE, (float)s, x);
}

amp_tensor_t *amp_add_scalar(amp_ctx_t *ctx, amp_tensor_t *x, double s) {
    return unary(ctx, "add", AMP_UNARY_ADD_SCALAR, (float)s, x);
}

// ---------------------------------------------------------------------------------------------
// Binary ops with broadcasting

// PyTorch's result type: a floating tensor's dtype beside an integer one (which is cast to it),
// of two floating tensors a dimensioned one's beside a 0-dim one, and f32, the default dtype, for
// the true division of two integer tensors. The integer result of add, sub or mul of two integer
// tensors libampcore does not compute: they abort.
static amp_dtype binary_result_type(const char *op, amp_binary_op kind, const amp_tensor_t *a,
                                    const amp_tensor_t *b) {
    const bool fa = amp_dtype_is_float(a->dtype), fb = amp_dtype_is_float(b->dtype);
    if (!fa && !fb) {
        AMP_ASSERT(kind == AMP_BINARY_DIV,
                   "(%s of two integer tensors (%s, %s) is an integer tensor in PyTorch; "
                   "libampcore computes in floating point only: cast one with amp_to)",
                   op, amp_dtype_name(a->dtype), amp_dtype_name(b->dtype));
        return AMP_DTYPE_F32;
    }
    if (!fa) return b->dtype;
    if (!fb) return a->dtype;
    if (a->ndim == 0 && b->ndim > 0) return b->dtype;
    if (b->ndim == 0 && a->ndim > 0) return a->dtype;
    return amp_promote_types(a->dtype, b->dtype);
}

// A 0-dim operand's value in dt, the op's dtype, as TensorIterator casts each operand to the
// common dtype before the op: an f32 0-dim tensor beside an f16 one is rounded to f16 first (a
// widening, f16 or bf16 to f32, changes no value and is left to the backend). A dimensioned
// operand wider than dt only comes from a backward that rounds its result alone (BCE's, in
// PyTorch's kernel's order): left as it is.
static amp_tensor_t *operand_in(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype dt) {
    if (x->ndim != 0 || x->dtype == dt || dt == AMP_DTYPE_F32 || !amp_dtype_is_float(x->dtype))
        return x;
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    ctx->be->copy(ctx->bctx, y, x);
    return y;
}

amp_tensor_t *amp_compute_binary(amp_ctx_t *ctx, amp_binary_op op, amp_dtype dt, amp_tensor_t *a,
                                 amp_tensor_t *b, bool output) {
    a = operand_in(ctx, a, dt);
    b = operand_in(ctx, b, dt);
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    char s1[64], s2[64];
    AMP_ASSERT(amp_broadcast_shape(a, b, &ndim, shape), "(shapes %s and %s do not broadcast)",
               amp_shape_str(a, s1, sizeof s1), amp_shape_str(b, s2, sizeof s2));
    amp_tensor_t *y = amp_scratch_new(ctx, dt, ndim, shape);
    if (output) amp_instr_arm(ctx, y);
    ctx->be->binary(ctx->bctx, op, y, amp_expand(ctx, a, ndim, shape),
                    amp_expand(ctx, b, ndim, shape));
    return y;
}

static void accumulate_reduced(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g) {
    if (t->requires_grad) amp_grad_accumulate(ctx, t, amp_sum_to(ctx, g, t->ndim, t->shape));
}

// The same for the node's last use of its incoming gradient dy.
static void accumulate_reduced_last(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *dy) {
    if (t->requires_grad)
        amp_grad_accumulate_last(ctx, t, amp_sum_to(ctx, dy, t->ndim, t->shape), dy);
}

static void binary_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *a = n->in[0], *b = n->in[1];
    amp_dtype dt = dy->dtype;
    switch ((amp_binary_op)n->i[0]) {
    case AMP_BINARY_ADD:
        accumulate_reduced(ctx, a, dy);
        accumulate_reduced_last(ctx, b, dy);
        break;
    case AMP_BINARY_SUB:
        accumulate_reduced(ctx, a, dy);
        if (b->requires_grad) {
            amp_tensor_t *neg = amp_scratch_new(ctx, dt, dy->ndim, dy->shape);
            ctx->be->unary(ctx->bctx, AMP_UNARY_SCALE, -1.0f, neg, amp_dense(ctx, dy));
            accumulate_reduced(ctx, b, neg);
        }
        break;
    case AMP_BINARY_MUL:
        if (a->requires_grad)
            accumulate_reduced(ctx, a, amp_compute_binary(ctx, AMP_BINARY_MUL, dt, dy, b, false));
        if (b->requires_grad)
            accumulate_reduced(ctx, b, amp_compute_binary(ctx, AMP_BINARY_MUL, dt, dy, a, false));
        break;
    case AMP_BINARY_DIV:
        if (a->requires_grad)
            accumulate_reduced(ctx, a, amp_compute_binary(ctx, AMP_BINARY_DIV, dt, dy, b, false));
        if (b->requires_grad) { // -dy * ((a / b) / b), PyTorch's order: b * b would overflow
            amp_tensor_t *t = amp_compute_binary(ctx, AMP_BINARY_DIV, dt, a, b, false);
            t = amp_compute_binary(ctx, AMP_BINARY_DIV, dt, t, b, false);
            t = amp_compute_binary(ctx, AMP_BINARY_MUL, dt, dy, t, false);
            ctx->be->unary(ctx->bctx, AMP_UNARY_SCALE, -1.0f, t, t);
            accumulate_reduced(ctx, b, t);
        }
        break;
    }
}

static amp_tensor_t *binary(amp_ctx_t *ctx, const char *op, amp_binary_op kind, amp_tensor_t *a,
                            amp_tensor_t *b) {
    // (the backend reads a and b through broadcast views, not amp_dense, which would check this)
    AMP_ASSERT((!a->buf || a->buf->data) && (!b->buf || b->buf->data),
               "(%s reads a tensor whose storage was dropped with amp_tensor_drop)", op);
    const amp_dtype dt = binary_result_type(op, kind, a, b);
    a = as_float(ctx, a, dt);
    b = as_float(ctx, b, dt);
    amp_tensor_t *in[2] = {a, b};
    amp_autocast_apply(ctx, op, in, 2); // native: no casts
    amp_tensor_t *y = amp_compute_binary(ctx, kind, dt, a, b, true);
    amp_node *n = amp_node_record(ctx, op, binary_backward, y, in, 2);
    if (n) {
        n->i[0] = kind;
        // add and sub pass the gradient on; mul reads each operand for the other's gradient,
        // div b for a's and both for b's (what PyTorch saves)
        const bool ga = a->requires_grad, gb = b->requires_grad;
        n->reads = kind == AMP_BINARY_MUL ? (gb ? AMP_READS_IN(0) : 0) | (ga ? AMP_READS_IN(1) : 0)
                   : kind == AMP_BINARY_DIV
                       ? (gb ? AMP_READS_IN(0) : 0) | (ga || gb ? AMP_READS_IN(1) : 0)
                       : 0;
    }
    amp_instr_op(ctx, op, AMP_POLICY_NATIVE, y, in, 2);
    return y;
}

amp_tensor_t *amp_add(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    return binary(ctx, "add", AMP_BINARY_ADD, a, b);
}
amp_tensor_t *amp_sub(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    return binary(ctx, "sub", AMP_BINARY_SUB, a, b);
}
amp_tensor_t *amp_mul(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    return binary(ctx, "mul", AMP_BINARY_MUL, a, b);
}
amp_tensor_t *amp_div(amp_ctx_t *ctx, amp_tensor_t *a, amp_tensor_t *b) {
    return binary(ctx, "div", AMP_BINARY_DIV, a, b);
}

// ---------------------------------------------------------------------------------------------
// sum / mean over all elements

static void reduce_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0];
    amp_tensor_t *dx = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    amp_tensor_t *flat = amp_view_new(ctx, dy, 0, NULL, NULL, dy->offset);
    ctx->be->copy(ctx->bctx, dx, amp_expand(ctx, flat, x->ndim, x->shape));
    if (n->f[0] != 1.0f) ctx->be->unary(ctx->bctx, AMP_UNARY_SCALE, n->f[0], dx, dx);
    amp_grad_accumulate(ctx, x, dx);
}

static amp_tensor_t *reduce_all(amp_ctx_t *ctx, const char *op, amp_tensor_t *x, bool mean) {
    if (mean) amp_require_float(op, x);
    AMP_ASSERT(amp_dtype_is_float(x->dtype),
               "(sum of an %s tensor is i64 in PyTorch; libampcore sums floating tensors only: "
               "cast it with amp_to)",
               amp_dtype_name(x->dtype));
    amp_tensor_t *in[1] = {x};
    amp_dtype dt = amp_autocast_apply(ctx, op, in, 1);
    int64_t ones[AMP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++)
        ones[i] = 1;
    int64_t numel = amp_tensor_numel(x);
    float alpha = mean ? (numel ? 1.0f / (float)numel : NAN) : 1.0f;
    amp_tensor_t *r = amp_scratch_new(ctx, dt, x->ndim, ones);
    ctx->be->reduce_sum(ctx->bctx, r, amp_dense(ctx, x), alpha);
    amp_tensor_t *y = amp_view_new(ctx, r, 0, NULL, NULL, r->offset);
    amp_node *n = amp_node_record(ctx, op, reduce_backward, y, &x, 1);
    if (n) {
        n->f[0] = alpha;
        n->reads = 0;
    }
    amp_instr_op(ctx, op, amp_autocast_policy(op), y, &x, 1);
    return y;
}

amp_tensor_t *amp_sum(amp_ctx_t *ctx, amp_tensor_t *x) {
    return reduce_all(ctx, "sum", x, false);
}
amp_tensor_t *amp_mean(amp_ctx_t *ctx, amp_tensor_t *x) {
    return reduce_all(ctx, "mean", x, true);
}

// ---------------------------------------------------------------------------------------------
// masked_fill and dropout

static void masked_fill_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0], *mask = n->saved[0];
    amp_tensor_t *dx = amp_grad_scratch(ctx, x);
    ctx->be->masked_fill(ctx->bctx, dx, amp_dense(ctx, dy), mask, 0.0f);
    amp_grad_accumulate(ctx, x, dx);
}

// PyTorch's check of a fill value: a finite one beyond the dtype's largest finite value raises
// (the classic -1e9 mask in fp16); inf and NaN go through, except into an integer tensor, which
// holds neither (PyTorch's c10::overflows: a value outside its range, inf and NaN included).
static void check_fill_value(amp_dtype dt, float value) {
    if (!amp_dtype_is_float(dt)) {
        const bool i32 = dt == AMP_DTYPE_I32;
        const double lim = i32 ? 0x1p31 : 0x1p63; // it holds [-lim, lim); NaN is outside too
        if (!((double)value >= -lim && (double)value < lim))
            amp_abort(__FILE__, __LINE__,
                      "value cannot be converted to type %s without overflow (masked_fill of %g "
                      "into an %s tensor: use a value within its range)",
                      i32 ? "int32_t" : "int64_t", (double)value, amp_dtype_name(dt));
        return;
    }
    const float max = dt == AMP_DTYPE_F16    ? 65504.0f
                      : dt == AMP_DTYPE_BF16 ? 0x1.fep127f
                                             : INFINITY;
    if (isfinite(value) && fabsf(value) > max)
        amp_abort(__FILE__, __LINE__,
                  "value cannot be converted to type at::%s without overflow (masked_fill of %g "
                  "into a %s tensor: use -inf for a mask, or a value within its range)",
                  dt == AMP_DTYPE_F16 ? "Half" : "BFloat16", (double)value, amp_dtype_name(dt));
}

amp_tensor_t *amp_masked_fill(amp_ctx_t *ctx, amp_tensor_t *x, amp_tensor_t *mask, float value) {
    AMP_ASSERT(mask->dtype == AMP_DTYPE_I32, "(masked_fill mask must be i32, got %s)",
               amp_dtype_name(mask->dtype));
    int nd;
    int64_t shape[AMP_MAX_DIMS];
    const bool fits = amp_broadcast_shape(mask, x, &nd, shape) && nd == x->ndim &&
                      memcmp(shape, x->shape, (size_t)nd * sizeof *shape) == 0;
    char ms[64], xs[64];
    AMP_ASSERT(fits,
               "(masked_fill: the mask %s does not broadcast to the input %s; the result keeps "
               "the input's shape)",
               amp_shape_str(mask, ms, sizeof ms), amp_shape_str(x, xs, sizeof xs));
    amp_tensor_t *in[1] = {x};
    amp_dtype dt = amp_autocast_apply(ctx, "masked_fill", in, 1);
    check_fill_value(dt, value);
    amp_tensor_t *m = amp_expand(ctx, mask, x->ndim, x->shape);
    amp_tensor_t *y = amp_scratch_new(ctx, dt, x->ndim, x->shape);
    amp_instr_arm(ctx, y);
    ctx->be->masked_fill(ctx->bctx, y, amp_dense(ctx, x), m, value);
    y->inf_fill = isinf(value) ? (value < 0 ? -1 : 1) : x->inf_fill;
    amp_node *n = amp_node_record(ctx, "masked_fill", masked_fill_backward, y, &x, 1);
    if (n) {
        amp_node_save(n, 0, m);
        n->reads = AMP_READS_SAVED(0); // the mask only
    }
    amp_instr_op(ctx, "masked_fill", AMP_POLICY_NATIVE, y, &x, 1);
    return y;
}

static void dropout_backward(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_tensor_t *x = n->in[0];
    amp_tensor_t *dx = amp_grad_scratch(ctx, x);
    ctx->be->binary(ctx->bctx, AMP_BINARY_MUL, dx, amp_dense(ctx, dy), n->saved[0]);
    amp_grad_accumulate(ctx, x, dx);
}

amp_tensor_t *amp_dropout(amp_ctx_t *ctx, amp_tensor_t *x, float p, bool training) {
    AMP_ASSERT(p >= 0.0f && p <= 1.0f, "(dropout probability %g)", (double)p);
    if (!training || p == 0.0f) return x;
    // PyTorch divides its mask, of x's dtype, by 1 - p in place, which raises for an integer x
    // ("result type Float can't be cast to the desired output type Int")
    AMP_ASSERT(amp_dtype_is_float(x->dtype),
               "(dropout of an %s tensor is an error in PyTorch (its mask, of the input's dtype, "
               "cannot be scaled by 1/(1-p) in place); libampcore computes in floating point "
               "only: cast it with amp_to)",
               amp_dtype_name(x->dtype));
    amp_tensor_t *mask = amp_scratch_new(ctx, AMP_DTYPE_F32, x->ndim, x->shape); // 0 or 1/(1-p)
    ctx->be->dropout_mask(ctx->bctx, mask, p, ctx->seed, ctx->dropout_offset);
    ctx->dropout_offset += (uint64_t)amp_tensor_numel(x);
    amp_tensor_t *y = amp_scratch_new(ctx, x->dtype, x->ndim, x->shape);
    amp_instr_arm(ctx, y);
    ctx->be->binary(ctx->bctx, AMP_BINARY_MUL, y, amp_dense(ctx, x), mask);
    amp_node *n = amp_node_record(ctx, "dropout", dropout_backward, y, &x, 1);
    if (n) {
        amp_node_save(n, 0, mask);
        n->reads = AMP_READS_SAVED(0); // the mask only
    }
    amp_instr_op(ctx, "dropout", AMP_POLICY_NATIVE, y, &x, 1);
    return y;
}
