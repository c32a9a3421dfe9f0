/*
 * autocast.c — PyTorch's CUDA autocast, exactly (aten/src/ATen/autocast_mode.{h,cpp}): the op
 * lists and their five policies, nested regions with the state saved per region, the weight-cast
 * cache of the outermost region, and the policy query used by `ampprobe conform`.
 *
 * The CPU backend applies the same CUDA policy on purpose: a CPU run makes the dtype decisions a
 * GPU run would, so fp16 trouble can be reproduced on a laptop.
 */
#include "amp-impl.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// The op lists (CUDA, current main; the same whether the autocast dtype is fp16 or bf16)

// Grouped by hand, as PyTorch's autocast_mode.cpp groups them:
// clang-format off
static const char *const lower_precision_ops[] = {
    // convolutions
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "cudnn_convolution",
    "cudnn_convolution_transpose", "prelu",
    // matrix products
    "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    // recurrent cells
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell",
    // attention
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention", NULL};

static const char *const fp32_ops[] = {
    // pointwise math
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus",
    // normalisation
    "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    // similarity and distance
    "cosine_similarity", "dist", "pdist", "cdist", "renorm", "logsumexp",
    // losses
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits",
    // upsampling
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
    "upsample_bicubic2d", "_upsample_bicubic2d_aa", NULL};

static const char *const fp32_set_opt_dtype_ops[] = {
    // reductions that take a dtype argument
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "sum", NULL};

static const char *const fp32_append_dtype_ops[] = {"norm", NULL};

static const char *const promote_ops[] = {
    // several floating inputs
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "tensordot", "scatter_add", NULL};

static const char *const banned_ops[] = {"binary_cross_entropy", NULL};
// clang-format on

// What PyTorch does with integer tensors, for the ops it does not compute in their own dtype:
// the unary float ops and true division compute them in the default dtype, f32; the integer sums
// widen to i64; and some ops have no integer kernel at all (they raise).
static const char *const int_to_float_ops[] = {
    "exp",   "exp2",       "expm1",  "log",     "log10", "log1p", "log2",        "sqrt",
    "rsqrt", "reciprocal", "sin",    "cos",     "tan",   "asin",  "acos",        "atan",
    "sinh",  "cosh",       "tanh",   "asinh",   "acosh", "atanh", "sigmoid",     "erf",
    "erfc",  "erfinv",     "lgamma", "digamma", "atan2", "div",   "true_divide", NULL};
static const char *const int_to_long_ops[] = {"sum", "prod", "cumsum", "cumprod", NULL};
static const char *const float_only_ops[] = {
    "gelu",          "softmax", "log_softmax",        "softmin", "layer_norm", "native_layer_norm",
    "group_norm",    "norm",    "linalg_vector_norm", "mean",    "mse_loss",   "nll_loss",
    "cross_entropy", NULL};

// Names that are not ops of their own but decompose into listed ones (amp.rst), or the Python
// spellings of listed ops.
static const struct {
    const char *name;
    amp_cast_policy policy;
} derived_ops[] = {
    {"cross_entropy", AMP_POLICY_FP32}, // log_softmax + nll_loss
    {"softmin", AMP_POLICY_FP32},       // softmax of the negation
    {"normalize", AMP_POLICY_FP32},     // via norm
    {"__pow__", AMP_POLICY_FP32},
    {"__rpow__", AMP_POLICY_FP32},
    {"__rdiv__", AMP_POLICY_FP32},
    {"__rtruediv__", AMP_POLICY_FP32},
    {"__matmul__", AMP_POLICY_LOWER_PRECISION_FP},
};

static bool in_list(const char *const *list, const char *op) {
    for (; *list; list++)
        if (strcmp(*list, op) == 0) return true;
    return false;
}

amp_cast_policy amp_autocast_policy(const char *op) {
    if (!op) return AMP_POLICY_NATIVE; // (no op of PyTorch's lists)
    if (in_list(lower_precision_ops, op)) return AMP_POLICY_LOWER_PRECISION_FP;
    if (in_list(fp32_ops, op)) return AMP_POLICY_FP32;
    if (in_list(fp32_set_opt_dtype_ops, op)) return AMP_POLICY_FP32_SET_OPT_DTYPE;
    if (in_list(fp32_append_dtype_ops, op)) return AMP_POLICY_FP32_APPEND_DTYPE;
    if (in_list(promote_ops, op)) return AMP_POLICY_PROMOTE;
    if (in_list(banned_ops, op)) return AMP_POLICY_BANNED;
    for (size_t i = 0; i < sizeof derived_ops / sizeof derived_ops[0]; i++)
        if (strcmp(derived_ops[i].name, op) == 0) return derived_ops[i].policy;
    return AMP_POLICY_NATIVE;
}

const char *amp_cast_policy_name(amp_cast_policy p) {
    static const char *const names[] = {"native",
                                        "lower_precision_fp",
                                        "fp32",
                                        "fp32_set_opt_dtype",
                                        "fp32_append_dtype",
                                        "promote",
                                        "banned"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

// ---------------------------------------------------------------------------------------------
// Decisions

static const char banned_message[] =
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using "
    "torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.";

amp_dtype amp_promote_types(amp_dtype a, amp_dtype b) {
    if (a == b) return a;
    if (!amp_dtype_is_float(a) && !amp_dtype_is_float(b)) return AMP_DTYPE_I64; // i32 with i64
    if (!amp_dtype_is_float(a)) return b;
    if (!amp_dtype_is_float(b)) return a;
    return AMP_DTYPE_F32; // f32 with anything, and f16 with bf16
}

// Native type promotion over the dtypes of an op's tensors (what an op outside the lists, or one
// whose inputs autocast left alone, computes in).
static amp_dtype promote_all(int n, const amp_dtype *in) {
    amp_dtype r = in[0];
    for (int i = 1; i < n; i++)
        r = amp_promote_types(r, in[i]);
    return r;
}

// at::autocast::prioritize folded over the eligible inputs; without any, the op runs natively.
static amp_status promote_fold(int n, const amp_dtype *in, amp_dtype lpfp, amp_dtype *out) {
    amp_dtype cur = lpfp;
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!amp_dtype_is_float(in[i])) continue;
        any = true;
        if (cur == AMP_DTYPE_F32 || in[i] == AMP_DTYPE_F32)
            cur = AMP_DTYPE_F32;
        else if (cur == lpfp && in[i] == lpfp)
            cur = lpfp;
        else
            return amp_set_error(AMP_ERR_AUTOCAST_DTYPE,
                                 "Unexpected floating ScalarType in at::autocast::prioritize");
    }
    *out = any ? cur : promote_all(n, in);
    return AMP_OK;
}

amp_status amp_int_input_error(const char *op, amp_dtype t) {
    return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                         "%s takes floating tensors only (PyTorch has no integer kernel for it), "
                         "got %s: cast it with amp_to",
                         op, amp_dtype_name(t));
}

void amp_require_float(const char *op, const amp_tensor_t *x) {
    if (amp_dtype_is_float(x->dtype)) return;
    amp_int_input_error(op, x->dtype);
    amp_abort(__FILE__, __LINE__, "%s", amp_last_error());
}

amp_status amp_autocast_decide(const char *op, int n, const amp_dtype *in, amp_dtype autocast_dtype,
                               amp_dtype *out) {
    amp_clear_error();
    return amp_autocast_decision(op, n, in, autocast_dtype, out);
}

amp_status amp_autocast_decision(const char *op, int n, const amp_dtype *in,
                                 amp_dtype autocast_dtype, amp_dtype *out) {
    const char *null = !op ? "op" : !out ? "out" : n > 0 && !in ? "in" : NULL;
    if (null)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_autocast_decide: %s is NULL", null);
    if (autocast_dtype != AMP_DTYPE_F16 && autocast_dtype != AMP_DTYPE_BF16)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "autocast dtype must be f16 or bf16, not %s",
                             amp_dtype_name(autocast_dtype));
    if (n < 1) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "%s: no tensor arguments", op);
    for (int i = 0; i < n; i++)
        if ((unsigned)in[i] >= AMP_DTYPE_COUNT)
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "%s: argument %d has no dtype (%d)", op,
                                 i, (int)in[i]);
    const amp_cast_policy policy = amp_autocast_policy(op);
    if (policy == AMP_POLICY_BANNED)
        return amp_set_error(AMP_ERR_AUTOCAST_BANNED, "%s", banned_message);
    bool first_float = amp_dtype_is_float(in[0]), any_float = false;
    for (int i = 0; i < n; i++)
        any_float |= amp_dtype_is_float(in[i]);
    if (!any_float && in_list(float_only_ops, op)) return amp_int_input_error(op, in[0]);
    // autocast casts only floating tensors: an integer one stays, and the lower-precision ops
    // (GEMMs, convolutions) take one dtype, so PyTorch raises a dtype mismatch
    for (int i = 0; policy == AMP_POLICY_LOWER_PRECISION_FP && any_float && i < n; i++)
        if (!amp_dtype_is_float(in[i]))
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                 "%s: argument %d is %s beside floating tensors; autocast leaves "
                                 "an integer tensor as it is and %s takes one dtype (PyTorch "
                                 "raises a dtype mismatch): cast it with amp_to",
                                 op, i, amp_dtype_name(in[i]), op);
    amp_dtype r = AMP_DTYPE_F32;
    switch (policy) {
    case AMP_POLICY_LOWER_PRECISION_FP:
        r = first_float ? autocast_dtype : in[0];
        break;
    case AMP_POLICY_FP32: // every floating input cast to f32, then the op's own promotion
        r = any_float ? AMP_DTYPE_F32 : promote_all(n, in);
        break;
    case AMP_POLICY_FP32_SET_OPT_DTYPE:
    case AMP_POLICY_FP32_APPEND_DTYPE:
        r = first_float ? AMP_DTYPE_F32 : in[0];
        break;
    case AMP_POLICY_PROMOTE: {
        amp_status s = promote_fold(n, in, autocast_dtype, &r);
        if (s != AMP_OK) return s;
        break;
    }
    case AMP_POLICY_NATIVE:
    case AMP_POLICY_BANNED:
        r = promote_all(n, in);
        break;
    }
    if (!amp_dtype_is_float(r) && in_list(int_to_float_ops, op)) r = AMP_DTYPE_F32;
    if (!amp_dtype_is_float(r) && in_list(int_to_long_ops, op)) r = AMP_DTYPE_I64;
    *out = r;
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// Regions

void amp_autocast_begin(amp_ctx_t *ctx, bool enabled, amp_dtype dtype, bool cache_enabled) {
    AMP_ASSERT(dtype == AMP_DTYPE_F16 || dtype == AMP_DTYPE_BF16,
               "(autocast dtype must be f16 or bf16, not %s)", amp_dtype_name(dtype));
    AMP_ASSERT(ctx->ac_depth < AMP_AUTOCAST_DEPTH_MAX, "(autocast regions nested too deep)");
    ctx->ac_saved[ctx->ac_depth++] = ctx->ac;
    ctx->ac.enabled = enabled;
    ctx->ac.dtype = dtype;
    ctx->ac.cache_enabled = cache_enabled;
    if (enabled && ctx->instr) amp_instr_autocast_dtype(ctx, dtype);
    if (enabled) ctx->run_dtype = dtype;
    amp_instr_work_begins(ctx);
}

void amp_autocast_end(amp_ctx_t *ctx) {
    AMP_ASSERT(ctx->ac_depth > 0, "(amp_autocast_end without amp_autocast_begin)");
    ctx->ac = ctx->ac_saved[--ctx->ac_depth];
    if (ctx->ac_depth > 0) return;
    for (size_t i = 0; i < ctx->n_cast_cache; i++) // the optimizer may make the next region's
        if (ctx->cast_cache[i].src->persistent)    // copies ahead
            amp_precast_want(ctx->cast_cache[i].src, ctx->cast_cache[i].cast->dtype);
    amp_autocast_clear_cache(ctx);
}

bool amp_autocast_is_enabled(const amp_ctx_t *ctx) {
    return ctx->ac.enabled;
}
amp_dtype amp_autocast_dtype(const amp_ctx_t *ctx) {
    return ctx->ac.dtype;
}

void amp_autocast_clear_cache(amp_ctx_t *ctx) {
    ctx->n_cast_cache = 0;
}

// ---------------------------------------------------------------------------------------------
// Casting inside ops

// cached_cast: only f32 leaves that require grad, not views, cast to the autocast dtype, with the
// cache enabled, share one copy per region. The copy is built with grad recording on, so a first
// use under no_grad does not cut later gradients (PyTorch #112583, fixed upstream). A parameter
// that an optimizer step updated since an earlier region cast it has the copy made already.
static amp_tensor_t *cached_cast(amp_ctx_t *ctx, amp_tensor_t *x, amp_dtype t) {
    bool cacheable = ctx->ac.cache_enabled && t == ctx->ac.dtype && x->dtype == AMP_DTYPE_F32 &&
                     x->requires_grad && !x->node && !x->is_view;
    if (!cacheable) return amp_cast(ctx, x, t);
    for (size_t i = 0; i < ctx->n_cast_cache; i++) // keyed by dtype too: a bf16 region nested in
        if (ctx->cast_cache[i].src == x && ctx->cast_cache[i].cast->dtype == t) // an f16 one
            return ctx->cast_cache[i].cast;
    bool grad = amp_set_grad_enabled(ctx, true);
    amp_tensor_t *made = amp_precast_take(ctx, x, t); // by the optimizer step that updated x
    amp_tensor_t *c = made ? amp_cast_made(ctx, x, made) : amp_cast(ctx, x, t);
    amp_set_grad_enabled(ctx, grad);
    AMP_GROW(ctx->cast_cache, ctx->n_cast_cache, ctx->cap_cast_cache);
    ctx->cast_cache[ctx->n_cast_cache++] = (amp_cast_cache_entry){x, c};
    return c;
}

amp_dtype amp_autocast_apply(amp_ctx_t *ctx, const char *op, amp_tensor_t **in, int n) {
    amp_dtype dts[AMP_NODE_MAX_IN + 4];
    AMP_ASSERT(n > 0 && n <= (int)(sizeof dts / sizeof dts[0]));
    int given = 0; // the tensor arguments actually given (an absent optional is none)
    for (int i = 0; i < n; i++)
        if (in[i]) dts[given++] = in[i]->dtype;
    AMP_ASSERT(given > 0);
    amp_dtype out = AMP_DTYPE_F32; // (set by amp_autocast_decide when it succeeds)
    if (!ctx->ac.enabled) {
        amp_status s = amp_autocast_decision("", given, dts, AMP_DTYPE_F16, &out);
        AMP_ASSERT(s == AMP_OK);
        return out;
    }
    amp_status s = amp_autocast_decision(op, given, dts, ctx->ac.dtype, &out);
    if (s != AMP_OK) amp_abort(__FILE__, __LINE__, "%s: %s", op, amp_last_error());
    amp_cast_policy p = amp_autocast_policy(op);
    if (p == AMP_POLICY_NATIVE || p == AMP_POLICY_FP32_SET_OPT_DTYPE ||
        p == AMP_POLICY_FP32_APPEND_DTYPE)
        return out; // no input casts
    for (int i = 0; i < n; i++) {
        if (!in[i] || !amp_dtype_is_float(in[i]->dtype) || in[i]->dtype == out) continue;
        in[i] = p == AMP_POLICY_LOWER_PRECISION_FP ? cached_cast(ctx, in[i], out)
                                                   : amp_cast(ctx, in[i], out);
    }
    return out;
}
