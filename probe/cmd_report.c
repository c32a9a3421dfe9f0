/*
 * cmd_report.c — `ampprobe report FILE`: opens a run database read-only, runs the report rules
 * (report/report.h) and writes the findings as text, md, html (one self-contained page with SVG
 * plots) or json. Exit 0 when the report was written, findings or not (with --fail-on S: 1 when
 * a finding of severity S or worse is among them, a gate for CI); 2 for a usage error or a file
 * that is missing, foreign, newer or corrupt.
 */
#include "commands.h"
#include "report.h"

#include "amp-store.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct report_opts {
    const char *file, *out_path, *format;
    const report_rule *rule;
    int64_t lo, hi;
    int fail_on; // --fail-on: the least amp_severity that makes the exit status 1; -1: none
} report_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ampprobe report FILE [--format text|md|html|json] [-o OUT] [--rule ID] "
            "[--steps A:B]\n"
            "                       [--fail-on error|warning|info]\n\n"
            "Diagnoses a run recorded by 'ampprobe run': which layer, op and step went wrong,\n"
            "why, and what to change. Findings come with a rule id, a severity (error, warning,\n"
            "info), the steps, the layer and op, the evidence and the advice.\n\n"
            "options:\n"
            "  --format FMT        text for people (default; colour on a terminal unless\n"
            "                      NO_COLOR is set or TERM=dumb), md (Markdown), html (one\n"
            "                      self-contained page with plots), json for CI (keys:\n"
            "                      report/README.md)\n"
            "  -o, --output OUT    write the report to OUT instead of stdout (not over FILE)\n"
            "  --rule ID           run only that rule\n"
            "  --steps A:B         look at steps A..B only (A: or :B leave a side open; N\n"
            "                      alone: step N)\n"
            "  --fail-on SEV       exit with status 1 when a finding of severity SEV or worse\n"
            "                      is reported (error, warning or info): a gate for CI\n"
            "  --help              this text\n"
            "An option's value may also follow an '=' (--format=json); each option once.\n\n"
            "rules:\n");
    for (size_t i = 0; i < report_n_rules; i++)
        fprintf(f, "  %-22s %s\n", report_rules[i].id, report_rules[i].summary);
    fprintf(f, "\nexit status: 0 report written (with or without findings), 1 report written and\n"
               "--fail-on's severity reached, 2 usage error or an unreadable/foreign database.\n");
}

static int bad(const char *fmt, const char *a) {
    fprintf(stderr, "ampprobe report: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, " (see 'ampprobe report --help')\n");
    return 2;
}

static bool parse_step(const char *s, size_t len, int64_t *v) {
    char buf[32];
    if (len == 0 || len >= sizeof buf || strspn(s, "0123456789") != len) return false; // digits
    memcpy(buf, s, len);
    buf[len] = 0;
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno || *end || x < 0) return false;
    *v = x;
    return true;
}

// "A:B", "A:", ":B" or "A" (that step only).
static bool parse_steps(const char *s, int64_t *lo, int64_t *hi) {
    const char *colon = strchr(s, ':');
    if (!colon) {
        if (!parse_step(s, strlen(s), lo)) return false;
        *hi = *lo;
        return true;
    }
    if (colon > s && !parse_step(s, (size_t)(colon - s), lo)) return false;
    if (colon[1] && !parse_step(colon + 1, strlen(colon + 1), hi)) return false;
    return *lo <= *hi;
}

// 0: parsed; 1: --help printed; 2: usage error printed.
static int parse(int argc, char **argv, report_opts *o) {
    *o = (report_opts){.format = "text", .lo = INT64_MIN, .hi = INT64_MAX, .fail_on = -1};
    static const char *const names[] = {"--format", "-o", "--rule", "--steps", "--fail-on"};
    bool given[5] = {false}, files_only = false; // files_only: after "--"
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (files_only) {
            if (o->file) return bad("one FILE only ('%s' is a second)", a);
            o->file = a;
            continue;
        }
        int k = 0, got = 0;
        for (; k < 5; k++) {
            got = k == 1 ? amp_cmd_option_value(argc, argv, &i, "--output", "-o", &v)
                         : amp_cmd_option_value(argc, argv, &i, names[k], NULL, &v);
            if (got) break;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        } else if (got < 0) {
            return bad("%s needs a value", a);
        } else if (got > 0) {
            // (one rule, one range: the last one winning would hide the others)
            if (!amp_cmd_option_once("report", names[k], &given[k])) return 2;
            if (k == 0) {
                if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0 && strcmp(v, "md") != 0 &&
                    strcmp(v, "html") != 0)
                    return bad("--format: '%s' is not one of text, md, html, json", v);
                o->format = v;
            } else if (k == 1) {
                o->out_path = v;
            } else if (k == 2) {
                o->rule = report_rule_find(v);
                if (!o->rule) return bad("--rule: no rule named '%s'", v);
            } else if (k == 4) {
                for (int s = AMP_SEVERITY_INFO; s <= AMP_SEVERITY_ERROR; s++)
                    if (strcmp(v, amp_severity_name((amp_severity)s)) == 0) o->fail_on = s;
                if (o->fail_on < 0)
                    return bad("--fail-on: '%s' is not one of error, warning, info", v);
            } else if (!parse_steps(v, &o->lo, &o->hi)) {
                return bad("--steps: '%s' is not A:B with 0 <= A <= B", v);
            }
        } else if (strcmp(a, "--") == 0) {
            files_only = true; // (a FILE may start with '-')
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option '%s'", a);
        } else if (o->file) {
            return bad("one FILE only ('%s' is a second)", a);
        } else {
            o->file = a;
        }
    }
    if (!o->file) return bad("%s", "no FILE given");
    return 0;
}

// Colour on a terminal, unless NO_COLOR is set or the terminal is dumb (as the launcher's status
// line and the TUI judge it).
static bool want_color(FILE *out) {
    const char *no = getenv("NO_COLOR"), *term = getenv("TERM");
    return isatty(fileno(out)) && !(no && *no) && !(term && strcmp(term, "dumb") == 0);
}

int amp_cmd_report(int argc, char **argv) {
    report_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;

    sqlite3 *db;
    char err[AMP_STORE_ERR_MAX > REPORT_ERR_MAX ? AMP_STORE_ERR_MAX : REPORT_ERR_MAX];
    if (amp_store_open_readonly(o.file, &db, err) != AMP_OK) {
        fprintf(stderr, "ampprobe report: %s\n", err);
        return 2;
    }
    report_model m;
    amp_status st = report_model_load(db, o.file, o.lo, o.hi, &m, err);
    sqlite3_close(db);
    if (st != AMP_OK) {
        fprintf(stderr, "ampprobe report: %s\n", err);
        return 2;
    }
    const char *inputs[] = {o.file};
    FILE *out = amp_cmd_open_output("report", o.out_path, inputs, 1);
    if (!out) {
        report_model_free(&m);
        return 2;
    }
    report_findings f = {0};
    report_run(&m, o.rule, &f);
    if (strcmp(o.format, "json") == 0)
        report_format_json(out, &m, &f);
    else if (strcmp(o.format, "md") == 0)
        report_format_md(out, &m, &f);
    else if (strcmp(o.format, "html") == 0)
        report_format_html(out, &m, &f);
    else
        report_format_text(out, &m, &f, want_color(out));
    rc = 0;
    for (size_t i = 0; i < f.n && o.fail_on >= 0; i++)
        if ((int)f.v[i].severity >= o.fail_on) rc = 1;
    if (amp_cmd_close_output("report", o.out_path, out) != 0) rc = 2;
    report_findings_free(&f);
    report_model_free(&m);
    return rc;
}
