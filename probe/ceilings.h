/*
 * ceilings.h — the card's measured ceilings for roofline classification, as `ampprobe calibrate`
 * (cmd_calibrate.c) caches them: one file per GPU model,
 * $XDG_CACHE_HOME/ampprobe/ceilings-<name>.txt (default ~/.cache), "key value" lines:
 *
 *     gpu NVIDIA H200
 *     dram_bytes_per_s 4.3e+12          device-to-device copy, bytes read + written per second
 *     gemm_flops_bf16 7.9e+14           dense cuBLAS GEMM, fp32 accumulation (also _f16,
 *                                       _tf32, _f32)
 */
#ifndef AMPPROBE_CEILINGS_H
#define AMPPROBE_CEILINGS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct amp_ceilings {
    double dram_bytes_per_s; // NaN when the file does not have it
    double gemm_flops_bf16, gemm_flops_f16, gemm_flops_tf32, gemm_flops_f32;
} amp_ceilings;

// The cache file's path for a GPU name (characters other than letters and digits become '_').
// False when there is no cache directory ($XDG_CACHE_HOME and $HOME unset) or path is too short.
bool amp_ceilings_path(const char *gpu_name, char *path, size_t n);

// Reads the cached ceilings of gpu_name (TARGET_INFO_GPU.name). False when none were cached.
bool amp_ceilings_load(const char *gpu_name, amp_ceilings *out);

#endif
