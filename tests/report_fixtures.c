/*
 * report_fixtures.c — the `report` suite's shared fixtures (report_fixtures.h says what each is).
 */
#include "report_fixtures.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "commands.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Fixtures

char tmpdir[64], db_path[128], out_path[128], err_path[128];

void report_setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(tmpdir, sizeof tmpdir, "/tmp/ampreport."));
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/out.txt", tmpdir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", tmpdir);
    setenv("XDG_CACHE_HOME", tmpdir, 1); // no calibrated ceilings but those a test writes
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new(db_path, NULL, &c), AMP_OK);
    ck_assert_int_eq(amp_collector_finish(c, 0), AMP_OK);
    amp_collector_free(c);
}

void report_teardown(void) {
    const char *names[] = {
        "run.sqlite", "run.sqlite-wal", "run.sqlite-shm", "out.txt",
        "err.txt",    "foreign.sqlite", "junk.txt",       "ampprobe/ceilings-NVIDIA_H200.txt",
        "ampprobe"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        remove(path);
    }
    rmdir(tmpdir);
}

void sql(const char *text) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA synchronous=OFF", NULL, NULL, NULL); // fixtures need no fsync
    char *msg = NULL;
    int rc = sqlite3_exec(db, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "fixture SQL failed: %s", msg ? msg : "?");
    sqlite3_close(db);
}

void layers(void) {
    sql("INSERT INTO AMP_LAYERS VALUES (1, 0, NULL, 'blocks.0.attn'), (1, 1, NULL, 'blocks.0.mlp'),"
        " (1, 2, NULL, 'head');");
}

void steps(int n, double scale) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
             "INSERT INTO AMP_STEPS SELECT 1, i, i * 1000, i * 1000 + 900, 4.0 - i * 0.01, 1, 0.9 "
             "+ i * 0.003, "
             "%.17g, %.17g, 0, 0, NULL FROM s;",
             n - 1, scale, scale);
    sql(buf);
}

void healthy_stats(int n) {
    char buf[2048];
    snprintf(
        buf, sizeof buf,
        "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d), "
        "t(l, op, kind, dt, numel, amax, nneg, und, zero) AS (VALUES "
        "(0, 'matmul', 'activation', 'f16', 8192, 6.5, 0, 0, 0), "
        "(0, 'masked_fill', 'activation', 'f16', 8192, 6.5, 3840, 0, 0), "
        "(2, 'linear', 'activation', 'f16', 16384, 8.4, 0, 0, 0), "
        "(NULL, 'mul', 'activation', 'f32', 1, 279736.0, 0, 0, 0), "
        "(0, 'masked_fill', 'activation_grad', 'f16', 8192, 37.0, 0, 2, 3872), "
        "(1, 'linear', 'activation_grad', 'f16', 32768, 25.0, 0, 10, 0), "
        "(2, 'linear', 'activation_grad', 'f16', 16384, 6680.0, 0, 0, 0), "
        "(NULL, 'log_softmax', 'activation_grad', 'f32', 16384, 256.0, 0, 0, 16128), "
        "(1, 'fc.weight', 'weight_grad', 'f32', 4096, 1000.0, 0, 1, 0)) "
        "INSERT INTO AMP_TENSOR_STATS SELECT 1, i, l, op, kind, dt, 'f16', numel, -amax, amax, "
        "amax, 0, 0, nneg, 0, und, zero FROM s, t;",
        n - 1);
    sql(buf);
}

void healthy_ops(int n) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d), "
             "t(l, op, ind, outd, pol, flops, bytes, ns) AS (VALUES "
             "(0, 'linear', 'f16,f16', 'f16', 'lower_precision_fp', 4194304, 98304, 40000), "
             "(0, 'softmax', 'f32', 'f32', 'fp32_set_opt_dtype', 8192, 65536, 5000), "
             "(1, 'to', 'f32', 'f16', 'native', 4096, 24576, 3000), "
             "(2, 'linear', 'f16,f16', 'f16', 'lower_precision_fp', 8388608, 163840, 60000)) "
             "INSERT INTO AMP_OPS SELECT 1, i, l, op, 'fwd', ind, outd, pol, '(8, 64)', flops, "
             "bytes, i * 1000000 + l * 100000, i * 1000000 + l * 100000 + ns FROM s, t;",
             n - 1);
    sql(buf);
}

void healthy(int n) {
    layers();
    steps(n, 65536);
    healthy_stats(n);
    healthy_ops(n);
}

void wipe(void) {
    sql("DELETE FROM AMP_LAYERS; DELETE FROM AMP_STEPS; DELETE FROM AMP_OPS; DELETE FROM "
        "AMP_EVENTS;"
        "DELETE FROM AMP_TENSOR_STATS; DELETE FROM StringIds; DELETE FROM TARGET_INFO_GPU;"
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
        "DELETE FROM AMP_PROCESSES;");
}

// ---------------------------------------------------------------------------------------------
// Running the report

report_model model;
report_findings findings;

void analyse(const char *rule, int64_t lo, int64_t hi) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_msg(amp_store_open_readonly(db_path, &db, err) == AMP_OK, "%s", err);
    ck_assert_int_eq(report_model_load(db, db_path, lo, hi, &model, err), AMP_OK);
    sqlite3_close(db);
    memset(&findings, 0, sizeof findings);
    report_run(&model, rule ? report_rule_find(rule) : NULL, &findings);
}

void release(void) {
    report_findings_free(&findings);
    report_model_free(&model);
}

size_t count(const char *rule, amp_severity min_severity) {
    size_t n = 0;
    for (size_t i = 0; i < findings.n; i++)
        n += (!rule || strcmp(findings.v[i].rule, rule) == 0) &&
             findings.v[i].severity >= min_severity;
    return n;
}

void divergences(size_t n) {
    analyse("divergence", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, n);
}

void nonfinite_errors(size_t errors) {
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), errors);
}

const report_kernel *kernel_named(const char *name) {
    for (size_t i = 0; i < model.perf.n_kernels; i++)
        if (strcmp(model.perf.kernels[i].name, name) == 0) return &model.perf.kernels[i];
    ck_abort_msg("no kernel %s", name);
    return NULL;
}

void kernel_layer_is(const report_kernel *k, int32_t layer, int n_layers, int64_t ns) {
    ck_assert_int_eq(k->layer_id, layer);
    ck_assert_int_eq(k->n_layers, n_layers);
    if (ns >= 0) ck_assert_int_eq(k->layer_ns, ns);
}

const report_finding *first_of(const char *rule) {
    for (size_t i = 0; i < findings.n; i++)
        if (strcmp(findings.v[i].rule, rule) == 0) return &findings.v[i];
    ck_abort_msg("no %s finding", rule);
    return NULL;
}

double evidence(const report_finding *f, const char *key) {
    double v = NAN;
    if (!report_finding_evidence_of(f, key, &v))
        ck_abort_msg("finding %s has no evidence %s", f->rule, key);
    return v;
}

bool begins(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool title_starts(const char *prefix) {
    return begins(findings.v[0].title, prefix);
}

size_t occurrences(const char *t, const char *s) {
    size_t n = 0;
    for (const char *p = t; (p = strstr(p, s)); p += strlen(s))
        n++;
    return n;
}

void diverges_at(int64_t step) {
    divergences(1);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), step, 0, 0);
    release();
}

int cmd(const char **args) {
    return test_call_command(amp_cmd_report, "report", args, err_path);
}

// ---------------------------------------------------------------------------------------------
// Runs and checks that several parts of the suite use

void formats_say(const char *formats[][2], size_t n) {
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(CMD(db_path, "--format", formats[i][0], "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        ck_assert_msg(strstr(t, formats[i][1]), "%s: %s", formats[i][0], t);
        free(t);
    }
}

void attn_overflow(void) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 3, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 7890, 65440, "
        " 'input 0 f16 (16, 2, 16, 16) min -6.26953 max 6.26172 amax 6.26953; output f16 (16, 2, "
        "16, 16) min -65120 max 65440 amax 65440 (0 nan, 3913 +inf, 3977 -inf); ', 0, 1, 3),"
        "(1, 3, 0, 'softmax', 'fwd', 'nonfinite_propagated', 'info', 8112, 1, 'x', 0, 1, 3),"
        "(1, 3, NULL, 'log_softmax', 'bwd', 'nonfinite_producer', 'error', 16384, NULL, "
        " 'incoming gradient f32 (256, 64) min -256 max 0 amax 256; gradient f32 (256, 64) min "
        "nan max nan amax nan (16384 nan, 0 +inf, 0 -inf); ', 0, 1, 3),"
        "(1, 3, NULL, NULL, 'optim', 'step_skipped', 'warning', 1, 65536, NULL, 0, 1, 3),"
        // (an fp32 op's f16-range note, recorded as a warning by libampcore until 2026-12-03)
        "(1, 4, 2, 'softmax', 'fwd', 'overflow', 'warning', 9, 70000, 'f32 values beyond the "
        "f16 range: this output overflows if it runs in f16', 0, 1, 4),"
        "(1, 3, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 3),"
        "(1, 4, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 7903, 65312, 'y', 1, 8, 11),"
        "(1, 4, NULL, NULL, NULL, 'loss_nonfinite', 'error', 8, NULL, 'fwd', 1, 8, 11);"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1, "
        "scale_after = scale_before / 2 WHERE step >= 3;");
}

void copy_rows(const char *const *tables, int from, int to) {
    char buf[256];
    for (size_t i = 0; tables[i]; i++) {
        snprintf(buf, sizeof buf,
                 "CREATE TEMP TABLE t AS SELECT * FROM %s WHERE pid = %d; "
                 "UPDATE t SET pid = %d; INSERT INTO %s SELECT * FROM t; DROP TABLE t;",
                 tables[i], from, to, tables[i]);
        sql(buf);
    }
}

void two_trainings(void) {
    attn_overflow();
    static const char *const tables[] = {"AMP_LAYERS", "AMP_STEPS", "AMP_TENSOR_STATS", "AMP_OPS",
                                         "AMP_EVENTS"};
    char buf[128];
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        snprintf(buf, sizeof buf, "UPDATE %s SET pid = 7 WHERE pid = 1;", tables[i]);
        sql(buf);
    }
    healthy(12); // pid 1 again, healthy
    sql("INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, status) VALUES "
        "(1, 0, 16777216, 'tiny_gpt', 'complete'), (7, 0, 117440512, 'tiny_gpt', 'complete');");
}

void loss_steps(const double *loss, const double *norm, int n) {
    for (int i = 0; i < n; i++) {
        char buf[256], l[32] = "NULL", g[32] = "NULL";
        if (!isnan(loss[i])) snprintf(l, sizeof l, "%.17g", loss[i]);
        if (!isnan(norm[i])) snprintf(g, sizeof g, "%.17g", norm[i]);
        snprintf(buf, sizeof buf,
                 "INSERT INTO AMP_STEPS VALUES (1, %d, %d, %d, %s, %d, %s, NULL, NULL, 0, 0, "
                 "NULL);",
                 i, i * 1000, i * 1000 + 900, l, !isnan(loss[i]), g);
        sql(buf);
    }
}

void mlp_underflows(const char *kinds) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "UPDATE AMP_TENSOR_STATS SET n_underflow = numel * 3 / 10 WHERE layer_id = 1 AND "
             "kind IN (%s);",
             kinds);
    sql(buf);
}

// ---------------------------------------------------------------------------------------------
// GPU runs, with hand-made CUPTI rows

void gpu_run(int n, int k, long long kernel_ns, long long gap_ns, double flops, double bytes) {
    layers();
    char buf[4096];
    snprintf(
        buf, sizeof buf,
        "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
        "INSERT INTO AMP_STEPS SELECT 1, i, i * %lld, (i + 1) * %lld - 1, 3.0 - i * 0.01, 1, "
        "0.9 + i * 0.003, 65536, 65536, 0, 0, NULL FROM s;"
        "INSERT INTO AMP_OPS SELECT 1, step, 2, 'linear', 'fwd', 'f16,f16', 'f16', "
        "'lower_precision_fp', '(8, 64)', %.17g, %.17g, start_ns, start_ns + 1000 FROM AMP_STEPS;"
        "INSERT INTO StringIds VALUES (1, 'nvjet_sm90_tst_gemm'), (2, 'cudaLaunchKernel');"
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < %d - 1) "
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start_ns + 10 + x, start_ns + 20 + x, "
        "0, " GPID " + 7, step * %d + x, 2, 0, NULL FROM AMP_STEPS, j;"
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < %d - "
        "1) " TEST_KERNEL_INSERT
        "SELECT start_ns + 2000 + x * %lld, start_ns + 2000 + x * %lld + %lld, 0, 1, 7, "
        "step * %d + x, " GPID ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, x "
        "FROM AMP_STEPS, j;",
        n - 1, STEP_NS, STEP_NS, flops, bytes, k, k, k, kernel_ns + gap_ns, kernel_ns + gap_ns,
        kernel_ns, k);
    sql(buf);
    sql("INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, 0, 'NVIDIA H200');");
}
