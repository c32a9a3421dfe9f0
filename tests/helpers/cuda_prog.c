/*
 * cuda_prog.c — a plain CUDA C program (runtime API + cuBLAS, no nvcc) for checking CUDA capture
 * on the GPU machine (tests/helpers/capture_gpu.sh): copies host->device, a memset, then STEPS
 * steps of two SGEMMs inside NVTX ranges "step" > "layer<i>/gemm" and a device-to-device copy,
 * then a copy back whose values it checks (C = A·B with A = 1, B = 2: every element 2·N).
 * Prints "ok" and exits 0, or names the failing call and exits 1.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1024
#define STEPS 10

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "cuda_prog: %s failed: %d\n", #call, rc_);                             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void) {
    size_t bytes = (size_t)N * N * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return 1;
    float *a, *b, *c, *d;
    cublasHandle_t blas;
    nvtxRangePushA("setup");
    CHECK(cudaMalloc((void **)&a, bytes));
    CHECK(cudaMalloc((void **)&b, bytes));
    CHECK(cudaMalloc((void **)&c, bytes));
    CHECK(cudaMalloc((void **)&d, bytes));
    for (size_t i = 0; i < (size_t)N * N; i++)
        h[i] = 1.0f;
    CHECK(cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < (size_t)N * N; i++)
        h[i] = 2.0f;
    CHECK(cudaMemcpy(b, h, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(c, 0, bytes));
    CHECK(cublasCreate(&blas));
    nvtxRangePop();

    const float one = 1.0f, zero = 0.0f;
    for (int step = 0; step < STEPS; step++) {
        nvtxRangePushA("step");
        nvtxRangePushA("layer0/gemm");
        CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, c, N));
        nvtxRangePop();
        nvtxRangePushA("layer1/gemm");
        CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, d, N));
        nvtxRangePop();
        CHECK(cudaMemcpyAsync(d, c, bytes, cudaMemcpyDeviceToDevice, 0));
        nvtxRangePop();
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < (size_t)N * N; i++) {
        if (h[i] != 2.0f * N) {
            fprintf(stderr, "cuda_prog: element %zu is %g, expected %g\n", i, h[i], 2.0 * N);
            return 1;
        }
    }
    CHECK(cublasDestroy(blas));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    CHECK(cudaFree(d));
    free(h);
    printf("ok\n");
    return 0;
}
