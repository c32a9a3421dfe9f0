/*
 * kept-calls.h — the CUDA runtime and driver calls whose CUPTI records the capture keeps: the
 * calls that launch work, copy, set or wait, which kernels and copies correlate with. Shared by
 * the injection library (inject.c) and the benchmark's CUPTI floor (probe/bench/cupti_floor.c),
 * so that both measure the same calls.
 */
#ifndef AMP_KEPT_CALLS_H
#define AMP_KEPT_CALLS_H

#include <cupti.h>

#include <stdbool.h>
#include <string.h>

// Name prefixes of the kept calls of each API, NULL-terminated.
static const char *const amp_kept_runtime_calls[] = {
    "cudaLaunch",           "cudaGraphLaunch",       "cudaMemcpy",
    "cudaMemset",           "cudaDeviceSynchronize", "cudaStreamSynchronize",
    "cudaEventSynchronize", "cudaStreamWaitEvent",   NULL};
static const char *const amp_kept_driver_calls[] = {
    "cuLaunch",           "cuGraphLaunch",     "cuMemcpy",
    "cuMemset",           "cuCtxSynchronize",  "cuStreamSynchronize",
    "cuEventSynchronize", "cuStreamWaitEvent", NULL};

// Whether call cbid of domain (runtime or driver API) is kept; its name into *name when it is.
static inline bool amp_call_kept(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const char **name) {
    const char *n = NULL;
    if (cuptiGetCallbackName(domain, cbid, &n) != CUPTI_SUCCESS || !n) return false;
    const char *const *kept =
        domain == CUPTI_CB_DOMAIN_RUNTIME_API ? amp_kept_runtime_calls : amp_kept_driver_calls;
    for (; *kept; kept++)
        if (strncmp(n, *kept, strlen(*kept)) == 0) {
            if (name) *name = n;
            return true;
        }
    return false;
}

#endif
