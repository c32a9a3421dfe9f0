/*
 * cupti_floor.c — libcupti_floor.so: CUPTI and nothing else, the floor any CUPTI-based launch
 * tracer pays. A CUDA injection library (CUDA_INJECTION64_PATH=build/bench/libcupti_floor.so):
 * it enables CUPTI's kernel activity records, plus the kinds named in CUPTI_FLOOR_KINDS (a comma
 * list of runtime, driver, memcpy, memset, sync), counts the kernel records, and at exit prints
 * "cupti_floor: N kernel records (kinds: ...)" to stderr. Compared with launch_cost.cu plain and
 * under `ampprobe run --trace cuda` (see there).
 */
#include <cupti.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20) // 8 MiB per activity buffer

static atomic_llong kernel_records;
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
    fprintf(stderr, "cupti_floor: %lld kernel records (kinds: %s)\n",
            (long long)atomic_load(&kernel_records), kinds_enabled);
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
        if (i == sizeof table / sizeof *table)
            fprintf(stderr,
                    "cupti_floor: CUPTI_FLOOR_KINDS: unknown kind '%s' (runtime, driver, "
                    "memcpy, memset, sync)\n",
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
