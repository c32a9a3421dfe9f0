/*
 * model.c — the TUI's model (model.h): prepared, incremental SELECTs into plain arrays.
 *
 * Why it is cheap to follow a run: a poll first asks `PRAGMA data_version` and stops there when
 * no commit happened; otherwise each table is read from the rowid after the last one seen, so a
 * poll costs what is new, never a rescan. Two tables change rows in place: AMP_STEPS (the scale
 * record of a step lands on the row the step record made, or before it) and the aggregate rows
 * of AMP_EVENTS; the last few steps and the known aggregate rows are re-read by key.
 *
 * Why a poll stats the path first: `ampprobe run -f` deletes the file and records a new run at
 * the same path, and the open connection, still on the deleted file, then reads rows of the new
 * one (SQLite finds its -wal and -shm by name): two runs merged. A different file at the path
 * (device and inode) starts the model over on it; a path with none keeps what was read.
 */
#define _GNU_SOURCE
#include "model.h"

#include "amp-impl.h"
#include "report.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define STEPS_REREAD 8            // trailing AMP_STEPS rows a poll reads again (upserts)
#define FINDING_MIN_NS 1000000000 // the report core runs at most once a second ...
#define FINDING_CPU_SHARE 0.03    // ... and within 3% of a core since the model was opened

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double col_f64(sqlite3_stmt *q, int i) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

static int64_t col_i64(sqlite3_stmt *q, int i, int64_t none) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? none : sqlite3_column_int64(q, i);
}

static void col_copy(sqlite3_stmt *q, int i, char *dst, size_t n) {
    const char *t = (const char *)sqlite3_column_text(q, i);
    snprintf(dst, n, "%s", t ? t : "");
}

static char *col_dup(sqlite3_stmt *q, int i) {
    const char *t = (const char *)sqlite3_column_text(q, i);
    return t ? amp_xstrdup(t) : NULL;
}

const char *tui_stat_kind_name(tui_stat_kind k) {
    static const char *const names[] = {"act", "agrad", "weight", "wgrad", "update", "other"};
    return names[k];
}

static tui_stat_kind parse_kind(const char *s) {
    if (!s) return TUI_KIND_OTHER;
    if (strcmp(s, "activation") == 0) return TUI_KIND_ACT;
    if (strcmp(s, "activation_grad") == 0) return TUI_KIND_AGRAD;
    if (strcmp(s, "weight") == 0) return TUI_KIND_WEIGHT;
    if (strcmp(s, "weight_grad") == 0) return TUI_KIND_WGRAD;
    if (strcmp(s, "weight_update") == 0) return TUI_KIND_UPDATE;
    return TUI_KIND_OTHER;
}

static int severity_rank(const char *s) {
    return strcmp(s, "error") == 0 ? 2 : strcmp(s, "warning") == 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// Statements

static const char sql_version[] = "PRAGMA data_version";
// (the feeds leave out rows whose pid is no 32-bit integer, as the report does: REPORT_PID_OK)
static const char sql_meta[] =
    "SELECT key, value, pid FROM META WHERE key IN ('status', 'exit_status', 'exit_signal', "
    "'start_ns', 'end_ns', 'command', 'device', 'precision', 'trace', 'exception', 'abort') "
    "ORDER BY CASE WHEN key IN ('exception', 'abort') THEN rowid ELSE pid END"; // as the report
// %s: mem_peak_bytes, or NULL in a database of a schema before 1.2
static const char sql_steps[] =
    "SELECT rowid, pid, step, end_ns - start_ns, loss, scale_after, skipped, %s, scale_before, "
    "loss_finite = 0 FROM AMP_STEPS "
    "WHERE rowid >= ?1 AND " REPORT_PID_OK " ORDER BY rowid";
static const char sql_events[] =
    "SELECT id, pid, step, last_step, layer_id, op, phase, kind, severity, count, aggregate, "
    "occurrences FROM AMP_EVENTS WHERE id > ?1 AND " REPORT_PID_OK " ORDER BY id";
static const char sql_event_by_id[] =
    "SELECT id, pid, step, last_step, layer_id, op, phase, kind, severity, count, aggregate, "
    "occurrences FROM AMP_EVENTS WHERE id = ?1";
static const char sql_layers[] =
    "SELECT rowid, pid, id, name FROM AMP_LAYERS WHERE rowid > ?1 AND " REPORT_PID_OK
    " ORDER BY rowid";
static const char sql_stats_feed[] =
    "SELECT rowid, pid, step FROM AMP_TENSOR_STATS WHERE rowid > ?1 AND " REPORT_PID_OK
    " ORDER BY rowid";
#define STATS_COLS                                                                                 \
    "layer_id, kind, dtype, target_dtype, numel, amax, n_nan, n_posinf, n_neginf, "                \
    "n_underflow, n_zero FROM AMP_TENSOR_STATS "
static const char sql_stats_step[] = "SELECT " STATS_COLS "WHERE pid = ?1 AND step = ?2";
static const char sql_stats_range[] =
    "SELECT " STATS_COLS "WHERE rowid BETWEEN ?3 AND ?4 AND pid = ?1 AND step = ?2";
// (a row that ends before it starts is an incomplete record: left out, as the report does)
static const char sql_kernels[] =
    "SELECT rowid, shortName, \"end\" - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > ?1 "
    "AND \"end\" >= start ORDER BY rowid";
static const char sql_string[] = "SELECT value FROM StringIds WHERE id = ?1";

// A query failed with rc. A busy or locked database (a live run's writer) is asked again on the
// next poll; anything else (a damaged file, an I/O error) is the model's error, kept: the first.
static void query_failed(tui_model *m, int rc) {
    int code = rc & 0xff;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED) {
        m->retry = true;
        return;
    }
    if (m->error[0]) return;
    snprintf(m->error, sizeof m->error, "%s: %s", m->path, sqlite3_errmsg(m->db));
    amp_one_line(m->error);
    m->error_code = code;
}

// sqlite3_step of a SELECT: true on a row; false at its end, or on an error (query_failed).
// After a failed one none is run until the next poll (a busy database would make each of them
// wait out the busy timeout).
static bool next_row(tui_model *m, sqlite3_stmt *q) {
    if (m->retry || m->error[0]) return false;
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) query_failed(m, rc);
    return false;
}

static bool prepare(tui_model *m, const char *sql, sqlite3_stmt **q, char *err) {
    if (sqlite3_prepare_v2(m->db, sql, -1, q, NULL) == SQLITE_OK) return true;
    snprintf(err, AMP_STORE_ERR_MAX, "%s: cannot read the run (%s)", m->path,
             sqlite3_errmsg(m->db));
    return false;
}

// ---------------------------------------------------------------------------------------------
// META, layers, steps

// Returns true when the run's state changed (it ended, its exit status or what the program
// died of came).
static bool poll_meta(tui_model *m) {
    bool was_complete = m->complete;
    int was_exit = m->exit_status, was_signal = m->exit_signal;
    const char *was_exception = m->exception;
    sqlite3_stmt *q = m->q_meta;
    while (next_row(m, q)) {
        const char *key = (const char *)sqlite3_column_text(q, 0);
        const char *value = (const char *)sqlite3_column_text(q, 1);
        bool run_wide = sqlite3_column_int(q, 2) == 0;
        if (!key || !value) continue;
        const bool run_key = strcmp(key, "status") == 0 || strcmp(key, "exit_status") == 0 ||
                             strcmp(key, "exit_signal") == 0 || strcmp(key, "start_ns") == 0 ||
                             strcmp(key, "end_ns") == 0;
        if (run_key && !run_wide) continue; // a program's own row of that name, not the run's
        if (strcmp(key, "status") == 0) {
            m->complete = strcmp(value, "complete") == 0;
        } else if (strcmp(key, "exit_status") == 0) {
            m->exit_status = atoi(value);
        } else if (strcmp(key, "exit_signal") == 0) {
            m->exit_signal = atoi(value);
        } else if (strcmp(key, "start_ns") == 0) {
            m->start_ns = strtoll(value, NULL, 10);
        } else if (strcmp(key, "end_ns") == 0) {
            m->end_ns = strtoll(value, NULL, 10);
        } else {
            char **dst = strcmp(key, "command") == 0     ? &m->command
                         : strcmp(key, "device") == 0    ? &m->device
                         : strcmp(key, "precision") == 0 ? &m->precision
                         : strcmp(key, "trace") == 0     ? &m->trace
                                                         : &m->exception;
            if (!*dst) *dst = amp_xstrdup(value);
        }
    }
    sqlite3_reset(q);
    if (m->exception != was_exception) // one line on screen
        for (char *c = m->exception; *c; c++)
            if ((unsigned char)*c < 0x20) *c = ' ';
    return m->complete != was_complete || m->exit_status != was_exit ||
           m->exit_signal != was_signal || m->exception != was_exception;
}

static int cmp_layer_name(const void *a, const void *b) {
    const struct tui_layer_name *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool poll_layers(tui_model *m) {
    sqlite3_stmt *q = m->q_layers;
    sqlite3_bind_int64(q, 1, m->last_layer_rowid);
    size_t before = m->n_layers;
    while (next_row(m, q)) {
        m->last_layer_rowid = sqlite3_column_int64(q, 0);
        AMP_GROW(m->layers, m->n_layers, m->cap_layers);
        m->layers[m->n_layers++] = (struct tui_layer_name){
            .pid = sqlite3_column_int(q, 1), .id = sqlite3_column_int(q, 2), .name = col_dup(q, 3)};
    }
    sqlite3_reset(q);
    if (m->n_layers == before) return false;
    amp_sort(m->layers, m->n_layers, sizeof *m->layers, cmp_layer_name);
    return true;
}

const char *tui_model_layer_name(const tui_model *m, int32_t pid, int32_t layer_id) {
    if (layer_id < 0) return NULL;
    struct tui_layer_name key = {.pid = pid, .id = layer_id};
    const struct tui_layer_name *l =
        amp_search(&key, m->layers, m->n_layers, sizeof *m->layers, cmp_layer_name);
    return l ? l->name : NULL;
}

_Static_assert(TUI_LABEL_MAX >= REPORT_UNDECLARED_MAX, "an undeclared layer's name fits");

const char *tui_model_layer_label(const tui_model *m, int32_t pid, int32_t layer_id, char *buf,
                                  size_t size) {
    if (layer_id < 0) return NULL;
    const char *name = tui_model_layer_name(m, pid, layer_id);
    if (name) return name;
    report_undeclared_layer(buf, size, layer_id);
    return buf;
}

ptrdiff_t tui_model_step_index(const tui_model *m, int64_t step) {
    ptrdiff_t lo = 0, hi = (ptrdiff_t)m->n_steps - 1, best = -1;
    while (lo <= hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if (m->steps[mid].step <= step) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

static bool same_double(double a, double b) {
    return a == b || (isnan(a) && isnan(b));
}

static bool same_step(const tui_step *a, const tui_step *b) {
    return a->rowid == b->rowid && same_double(a->time_ms, b->time_ms) &&
           same_double(a->loss, b->loss) && same_double(a->scale, b->scale) &&
           same_double(a->scale_before, b->scale_before) && a->skipped == b->skipped &&
           a->loss_nonfinite == b->loss_nonfinite && same_double(a->mem_mib, b->mem_mib);
}

// Where pid is, or would go, in the sorted step_pids.
static size_t step_pid_slot(const tui_model *m, int32_t pid) {
    size_t lo = 0, hi = m->n_step_pids;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (m->step_pids[mid] < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Counts pid among the processes that recorded steps (kept sorted: a binary search a row).
static void note_step_pid(tui_model *m, int32_t pid) {
    size_t lo = step_pid_slot(m, pid);
    if (lo < m->n_step_pids && m->step_pids[lo] == pid) return;
    AMP_GROW(m->step_pids, m->n_step_pids, m->cap_step_pids);
    memmove(m->step_pids + lo + 1, m->step_pids + lo, (m->n_step_pids - lo) * sizeof *m->step_pids);
    m->step_pids[lo] = pid;
    m->n_step_pids++;
}

size_t tui_model_process_index(const tui_model *m) {
    size_t k = step_pid_slot(m, m->pid);
    return k < m->n_step_pids ? k : 0;
}

static bool poll_steps(tui_model *m) {
    sqlite3_stmt *q = m->q_steps;
    // Re-read the trailing rows too: the collector upserts a step's record and its scale.
    int64_t from = m->n_steps > STEPS_REREAD ? m->steps[m->n_steps - STEPS_REREAD].rowid
                   : m->n_steps              ? m->steps[0].rowid
                                             : m->last_step_rowid + 1;
    if (from > m->last_step_rowid + 1) from = m->last_step_rowid + 1;
    sqlite3_bind_int64(q, 1, from);
    bool changed = false;
    while (next_row(m, q)) {
        int64_t rowid = sqlite3_column_int64(q, 0);
        if (rowid > m->last_step_rowid) m->last_step_rowid = rowid;
        int32_t pid = sqlite3_column_int(q, 1);
        if (!m->pid) m->pid = pid;
        note_step_pid(m, pid);
        if (pid != m->pid) continue;
        tui_step s = {.rowid = rowid,
                      .step = sqlite3_column_int64(q, 2),
                      .time_ms = col_f64(q, 3) / 1e6,
                      .loss = col_f64(q, 4),
                      .scale = col_f64(q, 5),
                      .skipped = col_i64(q, 6, 0) != 0,
                      .mem_mib = col_f64(q, 7) / 1048576,
                      .scale_before = col_f64(q, 8),
                      .loss_nonfinite = col_i64(q, 9, 0) != 0};
        ptrdiff_t i = tui_model_step_index(m, s.step);
        if (i >= 0 && m->steps[i].step == s.step) {
            if (same_step(&m->steps[i], &s)) continue;
            m->steps[i] = s;
        } else {
            AMP_GROW(m->steps, m->n_steps, m->cap_steps);
            size_t at = (size_t)(i + 1);
            memmove(m->steps + at + 1, m->steps + at, (m->n_steps - at) * sizeof *m->steps);
            m->steps[at] = s;
            m->n_steps++;
        }
        changed = true;
    }
    sqlite3_reset(q);
    return changed;
}

// ---------------------------------------------------------------------------------------------
// Events

static void read_event(sqlite3_stmt *q, tui_event *e) {
    *e = (tui_event){.id = sqlite3_column_int64(q, 0),
                     .pid = sqlite3_column_int(q, 1),
                     .step = col_i64(q, 2, -1),
                     .last_step = col_i64(q, 3, -1),
                     .layer_id = (int32_t)col_i64(q, 4, -1),
                     .count = col_i64(q, 9, -1),
                     .aggregate = sqlite3_column_int(q, 10) != 0,
                     .occurrences = sqlite3_column_int64(q, 11)};
    // (a damaged row's count, held so that the sums cannot overflow)
    if (e->occurrences > INT64_C(1) << 40) e->occurrences = INT64_C(1) << 40;
    col_copy(q, 5, e->op, sizeof e->op);
    col_copy(q, 6, e->phase, sizeof e->phase);
    col_copy(q, 7, e->kind, sizeof e->kind);
    col_copy(q, 8, e->severity, sizeof e->severity);
    if (e->last_step < 0) e->last_step = e->step;
}

static void count_events(tui_model *m) {
    m->n_counts = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const tui_event *e = &m->events[i];
        size_t k = 0;
        while (k < m->n_counts && strcmp(m->counts[k].kind, e->kind) != 0)
            k++;
        if (k == m->n_counts) {
            AMP_GROW(m->counts, m->n_counts, m->cap_counts);
            m->counts[k] = (tui_event_count){.n = 0};
            snprintf(m->counts[k].kind, sizeof m->counts[k].kind, "%s", e->kind);
            m->n_counts++;
        }
        m->counts[k].n += e->occurrences;
        int sev = severity_rank(e->severity);
        if (sev > m->counts[k].severity) m->counts[k].severity = sev;
    }
}

// reread_aggregates: the run was going at the last poll, so aggregate rows may have grown.
static bool poll_events(tui_model *m, bool reread_aggregates) {
    bool changed = false;
    // Aggregate rows grow in place while the run goes on: re-read them by id.
    if (reread_aggregates) {
        sqlite3_stmt *q = m->q_event_by_id;
        for (size_t i = 0; i < m->n_events; i++) {
            if (!m->events[i].aggregate) continue;
            sqlite3_bind_int64(q, 1, m->events[i].id);
            if (next_row(m, q)) {
                tui_event e;
                read_event(q, &e);
                const tui_event *o = &m->events[i];
                if (e.occurrences != o->occurrences || e.last_step != o->last_step ||
                    e.count != o->count) {
                    m->events[i] = e;
                    changed = true;
                }
            }
            sqlite3_reset(q);
        }
    }
    sqlite3_stmt *q = m->q_events;
    sqlite3_bind_int64(q, 1, m->last_event_id);
    while (next_row(m, q)) {
        AMP_GROW(m->events, m->n_events, m->cap_events);
        tui_event *e = &m->events[m->n_events++];
        read_event(q, e);
        m->last_event_id = e->id;
        changed = true;
    }
    sqlite3_reset(q);
    if (changed) count_events(m);
    return changed;
}

// ---------------------------------------------------------------------------------------------
// Statistics of one step

// Follows AMP_TENSOR_STATS by rowid and remembers each step's rowid range (live runs only: a
// finished run has the (pid, step) index instead).
static bool poll_stats_feed(tui_model *m) {
    sqlite3_stmt *q = m->q_stats_feed;
    sqlite3_bind_int64(q, 1, m->last_stats_rowid);
    bool changed = false;
    while (next_row(m, q)) {
        int64_t rowid = sqlite3_column_int64(q, 0);
        int32_t pid = sqlite3_column_int(q, 1);
        int64_t step = sqlite3_column_int64(q, 2);
        m->last_stats_rowid = rowid;
        if (!m->pid) m->pid = pid;
        if (pid != m->pid) continue;
        struct tui_stats_range *r = NULL;
        for (size_t i = m->n_ranges; i-- > 0 && i + 4 >= m->n_ranges;) // steps arrive in order
            if (m->ranges[i].step == step) {
                r = &m->ranges[i];
                break;
            }
        if (!r) {
            AMP_GROW(m->ranges, m->n_ranges, m->cap_ranges);
            r = &m->ranges[m->n_ranges++];
            *r = (struct tui_stats_range){.step = step, .lo = rowid};
        }
        r->hi = rowid;
        if (step > m->stats_step) m->stats_step = step;
        if (step == m->rows_step) m->rows_step = -1; // the shown step grew: reload it
        changed = true;
    }
    sqlite3_reset(q);
    return changed;
}

static double dtype_max(const char *dtype) {
    if (strcmp(dtype, "f16") == 0) return REPORT_F16_MAX;
    if (strcmp(dtype, "bf16") == 0) return REPORT_BF16_MAX;
    if (strcmp(dtype, "f32") == 0) return 3.4028234663852886e38;
    return NAN;
}

static int dtype_rank(const char *dtype) { // narrower first
    return strcmp(dtype, "f16") == 0 ? 0 : strcmp(dtype, "bf16") == 0 ? 1 : 2;
}

typedef struct raw_stat {
    int32_t layer_id;
    tui_stat_kind kind;
    char dtype[8];
    int64_t numel, n_nan, n_posinf, n_neginf, n_underflow; // -1: not counted
    double amax;
    // an fp16 gradient that is all zero (amax 0, more than one value): lost to underflow
    // upstream, as the report's grad-underflow rule counts it (its values were never subnormal
    // here, so n_underflow does not)
    bool zero_lost;
} raw_stat;

static int cmp_raw(const void *a, const void *b) {
    const raw_stat *x = a, *y = b;
    if (x->layer_id != y->layer_id) return x->layer_id < y->layer_id ? -1 : 1;
    if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
    int c = dtype_rank(x->dtype) - dtype_rank(y->dtype);
    return c ? c : strcmp(x->dtype, y->dtype);
}

// One row per (layer, kind, dtype): a layer's f16 tensors and its f32 ones (the scaled loss's
// gradient beside a reshape's, say) on rows of their own, so that a row's amax, its headroom to
// its dtype's max and its counts are all of the same tensors.
static void fold_rows(tui_model *m, raw_stat *raw, size_t n) {
    amp_sort(raw, n, sizeof *raw, cmp_raw);
    m->n_rows = 0;
    int64_t counted = 0, underflow = 0;
    for (size_t i = 0; i < n; i++) {
        const raw_stat *s = &raw[i];
        tui_layer_row *r = m->n_rows ? &m->rows[m->n_rows - 1] : NULL;
        if (!r || r->layer_id != s->layer_id || r->kind != s->kind ||
            strcmp(r->dtype, s->dtype) != 0) {
            AMP_GROW(m->rows, m->n_rows, m->cap_rows);
            r = &m->rows[m->n_rows++];
            *r = (tui_layer_row){.layer_id = s->layer_id,
                                 .name = s->layer_id < 0 ? "(no layer)" : NULL,
                                 .kind = s->kind,
                                 .amax = NAN,
                                 .headroom_bits = NAN,
                                 .underflow_pct = NAN};
            if (!r->name) { // (an undeclared layer's label is pointed at once rows stops moving)
                const char *name =
                    tui_model_layer_label(m, m->pid, s->layer_id, r->label, sizeof r->label);
                r->name = name == r->label ? NULL : name;
            }
            snprintf(r->dtype, sizeof r->dtype, "%s", s->dtype);
            counted = underflow = 0;
        }
        r->tensors++;
        r->numel += s->numel;
        if (s->n_nan >= 0 || s->n_posinf >= 0 || s->n_neginf >= 0) r->nonfinite_counted = true;
        r->n_nan += s->n_nan > 0 ? s->n_nan : 0;
        r->n_posinf += s->n_posinf > 0 ? s->n_posinf : 0;
        r->n_neginf += s->n_neginf > 0 ? s->n_neginf : 0;
        if (!isnan(s->amax) && (isnan(r->amax) || s->amax > r->amax)) {
            r->amax = s->amax;
            const double max = dtype_max(r->dtype);
            r->headroom_bits = isnan(max) ? NAN : r->amax <= 0 ? INFINITY : log2(max / r->amax);
        }
        if (s->n_underflow >= 0 || s->zero_lost) {
            counted += s->numel;
            underflow += s->zero_lost ? s->numel : s->n_underflow;
            r->underflow_pct = counted ? 100.0 * (double)underflow / (double)counted : 0;
        }
    }
    for (size_t i = 0; i < m->n_rows; i++)
        if (!m->rows[i].name) m->rows[i].name = m->rows[i].label;
}

// A count no tensor has (past 2^40) is a damaged row's: held there, so that sums cannot overflow.
static int64_t held(int64_t n) {
    return n > INT64_C(1) << 40 ? INT64_C(1) << 40 : n;
}

static void load_step(tui_model *m, int64_t step) {
    sqlite3_stmt *q;
    if (m->stats_indexed) {
        q = m->q_stats_step;
    } else {
        const struct tui_stats_range *r = NULL;
        for (size_t lo = 0, hi = m->n_ranges; lo < hi;) { // ranges are sorted by step
            size_t mid = lo + (hi - lo) / 2;
            if (m->ranges[mid].step < step)
                lo = mid + 1;
            else if (m->ranges[mid].step > step)
                hi = mid;
            else {
                r = &m->ranges[mid];
                break;
            }
        }
        m->rows_step = step;
        m->n_rows = 0;
        if (!r) return;
        q = m->q_stats_range;
        sqlite3_bind_int64(q, 3, r->lo);
        sqlite3_bind_int64(q, 4, r->hi);
    }
    sqlite3_bind_int64(q, 1, m->pid);
    sqlite3_bind_int64(q, 2, step);
    raw_stat *raw = NULL;
    size_t n = 0, cap = 0;
    while (next_row(m, q)) {
        AMP_GROW(raw, n, cap);
        raw_stat *s = &raw[n++];
        const char *kind = (const char *)sqlite3_column_text(q, 1);
        const char *dtype = (const char *)sqlite3_column_text(q, 2);
        const char *target = (const char *)sqlite3_column_text(q, 3);
        *s = (raw_stat){.layer_id = (int32_t)col_i64(q, 0, -1),
                        .kind = parse_kind(kind),
                        .numel = held(col_i64(q, 4, 0)),
                        .amax = col_f64(q, 5),
                        .n_nan = held(col_i64(q, 6, -1)),
                        .n_posinf = held(col_i64(q, 7, -1)),
                        .n_neginf = held(col_i64(q, 8, -1)),
                        .n_underflow = held(col_i64(q, 9, -1))};
        if (s->kind == TUI_KIND_UPDATE) s->n_underflow = held(col_i64(q, 10, -1)); // rounded away
        snprintf(s->dtype, sizeof s->dtype, "%s", dtype ? dtype : target ? target : "?");
        s->zero_lost = (s->kind == TUI_KIND_AGRAD || s->kind == TUI_KIND_WGRAD) && target &&
                       strcmp(target, "f16") == 0 && s->amax == 0 && s->numel > 1 &&
                       s->n_nan <= 0 && s->n_posinf <= 0 && s->n_neginf <= 0; // (NULL: 0, as
                                                                              // the report reads)
    }
    sqlite3_reset(q);
    fold_rows(m, raw, n);
    free(raw);
    m->rows_step = m->retry ? -1 : step; // a busy database: read again on the next show
}

void tui_model_show_step(tui_model *m, int64_t step) {
    if (step == m->rows_step || m->error[0]) return;
    load_step(m, step);
    m->generation++;
}

// ---------------------------------------------------------------------------------------------
// Kernels

static size_t slot_of(const tui_model *m, int64_t name_id) {
    uint64_t h = (uint64_t)name_id * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & (m->n_slots - 1);
    while (m->kernel_slots[i] && m->kernels[m->kernel_slots[i] - 1].name_id != name_id)
        i = (i + 1) & (m->n_slots - 1);
    return i;
}

static void rehash(tui_model *m) {
    free(m->kernel_slots);
    m->n_slots = m->n_slots ? 2 * m->n_slots : 256;
    m->kernel_slots = amp_xcalloc(m->n_slots, sizeof *m->kernel_slots);
    for (size_t k = 0; k < m->n_kernels; k++)
        m->kernel_slots[slot_of(m, m->kernels[k].name_id)] = (int64_t)k + 1;
}

static tui_kernel *kernel_entry(tui_model *m, int64_t name_id) {
    if (2 * (m->n_kernels + 1) > m->n_slots) rehash(m);
    size_t i = slot_of(m, name_id);
    if (m->kernel_slots[i]) return &m->kernels[m->kernel_slots[i] - 1];
    AMP_GROW(m->kernels, m->n_kernels, m->cap_kernels);
    tui_kernel *k = &m->kernels[m->n_kernels++];
    *k = (tui_kernel){.name_id = name_id};
    sqlite3_bind_int64(m->q_string, 1, name_id);
    k->name = next_row(m, m->q_string) ? col_dup(m->q_string, 0) : NULL;
    sqlite3_reset(m->q_string);
    if (!k->name) {
        char buf[32];
        snprintf(buf, sizeof buf, "string#%lld", (long long)name_id);
        k->name = amp_xstrdup(buf);
    }
    m->kernel_slots[i] = (int64_t)m->n_kernels;
    return k;
}

static bool poll_kernels(tui_model *m) {
    sqlite3_stmt *q = m->q_kernels;
    sqlite3_bind_int64(q, 1, m->last_kernel_rowid);
    bool changed = false;
    while (next_row(m, q)) {
        m->last_kernel_rowid = sqlite3_column_int64(q, 0);
        const int64_t ns = sqlite3_column_int64(q, 2);
        if (ns < 0 || ns > INT64_C(1) << 46) continue; // (a damaged row: left out, as the report)
        tui_kernel *k = kernel_entry(m, sqlite3_column_int64(q, 1));
        amp_add_sat(&k->total_ns, ns);
        k->count++;
        amp_add_sat(&m->kernel_ns, ns);
        m->kernel_count++;
        changed = true;
    }
    sqlite3_reset(q);
    return changed;
}

// ---------------------------------------------------------------------------------------------
// The file at the path

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

// Sets m->file from what is at the path now; a new file that can be read starts the model over
// on it (a fresh model: the new run alone, never merged with what was read).
static void check_file(tui_model *m) {
    struct stat sb;
    const tui_file_state was = m->file;
    if (stat(m->path, &sb) != 0) {
        // (EACCES, EIO, ... say nothing of which file is there: it is read as before)
        if (errno == ENOENT || errno == ENOTDIR) m->file = TUI_FILE_REMOVED;
    } else if ((uint64_t)sb.st_dev == m->file_dev && (uint64_t)sb.st_ino == m->file_ino) {
        m->file = TUI_FILE_SAME;
    } else {
        tui_model fresh;
        char err[AMP_STORE_ERR_MAX];
        if (tui_model_open(&fresh, m->path, err) == AMP_OK) {
            fresh.generation += m->generation + 1; // past any generation a view was built from
            fresh.restarts = m->restarts + 1;
            tui_model_free(m);
            *m = fresh;
            return;
        }
        // (the launcher creates the file empty, then its tables: tried again at the next poll)
        m->file = TUI_FILE_REPLACED;
        snprintf(m->file_error, sizeof m->file_error, "%s", err);
    }
    if (m->file != was) m->generation++;
}

// ---------------------------------------------------------------------------------------------
// The top finding, from the report core on the finder's thread

// The report reads the whole run, so its cost grows with the run. A request is made only when
// the CPU spent on findings so far plus the next one (the last cost scaled by the growth in
// steps since) fits in FINDING_CPU_SHARE of the time since open: on a long live run findings
// come ever more rarely (the overview says which step the finding is as of), and once more when
// the run has ended.
static bool poll_finding(tui_model *m) {
    if (!m->finder) return false;
    double wall_ms, cpu_ms;
    tui_finding fresh;
    bool changed = tui_finder_take(m->finder, &fresh, &wall_ms, &cpu_ms);
    int64_t now = mono_ns();
    if (changed && fresh.busy) {
        // another connection holds the database: the last finding stays, asked again a second on
        tui_finding_free(&fresh);
        m->finding_stale = true;
        m->asked_final = false; // (the ended run's did not go through)
        m->next_finding_ns = now + FINDING_MIN_NS;
        return false;
    }
    if (changed && fresh.error[0] && m->asked_final) {
        // the report could not read the ended run: nothing will write it again to mend that
        snprintf(m->error, sizeof m->error, "%s", fresh.error);
        tui_finding_free(&fresh);
        return true;
    }
    if (changed) {
        if (fresh.error[0]) m->finding_stale = true; // a live run: asked again, shown meanwhile
        tui_finding_free(&m->finding);
        m->finding = fresh;
        m->finding_ms = wall_ms;
        m->finding_cpu_ms = cpu_ms;
        m->finding_cpu_total_ms += cpu_ms;
        // the step the report's read reached (the run may have gone on since it was asked)
        m->finding_step = fresh.as_of_step >= 0 ? fresh.as_of_step : m->asked_step;
        m->next_finding_ns = now + FINDING_MIN_NS;
    }
    if (!m->finding_stale || now < m->next_finding_ns) return changed;
    double growth = m->asked_steps && m->n_steps > m->asked_steps
                        ? (double)m->n_steps / (double)m->asked_steps
                        : 1;
    double budget_ms = FINDING_CPU_SHARE * (double)(now - m->opened_ns) / 1e6;
    const bool ended = m->complete || m->cut_short; // it will not grow: one last finding
    bool final = ended && !m->asked_final;
    // the first error (a NaN producer, broken data) is worth a finding at once, budget or not
    bool first_error = false;
    for (size_t i = 0; i < m->n_counts && !m->asked_on_error; i++)
        first_error |= m->counts[i].severity == 2;
    const bool in_budget = m->finding_cpu_total_ms + m->finding_cpu_ms * growth <= budget_ms;
    if ((final || first_error || in_budget) && tui_finder_request(m->finder)) {
        m->finding_stale = false;
        m->asked_on_error |= first_error;
        m->asked_final = ended;
        m->asked_steps = m->n_steps;
        m->asked_step = m->n_steps ? m->steps[m->n_steps - 1].step : -1;
    }
    return changed;
}

// ---------------------------------------------------------------------------------------------
// Open, poll, free

static void read_all(tui_model *m) {
    bool was_complete = m->complete;
    bool changed = poll_meta(m);
    changed |= poll_layers(m);
    changed |= poll_steps(m);
    if (!m->stats_indexed) changed |= poll_stats_feed(m);
    changed |= poll_events(m, !was_complete);
    changed |= poll_kernels(m);
    if (!changed) return;
    m->generation++;
    m->finding_stale = true; // rules read steps and statistics too, not only events
}

amp_status tui_model_open(tui_model *m, const char *path, char err[AMP_STORE_ERR_MAX]) {
    *m = (tui_model){.exit_status = -1,
                     .exit_signal = -1,
                     .rows_step = -1,
                     .stats_step = -1,
                     .data_version = -1,
                     .finding_step = -1,
                     .asked_step = -1};
    // The file opened is the one stat sees both before and after the open (the connection opens
    // it in between): one replaced meanwhile is opened again.
    amp_status st;
    struct stat before, after;
    for (int tries = 0;; tries++) {
        const bool seen = stat(path, &before) == 0;
        st = amp_store_open_readonly(path, &m->db, err);
        if (st != AMP_OK) return st;
        if (seen && stat(path, &after) == 0 && same_file(&before, &after)) break;
        sqlite3_close(m->db);
        m->db = NULL;
        if (tries == 2) {
            snprintf(err, AMP_STORE_ERR_MAX, "%s: replaced by another file while being opened",
                     path);
            return AMP_ERR_IO;
        }
    }
    m->file_dev = (uint64_t)before.st_dev;
    m->file_ino = (uint64_t)before.st_ino;
    m->path = amp_xstrdup(path);
    sqlite3_stmt *idx = NULL;
    if (!prepare(m,
                 "SELECT 1 FROM sqlite_master WHERE type = 'index' AND "
                 "tbl_name = 'AMP_TENSOR_STATS'",
                 &idx, err))
        goto fail;
    m->stats_indexed = next_row(m, idx);
    sqlite3_finalize(idx);
    char steps_sql[sizeof sql_steps + 16];
    snprintf(steps_sql, sizeof steps_sql, sql_steps,
             amp_store_has_column(m->db, "AMP_STEPS", "mem_peak_bytes") ? "mem_peak_bytes"
                                                                        : "NULL");
    if (!prepare(m, sql_version, &m->q_version, err) || !prepare(m, sql_meta, &m->q_meta, err) ||
        !prepare(m, steps_sql, &m->q_steps, err) || !prepare(m, sql_events, &m->q_events, err) ||
        !prepare(m, sql_event_by_id, &m->q_event_by_id, err) ||
        !prepare(m, sql_layers, &m->q_layers, err) ||
        !prepare(m, sql_stats_feed, &m->q_stats_feed, err) ||
        !prepare(m, sql_stats_step, &m->q_stats_step, err) ||
        !prepare(m, sql_stats_range, &m->q_stats_range, err) ||
        !prepare(m, sql_kernels, &m->q_kernels, err) || !prepare(m, sql_string, &m->q_string, err))
        goto fail;
    m->finder = tui_finder_new(path);
    m->opened_ns = mono_ns();
    tui_model_poll(m);
    if (m->error[0]) {
        snprintf(err, AMP_STORE_ERR_MAX, "%s", m->error);
        if (m->error_code == SQLITE_CORRUPT || m->error_code == SQLITE_NOTADB) st = AMP_ERR_CORRUPT;
        goto fail;
    }
    if (m->stats_indexed && m->n_steps) m->stats_step = m->steps[m->n_steps - 1].step;
    return AMP_OK;
fail:
    tui_model_free(m);
    *m = (tui_model){0};
    amp_one_line(err);
    return st != AMP_OK ? st : AMP_ERR_IO;
}

void tui_model_show_process(tui_model *m, int32_t pid) {
    if (pid == m->pid) return;
    m->pid = pid;
    m->n_steps = 0;
    m->last_step_rowid = 0;
    m->n_rows = 0;
    m->rows_step = -1;
    m->stats_step = -1;
    if (!m->stats_indexed) { // the rowid ranges of pid's steps: learnt again from the start
        m->n_ranges = 0;
        m->last_stats_rowid = 0;
    }
    m->data_version = -1; // the next poll reads everything again
    tui_model_poll(m);
    if (m->stats_indexed && m->n_steps) m->stats_step = m->steps[m->n_steps - 1].step;
    m->generation++;
}

bool tui_model_poll(tui_model *m) {
    if (m->error[0]) return false; // nothing more is read: the TUI ends with the error
    uint64_t before = m->generation;
    const unsigned restarts = m->restarts;
    check_file(m);
    if (m->restarts != restarts) return true; // a fresh model on the new file at the path
    if (m->file != TUI_FILE_SAME) return m->generation != before; // nothing more is read
    const bool reread = m->retry; // the last poll met a busy database: everything is read again
    if (reread) {
        m->retry = false;
        m->data_version = -1;
    }
    int64_t version = -1;
    if (next_row(m, m->q_version)) version = sqlite3_column_int64(m->q_version, 0);
    sqlite3_reset(m->q_version);
    if (m->error[0]) {
        check_file(m); // a failure of a file that is no longer at the path is not the new one's
        return true;
    }
    if (version != m->data_version && !m->retry) {
        m->data_version = version;
        // One read transaction, so that the tables agree with each other.
        sqlite3_exec(m->db, "BEGIN", NULL, NULL, NULL);
        read_all(m);
        sqlite3_exec(m->db, "COMMIT", NULL, NULL, NULL);
        check_file(m); // a file put at the path meanwhile may have lent this read its rows
        if (m->restarts != restarts) return true;
        if (m->error[0]) return true;
        if (m->file != TUI_FILE_SAME) return m->generation != before;
        if (reread && !m->retry) m->generation++; // and the shown step's statistics reloaded
    }
    // A collector that was killed leaves the status running and writes nothing more, so the
    // data version stays put: asked once a second.
    if (!m->complete && !m->cut_short && mono_ns() >= m->next_state_ns) {
        m->next_state_ns = mono_ns() + 1000000000;
        if (amp_store_run_state(m->db) == AMP_RUN_CUT_SHORT) {
            m->cut_short = true;
            m->finding_stale = true; // the report's run-end rule says so
            m->generation++;
        }
    }
    if (poll_finding(m)) m->generation++;
    return m->generation != before;
}

void tui_model_free(tui_model *m) {
    if (!m) return;
    tui_finder_free(m->finder);
    tui_finding_free(&m->finding);
    sqlite3_stmt *qs[] = {m->q_version,     m->q_meta,    m->q_steps,      m->q_events,
                          m->q_event_by_id, m->q_layers,  m->q_stats_feed, m->q_stats_step,
                          m->q_stats_range, m->q_kernels, m->q_string};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
        sqlite3_finalize(qs[i]);
    sqlite3_close(m->db);
    for (size_t i = 0; i < m->n_layers; i++)
        free(m->layers[i].name);
    for (size_t i = 0; i < m->n_kernels; i++)
        free(m->kernels[i].name);
    free(m->layers);
    free(m->kernels);
    free(m->kernel_slots);
    free(m->steps);
    free(m->step_pids);
    free(m->events);
    free(m->counts);
    free(m->rows);
    free(m->ranges);
    free(m->path);
    free(m->command);
    free(m->device);
    free(m->trace);
    free(m->precision);
    free(m->exception);
    *m = (tui_model){0};
}
