/*
 * rule_events.c — rule `recorded-events`: the warnings and errors a producer recorded as events
 * that no other rule reads. The record API (amp-record.h) stores any lower_snake_case kind as
 * given, so that a framework outside libampcore can say what it saw ("my_nan_guard",
 * "data_skipped"); and of the kinds it names, the other rules read the non-finite ones (a
 * producer, data arriving broken, a module's output, a non-finite loss, a skipped step) but judge
 * overflow, underflow and the loss scale from the statistics and scale records, not from events.
 * Without this rule a warning or an error of any other kind would never reach the report. One
 * finding per (process, kind, layer, op): its severity as recorded, its steps and occurrences,
 * the counts the events gave, the first detail.
 */
#include "report.h"

#include "amp-impl.h"

#include <stdlib.h>
#include <string.h>

#define RULE "recorded-events"

// The kinds the other rules read (rule_nonfinite).
static bool read_elsewhere(const char *kind) {
    static const char *const read[] = {
        AMP_EVENT_NONFINITE_PRODUCER, AMP_EVENT_STEP_SKIPPED,
        AMP_EVENT_LOSS_NONFINITE,     "nonfinite_input",
        "nonfinite_module",           "overflow_absorbed", // (overflow-headroom)
        "step_outside_scaler",                             // (loss-scale)
    };
    for (size_t i = 0; i < sizeof read / sizeof *read; i++)
        if (strcmp(kind, read[i]) == 0) return true;
    return false;
}

// For a kind of amp-record.h's vocabulary that no rule reads as an event: the records the rules
// judge its subject from. NULL for a kind of the program's own.
static const char *judged_from(const char *kind) {
    if (!strcmp(kind, AMP_EVENT_OVERFLOW) || !strcmp(kind, AMP_EVENT_UNDERFLOW))
        return "overflow-headroom and grad-underflow judge from the tensor statistics "
               "(amp_record_tensor_stats: amax, n_overflow, n_underflow)";
    if (!strcmp(kind, AMP_EVENT_SCALE_BACKOFF) || !strcmp(kind, AMP_EVENT_SCALE_GROWTH) ||
        !strcmp(kind, "grad_overflow"))
        return "loss-scale judges from the scale records (amp_record_scale)";
    if (!strcmp(kind, AMP_EVENT_NONFINITE_PROPAGATED))
        return "nonfinite-root-cause starts from the op that made the value "
               "(a nonfinite_producer event)";
    return NULL;
}

static amp_severity severity_of(const char *s) {
    return !s                          ? AMP_SEVERITY_INFO
           : strcmp(s, "error") == 0   ? AMP_SEVERITY_ERROR
           : strcmp(s, "warning") == 0 ? AMP_SEVERITY_WARNING
                                       : AMP_SEVERITY_INFO;
}

static bool same_place(const report_event *a, const report_event *b) {
    return report_event_cmp_place(a, b, false) == 0;
}

// By place, then in recording order (the events are one array).
static int cmp_place(const void *pa, const void *pb) {
    const report_event *a = *(const report_event *const *)pa, *b = *(const report_event *const *)pb;
    const int c = report_event_cmp_place(a, b, false);
    return c ? c : (a > b) - (a < b);
}

// The events of one place: v[0..n), the first recorded first.
typedef struct place {
    const report_event *const *v;
    size_t n;
} place;

static int cmp_place_first(const void *pa, const void *pb) {
    const report_event *a = ((const place *)pa)->v[0], *b = ((const place *)pb)->v[0];
    return (a > b) - (a < b);
}

// libampcore and the PyTorch bridge recorded an fp32 op's f16-range overflow as a warning until
// 2026-12-03, a note since: a note in their databases too.
static bool f32_range_note(const report_event *e) {
    return strcmp(e->kind, AMP_EVENT_OVERFLOW) == 0 && e->detail &&
           strncmp(e->detail, "f32 values beyond the f16 range", 31) == 0;
}

void rule_events_run(const report_model *m, report_findings *out) {
    // the program's own warnings and errors, grouped by place (sorted, each place is one run)
    const report_event **v = amp_xmalloc((m->n_events + 1) * sizeof *v);
    size_t n = 0, n_places = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (!read_elsewhere(e->kind) && severity_of(e->severity) >= AMP_SEVERITY_WARNING &&
            !f32_range_note(e))
            v[n++] = e;
    }
    amp_sort(v, n, sizeof *v, cmp_place);
    place *places = amp_xmalloc((n + 1) * sizeof *places);
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || !same_place(v[k - 1], v[k])) places[n_places++] = (place){.v = &v[k]};
        places[n_places - 1].n++;
    }
    // a finding per place, in the order of their first events
    amp_sort(places, n_places, sizeof *places, cmp_place_first);
    for (size_t p = 0; p < n_places; p++) {
        const report_event *e = places[p].v[0];
        int64_t occurrences = 0, first = e->step, last = e->last_step, count = 0, counted = 0;
        amp_severity worst = AMP_SEVERITY_WARNING;
        for (size_t j = 0; j < places[p].n; j++) {
            const report_event *o = places[p].v[j];
            const amp_severity s = severity_of(o->severity);
            occurrences += o->occurrences;
            if (o->count >= 0) amp_add_sat(&count, o->count), counted += o->occurrences;
            if (o->step < first) first = o->step;
            if (o->last_step > last) last = o->last_step;
            if (s > worst) worst = s;
        }
        const char *layer = report_layer_name(m, e->pid, e->layer_id);
        report_finding *f = report_finding_add(out, RULE, worst);
        report_finding_where(f, layer, e->op, e->phase);
        f->pid = e->pid;
        f->first_step = first;
        f->last_step = last;
        const char *op = e->op && e->op[0] ? e->op : NULL;
        char kind_s[101], layer_s[101], op_s[61]; // (cut with a "…" that shows it)
        report_cut_name(kind_s, sizeof kind_s, e->kind);
        report_cut_name(layer_s, sizeof layer_s, layer);
        report_cut_name(op_s, sizeof op_s, op);
        snprintf(f->title, sizeof f->title, "%s recorded by the program%s%s%s%s", kind_s,
                 layer || op ? " in " : "", layer_s, layer && op ? " " : "", op_s);
        const char *judged = judged_from(e->kind);
        snprintf(f->detail, sizeof f->detail,
                 "%lld occurrence%s of an event of %s kind %s (severity %s)%s%.700s.",
                 (long long)occurrences, occurrences == 1 ? "" : "s",
                 judged ? "the record API's" : "the program's own", kind_s,
                 worst == AMP_SEVERITY_ERROR ? "error" : "warning",
                 e->detail && e->detail[0] ? ": " : "", e->detail ? e->detail : "");
        if (counted)
            report_appendf(f->detail, sizeof f->detail, " %lld elements affected%s.",
                           (long long)count,
                           counted < occurrences ? " in the occurrences that gave a count" : "");
        if (judged)
            snprintf(f->advice, sizeof f->advice,
                     "The program (or the framework recording it) reported this itself. The "
                     "report's own rules do not read %s events: %s; record those for them to "
                     "weigh in.",
                     e->kind, judged);
        else
            snprintf(f->advice, sizeof f->advice,
                     "The program (or the framework recording it) reported this itself: see what "
                     "its kind means there. ampprobe's own rules do not read kinds outside its "
                     "vocabulary (probe/SCHEMA.md, AMP_EVENTS).");
        report_finding_evidence(f, "occurrences", (double)occurrences);
        if (counted) report_finding_evidence(f, "count", (double)count);
    }
    free(places);
    free(v);
}
