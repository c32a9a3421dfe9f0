/*
 * rule_amp_payoff.c — rule `amp-payoff`: can fp16/bf16 make this model faster at all?
 *
 * AMP buys Tensor Core FLOPs and halves the bytes; it cannot shorten a kernel launch. A model
 * whose kernels are shorter than ~5 us (or whose GPU mostly waits between them) is launch-bound:
 * AMP adds cast kernels and comes out slower than fp32. With CUDA capture the rule measures it
 * (short kernels, busy share, the GEMM share of GPU time): an AMP run that is launch-bound is a
 * warning; an fp32 run gets a note saying whether AMP would pay off.
 *
 * Without kernels (a CPU run) it projects the recorded ops onto the reference card of the
 * default table (report_perf.c): per step ~3x the forward FLOPs and bytes (forward and
 * backward) against ~3x the forward op count in launches of >= 5 us each. That is a note: the
 * CPU backend emulates fp16/bf16 storage around fp32 math, so AMP is slower there by design.
 */
#include "report.h"

#include <math.h>
#include <string.h>

#define RULE "amp-payoff"
#define SHORT_SHARE                                                                                \
    0.5 // share of kernels shorter than the launch bound that makes a model launch-bound
#define IDLE_SHARE 0.5 // ... or this much of the span idle while kernels average under:
#define SHORT_MEAN_NS 20000
#define GEMM_SHARE_PAYS 0.3 // GEMM share of GPU time from which Tensor Cores pay off
#define BWD_FACTOR 3.0      // forward + backward ~ 3x the forward's work and launches

static bool any_autocast(const report_model *m) {
    for (size_t i = 0; i < m->n_ops; i++)
        if (m->ops[i].policy[0]) return true;
    return false;
}

static void measured(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    double short_share = (double)p->short_launches / (double)p->launches;
    double busy = p->span_ns > 0 ? (double)p->busy_ns / (double)p->span_ns : NAN;
    double mean_ns = (double)p->kernel_ns / (double)p->launches;
    bool launch_bound =
        short_share >= SHORT_SHARE || (1 - busy >= IDLE_SHARE && mean_ns < SHORT_MEAN_NS);
    // of the GPU time that arithmetic makes: NCCL's collectives wait on other GPUs and links
    double gemm_ns = 0, comm_ns = 0;
    for (size_t i = 0; i < p->n_kernels; i++)
        if (report_kernel_is_comm(p->kernels[i].name)) comm_ns += (double)p->kernels[i].total_ns;
    if (p->attributed_ns > 0) {
        for (size_t i = 0; i < m->n_ops; i++)
            if (report_op_is_gemm(m->ops[i].op)) gemm_ns += (double)m->ops[i].kernel_ns;
    } else {
        for (size_t i = 0; i < p->n_kernels; i++)
            if (report_kernel_is_gemm(p->kernels[i].name))
                gemm_ns += (double)p->kernels[i].total_ns;
    }
    double gemm_share = gemm_ns / ((double)p->kernel_ns - comm_ns);
    bool amp = any_autocast(m);
    if (!launch_bound && (amp || gemm_share < GEMM_SHARE_PAYS)) return;

    report_finding *f = report_finding_add(
        out, RULE, launch_bound && amp ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    // no busy share when every kernel ran in the warm-up (a run, or a focus, of step 0 alone),
    // no GEMM share when the kernels took no time
    char busy_words[64] = "", busy_ms[64] = "", gemm_words[80] = "";
    if (!isnan(busy)) {
        snprintf(busy_words, sizeof busy_words, " and the GPU is busy %.0f%% of the time",
                 100 * busy);
        snprintf(busy_ms, sizeof busy_ms, "; busy %.6g of %.6g ms", (double)p->busy_ns / 1e6,
                 (double)p->span_ns / 1e6);
    }
    if (!isnan(gemm_share))
        snprintf(gemm_words, sizeof gemm_words, "; GEMM share of GPU time %.0f%%%s",
                 100 * gemm_share, comm_ns > 0 ? " (NCCL's left out)" : "");
    if (launch_bound)
        snprintf(f->title, sizeof f->title,
                 "launch-bound: %.0f%% of the kernels run under 5 us%s, so %s", 100 * short_share,
                 busy_words,
                 amp ? "AMP cannot pay off (its casts add launches; expect it slower than fp32)"
                     : "AMP would not make this model faster");
    else
        snprintf(f->title, sizeof f->title,
                 "AMP can pay off: %.0f%% of the GPU time is GEMM work that fp16/bf16 Tensor "
                 "Cores run ~%.0fx faster than fp32",
                 100 * gemm_share, p->gpu.peak_flops / p->gpu.peak_flops_fp32);
    snprintf(f->detail, sizeof f->detail,
             "%lld kernels, %.2f us on average; %.0f%% shorter than 5 us%s%s.",
             (long long)p->launches, mean_ns / 1e3, 100 * short_share, busy_ms, gemm_words);
    if (launch_bound)
        snprintf(f->advice, sizeof f->advice,
                 "Make the kernels bigger or fewer before reaching for AMP: a larger batch (or "
                 "gradient accumulation over larger micro-batches), CUDA graphs (torch.compile "
                 "mode=\"reduce-overhead\") or fused kernels; until then fp32 is as fast%s.",
                 amp ? " and AMP only adds numerical risk" : "");
    else
        snprintf(f->advice, sizeof f->advice,
                 "Train under autocast (bf16 needs no GradScaler; fp16 with a GradScaler) and "
                 "compare with ampprobe diff.");
    report_finding_evidence(f, "short_kernel_share", short_share);
    report_finding_evidence(f, "busy_share", busy);
    report_finding_evidence(f, "mean_kernel_us", mean_ns / 1e3);
    report_finding_evidence(f, "gemm_share", gemm_share);
    report_finding_evidence(f, "kernels", (double)p->launches);
}

static void projected(const report_model *m, report_findings *out) {
    double flops = 0, bytes = 0, launches = 0;
    for (size_t i = 0; i < m->n_ops; i++) {
        flops += m->ops[i].flops;
        bytes += m->ops[i].bytes;
        launches += (double)m->ops[i].launches;
    }
    int64_t sampled = 0, first = -1, last = -1;
    for (size_t i = 0; i < m->n_steps; i++) {
        if (m->steps[i].op_ns <= 0) continue;
        sampled++;
        if (first < 0) first = m->steps[i].step;
        last = m->steps[i].step;
    }
    // (ops recorded without their analytic FLOPs and bytes, NULL: nothing to project)
    if (sampled == 0 || launches == 0 || (flops <= 0 && bytes <= 0)) return;
    report_gpu g;
    report_gpu_defaults(NULL, &g);
    double step_flops = BWD_FACTOR * flops / (double)sampled;
    double step_bytes = BWD_FACTOR * bytes / (double)sampled;
    double step_launches = BWD_FACTOR * launches / (double)sampled;
    double compute_us = step_flops / g.peak_flops * 1e6;
    double compute32_us = step_flops / g.peak_flops_fp32 * 1e6;
    double memory_us = step_bytes / g.bandwidth * 1e6;
    double launch_us = step_launches * REPORT_LAUNCH_BOUND_NS / 1e3;
    bool launch_bound = launch_us >= fmax(compute32_us, memory_us);
    bool cpu = !m->device || strcmp(m->device, "cpu") == 0;

    report_finding *f = report_finding_add(out, RULE, AMP_SEVERITY_INFO);
    f->first_step = first;
    f->last_step = last;
    if (launch_bound)
        snprintf(f->title, sizeof f->title,
                 "AMP cannot pay off for this model at this size: on a GPU it is launch-bound "
                 "(~%.0f launches x 5 us = %.0f us per step against ~%.3g us of fp32 math and "
                 "memory traffic)",
                 step_launches, launch_us, fmax(compute32_us, memory_us));
    else
        snprintf(f->title, sizeof f->title,
                 "AMP can pay off on a GPU: ~%.3g us of fp32 math per step would take ~%.3g us "
                 "in fp16/bf16, above the ~%.0f us launch floor",
                 compute32_us, fmax(compute_us, memory_us / 2), launch_us);
    snprintf(f->detail, sizeof f->detail,
             "Projected from the recorded ops onto %s (an assumption: no GPU kernels were "
             "recorded): per step ~%.3g FLOP, ~%.3g B and ~%.0f kernel launches (forward and "
             "backward, %.0fx the forward). fp16/bf16 Tensor Cores would take %.3g us, fp32 %.3g "
             "us, the bytes %.3g us.%s",
             g.table_entry, step_flops, step_bytes, step_launches, BWD_FACTOR, compute_us,
             compute32_us, memory_us,
             cpu ? " On the CPU backend fp16/bf16 are storage formats around fp32 math (no "
                   "Tensor Cores), so an AMP run is slower than fp32 here by design."
                 : "");
    if (launch_bound)
        snprintf(f->advice, sizeof f->advice,
                 "Use AMP for its numerics lessons, not for speed, at this size: to gain from "
                 "it on a GPU grow the work per launch (batch, width, sequence length) until the "
                 "math outweighs ~5 us per kernel, or cut launches (CUDA graphs, fusion).");
    else
        snprintf(f->advice, sizeof f->advice,
                 "Measure it on the GPU: record an fp32 and an AMP run with ampprobe run and "
                 "compare them with ampprobe diff.");
    report_finding_evidence(f, "step_flops", step_flops);
    report_finding_evidence(f, "step_launches", step_launches);
    report_finding_evidence(f, "launch_floor_us", launch_us);
    report_finding_evidence(f, "fp16_math_us", compute_us);
    report_finding_evidence(f, "fp32_math_us", compute32_us);
    report_finding_evidence(f, "memory_us", memory_us);
    report_finding_evidence(f, "ceilings_assumed", 1);
}

void rule_amp_payoff_run(const report_model *m, report_findings *out) {
    if (m->perf.launches > 0)
        measured(m, out);
    else
        projected(m, out);
}
