/*
 * calibrate-gpu.c — ampprobe-calibrate, the measuring half of `ampprobe calibrate`
 * (probe/cmd_calibrate.c): the card's ceilings for roofline classification, measured with the
 * CUDA runtime and cuBLAS on device 0.
 *
 *   ampprobe-calibrate --name   prints the device name and exits (cheap: no measurement)
 *   ampprobe-calibrate          prints "key value" lines:
 *       gpu NAME, sm_count N, memory_bytes N, sm_clock_hz N
 *       dram_bytes_per_s X      device-to-device copy, bytes read + written per second
 *       gemm_flops_bf16 X, gemm_flops_f16 X, gemm_flops_tf32 X, gemm_flops_f32 X
 *                               dense cublasGemmEx, M = N = K = GEMM_N, fp32 accumulation,
 *                               random inputs (zeros run faster), 2·M·N·K per product
 * Each figure is the best of REPS timed repetitions after WARMUP untimed ones (CUDA events).
 * Exit 1 with one line on stderr when there is no usable device.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_N 8192
#define COPY_BYTES ((size_t)2 << 30) // per buffer
#define WARMUP 3
#define REPS 10

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "ampprobe-calibrate: %s failed: %d\n", #call, rc_);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// fp32 to bf16 / fp16 bits, round to nearest even (finite inputs in [-1, 1)).
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + (u >> 16 & 1)) >> 16);
}
static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = u >> 16 & 0x8000;
    int exp = (int)(u >> 23 & 0xFF) - 127 + 15;
    uint32_t mant = u & 0x7FFFFF;
    if (exp <= 0) return (uint16_t)sign; // tiny: flush to zero (timing data only)
    uint32_t h = sign | (uint32_t)exp << 10 | mant >> 13;
    uint32_t rest = mant & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

typedef struct timer {
    cudaEvent_t a, b;
} timer;

static float best_ms(timer *t, void (*fn)(void *), void *arg) {
    for (int i = 0; i < WARMUP; i++)
        fn(arg);
    float best = 1e30f;
    for (int i = 0; i < REPS; i++) {
        CHECK(cudaEventRecord(t->a, 0));
        fn(arg);
        CHECK(cudaEventRecord(t->b, 0));
        CHECK(cudaEventSynchronize(t->b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, t->a, t->b));
        if (ms < best) best = ms;
    }
    return best;
}

typedef struct copy_job {
    void *dst, *src;
} copy_job;

static void run_copy(void *arg) {
    copy_job *j = arg;
    CHECK(cudaMemcpyAsync(j->dst, j->src, COPY_BYTES, cudaMemcpyDeviceToDevice, 0));
}

typedef struct gemm_job {
    cublasHandle_t h;
    void *a, *b, *c;
    cudaDataType_t in, out;
    cublasComputeType_t compute;
} gemm_job;

static void run_gemm(void *arg) {
    gemm_job *j = arg;
    const float one = 1.0f, zero = 0.0f;
    CHECK(cublasGemmEx(j->h, CUBLAS_OP_N, CUBLAS_OP_N, GEMM_N, GEMM_N, GEMM_N, &one, j->a, j->in,
                       GEMM_N, j->b, j->in, GEMM_N, &zero, j->c, j->out, GEMM_N, j->compute,
                       CUBLAS_GEMM_DEFAULT));
}

// dram_bytes_per_s: a device-to-device copy of COPY_BYTES, read and written.
static void measure_copy(timer *t) {
    copy_job cj;
    CHECK(cudaMalloc(&cj.src, COPY_BYTES));
    CHECK(cudaMalloc(&cj.dst, COPY_BYTES));
    CHECK(cudaMemset(cj.src, 1, COPY_BYTES));
    const float ms = best_ms(t, run_copy, &cj);
    printf("dram_bytes_per_s %.4g\n", 2.0 * COPY_BYTES / (ms * 1e-3));
    fflush(stdout);
    CHECK(cudaFree(cj.src));
    CHECK(cudaFree(cj.dst));
}

// gemm_flops_*: a GEMM_N cube in each input type, on the same random values.
static int measure_gemms(timer *t) {
    size_t n = (size_t)GEMM_N * GEMM_N;
    float *hf = malloc(n * sizeof(float));
    uint16_t *hh = malloc(n * sizeof(uint16_t));
    if (!hf || !hh) {
        fprintf(stderr, "ampprobe-calibrate: out of host memory\n");
        free(hf);
        free(hh);
        return 1;
    }
    srand(1);
    for (size_t i = 0; i < n; i++)
        hf[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    gemm_job g;
    CHECK(cublasCreate(&g.h));
    CHECK(cudaMalloc(&g.a, n * sizeof(float)));
    CHECK(cudaMalloc(&g.b, n * sizeof(float)));
    CHECK(cudaMalloc(&g.c, n * sizeof(float)));
    static const struct {
        const char *key;
        cudaDataType_t in;
        cublasComputeType_t compute;
    } cases[] = {
        {"gemm_flops_bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F},
        {"gemm_flops_f16", CUDA_R_16F, CUBLAS_COMPUTE_32F},
        {"gemm_flops_tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
        {"gemm_flops_f32", CUDA_R_32F, CUBLAS_COMPUTE_32F},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const void *src = hf;
        size_t elem = sizeof(float);
        if (cases[c].in != CUDA_R_32F) {
            for (size_t i = 0; i < n; i++)
                hh[i] = cases[c].in == CUDA_R_16BF ? to_bf16(hf[i]) : to_f16(hf[i]);
            src = hh;
            elem = sizeof(uint16_t);
        }
        CHECK(cudaMemcpy(g.a, src, n * elem, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(g.b, src, n * elem, cudaMemcpyHostToDevice));
        g.in = cases[c].in;
        g.out = cases[c].in;
        g.compute = cases[c].compute;
        const float ms = best_ms(t, run_gemm, &g);
        printf("%s %.4g\n", cases[c].key, 2.0 * GEMM_N * GEMM_N * (double)GEMM_N / (ms * 1e-3));
        fflush(stdout);
    }
    CHECK(cublasDestroy(g.h));
    CHECK(cudaFree(g.a));
    CHECK(cudaFree(g.b));
    CHECK(cudaFree(g.c));
    free(hf);
    free(hh);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--name") != 0)) {
        const bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
        fprintf(help ? stdout : stderr,
                "usage: ampprobe-calibrate [--name]\n\n"
                "The measuring half of 'ampprobe calibrate' (run that: it caches the figures):\n"
                "prints the GPU's facts and its measured GEMM FLOP/s and DRAM bandwidth as\n"
                "'key value' lines; --name prints only the GPU's name.\n");
        return help ? 0 : 2;
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fprintf(stderr,
                "ampprobe calibrate: no GPU to measure (%s); without measured ceilings the "
                "report uses the card's published figures\n",
                e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than the "
                                                   "CUDA runtime"
                : e != cudaSuccess               ? cudaGetErrorString(e)
                                                 : "the driver lists none");
        return 1;
    }
    struct cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    if (argc > 1 && strcmp(argv[1], "--name") == 0) {
        printf("%s\n", p.name);
        return 0;
    }
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("gpu %s\nsm_count %d\nmemory_bytes %zu\nsm_clock_hz %lld\n", p.name,
           p.multiProcessorCount, p.totalGlobalMem, (long long)clock_khz * 1000);
    fflush(stdout);

    timer t;
    CHECK(cudaEventCreate(&t.a));
    CHECK(cudaEventCreate(&t.b));
    measure_copy(&t);
    return measure_gemms(&t);
}
