/*
 * fuzz_tui.c — a libFuzzer target: the TUI driven by a sequence of keys on a terminal of a size
 * the input picks (drawn off-screen, on /dev/null), over a run of two processes: tiny_gpt's
 * attention overflow and the record helper's capture (kernels, copies, NVTX), made once from the
 * spool seeds of tests/fuzz/seeds/spool (fuzz_make_run). The first two bytes give the columns
 * (10..209) and rows (3..72); each further byte is a key: ASCII as it is (filter text, Tab, Enter,
 * Backspace, Esc), 0x80 and up one of the cursor and page keys, a back-tab, or a resize (to the
 * sizes the next two bytes give). Every key is followed by the frame's update and draw. Whatever
 * the keys and the size, the TUI must not crash. Built and run by tests/fuzz/run.sh.
 */
#include "fuzz.h"

#include "amp-store.h"
#include "layout.h"
#include "tui.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>

static char db[96];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static char dir[64];
    fuzz_make_run("tui", dir, db);
    return 0;
}

static const int special[] = {KEY_UP,   KEY_DOWN, KEY_PPAGE, KEY_NPAGE,
                              KEY_HOME, KEY_END,  KEY_BTAB,  KEY_RESIZE};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int cols = 10 + data[0] % 200, rows = 3 + data[1] % 70;
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    if (tui_app_open(&app, db, NULL, err) != AMP_OK) {
        fprintf(stderr, "fuzz_tui: %s\n", err);
        abort();
    }
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    SCREEN *scr = newterm("xterm", out, in);
    if (!scr) abort();
    resizeterm(rows, cols);
    tui_layout l;
    tui_layout_compute(cols, rows, &l);
    tui_app_update(&app);
    tui_app_draw(&app, &l);
    for (size_t i = 2; i < size; i++) {
        int ch = data[i];
        if (ch >= 0x80) {
            ch = special[(ch - 0x80) % (sizeof special / sizeof *special)];
            if (ch == KEY_RESIZE && i + 2 < size) {
                cols = 10 + data[i + 1] % 200;
                rows = 3 + data[i + 2] % 70;
                i += 2;
                resizeterm(rows, cols);
                tui_layout_compute(cols, rows, &l);
            }
        }
        if (tui_app_key(&app, ch, &l) & TUI_REDO_QUIT) break;
        tui_app_update(&app);
        tui_app_draw(&app, &l);
    }
    endwin();
    delscreen(scr);
    fclose(out);
    fclose(in);
    tui_app_free(&app);
    return 0;
}
