/*
 * ampstats.cu — libampstats_cuda.so: libampcore's fused statistics kernel (cuda-stats.cu) for the
 * PyTorch bridge, on PyTorch's tensors and PyTorch's current stream, through ctypes
 * (probe/python/ampprobe/_devstats.py).
 *
 * Addresses, streams and slots are passed as integers (what torch's data_ptr() and cuda_stream
 * give); dtypes and the target are amp_dtype codes; each slot is an amp_stats in device memory.
 * The module links the CUDA runtime statically and works in the primary context of the GPU each
 * call names (device: the one whose stream, memory and events it is given), made current for the
 * call and the thread's current one restored after it: a model may live on a GPU other than the
 * current one, and PyTorch's default stream is the same handle on every GPU. Only
 * ampstats_host_alloc and ampstats_event_new allocate (ampstats_host_free and ampstats_event_free
 * give back), and only ampstats_wait waits (for one event).
 */
#include "cuda-stats.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

// Makes GPU device current while it lives, if it is not already, and the previous one again after.
struct DeviceGuard {
    int prev = -1;
    explicit DeviceGuard(int device) {
        int cur = -1;
        if (device >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != device &&
            cudaSetDevice(device) == cudaSuccess)
            prev = cur;
    }
    ~DeviceGuard() {
        if (prev >= 0) cudaSetDevice(prev);
    }
};

// The layout the Python side mirrors: sizeof(amp_stats); it refuses the module on a mismatch.
EXPORT int ampstats_slot_bytes(void) { return (int)sizeof(amp_stats); }

// n tensors given as parallel arrays, their figures into n consecutive slots from slots on, in
// as few launches as the kernel's parameters allow.
EXPORT int ampstats_many(int n, const uintptr_t *data, const int64_t *numel, const int32_t *dtype,
                         uintptr_t slots, int target, uintptr_t stream, int device) {
    DeviceGuard on(device);
    enum { CHUNK = 256 };
    cuda_stats_job jobs[CHUNK];
    for (int done = 0; done < n; done += CHUNK) {
        const int k = n - done < CHUNK ? n - done : CHUNK;
        for (int i = 0; i < k; i++)
            jobs[i] = {(const void *)data[done + i], numel[done + i], (amp_stats *)slots + done + i,
                       (amp_dtype)dtype[done + i]};
        cudaError_t e = cuda_stats_launch(jobs, k, (amp_dtype)target, (cudaStream_t)stream);
        if (e != cudaSuccess) return (int)e;
    }
    return 0;
}

// amp_stats_empty() into n slots from slots on.
EXPORT int ampstats_reset(uintptr_t slots, int64_t n, uintptr_t stream, int device) {
    DeviceGuard on(device);
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
                           uintptr_t stream, int device) {
    DeviceGuard on(device);
    return (int)gather(n, src, dtype, dst, (cudaStream_t)stream);
}

// Marks where a step's loss and found_inf are computed, on the stream that computed them: the n
// scalars as doubles straight into dev (the device address of n doubles of ampstats_host_alloc's
// mapped memory), then event recorded behind them. ampstats_wait(event) then says they are on the
// host; the stream does not wait, and no other stream is involved.
EXPORT int ampstats_mark(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dev,
                         uintptr_t event, uintptr_t stream, int device) {
    DeviceGuard on(device);
    cudaError_t e = gather(n, src, dtype, dev, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
    return (int)e;
}

// The end of a step's statistics, in stream order and waiting for nothing: n scalars gathered
// into the buffer's head (as ampstats_gather into buf), nbytes of the device buffer buf copied
// into pinned host memory, event recorded behind the copy, then the n_slots slots from slots on
// emptied for the next step.
EXPORT int ampstats_finish(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t buf,
                           uintptr_t host, size_t nbytes, uintptr_t slots, int64_t n_slots,
                           uintptr_t event, uintptr_t stream, int device) {
    DeviceGuard on(device);
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = gather(n, src, dtype, buf, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync((void *)host, (const void *)buf, nbytes, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)event, s);
    if (e == cudaSuccess) e = cuda_stats_reset((amp_stats *)slots, n_slots, s);
    return (int)e;
}

// Records an event of ampstats_event_new's on stream (both of GPU device).
EXPORT int ampstats_record(uintptr_t event, uintptr_t stream, int device) {
    DeviceGuard on(device);
    return (int)cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
}

// Waits for an event of ampstats_event_new's (what ampstats_mark recorded).
EXPORT int ampstats_wait(uintptr_t event) {
    return (int)cudaEventSynchronize((cudaEvent_t)event);
}

// Pinned host memory that the device can write into (mapped): its host address, and its device
// address in *dev; 0 when it cannot be had. ampstats_host_free gives it back (nothing may still
// write into it).
EXPORT uintptr_t ampstats_host_alloc(size_t bytes, uintptr_t *dev) {
    void *p = NULL, *d = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
        return 0;
    if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) {
        cudaFreeHost(p);
        return 0;
    }
    *dev = (uintptr_t)d;
    return (uintptr_t)p;
}

EXPORT int ampstats_host_free(uintptr_t host) {
    return (int)cudaFreeHost((void *)host);
}

// An event of GPU device for ampstats_mark and ampstats_finish (no timing), or 0.
EXPORT uintptr_t ampstats_event_new(int device) {
    DeviceGuard on(device);
    cudaEvent_t e = NULL;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 0;
    return (uintptr_t)e;
}

// Destroys an event of ampstats_event_new's (one still pending is released once it completes).
EXPORT int ampstats_event_free(uintptr_t event, int device) {
    DeviceGuard on(device);
    return (int)cudaEventDestroy((cudaEvent_t)event);
}

// The name and text of a code the functions above returned.
EXPORT const char *ampstats_error(int code) {
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorName((cudaError_t)code),
             cudaGetErrorString((cudaError_t)code));
    return buf;
}
