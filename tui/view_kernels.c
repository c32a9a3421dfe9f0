/*
 * view_kernels.c — the kernels view: CUDA kernels (CUPTI_ACTIVITY_KIND_KERNEL) by short name,
 * with total time, share of all kernel time, launches, mean duration and a bound class. The
 * class is the report's roofline rule's (on the finder's thread: from the FLOPs and bytes of the
 * ops that launched the kernel, or its counters); until the first finding is in, and for a kernel
 * the report has not seen yet, it comes from the name and the mean as that rule guesses it for
 * kernels without figures (report_kernel_class_guess: NCCL's collectives comm; kernels shorter
 * than a launch's cost launch; matrix-multiply, convolution and attention kernels compute; the
 * rest memory). The layer is the report core's too (the one most of the kernel's time ran in, of
 * the launches it tied to an op; "?" until the first finding is in). A run without capture data
 * says so.
 */
#include "widgets.h"

#include "amp-impl.h"
#include "report.h"

#include <curses.h>
#include <stdlib.h>
#include <string.h>

enum { SORT_TIME, SORT_COUNT, SORT_MEAN, SORT_NAME, SORT_LAYER };
static const char *const columns[] = {"time", "count", "mean", "name", "layer", NULL};

// qsort has no context argument: update sets these just before sorting
static int sort_key;
static const tui_finding *sort_finding;

static int cmp_kernels(const void *pa, const void *pb) {
    const tui_kernel *a = *(const tui_kernel *const *)pa, *b = *(const tui_kernel *const *)pb;
    if (sort_key == SORT_LAYER) { // by layer, those without one last, then by time
        const char *la = tui_finding_kernel_layer(sort_finding, a->name),
                   *lb = tui_finding_kernel_layer(sort_finding, b->name);
        int c = !la || !lb ? (!la) - (!lb) : strcmp(la, lb);
        if (c) return c;
        return (b->total_ns > a->total_ns) - (b->total_ns < a->total_ns);
    }
    double ma = (double)a->total_ns / (double)a->count, mb = (double)b->total_ns / (double)b->count;
    int c = 0;
    switch (sort_key) {
    case SORT_TIME:
        c = (b->total_ns > a->total_ns) - (b->total_ns < a->total_ns);
        break;
    case SORT_COUNT:
        c = (b->count > a->count) - (b->count < a->count);
        break;
    case SORT_MEAN:
        c = (mb > ma) - (mb < ma);
        break;
    default:
        break;
    }
    return c ? c : strcmp(a->name, b->name);
}

static void update(tui_app *app) {
    const tui_model *m = &app->model;
    const tui_table *t = &app->tables[TUI_VIEW_KERNELS];
    if (app->cap_kernel_rows < m->n_kernels) {
        app->cap_kernel_rows = m->n_kernels;
        app->kernel_rows = amp_xrealloc(app->kernel_rows, m->n_kernels * sizeof *app->kernel_rows);
    }
    app->n_kernel_rows = 0;
    for (size_t i = 0; i < m->n_kernels; i++) { // the filter: its name, or its layer's
        const char *layer = tui_finding_kernel_layer(&m->finding, m->kernels[i].name);
        if (tui_match(m->kernels[i].name, t->filter) || (layer && tui_match(layer, t->filter)))
            app->kernel_rows[app->n_kernel_rows++] = &m->kernels[i];
    }
    sort_key = t->sort;
    sort_finding = &m->finding;
    amp_sort(app->kernel_rows, app->n_kernel_rows, sizeof *app->kernel_rows, cmp_kernels);
}

static void draw(const tui_app *app, const tui_layout *l) {
    const tui_model *m = &app->model;
    const tui_table *t = &app->tables[TUI_VIEW_KERNELS];
    tui_rect b = l->body;
    if (!m->n_kernels) {
        tui_print(b.y + 1, 2, b.w - 4, A_BOLD, "no kernel data in this run");
        if (m->trace && !strstr(m->trace, "cuda"))
            tui_print(b.y + 3, 2, b.w - 4, A_NORMAL,
                      "CUDA was not traced (--trace %s): kernels need cuda in --trace.", m->trace);
        else
            tui_print(b.y + 3, 2, b.w - 4, A_NORMAL,
                      "CUPTI_ACTIVITY_KIND_KERNEL is empty: CPU runs record numerics only.");
        return;
    }
    int rest = b.w - 52; // what the fixed columns leave for the name and the layer
    int layer_w = rest * 2 / 5 > 12 ? rest * 2 / 5 : 12;
    int name_w = rest - layer_w - 1 > 12 ? rest - layer_w - 1 : 12;
    tui_print(b.y, 0, b.w, A_BOLD | A_UNDERLINE, "%-*.*s %10s %6s %9s %10s %-8s %-*.*s", name_w,
              name_w, "KERNEL", "TIME", "SHARE", "COUNT", "MEAN", "BOUND", layer_w, layer_w,
              "LAYER");
    if (!app->n_kernel_rows) {
        tui_print(b.y + 2, 2, b.w - 4, A_NORMAL, "no kernel matches '%s'", t->filter);
        return;
    }
    for (int i = 0; i < l->table_rows && t->top + i < (int)app->n_kernel_rows; i++) {
        const tui_kernel *k = app->kernel_rows[t->top + i];
        char total[24], mean[24], cnt[24];
        tui_fmt_ns(total, sizeof total, (double)k->total_ns);
        tui_fmt_ns(mean, sizeof mean, (double)k->total_ns / (double)k->count);
        tui_fmt_count(cnt, sizeof cnt, (double)k->count);
        double share = m->kernel_ns ? 100.0 * (double)k->total_ns / (double)m->kernel_ns : 0;
        int attr = t->top + i == t->selected ? A_REVERSE : A_NORMAL;
        const char *layer = tui_finding_kernel_layer(&m->finding, k->name);
        const char *bound = tui_finding_kernel_class(&m->finding, k->name);
        if (!bound)
            bound = report_kernel_class_guess(k->name, (double)k->total_ns / (double)k->count);
        char name[256], layer_s[256]; // cut to an ellipsis where they do not fit
        tui_cell(name, sizeof name, k->name, name_w, TUI_CUT_END);
        tui_cell(layer_s, sizeof layer_s,
                 layer               ? layer
                 : m->finding_ms > 0 ? ""
                                     : "?",
                 layer_w, TUI_CUT_MIDDLE);
        tui_print(b.y + 1 + i, 0, b.w, attr, "%s %10s %5.1f%% %9s %10s %-8s %s", name, total, share,
                  cnt, mean, bound, layer_s);
    }
}

static int count(const tui_app *app) {
    return (int)app->n_kernel_rows;
}

const tui_view_i tui_view_kernels = {"kernels", columns, update, draw, count};
