/*
 * format_text.c — the report for people: the verdict paragraph first (the answer), then each
 * finding with where, the evidence and the advice, then a short run summary. Colour only when
 * the caller says so (a terminal, NO_COLOR unset). The run's own strings (layer, op and kernel
 * names, the command, an exception) reach the terminal with their control characters shown as
 * '?': a database cannot move the cursor or recolour the screen (report_text_end).
 */
#define _GNU_SOURCE // open_memstream

#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The report is written with one-byte style marks, which report_text_end turns into escape
// sequences (or nothing) once every other control character has been made '?' (the run's
// strings hold no byte 1-6: report_model_load made them '?').
typedef struct palette {
    const char *bold, *red, *yellow, *blue, *dim, *off;
} palette;

enum { MARK_FIRST = 1, MARK_LAST = 6 };
static const palette marks = {"\001", "\002", "\003", "\004", "\005", "\006"};
static const char *const escapes[MARK_LAST + 1] = {
    [1] = "\033[1m",    [2] = "\033[1;31m", [3] = "\033[1;33m",
    [4] = "\033[1;34m", [5] = "\033[2m",    [6] = "\033[0m"};

void report_text_begin(report_text *t) {
    *t = (report_text){0};
    t->f = open_memstream(&t->buf, &t->n);
    if (!t->f) amp_abort(__FILE__, __LINE__, "out of memory for a text report");
}

void report_text_end(report_text *t, FILE *out, bool color) {
    fclose(t->f);
    for (size_t i = 0; i < t->n; i++) {
        const unsigned char c = (unsigned char)t->buf[i];
        if (c >= MARK_FIRST && c <= MARK_LAST) {
            if (color) fputs(escapes[c], out);
        } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
            fputc('?', out);
        } else if (i + 1 < t->n && amp_c1_control(t->buf + i)) {
            fputc('?', out);
            i++;
        } else {
            fputc(c, out);
        }
    }
    free(t->buf);
}

// Prints one of the run's strings on one line: a newline or tab in it (a command's quoted
// argument) shows as '?', as its other control characters do.
static void put_one_line(FILE *out, const char *s) {
    for (; *s; s++)
        fputc(*s == '\n' || *s == '\t' ? '?' : *s, out);
}

// Prints text wrapped at 96 columns, each line prefixed by indent (newlines in text are kept).
static void wrap(FILE *out, const char *indent, const char *text) {
    const int width = 96;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        const char *end = nl ? nl : line + strlen(line);
        while (line < end) {
            const int avail = width - (int)strlen(indent);
            // the first avail characters (not bytes: a UTF-8 character is never split), cut at
            // the last space among them, else after them
            const char *p = line, *space = NULL;
            for (int cols = 0; p < end && cols < avail; cols++) {
                size_t k = amp_utf8_seq(p, SIZE_MAX);
                p += k ? k : 1;
                if (p < end && *p == ' ') space = p;
            }
            const char *cut = p >= end ? end : space ? space : p;
            fprintf(out, "%s%.*s\n", indent, (int)(cut - line), line);
            line = cut;
            while (line < end && *line == ' ')
                line++;
        }
        line = nl ? nl + 1 : end;
    }
}

static void print_steps(FILE *out, const report_finding *f) {
    if (f->first_step < 0) return;
    if (f->last_step > f->first_step)
        fprintf(out, "steps %lld-%lld", (long long)f->first_step, (long long)f->last_step);
    else
        fprintf(out, "step %lld", (long long)f->first_step);
}

static void print_finding(FILE *out, const report_model *m, const report_finding *f, size_t index,
                          const palette *p) {
    const char *sev_color = f->severity == AMP_SEVERITY_ERROR     ? p->red
                            : f->severity == AMP_SEVERITY_WARNING ? p->yellow
                                                                  : p->blue;
    fprintf(out, "%zu. %s%s%s %s[%s]%s\n", index, sev_color, amp_severity_name(f->severity), p->off,
            p->dim, f->rule, p->off);
    char title[sizeof f->title + 32]; // the title between two escape sequences
    snprintf(title, sizeof title, "%s%s%s", p->bold, f->title, p->off);
    wrap(out, "   ", title);
    char proc[160]; // which process, when the run has several
    const bool several = report_finding_process(m, f, proc, sizeof proc);
    if (f->first_step >= 0 || f->layer[0] || f->op[0] || several) { // run-wide: no where
        fprintf(out, "   where: ");
        print_steps(out, f);
        if (f->layer[0]) fprintf(out, "%slayer %s", f->first_step >= 0 ? ", " : "", f->layer);
        if (f->op[0]) fprintf(out, "%sop %s", f->first_step >= 0 || f->layer[0] ? ", " : "", f->op);
        if (f->phase[0]) fprintf(out, " (%s)", f->phase);
        if (several)
            fprintf(out, "%s%s", f->first_step >= 0 || f->layer[0] || f->op[0] ? ", " : "", proc);
        fprintf(out, "\n");
    }
    if (f->detail[0]) wrap(out, "   ", f->detail);
    char ev[1024];
    size_t k = amp_appendf(ev, sizeof ev, 0, "evidence:");
    for (int i = 0; i < f->n_evidence; i++)
        if (!isnan(f->evidence[i].value))
            k = amp_appendf(ev, sizeof ev, k, " %s=%.6g", f->evidence[i].key, f->evidence[i].value);
    if (f->n_evidence) wrap(out, "   ", ev);
    char advice[1100];
    snprintf(advice, sizeof advice, "fix: %s", f->advice);
    wrap(out, "   ", advice);
    fprintf(out, "\n");
}

static void write_text(FILE *out, const report_model *m, const report_findings *f) {
    const palette *p = &marks;
    char verdict[2048];
    report_verdict(m, f, verdict, sizeof verdict);
    fprintf(out, "%sampprobe report%s %s\n\n", p->bold, p->off, m->path);
    wrap(out, "", verdict);
    fprintf(out, "\n");

    size_t counts[3] = {0};
    for (size_t i = 0; i < f->n; i++)
        counts[f->v[i].severity]++;
    if (f->n) {
        fprintf(out, "%sFindings%s (%zu error%s, %zu warning%s, %zu info)\n\n", p->bold, p->off,
                counts[AMP_SEVERITY_ERROR], counts[AMP_SEVERITY_ERROR] == 1 ? "" : "s",
                counts[AMP_SEVERITY_WARNING], counts[AMP_SEVERITY_WARNING] == 1 ? "" : "s",
                counts[AMP_SEVERITY_INFO]);
        for (size_t i = 0; i < f->n; i++)
            print_finding(out, m, &f->v[i], i + 1, p);
    }

    report_summary s;
    report_summarize(m, &s);
    fprintf(out, "%sRun%s\n", p->bold, p->off);
    if (m->command) {
        fputs("  command:     ", out);
        put_one_line(out, m->command);
        fputc('\n', out);
    }
    if (m->device) {
        fputs("  device:      ", out);
        put_one_line(out, m->device);
        fputc('\n', out);
    }
    report_coverage cov[REPORT_COVERAGE_MAX];
    for (int i = 0, n = report_coverage_lines(m, cov); i < n; i++) {
        char label[32];
        snprintf(label, sizeof label, "%s:", cov[i].label);
        fprintf(out, "  %-12s %s%s\n", label, cov[i].text, cov[i].note);
    }
    if (s.steps == 0) {
        fprintf(out, "  steps:       %s\n", report_no_steps_phrase(m));
        return;
    }
    char steps[64];
    report_steps_phrase(&s, false, steps, sizeof steps);
    fprintf(out, "  steps:       %s (%lld-%lld), %lld skipped, %lld with a non-finite loss\n",
            steps, (long long)s.first_step, (long long)s.last_step, (long long)s.skipped,
            (long long)s.nonfinite_losses);
    char loss[32];
    fprintf(out, "  final loss:  %s\n", report_final_loss_words(&s, loss));
    const double step_ns = report_median_step_ns(m);
    if (!isnan(step_ns)) fprintf(out, "  median step: %.3f ms\n", step_ns / 1e6);
    if (!isnan(s.peak_mem))
        fprintf(out, "  peak memory: %.1f MiB held by tensors\n", s.peak_mem / 1048576);
    if (isnan(s.scale_min))
        fprintf(out, "  loss scale:  no GradScaler records\n");
    else
        fprintf(out, "  loss scale:  %.9g .. %.9g\n", s.scale_min, s.scale_max);
}

void report_format_text(FILE *out, const report_model *m, const report_findings *f, bool color) {
    report_text t;
    report_text_begin(&t);
    write_text(t.f, m, f);
    report_text_end(&t, out, color);
}
