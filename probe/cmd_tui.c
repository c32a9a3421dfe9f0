/*
 * cmd_tui.c — `ampprobe tui FILE`: the terminal UI on a run database, following it while its
 * run is going and replaying it when it has ended (tui/tui.h).
 */
#include "commands.h"
#include "tui.h"

#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: ampprobe tui [--] FILE\n"
    "\n"
    "Shows a run database in the terminal: live while its run is going (new rows within a\n"
    "second), a replay when it has ended. Views: 1 overview (step time, loss and loss-scale\n"
    "sparklines, event counts, the top finding), 2 layers (per-layer dtype, amax, headroom,\n"
    "underflow, NaN/Inf at the shown step), 3 kernels (CUDA kernels by time), 4 events.\n"
    "\n"
    "keys: Tab/1-4 views, j/k or arrows move, s sort, / filter, p pause/follow,\n"
    "      [ ] previous/next step, P next process (ranks), ? help, q quit.\n"
    "      NO_COLOR=1 turns colour off.\n"
    "\n"
    "'ampprobe run --tui -- PROG' records a program and shows it here as it runs.\n"
    "The TUI only reads the database. Exit status: 0 on q; 128+N when signal N ended it (the\n"
    "terminal restored first); 2 for a usage error, an unreadable FILE (also one found damaged\n"
    "while shown: the message follows the restored screen), or a terminal that cannot move the\n"
    "cursor (TERM=dumb).\n";

int amp_cmd_tui(int argc, char **argv) {
    const char *file = NULL;
    bool options = true; // until "--": FILE may then start with '-'
    for (int i = 1; i < argc; i++) {
        if (options && strcmp(argv[i], "--") == 0) {
            options = false;
            continue;
        }
        if (options && (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (options && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "ampprobe tui: unknown option '%s' (see 'ampprobe tui --help')\n",
                    argv[i]);
            return 2;
        }
        if (file) {
            fprintf(stderr, "ampprobe tui: one FILE only ('%s' is a second)\n", argv[i]);
            return 2;
        }
        file = argv[i];
    }
    if (!file) {
        fprintf(stderr, "ampprobe tui: no FILE given (see 'ampprobe tui --help')\n");
        return 2;
    }
    return tui_run(file, NULL);
}
