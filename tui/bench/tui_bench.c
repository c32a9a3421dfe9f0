/*
 * tui_bench.c — what a TUI frame and following a live run cost.
 *
 *   tui_bench [DIR]        (default: a fresh directory under /tmp, removed at the end)
 *
 * 1. Builds a finished run database through the store API (amp_collector_new/finish: the real
 *    schema, indexes and ANALYZE) filled by SQL: 100k steps, 16 tensor-statistics rows per
 *    step (1.6M), 1M kernels over 200 names, a few hundred events. Opens it (the initial load is
 *    reported apart), then times frames off-screen (newterm on /dev/null, 120x40): model poll +
 *    view update + layout + draw + doupdate, with [ stepping back one step every frame (the
 *    layers view then loads the step's statistics through the index), for each view.
 * 2. Follows a live run: a writer process appends to an unfinished database (WAL, no indexes)
 *    every 200 ms what a fast training run emits (10 steps with statistics, events, 2k
 *    kernels), while this process runs the TUI's loop (poll every 250 ms, update and draw when
 *    the model moved) for 10 s; prints this process's CPU time over the wall time.
 * 3. After each: a second rank (pid 2) records the same steps and the statistics of its last ones;
 *    P (the next process) and back, timed with their frame: in the finished run its steps and
 *    the step's statistics through the index, in the live one a scan of every statistics row.
 *
 * Prints numbers; it is not a test and has no thresholds.
 */
#define _GNU_SOURCE
#include "amp-impl.h"
#include "amp-store.h"
#include "layout.h"
#include "tui.h"

#include <curses.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS 100000
#define STATS_PER_STEP 16
#define KERNELS 1000000
#define KERNEL_NAMES 200
#define FRAMES 200
#define FOLLOW_S 10

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, const char *why) {
    endwin();
    fprintf(stderr, "tui_bench: %s: %s\n", what, why);
    exit(1);
}

static void exec_sql(sqlite3 *db, const char *sql) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) die(sql, msg ? msg : "?");
}

static sqlite3 *open_rw(const char *path) {
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) die(path, "open");
    sqlite3_busy_timeout(db, 5000);
    return db;
}

// Steps [from, to) of pid 1 with their statistics, kernels and (every 50 steps) events.
static void append_steps(sqlite3 *db, int64_t from, int64_t to, int64_t kernels_per_step) {
    char sql[2048];
    snprintf(
        sql, sizeof sql,
        "WITH RECURSIVE s(i) AS (SELECT %lld UNION ALL SELECT i + 1 FROM s WHERE i < %lld) "
        "INSERT INTO AMP_STEPS SELECT 1, i, i * 20000000, i * 20000000 + 15000000 + (i %% 7) * "
        "100000, 4.0 / (1 + i * 0.001), 1, 0.9, 65536.0 / (1 << (i %% 5)), "
        "65536.0 / (1 << ((i + 1) %% 5)), (i %% 5 = 4), (i %% 5 = 4), NULL FROM s;",
        (long long)from, (long long)to - 1);
    exec_sql(db, sql);
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE s(i) AS (SELECT %lld UNION ALL SELECT i + 1 FROM s WHERE i < %lld), "
             "l(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM l WHERE j < %d) "
             "INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, "
             "numel, amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero) "
             "SELECT 1, i, j / 2, 'linear', CASE j %% 2 WHEN 0 THEN 'activation' ELSE "
             "'activation_grad' END, 'f16', 'f16', 65536, 1.5 + j * 100 + (i %% 13), "
             "(j = 5 AND i %% 1000 = 999) * 10, 0, 0, 0, (j %% 2) * 300, 0 FROM s, l;",
             (long long)from, (long long)to - 1, STATS_PER_STEP - 1);
    exec_sql(db, sql);
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE k(n) AS (SELECT %lld UNION ALL SELECT n + 1 FROM k WHERE n < %lld) "
             "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, \"end\", deviceId, contextId, "
             "streamId, correlationId, globalPid, demangledName, shortName, registersPerThread, "
             "gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
             "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
             "SELECT n * 2000, n * 2000 + 500 + (n * 7919) %% 1500, 0, 1, 7, n, 1 << 24, "
             "1 + (n * 31) %% %d, 1 + (n * 31) %% %d, 64, 128, 1, 1, 256, 1, 1, 0, 0, 0, 0, n "
             "FROM k;",
             (long long)(from * kernels_per_step), (long long)(to * kernels_per_step) - 1,
             KERNEL_NAMES, KERNEL_NAMES);
    exec_sql(db, sql);
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE s(i) AS (SELECT %lld UNION ALL SELECT i + 50 FROM s WHERE i + 50 < "
             "%lld) INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, "
             "value, detail, aggregate, occurrences, last_step) SELECT 1, i, i %% 8, 'linear', "
             "'bwd', 'scale_backoff', 'info', NULL, 1024, NULL, 0, 1, i FROM s;",
             (long long)((from + 49) / 50 * 50), (long long)to);
    exec_sql(db, sql);
}

static void fill_static(sqlite3 *db) {
    exec_sql(db, "WITH RECURSIVE l(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM l WHERE j < 7) "
                 "INSERT INTO AMP_LAYERS SELECT 1, j, NULL, 'blocks.' || (j / 2) || "
                 "CASE j % 2 WHEN 0 THEN '.attn' ELSE '.mlp' END FROM l;");
    char sql[512];
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
             "INSERT INTO StringIds SELECT i, CASE i %% 3 WHEN 0 THEN 'ampere_fp16_s16816gemm_' "
             "WHEN 1 THEN 'vectorized_elementwise_kernel_' ELSE 'reduce_kernel_' END || i FROM n;",
             KERNEL_NAMES);
    exec_sql(db, sql);
}

// ---------------------------------------------------------------------------------------------

static SCREEN *offscreen(int cols, int rows) {
    FILE *out = fopen("/dev/null", "w"), *in = fopen("/dev/null", "r");
    if (!out || !in) die("/dev/null", "cannot open");
    SCREEN *s = newterm("xterm-256color", out, in);
    if (!s) die("newterm", "no terminfo for xterm-256color");
    resizeterm(rows, cols);
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double frame(tui_app *app, tui_layout *l) {
    double t0 = now_ms();
    tui_model_poll(&app->model);
    tui_app_update(app);
    tui_layout_compute(COLS, LINES, l);
    tui_app_draw(app, l);
    wnoutrefresh(stdscr);
    doupdate();
    return now_ms() - t0;
}

// The first finding runs on the finder's thread after open (frames go on meanwhile); the
// numbers below are taken once it is done, so they measure the frames alone.
static void wait_finding(tui_app *app, const char *what) {
    double t0 = now_ms();
    while (app->model.finding_ms == 0) {
        usleep(20000);
        tui_model_poll(&app->model);
    }
    printf("%s: the report's top finding took %.0f ms on its thread (%s; waited %.0f ms)\n", what,
           app->model.finding_ms, app->model.finding.valid ? app->model.finding.rule : "none",
           now_ms() - t0);
}

static void bench_frames(const char *path) {
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    double t0 = now_ms();
    if (tui_app_open(&app, path, NULL, err) != AMP_OK) die(path, err);
    printf("replay: open + initial load %.0f ms (%zu steps, %lld kernels in %zu names, %zu "
           "events)\n",
           now_ms() - t0, app.model.n_steps, (long long)app.model.kernel_count, app.model.n_kernels,
           app.model.n_events);
    wait_finding(&app, "replay");
    app.utf8 = true;
    app.color = true;
    tui_colors_init(&app);
    tui_layout l;
    tui_layout_compute(COLS, LINES, &l);
    static double ms[FRAMES];
    for (int v = 0; v < TUI_N_VIEWS; v++) {
        app.view = v;
        app.seen_generation[v] = 0;
        for (int i = 0; i < FRAMES; i++) {
            tui_app_key(&app, '[', &l); // scrub: a new step every frame
            ms[i] = frame(&app, &l);
        }
        qsort(ms, FRAMES, sizeof ms[0], cmp_double);
        double sum = 0;
        for (int i = 0; i < FRAMES; i++)
            sum += ms[i];
        printf("replay frame, view %d (%-8s): mean %.2f ms, p95 %.2f ms, max %.2f ms\n", v + 1,
               v == 0   ? "overview"
               : v == 1 ? "layers"
               : v == 2 ? "kernels"
                        : "events",
               sum / FRAMES, ms[FRAMES * 95 / 100], ms[FRAMES - 1]);
    }

    tui_app_free(&app);
}

static double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void bench_follow(const char *path) {
    pid_t writer = fork();
    if (writer < 0) die("fork", "failed");
    if (writer == 0) { // a training run: 10 steps per 200 ms commit
        sqlite3 *db = open_rw(path);
        for (int64_t step = STEPS;; step += 10) {
            exec_sql(db, "BEGIN");
            append_steps(db, step, step + 10, 200);
            exec_sql(db, "COMMIT");
            usleep(200000);
        }
    }
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    double t0 = now_ms();
    if (tui_app_open(&app, path, NULL, err) != AMP_OK) die(path, err);
    printf("follow: open + initial load of the live database %.0f ms\n", now_ms() - t0);
    wait_finding(&app, "follow");
    app.utf8 = app.color = true;
    tui_colors_init(&app);
    tui_layout l;
    tui_layout_compute(COLS, LINES, &l);
    size_t steps0 = app.model.n_steps;
    double wall0 = now_ms(), cpu0 = cpu_ms(), worst = 0;
    int frames = 0;
    for (int v = 0; now_ms() - wall0 < FOLLOW_S * 1e3; v++) {
        app.view = (v / 8) % TUI_N_VIEWS; // every view in turn, 2 s each
        uint64_t g = app.model.generation;
        double t = now_ms();
        if (tui_model_poll(&app.model) || g == 0) {
            tui_app_update(&app);
            tui_app_draw(&app, &l);
            wnoutrefresh(stdscr);
            doupdate();
            frames++;
        }
        double cost = now_ms() - t;
        if (cost > worst) worst = cost;
        usleep(250000);
    }
    double wall = now_ms() - wall0, cpu = cpu_ms() - cpu0;
    kill(writer, SIGKILL);
    waitpid(writer, NULL, 0);
    printf("follow: %.1f s, %zu new steps seen, %d frames drawn: %.1f%% of one core "
           "(%.0f ms CPU), worst poll+frame %.1f ms\n",
           wall / 1e3, app.model.n_steps - steps0, frames, 100 * cpu / wall, cpu, worst);
    printf("follow: findings recomputed while the run moves take <= 3%% of a core on top of this "
           "(a budget since open; %.0f ms CPU so far)\n",
           app.model.finding_cpu_total_ms);
    tui_app_free(&app);
}

// P to pid 2 and back on the database at path (finished or live), with a frame each.
static void bench_switch(const char *path, const char *what) {
    sqlite3 *db = open_rw(path);
    exec_sql(db, "BEGIN");
    exec_sql(db, "INSERT INTO AMP_LAYERS SELECT 2, id, parent_id, name FROM AMP_LAYERS "
                 "WHERE pid = 1;"
                 "INSERT INTO AMP_STEPS SELECT 2, step, start_ns, end_ns, loss, loss_finite, "
                 "grad_norm, scale_before, scale_after, found_inf, skipped, mem_peak_bytes "
                 "FROM AMP_STEPS WHERE pid = 1;");
    char sql[512];
    snprintf(
        sql, sizeof sql,
        "INSERT INTO AMP_TENSOR_STATS SELECT 2, step, layer_id, op, kind, dtype, target_dtype, "
        "numel, min, max, amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero "
        "FROM AMP_TENSOR_STATS WHERE pid = 1 AND step >= %d;",
        STEPS - 10);
    exec_sql(db, sql);
    exec_sql(db, "COMMIT");
    sqlite3_close(db);
    tui_app app;
    char err[AMP_STORE_ERR_MAX];
    if (tui_app_open(&app, path, NULL, err) != AMP_OK) die(path, err);
    app.view = TUI_VIEW_LAYERS;
    tui_layout l;
    tui_layout_compute(COLS, LINES, &l);
    frame(&app, &l);
    double ms[2];
    for (int i = 0; i < 2; i++) {
        double t0 = now_ms();
        tui_app_key(&app, 'P', &l);
        frame(&app, &l);
        ms[i] = now_ms() - t0;
    }
    printf("%s: P to the second of 2 processes %.0f ms (%zu steps, %zu layer rows), back %.0f ms\n",
           what, ms[0], app.model.n_steps, app.n_layer_rows, ms[1]);
    tui_app_free(&app);
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        const bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        fprintf(help ? stdout : stderr,
                "usage: tui_bench [DIR]\n  DIR: where the two run databases are built (default "
                "a fresh directory under /tmp, removed at the end)\n");
        return help ? 0 : 2;
    }
    char dir[256];
    bool own = argc < 2;
    if (own) {
        if (!amp_make_temp_dir(dir, sizeof dir, "/tmp/tui_bench.")) die("mkdtemp", "failed");
    } else {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    }
    char done[300], live[300];
    snprintf(done, sizeof done, "%s/replay.sqlite", dir);
    snprintf(live, sizeof live, "%s/live.sqlite", dir);

    for (int pass = 0; pass < 2; pass++) {
        const char *path = pass == 0 ? done : live;
        double t0 = now_ms();
        amp_collector_t *c;
        if (amp_collector_new(path, NULL, &c) != AMP_OK) die(path, amp_last_error());
        sqlite3 *db = open_rw(path);
        exec_sql(db, "BEGIN");
        fill_static(db);
        append_steps(db, 0, STEPS, KERNELS / STEPS);
        exec_sql(db, "COMMIT");
        sqlite3_close(db);
        if (pass == 0) {
            if (amp_collector_finish(c, 0) != AMP_OK) die(path, amp_last_error());
            amp_collector_free(c);
            printf("built %s in %.1f s\n", path, (now_ms() - t0) / 1e3);
            SCREEN *s = offscreen(120, 40);
            bench_frames(path);
            bench_switch(path, "replay");
            endwin();
            delscreen(s);
        } else {
            printf("built %s (live: WAL, no indexes) in %.1f s\n", path, (now_ms() - t0) / 1e3);
            SCREEN *s = offscreen(120, 40);
            bench_follow(path);
            bench_switch(path, "follow");
            endwin();
            delscreen(s);
            amp_collector_free(c);
        }
    }
    if (own) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "tui_bench: could not remove %s\n", dir);
    }
    return 0;
}
