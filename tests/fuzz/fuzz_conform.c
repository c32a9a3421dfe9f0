/*
 * fuzz_conform.c — a libFuzzer target: `ampprobe conform` reading a reference file whose text is
 * the input. Its first byte picks the kind (scaler updates, unscale cases, the autocast table, or
 * an e2e manifest, which is parsed only: a manifest that parses is a training run), the rest is
 * the file. A malformed reference set must be an error naming file and line, never a crash.
 *
 * Built and run by tests/fuzz/run.sh (clang, -DAMP_FUZZ=ON) from the seeds in
 * tests/fuzz/seeds/conform: reference files of tests/data/golden behind their kind's byte
 * (tests/fuzz/make_seeds.sh).
 */
#include "conform.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const kinds[] = {"scaler_updates.txt", "unscale.txt", "autocast_dtypes.txt",
                                    "e2e_fuzz.manifest"};
enum { KINDS = sizeof kinds / sizeof *kinds };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64];
    static FILE *null;
    if (!dir[0]) {
        fuzz_temp_dir(dir, "conform");
        null = fopen("/dev/null", "w");
        if (!null) abort();
    }
    if (size < 1) return 0;
    const char *name = kinds[data[0] % KINDS];
    char path[128];
    for (int k = 0; k < KINDS; k++) { // only this input's file in the directory
        snprintf(path, sizeof path, "%s/%s", dir, kinds[k]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    struct conform_run r = {.out = null, .err = null, .device = AMP_DEVICE_CPU};
    if (strstr(name, ".manifest")) {
        struct conform_manifest m;
        r.dir = dir;
        conform_manifest_parse(&r, name, &m);
        free(r.unchecked);
    } else {
        conform_dir(&r, dir);
    }
    return 0;
}
