/*
 * cupti-decode.h — CUPTI activity records (CUDA 13.0 layouts) to ampprobe records (amp-record.h).
 *
 * Pure functions: each fills an amp_rec_* from one hand-fillable CUpti_Activity* struct and
 * touches nothing else, so the tests feed them structs built by hand, without a GPU or a driver.
 * amp_capture_emit() dispatches one record of any kind and emits what it decodes; the names it
 * needs (API function names, demangled kernel names) come through a table of functions, so the
 * injection library passes CUPTI-backed caches and the tests pass fixed strings.
 *
 *     amp_capture_names names = {.api_name = my_api_name, .demangle = my_demangle};
 *     amp_capture_stats st = {0};
 *     while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
 *         amp_capture_emit(rec, &names, &st);
 */
#ifndef AMPPROBE_CUPTI_DECODE_H
#define AMPPROBE_CUPTI_DECODE_H

#include "amp-record.h"

#include <cupti_activity.h>
#include <stdbool.h>
#include <stdint.h>

// A complete record has start > 0 and end >= start; CUPTI hands back start = end = 0 for work
// that had not finished at a forced flush. The decoders return false for those (not emitted).
bool amp_capture_decode_kernel(const CUpti_ActivityKernel10 *k, amp_rec_kernel *out);
bool amp_capture_decode_memcpy(const CUpti_ActivityMemcpy6 *m, amp_rec_memcpy *out);
bool amp_capture_decode_memset(const CUpti_ActivityMemset4 *m, amp_rec_memset *out);
// name: the API function ("cudaLaunchKernel_v7000"), NULL when unknown.
bool amp_capture_decode_api(const CUpti_ActivityAPI *a, const char *name, amp_rec_runtime *out);
bool amp_capture_decode_sync(const CUpti_ActivitySynchronization2 *s, amp_rec_sync *out);
// uuid: room for "GPU-" and the 36 characters of the UUID (out->uuid points into it).
#define AMP_CAPTURE_UUID_LEN 41
void amp_capture_decode_device(const CUpti_ActivityDevice5 *d, char uuid[AMP_CAPTURE_UUID_LEN],
                               amp_rec_gpu_info *out);

typedef struct amp_capture_names {
    // The name of API function cbid of the runtime (driver false) or driver API; NULL: unknown.
    const char *(*api_name)(bool driver, uint32_t cbid);
    // The demangled form of a kernel name; NULL when it is not a mangled name.
    const char *(*demangle)(const char *mangled);
    // Optional (NULL: none): describes device ordinal from a richer source than the DEVICE
    // record, or knows it was described already; false: the record is decoded and emitted.
    bool (*describe_device)(uint32_t ordinal);
} amp_capture_names;

// What amp_capture_emit saw (counters are only ever added to, with atomic adds).
typedef struct amp_capture_stats {
    int64_t kernels, memcpys, memsets, api_calls, syncs, devices;
    int64_t incomplete;       // records with start = 0 or end < start: not emitted
    int64_t overhead_records; // CUPTI_ACTIVITY_KIND_OVERHEAD records
    int64_t overhead_ns;      // their summed duration
    int64_t other;            // records of kinds not decoded
} amp_capture_stats;

// Decodes one activity record, emits it through amp-record.h and counts it in *st.
void amp_capture_emit(const CUpti_Activity *rec, const amp_capture_names *names,
                      amp_capture_stats *st);

#endif
