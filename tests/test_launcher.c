/*
 * test_launcher.c — the `launcher` suite: `ampprobe run` as a user meets it, through the built
 * binary. Exit statuses (the program's own, 128+signal, 127 for a missing program, 2 for usage
 * errors, existing or unwritable outputs), --force, the default output names, records arriving
 * through the spool with --stats-every passed on, rows visible while the program runs, SIGTERM
 * and SIGINT passed on to the program, and a program killed with SIGKILL mid-run leaving a sound
 * database with what it emitted up to ~200 ms before.
 */
#include "tests.h"

#include "amp-store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AMPPROBE AMP_BINARY_DIR "/ampprobe"
#define HELPER AMP_BINARY_DIR "/tests/amp_record_helper"

// ---------------------------------------------------------------------------------------------
// Helpers

static void setup(void) {
    test_dir_create("launcher");
}
static void teardown(void) {
    test_dir_remove();
}

static int run(const char *const *args) {
    return test_wait_ampprobe(test_spawn_ampprobe(args));
}

static bool exists(const char *name) {
    struct stat sb;
    return stat(test_in_dir(name), &sb) == 0;
}

static sqlite3 *open_db(const char *name) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_msg(amp_store_open_readonly(test_in_dir(name), &db, err) == AMP_OK, "%s", err);
    return db;
}

static const char *q_text(sqlite3 *db, const char *sql) {
    static char buf[512];
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    snprintf(buf, sizeof buf, "<none>");
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        snprintf(buf, sizeof buf, "%s", t ? t : "<null>");
    }
    sqlite3_finalize(st);
    return buf;
}

// The run's exit_status from META.
static int64_t meta_exit_status(const char *name) {
    sqlite3 *db = open_db(name);
    int64_t v = test_query_int(db, "SELECT value FROM META WHERE key = 'exit_status' AND pid = 0");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'status' AND pid = 0"),
                     "complete");
    sqlite3_close(db);
    return v;
}

static int64_t meta_exit_signal(const char *name) {
    sqlite3 *db = open_db(name);
    int64_t v = test_query_int(db, "SELECT value FROM META WHERE key = 'exit_signal' AND pid = 0");
    sqlite3_close(db);
    return v;
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    nanosleep(&(struct timespec){0, ms * 1000000L}, NULL);
}

// Exactly one line on stderr, containing want.
static void assert_one_line_error(const char *want) {
    const char *err = test_slurp("err.txt");
    ck_assert_msg(strstr(err, want) != NULL, "stderr '%s' lacks '%s'", err, want);
    ck_assert_msg(strchr(err, '\n') == err + strlen(err) - 1, "not one line: '%s'", err);
}

// ---------------------------------------------------------------------------------------------
// Exit statuses

START_TEST(test_exit_statuses) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", "t.sqlite", "--", "true", NULL}), 0);
    ck_assert_int_eq(meta_exit_status("t.sqlite"), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "-> t.sqlite"));
    // --counters on a machine without a GPU: the program runs as without it
    ck_assert_int_eq(
        run((const char *[]){"run", "--counters", "-o", "c.sqlite", "--", "true", NULL}), 0);
    ck_assert_int_eq(meta_exit_status("c.sqlite"), 0);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "f.sqlite", "false", NULL}), 1);
    ck_assert_int_eq(meta_exit_status("f.sqlite"), 1);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "e.sqlite", HELPER, "exit", "7", NULL}), 7);
    ck_assert_int_eq(meta_exit_status("e.sqlite"), 7);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "k.sqlite", "--", "/bin/sh", "-c",
                                          "kill -TERM $$", NULL}),
                     128 + SIGTERM);
    ck_assert_int_eq(meta_exit_status("k.sqlite"), 128 + SIGTERM);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "killed by signal 15"));
    ck_assert_int_eq(meta_exit_signal("k.sqlite"), SIGTERM);
    // an exit with 143 by the program itself is no signal
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", "x.sqlite", "--", "/bin/sh", "-c", "exit 143", NULL}),
        143);
    ck_assert_int_eq(meta_exit_status("x.sqlite"), 143);
    ck_assert_int_eq(meta_exit_signal("x.sqlite"), 0);
    // a process the program leaves running is named, on stderr and in META (then ended here)
    ck_assert_int_eq(run((const char *[]){"run", "-o", "o.sqlite", "--", "/bin/sh", "-c",
                                          "sleep 30 & exit 0", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "sh exited and left 1 process running"));
    sqlite3 *odb = open_db("o.sqlite");
    const char *orphans = q_text(odb, "SELECT value FROM META WHERE key = 'orphans' AND pid = 0");
    long orphan = 0;
    ck_assert_msg(sscanf(orphans, "sleep (pid %ld)", &orphan) == 1, "%s", orphans);
    sqlite3_close(odb);
    ck_assert_int_eq(kill((pid_t)orphan, SIGKILL), 0);
    // libampcore's abort: its message is written out before the abort, with the steps before it
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", "a.sqlite", "--", HELPER, "abort", "3", NULL}),
        128 + SIGABRT);
    ck_assert_int_eq(meta_exit_status("a.sqlite"), 128 + SIGABRT);
    sqlite3 *db = open_db("a.sqlite");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'abort'"),
                     "libampcore record_helper.c:1: a broken invariant, on purpose");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 3);
    sqlite3_close(db);
    // also while another thread holds the recorder's locks most of the time (it waits for them)
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(run((const char *[]){"run", "-o", "b.sqlite", "--force", "--", HELPER,
                                              "abort-busy", "3", NULL}),
                         128 + SIGABRT);
        db = open_db("b.sqlite");
        ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM META WHERE key = 'abort'"), 1);
        ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 3);
        sqlite3_close(db);
    }
    // no spool directory is left behind
    DIR *d = opendir(test_dir);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(strstr(e->d_name, ".spool") == NULL, "left behind: %s", e->d_name);
    closedir(d);
}
END_TEST

START_TEST(test_program_not_found) {
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", "x.sqlite", "--", "amp-no-such-program", NULL}), 127);
    ck_assert_str_eq(test_slurp("err.txt"), "ampprobe: amp-no-such-program: command not found\n");
    ck_assert(!exists("x.sqlite"));
    ck_assert_int_eq(run((const char *[]){"--", "./missing/prog", NULL}), 127);
    ck_assert(!exists("ampprobe-1.sqlite"));
    FILE *f = fopen(test_in_dir("data.txt"), "w"); // there, but not executable
    fclose(f);
    ck_assert_int_eq(run((const char *[]){"run", "./data.txt", NULL}), 126);
    assert_one_line_error("data.txt");
    ck_assert_int_eq(run((const char *[]){"run", "/tmp", NULL}), 126);
    assert_one_line_error("/tmp: Is a directory");
    f = fopen(test_in_dir("bad.sh"), "w"); // there, executable, its interpreter missing
    fputs("#!/nonexistent-amp/interp\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(test_in_dir("bad.sh"), 0755), 0);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "b.sqlite", "./bad.sh", NULL}), 127);
    assert_one_line_error("the interpreter its #! line names is not found");
}
END_TEST

START_TEST(test_bad_arguments) {
    static const struct {
        const char *args[8];
        const char *want;
    } cases[] = {
        {{"run", "--bogus", "--", "true"}, "'--bogus'"},
        {{"run", "--stats-every", "0", "true"}, "--stats-every"},
        {{"run", "--stats-every=x", "true"}, "--stats-every"},
        {{"run", "--stats-every", " 5", "true"}, "--stats-every: ' 5'"},
        {{"run", "--stats-every", "2147483648", "true"}, "too large (at most 2147483647)"},
        {{"run", "--stats-every"}, "--stats-every"},
        {{"run", "--trace", "cuda,gpu", "true"}, "--trace"},
        {{"run", "--trace=amp,", "true"}, "--trace"},
        {{"run", "--counters", "--trace", "amp", "true"}, "--counters needs cuda in --trace"},
        {{"run", "--counters=yes", "true"}, "--counters=yes takes no value"},
        {{"run", "--check-grads=1", "true"}, "--check-grads=1 takes no value"},
        {{"run", "--tui", "--", "true"}, "--tui needs a terminal"},
        {{"run", "-o"}, "-o"},
        {{"run"}, "no program"},
        {{"run", "-o", "y.sqlite", "--"}, "no program"},
        {{"--"}, "no program"},
        // each option once, as report, diff and conform take theirs: the last would win
        {{"run", "-o", "a1.sqlite", "-o", "a2.sqlite", "--", "true"}, "-o is given twice"},
        {{"run", "--output", "a4.sqlite", "--output=a5.sqlite", "true"},
         "--output is given twice (see 'ampprobe run --help')"},
        {{"run", "--stats-every", "2", "--stats-every", "3", "true"},
         "--stats-every is given twice"},
        {{"run", "--trace", "amp", "--trace", "cuda", "true"}, "--trace is given twice"},
        {{"run", "--force", "-f", "true"}, "-f is given twice"},
        {{"run", "--counters", "--counters", "true"}, "--counters is given twice"},
        {{"calibrate", "--force", "-f"}, "ampprobe calibrate: -f is given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i].args) == 2, "case %zu", i);
        assert_one_line_error(cases[i].want);
    }
    ck_assert(!exists("y.sqlite"));
    ck_assert(!exists("a1.sqlite") && !exists("a2.sqlite") && !exists("a5.sqlite"));
    ck_assert(!exists("ampprobe-1.sqlite"));
    setenv("AMPPROBE_STATS_EVERY", "abc", 1); // standing in for --stats-every: checked the same
    int rc = run((const char *[]){"run", "true", NULL});
    unsetenv("AMPPROBE_STATS_EVERY");
    ck_assert_int_eq(rc, 2);
    assert_one_line_error("AMPPROBE_STATS_EVERY in the environment: 'abc'");
}
END_TEST

START_TEST(test_help) {
    ck_assert_int_eq(run((const char *[]){"run", "--help", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("out.txt"), "usage: ampprobe run"));
    ck_assert_ptr_nonnull(strstr(test_slurp("out.txt"), "--stats-every"));
    // `ampprobe help CMD` is CMD's help; the top level's commands check their arguments
    ck_assert_int_eq(run((const char *[]){"help", "report", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("out.txt"), "usage: ampprobe report"));
    ck_assert_int_eq(run((const char *[]){"help", "bogus", NULL}), 2);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "no command 'bogus'"));
    ck_assert_int_eq(run((const char *[]){"help", "diff", "x", NULL}), 2);
    ck_assert_ptr_nonnull(
        strstr(test_slurp("err.txt"), "help takes one command ('x' after 'diff')"));
    ck_assert_int_eq(run((const char *[]){"--version", NULL}), 0);
    ck_assert_str_eq(test_slurp("out.txt"), "ampprobe 0.1.0\n");
    ck_assert_int_eq(run((const char *[]){"--version", "x", NULL}), 2);
    ck_assert_int_eq(run((const char *[]){"frobnicate", NULL}), 2);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "unknown command 'frobnicate'"));
}
END_TEST

// --check-grads reaches the PyTorch bridge through the program's environment.
START_TEST(test_check_grads_is_passed_on) {
    static const char *const show = "printf '%s' \"$AMPPROBE_CHECK_GRADS\" > env.txt";
    ck_assert_int_eq(run((const char *[]){"run", "-o", "g.sqlite", "--check-grads", "--", "sh",
                                          "-c", show, NULL}),
                     0);
    ck_assert_str_eq(test_slurp("env.txt"), "1");
    ck_assert_int_eq(run((const char *[]){"run", "-o", "h.sqlite", "--", "sh", "-c", show, NULL}),
                     0);
    ck_assert_str_eq(test_slurp("env.txt"), "");
    ck_assert_int_eq(run((const char *[]){"run", "--help", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("out.txt"), "--check-grads"));
}
END_TEST

// ampprobe run inside ampprobe run: the inner run takes the records, and says so (the outer
// database got no step and nothing said why).
START_TEST(test_a_run_inside_a_run_says_so) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", "outer.sqlite", "--", AMPPROBE, "run", "-o",
                                          "inner.sqlite", "--", "true", NULL}),
                     0);
    const char *err = test_slurp("err.txt");
    ck_assert_msg(strstr(err, "this run is inside another ampprobe run") &&
                      strstr(err, "true's records go into inner.sqlite alone"),
                  "%s", err);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "alone.sqlite", "--", "true", NULL}), 0);
    ck_assert_ptr_null(strstr(test_slurp("err.txt"), "inside another"));
}
END_TEST

// --trace as the program and META see it: each name once, in order.
START_TEST(test_trace_list_is_named_once) {
    static const char *const show = "printf '%s' \"$AMPPROBE_TRACE\" > env.txt";
    ck_assert_int_eq(run((const char *[]){"run", "-o", "t.sqlite", "--trace=nvtx,amp,amp", "--",
                                          "sh", "-c", show, NULL}),
                     0);
    ck_assert_str_eq(test_slurp("env.txt"), "amp,nvtx");
    sqlite3 *db = open_db("t.sqlite");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'trace'"), "amp,nvtx");
    sqlite3_close(db);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Output files

START_TEST(test_existing_output_and_force) {
    FILE *f = fopen(test_in_dir("out.sqlite"), "w");
    fputs("hello", f);
    fclose(f);
    ck_assert_int_eq(run((const char *[]){"run", "-o", "out.sqlite", "--", "true", NULL}), 2);
    assert_one_line_error("--force");
    ck_assert_str_eq(test_slurp("out.sqlite"), "hello");
    ck_assert_int_eq(run((const char *[]){"run", "--force", "-o", "out.sqlite", "true", NULL}), 0);
    ck_assert_int_eq(meta_exit_status("out.sqlite"), 0);
    // --force replaces a file, never a pipe or a device (-f -o /dev/null as root would delete it)
    ck_assert_int_eq(mkfifo(test_in_dir("pipe"), 0644), 0);
    ck_assert_int_eq(run((const char *[]){"run", "-f", "-o", "pipe", "true", NULL}), 2);
    assert_one_line_error("pipe is not a file");
    struct stat sb;
    ck_assert_int_eq(stat(test_in_dir("pipe"), &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    // nor the file of a run still being recorded (its collector's, here this process's): the
    // live run would go on writing a deleted file and report success
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new(test_in_dir("live.sqlite"), NULL, &c), AMP_OK);
    ck_assert_int_eq(run((const char *[]){"run", "-f", "-o", "live.sqlite", "true", NULL}), 2);
    assert_one_line_error("live.sqlite is being recorded by a running ampprobe");
    ck_assert_int_eq(amp_collector_finish(c, 0), AMP_OK);
    amp_collector_free(c);
    ck_assert_int_eq(run((const char *[]){"run", "-f", "-o", "live.sqlite", "true", NULL}), 0);
    // -o with a directory's name or '--'
    ck_assert_int_eq(run((const char *[]){"run", "-o", "newdir/", "true", NULL}), 2);
    assert_one_line_error("newdir/: it names a directory");
    ck_assert_int_eq(run((const char *[]){"run", "-o", "--", "true", NULL}), 2);
    assert_one_line_error("-o needs a file name");
}
END_TEST

START_TEST(test_unwritable_output) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", "/nonexistent-amp/x.sqlite", "true", NULL}),
                     2);
    assert_one_line_error("/nonexistent-amp/x.sqlite");
    fclose(fopen(test_in_dir("plain"), "w"));
    ck_assert_int_eq(run((const char *[]){"run", "-o", "plain/x.sqlite", "true", NULL}), 2);
    assert_one_line_error("plain/x.sqlite");
    if (geteuid() != 0) { // root writes anywhere
        ck_assert_int_eq(mkdir(test_in_dir("ro"), 0555), 0);
        ck_assert_int_eq(run((const char *[]){"run", "-o", "ro/x.sqlite", "true", NULL}), 2);
        assert_one_line_error("ro/x.sqlite");
    }
}
END_TEST

// A relative -o (and the default name) reach a program that changes directory: the spool
// directory beside the database is passed on by its absolute name.
START_TEST(test_relative_output_and_a_program_that_changes_directory) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", "rel.sqlite", "--", "sh", "-c",
                                          "mkdir -p sub && cd sub && " HELPER " steps 3", NULL}),
                     0);
    sqlite3 *db = open_db("rel.sqlite");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 3);
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'output'"), "rel.sqlite");
    sqlite3_close(db);
}
END_TEST

START_TEST(test_default_output_names) {
    ck_assert_int_eq(run((const char *[]){"--", "true", NULL}), 0);
    ck_assert_int_eq(run((const char *[]){"run", "true", NULL}), 0);
    ck_assert_int_eq(meta_exit_status("ampprobe-1.sqlite"), 0);
    ck_assert_int_eq(meta_exit_status("ampprobe-2.sqlite"), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "ampprobe-2.sqlite"));
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Records, signals, crashes

START_TEST(test_records_through_the_spool) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", "r.sqlite", "--stats-every", "5", "--",
                                          HELPER, "steps", "20", NULL}),
                     0);
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "20 steps (0 skipped), 1 events"));
    sqlite3 *db = open_db("r.sqlite");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 20);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS"), 20);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_LAYERS"), 2);
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'stats_every' AND pid != 0"),
                     "5");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'stats_every' AND pid = 0"),
                     "5");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'trace'"), "amp,cuda,nvtx");
    ck_assert_ptr_nonnull(strstr(q_text(db, "SELECT value FROM META WHERE key = 'command'"),
                                 "amp_record_helper steps 20"));
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES"), "complete");
    sqlite3_close(db);
}
END_TEST

// Starts `ampprobe run -o NAME -- helper wait` (through a shell script when wrapped), waits until
// the helper is ready and its first record is in the database, and returns ampprobe's pid.
static pid_t start_waiting(const char *name, bool wrapped) {
    pid_t pid = test_spawn_ampprobe(
        wrapped ? (const char *[]){"run", "-o", name, "--", "sh", "-c", HELPER " wait; echo after",
                                   NULL}
                : (const char *[]){"run", "-o", name, "--", HELPER, "wait", NULL});
    int64_t t0 = mono_ms();
    while (strstr(test_slurp("out.txt"), "ready") == NULL) {
        ck_assert_msg(mono_ms() - t0 < 10000, "the helper did not start");
        sleep_ms(10);
    }
    int64_t ready = mono_ms();
    for (;;) { // the helper's META row reaches the database within about a second
        sqlite3 *db;
        char err[AMP_STORE_ERR_MAX];
        if (amp_store_open_readonly(test_in_dir(name), &db, err) == AMP_OK) {
            int64_t n = test_query_int(
                db, "SELECT count(*) FROM META WHERE key = 'mode' AND value = 'wait'");
            sqlite3_close(db);
            if (n == 1) break;
        }
        ck_assert_msg(mono_ms() - ready < 1500, "no row after %lld ms",
                      (long long)(mono_ms() - ready));
        sleep_ms(20);
    }
    return pid;
}

START_TEST(test_signals_are_forwarded) {
    pid_t pid = start_waiting("term.sqlite", false);
    kill(pid, SIGTERM);
    ck_assert_int_eq(test_wait_ampprobe(pid), 128 + SIGTERM);
    ck_assert_int_eq(meta_exit_status("term.sqlite"), 128 + SIGTERM);
    pid = start_waiting("int.sqlite", false);
    kill(pid, SIGINT);
    ck_assert_int_eq(test_wait_ampprobe(pid), 128 + SIGINT);
    sqlite3 *db = open_db("int.sqlite");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'mode'"), "wait");
    ck_assert_int_eq(test_query_int(db, "SELECT value FROM META WHERE key = 'exit_status'"),
                     128 + SIGINT);
    sqlite3_close(db);
    // a shell script between ampprobe and the trainer does not pass a SIGTERM on while it
    // waits: ampprobe sends it to the recording process below it too, which ends (not orphaned)
    pid = start_waiting("wrapped.sqlite", true);
    kill(pid, SIGTERM);
    ck_assert_int_eq(test_wait_ampprobe(pid), 128 + SIGTERM);
    db = open_db("wrapped.sqlite");
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES"), "complete");
    sqlite3_close(db);
    ck_assert_ptr_null(strstr(test_slurp("out.txt"), "after"));
    // SIGUSR1 (a batch system's early warning) goes on to the program, which it ends here (its
    // default action), and the launcher records that instead of dying of it
    pid = start_waiting("usr1.sqlite", false);
    kill(pid, SIGUSR1);
    ck_assert_int_eq(test_wait_ampprobe(pid), 128 + SIGUSR1);
    ck_assert_int_eq(meta_exit_status("usr1.sqlite"), 128 + SIGUSR1);
    ck_assert_int_eq(meta_exit_signal("usr1.sqlite"), SIGUSR1);
}
END_TEST

// A SIGTERM reaches every recording process below the launcher, however many (it reached 64).
START_TEST(test_signals_reach_every_recording_process) {
    enum { N = 70 };
    char script[256];
    snprintf(script, sizeof script, "i=0; while [ $i -lt %d ]; do %s wait & i=$((i+1)); done; wait",
             N, HELPER);
    pid_t pid = test_spawn_ampprobe(
        (const char *[]){"run", "-o", "many.sqlite", "--", "sh", "-c", script, NULL});
    for (const int64_t t0 = mono_ms();; sleep_ms(50)) { // every helper's META row is in
        ck_assert_msg(mono_ms() - t0 < 30000, "the helpers did not all start");
        sqlite3 *db;
        char err[AMP_STORE_ERR_MAX];
        if (amp_store_open_readonly(test_in_dir("many.sqlite"), &db, err) != AMP_OK) continue;
        const int64_t n = test_query_int(db, "SELECT count(*) FROM META WHERE key = 'mode'");
        sqlite3_close(db);
        if (n == N) break;
    }
    kill(pid, SIGTERM);
    test_wait_ampprobe(pid);
    sqlite3 *db = open_db("many.sqlite");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES WHERE status = "
                                        "'complete'"),
                     N);
    sqlite3_close(db);
}
END_TEST

// Many recording processes at once under a low limit on open files: none is lost, and the program
// keeps the soft limit it was given (the launcher raises its own). Under a hard limit too low for
// all of their spool files at once, those the launcher cannot open yet wait for a descriptor (they
// were ignored, their records lost: this part fails without the wait; the raise alone is not
// told apart, the wait covering for it).
START_TEST(test_spool_files_wait_for_a_descriptor) {
    enum { N = 60 };
    // every helper alive at once (more files than descriptors): the helpers are killed once each
    // has said it recorded (a line in ready.txt; under load they start slowly) and a second has
    // passed for their spools' flushes (SIGTERM ends them without one)
    char script[768];
    snprintf(script, sizeof script,
             "ulimit -Sn > limit.txt; : > ready.txt; i=0; while [ $i -lt %d ]; do "
             "%s wait >> ready.txt & pids=\"$pids $!\"; i=$((i+1)); done; t=0; "
             "while [ $(grep -c ready ready.txt) -lt %d ] && [ $t -lt 600 ]; do sleep 0.1; "
             "t=$((t+1)); done; sleep 1; kill $pids; wait",
             N, HELPER, N);
    for (int hard = 0; hard <= 1; hard++) {
        const char *name = hard ? "hard.sqlite" : "soft.sqlite";
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct rlimit r;
            getrlimit(RLIMIT_NOFILE, &r);
            r.rlim_cur = 40;
            if (hard) r.rlim_max = 40;
            if (setrlimit(RLIMIT_NOFILE, &r) != 0 || chdir(test_in_dir(".")) != 0) _exit(126);
            execl(AMPPROBE, AMPPROBE, "run", "-o", name, "--", "sh", "-c", script, (char *)NULL);
            _exit(127);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
        ck_assert_str_eq(test_slurp("limit.txt"), "40\n");
        sqlite3 *db = open_db(name);
        ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM META WHERE key = 'mode'"), N);
        sqlite3_close(db);
    }
}
END_TEST

// The database removed while the run records (or replaced by another file): the launcher says
// that its rows are gone (it said "N steps ... -> NAME" of a file that no longer existed).
START_TEST(test_a_database_removed_mid_run_is_said) {
    pid_t pid = start_waiting("gone.sqlite", false);
    char path[512];
    snprintf(path, sizeof path, "%s", test_in_dir("gone.sqlite"));
    ck_assert_int_eq(unlink(path), 0);
    kill(pid, SIGTERM);
    ck_assert_int_eq(test_wait_ampprobe(pid), 128 + SIGTERM);
    const char *err = test_slurp("err.txt");
    ck_assert_msg(strstr(err, "gone.sqlite holds nothing (there is no such file now)") &&
                      strstr(err, "recording stopped short of the run: the database file was "
                                  "removed or replaced while the run was recorded"),
                  "%s", err);
}
END_TEST

// ampprobe started with its stderr closed: the output's descriptor, held from its creation on,
// must not become fd 2 (the summary line was written into the database: "not an SQLite file").
START_TEST(test_a_closed_stderr_does_not_reach_the_database) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (chdir(test_in_dir(".")) != 0) _exit(126);
        close(2);
        execl(AMPPROBE, AMPPROBE, "run", "-o", "closed.sqlite", "--", HELPER, "steps", "5",
              (char *)NULL);
        _exit(127);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3 *db = open_db("closed.sqlite");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 5);
    sqlite3_close(db);
}
END_TEST

// A crash (SIGSEGV, a failed assert's SIGABRT, ...) loses nothing the program recorded: the
// recorder's handler writes its buffer out before the process dies (50 steps in well under the
// 100 ms between flushes).
START_TEST(test_crash_keeps_every_record) {
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", "s.sqlite", "--", HELPER, "assert", "50", NULL}),
        128 + SIGABRT);
    sqlite3 *db = open_db("s.sqlite");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 50);
    ck_assert_int_eq(test_query_int(db, "SELECT value FROM META WHERE key = 'exit_signal'"),
                     SIGABRT);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_kill9_mid_run) {
    // 50 steps 10 ms apart, then SIGKILL: what was emitted up to ~200 ms before is there.
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", "c.sqlite", "--", HELPER, "crash", "50", "10", NULL}),
        128 + SIGKILL);
    sqlite3 *db = open_db("c.sqlite");
    ck_assert_str_eq(q_text(db, "PRAGMA integrity_check"), "ok");
    int64_t last = test_query_int(db, "SELECT max(step) FROM AMP_STEPS");
    ck_assert_msg(last >= 49 - 20, "last step %lld", (long long)last);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), last + 1);
    ck_assert_int_eq(test_query_int(db, "SELECT value FROM META WHERE key = 'exit_status'"),
                     128 + SIGKILL);
    const char *status = q_text(db, "SELECT status FROM AMP_PROCESSES");
    ck_assert_msg(strcmp(status, "complete") == 0 || strcmp(status, "truncated") == 0, "%s",
                  status);
    sqlite3_close(db);
}
END_TEST

Suite *launcher_suite(void) {
    Suite *s = suite_create("launcher");
    TCase *c = tcase_create("run");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 60);
    tcase_add_test(c, test_exit_statuses);
    tcase_add_test(c, test_program_not_found);
    tcase_add_test(c, test_bad_arguments);
    tcase_add_test(c, test_help);
    tcase_add_test(c, test_check_grads_is_passed_on);
    tcase_add_test(c, test_a_run_inside_a_run_says_so);
    tcase_add_test(c, test_trace_list_is_named_once);
    tcase_add_test(c, test_existing_output_and_force);
    tcase_add_test(c, test_unwritable_output);
    tcase_add_test(c, test_default_output_names);
    tcase_add_test(c, test_relative_output_and_a_program_that_changes_directory);
    tcase_add_test(c, test_records_through_the_spool);
    tcase_add_test(c, test_signals_are_forwarded);
    tcase_add_test(c, test_a_closed_stderr_does_not_reach_the_database);
    tcase_add_test(c, test_a_database_removed_mid_run_is_said);
    tcase_add_test(c, test_signals_reach_every_recording_process);
    tcase_add_test(c, test_spool_files_wait_for_a_descriptor);
    tcase_add_test(c, test_kill9_mid_run);
    tcase_add_test(c, test_crash_keeps_every_record);
    suite_add_tcase(s, c);
    return s;
}
