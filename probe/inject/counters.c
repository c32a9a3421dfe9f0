/*
 * counters.c — `ampprobe run --counters`: GPU hardware counters by CUPTI PM sampling, alongside
 * the activity tracing (../shared/CAPTURE.md §4: on Hopper PM sampling runs next to tracing and
 * kernel timestamps stay valid; the Range Profiler does not).
 *
 * Per device, once a context exists on it (the flush thread looks every 10 ms; setting up takes
 * ~0.3 s on an H200): the host API builds a one-pass configuration of the metrics below, the
 * device samples them every SAMPLE_NS into a hardware buffer, and the flush thread decodes that
 * buffer every 100 ms and emits each completed sample's values as GPU_METRICS records
 * (amp_record_gpu_metric), timed on the clock of the kernel records. At exit the rest is decoded;
 * sampling ends with the process. The whole device is sampled, other processes' work included.
 *
 * Counters are often not permitted (admin-only by default since driver 418.43) or busy (DCGM):
 * then this says so once, with the fix, records META counters = "unavailable" and
 * counters_reason, and the report falls back to libampcore's analytic FLOPs and bytes.
 *
 * cupti_profiler_host.h includes <string> (for nothing a C caller needs): the inject library's
 * shim/ folder holds an empty `string` so that this file stays C.
 */
#include "capture.h"

#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SAMPLE_NS 100000u           // one sample every 100 µs
#define HW_BUFFER_BYTES (64u << 20) // the device-side buffer samples land in
#define MAX_SAMPLES 8192u           // per decode into the counter data image
#define MAX_DEVICES 8

// What is sampled (all single-pass on GH100; names checked against the host API).
static const char *const metrics[] = {
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "gr__cycles_active.avg.pct_of_peak_sustained_elapsed",
};
#define N_METRICS (sizeof metrics / sizeof *metrics)

typedef struct sampler {
    uint32_t device;
    CUpti_PmSampling_Object *obj;
    CUpti_Profiler_Host_Object *host;
    uint8_t *image; // counter data image
    size_t image_bytes;
    uint8_t *avail, *config; // kept while sampling: CUPTI holds on to them
    bool first_image;        // its sample 0 covers enable-to-start: dropped
    int64_t samples, overflows;
} sampler;

static struct {
    pthread_mutex_t lock;
    bool initialized, given_up;
    sampler dev[MAX_DEVICES];
    int n;
    char why[256]; // the first reason counters are unavailable
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *result_name(CUptiResult r) {
    const char *s = NULL;
    cuptiGetResultString(r, &s);
    return s ? s : "unknown CUPTI error";
}

// Says once why there are no counters, with what to do about it.
static void unavailable(uint32_t device, const char *call, CUptiResult r) {
    if (g.why[0]) return;
    const char *fix = r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
                          ? "counters are admin-only on this machine (driver option "
                            "NVreg_RestrictProfilingToAdminUsers=0, or run as root / with "
                            "CAP_PERFMON)"
                      : r == CUPTI_ERROR_HARDWARE_BUSY
                          ? "another tool holds the counters (DCGM: `dcgmi profile --pause`, "
                            "or a second profiled process on this GPU)"
                      : r == CUPTI_ERROR_NOT_SUPPORTED ? "not supported on this GPU or setup"
                                                       : "";
    snprintf(g.why, sizeof g.why, "GPU %u: %s: %s%s%s", device, call, result_name(r),
             *fix ? "; " : "", fix);
    fprintf(stderr,
            "ampprobe: --counters: no hardware counters (%s); the report uses "
            "analytic FLOPs and bytes instead\n",
            g.why);
    amp_record_meta(&(amp_rec_meta){.key = "counters", .value = "unavailable"});
    amp_record_meta(&(amp_rec_meta){.key = "counters_reason", .value = g.why});
}

#define TRY(call, params)                                                                          \
    do {                                                                                           \
        CUptiResult r_ = call(params);                                                             \
        if (r_ != CUPTI_SUCCESS) {                                                                 \
            unavailable(device, #call, r_);                                                        \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

// The host side: the configuration image of the metrics for device's chip (s->host, s->avail
// and s->config, which CUPTI holds on to while sampling), *bytes long.
static bool sampler_config(sampler *s, uint32_t device, size_t *bytes) {
    CUpti_Device_GetChipName_Params chip = {
        .structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE, .deviceIndex = device};
    TRY(cuptiDeviceGetChipName, &chip);
    CUpti_PmSampling_GetCounterAvailability_Params av = {
        .structSize = CUpti_PmSampling_GetCounterAvailability_Params_STRUCT_SIZE,
        .deviceIndex = device};
    TRY(cuptiPmSamplingGetCounterAvailability, &av);
    s->avail = malloc(av.counterAvailabilityImageSize);
    if (!s->avail) goto fail;
    av.pCounterAvailabilityImage = s->avail;
    TRY(cuptiPmSamplingGetCounterAvailability, &av);

    CUpti_Profiler_Host_Initialize_Params hi = {
        .structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
        .profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
        .pChipName = chip.pChipName,
        .pCounterAvailabilityImage = s->avail};
    TRY(cuptiProfilerHostInitialize, &hi);
    s->host = hi.pHostObject;
    CUpti_Profiler_Host_ConfigAddMetrics_Params add = {
        .structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE,
        .pHostObject = s->host,
        .ppMetricNames = (const char **)metrics,
        .numMetrics = N_METRICS};
    TRY(cuptiProfilerHostConfigAddMetrics, &add);
    CUpti_Profiler_Host_GetConfigImageSize_Params cs = {
        .structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE,
        .pHostObject = s->host};
    TRY(cuptiProfilerHostGetConfigImageSize, &cs);
    s->config = malloc(cs.configImageSize ? cs.configImageSize : 1);
    if (!s->config) goto fail;
    CUpti_Profiler_Host_GetConfigImage_Params ci = {
        .structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE,
        .pHostObject = s->host,
        .configImageSize = cs.configImageSize,
        .pConfigImage = s->config};
    TRY(cuptiProfilerHostGetConfigImage, &ci);
    *bytes = cs.configImageSize;
    return true;
fail:
    return false;
}

// The device side: PM sampling enabled on s->device with s->config (bytes long) and started
// into a counter data image of its own (s->obj, s->image).
static bool sampler_start(sampler *s, size_t bytes) {
    const uint32_t device = s->device; // (what TRY names in its message)
    CUpti_PmSampling_Enable_Params en = {.structSize = CUpti_PmSampling_Enable_Params_STRUCT_SIZE,
                                         .deviceIndex = device};
    TRY(cuptiPmSamplingEnable, &en);
    s->obj = en.pPmSamplingObject;
    CUpti_PmSampling_SetConfig_Params sc = {
        .structSize = CUpti_PmSampling_SetConfig_Params_STRUCT_SIZE,
        .pPmSamplingObject = s->obj,
        .configSize = bytes,
        .pConfig = s->config,
        .hardwareBufferSize = HW_BUFFER_BYTES,
        .samplingInterval = SAMPLE_NS,
        .triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
        .hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST};
    TRY(cuptiPmSamplingSetConfig, &sc);
    CUpti_PmSampling_GetCounterDataSize_Params ds = {
        .structSize = CUpti_PmSampling_GetCounterDataSize_Params_STRUCT_SIZE,
        .pPmSamplingObject = s->obj,
        .pMetricNames = (const char **)metrics,
        .numMetrics = N_METRICS,
        .maxSamples = MAX_SAMPLES};
    TRY(cuptiPmSamplingGetCounterDataSize, &ds);
    s->image_bytes = ds.counterDataSize;
    s->image = malloc(s->image_bytes);
    if (!s->image) goto fail;
    CUpti_PmSampling_CounterDataImage_Initialize_Params ii = {
        .structSize = CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        .pPmSamplingObject = s->obj,
        .counterDataSize = s->image_bytes,
        .pCounterData = s->image};
    TRY(cuptiPmSamplingCounterDataImageInitialize, &ii);
    CUpti_PmSampling_Start_Params st = {.structSize = CUpti_PmSampling_Start_Params_STRUCT_SIZE,
                                        .pPmSamplingObject = s->obj};
    TRY(cuptiPmSamplingStart, &st);
    s->first_image = true;
    return true;
fail:
    return false;
}

// Starts sampling device's counters; false (said once, on stderr and in META) when it cannot.
static bool sampler_open(sampler *s, uint32_t device) {
    memset(s, 0, sizeof *s);
    s->device = device;
    size_t bytes = 0;
    if (sampler_config(s, device, &bytes) && sampler_start(s, bytes)) {
        uint64_t now = 0;
        if (cuptiGetTimestamp(&now) == CUPTI_SUCCESS) { // how long after the context sampling began
            char key[64], v[32];
            snprintf(key, sizeof key, "counters_start_ns_gpu%u", device);
            snprintf(v, sizeof v, "%llu", (unsigned long long)now);
            amp_record_meta(&(amp_rec_meta){.key = key, .value = v});
        }
        return true;
    }
    if (s->obj) {
        CUpti_PmSampling_Disable_Params d = {
            .structSize = CUpti_PmSampling_Disable_Params_STRUCT_SIZE, .pPmSamplingObject = s->obj};
        cuptiPmSamplingDisable(&d);
    }
    if (s->host) {
        CUpti_Profiler_Host_Deinitialize_Params d = {
            .structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
            .pHostObject = s->host};
        cuptiProfilerHostDeinitialize(&d);
    }
    free(s->image);
    free(s->avail);
    free(s->config);
    memset(s, 0, sizeof *s);
    return false;
}

// Decodes what the hardware buffer holds, emits the completed samples and empties the image.
static void sampler_decode(sampler *s) {
    const uint32_t device = s->device;
    CUpti_PmSampling_DecodeData_Params dd = {.structSize =
                                                 CUpti_PmSampling_DecodeData_Params_STRUCT_SIZE,
                                             .pPmSamplingObject = s->obj,
                                             .pCounterDataImage = s->image,
                                             .counterDataImageSize = s->image_bytes};
    CUptiResult r = cuptiPmSamplingDecodeData(&dd);
    if (r != CUPTI_SUCCESS) {
        fprintf(stderr, "ampprobe: --counters: GPU %u: cuptiPmSamplingDecodeData: %s\n", device,
                result_name(r));
        return;
    }
    s->overflows += dd.overflow != 0;
    CUpti_PmSampling_GetCounterDataInfo_Params info = {
        .structSize = CUpti_PmSampling_GetCounterDataInfo_Params_STRUCT_SIZE,
        .pCounterDataImage = s->image,
        .counterDataImageSize = s->image_bytes};
    if (cuptiPmSamplingGetCounterDataInfo(&info) != CUPTI_SUCCESS) return;
    double values[N_METRICS];
    for (size_t i = 0; i < info.numCompletedSamples; i++) {
        if (s->first_image && i == 0) continue;
        CUpti_PmSampling_CounterData_GetSampleInfo_Params si = {
            .structSize = CUpti_PmSampling_CounterData_GetSampleInfo_Params_STRUCT_SIZE,
            .pPmSamplingObject = s->obj,
            .pCounterDataImage = s->image,
            .counterDataImageSize = s->image_bytes,
            .sampleIndex = i};
        CUpti_Profiler_Host_EvaluateToGpuValues_Params ev = {
            .structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE,
            .pHostObject = s->host,
            .pCounterDataImage = s->image,
            .counterDataImageSize = s->image_bytes,
            .rangeIndex = i,
            .ppMetricNames = (const char **)metrics,
            .numMetrics = N_METRICS,
            .pMetricValues = values};
        if (cuptiPmSamplingCounterDataGetSampleInfo(&si) != CUPTI_SUCCESS ||
            cuptiProfilerHostEvaluateToGpuValues(&ev) != CUPTI_SUCCESS)
            continue;
        for (size_t m = 0; m < N_METRICS; m++)
            amp_record_gpu_metric(&(amp_rec_gpu_metric){.device_id = (int32_t)device,
                                                        .start_ns = (int64_t)si.startTimestamp,
                                                        .end_ns = (int64_t)si.endTimestamp,
                                                        .metric = metrics[m],
                                                        .value = values[m]});
        s->samples++;
    }
    CUpti_PmSampling_CounterDataImage_Initialize_Params ii = {
        // emptied for the next decode
        .structSize = CUpti_PmSampling_CounterDataImage_Initialize_Params_STRUCT_SIZE,
        .pPmSamplingObject = s->obj,
        .counterDataSize = s->image_bytes,
        .pCounterData = s->image};
    cuptiPmSamplingCounterDataImageInitialize(&ii);
    if (info.numCompletedSamples) s->first_image = false;
}

int amp_counters_check_chip(const char *chip, const char **bad) {
    *bad = NULL;
    CUpti_Profiler_Host_Initialize_Params hi = {
        .structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE,
        .profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING,
        .pChipName = chip};
    CUptiResult r = cuptiProfilerHostInitialize(&hi);
    if (r != CUPTI_SUCCESS) return (int)r;
    for (size_t m = 0; m < N_METRICS && r == CUPTI_SUCCESS; m++) {
        CUpti_Profiler_Host_GetMetricProperties_Params mp = {
            .structSize = CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE,
            .pHostObject = hi.pHostObject,
            .pMetricName = metrics[m]};
        r = cuptiProfilerHostGetMetricProperties(&mp);
        if (r != CUPTI_SUCCESS) *bad = metrics[m];
    }
    CUpti_Profiler_Host_Deinitialize_Params hd = {
        .structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE,
        .pHostObject = hi.pHostObject};
    cuptiProfilerHostDeinitialize(&hd);
    return (int)r;
}

void amp_counters_device_seen(uint32_t device) {
    pthread_mutex_lock(&g.lock);
    bool known = g.given_up || g.n == MAX_DEVICES;
    for (int i = 0; i < g.n && !known; i++)
        known = g.dev[i].device == device;
    if (!known && !g.initialized) {
        CUpti_Profiler_Initialize_Params p = {.structSize =
                                                  CUpti_Profiler_Initialize_Params_STRUCT_SIZE};
        CUptiResult r = cuptiProfilerInitialize(&p);
        if (r != CUPTI_SUCCESS) {
            unavailable(device, "cuptiProfilerInitialize", r);
            g.given_up = true;
            known = true;
        }
        g.initialized = !g.given_up;
    }
    if (!known && sampler_open(&g.dev[g.n], device)) {
        g.n++;
        amp_record_meta(&(amp_rec_meta){.key = "counters", .value = "pm_sampling"});
        char v[32];
        snprintf(v, sizeof v, "%u", SAMPLE_NS);
        amp_record_meta(&(amp_rec_meta){.key = "counters_interval_ns", .value = v});
    } else if (!known) {
        g.given_up = true; // said why once; the other devices would say the same
    }
    pthread_mutex_unlock(&g.lock);
}

void amp_counters_poll(void) {
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.n; i++)
        sampler_decode(&g.dev[i]);
    pthread_mutex_unlock(&g.lock);
}

void amp_counters_stop(void) {
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < g.n; i++) {
        sampler *s = &g.dev[i];
        CUpti_PmSampling_Stop_Params st = {.structSize = CUpti_PmSampling_Stop_Params_STRUCT_SIZE,
                                           .pPmSamplingObject = s->obj};
        cuptiPmSamplingStop(&st);
        sampler_decode(s);
        char key[64], v[64];
        snprintf(key, sizeof key, "counters_samples_gpu%u", s->device);
        snprintf(v, sizeof v, "%lld", (long long)s->samples);
        amp_record_meta(&(amp_rec_meta){.key = key, .value = v});
        if (s->overflows)
            fprintf(stderr,
                    "ampprobe: --counters: GPU %u: the sample buffer overflowed %lld "
                    "times; samples were lost\n",
                    s->device, (long long)s->overflows);
    }
    // Nothing is disabled or freed: this runs at process exit, where tearing the PM sampling
    // objects down aborted with heap corruption on an H200 (the CUDA runtime's own exit handlers
    // may have run by then); the driver releases them with the process.
    g.n = 0;
    pthread_mutex_unlock(&g.lock);
}
