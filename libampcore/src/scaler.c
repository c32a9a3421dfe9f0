/*
 * scaler.c — GradScaler, as torch.amp.GradScaler (torch/amp/grad_scaler.py) behaves, and the
 * scale-update arithmetic of _amp_update_scale_ (AMP-SEMANTICS.md §3, §4.2).
 *
 * The state lives where the gradients are, in tensors of the backend, as PyTorch keeps it on the
 * GPU: the scale, its reciprocal (unscale_'s inv_scale), the growth tracker, and per optimizer a
 * found_inf that the fused unscale sets. step() hands its found_inf to the optimizer, which skips
 * on the device, and update() is one backend call over the found_infs: a training step never
 * waits for the device. What waits is what reads: get_scale(), growth_tracker(),
 * last_found_inf(), state_dict() and step()'s *skipped (PyTorch's .item()). Like PyTorch, the
 * scale does not exist until the first scale(): unscale/step/update before it are
 * AssertionErrors (AMP_ERR_SCALER_STATE), and state_dict() reports init_scale. Each optimizer has
 * a stage (READY, UNSCALED, STEPPED) keyed by its pointer, as PyTorch keys by id(optimizer);
 * update() sums the found_infs of all of them and forgets them. Every update is reported to the
 * context's instrumentation, which reads what it did when it processes the step.
 */
#include "amp-impl.h"

#include <string.h>

typedef enum opt_stage { STAGE_READY, STAGE_UNSCALED, STAGE_STEPPED } opt_stage;

typedef struct opt_state { // one entry of _per_optimizer_states
    const amp_optim_t *opt;
    opt_stage stage;
    bool has_found_inf;      // found_inf_per_device is not empty (some parameter had a gradient)
    amp_tensor_t *found_inf; // f32 [1]: 0 clean, 1 a gradient was inf/NaN (kept for reuse)
} opt_state;

struct amp_scaler {
    amp_scaler_params p;     // p.init_scale is _init_scale (load_state_dict changes it)
    int32_t init_tracker;    // _init_growth_tracker
    amp_ctx_t *ctx;          // the context of the first scale(): the tensors below live there
    amp_tensor_t *scale;     // _scale (f32, 0-dim); NULL until the first scale()
    amp_tensor_t *inv_scale; // float32(1 / double(_scale)), for unscale_
    amp_tensor_t *tracker;   // _growth_tracker (i32, 0-dim)
    amp_tensor_t *rec;       // what the last update did (i32 [AMP_SCALE_REC])
    bool rec_valid;          // the last update was update(), which consumes inf checks
    opt_state *states;
    int n_states, cap_states;
    amp_tensor_t **found_infs; // [cap_states] update()'s arguments
    bool *stepped;
};

// PyTorch's text of the _check_scale_growth_tracker assertion.
#define SCALE_IS_NONE(fn)                                                                          \
    "Attempted " fn " but _scale is None.  This may indicate your script did not use "             \
    "scaler.scale(loss or outputs) earlier in the iteration."

// ---------------------------------------------------------------------------------------------
// The kernels' arithmetic

void amp_scale_update(float *scale, int32_t *growth_tracker, float found_inf, double growth_factor,
                      double backoff_factor, int growth_interval) {
    amp_scale_update_step(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                          growth_interval);
}

float amp_inv_scale(float scale) {
    return amp_inv_scale_of(scale);
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
    amp_clear_error();
    if (out) *out = NULL;
    const char *null = !out ? "out" : !p ? "p" : NULL;
    if (null) return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_scaler_new: %s is NULL", null);
    if (p->enabled) {
        amp_status st = validate_factors(p->growth_factor, p->backoff_factor);
        if (st != AMP_OK) return st;
    }
    amp_scaler_t *sc = amp_xcalloc(1, sizeof *sc);
    sc->p = *p;
    *out = sc;
    return AMP_OK;
}

void amp_scaler_free(amp_scaler_t *sc) {
    if (!sc) return;
    for (int i = 0; i < sc->cap_states; i++)
        amp_tensor_free(sc->states[i].found_inf);
    amp_tensor_free(sc->scale);
    amp_tensor_free(sc->inv_scale);
    amp_tensor_free(sc->tracker);
    amp_tensor_free(sc->rec);
    free(sc->states);
    free(sc->found_infs);
    free(sc->stepped);
    free(sc);
}

bool amp_scaler_is_enabled(const amp_scaler_t *sc) {
    return sc->p.enabled;
}

float amp_scaler_get_scale(const amp_scaler_t *sc) {
    if (!sc->p.enabled) return 1.0f;
    return sc->scale ? amp_tensor_item(sc->scale) : sc->p.init_scale;
}

int32_t amp_scaler_growth_tracker(const amp_scaler_t *sc) {
    if (!sc->p.enabled) return 0;
    if (!sc->tracker) return sc->init_tracker;
    int32_t v;
    amp_tensor_read(sc->tracker, &v);
    return v;
}

float amp_scaler_last_found_inf(const amp_scaler_t *sc) {
    if (!sc->rec_valid) return -1.0f;
    int32_t rec[AMP_SCALE_REC];
    float v;
    amp_tensor_read(sc->rec, rec); // the record of the last update
    memcpy(&v, &rec[AMP_REC_FOUND_INF], sizeof v);
    return v;
}

// ---------------------------------------------------------------------------------------------
// scale, unscale_, step, update

// The host's copy of scale and tracker into the tensors (creation, update_to, load_state_dict).
static void write_scale(amp_scaler_t *sc, float scale) {
    const float inv = amp_inv_scale(scale);
    amp_tensor_write(sc->scale, &scale);
    amp_tensor_write(sc->inv_scale, &inv);
}

amp_tensor_t *amp_scaler_scale(amp_scaler_t *sc, amp_ctx_t *ctx, amp_tensor_t *loss) {
    if (!sc->p.enabled) return loss;
    if (!sc->scale) { // _lazy_init_scale_growth_tracker
        sc->ctx = ctx;
        sc->scale = amp_tensor_new(ctx, AMP_DTYPE_F32, 0, NULL);
        sc->inv_scale = amp_tensor_new(ctx, AMP_DTYPE_F32, 0, NULL);
        sc->tracker = amp_tensor_new(ctx, AMP_DTYPE_I32, 0, NULL);
        sc->rec = amp_tensor_new(ctx, AMP_DTYPE_I32, 1, (int64_t[]){AMP_SCALE_REC});
        write_scale(sc, sc->p.init_scale);
        amp_tensor_write(sc->tracker, &sc->init_tracker);
        if (ctx->instr)
            amp_instr_scaler_settings(ctx, sc->p.init_scale, sc->p.growth_factor,
                                      sc->p.backoff_factor, sc->p.growth_interval);
    }
    AMP_ASSERT(ctx == sc->ctx, "(a GradScaler's scale lives in the context of its first scale(); "
                               "scale() got another context)");
    // outputs * _scale, _scale a 0-dim f32 tensor: a 0-dim f16/bf16 loss promotes to f32 (both
    // are 0-dim), a dimensioned one keeps its dtype.
    return amp_mul(ctx, loss, sc->scale);
}

// _per_optimizer_states[id(opt)], created READY on first use like the defaultdict.
static opt_state *state_of(amp_scaler_t *sc, const amp_optim_t *opt) {
    for (int i = 0; i < sc->n_states; i++)
        if (sc->states[i].opt == opt) return &sc->states[i];
    if (sc->n_states == sc->cap_states) {
        const int cap = sc->cap_states ? 2 * sc->cap_states : 4;
        sc->states = amp_xrealloc(sc->states, (size_t)cap * sizeof *sc->states);
        memset(sc->states + sc->cap_states, 0, (size_t)(cap - sc->cap_states) * sizeof *sc->states);
        sc->found_infs = amp_xrealloc(sc->found_infs, (size_t)cap * sizeof *sc->found_infs);
        sc->stepped = amp_xrealloc(sc->stepped, (size_t)cap * sizeof *sc->stepped);
        sc->cap_states = cap;
    }
    opt_state *s = &sc->states[sc->n_states++];
    *s = (opt_state){.opt = opt, .stage = STAGE_READY, .found_inf = s->found_inf};
    return s;
}

// _unscale_grads_ and the stage change: every gradient in one fused call (they are all f32, on
// one device; a gradient kept narrower than its f32 parameter, amp_tensor_grad, is read as it is
// and written unscaled into an f32 one of its own); found_inf is recorded only when there was a
// gradient, as PyTorch's per-device dict stays empty otherwise.
static amp_status unscale_grads(amp_scaler_t *sc, amp_optim_t *opt, opt_state *s) {
    const int n = amp_optim_num_params(opt);
    // per gradient: the tensor unscaled into, its narrower input (or NULL: in place), its owner
    amp_tensor_t **grads = amp_xmalloc(3 * (size_t)n * sizeof *grads), **owner = grads + 2 * n;
    const amp_tensor_t **from = (const amp_tensor_t **)(grads + n);
    int ng = 0;
    bool narrow = false;
    for (int i = 0; i < n; i++) {
        amp_tensor_t *p = amp_optim_param(opt, i), *g = p->grad;
        if (!g) continue;
        if (p->dtype == AMP_DTYPE_F16) {
            free(grads);
            return amp_set_error(AMP_ERR_SCALER_FP16_GRADS,
                                 "Attempting to unscale FP16 gradients.");
        }
        from[ng] = g->dtype != p->dtype ? g : NULL; // kept narrower (amp_tensor_grad)
        narrow |= from[ng] != NULL;
        grads[ng] = from[ng] ? amp_grad_new(p->ctx, p) : g;
        owner[ng++] = p;
    }
    s->has_found_inf = ng > 0;
    if (ng > 0) {
        amp_ctx_t *ctx = sc->ctx;
        AMP_ASSERT(grads[0]->ctx == ctx, "(the optimizer's gradients are in another context than "
                                         "the GradScaler's scale)");
        if (!s->found_inf) s->found_inf = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
        if (ctx->nvtx) amp_nvtx_push("unscale_"); // the kernels' op
        ctx->be->fill(ctx->bctx, s->found_inf, 0.0f);
        ctx->be->unscale(ctx->bctx, grads, narrow ? from : NULL, ng, sc->inv_scale, s->found_inf);
        if (ctx->nvtx) amp_nvtx_pop();
    }
    for (int k = 0; k < ng; k++) // the unscaled gradients take over from the narrower ones
        if (from[k]) amp_grad_replace(owner[k], grads[k]);
    free(grads);
    s->stage = STAGE_UNSCALED;
    return AMP_OK;
}

// A NULL scaler or optimizer given to fn: AMP_ERR_INVALID_ARGUMENT naming it (before the stage
// checks, whose PyTorch messages would blame the order of the calls).
static amp_status null_argument(const char *fn, const amp_scaler_t *sc, bool need_opt,
                                const amp_optim_t *opt) {
    const char *null = !sc ? "sc" : need_opt && !opt ? "opt" : NULL;
    return null ? amp_set_error(AMP_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, null) : AMP_OK;
}

amp_status amp_scaler_unscale(amp_scaler_t *sc, amp_optim_t *opt) {
    amp_clear_error();
    amp_status st = null_argument("amp_scaler_unscale", sc, true, opt);
    if (st != AMP_OK) return st;
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->scale) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("unscale_"));
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
    amp_clear_error();
    if (skipped) *skipped = false;
    amp_status null = null_argument("amp_scaler_step", sc, true, opt);
    if (null != AMP_OK) return null;
    if (!sc->p.enabled) {
        amp_optim_step(opt);
        return AMP_OK;
    }
    if (!sc->scale) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("step"));
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
    amp_optim_step_unless(opt, s->found_inf);
    s->stage = STAGE_STEPPED;
    if (skipped) *skipped = amp_tensor_item(s->found_inf) != 0.0f; // waits for the device
    return AMP_OK;
}

// Both forms of update(): report, then forget every optimizer's stage.
static void finish_update(amp_scaler_t *sc) {
    if (sc->ctx->instr) amp_instr_scale(sc->ctx, sc->rec);
    sc->n_states = 0;
}

amp_status amp_scaler_update(amp_scaler_t *sc) {
    amp_clear_error();
    amp_status st = null_argument("amp_scaler_update", sc, false, NULL);
    if (st != AMP_OK) return st;
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->scale) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("update"));
    // found_infs[0] += found_infs[i]: the sum over every optimizer that recorded one.
    int n = 0;
    for (int i = 0; i < sc->n_states; i++) {
        if (!sc->states[i].has_found_inf) continue;
        sc->found_infs[n] = sc->states[i].found_inf;
        sc->stepped[n++] = sc->states[i].stage == STAGE_STEPPED;
    }
    if (n == 0)
        return amp_set_error(AMP_ERR_SCALER_STATE, "No inf checks were recorded prior to update.");
    amp_ctx_t *ctx = sc->ctx;
    if (ctx->nvtx) amp_nvtx_push("update"); // the kernel's op
    ctx->be->scale_update(ctx->bctx, sc->scale, sc->inv_scale, sc->tracker, sc->found_infs,
                          sc->stepped, n, &sc->p, sc->rec);
    if (ctx->nvtx) amp_nvtx_pop();
    sc->rec_valid = true;
    finish_update(sc);
    return AMP_OK;
}

amp_status amp_scaler_update_to(amp_scaler_t *sc, float new_scale) {
    amp_clear_error();
    amp_status st = null_argument("amp_scaler_update_to", sc, false, NULL);
    if (st != AMP_OK) return st;
    if (!sc->p.enabled) return AMP_OK;
    if (!sc->scale) return amp_set_error(AMP_ERR_SCALER_STATE, SCALE_IS_NONE("update"));
    // _scale.fill_(new_scale); the tracker stays. Rare and host-driven: it reads the device.
    int32_t rec[AMP_SCALE_REC] = {0};
    const float before = amp_tensor_item(sc->scale), found = 0.0f;
    for (int i = 0; i < sc->n_states; i++)
        if (sc->states[i].stage == STAGE_STEPPED && amp_tensor_item(sc->states[i].found_inf) != 0)
            rec[AMP_REC_SKIPPED] = 1;
    write_scale(sc, new_scale);
    memcpy(&rec[AMP_REC_BEFORE], &before, 4);
    memcpy(&rec[AMP_REC_AFTER], &new_scale, 4);
    memcpy(&rec[AMP_REC_FOUND_INF], &found, 4);
    amp_tensor_read(sc->tracker, &rec[AMP_REC_TRACKER]);
    amp_tensor_write(sc->rec, rec);
    sc->rec_valid = false;
    finish_update(sc);
    return AMP_OK;
}

// ---------------------------------------------------------------------------------------------
// state_dict / load_state_dict

amp_status amp_scaler_state_dict(const amp_scaler_t *sc, amp_scaler_state *out) {
    amp_clear_error();
    const char *null = !sc ? "sc" : !out ? "out" : NULL;
    if (null)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_scaler_state_dict: %s is NULL", null);
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
    amp_clear_error();
    const char *null = !sc ? "sc" : !st ? "st" : NULL;
    if (null)
        return amp_set_error(AMP_ERR_INVALID_ARGUMENT, "amp_scaler_load_state_dict: %s is NULL",
                             null);
    if (!sc->p.enabled) return AMP_OK;
    amp_status s = validate_factors(st->growth_factor, st->backoff_factor);
    if (s != AMP_OK) return s;
    sc->p.init_scale = st->scale;
    sc->p.growth_factor = st->growth_factor;
    sc->p.backoff_factor = st->backoff_factor;
    sc->p.growth_interval = st->growth_interval;
    sc->init_tracker = st->growth_tracker;
    if (sc->scale) { // fill_ the live tensors
        write_scale(sc, st->scale);
        amp_tensor_write(sc->tracker, &st->growth_tracker);
    }
    return AMP_OK;
}
