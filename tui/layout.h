/*
 * layout.h — where everything goes on the screen: a pure function of the terminal size (no
 * curses, no model), so it is unit-tested without a terminal (nvtop's compute_sizes_from_layout).
 *
 *   row 0          header: the run, its state, the shown step
 *   row 1          tabs: 1 overview  2 layers  3 kernels  4 events
 *   rows 2..h-2    body: the view (tables: one heading row, then data rows)
 *   row h-1        footer: key hints, the filter being typed, messages
 *
 * The overview splits its body into the run lines, three sparklines (step time, loss, loss
 * scale with a row marking skipped steps), and at the bottom the event counts beside the
 * latest finding; sparklines get taller on taller terminals.
 */
#ifndef AMPPROBE_TUI_LAYOUT_H
#define AMPPROBE_TUI_LAYOUT_H

#include <stdbool.h>

#define TUI_MIN_COLS 40
#define TUI_MIN_ROWS 14

typedef struct tui_rect {
    int x, y, w, h;
} tui_rect;

typedef struct tui_layout {
    int cols, rows;
    bool too_small; // below TUI_MIN_COLS x TUI_MIN_ROWS: only a message is drawn
    tui_rect header, tabs, body, footer;
    int table_rows; // data rows of a table view (body minus its heading row)
    // The overview's panels, inside body. A sparkline panel is one title row, then its graph.
    tui_rect ov_run, ov_time, ov_loss, ov_scale, ov_skips, ov_counts, ov_finding;
} tui_layout;

void tui_layout_compute(int cols, int rows, tui_layout *out);

#endif
