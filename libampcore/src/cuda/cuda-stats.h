/*
 * cuda-stats.h — the fused statistics kernel's launch interface, in plain C types, shared by the
 * CUDA backend (its stats_into member) and the PyTorch bridge's module (libampstats_cuda.so, which
 * runs the same kernel on PyTorch's tensors and stream).
 *
 * A job is one tensor's contiguous memory and the amp_stats slot (device memory) its figures are
 * added into. A slot starts as amp_stats_empty() (cuda_stats_reset writes that) and comes back
 * unfinished: amp_stats_finish() derives amax and the NaN range on the host.
 */
#ifndef AMP_CUDA_STATS_H
#define AMP_CUDA_STATS_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "amp.h"

typedef struct cuda_stats_job {
    const void *data; // contiguous device memory of numel elements of dtype
    int64_t numel;
    amp_stats *slot; // device memory
    amp_dtype dtype;
} cuda_stats_job;

// Queues the statistics of n jobs (any n; a few launches of up to CUDA_STATS_JOBS_PER_LAUNCH
// tensors each) relative to target on stream. Returns the launch's error, cudaSuccess when queued.
cudaError_t cuda_stats_launch(const cuda_stats_job *jobs, int n, amp_dtype target,
                              cudaStream_t stream);

// Queues amp_stats_empty() into slots[0..n) on stream.
cudaError_t cuda_stats_reset(amp_stats *slots, int64_t n, cudaStream_t stream);

#ifdef __CUDACC__
// amp_stats_empty() in device code: what a slot holds before figures are added into it.
__device__ inline amp_stats cuda_stats_empty(void) {
    amp_stats e = {};
    e.min = INFINITY;
    e.max = -INFINITY;
    return e;
}
#endif

#endif // AMP_CUDA_STATS_H
