/*
 * report_model.c — the numerics side of the report model: reads the run database (read-only
 * SELECTs, narrowed to the focused steps) into report_model — META, how the run ended, the
 * layers, steps, events and statistics, grouped per process and model — with every string made
 * safe to print, and the lookups the rules make in it. The kernel side is report_perf.c.
 */
#include "report.h"

#include "amp-impl.h"
#include "amp-store.h"

#include <dirent.h>
#include <libgen.h>
#include <math.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// How many bytes of s's character at p the report keeps; 0: it becomes '?' (a style mark, a
// byte that is not UTF-8, and in a name any control character, C1's too).
static size_t kept(const char *p, bool name) {
    const unsigned char c = (unsigned char)*p;
    if ((c >= 1 && c <= 6) || (name && (c < 0x20 || c == 0x7f || amp_c1_control(p)))) return 0;
    return amp_utf8_seq(p, SIZE_MAX);
}

static bool clean(const char *s, bool name) {
    for (size_t n; *s; s += n)
        if (!(n = kept(s, name))) return false;
    return true;
}

static char *cleaned_copy(const char *s, bool name) {
    char *c = amp_xstrdup(s);
    for (char *p = c; *p;) {
        const size_t n = kept(p, name);
        if (n) {
            p += n;
        } else { // one '?' for the character (a C1 control is two bytes)
            const size_t seq = amp_c1_control(p) ? 2 : 1;
            *p++ = '?';
            if (seq > 1) memmove(p, p + seq - 1, strlen(p + seq - 1) + 1);
        }
    }
    return c;
}

char *report_strdup(const char *s) {
    return s ? cleaned_copy(s, false) : NULL;
}

char *report_strdup_name(const char *s) {
    return s ? cleaned_copy(s, true) : NULL;
}

const char *report_clean(const char *s, char **scratch) {
    if (clean(s, true)) return s;
    free(*scratch);
    return *scratch = cleaned_copy(s, true);
}

static char *col_str(sqlite3_stmt *q, int i) {
    return report_strdup((const char *)sqlite3_column_text(q, i));
}

static char *col_name(sqlite3_stmt *q, int i) {
    return report_strdup_name((const char *)sqlite3_column_text(q, i));
}

static double col_f64(sqlite3_stmt *q, int i) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? NAN : sqlite3_column_double(q, i);
}

static int64_t col_i64(sqlite3_stmt *q, int i, int64_t none) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? none : sqlite3_column_int64(q, i);
}

// Prepares sql with the focus bound to ?1 (its first step) and ?2 (its last), those of them the
// query has. false (err filled) on failure.
static bool prepare(sqlite3 *db, const char *path, const char *sql, const report_model *m,
                    sqlite3_stmt **q, char *err) {
    if (sqlite3_prepare_v2(db, sql, -1, q, NULL) != SQLITE_OK) {
        snprintf(err, REPORT_ERR_MAX, "%s: cannot read the run (%s)", path, sqlite3_errmsg(db));
        return false;
    }
    const int n = sqlite3_bind_parameter_count(*q);
    if (n >= 1) sqlite3_bind_int64(*q, 1, m->step_lo);
    if (n >= 2) sqlite3_bind_int64(*q, 2, m->step_hi);
    return true;
}

// Steps the query to its end; false (err filled) when it fails midway.
static bool finish(sqlite3 *db, const char *path, sqlite3_stmt *q, int rc, char *err) {
    sqlite3_finalize(q);
    if (rc == SQLITE_DONE) return true;
    snprintf(err, REPORT_ERR_MAX, "%s: cannot read the run (%s)", path, sqlite3_errmsg(db));
    return false;
}

// The META keys the report reads, and where each goes in the model.
static const struct {
    const char *key;
    size_t at; // offsetof(report_model, the field)
} meta_keys[] = {
#define META_KEY(key, field)                                                                       \
    { key, offsetof(report_model, field) }
    META_KEY("device", device),
    META_KEY("command", command),
    META_KEY("precision", precision),
    META_KEY("counters_reason", counters_reason),
    META_KEY("compiled", compiled),
    META_KEY("unwatched", unwatched),
    META_KEY("added_models", added_models),
    META_KEY("exception", exception),
    META_KEY("abort", exception),
    META_KEY("capture_error", capture_error),
    META_KEY("bridge_error", bridge_error),
    META_KEY("no_model", no_model),
    META_KEY("trace", trace),
    META_KEY("orphans", orphans),
    META_KEY("torch", torch),
    META_KEY("stats_every", stats_every),
    META_KEY("compute_dtype", compute_dtype),
    META_KEY("autocast_dtype", autocast_dtype),
    META_KEY("updates", updates),
    META_KEY("optimizer", optimizer),
    META_KEY("optimizer.eps", optimizer_eps),
    META_KEY("optimizer.fused", optimizer_fused),
    META_KEY("bridge", bridge),
#undef META_KEY
};

// A row whose pid is not a 32-bit integer (a damaged file: a real, a text, 2^40) is no process's:
// the queries that go by pid leave it out, so that SQLite's order of the pids and the ints they
// are read as agree (one read as another process's pid would break the merges by pid, leaving
// processes without their steps).
#define PID_OK REPORT_PID_OK

// META's run facts, the first process's; of the processes' exceptions and aborts, the first
// recorded (a rank's own before the launcher's that reports the rank's death: torchrun).
static bool load_meta(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    if (!prepare(db, m->path,
                 "SELECT key, value FROM META "
                 "ORDER BY CASE WHEN key IN ('exception', 'abort') THEN rowid ELSE pid END",
                 m, &q, err))
        return false;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(q, 0);
        for (size_t i = 0; key && i < sizeof meta_keys / sizeof *meta_keys; i++) {
            if (strcmp(key, meta_keys[i].key) != 0) continue;
            const char **dst = (const char **)((char *)m + meta_keys[i].at);
            if (!*dst) *dst = col_str(q, 1);
            break;
        }
    }
    return finish(db, m->path, q, rc, err);
}

// The spool directory of the database at path, if one is beside it (amp_spool_dir_prefix and
// six characters), into e->spool, with the bytes its files hold.
static void find_spool(report_end *e, const char *path) {
    char *copy = amp_xstrdup(path), *prefix = amp_spool_dir_prefix(path);
    const char *where = dirname(copy), *slash = strrchr(prefix, '/'),
               *name = slash ? slash + 1 : prefix;
    DIR *d = opendir(where);
    for (struct dirent *ent; d && !e->spool && (ent = readdir(d));) {
        if (strncmp(ent->d_name, name, strlen(name)) == 0)
            e->spool = amp_path_join(where, ent->d_name);
    }
    if (d) closedir(d);
    free(prefix);
    free(copy);
    if (!e->spool || !(d = opendir(e->spool))) return;
    for (struct dirent *ent; (ent = readdir(d));) {
        struct stat sb;
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", e->spool, ent->d_name);
        if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode))
            e->spool_bytes += (int64_t)sb.st_blocks * 512;
    }
    closedir(d);
}

// How the program and the capture ended (m->end): META's run-wide rows, the processes whose
// records were cut short, the last step of the whole run.
static bool load_end(sqlite3 *db, report_model *m, char *err) {
    report_end *e = &m->end;
    *e = (report_end){
        .exit_status = -1, .exit_signal = -1, .last_step = -1, .first_error_before = -1};
    e->capture = amp_store_run_state(db);
    if (e->capture == AMP_RUN_CUT_SHORT) find_spool(e, m->path);
    sqlite3_stmt *q;
    if (!prepare(db, m->path,
                 "SELECT key, value FROM META WHERE pid = 0 AND key IN ('exit_status', "
                 "'exit_signal')",
                 m, &q, err))
        return false;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const bool is_signal = strcmp((const char *)sqlite3_column_text(q, 0), "exit_signal") == 0;
        *(is_signal ? &e->exit_signal : &e->exit_status) = sqlite3_column_int(q, 1);
    }
    if (!finish(db, m->path, q, rc, err)) return false;

    if (!prepare(db, m->path,
                 "SELECT pid, name, status FROM AMP_PROCESSES WHERE status IN ('truncated', "
                 "'corrupt', 'unfinished') AND " PID_OK " ORDER BY pid",
                 m, &q, err))
        return false;
    size_t cap = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(e->cut, e->n_cut, cap);
        e->cut[e->n_cut++] = (report_cut){
            .pid = sqlite3_column_int(q, 0), .name = col_str(q, 1), .status = col_str(q, 2)};
    }
    if (!finish(db, m->path, q, rc, err)) return false;

    if (!prepare(db, m->path,
                 "SELECT step, MIN(loss_finite) FROM AMP_STEPS WHERE step = "
                 "(SELECT MAX(step) FROM AMP_STEPS)",
                 m, &q, err))
        return false;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        e->last_step = col_i64(q, 0, -1);
        e->last_loss_nonfinite = col_i64(q, 1, 1) == 0;
    }
    if (!finish(db, m->path, q, rc, err)) return false;
    if (m->step_lo == INT64_MIN) return true;

    if (!prepare(db, m->path,
                 "SELECT MIN(step) FROM AMP_EVENTS WHERE severity = 'error' AND step < ?1", m, &q,
                 err))
        return false;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        e->first_error_before = col_i64(q, 0, -1);
    return finish(db, m->path, q, rc, err);
}

static bool load_layers(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    if (!prepare(db, m->path,
                 "SELECT pid, id, name FROM AMP_LAYERS WHERE " PID_OK " ORDER BY pid, id", m, &q,
                 err))
        return false;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(m->layers, m->n_layers, cap);
        m->layers[m->n_layers++] = (report_layer){.pid = sqlite3_column_int(q, 0),
                                                  .id = sqlite3_column_int(q, 1),
                                                  .name = col_name(q, 2)};
    }
    return finish(db, m->path, q, rc, err);
}

enum { BROKE_LOSS, BROKE_SKIP, BROKE_SCALED, NO_SCALE };

// The model's broke_cum (report.h), once its steps are in.
static void build_broke_cum(report_model *m) {
    for (int k = 0; k < 4; k++)
        m->broke_cum[k] = amp_xcalloc(m->n_steps + 1, sizeof *m->broke_cum[k]);
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        const bool had[4] = {s->loss_nonfinite, s->skipped,
                             s->has_scale && (s->loss_nonfinite || s->found_inf || s->skipped),
                             !s->has_scale};
        for (int k = 0; k < 4; k++)
            m->broke_cum[k][i + 1] = m->broke_cum[k][i] + had[k];
    }
}

static bool load_steps(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT pid, step, loss, loss_finite, scale_before, scale_after, found_inf, "
             "skipped, start_ns, end_ns, %s, grad_norm FROM AMP_STEPS WHERE step BETWEEN ?1 "
             "AND ?2 AND " PID_OK " ORDER BY pid, step",
             amp_store_has_column(db, "AMP_STEPS", "mem_peak_bytes") ? "mem_peak_bytes" : "NULL");
    if (!prepare(db, m->path, sql, m, &q, err)) return false;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(m->steps, m->n_steps, cap);
        report_step *s = &m->steps[m->n_steps++];
        *s = (report_step){.pid = sqlite3_column_int(q, 0),
                           .step = sqlite3_column_int64(q, 1),
                           .loss = col_f64(q, 2),
                           .loss_finite = col_i64(q, 3, 0) != 0,
                           .has_loss = sqlite3_column_type(q, 3) != SQLITE_NULL,
                           .has_scale = sqlite3_column_type(q, 5) != SQLITE_NULL,
                           .scale_before = col_f64(q, 4),
                           .scale_after = col_f64(q, 5),
                           .found_inf = col_i64(q, 6, 0) != 0,
                           .skipped = col_i64(q, 7, 0) != 0,
                           .grad_amax = NAN,
                           .grad_amax_16 = NAN,
                           .grad_amax_weight = NAN,
                           .weight_amax = NAN,
                           .weight_growth = NAN,
                           .weight_from_step = -1,
                           .start_ns = col_i64(q, 8, -1),
                           .end_ns = col_i64(q, 9, -1),
                           .mem_peak = col_i64(q, 10, -1),
                           .grad_norm = col_f64(q, 11)};
        if (!isfinite(s->grad_norm)) s->grad_norm = NAN;
        if (!s->loss_finite && isfinite(s->loss)) s->loss = NAN; // a recorded NaN is stored as NULL
        s->loss_nonfinite = s->has_loss && !s->loss_finite;
    }
    if (!finish(db, m->path, q, rc, err)) return false;
    build_broke_cum(m);
    return true;
}

static void free_event_strings(report_event *e) {
    free((char *)e->op);
    free((char *)e->phase);
    free((char *)e->kind);
    free((char *)e->severity);
    free((char *)e->detail);
}

// Index of the first step record at or after (pid, step) in m->steps (sorted by pid, step).
static size_t step_lower(const report_model *m, int32_t pid, int64_t step) {
    size_t lo = 0, hi = m->n_steps;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const report_step *s = &m->steps[mid];
        if (s->pid < pid || (s->pid == pid && s->step < step))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Index of the first step record after (pid, step) in m->steps.
static size_t step_after(const report_model *m, int32_t pid, int64_t step) {
    if (step < INT64_MAX) return step_lower(m, pid, step + 1);
    return pid < INT32_MAX ? step_lower(m, pid + 1, INT64_MIN) : m->n_steps;
}

// Which break an event of kind can have happened in: a non-finite loss for a loss_nonfinite
// event; a skip for a step_skipped one; under a GradScaler, a step that broke (its loss
// non-finite, or inf/NaN gradients found) for the non-finite value events (a value event without
// a GradScaler: its NaN a mask or padding may keep from the loss). -1: the steps do not tell.
static int break_of(const char *kind) {
    if (strcmp(kind, AMP_EVENT_LOSS_NONFINITE) == 0) return BROKE_LOSS;
    if (strcmp(kind, AMP_EVENT_STEP_SKIPPED) == 0) return BROKE_SKIP;
    if (strcmp(kind, AMP_EVENT_NONFINITE_PRODUCER) == 0 ||
        strcmp(kind, AMP_EVENT_NONFINITE_PROPAGATED) == 0 || strcmp(kind, "nonfinite_input") == 0)
        return BROKE_SCALED;
    return -1;
}

// The first index i in [a, b) with cum[i + 1] >= v (the step of the v-th break counted in cum);
// b when none.
static size_t step_reaching(const int64_t *cum, size_t a, size_t b, int64_t v) {
    while (a < b) {
        const size_t mid = a + (b - a) / 2;
        if (cum[mid + 1] >= v)
            b = mid;
        else
            a = mid + 1;
    }
    return a;
}

// An aggregate row (occurrences folded in over steps step..last_step) that reaches past the
// focus, cut to it. Of a kind that only a broken step has (break_of), to the focused steps that
// broke so (none: *gone), as many occurrences as those steps at most: the row does not say which
// steps of its range had one, and a focus on a healthy step inside it must not find it broken.
// Otherwise, or where the steps do not tell, the steps inside, and its occurrences and elements
// in proportion to them (exactly, for the usual storm of one occurrence a step).
static void clip_to_focus(report_model *m, report_event *e, bool *gone) {
    *gone = false;
    const int64_t lo = m->step_lo, hi = m->step_hi;
    if (!e->aggregate || (e->step >= lo && e->last_step <= hi)) return;
    int64_t first = e->step > lo ? e->step : lo, last = e->last_step < hi ? e->last_step : hi;
    double share = ((double)last - (double)first + 1) / ((double)e->last_step - e->step + 1);
    const int k = break_of(e->kind);
    const size_t a = step_lower(m, e->pid, first), b = step_after(m, e->pid, last);
    const int64_t *cum = k >= 0 ? m->broke_cum[k] : NULL;
    const bool tells =
        cum && b > a &&
        (k != BROKE_SCALED || m->broke_cum[NO_SCALE][b] == m->broke_cum[NO_SCALE][a]);
    const int64_t before = e->occurrences;
    if (tells) {
        const int64_t broke = cum[b] - cum[a];
        if (!broke) {
            *gone = true;
            return;
        }
        first = m->steps[step_reaching(cum, a, b, cum[a] + 1)].step; // its first break
        last = m->steps[step_reaching(cum, a, b, cum[b])].step;      // and its last
        // one loss_nonfinite or step_skipped event a step that broke so: as many as those steps
        if (k != BROKE_SCALED)
            e->occurrences = broke < before ? broke : before;
        else {
            e->occurrences = (int64_t)ceil((double)e->occurrences * share);
            if (e->occurrences > broke) e->occurrences = broke;
        }
        share = (double)e->occurrences / (double)before;
    } else {
        e->occurrences = (int64_t)ceil((double)e->occurrences * share);
    }
    if (e->count >= 0) {
        const double c = ceil((double)e->count * share);
        e->count = c < 0x1p63 ? (int64_t)c : INT64_MAX;
    }
    e->step = first;
    e->last_step = last;
}

static bool load_events(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    if (!prepare(db, m->path,
                 "SELECT id, pid, step, IFNULL(last_step, step), layer_id, op, phase, "
                 "IFNULL(kind, ''), "
                 "severity, count, value, detail, aggregate, occurrences FROM AMP_EVENTS "
                 "WHERE step <= ?2 AND IFNULL(last_step, step) >= ?1 AND " PID_OK " ORDER BY id",
                 m, &q, err))
        return false;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(m->events, m->n_events, cap);
        m->events[m->n_events++] = (report_event){.id = sqlite3_column_int64(q, 0),
                                                  .pid = sqlite3_column_int(q, 1),
                                                  .step = col_i64(q, 2, -1),
                                                  .last_step = col_i64(q, 3, -1),
                                                  .layer_id = (int32_t)col_i64(q, 4, -1),
                                                  .op = col_name(q, 5),
                                                  .phase = col_str(q, 6),
                                                  .kind = col_str(q, 7),
                                                  .severity = col_str(q, 8),
                                                  .count = col_i64(q, 9, -1),
                                                  .value = col_f64(q, 10),
                                                  .detail = col_str(q, 11),
                                                  .aggregate = sqlite3_column_int(q, 12) != 0,
                                                  .occurrences = col_i64(q, 13, 1),
                                                  .detail_step = col_i64(q, 2, -1)};
        report_event *ev = &m->events[m->n_events - 1];
        // occurrences no run reaches (2^40, one a step) are a damaged row's: held there, so that
        // sums cannot overflow (the elements a row counts may be many more: summed saturating)
        const int64_t most = INT64_C(1) << 40;
        ev->occurrences = ev->occurrences < 1 ? 1 : ev->occurrences > most ? most : ev->occurrences;
        bool gone;
        clip_to_focus(m, ev, &gone);
        if (gone) { // outside the focus after all
            free_event_strings(ev);
            m->n_events--;
            continue;
        }
        const report_event *e = ev;
        if (strcmp(e->kind, AMP_EVENT_LOSS_NONFINITE) == 0)
            report_spans_add(&m->loss_events, e->pid, e->step, e->last_step, m->n_events - 1);
    }
    report_spans_sort(&m->loss_events);
    return finish(db, m->path, q, rc, err);
}

// Whether the layers a[0..n) and b[0..n) have the same names in the same order.
static bool same_layers(const report_layer *a, const report_layer *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i].id != b[i].id || strcmp(a[i].name ? a[i].name : "", b[i].name ? b[i].name : ""))
            return false;
    return true;
}

// Sets each process's model (report_process.model) from the layers (sorted by pid, id).
static void group_models(report_model *m) {
    size_t *first = amp_xcalloc(m->n_procs + 1, sizeof *first);
    size_t *n_layers = amp_xcalloc(m->n_procs + 1, sizeof *n_layers);
    for (size_t i = 0, k = 0; i < m->n_procs; i++) { // each process's layers: one run of them
        report_process *p = &m->procs[i];
        while (k < m->n_layers && m->layers[k].pid < p->pid)
            k++;
        first[i] = k;
        while (k < m->n_layers && m->layers[k].pid == p->pid)
            k++;
        n_layers[i] = k - first[i];
        p->model = p->pid;
        for (size_t j = 0; j < i && n_layers[i]; j++)
            if (m->procs[j].model == m->procs[j].pid && n_layers[j] == n_layers[i] &&
                same_layers(&m->layers[first[j]], &m->layers[first[i]], n_layers[i])) {
                p->model = m->procs[j].pid;
                break;
            }
    }
    free(first);
    free(n_layers);
}

// One step of p in step order into its divergence (report_process.diverged_step) and its largest
// loss: its loss (NaN: not finite or none) and gradient norm (NaN or inf: none). A step diverged
// when its own loss is twice the base with its own gradient norm ten times the base's, or, where
// it has no norm (a skipped step's is inf, a step --stats-every left out has none), its loss a
// hundredfold: a loss and a norm that peaked at different steps are noise. The base is the
// median of the process's first DIVERGE_BASE (positive) losses and norms short of a divergence.
// A run resumed from a checkpoint (its first step not 0) measures a trained model, whose batches
// may lie sixty times apart (its first a lucky 3e-5), which is noise too: there, before three
// of them are in the base, only a loss a hundredfold counts. A fresh run's first losses are an
// untrained model's, a few percent apart, and twice that is no batch's. In a resumed run a rise
// must stay up: one whose loss is back under twice the base within DIVERGE_STAY steps is a
// batch's (a fitted model trained on batches of one, some of them harder: 3e-5, 4e-5, 3e-4,
// 9e-4, 3e-5 over and over) unless it went a thousandfold (no batch is that much harder) or a
// step's loss in them is non-finite (the divergence overflowed); steps that end before that
// tell nothing.
static double median_of(const double *v, int n) {
    double c[DIVERGE_BASE];
    memcpy(c, v, (size_t)n * sizeof *v);
    return report_median(c, (size_t)n);
}

static void divergence_feed(report_process *p, int64_t step, double loss, double norm, bool broke) {
    if (p->first_step < 0) p->first_step = step;
    if (!isnan(loss) && !(loss <= p->loss_max)) p->loss_max = loss, p->loss_max_step = step;
    if (p->diverged_step >= 0 || !(p->loss0 > 0)) return;
    if (p->rise_step >= 0 && (broke || loss >= 2 * p->base_loss)) {
        if (broke || ++p->rise_n == DIVERGE_STAY || loss >= DIVERGE_SPIKE * p->base_loss)
            p->diverged_step = p->rise_step;
        return;
    }
    if (!isnan(loss)) p->rise_step = -1; // (back down, if it rose: a loss of 0 too)
    if (!(loss > 0)) return;
    const bool has_norm = norm > 0 && isfinite(norm);
    if (p->base_n > 0) {
        const bool norm_up = has_norm && p->base_norm > 0 ? norm >= 10 * p->base_norm : true;
        const bool resumed = p->first_step > 0;
        const int settled = resumed ? 3 : 1; // (resumed: three in the base)
        if ((loss >= 100 * p->base_loss && norm_up) ||
            (p->base_n >= settled && loss >= 2 * p->base_loss &&
             (has_norm && p->base_norm > 0 ? norm_up : loss >= 100 * p->base_loss))) {
            p->rise_step = step, p->rise_n = 1;
            if (!resumed || loss >= DIVERGE_SPIKE * p->base_loss) p->diverged_step = step;
            return;
        }
    }
    if (p->base_n == DIVERGE_BASE) return;
    p->base_losses[p->base_n++] = loss;
    p->base_loss = median_of(p->base_losses, p->base_n);
    if (has_norm) {
        p->base_norms[p->base_norm_n++] = norm;
        p->base_norm = median_of(p->base_norms, p->base_norm_n);
    }
}

bool report_diverged_before(const report_model *m, int32_t pid, int64_t at, report_step *last) {
    const report_process *p = report_process_find(m, pid);
    if (!p || p->diverged_step < 0 || p->diverged_step >= at) return false;
    bool found = false; // the last finite loss before `at`, within a few steps
    for (int64_t s = at - 1; s >= 0 && s >= at - 16 && !found; s--) {
        const report_step *st = report_step_find(m, p->pid, s);
        if (st && st->loss_finite) *last = *st, found = true;
    }
    if (!found && p->pre_last_step >= 0 && p->pre_last_step >= at - 16) {
        *last = (report_step){
            .step = p->pre_last_step, .loss = p->pre_last_loss, .grad_norm = p->pre_last_grad_norm};
        found = true;
    }
    if (!found) return false;
    const bool norm_up =
        !(last->grad_norm > 0 && p->base_norm > 0) || last->grad_norm >= 10 * p->base_norm;
    return last->loss >= 2 * p->base_loss && norm_up;
}

// The process of pid in m->procs from index *k on (both sorted by pid: a merge moves *k
// forward); NULL when there is none.
static report_process *proc_at(report_model *m, size_t *k, int32_t pid) {
    while (*k < m->n_procs && m->procs[*k].pid < pid)
        (*k)++;
    return *k < m->n_procs && m->procs[*k].pid == pid ? &m->procs[*k] : NULL;
}

static bool load_before_focus(sqlite3 *db, report_model *m, char *err);
static bool settle_rises(sqlite3 *db, report_model *m, char *err);

// The processes that recorded anything (focus aside: a run of several processes says which one a
// finding is of whatever the focus), their names, and where their focused steps are in m->steps.
static bool load_proc_rows(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT u.pid, %s FROM (SELECT pid FROM AMP_STEPS UNION SELECT pid FROM AMP_LAYERS "
             "UNION SELECT pid FROM AMP_EVENTS) u WHERE " PID_OK " ORDER BY u.pid",
             amp_store_has_column(db, "AMP_PROCESSES", "name")
                 ? "(SELECT name FROM AMP_PROCESSES p WHERE p.pid = u.pid ORDER BY p.rowid LIMIT 1)"
                 : "NULL");
    if (!prepare(db, m->path, sql, m, &q, err)) return false;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(m->procs, m->n_procs, cap);
        m->procs[m->n_procs++] = (report_process){.pid = sqlite3_column_int(q, 0),
                                                  .name = col_name(q, 1),
                                                  .nonfinite_since = -1,
                                                  .loss0 = NAN,
                                                  .grad_norm0 = NAN,
                                                  .diverged_step = -1,
                                                  .rise_step = -1,
                                                  .first_step = -1,
                                                  .loss_max = NAN,
                                                  .loss_max_step = -1,
                                                  .pre_last_step = -1,
                                                  .pre_last_loss = NAN,
                                                  .pre_last_grad_norm = NAN,
                                                  .growth_interval = -1,
                                                  .first_applied = -1};
    }
    // the steps are sorted by pid: each process's are one run of them
    for (size_t i = 0, k = 0; i < m->n_procs; i++) {
        report_process *p = &m->procs[i];
        while (k < m->n_steps && m->steps[k].pid < p->pid)
            k++;
        p->step0 = k;
        while (k < m->n_steps && m->steps[k].pid == p->pid)
            k++;
        p->n_steps = k - p->step0;
    }
    group_models(m);
    return finish(db, m->path, q, rc, err);
}

// Each process's first loss, gradient norm and applied scale update, whatever the focus (the
// marks a fitted batch, a divergence and the initial calibration are told by), and its
// GradScaler's growth interval and updates.
static bool load_proc_firsts(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    int rc;
    if (!prepare(
            db, m->path,
            "SELECT pid, (SELECT loss FROM AMP_STEPS b WHERE b.pid = a.pid AND loss_finite = 1 "
            "ORDER BY step LIMIT 1), (SELECT grad_norm FROM AMP_STEPS b WHERE b.pid = a.pid "
            "AND grad_norm > 0 AND grad_norm < 1e308 ORDER BY step LIMIT 1), (SELECT "
            "CAST(value AS INTEGER) FROM META c WHERE c.pid = a.pid AND c.key = "
            "'scaler.growth_interval'), (SELECT COUNT(*) FROM AMP_STEPS d WHERE d.pid = a.pid AND "
            "d.scale_after IS NOT NULL), (SELECT MIN(step) FROM AMP_STEPS e WHERE e.pid = a.pid "
            "AND e.scale_after IS NOT NULL AND e.skipped = 0) FROM (SELECT DISTINCT pid FROM "
            "AMP_STEPS WHERE " PID_OK ") a ORDER BY pid",
            m, &q, err))
        return false;
    for (size_t k = 0; (rc = sqlite3_step(q)) == SQLITE_ROW;) { // (both by pid: one merge)
        report_process *p = proc_at(m, &k, sqlite3_column_int(q, 0));
        if (!p) continue;
        p->loss0 = col_f64(q, 1);
        p->grad_norm0 = col_f64(q, 2);
        p->growth_interval = col_i64(q, 3, -1);
        p->scale_updates = col_i64(q, 4, 0);
        p->first_applied = col_i64(q, 5, -1);
    }
    return finish(db, m->path, q, rc, err);
}

// Each focused step's marks (a fitted batch, the initial calibration) and its process's
// divergence, fed in step order (after the steps before the focus).
static void mark_steps(report_model *m) {
    for (size_t i = 0; i < m->n_procs; i++) {
        report_process *p = &m->procs[i];
        for (size_t k = p->step0; k < p->step0 + p->n_steps; k++) {
            report_step *st = &m->steps[k];
            st->fitted = st->loss_finite && fabs(st->loss) <= 1e-6 * fabs(p->loss0);
            // (none of a process that never applied one: it never found a scale that fits)
            st->calibration = st->has_scale && st->skipped && p->first_applied >= 0 &&
                              st->step < p->first_applied;
            divergence_feed(p, st->step, st->loss_finite ? st->loss : NAN, st->grad_norm,
                            st->loss_nonfinite);
        }
    }
}

// The processes that recorded anything (focus aside: a run of several processes says which one a
// finding is of whatever the focus), their names, and their focused steps' rows in m->steps; each
// one's first loss and gradient norm, its divergence and its GradScaler's growth interval.
static bool load_procs(sqlite3 *db, report_model *m, char *err) {
    if (!load_proc_rows(db, m, err) || !load_proc_firsts(db, m, err)) return false;
    if (m->step_lo != INT64_MIN && !load_before_focus(db, m, err)) return false;
    mark_steps(m);
    return m->step_hi == INT64_MAX || settle_rises(db, m, err);
}

// A rise still up at the focus's last step (a resumed run's, which must stay up: divergence_feed)
// is settled by the steps right after the focus, read for that alone: whether and where a
// process diverged does not depend on where the focus ends.
static bool settle_rises(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    if (!prepare(db, m->path,
                 "SELECT step, loss_finite, loss, grad_norm FROM AMP_STEPS WHERE step > ?2 AND "
                 "pid = ?3 ORDER BY step LIMIT ?4",
                 m, &q, err))
        return false;
    int rc = SQLITE_DONE;
    for (size_t i = 0; i < m->n_procs && rc == SQLITE_DONE; i++) {
        report_process *p = &m->procs[i];
        if (p->rise_step < 0 || p->diverged_step >= 0) continue;
        const report_process focus = *p; // (all but where it diverged as the focus left it)
        sqlite3_reset(q);
        sqlite3_bind_int(q, 3, p->pid);
        sqlite3_bind_int(q, 4, DIVERGE_STAY);
        while ((rc = sqlite3_step(q)) == SQLITE_ROW && p->rise_step >= 0 && p->diverged_step < 0) {
            const int64_t finite = col_i64(q, 1, -1);
            divergence_feed(p, sqlite3_column_int64(q, 0), finite == 1 ? col_f64(q, 2) : NAN,
                            col_f64(q, 3), finite == 0);
        }
        if (rc == SQLITE_ROW) rc = SQLITE_DONE; // (settled before the last row)
        const int64_t diverged = p->diverged_step;
        *p = focus;
        p->diverged_step = diverged;
    }
    return finish(db, m->path, q, rc, err);
}

// What the steps before the focus (--steps A:B) tell of each process: the non-finite losses that
// run on into the focus (report_process.nonfinite_since), a divergence that began there, the last
// finite loss.
static bool load_before_focus(sqlite3 *db, report_model *m, char *err) {
    sqlite3_stmt *q;
    int rc;
    // the steps before the focus: for a divergence that began there, the last finite loss, and
    // the non-finite losses after it (nonfinite_since: they run on into the focus)
    if (!prepare(db, m->path,
                 "SELECT pid, step, loss_finite, loss, grad_norm FROM AMP_STEPS WHERE step < ?1 "
                 "AND " PID_OK " ORDER BY pid, step",
                 m, &q, err))
        return false;
    for (size_t k = 0; (rc = sqlite3_step(q)) == SQLITE_ROW;) {
        report_process *p = proc_at(m, &k, sqlite3_column_int(q, 0));
        if (!p) continue;
        const int64_t step = sqlite3_column_int64(q, 1), finite = col_i64(q, 2, -1);
        const double loss = finite == 1 ? col_f64(q, 3) : NAN, norm = col_f64(q, 4);
        divergence_feed(p, step, loss, norm, finite == 0);
        if (finite == 1) {
            p->pre_last_step = step, p->pre_last_loss = loss;
            p->pre_last_grad_norm = isfinite(norm) ? norm : NAN;
            p->nonfinite_since = -1;
        } else if (finite == 0 && p->nonfinite_since < 0) {
            p->nonfinite_since = step;
        }
    }
    return finish(db, m->path, q, rc, err);
}

// AMP_TENSOR_STATS in one pass over its rows, into three summaries: m->stats per (pid, layer,
// op, kind, dtype, target); each step's largest gradient amax (numel > 1); each layer's forward
// amax in REPORT_AMAX_BUCKETS buckets over the steps (m->amax). Summed here: SQL's GROUP BY sorts
// every row first (4 s of a 1.6M-row run, for a few dozen groups). The groups come out in the
// order GROUP BY gave them (its keys, BINARY collation).

static const char sql_stats[] =
    "SELECT pid, layer_id, IFNULL(op, ''), IFNULL(kind, ''), IFNULL(dtype, ''), "
    "IFNULL(target_dtype, ''), "
    "numel, amax, step, n_overflow, n_underflow, n_zero, n_nan, n_posinf, n_neginf "
    "FROM AMP_TENSOR_STATS WHERE step BETWEEN ?1 AND ?2 AND " PID_OK;

size_t *report_index_slot(report_index *t, size_t n_entries, uint64_t h, const void *arr,
                          const void *key, bool (*same)(const void *, size_t, const void *),
                          uint64_t (*rehash)(const void *, size_t)) {
    if (2 * (n_entries + 1) > t->n_slots) {
        free(t->slots);
        t->n_slots = t->n_slots ? 2 * t->n_slots : 64;
        t->slots = amp_xcalloc(t->n_slots, sizeof *t->slots);
        for (size_t k = 0; k < n_entries; k++) {
            size_t i = rehash(arr, k) & (t->n_slots - 1);
            while (t->slots[i])
                i = (i + 1) & (t->n_slots - 1);
            t->slots[i] = k + 1;
        }
    }
    size_t i = h & (t->n_slots - 1);
    while (t->slots[i] && !same(arr, t->slots[i] - 1, key))
        i = (i + 1) & (t->n_slots - 1);
    return &t->slots[i];
}

typedef struct group_key {
    int32_t pid, layer;
    const char *s[4]; // op, kind, dtype, target
} group_key;

static uint64_t group_hash(const group_key *k) {
    uint64_t h = report_mix((uint64_t)(uint32_t)k->pid << 32 | (uint32_t)k->layer);
    for (int i = 0; i < 4; i++)
        h = report_hash_str(h, k->s[i]);
    return h;
}

static bool same_group(const void *arr, size_t i, const void *key) {
    const report_stats *s = &((const report_stats *)arr)[i];
    const group_key *k = key;
    return s->pid == k->pid && s->layer_id == k->layer && strcmp(s->op, k->s[0]) == 0 &&
           strcmp(s->kind, k->s[1]) == 0 && strcmp(s->dtype, k->s[2]) == 0 &&
           strcmp(s->target, k->s[3]) == 0;
}

static uint64_t group_rehash(const void *arr, size_t i) {
    const report_stats *s = &((const report_stats *)arr)[i];
    return group_hash(&(group_key){s->pid, s->layer_id, {s->op, s->kind, s->dtype, s->target}});
}

typedef struct bucket_key {
    int32_t pid, layer;
    int64_t bucket;
} bucket_key;

typedef struct stats_pass {
    report_model *m;
    report_index groups, buckets;
    size_t cap_stats, cap_amax;
    int64_t *bucket_of; // per m->amax entry, its bucket (the key with pid and layer)
    int64_t width;      // m->amax_width (report_amax_bucket); 0: no steps, no buckets
    report_step *step;  // the step record of the last gradient row (a cache)
} stats_pass;

static uint64_t bucket_hash(const bucket_key *k) {
    return report_mix(report_mix((uint64_t)(uint32_t)k->pid << 32 | (uint32_t)k->layer) ^
                      (uint64_t)k->bucket);
}

static bool same_bucket(const void *arr, size_t i, const void *key) {
    const stats_pass *p = arr;
    const report_amax *a = &p->m->amax[i];
    const bucket_key *k = key;
    return a->pid == k->pid && a->layer_id == k->layer && p->bucket_of[i] == k->bucket;
}

static uint64_t bucket_rehash(const void *arr, size_t i) {
    const stats_pass *p = arr;
    const report_amax *a = &p->m->amax[i];
    return bucket_hash(&(bucket_key){a->pid, a->layer_id, p->bucket_of[i]});
}

// The group of a row's key, made (empty) when new.
static report_stats *stats_group(stats_pass *p, const group_key *k) {
    report_model *m = p->m;
    size_t *slot = report_index_slot(&p->groups, m->n_stats, group_hash(k), m->stats, k, same_group,
                                     group_rehash);
    if (*slot) return &m->stats[*slot - 1];
    AMP_GROW(m->stats, m->n_stats, p->cap_stats);
    report_stats *s = &m->stats[m->n_stats];
    *s = (report_stats){.pid = k->pid,
                        .layer_id = k->layer,
                        .op = amp_xstrdup(k->s[0]),
                        .gemm = report_op_is_gemm(k->s[0]),
                        .kind = amp_xstrdup(k->s[1]),
                        .dtype = amp_xstrdup(k->s[2]),
                        .target = amp_xstrdup(k->s[3]),
                        .amax = NAN,
                        .first_step = INT64_MAX,
                        .last_step = INT64_MIN,
                        .counted_first_step = INT64_MAX,
                        .counted_last_step = INT64_MIN,
                        .near_first_step = -1,
                        .near_last_step = -1,
                        .clean_amax = NAN,
                        .counted_amax = NAN,
                        .clean_amax_step = -1,
                        .bad_step = INT64_MAX,
                        .bad_row = INT64_MAX,
                        .weight_amax = NAN,
                        .weight_step = -1};
    *slot = ++m->n_stats;
    return s;
}

double report_dtype_max(const char *dtype) {
    if (strcmp(dtype, "f16") == 0) return REPORT_F16_MAX;
    if (strcmp(dtype, "bf16") == 0) return REPORT_BF16_MAX;
    return NAN;
}

bool report_dtype_lowp(const char *dtype) {
    return !isnan(report_dtype_max(dtype));
}

// max: report_dtype_max(s->target), looked up once a group rather than once a row; thrown: a
// gradient of a step whose update the GradScaler skipped, whose values never reached the weights
// (at a scale driven to 0 they are all zero), of a step whose loss was not finite (a broken
// step: a loss with no target to average over has a gradient of zeros), or of a step whose loss
// was 0 or a millionth of the first (a model that fits its batch: the usual losses, never
// negative, have a gradient of zeros or next to nothing there, nothing left to learn); its
// elements, underflow and zeros are left out.
// *sum += n, held within +-2^52 (4.5e15 values, no run's count; a database may hold anything),
// so that the rules' sums over a few thousand groups cannot overflow either.
static void add_count(int64_t *sum, int64_t n) {
    const int64_t cap = (int64_t)1 << 52;
    n = n > cap ? cap : n < -cap ? -cap : n;
    *sum += n;
    *sum = *sum > cap ? cap : *sum < -cap ? -cap : *sum;
}

// row: the row's place among those read.
static void add_stats_row(report_stats *s, double max, bool thrown, sqlite3_stmt *q, int64_t row) {
    const int64_t numel = col_i64(q, 6, 0), step = sqlite3_column_int64(q, 8);
    const bool has_amax = sqlite3_column_type(q, 7) != SQLITE_NULL;
    const double amax = sqlite3_column_double(q, 7);
    const int64_t nan = col_i64(q, 12, 0), posinf = col_i64(q, 13, 0), neginf = col_i64(q, 14, 0);
    s->tensors++;
    // overflowed: NaN or +inf, or -inf out of a GEMM (a mask's -inf comes in elementwise ops)
    const bool overflowed = nan > 0 || posinf > 0 || (neginf > 0 && s->gemm);
    if (overflowed && (step < s->bad_step || (step == s->bad_step && row < s->bad_row)))
        s->bad_step = step, s->bad_row = row;
    if (has_amax && !(amax <= s->amax)) s->amax = amax; // (NaN: the first one)
    if (has_amax && !overflowed &&
        (!(amax <= s->clean_amax) || (amax == s->clean_amax && step < s->clean_amax_step)))
        s->clean_amax = amax, s->clean_amax_step = step;
    if (step < s->first_step) s->first_step = step;
    if (step > s->last_step) s->last_step = step;
    add_count(&s->n_overflow, col_i64(q, 9, 0));
    add_count(&s->n_nonfinite, nan);
    add_count(&s->n_nonfinite, posinf);
    add_count(&s->n_nonfinite, neginf);
    if (thrown) return;
    if (has_amax && !overflowed && !(amax <= s->counted_amax)) s->counted_amax = amax;
    if (step < s->counted_first_step) s->counted_first_step = step;
    if (step > s->counted_last_step) s->counted_last_step = step;
    add_count(&s->numel, numel);
    add_count(&s->n_underflow, col_i64(q, 10, 0));
    add_count(&s->n_zero, col_i64(q, 11, 0));
    if (has_amax && amax == 0 && numel > 1 && nan == 0 && posinf == 0 && neginf == 0) {
        s->zero_tensors++;
        s->zero_numel += numel;
    }
    // within 2x of the target's max, not overflowed (an attention mask's -inf is fine; an output
    // that already overflowed is the business of rule nonfinite-root-cause)
    if (has_amax && amax >= max / 2 && !overflowed) {
        s->near_max_tensors++;
        if (s->near_first_step < 0 || step < s->near_first_step) s->near_first_step = step;
        if (step > s->near_last_step) s->near_last_step = step;
    }
}

// The step record of a row (NULL: none), through a cache of the last one.
static report_step *row_step(stats_pass *p, int32_t pid, int64_t step) {
    if (!p->step || p->step->pid != pid || p->step->step != step)
        p->step = (report_step *)report_step_find(p->m, pid, step);
    return p->step;
}

static void keep_max(double *m, double v) {
    if (!(v <= *m)) *m = v;
}

// A gradient's amax (numel > 1) into its step record's largest (narrow: stored in its target
// dtype; weight: a weight gradient).
static void add_grad_amax(stats_pass *p, int32_t pid, int64_t step, double amax, bool narrow,
                          bool weight) {
    report_step *st = row_step(p, pid, step);
    if (!st) return;
    keep_max(&st->grad_amax, amax);
    if (narrow) keep_max(&st->grad_amax_16, amax);
    if (weight) keep_max(&st->grad_amax_weight, amax);
}

// The optimizer updates pid applied from step `from` up to step `to` (its steps from..to-1 that
// the GradScaler did not skip; a step not recorded counts as applied).
static int64_t applied_updates(const report_model *m, int32_t pid, int64_t from, int64_t to) {
    if (to <= from) return 0;
    int64_t recorded, losses, skipped;
    report_step_counts(m, pid, from, to - 1, &recorded, &losses, &skipped);
    const uint64_t span = (uint64_t)to - (uint64_t)from; // (step numbers may lie far apart)
    return (int64_t)(span > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : span) - skipped;
}

// Whether a growth of g over `updates` updates is tenfold or more an update, on average.
static bool blew_up(double g, int64_t updates) {
    return updates > 0 && g >= REPORT_WEIGHTS_BLOWUP &&
           g >= pow(REPORT_WEIGHTS_BLOWUP, (double)updates);
}

// A parameter's amax as step `step` began (group s, kind weight) into the step's largest and,
// against its row before, the step's largest growth (report_step.weight_growth). A process's
// rows come step by step, so the step before is complete by now.
static void add_weight(stats_pass *p, report_stats *s, int32_t pid, int64_t step, double amax) {
    report_step *st = row_step(p, pid, step);
    if (st) keep_max(&st->weight_amax, amax);
    const bool grew = st && s->weight_step >= 0 && s->weight_step < step && s->weight_amax > 0;
    const report_step *before = grew ? report_step_find(p->m, pid, s->weight_step) : NULL;
    if (before && amax >= 0.1 * before->weight_amax) {
        // of the parameters that blew up (report_weights_blew_up), the largest now; of none,
        // the one that grew most
        const double g = amax / s->weight_amax;
        const int64_t updates = applied_updates(p->m, pid, s->weight_step, step);
        const bool blew = blew_up(g, updates), had = blew_up(st->weight_growth, st->weight_updates);
        if (blew != had ? blew : blew ? amax > st->weight_to : !(g <= st->weight_growth)) {
            st->weight_growth = g, st->weight_from = s->weight_amax, st->weight_to = amax;
            st->weight_from_step = s->weight_step, st->weight_param = s->op;
            st->weight_updates = updates;
        }
    }
    s->weight_amax = amax, s->weight_step = step;
}

// An activation's amax (NaN: no finite value) into its layer's bucket; bad: it held NaN or +inf.
static void add_forward_amax(stats_pass *p, int32_t pid, int32_t layer, int64_t step, double amax,
                             bool bad) {
    report_model *m = p->m;
    bucket_key k = {pid, layer, report_amax_bucket(p->m, step)};
    size_t *slot = report_index_slot(&p->buckets, m->n_amax, bucket_hash(&k), p, &k, same_bucket,
                                     bucket_rehash);
    if (!*slot) {
        if (m->n_amax == p->cap_amax) {
            p->cap_amax = p->cap_amax ? 2 * p->cap_amax : 64;
            m->amax = amp_xrealloc(m->amax, p->cap_amax * sizeof *m->amax);
            p->bucket_of = amp_xrealloc(p->bucket_of, p->cap_amax * sizeof *p->bucket_of);
        }
        m->amax[m->n_amax] = (report_amax){pid, layer, step, amax, bad ? step : -1};
        p->bucket_of[m->n_amax] = k.bucket;
        *slot = ++m->n_amax;
        return;
    }
    report_amax *a = &m->amax[*slot - 1];
    if (step < a->step) a->step = step;
    if (isnan(a->amax) || amax > a->amax) a->amax = amax; // (a NaN amax replaces only NaN)
    if (bad && (a->bad_step < 0 || step < a->bad_step)) a->bad_step = step;
}

static int cmp_stats(const void *a, const void *b) {
    const report_stats *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->layer_id != y->layer_id) return x->layer_id < y->layer_id ? -1 : 1;
    int c = strcmp(x->op, y->op);
    if (!c) c = strcmp(x->kind, y->kind);
    if (!c) c = strcmp(x->dtype, y->dtype);
    if (!c) c = strcmp(x->target, y->target);
    return c;
}

static int cmp_amax(const void *a, const void *b) {
    const report_amax *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->layer_id != y->layer_id) return x->layer_id < y->layer_id ? -1 : 1;
    return (x->step > y->step) - (x->step < y->step);
}

static bool load_stats(sqlite3 *db, report_model *m, char *err) {
    stats_pass p = {.m = m};
    if (m->n_steps) { // the buckets span the steps recorded
        int64_t lo = m->steps[0].step, hi = lo;
        for (size_t i = 0; i < m->n_steps; i++) {
            if (m->steps[i].step < lo) lo = m->steps[i].step;
            if (m->steps[i].step > hi) hi = m->steps[i].step;
        }
        // in unsigned: steps numbered from -5 to INT64_MAX span more than an int64_t holds
        m->amax_first = lo;
        p.width = m->amax_width =
            (int64_t)(((uint64_t)hi - (uint64_t)lo) / REPORT_AMAX_BUCKETS + 1);
    }
    sqlite3_stmt *q;
    if (!prepare(db, m->path, sql_stats, m, &q, err)) return false;
    report_stats *last = NULL; // rows of one step come layer by layer: often the same group
    bool act = false, grad = false, weight = false; // last's kind: activation, a gradient, weight
    double max = NAN;                               // report_dtype_max(last->target)
    char *scratch[4] = {0}; // the key's strings that held style marks (report_clean)
    int rc;
    for (int64_t row = 0; (rc = sqlite3_step(q)) == SQLITE_ROW; row++) {
        const bool no_layer = sqlite3_column_type(q, 1) == SQLITE_NULL;
        group_key k = {.pid = sqlite3_column_int(q, 0),
                       .layer = no_layer ? -1 : sqlite3_column_int(q, 1)};
        for (int i = 0; i < 4; i++) {
            const unsigned char *t = sqlite3_column_text(q, 2 + i);
            k.s[i] = t ? report_clean((const char *)t, &scratch[i]) : "";
        }
        if (!last || !same_group(last, 0, &k)) {
            last = stats_group(&p, &k);
            act = strcmp(last->kind, "activation") == 0;
            grad = strcmp(last->kind, "activation_grad") == 0 ||
                   strcmp(last->kind, "weight_grad") == 0;
            weight = strcmp(last->kind, "weight") == 0;
            max = report_dtype_max(last->target);
        }
        const report_step *st = grad ? row_step(&p, k.pid, sqlite3_column_int64(q, 8)) : NULL;
        const bool thrown =
            st && ((st->has_scale && st->skipped) || st->loss_nonfinite || st->fitted);
        add_stats_row(last, max, thrown, q, row);
        const bool has_amax = sqlite3_column_type(q, 7) != SQLITE_NULL; // (SQLite's NaN)
        const double amax = has_amax ? sqlite3_column_double(q, 7) : NAN;
        const int64_t step = sqlite3_column_int64(q, 8);
        if (grad && has_amax && col_i64(q, 6, 0) > 1)
            add_grad_amax(&p, k.pid, step, amax,
                          last->target[0] && strcmp(last->dtype, last->target) == 0,
                          strcmp(last->kind, "weight_grad") == 0);
        if (weight && has_amax) add_weight(&p, last, k.pid, step, amax);
        if (act && !no_layer && p.width)
            add_forward_amax(&p, k.pid, k.layer, step, amax,
                             col_i64(q, 12, 0) > 0 || col_i64(q, 13, 0) > 0);
    }
    for (int i = 0; i < 4; i++)
        free(scratch[i]);
    free(p.groups.slots);
    free(p.buckets.slots);
    free(p.bucket_of);
    amp_sort(m->stats, m->n_stats, sizeof *m->stats, cmp_stats);
    amp_sort(m->amax, m->n_amax, sizeof *m->amax, cmp_amax);
    return finish(db, m->path, q, rc, err);
}

// The layer (pid, layer_id) of m->layers, NULL when none was declared.
static const report_layer *find_layer(const report_model *m, int32_t pid, int32_t layer_id) {
    size_t lo = 0, hi = m->n_layers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const report_layer *l = &m->layers[mid];
        if (l->pid == pid && l->id == layer_id) return l;
        if (l->pid < pid || (l->pid == pid && l->id < layer_id))
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int cmp_layer(const void *a, const void *b) {
    const report_layer *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// A name for each layer id that events or statistics refer to but AMP_LAYERS does not declare (a
// producer of its own that skipped amp_record_layer, or a forked child using its parent's ids):
// "layer 42 (not declared)", not the top level's.
static void name_undeclared_layers(report_model *m) {
    report_layer *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < m->n_events + m->n_stats; i++) {
        const int32_t pid = i < m->n_events ? m->events[i].pid : m->stats[i - m->n_events].pid;
        const int32_t id =
            i < m->n_events ? m->events[i].layer_id : m->stats[i - m->n_events].layer_id;
        if (id < 0 || find_layer(m, pid, id) || (n && v[n - 1].pid == pid && v[n - 1].id == id))
            continue;
        AMP_GROW(v, n, cap);
        v[n++] = (report_layer){.pid = pid, .id = id};
    }
    if (!n) return;
    amp_sort(v, n, sizeof *v, cmp_layer);
    size_t cap_layers = m->n_layers;
    for (size_t i = 0; i < n; i++) {
        if (i && v[i].pid == v[i - 1].pid && v[i].id == v[i - 1].id) continue;
        char name[REPORT_UNDECLARED_MAX];
        report_undeclared_layer(name, sizeof name, v[i].id);
        AMP_GROW(m->layers, m->n_layers, cap_layers);
        m->layers[m->n_layers++] = (report_layer){v[i].pid, v[i].id, amp_xstrdup(name)};
    }
    free(v);
    amp_sort(m->layers, m->n_layers, sizeof *m->layers, cmp_layer);
}

amp_status report_model_load(sqlite3 *db, const char *path, int64_t lo, int64_t hi, report_model *m,
                             char err[REPORT_ERR_MAX]) {
    memset(m, 0, sizeof *m);
    m->path = path;
    m->step_lo = lo;
    m->step_hi = hi;
    err[0] = 0;
    sqlite3_exec(db, "BEGIN", NULL, NULL, NULL); // one snapshot, also of a run still being written
    bool ok = load_meta(db, m, err) && load_end(db, m, err) && load_layers(db, m, err) &&
              load_steps(db, m, err) && load_events(db, m, err) && load_procs(db, m, err) &&
              load_stats(db, m, err) && report_perf_load(db, m, err);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (!ok) {
        report_model_free(m);
        amp_one_line(err);
        return AMP_ERR_IO;
    }
    // A snapshot taken in the collector's last moments says running with nobody writing: when
    // the capture has finished since, the finished one is read
    if (m->end.capture == AMP_RUN_CUT_SHORT && amp_store_run_state(db) == AMP_RUN_COMPLETE) {
        report_model_free(m);
        return report_model_load(db, path, lo, hi, m, err);
    }
    name_undeclared_layers(m);
    for (size_t i = 0; i < m->n_events; i++) { // (judged once the steps and processes are in)
        const report_event *e = &m->events[i];
        if (report_event_breaks_forward(m, e))
            report_spans_add(&m->forward_breaks, e->pid, e->step, e->last_step, i);
        else if (report_backward_at_any_scale(e))
            report_spans_add(&m->backward_breaks, e->pid, e->step, e->last_step, i);
    }
    report_spans_sort(&m->forward_breaks);
    report_spans_sort(&m->backward_breaks);
    return AMP_OK;
}

void report_model_free(report_model *m) {
    for (size_t i = 0; i < m->n_layers; i++)
        free((char *)m->layers[i].name);
    for (size_t i = 0; i < m->n_procs; i++)
        free((char *)m->procs[i].name);
    free(m->procs);
    report_spans_free(&m->loss_events);
    for (int k = 0; k < 4; k++)
        free(m->broke_cum[k]);
    report_spans_free(&m->forward_breaks);
    report_spans_free(&m->backward_breaks);
    for (size_t i = 0; i < m->n_events; i++)
        free_event_strings(&m->events[i]);
    for (size_t i = 0; i < m->n_stats; i++) {
        report_stats *s = &m->stats[i];
        free((char *)s->op);
        free((char *)s->kind);
        free((char *)s->dtype);
        free((char *)s->target);
    }
    for (size_t i = 0; i < m->n_ops; i++) {
        report_op *o = &m->ops[i];
        free((char *)o->op);
        free((char *)o->phase);
        free((char *)o->in_dtypes);
        free((char *)o->out_dtype);
        free((char *)o->policy);
    }
    free(m->ops);
    free(m->amax);
    report_perf_free(&m->perf);
    free(m->layers);
    free(m->events);
    free(m->stats);
    free(m->steps);
    free((char *)m->device);
    free((char *)m->command);
    free((char *)m->precision);
    free((char *)m->autocast_dtype);
    free((char *)m->optimizer);
    free((char *)m->optimizer_eps);
    free((char *)m->optimizer_fused);
    free((char *)m->bridge);
    free((char *)m->counters_reason);
    free((char *)m->compiled);
    free((char *)m->unwatched);
    free((char *)m->added_models);
    free((char *)m->exception);
    free((char *)m->capture_error);
    free((char *)m->bridge_error);
    free((char *)m->orphans);
    free((char *)m->stats_every);
    free((char *)m->compute_dtype);
    free((char *)m->updates);
    free((char *)m->no_model);
    free((char *)m->trace);
    free((char *)m->torch);
    for (size_t i = 0; i < m->end.n_cut; i++) {
        free((char *)m->end.cut[i].name);
        free((char *)m->end.cut[i].status);
    }
    free(m->end.cut);
    free(m->end.spool);
    memset(m, 0, sizeof *m);
}

int report_cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void report_undeclared_layer(char *buf, size_t n, int32_t layer_id) {
    snprintf(buf, n, "layer %d (not declared)", (int)layer_id);
}

const char *report_layer_name(const report_model *m, int32_t pid, int32_t layer_id) {
    const report_layer *l = find_layer(m, pid, layer_id);
    return l ? l->name : NULL;
}

void report_step_counts(const report_model *m, int32_t pid, int64_t first, int64_t last,
                        int64_t *recorded, int64_t *losses, int64_t *skipped) {
    const size_t a = step_lower(m, pid, first), b = first > last ? a : step_after(m, pid, last);
    *recorded = (int64_t)(b - a);
    *losses = m->broke_cum[BROKE_LOSS][b] - m->broke_cum[BROKE_LOSS][a];
    *skipped = m->broke_cum[BROKE_SKIP][b] - m->broke_cum[BROKE_SKIP][a];
}

const report_step *report_step_find(const report_model *m, int32_t pid, int64_t step) {
    const size_t i = step_lower(m, pid, step);
    return i < m->n_steps && m->steps[i].pid == pid && m->steps[i].step == step ? &m->steps[i]
                                                                                : NULL;
}

bool report_step_is_warmup(const report_model *m, const report_step *s) {
    if (s->step != 0) return false;
    const report_process *p = report_process_find(m, s->pid);
    return p && p->n_steps > 1;
}

const report_process *report_process_find(const report_model *m, int32_t pid) {
    size_t lo = 0, hi = m->n_procs; // (sorted by pid; rules ask once per row of a table)
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (m->procs[mid].pid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->n_procs && m->procs[lo].pid == pid ? &m->procs[lo] : NULL;
}

bool report_weights_upto(const report_model *m, int32_t pid, int64_t upto, report_weights *w) {
    const report_process *p = report_process_find(m, pid);
    *w = (report_weights){.first_step = -1, .last_step = -1, .growth = NAN, .from_step = -1};
    for (size_t i = 0; p && i < p->n_steps; i++) {
        const report_step *st = &m->steps[p->step0 + i];
        // (a later step's weights are upto's when every update in between was skipped: a step
        // --stats-every left out is seen at the next one it sampled)
        if (st->step > upto && applied_updates(m, pid, upto, st->step)) break;
        if (isnan(st->weight_amax)) continue;
        if (w->first_step < 0) w->first_step = st->step, w->first = st->weight_amax;
        w->last_step = st->step, w->last = st->weight_amax;
        w->growth = st->weight_growth, w->from = st->weight_from, w->to = st->weight_to;
        w->from_step = st->weight_from_step, w->param = st->weight_param;
        w->updates = st->weight_updates;
        if (st->step >= upto) break;
    }
    return w->last_step >= 0;
}

bool report_weights_blew_up(const report_weights *w) {
    return w->from_step >= 0 && blew_up(w->growth, w->updates);
}

void report_weights_updates(const report_weights *w, char *buf, size_t n) {
    if (w->last_step - w->from_step == 1)
        snprintf(buf, n, "the update after step %lld", (long long)w->from_step);
    else if (w->updates == 1)
        snprintf(buf, n, "the one update applied between steps %lld and %lld",
                 (long long)w->from_step, (long long)w->last_step);
    else
        snprintf(buf, n, "the %lld updates between steps %lld and %lld", (long long)w->updates,
                 (long long)w->from_step, (long long)w->last_step);
}

void report_process_phrase(const report_model *m, int32_t pid, char *buf, size_t n) {
    const report_process *p = report_process_find(m, pid);
    char id[64]; // (a later image of a pid: pid + k * AMP_PID_IMAGE_SPAN)
    if (pid >= AMP_PID_IMAGE_SPAN)
        snprintf(id, sizeof id, "pid %d, image %d of it", (int)(pid % AMP_PID_IMAGE_SPAN),
                 (int)(pid / AMP_PID_IMAGE_SPAN) + 1);
    else
        snprintf(id, sizeof id, "pid %d", (int)pid);
    if (p && p->name && p->name[0])
        snprintf(buf, n, "%s (%s)", p->name, id);
    else
        snprintf(buf, n, "%s", id);
}

int32_t report_process_model(const report_model *m, int32_t pid) {
    const report_process *p = report_process_find(m, pid);
    return p ? p->model : pid;
}

size_t report_processes_with_steps(const report_model *m) {
    size_t n = 0;
    for (size_t i = 0; i < m->n_procs; i++)
        n += m->procs[i].n_steps > 0;
    return n;
}

int64_t report_amax_bucket(const report_model *m, int64_t step) {
    const uint64_t w = (uint64_t)(m->amax_width > 0 ? m->amax_width : 1);
    if (step >= m->amax_first) return (int64_t)(((uint64_t)step - (uint64_t)m->amax_first) / w);
    return -1 - (int64_t)(((uint64_t)m->amax_first - (uint64_t)step - 1) / w);
}
