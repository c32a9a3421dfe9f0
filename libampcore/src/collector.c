/*
 * collector.c — tails the spool files of a run and writes their records into the database.
 *
 * Each poll lists the spool directory (processes start at any time), then reads every file from
 * where the last poll stopped up to the last complete record, decoding and inserting inside one
 * transaction. A writer holds an flock on its spool file for as long as it lives, so a lock the
 * collector can take means the writer is gone (exit, crash or kill -9 alike): the file is read to
 * its end, a half-written last record is reported and skipped, and the file is deleted once its
 * rows are committed. A record that cannot be one (bad header, malformed payload) makes the rest
 * of that file unreadable: one warning, and the rows before it stay. What a live writer's file
 * holds below the committed offset is given back to the disk as it goes (a hole punched in it):
 * a long run's spool would otherwise hold a second copy of everything in the database.
 *
 * Events are aggregated here so that a NaN storm cannot grow the database without bound: the
 * first AMP_EVENTS_KEEP occurrences of each (pid, kind, layer, op, phase) become rows of their
 * own, later ones are folded into one aggregate row per key (SCHEMA.md).
 */
#define _GNU_SOURCE // fallocate

#include "amp-store.h"

#include "amp-impl.h"
#include "record-codec.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define AMP_EVENTS_KEEP 10 // individual AMP_EVENTS rows per key
#define EVENT_NAME_MAX 500 // bytes of an event's kind and op in its key (event_key)
#define EVENT_KEY_MAX (12 + 2 * (EVENT_NAME_MAX + 1))
#define COMMIT_EVERY_NS 200000000 // a long poll commits this often, so readers keep up
#define POLL_BUDGET_NS 200000000  // a poll far behind returns after this, its caller responsive
#define READ_CHUNK (4u << 20)     // bytes read at once; more than a record's maximum
#define PUNCH_MIN (1u << 20)      // committed spool bytes given back to the disk at once
#define PAGE_BYTES 4096u          // holes are punched in whole pages of this size

_Static_assert(READ_CHUNK > AMP_REC_MAX_BYTES + AMP_REC_HEADER_BYTES, "a record fits a chunk");

typedef struct spool_file {
    char *name; // in the spool directory
    int fd;     // -1 when closed
    // pid: the process in the database, its own (os_pid) but for a second process image of that
    // pid (exec() into a program that records, a pid the system reused): AMP_PID_IMAGE_SPAN
    int32_t pid, os_pid, ppid;
    char comm[17];
    int64_t start_ns;
    // the earliest and latest time its records carry (0: none yet)
    int64_t first_ns, last_ns;
    uint64_t exec_id;    // the header's: files of one pid, exec_id and proc_start are one process
    uint64_t proc_start; // (one image: a process that stopped and started recording again)
    uint64_t offset;     // first byte not yet ingested
    uint64_t punched;    // bytes from the first page after the header up to here are a hole
    bool can_punch;      // opened for writing, and the file system punches holes
    int64_t records;
    int64_t proc_rowid;   // its AMP_PROCESSES row
    bool writer_gone;     // its flock could be taken
    bool done;            // nothing more will be read from it
    bool warned_unknown;  // about a record type this build does not know
    bool warned_negative; // about a record of a negative step
    bool sent_steps;      // a step record came from it
} spool_file;

// An event key past its individual rows: its aggregate row, and the occurrences folded in since
// the last commit (written once per commit, so a storm costs one UPDATE per key and commit).
typedef struct event_agg {
    int64_t rowid;     // the aggregate row
    int64_t pending;   // occurrences not written yet
    int64_t last_step; // of the latest of them
    int64_t count;     // their summed count; -1: none known
    double value;      // the latest value among them; NaN: none
} event_agg;

struct amp_collector {
    amp_store *store;
    char *spool_dir;
    spool_file *files;
    int n_files, cap_files;
    uint8_t *buf;      // READ_CHUNK bytes
    amp_strmap events; // aggregation key -> rows so far (>= 0) or -1 - index into aggs
    event_agg *aggs;
    int n_aggs, cap_aggs;
    int *dirty; // indexes into aggs with pending occurrences
    int n_dirty;
    amp_strmap local_strings; // (file index, id) -> StringIds id
    amp_collector_stats stats;
    int64_t txn_start_ns;
    int64_t poll_until_ns; // CLOCK_MONOTONIC time a poll stops reading at; 0: it reads all
    bool in_txn;
    bool own_spool_dir; // created by amp_collector_new
    bool spool_dir_warned;
    bool fds_warned; // a spool file waited for a file descriptor
    int fd_waits;    // spool files the last scan found but could not open yet (EMFILE)
    bool finished;
    char *stopped; // why recording stopped short (META capture_error at the end); NULL: it did not
    char *reserve; // RESERVE_BYTES held in the spool directory until the end; NULL: none
    int live_fd;   // AMP_SPOOL_LIVE_LOCK, flocked while the collector reads (-1: none)
    // The database, flocked for the collector's life: `ampprobe run --force` will not replace
    // a live run's file (amp_collector_db_busy). flock and SQLite's fcntl locks are apart; it
    // is closed after the store, as closing a descriptor of the file drops the process's fcntl
    // locks on it.
    int db_lock_fd;
    char *db_path;
};

// Below this much free space a spool cut off mid-record was cut by a full disk, not a kill.
#define FULL_DISK_BYTES (1 << 20)
// Disk space the collector holds from the start of the run and gives back before it writes the
// end of the run: room to finish the database (META, the end time, why recording stopped) when
// the disk has filled meanwhile.
#define RESERVE_BYTES (256 << 10)

static int64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void warn(amp_collector_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(amp_collector_t *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ampprobe: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    c->stats.warnings++;
}

// ---------------------------------------------------------------------------------------------
// Transactions: one per poll, cut every COMMIT_EVERY_NS while far behind

static amp_status txn_begin(amp_collector_t *c) {
    amp_status st = amp_store_begin(c->store);
    c->in_txn = st == AMP_OK;
    c->txn_start_ns = now_ns(CLOCK_MONOTONIC);
    return st;
}

static amp_status flush_event_aggs(amp_collector_t *c) {
    amp_status st = AMP_OK;
    for (int i = 0; i < c->n_dirty && st == AMP_OK; i++) {
        event_agg *a = &c->aggs[c->dirty[i]];
        st = amp_store_event_fold(c->store, a->rowid, a->pending, a->last_step, a->count, a->value);
        a->pending = 0;
    }
    c->n_dirty = 0;
    return st;
}

static amp_status txn_commit(amp_collector_t *c) {
    amp_status st = flush_event_aggs(c);
    c->in_txn = false;
    amp_status cst = amp_store_commit(c->store);
    return st != AMP_OK ? st : cst;
}

static amp_status txn_maybe_cut(amp_collector_t *c) {
    if (now_ns(CLOCK_MONOTONIC) - c->txn_start_ns < COMMIT_EVERY_NS) return AMP_OK;
    amp_status st = txn_commit(c);
    return st == AMP_OK ? txn_begin(c) : st;
}

// ---------------------------------------------------------------------------------------------
// Lifetime and META

static amp_status put_meta_i64(amp_collector_t *c, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return amp_store_meta(c->store, 0, key, buf);
}

static amp_status put_time_meta(amp_collector_t *c, const char *prefix) {
    int64_t real = now_ns(CLOCK_REALTIME), mono = now_ns(CLOCK_MONOTONIC);
    char key[64], iso[32];
    time_t secs = (time_t)(real / 1000000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(key, sizeof key, "%s_ns", prefix);
    amp_status st = put_meta_i64(c, key, real);
    snprintf(key, sizeof key, "%s_time", prefix);
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, key, iso);
    snprintf(key, sizeof key, "clock_monotonic_%s_ns", prefix); // pairs for re-basing
    if (st == AMP_OK) st = put_meta_i64(c, key, mono);
    return st;
}

// Holds RESERVE_BYTES in a file of the spool directory (nothing when the disk has no room).
static void hold_reserve(amp_collector_t *c) {
    char *path = amp_path_join(c->spool_dir, ".reserve");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0 && posix_fallocate(fd, 0, RESERVE_BYTES) == 0) {
        c->reserve = path;
    } else {
        if (fd >= 0) unlink(path);
        free(path);
    }
    if (fd >= 0) close(fd);
}

// Holds the spool directory's AMP_SPOOL_LIVE_LOCK until the last read: writers that can take it
// stop recording (a killed launcher reads nothing more: record.c).
static void hold_live_lock(amp_collector_t *c) {
    char *path = amp_path_join(c->spool_dir, AMP_SPOOL_LIVE_LOCK);
    c->live_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->live_fd >= 0 && flock(c->live_fd, LOCK_EX | LOCK_NB) != 0) {
        // another collector on this directory holds it (it is the one writers watch), or the
        // file system has no locks: then the file goes, so the directory can be removed
        if (errno != EWOULDBLOCK) unlink(path);
        close(c->live_fd);
        c->live_fd = -1;
    }
    free(path);
}

static void drop_live_lock(amp_collector_t *c) {
    if (c->live_fd < 0) return;
    char *path = amp_path_join(c->spool_dir, AMP_SPOOL_LIVE_LOCK);
    unlink(path);
    free(path);
    close(c->live_fd);
    c->live_fd = -1;
}

static void give_back_reserve(amp_collector_t *c) {
    if (!c->reserve) return;
    unlink(c->reserve);
    free(c->reserve);
    c->reserve = NULL;
}

// A fresh directory next to the database, ".NAME.spool-" and six random characters (same file
// system, and a user who finds it after a crash sees what it belongs to).
char *amp_spool_dir_prefix(const char *db_path) {
    const char *slash = strrchr(db_path, '/');
    int dir_len = slash ? (int)(slash - db_path) + 1 : 0;
    size_t n = strlen(db_path) + 16;
    char *prefix = amp_xmalloc(n);
    snprintf(prefix, n, "%.*s.%s.spool-", dir_len, db_path, db_path + dir_len);
    return prefix;
}

static amp_status make_spool_dir(const char *db_path, char **out) {
    char *prefix = amp_spool_dir_prefix(db_path);
    size_t n = strlen(prefix) + 16;
    char *dir = amp_xmalloc(n);
    bool made = amp_make_temp_dir(dir, n, prefix) != NULL;
    free(prefix);
    if (!made) {
        const int err = errno;
        amp_status st = amp_set_error(
            AMP_ERR_IO, "cannot create the spool directory %s: %s%s", dir, strerror(err),
            err == ENAMETOOLONG ? " (it is the database's name with 14 more characters: "
                                  "a shorter database name fits)"
                                : "");
        free(dir);
        return st;
    }
    *out = dir;
    return AMP_OK;
}

// A collector that could not start: freed, with the spool directory it made (still empty).
static void failed_start(amp_collector_t *c) {
    if (c->own_spool_dir) rmdir(c->spool_dir);
    amp_collector_free(c);
}

void amp_collector_forget_in_child(amp_collector_t *c) {
    if (c->db_lock_fd >= 0) close(c->db_lock_fd);
    if (c->live_fd >= 0) close(c->live_fd);
    c->db_lock_fd = c->live_fd = -1;
}

int amp_collector_claim(const char *db_path) {
    int fd = open(db_path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 && fd <= 2) {
        const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3), e = errno;
        close(fd);
        errno = e;
        fd = moved;
    }
    if (fd >= 0) flock(fd, LOCK_EX | LOCK_NB); // (new: nothing else can hold it)
    return fd;
}

amp_status amp_collector_new(const char *db_path, const char *spool_dir, amp_collector_t **out) {
    return amp_collector_new_locked(db_path, spool_dir, -1, out);
}

amp_status amp_collector_new_locked(const char *db_path, const char *spool_dir, int lock_fd,
                                    amp_collector_t **out) {
    amp_clear_error();
    *out = NULL;
    char *dir = NULL;
    amp_status st = AMP_OK;
    if (spool_dir) {
        struct stat sb;
        if (stat(spool_dir, &sb) != 0)
            st = amp_set_error(AMP_ERR_IO, "%s: %s", spool_dir, strerror(errno));
        else if (!S_ISDIR(sb.st_mode))
            st = amp_set_error(AMP_ERR_IO, "%s: not a directory", spool_dir);
        else
            dir = amp_xstrdup(spool_dir);
    } else {
        st = make_spool_dir(db_path, &dir);
    }
    if (st != AMP_OK) {
        if (lock_fd >= 0) close(lock_fd);
        return st;
    }
    amp_collector_t *c = amp_xcalloc(1, sizeof *c);
    c->live_fd = -1;
    c->db_lock_fd = lock_fd; // (-1: taken below, once the file exists)
    c->spool_dir = dir;
    c->own_spool_dir = !spool_dir;
    c->buf = amp_xmalloc(READ_CHUNK);
    c->stats.last_step = -1;
    c->stats.last_step_ms = c->stats.last_loss = c->stats.scale = NAN;
    st = amp_store_create(db_path, &c->store);
    if (st != AMP_OK) {
        failed_start(c);
        return st;
    }
    c->db_path = amp_xstrdup(db_path);
    if (c->db_lock_fd < 0) {
        c->db_lock_fd = open(db_path, O_RDONLY | O_CLOEXEC);
        if (c->db_lock_fd >= 0 && flock(c->db_lock_fd, LOCK_EX | LOCK_NB) != 0) {
            close(c->db_lock_fd);
            c->db_lock_fd = -1;
        }
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char version[16];
    snprintf(version, sizeof version, "%d.%d", AMP_SCHEMA_MAJOR, AMP_SCHEMA_MINOR);
    st = amp_store_begin(c->store);
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, "schema_version", version);
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, "clock", "CLOCK_REALTIME");
    if (st == AMP_OK) st = put_time_meta(c, "start");
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, "host", host);
    if (st == AMP_OK) st = put_meta_i64(c, "collector_pid", getpid());
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, "status", "running");
    if (st == AMP_OK) st = amp_store_commit(c->store);
    if (st != AMP_OK) {
        failed_start(c);
        return st;
    }
    if (c->own_spool_dir) hold_reserve(c); // (after the start: a disk with little room still runs)
    hold_live_lock(c);
    *out = c;
    return AMP_OK;
}

amp_status amp_collector_set_meta(amp_collector_t *c, const char *key, const char *value) {
    amp_clear_error();
    return amp_store_meta(c->store, 0, key, value);
}

bool amp_collector_db_busy(const char *db_path) {
    int fd = open(db_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    const bool busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd); // (this process has no SQLite connection to the file whose locks it would drop)
    return busy;
}

void amp_collector_get_stats(const amp_collector_t *c, amp_collector_stats *out) {
    *out = c->stats;
    out->stopped = c->stopped;
}

const char *amp_collector_spool_dir(const amp_collector_t *c) {
    return c->spool_dir;
}

void amp_collector_free(amp_collector_t *c) {
    if (!c) return;
    if (c->in_txn) txn_commit(c);
    for (int i = 0; i < c->n_files; i++) {
        if (c->files[i].fd >= 0) close(c->files[i].fd);
        free(c->files[i].name);
    }
    free(c->files);
    amp_strmap_free(&c->events);
    free(c->aggs);
    free(c->dirty);
    amp_strmap_free(&c->local_strings);
    amp_store_close(c->store);
    if (c->db_lock_fd >= 0) close(c->db_lock_fd);
    give_back_reserve(c);
    drop_live_lock(c);
    if (c->own_spool_dir && !c->finished) rmdir(c->spool_dir); // only when empty: nothing lost
    free(c->buf);
    free(c->spool_dir);
    free(c->stopped);
    free(c->db_path);
    free(c);
}

// ---------------------------------------------------------------------------------------------
// Records

// The events map's key of an event: its process, layer and phase, then its kind and op, each
// ended by its NUL (no separator a name could hold; built by hand: snprintf took about 2000
// instructions an event). Names are cut at a length no real one reaches.
static size_t event_key(char key[static EVENT_KEY_MAX], int32_t pid, const amp_rec_event *r) {
    const int32_t fixed[3] = {pid, r->layer_id, (int32_t)r->phase};
    memcpy(key, fixed, sizeof fixed);
    size_t n = sizeof fixed;
    const char *names[2] = {r->kind ? r->kind : "", r->op ? r->op : ""};
    for (int i = 0; i < 2; i++) {
        const size_t len = strnlen(names[i], EVENT_NAME_MAX);
        memcpy(key + n, names[i], len);
        n += len;
        key[n++] = 0;
    }
    return n;
}

static amp_status ingest_event(amp_collector_t *c, spool_file *f, const amp_rec_event *r) {
    char key[EVENT_KEY_MAX];
    const size_t len = event_key(key, f->pid, r);
    bool found;
    int64_t *slot = amp_strmap_get_or_put(&c->events, key, len, 0, &found);
    c->stats.events++;
    int64_t rowid;
    if (*slot < AMP_EVENTS_KEEP && *slot >= 0) { // one of the first: a row of its own
        (*slot)++;
        return amp_store_event_insert(c->store, f->pid, r, false, &rowid);
    }
    if (*slot == AMP_EVENTS_KEEP) { // the first one past them starts the aggregate row
        amp_status st = amp_store_event_insert(c->store, f->pid, r, true, &rowid);
        if (c->n_aggs == c->cap_aggs) {
            c->cap_aggs = c->cap_aggs ? 2 * c->cap_aggs : 64;
            c->aggs = amp_xrealloc(c->aggs, (size_t)c->cap_aggs * sizeof *c->aggs);
            c->dirty = amp_xrealloc(c->dirty, (size_t)c->cap_aggs * sizeof *c->dirty);
        }
        c->aggs[c->n_aggs] = (event_agg){.rowid = rowid};
        *slot = -1 - c->n_aggs++;
        return st;
    }
    event_agg *a = &c->aggs[-1 - *slot]; // later ones are folded in at the next commit
    if (a->pending == 0) {
        c->dirty[c->n_dirty++] = (int)(-1 - *slot);
        a->count = -1;
        a->value = NAN;
    }
    a->pending++;
    a->last_step = r->step;
    if (r->count >= 0) { // (a garbage count must not overflow the sum: it saturates)
        const int64_t sum = a->count < 0 ? 0 : a->count;
        a->count = r->count > INT64_MAX - sum ? INT64_MAX : sum + r->count;
    }
    if (!isnan(r->value)) a->value = r->value;
    return AMP_OK;
}

// The StringIds id of f's process-local string id in local_strings, keyed by the spool file's
// index and the id; put there (as 0) when not found.
static int64_t *local_slot(amp_collector_t *c, const spool_file *f, uint64_t id, bool *found) {
    const uint64_t key[2] = {(uint64_t)(f - c->files), id};
    return amp_strmap_get_or_put(&c->local_strings, (const char *)key, sizeof key, 0, found);
}

static int64_t local_string(amp_collector_t *c, const spool_file *f, uint64_t id) {
    if (id == 0) return 0;
    bool found;
    const int64_t *v = local_slot(c, f, id, &found);
    return found ? *v : 0; // 0 (NULL) when the string record never came
}

// Inserts one decoded record and keeps the live statistics.
static amp_status ingest_record(amp_collector_t *c, spool_file *f, uint16_t type,
                                const amp_rec_any *r) {
    amp_store *s = c->store;
    amp_collector_stats *st = &c->stats;
    st->rows++;
    switch ((amp_rec_type)type) {
    case AMP_REC_META:
        if (!r->meta.key) return AMP_OK;
        return amp_store_meta(s, f->pid, r->meta.key, r->meta.value);
    case AMP_REC_LAYER:
        return amp_store_layer(s, f->pid, &r->layer);
    case AMP_REC_STEP:
        st->steps++;
        if (!f->sent_steps) { // (a process that started recording again has a file more)
            f->sent_steps = true;
            bool again = false;
            for (int i = 0; i < c->n_files && !again; i++)
                again = &c->files[i] != f && c->files[i].pid == f->pid && f->exec_id &&
                        c->files[i].exec_id == f->exec_id && c->files[i].sent_steps;
            st->step_processes += !again;
        }
        st->last_step = r->step.step;
        // (subtracted as doubles: made-up times must not overflow)
        st->last_step_ms = ((double)r->step.end_ns - (double)r->step.start_ns) / 1e6;
        st->last_loss = r->step.loss;
        return amp_store_step(s, f->pid, &r->step);
    case AMP_REC_SCALE:
        st->rows++; // two rows: AMP_SCALE's and the scale columns of the step's AMP_STEPS row
        st->scale = r->scale.scale_after;
        st->skipped += r->scale.skipped;
        return amp_store_scale(s, f->pid, &r->scale);
    case AMP_REC_TENSOR_STATS:
        return amp_store_tensor_stats(s, f->pid, &r->tensor_stats);
    case AMP_REC_OP:
        return amp_store_op(s, f->pid, &r->op);
    case AMP_REC_EVENT:
        return ingest_event(c, f, &r->event);
    case AMP_REC_STRING: {
        if (r->string.id == 0 || !r->string.value) return AMP_OK;
        bool found;
        return amp_store_string_id(s, r->string.value, local_slot(c, f, r->string.id, &found));
    }
    case AMP_REC_KERNEL:
        return amp_store_kernel(s, f->pid, &r->kernel);
    case AMP_REC_MEMCPY:
        return amp_store_memcpy(s, f->pid, &r->memcpy);
    case AMP_REC_MEMSET:
        return amp_store_memset(s, f->pid, &r->memset);
    case AMP_REC_RUNTIME:
        return amp_store_runtime(s, f->pid, &r->runtime);
    case AMP_REC_SYNC:
        return amp_store_sync(s, f->pid, &r->sync);
    case AMP_REC_NVTX:
        return amp_store_nvtx(s, f->pid, &r->nvtx, local_string(c, f, r->nvtx.text_id),
                              local_string(c, f, r->nvtx.domain_id));
    case AMP_REC_GPU_INFO:
        return amp_store_gpu_info(s, &r->gpu_info);
    case AMP_REC_GPU_METRIC:
        return amp_store_gpu_metric(s, &r->gpu_metric);
    }
    return AMP_OK; // not reached: the caller skips types this build does not know
}

// ---------------------------------------------------------------------------------------------
// Spool files

static const char *file_label(const spool_file *f, char *buf, size_t n) {
    snprintf(buf, n, "spool of pid %d (%s)", f->os_pid, f->comm[0] ? f->comm : "?");
    return buf;
}

// Gives the disk back what f holds below its committed offset, PUNCH_MIN or more at a time, as
// a hole (the file keeps its size; the writer appends as before). The hole would move the
// file's mtime, which file_finish reads as the writer's last write: it is set back.
static void give_back_ingested(spool_file *f) {
    const uint64_t end = f->offset / PAGE_BYTES * PAGE_BYTES;
    if (!f->can_punch || f->fd < 0 || end < f->punched + PUNCH_MIN) return;
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) return;
    if (fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)f->punched,
                  (off_t)(end - f->punched)) != 0) {
        f->can_punch = false; // (a file system without holes: the file stays whole)
        return;
    }
    f->punched = end;
    futimens(f->fd, (const struct timespec[2]){{.tv_nsec = UTIME_OMIT}, sb.st_mtim});
}

// The span [start_ns, end_ns] a record of type carries; false for one without times.
static bool record_span(uint16_t type, const amp_rec_any *r, int64_t *start_ns, int64_t *end_ns) {
    switch ((amp_rec_type)type) {
#define SPAN(TYPE, field)                                                                          \
    case TYPE:                                                                                     \
        *start_ns = r->field.start_ns;                                                             \
        *end_ns = r->field.end_ns;                                                                 \
        return true;
        SPAN(AMP_REC_STEP, step)
        SPAN(AMP_REC_OP, op)
        SPAN(AMP_REC_KERNEL, kernel)
        SPAN(AMP_REC_MEMCPY, memcpy)
        SPAN(AMP_REC_MEMSET, memset)
        SPAN(AMP_REC_RUNTIME, runtime)
        SPAN(AMP_REC_SYNC, sync)
        SPAN(AMP_REC_NVTX, nvtx)
        SPAN(AMP_REC_GPU_METRIC, gpu_metric)
#undef SPAN
    default:
        return false;
    }
}

// The step a record of type carries; false for one without a step.
static bool record_step(uint16_t type, const amp_rec_any *r, int64_t *step) {
    switch ((amp_rec_type)type) {
    case AMP_REC_STEP:
        *step = r->step.step;
        return true;
    case AMP_REC_SCALE:
        *step = r->scale.step;
        return true;
    case AMP_REC_TENSOR_STATS:
        *step = r->tensor_stats.step;
        return true;
    case AMP_REC_OP:
        *step = r->op.step;
        return true;
    case AMP_REC_EVENT:
        *step = r->event.step;
        return true;
    default:
        return false;
    }
}

// Widens f's [first_ns, last_ns] by the times record r carries (0 and -1: not known, as an NVTX
// mark's end), which its process's row spans (process_update).
static void file_note_times(spool_file *f, uint16_t type, const amp_rec_any *r) {
    int64_t t[2];
    if (!record_span(type, r, &t[0], &t[1])) return;
    for (int i = 0; i < 2; i++) {
        if (t[i] <= 0) continue;
        if (!f->first_ns || t[i] < f->first_ns) f->first_ns = t[i];
        if (t[i] > f->last_ns) f->last_ns = t[i];
    }
}

static void file_close(spool_file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

// f's process's AMP_PROCESSES row from all the spool files it wrote (one per start of
// recording): their records and bytes, and while one of them is open, running; else ended at
// end_ns with status, how f (the last to end) ended. The row spans the times its records carry:
// a step begun before its first record created the spool starts it, and a last record stamped
// after the file system's coarse clock last moved ends it.
static amp_status process_update(amp_collector_t *c, const spool_file *f, int64_t end_ns,
                                 const char *status) {
    int64_t records = 0, bytes = 0, start_ns = f->start_ns, last_ns = 0;
    bool running = false;
    for (int i = 0; i < c->n_files; i++) {
        const spool_file *g = &c->files[i];
        if (g->proc_rowid != f->proc_rowid) continue;
        records += g->records;
        bytes += (int64_t)g->offset;
        running |= !g->done;
        if (g->start_ns < start_ns) start_ns = g->start_ns;
        if (g->first_ns && g->first_ns < start_ns) start_ns = g->first_ns;
        if (g->last_ns > last_ns) last_ns = g->last_ns;
    }
    if (last_ns > end_ns) end_ns = last_ns;
    return amp_store_process_update(c->store, f->proc_rowid, start_ns, running ? -1 : end_ns,
                                    records, bytes, running ? "running" : status);
}

// The writer is gone and everything readable was read: record how the file ended.
static amp_status file_finish(amp_collector_t *c, spool_file *f, const char *status) {
    struct stat sb;
    int64_t end_ns = -1;
    // the file system's coarse clock, up to a tick behind: the records' own times move it on
    // (process_update)
    if (fstat(f->fd, &sb) == 0)
        end_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    if (end_ns >= 0 && end_ns < f->start_ns) end_ns = f->start_ns;
    f->done = true;
    return process_update(c, f, end_ns, status);
}

// Whether the poll's time is up (amp_collector_poll_for): what is left waits for the next one.
static bool poll_time_up(const amp_collector_t *c) {
    return c->poll_until_ns && now_ns(CLOCK_MONOTONIC) >= c->poll_until_ns;
}

// Reads what f's writer appended since the last poll: to its end, or until the poll's time is
// up (*behind).
static amp_status file_ingest(amp_collector_t *c, spool_file *f, bool *behind) {
    char label[64];
    *behind = false;
    for (;;) {
        ssize_t n = pread(f->fd, c->buf, READ_CHUNK, (off_t)f->offset);
        if (n < 0) {
            warn(c, "%s: %s; skipping the rest", file_label(f, label, sizeof label),
                 strerror(errno));
            return file_finish(c, f, "corrupt");
        }
        size_t pos = 0;
        while (pos < (size_t)n) {
            amp_rec_header h;
            const uint8_t *payload;
            amp_scan sc = amp_rec_scan(c->buf + pos, (size_t)n - pos, &h, &payload);
            if (sc == AMP_SCAN_PARTIAL) break;
            amp_rec_any rec;
            if (sc == AMP_SCAN_CORRUPT ||
                (amp_rec_type_known(h.type) && !amp_rec_decode(h.type, payload, h.length, &rec))) {
                f->offset += pos;
                warn(c, "%s: corrupt record at byte %llu; skipping the rest of the file",
                     file_label(f, label, sizeof label), (unsigned long long)f->offset);
                return file_finish(c, f, "corrupt");
            }
            pos += AMP_REC_HEADER_BYTES + h.length;
            if (!amp_rec_type_known(h.type)) { // from a newer writer
                if (!f->warned_unknown)
                    warn(c, "%s: record type %u is unknown to this build; skipped",
                         file_label(f, label, sizeof label), (unsigned)h.type);
                f->warned_unknown = true;
                continue;
            }
            int64_t step;
            if (record_step(h.type, &rec, &step) && step < 0) { // (steps count from 0: the
                // report's and the TUI's step ranges take -1 for "none")
                if (!f->warned_negative)
                    warn(c,
                         "%s: a record of step %lld; steps are numbered from 0, and the "
                         "records of negative steps are left out",
                         file_label(f, label, sizeof label), (long long)step);
                f->warned_negative = true;
                continue;
            }
            amp_status st = ingest_record(c, f, h.type, &rec);
            if (st != AMP_OK) return st;
            file_note_times(f, h.type, &rec);
            f->records++;
            c->stats.records++;
        }
        f->offset += pos;
        if ((size_t)n < READ_CHUNK) return AMP_OK; // reached the end for now
        amp_status st = txn_maybe_cut(c);
        if (st != AMP_OK) return st;
        if (poll_time_up(c)) {
            *behind = true;
            return AMP_OK;
        }
    }
}

static bool known_file(const amp_collector_t *c, const char *name) {
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->files[i].name, name) == 0) return true;
    return false;
}

// Opens a spool file that appeared and checks its header.
static amp_status file_add(amp_collector_t *c, const char *name) {
    if (c->n_files == c->cap_files) {
        c->cap_files = c->cap_files ? 2 * c->cap_files : 16;
        c->files = amp_xrealloc(c->files, (size_t)c->cap_files * sizeof *c->files);
    }
    spool_file *f = &c->files[c->n_files++];
    memset(f, 0, sizeof *f);
    f->name = amp_xstrdup(name);
    char *path = amp_path_join(c->spool_dir, name);
    f->fd = open(path, O_RDWR | O_CLOEXEC); // (for writing: to punch holes in it)
    f->can_punch = f->fd >= 0;
    if (f->fd < 0) f->fd = open(path, O_RDONLY | O_CLOEXEC);
    const int open_errno = errno;
    free(path);
    c->stats.files++;
    if (f->fd < 0 && (open_errno == EMFILE || open_errno == ENFILE)) { // tried again next scan
        if (!c->fds_warned)
            warn(c, "spool file %s: %s; it waits until a descriptor frees (raise ulimit -n)", name,
                 strerror(open_errno));
        c->fds_warned = true;
        c->fd_waits++;
        free(f->name);
        c->n_files--;
        c->stats.files--;
        return AMP_OK;
    }
    amp_spool_header h;
    if (f->fd < 0 || pread(f->fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        warn(c, "spool file %s: %s; ignored", name, f->fd < 0 ? strerror(open_errno) : "no header");
        f->done = true;
        return AMP_OK;
    }
    if (amp_spool_header_check(&h) != AMP_OK) {
        warn(c, "spool file %s: %s; ignored", name, amp_last_error());
        amp_clear_error(); // (warned and ignored: the call goes on, and succeeds)
        f->done = true;
        return AMP_OK;
    }
    f->os_pid = f->pid = h.pid;
    f->ppid = h.ppid;
    f->start_ns = h.start_ns;
    f->exec_id = h.exec_id;
    f->proc_start = h.proc_start;
    memcpy(f->comm, h.comm, sizeof h.comm);
    f->comm[16] = 0;
    f->offset = h.header_bytes;
    f->punched = (h.header_bytes + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
    int later = 0; // the images of this pid seen before (an older writer's files: 0 exec_id)
    for (int i = 0; i < c->n_files - 1 && f->exec_id; i++) {
        const spool_file *g = &c->files[i];
        if (g->os_pid != f->os_pid || !g->exec_id || !g->proc_rowid) continue;
        // started again (a start of 0 is unknown: an older writer, /proc unreadable)
        if (g->exec_id == f->exec_id &&
            (g->proc_start == f->proc_start || !g->proc_start || !f->proc_start)) {
            f->pid = g->pid;
            f->proc_rowid = g->proc_rowid;
            return process_update(c, f, -1, "running");
        }
        const int k = (g->pid - g->os_pid) / AMP_PID_IMAGE_SPAN + 1;
        if (k > later) later = k;
    }
    if (later > 0 && (int64_t)f->os_pid + (int64_t)later * AMP_PID_IMAGE_SPAN <= INT32_MAX)
        f->pid = f->os_pid + later * AMP_PID_IMAGE_SPAN;
    return amp_store_process_add(c->store, f->pid, f->ppid, f->comm, f->start_ns, &f->proc_rowid);
}

// Spool file names, PID-START_NS.spool, by START_NS (then by name).
static int cmp_spool_name(const void *pa, const void *pb) {
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    const char *da = strchr(a, '-'), *db = strchr(b, '-');
    const long long ta = da ? strtoll(da + 1, NULL, 10) : 0,
                    tb = db ? strtoll(db + 1, NULL, 10) : 0;
    return ta != tb ? (ta > tb) - (ta < tb) : strcmp(a, b);
}

static amp_status scan_dir(amp_collector_t *c) {
    DIR *d = opendir(c->spool_dir);
    if (!d) {
        if (!c->spool_dir_warned) warn(c, "spool directory %s: %s", c->spool_dir, strerror(errno));
        c->spool_dir_warned = true;
        return AMP_OK;
    }
    amp_status st = AMP_OK;
    const size_t suffix = strlen(AMP_SPOOL_SUFFIX);
    c->fd_waits = 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len <= suffix ||
            strcmp(e->d_name + len - suffix, AMP_SPOOL_SUFFIX) != 0 || known_file(c, e->d_name))
            continue;
        AMP_GROW(names, n, cap);
        names[n++] = amp_xstrdup(e->d_name);
    }
    closedir(d);
    // in the order they were made: of two images of one pid (an exec), the earlier keeps it
    amp_sort(names, n, sizeof *names, cmp_spool_name);
    for (size_t i = 0; i < n; i++) {
        if (st == AMP_OK) st = file_add(c, names[i]);
        free(names[i]);
    }
    free(names);
    return st;
}

// Files whose rows are committed and whose writer is gone are not needed any more.
static void remove_done_files(amp_collector_t *c) {
    for (int i = 0; i < c->n_files; i++) {
        spool_file *f = &c->files[i];
        if (!f->done || f->fd < 0) continue;
        char *path = amp_path_join(c->spool_dir, f->name);
        unlink(path);
        free(path);
        file_close(f);
    }
}

int amp_collector_live_pids(const amp_collector_t *c, int32_t *out, int max) {
    int n = 0;
    for (int i = 0; i < c->n_files && (!out || n < max); i++)
        if (!c->files[i].done && !c->files[i].writer_gone && c->files[i].os_pid > 0) {
            if (out) out[n] = c->files[i].os_pid;
            n++;
        }
    return n;
}

// ---------------------------------------------------------------------------------------------
// Polling and the end of the run

// Keeps the first reason recording stopped short, for the report (META capture_error).
static void note_stopped(amp_collector_t *c, const char *why) {
    if (!c->stopped) c->stopped = amp_xstrdup(why);
}

// Whether the filesystem of the spool directory is (nearly) full.
static bool spool_disk_full(const amp_collector_t *c) {
    struct statvfs v;
    return statvfs(c->spool_dir, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < FULL_DISK_BYTES;
}

static amp_status poll_files(amp_collector_t *c) {
    amp_status st = txn_begin(c);
    if (st == AMP_OK) st = scan_dir(c);
    int live = 0;
    bool read_any = false;
    char label[64];
    for (int i = 0; i < c->n_files && st == AMP_OK; i++) {
        spool_file *f = &c->files[i];
        if (f->done) continue;
        // (the files after the time is up wait their turn; each poll reads one at least)
        bool behind = read_any && poll_time_up(c);
        // Take the lock before reading: once it is ours, every byte the writer wrote is there.
        if (!f->writer_gone && !behind) f->writer_gone = flock(f->fd, LOCK_EX | LOCK_NB) == 0;
        if (!behind) st = file_ingest(c, f, &behind), read_any = true;
        if (st != AMP_OK || f->done) continue;
        if (!f->writer_gone || behind) { // (a file left behind is not finished: more to read)
            live += !f->writer_gone;
            continue;
        }
        struct stat sb;
        if (fstat(f->fd, &sb) == 0 && (uint64_t)sb.st_size != f->offset) {
            if ((uint64_t)sb.st_size > f->offset)
                warn(c, "%s: the last record is incomplete (%llu bytes); skipped",
                     file_label(f, label, sizeof label),
                     (unsigned long long)((uint64_t)sb.st_size - f->offset));
            else // (its header says it is longer than the file)
                warn(c, "%s: %llu bytes, shorter than its header's %llu",
                     file_label(f, label, sizeof label), (unsigned long long)sb.st_size,
                     (unsigned long long)f->offset);
            if (spool_disk_full(c))
                note_stopped(c, "the disk that holds the spool (beside the database) was full: "
                                "a process could not write its records");
            st = file_finish(c, f, "truncated");
        } else {
            st = file_finish(c, f, "complete");
        }
    }
    c->stats.live_writers = live;
    if (st == AMP_OK) {
        st = txn_commit(c);
        if (st == AMP_OK) remove_done_files(c);
        for (int i = 0; i < c->n_files && st == AMP_OK; i++)
            if (!c->files[i].done) give_back_ingested(&c->files[i]);
    } else if (c->in_txn) { // keep what was written before the failure, and its message
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", amp_last_error());
        txn_commit(c);
        amp_set_error(st, "%s", msg);
    }
    if (st != AMP_OK) { // (META capture_error at the end says the first failure)
        char why[1100];
        snprintf(why, sizeof why, "the database could not be written (%s)", amp_last_error());
        note_stopped(c, why);
    }
    return st;
}

amp_status amp_collector_poll_for(amp_collector_t *c, int64_t budget_ns) {
    AMP_ASSERT(!c->finished, "poll after finish");
    AMP_ASSERT(budget_ns > 0, "(amp_collector_poll_for: a budget of at least 1 ns)");
    c->poll_until_ns = now_ns(CLOCK_MONOTONIC) + budget_ns;
    amp_status st = poll_files(c);
    c->poll_until_ns = 0; // (amp_collector_finish reads everything)
    return st;
}

amp_status amp_collector_poll(amp_collector_t *c) {
    return amp_collector_poll_for(c, POLL_BUDGET_NS);
}

// Removes the spool files left and the directory (the run is over): one still being written, a
// writer's temporary name, and those that could not be ingested.
static void remove_spool(amp_collector_t *c) {
    drop_live_lock(c); // (nothing more is read: writers still running stop recording)
    DIR *d = opendir(c->spool_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        const char *tmp = AMP_SPOOL_SUFFIX ".tmp";
        if (!(len > strlen(AMP_SPOOL_SUFFIX) &&
              strcmp(e->d_name + len - strlen(AMP_SPOOL_SUFFIX), AMP_SPOOL_SUFFIX) == 0) &&
            !(len > strlen(tmp) && strcmp(e->d_name + len - strlen(tmp), tmp) == 0))
            continue;
        char *path = amp_path_join(c->spool_dir, e->d_name);
        unlink(path);
        free(path);
    }
    if (d) closedir(d);
    if (rmdir(c->spool_dir) != 0 && errno != ENOENT) {
        const int e = errno;
        // a process that began recording at the very end made a file since: the lock file goes
        // back, unlocked, so that it (and any that start after it) sees recording has ended (in
        // the run's own directory: a directory of the caller's may see another collector next)
        if (c->own_spool_dir) {
            char *path = amp_path_join(c->spool_dir, AMP_SPOOL_LIVE_LOCK);
            const int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd >= 0) close(fd);
            free(path);
        }
        warn(c, "spool directory %s not removed: %s", c->spool_dir, strerror(e));
    }
}

amp_status amp_collector_finish(amp_collector_t *c, int exit_status) {
    amp_clear_error();
    AMP_ASSERT(!c->finished, "finish called twice");
    amp_status lost = poll_files(c);
    // files that waited for a descriptor get those of the files just finished, while that helps
    for (int before = -1; lost == AMP_OK && c->fd_waits && c->n_files != before;) {
        before = c->n_files;
        lost = poll_files(c);
    }
    give_back_reserve(c); // room, on a full disk, for the end of the run
    char lost_msg[1024] = "";
    if (lost != AMP_OK) {
        // What was not ingested is lost: the spool goes (more room), the rows held are
        // committed if they now can be, and META says why
        snprintf(lost_msg, sizeof lost_msg, "%s", amp_last_error());
        char why[1100];
        snprintf(why, sizeof why, "the database could not be written (%s)", lost_msg);
        note_stopped(c, why);
        remove_spool(c);
        if (amp_store_commit(c->store) != AMP_OK) amp_store_rollback(c->store);
    }
    c->finished = true;
    amp_status st = txn_begin(c);
    char label[64];
    for (int i = 0; i < c->n_files && st == AMP_OK; i++) {
        spool_file *f = &c->files[i];
        if (f->done) continue;
        if (lost == AMP_OK)
            warn(c, "%s: the process is still running; its later records are not in the database",
                 file_label(f, label, sizeof label));
        st = file_finish(c, f, "unfinished");
    }
    if (st == AMP_OK && c->stopped) st = amp_store_meta(c->store, 0, "capture_error", c->stopped);
    if (st == AMP_OK) st = put_time_meta(c, "end");
    if (st == AMP_OK && exit_status >= 0) st = put_meta_i64(c, "exit_status", exit_status);
    if (st == AMP_OK) st = put_meta_i64(c, "records", c->stats.records);
    if (st == AMP_OK) st = put_meta_i64(c, "warnings", c->stats.warnings);
    if (st == AMP_OK) st = amp_store_meta(c->store, 0, "status", "complete");
    if (st == AMP_OK) st = txn_commit(c);
    if (st == AMP_OK) st = amp_store_finish(c->store);
    remove_done_files(c); // (the run is over: what is not in the database by now never will be)
    remove_spool(c);
    struct stat held, named; // the file written is still the one the name gives
    if (c->db_lock_fd >= 0 && fstat(c->db_lock_fd, &held) == 0 &&
        (stat(c->db_path, &named) != 0 || named.st_dev != held.st_dev ||
         named.st_ino != held.st_ino))
        note_stopped(c, "the database file was removed or replaced while the run was recorded: "
                        "its rows went with the removed file");
    if (st != AMP_OK) return st;
    return lost == AMP_OK ? AMP_OK : amp_set_error(lost, "%s", lost_msg);
}
