/*
 * widgets.c — shared drawing pieces (widgets.h).
 */
#define _GNU_SOURCE
#include "widgets.h"

#include "amp-impl.h"
#include "report.h"

#include <curses.h>
#include <langinfo.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

// "…" where the terminal shows UTF-8 (the locale tui_run sets, as app->utf8 is judged), else
// "..."; its width in columns.
static const char *ellipsis(int *cols) {
    const bool utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    *cols = utf8 ? 1 : 3;
    return utf8 ? "\u2026" : "...";
}

// The character at p: its bytes (*bytes, 1 for a byte that starts no valid UTF-8 sequence) and
// the columns the terminal gives it (wcwidth: 2 for CJK, 0 for a combining mark; 1 where the
// locale cannot tell).
static int char_cols(const char *p, size_t *bytes) {
    const size_t k = amp_utf8_seq(p, SIZE_MAX);
    *bytes = k ? k : 1;
    if (k <= 1) return 1;
    wchar_t wc = (unsigned char)*p & (0x7F >> k);
    for (size_t i = 1; i < k; i++)
        wc = (wchar_t)((wc << 6) | ((unsigned char)p[i] & 0x3F));
    const int w = wcwidth(wc);
    return w < 0 ? 1 : w;
}

// Columns of text's first `bytes` bytes.
static int columns(const char *text, size_t bytes) {
    int n = 0;
    for (size_t i = 0, k; i < bytes && text[i]; i += k)
        n += char_cols(text + i, &k);
    return n;
}

// The bytes of text's longest start that fits in col columns (a double-width character that
// would straddle the edge is left out).
static size_t offset_of(const char *text, int col) {
    size_t i = 0, k;
    for (int c = 0; text[i]; i += k) {
        const int w = char_cols(text + i, &k);
        if (c + w > col) break;
        c += w;
    }
    return i;
}

// Where text's end of at most col columns starts (its last characters that fit).
static size_t tail_of(const char *text, int col) {
    const size_t len = strlen(text);
    size_t i = 0, k;
    for (int rest = columns(text, len); text[i] && rest > col; i += k)
        rest -= char_cols(text + i, &k);
    return i;
}

static char *fit(char *dst, size_t n, const char *text, int w, tui_cut where);

// (recorded names come from any program: control characters, which the terminal would act on or
// show in more columns than counted, are shown as '?', as the report shows them)
char *tui_fit(char *dst, size_t n, const char *text, int w, tui_cut where) {
    char *scratch = NULL;
    fit(dst, n, report_clean(text, &scratch), w, where);
    free(scratch);
    return dst;
}

static char *fit(char *dst, size_t n, const char *text, int w, tui_cut where) {
    if (!n) return dst;
    const size_t len = strlen(text);
    const int cols = columns(text, len);
    if (w < 0) w = 0;
    size_t blanks = len; // what a cut of trailing blanks (a padded column) leaves: not a cut
    while (blanks > 0 && text[blanks - 1] == ' ')
        blanks--;
    if (cols <= w || columns(text, blanks) <= w) {
        snprintf(dst, n, "%.*s", (int)offset_of(text, w), text);
        return dst;
    }
    int ell_cols;
    const char *ell = ellipsis(&ell_cols);
    if (w <= ell_cols) { // room for (part of) the ellipsis alone: it still shows the cut
        snprintf(dst, n, "%.*s", (int)offset_of(ell, w), ell);
        return dst;
    }
    const int keep = w - ell_cols;
    const int tail = where == TUI_CUT_END ? 0 : where == TUI_CUT_START ? keep : (keep + 1) / 2;
    const int head = keep - tail;
    snprintf(dst, n, "%.*s%s%s", (int)offset_of(text, head), text, ell, text + tail_of(text, tail));
    return dst;
}

char *tui_cell(char *dst, size_t n, const char *text, int w, tui_cut where) {
    tui_fit(dst, n, text, w, where);
    size_t len = strlen(dst);
    for (int cols = columns(dst, len); cols < w && len + 1 < n; cols++)
        dst[len++] = ' ';
    dst[len] = 0;
    return dst;
}

char *tui_fit_path(char *dst, size_t n, const char *path, int w) {
    const char *slash = strrchr(path, '/');
    const char *base = slash && slash[1] ? slash + 1 : path;
    int ell_cols;
    ellipsis(&ell_cols);
    if (base != path && columns(base, strlen(base)) + ell_cols <= w)
        return tui_fit(dst, n, path, w, TUI_CUT_START);
    return tui_fit(dst, n, base, w, TUI_CUT_MIDDLE);
}

void tui_print(int y, int x, int w, int attr, const char *fmt, ...) {
    if (w <= 0) return;
    char buf[1024], fit[sizeof buf + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tui_fit(fit, sizeof fit, buf, w, TUI_CUT_END);
    attron(attr);
    mvaddstr(y, x, fit);
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

int tui_spark_steps(double x, double lo, double hi, int steps) {
    if (!isfinite(x) || steps < 1) return 0;
    if (!(hi > lo)) return steps / 2; // flat: half the height, at every size
    double f = (x - lo) / (hi - lo);
    return 1 + (int)lround(f * (steps - 1));
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
        int total = tui_spark_steps(x, lo, hi, r.h * levels); // in eighths (or ascii steps)
        const int x0 = r.x + (int)i;
        if (log2v && s[i] == 0) { // below any log axis (a scale backed off to 0): 0 at the bottom
            for (int row = 1; row < r.h; row++)
                mvaddstr(r.y + r.h - 1 - row, x0, " ");
            mvaddstr(r.y + r.h - 1, x0, "0");
            continue;
        }
        for (int row = 0; row < r.h; row++) { // row 0 at the bottom
            int cell = total - row * levels;
            if (cell < 0) cell = 0;
            if (cell > levels) cell = levels;
            int y = r.y + r.h - 1 - row;
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
