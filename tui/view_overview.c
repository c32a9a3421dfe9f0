/*
 * view_overview.c — the overview: the run (command and the log of `run --tui`, state, device,
 * precision, steps), sparklines of step time (with the memory peak so far), loss and loss scale
 * (log scale, a scale of 0 along its bottom, skipped steps marked below it) over the steps up to
 * the shown one, the event counts by kind, the first non-finite event and the report's top
 * finding.
 */
#include "widgets.h"

#include "amp-impl.h"

#include <curses.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const tui_event *first_nonfinite(const tui_model *m) {
    for (size_t i = 0; i < m->n_events; i++) {
        const char *k = m->events[i].kind;
        if (strcmp(k, "nonfinite_producer") == 0 || strcmp(k, "nonfinite_input") == 0 ||
            strcmp(k, "nonfinite_module") == 0)
            return &m->events[i];
    }
    return NULL;
}

#define LOG_MIN_COLS 16 // the log's name keeps this much of the run line at least

// The command, and under `run --tui` where its output goes: the log's name at the end of the line,
// whole where it fits (the command gives way, cut to an ellipsis), else shortened (tui_fit_path).
static void draw_command(const tui_app *app, tui_rect r) {
    const tui_model *m = &app->model;
    const char *command = m->command ? m->command : "(command not recorded)";
    if (!app->live) {
        tui_print(r.y, 0, r.w, A_NORMAL, "run   %s", command);
        return;
    }
    static const char run[] = "run   ", output[] = "  output: ";
    const int fixed = (int)(strlen(run) + strlen(output));
    const int log_len = (int)strlen(app->live->log_path), cmd_len = (int)strlen(command);
    int log_w = r.w - fixed - (cmd_len < 20 ? cmd_len : 20); // 20: some of the command
    if (log_w < LOG_MIN_COLS) log_w = LOG_MIN_COLS;
    if (log_w > log_len) log_w = log_len;
    char log[256], cmd[512];
    tui_fit_path(log, sizeof log, app->live->log_path, log_w);
    tui_fit(cmd, sizeof cmd, command, r.w - fixed - log_w, TUI_CUT_END);
    tui_print(r.y, 0, r.w, A_NORMAL, "%s%s%s%s", run, cmd, output, log);
}

static void draw_run(const tui_app *app, tui_rect r) {
    const tui_model *m = &app->model;
    draw_command(app, r);
    size_t skipped = 0;
    for (size_t i = 0; i < m->n_steps; i++)
        skipped += m->steps[i].skipped;
    char state[96];
    int exit_status = m->exit_status, term_signal = m->exit_signal; // (-1: not recorded)
    if (app->live) { // the launcher stores the signal before the status
        exit_status = atomic_load(&app->live->exit_status);
        term_signal = exit_status >= 0 ? atomic_load(&app->live->term_signal) : 0;
    }
    char took[32] = "?";
    if (m->start_ns > 0) { // the run's clock is CLOCK_REALTIME (probe/SCHEMA.md)
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t end = m->end_ns > 0 ? m->end_ns : (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
        tui_fmt_ns(took, sizeof took, (double)(end - m->start_ns));
    }
    char how[48]; // "killed by signal 2 (SIGINT)", "exit status 1"; "": not recorded
    tui_fmt_exit(how, sizeof how, exit_status, term_signal);
    if (m->complete || exit_status >= 0)
        snprintf(state, sizeof state, "ended after %s%s%s", took, how[0] ? ", " : "", how);
    else if (m->cut_short)
        snprintf(state, sizeof state, "recording cut short (its launcher was killed)");
    else
        snprintf(state, sizeof state, "running for %s", took);
    int attr =
        exit_status > 0 || term_signal > 0 || m->cut_short ? tui_attr(app, TUI_PAIR_DANGER) : 0;
    char of[64] = ""; // a data-parallel job's ranks: one at a time (P shows the next)
    if (m->n_step_pids > 1)
        snprintf(of, sizeof of, " of process %d (%zu of %zu)", (int)m->pid,
                 tui_model_process_index(m) + 1, m->n_step_pids);
    tui_print(r.y + 1, 0, r.w, attr, "state %s | device %s%s%s | %zu steps%s, %zu skipped%s%s",
              state, m->device ? m->device : "?", m->precision ? " " : "",
              m->precision ? m->precision : "", m->n_steps, of, skipped, m->exception ? " | " : "",
              m->exception ? m->exception : "");
}

// The values of the steps up to the shown step, the last w of them.
static size_t window(const tui_app *app, int w, size_t *first) {
    const tui_model *m = &app->model;
    ptrdiff_t end = app->step < 0 ? (ptrdiff_t)m->n_steps - 1 : tui_model_step_index(m, app->step);
    size_t n = end < 0 ? 0 : (size_t)end + 1;
    size_t shown = n < (size_t)w ? n : (size_t)w;
    *first = n - shown;
    return shown;
}

#define LABEL_COL 24 // the labels after the graphs' titles line up here (when the titles are short)

// Puts the first of labels (NULL-terminated, longest first) that fits in cols on row y, two
// columns after column x and at LABEL_COL at least. Returns the column after it; x when none fits.
static int put_label(int y, int x, int cols, int attr, const char *const *labels) {
    int at = x + 2 > LABEL_COL ? x + 2 : LABEL_COL;
    for (; *labels; labels++) {
        int len = (int)strlen(*labels);
        if (at + len <= cols) {
            tui_print(y, at, len, attr, "%s", *labels);
            return at + len;
        }
    }
    return x;
}

// Prints text at the start of row y (clipped to cols); returns the column after it.
static int put_title(int y, int cols, const char *text) {
    tui_print(y, 0, cols, A_BOLD, "%s", text);
    int len = (int)strlen(text);
    return len < cols ? len : cols;
}

// The three sparklines show the last steps that fit in the width, up to the shown step: the
// step time's row says which ("graphs: steps 70-149"). The figures in their titles are of the
// whole run up to the shown step: the latest value, the scale it started from, how many losses
// were non-finite and steps skipped. A label that does not fit after its title is shortened, then
// left out.

// The steps the graphs show: s[0, n) (m->steps from `first`), last (NULL: none), and the run up to
// the shown step, m->steps[0, upto); v: room for n values.
typedef struct graph_steps {
    const tui_step *s, *last;
    size_t n, upto;
    double *v;
} graph_steps;

static void draw_time_graph(const tui_app *app, const tui_layout *l, const graph_steps *g) {
    const tui_model *m = &app->model;
    const int cols = l->cols;
    char a[32], title[96], label[2][64];
    for (size_t i = 0; i < g->n; i++)
        g->v[i] = g->s[i].time_ms * 1e6;
    tui_fmt_ns(a, sizeof a, g->last ? g->last->time_ms * 1e6 : NAN);
    snprintf(title, sizeof title, "step time  %s", a);
    int x = put_title(l->ov_time.y, cols, title);
    double mem = NAN; // the peak is recorded as of a step's end, not every step by every producer
    for (size_t i = g->upto; i-- > 0 && isnan(mem);)
        mem = m->steps[i].mem_mib;
    if (!isnan(mem)) {
        snprintf(label[0], sizeof label[0], "memory peak %.*f MiB", mem < 10 ? 1 : 0, mem);
        x = put_label(l->ov_time.y, x, cols, A_NORMAL, (const char *const[]){label[0], NULL});
    }
    if (g->last) { // which steps the graphs show, at the right edge
        snprintf(label[0], sizeof label[0], "graphs: steps %lld-%lld", (long long)g->s[0].step,
                 (long long)g->last->step);
        snprintf(label[1], sizeof label[1], "steps %lld-%lld", (long long)g->s[0].step,
                 (long long)g->last->step);
        for (int k = 0; k < 2; k++) {
            int len = (int)strlen(label[k]);
            if (x + 2 + len > cols) continue;
            tui_print(l->ov_time.y, cols - len, len, A_NORMAL, "%s", label[k]);
            break;
        }
    }
    tui_sparkline(app, (tui_rect){0, l->ov_time.y + 1, cols, l->ov_time.h - 1}, g->v, g->n, false,
                  tui_attr(app, TUI_PAIR_ACCENT));
}

static void draw_loss_graph(const tui_app *app, const tui_layout *l, const graph_steps *g,
                            size_t nan_losses) {
    const int cols = l->cols;
    const tui_step *last = g->last;
    char a[32], title[96], label[2][64];
    for (size_t i = 0; i < g->n; i++)
        g->v[i] = g->s[i].loss;
    snprintf(a, sizeof a,
             !last                  ? "-"
             : !isnan(last->loss)   ? "%.4g"
             : last->loss_nonfinite ? "NaN"
                                    : "-", // (no step record came)
             last ? last->loss : 0);
    snprintf(title, sizeof title, "loss       %s", a);
    int x = put_title(l->ov_loss.y, cols, title);
    if (nan_losses) {
        snprintf(label[0], sizeof label[0], "%zu non-finite losses (gaps)", nan_losses);
        snprintf(label[1], sizeof label[1], "%zu non-finite", nan_losses);
        put_label(l->ov_loss.y, x, cols, tui_attr(app, TUI_PAIR_DANGER),
                  (const char *const[]){label[0], label[1], NULL});
    }
    tui_sparkline(app, (tui_rect){0, l->ov_loss.y + 1, cols, l->ov_loss.h - 1}, g->v, g->n, false,
                  tui_attr(app, TUI_PAIR_GOOD));
}

static void draw_scale_graph(const tui_app *app, const tui_layout *l, const graph_steps *g,
                             size_t skipped) {
    const tui_model *m = &app->model;
    const int cols = l->cols, danger = tui_attr(app, TUI_PAIR_DANGER);
    const tui_step *last = g->last;
    char a[32], b[32], label[3][64];
    for (size_t i = 0; i < g->n; i++)
        g->v[i] = g->s[i].scale;
    snprintf(a, sizeof a, last && !isnan(last->scale) ? "%g" : "-", last ? last->scale : 0);
    // from the scale the run started with (its first step's before the update)
    snprintf(b, sizeof b, g->upto && !isnan(m->steps[0].scale_before) ? "%g" : "-",
             g->upto ? m->steps[0].scale_before : 0);
    if (skipped) {
        snprintf(label[0], sizeof label[0], "x: %zu skipped steps", skipped);
        snprintf(label[1], sizeof label[1], "x: %zu skipped", skipped);
        snprintf(label[2], sizeof label[2], "x: %zu", skipped);
    }
    // the count matters more than naming the axis, then than the scale it started from
    const int need = skipped ? 2 + (int)strlen(label[2]) : 0;
    char titles[3][96];
    snprintf(titles[0], sizeof titles[0], "loss scale %s (from %s, log2 axis)", a, b);
    snprintf(titles[1], sizeof titles[1], "loss scale %s (from %s)", a, b);
    snprintf(titles[2], sizeof titles[2], "loss scale %s", a);
    int k = 0;
    while (k < 2 && (int)strlen(titles[k]) + need > cols)
        k++;
    int x = put_title(l->ov_scale.y, cols, titles[k]);
    if (skipped)
        put_label(l->ov_scale.y, x, cols, danger,
                  (const char *const[]){label[0], label[1], label[2], NULL});
    tui_sparkline(app, (tui_rect){0, l->ov_scale.y + 1, cols, l->ov_scale.h - 1}, g->v, g->n, true,
                  tui_attr(app, TUI_PAIR_WARN));
    move(l->ov_skips.y, 0);
    for (size_t i = 0; i < g->n; i++)
        if (g->s[i].skipped) tui_print(l->ov_skips.y, (int)i, 1, danger, "x");
}

static void draw_graphs(const tui_app *app, const tui_layout *l) {
    const tui_model *m = &app->model;
    size_t first;
    graph_steps g = {.n = window(app, l->cols, &first)};
    g.v = amp_xmalloc((g.n ? g.n : 1) * sizeof *g.v);
    g.s = m->steps ? m->steps + first : NULL; // (no step yet: no array, and NULL + 0 is UB)
    g.last = g.n ? &g.s[g.n - 1] : NULL;
    g.upto = first + g.n;
    size_t nan_losses = 0, skipped = 0;
    for (size_t i = 0; i < g.upto; i++) {
        nan_losses += m->steps[i].loss_nonfinite;
        skipped += m->steps[i].skipped;
    }
    draw_time_graph(app, l, &g);
    draw_loss_graph(app, l, &g, nan_losses);
    draw_scale_graph(app, l, &g, skipped);
    free(g.v);
}

static void draw_counts(const tui_app *app, tui_rect r) {
    const tui_model *m = &app->model;
    char title[64];
    snprintf(title, sizeof title, "events (%zu rows)", m->n_events);
    if ((int)strlen(title) > r.w) snprintf(title, sizeof title, "events (%zu)", m->n_events);
    tui_print(r.y, r.x, r.w, A_BOLD, "%s", title);
    int count_w = 3; // the counts' column as wide as the widest: the kinds keep the rest
    for (size_t i = 0; i < m->n_counts; i++) {
        char n[24];
        int len = snprintf(n, sizeof n, "%lld", (long long)m->counts[i].n);
        if (len > count_w) count_w = len;
    }
    for (int i = 0; i + 1 < r.h && i < (int)m->n_counts; i++) {
        const tui_event_count *c = &m->counts[i];
        int attr = c->severity == 2   ? tui_attr(app, TUI_PAIR_DANGER)
                   : c->severity == 1 ? tui_attr(app, TUI_PAIR_WARN)
                                      : 0;
        char kind[512];
        tui_cell(kind, sizeof kind, c->kind, r.w - count_w - 1, TUI_CUT_END);
        tui_print(r.y + 1 + i, r.x, r.w, attr, "%s %*lld", kind, count_w, (long long)c->n);
    }
}

// Prints text word-wrapped into rows y..y+h-1; returns the rows used.
// The last row, when the text goes on past it, ends in an ellipsis.
static int wrap(int y, int x, int w, int h, int attr, const char *text) {
    int used = 0;
    while (*text && used < h) {
        size_t n = strlen(text);
        if (used == h - 1 && n > (size_t)w) { // the last row: cut, and said so (tui_print)
            tui_print(y + used++, x, w, attr, "%s", text);
            break;
        }
        if (n > (size_t)w) {
            n = (size_t)w;
            while (n > 0 && text[n] != ' ')
                n--;
            if (n == 0) n = (size_t)w;
        }
        tui_print(y + used++, x, w, attr, "%.*s", (int)n, text);
        text += n;
        while (*text == ' ')
            text++;
    }
    return used;
}

static void draw_finding(const tui_app *app, tui_rect r) {
    const tui_model *m = &app->model;
    int y = r.y, end = r.y + r.h;
    const tui_event *e = first_nonfinite(m);
    if (e && y < end) {
        char label[TUI_LABEL_MAX];
        const char *layer = tui_model_layer_label(m, e->pid, e->layer_id, label, sizeof label);
        tui_print(y++, r.x, r.w, tui_attr(app, TUI_PAIR_DANGER),
                  "first non-finite: step %lld %s %s %s", (long long)e->step, layer ? layer : "-",
                  e->op[0] ? e->op : "-", e->phase);
    }
    if (y >= end) return;
    const tui_finding *f = &m->finding;
    if (f->error[0]) { // a live run: asked again (an ended run's ends the TUI: model.c)
        tui_print(y++, r.x, r.w, tui_attr(app, TUI_PAIR_DANGER),
                  "top finding unknown: the report failed");
        if (y < end) wrap(y, r.x, r.w, end - y, A_NORMAL, f->error);
        return;
    }
    if (!f->valid) {
        const bool ended = m->complete || m->cut_short;
        char none[96];
        snprintf(none, sizeof none, "top finding: %s",
                 m->finding_ms == 0 ? "(the report is running)"
                 : m->n_steps == 0  ? ended ? "none: no step was recorded, nothing to diagnose"
                                            : "none: no step recorded yet"
                 : ended            ? "none: no warning or error in this run"
                                    : "no warning or error so far");
        wrap(y, r.x, r.w, end - y, A_BOLD, none);
        return;
    }
    static const char *const sev[] = {"info", "warning", "error"};
    int attr = tui_attr(app, f->severity == 2 ? TUI_PAIR_DANGER : TUI_PAIR_WARN);
    char where[96] = "";
    if (f->first_step >= 0) snprintf(where, sizeof where, " step %lld", (long long)f->first_step);
    tui_print(y++, r.x, r.w, attr, "top finding [%s] %s%s", sev[f->severity], f->rule, where);
    int64_t newest = m->n_steps ? m->steps[m->n_steps - 1].step : -1;
    char as_of[48] = ""; // a long live run refreshes the finding rarely (model.c)
    if (m->finding_step >= 0 && m->finding_step < newest)
        snprintf(as_of, sizeof as_of, "(as of step %lld)", (long long)m->finding_step);
    if (y < end && (f->layer[0] || as_of[0]))
        tui_print(y++, r.x, r.w, A_NORMAL, "%s %s %s", f->layer, f->op, as_of);
    if (y < end) wrap(y, r.x, r.w, end - y, A_NORMAL, f->title);
}

static void draw(const tui_app *app, const tui_layout *l) {
    draw_run(app, l->ov_run);
    draw_graphs(app, l);
    draw_counts(app, l->ov_counts);
    draw_finding(app, l->ov_finding);
}

// No rows of its own: it draws straight from the model.
const tui_view_i tui_view_overview = {"overview", NULL, NULL, draw, NULL};
