/*
 * cmd_diff.c — `ampprobe diff A B`: two recorded runs side by side (step time, throughput, peak
 * memory when known, skipped steps, the last step's loss and the mean of the last 10% of steps,
 * loss curves, findings in one and not the other) and a verdict such as "AMP run (B, fp16) is
 * 2.3x faster than the fp32 run, same loss within 0.4%". Runs of several processes have their
 * processes matched by program and order (report/diff.c).
 * Exit 0 when the comparison was written; 2 for a usage error or an unreadable database.
 */
#include "commands.h"
#include "report.h"

#include "amp-store.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f, "usage: ampprobe diff A B [--format text|json] [-o OUT]\n\n"
           "Compares two runs recorded by 'ampprobe run', e.g. fp32 (A) against AMP (B): median\n"
           "step time, throughput, peak memory (when recorded), skipped steps, the final loss\n"
           "(the loss at the last step, and the mean loss of the last 10%% of steps, which the\n"
           "verdict compares), the loss curves step by step, and the report findings present\n"
           "in one run and not the other. The first line is the verdict: how much faster or\n"
           "slower the AMP run is, why, and whether its loss matches. A run of several\n"
           "processes (two trainings, data-parallel ranks) has each process's losses compared\n"
           "with those of the same program and order in the other run, the processes named.\n\n"
           "options:\n"
           "  --format text|json  text (default) or json (keys: report/README.md)\n"
           "  -o, --output OUT    write to OUT instead of stdout (not over A or B)\n"
           "  --help              this text\n\n"
           "exit status: 0 comparison written, 2 usage error or an unreadable/foreign database.\n");
}

static int bad(const char *fmt, const char *a) {
    fprintf(stderr, "ampprobe diff: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see 'ampprobe diff --help')\n");
    return 2;
}

// Loads path's model and runs every rule; false after printing one line.
static bool load(const char *path, report_model *m, report_findings *f) {
    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX > REPORT_ERR_MAX ? AMP_STORE_ERR_MAX : REPORT_ERR_MAX];
    if (amp_store_open_readonly(path, &db, err) != AMP_OK) {
        fprintf(stderr, "ampprobe diff: %s\n", err);
        return false;
    }
    amp_status st = report_model_load(db, path, INT64_MIN, INT64_MAX, m, err);
    sqlite3_close(db);
    if (st != AMP_OK) {
        fprintf(stderr, "ampprobe diff: %s\n", err);
        return false;
    }
    *f = (report_findings){0};
    report_run(m, NULL, f);
    return true;
}

int amp_cmd_diff(int argc, char **argv) {
    const char *files[2] = {NULL, NULL}, *out_path = NULL, *format = "text";
    int n_files = 0;
    bool output_given = false, format_given = false, files_only = false; // files_only: after "--"
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (files_only) {
            if (n_files == 2) return bad("two files only ('%s' is a third)", a);
            files[n_files++] = a;
            continue;
        }
        int output = amp_cmd_option_value(argc, argv, &i, "--output", "-o", &v), fmt = 0;
        if (!output) fmt = amp_cmd_option_value(argc, argv, &i, "--format", NULL, &v);
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (output < 0 || fmt < 0) {
            return bad("%s needs a value", a);
        } else if (output > 0) {
            if (!amp_cmd_option_once("diff", "-o", &output_given)) return 2;
            out_path = v;
        } else if (fmt > 0) {
            if (!amp_cmd_option_once("diff", "--format", &format_given)) return 2;
            if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
                return bad("--format: '%s' is not one of text, json", v);
            format = v;
        } else if (strcmp(a, "--") == 0) {
            files_only = true; // (a file may start with '-')
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option '%s'", a);
        } else if (n_files == 2) {
            return bad("two files only ('%s' is a third)", a);
        } else {
            files[n_files++] = a;
        }
    }
    if (n_files < 2) return bad("%s", "needs two run databases, A and B");

    report_model ma, mb;
    report_findings fa, fb;
    if (!load(files[0], &ma, &fa)) return 2;
    if (!load(files[1], &mb, &fb)) {
        report_findings_free(&fa);
        report_model_free(&ma);
        return 2;
    }
    int rc = 0;
    FILE *out = amp_cmd_open_output("diff", out_path, files, 2);
    if (!out) {
        rc = 2;
    } else {
        if (strcmp(format, "json") == 0)
            report_diff_json(out, &ma, &fa, &mb, &fb);
        else
            report_diff_text(out, &ma, &fa, &mb, &fb);
        rc = amp_cmd_close_output("diff", out_path, out);
    }
    report_findings_free(&fa);
    report_findings_free(&fb);
    report_model_free(&ma);
    report_model_free(&mb);
    return rc;
}
