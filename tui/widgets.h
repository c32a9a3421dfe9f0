/*
 * widgets.h — drawing pieces the views share: clipped text, multi-row sparklines, number
 * formats, and a table's scroll/selection arithmetic (pure, tested without a terminal).
 */
#ifndef AMPPROBE_TUI_WIDGETS_H
#define AMPPROBE_TUI_WIDGETS_H

#include "tui.h"

#include <stddef.h>

// Prints at (y, x), clipped to w columns; the rest of the w columns is left as it was.
void tui_print(int y, int x, int w, int attr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// attr for a colour pair, or the monochrome fallback when colour is off.
int tui_attr(const tui_app *app, int pair);

// Draws values as a sparkline filling r (r.h rows, the last r.w values; NaN leaves a gap).
// log2: plot log2(v) (loss scales). Returns the number of values shown.
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
