/*
 * rule_overflow.c — rule `overflow-headroom`: forward outputs that come within 1 bit of the
 * largest finite value of the dtype they are computed in (fp16 65504), per layer and op.
 *
 * Only activations stored in their run's autocast dtype (AMP_TENSOR_STATS dtype = target_dtype)
 * are at risk: an op that autocast runs in fp32 (softmax, losses, the scaled loss) does not
 * overflow at 65504. In a run without autocast (every activation fp32, target f16), outputs that
 * would overflow fp16 are reported as info, for whoever plans to switch the run to fp16.
 * amax is over the finite values, so an attention mask's -inf does not count.
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

void rule_overflow_run(const report_model *m, report_findings *out) {
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
        int w = snprintf(f->detail, sizeof f->detail,
                         "%lld of %lld sampled outputs within 2x of the max%s (steps %lld-%lld).",
                         (long long)s->near_max_tensors, (long long)s->tensors,
                         amax > max ? " or beyond it" : "", (long long)f->first_step,
                         (long long)f->last_step);
        if (s->n_overflow > 0 && w > 0 && (size_t)w < sizeof f->detail)
            snprintf(f->detail + w, sizeof f->detail - (size_t)w,
                     " %lld fp32 values beyond it would round to inf.", (long long)s->n_overflow);
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
