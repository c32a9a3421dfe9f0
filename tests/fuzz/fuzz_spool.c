/*
 * fuzz_spool.c — a libFuzzer target: the collector ingests one spool file whose records are the
 * input (behind valid spool headers), then the database it made is read as the suites read any
 * run's (tests/readers.c): the report in every format and as a diff, the TUI's every view. The
 * first three bytes lay the records out: byte 0's two low bits how many files (1 to 3), its bit 2
 * whether they are one pid's (process images: an exec, recording started again, a reused pid) or
 * each a pid of its own, its high bits each file's exec_id and proc_start; bytes 1 and 2 where
 * the records are cut between the files (fractions of 256). What a crashed, truncated or foreign
 * writer can leave in a spool directory must crash neither the launcher's collector nor what
 * reads its database afterwards.
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

static char dir[64], spool[96], db[96];

// The database's files left by the last input (the collector's finish removed its spool files
// and their directory).
static void clean(void) {
    const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    char path[160];
    for (size_t k = 0; k < sizeof suffix / sizeof *suffix; k++) {
        snprintf(path, sizeof path, "%s%s", db, suffix[k]);
        unlink(path);
    }
}

// Spool file i of n: pid (the same for all when `one_pid`, else 4242 + i), its image's exec_id
// and proc_start from bits of `images`, its name's time 100 (i + 1).
static void write_file(int i, bool one_pid, unsigned images, const uint8_t *data, size_t size) {
    const int32_t pid = 4242 + (one_pid ? 0 : i);
    char path[160];
    snprintf(path, sizeof path, "%s/%d-%d.spool", spool, (int)pid, 100 * (i + 1));
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    amp_spool_header h;
    amp_spool_header_init(&h, pid, 1, 1000, "fuzz");
    h.exec_id = 1 + (images >> i & 1);
    h.proc_start = 5 + 4 * (images >> (i + 3) & 1);
    fwrite(&h, sizeof h, 1, f);
    fwrite(data, 1, size, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        fuzz_temp_dir(dir, "spool");
        snprintf(spool, sizeof spool, "%s/spool", dir);
        snprintf(db, sizeof db, "%s/run.sqlite", dir);
    }
    clean();
    if (mkdir(spool, 0755) != 0) { // (left over: the last input's files would join this one's)
        fprintf(stderr, "fuzz_spool: %s: %s\n", spool, strerror(errno));
        abort();
    }
    // the layout bytes (fuzz_spool.c's head), then the records, cut into the files
    const uint8_t b0 = size > 0 ? data[0] : 0, b1 = size > 1 ? data[1] : 0,
                  b2 = size > 2 ? data[2] : 0;
    const uint8_t *rec = size > 3 ? data + 3 : data + size;
    const size_t n = size > 3 ? size - 3 : 0;
    const int files = 1 + (b0 & 3) % 3;
    const size_t cut[4] = {0, files > 1 ? n * b1 / 256 : n, files > 2 ? n * b2 / 256 : n, n};
    for (int i = 0; i < files; i++) {
        const size_t from = cut[i] < cut[i + 1] ? cut[i] : cut[i + 1], to = cut[i + 1];
        write_file(i, b0 & 4, b0 >> 3, rec + from, i == files - 1 ? n - from : to - from);
    }
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
