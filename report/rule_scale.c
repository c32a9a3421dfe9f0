/*
 * rule_scale.c — rule `loss-scale`: the GradScaler's dynamics over the focused steps (the scale
 * columns of AMP_STEPS, one row per update, as recorded in AMP_SCALE), per process:
 *   - collapse: many consecutive backoffs, the scale driven toward 0 (a symptom: something is
 *     non-finite on every step);
 *   - sawtooth/thrash: repeated growth-then-overflow cycles (growth interval too short or growth
 *     factor too large), each cycle costing a skipped step;
 *   - frequent skipped steps (beyond the initial calibration, when the scale backs off from its
 *     initial value to where the gradients fit);
 *   - a scale stuck low: it never grows while the gradients leave many bits of fp16 headroom,
 *     so small gradients underflow;
 *   - a GradScaler in a bf16 run (an info): bf16 has fp32's exponent range, so the scale protects
 *     nothing and the scaler costs an unscale pass and a host synchronisation every step.
 *   - gradients clipped while still scaled (clip_grad_norm_ before scaler.unscale_): every applied
 *     step's gradient norm times its scale is one number, the clip's max_norm, where the norms
 *     of a model that learns vary from step to step; so the updates are max_norm/scale.
 *   - an optimizer stepped outside the GradScaler (the PyTorch bridge's step_outside_scaler
 *     event): optimizer.step() called directly beside scaler.scale(), on gradients still
 *     multiplied by the scale (an error), or after scaler.unscale_() with no skip of a step
 *     whose gradients overflowed (a warning).
 * Recommendations come from the observed gradient amax (AMP_TENSOR_STATS activation_grad and
 * weight_grad): the init_scale that keeps the scaled amax under 65504/2.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RULE "loss-scale"
#define COLLAPSE_BACKOFFS 5 // consecutive backoffs that make a collapse
#define THRASH_CYCLES 3     // growth->backoff cycles that make a sawtooth
#define SKIP_RATE_WARN 0.05 // share of steps skipped (after calibration) worth a warning
#define STUCK_LOW_SCALE 128.0
#define STUCK_LOW_HEADROOM_BITS 8.0
#define LOSS_JUMP 10.0 // the loss at a collapse's first step against the steps before it
// a scale that still overflows this high has not come down from its init_scale yet: 2^24 lets
// gradients of 0.002 reach 32752, and the scaled loss's own gradient overflow
#define TOO_HIGH_SCALE 16777216.0

typedef struct scale_run {
    int32_t pid;
    int64_t n, skipped, calib_skipped, backoffs, growths, cycles;
    int64_t first_step, last_step;
    double scale_min, scale_max, scale_last;
    // the longest run of consecutive backoffs, and the overflowing updates at a scale of 0 that
    // followed it (a scale halved past the smallest float stays 0, and every step is skipped)
    int64_t collapse_len, collapse_first, collapse_last, collapse_zeros, collapse_zero_last;
    double collapse_from, collapse_to;
    int64_t min_growth_interval; // fewest clean updates before a growth; -1: no growth
    int64_t last_half_backoffs;
    int64_t first_skip, last_skip;
    // the skipped updates after the initial calibration: the first and last (-1: none), and
    // the scales they ran at
    int64_t first_later_skip, last_later_skip;
    double skip_scale_min, skip_scale_max;
    double calib_to; // the scale the initial calibration came down to
    bool grad_stats; // gradient statistics were recorded (of an applied step or not)
} scale_run;

// A finding of this rule on process pid's optimizer steps first..last.
static report_finding *add_finding(report_findings *out, amp_severity severity, int32_t pid,
                                   int64_t first, int64_t last) {
    report_finding *f = report_finding_add(out, RULE, severity);
    report_finding_where(f, NULL, NULL, "optim");
    f->pid = pid;
    f->first_step = first;
    f->last_step = last;
    return f;
}

// One scale update's share of r: the steps, the scale's range, the skipped steps.
static void take_update(scale_run *r, const report_step *s) {
    if (r->first_step < 0) r->first_step = s->step;
    r->last_step = s->step;
    r->n++;
    double sc[2] = {s->scale_before, s->scale_after};
    for (int j = 0; j < 2; j++) {
        if (isnan(sc[j])) continue;
        if (isnan(r->scale_min) || sc[j] < r->scale_min) r->scale_min = sc[j];
        if (isnan(r->scale_max) || sc[j] > r->scale_max) r->scale_max = sc[j];
    }
    r->scale_last = s->scale_after;
    if (!s->skipped) return;
    r->skipped++;
    if (r->first_skip < 0) r->first_skip = s->step;
    r->last_skip = s->step;
    if (s->calibration) {
        r->calib_skipped++;
        r->calib_to = s->scale_after;
        return;
    }
    if (r->first_later_skip < 0) r->first_later_skip = s->step;
    r->last_later_skip = s->step;
    if (isnan(r->skip_scale_min) || s->scale_before < r->skip_scale_min)
        r->skip_scale_min = s->scale_before;
    if (isnan(r->skip_scale_max) || s->scale_before > r->skip_scale_max)
        r->skip_scale_max = s->scale_before;
}

// The scale updates of one process, from index *i on; *i ends past them. Skips count as the
// initial calibration until the process's first applied update (report_step.calibration).
static void scan(const report_model *m, size_t *i, scale_run *r) {
    *r = (scale_run){.pid = m->steps[*i].pid,
                     .first_step = -1,
                     .scale_min = NAN,
                     .scale_max = NAN,
                     .scale_last = NAN,
                     .min_growth_interval = -1,
                     .first_skip = -1,
                     .last_skip = -1,
                     .first_later_skip = -1,
                     .last_later_skip = -1,
                     .skip_scale_min = NAN,
                     .skip_scale_max = NAN,
                     .calib_to = NAN};
    int64_t run = 0, run_first = -1, run_zeros = 0, clean = 0;
    double run_from = NAN;
    bool grew_since_backoff = false;
    size_t start = *i;
    size_t end = start;
    while (end < m->n_steps && m->steps[end].pid == r->pid)
        end++;
    int64_t n_scaled = 0;
    double calib_end = NAN; // the scale the initial calibration came down to
    for (size_t k = start; k < end; k++) {
        n_scaled += m->steps[k].has_scale;
        if (m->steps[k].calibration) calib_end = m->steps[k].scale_after;
    }
    // the calibration's backoffs are no collapse, unless they took the scale below 1
    const bool calib_collapses = calib_end < 1.0;
    int64_t seen = 0;
    for (size_t k = start; k < end; k++) {
        const report_step *s = &m->steps[k];
        r->grad_stats |= s->grad_amax > 0;
        if (!s->has_scale) continue;
        seen++;
        take_update(r, s);
        bool backoff = s->scale_after<s->scale_before, growth = s->scale_after> s->scale_before;
        if (run > 0 && s->found_inf && s->scale_before == 0 && s->scale_after == 0) {
            run_zeros++; // the collapse goes on at 0
            if (r->collapse_first == run_first) {
                r->collapse_zeros = run_zeros;
                r->collapse_zero_last = s->step;
            }
            clean = 0;
        } else if (backoff) {
            r->backoffs++;
            if (seen * 2 > n_scaled) r->last_half_backoffs++;
            if (grew_since_backoff) r->cycles++;
            grew_since_backoff = false;
            clean = 0;
            if (s->calibration && !calib_collapses) continue;
            if (run == 0) run_first = s->step, run_from = s->scale_before, run_zeros = 0;
            run++;
            if (run > r->collapse_len) {
                r->collapse_len = run;
                r->collapse_first = run_first;
                r->collapse_last = s->step;
                r->collapse_from = run_from;
                r->collapse_to = s->scale_after;
                r->collapse_zeros = 0;
            }
        } else {
            run = 0;
            run_zeros = 0;
            if (!s->found_inf) clean++;
            if (growth) {
                r->growths++;
                grew_since_backoff = true;
                if (r->min_growth_interval < 0 || clean < r->min_growth_interval)
                    r->min_growth_interval = clean;
                clean = 0;
            }
        }
    }
    *i = end;
}

// True when the forward pass went non-finite in steps first..last of pid (rule
// nonfinite-root-cause explains those).
static bool forward_broken(const report_model *m, int32_t pid, int64_t first, int64_t last) {
    return report_spans_cover(&m->loss_events, pid, first, last) ||
           report_spans_cover(&m->forward_breaks, pid, first, last);
}

// How many times the loss at step `at` exceeds the median finite loss of the (up to) 16 steps
// before it (*before: that median); NaN when there are fewer than 2 of them or no loss at `at`.
static double loss_jump(const report_model *m, int32_t pid, int64_t at, double *before) {
    double prev[16], now = NAN;
    int n = 0;
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        if (s->pid != pid || s->step > at) continue;
        if (s->step == at)
            now = s->loss;
        else if (s->loss_finite && isfinite(s->loss))
            prev[n++ % 16] = s->loss;
    }
    if (n > 16) n = 16;
    if (n < 2 || !isfinite(now)) return NAN;
    *before = report_median(prev, (size_t)n);
    return *before > 0 ? now / *before : NAN;
}

static void recommend(report_finding *f, double rec_scale, double u) {
    report_finding_evidence(f, "grad_amax_unscaled", u);
    report_finding_evidence(f, "recommended_init_scale", rec_scale);
}

// "init_scale=2^k (…)" for the advice, or a fallback when no applied step's gradient
// statistics were recorded (grad_stats: those of skipped steps were, which overflowed); every:
// the statistics were of one step in that many (--stats-every), whose gradients are all it knows.
static void init_scale_words(char *buf, size_t n, double rec_scale, double u, bool grad_stats,
                             int64_t every) {
    char sampled[80] = "";
    if (every > 1)
        snprintf(sampled, sizeof sampled, " of the steps sampled, one in %lld", (long long)every);
    if (isnan(rec_scale))
        snprintf(
            buf, n, "an init_scale a few powers of two below the scale where it overflows (%s)",
            grad_stats  ? "no step was applied whose gradients would give a number"
            : every > 1 ? "no focused step had its gradients sampled (--stats-every): widen --steps"
                        : "record gradient statistics to get a number");
    else
        snprintf(buf, n,
                 "init_scale=%.9g (largest unscaled gradient %.3g%s; x%.9g keeps %s under "
                 "65504/2)",
                 rec_scale, u, sampled, rec_scale, every > 1 ? "those" : "it");
}

// How many of p's skipped updates after the initial calibration (the skips before its first
// applied update) came from step `from` on.
static int64_t later_skips_from(const report_model *m, const report_process *p, int64_t from) {
    int64_t recorded, losses, skipped;
    if (p->first_applied > from) from = p->first_applied;
    report_step_counts(m, p->pid, from, INT64_MAX, &recorded, &losses, &skipped);
    return skipped;
}

// Whether process pid trains in bf16, as far as the run tells: its gradients' target dtype
// (AMP_TENSOR_STATS), else its autocast ops' output dtype (AMP_OPS), else META's (the run's:
// autocast_dtype, compute_dtype, precision); any f16 among the first two makes it fp16's (a mix
// is fp16's to scale).
static bool trains_in_bf16(const report_model *m, int32_t pid) {
    bool f16 = false, bf16 = false;
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (s->pid != pid ||
            (strcmp(s->kind, "activation_grad") != 0 && strcmp(s->kind, "weight_grad") != 0))
            continue;
        f16 |= strcmp(s->target, "f16") == 0;
        bf16 |= strcmp(s->target, "bf16") == 0;
    }
    if (!f16 && !bf16) {
        size_t end;
        for (size_t i = report_ops_of(m, pid, &end); i < end; i++) {
            if (!m->ops[i].policy[0]) continue;
            f16 |= strcmp(m->ops[i].out_dtype, "f16") == 0;
            bf16 |= strcmp(m->ops[i].out_dtype, "bf16") == 0;
        }
    }
    if (f16 || bf16) return !f16;
    const char *meta = m->autocast_dtype  ? m->autocast_dtype
                       : m->compute_dtype ? m->compute_dtype
                                          : m->precision;
    return meta && strcmp(meta, "bf16") == 0;
}

// A GradScaler that ran in a bf16 run (r: its updates): an info, whatever else the scale did.
static void bf16_scaler(const report_model *m, const scale_run *r, report_findings *out) {
    report_finding *f = add_finding(out, AMP_SEVERITY_INFO, r->pid, r->first_step, r->last_step);
    snprintf(f->title, sizeof f->title,
             "a GradScaler in a bf16 run: loss scaling protects nothing here (%lld updates, "
             "scale %.9g at the end)",
             (long long)r->n, r->scale_last);
    snprintf(f->detail, sizeof f->detail,
             "bf16 keeps fp32's exponent range (largest 3.39e38, smallest normal "
             "1.18e-38): gradients that fp16 loses to overflow or underflow fit in bf16 "
             "unscaled. The GradScaler still multiplies the loss, unscales every "
             "gradient before the optimizer steps (a pass over all of them) and reads "
             "found_inf back to the host in every step() (a synchronisation: the host "
             "stops queuing work until the GPU has caught up).");
    if (r->skipped > 0)
        report_appendf(f->detail, sizeof f->detail,
                       " Its %lld skipped step%s had gradients that were inf/NaN at any scale, "
                       "not a scale too high (see nonfinite-root-cause).",
                       (long long)r->skipped, r->skipped == 1 ? "" : "s");
    // (the capture's synchronisations are the run's: a share of one process's steps only when
    // it is the only one)
    const report_process *p = report_process_find(m, r->pid);
    const report_step *s0 = report_step_find(m, r->pid, 0); // (the warm-up's are not counted)
    const size_t loop_steps = p ? p->n_steps - (s0 && report_step_is_warmup(m, s0)) : 0;
    const double syncs =
        loop_steps > 0 && m->n_procs == 1 ? (double)m->perf.step_syncs / (double)loop_steps : NAN;
    if (syncs > 0)
        report_appendf(f->detail, sizeof f->detail,
                       " CUDA capture recorded %.3g host synchronisations a step in all, the "
                       "scaler's among them (see host-sync).",
                       syncs);
    snprintf(f->advice, sizeof f->advice,
             "Leave loss scaling out in bf16: torch.amp.GradScaler(\"%s\", enabled=False), or "
             "no scaler at all (loss.backward(); optimizer.step()). If it is there to skip "
             "steps whose gradients are inf/NaN, skip them where the gradients are clipped: "
             "clip_grad_norm_ returns the norm, and a step taken only when it is finite costs "
             "one synchronisation instead of the scaler's pass and synchronisation.",
             report_scaler_device(m));
    report_finding_evidence(f, "scale_updates", (double)r->n);
    report_finding_evidence(f, "scale_last", r->scale_last);
    report_finding_evidence(f, "skipped_steps", (double)r->skipped);
    if (syncs > 0) report_finding_evidence(f, "syncs_per_step", syncs);
}

#define CLIPPED_MIN_STEPS 5 // applied steps with a gradient norm that make the pattern
// relative spread of norm x scale that counts as one number: clipping leaves the norm at
// max_norm to ~1e-7, the norm's fp32 sums read it to ~1e-6; a learning model's moves far more
#define CLIPPED_SAME 1e-5
#define CLIPPED_SHARE 0.8 // of the applied steps with a norm, those at that number

// A step applied under a GradScaler (a scale of 2 or more) with a gradient norm.
static bool scaled_norm(const report_step *s) {
    return s->has_scale && !s->skipped && s->grad_norm > 0 && isfinite(s->grad_norm) &&
           s->scale_before >= 2;
}

// Process p's applied steps under a GradScaler whose gradient norm times the scale is one
// number (nearly all of them: a first step read before the bridge attached may differ), while
// the loss moved: the gradients were clipped to that norm before they were unscaled.
static void clipped_while_scaled(const report_model *m, const report_process *p,
                                 report_findings *out) {
    // the scaled_norm steps (at most the first 256) and their norm (as recorded: unscaled)
    // times the scale
    const report_step *st[256];
    double c[256], sorted[256];
    size_t all = 0;
    for (size_t i = 0; i < p->n_steps && all < sizeof st / sizeof *st; i++) {
        const report_step *s = &m->steps[p->step0 + i];
        if (!scaled_norm(s)) continue;
        st[all] = s;
        c[all] = sorted[all] = s->grad_norm * s->scale_before;
        all++;
    }
    if (all < CLIPPED_MIN_STEPS) return;
    const double max_norm = report_median(sorted, all);
    double scale_min = INFINITY, scale_max = 0, loss_lo = INFINITY, loss_hi = -INFINITY;
    size_t n = 0;
    int64_t first = -1, last = -1;
    for (size_t k = 0; k < all; k++) {
        const report_step *s = st[k];
        if (fabs(c[k] - max_norm) > CLIPPED_SAME * max_norm) continue;
        n++;
        scale_min = fmin(scale_min, s->scale_before);
        scale_max = fmax(scale_max, s->scale_before);
        if (s->loss_finite) {
            loss_lo = fmin(loss_lo, s->loss);
            loss_hi = fmax(loss_hi, s->loss);
        }
        if (first < 0) first = s->step;
        last = s->step;
    }
    if (n < CLIPPED_MIN_STEPS || (double)n < CLIPPED_SHARE * (double)all || !(loss_hi > loss_lo))
        return;
    report_finding *f = add_finding(out, AMP_SEVERITY_WARNING, p->pid, first, last);
    snprintf(f->title, sizeof f->title,
             "gradients clipped while still scaled: every step's gradient norm was %.4g divided "
             "by the loss scale (%zu steps)",
             max_norm, n);
    char scales[64];
    if (scale_max > scale_min)
        snprintf(scales, sizeof scales, "%.9g to %.9g", scale_min, scale_max);
    else
        snprintf(scales, sizeof scales, "%.9g", scale_min);
    snprintf(f->detail, sizeof f->detail,
             "Over %zu applied steps (%lld-%lld) the gradient norm times the loss scale (%s) "
             "stayed at %.6g, while the loss moved between %.4g and %.4g: the gradients of a "
             "model that learns do not keep one norm. They were clipped to max_norm=%.4g while "
             "still multiplied by the scale (clip_grad_norm_ before scaler.unscale_(optimizer), "
             "or with no unscale_ at all), and scaler.step() then divided them by the scale: "
             "every update stepped with a gradient of norm %.3g (max_norm divided by the scale) "
             "instead of the unscaled gradient clipped to max_norm: SGD barely moves, Adam's "
             "steps shrink where that nears its eps.",
             n, (long long)first, (long long)last, scales, max_norm, loss_lo, loss_hi, max_norm,
             max_norm / scale_max);
    snprintf(f->advice, sizeof f->advice,
             "Unscale before clipping, as PyTorch's AMP recipe does: scaler.scale(loss)."
             "backward(); scaler.unscale_(optimizer); torch.nn.utils.clip_grad_norm_(params, "
             "%.4g); scaler.step(optimizer); scaler.update().",
             max_norm);
    report_finding_evidence(f, "max_norm", max_norm);
    report_finding_evidence(f, "steps", (double)n);
    report_finding_evidence(f, "scale_min", scale_min);
    report_finding_evidence(f, "scale_max", scale_max);
}

static const char broken_forward_advice[] =
    "Make the forward pass finite first (see the nonfinite-root-cause finding): no loss scale "
    "can make a NaN forward finite, so the scaler halves the scale toward 0 and skips every step.";
static const char broken_backward_advice[] =
    "Make the backward finite first (see the nonfinite-root-cause finding): its NaN/inf comes "
    "at every loss scale, so the scaler halves the scale and skips every such step; no "
    "init_scale or growth_interval changes that.";

// The bridge's step_outside_scaler events: one finding per (process, optimizer), at its first.
static void stepped_outside(const report_model *m, report_findings *out) {
    const report_event **seen = amp_xcalloc(m->n_events + 1, sizeof *seen);
    size_t n = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (strcmp(e->kind, "step_outside_scaler") != 0) continue;
        bool again = false;
        for (size_t k = 0; k < n && !again; k++)
            again = report_event_cmp_place(seen[k], e, false) == 0;
        if (again) continue;
        seen[n++] = e;
        const bool scaled = !e->detail || !strstr(e->detail, REPORT_DETAIL_UNSCALED);
        const char *opt = e->op ? e->op : "an optimizer";
        report_finding *f =
            report_finding_add(out, RULE, scaled ? AMP_SEVERITY_ERROR : AMP_SEVERITY_WARNING);
        report_finding_where(f, NULL, e->op, "optim");
        f->pid = e->pid;
        f->first_step = e->step;
        f->last_step = e->step;
        char scale[48] = "the loss scale", factor[32] = "the scale's";
        if (isfinite(e->value)) {
            snprintf(scale, sizeof scale, "the loss scale %g", e->value);
            snprintf(factor, sizeof factor, "%g", e->value);
        }
        if (scaled) {
            snprintf(f->title, sizeof f->title,
                     "%s stepped outside the GradScaler from step %lld: optimizer.step() on "
                     "gradients still multiplied by %s",
                     opt, (long long)e->step, scale);
            snprintf(f->detail, sizeof f->detail,
                     "%s.step() was called directly, not scaler.step(optimizer), on the gradients "
                     "backward() made from scaler.scale(loss): each update used gradients %s "
                     "times too large (SGD's step grows by that much; Adam's normalised step "
                     "hides most of it, not its eps), and a step whose gradients overflowed is "
                     "applied instead of skipped, putting inf/NaN into the weights.",
                     opt, factor);
        } else {
            snprintf(f->title, sizeof f->title,
                     "%s stepped outside the GradScaler from step %lld: optimizer.step() after "
                     "scaler.unscale_(), so a step whose gradients overflow is applied, not "
                     "skipped",
                     opt, (long long)e->step);
            snprintf(f->detail, sizeof f->detail,
                     "%s.step() was called directly after scaler.unscale_(optimizer): the "
                     "gradients were unscaled, but only scaler.step(optimizer) skips a step whose "
                     "gradients hold inf/NaN, so the first overflow puts them into the weights.",
                     opt);
        }
        snprintf(f->advice, sizeof f->advice,
                 "Step every optimizer through the scaler: scaler.step(optimizer) for each one "
                 "(scaler.unscale_(optimizer) first where you clip its gradients), then one "
                 "scaler.update() per iteration, as PyTorch's AMP examples do for several "
                 "optimizers.");
        report_finding_evidence(f, "loss_scale", e->value);
        report_finding_evidence(f, "parameters", (double)e->count);
    }
    free(seen);
}

// What the findings on one process's run of scale updates share.
typedef struct scale_ctx {
    const report_model *m;
    const scale_run *r;
    const report_process *proc; // NULL: none
    double u;                   // the gradients' amax unscaled (NaN: no statistics)
    double rec;                 // the scale that keeps u scaled under REPORT_SCALE_TARGET
    char init_words[256];       // the init_scale to start from, in words
} scale_ctx;

// The scale driven toward 0: many consecutive backoffs, or backoffs below 1.
static bool collapse(const scale_ctx *c, report_findings *out) {
    const report_model *m = c->m;
    const scale_run *r = c->r;
    const report_process *proc = c->proc;
    const char *init_words = c->init_words;
    if (!(r->collapse_len >= COLLAPSE_BACKOFFS || (r->collapse_len > 0 && r->scale_last < 1.0)))
        return false;
    bool broken = forward_broken(m, r->pid, r->collapse_first, r->collapse_last);
    // (a backward that no loss scale saves: rule nonfinite-root-cause names the op)
    bool bwd_broken = !broken && report_spans_cover(&m->backward_breaks, r->pid, r->collapse_first,
                                                    r->collapse_last);
    report_finding *f = add_finding(out, AMP_SEVERITY_WARNING, r->pid, r->collapse_first,
                                    r->collapse_zeros ? r->collapse_zero_last : r->collapse_last);
    char zeros[128] = "";
    if (r->collapse_zeros)
        snprintf(zeros, sizeof zeros, ", then %lld more overflowing step%s at 0 (to step %lld)",
                 (long long)r->collapse_zeros, r->collapse_zeros == 1 ? "" : "s",
                 (long long)r->collapse_zero_last);
    char span[64]; // (a focus, --steps, may leave one backoff of it)
    if (r->collapse_first == r->collapse_last)
        snprintf(span, sizeof span, "step %lld", (long long)r->collapse_first);
    else
        snprintf(span, sizeof span, "steps %lld-%lld", (long long)r->collapse_first,
                 (long long)r->collapse_last);
    // still far above any scale fp16 gradients need after all those halvings: not
    // gradients that explode, an init_scale the run has not come down from yet
    const bool applied_before =
        proc && proc->first_applied >= 0 && proc->first_applied < r->collapse_first;
    const bool too_high =
        !broken && !bwd_broken && !applied_before && r->collapse_to >= TOO_HIGH_SCALE;
    snprintf(f->title, sizeof f->title, "loss scale %s: %lld %s from %.9g to %.9g (%s)%s",
             too_high ? "set too high, still coming down" : "collapse", (long long)r->collapse_len,
             r->collapse_len == 1 ? "backoff" : "consecutive backoffs", r->collapse_from,
             r->collapse_to, span, zeros);
    snprintf(f->detail, sizeof f->detail,
             "%lld of %lld steps skipped; every update in that range found inf/NaN "
             "gradients.%s",
             (long long)r->skipped, (long long)r->n,
             broken ? " The forward pass was already non-finite in those steps." : "");
    // a finite loss that jumped where the collapse began: the weights or the data
    // changed there, and the gradients follow the loss
    double before = NAN, jump = broken ? NAN : loss_jump(m, r->pid, r->collapse_first, &before);
    if (jump >= LOSS_JUMP) {
        report_appendf(f->detail, sizeof f->detail,
                       " The loss jumped %.3gx at step %lld, from %.4g (the steps before) to "
                       "%.4g: the weights or the batch changed there (a bad update at the step "
                       "before, a corrupt or unnormalised batch), and the gradients grew with it.",
                       jump, (long long)r->collapse_first, before, jump * before);
        report_finding_evidence(f, "loss_jump", jump);
    }
    if (broken)
        snprintf(f->advice, sizeof f->advice, "%s", broken_forward_advice);
    else if (bwd_broken)
        snprintf(f->advice, sizeof f->advice, "%s", broken_backward_advice);
    else if (too_high)
        snprintf(f->advice, sizeof f->advice,
                 "The scale was set far too high (%.9g at step %lld): halving once a "
                 "skipped step, it has not yet reached a scale the gradients fit, and "
                 "every step so far was thrown away. Start from PyTorch's default "
                 "init_scale=65536, or from %s.",
                 r->collapse_from, (long long)r->collapse_first, init_words);
    else
        snprintf(f->advice, sizeof f->advice,
                 "The gradients overflow at every scale: they explode. Clip them "
                 "(unscale_, then clip_grad_norm_), lower the learning rate or add "
                 "warm-up; then restart from %s.",
                 init_words);
    report_finding_evidence(f, "consecutive_backoffs", (double)r->collapse_len);
    report_finding_evidence(f, "scale_from", r->collapse_from);
    report_finding_evidence(f, "scale_to", r->collapse_to);
    report_finding_evidence(f, "steps_at_zero", (double)r->collapse_zeros);
    report_finding_evidence(f, "skipped_steps", (double)r->skipped);
    report_finding_evidence(f, "steps", (double)r->n);
    return true;
}

// Repeated growth-then-overflow cycles, each costing a skipped step.
static bool sawtooth(const scale_ctx *c, report_findings *out) {
    const scale_run *r = c->r;
    const double rec = c->rec, u = c->u;
    const char *init_words = c->init_words;
    if (r->cycles < THRASH_CYCLES) return false;
    report_finding *f = add_finding(out, AMP_SEVERITY_WARNING, r->pid, r->first_skip, r->last_skip);
    snprintf(f->title, sizeof f->title,
             "loss scale sawtooth: %lld grow-then-overflow cycles between %.9g and %.9g, "
             "%lld of %lld steps skipped",
             (long long)r->cycles, r->scale_min, r->scale_max, (long long)r->skipped,
             (long long)r->n);
    snprintf(f->detail, sizeof f->detail,
             "%lld growths and %lld backoffs; the scale grew after as few as %lld clean "
             "update%s, so it climbs back into overflow right after each backoff.",
             (long long)r->growths, (long long)r->backoffs, (long long)r->min_growth_interval,
             r->min_growth_interval == 1 ? "" : "s");
    snprintf(f->advice, sizeof f->advice,
             "Let the scale rest: growth_interval=2000 (PyTorch's default) and "
             "growth_factor=2, backoff_factor=0.5; start from %s.",
             init_words);
    report_finding_evidence(f, "cycles", (double)r->cycles);
    report_finding_evidence(f, "skipped_steps", (double)r->skipped);
    report_finding_evidence(f, "skip_rate", (double)r->skipped / (double)r->n);
    report_finding_evidence(f, "observed_growth_interval", (double)r->min_growth_interval);
    report_finding_evidence(f, "scale_min", r->scale_min);
    report_finding_evidence(f, "scale_max", r->scale_max);
    report_finding_evidence(f, "recommended_growth_interval", 2000);
    recommend(f, rec, u);
    return true;
}

// More than SKIP_RATE_WARN of the steps after the calibration skipped.
static bool frequent_skips(const scale_ctx *c, report_findings *out) {
    const report_model *m = c->m;
    const scale_run *r = c->r;
    const report_process *proc = c->proc;
    const double rec = c->rec, u = c->u;
    const char *init_words = c->init_words;
    const int64_t later = r->skipped - r->calib_skipped; // skips after the calibration
    const double rate =
        (double)later / (double)(r->n - r->calib_skipped > 0 ? r->n - r->calib_skipped : 1);
    if (later < 2 || rate <= SKIP_RATE_WARN) return false;
    report_finding *f =
        add_finding(out, AMP_SEVERITY_WARNING, r->pid, r->first_later_skip, r->last_later_skip);
    snprintf(f->title, sizeof f->title,
             "%.0f%% of the steps were skipped (%lld of %lld after calibration)", 100 * rate,
             (long long)later, (long long)(r->n - r->calib_skipped));
    bool broken = forward_broken(m, r->pid, r->first_later_skip, r->last_later_skip);
    // most of them after the training diverged (rule divergence): the gradients
    // overflow because they keep growing, which no scale keeps up with
    const int64_t after =
        proc && proc->diverged_step >= 0 ? later_skips_from(m, proc, proc->diverged_step) : 0;
    const bool diverged = !broken && after > 0 && 2 * after >= later;
    char why[160] = "";
    if (broken)
        snprintf(why, sizeof why, " The forward pass was non-finite in those steps.");
    else if (diverged)
        snprintf(why, sizeof why,
                 " %lld of them came after the training diverged at step %lld: the "
                 "gradients overflow as they grow.",
                 (long long)after, (long long)proc->diverged_step);
    snprintf(f->detail, sizeof f->detail,
             "The gradients kept overflowing at scales between %.9g and %.9g; each "
             "overflow throws a step away.%s",
             r->skip_scale_min, r->skip_scale_max, why);
    if (broken)
        snprintf(f->advice, sizeof f->advice, "%s", broken_forward_advice);
    else if (diverged)
        snprintf(f->advice, sizeof f->advice,
                 "Stop the divergence first (lower the learning rate or warm it up, clip "
                 "the gradients): no loss scale keeps gradients that keep growing. Then, "
                 "if steps are still skipped, start from %s.",
                 init_words);
    else if (rec >= r->skip_scale_max)
        // the steps kept fit a scale above any that overflowed: outliers, not the scale
        snprintf(f->advice, sizeof f->advice,
                 "The gradients of the steps kept fit %s, above the scales that "
                 "overflowed: the overflows come from outlier batches or a spike, not "
                 "from the scale. Clip the gradients (unscale_, then clip_grad_norm_), "
                 "look at the batches of the skipped steps, and let the scale grow "
                 "slower (growth_interval=2000).",
                 init_words);
    else
        snprintf(f->advice, sizeof f->advice,
                 "Start lower and grow slower: %s, growth_interval=2000. If the overflows "
                 "come from a few outlier batches, clip the gradients.",
                 init_words);
    report_finding_evidence(f, "skip_rate", rate);
    report_finding_evidence(f, "skipped_steps", (double)r->skipped);
    report_finding_evidence(f, "calibration_skips", (double)r->calib_skipped);
    recommend(f, rec, u);
    return true;
}

// A low scale that never grew while the gradients left it room.
static bool stuck_low(const scale_ctx *c, report_findings *out) {
    const scale_run *r = c->r;
    const report_process *proc = c->proc;
    const double rec = c->rec, u = c->u;
    const char *init_words = c->init_words;
    double headroom_bits = isnan(u) ? NAN : log2(REPORT_SCALE_TARGET / (u * r->scale_last));
    bool room =
        isnan(headroom_bits) ? r->scale_last <= 1.0 : headroom_bits >= STUCK_LOW_HEADROOM_BITS;
    // a run shorter than the growth interval gave the scale no chance to grow: a low
    // init_scale, an info (rule grad-underflow judges what the gradients lost)
    const long long interval = proc ? proc->growth_interval : -1;
    const bool no_chance = interval > 0 && proc->scale_updates < interval;
    if (!(r->scale_last <= STUCK_LOW_SCALE && r->last_half_backoffs == 0 && r->growths == 0 &&
          room))
        return false;
    report_finding *f = add_finding(out, no_chance ? AMP_SEVERITY_INFO : AMP_SEVERITY_WARNING,
                                    r->pid, r->first_step, r->last_step);
    if (no_chance)
        snprintf(f->title, sizeof f->title,
                 "loss scale low at %.9g for all %lld steps: it grows only after "
                 "growth_interval=%lld clean steps",
                 r->scale_last, (long long)proc->scale_updates, interval);
    else
        snprintf(f->title, sizeof f->title,
                 "loss scale stuck low at %.9g for %lld steps: it never grew", r->scale_last,
                 (long long)r->n);
    if (isnan(headroom_bits))
        snprintf(f->detail, sizeof f->detail,
                 "No gradient statistics were recorded, so the headroom is unknown; a "
                 "scale this low lets small fp16 gradients underflow to zero.");
    else
        snprintf(f->detail, sizeof f->detail,
                 "The largest scaled gradient stays %.0f bits below 65504/2: small fp16 "
                 "gradients underflow to zero (see grad-underflow).",
                 headroom_bits);
    if (no_chance)
        snprintf(f->advice, sizeof f->advice, "Start higher: %s.", init_words);
    else
        snprintf(f->advice, sizeof f->advice,
                 "Raise the scale: %s, and let it grow (growth_interval=2000, not "
                 "disabled).",
                 init_words);
    report_finding_evidence(f, "scale", r->scale_last);
    report_finding_evidence(f, "steps", (double)r->n);
    report_finding_evidence(f, "headroom_bits", headroom_bits);
    recommend(f, rec, u);
    return true;
}

// Steps skipped, but none of the patterns above: an info.
static void some_skips(const scale_ctx *c, report_findings *out) {
    const scale_run *r = c->r;
    const char *init_words = c->init_words;
    if (r->skipped <= 0) return;
    report_finding *f = add_finding(out, AMP_SEVERITY_INFO, r->pid, r->first_skip, r->last_skip);
    snprintf(f->title, sizeof f->title, "%lld of %lld steps skipped by the GradScaler",
             (long long)r->skipped, (long long)r->n);
    snprintf(f->detail, sizeof f->detail,
             "Scale between %.9g and %.9g, %lld during the "
             "initial calibration.",
             r->scale_min, r->scale_max, (long long)r->calib_skipped);
    if (r->calib_skipped >= COLLAPSE_BACKOFFS)
        snprintf(f->advice, sizeof f->advice,
                 "The scale started too high: %lld steps were thrown away bringing it "
                 "down to %.9g, where the gradients fit. Start from %s to keep them.",
                 (long long)r->calib_skipped, r->calib_to, init_words);
    else
        snprintf(f->advice, sizeof f->advice,
                 "Nothing to do: occasional skips are how dynamic loss scaling works.");
    report_finding_evidence(f, "skipped_steps", (double)r->skipped);
    report_finding_evidence(f, "steps", (double)r->n);
    report_finding_evidence(f, "calibration_skips", (double)r->calib_skipped);
}

void rule_scale_run(const report_model *m, report_findings *out) {
    stepped_outside(m, out);
    for (size_t i = 0; i < m->n_procs; i++)
        clipped_while_scaled(m, &m->procs[i], out);
    for (size_t i = 0; i < m->n_steps;) {
        scale_run r;
        scan(m, &i, &r);
        if (r.n == 0) continue;
        if (trains_in_bf16(m, r.pid)) bf16_scaler(m, &r, out);
        scale_ctx c = {.m = m, .r = &r, .proc = report_process_find(m, r.pid)};
        c.u = report_unscaled_grad_amax(m, r.pid);
        c.rec = report_scale_for_amax(c.u);
        init_scale_words(c.init_words, sizeof c.init_words, c.rec, c.u, r.grad_stats,
                         report_stats_every(m));
        // one finding a run (a sawtooth may come beside a collapse)
        bool reported = collapse(&c, out);
        reported = sawtooth(&c, out) || reported;
        if (!reported) reported = frequent_skips(&c, out);
        if (!reported) reported = stuck_low(&c, out);
        if (!reported) some_skips(&c, out);
    }
}
