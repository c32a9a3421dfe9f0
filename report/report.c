/*
 * report.c — the report core: holds the rule registry, runs the rules on the model
 * (report_model.c, report_perf.c) and orders their findings, the helpers the rules share, and the
 * verdict and the run summary that every format prints.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// The rule registry (also the order of the --help listing)

// Among findings of equal severity and first step, the earlier rule leads: the rules that name
// a layer come before the scaler's view of the same trouble.
const report_rule report_rules[] = {
    {"nonfinite-root-cause", "the first op that produced NaN/inf, why, and the fix",
     rule_nonfinite_run},
    {"divergence", "training that diverged with its losses finite (a learning rate too high)",
     rule_divergence_run},
    {"grad-underflow",
     "gradients lost to zero/subnormal in fp16, per layer, and the scale that keeps them",
     rule_underflow_run},
    {"overflow-headroom", "ops whose fp16/bf16 outputs come within 1 bit of the dtype's max",
     rule_overflow_run},
    {"loss-scale", "GradScaler dynamics: skips, sawtooth, collapse, stuck low, kept in bf16",
     rule_scale_run},
    {"lost-updates", "optimizer updates that fp16/bf16 weights round away (no fp32 master weights)",
     rule_updates_run},
    {"precision-placement",
     "GEMMs left in fp32 under autocast or of odd sizes, ops upcast by the policy, casts",
     rule_precision_run},
    {"amp-payoff", "whether AMP can speed this model up at all (launch-bound models cannot)",
     rule_amp_payoff_run},
    {"roofline",
     "kernels and layers: compute-, memory- or launch-bound against the card's roofline",
     rule_roofline_run},
    {"gpu-idle", "GPU idle gaps between kernels and what the host did meanwhile",
     rule_gpu_idle_run},
    {"h2d-copies", "host-to-device copy share and pageable (unpinned) copies", rule_copies_run},
    {"host-sync", "host synchronisations that stall the launch queue", rule_sync_run},
    {"run-end", "how the program ended (a crash, a kill, an error exit) and an unfinished capture",
     rule_run_end_run},
    {"recorded-events", "warnings and errors a producer recorded as events of its own kinds",
     rule_events_run},
};
const size_t report_n_rules = sizeof report_rules / sizeof report_rules[0];

const report_rule *report_rule_find(const char *id) {
    for (size_t i = 0; i < report_n_rules; i++)
        if (strcmp(report_rules[i].id, id) == 0) return &report_rules[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Findings

report_finding *report_finding_add(report_findings *out, const char *rule, amp_severity severity) {
    AMP_GROW(out->v, out->n, out->cap);
    report_finding *f = &out->v[out->n++];
    memset(f, 0, sizeof *f);
    f->rule = rule;
    f->severity = severity;
    f->first_step = f->last_step = -1;
    f->processes = 1;
    return f;
}

void report_finding_evidence(report_finding *f, const char *key, double value) {
    AMP_ASSERT(f->n_evidence < REPORT_EVIDENCE_MAX, "rule %s: more than %d evidence numbers",
               f->rule, REPORT_EVIDENCE_MAX);
    f->evidence[f->n_evidence].key = key;
    f->evidence[f->n_evidence].value = value;
    f->n_evidence++;
}

bool report_finding_evidence_of(const report_finding *f, const char *key, double *value) {
    for (int i = 0; i < f->n_evidence; i++)
        if (strcmp(f->evidence[i].key, key) == 0) return *value = f->evidence[i].value, true;
    return false;
}

void report_appendf(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    amp_vappendf(buf, size, strnlen(buf, size), fmt, ap);
    va_end(ap);
}

const char *report_cut_name(char *dst, size_t n, const char *s) {
    static const char more[] = "\u2026";
    size_t len = strlen(s ? s : "");
    if (len < n) {
        memcpy(dst, s ? s : "", len + 1);
        return dst;
    }
    len = amp_utf8_cut(s, n - sizeof more);
    memcpy(dst, s, len);
    memcpy(dst + len, more, sizeof more);
    return dst;
}

const char *report_layer_words(char *dst, size_t n, const char *layer) {
    return report_cut_name(dst, n, layer && layer[0] ? layer : "the top level");
}

void report_finding_where(report_finding *f, const char *layer, const char *op, const char *phase) {
    report_cut_name(f->layer, sizeof f->layer, layer);
    report_cut_name(f->op, sizeof f->op, op);
    report_cut_name(f->phase, sizeof f->phase, phase);
}

bool report_finding_process(const report_model *m, const report_finding *f, char *buf, size_t n) {
    buf[0] = 0;
    if (m->n_procs < 2 || (f->processes <= 1 && f->pid == 0)) return false;
    if (f->processes > 1) {
        snprintf(buf, n, "in %d processes", f->processes);
        return true;
    }
    char who[128];
    report_process_phrase(m, f->pid, who, sizeof who);
    snprintf(buf, n, "in %s", who);
    return true;
}

int32_t report_lead_pid(const report_model *m, const report_findings *f) {
    if (f->n && f->v[0].severity >= AMP_SEVERITY_WARNING && f->v[0].pid) {
        const report_process *p = report_process_find(m, f->v[0].pid);
        if (p && p->n_steps) return p->pid;
    }
    return m->n_steps ? m->steps[0].pid : 0;
}

void report_findings_free(report_findings *f) {
    free(f->v);
    memset(f, 0, sizeof *f);
}

static int cmp_finding(const void *pa, const void *pb) {
    const report_finding *a = pa, *b = pb;
    if (a->severity != b->severity) return a->severity > b->severity ? -1 : 1;
    if (a->leads != b->leads) return a->leads ? -1 : 1;
    // findings tied to no step come after those that are
    uint64_t sa = (uint64_t)a->first_step, sb = (uint64_t)b->first_step;
    if (sa != sb) return sa < sb ? -1 : 1;
    return 0;
}

static const char *past_number(const char *s) {
    return s + strspn(s, "0123456789.+-");
}

bool report_same_title(const char *a, const char *b) {
    for (a = past_number(a), b = past_number(b); *a == *b; a = past_number(a), b = past_number(b)) {
        if (!*a) return true;
        a++, b++;
    }
    return false;
}

static bool same_problem(const report_finding *a, const report_finding *b) {
    return strcmp(a->rule, b->rule) == 0 && a->severity == b->severity &&
           a->first_step == b->first_step && strcmp(a->layer, b->layer) == 0 &&
           strcmp(a->op, b->op) == 0 && strcmp(a->phase, b->phase) == 0 &&
           report_same_title(a->title, b->title);
}

// Several processes that recorded one run (the ranks of a data-parallel job) show the same
// problem each: one finding, with the first process's figures and the count, not one per process.
static void merge_processes(const report_model *m, report_findings *out) {
    if (m->n_procs < 2) return;
    size_t kept = 0;
    for (size_t i = 0; i < out->n; i++) {
        report_finding *f = &out->v[i], *same = NULL;
        for (size_t j = 0; j < kept && !same; j++)
            if (same_problem(&out->v[j], f)) same = &out->v[j];
        if (!same) {
            if (kept != i) out->v[kept] = *f;
            kept++;
            continue;
        }
        same->processes++;
        if (f->last_step > same->last_step) same->last_step = f->last_step;
    }
    out->n = kept;
    for (size_t i = 0; i < out->n; i++) {
        report_finding *f = &out->v[i];
        if (f->processes > 1)
            report_appendf(f->detail, sizeof f->detail,
                           "%sThe same in %d processes; the figures are the first one's.",
                           f->detail[0] ? "\n" : "", f->processes);
    }
}

// A finding's sentence as UTF-8 whatever a rule's snprintf cut (a name or a message cut at a
// byte count, a sentence cut at the buffer's end): each byte that starts no character becomes '?'.
static void utf8_repair(char *s) {
    for (size_t n; *s; s += n)
        if (!(n = amp_utf8_seq(s, SIZE_MAX))) *s = '?', n = 1;
}

void report_run(const report_model *m, const report_rule *only, report_findings *out) {
    out->only = only ? only->id : NULL;
    for (size_t i = 0; i < report_n_rules; i++)
        if (!only || only == &report_rules[i]) report_rules[i].run(m, out);
    for (size_t i = 0; i < out->n; i++) {
        utf8_repair(out->v[i].title);
        utf8_repair(out->v[i].detail);
        utf8_repair(out->v[i].advice);
    }
    merge_processes(m, out);
    // qsort is not stable: keep the rules' own order among equals through a stable pass
    for (size_t i = 1; i < out->n; i++) {
        report_finding tmp = out->v[i];
        size_t j = i;
        for (; j > 0 && cmp_finding(&out->v[j - 1], &tmp) > 0; j--)
            out->v[j] = out->v[j - 1];
        out->v[j] = tmp;
    }
    // advice given in full once (host-sync's and gpu-idle's, when the gaps are the syncs)
    for (size_t i = 1; i < out->n; i++)
        for (size_t j = 0; j < i; j++)
            if (out->v[i].advice[0] && strcmp(out->v[j].advice, out->v[i].advice) == 0 &&
                strcmp(out->v[j].rule, out->v[i].rule) != 0) {
                snprintf(out->v[i].advice, sizeof out->v[i].advice, "The same as for %s, above.",
                         out->v[j].rule);
                break;
            }
}

// ---------------------------------------------------------------------------------------------
// Helpers the rules share

static const char *const gemm_ops[] = {REPORT_GEMM_OPS, NULL};
static const char *const cast_ops[] = {REPORT_CAST_OPS, NULL};

static bool in_list(const char *op, const char *const *list) {
    for (; op && *list; list++)
        if (strcmp(op, *list) == 0) return true;
    return false;
}

bool report_op_is_gemm(const char *op) {
    return in_list(op, gemm_ops);
}

// The dimensions of up to `max` tensors in shapes ("(2, 3),(4,)"), each up to 8 of them: how
// many tensors were read; -1 when shapes is not of that form.
#define SHAPE_DIMS 8
static int read_shapes(const char *s, int64_t dims[][SHAPE_DIMS], int *ndim, int max) {
    int n = 0;
    while (*s) {
        if (*s == ',' || *s == ' ') {
            s++;
            continue;
        }
        if (*s != '(' || n == max) return -1;
        s++;
        ndim[n] = 0;
        while (*s && *s != ')') {
            char *end;
            long long v = strtoll(s, &end, 10);
            if (end == s || v < 0 || ndim[n] == SHAPE_DIMS) return -1;
            dims[n][ndim[n]++] = v;
            s = end;
            while (*s == ',' || *s == ' ')
                s++;
        }
        if (*s != ')') return -1;
        s++;
        n++;
    }
    return n;
}

bool report_gemm_kn(const char *op, const char *shapes, int64_t *k, int64_t *n) {
    int64_t d[4][SHAPE_DIMS];
    int nd[4];
    const int count = shapes ? read_shapes(shapes, d, nd, 4) : -1;
    int a, b; // the operands' places
    if (strcmp(op, "linear") == 0) {
        if (count < 2 || nd[0] < 1 || nd[1] != 2) return false;
        *k = d[0][nd[0] - 1];
        *n = d[1][0];
        return true;
    }
    if (strcmp(op, "matmul") == 0 || strcmp(op, "mm") == 0 || strcmp(op, "bmm") == 0)
        a = 0, b = 1;
    else if (strcmp(op, "addmm") == 0 || strcmp(op, "baddbmm") == 0 || strcmp(op, "addbmm") == 0)
        a = 1, b = 2;
    else
        return false;
    if (count <= b || nd[a] < 2 || nd[b] < 2) return false;
    *k = d[a][nd[a] - 1];
    *n = d[b][nd[b] - 1];
    return true;
}
bool report_op_is_cast(const char *op) {
    return in_list(op, cast_ops);
}

// Matrix-multiply, convolution and fused-attention kernels by their names' marks (cuBLAS's
// nvjet/sm90_xmma/gemm kernels, CUTLASS, cuDNN's convolutions, flash attention), not a bare "mma",
// which names like GammaBetaBackward hold too, nor the "conv" of a dtype conversion
// (libampcore's convert_kernel).
bool report_kernel_is_gemm(const char *name) {
    static const char *const marks[] = {"gemm",  "nvjet", "xmma", "cutlass", "matmul",
                                        "wgmma", "hmma",  "wmma", "cublas",  "flash"};
    for (size_t i = 0; name && i < sizeof marks / sizeof marks[0]; i++)
        if (strstr(name, marks[i])) return true;
    for (const char *c = name; c && (c = strstr(c, "conv")); c += 4)
        if (strncmp(c + 4, "er", 2) != 0)
            return true; // convolution, conv2d; not convert, conversion
    return false;
}

bool report_kernel_is_comm(const char *name) {
    return name && strncmp(name, "nccl", 4) == 0;
}

const char *report_kernel_class_guess(const char *name, double mean_ns) {
    return report_kernel_is_comm(name)        ? "comm"
           : mean_ns < REPORT_LAUNCH_BOUND_NS ? "launch"
           : report_kernel_is_gemm(name)      ? "compute"
                                              : "memory";
}

// A non-finite loss in e's steps of its process: a step record's, or a loss_nonfinite event's.
static bool loss_broken_at(const report_model *m, const report_event *e) {
    const report_process *p = report_process_find(m, e->pid);
    const report_step *s = p ? m->steps + p->step0 : NULL;
    size_t lo = 0, hi = p ? p->n_steps : 0; // its steps are sorted: the first one >= e->step
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (s[mid].step < e->step)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; p && i < p->n_steps && s[i].step <= e->last_step; i++)
        if (s[i].loss_nonfinite) return true;
    return report_spans_cover(&m->loss_events, e->pid, e->step, e->last_step);
}

bool report_event_breaks_forward(const report_model *m, const report_event *e) {
    if (strcmp(e->kind, AMP_EVENT_NONFINITE_PRODUCER) == 0)
        return e->phase ? strcmp(e->phase, "fwd") == 0 : loss_broken_at(m, e);
    return strcmp(e->kind, "nonfinite_input") == 0 || strcmp(e->kind, "nonfinite_module") == 0;
}

static int cmp_or_empty(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "");
}

int report_event_cmp_place(const report_event *a, const report_event *b, bool with_phase) {
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->layer_id != b->layer_id) return a->layer_id < b->layer_id ? -1 : 1;
    int c = strcmp(a->kind, b->kind);
    if (!c) c = cmp_or_empty(a->op, b->op);
    if (!c && with_phase) c = cmp_or_empty(a->phase, b->phase);
    return c;
}

void report_spans_add(report_spans *s, int32_t pid, int64_t step, int64_t last_step, size_t event) {
    AMP_GROW(s->v, s->n, s->cap);
    s->v[s->n++] = (report_span){.pid = pid, .step = step, .last_step = last_step, .event = event};
}

static int cmp_span(const void *pa, const void *pb) {
    const report_span *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    return a->event < b->event ? -1 : a->event > b->event;
}

void report_spans_sort(report_spans *s) {
    amp_sort(s->v, s->n, sizeof *s->v, cmp_span);
    for (size_t i = 0; i < s->n; i++) {
        report_span *v = &s->v[i];
        const bool same = i > 0 && v[-1].pid == v->pid;
        v->reach = same && v[-1].reach > v->last_step ? v[-1].reach : v->last_step;
    }
}

// The number of spans before (pid, step), or up to it too when inclusive.
static size_t spans_bound(const report_spans *s, int32_t pid, int64_t step, bool inclusive) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const report_span *v = &s->v[mid];
        const bool before =
            v->pid < pid || (v->pid == pid && (v->step < step || (inclusive && v->step == step)));
        if (before)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool report_spans_cover(const report_spans *s, int32_t pid, int64_t first, int64_t last) {
    const size_t n = spans_bound(s, pid, last, true); // pid's last span starting by last
    return n > 0 && s->v[n - 1].pid == pid && s->v[n - 1].reach >= first;
}

int64_t report_spans_next(const report_spans *s, int32_t pid, int64_t step) {
    const size_t i = spans_bound(s, pid, step, true);
    return i < s->n && s->v[i].pid == pid ? s->v[i].step : INT64_MAX;
}

void report_spans_free(report_spans *s) {
    free(s->v);
    *s = (report_spans){0};
}

bool report_focused(const report_model *m) {
    return m->step_lo > INT64_MIN || m->step_hi < INT64_MAX;
}

// Whether the run recorded steps that the focus (--steps) leaves out (when none is in it).
static bool steps_outside_focus(const report_model *m) {
    return report_focused(m) && m->end.last_step >= 0;
}

const char *report_no_steps_phrase(const report_model *m) {
    return steps_outside_focus(m) ? "none in the focused steps (--steps)" : "none recorded";
}

size_t report_ops_of(const report_model *m, int32_t pid, size_t *end) {
    size_t lo = 0, hi = m->n_ops;
    while (lo < hi) { // the first op of pid or after it
        const size_t mid = lo + (hi - lo) / 2;
        if (m->ops[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (*end = lo; *end < m->n_ops && m->ops[*end].pid == pid;)
        ++*end;
    return lo;
}

bool report_pid_autocast(const report_model *m, int32_t pid) {
    size_t end;
    for (size_t i = report_ops_of(m, pid, &end); i < end; i++)
        if (m->ops[i].policy[0]) return true;
    return false;
}

const char *report_scaler_device(const report_model *m) {
    return m->device && strcmp(m->device, "cpu") == 0 ? "cpu" : "cuda";
}

bool report_no_autocast(const report_model *m) {
    return m->compute_dtype != NULL;
}

const char *report_fp32_how(const report_model *m) {
    return report_no_autocast(m)
               ? "no autocast here: the fp16 is the parameters' (model.half(), FSDP's "
                 "MixedPrecision), so .float() inputs and that module's parameters in fp32: "
                 "module.float(), or under FSDP1 its class in MixedPrecision's "
                 "_module_classes_to_ignore, under FSDP2 a fully_shard of its own without "
                 "param_dtype"
               : "autocast disabled around it: torch.autocast(..., enabled=False) with .float() "
                 "inputs; amp_autocast_begin(ctx, false, ...) here";
}

static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b;
}

double report_median_step_ns(const report_model *m) {
    return report_steps_median_ns(m->steps, m->n_steps);
}

double report_steps_median_ns(const report_step *s, size_t n_steps) {
    double *d = amp_xmalloc((n_steps + 1) * sizeof *d);
    size_t n = 0;
    for (size_t i = 0; i < n_steps; i++)
        if (s[i].start_ns >= 0 && s[i].end_ns >= s[i].start_ns)
            d[n++] = (double)(s[i].end_ns - s[i].start_ns);
    double median = report_median(d, n);
    free(d);
    return median;
}

double report_median(double *v, size_t n) {
    if (!n) return NAN;
    amp_sort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int64_t report_stats_every(const report_model *m) {
    const long long n = m->stats_every ? atoll(m->stats_every) : 1;
    return n > 1 ? n : 1;
}

double report_scale_for_amax(double u) {
    if (!(u > 0) || !isfinite(u)) return NAN;
    double k = floor(log2(REPORT_SCALE_TARGET / u));
    if (k < 0) k = 0;
    if (k > 24) k = 24;
    return ldexp(1.0, (int)k);
}

double report_unscaled_grad_amax(const report_model *m, int32_t pid) {
    const report_process *p = report_process_find(m, pid);
    // in a run with 16-bit gradients, those and the weight gradients (what a scale overflows);
    // in one without (fp32), all of them (what would be f16 under autocast)
    bool has16 = false;
    for (size_t i = p ? p->step0 : 0; p && i < p->step0 + p->n_steps && !has16; i++)
        has16 = m->steps[i].grad_amax_16 > 0;
    double best = NAN;
    for (size_t i = p ? p->step0 : 0; p && i < p->step0 + p->n_steps; i++) {
        const report_step *s = &m->steps[i];
        const double scale = s->has_scale ? s->scale_before : 1.0; // no GradScaler: unscaled
        const double amax = has16 ? fmax(s->grad_amax_16, s->grad_amax_weight) : s->grad_amax;
        if (s->skipped || !(amax > 0) || !(scale > 0)) continue;
        const double u = amax / scale;
        if (isnan(best) || u > best) best = u;
    }
    return best;
}

// ---------------------------------------------------------------------------------------------
// Summary and verdict

const char *report_final_loss_words(const report_summary *s, char buf[32]) {
    if (s->loss_recorded)
        snprintf(buf, 32, "%.6g", s->final_loss);
    else
        snprintf(buf, 32, "not recorded");
    return buf;
}

void report_summarize(const report_model *m, report_summary *s) {
    *s = (report_summary){.first_step = -1,
                          .last_step = -1,
                          .final_loss = NAN,
                          .scale_min = NAN,
                          .scale_max = NAN,
                          .peak_mem = NAN};
    int64_t loss_step = INT64_MIN; // the last step that recorded a loss
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *st = &m->steps[i];
        s->steps++;
        s->processes += i == 0 || st->pid != m->steps[i - 1].pid; // ordered by pid, step
        if (s->first_step < 0 || st->step < s->first_step) s->first_step = st->step;
        if (st->step >= s->last_step) s->last_step = st->step;
        if (st->has_loss && st->step >= loss_step) {
            loss_step = st->step;
            s->final_loss = st->loss;
            s->loss_recorded = true;
        }
        s->skipped += st->skipped;
        s->nonfinite_losses += st->loss_nonfinite;
        if (st->mem_peak > 0 && (isnan(s->peak_mem) || st->mem_peak > s->peak_mem))
            s->peak_mem = (double)st->mem_peak;
        double sc[2] = {st->scale_before, st->scale_after};
        for (int k = 0; k < 2; k++) {
            if (!st->has_scale || isnan(sc[k])) continue;
            if (isnan(s->scale_min) || sc[k] < s->scale_min) s->scale_min = sc[k];
            if (isnan(s->scale_max) || sc[k] > s->scale_max) s->scale_max = sc[k];
        }
    }
}

void report_steps_phrase(const report_summary *s, bool noun, char *buf, size_t n) {
    const char *unit = s->steps == 1 ? " step" : " steps";
    snprintf(buf, n, "%lld%s", (long long)s->steps, noun ? unit : "");
    if (s->processes > 1) report_appendf(buf, n, " of %d processes", s->processes);
}

// One Run-section line of report_coverage_lines.
static report_coverage coverage(const char *label, const char *text, const char *note) {
    return (report_coverage){.label = label, .text = text, .note = note};
}

int report_coverage_lines(const report_model *m, report_coverage out[REPORT_COVERAGE_MAX]) {
    int n = 0;
    if (m->compiled)
        out[n++] = coverage(
            "compiled",
            strcmp(m->compiled, "model") == 0
                ? "the model as a whole (torch.compile): the outputs of the modules inside it "
                  "are not recorded, its own output and the gradients are"
                : "parts of the model (torch.compile): the modules inside them are not "
                  "recorded, the parts' outputs and the rest of the model are",
            "");
    if (m->added_models)
        out[n++] = coverage("also watched", m->added_models, " (trained beside the model)");
    if (m->unwatched)
        out[n++] = coverage("not watched", m->unwatched,
                            " (trained outside the watched model: not recorded)");
    const int64_t every = report_stats_every(m);
    if (every > 1) {
        report_coverage *c = &out[n++];
        *c = coverage("statistics", c->own,
                      " (--stats-every: the per-layer figures are of those steps; every step's "
                      "loss and scale are recorded, and a step that broke is traced all the same)");
        snprintf(c->own, sizeof c->own, "every %lld steps", (long long)every);
    }
    if (m->updates)
        out[n++] = coverage(
            "updates", m->updates,
            " (no optimizer.step() seen: a step ends as the next forward finds the parameters "
            "changed, after its update, so a broken step is named per module, not run again op "
            "by op)");
    return n;
}

static bool verdict_of_focus(const report_model *m, const report_findings *f, char *buf, size_t n);

// report_went_past_error of a run summarised as s.
static bool went_past_error(const report_summary *s, const report_findings *f) {
    size_t errors = 0;
    for (size_t i = 0; i < f->n; i++)
        errors += f->v[i].severity == AMP_SEVERITY_ERROR;
    if (errors != 1 || f->v[0].severity != AMP_SEVERITY_ERROR) return false;
    double after;
    return report_finding_evidence_of(&f->v[0], "nonfinite_losses_after", &after) && after == 0 &&
           f->v[0].last_step < s->last_step && isfinite(s->final_loss);
}

bool report_went_past_error(const report_model *m, const report_findings *f) {
    report_summary s;
    report_summarize(m, &s);
    return went_past_error(&s, f);
}

void report_verdict(const report_model *m, const report_findings *f, char *buf, size_t n) {
    const bool said_only = verdict_of_focus(m, f, buf, n);
    if (m->end.first_error_before >= 0)
        report_appendf(buf, n,
                       " The run had an error before the focused steps (--steps): its first is at "
                       "step %lld.",
                       (long long)m->end.first_error_before);
    if (f->only && !said_only)
        report_appendf(buf, n,
                       " Only rule %s ran (--rule): the findings it names of other rules are not "
                       "shown; the report without --rule runs them all.",
                       f->only);
}

// An fp32 run (no process ran an op under autocast) with overflow-headroom's notes of what fp16
// would overflow.
static bool fp32_overflow_notes(const report_model *m, const report_findings *f) {
    bool notes = false;
    for (size_t i = 0; i < f->n && !notes; i++)
        notes = strcmp(f->v[i].rule, "overflow-headroom") == 0;
    for (size_t i = 0; i < m->n_procs && notes; i++)
        notes = !report_pid_autocast(m, m->procs[i].pid);
    return notes;
}

// The verdict on a focus without an error or a warning: healthy, as far as what was recorded
// shows, or why nothing was recorded.
static void verdict_without_problems(const report_model *m, const report_findings *f,
                                     const report_summary *s, char *buf, size_t n) {
    // how the program ended where no step was recorded: "exited (status 1)", "was stopped by
    // SIGTERM (status 143)"
    char ended[96], sig_name[32];
    const int sig = report_end_signal(&m->end);
    const char *by = report_signal_stops(sig) ? "was stopped by" : "was ended by";
    if (sig > 0)
        snprintf(ended, sizeof ended, "%s %s (status %d)", by,
                 report_signal_name(sig, sig_name, sizeof sig_name), m->end.exit_status);
    else
        snprintf(ended, sizeof ended, "exited (status %d)", m->end.exit_status);
    if (s->steps == 0 && steps_outside_focus(m))
        snprintf(buf, n,
                 "No step of %s falls in the focused steps (--steps): its steps run to "
                 "%lld.",
                 m->path, (long long)m->end.last_step);
    else if (s->steps == 0 && m->trace && !strstr(m->trace, "amp"))
        snprintf(buf, n,
                 "No training step was recorded in %s: the run traced %s (--trace), not "
                 "amp, which records the steps and numerics.",
                 m->path, m->trace);
    else if (s->steps == 0 && m->end.exit_status >= 0 && m->torch)
        snprintf(buf, n,
                 "No training step was recorded in %s: the program ran under ampprobe run "
                 "--torch and %s without training a model the bridge could see: it never "
                 "imported torch, or no module with trainable parameters ran forward in "
                 "training mode with gradients on (a script that only evaluates, or one that "
                 "ended first).",
                 m->path, ended);
    else if (s->steps == 0 && m->end.exit_status >= 0) // the launcher saw it end
        snprintf(buf, n,
                 "No training step was recorded in %s: the program ran under ampprobe run "
                 "and %s without recording one. A libampcore program records its steps "
                 "itself (amp_ctx_step_end); a PyTorch one needs ampprobe run --torch or "
                 "ampprobe.torch.watch(model); otherwise it ended before its first step.",
                 m->path, ended);
    else if (s->steps == 0)
        snprintf(buf, n,
                 "No training step was recorded in %s, so there is nothing to "
                 "diagnose yet: did the program run with the launcher (ampprobe run) "
                 "and reach its first step?",
                 m->path);
    else {
        char steps[64], until[96] = "";
        report_steps_phrase(s, true, steps, sizeof steps);
        if (m->end.capture == AMP_RUN_RECORDING)
            snprintf(until, sizeof until, " so far (the run is still going)");
        else if (sig > 0) // (a stop, run-end's note, or an end a focus left out)
            snprintf(until, sizeof until, " until the program %s %s", by, sig_name);
        bool act = false, grad = false; // what the statistics cover
        for (size_t i = 0; i < m->n_stats; i++) {
            act |= strcmp(m->stats[i].kind, "activation") == 0;
            grad |= strstr(m->stats[i].kind, "grad") != NULL;
        }
        if (!act || !grad) { // (a producer of its own that records steps, or some stats)
            snprintf(buf, n,
                     "Healthy as far as the records go%s: no error or warning in %s%s, the "
                     "loss finite. %s, so %s checked: record tensor statistics "
                     "(amp_record_tensor_stats; libampcore and the PyTorch bridge do).%s",
                     until, steps,
                     s->skipped ? " (the GradScaler skipped a few, which is how it finds its "
                                  "scale)"
                                : "",
                     act          ? "No op came near the autocast dtype's range; no gradient "
                                    "statistics were recorded"
                     : grad       ? "No layer lost a worrying share of its gradients to "
                                    "underflow; no activation statistics were recorded"
                     : m->n_stats ? "No activation or gradient statistics were recorded"
                     : m->step_lo != INT64_MIN || m->step_hi != INT64_MAX
                         ? "No tensor statistics were recorded in the focused steps"
                         : "No tensor statistics were recorded",
                     act    ? "gradient underflow was not"
                     : grad ? "the forward's headroom to the autocast dtype's range was not"
                            : "neither the forward's headroom to the autocast dtype's range "
                              "nor gradient underflow was",
                     f->n ? " The notes below are for information." : "");
            return;
        }
        snprintf(buf, n,
                 "Healthy%s: no error or warning in %s%s. The forward pass stayed "
                 "finite, %s and no layer lost a worrying share of its gradients to "
                 "underflow.%s",
                 until, steps,
                 s->skipped ? " (the GradScaler skipped a few, which is how it finds its scale)"
                            : "",
                 fp32_overflow_notes(m, f)
                     ? "the run is fp32, with no autocast dtype to come near (the notes "
                       "below say which outputs fp16 would overflow)"
                 : !m->compiled ? "no op came near the autocast dtype's range"
                 : strcmp(m->compiled, "model") == 0
                     ? "neither the model's output nor a gradient came near the autocast "
                       "dtype's range (it ran compiled: the outputs inside it are not "
                       "recorded)"
                     : "no recorded output came near the autocast dtype's range (the "
                       "modules inside its compiled parts are not recorded)",
                 f->n ? " The notes below are for information." : "");
    }
}

// The verdict on a focus with errors or warnings: the top finding, its fix, how many more.
static void verdict_of_problems(const report_model *m, const report_findings *f,
                                const report_summary *s, size_t errors, size_t warnings, char *buf,
                                size_t n) {
    const report_finding *top = &f->v[0]; // sorted: the most severe, earliest
    const char *what = s->steps == 0 && steps_outside_focus(m)
                           ? "No step in the focused steps (--steps)"
                       : s->steps == 0         ? "No training step was recorded"
                       : went_past_error(s, f) ? "Training went on past an error"
                       : errors                ? "Training broke"
                                               : "Training ran, with problems";
    // in a run of several processes, which one (a rank each that shows it: the finding says so)
    char where[160] = "";
    if (top->processes == 1 && top->pid && m->n_procs > 1) {
        char who[128];
        report_process_phrase(m, top->pid, who, sizeof who);
        snprintf(where, sizeof where, " in %s, 1 of %zu processes", who, m->n_procs);
    }
    snprintf(buf, n, "%s%s: %s", what, s->steps ? where : "", top->title);
    // the advice's first sentence is the fix
    const char *end = strstr(top->advice, ". ");
    const int len = end ? (int)(end - top->advice) + 1 : (int)strlen(top->advice);
    report_appendf(buf, n, ". Fix: %.*s", len, top->advice);
    // the other errors and warnings: "(1 more error and 2 warnings below.)"
    const size_t more_errors = errors - (top->severity == AMP_SEVERITY_ERROR);
    const size_t more_warnings = warnings - (top->severity == AMP_SEVERITY_WARNING);
    char es[48] = "", ws[48] = "";
    if (more_errors)
        snprintf(es, sizeof es, "%zu more error%s", more_errors, more_errors == 1 ? "" : "s");
    if (more_warnings)
        snprintf(ws, sizeof ws, "%zu %swarning%s", more_warnings, errors ? "" : "more ",
                 more_warnings == 1 ? "" : "s");
    if (*es || *ws) report_appendf(buf, n, " (%s%s%s below.)", es, *es && *ws ? " and " : "", ws);
}

// The verdict on the focused steps alone; true when it said that only the --rule rule ran.
static bool verdict_of_focus(const report_model *m, const report_findings *f, char *buf, size_t n) {
    size_t errors = 0, warnings = 0;
    for (size_t i = 0; i < f->n; i++) {
        errors += f->v[i].severity == AMP_SEVERITY_ERROR;
        warnings += f->v[i].severity == AMP_SEVERITY_WARNING;
    }
    report_summary s;
    report_summarize(m, &s);
    if (errors + warnings == 0 && f->only && s.steps) { // one rule: no verdict on the rest
        char steps[64];
        report_steps_phrase(&s, true, steps, sizeof steps);
        snprintf(buf, n,
                 "No error or warning from rule %s in %s%s. Only that rule ran: the report "
                 "without --rule runs them all.",
                 f->only, steps, f->n ? " (notes below)" : "");
        return true;
    }
    if (errors + warnings == 0)
        verdict_without_problems(m, f, &s, buf, n);
    else
        verdict_of_problems(m, f, &s, errors, warnings, buf, n);
    return false;
}
