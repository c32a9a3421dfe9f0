/*
 * test_report.c — suite `report`: `ampprobe report` on small databases built here with the real
 * schema (an empty run database from the collector, then INSERTed rows). Every rule has a
 * positive and a negative case (the performance rules on hand-made CUPTI rows); a healthy run
 * yields no error or warning; the json output carries the stable keys, md and html escape user
 * strings; a missing, foreign or non-SQLite file exits 2 with one line. Tcase `samples` runs the
 * samples' --fault runs end to end (ampprobe run, then report --format json) and checks the top
 * finding's rule, layer and step, and that the healthy twins are clean.
 */
#include "tests.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "ceilings.h"
#include "commands.h"
#include "report.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Fixtures

static char tmpdir[64], db_path[128], out_path[128], err_path[128];

static void setup(void) {
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

static void teardown(void) {
    const char *names[] = {"run.sqlite", "run.sqlite-wal", "run.sqlite-shm", "out.txt", "err.txt",
                           "foreign.sqlite", "junk.txt", "ampprobe/ceilings-NVIDIA_H200.txt",
                           "ampprobe"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        remove(path);
    }
    rmdir(tmpdir);
}

static void sql(const char *text) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA synchronous=OFF", NULL, NULL, NULL); // fixtures need no fsync
    char *msg = NULL;
    int rc = sqlite3_exec(db, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "fixture SQL failed: %s", msg ? msg : "?");
    sqlite3_close(db);
}

// Layers of pid 1: 0 blocks.0.attn, 1 blocks.0.mlp, 2 head.
static void layers(void) {
    sql("INSERT INTO AMP_LAYERS VALUES (1, 0, NULL, 'blocks.0.attn'), (1, 1, NULL, 'blocks.0.mlp'),"
        " (1, 2, NULL, 'head');");
}

// n steps of pid 1 with finite losses and a constant scale.
static void steps(int n, double scale) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
             "INSERT INTO AMP_STEPS SELECT 1, i, i * 1000, i * 1000 + 900, 4.0 - i * 0.01, 1, 0.9 "
             "+ i * 0.003, "
             "%.17g, %.17g, 0, 0, NULL FROM s;",
             n - 1, scale, scale);
    sql(buf);
}

// Healthy statistics for every step: f16 activations far from 65504, gradients with a few
// subnormals and structural zeros (a causal mask), an fp32 scaled loss beyond 65504.
static void healthy_stats(int n) {
    char buf[2048];
    snprintf(buf, sizeof buf,
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

// Healthy AMP ops for every step: f16 GEMMs under autocast, an fp32 softmax, one weight cast.
static void healthy_ops(int n) {
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

static void healthy(int n) {
    layers();
    steps(n, 65536);
    healthy_stats(n);
    healthy_ops(n);
}

// Empties the tables the fixtures fill, for a second fixture in one test.
static void wipe(void) {
    sql("DELETE FROM AMP_LAYERS; DELETE FROM AMP_STEPS; DELETE FROM AMP_OPS; DELETE FROM "
        "AMP_EVENTS;"
        "DELETE FROM AMP_TENSOR_STATS; DELETE FROM StringIds; DELETE FROM TARGET_INFO_GPU;"
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
        "DELETE FROM AMP_PROCESSES;");
}

// ---------------------------------------------------------------------------------------------
// Running the report

static report_model model;
static report_findings findings;

static void analyse(const char *rule, int64_t lo, int64_t hi) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_msg(amp_store_open_readonly(db_path, &db, err) == AMP_OK, "%s", err);
    ck_assert_int_eq(report_model_load(db, db_path, lo, hi, &model, err), AMP_OK);
    sqlite3_close(db);
    memset(&findings, 0, sizeof findings);
    report_run(&model, rule ? report_rule_find(rule) : NULL, &findings);
}

static void release(void) {
    report_findings_free(&findings);
    report_model_free(&model);
}

static size_t count(const char *rule, amp_severity min_severity) {
    size_t n = 0;
    for (size_t i = 0; i < findings.n; i++)
        n += (!rule || strcmp(findings.v[i].rule, rule) == 0) &&
             findings.v[i].severity >= min_severity;
    return n;
}

// Runs rule divergence over the fixture and checks that it found n findings.
static void divergences(size_t n) {
    analyse("divergence", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, n);
}

// Runs rule nonfinite-root-cause over the fixture and checks that it found `errors` errors.
static void nonfinite_errors(size_t errors) {
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), errors);
}

// The analysed model's kernel of that name (the test fails without one).
static const report_kernel *kernel_named(const char *name) {
    for (size_t i = 0; i < model.perf.n_kernels; i++)
        if (strcmp(model.perf.kernels[i].name, name) == 0) return &model.perf.kernels[i];
    ck_abort_msg("no kernel %s", name);
    return NULL;
}

// Kernel k's layer (the one most of its time ran in), how many layers launched it, and the time
// in its layer (ns < 0: not checked).
static void kernel_layer_is(const report_kernel *k, int32_t layer, int n_layers, int64_t ns) {
    ck_assert_int_eq(k->layer_id, layer);
    ck_assert_int_eq(k->n_layers, n_layers);
    if (ns >= 0) ck_assert_int_eq(k->layer_ns, ns);
}

static const report_finding *first_of(const char *rule) {
    for (size_t i = 0; i < findings.n; i++)
        if (strcmp(findings.v[i].rule, rule) == 0) return &findings.v[i];
    ck_abort_msg("no %s finding", rule);
    return NULL;
}

static double evidence(const report_finding *f, const char *key) {
    double v = NAN;
    if (!report_finding_evidence_of(f, key, &v))
        ck_abort_msg("finding %s has no evidence %s", f->rule, key);
    return v;
}

// Whether s begins with prefix.
static bool begins(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

// Whether the first finding's title begins with prefix.
static bool title_starts(const char *prefix) {
    return begins(findings.v[0].title, prefix);
}

// Runs rule divergence over the fixture, checks that it found one divergence, at `step`, and
// releases the findings.
static void diverges_at(int64_t step) {
    divergences(1);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), step, 0, 0);
    release();
}

// Runs `ampprobe report ARGS...` with stderr captured into err_path; returns the exit status.
#define CMD(...) cmd((const char *[]){__VA_ARGS__, NULL})
static int cmd(const char **args) {
    char *argv[16] = {"report"};
    int argc = 1;
    for (int i = 0; args[i] && argc < 15; i++) argv[argc++] = (char *)args[i];
    fflush(stderr);
    int saved = dup(2);
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    int rc = amp_cmd_report(argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// A healthy run, an empty one

// The step spans behind the rules' questions about events: a step of a process covered, the
// next span after a step; a long early span still covers steps past later, shorter ones.
START_TEST(event_spans_answer_per_process) {
    report_spans s = {0};
    ck_assert(!report_spans_cover(&s, 1, 0, 100));
    ck_assert_int_eq(report_spans_next(&s, 1, 0), INT64_MAX);
    report_spans_add(&s, 2, 50, 50, 0);
    report_spans_add(&s, 1, 10, 40, 1); // pid 1: 10-40, 12, 60-61 (added out of order)
    report_spans_add(&s, 1, 60, 61, 2);
    report_spans_add(&s, 1, 12, 12, 3);
    report_spans_add(&s, 3, 5, 5, 4);
    report_spans_sort(&s);
    ck_assert(report_spans_cover(&s, 1, 30, 30)); // by 10-40, past 12's end
    ck_assert(report_spans_cover(&s, 1, 0, 10));
    ck_assert(report_spans_cover(&s, 1, 41, 60));
    ck_assert(!report_spans_cover(&s, 1, 41, 59));
    ck_assert(!report_spans_cover(&s, 1, 62, INT64_MAX));
    ck_assert(!report_spans_cover(&s, 1, INT64_MIN, 9));
    ck_assert(!report_spans_cover(&s, 2, 0, 49)); // pid 1's spans are not pid 2's
    ck_assert(report_spans_cover(&s, 2, 50, 50));
    ck_assert(!report_spans_cover(&s, 4, INT64_MIN, INT64_MAX));
    ck_assert_int_eq(report_spans_next(&s, 1, INT64_MIN), 10);
    ck_assert_int_eq(report_spans_next(&s, 1, 10), 12);
    ck_assert_int_eq(report_spans_next(&s, 1, 12), 60);
    ck_assert_int_eq(report_spans_next(&s, 1, 60), INT64_MAX); // pid 2's 50 is not pid 1's
    ck_assert_int_eq(report_spans_next(&s, 2, 0), 50);
    ck_assert_int_eq(s.v[1].event, 3); // sorted by pid, step: 10-40, then 12
    report_spans_free(&s);
}
END_TEST

START_TEST(healthy_run_has_no_error_or_warning) {
    healthy(20);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy"), "verdict: %s", verdict);
    release();
}
END_TEST

// A database of schema 1.1 has no AMP_STEPS.mem_peak_bytes: read as "not recorded".
START_TEST(a_database_without_memory_peaks_reads) {
    healthy(4);
    sql("UPDATE AMP_STEPS SET mem_peak_bytes = 1048576;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_summary s;
    report_summarize(&model, &s);
    ck_assert_double_eq(s.peak_mem, 1048576);
    release();
    sql("ALTER TABLE AMP_STEPS DROP COLUMN mem_peak_bytes;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_summarize(&model, &s);
    ck_assert(isnan(s.peak_mem));
    ck_assert_int_eq(s.steps, 4);
    release();
}
END_TEST

// A data-parallel run: each rank a process with its own steps, counted as such.
START_TEST(ranks_are_counted_as_processes) {
    healthy(12);
    sql("INSERT INTO AMP_STEPS SELECT 2, step, start_ns, end_ns, loss, loss_finite, grad_norm, "
        "scale_before, scale_after, found_inf, skipped, mem_peak_bytes "
        "FROM AMP_STEPS WHERE pid = 1;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy: no error or warning in 24 steps of 2 processes."),
                  "verdict: %s", verdict);
    release();
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"summary\": {\"steps\": 24, \"processes\": 2,"), "%s", j);
    free(j);
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "steps:       24 of 2 processes (0-11)"), "%s", t);
    free(t);
}
END_TEST

// A focus past the run's steps says so, with where its steps end, rather than that nothing ran.
START_TEST(a_focus_past_the_run_says_where_its_steps_end) {
    healthy(6);
    analyse(NULL, 100, 200);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "falls in the focused steps (--steps): its steps run to 5."),
                  "verdict: %s", verdict);
    release();
    // and the Run section does not claim that no step was recorded
    const char *formats[][2] = {{"text", "steps:       none in the focused steps (--steps)"},
                                {"md", "| steps | none in the focused steps (--steps) |"},
                                {"html", "<td>steps</td><td>none in the focused steps (--steps)"}};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(
            CMD(db_path, "--format", formats[i][0], "--steps", "100:200", "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        ck_assert_msg(strstr(t, formats[i][1]), "%s: %s", formats[i][0], t);
        free(t);
    }
}
END_TEST

// A PyTorch run of a torch.compile'd model records no module output inside it: the report says
// so (the Run section, json's summary.compiled) and its healthy verdict claims no more than it saw.
START_TEST(a_compiled_model_says_what_is_not_recorded) {
    healthy(6);
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "no op came near"), "verdict: %s", verdict);
    release();
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"compiled\": null, \"unwatched\": null, \"added_models\": null, "),
                  "%s", j);
    free(j);
    sql("INSERT INTO META (key, value, pid) VALUES ('compiled', 'model', 1);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "neither the model's output nor a gradient came near the "
                                  "autocast dtype's range (it ran compiled"),
                  "verdict: %s", verdict);
    ck_assert(!strstr(verdict, "no op came near"));
    release();
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    j = test_read_file(out_path, NULL);
    ck_assert_msg(
        strstr(j, "\"compiled\": \"model\", \"unwatched\": null, \"added_models\": null, "), "%s",
        j);
    free(j);
    const char *formats[] = {"text", "md", "html"};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(CMD(db_path, "--format", formats[i], "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        ck_assert_msg(strstr(t, "the model as a whole (torch.compile): the outputs of the modules "
                                "inside it are not recorded"),
                      "%s: %s", formats[i], t);
        free(t);
    }
    sql("UPDATE META SET value = 'modules' WHERE key = 'compiled';");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "compiled:    parts of the model (torch.compile)"), "%s", t);
    ck_assert_msg(strstr(t, "no recorded output came"), "%s", t);
    free(t);
}
END_TEST

// Each {format, text}: the report in that format holds the text.
static void formats_say(const char *formats[][2], size_t n) {
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(CMD(db_path, "--format", formats[i][0], "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        ck_assert_msg(strstr(t, formats[i][1]), "%s: %s", formats[i][0], t);
        free(t);
    }
}

// A PyTorch run whose optimizer also trained modules outside the watched model, one of them
// recorded from step 1 on, and whose parameters were updated by hand: each format's Run section
// names them (escaped), json's summary holds them (unwatched, added_models, updates).
START_TEST(parameters_trained_outside_the_watched_model_are_named) {
    healthy(4);
    sql("INSERT INTO META (key, value, pid) VALUES ('unwatched', 'Dec<o>der (1.2 M values)', 1),"
        " ('added_models', 'D<isc> (5 k values) from step 1', 1), ('updates', 'by hand', 1);");
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"unwatched\": \"Dec<o>der (1.2 M values)\", \"added_models\": "
                            "\"D<isc> (5 k values) from step 1\", \"updates\": \"by hand\", "),
                  "%s", t);
    free(t);
    const char *formats[][2] = {
        {"text", "not watched: Dec<o>der (1.2 M values) (trained"},
        {"md", "| not watched | Dec&lt;o&gt;der (1.2 M values) (trained"},
        {"html", "<td>not watched</td><td>Dec&lt;o&gt;der (1.2 M values)"},
        {"text", "also watched: D<isc> (5 k values) from step 1 (trained beside"},
        {"md", "| also watched | D&lt;isc&gt; (5 k values) from step 1 (trained"},
        {"html", "<td>also watched</td><td>D&lt;isc&gt; (5 k values) from step 1"},
        {"text", "updates:     by hand (no optimizer.step() seen: a step ends as the next"},
        {"md", "| updates | by hand (no optimizer.step() seen"},
        {"html", "<td>updates</td><td>by hand (no optimizer.step() seen"}};
    formats_say(formats, sizeof formats / sizeof *formats);
}
END_TEST

// Statistics sampled every 5 steps (--stats-every): each format's Run section says so and what
// every step still has, json's summary holds the number; a run with them every step says
// nothing of it (stats_every 1).
START_TEST(sampled_statistics_are_said) {
    healthy(4);
    const char *every_step[][2] = {{"json", "\"stats_every\": 1, "}};
    formats_say(every_step, 1);
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(!strstr(t, "statistics:"), "%s", t);
    free(t);
    sql("INSERT INTO META (key, value, pid) VALUES ('stats_every', '5', 0);");
    const char *formats[][2] = {
        {"json", "\"stats_every\": 5, "},
        {"text", "statistics:  every 5 steps (--stats-every: the per-layer figures are of those"},
        {"md", "| statistics | every 5 steps (--stats-every"},
        {"html", "<td>statistics</td><td>every 5 steps (--stats-every"}};
    formats_say(formats, sizeof formats / sizeof *formats);
}
END_TEST

START_TEST(empty_database_degrades_gracefully) {
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *text = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(text, "No training step was recorded"));
    ck_assert_ptr_nonnull(strstr(text, "steps:       none recorded"));
    free(text);
    // a run that traced no amp (ampprobe run --trace nvtx) says why it has no steps
    sql("INSERT INTO META (key, value, pid) VALUES ('trace', 'nvtx', 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "the run traced nvtx (--trace), not amp"), "%s", verdict);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// nonfinite-root-cause

// AMP_EVENTS rows in the order the fixtures give them.
#define EVENTS_VALUES                                                                              \
    "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "       \
    "detail, aggregate, occurrences, last_step) VALUES "

// The attention-logit overflow of tiny_gpt --fault attn-overflow: the mul after q@k^T overflows
// fp16 from step 3 on; softmax and the loss propagate it.
static void attn_overflow(void) {
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

// A focus after the run first broke says where it did: the focused steps' first error is not the
// run's.
START_TEST(a_focus_after_the_first_error_says_where_it_was) {
    attn_overflow(); // errors from step 3 on, steps 4-11 as one aggregated row
    static const struct {
        int64_t lo, hi;
        bool said;
    } cases[] = {
        {6, 11, true}, {4, 4, true}, {3, 11, false}, {0, 2, false}, {INT64_MIN, INT64_MAX, false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        analyse(NULL, cases[i].lo, cases[i].hi);
        char verdict[2048];
        report_verdict(&model, &findings, verdict, sizeof verdict);
        const bool said =
            strstr(verdict, "The run had an error before the focused steps (--steps): "
                            "its first is at step 3.") != NULL;
        ck_assert_msg(said == cases[i].said, "steps %lld:%lld: %s", (long long)cases[i].lo,
                      (long long)cases[i].hi, verdict);
        release();
    }
    ck_assert_int_eq(CMD(db_path, "--format", "json", "--steps", "6:11", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"first_error_before_focus\": 3}"), "%s", j);
    free(j);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"first_error_before_focus\": null}"), "%s", j);
    free(j);
}
END_TEST

// A focus inside an aggregate row (steps 4-11, one occurrence a step) cuts the row to it: the
// finding is of the focused steps, not of all the steps the row folded together.
START_TEST(a_focus_cuts_an_aggregate_row_to_its_steps) {
    attn_overflow();
    analyse(NULL, 9, 10);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 9);
    ck_assert_int_eq(f->last_step, 10);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_losses"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_elements"), 1976, 0, 0); // 7903 over 8 steps, 2 of them
    // the inputs and outputs quoted are of the row's first step, which is said
    ck_assert_close(evidence(f, "figures_step"), 4, 0, 0);
    ck_assert_msg(strstr(f->title, " (figures of step 4)"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "quoted are of step 4, before the focused steps"), "%s",
                  f->detail);
    release();
    analyse(NULL, 4, 10); // (a row that begins in the focus is of its steps: nothing to say)
    f = first_of("nonfinite-root-cause");
    ck_assert_ptr_null(strstr(f->title, "figures of"));
    for (int i = 0; i < f->n_evidence; i++)
        ck_assert_str_ne(f->evidence[i].key, "figures_step");
    release();
    analyse(NULL, 11, 40); // the row's last step
    f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 11);
    ck_assert_int_eq(f->last_step, 11);
    release();
}
END_TEST

// An aggregate row does not say which of its steps had an occurrence: a focus on steps of its range
// that did not break finds nothing there, and one that begins on such a step begins where the
// steps broke, with as many non-finite losses as the step records hold.
START_TEST(a_focus_on_healthy_steps_inside_an_aggregate_row_is_healthy) {
    attn_overflow(); // steps 4-11 broke, as one aggregated row each for the mul and the loss
    sql("UPDATE AMP_STEPS SET loss = 3, loss_finite = 1, skipped = 0, found_inf = 0, "
        "scale_after = scale_before WHERE step IN (8, 9);");
    analyse(NULL, 9, 9);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 0);
    release();
    analyse(NULL, 8, 11);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 10);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_losses"), 2, 0, 0);
    release();
    // a loss row alone, its value of its first step (+inf): each step's own loss is said (NaN)
    sql("DELETE FROM AMP_EVENTS WHERE kind != 'loss_nonfinite';"
        "UPDATE AMP_EVENTS SET value = 'Inf' WHERE aggregate = 1;");
    analyse(NULL, 8, 40);
    f = first_of("nonfinite-root-cause");
    ck_assert_msg(strstr(f->title, "the loss became NaN at step 10"), "%s", f->title);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    release();
    // without a GradScaler a step's record does not tell (a NaN the loss never sees: a padded
    // sample): the producer's row is kept, in proportion
    wipe();
    layers();
    steps(20, 1);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;" EVENTS_VALUES
        "(1, 0, 0, 'softmax', 'fwd', 'nonfinite_producer', 'error', 64, NULL, 'input 0 bf16 (2, "
        "10) min -inf max 1 amax inf; output bf16 (2, 10) min nan max nan amax nan (64 nan, 0 "
        "+inf, 0 -inf); ', 1, 20, 19);");
    analyse(NULL, 5, 10);
    ck_assert_uint_eq(model.n_events, 1);
    ck_assert_int_eq(model.events[0].occurrences, 6);
    release();
    // nor where some steps of the range have a scale and others none (the row was cut at the
    // first step without: 2 of the 6 steps, all broken)
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, loss = NULL, "
        "loss_finite = 0 WHERE step != 7;");
    analyse(NULL, 5, 10);
    ck_assert_uint_eq(model.n_events, 1);
    ck_assert_int_eq(model.events[0].occurrences, 6);
    ck_assert_int_eq(model.events[0].step, 5);
    ck_assert_int_eq(model.events[0].last_step, 10);
    release();
}
END_TEST

// A scale that backed off to 2^-128 has no fp32 reciprocal: unscale_ multiplies the gradients by
// inf, its inf/NaN check (which reads them before) sees nothing, the optimizer steps, and every
// step after has a non-finite loss with no producer: said as a finding of its own, after the
// root that drove the scale down, or alone.
START_TEST(nonfinite_weights_poisoned_by_a_scale_without_reciprocal) {
    layers();
    steps(8, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step BETWEEN 1 AND 3 OR step >= 5;"
        "UPDATE AMP_STEPS SET scale_before = 2.938735877055719e-39, scale_after = "
        "2.938735877055719e-39 WHERE step = 4;" EVENTS_VALUES
        "(1, 1, NULL, 'log', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'input 0 f32 (2, 10) "
        "min 0 max 1 amax 1; output f32 (2, 10) min 0 max 0 amax 0 (0 nan, 0 +inf, 1 -inf); ', "
        "0, 1, 1),"
        "(1, 2, NULL, 'log', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'y', 1, 2, 3),"
        "(1, 1, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 'Inf', 'fwd', 1, 3, 3),"
        "(1, 5, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, NULL, 1, 3, 7);");
    nonfinite_errors(2);
    ck_assert_msg(strstr(findings.v[0].title, "log of zero"), "%s", findings.v[0].title);
    const report_finding *f = &findings.v[1];
    ck_assert_msg(strstr(f->title, "the weights went non-finite at step 4: its loss scale "
                                   "2.93873588e-39 has no fp32 reciprocal"),
                  "%s", f->title);
    ck_assert_int_eq(f->first_step, 4);
    ck_assert_int_eq(f->last_step, 7);
    ck_assert_double_eq(evidence(f, "nonfinite_losses_after"), 3);
    release();
    // a scale that fp32 can still invert: nothing said of the later steps
    sql("UPDATE AMP_STEPS SET scale_before = 1e-30 WHERE step = 4;");
    nonfinite_errors(1);
    release();
    // no root before it: the poisoned steps are the finding (of the loss events, or of the
    // step records when there are none)
    sql("UPDATE AMP_STEPS SET scale_before = 0 WHERE step = 4;"
        "UPDATE AMP_STEPS SET loss = 3, loss_finite = 1, skipped = 0, found_inf = 0 "
        "WHERE step BETWEEN 1 AND 3;"
        "DELETE FROM AMP_EVENTS WHERE step < 5;");
    for (int events = 1; events >= 0; events--) {
        nonfinite_errors(1);
        ck_assert_msg(strstr(findings.v[0].title, "the weights went non-finite at step 4"), "%s",
                      findings.v[0].title);
        ck_assert_int_eq(findings.v[0].last_step, 7);
        release();
        sql("DELETE FROM AMP_EVENTS;");
    }
    // steps numbered sparsely (by tokens seen): the step before is the process's previous record
    sql("UPDATE AMP_STEPS SET step = step * 1000;");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].title, "the weights went non-finite at step 4000"), "%s",
                  findings.v[0].title);
    ck_assert_int_eq(findings.v[0].last_step, 7000);
    release();
}
END_TEST

// Copies process from's rows of each table (NULL-terminated) as process to's.
static void copy_rows(const char *const *tables, int from, int to) {
    char buf[256];
    for (size_t i = 0; tables[i]; i++) {
        snprintf(buf, sizeof buf,
                 "CREATE TEMP TABLE t AS SELECT * FROM %s WHERE pid = %d; "
                 "UPDATE t SET pid = %d; INSERT INTO %s SELECT * FROM t; DROP TABLE t;",
                 tables[i], from, to, tables[i]);
        sql(buf);
    }
}

// Each rank of a data-parallel run shows the same fault: one finding, the processes counted.
START_TEST(a_fault_every_rank_shows_is_one_finding) {
    attn_overflow();
    analyse(NULL, INT64_MIN, INT64_MAX);
    const size_t alone = findings.n;
    release();
    static const char *const tables[] = {"AMP_LAYERS", "AMP_STEPS", "AMP_TENSOR_STATS",
                                         "AMP_OPS",    "AMP_SCALE", NULL};
    copy_rows(tables, 1, 2); // pid 2: pid 1's rows again
    sql("INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) SELECT 2, step + 1, layer_id, op, phase, kind, "
        "severity, count, value * 0.5, detail, aggregate, occurrences, last_step FROM AMP_EVENTS;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->processes, 1); // pid 2's starts a step later: not the same problem
    release();
    sql("UPDATE AMP_EVENTS SET step = step - 1 WHERE pid = 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, alone);
    f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->processes, 2);
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_msg(strstr(f->detail, "The same in 2 processes"), "%s", f->detail);
    release();
}
END_TEST

// Two trainings in one run (a script that starts both): tiny_gpt pid 1 healthy, tiny_gpt pid 7
// broken as attn_overflow() breaks it, each named in AMP_PROCESSES.
static void two_trainings(void) {
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

// In a run of several processes each finding says which one it is of (text, md, html, json);
// one that every process shows says how many, and names none.
START_TEST(a_finding_of_one_of_several_processes_names_it) {
    two_trainings();
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[2048];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Training broke in tiny_gpt (pid 7), 1 of 2 processes: fp16 "
                                  "overflow in blocks.0.attn mul at step 3"),
                  "%s", verdict);
    ck_assert_int_eq(first_of("nonfinite-root-cause")->pid, 7);
    ck_assert_int_eq(first_of("loss-scale")->pid, 7);
    release();
    // a later image of a pid (an exec into a program that records) is named by its own pid
    static const char *const tables[] = {"AMP_PROCESSES",    "AMP_LAYERS", "AMP_STEPS",
                                         "AMP_TENSOR_STATS", "AMP_OPS",    "AMP_EVENTS"};
    for (int back = 0; back <= 1; back++) {
        for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
            char q[128];
            snprintf(q, sizeof q, "UPDATE %s SET pid = %d WHERE pid = %d;", tables[i],
                     back ? 7 : 7 + 4194304, back ? 7 + 4194304 : 7);
            sql(q);
        }
        if (back) break;
        analyse(NULL, INT64_MIN, INT64_MAX);
        report_verdict(&model, &findings, verdict, sizeof verdict);
        ck_assert_msg(strstr(verdict, "Training broke in tiny_gpt (pid 7, image 2 of it), 1 of 2 "),
                      "%s", verdict);
        release();
    }
    const char *formats[][2] = {
        {"text", "where: steps 3-11, layer blocks.0.attn, op mul (fwd), in tiny_gpt (pid 7)\n"},
        {"md", "- op: mul (fwd)\n- process: tiny\\_gpt (pid 7)\n"},
        {"html", "steps 3-11, layer blocks.0.attn, op mul (fwd), in tiny_gpt (pid 7)</div>"},
        {"json", "\"phase\": \"fwd\", \"processes\": 1, \"pid\": 7, \"program\": \"tiny_gpt\",\n"}};
    formats_say(formats, sizeof formats / sizeof *formats);
    // both break alike: one finding of 2 processes, which names neither
    sql("INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) SELECT 1, step, layer_id, op, phase, kind, "
        "severity, count, value, detail, aggregate, occurrences, last_step FROM AMP_EVENTS;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1, "
        "scale_after = scale_before / 2 WHERE step >= 3;");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "Training broke: fp16 overflow"), "%s", t);
    ck_assert_msg(strstr(t, "op mul (fwd), in 2 processes\n"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"processes\": 2, \"pid\": null, \"program\": null,"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "md", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "- op: mul (fwd)\n- processes: 2\n"), "%s", t);
    free(t);
    // a run of one process names none in text, its pid in json
    wipe();
    attn_overflow();
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(!strstr(t, "(pid") && strstr(t, "op mul (fwd)\n"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"processes\": 1, \"pid\": 1, \"program\": null,"), "%s", t);
    free(t);
}
END_TEST

START_TEST(nonfinite_attention_overflow_is_the_first_finding) {
    attn_overflow();
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_ge(findings.n, 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->rule, "nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->layer, "blocks.0.attn");
    ck_assert_str_eq(f->op, "mul");
    ck_assert_str_eq(f->phase, "fwd");
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_ptr_nonnull(strstr(f->title, "fp16 overflow"));
    ck_assert_ptr_nonnull(strstr(f->advice, "1/sqrt(d_head)"));
    ck_assert_ptr_nonnull(strstr(f->advice, "bf16"));
    ck_assert_close(evidence(f, "input_amax"), 6.26953, 1e-9, 0);
    ck_assert_close(evidence(f, "output_posinf"), 3913, 0, 0);
    ck_assert_close(evidence(f, "steps_affected"), 9, 0, 0);
    // the values of the site's every row (step 3's and the aggregate row's of steps 4-11), as
    // the steps are: not step 3's alone (a focus on steps 4-11 had counted more than the run)
    ck_assert_close(evidence(f, "nonfinite_elements"), 7890 + 7903, 0, 0);
    // the backward producer of a step whose forward was already broken is no root of its own
    ck_assert_uint_eq(count("nonfinite-root-cause", AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(f->advice, "in fp32 (autocast disabled around it: torch.autocast(..., "
                                    "enabled=False)"),
                  "%s", f->advice);
    release();
    // the same overflow in a run without autocast (FSDP1's MixedPrecision in fp16, a model cast
    // with .half()): no autocast to disable, the module's parameters to keep in fp32
    sql("INSERT INTO META (key, value, pid) VALUES ('compute_dtype', 'f16', 1);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_str_eq(f->op, "mul");
    ck_assert_msg(strstr(f->advice, "in fp32 (no autocast here: the fp16 is the parameters' "
                                    "(model.half(), FSDP's MixedPrecision), so .float() inputs "
                                    "and that module's parameters in fp32: module.float(), "),
                  "%s", f->advice);
    ck_assert_msg(!strstr(f->advice, "enabled=False"), "%s", f->advice);
    release();
}
END_TEST

START_TEST(nonfinite_input_and_log_zero_are_explained) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 5, NULL, 'add', 'fwd', 'nonfinite_input', 'error', 1, 4.5, 'input 1 f32 (16, 32) min "
        "0 max 0 amax 0 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 5, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 96, 2.3, 'x', 0, 1, 5),"
        "(1, 6, 2, 'log', 'fwd', 'nonfinite_producer', 'error', 199, 0, 'input 0 f32 (256, 64) "
        "min 0 max 1 amax 1; output f32 (256, 64) min 0 max 0 amax 0 (0 nan, 0 +inf, 199 -inf); ',"
        " 0, 1, 6);");
    nonfinite_errors(2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "input data"));
    ck_assert_int_eq(findings.v[0].first_step, 5);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Sanitize the data"));
    ck_assert_str_eq(findings.v[1].op, "log");
    ck_assert_str_eq(findings.v[1].layer, "head");
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "log of zero"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].advice, "clamp"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].advice, "this underflows in fp32 too")); // f32 in
    ck_assert_ptr_null(strstr(findings.v[1].detail, "not watched"));
    release();
    // a 16-bit argument's 0 may be a small value rounded to 0: fp32 is part of the fix
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'input 0 f32', 'input 0 f16') WHERE op "
        "= 'log';");
    nonfinite_errors(2);
    ck_assert_ptr_null(strstr(findings.v[1].advice, "this underflows in fp32 too"));
    ck_assert_msg(strstr(findings.v[1].advice, "Its argument was fp16, where a value below 6e-8 "
                                               "rounds to 0: the zero may be an underflow that "
                                               "fp32 would have kept"),
                  "%s", findings.v[1].advice);
    release();
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'input 0 f16', 'input 0 f32') WHERE op "
        "= 'log';");
    // made outside the model, in a run with modules the bridge did not watch: they are named
    sql("UPDATE AMP_EVENTS SET layer_id = NULL WHERE op = 'log';"
        "INSERT INTO META (key, value, pid) VALUES ('unwatched', 'Decoder (1.2 M values)', 1);");
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[1].op, "log");
    ck_assert_ptr_nonnull(strstr(findings.v[1].detail,
                                 "runs modules that were not watched, which may be where it was "
                                 "made: Decoder (1.2 M values)."));
    ck_assert_ptr_null(strstr(findings.v[0].detail, "not watched")); // the data's: in a layer
    release();
}
END_TEST

// NaN in the batch of step 2 of a run without a GradScaler: the weights are NaN from there on. A
// focus on steps 5-8 finds no producer there; its finding says the loss has been non-finite
// since step 2 (not "the loss became NaN at step 5", naming the first layer that read the NaN
// weights as where it was made), with or without the loss events.
START_TEST(a_focus_inside_a_nonfinite_run_points_before_it) {
    healthy(12);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 2;"
        "UPDATE AMP_TENSOR_STATS SET n_nan = numel WHERE step >= 3 AND kind = 'activation';");
    for (int events = 0; events < 2; events++) {
        if (events)
            sql(EVENTS_VALUES
                "(1, 2, 0, 'add', 'fwd', 'nonfinite_input', 'error', 1, NULL, 'input 1 f32 (2) "
                "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 2),"
                "(1, 2, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 1, 10, 11);");
        analyse("nonfinite-root-cause", 5, 8);
        ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 1);
        const report_finding *f = &findings.v[0];
        ck_assert_msg(strcmp(f->title, "the loss has been non-finite since step 2, before the "
                                       "focused steps") == 0,
                      "%d: %s", events, f->title);
        ck_assert_ptr_nonnull(strstr(f->advice, "ampprobe report --steps 2:2"));
        ck_assert_close(evidence(f, "nonfinite_since"), 2, 0, 0);
        release();
        // a focus from the first non-finite step on has its own root (or first step) to tell
        analyse("nonfinite-root-cause", 2, 8);
        ck_assert_ptr_null(strstr(findings.v[0].title, "since step"));
        release();
    }
}
END_TEST

// A learning rate too high: the loss and the gradient norm blow up step by step (in fp32) until
// a matmul's output is NaN. The finding leads with the divergence and its advice is the
// training's (no "keep it in fp32" in an fp32 run); the same NaN after a loss spike the training
// recovered from is the op's.
static void diverging_steps(double loss4) {
    layers();
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO AMP_STEPS VALUES (1, 0, 0, 900, 4.27, 1, 0.9, NULL, NULL, 0, 0, NULL),"
             "(1, 1, 1000, 1900, 9.35, 1, 7.3, NULL, NULL, 0, 0, NULL),"
             "(1, 2, 2000, 2900, 6498, 1, 6185, NULL, NULL, 0, 0, NULL),"
             "(1, 3, 3000, 3900, 1.8e6, 1, 9.9e5, NULL, NULL, 0, 0, NULL),"
             "(1, 4, 4000, 4900, %.17g, 1, 1.2e19, NULL, NULL, 0, 0, NULL),"
             "(1, 5, 5000, 5900, NULL, 0, NULL, NULL, NULL, 0, 0, NULL);",
             loss4);
    sql(buf);
    sql(EVENTS_VALUES "(1, 5, 0, 'matmul', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f32 (16, 96) min -3.4e36 max 3.6e36 amax 3.6e36; output f32 "
                      "(16, 16) no finite value (8192 nan, 0 +inf, 0 -inf); ', 0, 1, 5);");
}

START_TEST(nonfinite_after_a_divergence_blames_the_training) {
    diverging_steps(1.1e10);
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->op, "matmul");
    ck_assert_int_eq(f->first_step, 5);
    ck_assert_msg(begins(f->title, "training diverged before step 5 (the loss 4.27 -> 1.1e+10 by "
                                   "step 4); its first non-finite value: blocks.0.attn matmul"),
                  "%s", f->title);
    ck_assert_ptr_nonnull(strstr(f->advice, "Lower the learning rate"));
    ck_assert_ptr_nonnull(strstr(f->advice, "the gradient norm from 0.9 to 1.2e+19"));
    ck_assert_ptr_null(strstr(f->advice, "in fp32 ("));
    ck_assert_close(evidence(f, "diverged_step"), 2, 0, 0); // (6498: over 100x the first 4.27)
    ck_assert_close(evidence(f, "loss_before"), 1.1e10, 0, 1e-12);
    ck_assert_close(evidence(f, "grad_norm_first"), 0.9, 0, 1e-12);
    release();
    // a focus after the loss took off measures it from the run's first loss all the same, also
    // one on the broken step alone (the loss before it is the step before the focus), and with
    // its divergence where it was (step 2)
    for (int lo = 3; lo <= 5; lo += 2) {
        analyse("nonfinite-root-cause", lo, 5);
        ck_assert_msg(title_starts("training diverged before step 5 (the loss "
                                   "4.27 -> 1.1e+10 by step 4)"),
                      "%d: %s", lo, findings.v[0].title);
        ck_assert_close(evidence(&findings.v[0], "diverged_step"), 2, 0, 0);
        release();
    }
    // the first step skipped with an infinite gradient norm (a GradScaler's calibration): the
    // first finite norm is the mark
    sql("UPDATE AMP_STEPS SET grad_norm = 9e999 WHERE step = 0;");
    nonfinite_errors(1);
    ck_assert_msg(title_starts("training diverged"), "%s", findings.v[0].title);
    ck_assert_close(evidence(&findings.v[0], "grad_norm_first"), 7.3, 0, 1e-12);
    release();
    // the loss still up at step 4 but its gradient norm back near the first: no longer diverging
    sql("UPDATE AMP_STEPS SET grad_norm = 0.9 WHERE step = 0;"
        "UPDATE AMP_STEPS SET grad_norm = 2 WHERE step = 4;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("training diverged"), "%s", findings.v[0].title);
    release();
    // the loss back down at step 4: the spike is over, the NaN is the matmul's own
    wipe();
    diverging_steps(3.9);
    nonfinite_errors(1);
    f = &findings.v[0];
    ck_assert_msg(begins(f->title, "blocks.0.attn matmul produced non-finite values"), "%s",
                  f->title);
    // an fp32 output past its range: no advice to keep it in fp32 or train in bf16
    ck_assert_ptr_nonnull(strstr(f->advice, "fp32 would not hold it either"));
    ck_assert_ptr_null(strstr(f->advice, "train in bf16"));
    release();
}
END_TEST

// Each parameter's largest |w| as steps 0..n-1 began (kind 'weight'), two parameters of layer 1.
static void weight_rows(const double *amax, int n) {
    for (int i = 0; i < n; i++) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 "INSERT INTO AMP_TENSOR_STATS VALUES (1, %d, 1, 'fc.weight', 'weight', 'f32', "
                 "'f16', 4096, %.17g, %.17g, %.17g, 0, 0, 0, 0, 0, 0), (1, %d, 1, 'fc.bias', "
                 "'weight', 'f32', 'f16', 64, 0, 0.01, 0.01, 0, 0, 0, 0, 0, 0);",
                 i, -amax[i], amax[i], amax[i], i);
        sql(buf);
    }
}

// Steps 0-3 of pid 1 with these losses and gradient norms (NAN: NULL).
static void loss_steps(const double *loss, const double *norm, int n) {
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

// A learning rate too high with every loss finite (bf16, fp32): the loss and the gradient norm
// blow up together. An error while the loss stays up, a warning once it came back down; the
// weights' rows say which update blew them up; nothing for a spike whose gradient norm did not
// grow, nor for a divergence that ends in NaN (nonfinite-root-cause tells that one).
START_TEST(divergence_with_finite_losses_is_found) {
    layers();
    const double loss[] = {2.2, 300, 1e6, 80, 70, 60, 90, 80},
                 norm[] = {7, 100, 1e5, 50, 50, 50, 50, 50};
    const double w[] = {0.19, 100, 150, 150, 150, 150, 150, 150};
    loss_steps(loss, norm, 8);
    weight_rows(w, 8);
    divergences(1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "training diverged at step 1: the loss rose from 2.2 to 1e+06 "
                               "(step 2) and was 80 over steps 3-7 (the median)");
    ck_assert_int_eq(f->first_step, 1);
    ck_assert_int_eq(f->last_step, 7);
    ck_assert_ptr_nonnull(strstr(f->detail, "the update after step 0 multiplied the largest |w| "
                                            "of fc.weight by 526 (0.19 -> 100)"));
    ck_assert_ptr_nonnull(strstr(f->advice, "Lower the learning rate"));
    ck_assert_close(evidence(f, "diverged_step"), 1, 0, 0);
    ck_assert_close(evidence(f, "loss_end"), 80, 0, 0);
    ck_assert_close(evidence(f, "grad_norm_at"), 100, 0, 0);
    release();
    // every step from the divergence on skipped by a GradScaler: no update applied since (a
    // loss that jumped with weights written at once is the loss-scale collapse's), none
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, found_inf = 0, "
        "skipped = 0 WHERE step = 0;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 32768, found_inf = 1, "
        "skipped = 1 WHERE step > 0;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET scale_after = 65536, found_inf = 0, skipped = 0 WHERE step = 3;");
    divergences(1);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    // a focus after the divergence began still has it, from the focus's first step
    analyse("divergence", 2, 7);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].first_step, 2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "by step 1, before the focus"));
    release();
    // the loss back down, whatever one batch at the end says: a warning
    sql("UPDATE AMP_STEPS SET loss = 2.3 WHERE step >= 3; UPDATE AMP_STEPS SET loss = 9 WHERE "
        "step = 7;");
    divergences(1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(findings.v[0].title, "the loss blew up from 2.2 to 1e+06 (step 2; diverging "
                                          "from step 1) and came back down to 2.3 over steps 3-7 "
                                          "(the median)");
    release();
    // without gradient norms it takes the loss a hundredfold (step 1: 300 against 2.2)
    sql("UPDATE AMP_STEPS SET grad_norm = NULL;");
    diverges_at(1);
    // a run resumed from a checkpoint (steps from 60) measures a trained model: before three
    // steps are in its base only a loss a hundredfold counts, so a rise to 90 at its second
    // step waits for its third
    sql("UPDATE AMP_STEPS SET loss = 90, grad_norm = 100 WHERE step = 1;"
        "UPDATE AMP_STEPS SET grad_norm = CASE step WHEN 0 THEN 7 WHEN 1 THEN 100 WHEN 2 THEN "
        "1e5 ELSE 50 END;");
    analyse("divergence", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), 1, 0, 0);
    release();
    sql("UPDATE AMP_STEPS SET step = step + 60; UPDATE AMP_TENSOR_STATS SET step = step + 60;");
    diverges_at(62);
    sql("UPDATE AMP_STEPS SET step = step - 60, loss = CASE step WHEN 61 THEN 300 ELSE loss END;"
        "UPDATE AMP_TENSOR_STATS SET step = step - 60;");
    // a loss spike whose gradient norm stayed within tenfold: none
    sql("UPDATE AMP_STEPS SET grad_norm = 7 + step;");
    divergences(0);
    release();
    // ... but where a step has no norm (skipped: inf; left out by --stats-every) its loss a
    // hundredfold is one
    sql("UPDATE AMP_STEPS SET grad_norm = 9e999 WHERE step = 2;");
    diverges_at(2);
    // the loss twice the first at one step and the norm tenfold at another: noise, none
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 2.2 WHEN 1 THEN 5 ELSE 2.3 END, "
        "grad_norm = CASE step WHEN 3 THEN 100 ELSE 7 END;");
    divergences(0);
    release();
    // a spike of a few times a small loss that came back down (a converged model's batch
    // noise): none; the same that stays up: a divergence
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 1.2e-4 WHEN 1 THEN 8e-4 ELSE 1.5e-4 "
        "END, grad_norm = CASE step WHEN 1 THEN 100 ELSE 7 END;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 8e-4, grad_norm = 100 WHERE step >= 3;");
    divergences(1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_ERROR);
    release();
    // a fitted model resumed with batches of one: its first loss a lucky 3e-5, the next ones
    // many times that and a norm of twice the first now and then, all batch noise (measured from
    // the largest of the first five): none
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 3e-5 WHEN 1 THEN 4e-4 WHEN 2 THEN "
        "1e-4 WHEN 3 THEN 2e-4 WHEN 4 THEN 3e-4 WHEN 5 THEN 2e-3 ELSE 3e-4 END, grad_norm = CASE "
        "step WHEN 0 THEN 0.0013 WHEN 2 THEN 0.005 WHEN 5 THEN 0.0208 ELSE 0.01 END;");
    divergences(0);
    release();
    // ... and resumed at step 200, its four batches 3e-5, 4e-5, 3.5e-4 and 9e-4 over and over,
    // the hard ones' norms thirtyfold: each rise back down within three steps, none; a rise that
    // stays up is one
    sql("UPDATE AMP_STEPS SET step = step + 200, loss = CASE step % 4 WHEN 0 THEN 3.1e-5 WHEN 1 "
        "THEN 4e-5 WHEN 2 THEN 3.5e-4 ELSE 8.6e-4 END, grad_norm = CASE step % 4 WHEN 0 THEN "
        "0.0013 WHEN 1 THEN 0.0026 ELSE 0.044 END; UPDATE AMP_TENSOR_STATS SET step = step + 200;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 8.6e-4, grad_norm = 0.044 WHERE step >= 204;");
    diverges_at(203);
    // ... whatever the focus: one that ends before the rise has stayed up three steps has it
    analyse("divergence", 200, 204);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), 203, 0, 0);
    release();
    // a loss of 0 between (a fitted batch) is back down: the rise that stays up is the next one
    sql("UPDATE AMP_STEPS SET loss = 0 WHERE step = 204;");
    diverges_at(205);
    // ... or one that goes a thousandfold, back down at once
    sql("UPDATE AMP_STEPS SET loss = CASE step % 4 WHEN 0 THEN 3.1e-5 WHEN 1 THEN 4e-5 WHEN 2 "
        "THEN 3.5e-4 ELSE 8.6e-4 END WHERE step >= 204; UPDATE AMP_STEPS SET loss = 0.1, "
        "grad_norm = 1 WHERE step = 205;");
    diverges_at(205);
    sql("UPDATE AMP_STEPS SET step = step - 200; UPDATE AMP_TENSOR_STATS SET step = step - 200;");
    // a fresh run (from step 0) whose first loss was NaN is no resumed one: its spike counts
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 4 THEN 300 WHEN 2 THEN 2.3 ELSE 2.2 END, "
        "grad_norm = CASE step WHEN 4 THEN 100 ELSE 7 END;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, grad_norm = NULL WHERE step = 0;");
    diverges_at(4);
    // a forward that broke after it began (an overflow that the loss did not show) is
    // nonfinite-root-cause's
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 2.2 WHEN 1 THEN 9 WHEN 2 THEN 1e6 "
        "ELSE 80 END, grad_norm = CASE step WHEN 0 THEN 7 WHEN 1 THEN 100 ELSE 1e5 END;");
    sql(EVENTS_VALUES "(1, 3, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8 +inf, 0 -inf); ', 0, 1, 3);");
    divergences(0);
    release();
    // one a few steps later, the norm back down by then (an fp16 -inf the loss did not show): the
    // op's, and the divergence is this rule's all the same
    sql("UPDATE AMP_STEPS SET grad_norm = 50 WHERE step >= 3; UPDATE AMP_EVENTS SET step = 6, "
        "last_step = 6;");
    divergences(1);
    release();
    sql("DELETE FROM AMP_EVENTS;");
    // a divergence that ends in a NaN loss is nonfinite-root-cause's
    sql("UPDATE AMP_STEPS SET grad_norm = 1e5, loss = NULL, loss_finite = 0 WHERE step = 3;");
    divergences(0);
    release();
    // a healthy run has none
    wipe();
    healthy(20);
    divergences(0);
    release();
}
END_TEST

// Steps skipped after the training diverged: the loss-scale finding says so, and its advice is
// to fix the divergence before the scale; the same skips in a run that did not diverge keep the
// scale's advice.
START_TEST(skips_after_a_divergence_point_at_it) {
    layers();
    for (int i = 0; i < 10; i++) {
        const bool skip = i >= 6 && i % 2 == 0;
        const double loss = i < 5 ? 2.3 : 2.3 * (1 << (i - 3)), norm = i < 5 ? 0.2 : 5.0 * i;
        char buf[256];
        snprintf(buf, sizeof buf,
                 "INSERT INTO AMP_STEPS VALUES (1, %d, %d, %d, %.17g, 1, %s, 65536, %d, %d, %d, "
                 "NULL);",
                 i, i * 1000, i * 1000 + 900, loss, skip ? "9e999" : "0.2", skip ? 32768 : 65536,
                 skip, skip);
        sql(buf);
        if (!skip && i >= 5) {
            snprintf(buf, sizeof buf, "UPDATE AMP_STEPS SET grad_norm = %.17g WHERE step = %d;",
                     norm, i);
            sql(buf);
        }
    }
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_ptr_nonnull(strstr(f->title, "of the steps were skipped"));
    ck_assert_ptr_nonnull(strstr(f->detail, "after the training diverged at step 5"));
    ck_assert_msg(begins(f->advice, "Fix the divergence first"), "%s", f->advice);
    release();
    // the loss flat: the scale's own advice
    sql("UPDATE AMP_STEPS SET loss = 2.3, grad_norm = 0.2 WHERE NOT skipped;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = first_of("loss-scale");
    ck_assert_ptr_null(strstr(f->detail, "diverged"));
    ck_assert_msg(!begins(f->advice, "Fix the divergence"), "%s", f->advice);
    release();
}
END_TEST

// One update blows the weights up (Adam at lr 100) and the next forward overflows at once: no
// loss lived to show a divergence, the weights' rows do. Not told for weights that grew less than
// tenfold, nor for a NaN that came with the data.
START_TEST(nonfinite_after_a_weight_blowup_blames_the_update) {
    layers();
    const double loss[] = {2.2, NAN, NAN, NAN}, norm[] = {7, NAN, NAN, NAN};
    const double w[] = {0.19, 100, 100, 100};
    loss_steps(loss, norm, 4);
    weight_rows(w, 4);
    sql(EVENTS_VALUES "(1, 1, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 3, 3);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_msg(begins(f->title,
                         "the weights blew up before step 1 (fc.weight's largest |w| 0.19 at "
                         "step 0, 100 at step 1); its first non-finite value: fp16 "
                         "overflow in blocks.0.mlp linear"),
                  "%s", f->title);
    // the gradients it stepped with as they were (step 0's norm, the first): the learning rate,
    // or code that wrote the weights, not an update's length
    ck_assert_msg(begins(f->advice,
                         "Find what made the weights jump: the largest |w| of fc.weight grew "
                         "526-fold between steps 0 and 1 (0.19 -> 100) while the gradients were "
                         "ordinary (a norm of 7 at step 0, the first 7), so either the learning "
                         "rate is far too high"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "train in bf16"));
    ck_assert_close(evidence(f, "weight_amax_before"), 0.19, 0, 1e-12);
    release();
    // no norm at that step (--stats-every left it out): the update's length, nothing said of
    // the gradients
    sql("UPDATE AMP_STEPS SET grad_norm = NULL WHERE step = 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Lower the learning rate"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the update after step 0 multiplied the "
                                                       "largest |w| of fc.weight by 526"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "gradients were"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "stepped with"));
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 7 WHERE step = 0;");
    // the largest parameter grown less than tenfold, a smaller one of some size a hundredfold:
    // that one blew up (a transformer's embedding 3.6 -> 33, its projections 0.18 -> 30)
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 0, 0, 'wte', 'weight', 'f32', 'f16', 64, -3.6, "
        "3.6, 3.6, 0, 0, 0, 0, 0, 0), (1, 1, 0, 'wte', 'weight', 'f32', 'f16', 64, -33, 33, 33, "
        "0, 0, 0, 0, 0, 0);"
        "UPDATE AMP_TENSOR_STATS SET amax = 0.18 WHERE op = 'fc.weight' AND step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 30 WHERE op = 'fc.weight' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "of fc.weight grew 167-fold"));
    release();
    // of two that blew up, the larger now (a bias grown 500-fold to 5 beside it)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 5 WHERE op = 'fc.bias' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "of fc.weight grew 167-fold"));
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0.01 WHERE op = 'fc.bias';");
    // one that grew a thousandfold from next to nothing (a layer scale of 1e-6, under a tenth
    // of the largest |w| then): no blow-up
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0.18 WHERE op = 'fc.weight';"
        "UPDATE AMP_TENSOR_STATS SET amax = 3.6 WHERE op = 'wte';"
        "UPDATE AMP_TENSOR_STATS SET amax = 1e-6 WHERE op = 'fc.bias' AND step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 1e-3 WHERE op = 'fc.bias' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    wipe();
    layers();
    loss_steps(loss, norm, 4);
    weight_rows(w, 4);
    sql(EVENTS_VALUES "(1, 3, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 1, 3);");
    // weights recorded every third step (--stats-every 3): a thousandfold over three updates is
    // tenfold each, on average; 526-fold is not
    sql("DELETE FROM AMP_TENSOR_STATS WHERE step IN (1, 2);"
        "UPDATE AMP_TENSOR_STATS SET amax = 190 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the 3 updates between steps 0 and 3 "
                                                       "multiplied"));
    release();
    // the last of them stepped with gradients a hundred times the first's: said
    sql("UPDATE AMP_STEPS SET grad_norm = 700 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "It stepped with a gradient norm of 700 at "
                                                       "step 2, 100 times the first"));
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = NULL WHERE step = 2;");
    sql("UPDATE AMP_TENSOR_STATS SET amax = 100 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    // fiftyfold between steps 0 and 3 with two of the three steps skipped (the weights kept):
    // one update applied, tenfold and more
    sql("UPDATE AMP_TENSOR_STATS SET amax = 9.5 WHERE op = 'fc.weight' AND step = 3;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 32768, found_inf = 1, "
        "skipped = 1 WHERE step IN (1, 2);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the one update applied between steps 0 "
                                                       "and 3 multiplied"));
    release();
    // the NaN at step 1, which --stats-every left out: its weights are step 3's (the updates in
    // between skipped)
    sql("UPDATE AMP_EVENTS SET step = 1;");
    nonfinite_errors(1);
    ck_assert_msg(title_starts("the weights blew up before step 1 (fc.weight's "
                               "largest |w| 0.19 at step 0, 9.5 at step 3)"),
                  "%s", findings.v[0].title);
    release();
    sql("UPDATE AMP_EVENTS SET step = 3;");
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    // grown fivefold in one update: the op's own finding
    sql("INSERT INTO AMP_TENSOR_STATS SELECT pid, 2, layer_id, op, kind, dtype, target_dtype, "
        "numel, min, max, amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero FROM "
        "AMP_TENSOR_STATS WHERE step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 0.95 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "bf16"));
    release();
    // NaN in the data is the data's, whatever the weights did
    sql("UPDATE AMP_TENSOR_STATS SET amax = 100 WHERE op = 'fc.weight' AND step = 3;"
        "UPDATE AMP_EVENTS SET kind = 'nonfinite_input';");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
}
END_TEST

// Weights grown 3x a step (a learning rate too high, no update a blow-up) until a product
// overflows fp16: the op's finding, its advice led by the training's (the growth since the first
// step); nothing of it for weights grown 50-fold, nor for a NaN that came with the data.
START_TEST(nonfinite_after_weights_grew_blames_the_training_first) {
    layers();
    const double loss[] = {2.2, 2.3, 2.1, 2.4, 2.2, NAN}, norm[] = {7, 7, 7, 7, 7, NAN};
    const double w[] = {0.19, 0.57, 1.7, 5.1, 15.4, 46};
    loss_steps(loss, norm, 6);
    weight_rows(w, 6);
    sql(EVENTS_VALUES "(1, 5, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 1, 5);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_msg(begins(f->title, "fp16 overflow in blocks.0.mlp linear"), "%s", f->title);
    ck_assert_msg(begins(f->advice,
                         "Lower the learning rate or add weight decay: the weights grew 242-fold "
                         "over the run (the largest |w| 0.19 at step 0, 46 at step 5)"),
                  "%s", f->advice);
    ck_assert_ptr_nonnull(strstr(f->advice, "Meanwhile: Keep blocks.0.mlp linear in fp32"));
    ck_assert_close(evidence(f, "weight_amax_at"), 46, 0, 0);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 9.5 WHERE op = 'fc.weight' AND step = 5;");
    nonfinite_errors(1);
    ck_assert_msg(!begins(findings.v[0].advice, "Lower"), "%s", findings.v[0].advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 46 WHERE op = 'fc.weight' AND step = 5;"
        "UPDATE AMP_EVENTS SET kind = 'nonfinite_input';");
    nonfinite_errors(1);
    ck_assert_msg(!begins(findings.v[0].advice, "Lower"), "%s", findings.v[0].advice);
    release();
}
END_TEST

// The loss NaN with no producer traced, the weights NaN as the step began (Adam with eps=0 over
// a gradient of 0): the parameter is named, not the first op that read it; with the weights
// finite, the first output the statistics show non-finite.
START_TEST(nonfinite_weights_as_a_step_began_are_named) {
    layers();
    const double loss[] = {2.2, NAN, NAN}, norm[] = {7, NAN, NAN}, w[] = {0.19, 0.2, 0.2};
    loss_steps(loss, norm, 3);
    weight_rows(w, 3);
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = 4 WHERE op = 'fc.weight' AND step > 0;"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 1, 2, 'linear', 'activation', 'f32', 'f16', 64, "
        "NULL, NULL, NULL, 64, 0, 0, 0, 0, 0);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_ptr_nonnull(strstr(f->title, "; the weights were non-finite first: fc.weight as "
                                           "step 1 began"));
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(f->detail, "its row of the step before finite"));
    ck_assert_msg(begins(f->advice, "Look at what wrote fc.weight before step 1: the optimizer's "
                                    "update"),
                  "%s", f->advice);
    ck_assert_close(evidence(f, "weights_nonfinite_step"), 1, 0, 0);
    release();
    sql("INSERT INTO META (key, value, pid) VALUES ('updates', 'by hand', 1);");
    nonfinite_errors(1);
    ck_assert_msg(begins(findings.v[0].advice, "Look at what wrote fc.weight before step 1: the "
                                               "update that no optimizer.step() made"),
                  "%s", findings.v[0].advice);
    release();
    // the parameter stored in fp16 (model.half()) under an Adam whose eps fp16 rounds to 0: the
    // update divided by zero, said with the fix; not with an eps fp16 holds, nor fused, nor for
    // an f32 parameter
    sql("DELETE FROM META WHERE key = 'updates';"
        "INSERT INTO META (key, value, pid) VALUES ('optimizer', 'AdamW', 1), "
        "('optimizer.eps', '1.0000000000000000e-08', 1);");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16")); // (an f32 parameter)
    release();
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'f16' WHERE kind = 'weight';");
    nonfinite_errors(1);
    f = &findings.v[0];
    ck_assert_msg(strstr(f->detail, " fc.weight is stored in fp16 (the model itself cast to fp16, "
                                    "no fp32 master copy), and AdamW's eps=1e-08 is 0 in fp16"),
                  "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Keep fp32 master weights"), "%s", f->advice);
    ck_assert_ptr_nonnull(strstr(f->advice, "give AdamW an eps that fp16 holds"));
    ck_assert_close(evidence(f, "optimizer_eps"), 1e-8, 0, 0);
    ck_assert_close(evidence(f, "weights_nonfinite_step"), 1, 0, 0);
    release();
    sql("UPDATE META SET value = '0.0001' WHERE key = 'optimizer.eps';");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16"));
    ck_assert_msg(begins(findings.v[0].advice, "Look at what wrote fc.weight"), "%s",
                  findings.v[0].advice);
    release();
    sql("UPDATE META SET value = '2.9802322387695312e-08' WHERE key = 'optimizer.eps';"
        "INSERT INTO META (key, value, pid) VALUES ('optimizer.fused', '1', 1);");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16"));
    release();
    sql("DELETE FROM META WHERE key = 'optimizer.fused';"); // 2^-25: a tie, rounded to 0
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "stored in fp16"));
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = 0 WHERE kind = 'weight';");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "the statistics show head linear's output"));
    release();
}
END_TEST

// Without a GradScaler the optimizer steps on the NaN gradients of the step the data brought a
// NaN to: the steps after it are non-finite from the weights, with no producer of their own,
// counted with the data's finding; a loss that turns finite again ends that count.
START_TEST(nonfinite_steps_after_an_unskipped_step_are_counted) {
    layers();
    steps(8, 1);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 5;" EVENTS_VALUES
        "(1, 5, 0, 'linear', 'fwd', 'nonfinite_input', 'error', 64, 0, 'input 0 f32 (16, 32) "
        "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 5, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 0, NULL, 0, 1, 5),"
        "(1, 6, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 4096, 0, 'x', 0, 2, 7),"
        "(1, 6, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 0, NULL, 0, 2, 7);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail,
                                 "1 step affected; non-finite loss in 1, 0 skipped. Then 2 more "
                                 "steps with a non-finite loss and no producer of their own "
                                 "(steps 6-7): the optimizer stepped on the non-finite gradients "
                                 "of step 5"));
    ck_assert_double_eq(evidence(&findings.v[0], "nonfinite_losses_after"), 2);
    release();
    // parameters updated with no optimizer.step() seen (the PyTorch bridge's META updates)
    sql("INSERT INTO META (key, value, pid) VALUES ('updates', 'by hand', 1);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail,
                         "(steps 6-7): the parameters were updated with the non-finite gradients "
                         "of step 5 (no optimizer.step() was seen: an update written in the "
                         "program, or an optimizer not given to watch()), with no GradScaler"),
                  "%s", findings.v[0].detail);
    release();
    sql("DELETE FROM META WHERE key = 'updates';"
        "UPDATE AMP_STEPS SET loss = 3, loss_finite = 1 WHERE step = 7;");
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Then 1 more step with a non-finite loss "
                                                       "and no producer of its own (step 6)"));
    release();
}
END_TEST

// A program that records its steps and the scaler but no loss_nonfinite or step_skipped events
// (the record API allows it): the counts come from the step records, and steps a GradScaler
// skipped are not blamed on an optimizer that stepped.
START_TEST(nonfinite_counts_come_from_the_step_records) {
    layers();
    steps(6, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step >= 3;" EVENTS_VALUES
        "(1, 3, 0, 'linear', 'fwd', 'nonfinite_producer', 'error', 5, 65504, 'input 0 f16 (2, 2) "
        "min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 (0 nan, 5 +inf, 0 -inf); ', "
        "0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail, "1 step affected; non-finite loss in 1, 1 skipped."),
                  "%s", findings.v[0].detail);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "Then"));
    ck_assert_double_eq(evidence(&findings.v[0], "skipped_steps"), 1);
    release();
}
END_TEST

// A program killed between its GradScaler update and its step record (or one that records only
// the scaler): the row of that step has no loss (loss_finite NULL), which is no non-finite loss.
START_TEST(a_step_without_its_step_record_has_no_nonfinite_loss) {
    healthy(6);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL, start_ns = NULL, end_ns = NULL "
        "WHERE step = 5;"
        "UPDATE META SET value = '137' WHERE key = 'exit_status';");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_summary s;
    report_summarize(&model, &s);
    ck_assert_int_eq(s.nonfinite_losses, 0);
    ck_assert_double_eq_tol(s.final_loss, 3.96, 1e-12); // step 4's
    ck_assert_int_eq(s.last_step, 5);
    release();
    // nor is it one of the steps after a NaN input that the optimizer stepped on
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 4;" EVENTS_VALUES
        "(1, 4, 0, 'linear', 'fwd', 'nonfinite_input', 'error', 1, 0, 'input 0 f32 (16, 32) "
        "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 4);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail, "1 step affected; non-finite loss in 1, 0 skipped."),
                  "%s", findings.v[0].detail);
    ck_assert_msg(!strstr(findings.v[0].detail, "Then"), "%s", findings.v[0].detail);
    release();
}
END_TEST

// A program that numbers its steps by the tokens seen (10^12 apart): the steps a finding covers
// are counted from the recorded ones, not from every number between its first and last.
START_TEST(nonfinite_counts_sparse_step_numbers) {
    layers();
    sql("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 3) "
        "INSERT INTO AMP_STEPS SELECT 1, i * 1000000000000, i * 1000, i * 1000 + 900, "
        "CASE WHEN i >= 2 THEN NULL ELSE 4.0 END, i < 2, NULL, 65536, "
        "CASE WHEN i >= 2 THEN 32768 ELSE 65536 END, i >= 2, i >= 2, NULL FROM s;" EVENTS_VALUES
        "(1, 2000000000000, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, "
        "'input 0 f16 (2, 2) min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 "
        "(0 nan, 5 +inf, 0 -inf); ', 0, 1, 2000000000000),"
        "(1, 3000000000000, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, 'x', 1, 1, "
        "3000000000000);");
    nonfinite_errors(1);
    ck_assert_msg(
        strstr(findings.v[0].detail, "2 steps affected; non-finite loss in 2, 2 skipped."), "%s",
        findings.v[0].detail);
    release();
}
END_TEST

// Gradient accumulation: two forwards a step, each overflowing in the same op from step 3 on (10
// single rows for steps 3-7, then an aggregate row of 8-9): 7 steps are affected, not 14.
START_TEST(nonfinite_steps_affected_count_each_step_once) {
    layers();
    steps(10, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step >= 3;"
        "WITH RECURSIVE s(i) AS (SELECT 6 UNION ALL SELECT i + 1 FROM s WHERE i < 15) "
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) "
        "SELECT 1, i / 2, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, "
        "'input 0 f16 (2, 2) min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 "
        "(0 nan, 5 +inf, 0 -inf); ', 0, 1, i / 2 FROM s;" EVENTS_VALUES
        "(1, 8, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 20, 65504, NULL, 1, 4, 9);");
    nonfinite_errors(1);
    ck_assert_msg(
        strstr(findings.v[0].detail, "7 steps affected; non-finite loss in 7, 7 skipped."), "%s",
        findings.v[0].detail);
    ck_assert_double_eq(evidence(&findings.v[0], "steps_affected"), 7);
    release();
}
END_TEST

// One producer event (an AMP_EVENTS row's values) over a healthy run: the one error, its title
// and a part of its advice.
static void explained(const char *event, const char *title, const char *advice) {
    healthy(8);
    char buf[1024];
    snprintf(buf, sizeof buf, EVENTS_VALUES "%s;", event);
    sql(buf);
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, advice));
    release();
}

// A weight grown beyond fp16's range: autocast's cast makes it inf, the GEMM's output NaN.
START_TEST(nonfinite_input_beyond_f16_range_is_explained) {
    explained("(1, 3, 2, 'linear', 'fwd', 'nonfinite_producer', 'error', 32768, 0, 'input 0 f16 "
              "(256, 128) min -2.04 max 2.09 amax 2.09; input 1 f32 (128, 128) min -88575.2 max "
              "88623.5 amax 88623.5; output f16 (256, 128) min nan max nan amax nan (32768 nan, "
              "0 +inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head linear at step 3: an input beyond fp16's range (amax "
              "88623.5) turned inf in autocast's cast, the output NaN",
              "weight decay");
}
END_TEST

// A residual stream added to in place (h += b(m)) past fp16's range.
START_TEST(nonfinite_sum_overflow_is_explained) {
    explained("(1, 3, 2, 'add', 'fwd', 'nonfinite_producer', 'error', 1024, 0, 'input 0 f16 "
              "(16, 64) min 40000 max 40000 amax 40000; input 1 f16 (16, 64) min 40000 max 40000 "
              "amax 40000; output f16 (16, 64) min nan max nan amax nan (0 nan, 1024 +inf, 0 "
              "-inf); ', 0, 1, 3)",
              "fp16 overflow in head add at step 3: finite inputs (amax 40000) summed past 65504",
              "pre-LN");
}
END_TEST

// A hand-written loss over logits masked by item assignment, a label on a masked class (or
// label smoothing, which takes in the masked class whatever the labels): the advice for each.
START_TEST(nonfinite_loss_of_a_masked_logit_is_explained) {
    const char *advice[] = {"ignore_index", "label_smoothing > 0"};
    for (int i = 0; i < 2; i++) {
        wipe();
        explained("(1, 3, 2, 'cross_entropy', 'fwd', 'nonfinite_producer', 'error', 1, 0, "
                  "'input 0 f32 (16, 10) min -0.157 max 0.163 amax 0.163 (0 nan, 0 +inf, 16 "
                  "-inf); output f32 () min nan max nan amax nan (0 nan, 1 +inf, 0 -inf); ', 0, "
                  "1, 3)",
                  "cross_entropy of a masked (-inf) logit in head at step 3 gives +inf: a target "
                  "falls on a class masked out, or label smoothing takes in every class",
                  advice[i]);
    }
}
END_TEST

// A batch of padding alone: cross_entropy's mean over no target is 0 / 0.
START_TEST(nonfinite_loss_with_every_target_ignored_is_explained) {
    explained("(1, 3, NULL, 'nll_loss', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'input 0 f32 "
              "(32, 10) min -5.32564 max -0.896413 amax 5.32564; output f32 () no finite value "
              "(1 nan, 0 +inf, 0 -inf); ', 0, 1, 3)",
              "nll_loss with no target to average over gives NaN (0 / 0) in the top level at step "
              "3: every target of the batch is ignore_index (-100), or the batch is empty",
              "(y != -100).any()");
}
END_TEST

// Per-batch standardisation over a batch of one sample: the unbiased std is 0 / 0.
START_TEST(nonfinite_std_of_a_single_value_is_explained) {
    explained("(1, 3, 2, 'std', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f32 (1, 64) "
              "min -1.25098 max 1.85254 amax 1.85254; output f32 (64,) no finite value (64 nan, "
              "0 +inf, 0 -inf); ', 0, 1, 3)",
              "std of a single value gives NaN in head at step 3: the unbiased estimate divides "
              "by n - 1 = 0",
              "correction=0");
    // an inf out of it is no such thing (values grown past f32's range)
    wipe();
    explained("(1, 3, 2, 'var', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f32 (16, 64) "
              "min -2e+20 max 3e+20 amax 3e+20; output f32 (64,) min 1 max 3e+38 amax 3e+38 (0 "
              "nan, 3 +inf, 0 -inf); ', 0, 1, 3)",
              "head var produced non-finite values from finite inputs at step 3",
              "f32's range");
}
END_TEST

// A hand-written softmax under autocast: exp runs in fp32, and a logit above 88.7 is inf there.
START_TEST(nonfinite_exp_past_f32_range_is_explained) {
    explained("(1, 3, 2, 'exp', 'fwd', 'nonfinite_producer', 'error', 12, 0, 'input 0 f32 (16, 10) "
              "min -3.5 max 120.25 amax 120.25; output f32 (16, 10) min 0.03 max 3e+38 amax 3e+38 "
              "(0 nan, 12 +inf, 0 -inf); ', 0, 1, 3)",
              "f32 overflow in head exp at step 3: finite inputs (amax 120.25) gave +inf, past "
              "f32's 3.4e38",
              "subtract the row max before the exp");
    // in fp16 it is an fp16 overflow, with fp32 among the fixes
    wipe();
    explained("(1, 3, 2, 'exp', 'fwd', 'nonfinite_producer', 'error', 12, 0, 'input 0 f16 (16, 10) "
              "min -3.5 max 12.25 amax 12.25; output f16 (16, 10) min 0.03 max 65000 amax 65000 "
              "(0 nan, 12 +inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head exp at step 3: finite inputs (amax 12.25) gave +inf",
              "compute it in fp32");
}
END_TEST

// Counts near INT64_MAX (a database may hold anything) are held at 2^52, not overflowed in the
// loading or in the rules' sums (UBSan in the sanitizer build stops at a signed overflow).
START_TEST(huge_counts_do_not_overflow) {
    healthy(4);
    sql("UPDATE AMP_TENSOR_STATS SET numel = 9223372036854775000, n_nan = 9223372036854775000, "
        "n_posinf = 9223372036854775000, n_overflow = 9223372036854775000, "
        "n_underflow = 9223372036854775000, n_zero = 9223372036854775000;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    for (size_t i = 0; i < model.n_stats; i++) {
        ck_assert(model.stats[i].numel == (int64_t)1 << 52);
        ck_assert(model.stats[i].n_nonfinite == (int64_t)1 << 52);
    }
    release();
}
END_TEST

// A producer of its own that records steps with a NaN loss and no event at all: an error all the
// same, from the steps (the verdict read "Healthy ... stayed finite" over 12 NaN losses).
START_TEST(nonfinite_loss_of_the_steps_alone_is_an_error) {
    healthy(6);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("nonfinite-root-cause", AMP_SEVERITY_ERROR), 1);
    ck_assert_str_eq(findings.v[0].title,
                     "the loss became NaN at step 2 with no op traced as the producer");
    ck_assert_close(evidence(&findings.v[0], "steps_affected"), 4, 0, 0);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training broke"), "verdict: %s", verdict);
    release();
    // its statistics show outputs turning NaN from step 2 on, without events: the first one
    // recorded at the first such step is named (the report advised recording statistics)
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = numel, amax = NULL WHERE kind = 'activation' AND "
        "step >= 2 AND layer_id >= 2; UPDATE AMP_TENSOR_STATS SET n_nan = 1 WHERE kind = "
        "'activation' AND step = 4 AND layer_id = 0;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].title,
                     "the loss became NaN at step 2 with no op traced as the producer; the "
                     "statistics show head linear's output non-finite first (step 2)");
    ck_assert_str_eq(findings.v[0].layer, "head");
    ck_assert_str_eq(findings.v[0].op, "linear");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Look at head linear at step 2"));
    release();
}
END_TEST

// A producer of its own that records steps alone (amp-record.h's example) is healthy as far as
// its records go, and the verdict says what went unchecked (it claimed the forward stayed within
// the autocast dtype's range and no gradient underflowed, with no statistics to show it).
START_TEST(healthy_without_statistics_says_what_was_not_checked) {
    steps(10, 65536);
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy as far as the records go: no error or warning in ") &&
                      strstr(verdict, ", the loss finite. No tensor statistics were recorded, so "
                                      "neither the forward's headroom to the autocast dtype's "
                                      "range nor gradient underflow was checked: record tensor "
                                      "statistics"),
                  "%s", verdict);
    ck_assert_ptr_null(strstr(verdict, "stayed finite"));
    release();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel, "
        "amax) VALUES (1, 3, 0, NULL, 'weight', 'f32', 'f16', 64, 0.5);"); // (weights alone)
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "No activation or gradient statistics were recorded, so neither"),
                  "%s", verdict);
    release();
    healthy_stats(10); // with the statistics, the whole claim
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy: "), "%s", verdict);
    release();
}
END_TEST

// A padding row masked whole: the attention's softmax over it is NaN.
START_TEST(nonfinite_softmax_of_a_row_masked_whole_is_explained) {
    explained("(1, 3, 2, 'softmax', 'fwd', 'nonfinite_producer', 'error', 32, 0, 'input 0 f16 "
              "(8, 4, 32, 32) min -6.2 max 6.1 amax 6.2 (0 nan, 0 +inf, 4000 -inf); output f16 "
              "(8, 4, 32, 32) min 0 max 1 amax 1 (32 nan, 0 +inf, 0 -inf); ', 0, 1, 3)",
              "softmax over a row with every position masked gives NaN in head at step 3",
              "all padding");
}
END_TEST

// x ** 2 of values near 300 in fp16: an overflow, not a pow of zero.
START_TEST(nonfinite_pow_overflow_is_not_a_pow_of_zero) {
    explained("(1, 3, 2, 'pow', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f16 (64) "
              "min 200 max 300 amax 300; output f16 (64) min 40000 max 65504 amax 65504 (0 nan, 12 "
              "+inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head pow at step 3: finite inputs (amax 300) gave +inf",
              "square a normalised value");
}
END_TEST

// A linear whose output overflowed to -inf alone, which a ReLU then zeroed: the title names the
// -inf, and the detail says that the loss stayed finite (it read "non-finite loss in 0").
START_TEST(nonfinite_overflow_to_minus_inf_under_a_finite_loss) {
    healthy(8);
    sql(EVENTS_VALUES "(1, 3, 2, 'linear', 'fwd', 'nonfinite_producer', 'error', 32, 0, 'input 0 "
                      "f16 (32, 64) min -3.6 max 100 amax 100; input 1 f16 (10, 64) min -3000 max "
                      "0.23 amax 3000; output f16 (32, 10) min -17.5 max 15.1 amax 17.5 (0 nan, 0 "
                      "+inf, 32 -inf); ', 0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title,
                     "fp16 overflow in head linear at step 3: finite inputs (amax 3000) gave -inf");
    ck_assert_msg(
        strstr(findings.v[0].detail, "1 step affected; the loss stayed finite, 0 skipped."), "%s",
        findings.v[0].detail);
    release();
}
END_TEST

// A layer id that AMP_LAYERS does not declare (a producer of its own that skipped
// amp_record_layer, a forked child using its parent's ids) is named as such, not as the top level.
START_TEST(nonfinite_in_an_undeclared_layer_says_so) {
    explained("(1, 3, 42, 'pow', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f16 (64) "
              "min 200 max 300 amax 300; output f16 (64) min 40000 max 65504 amax 65504 (0 nan, 12 "
              "+inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in layer 42 (not declared) pow at step 3: finite inputs (amax 300) "
              "gave +inf",
              "square a normalised value");
}
END_TEST

// A division by values near zero but none zero: an overflow.
START_TEST(nonfinite_div_by_small_values_is_an_overflow) {
    explained("(1, 3, 2, 'div', 'fwd', 'nonfinite_producer', 'error', 5, 0, 'input 0 f16 (64) min "
              "-3 max 3 amax 3; input 1 f16 (64) min 1e-05 max 0.001 amax 0.001; output f16 (64) "
              "min -65504 max 65504 amax 65504 (0 nan, 3 +inf, 2 -inf); ', 0, 1, 3)",
              "fp16 overflow in head div at step 3: finite inputs (amax 3) gave +-inf",
              "clamp_min(eps)");
}
END_TEST

// A division by a range that takes in 0: of zero.
START_TEST(nonfinite_div_by_a_range_with_zero_is_of_zero) {
    explained("(1, 3, 2, 'div', 'fwd', 'nonfinite_producer', 'error', 5, 0, 'input 0 f16 (64) min "
              "-3 max 3 amax 3; input 1 f16 (64) min 0 max 0.001 amax 0.001; output f16 (64) min "
              "-65504 max 65504 amax 65504 (0 nan, 3 +inf, 2 -inf); ', 0, 1, 3)",
              "div of zero in head at step 3 gives +-inf", "eps to the denominator");
}
END_TEST

// The PyTorch bridge's op tracer sees autocast's cast as an op: an f32 input batch beyond fp16's
// range turned inf there.
START_TEST(nonfinite_cast_beyond_f16_range_is_explained) {
    explained("(1, 3, 2, 'to_copy', 'fwd', 'nonfinite_producer', 'error', 1400, 0, 'input 0 f32 "
              "(16, 128) min -431244 max 412873 amax 431244; output f16 (16, 128) min -65504 max "
              "64480 amax 65504 (0 nan, 700 +inf, 700 -inf); ', 0, 1, 3)",
              "fp16 overflow in head at step 3: autocast's cast to fp16 of a value beyond its "
              "range (amax 431244) gave +-inf",
              "Bring that input back under");
}
END_TEST

// A NaN batch whose first op is autocast's cast of it (libampcore's "to" in the layer): said so.
START_TEST(nonfinite_input_first_seen_by_a_cast_is_explained) {
    explained("(1, 5, 1, 'to', 'fwd', 'nonfinite_input', 'error', 1, 0, 'input 0 f32 (64, 32) "
              "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); output bf16 (64, 32) min 0 max 1 "
              "amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5)",
              "NaN/inf in the input data at step 5, first seen by blocks.0.mlp (autocast's cast "
              "of its input)",
              "Sanitize the data");
}
END_TEST

// A sqrt of a variance that rounding drove below zero: not "of zero", and the input's min said.
START_TEST(nonfinite_sqrt_of_a_negative_value_is_explained) {
    explained("(1, 4, 1, 'sqrt', 'fwd', 'nonfinite_producer', 'error', 3, 0, 'input 0 f16 (64) min "
              "-0.000122 max 2.5 amax 2.5; output f16 (64) min 0 max 1.58 amax 1.58 (3 nan, 0 "
              "+inf, 0 -inf); ', 0, 1, 4)",
              "sqrt of a negative value in blocks.0.mlp at step 4 gives NaN (its input's min "
              "-0.000122)",
              "E[x^2] - E[x]^2");
}
END_TEST

// The PyTorch bridge on a model sharded over several processes (or whose re-run did not break
// again): the forward searched per module, the module named, and the code around it unless its
// inputs were other modules' finite outputs.
START_TEST(nonfinite_module_names_the_module_and_the_one_around_it) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 3, 0, 'attention', 'fwd', 'nonfinite_module', 'error', 512, 65504, 'output f16 (512,)"
        " min -65504 max 65504 amax 65504 (0 nan, 300 +inf, 212 -inf); not traced op by op: a "
        "model sharded over several processes cannot run its forward again on one', 0, 1, 3),"
        "(1, 3, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 3),"
        "(1, 5, 2, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 6, 3, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 6),"
        "(1, 7, 4, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 7);"
        "INSERT INTO AMP_LAYERS VALUES (1, 3, NULL, 'layers.0'), (1, 4, NULL, 'net.1.0.fc');");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].rule, "nonfinite-root-cause");
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.attn");
    ck_assert_int_eq(findings.v[0].first_step, 3);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "fp16 +-inf first in the output of "
                                                      "blocks.0.attn attention at step 3"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "in blocks.0's code just before it"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "fp16 overflow"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "not traced op by op: a model sharded"));
    ck_assert_double_eq(evidence(&findings.v[0], "output_amax"), 65504);
    ck_assert(isnan(evidence(&findings.v[0], "input_amax")));
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "NaN first in the output of head linear"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "in the top level code"));
    ck_assert_ptr_null(strstr(findings.v[1].advice, "fp16 overflow"));
    // a numbered layer's parent is a container (ModuleList, Sequential): the code around is above
    ck_assert_ptr_nonnull(strstr(findings.v[2].title, "layers.0 linear at step 6 (traced per "
                                                      "module: made there or in the top level"));
    ck_assert_ptr_nonnull(strstr(findings.v[3].title, "or in net.1.0's code"));
    // no loss-scale finding for a step whose forward broke: nonfinite-root-cause explains it
    ck_assert_uint_eq(count("loss-scale", AMP_SEVERITY_WARNING), 0);
    release();
    // its inputs were all outputs of modules that returned finite values: made in it
    sql("UPDATE AMP_EVENTS SET detail = detail || 'made in it: its inputs were finite (the output "
        "of net.0); not traced op by op: its forward, run again on the step''s inputs, did not "
        "break' WHERE step = 6;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[2].title, "NaN first in the output of layers.0 linear at step 6 "
                                          "(traced per module: made in it, its inputs (other "
                                          "modules' outputs) finite)");
    ck_assert_ptr_nonnull(strstr(findings.v[2].detail, "(the output of net.0)"));
    release();
}
END_TEST

// The GradScaler's overflows folded into an aggregate row from step 2 to 8; the focus (--steps
// 5:9) leaves its first step out: its scale is that of an overflow in the focus, not "no
// GradScaler" (exploding gradients at loss scale 1).
START_TEST(nonfinite_grad_overflow_begun_before_the_focus_is_not_an_error) {
    healthy(10);
    sql(EVENTS_VALUES
        "(1, 2, 2, 'linear', 'bwd', 'nonfinite_producer', 'warning', 99, 65056, 'incoming "
        "gradient f16 (16, 64) min -4080 max 416 amax 4080; gradient f16 (64, 32) min -64320 max "
        "65056 amax 65056 (0 nan, 20 +inf, 13 -inf); ', 1, 4, 8);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 "
        "WHERE step IN (2, 4, 6, 8);");
    analyse("nonfinite-root-cause", 5, 9);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(f, "loss_scale"), 65536, 0, 0);
    release();
}
END_TEST

START_TEST(nonfinite_benign_grad_overflow_is_not_an_error) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 2, 2, 'linear', 'bwd', 'nonfinite_producer', 'warning', 33, 65056, 'incoming "
        "gradient f16 (16, 64) min -4080 max 416 amax 4080; gradient f16 (64, 32) min -64320 max "
        "65056 amax 65056 (0 nan, 20 +inf, 13 -inf); ', 0, 1, 2),"
        "(1, 2, NULL, NULL, 'bwd', 'grad_overflow', 'info', NULL, 65536, 'scale overflow', 0, 1, "
        "2),"
        "(1, 2, NULL, NULL, 'optim', 'step_skipped', 'warning', 1, 65536, NULL, 0, 1, 2);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 WHERE step = 2;"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_close(evidence(f, "loss_scale"), 65536, 0, 0);
    release();

    // the same overflow at scale 4 is gradients exploding, not the scaler probing
    sql("UPDATE AMP_STEPS SET scale_before = 4 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "exploding gradients"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "at loss scale 4"));
    release();
    // and with no GradScaler at all, no loss scale is made up (it read "at loss scale 1 ... The
    // loss scale is already low")
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, skipped = NULL, found_inf "
        "= NULL;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "exploding gradients: the backward of head linear went "
                                          "non-finite at step 2, with no loss scaling");
    ck_assert_ptr_null(strstr(findings.v[0].advice, "loss scale"));
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 4, scale_after = 32768, skipped = 1, found_inf = 1 "
        "WHERE step = 2; UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768, skipped "
        "= 0, found_inf = 0 WHERE step > 2; UPDATE AMP_STEPS SET scale_before = 65536, "
        "scale_after = 65536, skipped = 0, found_inf = 0 WHERE step < 2;");

    // NaN and no inf: no overflow but a derivative of 0 * inf or 0 / 0, at any scale
    sql("UPDATE AMP_EVENTS SET detail = 'in SqrtBackward0 (div); input 0 f32 (64) min 0 max 2 "
        "amax 2; gradient f32 (64) min -1 max 1 amax 1 (3 nan, 0 +inf, 0 -inf); ' "
        "WHERE kind = 'nonfinite_producer';"
        "UPDATE AMP_STEPS SET scale_before = 65536 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradient in the backward of head linear at step 2 "
                                          "(forward finite): div of 0 / 0 or 0 * inf");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.sqrt(x + eps)"));
    ck_assert_close(evidence(&findings.v[0], "gradient_nan"), 3, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "gradient_posinf"), 0, 0, 0);
    release();

    // a GEMM's NaN can be an overflow inside it (+inf + -inf): at this scale, the scaler's
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, '(div)', '(mm)') "
        "WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradient overflow in the backward"));
    release();
}
END_TEST

// sqrt's backward at 0 (a norm written as sqrt of a sum of squares, a padding sample of zeros): an
// inf gradient from finite values at every scale, a division by 0, not the loss scale's overflow;
// the collapse it drives says to fix that backward, not to clip exploding gradients.
START_TEST(nonfinite_inf_gradient_at_a_pole_is_an_error) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 3, 2, 'sqrt', 'bwd', 'nonfinite_producer', 'warning', 1, 19.6, 'in SqrtBackward0 "
        "(div); input 0 f32 (16,) min 40.96 max 40.96 amax 40.96; input 1 f32 (16,) min 0 max "
        "3.36593 amax 3.36593; gradient f32 (16,) min 12.169 max 19.613 amax 19.613 (0 nan, 1 "
        "+inf, 0 -inf); ', 1, 5, 7);"
        "UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 1);
    ck_assert_str_eq(findings.v[0].rule, "nonfinite-root-cause");
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head sqrt at step 3 "
                                          "(forward finite): a division by 0");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.linalg.vector_norm"));
    ck_assert_int_eq(findings.v[0].last_step, 7);
    const report_finding *f = first_of("loss-scale");
    ck_assert_msg(strstr(f->title, "collapse"), "%s", f->title);
    ck_assert_msg(begins(f->advice, "Fix the non-finite backward first"), "%s", f->advice);
    release();

    // a divisor without a 0 (its range away from 0, or across it with no value at 0 said): the
    // gradients outgrew the scale, the scaler's business; the collapse is theirs to explain
    const char *divisors[] = {"min 0.5 max 3.36593", "min -1 max 3.36593"};
    for (int i = 0; i < 2; i++) {
        char q[512];
        snprintf(q, sizeof q,
                 "UPDATE AMP_EVENTS SET detail = replace(detail, 'min 0 max 3.36593', '%s');",
                 divisors[i]);
        sql(q);
        analyse(NULL, INT64_MIN, INT64_MAX);
        ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 0);
        ck_assert_msg(strstr(first_of("nonfinite-root-cause")->title, "gradient overflow in the "
                                                                       "backward"),
                      "%s", first_of("nonfinite-root-cause")->title);
        ck_assert_ptr_nonnull(strstr(first_of("loss-scale")->advice, "they explode"));
        release();
        snprintf(q, sizeof q,
                 "UPDATE AMP_EVENTS SET detail = replace(detail, '%s', 'min 0 max 3.36593');",
                 divisors[i]);
        sql(q);
    }

    // acos's backward at 1 (the angle between two equal vectors): the rsqrt of 1 - x^2 = 0
    sql("UPDATE AMP_EVENTS SET op = 'acos', detail = 'in AcosBackward0 (rsqrt); input 0 f32 (16,) "
        "min 0 max 2.38419e-07 amax 2.38419e-07; gradient f32 (16,) min 2048 max 2896.31 amax "
        "2896.31 (0 nan, 14 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head acos at step 3 "
                                          "(forward finite): rsqrt of 0");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "x.clamp(-1 + eps, 1 - eps) before acos"));
    release();
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'min 0 max', 'min 1e-30 max') "
        "WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    release();

    // libampcore's pow(x, 0.5) at x = 0: its node's incoming gradient, then its forward input
    sql("UPDATE AMP_EVENTS SET op = 'pow', detail = 'incoming gradient f32 (64) min 1 max 2 amax "
        "2; forward input 0 f32 (64) min 0 max 3 amax 3; gradient f32 (64) min 0.2 max 0.5 amax "
        "0.5 (0 nan, 2 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head pow at step 3 "
                                          "(forward finite): 0 raised to a power below 1");
    release();
    // its incoming gradient at 0 is no pole: the base is not 0
    sql("UPDATE AMP_EVENTS SET detail = 'incoming gradient f32 (64) min 0 max 2 amax 2; forward "
        "input 0 f32 (64) min 0.1 max 3 amax 3; gradient f32 (64) min 0.2 max 0.5 amax 0.5 (0 "
        "nan, 2 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    release();
}
END_TEST

// A producer recorded without a phase (an outside framework through libamprecord: AMP_PHASE_NONE)
// is judged by its step: a non-finite loss there (the step record's, or a loss_nonfinite event's)
// makes it the forward's break, an error, never a healthy run with a benign backward overflow.
START_TEST(nonfinite_producer_without_a_phase_is_judged_by_its_step) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 3, 0, 'mul', NULL, 'nonfinite_producer', 'error', 7890, 65440, "
        " 'input 0 f16 (16, 2, 16, 16) min -6.26953 max 6.26172 amax 6.26953; output f16 (16, 2, "
        "16, 16) min -65120 max 65440 amax 65440 (0 nan, 3913 +inf, 3977 -inf); ', 0, 1, 3);"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step = 3;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_msg(strstr(f->title, "fp16 overflow in blocks.0.attn mul at step 3"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "Recorded without a phase"), "%s", f->detail);
    char verdict[2048];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training went on past an error: fp16 overflow"), "%s", verdict);
    release();
    // no step record of its loss, a loss_nonfinite event: the same
    sql("UPDATE AMP_STEPS SET loss_finite = NULL WHERE step = 3;" EVENTS_VALUES
        "(1, 3, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "fp16 overflow"));
    release();
    // a finite loss at its step: the GradScaler's overflow of a backward, a note
    sql("DELETE FROM AMP_EVENTS WHERE kind = 'loss_nonfinite';"
        "UPDATE AMP_STEPS SET loss = 3.97, loss_finite = 1 WHERE step = 3;");
    nonfinite_errors(0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradient overflow in the backward"));
    release();
}
END_TEST

// torch.where(p > 0, p * p.log(), 0): a finite forward, a NaN gradient at any scale.
START_TEST(nonfinite_gradient_through_a_left_out_value_is_an_error) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 3, 2, 'mul', 'bwd', 'nonfinite_producer', 'warning', 48, 0.5, 'its forward made "
        "-inf (log) that where left out: the backward still goes through them; in MulBackward0 "
        "(mul); input 0 f32 (16, 8) min 0 max 0.01 amax 0.01; input 1 f32 (16, 8) min -inf max "
        "-0.1 amax 2.3 (0 nan, 0 +inf, 48 -inf); gradient f32 (16, 8) min -0.02 max 0.5 amax 0.5 "
        "(48 nan, 0 +inf, 0 -inf); ', 0, 1, 3),"
        "(1, 3, NULL, NULL, 'bwd', 'grad_overflow', 'info', NULL, 65536, 'scale overflow', 0, 1, "
        "3);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 WHERE step = 3;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradient through a value the forward left out: "
                                          "the backward of head mul at step 3");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.where(p > 0, p, 1).log()"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "MulBackward0"));
    release();

    // without a GradScaler (bf16) the optimizer stepped on the NaN gradients: the next step's
    // NaN loss comes from the parameters, which that finding explains
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, skipped = 0, "
        "found_inf = 0;"
        "DELETE FROM AMP_EVENTS WHERE kind = 'grad_overflow';"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 4;" EVENTS_VALUES
        "(1, 4, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 64, NULL, 'x', 0, 1, 4),"
        "(1, 4, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 4);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "NaN gradient through a value"));
    release();
    // with one, the step was skipped: that NaN loss has no traced producer
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536;");
    nonfinite_errors(2);
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "with no op traced as the producer"));
    release();
    // seen a step late (no --check-grads): per module, and what would trace it
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_EVENTS SET detail = 'incoming gradient f16 (64) min -1 max 1 amax 1; "
        "gradient f32 (8, 64) min -2 max 2 amax 2 (40 nan, 0 +inf, 0 -inf); traced per module "
        "when the step was recorded, after the optimizer had stepped on these gradients; "
        "check_grads (ampprobe run --check-grads) traces it op by op at its step' "
        "WHERE kind = 'nonfinite_producer' AND phase = 'bwd';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradients at step 3, and no GradScaler to skip the "
                                          "step: the optimizer stepped on them (traced per "
                                          "module: made by the backward of head mul)");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "ampprobe run --check-grads"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "(2-9% more step time on an H200)"));
    release();
    // no one module takes that module's output as an input: the code that reads it is named
    sql("UPDATE AMP_EVENTS SET detail = 'gradient f32 (8, 64) min nan max nan amax nan (40 nan, "
        "0 +inf, 0 -inf); the gradient of head''s output, made by the code that reads it (not "
        "one module''s input); traced per module when the step was recorded, after the "
        "optimizer had stepped on these gradients; check_grads (ampprobe run --check-grads) "
        "traces it op by op at its step' WHERE kind = 'nonfinite_producer' AND phase = 'bwd';");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "(traced per module: made by the backward "
                                                      "of the code that reads head mul's "
                                                      "output)"));
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// loss-scale

START_TEST(scale_sawtooth_is_a_warning) {
    layers();
    // growth x4 after every clean step, /8 on every third: a sawtooth
    sql("WITH RECURSIVE s(i, sc) AS (SELECT 0, 65536.0 UNION ALL SELECT i + 1, "
        "CASE WHEN (i + 1) % 3 = 2 THEN sc * 4 / 8 ELSE sc * 4 END FROM s WHERE i < 14) "
        "INSERT INTO AMP_STEPS SELECT 1, i, 0, 0, 3.0, 1, 0.9, sc, "
        "CASE WHEN i % 3 = 2 THEN sc / 8 ELSE sc * 4 END, i % 3 = 2, i % 3 = 2, NULL FROM s;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("loss-scale", AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("loss-scale");
    ck_assert_ptr_nonnull(strstr(f->title, "sawtooth"));
    ck_assert_close(evidence(f, "observed_growth_interval"), 1, 0, 0);
    ck_assert_close(evidence(f, "skipped_steps"), 5, 0, 0);
    ck_assert_ptr_nonnull(strstr(f->advice, "growth_interval=2000"));
    release();
}
END_TEST

START_TEST(scale_collapse_and_stuck_low_are_warnings) {
    layers();
    steps(12, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "collapse"));
    ck_assert_int_eq(findings.v[0].first_step, 3);
    ck_assert_close(evidence(&findings.v[0], "consecutive_backoffs"), 9, 0, 0);
    // no non-finite forward recorded: the gradients explode
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Clip"));
    ck_assert_ptr_null(strstr(findings.v[0].detail, "jumped")); // the loss did not
    release();
    // a focus on its last step leaves one backoff of it, to a scale below 1: one, one step
    sql("DELETE FROM AMP_STEPS;");
    steps(20, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse("loss-scale", 19, 19);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale collapse: 1 backoff from 1 to 0.5 (step 19)");
    release();
    sql("DELETE FROM AMP_STEPS;");
    steps(12, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    // the loss jumped where the collapse began: said, with how much
    sql("UPDATE AMP_STEPS SET loss = loss * 600 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].detail, "The loss jumped 597x at step 3, from 3.99 (the "
                                               "steps before) to 2382: "),
                  "%s", findings.v[0].detail);
    ck_assert_close(evidence(&findings.v[0], "loss_jump"), 3.97 * 600 / 3.99, 1e-9, 0);
    release();
    // halved past the smallest float the scale is 0, and stays there: the steps at 0 belong to
    // the collapse
    sql("UPDATE AMP_STEPS SET scale_after = 0 WHERE step = 8;"
        "UPDATE AMP_STEPS SET scale_before = 0, scale_after = 0 WHERE step > 8;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale collapse: 6 consecutive backoffs from 65536 "
                                          "to 0 (steps 3-8), then 3 more overflowing steps at 0 "
                                          "(to step 11)");
    ck_assert_int_eq(findings.v[0].last_step, 11);
    ck_assert_close(evidence(&findings.v[0], "steps_at_zero"), 3, 0, 0);
    release();

    sql("DELETE FROM AMP_STEPS;");
    steps(12, 1);
    sql("INSERT INTO AMP_TENSOR_STATS SELECT 1, step, 2, 'to', 'activation_grad', 'f32', 'f16', "
        "16384, -4e-11, 4e-11, 4e-11, 0, 0, 0, 0, 16384, 0 FROM AMP_STEPS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "stuck low"));
    ck_assert_close(evidence(&findings.v[0], "recommended_init_scale"), 16777216, 0, 0);
    release();
}
END_TEST

// Skips now and then after the calibration: a warning whose advice follows the cause (the
// scale, outlier steps, a forward that went non-finite).
START_TEST(scale_skip_rate_advice_follows_the_cause) {
    healthy(20);
    sql("UPDATE AMP_STEPS SET scale_after = scale_before / 2, skipped = 1, found_inf = 1 WHERE "
        "step IN (5, 9, 13);"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 5;"
        "UPDATE AMP_STEPS SET scale_after = 16384 WHERE step = 9;"
        "UPDATE AMP_STEPS SET scale_before = 16384, scale_after = 16384 WHERE step > 9;"
        "UPDATE AMP_STEPS SET scale_after = 8192 WHERE step = 13;"
        "UPDATE AMP_STEPS SET scale_before = 8192, scale_after = 8192 WHERE step > 13;"
        "UPDATE AMP_TENSOR_STATS SET amax = amax / 8 WHERE kind != 'activation';");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "15% of the steps were skipped"));
    // the kept steps' gradients (amax 835 at 8192) fit 262144, above every scale that
    // overflowed: not "start lower"
    ck_assert_msg(strstr(findings.v[0].advice, "the overflows come from outlier batches"), "%s",
                  findings.v[0].advice);
    // the scales the skipped steps ran at (not 8192, where the last skip left it)
    ck_assert_msg(strstr(findings.v[0].detail, "overflowing at scales between 16384 and 65536;"),
                  "%s", findings.v[0].detail);
    release();
    // after a calibration down from 2^24: the advice weighs the scales of the skips after it,
    // and the finding's steps are theirs
    sql("UPDATE AMP_STEPS SET scale_before = 16777216, scale_after = 65536, skipped = 1, "
        "found_inf = 1 WHERE step = 0;"
        "UPDATE AMP_STEPS SET scale_before = 65536 WHERE step = 1;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "the overflows come from outlier batches"), "%s",
                  findings.v[0].advice);
    ck_assert_int_eq(findings.v[0].first_step, 5);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, skipped = 0, "
        "found_inf = 0 WHERE step = 0;");
    sql("UPDATE AMP_TENSOR_STATS SET amax = amax * 64, max = max * 64, min = min * 64;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "Start lower and grow slower: init_scale="), "%s",
                  findings.v[0].advice);
    release();
    sql(EVENTS_VALUES "(1, 9, 0, 'matmul', 'fwd', 'nonfinite_producer', 'error', 8, 0, NULL, 0, "
                      "1, 9);");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Fix the non-finite forward pass first"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "The forward pass was non-finite"));
    release();
}
END_TEST

// The loss-scale finding of a GradScaler in a bf16 run; NULL: none.
static const report_finding *bf16_scaler_finding(void) {
    for (size_t i = 0; i < findings.n; i++)
        if (begins(findings.v[i].title, "a GradScaler in a bf16 run")) return &findings.v[i];
    return NULL;
}

// Updates of bf16 weights compared before and after each step (weight_update rows: numel the
// values with a non-zero gradient, n_zero those left unchanged), three parameters of very
// different sizes, of which fc.weight loses lost/4096 of its updates every step.
static void lost_updates(int n, const char *dtype, int lost) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d), "
             "t(l, op, kind, numel, zero) AS (VALUES "
             "(1, 'fc.weight', 'weight', 1000000, 0), (2, 'head.weight', 'weight', 10000, 0), "
             "(2, 'head.bias', 'weight', 10, 0), (1, 'fc.weight', 'weight_update', 4096, %d), "
             "(2, 'head.weight', 'weight_update', 4096, 0), "
             "(2, 'head.bias', 'weight_update', 10, 10)) "
             "INSERT INTO AMP_TENSOR_STATS SELECT 1, i, l, op, kind, '%s', NULL, numel, NULL, "
             "NULL, NULL, NULL, NULL, NULL, NULL, NULL, zero FROM s, t;",
             n - 1, lost, dtype);
    sql(buf);
}

// 16-bit weights whose updates round away: a warning weighed by the parameters' sizes (the
// large fc.weight's share, not the tiny bias's 100%), a note below a quarter, nothing below 5%;
// the advice keeps fp32 master weights (with a GradScaler for fp16).
START_TEST(lost_updates_of_16_bit_weights_are_named) {
    healthy(12);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("lost-updates", AMP_SEVERITY_INFO), 0);
    release();
    lost_updates(12, "bf16", 3900);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("lost-updates", AMP_SEVERITY_INFO), 1);
    const report_finding *f = first_of("lost-updates");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->title, "optimizer updates rounded away in bf16 weights: 94% of their "
                               "values kept their value through an update (fc.weight 95%)");
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "fc.weight");
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_close(evidence(f, "values_compared"), 12 * (4096 + 4096 + 10), 0, 0);
    ck_assert_close(evidence(f, "values_unchanged"), 12 * (3900 + 10), 0, 0);
    ck_assert_close(evidence(f, "lost_share"), (3900.0 / 4096 * 1e6 + 10) / (1e6 + 1e4 + 10),
                    1e-12, 0);
    ck_assert_msg(strstr(f->detail, "about 2^-9 of its magnitude in bf16") &&
                      strstr(f->detail, "Most values lost: fc.weight 95% (1 M values), head.bias "
                                        "100% (10 values), head.weight 0% (10 k values)."),
                  "%s", f->detail);
    ck_assert_msg(strstr(f->advice, "torch.autocast(\"cuda\", dtype=torch.bfloat16)") &&
                      !strstr(f->advice, "GradScaler"),
                  "%s", f->advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_zero = 400 WHERE kind = 'weight_update' AND op = "
        "'fc.weight'; UPDATE AMP_TENSOR_STATS SET dtype = 'f16' WHERE kind LIKE 'weight%';");
    analyse("lost-updates", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_msg(strstr(findings.v[0].detail, "about 2^-12 of its magnitude in fp16") &&
                      strstr(findings.v[0].advice, "torch.amp.GradScaler(\"cuda\")"),
                  "%s | %s", findings.v[0].detail, findings.v[0].advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_zero = 40 WHERE kind = 'weight_update' AND op = "
        "'fc.weight';");
    analyse("lost-updates", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// A GradScaler in a bf16 run: an info that it protects nothing, told from the gradients' target
// dtype, else the autocast ops' output dtype, else META; none in fp16 or without a GradScaler.
START_TEST(a_gradscaler_in_bf16_is_an_info) {
    healthy(12);
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding()); // fp16: what it is for
    release();
    sql("UPDATE AMP_TENSOR_STATS SET target_dtype = 'bf16', dtype = replace(dtype, 'f16', 'bf16');"
        "UPDATE AMP_OPS SET out_dtype = replace(out_dtype, 'f16', 'bf16');");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = bf16_scaler_finding();
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(f->rule, "loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->title, "a GradScaler in a bf16 run: loss scaling protects nothing here "
                               "(12 updates, scale 65536 at the end)");
    ck_assert_ptr_nonnull(strstr(f->advice, "enabled=False"));
    ck_assert_ptr_null(strstr(f->detail, "skipped"));
    ck_assert_close(evidence(f, "scale_updates"), 12, 0, 0);
    release();
    // an inf gradient skipped one step: said, and pointed at its cause
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_after = 32768 WHERE step = 5;"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 5;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = bf16_scaler_finding();
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(strstr(f->detail, "Its 1 skipped step had gradients that were inf/NaN at any "
                                    "scale"),
                  "%s", f->detail);
    release();
    // no gradient statistics: the autocast ops say bf16; without them META does
    sql("DELETE FROM AMP_TENSOR_STATS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(bf16_scaler_finding());
    release();
    sql("DELETE FROM AMP_OPS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding());
    release();
    sql("INSERT INTO META (key, value, pid) VALUES ('autocast_dtype', 'bf16', 1);");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(bf16_scaler_finding());
    release();
    // bf16 without a GradScaler: nothing to say
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding());
    release();
}
END_TEST

// Gradients clipped before they were unscaled: every applied step's norm is max_norm over the
// scale (the scale grown once between), while the loss moves; not so for a norm that moves, a
// loss that does not, a scale of 1 (clipped unscaled), or too few steps.
START_TEST(scale_clipped_while_scaled_is_a_warning) {
    layers();
    steps(10, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 131072, scale_after = 131072 WHERE step >= 6;"
        "UPDATE AMP_STEPS SET scale_after = 131072 WHERE step = 5;"
        "UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("loss-scale");
    ck_assert_str_eq(f->title, "gradients clipped while still scaled: every step's gradient norm "
                               "was 1 divided by the loss scale (10 steps)");
    ck_assert_msg(strstr(f->detail, "the gradient norm times the loss scale (65536 to 131072) "
                                    "stayed at 1,"),
                  "%s", f->detail);
    ck_assert_ptr_nonnull(strstr(f->advice, "scaler.unscale_(optimizer); "
                                            "torch.nn.utils.clip_grad_norm_(params, 1);"));
    ck_assert_close(evidence(f, "max_norm"), 1, 1e-12, 0);
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_int_eq(f->last_step, 9);
    release();
    // a first step read before the clip (a bridge attached late): the others still tell
    sql("UPDATE AMP_STEPS SET grad_norm = 0.9 WHERE step = 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = first_of("loss-scale");
    ck_assert_msg(begins(f->title, "gradients clipped while still scaled") &&
                      strstr(f->title, "(9 steps)"),
                  "%s", f->title);
    ck_assert_int_eq(f->first_step, 1);
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before;"
        "UPDATE AMP_STEPS SET grad_norm = grad_norm * (1 + step * 1e-4);"); // a norm that moves
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before, loss = 3.5;"); // nothing learns
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 4.0 - step * 0.01;");
    analyse("loss-scale", 0, 3); // four steps: too few to tell
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 1, scale_after = 1, grad_norm = 1;"); // unscaled
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(!begins(findings.v[i].title, "gradients clipped"), "%s",
                      findings.v[i].title);
    release();
}
END_TEST

START_TEST(scale_calibration_and_stable_scale_are_not_warnings) {
    healthy(20);
    // the usual start: three skipped steps while the scale backs off to where gradients fit
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << step), "
        "scale_after = 32768.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 3;"
        "UPDATE AMP_STEPS SET scale_before = 8192, scale_after = 8192 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    release();
    // skips in the middle of a run are no calibration when a focus (--steps) begins at them
    sql("UPDATE AMP_STEPS SET scale_after = scale_before / 2, skipped = 1, found_inf = 1 WHERE "
        "step BETWEEN 10 AND 13;");
    analyse("loss-scale", 10, 13);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "calibration_skips"), 0, 0, 0);
    release();

    // init_scale 2^24: six skips down to 2^18, where the gradients fit, then training: the
    // calibration, not a collapse, however many backoffs; the info says what they cost
    sql("UPDATE AMP_STEPS SET scale_before = 16777216.0 / (1 << step), "
        "scale_after = 8388608.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 6;"
        "UPDATE AMP_STEPS SET scale_before = 262144, scale_after = 262144, skipped = 0, "
        "found_inf = 0 WHERE step >= 6;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "The scale started too high: 6 steps were thrown "
                                               "away bringing it down to 262144"),
                  "%s", findings.v[0].advice);
    release();
    // ... also from a focus inside it: its skips are still the calibration's
    analyse("loss-scale", 2, 10);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_close(evidence(&findings.v[0], "calibration_skips"), 4, 0, 0);
    release();
    // never applied: still at 2^30 after 20 skips from 2^50, it started too high
    sql("UPDATE AMP_STEPS SET scale_before = 1125899906842624.0 / (1 << step), "
        "scale_after = 562949953421312.0 / (1 << step), skipped = 1, found_inf = 1;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(title_starts("loss scale set too high, still coming down: 20 "
                               "consecutive backoffs"),
                  "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "no step was applied whose gradients"));
    release();
    // ... also from a focus after its start (its steps before had losses, but none applied)
    analyse("loss-scale", 3, 19);
    ck_assert_msg(title_starts("loss scale set too high"), "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "at step 3)"));
    release();
    // the calibration (6 skips from 2^24), training at 2^18 with skips at steps 10 and 14, then
    // a collapse over the last 4 steps to below 1: the collapse found is the last one (not the
    // calibration, the longer run of backoffs), and the skips' scales are those after it
    sql("UPDATE AMP_STEPS SET scale_before = 16777216.0 / (1 << step), "
        "scale_after = 8388608.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 6;"
        "UPDATE AMP_STEPS SET scale_before = 262144, scale_after = 262144, skipped = 0, "
        "found_inf = 0 WHERE step >= 6;"
        "UPDATE AMP_STEPS SET scale_after = 131072, skipped = 1, found_inf = 1 WHERE step = 10;"
        "UPDATE AMP_STEPS SET scale_before = 131072, scale_after = 131072 WHERE step > 10;"
        "UPDATE AMP_STEPS SET scale_after = 65536, skipped = 1, found_inf = 1 WHERE step = 14;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536 WHERE step > 14;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].detail, "overflowing at scales between 131072 and 262144;"),
                  "%s", findings.v[0].detail);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 4.0 / (1 << (step - 16)), "
        "scale_after = 2.0 / (1 << (step - 16)), skipped = 1, found_inf = 1 WHERE step >= 16;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strcmp(findings.v[0].title, "loss scale collapse: 4 consecutive backoffs from 4 "
                                              "to 0.25 (steps 16-19)") == 0,
                  "%s", findings.v[0].title);
    release();
    // a scale grown to 2^30 over applied steps, then five backoffs to 2^25: a collapse, not an
    // init_scale "set too high" (steps were applied before it)
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 * (1 << step), scale_after = 131072.0 * "
        "(1 << step), skipped = 0, found_inf = 0 WHERE step < 14;"
        "UPDATE AMP_STEPS SET scale_before = 1073741824.0 / (1 << (step - 14)), scale_after = "
        "536870912.0 / (1 << (step - 14)), skipped = 1, found_inf = 1 WHERE step >= 14;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(title_starts("loss scale collapse: 6 consecutive backoffs from "
                               "1.07374182e+09"),
                  "%s", findings.v[0].title);
    release();
}
END_TEST

// A run shorter than its GradScaler's growth interval could not grow the scale: a low scale is
// an info there (META scaler.growth_interval), a warning when the scale had the time.
START_TEST(scale_low_in_a_run_shorter_than_the_growth_interval_is_an_info) {
    layers();
    steps(12, 1);
    sql("INSERT INTO AMP_TENSOR_STATS SELECT 1, step, 2, 'to', 'activation_grad', 'f32', 'f16', "
        "16384, -4e-3, 4e-3, 4e-3, 0, 0, 0, 0, 0, 0 FROM AMP_STEPS;"
        "INSERT INTO META (key, value, pid) VALUES ('scaler.growth_interval', '2000', 1),"
        "('scaler.growth_interval', '10', 0);"); // (another process's, no steps: not pid 1's)
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale low at 1 for all 12 steps: it grows only "
                                          "after growth_interval=2000 clean steps");
    release();
    sql("UPDATE META SET value = '10' WHERE key = 'scaler.growth_interval' AND pid = 1;");
    analyse("loss-scale", 0, 5); // (the run's 12 updates had the time, not the focus's 6)
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    release();
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "stuck low"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "(largest unscaled gradient 0.004; x"));
    release();
    // statistics of one step in 4 (--stats-every 4): the number is of those, and a focus on
    // steps none of which was sampled says so (not "record gradient statistics")
    sql("INSERT INTO META (key, value, pid) VALUES ('stats_every', '4', 1);"
        "DELETE FROM AMP_TENSOR_STATS WHERE step % 4 != 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "(largest unscaled gradient 0.004 of the steps "
                                               "sampled, one in 4; x"),
                  "%s", findings.v[0].advice);
    release();
    analyse("loss-scale", 5, 7);
    ck_assert_msg(strstr(findings.v[0].advice, "no focused step had its gradients sampled "
                                               "(--stats-every): widen --steps"),
                  "%s", findings.v[0].advice);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// overflow-headroom

// A layer growing into overflow: 40000 at step 2, then outputs with +inf (their finite values
// up to 65376) at steps 3-5. The headroom told is of the outputs that had not overflowed yet,
// with their step (not 65376 from step 5 beside "step 2"); the overflowed ones are the
// root-cause rule's.
START_TEST(overflow_headroom_tells_the_outputs_before_the_overflow) {
    healthy(6);
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 2, 1, 'linear', 'activation', 'f16', 'f16', 4096, "
        "-40000, 40000, 40000, 0, 0, 0, 0, 0, 0), (1, 3, 1, 'linear', 'activation', 'f16', "
        "'f16', 4096, -60000, 60000, 60000, 0, 3, 0, 0, 0, 0), (1, 5, 1, 'linear', 'activation', "
        "'f16', 'f16', 4096, -65376, 65376, 65376, 0, 9, 0, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->title, "blocks.0.mlp linear output reaches amax 40000 at step 2, 0.71 "
                               "bits below the f16 max 65504");
    ck_assert_int_eq(f->first_step, 2);
    ck_assert_close(evidence(f, "amax_step"), 2, 0, 0);
    ck_assert_msg(strstr(f->advice, "keep this op in fp32 (autocast disabled around it"), "%s",
                  f->advice);
    release();
    // in a run without autocast its fp16 is the parameters': no autocast to disable
    sql("INSERT INTO META (key, value, pid) VALUES ('compute_dtype', 'f16', 1);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "keep this op in fp32 (no autocast here: "), "%s",
                  findings.v[0].advice);
    release();
    sql("DELETE FROM META WHERE key = 'compute_dtype';");
    // -inf out of a linear is an overflow too (no mask comes out of a GEMM)
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f16', 'f16', "
        "4096, -65000, 60000, 65000, 0, 0, 2, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(title_starts("blocks.0.mlp linear output reaches amax 40000 at "
                               "step 2"),
                  "%s", findings.v[0].title);
    release();
}
END_TEST

START_TEST(overflow_headroom_near_f16_max_is_a_warning) {
    healthy(6);
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f16', 'f16', 4096, "
        "-40000, 40000, 40000, 0, 0, 0, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "linear");
    ck_assert_int_eq(f->first_step, 4);
    ck_assert_close(evidence(f, "headroom_bits"), log2(65504.0 / 40000.0), 1e-9, 0);
    ck_assert_ptr_nonnull(strstr(f->title, "bits below the f16 max"));
    release();
    // near bf16's max, which is fp32's, no precision helps: no fp32 or bf16 offered
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16', min = -2.5e38, "
        "max = 2.5e38, amax = 2.5e38 WHERE amax = 40000;");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "fp32 has bf16's range: no precision change helps"),
                  "%s", findings.v[0].advice);
    ck_assert_msg(!strstr(findings.v[0].advice, "train in bf16"), "%s", findings.v[0].advice);
    release();
}
END_TEST

START_TEST(overflow_headroom_ignores_fp32_ops_and_overflowed_outputs) {
    healthy(6);
    // an fp32 op (the scaled loss, a softmax) is not at risk at 65504; an output that already
    // holds +inf belongs to nonfinite-root-cause
    sql("INSERT INTO AMP_TENSOR_STATS VALUES "
        "(1, 4, 0, 'softmax', 'activation', 'f32', 'f16', 4096, 0, 1e6, 1e6, 0, 0, 0, 10, 0, 0),"
        "(1, 5, 0, 'mul', 'activation', 'f16', 'f16', 8192, -65120, 65440, 65440, 0, 3913, 3977, "
        "0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// An fp32 run (no autocast anywhere): outputs beyond fp16's max are notes of what fp16 would
// make of them, said to be beyond the max (not "within 2x" of it), and the healthy verdict does
// not claim that no op came near a range the run never had.
START_TEST(overflow_headroom_of_an_fp32_run_is_a_note_beyond_the_max) {
    healthy(6);
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';"
        "UPDATE AMP_TENSOR_STATS SET dtype = 'f32';"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f32', 'f16', "
        "4096, -8e6, 8e6, 8e6, 0, 0, 0, 120, 0, 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("overflow-headroom", AMP_SEVERITY_INFO), 1);
    const report_finding *f = NULL;
    for (size_t i = 0; i < findings.n; i++)
        if (strcmp(findings.v[i].rule, "overflow-headroom") == 0) f = &findings.v[i];
    ck_assert_msg(strstr(f->title, "(fp32, amax 8e+06 at step 4) would overflow f16"), "%s",
                  f->title);
    ck_assert_msg(strstr(f->detail, "1 of 1 sampled outputs within 2x of the max or beyond it") &&
                      strstr(f->detail, "120 fp32 values beyond it would round to inf"),
                  "%s", f->detail);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy") &&
                      strstr(verdict, "the run is fp32, with no "
                                      "autocast dtype to come near") &&
                      !strstr(verdict, "no op came near"),
                  "verdict: %s", verdict);
    release();
    // at risk only by a step whose output also held NaN: the amax told is that step's (not 3,
    // the clean steps', which would overflow nothing)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 3, max = 3, min = -3, n_overflow = 0 WHERE layer_id "
        "= 1 AND op = 'linear';"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 5, 1, 'linear', 'activation', 'f32', 'f16', "
        "4096, -1e6, 1e6, 1e6, 4, 0, 0, 100, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].title, "(fp32, amax 1e+06) would overflow f16"), "%s",
                  findings.v[0].title);
    ck_assert(isnan(evidence(&findings.v[0], "amax_step")));
    release();
}
END_TEST

// A hand-written RMSNorm's x * x overflowed fp16 at steps 3-5 and rsqrt(inf) = 0 left it out (the
// PyTorch bridge's overflow_absorbed, found when the norm's output turned to zeros): a warning
// with the fp32 mean square as the fix; the verdict says the run went on with a problem. The
// same inf left out of a GEMM's output by a clamp: generic advice. Without the event: healthy.
START_TEST(overflow_absorbed_inside_a_layer_is_a_warning) {
    healthy(8);
    sql(EVENTS_VALUES "(1, 3, 1, 'mul', 'fwd', 'overflow_absorbed', 'warning', 6, NULL, 'input 0 "
                      "f16 (16, 64) min -706 max 876.5 amax 876.5; input 1 f16 (16, 64) min -706 "
                      "max 876.5 amax 876.5; output f16 (16, 64) min 0 max 6.5e4 amax 6.5e4 (0 "
                      "nan, 6 +inf, 0 -inf); left out by rsqrt', 1, 3, 5);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("recorded-events", AMP_SEVERITY_INFO), 0);
    const report_finding *f = first_of("overflow-headroom");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->title, "fp16 overflow hidden in blocks.0.mlp at step 3: mul made +inf from "
                               "finite inputs (amax 876.5), and rsqrt turned it into 0");
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_int_eq(f->last_step, 5);
    ck_assert_msg(strstr(f->detail, "made 6 non-finite values in blocks.0.mlp mul (past fp16's "
                                    "max 65504)") &&
                      strstr(f->detail, "share of exact zeros jumped") &&
                      strstr(f->detail, "Seen again up to step 5."),
                  "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Take the mean square in fp32: x.float().pow(2)"), "%s",
                  f->advice);
    ck_assert_close(evidence(f, "input_amax"), 876.5, 0, 0);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training ran, with problems: fp16 overflow hidden in "
                                  "blocks.0.mlp at step 3"),
                  "verdict: %s", verdict);
    release();
    // a GEMM's -inf that a clamp cut back, on a step the GradScaler skipped anyway
    sql("UPDATE AMP_EVENTS SET op = 'addmm', detail = replace(replace(detail, 'rsqrt', "
        "'clamp'), '0 nan, 6 +inf, 0 -inf', '0 nan, 0 +inf, 6 -inf'), last_step = 3;"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1 WHERE step = 3;");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_str_eq(f->title, "fp16 overflow hidden in blocks.0.mlp at step 3: addmm made -inf "
                               "from finite inputs (amax 876.5), and clamp clipped it to a finite "
                               "value");
    ck_assert_msg(!strstr(f->detail, "zeros jumped") && !strstr(f->detail, "Seen again"), "%s",
                  f->detail);
    ck_assert_msg(begins(f->advice, "Run addmm in fp32: cast its inputs with .float()"), "%s",
                  f->advice);
    release();
    sql("DELETE FROM AMP_EVENTS;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("overflow-headroom", AMP_SEVERITY_INFO), 0);
    release();
}
END_TEST

// The recorders' sources (the PyTorch bridge's Python, libampcore's C) in one malloc'd text,
// each with adjacent string literals joined ("a" "b", across lines too, as C and Python join
// them), so that a phrase written over two literals is found whole.
static char *recorders_text(void) {
    static const char *const dirs[][2] = {{"/probe/python/ampprobe", ".py"},
                                          {"/libampcore/src", ".c"}};
    size_t len = 0;
    char *all = calloc(1, 1);
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s%s", AMP_SOURCE_DIR, dirs[k][0]);
        DIR *d = opendir(dir);
        ck_assert_msg(d != NULL, "cannot open %s", dir);
        for (struct dirent *e; (e = readdir(d));) {
            size_t name = strlen(e->d_name), ext = strlen(dirs[k][1]);
            if (name <= ext || strcmp(e->d_name + name - ext, dirs[k][1]) != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            size_t n;
            char *text = test_read_file(path, &n);
            all = realloc(all, len + n + 2);
            for (size_t i = 0; i < n; i++) {
                if (text[i] == '"') { // the end of one literal, spaces, the next one's start
                    size_t j = i + 1;
                    while (j < n && (text[j] == ' ' || text[j] == '\n' || text[j] == '\\'))
                        j++;
                    if (j > i + 1 && j < n && text[j] == '"') {
                        i = j;
                        continue;
                    }
                }
                all[len++] = text[i];
            }
            all[len++] = '\n';
            all[len] = '\0';
            free(text);
        }
        closedir(d);
    }
    return all;
}

// The phrases the rules read in event details (report.h's REPORT_DETAIL_*) are the recorders'
// words: rewording one there without the rules would change a diagnosis silently.
START_TEST(the_rules_read_phrases_the_recorders_write) {
    const char *const phrases[] = {REPORT_DETAIL_AMAX,          REPORT_DETAIL_NO_FINITE,
                                   REPORT_DETAIL_MADE_IN_LAYER, REPORT_DETAIL_READER,
                                   REPORT_DETAIL_LEFT_OUT,      REPORT_DETAIL_LATE,
                                   REPORT_DETAIL_ABSORBED_BY,   REPORT_DETAIL_UNSCALED};
    char *text = recorders_text();
    for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++)
        ck_assert_msg(strstr(text, phrases[i]) != NULL,
                      "no recorder writes \"%s\", which the report reads in event details",
                      phrases[i]);
    ck_assert(strstr(text, "no recorder writes this phrase, which the test itself names") == NULL);
    free(text);
}
END_TEST

// sgd.step() called directly beside scaler.step(adam) (the bridge's step_outside_scaler, at
// steps 0 and 1: one finding, at the first): an error with scaler.step() for each optimizer as
// the fix; after scaler.unscale_() the gradients are right but no skip protects them: a warning.
START_TEST(an_optimizer_stepped_outside_the_scaler_is_named) {
    healthy(6);
    sql(EVENTS_VALUES "(1, 0, NULL, 'SGD', 'optim', 'step_outside_scaler', 'error', 2, 65536, "
                      "'SGD.step() called directly: it stepped on gradients still multiplied by "
                      "the loss scale 65536', 0, 1, 0),"
                      "(1, 1, NULL, 'SGD', 'optim', 'step_outside_scaler', 'error', 2, 65536, "
                      "'SGD.step() called directly', 0, 1, 1);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("recorded-events", AMP_SEVERITY_INFO), 0);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->rule, "loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "SGD stepped outside the GradScaler from step 0: optimizer.step() "
                               "on gradients still multiplied by the loss scale 65536");
    ck_assert_msg(strstr(f->detail, "gradients 65536 times too large"), "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Step every optimizer through the scaler: "
                                    "scaler.step(optimizer) for each one"),
                  "%s", f->advice);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training broke: SGD stepped outside the GradScaler"),
                  "verdict: %s", verdict);
    release();
    sql("DELETE FROM AMP_EVENTS WHERE step = 1; UPDATE AMP_EVENTS SET severity = 'warning', "
        "detail = 'SGD.step() called directly after scaler.unscale_(): its gradients are "
        "unscaled, but a step whose gradients hold inf/NaN is applied, not skipped';");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_msg(strstr(f->title, "after scaler.unscale_(), so a step whose gradients overflow "
                                   "is applied"),
                  "%s", f->title);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// grad-underflow

// 30% of blocks.0.mlp's gradient values of the kinds given (an SQL list) underflow.
static void mlp_underflows(const char *kinds) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "UPDATE AMP_TENSOR_STATS SET n_underflow = numel * 3 / 10 WHERE layer_id = 1 AND "
             "kind IN (%s);",
             kinds);
    sql(buf);
}

// Every gradient's amax, min and max times `by` (an SQL factor: "* 4096", "/ 65536"), and so
// the largest unscaled gradient the loss scale is recommended from.
static void grads_times(const char *by) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "UPDATE AMP_TENSOR_STATS SET amax = amax %s, min = min %s, max = max %s "
             "WHERE kind IN ('activation_grad', 'weight_grad');",
             by, by, by);
    sql(buf);
}

START_TEST(grad_underflow_names_the_layer_and_a_scale) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(f->detail, "blocks.0.mlp"));
    ck_assert_close(evidence(f, "layers_affected"), 1, 0, 0);
    ck_assert_close(evidence(f, "worst_share"), (32768 * 3 / 10 + 4096 * 3 / 10) / (32768.0 + 4096),
                    1e-9, 0);
    ck_assert_close(evidence(f, "worst_weight_share"), (4096 * 3 / 10) / 4096.0, 1e-9, 0);
    ck_assert_msg(strstr(f->detail, "lose 30% at most (blocks.0.mlp)."), "%s", f->detail);
    // largest gradient 6680 at scale 65536: 0.1019 unscaled, 2^18 keeps it under 32752
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    ck_assert_msg(strstr(f->advice, "Raise the loss scale to 262144"), "%s", f->advice);
    release();
}
END_TEST

// The steps a grad-underflow finding names are those whose gradients it counted: not the
// skipped steps after them, whose gradients never reached the weights.
START_TEST(grad_underflow_names_the_steps_it_counted) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = scale_before / 2 "
        "WHERE step >= 4;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_int_eq(findings.v[0].first_step, 0);
    ck_assert_int_eq(findings.v[0].last_step, 3);
    release();
}
END_TEST

// A scale already above the recommended one (a sawtooth that grew too far) is not "as high as
// the gradients allow", nor told to rise: the values are lost at a scale that overflows already.
START_TEST(grad_underflow_at_a_scale_above_the_recommended_one) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET scale_before = 268435456, scale_after = 268435456;");
    grads_times("* 4096");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    ck_assert_close(evidence(f, "loss_scale"), 268435456, 0, 0);
    ck_assert_msg(strstr(f->advice, "The scale (268435456 at the last step applied) is already "
                                    "above what the largest gradients allow (262144 keeps"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "as high as"));
    release();
    // just below it: raised by less than a bit (not "0 bits")
    sql("UPDATE AMP_STEPS SET scale_before = 196608, scale_after = 196608;");
    grads_times("/ 4096 * 3");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "Raise the loss scale to 262144") &&
                      strstr(findings.v[0].advice, "move less than a bit away"),
                  "%s", findings.v[0].advice);
    release();
}
END_TEST

// The scale is recommended from the gradients stored in the run's 16-bit dtype: an f32 gradient
// does not overflow (the mean loss's 1/batch towards its log-probabilities, 0.5 at a batch of 2
// however well the model fits, read "above what the largest gradients allow" over a run that
// never skipped a step); what of it reaches f16 is a row of its own.
START_TEST(grad_underflow_scale_is_of_the_16_bit_gradients) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_TENSOR_STATS SET amax = 1e6, min = -1e6, max = 1e6 WHERE op = 'log_softmax' "
        "AND kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "grad_amax_unscaled"), 6680.0 / 65536, 1e-12, 0);
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    release();
    // a weight gradient counts whatever its dtype (an fp32 master's comes out of an f16 GEMM)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 30000, min = -30000, max = 30000 WHERE kind = "
        "'weight_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 30000.0 / 65536, 1e-12, 0);
    release();
    // with no 16-bit gradient recorded (an fp32 run), all of them
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'f32' WHERE kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 1e6 / 65536, 1e-9, 0);
    release();
}
END_TEST

// A run of two programs (a script that trains one after the other): each model's gradients are
// judged by themselves, and the loss scale recommended from its own largest gradient; the ranks
// of one model (the same layers) stay one finding.
START_TEST(grad_underflow_and_scale_are_of_each_model) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const double values = evidence(&findings.v[0], "gradient_values"),
                 layers = evidence(&findings.v[0], "layers");
    release();
    // pid 7: an mlp whose loss scale is stuck at 1 and whose gradients (4e-11) all underflow
    sql("INSERT INTO AMP_LAYERS VALUES (7, 0, NULL, 'fc1'), (7, 1, NULL, 'fc2');"
        "CREATE TEMP TABLE t AS SELECT * FROM AMP_STEPS; UPDATE t SET pid = 7, scale_before = 1, "
        "scale_after = 1; INSERT INTO AMP_STEPS SELECT * FROM t; DROP TABLE t;"
        "INSERT INTO AMP_TENSOR_STATS SELECT 7, step, 1, 'linear', 'weight_grad', 'f16', 'f16', "
        "1000, -4e-11, 4e-11, 4e-11, 0, 0, 0, 0, 1000, 0 FROM AMP_STEPS WHERE pid = 7;"
        "INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, status) VALUES "
        "(1, 0, 16777216, 'tiny_gpt', 'complete'), (7, 0, 117440512, 'mlp', 'complete');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    for (size_t i = 0; i < 2; i++) {
        const report_finding *f = &findings.v[i];
        if (f->pid == 1) {
            ck_assert_close(evidence(f, "gradient_values"), values, 0, 0);
            ck_assert_close(evidence(f, "layers"), layers, 0, 0);
            ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
        } else {
            ck_assert_int_eq(f->pid, 7);
            ck_assert_str_eq(f->layer, "fc2");
            ck_assert_close(evidence(f, "gradient_values"), 6000, 0, 0);
            ck_assert_close(evidence(f, "grad_amax_unscaled"), 4e-11, 1e-9, 0);
        }
    }
    release();
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("loss-scale");
    ck_assert_int_eq(f->pid, 7);
    ck_assert_ptr_nonnull(strstr(f->title, "stuck low"));
    ck_assert_close(evidence(f, "grad_amax_unscaled"), 4e-11, 1e-9, 0);
    release();
    // pid 8: a second rank of pid 1's model, the same gradients: still one finding of that model
    static const char *const tables[] = {"AMP_LAYERS", "AMP_STEPS", "AMP_TENSOR_STATS", NULL};
    copy_rows(tables, 1, 8);
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    release();
}
END_TEST

// Activation gradients losing their smallest values while the weight gradients keep theirs (a
// model that fits most of its examples: their gradients shrink toward zero) is no warning: what
// the optimizer steps with decides.
START_TEST(grad_underflow_weighs_what_reaches_the_optimizer) {
    healthy(6);
    mlp_underflows("'activation_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_msg(strstr(f->detail, "The weight gradients, what the optimizer steps with, lose "
                                    "0.024% at most (blocks.0.mlp)"),
                  "%s", f->detail);
    release();
    // a run that recorded no weight gradient: its activation gradients decide
    sql("DELETE FROM AMP_TENSOR_STATS WHERE kind = 'weight_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "weight gradients"));
    release();
}
END_TEST

// A long layer name in a title is cut on a character's boundary, with "…" to show the cut, and
// every sentence of a finding is UTF-8.
START_TEST(finding_titles_cut_names_as_utf8) {
    healthy(6);
    sql("UPDATE AMP_LAYERS SET name = "
        "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaééééé' WHERE id = 1;"
        "UPDATE AMP_TENSOR_STATS SET n_underflow = numel * 3 / 10 WHERE layer_id = 1 AND "
        "kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const char *t = findings.v[0].title;
    ck_assert_msg(strstr(t, "aaaé… the worst"), "%s", t);
    for (const char *p = t; *p;) {
        size_t n = amp_utf8_seq(p, SIZE_MAX);
        ck_assert_msg(n > 0, "not UTF-8 at byte %zu of %s", (size_t)(p - t), t);
        p += n;
    }
    release();
    // the text format's lines are wrapped between characters, not inside one
    sql("UPDATE AMP_LAYERS SET name = 'блок.внимание.очень_длинное_имя_слоя_которое_не_помещается_"
        "в_одну_строку' WHERE id = 1;");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *text = test_read_file(out_path, NULL);
    for (const char *p = text; *p;) {
        size_t n = amp_utf8_seq(p, SIZE_MAX);
        ck_assert_msg(n > 0, "not UTF-8 at byte %zu of %s", (size_t)(p - text), text);
        p += n;
    }
    free(text);
}
END_TEST

// Advice for runs without a GradScaler: an fp32 run is told what fp16 would need, an fp16 one
// without a scaler to use one (never "the scale (nan) is already as high as ...").
START_TEST(grad_underflow_advice_without_a_scaler) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;");
    grads_times("/ 65536");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(begins(findings.v[0].advice, "Use a GradScaler (init_scale=262144: "
                                               "amp_scaler_new, or PyTorch's "
                                               "torch.amp.GradScaler): "),
                  "%s", findings.v[0].advice);
    release();
    // a PyTorch run's in PyTorch's words, of its device
    sql("INSERT INTO META (key, value, pid) VALUES ('bridge', 'torch 2.11.0', 1), "
        "('device', 'cpu', 1);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(begins(findings.v[0].advice, "Use a GradScaler (torch.amp.GradScaler(\"cpu\", "
                                               "init_scale=262144)): fp16 gradients"),
                  "%s", findings.v[0].advice);
    release();
    // parameters stored in fp16 (model.half()): a GradScaler refuses their gradients
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 0, 1, 'fc.weight', 'weight', 'f16', 'f16', 4096, "
        "-0.1, 0.1, 0.1, 0, 0, 0, 0, 0, 0);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(begins(findings.v[0].advice, "Keep fp32 master weights: leave the parameters in "
                                               "fp32 and compute in fp16 under torch.autocast "
                                               "with a GradScaler (init_scale=262144)"),
                  "%s", findings.v[0].advice);
    release();
    sql("DELETE FROM AMP_TENSOR_STATS WHERE kind = 'weight';"
        "DELETE FROM META WHERE key IN ('bridge', 'device');"
        "UPDATE AMP_TENSOR_STATS SET dtype = 'f32' WHERE kind IN ('activation_grad', "
        "'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_msg(strstr(findings.v[0].advice, "Nothing to change in fp32") &&
                      strstr(findings.v[0].advice, "init_scale=262144"),
                  "%s", findings.v[0].advice);
    ck_assert_ptr_null(strstr(findings.v[0].advice, "nan"));
    release();
}
END_TEST

START_TEST(grad_underflow_counts_vanished_gradients_not_structural_zeros) {
    healthy(6);
    // structural zeros (healthy_stats: the mask's 3872 of 8192) and a NaN step whose finite
    // values are all zero are no underflow...
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 3, 0, 'mul', 'activation_grad', 'f16', 'f16', "
        "8192, 0, 0, 0, 4352, 0, 0, 0, 0, 3840);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // ... a gradient that is entirely zero is
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE "
        "layer_id = 2 AND kind = 'activation_grad';"
        "INSERT INTO AMP_TENSOR_STATS SELECT pid, step, 2, 'head.weight', 'weight_grad', 'f32', "
        "'f16', 4096, 0, 0, 0, 0, 0, 0, 0, 0, 4096 FROM AMP_STEPS;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].layer, "head");
    ck_assert_msg(strstr(findings.v[0].detail, "lose 100% at most (head)."), "%s",
                  findings.v[0].detail);
    release();
    // ... unless the GradScaler skipped those steps (a scale collapsed to 0 zeroes every
    // gradient): their gradients never reached the weights
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_before = 0, scale_after = 0 "
        "WHERE step >= 2;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1); // steps 0 and 1
    ck_assert_close(evidence(&findings.v[0], "loss_scale"), 65536, 0, 0);
    release();
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_before = 0, scale_after = 0;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// In bf16 (fp32's range) a gradient of zeros is a saturated softmax or a dead ReLU, not
// underflow; values below bf16's smallest normal are, named as bf16's without loss-scale advice.
START_TEST(grad_underflow_in_bf16_counts_no_zero_gradient) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16';"
        "UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE "
        "layer_id = 2 AND kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradients underflow in bf16"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "loss scale"));
    release();
}
END_TEST

// fp16 gradients of 4e-10 at a scale of 2^24 (the most ampprobe recommends) lose half their
// values: the advice says no scale recovers them (not "init_scale=16777216 lifts them", the
// scale the run had), nor bf16; at 65536 a higher scale recovers some.
START_TEST(grad_underflow_of_vanishing_gradients_at_the_highest_scale) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e-6, max = max * 1e-6, amax = amax * 1e-6, "
        "n_underflow = numel / 2 WHERE kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET scale_before = 16777216, scale_after = 16777216;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("grad-underflow");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_msg(strstr(f->advice, "The scale is already 16777216 and these values are lost even "
                                    "so: no loss scale brings gradients this small"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "bf16"));
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    f = first_of("grad-underflow");
    ck_assert_msg(strstr(f->advice,
                         "a scale of 16777216 (init_scale=16777216, growth_interval=2000) "
                         "recovers some of the values lost"),
                  "%s", f->advice);
    release();
}
END_TEST

// Gradients all vanishingly small (a loss multiplied by 1e-10) in a bf16 run without a
// GradScaler: nothing underflows, but the weights barely move; a warning once the loss stalls.
START_TEST(grad_underflow_names_vanishing_gradients) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16';"
        "UPDATE AMP_TENSOR_STATS SET min = min * 1e-10, max = max * 1e-10, amax = amax * 1e-10 "
        "WHERE kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1); // the loss fell (4.0 to 3.95): information
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 6680e-10, 1e-6, 0);
    release();
    // under Adam's eps (1e-8) nothing trains, whatever the loss did
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e-3, max = max * 1e-3, amax = amax * 1e-3 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].title, "under Adam's eps"), "%s", findings.v[0].title);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e3, max = max * 1e3, amax = amax * 1e3 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    sql("UPDATE AMP_STEPS SET loss = 4.0 + step * 0.001;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(
        strstr(findings.v[0].title, "the loss did not fall (4 at step 0, 4.005 at step 5)"), "%s",
        findings.v[0].title);
    release();
    // a second process's lower losses are no fall of the first's
    sql("INSERT INTO AMP_STEPS SELECT 2, step, start_ns, end_ns, 1.0 - step * 0.01, 1, grad_norm, "
        "scale_before, scale_after, found_inf, skipped, mem_peak_bytes FROM AMP_STEPS WHERE pid = "
        "1;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(
        strstr(findings.v[0].title, "the loss did not fall (4 at step 0, 4.005 at step 5)"), "%s",
        findings.v[0].title);
    release();
}
END_TEST

// A step whose loss was NaN (a batch of padding alone: the loss's mean over no target) has
// gradients of zeros that the GradScaler does not skip (nothing in them is non-finite): they are
// no underflow.
START_TEST(grad_underflow_leaves_out_a_broken_step) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE step = 3 "
        "AND kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 3;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    // the same zeros at a step that trained, of gradients that reach 37-6680 (scaled) in the
    // other steps: exact zeros (a saturated tanh, a dead ReLU), no underflow: not counted
    sql("UPDATE AMP_STEPS SET loss = 2.0, loss_finite = 1 WHERE step = 3;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    // of gradients that stay below 1 (scaled), where a tensor can underflow whole: counted
    sql("UPDATE AMP_TENSOR_STATS SET amax = amax * 1e-4, min = min * 1e-4, max = max * 1e-4 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "all-zero gradients included"));
    release();
    // and left out where the batch is fitted, the loss 0 or a millionth of the first: a large
    // mlp on the samples' data got there within three steps on an H200, its gradients all zero
    // or underflowing at a loss of 1.4e-9; each process by its own first loss (two more here,
    // with no statistics, whose first losses would make step 3 fitted or not)
    sql("CREATE TEMP TABLE other AS SELECT * FROM AMP_STEPS;"
        "UPDATE other SET pid = 0, loss = loss * 1e-12; INSERT INTO AMP_STEPS SELECT * FROM other;"
        "UPDATE other SET pid = 2, loss = loss * 1e24; INSERT INTO AMP_STEPS SELECT * FROM other;");
    for (int i = 0; i < 2; i++) {
        sql(i ? "UPDATE AMP_STEPS SET loss = 0 WHERE pid = 1 AND step = 3;"
              : "UPDATE AMP_STEPS SET loss = 1.4e-9 * (SELECT loss FROM AMP_STEPS WHERE pid = 1 "
                "AND step = 0) WHERE pid = 1 AND step = 3;");
        analyse("grad-underflow", INT64_MIN, INT64_MAX);
        ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
        release();
        analyse("grad-underflow", 3, 3); // whatever the focus
        ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
        release();
    }
    sql("UPDATE AMP_STEPS SET loss = 1e-5 * (SELECT loss FROM AMP_STEPS WHERE pid = 1 AND step = "
        "0) WHERE pid = 1 AND step = 3;"); // a small loss that still trains
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// precision-placement

START_TEST(precision_fp32_gemm_under_autocast_is_a_warning) {
    healthy(6);
    // blocks.0.mlp's GEMM runs with autocast disabled: fp32 in, fp32 out, most of the FLOPs
    sql("INSERT INTO AMP_OPS SELECT 1, step, 1, 'linear', 'fwd', 'f32,f32', 'f32', NULL, "
        "'(8, 64)', 33554432, 393216, step * 1000000 + 500000, step * 1000000 + 700000 "
        "FROM AMP_STEPS;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "linear");
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_ptr_nonnull(strstr(f->title, "fp32 under autocast"));
    ck_assert_close(evidence(f, "flops_share"), 33554432.0 / (33554432 + 4194304 + 8388608), 1e-9, 0);
    ck_assert_ptr_nonnull(strstr(f->advice, "bf16"));
    ck_assert_int_eq(f->last_step, 5);
    release();
    // a step begun and never recorded (the program killed in it): its ops name no step
    sql("INSERT INTO AMP_OPS SELECT pid, 6, layer_id, op, phase, in_dtypes, out_dtype, policy, "
        "shapes, flops, bytes, start_ns + 1000000, end_ns + 1000000 FROM AMP_OPS WHERE step = 5;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_int_eq(first_of("precision-placement")->last_step, 5);
    release();
}
END_TEST

START_TEST(precision_healthy_autocast_and_fp32_runs_are_quiet) {
    healthy(6);
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // an fp32 run (no autocast at all) is not this rule's business
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

START_TEST(precision_upcasts_and_casts_are_notes_on_the_cpu) {
    healthy(6);
    sql("UPDATE AMP_OPS SET in_dtypes = 'f16', end_ns = start_ns + 90000 WHERE op = 'softmax';"
        "UPDATE AMP_OPS SET end_ns = start_ns + 80000 WHERE op = 'to';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0); // host time: notes only
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "upcast"));
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.attn");
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "casts"));
    release();
}
END_TEST

// The K and N of a GEMM's shapes, as AMP_OPS records them.
START_TEST(gemm_dimensions_are_read_from_the_shapes) {
    int64_t k = 0, n = 0;
    ck_assert(report_gemm_kn("linear", "(8, 128, 768),(50257, 768),(50257,)", &k, &n));
    ck_assert_int_eq(k, 768);
    ck_assert_int_eq(n, 50257);
    ck_assert(report_gemm_kn("linear", "(64, 256),(10, 256)", &k, &n)); // no bias
    ck_assert_int_eq(n, 10);
    ck_assert(report_gemm_kn("matmul", "(8, 12, 128, 64),(8, 12, 64, 127)", &k, &n));
    ck_assert_int_eq(k, 64);
    ck_assert_int_eq(n, 127);
    ck_assert(report_gemm_kn("addmm", "(30,),(16, 20),(20, 30)", &k, &n));
    ck_assert_int_eq(k, 20);
    ck_assert_int_eq(n, 30);
    ck_assert(!report_gemm_kn("matmul", "(64,),(64, 10)", &k, &n)); // a vector operand
    ck_assert(!report_gemm_kn("linear", "(8, 64)", &k, &n));       // no weight
    ck_assert(!report_gemm_kn("conv2d", "(8, 3, 32, 32),(16, 3, 3, 3)", &k, &n));
    ck_assert(!report_gemm_kn("linear", "(8, x),(3, 8)", &k, &n));
    ck_assert(!report_gemm_kn("linear", "(8, 64", &k, &n));
    ck_assert(!report_gemm_kn("linear", NULL, &k, &n));
}
END_TEST

// A 16-bit GEMM whose N is odd (a vocabulary of 50257) holding most of the FLOPs: a warning,
// with and without autocast; the same padded to 50304, a small odd head (a launch-bound GEMM),
// and the backward's rows are none.
START_TEST(precision_odd_gemm_dimensions_are_named) {
    healthy(6);
    sql("INSERT INTO AMP_OPS SELECT 1, step, 2, 'linear', 'fwd', 'f16,f16,f16', 'f16', "
        "'lower_precision_fp', '(8, 1024, 768),(50257, 768),(50257,)', 632386879488, 0, "
        "step * 1000000 + 500000, step * 1000000 + 700000 FROM AMP_STEPS;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("precision-placement");
    ck_assert_msg(begins(f->title, "16-bit GEMMs with a dimension not a multiple of 8 hold 100% "
                                   "of their FLOPs (head linear: N=50257)"),
                  "%s", f->title);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_ptr_nonnull(strstr(f->detail, "head linear K=768 N=50257 (100%)"));
    ck_assert_msg(strstr(f->advice, "N 50257 -> 50304"), "%s", f->advice);
    ck_assert_close(evidence(f, "n"), 50257, 0, 0);
    release();
    // without autocast (a model cast to fp16): the same
    sql("UPDATE AMP_OPS SET policy = NULL;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(first_of("precision-placement"));
    ck_assert(begins(first_of("precision-placement")->title, "16-bit GEMMs with a dimension"));
    release();
    // fp32 GEMMs: no 16-bit alignment to speak of
    sql("UPDATE AMP_OPS SET in_dtypes = 'f32,f32,f32', out_dtype = 'f32' WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    sql("UPDATE AMP_OPS SET in_dtypes = 'f16,f16,f16', out_dtype = 'f16', phase = 'bwd' "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    sql("UPDATE AMP_OPS SET phase = 'fwd', shapes = '(8, 1024, 768),(50304, 768),(50304,)' "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // a head of 10 classes: odd, and too small to be anything but launch-bound
    sql("UPDATE AMP_OPS SET shapes = '(64, 256),(10, 256),(10,)', flops = 327680 "
        "WHERE flops > 1e9;");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The performance rules, on hand-made CUPTI rows

#define STEP_NS 10000000LL // 10 ms steps
#define GPID "16777216"   // globalPid of pid 1 (pid << 24)

// A GPU run of n steps: one f16 linear op of layer 2 (head) per step with the given analytic
// FLOPs and bytes, launching k kernels of kernel_ns each, gap_ns apart.
static void gpu_run(int n, int k, long long kernel_ns, long long gap_ns, double flops, double bytes) {
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

// A GPU run's database holding what no ampprobe writes (a column NULL, text or -1, one at a
// time: test_odd_values), its kernels, launches and ops included, is read or refused in one
// line, never a crash.
START_TEST(odd_values_in_a_gpu_run_are_read_or_refused) {
    gpu_run(8, 3, 50000, 2000, 1e9, 1e6);
    healthy_stats(8);
    sql(EVENTS_VALUES "(1, 3, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 7890, 65440, 'x', 0, "
                      "1, 3), (1, 3, NULL, NULL, 'optim', 'step_skipped', 'warning', 1, 65536, "
                      "NULL, 0, 1, 3);");
    char path[160];
    snprintf(path, sizeof path, "%s/odd.sqlite", tmpdir);
    ck_assert_int_gt(test_odd_values(db_path, path), 100);
}
END_TEST

// The kernel time of 16-bit GEMMs with an odd dimension, CUDA traced: theirs of the ops'.
START_TEST(precision_odd_gemm_kernel_time_is_told) {
    gpu_run(8, 3, 50000, 2000, 2e9, 1e6);
    sql("UPDATE AMP_OPS SET shapes = '(8192, 768),(50257, 768),(50257,)';");
    analyse("precision-placement", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("precision-placement");
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(strstr(f->detail, " Their forward kernels took 1.2 ms, 100% of the GPU time of "
                                    "the ops recorded."),
                  "%s", f->detail);
    ck_assert_close(evidence(f, "time_ms"), 1.2, 1e-9, 0);
    release();
}
END_TEST

START_TEST(roofline_slow_compute_layer_is_a_warning) {
    // 1 GFLOP over 1 MB (intensity 1000, compute-bound) in 1 ms: 0.13% of 790 TFLOP/s
    gpu_run(5, 1, 1000000, 0, 1e9, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("roofline");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_close(evidence(f, "efficiency"), 1e12 / 790e12, 1e-9, 1e-6);
    ck_assert_close(evidence(f, "intensity"), 1000, 0, 1e-9);
    ck_assert_ptr_nonnull(strstr(f->advice, "Tensor Cores"));
    // the summary names the ceilings and says they are assumed
    const report_finding *info = &findings.v[1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    ck_assert_ptr_nonnull(strstr(info->detail, "assumed from the default table"));
    ck_assert_close(evidence(info, "ceilings_assumed"), 1, 0, 0);
    release();
}
END_TEST

START_TEST(roofline_uses_the_calibrated_ceilings) {
    gpu_run(5, 1, 1000000, 0, 1e9, 1e6);
    char path[256];
    snprintf(path, sizeof path, "%s/ampprobe", tmpdir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert(amp_ceilings_path("NVIDIA H200", path, sizeof path));
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("gpu NVIDIA H200\ndram_bytes_per_s 4e+12\ngemm_flops_bf16 8e+14\ngemm_flops_f16 7e+14\n", f);
    fclose(f);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *info = &findings.v[findings.n - 1];
    ck_assert_int_eq(info->severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(info, "peak_tflops"), 800, 0, 1e-12);
    ck_assert_close(evidence(info, "bandwidth_tbs"), 4, 0, 1e-12);
    ck_assert_close(evidence(info, "ceilings_assumed"), 0, 0, 0);
    ck_assert_ptr_nonnull(strstr(info->detail, "measured by ampprobe calibrate"));
    release();
}
END_TEST

START_TEST(roofline_efficient_kernels_are_a_note) {
    // 10 GFLOP in 20 us: 500 TFLOP/s, 63% of the roof
    gpu_run(5, 1, 20000, 0, 1e10, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    release();
    // no kernels at all (a CPU run): nothing
    sql("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// The names that the roofline rule (and the TUI's kernels view) take for matrix-multiply kernels
// when it has no figures for them: real kernel names of cuBLAS, CUTLASS, cuDNN, flash attention
// and PyTorch.
START_TEST(kernel_names_that_are_gemms) {
    static const char *const gemm[] = {
        "nvjet_sm90_hsh_192x128_64x5_1x2_h_bz_coopB_NNT",
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
        "cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "implicit_convolve_sgemm",
        "flash_fwd_kernel",
        "Kernel2<cutlass_80_wmma_tensorop_f16>"};
    static const char *const other[] = {"GammaBetaBackwardCUDAKernelTemplate",
                                        "vectorized_elementwise_kernel",
                                        "softmax_warp_forward",
                                        "multi_tensor_apply_kernel",
                                        "stats_kernel",
                                        ""};
    for (size_t i = 0; i < sizeof gemm / sizeof *gemm; i++)
        ck_assert_msg(report_kernel_is_gemm(gemm[i]), "%s", gemm[i]);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        ck_assert_msg(!report_kernel_is_gemm(other[i]), "%s", other[i]);
    ck_assert(!report_kernel_is_gemm(NULL));
}
END_TEST

// An op's FLOPs go to its GEMM kernels, not to the casts launched in the same call (PyTorch's
// linear under autocast), its bytes to both by their time; a kernel's figures from the one step
// that recorded its ops stand for all its launches.
START_TEST(roofline_op_flops_go_to_gemm_kernels) {
    gpu_run(4, 2, 100000, 10000, 1e9, 1e6); // each step: two 0.1 ms kernels in one linear
    sql("INSERT INTO StringIds VALUES (3, 'vectorized_elementwise_kernel');"
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 3, shortName = 3 WHERE gridId = 0;"
        "DELETE FROM AMP_OPS WHERE step <> 1;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_kernel *gemm = kernel_named("nvjet_sm90_tst_gemm");
    const report_kernel *cast = kernel_named("vectorized_elementwise_kernel");
    ck_assert_int_eq(gemm->launches, 4);
    ck_assert_int_eq(gemm->attributed_ns, 100000); // step 1's launch
    ck_assert_close(gemm->flops, 4e9, 0, 1e-9);    // all of the op's FLOPs, times 4 launches
    ck_assert_close(cast->flops, 0, 0, 0);
    ck_assert_close(gemm->bytes, 2e6, 0, 1e-9); // half the op's bytes each, times 4
    ck_assert_close(cast->bytes, 2e6, 0, 1e-9);
    kernel_layer_is(gemm, 2, 1, 100000); // head, where step 1's op ran
    release();
}
END_TEST

// A kernel several layers launch belongs to the one it spent the most time in, the others
// counted; a kernel no op launched has none.
// A kernel that ran half an hour (a collective stuck until its watchdog fired) is kept; one
// whose start was left unset (0: a span of decades) is left out.
START_TEST(kernels_of_a_real_length_are_kept_damaged_ones_left_out) {
    gpu_run(4, 1, 100000, 10000, 1e9, 1e6);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const int64_t launches = model.perf.launches, ns = model.perf.kernel_ns;
    release();
    sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + 1800000000000 WHERE rowid = 1;"
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 0, end = 1764000000000000000 "
        "WHERE rowid = 2;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.launches, launches - 1);
    ck_assert_int_gt(model.perf.kernel_ns, 1800000000000 - ns);
    ck_assert_int_lt(model.perf.kernel_ns, 1800000000000 + ns);
    release();
}
END_TEST

START_TEST(kernels_take_the_layer_of_most_of_their_time) {
    gpu_run(4, 1, 100000, 10000, 1e9, 1e6);
    sql("UPDATE AMP_OPS SET layer_id = 0 WHERE step = 3;"
        "INSERT INTO StringIds VALUES (3, 'orphan_kernel');" TEST_KERNEL_INSERT
        "SELECT end_ns - 500, end_ns - 100, 0, "
        "1, 7, 900 + step, " GPID ", 3, 3, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 9 FROM AMP_STEPS;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_kernel *gemm = kernel_named("nvjet_sm90_tst_gemm");
    const report_kernel *orphan = kernel_named("orphan_kernel");
    ck_assert_int_eq(gemm->layer_pid, 1);
    kernel_layer_is(gemm, 2, 2, 300000); // 3 steps in head, 1 in blocks.0.attn
    kernel_layer_is(orphan, -1, 0, -1);
    release();
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0); // the roofline's point
    char *h = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(h, "<title>nvjet_sm90_tst_gemm in head and 1 other layer: 4 launches"),
                  "%s", h);
    free(h);
    sql("UPDATE AMP_OPS SET layer_id = 0 WHERE step <> 3;"); // now blocks.0.attn throughout
    analyse("roofline", INT64_MIN, INT64_MAX);
    gemm = kernel_named("nvjet_sm90_tst_gemm");
    kernel_layer_is(gemm, 0, 1, -1);
    release();
}
END_TEST

START_TEST(roofline_places_kernels_by_hardware_counters) {
    // kernels no op claims (no analytic figures), named like a GEMM: compute-bound by name
    gpu_run(5, 1, 1000000, 0, 0, 0);
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    ck_assert_ptr_nonnull(strstr(info->detail, "(by name)"));
    ck_assert_close(evidence(info, "counter_samples"), 0, 0, 0);
    release();
    // --counters asked for but refused: the report says why
    sql("INSERT INTO META VALUES ('counters_reason', 'GPU 0: cuptiPmSamplingEnable: "
        "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES', 1);");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->detail, "asked for but not recorded"));
    ck_assert_ptr_nonnull(strstr(info->detail, "INSUFFICIENT_PRIVILEGES"));
    release();
    // PM samples over each kernel: 3 GB of DRAM traffic per 1 ms kernel (3 TB/s) and the tensor
    // pipe 5% busy: memory-bound, whatever the name says; samples in the gaps count for nothing
    sql("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (0, 0, 'dram__bytes_read.sum'), "
        "(0, 1, 'dram__bytes_write.sum'), "
        "(0, 2, 'sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed');"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 0, 2e9 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 1, 1e9 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT start, end, 0, 2, 5 FROM CUPTI_ACTIVITY_KIND_KERNEL;"
        "INSERT INTO GPU_METRICS SELECT end, end + 1000000, 0, 0, 7e9 FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% memory-bound"));
    ck_assert_ptr_null(strstr(info->detail, "(by name)"));
    ck_assert_ptr_nonnull(strstr(info->detail, "counters: DRAM"));
    ck_assert_ptr_nonnull(strstr(info->detail, "tensor pipe 5% busy"));
    ck_assert_close(evidence(info, "counter_samples"), 10, 0, 0);
    ck_assert_close(evidence(info, "kernels_by_counters"), 1, 0, 0);
    release();
    // the tensor pipe busier than DRAM is near its roof: compute-bound
    sql("UPDATE GPU_METRICS SET value = 90 WHERE metricId = 2;");
    analyse("roofline", INT64_MIN, INT64_MAX);
    info = &findings.v[findings.n - 1];
    ck_assert_ptr_nonnull(strstr(info->title, "100% compute-bound"));
    release();
}
END_TEST

START_TEST(gpu_idle_gaps_are_a_warning) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7); // 0.1 ms kernels 0.5 ms apart
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_ge(f->first_step, 0);
    // between steps: the last kernel ends 2 us + 9 x 0.6 ms + 0.1 ms into a 10 ms step
    ck_assert_close(evidence(f, "largest_gap_ms"), 4.5, 1e-6, 0);
    // no copies, no synchronisations in the gaps: the host launches too slowly
    ck_assert_ptr_nonnull(strstr(f->detail, "Most likely cause: the host launching work"));
    ck_assert_ptr_nonnull(strstr(f->advice, "torch.compile"));
    release();
}
END_TEST

// Two GPUs (a data-parallel run's ranks) whose kernels alternate: each sits idle in the other's
// kernels, which a union of both timelines would call busy.
START_TEST(gpu_idle_is_each_gpus) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    const double one = evidence(&findings.v[0], "idle_share");
    ck_assert_msg(begins(findings.v[0].title, "the GPU sat idle"), "%s", findings.v[0].title);
    release();
    // the same kernels again on GPU 1, 0.3 ms later: in GPU 0's gaps
    sql(TEST_KERNEL_INSERT
        "SELECT start + 300000, end + 300000, 1, "
        "contextId, streamId, correlationId + 1000000, globalPid, demangledName, shortName, "
        "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
        "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL;");
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "idle_share"), one, 1e-9, 0);
    ck_assert_msg(begins(f->title, "the 2 GPUs sat idle"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "(each GPU's, summed)"), "%s", f->detail);
    release();
}
END_TEST

// A step's GPU busy time (the html step-time breakdown) is its own process's, on each of its
// GPUs: a second process's kernels in the first one's gaps are not the first one's, and a
// process on two GPUs has its busy time summed over both (gpu_devices 2). (The copies of the
// kernels are of GPU 0's.)
static const report_step *step_of(int32_t pid, int64_t step) {
    const report_step *s = report_step_find(&model, pid, step);
    ck_assert_ptr_nonnull(s);
    return s;
}

#define KERNELS_AGAIN(START, DEV, GLOBAL_PID)                                                      \
    TEST_KERNEL_INSERT                                                                             \
        "SELECT start + " START ", end + " START ", " DEV ", contextId, streamId, "                \
        "correlationId + 1000000, " GLOBAL_PID ", demangledName, shortName, "                      \
        "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "                        \
        "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "                          \
        "localMemoryTotal, gridId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0;"

START_TEST(step_busy_is_its_own_process_gpus) {
    gpu_run(4, 10, 100000, 500000, 1e9, 1e7); // ten 0.1 ms kernels a step
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(step_of(1, 2)->gpu_busy_ns, 1000000);
    ck_assert_int_eq(step_of(1, 2)->gpu_devices, 1);
    release();
    // process 2: the same steps, its kernels on GPU 1 in GPU 0's gaps
    sql("INSERT INTO AMP_STEPS (pid, step, start_ns, end_ns, loss, loss_finite) "
        "SELECT 2, step, start_ns, end_ns, loss, loss_finite FROM AMP_STEPS;" KERNELS_AGAIN(
            "300000", "1", "33554432"));
    analyse(NULL, INT64_MIN, INT64_MAX);
    for (int32_t pid = 1; pid <= 2; pid++) {
        ck_assert_int_eq(step_of(pid, 2)->gpu_busy_ns, 1000000);
        ck_assert_int_eq(step_of(pid, 2)->gpu_devices, 1);
    }
    release();
    // process 1 on GPU 2 too (DataParallel's replicas): both GPUs' busy time, summed
    sql(KERNELS_AGAIN("200000", "2", GPID));
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(step_of(1, 2)->gpu_busy_ns, 2000000);
    ck_assert_int_eq(step_of(1, 2)->gpu_devices, 2);
    ck_assert_int_eq(step_of(2, 2)->gpu_busy_ns, 1000000);
    release();
}
END_TEST

START_TEST(gpu_idle_back_to_back_kernels_are_quiet) {
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7); // 0.1 ms kernels 1 us apart fill the steps
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// Step 0's one-time set-up (a kernel half a second before it, the model's weights copied up) is
// not the loop: the loop's steps are full, so no gpu-idle finding, and no copies finding either.
START_TEST(gpu_idle_leaves_the_warm_up_out) {
    gpu_run(4, 98, 100000, 1000, 1e9, 1e7);
    sql(TEST_KERNEL_INSERT
        "VALUES (-500000000, -499990000, 0, 1, 7, "
        "999999, " GPID ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 0);"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (1000, 900000000, 0, 1, 7, " GPID
        ", 1073741824, 1, 0, 2);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(strcmp(findings.v[i].rule, "gpu-idle") != 0 &&
                          strcmp(findings.v[i].rule, "h2d-copies") != 0,
                      "%s: %s", findings.v[i].rule, findings.v[i].title);
    ck_assert_int_eq(model.perf.warmup_kernels, 99); // step 0's 98 and the one before it
    ck_assert_int_eq(model.perf.htod_copies, 0);
    release();
    // without step 0 in the model (a focus on later steps) nothing is left out
    analyse("gpu-idle", 1, INT64_MAX);
    ck_assert_int_eq(model.perf.warmup_kernels, 0);
    release();
}
END_TEST

static void copies(const char *src_kind, long long ns) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
             "globalPid, bytes, copyKind, srcKind, dstKind) SELECT start_ns + 1500000, "
             "start_ns + 1500000 + %lld, 0, 1, 7, " GPID ", 67108864, 1, %s, 2 FROM AMP_STEPS;",
             ns, src_kind);
    sql(buf);
}

START_TEST(h2d_pageable_copies_are_a_warning) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    copies("0", 4000000); // 64 MB from pageable memory, 4 ms each, against 1 ms of kernels
    analyse("h2d-copies", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "htod_share"), 0.8, 1e-9, 0);
    ck_assert_close(evidence(f, "pageable_copies"), 3, 0, 0); // step 0's is the warm-up
    ck_assert_ptr_nonnull(strstr(f->advice, "pin_memory=True"));
    release();
}
END_TEST

// A script that only moved a model to the GPU (no step, no kernel, two tiny pageable copies):
// copies that took microseconds in all are no finding, whatever their share of nothing.
START_TEST(h2d_copies_of_no_weight_are_quiet) {
    sql("INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, 0, 'NVIDIA H200');"
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, "
        "globalPid, bytes, copyKind, srcKind, dstKind) VALUES (1000, 2000, 0, 1, 7, " GPID
        ", 128, 1, 0, 2), (5000, 5800, 0, 1, 7, " GPID ", 16, 1, 0, 2);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_int_eq(model.perf.htod_copies, 2);
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(strcmp(findings.v[i].rule, "h2d-copies") != 0, "%s", findings.v[i].title);
    release();
}
END_TEST

START_TEST(h2d_small_pinned_copies_are_quiet) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    copies("1", 20000);
    analyse("h2d-copies", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

static void syncs(int per_step, long long ns) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < %d - 1) "
             "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
             "streamId, globalPid, syncType, eventId) SELECT start_ns + 3000000 + x * 1200000, "
             "start_ns + 3000000 + x * 1200000 + %lld, 0, 1, 7, " GPID ", 3, 0 "
             "FROM AMP_STEPS, j;",
             per_step, ns);
    sql(buf);
}

// The gap's likely cause picks the advice: synchronisations, or copies (data).
START_TEST(gpu_idle_advice_follows_the_gaps) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(2, 2000000); // 4 ms of each 10 ms step blocked in synchronisations
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: host synchronisations"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, ".item()"));
    release();
    wipe();
    // synchronisations that block the host next to nothing (1 us, the GPU done already) but end
    // in the gaps: the GPU idles after each until the host launches again (a sample that read
    // its loss before the backward, on an H200)
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(5, 1000);
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: host synchronisations"));
    // after step 0 (the warm-up): three 0.5 ms gaps a step and three 4.5 ms gaps between steps
    ck_assert_close(evidence(&findings.v[0], "sync_gap_ms"), 4 * 1.5 + 3 * 4.5, 1e-6, 0);
    release();
    wipe();
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    copies("0", 2000000); // pageable host-to-device copies
    analyse("gpu-idle", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Most likely cause: waiting for data"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "pin_memory"));
    release();
}
END_TEST

// Gaps that are the host synchronisations: host-sync and gpu-idle both speak, the advice once.
START_TEST(sync_advice_is_given_once) {
    gpu_run(5, 10, 100000, 500000, 1e9, 1e7);
    syncs(4, 1000000);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("host-sync", AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("gpu-idle", AMP_SEVERITY_WARNING), 1);
    int full = 0, pointer = 0;
    for (size_t i = 0; i < findings.n; i++) {
        full += strstr(findings.v[i].advice, ".item()") != NULL;
        pointer += strstr(findings.v[i].advice, "The same as for ") != NULL;
    }
    ck_assert_int_eq(full, 1);
    ck_assert_int_eq(pointer, 1);
    release();
}
END_TEST

START_TEST(host_sync_every_few_ops_is_a_warning) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / (4 * (STEP_NS - 1) / 1e6), 1e-9, 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, ".item()"));
    release();
    // streams waiting on events (cudaStreamWaitEvent, syncType 2: FSDP's and DDP's streams) do
    // not block the host: not counted, nor their time
    sql("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT start + 100, end + 100, deviceId, "
        "contextId, streamId, globalPid, 2, 9 FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 5, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / (4 * (STEP_NS - 1) / 1e6), 1e-9,
                    0);
    release();
}
END_TEST

// A synchronisation row that ends before it starts (an incomplete record, end 0) is left out,
// as a kernel's is: no negative time, no count.
START_TEST(host_sync_leaves_out_incomplete_records) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    sql("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET end = 0 WHERE rowid = 1;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "per_step"), 19.0 / 4, 1e-12, 0);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 19.0 / (4 * (STEP_NS - 1) / 1e6), 1e-9,
                    0);
    release();
}
END_TEST

// Without steps the host's time is each process's, its first kernel to its last: a process's
// second GPU does not double it (the spans of its two GPUs summed did).
START_TEST(host_sync_without_steps_is_per_process) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(5, 1000000);
    sql("DELETE FROM AMP_STEPS; DELETE FROM AMP_OPS;");
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / 31.0, 1e-9, 0);
    release();
    sql(KERNELS_AGAIN("300000", "1", GPID));
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "sync_share"), 20.0 / 31.3, 1e-9, 0);
    release();
}
END_TEST

START_TEST(host_sync_with_the_gpu_busy_is_a_note) {
    gpu_run(4, 98, 100000, 1000, 1e9, 1e7); // kernels fill the steps: a GPU-bound loop
    syncs(5, 1000000);
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "the GPU stayed busy"));
    ck_assert_double_ge(evidence(&findings.v[0], "gpu_busy_share"), 0.9);
    release();
}
END_TEST

START_TEST(host_sync_once_per_step_is_quiet) {
    gpu_run(4, 1, 1000000, 0, 1e9, 1e6);
    syncs(1, 10000); // the GradScaler's found_inf read
    analyse("host-sync", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// amp-payoff

START_TEST(amp_payoff_launch_bound_amp_run_is_a_warning) {
    gpu_run(4, 500, 2000, 3000, 1e6, 1e6); // 2 us kernels
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "launch-bound"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "AMP cannot pay off"));
    ck_assert_close(evidence(&findings.v[0], "short_kernel_share"), 1, 0, 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "CUDA graphs"));
    release();
    // the same model in fp32 only hears that AMP would not help
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "would not make this model faster"));
    release();
}
END_TEST

// A GPU run of step 0 alone (a program that died in step 1; --steps 0:0): every kernel is the
// warm-up's, so no busy share is claimed ("busy nan%"); kernels of no duration, no GEMM share.
START_TEST(amp_payoff_of_the_warm_up_alone_claims_no_busy_share) {
    gpu_run(1, 500, 2000, 3000, 1e6, 1e6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title,
                     "launch-bound: 100% of the kernels run under 5 us, so AMP cannot pay off (its "
                     "casts add launches; expect it slower than fp32)");
    ck_assert_msg(!strstr(findings.v[0].detail, "busy"), "%s", findings.v[0].detail);
    release();
    // kernels recorded with no duration (start = end): no GEMM share of no time ("nan%")
    wipe();
    gpu_run(4, 500, 0, 3000, 1e6, 1e6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(!strstr(findings.v[0].detail, "nan") && !strstr(findings.v[0].detail, "GEMM"),
                  "%s", findings.v[0].detail);
    release();
}
END_TEST

// A data-parallel run's NCCL collectives, one per step of ns each on a stream of their own (no
// op launched them): communication, not compute.
static void nccl_kernels(long long ns) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "INSERT INTO StringIds VALUES (3, "
             "'ncclDevKernel_AllReduce_Sum_f32_RING_LL');" TEST_KERNEL_INSERT
             "SELECT start_ns + 1000, start_ns + 1000 + %lld, 0, 1, 8, "
             "900000 + step, " GPID ", 3, 3, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1 "
             "FROM AMP_STEPS;",
             ns);
    sql(buf);
}

// A data-parallel run whose all-reduces take most of the GPU time: its roofline says how much is
// communication (not memory-bound by name), and AMP's payoff is judged on the rest.
START_TEST(nccl_kernels_are_communication) {
    ck_assert(report_kernel_is_comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
    ck_assert(report_kernel_is_comm("ncclKernel_AllGather_RING_LL_Sum_int8_t"));
    ck_assert(!report_kernel_is_comm("vectorized_elementwise_kernel"));
    ck_assert(!report_kernel_is_comm(NULL));
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7);
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    nccl_kernels(30000000); // 30 ms a step against 9.8 of GEMMs
    analyse("roofline", INT64_MIN, INT64_MAX);
    const report_finding *f = &findings.v[findings.n - 1];
    ck_assert_msg(strstr(f->title, "kernels, 75% communication (NCCL) on NVIDIA H200"), "%s",
                  f->title);
    ck_assert_close(evidence(f, "communication_share"), 30.0 / 39.8, 1e-9, 0);
    ck_assert_close(evidence(f, "compute_share") + evidence(f, "memory_share") +
                        evidence(f, "launch_share") + evidence(f, "communication_share"),
                    1, 1e-12, 0);
    ck_assert_msg(strstr(f->detail, "ncclDevKernel_AllReduce_Sum_f32_RING_LL 75% of GPU time, 3 x "
                                    "30000.0 us, communication"),
                  "%s", f->detail);
    release();
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(findings.v[0].title, "AMP can pay off: 100% of the GPU time"), "%s",
                  findings.v[0].title);
    ck_assert_msg(strstr(findings.v[0].detail, "GEMM share of GPU time 100% (NCCL's left out)"),
                  "%s", findings.v[0].detail);
    release();
}
END_TEST

START_TEST(amp_payoff_busy_gemm_amp_run_is_quiet) {
    gpu_run(3, 98, 100000, 1000, 1e9, 1e7);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // an fp32 run of GEMM-heavy work: AMP can pay off (a note)
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "AMP can pay off"));
    release();
}
END_TEST

START_TEST(amp_payoff_projects_a_cpu_run_as_a_note) {
    healthy(6);
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    // 4 small ops per step: ~12 launches x 5 us against nanoseconds of math
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "launch-bound"));
    ck_assert_close(evidence(&findings.v[0], "step_launches"), 12, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "ceilings_assumed"), 1, 0, 0);
    release();
    // ops recorded without their analytic figures (a producer of its own): no projection (it
    // read "~0 FLOP, ~0 B" and "against ~0 us of fp32 math")
    sql("UPDATE AMP_OPS SET flops = NULL, bytes = NULL;");
    analyse("amp-payoff", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// run-end

// The run's META as the launcher leaves it: exit status (-1: the key removed) and status.
static void ended(int exit_status, const char *status) {
    char buf[256];
    if (exit_status < 0)
        snprintf(buf, sizeof buf, "DELETE FROM META WHERE key = 'exit_status';");
    else
        snprintf(buf, sizeof buf, "UPDATE META SET value = '%d' WHERE key = 'exit_status';",
                 exit_status);
    sql(buf);
    snprintf(buf, sizeof buf, "UPDATE META SET value = '%s' WHERE key = 'status' AND pid = 0;",
             status);
    sql(buf);
}

START_TEST(run_end_a_clean_exit_is_quiet) {
    healthy(10);
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    ck_assert_int_eq(model.end.exit_status, 0);
    ck_assert_int_eq(model.end.last_step, 9);
    release();
    ended(-1, "complete"); // AMPPROBE_OUT: no exit status
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

START_TEST(run_end_a_crash_is_an_error_and_a_kill_a_warning) {
    healthy(10);
    ended(128 + SIGSEGV, "complete");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_ERROR), 1);
    const report_finding *f = first_of("run-end");
    ck_assert_str_eq(f->title, "the program crashed with SIGSEGV after step 9");
    ck_assert_str_eq(f->detail, "It ended by signal 11 (exit status 139). The findings cover the "
                                "steps it recorded.");
    ck_assert_int_eq(f->first_step, 9);
    ck_assert_double_eq(evidence(f, "signal"), SIGSEGV);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training broke: the program crashed"), "verdict: %s", verdict);
    release();
    // libampcore's abort message (META abort) is said
    ended(128 + SIGABRT, "complete");
    sql("INSERT INTO META (key, value, pid) VALUES ('abort', 'libampcore x.c:1: assertion "
        "failed: n > 0', 1);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].detail, "It ended by signal 6 (exit status 134): libampcore "
                                           "x.c:1: assertion failed: n > 0. The findings cover "
                                           "the steps it recorded.");
    release();
    sql("DELETE FROM META WHERE key = 'abort';");
    ended(137, "complete");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_ERROR), 0);
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->title, "killed by SIGKILL after step 9"));
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->advice, "dmesg"));
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(!begins(verdict, "Healthy"), "verdict: %s", verdict);
    release();
    // a kill leads the warnings, those of earlier steps too (the OOM killer is the question)
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("grad-underflow", AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].rule, "run-end");
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training ran, with problems: the program was killed by SIGKILL"),
                  "verdict: %s", verdict);
    release();
}
END_TEST

// A focus (--steps) that ends before the crash judges steps that ran on past it: the crash is a
// note there (it was an error, exit 1 under --fail-on error, for a gate on steps 0-3); a focus
// past the last step names no step and says it was not "recorded".
START_TEST(run_end_after_the_focus_is_a_note) {
    healthy(10);
    ended(128 + SIGSEGV, "complete");
    sql("UPDATE AMP_TENSOR_STATS SET n_underflow = 0;");
    analyse(NULL, 0, 3);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_INFO), 1);
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->detail, "after the focused steps"));
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy"), "verdict: %s", verdict);
    release();
    analyse(NULL, 5, 9); // the crash after step 9, the focus's last
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_ERROR), 1);
    release();
    analyse(NULL, 100, 200);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "No step in the focused steps (--steps): the program crashed"),
                  "verdict: %s", verdict);
    release();
}
END_TEST

// META exit_signal (the launcher's since 2026-12-02) tells a program that exited with 139 by
// itself from one SIGSEGV ended; without it (older runs) 128+N reads as signal N.
START_TEST(run_end_an_exit_above_128_is_no_signal_when_the_launcher_says_so) {
    healthy(10);
    ended(139, "complete");
    sql("INSERT INTO META (key, value, pid) VALUES ('exit_signal', '0', 0);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(first_of("run-end")->title,
                     "the program failed with exit status 139 after step 9");
    release();
    sql("UPDATE META SET value = '11' WHERE key = 'exit_signal';");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_str_eq(first_of("run-end")->title, "the program crashed with SIGSEGV after step 9");
    release();
}
END_TEST

// A process the program left running (`train.py &` as a script's last line) is a warning: what
// it recorded after the program exited is not there (here, every step: the report's verdict says
// so instead of asking whether the program ran under the launcher).
START_TEST(run_end_names_the_processes_left_running) {
    healthy(10);
    sql("DELETE FROM AMP_STEPS; DELETE FROM AMP_TENSOR_STATS; DELETE FROM AMP_OPS;"
        "INSERT INTO META (key, value, pid) VALUES ('orphans', 'tiny_gpt (pid 6454)', 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(first_of("run-end")->title,
                     "the program exited and left processes running: tiny_gpt (pid 6454)");
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_ptr_null(strstr(verdict, "did the program run with the launcher"));
    release();
}
END_TEST

// A run the launcher saw end without a step (`ampprobe run -- true`, a PyTorch script without
// --torch): the verdict says so, instead of asking whether the launcher was used.
START_TEST(a_run_without_steps_under_the_launcher_says_what_records_them) {
    healthy(10);
    sql("DELETE FROM AMP_STEPS; DELETE FROM AMP_TENSOR_STATS; DELETE FROM AMP_OPS;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "the program ran under ampprobe run and exited (status 0) "
                                  "without recording one"),
                  "%s", verdict);
    release();
    // under --torch it does not advise --torch
    sql("INSERT INTO META (key, value, pid) VALUES ('torch', '1', 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "ran under ampprobe run --torch and exited (status 0) without "
                                  "training a model the bridge could see: it never imported torch"),
                  "%s", verdict);
    release();
    sql("DELETE FROM META WHERE key = 'torch';");
    // a signal that stopped it is no exit (META exit_signal; 128+N in older databases)
    ended(143, "complete");
    for (int old = 0; old < 2; old++) {
        sql(old ? "DELETE FROM META WHERE key = 'exit_signal';"
                : "INSERT INTO META (key, value, pid) VALUES ('exit_signal', '15', 0);");
        analyse(NULL, INT64_MIN, INT64_MAX);
        report_verdict(&model, &findings, verdict, sizeof verdict);
        ck_assert_msg(strstr(verdict, "the program ran under ampprobe run and was stopped by "
                                      "SIGTERM (status 143) without recording one"),
                      "%s", verdict);
        release();
    }
    // a healthy run stopped by a hang-up: healthy until then, not simply healthy
    steps(10, 65536);
    healthy_stats(10);
    healthy_ops(10);
    ended(129, "complete");
    sql("INSERT INTO META (key, value, pid) VALUES ('exit_signal', '1', 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy until the program was stopped by SIGHUP: no error or "
                                  "warning in 10 steps"),
                  "%s", verdict);
    release();
    sql("DELETE FROM AMP_STEPS; DELETE FROM AMP_TENSOR_STATS; DELETE FROM AMP_OPS;"
        "DELETE FROM META WHERE key = 'exit_signal';");
    ended(-1, "complete"); // AMPPROBE_OUT: no launcher, no exit status
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "did the program run with the launcher"), "%s", verdict);
    release();
}
END_TEST

// An outside producer's own event kinds (the record API stores any kind as given): its warnings
// and errors are findings of their own, one per place with its occurrences and the counts they
// gave; its notes, and the kinds the other rules read, are not. So are warnings and errors of
// amp-record.h's kinds that no rule reads as events (an error-severity overflow made the report
// read "Healthy"), with the records the rules judge their subject from.
START_TEST(recorded_events_of_a_producers_own_kinds_are_findings) {
    healthy(10);
    sql(EVENTS_VALUES
        "(1, 4, 1, 'linear', 'fwd', 'my_nan_guard', 'error', 3, NULL, 'batch 17 skipped', 0, 1, "
        "4),"
        "(1, 6, 1, 'linear', 'fwd', 'my_nan_guard', 'warning', 2, NULL, 'y', 1, 3, 8),"
        "(1, 7, 1, 'linear', 'fwd', 'my_nan_guard', 'warning', NULL, NULL, NULL, 0, 1, 7),"
        "(1, 2, NULL, NULL, NULL, 'my_progress', 'info', NULL, NULL, 'z', 0, 1, 2),"
        "(1, 5, NULL, NULL, 'bwd', 'grad_overflow', 'info', NULL, 65536, NULL, 0, 1, 5),"
        "(1, 5, 2, 'linear', 'fwd', 'overflow', 'info', 9, 70000, NULL, 0, 1, 5),"
        "(1, 3, NULL, NULL, 'optim', 'step_skipped', 'warning', 1, 65536, NULL, 0, 1, 3),"
        // (an fp32 op's f16-range note, recorded as a warning by libampcore until 2026-12-03)
        "(1, 4, 2, 'softmax', 'fwd', 'overflow', 'warning', 9, 70000, 'f32 values beyond the "
        "f16 range: this output overflows if it runs in f16', 0, 1, 4),"
        "(1, 6, 2, '', 'fwd', 'overflow', 'error', 5, 70000, '', 0, 1, 6);");
    analyse("recorded-events", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    const report_finding *f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "my_nan_guard recorded by the program in blocks.0.mlp linear");
    ck_assert_int_eq(f->first_step, 4);
    ck_assert_int_eq(f->last_step, 8);
    ck_assert_close(evidence(f, "occurrences"), 5, 0, 0);
    ck_assert_close(evidence(f, "count"), 5, 0, 0); // 3 + 2 (an aggregate row's sum), one unknown
    ck_assert_ptr_nonnull(strstr(f->detail, ": batch 17 skipped. 5 elements affected in the "
                                            "occurrences that gave a count."));
    f = &findings.v[1];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "overflow recorded by the program in head"); // (an empty op)
    ck_assert_str_eq(f->detail, "1 occurrence of an event of the record API's kind overflow "
                                "(severity error). 5 elements affected.");
    ck_assert_ptr_nonnull(strstr(f->advice, "from the tensor statistics"));
    release();
    // a NaN storm's elements are counted whole (2e12 per row, past 2^40), and rows of damaged
    // counts sum to INT64_MAX at most
    sql("UPDATE AMP_EVENTS SET count = 2000000000000 WHERE kind = 'my_nan_guard' AND count > 0;");
    analyse("recorded-events", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, " 4000000000000 elements affected"));
    release();
    sql("UPDATE AMP_EVENTS SET count = 9223372036854775807 WHERE kind = 'my_nan_guard' AND count > "
        "0;");
    analyse("recorded-events", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, " 9223372036854775807 elements affected"));
    release();
    analyse("recorded-events", 7, 7); // (an aggregate row cut to a focus: its share of them)
    ck_assert_uint_eq(findings.n, 1);
    release();
    // a name longer than the title holds is cut with a "…" that shows the cut
    sql("INSERT INTO AMP_LAYERS VALUES (1, 3, NULL, 'encoder.layers.0.blocks.1.attention.heads."
        "projection.output.dense.with.a.very.long.qualified.name.from.a.deep.module.tree.x');"
        "UPDATE AMP_EVENTS SET layer_id = 3 WHERE kind = 'my_nan_guard';");
    analyse("recorded-events", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].title, "in encoder.layers.0.blocks.1.attention.") &&
                      strstr(findings.v[0].title, "\u2026 linear"),
                  "%s", findings.v[0].title);
    release();
}
END_TEST

START_TEST(run_end_a_stop_is_a_note_and_an_error_exit_a_warning) {
    healthy(10);
    ended(128 + SIGINT, "complete");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "stopped by SIGINT"));
    release();
    // a script that exits 1 on its NaN loss: said, and tied to the root-cause finding
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 9;");
    ended(1, "complete");
    analyse("run-end", 2, 5); // the focus does not hide how the run ended (a note after it)
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    release();
    analyse("run-end", 2, 9);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(findings.v[0].title, "the program failed with exit status 1 after step 9");
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "non-finite loss"));
    release();
    // a Python program's uncaught exception (META exception, under --torch) is said, and a
    // GPU out-of-memory gets its own advice
    sql("INSERT INTO META (key, value, pid) VALUES ('exception', 'torch.OutOfMemoryError: CUDA "
        "out of memory. Tried to allocate 2.00 GiB', 7);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].title, "the program failed with exit status 1 after step 9");
    ck_assert_msg(begins(findings.v[0].detail,
                         "It raised torch.OutOfMemoryError: CUDA out of memory. Tried to "
                         "allocate 2.00 GiB. The findings cover"),
                  "%s", findings.v[0].detail);
    ck_assert_ptr_nonnull(
        strstr(findings.v[0].advice, "The GPU ran out of memory: lower the batch"));
    release();
    // a launcher (torchrun, a lower pid) that raises when its rank has died: the rank's, first
    // recorded, is quoted
    sql("INSERT INTO META (key, value, pid) VALUES ('exception', "
        "'torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED', "
        "3);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_msg(begins(findings.v[0].detail, "It raised torch.OutOfMemoryError"), "%s",
                  findings.v[0].detail);
    release();
    wipe(); // a program that failed before its first step
    ended(3, "complete");
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict,
                         "No training step was recorded: the program failed with exit status 3 "
                         "before its first step."),
                  "verdict: %s", verdict);
    release();
    // the same under --torch with a bridge that did not attach: the program may have trained
    sql("INSERT INTO META (key, value, pid) VALUES ('bridge_error', 'RuntimeError: torch 1.13', "
        "7);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "the program failed with exit status 3 with no step recorded "
                                  "(the PyTorch bridge did not attach)"),
                  "verdict: %s", verdict);
    release();
    // a bridge that attached and found no model that trains (a data worker's or a launcher's
    // no_model is no news when another process recorded steps)
    sql("DELETE FROM META WHERE key = 'bridge_error';"
        "INSERT INTO META (key, value, pid) VALUES ('no_model', 'no module called in training "
        "mode had trainable parameters (requires_grad)', 7);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    ck_assert_str_eq(findings.v[0].title, "the program failed with exit status 3 with no step "
                                          "recorded (the PyTorch bridge found no model to watch)");
    ck_assert_ptr_nonnull(strstr(findings.v[1].detail, "in this run no module called in training "
                                                       "mode had trainable parameters"));
    release();
    steps(3, 65536);
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_str_eq(findings.v[0].title, "the program failed with exit status 3 after step 2");
    release();
}
END_TEST

START_TEST(run_end_an_unfinished_capture_is_a_warning_a_live_one_a_note) {
    healthy(10);
    const pid_t child = test_dead_pid(); // a collector that is gone
    char host[256] = "", buf[512];
    ck_assert_int_eq(gethostname(host, sizeof host - 1), 0);
    snprintf(buf, sizeof buf,
             "UPDATE META SET value = '%d' WHERE key = 'collector_pid';"
             "UPDATE META SET value = '%s' WHERE key = 'host';",
             (int)child, host);
    sql(buf);
    ended(-1, "running");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->title, "capture did not finish"));
    release();
    snprintf(buf, sizeof buf, "UPDATE META SET value = '%d' WHERE key = 'collector_pid';",
             (int)getpid()); // a collector still running: a run in progress
    sql(buf);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_INFO), 1);
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->title, "still being recorded"));
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy so far"), "verdict: %s", verdict);
    release();
    // the pid of a killed collector taken since by a process that does not hold the database:
    // cut short (it read "still being recorded", and the TUI showed it live)
    int closed[2];
    ck_assert_int_eq(pipe(closed), 0);
    const pid_t other = fork();
    if (other == 0) { // its descriptors closed (the database's among them), then it says so
        for (int fd = 3; fd < 1024; fd++)
            if (fd != closed[1]) close(fd);
        if (write(closed[1], "x", 1) != 1) _exit(1);
        close(closed[1]);
        pause();
        _exit(0);
    }
    char byte;
    close(closed[1]);
    ck_assert_int_eq(read(closed[0], &byte, 1), 1);
    close(closed[0]);
    snprintf(buf, sizeof buf, "UPDATE META SET value = '%d' WHERE key = 'collector_pid';",
             (int)other);
    sql(buf);
    analyse(NULL, INT64_MIN, INT64_MAX);
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    ck_assert_uint_eq(count("run-end", AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(first_of("run-end")->title, "capture did not finish"));
    release();
    ended(0, "complete");
    sql("INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, start_ns, status) VALUES "
        "(7, 1, 7 << 24, 'worker', 0, 'truncated'), (8, 1, 8 << 24, 'main', 0, 'complete');");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_str_eq(findings.v[0].title, "1 process recorded less than it wrote");
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "worker (pid 7): its last record was cut"));
    release();
}
END_TEST

// Recording that stopped short of the run (the collector's META capture_error: a full disk) is
// a warning that says why, and the processes it cut short are put down to it, not to a kill.
START_TEST(run_end_a_recording_stopped_short_says_why) {
    healthy(10);
    ended(0, "complete");
    sql("INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, start_ns, status) VALUES "
        "(1, 0, 1 << 24, 'train', 0, 'truncated');"
        "INSERT INTO META VALUES ('capture_error', 'the database could not be written (run.sqlite: "
        "commit: database or disk is full)', 0);");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    ck_assert_str_eq(findings.v[0].title, "recording stopped short of the run after step 9");
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "database or disk is full"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Free space on the disk"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].detail, "lost with the recording that stopped"));
    ck_assert_ptr_null(strstr(findings.v[1].detail, "killed"));
    ck_assert_ptr_null(strstr(findings.v[0].detail, "Only"));
    release();
    // a write that failed took steps 2-8 with it, and the rest kept only their GradScaler's
    // updates (step rows without a loss): said, and the final loss is "not recorded", not "nan"
    sql("DELETE FROM AMP_STEPS WHERE step BETWEEN 2 AND 8;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL;");
    analyse("run-end", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].detail,
                         "Only 3 of steps 0-9 are in the database: the records of a write that "
                         "failed were lost with it."),
                  "%s", findings.v[0].detail);
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "final loss:  not recorded\n"), "%s", t);
    free(t);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// md and html

static void hostile_names(void) {
    attn_overflow();
    sql("UPDATE AMP_LAYERS SET name = '<script>alert(1)</script>|x' WHERE id = 0;"
        "INSERT OR REPLACE INTO META VALUES ('command', './train --tag \"<b>&</b>\"', 0);");
}

START_TEST(md_escapes_user_strings) {
    hostile_names();
    ck_assert_int_eq(CMD(db_path, "--format", "md", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(t, "**Verdict.** Training broke"));
    ck_assert_ptr_nonnull(strstr(t, "| 1 | error | `nonfinite-root-cause` | 3-11 | "
                                    "&lt;script&gt;alert(1)&lt;/script&gt;\\|x | mul |"));
    ck_assert_ptr_null(strstr(t, "<script>"));
    ck_assert_ptr_nonnull(strstr(t, "&lt;b&gt;&amp;&lt;/b&gt;"));
    free(t);
}
END_TEST

// Names that would drive a terminal (clear the screen, set its title, return the cursor and
// recolour): the text report and the diff show their control characters as '?', colour or not.
START_TEST(text_shows_control_characters_of_user_strings) {
    attn_overflow();
    analyse(NULL, INT64_MIN, INT64_MAX);
    const size_t n_stats = model.n_stats, n_ops = model.n_ops;
    ck_assert_uint_gt(n_stats, 0);
    release();
    // bytes 1-6 are the text format's style marks: made '?' as the run is loaded, and the rows
    // whose names held them grouped as before
    sql("UPDATE AMP_TENSOR_STATS SET op = op || char(2); UPDATE AMP_OPS SET op = op || char(4); "
        "UPDATE AMP_EVENTS SET op = op || char(2) WHERE op = 'mul';");
    // (char(155) is U+009B, CSI, a C1 control; char(133) U+0085, NEL, a line break)
    sql("UPDATE AMP_LAYERS SET name = 'evil' || char(27) || '[2J' || char(27) || ']0;pwned' || "
        "char(7) || char(155) || '1m' WHERE id = 0;"
        "INSERT OR REPLACE INTO META VALUES ('command', './train' || char(13) || char(27) || "
        "'[31mfake' || char(10) || 'forged' || char(133), 0);");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_ptr_null(strchr(t, 27));
    ck_assert_ptr_null(strchr(t, 7));
    ck_assert_ptr_nonnull(strstr(t, "layer evil?[2J?]0;pwned??1m, op mul? (fwd)"));
    ck_assert_ptr_nonnull(strstr(t, "command:     ./train??[31mfake?forged?"));
    ck_assert_ptr_null(strstr(t, "\xc2\x9b"));
    ck_assert_ptr_null(strstr(t, "\xc2\x85"));
    free(t);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(model.n_stats, n_stats);
    ck_assert_uint_eq(model.n_ops, n_ops);
    for (size_t i = 0; i < model.n_stats; i++)
        ck_assert_ptr_nonnull(strchr(model.stats[i].op, '?'));
    for (size_t i = 0; i < model.n_ops; i++)
        ck_assert_ptr_nonnull(strchr(model.ops[i].op, '?'));
    char *buf = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&buf, &n);
    report_format_text(mem, &model, &findings, true);
    report_diff_text(mem, &model, &findings, &model, &findings);
    fclose(mem);
    ck_assert_ptr_nonnull(strstr(buf, "\033[1;31merror\033[0m")); // its own colours
    ck_assert_ptr_null(strstr(buf, "\033[2J"));
    ck_assert_ptr_null(strstr(buf, "\033]0"));
    ck_assert_ptr_null(strstr(buf, "\033[31m"));
    ck_assert_ptr_null(strchr(buf, 7));
    ck_assert_ptr_null(strchr(buf, 13));
    ck_assert_ptr_null(strstr(buf, "\xc2\x9b"));
    ck_assert_ptr_null(strstr(buf, "\xc2\x85"));
    ck_assert_ptr_null(strstr(buf, "\nforged")); // the diff's program on one line
    ck_assert_ptr_nonnull(strstr(buf, "evil?[2J?]0;pwned??1m"));
    ck_assert_ptr_nonnull(strstr(buf, "op mul? (fwd)"));
    free(buf);
    // md and html hold no C1 control either (the command's NEL went through them)
    mem = open_memstream(&buf, &n);
    report_format_md(mem, &model, &findings);
    report_format_html(mem, &model, &findings);
    fclose(mem);
    ck_assert_ptr_null(strstr(buf, "\xc2\x9b"));
    ck_assert_ptr_null(strstr(buf, "\xc2\x85"));
    ck_assert_ptr_null(strchr(buf, 27));
    free(buf);
    release();
}
END_TEST

START_TEST(html_is_self_contained_with_plots_and_escaped) {
    hostile_names();
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(t, "<!DOCTYPE html>"));
    ck_assert_ptr_null(strstr(t, "<script"));
    ck_assert_ptr_null(strstr(t, "src="));
    ck_assert_ptr_null(strstr(t, "href="));
    ck_assert_ptr_nonnull(strstr(t, "&lt;script&gt;alert(1)&lt;/script&gt;|x"));
    ck_assert_ptr_nonnull(strstr(t, "&lt;b&gt;&amp;&lt;/b&gt;"));
    const char *plots[] = {"<figcaption>Loss</figcaption>", "<figcaption>Loss scale</figcaption>",
                           "against the fp16 range</figcaption>", "Step time:"};
    for (size_t i = 0; i < 4; i++) ck_assert_msg(strstr(t, plots[i]) != NULL, "no plot %s", plots[i]);
    ck_assert_ptr_null(strstr(t, "Roofline")); // no kernels: no roofline
    ck_assert_ptr_nonnull(strstr(t, "fp16 max 65504"));
    ck_assert_ptr_nonnull(strstr(t, "fill=\"#d62728\"/>")); // skipped steps marked
    const char *bad_numbers[] = {",nan", "\"nan", "\"-nan", ",inf", "\"inf", "\"-inf", ",-nan"};
    for (size_t i = 0; i < 7; i++) // no NaN/inf coordinates
        ck_assert_msg(!strstr(t, bad_numbers[i]), "bad number at %.60s", strstr(t, bad_numbers[i]));
    free(t);
    // a GPU run has the roofline; an empty run still renders
    wipe();
    gpu_run(3, 4, 100000, 1000, 1e9, 1e7);
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(t, "Roofline"));
    ck_assert_ptr_nonnull(strstr(t, "GPU kernels"));
    ck_assert_ptr_nonnull(strstr(t, "median step time</td><td>10.000 ms"));
    ck_assert_ptr_null(strstr(t, " ms</text>")); // no bar clipped
    free(t);
    // a first step 50 times the others: the bars stop at three medians, its time written by it
    sql("UPDATE AMP_STEPS SET start_ns = start_ns + 490000000 WHERE step > 0;"
        "UPDATE AMP_STEPS SET end_ns = end_ns + 490000000;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(t, "median step time</td><td>10.000 ms"));
    const char *label = strstr(t, ">500 ms</text>");
    ck_assert_ptr_nonnull(label);
    // drawn over the bars (after the last of them), with a halo to read it by
    const char *end = strstr(label, "</svg>");
    ck_assert_ptr_nonnull(end);
    const char *bar = strstr(label, "<g shape-rendering=\"crispEdges\">");
    ck_assert_msg(!bar || bar > end, "a bar after the clipped step's time: %.80s", bar);
    ck_assert_ptr_nonnull(strstr(t, "class=\"tick halo\" text-anchor=\"start\">500 ms</text>"));
    free(t);
}
END_TEST

// The figure of the html page t whose caption starts with caption (the test fails without one),
// as a string of its own (free it).
static char *html_figure(const char *t, const char *caption) {
    char key[128];
    snprintf(key, sizeof key, "<figure><figcaption>%s", caption);
    const char *a = strstr(t, key);
    ck_assert_msg(a != NULL, "no figure %s", caption);
    const char *z = strstr(a, "</figure>");
    ck_assert_ptr_nonnull(z);
    return strndup(a, (size_t)(z - a));
}

static size_t occurrences(const char *t, const char *s) {
    size_t n = 0;
    for (const char *p = t; (p = strstr(p, s)); p += strlen(s))
        n++;
    return n;
}

// The x tick labels of a figure, space-separated ("0 10 20 30").
static void x_ticks(const char *fig, char *buf, size_t size) {
    static const char tick[] = "class=\"tick\" text-anchor=\"middle\">";
    buf[0] = 0;
    for (const char *p = fig; (p = strstr(p, tick)); p += strlen(tick)) {
        const char *v = p + strlen(tick);
        size_t k = strlen(buf);
        snprintf(buf + k, size - k, "%s%.*s", k ? " " : "", (int)strcspn(v, "<"), v);
    }
}

// The y tick values of a figure into v; returns how many.
static int y_ticks(const char *fig, double *v, int max) {
    static const char tick[] = "class=\"tick\" text-anchor=\"end\">";
    int n = 0;
    for (const char *p = fig; n < max && (p = strstr(p, tick)); p += strlen(tick))
        v[n++] = strtod(p + strlen(tick), NULL);
    return n;
}

// The y axes are labelled with round values: multiples of 1, 2 or 5 times a power of ten on a
// linear axis (a loss from 3.74 to 4), whole powers of ten on a log one (a scale falling from
// 65536 to 2^-11), not five values evenly spaced between the ends (4.27, 4.2, 4.14 ...).
START_TEST(html_y_ticks_are_round_values) {
    steps(28, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << step), "
        "scale_after = 65536.0 / (1 << (step + 1)), skipped = 1;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *loss = html_figure(t, "Loss"), *scale = html_figure(t, "Loss scale");
    double v[16];
    int n = y_ticks(loss, v, 16);
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(v[i] * 20 - round(v[i] * 20)) < 1e-9, "loss tick %g", v[i]);
    ck_assert_double_eq_tol(v[1] - v[0], 0.05, 1e-9);
    n = y_ticks(scale, v, 16);
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(log10(v[i]) - round(log10(v[i]))) < 1e-9, "scale tick %g", v[i]);
    free(scale);
    free(loss);
    free(t);
}
END_TEST

// A loss that spans three decades is drawn on a log axis, with the step its training diverged at
// dashed; a healthy one on a linear axis without the mark.
START_TEST(html_loss_of_a_divergence_on_a_log_axis) {
    layers();
    const double loss[] = {2.2, 300, 1e6, 80}, norm[] = {7, 100, 1e5, 50};
    loss_steps(loss, norm, 4);
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *fig = html_figure(t, "Loss");
    ck_assert_ptr_nonnull(strstr(fig, "aria-label=\"loss per step on a log axis;"));
    ck_assert_ptr_nonnull(strstr(fig, "<title>training diverged at step 1</title>"));
    double v[16];
    const int n = y_ticks(fig, v, 16);
    ck_assert_int_ge(n, 3);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(log10(v[i]) - round(log10(v[i]))) < 1e-9, "loss tick %g", v[i]);
    free(fig);
    free(t);
    // a spike of four times the first that came back down is no divergence the report tells: no
    // mark either
    wipe();
    layers();
    const double spike[] = {2.2, 9, 2.3, 2.3}, spike_norm[] = {7, 100, 7, 7};
    loss_steps(spike, spike_norm, 4);
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    fig = html_figure(t, "Loss");
    ck_assert_ptr_null(strstr(fig, "diverged"));
    free(fig);
    free(t);
    wipe();
    healthy(8);
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    fig = html_figure(t, "Loss");
    ck_assert_ptr_null(strstr(fig, "log axis"));
    ck_assert_ptr_null(strstr(fig, "diverged"));
    free(fig);
    free(t);
}
END_TEST

// The points of the first polyline of stroke colour in fig: x[i], y[i]; returns how many.
static size_t polyline(const char *fig, const char *colour, double *x, double *y, size_t max) {
    char key[96];
    snprintf(key, sizeof key, "stroke=\"%s\" points=\"", colour);
    const char *p = strstr(fig, key);
    ck_assert_msg(p != NULL, "no polyline %s", colour);
    p += strlen(key);
    size_t n = 0;
    for (char *end; n < max && *p != '"'; p = end) {
        x[n] = strtod(p, &end);
        ck_assert(*end == ',');
        y[n++] = strtod(end + 1, &end);
        while (*end == ' ')
            end++;
    }
    return n;
}

// Runs longer than the plots' 400 points are drawn in buckets, each from all of its steps: a
// non-finite loss, the longest step and a growth of the scale at the last step show wherever
// they fall.
START_TEST(html_long_runs_draw_every_step_of_a_bucket) {
    steps(450, 65536); // buckets of 1-2 steps: steps 16 and 17 share one
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 5;"
        "UPDATE AMP_STEPS SET end_ns = start_ns + 2000 WHERE step = 17;"
        "UPDATE AMP_STEPS SET scale_after = 131072 WHERE step = 449;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *loss = html_figure(t, "Loss"), *scale = html_figure(t, "Loss scale");
    char *time = html_figure(t, "Step time");
    // the non-finite loss of step 5, step 17's time (0.002 ms, the others 0.0009) and the
    // growth at the last step, each said and drawn
    const bool marked = occurrences(loss, "fill=\"#d62728\"><title>") == 1 &&
                        strstr(loss, "<title>step 5: 1 non-finite loss</title>");
    const bool longest =
        strstr(time, "<title>steps 16-17: mean 0.00145 ms, longest 0.002 ms</title>") != NULL;
    double x[1000], y[1000];
    size_t n = polyline(scale, "#2ca02c", x, y, 1000);
    bool grown = n > 2 && fabs(x[n - 1] - 610) < 0.05 && y[n - 1] < y[0] - 1; // at the right edge
    for (size_t i = 0; i + 1 < n; i++)
        grown &= fabs(y[i] - y[0]) < 0.05;
    ck_assert_msg(marked && longest && grown,
                  "non-finite loss marked: %d, longest step said: %d, last growth drawn: %d",
                  marked, longest, grown);
    // and the captions say what a point and a bar are
    ck_assert_ptr_nonnull(strstr(loss, "450 steps in 400 buckets of 1-2 steps: the line is"));
    ck_assert_ptr_nonnull(strstr(time, "a bar is the bucket&#39;s mean step"));
    free(scale);
    free(time);
    free(loss);
    free(t);
}
END_TEST

// The amax plot spans the steps the other plots span (a layer whose outputs turned NaN has no
// finite amax: its line stops), and marks where a layer's forward went NaN/inf.
START_TEST(html_amax_spans_the_steps_and_marks_nonfinite_outputs) {
    healthy(40);
    sql("UPDATE AMP_TENSOR_STATS SET min = NULL, max = NULL, amax = NULL, n_nan = numel "
        "WHERE kind = 'activation' AND step >= 5;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 5;" EVENTS_VALUES
        "(1, 5, 2, 'linear', 'fwd', 'nonfinite_propagated', 'info', 16384, NULL, 'x', 0, 1, 5);");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *loss = html_figure(t, "Loss");
    char *amax = html_figure(t, "Forward amax");
    char loss_ticks[128], amax_ticks[128];
    x_ticks(loss, loss_ticks, sizeof loss_ticks);
    x_ticks(amax, amax_ticks, sizeof amax_ticks);
    const bool marked =
        strstr(amax, "<title>head: NaN/inf only (no finite amax) in steps 5-39") &&
        strstr(amax, "<title>blocks.0.attn: NaN/inf only (no finite amax) in steps 5-39") &&
        strstr(amax, ">NaN/inf output</text>");
    ck_assert_msg(strcmp(amax_ticks, loss_ticks) == 0 && marked,
                  "amax ticks %s, loss ticks %s; NaN/inf marked: %d", amax_ticks, loss_ticks,
                  marked);
    ck_assert_str_eq(loss_ticks, "0 10 20 30");
    free(amax);
    free(loss);
    free(t);
    // a healthy run has no mark and no legend for them
    wipe();
    healthy(40);
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_ptr_null(strstr(t, "NaN/inf output"));
    free(t);
}
END_TEST

// A layer whose output held a few NaN at steps 12, 20 and 27 (its amax finite; one aggregated
// event row for them, first and last) is marked at each of those steps and nowhere else; an
// attention mask's -inf is no mark.
START_TEST(html_amax_marks_each_step_whose_statistics_saw_nan) {
    healthy(40);
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = 3 WHERE kind = 'activation' AND layer_id = 2 "
        "AND step IN (12, 20, 27);" EVENTS_VALUES
        "(1, 12, 2, 'linear', 'fwd', 'nonfinite_propagated', 'info', 3, NULL, 'x', 1, 3, 27);");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *amax = html_figure(t, "Forward amax");
    ck_assert_uint_eq(occurrences(amax, ": NaN/inf in its forward output at step "), 3);
    ck_assert_ptr_nonnull(strstr(amax, "<title>head: NaN/inf in its forward output at step 12<"));
    ck_assert_ptr_nonnull(strstr(amax, "<title>head: NaN/inf in its forward output at step 20<"));
    ck_assert_ptr_nonnull(strstr(amax, "<title>head: NaN/inf in its forward output at step 27<"));
    ck_assert_ptr_null(strstr(amax, "no finite amax"));
    free(amax);
    free(t);
}
END_TEST

// A step whose step record never came (killed after the GradScaler's update) has no loss: no
// non-finite mark. Steps numbered in the 1e17s (by tokens seen) still get their ticks, and the
// page ends (the tick loop stood still where a step is below a double's spacing).
// Scales a producer of its own may record (the record API takes any double) past fp32's range:
// the loss-scale plot stays drawable (its axis and points were NaN for 1e308, inf, 5e-324).
START_TEST(html_scale_plot_of_scales_past_fp32s_range) {
    const char *values[] = {"1e308", "'Inf'", "5e-324", "0", "-1"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        wipe();
        steps(20, 65536);
        char q[160];
        snprintf(q, sizeof q,
                 "UPDATE AMP_STEPS SET scale_after = %s WHERE step = 7;"
                 "UPDATE AMP_STEPS SET scale_before = %s, scale_after = %s WHERE step > 7;",
                 values[i], values[i], values[i]);
        sql(q);
        ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        char *scale = html_figure(t, "Loss scale");
        ck_assert_msg(!strstr(scale, "nan") && !strstr(scale, "inf\""), "%s: %.300s", values[i],
                      scale);
        free(scale);
        free(t);
    }
}
END_TEST

START_TEST(html_steps_without_a_loss_or_numbered_in_the_1e17s) {
    healthy(6);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL, start_ns = NULL, end_ns = NULL "
        "WHERE step = 5;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *loss = html_figure(t, "Loss");
    ck_assert_ptr_null(strstr(loss, "non-finite loss</title>"));
    free(loss);
    free(t);
    wipe();
    steps(6, 65536);
    sql("UPDATE AMP_STEPS SET step = step * 2 + 100000000000000000;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    size_t n;
    t = test_read_file(out_path, &n);
    ck_assert_uint_lt(n, 1 << 20);
    loss = html_figure(t, "Loss");
    char ticks[256];
    x_ticks(loss, ticks, sizeof ticks);
    ck_assert_msg(strstr(ticks, "100000000000000000") != NULL, "ticks: %s", ticks);
    free(loss);
    free(t);
}
END_TEST

// Steps numbered from -5 to INT64_MAX (a program's own numbering, a damaged file): the amax
// buckets span them without overflow (UBSan: signed integer overflow), in every format and diff.
START_TEST(steps_at_the_ends_of_int64_are_bucketed_without_overflow) {
    layers();
    sql("INSERT INTO AMP_STEPS VALUES (1, -5, 0, 900, 4.0, 1, 0.9, 65536, 65536, 0, 0, NULL), "
        "(1, 0, 1000, 1900, 3.9, 1, 0.9, 65536, 65536, 0, 0, NULL), "
        "(1, 9223372036854775807, 2000, 2900, NULL, 0, 0.9, NULL, NULL, 0, 0, NULL);"
        "INSERT INTO AMP_TENSOR_STATS SELECT 1, step, 0, 'mul', 'activation', 'f16', 'f16', 64, "
        "-6, 6, 6, 0, 0, 0, 0, 0, 0 FROM AMP_STEPS;"
        "UPDATE AMP_TENSOR_STATS SET amax = NULL, n_posinf = 64 WHERE step > 0;" EVENTS_VALUES
        "(1, 9223372036854775807, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 64, 65440, "
        "NULL, 0, 1, 9223372036854775807),"
        "(1, 0, 0, 'mul', 'fwd', 'nonfinite_propagated', 'info', 64, NULL, NULL, 1, 2, "
        "9223372036854775807);");
    // kernels timed at the ends too (a damaged file): no duration or gap of them overflows
    sql("INSERT INTO StringIds VALUES (1, 'nvjet_sm90_tst_gemm');" TEST_KERNEL_INSERT
        "VALUES (-5, 9223372036854775807, 0, 1, 7, 1, " GPID ", 1, 1, 32, 1, 1, 1, 128, 1, 1, "
        "0, 0, 0, 0, 0), (-9223372036854775807, 10, 0, 1, 7, 2, " GPID ", 1, 1, 32, 1, 1, 1, "
        "128, 1, 1, 0, 0, 0, 0, 1), (9223372036854775806, 9223372036854775807, 0, 1, 7, 3, " GPID
        ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 2), (-4611686018427387903, "
        "-4611686018427387903, 0, 1, 7, 4, " GPID ", 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, "
        "3), (4611686018427387903, 4611686018427387903, 0, 1, 7, 5, " GPID ", 1, 1, 32, 1, 1, "
        "1, 128, 1, 1, 0, 0, 0, 0, 4);"
        "UPDATE AMP_STEPS SET end_ns = 9223372036854775807 WHERE step = 0;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    // (INT64_MAX + 5) / 200 + 1: steps -5 and 0 in the first bucket, INT64_MAX in the last
    ck_assert_int_eq(model.amax_width, 46116860184273880LL);
    ck_assert_uint_eq(model.n_amax, 2);
    ck_assert_int_eq(report_amax_bucket(&model, INT64_MAX), 199);
    ck_assert_int_eq(report_amax_bucket(&model, -5), 0);
    ck_assert_int_eq(report_amax_bucket(&model, INT64_MIN), -200); // (floored)
    ck_assert_int_eq(first_of("nonfinite-root-cause")->first_step, INT64_MAX);
    char *buf = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&buf, &n);
    report_diff_text(mem, &model, &findings, &model, &findings);
    report_diff_json(mem, &model, &findings, &model, &findings);
    fclose(mem);
    ck_assert_ptr_nonnull(strstr(buf, "Both runs broke the same way"));
    free(buf);
    release();
    const char *formats[] = {"text", "json", "md", "html"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(CMD(db_path, "--format", formats[i], "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        ck_assert_msg(strstr(t, "9223372036854775807"), "%s: %s", formats[i], t);
        free(t);
    }
}
END_TEST

// Several processes: the loss, scale and step-time plots are of the one the top finding is about
// (here the second, whose losses went NaN), their captions name it; the amax legend tells the
// processes' layers apart.
START_TEST(html_plots_of_several_processes_follow_the_one_that_broke) {
    two_trainings();
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *loss = html_figure(t, "Loss \u2014 tiny_gpt (pid 7), 1 of 2 processes</figcaption>");
    ck_assert_ptr_nonnull(strstr(loss, "<title>step 3: 1 non-finite loss</title>"));
    free(loss);
    free(html_figure(t, "Loss scale \u2014 tiny_gpt (pid 7), 1 of 2 processes"));
    free(html_figure(t, "Step time: where the host time went \u2014 tiny_gpt (pid 7), 1 of 2"));
    ck_assert_ptr_nonnull(strstr(t, "plots are of tiny_gpt (pid 7), the one the top finding is "
                                    "about; the amax plot has the layers of all of them."));
    char *amax = html_figure(t, "Forward amax");
    ck_assert_ptr_nonnull(strstr(amax, "(P1 is tiny_gpt (pid 1); P2 is tiny_gpt (pid 7))"));
    ck_assert_ptr_nonnull(strstr(amax, "class=\"tick\">head [P1]</text>"));
    ck_assert_ptr_nonnull(strstr(amax, "class=\"tick\">head [P2]</text>"));
    ck_assert_ptr_nonnull(strstr(amax, "<title>blocks.0.attn of tiny_gpt (pid 7): NaN/inf in"));
    free(amax);
    free(t);
    // a healthy run of two processes: the first one's, named
    wipe();
    healthy(6);
    sql("CREATE TEMP TABLE t AS SELECT * FROM AMP_STEPS; UPDATE t SET pid = 2;"
        "INSERT INTO AMP_STEPS SELECT * FROM t; DROP TABLE t;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    free(html_figure(t, "Loss \u2014 pid 1, 1 of 2 processes</figcaption>"));
    ck_assert_ptr_nonnull(strstr(t, "plots are of pid 1, the first;"));
    free(t);
}
END_TEST

// Steps are whole numbers: a run of one or three steps gets each step as a tick once, and a
// single point is drawn (a line of one point is not).
START_TEST(html_short_runs_have_whole_step_ticks_and_visible_points) {
    static const char *const ticks[] = {"0", "0 1 2"};
    for (int run = 0; run < 2; run++) {
        wipe();
        healthy(run ? 3 : 1);
        ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
        char *t = test_read_file(out_path, NULL);
        const char *captions[] = {"Loss", "Loss scale", "Forward amax", "Step time"};
        for (size_t i = 0; i < 4; i++) {
            char *fig = html_figure(t, captions[i]);
            char got[128];
            x_ticks(fig, got, sizeof got);
            ck_assert_msg(strcmp(got, ticks[run]) == 0, "%s, %d steps: ticks %s", captions[i],
                          run ? 3 : 1, got);
            if (run == 0 && i < 3)
                ck_assert_msg(strstr(fig, "<circle"), "%s: no point", captions[i]);
            free(fig);
        }
        free(t);
    }
}
END_TEST

// The times written above cut-off step-time bars never overlap: one that would is left out (its
// bar's tooltip still says it), and none runs out of the plot.
START_TEST(html_cut_off_bar_labels_do_not_overlap) {
    steps(20, 65536);
    sql("UPDATE AMP_STEPS SET end_ns = start_ns + 100000 WHERE step BETWEEN 8 AND 12 OR "
        "step = 19;");
    ck_assert_int_eq(CMD(db_path, "--format", "html", "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    char *fig = html_figure(t, "Step time");
    static const char start[] = "<text x=\"", anchor[] = "text-anchor=\"start\">";
    double last_end = -1e9;
    size_t labels = 0;
    for (const char *p = fig; (p = strstr(p, start)); p++) {
        char *end;
        const double x = strtod(p + strlen(start), &end);
        const char *text = strchr(end, '>') + 1;
        const size_t len = strcspn(text, "<");
        if (len < 3 || strncmp(text + len - 3, " ms", 3) != 0) continue; // not a time
        ck_assert_msg(strncmp(text - strlen(anchor), anchor, strlen(anchor)) == 0, "%.80s", p);
        ck_assert_msg(x >= last_end, "label at %.1f overlaps the one before (to %.1f)", x,
                      last_end);
        last_end = x + 6.0 * (double)len; // 6 px a character at least (11px font)
        ck_assert_double_le(last_end, 610);
        labels++;
    }
    ck_assert_uint_ge(labels, 2); // the first of the run of long steps, and the last step
    ck_assert_uint_le(labels, 4);
    ck_assert_uint_eq(occurrences(fig, "<title>step 10: 0.1 ms</title>"), 1);
    free(fig);
    free(t);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// End to end: the samples' --fault runs and their healthy twins

// Records `sample ARGS` with ampprobe run and writes its json report to out_path.
static void record_and_report(const char *sample, const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s/ampprobe run --force -o %s -- %s/samples/%s --quiet --steps 8 %s >/dev/null 2>&1 "
             "&& %s/ampprobe report %s --format json -o %s",
             AMP_BINARY_DIR, db_path, AMP_BINARY_DIR, sample, args, AMP_BINARY_DIR, db_path,
             out_path);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

// The json of the first finding (up to its title), or "" when there is none.
static char first_buf[1024];
static const char *first_finding(const char *json) {
    const char *f = strstr(json, "\"findings\": [\n  {");
    first_buf[0] = 0;
    if (!f) return first_buf;
    const char *end = strstr(f, "\"title\"");
    snprintf(first_buf, sizeof first_buf, "%.*s", end ? (int)(end - f) : 200, f);
    return first_buf;
}

static const struct fault_case {
    const char *sample, *args, *rule, *severity, *steps, *layer, *op, *advice;
} fault_cases[] = {
    {"tiny_gpt", "--precision fp16 --fault attn-overflow", "nonfinite-root-cause", "error",
     "{\"first\": 3,", "\"blocks.1.attn\"", "\"mul\"", "1/sqrt(d_head)"},
    {"mlp", "--precision fp16 --fault nan-input", "nonfinite-root-cause", "error",
     "{\"first\": 5, \"last\": 5}", "\"fc1\"", "\"to\"", "Sanitize the data"},
    {"simple_cnn", "--precision fp16 --fault log-zero", "nonfinite-root-cause", "error",
     "{\"first\": 5,", "null", "\"log\"", "clamp"},
    {"mlp", "--precision fp16 --fault grad-underflow", "grad-underflow", "warning",
     "{\"first\": 0,", "\"fc1\"", "null", "mis-normalised loss"},
    {"tiny_gpt", "--precision fp16 --fault scale-thrash", "loss-scale", "warning",
     "{\"first\": 2,", "null", "null", "growth_interval=2000"},
};

START_TEST(fault_runs_name_cause_layer_and_step) {
    const struct fault_case *c = &fault_cases[_i];
    record_and_report(c->sample, c->args);
    char *j = test_read_file(out_path, NULL);
    const char *f = first_finding(j);
    char want[256];
    snprintf(want, sizeof want, "{\"rule\": \"%s\", \"severity\": \"%s\", \"steps\": %s", c->rule,
             c->severity, c->steps);
    ck_assert_msg(strstr(f, want) != NULL, "%s %s: first finding %s, want %s", c->sample, c->args,
                  f, want);
    snprintf(want, sizeof want, "\"layer\": %s, \"op\": %s,", c->layer, c->op);
    ck_assert_msg(strstr(f, want) != NULL, "%s %s: first finding %s, want %s", c->sample, c->args,
                  f, want);
    const char *advice = strstr(j, "\"advice\": ");
    ck_assert_msg(advice && strstr(advice, c->advice) && strstr(advice, c->advice) < strstr(advice, "}"),
                  "%s %s: advice lacks %s", c->sample, c->args, c->advice);
    free(j);
}
END_TEST

// The fault runs' twins without the fault (fp16), and bf16/fp32 runs of the two fast samples.
static const char *const healthy_cases[][2] = {
    {"mlp", "--precision fp16"},     {"simple_cnn", "--precision fp16"},
    {"tiny_gpt", "--precision fp16"}, {"mlp", "--precision bf16"},
    {"tiny_gpt", "--precision bf16"}, {"mlp", "--precision fp32"},
    {"tiny_gpt", "--precision fp32"},
};

START_TEST(healthy_twins_are_clean) {
    const char *sample = healthy_cases[_i][0], *args = healthy_cases[_i][1];
    record_and_report(sample, args);
    char *j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"counts\": {\"error\": 0, \"warning\": 0,") != NULL,
                  "%s %s is not clean: %s", sample, args, first_finding(j));
    ck_assert_ptr_nonnull(strstr(j, "\"verdict\": \"Healthy"));
    free(j);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The command: formats, focus, errors

START_TEST(json_carries_the_stable_keys) {
    attn_overflow();
    sql("UPDATE AMP_STEPS SET mem_peak_bytes = 3733245182 WHERE step = 2;");
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(j, "\"peak_memory\": 3733245182,")); // (not 3.73324518e+09)
    ck_assert_ptr_nonnull(strstr(j, "\"findings\": ["));
    ck_assert_ptr_nonnull(strstr(j, "{\"rule\": \"nonfinite-root-cause\", \"severity\": \"error\", "
                                    "\"steps\": {\"first\": 3, \"last\": 11}, "
                                    "\"layer\": \"blocks.0.attn\", \"op\": \"mul\", \"phase\": \"fwd\""));
    ck_assert_ptr_nonnull(strstr(j, "\"evidence\": {\"steps_affected\": 9, "));
    ck_assert_ptr_nonnull(strstr(j, "\"input_amax\": 6.26953"));
    ck_assert_ptr_nonnull(strstr(j, "\"advice\": \"Scale the attention logits"));
    ck_assert_ptr_nonnull(strstr(j, "\"counts\": {\"error\": 1, "));
    ck_assert_ptr_nonnull(strstr(j, "\"final_loss\": null"));
    // balanced, and no bare NaN/inf
    int depth = 0;
    bool in_str = false;
    for (const char *p = j; *p; p++) {
        if (in_str) {
            if (*p == '\\') p++;
            else if (*p == '"') in_str = false;
        } else if (*p == '"') in_str = true;
        else if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') ck_assert_int_ge(--depth, 0);
        else
            ck_assert_msg(!strchr("nN", *p) || begins(p, "null"), "bare token at %.20s", p);
    }
    ck_assert_int_eq(depth, 0);
    free(j);
}
END_TEST

// Names as a program may record them: longer than a finding keeps (cut between two characters
// and marked), with bytes that are not UTF-8, with a newline. The json stays UTF-8 (iconv, which
// knows nothing of ampprobe, reads it whole); no name breaks a line of the text.
START_TEST(names_that_are_long_broken_or_multiline_stay_in_place) {
    attn_overflow();
    // 'é' (2 bytes) 200 times: a cut at an even byte count would end inside one
    sql("UPDATE AMP_LAYERS SET name = 'x' || replace(printf('%.200c', '.'), '.', 'é') WHERE id = 0;"
        "UPDATE AMP_EVENTS SET op = 'mul' || CAST(X'FFC3' AS TEXT) || char(10) || 'forged' "
        "WHERE op = 'mul';");
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    char check[256];
    snprintf(check, sizeof check, "iconv -f UTF-8 -t UTF-8 %s >/dev/null", out_path);
    ck_assert_int_eq(system(check), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(j, "\"layer\": \"xéé"));
    ck_assert_ptr_nonnull(strstr(j, "éé…\", \"op\": \"mul???forged\""));
    free(j);
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_ptr_null(strstr(t, "\nforged"));
    ck_assert_ptr_nonnull(strstr(t, "op mul???forged (fwd)"));
    free(t);
    // the command line, whose quoted argument holds a newline
    sql("DELETE FROM META WHERE key = 'command';"
        "INSERT INTO META (key, value, pid) VALUES ('command', 'train --tag ''a' || char(10) || "
        "'forged''', 0);");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "  command:     train --tag 'a?forged'\n"), "%s", t);
    free(t);
}
END_TEST

START_TEST(text_puts_the_verdict_first_without_colour_in_a_file) {
    attn_overflow();
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    const char *verdict = strstr(t, "Training broke: fp16 overflow in blocks.0.attn mul at step 3");
    const char *findings_at = strstr(t, "Findings");
    const char *run_at = strstr(t, "\nRun\n");
    ck_assert_ptr_nonnull(verdict);
    ck_assert_ptr_nonnull(findings_at);
    ck_assert_ptr_nonnull(run_at);
    ck_assert(verdict < findings_at && findings_at < run_at);
    // the other errors and warnings counted by kind (the scale's collapse)
    const char *more = strstr(verdict, "(1 warning below.)");
    ck_assert_msg(more && more < findings_at, "%.400s", verdict);
    ck_assert_ptr_nonnull(strstr(t, "12 (0-11), 9 skipped"));
    ck_assert_ptr_null(strchr(t, '\033'));
    free(t);
}
END_TEST

START_TEST(rule_and_steps_narrow_the_report) {
    attn_overflow();
    ck_assert_int_eq(CMD(db_path, "--rule", "loss-scale", "--format", "json", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_ptr_null(strstr(j, "\"rule\": \"nonfinite-root-cause\""));
    ck_assert_ptr_nonnull(strstr(j, "\"rule\": \"loss-scale\""));
    ck_assert_ptr_nonnull(strstr(j, "Only rule loss-scale ran (--rule)"));
    free(j);
    // a rule with nothing to say: its verdict is not "Healthy", the others did not run
    ck_assert_int_eq(CMD(db_path, "--rule", "grad-underflow", "-o", out_path), 0);
    j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "No error or warning from rule grad-underflow in 12 steps. Only that "
                            "rule ran"),
                  "%s", j);
    ck_assert_ptr_null(strstr(j, "Healthy"));
    free(j);
    analyse(NULL, 0, 2); // before the fault
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    analyse(NULL, 5, 7); // inside it: the root is still found, from the aggregate row
    ck_assert_str_eq(findings.v[0].rule, "nonfinite-root-cause");
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.attn");
    release();
}
END_TEST

START_TEST(bad_files_and_usage_exit_2_with_one_line) {
    char missing[256], junk[256], foreign[256];
    snprintf(missing, sizeof missing, "%s/missing.sqlite", tmpdir);
    snprintf(junk, sizeof junk, "%s/junk.txt", tmpdir);
    snprintf(foreign, sizeof foreign, "%s/foreign.sqlite", tmpdir);
    FILE *f = fopen(junk, "w");
    fputs("not a database at all, just text that is long enough to have a header......"
          "..............................................................\n", f);
    fclose(f);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(foreign, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1);", NULL, NULL,
                                  NULL), SQLITE_OK);
    sqlite3_close(db);

    const char *files[] = {missing, junk, foreign};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(CMD(files[i]), 2);
        char *e = test_read_file(err_path, NULL);
        ck_assert_msg(strstr(e, files[i]) != NULL, "stderr does not name the file: %s", e);
        ck_assert_msg(strchr(e, '\n') == e + strlen(e) - 1, "not one line: %s", e);
        free(e);
    }
    ck_assert_int_eq(CMD(NULL), 2);
    ck_assert_int_eq(CMD(db_path, "--rule", "no-such-rule"), 2);
    char *e = test_read_file(err_path, NULL);
    ck_assert_ptr_nonnull(strstr(e, "no-such-rule"));
    free(e);
    ck_assert_int_eq(CMD(db_path, "--steps", "9:3"), 2);
    ck_assert_int_eq(CMD(db_path, "--steps", " 3:5"), 2);
    ck_assert_int_eq(CMD(db_path, "--steps", "+3:5"), 2);
    ck_assert_int_eq(CMD(db_path, "--format", "pdf"), 2);
    ck_assert_int_eq(CMD(db_path, "--bogus"), 2);
    ck_assert_int_eq(CMD(db_path, "--fail-on", "fatal"), 2);
    e = test_read_file(err_path, NULL);
    ck_assert_ptr_nonnull(strstr(e, "--fail-on: 'fatal'"));
    free(e);
    ck_assert_int_eq(CMD(db_path, "--fail-on"), 2);
    ck_assert_int_eq(CMD(db_path, "-o", db_path), 2); // over the database it reads
    e = test_read_file(err_path, NULL);
    ck_assert_ptr_nonnull(strstr(e, "which this command reads; name another file"));
    free(e);
    // its side files, also those SQLite has yet to make, by any spelling of their name
    char side[160];
    struct stat sb;
    snprintf(side, sizeof side, "%s-journal", db_path);
    ck_assert_int_eq(CMD(db_path, "-o", side), 2);
    ck_assert_int_ne(stat(side, &sb), 0);
    snprintf(side, sizeof side, "%s/./run.sqlite-wal", tmpdir);
    unlink(side);
    ck_assert_int_eq(CMD(db_path, "-o", side), 2);
    ck_assert_int_ne(stat(side, &sb), 0);
    e = test_read_file(err_path, NULL);
    ck_assert_ptr_nonnull(strstr(e, "is the SQLite side file of"));
    free(e);
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0); // the database still one
    // each option once (a second --rule would silently win over the first)
    ck_assert_int_eq(CMD(db_path, "--rule", "loss-scale", "--rule", "run-end"), 2);
    e = test_read_file(err_path, NULL);
    ck_assert_ptr_nonnull(strstr(e, "--rule is given twice"));
    free(e);
    ck_assert_int_eq(CMD(db_path, "-o", out_path, "--output", out_path), 2);
}
END_TEST

// A value after '=' as nsys takes it (--format=json), the long name of -o, and a FILE after "--".
START_TEST(option_values_after_an_equals_sign) {
    healthy(4);
    char arg[300];
    snprintf(arg, sizeof arg, "--output=%s", out_path);
    ck_assert_int_eq(CMD("--format=json", "--rule=loss-scale", "--steps=1:2", arg, "--", db_path),
                     0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"verdict\": \"No error or warning from rule loss-scale in 2 steps"),
                  "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format="), 2);
}
END_TEST

// --fail-on SEV, a gate for CI: exit status 1 when a finding of that severity or worse is
// reported (within --rule and --steps), the report written all the same.
START_TEST(fail_on_gates_by_severity) {
    attn_overflow(); // healthy steps 0-2, errors from step 3 on
    ck_assert_int_eq(CMD(db_path, "--fail-on", "error", "-o", out_path), 1);
    char *t = test_read_file(out_path, NULL);
    ck_assert_ptr_nonnull(strstr(t, "error [nonfinite-root-cause]"));
    free(t);
    ck_assert_int_eq(CMD(db_path, "--fail-on", "warning", "--format", "json", "-o", out_path), 1);
    ck_assert_int_eq(CMD(db_path, "--fail-on", "warning", "--steps", "0:2", "-o", out_path), 0);
    ck_assert_int_eq(CMD(db_path, "--fail-on", "error", "--rule", "grad-underflow", "-o", out_path),
                     0);
}
END_TEST

Suite *report_suite(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("rules");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, event_spans_answer_per_process);
    tcase_add_test(tc, healthy_run_has_no_error_or_warning);
    tcase_add_test(tc, parameters_trained_outside_the_watched_model_are_named);
    tcase_add_test(tc, sampled_statistics_are_said);
    tcase_add_test(tc, a_database_without_memory_peaks_reads);
    tcase_add_test(tc, a_step_without_its_step_record_has_no_nonfinite_loss);
    tcase_add_test(tc, ranks_are_counted_as_processes);
    tcase_add_test(tc, a_compiled_model_says_what_is_not_recorded);
    tcase_add_test(tc, a_focus_past_the_run_says_where_its_steps_end);
    tcase_add_test(tc, a_focus_after_the_first_error_says_where_it_was);
    tcase_add_test(tc, a_fault_every_rank_shows_is_one_finding);
    tcase_add_test(tc, a_finding_of_one_of_several_processes_names_it);
    tcase_add_test(tc, empty_database_degrades_gracefully);
    tcase_add_test(tc, nonfinite_attention_overflow_is_the_first_finding);
    tcase_add_test(tc, nonfinite_module_names_the_module_and_the_one_around_it);
    tcase_add_test(tc, nonfinite_input_and_log_zero_are_explained);
    tcase_add_test(tc, nonfinite_steps_after_an_unskipped_step_are_counted);
    tcase_add_test(tc, nonfinite_after_a_divergence_blames_the_training);
    tcase_add_test(tc, divergence_with_finite_losses_is_found);
    tcase_add_test(tc, skips_after_a_divergence_point_at_it);
    tcase_add_test(tc, nonfinite_after_weights_grew_blames_the_training_first);
    tcase_add_test(tc, nonfinite_weights_as_a_step_began_are_named);
    tcase_add_test(tc, nonfinite_after_a_weight_blowup_blames_the_update);
    tcase_add_test(tc, a_focus_inside_a_nonfinite_run_points_before_it);
    tcase_add_test(tc, nonfinite_counts_come_from_the_step_records);
    tcase_add_test(tc, nonfinite_counts_sparse_step_numbers);
    tcase_add_test(tc, nonfinite_steps_affected_count_each_step_once);
    tcase_add_test(tc, a_focus_cuts_an_aggregate_row_to_its_steps);
    tcase_add_test(tc, a_focus_on_healthy_steps_inside_an_aggregate_row_is_healthy);
    tcase_add_test(tc, nonfinite_weights_poisoned_by_a_scale_without_reciprocal);
    tcase_add_test(tc, nonfinite_sqrt_of_a_negative_value_is_explained);
    tcase_add_test(tc, nonfinite_input_beyond_f16_range_is_explained);
    tcase_add_test(tc, nonfinite_cast_beyond_f16_range_is_explained);
    tcase_add_test(tc, nonfinite_sum_overflow_is_explained);
    tcase_add_test(tc, nonfinite_loss_of_a_masked_logit_is_explained);
    tcase_add_test(tc, nonfinite_loss_with_every_target_ignored_is_explained);
    tcase_add_test(tc, nonfinite_std_of_a_single_value_is_explained);
    tcase_add_test(tc, nonfinite_exp_past_f32_range_is_explained);
    tcase_add_test(tc, nonfinite_loss_of_the_steps_alone_is_an_error);
    tcase_add_test(tc, healthy_without_statistics_says_what_was_not_checked);
    tcase_add_test(tc, huge_counts_do_not_overflow);
    tcase_add_test(tc, nonfinite_softmax_of_a_row_masked_whole_is_explained);
    tcase_add_test(tc, nonfinite_pow_overflow_is_not_a_pow_of_zero);
    tcase_add_test(tc, nonfinite_overflow_to_minus_inf_under_a_finite_loss);
    tcase_add_test(tc, nonfinite_in_an_undeclared_layer_says_so);
    tcase_add_test(tc, nonfinite_div_by_small_values_is_an_overflow);
    tcase_add_test(tc, nonfinite_div_by_a_range_with_zero_is_of_zero);
    tcase_add_test(tc, nonfinite_input_first_seen_by_a_cast_is_explained);
    tcase_add_test(tc, nonfinite_benign_grad_overflow_is_not_an_error);
    tcase_add_test(tc, nonfinite_inf_gradient_at_a_pole_is_an_error);
    tcase_add_test(tc, nonfinite_grad_overflow_begun_before_the_focus_is_not_an_error);
    tcase_add_test(tc, nonfinite_gradient_through_a_left_out_value_is_an_error);
    tcase_add_test(tc, nonfinite_producer_without_a_phase_is_judged_by_its_step);
    tcase_add_test(tc, scale_sawtooth_is_a_warning);
    tcase_add_test(tc, scale_collapse_and_stuck_low_are_warnings);
    tcase_add_test(tc, scale_low_in_a_run_shorter_than_the_growth_interval_is_an_info);
    tcase_add_test(tc, scale_calibration_and_stable_scale_are_not_warnings);
    tcase_add_test(tc, a_gradscaler_in_bf16_is_an_info);
    tcase_add_test(tc, lost_updates_of_16_bit_weights_are_named);
    tcase_add_test(tc, scale_clipped_while_scaled_is_a_warning);
    tcase_add_test(tc, scale_skip_rate_advice_follows_the_cause);
    tcase_add_test(tc, overflow_headroom_near_f16_max_is_a_warning);
    tcase_add_test(tc, overflow_headroom_tells_the_outputs_before_the_overflow);
    tcase_add_test(tc, overflow_headroom_ignores_fp32_ops_and_overflowed_outputs);
    tcase_add_test(tc, overflow_headroom_of_an_fp32_run_is_a_note_beyond_the_max);
    tcase_add_test(tc, overflow_absorbed_inside_a_layer_is_a_warning);
    tcase_add_test(tc, the_rules_read_phrases_the_recorders_write);
    tcase_add_test(tc, an_optimizer_stepped_outside_the_scaler_is_named);
    tcase_add_test(tc, grad_underflow_names_the_layer_and_a_scale);
    tcase_add_test(tc, grad_underflow_at_a_scale_above_the_recommended_one);
    tcase_add_test(tc, grad_underflow_scale_is_of_the_16_bit_gradients);
    tcase_add_test(tc, grad_underflow_names_the_steps_it_counted);
    tcase_add_test(tc, grad_underflow_and_scale_are_of_each_model);
    tcase_add_test(tc, grad_underflow_weighs_what_reaches_the_optimizer);
    tcase_add_test(tc, grad_underflow_advice_without_a_scaler);
    tcase_add_test(tc, finding_titles_cut_names_as_utf8);
    tcase_add_test(tc, grad_underflow_counts_vanished_gradients_not_structural_zeros);
    tcase_add_test(tc, grad_underflow_leaves_out_a_broken_step);
    tcase_add_test(tc, grad_underflow_in_bf16_counts_no_zero_gradient);
    tcase_add_test(tc, grad_underflow_names_vanishing_gradients);
    tcase_add_test(tc, grad_underflow_of_vanishing_gradients_at_the_highest_scale);
    tcase_add_test(tc, json_carries_the_stable_keys);
    tcase_add_test(tc, names_that_are_long_broken_or_multiline_stay_in_place);
    tcase_add_test(tc, text_puts_the_verdict_first_without_colour_in_a_file);
    tcase_add_test(tc, rule_and_steps_narrow_the_report);
    tcase_add_test(tc, bad_files_and_usage_exit_2_with_one_line);
    tcase_add_test(tc, option_values_after_an_equals_sign);
    tcase_add_test(tc, precision_fp32_gemm_under_autocast_is_a_warning);
    tcase_add_test(tc, precision_healthy_autocast_and_fp32_runs_are_quiet);
    tcase_add_test(tc, precision_upcasts_and_casts_are_notes_on_the_cpu);
    tcase_add_test(tc, gemm_dimensions_are_read_from_the_shapes);
    tcase_add_test(tc, precision_odd_gemm_dimensions_are_named);
    tcase_add_test(tc, precision_odd_gemm_kernel_time_is_told);
    tcase_add_test(tc, roofline_slow_compute_layer_is_a_warning);
    tcase_add_test(tc, roofline_uses_the_calibrated_ceilings);
    tcase_add_test(tc, roofline_efficient_kernels_are_a_note);
    tcase_add_test(tc, roofline_op_flops_go_to_gemm_kernels);
    tcase_add_test(tc, kernels_take_the_layer_of_most_of_their_time);
    tcase_add_test(tc, kernels_of_a_real_length_are_kept_damaged_ones_left_out);
    tcase_add_test(tc, kernel_names_that_are_gemms);
    tcase_add_test(tc, roofline_places_kernels_by_hardware_counters);
    tcase_add_test(tc, gpu_idle_gaps_are_a_warning);
    tcase_add_test(tc, gpu_idle_is_each_gpus);
    tcase_add_test(tc, step_busy_is_its_own_process_gpus);
    tcase_add_test(tc, gpu_idle_back_to_back_kernels_are_quiet);
    tcase_add_test(tc, gpu_idle_leaves_the_warm_up_out);
    tcase_add_test(tc, h2d_pageable_copies_are_a_warning);
    tcase_add_test(tc, h2d_small_pinned_copies_are_quiet);
    tcase_add_test(tc, h2d_copies_of_no_weight_are_quiet);
    tcase_add_test(tc, host_sync_every_few_ops_is_a_warning);
    tcase_add_test(tc, sync_advice_is_given_once);
    tcase_add_test(tc, gpu_idle_advice_follows_the_gaps);
    tcase_add_test(tc, host_sync_once_per_step_is_quiet);
    tcase_add_test(tc, host_sync_leaves_out_incomplete_records);
    tcase_add_test(tc, host_sync_without_steps_is_per_process);
    tcase_add_test(tc, host_sync_with_the_gpu_busy_is_a_note);
    tcase_add_test(tc, amp_payoff_launch_bound_amp_run_is_a_warning);
    tcase_add_test(tc, amp_payoff_of_the_warm_up_alone_claims_no_busy_share);
    tcase_add_test(tc, amp_payoff_busy_gemm_amp_run_is_quiet);
    tcase_add_test(tc, nccl_kernels_are_communication);
    tcase_add_test(tc, amp_payoff_projects_a_cpu_run_as_a_note);
    tcase_add_test(tc, run_end_a_clean_exit_is_quiet);
    tcase_add_test(tc, run_end_a_crash_is_an_error_and_a_kill_a_warning);
    tcase_add_test(tc, run_end_after_the_focus_is_a_note);
    tcase_add_test(tc, run_end_an_exit_above_128_is_no_signal_when_the_launcher_says_so);
    tcase_add_test(tc, run_end_names_the_processes_left_running);
    tcase_add_test(tc, recorded_events_of_a_producers_own_kinds_are_findings);
    tcase_add_test(tc, a_run_without_steps_under_the_launcher_says_what_records_them);
    tcase_add_test(tc, run_end_a_stop_is_a_note_and_an_error_exit_a_warning);
    tcase_add_test(tc, run_end_an_unfinished_capture_is_a_warning_a_live_one_a_note);
    tcase_add_test(tc, run_end_a_recording_stopped_short_says_why);
    tcase_add_test(tc, md_escapes_user_strings);
    tcase_add_test(tc, text_shows_control_characters_of_user_strings);
    tcase_add_test(tc, fail_on_gates_by_severity);
    tcase_add_test(tc, html_is_self_contained_with_plots_and_escaped);
    tcase_add_test(tc, html_long_runs_draw_every_step_of_a_bucket);
    tcase_add_test(tc, html_y_ticks_are_round_values);
    tcase_add_test(tc, html_loss_of_a_divergence_on_a_log_axis);
    tcase_add_test(tc, html_amax_spans_the_steps_and_marks_nonfinite_outputs);
    tcase_add_test(tc, html_amax_marks_each_step_whose_statistics_saw_nan);
    tcase_add_test(tc, html_steps_without_a_loss_or_numbered_in_the_1e17s);
    tcase_add_test(tc, html_scale_plot_of_scales_past_fp32s_range);
    tcase_add_test(tc, steps_at_the_ends_of_int64_are_bucketed_without_overflow);
    tcase_add_test(tc, html_plots_of_several_processes_follow_the_one_that_broke);
    tcase_add_test(tc, html_short_runs_have_whole_step_ticks_and_visible_points);
    tcase_add_test(tc, html_cut_off_bar_labels_do_not_overlap);
    suite_add_tcase(s, tc);

    TCase *e2e = tcase_create("samples");
    tcase_add_checked_fixture(e2e, setup, teardown);
    tcase_set_timeout(e2e, 60); // a sample run takes about a second; more on a loaded machine
    tcase_add_loop_test(e2e, fault_runs_name_cause_layer_and_step, 0,
                        (int)(sizeof fault_cases / sizeof fault_cases[0]));
    tcase_add_loop_test(e2e, healthy_twins_are_clean, 0,
                        (int)(sizeof healthy_cases / sizeof healthy_cases[0]));
    suite_add_tcase(s, e2e);

    TCase *readers = tcase_create("readers");
    tcase_add_checked_fixture(readers, setup, teardown);
    tcase_set_timeout(readers, 300); // every column three ways, each read by every reader
    tcase_add_test(readers, odd_values_in_a_gpu_run_are_read_or_refused);
    suite_add_tcase(s, readers);
    return s;
}
