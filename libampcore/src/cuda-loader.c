/*
 * cuda-loader.c — finds and opens the CUDA backend module (libampcore_cuda.so) at run time, so
 * libampcore itself never links CUDA and a machine without a driver or GPU runs everything else.
 *
 * Where it looks, first hit wins: $AMPPROBE_CUDA_MODULE (a path to the module), the executable's
 * folder and its parent (build/ holds the module, build/samples/ the samples), the build folder
 * this libampcore was configured in, then the dynamic linker's default path. The module is
 * opened once per process and kept; each context gets its own backend context from the entry.
 */
#define _GNU_SOURCE
#include "cuda-loader.h"

#include "amp-impl.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static amp_cuda_open_fn open_fn; // the module's entry, once found
static char load_error[1024];    // why no module could be opened (kept: the answer is final)
static bool load_tried;

// dlopen()s path; on success resolves the entry into open_fn. Failures append to why.
static bool try_open(const char *path, char *why, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        // A module that exists but fails to load (missing libcudart / libcublasLt) is the
        // interesting reason; "no such file" for the guessed places is not.
        if (e && !strstr(e, "No such file"))
            amp_appendf(why, n, strlen(why), "%s%s", why[0] ? "; " : "", e);
        return false;
    }
    amp_cuda_open_fn fn = (amp_cuda_open_fn)(uintptr_t)dlsym(h, AMP_CUDA_ENTRY_NAME);
    if (!fn) {
        amp_appendf(why, n, strlen(why), "%s%s has no %s", why[0] ? "; " : "", path,
                    AMP_CUDA_ENTRY_NAME);
        dlclose(h);
        return false;
    }
    open_fn = fn;
    return true;
}

// Tries dir/libampcore_cuda.so.
static bool try_dir(const char *dir, char *why, size_t n) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, AMP_CUDA_MODULE_FILE) >= (int)sizeof path)
        return false;
    return access(path, R_OK) == 0 && try_open(path, why, n);
}

static void load_module(void) {
    char why[768] = "";
    const char *env = getenv("AMPPROBE_CUDA_MODULE");
    if (env && *env) {
        if (try_open(env, why, sizeof why)) return;
        snprintf(load_error, sizeof load_error,
                 "--device cuda: cannot load AMPPROBE_CUDA_MODULE=%s (%s)", env,
                 *why ? why : "not found");
        return;
    }
    char exe[PATH_MAX];
    if (amp_exe_dir(exe, sizeof exe)) { // beside the binary, then in the folder above it
        if (try_dir(exe, why, sizeof why)) return;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (try_dir(exe, why, sizeof why)) return;
        }
    }
#ifdef AMP_CUDA_MODULE_DIR
    if (try_dir(AMP_CUDA_MODULE_DIR, why, sizeof why)) return;
#endif
    if (try_open(AMP_CUDA_MODULE_FILE, why, sizeof why)) return;
#ifdef AMP_CUDA_MODULE_DIR
    snprintf(load_error, sizeof load_error,
             "--device cuda: cannot load the CUDA backend module %s (%s)", AMP_CUDA_MODULE_FILE,
             *why ? why : "not found next to the executable or in " AMP_CUDA_MODULE_DIR);
#else
    snprintf(load_error, sizeof load_error,
             "--device cuda: this build has no CUDA backend: configure with -DAMP_WITH_CUDA=ON%s%s",
             *why ? " (" : "", *why ? why : "");
    if (*why) strncat(load_error, ")", sizeof load_error - strlen(load_error) - 1);
#endif
}

amp_status amp_cuda_backend_load(const amp_backend_i **be, void **bctx) {
    *be = NULL;
    *bctx = NULL;
    pthread_mutex_lock(&load_lock);
    if (!load_tried) {
        load_module();
        load_tried = true;
    }
    amp_cuda_open_fn fn = open_fn;
    pthread_mutex_unlock(&load_lock);
    if (!fn) return amp_set_error(AMP_ERR_NO_DEVICE, "%s", load_error);
    const bool nvtx = amp_nvtx_wanted();
    const amp_cuda_host host = {.abi = AMP_CUDA_MODULE_ABI,
                                .abort = amp_abort,
                                .nvtx_push = nvtx ? amp_nvtx_push : NULL,
                                .nvtx_pop = nvtx ? amp_nvtx_pop : NULL};
    char err[512] = "";
    const amp_backend_i *t = fn(&host, bctx, err, sizeof err);
    if (!t) return amp_set_error(AMP_ERR_NO_DEVICE, "--device cuda: %s", err);
    *be = t;
    return AMP_OK;
}
