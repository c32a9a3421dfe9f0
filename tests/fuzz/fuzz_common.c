/*
 * fuzz_common.c — what the libFuzzer targets of tests/fuzz share (fuzz.h).
 */
#include "fuzz.h"

#include "tests.h"

#include "amp-impl.h"
#include "amp-store.h"
#include "record-codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static char made[64]; // the directory fuzz_temp_dir made (one a target), removed at exit

static void remove_made(void) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", made);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", made);
}

void fuzz_temp_dir(char dir[64], const char *name) {
    struct stat st;
    const bool shm = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode);
    char prefix[48];
    snprintf(prefix, sizeof prefix, "%s/amp-fuzz-%s-", shm ? "/dev/shm" : "/tmp", name);
    if (made[0] || !amp_make_temp_dir(dir, 64, prefix)) abort();
    snprintf(made, sizeof made, "%s", dir);
    atexit(remove_made);
}

// Writes the records of seed (a file of tests/fuzz/seeds/spool, less fuzz_spool's three layout
// bytes) as process pid's spool file in the directory spool, behind a valid header.
static void spool_seed(const char *spool, const char *seed, int32_t pid) {
    char in[512], out[160];
    snprintf(in, sizeof in, "%s/tests/fuzz/seeds/spool/%s", AMP_SOURCE_DIR, seed);
    snprintf(out, sizeof out, "%s/%d-1.spool", spool, (int)pid);
    FILE *f = fopen(in, "rb"), *g = fopen(out, "wb");
    if (!f || !g) abort();
    amp_spool_header h;
    amp_spool_header_init(&h, pid, 1, 1000, seed);
    fwrite(&h, sizeof h, 1, g);
    if (fseek(f, 3, SEEK_SET) != 0) abort(); // (fuzz_spool's layout bytes)
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, g);
    fclose(f);
    if (fclose(g) != 0) abort();
}

void fuzz_make_run(const char *name, char dir[64], char db[96]) {
    char spool[96];
    fuzz_temp_dir(dir, name);
    snprintf(spool, sizeof spool, "%s/spool", dir);
    snprintf(db, 96, "%s/run.sqlite", dir);
    if (mkdir(spool, 0755) != 0) abort();
    spool_seed(spool, "tiny_gpt_attn_overflow", 4242);
    spool_seed(spool, "record_helper_capture", 4343);
    amp_collector_t *c;
    if (amp_collector_new(db, spool, &c) != AMP_OK || amp_collector_poll(c) != AMP_OK ||
        amp_collector_finish(c, 0) != AMP_OK) {
        fprintf(stderr, "fuzz: %s\n", amp_last_error());
        abort();
    }
    amp_collector_free(c);
}

static const char *reading;

START_TEST(read_the_database) {
    test_read_or_refuse(reading);
}
END_TEST

void fuzz_read(const char *db) {
    reading = db;
    Suite *s = suite_create("fuzz");
    TCase *tc = tcase_create("readers");
    tcase_add_test(tc, read_the_database);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_SILENT);
    if (srunner_ntests_failed(r) > 0) {
        TestResult **failed = srunner_failures(r);
        fprintf(stderr, "fuzz: %s:%d: %s\n", tr_lfile(failed[0]), tr_lno(failed[0]),
                tr_msg(failed[0]));
        abort();
    }
    srunner_free(r);
}
