/*
 * rule_events.c — rule `recorded-events`: the warnings and errors a producer recorded as events
 * of its own kinds. The record API (amp-record.h) stores any lower_snake_case kind as given, so
 * that a framework outside libampcore can say what it saw ("my_nan_guard", "data_skipped"); the
 * other rules read only the vocabulary libampcore and the PyTorch bridge write, so without this
 * one such an event, error or not, would never reach the report. One finding per (process, kind,
 * layer, op): its severity as recorded, its steps and occurrences, the first detail.
 */
#include "report.h"

#include "amp-impl.h"

#include <stdlib.h>
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

void rule_events_run(const report_model *m, report_findings *out) {
    // the program's own warnings and errors, grouped by place (sorted, each place is one run)
    const report_event **v = amp_xmalloc((m->n_events + 1) * sizeof *v);
    size_t n = 0, n_places = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (!known_kind(e->kind) && severity_of(e->severity) >= AMP_SEVERITY_WARNING) v[n++] = e;
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
        int64_t occurrences = 0, first = e->step, last = e->last_step;
        amp_severity worst = AMP_SEVERITY_WARNING;
        for (size_t j = 0; j < places[p].n; j++) {
            const report_event *o = places[p].v[j];
            const amp_severity s = severity_of(o->severity);
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
    free(places);
    free(v);
}
