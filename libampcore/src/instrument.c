/*
 * instrument.c — libampcore's numerics instrumentation, emitting the record stream (amp-record.h).
 *
 * On when the process records (AMPPROBE_SPOOL_DIR from `ampprobe run`, or AMPPROBE_OUT): every
 * forward op's output and every gradient flowing backward is scanned once (amp_tensor_stats).
 * On sampled steps (AMPPROBE_STATS_EVERY, default 1) the statistics and op records are emitted;
 * on every step non-finite values are traced to the op that produced them:
 *   - a producer's inputs hold no unexpected non-finite value but its output does; the others
 *     only propagate it. An attention mask's -inf (masked_fill with an infinite value) is
 *     expected, and so is what a softmax makes of it while a row keeps finite entries.
 *   - a non-finite value in a leaf tensor that is not a parameter is data arriving broken;
 *   - a step whose forward stayed finite but whose gradients overflowed is a loss-scale overflow
 *     (benign: the scaler skips the step and backs off).
 * Off, the context holds no instrumentation and ops pay one predictable branch.
 */
#include "amp-impl.h"
#include "amp-record.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define DETAIL_MAX 1024

typedef struct amp_instr {
    int stats_every;
    int64_t step_start_ns;
    int64_t last_op_ns;
    int32_t layers_emitted;
    bool stats_step;     // this step's statistics are emitted
    bool fwd_nonfinite;  // a forward op produced or received an unexpected non-finite value
    bool bwd_nonfinite;
    unsigned autocast_dtypes; // bit per dtype already written to META
    // the backward node running now, and whether the gradient it received was finite
    amp_node *bw_node;
    bool bw_dy_finite;
} amp_instr;

// ---------------------------------------------------------------------------------------------
// Lifecycle and steps

void amp_instr_init(amp_ctx_t *ctx) {
    if (!amp_record_enabled()) return;
    amp_instr *in = amp_xcalloc(1, sizeof *in);
    const char *every = getenv("AMPPROBE_STATS_EVERY");
    in->stats_every = every && atoi(every) > 0 ? atoi(every) : 1;
    in->stats_step = true;
    in->step_start_ns = in->last_op_ns = amp_record_now_ns();
    ctx->instr = in;
    amp_record_meta(&(amp_rec_meta){"device", ctx->device == AMP_DEVICE_CPU ? "cpu" : "cuda"});
    char buf[32];
    snprintf(buf, sizeof buf, "%d", in->stats_every);
    amp_record_meta(&(amp_rec_meta){"stats_every", buf});
}

void amp_instr_free(amp_ctx_t *ctx) {
    free(ctx->instr);
    ctx->instr = NULL;
}

int64_t amp_ctx_step_index(const amp_ctx_t *ctx) { return ctx->step; }

// L2 norm of every parameter gradient (after unscaling, so in the loss's units).
static double grad_norm(const amp_ctx_t *ctx) {
    double sum = 0;
    for (size_t i = 0; i < ctx->n_persist; i++) {
        amp_tensor_t *g = ctx->persist[i]->grad;
        if (!g) continue;
        int64_t n = amp_tensor_numel(g);
        float *v = amp_xmalloc((size_t)n * sizeof *v);
        amp_tensor_read_f32(g, v);
        for (int64_t k = 0; k < n; k++) sum += (double)v[k] * v[k];
        free(v);
    }
    return sqrt(sum);
}

void amp_ctx_step_end(amp_ctx_t *ctx, float loss) {
    amp_instr *in = ctx->instr;
    if (in) {
        int64_t now = amp_record_now_ns();
        amp_record_step(&(amp_rec_step){.step = ctx->step,
                                        .start_ns = in->step_start_ns,
                                        .end_ns = now,
                                        .loss = loss,
                                        .grad_norm = in->stats_step ? grad_norm(ctx) : NAN});
        if (!isfinite(loss))
            amp_record_event(&(amp_rec_event){
                .step = ctx->step, .layer_id = -1, .kind = AMP_EVENT_LOSS_NONFINITE,
                .severity = AMP_SEVERITY_ERROR, .count = 1, .value = loss,
                .detail = in->fwd_nonfinite ? "the forward pass produced non-finite values"
                                            : "the loss itself became non-finite"});
        in->step_start_ns = in->last_op_ns = amp_record_now_ns();
        in->fwd_nonfinite = in->bwd_nonfinite = false;
        in->stats_step = (ctx->step + 1) % in->stats_every == 0;
    }
    ctx->step++;
}

// ---------------------------------------------------------------------------------------------
// Helpers

static void sync_layers(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    for (; in->layers_emitted < ctx->n_layers; in->layers_emitted++) {
        int32_t id = in->layers_emitted;
        amp_record_layer(&(amp_rec_layer){id, ctx->layer_parent[id], ctx->layer_names[id]});
    }
}

static int64_t nonfinite(const amp_stats *s) { return s->n_nan + s->n_posinf + s->n_neginf; }

// Non-finite values t should not hold: all of them, except the infinities of an attention
// mask (masked_fill with -inf) and what stays in views of it.
static int64_t unexpected_nonfinite(const amp_tensor_t *t, const amp_stats *s) {
    if (t->inf_fill < 0) return s->n_nan + s->n_posinf;
    if (t->inf_fill > 0) return s->n_nan + s->n_neginf;
    return nonfinite(s);
}

// The target dtype the overflow/underflow counts refer to: the autocast dtype of the run
// (f16 when autocast never ran: what fp16 would do with an fp32 run's values).
static amp_dtype target_of(const amp_ctx_t *ctx) { return ctx->run_dtype; }

static void emit_stats(amp_ctx_t *ctx, const char *op, int32_t layer, amp_stats_kind kind,
                       const amp_tensor_t *t, const amp_stats *s) {
    amp_record_tensor_stats(&(amp_rec_tensor_stats){
        .step = ctx->step, .layer_id = layer, .op = op, .kind = kind,
        .dtype = amp_dtype_name(t->dtype), .target_dtype = amp_dtype_name(target_of(ctx)),
        .numel = s->numel, .min = s->min, .max = s->max, .amax = s->amax, .n_nan = s->n_nan,
        .n_posinf = s->n_posinf, .n_neginf = s->n_neginf, .n_overflow = s->n_overflow,
        .n_underflow = s->n_underflow, .n_zero = s->n_zero});
}

static size_t appendf(char *buf, size_t n, size_t k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t appendf(char *buf, size_t n, size_t k, const char *fmt, ...) {
    if (k >= n) return k;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + k, n - k, fmt, ap);
    va_end(ap);
    return w > 0 ? k + (size_t)w : k;
}

static size_t describe(char *buf, size_t n, size_t k, const char *what, const amp_tensor_t *t,
                       const amp_stats *s) {
    char shape[64];
    k = appendf(buf, n, k, "%s %s %s min %.6g max %.6g amax %.6g", what, amp_dtype_name(t->dtype),
                amp_shape_str(t, shape, sizeof shape), (double)s->min, (double)s->max, (double)s->amax);
    if (nonfinite(s))
        k = appendf(buf, n, k, " (%lld nan, %lld +inf, %lld -inf)", (long long)s->n_nan,
                    (long long)s->n_posinf, (long long)s->n_neginf);
    return appendf(buf, n, k, "; ");
}

// Analytic FLOPs of an op (GEMM-class: 2mnk; elementwise: one per output element).
static int64_t op_flops(const char *op, const amp_tensor_t *out, amp_tensor_t *const *in, int n) {
    int64_t numel = amp_tensor_numel(out);
    if (n >= 2 && (!strcmp(op, "linear") || !strcmp(op, "mm") || !strcmp(op, "bmm") ||
                   !strcmp(op, "matmul") || !strcmp(op, "addmm")))
        return 2 * numel * in[0]->shape[in[0]->ndim - 1];
    if (n >= 2 && !strcmp(op, "conv2d"))
        return 2 * numel * in[1]->shape[1] * in[1]->shape[2] * in[1]->shape[3];
    return numel;
}

// ---------------------------------------------------------------------------------------------
// Forward ops

void amp_instr_op_slow(amp_ctx_t *ctx, const char *op, amp_cast_policy policy, amp_tensor_t *out,
                       amp_tensor_t *const *inputs, int n) {
    amp_instr *in = ctx->instr;
    sync_layers(ctx);
    int32_t layer = out->layer >= 0 ? out->layer : amp_ctx_current_layer(ctx);
    amp_dtype target = target_of(ctx);
    int64_t now = amp_record_now_ns();
    if (!in->stats_step && amp_tensor_count_nonfinite(out) == 0) { // the common case
        in->last_op_ns = now;
        return;
    }
    amp_stats s;
    amp_tensor_stats(out, target, &s);

    if (in->stats_step) {
        char dts[64] = "", shapes[256] = "";
        size_t kd = 0, ks = 0;
        int64_t bytes = (int64_t)amp_tensor_numel(out) * (int64_t)amp_dtype_size(out->dtype);
        for (int i = 0; i < n; i++) {
            char sh[64];
            kd = appendf(dts, sizeof dts, kd, i ? ",%s" : "%s", amp_dtype_name(inputs[i]->dtype));
            ks = appendf(shapes, sizeof shapes, ks, i ? ",%s" : "%s",
                         amp_shape_str(inputs[i], sh, sizeof sh));
            bytes += amp_tensor_numel(inputs[i]) * (int64_t)amp_dtype_size(inputs[i]->dtype);
        }
        amp_record_op(&(amp_rec_op){
            .step = ctx->step, .layer_id = layer, .op = op, .phase = AMP_PHASE_FWD,
            .in_dtypes = dts, .out_dtype = amp_dtype_name(out->dtype),
            .policy = ctx->ac.enabled ? amp_cast_policy_name(policy) : NULL, .shapes = shapes,
            .flops = op_flops(op, out, inputs, n), .bytes = bytes, .start_ns = in->last_op_ns,
            .end_ns = now});
        emit_stats(ctx, op, layer, AMP_STATS_ACTIVATION, out, &s);
        // an f32 output inside an autocast region (an fp32-policy op) that f16 could not hold
        if (s.n_overflow > 0 && ctx->ac.enabled && out->dtype == AMP_DTYPE_F32 &&
            target == AMP_DTYPE_F16)
            amp_record_event(&(amp_rec_event){
                .step = ctx->step, .layer_id = layer, .op = op, .phase = AMP_PHASE_FWD,
                .kind = AMP_EVENT_OVERFLOW, .severity = AMP_SEVERITY_WARNING,
                .count = s.n_overflow, .value = s.amax,
                .detail = "f32 values beyond the f16 range: this output overflows if it runs in f16"});
    }
    in->last_op_ns = now;

    int64_t bad = unexpected_nonfinite(out, &s);
    if (bad == 0) return;

    // Which inputs carried non-finite values in? (leaves are scanned here, op outputs again:
    // this path runs only when something already went wrong.)
    char detail[DETAIL_MAX];
    size_t k = 0;
    bool inputs_finite = true, from_data = false;
    for (int i = 0; i < n; i++) {
        amp_stats si;
        amp_tensor_stats(inputs[i], target, &si);
        if (unexpected_nonfinite(inputs[i], &si)) {
            inputs_finite = false;
            from_data |= inputs[i]->persistent && !inputs[i]->requires_grad; // a data tensor
        }
        char what[32];
        snprintf(what, sizeof what, "input %d", i);
        k = describe(detail, sizeof detail, k, what, inputs[i], &si);
    }
    describe(detail, sizeof detail, k, "output", out, &s);

    const char *kind = inputs_finite ? AMP_EVENT_NONFINITE_PRODUCER
                                     : from_data ? "nonfinite_input" : AMP_EVENT_NONFINITE_PROPAGATED;
    amp_record_event(&(amp_rec_event){
        .step = ctx->step, .layer_id = layer, .op = op, .phase = AMP_PHASE_FWD, .kind = kind,
        .severity = inputs_finite || from_data ? AMP_SEVERITY_ERROR : AMP_SEVERITY_INFO,
        .count = bad, .value = s.amax, .detail = detail});
    in->fwd_nonfinite = true;
}

// ---------------------------------------------------------------------------------------------
// Backward

void amp_instr_backward_node(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_instr *in = ctx->instr;
    in->bw_node = n;
    if (!in->stats_step) {
        in->bw_dy_finite = amp_tensor_count_nonfinite(dy) == 0;
        return;
    }
    amp_stats s;
    amp_tensor_stats(dy, target_of(ctx), &s);
    in->bw_dy_finite = nonfinite(&s) == 0;
    sync_layers(ctx);
    emit_stats(ctx, n->op, n->layer, AMP_STATS_ACTIVATION_GRAD, dy, &s);
}

void amp_instr_grad(amp_ctx_t *ctx, amp_tensor_t *t, amp_tensor_t *g) {
    amp_instr *in = ctx->instr;
    amp_node *n = in->bw_node;
    if (t->persistent && t->layer < 0 && n) t->layer = n->layer; // a parameter's layer: first use
    if (!n || !in->bw_dy_finite || amp_tensor_count_nonfinite(g) == 0) return;
    amp_stats s;
    amp_tensor_stats(g, target_of(ctx), &s);
    in->bw_dy_finite = false; // one event per node
    amp_stats so;             // a node whose forward output was already broken only propagates
    amp_tensor_stats(n->out, target_of(ctx), &so);
    if (unexpected_nonfinite(n->out, &so)) return;
    in->bwd_nonfinite = true;
    sync_layers(ctx);
    char detail[DETAIL_MAX];
    size_t k = 0;
    if (n->out->grad) {
        amp_stats sd;
        amp_tensor_stats(n->out->grad, target_of(ctx), &sd);
        k = describe(detail, sizeof detail, k, "incoming gradient", n->out->grad, &sd);
    }
    for (int i = 0; i < n->n_in; i++) {
        if (!n->in[i]) continue;
        amp_stats si;
        amp_tensor_stats(n->in[i], target_of(ctx), &si);
        char what[32];
        snprintf(what, sizeof what, "forward input %d", i);
        k = describe(detail, sizeof detail, k, what, n->in[i], &si);
    }
    describe(detail, sizeof detail, k, "gradient", g, &s);
    amp_record_event(&(amp_rec_event){
        .step = ctx->step, .layer_id = n->layer, .op = n->op, .phase = AMP_PHASE_BWD,
        .kind = AMP_EVENT_NONFINITE_PRODUCER,
        .severity = in->fwd_nonfinite ? AMP_SEVERITY_ERROR : AMP_SEVERITY_WARNING,
        .count = nonfinite(&s), .value = s.amax, .detail = detail});
}

void amp_instr_backward_end(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    in->bw_node = NULL;
    if (!in->stats_step) return;
    sync_layers(ctx);
    for (size_t i = 0; i < ctx->n_persist; i++) {
        amp_tensor_t *p = ctx->persist[i];
        if (!p->grad || !p->requires_grad) continue;
        amp_stats s;
        amp_tensor_stats(p->grad, target_of(ctx), &s);
        emit_stats(ctx, p->name ? p->name : "param", p->layer, AMP_STATS_WEIGHT_GRAD, p->grad, &s);
    }
}

// ---------------------------------------------------------------------------------------------
// GradScaler

void amp_instr_autocast_dtype(amp_ctx_t *ctx, amp_dtype t) {
    amp_instr *in = ctx->instr;
    if (in->autocast_dtypes & (1u << t)) return;
    in->autocast_dtypes |= 1u << t;
    amp_record_meta(&(amp_rec_meta){"autocast_dtype", amp_dtype_name(t)});
}

static void meta_number(const char *key, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    amp_record_meta(&(amp_rec_meta){key, buf});
}

void amp_instr_scaler_settings(amp_ctx_t *ctx, float init_scale, double growth_factor,
                               double backoff_factor, int growth_interval) {
    (void)ctx;
    meta_number("scaler.init_scale", init_scale);
    meta_number("scaler.growth_factor", growth_factor);
    meta_number("scaler.backoff_factor", backoff_factor);
    meta_number("scaler.growth_interval", growth_interval);
}

void amp_instr_scale(amp_ctx_t *ctx, float before, float after, float found_inf, int32_t tracker,
                     bool skipped) {
    amp_instr *in = ctx->instr;
    amp_record_scale(&(amp_rec_scale){.step = ctx->step, .scale_before = before,
                                      .scale_after = after, .found_inf = (int32_t)found_inf,
                                      .growth_tracker = tracker, .skipped = skipped});
    char detail[256];
    if (found_inf != 0 && !in->fwd_nonfinite) {
        snprintf(detail, sizeof detail,
                 "gradients overflowed at loss scale %g while the forward pass stayed finite: "
                 "a loss-scale overflow, the step was skipped and the scale backed off to %g",
                 (double)before, (double)after);
        amp_record_event(&(amp_rec_event){.step = ctx->step, .layer_id = -1,
                                          .phase = AMP_PHASE_BWD, .kind = "grad_overflow",
                                          .severity = AMP_SEVERITY_INFO, .count = -1,
                                          .value = before, .detail = detail});
    }
    if (skipped)
        amp_record_event(&(amp_rec_event){.step = ctx->step, .layer_id = -1, .phase = AMP_PHASE_OPTIM,
                                          .kind = AMP_EVENT_STEP_SKIPPED,
                                          .severity = AMP_SEVERITY_WARNING, .count = 1,
                                          .value = before, .detail = NULL});
    if (after != before)
        amp_record_event(&(amp_rec_event){
            .step = ctx->step, .layer_id = -1, .phase = AMP_PHASE_OPTIM,
            .kind = after < before ? AMP_EVENT_SCALE_BACKOFF : AMP_EVENT_SCALE_GROWTH,
            .severity = AMP_SEVERITY_INFO, .count = -1, .value = after, .detail = NULL});
}
