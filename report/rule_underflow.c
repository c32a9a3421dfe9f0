/*
 * rule_underflow.c — rule `grad-underflow`: gradient values lost to zero or to a subnormal in the
 * autocast dtype, per layer.
 *
 * AMP_TENSOR_STATS counts, for each activation gradient and weight gradient (as scaled by the
 * GradScaler), the non-zero values that round to 0 or a subnormal in the target dtype
 * (n_underflow). Values that already underflowed in an fp16 backward arrive as zeros, which
 * cannot be told from structural zeros (a causal mask, a ReLU) one by one; a gradient tensor
 * that is entirely zero can: it counts as lost whole, unless the same gradient reached 1 (scaled)
 * in another step (a fall of 2^24 at once is no underflow: a saturated tanh, a dead ReLU). Healthy
 * fp16 runs lose a few percent of their smallest gradients to subnormals; layers losing 5% or more
 * are named (info). What decides whether training suffers is what reaches the optimizer: a layer
 * whose weight gradients lose 20% is a warning, with the loss scale that would keep them (from the
 * observed gradient amax: the largest power of two that keeps it under 65504/2). Activation
 * gradients alone decide only in a run that recorded no weight gradient: as a model fits its data,
 * the gradients of the examples it already fits shrink toward zero and underflow by the million
 * (the loss's gradient, the casts before it) while the weight gradients, summed over the
 * batch, keep their values. A run that computed no gradient
 * in fp16/bf16 (fp32) gets info at most: what fp16 without loss scaling would lose. Steps the
 * GradScaler skipped are left out (their gradients never reached the weights; after a collapse
 * to a scale of 0 they are all zero), and so are steps whose loss was not finite (a broken step's
 * gradients tell nothing of underflow: a loss over no target, every one ignore_index, has a
 * gradient of zeros) or fitted (a loss of 0 or a millionth of the first, as a large model soon
 * reaches on a small synthetic task: its gradients are zeros or next to nothing, and there is
 * nothing left for them to teach). In bf16, whose range is fp32's, a gradient of zeros is no
 * underflow (a saturated softmax, a dead ReLU): only the values below bf16's smallest normal count.
 *
 * Gradients that are all vanishingly small (the largest of the run 2^32 under the scale target,
 * about 7.6e-6: a loss divided twice, a tiny loss weight) are named even when nothing underflows
 * (bf16, fp32): they sit near the optimizer's eps (Adam's 1e-8) and the weights barely move; a
 * warning when the loss did not fall either, or when even the largest is under 1e-8.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RULE "grad-underflow"
#define LOST_SHARE_NOTE 0.05 // a layer losing this share is named (info)
#define LOST_SHARE_WARN 0.20 // a layer's weight gradients losing this share make it a warning
#define ADAM_EPS 1e-8        // torch.optim.Adam's default eps: gradients below it do not train
#define LIST_MAX 6           // layers named in the detail

typedef struct layer_loss {
    int32_t pid, layer_id;
    int64_t numel, lost, tensors, zero_tensors;
    int64_t weight_numel, weight_lost; // of its weight gradients
    int64_t first_step, last_step;
} layer_loss;

static bool is_grad(const report_stats *s) {
    return strcmp(s->kind, "activation_grad") == 0 || strcmp(s->kind, "weight_grad") == 0;
}

static int cmp_share(const void *pa, const void *pb) {
    const layer_loss *a = pa, *b = pb;
    double sa = (double)a->lost / (double)a->numel, sb = (double)b->lost / (double)b->numel;
    if (sa != sb) return sa > sb ? -1 : 1;
    // equal shares (every layer lost everything): the first layer of the model leads
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->layer_id < b->layer_id ? -1 : a->layer_id > b->layer_id;
}

// Whether u, the largest unscaled gradient of the run, is the mark of a mis-normalised loss.
static bool vanishing(double u) {
    return u > 0 && REPORT_SCALE_TARGET / u > ldexp(1.0, 32);
}

// Whether process pid trains model (report_process.model): the findings are of one model each.
static bool of_model(const report_model *m, int32_t pid, int32_t model) {
    return report_process_model(m, pid) == model;
}

// The first and the last finite loss of the focused steps, of the first process of model that
// has one (each process trains on its own); false when there are fewer than two.
static bool loss_ends(const report_model *m, int32_t model, const report_step **first,
                      const report_step **last) {
    *first = *last = NULL;
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        if (!s->loss_finite || !of_model(m, s->pid, model) || (*first && s->pid != (*first)->pid))
            continue;
        if (!*first) *first = s;
        *last = s;
    }
    return *first && *last != *first;
}

// Gradients too small to train with, though none underflowed (see the top of the file).
static void vanishing_finding(const report_model *m, int32_t model, double u,
                              report_findings *out) {
    const report_step *a, *b;
    const bool ends = loss_ends(m, model, &a, &b);
    const bool stalled = ends && !(b->loss < a->loss - 0.01 * fabs(a->loss));
    report_finding *f = report_finding_add(
        out, RULE, stalled || u < ADAM_EPS ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    report_finding_where(f, NULL, NULL, "bwd");
    f->first_step = f->last_step = -1;
    size_t procs = 0;
    for (size_t i = 0; i < m->n_procs; i++) {
        const report_process *p = &m->procs[i];
        if (p->model != model || !p->n_steps) continue;
        procs++, f->pid = procs == 1 ? p->pid : 0;
        const int64_t lo = m->steps[p->step0].step, hi = m->steps[p->step0 + p->n_steps - 1].step;
        if (f->first_step < 0 || lo < f->first_step) f->first_step = lo;
        if (hi > f->last_step) f->last_step = hi;
    }
    if (stalled)
        snprintf(
            f->title, sizeof f->title,
            "gradients vanishingly small (the largest %.3g) and the loss did not fall (%.6g at "
            "step %lld, %.6g at step %lld)",
            u, a->loss, (long long)a->step, b->loss, (long long)b->step);
    else if (u < ADAM_EPS)
        snprintf(f->title, sizeof f->title,
                 "gradients vanishingly small: the largest is %.3g, under Adam's eps (1e-8)", u);
    else
        snprintf(f->title, sizeof f->title, "gradients vanishingly small: the largest is %.3g", u);
    const int64_t every = report_stats_every(m);
    char sampled[80] = "";
    if (every > 1) snprintf(sampled, sizeof sampled, " sampled (one in %lld)", (long long)every);
    snprintf(f->detail, sizeof f->detail,
             "The largest gradient value of any layer in any step%s is %.3g (unscaled): a "
             "well-normalised loss gives gradients of 1e-4 to 10. In fp16 values this small "
             "underflow without a large loss scale; in any precision they fall under the "
             "optimizer's eps (Adam's 1e-8 is added to sqrt(v)), so the updates shrink with them.",
             sampled, u);
    snprintf(f->advice, sizeof f->advice,
             "Check the loss normalisation: a loss divided twice (a mean of a mean, a sum divided "
             "by the number of elements and again by the batch), a tiny loss weight, or a loss "
             "multiplied by a constant before backward. Fix it there rather than with the learning "
             "rate or eps.");
    report_finding_evidence(f, "grad_amax_unscaled", u);
    if (ends) {
        report_finding_evidence(f, "loss_first", a->loss);
        report_finding_evidence(f, "loss_last", b->loss);
    }
}

// Whether a GradScaler updated the scale in any focused step of model.
static bool has_scaler(const report_model *m, int32_t model) {
    for (size_t i = 0; i < m->n_steps; i++)
        if (m->steps[i].has_scale && of_model(m, m->steps[i].pid, model)) return true;
    return false;
}

// Whether model's parameters are stored in fp16 (its weight rows: a model cast with .half()),
// whose fp16 gradients PyTorch's GradScaler refuses to unscale.
static bool f16_params(const report_model *m, int32_t model) {
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (of_model(m, s->pid, model) && strcmp(s->kind, "weight") == 0 &&
            strcmp(s->dtype, "f16") == 0)
            return true;
    }
    return false;
}

// "3 bits", "1 bit", "less than a bit": n bits (log2 of a ratio of scales) in words.
static const char *bits_words(char *buf, size_t len, double n) {
    const double r = round(n);
    if (r < 1)
        snprintf(buf, len, "less than a bit");
    else
        snprintf(buf, len, "%.0f bit%s", r, r == 1 ? "" : "s");
    return buf;
}

// The scale of model's last applied update (scale_before of the last step the GradScaler did
// not skip: the gradients counted here are of such steps); NaN: none.
static double last_scale(const report_model *m, int32_t model) {
    for (size_t i = m->n_steps; i-- > 0;)
        if (m->steps[i].has_scale && !m->steps[i].skipped && of_model(m, m->steps[i].pid, model))
            return m->steps[i].scale_before;
    return NAN;
}

// The largest unscaled gradient of model's processes (report_unscaled_grad_amax).
static double model_grad_amax(const report_model *m, int32_t model) {
    double u = NAN;
    for (size_t i = 0; i < m->n_procs; i++) {
        const double p =
            m->procs[i].model == model ? report_unscaled_grad_amax(m, m->procs[i].pid) : NAN;
        if (isnan(u) || p > u) u = p;
    }
    return u;
}

// What model's gradients lost to zero and subnormals, layer by layer (in the order of the
// statistics until sorted), and overall.
typedef struct model_loss {
    layer_loss *v;
    size_t n, cap;
    int64_t total, lost; // gradient values counted, and lost
    bool lowp_grads;     // some gradient is fp16 or bf16 (else an fp32 run)
    bool fp16_target;    // some gradient counted against fp16 (else all against bf16)
} model_loss;

static void gather(const report_model *m, int32_t model, model_loss *g) {
    *g = (model_loss){0};
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (!of_model(m, s->pid, model)) continue;
        g->lowp_grads |= is_grad(s) && report_dtype_lowp(s->dtype);
        if (!is_grad(s) || s->numel <= 0 || strcmp(s->target, "f32") == 0 || !s->target[0])
            continue;
        // (the stats are sorted by pid and layer: a layer's rows follow each other)
        if (!g->n || g->v[g->n - 1].pid != s->pid || g->v[g->n - 1].layer_id != s->layer_id) {
            AMP_GROW(g->v, g->n, g->cap);
            g->v[g->n++] = (layer_loss){.pid = s->pid,
                                        .layer_id = s->layer_id,
                                        .first_step = s->counted_first_step,
                                        .last_step = s->counted_last_step};
        }
        layer_loss *l = &g->v[g->n - 1];
        const bool bf16 = strcmp(s->target, "bf16") == 0;
        g->fp16_target |= !bf16;
        // a tensor of zeros whose kind reached 1 (scaled) in other steps it counts fell by 2^24
        // at once: exact zeros (a saturated tanh, a dead ReLU), not an underflow
        const bool exact_zeros = bf16 || s->counted_amax >= 1.0;
        int64_t l_lost = s->n_underflow + (exact_zeros ? 0 : s->zero_numel);
        l->numel += s->numel;
        l->lost += l_lost;
        if (strcmp(s->kind, "weight_grad") == 0) {
            l->weight_numel += s->numel;
            l->weight_lost += l_lost;
        }
        l->tensors += s->tensors;
        l->zero_tensors += exact_zeros ? 0 : s->zero_tensors;
        // the steps counted (not those whose gradients were thrown away: skipped or broken)
        if (s->counted_first_step < l->first_step) l->first_step = s->counted_first_step;
        if (s->counted_last_step > l->last_step) l->last_step = s->counted_last_step;
        g->total += s->numel;
        g->lost += l_lost;
    }
}

// The share of layer l's weight-gradient values lost (weight_numel > 0).
static double weight_share_of(const layer_loss *l) {
    return (double)l->weight_lost / (double)l->weight_numel;
}

// Whether layer l lost LOST_SHARE_NOTE or more of its gradient values.
static bool affected(const layer_loss *l) {
    return (double)l->lost >= LOST_SHARE_NOTE * (double)l->numel && l->lost > 0;
}

// The finding's detail: the layers that lost the most (g sorted), the whole, the weights'.
static void write_detail(report_finding *f, const report_model *m, const model_loss *g,
                         const layer_loss *worst_weights, double weight_share) {
    char cut[84]; // a layer's name
    snprintf(f->detail, sizeof f->detail,
             "Lost to zero/subnormal (of the gradient values sampled):");
    for (size_t k = 0; k < g->n && k < LIST_MAX; k++) {
        const layer_loss *l = &g->v[k];
        if (!affected(l)) break;
        const char *name = report_layer_name(m, l->pid, l->layer_id);
        report_appendf(f->detail, sizeof f->detail, "%s %s %.1f%% (%lld of %lld%s)", k ? ";" : "",
                       name ? name : "(top level)", 100.0 * (double)l->lost / (double)l->numel,
                       (long long)l->lost, (long long)l->numel,
                       l->zero_tensors ? ", all-zero gradients included" : "");
    }
    report_appendf(f->detail, sizeof f->detail, ". Overall %.1f%% of %lld values.",
                   100.0 * (double)g->lost / (double)g->total, (long long)g->total);
    if (worst_weights) {
        const char *name = report_layer_name(m, worst_weights->pid, worst_weights->layer_id);
        report_appendf(
            f->detail, sizeof f->detail,
            " The weight gradients, what the optimizer steps with, lose %.*f%% at most (%s)%s",
            weight_share >= 0.01 ? 0 : 3, 100 * weight_share,
            report_layer_words(cut, sizeof cut, name),
            weight_share < LOST_SHARE_WARN
                ? ": the values lost are the smallest of the activation gradients, which "
                  "the weight gradients' sums over the batch hardly miss."
                : ".");
    }
}

// The finding's advice: what to change, from the precision, the scaler, the scale of the last
// update applied (cur; NaN: none), the one the largest gradients allow (rec) and their amax u.
static void write_advice(report_finding *f, const report_model *m, int32_t model,
                         const model_loss *g, double u, double rec, double cur) {
    const double init = isnan(rec) ? 65536.0 : rec; // the init_scale to advise
    char bits[32];
    if (!g->fp16_target) // bf16: no loss scale to raise; values below 1.2e-38 are a scaling bug
        snprintf(f->advice, sizeof f->advice,
                 "Check the loss normalisation: gradient values below bf16's smallest normal "
                 "(1.2e-38) are far below anything a well-scaled loss gives (divided twice, a "
                 "tiny loss weight); keep the affected layers' backward in fp32 until then.");
    else if (!g->lowp_grads)
        snprintf(f->advice, sizeof f->advice,
                 "Nothing to change in fp32. When this model trains in fp16, use a GradScaler "
                 "(init_scale=%.9g, growth_interval=2000): the largest unscaled gradient %.3g then "
                 "stays under 65504/2 while the small ones stay out of fp16's subnormals; or "
                 "train in bf16, whose range is fp32's.",
                 init, u);
    else if (isnan(cur) && !has_scaler(m, model) && f16_params(m, model))
        snprintf(f->advice, sizeof f->advice,
                 "Keep fp32 master weights: leave the parameters in fp32 and compute in fp16 "
                 "under torch.autocast with a GradScaler (init_scale=%.9g), instead of "
                 "model.half(), whose fp16 gradients a GradScaler refuses to unscale. Or train "
                 "in bf16, whose range is fp32's.",
                 init);
    else if (isnan(cur) && !has_scaler(m, model)) {
        // (in the words of the program's framework: PyTorch's, or libampcore's)
        char how[160];
        if (m->bridge)
            snprintf(how, sizeof how, "torch.amp.GradScaler(\"%s\", init_scale=%.9g)",
                     report_scaler_device(m), init);
        else
            snprintf(how, sizeof how,
                     "init_scale=%.9g: amp_scaler_new, or PyTorch's "
                     "torch.amp.GradScaler",
                     init);
        snprintf(f->advice, sizeof f->advice,
                 "Use a GradScaler (%s): fp16 gradients without loss scaling lose these values. "
                 "Or train in bf16, whose range is fp32's.",
                 how);
    } else if (isnan(rec))
        snprintf(f->advice, sizeof f->advice,
                 "Raise the loss scale (init_scale=65536 and let it grow: growth_interval=2000) "
                 "so the scaled gradients sit above fp16's smallest normal 6.1e-05; or train in "
                 "bf16, whose range is fp32's.");
    else if (vanishing(u)) {
        // (rec is 2^24, the most a scale is recommended: more overflows the loss's own
        // gradient; and bf16, which keeps such values, trains on them no better: an Adam step
        // hardly moves past its eps, 1e-8, in any precision)
        char scale[256];
        if (cur >= rec)
            snprintf(scale, sizeof scale,
                     "The scale is already %.9g and these values are lost even so: no loss "
                     "scale brings gradients this small into fp16's range.",
                     cur);
        else
            snprintf(scale, sizeof scale,
                     "Until then, a scale of %.9g (init_scale=%.9g, growth_interval=2000) "
                     "recovers some of the values lost.",
                     rec, rec);
        snprintf(f->advice, sizeof f->advice,
                 "Check the loss normalisation first: the largest gradient is only %.3g, the "
                 "mark of a mis-normalised loss (divided twice, a tiny loss weight), too small "
                 "to train on in any precision (an SGD step is the learning rate times them; "
                 "Adam's eps, 1e-8, swamps them). "
                 "%s",
                 u, scale);
    } else if (cur > rec)
        snprintf(f->advice, sizeof f->advice,
                 "The scale (%.9g at the last step applied) is already above what the largest "
                 "gradients allow (%.9g keeps the largest unscaled gradient %.3g under 65504/2; "
                 "above it a step whose gradients reach that size overflows and is skipped), and "
                 "these values are lost even so: the gradients span too many magnitudes for "
                 "fp16. Keep the affected layers' backward in fp32 or train in bf16.",
                 cur, rec, u);
    else if (!(rec > cur))
        snprintf(
            f->advice, sizeof f->advice,
            "The scale (%.9g) is already as high as the largest gradients allow: the gradients "
            "span too many magnitudes for fp16. Keep the affected layers' backward in fp32 or "
            "train in bf16.",
            cur);
    else
        snprintf(
            f->advice, sizeof f->advice,
            "Raise the loss scale to %.9g (init_scale=%.9g, growth_interval=2000 so it can keep "
            "growing): the largest unscaled gradient %.3g then stays under 65504/2 while the "
            "small ones move %s away from fp16's subnormals.",
            rec, rec, u, bits_words(bits, sizeof bits, isnan(cur) ? log2(rec) : log2(rec / cur)));
}

// The findings of the processes that train model.
static void run_model(const report_model *m, int32_t model, report_findings *out) {
    model_loss g;
    gather(m, model, &g);
    const layer_loss *v = g.v;
    const size_t n = g.n;
    size_t n_affected = 0;
    for (size_t k = 0; k < n; k++)
        n_affected += affected(&v[k]);
    double u = model_grad_amax(m, model);
    // (an fp16 or bf16 run that lost gradients gets the finding below, whose advice says it too)
    if (vanishing(u) && (n_affected == 0 || !g.lowp_grads)) vanishing_finding(m, model, u, out);
    if (n_affected == 0) {
        free(g.v);
        return;
    }
    amp_sort(g.v, n, sizeof *g.v, cmp_share);

    double rec = report_scale_for_amax(u);
    double cur = last_scale(m, model);
    const layer_loss *worst = &v[0];
    double worst_share = (double)worst->lost / (double)worst->numel;
    // what reaches the optimizer decides, where the run recorded it (see the top of the file)
    const layer_loss *worst_weights = NULL;
    for (size_t k = 0; k < n; k++)
        if (v[k].weight_numel > 0 &&
            (!worst_weights || weight_share_of(&v[k]) > weight_share_of(worst_weights)))
            worst_weights = &v[k];
    const double weight_share = worst_weights ? weight_share_of(worst_weights) : NAN;
    bool warn = g.lowp_grads && (worst_weights ? weight_share : worst_share) >= LOST_SHARE_WARN;
    report_finding *f =
        report_finding_add(out, RULE, warn ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    report_finding_where(f, report_layer_name(m, worst->pid, worst->layer_id), NULL, "bwd");
    f->pid = worst->pid; // one process's, unless a layer of another one is affected too
    for (size_t k = 0; k < n; k++)
        if (v[k].pid != worst->pid && affected(&v[k])) f->pid = 0;
    f->first_step = worst->first_step;
    f->last_step = worst->last_step;
    char cut[84]; // a layer's name in the title
    snprintf(f->title, sizeof f->title,
             "%s: %zu of %zu layers lose 5%% or more of their gradient values, %s the worst "
             "(%.0f%%)",
             !g.lowp_grads   ? "fp32 run: in fp16 without loss scaling, gradients would underflow"
             : g.fp16_target ? "gradients underflow in fp16"
                             : "gradients underflow in bf16",
             n_affected, n, report_layer_words(cut, sizeof cut, f->layer), 100 * worst_share);
    write_detail(f, m, &g, worst_weights, weight_share);
    write_advice(f, m, model, &g, u, rec, cur);
    report_finding_evidence(f, "layers_affected", (double)n_affected);
    report_finding_evidence(f, "layers", (double)n);
    report_finding_evidence(f, "worst_share", worst_share);
    report_finding_evidence(f, "worst_weight_share", weight_share);
    report_finding_evidence(f, "lost_values", (double)g.lost);
    report_finding_evidence(f, "gradient_values", (double)g.total);
    report_finding_evidence(f, "lost_share", (double)g.lost / (double)g.total);
    report_finding_evidence(f, "loss_scale", cur);
    report_finding_evidence(f, "grad_amax_unscaled", u);
    report_finding_evidence(f, "recommended_scale", rec);
    free(g.v);
}

void rule_underflow_run(const report_model *m, report_findings *out) {
    int32_t *done = NULL; // the models whose findings are made
    size_t n_done = 0, cap = 0;
    for (size_t i = 0; i < m->n_stats; i++) {
        const int32_t model = report_process_model(m, m->stats[i].pid);
        size_t k = n_done; // (the processes of a model mostly follow each other: the last first)
        while (k > 0 && done[k - 1] != model)
            k--;
        if (k > 0) continue;
        AMP_GROW(done, n_done, cap);
        done[n_done++] = model;
        run_model(m, model, out);
    }
    free(done);
}
