/*
 * report_perf.c — the kernel side of the report model: what CUDA capture recorded in the
 * Nsight-named tables (CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _SYNCHRONIZATION / _RUNTIME,
 * TARGET_INFO_GPU), narrowed to the time window of the focused steps and condensed into
 * report_perf, the per-step kernel columns of report_step and the kernel columns of report_op.
 *
 * Kernels are tied to the op that launched them through the launch API call
 * (kernel.correlationId = runtime.correlationId): the AMP_OPS row of the same process whose host
 * interval holds the call's start. An op's analytic FLOPs and bytes are shared among its kernels
 * by duration; that gives each kernel name an arithmetic intensity for the roofline.
 *
 * The card's ceilings, best first: those `ampprobe calibrate` measured on this GPU model and
 * cached (probe/ceilings.h); TARGET_INFO_GPU.memoryBandwidth when recorded; the default table
 * below (report/README.md documents it), marked as an assumption.
 *
 * Every table may be empty (a CPU run): then n_kernels is 0 and every figure 0. The kernels and
 * AMP_OPS are each read in one table scan and joined in C (sorts and merges), so a run with a
 * million kernels loads in a few seconds (report/bench).
 */
#include "report.h"

#include "amp-impl.h"
#include "ceilings.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// ---------------------------------------------------------------------------------------------
// The default ceilings (fp16/bf16 dense Tensor Core, fp32 without Tensor Cores, DRAM bandwidth)

static const struct gpu_row {
    const char *match; // case-insensitive substring of TARGET_INFO_GPU.name
    double peak, peak_fp32, bandwidth;
    const char *source;
} gpu_table[] = {
    // measured on this project's H200 (../shared/bench/README.md): cuBLAS bf16 GEMM, D2D copy
    {"H200", 790e12, 67e12, 4.3e12, "H200 (measured: 790 TFLOP/s bf16/fp16 GEMM, 4.3 TB/s copy)"},
    {"H100", 989e12, 67e12, 3.35e12, "H100 SXM (spec: 989 TFLOP/s fp16 dense, 3.35 TB/s)"},
    {"A100", 312e12, 19.5e12, 2.0e12, "A100 (spec: 312 TFLOP/s fp16 dense, 2.0 TB/s)"},
    {"L40S", 362e12, 91.6e12, 0.864e12, "L40S (spec: 362 TFLOP/s fp16 dense, 864 GB/s)"},
    {"L4", 121e12, 30.3e12, 0.3e12, "L4 (spec: 121 TFLOP/s fp16 dense, 300 GB/s)"},
    {"4090", 165e12, 82.6e12, 1.008e12, "RTX 4090 (spec: 165 TFLOP/s fp16, 1.0 TB/s)"},
};

void report_gpu_defaults(const char *name, report_gpu *g) {
    const struct gpu_row *row = &gpu_table[0];
    for (size_t i = 0; name && i < sizeof gpu_table / sizeof gpu_table[0]; i++) {
        size_t n = strlen(gpu_table[i].match);
        bool hit = false;
        for (const char *p = name; *p && !hit; p++)
            hit = strncasecmp(p, gpu_table[i].match, n) == 0;
        if (hit) {
            row = &gpu_table[i];
            break;
        }
    }
    g->peak_flops = row->peak;
    g->peak_flops_fp32 = row->peak_fp32;
    g->bandwidth = row->bandwidth;
    g->peak_assumed = g->bandwidth_assumed = true;
    g->table_entry = row->source;
}

// ---------------------------------------------------------------------------------------------
// Queries over the window [lo_ns, hi_ns] (?1, ?2)

// A stretch between two steps of a process that no step's window holds (between_steps).
typedef struct between {
    int32_t pid;
    int64_t from, to;
} between;

typedef struct loader {
    sqlite3 *db;
    report_model *m;
    char *err;
    int64_t lo_ns, hi_ns;
    int64_t *sync_ends; // the host synchronisations' ends, in order
    size_t n_sync_ends;
    between *betweens; // by pid, then time
    size_t n_betweens;
} loader;

static bool prep(loader *l, const char *sql, sqlite3_stmt **q) {
    if (sqlite3_prepare_v2(l->db, sql, -1, q, NULL) != SQLITE_OK) {
        snprintf(l->err, REPORT_ERR_MAX, "%s: cannot read the run (%s)", l->m->path,
                 sqlite3_errmsg(l->db));
        return false;
    }
    if (sqlite3_bind_parameter_count(*q) >= 2) {
        sqlite3_bind_int64(*q, 1, l->lo_ns);
        sqlite3_bind_int64(*q, 2, l->hi_ns);
    }
    return true;
}

static bool done(loader *l, sqlite3_stmt *q, int rc) {
    sqlite3_finalize(q);
    if (rc == SQLITE_DONE) return true;
    snprintf(l->err, REPORT_ERR_MAX, "%s: cannot read the run (%s)", l->m->path,
             sqlite3_errmsg(l->db));
    return false;
}

static int64_t i64(sqlite3_stmt *q, int i) {
    return sqlite3_column_type(q, i) == SQLITE_NULL ? 0 : sqlite3_column_int64(q, i);
}

// The focused steps' window (everything when the focus is open or no step has times).
static void window(loader *l) {
    l->lo_ns = INT64_MIN;
    l->hi_ns = INT64_MAX;
    const report_model *m = l->m;
    if (m->step_lo == INT64_MIN && m->step_hi == INT64_MAX) return;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < m->n_steps; i++) {
        if (m->steps[i].start_ns < 0) continue;
        if (m->steps[i].start_ns < lo) lo = m->steps[i].start_ns;
        if (m->steps[i].end_ns > hi) hi = m->steps[i].end_ns;
    }
    if (lo <= hi) l->lo_ns = lo, l->hi_ns = hi;
}

static bool load_gpu(loader *l) {
    report_gpu *g = &l->m->perf.gpu;
    sqlite3_stmt *q;
    if (!prep(l, "SELECT name, memoryBandwidth FROM TARGET_INFO_GPU ORDER BY id LIMIT 1", &q))
        return false;
    int rc = sqlite3_step(q);
    const unsigned char *name = rc == SQLITE_ROW ? sqlite3_column_text(q, 0) : NULL;
    report_gpu_defaults(name ? (const char *)name : NULL, g);
    if (rc == SQLITE_ROW) {
        g->name = report_strdup_name(name ? (const char *)name : "GPU");
        if (sqlite3_column_type(q, 1) != SQLITE_NULL && sqlite3_column_double(q, 1) > 0) {
            g->bandwidth = sqlite3_column_double(q, 1);
            g->bandwidth_assumed = false;
        }
        rc = sqlite3_step(q);
    }
    amp_ceilings c;
    if (g->name && amp_ceilings_load(g->name, &c)) {
        double peak = fmax(c.gemm_flops_bf16, c.gemm_flops_f16); // fmax ignores a NaN
        if (peak > 0) g->peak_flops = peak, g->peak_assumed = false;
        if (c.gemm_flops_f32 > 0) g->peak_flops_fp32 = c.gemm_flops_f32;
        if (c.dram_bytes_per_s > 0) g->bandwidth = c.dram_bytes_per_s, g->bandwidth_assumed = false;
        g->table_entry = "measured by ampprobe calibrate";
    }
    return done(l, q, rc);
}

// ---------------------------------------------------------------------------------------------
// Kernel names by shortName id: p->kernels[k] is named by StringIds row ids[k]

typedef struct kernel_ids {
    int64_t *ids;
    size_t cap;
    report_index index;
} kernel_ids;

static bool same_id(const void *arr, size_t i, const void *key) {
    return ((const int64_t *)arr)[i] == *(const int64_t *)key;
}

static uint64_t id_hash(const void *arr, size_t i) {
    return report_mix((uint64_t)((const int64_t *)arr)[i]);
}

// The kernel-name index of a shortName id, adding an entry (named later) when new.
static int32_t kernel_of(report_perf *p, kernel_ids *t, int64_t id, size_t *cap) {
    size_t *slot = report_index_slot(&t->index, p->n_kernels, report_mix((uint64_t)id), t->ids, &id,
                                     same_id, id_hash);
    if (*slot) return (int32_t)(*slot - 1);
    AMP_GROW(p->kernels, p->n_kernels, *cap);
    AMP_GROW(t->ids, p->n_kernels, t->cap);
    int32_t k = (int32_t)p->n_kernels++;
    p->kernels[k] = (report_kernel){.layer_id = -1};
    t->ids[k] = id;
    *slot = (size_t)k + 1;
    return k;
}

// Names the kernels from StringIds (t holds their ids).
static bool name_kernels(loader *l, const kernel_ids *t) {
    report_perf *p = &l->m->perf;
    sqlite3_stmt *q;
    if (!prep(l, "SELECT value FROM StringIds WHERE id = ?1", &q)) return false;
    for (size_t k = 0; k < p->n_kernels; k++) {
        sqlite3_bind_int64(q, 1, t->ids[k]);
        int rc = sqlite3_step(q);
        const unsigned char *v = rc == SQLITE_ROW ? sqlite3_column_text(q, 0) : NULL;
        p->kernels[k].name = report_strdup_name(v ? (const char *)v : "?");
        sqlite3_reset(q);
    }
    return done(l, q, SQLITE_DONE);
}

// A process's steps in start order, for its records in start order (the steps of several
// processes overlap in time: a record belongs to its own process's step).
typedef struct step_clock {
    int32_t pid;
    report_step **by_start;
    size_t n, at;
} step_clock;

static int cmp_step_start(const void *pa, const void *pb) {
    const report_step *a = *(report_step *const *)pa, *b = *(report_step *const *)pb;
    return a->start_ns < b->start_ns ? -1 : a->start_ns > b->start_ns;
}

static void clock_init(step_clock *c, report_model *m, int32_t pid) {
    const report_process *p = report_process_find(m, pid); // (its steps: one run of m->steps)
    const size_t from = p ? p->step0 : 0, to = p ? p->step0 + p->n_steps : 0;
    c->pid = pid;
    c->by_start = amp_xmalloc((to - from + 1) * sizeof *c->by_start);
    c->n = c->at = 0;
    for (size_t i = from; i < to; i++)
        if (m->steps[i].start_ns >= 0 && m->steps[i].end_ns >= m->steps[i].start_ns)
            c->by_start[c->n++] = &m->steps[i];
    amp_sort(c->by_start, c->n, sizeof *c->by_start, cmp_step_start);
}

// The step whose window holds t (t non-decreasing between calls); NULL: none.
static report_step *clock_step(step_clock *c, int64_t t) {
    while (c->at < c->n && c->by_start[c->at]->end_ns < t)
        c->at++;
    return c->at < c->n && c->by_start[c->at]->start_ns <= t ? c->by_start[c->at] : NULL;
}

// One clock per process (records of several processes, in start order).
#define CLOCKS_MAX 64 // (the records of processes past this many are left out of their steps)
typedef struct step_clocks {
    step_clock c[CLOCKS_MAX];
    int32_t n;
} step_clocks;

// Process pid's step at t (t non-decreasing between calls for one pid); NULL: none.
static report_step *clocks_step(step_clocks *s, report_model *m, int32_t pid, int64_t t) {
    int32_t i = 0;
    while (i < s->n && s->c[i].pid != pid)
        i++;
    if (i == s->n) {
        if (s->n == CLOCKS_MAX) return NULL;
        clock_init(&s->c[s->n++], m, pid);
    }
    return clock_step(&s->c[i], t);
}

static void clocks_free(step_clocks *s) {
    for (int32_t i = 0; i < s->n; i++)
        free(s->c[i].by_start);
}

// When process pid's step 0 ended; -1: step 0 is not in the model.
static int64_t step0_end(const report_model *m, int32_t pid) {
    const report_step *s = report_step_find(m, pid, 0);
    return s && s->end_ns >= 0 ? s->end_ns : -1;
}

// When process pid's last step in the model ended (its last with an end); INT64_MAX: none.
static int64_t loop_end(const report_model *m, int32_t pid) {
    const report_process *p = report_process_find(m, pid);
    for (size_t i = p ? p->n_steps : 0; i > 0; i--)
        if (m->steps[p->step0 + i - 1].end_ns >= 0) return m->steps[p->step0 + i - 1].end_ns;
    return INT64_MAX;
}

// A timestamp the timeline can subtract from another without overflow (inside +-2^62 ns).
static bool sane_ns(int64_t t) {
    return t > -(INT64_C(1) << 62) && t < INT64_C(1) << 62;
}

// Between two steps, what a script did that is not a step is not the loop's: an evaluation (the
// PyTorch bridge starts the step after one where the evaluation ended), a broken step's re-run. A
// stretch of at least BETWEEN_MIN_NS, and at least the process's median step, that no step's
// window holds; a shorter one is the bookkeeping of the step's end.
#define BETWEEN_MIN_NS 1000000

static int cmp_between(const void *pa, const void *pb) {
    const between *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->from < b->from ? -1 : a->from > b->from;
}

static void between_steps(loader *l) {
    report_model *m = l->m;
    size_t cap = 0;
    for (size_t k = 0; k < m->n_procs; k++) {
        const report_process *pr = &m->procs[k];
        if (pr->n_steps < 2) continue;
        double least = report_steps_median_ns(m->steps + pr->step0, pr->n_steps);
        if (!(least >= BETWEEN_MIN_NS)) least = BETWEEN_MIN_NS;
        step_clock c;
        clock_init(&c, m, pr->pid); // (its timed steps in start order)
        int64_t reach = INT64_MIN;  // the latest end of the steps so far (windows may overlap)
        for (size_t i = 0; i < c.n; i++) {
            const report_step *st = c.by_start[i];
            if (i && (double)(st->start_ns - reach) >= least) { // (both >= 0: no overflow)
                AMP_GROW(l->betweens, l->n_betweens, cap);
                l->betweens[l->n_betweens++] =
                    (between){.pid = pr->pid, .from = reach, .to = st->start_ns};
                amp_add_sat(&m->perf.between_ns, st->start_ns - reach);
                m->perf.betweens++;
            }
            if (st->end_ns > reach) reach = st->end_ns;
        }
        free(c.by_start);
    }
    amp_sort(l->betweens, l->n_betweens, sizeof *l->betweens, cmp_between);
}

// The first of process pid's stretches that ends after t (l->n_betweens: none).
static size_t between_from(const loader *l, int32_t pid, int64_t t) {
    size_t lo = 0, hi = l->n_betweens;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const between *b = &l->betweens[mid];
        if (b->pid < pid || (b->pid == pid && b->to <= t))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->n_betweens && l->betweens[lo].pid == pid ? lo : l->n_betweens;
}

// Whether a stretch of process pid holds t.
static bool between_at(const loader *l, int32_t pid, int64_t t) {
    const size_t i = between_from(l, pid, t);
    return i < l->n_betweens && l->betweens[i].from < t;
}

// How much of [from, to] lies in process pid's stretches between steps.
static int64_t between_overlap(const loader *l, int32_t pid, int64_t from, int64_t to) {
    int64_t n = 0;
    for (size_t i = between_from(l, pid, from);
         i < l->n_betweens && l->betweens[i].pid == pid && l->betweens[i].from < to; i++) {
        const between *b = &l->betweens[i];
        const int64_t a = from > b->from ? from : b->from, e = to < b->to ? to : b->to;
        if (e > a) n += e - a;
    }
    return n;
}

// The longest a kernel, a copy or an op may take, and the most bytes a copy may move, before its
// record counts as damaged: 2^46 ns (19.5 hours: a collective stuck until its watchdog fires is
// kept) and 2^50 bytes; the loaders' sums of them saturate.
#define MAX_RECORD_NS (INT64_C(1) << 46)
#define MAX_RECORD_BYTES (INT64_C(1) << 50)
// A synchronisation that blocks the host: an event, stream or context synchronize; not a stream
// waiting on an event (syncType 2, cudaStreamWaitEvent: the GPU waits, the host goes on; FSDP and
// DDP make several a module)
#define HOST_SYNC "syncType != 2"

// A span from s to e a record can have: within the timeline's range, not backwards, not longer
// than any real one (one time left unset, 0, makes a span of decades).
static bool sane_span(int64_t s, int64_t e) {
    return sane_ns(s) && sane_ns(e) && e >= s && e - s <= MAX_RECORD_NS;
}

// Copies per step, and host-to-device ones of the loop: after the warm-up (step 0: the model's
// weights going up once are not the loop's copies), before the last step's end (a final
// evaluation's data is not either) and outside the stretches between steps (a mid-run one's).
static bool load_copies(loader *l) {
    report_perf *p = &l->m->perf;
    sqlite3_stmt *q;
    if (!prep(l,
              "SELECT start, end - start, bytes, copyKind, IFNULL(srcKind, 7), globalPid >> 24 "
              "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE start BETWEEN ?1 AND ?2 AND end >= start "
              "ORDER BY start", // (one that ends before it starts: an incomplete record)
              &q))
        return false;
    step_clocks c = {.n = 0};
    int32_t last_pid = INT32_MIN; // (the copies of one process come in runs: its loop's end once)
    int64_t last_end = INT64_MAX;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t start = i64(q, 0), dur = i64(q, 1), bytes = i64(q, 2);
        int32_t pid = (int32_t)i64(q, 5);
        if (sqlite3_column_type(q, 1) != SQLITE_INTEGER || !sane_ns(start) ||
            !sane_span(start, start + dur) || bytes < 0 || bytes > MAX_RECORD_BYTES)
            continue; // (damaged: a text time, an unset start, a length past any copy's)
        report_step *st = clocks_step(&c, l->m, pid, start);
        if (st) amp_add_sat(&st->copy_ns, dur);
        if (i64(q, 3) != 1) continue; // CUDA_MEMCPY_KIND_HTOD
        if (start < step0_end(l->m, pid)) {
            p->warmup_copies++;
            continue;
        }
        if (pid != last_pid) last_pid = pid, last_end = loop_end(l->m, pid);
        if (start > last_end) {
            p->tail_copies++;
            continue;
        }
        if (between_at(l, pid, start)) {
            p->between_copies++;
            continue;
        }
        p->htod_copies++;
        amp_add_sat(&p->htod_bytes, bytes);
        amp_add_sat(&p->htod_ns, dur);
        if (i64(q, 4) == 0) { // CUDA_MEMOPR_MEMORY_KIND_PAGEABLE
            p->pageable_copies++;
            amp_add_sat(&p->pageable_bytes, bytes);
        }
    }
    clocks_free(&c);
    if (!done(l, q, rc)) return false;

    // host synchronisations: all of the window's, those that began inside a step of their
    // process (a script's evaluation or setup syncs too, outside the training steps) and apart
    // those that began in its warm-up step; their ends in order, for the gaps they ended
    if (!prep(l,
              "SELECT start, end, globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION "
              "WHERE start BETWEEN ?1 AND ?2 AND end >= start AND " HOST_SYNC " ORDER BY start",
              &q))
        return false;
    step_clocks sc = {.n = 0};
    size_t cap = 0;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const int64_t start = i64(q, 0), end = i64(q, 1);
        if (sqlite3_column_type(q, 1) != SQLITE_INTEGER || !sane_span(start, end)) continue;
        p->syncs++;
        amp_add_sat(&p->sync_ns, end - start);
        const report_step *st = clocks_step(&sc, l->m, (int32_t)i64(q, 2), start);
        if (st && report_step_is_warmup(l->m, st)) {
            p->warmup_syncs++;
            amp_add_sat(&p->warmup_sync_ns, end - start);
        } else if (st) {
            p->step_syncs++;
            amp_add_sat(&p->step_sync_ns, end - start);
        }
        AMP_GROW(l->sync_ends, l->n_sync_ends, cap);
        l->sync_ends[l->n_sync_ends++] = end;
    }
    clocks_free(&sc);
    amp_sort(l->sync_ends, l->n_sync_ends, sizeof *l->sync_ends, report_cmp_i64);
    return done(l, q, rc);
}

// Whether a host synchronisation ended in [from, to] (ends: in order).
static bool sync_ended_in(const int64_t *ends, size_t n, int64_t from, int64_t to) {
    size_t lo = 0, hi = n; // the first end >= from
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ends[mid] < from)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && ends[lo] <= to;
}

// Whether a host synchronisation ended in [from, to] outside process pid's stretches between
// steps (an evaluation's .item() is not the loop's).
static bool sync_ended_outside(const loader *l, int32_t pid, int64_t from, int64_t to) {
    int64_t a = from;
    for (size_t i = between_from(l, pid, from);
         i < l->n_betweens && l->betweens[i].pid == pid && l->betweens[i].from < to; i++) {
        if (sync_ended_in(l->sync_ends, l->n_sync_ends, a, l->betweens[i].from)) return true;
        a = l->betweens[i].to;
    }
    return sync_ended_in(l->sync_ends, l->n_sync_ends, a, to);
}

// ---------------------------------------------------------------------------------------------
// Kernels to ops

typedef struct op_row {
    int32_t pid;
    int32_t group; // index into m->ops
    int64_t start, end;
    double flops, bytes;
    int64_t kernel_ns; // of the kernels launched in its interval
    int64_t gemm_ns;   // of those that are GEMMs by name (report_kernel_is_gemm)
} op_row;

typedef struct launch {
    int32_t pid;        // process (globalPid >> 24)
    int32_t dev;        // deviceId
    int32_t kernel;     // index into perf.kernels
    int64_t start, end; // the kernel
    int64_t corr;       // correlationId; -1: none
    int64_t at;         // host time of the launch call; -1: not found
    int64_t row;        // op_row; -1: none
} launch;

static int cmp_row(const void *pa, const void *pb) {
    const op_row *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->start < b->start ? -1 : a->start > b->start;
}

static int cmp_launch(const void *pa, const void *pb) {
    const launch *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->at < b->at ? -1 : a->at > b->at;
}

static int cmp_start(const void *pa, const void *pb) {
    const launch *a = pa, *b = pb;
    return a->start < b->start ? -1 : a->start > b->start;
}

static int cmp_corr(const void *pa, const void *pb) {
    const launch *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return a->corr < b->corr ? -1 : a->corr > b->corr;
}

// ---------------------------------------------------------------------------------------------
// Kernels: one table scan (sorting in C beats an index walk over a million rows)

static bool load_kernels(loader *l, kernel_ids *names, launch **v, size_t *n) {
    report_perf *p = &l->m->perf;
    sqlite3_stmt *q;
    // a focus reads its window through the start index; the whole run is one table scan
    // (+start keeps the planner off an index walk over every row)
    bool whole = l->lo_ns == INT64_MIN && l->hi_ns == INT64_MAX;
    if (!prep(l,
              whole ? "SELECT start, end, shortName, IFNULL(correlationId, -1), "
                      "IFNULL(globalPid, 0) >> 24, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                      "WHERE +start BETWEEN ?1 AND ?2"
                    : "SELECT start, end, shortName, IFNULL(correlationId, -1), "
                      "IFNULL(globalPid, 0) >> 24, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                      "WHERE start BETWEEN ?1 AND ?2",
              &q))
        return false;
    size_t cap = 0, names_cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t s = sqlite3_column_int64(q, 0), e = sqlite3_column_int64(q, 1);
        // an incomplete record (start = end = 0 is kept as empty), or a damaged one: a time
        // past +-2^62 ns (146 years from the epoch) would overflow the durations and gaps, and
        // one time unset would make a kernel of 56 years
        if (!sane_span(s, e)) continue;
        int32_t ki = kernel_of(p, names, sqlite3_column_int64(q, 2), &names_cap);
        report_kernel *k = &p->kernels[ki];
        k->launches++;
        amp_add_sat(&k->total_ns, e - s);
        k->short_launches += e - s < REPORT_LAUNCH_BOUND_NS;
        p->launches++;
        amp_add_sat(&p->kernel_ns, e - s);
        p->short_launches += e - s < REPORT_LAUNCH_BOUND_NS;
        AMP_GROW(*v, *n, cap);
        (*v)[(*n)++] = (launch){.pid = sqlite3_column_int(q, 4),
                                .dev = sqlite3_column_int(q, 5),
                                .kernel = ki,
                                .start = s,
                                .end = e,
                                .corr = sqlite3_column_int64(q, 3),
                                .at = -1,
                                .row = -1};
    }
    return done(l, q, rc);
}

// Where a GPU's (or a process's) timeline after the warm-up stands: its first kernel's start,
// its last end so far.
#define DEVICES_MAX 64 // (more deviceIds or processes than this share the last one's line)
typedef struct extent {
    int32_t key; // deviceId, or pid
    int64_t first, end;
    // (a process's) when its last step ended, once known
    bool known;
    int64_t loop_end;
    int64_t left_out; // (a GPU's) idle time in stretches between steps, not the loop's
} extent;

static extent *extent_of(extent *d, int32_t *n, int32_t key) {
    for (int32_t i = 0; i < *n; i++)
        if (d[i].key == key) return &d[i];
    if (*n == DEVICES_MAX) return &d[DEVICES_MAX - 1];
    d[*n] = (extent){.key = key, .first = INT64_MIN, .end = INT64_MIN};
    return &d[(*n)++];
}

// Where a process's kernels on one GPU stand, for its steps' busy time: their last end so far,
// the step they last added to.
typedef struct busy_line {
    int32_t pid, dev;
    int64_t end;
    report_step *step;
} busy_line;

static busy_line *busy_of(busy_line *b, int32_t *n, int32_t pid, int32_t dev) {
    for (int32_t i = 0; i < *n; i++)
        if (b[i].pid == pid && b[i].dev == dev) return &b[i];
    if (*n == DEVICES_MAX) return &b[DEVICES_MAX - 1];
    b[*n] = (busy_line){.pid = pid, .dev = dev, .end = INT64_MIN};
    return &b[(*n)++];
}

// The timeline in start order: per-step busy time (on each GPU of the step's process), and for
// the loop (report_perf: after the warm-up, up to what the last step launched, less the stretches
// between steps) each GPU's busy time
// (union of its kernel intervals) and idle gaps, those a host synchronisation ended in apart
// (the GPU ran out of work while the host waited for it, and idled on until the host launched
// again: with no wait the host would have queued that work ahead).
static void timeline(const loader *l, launch *v, size_t n) {
    report_model *m = l->m;
    report_perf *p = &m->perf;
    amp_sort(v, n, sizeof *v, cmp_start);
    step_clocks c = {.n = 0};
    busy_line busy[DEVICES_MAX]; // warm-up included: per-step busy time
    extent lines[DEVICES_MAX], procs[DEVICES_MAX];
    int32_t n_busy = 0, n_lines = 0, n_procs = 0;
    int64_t warm_from = INT64_MAX, warm_to = INT64_MIN, tail_from = INT64_MAX, tail_to = INT64_MIN;
    int32_t pid = INT32_MIN;
    int64_t warm_end = -1; // pid's step 0 end
    for (size_t i = 0; i < n; i++) {
        int64_t s = v[i].start, e = v[i].end;
        busy_line *b = busy_of(busy, &n_busy, v[i].pid, v[i].dev);
        const int64_t busy_from = s > b->end ? s : b->end;
        if (e > busy_from) {
            report_step *st = clocks_step(&c, m, v[i].pid, s);
            if (st) {
                st->gpu_busy_ns += e - busy_from;
                if (b->step != st) b->step = st, st->gpu_devices++;
            }
            b->end = e;
        }
        if (v[i].pid != pid) pid = v[i].pid, warm_end = step0_end(m, pid);
        // the warm-up: launched before step 0 ended (by the kernel's start where the launch call
        // is not recorded)
        if ((v[i].at >= 0 ? v[i].at : s) < warm_end) {
            p->warmup_kernels++;
            if (s < warm_from) warm_from = s;
            if (warm_end > warm_to) warm_to = warm_end;
            continue;
        }
        extent *x = extent_of(procs, &n_procs, v[i].pid);
        if (!x->known) x->known = true, x->loop_end = loop_end(m, v[i].pid);
        // after the loop (a final evaluation, a save) or between two steps in a stretch no step
        // holds (an evaluation, a re-run): a kernel launched there (what the host queued in a
        // step runs on after it); where the launch call is not recorded, one that starts there
        // after an idle gap (after the loop, all the later ones do: x->end stays)
        const int64_t t = v[i].at >= 0 ? v[i].at : s;
        const bool apart = v[i].at >= 0 || x->end == INT64_MIN || s - x->end >= REPORT_GAP_NS;
        if (t > x->loop_end && apart) {
            p->tail_kernels++;
            if (s < tail_from) tail_from = s;
            if (e > tail_to) tail_to = e;
            continue;
        }
        if (apart && between_at(l, v[i].pid, t)) {
            p->between_kernels++;
            continue;
        }
        if (x->end == INT64_MIN) x->first = s;
        if (e > x->end) x->end = e;
        extent *d = extent_of(lines, &n_lines, v[i].dev);
        if (d->end == INT64_MIN) d->end = d->first = s;
        if (s > d->end) {
            // the idle time in stretches between steps is not the loop's
            const int64_t left = between_overlap(l, v[i].pid, d->end, s);
            d->left_out += left;
            int64_t gap = s - d->end - left;
            if (gap >= REPORT_GAP_NS) {
                p->gaps++;
                p->gap_ns += gap;
                if (sync_ended_outside(l, v[i].pid, d->end, s)) p->sync_gap_ns += gap;
                if (gap > p->largest_gap_ns) {
                    p->largest_gap_ns = gap;
                    p->largest_gap_start_ns = d->end;
                }
            }
        }
        int64_t from = s > d->end ? s : d->end;
        if (e > from) {
            p->busy_ns += e - from;
            d->end = e;
        }
    }
    for (int32_t i = 0; i < n_lines; i++)
        p->span_ns += lines[i].end - lines[i].first - lines[i].left_out;
    for (int32_t i = 0; i < n_procs; i++)
        p->process_span_ns += procs[i].end - procs[i].first;
    p->devices = n_lines;
    // (step 0's end is the run's own number, any int64_t: saturated rather than overflowed)
    if (p->warmup_kernels)
        p->warmup_ns =
            (uint64_t)warm_to - (uint64_t)warm_from > INT64_MAX ? INT64_MAX : warm_to - warm_from;
    if (p->tail_kernels) p->tail_ns = tail_to - tail_from; // (sane kernels: within +-2^62 ns)
    clocks_free(&c);
}

// ---------------------------------------------------------------------------------------------
// Hardware counters: PM samples (GPU_METRICS) shared among the kernels they overlap

typedef struct pm_sample {
    int64_t start, end;
    int32_t dev;
    double bytes;  // DRAM read + write
    double tensor; // tensor pipe busy, share of its peak (0..1)
} pm_sample;

static bool table_exists(loader *l, const char *name) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(l->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                           -1, &q, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    bool yes = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return yes;
}

// Each kernel's share of the samples it overlaps, by overlap time (v sorted by start). A run
// recorded without --counters, or by an ampprobe older than GPU_METRICS, has no samples.
static bool load_counters(loader *l, launch *v, size_t n) {
    if (!table_exists(l, "GPU_METRICS")) return true;
    sqlite3_stmt *q;
    if (!prep(l,
              "SELECT g.timestamp, g.end, g.typeId, "
              "  sum(CASE WHEN n.metricName IN ('dram__bytes_read.sum', 'dram__bytes_write.sum') "
              "      THEN g.value END), "
              "  sum(CASE WHEN n.metricName = 'sm__pipe_tensor_cycles_active_realtime.avg."
              "pct_of_peak_sustained_elapsed' THEN g.value END) "
              "FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n USING (typeId, metricId) "
              "WHERE g.timestamp BETWEEN ?1 AND ?2 GROUP BY g.typeId, g.timestamp "
              "ORDER BY g.timestamp",
              &q))
        return false;
    pm_sample *s = NULL;
    size_t ns = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t a = sqlite3_column_int64(q, 0), b = sqlite3_column_int64(q, 1);
        if (b <= a || !sane_ns(a) || !sane_ns(b)) continue; // (as the kernels' times)
        AMP_GROW(s, ns, cap);
        s[ns++] = (pm_sample){a, b, sqlite3_column_int(q, 2), sqlite3_column_double(q, 3),
                              sqlite3_column_double(q, 4) / 100.0};
    }
    bool ok = done(l, q, rc);
    report_perf *p = &l->m->perf;
    p->counter_samples = (int64_t)ns;
    size_t j = 0; // the first sample that ends after the current kernel starts
    for (size_t i = 0; ok && i < n; i++) {
        const launch *k = &v[i];
        while (j < ns && s[j].end <= k->start)
            j++;
        report_kernel *x = &p->kernels[k->kernel];
        for (size_t t = j; t < ns && s[t].start < k->end; t++) {
            if (s[t].dev != k->dev) continue;
            int64_t from = k->start > s[t].start ? k->start : s[t].start;
            int64_t to = k->end < s[t].end ? k->end : s[t].end;
            if (to <= from) continue;
            double overlap = (double)(to - from);
            x->dram_bytes += s[t].bytes * overlap / (double)(s[t].end - s[t].start);
            x->tensor_ns += s[t].tensor * overlap;
            x->covered_ns += overlap;
        }
    }
    free(s);
    return ok;
}

// The host time of each kernel's launch call: CUPTI_ACTIVITY_KIND_RUNTIME by process and
// correlationId, merged with the kernels sorted the same way.
static bool launch_times(loader *l, launch *v, size_t n) {
    sqlite3_stmt *q;
    if (!prep(l,
              "SELECT IFNULL(globalTid, 0) >> 24, correlationId, start "
              "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IS NOT NULL",
              &q))
        return false;
    launch *rt = NULL;
    size_t n_rt = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        AMP_GROW(rt, n_rt, cap);
        rt[n_rt++] = (launch){.pid = sqlite3_column_int(q, 0),
                              .corr = sqlite3_column_int64(q, 1),
                              .at = sqlite3_column_int64(q, 2)};
    }
    bool ok = done(l, q, rc);
    if (ok && n_rt) {
        amp_sort(rt, n_rt, sizeof *rt, cmp_corr);
        amp_sort(v, n, sizeof *v, cmp_corr);
        for (size_t i = 0, j = 0; i < n; i++) {
            while (j < n_rt && cmp_corr(&rt[j], &v[i]) < 0)
                j++;
            if (j < n_rt && cmp_corr(&rt[j], &v[i]) == 0 && v[i].corr >= 0) v[i].at = rt[j].at;
        }
    }
    free(rt);
    return ok;
}

// Column i's text ("" for NULL), without style marks (report_clean, into scratch[i]).
static const char *text(sqlite3_stmt *q, int i, char **scratch) {
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? report_clean((const char *)t, &scratch[i]) : "";
}

static int cmp_op(const void *pa, const void *pb) {
    const report_op *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->layer_id != b->layer_id) return a->layer_id < b->layer_id ? -1 : 1;
    int c;
    if ((c = strcmp(a->op, b->op)) || (c = strcmp(a->phase, b->phase)) ||
        (c = strcmp(a->in_dtypes, b->in_dtypes)) || (c = strcmp(a->out_dtype, b->out_dtype)))
        return c;
    return strcmp(a->policy, b->policy);
}

static uint64_t op_hash(const report_op *o) {
    uint64_t h = report_mix(((uint64_t)(uint32_t)o->pid << 32) | (uint32_t)o->layer_id);
    const char *parts[] = {o->op, o->phase, o->in_dtypes, o->out_dtype, o->policy};
    for (size_t i = 0; i < 5; i++)
        h = report_hash_str(h, parts[i]);
    return h;
}

static bool same_op(const void *ops, size_t i, const void *key) {
    return cmp_op(&((const report_op *)ops)[i], key) == 0;
}

static uint64_t op_rehash(const void *ops, size_t i) {
    return op_hash(&((const report_op *)ops)[i]);
}

// The group of key (an index into m->ops), made when new: t finds them while AMP_OPS streams past.
static int32_t op_group(report_model *m, report_index *t, const report_op *key, size_t *cap) {
    size_t *slot = report_index_slot(t, m->n_ops, op_hash(key), m->ops, key, same_op, op_rehash);
    if (*slot) return (int32_t)(*slot - 1);
    AMP_GROW(m->ops, m->n_ops, *cap);
    report_op *o = &m->ops[m->n_ops];
    *o = (report_op){.pid = key->pid,
                     .layer_id = key->layer_id,
                     .op = amp_xstrdup(key->op),
                     .phase = amp_xstrdup(key->phase),
                     .in_dtypes = amp_xstrdup(key->in_dtypes),
                     .out_dtype = amp_xstrdup(key->out_dtype),
                     .policy = amp_xstrdup(key->policy),
                     .first_step = INT64_MAX,
                     .last_step = INT64_MIN};
    *slot = ++m->n_ops;
    return (int32_t)(m->n_ops - 1);
}

// A GEMM group's forward f16/bf16 calls whose K or N is no multiple of 8 (the odd-shape finding):
// their FLOPs, and the first one's K and N. The row's shapes (column `shapes` of q) are read only
// for a call that could count.
static void note_odd_gemm(report_op *g, double flops, sqlite3_stmt *q, int shapes) {
    int64_t k, n;
    if (flops >= REPORT_ODD_GEMM_FLOPS && strstr(g->in_dtypes, "f16") &&
        (!g->phase[0] || strcmp(g->phase, "fwd") == 0) &&
        report_gemm_kn(g->op, (const char *)sqlite3_column_text(q, shapes), &k, &n) &&
        (k % 8 || n % 8)) { // (f16 and bf16: 8 elements are 16 bytes)
        if (g->odd_flops == 0) g->odd_k = k, g->odd_n = n;
        g->odd_flops += flops;
    }
}

// Ops of a step their process began but never recorded (killed mid-step) are no step of the
// findings: the groups' ranges end at the process's last recorded step.
static void end_at_recorded_steps(report_model *m) {
    for (size_t g = 0; g < m->n_ops; g++) {
        report_op *o = &m->ops[g];
        const report_process *p = report_process_find(m, o->pid);
        const int64_t last = p && p->n_steps ? m->steps[p->step0 + p->n_steps - 1].step : -1;
        if (last >= 0 && o->last_step > last && o->first_step <= last) o->last_step = last;
    }
}

// The groups in key order; the rows (n_rows of them) follow their group through the permutation.
static void sort_groups(report_model *m, op_row *rows, size_t n_rows) {
    if (m->n_ops == 0) return;
    int32_t *old_at = amp_xmalloc(m->n_ops * sizeof *old_at),
            *new_of = amp_xmalloc(m->n_ops * sizeof *new_of);
    for (size_t g = 0; g < m->n_ops; g++)
        m->ops[g].kernels = (int64_t)g; // the old index, for a moment
    amp_sort(m->ops, m->n_ops, sizeof *m->ops, cmp_op);
    for (size_t g = 0; g < m->n_ops; g++) {
        old_at[g] = (int32_t)m->ops[g].kernels;
        new_of[old_at[g]] = (int32_t)g;
        m->ops[g].kernels = 0;
    }
    for (size_t i = 0; i < n_rows; i++)
        rows[i].group = new_of[rows[i].group];
    free(old_at);
    free(new_of);
}

// AMP_OPS in one pass: the groups (m->ops), the per-step op time columns, and (rows != NULL)
// each row's host interval for the kernel attribution.
static bool load_ops(loader *l, op_row **rows, size_t *n_rows) {
    report_model *m = l->m;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(l->db,
                           "SELECT pid, step, IFNULL(layer_id, -1), op, IFNULL(phase, ''), "
                           "IFNULL(in_dtypes, ''), IFNULL(out_dtype, ''), IFNULL(policy, ''), "
                           "IFNULL(flops, 0), IFNULL(bytes, 0), start_ns, end_ns, shapes "
                           "FROM AMP_OPS WHERE step BETWEEN ?1 AND ?2 AND " REPORT_PID_OK,
                           -1, &q, NULL) != SQLITE_OK) {
        snprintf(l->err, REPORT_ERR_MAX, "%s: cannot read the run (%s)", m->path,
                 sqlite3_errmsg(l->db));
        return false;
    }
    sqlite3_bind_int64(q, 1, m->step_lo);
    sqlite3_bind_int64(q, 2, m->step_hi);
    report_index t = {0};
    bool *gemm = NULL, *cast = NULL; // per group
    size_t cap = 0, row_cap = 0, flag_cap = 0;
    report_step *st = NULL;
    char *scratch[8] = {0}; // the key's strings that held style marks, by column (text())
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        report_op key = {.pid = sqlite3_column_int(q, 0),
                         .layer_id = sqlite3_column_int(q, 2),
                         .op = text(q, 3, scratch),
                         .phase = text(q, 4, scratch),
                         .in_dtypes = text(q, 5, scratch),
                         .out_dtype = text(q, 6, scratch),
                         .policy = text(q, 7, scratch)};
        int64_t step = sqlite3_column_int64(q, 1);
        int32_t gi = op_group(m, &t, &key, &cap);
        if ((size_t)gi >= flag_cap) {
            flag_cap = cap;
            gemm = amp_xrealloc(gemm, flag_cap * sizeof *gemm);
            cast = amp_xrealloc(cast, flag_cap * sizeof *cast);
        }
        report_op *g = &m->ops[gi];
        if (g->launches == 0) {
            gemm[gi] = report_op_is_gemm(g->op);
            cast[gi] = report_op_is_cast(g->op);
        }
        int64_t start = i64(q, 10), end = i64(q, 11);
        bool timed = sqlite3_column_type(q, 10) == SQLITE_INTEGER &&
                     sqlite3_column_type(q, 11) == SQLITE_INTEGER && sane_span(start, end);
        int64_t ns = timed ? end - start : 0;
        double flops = sqlite3_column_double(q, 8), bytes = sqlite3_column_double(q, 9);
        g->launches++;
        g->flops += flops;
        g->bytes += bytes;
        if (gemm[gi]) note_odd_gemm(g, flops, q, 12);
        amp_add_sat(&g->host_ns, ns);
        if (step < g->first_step) g->first_step = step;
        if (step > g->last_step) g->last_step = step;
        if (!st || st->pid != key.pid || st->step != step)
            st = (report_step *)report_step_find(m, key.pid, step);
        if (st) {
            amp_add_sat(&st->op_ns, ns);
            if (gemm[gi]) amp_add_sat(&st->gemm_ns, ns);
            if (cast[gi]) amp_add_sat(&st->cast_ns, ns);
        }
        if (!rows || !timed) continue;
        AMP_GROW(*rows, *n_rows, row_cap);
        (*rows)[(*n_rows)++] = (op_row){.pid = key.pid,
                                        .start = start,
                                        .end = end,
                                        .group = gi,
                                        .flops = flops,
                                        .bytes = bytes};
    }
    for (int i = 0; i < 8; i++)
        free(scratch[i]);
    free(t.slots);
    free(gemm);
    free(cast);
    if (!done(l, q, rc)) return false;
    end_at_recorded_steps(m);
    sort_groups(m, rows ? *rows : NULL, rows ? *n_rows : 0);
    return true;
}

// Kernel time per (kernel, op group), then per (kernel, layer): each kernel's layer is the one
// its attributed launches spent the most time in (a GEMM kernel many layers share counts them).
typedef struct kernel_group {
    int32_t kernel, group, pid, layer;
    int64_t ns;
} kernel_group;

static int cmp_kernel_layer(const void *pa, const void *pb) {
    const kernel_group *a = pa, *b = pb;
    if (a->kernel != b->kernel) return a->kernel < b->kernel ? -1 : 1;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    return (a->layer > b->layer) - (a->layer < b->layer);
}

static bool same_kernel_group(const void *arr, size_t i, const void *key) {
    const kernel_group *e = &((const kernel_group *)arr)[i], *k = key;
    return e->kernel == k->kernel && e->group == k->group;
}

static uint64_t kernel_group_hash(const void *arr, size_t i) {
    const kernel_group *e = &((const kernel_group *)arr)[i];
    return report_mix((uint64_t)e->kernel << 32 | (uint32_t)e->group);
}

static void kernel_layers(report_model *m, const launch *v, size_t n, const op_row *rows) {
    report_perf *p = &m->perf;
    kernel_group *e = NULL; // per (kernel, op group): its time
    size_t n_e = 0, cap = 0;
    report_index t = {0};
    for (size_t i = 0; i < n; i++) {
        if (v[i].row < 0) continue;
        kernel_group key = {.kernel = v[i].kernel, .group = rows[v[i].row].group};
        size_t *slot = report_index_slot(&t, n_e, kernel_group_hash(&key, 0), e, &key,
                                         same_kernel_group, kernel_group_hash);
        if (!*slot) {
            const report_op *op = &m->ops[key.group];
            AMP_GROW(e, n_e, cap);
            e[n_e] = (kernel_group){key.kernel, key.group, op->pid, op->layer_id, 0};
            *slot = ++n_e;
        }
        e[*slot - 1].ns += v[i].end - v[i].start;
    }
    free(t.slots);
    const size_t k = n_e; // summed per (kernel, layer)
    amp_sort(e, k, sizeof *e, cmp_kernel_layer);
    for (size_t i = 0; i < k;) {
        size_t j = i;
        int64_t ns = 0;
        for (; j < k && cmp_kernel_layer(&e[i], &e[j]) == 0; j++)
            ns += e[j].ns;
        report_kernel *kr = &p->kernels[e[i].kernel];
        if (e[i].layer >= 0) {
            if (!kr->n_layers++ || ns > kr->layer_ns) {
                kr->layer_pid = e[i].pid;
                kr->layer_id = e[i].layer;
                kr->layer_ns = ns;
            }
        }
        i = j;
    }
    free(e);
}

// Ties each kernel to the op row whose host interval holds its launch call (launch_times), and
// shares the op's FLOPs and bytes among its kernels by their time; a GEMM-class op's FLOPs go to
// its GEMM kernels alone, when it has any (PyTorch's linear under autocast launches the casts of
// its operands in the same call: they move bytes, the GEMM does the math).
static void attribute(loader *l, launch *v, size_t n, op_row *rows, size_t n_rows) {
    report_perf *p = &l->m->perf;
    if (n_rows && n) {
        bool *gemm = amp_xmalloc(p->n_kernels * sizeof *gemm); // by name, once a kernel
        for (size_t k = 0; k < p->n_kernels; k++)
            gemm[k] = report_kernel_is_gemm(p->kernels[k].name);
        amp_sort(rows, n_rows, sizeof *rows, cmp_row);
        amp_sort(v, n, sizeof *v, cmp_launch);
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            launch *x = &v[i];
            if (x->at < 0) continue;
            while (j < n_rows &&
                   (rows[j].pid < x->pid || (rows[j].pid == x->pid && rows[j].end < x->at)))
                j++;
            if (j == n_rows || rows[j].pid != x->pid || rows[j].start > x->at) continue;
            x->row = (int64_t)j;
            rows[j].kernel_ns += x->end - x->start;
            if (gemm[x->kernel]) rows[j].gemm_ns += x->end - x->start;
        }
        for (size_t i = 0; i < n; i++) {
            const launch *x = &v[i];
            if (x->row < 0) continue;
            op_row *r = &rows[x->row];
            report_op *g = &l->m->ops[r->group];
            int64_t dur = x->end - x->start;
            g->kernels++;
            g->kernel_ns += dur;
            p->attributed_ns += dur;
            if (r->kernel_ns <= 0) continue;
            const double share = (double)dur / (double)r->kernel_ns;
            double flops_share = share;
            if (r->gemm_ns > 0 && report_op_is_gemm(g->op))
                flops_share = gemm[x->kernel] ? (double)dur / (double)r->gemm_ns : 0;
            p->kernels[x->kernel].flops += r->flops * flops_share;
            p->kernels[x->kernel].bytes += r->bytes * share;
            p->kernels[x->kernel].attributed_ns += dur;
        }
        for (size_t k = 0; k < p->n_kernels; k++) { // the launches of steps without op rows too
            report_kernel *kr = &p->kernels[k];
            if (kr->attributed_ns <= 0 || kr->attributed_ns >= kr->total_ns) continue;
            const double all = (double)kr->total_ns / (double)kr->attributed_ns;
            kr->flops *= all;
            kr->bytes *= all;
        }
        kernel_layers(l->m, v, n, rows);
        free(gemm);
    }
}

static int cmp_kernel_time(const void *pa, const void *pb) {
    const report_kernel *a = pa, *b = pb;
    return a->total_ns > b->total_ns ? -1 : a->total_ns < b->total_ns;
}

bool report_perf_load(sqlite3 *db, report_model *m, char err[REPORT_ERR_MAX]) {
    loader l = {.db = db, .m = m, .err = err};
    window(&l);
    between_steps(&l);
    kernel_ids names = {0};
    launch *v = NULL;
    op_row *rows = NULL;
    size_t n = 0, n_rows = 0;
    bool ok = load_gpu(&l) && load_kernels(&l, &names, &v, &n) && load_copies(&l) &&
              load_ops(&l, n ? &rows : NULL, &n_rows);
    if (ok && n) {
        // the launch calls' times: the ops' kernels, and where each process's loop ends
        ok = (n_rows == 0 && m->n_steps == 0) || launch_times(&l, v, n);
        if (ok) timeline(&l, v, n); // sorts v by start, as load_counters wants it
        ok = ok && load_counters(&l, v, n) && name_kernels(&l, &names);
        if (ok) attribute(&l, v, n, rows, n_rows);
    }
    free(v);
    free(rows);
    free(l.sync_ends);
    free(l.betweens);
    free(names.ids);
    free(names.index.slots);
    amp_sort(m->perf.kernels, m->perf.n_kernels, sizeof *m->perf.kernels, cmp_kernel_time);
    return ok;
}

void report_perf_free(report_perf *p) {
    for (size_t i = 0; i < p->n_kernels; i++)
        free((char *)p->kernels[i].name);
    free(p->kernels);
    free((char *)p->gpu.name);
    memset(p, 0, sizeof *p);
}
