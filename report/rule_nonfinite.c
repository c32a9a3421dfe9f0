/*
 * rule_nonfinite.c — rule `nonfinite-root-cause`: where the first NaN/inf came from, and why.
 *
 * libampcore's instrumentation (libampcore/src/instrument.c) traces non-finite values to the op
 * that produced them: `nonfinite_producer` (finite inputs, non-finite output; forward or
 * backward), `nonfinite_input` (NaN/inf arriving in a data tensor), `nonfinite_propagated` (an op
 * that only passed it on), `loss_nonfinite` and `step_skipped` (the scale's findings come from
 * the scale records: `grad_overflow` is rule recorded-events' business, when it is a warning or
 * an error). This rule picks the root of each
 * chain, the first forward producer or data input of a step, names it and explains it from the
 * op and the input/output ranges of the event's detail (or, for `nonfinite_module`, the first
 * module whose output went non-finite when the forward could not be traced op by op: the PyTorch
 * bridge on a model sharded over several processes, or a re-run that did not break again):
 *   - fp16 overflow: a matmul/linear/mul/conv whose finite inputs give +-inf near 65504, or
 *     an add/sub of them (a residual stream grown past fp16's range);
 *   - log/div of zero: log, div, reciprocal, rsqrt, pow ... turning a 0 into -inf/inf/NaN
 *     (when the input's range takes in 0; otherwise an fp16 overflow of exp, pow, div ...);
 *   - masks: a softmax over a row masked whole (NaN), a loss whose target's logit is masked;
 *   - NaN in the input data;
 *   - exploding gradients: backward producers while the forward stayed finite at a low scale,
 *     or a NaN (not inf) gradient: a derivative of 0 * inf or 0 / 0 (sqrt or a norm at 0);
 *   - a NaN gradient through a value the forward left out (the bridge's detail "... that where
 *     left out: ..."): torch.where(p > 0, p.log(), 0), whose backward is 0 * inf.
 * A backward overflow at a high loss scale is the GradScaler doing its job: info, not an error
 * (rule loss-scale judges whether the skips are too frequent).
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RULE "nonfinite-root-cause"
#define LOW_SCALE 16.0 // a backward overflow below this scale means gradients beyond 4096 unscaled

// ---------------------------------------------------------------------------------------------
// The event's detail (report_parse_ranges)

typedef report_ranges ranges;

void report_parse_ranges(const char *detail, report_ranges *r) {
    *r = (report_ranges){.in_amax = NAN, .in0_min = NAN, .out_amax = NAN};
    if (!detail) return;
    for (const char *seg = detail; *seg;) {
        const char *end = strchr(seg, ';');
        size_t len = end ? (size_t)(end - seg) : strlen(seg);
        char buf[512];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), seg);
        bool output = strncmp(buf, "output", 6) == 0 || strncmp(buf, "gradient", 8) == 0;
        const char *am = strstr(buf, REPORT_DETAIL_AMAX);
        double amax = am ? strtod(am + strlen(REPORT_DETAIL_AMAX), NULL) : NAN;
        long long n_nan = 0, n_pos = 0, n_neg = 0;
        const char *paren = strrchr(buf, '(');
        bool counts =
            paren && sscanf(paren, "(%lld nan, %lld +inf, %lld -inf)", &n_nan, &n_pos, &n_neg) == 3;
        const long long most = 1LL
                               << 52; // (a damaged detail's counts: held so sums cannot overflow)
        n_nan = n_nan < 0 ? 0 : n_nan > most ? most : n_nan;
        n_pos = n_pos < 0 ? 0 : n_pos > most ? most : n_pos;
        n_neg = n_neg < 0 ? 0 : n_neg > most ? most : n_neg;
        if (output) {
            r->out_amax = amax;
            if (counts) r->nan = n_nan, r->posinf = n_pos, r->neginf = n_neg;
            const char *sp = strchr(buf, ' ');
            if (sp) sscanf(sp + 1, "%7s", r->out_dtype);
        } else if (am || strstr(buf, REPORT_DETAIL_NO_FINITE)) { // (an input tensor described)
            if (!isnan(amax) && (isnan(r->in_amax) || amax > r->in_amax)) r->in_amax = amax;
            const char *mn = strstr(buf, " min "), *mx = strstr(buf, " max ");
            if (strncmp(buf, "input 0 ", 8) == 0) {
                if (mn) r->in0_min = strtod(mn + 5, NULL);
                sscanf(buf + 8, "%7s", r->in0_dtype);
            }
            const double lo = mn ? strtod(mn + 5, NULL) : NAN, hi = mx ? strtod(mx + 5, NULL) : NAN;
            if (r->n_in < 2) r->in_zero[r->n_in] = lo <= 0 && hi >= 0;
            if (r->n_in < 3) r->in_has_zero[r->n_in] = lo == 0 || hi == 0;
            r->n_in++;
            r->in_nonfinite |= counts && n_nan + n_pos + n_neg > 0;
        }
        if (!end) break;
        seg = end + 1;
        while (*seg == ' ')
            seg++;
    }
}

// ---------------------------------------------------------------------------------------------
// Which events belong together

static bool is(const report_event *e, const char *kind) {
    return strcmp(e->kind, kind) == 0;
}
static bool is_fwd(const report_event *e) {
    return e->phase && strcmp(e->phase, "fwd") == 0;
}
static bool same_site(const report_event *a, const report_event *b) {
    return report_event_cmp_place(a, b, true) == 0;
}

// The events indexed once, so that no question about one event reads all the others: each
// event's site (the first event there in recording order, and the next one there), and the roots,
// the events that say that a step's forward went non-finite (m->forward_breaks: a forward
// producer, a data input or a module output; a producer without a phase by its step's loss).
typedef struct events_index {
    size_t *first, *next; // per event; next: m->n_events for none
    bool *root;           // it breaks its step's forward
    bool *step_root;      // ... and is the first such event of its step
} events_index;

// By site, then in recording order (the events are one array).
static int cmp_site(const void *pa, const void *pb) {
    const report_event *a = *(const report_event *const *)pa, *b = *(const report_event *const *)pb;
    const int c = report_event_cmp_place(a, b, true);
    return c ? c : (a > b) - (a < b);
}

static void index_build(const report_model *m, events_index *x) {
    const size_t n = m->n_events;
    *x = (events_index){.first = amp_xmalloc((n + 1) * sizeof *x->first),
                        .next = amp_xmalloc((n + 1) * sizeof *x->next),
                        .root = amp_xcalloc(n + 1, sizeof *x->root),
                        .step_root = amp_xcalloc(n + 1, sizeof *x->step_root)};
    const report_event **by_site = amp_xmalloc((n + 1) * sizeof *by_site);
    for (size_t i = 0; i < n; i++)
        by_site[i] = &m->events[i];
    amp_sort(by_site, n, sizeof *by_site, cmp_site);
    for (size_t k = 0; k < n; k++) {
        const size_t i = (size_t)(by_site[k] - m->events);
        x->next[i] = n;
        if (k == 0 || !same_site(by_site[k - 1], by_site[k])) {
            x->first[i] = i;
            continue;
        }
        const size_t before = (size_t)(by_site[k - 1] - m->events);
        x->first[i] = x->first[before];
        x->next[before] = i;
    }
    free(by_site);
    const report_spans *roots = &m->forward_breaks; // sorted by pid, step, then recording order
    for (size_t k = 0; k < roots->n; k++) {
        const report_span *v = &roots->v[k];
        x->root[v->event] = true;
        x->step_root[v->event] = k == 0 || v[-1].pid != v->pid || v[-1].step != v->step;
    }
}

static void index_free(events_index *x) {
    free(x->first);
    free(x->next);
    free(x->root);
    free(x->step_root);
}

// Steps (first, last) and occurrences of the events at the same site as e.
static int64_t site_span(const report_model *m, const events_index *x, const report_event *e,
                         int64_t *first, int64_t *last) {
    int64_t occ = 0;
    *first = e->step;
    *last = e->last_step;
    for (size_t i = x->first[e - m->events]; i < m->n_events; i = x->next[i]) {
        const report_event *o = &m->events[i];
        occ += o->occurrences;
        if (o->step < *first) *first = o->step;
        if (o->last_step > *last) *last = o->last_step;
    }
    return occ;
}

// The non-finite values the events at e's site count over the focused steps (an aggregate row's
// as the focus keeps of it); -1 when none of them counted any.
static int64_t site_elements(const report_model *m, const events_index *x, const report_event *e) {
    int64_t n = -1;
    for (size_t i = x->first[e - m->events]; i < m->n_events; i = x->next[i]) {
        const report_event *o = &m->events[i];
        if (o->count < 0) continue;
        if (n < 0) n = 0;
        amp_add_sat(&n, o->count);
    }
    return n;
}

// The steps the events at e's site cover: their occurrences, but a step counted once however
// often the op went non-finite in it (several forwards a step: gradient accumulation, a module
// called twice). An aggregate row covers at most the steps in its range. (A site has ten rows
// of its own and one aggregate row a process: SCHEMA.md, AMP_EVENTS.)
static int64_t site_steps(const report_model *m, const events_index *x, const report_event *e) {
    // the aggregate rows' step ranges (merged), and the single rows' steps (sorted): each single
    // step counts once, and not where a range holds it (sorted, so that a site of many rows a
    // hand-made database may hold costs n log n, not n^2)
    int64_t n = 0, (*spans)[2] = NULL, *steps = NULL;
    size_t n_spans = 0, n_steps = 0, cap_spans = 0, cap_steps = 0;
    for (size_t i = x->first[e - m->events]; i < m->n_events; i = x->next[i]) {
        const report_event *o = &m->events[i];
        if (o->aggregate) {
            const uint64_t range = (uint64_t)o->last_step - (uint64_t)o->step + 1;
            n += (uint64_t)o->occurrences < range ? o->occurrences : (int64_t)range;
            AMP_GROW(spans, n_spans, cap_spans);
            spans[n_spans][0] = o->step, spans[n_spans++][1] = o->last_step;
        } else {
            AMP_GROW(steps, n_steps, cap_steps);
            steps[n_steps++] = o->step;
        }
    }
    amp_sort(spans, n_spans, sizeof *spans, report_cmp_i64); // (by first step)
    amp_sort(steps, n_steps, sizeof *steps, report_cmp_i64);
    size_t k = 0; // spans[0..k) merged, disjoint, by first step
    for (size_t i = 0; i < n_spans; i++) {
        if (k && spans[i][0] <= spans[k - 1][1]) {
            if (spans[i][1] > spans[k - 1][1]) spans[k - 1][1] = spans[i][1];
        } else {
            spans[k][0] = spans[i][0], spans[k++][1] = spans[i][1];
        }
    }
    for (size_t i = 0, j = 0; i < n_steps; i++) {
        if (i && steps[i] == steps[i - 1]) continue;
        while (j < k && spans[j][1] < steps[i])
            j++;
        n += !(j < k && spans[j][0] <= steps[i]);
    }
    free(spans);
    free(steps);
    return n;
}

// Events of kind in steps first..last of pid, counted with their occurrences.
static int64_t count_kind(const report_model *m, int32_t pid, const char *kind, int64_t first,
                          int64_t last) {
    int64_t n = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (e->pid == pid && is(e, kind) && e->last_step >= first && e->step <= last)
            n += e->occurrences;
    }
    return n;
}

// pid's steps first..last with a non-finite loss, and those skipped, as its step records say;
// from its loss_nonfinite and step_skipped events where it recorded no step in the range.
static void count_bad_steps(const report_model *m, int32_t pid, int64_t first, int64_t last,
                            int64_t *losses, int64_t *skipped) {
    // the recorded steps, not every number between first and last: a program may number its
    // steps sparsely (by samples or tokens seen), billions apart
    int64_t recorded;
    report_step_counts(m, pid, first, last, &recorded, losses, skipped);
    if (recorded) return;
    *losses = count_kind(m, pid, AMP_EVENT_LOSS_NONFINITE, first, last);
    *skipped = count_kind(m, pid, AMP_EVENT_STEP_SKIPPED, first, last);
}

static bool op_in(const char *op, const char *const *list) {
    for (; op && *list; list++)
        if (strcmp(op, *list) == 0) return true;
    return false;
}

static const char *const gemm_ops[] = {"matmul", "linear", "mm",     "bmm",    "addmm", "baddbmm",
                                       "mul",    "conv2d", "conv1d", "einsum", NULL};
// ops that normalise over a row: one whose every position is masked (-inf) gives NaN
static const char *const softmax_ops[] = {"softmax",
                                          "log_softmax",
                                          "scaled_dot_product_attention",
                                          "scaled_dot_product_efficient_attention",
                                          "scaled_dot_product_flash_attention",
                                          "scaled_dot_product_cudnn_attention",
                                          "efficient_attention_forward",
                                          "flash_attention_forward",
                                          NULL};
static const char *const loss_ops[] = {"cross_entropy", "nll_loss", "log_softmax", NULL};
// losses that average over their targets: NaN from finite inputs is 0 / 0, no target counted
static const char *const mean_loss_ops[] = {"cross_entropy", "nll_loss", NULL};
static const char *const sum_ops[] = {"add", "sub", "sum", "cumsum", NULL};
// exponentials: past fp32's range (3.4e38, bf16's too) from an input above 88.7 (exp2: 128)
static const char *const exp_ops[] = {"exp", "exp2", "expm1", NULL};
// spreads estimated with a correction (unbiased: divided by n - 1): NaN over n = 1 value
static const char *const spread_ops[] = {"std", "var", "std_mean", "var_mean", NULL};
static const char *const zero_ops[] = {"log",        "log2",  "log10", "log1p", "div",
                                       "reciprocal", "rsqrt", "sqrt",  "pow",   NULL};
// elementwise ops whose result outgrows their input's: past 65504 from finite fp16 inputs
static const char *const growth_ops[] = {"exp", "exp2",       "expm1", "pow",  "square",
                                         "div", "reciprocal", "sinh",  "cosh", NULL};

// Whether the input that a zero makes op non-finite (a division's divisor, else input 0) can be
// zero by its range (log1p's -1; true when the detail does not say).
static bool zero_reachable(const char *op, const ranges *r) {
    if (strcmp(op, "log1p") == 0) return isnan(r->in0_min) || r->in0_min <= -1;
    int k = strcmp(op, "div") == 0 && r->n_in >= 2 ? 1 : 0;
    return r->n_in <= k || r->in_zero[k];
}
// Ops that are NaN below a bound of their argument (input 0; a pow's base with a fractional
// exponent).
static const char *const domain_ops[] = {"log",  "log2",  "log10", "log1p",
                                         "sqrt", "rsqrt", "pow",   NULL};

static double domain_min(const char *op) {
    return strcmp(op, "log1p") == 0 ? -1.0 : 0.0;
}

static void where(report_finding *f, const report_model *m, const report_event *e) {
    report_finding_where(f, report_layer_name(m, e->pid, e->layer_id), e->op, e->phase);
    f->pid = e->pid;
}

static const char *layer_words(const report_finding *f) {
    return f->layer[0] ? f->layer : "the top level";
}

// ---------------------------------------------------------------------------------------------
// The findings

// The module whose code runs around layer ("" for the top level): its parent, past containers
// (a module with numbered children, a ModuleList or Sequential, runs no code between them).
static void around_of(const char *layer, char *out, size_t n) {
    size_t len = strlen(layer);
    bool numbered = true;
    while (len && numbered) {
        size_t dot = len;
        while (dot && layer[dot - 1] != '.')
            dot--;
        numbered = strspn(layer + dot, "0123456789") == len - dot;
        len = dot ? dot - 1 : 0;
    }
    snprintf(out, n, "%.*s", (int)len, layer);
}

// "fp16 overflow in L op at step S: finite inputs (amax A) <how>"
// The infinities an output holds, by sign: "+inf", "-inf" or "+-inf" (both, or none counted).
static const char *infs_word(const ranges *r) {
    return r->posinf && !r->neginf ? "+inf" : r->neginf && !r->posinf ? "-inf" : "+-inf";
}

// how: what the inputs did ("summed past 65504"; NULL: "gave" the infinities the output holds)
static void overflow_title(report_finding *f, const ranges *r, const char *how) {
    snprintf(f->title, sizeof f->title,
             "fp16 overflow in %s %s at step %lld: finite inputs (amax %.6g) %s%s", layer_words(f),
             f->op, (long long)f->first_step, r->in_amax, how ? how : "gave ",
             how ? "" : infs_word(r));
}

static void explain_forward(const report_model *m, report_finding *f, const report_event *e,
                            const ranges *r) {
    const char *fp32 = report_fp32_how(m), *cast = report_no_autocast(m) ? "a" : "autocast's";
    // q @ k^T in an attention layer (not its projections: a linear there is the qkv's or the
    // output's)
    bool attention = strstr(f->layer, "attn") != NULL && strcmp(f->op, "linear") != 0 &&
                     strcmp(f->op, "addmm") != 0;
    bool half = strcmp(r->out_dtype, "f16") == 0;
    bool infs = r->posinf + r->neginf > 0;
    if (is(e, "nonfinite_input")) {
        snprintf(f->title, sizeof f->title,
                 "NaN/inf in the input data at step %lld, first seen by %s %s",
                 (long long)f->first_step, layer_words(f),
                 report_op_is_cast(f->op) ? report_no_autocast(m) ? "(a cast of its input)"
                                                                  : "(autocast's cast of its input)"
                                          : f->op);
        snprintf(f->advice, sizeof f->advice,
                 "Sanitize the data: find the batch of step %lld and the sample that carries "
                 "NaN/inf (check the loader, the normalisation statistics, divisions by a zero "
                 "std), and assert isfinite() on each batch before the forward pass. Under fp16 "
                 "the GradScaler skips such a step; without it (fp32/bf16) the NaN reaches the "
                 "weights.",
                 (long long)f->first_step);
    } else if (is(e, "nonfinite_module")) {
        // Its input has no statistics: the value went bad in it or in the code of the module
        // around it, between the last module that returned finite values and it; in it when
        // its inputs were all outputs of modules that came before it finite (the bridge says so)
        char around[sizeof f->layer], made[sizeof f->layer + 64];
        around_of(f->layer, around, sizeof around);
        if (e->detail && strstr(e->detail, REPORT_DETAIL_MADE_IN_LAYER))
            snprintf(made, sizeof made, "made in it, its inputs (other modules' outputs) finite");
        else
            snprintf(made, sizeof made, "made there or in %s%s code just before it",
                     around[0] ? around : "the top level", around[0] ? "'s" : "");
        snprintf(f->title, sizeof f->title,
                 "%s%s first in the output of %s %s at step %lld (traced per module: %s)",
                 infs ? half ? "fp16 " : "" : "NaN", infs ? infs_word(r) : "", layer_words(f),
                 f->op, (long long)f->first_step, made);
        if (infs && half)
            snprintf(f->advice, sizeof f->advice,
                     "An fp16 overflow: keep that computation in fp32 (%s) or train in bf16, "
                     "which has fp32's range; better, keep its input normalised (attention "
                     "logits scaled by 1/sqrt(d_head), a LayerNorm before a residual stream "
                     "grows). The op was not traced (the detail says why): to have it named, "
                     "reproduce the step in one process with the same inputs.",
                     fp32);
        else
            snprintf(f->advice, sizeof f->advice,
                     "Look for a log, division, sqrt or exp of an out-of-range value there, or an "
                     "fp16 inf turned into NaN (inf - inf, 0 * inf, a softmax over +-inf). The op "
                     "was not traced (the detail says why): to have it named, reproduce the step "
                     "in one process with the same inputs.");
    } else if (op_in(e->op, domain_ops) && r->nan > 0 && r->in0_min < domain_min(e->op)) {
        snprintf(f->title, sizeof f->title,
                 "%s of a negative value in %s at step %lld gives NaN (its input's min %.6g)",
                 e->op, layer_words(f), (long long)f->first_step, r->in0_min);
        snprintf(f->advice, sizeof f->advice,
                 "%s is undefined below %g: make its argument non-negative where it is made "
                 "(abs, square, softplus or exp instead of a raw difference; a variance as the "
                 "mean of squared deviations, not E[x^2] - E[x]^2, which rounding drives below "
                 "0 in fp16), then clamp it (x.clamp_min(eps)) against zero. Precision does not "
                 "help here: this is NaN in fp32 too.",
                 e->op, domain_min(e->op));
    } else if (op_in(e->op, zero_ops) && zero_reachable(e->op, r)) {
        snprintf(f->title, sizeof f->title, "%s of zero in %s at step %lld gives %s", e->op,
                 layer_words(f), (long long)f->first_step, infs ? infs_word(r) : "NaN");
        // a 16-bit argument's 0 may be a value fp32 would have kept (below 6e-8 in fp16)
        const bool f16_in = strcmp(r->in0_dtype, "f16") == 0,
                   narrow = f16_in || strcmp(r->in0_dtype, "bf16") == 0;
        char precision[320] = "Precision does not help here: this underflows in fp32 too.";
        if (narrow)
            snprintf(precision, sizeof precision,
                     "Its argument was %s, where a value below %s rounds to 0: the zero may be "
                     "an underflow that fp32 would have kept, so compute it in fp32 (%s of "
                     "x.float()%s) as well as keeping it off zero.",
                     f16_in ? "fp16" : "bf16", f16_in ? "6e-8" : "9.2e-41", e->op,
                     report_no_autocast(m) ? "" : ", autocast disabled around it");
        snprintf(f->advice, sizeof f->advice,
                 "Keep the argument of %s away from zero: clamp it (x.clamp_min(eps)) or add an "
                 "eps to the denominator, and compute log-probabilities with log_softmax / a fused "
                 "cross_entropy (log-sum-exp) instead of log(softmax(x)). Also check what drives "
                 "the input to 0 (an oversized temperature or logit gain). %s",
                 e->op, precision);
    } else if (half && r->in_amax > REPORT_F16_MAX &&
               ((report_op_is_cast(e->op) && infs) || op_in(e->op, gemm_ops))) {
        // an f32 input (a weight, an activation, the batch) beyond fp16's range: autocast's cast
        // of it is inf (the PyTorch bridge's op tracer sees the cast as an op of its own), and
        // what an op sums from it +-inf or NaN
        if (report_op_is_cast(e->op))
            snprintf(f->title, sizeof f->title,
                     "fp16 overflow in %s at step %lld: %s cast to fp16 of a value beyond its "
                     "range (amax %.6g) gave %s",
                     layer_words(f), (long long)f->first_step, cast, r->in_amax, infs_word(r));
        else
            snprintf(f->title, sizeof f->title,
                     "fp16 overflow in %s %s at step %lld: an input beyond fp16's range (amax "
                     "%.6g) turned inf in %s cast, the output %s",
                     layer_words(f), f->op, (long long)f->first_step, r->in_amax, cast,
                     r->nan ? "NaN" : infs_word(r));
        snprintf(f->advice, sizeof f->advice,
                 "Bring that input back under fp16's 65504: a weight this large has grown "
                 "unchecked (lower the learning rate, add weight decay or clip the gradients, "
                 "look for a bad update at the step before), an activation or an input batch "
                 "wants normalising (a LayerNorm, scaled inputs). Or keep %s%s%s in fp32 (%s), "
                 "or train in bf16, which has fp32's range.",
                 layer_words(f), report_op_is_cast(e->op) ? "" : " ",
                 report_op_is_cast(e->op) ? "" : f->op, fp32);
    } else if (op_in(e->op, softmax_ops) && r->nan > 0 &&
               (r->in_nonfinite || strstr(e->op, "attention"))) {
        // (a fused attention's boolean mask is no input the tracer describes)
        snprintf(f->title, sizeof f->title,
                 "%s over a row with every position masked gives NaN in %s at step %lld", e->op,
                 layer_words(f), (long long)f->first_step);
        snprintf(f->advice, sizeof f->advice,
                 "A row has nothing left to normalise over: a sequence that is all padding, or "
                 "a causal mask and a padding mask that together leave a query no key. Leave "
                 "each row one position (let padding attend to itself), mask with a large "
                 "finite negative (torch.finfo(dtype).min) instead of -inf, or zero the fully "
                 "masked rows after it (torch.where(mask.all(-1, keepdim=True), 0, p)). "
                 "Precision does not help here: this is NaN in fp32 too.");
    } else if (op_in(e->op, growth_ops) && infs && half && !r->in_nonfinite) {
        overflow_title(f, r, NULL);
        snprintf(f->advice, sizeof f->advice,
                 "%s's result is beyond fp16's 65504: compute it in fp32 (%s) or train in bf16, "
                 "or bring its input down first: subtract the row max before an exp "
                 "(log-sum-exp), square a normalised value, divide by y.clamp_min(eps) rather "
                 "than by a value near 0.",
                 f->op, fp32);
    } else if (op_in(e->op, exp_ops) && r->posinf > 0 && !r->in_nonfinite &&
               (strcmp(r->out_dtype, "f32") == 0 || strcmp(r->out_dtype, "bf16") == 0)) {
        // (autocast runs exp in fp32: a hand-written softmax's exp of a logit above 88.7)
        snprintf(f->title, sizeof f->title,
                 "%s overflow in %s %s at step %lld: finite inputs (amax %.6g) gave +inf, past "
                 "%s's 3.4e38",
                 r->out_dtype, layer_words(f), f->op, (long long)f->first_step, r->in_amax,
                 r->out_dtype);
        snprintf(f->advice, sizeof f->advice,
                 "%s of a value above %s is beyond fp32's and bf16's range alike: precision does "
                 "not help. Bring its input down first: subtract the row max before the exp "
                 "(torch.softmax, log_softmax and logsumexp do), or clamp it "
                 "(x.clamp_max(80)); a growing input points at logits or weights that grow "
                 "unchecked (a learning rate too high, no normalisation).",
                 f->op, strcmp(f->op, "exp2") == 0 ? "128" : "88.7");
    } else if (op_in(e->op, loss_ops) && r->in_nonfinite && r->posinf > 0) {
        // a producer's non-finite inputs are a mask's -inf (the tracers allow no others)
        snprintf(f->title, sizeof f->title,
                 "%s of a masked (-inf) logit in %s at step %lld gives +inf: a target falls on "
                 "a class masked out, or label smoothing takes in every class",
                 e->op, layer_words(f), (long long)f->first_step);
        snprintf(f->advice, sizeof f->advice,
                 "Either a label of step %lld is a class whose logit is masked to -inf (a "
                 "padding or forbidden token): give such targets the loss's ignore_index (-100), "
                 "leave that class unmasked, or mask with a large finite negative "
                 "(torch.finfo(dtype).min) instead of -inf, which makes its loss large but "
                 "finite. Or the loss has label_smoothing > 0, which takes in every class's "
                 "-log p, a masked one's too, whatever the targets (+inf, and huge with a finite "
                 "mask): smooth over the allowed classes by hand, or leave the mask out of the "
                 "smoothed loss.",
                 (long long)f->first_step);
    } else if (op_in(e->op, mean_loss_ops) && r->nan > 0 && !infs && !r->in_nonfinite) {
        snprintf(f->title, sizeof f->title,
                 "%s with no target to average over gives NaN (0 / 0) in %s at step %lld: every "
                 "target of the batch is ignore_index (-100), or the batch is empty",
                 e->op, layer_words(f), (long long)f->first_step);
        snprintf(f->advice, sizeof f->advice,
                 "The mean of a loss over no target is 0 / 0: skip a batch whose targets are all "
                 "ignore_index (if (y != -100).any(): ...), keep a real target in every batch "
                 "(pack sequences rather than batch padding alone), or take reduction='sum' "
                 "divided by max(count, 1). Class weights that sum to 0 over the batch's targets "
                 "do the same, and on libampcore's CUDA backend a target outside [0, classes) "
                 "gives NaN too: check the labels of step %lld. Precision does not help here: "
                 "this is NaN in fp32 too.",
                 (long long)f->first_step);
    } else if (op_in(e->op, spread_ops) && r->nan > 0 && !infs && !r->in_nonfinite) {
        snprintf(f->title, sizeof f->title,
                 "%s of a single value gives NaN in %s at step %lld: the unbiased estimate "
                 "divides by n - 1 = 0",
                 e->op, layer_words(f), (long long)f->first_step);
        snprintf(f->advice, sizeof f->advice,
                 "torch.std and torch.var default to the unbiased estimate (correction=1), which "
                 "is NaN over one value: a batch of 1 (the last, short batch of an epoch: "
                 "DataLoader(..., drop_last=True)), or a dimension of size 1. Take correction=0 "
                 "(unbiased=False), as BatchNorm and LayerNorm do, or skip such a batch; and keep "
                 "an eps in what divides by it. Precision does not help here: this is NaN in fp32 "
                 "too.");
    } else if (op_in(e->op, sum_ops) && infs && half && !r->in_nonfinite) {
        overflow_title(f, r, "summed past 65504");
        snprintf(f->advice, sizeof f->advice,
                 "What %s adds has grown to fp16's range (a residual stream, an accumulated "
                 "sum): normalise before it grows (a LayerNorm at the start of each block, "
                 "pre-LN; a smaller scale on each residual branch), or make the sum in fp32 "
                 "(x = x.float() + y%s), or train in bf16, which has fp32's range.",
                 layer_words(f),
                 report_no_autocast(m)
                     ? ", cast back to fp16 where a module of fp16 parameters takes it: the run "
                       "has no autocast"
                     : " under torch.autocast(..., enabled=False); amp_autocast_begin(ctx, "
                       "false, ...) here");
    } else if (op_in(e->op, gemm_ops) && infs && half) {
        overflow_title(f, r, NULL);
        if (attention)
            snprintf(f->advice, sizeof f->advice,
                     "Scale the attention logits by 1/sqrt(d_head) (check the temperature/gain "
                     "applied to q@k^T) so they stay far below fp16's 65504. If they must be "
                     "large, keep the q@k^T matmul and this %s in fp32 (%s) or train in bf16, "
                     "which has fp32's range.",
                     f->op, fp32);
        else
            snprintf(f->advice, sizeof f->advice,
                     "Keep %s %s in fp32 (%s), or train in bf16, which has fp32's range. Better, "
                     "keep the activation normalised: a LayerNorm before it, scaled or clamped "
                     "logits, a smaller weight init.",
                     layer_words(f), f->op, fp32);
    } else {
        snprintf(f->title, sizeof f->title, "%s %s produced non-finite values from %s at step %lld",
                 layer_words(f), f->op,
                 r->in_nonfinite ? "finite inputs and a mask's -inf" : "finite inputs",
                 (long long)f->first_step);
        if (half || !r->out_dtype[0])
            snprintf(f->advice, sizeof f->advice,
                     "Look at what %s computes on the inputs below: keep it in fp32 (%s) if the "
                     "output exceeds the %s range, clamp its input if it is a log/exp/division, "
                     "or train in bf16.",
                     f->op, fp32, r->out_dtype[0] ? r->out_dtype : "autocast dtype");
        else // (bf16 and fp32 reach 3.4e38: more precision or range would not help)
            snprintf(f->advice, sizeof f->advice,
                     "Look at what %s computes on the inputs below: an output past %s's range "
                     "(3.4e38) comes from values grown unchecked (weights blown up by too high a "
                     "learning rate: lower it, clip the gradients), not from the precision, "
                     "and fp32 would not hold it either; a log/exp/division wants its input "
                     "clamped, an inf - inf or 0 * inf its operands kept finite.",
                     f->op, r->out_dtype);
    }
}

// Training that diverged before its first non-finite value (report_process.diverged_step: the
// loss grown to twice its base with the gradient norm tenfold, or without a gradient norm the
// loss a hundredfold; report_diverged_before): a learning rate too high (no warm-up, a bad batch)
// blows the weights up step by step, and the NaN/inf that ends it comes in fp32 as in fp16 or bf16,
// so the precision is not the cause and keeping an op in fp32 does not help.

// Says that the non-finite value of finding f ends p's divergence: the title leads with it, the
// advice is the divergence's (the op's own fix would not help), the evidence has its numbers.
static void tell_divergence(report_finding *f, const report_process *p, const report_step *last) {
    char was[sizeof f->title];
    snprintf(was, sizeof was, "%s", f->title);
    const int n = snprintf(f->title, sizeof f->title,
                           "training diverged before step %lld (the loss %.4g -> %.4g by step "
                           "%lld); its first non-finite value: ",
                           (long long)f->first_step, p->loss0, last->loss, (long long)last->step);
    report_cut_name(f->title + n, sizeof f->title - (size_t)n, was);
    char norms[160] = "";
    if (p->grad_norm0 > 0 && last->grad_norm > 0)
        snprintf(norms, sizeof norms, " and the gradient norm from %.4g to %.4g", p->grad_norm0,
                 last->grad_norm);
    snprintf(f->advice, sizeof f->advice,
             "The values grew because the training diverged, not for want of precision: the "
             "loss rose %.3gx by step %lld%s, and the weights with it (the input ranges below). "
             "It would diverge in fp32 or bf16 as well. Lower the learning rate or add "
             "warm-up, clip the gradients (clip_grad_norm_; under a GradScaler after unscale_), "
             "and check the batches from step %lld on.",
             last->loss / p->loss0, (long long)last->step, norms, (long long)p->diverged_step);
    report_finding_evidence(f, "diverged_step", (double)p->diverged_step);
    report_finding_evidence(f, "loss_first", p->loss0);
    report_finding_evidence(f, "loss_before", last->loss);
    report_finding_evidence(f, "grad_norm_first", p->grad_norm0);
    report_finding_evidence(f, "grad_norm_before", last->grad_norm);
}

// Says that the non-finite value of finding f came of weights an update blew up (w: a
// parameter's largest |w| tenfold or more an update into the last recorded step at or before f's
// first step): a step the optimizer took far too long, too soon for the loss to show a
// divergence (the next loss is already NaN), which fp32 or bf16 would not survive either.
static void tell_blowup(const report_model *m, int32_t pid, report_finding *f,
                        const report_weights *w) {
    char was[sizeof f->title], param[96];
    snprintf(was, sizeof was, "%s", f->title);
    report_cut_name(param, sizeof param, w->param);
    const int n = snprintf(f->title, sizeof f->title,
                           "the weights blew up before step %lld (%s's largest |w| %.4g at step "
                           "%lld, %.4g at step %lld); its first non-finite value: ",
                           (long long)f->first_step, param, w->from, (long long)w->from_step, w->to,
                           (long long)w->last_step);
    report_cut_name(f->title + n, sizeof f->title - (size_t)n, was);
    // the gradients the last of those updates stepped with: exploded, or as they were (then the
    // jump came of the learning rate, or of code that wrote the weights, not of them)
    const report_process *p = report_process_find(m, pid);
    const report_step *g = report_step_find(m, pid, w->last_step - 1);
    const double x = p && g && p->grad_norm0 > 0 ? g->grad_norm / p->grad_norm0 : NAN;
    if (isfinite(x) && x < 10) {
        snprintf(f->advice, sizeof f->advice,
                 "Find what made the weights jump: the largest |w| of %s grew %.3g-fold between "
                 "steps %lld and %lld (%.4g -> %.4g) while the gradients were ordinary (a norm "
                 "of %.4g at step %lld, the first %.4g), so either the learning rate is far too "
                 "high for them (lower it, or add warm-up) or code between the steps wrote to the "
                 "weights (a checkpoint loaded, a parameter edited in place). No precision makes "
                 "such weights safe; the values overflowed because of them.",
                 param, w->growth, (long long)w->from_step, (long long)w->last_step, w->from, w->to,
                 g->grad_norm, (long long)g->step, p->grad_norm0);
    } else {
        char updates[96], grads[256] = "";
        report_weights_updates(w, updates, sizeof updates);
        if (x >= 10)
            snprintf(grads, sizeof grads,
                     " It stepped with a gradient norm of %.4g at step %lld, %.3g times the "
                     "first: find why the gradients grew (the loss, a layer's output) as well.",
                     g->grad_norm, (long long)g->step, x);
        snprintf(f->advice, sizeof f->advice,
                 "Lower the learning rate or add warm-up, and clip the gradients (clip_grad_norm_; "
                 "under a GradScaler after unscale_): %s multiplied the largest |w| of %s by %.3g "
                 "(%.4g -> %.4g), a step far too long for these weights, which no precision makes "
                 "safe; the values overflowed because of it.%s",
                 updates, param, w->growth, w->from, w->to, grads);
    }
    report_finding_evidence(f, "weight_amax_before", w->from);
    report_finding_evidence(f, "weight_amax_at", w->to);
    report_finding_evidence(f, "weights_step_before", (double)w->from_step);
}

// Says that the weights of finding f's process grew WEIGHTS_GREW-fold or more from the first
// recorded step to the last at or before f's (w), over updates none of which blew them up: the
// training grows them (a learning rate too high for them, no weight decay) until some product
// overflows, and keeping that op in fp32 only moves the overflow on. The op's own advice stays,
// after the training's.
#define WEIGHTS_GREW 100.0
static void tell_weights_grew(report_finding *f, const report_weights *w) {
    char op[sizeof f->advice];
    snprintf(op, sizeof op, "%s", f->advice);
    const int n = snprintf(
        f->advice, sizeof f->advice,
        "Lower the learning rate or add weight decay: the weights grew %.3g-fold over the run (the "
        "largest |w| %.4g at step %lld, %.4g at step %lld), and this overflow comes of them; in "
        "fp32 it would come back wherever they grow next. Meanwhile: ",
        w->last / w->first, w->first, (long long)w->first_step, w->last, (long long)w->last_step);
    report_cut_name(f->advice + n, sizeof f->advice - (size_t)n, op);
    report_finding_evidence(f, "weight_amax_first", w->first);
    report_finding_evidence(f, "weight_amax_at", w->last);
}

// The event's detail without its trailing "; " (empty when none).
static int detail_len(const report_event *e) {
    if (!e->detail) return 0;
    int n = (int)strlen(e->detail);
    while (n > 0 && (e->detail[n - 1] == ' ' || e->detail[n - 1] == ';'))
        n--;
    return n;
}

// The steps of pid right after last whose loss is non-finite with no forward root of their own,
// up to *until: what an optimizer that stepped on NaN/inf gradients leaves (weights non-finite).
// None when step last was skipped: its gradients never reached the weights.
static int64_t poisoned_after(const report_model *m, int32_t pid, int64_t last, int64_t *until) {
    const report_step *at = report_step_find(m, pid, last);
    if ((at && at->skipped) || last == INT64_MAX) return 0; // (no step after INT64_MAX)
    const int64_t next_root = report_spans_next(&m->forward_breaks, pid, last);
    int64_t n = 0;
    for (int64_t s = last + 1; s < next_root; s++) {
        const report_step *st = report_step_find(m, pid, s);
        if (!st || !st->loss_nonfinite) break;
        n++;
        *until = s;
    }
    return n;
}

// What a run whose parameters changed with no optimizer.step() seen (META updates) is told.
static const char by_hand[] =
    " (no optimizer.step() was seen: an update written in the program, or an optimizer not "
    "given to watch())";

// A forward root's finding; returns the last step whose non-finite loss it explains (its site's
// last, or the last of the steps an optimizer step on its gradients poisoned).
static int64_t add_forward_root(const report_model *m, const events_index *x, const report_event *e,
                                report_findings *out) {
    ranges r;
    report_parse_ranges(e->detail, &r);
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_ERROR);
    where(f, m, e);
    site_span(m, x, e, &f->first_step, &f->last_step);
    const int64_t affected = site_steps(m, x, e);
    explain_forward(m, f, e, &r);
    int64_t losses, skipped;
    count_bad_steps(m, e->pid, f->first_step, f->last_step, &losses, &skipped);
    int64_t until = 0, after = poisoned_after(m, e->pid, f->last_step, &until);
    char then[512] = "", span[64];
    if (after == 1)
        snprintf(span, sizeof span, "step %lld", (long long)until);
    else if (after > 1) // (then a step follows the last one: no step INT64_MAX + 1)
        snprintf(span, sizeof span, "steps %lld-%lld", (long long)f->last_step + 1,
                 (long long)until);
    if (after > 0)
        snprintf(then, sizeof then,
                 " Then %lld more step%s with a non-finite loss and no producer of %s own (%s): "
                 "%s the non-finite gradients of step %lld%s, with no GradScaler to skip it, and "
                 "the weights are non-finite since.",
                 (long long)after, after == 1 ? "" : "s", after == 1 ? "its" : "their", span,
                 m->updates ? "the parameters were updated with" : "the optimizer stepped on",
                 (long long)f->last_step, m->updates ? by_hand : "");
    int dl = detail_len(e);
    // made outside the model, where modules the PyTorch bridge did not watch may have run
    const bool elsewhere = !f->layer[0] && m->unwatched && is(e, AMP_EVENT_NONFINITE_PRODUCER);
    char lost[64] = "the loss stayed finite";
    if (losses) snprintf(lost, sizeof lost, "non-finite loss in %lld", (long long)losses);
    snprintf(f->detail, sizeof f->detail, "%.*s%s%lld step%s affected; %s, %lld skipped.%s%s%s%s",
             dl, dl ? e->detail : "", dl ? ".\n" : "", (long long)affected,
             affected == 1 ? "" : "s", lost, (long long)skipped, then,
             elsewhere ? " The code outside the model runs modules that were not watched, which "
                         "may be where it was made: "
                       : "",
             elsewhere ? m->unwatched : "", elsewhere ? "." : "");
    if (!e->phase && is(e, AMP_EVENT_NONFINITE_PRODUCER)) // (an outside framework's record)
        report_appendf(f->detail, sizeof f->detail,
                       " Recorded without a phase: a forward break by its step's non-finite loss.");
    report_finding_evidence(f, "steps_affected", (double)affected);
    const int64_t elements = site_elements(m, x, e);
    report_finding_evidence(f, "nonfinite_elements", elements >= 0 ? (double)elements : NAN);
    report_finding_evidence(f, "input_amax", r.in_amax);
    report_finding_evidence(f, "output_amax", r.out_amax);
    report_finding_evidence(f, "output_nan", (double)r.nan);
    report_finding_evidence(f, "output_posinf", (double)r.posinf);
    report_finding_evidence(f, "output_neginf", (double)r.neginf);
    if (strcmp(r.out_dtype, "f16") == 0) report_finding_evidence(f, "dtype_max", REPORT_F16_MAX);
    report_finding_evidence(f, "nonfinite_losses", (double)losses);
    report_finding_evidence(f, "skipped_steps", (double)skipped);
    report_finding_evidence(f, "nonfinite_losses_after", (double)after);
    report_step last;
    const report_process *dv = is(e, "nonfinite_input") // (data is data, whatever the weights did)
                                   ? NULL
                                   : report_diverged_before(m, e->pid, f->first_step, &last)
                                         ? report_process_find(m, e->pid)
                                         : NULL;
    report_weights w;
    if (dv)
        tell_divergence(f, dv, &last);
    else if (!is(e, "nonfinite_input") && report_weights_upto(m, e->pid, f->first_step, &w)) {
        if (report_weights_blew_up(&w))
            tell_blowup(m, e->pid, f, &w);
        else if (w.first > 0 && w.last >= WEIGHTS_GREW * w.first)
            tell_weights_grew(f, &w);
    }
    return after > 0 ? until : f->last_step;
}

// elementwise backward ops that never overflow into NaN: from finite values they give NaN only at
// a singular point (0 / 0), or from a saved forward -inf (0 * -inf)
static const char *const singular_ops[] = {"div", "mul", "sqrt",  "rsqrt",       "reciprocal",
                                           "pow", "log", "where", "masked_fill", NULL};

// An inf gradient from finite values where a derivative has a pole at 0: a division by a value
// that holds an exact 0 (sqrt's backward at 0, x / y's at y = 0), a power of 0 below 1
// (pow(x, 0.5) at 0), an rsqrt or reciprocal of 0 (acos's and asin's backward at +-1: the
// rsqrt of 1 - x^2). However small the gradients, it comes at every loss scale. The inputs as
// the detail lists them: the PyTorch bridge's aten op's arguments (div: input 1 the divisor; pow:
// input 0 the base), else libampcore's node's incoming gradient and then its forward inputs.
// The op a backward producer names: the aten op inside its node (the PyTorch bridge), else its
// own (libampcore's node).
static const char *pole_op(const char *aten, const char *op) {
    return aten[0] ? aten : op ? op : "";
}

static bool inf_at_pole(const ranges *r, const char *aten, const char *op) {
    if (r->posinf + r->neginf == 0 || r->in_nonfinite) return false;
    const char *name = pole_op(aten, op);
    const int first = aten[0] ? 0 : 1; // (libampcore: input 0 is the incoming gradient)
    if (strcmp(name, "div") == 0) return r->in_has_zero[first + 1];
    if (strcmp(name, "pow") == 0) return r->in_has_zero[first];
    // (libampcore's rsqrt and reciprocal nodes are infinite in the forward already)
    if (aten[0] && (strcmp(name, "rsqrt") == 0 || strcmp(name, "reciprocal") == 0))
        return r->in_has_zero[0];
    return false;
}

// What a pole of op (inf_at_pole's name) did, for a title.
static const char *pole_words(const char *op) {
    if (strcmp(op, "div") == 0) return "a division by 0";
    if (strcmp(op, "pow") == 0) return "0 raised to a power below 1";
    if (strcmp(op, "rsqrt") == 0) return "rsqrt of 0";
    return "a reciprocal of 0";
}

// The aten op of a backward producer's detail: "... in MulBackward0 (mul); ..." (empty: none).
static void backward_aten(const char *detail, char *out, size_t n) {
    out[0] = '\0';
    const char *in = detail && strncmp(detail, "in ", 3) == 0 ? detail : NULL;
    if (!in && detail) in = strstr(detail, "; in ");
    const char *open = in ? strchr(in, '(') : NULL, *close = open ? strchr(open, ')') : NULL;
    if (close) snprintf(out, n, "%.*s", (int)(close - open - 1), open + 1);
}

// The step record that tells backward event e's loss scale: its step's; for an aggregate row
// that began before the focus (--steps), whose first step is not loaded, the first step of its
// range that the GradScaler skipped (one of its occurrences); NULL: none.
static const report_step *overflow_step(const report_model *m, const report_event *e) {
    const report_step *st = report_step_find(m, e->pid, e->step);
    for (size_t i = 0; !st && i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        if (s->pid == e->pid && s->step > e->step && s->step <= e->last_step && s->has_scale &&
            s->skipped)
            st = s;
    }
    return st;
}

// How a backward producer made its NaN/inf from finite values, as far as its detail tells.
typedef enum backward_cause {
    BWD_MAGNITUDE, // gradients too large for their dtype: the loss scale's business, or exploding
    BWD_LEFT_OUT,  // through a -inf/NaN the forward made and where()/masked_fill() left out
    BWD_SINGULAR,  // NaN and no inf from an op that gives NaN only at 0 / 0 or 0 * inf
    BWD_POLE,      // inf where a derivative has a pole at 0 (inf_at_pole)
} backward_cause;

// e's cause, its detail parsed into *r and the aten op it names into aten (empty: none).
static backward_cause backward_cause_of(const report_event *e, ranges *r, char aten[64]) {
    report_parse_ranges(e->detail, r);
    backward_aten(e->detail, aten, 64);
    // the forward made a -inf/NaN there that where()/masked_fill() left out (the PyTorch bridge)
    if (e->detail && strstr(e->detail, REPORT_DETAIL_LEFT_OUT)) return BWD_LEFT_OUT;
    if (r->nan > 0 && r->posinf + r->neginf == 0 && op_in(aten, singular_ops)) return BWD_SINGULAR;
    if (inf_at_pole(r, aten, e->op)) return BWD_POLE;
    return BWD_MAGNITUDE;
}

bool report_backward_at_any_scale(const report_event *e) {
    if (!e->phase || strcmp(e->phase, "bwd") != 0 || !is(e, AMP_EVENT_NONFINITE_PRODUCER))
        return false;
    ranges r;
    char aten[64];
    return backward_cause_of(e, &r, aten) != BWD_MAGNITUDE;
}

// A backward producer in a step whose forward stayed finite.
static void add_backward(const report_model *m, const events_index *x, const report_event *e,
                         report_findings *out) {
    ranges r;
    char aten[64];
    const backward_cause cause = backward_cause_of(e, &r, aten);
    const report_step *st = overflow_step(m, e);
    double scale = st && st->has_scale ? st->scale_before : NAN;
    bool exploding = !(scale >= LOW_SCALE); // no scaler, or a low scale: the gradients are huge
    bool left = cause == BWD_LEFT_OUT, singular = cause == BWD_SINGULAR, pole = cause == BWD_POLE;
    // the PyTorch bridge without a GradScaler saw it when the step was recorded, a step late
    bool late = e->detail && strstr(e->detail, REPORT_DETAIL_LATE);
    report_finding *f = report_finding_add(
        out, RULE, exploding || cause != BWD_MAGNITUDE ? AMP_SEVERITY_ERROR : AMP_SEVERITY_INFO);
    where(f, m, e);
    int64_t occ = site_span(m, x, e, &f->first_step, &f->last_step);
    // where: the module, or (the PyTorch bridge, traced per module) the code that reads the
    // module's output when no one module takes it as an input
    char site[sizeof f->layer + sizeof f->op + 40];
    snprintf(site, sizeof site,
             e->detail && strstr(e->detail, REPORT_DETAIL_READER)
                 ? "the code that reads %s %s's output"
                 : "%s %s",
             layer_words(f), f->op);
    const char *advice;
    if (late) {
        snprintf(f->title, sizeof f->title,
                 "%s gradients at step %lld, and no GradScaler to skip the step: the optimizer "
                 "stepped on them (traced per module: made by the backward of %s)",
                 r.posinf + r.neginf ? "inf/NaN" : "NaN", (long long)f->first_step, site);
        advice = "Run it again with `ampprobe run --check-grads` (watch(..., check_grads=True)): "
                 "the end of each step then waits for the parameter gradients and, when they "
                 "hold NaN/inf, traces the backward op by op before the optimizer steps, naming "
                 "the op and why (2-9% more step time on an H200). Meanwhile: clip the gradients "
                 "(clip_grad_norm_), and look for a sqrt, norm, log or division at 0 or a "
                 "torch.where over a log in the code between the modules named.";
    } else if (left) {
        snprintf(f->title, sizeof f->title,
                 "NaN gradient through a value the forward left out: the backward of %s at step "
                 "%lld",
                 site, (long long)f->first_step);
        advice = "torch.where (and masked_fill) leave a value out of the forward but not out of "
                 "the backward: the branch not taken still gets a zero gradient, and its own "
                 "backward turns that into NaN where its value was inf (0 * inf; log(p) at p = 0 "
                 "is -inf). Make the left-out branch finite before it is computed: "
                 "torch.where(p > 0, p, 1).log() instead of torch.where(p > 0, p.log(), 0), or a "
                 "clamp (p.clamp_min(1e-12).log()). The loss scale cannot fix this: the NaN "
                 "comes at every scale, so the GradScaler skips each such step and halves the "
                 "scale.";
    } else if (singular) {
        snprintf(f->title, sizeof f->title,
                 "NaN gradient in the backward of %s at step %lld (forward finite): %s of 0 / 0 "
                 "or 0 * inf",
                 site, (long long)f->first_step, aten);
        advice = "A derivative gave NaN from finite values: 0 * inf or 0 / 0, where a function "
                 "is not differentiable (sqrt, a norm or pow(x, a < 1) at 0, acos/asin at +-1, "
                 "a division by a value that is 0). Keep the input off that point: an eps inside "
                 "(torch.sqrt(x + eps), x.pow(2).sum(-1).add(eps).sqrt() for a norm), a clamp "
                 "(x.clamp(-1 + eps, 1 - eps) before acos). The loss scale cannot fix this: the "
                 "NaN comes at every scale.";
    } else if (pole) {
        snprintf(f->title, sizeof f->title,
                 "inf gradient in the backward of %s at step %lld (forward finite): %s", site,
                 (long long)f->first_step, pole_words(pole_op(aten, e->op)));
        advice = "A derivative is infinite there: that of sqrt at 0 (and of a norm written as "
                 "the sqrt of a sum of squares), of pow(x, a) with a < 1 at 0, of acos and asin "
                 "at +-1, of a division by a value that is 0. Keep the input off that point: an "
                 "eps inside (torch.sqrt(x + eps), x.pow(2).sum(-1).add(eps).sqrt() for a norm, "
                 "or torch.linalg.vector_norm, whose gradient at 0 is 0), a clamp "
                 "(x.clamp_min(eps); x.clamp(-1 + eps, 1 - eps) before acos: clamping to [-1, 1] "
                 "keeps the point). The loss scale cannot fix this: the inf comes at every scale, "
                 "so the GradScaler skips each such step and halves the scale.";
    } else if (exploding && isnan(scale)) {
        snprintf(f->title, sizeof f->title,
                 "exploding gradients: the backward of %s went non-finite at step %lld, with no "
                 "loss scaling",
                 site, (long long)f->first_step);
        advice = "Clip the gradients (clip_grad_norm_ before the update) and lower the "
                 "learning rate or add warm-up; check the layer's initialisation. With no "
                 "GradScaler nothing skips such a step: the update uses what it got.";
    } else if (exploding) {
        snprintf(f->title, sizeof f->title,
                 "exploding gradients: the backward of %s overflowed at step %lld at loss scale "
                 "%.9g",
                 site, (long long)f->first_step, scale);
        advice =
            "Clip the gradients (unscale_ the optimizer, then clip_grad_norm_) and lower the "
            "learning rate or add warm-up; check the layer's initialisation. The loss scale is "
            "already low, so lowering it further does not help.";
    } else {
        snprintf(f->title, sizeof f->title,
                 "gradient overflow in the backward of %s at loss scale %.9g (forward finite): "
                 "the GradScaler skipped %s and backed off",
                 site, scale, occ == 1 ? "the step" : "those steps");
        advice = "Nothing to fix while it is rare: this is how dynamic loss scaling finds its "
                 "scale. If it repeats, see the loss-scale finding (init_scale, growth_interval).";
    }
    snprintf(f->advice, sizeof f->advice, "%s", advice);
    int dl = detail_len(e);
    snprintf(f->detail, sizeof f->detail, "%.*s%s%lld occurrence%s.", dl, dl ? e->detail : "",
             dl ? ".\n" : "", (long long)occ, occ == 1 ? "" : "s");
    report_finding_evidence(f, "occurrences", (double)occ);
    report_finding_evidence(f, "loss_scale", scale);
    report_finding_evidence(f, "incoming_amax", r.in_amax);
    report_finding_evidence(f, "gradient_amax", r.out_amax);
    report_finding_evidence(f, "gradient_nan", (double)r.nan);
    report_finding_evidence(f, "gradient_posinf", (double)r.posinf);
    report_finding_evidence(f, "gradient_neginf", (double)r.neginf);
}

// The row group of a kind (activation: a forward output; weight: a parameter as its step began)
// the statistics show non-finite first in pid's steps up to upto (NaN or +inf: a mask's -inf is
// none), the earliest recorded of its step; NULL: none.
static const report_stats *first_bad(const report_model *m, int32_t pid, int64_t upto,
                                     const char *kind) {
    const report_stats *best = NULL;
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (s->pid != pid || s->bad_step > upto || strcmp(s->kind, kind) != 0) continue;
        if (!best || s->bad_step < best->bad_step ||
            (s->bad_step == best->bad_step && s->bad_row < best->bad_row))
            best = s;
    }
    return best;
}

// Parameter row w, non-finite as its step began, is stored in fp16 and the run's optimizer
// (META optimizer, optimizer.eps) has an eps that fp16 rounds to 0 (2^-25 and below) and is not
// fused (a fused Adam adds eps in fp32): its update divided by 0 where the running mean of the
// squared gradients underflowed. Says so in f's detail and advice; false when that is not it.
static bool eps_zero_in_f16(const report_model *m, const report_stats *w, report_finding *f) {
    if (strcmp(w->dtype, "f16") != 0 || !m->optimizer || !m->optimizer_eps || m->optimizer_fused)
        return false;
    char *end;
    const double eps = strtod(m->optimizer_eps, &end);
    if (end == m->optimizer_eps || !(eps >= 0) || eps > 0x1p-25) return false;
    char param[96], opt[64];
    report_cut_name(param, sizeof param, w->op);
    report_cut_name(opt, sizeof opt, m->optimizer);
    report_appendf(
        f->detail, sizeof f->detail,
        " %s is stored in fp16 (the model itself cast to fp16, no fp32 master copy), and "
        "%s's eps=%.3g is 0 in fp16 (its smallest subnormal is 5.96e-8): the running mean "
        "of the squared gradients, kept in fp16 too, underflows to 0 for small gradients "
        "(Adam's 0.001 x g^2 for |g| below about 5e-3), and the update divides by it: "
        "inf, or NaN where the gradient's mean is 0 as well.",
        param, opt, eps);
    snprintf(f->advice, sizeof f->advice,
             "Keep fp32 master weights: leave the parameters in fp32 and compute in fp16 under "
             "torch.autocast(\"cuda\", dtype=torch.float16) with a GradScaler (or in bf16), "
             "instead of model.half(). If the parameters must stay fp16, give %s an eps that "
             "fp16 holds (1e-4: its smallest normal is 6.1e-5).",
             opt);
    report_finding_evidence(f, "optimizer_eps", eps);
    return true;
}

// A loss finding with no producer event: the first output its statistics show non-finite, where
// there is one (a producer of its own records statistics without tracing ops), goes into its
// place, title and detail.
static void name_first_bad_output(const report_model *m, report_finding *f) {
    const report_stats *s = first_bad(m, f->pid, f->first_step, "activation");
    // a parameter that held NaN/inf as a step began (libampcore's weight rows), no later than
    // the first output: the update before that step (or the program) wrote it there, and the
    // outputs only carried it on
    const report_stats *w = first_bad(m, f->pid, s ? s->bad_step : f->first_step, "weight");
    if (w) {
        char param[96];
        report_cut_name(param, sizeof param, w->op);
        const long long at = (long long)w->bad_step;
        const bool finite_before = w->first_step < w->bad_step;
        report_finding_where(f, report_layer_name(m, w->pid, w->layer_id), NULL, "optim");
        report_appendf(f->title, sizeof f->title,
                       "; the weights were non-finite first: %s as step %lld began", param, at);
        report_appendf(
            f->detail, sizeof f->detail,
            " The parameter %s held NaN/inf as step %lld began%s: what wrote it there made "
            "the value, and every op that read it only carried it on.",
            param, at, finite_before ? ", its row of the step before finite" : "");
        report_finding_evidence(f, "weights_nonfinite_step", (double)w->bad_step);
        if (eps_zero_in_f16(m, w, f)) return;
        snprintf(f->advice, sizeof f->advice,
                 "Look at what wrote %s before step %lld: the %s (a division by zero in it, "
                 "such as Adam's or AdamW's eps=0 over a gradient of 0; a learning rate or weight "
                 "decay that is NaN/inf; non-finite gradients stepped on with no GradScaler to "
                 "skip them), or the program's own code that writes into it.",
                 param, at,
                 m->updates ? "update that no optimizer.step() made" : "optimizer's update");
        return;
    }
    if (!s) return;
    const char *layer = report_layer_name(m, s->pid, s->layer_id);
    report_finding_where(f, layer, s->op[0] ? s->op : NULL, "fwd");
    char what[sizeof f->layer + 80];
    snprintf(what, sizeof what, "%s%s%s", layer ? layer : "the top level", s->op[0] ? " " : "",
             s->op);
    report_appendf(f->title, sizeof f->title,
                   "; the statistics show %s's output non-finite first (step %lld)", what,
                   (long long)s->bad_step);
    report_appendf(
        f->detail, sizeof f->detail,
        " The statistics show the output of %s non-finite first, at step %lld, the outputs "
        "recorded before it in that step finite: the value was made there, or in code "
        "between it and them that no statistics cover.",
        what, (long long)s->bad_step);
    snprintf(f->advice, sizeof f->advice,
             "Look at %s at step %lld: an fp16 overflow of an unnormalised input (keep it in fp32 "
             "or train in bf16), a log, division or sqrt out of its domain (clamp it, add an "
             "eps), or NaN in what it read. To have the op named with its inputs' ranges, trace "
             "ops where a step goes non-finite and record the one whose finite inputs gave it as "
             "a nonfinite_producer event (libampcore and the PyTorch bridge do).",
             what, (long long)s->bad_step);
}

// The step record before st (its process's previous one, whatever its number) when its optimizer
// stepped with a loss scale whose fp32 reciprocal is inf (at most 2^-128, or 0: unscale_ takes
// 1/scale in fp64, then rounds it to fp32, as PyTorch's does): unscaling multiplied every
// gradient by inf; NULL otherwise. st: a record of m->steps (sorted by pid and step).
static const report_step *unscaled_by_inf(const report_model *m, const report_step *st) {
    const report_step *p = st > m->steps && st[-1].pid == st->pid ? st - 1 : NULL;
    if (!p || !p->has_scale || p->skipped || !(p->scale_before >= 0)) return NULL;
    return isinf((float)(1.0 / p->scale_before)) ? p : NULL;
}

// The non-finite losses from step record first on, when an optimizer step at a loss scale of no
// fp32 reciprocal (unscaled_by_inf) made them: a finding (the check for inf/NaN reads each
// gradient before it unscales it, so the gradients that unscaling made NaN (0 x inf) or inf went
// to the optimizer); false when it did not.
static bool add_unscaled_by_inf(const report_model *m, const report_step *first,
                                report_findings *out) {
    const report_step *p = unscaled_by_inf(m, first);
    if (!p) return false;
    int64_t n = 0, last = first->step;
    for (const report_step *st = first;
         st < m->steps + m->n_steps && st->pid == p->pid && st->loss_nonfinite; st++) {
        n++;
        last = st->step;
    }
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_ERROR);
    f->pid = p->pid;
    f->first_step = p->step;
    f->last_step = last;
    report_finding_where(f, NULL, NULL, "optim");
    snprintf(f->title, sizeof f->title,
             "the weights went non-finite at step %lld: its loss scale %.9g has no fp32 "
             "reciprocal, and unscaling made the gradients NaN/inf unseen",
             (long long)p->step, p->scale_before);
    snprintf(f->detail, sizeof f->detail,
             "At step %lld the GradScaler's scale was %.9g, at or below 2^-128 (2.94e-39), where "
             "1/scale overflows fp32 to inf: unscale_ multiplied the gradients by inf (zeros "
             "became NaN, the rest inf), and its check for inf/NaN, which reads each gradient "
             "before it unscales it (as PyTorch's does), found none. The step was not skipped: "
             "the optimizer stepped on them, and the loss is non-finite from step %lld on (%lld "
             "step%s).",
             (long long)p->step, p->scale_before, (long long)first->step, (long long)n,
             n == 1 ? "" : "s");
    snprintf(f->advice, sizeof f->advice,
             "Find what drove the scale down first (each skipped step halves it: see the findings "
             "before this one). Then keep a floor under it: after scaler.update(), if "
             "scaler.get_scale() < 1, call scaler.update(1.0) (amp_scaler_update_to(sc, 1) "
             "here); no gradient needs a scale below 1 to stay finite in fp16.");
    report_finding_evidence(f, "loss_scale", p->scale_before);
    report_finding_evidence(f, "nonfinite_losses_after", (double)n);
    return true;
}

// A finding of a non-finite loss at the first focused step of its process whose losses were
// non-finite since before the focus (--steps): it did not become non-finite there, and the
// first output its statistics show non-finite is only the first to read the NaN weights. Says
// so in f and returns true; false (f untouched) otherwise.
static bool nonfinite_before_focus(const report_model *m, report_finding *f) {
    const report_process *p = report_process_find(m, f->pid);
    if (!p || p->nonfinite_since < 0 || !p->n_steps || m->steps[p->step0].step != f->first_step)
        return false;
    snprintf(f->title, sizeof f->title,
             "the loss has been non-finite since step %lld, before the focused steps",
             (long long)p->nonfinite_since);
    report_appendf(
        f->detail, sizeof f->detail,
        " The steps before the focus (--steps) are non-finite from step %lld on: what broke "
        "the run happened there, and the steps here only carry it on (an update with "
        "non-finite gradients leaves the weights non-finite).",
        (long long)p->nonfinite_since);
    snprintf(f->advice, sizeof f->advice,
             "Look at where it began: ampprobe report --steps %lld:%lld (or the whole run, without "
             "--steps).",
             (long long)p->nonfinite_since, (long long)p->nonfinite_since);
    report_finding_evidence(f, "nonfinite_since", (double)p->nonfinite_since);
    return true;
}

static void add_loss_only(const report_model *m, const events_index *x, const report_event *e,
                          report_findings *out) {
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_ERROR);
    int64_t occ = site_span(m, x, e, &f->first_step, &f->last_step);
    report_finding_where(f, NULL, NULL, NULL);
    f->pid = e->pid;
    // the step's own loss where it was recorded (an aggregate row's value is of its first step)
    const report_step *st = report_step_find(m, e->pid, f->first_step);
    const double loss = st && st->loss_nonfinite ? st->loss : e->value;
    snprintf(f->title, sizeof f->title,
             "the loss became %s at step %lld with no op traced as the producer",
             isinf(loss) ? "inf" : "NaN", (long long)f->first_step);
    snprintf(f->detail, sizeof f->detail, "%s; %lld step%s with a non-finite loss.",
             e->detail ? e->detail : "loss_nonfinite", (long long)occ, occ == 1 ? "" : "s");
    snprintf(f->advice, sizeof f->advice,
             "Check the loss computation: compute it in fp32 from fp32 logits with a fused "
             "cross_entropy/log_softmax, guard logs and divisions with an eps; then record "
             "statistics on every step (ampprobe run --stats-every 1) to trace the producing op.");
    if (!nonfinite_before_focus(m, f)) name_first_bad_output(m, f);
    report_finding_evidence(f, "steps_affected", (double)occ);
    report_finding_evidence(f, "loss", loss);
}

// A non-finite loss in AMP_STEPS that no loss_nonfinite event came with: a producer of its own
// through the record API that records steps alone (libampcore and the PyTorch bridge send the
// event). The first such step leads.
static void add_step_loss_only(const report_model *m, report_findings *out) {
    const report_step *first = NULL;
    int64_t n = 0;
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *st = &m->steps[i];
        if (!st->loss_nonfinite) continue;
        n++;
        if (!first || st->step < first->step) first = st;
    }
    if (!first || add_unscaled_by_inf(m, first, out)) return;
    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_ERROR);
    f->first_step = f->last_step = first->step;
    report_finding_where(f, NULL, NULL, NULL);
    f->pid = first->pid;
    snprintf(f->title, sizeof f->title,
             "the loss became %s at step %lld with no op traced as the producer",
             isinf(first->loss) ? "inf" : "NaN", (long long)first->step);
    snprintf(f->detail, sizeof f->detail,
             "%lld step%s recorded a non-finite loss (AMP_STEPS), and no event names the op "
             "that made it: the program's records hold no loss_nonfinite or nonfinite_producer "
             "event.",
             (long long)n, n == 1 ? "" : "s");
    snprintf(f->advice, sizeof f->advice,
             "Check the loss computation: compute it in fp32 from fp32 logits with a fused "
             "cross_entropy/log_softmax, guard logs and divisions with an eps; then record "
             "per-layer statistics (libampcore or the PyTorch bridge under ampprobe run) to trace "
             "the producing op.");
    if (!nonfinite_before_focus(m, f)) name_first_bad_output(m, f);
    report_finding_evidence(f, "steps_affected", (double)n);
    report_finding_evidence(f, "loss", first->loss);
}

// The backward producers in steps without a loss scale (an optimizer stepped on their
// gradients, with no GradScaler to skip the step).
static void unscaled_backward(const report_model *m, report_spans *out) {
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *o = &m->events[i];
        if (is_fwd(o) || !is(o, AMP_EVENT_NONFINITE_PRODUCER)) continue;
        const report_step *st = report_step_find(m, o->pid, o->step);
        if (!st || !st->has_scale) report_spans_add(out, o->pid, o->step, o->step, i);
    }
    report_spans_sort(out);
}

// The finding just made from e, when the focus (--steps) cut e's aggregate row: its figures are
// of the row's first step, before the focus, which the title and the detail say.
static void note_figures_step(const report_event *e, report_findings *out) {
    if (e->detail_step >= e->step || !out->n) return;
    report_finding *f = &out->v[out->n - 1];
    report_appendf(f->title, sizeof f->title, " (figures of step %lld)", (long long)e->detail_step);
    report_appendf(
        f->detail, sizeof f->detail,
        " The inputs and outputs quoted are of step %lld, before the focused steps: the "
        "database keeps the occurrences after a site's first ten as one row (from step %lld "
        "on), with the figures of the first of them.",
        (long long)e->detail_step, (long long)e->detail_step);
    report_finding_evidence(f, "figures_step", (double)e->detail_step);
}

// A non-finite loss that no forward producer explains, nor a backward that went non-finite
// before it without a GradScaler to skip its step (the optimizer stepped on NaN gradients); or
// one whose steps alone say so (no event at all, no producer in any event).
static void loss_alone(const report_model *m, const events_index *x, report_findings *out) {
    report_spans unscaled = {0};
    unscaled_backward(m, &unscaled);
    bool loss_events = false, producers = false;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        producers = producers || is(e, AMP_EVENT_NONFINITE_PRODUCER);
        if (!is(e, AMP_EVENT_LOSS_NONFINITE)) continue;
        loss_events = true;
        const bool before =
            e->step > INT64_MIN && report_spans_cover(&unscaled, e->pid, INT64_MIN, e->step - 1);
        if (!before) {
            const report_step *st = report_step_find(m, e->pid, e->step);
            if (!st || !add_unscaled_by_inf(m, st, out)) add_loss_only(m, x, e, out);
            break;
        }
    }
    report_spans_free(&unscaled);
    if (!loss_events && !producers) add_step_loss_only(m, out);
}

// After the roots: the first non-finite loss of each process that no root explains and that an
// optimizer step at a loss scale of no fp32 reciprocal made (the scale that every skipped
// step of a root halved, collapsed to 2^-128 or 0, a second failure of its own).
static void poisoned_later(const report_model *m, const report_spans *explained,
                           report_findings *out) {
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *st = &m->steps[i];
        if (!st->loss_nonfinite || report_spans_cover(explained, st->pid, st->step, st->step))
            continue;
        if (!add_unscaled_by_inf(m, st, out)) continue; // (a later one may still be)
        while (i + 1 < m->n_steps && m->steps[i + 1].pid == st->pid)
            i++; // (the weights stay non-finite: the next process)
    }
}

void rule_nonfinite_run(const report_model *m, report_findings *out) {
    events_index x;
    index_build(m, &x);
    // The root of each step: its first forward producer or data input (events are in recording
    // order). One finding per distinct root site; the first step that site was the root leads.
    bool any_root = false;
    report_spans explained = {0}; // the steps whose non-finite loss a root's finding explains
    for (size_t i = 0; i < m->n_events; i++) {
        if (!x.step_root[i] || x.first[i] != i) continue;
        const int64_t until = add_forward_root(m, &x, &m->events[i], out);
        report_spans_add(&explained, m->events[i].pid, out->v[out->n - 1].first_step, until, i);
        note_figures_step(&m->events[i], out);
        any_root = true;
    }
    report_spans_sort(&explained);
    // Backward producers of steps whose forward stayed finite: one finding per site (a producer
    // without a phase whose step's loss stayed finite is judged a backward one).
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (!is(e, AMP_EVENT_NONFINITE_PRODUCER) || x.root[i] || x.first[i] != i) continue;
        if (report_spans_cover(&m->forward_breaks, e->pid, e->step, e->step) ||
            report_spans_cover(&m->loss_events, e->pid, e->step, e->step))
            continue;
        add_backward(m, &x, e, out);
        note_figures_step(e, out);
    }
    if (!any_root)
        loss_alone(m, &x, out);
    else
        poisoned_later(m, &explained, out);
    report_spans_free(&explained);
    index_free(&x);
}
