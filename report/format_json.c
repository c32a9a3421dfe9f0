/*
 * format_json.c — the report for machines (CI gates). The keys are stable; report/README.md
 * documents them:
 *
 *   {"file": "...", "verdict": "...",
 *    "summary": {"steps": 12, "first_step": 0, "last_step": 11, "skipped": 9,
 *                "nonfinite_losses": 9, "final_loss": null, "scale_min": 128, "scale_max": 65536,
 *                "peak_memory": 1896960, "compiled": null, "unwatched": null,
 *                "added_models": null, "updates": null, "stats_every": 1,
 *                "first_error_before_focus": null},
 *    "counts": {"error": 1, "warning": 2, "info": 0},
 *    "findings": [{"rule": "nonfinite-root-cause", "severity": "error",
 *                  "steps": {"first": 3, "last": 11}, "layer": "blocks.1.attn", "op": "mul",
 *                  "phase": "fwd", "processes": 1, "pid": 1234, "program": "tiny_gpt",
 *                  "title": "...", "detail": "...",
 *                  "evidence": {"input_amax": 6.26953, ...}, "advice": "..."}]}
 *
 * Absent values (no layer, no step, NaN/inf numbers) are null.
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>

void report_json_str(FILE *out, const char *s) {
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        default:
            if (*p < 0x20) {
                fprintf(out, "\\u%04x", *p);
            } else {
                // valid UTF-8 as it is; a byte that begins no character (a name cut by a fixed
                // buffer) as U+FFFD, so that the output stays JSON
                const size_t n = amp_utf8_seq((const char *)p, SIZE_MAX);
                if (n) {
                    fwrite(p, 1, n, out);
                    p += n - 1;
                } else {
                    fputs("\\ufffd", out);
                }
            }
        }
    }
    fputc('"', out);
}

// An integer below 2^53 whole (a scale of 2^36 is 68719476736, a peak of 3733245182 bytes that
// many: 9 digits made them 6.87194767e+10 and 3.73324518e+09), anything else to 15 significant
// digits (what a double holds of a decimal: a mean of 2.893 is not 2.8930000000000007).
void report_json_num(FILE *out, double v) {
    if (!isfinite(v))
        fputs("null", out);
    else if (v == floor(v) && fabs(v) < 0x1p53)
        fprintf(out, "%.0f", v);
    else
        fprintf(out, "%.15g", v);
}

void report_json_step(FILE *out, int64_t s) {
    if (s < 0)
        fputs("null", out);
    else
        fprintf(out, "%lld", (long long)s);
}

// In the report an empty string is absent too (no layer, no op).
static void str(FILE *out, const char *s) {
    report_json_str(out, s && *s ? s : NULL);
}

void report_json_key_num(FILE *out, const char *key, double v) {
    fprintf(out, ", \"%s\": ", key);
    report_json_num(out, v);
}

void report_json_key_str(FILE *out, const char *key, const char *s) {
    fprintf(out, ", \"%s\": ", key);
    report_json_str(out, s);
}

void report_format_json(FILE *out, const report_model *m, const report_findings *f) {
    char verdict[2048];
    report_verdict(m, f, verdict, sizeof verdict);
    report_summary s;
    report_summarize(m, &s);
    fputs("{\"file\": ", out);
    str(out, m->path);
    fputs(", \"verdict\": ", out);
    str(out, verdict);
    fprintf(out, ",\n \"summary\": {\"steps\": %lld, \"processes\": %d, \"first_step\": ",
            (long long)s.steps, s.processes);
    report_json_step(out, s.first_step);
    fputs(", \"last_step\": ", out);
    report_json_step(out, s.last_step);
    fprintf(out, ", \"skipped\": %lld, \"nonfinite_losses\": %lld", (long long)s.skipped,
            (long long)s.nonfinite_losses);
    report_json_key_num(out, "final_loss", s.final_loss);
    report_json_key_num(out, "scale_min", s.scale_min);
    report_json_key_num(out, "scale_max", s.scale_max);
    report_json_key_num(out, "peak_memory", s.peak_mem);
    report_json_key_str(out, "compiled", m->compiled);
    report_json_key_str(out, "unwatched", m->unwatched);
    report_json_key_str(out, "added_models", m->added_models);
    report_json_key_str(out, "updates", m->updates);
    fprintf(out, ", \"stats_every\": %lld", (long long)report_stats_every(m));
    fputs(", \"first_error_before_focus\": ", out);
    report_json_step(out, m->end.first_error_before);
    size_t counts[3] = {0};
    for (size_t i = 0; i < f->n; i++)
        counts[f->v[i].severity]++;
    fprintf(out, "},\n \"counts\": {\"error\": %zu, \"warning\": %zu, \"info\": %zu},\n",
            counts[AMP_SEVERITY_ERROR], counts[AMP_SEVERITY_WARNING], counts[AMP_SEVERITY_INFO]);
    fputs(" \"findings\": [", out);
    for (size_t i = 0; i < f->n; i++) {
        const report_finding *x = &f->v[i];
        fputs(i ? ",\n  {\"rule\": " : "\n  {\"rule\": ", out);
        str(out, x->rule);
        fputs(", \"severity\": ", out);
        str(out, amp_severity_name(x->severity));
        fputs(", \"steps\": {\"first\": ", out);
        report_json_step(out, x->first_step);
        fputs(", \"last\": ", out);
        report_json_step(out, x->last_step);
        fputs("}, \"layer\": ", out);
        str(out, x->layer);
        fputs(", \"op\": ", out);
        str(out, x->op);
        fputs(", \"phase\": ", out);
        str(out, x->phase);
        fprintf(out, ", \"processes\": %d", x->processes);
        // the process it is of; null when run-wide or merged across processes
        const report_process *p = x->processes == 1 ? report_process_find(m, x->pid) : NULL;
        fputs(", \"pid\": ", out);
        if (p)
            fprintf(out, "%d", (int)p->pid);
        else
            fputs("null", out);
        fputs(", \"program\": ", out);
        str(out, p ? p->name : NULL);
        fputs(",\n   \"title\": ", out);
        str(out, x->title);
        fputs(",\n   \"detail\": ", out);
        str(out, x->detail);
        fputs(",\n   \"evidence\": {", out);
        for (int k = 0; k < x->n_evidence; k++) {
            fputs(k ? ", " : "", out);
            str(out, x->evidence[k].key);
            fputs(": ", out);
            report_json_num(out, x->evidence[k].value);
        }
        fputs("},\n   \"advice\": ", out);
        str(out, x->advice);
        fputs("}", out);
    }
    fputs(f->n ? "\n ]}\n" : "]}\n", out);
}
