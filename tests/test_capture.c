/*
 * test_capture.c — the `capture` suite: CUDA/NVTX capture without a GPU.
 *
 * - The NVTX handler of libampprobe_inject.so under `ampprobe run`, with tests/helpers/
 *   nvtx_prog.c: push/pop (ASCII, attributes, wide), marks, a domain with a registered string,
 *   a start/end range ended on another thread, a pop without a push, a forked child; --trace
 *   decides which injection variables the program gets. The ends: ranges left open by threads
 *   that end, by exit handlers registered before the first NVTX call, by SIGSEGV and abort();
 *   200k ranges open at once; a domain name created twice; a message cut inside a UTF-8
 *   character (and the codec's cut itself), a u64 payload above 2^63, a domain with no name.
 * - With no CUDA driver, InitializeInjection (called as the driver would) returns 1, says that
 *   tracing is disabled and why, and the program finishes with its NVTX ranges recorded.
 * - The CUPTI decoders on hand-filled CUDA 13.0 records, and their records merged into SQLite
 *   through the record stream, with a kernel attributed to the innermost NVTX range around its
 *   launch call (AMP_CAPTURE_KERNEL_RANGES_SQL).
 * - `ampprobe calibrate`'s cache files (ceilings.h).
 */
#include "tests.h"

#include "amp-record.h"
#include "amp-store.h"
#include "ceilings.h"
#include "record-codec.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef AMP_HAVE_CUPTI_CAPTURE
#include "capture.h"
#include "cupti-decode.h"
#endif

#define AMPPROBE AMP_BINARY_DIR "/ampprobe"
#define NVTX_PROG AMP_BINARY_DIR "/tests/amp_nvtx_prog"

// ---------------------------------------------------------------------------------------------
// Helpers

static void setup(void) {
    test_dir_create("capture");
}
static void teardown(void) {
    test_dir_remove();
}

// Runs ampprobe with args in test_dir (stdout, stderr into out.txt, err.txt); its exit code.
static int run(const char *const *args) {
    return test_wait_ampprobe(test_spawn_ampprobe(args));
}

static sqlite3 *open_db(const char *path) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX];
    ck_assert_msg(amp_store_open_readonly(path, &db, err) == AMP_OK, "%s", err);
    return db;
}

static const char *q_text(sqlite3 *db, const char *sql) {
    static char buf[4][512];
    static int next;
    char *out = buf[next++ % 4];
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    ck_assert_msg(sqlite3_step(st) == SQLITE_ROW, "no row: %s", sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, 512, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    return out;
}

// ---------------------------------------------------------------------------------------------
// The NVTX handler under `ampprobe run`

#ifdef AMP_HAVE_NVTX_CAPTURE
START_TEST(test_nvtx_ranges) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--fork", NULL}),
                     0);
    ck_assert_str_eq(test_slurp("out.txt"), "depths 0 1 1 0 -1\n");
    sqlite3 *db = open_db(db_path);
#define PARENT "(SELECT globalTid >> 24 FROM NVTX_EVENTS WHERE text = 'step')"
    // push/pop: every range ended after it started; nesting shows in the times
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "globalTid >> 24 = " PARENT),
                     6);
    ck_assert_int_eq(test_query_int(db,
                                    "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
                                    "AND (end IS NULL OR end < start OR start <= 0)"),
                     0);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS o, NVTX_EVENTS i WHERE "
                           "o.text = 'step' AND i.text = 'layer/op' AND i.start >= o.start "
                           "AND i.end <= o.end AND i.rangeId > o.rangeId"),
        1);
    // attributes
    ck_assert_int_eq(test_query_int(db, "SELECT category FROM NVTX_EVENTS WHERE text = 'layer/op'"),
                     7);
    ck_assert_int_eq(test_query_int(db, "SELECT color FROM NVTX_EVENTS WHERE text = 'layer/op'"),
                     0xFF00FF00);
    ck_assert_int_eq(
        test_query_int(db, "SELECT int64Value FROM NVTX_EVENTS WHERE text = 'layer/op'"), -5);
    ck_assert_int_eq(
        test_query_int(db, "SELECT category IS NULL AND color IS NULL FROM NVTX_EVENTS WHERE "
                           "text = 'step'"),
        1);
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'wide-\xc3\xbc'"), 1);
    // a domain and a registered string
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.textId WHERE n.eventType = 59 AND n.text IS NULL"),
                     "blocks.0/linear");
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.domainId WHERE n.textId IS NOT NULL"),
                     "ampcore");
    ck_assert_close(
        (double)test_query_int(db, "SELECT doubleValue * 10 FROM NVTX_EVENTS WHERE textId IS "
                                   "NOT NULL"),
        25, 0, 0);
    // marks
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND end IS "
                           "NULL AND text IN ('mark-a', 'dmark')"),
        2);
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.domainId WHERE n.text = 'dmark'"),
                     "ampcore");
    // start/end, ended on the worker thread
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60 AND text = "
                           "'async' AND endGlobalTid IS NOT NULL AND endGlobalTid != "
                           "globalTid AND endGlobalTid >> 24 = globalTid >> 24"),
        1);
    // the forked child recorded its own range, and none of the parent's again
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'child' AND "
                                        "globalTid >> 24 != " PARENT
                                        " AND globalTid >> 24 = globalTid & "
                                        "0xFFFFFF"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'step'"), 1);
    // the range open around the fork: the parent's, once, with its end
    ck_assert_int_eq(
        test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = "
                           "'around-fork' AND end IS NOT NULL AND globalTid >> 24 = " PARENT),
        1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 10);
#undef PARENT
    sqlite3_close(db);
}
END_TEST

// Two domains' ranges that overlap without nesting: each pop ends its own domain's innermost
// range (NVTX keeps a stack per domain), and the levels are per domain; ranges open at exit are
// rows with no end.
START_TEST(test_nvtx_domains_and_ranges_open_at_exit) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--domains", NULL}), 0);
    ck_assert_str_eq(test_slurp("out.txt"), "levels 0 0 0 0 -1\n");
    sqlite3 *db = open_db(db_path);
    // d-outer ended by the domain's pop, 20 ms in; x-inner by the default pop, 40 ms later
    ck_assert_int_eq(test_query_int(db, "SELECT (SELECT end FROM NVTX_EVENTS WHERE text = "
                                        "'d-outer') < (SELECT end FROM NVTX_EVENTS WHERE text = "
                                        "'x-inner') - 20000000"),
                     1);
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.domainId WHERE n.text = 'd-outer'"),
                     "other");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE end IS NULL AND "
                                        "((text = 'open-at-exit' AND eventType = 59) OR "
                                        "(text = 'started-at-exit' AND eventType = 60))"),
                     2);
    sqlite3_close(db);
}
END_TEST

// The other forms of the calls: wide strings (UTF-8 in the database, NULL as no text), start/end
// and marks in each form, every payload type in its column, a wide domain and registered string.
START_TEST(test_nvtx_forms) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--forms", NULL}),
                     0);
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "text = '\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x98\x80'"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "text = 'a\xef\xbf\xbd"
                                        "b'"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text IS NULL AND "
                                        "textId IS NULL AND eventType IN (34, 59)"),
                     3); // the two NULL pushes, the NULL mark
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND "
                                        "text = 'mark-w' AND end IS NULL"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60 AND "
                                        "text = 'start-w' AND end >= start"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT uint64Value FROM NVTX_EVENTS WHERE eventType = 60 "
                                        "AND text = 'u64'"),
                     1ll << 40);
    ck_assert_int_eq(test_query_int(db, "SELECT uint32Value FROM NVTX_EVENTS WHERE eventType = 34 "
                                        "AND text = 'u32'"),
                     4000000000ll);
    ck_assert_int_eq(test_query_int(db, "SELECT int32Value FROM NVTX_EVENTS WHERE eventType = 34 "
                                        "AND text = 'i32-\xc3\xa9'"),
                     -7);
    ck_assert_int_eq(test_query_int(db, "SELECT floatValue * 10 FROM NVTX_EVENTS WHERE eventType "
                                        "= 59 AND text = 'f32'"),
                     15);
    // each payload in its own column only
    ck_assert_int_eq(test_query_int(db,
                                    "SELECT count(*) FROM NVTX_EVENTS WHERE (uint64Value IS NOT "
                                    "NULL) + (int64Value IS NOT NULL) + (doubleValue IS NOT "
                                    "NULL) + (uint32Value IS NOT NULL) + (int32Value IS NOT "
                                    "NULL) + (floatValue IS NOT NULL) > 1"),
                     0);
    ck_assert_str_eq(q_text(db, "SELECT s.value || ' in ' || d.value FROM NVTX_EVENTS n JOIN "
                                "StringIds s ON s.id = n.textId JOIN StringIds d ON d.id = "
                                "n.domainId WHERE n.eventType = 60"),
                     "reg-w in dom-\xc3\xa9");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 12);
    sqlite3_close(db);
}
END_TEST

// Threads that end with ranges open (one of them also in a domain): each range a row with no end,
// and nothing of theirs left on the heap (2000 threads leaving a 4 KiB message each: 12 MB when
// their stacks leaked; under AddressSanitizer a leak also fails the program's exit).
START_TEST(test_nvtx_thread_exit) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--thread-exit", NULL}), 0);
    long long grew_kib = -1;
    ck_assert_int_eq(sscanf(test_slurp("out.txt"), "grew %lld KiB", &grew_kib), 1);
    ck_assert_int_lt(grew_kib, 1024);
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "end IS NULL AND length(text) = 4095 AND domainId IS NULL"),
                     2000);
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.domainId WHERE n.text = 'thread-open-in-domain' AND n.end IS "
                                "NULL"),
                     "threads");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'warm-up' "
                                        "AND end IS NOT NULL"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 2002);
    sqlite3_close(db);
}
END_TEST

// An exit handler the program registered before its first NVTX call (before the handler was
// loaded) still records: it runs before the recording ends, and ends the range main left open.
START_TEST(test_nvtx_in_exit_handler) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--at-exit", NULL}), 0);
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "text = 'whole-run' AND end >= start"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND "
                                        "text = 'shutdown' AND start >= (SELECT end FROM "
                                        "NVTX_EVENTS WHERE text = 'whole-run')"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 2);
    sqlite3_close(db);
}
END_TEST

// A program that dies of SIGSEGV or abort() inside ranges: they are rows with no end, the
// push/pop ones and the start/end one, as at an exit.
START_TEST(test_nvtx_crash) {
    static const char *const how[] = {"segv", "abort"};
    static const int sig[] = {SIGSEGV, SIGABRT};
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s.sqlite", how[i]);
        const char *db_path = test_in_dir(name);
        ck_assert_int_eq(
            run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--crash", how[i], NULL}),
            128 + sig[i]);
        sqlite3 *db = open_db(db_path);
        ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE end IS NULL "
                                            "AND ((eventType = 59 AND text IN ('outer', "
                                            "'crashing')) OR (eventType = 60 AND text = "
                                            "'started'))"),
                         3);
        ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 3);
        sqlite3_close(db);
    }
}
END_TEST

// 200k start/end ranges open at once, ended oldest first on 8 threads, and push/pop ranges
// nested 200k deep: each call costs the same at any count (scanning the open ranges made this
// take over a minute), and every range is a row with its end.
START_TEST(test_nvtx_many_ranges) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--many", "200000", NULL}), 0);
    ck_assert_str_eq(test_slurp("out.txt"), "deepest 199999 last 0\n");
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 60 AND "
                                        "end >= start AND endGlobalTid IS NULL"),
                     200000);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "end >= start"),
                     200000);
    ck_assert_int_eq(test_query_int(db, "SELECT count(DISTINCT rangeId) FROM NVTX_EVENTS"), 400000);
    sqlite3_close(db);
}
END_TEST

// A domain is named by a unique string: creating "shared" again (or as a wide string) gives the
// same handle, so a pop through one ends the range pushed through the other, and destroying one
// handle leaves the others working.
START_TEST(test_nvtx_domain_by_name) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--shared-domain", NULL}), 0);
    ck_assert_str_eq(test_slurp("out.txt"), "same 1 1 levels 0 1 0\n");
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON "
                                        "s.id = n.domainId WHERE s.value = 'shared' AND "
                                        "n.eventType = 59 AND n.end >= n.start"),
                     2);
    ck_assert_int_eq(test_query_int(db, "SELECT (SELECT end FROM NVTX_EVENTS WHERE text = "
                                        "'pushed-in-w') <= (SELECT end FROM NVTX_EVENTS WHERE "
                                        "text = 'pushed-in-a')"),
                     1);
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = "
                                "n.domainId WHERE n.text = 'after-destroy'"),
                     "shared");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 3);
    sqlite3_close(db);
}
END_TEST

// A u64 payload of 2^63 or more is stored with its bits, as SQLite's signed integer (SCHEMA.md):
// it reads back right as a uint64_t. A domain created with no name is the default domain.
START_TEST(test_nvtx_edge_values) {
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--edge-values", NULL}), 0);
    sqlite3 *db = open_db(db_path);
    ck_assert_uint_eq((uint64_t)test_query_int(db, "SELECT uint64Value FROM NVTX_EVENTS WHERE "
                                                   "text = 'u64-high'"),
                      (1ull << 63) + 5);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE text = "
                                        "'in-unnamed' AND domainId IS NULL"),
                     1);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM StringIds WHERE value = ''"), 0);
    sqlite3_close(db);
}
END_TEST

// --trace decides which injection variables the program sees.
START_TEST(test_trace_sets_injection) {
    ck_assert_int_eq(run((const char *[]){"run", "-o", test_in_dir("a.sqlite"), "--", "env", NULL}),
                     0);
    const char *out = test_slurp("out.txt");
    // beside the ampprobe binary, as the system names it (a build folder reached through a link
    // resolves to where the files are)
    char dir[PATH_MAX], want[PATH_MAX + 64];
    ck_assert_ptr_nonnull(realpath(AMP_BINARY_DIR, dir));
    snprintf(want, sizeof want, "CUDA_INJECTION64_PATH=%s/libampprobe_inject.so\n", dir);
    ck_assert_msg(strstr(out, want), "no %s in:\n%s", want, out);
    snprintf(want, sizeof want, "NVTX_INJECTION64_PATH=%s/libampprobe_inject.so\n", dir);
    ck_assert_msg(strstr(out, want), "no %s in:\n%s", want, out);
    ck_assert_int_eq(run((const char *[]){"run", "-o", test_in_dir("b.sqlite"), "--trace",
                                          "amp,nvtx", "--", "env", NULL}),
                     0);
    out = test_slurp("out.txt");
    ck_assert_ptr_null(strstr(out, "CUDA_INJECTION64_PATH="));
    ck_assert_ptr_nonnull(strstr(out, "NVTX_INJECTION64_PATH="));
    ck_assert_int_eq(run((const char *[]){"run", "-o", test_in_dir("c.sqlite"), "--trace", "amp",
                                          "--", NVTX_PROG, NULL}),
                     0);
    sqlite3 *db = open_db(test_in_dir("c.sqlite"));
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 0);
    sqlite3_close(db);
}
END_TEST
#endif

// A string longer than a record keeps is cut before the UTF-8 character that does not fit
// whole: in the codec (a 2-, 3- and 4-byte character across the limit), and an NVTX message.
START_TEST(test_long_text_cut_whole_characters) {
    static const char *const tail[] = {"\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80"};
    static char str[AMP_REC_STR_MAX + 8];
    static uint8_t buf[AMP_REC_STR_MAX + 64];
    for (int t = 0; t < 3; t++) {
        for (size_t keep = AMP_REC_STR_MAX - strlen(tail[t]) + 1; keep < AMP_REC_STR_MAX; keep++) {
            memset(str, 'a', keep); // the character starts at keep: cut at its first byte
            strcpy(str + keep, tail[t]);
            size_t n = amp_rec_encode(AMP_REC_META, &(amp_rec_meta){.key = "k", .value = str}, buf,
                                      sizeof buf);
            amp_rec_header h;
            const uint8_t *payload;
            ck_assert_int_eq(amp_rec_scan(buf, n, &h, &payload), AMP_SCAN_RECORD);
            amp_rec_any r;
            ck_assert(amp_rec_decode(h.type, payload, h.length, &r));
            ck_assert_uint_eq(strlen(r.meta.value), keep);
        }
    }
    memset(str, 'a', AMP_REC_STR_MAX); // exactly the limit: kept whole
    str[AMP_REC_STR_MAX] = 0;
    size_t n =
        amp_rec_encode(AMP_REC_META, &(amp_rec_meta){.key = "k", .value = str}, buf, sizeof buf);
    amp_rec_header h;
    const uint8_t *payload;
    amp_rec_any r;
    ck_assert_int_eq(amp_rec_scan(buf, n, &h, &payload), AMP_SCAN_RECORD);
    ck_assert(amp_rec_decode(h.type, payload, h.length, &r));
    ck_assert_uint_eq(strlen(r.meta.value), AMP_REC_STR_MAX);
#ifdef AMP_HAVE_NVTX_CAPTURE
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--edge-values", NULL}), 0);
    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND "
                                        "CAST(text AS BLOB) = CAST(printf('%.65534c', 'a') AS "
                                        "BLOB)"),
                     1);
    sqlite3_close(db);
#endif
}
END_TEST

#if defined(AMP_HAVE_NVTX_CAPTURE) && defined(AMP_HAVE_CUPTI_CAPTURE)
// As the CUDA driver would: on this machine there is none, so CUPTI cannot subscribe.
START_TEST(test_no_driver) {
    struct stat sb;
    if (stat("/dev/nvidiactl", &sb) == 0) return; // a GPU machine: the driver is there
    const char *db_path = test_in_dir("run.sqlite");
    ck_assert_int_eq(
        run((const char *[]){"run", "-o", db_path, "--", NVTX_PROG, "--cuda-init", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(test_slurp("out.txt"), "InitializeInjection 1\n"));
    ck_assert_ptr_nonnull(strstr(test_slurp("err.txt"), "ampprobe: CUDA tracing disabled: "));
    sqlite3 *db = open_db(db_path);
    ck_assert_ptr_nonnull(
        strstr(q_text(db, "SELECT value FROM META WHERE key = 'cuda_capture'"), "failed"));
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM NVTX_EVENTS"), 8);
    sqlite3_close(db);
}
END_TEST
#endif

// ---------------------------------------------------------------------------------------------
// The CUPTI decoders

#ifdef AMP_HAVE_CUPTI_CAPTURE
static CUpti_ActivityKernel10 sample_kernel(void) {
    CUpti_ActivityKernel10 k = {
        .kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        .registersPerThread = 168,
        .start = 1700000000000001000ull,
        .end = 1700000000000176000ull,
        .deviceId = 0,
        .contextId = 1,
        .streamId = 7,
        .gridX = 2,
        .gridY = 66,
        .gridZ = 1,
        .blockX = 384,
        .blockY = 1,
        .blockZ = 1,
        .staticSharedMemory = 16,
        .dynamicSharedMemory = 213188,
        .localMemoryPerThread = 8,
        .correlationId = 42,
        .gridId = 99,
        .name = "_Z6kernelPf",
        .launchType = 0,
        .sharedMemoryExecuted = 233472,
        .localMemoryTotal_v2 = 1u << 20,
    };
    k.cacheConfig.config.requested = 1;
    return k;
}

// Kernel names: demangled once each (the same string back for the same name), left alone when
// not mangled or not valid, and kept as the table grows.
START_TEST(test_kernel_names) {
    const char *add = amp_capture_demangle("_Z10add_kernelPfS_i");
    ck_assert_str_eq(add, "add_kernel(float*, float*, int)");
    ck_assert_ptr_eq(amp_capture_demangle("_Z10add_kernelPfS_i"), add);
    ck_assert_ptr_null(amp_capture_demangle("add_kernel"));
    ck_assert_ptr_null(amp_capture_demangle("_Z99broken"));
    char name[32], want[32];
    for (int i = 0; i < 1000; i++) { // several times the table's first size
        snprintf(name, sizeof name, "_Z5k%04dv", i);
        snprintf(want, sizeof want, "k%04d()", i);
        const char *got = amp_capture_demangle(name);
        ck_assert_msg(got && strcmp(got, want) == 0, "%s: %s", name, got ? got : "(null)");
    }
    ck_assert_ptr_eq(amp_capture_demangle("_Z10add_kernelPfS_i"), add);
    ck_assert_str_eq(amp_capture_demangle("_Z5k0007v"), "k0007()");
}
END_TEST

START_TEST(test_decode_kernel) {
    CUpti_ActivityKernel10 k = sample_kernel();
    amp_rec_kernel r;
    ck_assert(amp_capture_decode_kernel(&k, &r));
    ck_assert_int_eq(r.start_ns, 1700000000000001000ll);
    ck_assert_int_eq(r.end_ns - r.start_ns, 175000);
    ck_assert_int_eq(r.stream_id, 7);
    ck_assert_int_eq(r.correlation_id, 42);
    ck_assert_str_eq(r.name, "_Z6kernelPf");
    ck_assert_ptr_null(r.demangled);
    ck_assert_int_eq(r.grid_y, 66);
    ck_assert_int_eq(r.block_x, 384);
    ck_assert_int_eq(r.registers_per_thread, 168);
    ck_assert_int_eq(r.dynamic_shared_memory, 213188);
    ck_assert_int_eq(r.local_memory_total, 1 << 20);
    ck_assert_int_eq(r.cache_config, 1);
    ck_assert_int_eq(r.shared_memory_executed, 233472);
    ck_assert_int_eq(r.graph_node_id, -1); // 0: not a graph launch
    ck_assert_int_eq(r.green_context_id, -1);
    k.graphNodeId = 5;
    ck_assert(amp_capture_decode_kernel(&k, &r));
    ck_assert_int_eq(r.graph_node_id, 5);
    // unfinished at a forced flush
    k.start = k.end = 0;
    ck_assert(!amp_capture_decode_kernel(&k, &r));
    k.start = 10;
    k.end = 5;
    ck_assert(!amp_capture_decode_kernel(&k, &r));
}
END_TEST

START_TEST(test_decode_copies_and_api) {
    CUpti_ActivityMemcpy6 m = {.kind = CUPTI_ACTIVITY_KIND_MEMCPY,
                               .copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD,
                               .srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
                               .dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                               .bytes = 4 << 20,
                               .start = 1000,
                               .end = 3000,
                               .streamId = 3,
                               .correlationId = 11};
    amp_rec_memcpy rm;
    ck_assert(amp_capture_decode_memcpy(&m, &rm));
    ck_assert_int_eq(rm.bytes, 4 << 20);
    ck_assert_int_eq(rm.copy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    ck_assert_int_eq(rm.src_kind, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE);
    ck_assert_int_eq(rm.dst_kind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    ck_assert_int_eq(rm.src_device_id, -1);
    ck_assert_int_eq(rm.correlation_id, 11);

    CUpti_ActivityMemset4 s = {.kind = CUPTI_ACTIVITY_KIND_MEMSET,
                               .value = 0xAB,
                               .bytes = 512,
                               .start = 10,
                               .end = 20,
                               .memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE};
    amp_rec_memset rs;
    ck_assert(amp_capture_decode_memset(&s, &rs));
    ck_assert_int_eq(rs.value, 0xAB);
    ck_assert_int_eq(rs.mem_kind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);

    CUpti_ActivityAPI a = {.kind = CUPTI_ACTIVITY_KIND_DRIVER,
                           .cbid = 307,
                           .start = 500,
                           .end = 900,
                           .threadId = 4321,
                           .correlationId = 42,
                           .returnValue = 0};
    amp_rec_runtime ra;
    ck_assert(amp_capture_decode_api(&a, "cuLaunchKernel", &ra));
    ck_assert(ra.driver);
    ck_assert_int_eq(ra.tid, 4321);
    ck_assert_str_eq(ra.name, "cuLaunchKernel");
    a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    ck_assert(amp_capture_decode_api(&a, NULL, &ra));
    ck_assert(!ra.driver);

    CUpti_ActivitySynchronization2 y = {.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                        .type =
                                            CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE,
                                        .start = 100,
                                        .end = 200,
                                        .correlationId = 8,
                                        .contextId = 1,
                                        .streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE,
                                        .cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE};
    amp_rec_sync ry;
    ck_assert(amp_capture_decode_sync(&y, &ry));
    ck_assert_int_eq(ry.sync_type, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);
    ck_assert_int_eq(ry.stream_id, -1);
    ck_assert_int_eq(ry.event_id, -1);
    ck_assert_int_eq(ry.context_id, 1);
}
END_TEST

static CUpti_ActivityDevice5 sample_device(void) {
    CUpti_ActivityDevice5 d = {.kind = CUPTI_ACTIVITY_KIND_DEVICE,
                               .globalMemoryBandwidth = 4800000000ull, // KB/s
                               .globalMemorySize = 150754820096ull,
                               .l2CacheSize = 62914560,
                               .numThreadsPerWarp = 32,
                               .coreClockRate = 1980000, // kHz
                               .numMemcpyEngines = 7,
                               .numMultiprocessors = 132,
                               .maxWarpsPerMultiprocessor = 64,
                               .maxBlocksPerMultiprocessor = 32,
                               .maxSharedMemoryPerMultiprocessor = 233472,
                               .maxRegistersPerMultiprocessor = 65536,
                               .maxRegistersPerBlock = 65536,
                               .maxSharedMemoryPerBlock = 49152,
                               .maxThreadsPerBlock = 1024,
                               .computeCapabilityMajor = 9,
                               .computeCapabilityMinor = 0,
                               .id = 0,
                               .name = "NVIDIA H200"};
    for (int i = 0; i < 16; i++)
        d.uuid.bytes[i] = (char)(0x10 + i);
    return d;
}

START_TEST(test_decode_device) {
    CUpti_ActivityDevice5 d = sample_device();
    char uuid[AMP_CAPTURE_UUID_LEN];
    amp_rec_gpu_info g;
    amp_capture_decode_device(&d, uuid, &g);
    ck_assert_str_eq(g.name, "NVIDIA H200");
    ck_assert_str_eq(g.uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    ck_assert_int_eq(g.sm_count, 132);
    ck_assert_int_eq(g.memory_bandwidth, 4800000000000ll);
    ck_assert_int_eq(g.clock_rate, 1980000000ll);
    ck_assert_int_eq(g.compute_major, 9);
    ck_assert_int_eq(g.max_shmem_per_block_optin, -1);
    ck_assert_int_eq(g.async_engines, 7);
}
END_TEST

static const char *test_api_name(bool driver, uint32_t cbid) {
    return driver && cbid == 307 ? "cuLaunchKernel" : NULL;
}
static const char *test_demangle(const char *mangled) {
    return strcmp(mangled, "_Z6kernelPf") == 0 ? "kernel(float*)" : NULL;
}

// Records through amp_capture_emit into a database; the kernel is attributed to the innermost
// NVTX range of the launching thread.
START_TEST(test_emit_merge_attribution) {
    char spool[128], db_path[128];
    snprintf(spool, sizeof spool, "%s/spool", test_dir);
    snprintf(db_path, sizeof db_path, "%s/run.sqlite", test_dir);
    ck_assert_int_eq(mkdir(spool, 0755), 0);
    amp_collector_t *c;
    ck_assert_msg(amp_collector_new(db_path, spool, &c) == AMP_OK, "%s", amp_last_error());
    ck_assert_int_eq(amp_record_start(spool), AMP_OK);

    // the layer's range, an inner op range on the same thread, an unrelated one on another
    const int64_t t0 = 1700000000000000000ll;
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = t0,
                                    .end_ns = t0 + 10000,
                                    .type = AMP_NVTX_PUSH_POP,
                                    .range_id = 1,
                                    .category = -1,
                                    .color = -1,
                                    .text = "blocks.0",
                                    .tid = 4321,
                                    .end_tid = -1});
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = t0 + 100,
                                    .end_ns = t0 + 900,
                                    .type = AMP_NVTX_PUSH_POP,
                                    .range_id = 2,
                                    .category = -1,
                                    .color = -1,
                                    .text = "blocks.0/linear",
                                    .tid = 4321,
                                    .end_tid = -1});
    amp_record_nvtx(&(amp_rec_nvtx){.start_ns = t0,
                                    .end_ns = t0 + 10000,
                                    .type = AMP_NVTX_PUSH_POP,
                                    .range_id = 3,
                                    .category = -1,
                                    .color = -1,
                                    .text = "other thread",
                                    .tid = 9999,
                                    .end_tid = -1});

    amp_capture_names names = {.api_name = test_api_name, .demangle = test_demangle};
    amp_capture_stats st = {0};
    CUpti_ActivityAPI a = {.kind = CUPTI_ACTIVITY_KIND_DRIVER,
                           .cbid = 307,
                           .start = t0 + 200,
                           .end = t0 + 300,
                           .threadId = 4321,
                           .correlationId = 42};
    CUpti_ActivityKernel10 k = sample_kernel();
    k.start = t0 + 400;
    k.end = t0 + 5000;
    CUpti_ActivityKernel10 unfinished = sample_kernel();
    unfinished.start = unfinished.end = 0;
    CUpti_ActivityDevice5 d = sample_device();
    CUpti_ActivityOverhead3 o = {
        .kind = CUPTI_ACTIVITY_KIND_OVERHEAD, .start = t0, .end = t0 + 700};
    CUpti_ActivityExternalCorrelation x = {.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
    amp_capture_emit((CUpti_Activity *)&a, &names, &st);
    amp_capture_emit((CUpti_Activity *)&k, &names, &st);
    amp_capture_emit((CUpti_Activity *)&unfinished, &names, &st);
    amp_capture_emit((CUpti_Activity *)&d, &names, &st);
    amp_capture_emit((CUpti_Activity *)&o, &names, &st);
    amp_capture_emit((CUpti_Activity *)&x, &names, &st);
    ck_assert_int_eq(st.kernels, 1);
    ck_assert_int_eq(st.api_calls, 1);
    ck_assert_int_eq(st.devices, 1);
    ck_assert_int_eq(st.incomplete, 1);
    ck_assert_int_eq(st.overhead_records, 1);
    ck_assert_int_eq(st.overhead_ns, 700);
    ck_assert_int_eq(st.other, 1);

    amp_record_stop();
    ck_assert_int_eq(amp_collector_poll(c), AMP_OK);
    ck_assert_msg(amp_collector_finish(c, 0) == AMP_OK, "%s", amp_last_error());
    amp_collector_free(c);

    sqlite3 *db = open_db(db_path);
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 1);
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds "
                                "s ON s.id = k.demangledName"),
                     "kernel(float*)");
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds "
                                "s ON s.id = k.mangledName"),
                     "_Z6kernelPf");
    ck_assert_str_eq(q_text(db, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds "
                                "s ON s.id = r.nameId"),
                     "cuLaunchKernel");
    ck_assert_int_eq(test_query_int(db, "SELECT eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME"), 1);
    ck_assert_str_eq(q_text(db, "SELECT name FROM TARGET_INFO_GPU"), "NVIDIA H200");
    ck_assert_int_eq(test_query_int(db, "SELECT smCount FROM TARGET_INFO_GPU"), 132);
    ck_assert_str_eq(q_text(db, "SELECT n.text FROM (" AMP_CAPTURE_KERNEL_RANGES_SQL ") a "
                                "JOIN NVTX_EVENTS n ON n.rowid = a.range"),
                     "blocks.0/linear");
    ck_assert_int_eq(test_query_int(db, "SELECT count(*) FROM (" AMP_CAPTURE_KERNEL_RANGES_SQL
                                        ") a JOIN "
                                        "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.rowid = a.api AND "
                                        "r.correlationId = 42"),
                     1);
    sqlite3_close(db);
    // a range the program never ended (end NULL) still holds the launches inside it
    ck_assert_int_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "UPDATE NVTX_EVENTS SET end = NULL WHERE start = "
                                  "1700000000000000100",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_changes(db), 1);
    ck_assert_str_eq(q_text(db, "SELECT n.text FROM (" AMP_CAPTURE_KERNEL_RANGES_SQL ") a "
                                "JOIN NVTX_EVENTS n ON n.rowid = a.range"),
                     "blocks.0/linear");
    sqlite3_close(db);
}
END_TEST

// --counters samples metrics by name: each must be a PM-sampling metric of the H200's chip (a
// misspelt one would make the whole configuration fail on the GPU). CUPTI's host API answers
// without a GPU, but not under AddressSanitizer: it dlopen()s libnvperf_host.so with
// RTLD_DEEPBIND, which the sanitizer runtime refuses (google/sanitizers#611). (gcc says ASan by
// __SANITIZE_ADDRESS__, clang by __has_feature.)
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
START_TEST(test_counter_metrics_exist) {
    const char *bad = NULL;
    int r = amp_counters_check_chip("GH100", &bad);
    ck_assert_msg(r == 0, "CUPTI error %d for %s", r, bad ? bad : "(host initialisation)");
    ck_assert_int_ne(amp_counters_check_chip("NO_SUCH_CHIP", &bad), 0);
}
END_TEST
#endif
#endif

// ---------------------------------------------------------------------------------------------
// `ampprobe calibrate`'s cache

START_TEST(test_ceilings_cache) {
    setenv("XDG_CACHE_HOME", test_dir, 1);
    char path[256];
    ck_assert(amp_ceilings_path("NVIDIA H200", path, sizeof path));
    char want[256];
    snprintf(want, sizeof want, "%s/ampprobe/ceilings-NVIDIA_H200.txt", test_dir);
    ck_assert_str_eq(path, want);
    amp_ceilings c;
    ck_assert(!amp_ceilings_load("NVIDIA H200", &c));
    ck_assert(isnan(c.gemm_flops_bf16));
    ck_assert_int_eq(mkdir(test_in_dir("ampprobe"), 0755), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("gpu NVIDIA H200\nsm_count 132\ndram_bytes_per_s 4.3e+12\ngemm_flops_bf16 7.9e+14\n"
          "gemm_flops_f32 oops\ngemm_flops_f16 inf\ngemm_flops_tf32 1e999\n",
          f);
    fclose(f);
    ck_assert(amp_ceilings_load("NVIDIA H200", &c));
    ck_assert_close(c.dram_bytes_per_s, 4.3e12, 0, 1e-12);
    ck_assert_close(c.gemm_flops_bf16, 7.9e14, 0, 1e-12);
    ck_assert(isnan(c.gemm_flops_f16));
    ck_assert(isnan(c.gemm_flops_f32));  // not a number: absent
    ck_assert(isnan(c.gemm_flops_tf32)); // nor is an infinite ceiling (f16's too)
    ck_assert_int_eq(run((const char *[]){"calibrate", "--bogus", NULL}), 2);
    ck_assert_int_eq(run((const char *[]){"calibrate", "--help", NULL}), 0);
    struct stat sb;
    if (stat("/dev/nvidiactl", &sb) != 0) { // no GPU here: one line that says so, exit status 1
        ck_assert_int_eq(run((const char *[]){"calibrate", NULL}), 1);
        const char *err = test_slurp("err.txt");
        ck_assert_msg(strstr(err, "ampprobe calibrate: no GPU to measure (") ||
                          strstr(err, "ampprobe calibrate: ampprobe-calibrate is not installed"),
                      "%s", err);
        ck_assert_ptr_null(strchr(strchr(err, '\n') + 1, '\n')); // one line
    }
    unsetenv("XDG_CACHE_HOME");
}
END_TEST

Suite *capture_suite(void) {
    Suite *s = suite_create("capture");
    TCase *tc = tcase_create("capture");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
#ifdef AMP_HAVE_NVTX_CAPTURE
    tcase_add_test(tc, test_nvtx_ranges);
    tcase_add_test(tc, test_nvtx_forms);
    tcase_add_test(tc, test_nvtx_domains_and_ranges_open_at_exit);
    tcase_add_test(tc, test_trace_sets_injection);
    tcase_add_test(tc, test_nvtx_thread_exit);
    tcase_add_test(tc, test_nvtx_in_exit_handler);
    tcase_add_test(tc, test_nvtx_crash);
    tcase_add_test(tc, test_nvtx_many_ranges);
    tcase_add_test(tc, test_nvtx_domain_by_name);
    tcase_add_test(tc, test_nvtx_edge_values);
#endif
    tcase_add_test(tc, test_long_text_cut_whole_characters);
#if defined(AMP_HAVE_NVTX_CAPTURE) && defined(AMP_HAVE_CUPTI_CAPTURE)
    tcase_add_test(tc, test_no_driver);
#endif
#ifdef AMP_HAVE_CUPTI_CAPTURE
    tcase_add_test(tc, test_kernel_names);
    tcase_add_test(tc, test_decode_kernel);
    tcase_add_test(tc, test_decode_copies_and_api);
    tcase_add_test(tc, test_decode_device);
    tcase_add_test(tc, test_emit_merge_attribution);
#ifndef UNDER_ASAN
    tcase_add_test(tc, test_counter_metrics_exist);
#endif
#endif
    tcase_add_test(tc, test_ceilings_cache);
    suite_add_tcase(s, tc);
    return s;
}
