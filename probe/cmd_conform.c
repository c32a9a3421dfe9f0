/*
 * cmd_conform.c — `ampprobe conform DIR`: finds the PyTorch reference files in DIR by name,
 * hands each to the checker of its kind (conform.h) and prints `N passed, M failed`.
 */
#include "commands.h"
#include "conform.h"

#include "amp-impl.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

// The kinds of reference file, by name (../shared/golden's names; tests/data/golden/README.md
// describes the formats), in the order they run; LOOKED_FOR names them for messages (conv_*.bin
// by its inputs, which run the cases).
#define LOOKED_FOR                                                                                 \
    "scaler_updates*.txt, unscale*.txt, autocast_dtypes*.txt, conv_*_in_f32.bin or *.manifest"
static const struct {
    const char *pattern;
    void (*check)(struct conform_run *r, const char *name);
} kinds[] = {
    {"scaler_updates*.txt", conform_scaler_file},
    {"unscale*.txt", conform_unscale_file},
    {"autocast_dtypes*.txt", conform_autocast_file},
    {"conv_*.bin", conform_convert_file},
    {"*.manifest", conform_e2e_file},
};

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(struct conform_run *r) {
    for (int i = 0; i < r->n_names; i++)
        free(r->names[i]);
    free(r->names);
    r->names = NULL;
    r->n_names = 0;
}

// r->names = the directory's entries (no dot files), sorted bytewise so runs are reproducible.
static bool list_dir(struct conform_run *r) {
    DIR *d = opendir(r->dir);
    if (!d) {
        r->errors++;
        fprintf(r->err, "ampprobe conform: %s: cannot read directory: %s\n", r->dir,
                strerror(errno));
        return false;
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (r->n_names == cap) {
            cap = cap ? 2 * cap : 64;
            char **names = realloc(r->names, (size_t)cap * sizeof *names);
            if (!names) break;
            r->names = names;
        }
        char *copy = strdup(e->d_name);
        if (!copy) break;
        r->names[r->n_names++] = copy;
    }
    bool complete = e == NULL;
    closedir(d);
    if (!complete) {
        r->errors++;
        fprintf(r->err, "ampprobe conform: %s: out of memory listing the directory\n", r->dir);
        free_names(r);
        return false;
    }
    amp_sort(r->names, (size_t)r->n_names, sizeof *r->names, cmp_str);
    return true;
}

int conform_dir(struct conform_run *r, const char *dir) {
    r->dir = dir;
    if (!list_dir(r)) return 2;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (int i = 0; i < r->n_names; i++) {
            if (fnmatch(kinds[k].pattern, r->names[i], 0) != 0) continue;
            r->checking = r->names[i];
            r->verdicts_before = r->passed + r->failed + r->unsupported;
            kinds[k].check(r, r->names[i]);
        }
    }
    r->checking = NULL;
    if (r->passed + r->failed + r->unsupported + r->errors == 0) {
        r->errors++;
        fprintf(r->err, "ampprobe conform: %s: no reference files (no " LOOKED_FOR ")\n", dir);
        conform_not_checked(r, "nothing to check: %s holds no " LOOKED_FOR, dir);
    }
    free_names(r);
    fprintf(r->out, "%d passed, %d failed", r->passed, r->failed);
    if (r->unsupported > 0) fprintf(r->out, ", %d unsupported", r->unsupported);
    conform_put_line(r->out, r->unchecked ? r->unchecked : "");
    fflush(r->out);
    free(r->unchecked);
    r->unchecked = NULL;
    r->unchecked_len = r->unchecked_cap = 0;
    return r->errors > 0 ? 2 : r->failed > 0 ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: ampprobe conform [-v] [--device cpu|cuda] DIR\n\n"
        "Checks this build's AMP semantics against PyTorch reference files in DIR (the formats\n"
        "of tests/data/golden/README.md), found by name:\n"
        "  scaler_updates*.txt   GradScaler.update() sequences: scale bits and growth tracker\n"
        "  unscale*.txt          unscale_ + non-finite check: output bits (NaN-ness for NaN)\n"
        "  autocast_dtypes*.txt  result dtype of each op under fp16/bf16 autocast\n"
        "  conv_<n>_in_f32.bin   fp32 -> fp16/bf16 conversions against conv_<n>_f16_<tag>.bin\n"
        "                        and conv_<n>_bf16_<tag>.bin (NaN-ness for NaN inputs)\n"
        "  *.manifest            end-to-end MLP training: found_inf and scale per step exactly,\n"
        "                        loss within 1e-3 and final weights within 1e-2 relative\n\n"
        "Prints every failure with its case and first mismatch, then `N passed, M failed`\n"
        "(and `, K unsupported` for cases this build cannot run; they are not passes), then\n"
        "each file not checked and why (`; unscale.txt not checked: line 3: ...`). A missing\n"
        "reference output (conv_<n>_bf16_<tag>.bin beside conv_<n>_f16_<tag>.bin) fails.\n\n"
        "options:\n"
        "  -v, --verbose         print every case, passing ones too\n"
        "  --device cpu|cuda     backend for the unscale and end-to-end cases (default cpu)\n"
        "  -h, --help            this text\n\n"
        "exit status: 0 all passed, 1 some case failed, 2 usage error, unreadable directory,\n"
        "nothing to check, or a malformed file (the message names file and line), such as a\n"
        "manifest key the format does not have or a value libampcore refuses.\n");
}

int amp_cmd_conform(int argc, char **argv) {
    struct conform_run r = {.out = stdout, .err = stderr, .device = AMP_DEVICE_CPU};
    const char *dir = NULL;
    bool verbose_given = false, device_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        const int device = amp_cmd_option_value(argc, argv, &i, "--device", NULL, &v);
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            if (!amp_cmd_option_once("conform", a, &verbose_given)) return 2;
            r.verbose = true;
        } else if (device) {
            if (device < 0 || !amp_device_parse(v, &r.device)) {
                fprintf(stderr, "ampprobe conform: --device needs cpu or cuda\n");
                return 2;
            }
            if (!amp_cmd_option_once("conform", "--device", &device_given)) return 2;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr,
                    "ampprobe conform: unknown option '%s' (see 'ampprobe conform --help')\n", a);
            return 2;
        } else if (dir) {
            fprintf(stderr, "ampprobe conform: one directory only ('%s' and '%s')\n", dir, a);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir) {
        fprintf(stderr, "ampprobe conform: which directory? (the reference data: "
                        "tests/data/golden; see 'ampprobe conform --help')\n");
        return 2;
    }
    amp_ctx_t *probe;
    if (amp_ctx_new(r.device, 0, &probe) != AMP_OK) {
        fprintf(stderr, "ampprobe conform: %s\n", amp_last_error()); // names --device itself
        return 2;
    }
    amp_ctx_free(probe);
    return conform_dir(&r, dir);
}
