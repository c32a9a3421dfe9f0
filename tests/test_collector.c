/*
 * test_collector.c — the `collector` suite: records from spool files into the database.
 *
 * Every record type lands in its table with NULL for what was not known; steps and scale updates
 * meet in AMP_STEPS; kernels get nsys's StringIds names; an event storm is folded into a bounded
 * number of rows (made-up counts saturate). Several processes write at once and all of their
 * records arrive; a writer killed with SIGKILL still has everything it flushed ingested; a
 * truncated file, a corrupt record, an unknown record type, a foreign file and a header naming no
 * process are warned about and skipped without losing the rest, and a spool damaged at random
 * (300 ways) loses nothing before the damage; rows are visible to a reader
 * while the writer still runs. The read-only open refuses missing, foreign, truncated and
 * newer-schema files with one line. AMPPROBE_OUT gives a program its own database, and without
 * the environment a program records nothing.
 */
#include "tests.h"

#include "amp-record.h"
#include "amp-store.h"
#include "record-codec.h"
#include "store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HELPER AMP_BINARY_DIR "/tests/amp_record_helper"

// ---------------------------------------------------------------------------------------------
// Helpers

typedef struct fixture {
    char dir[64];   // temp directory holding everything
    char spool[96]; // spool directory inside it
    char db[96];    // database path inside it
} fixture;

static void fixture_init(fixture *f) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(f->dir, sizeof f->dir, "/tmp/amp-test-collector-"));
    snprintf(f->spool, sizeof f->spool, "%s/spool", f->dir);
    snprintf(f->db, sizeof f->db, "%s/run.sqlite", f->dir);
    ck_assert_int_eq(mkdir(f->spool, 0755), 0);
}

static void fixture_free(fixture *f) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    ck_assert_int_eq(system(cmd), 0);
}

static amp_collector_t *collector(const fixture *f) {
    amp_collector_t *c;
    ck_assert_msg(amp_collector_new(f->db, f->spool, &c) == AMP_OK, "%s", amp_last_error());
    return c;
}

static void finish(amp_collector_t *c, int exit_status) {
    ck_assert_msg(amp_collector_finish(c, exit_status) == AMP_OK, "%s", amp_last_error());
    amp_collector_free(c);
}

static sqlite3 *open_ro(const char *path) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_msg(amp_store_open_readonly(path, &db, err) == AMP_OK, "%s", err);
    return db;
}

static double q_real(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    double v = NAN;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

// The first column as text, in buf ("<null>" for NULL, "<none>" for no row).
static const char *q_text(sqlite3 *db, const char *sql, char *buf, size_t n) {
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    snprintf(buf, n, "<none>");
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        snprintf(buf, n, "%s", t ? t : "<null>");
    }
    sqlite3_finalize(st);
    return buf;
}

static void sleep_ms(int ms) {
    nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL);
}

// Polls c as the launcher does until sql gives want in the database, or 5 s pass (the writer
// flushes its spool every 100 ms, later on a loaded machine): sql's last value.
static int64_t poll_until(amp_collector_t *c, const char *path, const char *sql, int64_t want) {
    int64_t got = -999;
    for (int i = 0; i < 100 && got != want; i++) {
        sleep_ms(50);
        ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
        sqlite3 *db = open_ro(path);
        got = test_query_int(db, sql);
        sqlite3_close(db);
    }
    return got;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Polls until every writer is gone and no child of ours is left, then finishes. (The limit only
// stops a hang: under AddressSanitizer on a busy 2-core machine the writers and the ingest take
// tens of seconds.)
static void collect_until_done(amp_collector_t *c, pid_t *pids, int n) {
    int running = n;
    for (const double give_up = now_s() + 300; now_s() < give_up;) {
        for (int i = 0; i < n; i++) {
            int status;
            if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer failed");
                pids[i] = 0;
                running--;
            }
        }
        ck_assert_msg(amp_collector_poll(c) == AMP_OK, "%s", amp_last_error());
        amp_collector_stats s;
        amp_collector_get_stats(c, &s);
        if (running == 0 && s.live_writers == 0) return;
        sleep_ms(10);
    }
    ck_abort_msg("writers did not finish");
}

static amp_rec_op op_rec(int64_t step) {
    return (amp_rec_op){.step = step,
                        .layer_id = 1,
                        .op = "linear",
                        .phase = AMP_PHASE_FWD,
                        .in_dtypes = "f16,f16",
                        .out_dtype = "f16",
                        .policy = "lower_precision_fp",
                        .shapes = "(2, 2)",
                        .flops = 8,
                        .bytes = -1,
                        .start_ns = 1,
                        .end_ns = 2};
}

// Writes a spool file by hand: header (pid), then n step records, then `tail` raw bytes.
static void write_spool(const fixture *f, const char *name, int32_t pid, int n, const void *tail,
                        size_t tail_len) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->spool, name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    amp_spool_header h;
    amp_spool_header_init(&h, pid, 1, 1000, "handmade");
    fwrite(&h, sizeof h, 1, fp);
    for (int i = 0; i < n; i++) {
        amp_rec_step s = {.step = i, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
        uint8_t buf[256];
        fwrite(buf, amp_rec_encode(AMP_REC_STEP, &s, buf, sizeof buf), 1, fp);
    }
    if (tail_len) fwrite(tail, tail_len, 1, fp);
    fclose(fp);
}

// Runs the helper with an environment of exactly env (NULL-terminated); returns its exit status
// and its stdout in out.
static int run_helper(char *const *args, char *const *env, char *out, size_t n) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execve(HELPER, args, env);
        _exit(126);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fds[0], out + got, n - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = 0;
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---------------------------------------------------------------------------------------------
// Tables

// Records one of each record type (27 records; two steps, one skipped, one event) into the
// spool that amp_record_start() opened.
static void record_one_of_each(void) {
    amp_record_meta(&(amp_rec_meta){"precision", "fp16"});
    amp_record_layer(&(amp_rec_layer){.id = 0, .parent_id = -1, .name = "blocks"});
    amp_record_layer(&(amp_rec_layer){.id = 1, .parent_id = 0, .name = "blocks.0.attn"});
    amp_record_step(
        &(amp_rec_step){.step = 0, .start_ns = 100, .end_ns = 350, .loss = 2.5, .grad_norm = NAN});
    amp_record_scale(&(amp_rec_scale){.step = 0,
                                      .scale_before = 65536,
                                      .scale_after = 32768,
                                      .found_inf = 1,
                                      .growth_tracker = 0,
                                      .skipped = true});
    amp_record_scale(&(amp_rec_scale){.step = 1,
                                      .scale_before = 32768,
                                      .scale_after = 32768,
                                      .found_inf = 0,
                                      .growth_tracker = 1,
                                      .skipped = false});
    amp_record_step(&(amp_rec_step){.step = 1,
                                    .start_ns = 400,
                                    .end_ns = 500,
                                    .loss = NAN,
                                    .grad_norm = 3.0,
                                    .mem_peak_bytes = 123456789}); // after its scale update
    amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = 0,
                                                    .layer_id = 1,
                                                    .op = "linear",
                                                    .kind = AMP_STATS_ACTIVATION_GRAD,
                                                    .dtype = "f32",
                                                    .target_dtype = NULL,
                                                    .numel = 10,
                                                    .min = -1,
                                                    .max = NAN,
                                                    .amax = 1,
                                                    .n_nan = 2,
                                                    .n_posinf = 0,
                                                    .n_neginf = 0,
                                                    .n_overflow = -1,
                                                    .n_underflow = -1,
                                                    .n_zero = 0});
    amp_record_op(&(amp_rec_op){.step = 0,
                                .layer_id = -1,
                                .op = "mm",
                                .phase = AMP_PHASE_NONE,
                                .in_dtypes = "f16,f16",
                                .out_dtype = "f16",
                                .policy = NULL,
                                .shapes = "(2, 2)",
                                .flops = -1,
                                .bytes = 64,
                                .start_ns = 5,
                                .end_ns = 6});
    amp_record_event(&(amp_rec_event){.step = 0,
                                      .layer_id = 1,
                                      .op = "linear",
                                      .phase = AMP_PHASE_BWD,
                                      .kind = AMP_EVENT_OVERFLOW,
                                      .severity = AMP_SEVERITY_WARNING,
                                      .count = 3,
                                      .value = 7e4,
                                      .detail = "in [-70000, 70000]"});
    amp_record_string(&(amp_rec_string){.id = 5, .value = "my-domain"});
    amp_record_string(&(amp_rec_string){.id = 6, .value = "registered message"});
    amp_record_kernel(
        &(amp_rec_kernel){.start_ns = 1000,
                          .end_ns = 2000,
                          .device_id = 0,
                          .context_id = 1,
                          .stream_id = 7,
                          .green_context_id = -1,
                          .correlation_id = 42,
                          .name = "_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_",
                          .demangled = "void at::native::elementwise_kernel<128, 2>(int, T1)",
                          .short_name = NULL,
                          .launch_type = 0,
                          .cache_config = -1,
                          .registers_per_thread = 32,
                          .grid_x = 4,
                          .grid_y = 1,
                          .grid_z = 1,
                          .block_x = 128,
                          .block_y = 1,
                          .block_z = 1,
                          .static_shared_memory = 0,
                          .dynamic_shared_memory = 0,
                          .local_memory_per_thread = 0,
                          .local_memory_total = 0,
                          .grid_id = 9,
                          .shared_memory_executed = -1,
                          .shared_memory_limit_config = -1,
                          .graph_node_id = -1});
    amp_record_memcpy(&(amp_rec_memcpy){.start_ns = 1,
                                        .end_ns = 2,
                                        .device_id = 0,
                                        .context_id = 1,
                                        .stream_id = 7,
                                        .green_context_id = -1,
                                        .correlation_id = 43,
                                        .bytes = 4096,
                                        .copy_kind = 1,
                                        .src_kind = 0,
                                        .dst_kind = 2,
                                        .src_device_id = -1,
                                        .src_context_id = -1,
                                        .dst_device_id = -1,
                                        .dst_context_id = -1,
                                        .migration_cause = -1,
                                        .graph_node_id = -1,
                                        .virtual_address = -1});
    amp_record_memset(&(amp_rec_memset){1, 2, 0, 1, 7, -1, 44, 0, 512, -1, 2});
    amp_record_runtime(&(amp_rec_runtime){.start_ns = 900,
                                          .end_ns = 950,
                                          .driver = false,
                                          .tid = 99,
                                          .correlation_id = 42,
                                          .name = "cudaLaunchKernel_v7000",
                                          .return_value = 0});
    amp_record_sync(&(amp_rec_sync){1, 2, 0, 1, 7, -1, 45, 3, 0});
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = 10,
                                    .end_ns = 20,
                                    .type = AMP_NVTX_PUSH_POP,
                                    .range_id = -1,
                                    .category = -1,
                                    .color = -1,
                                    .text = NULL,
                                    .text_id = 6,
                                    .domain_id = 5,
                                    .tid = 99,
                                    .end_tid = -1,
                                    .payload_type = AMP_NVTX_PAYLOAD_I32,
                                    .payload.i64 = -4});
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = 30,
                                    .end_ns = 0,
                                    .type = AMP_NVTX_MARK,
                                    .range_id = -1,
                                    .category = -1,
                                    .color = -1,
                                    .text = "mark",
                                    .tid = 99,
                                    .end_tid = -1});
    amp_rec_gpu_info gpu = {.id = 0,
                            .cu_device = 0,
                            .name = "NVIDIA H200",
                            .uuid = "GPU-1",
                            .is_discrete = 1,
                            .l2_cache_size = -1,
                            .total_memory = 150000000000LL,
                            .memory_bandwidth = -1,
                            .clock_rate = -1,
                            .sm_count = 132,
                            .compute_major = 9,
                            .compute_minor = 0,
                            .max_threads_per_block = -1,
                            .max_registers_per_block = -1,
                            .max_registers_per_sm = -1,
                            .max_shmem_per_block = -1,
                            .max_shmem_per_block_optin = -1,
                            .max_shmem_per_sm = -1,
                            .threads_per_warp = 32,
                            .async_engines = -1,
                            .max_warps_per_sm = -1,
                            .max_blocks_per_sm = -1};
    amp_record_gpu_info(&gpu);
    amp_record_gpu_info(&gpu);  // every process reports its devices: one row
    for (int k = 0; k < 3; k++) // two metrics, three samples: two names, six rows
        for (int m = 0; m < 2; m++)
            amp_record_gpu_metric(&(amp_rec_gpu_metric){.device_id = 0,
                                                        .start_ns = 1000 + 100 * k,
                                                        .end_ns = 1100 + 100 * k,
                                                        .metric = m ? "dram__bytes_write.sum"
                                                                    : "dram__bytes_read.sum",
                                                        .value = 1e6 * (k + 1) + m});
}

START_TEST(test_every_record_type) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    record_one_of_each();
    amp_record_stop();
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats s;
    amp_collector_get_stats(c, &s);
    ck_assert_int_eq(s.records, 27);
    ck_assert_int_eq(s.steps, 2);
    ck_assert_int_eq(s.last_step, 1);
    ck_assert_int_eq(s.skipped, 1);
    ck_assert_int_eq(s.events, 1);
    ck_assert_double_eq(s.scale, 32768);
    ck_assert_int_eq(s.warnings, 0);
    finish(c, 0);

    sqlite3 *db = open_ro(f.db);
    char buf[256];
    int64_t pid = getpid();
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT value FROM META WHERE key = 'precision' AND pid = %lld",
             (long long)pid);
    ck_assert_str_eq(q_text(db, sql, buf, sizeof buf), "fp16");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'exit_status'", buf, 256), "0");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'status'", buf, 256),
                     "complete");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'clock'", buf, 256),
                     "CLOCK_REALTIME");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_LAYERS"), 2);
    ck_assert_int_eq(test_query_int(db, "SELECT parent_id FROM AMP_LAYERS WHERE id = 0"), -999);
    ck_assert_str_eq(q_text(db, "SELECT name FROM AMP_LAYERS WHERE id = 1", buf, 256),
                     "blocks.0.attn");
    // steps meet their scale updates, whichever came first
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 2);
    ck_assert_double_eq(q_real(db, "SELECT loss FROM AMP_STEPS WHERE step = 0"), 2.5);
    ck_assert_int_eq(test_query_int(db, "SELECT grad_norm FROM AMP_STEPS WHERE step = 0"), -999);
    ck_assert_int_eq(test_query_int(db, "SELECT skipped FROM AMP_STEPS WHERE step = 0"), 1);
    ck_assert_double_eq(q_real(db, "SELECT scale_after FROM AMP_STEPS WHERE step = 0"), 32768);
    ck_assert_int_eq(test_query_int(db, "SELECT loss FROM AMP_STEPS WHERE step = 1"),
                     -999); // NaN loss
    ck_assert_int_eq(test_query_int(db, "SELECT loss_finite FROM AMP_STEPS WHERE step = 1"), 0);
    ck_assert_int_eq(test_query_int(db, "SELECT start_ns FROM AMP_STEPS WHERE step = 1"), 400);
    ck_assert_int_eq(test_query_int(db, "SELECT mem_peak_bytes FROM AMP_STEPS WHERE step = 1"),
                     123456789);
    ck_assert_int_eq(test_query_int(db, "SELECT mem_peak_bytes FROM AMP_STEPS WHERE step = 0"),
                     -999); // not known: NULL
    ck_assert_int_eq(test_query_int(db, "SELECT growth_tracker FROM AMP_SCALE WHERE step = 1"), 1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_SCALE"), 2);
    // optional values are NULL, never 0
    ck_assert_str_eq(q_text(db, "SELECT kind FROM AMP_TENSOR_STATS", buf, 256), "activation_grad");
    ck_assert_str_eq(q_text(db, "SELECT target_dtype FROM AMP_TENSOR_STATS", buf, 256), "<null>");
    ck_assert_int_eq(test_query_int(db, "SELECT n_overflow FROM AMP_TENSOR_STATS"), -999);
    ck_assert_int_eq(test_query_int(db, "SELECT max FROM AMP_TENSOR_STATS"), -999);
    ck_assert_int_eq(test_query_int(db, "SELECT n_nan FROM AMP_TENSOR_STATS"), 2);
    ck_assert_int_eq(test_query_int(db, "SELECT n_zero FROM AMP_TENSOR_STATS"), 0);
    ck_assert_str_eq(q_text(db, "SELECT phase FROM AMP_OPS", buf, 256), "<null>");
    ck_assert_str_eq(q_text(db, "SELECT policy FROM AMP_OPS", buf, 256), "<null>");
    ck_assert_int_eq(test_query_int(db, "SELECT layer_id FROM AMP_OPS"), -999);
    ck_assert_int_eq(test_query_int(db, "SELECT flops FROM AMP_OPS"), -999);
    ck_assert_int_eq(test_query_int(db, "SELECT bytes FROM AMP_OPS"), 64);
    ck_assert_str_eq(
        q_text(db, "SELECT phase || ' ' || kind || ' ' || severity FROM AMP_EVENTS", buf, 256),
        "bwd overflow warning");
    // nsys tables
    ck_assert_str_eq(
        q_text(db,
               "SELECT d.value || '|' || s.value || '|' || m.value FROM "
               "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName "
               "JOIN StringIds s ON s.id = k.shortName "
               "JOIN StringIds m ON m.id = k.mangledName",
               buf, 256),
        "void at::native::elementwise_kernel<128, 2>(int, T1)|elementwise_kernel|"
        "_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_");
    snprintf(sql, sizeof sql, "SELECT globalPid = %lld FROM CUPTI_ACTIVITY_KIND_KERNEL",
             (long long)(pid << 24));
    ck_assert_int_eq(test_query_int(db, sql), 1);
    ck_assert_int_eq(test_query_int(db, "SELECT greenContextId FROM CUPTI_ACTIVITY_KIND_KERNEL"),
                     -999);
    ck_assert_str_eq(q_text(db,
                            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
                            "CUPTI_ACTIVITY_KIND_KERNEL k USING (correlationId) JOIN StringIds s "
                            "ON s.id = r.nameId",
                            buf, 256),
                     "cudaLaunchKernel_v7000");
    snprintf(sql, sizeof sql, "SELECT globalTid = %lld FROM CUPTI_ACTIVITY_KIND_RUNTIME",
             (long long)((pid << 24) | 99));
    ck_assert_int_eq(test_query_int(db, sql), 1);
    ck_assert_str_eq(
        q_text(db,
               "SELECT label FROM CUPTI_ACTIVITY_KIND_MEMCPY JOIN ENUM_CUDA_MEMCPY_OPER "
               "ON id = copyKind",
               buf, 256),
        "Host-to-Device");
    ck_assert_int_eq(test_query_int(db, "SELECT bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"), 512);
    ck_assert_int_eq(test_query_int(db, "SELECT syncType FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
                     3);
    ck_assert_str_eq(
        q_text(db,
               "SELECT t.value || '|' || d.value || '|' || int32Value FROM NVTX_EVENTS "
               "JOIN StringIds t ON t.id = textId JOIN StringIds d ON d.id = domainId",
               buf, 256),
        "registered message|my-domain|-4");
    ck_assert_int_eq(test_query_int(db, "SELECT end FROM NVTX_EVENTS WHERE eventType = 34"), -999);
    ck_assert_str_eq(q_text(db, "SELECT text FROM NVTX_EVENTS WHERE eventType = 34", buf, 256),
                     "mark");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM TARGET_INFO_GPU"), 1);
    ck_assert_int_eq(test_query_int(db, "SELECT smCount FROM TARGET_INFO_GPU"), 132);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM TARGET_INFO_GPU_METRICS"), 2);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM GPU_METRICS"), 6);
    ck_assert_int_eq(
        test_query_int(db, "SELECT sum(value) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS "
                           "n USING (typeId, metricId) WHERE n.metricName = "
                           "'dram__bytes_write.sum' AND g.end - g.timestamp = 100"),
        6000003);
    ck_assert_int_eq(test_query_int(db, "SELECT l2CacheSize FROM TARGET_INFO_GPU"), -999);
    // the process, and the indexes built at the end
    snprintf(sql, sizeof sql, "SELECT status FROM AMP_PROCESSES WHERE pid = %lld", (long long)pid);
    ck_assert_str_eq(q_text(db, sql, buf, 256), "complete");
    ck_assert_int_eq(test_query_int(db, "SELECT records FROM AMP_PROCESSES"), 27);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM PROCESSES"), 1);
    ck_assert_int_ge(
        test_query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name "
                           "= 'AMP_TENSOR_STATS_step'"),
        1);
    ck_assert_str_eq(q_text(db, "PRAGMA integrity_check", buf, 256), "ok");
    ck_assert_str_eq(q_text(db, "PRAGMA journal_mode", buf, 256), "delete"); // one plain file
    sqlite3_close(db);
    // the spool directory is gone
    struct stat sb;
    ck_assert_int_ne(stat(f.spool, &sb), 0);
    fixture_free(&f);
}
END_TEST

// Steps are numbered from 0 (the report and the TUI take step -1 for "none"): the records of a
// negative step, of every type that carries one, are left out with one warning, the rest land.
START_TEST(test_records_of_negative_steps_are_left_out) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    for (int64_t step = -2; step < 2; step++) {
        amp_record_step(&(amp_rec_step){.step = step,
                                        .start_ns = 100 + step,
                                        .end_ns = 200 + step,
                                        .loss = 1,
                                        .grad_norm = NAN});
        amp_record_scale(&(amp_rec_scale){.step = step, .scale_before = 8, .scale_after = 8});
        amp_record_tensor_stats(&(amp_rec_tensor_stats){
            .step = step, .layer_id = -1, .op = "mm", .dtype = "f32", .numel = 1, .amax = 1});
        amp_record_op(&(amp_rec_op){.step = step,
                                    .layer_id = -1,
                                    .op = "mm",
                                    .flops = -1,
                                    .bytes = -1,
                                    .start_ns = 150,
                                    .end_ns = 160});
        amp_record_event(&(amp_rec_event){.step = step,
                                          .layer_id = -1,
                                          .kind = AMP_EVENT_OVERFLOW,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = 1,
                                          .value = NAN});
    }
    amp_record_stop();
    const int saved_stderr = test_stream_to(stderr, "/dev/null"); // (the warning)
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    test_stream_back(stderr, saved_stderr);
    amp_collector_stats s;
    amp_collector_get_stats(c, &s);
    ck_assert_int_eq(s.warnings, 1);
    ck_assert_int_eq(s.records, 10);
    ck_assert_int_eq(s.steps, 2);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    static const char *const tables[] = {"AMP_STEPS", "AMP_SCALE", "AMP_TENSOR_STATS", "AMP_OPS",
                                         "AMP_EVENTS"};
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", tables[i]);
        ck_assert_int_eq(test_query_int(db, sql), 2);
        snprintf(sql, sizeof sql, "SELECT min(step) FROM %s", tables[i]);
        ck_assert_int_eq(test_query_int(db, sql), 0);
    }
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_event_storm_is_bounded) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    for (int step = 0; step < 100; step++) {
        for (int layer = 0; layer < 3; layer++) {
            amp_record_event(&(amp_rec_event){.step = step,
                                              .layer_id = layer,
                                              .op = "softmax",
                                              .phase = AMP_PHASE_FWD,
                                              .kind = AMP_EVENT_NONFINITE_PROPAGATED,
                                              .severity = AMP_SEVERITY_ERROR,
                                              .count = 2,
                                              .value = step,
                                              .detail = NULL});
        }
    }
    amp_record_event(&(amp_rec_event){.step = 7,
                                      .layer_id = 0,
                                      .op = "softmax",
                                      .phase = AMP_PHASE_BWD,
                                      .kind = AMP_EVENT_OVERFLOW,
                                      .severity = AMP_SEVERITY_WARNING,
                                      .count = -1,
                                      .value = NAN});
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_EVENTS"), 3 * 11 + 1);
    ck_assert_int_eq(test_query_int(db, "SELECT sum(occurrences) FROM AMP_EVENTS"), 301);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_EVENTS WHERE aggregate = 0 AND layer_id "
                           "= 2 AND kind = 'nonfinite_propagated'"),
        10);
    // the aggregate row of layer 2: steps 10..99 folded in
    const char *agg = "FROM AMP_EVENTS WHERE aggregate = 1 AND layer_id = 2";
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT step || ' ' || last_step || ' ' || occurrences || ' ' || "
             "count || ' ' || value %s",
             agg);
    char buf[128];
    ck_assert_str_eq(q_text(db, sql, buf, sizeof buf), "10 99 90 180 99.0");
    ck_assert_int_eq(test_query_int(db, "SELECT count FROM AMP_EVENTS WHERE kind = 'overflow'"),
                     -999);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A database path longer than SQLite takes (504 bytes as an absolute name): said so, by length,
// where SQLite says only "unable to open database file".
START_TEST(test_a_path_too_long_for_sqlite_is_said) {
    fixture f;
    fixture_init(&f);
    char path[1024];
    int n = snprintf(path, sizeof path, "%s", f.dir);
    while (n < 480) { // directories of 50 bytes each (a name may have 255)
        n += snprintf(path + n, sizeof path - (size_t)n, "/%050d", n);
        ck_assert_int_eq(mkdir(path, 0755), 0);
    }
    snprintf(path + n, sizeof path - (size_t)n, "/%s", "a-database-name-past-the-limit.sqlite");
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new(path, f.spool, &c), AMP_ERR_IO);
    ck_assert_msg(strstr(amp_last_error(), "cannot create a database whose path is ") &&
                      strstr(amp_last_error(), " bytes long as an absolute name, SQLite takes 504"),
                  "%s", amp_last_error());
    char short_path[160]; // a database made where its path is short, moved there
    snprintf(short_path, sizeof short_path, "%s/short.sqlite", f.dir);
    ck_assert_int_eq(amp_collector_new(short_path, f.spool, &c), AMP_OK);
    finish(c, 0);
    ck_assert_int_eq(rename(short_path, path), 0);
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_IO);
    ck_assert_msg(strstr(err, "cannot open a database whose path is "), "%s", err);
    // a name that is long only until its ".." are resolved is no such path: it opens
    ck_assert_msg(amp_collector_new(short_path, NULL, &c) == AMP_OK, "%s", amp_last_error());
    finish(c, 0);
    char cwd[PATH_MAX], up[600] = "";
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    path[n] = 0; // the deepest directory
    ck_assert_int_eq(chdir(path), 0);
    for (const char *p = path + strlen(f.dir); *p; p++)
        if (*p == '/') strcat(up, "../");
    strcat(up, "short.sqlite");
    ck_assert_msg(amp_store_open_readonly(up, &db, err) == AMP_OK, "%s", err);
    sqlite3_close(db);
    ck_assert_int_eq(chdir(cwd), 0);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/0*", f.dir);
    ck_assert_int_eq(system(cmd), 0);
    fixture_free(&f);
}
END_TEST

// A database file claimed by its creator (O_EXCL, then flock) shows live from that moment: the
// collector takes the locked descriptor over, so that no `ampprobe run --force` can replace the
// file between the claim and the collector's start (it did: two runs wrote one file). The
// descriptor is the collector's to close, also when it fails to start.
START_TEST(test_a_claimed_database_is_busy_from_its_creation) {
    fixture f;
    fixture_init(&f);
    ck_assert(!amp_collector_db_busy(f.db));
    int fd = open(f.db, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    ck_assert(amp_collector_db_busy(f.db));
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new_locked(f.db, f.spool, fd, &c), AMP_OK);
    ck_assert(amp_collector_db_busy(f.db));
    finish(c, 0);
    ck_assert(!amp_collector_db_busy(f.db));
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1); // (closed with the collector)
    char other[160];
    snprintf(other, sizeof other, "%s/other.sqlite", f.dir);
    fd = open(other, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(amp_collector_new_locked(other, "/nonexistent-spool", fd, &c), AMP_ERR_IO);
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
    fixture_free(&f);
}
END_TEST

// A spool file of one process image (pid, exec_id, proc_start) with its layer 0 and steps from
// first on.
static void write_image(const fixture *f, const char *name, int32_t pid, uint64_t exec_id,
                        uint64_t proc_start, const char *layer, int first, int n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->spool, name);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    amp_spool_header h;
    amp_spool_header_init(&h, pid, 1, 1000, "image");
    h.exec_id = exec_id;
    h.proc_start = proc_start;
    fwrite(&h, sizeof h, 1, fp);
    uint8_t buf[256];
    amp_rec_layer l = {.id = 0, .parent_id = -1, .name = layer};
    fwrite(buf, amp_rec_encode(AMP_REC_LAYER, &l, buf, sizeof buf), 1, fp);
    for (int i = first; i < first + n; i++) {
        amp_rec_step st = {.step = i, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
        fwrite(buf, amp_rec_encode(AMP_REC_STEP, &st, buf, sizeof buf), 1, fp);
    }
    fclose(fp);
}

// Two process images of one pid (a program that exec()s another that records, a pid the system
// reuses for a child forked from the same image) are two processes, the later at pid + k * 2^22:
// one's layer names and steps must not overwrite the other's. Files of one image (recording
// stopped and started again) stay one process. The earlier file (by its name's time) keeps the
// pid, in whatever order the directory lists them.
START_TEST(test_process_images_of_one_pid_are_kept_apart) {
    fixture f;
    fixture_init(&f);
    write_image(&f, "77-400.spool", 77, 1, 9, "reused", 0, 4);  // a sibling, later, same pid
    write_image(&f, "77-300.spool", 77, 1, 5, "encoder", 3, 2); // the first, recording again
    write_image(&f, "77-200.spool", 77, 2, 5, "decoder", 0, 6); // the first's exec
    write_image(&f, "77-100.spool", 77, 1, 5, "encoder", 0, 3);
    amp_collector_t *c = collector(&f);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES"), 3);
    static const struct {
        int pid;
        const char *layer;
        int steps;
    } want[] = {{77, "encoder", 5}, {77 + 4194304, "decoder", 6}, {77 + 2 * 4194304, "reused", 4}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char q[160];
        snprintf(q, sizeof q, "SELECT count(*) FROM AMP_LAYERS WHERE pid = %d AND name = '%s'",
                 want[i].pid, want[i].layer);
        ck_assert_msg(test_query_int(db, q) == 1, "%s", q);
        snprintf(q, sizeof q, "SELECT count(*) FROM AMP_STEPS WHERE pid = %d", want[i].pid);
        ck_assert_int_eq(test_query_int(db, q), want[i].steps);
    }
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// Counts that a broken writer makes up must not overflow the aggregate's sum (undefined in C; in
// practice it wrapped negative and the sum was dropped): it saturates.
START_TEST(test_event_count_saturates) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    for (int i = 0; i < 13; i++) // 10 rows of their own, the aggregate, two folded into it
        amp_record_event(&(amp_rec_event){.step = i,
                                          .layer_id = 1,
                                          .op = "mul",
                                          .phase = AMP_PHASE_FWD,
                                          .kind = AMP_EVENT_OVERFLOW,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = i < 11 ? 1 : INT64_MAX / 2 + 1,
                                          .value = NAN});
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT occurrences FROM AMP_EVENTS WHERE aggregate = 1"),
                     3);
    ck_assert_double_ge(q_real(db, "SELECT count FROM AMP_EVENTS WHERE aggregate = 1"), 9e18);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// The same across commits: the sum in the database saturates too (SQLite's integer addition
// turned into a REAL, 1.8e19, in the INTEGER column).
START_TEST(test_event_count_saturates_across_commits) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    for (int i = 0; i < 13; i++) {
        amp_record_event(&(amp_rec_event){.step = i,
                                          .layer_id = 1,
                                          .op = "mul",
                                          .phase = AMP_PHASE_FWD,
                                          .kind = AMP_EVENT_OVERFLOW,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = i < 11 ? 1 : INT64_MAX / 2 + 1,
                                          .value = NAN});
        if (i >= 10) { // the aggregate row, then each fold, in a commit of its own
            amp_record_flush();
            ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
        }
    }
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT occurrences FROM AMP_EVENTS WHERE aggregate = 1"),
                     3);
    ck_assert_int_eq(test_query_int(db, "SELECT typeof(count) = 'integer' AND count = "
                                        "9223372036854775807 FROM AMP_EVENTS WHERE aggregate = 1"),
                     1);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// The store binds a statement's parameter again only when its value changed (store.c, binder):
// rows whose columns repeat, turn NULL, come back, and texts that grow past the kept copy's first
// allocation and shrink again must all land as emitted.
START_TEST(test_repeated_values_land_as_emitted) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    char long_shapes[200];
    memset(long_shapes, 'x', sizeof long_shapes - 1);
    long_shapes[sizeof long_shapes - 1] = 0;
    const char *shapes[6] = {"(2, 3)", "(2, 3)", NULL, long_shapes, "(2, 3)", "(2,"}; // a prefix
    const char *policy[6] = {"fp32", "fp32", "fp32", NULL, NULL, "fp32"};
    const int32_t layer[6] = {3, 3, -1, -1, 3, 4};
    const double nan_or[6] = {0.5, 0.5, NAN, NAN, 0.5, -0.0};
    for (int i = 0; i < 6; i++)
        amp_record_op(&(amp_rec_op){.step = 1,
                                    .layer_id = layer[i],
                                    .op = "add",
                                    .phase = AMP_PHASE_FWD,
                                    .in_dtypes = "f32",
                                    .out_dtype = "f32",
                                    .policy = policy[i],
                                    .shapes = shapes[i],
                                    .flops = i == 2 ? -1 : 7,
                                    .bytes = 8,
                                    .start_ns = 100 + i,
                                    .end_ns = 200});
    for (int i = 0; i < 6; i++)
        amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = 1,
                                                        .layer_id = layer[i],
                                                        .op = "add",
                                                        .kind = AMP_STATS_ACTIVATION,
                                                        .dtype = "f32",
                                                        .target_dtype = policy[i],
                                                        .numel = 4,
                                                        .min = nan_or[i],
                                                        .max = nan_or[i],
                                                        .amax = 1,
                                                        .n_nan = i % 2 ? -1 : 0,
                                                        .n_posinf = 0,
                                                        .n_neginf = 0,
                                                        .n_overflow = 0,
                                                        .n_underflow = 0,
                                                        .n_zero = 0});
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[1024];
    ck_assert_str_eq(
        q_text(db,
               "SELECT group_concat(ifnull(layer_id, 'N') || ':' || ifnull(policy, 'N') || ':' || "
               "ifnull(CASE WHEN length(shapes) > 20 THEN 'x' || length(shapes) ELSE shapes END, "
               "'N') || ':' || ifnull(flops, 'N'), ' ') FROM (SELECT * FROM AMP_OPS ORDER BY "
               "start_ns)",
               buf, sizeof buf),
        "3:fp32:(2, 3):7 3:fp32:(2, 3):7 N:fp32:N:N N:N:x199:7 3:N:(2, 3):7 4:fp32:(2,:7");
    ck_assert_str_eq(q_text(db,
                            "SELECT group_concat(ifnull(target_dtype, 'N') || ':' || ifnull(min, "
                            "'N') || ':' || ifnull(n_nan, 'N'), ' ') FROM (SELECT * FROM "
                            "AMP_TENSOR_STATS ORDER BY rowid)",
                            buf, sizeof buf),
                     "fp32:0.5:0 fp32:0.5:N fp32:N:0 N:N:N N:0.5:0 fp32:0.0:N");
    // overflow and underflow counts are against a target dtype: without one they are NULL
    ck_assert_str_eq(q_text(db,
                            "SELECT group_concat(ifnull(n_overflow, 'N') || ':' || "
                            "ifnull(n_underflow, 'N'), ' ') FROM (SELECT * FROM "
                            "AMP_TENSOR_STATS ORDER BY rowid)",
                            buf, sizeof buf),
                     "0:0 0:0 0:0 N:N N:N 0:0");
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A step recorded twice is one row spanning both (the second replaced the first, losing its
// gradient norm and memory peak), and two GradScaler updates in one step keep the skip of the
// first (AMP_STEPS held only the last update's, "0 skipped").
START_TEST(test_a_step_recorded_twice_is_merged) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    amp_record_step(&(amp_rec_step){.step = 0,
                                    .start_ns = 100,
                                    .end_ns = 200,
                                    .loss = 1.0,
                                    .grad_norm = 5,
                                    .mem_peak_bytes = 64});
    amp_record_step(&(amp_rec_step){.step = 0,
                                    .start_ns = 300,
                                    .end_ns = 500,
                                    .loss = 4.0,
                                    .grad_norm = NAN,
                                    .mem_peak_bytes = 0});
    amp_record_step(&(amp_rec_step){.step = 0,
                                    .start_ns = 0,
                                    .end_ns = 450,
                                    .loss = 4.0,
                                    .grad_norm = NAN}); // (its start left unset)
    amp_record_scale(&(amp_rec_scale){.step = 0,
                                      .scale_before = 8,
                                      .scale_after = 4,
                                      .found_inf = 1,
                                      .growth_tracker = 0,
                                      .skipped = true});
    amp_record_scale(&(amp_rec_scale){.step = 0,
                                      .scale_before = 4,
                                      .scale_after = 4,
                                      .found_inf = 0,
                                      .growth_tracker = 1,
                                      .skipped = false});
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[256];
    ck_assert_str_eq(q_text(db,
                            "SELECT group_concat(start_ns || ':' || end_ns || ':' || loss || ':' "
                            "|| grad_norm || ':' || mem_peak_bytes || ':' || scale_before || ':' "
                            "|| scale_after || ':' || found_inf || ':' || skipped) FROM AMP_STEPS",
                            buf, sizeof buf),
                     "100:500:4.0:5.0:64:8.0:4.0:1:1");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_SCALE"), 2);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// Text that is not UTF-8 is stored with U+FFFD for each byte that starts no valid sequence
// (stored raw, Python's sqlite3 failed to read the table); valid text, multi-byte characters
// among it, is stored as given.
START_TEST(test_text_is_stored_as_utf8) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    const char *names[] = {
        "blocks.0.attn\xff\xfe.qkv", "caf\xc3\xa9 \xe2\x82\xac", "cut \xe2\x82",
        "over\xc0\xaflong",          "sur\xed\xa0\x80rogate",    "longer than eight bytes \x80"};
    for (int i = 0; i < 6; i++)
        amp_record_layer(&(amp_rec_layer){.id = i, .parent_id = -1, .name = names[i]});
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[512];
    ck_assert_str_eq(q_text(db, "SELECT group_concat(hex(name), ' ') FROM AMP_LAYERS ORDER BY id",
                            buf, sizeof buf),
                     "626C6F636B732E302E6174746EEFBFBDEFBFBD2E716B76 "
                     "636166C3A920E282AC "
                     "63757420EFBFBDEFBFBD "
                     "6F766572EFBFBDEFBFBD6C6F6E67 "
                     "737572EFBFBDEFBFBDEFBFBD726F67617465 "
                     "6C6F6E676572207468616E20656967687420627974657320EFBFBD");
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_kernel_short_names) {
    char buf[256];
    ck_assert_str_eq(amp_kernel_short_name("void at::native::(anonymous namespace)::"
                                           "softmax_warp_forward<float, float, 4>(float*, int)",
                                           buf, sizeof buf),
                     "softmax_warp_forward");
    ck_assert_str_eq(amp_kernel_short_name("nvjet_sm90_tst_256x128", buf, sizeof buf),
                     "nvjet_sm90_tst_256x128");
    ck_assert_str_eq(amp_kernel_short_name("foo(int)", buf, sizeof buf), "foo");
    ck_assert_str_eq(amp_kernel_short_name("ns::bar<ns::baz<1>>", buf, sizeof buf), "bar");
    ck_assert_str_eq(amp_kernel_short_name("", buf, sizeof buf), "");
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Many writers, killed writers, broken spool files

// Writers are forked before the collector exists: its store runs a checkpoint thread, and a child
// forked while another thread holds the allocator's lock inherits it held (AddressSanitizer's
// allocator, unlike glibc's, is not reset across fork) and hangs at its first allocation.

START_TEST(test_many_processes) {
    enum { PROCS = 4, OPS = 20000 };
    fixture f;
    fixture_init(&f);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        ck_assert_int_ge(pids[p], 0);
        if (pids[p] == 0) {
            if (amp_record_start(f.spool) != AMP_OK) _exit(1);
            for (int i = 0; i < OPS; i++) {
                amp_rec_op op = op_rec(i);
                amp_record_op(&op);
                if (i % 5000 == 0) sleep_ms(20); // spread over several polls
            }
            if (p) // the first sends no step (a launcher's parent, as torchrun)
                amp_record_step(&(amp_rec_step){.step = 0, .end_ns = 1, .grad_norm = NAN});
            exit(0);
        }
    }
    amp_collector_t *c = collector(&f); // while they write
    pid_t copy[PROCS];
    memcpy(copy, pids, sizeof pids);
    collect_until_done(c, copy, PROCS);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.steps, PROCS - 1);
    ck_assert_int_eq(st.step_processes, PROCS - 1);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_OPS"), PROCS * OPS);
    ck_assert_int_eq(test_query_int(db, "SELECT count(DISTINCT pid) FROM AMP_OPS"), PROCS);
    for (int p = 0; p < PROCS; p++) {
        char sql[200];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) = %d AND count(DISTINCT step) = %d FROM AMP_OPS WHERE pid = %d",
                 OPS, OPS, (int)pids[p]);
        ck_assert_int_eq(test_query_int(db, sql), 1);
    }
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES WHERE status = 'complete'"), PROCS);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A process that stops recording and starts it again writes a second spool file: one process in
// AMP_PROCESSES all the same, running while the second file is open, then with both files'
// records.
// A program that closed its stdout before recording: the spool file must not become fd 1 (the
// program's output went into it, and the collector skipped the rest as corrupt: 0 steps).
START_TEST(test_spool_keeps_off_a_closed_stdout) {
    fixture f;
    fixture_init(&f);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(1);
        if (amp_record_start(f.spool) != AMP_OK) _exit(1);
        for (int i = 0; i < 3; i++) {
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
            if (write(1, "the program's output\n", 21) < 0) (void)0; // (fd 1: closed, or not ours)
            amp_record_flush();
        }
        amp_record_stop();
        _exit(0);
    }
    amp_collector_t *c = collector(&f);
    pid_t pids[1] = {pid};
    collect_until_done(c, pids, 1);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 3);
    ck_assert_int_eq(test_query_int(db, "SELECT status = 'complete' FROM AMP_PROCESSES"), 1);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A process that starts recording as the run ends, into a spool directory the launcher could not
// remove (another such file in it): it must learn that nothing reads it any more and stop (it
// wrote on, as did every process started after it, until the disk filled).
START_TEST(test_a_writer_after_the_end_stops) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c; // (a spool directory of its own, as the launcher's)
    ck_assert_int_eq(amp_collector_new(f.db, NULL, &c), AMP_OK);
    char spool[512], junk[600];
    snprintf(spool, sizeof spool, "%s", amp_collector_spool_dir(c));
    snprintf(junk, sizeof junk, "%s/not-a-spool-file", spool); // (keeps the directory)
    const int fd = open(junk, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    close(fd);
    finish(c, 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (amp_record_start(spool) != AMP_OK) _exit(2);
        for (int i = 0; i < 200 && amp_record_enabled(); i++) {
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
            sleep_ms(10);
        }
        _exit(amp_record_enabled() ? 1 : 0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the late writer still records after 2 s (status %d)", status);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", spool);
    ck_assert_int_eq(system(cmd), 0);
    fixture_free(&f);
}
END_TEST

// A program that closes every descriptor (a daemon's start) and opens a file of its own, which
// gets the spool file's number: the recorder stops, and writes nothing into that file (its
// records went into the program's file, unannounced).
START_TEST(test_a_closed_spool_descriptor_stops_recording) {
    fixture f;
    fixture_init(&f);
    char mine[512];
    snprintf(mine, sizeof mine, "%s/the-programs-file", f.dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (amp_record_start(f.spool) != AMP_OK) _exit(1);
        for (int i = 0; i < 2; i++)
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
        amp_record_flush();
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        const int fd = open(mine, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
        for (int other = 3; other < 64; other++) // (whichever number the spool file had)
            if (other != fd) dup2(fd, other);
        for (int i = 2; i < 5; i++)
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
        amp_record_flush();
        if (write(fd, "hello\n", 6) != 6) _exit(1);
        amp_record_stop();
        _exit(amp_record_enabled() ? 1 : 0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_str_eq(test_slurp(mine), "hello\n");
    amp_collector_t *c = collector(&f);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 2);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A writer whose spool file was removed (the collector finished, and no lock file told it: it
// could not open one, or opened none in time) stops: nothing will read what it writes.
START_TEST(test_a_writer_whose_spool_file_went_stops) {
    fixture f;
    fixture_init(&f);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (amp_record_start(f.spool) != AMP_OK) _exit(2);
        for (int i = 0; i < 300 && amp_record_enabled(); i++) {
            amp_record_step(&(amp_rec_step){.step = i, .start_ns = 1, .end_ns = 2});
            sleep_ms(10);
        }
        _exit(amp_record_enabled() ? 1 : 0);
    }
    sleep_ms(300);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*.spool", f.spool);
    ck_assert_int_eq(system(cmd), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the writer still records 2.7 s after its spool file went (status %d)", status);
    fixture_free(&f);
}
END_TEST

START_TEST(test_recording_started_again_is_one_process) {
    fixture f;
    fixture_init(&f);
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char byte;
        for (int round = 0; round < 2; round++) {
            if (amp_record_start(f.spool) != AMP_OK) _exit(1);
            for (int i = 0; i < 3; i++) {
                amp_rec_op op = op_rec(3 * round + i);
                amp_record_op(&op);
            }
            amp_record_step(&(amp_rec_step){.step = round, .start_ns = 1, .end_ns = 2});
            amp_record_stop();
            if (round == 0 && read(go[0], &byte, 1) != 1) _exit(1); // the test looks in between
        }
        _exit(0);
    }
    amp_collector_t *c = collector(&f);                             // (after the fork: see above)
    for (const double give_up = now_s() + 60; now_s() < give_up;) { // the first file ended
        ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
        amp_collector_stats s;
        amp_collector_get_stats(c, &s);
        if (s.records == 4 && s.live_writers == 0) break;
        sleep_ms(10);
    }
    ck_assert_int_eq(write(go[1], "x", 1), 1);
    pid_t pids[1] = {pid};
    collect_until_done(c, pids, 1);
    amp_collector_stats st; // steps of one process, whatever its files (it read "of 2 processes")
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.steps, 2);
    ck_assert_int_eq(st.step_processes, 1);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_OPS"), 6);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES"), 1);
    ck_assert_int_eq(test_query_int(db, "SELECT records FROM AMP_PROCESSES"), 8);
    ck_assert_int_eq(test_query_int(db, "SELECT status = 'complete' AND end_ns >= start_ns AND "
                                        "bytes > 128 FROM AMP_PROCESSES"),
                     1);
    sqlite3_close(db);
    close(go[0]);
    close(go[1]);
    fixture_free(&f);
}
END_TEST

START_TEST(test_killed_writer_still_ingested) {
    fixture f;
    fixture_init(&f);
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (amp_record_start(f.spool) != AMP_OK) _exit(1);
        for (int i = 0; i < 1000; i++) {
            amp_rec_op op = op_rec(i);
            amp_record_op(&op);
        }
        amp_record_flush();
        char x = 1;
        ck_assert_int_eq(write(ready[1], &x, 1), 1);
        for (;;)
            pause();
    }
    amp_collector_t *c = collector(&f);
    char x;
    ck_assert_int_eq(read(ready[0], &x, 1), 1);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats s;
    amp_collector_get_stats(c, &s);
    ck_assert_int_eq(s.live_writers, 1);
    kill(pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_get_stats(c, &s);
    ck_assert_int_eq(s.live_writers, 0);
    finish(c, 137);
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_OPS"), 1000);
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES", buf, 64), "complete");
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'exit_status'", buf, 64),
                     "137");
    ck_assert_str_eq(q_text(db, "PRAGMA integrity_check", buf, 64), "ok");
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_truncated_spool) {
    fixture f;
    fixture_init(&f);
    amp_rec_step s = {.step = 99, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
    uint8_t rec[256];
    size_t len = amp_rec_encode(AMP_REC_STEP, &s, rec, sizeof rec);
    write_spool(&f, "1-1.spool", 4242, 5, rec, len / 2); // half of a sixth record
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.records, 5);
    ck_assert_int_eq(st.warnings, 1);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS WHERE pid = 4242"), 5);
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES", buf, 64), "truncated");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM META WHERE key = 'capture_error'"),
                     0);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A poll far behind stops when its time is up (the launcher passes signals on between polls: a
// backlog of 70 writers held a SIGTERM for over 80 s) and the next goes on where it stopped: a
// file read in part is not finished as cut short, the files after it wait their turn.
START_TEST(test_poll_stops_when_its_time_is_up) {
    fixture f;
    fixture_init(&f);
    enum { BIG = 300000 }; // step records, more than two 4 MiB reads
    write_spool(&f, "1-1.spool", 4242, BIG, NULL, 0);
    write_spool(&f, "2-1.spool", 4343, 3, NULL, 0);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll_for(c, 1), AMP_OK);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_gt(st.records, 0);
    ck_assert_int_lt(st.records, BIG);
    int polls = 1;
    for (; st.records < BIG + 3 && polls < 100; polls++) {
        ck_assert_int_eq(amp_collector_poll_for(c, 1), AMP_OK);
        amp_collector_get_stats(c, &st);
    }
    ck_assert_int_ge(polls, 3);
    ck_assert_int_eq(st.records, BIG + 3);
    ck_assert_int_eq(st.warnings, 0);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), BIG + 3);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES WHERE status = 'complete'"), 2);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A spool file shorter than the header it holds says (cut off within the header) is truncated,
// not complete.
START_TEST(test_spool_shorter_than_its_header) {
    fixture f;
    fixture_init(&f);
    char path[256];
    snprintf(path, sizeof path, "%s/1-1.spool", f.spool);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    amp_spool_header h;
    amp_spool_header_init(&h, 4242, 1, 1000, "handmade");
    h.header_bytes = sizeof h + 100;
    fwrite(&h, sizeof h, 1, fp);
    fclose(fp);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.warnings, 1);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES", buf, 64), "truncated");
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// A collector that makes its own spool directory holds 256 KiB there for the end of the run (room
// to finish on a full disk) and gives it back with the directory; a run that stopped nothing
// short has no capture_error. (test_truncated_spool: a spool cut off on a disk with room is not
// put down to a full one.)
START_TEST(test_reserve_held_until_the_end) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c;
    ck_assert_int_eq(amp_collector_new(f.db, NULL, &c), AMP_OK);
    const char *dir = amp_collector_spool_dir(c);
    char path[256];
    snprintf(path, sizeof path, "%s/.reserve", dir);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_ge(sb.st_blocks * 512, 256 << 10);
    char spool[128];
    snprintf(spool, sizeof spool, "%s", dir);
    finish(c, 0);
    ck_assert_int_ne(stat(path, &sb), 0);
    ck_assert_int_ne(stat(spool, &sb), 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM META WHERE key = 'capture_error'"),
                     0);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_corrupt_record_skips_rest) {
    fixture f;
    fixture_init(&f);
    // three good records, a header that cannot be a record's, then more bytes
    uint8_t junk[64];
    memset(junk, 0xFF, sizeof junk);
    write_spool(&f, "1-1.spool", 10, 3, junk, sizeof junk);
    // a record whose string runs past its payload
    amp_rec_meta meta = {"key", "value"};
    uint8_t rec[128];
    size_t len = amp_rec_encode(AMP_REC_META, &meta, rec, sizeof rec);
    uint32_t bad = 500;
    memcpy(rec + AMP_REC_HEADER_BYTES, &bad, 4);
    write_spool(&f, "2-1.spool", 11, 2, rec, len);
    // an unknown record type (from a newer writer) between good ones is skipped by its length
    uint8_t unknown[AMP_REC_HEADER_BYTES + 4] = {0};
    uint16_t type = 200, version = 1;
    uint32_t plen = 4;
    memcpy(unknown, &type, 2);
    memcpy(unknown + 2, &version, 2);
    memcpy(unknown + 4, &plen, 4);
    uint8_t tail[sizeof unknown + 64];
    memcpy(tail, unknown, sizeof unknown);
    amp_rec_step s = {.step = 77, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
    size_t slen = amp_rec_encode(AMP_REC_STEP, &s, tail + sizeof unknown, 64);
    write_spool(&f, "3-1.spool", 12, 1, tail, sizeof unknown + slen);
    // not a spool file at all
    write_spool(&f, "4-1.spool", 13, 0, NULL, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/4-1.spool", f.spool);
    FILE *fp = fopen(path, "r+b");
    fputs("NOTSPOOL", fp);
    fclose(fp);

    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    ck_assert_str_eq(amp_last_error(), ""); // (the foreign file warned about, ignored)
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.warnings, 4);
    ck_assert_int_eq(st.records, 3 + 2 + 2);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS WHERE pid = 10"), 3);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS WHERE pid = 11"), 2);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS WHERE pid = 12"), 2);
    ck_assert_int_eq(test_query_int(db, "SELECT max(step) FROM AMP_STEPS WHERE pid = 12"), 77);
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES WHERE pid = 10", buf, 64),
                     "corrupt");
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES WHERE pid = 12", buf, 64),
                     "complete");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES"), 3);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// The one spool file in dir, read whole (test_read_file: malloc'd, its length in *len).
static uint8_t *read_only_spool(const char *dir, size_t *len) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    char path[512] = "";
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".spool")) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    closedir(d);
    ck_assert_msg(path[0], "no spool file in %s", dir);
    return (uint8_t *)test_read_file(path, len);
}

static uint64_t next_random(uint64_t *x) { // xorshift64
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

// Damages a spool file's bytes in one of four ways at a random place: a few bytes changed, the
// file cut short, a run of bytes overwritten, a 32-bit field made huge. Returns the offset of the
// first byte that may differ (the new length for a cut).
static size_t damage(uint8_t *b, size_t *len, uint64_t *x) {
    const size_t n = *len;
    size_t first = n;
    switch (next_random(x) % 4) {
    case 0:
        for (int k = 1 + (int)(next_random(x) % 8); k > 0; k--) {
            const size_t i = next_random(x) % n;
            b[i] ^= (uint8_t)(1 + next_random(x) % 255);
            first = i < first ? i : first;
        }
        break;
    case 1:
        first = *len = next_random(x) % n;
        break;
    case 2:
        first = next_random(x) % n;
        for (size_t j = first, m = 1 + next_random(x) % 64; j < first + m && j < n; j++)
            b[j] = (uint8_t)next_random(x);
        break;
    default: {
        first = next_random(x) % (n - 4);
        const uint32_t v = next_random(x) % 2 ? 0xFFFFFFFFu : 0x80000000u;
        memcpy(b + first, &v, 4);
    }
    }
    return first;
}

// A spool file damaged at random (one of each record type, 300 ways) costs at most the records
// from the damage on: the collector warns and goes on, every record that ends before the first
// changed byte lands, and the database passes SQLite's integrity check (under ASan and UBSan in
// CI: no read or write out of bounds on the way).
START_TEST(test_damaged_spools_lose_only_what_follows_the_damage) {
    fixture f;
    fixture_init(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    record_one_of_each();
    amp_record_stop();
    size_t good_len;
    uint8_t *good = read_only_spool(f.spool, &good_len);
    amp_spool_header h;
    memcpy(&h, good, sizeof h);
    int64_t ends[64]; // where each record ends
    int records = 0;
    for (size_t at = h.header_bytes; at + AMP_REC_HEADER_BYTES <= good_len; records++) {
        uint32_t plen;
        memcpy(&plen, good + at + 4, 4);
        at += AMP_REC_HEADER_BYTES + plen;
        ck_assert_int_lt(records, 64);
        ends[records] = (int64_t)at;
    }
    ck_assert_int_eq(records, 27);
    ck_assert_int_eq(ends[records - 1], (int64_t)good_len);

    uint8_t *b = malloc(good_len);
    char spool[128];
    snprintf(spool, sizeof spool, "%s/0-1.spool", f.spool);
    uint64_t x = 0x9E3779B97F4A7C15u;
    const int saved_stderr = test_stream_to(stderr, "/dev/null"); // (300 warnings)
    for (int round = 0; round < 300; round++) {
        memcpy(b, good, good_len);
        size_t len = good_len;
        const size_t first = damage(b, &len, &x);
        int intact = 0;
        while (intact < records && first >= h.header_bytes && ends[intact] <= (int64_t)first)
            intact++;
        unlink(f.db);
        mkdir(f.spool, 0755); // (the collector removes it at the end)
        test_write_file(spool, b, len);
        amp_collector_t *c = collector(&f);
        ck_assert_msg(amp_collector_poll(c) == AMP_OK, "round %d: %s", round, amp_last_error());
        amp_collector_stats st;
        amp_collector_get_stats(c, &st);
        ck_assert_msg(st.records >= intact, "round %d: %lld records of the %d before byte %zu",
                      round, (long long)st.records, intact, first);
        finish(c, 0);
        sqlite3 *db;
        char err[AMP_STORE_ERR_MAX], buf[64];
        ck_assert_msg(amp_store_open_readonly(f.db, &db, err) == AMP_OK, "round %d: %s", round,
                      err);
        ck_assert_str_eq(q_text(db, "PRAGMA integrity_check", buf, sizeof buf), "ok");
        ck_assert_int_le(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES"), 1);
        sqlite3_close(db);
    }
    test_stream_back(stderr, saved_stderr);
    free(b);
    free(good);
    fixture_free(&f);
}
END_TEST

// A file in the spool that is no spool file, met first by amp_collector_finish: warned about
// and ignored, and the finish that succeeds leaves no message behind (amp_last_error: "").
START_TEST(test_finish_past_a_foreign_file_leaves_no_error) {
    fixture f;
    fixture_init(&f);
    write_spool(&f, "1-1.spool", 10, 2, NULL, 0);
    char path[256];
    snprintf(path, sizeof path, "%s/2-1.spool", f.spool);
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    for (int i = 0; i < 64; i++) // (a header's length and more, but not a spool's)
        fputs("NOTSPOOL", fp);
    fclose(fp);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_finish(c, 0), AMP_OK);
    ck_assert_str_eq(amp_last_error(), "");
    amp_collector_free(c);
    fixture_free(&f);
}
END_TEST

// The live step time of made-up step times: the subtraction overflowed (undefined in C; in
// practice it wrapped, and a step that ends after it starts took -2 ns).
START_TEST(test_step_time_does_not_overflow) {
    fixture f;
    fixture_init(&f);
    amp_rec_step s = {.step = 1, .start_ns = INT64_MIN + 1, .end_ns = INT64_MAX, .loss = 1};
    uint8_t rec[256];
    size_t len = amp_rec_encode(AMP_REC_STEP, &s, rec, sizeof rec);
    write_spool(&f, "1-1.spool", 4242, 0, rec, len);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.records, 1);
    ck_assert_double_ge(st.last_step_ms, 1.8e13);
    finish(c, 0);
    fixture_free(&f);
}
END_TEST

// A spool header whose pid is no process is refused like a foreign file: pid 0 would put the
// file's META records among the run's own (here a schema version that makes the database
// unreadable), and a negative one has no nsys globalPid.
START_TEST(test_header_pid_not_a_process) {
    fixture f;
    fixture_init(&f);
    amp_rec_meta meta = {"schema_version", "99.0"};
    uint8_t rec[128];
    size_t len = amp_rec_encode(AMP_REC_META, &meta, rec, sizeof rec);
    write_spool(&f, "1-1.spool", 0, 2, rec, len);
    write_spool(&f, "2-1.spool", -5, 2, NULL, 0);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    amp_collector_stats st;
    amp_collector_get_stats(c, &st);
    ck_assert_int_eq(st.warnings, 2);
    ck_assert_int_eq(st.records, 0);
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_PROCESSES"), 0);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 0);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_rows_visible_while_running) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    amp_rec_step s = {.step = 3, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
    amp_record_step(&s);
    ck_assert_int_eq(poll_until(c, f.db, "SELECT step FROM AMP_STEPS", 3), 3);
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'status'", buf, 64), "running");
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES", buf, 64), "running");
    sqlite3_close(db);
    amp_record_stop();
    finish(c, 0);
    fixture_free(&f);
}
END_TEST

// A string that cannot be inserted into StringIds (here a trigger refuses it, as a full disk
// would) fails the poll with SQLite's reason, as any other row does, instead of leaving the
// rows that refer to it pointing at nothing.
START_TEST(test_failed_string_insert_is_reported) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(f.db, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "CREATE TRIGGER refuse BEFORE INSERT ON StringIds BEGIN "
                                  "SELECT RAISE(ABORT, 'no room for strings'); END",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    amp_record_string(&(amp_rec_string){.id = 1, .value = "attention"});
    amp_record_stop();
    ck_assert_int_eq(amp_collector_poll(c), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "no room for strings"));
    // the failure is the run's capture_error though the end of the run could be written (a
    // full disk with room again at the end: the failed write's records are lost all the same)
    ck_assert_int_eq(sqlite3_open(f.db, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "DROP TRIGGER refuse", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    amp_collector_finish(c, 0);
    amp_collector_free(c);
    db = open_ro(f.db);
    char buf[256];
    ck_assert_ptr_nonnull(
        strstr(q_text(db, "SELECT value FROM META WHERE key = 'capture_error'", buf, sizeof buf),
               "the database could not be written"));
    ck_assert_ptr_nonnull(strstr(buf, "no room for strings"));
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// The many-row tables get their rows 64 an INSERT; a commit inserts an unfinished batch's rows
// one by one: each row lands once, in order, with its own values, and is visible while running.
START_TEST(test_batched_rows_land_in_order) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    enum { N = 150 }; // two full batches and part of a third
    for (int i = 0; i < N; i++) {
        amp_record_kernel(&(amp_rec_kernel){.start_ns = 1000 + i,
                                            .end_ns = 2000 + i,
                                            .device_id = 0,
                                            .stream_id = 7,
                                            .green_context_id = -1,
                                            .correlation_id = i,
                                            .name = i % 3 ? "kernel_a" : "kernel_b",
                                            .launch_type = -1,
                                            .cache_config = i % 2 ? 1 : -1,
                                            .grid_x = i % 5 + 1,
                                            .grid_y = 1,
                                            .grid_z = 1,
                                            .block_x = 128,
                                            .block_y = 1,
                                            .block_z = 1,
                                            .shared_memory_executed = -1,
                                            .shared_memory_limit_config = -1,
                                            .graph_node_id = -1});
        amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = i,
                                                        .layer_id = i % 4 ? i % 4 : -1,
                                                        .op = i % 2 ? "add" : NULL,
                                                        .kind = AMP_STATS_ACTIVATION,
                                                        .dtype = "f16",
                                                        .target_dtype = "f16",
                                                        .numel = i,
                                                        .min = i % 7 ? -i : NAN,
                                                        .max = i,
                                                        .amax = i,
                                                        .n_nan = 0,
                                                        .n_posinf = 0,
                                                        .n_neginf = 0,
                                                        .n_overflow = 0,
                                                        .n_underflow = 0,
                                                        .n_zero = i % 3 ? 0 : -1});
    }
    ck_assert_int_eq(poll_until(c, f.db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL", N), N);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS"), N);
    sqlite3_close(db);
    amp_record_stop();
    finish(c, 0);
    db = open_ro(f.db);
    // every row as emitted, in emission order (rowid), none twice
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                        "JOIN StringIds s ON s.id = k.shortName WHERE "
                                        "k.rowid = k.correlationId + 1 AND k.start = 1000 + "
                                        "k.correlationId AND k.gridX = k.correlationId % 5 + 1 "
                                        "AND (k.cacheConfig IS NULL) = (k.correlationId % 2 = 0) "
                                        "AND s.value = CASE WHEN k.correlationId % 3 THEN "
                                        "'kernel_a' ELSE 'kernel_b' END"),
                     N);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS WHERE "
                                        "rowid = step + 1 AND numel = step AND "
                                        "(layer_id IS NULL) = (step % 4 = 0) AND "
                                        "(op IS NULL) = (step % 2 = 0) AND "
                                        "(min IS NULL) = (step % 7 = 0) AND max = step AND "
                                        "(n_zero IS NULL) = (step % 3 = 0)"),
                     N);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// What a live writer's spool holds below the committed offset goes back to the disk (a hole):
// the file keeps its size, its blocks shrink; every row lands once, and the process's end time
// is its last write's, not the time of the collector's last hole.
START_TEST(test_committed_spool_bytes_go_back_to_the_disk) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    enum { N = 40000 }; // about 4 MB of records
    int64_t written = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N / 2; i++)
            amp_record_tensor_stats(&(amp_rec_tensor_stats){.step = round * N / 2 + i,
                                                            .layer_id = i % 8,
                                                            .op = "linear",
                                                            .kind = AMP_STATS_ACTIVATION,
                                                            .dtype = "f16",
                                                            .target_dtype = "f16",
                                                            .numel = 4096,
                                                            .min = -1,
                                                            .max = 1,
                                                            .amax = 1});
        amp_record_flush();
        written = amp_record_now_ns(); // (after the round's last write: flush waited for it)
        if (round) sleep_ms(50); // the hole punched next moves the file's mtime past the write
        ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    }
    DIR *d = opendir(f.spool);
    ck_assert_ptr_nonnull(d);
    struct stat sb = {0};
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".spool")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", f.spool, e->d_name);
        ck_assert_int_eq(stat(path, &sb), 0);
    }
    closedir(d);
    ck_assert_int_gt(sb.st_size, 3 << 20);
    ck_assert_msg(sb.st_blocks * 512 < sb.st_size - (2 << 20), "%lld bytes in %lld blocks",
                  (long long)sb.st_size, (long long)sb.st_blocks);
    amp_record_stop();
    finish(c, 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_TENSOR_STATS"), N);
    ck_assert_int_eq(test_query_int(db, "SELECT count(DISTINCT step) FROM AMP_TENSOR_STATS"), N);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT end_ns <= %lld + 20000000 FROM AMP_PROCESSES",
             (long long)written);
    ck_assert_int_eq(test_query_int(db, sql), 1);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

START_TEST(test_unfinished_writer_at_finish) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK); // this process keeps writing
    amp_rec_step s = {.step = 1, .start_ns = 1, .end_ns = 2, .loss = 1, .grad_norm = NAN};
    amp_record_step(&s);
    amp_record_flush();
    finish(c, 0);
    amp_record_stop();
    sqlite3 *db = open_ro(f.db);
    char buf[64];
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 1);
    ck_assert_str_eq(q_text(db, "SELECT status FROM AMP_PROCESSES", buf, 64), "unfinished");
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Creating and opening databases

START_TEST(test_new_refuses_bad_paths) {
    fixture f;
    fixture_init(&f);
    amp_collector_t *c;
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing", f.dir);
    ck_assert_int_eq(amp_collector_new(f.db, missing, &c), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), missing));
    FILE *fp = fopen(f.db, "w");
    fputs("not empty", fp);
    fclose(fp);
    ck_assert_int_eq(amp_collector_new(f.db, f.spool, &c), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), f.db));
    // NULL: a spool directory of its own next to the database, removed when the run ends
    char db2[160];
    snprintf(db2, sizeof db2, "%s/other.sqlite", f.dir);
    ck_assert_int_eq(amp_collector_new(db2, NULL, &c), AMP_OK);
    char spool[256];
    snprintf(spool, sizeof spool, "%s", amp_collector_spool_dir(c));
    ck_assert_ptr_nonnull(strstr(spool, "/.other.sqlite.spool-"));
    struct stat sb;
    ck_assert_int_eq(stat(spool, &sb), 0);
    finish(c, 0);
    ck_assert_int_ne(stat(spool, &sb), 0);
    fixture_free(&f);
}
END_TEST

START_TEST(test_open_readonly_refusals) {
    fixture f;
    fixture_init(&f);
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX], path[160];
    snprintf(path, sizeof path, "%s/none.sqlite", f.dir);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_IO);
    ck_assert_ptr_null(db);
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_null(strchr(err, '\n'));

    snprintf(path, sizeof path, "%s/text.sqlite", f.dir);
    FILE *fp = fopen(path, "w");
    for (int i = 0; i < 100; i++)
        fputs("this is not a database\n", fp);
    fclose(fp);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "not an ampprobe database"));
    // a name with a newline and a terminal's escape sequence in it: still one plain line
    char odd[160];
    snprintf(odd, sizeof odd, "%s/two\nlines\033[31m.sqlite", f.dir);
    ck_assert_int_eq(rename(path, odd), 0);
    ck_assert_int_eq(amp_store_open_readonly(odd, &db, err), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "/two?lines?[31m.sqlite: not an ampprobe database"));
    for (const char *p = err; *p; p++)
        ck_assert_int_ge((unsigned char)*p, 0x20);

    snprintf(path, sizeof path, "%s/empty.sqlite", f.dir);
    fclose(fopen(path, "w"));
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);

    // a pipe (mkfifo, or <(cat run.sqlite)) is refused at once instead of blocking the read
    snprintf(path, sizeof path, "%s/fifo.sqlite", f.dir);
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_IO);
    ck_assert_msg(strstr(err, "is a pipe, not an ampprobe database"), "%s", err);

    snprintf(path, sizeof path, "%s/foreign.sqlite", f.dir);
    sqlite3 *w;
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "CREATE TABLE t (x); INSERT INTO t VALUES (1)", 0, 0, 0),
                     SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "not an ampprobe database"));

    // marked as ampprobe's but with no tables: a live (or killed) run's main file copied
    // without its -wal, where its tables still are
    snprintf(path, sizeof path, "%s/nowal.sqlite", f.dir);
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "PRAGMA application_id = 1095585872", 0, 0, 0), SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_msg(strstr(err, "whose tables are still in its write-ahead log"), "%s", err);

    // a real run, then the same file from a newer schema, and truncated
    amp_collector_t *c = collector(&f);
    ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
    for (int i = 0; i < 2000; i++) {
        amp_rec_op op = op_rec(i);
        amp_record_op(&op);
    }
    amp_record_stop();
    finish(c, 0);
    db = open_ro(f.db);
    sqlite3_close(db);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/newer.sqlite' && cp '%s' '%s/cut.sqlite'", f.db, f.dir,
             f.db, f.dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/newer.sqlite", f.dir);
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(w, "UPDATE META SET value = '2.0' WHERE key = 'schema_version'", 0, 0, 0),
        SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "newer"));
    ck_assert_ptr_nonnull(strstr(err, "2.0"));
    // a value that is no version: said as it is
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(w, "UPDATE META SET value = 'abc' WHERE key = 'schema_version'", 0, 0, 0),
        SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_msg(strstr(err, "its schema_version 'abc' is not a version"), "%s", err);
    // nor are these (a major past an int read as 1215752191; "1.2.3" and "1e3" as 1.x)
    static const char *const bad[] = {"99999999999.0", "1.2.3", "1e3", "1.", ".1", "-1.0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "UPDATE META SET value = '%s' WHERE key = 'schema_version'",
                 bad[i]);
        ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
        ck_assert_int_eq(sqlite3_exec(w, sql, 0, 0, 0), SQLITE_OK);
        sqlite3_close(w);
        ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
        ck_assert_msg(strstr(err, "is not a version"), "%s: %s", bad[i], err);
    }
    // the same run with its META dropped: its tables are there, only META is not
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "DROP TABLE META", 0, 0, 0), SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_msg(strstr(err, "not an ampprobe database (no META table)"), "%s", err);

    snprintf(path, sizeof path, "%s/cut.sqlite", f.dir);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(truncate(path, sb.st_size / 2), 0);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    ck_assert_int_eq(truncate(path, 50), 0);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);

    // a whole file whose header was overwritten: a page count beyond the file, a page size
    // that is no power of two
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/header.sqlite'", f.db, f.dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/header.sqlite", f.dir);
    FILE *h = fopen(path, "r+b");
    ck_assert_ptr_nonnull(h);
    const unsigned char many[4] = {0x7f, 0xff, 0xff, 0xff};
    ck_assert_int_eq(fseek(h, 28, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(many, 1, 4, h), 4);
    ck_assert_int_eq(fclose(h), 0);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_msg(strstr(err, "header damaged") && strstr(err, "header.sqlite"), "%s", err);
    h = fopen(path, "r+b");
    ck_assert_ptr_nonnull(h);
    const unsigned char size768[2] = {0x03, 0x00};
    ck_assert_int_eq(fseek(h, 16, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(size768, 1, 2, h), 2);
    ck_assert_int_eq(fclose(h), 0);
    ck_assert_int_eq(amp_store_open_readonly(path, &db, err), AMP_ERR_CORRUPT);
    ck_assert_msg(strstr(err, "page size is 768"), "%s", err);
    fixture_free(&f);
}
END_TEST

// A process's AMP_PROCESSES row spans its records. The spool file's mtime comes from the file
// system's coarse clock (set here 3 ms before the last step's end, as a 4 ms tick leaves it), and
// a step begins before its first record creates the spool; an mtime later than every record (a
// writer that went on writing what has no time) is kept.
START_TEST(test_process_row_spans_its_records) {
    static const int64_t mtime_after_last_end_ns[] = {-3000000, 5000000000};
    for (int k = 0; k < 2; k++) {
        fixture f;
        fixture_init(&f);
        amp_collector_t *c = collector(&f);
        const int64_t first_start = amp_record_now_ns() - 1000000; // (before the spool)
        ck_assert_int_eq(amp_record_start(f.spool), AMP_OK);
        int64_t last_end = first_start;
        for (int i = 0; i < 3; i++) {
            amp_rec_step st = {.step = i,
                               .start_ns = last_end,
                               .end_ns = amp_record_now_ns(),
                               .loss = 1,
                               .grad_norm = NAN};
            amp_record_step(&st);
            last_end = st.end_ns;
        }
        amp_record_stop();
        const int64_t mtime = last_end + mtime_after_last_end_ns[k];
        const struct timespec times[2] = {{.tv_nsec = UTIME_OMIT},
                                          {mtime / 1000000000, mtime % 1000000000}};
        DIR *d = opendir(f.spool);
        ck_assert_ptr_nonnull(d);
        int spools = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (!strstr(e->d_name, ".spool")) continue;
            ck_assert_int_eq(utimensat(dirfd(d), e->d_name, times, 0), 0);
            spools++;
        }
        closedir(d);
        ck_assert_int_eq(spools, 1);
        finish(c, 0);
        sqlite3 *db = open_ro(f.db);
        ck_assert_int_eq(test_query_int(db, "SELECT max(end_ns) FROM AMP_STEPS"), last_end);
        ck_assert_int_eq(test_query_int(db, "SELECT end_ns FROM AMP_PROCESSES"),
                         (k == 0 ? last_end : mtime));
        ck_assert_int_eq(test_query_int(db, "SELECT start_ns FROM AMP_PROCESSES"), first_start);
        sqlite3_close(db);
        fixture_free(&f);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// A program on its own: AMPPROBE_OUT, or nothing

// AMPPROBE_OUT's META command is the whole command line (it kept 8191 bytes and 255 words).
START_TEST(test_ampprobe_out_keeps_the_whole_command) {
    fixture f;
    fixture_init(&f);
    char env_out[160], out[64];
    snprintf(env_out, sizeof env_out, "AMPPROBE_OUT=%s", f.db);
    char *env[] = {env_out, NULL};
    enum { WORDS = 300 };
    static char words[WORDS][40];
    char *args[WORDS + 5] = {HELPER, "steps", "2", "0"};
    for (int i = 0; i < WORDS; i++) {
        snprintf(words[i], sizeof words[i], "an-argument-of-thirty-bytes-%03d", i);
        args[4 + i] = words[i];
    }
    ck_assert_int_eq(run_helper(args, env, out, sizeof out), 0);
    sqlite3 *db = open_ro(f.db);
    ck_assert_int_eq(test_query_int(db, "SELECT value LIKE '%-000 %' AND value LIKE '%-299' AND "
                                        "length(value) > 9000 FROM META WHERE key = 'command'"),
                     1);
    sqlite3_close(db);
    fixture_free(&f);
}
END_TEST

// Under AMPPROBE_OUT the first record starts the program's own collector and amp_record_stop
// finishes it, both from calls that return no status: the program's last error stays as it was
// (the collector's calls emptied it).
START_TEST(test_ampprobe_out_leaves_the_programs_error_alone) {
    fixture f;
    fixture_init(&f);
    char env_out[160], out[64];
    snprintf(env_out, sizeof env_out, "AMPPROBE_OUT=%s", f.db);
    char *env[] = {env_out, NULL};
    char *args[] = {HELPER, "error", NULL};
    ck_assert_int_eq(run_helper(args, env, out, sizeof out), 0);
    ck_assert_str_eq(out, "1 1\n");
    fixture_free(&f);
}
END_TEST

// AMPPROBE_OUT: a child forked by the program that outlives it learns that the run has ended
// when the program's collector finishes (it held the collector's locks too, and recorded on).
START_TEST(test_ampprobe_out_child_outliving_the_program_stops) {
    fixture f;
    fixture_init(&f);
    char env_out[160], flag[160];
    snprintf(env_out, sizeof env_out, "AMPPROBE_OUT=%s", f.db);
    snprintf(flag, sizeof flag, "%s/flag", f.dir);
    char *env[] = {env_out, NULL};
    char *args[] = {HELPER, "outlive", flag, NULL};
    pid_t pid = fork(); // (no pipe to read: its child would hold it to its end)
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execve(HELPER, args, env);
        _exit(126);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 400 && access(flag, F_OK) != 0; i++) // (renamed into place, whole)
        sleep_ms(10);
    ck_assert_str_eq(test_slurp(flag), "stopped");
    // and holds nothing of the program's collector: the finished run is no live one
    ck_assert(!amp_collector_db_busy(f.db));
    sleep_ms(1100);
    fixture_free(&f);
}
END_TEST

// AMPPROBE_OUT's database removed while the program records: the program says so at its end (the
// launcher does; a program of its own said nothing).
START_TEST(test_ampprobe_out_removed_database_is_said) {
    fixture f;
    fixture_init(&f);
    char env_out[160], err[160];
    snprintf(env_out, sizeof env_out, "AMPPROBE_OUT=%s", f.db);
    snprintf(err, sizeof err, "%s/err.txt", f.dir);
    char *env[] = {env_out, NULL};
    char *args[] = {HELPER, "steps", "40", "20", NULL};
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 2) < 0) _exit(126);
        execve(HELPER, args, env);
        _exit(127);
    }
    sleep_ms(300);
    ck_assert_int_eq(unlink(f.db), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_msg(strstr(test_slurp(err), "recording stopped short of the run: the database file "
                                          "was removed or replaced"),
                  "%s", test_slurp(err));
    fixture_free(&f);
}
END_TEST

START_TEST(test_ampprobe_out_in_process) {
    fixture f;
    fixture_init(&f);
    char env_out[160], out[64];
    snprintf(env_out, sizeof env_out, "AMPPROBE_OUT=%s", f.db);
    char *env[] = {env_out, NULL};
    char *args[] = {HELPER, "steps", "30", NULL};
    ck_assert_int_eq(run_helper(args, env, out, sizeof out), 0);
    sqlite3 *db = open_ro(f.db);
    char buf[128];
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_STEPS"), 30);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM AMP_OPS"), 30);
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'status'", buf, 128),
                     "complete");
    ck_assert_ptr_nonnull(
        strstr(q_text(db, "SELECT value FROM META WHERE key = 'command'", buf, 128),
               "amp_record_helper steps 30"));
    // (AMPPROBE_TRACE unset: amp, all a program can record without the launcher's capture)
    ck_assert_str_eq(q_text(db, "SELECT value FROM META WHERE key = 'trace'", buf, 128), "amp");
    sqlite3_close(db);
    // nothing left next to it but the database
    DIR *d = opendir(f.dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += e->d_name[0] != '.' || strlen(e->d_name) > 2;
    closedir(d);
    ck_assert_int_eq(entries, 2); // run.sqlite and the fixture's spool/
    // an existing database is never overwritten: the program runs, recording off
    struct stat before, after;
    ck_assert_int_eq(stat(f.db, &before), 0);
    ck_assert_int_eq(run_helper(args, env, out, sizeof out), 0);
    ck_assert_int_eq(stat(f.db, &after), 0);
    ck_assert_int_eq(before.st_mtime, after.st_mtime);
    ck_assert_int_eq(before.st_size, after.st_size);
    fixture_free(&f);
}
END_TEST

START_TEST(test_off_without_environment) {
    char out[64];
    char *env[] = {"PATH=/usr/bin:/bin", NULL};
    char *args[] = {HELPER, "enabled", NULL};
    ck_assert_int_eq(run_helper(args, env, out, sizeof out), 0);
    ck_assert_str_eq(out, "0\n");
    fixture f;
    fixture_init(&f);
    char env_dir[160];
    snprintf(env_dir, sizeof env_dir, "AMPPROBE_SPOOL_DIR=%s", f.spool);
    char *env_on[] = {env_dir, NULL};
    ck_assert_int_eq(run_helper(args, env_on, out, sizeof out), 0);
    ck_assert_str_eq(out, "1\n");
    char env_trace[] = "AMPPROBE_TRACE=cuda";
    char *env_cuda[] = {env_dir, env_trace, NULL};
    ck_assert_int_eq(run_helper(args, env_cuda, out, sizeof out), 0);
    ck_assert_str_eq(out, "0\n"); // recording, but not the amp category
    fixture_free(&f);
}
END_TEST

Suite *collector_suite(void) {
    Suite *s = suite_create("collector");
    TCase *t = tcase_create("tables");
    tcase_add_test(t, test_every_record_type);
    tcase_add_test(t, test_records_of_negative_steps_are_left_out);
    tcase_add_test(t, test_event_storm_is_bounded);
    tcase_add_test(t, test_kernel_short_names);
    tcase_add_test(t, test_repeated_values_land_as_emitted);
    tcase_add_test(t, test_a_step_recorded_twice_is_merged);
    tcase_add_test(t, test_text_is_stored_as_utf8);
    tcase_add_test(t, test_event_count_saturates);
    tcase_add_test(t, test_a_path_too_long_for_sqlite_is_said);
    tcase_add_test(t, test_a_claimed_database_is_busy_from_its_creation);
    tcase_add_test(t, test_process_images_of_one_pid_are_kept_apart);
    tcase_add_test(t, test_event_count_saturates_across_commits);
    tcase_set_timeout(t, 60);
    suite_add_tcase(s, t);
    TCase *w = tcase_create("writers");
    tcase_set_timeout(w, 320); // collect_until_done gives up first, after 300 s
    tcase_add_test(w, test_many_processes);
    tcase_add_test(w, test_recording_started_again_is_one_process);
    tcase_add_test(w, test_a_writer_whose_spool_file_went_stops);
    tcase_add_test(w, test_a_closed_spool_descriptor_stops_recording);
    tcase_add_test(w, test_a_writer_after_the_end_stops);
    tcase_add_test(w, test_spool_keeps_off_a_closed_stdout);
    tcase_add_test(w, test_killed_writer_still_ingested);
    tcase_add_test(w, test_truncated_spool);
    tcase_add_test(w, test_poll_stops_when_its_time_is_up);
    tcase_add_test(w, test_spool_shorter_than_its_header);
    tcase_add_test(w, test_reserve_held_until_the_end);
    tcase_add_test(w, test_corrupt_record_skips_rest);
    tcase_add_test(w, test_damaged_spools_lose_only_what_follows_the_damage);
    tcase_add_test(w, test_finish_past_a_foreign_file_leaves_no_error);
    tcase_add_test(w, test_header_pid_not_a_process);
    tcase_add_test(w, test_step_time_does_not_overflow);
    tcase_add_test(w, test_rows_visible_while_running);
    tcase_add_test(w, test_failed_string_insert_is_reported);
    tcase_add_test(w, test_batched_rows_land_in_order);
    tcase_add_test(w, test_committed_spool_bytes_go_back_to_the_disk);
    tcase_add_test(w, test_unfinished_writer_at_finish);
    tcase_add_test(w, test_process_row_spans_its_records);
    suite_add_tcase(s, w);
    TCase *o = tcase_create("open");
    tcase_set_timeout(o, 60);
    tcase_add_test(o, test_new_refuses_bad_paths);
    tcase_add_test(o, test_open_readonly_refusals);
    tcase_add_test(o, test_ampprobe_out_in_process);
    tcase_add_test(o, test_ampprobe_out_removed_database_is_said);
    tcase_add_test(o, test_ampprobe_out_child_outliving_the_program_stops);
    tcase_add_test(o, test_ampprobe_out_keeps_the_whole_command);
    tcase_add_test(o, test_ampprobe_out_leaves_the_programs_error_alone);
    tcase_add_test(o, test_off_without_environment);
    suite_add_tcase(s, o);
    return s;
}
