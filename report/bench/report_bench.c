/*
 * report_bench.c — how long `ampprobe report` takes on a large run: builds a synthetic run
 * database (the real schema, from the collector) with 100k steps and 1M kernels (10 per step,
 * each with its launch API call and the AMP_OPS row that launched it), per-layer statistics and
 * a GradScaler history, then times the model load, the rules and the json and html formats, and
 * prints the numbers (wall and CPU time: on a busy machine the CPU time is the fairer one).
 * Target: the whole report in <= 5 s. --faulty-processes P adds P processes of the same model
 * whose fp16 forward overflowed at step 3 and stayed broken (a NaN storm: 231 event rows each,
 * the most the collector keeps of one, and its scale collapsing), the case where the rules that
 * join events with events would grow with the square of the rows.
 *
 *   build/bench/report_bench [--steps N] [--kernels-per-step K] [--faulty-processes P]
 *                            [--keep PATH]
 */
#include "amp-store.h"
#include "report.h"

#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAYERS 5
#define STEP_NS 2000000LL // 2 ms steps
#define GPID (1LL << 24)  // globalPid of pid 1

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now_s(void) {
    return clock_s(CLOCK_MONOTONIC);
}

static void check(int rc, sqlite3 *db, const char *what) {
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return;
    fprintf(stderr, "report_bench: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static sqlite3_stmt *prep(sqlite3 *db, const char *sql) {
    sqlite3_stmt *q;
    check(sqlite3_prepare_v2(db, sql, -1, &q, NULL), db, sql);
    return q;
}

static void put(sqlite3 *db, sqlite3_stmt *q, const char *what) {
    check(sqlite3_step(q), db, what);
    sqlite3_reset(q);
}

#define FAULTY_STEPS 60
#define FAULT_STEP 3
#define PROPAGATING_OPS 4

// Processes 2..P+1: the model of process 1, broken from FAULT_STEP on. Each event key (site) gets
// the collector's ten rows of its own, then one aggregate row for the rest of the steps; the
// rows are inserted step by step across the processes, as concurrent processes record them.
static void build_faulty(sqlite3 *db, int processes) {
    static const char *const ops[PROPAGATING_OPS] = {"linear", "gelu", "add", "softmax"};
    sqlite3_stmt *ly = prep(db, "INSERT INTO AMP_LAYERS SELECT ?1, id, parent_id, name FROM "
                                "AMP_LAYERS WHERE pid = 1");
    sqlite3_stmt *st = prep(db, "INSERT INTO AMP_STEPS VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, "
                                "?8, ?9, ?9, NULL)");
    sqlite3_stmt *sc = prep(db, "INSERT INTO AMP_SCALE VALUES (?1, ?2, ?3, ?4, ?5, 0, ?5)");
    sqlite3_stmt *ev = prep(db, "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, "
                                "severity, count, value, detail, aggregate, occurrences, "
                                "last_step) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 7892, NULL, ?8, "
                                "?9, ?10, ?11)");
    for (int p = 0; p < processes; p++) {
        sqlite3_bind_int(ly, 1, 2 + p);
        put(db, ly, "layers");
        double scale = 65536;
        for (int s = 0; s < FAULTY_STEPS; s++) {
            const bool broken = s >= FAULT_STEP;
            sqlite3_bind_int(st, 1, 2 + p);
            sqlite3_bind_int(st, 2, s);
            sqlite3_bind_int64(st, 3, s * STEP_NS);
            sqlite3_bind_int64(st, 4, (s + 1) * STEP_NS - 1);
            sqlite3_bind_double(st, 5, broken ? NAN : 4.0);
            sqlite3_bind_int(st, 6, !broken);
            sqlite3_bind_double(st, 7, scale);
            sqlite3_bind_double(st, 8, broken ? scale / 2 : scale);
            sqlite3_bind_int(st, 9, broken);
            put(db, st, "faulty steps");
            sqlite3_bind_int(sc, 1, 2 + p);
            sqlite3_bind_int(sc, 2, s);
            sqlite3_bind_double(sc, 3, scale);
            sqlite3_bind_double(sc, 4, broken ? scale / 2 : scale);
            sqlite3_bind_int(sc, 5, broken);
            put(db, sc, "faulty scale");
            if (broken) scale /= 2;
        }
    }
    // row r of each site: steps FAULT_STEP .. FAULT_STEP + 9 one row each, then the aggregate
    for (int r = 0; r <= 10; r++) {
        const int step = FAULT_STEP + r, last = r < 10 ? step : FAULTY_STEPS - 1;
        for (int p = 0; p < processes; p++) {
            for (int site = 0; site < 5 + (LAYERS - 1) * PROPAGATING_OPS; site++) {
                const char *kind, *op = NULL, *phase = "fwd", *severity = "error", *detail = NULL;
                int layer = -1;
                if (site == 0) {
                    kind = AMP_EVENT_NONFINITE_PRODUCER, op = "mul", layer = 0;
                    detail = "input 0 f16 (16, 2, 16, 16) min -6.2 max 6.2 amax 6.26953; output "
                             "f16 (16, 2, 16, 16) min -65504 max 65504 amax 65504 (0 nan, 3915 "
                             "+inf, 3977 -inf)";
                } else if (site == 1) {
                    kind = AMP_EVENT_LOSS_NONFINITE, phase = NULL;
                } else if (site == 2) {
                    kind = AMP_EVENT_STEP_SKIPPED, phase = "optim", severity = "warning";
                } else if (site == 3) {
                    kind = AMP_EVENT_SCALE_BACKOFF, phase = "optim", severity = "warning";
                } else if (site == 4) { // a program's own kind (rule recorded-events)
                    kind = "batch_guard", layer = 2, severity = "warning";
                } else {
                    kind = AMP_EVENT_NONFINITE_PROPAGATED, severity = "warning";
                    layer = 1 + (site - 5) / PROPAGATING_OPS,
                    op = ops[(site - 5) % PROPAGATING_OPS];
                }
                sqlite3_bind_int(ev, 1, 2 + p);
                sqlite3_bind_int(ev, 2, step);
                if (layer >= 0)
                    sqlite3_bind_int(ev, 3, layer);
                else
                    sqlite3_bind_null(ev, 3);
                sqlite3_bind_text(ev, 4, op, -1, SQLITE_STATIC);
                sqlite3_bind_text(ev, 5, phase, -1, SQLITE_STATIC);
                sqlite3_bind_text(ev, 6, kind, -1, SQLITE_STATIC);
                sqlite3_bind_text(ev, 7, severity, -1, SQLITE_STATIC);
                sqlite3_bind_text(ev, 8, detail, -1, SQLITE_STATIC);
                sqlite3_bind_int(ev, 9, r == 10);
                sqlite3_bind_int(ev, 10, last - step + 1);
                sqlite3_bind_int(ev, 11, last);
                put(db, ev, "faulty events");
            }
        }
    }
    sqlite3_stmt *all[] = {ly, st, sc, ev};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sqlite3_finalize(all[i]);
}

static void build(const char *path, int64_t steps, int kernels_per_step, int faulty) {
    amp_collector_t *c;
    if (amp_collector_new(path, NULL, &c) != AMP_OK || amp_collector_finish(c, 0) != AMP_OK) {
        fprintf(stderr, "report_bench: cannot create %s: %s\n", path, amp_last_error());
        exit(1);
    }
    amp_collector_free(c);
    sqlite3 *db;
    check(sqlite3_open(path, &db), db, path);
    check(sqlite3_exec(db,
                       "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; BEGIN;"
                       "INSERT INTO AMP_LAYERS VALUES (1, 0, NULL, 'blocks.0.attn'), "
                       "(1, 1, NULL, 'blocks.0.mlp'), (1, 2, NULL, 'blocks.1.attn'), "
                       "(1, 3, NULL, 'blocks.1.mlp'), (1, 4, NULL, 'head');"
                       "INSERT INTO StringIds VALUES (1, 'nvjet_sm90_tst_gemm'), "
                       "(2, 'vectorized_elementwise_kernel'), (3, 'cudaLaunchKernel');"
                       "INSERT INTO TARGET_INFO_GPU (vmId, id, name, memoryBandwidth) VALUES "
                       "(0, 0, 'NVIDIA H200', 4800000000000);"
                       "INSERT OR REPLACE INTO META VALUES ('device', 'cuda', 1);",
                       NULL, NULL, NULL),
          db, "setup");
    sqlite3_stmt *st = prep(db, "INSERT INTO AMP_STEPS VALUES (1, ?1, ?2, ?3, ?4, 1, 0.9, 65536, "
                                "65536, 0, 0, NULL)");
    sqlite3_stmt *sc = prep(db, "INSERT INTO AMP_SCALE VALUES (1, ?1, 65536, 65536, 0, 0, 0)");
    sqlite3_stmt *ts =
        prep(db, "INSERT INTO AMP_TENSOR_STATS VALUES (1, ?1, ?2, 'linear', "
                 "'activation', 'f16', 'f16', 65536, -?3, ?3, ?3, 0, 0, 0, 0, 3, 10)");
    sqlite3_stmt *op = prep(db, "INSERT INTO AMP_OPS VALUES (1, ?1, ?2, ?3, 'fwd', ?4, ?5, ?6, "
                                "'(64, 1024),(1024, 1024)', ?7, ?8, ?9, ?10)");
    sqlite3_stmt *rt =
        prep(db, "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 0, ?3, ?4, "
                 "3, 0, NULL)");
    sqlite3_stmt *k = prep(db, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, "
                               "contextId, streamId, correlationId, globalPid, demangledName, "
                               "shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
                               "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
                               "localMemoryPerThread, localMemoryTotal, gridId) VALUES (?1, ?2, "
                               "0, 1, 7, ?3, ?4, ?5, ?5, 64, 66, 2, 1, 384, 1, 1, 0, 0, 0, 0, ?3)");
    int64_t corr = 0;
    for (int64_t s = 0; s < steps; s++) {
        int64_t t0 = s * STEP_NS;
        sqlite3_bind_int64(st, 1, s);
        sqlite3_bind_int64(st, 2, t0);
        sqlite3_bind_int64(st, 3, t0 + STEP_NS - 1);
        sqlite3_bind_double(st, 4, 4.0 / (1.0 + (double)s * 1e-4));
        put(db, st, "steps");
        sqlite3_bind_int64(sc, 1, s);
        put(db, sc, "scale");
        for (int l = 0; l < LAYERS; l++) {
            sqlite3_bind_int64(ts, 1, s);
            sqlite3_bind_int(ts, 2, l);
            sqlite3_bind_double(ts, 3, 4.0 + l + (double)(s % 97) * 0.01);
            put(db, ts, "stats");
        }
        for (int j = 0; j < kernels_per_step; j++, corr++) {
            bool gemm = j % 2 == 0;
            int64_t host = t0 + 1000 + j * 20000; // each op launches one kernel
            sqlite3_bind_int64(op, 1, s);
            sqlite3_bind_int(op, 2, j % LAYERS);
            sqlite3_bind_text(op, 3, gemm ? "linear" : "gelu", -1, SQLITE_STATIC);
            sqlite3_bind_text(op, 4, gemm ? "f16,f16" : "f16", -1, SQLITE_STATIC);
            sqlite3_bind_text(op, 5, "f16", -1, SQLITE_STATIC);
            sqlite3_bind_text(op, 6, gemm ? "lower_precision_fp" : "native", -1, SQLITE_STATIC);
            sqlite3_bind_int64(op, 7, gemm ? 2LL * 64 * 1024 * 1024 : 65536);
            sqlite3_bind_int64(op, 8, gemm ? 2LL * (64 * 1024 + 1024 * 1024 + 64 * 1024) : 262144);
            sqlite3_bind_int64(op, 9, host);
            sqlite3_bind_int64(op, 10, host + 15000);
            put(db, op, "ops");
            sqlite3_bind_int64(rt, 1, host + 100);
            sqlite3_bind_int64(rt, 2, host + 4000);
            sqlite3_bind_int64(rt, 3, GPID + 11);
            sqlite3_bind_int64(rt, 4, corr);
            put(db, rt, "runtime");
            int64_t ks = t0 + 30000 + j * 120000;
            sqlite3_bind_int64(k, 1, ks);
            sqlite3_bind_int64(k, 2, ks + (gemm ? 90000 : 4000));
            sqlite3_bind_int64(k, 3, corr);
            sqlite3_bind_int64(k, 4, GPID);
            sqlite3_bind_int(k, 5, gemm ? 1 : 2);
            put(db, k, "kernels");
        }
    }
    sqlite3_stmt *all[] = {st, sc, ts, op, rt, k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sqlite3_finalize(all[i]);
    build_faulty(db, faulty);
    check(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), db, "commit");
    sqlite3_close(db);
}

// Says what went wrong with flag (nothing for --help) and how to call; the exit status.
static int usage(const char *flag) {
    const bool help = strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0;
    if (!help) fprintf(stderr, "report_bench: bad or incomplete argument '%s'\n", flag);
    fprintf(help ? stdout : stderr,
            "usage: report_bench [--steps N] [--kernels-per-step K] [--faulty-processes P]\n"
            "                    [--keep PATH]\n"
            "  builds a synthetic run of N steps (default 100000) with K kernels and ops a step\n"
            "  (default 10), and P more processes (default 0) whose forward broke at step 3\n"
            "  (60 steps, 231 event rows each), and times the report on it; --keep leaves the\n"
            "  database at PATH\n");
    return help ? 0 : 2;
}

int main(int argc, char **argv) {
    int64_t steps = 100000;
    int per_step = 10, faulty = 0;
    const char *keep = NULL;
    for (int i = 1; i < argc; i += 2) {
        const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (v && strcmp(flag, "--steps") == 0)
            steps = strtoll(v, &end, 10);
        else if (v && strcmp(flag, "--kernels-per-step") == 0)
            per_step = (int)strtol(v, &end, 10);
        else if (v && strcmp(flag, "--faulty-processes") == 0)
            faulty = (int)strtol(v, &end, 10);
        else if (v && strcmp(flag, "--keep") == 0)
            keep = v;
        else
            return usage(flag);
        if (end && (*end || end == v || steps < 1 || per_step < 1 || per_step > 1000000 ||
                    faulty < 0 || faulty > 1000000))
            return usage(flag);
    }
    char path[256];
    if (keep)
        snprintf(path, sizeof path, "%s", keep);
    else
        snprintf(path, sizeof path, "/tmp/report_bench.%d.sqlite", (int)getpid());
    unlink(path);
    double t0 = now_s();
    build(path, steps, per_step, faulty);
    double t1 = now_s();
    printf("built %s: %lld steps, %lld kernels, %lld ops", path, (long long)steps,
           (long long)steps * per_step, (long long)steps * per_step);
    if (faulty)
        printf(", %d faulty processes (%lld event rows)", faulty,
               (long long)faulty * 11 * (5 + (LAYERS - 1) * PROPAGATING_OPS));
    printf(" in %.2f s\n", t1 - t0);

    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX > REPORT_ERR_MAX ? AMP_STORE_ERR_MAX : REPORT_ERR_MAX];
    if (amp_store_open_readonly(path, &db, err) != AMP_OK) {
        fprintf(stderr, "report_bench: %s\n", err);
        return 1;
    }
    report_model m;
    double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID); // wall time suffers on a busy machine
    double a = now_s();
    if (report_model_load(db, path, INT64_MIN, INT64_MAX, &m, err) != AMP_OK) {
        fprintf(stderr, "report_bench: %s\n", err);
        return 1;
    }
    double b = now_s();
    sqlite3_close(db);
    report_findings f = {0};
    report_run(&m, NULL, &f);
    double c = now_s();
    FILE *devnull = fopen("/dev/null", "w");
    report_format_json(devnull, &m, &f);
    double d = now_s();
    report_format_html(devnull, &m, &f);
    double e = now_s();
    fclose(devnull);
    printf("load %.3f s (kernels attributed to ops: %.0f%% of GPU time), rules %.3f s (%zu "
           "findings), json %.3f s, html %.3f s\n",
           b - a,
           100.0 * (double)m.perf.attributed_ns / (double)(m.perf.kernel_ns ? m.perf.kernel_ns : 1),
           c - b, f.n, d - c, e - d);
    printf("report time %.3f s wall, %.3f s CPU (target <= 5 s)\n", e - a,
           clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu);
    report_findings_free(&f);
    report_model_free(&m);
    if (!keep) unlink(path);
    return 0;
}
