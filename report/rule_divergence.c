/*
 * rule_divergence.c — rule `divergence`: training that diverged while every loss stayed finite.
 *
 * A process diverged at the first step whose loss is twice its base (the median of its first
 * few losses) with its gradient norm ten times the base's (or, for a step with no norm, the loss
 * a hundredfold): report_process.diverged_step (divergence_feed), followed over the whole run. A
 * learning rate too high for the model (no warm-up, a bad batch) does it in fp32 as in fp16 or
 * bf16, so the precision is not the cause and no AMP setting is the fix. A divergence that ends
 * in NaN/inf is told by rule nonfinite-root-cause with its first non-finite value ("training
 * diverged before step N"); this rule takes the processes whose losses stayed finite from the
 * divergence to the focus's end (under a GradScaler its gradients may overflow: those steps are
 * skipped, their losses finite). An error while the loss ends up still twice the base; a warning
 * when it came back down after rising tenfold (the weights moved far on the way: the report says
 * where the loss ended). The weights' growth (libampcore records each parameter as its step
 * begins) is the evidence of how: an update that multiplied a parameter's largest |w| tenfold is a
 * step the optimizer took far too long.
 */
#include "report.h"

#include <math.h>
#include <stdio.h>

#define RULE "divergence"
// a loss that came back down under twice its base is told when it had risen this far (a spike
// of a few times a converged model's loss is batch noise)
#define SPIKE 10.0

// Where the loss of p's focused steps from step `from` on ended: the median of its last ENDING
// finite losses (so that one batch does not decide it), and the steps they span (-1: no finite
// loss).
#define ENDING 5
typedef struct ending {
    double loss;
    int64_t first, last;
} ending;

static ending ending_from(const report_model *m, const report_process *p, int64_t from) {
    ending e = {.loss = NAN, .first = -1, .last = -1};
    double loss[ENDING];
    int64_t steps[ENDING];
    size_t n = 0;
    for (size_t i = 0; i < p->n_steps; i++) {
        const report_step *st = &m->steps[p->step0 + i];
        if (st->step >= from && st->loss_finite)
            loss[n % ENDING] = st->loss, steps[n % ENDING] = st->step, n++;
    }
    if (n == 0) return e;
    const size_t k = n < ENDING ? n : ENDING;
    e.first = steps[(n - k) % ENDING], e.last = steps[(n - 1) % ENDING];
    e.loss = report_median(loss, k);
    return e;
}

// How the weights grew by the divergence's step `at` (its detail's sentence; "" without weight
// rows or growth worth telling).
static void weights_words(const report_model *m, int32_t pid, int64_t at, char *buf, size_t n,
                          report_weights *w, bool *has) {
    buf[0] = '\0';
    *has = report_weights_upto(m, pid, at, w);
    if (*has && report_weights_blew_up(w)) {
        char updates[96], param[96];
        report_weights_updates(w, updates, sizeof updates);
        snprintf(buf, n,
                 " The weights blew up with it: %s multiplied the largest |w| of %s by "
                 "%.3g (%.4g -> %.4g).",
                 updates, report_cut_name(param, sizeof param, w->param), w->growth, w->from,
                 w->to);
    } else if (*has && w->last >= 2 * w->first) {
        snprintf(buf, n, " The largest |w| went from %.4g (step %lld) to %.4g (step %lld).",
                 w->first, (long long)w->first_step, w->last, (long long)w->last_step);
    }
}

// A divergence that ends in NaN/inf is nonfinite-root-cause's, and so is one a forward that broke
// on its way ends ("training diverged before step N"): whether a forward of pid broke between
// steps from and last with the loss diverged before it. A forward overflow that the loss did not
// show, after the divergence was over, is the op's and this one's.
static bool broke_on_the_way(const report_model *m, int32_t pid, int64_t from, int64_t last) {
    const int64_t broke =
        report_spans_next(&m->forward_breaks, pid, from > INT64_MIN ? from - 1 : from);
    report_step before;
    return broke <= last && report_diverged_before(m, pid, broke, &before);
}

// The finding's title: a loss that blew up and came back down (recovered), or training that
// diverged; ended: where the loss ended.
static void write_title(report_finding *f, const report_process *p, bool recovered,
                        const char *ended) {
    const int64_t at = p->diverged_step;
    char since[64] = "";
    if (p->loss_max_step > at)
        snprintf(since, sizeof since, "; diverging from step %lld", (long long)at);
    if (recovered)
        snprintf(f->title, sizeof f->title,
                 "the loss blew up from %.4g to %.4g (step %lld%s) and came back down to %s",
                 p->loss0, p->loss_max, (long long)p->loss_max_step, since, ended);
    else
        snprintf(f->title, sizeof f->title,
                 "training diverged at step %lld: the loss rose from %.4g to %.4g (step %lld) "
                 "and was %s",
                 (long long)at, p->loss0, p->loss_max, (long long)p->loss_max_step, ended);
}

static void add_divergence(const report_model *m, const report_process *p, report_findings *out) {
    const int64_t at = p->diverged_step;
    const report_step *first = &m->steps[p->step0], *last = &m->steps[p->step0 + p->n_steps - 1];
    if (at < 0 || at > last->step) return;
    const int64_t from = at > first->step ? at : first->step;
    const ending end = ending_from(m, p, from);
    int64_t recorded, nonfinite, skipped;
    report_step_counts(m, p->pid, from, last->step, &recorded, &nonfinite, &skipped);
    if (nonfinite || end.last < 0 || broke_on_the_way(m, p->pid, from, last->step)) return;
    // every step from there skipped by the GradScaler: no update applied, nothing the optimizer
    // did since (a loss that jumped with the weights written at once, or a corrupt batch, is
    // the collapse's, rule loss-scale)
    if (skipped == recorded) return;
    const bool recovered = end.loss < 2 * p->base_loss;
    if (recovered && !(p->loss_max >= SPIKE * p->base_loss)) return;
    const report_step *st = report_step_find(m, p->pid, at); // (NULL: before the focus)
    report_finding *f =
        report_finding_add(out, RULE, recovered ? AMP_SEVERITY_WARNING : AMP_SEVERITY_ERROR);
    f->pid = p->pid;
    f->first_step = from;
    f->last_step = last->step;
    char ended[96];
    if (end.first == end.last)
        snprintf(ended, sizeof ended, "%.4g at step %lld", end.loss, (long long)end.last);
    else
        snprintf(ended, sizeof ended, "%.4g over steps %lld-%lld (the median)", end.loss,
                 (long long)end.first, (long long)end.last);
    write_title(f, p, recovered, ended);
    char norms[192] = "", weights[320] = "", skips[160] = "", rise[320]; // (detail holds them all)
    const bool norm_at = st && st->grad_norm > 0 && isfinite(st->grad_norm);
    if (p->grad_norm0 > 0 && norm_at)
        snprintf(norms, sizeof norms, ", and the gradient norm from %.4g to %.4g (x%.3g)",
                 p->grad_norm0, st->grad_norm, st->grad_norm / p->grad_norm0);
    else if (st && st->has_scale && st->skipped)
        snprintf(norms, sizeof norms, ", its gradients overflowing (the step skipped)");
    report_weights w;
    bool has_w;
    weights_words(m, p->pid, at, weights, sizeof weights, &w, &has_w);
    if (skipped)
        snprintf(skips, sizeof skips,
                 " The GradScaler skipped %lld of those %lld steps: their gradients overflowed "
                 "as they grew.",
                 (long long)skipped, (long long)recorded);
    if (st && st->loss_finite)
        snprintf(rise, sizeof rise, "The loss rose from %.4g (its first) to %.4g at step %lld%s.",
                 p->loss0, st->loss, (long long)at, norms);
    else
        snprintf(rise, sizeof rise,
                 "The loss had risen past twice its first (%.4g) by step "
                 "%lld, before the focus.",
                 p->loss0, (long long)at);
    snprintf(f->detail, sizeof f->detail,
             "%s%s Every loss stayed finite, so there is no NaN/inf to trace; where it ended, %s, "
             "is %.3gx the first.%s",
             rise, weights, ended, end.loss / p->loss0, skips);
    snprintf(f->advice, sizeof f->advice,
             "Lower the learning rate or warm it up from a small value, clip the gradients "
             "(clip_grad_norm_; under a GradScaler after unscale_), and check the batches from "
             "step %lld on. The loss and the gradients grew together: the optimisation "
             "diverged, which it does in fp32 as well, so the precision is not the cause and no "
             "loss scale or dtype fixes it.",
             (long long)at);
    report_finding_evidence(f, "diverged_step", (double)at);
    report_finding_evidence(f, "loss_first", p->loss0);
    report_finding_evidence(f, "loss_at", st && st->loss_finite ? st->loss : NAN);
    report_finding_evidence(f, "loss_max", p->loss_max);
    report_finding_evidence(f, "loss_end", end.loss);
    report_finding_evidence(f, "grad_norm_first", p->grad_norm0);
    report_finding_evidence(f, "grad_norm_at", norm_at ? st->grad_norm : NAN);
    report_finding_evidence(f, "weight_amax_first", has_w ? w.first : NAN);
    report_finding_evidence(f, "weight_amax_at", has_w ? w.last : NAN);
    report_finding_evidence(f, "weight_growth", has_w ? w.growth : NAN);
    report_finding_evidence(f, "skipped_steps", (double)skipped);
}

void rule_divergence_run(const report_model *m, report_findings *out) {
    for (size_t k = 0; k < m->n_procs; k++)
        if (m->procs[k].n_steps) add_divergence(m, &m->procs[k], out);
}
