/*
 * ampstats.cu — libampstats_cuda.so: libampcore's fused statistics kernel (cuda-stats.cu) for the
 * PyTorch bridge, on PyTorch's tensors and PyTorch's current stream, through ctypes
 * (probe/python/ampprobe/_devstats.py).
 *
 * Addresses, streams and slots are passed as integers (what torch's data_ptr() and cuda_stream
 * give); dtypes and the target are amp_dtype codes; each slot is an amp_stats in device memory.
 * The module links the CUDA runtime statically and works on whichever context is current on the
 * calling thread (PyTorch's primary context); nothing here allocates, and only ampstats_read
 * waits (for its own stream).
 */
#include "cuda-stats.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// Scalars as doubles: a few one-element tensors (the loss, the loss scale, found_inf) read in one
// launch into a float64 array, so that a step's extras travel with its statistics. dtype codes:
// amp_dtype's, and AMPSTATS_F64 for double.
enum { AMPSTATS_F64 = 5, GATHER_MAX = 16 };
struct gather_params {
    int n;
    int dtype[GATHER_MAX];
    const void *src[GATHER_MAX];
};

__global__ void gather_kernel(const __grid_constant__ gather_params p, double *dst) {
    const int i = threadIdx.x;
    if (i >= p.n) return;
    const void *s = p.src[i];
    double v;
    switch (p.dtype[i]) {
    case AMP_DTYPE_F32: v = *(const float *)s; break;
    case AMP_DTYPE_F16: v = __half2float(*(const __half *)s); break;
    case AMP_DTYPE_BF16: v = __bfloat162float(*(const __nv_bfloat16 *)s); break;
    case AMP_DTYPE_I32: v = *(const int32_t *)s; break;
    case AMP_DTYPE_I64: v = (double)*(const int64_t *)s; break;
    default: v = *(const double *)s; break;
    }
    dst[i] = v;
}

static cudaError_t gather(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dst,
                          cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (n > GATHER_MAX) return cudaErrorInvalidValue;
    gather_params p = {};
    p.n = n;
    for (int i = 0; i < n; i++) {
        p.src[i] = (const void *)src[i];
        p.dtype[i] = dtype[i];
    }
    gather_kernel<<<1, 32, 0, stream>>>(p, (double *)dst);
    return cudaGetLastError();
}

// n (<= 16) scalars into dst[0..n) as doubles, in stream order.
EXPORT int ampstats_gather(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dst,
                           uintptr_t stream) {
    return (int)gather(n, src, dtype, dst, (cudaStream_t)stream);
}

// The same, read back now: stream first waits for event (0: none), the scalars go through the
// device scratch dev (n doubles) into host (n doubles, pinned for speed) and this waits for that
// stream only. What a step's loss and found_inf are, without waiting for the rest of the step.
EXPORT int ampstats_read(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dev,
                         uintptr_t host, uintptr_t event, uintptr_t stream) {
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaSuccess;
    if (event) e = cudaStreamWaitEvent(s, (cudaEvent_t)event, 0);
    if (e == cudaSuccess) e = gather(n, src, dtype, dev, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync((void *)host, (const void *)dev, (size_t)n * sizeof(double),
                            cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return (int)e;
}

// The name and text of a code the functions above returned.
EXPORT const char *ampstats_error(int code) {
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorName((cudaError_t)code),
             cudaGetErrorString((cudaError_t)code));
    return buf;
}
