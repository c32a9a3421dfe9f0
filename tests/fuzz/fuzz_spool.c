/*
 * fuzz_spool.c — a libFuzzer target: the collector ingests one spool file whose records are the
 * input (after a valid spool header), then the database it made is read as the suites read any
 * run's (tests/readers.c): the report in every format and as a diff, the TUI's every view. What a
 * crashed, truncated or foreign writer can leave in a spool directory must crash neither the
 * launcher's collector nor what reads its database afterwards.
 *
 * Built and run by tests/fuzz/run.sh (clang, -DAMP_FUZZ=ON) from the seeds in
 * tests/fuzz/seeds/spool: the records of short runs of the samples and test helpers
 * (tests/fuzz/make_seeds.sh).
 */
#include "tests.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "record-codec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], spool[96], db[96], file[128];

// The database's files left by the last input, and the spool file if the collector kept it.
static void clean(void) {
    const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    char path[128];
    for (size_t k = 0; k < sizeof suffix / sizeof *suffix; k++) {
        snprintf(path, sizeof path, "%s%s", db, suffix[k]);
        unlink(path);
    }
    unlink(file);
}

START_TEST(read_the_database) {
    test_read_or_refuse(db);
}
END_TEST

// The readers' checks run as a Check test in this process (their asserts need a runner): a
// failed one aborts, with its message, so that libFuzzer keeps the input. Run it with -timeout=0
// (tests/fuzz/run.sh does): the runner puts in its own SIGALRM handler while it runs, which in
// this mode (no fork, no child) kills the whole process group, and libFuzzer's -timeout ticks
// with SIGALRM.
static void read_as_the_suites_do(void) {
    Suite *s = suite_create("fuzz_spool");
    TCase *tc = tcase_create("readers");
    tcase_add_test(tc, read_the_database);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_SILENT);
    if (srunner_ntests_failed(r) > 0) {
        TestResult **failed = srunner_failures(r);
        fprintf(stderr, "fuzz_spool: %s:%d: %s\n", tr_lfile(failed[0]), tr_lno(failed[0]),
                tr_msg(failed[0]));
        abort();
    }
    srunner_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        struct stat st; // in memory where there is /dev/shm: SQLite's syncs then cost nothing
        const bool shm = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
        if (!amp_make_temp_dir(dir, sizeof dir, shm ? "/dev/shm/amp-fuzz-" : "/tmp/amp-fuzz-"))
            abort();
        snprintf(spool, sizeof spool, "%s/spool", dir);
        snprintf(db, sizeof db, "%s/run.sqlite", dir);
        snprintf(file, sizeof file, "%s/4242-1.spool", spool);
    }
    clean();
    if (mkdir(spool, 0755) != 0 && errno != EEXIST) abort(); // (the collector's finish removes it)
    FILE *f = fopen(file, "wb");
    if (!f) abort();
    amp_spool_header h;
    amp_spool_header_init(&h, 4242, 1, 1000, "fuzz");
    fwrite(&h, sizeof h, 1, f);
    fwrite(data, 1, size, f);
    fclose(f);
    amp_collector_t *c;
    if (amp_collector_new(db, spool, &c) != AMP_OK) { // (not the input's doing)
        fprintf(stderr, "fuzz_spool: %s\n", amp_last_error());
        abort();
    }
    amp_collector_poll(c);
    amp_collector_finish(c, 0);
    amp_collector_free(c);
    read_as_the_suites_do();
    return 0;
}
