/*
 * view_events.c — the events view: AMP_EVENTS as a scrolling log (step, severity, kind, layer,
 * op, phase, elements, occurrences), errors in red and warnings in yellow. Sorted by arrival
 * it follows the newest event while the TUI follows the run; filterable by kind, layer, op.
 */
#include "widgets.h"

#include "amp-impl.h"

#include <curses.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SORT_ARRIVAL, SORT_STEP, SORT_SEVERITY, SORT_KIND };
static const char *const columns[] = {"arrival", "step", "severity", "kind", NULL};

static int sev_rank(const char *s) {
    return strcmp(s, "error") == 0 ? 2 : strcmp(s, "warning") == 0 ? 1 : 0;
}

static int sort_key; // qsort has no context argument; update sets it just before sorting

static int cmp_events(const void *pa, const void *pb) {
    const tui_event *a = *(const tui_event *const *)pa, *b = *(const tui_event *const *)pb;
    int c = 0;
    switch (sort_key) {
    case SORT_STEP:
        c = (a->step > b->step) - (a->step < b->step);
        break;
    case SORT_SEVERITY:
        c = sev_rank(b->severity) - sev_rank(a->severity);
        break;
    case SORT_KIND:
        c = strcmp(a->kind, b->kind);
        break;
    default:
        break;
    }
    return c ? c : (a->id > b->id) - (a->id < b->id);
}

static bool matches(const tui_app *app, const tui_event *e, const char *filter) {
    char buf[TUI_LABEL_MAX];
    return tui_match(e->kind, filter) || tui_match(e->op, filter) ||
           tui_match(e->severity, filter) ||
           tui_match(tui_model_layer_label(&app->model, e->pid, e->layer_id, buf, sizeof buf),
                     filter);
}

static void update(tui_app *app) {
    const tui_model *m = &app->model;
    tui_table *t = &app->tables[TUI_VIEW_EVENTS];
    if (app->cap_event_rows < m->n_events) {
        app->cap_event_rows = m->n_events;
        app->event_rows = amp_xrealloc(app->event_rows, m->n_events * sizeof *app->event_rows);
    }
    app->n_event_rows = 0;
    for (size_t i = 0; i < m->n_events; i++)
        if (matches(app, &m->events[i], t->filter))
            app->event_rows[app->n_event_rows++] = &m->events[i];
    sort_key = t->sort;
    if (t->sort != SORT_ARRIVAL)
        amp_sort(app->event_rows, app->n_event_rows, sizeof *app->event_rows, cmp_events);
    if (app->following && t->sort == SORT_ARRIVAL) t->selected = (int)app->n_event_rows - 1;
}

static void draw(const tui_app *app, const tui_layout *l) {
    const tui_table *t = &app->tables[TUI_VIEW_EVENTS];
    tui_rect b = l->body;
    int layer_w = b.w - 63;
    if (layer_w < 10) layer_w = 10;
    tui_print(b.y, 0, b.w, A_BOLD | A_UNDERLINE, "%6s %-4s %-20s %-*.*s %-10s %-5s %6s %5s", "STEP",
              "SEV", "KIND", layer_w, layer_w, "LAYER", "OP", "PHASE", "COUNT", "xN");
    if (!app->n_event_rows) {
        tui_print(b.y + 2, 2, b.w - 4, A_NORMAL,
                  t->filter[0]        ? "no event matches the filter"
                  : tui_app_live(app) ? "no events recorded yet"
                                      : "no events recorded");
        return;
    }
    for (int i = 0; i < l->table_rows && t->top + i < (int)app->n_event_rows; i++) {
        const tui_event *e = app->event_rows[t->top + i];
        int sev = sev_rank(e->severity);
        int attr = sev == 2   ? tui_attr(app, TUI_PAIR_DANGER)
                   : sev == 1 ? tui_attr(app, TUI_PAIR_WARN)
                              : 0;
        if (t->top + i == t->selected) attr |= A_REVERSE;
        char label[TUI_LABEL_MAX];
        const char *layer =
            tui_model_layer_label(&app->model, e->pid, e->layer_id, label, sizeof label);
        char cnt[24], step[32];
        tui_fmt_count(cnt, sizeof cnt, e->count < 0 ? (double)NAN : (double)e->count);
        if (e->aggregate && e->last_step != e->step)
            snprintf(step, sizeof step, "%lld+", (long long)e->step);
        else
            snprintf(step, sizeof step, "%lld", (long long)e->step);
        char kind[64], layer_s[256], op[64]; // cut to an ellipsis where they do not fit
        tui_cell(kind, sizeof kind, e->kind, 20, TUI_CUT_END);
        tui_cell(layer_s, sizeof layer_s, layer ? layer : "-", layer_w, TUI_CUT_MIDDLE);
        tui_cell(op, sizeof op, e->op[0] ? e->op : "-", 10, TUI_CUT_END);
        tui_print(b.y + 1 + i, 0, b.w, attr, "%6s %-4s %s %s %s %-5s %6s %5lld", step,
                  sev == 2   ? "err"
                  : sev == 1 ? "warn"
                             : "info",
                  kind, layer_s, op, e->phase[0] ? e->phase : "-", cnt, (long long)e->occurrences);
    }
}

static int count(const tui_app *app) {
    return (int)app->n_event_rows;
}

const tui_view_i tui_view_events = {"events", columns, update, draw, count};
