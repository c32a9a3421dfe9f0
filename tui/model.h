/*
 * model.h — the TUI's model: the run database polled into plain structs (no curses here).
 *
 * A live run is followed with cheap incremental queries only: every table is read by rowid
 * past the last row seen (a live database has no secondary indexes), rows the collector
 * updates in place (the latest AMP_STEPS rows, aggregate AMP_EVENTS rows) are re-read by
 * primary key, and `PRAGMA data_version` skips the whole poll when nothing was committed.
 * The per-layer statistics of one step (the shown step) are loaded on demand: through the
 * (pid, step) index in a finished run, through the step's rowid range (learnt while following)
 * in a live one. The model never writes to the database. A query that fails is not taken for
 * "no rows": a damaged file (or an I/O error) sets m.error; a busy database is read again.
 * Each poll first asks whether the file at the path is still the one opened (its device and
 * inode): `ampprobe run -f` deletes it and records a new run there, and the open connection would
 * then read the new run's rows beside the old one's. A new file starts the model over on it (a
 * fresh model, m.restarts counts them); none keeps what was read (m.file says which).
 *
 *     tui_model m;
 *     char err[AMP_STORE_ERR_MAX];
 *     if (tui_model_open(&m, "run.sqlite", err) != AMP_OK) fail(err);
 *     for (;;) {
 *         if (tui_model_poll(&m)) ...               // something new: update the views
 *         tui_model_show_step(&m, step);            // the layers view's step
 *         if (m.error[0]) fail(m.error);            // "run.sqlite: database disk image is ..."
 *     }
 *     tui_model_free(&m);
 */
#ifndef AMPPROBE_TUI_MODEL_H
#define AMPPROBE_TUI_MODEL_H

#include "amp-store.h"
#include "finder.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sqlite3_stmt sqlite3_stmt;

typedef struct tui_step {
    int64_t rowid;
    int64_t step;
    double time_ms;      // end - start; NaN: not recorded yet
    double loss;         // NaN: NaN, or not recorded
    bool loss_nonfinite; // the step recorded a NaN/inf loss (not: no step record came)
    double scale;        // scale after the step's update; NaN: no GradScaler
    double scale_before; // the scale the step ran with (before its update); NaN: none
    bool skipped;        // the optimizer step was skipped
    double mem_mib; // most memory held by tensors up to the step's end (MiB); NaN: not recorded
} tui_step;

typedef struct tui_event {
    int64_t id;
    int32_t pid, layer_id;      // layer -1: none
    int64_t step, last_step;    // last_step: latest occurrence (aggregate rows)
    int64_t count, occurrences; // count -1: unknown
    bool aggregate;
    char kind[32], severity[8], op[32], phase[8]; // "" when NULL
} tui_event;

typedef struct tui_event_count {
    char kind[32];
    int64_t n;    // occurrences (aggregate rows count what they fold)
    int severity; // highest seen: 0 info, 1 warning, 2 error
} tui_event_count;

typedef enum tui_stat_kind {
    TUI_KIND_ACT,   // activation: forward output
    TUI_KIND_AGRAD, // activation gradient
    TUI_KIND_WEIGHT,
    TUI_KIND_WGRAD,  // weight gradient
    TUI_KIND_UPDATE, // an optimizer step's update of a 16-bit parameter: its "underflow" the
                     // values the update left unchanged (rounded away)
    TUI_KIND_OTHER
} tui_stat_kind;

// One (layer, kind, dtype) at the shown step: its tensors of that storage dtype folded together
// (a layer's f16 and f32 tensors of one kind are two rows, so that every figure of a row is of
// the same tensors).
// Room for an undeclared layer's name ("layer -2147483648 (not declared)", the report's words).
#define TUI_LABEL_MAX 40

typedef struct tui_layer_row {
    int32_t layer_id;          // -1: outside any layer
    const char *name;          // owned by the model, or label
    char label[TUI_LABEL_MAX]; // an undeclared layer's name
    tui_stat_kind kind;
    char dtype[8]; // the tensors' storage dtype ("f16", "bf16", "f32", ...)
    int64_t tensors, numel;
    double amax;          // largest finite |x|; NaN: no finite value
    double headroom_bits; // log2(dtype max / amax): of its tensor nearest the dtype's max; NaN: no
                          // finite value, or a dtype without a known max
    double underflow_pct; // values lost to 0/subnormal in dtype, %; NaN: not counted
    int64_t n_nan, n_posinf, n_neginf; // of the tensors whose counts were computed
    bool nonfinite_counted;            // false: no tensor's NaN/inf counts were (shown as "-")
} tui_layer_row;

typedef struct tui_kernel {
    int64_t name_id; // StringIds id of shortName
    char *name;
    int64_t total_ns, count;
} tui_kernel;

// The file at the model's path, as the latest poll found it.
typedef enum tui_file_state {
    TUI_FILE_SAME,     // the file opened
    TUI_FILE_REMOVED,  // none: what was read stays, nothing more is read
    TUI_FILE_REPLACED, // another one, not readable yet (a new run being created; file_error
                       // says why): what was read stays, the new one is tried at each poll
} tui_file_state;

typedef struct tui_model {
    sqlite3 *db;
    char *path;
    uint64_t file_dev, file_ino; // the file opened (stat of path around the open)
    tui_file_state file;
    char file_error[AMP_STORE_ERR_MAX]; // TUI_FILE_REPLACED: why the new file cannot be read
    unsigned restarts; // times the model started over on a new file at path (a new run)
    // META (run-wide and the program's own rows)
    char *command, *device, *precision;
    char *trace;     // what ampprobe run recorded (--trace: "amp,cuda,nvtx"); NULL: not said
    char *exception; // what the program died of (META exception or abort); NULL: none
    bool complete;   // META.status = complete: the run has ended and will not grow
    bool cut_short;  // not complete, but its collector is gone (the launcher was
                     // killed): it will not grow either (AMP_RUN_CUT_SHORT)
    int exit_status; // -1: unknown (not recorded) or still running
    int exit_signal; // the signal that killed the program (META exit_signal); 0: it
                     // exited by itself; -1: not recorded (older launchers, no launcher)
    int64_t start_ns, end_ns; // 0: unknown
    int32_t pid;              // the process whose steps and statistics are shown; 0 before any
    // Processes that recorded steps (the ranks of a data-parallel job), sorted.
    int32_t *step_pids;
    size_t n_step_pids, cap_step_pids;
    // Steps of pid, sorted by step.
    tui_step *steps;
    size_t n_steps, cap_steps;
    // Events of every process, in arrival order, and their totals per kind.
    tui_event *events;
    size_t n_events, cap_events;
    tui_event_count *counts;
    size_t n_counts, cap_counts;
    // Layer names of every process, sorted by (pid, id).
    struct tui_layer_name {
        int32_t pid, id;
        char *name;
    } * layers;
    size_t n_layers, cap_layers;
    // Statistics of the shown step, one row per (layer, kind, dtype), sorted by layer id, kind,
    // then dtype (narrowest first).
    tui_layer_row *rows;
    size_t n_rows, cap_rows;
    int64_t rows_step;  // the step rows holds; -1: none loaded
    int64_t stats_step; // the latest step with statistics; -1: none
    // Kernels by total time (CUPTI_ACTIVITY_KIND_KERNEL), aggregated by shortName.
    tui_kernel *kernels;
    size_t n_kernels, cap_kernels;
    int64_t *kernel_slots; // open-addressing hash name_id -> index + 1; 0: empty
    size_t n_slots;
    int64_t kernel_ns, kernel_count;
    tui_finding finding; // the report core's top finding, refreshed as the run moves
    double finding_ms;   // wall time of the latest refresh (on the finder's thread); 0: none yet
    double finding_cpu_ms, finding_cpu_total_ms; // CPU time of the latest one, of all
    int64_t finding_step; // the newest step when the finding was asked for; -1: none
    tui_finder *finder;   // NULL: no thread, no finding
    uint64_t generation;  // bumped whenever the model changed: views rebuild when it moves
    // Incremental cursors and the statistics' rowid ranges per step (live runs).
    int64_t data_version;
    int64_t last_step_rowid, last_event_id, last_layer_rowid, last_stats_rowid, last_kernel_rowid;
    bool stats_indexed; // AMP_TENSOR_STATS has its (pid, step) index: the run was finished
    struct tui_stats_range {
        int64_t step, lo, hi;
    } * ranges;
    size_t n_ranges, cap_ranges;
    bool finding_stale; // the run moved since the finding was asked for
    int64_t next_finding_ns, opened_ns;
    int64_t next_state_ns; // when to ask again whether the collector still runs
    size_t asked_steps;    // steps when the finding in the works (or the latest) was asked for
    int64_t asked_step;
    bool asked_final;    // the finding of the ended run was asked for
    bool asked_on_error; // a finding was asked for after the first error-severity event
    // The first failed read that asking again will not mend (a damaged file: SQLITE_CORRUPT,
    // SQLITE_NOTADB; an I/O error; the report's, for an ended run), as "FILE: message"; ""
    // while none. Once set the model reads nothing more, and the TUI ends with it. A busy or
    // locked database (SQLITE_BUSY, SQLITE_LOCKED) is not one: the next poll reads again.
    char error[AMP_STORE_ERR_MAX];
    int error_code; // SQLite's primary result code of error; 0 for the report's
    bool retry;     // a read met a busy or locked database: the next poll reads everything
    sqlite3_stmt *q_version, *q_meta, *q_steps, *q_events, *q_event_by_id, *q_layers, *q_stats_feed,
        *q_stats_step, *q_stats_range, *q_kernels, *q_string;
} tui_model;

// Opens path read-only (amp_store_open_readonly: one line in err for a missing, foreign,
// truncated or newer file; one line too when a damaged file cannot be read) and loads everything
// recorded so far (a read of it that fails: m->error's line in err).
amp_status tui_model_open(tui_model *m, const char *path, char err[AMP_STORE_ERR_MAX]);
// Reads what was committed since the last poll. Returns true when the model changed. A read
// that fails for good sets m->error (see there); the model is not read again then. When another
// file is at the path, the model is freed and opened again on it (m->restarts + 1; pointers
// into the old model's arrays are stale); when none is, it is kept as it was (m->file).
bool tui_model_poll(tui_model *m);
// Loads the statistics of step into rows (no-op when it is loaded already and the run has not
// moved). A step without statistics leaves rows empty.
void tui_model_show_step(tui_model *m, int64_t step);
// Shows the steps and statistics of process pid (one of step_pids: the ranks of a data-parallel
// run) from now on; reads its steps again, and in a live run AMP_TENSOR_STATS again to learn its
// steps' rowid ranges (a scan of what is recorded so far). A no-op for the shown one.
void tui_model_show_process(tui_model *m, int32_t pid);
// The index of the shown process in step_pids; 0 when there is none.
size_t tui_model_process_index(const tui_model *m);
// Index of the step record of step, or of the nearest earlier one; -1 when none.
ptrdiff_t tui_model_step_index(const tui_model *m, int64_t step);
// The name of a layer; NULL for -1 or an unknown id.
const char *tui_model_layer_name(const tui_model *m, int32_t pid, int32_t layer_id);
// What a layer is shown as: its name, "layer N (not declared)" (written into buf) for an id that
// AMP_LAYERS does not declare (a producer that skipped amp_record_layer), NULL for -1.
const char *tui_model_layer_label(const tui_model *m, int32_t pid, int32_t layer_id, char *buf,
                                  size_t size);
// Short names: "act", "agrad", "weight", "wgrad".
const char *tui_stat_kind_name(tui_stat_kind k);
// NULL is a no-op.
void tui_model_free(tui_model *m);

#endif
