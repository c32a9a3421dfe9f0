/*
 * rule_sync.c — rule `host-sync`: host synchronisations (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
 * stream, event, context syncs; not a stream's wait on an event, which blocks no host) per step and
 * the time the host spent blocked in them (step 0, the warm-up, left out when later steps follow:
 * autotuning and lazy set-up synchronise there once). Each one drains the launch queue, so the GPU
 * idles until the host launches again. PyTorch's GradScaler costs one per step (found_inf); more
 * than two per step holding >= 5% of the run is a warning, one or two a note when they hold >= 1%.
 * A loop whose GPU stayed busy anyway (idle < 10% after step 0, rule gpu-idle) loses nothing to
 * them: the host waited for work it had queued, so that is a note at most.
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

int64_t report_loop_steps(const report_model *m, double *wall_ns) {
    int64_t steps = 0;
    double wall = 0;
    for (size_t i = 0; i < m->n_steps; i++) {
        const report_step *s = &m->steps[i];
        if (s->start_ns < 0 || s->end_ns < s->start_ns || report_step_is_warmup(m, s)) continue;
        steps++;
        wall += (double)(s->end_ns - s->start_ns);
    }
    if (wall_ns) *wall_ns = wall;
    return steps;
}

void rule_sync_run(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    double wall;
    const int64_t steps = report_loop_steps(m, &wall);
    // the steps' synchronisations against the steps' time (those of an evaluation, the setup or
    // the end are the script's, not the loop's, and the warm-up step's, its autotuning and lazy
    // set-up, are not either); without timed steps, all of them against each process's span of
    // kernels
    const int64_t syncs = steps ? p->step_syncs : p->syncs;
    const double sync_ns = (double)(steps ? p->step_sync_ns : p->sync_ns);
    if (syncs == 0) return;
    if (wall <= 0) wall = (double)p->process_span_ns;
    double per_step = steps ? (double)syncs / (double)steps : NAN;
    double share = wall > 0 ? sync_ns / wall : NAN;
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
             (long long)syncs, per_step, 100 * share);
    if (gpu_busy)
        snprintf(f->detail, sizeof f->detail,
                 "%.6g ms blocked in stream/event/context synchronisation over %lld steps, while "
                 "the GPU stayed busy %.0f%% of the time: the host waited for work it had queued, "
                 "which costs this loop nothing; it would once the loop waits on the host.",
                 sync_ns / 1e6, (long long)steps, 100 * busy);
    else
        snprintf(f->detail, sizeof f->detail,
                 "%.6g ms blocked in stream/event/context synchronisation over %lld steps; each "
                 "one drains the launch queue, so the GPU waits for the next launch afterwards.",
                 sync_ns / 1e6, (long long)steps);
    const int64_t outside = p->syncs - p->step_syncs - p->warmup_syncs;
    if (steps && outside > 0)
        report_appendf(f->detail, sizeof f->detail,
                       " %lld more (%.6g ms) came outside the steps (the setup, an evaluation, the "
                       "end) and are not counted here.",
                       (long long)outside,
                       (double)(p->sync_ns - p->step_sync_ns - p->warmup_sync_ns) / 1e6);
    if (steps && p->warmup_syncs)
        report_appendf(f->detail, sizeof f->detail,
                       " Step 0, the warm-up, is left out with its %lld (%.6g ms).",
                       (long long)p->warmup_syncs, (double)p->warmup_sync_ns / 1e6);
    snprintf(f->advice, sizeof f->advice, "%s", report_sync_advice);
    report_finding_evidence(f, "syncs", (double)syncs);
    report_finding_evidence(f, "per_step", per_step);
    report_finding_evidence(f, "sync_ms", sync_ns / 1e6);
    if (steps) report_finding_evidence(f, "syncs_outside_steps", (double)outside);
    if (steps) report_finding_evidence(f, "warmup_syncs", (double)p->warmup_syncs);
    report_finding_evidence(f, "sync_share", share);
    report_finding_evidence(f, "gpu_busy_share", busy);
}
