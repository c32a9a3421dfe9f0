/*
 * optim.c — SGD, Adam and AdamW over f32 master weights, with torch.optim's defaults, argument
 * checks and per-parameter state: each parameter counts its own updates (Adam's state["step"],
 * so a parameter that had no gradient on some steps gets its own bias correction) and owns its
 * state tensors (momentum_buffer, exp_avg, exp_avg_sq), zero-filled at creation. The math runs in
 * the backend's optim_step, every parameter with a gradient in one call. The update counts live
 * in a tensor of the backend (as the fused torch.optim keeps state["step"] on the device), so a
 * step the GradScaler skips on the device (amp_optim_step_unless) leaves them alone without the
 * host having to know: reading them (amp_optim_steps, amp_optim_param_steps) waits for the device.
 * A parameter that the last autocast region cast gets the next region's copy written by the same
 * call, from its new value (amp_precast_target in tensor.c says where).
 */
#include "amp-impl.h"

#include <string.h>

struct amp_optim {
    amp_ctx_t *ctx;
    amp_optim_params p;
    int n;
    int n_state;           // state tensors per parameter: 0 (plain SGD), 1 (momentum SGD), 2 (Adam)
    amp_tensor_t **params; // [n]
    amp_tensor_t **state[2]; // [n] each: momentum_buffer / exp_avg, exp_avg_sq
    amp_tensor_t **batch[5]; // one backend call: params, grads, m, v, autocast copies to write
    amp_tensor_t *lowered;   // [n] the structs of batch[4]'s copies (amp_precast_target)
    amp_tensor_t *counts;    // i64 [n + 1]: updates each parameter received, then the steps taken
    int32_t *idx;            // [n + 1] one backend call: the counts it increments
};

static const char *const kind_names[] = {
    [AMP_OPTIM_SGD] = "sgd", [AMP_OPTIM_ADAM] = "adam", [AMP_OPTIM_ADAMW] = "adamw"};

const char *amp_optim_kind_name(amp_optim_kind kind) {
    return (unsigned)kind <= AMP_OPTIM_ADAMW ? kind_names[kind] : "?";
}

bool amp_optim_kind_parse(const char *s, amp_optim_kind *out) {
    for (int k = AMP_OPTIM_SGD; k <= AMP_OPTIM_ADAMW; k++) {
        if (strcmp(s, kind_names[k]) == 0) {
            *out = (amp_optim_kind)k;
            return true;
        }
    }
    return false;
}

amp_optim_params amp_optim_defaults(amp_optim_kind kind) {
    // torch.optim defaults; SGD's lr has none in torch (it is required), 1e-3 here.
    return (amp_optim_params){.kind = kind,
                              .lr = 1e-3,
                              .weight_decay = kind == AMP_OPTIM_ADAMW ? 1e-2 : 0.0,
                              .beta1 = 0.9,
                              .beta2 = 0.999,
                              .eps = 1e-8};
}

// torch.optim's constructor checks, with its messages, in its order (SGD: lr, momentum,
// weight_decay; Adam and AdamW: lr, eps, betas, weight_decay). `!(x >= 0)` also rejects NaN.
static amp_status validate_params(const amp_optim_params *p) {
    if ((unsigned)p->kind > AMP_OPTIM_ADAMW)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "unknown optimizer kind %d", (int)p->kind);
    if (!(p->lr >= 0.0))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid learning rate: %g", p->lr);
    if (p->kind == AMP_OPTIM_SGD) {
        if (!(p->momentum >= 0.0))
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid momentum value: %g",
                                 p->momentum);
    } else {
        if (!(p->eps >= 0.0))
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid epsilon value: %g", p->eps);
        if (!(p->beta1 >= 0.0 && p->beta1 < 1.0))
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid beta parameter at index 0: %g",
                                 p->beta1);
        if (!(p->beta2 >= 0.0 && p->beta2 < 1.0))
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid beta parameter at index 1: %g",
                                 p->beta2);
    }
    if (!(p->weight_decay >= 0.0))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "Invalid weight_decay value: %g",
                             p->weight_decay);
    if (p->kind == AMP_OPTIM_SGD && p->nesterov && (p->momentum <= 0.0 || p->dampening != 0.0))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "Nesterov momentum requires a momentum and zero dampening "
                             "(momentum=%g, dampening=%g)",
                             p->momentum, p->dampening);
    return AMP_OK;
}

static amp_status validate_tensors(amp_ctx_t *ctx, amp_tensor_t *const *params, int n) {
    if (n <= 0)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "optimizer got an empty parameter list (n = %d)", n);
    for (int i = 0; i < n; i++) {
        const amp_tensor_t *t = params[i];
        if (!t) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "params[%d] is NULL", i);
        const char *name = amp_tensor_name(t);
        if (t->ctx != ctx)
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                 "params[%d] '%s' belongs to another context", i, name);
        if (!t->persistent)
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                 "params[%d] '%s' is an op output; parameters must be made by "
                                 "amp_tensor_new*() (the optimizer keeps the pointer)",
                                 i, name);
        if (t->dtype != AMP_DTYPE_F32)
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                 "params[%d] '%s' is %s; optimizers update f32 master weights", i,
                                 name, amp_dtype_name(t->dtype));
        if (!t->requires_grad)
            return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "params[%d] '%s' does not require grad",
                                 i, name);
        for (int j = 0; j < i; j++)
            if (params[j] == t)
                return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                                     "params[%d] and params[%d] are the same tensor '%s' "
                                     "(it would be updated twice per step)",
                                     j, i, name);
    }
    return AMP_OK;
}

// Adds d to the hold count (amp_tensor.optim_refs) of the tensors the optimizer keeps pointers to:
// its parameters and its own state.
static void hold_all(amp_optim_t *opt, int d) {
    for (int i = 0; i < opt->n; i++) {
        opt->params[i]->optim_refs += d;
        for (int k = 0; k < opt->n_state; k++)
            opt->state[k][i]->optim_refs += d;
    }
    opt->counts->optim_refs += d;
}

amp_status amp_optim_new(amp_ctx_t *ctx, const amp_optim_params *p, amp_tensor_t *const *params,
                         int n, amp_optim_t **out) {
    amp_clear_error();
    if (out) *out = NULL;
    const char *null = !out ? "out" : !ctx ? "ctx" : !p ? "p" : !params ? "params" : NULL;
    if (null) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_optim_new: %s is NULL", null);
    amp_status st = validate_params(p);
    if (st == AMP_OK) st = validate_tensors(ctx, params, n);
    if (st != AMP_OK) return st;

    amp_optim_t *opt = amp_xcalloc(1, sizeof *opt);
    opt->ctx = ctx;
    opt->p = *p;
    opt->n = n;
    opt->n_state = p->kind != AMP_OPTIM_SGD ? 2 : p->momentum != 0.0 ? 1 : 0;
    // One block: 8 pointer arrays, the copies' structs, then the count indices.
    const size_t np = 8;
    char *mem = amp_xcalloc((size_t)n + 1,
                            np * sizeof(amp_tensor_t *) + sizeof(amp_tensor_t) + sizeof(int32_t));
    amp_tensor_t **ptrs = (amp_tensor_t **)mem;
    opt->params = ptrs;
    opt->state[0] = ptrs + n;
    opt->state[1] = ptrs + 2 * n;
    for (int k = 0; k < 5; k++)
        opt->batch[k] = ptrs + (3 + k) * n;
    opt->lowered = (amp_tensor_t *)(ptrs + np * (n + 1));
    opt->idx = (int32_t *)(opt->lowered + n + 1);
    opt->counts = amp_tensor_new(ctx, AMP_DTYPE_I64, 1, (int64_t[]){(int64_t)n + 1});

    memcpy(opt->params, params, (size_t)n * sizeof *params);
    for (int k = 0; k < opt->n_state; k++)
        for (int i = 0; i < n; i++)
            opt->state[k][i] =
                amp_tensor_new(ctx, AMP_DTYPE_F32, params[i]->ndim, params[i]->shape);
    hold_all(opt, 1); // amp_tensor_free of any of them aborts until the optimizer goes
    *out = opt;
    return AMP_OK;
}

void amp_optim_free(amp_optim_t *opt) {
    if (!opt) return;
    hold_all(opt, -1);
    for (int k = 0; k < opt->n_state; k++)
        for (int i = 0; i < opt->n; i++)
            amp_tensor_free(opt->state[k][i]);
    amp_tensor_free(opt->counts);
    free(opt->params); // the block
    free(opt);
}

void amp_optim_step_unless(amp_optim_t *opt, const amp_tensor_t *found_inf) {
    int nb = 0;
    for (int i = 0; i < opt->n; i++) {
        amp_tensor_t *g = opt->params[i]->grad;
        if (!g) continue;
        AMP_ASSERT(amp_dtype_is_float(g->dtype), "(grad of an f32 parameter is %s)",
                   amp_dtype_name(g->dtype)); // (or a narrower float one: amp_tensor_grad)
        opt->batch[0][nb] = opt->params[i];
        opt->batch[1][nb] = g;
        opt->batch[2][nb] = opt->n_state > 0 ? opt->state[0][i] : NULL;
        opt->batch[3][nb] = opt->n_state > 1 ? opt->state[1][i] : NULL;
        opt->batch[4][nb] = amp_precast_target(opt->params[i], &opt->lowered[nb]);
        opt->idx[nb++] = i;
    }
    opt->idx[nb] = opt->n; // the step itself counts even when nothing had a gradient
    if (opt->ctx->nvtx) amp_nvtx_push(amp_optim_kind_name(opt->p.kind)); // the kernels' op
    opt->ctx->be->optim_step(opt->ctx->bctx, &opt->p, opt->batch[0], opt->batch[1],
                             opt->n_state > 0 ? opt->batch[2] : NULL,
                             opt->n_state > 1 ? opt->batch[3] : NULL, opt->batch[4], nb,
                             opt->counts, opt->idx, found_inf);
    if (opt->ctx->nvtx) amp_nvtx_pop();
    for (int k = 0; k < nb; k++)
        amp_precast_written(opt->batch[0][k], opt->batch[4][k] != NULL);
}

void amp_optim_step(amp_optim_t *opt) {
    amp_optim_step_unless(opt, NULL);
}

void amp_optim_zero_grad(amp_optim_t *opt) {
    for (int i = 0; i < opt->n; i++)
        amp_tensor_zero_grad(opt->params[i]);
}

int amp_optim_num_params(const amp_optim_t *opt) {
    return opt->n;
}

amp_tensor_t *amp_optim_param(const amp_optim_t *opt, int i) {
    AMP_ASSERT(i >= 0 && i < opt->n, "(parameter %d of %d)", i, opt->n);
    return opt->params[i];
}

// One count, read from the backend.
static int64_t count_of(const amp_optim_t *opt, int i) {
    int64_t v;
    opt->ctx->be->download(opt->ctx->bctx, &v, (const int64_t *)amp_tensor_ptr(opt->counts) + i,
                           sizeof v);
    return v;
}

amp_ctx_t *amp_optim_ctx(const amp_optim_t *opt) {
    return opt->ctx;
}

int64_t amp_optim_steps(const amp_optim_t *opt) {
    return count_of(opt, opt->n);
}
const amp_optim_params *amp_optim_get_params(const amp_optim_t *opt) {
    return &opt->p;
}

amp_status amp_optim_set_params(amp_optim_t *opt, const amp_optim_params *p) {
    amp_clear_error();
    const char *null = !opt ? "opt" : !p ? "p" : NULL;
    if (null)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_optim_set_params: %s is NULL", null);
    amp_status st = validate_params(p);
    if (st != AMP_OK) return st;
    if (p->kind != opt->p.kind)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "optimizer kind cannot change (this optimizer is %s, got %s)",
                             amp_optim_kind_name(opt->p.kind), amp_optim_kind_name(p->kind));
    if (p->kind == AMP_OPTIM_SGD && p->momentum != 0.0 && opt->n_state == 0)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "momentum=%g: this SGD optimizer was created without momentum and "
                             "has no momentum buffers",
                             p->momentum);
    opt->p = *p;
    return AMP_OK;
}

int64_t amp_optim_param_steps(const amp_optim_t *opt, int i) {
    AMP_ASSERT(i >= 0 && i < opt->n, "(parameter %d of %d)", i, opt->n);
    return count_of(opt, i);
}

amp_tensor_t *amp_optim_state(const amp_optim_t *opt, int i, int k) {
    AMP_ASSERT(i >= 0 && i < opt->n && k >= 0 && k < 2, "(parameter %d of %d, state %d)", i, opt->n,
               k);
    return k < opt->n_state ? opt->state[k][i] : NULL;
}

void amp_optim_set_steps(amp_optim_t *opt, int64_t steps, const int64_t *param_steps) {
    // a negative count would make Adam's bias corrections 1 - beta^step negative or 0 (NaN weights)
    AMP_ASSERT(steps >= 0, "(amp_optim_set_steps: a step count from 0, got steps = %lld)",
               (long long)steps);
    for (int i = 0; i < opt->n; i++)
        AMP_ASSERT(param_steps[i] >= 0,
                   "(amp_optim_set_steps: a step count from 0, got param_steps[%d] = %lld)", i,
                   (long long)param_steps[i]);
    int64_t *all = amp_xmalloc(((size_t)opt->n + 1) * sizeof *all);
    memcpy(all, param_steps, (size_t)opt->n * sizeof *param_steps);
    all[opt->n] = steps;
    amp_tensor_write(opt->counts, all);
    free(all);
}
