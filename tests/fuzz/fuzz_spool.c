/*
 * fuzz_spool.c — a libFuzzer target: the collector ingests one spool file whose records are the
 * input (after a valid spool header), then the database it made is read as the suites read any
 * run's (tests/readers.c): the report in every format and as a diff, the TUI's every view. What a
 * crashed, truncated or foreign writer can leave in a spool directory must crash neither the
 * launcher's collector nor what reads its database afterwards.
 *
 * Built and run (with -timeout=0: fuzz.h) by tests/fuzz/run.sh (clang, -DAMP_FUZZ=ON) from the
 * seeds in tests/fuzz/seeds/spool: the records of short runs of the samples and test helpers
 * (tests/fuzz/make_seeds.sh).
 */
#include "fuzz.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        fuzz_temp_dir(dir, "spool");
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
    fuzz_read(db);
    return 0;
}
