/*
 * widgets.h — drawing pieces the views share: text cut to an ellipsis where it does not fit,
 * multi-row sparklines, number formats, and a table's scroll/selection arithmetic (the fitting,
 * the sparkline's heights and the arithmetic pure, tested without a terminal).
 */
#ifndef AMPPROBE_TUI_WIDGETS_H
#define AMPPROBE_TUI_WIDGETS_H

#include "tui.h"

#include <stddef.h>

// Where tui_fit shortens a text: its end, its middle, its start (a path: its file name stays).
typedef enum tui_cut { TUI_CUT_END, TUI_CUT_MIDDLE, TUI_CUT_START } tui_cut;
// Copies text into dst (n bytes) in at most w columns (as the terminal counts them: two for a CJK
// character): a longer one loses
// its end, middle or start to an ellipsis ("…" in a UTF-8 locale, else "..."), so that the cut
// shows; blanks at its end are cut freely. Returns dst.
char *tui_fit(char *dst, size_t n, const char *text, int w, tui_cut where);
// tui_fit, then blanks to w columns: a table's cell (printf's "%-*s" pads bytes, not columns).
char *tui_cell(char *dst, size_t n, const char *text, int w, tui_cut where);
// A path in at most w columns: whole; else its start cut (".../runs/live.sqlite.log"), its file
// name kept whole; else that name's middle cut.
char *tui_fit_path(char *dst, size_t n, const char *path, int w);
// Prints at (y, x) in at most w columns, a text longer than that cut at its end to an ellipsis
// (tui_fit); the rest of the w columns is left as it was.
void tui_print(int y, int x, int w, int attr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// attr for a colour pair, or the monochrome fallback when colour is off.
int tui_attr(const tui_app *app, int pair);

// How high x stands in a sparkline steps high (rows x steps a row) whose values run from lo to
// hi: 1 (lo) to steps (hi); half of steps for each value of a flat series (lo == hi), so that it
// draws alike at every size; 0 for NaN or an infinity.
int tui_spark_steps(double x, double lo, double hi, int steps);
// Draws values as a sparkline filling r (r.h rows, the last r.w values; NaN leaves a gap).
// log2: plot log2(v) (loss scales); a 0, below any log axis, shows as "0" on the bottom row.
// Returns the number of values shown.
size_t tui_sparkline(const tui_app *app, tui_rect r, const double *v, size_t n, bool log2,
                     int attr);

// 1.23k, 4.5M, ...; "-" for NaN.
void tui_fmt_count(char *buf, size_t n, double v);
// A duration in ns as "812 us", "3.2 ms", "1.4 s".
void tui_fmt_ns(char *buf, size_t n, double ns);
// How a program ended: "killed by signal 2 (SIGINT)" when term_signal > 0 (its exit status,
// 128+N by the shell's convention, is not what it exited with), else "exit status 130" when
// exit_status >= 0; "" when neither is known.
void tui_fmt_exit(char *buf, size_t n, int exit_status, int term_signal);

// Keeps a table's selection inside [0, count) and visible in `visible` rows.
void tui_table_clamp(tui_table *t, int count, int visible);
// Case-insensitive substring test; an empty needle matches.
bool tui_match(const char *hay, const char *needle);

#endif
