/*
 * rule_events.c — rule `recorded-events`: the warnings and errors a producer recorded as events
 * of its own kinds. The record API (amp-record.h) stores any lower_snake_case kind as given, so
 * that a framework outside libampcore can say what it saw ("my_nan_guard", "data_skipped"); the
 * other rules read only the vocabulary libampcore and the PyTorch bridge write, so without this
 * one such an event, error or not, would never reach the report. One finding per (process, kind,
 * layer, op): its severity as recorded, its steps and occurrences, the first detail.
 */
#include "report.h"

#include <string.h>

#define RULE "recorded-events"

// The kinds libampcore and the PyTorch bridge record, which the other rules read (or count).
static bool known_kind(const char *kind) {
    static const char *const known[] = {
        AMP_EVENT_NONFINITE_PRODUCER,
        AMP_EVENT_NONFINITE_PROPAGATED,
        AMP_EVENT_OVERFLOW,
        AMP_EVENT_UNDERFLOW,
        AMP_EVENT_SCALE_BACKOFF,
        AMP_EVENT_SCALE_GROWTH,
        AMP_EVENT_STEP_SKIPPED,
        AMP_EVENT_LOSS_NONFINITE,
        "nonfinite_input",
        "nonfinite_module",
        "grad_overflow",
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strcmp(kind, known[i]) == 0) return true;
    return false;
}

static amp_severity severity_of(const char *s) {
    return !s                          ? AMP_SEVERITY_INFO
           : strcmp(s, "error") == 0   ? AMP_SEVERITY_ERROR
           : strcmp(s, "warning") == 0 ? AMP_SEVERITY_WARNING
                                       : AMP_SEVERITY_INFO;
}

static bool same_place(const report_event *a, const report_event *b) {
    return a->pid == b->pid && a->layer_id == b->layer_id && strcmp(a->kind, b->kind) == 0 &&
           strcmp(a->op ? a->op : "", b->op ? b->op : "") == 0;
}

void rule_events_run(const report_model *m, report_findings *out) {
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        const amp_severity sev = severity_of(e->severity);
        if (known_kind(e->kind) || sev < AMP_SEVERITY_WARNING) continue;
        bool seen = false; // (its place's finding was made at the first of its events)
        for (size_t j = 0; j < i && !seen; j++)
            seen = same_place(&m->events[j], e) && !known_kind(m->events[j].kind) &&
                   severity_of(m->events[j].severity) >= AMP_SEVERITY_WARNING;
        if (seen) continue;
        int64_t occurrences = 0, first = e->step, last = e->last_step;
        amp_severity worst = sev;
        for (size_t j = i; j < m->n_events; j++) {
            const report_event *o = &m->events[j];
            const amp_severity s = severity_of(o->severity);
            if (!same_place(o, e) || s < AMP_SEVERITY_WARNING) continue;
            occurrences += o->occurrences;
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
        snprintf(f->title, sizeof f->title, "%.100s recorded by the program%s%.100s%s%.60s",
                 e->kind, layer || e->op ? " in " : "", layer ? layer : "",
                 layer && e->op ? " " : "", e->op ? e->op : "");
        snprintf(f->detail, sizeof f->detail,
                 "%lld occurrence%s of an event of the program's own kind %.100s (severity %s)%s"
                 "%.700s.",
                 (long long)occurrences, occurrences == 1 ? "" : "s", e->kind,
                 worst == AMP_SEVERITY_ERROR ? "error" : "warning", e->detail ? ": " : "",
                 e->detail ? e->detail : "");
        snprintf(f->advice, sizeof f->advice,
                 "The program (or the framework recording it) reported this itself: see what its "
                 "kind means there. ampprobe's own rules do not read kinds outside its vocabulary "
                 "(probe/SCHEMA.md, AMP_EVENTS).");
        report_finding_evidence(f, "occurrences", (double)occurrences);
        if (e->count >= 0) report_finding_evidence(f, "count", (double)e->count);
    }
}
