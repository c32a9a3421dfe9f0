/*
 * cuda-loader.h — the soft link between libampcore and its CUDA backend module.
 *
 * libampcore never links CUDA. The backend lives in libampcore_cuda.so, which cuda-loader.c
 * dlopen()s on the first `--device cuda` context and asks for its table through one entry
 * symbol, AMP_CUDA_ENTRY_NAME. The module gets the host's abort function (so broken
 * invariants inside it go through libampcore's abort hook) and its NVTX ranges (nvtx.c) when a
 * tool is injected, and answers with its table and a backend context, or with a message saying
 * why there is no device.
 */
#ifndef AMP_CUDA_LOADER_H
#define AMP_CUDA_LOADER_H

#include "amp-impl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_CUDA_MODULE_ABI 6
#define AMP_CUDA_ENTRY_NAME "amp_cuda_backend_open"
#define AMP_CUDA_MODULE_FILE "libampcore_cuda.so"

// What libampcore lends the module.
typedef struct amp_cuda_host {
    int abi; // AMP_CUDA_MODULE_ABI
    void (*abort)(const char *file, int line, const char *fmt, ...);
    // amp_nvtx_push/pop, around the module's own launches of statistics (a capture attributes
    // those kernels to the "ampprobe.stats" range); NULL when no NVTX tool is injected
    void (*nvtx_push)(const char *name);
    void (*nvtx_pop)(void);
} amp_cuda_host;

// The entry symbol: the backend table and a fresh context in *bctx, or NULL with err filled.
typedef const amp_backend_i *(*amp_cuda_open_fn)(const amp_cuda_host *host, void **bctx, char *err,
                                                 size_t errlen);

// Loads the module (once per process) and opens a backend context on the current GPU.
// AMP_ERR_NO_DEVICE with amp_last_error() set when there is no module, driver or GPU.
amp_status amp_cuda_backend_load(const amp_backend_i **be, void **bctx);

#ifdef __cplusplus
}
#endif

#endif // AMP_CUDA_LOADER_H
