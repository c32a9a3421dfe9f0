/*
 * format_html.c — the report as one self-contained HTML page (no script, no external resource):
 * the verdict, the findings, and inline SVG plots drawn from the model:
 *   - loss curve (non-finite losses marked at the top edge);
 *   - loss-scale history on a log2 axis, skipped steps marked;
 *   - per-layer forward amax over steps on a log axis against the fp16 max (65504);
 *   - step-time breakdown: GPU busy / copies / idle per step with kernels, else the host time of
 *     GEMM ops / casts / other recorded ops / the rest of the step;
 *   - roofline scatter of the kernels with analytic FLOPs (only when kernels were recorded).
 * Long runs are drawn in at most PLOT_POINTS buckets. Every user string goes through esc().
 */
#include "report.h"

#include <math.h>
#include <string.h>

#define PLOT_W 760
#define PLOT_H 230
#define PAD_L 76
#define PAD_R 150 // room for the legend
#define PAD_T 12
#define PAD_B 34
#define PLOT_POINTS 400
#define AMAX_LAYERS 8

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

static void esc(FILE *out, const char *s) {
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            if (*p >= 0x20 || *p == '\n' || *p == '\t') fputc(*p, out);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A plot: data ranges mapped onto the SVG box (y optionally log10)

typedef struct plot {
    double x0, x1, y0, y1;
    bool logy;
} plot;

static double px(const plot *p, double x) {
    double span = p->x1 > p->x0 ? p->x1 - p->x0 : 1;
    return PAD_L + (x - p->x0) / span * (PLOT_W - PAD_L - PAD_R);
}

static double py(const plot *p, double y) {
    double a = p->y0, b = p->y1, v = y;
    if (p->logy) a = log10(a), b = log10(b), v = log10(fmax(y, p->y0));
    double span = b > a ? b - a : 1;
    double t = (v - a) / span;
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    return PLOT_H - PAD_B - t * (PLOT_H - PAD_T - PAD_B);
}

static void svg_open(FILE *out, const char *title, const char *label) {
    fputs("<figure><figcaption>", out);
    esc(out, title);
    fprintf(out,
            "</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
            PLOT_W, PLOT_H, PLOT_W, PLOT_H);
    esc(out, label);
    fputs("\">", out);
}

static void axes(FILE *out, const plot *p, const char *xlabel, const char *ylabel) {
    int x0 = PAD_L, x1 = PLOT_W - PAD_R, y0 = PLOT_H - PAD_B, y1 = PAD_T;
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>", x0, y1,
            x1 - x0, y0 - y1);
    for (int i = 0; i <= 4; i++) { // y ticks
        double v = p->logy ? pow(10, log10(p->y0) + i * (log10(p->y1) - log10(p->y0)) / 4)
                           : p->y0 + i * (p->y1 - p->y0) / 4;
        double y = py(p, v);
        fprintf(out,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.3g</text>",
                x0, y, x1, y, x0 - 4, y + 4, v);
    }
    bool whole = p->x1 - p->x0 >= 8; // steps: whole numbers
    for (int i = 0; i <= 4; i++) {   // x ticks
        double v = p->x0 + i * (p->x1 - p->x0) / 4;
        if (whole) v = fmin(fmax(round(v), ceil(p->x0)), floor(p->x1)) + 0.0; // inside; no -0
        fprintf(out, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%.4g</text>",
                px(p, v), y0 + 14, v);
    }
    fprintf(out, "<text x=\"%d\" y=\"%d\" class=\"label\" text-anchor=\"middle\">", (x0 + x1) / 2,
            PLOT_H - 4);
    esc(out, xlabel);
    fprintf(out,
            "</text><text x=\"10\" y=\"%d\" class=\"label\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 10 %d)\">",
            (y0 + y1) / 2, (y0 + y1) / 2);
    esc(out, ylabel);
    fputs("</text>", out);
}

static void legend(FILE *out, int i, const char *color, const char *text) {
    int x = PLOT_W - PAD_R + 10, y = PAD_T + 12 + 16 * i;
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\" class=\"tick\">",
            x, y - 9, color, x + 14, y);
    char buf[24]; // keep the legend inside the figure
    snprintf(buf, sizeof buf, "%s", text);
    esc(out, buf);
    fputs("</text>", out);
}

static void svg_close(FILE *out) {
    fputs("</svg></figure>\n", out);
}

// ---------------------------------------------------------------------------------------------
// The plots

// The steps of the first process (the one a single-process run has), bucketed.
static size_t first_pid_steps(const report_model *m) {
    size_t n = 0;
    while (n < m->n_steps && m->steps[n].pid == m->steps[0].pid)
        n++;
    return n;
}

static void plot_loss(FILE *out, const report_model *m) {
    size_t n = first_pid_steps(m);
    plot p = {.x0 = (double)m->steps[0].step,
              .x1 = (double)m->steps[n - 1].step,
              .y0 = INFINITY,
              .y1 = -INFINITY};
    for (size_t i = 0; i < n; i++) {
        double l = m->steps[i].loss;
        if (!isfinite(l)) continue;
        p.y0 = fmin(p.y0, l);
        p.y1 = fmax(p.y1, l);
    }
    svg_open(out, "Loss", "loss per step; non-finite losses marked in red at the top");
    if (!isfinite(p.y0)) p.y0 = 0, p.y1 = 1;
    if (p.y1 == p.y0) p.y1 = p.y0 + 1;
    axes(out, &p, "step", "loss");
    size_t stride = n / PLOT_POINTS + 1;
    fputs("<polyline class=\"line\" stroke=\"#1f77b4\" points=\"", out);
    for (size_t i = 0; i < n; i += stride)
        if (isfinite(m->steps[i].loss))
            fprintf(out, "%.1f,%.1f ", px(&p, (double)m->steps[i].step), py(&p, m->steps[i].loss));
    fputs("\"/>", out);
    for (size_t i = 0; i < n; i += stride)
        if (!m->steps[i].loss_finite)
            fprintf(out, "<circle cx=\"%.1f\" cy=\"%d\" r=\"3\" fill=\"#d62728\"/>",
                    px(&p, (double)m->steps[i].step), PAD_T + 4);
    legend(out, 0, "#1f77b4", "loss");
    legend(out, 1, "#d62728", "non-finite loss");
    svg_close(out);
}

static void plot_scale(FILE *out, const report_model *m) {
    size_t n = first_pid_steps(m);
    plot p = {.x0 = (double)m->steps[0].step,
              .x1 = (double)m->steps[n - 1].step,
              .y0 = INFINITY,
              .y1 = -INFINITY,
              .logy = true};
    for (size_t i = 0; i < n; i++) {
        const report_step *s = &m->steps[i];
        if (!s->has_scale || !(s->scale_before > 0)) continue;
        p.y0 = fmin(p.y0, fmin(s->scale_before, s->scale_after > 0 ? s->scale_after : INFINITY));
        p.y1 = fmax(p.y1, fmax(s->scale_before, s->scale_after));
    }
    if (!isfinite(p.y0)) return; // no GradScaler
    p.y0 /= 2, p.y1 *= 2;
    svg_open(out, "Loss scale",
             "GradScaler scale per step on a log axis; skipped steps marked (at a scale of 0: "
             "grey, on the bottom edge)");
    axes(out, &p, "step", "loss scale");
    size_t stride = n / PLOT_POINTS + 1;
    fputs("<polyline class=\"line\" stroke=\"#2ca02c\" points=\"", out);
    for (size_t i = 0; i < n; i += stride)
        if (m->steps[i].has_scale && m->steps[i].scale_before > 0)
            fprintf(out, "%.1f,%.1f ", px(&p, (double)m->steps[i].step),
                    py(&p, m->steps[i].scale_before));
    fputs("\"/>", out);
    bool at_zero = false;            // skipped at a scale of 0 (a collapse past the smallest float)
    for (size_t i = 0; i < n; i++) { // every skipped step, also between plotted points
        const report_step *s = &m->steps[i];
        if (!s->skipped || !(s->scale_before >= 0)) continue;
        at_zero |= s->scale_before == 0;
        fprintf(out, "<path d=\"M%.1f %.1fl-4 -7h8z\" fill=\"%s\"/>", px(&p, (double)s->step),
                py(&p, s->scale_before > 0 ? s->scale_before : p.y0) - 2,
                s->scale_before > 0 ? "#d62728" : "#7f7f7f");
    }
    legend(out, 0, "#2ca02c", "scale");
    legend(out, 1, "#d62728", "skipped step");
    if (at_zero) legend(out, 2, "#7f7f7f", "skipped at scale 0");
    svg_close(out);
}

static void plot_amax(FILE *out, const report_model *m) {
    if (m->n_amax == 0) return;
    // the AMAX_LAYERS layers with the largest amax, largest first (pick: their first row)
    size_t pick[AMAX_LAYERS];
    double best[AMAX_LAYERS];
    size_t n_pick = 0;
    plot p = {.x0 = (double)m->amax[0].step,
              .x1 = (double)m->amax[0].step,
              .y0 = INFINITY,
              .y1 = REPORT_F16_MAX * 4,
              .logy = true};
    for (size_t i = 0; i < m->n_amax;) {
        size_t j = i;
        double top = 0;
        for (; j < m->n_amax && m->amax[j].pid == m->amax[i].pid &&
               m->amax[j].layer_id == m->amax[i].layer_id;
             j++) {
            top = fmax(top, m->amax[j].amax);
            p.x0 = fmin(p.x0, (double)m->amax[j].step);
            p.x1 = fmax(p.x1, (double)m->amax[j].step);
            if (m->amax[j].amax > 0) p.y0 = fmin(p.y0, m->amax[j].amax);
            if (isfinite(m->amax[j].amax)) p.y1 = fmax(p.y1, m->amax[j].amax * 2);
        }
        size_t at = n_pick < AMAX_LAYERS ? n_pick++ : AMAX_LAYERS;
        for (; at > 0 && best[at - 1] < top; at--)
            if (at < AMAX_LAYERS) best[at] = best[at - 1], pick[at] = pick[at - 1];
        if (at < AMAX_LAYERS) best[at] = top, pick[at] = i;
        i = j;
    }
    if (!isfinite(p.y0)) p.y0 = 1e-3;
    p.y0 = fmin(p.y0 / 2, 1e-2);
    svg_open(out, "Forward amax per layer against the fp16 range",
             "largest absolute forward activation per layer and step, log axis, fp16 max 65504");
    axes(out, &p, "step", "amax (log)");
    double top = py(&p, REPORT_F16_MAX);
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.1f\" fill=\"#d62728\" "
            "opacity=\"0.12\"/><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
            "stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>"
            "<text x=\"%d\" y=\"%.1f\" class=\"tick\" fill=\"#d62728\">fp16 max 65504</text>",
            PAD_L, PAD_T, PLOT_W - PAD_R - PAD_L, top - PAD_T, PAD_L, top, PLOT_W - PAD_R, top,
            PAD_L + 4, top - 3);
    for (size_t k = 0; k < n_pick; k++) {
        size_t i = pick[k];
        fprintf(out, "<polyline class=\"line\" stroke=\"%s\" points=\"", palette[k]);
        for (size_t j = i; j < m->n_amax && m->amax[j].pid == m->amax[i].pid &&
                           m->amax[j].layer_id == m->amax[i].layer_id;
             j++)
            fprintf(out, "%.1f,%.1f ", px(&p, (double)m->amax[j].step), py(&p, m->amax[j].amax));
        fputs("\"/>", out);
        const char *name = report_layer_name(m, m->amax[i].pid, m->amax[i].layer_id);
        legend(out, (int)k, palette[k], name ? name : "?");
    }
    svg_close(out);
}

#define CLIP_MEDIANS 3.0

static void plot_breakdown(FILE *out, const report_model *m) {
    size_t n = first_pid_steps(m);
    bool gpu = m->perf.launches > 0;
    const char *names[4] = {"GEMM ops", "casts", "other ops", "rest of step"};
    if (gpu) names[0] = "GPU kernels", names[1] = "copies", names[2] = "GPU idle", names[3] = NULL;
    double top = 0;
    for (size_t i = 0; i < n; i++)
        if (m->steps[i].start_ns >= 0)
            top = fmax(top, (double)(m->steps[i].end_ns - m->steps[i].start_ns));
    if (!(top > 0)) return;
    // a step far longer than the others (the first one's set-up) would flatten them: the axis
    // stops at CLIP_MEDIANS times the median, and a longer bar is drawn to it, its time written
    // above it
    const double clip = CLIP_MEDIANS * report_median_step_ns(m);
    if (top > clip) top = clip;
    plot p = {.x0 = (double)m->steps[0].step - 0.5,
              .x1 = (double)m->steps[n - 1].step + 0.5,
              .y0 = 0,
              .y1 = top / 1e6 * 1.05};
    svg_open(out, gpu ? "Step time: GPU busy, copies, idle" : "Step time: where the host time went",
             "stacked bars of each step's time in milliseconds");
    axes(out, &p, "step", "ms");
    size_t stride = n / PLOT_POINTS + 1;
    double w = fmax(1.0, (PLOT_W - PAD_L - PAD_R) / (double)(n / stride + 1) - 1);
    const char *colors[4] = {"#1f77b4", "#ff7f0e", "#9467bd", "#c7c7c7"};
    for (size_t i = 0; i < n; i += stride) {
        const report_step *s = &m->steps[i];
        if (s->start_ns < 0) continue;
        double dur = (double)(s->end_ns - s->start_ns);
        const double fit = dur > top ? top / dur : 1; // a clipped bar keeps its proportions
        double part[4];
        if (gpu) {
            part[0] = (double)s->gpu_busy_ns;
            part[1] = (double)s->copy_ns;
            part[2] = fmax(0, dur - part[0] - part[1]);
            part[3] = 0;
        } else {
            part[0] = (double)s->gemm_ns;
            part[1] = (double)s->cast_ns;
            part[2] = fmax(0, (double)(s->op_ns - s->gemm_ns - s->cast_ns));
            part[3] = fmax(0, dur - (double)s->op_ns);
        }
        double acc = 0;
        for (int k = 0; k < 4; k++) {
            part[k] *= fit;
            if (part[k] <= 0) continue;
            double y_hi = py(&p, (acc + part[k]) / 1e6), y_lo = py(&p, acc / 1e6);
            fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                    px(&p, (double)s->step) - w / 2, y_hi, w, y_lo - y_hi, colors[k]);
            acc += part[k];
        }
        if (fit < 1)
            fprintf(out,
                    "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"start\">%.4g "
                    "ms</text>",
                    px(&p, (double)s->step) + w / 2 + 2, py(&p, top / 1e6) + 10, dur / 1e6);
    }
    for (int k = 0; k < 4 && names[k]; k++)
        legend(out, k, colors[k], names[k]);
    svg_close(out);
}

static void plot_roofline(FILE *out, const report_model *m) {
    const report_perf *pf = &m->perf;
    if (pf->launches == 0) return;
    const report_gpu *g = &pf->gpu;
    plot p = {.x0 = -2, .x1 = 4, .y0 = 1e9, .y1 = g->peak_flops * 2, .logy = true};
    size_t points = 0;
    for (size_t i = 0; i < pf->n_kernels; i++)
        points +=
            pf->kernels[i].flops > 0 && pf->kernels[i].bytes > 0 && pf->kernels[i].total_ns > 0;
    svg_open(out, "Roofline: kernels with analytic FLOPs",
             "achieved FLOP/s against arithmetic intensity, log-log, with the card's roofs");
    axes(out, &p, "arithmetic intensity, log10 FLOP/byte", "FLOP/s (log)");
    // the roof: min(peak, AI * bandwidth)
    fputs("<polyline class=\"line\" stroke=\"#333\" points=\"", out);
    for (double x = p.x0; x <= p.x1 + 1e-9; x += 0.05)
        fprintf(out, "%.1f,%.1f ", px(&p, x),
                py(&p, fmin(g->peak_flops, pow(10, x) * g->bandwidth)));
    fputs("\"/>", out);
    size_t k = 0;
    for (size_t i = 0; i < pf->n_kernels; i++) {
        const report_kernel *x = &pf->kernels[i];
        if (!(x->flops > 0 && x->bytes > 0 && x->total_ns > 0)) continue;
        double ai = log10(x->flops / x->bytes), perf = x->flops / ((double)x->total_ns * 1e-9);
        const char *color = (double)x->total_ns / (double)x->launches < REPORT_LAUNCH_BOUND_NS
                                ? "#ff7f0e"
                                : "#1f77b4";
        fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" opacity=\"0.8\"><title>",
                px(&p, fmax(p.x0, fmin(p.x1, ai))), py(&p, perf), color);
        esc(out, x->name);
        const char *layer = report_layer_name(m, x->layer_pid, x->layer_id);
        if (layer) { // where most of its time ran
            fputs(" in ", out);
            esc(out, layer);
            if (x->n_layers > 1)
                fprintf(out, " and %d other layer%s", (int)x->n_layers - 1,
                        x->n_layers > 2 ? "s" : "");
        }
        fprintf(out, ": %lld launches, %.3g TFLOP/s</title></circle>", (long long)x->launches,
                perf / 1e12);
        k++;
    }
    legend(out, 0, "#333", "roof");
    legend(out, 1, "#1f77b4", "kernel");
    legend(out, 2, "#ff7f0e", "kernel < 5 us");
    svg_close(out);
    fprintf(out,
            "<p class=\"note\">%zu of %zu kernel names carry analytic FLOPs. Ceilings: %.0f "
            "TFLOP/s, %.2f TB/s, %s",
            k, pf->n_kernels, g->peak_flops / 1e12, g->bandwidth / 1e12,
            g->peak_assumed ? "assumed from the default table: " : "");
    esc(out, g->table_entry);
    fputs(".</p>\n", out);
}

// ---------------------------------------------------------------------------------------------
// The page

static const char style[] =
    "body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:24px auto;padding:0 16px;"
    "color:#222}h1{font-size:20px}h2{font-size:17px;margin-top:28px}.verdict{padding:10px 14px;"
    "border-left:4px solid #888;background:#f5f5f5}.error{border-color:#d62728}"
    ".warning{border-color:#e6a100}.info{border-color:#1f77b4}.finding{margin:14px 0;padding:8px "
    "14px;border-left:4px solid #888;background:#fafafa}.sev{font-weight:600;text-transform:"
    "uppercase;font-size:12px}.rule{color:#666;font-family:monospace}.where,.ev{color:#444;"
    "font-size:13px}.detail{white-space:pre-wrap}figure{margin:12px 0}figcaption{font-weight:600}"
    ".frame{fill:none;stroke:#999}.grid{stroke:#eee}.tick{font-size:11px;fill:#555}"
    ".label{font-size:12px;fill:#333}.line{fill:none;stroke-width:1.6}.note{color:#555;"
    "font-size:13px}table{border-collapse:collapse}td{padding:2px 10px 2px 0;vertical-align:top}";

static void finding(FILE *out, const report_finding *f, size_t i) {
    const char *sev = amp_severity_name(f->severity);
    fprintf(out,
            "<div class=\"finding %s\"><span class=\"sev\">%zu. %s</span> "
            "<span class=\"rule\">[%s]</span><div><b>",
            sev, i + 1, sev, f->rule);
    esc(out, f->title);
    fputs("</b></div><div class=\"where\">", out);
    if (f->first_step >= 0) {
        if (f->last_step > f->first_step)
            fprintf(out, "steps %lld-%lld", (long long)f->first_step, (long long)f->last_step);
        else
            fprintf(out, "step %lld", (long long)f->first_step);
    }
    if (f->layer[0]) {
        fputs(f->first_step >= 0 ? ", layer " : "layer ", out);
        esc(out, f->layer);
    }
    if (f->op[0]) {
        fputs(", op ", out);
        esc(out, f->op);
    }
    if (f->phase[0]) fprintf(out, " (%s)", f->phase);
    fputs("</div>", out);
    if (f->detail[0]) {
        fputs("<div class=\"detail\">", out);
        esc(out, f->detail);
        fputs("</div>", out);
    }
    bool any = false;
    for (int k = 0; k < f->n_evidence; k++) {
        if (isnan(f->evidence[k].value)) continue;
        fprintf(out, "%s%s=%.6g", any ? ", " : "<div class=\"ev\">evidence: ", f->evidence[k].key,
                f->evidence[k].value);
        any = true;
    }
    if (any) fputs("</div>", out);
    fputs("<div><b>Fix:</b> ", out);
    esc(out, f->advice);
    fputs("</div></div>\n", out);
}

void report_format_html(FILE *out, const report_model *m, const report_findings *f) {
    char verdict[2048];
    report_verdict(m, f, verdict, sizeof verdict);
    size_t counts[3] = {0};
    for (size_t i = 0; i < f->n; i++)
        counts[f->v[i].severity]++;
    const char *top = counts[AMP_SEVERITY_ERROR]     ? "error"
                      : counts[AMP_SEVERITY_WARNING] ? "warning"
                                                     : "info";
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<meta name=\"viewport\" content=\"width=device-width\"><title>ampprobe report: ",
          out);
    esc(out, m->path);
    fprintf(out, "</title><style>%s</style></head><body>\n<h1>ampprobe report: ", style);
    esc(out, m->path);
    fprintf(out, "</h1>\n<p class=\"verdict %s\">", top);
    esc(out, verdict);
    fputs("</p>\n", out);

    report_summary s;
    report_summarize(m, &s);
    fputs("<table>", out);
    if (m->command) {
        fputs("<tr><td>command</td><td><code>", out);
        esc(out, m->command);
        fputs("</code></td></tr>", out);
    }
    if (m->device) {
        fputs("<tr><td>device</td><td>", out);
        esc(out, m->device);
        fputs("</td></tr>", out);
    }
    report_coverage cov[3];
    for (int i = 0, n = report_coverage_lines(m, cov); i < n; i++) {
        fprintf(out, "<tr><td>%s</td><td>", cov[i].label);
        esc(out, cov[i].text);
        fprintf(out, "%s</td></tr>", cov[i].note);
    }
    if (s.steps) {
        char steps[64];
        report_steps_phrase(&s, false, steps, sizeof steps);
        fprintf(out,
                "<tr><td>steps</td><td>%s (%lld-%lld), %lld skipped, %lld with a "
                "non-finite loss</td></tr><tr><td>final loss</td><td>%.6g</td></tr>",
                steps, (long long)s.first_step, (long long)s.last_step, (long long)s.skipped,
                (long long)s.nonfinite_losses, s.final_loss);
        double step_ns = report_median_step_ns(m);
        if (!isnan(step_ns))
            fprintf(out, "<tr><td>median step time</td><td>%.3f ms</td></tr>", step_ns / 1e6);
        if (!isnan(s.peak_mem))
            fprintf(out, "<tr><td>peak memory</td><td>%.1f MiB held by tensors</td></tr>",
                    s.peak_mem / 1048576);
        if (!isnan(s.scale_min))
            fprintf(out, "<tr><td>loss scale</td><td>%.9g .. %.9g</td></tr>", s.scale_min,
                    s.scale_max);
    } else {
        fputs("<tr><td>steps</td><td>none recorded</td></tr>", out);
    }
    fputs("</table>\n", out);

    fprintf(out, "<h2>Findings (%zu error%s, %zu warning%s, %zu info)</h2>\n",
            counts[AMP_SEVERITY_ERROR], counts[AMP_SEVERITY_ERROR] == 1 ? "" : "s",
            counts[AMP_SEVERITY_WARNING], counts[AMP_SEVERITY_WARNING] == 1 ? "" : "s",
            counts[AMP_SEVERITY_INFO]);
    for (size_t i = 0; i < f->n; i++)
        finding(out, &f->v[i], i);
    if (f->n == 0) fputs("<p>None.</p>\n", out);

    fputs("<h2>Plots</h2>\n", out);
    if (s.steps) {
        plot_loss(out, m);
        plot_scale(out, m);
        plot_amax(out, m);
        plot_breakdown(out, m);
    }
    plot_roofline(out, m);
    if (s.steps == 0 && m->perf.launches == 0) fputs("<p>Nothing recorded to plot.</p>\n", out);
    fputs("</body></html>\n", out);
}
