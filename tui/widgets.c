/*
 * widgets.c — shared drawing pieces (widgets.h).
 */
#define _GNU_SOURCE
#include "widgets.h"

#include <curses.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tui_print(int y, int x, int w, int attr, const char *fmt, ...) {
    if (w <= 0) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    attron(attr);
    mvaddnstr(y, x, buf, w);
    attroff(attr);
}

int tui_attr(const tui_app *app, int pair) {
    if (app->color) return (int)COLOR_PAIR(pair) | (pair == TUI_PAIR_DANGER ? A_BOLD : 0);
    switch (pair) { // NO_COLOR: the danger still shows (not in reverse: that is the selection)
    case TUI_PAIR_DANGER:
        return A_BOLD | A_UNDERLINE;
    case TUI_PAIR_WARN:
        return A_BOLD;
    case TUI_PAIR_ACCENT:
        return A_BOLD;
    default:
        return A_NORMAL;
    }
}

void tui_colors_init(const tui_app *app) {
    if (!app->color) return;
    start_color();
    use_default_colors();
    init_pair(TUI_PAIR_DANGER, COLOR_RED, -1);
    init_pair(TUI_PAIR_WARN, COLOR_YELLOW, -1);
    init_pair(TUI_PAIR_GOOD, COLOR_GREEN, -1);
    init_pair(TUI_PAIR_ACCENT, COLOR_CYAN, -1);
}

size_t tui_sparkline(const tui_app *app, tui_rect r, const double *v, size_t n, bool log2v,
                     int attr) {
    static const char *const blocks[] = {" ",      "\u2581", "\u2582", "\u2583", "\u2584",
                                         "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = " .:-=+*#%@";
    if (r.w <= 0 || r.h <= 0) return 0;
    size_t shown = n < (size_t)r.w ? n : (size_t)r.w;
    const double *s = v + (n - shown);
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < shown; i++) {
        double x = log2v ? (s[i] > 0 ? log2(s[i]) : NAN) : s[i];
        if (!isfinite(x)) continue;
        if (x < lo) lo = x;
        if (x > hi) hi = x;
    }
    int levels = app->utf8 ? 8 : 9;
    attron(attr);
    for (size_t i = 0; i < shown; i++) {
        double x = log2v ? (s[i] > 0 ? log2(s[i]) : NAN) : s[i];
        // height in eighths (or ascii steps) of the whole graph, at least one for a value
        int total = 0;
        if (isfinite(x)) {
            double f = hi > lo ? (x - lo) / (hi - lo) : 0.5;
            total = 1 + (int)lround(f * (r.h * levels - 1));
        }
        for (int row = 0; row < r.h; row++) { // row 0 at the bottom
            int cell = total - row * levels;
            if (cell < 0) cell = 0;
            if (cell > levels) cell = levels;
            int y = r.y + r.h - 1 - row, x0 = r.x + (int)i;
            if (app->utf8) {
                mvaddstr(y, x0, blocks[cell]);
            } else {
                mvaddch(y, x0, (chtype)(unsigned char)ascii[cell]);
            }
        }
    }
    attroff(attr);
    return shown;
}

void tui_fmt_count(char *buf, size_t n, double v) {
    if (isnan(v)) {
        snprintf(buf, n, "-");
        return;
    }
    double a = fabs(v);
    if (a >= 1e9)
        snprintf(buf, n, "%.1fG", v / 1e9);
    else if (a >= 1e6)
        snprintf(buf, n, "%.1fM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, n, "%.1fk", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
}

void tui_fmt_ns(char *buf, size_t n, double ns) {
    if (isnan(ns))
        snprintf(buf, n, "-");
    else if (ns >= 1e9)
        snprintf(buf, n, "%.2f s", ns / 1e9);
    else if (ns >= 1e6)
        snprintf(buf, n, "%.2f ms", ns / 1e6);
    else
        snprintf(buf, n, "%.1f us", ns / 1e3);
}

void tui_fmt_exit(char *buf, size_t n, int exit_status, int term_signal) {
    const char *abbrev = term_signal > 0 ? sigabbrev_np(term_signal) : NULL; // as the report
    if (abbrev)
        snprintf(buf, n, "killed by signal %d (SIG%s)", term_signal, abbrev);
    else if (term_signal > 0)
        snprintf(buf, n, "killed by signal %d", term_signal);
    else if (exit_status >= 0)
        snprintf(buf, n, "exit status %d", exit_status);
    else
        snprintf(buf, n, "%s", "");
}

void tui_table_clamp(tui_table *t, int count, int visible) {
    if (visible < 1) visible = 1;
    if (t->selected >= count) t->selected = count - 1;
    if (t->selected < 0) t->selected = 0;
    if (t->top > t->selected) t->top = t->selected;
    if (t->selected >= t->top + visible) t->top = t->selected - visible + 1;
    if (t->top > count - visible) t->top = count - visible;
    if (t->top < 0) t->top = 0;
}

bool tui_match(const char *hay, const char *needle) {
    return !*needle || (hay && strcasestr(hay, needle));
}
