/*
 * cupti_floor.c — libcupti_floor.so: CUPTI and nothing else, the floor any CUPTI-based launch
 * tracer pays. A CUDA injection library (CUDA_INJECTION64_PATH=build/bench/libcupti_floor.so):
 * it enables CUPTI's kernel activity records, plus the kinds named in CUPTI_FLOOR_KINDS (a comma
 * list of runtime, driver, memcpy, memset, sync, api, callbacks), counts the kernel records, and
 * at exit prints "cupti_floor: N kernel records (kinds: ...)" to stderr. Compared with
 * launch_cost.cu plain and under `ampprobe run --trace cuda` (see there). Two more tokens tie
 * kernels to the calls that launched them, over the calls the capture keeps
 * (probe/inject/kept-calls.h: those that launch, copy, set or wait): `api` enables CUPTI's
 * activity records of those calls alone, `callbacks` subscribes to CUPTI's callbacks for them
 * instead and keeps, per call, what an API record holds (correlation id, call id, thread, enter
 * and exit times) in a per-thread array.
 */
#define _GNU_SOURCE
#include "../inject/kept-calls.h"

#include <cupti.h>
#include <unistd.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20) // 8 MiB per activity buffer

static atomic_llong kernel_records, calls_seen;
static char kinds_enabled[128] = "kernel"; // for the exit line

// Runs a CUPTI call; on failure prints what failed and evaluates to false.
#define CUPTI_OK(call) cupti_ok((call), #call)

static int cupti_ok(CUptiResult r, const char *what) {
    if (r == CUPTI_SUCCESS) return 1;
    const char *s = NULL;
    if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown error";
    fprintf(stderr, "cupti_floor: %s: %s (%d)\n", what, s, (int)r);
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, BUFFER_BYTES); // NULL: CUPTI drops the records
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0; // as many as fit
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    long long kernels = 0;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
        kernels += rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    atomic_fetch_add(&kernel_records, kernels);
    free(buffer);
}

static void at_exit(void) {
    CUPTI_OK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    fprintf(stderr, "cupti_floor: %lld kernel records, %lld calls seen by callbacks (kinds: %s)\n",
            (long long)atomic_load(&kernel_records), (long long)atomic_load(&calls_seen),
            kinds_enabled);
}

// What an API record holds, kept by the callbacks.
typedef struct {
    uint64_t start, end;
    uint32_t correlation, cbid, tid, domain;
} call_row;

#define CALL_ROWS 4096
static __thread call_row rows[CALL_ROWS];
static __thread unsigned n_rows;
static __thread uint32_t tid;

static void CUPTIAPI on_call(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *data) {
    (void)userdata;
    const CUpti_CallbackData *cb = data;
    uint64_t now = 0;
    cuptiGetTimestamp(&now);
    if (cb->callbackSite == CUPTI_API_ENTER) {
        *cb->correlationData = now;
        return;
    }
    if (!tid) tid = (uint32_t)gettid();
    rows[n_rows % CALL_ROWS] = (call_row){*cb->correlationData, now, cb->correlationId,
                                          (uint32_t)cbid,       tid, (uint32_t)domain};
    n_rows++;
    atomic_fetch_add_explicit(&calls_seen, 1, memory_order_relaxed);
}

// Enables, for the kept calls of both APIs, activity records (callbacks 0) or callbacks.
static int enable_calls(int callbacks) {
    static CUpti_SubscriberHandle subscriber;
    if (callbacks && !CUPTI_OK(cuptiSubscribe(&subscriber, on_call, NULL))) return 0;
    const struct {
        CUpti_CallbackDomain domain;
        uint32_t size;
    } apis[] = {{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE},
                {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE}};
    int n = 0;
    for (int a = 0; a < 2; a++)
        for (uint32_t cbid = 1; cbid < apis[a].size; cbid++) {
            if (!amp_call_kept(apis[a].domain, cbid, NULL)) continue;
            CUptiResult r = callbacks ? cuptiEnableCallback(1, subscriber, apis[a].domain, cbid)
                            : apis[a].domain == CUPTI_CB_DOMAIN_RUNTIME_API
                                ? cuptiActivityEnableRuntimeApi(cbid, 1)
                                : cuptiActivityEnableDriverApi(cbid, 1);
            n += r == CUPTI_SUCCESS;
        }
    return n;
}

// Enables the kinds named in CUPTI_FLOOR_KINDS; an unknown name is reported and skipped.
static void enable_extra_kinds(void) {
    static const struct {
        const char *token;
        CUpti_ActivityKind kind;
    } table[] = {{"runtime", CUPTI_ACTIVITY_KIND_RUNTIME},
                 {"driver", CUPTI_ACTIVITY_KIND_DRIVER},
                 {"memcpy", CUPTI_ACTIVITY_KIND_MEMCPY},
                 {"memset", CUPTI_ACTIVITY_KIND_MEMSET},
                 {"sync", CUPTI_ACTIVITY_KIND_SYNCHRONIZATION}};
    const char *env = getenv("CUPTI_FLOOR_KINDS");
    char list[256], *save = NULL;
    snprintf(list, sizeof list, "%s", env ? env : "");
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < sizeof table / sizeof *table && strcmp(tok, table[i].token) != 0)
            i++;
        if (strcmp(tok, "api") == 0 || strcmp(tok, "callbacks") == 0) {
            int n = enable_calls(tok[0] == 'c');
            snprintf(kinds_enabled + strlen(kinds_enabled),
                     sizeof kinds_enabled - strlen(kinds_enabled), ",%s(%d calls)", tok, n);
        } else if (i == sizeof table / sizeof *table)
            fprintf(stderr,
                    "cupti_floor: CUPTI_FLOOR_KINDS: unknown kind '%s' (runtime, driver, "
                    "memcpy, memset, sync, api, callbacks)\n",
                    tok);
        else if (CUPTI_OK(cuptiActivityEnable(table[i].kind)))
            snprintf(kinds_enabled + strlen(kinds_enabled),
                     sizeof kinds_enabled - strlen(kinds_enabled), ",%s", tok);
    }
}

// Called by the CUDA driver inside the first cuInit of the process.
__attribute__((visibility("default"))) int InitializeInjection(void) {
    if (!CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) ||
        !CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)))
        return 0;
    enable_extra_kinds();
    atexit(at_exit);
    return 1;
}
