/*
 * rule_gpu_idle.c — rule `gpu-idle`: stretches of >= 10 us between kernels while the training loop
 * was on the GPU (from the first kernel to the last, step 0 left out when it is recorded: its
 * one-time set-up is not the loop; what was launched after the last step: a final evaluation
 * or save; and the stretches between steps that no step holds: an evaluation every so many
 * steps), when the device waited for the host: data loading, Python, a host
 * synchronisation, pageable copies. Shorter spacing between back-to-back launches is launch
 * overhead (rule amp-payoff). Warning from 30% of the span idle in such gaps, info from 10%. The
 * advice follows what the gaps hold: host-to-device copies (data), host synchronisations, or
 * neither, when the host simply launches work slower than the GPU runs it (per-op Python and
 * framework time: an eager loop of small ops).
 */
#include "report.h"

#include <math.h>

#define RULE "gpu-idle"
#define IDLE_NOTE 0.10
#define IDLE_WARN 0.30
#define MIN_SPAN_NS 1000000 // shorter traces say nothing about a training loop

// The step whose window holds t; NULL: none.
static const report_step *step_at(const report_model *m, int64_t t) {
    for (size_t i = 0; i < m->n_steps; i++)
        if (m->steps[i].start_ns >= 0 && m->steps[i].start_ns <= t && t <= m->steps[i].end_ns)
            return &m->steps[i];
    return NULL;
}

void rule_gpu_idle_run(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    if (p->launches == 0 || p->span_ns < MIN_SPAN_NS) return;
    double share = (double)p->gap_ns / (double)p->span_ns;
    if (share < IDLE_NOTE) return;
    report_finding *f = report_finding_add(
        out, RULE, share >= IDLE_WARN ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    const report_step *st = step_at(m, p->largest_gap_start_ns);
    if (st) f->first_step = f->last_step = st->step;
    const bool several = p->devices > 1;
    char gpus[32] = "the GPU";
    if (several) snprintf(gpus, sizeof gpus, "the %d GPUs", (int)p->devices);
    snprintf(f->title, sizeof f->title,
             "%s sat idle %.0f%% of the time in %lld gaps of 10 us or more (largest %.6g ms%s)",
             gpus, 100 * share, (long long)p->gaps, (double)p->largest_gap_ns / 1e6,
             st ? ", in the step named below" : "");
    // what the gaps hold: copies or synchronisations (the loop's: report_loop_steps) that fill a
    // quarter of them, else the host
    const double gap = (double)p->gap_ns;
    const char *cause;
    if (p->pageable_copies > 0 || (double)p->htod_ns >= 0.25 * gap) {
        cause = "waiting for data";
        snprintf(f->advice, sizeof f->advice,
                 "Keep the GPU fed: load and augment data in worker processes (DataLoader "
                 "num_workers, pin_memory=True, non_blocking copies prefetched a step ahead), and "
                 "take host synchronisations out of the loop.");
    } else if ((double)(report_loop_steps(m, NULL) ? p->step_sync_ns : p->sync_ns) >= 0.25 * gap ||
               (double)p->sync_gap_ns >= 0.25 * gap) {
        cause = "host synchronisations";
        snprintf(f->advice, sizeof f->advice, "%s", report_sync_advice);
    } else {
        cause = "the host launching work slower than the GPU runs it";
        snprintf(f->advice, sizeof f->advice,
                 "Give the GPU fewer, larger pieces of work (torch.compile, whose "
                 "mode=\"reduce-overhead\" also captures CUDA graphs; CUDA graphs of the step; "
                 "fused ops; a larger batch): the loop is host-bound, each op costing more host "
                 "time (Python, the framework's dispatch, the launch) than GPU time. Check too "
                 "what else the host does in the step (logging, hooks, data loading in the main "
                 "process).");
    }
    // what the loop's timeline left out
    char warmup[96] = "", between[160] = "", tail[96] = "", left[384] = "";
    if (p->warmup_kernels)
        snprintf(warmup, sizeof warmup, " step 0, the warm-up, %lld kernels over %.6g ms",
                 (long long)p->warmup_kernels, (double)p->warmup_ns / 1e6);
    if (p->betweens)
        snprintf(between, sizeof between,
                 "%s between steps, %lld kernels in %lld stretch%s over %.6g ms that no step "
                 "holds (an evaluation, a re-run)",
                 p->warmup_kernels ? ";" : "", (long long)p->between_kernels,
                 (long long)p->betweens, p->betweens == 1 ? "" : "es", (double)p->between_ns / 1e6);
    if (p->tail_kernels)
        snprintf(tail, sizeof tail, "%s after the last step, %lld kernels over %.6g ms",
                 p->warmup_kernels || p->betweens ? ";" : "", (long long)p->tail_kernels,
                 (double)p->tail_ns / 1e6);
    if (p->warmup_kernels || p->betweens || p->tail_kernels)
        snprintf(left, sizeof left, " (left out:%s%s%s)", warmup, between, tail);
    snprintf(f->detail, sizeof f->detail,
             "Kernels kept %s busy %.6g of %.6g ms from the first kernel%s to the last%s%s%s; "
             "%.6g ms fell in gaps. Meanwhile: %lld host synchronisations in the whole run "
             "(%.6g ms; %.6g ms of the gaps are where one ended, the GPU out of work until the "
             "host launched again), %lld host-to-device copies%s (%lld from pageable memory). "
             "Most likely cause: %s.",
             gpus, (double)p->busy_ns / 1e6, (double)p->span_ns / 1e6,
             p->warmup_kernels ? " after step 0" : "", p->tail_kernels ? " of the last step" : "",
             left, several ? " (each GPU's, summed)" : "", (double)p->gap_ns / 1e6,
             (long long)p->syncs, (double)p->sync_ns / 1e6, (double)p->sync_gap_ns / 1e6,
             (long long)p->htod_copies,
             p->warmup_kernels || p->warmup_copies ? " after step 0" : "",
             (long long)p->pageable_copies, cause);
    report_finding_evidence(f, "idle_share", share);
    report_finding_evidence(f, "gaps", (double)p->gaps);
    report_finding_evidence(f, "gap_ms", (double)p->gap_ns / 1e6);
    report_finding_evidence(f, "largest_gap_ms", (double)p->largest_gap_ns / 1e6);
    report_finding_evidence(f, "sync_gap_ms", (double)p->sync_gap_ns / 1e6);
    report_finding_evidence(f, "busy_ms", (double)p->busy_ns / 1e6);
    report_finding_evidence(f, "span_ms", (double)p->span_ns / 1e6);
    report_finding_evidence(f, "warmup_kernels", (double)p->warmup_kernels);
    report_finding_evidence(f, "between_kernels", (double)p->between_kernels);
    report_finding_evidence(f, "tail_kernels", (double)p->tail_kernels);
}
