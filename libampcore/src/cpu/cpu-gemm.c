/*
 * cpu-gemm.c — the CPU backend's batched GEMM: C = alpha * op(A) op(B) + beta * C + bias.
 *
 * A cache-blocked, packed GEMM in the BLIS style. Panels of B (KC x NC) and blocks of A (MC x KC)
 * are converted to f32 while they are packed into MR- and NR-wide slivers, and a register-blocked
 * MR x NR micro-kernel (plain C that gcc vectorises) runs over them. Partial sums stay in f32
 * accumulators that the micro-kernel reloads from one KC block to the next, so every element of
 * C is the sum over k in order, exactly what a naive loop computes, whatever the blocking. The
 * epilogue then applies alpha, beta * C and the bias in f32 and rounds once.
 *
 * On x86-64 the micro-kernel is also compiled for AVX2 and picked at run time. AVX2 only widens
 * the vectors (no FMA), so both variants round identically; that holds as long as the library is
 * not built with FMA contraction (-mfma / -march=native without -ffp-contract=off).
 */
#include "cpu-impl.h"

#include <string.h>

#define GEMM_MR 4    // micro-tile rows (A sliver width)
#define GEMM_NR 16   // micro-tile columns (B sliver width)
#define GEMM_KC 256  // depth of a packed block: a B sliver (KC x NR, 16 KiB) stays in L1
#define GEMM_MC 128  // rows of a packed A block (MC x KC, 128 KiB, in L2)
#define GEMM_NC 1024 // columns of a packed B panel (KC x NC, 1 MiB)
#define GEMM_MB 512  // rows whose f32 accumulators are kept at once (MB x NC)

#define GEMM_TILE (GEMM_MR * GEMM_NR)

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static inline int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

// ---------------------------------------------------------------------------------------------
// Micro-kernel: c (one MR x NR tile of f32 accumulators) += a sliver (kc x MR) times a b sliver
// (kc x NR). Fully unrolled over the tile so the accumulators live in vector registers.

typedef void (*gemm_kernel_fn)(int64_t kc, const float *restrict a, const float *restrict b,
                               float *restrict c);

static inline __attribute__((always_inline)) void
gemm_kernel_body(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c) {
    float acc[GEMM_TILE];
    memcpy(acc, c, sizeof acc);
    for (int64_t p = 0; p < kc; p++) {
        const float *ap = a + p * GEMM_MR, *bp = b + p * GEMM_NR;
        _Pragma("GCC unroll 4") for (int i = 0; i < GEMM_MR; i++) {
            _Pragma("GCC unroll 16") for (int j = 0; j < GEMM_NR; j++) {
                acc[i * GEMM_NR + j] += ap[i] * bp[j];
            }
        }
    }
    memcpy(c, acc, sizeof acc);
}

static void gemm_kernel_generic(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict c) {
    gemm_kernel_body(kc, a, b, c);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void
gemm_kernel_avx2(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c) {
    gemm_kernel_body(kc, a, b, c);
}
#endif

static gemm_kernel_fn gemm_kernel_pick(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) return gemm_kernel_avx2;
#endif
    return gemm_kernel_generic;
}

// ---------------------------------------------------------------------------------------------
// Packing (with the conversion to f32). A and B are packed alike: op(A) as (m, k) in MR-row
// slivers, op(B) read as its transpose (n, k) in NR-column slivers. Slivers past the matrix edge
// are zero-padded so the micro-kernel always runs on full tiles.

#define GEMM_LINE (GEMM_NC > GEMM_KC ? GEMM_NC : GEMM_KC) // longest contiguous run packed

// Rows [i0, i0 + rows) and depth [p0, p0 + kc) of a matrix X, whose element (i, p) is
// x[i * si + p * sp], into slivers of w rows: out[s][p][r]. Runs contiguous in memory (along
// the depth when sp == 1, else along the rows) are widened a line at a time.
static void gemm_pack(amp_dtype t, const char *x, int64_t si, int64_t sp, int64_t i0, int64_t rows,
                      int64_t p0, int64_t kc, int w, float *out) {
    const int64_t es = (int64_t)amp_dtype_size(t);
    float line[GEMM_LINE];
    if (sp == 1) { // row by row
        for (int64_t s = 0; s < rows; s += w) {
            float *o = out + s * kc;
            for (int64_t r = 0; r < w; r++) {
                if (s + r < rows) {
                    amp_cpu_load_f32(t, x + ((i0 + s + r) * si + p0) * es, 1, kc, line);
                    for (int64_t p = 0; p < kc; p++)
                        o[p * w + r] = line[p];
                } else {
                    for (int64_t p = 0; p < kc; p++)
                        o[p * w + r] = 0.0f;
                }
            }
        }
        return;
    }
    AMP_ASSERT(si == 1);
    for (int64_t p = 0; p < kc; p++) { // depth step by depth step
        amp_cpu_load_f32(t, x + (i0 + (p0 + p) * sp) * es, 1, rows, line);
        for (int64_t s = 0; s < rows; s += w) {
            float *o = out + s * kc + p * w;
            for (int64_t r = 0; r < w; r++)
                o[r] = s + r < rows ? line[s + r] : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Epilogue: the mb x nc block of accumulators (tile-major) into C at (i0, j0).

static void gemm_epilogue(const amp_gemm_desc *d, amp_tensor_t *c, char *cp, const void *biasp,
                          amp_dtype bias_t, const float *acc, int64_t i0, int64_t mb, int64_t j0,
                          int64_t nc) {
    const int64_t tiles_n = round_up(nc, GEMM_NR) / GEMM_NR;
    float row[GEMM_NR];
    for (int64_t i = 0; i < mb; i++) {
        for (int64_t jt = 0; jt < tiles_n; jt++) {
            const float *tile = acc + ((i / GEMM_MR) * tiles_n + jt) * GEMM_TILE;
            const int64_t j = jt * GEMM_NR, cols = min64(GEMM_NR, nc - j);
            const int64_t at = (i0 + i) * d->n + j0 + j; // element index in C
            for (int64_t q = 0; q < cols; q++) {
                float v = d->alpha * tile[(i % GEMM_MR) * GEMM_NR + q];
                if (d->beta != 0.0f) v += d->beta * amp_load_f32(c->dtype, cp, at + q);
                if (biasp) v += amp_load_f32(bias_t, biasp, j0 + j + q);
                row[q] = v;
            }
            amp_cpu_store_f32(c->dtype, cp + at * (int64_t)amp_dtype_size(c->dtype), cols, row);
        }
    }
}

// ---------------------------------------------------------------------------------------------

void amp_cpu_gemm(void *bctx, const amp_gemm_desc *d, amp_tensor_t *c, const amp_tensor_t *a,
                  const amp_tensor_t *b, const amp_tensor_t *bias) {
    CPU_ASSERT_FLOAT(c);
    CPU_ASSERT_FLOAT(a);
    CPU_ASSERT_FLOAT(b);
    CPU_ASSERT_CONTIGUOUS(c);
    CPU_ASSERT_CONTIGUOUS(a);
    CPU_ASSERT_CONTIGUOUS(b);
    AMP_ASSERT(d->batch >= 0 && d->m >= 0 && d->n >= 0 && d->k >= 0);
    AMP_ASSERT(d->batch <= 1 || d->stride_c != 0, "(batched outputs must not overlap)");
    if (d->batch == 0 || d->m == 0 || d->n == 0) return;
    const int64_t last = d->batch - 1;
    AMP_ASSERT(cpu_numel(a) >= last * d->stride_a + d->m * d->k, "(A too small)");
    AMP_ASSERT(cpu_numel(b) >= last * d->stride_b + d->k * d->n, "(B too small)");
    AMP_ASSERT(cpu_numel(c) >= last * d->stride_c + d->m * d->n, "(C too small)");
    if (bias) {
        CPU_ASSERT_CONTIGUOUS(bias);
        AMP_ASSERT(cpu_numel(bias) == d->n, "(bias must have n elements)");
    }

    // Workspace sized to this product: accumulators, a B panel, an A block.
    const int64_t mb_max = round_up(min64(d->m, GEMM_MB), GEMM_MR);
    const int64_t nc_max = round_up(min64(d->n, GEMM_NC), GEMM_NR);
    const int64_t kc_max = d->k > 0 ? min64(d->k, GEMM_KC) : 1;
    const int64_t mc_max = round_up(min64(d->m, GEMM_MC), GEMM_MR);
    float *acc = amp_cpu_workspace(bctx, (size_t)(mb_max * nc_max + kc_max * (nc_max + mc_max)));
    float *bpack = acc + mb_max * nc_max;
    float *apack = bpack + kc_max * nc_max;
    const gemm_kernel_fn kernel = gemm_kernel_pick();

    const int64_t a_esize = (int64_t)amp_dtype_size(a->dtype),
                  b_esize = (int64_t)amp_dtype_size(b->dtype),
                  c_esize = (int64_t)amp_dtype_size(c->dtype);
    const void *biasp = bias ? amp_tensor_ptr(bias) : NULL;
    const amp_dtype bias_t = bias ? bias->dtype : AMP_DTYPE_F32;
    for (int64_t bt = 0; bt < d->batch; bt++) {
        const char *ap = (const char *)amp_tensor_ptr(a) + bt * d->stride_a * a_esize;
        const char *bp = (const char *)amp_tensor_ptr(b) + bt * d->stride_b * b_esize;
        char *cp = (char *)amp_tensor_ptr(c) + bt * d->stride_c * c_esize;
        for (int64_t ib = 0; ib < d->m; ib += GEMM_MB) {
            const int64_t mb = min64(GEMM_MB, d->m - ib);
            for (int64_t jc = 0; jc < d->n; jc += GEMM_NC) {
                const int64_t nc = min64(GEMM_NC, d->n - jc);
                const int64_t tiles_n = round_up(nc, GEMM_NR) / GEMM_NR;
                memset(acc, 0, (size_t)(round_up(mb, GEMM_MR) * tiles_n * GEMM_NR) * sizeof(float));
                for (int64_t pc = 0; pc < d->k; pc += GEMM_KC) {
                    const int64_t kc = min64(GEMM_KC, d->k - pc);
                    gemm_pack(b->dtype, bp, d->trans_b ? d->k : 1, d->trans_b ? 1 : d->n, jc, nc,
                              pc, kc, GEMM_NR, bpack);
                    for (int64_t ic = 0; ic < mb; ic += GEMM_MC) {
                        const int64_t mc = min64(GEMM_MC, mb - ic);
                        gemm_pack(a->dtype, ap, d->trans_a ? 1 : d->k, d->trans_a ? d->m : 1,
                                  ib + ic, mc, pc, kc, GEMM_MR, apack);
                        for (int64_t jr = 0; jr < tiles_n; jr++) {
                            const float *bsliver = bpack + jr * GEMM_NR * kc;
                            for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
                                float *tile =
                                    acc + (((ic + ir) / GEMM_MR) * tiles_n + jr) * GEMM_TILE;
                                kernel(kc, apack + ir * kc, bsliver, tile);
                            }
                        }
                    }
                }
                gemm_epilogue(d, c, cp, biasp, bias_t, acc, ib, mb, jc, nc);
            }
        }
    }
}
