/*
 * test_diff.c — suite `diff`: `ampprobe diff A B` on two small run databases built here (an fp32
 * and an AMP run with chosen step times and losses, and CUPTI rows for a launch-bound GPU run),
 * the verdict's wording both ways round (each run's loss named, the broken run's first), the
 * side-by-side table (the last step's loss and the mean of the last 10%), the findings present
 * in one run only, the json keys, usage errors; and the fp32-vs-fp16 verdict on the mlp sample on
 * the CPU, end to end (the wording, not the timing, which depends on the machine).
 */
#include "tests.h"

#include "amp-store.h"
#include "commands.h"
#include "report.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], a_path[128], b_path[128], out_path[128], err_path[128];

static void make_db(const char *path) {
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new(path, NULL, &c), AMP_OK);
    ck_assert_int_eq(amp_collector_finish(c, 0), AMP_OK);
    amp_collector_free(c);
}

static void setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/ampdiff."));
    snprintf(a_path, sizeof a_path, "%s/a.sqlite", dir);
    snprintf(b_path, sizeof b_path, "%s/b.sqlite", dir);
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    make_db(a_path);
    make_db(b_path);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void sql(const char *path, const char *text) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    char *msg = NULL;
    int rc = sqlite3_exec(db, text, NULL, NULL, &msg);
    ck_assert_msg(rc == SQLITE_OK, "fixture SQL failed: %s", msg ? msg : "?");
    sqlite3_close(db);
}

// n steps of step_ms each with losses 3 - 0.02 i times loss_factor and a memory peak of
// peak_mib (0: not recorded); one GEMM op per step, under autocast (f16) or not (f32).
static void run(const char *path, int n, double step_ms, double loss_factor, double peak_mib,
                bool amp, const char *device) {
    char buf[2048], peak[32] = "NULL";
    if (peak_mib > 0) snprintf(peak, sizeof peak, "%.0f", peak_mib * 1048576);
    snprintf(buf, sizeof buf,
             "INSERT INTO AMP_LAYERS VALUES (1, 0, NULL, 'fc');"
             "INSERT OR REPLACE INTO META VALUES ('device', '%s', 1);"
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
             "INSERT INTO AMP_STEPS SELECT 1, i, CAST(i * %f AS INTEGER), "
             "CAST((i + 1) * %f AS INTEGER) - 1, (3.0 - i * 0.02) * %.17g, 1, 0.9 + i * 0.003, %s, "
             "%s, 0, 0, "
             "%s FROM s;"
             "INSERT INTO AMP_OPS SELECT 1, step, 0, 'linear', 'fwd', '%s', '%s', %s, '(8, 64)', "
             "4194304, 98304, start_ns, start_ns + 1000 FROM AMP_STEPS;",
             device, n - 1, step_ms * 1e6, step_ms * 1e6, loss_factor, amp ? "65536" : "NULL",
             amp ? "65536" : "NULL", peak, amp ? "f16,f16" : "f32,f32", amp ? "f16" : "f32",
             amp ? "'lower_precision_fp'" : "NULL");
    sql(path, buf);
}

#define CMD(...) cmd((const char *[]){__VA_ARGS__, NULL})
static int cmd(const char **args) {
    return test_call_command(amp_cmd_diff, "diff", args, err_path);
}

#define HAS(text, needle)                                                                          \
    ck_assert_msg(strstr((text), (needle)) != NULL, "no '%s' in:\n%s", (needle), (text))

// `ampprobe diff first second --format format` (exit status 0) as it wrote it; free it.
static char *diff_of(const char *first, const char *second, const char *format) {
    ck_assert_int_eq(CMD(first, second, "--format", format, "-o", out_path), 0);
    return test_read_file(out_path, NULL);
}

// `ampprobe diff A B --format format` holds needle.
static void diff_has(const char *format, const char *needle) {
    char *t = diff_of(a_path, b_path, format);
    HAS(t, needle);
    free(t);
}

// The run at path ended with that exit status (META exit_status).
static void exited(const char *path, int status) {
    char buf[128];
    snprintf(buf, sizeof buf, "UPDATE META SET value = '%d' WHERE key = 'exit_status';", status);
    sql(path, buf);
}

// A second process in the run at path: pid 1's steps again as pid, its losses times factor;
// each process named (AMP_PROCESSES: the program's /proc comm).
static void second_process(const char *path, int pid, double factor, const char *name1,
                           const char *name2) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "CREATE TEMP TABLE t AS SELECT * FROM AMP_STEPS WHERE pid = 1; UPDATE t SET pid = %d, "
             "loss = loss * %.17g; INSERT INTO AMP_STEPS SELECT * FROM t; DROP TABLE t;"
             "INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, status) VALUES "
             "(1, 0, 16777216, '%s', 'complete'), (%d, 0, %lld, '%s', 'complete');",
             pid, factor, name1, pid, (long long)pid << 24, name2);
    sql(path, buf);
}

// Runs of several processes (a script that trains two models): each process's loss curve is
// compared with that of the process of the same program and order in the other run, not the
// first with the first; the table says whose losses it gives.
START_TEST(processes_are_matched_by_program_and_order) {
    run(a_path, 20, 4.0, 1.0, 0, true, "cpu");
    second_process(a_path, 2, 2.0, "mlp", "tiny_gpt"); // mlp 3.0 - 0.02 i, tiny_gpt twice that
    run(b_path, 20, 4.0, 2.0, 0, true, "cpu");
    second_process(b_path, 9, 0.5, "tiny_gpt", "mlp"); // the same, the other way round
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "processes              2                  2");
    HAS(t, "losses of              mlp pid 1          mlp pid 9");
    HAS(t, "mean loss (last 10%)   2.63               2.63               +0.00%");
    HAS(t, "same loss within 0.1% (the losses of mlp pid 1 in A and mlp pid 9 in B).");
    HAS(t, "Loss curves, process by process (matched by program and order; the table's losses "
           "are the first line's):\n"
           "  mlp pid 1 in A, mlp pid 9 in B: 20 common steps with finite losses, the same in "
           "both.\n"
           "  tiny_gpt pid 2 in A, tiny_gpt pid 1 in B: 20 common steps with finite losses, the "
           "same in both.\n");
    ck_assert_msg(!strstr(t, "diverge"), "%s", t);
    free(t);
    t = diff_of(a_path, b_path, "json");
    HAS(t, "\"processes\": 2, \"loss_pid\": 1, \"loss_process\": \"mlp\",");
    HAS(t, "\"processes\": 2, \"loss_pid\": 9, \"loss_process\": \"mlp\",");
    HAS(t, "\"loss_by_process\": [{\"a_pid\": 1, \"b_pid\": 9, \"process\": \"mlp\", "
           "\"common_steps\": 20, \"mean_rel_diff\": 0,");
    HAS(t, "{\"a_pid\": 2, \"b_pid\": 1, \"process\": \"tiny_gpt\", \"common_steps\": 20");
    free(t);
}
END_TEST

// A run of two trainings where the second broke (NaN from step 12), against a run of one: the
// losses compared are the broken one's, against the process of its program in the other run;
// the healthy one is compared with its own match.
START_TEST(the_losses_compared_are_of_the_process_that_broke) {
    run(a_path, 20, 4.0, 1.0, 0, true, "cpu");
    second_process(a_path, 2, 1.0, "tiny_gpt", "tiny_gpt");
    sql(a_path,
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE pid = 2 AND step >= 12;"
        "INSERT INTO AMP_EVENTS (pid, step, last_step, layer_id, op, phase, kind, severity, "
        "count, aggregate, occurrences, detail) VALUES (2, 12, 19, 0, 'linear', 'fwd', "
        "'nonfinite_input', 'error', 8, 0, 1, NULL);");
    run(b_path, 20, 4.0, 1.0, 0, true, "cpu");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "A broke: NaN/inf in the input data at step 12");
    HAS(t, "A has a non-finite loss in its last 10% of steps (the losses of tiny_gpt pid 2 in A "
           "and pid 1 in B).");
    HAS(t, "losses of              tiny_gpt pid 2     pid 1");
    HAS(t, "mean loss (last 10%)   not finite         2.63");
    HAS(t, "  tiny_gpt pid 2 in A, pid 1 in B: 12 common steps with finite losses, the same in "
           "both.\n"
           "  tiny_gpt pid 1 in A: no process of B of that program to compare with.\n");
    free(t);
}
END_TEST

// A process whose losses are never finite has no curve to compare: its line says so.
START_TEST(a_process_without_a_finite_loss_has_no_curve) {
    run(a_path, 20, 4.0, 1.0, 0, true, "cpu");
    second_process(a_path, 2, 1.0, "mlp", "tiny_gpt");
    sql(a_path, "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE pid = 2;");
    run(b_path, 20, 4.0, 1.0, 0, true, "cpu");
    second_process(b_path, 9, 1.0, "mlp", "tiny_gpt");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "  tiny_gpt pid 2 in A, tiny_gpt pid 9 in B: no common step with finite losses.\n");
    HAS(t, "  mlp pid 1 in A, mlp pid 1 in B: 20 common steps with finite losses, the same in "
           "both.\n");
    free(t);
}
END_TEST

START_TEST(amp_faster_same_loss_either_order) {
    run(a_path, 20, 10.0, 1.0, 1000, false, "cuda");
    run(b_path, 20, 4.0, 1.003, 600, true, "cuda");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "AMP run (B, fp16) is 2.5x faster than the fp32 run, holds 40% less memory, same loss "
           "within 0.3%.");
    HAS(t, "median step (ms)       10                 4                  x0.40");
    HAS(t, "peak memory (MiB)      1000               600                x0.60");
    HAS(t, "Loss curves: 20 common steps");
    ck_assert_msg(!strstr(t, "torch.compile"), "%s", t); // two eager runs
    free(t);
    sql(b_path, "INSERT INTO META VALUES ('compiled', 'model', 1);");
    diff_has("text", "torch.compile          no                 model");
    diff_has("json", "\"device\": \"cuda\", \"compiled\": \"model\", \"autocast\": true");
    diff_has("json", "\"device\": \"cuda\", \"compiled\": null, \"autocast\": false");
    t = diff_of(b_path, a_path, "text"); // the AMP run first
    HAS(t, "AMP run (A, fp16) is 2.5x faster than the fp32 run");
    ck_assert_msg(!strstr(t, "steps and"), "%s", t); // the same length
    free(t);
}
END_TEST

// Two fp16 runs by a producer that records steps and META's precision but no op (the record API
// alone): neither is "the AMP run" against "the fp16 run".
START_TEST(amp_runs_without_ops_by_their_precision) {
    run(a_path, 20, 10.0, 1.0, 0, true, "cuda");
    run(b_path, 20, 4.0, 1.0, 0, true, "cuda");
    for (int i = 0; i < 2; i++)
        sql(i ? b_path : a_path, "DELETE FROM AMP_OPS;"
                                 "INSERT OR REPLACE INTO META VALUES ('precision', 'fp16', 1);");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "B is 2.5x faster than A");
    ck_assert_msg(!strstr(t, "AMP run"), "%s", t);
    free(t);
    diff_has("json", "\"autocast\": true");
    sql(a_path, "UPDATE META SET value = 'fp32' WHERE key = 'precision';");
    diff_has("text", "AMP run (B, fp16) is 2.5x faster than the fp32 run");
}
END_TEST

// Losses near a double's largest: their means are not summed into inf ("infx lower", "inf%").
START_TEST(huge_losses_have_finite_figures) {
    run(a_path, 20, 10.0, 1.0, 0, false, "cuda");
    run(b_path, 20, 10.0, 5e307, 0, false, "cuda");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "x higher)");
    ck_assert_msg(!strstr(t, "inf"), "%s", t);
    free(t);
}
END_TEST

// Runs of different lengths: the verdict says that their final losses are of different steps.
START_TEST(runs_of_different_lengths_are_said_to_be) {
    run(a_path, 40, 10.0, 1.0, 1000, false, "cuda");
    run(b_path, 12, 4.0, 1.0, 600, true, "cuda");
    diff_has("text", "A ran 40 steps and B 12: the final losses are of different points of "
                     "training (the loss curves compare the steps both ran).");
}
END_TEST

// Which program a command line ran, and a verdict that says when the two runs ran different ones.
START_TEST(different_programs_are_named) {
    static const char *const cases[][2] = {
        {"/work/build/samples/tiny_gpt --device cpu --precision fp16", "tiny_gpt"},
        {"python3 train.py --lr 1e-3", "train.py"},
        {"/usr/bin/python3.12 -u 'my dir/train it.py' --bs 8", "train it.py"},
        {"python3 -m torch.distributed.run --nproc_per_node 2 train.py", "train.py"},
        {"python3 -m my.trainer --steps 10", "my.trainer"},
        {"python -c 'import torch'", "python -c"},
        {"'it'\\''s' x", "it's"},
        {"", ""},
        {"python3", "python3"},
        {"torchrun --nproc_per_node 2 /src/train.py --lr 1", "train.py"},
        {"env CUDA_VISIBLE_DEVICES=0 FOO=1 python3 -u train.py", "train.py"},
        {"bash scripts/run.sh fp16", "run.sh"},
        {"accelerate launch --mixed_precision fp16 train.py", "train.py"},
        {"/usr/bin/env", "env"},
        {"sh -c 'build/samples/tiny_gpt --steps 5 > log'", "tiny_gpt"},
        {"bash -e -c 'python3 -u train.py' x", "train.py"},
        {"sh -c", "sh"},
        {"sh -c 'exec build/samples/tiny_gpt --steps 5'", "tiny_gpt"},
        {"sh -c 'cd /tmp && OMP_NUM_THREADS=1 /w/build/samples/tiny_gpt'", "tiny_gpt"},
        {"sh -ec 'set -x; python3 train.py'", "train.py"},
        {"bash -c 'cd /tmp'", ""},
    };
    char got[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        report_program_of(cases[i][0], got, sizeof got);
        ck_assert_msg(strcmp(got, cases[i][1]) == 0, "%s: '%s', not '%s'", cases[i][0], got,
                      cases[i][1]);
    }
    report_program_of(NULL, got, sizeof got);
    ck_assert_str_eq(got, "");

    run(a_path, 20, 10.0, 1.0, 1000, false, "cuda");
    run(b_path, 20, 4.0, 1.003, 600, true, "cuda");
    char *t = diff_of(a_path, b_path, "text");
    ck_assert_msg(!strstr(t, "different programs"), "%s", t); // no command recorded: not known
    HAS(t, "program                ?                  ?");
    free(t);
    sql(a_path, "INSERT INTO META VALUES ('command', 'python3 train.py --fp32', 0);");
    sql(b_path, "INSERT INTO META VALUES ('command', 'python3 train.py --amp', 0);");
    t = diff_of(a_path, b_path, "text");
    ck_assert_msg(!strstr(t, "different programs"), "%s", t);
    HAS(t, "program                train.py           train.py");
    free(t);
    sql(b_path, "UPDATE META SET value = 'python3 train_v2.py --amp' WHERE key = 'command';");
    diff_has("text",
             "same loss within 0.3%. A and B ran different programs (train.py, train_v2.py).");
    diff_has("json", "\"program\": \"train_v2.py\", \"precision\": \"fp16\", \"device\": \"cuda\"");
}
END_TEST

START_TEST(amp_slower_launch_bound_and_loss_gap) {
    run(a_path, 8, 10.0, 1.0, 0, false, "cuda");
    run(b_path, 8, 12.6, 1.2, 0, true, "cuda");
    // B's kernels: 300 per step of 2 us
    sql(b_path,
        "INSERT INTO StringIds VALUES (1, 'elementwise_kernel');"
        "WITH RECURSIVE j(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM j WHERE x < "
        "299) " TEST_KERNEL_INSERT "SELECT start_ns + x * 30000, "
        "start_ns + x * 30000 + 2000, 0, 1, 7, step * 300 + x, 16777216, 1, 1, 32, 1, 1, 1, 128, "
        "1, 1, 0, 0, 0, 0, x FROM AMP_STEPS, j;");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "AMP run (B, fp16) is 26% slower than the fp32 run: launch-bound");
    HAS(t, "peak memory (MiB)      not recorded       not recorded");
    HAS(t, "mean loss of the last 10% of steps 3.432 in B vs 2.86 in A (+20.0%)."); // (step 7's)
    HAS(t, "they diverge by 10% or more from step 0");
    HAS(t, "Findings only in B:\n");
    HAS(t, "  warning [amp-payoff] launch-bound");
    // (amp-payoff's launch-bound is the verdict's already; the GPU's idling is not)
    HAS(t, "(+20.0%). AMP run (B, fp16) has a warning the fp32 run has not: the GPU sat idle");
    free(t);
    t = diff_of(a_path, b_path, "json");
    HAS(t, "{\"verdict\": \"AMP run (B, fp16) is 26% slower");
    HAS(t, "\"a\": {\"file\": ");
    HAS(t,
        "\"precision\": \"fp32\", \"device\": \"cuda\", \"compiled\": null, \"autocast\": false, "
        "\"steps\": 8");
    HAS(t, "\"peak_memory\": null");
    HAS(t, "{\"rule\": \"amp-payoff\", \"severity\": \"warning\"");
    HAS(t, "\"speedup\": 0.79");
    HAS(t, "\"diverge_step\": 0}");
    free(t);
}
END_TEST

// The same training twice, the second killed after its last step: the curves are the same, and
// how B ended is the finding only B has.
START_TEST(same_losses_and_a_killed_run) {
    run(a_path, 20, 4.0, 1.0, 600, true, "cuda");
    run(b_path, 20, 4.0, 1.0, 600, true, "cuda");
    exited(b_path, 137);
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "Loss curves: 20 common steps with finite losses, the same in both.\n");
    HAS(t, "Findings only in B:\n  warning [run-end] the program was killed by SIGKILL after "
           "step 19");
    HAS(t, "same loss within 0.1%. B has a warning A has not: the program was killed by SIGKILL");
    ck_assert_msg(!strstr(t, "Findings only in A"), "%s", t);
    free(t);
}
END_TEST

// Empty databases again, for another pair of runs in the same test.
static void fresh_dbs(void) {
    teardown();
    setup();
}

// A run that recorded no step (a bridge that did not attach, a program that died first): its
// figures are "not recorded", not a loss gone non-finite.
START_TEST(a_run_without_steps) {
    run(a_path, 20, 4.0, 1.0, 600, true, "cuda");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "Cannot compare: B recorded no step.");
    HAS(t, "not recorded");
    ck_assert_msg(!strstr(t, "not finite"), "%s", t);
    free(t);
    // neither, and B crashed before its first step: said after it
    fresh_dbs();
    exited(b_path, 139);
    t = diff_of(a_path, b_path, "text");
    HAS(t, "Cannot compare: neither run recorded a step. B: the program crashed with SIGSEGV "
           "before its first step.");
    free(t);
}
END_TEST

// B was killed between its last GradScaler update and that step's record: that step has no loss
// (loss_finite NULL), which is no non-finite final loss.
START_TEST(a_last_step_without_its_step_record_is_not_a_nonfinite_loss) {
    run(a_path, 20, 4.0, 1.0, 600, true, "cuda");
    run(b_path, 20, 4.0, 1.0, 600, true, "cuda");
    sql(b_path, "UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL WHERE step = 19;");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "B is as fast as A (within 5%), same loss within 0.4%."); // (step 18's)
    ck_assert_msg(!strstr(t, "not finite"), "%s", t);
    free(t);
}
END_TEST

// A run whose steps were recorded with no duration (start = end): no speed is claimed of it.
START_TEST(steps_of_no_duration_are_not_compared) {
    run(a_path, 20, 10.0, 1.0, 1000, false, "cuda");
    run(b_path, 20, 4.0, 1.0, 1000, true, "cuda");
    sql(b_path, "UPDATE AMP_STEPS SET end_ns = start_ns;");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "AMP run (B, fp16): no step times to compare, same loss within 0.1%.");
    free(t);
    t = diff_of(b_path, a_path, "json");
    HAS(t, "\"speedup\": null,");
    free(t);
}
END_TEST

// Two runs that both broke: said of both, not of B alone.
START_TEST(both_broke) {
    run(a_path, 20, 4.0, 1.0, 600, true, "cuda");
    run(b_path, 20, 4.0, 1.0, 600, true, "cuda");
    exited(a_path, 139);
    exited(b_path, 139);
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "Both runs broke the same way: the program crashed with SIGSEGV after step 19, same "
           "loss");
    free(t);
    sql(b_path,
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 19;"
        "INSERT INTO AMP_EVENTS (pid, step, last_step, layer_id, op, phase, kind, "
        "severity, count, aggregate, occurrences, detail) VALUES (1, 19, 19, 1, 'linear', 'fwd', "
        "'nonfinite_producer', 'error', 8, 0, 1, NULL);");
    t = diff_of(a_path, b_path, "text");
    HAS(t, "Both runs broke: B: layer 1 (not declared) linear produced non-finite values from "
           "finite inputs at step 19");
    HAS(t, "; A: the program crashed with SIGSEGV after step 19; B has a non-finite loss in its "
           "last 10% of steps.");
    free(t);
    sql(b_path, "UPDATE AMP_STEPS SET mem_peak_bytes = mem_peak_bytes / 2;");
    diff_has("text", "after step 19, B holds 50% less memory than A; B has a non-finite loss");
    // a share while it rounds below 100%, a factor beyond (not "100% less")
    sql(b_path, "UPDATE AMP_STEPS SET mem_peak_bytes = mem_peak_bytes / 50;"); // 1/100 of A's
    diff_has("text", "after step 19, B holds 99% less memory than A;");
    sql(b_path, "UPDATE AMP_STEPS SET mem_peak_bytes = mem_peak_bytes / 10;");
    diff_has("text", "after step 19, B holds 1000x less memory than A;");
    diff_has("text", "peak memory (MiB)      600                0.6                x0.001");
}
END_TEST

// A baseline that broke is named as the one that broke, whichever argument it is.
START_TEST(the_baseline_broke) {
    run(a_path, 20, 10.0, 1.0, 1000, false, "cuda");
    run(b_path, 20, 4.0, 1.0, 600, true, "cuda");
    sql(a_path,
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 12;"
        "INSERT INTO AMP_EVENTS (pid, step, last_step, layer_id, op, phase, kind, "
        "severity, count, aggregate, occurrences, detail) VALUES (1, 12, 19, 1, 'linear', 'fwd', "
        "'nonfinite_input', 'error', 8, 0, 1, NULL);");
    const char *want = "The fp32 run broke: NaN/inf in the input data at step 12";
    diff_has("text", want);
    char *t = diff_of(b_path, a_path, "text");
    HAS(t, want);
    HAS(t, ", holds 67% more memory than AMP run (A, fp16); the fp32 run has a non-finite loss in "
           "its last 10% of steps.");
    free(t);
    // more than twice as much: a factor (not "150% more"), one decimal below 10x
    sql(a_path, "UPDATE AMP_STEPS SET mem_peak_bytes = mem_peak_bytes * 1.5;");
    t = diff_of(b_path, a_path, "text");
    HAS(t, ", holds 2.5x more memory than AMP run (A, fp16);");
    free(t);
}
END_TEST

// Casts taking a share of each run's time, the longest in fc1 in A and in fc2 in B (a timing
// coin toss between two runs of one program): the same finding in both, not one only in each.
static void casts(const char *path, int longer_layer) {
    char buf[512];
    snprintf(
        buf, sizeof buf,
        "INSERT INTO AMP_LAYERS VALUES (1, 1, NULL, 'fc1'), (1, 2, NULL, 'fc2');"
        "INSERT INTO AMP_OPS SELECT 1, step, l.id, 'to', 'fwd', 'f32', 'f16', NULL, '(8, 64)', "
        "0, 2048, start_ns + 2000 * l.id, start_ns + 2000 * l.id + "
        "CASE l.id WHEN %d THEN 900 ELSE 800 END FROM AMP_STEPS, "
        "(SELECT 1 AS id UNION ALL SELECT 2) l;",
        longer_layer);
    sql(path, buf);
}

START_TEST(a_share_of_many_ops_matches_whichever_op_is_largest) {
    run(a_path, 20, 4.0, 1.0, 0, true, "cpu");
    run(b_path, 20, 4.0, 1.0, 0, true, "cpu");
    casts(a_path, 1);
    casts(b_path, 2);
    char *t = diff_of(a_path, b_path, "text");
    ck_assert_msg(!strstr(t, "Findings only in"), "%s", t);
    free(t);
    char *j = diff_of(a_path, b_path, "json");
    ck_assert_msg(!strstr(j, "\"only_here\": [{"), "%s", j);
    free(j);
}
END_TEST

// The run at path broke at step 5 (NaN in its input) and trained on: its losses stay finite.
static void broke_at_step_5(const char *path) {
    sql(path, "INSERT INTO AMP_EVENTS (pid, step, last_step, layer_id, op, phase, kind, "
              "severity, count, aggregate, occurrences, detail) VALUES (1, 5, 5, 1, 'linear', "
              "'fwd', 'nonfinite_input', 'error', 8, 0, 1, NULL);");
}

// Whichever run a verdict is about, its loss comes first, each loss names its run and the
// difference is the first's: "A went on past an error" (or "A broke") goes on with A's loss (2.63,
// the mean of steps 18 and 19), not the other's (3.156).
START_TEST(the_losses_are_of_the_run_the_verdict_is_about_first) {
    static const char *const a_first = "mean loss of the last 10% of steps 2.63 in A vs 3.156 "
                                       "in B (-16.7%).",
                             *b_first = "mean loss of the last 10% of steps 3.156 in B vs 2.63 "
                                        "in A (+20.0%).";
    // two AMP runs: "A broke", "B broke"
    run(a_path, 20, 4.0, 1.0, 0, true, "cuda");
    run(b_path, 20, 4.0, 1.2, 0, true, "cuda");
    broke_at_step_5(a_path);
    diff_has("text", "A went on past an error: NaN/inf in the input data at step 5");
    diff_has("text", a_first);
    diff_has("json", a_first);
    fresh_dbs();
    run(a_path, 20, 4.0, 1.0, 0, true, "cuda");
    run(b_path, 20, 4.0, 1.2, 0, true, "cuda");
    broke_at_step_5(b_path);
    diff_has("text", "B went on past an error: NaN/inf in the input data at step 5");
    diff_has("text", b_first);
    broke_at_step_5(a_path); // both, the same way: the candidate (B) first, as named first
    diff_has("text", "Both runs went on past the same error: NaN/inf in the input data at step 5");
    diff_has("text", b_first);
    // the same error, but B's loss non-finite from it on: A went on, B broke (not "the same way")
    sql(b_path, "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 5;");
    diff_has("text", "A went on past the error that broke B: NaN/inf in the input data at step 5");
    sql(a_path, "UPDATE AMP_EVENTS SET kind = 'nonfinite_module';"); // another error in A
    diff_has("text", "A went on past an error, B broke: A: ");

    // an fp32 run (A) and an AMP run (B): "The fp32 run broke", "AMP run (B, fp16) broke"
    fresh_dbs();
    run(a_path, 20, 4.0, 1.0, 0, false, "cuda");
    run(b_path, 20, 4.0, 1.2, 0, true, "cuda");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "AMP run (B, fp16) is as fast as the fp32 run (within 5%), ");
    HAS(t, b_first);
    free(t);
    broke_at_step_5(a_path);
    diff_has("text", "The fp32 run went on past an error: NaN/inf in the input data at step 5");
    diff_has("text", a_first);
    fresh_dbs();
    run(a_path, 20, 4.0, 1.0, 0, false, "cuda");
    run(b_path, 20, 4.0, 1.2, 0, true, "cuda");
    broke_at_step_5(b_path);
    diff_has("text",
             "AMP run (B, fp16) went on past an error: NaN/inf in the input data at step 5");
    diff_has("text", b_first);
    t = diff_of(b_path, a_path, "text"); // the AMP run first: it is still the one named first
    HAS(t, "AMP run (A, fp16) went on past an error: NaN/inf in the input data at step 5");
    HAS(t, "mean loss of the last 10% of steps 3.156 in A vs 2.63 in B (+20.0%).");
    free(t);
}
END_TEST

// The last step's loss (what the program printed last, the report's "final loss") and the mean
// of the last 10% of steps (the verdict's), each under its own name, in text and json.
START_TEST(the_last_loss_and_the_mean_are_told_apart) {
    run(a_path, 20, 10.0, 1.0, 1000, false, "cuda"); // step 19: 2.62; steps 18-19: 2.63
    run(b_path, 20, 4.0, 1.1, 600, true, "cuda");    // 2.882; 2.893
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "final loss (last step) 2.62               2.882              +10.00%\n");
    HAS(t, "mean loss (last 10%)   2.63               2.893              +10.00%\n");
    HAS(t, "mean loss of the last 10% of steps 2.893 in B vs 2.63 in A (+10.0%).");
    free(t);
    t = diff_of(a_path, b_path, "json");
    HAS(t, "\"final_loss\": 2.63, \"last_loss\": 2.62,");
    HAS(t, "\"final_loss\": 2.893, \"last_loss\": 2.882,");
    free(t);
    // a non-finite last loss: not finite in both rows, null in json
    sql(b_path, "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 19;");
    t = diff_of(a_path, b_path, "text");
    HAS(t, "final loss (last step) 2.62               not finite         \n");
    HAS(t, "mean loss (last 10%)   2.63               not finite         \n");
    free(t);
    diff_has("json", "\"final_loss\": null, \"last_loss\": null,");
    // --help says which is which
    const int saved = test_stream_to(stdout, out_path);
    const int rc = CMD("--help");
    test_stream_back(stdout, saved);
    ck_assert_int_eq(rc, 0);
    t = test_read_file(out_path, NULL);
    HAS(t, "the loss at the last step, and the mean loss of the last 10% of steps");
    free(t);
}
END_TEST

// Two AMP runs on the CPU: the slower one is not explained by fp16's emulation there.
START_TEST(two_amp_runs_are_not_explained_by_emulation) {
    run(a_path, 20, 4.0, 1.0, 0, true, "cpu");
    run(b_path, 20, 10.0, 1.0, 0, true, "cpu");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "B is 2.5x slower than A, same loss");
    ck_assert_msg(!strstr(t, "Tensor Cores"), "%s", t);
    free(t);
}
END_TEST

// An fp32 and an AMP run of different programs: the AMP run's slowness is not put down to
// fp16 (the programs differ), and a loss ten times the other's reads as a factor.
START_TEST(different_programs_are_not_explained_by_precision) {
    run(a_path, 20, 4.0, 1.0, 0, false, "cpu");
    run(b_path, 20, 10.0, 20.0, 0, true, "cpu");
    sql(a_path, "INSERT INTO META VALUES ('command', 'samples/tiny_gpt', 0);");
    sql(b_path, "INSERT INTO META VALUES ('command', 'samples/simple_cnn', 0);");
    char *t = diff_of(a_path, b_path, "text");
    HAS(t, "AMP run (B, fp16) is 2.5x slower than the fp32 run, mean loss of the last 10% of "
           "steps 52.6 in B vs 2.63 in A (20x higher).");
    HAS(t, "A and B ran different programs (tiny_gpt, simple_cnn).");
    ck_assert_msg(!strstr(t, "Tensor Cores"), "%s", t);
    free(t);
}
END_TEST

// Findings of one rule are the same in two runs when their titles say the same but for their
// numbers: a sawtooth in one and a scale stuck low in the other are each run's own.
START_TEST(findings_match_by_their_words) {
    ck_assert(report_same_title("loss scale sawtooth: 23 grow-then-overflow cycles between 65536 "
                                "and 4194304, 23 of 60 steps skipped",
                                "loss scale sawtooth: 5 grow-then-overflow cycles between 1024 and "
                                "8192, 5 of 40 steps skipped"));
    ck_assert(!report_same_title("loss scale sawtooth: 23 grow-then-overflow cycles",
                                 "loss scale stuck low at 1 for 50 steps"));
}
END_TEST

// Both runs diverged, one for good (an error) and one that came back down (a warning): the same
// divergence, not a finding one run has and the other has not.
START_TEST(a_divergence_in_both_runs_is_one) {
    run(a_path, 8, 10.0, 1.0, 0, false, "cpu");
    run(b_path, 8, 10.0, 1.0, 0, true, "cpu");
    const char *up = "UPDATE AMP_STEPS SET grad_norm = CASE step WHEN 0 THEN 0.9 ELSE 50 END, "
                     "loss = CASE step WHEN 0 THEN 3 WHEN 1 THEN 300 ELSE %s END;";
    char buf[256];
    snprintf(buf, sizeof buf, up, "200");
    sql(a_path, buf);
    snprintf(buf, sizeof buf, up, "3");
    sql(b_path, buf);
    char *t = diff_of(a_path, b_path, "text");
    ck_assert_ptr_null(strstr(t, "[divergence]"));
    HAS(t, "fp32 run broke: training diverged at step 1: the loss rose from 3 to 300 (step 1) "
           "and was 200 over steps 3-7 (the median); AMP run (B, fp16) diverged as well: the loss "
           "blew up from 3 to 300 (step 1) and came back down to 3 over steps 3-7 (the median)");
    free(t);
}
END_TEST

// -o naming a database the command reads is refused (it would destroy the run); a full disk
// behind stdout is an error that says so.
START_TEST(output_over_an_input_or_to_a_full_disk_is_refused) {
    run(a_path, 20, 4.0, 1.0, 600, true, "cuda");
    run(b_path, 20, 4.0, 1.0, 600, true, "cuda");
    char alias[160];
    snprintf(alias, sizeof alias, "%s/../%s/b.sqlite", dir, strrchr(dir, '/') + 1);
    ck_assert_int_eq(CMD(a_path, b_path, "-o", alias), 2);
    char *e = test_read_file(err_path, NULL);
    HAS(e, "which this command reads; name another file");
    free(e);
    ck_assert_int_eq(CMD(a_path, b_path, "-o", ""), 2);
    e = test_read_file(err_path, NULL);
    HAS(e, "ampprobe diff: -o needs a file name\n");
    free(e);
    ck_assert_int_eq(CMD(a_path, b_path), 0); // b.sqlite still a database
    if (access("/dev/full", W_OK) != 0) return;
    const int saved = test_stream_to(stdout, "/dev/full");
    const int rc = CMD(a_path, b_path);
    clearerr(stdout);
    test_stream_back(stdout, saved);
    ck_assert_int_eq(rc, 2);
    e = test_read_file(err_path, NULL);
    HAS(e, "ampprobe diff: stdout: No space left on device");
    free(e);
}
END_TEST

START_TEST(usage_and_bad_files_exit_2) {
    ck_assert_int_eq(CMD(a_path), 2);
    ck_assert_int_eq(CMD(a_path, b_path, a_path), 2);
    ck_assert_int_eq(CMD(a_path, b_path, "--format", "html"), 2);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.sqlite", dir);
    ck_assert_int_eq(CMD(a_path, missing), 2);
    char *e = test_read_file(err_path, NULL);
    HAS(e, missing);
    ck_assert_msg(strchr(e, '\n') == e + strlen(e) - 1, "not one line: %s", e);
    free(e);
    ck_assert_int_eq(CMD("--help"), 0);
}
END_TEST

// The samples on the CPU: fp16 is emulated there, so the AMP run is slower, with the same loss.
START_TEST(mlp_fp32_vs_fp16_on_the_cpu) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%1$s/ampprobe run --force -o %2$s -- %1$s/samples/mlp --quiet --steps 20 "
             "--precision fp32 >/dev/null 2>&1 && %1$s/ampprobe run --force -o %3$s -- "
             "%1$s/samples/mlp --quiet --steps 20 --precision fp16 >/dev/null 2>&1 && "
             "%1$s/ampprobe diff %2$s %3$s -o %4$s",
             AMP_BINARY_DIR, a_path, b_path, out_path);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    char *t = test_read_file(out_path, NULL);
    HAS(t, "AMP run (B, fp16) is ");
    // about 1.6x slower in a plain build; a sanitizer build or a loaded machine moves the ratio,
    // but a slower AMP run on the CPU is always explained
    if (strstr(t, "slower than the fp32 run"))
        HAS(t, "slower than the fp32 run: the CPU backend has no Tensor Cores");
    HAS(t, "same loss within");
    HAS(t, "precision              fp32               fp16");
    ck_assert_msg(!strstr(t, "not recorded"), "a libampcore run records its memory peak:\n%s", t);
    HAS(t, "peak memory (MiB)      0.");
    free(t);
}
END_TEST

Suite *diff_suite(void) {
    Suite *s = suite_create("diff");
    TCase *tc = tcase_create("diff");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60); // the mlp case records two runs
    tcase_add_test(tc, amp_faster_same_loss_either_order);
    tcase_add_test(tc, a_share_of_many_ops_matches_whichever_op_is_largest);
    tcase_add_test(tc, amp_runs_without_ops_by_their_precision);
    tcase_add_test(tc, huge_losses_have_finite_figures);
    tcase_add_test(tc, runs_of_different_lengths_are_said_to_be);
    tcase_add_test(tc, different_programs_are_named);
    tcase_add_test(tc, amp_slower_launch_bound_and_loss_gap);
    tcase_add_test(tc, same_losses_and_a_killed_run);
    tcase_add_test(tc, a_run_without_steps);
    tcase_add_test(tc, steps_of_no_duration_are_not_compared);
    tcase_add_test(tc, a_last_step_without_its_step_record_is_not_a_nonfinite_loss);
    tcase_add_test(tc, both_broke);
    tcase_add_test(tc, the_baseline_broke);
    tcase_add_test(tc, the_losses_are_of_the_run_the_verdict_is_about_first);
    tcase_add_test(tc, the_last_loss_and_the_mean_are_told_apart);
    tcase_add_test(tc, two_amp_runs_are_not_explained_by_emulation);
    tcase_add_test(tc, different_programs_are_not_explained_by_precision);
    tcase_add_test(tc, findings_match_by_their_words);
    tcase_add_test(tc, a_divergence_in_both_runs_is_one);
    tcase_add_test(tc, processes_are_matched_by_program_and_order);
    tcase_add_test(tc, the_losses_compared_are_of_the_process_that_broke);
    tcase_add_test(tc, a_process_without_a_finite_loss_has_no_curve);
    tcase_add_test(tc, output_over_an_input_or_to_a_full_disk_is_refused);
    tcase_add_test(tc, usage_and_bad_files_exit_2);
    tcase_add_test(tc, mlp_fp32_vs_fp16_on_the_cpu);
    suite_add_tcase(s, tc);
    return s;
}
