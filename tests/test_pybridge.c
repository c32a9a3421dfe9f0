/*
 * test_pybridge.c — the `pybridge` suite: the torch-free parts of the PyTorch bridge
 * (probe/python) with the system python3. `ampprobe run --torch` runs
 * probe/python/tests/ci_records.py, which asserts the name bookkeeping (layer ids and parents, op
 * names, event details, AMP_OPS columns), the torch.compile pieces (layer names without
 * `_orig_mod`, the callbacks around a module compiled in place) and writes one record of each AMP
 * type through ctypes and libamprecord.so (autocast policies asked of libampcore's lists); the rows
 * must arrive in the database with the values and NULLs it wrote. A program that dies of an
 * uncaught exception under --torch has it recorded (META exception) and named by the report, and
 * so does a bridge that cannot attach (META bridge_error: a torch older than it needs).
 * --torch without the library is a usage error. With a torch, cpu_judge.py checks the forward
 * judge and the module links (what reads each module's output) on small CPU models, and
 * cpu_devstats.py the step statistics' queue, cpu_trace.py the loss tape and its replay,
 * cpu_diagnose.py the search per module and the updates compared, cpu_models.py the wrappers
 * looked through and the models trained beside the watched one, cpu_settings.py watch()'s
 * arguments and their environment variables. pyflakes reads all of the bridge's Python. Without
 * python3 (or torch, for those six; or pyflakes) the cases say so and pass.
 */
#include "tests.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define AMPPROBE AMP_BINARY_DIR "/ampprobe"
#define SCRIPT AMP_SOURCE_DIR "/probe/python/tests/ci_records.py"

static bool have_python(void) {
    if (system("command -v python3 >/dev/null 2>&1") == 0) return true;
    fprintf(stderr, "pybridge: python3 not found: skipped\n");
    return false;
}

// The text of the first column of sql's first row ("NULL" for NULL, "" for no row).
static void query(sqlite3 *db, const char *sql, char *out, size_t n) {
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    out[0] = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        snprintf(out, n, "%s", v ? (const char *)v : "NULL");
    }
    sqlite3_finalize(st);
}

#define ASSERT_ROW(db, sql, want)                                                                  \
    do {                                                                                           \
        char got_[1024];                                                                           \
        query(db, sql, got_, sizeof got_);                                                         \
        ck_assert_msg(strcmp(got_, want) == 0, "%s\n  got  '%s'\n  want '%s'", sql, got_, want);   \
    } while (0)

// What runs python3 under the sanitizers: python3 is not built with them, so their runtimes
// must be loaded before libamprecord.so (built with them) is.
#ifdef AMP_SANITIZER_PRELOAD
#define PYTHON_ENV "env LD_PRELOAD=" AMP_SANITIZER_PRELOAD " ASAN_OPTIONS=detect_leaks=0 "
#else
#define PYTHON_ENV ""
#endif

// The first line of dir/name into buf (the test fails without one).
static void first_line(const char *dir, const char *name, char *buf, int n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: not there", path);
    ck_assert_msg(fgets(buf, n, f) != NULL, "%s: empty", path);
    fclose(f);
}

START_TEST(test_records_through_ctypes) {
    if (!have_python()) return;
    char dir[64], db_path[96];
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-pybridge-"));
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s run --torch --force -o %s -- python3 %s 2>&1", PYTHON_ENV,
             AMPPROBE, db_path, SCRIPT);
    ck_assert_msg(system(cmd) == 0, "%s failed", cmd);

    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ASSERT_ROW(db, "SELECT count(*) FROM AMP_LAYERS", "9");
    ASSERT_ROW(db,
               "SELECT group_concat(id || ':' || ifnull(parent_id, 'NULL') || ':' || name, ' ') "
               "FROM (SELECT * FROM AMP_LAYERS ORDER BY id)",
               "0:NULL:TinyGPT 1:0:emb 2:0:blocks 3:2:blocks.0 4:3:blocks.0.attn "
               "5:4:blocks.0.attn.qkv 6:2:blocks.1 7:0:head 8:6:blocks.1.mlp.fc");
    ASSERT_ROW(db, "SELECT value FROM META WHERE key = 'bridge' AND pid != 0", "ci");
    ASSERT_ROW(db,
               "SELECT layer_id || ' ' || op || ' ' || kind || ' ' || dtype || ' ' || target_dtype "
               "|| ' ' || numel || ' ' || min || ' ' || max || ' ' || amax || ' ' || n_nan || ' ' "
               "|| n_posinf || ' ' || n_neginf || ' ' || n_overflow || ' ' || n_underflow || ' ' "
               "|| n_zero FROM AMP_TENSOR_STATS WHERE kind = 'activation' AND step = 0",
               "4 linear activation f16 f16 1024 -3.5 70000.0 70000.0 1 2 3 4 5 6");
    ASSERT_ROW(db,
               "SELECT op || ' ' || ifnull(target_dtype, 'NULL') || ' ' || ifnull(min, 'NULL') || "
               "' ' || ifnull(amax, 'NULL') || ' ' || ifnull(n_overflow, 'NULL') || ' ' || "
               "ifnull(n_underflow, 'NULL') || ' ' || n_zero FROM AMP_TENSOR_STATS WHERE kind = "
               "'weight_grad'",
               "blocks.0.attn.qkv.weight NULL NULL NULL NULL NULL 0");
    ASSERT_ROW(db, // amp_record_tensor_stats_many: finished (amax derived, none finite: NULL)
               "SELECT group_concat(layer_id || ' ' || op || ' ' || kind || ' ' || dtype || ' ' || "
               "numel || ' ' || ifnull(min, 'NULL') || ' ' || ifnull(amax, 'NULL') || ' ' || "
               "n_nan || ' ' || n_posinf || ' ' || n_underflow || ' ' || n_zero, '; ') FROM "
               "(SELECT * FROM AMP_TENSOR_STATS WHERE step = 2 ORDER BY layer_id DESC)",
               "7 head activation_grad f16 8 -2.0 4.0 1 0 3 2; "
               "5 blocks.0.attn.qkv.bias weight_grad f32 4 NULL NULL 0 4 0 0");
    ASSERT_ROW(db,
               "SELECT step || ' ' || layer_id || ' ' || op || ' ' || phase || ' ' || severity || "
               "' ' || count || ' ' || value || ' ' || detail FROM AMP_EVENTS WHERE kind = "
               "'nonfinite_producer'",
               "0 4 mul fwd error 7890 65440.0 output f16 (8,) min -65440 max 65440 amax 65440 "
               "(0 nan, 3913 +inf, 3977 -inf); ");
    ASSERT_ROW(db,
               "SELECT step || ' ' || ifnull(layer_id, 'NULL') || ' ' || ifnull(op, 'NULL') || ' ' "
               "|| ifnull(phase, 'NULL') || ' ' || ifnull(detail, 'NULL') FROM AMP_EVENTS WHERE "
               "kind = 'loss_nonfinite'",
               "1 NULL NULL NULL NULL");
    ASSERT_ROW(db,
               "SELECT scale_before || ' ' || scale_after || ' ' || found_inf || ' ' || "
               "growth_tracker || ' ' || skipped FROM AMP_SCALE WHERE step = 1",
               "65536.0 32768.0 1 0 1");
    ASSERT_ROW(db,
               "SELECT group_concat(step || ':' || ifnull(loss, 'NULL') || ':' || loss_finite || "
               "':' || (end_ns - start_ns) || ':' || ifnull(skipped, 'NULL') || ':' || "
               "ifnull(mem_peak_bytes, 'NULL'), ' ') FROM (SELECT * FROM AMP_STEPS ORDER BY step)",
               "0:2.5:1:1000000:NULL:NULL 1:NULL:0:2000000:1:3221225472");
    ASSERT_ROW(
        db, // amp_record_op: NULL policy when autocast was off, interval kept
        "SELECT group_concat(step || ' ' || ifnull(layer_id, 'NULL') || ' ' || op || ' ' || "
        "phase || ' ' || in_dtypes || ' ' || out_dtype || ' ' || ifnull(policy, 'NULL') || "
        "' ' || shapes || ' ' || flops || ' ' || bytes || ' ' || (end_ns - start_ns), '; ') "
        "FROM (SELECT * FROM AMP_OPS ORDER BY start_ns)",
        "1 5 linear fwd f16,f16,f16 f16 lower_precision_fp (8, 64),(32, 64),(32,) 32768 7296 "
        "2000; 1 NULL cross_entropy fwd f32,i64 f32 NULL (8, 10),(8,) 8 420 500");
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

// A Python program that dies of an uncaught exception under --torch (no torch needed): the
// exception is recorded before Python prints it, and the report says what the program raised.
START_TEST(test_uncaught_exception_is_recorded) {
    if (!have_python()) return;
    char dir[64], db_path[96], out_path[128];
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-pybridge-exc-"));
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", dir);
    snprintf(out_path, sizeof out_path, "%s/report.txt", dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s%s run --torch --force -o %s -- python3 -c \"raise ValueError('bad batch 3')\" "
             ">%s/log 2>&1; echo $? >%s/rc",
             PYTHON_ENV, AMPPROBE, db_path, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    char buf[256];
    first_line(dir, "rc", buf, sizeof buf);
    ck_assert_str_eq(buf, "1\n");
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ASSERT_ROW(db, "SELECT value FROM META WHERE key = 'exception'", "ValueError: bad batch 3");
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "%s report %s -o %s", AMPPROBE, db_path, out_path);
    ck_assert_int_eq(system(cmd), 0);
    char *report = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(report, "the program failed with exit status 1 before its first step"),
                  "%s", report);
    ck_assert_msg(strstr(report, "It raised ValueError: bad batch 3."), "%s", report);
    free(report);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

// A torch the bridge cannot work with (a stand-in package that says it is 1.9.0: no real torch
// needed): the program runs on, the reason is in META bridge_error and the report names it.
START_TEST(test_bridge_that_cannot_attach_is_named) {
    if (!have_python()) return;
    char dir[64], cmd[2048], path[512], buf[512];
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-pybridge-old-"));
    snprintf(path, sizeof path, "%s/torch", dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/torch/__init__.py", dir);
    static const char stand_in[] = "__version__ = '1.9.0'\n";
    test_write_file(path, stand_in, sizeof stand_in - 1);
    snprintf(cmd, sizeof cmd,
             "cd %s && PYTHONPATH=%s %s%s run --torch -o run.sqlite -- python3 -c "
             "\"import torch; print('trained', torch.__version__)\" >out 2>err; echo $? >rc",
             dir, dir, PYTHON_ENV, AMPPROBE);
    ck_assert_int_eq(system(cmd), 0);
    first_line(dir, "rc", buf, sizeof buf);
    ck_assert_str_eq(buf, "0\n");
    first_line(dir, "out", buf, sizeof buf);
    ck_assert_str_eq(buf, "trained 1.9.0\n");
    first_line(dir, "err", buf, sizeof buf);
    ck_assert_msg(strstr(buf, "the PyTorch bridge did not attach: ImportError: ampprobe.torch "
                              "needs torch 2.4 or newer; this is torch 1.9.0"),
                  "%s", buf);
    snprintf(path, sizeof path, "%s/run.sqlite", dir);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ASSERT_ROW(db, "SELECT value FROM META WHERE key = 'bridge_error'",
               "ImportError: ampprobe.torch needs torch 2.4 or newer; this is torch 1.9.0");
    sqlite3_close(db);
    snprintf(cmd, sizeof cmd, "%s report %s/run.sqlite -o %s/report.txt", AMPPROBE, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/report.txt", dir);
    char *report = test_read_file(path, NULL);
    ck_assert_msg(strstr(report, "warning [run-end]") &&
                      strstr(report, "the PyTorch bridge did not attach") &&
                      strstr(report, "this is torch 1.9.0"),
                  "%s", report);
    free(report);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_torch_needs_the_build) {
    if (!have_python()) return;
    // a copy of ampprobe without libamprecord.so and python/ beside it refuses --torch
    char dir[64];
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-pybridge-bin-"));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cp %s %s/ampprobe && %s/ampprobe run --torch -o %s/x.sqlite -- python3 -c 1 "
             "2>%s/err; echo $? >%s/rc",
             AMPPROBE, dir, dir, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    char path[512], buf[512];
    first_line(dir, "rc", buf, sizeof buf);
    ck_assert_str_eq(buf, "2\n");
    first_line(dir, "err", buf, sizeof buf);
    ck_assert_msg(strstr(buf, "--torch needs") && strstr(buf, "libamprecord.so"), "%s", buf);
    snprintf(path, sizeof path, "%s/x.sqlite", dir);
    ck_assert_int_ne(access(path, F_OK), 0); // nothing created
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

// ampprobe.torch in a python without torch (here: its import made to fail) says what it needs
// and which python lacks it, rather than a bare ModuleNotFoundError.
START_TEST(test_bridge_without_torch_says_so) {
    if (!have_python()) return;
    char dir[64];
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/amp-pybridge-notorch-"));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "PYTHONPATH=%s/python python3 -c 'import sys; sys.modules[\"torch\"] = None; "
             "import ampprobe.torch' 2>&1 | tail -n 1 >%s/err",
             AMP_BINARY_DIR, dir);
    ck_assert_int_eq(system(cmd), 0);
    char buf[512];
    first_line(dir, "err", buf, sizeof buf);
    ck_assert_msg(strstr(buf, "ImportError: ampprobe.torch needs PyTorch (2.4 or newer), and this "
                              "python (") &&
                      strstr(buf, ") has none"),
                  "%s", buf);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

enum { TAIL = 8192 }; // bytes of a command's output kept (run_tail)

// Runs cmd through the shell; its output's last part (stdout, and stderr where cmd sends it there)
// into out[TAIL], read to its end (a long one must not block it); returns its exit status.
static int run_tail(const char *cmd, char out[TAIL]) {
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = 0, got;
    while ((got = fread(out + n, 1, TAIL - 1 - n, p)) > 0) {
        n += got;
        if (n == TAIL - 1) { // full: keep the second half
            memmove(out, out + n / 2, n - n / 2);
            n -= n / 2;
        }
    }
    out[n] = '\0';
    int status = pclose(p);
    ck_assert_msg(WIFEXITED(status), "%s", out);
    return WEXITSTATUS(status);
}

// Runs the torch script probe/python/tests/NAME.py with python3's torch or the system python's
// (where apt's python3-torch goes; CI installs Debian's): it must print "NAME: all passed".
// Without a torch (exit status 77) the case says so and passes.
static void torch_script(const char *name) {
    if (!have_python()) return;
    char cmd[1024], out[TAIL];
    snprintf(cmd, sizeof cmd,
             "py=python3; python3 -c 'import torch' 2>/dev/null || ! /usr/bin/python3 -c 'import "
             "torch' 2>/dev/null || py=/usr/bin/python3; PYTHONPATH=%s/probe/python $py "
             "%s/probe/python/tests/%s.py 2>&1",
             AMP_SOURCE_DIR, AMP_SOURCE_DIR, name);
    const int status = run_tail(cmd, out);
    if (status == 77) {
        fprintf(stderr, "pybridge: python3 has no torch: %s skipped\n", name);
        return;
    }
    char want[64];
    snprintf(want, sizeof want, "%s: all passed", name);
    ck_assert_msg(status == 0 && strstr(out, want), "%s", out);
}

// The torch scripts of probe/python/tests, each what it checks on the CPU.
static const char *const torch_scripts[] = {
    // the forward judge of a broken step's re-run, and the module links that name a backward
    // traced per module, on small CPU models
    "cpu_judge",
    // the step statistics' queue: deferred tensors read at the next flush in their places,
    // checked outputs written to before their read listed
    "cpu_devstats",
    // the loss tape and its replay: what it keeps of a loss computation, the replay on another
    // output, a log of 0 there judged outside any module; the node tagger's layers on a re-run
    // forward's autograd nodes, and the backward tracer's first producer
    "cpu_trace",
    // the search per module from a step's figures (where the forward and the backward first went
    // non-finite, named through a real forward's module links) and the comparison of 16-bit
    // parameters' updates (what rounding took; when nothing is compared)
    "cpu_diagnose",
    // what the watcher takes as the model: the wrappers it looks through, the layers it names,
    // the models an optimizer trains beside the watched one (named, or recorded too under
    // autoattach) and a second watch()'s model
    "cpu_models",
    // watch()'s arguments and the environment variables that stand for them: what is taken, the
    // default and one line on stderr for a bad value, the error that names a bad argument
    "cpu_settings",
};

START_TEST(test_torch_script_on_the_cpu) {
    torch_script(torch_scripts[_i]);
}
END_TEST

// The bridge's Python (the package, its tests and benchmarks), most of which runs only with a
// recent torch on a GPU, read by pyflakes: a name used but never defined, or imported and never
// used, fails here, where CI sees it (Debian's pyflakes3 for /usr/bin/python3; without it the
// case says so and passes).
START_TEST(test_python_sources_pass_pyflakes) {
    if (system("/usr/bin/python3 -m pyflakes --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "pybridge: no pyflakes for /usr/bin/python3 (apt-get install pyflakes3): "
                        "the Python sources are not checked\n");
        return;
    }
    char out[TAIL];
    const int status = run_tail("cd " AMP_SOURCE_DIR " && /usr/bin/python3 -m pyflakes "
                                "probe/python/ampprobe probe/python/tests probe/python/bench 2>&1",
                                out);
    ck_assert_msg(status == 0 && !out[0], "pyflakes (exit status %d):\n%s", status, out);
}
END_TEST

Suite *pybridge_suite(void) {
    Suite *s = suite_create("pybridge");
    TCase *c = tcase_create("bridge");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_records_through_ctypes);
    tcase_add_test(c, test_uncaught_exception_is_recorded);
    tcase_add_test(c, test_bridge_that_cannot_attach_is_named);
    tcase_add_test(c, test_torch_needs_the_build);
    tcase_add_test(c, test_bridge_without_torch_says_so);
    tcase_add_loop_test(c, test_torch_script_on_the_cpu, 0,
                        (int)(sizeof torch_scripts / sizeof torch_scripts[0]));
    tcase_add_test(c, test_python_sources_pass_pyflakes);
    suite_add_tcase(s, c);
    return s;
}
