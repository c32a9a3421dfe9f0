/*
 * rule_divergence.c — rule `divergence`: training that diverged while every loss stayed finite.
 *
 * A process diverged where its loss had grown to twice its first value with the gradient norm
 * tenfold (or, with no gradient norms recorded, the loss a hundredfold): report_process.
 * diverged_step, followed over the whole run. A learning rate too high for the model (no warm-up,
 * a bad batch) does it in fp32 as in fp16 or bf16, so the precision is not the cause and no AMP
 * setting is the fix. A divergence that ends in NaN/inf is told by rule nonfinite-root-cause with
 * its first non-finite value ("training diverged before step N"); this rule takes the processes
 * whose losses stayed finite from the divergence to the focus's end (under a GradScaler its
 * gradients may overflow: those steps are skipped, their losses finite). An error when the last
 * loss is still twice the first; a warning when the loss came back down (the weights moved far
 * on the way: the report says where the loss ended). The weights' growth (libampcore records each
 * parameter as its step begins) is the evidence of how: one update that multiplied the largest
 * weight tenfold is a step the optimizer took far too long.
 */
#include "report.h"

#include <math.h>
#include <stdio.h>

#define RULE "divergence"

// The focused steps of p from step `from` on: the largest finite loss (and its step), the last
// finite one (and its step) and whether any loss was non-finite.
typedef struct after {
    double loss_max, loss_last;
    int64_t max_step, last_step;
    bool nonfinite;
} after;

static after losses_from(const report_model *m, const report_process *p, int64_t from) {
    after a = {.loss_max = NAN, .loss_last = NAN, .max_step = -1, .last_step = -1};
    for (size_t i = 0; i < p->n_steps; i++) {
        const report_step *st = &m->steps[p->step0 + i];
        if (st->step < from) continue;
        a.nonfinite |= st->loss_nonfinite;
        if (!st->loss_finite) continue;
        if (!(st->loss <= a.loss_max)) a.loss_max = st->loss, a.max_step = st->step;
        a.loss_last = st->loss, a.last_step = st->step;
    }
    return a;
}

static void add_divergence(const report_model *m, const report_process *p, report_findings *out) {
    const int64_t at = p->diverged_step;
    const report_step *first = &m->steps[p->step0], *last = &m->steps[p->step0 + p->n_steps - 1];
    if (at < 0 || at > last->step) return;
    const after a = losses_from(m, p, at > first->step ? at : first->step);
    if (a.nonfinite || a.last_step < 0) return;              // (nonfinite-root-cause tells it)
    const report_step *st = report_step_find(m, p->pid, at); // (NULL: before the focus)
    const bool recovered = a.loss_last < 2 * p->loss0;
    report_finding *f =
        report_finding_add(out, RULE, recovered ? AMP_SEVERITY_WARNING : AMP_SEVERITY_ERROR);
    f->pid = p->pid;
    f->first_step = at > first->step ? at : first->step;
    f->last_step = last->step;
    char from[64] = "";
    if (a.max_step != at) snprintf(from, sizeof from, "; diverging from step %lld", (long long)at);
    if (recovered)
        snprintf(f->title, sizeof f->title,
                 "the loss blew up from %.4g to %.4g (step %lld%s) and came back down to %.4g by "
                 "step %lld",
                 p->loss0, a.loss_max, (long long)a.max_step, from, a.loss_last,
                 (long long)a.last_step);
    else
        snprintf(f->title, sizeof f->title,
                 "training diverged at step %lld: the loss rose from %.4g to %.4g (step %lld) "
                 "and was %.4g at step %lld",
                 (long long)at, p->loss0, a.loss_max, (long long)a.max_step, a.loss_last,
                 (long long)a.last_step);
    char norms[192] = "", weights[384] = "", skips[160] = "";
    if (p->grad_norm0 > 0 && st && st->grad_norm > 0)
        snprintf(norms, sizeof norms, ", and the gradient norm from %.4g to %.4g (x%.3g)",
                 p->grad_norm0, st->grad_norm, st->grad_norm / p->grad_norm0);
    report_weights w;
    const bool has_w = report_weights_upto(m, p->pid, at, &w);
    if (has_w && report_weights_blew_up(&w))
        snprintf(weights, sizeof weights,
                 " The weights blew up with it: the update after step %lld multiplied the "
                 "largest |w| by %.3g (%.4g -> %.4g).",
                 (long long)w.prev_step, w.last / w.prev, w.prev, w.last);
    else if (has_w && w.last >= 2 * w.first)
        snprintf(weights, sizeof weights,
                 " The largest |w| went from %.4g (step %lld) to %.4g (step %lld).", w.first,
                 (long long)w.first_step, w.last, (long long)w.last_step);
    int64_t recorded, nonfinite, skipped;
    report_step_counts(m, p->pid, f->first_step, f->last_step, &recorded, &nonfinite, &skipped);
    if (skipped)
        snprintf(skips, sizeof skips,
                 " The GradScaler skipped %lld of those %lld steps: their gradients overflowed "
                 "as they grew.",
                 (long long)skipped, (long long)recorded);
    char rise[320];
    if (st && st->loss_finite)
        snprintf(rise, sizeof rise, "The loss rose from %.4g (its first) to %.4g at step %lld%s.",
                 p->loss0, st->loss, (long long)at, norms);
    else
        snprintf(rise, sizeof rise,
                 "The loss had risen past twice its first (%.4g)%s by step "
                 "%lld, before the focus.",
                 p->loss0,
                 p->grad_norm0 > 0 ? " with the gradient "
                                     "norm tenfold"
                                   : "",
                 (long long)at);
    snprintf(f->detail, sizeof f->detail,
             "%s%s Every loss stayed finite, so there is no NaN/inf to trace; the last, %.4g at "
             "step %lld, is %.3gx the first.%s",
             rise, weights, a.loss_last, (long long)a.last_step, a.loss_last / p->loss0, skips);
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
    report_finding_evidence(f, "loss_max", a.loss_max);
    report_finding_evidence(f, "loss_last", a.loss_last);
    report_finding_evidence(f, "grad_norm_first", p->grad_norm0);
    report_finding_evidence(f, "grad_norm_at", st ? st->grad_norm : NAN);
    report_finding_evidence(f, "weight_amax_before", has_w && w.prev_step >= 0 ? w.prev : NAN);
    report_finding_evidence(f, "weight_amax_at", has_w ? w.last : NAN);
    report_finding_evidence(f, "skipped_steps", (double)skipped);
}

void rule_divergence_run(const report_model *m, report_findings *out) {
    for (size_t k = 0; k < m->n_procs; k++)
        if (m->procs[k].n_steps) add_divergence(m, &m->procs[k], out);
}
