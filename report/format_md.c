/*
 * format_md.c — the report as Markdown (a PR comment, a wiki page): the verdict, a table of the
 * findings, each finding with its evidence and fix, then the run summary. User strings (paths,
 * layer names, the command line) are escaped so they cannot break the table or inject HTML.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <string.h>

// Text with Markdown's active characters escaped; newlines become spaces inside tables.
static void md(FILE *out, const char *s, bool in_table) {
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '&':
            fputs("&amp;", out);
            break;
        case '\n':
            fputs(in_table ? " " : "  \n", out);
            break;
        case '\\':
        case '`':
        case '*':
        case '_':
        case '|':
        case '[':
        case ']':
        case '#':
            fputc('\\', out);
            fputc(*p, out);
            break;
        default:
            if (amp_c1_control((const char *)p)) // (a terminal acts on CSI, NEL ...)
                fputc('?', out), p++;
            else if ((*p >= 0x20 && *p != 0x7f) || *p == '\t')
                fputc(*p, out);
        }
    }
}

static void steps(FILE *out, const report_finding *f) {
    if (f->first_step < 0)
        fputs("-", out);
    else if (f->last_step > f->first_step)
        fprintf(out, "%lld-%lld", (long long)f->first_step, (long long)f->last_step);
    else
        fprintf(out, "%lld", (long long)f->first_step);
}

// The findings' table, one row each.
static void findings_table(FILE *out, const report_findings *f) {
    fputs("## Findings\n\n| # | severity | rule | steps | layer | op | what |\n"
          "|---|---|---|---|---|---|---|\n",
          out);
    for (size_t i = 0; i < f->n; i++) {
        const report_finding *x = &f->v[i];
        fprintf(out, "| %zu | %s | `%s` | ", i + 1, amp_severity_name(x->severity), x->rule);
        steps(out, x);
        fputs(" | ", out);
        md(out, x->layer[0] ? x->layer : "-", true);
        fputs(" | ", out);
        md(out, x->op[0] ? x->op : "-", true);
        fputs(" | ", out);
        md(out, x->title, true);
        fputs(" |\n", out);
    }
}

// Finding number i (from 1) in full: where, the detail, the evidence and the fix.
static void finding_section(FILE *out, const report_model *m, const report_finding *x, size_t i) {
    fprintf(out, "\n### %zu. %s: ", i, amp_severity_name(x->severity));
    md(out, x->title, true);
    fprintf(out, "\n\n- rule: `%s`\n- steps: ", x->rule);
    steps(out, x);
    if (x->layer[0]) {
        fputs("\n- layer: ", out);
        md(out, x->layer, true);
    }
    if (x->op[0]) {
        fputs("\n- op: ", out);
        md(out, x->op, true);
        if (x->phase[0]) fprintf(out, " (%s)", x->phase);
    }
    char proc[160]; // which process, when the run has several
    if (report_finding_process(m, x, proc, sizeof proc) && x->processes > 1) {
        fprintf(out, "\n- processes: %d", x->processes);
    } else if (proc[0]) {
        fputs("\n- process: ", out);
        md(out, proc + 3, true); // (past "in ")
    }
    fputs("\n\n", out);
    if (x->detail[0]) {
        md(out, x->detail, false);
        fputs("\n\n", out);
    }
    bool any = false;
    for (int k = 0; k < x->n_evidence; k++) {
        if (isnan(x->evidence[k].value)) continue;
        fprintf(out, "%s`%s` = %.6g", any ? ", " : "Evidence: ", x->evidence[k].key,
                x->evidence[k].value);
        any = true;
    }
    if (any) fputs("\n\n", out);
    fputs("**Fix.** ", out);
    md(out, x->advice, false);
    fputs("\n", out);
}

// The run's table: its command, device, coverage, steps, loss, memory, time, scale and kernels.
static void run_table(FILE *out, const report_model *m) {
    report_summary s;
    report_summarize(m, &s);
    fputs("## Run\n\n| | |\n|---|---|\n", out);
    if (m->command) {
        fputs("| command | ", out);
        md(out, m->command, true);
        fputs(" |\n", out);
    }
    if (m->device) {
        fputs("| device | ", out);
        md(out, m->device, true);
        fputs(" |\n", out);
    }
    report_coverage cov[REPORT_COVERAGE_MAX];
    for (int i = 0, n = report_coverage_lines(m, cov); i < n; i++) {
        fprintf(out, "| %s | ", cov[i].label);
        md(out, cov[i].text, true);
        fprintf(out, "%s |\n", cov[i].note);
    }
    if (s.steps == 0) {
        fprintf(out, "| steps | %s |\n", report_no_steps_phrase(m));
        return;
    }
    char steps[64];
    report_steps_phrase(&s, false, steps, sizeof steps);
    fprintf(out, "| steps | %s (%lld-%lld), %lld skipped, %lld with a non-finite loss |\n", steps,
            (long long)s.first_step, (long long)s.last_step, (long long)s.skipped,
            (long long)s.nonfinite_losses);
    char loss[32];
    fprintf(out, "| final loss | %s |\n", report_final_loss_words(&s, loss));
    if (!isnan(s.peak_mem))
        fprintf(out, "| peak memory | %.1f MiB held by tensors |\n", s.peak_mem / 1048576);
    double step_ns = report_median_step_ns(m);
    if (!isnan(step_ns)) fprintf(out, "| median step time | %.3f ms |\n", step_ns / 1e6);
    if (isnan(s.scale_min))
        fputs("| loss scale | no GradScaler records |\n", out);
    else
        fprintf(out, "| loss scale | %.9g .. %.9g |\n", s.scale_min, s.scale_max);
    if (m->perf.launches)
        fprintf(out, "| GPU kernels | %lld, busy %.3f of %.3f ms%s |\n",
                (long long)m->perf.launches, (double)m->perf.busy_ns / 1e6,
                (double)m->perf.span_ns / 1e6, m->perf.devices > 1 ? " (each GPU's, summed)" : "");
}

void report_format_md(FILE *out, const report_model *m, const report_findings *f) {
    char verdict[2048];
    report_verdict(m, f, verdict, sizeof verdict);
    fputs("# ampprobe report: ", out);
    md(out, m->path, false);
    fputs("\n\n**Verdict.** ", out);
    md(out, verdict, false);
    fputs("\n\n", out);
    if (f->n) {
        findings_table(out, f);
        for (size_t i = 0; i < f->n; i++)
            finding_section(out, m, &f->v[i], i + 1);
        fputs("\n", out);
    }
    run_table(out, m);
}
