/*
 * amp-store.h — the run database: the collector that writes it and the checked read-only open
 * that every reader (report, tui, tests) goes through.
 *
 * The collector is the single SQLite writer of a run. It tails every spool file that appears
 * in the spool directory (one per recording process, amp-record.h), decodes the records and
 * inserts them with prepared statements, one transaction per poll (WAL, synchronous=NORMAL),
 * so rows are visible to readers about 200 ms after they reach the spool. When the run ends it
 * ingests what is left, builds the indexes, writes the end time and exit status into META and
 * removes the spool directory. `ampprobe run` drives it from its main loop; a process with
 * AMPPROBE_OUT=file drives it from a thread of its own.
 *
 *     amp_collector_t *c;
 *     if (amp_collector_new("run.sqlite", spool_dir, &c) != AMP_OK) fail(amp_last_error());
 *     amp_collector_set_meta(c, "command", "python train.py");
 *     while (program_runs()) { amp_collector_poll(c); sleep_ms(200); }
 *     amp_collector_finish(c, exit_status);
 *     amp_collector_free(c);
 *
 * Readers:
 *
 *     sqlite3 *db;
 *     char err[AMP_STORE_ERR_MAX];
 *     if (amp_store_open_readonly(path, &db, err) != AMP_OK) { fprintf(stderr, "%s\n", err); ... }
 *
 * The tables are documented column by column in probe/SCHEMA.md.
 */
#ifndef AMP_STORE_H
#define AMP_STORE_H

#include "amp.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sqlite3 sqlite3;

// Schema version, stored in META as schema_version = "MAJOR.MINOR". A minor version only adds
// tables or columns; readers refuse a database of a newer major version.
#define AMP_SCHEMA_MAJOR 1
#define AMP_SCHEMA_MINOR 2

#define AMP_STORE_ERR_MAX 512

// Opens an ampprobe database read-only (also while its run is still being written). On failure
// *db is NULL and errbuf holds one line naming the file (control characters in the name or in
// SQLite's words shown as '?'): it does not exist, is not an ampprobe database, is truncated or
// corrupt, or was written by a newer schema. Returns AMP_ERR_IO,
// AMP_ERR_CORRUPT or AMP_ERR_UNSUPPORTED (newer major version) then. Close with sqlite3_close.
amp_status amp_store_open_readonly(const char *path, sqlite3 **db, char errbuf[AMP_STORE_ERR_MAX]);
// Whether table has column: a reader's question about a column that a minor version added
// (AMP_STEPS.mem_peak_bytes, 1.2), which an older database lacks.
bool amp_store_has_column(sqlite3 *db, const char *table, const char *column);
// How far a run's recording got, from META: its collector finished it (status complete, or no
// status: a database older than the key); it is still being recorded (status running, and the
// collector, META.collector_pid, still runs on this machine); or it was cut short (running,
// but the collector is gone: its launcher was killed; or it runs on another host). Inside a read
// transaction a capture that finished since the snapshot reads as cut short: ask again after it.
typedef enum amp_run_state { AMP_RUN_COMPLETE, AMP_RUN_RECORDING, AMP_RUN_CUT_SHORT } amp_run_state;
amp_run_state amp_store_run_state(sqlite3 *db);

// ---------------------------------------------------------------------------------------------
// The collector

typedef struct amp_collector amp_collector_t;

typedef struct amp_collector_stats {
    int64_t records;     // records ingested
    int64_t rows;        // rows inserted or updated
    int64_t steps;       // step records
    int step_processes;  // processes that sent them (the ranks of a data-parallel job)
    int64_t last_step;   // -1 before the first step record
    double last_step_ms; // duration of that step; NaN before
    double last_loss;    // NaN before (or when the loss was NaN)
    double scale;        // latest scale_after; NaN before the first scale record
    int64_t skipped;     // skipped optimizer steps
    int64_t events;      // event records (before aggregation)
    int files;           // spool files seen
    int live_writers;    // spool files whose writer is still running
    int warnings;        // truncated or corrupt spool files, unreadable headers
    const char *stopped; // why recording stopped short of the run (META capture_error; valid
                         // until amp_collector_free); NULL: it did not
} amp_collector_stats;

// A second process image of a pid (an exec() into a program that records, a pid the system
// reused) is recorded as pid + k * AMP_PID_IMAGE_SPAN, its k-th later image: above any pid
// (Linux's PID_MAX_LIMIT), so that no two images share the rows of one pid (SCHEMA.md).
#define AMP_PID_IMAGE_SPAN (1 << 22)

// Creates the database db_path and writes the run's first META rows (schema version, clock,
// start time, host). db_path must not exist, or be an empty file the caller created to claim
// the name. spool_dir must exist; NULL creates a fresh one next to the database (removed by
// finish, or by free when it is still empty). AMP_ERR_IO (naming the path) on failure.
amp_status amp_collector_new(const char *db_path, const char *spool_dir, amp_collector_t **out);
// In a child forked from the collector's process (AMPPROBE_OUT: the program's own collector):
// closes the child's copies of the descriptors that hold the collector's locks, so that they end
// with the parent's (a child that outlived it kept the run live, and itself recording); the child
// must not use c otherwise.
void amp_collector_forget_in_child(amp_collector_t *c);
// Creates db_path (which must not exist) to claim the name, and returns a descriptor of it that
// holds an exclusive flock (read-only and above 0-2: a program's writes to a closed stdout cannot
// reach the file), for amp_collector_new_locked. -1 with errno set when it cannot be created
// (EEXIST: it exists); on a file system without locks the descriptor holds none.
int amp_collector_claim(const char *db_path);
// The same for a database file the caller created to claim the name and holds an exclusive
// flock on through lock_fd (an open descriptor of db_path): the collector takes the descriptor
// over, so that the run shows live to amp_collector_db_busy from the name's creation on (an
// `ampprobe run --force` started meanwhile replaced the file); closed with the collector, or at
// once when this fails.
amp_status amp_collector_new_locked(const char *db_path, const char *spool_dir, int lock_fd,
                                    amp_collector_t **out);
// Whether a live collector (of this or another process) is writing the database at db_path.
bool amp_collector_db_busy(const char *db_path);
// The spool directory: what producers get as AMPPROBE_SPOOL_DIR.
const char *amp_collector_spool_dir(const amp_collector_t *c);
// What the spool directory a collector makes for db_path is named: this prefix (".NAME.spool-"
// beside the database) and six random characters. Freed by the caller.
char *amp_spool_dir_prefix(const char *db_path);
// Sets a run-wide META row (pid 0): the command line, options, ...
amp_status amp_collector_set_meta(amp_collector_t *c, const char *key, const char *value);
// Ingests the records that reached the spool files since the last call, in one transaction (or
// one per ~200 ms when far behind), for about 200 ms at most: a collector far behind (writers
// outpacing it) goes on at the next call, so that its caller stays responsive (the launcher
// passes signals on between polls). Truncated or corrupt spool files are warned about on stderr
// once and skipped from the bad spot on; they never fail the poll. AMP_ERR_IO if the database
// cannot be written.
amp_status amp_collector_poll(amp_collector_t *c);
// The same with a time budget of budget_ns (> 0): it stops after the 4 MiB read that passes it.
amp_status amp_collector_poll_for(amp_collector_t *c, int64_t budget_ns);
void amp_collector_get_stats(const amp_collector_t *c, amp_collector_stats *out);
// The process ids of up to max writers still running (as of the last poll) into out; returns
// how many (out NULL: how many there are, max aside). The launcher passes its signals on to them.
int amp_collector_live_pids(const amp_collector_t *c, int32_t *out, int max);
// Ingests the rest, builds the indexes, writes the end time and exit_status (shell convention,
// 128+signal; < 0: unknown) into META, checkpoints the WAL and removes the spool files and
// directory. Writers still running at this point lose their later records (a warning says so).
// When recording stopped short (the database could not be written, or a process's spool was cut
// off by a full disk), META capture_error says why; records that could not be ingested are
// lost, the rest is finished all the same, and the ingest's error is returned.
amp_status amp_collector_finish(amp_collector_t *c, int exit_status);
// Closes the database (not finished when finish was not called). NULL is a no-op.
void amp_collector_free(amp_collector_t *c);

#ifdef __cplusplus
}
#endif
#endif // AMP_STORE_H
