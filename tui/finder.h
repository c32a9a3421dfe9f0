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
#include <stddef.h>
#include <stdint.h>

typedef struct tui_kernel_layer {
    char *kernel;      // shortName
    char *layer;       // the layer most of its time ran in (report_kernel), "name +N" for N
                       // others; NULL: no op claims it
    const char *bound; // its class as the report's roofline has it (report_kernel_class)
} tui_kernel_layer;

typedef struct tui_finding {
    bool valid;   // false: no warning or error (yet): a healthy run so far
    int severity; // amp_severity
    char rule[32];
    int64_t first_step; // -1: none
    int64_t as_of_step; // the last step recorded (by any process) when the report read the run;
                        // -1: none
    char layer[160], op[160];
    char title[512];
    char error[512]; // the report could not read the run: why, in one line ("FILE: ..."); "": it
                     // could (valid or not)
    bool busy;       // error is a busy or locked database: asking again may go through
    // The report's kernels (their layers and classes), sorted by name; owned (tui_finding_free)
    tui_kernel_layer *kernel_layers;
    size_t n_kernel_layers;
} tui_finding;

typedef struct tui_finder tui_finder;

// Starts the thread for the database at path. NULL when no thread could be started.
tui_finder *tui_finder_new(const char *path);
// Asks for a fresh finding; ignored while one is being computed (then false).
bool tui_finder_request(tui_finder *f);
// true when a finding computed since the last take is there: moved to out (which the caller
// frees), with its cost in wall time and in the thread's CPU time.
bool tui_finder_take(tui_finder *f, tui_finding *out, double *wall_ms, double *cpu_ms);
// The layer label of kernel in f (NULL: not tied to a layer, or not known yet).
const char *tui_finding_kernel_layer(const tui_finding *f, const char *kernel);
// The bound class the report gives kernel in f ("compute", "memory", "launch", "comm"; NULL: not
// known yet).
const char *tui_finding_kernel_class(const tui_finding *f, const char *kernel);
// Frees what f owns and empties it.
void tui_finding_free(tui_finding *f);
// Stops the thread (interrupting a running query) and frees. NULL is a no-op.
void tui_finder_free(tui_finder *f);

#endif
