/*
 * rule_sync.c — rule `host-sync`: host synchronisations (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
 * stream, event, context syncs; not a stream's wait on an event, which blocks no host) per step and
 * the time the host spent blocked in them. Each one drains the launch queue, so the GPU idles until
 * the host launches again. PyTorch's GradScaler costs one per step (found_inf); more than two per
 * step holding >= 5% of the run is a warning, one or two a note when they hold >= 1%. A loop whose
 * GPU stayed busy anyway (idle < 10% after step 0, rule gpu-idle) loses nothing to them: the host
 * waited for work it had queued, so that is a note at most.
 */
#include "report.h"

#include <math.h>

#define RULE "host-sync"
#define PER_STEP_WARN 2.0
#define SHARE_WARN 0.05
#define SHARE_NOTE 0.01
#define GPU_BUSY 0.90 // busy share of the span above which waiting on the GPU costs nothing

const char report_sync_advice[] =
    "Take synchronisations out of the step: no .item(), .cpu(), .tolist() or printing of GPU "
    "tensors inside the loop (accumulate metrics on the GPU and read them every N steps), no "
    "torch.cuda.synchronize() outside timing code, and no data-dependent shapes (nonzero, boolean "
    "masks) in the hot path.";

void rule_sync_run(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    if (p->syncs == 0) return;
    int64_t steps = 0;
    double wall = 0;
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        if (s->start_ns < 0 || s->end_ns < s->start_ns) continue;
        steps++;
        wall += (double)(s->end_ns - s->start_ns);
    }
    if (wall <= 0) wall = (double)p->process_span_ns; // (no steps: each process's kernels)
    double per_step = steps ? (double)p->syncs / (double)steps : NAN;
    double share = wall > 0 ? (double)p->sync_ns / wall : NAN;
    const double busy = p->span_ns > 0 ? (double)p->busy_ns / (double)p->span_ns : NAN;
    const bool gpu_busy = busy >= GPU_BUSY;
    bool warn = per_step > PER_STEP_WARN && share >= SHARE_WARN && !gpu_busy;
    if (!warn && !(share >= SHARE_NOTE)) return;
    report_finding *f =
        report_finding_add(out, RULE, warn ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    if (steps) {
        f->first_step = m->steps[0].step;
        f->last_step = m->steps[m->n_steps - 1].step;
    }
    snprintf(f->title, sizeof f->title,
             "%lld host synchronisations (%.3g per step) block the host %.0f%% of the time",
             (long long)p->syncs, per_step, 100 * share);
    if (gpu_busy)
        snprintf(f->detail, sizeof f->detail,
                 "%.6g ms blocked in stream/event/context synchronisation over %lld steps, while "
                 "the GPU stayed busy %.0f%% of the time: the host waited for work it had queued, "
                 "which costs this loop nothing; it would once the loop waits on the host.",
                 (double)p->sync_ns / 1e6, (long long)steps, 100 * busy);
    else
        snprintf(f->detail, sizeof f->detail,
                 "%.6g ms blocked in stream/event/context synchronisation over %lld steps; each "
                 "one drains the launch queue, so the GPU waits for the next launch afterwards.",
                 (double)p->sync_ns / 1e6, (long long)steps);
    snprintf(f->advice, sizeof f->advice, "%s", report_sync_advice);
    report_finding_evidence(f, "syncs", (double)p->syncs);
    report_finding_evidence(f, "per_step", per_step);
    report_finding_evidence(f, "sync_ms", (double)p->sync_ns / 1e6);
    report_finding_evidence(f, "sync_share", share);
    report_finding_evidence(f, "gpu_busy_share", busy);
}
