/*
 * cuda-gemm.cu — every GEMM through cuBLASLt: fp16/bf16 storage with f32 accumulation and f32
 * scaling, f32 as true fp32 (PyTorch's default allow_tf32 = False for matmul), the 1-D bias in
 * the BIAS epilogue (added in f32 before the single rounding to C's dtype, as the CPU does), and
 * a linear's weight gradient with its bias gradient (the column sums of dy) beside it, taken by
 * the activation backward that wrote dy where there is one.
 *
 * Row-major C (m, n) = op(A) op(B) is computed as column-major C^T (n, m) = op(B)^T op(A)^T, so
 * our B is cuBLASLt's first operand. A plan (descriptors and the heuristic's algorithm) is
 * built once per shape, dtype, transposes, strides, epilogue and pointer alignment and cached.
 */
#include "cuda-impl.h"

#include <string.h>

static cudaDataType_t lt_type(amp_dtype t) {
    switch (t) {
    case AMP_DTYPE_F32:
        return CUDA_R_32F;
    case AMP_DTYPE_F16:
        return CUDA_R_16F;
    case AMP_DTYPE_BF16:
        return CUDA_R_16BF;
    default:
        amp_abort(__FILE__, __LINE__, "gemm of dtype %s", amp_dtype_name(t));
    }
}

// Largest power of two up to 256 dividing the address.
static int64_t alignment_of(const void *p) {
    int64_t a = 256;
    while (a > 1 && ((uintptr_t)p % (uintptr_t)a) != 0)
        a /= 2;
    return a;
}

static void plan_destroy(cuda_gemm_plan *p) {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->op));
}

void cuda_gemm_release(cuda_ctx *c) {
    for (int i = 0; i < c->n_plans; i++)
        plan_destroy(&c->plans[i]);
    c->n_plans = 0;
}

static cublasLtMatrixLayout_t make_layout(cudaDataType_t t, uint64_t rows, uint64_t cols,
                                          int64_t ld, int64_t batch, int64_t stride) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return l;
}

// The plan for key, built on first use (a shape for which the heuristic has no algorithm aborts).
static cuda_gemm_plan *plan_get(cuda_ctx *c, const cuda_gemm_key *key, const int64_t align[4]) {
    for (int i = 0; i < c->n_plans; i++)
        if (memcmp(&c->plans[i].key, key, sizeof *key) == 0) return &c->plans[i];
    cuda_gemm_plan *p;
    if (c->n_plans == CUDA_GEMM_PLANS) { // full: replace the oldest
        plan_destroy(&c->plans[0]);
        memmove(&c->plans[0], &c->plans[1], (CUDA_GEMM_PLANS - 1) * sizeof c->plans[0]);
        p = &c->plans[CUDA_GEMM_PLANS - 1];
    } else {
        p = &c->plans[c->n_plans++];
    }
    memset(p, 0, sizeof *p);
    p->key = *key;
    const cudaDataType_t t = lt_type((amp_dtype)key->dtype);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's A is our B, its B our A.
    cublasOperation_t ta = key->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = key->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->epilogue != CUBLASLT_EPILOGUE_DEFAULT) { // BIAS: a vector of C's dtype
        cublasLtEpilogue_t ep = (cublasLtEpilogue_t)key->epilogue;
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t,
                                                    sizeof t));
    }
    const int64_t m = key->m, n = key->n, k = key->k;
    p->la = key->trans_b ? make_layout(t, k, n, k, key->batch, key->stride_b)
                         : make_layout(t, n, k, n, key->batch, key->stride_b);
    p->lb = key->trans_a ? make_layout(t, m, k, m, key->batch, key->stride_a)
                         : make_layout(t, k, m, k, key->batch, key->stride_a);
    p->lc = make_layout(t, n, m, n, key->batch, key->stride_c);

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                                                      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &c->gemm_ws_bytes, sizeof c->gemm_ws_bytes));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t a = (uint32_t)align[i];
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &a, sizeof a));
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1,
                                                &res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    AMP_ASSERT(found > 0, "(cuBLASLt has no algorithm for %s gemm m=%lld n=%lld k=%lld batch=%lld)",
               amp_dtype_name((amp_dtype)key->dtype), (long long)key->m, (long long)key->n,
               (long long)key->k, (long long)key->batch);
    p->algo = res.algo;
    p->workspace_bytes = res.workspaceSize;
    return p;
}

// k == 0: C = beta * C + bias (the product is empty), in f32, one rounding.
__global__ void gemm_empty_kernel(void *c, amp_dtype ct, const void *bias, float beta, int64_t n,
                                  int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        if (beta != 0.0f) v += beta * cuda_load(ct, c, i);
        if (bias) v += cuda_load(ct, bias, i % n);
        cuda_store(ct, c, i, v);
    }
}

// C = alpha * op(A) op(B) + beta * C through cuBLASLt with the given epilogue (DEFAULT, or BIAS
// with the bias vec).
static void gemm_lt(cuda_ctx *cx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                    const amp_tensor_t *b, cublasLtEpilogue_t epilogue, const void *vec) {
    void *cp = amp_tensor_ptr(c);
    const void *ap = amp_tensor_ptr(a), *bp = amp_tensor_ptr(b);
    cuda_gemm_key key;
    memset(&key, 0, sizeof key); // padding too: keys are compared with memcmp
    key.dtype = c->dtype;
    key.epilogue = epilogue;
    key.beta_nonzero = d->beta != 0.0f;
    key.trans_a = d->trans_a;
    key.trans_b = d->trans_b;
    key.batch = d->batch;
    key.m = d->m;
    key.n = d->n;
    key.k = d->k;
    key.stride_a = d->batch > 1 ? d->stride_a : 0;
    key.stride_b = d->batch > 1 ? d->stride_b : 0;
    key.stride_c = d->batch > 1 ? d->stride_c : 0;
    // cuBLASLt's A, B, C, D alignments are our B, A, C, C.
    const int64_t align[4] = {alignment_of(bp), alignment_of(ap), alignment_of(cp),
                              alignment_of(cp)};
    key.align = align[0] | align[1] << 9 | align[2] << 18;
    cuda_gemm_plan *p = plan_get(cx, &key, align);
    if (vec)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                                    sizeof vec));
    const float alpha = d->alpha, beta = d->beta;
    CUBLAS_CHECK(cublasLtMatmul(cx->lt, p->op, &alpha, bp, p->la, ap, p->lb, &beta, cp, p->lc, cp,
                                p->lc, &p->algo, cx->gemm_ws, p->workspace_bytes, cx->stream));
}

static void gemm_check(const amp_gemm_desc *d, const amp_tensor_t *c, const amp_tensor_t *a,
                       const amp_tensor_t *b) {
    CUDA_ASSERT_FLOAT(c);
    CUDA_ASSERT_CONTIGUOUS(c);
    CUDA_ASSERT_CONTIGUOUS(a);
    CUDA_ASSERT_CONTIGUOUS(b);
    AMP_ASSERT(a->dtype == c->dtype && b->dtype == c->dtype, "(gemm of %s x %s into %s)",
               amp_dtype_name(a->dtype), amp_dtype_name(b->dtype), amp_dtype_name(c->dtype));
    AMP_ASSERT(d->batch >= 0 && d->m >= 0 && d->n >= 0 && d->k >= 0);
    AMP_ASSERT(d->batch <= 1 || d->stride_c != 0, "(batched outputs must not overlap)");
    if (d->batch == 0 || d->m == 0 || d->n == 0) return;
    const int64_t last = d->batch - 1;
    AMP_ASSERT(cuda_numel(a) >= last * d->stride_a + d->m * d->k, "(A too small)");
    AMP_ASSERT(cuda_numel(b) >= last * d->stride_b + d->k * d->n, "(B too small)");
    AMP_ASSERT(cuda_numel(c) >= last * d->stride_c + d->m * d->n, "(C too small)");
}

void cuda_gemm(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
               const amp_tensor_t *b, const amp_tensor_t *bias) {
    cuda_ctx *cx = cuda_of(bctx);
    gemm_check(d, c, a, b);
    if (bias) {
        CUDA_ASSERT_CONTIGUOUS(bias);
        AMP_ASSERT(cuda_numel(bias) == d->n && bias->dtype == c->dtype,
                   "(bias must have n elements of C's dtype)");
    }
    if (d->batch == 0 || d->m == 0 || d->n == 0) return;
    const void *biasp = bias ? amp_tensor_ptr(bias) : NULL;
    if (d->k == 0) {
        void *cp = amp_tensor_ptr(c);
        const int64_t total = d->batch * d->m * d->n;
        AMP_ASSERT(d->batch == 1 || d->stride_c == d->m * d->n, "(k = 0 with gapped batches)");
        gemm_empty_kernel<<<cuda_grid(total, 256, 4), 256, 0, cx->stream>>>(cp, c->dtype, biasp,
                                                                            d->beta, d->n, total);
        CUDA_LAUNCH_CHECK();
        return;
    }
    gemm_lt(cx, d, c, a, b, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, biasp);
}

// C (m, n) = A^T B with A stored (k, m), and bgrad (m) = A's column sums: from the partial sums
// the backward that wrote A took as it went (cuda_ctx.colsum), else by one pass of the column-sum
// kernel over A. (Not the BGRADB epilogue: on the H200 with cuBLASLt 13.0 it ran bf16 as the
// GEMM and a kernel of its own, and chose fp16 kernels slower than the plain GEMM's, by up to 60%
// on gpt's shapes.)
void cuda_gemm_bgrad(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                     const amp_tensor_t *b, amp_tensor_t *bgrad) {
    cuda_ctx *cx = cuda_of(bctx);
    gemm_check(d, c, a, b);
    AMP_ASSERT(d->batch == 1 && d->trans_a && d->beta == 0.0f && d->alpha == 1.0f,
               "(gemm_bgrad is C = A^T B, unbatched)");
    CUDA_ASSERT_CONTIGUOUS(bgrad);
    AMP_ASSERT(cuda_numel(bgrad) == d->m && bgrad->dtype == c->dtype,
               "(bgrad must have m elements of C's dtype)");
    if (d->m == 0) return;
    if (cx->colsum.data && cx->colsum.data == (const char *)amp_tensor_ptr(a) &&
        cx->colsum.dtype == a->dtype && cx->colsum.rows == d->k && cx->colsum.cols == d->m) {
        cx->colsum.data = NULL; // summed by the backward that wrote A: the parts added up
        cuda_gemm(bctx, d, c, a, b, NULL);
        cuda_sum_partials(cx, bgrad, cx->colsum.partial, cx->colsum.parts, d->m);
        return;
    }
    cuda_gemm(bctx, d, c, a, b, NULL);
    amp_tensor_t rows = *a, sums = *bgrad; // A as (k, m) and bgrad as (1, m)
    rows.ndim = sums.ndim = 2;
    rows.shape[0] = d->k, rows.shape[1] = sums.shape[1] = d->m;
    sums.shape[0] = 1;
    rows.stride[0] = sums.stride[0] = d->m;
    rows.stride[1] = sums.stride[1] = 1;
    if (d->k == 0)
        cuda_fill(bctx, bgrad, 0.0f);
    else
        cuda_reduce_sum(bctx, &sums, &rows, 1.0f);
}
