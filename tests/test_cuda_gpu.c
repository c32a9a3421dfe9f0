/*
 * test_cuda_gpu.c — the `cuda_gpu` suite (ctest label "gpu"): every op of the CUDA backend,
 * forward and backward, against the CPU reference on fresh random data.
 *
 * Each case builds the same inputs (random, never zeros) in a CPU context and a CUDA context,
 * runs the op through the public API, takes loss = sum(op(x) * r) for a fixed random r, runs
 * backward, and compares the output and every input gradient element by element with a
 * dtype-aware tolerance: |gpu - cpu| <= eps(dtype) * (scale + |cpu|), where scale is the RMS of
 * the CPU values (reduction orders differ between the backends). Also: the optimizers, the
 * GradScaler's fused unscale and skip decision, the statistics reduction and the statistics that
 * the producing kernels add (against it), the dropout mask (bit for bit) and a short autocast +
 * GradScaler training run.
 *
 * Without a GPU or without the CUDA module every case returns early with a message, so the suite
 * passes on CI machines; CUDA is only ever initialised inside a case (Check forks first).
 */
#include "amp-impl.h"
#include "tests.h"

#ifdef AMP_HAVE_CUPTI_CAPTURE
#include "capture.h" // AMP_CAPTURE_KERNEL_RANGES_SQL
#endif

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F32 AMP_DTYPE_F32
#define F16 AMP_DTYPE_F16
#define BF16 AMP_DTYPE_BF16

static amp_ctx_t *cpu, *gpu;
static uint64_t rng_state;

// Opens both contexts; false (after saying why) when there is no CUDA device.
static bool open_pair(void) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 11, &cpu), AMP_OK);
    if (amp_ctx_new(AMP_DEVICE_CUDA, 11, &gpu) != AMP_OK) {
        fprintf(stderr, "cuda_gpu: skipped: %s\n", amp_last_error());
        amp_ctx_free(cpu);
        cpu = NULL;
        return false;
    }
    rng_state = 0x1234567ull;
    return true;
}

static void close_pair(void) {
    amp_ctx_free(gpu);
    amp_ctx_free(cpu);
    gpu = cpu = NULL;
}

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!open_pair()) return;                                                                  \
    } while (0)

static double urand(void) { // [0, 1)
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

// Gaussian values of the given std, pushed away from zero (|v| >= std / 64).
static void fill_random(float *v, int64_t n, float std, float mean) {
    for (int64_t i = 0; i < n; i++) {
        double u1 = urand() + 1e-12, u2 = urand();
        double g = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        if (fabs(g) < 1.0 / 64) g = g < 0 ? -1.0 / 64 : 1.0 / 64;
        v[i] = (float)(g * std) + mean;
    }
}

typedef struct pair {
    amp_tensor_t *c, *g;
} pair;

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

// The same random tensor on both devices.
static pair pair_new(amp_dtype dt, int ndim, const int64_t *shape, float std, float mean,
                     bool grad) {
    int64_t n = numel_of(ndim, shape);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    fill_random(v, n, std, mean);
    pair p = {amp_tensor_from_f32(cpu, dt, ndim, shape, v),
              amp_tensor_from_f32(gpu, dt, ndim, shape, v)};
    free(v);
    amp_tensor_set_requires_grad(p.c, grad);
    amp_tensor_set_requires_grad(p.g, grad);
    return p;
}

// Class indices in [0, classes) on both devices.
static pair pair_index(amp_dtype dt, int ndim, const int64_t *shape, int64_t classes) {
    int64_t n = numel_of(ndim, shape);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)(int64_t)(urand() * (double)classes);
    pair p = {amp_tensor_from_f32(cpu, dt, ndim, shape, v),
              amp_tensor_from_f32(gpu, dt, ndim, shape, v)};
    free(v);
    return p;
}

// Class indices as pair_index gives them, but every `every`-th row (from row 0) is -100, PyTorch's
// ignore_index (every = 1: all rows are).
static pair pair_index_padded(int64_t n, int64_t classes, int64_t every) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = i % every == 0 ? -100.0f : (float)(int64_t)(urand() * (double)classes);
    pair p = {amp_tensor_from_f32(cpu, AMP_DTYPE_I64, 1, &n, v),
              amp_tensor_from_f32(gpu, AMP_DTYPE_I64, 1, &n, v)};
    free(v);
    return p;
}

static double eps_of(amp_dtype dt) {
    return dt == F16 ? 1e-2 : dt == BF16 ? 2e-2 : 1e-4;
}

// Compares the two tensors' values: |g - c| <= eps * (rms(c) + |c|), NaN matching NaN.
static void expect_close(const char *what, const amp_tensor_t *c, const amp_tensor_t *g,
                         double eps) {
    ck_assert_msg(c && g, "%s: missing on %s", what, c ? "cuda" : "cpu");
    int64_t n = amp_tensor_numel(c);
    ck_assert_int_eq(amp_tensor_numel(g), n);
    float *a = malloc((size_t)(n ? n : 1) * 4), *b = malloc((size_t)(n ? n : 1) * 4);
    amp_tensor_read_f32(c, a);
    amp_tensor_read_f32(g, b);
    double rms = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(a[i])) rms += (double)a[i] * a[i];
    rms = n ? sqrt(rms / (double)n) : 0;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        bool ok = isnan(a[i])   ? isnan(b[i])
                  : isinf(a[i]) ? a[i] == b[i]
                                : fabs((double)b[i] - a[i]) <= eps * (rms + fabs(a[i]));
        if (!ok && bad++ == 0) first = i;
    }
    if (bad)
        ck_abort_msg(
            "%s: %lld of %lld differ; first at %lld: cuda %.8g, cpu %.8g (rms %.3g, eps %g)", what,
            (long long)bad, (long long)n, (long long)first, b[first], a[first], rms, eps);
    free(a);
    free(b);
}

typedef amp_tensor_t *(*op_fn)(amp_ctx_t *ctx, amp_tensor_t **x, int n);

// Runs f on both devices, compares the output, then backward of sum(f(x) * r) and every grad.
static void check_op(const char *name, op_fn f, pair *in, int n, double eps) {
    amp_tensor_t *xc[8], *xg[8];
    for (int i = 0; i < n; i++) {
        xc[i] = in[i].c;
        xg[i] = in[i].g;
    }
    amp_tensor_t *yc = f(cpu, xc, n), *yg = f(gpu, xg, n);
    char what[96];
    snprintf(what, sizeof what, "%s forward", name);
    expect_close(what, yc, yg, eps);
    bool any_grad = false;
    for (int i = 0; i < n; i++)
        any_grad |= amp_tensor_requires_grad(in[i].c);
    if (any_grad) {
        int nd = amp_tensor_ndim(yc);
        int64_t shape[AMP_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            shape[d] = amp_tensor_dim(yc, d);
        pair r = pair_new(F32, nd, shape, 1.0f, 0.0f, false);
        amp_backward(cpu, amp_sum(cpu, amp_mul(cpu, amp_to(cpu, yc, F32), r.c)));
        amp_backward(gpu, amp_sum(gpu, amp_mul(gpu, amp_to(gpu, yg, F32), r.g)));
        for (int i = 0; i < n; i++) {
            if (!amp_tensor_requires_grad(in[i].c)) continue;
            snprintf(what, sizeof what, "%s grad of input %d", name, i);
            expect_close(what, amp_tensor_grad(in[i].c), amp_tensor_grad(in[i].g), eps);
        }
    }
    amp_ctx_reset(cpu);
    amp_ctx_reset(gpu);
}

static const amp_dtype float_dtypes[3] = {F32, F16, BF16};

// ---------------------------------------------------------------------------------------------
// Ops

static amp_tensor_t *op_linear(amp_ctx_t *c, amp_tensor_t **x, int n) {
    return amp_linear(c, x[0], x[1], n > 2 ? x[2] : NULL);
}
static amp_tensor_t *op_matmul(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_matmul(c, x[0], x[1]);
}
static amp_tensor_t *op_addmm(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_addmm(c, x[2], x[0], x[1]);
}

START_TEST(test_gemm_gpu) {
    NEED_GPU();
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        double eps = eps_of(dt) * (dt == F32 ? 10 : 1);
        pair lin[3] = {pair_new(dt, 3, (int64_t[]){4, 33, 96}, 1, 0, true),
                       pair_new(dt, 2, (int64_t[]){72, 96}, 0.1f, 0, true),
                       pair_new(dt, 1, (int64_t[]){72}, 0.5f, 0, true)};
        check_op("linear+bias", op_linear, lin, 3, eps);
        check_op("linear", op_linear, lin, 2, eps);
        // the bias gradient beside the weight-gradient GEMM (many rows, odd sizes), and on its own
        // when the weight takes no gradient
        pair big[3] = {pair_new(dt, 2, (int64_t[]){2050, 64}, 1, 0, true),
                       pair_new(dt, 2, (int64_t[]){40, 64}, 0.1f, 0, true),
                       pair_new(dt, 1, (int64_t[]){40}, 0.5f, 0, true)};
        check_op("linear+bias, 2050 rows", op_linear, big, 3, eps);
        pair odd[3] = {pair_new(dt, 2, (int64_t[]){9, 5}, 1, 0, true),
                       pair_new(dt, 2, (int64_t[]){7, 5}, 0.1f, 0, true),
                       pair_new(dt, 1, (int64_t[]){7}, 0.5f, 0, true)};
        check_op("linear+bias, odd sizes", op_linear, odd, 3, eps);
        pair frozen[3] = {lin[0], pair_new(dt, 2, (int64_t[]){72, 96}, 0.1f, 0, false), lin[2]};
        check_op("linear+bias, frozen weight", op_linear, frozen, 3, eps);
        // no input features: an empty weight-gradient GEMM beside the bias gradient
        pair none[3] = {pair_new(dt, 2, (int64_t[]){6, 0}, 1, 0, true),
                        pair_new(dt, 2, (int64_t[]){5, 0}, 0.1f, 0, true),
                        pair_new(dt, 1, (int64_t[]){5}, 0.5f, 0, true)};
        check_op("linear+bias, no input features", op_linear, none, 3, eps);
        pair mm[2] = {pair_new(dt, 3, (int64_t[]){3, 17, 40}, 1, 0, true),
                      pair_new(dt, 3, (int64_t[]){3, 40, 24}, 1, 0, true)};
        check_op("batched matmul", op_matmul, mm, 2, eps);
        // torch.matmul's broadcast batch dims and 1-D operands (expand copies on the device)
        pair bc[2] = {pair_new(dt, 4, (int64_t[]){2, 1, 17, 40}, 1, 0, true),
                      pair_new(dt, 3, (int64_t[]){3, 40, 24}, 1, 0, true)};
        check_op("broadcast matmul", op_matmul, bc, 2, eps);
        pair vec[2] = {pair_new(dt, 1, (int64_t[]){40}, 1, 0, true), mm[1]};
        check_op("vector @ batched matmul", op_matmul, vec, 2, eps);
        pair am[3] = {pair_new(dt, 2, (int64_t[]){16, 8}, 1, 0, true),
                      pair_new(dt, 2, (int64_t[]){8, 12}, 1, 0, true),
                      pair_new(dt, 2, (int64_t[]){16, 12}, 1, 0, true)};
        check_op("addmm (full bias)", op_addmm, am, 3, eps);
    }
    close_pair();
}
END_TEST

// A linear's bias gradient summed by the activation's backward that writes the linear's output
// gradient (cuda_ctx.colsum), where the features are a whole number of 16-byte vectors (every
// dtype for 72 and 40; f32 alone for 100: the others take it in the GEMM), and not when a second
// gradient joins the first (the residual), which the sums would miss.
static amp_tensor_t *op_linear_gelu(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_gelu(c, amp_linear(c, x[0], x[1], x[2]), false);
}
static amp_tensor_t *op_linear_relu(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_relu(c, amp_linear(c, x[0], x[1], x[2]));
}
static amp_tensor_t *op_linear_gelu_residual(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    amp_tensor_t *h = amp_linear(c, x[0], x[1], x[2]);
    return amp_add(c, amp_gelu(c, h, false), h);
}

START_TEST(test_bias_grad_colsums_gpu) {
    NEED_GPU();
    const int64_t sizes[3][3] = {{132, 96, 72}, {2050, 64, 40}, {30, 16, 100}}; // rows, in, out
    for (int t = 0; t < 3; t++) {
        const amp_dtype dt = float_dtypes[t];
        const double eps = eps_of(dt) * (dt == F32 ? 10 : 1);
        for (int k = 0; k < 3; k++) {
            pair in[3] = {pair_new(dt, 2, (int64_t[]){sizes[k][0], sizes[k][1]}, 1, 0, true),
                          pair_new(dt, 2, (int64_t[]){sizes[k][2], sizes[k][1]}, 0.1f, 0, true),
                          pair_new(dt, 1, (int64_t[]){sizes[k][2]}, 0.5f, 0, true)};
            const struct {
                const char *name;
                op_fn f;
            } ops[3] = {{"linear+gelu", op_linear_gelu},
                        {"linear+relu", op_linear_relu},
                        {"linear+gelu+residual", op_linear_gelu_residual}};
            for (int o = 0; o < 3; o++) {
                char what[64];
                snprintf(what, sizeof what, "%s %lldx%lld", ops[o].name, (long long)sizes[k][0],
                         (long long)sizes[k][2]);
                check_op(what, ops[o].f, in, 3, eps);
                for (int i = 0; i < 3; i++) {
                    amp_tensor_zero_grad(in[i].c);
                    amp_tensor_zero_grad(in[i].g);
                }
            }
            for (int i = 0; i < 3; i++) {
                amp_tensor_free(in[i].c);
                amp_tensor_free(in[i].g);
            }
        }
    }
    close_pair();
}
END_TEST

static amp_tensor_t *op_gelu(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_gelu(c, x[0], false);
}
static amp_tensor_t *op_gelu_tanh(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_gelu(c, x[0], true);
}
static amp_tensor_t *op_relu(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_relu(c, x[0]);
}
static amp_tensor_t *op_tanh(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_tanh(c, x[0]);
}
static amp_tensor_t *op_sigmoid(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_sigmoid(c, x[0]);
}
static amp_tensor_t *op_exp(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_exp(c, x[0]);
}
static amp_tensor_t *op_pow(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_pow(c, x[0], 3.0f);
}
static amp_tensor_t *op_clamp(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_clamp_min(c, x[0], 0.25f);
}
static amp_tensor_t *op_scalar(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_add_scalar(c, amp_mul_scalar(c, x[0], 1.5), -0.75);
}
static amp_tensor_t *op_log(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_log(c, x[0]);
}
static amp_tensor_t *op_log1p(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_log1p(c, x[0]);
}

START_TEST(test_unary_gpu) {
    NEED_GPU();
    static const struct {
        const char *name;
        op_fn f;
    } ops[] = {{"gelu", op_gelu}, {"gelu_tanh", op_gelu_tanh}, {"relu", op_relu},
               {"tanh", op_tanh}, {"sigmoid", op_sigmoid},     {"exp", op_exp},
               {"pow", op_pow},   {"clamp_min", op_clamp},     {"scalar", op_scalar}};
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            pair x = pair_new(dt, 2, (int64_t[]){37, 129}, 1.0f, 0.0f, true);
            check_op(ops[k].name, ops[k].f, &x, 1, eps_of(dt));
        }
        pair pos = pair_new(dt, 1, (int64_t[]){1000}, 0.2f, 2.0f, true); // log of positive values
        check_op("log", op_log, &pos, 1, eps_of(dt));
        pair small = pair_new(dt, 1, (int64_t[]){1000}, 0.1f, 0.0f, true); // log1p near 0
        check_op("log1p", op_log1p, &small, 1, eps_of(dt));
    }
    close_pair();
}
END_TEST

static amp_tensor_t *op_add(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_add(c, x[0], x[1]);
}
static amp_tensor_t *op_sub(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_sub(c, x[0], x[1]);
}
static amp_tensor_t *op_mul(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_mul(c, x[0], x[1]);
}
static amp_tensor_t *op_div(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_div(c, x[0], x[1]);
}
static amp_tensor_t *op_sum(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_sum(c, x[0]);
}
static amp_tensor_t *op_mean(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_mean(c, x[0]);
}
static amp_tensor_t *op_transpose(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_contiguous(c, amp_transpose(c, x[0], 0, 2));
}
static amp_tensor_t *op_heads(amp_ctx_t *c, amp_tensor_t **x,
                              int n) { // (B, T, H, D) -> (B, H, T, D)
    (void)n;
    return amp_contiguous(c, amp_transpose(c, x[0], 1, 2));
}
static amp_tensor_t *op_key_t(amp_ctx_t *c, amp_tensor_t **x, int n) { // k^T of attention
    (void)n;
    return amp_contiguous(c, amp_transpose(c, amp_transpose(c, x[0], 1, 2), -2, -1));
}
// The three pieces of a split (the last dim, as attention's qkv; or dim 0), recombined so that
// each piece gets its own gradient: backward adds each into its slice of the input's gradient.
static amp_tensor_t *split_combined(amp_ctx_t *c, amp_tensor_t *x, int64_t size, int dim) {
    amp_tensor_t *p[3];
    ck_assert_int_eq(amp_split(c, x, size, dim, p, 3), 3);
    return amp_add(c, amp_mul(c, p[0], p[1]), amp_mul_scalar(c, p[2], 3.0));
}
static amp_tensor_t *op_split_last(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return split_combined(c, x[0], amp_tensor_dim(x[0], 2) / 3, -1);
}
static amp_tensor_t *op_split_first(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return split_combined(c, x[0], amp_tensor_dim(x[0], 0) / 3, 0);
}

static amp_tensor_t *op_to_half(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_to(c, x[0], F16);
}
static amp_tensor_t *op_to_bf16(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_to(c, x[0], BF16);
}

START_TEST(test_binary_reduce_copy_gpu) {
    NEED_GPU();
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        double eps = eps_of(dt);
        pair same[2] = {pair_new(dt, 2, (int64_t[]){64, 130}, 1, 0, true),
                        pair_new(dt, 2, (int64_t[]){64, 130}, 1, 0, true)};
        check_op("add", op_add, same, 2, eps);
        check_op("mul", op_mul, same, 2, eps);
        if (dt != F32) { // promoted to f32 (the residual stream's add), in either order
            pair mixed[2] = {pair_new(F32, 2, (int64_t[]){64, 130}, 1, 0, true),
                             pair_new(dt, 2, (int64_t[]){64, 130}, 1, 0, true)};
            check_op("add (f32 + 16-bit)", op_add, mixed, 2, eps_of(F32));
            pair swapped[2] = {mixed[1], mixed[0]};
            check_op("sub (16-bit - f32)", op_sub, swapped, 2, eps_of(F32));
        }
        // broadcasts: a row vector, a column, a leading batch
        pair row[2] = {pair_new(dt, 3, (int64_t[]){4, 16, 70}, 1, 0, true),
                       pair_new(dt, 1, (int64_t[]){70}, 1, 0, true)};
        check_op("add (row broadcast)", op_add, row, 2, eps);
        pair none[2] = {pair_new(dt, 2, (int64_t[]){0, 70}, 1, 0, true), row[1]};
        check_op("add (row broadcast over an empty batch: the row's gradient 0)", op_add, none, 2,
                 eps);
        check_op("sub (row broadcast)", op_sub, row, 2, eps);
        pair col[2] = {pair_new(dt, 3, (int64_t[]){4, 16, 70}, 1, 0, true),
                       pair_new(dt, 3, (int64_t[]){1, 16, 1}, 0.3f, 2.0f, true)};
        check_op("div (column broadcast)", op_div, col, 2, eps);
        check_op("mul (column broadcast)", op_mul, col, 2, eps);
        // a value per channel over runs of whole 16-byte vectors (a convolution's bias), and one
        // value for everything; their gradients sum (A, K, L) over A and L, and everything
        pair chan[2] = {pair_new(dt, 3, (int64_t[]){4, 16, 64}, 1, 0, true),
                        pair_new(dt, 3, (int64_t[]){1, 16, 1}, 0.3f, 2.0f, true)};
        check_op("mul (channel broadcast, vector runs)", op_mul, chan, 2, eps);
        check_op("add (channel broadcast, vector runs)", op_add, chan, 2, eps);
        pair one[2] = {pair_new(dt, 2, (int64_t[]){16, 64}, 1, 0, true),
                       pair_new(dt, 2, (int64_t[]){1, 1}, 1, 0, true)};
        check_op("add (one value broadcast)", op_add, one, 2, eps);
        pair big = pair_new(dt, 3, (int64_t[]){8, 33, 300}, 1, 0, true);
        check_op("sum", op_sum, &big, 1, eps);
        check_op("mean", op_mean, &big, 1, eps);
        check_op("transpose+contiguous", op_transpose, &big, 1, eps);
        pair heads = pair_new(dt, 4, (int64_t[]){2, 9, 4, 16}, 1, 0, true);
        check_op("heads transpose (16-byte runs)", op_heads, &heads, 1, eps);
        pair keys = pair_new(dt, 4, (int64_t[]){2, 45, 3, 40}, 1, 0, true);
        check_op("key transpose (tiled)", op_key_t, &keys, 1, eps);
        // 16-bit: in pairs, over whole 64 x 64 tiles and the part tiles at the edges
        pair wide = pair_new(dt, 3, (int64_t[]){3, 130, 192}, 1, 0, true);
        check_op("transpose of the last two dims (whole and part tiles)", op_heads, &wide, 1, eps);
        pair qkv = pair_new(dt, 3, (int64_t[]){4, 33, 3 * 40}, 1, 0, true);
        check_op("split of the last dim (qkv)", op_split_last, &qkv, 1, eps);
        pair rows = pair_new(dt, 3, (int64_t[]){3 * 5, 7, 9}, 1, 0, true);
        check_op("split of dim 0", op_split_first, &rows, 1, eps);
        check_op("to f16", op_to_half, &big, 1, eps_of(F16));
        check_op("to bf16", op_to_bf16, &big, 1, eps_of(BF16));
    }
    close_pair();
}
END_TEST

static amp_tensor_t *op_softmax(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_softmax(c, x[0], -1);
}
static amp_tensor_t *op_log_softmax(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_log_softmax(c, x[0], -1);
}
static amp_tensor_t *op_layer_norm(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_layer_norm(c, x[0], x[1], x[2], 1e-5f);
}
// The f32 output cast to f16 and scaled by an f16 tensor: the backward hands the op an f16
// gradient for its f32 output (amp_node.narrow_dy).
static amp_tensor_t *op_softmax_cast(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_mul(c, amp_to(c, amp_softmax(c, x[0], -1), F16), x[1]);
}
static amp_tensor_t *op_layer_norm_cast(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_mul(c, amp_to(c, amp_layer_norm(c, x[0], x[1], x[2], 1e-5f), F16), x[3]);
}
static amp_tensor_t *op_cross_entropy(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_cross_entropy(c, x[0], x[1]);
}
static amp_tensor_t *op_masked_softmax(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_softmax(c, amp_masked_fill(c, x[0], x[1], -INFINITY), -1);
}

START_TEST(test_softmax_norm_loss_gpu) {
    NEED_GPU();
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        double eps = eps_of(dt);
        // a warp per row up to 1024 (4, 16 or 32 elements a lane), then a block per row (8
        // values a thread of 256 or 512, 16 of 512, then rows too long to hold)
        int64_t lens[8] = {7, 200, 512, 1000, 1500, 3000, 5000, 9000};
        for (int k = 0; k < 8; k++) {
            pair x = pair_new(dt, 2, (int64_t[]){19, lens[k]}, 2.0f, 0.0f, true);
            check_op("softmax", op_softmax, &x, 1, eps);
            check_op("log_softmax", op_log_softmax, &x, 1, eps);
        }
        // rows in registers (up to 4 values a thread, ragged or whole lanes), and the generic
        // kernels for a row too long (and for mixed dtypes, test_fused_stats_gpu)
        const int64_t ln_lens[3] = {200, 768, 3000};
        for (int k = 0; k < 3; k++) {
            pair ln[3] = {pair_new(dt, 3, (int64_t[]){3, 21, ln_lens[k]}, 1.5f, 0.5f, true),
                          pair_new(dt, 1, &ln_lens[k], 0.2f, 1.0f, true),
                          pair_new(dt, 1, &ln_lens[k], 0.2f, 0.0f, true)};
            check_op("layer_norm", op_layer_norm, ln, 3, dt == F32 ? eps * 10 : eps * 2);
        }
        // f32 softmax and layer_norm outputs whose gradient comes back in f16 (rows in
        // registers and rows too long for that)
        for (int k = 0; dt == F32 && k < 2; k++) {
            const int64_t len = k ? 3000 : 768;
            pair x = pair_new(F32, 2, (int64_t[]){19, len}, 2.0f, 0.0f, true),
                 s16 = pair_new(F16, 2, (int64_t[]){19, len}, 1.0f, 0.0f, false);
            check_op("softmax, f16 gradient", op_softmax_cast, (pair[]){x, s16}, 2, eps_of(F16));
            pair ln[4] = {pair_new(F32, 2, (int64_t[]){19, len}, 1.5f, 0.5f, true),
                          pair_new(F32, 1, &len, 0.2f, 1.0f, true),
                          pair_new(F32, 1, &len, 0.2f, 0.0f, true), s16};
            check_op("layer_norm, f16 gradient", op_layer_norm_cast, ln, 4, eps_of(F16) * 2);
        }
        pair ce[2] = {pair_new(F32, 2, (int64_t[]){50, 1000}, 3.0f, 0, true),
                      pair_index(AMP_DTYPE_I64, 1, (int64_t[]){50}, 1000)};
        check_op("cross_entropy", op_cross_entropy, ce, 2, eps_of(F32) * 10);
        // targets of -100 (padding) skipped, on fresh logits (a leaf's gradient accumulates): a
        // third of the rows; more rows than the one block's threads; every row (a NaN loss and
        // gradients of exact zeros on both)
        pair pad[2] = {pair_new(F32, 2, (int64_t[]){50, 1000}, 3.0f, 0, true),
                       pair_index_padded(50, 1000, 3)};
        check_op("cross_entropy, ignore_index", op_cross_entropy, pad, 2, eps_of(F32) * 10);
        pair many[2] = {pair_new(F32, 2, (int64_t[]){3000, 7}, 3.0f, 0, true),
                        pair_index_padded(3000, 7, 5)};
        check_op("cross_entropy, ignore_index, 3000 rows", op_cross_entropy, many, 2,
                 eps_of(F32) * 10);
        pair none[2] = {pair_new(F32, 2, (int64_t[]){50, 1000}, 3.0f, 0, true),
                        pair_index_padded(50, 1000, 1)};
        check_op("cross_entropy, every target ignored", op_cross_entropy, none, 2, eps_of(F32));
        // causal masks (-inf above the diagonal) through masked_fill and softmax: T = 32 takes
        // the 8-wide path, T = 33 the element path
        for (int64_t T = 32; T <= 33; T++) {
            float *m = malloc((size_t)(T * T) * 4);
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++)
                    m[i * T + j] = j > i;
            pair mask = {amp_tensor_from_f32(cpu, AMP_DTYPE_I32, 2, (int64_t[]){T, T}, m),
                         amp_tensor_from_f32(gpu, AMP_DTYPE_I32, 2, (int64_t[]){T, T}, m)};
            free(m);
            pair att[2] = {pair_new(dt, 3, (int64_t[]){2, T, T}, 1, 0, true), mask};
            check_op("masked softmax", op_masked_softmax, att, 2, eps);
        }
    }
    close_pair();
}
END_TEST

START_TEST(test_layer_norm_half_gpu) {
    NEED_GPU();
    // layer_norm under autocast runs in f32 (fp32 policy); the f16/bf16 storage path of the
    // kernel is still reachable with f16 weights.
    for (int t = 1; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        pair ln[3] = {pair_new(dt, 2, (int64_t[]){40, 256}, 1.0f, 0.5f, true),
                      pair_new(dt, 1, (int64_t[]){256}, 0.2f, 1.0f, true),
                      pair_new(dt, 1, (int64_t[]){256}, 0.2f, 0.0f, true)};
        check_op("layer_norm", op_layer_norm, ln, 3, eps_of(dt) * 2);
    }
    close_pair();
}
END_TEST

static amp_tensor_t *op_embedding(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_embedding(c, x[1], x[0]);
}
static amp_tensor_t *op_conv_pool(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_max_pool2d(c, amp_relu(c, amp_conv2d(c, x[0], x[1], x[2], 1, 1)), 2, 2);
}
static amp_tensor_t *op_pool_overlap(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_max_pool2d(c, x[0], 3, 2); // windows share a row and a column: summed in f32
}
static amp_tensor_t *op_pool_edge(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_max_pool2d(c, x[0], 2, 2); // on 13 x 11: the last row and column in no window
}
static amp_tensor_t *op_pool_ragged(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_max_pool2d(c, x[0], 2, 3); // gaps between windows and a ragged edge
}
static amp_tensor_t *op_conv_stride(amp_ctx_t *c, amp_tensor_t **x, int n) {
    (void)n;
    return amp_conv2d(c, x[0], x[1], x[2], 2, 0);
}

START_TEST(test_embedding_conv_gpu) {
    NEED_GPU();
    for (int t = 0; t < 3; t++) {
        amp_dtype dt = float_dtypes[t];
        double eps = eps_of(dt) * (dt == F32 ? 10 : 1);
        pair emb[2] = {pair_new(dt, 2, (int64_t[]){50, 48}, 1, 0, true),
                       pair_index(AMP_DTYPE_I64, 2, (int64_t[]){4, 30}, 50)};
        check_op("embedding", op_embedding, emb, 2, eps);
        pair conv[3] = {pair_new(dt, 4, (int64_t[]){2, 3, 12, 12}, 1, 0, true),
                        pair_new(dt, 4, (int64_t[]){8, 3, 3, 3}, 0.3f, 0, true),
                        pair_new(dt, 1, (int64_t[]){8}, 0.1f, 0, true)};
        check_op("conv2d+relu+max_pool2d", op_conv_pool, conv, 3, eps);
        check_op("conv2d stride 2", op_conv_stride, conv, 3, eps);
        pair empty[3] = {pair_new(dt, 4, (int64_t[]){0, 3, 12, 12}, 1, 0, true), conv[1], conv[2]};
        check_op("conv2d of an empty batch", op_conv_stride, empty, 3, eps);
        pair planes = pair_new(dt, 4, (int64_t[]){2, 3, 13, 11}, 1, 0, true);
        check_op("max_pool2d kernel 3 stride 2", op_pool_overlap, &planes, 1, eps);
        check_op("max_pool2d kernel 2 stride 3", op_pool_ragged, &planes, 1, eps);
        check_op("max_pool2d kernel 2 stride 2, ragged edge", op_pool_edge, &planes, 1, eps);
        // the columns a slice of the batch at a time (one image's here), on both backends
        const int64_t cols_max = amp_conv_cols_max;
        amp_conv_cols_max = 1;
        check_op("conv2d+relu+max_pool2d, columns by image", op_conv_pool, conv, 3, eps);
        check_op("conv2d stride 2, columns by image", op_conv_stride, conv, 3, eps);
        amp_conv_cols_max = cols_max;
    }
    close_pair();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Dropout (bit-exact masks), statistics, optimizers, the GradScaler

START_TEST(test_dropout_gpu) {
    NEED_GPU();
    pair x = pair_new(F32, 2, (int64_t[]){31, 257}, 1, 0, false);
    amp_tensor_t *yc = amp_dropout(cpu, x.c, 0.3f, true), *yg = amp_dropout(gpu, x.g, 0.3f, true);
    int64_t n = amp_tensor_numel(yc);
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    amp_tensor_read_f32(yc, a);
    amp_tensor_read_f32(yg, b);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "dropout element %lld: cuda %g, cpu %g", (long long)i, b[i],
                      a[i]);
    free(a);
    free(b);
    close_pair();
}
END_TEST

// A random tensor on the GPU with NaN, +-inf, values beyond f16's range and below its normals.
static amp_tensor_t *gpu_special(amp_dtype dt, int ndim, const int64_t *shape, float std) {
    int64_t n = numel_of(ndim, shape);
    float *v = malloc((size_t)n * sizeof *v);
    fill_random(v, n, std, 0.0f);
    const float planted[] = {NAN, INFINITY, -INFINITY, 7e4f, -1e5f, 1e-6f, -3e-8f, 0.0f, 6e4f};
    for (int k = 0; k < (int)(sizeof planted / sizeof *planted); k++)
        v[(int64_t)(urand() * (double)n)] = planted[k];
    amp_tensor_t *t = amp_tensor_from_f32(gpu, dt, ndim, shape, v);
    free(v);
    return t;
}

#define SAME_FLOAT(a, b) ((isnan(a) && isnan(b)) || (a) == (b))

// got's numbers (finished) are want's, sums of squares aside.
static void expect_same_stats(const char *what, const amp_stats *got, const amp_stats *want) {
    ck_assert_msg(got->numel == want->numel && got->n_nan == want->n_nan &&
                      got->n_posinf == want->n_posinf && got->n_neginf == want->n_neginf &&
                      got->n_overflow == want->n_overflow &&
                      got->n_underflow == want->n_underflow && got->n_zero == want->n_zero,
                  "%s: numel %lld nan %lld +inf %lld -inf %lld over %lld under %lld zero %lld; "
                  "expected %lld %lld %lld %lld %lld %lld %lld",
                  what, (long long)got->numel, (long long)got->n_nan, (long long)got->n_posinf,
                  (long long)got->n_neginf, (long long)got->n_overflow, (long long)got->n_underflow,
                  (long long)got->n_zero, (long long)want->numel, (long long)want->n_nan,
                  (long long)want->n_posinf, (long long)want->n_neginf, (long long)want->n_overflow,
                  (long long)want->n_underflow, (long long)want->n_zero);
    ck_assert_msg(SAME_FLOAT(got->min, want->min) && SAME_FLOAT(got->max, want->max) &&
                      SAME_FLOAT(got->amax, want->amax),
                  "%s: min %g max %g amax %g; expected %g %g %g", what, (double)got->min,
                  (double)got->max, (double)got->amax, (double)want->min, (double)want->max,
                  (double)want->amax);
}

START_TEST(test_stats_gpu) {
    NEED_GPU();
    int64_t n = 100003;
    float *v = malloc((size_t)n * 4);
    fill_random(v, n, 1.0f, 0.0f);
    v[5] = NAN, v[77] = INFINITY, v[78] = -INFINITY, v[1000] = 1e6f, v[1001] = -7e4f;
    v[2000] = 1e-9f, v[2001] = 0.0f, v[2002] = -0.0f, v[3000] = 3e-5f;
    amp_tensor_t *tc = amp_tensor_from_f32(cpu, F32, 1, &n, v),
                 *tg = amp_tensor_from_f32(gpu, F32, 1, &n, v);
    free(v);
    for (int k = 0; k < 3; k++) {
        amp_dtype target = float_dtypes[k];
        amp_stats a, b;
        amp_tensor_stats(tc, target, &a);
        amp_tensor_stats(tg, target, &b);
        ck_assert_int_eq(b.numel, a.numel);
        ck_assert_float_eq(b.min, a.min);
        ck_assert_float_eq(b.max, a.max);
        ck_assert_float_eq(b.amax, a.amax);
        ck_assert_int_eq(b.n_nan, a.n_nan);
        ck_assert_int_eq(b.n_posinf, a.n_posinf);
        ck_assert_int_eq(b.n_neginf, a.n_neginf);
        ck_assert_int_eq(b.n_overflow, a.n_overflow);
        ck_assert_int_eq(b.n_underflow, a.n_underflow);
        ck_assert_int_eq(b.n_zero, a.n_zero);
        ck_assert_double_eq_tol(b.sumsq, a.sumsq, 1e-5 * a.sumsq);
        if (target == F16) { // the planted values cross both f16 limits
            ck_assert_int_gt(a.n_underflow, 0);
            ck_assert_int_gt(a.n_overflow, 0);
        }
    }
    // 16-bit tensors (read two values an instruction when of the target's own type) against the
    // CPU: what sits at the edges of both 16-bit types planted among random values, then runs of
    // zeros and subnormals long enough to fill the pairs' 16-bit counts many times over
    // (0x1p-14f: f16's smallest normal; 0x1p-126f: bf16's), then whole 16-byte vectors of +inf
    // and of -inf (a mask's fill), of both mixed, and of one with a NaN or a finite value
    const float edges[] = {NAN,        INFINITY, -INFINITY, 65504.0f, -65504.0f,
                           7e4f,       0x1p-14f, 6e-5f,     -3e-6f,   1e-39f,
                           -0x1p-126f, 0.0f,     -0.0f,     3.0e38f,  -1e-45f};
    static const char *kinds[3] = {"with the edges", "zeros and subnormals", "infinite vectors"};
    for (int kind = 0; kind < 3; kind++) {
        int64_t m = kind == 0 ? 4099 : (1 << 20) + 5; // a tail after the 16-byte vectors
        float *w = malloc((size_t)m * sizeof *w);
        fill_random(w, m, 2.0f, 0.0f);
        if (kind == 0)
            for (int r = 0; r < 4; r++)
                for (int k = 0; k < (int)(sizeof edges / sizeof *edges); k++)
                    w[(int64_t)(urand() * (double)m)] = edges[k];
        else if (kind == 1)
            for (int64_t i = 0; i < m; i++)
                w[i] = i % 3 == 0 ? (i % 2 ? -0.0f : 0.0f) : i % 3 == 1 ? 2e-6f * w[i] : w[i];
        else
            for (int64_t i = 0; i < m; i++) { // by vector of 8: +inf, -inf, mixed, a NaN, a value
                const int64_t vec = i / 8 % 7;
                w[i] = vec == 0 || vec == 4   ? INFINITY
                       : vec == 1 || vec == 5 ? -INFINITY
                       : vec == 2             ? (i % 2 ? INFINITY : -INFINITY)
                       : vec == 3             ? (i % 8 == 5 ? NAN : INFINITY)
                                              : (i % 8 == 2 ? w[i] : -INFINITY);
            }
        for (int d = 1; d < 3; d++) {
            amp_dtype dt = float_dtypes[d];
            amp_tensor_t *hc = amp_tensor_from_f32(cpu, dt, 1, &m, w),
                         *hg = amp_tensor_from_f32(gpu, dt, 1, &m, w);
            for (int k = 0; k < 3; k++) {
                amp_stats a, b;
                amp_tensor_stats(hc, float_dtypes[k], &a);
                amp_tensor_stats(hg, float_dtypes[k], &b);
                char what[96];
                snprintf(what, sizeof what, "%s %s (%lld values) under %s", amp_dtype_name(dt),
                         kinds[kind], (long long)m, amp_dtype_name(float_dtypes[k]));
                expect_same_stats(what, &b, &a);
                // (a thread's squares add up in f32 on the device: past FLT_MAX, inf)
                ck_assert_msg(a.sumsq > FLT_MAX ? isinf(b.sumsq)
                                                : fabs(b.sumsq - a.sumsq) <= 1e-5 * a.sumsq,
                              "%s: sumsq %.9g, expected %.9g", what, b.sumsq, a.sumsq);
                if (kind == 1 && float_dtypes[k] == dt) // the counts the pairs carry
                    ck_assert_msg(a.n_zero >= m / 3 && (dt == BF16 || a.n_underflow > m / 4),
                                  "%s: zeros %lld underflows %lld", what, (long long)a.n_zero,
                                  (long long)a.n_underflow);
            }
        }
        free(w);
    }

    // many tensors in one call (the parameters of a step, their gradients): each slot as alone
    enum { N = 70 }; // more than one launch holds
    const amp_tensor_t *many[N];
    int64_t slot[N];
    for (int k = 0; k < N; k++) {
        int64_t len = 1 + k * 997;
        many[k] = gpu_special(float_dtypes[k % 3], 1, &len, 1.0f + (float)k);
        slot[k] = N - 1 - k;
    }
    amp_stats *slots = gpu->be->alloc(gpu->bctx, N * sizeof(amp_stats)), host[N];
    for (int k = 0; k < N; k++)
        host[k] = amp_stats_empty();
    gpu->be->upload(gpu->bctx, slots, host, sizeof host);
    amp_tensors_stats_into(many, N, F16, slots, slot, true);
    gpu->be->download(gpu->bctx, host, slots, sizeof host);
    for (int k = 0; k < N; k++) {
        amp_stats one;
        amp_stats_finish(&host[slot[k]]);
        amp_tensor_stats(many[k], F16, &one);
        char what[64];
        snprintf(what, sizeof what, "tensor %d of %d read together", k, N);
        expect_same_stats(what, &host[slot[k]], &one);
    }
    gpu->be->free(gpu->bctx, slots);
    close_pair();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Statistics added by the kernel that writes a tensor (the instrumentation's sink, cuda-fuse.h)
// against a separate reading of the tensor by the statistics kernel.

static amp_stats *fused_slot;

// Arms the sink for y as the instrumentation does right before a backend call.
static void arm(const amp_tensor_t *y, amp_dtype target) {
    amp_stats empty = amp_stats_empty();
    gpu->be->upload(gpu->bctx, fused_slot, &empty, sizeof empty);
    gpu->sink = (amp_stats_sink){.out = y, .slot = fused_slot, .target = target};
}

// The kernel that wrote y took the sink, and its numbers are those of a separate reading (but
// for the sum of squares, which fused statistics leave out).
static void expect_fused(const char *what, const amp_tensor_t *y, amp_dtype target) {
    ck_assert_msg(gpu->sink.taken, "%s: the kernel did not take the sink", what);
    gpu->sink = (amp_stats_sink){0};
    amp_stats f, r;
    gpu->be->download(gpu->bctx, &f, fused_slot, sizeof f);
    amp_stats_finish(&f);
    amp_tensor_stats(y, target, &r);
    expect_same_stats(what, &f, &r);
    ck_assert_msg(f.sumsq == 0.0,
                  "%s: a fused sum of squares (%g): only parameter gradients need "
                  "one, and the statistics kernel reads those",
                  what, f.sumsq);
}

START_TEST(test_fused_stats_gpu) {
    NEED_GPU();
    fused_slot = gpu->be->alloc(gpu->bctx, sizeof(amp_stats));
    const int64_t n = (1 << 21) + 3; // many waves of blocks, and a tail
    amp_tensor_t *x16 = gpu_special(F16, 1, &n, 3.0f), *x32 = gpu_special(F32, 1, &n, 8.0f),
                 *xbf = gpu_special(BF16, 1, &n, 3.0f);
    for (int k = 0; k < 3; k++) {
        const amp_dtype target = float_dtypes[k];
        amp_tensor_t *y = amp_scratch_new(gpu, F16, 1, &n);
        arm(y, target);
        gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, y, x16);
        expect_fused("gelu f16 (vectorised)", y, target);

        arm(y, target);
        gpu->be->unary(gpu->bctx, AMP_UNARY_EXP, 0, y, x32);
        expect_fused("exp f32 -> f16 (mixed dtypes)", y, target);

        arm(y, target);
        gpu->be->binary(gpu->bctx, AMP_BINARY_ADD, y, x16, x16);
        expect_fused("add f16 (vectorised, the gradient accumulation)", y, target);

        amp_tensor_t *y32 = amp_scratch_new(gpu, F32, 1, &n);
        arm(y32, target);
        gpu->be->binary(gpu->bctx, AMP_BINARY_MUL, y32, x16, x32);
        expect_fused("mul f16 * f32 -> f32 (strided)", y32, target);

        arm(y, target);
        gpu->be->copy(gpu->bctx, y, x32);
        expect_fused("copy f32 -> f16 (cast)", y, target);

        amp_tensor_t *ybf = amp_scratch_new(gpu, BF16, 1, &n);
        arm(ybf, target);
        gpu->be->copy(gpu->bctx, ybf, x32);
        expect_fused("copy f32 -> bf16 (cast)", ybf, target);
        arm(ybf, target);
        gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, ybf, xbf);
        expect_fused("gelu bf16 (vectorised)", ybf, target);

        arm(y32, target);
        gpu->be->copy(gpu->bctx, y32, x32);
        expect_fused("copy f32 -> f32 (a gradient's first write)", y32, target);
    }

    // a widening cast whose output's numbers are wanted and which takes the numbers held for its
    // source (a gradient cast back to f32): both slots get the same numbers
    for (int k = 0; k < 3; k++) {
        const amp_dtype dt = float_dtypes[k];
        if (dt == F32) continue;
        amp_tensor_t *src = gpu_special(dt, 1, &n, 3.0f), *d32 = amp_scratch_new(gpu, F32, 1, &n);
        amp_stats *held = gpu->be->alloc(gpu->bctx, sizeof(amp_stats)), h, want;
        const amp_stats empty = amp_stats_empty();
        gpu->be->upload(gpu->bctx, held, &empty, sizeof empty);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *[]){src}, 1, dt, held, (int64_t[]){0},
                            false);
        arm(d32, dt);
        gpu->be->copy(gpu->bctx, d32, src);
        char what[64];
        snprintf(what, sizeof what, "copy %s -> f32 taking its source's numbers",
                 amp_dtype_name(dt));
        expect_fused(what, d32, dt);
        gpu->be->download(gpu->bctx, &h, held, sizeof h);
        amp_stats_finish(&h);
        amp_tensor_stats(src, dt, &want);
        expect_same_stats(what, &h, &want);
        gpu->be->free(gpu->bctx, held);
    }

    // a gradient permuted back: the strided copies (16-byte runs, single elements, tiles)
    const struct {
        const char *what;
        int64_t shape[3];
        int perm[3];
    } copies[] = {{"copy of a permuted view (16-byte runs)", {12, 40, 72}, {1, 0, 2}},
                  {"copy of a permuted view (single elements)", {12, 40, 37}, {1, 0, 2}},
                  {"copy of a transposed view (tiles)", {12, 40, 72}, {0, 2, 1}},
                  {"copy of a transposed view (whole tiles)", {3, 130, 192}, {0, 2, 1}},
                  {"copy of a transposed view (odd tiles)", {3, 130, 75}, {0, 2, 1}}};
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < (int)(sizeof copies / sizeof *copies); c++) {
            amp_tensor_t *src = gpu_special(float_dtypes[k], 3, copies[c].shape, 3.0f);
            amp_tensor_t *v = amp_permute(gpu, src, copies[c].perm);
            amp_tensor_t *d = amp_scratch_new(gpu, float_dtypes[k], 3, v->shape);
            arm(d, F16);
            gpu->be->copy(gpu->bctx, d, v);
            char what[96];
            snprintf(what, sizeof what, "%s, %s", copies[c].what, amp_dtype_name(float_dtypes[k]));
            expect_fused(what, d, F16);
        }

    // masked_fill with a causal -inf mask: broadcast rows (vectorised: whole vectors of the fill
    // among them), an odd width (typed), an i64 mask (generic); +inf, and bf16 under bf16
    const int64_t widths[5] = {64, 37, 40, 64, 64};
    for (int k = 0; k < 5; k++) {
        const int64_t T = widths[k], shape[3] = {24, T, T};
        amp_dtype mt = k == 2 ? AMP_DTYPE_I64 : AMP_DTYPE_I32;
        const amp_dtype dt = k == 4 ? BF16 : F16;
        const float fill = k == 3 ? INFINITY : -INFINITY;
        float *m = malloc((size_t)(T * T) * sizeof *m);
        for (int64_t i = 0; i < T * T; i++)
            m[i] = i % T > i / T;
        amp_tensor_t *mask = amp_tensor_from_f32(gpu, mt, 2, (int64_t[]){T, T}, m);
        free(m);
        amp_tensor_t *x = gpu_special(dt, 3, shape, 4.0f), *y = amp_scratch_new(gpu, dt, 3, shape);
        arm(y, dt);
        gpu->be->masked_fill(gpu->bctx, y, x, amp_expand(gpu, mask, 3, shape), fill);
        char what[64];
        snprintf(what, sizeof what, "masked_fill %s width %lld mask %s fill %g", amp_dtype_name(dt),
                 (long long)T, amp_dtype_name(mt), fill);
        expect_fused(what, y, dt);
    }

    // softmax f16 -> f32 (rows in registers), log_softmax of long f32 rows (in registers, and
    // too long for that), layer_norm with w, b
    const int64_t s1[2] = {4096, 512}, s2[2] = {300, 8192}, s3[2] = {2048, 768}, c3 = 768;
    const int64_t s4[2] = {40, 9000};
    amp_tensor_t *b4 = gpu_special(F32, 2, s4, 4.0f), *yb4 = amp_scratch_new(gpu, F32, 2, s4);
    arm(yb4, F16);
    gpu->be->softmax(gpu->bctx, true, yb4, b4);
    expect_fused("log_softmax f32, 9000 wide", yb4, F16);
    amp_tensor_t *a = gpu_special(F16, 2, s1, 4.0f), *ya = amp_scratch_new(gpu, F32, 2, s1);
    arm(ya, F16);
    gpu->be->softmax(gpu->bctx, false, ya, a);
    expect_fused("softmax f16 -> f32", ya, F16);
    amp_tensor_t *b = gpu_special(F32, 2, s2, 4.0f), *yb = amp_scratch_new(gpu, F32, 2, s2);
    arm(yb, BF16);
    gpu->be->softmax(gpu->bctx, true, yb, b);
    expect_fused("log_softmax f32, 8192 wide", yb, BF16);
    pair w = pair_new(F32, 1, &c3, 1.0f, 1.0f, false), bias = pair_new(F32, 1, &c3, 1.0f, 0, false);
    amp_tensor_t *x = gpu_special(F32, 2, s3, 2.0f), *yl = amp_scratch_new(gpu, F16, 2, s3);
    amp_tensor_t *mean = amp_scratch_new(gpu, F32, 1, s3), *rstd = amp_scratch_new(gpu, F32, 1, s3);
    arm(yl, F16);
    gpu->be->layer_norm(gpu->bctx, yl, mean, rstd, x, w.g, bias.g, 1e-5f);
    expect_fused("layer_norm f32 -> f16", yl, F16);
    amp_tensor_t *yl32 = amp_scratch_new(gpu, F32, 2, s3); // one dtype: the row in registers
    arm(yl32, F16);
    gpu->be->layer_norm(gpu->bctx, yl32, mean, rstd, x, w.g, bias.g, 1e-5f);
    expect_fused("layer_norm f32", yl32, F16);

    // the backward kernels whose dx becomes a gradient as it is
    amp_tensor_t *g16 = gpu_special(F16, 1, &n, 2.0f), *dx = amp_scratch_new(gpu, F16, 1, &n);
    arm(dx, F16);
    gpu->be->unary_backward(gpu->bctx, AMP_UNARY_GELU, 0, dx, g16, x16, NULL, 0);
    expect_fused("gelu backward f16", dx, F16);
    amp_tensor_t *dxa = amp_scratch_new(gpu, F16, 2, s1), *ga = gpu_special(F32, 2, s1, 1.0f);
    arm(dxa, F16);
    gpu->be->softmax_backward(gpu->bctx, false, dxa, ga, ya);
    expect_fused("softmax backward f32 -> f16", dxa, F16);
    // attention's softmax backward: dy (a GEMM's output) is read whole by a warp a row, which
    // takes the numbers held for dy as it adds dx's; rows of 512 (16 values a lane, in 16-byte
    // groups), 500 (lanes with 15, one by one) and 100 (4 a lane)
    const int64_t att_widths[3] = {512, 500, 100};
    for (int k = 0; k < 2; k++)
        for (int w = 0; w < 3; w++) {
            const amp_dtype dt = k ? BF16 : F16;
            const int64_t sh[2] = {777, att_widths[w]};
            amp_tensor_t *dy = gpu_special(dt, 2, sh, 2.0f), *p = gpu_special(F32, 2, sh, 0.1f),
                         *d = amp_scratch_new(gpu, dt, 2, sh);
            amp_stats *held = gpu->be->alloc(gpu->bctx, sizeof(amp_stats)), h, want;
            const amp_stats empty = amp_stats_empty();
            gpu->be->upload(gpu->bctx, held, &empty, sizeof empty);
            gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *[]){dy}, 1, dt, held,
                                (int64_t[]){0}, false);
            arm(d, dt);
            gpu->be->softmax_backward(gpu->bctx, false, d, dy, p);
            char what[96];
            snprintf(what, sizeof what, "softmax backward %s, %lld wide, taking dy's numbers",
                     amp_dtype_name(dt), (long long)sh[1]);
            expect_fused(what, d, dt);
            gpu->be->download(gpu->bctx, &h, held, sizeof h);
            amp_stats_finish(&h);
            amp_tensor_stats(dy, dt, &want);
            expect_same_stats(what, &h, &want);
            ck_assert_msg(h.sumsq == 0.0, "%s: dy read again by the statistics kernel", what);
            gpu->be->free(gpu->bctx, held);
        }
    // log_softmax's backward of a vocabulary's rows (in registers) and of longer ones
    amp_tensor_t *gv = gpu_special(F32, 2, s2, 1.0f), *dxv = amp_scratch_new(gpu, F32, 2, s2);
    arm(dxv, F16);
    gpu->be->softmax_backward(gpu->bctx, true, dxv, gv, yb);
    expect_fused("log_softmax backward f32, 8192 wide", dxv, F16);
    amp_tensor_t *gv4 = gpu_special(F32, 2, s4, 1.0f), *dxv4 = amp_scratch_new(gpu, F32, 2, s4);
    arm(dxv4, F16);
    gpu->be->softmax_backward(gpu->bctx, true, dxv4, gv4, yb4);
    expect_fused("log_softmax backward f32, 9000 wide", dxv4, F16);
    // nll_loss's backward: the targets' values (below f16's normals) and the fill's zeros, with
    // ignored rows (-100)
    const int64_t rows = 300, s5[2] = {rows, 1000};
    float tv[300];
    for (int64_t r = 0; r < rows; r++)
        tv[r] = r % 7 == 3 ? -100.0f : (float)((r * 37) % 1000);
    const float scale = 1e-3f;
    amp_tensor_t *tgt = amp_tensor_from_f32(gpu, AMP_DTYPE_I64, 1, &rows, tv),
                 *dloss = amp_tensor_from_f32(gpu, F32, 0, NULL, &scale);
    for (int k = 0; k < 3; k++) {
        amp_tensor_t *dlogp = amp_scratch_new(gpu, float_dtypes[k], 2, s5);
        arm(dlogp, F16);
        gpu->be->nll_loss_backward(gpu->bctx, dlogp, dloss, tgt);
        char what[64];
        snprintf(what, sizeof what, "nll_loss backward, %s", amp_dtype_name(float_dtypes[k]));
        expect_fused(what, dlogp, F16);
    }
    amp_tensor_t *dxl = amp_scratch_new(gpu, F32, 2, s3), *gl = gpu_special(F16, 2, s3, 1.0f);
    arm(dxl, F16);
    gpu->be->layer_norm_backward(gpu->bctx, dxl, NULL, NULL, gl, x, mean, rstd, w.g);
    expect_fused("layer_norm backward dx", dxl, F16);
    amp_tensor_t *gl32 = gpu_special(F32, 2, s3, 1.0f);
    arm(dxl, F16);
    gpu->be->layer_norm_backward(gpu->bctx, dxl, NULL, NULL, gl32, x, mean, rstd, w.g);
    expect_fused("layer_norm backward dx, f32", dxl, F16);

    // a sink armed for another tensor is left alone
    amp_tensor_t *y = amp_scratch_new(gpu, F16, 1, &n);
    arm(x16, F16);
    gpu->be->unary(gpu->bctx, AMP_UNARY_RELU, 0, y, x16);
    ck_assert(!gpu->sink.taken);
    gpu->sink = (amp_stats_sink){0};
    gpu->be->free(gpu->bctx, fused_slot);
    close_pair();
}
END_TEST

// A lone tensor's statistics (stats_into with one tensor) wait: a GELU, a GELU backward, a cast,
// an add, a copy of a permuted view, column sums or a softmax backward a warp a row that read the
// tensor whole add them as they go, without the sum of squares; other calls (a softmax backward of
// long rows or a layer_norm backward, which run slower with them than the statistics kernel takes
// to read the tensor; a row broadcast; a copy of a view that starts where the tensor does but
// skips values) leave them waiting, and a write to the tensor launches them first. Statistics that
// want the sum of squares (a parameter's gradient) are left waiting by all of them and come with
// it.
START_TEST(test_deferred_stats_gpu) {
    NEED_GPU();
    enum { CASES = 15 };
    amp_stats *slots = gpu->be->alloc(gpu->bctx, CASES * sizeof(amp_stats)), got[CASES];
    int64_t idx[CASES];
    for (int k = 0; k < CASES; k++)
        idx[k] = k;
    const int64_t n = (1 << 20) + 5, wide[2] = {1024, 1000}, long_rows[2] = {48, 8192};
    const struct {
        amp_dtype dt, target;
    } runs[] = {{F16, F16}, {BF16, BF16}, {F32, F16}, {F16, BF16}};
    // the call after stats_into
    static const char *what[CASES] = {"GELU",
                                      "GELU backward",
                                      "cast",
                                      "fill",
                                      "GELU, other dtype",
                                      "add",
                                      "mixed add",
                                      "softmax backward",
                                      "long-row softmax backward",
                                      "mul by a broadcast row",
                                      "copy of a permuted view",
                                      "copy of a transposed view",
                                      "copy of a view with gaps",
                                      "layer_norm backward",
                                      "column sums"};
    // taken by the call after stats_into (1: without the sum of squares), left waiting (0), or
    // either (-1)
    // (cases 4 to 6 read x, whose statistics wait three times over: which one a kernel takes is
    // the table's business)
    static const int taken[CASES] = {1, 1, 1, 0, -1, -1, -1, 1, 0, 0, 1, 1, 0, 0, 1};
    for (int r = 0; r < 2 * (int)(sizeof runs / sizeof *runs); r++) {
        const amp_dtype dt = runs[r / 2].dt, target = runs[r / 2].target;
        const bool sumsq = r % 2;
        for (int k = 0; k < CASES; k++)
            got[k] = amp_stats_empty();
        gpu->be->upload(gpu->bctx, slots, got, sizeof got);
        amp_tensor_t *x = gpu_special(dt, 1, &n, 3.0f), *g = gpu_special(dt, 1, &n, 2.0f),
                     *z = gpu_special(dt, 1, &n, 1.0f), *y = amp_scratch_new(gpu, dt, 1, &n),
                     *y32 = amp_scratch_new(gpu, F32, 1, &n),
                     *y16 = amp_scratch_new(gpu, F16, 1, &n), *other = dt == F32 ? y16 : y32;
        amp_tensor_t *gs = gpu_special(dt, 2, wide, 2.0f), *ys = gpu_special(F32, 2, wide, 0.1f),
                     *ds = amp_scratch_new(gpu, dt, 2, wide);
        amp_tensor_t *gl = gpu_special(dt, 2, long_rows, 2.0f),
                     *yl = gpu_special(F32, 2, long_rows, 0.1f),
                     *dl = amp_scratch_new(gpu, dt, 2, long_rows);
        amp_tensor_t *row = gpu_special(dt, 1, &wide[1], 1.0f);
        // a layer_norm's output gradient (its statistics, mean and rstd from a forward of ys)
        // and a linear's, whose column sums make the bias gradient
        amp_tensor_t *gn = gpu_special(dt, 2, wide, 2.0f), *dn = amp_scratch_new(gpu, dt, 2, wide),
                     *yn = amp_scratch_new(gpu, F32, 2, wide),
                     *mean = amp_scratch_new(gpu, F32, 1, wide),
                     *rstd = amp_scratch_new(gpu, F32, 1, wide);
        gpu->be->layer_norm(gpu->bctx, yn, mean, rstd, ys, NULL, NULL, 1e-5f);
        amp_tensor_t *gc = gpu_special(dt, 2, wide, 2.0f),
                     *bias = amp_scratch_new(gpu, dt, 2, (const int64_t[]){1, wide[1]});
        // a gradient permuted back; and every other value of a buffer, a view that starts where
        // the buffer's first half does and has as many values, but does not read it
        const int64_t p3[3] = {8, 40, 72}, half = n / 2;
        amp_tensor_t *pm = gpu_special(dt, 3, p3, 2.0f), *pt = gpu_special(dt, 3, p3, 2.0f),
                     *pmv = amp_permute(gpu, pm, (int[]){1, 0, 2}),
                     *ptv = amp_transpose(gpu, pt, 1, 2),
                     *pmd = amp_scratch_new(gpu, dt, 3, pmv->shape),
                     *ptd = amp_scratch_new(gpu, dt, 3, ptv->shape);
        amp_tensor_t *first = amp_view_new(gpu, x, 1, &half, (const int64_t[]){1}, 0),
                     *gaps = amp_view_new(gpu, x, 1, &half, (const int64_t[]){2}, 0),
                     *gd = amp_scratch_new(gpu, dt, 1, &half);
        amp_stats want[CASES];
        amp_tensor_stats(x, target, &want[0]);
        amp_tensor_stats(g, target, &want[1]);
        amp_tensor_stats(z, target, &want[3]);
        amp_tensor_stats(gs, target, &want[7]);
        amp_tensor_stats(gl, target, &want[8]);
        amp_tensor_stats(row, target, &want[9]);
        amp_tensor_stats(pm, target, &want[10]);
        amp_tensor_stats(pt, target, &want[11]);
        amp_tensor_stats(first, target, &want[12]);
        amp_tensor_stats(gn, target, &want[13]);
        amp_tensor_stats(gc, target, &want[14]);
        want[2] = want[4] = want[5] = want[6] = want[0];
        const amp_tensor_t *pend[CASES] = {x, g, x, z, x, x, x, gs, gl, row, pm, pt, first, gn, gc};
        for (int k = 0; k < CASES; k++) {
            gpu->be->stats_into(gpu->bctx, &pend[k], 1, target, slots, &idx[k], sumsq);
            switch (k) {
            case 0:
                gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, y, x);
                break;
            case 1:
                gpu->be->unary_backward(gpu->bctx, AMP_UNARY_GELU, 0, y, g, x, NULL, 0);
                break;
            case 2: // a cast (f32: a plain copy)
                gpu->be->copy(gpu->bctx, y32, x);
                break;
            case 3: // writes z: they go first
                gpu->be->fill(gpu->bctx, z, 0.0f);
                break;
            case 4:
                gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, other, x);
                break;
            case 5:
                gpu->be->binary(gpu->bctx, AMP_BINARY_ADD, y, x, z);
                break;
            case 6:
                gpu->be->binary(gpu->bctx, AMP_BINARY_ADD, other, other, x);
                break;
            case 7:
                gpu->be->softmax_backward(gpu->bctx, false, ds, gs, ys);
                break;
            case 8:
                gpu->be->softmax_backward(gpu->bctx, true, dl, gl, yl);
                break;
            case 9: // row broadcast over gs's rows: not read whole, so left waiting
                gpu->be->binary(
                    gpu->bctx, AMP_BINARY_MUL, ds, gs,
                    amp_expand(gpu, amp_reshape(gpu, row, 2, (int64_t[]){1, wide[1]}), 2, wide));
                break;
            case 10:
                gpu->be->copy(gpu->bctx, pmd, pmv);
                break;
            case 11:
                gpu->be->copy(gpu->bctx, ptd, ptv);
                break;
            case 12:
                gpu->be->copy(gpu->bctx, gd, gaps);
                break;
            case 13:
                gpu->be->layer_norm_backward(gpu->bctx, dn, NULL, NULL, gn, ys, mean, rstd, NULL);
                break;
            case 14:
                gpu->be->reduce_sum(gpu->bctx, bias, gc, 1.0f);
                break;
            }
        }
        gpu->be->download(gpu->bctx, got, slots, sizeof got);
        for (int k = 0; k < CASES; k++) {
            char m[128];
            snprintf(m, sizeof m, "%s then %s under %s%s", amp_dtype_name(dt), what[k],
                     amp_dtype_name(target), sumsq ? ", sum of squares wanted" : "");
            amp_stats_finish(&got[k]);
            expect_same_stats(m, &got[k], &want[k]);
            // (an f32 "cast" is a plain copy, which takes nothing: x's numbers wait for one of the
            // kernels after it that read x)
            const int took = k == 2 && dt == F32 ? -1 : taken[k];
            const bool left = sumsq || took == 0;
            const double want_sumsq = left ? want[k].sumsq : 0.0;
            if (left || took == 1)
                ck_assert_msg(fabs(got[k].sumsq - want_sumsq) <= 1e-5 * want_sumsq,
                              "%s: sumsq %.9g, expected %.9g", m, got[k].sumsq, want_sumsq);
        }
    }
    gpu->be->free(gpu->bctx, slots);
    close_pair();
}
END_TEST

// Statistics held for a batch (stats_into with several tensors: the parameters at the start of a
// step, their gradients at the end of backward) wait until the unscale or the optimizer step reads
// the tensors and adds them as it goes (a skipped step too); a write to or a free of one of their
// buffers by anything else launches that tensor's first.
static void expect_slots(const char *what, amp_stats *slots, const amp_stats *want, int n) {
    amp_stats got[16];
    gpu->be->download(gpu->bctx, got, slots, (size_t)n * sizeof *got);
    for (int k = 0; k < n; k++) {
        char m[128];
        snprintf(m, sizeof m, "%s, tensor %d", what, k);
        amp_stats_finish(&got[k]);
        expect_same_stats(m, &got[k], &want[k]);
        ck_assert_msg(fabs(got[k].sumsq - want[k].sumsq) <= 1e-5 * want[k].sumsq,
                      "%s: sumsq %.9g, expected %.9g", m, got[k].sumsq, want[k].sumsq);
    }
}

static void reset_slots(amp_stats *slots, int n) {
    amp_stats empty[16];
    for (int k = 0; k < n; k++)
        empty[k] = amp_stats_empty();
    gpu->be->upload(gpu->bctx, slots, empty, (size_t)n * sizeof *empty);
}

// A free of or a write to one held tensor launches its statistics alone: the others keep waiting
// for a kernel that reads them anyway (a GELU here, which leaves out the sum of squares and so
// tells an entry it took from one the statistics kernel read).
START_TEST(test_held_release_gpu) {
    NEED_GPU();
    const int64_t n = (1 << 16) + 3, idx[3] = {0, 1, 2};
    amp_stats *slots = gpu->be->alloc(gpu->bctx, 3 * sizeof(amp_stats)), got[3], want[3];
    reset_slots(slots, 3);
    amp_tensor_t *x[3], *y = amp_tensor_new(gpu, F16, 1, &n);
    for (int k = 0; k < 3; k++) {
        x[k] = gpu_special(F16, 1, &n, 2.0f);
        amp_tensor_stats(x[k], F16, &want[k]);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)&x[k], 1, F16, slots, &idx[k],
                            false);
    }
    amp_tensor_free(x[0]); // the pool may hand its memory out again: overwritten then
    amp_tensor_t *again = amp_tensor_new(gpu, F16, 1, &n);
    gpu->be->fill(gpu->bctx, again, 7.0f);
    gpu->be->fill(gpu->bctx, x[1], 7.0f);
    gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, y, x[2]);
    gpu->be->download(gpu->bctx, got, slots, sizeof got);
    static const char *what[3] = {"held, then freed", "held, then filled",
                                  "held while others were launched, then taken by a GELU"};
    for (int k = 0; k < 3; k++) {
        amp_stats_finish(&got[k]);
        expect_same_stats(what[k], &got[k], &want[k]);
        const double want_sumsq = k < 2 ? want[k].sumsq : 0.0;
        ck_assert_msg(fabs(got[k].sumsq - want_sumsq) <= 1e-5 * want_sumsq,
                      "%s: sumsq %.9g, expected %.9g", what[k], got[k].sumsq, want_sumsq);
    }
    amp_tensor_free(again);
    amp_tensor_free(y);
    amp_tensor_free(x[1]);
    amp_tensor_free(x[2]);
    gpu->be->free(gpu->bctx, slots);
}
END_TEST

START_TEST(test_held_stats_gpu) {
    NEED_GPU();
    enum { N = 3 };
    amp_stats *slots = gpu->be->alloc(gpu->bctx, 16 * sizeof(amp_stats)), want[16];
    const int64_t idx[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    // whole 4096-element chunks of 16-byte vectors, a tail, a scalar
    const int64_t len[N] = {(1 << 20) + 5, 4096 * 4, 1};
    const int32_t count_idx[N + 1] = {0, 1, 2, 3};
    const float inv = 1.0f / 1024;
    amp_tensor_t *inv_scale = amp_tensor_from(gpu, F32, 0, NULL, &inv);
    const amp_dtype targets[2] = {F16, BF16};
    const amp_optim_kind kinds[2] = {AMP_OPTIM_ADAM, AMP_OPTIM_SGD};
    for (int r = 0; r < 4; r++) {
        const amp_dtype target = targets[r % 2];
        const bool skipped = r >= 2; // an inf among the gradients: the step is skipped
        amp_tensor_t *p[N], *g[N], *m[N], *v[N], *batch[2 * N];
        for (int i = 0; i < N; i++) {
            p[i] = gpu_special(F32, 1, &len[i], 1.0f);
            pair gp = pair_new(F32, 1, &len[i], 100.0f, 0, false);
            g[i] = gp.g;
            m[i] = amp_tensor_new(gpu, F32, 1, &len[i]);
            v[i] = amp_tensor_new(gpu, F32, 1, &len[i]);
            batch[i] = p[i], batch[N + i] = g[i];
        }
        if (skipped) {
            float bad = INFINITY;
            gpu->be->upload(gpu->bctx, (float *)amp_tensor_ptr(g[0]) + 77, &bad, sizeof bad);
        }
        for (int k = 0; k < 2 * N; k++)
            amp_tensor_stats(batch[k], target, &want[k]);
        amp_tensor_t *found = amp_tensor_new(gpu, F32, 0, NULL),
                     *counts = amp_tensor_new(gpu, AMP_DTYPE_I64, 1, (int64_t[]){N + 1});

        // the GradScaler's step: the unscale takes the gradients', the optimizer the parameters'
        reset_slots(slots, 2 * N);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)batch, 2 * N, target, slots,
                            idx, true);
        gpu->be->unscale(gpu->bctx, g, NULL, N, inv_scale, found);
        const amp_optim_params op = amp_optim_defaults(kinds[r % 2]);
        gpu->be->optim_step(gpu->bctx, &op, p, g, op.kind == AMP_OPTIM_SGD ? NULL : m,
                            op.kind == AMP_OPTIM_SGD ? NULL : v, NULL, N, counts, count_idx, found);
        ck_assert_float_eq(amp_tensor_item(found), skipped ? 1.0f : 0.0f);
        char what[96];
        snprintf(what, sizeof what, "unscale + %s%s under %s", amp_optim_kind_name(op.kind),
                 skipped ? " (skipped)" : "", amp_dtype_name(target));
        expect_slots(what, slots, want, 2 * N);

        // no GradScaler (bf16): the optimizer takes both
        for (int k = 0; k < 2 * N; k++)
            amp_tensor_stats(batch[k], target, &want[k]);
        reset_slots(slots, 2 * N);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)batch, 2 * N, target, slots,
                            idx, true);
        gpu->be->optim_step(gpu->bctx, &op, p, g, op.kind == AMP_OPTIM_SGD ? NULL : m,
                            op.kind == AMP_OPTIM_SGD ? NULL : v, NULL, N, counts, count_idx, NULL);
        snprintf(what, sizeof what, "%s alone under %s", amp_optim_kind_name(op.kind),
                 amp_dtype_name(target));
        expect_slots(what, slots, want, 2 * N);

        // writes by anything else launch them first: a fill, an upload into one, a free of one
        for (int w = 0; w < 3; w++) {
            for (int k = 0; k < 2 * N; k++)
                amp_tensor_stats(batch[k], target, &want[k]);
            reset_slots(slots, 2 * N);
            gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)batch, 2 * N, target, slots,
                                idx, true);
            static const char *writer[3] = {"a fill", "an upload", "a free"};
            const float zero = 0.0f;
            if (w == 0) gpu->be->fill(gpu->bctx, p[1], 7.0f);
            if (w == 1) gpu->be->upload(gpu->bctx, (float *)amp_tensor_ptr(g[0]) + 9, &zero, 4);
            if (w == 2) { // the freed memory handed out again and overwritten
                amp_tensor_free(p[0]);
                p[0] = batch[0] = amp_tensor_new(gpu, F32, 1, &len[0]);
            }
            snprintf(what, sizeof what, "held, then %s", writer[w]);
            expect_slots(what, slots, want, 2 * N);
        }

        // two batches of different autocast dtypes held together, launched by a synchronize
        for (int k = 0; k < 2 * N; k++) {
            amp_tensor_stats(batch[k], F16, &want[k]);
            amp_tensor_stats(batch[k], BF16, &want[2 * N + k]);
        }
        reset_slots(slots, 4 * N);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)batch, 2 * N, F16, slots, idx,
                            true);
        gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)batch, 2 * N, BF16, slots,
                            idx + 2 * N, true);
        gpu->be->synchronize(gpu->bctx);
        expect_slots("two autocast dtypes held", slots, want, 4 * N);

        for (int i = 0; i < N; i++) {
            amp_tensor_free(p[i]);
            amp_tensor_free(g[i]);
            amp_tensor_free(m[i]);
            amp_tensor_free(v[i]);
        }
        amp_tensor_free(found);
        amp_tensor_free(counts);
    }
    gpu->be->free(gpu->bctx, slots);

    // many lone tensors held at once, taken by GELUs in another order than they came; past what
    // the table holds, the ones held so far are launched to make room
    for (int r = 0; r < 2; r++) {
        const int many = r == 0 ? 200 : 300;
        amp_stats *mslots = gpu->be->alloc(gpu->bctx, (size_t)many * sizeof(amp_stats));
        amp_stats *mwant = malloc((size_t)many * sizeof *mwant),
                  *mgot = malloc((size_t)many * sizeof *mgot);
        amp_tensor_t **x = malloc((size_t)many * sizeof *x), **y = malloc((size_t)many * sizeof *y);
        for (int k = 0; k < many; k++) {
            const int64_t n = 1000 + 8 * k;
            x[k] = gpu_special(F16, 1, &n, 2.0f);
            y[k] = amp_tensor_new(gpu, F16, 1, &n);
            amp_tensor_stats(x[k], F16, &mwant[k]);
            mgot[k] = amp_stats_empty();
        }
        gpu->be->upload(gpu->bctx, mslots, mgot, (size_t)many * sizeof *mgot);
        for (int k = 0; k < many; k++) {
            const int64_t at = k;
            gpu->be->stats_into(gpu->bctx, (const amp_tensor_t *const *)&x[k], 1, F16, mslots, &at,
                                false);
        }
        for (int j = 0; j < many; j++) {
            const int k = (int)((j * 7L + 3) % many); // 7 is prime to both counts
            gpu->be->unary(gpu->bctx, AMP_UNARY_GELU, 0, y[k], x[k]);
        }
        gpu->be->download(gpu->bctx, mgot, mslots, (size_t)many * sizeof *mgot);
        for (int k = 0; k < many; k++) {
            char m[96];
            snprintf(m, sizeof m, "%d held, tensor %d", many, k);
            amp_stats_finish(&mgot[k]);
            expect_same_stats(m, &mgot[k], &mwant[k]);
            amp_tensor_free(x[k]);
            amp_tensor_free(y[k]);
        }
        gpu->be->free(gpu->bctx, mslots);
        free(mwant);
        free(mgot);
        free(x);
        free(y);
    }
    close_pair();
}
END_TEST

// A program that ends with exit() and never frees its context: its last step, whose statistics
// come back one step late on the GPU, is read at exit.
START_TEST(test_exit_without_free_gpu) {
    NEED_GPU();
    close_pair();
    test_dir_create("exit-gpu");
    test_exit_without_free("cuda");
    test_dir_remove();
}
END_TEST

#ifdef AMP_HAVE_CUPTI_CAPTURE
// Under ampprobe run (CUDA capture on), every kernel of a libampcore sample is attributed: to the
// innermost libampcore NVTX range around its launch call (AMP_CAPTURE_KERNEL_RANGES_SQL), or to
// the AMP_OPS op whose host interval holds the call (as tests/helpers/kernel_attribution.py). A
// kernel launched outside both (statistics a free launched, once) would be one no layer or op
// owns.
START_TEST(test_every_kernel_attributed_gpu) {
    NEED_GPU();
    close_pair();
    test_dir_create("attribution-gpu");
    const char *args[] = {
        "run",      "-o",   "run.sqlite",  "--",   AMP_BINARY_DIR "/samples/tiny_gpt",
        "--device", "cuda", "--precision", "fp16", "--steps",
        "3",        NULL};
    ck_assert_int_eq(test_wait_ampprobe(test_spawn_ampprobe(args)), 0);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(test_in_dir("run.sqlite"), &db, SQLITE_OPEN_READONLY, NULL),
                     SQLITE_OK);
    const int64_t kernels = test_query_int(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
    ck_assert_msg(kernels > 100, "%lld kernels captured (is CUPTI held by another profiler?)",
                  (long long)kernels);
    const int64_t lost = test_query_int(
        db, "SELECT count(*) FROM (" AMP_CAPTURE_KERNEL_RANGES_SQL ") a WHERE a.range IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r, AMP_OPS o WHERE "
            "r.rowid = a.api AND o.start_ns <= r.start AND o.end_ns >= r.end)");
    ck_assert_msg(lost == 0, "%lld of %lld kernels attributed to no layer or op", (long long)lost,
                  (long long)kernels);
    sqlite3_close(db);
    test_dir_remove();
}
END_TEST
#endif

// The next autocast region's copy of GPU parameter p, written by the optimizer step: p's values
// rounded to its dtype, bit for bit (as the cast kernel rounds them).
static void expect_precast(const char *what, amp_tensor_t *p) {
    ck_assert_ptr_nonnull(p->precast);
    ck_assert_uint_eq(p->precast_version, p->buf->version);
    amp_tensor_t *want = amp_to(gpu, p, p->precast_dtype), copy = *want;
    copy.buf = p->precast;
    const int64_t n = amp_tensor_numel(p);
    uint16_t *a = malloc((size_t)n * 2), *b = malloc((size_t)n * 2);
    amp_tensor_read(want, a);
    amp_tensor_read(&copy, b);
    int64_t bad = 0;
    while (bad < n && a[bad] == b[bad])
        bad++;
    ck_assert_msg(bad == n, "%s: %s copy of %lld values differs at %lld (%04x, cast %04x)", what,
                  amp_dtype_name(p->precast_dtype), (long long)n, (long long)bad,
                  bad < n ? b[bad] : 0, bad < n ? a[bad] : 0);
    free(a);
    free(b);
    amp_ctx_reset(gpu);
}

// Three optimizer steps over a few parameters with random gradients of dtype gt; parameters and
// state compared after each, and the autocast copies the GPU's steps write (f16 or bf16, from
// step to step). A 16-bit gradient comes the way autocast's does, through a cast's backward
// (loss = sum(gt(p) * c)), and is kept narrow for the optimizer to read. Then a step skipped on
// the device (found_inf), which writes the copies of the unchanged parameters (into new storage:
// the old copies are held as an autocast region's casts).
static void check_optim(amp_optim_params p, amp_dtype gt) {
    int64_t shapes[3][2] = {{33, 70}, {1, 5000}, {1, 1}};
    pair params[3], grads[3];
    amp_tensor_t *pc[3], *pg[3];
    for (int i = 0; i < 3; i++) {
        params[i] = pair_new(F32, 2, shapes[i], 1, 0, true);
        pc[i] = params[i].c;
        pg[i] = params[i].g;
    }
    amp_optim_t *oc, *og;
    ck_assert_int_eq(amp_optim_new(cpu, &p, pc, 3, &oc), AMP_OK);
    ck_assert_int_eq(amp_optim_new(gpu, &p, pg, 3, &og), AMP_OK);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < 3; i++) {
            grads[i] = pair_new(gt, 2, shapes[i], 0.1f, 0, false);
            if (gt == F32) {
                amp_grad_accumulate(cpu, pc[i], grads[i].c);
                amp_grad_accumulate(gpu, pg[i], grads[i].g);
                continue;
            }
            amp_backward(cpu, amp_sum(cpu, amp_mul(cpu, amp_to(cpu, pc[i], gt), grads[i].c)));
            amp_backward(gpu, amp_sum(gpu, amp_mul(gpu, amp_to(gpu, pg[i], gt), grads[i].g)));
            ck_assert_int_eq(pc[i]->grad->dtype, gt);
            ck_assert_int_eq(pg[i]->grad->dtype, gt);
        }
        for (int i = 0; i < 3; i++)
            amp_precast_want(pg[i], (i + step) % 2 ? F16 : BF16);
        amp_optim_step(oc);
        amp_optim_step(og);
        amp_ctx_reset(cpu);
        amp_ctx_reset(gpu);
        for (int i = 0; i < 3; i++) {
            expect_close(amp_optim_kind_name(p.kind), pc[i], pg[i], 1e-5);
            if (amp_optim_state(oc, i, 0))
                expect_close("optimizer state", amp_optim_state(oc, i, 0),
                             amp_optim_state(og, i, 0), 1e-5);
            expect_precast(amp_optim_kind_name(p.kind), pg[i]);
        }
        amp_optim_zero_grad(oc);
        amp_optim_zero_grad(og);
        for (int i = 0; i < 3; i++) {
            amp_tensor_free(grads[i].c);
            amp_tensor_free(grads[i].g);
        }
    }
    const float one = 1.0f;
    amp_tensor_t *found = amp_tensor_from_f32(gpu, F32, 0, NULL, &one);
    amp_buffer *held[3];
    for (int i = 0; i < 3; i++) {
        grads[i] = pair_new(F32, 2, shapes[i], 0.1f, 0, false);
        amp_grad_accumulate(gpu, pg[i], grads[i].g);
        held[i] = amp_precast_take(gpu, pg[i], pg[i]->precast_dtype)->buf;
        amp_precast_want(pg[i], pg[i]->precast_dtype); // (as a region's end would)
    }
    amp_optim_step_unless(og, found);
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_ne(pg[i]->precast, held[i]);
    for (int i = 0; i < 3; i++) {
        expect_close("a skipped step", pc[i], pg[i], 1e-5);
        expect_precast("a skipped step", pg[i]);
        amp_tensor_free(grads[i].c);
        amp_tensor_free(grads[i].g);
    }
    amp_tensor_free(found);
    amp_optim_free(oc);
    amp_optim_free(og);
}

START_TEST(test_optim_gpu) {
    NEED_GPU();
    amp_optim_params sgd = amp_optim_defaults(AMP_OPTIM_SGD);
    sgd.lr = 0.1f;
    sgd.momentum = 0.9f;
    sgd.weight_decay = 0.01f;
    amp_optim_params adam = amp_optim_defaults(AMP_OPTIM_ADAM);
    adam.weight_decay = 0.1f;
    const amp_dtype gts[3] = {F32, F16, BF16};
    for (int k = 0; k < 3; k++) {
        sgd.nesterov = false;
        check_optim(sgd, gts[k]);
        sgd.nesterov = true;
        check_optim(sgd, gts[k]);
        check_optim(adam, gts[k]);
        check_optim(amp_optim_defaults(AMP_OPTIM_ADAMW), gts[k]);
    }
    close_pair();
}
END_TEST

// unscale over many gradients (more than one launch's worth): values, then the non-finite check.
START_TEST(test_unscale_gpu) {
    NEED_GPU();
    enum { N = 70 };
    pair g[N];
    amp_tensor_t *gc[N], *gg[N];
    for (int i = 0; i < N; i++) {
        g[i] = pair_new(i % 3 == 2 ? BF16 : F32, 1, (int64_t[]){1 + 97 * i}, 1000, 0, false);
        gc[i] = g[i].c;
        gg[i] = g[i].g;
    }
    amp_tensor_t *fc = amp_tensor_new(cpu, F32, 1, (int64_t[]){1}),
                 *fg = amp_tensor_new(gpu, F32, 1, (int64_t[]){1});
    const float inv = 1.0f / 1024, one = 1.0f;
    cpu->be->unscale(cpu->bctx, gc, NULL, N, amp_tensor_from(cpu, F32, 0, NULL, &inv), fc);
    gpu->be->unscale(gpu->bctx, gg, NULL, N, amp_tensor_from(gpu, F32, 0, NULL, &inv), fg);
    ck_assert_float_eq(amp_tensor_item(fg), 0.0f);
    for (int i = 0; i < N; i++)
        expect_close("unscaled gradient", gc[i], gg[i], 0);
    // one inf in the last tensor: found, and a pure check (inv_scale 1) changes nothing
    int64_t last = amp_tensor_numel(gg[N - 1]);
    float *v = malloc((size_t)last * 4);
    amp_tensor_read_f32(gg[N - 1], v);
    v[last / 2] = INFINITY;
    amp_tensor_write_f32(gg[N - 1], v);
    gpu->be->unscale(gpu->bctx, gg, NULL, N, amp_tensor_from(gpu, F32, 0, NULL, &one), fg);
    ck_assert_float_eq(amp_tensor_item(fg), 1.0f);
    float *w = malloc((size_t)last * 4);
    amp_tensor_read_f32(gg[N - 1], w);
    ck_assert(memcmp(v, w, (size_t)last * 4) == 0);
    free(v);
    free(w);
    // narrower gradients read and their unscaled values written into f32 ones, inv_scale 1 too
    amp_tensor_t *oc[N], *og[N];
    const amp_tensor_t *nc[N], *ng[N];
    for (int i = 0; i < N; i++) {
        g[i] = pair_new(i % 2 ? BF16 : F16, 1, (int64_t[]){1 + 397 * i}, 1000, 0, false);
        nc[i] = g[i].c;
        ng[i] = g[i].g;
        oc[i] = amp_tensor_new(cpu, F32, 1, g[i].c->shape);
        og[i] = amp_tensor_new(gpu, F32, 1, g[i].g->shape);
    }
    for (int pass = 0; pass < 2; pass++) {
        const float *f = pass ? &one : &inv;
        cpu->be->fill(cpu->bctx, fc, 0.0f);
        gpu->be->fill(gpu->bctx, fg, 0.0f);
        cpu->be->unscale(cpu->bctx, oc, nc, N, amp_tensor_from(cpu, F32, 0, NULL, f), fc);
        gpu->be->unscale(gpu->bctx, og, ng, N, amp_tensor_from(gpu, F32, 0, NULL, f), fg);
        ck_assert_float_eq(amp_tensor_item(fg), amp_tensor_item(fc));
        ck_assert_float_eq(amp_tensor_item(fg), pass ? 1.0f : 0.0f);
        for (int i = 0; i < N; i++)
            expect_close("unscaled narrow gradient", oc[i], og[i], 0);
        if (pass == 0) { // an inf in a 16-bit gradient of a whole chunk
            int64_t n = amp_tensor_numel(g[N - 2].g);
            float *x = malloc((size_t)n * 4);
            amp_tensor_read_f32(g[N - 2].g, x);
            x[n / 2] = -INFINITY;
            amp_tensor_write_f32(g[N - 2].g, x);
            amp_tensor_write_f32(g[N - 2].c, x);
            free(x);
        }
    }
    close_pair();
}
END_TEST

// The GradScaler's state on the device: scale updates over more found_infs than one launch
// takes agree with the CPU's, and a step skipped on the device leaves parameters, optimizer
// state and update counts alone.
START_TEST(test_scaler_device_state_gpu) {
    NEED_GPU();
    enum { N = 40 };
    amp_scaler_params sp = amp_scaler_defaults();
    sp.growth_interval = 2;
    amp_ctx_t *ctx[2] = {cpu, gpu};
    amp_tensor_t *scale[2], *inv[2], *tracker[2], *rec[2], *found[2][N];
    bool stepped[N];
    for (int d = 0; d < 2; d++) {
        const float init = 4096.0f;
        scale[d] = amp_tensor_from(ctx[d], F32, 0, NULL, &init);
        inv[d] = amp_tensor_new(ctx[d], F32, 0, NULL);
        tracker[d] = amp_tensor_new(ctx[d], AMP_DTYPE_I32, 0, NULL);
        rec[d] = amp_tensor_new(ctx[d], AMP_DTYPE_I32, 1, (int64_t[]){AMP_SCALE_REC});
        for (int i = 0; i < N; i++)
            found[d][i] = amp_tensor_new(ctx[d], F32, 1, (int64_t[]){1});
    }
    for (int i = 0; i < N; i++)
        stepped[i] = i % 2 == 0;
    // clean, clean (growth), an inf in an optimizer past the first launch that did not step,
    // then one that stepped (skipped)
    const int bad[4] = {-1, -1, 35, 36};
    for (int u = 0; u < 4; u++) {
        int32_t rc[AMP_SCALE_REC], rg[AMP_SCALE_REC];
        for (int d = 0; d < 2; d++) {
            for (int i = 0; i < N; i++)
                ctx[d]->be->fill(ctx[d]->bctx, found[d][i], i == bad[u] ? 1.0f : 0.0f);
            ctx[d]->be->scale_update(ctx[d]->bctx, scale[d], inv[d], tracker[d], found[d], stepped,
                                     N, &sp, rec[d]);
        }
        amp_tensor_read(rec[0], rc);
        amp_tensor_read(rec[1], rg);
        ck_assert_mem_eq(rc, rg, sizeof rc);
        ck_assert_int_eq(rg[AMP_REC_SKIPPED], u == 3);
        ck_assert_float_eq(amp_tensor_item(inv[1]), amp_tensor_item(inv[0]));
    }
    ck_assert_float_eq(amp_tensor_item(scale[1]), 2048.0f); // 4096 x2, x0.5, x0.5

    // a step skipped on the device
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    pair param = pair_new(F32, 1, (int64_t[]){5000}, 1, 0, true);
    pair grad = pair_new(F32, 1, (int64_t[]){5000}, 0.1f, 0, false);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(gpu, &op, &param.g, 1, &opt), AMP_OK);
    amp_grad_accumulate(gpu, param.g, grad.g);
    float *before = malloc(5000 * 4), *after = malloc(5000 * 4);
    amp_tensor_read_f32(param.g, before);
    gpu->be->fill(gpu->bctx, found[1][0], 1.0f);
    amp_optim_step_unless(opt, found[1][0]);
    amp_tensor_read_f32(param.g, after);
    ck_assert(memcmp(before, after, 5000 * 4) == 0);
    ck_assert_int_eq(amp_optim_steps(opt), 0);
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), 0);
    gpu->be->fill(gpu->bctx, found[1][0], 0.0f);
    amp_optim_step_unless(opt, found[1][0]);
    amp_tensor_read_f32(param.g, after);
    ck_assert(memcmp(before, after, 5000 * 4) != 0);
    ck_assert_int_eq(amp_optim_steps(opt), 1);
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), 1);
    free(before);
    free(after);
    amp_optim_free(opt);
    close_pair();
}
END_TEST

// A small MLP trained with fp16 autocast and the GradScaler on both devices: the losses, the
// scale history and the weights agree; one planted inf gradient step is skipped on both.
static float train_step(amp_ctx_t *c, amp_tensor_t **w, amp_tensor_t *x, amp_tensor_t *y,
                        amp_scaler_t *sc, amp_optim_t *opt, bool *skipped) {
    amp_optim_zero_grad(opt);
    amp_autocast_begin(c, true, F16, true);
    amp_tensor_t *h = amp_gelu(c, amp_linear(c, x, w[0], w[1]), false);
    amp_tensor_t *logits = amp_linear(c, h, w[2], w[3]);
    amp_autocast_end(c);
    amp_tensor_t *loss = amp_cross_entropy(c, amp_to(c, logits, F32), y);
    float l = amp_tensor_item(loss);
    amp_backward(c, amp_scaler_scale(sc, c, loss));
    ck_assert_int_eq(amp_scaler_step(sc, opt, skipped), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    amp_ctx_reset(c);
    return l;
}

START_TEST(test_train_fp16_gpu) {
    NEED_GPU();
    int64_t shapes[4][2] = {{64, 32}, {64, 1}, {10, 64}, {10, 1}};
    pair w[4];
    amp_tensor_t *wc[4], *wg[4];
    for (int i = 0; i < 4; i++) {
        w[i] = pair_new(F32, shapes[i][1] == 1 ? 1 : 2, shapes[i], 0.2f, 0, true);
        wc[i] = w[i].c;
        wg[i] = w[i].g;
    }
    pair x = pair_new(F32, 2, (int64_t[]){128, 32}, 1, 0, false);
    pair y = pair_index(AMP_DTYPE_I64, 1, (int64_t[]){128}, 10);
    amp_scaler_params sp = amp_scaler_defaults();
    sp.growth_interval = 3;
    amp_scaler_t *sc, *sg;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    ck_assert_int_eq(amp_scaler_new(&sp, &sg), AMP_OK);
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    op.lr = 1e-2f;
    amp_optim_t *oc, *og;
    ck_assert_int_eq(amp_optim_new(cpu, &op, wc, 4, &oc), AMP_OK);
    ck_assert_int_eq(amp_optim_new(gpu, &op, wg, 4, &og), AMP_OK);
    float first = 0, last = 0;
    for (int s = 0; s < 12; s++) {
        bool kc, kg;
        float lc = train_step(cpu, wc, x.c, y.c, sc, oc, &kc);
        float lg = train_step(gpu, wg, x.g, y.g, sg, og, &kg);
        ck_assert_msg(fabsf(lc - lg) <= 2e-2f * (1 + fabsf(lc)), "step %d: loss cuda %g, cpu %g", s,
                      lg, lc);
        ck_assert_int_eq(kc, kg);
        ck_assert_float_eq(amp_scaler_get_scale(sg), amp_scaler_get_scale(sc));
        if (s == 0) first = lg;
        last = lg;
    }
    ck_assert_msg(last < first, "the GPU run did not learn: %g -> %g", first, last);
    for (int i = 0; i < 4; i++)
        expect_close("trained weight", wc[i], wg[i], 5e-2);
    ck_assert_int_eq(amp_optim_steps(og), amp_optim_steps(oc));
    ck_assert_int_eq(amp_scaler_growth_tracker(sg), amp_scaler_growth_tracker(sc));
    ck_assert_float_eq(amp_scaler_last_found_inf(sg), amp_scaler_last_found_inf(sc));
    // the GPU's state (update counts and scaler on the device) through a checkpoint into the CPU
    test_dir_create("cuda_checkpoint");
    const char *path = test_in_dir("gpu.ckpt");
    ck_assert_int_eq(amp_checkpoint_save(path, wg, 4, og, sg), AMP_OK);
    amp_scaler_t *sl;
    ck_assert_int_eq(amp_scaler_new(&sp, &sl), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path, wc, 4, oc, sl), AMP_OK);
    ck_assert_int_eq(amp_optim_steps(oc), amp_optim_steps(og));
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(amp_optim_param_steps(oc, i), amp_optim_param_steps(og, i));
    ck_assert_float_eq(amp_scaler_get_scale(sl), amp_scaler_get_scale(sg));
    ck_assert_int_eq(amp_scaler_growth_tracker(sl), amp_scaler_growth_tracker(sg));
    amp_scaler_free(sl);
    test_dir_remove();
    amp_optim_free(oc);
    amp_optim_free(og);
    amp_scaler_free(sc);
    amp_scaler_free(sg);
    close_pair();
}
END_TEST

Suite *cuda_gpu_suite(void) {
    Suite *s = suite_create("cuda_gpu");
    TCase *t = tcase_create("ops");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_gemm_gpu);
    tcase_add_test(t, test_bias_grad_colsums_gpu);
    tcase_add_test(t, test_unary_gpu);
    tcase_add_test(t, test_binary_reduce_copy_gpu);
    tcase_add_test(t, test_softmax_norm_loss_gpu);
    tcase_add_test(t, test_layer_norm_half_gpu);
    tcase_add_test(t, test_embedding_conv_gpu);
    tcase_add_test(t, test_dropout_gpu);
    tcase_add_test(t, test_stats_gpu);
    tcase_add_test(t, test_fused_stats_gpu);
    tcase_add_test(t, test_deferred_stats_gpu);
    tcase_add_test(t, test_held_stats_gpu);
    tcase_add_test(t, test_held_release_gpu);
    tcase_add_test(t, test_exit_without_free_gpu);
#ifdef AMP_HAVE_CUPTI_CAPTURE
    tcase_add_test(t, test_every_kernel_attributed_gpu);
#endif
    tcase_add_test(t, test_optim_gpu);
    tcase_add_test(t, test_unscale_gpu);
    tcase_add_test(t, test_scaler_device_state_gpu);
    tcase_add_test(t, test_train_fp16_gpu);
    suite_add_tcase(s, t);
    return s;
}
