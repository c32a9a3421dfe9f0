/*
 * ampstats.cu — libampstats_cuda.so: libampcore's fused statistics kernel (cuda-stats.cu) for the
 * PyTorch bridge, on PyTorch's tensors and PyTorch's current stream, through ctypes
 * (probe/python/ampprobe/_devstats.py).
 *
 * Addresses, streams and slots are passed as integers (what torch's data_ptr() and cuda_stream
 * give); dtypes and the target are amp_dtype codes; each slot is an amp_stats in device memory.
 * The module links the CUDA runtime statically and works in the primary context of the GPU each
 * call names (device: the one whose stream and memory it is given), made current for the
 * call and the thread's current one restored after it: a model may live on a GPU other than the
 * current one, and PyTorch's default stream is the same handle on every GPU. Only
 * ampstats_host_alloc allocates (ampstats_host_free gives back), and only ampstats_poll waits.
 */
#include "cuda-stats.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

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
EXPORT int ampstats_slot_bytes(void) {
    return (int)sizeof(amp_stats);
}

// n tensors given as parallel arrays, their figures into the slots from slots on (tensor i into
// slot slot[i], or slot i when slot is NULL), in as few launches as the kernel's parameters allow.
EXPORT int ampstats_many(int n, const uintptr_t *data, const int64_t *numel, const int32_t *dtype,
                         const int32_t *slot, uintptr_t slots, int target, uintptr_t stream,
                         int device) {
    DeviceGuard on(device);
    enum { CHUNK = 256 };
    cuda_stats_job jobs[CHUNK];
    for (int done = 0; done < n; done += CHUNK) {
        const int k = n - done < CHUNK ? n - done : CHUNK;
        for (int i = 0; i < k; i++)
            jobs[i] = {(const void *)data[done + i], numel[done + i],
                       (amp_stats *)slots + (slot ? slot[done + i] : done + i),
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
// HEAD: the doubles ahead of the slots in a step buffer, _devstats.py's HEAD.
enum { AMPSTATS_F64 = 5, GATHER_MAX = 16, HEAD = 16 };
struct gather_params {
    int n;
    int dtype[GATHER_MAX];
    const void *src[GATHER_MAX];
};

__device__ double gathered(const gather_params &p, int i) {
    const void *s = p.src[i];
    switch (p.dtype[i]) {
    case AMP_DTYPE_F32:
        return *(const float *)s;
    case AMP_DTYPE_F16:
        return __half2float(*(const __half *)s);
    case AMP_DTYPE_BF16:
        return __bfloat162float(*(const __nv_bfloat16 *)s);
    case AMP_DTYPE_I32:
        return *(const int32_t *)s;
    case AMP_DTYPE_I64:
        return (double)*(const int64_t *)s;
    default:
        return *(const double *)s;
    }
}

__global__ void gather_kernel(const __grid_constant__ gather_params p, double *dst) {
    if ((int)threadIdx.x < p.n) dst[threadIdx.x] = gathered(p, threadIdx.x);
}

// p for n (<= GATHER_MAX) scalars; false when there are more.
static bool gather_args(int n, const uintptr_t *src, const int32_t *dtype, gather_params *p) {
    if (n > GATHER_MAX) return false;
    *p = {};
    p->n = n;
    for (int i = 0; i < n; i++) {
        p->src[i] = (const void *)src[i];
        p->dtype[i] = dtype[i];
    }
    return true;
}

static cudaError_t gather(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dst,
                          cudaStream_t stream) {
    gather_params p;
    if (n <= 0) return cudaSuccess;
    if (!gather_args(n, src, dtype, &p)) return cudaErrorInvalidValue;
    gather_kernel<<<1, 32, 0, stream>>>(p, (double *)dst);
    return cudaGetLastError();
}

// n (<= 16) scalars into dst[0..n) as doubles, in stream order.
EXPORT int ampstats_gather(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dst,
                           uintptr_t stream, int device) {
    DeviceGuard on(device);
    return (int)gather(n, src, dtype, dst, (cudaStream_t)stream);
}

// A step's figures reach the host through mapped pinned memory (ampstats_host_alloc) that the
// kernels below write themselves, a flag (a uint64 in the same memory) last: the flag's value
// says which call's values are there, and ampstats_poll waits for it. No event is recorded and
// no copy queued: one launch per call, and waiting for values that are there costs a read.

// Writes seq into the mapped flag once every thread of the block has written its part.
__device__ void raise_flag(unsigned long long *flag, unsigned long long seq) {
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) *(volatile unsigned long long *)flag = seq;
}

__global__ void mark_kernel(const __grid_constant__ gather_params p, double *dst,
                            unsigned long long *flag, unsigned long long seq) {
    if ((int)threadIdx.x < p.n) dst[threadIdx.x] = gathered(p, threadIdx.x);
    raise_flag(flag, seq);
}

// Marks where a step's loss and found_inf are computed, on the stream that computed them: the n
// scalars as doubles into dst, then seq into flag (device addresses of mapped memory).
// ampstats_poll(flag, seq) then says they are on the host; the stream does not wait.
EXPORT int ampstats_mark(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t dst,
                         uintptr_t flag, uint64_t seq, uintptr_t stream, int device) {
    DeviceGuard on(device);
    gather_params p;
    if (n < 0 || !gather_args(n, src, dtype, &p)) return (int)cudaErrorInvalidValue;
    mark_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(p, (double *)dst, (unsigned long long *)flag,
                                                    seq);
    return (int)cudaGetLastError();
}

__global__ void finish_kernel(const __grid_constant__ gather_params p, const double *head,
                              amp_stats *slots, int64_t n_slots, double *host_head,
                              amp_stats *host_slots, unsigned long long *flag,
                              unsigned long long seq) {
    const int i = threadIdx.x;
    if (i < HEAD) host_head[i] = i < p.n ? gathered(p, i) : head[i];
    for (int64_t k = i; k < n_slots; k += blockDim.x) {
        host_slots[k] = slots[k];
        slots[k] = cuda_stats_empty();
    }
    raise_flag(flag, seq);
}

// The end of a step's statistics, in stream order and waiting for nothing, in one launch: the
// HEAD doubles at buf (what ampstats_gather placed there) with the first n overwritten by the
// scalars src (gathered as ampstats_gather does) and the n_slots slots that follow them written
// into mapped memory at host (device address: HEAD doubles, then the slots), the slots emptied
// for the next step, then seq into flag.
EXPORT int ampstats_finish(int n, const uintptr_t *src, const int32_t *dtype, uintptr_t buf,
                           int64_t n_slots, uintptr_t host, uintptr_t flag, uint64_t seq,
                           uintptr_t stream, int device) {
    DeviceGuard on(device);
    gather_params p;
    if (n < 0 || !gather_args(n, src, dtype, &p)) return (int)cudaErrorInvalidValue;
    double *head = (double *)buf;
    finish_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(
        p, head, (amp_stats *)(head + HEAD), n_slots, (double *)host,
        (amp_stats *)((double *)host + HEAD), (unsigned long long *)flag, seq);
    return (int)cudaGetLastError();
}

// Waits until the mapped flag at flag (host address) holds seq: spins a little, then yields the
// core between looks and asks the stream for an error now and then (a kernel that failed never
// raises its flag). cudaErrorUnknown when the stream has drained and the flag is still not seq.
EXPORT int ampstats_poll(uintptr_t flag, uint64_t seq, uintptr_t stream, int device) {
    const unsigned long long *f = (const unsigned long long *)flag;
    for (long look = 0;; look++) {
        if (__atomic_load_n(f, __ATOMIC_ACQUIRE) == seq) return 0;
        if (look < 4096) continue;
        if (look % 64 == 0) {
            DeviceGuard on(device);
            cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
            if (e == cudaSuccess && __atomic_load_n(f, __ATOMIC_ACQUIRE) != seq)
                return (int)cudaErrorUnknown;
            if (e != cudaSuccess && e != cudaErrorNotReady) return (int)e;
        }
        sched_yield();
    }
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
    memset(p, 0, bytes);
    *dev = (uintptr_t)d;
    return (uintptr_t)p;
}

EXPORT int ampstats_host_free(uintptr_t host) {
    return (int)cudaFreeHost((void *)host);
}

// The name and text of a code the functions above returned.
EXPORT const char *ampstats_error(int code) {
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s (%s)", cudaGetErrorName((cudaError_t)code),
             cudaGetErrorString((cudaError_t)code));
    return buf;
}
