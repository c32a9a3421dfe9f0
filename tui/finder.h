/*
 * finder.h — the report core's top finding (report.h), computed on a thread of its own with its
 * own read-only connection, so that a large run (the report loads every step and statistic:
 * seconds on 100k steps) never stalls a frame. The model asks for a fresh finding when the run
 * moved, within a CPU budget (model.c), and picks the result up on a later poll; freeing
 * interrupts a running query.
 */
#ifndef AMPPROBE_TUI_FINDER_H
#define AMPPROBE_TUI_FINDER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tui_finding {
    bool valid;   // false: no warning or error (yet): a healthy run so far
    int severity; // amp_severity
    char rule[32];
    int64_t first_step; // -1: none
    char layer[160], op[64];
    char title[512];
} tui_finding;

typedef struct tui_finder tui_finder;

// Starts the thread for the database at path. NULL when no thread could be started.
tui_finder *tui_finder_new(const char *path);
// Asks for a fresh finding; ignored while one is being computed (then false).
bool tui_finder_request(tui_finder *f);
// true when a finding computed since the last take is there: copied to out, with its cost in
// wall time and in the thread's CPU time.
bool tui_finder_take(tui_finder *f, tui_finding *out, double *wall_ms, double *cpu_ms);
// Stops the thread (interrupting a running query) and frees. NULL is a no-op.
void tui_finder_free(tui_finder *f);

#endif
