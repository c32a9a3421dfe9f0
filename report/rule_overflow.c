/*
 * rule_overflow.c — rule `overflow-headroom`: forward outputs that come within 1 bit of the
 * largest finite value of the dtype they are computed in (fp16 65504), per layer and op.
 *
 * Only activations stored in their run's autocast dtype (AMP_TENSOR_STATS dtype = target_dtype)
 * are at risk: an op that autocast runs in fp32 (softmax, losses, the scaled loss) does not
 * overflow at 65504. In a run without autocast (every activation fp32, target f16), outputs that
 * would overflow fp16 are reported as info, for whoever plans to switch the run to fp16.
 * amax is over the finite values, so an attention mask's -inf does not count.
 *
 * An overflow can also hide inside a layer: an fp16 op makes +inf from finite inputs and a later
 * op of the same forward leaves it out of its own output (a hand-written RMSNorm's x * x past
 * 65504, then rsqrt(inf) = 0: the row is zeros). Nothing non-finite reaches the loss, so no
 * GradScaler or NaN check sees it. The PyTorch bridge records it as an overflow_absorbed event
 * (the step's forward re-run op by op when an output turned to zeros): a warning here.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RULE "overflow-headroom"
#define MAX_FINDINGS 8 // the worst sites; the rest are summed in the last finding's detail

// True when no activation of the run was computed in a lower precision (an fp32 run).
static bool fp32_run(const report_model *m) {
    for (size_t i = 0; i < m->n_stats; i++)
        if (strcmp(m->stats[i].kind, "activation") == 0 && report_dtype_lowp(m->stats[i].dtype))
            return false;
    return true;
}

// A site's amax as the rule tells it: that of its outputs that had not overflowed (those with NaN
// or +inf are rule nonfinite-root-cause's, and their finite values are no headroom left); all of
// them when those are not near the dtype's max (an fp32 run's site at risk by the values beyond
// it that an overflowed output held).
static double site_amax(const report_stats *s) {
    const double max = report_dtype_max(s->target);
    return s->clean_amax >= max / 2 ? s->clean_amax : s->amax;
}

// Whether stats row s is a site to report, and its severity.
static bool at_risk(const report_stats *s, bool fp32, amp_severity *sev) {
    if (strcmp(s->kind, "activation") != 0 || isnan(report_dtype_max(s->target))) return false;
    if (strcmp(s->dtype, s->target) == 0) {
        *sev = AMP_SEVERITY_WARNING;
        return s->near_max_tensors > 0;
    }
    *sev = AMP_SEVERITY_INFO;
    // fp32 run: what fp16 would make of it (scalars are the loss: never cast down)
    return fp32 && strcmp(s->dtype, "f32") == 0 && s->numel > s->tensors &&
           (s->near_max_tensors > 0 || s->n_overflow > 0);
}

// What the op that left an overflow out of its output made of it (of them: several values).
static const char *absorbed_how(const char *op, bool them) {
    static const char *const zero[] = {"rsqrt", "reciprocal", "div", "exp", "exp2"};
    static const char *const clip[] = {"tanh",    "sigmoid", "clamp",    "clamp_min", "clamp_max",
                                       "minimum", "maximum", "hardtanh", "min",       "max"};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++)
        if (strcmp(op, zero[i]) == 0) return them ? "turned them into 0" : "turned it into 0";
    for (size_t i = 0; i < sizeof clip / sizeof *clip; i++)
        if (strcmp(op, clip[i]) == 0)
            return them ? "clipped them to finite values" : "clipped it to a finite value";
    return them ? "left them out" : "left it out";
}

// Whether op squares or sums its input on the way to a norm (x * x, x.pow(2), x.square(), sum,
// mean): what a hand-written RMSNorm or LayerNorm does before its rsqrt.
static bool squares(const char *op) {
    static const char *const ops[] = {"mul", "pow", "square", "sum", "mean", "var", "norm"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (strcmp(op, ops[i]) == 0) return true;
    return false;
}

// Whether process pid's step went non-finite (a skip, a non-finite loss): what made the bridge
// run it again, rather than an output gone to zeros.
static bool step_broke(const report_model *m, int32_t pid, int64_t step) {
    for (size_t i = 0; i < m->n_steps; i++)
        if (m->steps[i].pid == pid && m->steps[i].step == step)
            return m->steps[i].skipped || m->steps[i].loss_nonfinite;
    return false;
}

// One finding per site (process, layer, op) of the overflow_absorbed events, at its first.
static void absorbed_findings(const report_model *m, report_findings *out) {
    size_t *at = amp_xcalloc(m->n_events + 1, sizeof *at), n = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (strcmp(e->kind, "overflow_absorbed") != 0) continue;
        bool seen = false;
        for (size_t k = 0; k < n && !seen; k++)
            seen = report_event_cmp_place(&m->events[at[k]], e, false) == 0;
        if (seen) continue;
        at[n++] = i;
        report_ranges r;
        report_parse_ranges(e->detail, &r);
        const char *by = e->detail ? strstr(e->detail, REPORT_DETAIL_ABSORBED_BY) : NULL;
        char absorber[64] = "a later op";
        if (by) sscanf(by + strlen(REPORT_DETAIL_ABSORBED_BY), "%63[A-Za-z0-9_.]", absorber);
        const char *dtype = r.out_dtype[0] ? r.out_dtype : "f16";
        const bool f16 = strcmp(dtype, "f16") == 0;
        const char *fp = f16 ? "fp16" : "bf16";
        const char *layer = report_layer_name(m, e->pid, e->layer_id);
        const char *op = e->op ? e->op : "an op";
        report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
        report_finding_where(f, layer, e->op, "fwd");
        f->pid = e->pid;
        f->first_step = e->step;
        f->last_step = e->last_step;
        const char *where = layer[0] ? layer : "the top level";
        char amax[48] = "";
        if (!isnan(r.in_amax)) snprintf(amax, sizeof amax, " (amax %.6g)", r.in_amax);
        snprintf(f->title, sizeof f->title,
                 "%s overflow hidden in %s at step %lld: %s made %s from finite inputs%s, and %s "
                 "%s",
                 fp, where, (long long)e->step, op,
                 r.posinf && r.neginf ? "+inf and -inf"
                 : r.neginf           ? "-inf"
                                      : "+inf",
                 amax, absorber, absorbed_how(absorber, false));
        snprintf(f->detail, sizeof f->detail,
                 "The step's forward, run again op by op, made %lld non-finite values in %s %s "
                 "(past %s's max %g) and %s %s before anything non-finite reached the loss: no "
                 "GradScaler skip and no NaN check sees it, while every value computed from "
                 "them is wrong%s.%s",
                 (long long)(r.posinf + r.neginf), where, op, fp, report_dtype_max(dtype), absorber,
                 absorbed_how(absorber, true),
                 strcmp(absorber, "rsqrt") == 0 ? " (a row normalised by rsqrt(inf) is zeros)" : "",
                 step_broke(m, e->pid, e->step)
                     ? ""
                     : " It was looked for because an output's share of exact zeros jumped.");
        if (e->last_step > e->step) {
            report_appendf(f->detail, sizeof f->detail, " Seen again up to step %lld.",
                           (long long)e->last_step);
        }
        if (f16 && squares(op) && strcmp(absorber, "rsqrt") == 0)
            snprintf(f->advice, sizeof f->advice,
                     "Take the mean square in fp32: x.float().pow(2).mean(-1, keepdim=True) (as "
                     "Llama's RMSNorm casts its input to fp32 first), normalise in fp32 and cast "
                     "the result back; under autocast x.pow(2) already runs in fp32, x * x does "
                     "not. Or train in bf16 (fp32's range).");
        else if (f16)
            snprintf(f->advice, sizeof f->advice,
                     "Run %s in fp32: cast its inputs with .float() before it (%s), or keep its "
                     "inputs in range (normalise what feeds it), or train in bf16 (fp32's range).",
                     op, report_fp32_how(m));
        else
            snprintf(f->advice, sizeof f->advice,
                     "Keep the inputs of %s in range (normalise or rescale what feeds it): bf16 "
                     "has fp32's range, so no precision change helps.",
                     op);
        report_finding_evidence(f, "nonfinite_values", (double)(r.posinf + r.neginf));
        report_finding_evidence(f, "input_amax", r.in_amax);
        report_finding_evidence(f, "dtype_max", report_dtype_max(dtype));
        report_finding_evidence(f, "occurrences",
                                (double)(e->occurrences > 0 ? e->occurrences : 1));
    }
    free(at);
}

void rule_overflow_run(const report_model *m, report_findings *out) {
    absorbed_findings(m, out);
    bool fp32 = fp32_run(m);
    bool *done = amp_xcalloc(m->n_stats, sizeof *done);
    for (int k = 0; k < MAX_FINDINGS; k++) {
        // the site with the least headroom left
        size_t best = m->n_stats;
        amp_severity sev = AMP_SEVERITY_INFO;
        for (size_t i = 0; i < m->n_stats; i++) {
            amp_severity s;
            if (done[i] || !at_risk(&m->stats[i], fp32, &s)) continue;
            if (best == m->n_stats || site_amax(&m->stats[i]) > site_amax(&m->stats[best]))
                best = i, sev = s;
        }
        if (best == m->n_stats) break;
        done[best] = true;
        const report_stats *s = &m->stats[best];
        const double amax = site_amax(s), max = report_dtype_max(s->target);
        double bits = log2(max / amax);
        report_finding *f = report_finding_add(out, RULE, sev);
        report_finding_where(f, report_layer_name(m, s->pid, s->layer_id), s->op, "fwd");
        f->pid = s->pid;
        f->first_step = s->near_first_step >= 0 ? s->near_first_step : s->first_step;
        f->last_step = s->near_last_step >= 0 ? s->near_last_step : s->last_step;
        const char *layer = f->layer[0] ? f->layer : "(top level)";
        char at[48] = ""; // (the step of the amax told)
        if (s->clean_amax_step >= 0 && amax == s->clean_amax)
            snprintf(at, sizeof at, " at step %lld", (long long)s->clean_amax_step);
        if (sev == AMP_SEVERITY_WARNING)
            snprintf(f->title, sizeof f->title,
                     "%s %s output reaches amax %.6g%s, %.2f bits below the %s max %g", layer,
                     s->op, amax, at, bits < 0 ? 0.0 : bits, s->target, max);
        else
            snprintf(f->title, sizeof f->title,
                     "%s %s output (fp32, amax %.6g%s) would overflow %s (max %g) under autocast",
                     layer, s->op, amax, at, s->target, max);
        snprintf(f->detail, sizeof f->detail,
                 "%lld of %lld sampled outputs within 2x of the max%s (steps %lld-%lld).",
                 (long long)s->near_max_tensors, (long long)s->tensors,
                 amax > max ? " or beyond it" : "", (long long)f->first_step,
                 (long long)f->last_step);
        if (s->n_overflow > 0)
            report_appendf(f->detail, sizeof f->detail,
                           " %lld fp32 values beyond it would round to inf.",
                           (long long)s->n_overflow);
        if (strcmp(s->target, "f16") == 0)
            snprintf(f->advice, sizeof f->advice,
                     "Give it headroom before it overflows: normalise or rescale what feeds %s (a "
                     "LayerNorm before it; 1/sqrt(d_head) for attention logits; smaller weight "
                     "init), or keep this op in fp32 (%s), or train in bf16.",
                     s->op, report_fp32_how(m));
        else // (bf16's max is fp32's: no dtype has more range)
            snprintf(f->advice, sizeof f->advice,
                     "Give it headroom before it overflows: normalise or rescale what feeds %s (a "
                     "LayerNorm before it; 1/sqrt(d_head) for attention logits; smaller weight "
                     "init). fp32 has %s's range: no precision change helps here.",
                     s->op, s->target);
        report_finding_evidence(f, "amax", amax);
        report_finding_evidence(f, "amax_step", at[0] ? (double)s->clean_amax_step : NAN);
        report_finding_evidence(f, "dtype_max", max);
        report_finding_evidence(f, "headroom_bits", bits);
        report_finding_evidence(f, "near_max_outputs", (double)s->near_max_tensors);
        report_finding_evidence(f, "sampled_outputs", (double)s->tensors);
        report_finding_evidence(f, "overflow_values", (double)s->n_overflow);
    }
    free(done);
}
