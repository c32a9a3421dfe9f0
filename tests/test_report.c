/*
 * test_report.c — suite `report`: `ampprobe report` on small databases built with the real schema
 * (report_fixtures.c: an empty run database from the collector, then INSERTed rows). Every rule
 * has a positive and a negative case (test_report_nonfinite.c, test_report_numerics.c,
 * test_report_perf.c and the run-end cases here); a healthy run yields no error or warning; the
 * json output carries the stable keys, md and html escape user strings; a missing, foreign or
 * non-SQLite file exits 2 with one line. Tcase `samples` runs the samples' --fault runs end to
 * end (ampprobe run, then report --format json) and checks the top finding's rule, layer and
 * step, and that the healthy twins are clean; tcase `readers` puts odd values into every column
 * of a GPU run's tables and has every reader read or refuse them.
 */
#include "report_fixtures.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

// A damaged file's pid that is no 32-bit integer (a real SQLite sorts before the others, read as
// the int 253036617; found by tests/fuzz's fuzz_db) is no process: the processes keep their steps,
// and an event or statistics row of such a pid is none of theirs.
START_TEST(a_pid_that_is_no_int_is_no_process) {
    healthy(12);
    sql("INSERT INTO AMP_STEPS SELECT 2, step, start_ns, end_ns, loss, loss_finite, grad_norm, "
        "scale_before, scale_after, found_inf, skipped, mem_peak_bytes "
        "FROM AMP_STEPS WHERE pid = 1;"
        "INSERT INTO AMP_LAYERS VALUES (-33796844615607.7, 0, NULL, 'x'), (1e-45, 0, NULL, 'y'), "
        "(1099511627781, 0, NULL, 'z'), ('pid 3', 0, NULL, 'w');"
        // (read as int, 4294967297 is 1: its NaN would be process 1's)
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences) VALUES (4294967297, 3, 1, 'linear', 'fwd', "
        "'nonfinite_producer', 'error', 5, 1e9, 'x', 0, 1), (1.5, 3, 1, 'linear', 'fwd', "
        "'nonfinite_producer', 'error', 5, 1e9, 'x', 0, 1);"
        "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel, "
        "amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) VALUES (4294967297, 3, "
        "1, 'linear', 'activation', 'f16', 'f16', 64, 1e9, 64, 0, 0, 64, 0, 0);"
        "INSERT INTO AMP_OPS SELECT 4294967297, step, 1, 'linear', 'fwd', 'f32,f32', 'f32', "
        "'lower_precision_fp', '(4096, 4096)', 1e12, 1e8, start_ns, end_ns - 1 FROM AMP_STEPS "
        "WHERE pid = 1;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(model.n_procs, 2);
    for (int32_t pid = 1; pid <= 2; pid++) {
        const report_process *p = report_process_find(&model, pid);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq(p->n_steps, 12);
    }
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy: no error or warning in 24 steps of 2 processes."),
                  "verdict: %s", verdict);
    release();
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
    for (size_t i = 0; i < 4; i++)
        ck_assert_msg(strstr(t, plots[i]) != NULL, "no plot %s", plots[i]);
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
    {"tiny_gpt", "--precision fp16 --fault scale-thrash", "loss-scale", "warning", "{\"first\": 2,",
     "null", "null", "growth_interval=2000"},
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
    ck_assert_msg(advice && strstr(advice, c->advice) &&
                      strstr(advice, c->advice) < strstr(advice, "}"),
                  "%s %s: advice lacks %s", c->sample, c->args, c->advice);
    free(j);
}
END_TEST

// The fault runs' twins without the fault (fp16), and bf16/fp32 runs of the two fast samples.
static const char *const healthy_cases[][2] = {
    {"mlp", "--precision fp16"},      {"simple_cnn", "--precision fp16"},
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
    ck_assert_ptr_nonnull(
        strstr(j, "{\"rule\": \"nonfinite-root-cause\", \"severity\": \"error\", "
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
            if (*p == '\\')
                p++;
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"')
            in_str = true;
        else if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']')
            ck_assert_int_ge(--depth, 0);
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
          "..............................................................\n",
          f);
    fclose(f);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(foreign, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1);", NULL, NULL, NULL),
        SQLITE_OK);
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

// ---------------------------------------------------------------------------------------------
// Odd values

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

// ---------------------------------------------------------------------------------------------

Suite *report_suite(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("rules");
    tcase_add_checked_fixture(tc, report_setup, report_teardown);
    tcase_add_test(tc, event_spans_answer_per_process);
    tcase_add_test(tc, healthy_run_has_no_error_or_warning);
    tcase_add_test(tc, parameters_trained_outside_the_watched_model_are_named);
    tcase_add_test(tc, sampled_statistics_are_said);
    tcase_add_test(tc, a_database_without_memory_peaks_reads);
    tcase_add_test(tc, ranks_are_counted_as_processes);
    tcase_add_test(tc, a_pid_that_is_no_int_is_no_process);
    tcase_add_test(tc, a_compiled_model_says_what_is_not_recorded);
    tcase_add_test(tc, a_focus_past_the_run_says_where_its_steps_end);
    tcase_add_test(tc, empty_database_degrades_gracefully);
    report_nonfinite_tests(tc);
    report_numerics_tests(tc);
    tcase_add_test(tc, json_carries_the_stable_keys);
    tcase_add_test(tc, names_that_are_long_broken_or_multiline_stay_in_place);
    tcase_add_test(tc, text_puts_the_verdict_first_without_colour_in_a_file);
    tcase_add_test(tc, rule_and_steps_narrow_the_report);
    tcase_add_test(tc, bad_files_and_usage_exit_2_with_one_line);
    tcase_add_test(tc, option_values_after_an_equals_sign);
    report_perf_tests(tc);
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
    tcase_add_checked_fixture(e2e, report_setup, report_teardown);
    tcase_set_timeout(e2e, 60); // a sample run takes about a second; more on a loaded machine
    tcase_add_loop_test(e2e, fault_runs_name_cause_layer_and_step, 0,
                        (int)(sizeof fault_cases / sizeof fault_cases[0]));
    tcase_add_loop_test(e2e, healthy_twins_are_clean, 0,
                        (int)(sizeof healthy_cases / sizeof healthy_cases[0]));
    suite_add_tcase(s, e2e);

    TCase *readers = tcase_create("readers");
    tcase_add_checked_fixture(readers, report_setup, report_teardown);
    tcase_set_timeout(readers, 300); // every column three ways, each read by every reader
    tcase_add_test(readers, odd_values_in_a_gpu_run_are_read_or_refused);
    suite_add_tcase(s, readers);
    return s;
}
