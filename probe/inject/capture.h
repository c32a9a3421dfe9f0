/*
 * capture.h — libampprobe_inject.so, the library `ampprobe run` loads into the training process
 * through CUDA_INJECTION64_PATH (inject.c: CUPTI activity) and NVTX_INJECTION64_PATH
 * (nvtx-handler.c: NVTX ranges). Both write through the record stream of amp-record.h, so one
 * database holds CUPTI's kernels, libampcore's AMP records and the NVTX ranges.
 *
 * The library holds its own private copy of libampcore's record writer (linked in, every
 * libampcore symbol hidden): in a libampcore program the process then has two writers, each
 * with its own spool file, which the collector treats as two producers of one pid (strings are
 * mapped per spool file). Sharing the program's writer is not possible in general: a program
 * links libampcore statically and exports none of its symbols.
 *
 * Kernel-to-range attribution is a query over the database: a kernel's launch call has its
 * correlation id and thread, and the innermost NVTX range of that thread around the call's
 * time is the op or layer that launched it (a libampcore program pushes "layer/op" ranges).
 */
#ifndef AMPPROBE_CAPTURE_H
#define AMPPROBE_CAPTURE_H

#include "amp-record.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

// The record writer's (record.c, linked into this library; its one user is the NVTX handler):
// hook runs before its last flush, at exit (crashed false) and on a fatal signal (crashed true:
// it may only emit, neither allocate nor wait on a lock).
void amp_record_set_finish_hook(void (*hook)(bool crashed));

// The entry points NVTX and the CUDA driver look up; everything else in the library is hidden.
#define AMP_CAPTURE_EXPORT __attribute__((visibility("default")))

// True when category t is to be recorded: only under `ampprobe run` (AMPPROBE_SPOOL_DIR), as
// with AMPPROBE_OUT a libampcore program's own writer would be a second collector of one file.
static inline bool amp_capture_wanted(amp_trace t) {
    return getenv("AMPPROBE_SPOOL_DIR") && amp_record_tracing(t);
}

// One row per kernel: `kernel` (rowid of CUPTI_ACTIVITY_KIND_KERNEL), `api` (rowid of its launch
// call in CUPTI_ACTIVITY_KIND_RUNTIME; NULL when not captured) and `range` (rowid in
// NVTX_EVENTS of the innermost range of the launching thread around the call; NULL: none).
#define AMP_CAPTURE_KERNEL_RANGES_SQL                                                              \
    "WITH launch AS (SELECT k.rowid AS kernel, (SELECT r.rowid "                                   \
    "  FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId "                \
    "  AND r.globalTid >> 24 = k.globalPid >> 24 ORDER BY r.eventClass LIMIT 1) AS api "           \
    "  FROM CUPTI_ACTIVITY_KIND_KERNEL k) "                                                        \
    "SELECT l.kernel, l.api, (SELECT n.rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME r, NVTX_EVENTS n "   \
    "  WHERE r.rowid = l.api AND n.globalTid = r.globalTid AND n.eventType IN (59, 60) "           \
    "  AND n.start <= r.start AND IFNULL(n.end >= r.end, 1) "                                      \
    "  ORDER BY n.start DESC, n.rangeId DESC LIMIT 1) "                                            \
    "  AS range FROM launch l"

// Emits TARGET_INFO_GPU for CUDA device ordinal, read from the driver of this process. False
// (nothing emitted) when the driver is not loaded or does not know the device. (gpu-info.c)
bool amp_capture_gpu_info_emit(uint32_t ordinal);

// --counters (AMPPROBE_COUNTERS=1 from the launcher): PM sampling of each device a context was
// made on, decoded into GPU_METRICS records. All three are called from the flush thread or the
// exit handler, never from a driver callback. (counters.c)
void amp_counters_device_seen(uint32_t device); // starts sampling it (once; says so if it cannot)
void amp_counters_poll(void);                   // emits the samples completed so far
void amp_counters_stop(void);                   // the rest (sampling ends with the process)
// Whether every sampled metric is a PM-sampling metric of chip ("GH100"), by CUPTI's host API
// (no GPU needed): 0, or the CUPTI error, with the first metric refused in *bad.
int amp_counters_check_chip(const char *chip, const char **bad);

// The demangled form of a C++ kernel name (__cxa_demangle of the process, or of libstdc++ when
// the program has none), cached for the life of the process; NULL for a name that is not
// mangled or cannot be demangled. Thread-safe. (kernel-names.c)
const char *amp_capture_demangle(const char *mangled);

#endif
