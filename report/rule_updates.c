/*
 * rule_updates.c — rule `lost-updates`: optimizer updates that 16-bit weights round away. A model
 * cast to fp16 or bf16 (model.half(), .to(torch.bfloat16)) and stepped by its optimizer has no
 * fp32 master weights: an update below half a unit in the last place of a weight (about 2^-9 of
 * its magnitude in bf16, 2^-12 in fp16) rounds back to the weight, and that part of the training
 * does not happen — silently, with every loss finite. The PyTorch bridge compares the first
 * values of each such parameter before and after each sampled update (AMP_TENSOR_STATS kind
 * weight_update: numel the values with a non-zero gradient, n_zero those left unchanged).
 *
 * The share is over the parameters' values: each parameter's share of unchanged values weighs by
 * its size (its `weight` rows' numel). Warning from WARN_SHARE, a note from NOTE_SHARE.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RULE "lost-updates"
#define WARN_SHARE 0.25
#define NOTE_SHARE 0.05
#define NAMED 3 // the parameters named in the detail

typedef struct param {
    const report_stats *s; // its weight_update group
    double share, size;    // unchanged / compared; its values
} param;

// The values of the parameter whose updates s counts: its weight rows' (one tensor's numel),
// else the most s compared in one step's row.
static double param_size(const report_model *m, const report_stats *s) {
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *w = &m->stats[i];
        if (w->pid == s->pid && w->layer_id == s->layer_id && w->tensors > 0 &&
            strcmp(w->kind, "weight") == 0 && strcmp(w->op, s->op) == 0)
            return (double)w->numel / (double)w->tensors;
    }
    return (double)s->numel / (double)s->tensors;
}

// n values in a few characters: "1.2 M", "40 k", "10".
static void count_words(char *buf, size_t size, double n) {
    if (n >= 1e9)
        snprintf(buf, size, "%.3g G", n / 1e9);
    else if (n >= 1e6)
        snprintf(buf, size, "%.3g M", n / 1e6);
    else if (n >= 1e3)
        snprintf(buf, size, "%.3g k", n / 1e3);
    else
        snprintf(buf, size, "%.0f", n);
}

static int by_lost_values(const void *a, const void *b) {
    const param *x = a, *y = b;
    const double u = x->share * x->size, v = y->share * y->size;
    return (u < v) - (u > v);
}

void rule_updates_run(const report_model *m, report_findings *out) {
    param *v = NULL;
    size_t n = 0, cap = 0;
    double lost = 0, total = 0;
    int64_t compared = 0, unchanged = 0, first = INT64_MAX, last = INT64_MIN;
    bool bf16 = false, f16 = false;
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (strcmp(s->kind, "weight_update") != 0 || s->numel <= 0 || s->n_zero < 0) continue;
        AMP_GROW(v, n, cap);
        v[n] = (param){
            .s = s, .share = (double)s->n_zero / (double)s->numel, .size = param_size(m, s)};
        lost += v[n].share * v[n].size;
        total += v[n].size;
        n++;
        compared += s->numel;
        unchanged += s->n_zero;
        if (s->first_step < first) first = s->first_step;
        if (s->last_step > last) last = s->last_step;
        bf16 |= strcmp(s->dtype, "bf16") == 0;
        f16 |= strcmp(s->dtype, "f16") == 0;
    }
    const double share = total > 0 ? lost / total : 0;
    if (share < NOTE_SHARE) {
        free(v);
        return;
    }
    amp_sort(v, n, sizeof *v, by_lost_values);
    const char *dtype = bf16 && f16 ? "16-bit" : bf16 ? "bf16" : "fp16";
    report_finding *f = report_finding_add(
        out, RULE, share >= WARN_SHARE ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    f->first_step = first;
    f->last_step = last;
    f->pid = v[0].s->pid;
    report_finding_where(f, report_layer_name(m, v[0].s->pid, v[0].s->layer_id), v[0].s->op,
                         "optim");
    snprintf(f->title, sizeof f->title,
             "optimizer updates rounded away in %s weights: %.0f%% of their values kept their "
             "value through an update (%s %.0f%%)",
             dtype, 100 * share, v[0].s->op, 100 * v[0].share);
    char worst[512] = "";
    for (size_t i = 0; i < n && i < NAMED; i++) {
        char size[32];
        count_words(size, sizeof size, v[i].size);
        report_appendf(worst, sizeof worst, "%s%s %.0f%% (%s values)", i ? ", " : "", v[i].s->op,
                       100 * v[i].share, size);
    }
    snprintf(f->detail, sizeof f->detail,
             "The optimizer updates the %s parameters themselves (no fp32 master weights). An "
             "update smaller than half a unit in the last place of a weight (about 2^-%d of its "
             "magnitude in %s) rounds back to the weight: of the values compared at each "
             "sampled step (the first of each parameter with a non-zero gradient) %lld of %lld "
             "stayed unchanged, so that much of the training did not happen, with every loss "
             "finite. Most values lost: %s.",
             dtype, bf16 ? 9 : 12, dtype, (long long)unchanged, (long long)compared, worst);
    const char *dev = report_scaler_device(m);
    if (f16)
        snprintf(f->advice, sizeof f->advice,
                 "Keep fp32 master weights: leave the model in fp32 and run its forward under "
                 "torch.autocast(\"%s\", dtype=torch.float16) with a torch.amp.GradScaler(\"%s\"): "
                 "the optimizer then updates fp32 weights, which autocast casts for each op. A "
                 "larger learning rate loses fewer updates but changes the training.",
                 dev, dev);
    else
        snprintf(f->advice, sizeof f->advice,
                 "Keep fp32 master weights: leave the model in fp32 and run its forward under "
                 "torch.autocast(\"%s\", dtype=torch.bfloat16): the optimizer then updates fp32 "
                 "weights, which autocast casts for each op. To keep the weights in bf16 (for "
                 "memory), use an optimizer that compensates the rounding (Kahan summation or "
                 "stochastic rounding). A larger learning rate loses fewer updates but changes "
                 "the training.",
                 dev);
    report_finding_evidence(f, "lost_share", share);
    report_finding_evidence(f, "values_compared", (double)compared);
    report_finding_evidence(f, "values_unchanged", (double)unchanged);
    report_finding_evidence(f, "parameters", (double)n);
    report_finding_evidence(f, "worst_share", v[0].share);
    free(v);
}
