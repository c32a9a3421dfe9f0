/*
 * test_e2e.c — end to end on the CPU: each sample's --fault run under `ampprobe run` leaves a
 * database whose AMP_EVENTS name the right producer (layer, op, step) or show the underflow or
 * thrash pattern; healthy runs have no non-finite events; the scale history in AMP_SCALE is what
 * the sample printed; a kill -9 of the training process leaves a database that opens, passes
 * integrity_check and holds the steps before the kill, and one of the launcher leaves a program
 * that trains on unrecorded, its spool named by the report; a damaged database is read or
 * refused in one plain line, never a crash.
 */
#include "tests.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define AMPPROBE AMP_BINARY_DIR "/ampprobe"
#define SAMPLE(name) AMP_BINARY_DIR "/samples/" name

static char dir[64];
static char db_path[128];

static void setup(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/ampprobe-e2e-"));
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", dir);
}

static void teardown(void) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

// Runs `ampprobe run -o db -- sample args`, keeping the sample's stdout in out; returns the exit
// status.
static int probe_run(const char *sample, const char *args, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s run -o %s -- %s %s 2>/dev/null", AMPPROBE, db_path, sample, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static sqlite3 *open_db(void) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    return db;
}

// The first text/integer value of a query ("" / -1 when there is no row).
static char text_buf[512];
static const char *query_text(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    text_buf[0] = 0;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(text_buf, sizeof text_buf, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return text_buf;
}

#define FIRST_EVENT(kind_sql)                                                                      \
    "SELECT e.step || ' ' || COALESCE(l.name, '-') || ' ' || COALESCE(e.op, '-') || ' ' || "       \
    "COALESCE(e.phase, '-') FROM AMP_EVENTS e LEFT JOIN AMP_LAYERS l ON l.pid = e.pid AND "        \
    "l.id = e.layer_id WHERE " kind_sql " ORDER BY e.step, e.rowid LIMIT 1"

START_TEST(test_attn_overflow_names_the_attention_logits) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("tiny_gpt"),
                               "--precision fp16 --fault attn-overflow --steps 6", out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, FIRST_EVENT("e.kind = 'nonfinite_producer'")),
                     "3 blocks.1.attn mul fwd");
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind = 'nonfinite_producer' "
                           "AND step < 3"),
        0);
    // the scale history is the one the sample printed
    int step;
    double scale;
    for (char *line = strstr(out, "step "); line; line = strstr(line + 1, "\nstep ")) {
        if (*line == '\n') line++;
        ck_assert_int_eq(sscanf(line, "step %d loss %*s scale %lf", &step, &scale), 2);
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT scale_before FROM AMP_SCALE WHERE step = %d", step);
        ck_assert_close(atof(query_text(db, sql)), scale, 0, 0);
    }
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_SCALE WHERE skipped"), 3);
    // a tensor with no finite value has no range (its counts say what it holds)
    ck_assert_int_gt(test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE detail LIKE "
                                        "'%no finite value (% nan, % +inf, % -inf)%'"),
                     0);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE detail LIKE '%min nan%'"), 0);
    sqlite3_close(db);
}
END_TEST

// Statistics every 5 steps: the overflow's step 3 has no statistics rows, and is still traced to
// its producer, with every step's and every scale update's row recorded.
START_TEST(test_fault_at_a_step_without_statistics) {
    char out[8192];
    setenv("AMPPROBE_STATS_EVERY", "5", 1);
    int rc = probe_run(SAMPLE("tiny_gpt"),
                       "--precision fp16 --fault attn-overflow --steps 7 --quiet", out, sizeof out);
    unsetenv("AMPPROBE_STATS_EVERY");
    ck_assert_int_eq(rc, 0);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, "SELECT group_concat(step) FROM (SELECT DISTINCT step FROM "
                                    "AMP_TENSOR_STATS ORDER BY step)"),
                     "0,5");
    ck_assert_str_eq(query_text(db, FIRST_EVENT("e.kind = 'nonfinite_producer'")),
                     "3 blocks.1.attn mul fwd");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 7);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_SCALE"), 7);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_nan_input_is_data) {
    char out[8192];
    ck_assert_int_eq(
        probe_run(SAMPLE("mlp"), "--precision fp16 --fault nan-input --steps 7", out, sizeof out),
        0);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, FIRST_EVENT("e.kind LIKE 'nonfinite%'")), "5 fc1 to fwd");
    ck_assert_str_eq(query_text(db, "SELECT kind FROM AMP_EVENTS WHERE kind LIKE 'nonfinite%' "
                                    "ORDER BY rowid LIMIT 1"),
                     "nonfinite_input");
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind = 'nonfinite_producer'"), 0);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_log_zero_outside_any_layer) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("simple_cnn"), "--precision fp16 --fault log-zero --steps 7",
                               out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, FIRST_EVENT("e.kind = 'nonfinite_producer'")), "5 - log fwd");
    ck_assert_int_ge(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind = 'loss_nonfinite'"), 1);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_grad_underflow_zeroes_weight_grads) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("mlp"), "--precision fp16 --fault grad-underflow --steps 4",
                               out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    double zero_share =
        atof(query_text(db, "SELECT 1.0 * sum(n_zero) / sum(numel) FROM AMP_TENSOR_STATS "
                            "WHERE kind = 'weight_grad'"));
    ck_assert_msg(zero_share > 0.99, "weight gradients zero share %.3f", zero_share);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind LIKE 'nonfinite%'"), 0);
    sqlite3_close(db);
}
END_TEST

// Each parameter's row at the start of each sampled step (kind 'weight': what the last update
// left), under its name and layer: Adam's first update at lr 100 moves every weight by 100.
START_TEST(test_weights_recorded_before_each_update) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("simple_cnn"), "--precision bf16 --lr 100 --steps 5 --quiet",
                               out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE kind = 'weight'"), 6 * 5);
    ck_assert_str_eq(query_text(db,
                                "SELECT printf('%d %s %s %d %.4f', layer_id, dtype, target_dtype, "
                                "numel, amax) FROM AMP_TENSOR_STATS WHERE kind = 'weight' AND "
                                "op = 'conv2.weight' AND step = 0"),
                     "1 f32 bf16 18432 0.0589");
    ck_assert_str_eq(query_text(db, "SELECT printf('%.2f', amax) FROM AMP_TENSOR_STATS WHERE "
                                    "kind = 'weight' AND op = 'conv2.weight' AND step = 1"),
                     "100.06");
    // the layer of every weight is its gradient's, from step 0 on
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS w JOIN "
                                        "AMP_TENSOR_STATS g ON g.step = w.step AND g.op = w.op AND "
                                        "g.kind = 'weight_grad' WHERE w.kind = 'weight' AND "
                                        "w.layer_id IS g.layer_id"),
                     6 * 5);
    sqlite3_close(db);
    // sampled steps only
    snprintf(db_path, sizeof db_path, "%s/every3.sqlite", dir);
    setenv("AMPPROBE_STATS_EVERY", "3", 1);
    int rc = probe_run(SAMPLE("simple_cnn"), "--precision bf16 --steps 5 --quiet", out, sizeof out);
    unsetenv("AMPPROBE_STATS_EVERY");
    ck_assert_int_eq(rc, 0);
    db = open_db();
    ck_assert_str_eq(query_text(db, "SELECT group_concat(step || ':' || n) FROM (SELECT step, "
                                    "count(*) AS n FROM AMP_TENSOR_STATS WHERE kind = 'weight' "
                                    "GROUP BY step ORDER BY step)"),
                     "0:6,3:6");
    sqlite3_close(db);
}
END_TEST

START_TEST(test_scale_thrash_sawtooth) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("mlp"), "--precision fp16 --fault scale-thrash --steps 16",
                               out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    ck_assert_int_ge(
        test_query_int(db, "SELECT count(*) FROM AMP_SCALE WHERE scale_after < scale_before"), 2);
    ck_assert_int_ge(
        test_query_int(db, "SELECT count(*) FROM AMP_SCALE WHERE scale_after > scale_before"), 4);
    ck_assert_int_ge(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind = 'grad_overflow'"), 1);
    // gradients overflowing at a high scale are not a forward problem
    ck_assert_int_eq(test_query_int(db,
                                    "SELECT count(*) FROM AMP_EVENTS WHERE kind LIKE 'nonfinite%' "
                                    "AND phase = 'fwd'"),
                     0);
    sqlite3_close(db);
}
END_TEST

START_TEST(test_healthy_runs_are_clean) {
    const char *samples[] = {SAMPLE("mlp"), SAMPLE("simple_cnn"), SAMPLE("tiny_gpt")};
    const char *precisions[] = {"fp16", "bf16"};
    for (int i = 0; i < 3; i++)
        for (int p = 0; p < 2; p++) {
            char out[8192], args[64];
            snprintf(args, sizeof args, "--precision %s --steps 4", precisions[p]);
            unlink(db_path);
            ck_assert_int_eq(probe_run(samples[i], args, out, sizeof out), 0);
            sqlite3 *db = open_db();
            ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 4);
            ck_assert_msg(
                test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE kind LIKE 'nonfinite%' "
                                   "OR kind IN ('loss_nonfinite', 'step_skipped')") == 0,
                "%s %s has non-finite events", samples[i], precisions[p]);
            ck_assert_int_gt(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS"), 0);
            ck_assert_int_gt(test_query_int(db, "SELECT count(*) FROM AMP_OPS"), 0);
            sqlite3_close(db);
        }
}
END_TEST

// A gradient that a reshape, permute, contiguous or widening cast passed on unchanged keeps the
// numbers of the node that passed it instead of being read again. tiny_gpt's attention (2 blocks)
// per step: q's gradient passes a permute, a reshape and a split (2 reuse the permute's numbers),
// k's a further permute (3), v's as q's (2), the attention output's a reshape, a permute and its
// matmul (2), and the logits' a reshape before the head (1): 19; widened by the backward of an
// autocast cast to f16: the gradients of the softmax's f32 output (2, handed on as f16: the
// softmax reads it so) and of the three layer_norms per block and the last one, whose f32
// outputs the linears after them read cast (5): 26 a step. The reused rows carry the same figures
// as the rows they came from, and the dtype of the tensor whose gradient they are.
START_TEST(test_view_gradients_read_once) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("tiny_gpt"), "--precision fp16 --steps 3", out, sizeof out),
                     0);
    sqlite3 *db = open_db();
    ck_assert_int_eq(
        test_query_int(db, "SELECT value FROM META WHERE key = 'stats_reused' AND pid != 0"),
        3 * 26);
    ck_assert_int_gt(
        test_query_int(db, "SELECT value FROM META WHERE key = 'stats_tensors' AND pid != 0"),
        3 * 26);
    // the softmax's gradient row (f32) has the figures of its attention's f16 cast row
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE op = "
                                        "'softmax' AND kind = 'activation_grad' AND dtype = 'f32'"),
                     3 * 2);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS s WHERE s.op = 'softmax' AND "
                           "s.kind = 'activation_grad' AND NOT EXISTS (SELECT 1 FROM "
                           "AMP_TENSOR_STATS r WHERE r.op = 'to' AND r.dtype = 'f16' AND r.kind = "
                           "s.kind AND r.step = s.step AND r.layer_id IS s.layer_id AND r.numel = "
                           "s.numel AND r.min = s.min AND r.max = s.max AND r.n_zero = s.n_zero "
                           "AND r.n_underflow = s.n_underflow)"),
        0);
    // each split's gradient row has the figures of a reshape's row of its layer and step
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE op = 'split'"),
                     3 * 6);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS s WHERE s.op = 'split' AND NOT "
                           "EXISTS (SELECT 1 FROM AMP_TENSOR_STATS r WHERE r.op = 'reshape' AND "
                           "r.kind = s.kind AND r.step = s.step AND r.layer_id IS s.layer_id AND "
                           "r.numel = s.numel AND r.min = s.min AND r.max = s.max AND r.n_zero = "
                           "s.n_zero AND r.n_underflow = s.n_underflow)"),
        0);
    sqlite3_close(db);
}
END_TEST

// kill -9 of the training process: the launcher exits 137, the database is whole.
START_TEST(test_kill_9_survives) {
    pid_t launcher = fork();
    ck_assert_int_ge(launcher, 0);
    if (launcher == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(AMPPROBE, "ampprobe", "run", "-o", db_path, "--", SAMPLE("tiny_gpt"), "--steps",
              "100000", (char *)NULL);
        _exit(127);
    }
    // wait until some steps are in the database, then kill the sample (the launcher's child)
    char cmd[256];
    snprintf(cmd, sizeof cmd, "pkill -9 -P %d", (int)launcher);
    sleep(3);
    ck_assert_int_eq(system(cmd), 0);
    int st;
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 128 + SIGKILL);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, "PRAGMA integrity_check"), "ok");
    ck_assert_int_gt(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 3);
    sqlite3_close(db);
}
END_TEST

// The spool directory's disk use (blocks of its files), by `du`.
static long spool_kib(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "du -sk %s/.run.sqlite.spool-* 2>/dev/null | cut -f1", dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    long kib = -1;
    if (fscanf(p, "%ld", &kib) != 1) kib = -1;
    pclose(p);
    return kib;
}

// Starts `ampprobe run -o db_path -- ARGV...` (its program's stderr into err_path), SIGKILLs
// the launcher 2 s later and returns the program's pid, left running.
static pid_t orphan(const char *err_path, char *const argv[]) {
    pid_t launcher = fork();
    ck_assert_int_ge(launcher, 0);
    if (launcher == 0) {
        int devnull = open("/dev/null", O_WRONLY), err = open(err_path, O_WRONLY | O_CREAT, 0644);
        dup2(devnull, 1);
        dup2(err, 2);
        execv(AMPPROBE, argv);
        _exit(127);
    }
    sleep(2);
    char cmd[64], buf[64] = "";
    snprintf(cmd, sizeof cmd, "pgrep -P %d", (int)launcher);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, p));
    pclose(p);
    const pid_t program = (pid_t)atoi(buf);
    ck_assert_int_gt(program, 0);
    ck_assert_int_eq(kill(launcher, SIGKILL), 0);
    int st;
    ck_assert_int_eq(waitpid(launcher, &st, 0), launcher);
    return program;
}

// Whether the orphaned program's recording stopped: its spool stays the size it is 2 s after the
// launcher's death (the writers look at each flush, every 100 ms) for another second, while the
// program still runs (then killed).
static void assert_spool_stopped(pid_t program) {
    sleep(2);
    const long before = spool_kib();
    sleep(1);
    const long after = spool_kib();
    ck_assert_int_eq(kill(program, 0), 0); // still training
    kill(program, SIGKILL);
    ck_assert_int_gt(before, 0);
    ck_assert_msg(after == before, "the spool grew from %ld to %ld KiB", before, after);
}

// A kill -9 of the launcher while the program trains on: the program keeps running, stops
// recording within a tenth of a second (saying so on stderr) instead of filling the disk with
// records nothing reads, and the report names the spool directory left beside the database.
START_TEST(test_orphaned_program_stops_recording) {
    char err_path[160];
    snprintf(err_path, sizeof err_path, "%s/program.err", dir);
    const pid_t program =
        orphan(err_path, (char *[]){"ampprobe", "run", "-o", db_path, "--", SAMPLE("tiny_gpt"),
                                    "--steps", "100000", NULL});
    assert_spool_stopped(program);
    char *err = test_read_file(err_path, NULL);
    ck_assert_msg(strstr(err, "the recording of this run has ended"), "%s", err);
    free(err);
    char cmd[1024], out[160];
    snprintf(out, sizeof out, "%s/report.txt", dir);
    snprintf(cmd, sizeof cmd, "%s report -o %s %s", AMPPROBE, out, db_path);
    ck_assert_int_eq(system(cmd), 0);
    char *t = test_read_file(out, NULL);
    ck_assert_msg(strstr(t, "the capture did not finish") && strstr(t, "/.run.sqlite.spool-") &&
                      strstr(t, "Delete the spool directory"),
                  "%s", t);
    free(t);
}
END_TEST

// Two copies of the recorder in one orphaned process (libampcore in the program and
// libamprecord.so, as in a PyTorch program that the bridge and the capture library both record):
// both stop, and the process says so once.
START_TEST(test_orphaned_recorders_say_it_once) {
    char err_path[160];
    snprintf(err_path, sizeof err_path, "%s/program.err", dir);
    const pid_t program =
        orphan(err_path, (char *[]){"ampprobe", "run", "-o", db_path, "--",
                                    AMP_BINARY_DIR "/tests/amp_record_helper", "two",
                                    AMP_BINARY_DIR "/libamprecord.so", "100000", "20", NULL});
    assert_spool_stopped(program);
    char *err = test_read_file(err_path, NULL);
    const char *said = "the recording of this run has ended";
    const char *first = strstr(err, said);
    ck_assert_msg(first && !strstr(first + 1, said), "not said once: %s", err);
    free(err);
}
END_TEST

// The README's link lines for a program outside CMake: the example against the static library,
// and a producer of records against libamprecord.so, which records under `ampprobe run`.
START_TEST(test_the_readme_link_lines_build) {
#ifdef AMP_SANITIZER_PRELOAD
    const char *cflags = "-fsanitize=address,undefined"; // (the libraries are instrumented)
#else
    const char *cflags = "";
#endif
    char src[160], cmd[2048];
    snprintf(src, sizeof src, "%s/producer.c", dir);
    FILE *f = fopen(src, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#include \"amp-record.h\"\n"
          "#include <stdio.h>\n"
          "#include <string.h>\n"
          "int main(void) {\n"
          "    amp_rec_layer l = {0, -1, \"model\"};\n"
          "    amp_record_layer(&l);\n"
          "    amp_rec_step st = {.step = 0, .start_ns = amp_record_now_ns(), .loss = 1.5};\n"
          "    st.end_ns = st.start_ns + 1000;\n"
          "    amp_record_step(&st);\n"
          "    amp_record_flush();\n"
          "    if (puts(amp_phase_name(AMP_PHASE_FWD)) < 0) return 1;\n"
          "    /* a failed start says why through amp_last_error, which the library exports */\n"
          "    if (amp_record_start(\"/nonexistent-amp-dir\") == AMP_OK) return 1;\n"
          "    return !strstr(amp_last_error(), \"/nonexistent-amp-dir\");\n"
          "}\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "cd %s && cc %s -I %s/libampcore/include %s/samples/example.c %s/libampcore.a "
             "-lsqlite3 -lm -lpthread -ldl -o example && ./example >/dev/null && "
             "cc %s -I %s/libampcore/include producer.c -L %s -lamprecord -Wl,-rpath,%s "
             "-o producer && %s/ampprobe run -o %s -- ./producer >/dev/null 2>&1",
             dir, cflags, AMP_SOURCE_DIR, AMP_SOURCE_DIR, AMP_BINARY_DIR, cflags, AMP_SOURCE_DIR,
             AMP_BINARY_DIR, AMP_BINARY_DIR, AMP_BINARY_DIR, db_path);
    ck_assert_int_eq(system(cmd), 0);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, "SELECT loss FROM AMP_STEPS"), "1.5");
    sqlite3_close(db);
}
END_TEST

// The next of a fixed sequence of numbers below n (libampcore's counter-based hash): the same
// damage every run.
static uint64_t damage_draws;
static size_t below(size_t n) {
    return (size_t)(amp_rng_hash(0xda3a9e, damage_draws++) % n);
}

// Records tiny_gpt's attention overflow into db_path.
static void record_run(void) {
    char out[8192];
    ck_assert_int_eq(probe_run(SAMPLE("tiny_gpt"),
                               "--precision fp16 --fault attn-overflow --steps 6", out, sizeof out),
                     0);
}

// A run's database damaged as disks and copies damage files (cut short, bytes overwritten, a
// page zeroed or overwritten, the header's bytes) is read or refused in one line, never a crash
// (the suites run under AddressSanitizer and UBSan in CI).
START_TEST(test_damaged_database_read_or_refused) {
    record_run();
    size_t n, page = 4096;
    unsigned char *good = (unsigned char *)test_read_file(db_path, &n), *bad = amp_xmalloc(n);
    ck_assert_uint_gt(n, 4 * page);
    char path[160];
    snprintf(path, sizeof path, "%s/damaged.sqlite", dir);
    for (int k = 0; k < 40; k++) {
        memcpy(bad, good, n);
        size_t len = n;
        switch (k % 4) {
        case 0: // cut short
            len = below(n);
            break;
        case 1: // bytes anywhere
            for (int i = 0; i < 32; i++)
                bad[below(n)] = (unsigned char)below(256);
            break;
        case 2: { // a page zeroed or overwritten
            size_t at = below(n / page) * page;
            for (size_t i = 0; i < page; i++)
                bad[at + i] = k % 8 == 2 ? 0 : (unsigned char)below(256);
            break;
        }
        default: // the header
            for (int i = 0; i < 4; i++)
                bad[below(100)] = (unsigned char)below(256);
        }
        test_write_file(path, bad, len);
        test_read_or_refuse(path);
    }
    free(good);
    free(bad);
}
END_TEST

// A sound database holding what no ampprobe writes is read or refused in one line, never a
// crash (test_odd_values).
START_TEST(test_odd_values_read_or_refused) {
    record_run();
    char path[160];
    snprintf(path, sizeof path, "%s/odd.sqlite", dir);
    ck_assert_int_gt(test_odd_values(db_path, path), 100);
}
END_TEST

// A disk that fills while a run is recorded (a 2 MiB tmpfs in a mount namespace of the test's
// own): the program runs to its end and the report says recording stopped short, and why.
START_TEST(test_full_disk_is_named) {
    if (system("unshare -rm true 2>/dev/null") != 0) {
        fprintf(stderr, "e2e: SKIP test_full_disk_is_named: no mount namespace on this machine\n");
        return;
    }
    char cmd[1024], json[160], out[160];
    snprintf(json, sizeof json, "%s/report.json", dir);
    snprintf(out, sizeof out, "%s/run.txt", dir);
    snprintf(cmd, sizeof cmd,
             "unshare -rm sh -c 'mkdir -p %s/full && mount -t tmpfs -o size=2m tmpfs %s/full && "
             "%s run -o %s/full/x.sqlite -- %s --steps 150 >%s 2>&1; "
             "%s report --format json -o %s %s/full/x.sqlite'",
             dir, dir, AMPPROBE, dir, SAMPLE("tiny_gpt"), out, AMPPROBE, json, dir);
    ck_assert_int_eq(system(cmd), 0);
    char *run = test_read_file(out, NULL);
    ck_assert_msg(strstr(run, "final loss"), "the program did not run to its end: %s", run);
    ck_assert_msg(strstr(run, "disk is full") || strstr(run, "No space left"), "%s", run);
    ck_assert_msg(strstr(run, "ampprobe: recording stopped short of the run: "), "%s", run);
    // the summary's counts are what was read, and what the file holds is said apart
    ck_assert_msg(strstr(run, " events read; ") && strstr(run, "full/x.sqlite holds "), "%s", run);
    ck_assert_msg(strstr(run, "MiB free on the disk of ") && strstr(run, "full/x.sqlite"), "%s",
                  run); // said before the run
    char *t = test_read_file(json, NULL);
    // (which step it names depends on what the store kept: see README, "When the disk fills")
    ck_assert_msg(strstr(t, "\"title\": \"recording stopped short of the run "), "%s", t);
    ck_assert_msg(strstr(t, "was full") || strstr(t, "disk is full"), "%s", t);
    ck_assert_ptr_null(strstr(t, "killed"));
    free(t);
    free(run);
}
END_TEST

// A program that ends with exit() and never frees its context: every step is recorded.
// Without the launcher nothing checks AMPPROBE_STATS_EVERY and AMPPROBE_TRACE before the program
// reads them: a value that is no number of steps, a list that is not of amp, cuda and nvtx, each
// said once; statistics come every step, and amp is recorded (all a program without the
// launcher can record).
START_TEST(test_odd_environment_without_the_launcher) {
    char cmd[512], err_path[160];
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    snprintf(cmd, sizeof cmd,
             "AMPPROBE_OUT=%s AMPPROBE_STATS_EVERY=3x AMPPROBE_TRACE=amp,bogus %s/samples/mlp "
             "--quiet --steps 4 >/dev/null 2>%s",
             db_path, AMP_BINARY_DIR, err_path);
    ck_assert_int_eq(system(cmd), 0);
    char *err = test_read_file(err_path, NULL);
    const char *stats = strstr(err, "AMPPROBE_STATS_EVERY='3x' is not a number of steps"),
               *trace = strstr(err, "AMPPROBE_TRACE='amp,bogus' is not a comma list of amp, "
                                    "cuda, nvtx; recording amp\n");
    ck_assert_msg(stats && trace && strchr(err, '\n') < strrchr(err, '\n') &&
                      strchr(strchr(err, '\n') + 1, '\n') == err + strlen(err) - 1,
                  "%s", err);
    free(err);
    sqlite3 *db = open_db();
    ck_assert_str_eq(query_text(db, "SELECT count(DISTINCT step) FROM AMP_TENSOR_STATS"), "4");
    ck_assert_str_eq(query_text(db, "SELECT value FROM META WHERE key = 'trace'"), "amp");
    sqlite3_close(db);
}
END_TEST

// Without the launcher CUDA and NVTX are not captured: an AMPPROBE_TRACE that names them is said
// in one line naming both variables; without amp in it recording is off (no database), with amp
// that is what is recorded.
START_TEST(test_cuda_trace_without_the_launcher) {
    static const char *const traces[] = {"cuda", "amp,nvtx"};
    char cmd[512], err_path[160], want[512];
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "AMPPROBE_OUT=%s AMPPROBE_TRACE=%s %s/samples/mlp --quiet --steps 2 >/dev/null "
                 "2>%s",
                 db_path, traces[i], AMP_BINARY_DIR, err_path);
        ck_assert_int_eq(system(cmd), 0);
        char *err = test_read_file(err_path, NULL);
        snprintf(want, sizeof want,
                 "ampprobe: AMPPROBE_OUT=%s with AMPPROBE_TRACE=%s: a program that writes its own "
                 "database records only amp (CUDA and NVTX capture need ampprobe run); %s\n",
                 db_path, traces[i], i == 0 ? "recording off" : "recording amp only");
        ck_assert_str_eq(err, want);
        free(err);
    }
    sqlite3 *db = open_db(); // (the first wrote none, or this second one could not have)
    ck_assert_str_eq(query_text(db, "SELECT count(*) FROM AMP_STEPS"), "2");
    ck_assert_str_eq(query_text(db, "SELECT value FROM META WHERE key = 'trace'"), "amp");
    sqlite3_close(db);
}
END_TEST

START_TEST(test_exit_without_free_cpu) {
    test_dir_create("exit");
    test_exit_without_free("cpu");
    test_dir_remove();
}
END_TEST

// A program that idles between steps (loading a batch) and ends its workers with _exit(): no
// op's span holds the idle time (the step's first op starts where the program entered its layer),
// and freeing the context wrote out every step before _exit.
START_TEST(test_pause_between_steps_and_exit_after_free) {
    enum { STEPS = 4, PAUSE_MS = 150 };
    test_dir_create("pause");
    const char *args[] = {"run", "-o", "run.sqlite", "--",    AMP_BINARY_DIR "/tests/amp_exit_prog",
                          "cpu", "4",  "150",        "_exit", NULL};
    ck_assert_int_eq(test_wait_ampprobe(test_spawn_ampprobe(args)), 0);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(test_in_dir("run.sqlite"), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), STEPS);
    ck_assert_int_eq(test_query_int(db, "SELECT count(DISTINCT step) FROM AMP_OPS"), STEPS);
    const int64_t longest = test_query_int(db, "SELECT max(end_ns - start_ns) FROM AMP_OPS");
    ck_assert_msg(longest < PAUSE_MS * 1000000LL / 2, "an op of %.1f ms", (double)longest / 1e6);
    sqlite3_close(db);
    test_dir_remove();
}
END_TEST

// A forward of more ops than the instrumentation's queue holds (it reads the queue within the
// step, and the ops after queue the parameters again): still one weight row a parameter a step,
// in the parameter's layer, step 0's too (read before its backward named the layer: held); and
// in steps without a backward, in no layer, each row written as its step ends.
START_TEST(test_weights_recorded_once_a_step_however_full) {
    test_dir_create("full");
    setenv("EXIT_PROG_EXTRA_OPS", "66000", 1);
    const char *args[] = {"run", "-o", "run.sqlite", "--",    AMP_BINARY_DIR "/tests/amp_exit_prog",
                          "cpu", "2",  "0",          "_exit", NULL};
    const int rc = test_wait_ampprobe(test_spawn_ampprobe(args));
    ck_assert_int_eq(rc, 0);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(test_in_dir("run.sqlite"), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    ck_assert_int_ge(test_query_int(db, "SELECT count(*) FROM AMP_OPS WHERE step = 1"), 66000);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE kind = "
                                        "'weight' AND op = 'model.weight'"),
                     2);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS w JOIN AMP_LAYERS "
                                        "l ON l.pid = w.pid AND l.id = w.layer_id WHERE w.kind = "
                                        "'weight' AND l.name = 'model'"),
                     2);
    sqlite3_close(db);
    setenv("EXIT_PROG_NO_BACKWARD", "1", 1);
    const char *eval[] = {"run", "-o", "eval.sqlite", "--", AMP_BINARY_DIR "/tests/amp_exit_prog",
                          "cpu", "2",  NULL};
    const int rc_eval = test_wait_ampprobe(test_spawn_ampprobe(eval));
    unsetenv("EXIT_PROG_NO_BACKWARD");
    unsetenv("EXIT_PROG_EXTRA_OPS");
    ck_assert_int_eq(rc_eval, 0);
    ck_assert_int_eq(sqlite3_open_v2(test_in_dir("eval.sqlite"), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    ck_assert_str_eq(query_text(db, "SELECT group_concat(step || ':' || ifnull(layer_id, "
                                    "'-'), ' ') FROM AMP_TENSOR_STATS WHERE kind = 'weight'"),
                     "0:- 1:-");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE kind = "
                                        "'weight' AND step = 0 AND rowid < (SELECT min(rowid) "
                                        "FROM AMP_TENSOR_STATS WHERE step = 1)"),
                     1);
    sqlite3_close(db);
    test_dir_remove();
}
END_TEST

Suite *e2e_suite(void) {
    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_attn_overflow_names_the_attention_logits);
    tcase_add_test(tc, test_fault_at_a_step_without_statistics);
    tcase_add_test(tc, test_nan_input_is_data);
    tcase_add_test(tc, test_log_zero_outside_any_layer);
    tcase_add_test(tc, test_grad_underflow_zeroes_weight_grads);
    tcase_add_test(tc, test_weights_recorded_before_each_update);
    tcase_add_test(tc, test_weights_recorded_once_a_step_however_full);
    tcase_add_test(tc, test_scale_thrash_sawtooth);
    tcase_add_test(tc, test_healthy_runs_are_clean);
    tcase_add_test(tc, test_view_gradients_read_once);
    tcase_add_test(tc, test_kill_9_survives);
    tcase_add_test(tc, test_orphaned_program_stops_recording);
    tcase_add_test(tc, test_orphaned_recorders_say_it_once);
    tcase_add_test(tc, test_the_readme_link_lines_build);
    tcase_add_test(tc, test_odd_environment_without_the_launcher);
    tcase_add_test(tc, test_cuda_trace_without_the_launcher);
    tcase_add_test(tc, test_damaged_database_read_or_refused);
    tcase_add_test(tc, test_odd_values_read_or_refused);
    tcase_add_test(tc, test_full_disk_is_named);
    tcase_add_test(tc, test_exit_without_free_cpu);
    tcase_add_test(tc, test_pause_between_steps_and_exit_after_free);
    suite_add_tcase(s, tc);
    return s;
}
