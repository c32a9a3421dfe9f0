/*
 * format_html.c — the report as one self-contained HTML page (no script, no external resource):
 * the verdict, the findings, and inline SVG plots drawn from the model:
 *   - loss curve (non-finite losses marked at the top edge; on a log axis when it spans three
 *     decades, the step the training diverged at dashed);
 *   - loss-scale history on a log2 axis, skipped steps marked;
 *   - per-layer forward amax over steps on a log axis against the fp16 max (65504), the steps
 *     where a layer's forward output held NaN/inf marked at the top edge;
 *   - step-time breakdown: GPU busy / copies / idle per step with kernels, else the host time of
 *     GEMM ops / casts / other recorded ops / the rest of the step;
 *   - roofline scatter of the kernels with analytic FLOPs (only when kernels were recorded).
 * A run longer than PLOT_POINTS steps is drawn in PLOT_POINTS buckets of consecutive steps, each
 * drawn from all of its steps: the loss as the bucket's mean within its min-max band, the scale
 * from the value the bucket began with to the one it left within its min-max band, the step time
 * as the bucket's mean breakdown with its longest step marked; every non-finite loss and every
 * skipped step is marked whatever the bucket. Every user string goes through esc().
 */
#include "report.h"

#include "amp-impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_W 760
#define PLOT_H 230
#define PAD_L 76
#define PAD_R 150 // room for the legend
#define PAD_T 12
#define PAD_B 34
#define PLOT_POINTS 400
#define AMAX_LAYERS 8
#define TICK_CHAR_W 6.5 // px: a generous width of a character of a tick label (11px font)
#define BAR_MAX_W 48    // px: a run of a few steps gets bars, not slabs

// no red: red marks what went wrong (NaN/inf, skipped steps, the fp16 max)
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#bcbd22",
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
            if (amp_c1_control((const char *)p)) // (as the text report: no C1 control)
                fputc('?', out), p++;
            else if ((*p >= 0x20 && *p != 0x7f) || *p == '\n' || *p == '\t')
                fputc(*p, out);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A plot: data ranges mapped onto the SVG box (y optionally log10)

typedef struct plot {
    double x0, x1, y0, y1;
    bool logy;
    bool xsteps; // x counts steps: whole-number ticks
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

// The x range of steps first..last, widened by pad on each side; a single step stands in the
// middle.
static void plot_steps(plot *p, int64_t first, int64_t last, double pad) {
    p->x0 = (double)first - pad;
    p->x1 = (double)last + pad;
    if (p->x1 - p->x0 < 1) p->x0 -= 0.5, p->x1 += 0.5;
    p->xsteps = true;
}

// note (NULL: none) follows the title: what a point or a bar is when it stands for several steps.
static void svg_open(FILE *out, const char *title, const char *note, const char *label) {
    fputs("<figure><figcaption>", out);
    esc(out, title);
    if (note) {
        fputs(" <span class=\"note\">(", out);
        esc(out, note);
        fputs(")</span>", out);
    }
    fprintf(out,
            "</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
            PLOT_W, PLOT_H, PLOT_W, PLOT_H);
    esc(out, label);
    fputs("\">", out);
}

#define MAX_TICKS 7 // step_tick's distance: at most 6 of them in the span, so 7 ticks

// The smallest of 1, 2 or 5 times a power of ten that is at least d (> 0).
static double nice_step(double d) {
    double t = pow(10, floor(log10(d)));
    return d <= t ? t : d <= 2 * t ? 2 * t : d <= 5 * t ? 5 * t : 10 * t;
}

// The distance between step ticks: 1, 2 or 5 times a power of ten, at most 6 of them.
static double step_tick(double span) {
    return span <= 6 ? 1 : nice_step(span / 6);
}

// The y ticks of p into v (at most MAX_TICKS), their count: round values inside the range (1, 2
// or 5 times a power of ten apart; on a log axis whole powers of ten, every k-th decade), or
// five evenly spaced ones where the range holds fewer than two round values.
static int y_ticks(const plot *p, double v[MAX_TICKS], bool *round) {
    int n = 0;
    if (p->logy && p->y0 > 0 && p->y1 > p->y0) {
        double a = ceil(log10(p->y0) - 1e-9), b = floor(log10(p->y1) + 1e-9);
        double stride = ceil((b - a + 1) / (MAX_TICKS - 1));
        for (double e = a; e <= b && n < MAX_TICKS; e += stride)
            v[n++] = pow(10, e);
    } else if (!p->logy && p->y1 > p->y0) {
        double d = nice_step((p->y1 - p->y0) / (MAX_TICKS - 1));
        for (double k = ceil(p->y0 / d - 1e-9); k * d <= p->y1 + d * 1e-9 && n < MAX_TICKS; k++)
            v[n++] = k * d + 0.0; // (no -0)
    }
    if ((*round = n >= 2)) return n;
    for (n = 0; n <= 4; n++)
        v[n] = p->logy ? pow(10, log10(p->y0) + n * (log10(p->y1) - log10(p->y0)) / 4)
                       : p->y0 + n * (p->y1 - p->y0) / 4;
    return n;
}

static void axes(FILE *out, const plot *p, const char *xlabel, const char *ylabel) {
    int x0 = PAD_L, x1 = PLOT_W - PAD_R, y0 = PLOT_H - PAD_B, y1 = PAD_T;
    fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"frame\"/>", x0, y1,
            x1 - x0, y0 - y1);
    double v[MAX_TICKS];
    char label[MAX_TICKS][24];
    bool round;
    int n = y_ticks(p, v, &round);
    // as many digits as it takes to tell the ticks apart (a loss that barely moves); a round
    // value whole (1000, not 1e+03)
    for (int digits = round ? 6 : 3; digits <= 10; digits++) {
        bool distinct = true;
        for (int i = 0; i < n; i++) {
            snprintf(label[i], sizeof label[i], "%.*g", digits, v[i]);
            distinct &= i == 0 || strcmp(label[i], label[i - 1]) != 0;
        }
        if (distinct) break;
    }
    for (int i = 0; i < n; i++) {
        double y = py(p, v[i]);
        fprintf(out,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>",
                x0, y, x1, y, x0 - 4, y + 4, label[i]);
    }
    if (p->xsteps) { // steps are whole numbers: each tick one, a round distance apart
        const double d = step_tick(p->x1 - p->x0), first = ceil(p->x0 / d) * d + 0.0; // (no -0)
        // counted, not summed: t += d stands still where d is below a double's spacing (steps
        // numbered in the 1e17s)
        for (int i = 0; i < MAX_TICKS && first + i * d <= p->x1; i++)
            fprintf(out,
                    "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%.0f</text>",
                    px(p, first + i * d), y0 + 14, first + i * d);
    } else {
        for (int i = 0; i <= 4; i++) {
            double t = p->x0 + i * (p->x1 - p->x0) / 4;
            fprintf(out,
                    "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%.4g</text>",
                    px(p, t), y0 + 14, t);
        }
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

#define LEGEND_BYTES 23 // what fits beside a plot

// The text cut between two characters to leave room for suffix, into buf[LEGEND_BYTES + 1].
static void legend_text(char *buf, const char *text, const char *suffix) {
    const size_t room = LEGEND_BYTES - strlen(suffix);
    size_t k = 0;
    for (size_t n; text[k] && (n = amp_utf8_seq(text + k, SIZE_MAX)) && k + n <= room;)
        k += n;
    snprintf(buf, LEGEND_BYTES + 1, "%.*s%s", (int)k, text, suffix);
}

static void legend(FILE *out, int i, const char *color, const char *text) {
    int x = PLOT_W - PAD_R + 10, y = PAD_T + 12 + 16 * i;
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\" class=\"tick\">",
            x, y - 9, color, x + 14, y);
    char buf[LEGEND_BYTES + 1]; // keep the legend inside the figure
    legend_text(buf, text, "");
    esc(out, buf);
    fputs("</text>", out);
}

static void svg_close(FILE *out) {
    fputs("</svg></figure>\n", out);
}

// A line of one point draws nothing: a dot shows it.
static void lone_point(FILE *out, size_t points, double x, double y, const char *color) {
    if (points == 1)
        fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", x, y, color);
}

// A mark on the top edge at x: a value that is not a number (NaN/inf) has no place on the axis.
static void top_mark(FILE *out, double x, const char *color) {
    fprintf(out, "<circle cx=\"%.1f\" cy=\"%d\" r=\"3\" fill=\"%s\">", x, PAD_T + 4, color);
}

// ---------------------------------------------------------------------------------------------
// Buckets: the steps of one process in at most PLOT_POINTS runs of consecutive steps, each drawn
// from all of its steps. In a run of several processes (a script's trainings, the ranks of a
// data-parallel job) the loss, scale and step-time plots are of the one a reader needs: the one
// the top error or warning is about (report_lead_pid), else the first; their captions name it.

typedef struct bucketing {
    const report_step *s; // the process's steps
    size_t n, nb;         // steps, buckets
    char who[192];        // "tiny_gpt (pid 12), 1 of 2 processes" in a run of several; else ""
} bucketing;

static void bucketing_of(const report_model *m, const report_findings *f, bucketing *k) {
    const report_process *p = report_process_find(m, report_lead_pid(m, f));
    *k = (bucketing){.s = p ? m->steps + p->step0 : m->steps, .n = p ? p->n_steps : m->n_steps};
    k->nb = k->n < PLOT_POINTS ? k->n : PLOT_POINTS;
    const size_t procs = report_processes_with_steps(m);
    if (p && procs > 1) {
        char name[128];
        report_process_phrase(m, p->pid, name, sizeof name);
        snprintf(k->who, sizeof k->who, "%s, 1 of %zu processes", name, procs);
    }
}

// A plot's title, "Loss -- tiny_gpt (pid 12), 1 of 2 processes" in a run of several.
static const char *plot_title(const bucketing *k, const char *what, char *buf, size_t size) {
    snprintf(buf, size, "%s%s%s", what, k->who[0] ? " \u2014 " : "", k->who);
    return buf;
}

// In a run of several processes, which one the plots of one process follow, and why.
static void plots_note(FILE *out, const report_model *m, const report_findings *f,
                       const bucketing *k) {
    if (!k->who[0]) return;
    const int32_t pid = k->s[0].pid;
    const bool top = f->n && f->v[0].severity >= AMP_SEVERITY_WARNING && f->v[0].pid == pid;
    char proc[128];
    report_process_phrase(m, pid, proc, sizeof proc);
    fprintf(out,
            "<p class=\"note\">The run has %zu processes with steps: the loss, loss-scale "
            "and step-time plots are of ",
            report_processes_with_steps(m));
    esc(out, proc);
    fprintf(out, ", %s; the amax plot has the layers of all of them.</p>\n",
            top ? "the one the top finding is about" : "the first");
}

// The steps of bucket b: k->s[*lo .. *hi).
static void bucket_steps(const bucketing *k, size_t b, size_t *lo, size_t *hi) {
    *lo = b * k->n / k->nb;
    *hi = (b + 1) * k->n / k->nb;
}

// What a bucket is, for a plot's caption: NULL when each holds one step.
static const char *bucket_note(const bucketing *k, const char *what, char *buf, size_t size) {
    if (k->nb == k->n) return NULL;
    const size_t least = k->n / k->nb, most = (k->n + k->nb - 1) / k->nb;
    char sizes[48];
    if (most > least)
        snprintf(sizes, sizeof sizes, "%zu-%zu", least, most);
    else
        snprintf(sizes, sizeof sizes, "%zu", least);
    snprintf(buf, size, "%zu steps in %zu buckets of %s steps: %s", k->n, k->nb, sizes, what);
    return buf;
}

// "step S" or "steps A-B".
static void steps_phrase(char *buf, size_t size, int64_t a, int64_t b) {
    if (a == b)
        snprintf(buf, size, "step %lld", (long long)a);
    else
        snprintf(buf, size, "steps %lld-%lld", (long long)a, (long long)b);
}

// A bucket's range of values; min > max: it has none.
typedef struct band_point {
    double x, min, max;
} band_point;

// The band of a bucketed line: each bucket's largest value left to right, its smallest back.
static void draw_band(FILE *out, const plot *p, const char *color, const band_point *v, size_t n) {
    fprintf(out, "<polygon fill=\"%s\" points=\"", color);
    for (size_t b = 0; b < 2 * n; b++) {
        const band_point *r = &v[b < n ? b : 2 * n - 1 - b];
        if (r->min <= r->max)
            fprintf(out, "%.1f,%.1f ", px(p, r->x), py(p, b < n ? r->max : r->min));
    }
    fputs("\"/>", out);
}

// ---------------------------------------------------------------------------------------------
// The plots

typedef struct loss_bucket {
    double x;                   // the middle of its steps
    double min, max, mean;      // of its finite losses (finite 0: NaN)
    size_t finite, nonfinite;   // losses of each kind
    size_t first_bad, last_bad; // indices of its first and last non-finite loss
} loss_bucket;

static loss_bucket loss_bucket_of(const bucketing *k, size_t b) {
    size_t lo, hi;
    bucket_steps(k, b, &lo, &hi);
    loss_bucket r = {.x = ((double)k->s[lo].step + (double)k->s[hi - 1].step) / 2,
                     .min = INFINITY,
                     .max = -INFINITY};
    double sum = 0;
    for (size_t i = lo; i < hi; i++) {
        const report_step *s = &k->s[i];
        if (s->loss_nonfinite) { // as the summary counts them
            if (!r.nonfinite++) r.first_bad = i;
            r.last_bad = i;
        } else if (isfinite(s->loss)) {
            r.finite++;
            sum += s->loss;
            r.min = fmin(r.min, s->loss);
            r.max = fmax(r.max, s->loss);
        }
    }
    r.mean = r.finite ? sum / (double)r.finite : NAN;
    return r;
}

// The step a divergence finding of process pid says its training diverged at; -1: none.
static int64_t diverged_told(const report_findings *f, int32_t pid) {
    double step;
    for (size_t i = 0; i < f->n; i++) {
        const report_finding *x = &f->v[i];
        if (strcmp(x->rule, "divergence") == 0 && x->pid == pid &&
            report_finding_evidence_of(x, "diverged_step", &step))
            return (int64_t)step;
    }
    return -1;
}

// diverged: the step the plotted process's training diverged at (diverged_told), marked with a
// dashed line; -1: none. A loss that spans three decades or more (a divergence, a
// blow-up) is drawn on a log axis, where its start stays readable.
static void plot_loss(FILE *out, const bucketing *k, int64_t diverged) {
    plot p = {.y0 = INFINITY, .y1 = -INFINITY};
    plot_steps(&p, k->s[0].step, k->s[k->n - 1].step, 0);
    for (size_t i = 0; i < k->n; i++) {
        double l = k->s[i].loss;
        if (!k->s[i].loss_finite || !isfinite(l)) continue;
        p.y0 = fmin(p.y0, l);
        p.y1 = fmax(p.y1, l);
    }
    p.logy = p.y0 > 0 && p.y1 >= 1000 * p.y0;
    const bool marked = diverged >= k->s[0].step && diverged <= k->s[k->n - 1].step;
    char note[256], title[256], label[160];
    snprintf(label, sizeof label, "loss per step%s; non-finite losses marked in red at the top%s",
             p.logy ? " on a log axis" : "",
             marked ? "; the step the training diverged at dashed" : "");
    svg_open(out, plot_title(k, "Loss", title, sizeof title),
             bucket_note(k,
                         "the line is each bucket's mean loss, the band its smallest and largest",
                         note, sizeof note),
             label);
    if (!isfinite(p.y0)) p.y0 = 0, p.y1 = 1;
    if (p.y1 == p.y0) p.y0 -= 0.5, p.y1 += 0.5; // one value: in the middle
    axes(out, &p, "step", "loss");
    loss_bucket buckets[PLOT_POINTS];
    for (size_t b = 0; b < k->nb; b++)
        buckets[b] = loss_bucket_of(k, b);
    if (k->nb < k->n) {
        band_point band[PLOT_POINTS];
        for (size_t b = 0; b < k->nb; b++) // (no finite loss: min INFINITY)
            band[b] = (band_point){buckets[b].x, buckets[b].min, buckets[b].max};
        draw_band(out, &p, "#aec7e8", band, k->nb);
    }
    size_t points = 0;
    double x = 0, y = 0;
    fputs("<polyline class=\"line\" stroke=\"#1f77b4\" points=\"", out);
    for (size_t b = 0; b < k->nb; b++) {
        if (!buckets[b].finite) continue;
        x = px(&p, buckets[b].x), y = py(&p, buckets[b].mean), points++;
        fprintf(out, "%.1f,%.1f ", x, y);
    }
    fputs("\"/>", out);
    lone_point(out, points, x, y, "#1f77b4");
    for (size_t b = 0; b < k->nb; b++) { // every non-finite loss: a mark for each bucket with one
        const loss_bucket r = buckets[b];
        if (!r.nonfinite) continue;
        char where[64];
        steps_phrase(where, sizeof where, k->s[r.first_bad].step, k->s[r.last_bad].step);
        top_mark(out, px(&p, (double)k->s[r.first_bad].step), "#d62728");
        fprintf(out, "<title>%s: %zu non-finite loss%s</title></circle>", where, r.nonfinite,
                r.nonfinite == 1 ? "" : "es");
    }
    if (marked) {
        const double dx = px(&p, (double)diverged);
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ff7f0e\" "
                "stroke-dasharray=\"4 3\"><title>training diverged at step %lld</title></line>",
                dx, PAD_T, dx, PLOT_H - PAD_B, (long long)diverged);
    }
    legend(out, 0, "#1f77b4", k->nb < k->n ? "loss, bucket mean" : "loss");
    legend(out, 1, "#d62728", "non-finite loss");
    int next = 2;
    if (k->nb < k->n) legend(out, next++, "#aec7e8", "bucket min-max");
    if (marked) legend(out, next, "#ff7f0e", "diverged");
    svg_close(out);
}

typedef struct scale_bucket {
    double x; // the middle of its steps
    // its first step with a scale_before > 0 and its last with a scale_after > 0 (indices; n:
    // none), and the smallest and largest of those scales (min INFINITY: none)
    size_t first, last;
    double min, max;
    // its skipped steps at a scale > 0 and at a scale of 0: how many, their first and last
    size_t skipped, first_skip, last_skip;
    size_t at_zero, first_zero, last_zero;
} scale_bucket;

// A scale the plot draws: above 0 and finite (the record API takes any double), at fp32's range
// at most (2^-160 to 2^130: an fp32 scale never leaves it, and the log axis keeps its ends
// finite; 5e-324 or 1e308 made them NaN).
static bool plotted(double v) {
    return v > 0 && v < INFINITY;
}
static double scale_at(double v) {
    return fmin(fmax(v, 0x1p-160), 0x1p130);
}

static scale_bucket scale_bucket_of(const bucketing *k, size_t b) {
    size_t lo, hi;
    bucket_steps(k, b, &lo, &hi);
    scale_bucket r = {.x = ((double)k->s[lo].step + (double)k->s[hi - 1].step) / 2,
                      .first = k->n,
                      .last = k->n,
                      .min = INFINITY,
                      .max = -INFINITY};
    for (size_t i = lo; i < hi; i++) {
        const report_step *s = &k->s[i];
        if (s->skipped && plotted(s->scale_before)) {
            if (!r.skipped++) r.first_skip = i;
            r.last_skip = i;
        } else if (s->skipped && s->scale_before == 0) { // a collapse past the smallest float
            if (!r.at_zero++) r.first_zero = i;
            r.last_zero = i;
        }
        if (!s->has_scale) continue;
        if (plotted(s->scale_before)) {
            if (r.first == k->n) r.first = i;
            r.min = fmin(r.min, scale_at(s->scale_before));
            r.max = fmax(r.max, scale_at(s->scale_before));
        }
        if (plotted(s->scale_after)) {
            r.last = i;
            r.min = fmin(r.min, scale_at(s->scale_after));
            r.max = fmax(r.max, scale_at(s->scale_after));
        }
    }
    return r;
}

// A skipped-step mark: a triangle pointing down at (x, y).
static void skip_mark(FILE *out, double x, double y, const char *color, const char *where,
                      size_t n) {
    fprintf(
        out,
        "<path d=\"M%.1f %.1fl-4 -7h8z\" fill=\"%s\"><title>%s: %zu skipped step%s</title></path>",
        x, y - 2, color, where, n, n == 1 ? "" : "s");
}

static void plot_scale(FILE *out, const bucketing *k) {
    plot p = {.y0 = INFINITY, .y1 = -INFINITY, .logy = true};
    plot_steps(&p, k->s[0].step, k->s[k->n - 1].step, 0);
    for (size_t i = 0; i < k->n; i++) {
        const report_step *s = &k->s[i];
        if (!s->has_scale || !plotted(s->scale_before)) continue;
        const double after = plotted(s->scale_after) ? scale_at(s->scale_after) : NAN;
        p.y0 = fmin(p.y0, fmin(scale_at(s->scale_before), after));
        p.y1 = fmax(p.y1, fmax(scale_at(s->scale_before), after));
    }
    if (!isfinite(p.y0)) return; // no GradScaler
    p.y0 /= 2, p.y1 *= 2;
    char note[256], title[256];
    svg_open(out, plot_title(k, "Loss scale", title, sizeof title),
             bucket_note(k,
                         "the line runs from the scale each bucket began with to the one it left, "
                         "the band spans its smallest and largest; a mark for each bucket with a "
                         "skipped step",
                         note, sizeof note),
             "GradScaler scale per step on a log axis, before and after each step's update; "
             "skipped steps marked (at a scale of 0: grey, on the bottom edge)");
    axes(out, &p, "step", "loss scale");
    scale_bucket buckets[PLOT_POINTS];
    for (size_t b = 0; b < k->nb; b++)
        buckets[b] = scale_bucket_of(k, b);
    if (k->nb < k->n) {
        band_point band[PLOT_POINTS];
        for (size_t b = 0; b < k->nb; b++) // (no scale: min INFINITY)
            band[b] = (band_point){buckets[b].x, buckets[b].min, buckets[b].max};
        draw_band(out, &p, "#98df8a", band, k->nb);
    }
    // each bucket (each step) from the scale it began with to the one its last update left: a
    // backoff drops at the step that overflowed, a growth at the last step shows
    size_t points = 0;
    double x = 0, y = 0;
    fputs("<polyline class=\"line\" stroke=\"#2ca02c\" points=\"", out);
    for (size_t b = 0; b < k->nb; b++) {
        const scale_bucket r = buckets[b];
        if (r.first < k->n) {
            x = px(&p, (double)k->s[r.first].step),
            y = py(&p, scale_at(k->s[r.first].scale_before));
            fprintf(out, "%.1f,%.1f ", x, y);
            points++;
        }
        if (r.last < k->n) {
            x = px(&p, (double)k->s[r.last].step), y = py(&p, scale_at(k->s[r.last].scale_after));
            fprintf(out, "%.1f,%.1f ", x, y);
            points++;
        }
    }
    fputs("\"/>", out);
    if (points) // where the scale ended (also the one point of a one-step run)
        fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#2ca02c\"/>", x, y);
    bool at_zero = false;
    for (size_t b = 0; b < k->nb; b++) { // every skipped step: a mark for each bucket with one
        const scale_bucket r = buckets[b];
        char where[64];
        if (r.skipped) {
            const report_step *s = &k->s[r.first_skip];
            steps_phrase(where, sizeof where, s->step, k->s[r.last_skip].step);
            skip_mark(out, px(&p, (double)s->step), py(&p, scale_at(s->scale_before)), "#d62728",
                      where, r.skipped);
        }
        if (r.at_zero) {
            at_zero = true;
            const report_step *s = &k->s[r.first_zero];
            steps_phrase(where, sizeof where, s->step, k->s[r.last_zero].step);
            skip_mark(out, px(&p, (double)s->step), py(&p, p.y0), "#7f7f7f", where, r.at_zero);
        }
    }
    legend(out, 0, "#2ca02c", "scale");
    legend(out, 1, "#d62728", "skipped step");
    int row = 2;
    if (at_zero) legend(out, row++, "#7f7f7f", "skipped at scale 0");
    if (k->nb < k->n) legend(out, row, "#98df8a", "bucket min-max");
    svg_close(out);
}

// The first step of the amax bucket after step's; false when none can be (past INT64_MAX). In
// unsigned and by the distance to it: steps may be numbered anywhere in int64_t.
static bool next_bucket(const report_model *m, int64_t step, int64_t *next) {
    const uint64_t w = (uint64_t)m->amax_width,
                   into = ((uint64_t)step - (uint64_t)m->amax_first) % w;
    const int64_t ahead = (int64_t)(w - into); // 1..w
    if (step > INT64_MAX - ahead) return false;
    *next = step + ahead;
    return true;
}

// The largest step at most x (a plot's edge, a double that may be 2^63).
static int64_t step_at_most(double x) {
    if (x >= 0x1p63) return INT64_MAX;
    return x < -0x1p63 ? INT64_MIN : (int64_t)floor(x);
}

// An event saying that the forward output of the layer of amax row a held NaN/inf.
static bool forward_nonfinite(const report_event *e, const report_amax *a) {
    return e->pid == a->pid && e->layer_id == a->layer_id && e->phase &&
           strcmp(e->phase, "fwd") == 0 && strncmp(e->kind, "nonfinite_", 10) == 0;
}

static void nonfinite_mark(FILE *out, const plot *p, const char *name, int64_t step) {
    top_mark(out, px(p, (double)step), "#d62728");
    fputs("<title>", out);
    esc(out, name);
    fprintf(out, ": NaN/inf in its forward output at step %lld</title></circle>", (long long)step);
}

// The NaN/inf in the forward of the layer whose amax rows are a..end (one pid and layer), marked
// at the top edge: the first step of each bucket whose statistics saw NaN or +inf; each step an
// event names (an aggregate row: its first and last) in a bucket they did not see it in (steps
// without statistics, --stats-every); and the steps after its last finite amax that were still
// recorded (its outputs had no finite value: the line stops there).
static bool amax_nonfinite(FILE *out, const report_model *m, const plot *p, const report_amax *a,
                           const report_amax *end, const char *name) {
    bool marked = false;
    const report_amax *last_finite = NULL;
    for (const report_amax *r = a; r <= end; r++)
        if (!isnan(r->amax)) last_finite = r;
    for (const report_amax *r = a; last_finite && r <= last_finite; r++) {
        if (r->bad_step < 0 || r->bad_step < p->x0 || r->bad_step > p->x1) continue;
        nonfinite_mark(out, p, name, r->bad_step);
        marked = true;
    }
    // the first and last steps of the layer's events, each marked once (sorted: a layer of
    // many event rows costs n log n), where no bucket of its statistics is marked already
    int64_t *steps = NULL;
    size_t n_steps = 0, cap = 0;
    for (size_t i = 0; i < m->n_events; i++) {
        const report_event *e = &m->events[i];
        if (!forward_nonfinite(e, a)) continue;
        AMP_GROW(steps, n_steps, cap);
        steps[n_steps++] = e->step;
        if (e->last_step == e->step) continue;
        AMP_GROW(steps, n_steps, cap);
        steps[n_steps++] = e->last_step;
    }
    amp_sort(steps, n_steps, sizeof *steps, report_cmp_i64);
    for (size_t i = 0; i < n_steps; i++) {
        const int64_t t = steps[i], bucket = report_amax_bucket(m, t);
        bool seen = i && t == steps[i - 1];
        for (const report_amax *r = a; r <= end && !seen; r++)
            seen = r->bad_step >= 0 && report_amax_bucket(m, r->step) == bucket;
        if (seen || t < p->x0 || t > p->x1) continue; // (outside the focus, --steps)
        nonfinite_mark(out, p, name, t);
        marked = true;
    }
    free(steps);
    int64_t recorded = -1; // the last step with statistics of its outputs
    for (size_t i = 0; i < m->n_stats; i++) {
        const report_stats *s = &m->stats[i];
        if (s->pid == a->pid && s->layer_id == a->layer_id && strcmp(s->kind, "activation") == 0 &&
            s->last_step > recorded)
            recorded = s->last_step;
    }
    int64_t from = a->step; // the bucket after the last finite one
    if (last_finite && !next_bucket(m, last_finite->step, &from)) return marked;
    if ((double)recorded > p->x1) recorded = step_at_most(p->x1);
    if (from > recorded) return marked;
    double x0 = px(p, (double)from), x1 = px(p, (double)recorded);
    char where[64];
    steps_phrase(where, sizeof where, from, recorded);
    fputs("<g><title>", out);
    esc(out, name);
    fprintf(out,
            ": NaN/inf only (no finite amax) in %s</title><line x1=\"%.1f\" y1=\"%d\" "
            "x2=\"%.1f\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"3\"/>",
            where, x0, PAD_T + 4, x1, PAD_T + 4);
    top_mark(out, x0, "#d62728");
    fputs("</circle></g>", out);
    return true;
}

// A process's number in the amax legend, P1 the lowest pid.
static size_t proc_index(const report_model *m, int32_t pid) {
    const report_process *p = report_process_find(m, pid);
    return p ? (size_t)(p - m->procs) + 1 : 0;
}

// When the layers drawn are of several processes, what their legend's [Pn] stands for, added
// to note ("P1 is tiny_gpt (pid 12), P2 is tiny_gpt (pid 13)"): the layers' names repeat from
// one process to the next. false when they are all one process's.
static bool amax_processes_note(const report_model *m, const size_t *pick, size_t n_pick,
                                char *note, size_t size) {
    bool several = false;
    for (size_t l = 1; l < n_pick; l++)
        several |= m->amax[pick[l]].pid != m->amax[pick[0]].pid;
    if (!several) return false;
    for (size_t i = 0; i < m->n_procs; i++) {
        bool drawn = false;
        for (size_t l = 0; l < n_pick; l++)
            drawn |= m->amax[pick[l]].pid == m->procs[i].pid;
        if (!drawn) continue;
        char proc[128];
        report_process_phrase(m, m->procs[i].pid, proc, sizeof proc);
        report_appendf(note, size, "%sP%zu is %s", note[0] ? "; " : "", i + 1, proc);
    }
    return true;
}

static void plot_amax(FILE *out, const report_model *m, const bucketing *k) {
    if (m->n_amax == 0) return;
    // the AMAX_LAYERS layers with the largest amax, largest first (pick: their first row)
    size_t pick[AMAX_LAYERS];
    double best[AMAX_LAYERS];
    size_t n_pick = 0;
    plot p = {.y0 = INFINITY, .y1 = REPORT_F16_MAX * 4, .logy = true};
    plot_steps(&p, k->s[0].step, k->s[k->n - 1].step, 0); // as the other plots
    for (size_t i = 0; i < m->n_amax;) {
        size_t j = i;
        double top = 0;
        for (; j < m->n_amax && m->amax[j].pid == m->amax[i].pid &&
               m->amax[j].layer_id == m->amax[i].layer_id;
             j++) {
            top = fmax(top, m->amax[j].amax);
            p.x0 = fmin(p.x0, (double)m->amax[j].step); // another process's steps
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
    char note[512] = "";
    if (m->amax_width > 1)
        snprintf(note, sizeof note, "a point is the largest amax of %lld steps",
                 (long long)m->amax_width);
    const bool several = amax_processes_note(m, pick, n_pick, note, sizeof note);
    svg_open(out, "Forward amax per layer against the fp16 range", note[0] ? note : NULL,
             "largest absolute forward activation per layer and step, log axis, fp16 max 65504; "
             "NaN/inf in a layer's output marked in red at the top");
    axes(out, &p, "step", "amax (log)");
    double top = py(&p, REPORT_F16_MAX);
    fprintf(out,
            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.1f\" fill=\"#d62728\" "
            "opacity=\"0.12\"/><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
            "stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>"
            "<text x=\"%d\" y=\"%.1f\" class=\"tick\" fill=\"#d62728\">fp16 max 65504</text>",
            PAD_L, PAD_T, PLOT_W - PAD_R - PAD_L, top - PAD_T, PAD_L, top, PLOT_W - PAD_R, top,
            PAD_L + 4, top + 12); // below the line: the top edge holds the NaN/inf marks
    bool nonfinite = false;
    for (size_t l = 0; l < n_pick; l++) {
        const report_amax *a = &m->amax[pick[l]], *end = a;
        while (end + 1 < m->amax + m->n_amax && end[1].pid == a->pid &&
               end[1].layer_id == a->layer_id)
            end++;
        size_t points = 0;
        double x = 0, y = 0;
        fprintf(out, "<polyline class=\"line\" stroke=\"%s\" points=\"", palette[l]);
        for (const report_amax *r = a; r <= end; r++) {
            if (isnan(r->amax)) continue; // (no finite value: marked at the top)
            x = px(&p, (double)r->step), y = py(&p, r->amax), points++;
            fprintf(out, "%.1f,%.1f ", x, y);
        }
        fputs("\"/>", out);
        lone_point(out, points, x, y, palette[l]);
        const char *name = report_layer_name(m, a->pid, a->layer_id);
        char label[LEGEND_BYTES + 1], tip[320], proc[128], suffix[24] = "";
        report_process_phrase(m, a->pid, proc, sizeof proc);
        snprintf(tip, sizeof tip, "%s%s%s", name ? name : "?", several ? " of " : "",
                 several ? proc : "");
        nonfinite |= amax_nonfinite(out, m, &p, a, end, tip);
        if (several) snprintf(suffix, sizeof suffix, " [P%zu]", proc_index(m, a->pid));
        legend_text(label, name ? name : "?", suffix);
        legend(out, (int)l, palette[l], label);
    }
    if (nonfinite) legend(out, (int)n_pick, "#d62728", "NaN/inf output");
    svg_close(out);
}

#define CLIP_MEDIANS 3.0

typedef struct time_bucket {
    double part[4];   // mean ns of each part over its timed steps
    double mean, max; // ns: mean and longest step
    size_t timed;     // steps with a time
} time_bucket;

static time_bucket time_bucket_of(const bucketing *k, size_t b, bool gpu) {
    size_t lo, hi;
    bucket_steps(k, b, &lo, &hi);
    time_bucket r = {0};
    for (size_t i = lo; i < hi; i++) {
        const report_step *s = &k->s[i];
        if (s->start_ns < 0 || s->end_ns < s->start_ns) continue;
        const double dur = (double)(s->end_ns - s->start_ns);
        if (gpu) { // (busy: a GPU's mean, in a process that has several)
            const double busy = (double)s->gpu_busy_ns / (s->gpu_devices > 1 ? s->gpu_devices : 1);
            r.part[0] += busy;
            r.part[1] += (double)s->copy_ns;
            r.part[2] += fmax(0, dur - busy - (double)s->copy_ns);
        } else {
            r.part[0] += (double)s->gemm_ns;
            r.part[1] += (double)s->cast_ns;
            r.part[2] += fmax(0, (double)s->op_ns - (double)s->gemm_ns - (double)s->cast_ns);
            r.part[3] += fmax(0, dur - (double)s->op_ns);
        }
        r.mean += dur;
        r.max = fmax(r.max, dur);
        r.timed++;
    }
    for (int j = 0; j < 4 && r.timed; j++)
        r.part[j] /= (double)r.timed;
    if (r.timed) r.mean /= (double)r.timed;
    return r;
}

// A bucket's bar of plot_breakdown at x, w wide: its mean step's parts stacked in colors (cut
// at top, its proportions kept), its longest step's tick, and a tooltip naming its steps.
static void stacked_bar(FILE *out, const plot *p, const time_bucket *r, const char *where, double x,
                        double w, double top, const char *const colors[4]) {
    fprintf(out, "<g shape-rendering=\"crispEdges\"><title>%s: ", where);
    if (r->timed > 1)
        fprintf(out, "mean %.4g ms, longest %.4g ms</title>", r->mean / 1e6, r->max / 1e6);
    else
        fprintf(out, "%.4g ms</title>", r->max / 1e6);
    const double fit = r->mean > top ? top / r->mean : 1;
    double acc = 0;
    for (int j = 0; j < 4; j++) {
        const double part = r->part[j] * fit;
        if (part <= 0) continue;
        double y_hi = py(p, (acc + part) / 1e6), y_lo = py(p, acc / 1e6);
        fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>", x,
                y_hi, w, y_lo - y_hi, colors[j]);
        acc += part;
    }
    if (r->timed > 1) // the longest step of the bucket
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
                "stroke-width=\"1.5\"/>",
                x, py(p, fmin(r->max, top) / 1e6), x + w, py(p, fmin(r->max, top) / 1e6));
    fputs("</g>", out);
}

// The step-time breakdown: a stacked bar per bucket of steps (GPU busy, copies and idle with
// kernels recorded, else the host time of GEMMs, casts, other ops and the rest of the step).
static void plot_breakdown(FILE *out, const report_model *m, const bucketing *k) {
    bool gpu = m->perf.launches > 0;
    const char *names[4] = {"GEMM ops", "casts", "other ops", "rest of step"};
    if (gpu) names[0] = "GPU kernels", names[1] = "copies", names[2] = "GPU idle", names[3] = NULL;
    double top = 0;
    for (size_t i = 0; i < k->n; i++)
        if (k->s[i].start_ns >= 0 && k->s[i].end_ns >= k->s[i].start_ns) // (no overflow)
            top = fmax(top, (double)(k->s[i].end_ns - k->s[i].start_ns));
    if (!(top > 0)) return;
    // a step far longer than the others (the first one's set-up) would flatten them: the axis
    // stops at CLIP_MEDIANS times the median, and a longer bar is drawn to it, its time written
    // above it
    const double clip = CLIP_MEDIANS * report_steps_median_ns(k->s, k->n);
    if (top > clip) top = clip;
    plot p = {.y0 = 0, .y1 = top / 1e6 * 1.05};
    plot_steps(&p, k->s[0].step, k->s[k->n - 1].step, 0.5);
    char note[256], title[256];
    svg_open(out,
             plot_title(k,
                        gpu ? "Step time: GPU busy, copies, idle"
                            : "Step time: where the host time went",
                        title, sizeof title),
             bucket_note(k, "a bar is the bucket's mean step, the black tick its longest step",
                         note, sizeof note),
             "stacked bars of each step's time in milliseconds");
    axes(out, &p, "step", "ms");
    const char *colors[4] = {"#1f77b4", "#ff7f0e", "#9467bd", "#c7c7c7"};
    double label_end = -INFINITY; // the right end of the last time written: none overlap
    // the times written over the clipped bars, drawn after every bar so that none covers them
    struct label {
        double x;
        char text[32];
    } *labels = amp_xmalloc((k->nb + 1) * sizeof *labels);
    size_t n_labels = 0;
    for (size_t b = 0; b < k->nb; b++) {
        time_bucket r = time_bucket_of(k, b, gpu);
        if (!r.timed) continue;
        size_t lo, hi;
        bucket_steps(k, b, &lo, &hi);
        const int64_t a = k->s[lo].step, z = k->s[hi - 1].step;
        const double left = px(&p, (double)a - 0.5), right = px(&p, (double)z + 0.5);
        // a gap between bars wide enough to have one; narrow ones overlap a little (no seams)
        const double unit = right - left;
        const double w = fmin(BAR_MAX_W, unit >= 4 ? unit - 1 : fmax(1.0, unit + 0.5));
        const double x = (left + right - w) / 2;
        char where[64];
        steps_phrase(where, sizeof where, a, z);
        stacked_bar(out, &p, &r, where, x, w, top, colors);
        if (!(r.max > top)) continue;
        // a longer step's time above its bar, to the right (to the left at the right edge),
        // unless it would run into the time written before it
        struct label *t = &labels[n_labels];
        snprintf(t->text, sizeof t->text, "%.4g ms", r.max / 1e6);
        const double tw = (double)strlen(t->text) * TICK_CHAR_W;
        t->x = x + w + 2;
        if (t->x + tw > PLOT_W - PAD_R) t->x = x - 2 - tw;
        if (t->x < label_end + 4) continue;
        label_end = t->x + tw;
        n_labels++;
    }
    for (size_t i = 0; i < n_labels; i++) // (a white halo: the text lies over the bars)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" class=\"tick halo\" text-anchor=\"start\">%s</text>",
                labels[i].x, py(&p, top / 1e6) + 10, labels[i].text);
    free(labels);
    for (int j = 0; j < 4 && names[j]; j++)
        legend(out, j, colors[j], names[j]);
    if (k->nb < k->n) legend(out, gpu ? 3 : 4, "#000", "longest step");
    svg_close(out);
}

static void plot_roofline(FILE *out, const report_model *m) {
    const report_perf *pf = &m->perf;
    if (pf->launches == 0) return;
    const report_gpu *g = &pf->gpu;
    plot p = {.x0 = -2, .x1 = 4, .y0 = 1e9, .y1 = g->peak_flops * 2, .logy = true};
    svg_open(out, "Roofline: kernels with analytic FLOPs", NULL,
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
    ".halo{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}"
    ".label{font-size:12px;fill:#333}.line{fill:none;stroke-width:1.6}.note{color:#555;"
    "font-size:13px;font-weight:400}table{border-collapse:collapse}"
    "td{padding:2px 10px 2px 0;vertical-align:top}";

static void finding(FILE *out, const report_model *m, const report_finding *f, size_t i) {
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
    char proc[160]; // which process, when the run has several
    if (report_finding_process(m, f, proc, sizeof proc)) {
        fputs(f->first_step >= 0 || f->layer[0] || f->op[0] ? ", " : "", out);
        esc(out, proc);
    }
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
    report_coverage cov[REPORT_COVERAGE_MAX];
    for (int i = 0, n = report_coverage_lines(m, cov); i < n; i++) {
        fprintf(out, "<tr><td>%s</td><td>", cov[i].label);
        esc(out, cov[i].text);
        fprintf(out, "%s</td></tr>", cov[i].note);
    }
    if (s.steps) {
        char steps[64], loss[32];
        report_steps_phrase(&s, false, steps, sizeof steps);
        fprintf(out,
                "<tr><td>steps</td><td>%s (%lld-%lld), %lld skipped, %lld with a "
                "non-finite loss</td></tr><tr><td>final loss</td><td>%s</td></tr>",
                steps, (long long)s.first_step, (long long)s.last_step, (long long)s.skipped,
                (long long)s.nonfinite_losses, report_final_loss_words(&s, loss));
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
        fprintf(out, "<tr><td>steps</td><td>%s</td></tr>", report_no_steps_phrase(m));
    }
    fputs("</table>\n", out);

    fprintf(out, "<h2>Findings (%zu error%s, %zu warning%s, %zu info)</h2>\n",
            counts[AMP_SEVERITY_ERROR], counts[AMP_SEVERITY_ERROR] == 1 ? "" : "s",
            counts[AMP_SEVERITY_WARNING], counts[AMP_SEVERITY_WARNING] == 1 ? "" : "s",
            counts[AMP_SEVERITY_INFO]);
    for (size_t i = 0; i < f->n; i++)
        finding(out, m, &f->v[i], i);
    if (f->n == 0) fputs("<p>None.</p>\n", out);

    fputs("<h2>Plots</h2>\n", out);
    if (s.steps) {
        bucketing k;
        bucketing_of(m, f, &k);
        plots_note(out, m, f, &k);
        plot_loss(out, &k, diverged_told(f, k.n ? k.s[0].pid : 0));
        plot_scale(out, &k);
        plot_amax(out, m, &k);
        plot_breakdown(out, m, &k);
    }
    plot_roofline(out, m);
    if (s.steps == 0 && m->perf.launches == 0) fputs("<p>Nothing recorded to plot.</p>\n", out);
    fputs("</body></html>\n", out);
}
