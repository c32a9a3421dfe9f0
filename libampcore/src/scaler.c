/*
 * scaler.c — GradScaler, as torch.amp.GradScaler (torch/amp/grad_scaler.py) behaves, and the
 * scale-update arithmetic of _amp_update_scale_ (AMP-SEMANTICS.md §3, §4.2).
 *
 * The scale lives on the host: the backend has no scale-update member, and step() must read
 * found_inf anyway to decide whether to skip (PyTorch syncs there too). found_inf is computed on
 * the device by the backend's fused unscale, into a fresh zeroed one-element tensor per
 * unscale_, and read back once. Like PyTorch, the scale does not exist until the first scale():
 * unscale/step/update before it are AssertionErrors (AMP_ERR_SCALER_STATE), and state_dict()
 * reports init_scale. Each optimizer has a stage (READY, UNSCALED, STEPPED) keyed by its pointer,
 * as PyTorch keys by id(optimizer); update() sums the found_infs of all of them and forgets them.
 * Every update is reported to the instrumentation of the context scale() last ran in.
 */
#include "amp-impl.h"

#include <math.h>

typedef enum opt_stage { STAGE_READY, STAGE_UNSCALED, STAGE_STEPPED } opt_stage;

typedef struct opt_state { // one entry of _per_optimizer_states
    const amp_optim_t *opt;
    opt_stage stage;
    bool has_found_inf; // found_inf_per_device is not empty (some parameter had a gradient)
    float found_inf;    // 0 clean, 1 a gradient was inf/NaN
} opt_state;

struct amp_scaler {
    amp_scaler_params p;  // p.init_scale is _init_scale (load_state_dict changes it)
    int32_t init_tracker; // _init_growth_tracker
    bool created;         // _scale and _growth_tracker exist (first scale() made them)
    float scale;          // _scale
    int32_t tracker;      // _growth_tracker
    float last_found_inf; // -1: not valid
    bool skipped;         // a step was skipped since the last update
    amp_ctx_t *ctx;       // where scale() last ran: its instrumentation hears of updates
    opt_state *states;
    int n_states, cap_states;
};

// PyTorch's text of the _check_scale_growth_tracker assertion.
#define SCALE_IS_NONE(fn)                                                                          \
    "Attempted " fn " but _scale is None.  This may indicate your script did not use "             \
    "scaler.scale(loss or outputs) earlier in the iteration."

// ---------------------------------------------------------------------------------------------
// The kernels' arithmetic

void amp_scale_update(float *scale, int32_t *growth_tracker, float found_inf, double growth_factor,
                      double backoff_factor, int growth_interval) {
    if (found_inf != 0.0f) { // `if (*found_inf)`: NaN counts as found
        *scale = (float)((double)*scale * backoff_factor);
        *growth_tracker = 0;
        return;
    }
    // Incremented before the exact compare; wraps like the int32 it is (never UB here).
    int32_t successful = (int32_t)((uint32_t)*growth_tracker + 1u);
    if (successful == growth_interval) {
        float grown = (float)((double)*scale * growth_factor);
        if (isfinite(grown)) *scale = grown; // never grow to inf (PR #98876)
        *growth_tracker = 0;
    } else {
        *growth_tracker = successful;
    }
}

float amp_inv_scale(float scale) {
    return (float)(1.0 / (double)scale);
}

// ---------------------------------------------------------------------------------------------
// Construction and queries

amp_scaler_params amp_scaler_defaults(void) {
    return (amp_scaler_params){.init_scale = 65536.0f,
                               .growth_factor = 2.0,
                               .backoff_factor = 0.5,
                               .growth_interval = 2000,
                               .enabled = true};
}

// The constructor's assertions, with PyTorch's text and the offending value.
static amp_status validate_factors(double growth_factor, double backoff_factor) {
    if (!(growth_factor > 1.0))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "The growth factor must be > 1.0. (growth_factor=%g)", growth_factor);
    if (!(backoff_factor < 1.0))
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT,
                             "The backoff factor must be < 1.0. (backoff_factor=%g)",
                             backoff_factor);
    return AMP_OK;
}

amp_status amp_scaler_new(const amp_scaler_params *p, amp_scaler_t **out) {
    *out = NULL;
    if (p->enabled) {
        amp_status st = validate_factors(p->growth_factor, p->backoff_factor);
        if (st != AMP_OK) return st;
    }
    amp_scaler_t *sc = amp_xcalloc(1, sizeof *sc);
    sc->p = *p;
    sc->last_found_inf = -1.0f;
    *out = sc;
    return AMP_OK;
}

void amp_scaler_free(amp_scaler_t *sc) {
    if (!sc) return;
    free(sc->states);
    free(sc);
}

bool amp_scaler_is_enabled(const amp_scaler_t *sc) {
    return sc->p.enabled;
}

float amp_scaler_get_scale(const amp_scaler_t *sc) {
    if (!sc->p.enabled) return 1.0f;
    return sc->created ? sc->scale : sc->p.init_scale;
}

int32_t amp_scaler_growth_tracker(const amp_scaler_t *sc) {
    if (!sc->p.enabled) return 0;
    return sc->created ? sc->tracker : sc->init_tracker;
}

float amp_scaler_last_found_inf(const amp_scaler_t *sc) {
    return sc->last_found_inf;
}

// ---------------------------------------------------------------------------------------------
// scale, unscale_, step, update

amp_tensor_t *amp_scaler_scale(amp_scaler_t *sc, amp_ctx_t *ctx, amp_tensor_t *loss) {
    if (!sc->p.enabled) return loss;
    sc->ctx = ctx;
    if (!sc->created) { // _lazy_init_scale_growth_tracker
        sc->created = true;
        sc->scale = sc->p.init_scale;
        sc->tracker = sc->init_tracker;
        if (ctx->instr)
            amp_instr_scaler_settings(ctx, sc->p.init_scale, sc->p.growth_factor,
                                      sc->p.backoff_factor, sc->p.growth_interval);
    }
    // loss * _scale with _scale a 0-dim f32 tensor: a 0-dim f16/bf16 loss promotes to f32 (both
    // are 0-dim), a dimensioned one keeps its dtype.
    if (loss->ndim == 0 && loss->dtype != AMP_DTYPE_F32) loss = amp_to(ctx, loss, AMP_DTYPE_F32);
    return amp_mul_scalar(ctx, loss, (double)sc->scale);
}

// _per_optimizer_states[id(opt)], created READY on first use like the defaultdict.
static opt_state *state_of(amp_scaler_t *sc, const amp_optim_t *opt) {
    for (int i = 0; i < sc->n_states; i++)
        if (sc->states[i].opt == opt) return &sc->states[i];
    if (sc->n_states == sc->cap_states) {
        sc->cap_states = sc->cap_states ? 2 * sc->cap_states : 4;
        sc->states = amp_xrealloc(sc->states, (size_t)sc->cap_states * sizeof *sc->states);
    }
    opt_state *s = &sc->states[sc->n_states++];
    *s = (opt_state){.opt = opt, .stage = STAGE_READY};
    return s;
}

// _unscale_grads_ and the stage change: every gradient in one fused call (they are all f32, on
// one device); found_inf is recorded only when there was a gradient, as PyTorch's per-device
// dict stays empty otherwise.
static amp_status unscale_grads(amp_scaler_t *sc, amp_optim_t *opt, opt_state *s) {
    int n = amp_optim_num_params(opt);
    amp_tensor_t **grads = amp_xmalloc((size_t)n * sizeof *grads);
    int ng = 0;
    for (int i = 0; i < n; i++) {
        amp_tensor_t *g = amp_tensor_grad(amp_optim_param(opt, i));
        if (!g) continue;
        if (g->dtype == AMP_DTYPE_F16) {
            free(grads);
            return amp_set_error(AMP_ERR_SCALER_FP16_GRADS,
                                 "Attempting to unscale FP16 gradients.");
        }
        grads[ng++] = g;
    }
    s->has_found_inf = ng > 0;
    if (ng > 0) {
        amp_ctx_t *ctx = grads[0]->ctx;
        amp_tensor_t *found_inf = amp_scratch_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
        if (ctx->nvtx) amp_nvtx_push("unscale_"); // the kernels' op
        ctx->be->fill(ctx->bctx, found_inf, 0.0f);
        ctx->be->unscale(ctx->bctx, grads, ng, amp_inv_scale(sc->scale), found_inf);
        if (ctx->nvtx) amp_nvtx_pop();
        s->found_inf = amp_tensor_item(found_inf);
    }
    free(grads);
    s->stage = STAGE_UNSCALED;
    return AMP_OK;
}

amp_status amp_scaler_unscale(amp_scaler_t *sc, amp_optim_t *opt) {
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->created) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("unscale_"));
    opt_state *s = state_of(sc, opt);
    if (s->stage == STAGE_UNSCALED)
        return amp_set_error(AMP_ERR_SCALER_STATE,
                             "unscale_() has already been called on this optimizer since the "
                             "last update().");
    if (s->stage == STAGE_STEPPED)
        return amp_set_error(AMP_ERR_SCALER_STATE, "unscale_() is being called after step().");
    return unscale_grads(sc, opt, s);
}

amp_status amp_scaler_step(amp_scaler_t *sc, amp_optim_t *opt, bool *skipped) {
    if (skipped) *skipped = false;
    if (!sc->p.enabled) {
        amp_optim_step(opt);
        return AMP_OK;
    }
    if (!sc->created) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("step"));
    opt_state *s = state_of(sc, opt);
    if (s->stage == STAGE_STEPPED)
        return amp_set_error(AMP_ERR_SCALER_STATE,
                             "step() has already been called since the last update().");
    if (s->stage == STAGE_READY) {
        amp_status st = unscale_grads(sc, opt, s);
        if (st != AMP_OK) return st;
    }
    if (!s->has_found_inf)
        return amp_set_error(AMP_ERR_SCALER_STATE,
                             "No inf checks were recorded for this optimizer.");
    bool found = s->found_inf != 0.0f;
    if (!found) amp_optim_step(opt);
    sc->skipped |= found;
    s->stage = STAGE_STEPPED;
    if (skipped) *skipped = found;
    return AMP_OK;
}

// Both forms of update(): report, then forget every optimizer's stage.
static void finish_update(amp_scaler_t *sc, float before, float found_inf) {
    if (sc->ctx->instr)
        amp_instr_scale(sc->ctx, before, sc->scale, found_inf, sc->tracker, sc->skipped);
    sc->skipped = false;
    sc->n_states = 0;
}

amp_status amp_scaler_update(amp_scaler_t *sc) {
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->created) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("update"));
    // found_infs[0] += found_infs[i]: the sum over every optimizer that recorded one.
    bool any = false;
    float sum = 0.0f;
    for (int i = 0; i < sc->n_states; i++) {
        if (!sc->states[i].has_found_inf) continue;
        sum += sc->states[i].found_inf;
        any = true;
    }
    if (!any)
        return amp_set_error(AMP_ERR_SCALER_STATE, "No inf checks were recorded prior to update.");
    float before = sc->scale;
    amp_scale_update(&sc->scale, &sc->tracker, sum, sc->p.growth_factor, sc->p.backoff_factor,
                     sc->p.growth_interval);
    sc->last_found_inf = sum;
    finish_update(sc, before, sum);
    return AMP_OK;
}

amp_status amp_scaler_update_to(amp_scaler_t *sc, float new_scale) {
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->created) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("update"));
    float before = sc->scale;
    sc->scale = new_scale; // _scale.fill_(new_scale); the tracker stays
    sc->last_found_inf = -1.0f;
    finish_update(sc, before, 0.0f);
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// state_dict / load_state_dict

amp_status amp_scaler_state_dict(const amp_scaler_t *sc, amp_scaler_state *out) {
    if (!sc->p.enabled)
        return amp_set_error(AMP_ERR_UNSUPPORTED,
                             "GradScaler is disabled: its state_dict() is empty ({} in PyTorch)");
    *out = (amp_scaler_state){.scale = amp_scaler_get_scale(sc),
                              .growth_factor = sc->p.growth_factor,
                              .backoff_factor = sc->p.backoff_factor,
                              .growth_interval = sc->p.growth_interval,
                              .growth_tracker = amp_scaler_growth_tracker(sc)};
    return AMP_OK;
}

amp_status amp_scaler_load_state_dict(amp_scaler_t *sc, const amp_scaler_state *st) {
    if (!sc->p.enabled) return AMP_OK;
    amp_status s = validate_factors(st->growth_factor, st->backoff_factor);
    if (s != AMP_OK) return s;
    sc->p.init_scale = st->scale;
    sc->p.growth_factor = st->growth_factor;
    sc->p.backoff_factor = st->backoff_factor;
    sc->p.growth_interval = st->growth_interval;
    sc->init_tracker = st->growth_tracker;
    if (sc->created) { // fill_ the live tensors
        sc->scale = st->scale;
        sc->tracker = st->growth_tracker;
    }
    return AMP_OK;
}
