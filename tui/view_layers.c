/*
 * view_layers.c — the layers view: per layer, tensor kind and dtype at the shown step (every figure
 * of a row of the same tensors: model.h), the largest |x|, the headroom in bits to the dtype's max,
 * the share of values lost to underflow and the NaN/Inf counts; red for NaN, +Inf or less than a
 * bit of headroom, yellow for less than 3 bits or >= 5% underflow (an fp16 run's gradient that
 * arrived all zero counted lost: model.c; an `update` row's underflow is the values an optimizer
 * step left unchanged in a 16-bit parameter, yellow from 25%). -Inf alone is not a danger:
 * attention masks put it there on purpose (an overflow to -Inf comes with +Inf or NaN in the same
 * or the next op). Sortable (danger first by default), filterable by layer name.
 */
#include "widgets.h"

#include "amp-impl.h"

#include <curses.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SORT_DANGER, SORT_LAYER, SORT_AMAX, SORT_HEADROOM, SORT_UNDERFLOW, SORT_NONFINITE };
static const char *const columns[] = {"danger",    "layer",      "amax", "headroom",
                                      "underflow", "non-finite", NULL};

// 2: red, 1: yellow, 0: fine.
static int danger(const tui_layer_row *r) {
    if (r->kind == TUI_KIND_UPDATE) // values an update left unchanged: yellow from a quarter, as
        return !isnan(r->underflow_pct) && r->underflow_pct >= 25; // the report's warning
    if (r->n_nan + r->n_posinf > 0 || (!isnan(r->headroom_bits) && r->headroom_bits < 1)) return 2;
    if ((!isnan(r->headroom_bits) && r->headroom_bits < 3) ||
        (!isnan(r->underflow_pct) && r->underflow_pct >= 5))
        return 1;
    return 0;
}

static int sort_key; // qsort has no context argument; update sets it just before sorting

static int cmp_num(double a, double b) { // NaN last
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}

static int cmp_rows(const void *pa, const void *pb) {
    const tui_layer_row *a = *(const tui_layer_row *const *)pa,
                        *b = *(const tui_layer_row *const *)pb;
    int c = 0;
    switch (sort_key) {
    case SORT_DANGER:
        c = danger(b) - danger(a);
        if (!c) c = cmp_num(a->headroom_bits, b->headroom_bits);
        break;
    case SORT_AMAX:
        c = -cmp_num(a->amax, b->amax);
        break;
    case SORT_HEADROOM:
        c = cmp_num(a->headroom_bits, b->headroom_bits);
        break;
    case SORT_UNDERFLOW:
        c = -cmp_num(a->underflow_pct, b->underflow_pct);
        break;
    case SORT_NONFINITE: {
        int64_t x = a->n_nan + a->n_posinf + a->n_neginf, y = b->n_nan + b->n_posinf + b->n_neginf;
        c = (y > x) - (y < x);
        break;
    }
    default:
        break;
    }
    if (!c) c = (a->layer_id > b->layer_id) - (a->layer_id < b->layer_id);
    if (!c) c = (int)a->kind - (int)b->kind;
    return c;
}

static void update(tui_app *app) {
    const tui_model *m = &app->model;
    const tui_table *t = &app->tables[TUI_VIEW_LAYERS];
    if (app->cap_layer_rows < m->n_rows) {
        app->cap_layer_rows = m->n_rows;
        app->layer_rows = amp_xrealloc(app->layer_rows, m->n_rows * sizeof *app->layer_rows);
    }
    app->n_layer_rows = 0;
    for (size_t i = 0; i < m->n_rows; i++)
        if (tui_match(m->rows[i].name, t->filter))
            app->layer_rows[app->n_layer_rows++] = &m->rows[i];
    sort_key = t->sort;
    amp_sort(app->layer_rows, app->n_layer_rows, sizeof *app->layer_rows, cmp_rows);
}

static void draw(const tui_app *app, const tui_layout *l) {
    const tui_table *t = &app->tables[TUI_VIEW_LAYERS];
    tui_rect b = l->body;
    int name_w = b.w - 58;
    if (name_w < 12) name_w = 12;
    tui_print(b.y, 0, b.w, A_BOLD | A_UNDERLINE, "%-*.*s %-6s %-5s %9s %8s %8s %6s %6s  ", name_w,
              name_w, "LAYER", "KIND", "DTYPE", "AMAX", "HEADROOM", "UNDERFL%", "NaN", "Inf");
    if (!app->n_layer_rows) {
        const tui_model *m = &app->model;
        if (t->filter[0])
            tui_print(b.y + 2, 2, b.w - 4, A_NORMAL, "no layer matches '%s'", t->filter);
        else if (app->step < 0 || m->stats_step < 0)
            tui_print(b.y + 2, 2, b.w - 4, A_NORMAL, "no tensor statistics recorded%s",
                      tui_app_live(app) ? " yet" : "");
        else
            tui_print(b.y + 2, 2, b.w - 4, A_NORMAL,
                      "no tensor statistics at step %lld (sampled steps only: --stats-every)",
                      (long long)app->step);
        return;
    }
    for (int i = 0; i < l->table_rows && t->top + i < (int)app->n_layer_rows; i++) {
        const tui_layer_row *r = app->layer_rows[t->top + i];
        int d = danger(r);
        int attr = d == 2   ? tui_attr(app, TUI_PAIR_DANGER)
                   : d == 1 ? tui_attr(app, TUI_PAIR_WARN)
                            : 0;
        if (t->top + i == t->selected) attr |= A_REVERSE;
        char amax[16], head[16], under[16], nan_s[16], inf_s[16];
        snprintf(amax, sizeof amax, isnan(r->amax) ? "-" : "%.4g", r->amax);
        if (isnan(r->headroom_bits))
            snprintf(head, sizeof head, "-");
        else if (isinf(r->headroom_bits))
            snprintf(head, sizeof head, "inf");
        else
            snprintf(head, sizeof head, "%.1f", r->headroom_bits);
        snprintf(under, sizeof under, isnan(r->underflow_pct) ? "-" : "%.2f", r->underflow_pct);
        tui_fmt_count(nan_s, sizeof nan_s, (double)r->n_nan);
        tui_fmt_count(inf_s, sizeof inf_s, (double)(r->n_posinf + r->n_neginf));
        if (!r->nonfinite_counted)
            snprintf(nan_s, sizeof nan_s, "-"), snprintf(inf_s, sizeof inf_s, "-");
        char name[256]; // a long name loses its middle to an ellipsis: its root and leaf stay
        tui_cell(name, sizeof name, r->name, name_w, TUI_CUT_MIDDLE);
        tui_print(b.y + 1 + i, 0, b.w, attr, "%s %-6s %-5s %9s %8s %8s %6s %6s %s", name,
                  tui_stat_kind_name(r->kind), r->dtype, amax, head, under, nan_s, inf_s,
                  d == 2   ? "!!"
                  : d == 1 ? "! "
                           : "  ");
    }
}

static int count(const tui_app *app) {
    return (int)app->n_layer_rows;
}

const tui_view_i tui_view_layers = {"layers", columns, update, draw, count};
