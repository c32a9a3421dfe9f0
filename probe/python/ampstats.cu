/*
 * ampstats.cu — libampstats_cuda.so: libampcore's fused statistics kernel (cuda-stats.cu) for the
 * PyTorch bridge, on PyTorch's tensors and PyTorch's current stream, through ctypes
 * (probe/python/ampprobe/_devstats.py).
 *
 * Addresses, streams and slots are passed as integers (what torch's data_ptr() and cuda_stream
 * give); dtypes and the target are amp_dtype codes; each slot is an amp_stats in device memory.
 * The module links the CUDA runtime statically and works on whichever context is current on the
 * calling thread (PyTorch's primary context), so nothing here allocates or synchronises.
 */
#include "cuda-stats.h"

#include <stdio.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

// The layout the Python side mirrors: sizeof(amp_stats); it refuses the module on a mismatch.
EXPORT int ampstats_slot_bytes(void) { return (int)sizeof(amp_stats); }

// One tensor: its statistics relative to target added into *slot. 0, or a cudaError_t code.
EXPORT int ampstats_one(uintptr_t data, int64_t numel, int dtype, uintptr_t slot, int target,
                        uintptr_t stream) {
    const cuda_stats_job job = {(const void *)data, numel, (amp_stats *)slot, (amp_dtype)dtype};
    return (int)cuda_stats_launch(&job, 1, (amp_dtype)target, (cudaStream_t)stream);
}

// n tensors given as parallel arrays, in as few launches as the kernel's parameters allow.
EXPORT int ampstats_many(int n, const uintptr_t *data, const int64_t *numel, const int32_t *dtype,
                         const uintptr_t *slot, int target, uintptr_t stream) {
    enum { CHUNK = 256 };
    cuda_stats_job jobs[CHUNK];
    for (int done = 0; done < n; done += CHUNK) {
        const int k = n - done < CHUNK ? n - done : CHUNK;
        for (int i = 0; i < k; i++)
            jobs[i] = {(const void *)data[done + i], numel[done + i], (amp_stats *)slot[done + i],
                       (amp_dtype)dtype[done + i]};
        cudaError_t e = cuda_stats_launch(jobs, k, (amp_dtype)target, (cudaStream_t)stream);
        if (e != cudaSuccess) return (int)e;
    }
    return 0;
}

// amp_stats_empty() into n slots from slots on.
EXPORT int ampstats_reset(uintptr_t slots, int64_t n, uintptr_t stream) {
    return (int)cuda_stats_reset((amp_stats *)slots, n, (cudaStream_t)stream);
}

// The name and text of a code the functions above returned.
EXPORT const char *ampstats_error(int code) {
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorName((cudaError_t)code),
             cudaGetErrorString((cudaError_t)code));
    return buf;
}
