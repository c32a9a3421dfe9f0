/*
 * rule_copies.c — rule `h2d-copies`: host-to-device copies (CUPTI_ACTIVITY_KIND_MEMCPY,
 * copyKind HtoD) and their share of the GPU's time (kernel busy time plus copy time), and copies
 * from pageable host memory (srcKind pageable), which the driver stages through a pinned bounce
 * buffer synchronously: they cannot overlap compute. Warning from a 10% share; pageable copies
 * below that are a note. The loop's copies only: those of step 0 (the model going up), between
 * steps in a stretch no step holds (a mid-run evaluation's data) and after the last step's end (a
 * final evaluation's) are left out. Copies that took under a
 * millisecond in all are left alone whatever their share (a script that only moved a model up has a
 * share of nearly no GPU time).
 */
#include "report.h"

#include <math.h>

#define RULE "h2d-copies"
#define SHARE_WARN 0.10
#define MIN_NS 1000000 // the copies' time below which they cannot matter to a run

void rule_copies_run(const report_model *m, report_findings *out) {
    const report_perf *p = &m->perf;
    if (p->htod_copies == 0 || p->htod_ns < MIN_NS) return;
    double share =
        (double)p->htod_ns / (double)(p->busy_ns + p->htod_ns > 0 ? p->busy_ns + p->htod_ns : 1);
    if (share < SHARE_WARN && p->pageable_copies == 0) return;
    report_finding *f = report_finding_add(
        out, RULE, share >= SHARE_WARN ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    double gbs = p->htod_ns > 0 ? (double)p->htod_bytes / (double)p->htod_ns : NAN; // B/ns = GB/s
    if (share >= SHARE_WARN)
        snprintf(f->title, sizeof f->title,
                 "host-to-device copies take %.0f%% of the GPU time (%lld copies, %.3g MB at "
                 "%.3g GB/s)",
                 100 * share, (long long)p->htod_copies, (double)p->htod_bytes / 1e6, gbs);
    else
        snprintf(f->title, sizeof f->title,
                 "%lld of %lld host-to-device copies come from pageable memory",
                 (long long)p->pageable_copies, (long long)p->htod_copies);
    char warmup[160] = "";
    if (p->warmup_copies || p->between_copies || p->tail_copies)
        snprintf(warmup, sizeof warmup,
                 " (%lld in step 0, the warm-up, %lld between steps and %lld after the last "
                 "step left out)",
                 (long long)p->warmup_copies, (long long)p->between_copies,
                 (long long)p->tail_copies);
    snprintf(f->detail, sizeof f->detail,
             "%lld host-to-device copies%s, %.3g MB in %.6g ms; %lld of them (%.3g MB) from "
             "pageable memory, which the driver copies synchronously through a staging buffer. "
             "Kernels were busy %.6g ms.",
             (long long)p->htod_copies, warmup, (double)p->htod_bytes / 1e6,
             (double)p->htod_ns / 1e6, (long long)p->pageable_copies,
             (double)p->pageable_bytes / 1e6, (double)p->busy_ns / 1e6);
    snprintf(f->advice, sizeof f->advice,
             "Pin the host buffers (DataLoader(pin_memory=True), cudaHostAlloc) and copy with "
             "non_blocking=True on a side stream a step ahead, so copies overlap compute; move "
             "data to the GPU once (the dataset, the lookup tables) instead of every step; send "
             "fp16/bf16 or uint8 instead of fp32 where the model casts anyway.");
    report_finding_evidence(f, "htod_share", share);
    report_finding_evidence(f, "htod_copies", (double)p->htod_copies);
    report_finding_evidence(f, "htod_mb", (double)p->htod_bytes / 1e6);
    report_finding_evidence(f, "htod_ms", (double)p->htod_ns / 1e6);
    report_finding_evidence(f, "htod_gbs", gbs);
    report_finding_evidence(f, "pageable_copies", (double)p->pageable_copies);
    report_finding_evidence(f, "pageable_mb", (double)p->pageable_bytes / 1e6);
}
