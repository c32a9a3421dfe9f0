/*
 * layout.c — the screen layout as a pure function of its size (layout.h).
 */
#include "layout.h"

static tui_rect rect(int x, int y, int w, int h) {
    return (tui_rect){x, y, w, h};
}

void tui_layout_compute(int cols, int rows, tui_layout *l) {
    *l = (tui_layout){.cols = cols, .rows = rows};
    if (cols < TUI_MIN_COLS || rows < TUI_MIN_ROWS) {
        l->too_small = true;
        return;
    }
    l->header = rect(0, 0, cols, 1);
    l->tabs = rect(0, 1, cols, 1);
    l->footer = rect(0, rows - 1, cols, 1);
    l->body = rect(0, 2, cols, rows - 3);
    l->table_rows = l->body.h - 1;

    // Overview: run lines, then three sparklines, then counts | finding. At 80x24 the body
    // has 21 rows: 2 run, 3 + 3 + 4 sparklines (title + 2 graph rows, scale + a skip row),
    // 9 for the bottom panels. Spare rows go to the graphs first (up to 6 rows each), then to
    // the bottom panels; short terminals shrink the graphs to one row.
    int run_h = 2, bottom_min = 4;
    int avail = l->body.h - run_h - bottom_min - 4; // 3 titles + the skip row
    int graph = avail / 3;
    if (graph > 6) graph = 6;
    if (graph < 1) graph = 1;
    if (graph > 2 && l->body.h < 30) graph = 2; // 80x24: keep room for the finding
    int y = l->body.y;
    l->ov_run = rect(0, y, cols, run_h);
    y += run_h;
    l->ov_time = rect(0, y, cols, 1 + graph);
    y += 1 + graph;
    l->ov_loss = rect(0, y, cols, 1 + graph);
    y += 1 + graph;
    l->ov_scale = rect(0, y, cols, 1 + graph);
    y += 1 + graph;
    l->ov_skips = rect(0, y, cols, 1);
    y += 1;
    int bottom_h = l->body.y + l->body.h - y;
    int counts_w = cols >= 100 ? 36 : cols * 3 / 8;
    l->ov_counts = rect(0, y, counts_w, bottom_h);
    l->ov_finding = rect(counts_w + 1, y, cols - counts_w - 1, bottom_h);
}
