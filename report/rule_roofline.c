/*
 * rule_roofline.c — rule `roofline`: each kernel (by name) and each layer placed against the
 * card's roofline: compute-bound (arithmetic intensity above the ridge, peak / bandwidth),
 * memory-bound (below it) or launch-bound (kernels shorter than ~5 us: the launch costs more
 * than the work), with the achieved share of the roof.
 *
 * FLOPs and bytes are the analytic ones of the ops that launched the kernels (report_perf.c).
 * With hardware counters (`ampprobe run --counters`) a kernel's DRAM bytes are the measured ones
 * of the samples it ran in; without analytic FLOPs it is then placed by which of its two
 * ceilings it came closer to: DRAM bandwidth or the tensor pipe's busy time (when it came within
 * 10% of either). A kernel with
 * neither is classed by its name (gemm/nvjet/xmma/cutlass/conv: compute) and says so. The ceilings
 * are those `ampprobe calibrate` measured, else TARGET_INFO_GPU's bandwidth and the default table,
 * marked as an assumption. One info finding sums it up; a layer that holds
 * >= 20% of the GPU time at < 10% of its roof is a warning.
 */
#include "report.h"

#include <math.h>
#include <string.h>

#define RULE "roofline"
#define LAYER_SHARE_WARN 0.20
#define EFFICIENCY_WARN 0.10
#define LIST_MAX 5

typedef enum bound { BOUND_COMPUTE, BOUND_MEMORY, BOUND_LAUNCH, BOUND_COMM } bound;
static const char *const bound_names[] = {"compute-bound", "memory-bound", "launch-bound",
                                          "communication"};

typedef struct place {
    bound b;
    bool by_name;      // no analytic figures nor counters: classed by the kernel's name
    bool counters;     // placed with measured DRAM bytes (and tensor-pipe time)
    double ai;         // FLOP/byte; NaN: unknown
    double efficiency; // achieved / roof at this intensity; NaN: unknown
} place;

// Counters place a kernel when samples span at least half of its time and it came within 10% of
// one of its ceilings (below that, DRAM against tensor pipe tells nothing).
#define COUNTERS_MIN_UTILISATION 0.10
static bool covered(const report_gpu *g, const report_kernel *k) {
    if (!k || k->covered_ns < 0.5 * (double)k->total_ns || k->dram_bytes <= 0) return false;
    double dram = k->dram_bytes / (k->covered_ns * 1e-9) / g->bandwidth;
    return fmax(dram, k->tensor_ns / k->covered_ns) >= COUNTERS_MIN_UTILISATION;
}

static place classify(const report_gpu *g, const report_kernel *k, const char *name, double flops,
                      double bytes, double ns, int64_t launches) {
    place p = {.ai = NAN, .efficiency = NAN};
    if (report_kernel_is_comm(name)) { // (no roof: it waits on the other GPUs and the links)
        p.b = BOUND_COMM;
        return p;
    }
    if (launches > 0 && ns / (double)launches < REPORT_LAUNCH_BOUND_NS) {
        p.b = BOUND_LAUNCH;
    } else if (covered(g, k)) {
        p.counters = true;
        bytes = k->dram_bytes * ns / k->covered_ns; // measured, over the whole time
        if (flops <= 0) {
            double dram = bytes / (ns * 1e-9) / g->bandwidth, tensor = k->tensor_ns / k->covered_ns;
            p.b = tensor >= dram ? BOUND_COMPUTE : BOUND_MEMORY;
            p.efficiency = fmax(tensor, dram);
            return p;
        }
        p.ai = flops / bytes;
        p.b = p.ai >= g->peak_flops / g->bandwidth ? BOUND_COMPUTE : BOUND_MEMORY;
    } else if (flops > 0 && bytes > 0) {
        p.ai = flops / bytes;
        p.b = p.ai >= g->peak_flops / g->bandwidth ? BOUND_COMPUTE : BOUND_MEMORY;
    } else {
        p.by_name = true;
        p.b = report_kernel_is_gemm(name) ? BOUND_COMPUTE : BOUND_MEMORY;
    }
    if (flops > 0 && bytes > 0 && ns > 0) {
        double roof = fmin(g->peak_flops, flops / bytes * g->bandwidth);
        p.efficiency = flops / (ns * 1e-9) / roof;
    }
    return p;
}

const char *report_kernel_class(const report_model *m, const report_kernel *k) {
    static const char *const short_names[] = {"compute", "memory", "launch", "comm"};
    const place pl =
        classify(&m->perf.gpu, k, k->name, k->flops, k->bytes, (double)k->total_ns, k->launches);
    return short_names[pl.b];
}

// Per layer: the ops' attributed kernels summed.
typedef struct layer_sum {
    int32_t pid, layer_id;
    double flops, bytes, ns;
    int64_t kernels;
} layer_sum;

static size_t layers_of(const report_model *m, layer_sum *v, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < m->n_ops; i++) {
        const report_op *o = &m->ops[i];
        if (o->kernels == 0) continue;
        size_t k = 0;
        while (k < n && !(v[k].pid == o->pid && v[k].layer_id == o->layer_id))
            k++;
        if (k == n) {
            if (n == cap) continue;
            v[n++] = (layer_sum){.pid = o->pid, .layer_id = o->layer_id};
        }
        v[k].flops += o->flops;
        v[k].bytes += o->bytes;
        v[k].ns += (double)o->kernel_ns;
        v[k].kernels += o->kernels;
    }
    return n;
}

// One of gpu_time's largest kernels, appended to buf: its share of GPU time, launches, bound,
// what the counters measured of it and how near its roof it ran.
static void kernel_phrase(char *buf, size_t size, const report_perf *p, const report_kernel *x,
                          bool first) {
    const report_gpu *g = &p->gpu;
    place pl = classify(g, x, x->name, x->flops, x->bytes, (double)x->total_ns, x->launches);
    report_appendf(buf, size, "%s %.60s %.0f%% of GPU time, %lld x %.1f us, %s%s", first ? "" : ";",
                   x->name, 100.0 * (double)x->total_ns / (double)p->kernel_ns,
                   (long long)x->launches, (double)x->total_ns / (double)x->launches / 1e3,
                   bound_names[pl.b], pl.by_name ? " (by name)" : "");
    if (pl.counters) {
        double sec = x->covered_ns * 1e-9;
        report_appendf(buf, size, " (counters: DRAM %.0f%% of peak, tensor pipe %.0f%% busy)",
                       100 * x->dram_bytes / sec / g->bandwidth,
                       100 * x->tensor_ns / x->covered_ns);
    }
    if (!isnan(pl.efficiency)) {
        if (isnan(pl.ai))
            report_appendf(buf, size, " at %.0f%% of the nearer roof", 100 * pl.efficiency);
        else
            report_appendf(buf, size, " at %.0f%% of the roof (AI %.3g)", 100 * pl.efficiency,
                           pl.ai);
    }
}

// The info on where the GPU time goes: the shares of compute-, memory- and launch-bound kernels,
// the largest kernels, the card's ceilings.
static void gpu_time(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    const report_gpu *g = &p->gpu;
    double ridge = g->peak_flops / g->bandwidth;
    double share[4] = {0};
    bool any_by_name = false;
    int64_t by_counters = 0;
    for (size_t i = 0; i < p->n_kernels; i++) {
        const report_kernel *k = &p->kernels[i];
        place pl = classify(g, k, k->name, k->flops, k->bytes, (double)k->total_ns, k->launches);
        share[pl.b] += (double)k->total_ns / (double)p->kernel_ns;
        any_by_name |= pl.by_name;
        by_counters += pl.counters;
    }

    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_INFO);
    char comm[64] = ""; // (said only when there is some: a run on one GPU has none)
    if (share[BOUND_COMM] > 0)
        snprintf(comm, sizeof comm, ", %.0f%% communication (NCCL)", 100 * share[BOUND_COMM]);
    snprintf(f->title, sizeof f->title,
             "GPU time: %.0f%% compute-bound, %.0f%% memory-bound, %.0f%% launch-bound "
             "kernels%s on %s",
             100 * share[BOUND_COMPUTE], 100 * share[BOUND_MEMORY], 100 * share[BOUND_LAUNCH], comm,
             g->name ? g->name : "the GPU");
    if (p->counter_samples > 0)
        report_appendf(f->detail, sizeof f->detail,
                       "Hardware counters: %lld samples; %lld kernel names placed with "
                       "measured DRAM bytes. ",
                       (long long)p->counter_samples, (long long)by_counters);
    report_appendf(f->detail, sizeof f->detail, "Largest kernels:");
    for (size_t i = 0; i < p->n_kernels && i < LIST_MAX; i++)
        kernel_phrase(f->detail, sizeof f->detail, p, &p->kernels[i], i == 0);
    report_appendf(f->detail, sizeof f->detail,
                   ". Ceilings: %.0f TFLOP/s fp16/bf16, %.2f TB/s (ridge %.0f FLOP/B): %s%s%s.",
                   g->peak_flops / 1e12, g->bandwidth / 1e12, ridge,
                   g->peak_assumed ? "assumed from the default table, " : "", g->table_entry,
                   g->peak_assumed && !g->bandwidth_assumed ? "; bandwidth from TARGET_INFO_GPU"
                                                            : "");
    if (g->peak_assumed)
        report_appendf(f->detail, sizeof f->detail,
                       " Run ampprobe calibrate on a machine with this GPU to measure its own "
                       "(a report made there uses them).");
    if (p->counter_samples == 0 && m->counters_reason)
        report_appendf(f->detail, sizeof f->detail,
                       " Hardware counters were asked for but not recorded (%s): analytic figures "
                       "only.",
                       m->counters_reason);
    snprintf(f->advice, sizeof f->advice,
             "Compute-bound kernels gain from fp16/bf16 Tensor Cores; memory-bound ones from "
             "fewer bytes (fp16/bf16 activations, fused elementwise ops: torch.compile); "
             "launch-bound ones only from fewer launches (CUDA graphs, fusion, a larger batch).%s",
             any_by_name ? " Kernels no op claims are classed by name: record them with "
                           "libampcore (or NVTX ranges) for FLOP counts, or measure them with "
                           "`ampprobe run --counters`."
                         : "");
    report_finding_evidence(f, "compute_share", share[BOUND_COMPUTE]);
    report_finding_evidence(f, "memory_share", share[BOUND_MEMORY]);
    report_finding_evidence(f, "launch_share", share[BOUND_LAUNCH]);
    report_finding_evidence(f, "communication_share", share[BOUND_COMM]);
    report_finding_evidence(f, "peak_tflops", g->peak_flops / 1e12);
    report_finding_evidence(f, "bandwidth_tbs", g->bandwidth / 1e12);
    report_finding_evidence(f, "ridge_flop_per_byte", ridge);
    report_finding_evidence(f, "ceilings_assumed", g->peak_assumed ? 1 : 0);
    report_finding_evidence(f, "kernels", (double)p->launches);
    report_finding_evidence(f, "counter_samples", (double)p->counter_samples);
    report_finding_evidence(f, "kernels_by_counters", (double)by_counters);
}

// A warning for each layer that takes much of the GPU time far below its roof.
static void slow_layers(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    const report_gpu *g = &p->gpu;
    const double ridge = g->peak_flops / g->bandwidth;
    layer_sum layers[256];
    size_t n = layers_of(m, layers, sizeof layers / sizeof layers[0]);
    for (size_t i = 0; i < n; i++) {
        const layer_sum *l = &layers[i];
        double layer_share = l->ns / (double)p->kernel_ns;
        place pl = classify(g, NULL, NULL, l->flops, l->bytes, l->ns, l->kernels);
        if (layer_share < LAYER_SHARE_WARN || pl.b == BOUND_LAUNCH || isnan(pl.efficiency) ||
            pl.efficiency >= EFFICIENCY_WARN)
            continue;
        report_finding *x = report_finding_add(out, RULE, AMP_SEVERITY_WARNING);
        char cut[84]; // the layer's name in the title
        report_finding_where(x, report_layer_name(m, l->pid, l->layer_id), NULL, NULL);
        x->pid = l->pid;
        snprintf(x->title, sizeof x->title,
                 "%s takes %.0f%% of the GPU time at %.1f%% of its %s roof",
                 report_layer_words(cut, sizeof cut, x->layer), 100 * layer_share,
                 100 * pl.efficiency, pl.b == BOUND_COMPUTE ? "compute" : "memory");
        snprintf(x->detail, sizeof x->detail,
                 "%lld kernels, %.6g ms; analytic %.3g FLOP and %.3g B (intensity %.3g FLOP/B, "
                 "ridge %.0f): %.3g TFLOP/s achieved against a roof of %.3g TFLOP/s.",
                 (long long)l->kernels, l->ns / 1e6, l->flops, l->bytes, pl.ai, ridge,
                 l->flops / (l->ns * 1e-9) / 1e12,
                 fmin(g->peak_flops, pl.ai * g->bandwidth) / 1e12);
        if (pl.b == BOUND_COMPUTE)
            snprintf(x->advice, sizeof x->advice,
                     "Get its GEMMs onto the Tensor Cores: run them in fp16/bf16 under autocast "
                     "(see precision-placement), make the matrix dimensions multiples of 8 "
                     "(fp16/bf16) and the batch large enough to fill the SMs.");
        else
            snprintf(x->advice, sizeof x->advice,
                     "Move fewer bytes: keep its activations in fp16/bf16, fuse its elementwise "
                     "ops (torch.compile, fused LayerNorm/GELU epilogues), avoid casts in and out "
                     "of fp32.");
        report_finding_evidence(x, "time_share", layer_share);
        report_finding_evidence(x, "efficiency", pl.efficiency);
        report_finding_evidence(x, "intensity", pl.ai);
        report_finding_evidence(x, "ridge_flop_per_byte", ridge);
        report_finding_evidence(x, "kernels", (double)l->kernels);
    }
}

void rule_roofline_run(const report_model *m, report_findings *out) {
    if (m->perf.launches == 0 || m->perf.kernel_ns <= 0) return;
    gpu_time(m, out);
    slow_layers(m, out);
}
