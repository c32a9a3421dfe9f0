/*
 * test_ops.c — every op of the runtime, forward values against direct computations and backward
 * against central finite differences (f32, loss = sum(op(x) * r) for a fixed random r).
 */
#include "amp-impl.h" // amp_conv_cols_max
#include "amp.h"
#include "tests.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef amp_tensor_t *(*op_fn)(amp_ctx_t *ctx, amp_tensor_t **x);

static amp_ctx_t *ctx;

static void setup(void) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 7, &ctx), AMP_OK);
}
static void teardown(void) {
    amp_ctx_free(ctx);
}

// An f32 tensor of c with N(0, std) values, requiring grad when `grad`.
static amp_tensor_t *randn_in(amp_ctx_t *c, int ndim, const int64_t *shape, float std, bool grad) {
    amp_tensor_t *t = amp_tensor_new(c, AMP_DTYPE_F32, ndim, shape);
    amp_tensor_randn(t, std);
    amp_tensor_set_requires_grad(t, grad);
    return t;
}

static amp_tensor_t *param(int ndim, const int64_t *shape, float std) {
    return randn_in(ctx, ndim, shape, std, true);
}

static double loss_of(op_fn f, amp_tensor_t **xs, amp_tensor_t *r) {
    amp_tensor_t *y = f(ctx, xs);
    double l = amp_tensor_item(amp_sum(ctx, amp_mul(ctx, amp_to(ctx, y, AMP_DTYPE_F32), r)));
    amp_ctx_reset(ctx);
    return l;
}

// Compares the analytic gradient of every input that requires grad with finite differences.
static void gradcheck(const char *name, op_fn f, amp_tensor_t **xs, int n, float eps, double tol) {
    amp_tensor_t *y = f(ctx, xs);
    int64_t shape[AMP_MAX_DIMS];
    for (int i = 0; i < amp_tensor_ndim(y); i++)
        shape[i] = amp_tensor_dim(y, i);
    amp_tensor_t *r = amp_tensor_new(ctx, AMP_DTYPE_F32, amp_tensor_ndim(y), shape);
    amp_tensor_randn(r, 1.0f);
    amp_ctx_reset(ctx);
    for (int i = 0; i < n; i++)
        amp_tensor_zero_grad(xs[i]);
    amp_backward(ctx, amp_sum(ctx, amp_mul(ctx, amp_to(ctx, f(ctx, xs), AMP_DTYPE_F32), r)));
    amp_ctx_reset(ctx);
    for (int i = 0; i < n; i++) {
        if (!amp_tensor_requires_grad(xs[i])) continue;
        amp_tensor_t *g = amp_tensor_grad(xs[i]);
        ck_assert_msg(g != NULL, "%s: input %d got no gradient", name, i);
        int64_t m = amp_tensor_numel(xs[i]);
        float *x = malloc((size_t)m * 4), *ga = malloc((size_t)m * 4);
        amp_tensor_read_f32(xs[i], x);
        amp_tensor_read_f32(g, ga);
        double num2 = 0, diff2 = 0;
        for (int64_t j = 0; j < m; j++) {
            float keep = x[j];
            x[j] = keep + eps;
            amp_tensor_write_f32(xs[i], x);
            double lp = loss_of(f, xs, r);
            x[j] = keep - eps;
            amp_tensor_write_f32(xs[i], x);
            double lm = loss_of(f, xs, r);
            x[j] = keep;
            amp_tensor_write_f32(xs[i], x);
            double gn = (lp - lm) / (2.0 * eps);
            num2 += gn * gn;
            diff2 += (gn - ga[j]) * (gn - ga[j]);
        }
        double rel = sqrt(diff2) / (sqrt(num2) + 1e-12);
        ck_assert_msg(rel < tol, "%s: input %d gradient off by %.3g (relative L2)", name, i, rel);
        free(x);
        free(ga);
    }
    amp_tensor_free(r);
}

// Ops with kinks (relu, clamp, max) use a small step so that no input crosses one.
#define GRAD_TEST_EPS(name, eps, n_in, body, ...)                                                  \
    static amp_tensor_t *name##_fn(amp_ctx_t *c, amp_tensor_t **x) {                               \
        (void)c;                                                                                   \
        return body;                                                                               \
    }                                                                                              \
    START_TEST(test_grad_##name) {                                                                 \
        amp_tensor_t *xs[n_in] = {__VA_ARGS__};                                                    \
        gradcheck(#name, name##_fn, xs, n_in, eps, 3e-2);                                          \
    }                                                                                              \
    END_TEST
#define GRAD_TEST(name, n_in, body, ...) GRAD_TEST_EPS(name, 1e-2f, n_in, body, __VA_ARGS__)

#define S(...) ((int64_t[]){__VA_ARGS__})

GRAD_TEST(linear, 3, amp_linear(c, x[0], x[1], x[2]), param(3, S(2, 3, 4), 1), param(2, S(5, 4), 1),
          param(1, S(5), 1))
GRAD_TEST(mm, 2, amp_mm(c, x[0], x[1]), param(2, S(3, 4), 1), param(2, S(4, 5), 1))
GRAD_TEST(bmm, 2, amp_bmm(c, x[0], x[1]), param(3, S(2, 3, 4), 1), param(3, S(2, 4, 2), 1))
GRAD_TEST(matmul4d, 2, amp_matmul(c, x[0], x[1]), param(4, S(2, 2, 3, 4), 1),
          param(4, S(2, 2, 4, 3), 1))
GRAD_TEST(matmul_shared, 2, amp_matmul(c, x[0], x[1]), param(3, S(2, 3, 4), 1),
          param(2, S(4, 3), 1))
// torch.matmul's broadcasting of the batch dims and 1-D operands
GRAD_TEST(matmul_broadcast_a, 2, amp_matmul(c, x[0], x[1]), param(2, S(3, 4), 1),
          param(3, S(2, 4, 5), 1))
GRAD_TEST(matmul_broadcast_both, 2, amp_matmul(c, x[0], x[1]), param(4, S(2, 1, 3, 4), 1),
          param(3, S(3, 4, 2), 1))
GRAD_TEST(matmul_vector_first, 2, amp_matmul(c, x[0], x[1]), param(1, S(4), 1),
          param(3, S(2, 4, 5), 1))
GRAD_TEST(matmul_vector_second, 2, amp_matmul(c, x[0], x[1]), param(3, S(2, 3, 4), 1),
          param(1, S(4), 1))
GRAD_TEST(matmul_dot, 2, amp_matmul(c, x[0], x[1]), param(1, S(4), 1), param(1, S(4), 1))
GRAD_TEST(addmm, 3, amp_addmm(c, x[0], x[1], x[2]), param(1, S(5), 1), param(2, S(3, 4), 1),
          param(2, S(4, 5), 1))
GRAD_TEST(addmm_full_bias, 3, amp_addmm(c, x[0], x[1], x[2]), param(2, S(3, 5), 1),
          param(2, S(3, 4), 1), param(2, S(4, 5), 1))
GRAD_TEST(conv2d, 3, amp_conv2d(c, x[0], x[1], x[2], 2, 1), param(4, S(2, 2, 5, 5), 1),
          param(4, S(3, 2, 3, 3), 1), param(1, S(3), 1))
GRAD_TEST(conv2d_nobias, 2, amp_conv2d(c, x[0], x[1], NULL, 1, 0), param(4, S(1, 2, 4, 4), 1),
          param(4, S(2, 2, 2, 2), 1))
GRAD_TEST_EPS(max_pool2d, 1e-3f, 1, amp_max_pool2d(c, x[0], 2, 2), param(4, S(1, 2, 4, 4), 1))
GRAD_TEST_EPS(relu, 1e-3f, 1, amp_relu(c, x[0]), param(2, S(4, 5), 1))
GRAD_TEST(gelu, 1, amp_gelu(c, x[0], false), param(2, S(4, 5), 1))
GRAD_TEST(gelu_tanh, 1, amp_gelu(c, x[0], true), param(2, S(4, 5), 1))
GRAD_TEST(tanh, 1, amp_tanh(c, x[0]), param(2, S(4, 5), 1))
GRAD_TEST(sigmoid, 1, amp_sigmoid(c, x[0]), param(2, S(4, 5), 1))
GRAD_TEST(exp, 1, amp_exp(c, x[0]), param(2, S(4, 5), 1))
GRAD_TEST(log, 1, amp_log(c, amp_add_scalar(c, amp_mul(c, x[0], x[0]), 0.5)), param(2, S(4, 5), 1))
GRAD_TEST(log1p, 1, amp_log1p(c, amp_mul(c, x[0], x[0])), param(2, S(4, 5), 1))
GRAD_TEST(pow, 1, amp_pow(c, amp_add_scalar(c, amp_mul(c, x[0], x[0]), 0.5), 1.5f),
          param(2, S(4, 5), 1))
GRAD_TEST_EPS(clamp_min, 1e-3f, 1, amp_clamp_min(c, x[0], 0.1f), param(2, S(4, 5), 1))
GRAD_TEST(softmax, 1, amp_softmax(c, x[0], -1), param(2, S(3, 6), 1))
GRAD_TEST(softmax_dim0, 1, amp_softmax(c, x[0], 0), param(3, S(3, 4, 2), 1))
GRAD_TEST(log_softmax, 1, amp_log_softmax(c, x[0], 1), param(2, S(3, 6), 1))
GRAD_TEST(layer_norm, 3, amp_layer_norm(c, x[0], x[1], x[2], 1e-5f), param(3, S(2, 3, 8), 1),
          param(1, S(8), 1), param(1, S(8), 1))
GRAD_TEST(add_broadcast, 2, amp_add(c, x[0], x[1]), param(3, S(2, 3, 4), 1), param(2, S(3, 1), 1))
GRAD_TEST(sub_broadcast, 2, amp_sub(c, x[0], x[1]), param(3, S(2, 3, 4), 1), param(1, S(4), 1))
GRAD_TEST(mul_broadcast, 2, amp_mul(c, x[0], x[1]), param(3, S(2, 3, 4), 1),
          param(3, S(2, 1, 4), 1))
GRAD_TEST(div_broadcast, 2, amp_div(c, x[0], amp_add_scalar(c, amp_mul(c, x[1], x[1]), 1.0)),
          param(2, S(3, 4), 1), param(1, S(4), 1))
GRAD_TEST(scalar_ops, 1, amp_add_scalar(c, amp_mul_scalar(c, x[0], -2.5), 3.0),
          param(2, S(3, 4), 1))
GRAD_TEST(sum, 1, amp_sum(c, x[0]), param(2, S(3, 4), 1))
GRAD_TEST(mean, 1, amp_mean(c, x[0]), param(3, S(2, 3, 4), 1))
GRAD_TEST(mse_loss, 2, amp_mse_loss(c, x[0], x[1]), param(2, S(3, 4), 1), param(2, S(3, 4), 1))
GRAD_TEST(reshape_transpose, 1,
          amp_mul(c, amp_transpose(c, amp_reshape(c, x[0], 3, S(2, 3, -1)), 0, 2),
                  amp_transpose(c, amp_reshape(c, x[0], 3, S(2, 3, -1)), 0, 2)),
          param(2, S(6, 4), 1))
// The attention's path: split pieces reshaped into heads (views of the split input), transposed
// and multiplied, and the heads merged back by a reshape that must copy.
static amp_tensor_t *attention_heads(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *p[3];
    ck_assert_int_eq(amp_split(c, x[0], 4, -1, p, 3), 3);
    for (int i = 0; i < 3; i++)
        p[i] = amp_transpose(c, amp_reshape(c, p[i], 4, S(2, 3, 2, 2)), 1, 2); // (2, 2, 3, 2)
    amp_tensor_t *s = amp_matmul(c, p[0], amp_transpose(c, p[1], -2, -1));
    amp_tensor_t *y = amp_matmul(c, amp_tanh(c, s), p[2]);
    return amp_reshape(c, amp_transpose(c, y, 1, 2), 3, S(2, 3, 4));
}
GRAD_TEST(heads, 1, attention_heads(c, x), param(3, S(2, 3, 12), 1))
GRAD_TEST(permute_contiguous, 1, amp_contiguous(c, amp_permute(c, x[0], (int[]){2, 0, 1})),
          param(3, S(2, 3, 4), 1))

// An add hands its incoming gradient to both operands, which share it: a contribution to one of
// them by a node that runs before the other's (the mul's two, the split pieces' slices) must not
// write into the other's. (In this order: the add and the tanh are recorded around the mul.)
static amp_tensor_t *shared_grad_add_fn(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *h = amp_tanh(c, x[0]);
    amp_tensor_t *t = amp_tanh(c, h);
    amp_tensor_t *u = amp_mul(c, h, h);
    amp_tensor_t *v = amp_add(c, h, t);
    return amp_mul(c, v, u);
}

static amp_tensor_t *shared_grad_split_fn(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *h = amp_tanh(c, x[0]), *p[3];
    amp_tensor_t *t = amp_tanh(c, h);
    ck_assert_int_eq(amp_split(c, h, 2, -1, p, 3), 3);
    amp_tensor_t *s = amp_sum(c, amp_mul(c, p[0], p[1]));
    amp_tensor_t *v = amp_add(c, h, t);
    return amp_mul(c, v, s);
}

static amp_tensor_t *split_fn(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *p[3];
    ck_assert_int_eq(amp_split(c, x[0], 2, -1, p, 3), 3);
    return amp_add(c, amp_mul(c, p[0], p[1]), amp_mul_scalar(c, p[2], 3.0));
}

// Pieces one element wide (their slices of the gradient step by 3) and a split of dim 0.
static amp_tensor_t *split_narrow_fn(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *p[3], *q[2];
    ck_assert_int_eq(amp_split(c, x[0], 1, -1, p, 3), 3);
    ck_assert_int_eq(amp_split(c, amp_add(c, amp_mul(c, p[0], p[1]), p[2]), 1, 0, q, 2), 2);
    return amp_sub(c, amp_mul_scalar(c, q[0], 2.0), q[1]);
}

START_TEST(test_grad_shared_grad_add) {
    amp_tensor_t *xs[1] = {param(2, S(3, 4), 1)};
    gradcheck("shared_grad_add", shared_grad_add_fn, xs, 1, 1e-2f, 3e-2);
}
END_TEST

START_TEST(test_grad_shared_grad_split) {
    amp_tensor_t *xs[1] = {param(2, S(2, 6), 1)};
    gradcheck("shared_grad_split", shared_grad_split_fn, xs, 1, 1e-2f, 3e-2);
}
END_TEST

START_TEST(test_grad_split) {
    amp_tensor_t *xs[1] = {param(3, S(2, 3, 6), 1)};
    gradcheck("split", split_fn, xs, 1, 1e-2f, 2e-2);
    amp_tensor_t *ys[1] = {param(3, S(2, 4, 3), 1)};
    gradcheck("split into one-wide pieces", split_narrow_fn, ys, 1, 1e-2f, 2e-2);
}
END_TEST

static amp_tensor_t *labels;

static amp_tensor_t *cross_entropy_fn(amp_ctx_t *c, amp_tensor_t **x) {
    return amp_cross_entropy(c, x[0], labels);
}

static amp_tensor_t *nll_fn(amp_ctx_t *c, amp_tensor_t **x) {
    return amp_nll_loss(c, amp_log_softmax(c, x[0], 1), labels);
}

static amp_tensor_t *embedding_fn(amp_ctx_t *c, amp_tensor_t **x) {
    return amp_embedding(c, labels, x[0]);
}

static amp_tensor_t *masked_fn(amp_ctx_t *c, amp_tensor_t **x) {
    int32_t m[4 * 4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            m[i * 4 + j] = j > i;
    amp_tensor_t *mask = amp_tensor_from(c, AMP_DTYPE_I32, 2, S(4, 4), m);
    amp_tensor_t *y = amp_softmax(c, amp_masked_fill(c, x[0], mask, -INFINITY), -1);
    amp_tensor_free(mask);
    return y;
}

static amp_tensor_t *bce_fn(amp_ctx_t *c, amp_tensor_t **x) {
    amp_tensor_t *out;
    ck_assert_int_eq(amp_binary_cross_entropy(c, amp_sigmoid(c, x[0]), x[1], &out), AMP_OK);
    return out;
}

START_TEST(test_grad_losses) {
    int32_t y[4] = {2, 0, 4, 1};
    labels = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, S(4), y);
    amp_tensor_t *xs[1] = {param(2, S(4, 5), 1)};
    gradcheck("cross_entropy", cross_entropy_fn, xs, 1, 1e-2f, 2e-2);
    gradcheck("nll_loss", nll_fn, xs, 1, 1e-2f, 2e-2);
    amp_tensor_t *e[1] = {param(2, S(6, 3), 1)};
    gradcheck("embedding", embedding_fn, e, 1, 1e-2f, 2e-2);
    int32_t padded[4] = {2, -100, 4, 1}; // PyTorch's ignore_index: row 1 counts for nothing
    labels = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, S(4), padded);
    gradcheck("cross_entropy, a row ignored", cross_entropy_fn, xs, 1, 1e-2f, 2e-2);
    gradcheck("nll_loss, a row ignored", nll_fn, xs, 1, 1e-2f, 2e-2);
    amp_tensor_t *m[1] = {param(3, S(2, 4, 4), 1)};
    gradcheck("masked_softmax", masked_fn, m, 1, 1e-2f, 2e-2);
    float t[6] = {0, 1, 1, 0, 0.5f, 1};
    amp_tensor_t *b[2] = {param(2, S(2, 3), 1),
                          amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, S(2, 3), t)};
    gradcheck("binary_cross_entropy", bce_fn, b, 2, 1e-2f, 2e-2);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Forward values

// The shapes torch.matmul gives, and the values of the GEMMs on the operands broadcast by hand.
START_TEST(test_matmul_broadcasts_as_torch_does) {
    float a[24], b[40];
    for (int i = 0; i < 24; i++)
        a[i] = (float)(i % 7) - 3;
    for (int i = 0; i < 40; i++)
        b[i] = (float)(i % 5) - 2;
    // (2, 1, 3, 4) @ (3, 4, 2) -> (2, 3, 3, 2): each batch (i, j) is a[i] @ b[j]
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 4, S(2, 1, 3, 4), a);
    amp_tensor_t *w = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 3, S(3, 4, 2), b);
    amp_tensor_t *y = amp_matmul(ctx, x, w);
    ck_assert_int_eq(amp_tensor_ndim(y), 4);
    const int64_t dims[4] = {2, 3, 3, 2};
    for (int d = 0; d < 4; d++)
        ck_assert_int_eq(amp_tensor_dim(y, d), dims[d]);
    float got[36];
    amp_tensor_read_f32(y, got);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int m = 0; m < 3; m++)
                for (int n = 0; n < 2; n++) {
                    float want = 0;
                    for (int k = 0; k < 4; k++)
                        want += a[i * 12 + m * 4 + k] * b[j * 8 + k * 2 + n];
                    ck_assert_float_eq(got[((i * 3 + j) * 3 + m) * 2 + n], want);
                }
    // 1-D operands: (4,) @ (3, 4, 2) -> (3, 2); (2, 1, 3, 4) @ (4,) -> (2, 1, 3); (4,) @ (4,) -> ()
    amp_tensor_t *v = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(4), a);
    y = amp_matmul(ctx, v, w);
    ck_assert_int_eq(amp_tensor_ndim(y), 2);
    ck_assert_int_eq(amp_tensor_dim(y, 0), 3);
    ck_assert_int_eq(amp_tensor_dim(y, 1), 2);
    amp_tensor_read_f32(y, got);
    for (int j = 0; j < 3; j++)
        for (int n = 0; n < 2; n++) {
            float want = 0;
            for (int k = 0; k < 4; k++)
                want += a[k] * b[j * 8 + k * 2 + n];
            ck_assert_float_eq(got[j * 2 + n], want);
        }
    y = amp_matmul(ctx, x, v);
    ck_assert_int_eq(amp_tensor_ndim(y), 3);
    ck_assert_int_eq(amp_tensor_dim(y, 2), 3);
    y = amp_matmul(ctx, v, v);
    ck_assert_int_eq(amp_tensor_ndim(y), 0);
    ck_assert_float_eq(amp_tensor_item(y), 9 + 4 + 1 + 0); // -3, -2, -1, 0 squared
}
END_TEST

START_TEST(test_matmul_batch_dims_that_do_not_broadcast_abort) {
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 3, S(2, 3, 4));
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 3, S(3, 4, 5));
    test_expect_abort("(matmul: the batch dims of (2, 3, 4) and (3, 4, 5) cannot be broadcast "
                      "together)");
    amp_matmul(ctx, x, w);
}
END_TEST

START_TEST(test_linear_matches_naive) {
    amp_tensor_t *x = param(2, S(3, 4), 1), *w = param(2, S(2, 4), 1), *b = param(1, S(2), 1);
    float xv[12], wv[8], bv[2], yv[6];
    amp_tensor_read_f32(x, xv);
    amp_tensor_read_f32(w, wv);
    amp_tensor_read_f32(b, bv);
    amp_tensor_read_f32(amp_linear(ctx, x, w, b), yv);
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 2; o++) {
            float acc = bv[o];
            for (int k = 0; k < 4; k++)
                acc += xv[i * 4 + k] * wv[o * 4 + k];
            ck_assert_close(yv[i * 2 + o], acc, 1e-5, 1e-5);
        }
}
END_TEST

// No input features (k = 0): y is the bias on every row, the bias gradient counts the rows.
START_TEST(test_linear_no_input_features) {
    amp_tensor_t *x = param(2, S(3, 0), 1), *w = param(2, S(2, 0), 1), *b = param(1, S(2), 1);
    float bv[2], yv[6], gb[2];
    amp_tensor_read_f32(b, bv);
    amp_tensor_t *y = amp_linear(ctx, x, w, b);
    amp_tensor_read_f32(y, yv);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(yv[i], bv[i % 2]);
    amp_backward(ctx, amp_sum(ctx, y));
    amp_tensor_read_f32(amp_tensor_grad(b), gb);
    ck_assert_float_eq(gb[0], 3.0f);
    ck_assert_float_eq(gb[1], 3.0f);
}
END_TEST

START_TEST(test_softmax_and_layer_norm_values) {
    amp_tensor_t *x = param(2, S(4, 8), 3);
    float p[32], l[32];
    amp_tensor_read_f32(amp_softmax(ctx, x, -1), p);
    amp_tensor_read_f32(amp_layer_norm(ctx, x, NULL, NULL, 1e-5f), l);
    for (int r = 0; r < 4; r++) {
        double s = 0, m = 0, v = 0;
        for (int j = 0; j < 8; j++)
            s += p[r * 8 + j], m += l[r * 8 + j];
        m /= 8;
        for (int j = 0; j < 8; j++)
            v += (l[r * 8 + j] - m) * (l[r * 8 + j] - m);
        ck_assert_close(s, 1.0, 1e-6, 0);
        ck_assert_close(m, 0.0, 1e-6, 0);
        ck_assert_close(v / 8, 1.0, 1e-3, 0);
    }
}
END_TEST

// An f32 (or bf16) 0-dim operand beside an f16 tensor: the result is f16 and the 0-dim value is
// rounded to f16 before the op, as TensorIterator casts operands to the common dtype (0.1 was
// used unrounded: -0.0999755859375 + 0.1 gave 0x019a where PyTorch gives 0); its gradient still
// reaches it, in f32.
START_TEST(test_a_0dim_operand_is_rounded_to_the_result_dtype) {
    amp_tensor_t *a = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(3),
                                          (float[]){1.0f, 1024.0f, -0.0999755859375f});
    amp_tensor_t *b = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){0.1f});
    amp_tensor_t *bb = amp_tensor_from_f32(ctx, AMP_DTYPE_BF16, 0, NULL, (float[]){0.1f});
    amp_tensor_set_requires_grad(b, true);
    amp_tensor_t *y = amp_add(ctx, a, b);
    ck_assert_int_eq(amp_tensor_dtype(y), AMP_DTYPE_F16);
    uint16_t bits[3];
    amp_tensor_read(y, bits);
    ck_assert_msg(bits[0] == 0x3c66 && bits[1] == 0x6400 && bits[2] == 0x0000,
                  "add: %04x %04x %04x, torch 3c66 6400 0000", bits[0], bits[1], bits[2]);
    amp_tensor_read(amp_sub(ctx, a, bb), bits); // bf16 0.1 (0x3dcd) is 0.10009765625 in f16
    ck_assert_msg(bits[0] == 0x3b33 && bits[1] == 0x6400 && bits[2] == 0xb267,
                  "sub: %04x %04x %04x, torch 3b33 6400 b267", bits[0], bits[1], bits[2]);
    amp_backward(ctx, amp_sum(ctx, y));
    ck_assert_int_eq(amp_tensor_dtype(amp_tensor_grad(b)), AMP_DTYPE_F32);
    ck_assert_float_eq(amp_tensor_item(amp_tensor_grad(b)), 3.0f);
    // a dimensioned wider operand is not rounded first: BCE's backward computes p - t of an
    // f16 p and an f32 t in f32 and rounds the result (rounding t first gave a gradient of 0)
    amp_tensor_t *p = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(1), (float[]){0.5f});
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(1), (float[]){0.5001f});
    amp_tensor_set_requires_grad(p, true);
    amp_tensor_t *loss;
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &loss), AMP_OK);
    amp_backward(ctx, loss);
    ck_assert_float_lt(amp_tensor_item(amp_tensor_grad(p)), 0.0f);
}
END_TEST

// log1p's gradient in f16 and bf16 is PyTorch's grad / (self + 1), self + 1 a tensor of self's
// dtype: rounded before the division (it was divided by the unrounded f32 sum, 1 ulp off).
START_TEST(test_log1p_backward_rounds_self_plus_one) {
    const struct {
        amp_dtype t;
        float x;
        uint16_t want; // torch 1.13's gradient of log1p(x).sum()
    } cases[] = {{AMP_DTYPE_F16, 0.3f, 0x3a28}, {AMP_DTYPE_BF16, 0.0999755859375f, 0x3f68}};
    for (int k = 0; k < 2; k++) {
        amp_tensor_t *x = amp_tensor_from_f32(ctx, cases[k].t, 1, S(1), &cases[k].x);
        amp_tensor_set_requires_grad(x, true);
        amp_backward(ctx, amp_sum(ctx, amp_log1p(ctx, x)));
        uint16_t got;
        amp_tensor_read(amp_tensor_grad(x), &got);
        ck_assert_msg(got == cases[k].want, "%s: 0x%04x, torch 0x%04x", amp_dtype_name(cases[k].t),
                      got, cases[k].want);
    }
}
END_TEST

// A 0-dim tensor's softmax is 1 and its log_softmax 0, with a zero gradient, as in PyTorch (dim
// 0 or -1); another dim aborts naming it.
START_TEST(test_softmax_of_a_0dim_tensor) {
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){3.5f});
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_t *p = amp_softmax(ctx, x, 0), *l = amp_log_softmax(ctx, x, -1);
    ck_assert_int_eq(amp_tensor_ndim(p), 0);
    ck_assert_int_eq(amp_tensor_ndim(l), 0);
    ck_assert_float_eq(amp_tensor_item(p), 1.0f);
    ck_assert_float_eq(amp_tensor_item(l), 0.0f);
    amp_backward(ctx, amp_add(ctx, amp_mul_scalar(ctx, p, 2.0f), l));
    ck_assert_float_eq(amp_tensor_item(amp_tensor_grad(x)), 0.0f);
}
END_TEST

START_TEST(test_softmax_of_a_0dim_tensor_at_dim_1_aborts) {
    test_expect_abort("(softmax dim 1 out of range for a 0-dim tensor)");
    amp_softmax(ctx, amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){1}), 1);
}
END_TEST

START_TEST(test_layer_norm_of_a_0dim_tensor_aborts) {
    test_expect_abort("(layer_norm normalises the last dim: a 0-dim tensor has none)");
    amp_layer_norm(ctx, amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){1}), NULL, NULL,
                   1e-5f);
}
END_TEST

// A fully masked row gives NaN like PyTorch; a partly masked one is exact zeros where masked.
START_TEST(test_masked_softmax_rows) {
    float v[6] = {1, 2, 3, 4, 5, 6};
    int32_t m[6] = {0, 1, 1, 1, 1, 1};
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, S(2, 3), v);
    amp_tensor_t *mask = amp_tensor_from(ctx, AMP_DTYPE_I32, 2, S(2, 3), m);
    float p[6];
    amp_tensor_read_f32(amp_softmax(ctx, amp_masked_fill(ctx, x, mask, -INFINITY), -1), p);
    ck_assert_float_eq(p[0], 1.0f);
    ck_assert_float_eq(p[1], 0.0f);
    ck_assert(isnan(p[3]) && isnan(p[5]));
}
END_TEST

START_TEST(test_dropout_seeded) {
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, S(1000));
    float ones[1000], a[1000];
    for (int i = 0; i < 1000; i++)
        ones[i] = 1;
    amp_tensor_write_f32(x, ones);
    amp_tensor_read_f32(amp_dropout(ctx, x, 0.25f, true), a);
    int zeros = 0;
    for (int i = 0; i < 1000; i++) {
        ck_assert(a[i] == 0.0f || fabsf(a[i] - 1.0f / 0.75f) < 1e-6f);
        zeros += a[i] == 0.0f;
    }
    ck_assert_int_gt(zeros, 180);
    ck_assert_int_lt(zeros, 320);
    amp_tensor_read_f32(amp_dropout(ctx, x, 0.25f, false), a);
    ck_assert_float_eq(a[17], 1.0f);
}
END_TEST

START_TEST(test_grad_accumulates_and_zero_grad) {
    amp_tensor_t *w = param(1, S(3), 1);
    for (int k = 0; k < 2; k++) {
        amp_backward(ctx, amp_sum(ctx, amp_mul_scalar(ctx, w, 2.0)));
        amp_ctx_reset(ctx);
    }
    float g[3];
    amp_tensor_read_f32(amp_tensor_grad(w), g);
    ck_assert_float_eq(g[0], 4.0f);
    amp_tensor_zero_grad(w);
    ck_assert_ptr_null(amp_tensor_grad(w));
}
END_TEST

// An f32 softmax or layer_norm output cast to f16 for an f16 op (the attention's probabilities
// before their matmul, a layer_norm's output before a linear): the cast's backward hands its f16
// gradient on as the output's first gradient, which the op's backward reads as it is; a second
// contribution from an f32 consumer, recorded before or after, is added in f32. The input's
// gradient must be the bits of the same graph without the cast (the f16 factor w as f32).
static amp_tensor_t *narrow_op(int op, amp_tensor_t *x) {
    return op == 0 ? amp_softmax(ctx, x, -1) : amp_layer_norm(ctx, x, NULL, NULL, 1e-5f);
}

START_TEST(test_ops_read_a_narrower_gradient) {
    enum { R = 3, C = 8, N = R * C };
    float wv[N], vv[N], xv[N];
    for (int i = 0; i < N; i++) {
        wv[i] = (float)(i % 7) * 0.25f - 0.75f; // exact in f16
        vv[i] = 0.1f * (float)(i % 5) - 0.2f;
    }
    amp_tensor_t *x = param(2, S(R, C), 1);
    amp_tensor_read_f32(x, xv);
    amp_tensor_t *w16 = amp_tensor_new(ctx, AMP_DTYPE_F16, 2, S(R, C));
    amp_tensor_t *w32 = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, S(R, C));
    amp_tensor_t *v = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, S(R, C));
    amp_tensor_write_f32(w16, wv);
    amp_tensor_write_f32(w32, wv);
    amp_tensor_write_f32(v, vv);
    for (int op = 0; op < 2; op++)
        for (int order = 0; order < 3; order++) { // the f32 consumer: none, recorded first, last
            float got[2][N];
            for (int cast = 0; cast < 2; cast++) {
                amp_tensor_zero_grad(x);
                amp_tensor_t *y = narrow_op(op, x), *loss = NULL;
                ck_assert_int_eq(amp_tensor_dtype(y), AMP_DTYPE_F32);
                if (order == 1) loss = amp_sum(ctx, amp_mul(ctx, y, v));
                amp_tensor_t *l =
                    cast
                        ? amp_sum(ctx, amp_to(ctx, amp_mul(ctx, amp_to(ctx, y, AMP_DTYPE_F16), w16),
                                              AMP_DTYPE_F32))
                        : amp_sum(ctx, amp_mul(ctx, y, w32));
                loss = loss ? amp_add(ctx, loss, l) : l;
                if (order == 2) loss = amp_add(ctx, loss, amp_sum(ctx, amp_mul(ctx, y, v)));
                amp_backward(ctx, loss);
                amp_ctx_reset(ctx);
                amp_tensor_read_f32(amp_tensor_grad(x), got[cast]);
            }
            for (int i = 0; i < N; i++)
                ck_assert_msg(got[1][i] == got[0][i], "%s, order %d: dx[%d] = %.9g, want %.9g",
                              op ? "layer_norm" : "softmax", order, i, got[1][i], got[0][i]);
        }
    amp_tensor_free(x);
    amp_tensor_free(w16);
    amp_tensor_free(w32);
    amp_tensor_free(v);
}
END_TEST

START_TEST(test_half_storage_rounds) {
    float v[3] = {0.1f, 65520.0f, 1e-8f};
    amp_tensor_t *h = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(3), v);
    uint16_t bits[3];
    amp_tensor_read(h, bits);
    ck_assert_uint_eq(bits[0], 0x2E66);
    ck_assert_uint_eq(bits[1], 0x7C00);
    ck_assert_uint_eq(bits[2], 0x0000);
    // f16 matmul accumulates in f32 and rounds once: 2048 + 1 + 1 is 2050 (not 2048)
    float a[3] = {2048, 1, 1}, b[3] = {1, 1, 1};
    amp_tensor_t *A = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 2, S(1, 3), a);
    amp_tensor_t *B = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 2, S(3, 1), b);
    ck_assert_float_eq(amp_tensor_item(amp_mm(ctx, A, B)), 2050.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// amp_tensor_drop: what no backward reads goes at once, what a backward reads once the last such
// backward has run; the gradients stay the same

// An attention-like step under fp16 autocast: scores = x @ w, scaled, causally masked, softmax,
// then loss = sum(att * r); with `drop`, the scores, the scaled and the masked scores are dropped
// as soon as the next op has run (no backward reads them) and so is the softmax's output (its
// backward and the mul's read it: kept until they have run). Writes x's and w's gradients to gx,
// gw and reports which storage was freed before the backward in freed[0..3], after it in
// freed[4..7].
static void attention_step(bool drop, float *gx, float *gw, bool freed[8]) {
    amp_ctx_t *c;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 11, &c), AMP_OK);
    amp_tensor_t *x = randn_in(c, 2, S(6, 8), 1.0f, true);
    amp_tensor_t *w = randn_in(c, 2, S(8, 6), 1.0f, true);
    amp_tensor_t *r = randn_in(c, 2, S(6, 6), 1.0f, false);
    int32_t mask[36];
    for (int i = 0; i < 36; i++)
        mask[i] = i % 6 > i / 6;
    amp_tensor_t *m = amp_tensor_from(c, AMP_DTYPE_I32, 2, S(6, 6), mask);
    amp_autocast_begin(c, true, AMP_DTYPE_F16, true);
    amp_tensor_t *t[4];
    t[0] = amp_matmul(c, x, w);
    t[1] = amp_mul_scalar(c, t[0], 0.125);
    if (drop) amp_tensor_drop(t[0]);
    t[2] = amp_masked_fill(c, t[1], m, -INFINITY);
    if (drop) amp_tensor_drop(t[1]);
    t[3] = amp_softmax(c, t[2], -1);
    if (drop) {
        amp_tensor_drop(t[2]);
        amp_tensor_drop(t[3]);
    }
    amp_autocast_end(c);
    amp_tensor_t *loss = amp_sum(c, amp_mul(c, t[3], r)); // a reader recorded after the drop
    for (int i = 0; i < 4; i++)
        freed[i] = t[i]->buf->data == NULL;
    amp_backward(c, loss);
    for (int i = 0; i < 4; i++)
        freed[4 + i] = t[i]->buf->data == NULL;
    amp_tensor_read_f32(amp_tensor_grad(x), gx);
    amp_tensor_read_f32(amp_tensor_grad(w), gw);
    amp_ctx_free(c);
}

START_TEST(test_drop_frees_what_no_backward_reads) {
    float gx[48], gw[48], hx[48], hw[48];
    bool freed[8], kept[8]; // before the backward, after it
    attention_step(false, gx, gw, kept);
    attention_step(true, hx, hw, freed);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(!kept[i], "tensor %d freed without a drop", i % 4);
    ck_assert_msg(freed[0] && freed[1] && freed[2], "scores, scaled, masked: %d %d %d", freed[0],
                  freed[1], freed[2]);
    ck_assert_msg(!freed[3], "the softmax's output was freed, its backward reads it");
    ck_assert_msg(freed[7], "the softmax's output was kept after the backward that read it");
    ck_assert_mem_eq(gx, hx, sizeof gx);
    ck_assert_mem_eq(gw, hw, sizeof gw);
}
END_TEST

// amp_ctx_memory: tensor storage held now and at most, each counted rounded up to 512 bytes,
// down again when a persistent tensor is freed, a scratch one dropped or the context reset.
START_TEST(test_ctx_memory_counts_storage) {
    amp_ctx_t *c;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &c), AMP_OK);
    size_t now = 1, peak = 1;
    amp_ctx_memory(c, &now, &peak);
    ck_assert_uint_eq(now, 0);
    ck_assert_uint_eq(peak, 0);
    amp_tensor_t *a = amp_tensor_new(c, AMP_DTYPE_F32, 2, S(10, 10)); // 400 bytes: 512
    amp_tensor_t *b = amp_tensor_new(c, AMP_DTYPE_F16, 1, S(1000));   // 2000: 2048
    amp_tensor_t *s = amp_add(c, a, a);                               // scratch, 512
    amp_mul_scalar(c, s, 2.0);                                        // scratch, 512
    amp_ctx_memory(c, &now, &peak);
    ck_assert_uint_eq(now, 3584);
    ck_assert_uint_eq(peak, 3584);
    amp_tensor_drop(s); // no backward reads it: gone at once
    amp_tensor_free(b);
    amp_ctx_memory(c, &now, NULL);
    ck_assert_uint_eq(now, 1024);
    amp_ctx_reset(c);
    amp_ctx_memory(c, &now, &peak);
    ck_assert_uint_eq(now, 512);
    ck_assert_uint_eq(peak, 3584);
    amp_tensor_t *big = amp_tensor_new(c, AMP_DTYPE_BF16, 2, S(64, 64)); // 8192
    amp_ctx_memory(c, &now, &peak);
    ck_assert_uint_eq(now, 8704);
    ck_assert_uint_eq(peak, 8704);
    amp_tensor_free(big);
    amp_tensor_free(a);
    amp_ctx_memory(c, &now, &peak);
    ck_assert_uint_eq(now, 0);
    ck_assert_uint_eq(peak, 8704);
    amp_ctx_free(c);
}
END_TEST

// y holds x's elements in x's row-major order (both read as such).
static void expect_same_order(const amp_tensor_t *x, const amp_tensor_t *y, const char *what) {
    const int64_t n = amp_tensor_numel(x);
    ck_assert_int_eq(amp_tensor_numel(y), n);
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    amp_tensor_read_f32(x, a);
    amp_tensor_read_f32(y, b);
    ck_assert_msg(memcmp(a, b, (size_t)n * sizeof *a) == 0, "%s: values out of order", what);
    free(a);
    free(b);
}

// reshape gives a view wherever PyTorch's does (its computeStride) and a copy elsewhere.
static void expect_reshape(amp_tensor_t *x, int ndim, const int64_t *shape, bool view,
                           const int64_t *stride) {
    amp_tensor_t *y = amp_reshape(ctx, x, ndim, shape);
    ck_assert_int_eq(y->buf == x->buf, view);
    for (int i = 0; view && i < ndim; i++)
        ck_assert_msg(y->stride[i] == stride[i], "dim %d: stride %lld, PyTorch's %lld", i,
                      (long long)y->stride[i], (long long)stride[i]);
    expect_same_order(x, y, "reshape");
}

START_TEST(test_reshape_views_where_pytorch_does) {
    amp_tensor_t *x = param(3, S(2, 3, 12), 1), *p[3];
    amp_split(ctx, x, 4, -1, p, 3); // p[1]: (2, 3, 4), strides (36, 12, 1), offset 4
    expect_reshape(p[1], 4, S(2, 3, 2, 2), true, S(36, 12, 2, 1));
    expect_reshape(p[1], 2, S(6, 4), true, S(12, 1));
    expect_reshape(p[1], 5, S(1, 2, 3, 1, 4), true, S(72, 36, 12, 4, 1));
    expect_reshape(p[1], 2, S(2, 12), false, NULL); // rows 12 apart, not 4
    amp_tensor_t *t = amp_transpose(ctx, amp_reshape(ctx, p[1], 4, S(2, 3, 2, 2)), 1, 2);
    expect_reshape(t, 3, S(2, 2, 6), false, NULL);
    expect_reshape(t, 4, S(2, 2, 3, 2), true, S(36, 2, 12, 1));
    amp_tensor_t *w = amp_transpose(ctx, param(2, S(4, 5), 1), 0, 1); // (5, 4), strides (1, 5)
    expect_reshape(w, 3, S(5, 2, 2), true, S(1, 10, 5));
    expect_reshape(w, 1, S(20), false, NULL);
    amp_ctx_reset(ctx);
}
END_TEST

// A number in [0, n) from the generator state *r (a 64-bit LCG, its high bits).
static int below(uint64_t *r, int n) {
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((*r >> 33) % (uint64_t)n);
}

// Random permuted and sliced tensors reshaped into random shapes of as many elements: the
// result, view or copy, holds x's elements in x's row-major order.
START_TEST(test_reshape_random_layouts) {
    uint64_t r = 12345;
    int views = 0, copies = 0;
    for (int trial = 0; trial < 400; trial++) {
        const int nd = 2 + below(&r, 3);
        int64_t shape[4], n = 1;
        for (int d = 0; d < nd; d++)
            n *= shape[d] = 1 + below(&r, 4);
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)i;
        amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, nd, shape, v);
        free(v);
        int perm[4] = {0, 1, 2, 3};
        for (int d = nd - 1; d > 0; d--) { // a random permutation
            const int k = below(&r, d + 1), t = perm[d];
            perm[d] = perm[k];
            perm[k] = t;
        }
        x = amp_permute(ctx, x, perm);
        const int sd = below(&r, nd);
        amp_tensor_t *piece[2];
        if (x->shape[sd] > 1 && amp_split(ctx, x, x->shape[sd] - 1, sd, piece, 2) == 2)
            x = piece[trial % 2]; // a slice of it, either piece
        // a random shape of as many elements: up to three prime factors, the rest, shuffled
        int64_t to[4], rest = amp_tensor_numel(x);
        int tn = 0;
        for (int64_t f = 2; rest > 1 && tn < 3; f++)
            while (rest % f == 0 && tn < 3) {
                to[tn++] = f;
                rest /= f;
            }
        to[tn++] = rest;
        for (int k = 0; k < tn; k++) {
            const int j = below(&r, tn);
            const int64_t t = to[k];
            to[k] = to[j];
            to[j] = t;
        }
        amp_tensor_t *y = amp_reshape(ctx, x, tn, to);
        char what[32];
        snprintf(what, sizeof what, "trial %d", trial);
        expect_same_order(x, y, what);
        if (y->buf == x->buf)
            views++;
        else
            copies++;
        amp_ctx_reset(ctx);
    }
    ck_assert_msg(views > 50 && copies > 50, "views %d, copies %d: both paths exercised", views,
                  copies);
}
END_TEST

START_TEST(test_drop_keeps_what_a_backward_reads) {
    amp_tensor_t *x = param(2, S(4, 5), 1), *w = param(2, S(5, 3), 1);
    amp_tensor_t *h = amp_matmul(ctx, x, w);
    amp_tensor_t *g = amp_gelu(ctx, h, false); // GELU's backward reads its input
    amp_tensor_drop(h);
    ck_assert_ptr_nonnull(h->buf->data);
    amp_tensor_t *v = amp_reshape(ctx, g, 1, S(12)); // a view: dropping it drops g's storage
    amp_tensor_t *y = amp_mul_scalar(ctx, v, 3.0);
    amp_tensor_drop(v);
    ck_assert_ptr_null(g->buf->data);
    amp_tensor_drop(v); // a second call, NULL, a parameter: left alone
    amp_tensor_drop(NULL);
    amp_tensor_drop(x);
    ck_assert_ptr_nonnull(x->buf->data);
    amp_backward(ctx, amp_sum(ctx, y));
    amp_tensor_drop(amp_tensor_grad(w)); // a gradient: left alone
    ck_assert_ptr_nonnull(amp_tensor_grad(w)->buf->data);
    amp_ctx_reset(ctx);
}
END_TEST

// conv2d -> relu -> max_pool2d: the convolution's output goes once ReLU has run (ReLU's backward
// reads its output, max_pool2d's its argmax), the pooled map that the next convolution reads
// stays until that convolution's backward has run (it makes its columns again from it); the
// gradients are the same as without drops.
static void conv_step(bool drop, float *gw, bool *y_freed, bool p_freed[2]) {
    amp_ctx_t *c;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 5, &c), AMP_OK);
    amp_tensor_t *x = randn_in(c, 4, S(2, 3, 8, 8), 1.0f, false);
    amp_tensor_t *w1 = randn_in(c, 4, S(4, 3, 3, 3), 0.5f, true);
    amp_tensor_t *w2 = randn_in(c, 4, S(2, 4, 3, 3), 0.5f, true);
    amp_tensor_t *y = amp_conv2d(c, x, w1, NULL, 1, 1);
    amp_tensor_t *r = amp_relu(c, y);
    if (drop) amp_tensor_drop(y);
    amp_tensor_t *p = amp_max_pool2d(c, r, 2, 2);
    amp_tensor_t *z = amp_conv2d(c, p, w2, NULL, 1, 1);
    if (drop) amp_tensor_drop(p);
    *y_freed = y->buf->data == NULL;
    p_freed[0] = p->buf->data == NULL;
    amp_backward(c, amp_sum(c, amp_mul(c, z, z)));
    p_freed[1] = p->buf->data == NULL;
    amp_tensor_read_f32(amp_tensor_grad(w1), gw);
    amp_ctx_free(c);
}

START_TEST(test_drop_conv_relu_pool) {
    float gw[108], hw[108];
    bool y_freed, p_freed[2]; // before the backward, after it
    conv_step(false, gw, &y_freed, p_freed);
    ck_assert(!y_freed && !p_freed[0] && !p_freed[1]);
    conv_step(true, hw, &y_freed, p_freed);
    ck_assert_msg(y_freed, "the convolution's output was kept");
    ck_assert_msg(!p_freed[0], "the next convolution's input was freed before its backward");
    ck_assert_msg(p_freed[1], "the next convolution's input was kept after its backward");
    ck_assert_mem_eq(gw, hw, sizeof gw);
}
END_TEST

// A transformer's input side under fp16 autocast: e = embedding(idx), x = e + pos, h =
// layer_norm(x), y = linear(h) (f16), d = dropout(y). With `drop`, e, h and y are dropped as soon
// as the next op has run: the add, layer_norm's backward (it reads its input and its row
// statistics, not its output), the linear (it keeps its own f16 copy of h) and dropout's backward
// (its mask only) read none of them, so they go at once; x, which layer_norm's backward reads,
// stays until that backward has run. Writes the embedding's and the linear weight's gradients.
static void embed_norm_step(bool drop, float *gemb, float *gw, bool freed[4]) {
    amp_ctx_t *c;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 3, &c), AMP_OK);
    amp_tensor_t *emb = randn_in(c, 2, S(10, 8), 1.0f, true);
    amp_tensor_t *pos = randn_in(c, 2, S(4, 8), 1.0f, true);
    amp_tensor_t *w = randn_in(c, 2, S(6, 8), 1.0f, true);
    amp_tensor_t *r = randn_in(c, 2, S(4, 6), 1.0f, false);
    amp_tensor_t *idx = amp_tensor_from(c, AMP_DTYPE_I64, 1, S(4), (int64_t[]){3, 1, 4, 1});
    amp_autocast_begin(c, true, AMP_DTYPE_F16, true);
    amp_tensor_t *e = amp_embedding(c, idx, emb);
    amp_tensor_t *x = amp_add(c, e, pos);
    if (drop) amp_tensor_drop(e);
    amp_tensor_t *h = amp_layer_norm(c, x, NULL, NULL, 1e-5f);
    amp_tensor_t *y = amp_linear(c, h, w, NULL);
    if (drop) {
        amp_tensor_drop(x);
        amp_tensor_drop(h);
    }
    amp_tensor_t *d = amp_dropout(c, y, 0.5f, true);
    if (drop) amp_tensor_drop(y);
    amp_autocast_end(c);
    amp_tensor_t *t[] = {e, h, y, x};
    for (int i = 0; i < 4; i++)
        freed[i] = t[i]->buf->data == NULL;
    amp_backward(c, amp_sum(c, amp_mul(c, d, r)));
    ck_assert_msg(!drop || x->buf->data == NULL, "layer_norm's input was kept after its backward");
    amp_tensor_read_f32(amp_tensor_grad(emb), gemb);
    amp_tensor_read_f32(amp_tensor_grad(w), gw);
    amp_ctx_free(c);
}

START_TEST(test_drop_embedding_layer_norm_dropout) {
    float ge[80], gw[48], he[80], hw[48];
    bool freed[4];
    embed_norm_step(false, ge, gw, freed);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(!freed[i], "tensor %d freed without a drop", i);
    embed_norm_step(true, he, hw, freed);
    ck_assert_msg(freed[0], "the embedding's output was kept (nothing reads it)");
    ck_assert_msg(freed[1], "layer_norm's output was kept (its backward reads its input)");
    ck_assert_msg(freed[2], "dropout's input was kept (its backward reads the mask)");
    ck_assert_msg(!freed[3], "layer_norm's input was freed before its backward");
    ck_assert_mem_eq(ge, he, sizeof ge);
    ck_assert_mem_eq(gw, hw, sizeof gw);
}
END_TEST

// conv2d with its columns made for a slice of the batch at a time (amp_conv_cols_max lowered to
// two images' f32 columns: the output and the input gradient in slices of 2, 2 and 1 images in
// f32, 3 and 2 in f16; the f32 weight gradient, whose slices hold the permuted dy too, image by
// image) against the whole batch at once: the output and the input gradient are the same bits, the
// f32 weight gradient (summed over the slices) the same within f32 rounding, a 16-bit weight
// gradient (not sliced) the same bits. Fills y (5x4x8x8), dx (5x3x8x8) and dw (4x3x3x3); counts the
// backend's im2col and col2im calls (the slices).
static const amp_backend_i *cpu_be;
static int n_im2col, n_col2im;
static void counted_im2col(void *bctx, const amp_conv_desc *d, amp_tensor_t *cols,
                           const amp_tensor_t *x) {
    n_im2col++;
    cpu_be->im2col(bctx, d, cols, x);
}
static void counted_col2im(void *bctx, const amp_conv_desc *d, amp_tensor_t *dx,
                           const amp_tensor_t *cols) {
    n_col2im++;
    cpu_be->col2im(bctx, d, dx, cols);
}

static void conv_slices_step(bool sliced, bool fp16, float *y, float *dx, float *dw) {
    const int64_t saved = amp_conv_cols_max;
    if (sliced) amp_conv_cols_max = 2 * 27 * 64 * 4;
    amp_ctx_t *c;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 9, &c), AMP_OK);
    static amp_backend_i counting;
    cpu_be = c->be;
    counting = *c->be;
    counting.im2col = counted_im2col;
    counting.col2im = counted_col2im;
    c->be = &counting;
    n_im2col = n_col2im = 0;
    amp_tensor_t *x = randn_in(c, 4, S(5, 3, 8, 8), 1.0f, true);
    amp_tensor_t *w = randn_in(c, 4, S(4, 3, 3, 3), 1.0f, true);
    amp_tensor_t *b = randn_in(c, 1, S(4), 1.0f, true);
    amp_tensor_t *r = randn_in(c, 4, S(5, 4, 8, 8), 1.0f, false);
    if (fp16) amp_autocast_begin(c, true, AMP_DTYPE_F16, true);
    amp_tensor_t *out = amp_conv2d(c, x, w, b, 1, 1);
    if (fp16) amp_autocast_end(c);
    amp_backward(c, amp_sum(c, amp_mul(c, out, r)));
    amp_tensor_read_f32(out, y);
    amp_tensor_read_f32(amp_tensor_grad(x), dx);
    amp_tensor_read_f32(amp_tensor_grad(w), dw);
    c->be = cpu_be;
    amp_ctx_free(c);
    amp_conv_cols_max = saved;
}

START_TEST(test_conv_columns_in_slices) {
    static float y[2][1280], dx[2][960], dw[2][108];
    for (int fp16 = 0; fp16 < 2; fp16++) {
        conv_slices_step(false, fp16, y[0], dx[0], dw[0]);
        ck_assert_int_eq(n_im2col, 2); // the output's columns, the weight gradient's
        ck_assert_int_eq(n_col2im, 1);
        conv_slices_step(true, fp16, y[1], dx[1], dw[1]);
        ck_assert_int_eq(n_im2col, fp16 ? 2 + 1 : 3 + 5); // f16: the weight gradient's unsliced
        ck_assert_int_eq(n_col2im, fp16 ? 2 : 3);
        ck_assert_mem_eq(y[0], y[1], sizeof y[0]);
        ck_assert_mem_eq(dx[0], dx[1], sizeof dx[0]);
        if (fp16)
            ck_assert_mem_eq(dw[0], dw[1], sizeof dw[0]);
        else // summed over the slices in another order
            for (int i = 0; i < 108; i++)
                ck_assert_float_eq_tol(dw[1][i], dw[0][i], 1e-5f * (1.0f + fabsf(dw[0][i])));
    }
}
END_TEST

START_TEST(test_reading_a_dropped_tensor_aborts) {
    amp_tensor_t *x = param(2, S(4, 5), 1);
    amp_tensor_t *y = amp_mul_scalar(ctx, x, 2.0);
    amp_tensor_drop(y);
    amp_relu(ctx, y);
}
END_TEST

// A dropped tensor that went after its backward readers ran: a second backward through one of
// them aborts (PyTorch: "Trying to backward through the graph a second time").
START_TEST(test_second_backward_through_a_dropped_tensor_aborts) {
    amp_tensor_t *x = param(2, S(4, 5), 1);
    amp_tensor_t *h = amp_tanh(ctx, x); // tanh's backward reads its output
    amp_tensor_t *twice = amp_mul_scalar(ctx, h, 2.0);
    amp_tensor_drop(h);
    amp_backward(ctx, amp_sum(ctx, h));
    ck_assert_ptr_null(h->buf->data);
    amp_backward(ctx, amp_sum(ctx, twice));
}
END_TEST

// A second backward through a node whose backward read something (exp reads its output) aborts
// with PyTorch's "Trying to backward through the graph a second time" instead of counting the
// gradients twice...
START_TEST(test_second_backward_through_the_graph_aborts) {
    amp_tensor_t *x = param(1, S(3), 1);
    amp_tensor_t *loss = amp_sum(ctx, amp_exp(ctx, x));
    amp_backward(ctx, loss);
    amp_backward(ctx, loss);
}
END_TEST

// ... while nodes that saved nothing (add, sum) are gone through again and accumulate, as
// PyTorch's AddBackward and SumBackward are.
START_TEST(test_second_backward_through_what_saved_nothing_accumulates) {
    amp_tensor_t *a = param(1, S(3), 1), *b = param(1, S(3), 1);
    amp_tensor_t *loss = amp_sum(ctx, amp_add(ctx, a, b));
    amp_backward(ctx, loss);
    amp_backward(ctx, loss);
    float g[3];
    amp_tensor_read_f32(amp_tensor_grad(a), g);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(g[i], 2.0f);
}
END_TEST

// Host copies of a dropped tensor, its statistics, and the ops that read an operand without
// amp_dense (add's broadcast views, a cast) abort naming the reader (they read freed memory).
static const char *const dropped_readers[] = {"amp_tensor_item reads",
                                              "amp_tensor_read_f32 reads",
                                              "amp_tensor_read reads",
                                              "amp_tensor_write_f32 writes",
                                              "amp_tensor_write writes",
                                              "amp_tensor_stats reads",
                                              "add reads",
                                              "a cast (amp_to, or autocast's) reads"};

START_TEST(test_host_copy_of_a_dropped_tensor_aborts) {
    amp_tensor_t *x = param(1, S(1), 1), *y = amp_mul_scalar(ctx, x, 2.0);
    amp_tensor_drop(y); // (a scaling's backward reads nothing: it goes at once)
    ck_assert_ptr_null(y->buf->data);
    char words[160];
    snprintf(words, sizeof words, "(%s a tensor whose storage was dropped with amp_tensor_drop)",
             dropped_readers[_i]);
    test_expect_abort(words);
    float v = 0;
    amp_stats st;
    switch (_i) {
    case 0:
        amp_tensor_item(y);
        break;
    case 1:
        amp_tensor_read_f32(y, &v);
        break;
    case 2:
        amp_tensor_read(y, &v);
        break;
    case 3:
        amp_tensor_write_f32(y, &v);
        break;
    case 4:
        amp_tensor_write(y, &v);
        break;
    case 5:
        amp_tensor_stats(y, AMP_DTYPE_F16, &st);
        break;
    case 6:
        amp_add(ctx, y, x);
        break;
    case 7:
        amp_to(ctx, y, AMP_DTYPE_F16);
        break;
    }
}
END_TEST

// An op's output that requires grad cannot be told not to, as in PyTorch (it cut the gradient
// path silently).
START_TEST(test_requires_grad_off_on_an_op_output_aborts) {
    amp_tensor_t *x = param(1, S(1), 1), *h = amp_mul_scalar(ctx, x, 2.0);
    test_expect_abort("(you can only change requires_grad flags of leaf variables");
    amp_tensor_set_requires_grad(h, false);
}
END_TEST

// The same for a tensor a backward still reads, whose storage is kept for it: the caller said it
// is done with it (its host copies went through).
START_TEST(test_host_copy_of_a_tensor_dropped_for_later_aborts) {
    amp_tensor_t *x = param(1, S(1), 1), *h = amp_mul_scalar(ctx, x, 2.0);
    amp_mul(ctx, h, h); // (its backward reads h)
    amp_tensor_drop(h);
    ck_assert_ptr_nonnull(h->buf->data);
    char words[160];
    snprintf(words, sizeof words, "(%s a tensor whose storage was dropped with amp_tensor_drop)",
             dropped_readers[_i]);
    test_expect_abort(words);
    float v = 0;
    switch (_i) {
    case 0:
        amp_tensor_item(h);
        break;
    case 1:
        amp_tensor_read_f32(h, &v);
        break;
    case 2:
        amp_tensor_read(h, &v);
        break;
    case 3:
        amp_tensor_write_f32(h, &v);
        break;
    default:
        amp_tensor_write(h, &v);
        break;
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Integer inputs: PyTorch's type promotion

static amp_tensor_t *ints(amp_dtype t, int n, const int64_t *v) {
    amp_tensor_t *x = amp_tensor_new(ctx, t, 1, S(n));
    if (t == AMP_DTYPE_I64) {
        amp_tensor_write(x, v);
    } else {
        int32_t w[8];
        for (int i = 0; i < n; i++)
            w[i] = (int32_t)v[i];
        amp_tensor_write(x, w);
    }
    return x;
}

static void expect_values(amp_tensor_t *t, amp_dtype dt, int n, const float *want) {
    ck_assert_int_eq(amp_tensor_dtype(t), dt);
    float got[8];
    amp_tensor_read_f32(t, got);
    for (int i = 0; i < n; i++)
        ck_assert_close(got[i], want[i], 0, 1e-6);
}

// An integer tensor with a floating one takes its dtype (cast first: 2049 is 2048 in f16, so
// 2049 + 0.5 is 2048.5, which rounds to 2048); true division of integers is f32; the gradient
// flows to the floating side only.
START_TEST(test_binary_int_with_float) {
    amp_tensor_t *i = ints(AMP_DTYPE_I32, 3, S(1, 2049, -3));
    amp_tensor_t *h = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(3), (float[]){.5f, .5f, .5f});
    expect_values(amp_add(ctx, i, h), AMP_DTYPE_F16, 3, (float[]){1.5f, 2048, -2.5f});
    expect_values(amp_sub(ctx, h, i), AMP_DTYPE_F16, 3, (float[]){-.5f, -2048, 3.5f}); // a tie
    amp_tensor_t *h0 = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 0, NULL, (float[]){2});
    expect_values(amp_mul(ctx, i, h0), AMP_DTYPE_F16, 3, (float[]){2, 4096, -6}); // 0-dim float
    amp_tensor_t *j = ints(AMP_DTYPE_I64, 3, S(2, 2, 2));
    expect_values(amp_div(ctx, i, j), AMP_DTYPE_F32, 3, (float[]){.5f, 1024.5f, -1.5f});
    expect_values(amp_div(ctx, i, i), AMP_DTYPE_F32, 3, (float[]){1, 1, 1});

    amp_tensor_t *x = param(1, S(3), 1);
    amp_backward(ctx, amp_sum(ctx, amp_div(ctx, amp_mul(ctx, x, i), j)));
    expect_values(amp_tensor_grad(x), AMP_DTYPE_F32, 3, (float[]){.5f, 1024.5f, -1.5f});
    ck_assert_ptr_null(amp_tensor_grad(i));
}
END_TEST

// Unary float ops and the scalar ops (a float scalar) compute an integer tensor in f32.
START_TEST(test_unary_int_input) {
    amp_tensor_t *i = ints(AMP_DTYPE_I64, 3, S(0, 1, -2));
    expect_values(amp_exp(ctx, i), AMP_DTYPE_F32, 3, (float[]){1, expf(1), expf(-2)});
    expect_values(amp_tanh(ctx, i), AMP_DTYPE_F32, 3, (float[]){0, tanhf(1), tanhf(-2)});
    expect_values(amp_sigmoid(ctx, i), AMP_DTYPE_F32, 3,
                  (float[]){.5f, 1 / (1 + expf(-1)), 1 / (1 + expf(2))});
    expect_values(amp_mul_scalar(ctx, i, 0.5), AMP_DTYPE_F32, 3, (float[]){0, .5f, -1});
    expect_values(amp_add_scalar(ctx, i, 0.5), AMP_DTYPE_F32, 3, (float[]){.5f, 1.5f, -1.5f});
    amp_autocast_begin(ctx, true, AMP_DTYPE_F16, true); // exp is fp32 there: the same
    expect_values(amp_exp(ctx, i), AMP_DTYPE_F32, 3, (float[]){1, expf(1), expf(-2)});
    amp_autocast_end(ctx);
}
END_TEST

START_TEST(test_add_of_two_integer_tensors_aborts) {
    test_expect_abort("add of two integer tensors (i32, i64) is an integer tensor in PyTorch");
    amp_add(ctx, ints(AMP_DTYPE_I32, 2, S(1, 2)), ints(AMP_DTYPE_I64, 2, S(3, 4)));
}
END_TEST

START_TEST(test_gelu_of_an_integer_tensor_aborts) {
    test_expect_abort("gelu takes floating tensors only (PyTorch has no integer kernel for it), "
                      "got i64");
    amp_gelu(ctx, ints(AMP_DTYPE_I64, 2, S(1, 2)), false);
}
END_TEST

START_TEST(test_softmax_of_an_integer_tensor_aborts) {
    test_expect_abort("softmax takes floating tensors only (PyTorch has no integer kernel for "
                      "it), got i32");
    amp_softmax(ctx, ints(AMP_DTYPE_I32, 2, S(1, 2)), 0);
}
END_TEST

// A mask with more dims than the input (PyTorch would broadcast the input too) aborts naming
// masked_fill and both shapes (it aborted in the expand, naming neither).
START_TEST(test_masked_fill_of_a_wider_mask_aborts) {
    amp_tensor_t *m =
        amp_tensor_from(ctx, AMP_DTYPE_I32, 2, S(2, 3), (int32_t[]){1, 0, 0, 0, 1, 0});
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(3), (float[]){1, 2, 3});
    test_expect_abort("masked_fill: the mask (2, 3) does not broadcast to the input (3,)");
    amp_masked_fill(ctx, x, m, 0);
}
END_TEST

START_TEST(test_max_pool2d_stride_0_aborts) {
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 4, S(1, 1, 4, 4));
    test_expect_abort("max_pool2d: kernel 2 and stride 0 must be greater than zero");
    amp_max_pool2d(ctx, x, 2, 0);
}
END_TEST

// x.half().masked_fill(mask, -1e9) raises in PyTorch; -inf and values in range go through.
START_TEST(test_masked_fill_beyond_the_range_aborts) {
    amp_tensor_t *m = ints(AMP_DTYPE_I32, 2, S(1, 0));
    amp_tensor_t *h = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(2), (float[]){1, 2});
    float v[2];
    amp_tensor_read_f32(amp_masked_fill(ctx, h, m, -INFINITY), v);
    ck_assert(v[0] == -INFINITY && v[1] == 2);
    expect_values(amp_masked_fill(ctx, h, m, -65504), AMP_DTYPE_F16, 2, (float[]){-65504, 2});
    amp_tensor_t *b = amp_tensor_from_f32(ctx, AMP_DTYPE_BF16, 1, S(2), (float[]){1, 2});
    expect_values(amp_masked_fill(ctx, b, m, -1e9f), AMP_DTYPE_BF16, 2, (float[]){-998244352, 2});
    test_expect_abort("value cannot be converted to type at::Half without overflow");
    amp_masked_fill(ctx, h, m, -1e9f);
}
END_TEST

// An integer tensor holds no inf and nothing beyond its range: PyTorch raises ("value cannot be
// converted to type int32_t without overflow"; -inf gave INT_MIN); values in range go through.
START_TEST(test_masked_fill_of_minus_inf_into_i32_aborts) {
    amp_tensor_t *m = ints(AMP_DTYPE_I32, 2, S(1, 0)), *i = ints(AMP_DTYPE_I32, 2, S(5, 6));
    int32_t v[2];
    amp_tensor_read(amp_masked_fill(ctx, i, m, -2147483648.0f), v);
    ck_assert(v[0] == INT32_MIN && v[1] == 6);
    test_expect_abort("value cannot be converted to type int32_t without overflow (masked_fill of "
                      "-inf into an i32 tensor");
    amp_masked_fill(ctx, i, m, -INFINITY);
}
END_TEST

START_TEST(test_masked_fill_beyond_i64_aborts) {
    amp_tensor_t *m = ints(AMP_DTYPE_I32, 2, S(1, 0)), *i = ints(AMP_DTYPE_I64, 2, S(5, 6));
    int64_t v[2];
    amp_tensor_read(amp_masked_fill(ctx, i, m, 1e10f), v);
    ck_assert(v[0] == 10000000000 && v[1] == 6);
    test_expect_abort("value cannot be converted to type int64_t without overflow");
    amp_masked_fill(ctx, i, m, 1e19f);
}
END_TEST

// conv2d and dropout of integer tensors abort naming the op (they failed inside the backend).
START_TEST(test_conv2d_of_integer_tensors_aborts) {
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_I32, 4, S(1, 1, 3, 3));
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_I32, 4, S(2, 1, 2, 2));
    test_expect_abort("conv2d takes floating tensors only (PyTorch has no integer kernel for it), "
                      "got i32");
    amp_conv2d(ctx, x, w, NULL, 1, 0);
}
END_TEST

START_TEST(test_dropout_of_an_integer_tensor_aborts) {
    amp_tensor_t *x = ints(AMP_DTYPE_I64, 2, S(1, 2));
    ck_assert_ptr_eq(amp_dropout(ctx, x, 0.5f, false), x); // the identity, as in PyTorch
    ck_assert_ptr_eq(amp_dropout(ctx, x, 0.0f, true), x);
    test_expect_abort("dropout of an i64 tensor is an error in PyTorch");
    amp_dropout(ctx, x, 0.5f, true);
}
END_TEST

// x.to(torch.int32) has no grad_fn in PyTorch: an integer result requires no grad, and no
// gradient comes back through it (x's gradient here is 2x + r, not 3x + r).
START_TEST(test_cast_to_an_integer_is_not_differentiable) {
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(3), (float[]){2.7f, -2.7f, 1});
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_t *i = amp_to(ctx, x, AMP_DTYPE_I32);
    ck_assert(!amp_tensor_requires_grad(i));
    int32_t iv[3];
    amp_tensor_read(i, iv);
    ck_assert(iv[0] == 2 && iv[1] == -2 && iv[2] == 1);
    amp_tensor_t *r = amp_to(ctx, i, AMP_DTYPE_F32);
    ck_assert(!amp_tensor_requires_grad(r));
    ck_assert(!amp_tensor_requires_grad(amp_to(ctx, x, AMP_DTYPE_I64)));
    amp_backward(ctx,
                 amp_add(ctx, amp_sum(ctx, amp_mul(ctx, x, x)), amp_sum(ctx, amp_mul(ctx, r, x))));
    expect_values(amp_tensor_grad(x), AMP_DTYPE_F32, 3, (float[]){7.4f, -7.4f, 3});
}
END_TEST

START_TEST(test_backward_through_an_integer_cast_aborts) {
    amp_tensor_t *x = param(1, S(3), 1);
    amp_tensor_t *r = amp_to(ctx, amp_to(ctx, x, AMP_DTYPE_I64), AMP_DTYPE_F32);
    test_expect_abort("element 0 of tensors does not require grad and does not have a grad_fn");
    amp_backward(ctx, amp_sum(ctx, r));
}
END_TEST

// A NULL out (or input) is AMP_ERR_INVALID_ARGUMENT naming it; a given out is left NULL.
START_TEST(test_bce_null_arguments) {
    amp_tensor_t *p = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(2), (float[]){.25f, .5f});
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(2), (float[]){0, 1}), *out = p;
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_binary_cross_entropy: out is NULL");
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, NULL, &out), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_binary_cross_entropy: target is NULL");
    ck_assert_ptr_null(out);
}
END_TEST

// PyTorch: "all elements of input should be between 0 and 1" (NaN is outside too).
START_TEST(test_bce_input_outside_0_1) {
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(2), (float[]){0, 1});
    const float bad[][2] = {{.5f, 1.5f}, {-0.25f, .5f}, {NAN, .5f}, {INFINITY, .5f}};
    for (int k = 0; k < 4; k++) {
        amp_tensor_t *p = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(2), bad[k]), *out = p;
        ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &out), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "all elements of input should be between 0 and 1");
        ck_assert_ptr_null(out);
    }
    amp_tensor_t *p = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(2), (float[]){0, 1}), *out;
    amp_tensor_write_f32(t, (float[]){1, 0});
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &out), AMP_OK);
    ck_assert_float_eq(amp_tensor_item(out), 100.0f); // both logs clamped at -100
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Edge values against PyTorch (torch 1.13, CPU, f32; expected bits in the comments' calls)

// Bits of an f32 tensor (n <= 8).
static void read_bits32(amp_tensor_t *t, int n, uint32_t *out) {
    ck_assert_int_eq(amp_tensor_dtype(t), AMP_DTYPE_F32);
    ck_assert_int_eq(amp_tensor_numel(t), n);
    amp_tensor_read(t, out);
}

// log_softmax is x - max - log(sum): max + log(sum) first rounds away log(4) beside 1e4 and
// log(2) beside 3e38. torch.log_softmax(torch.tensor([[1e4] * 4, [3e38, 3e38, -3e38, 0.]]), -1).
START_TEST(test_log_softmax_large_max) {
    const float v[8] = {1e4f, 1e4f, 1e4f, 1e4f, 3e38f, 3e38f, -3e38f, 0};
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, S(2, 4), v);
    const uint32_t want[8] = {0xbfb17218, 0xbfb17218, 0xbfb17218, 0xbfb17218,  // -1.3862944
                              0xbf317218, 0xbf317218, 0xff800000, 0xff61b1e6}; // -0.6931472, -inf
    uint32_t got[8];
    read_bits32(amp_log_softmax(ctx, x, -1), 8, got);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(got[i] == want[i], "log_softmax[%d] = %08x, want %08x", i, got[i], want[i]);
}
END_TEST

// The divisor's gradient is -dy * ((a / b) / b), PyTorch's order: -dy * a / (b * b) overflows b * b
// to inf (and gives -0). a = torch.tensor([3., 1.]), b = torch.tensor([1e20, 300.]) (f32, then
// f16 with b = [1e4, 300.]), (a / b).sum().backward(), b.grad.
START_TEST(test_div_grad_of_large_divisor) {
    amp_tensor_t *a = param(1, S(2), 1), *b = param(1, S(2), 1);
    amp_tensor_write_f32(a, (float[]){3, 1});
    amp_tensor_write_f32(b, (float[]){1e20f, 300});
    amp_backward(ctx, amp_sum(ctx, amp_div(ctx, a, b)));
    uint32_t got[2];
    read_bits32(amp_tensor_grad(b), 2, got);
    ck_assert_uint_eq(got[0], 0x80034447); // -2.999998e-40
    ck_assert_uint_eq(got[1], 0xb73a69dc); // -1.1111111e-05

    amp_tensor_t *ah = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(2), (float[]){3, 1});
    amp_tensor_t *bh = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, S(2), (float[]){1e4f, 300});
    amp_tensor_set_requires_grad(bh, true);
    amp_backward(ctx, amp_sum(ctx, amp_div(ctx, ah, bh)));
    uint16_t h[2];
    amp_tensor_read(amp_tensor_grad(bh), h);
    ck_assert_uint_eq(h[0], 0x8001); // -5.96e-08
    ck_assert_uint_eq(h[1], 0x80ba); // -1.1086e-05
}
END_TEST

// binary_cross_entropy's gradients are PyTorch's formulas, finite at p = 0 and 1 where the
// clamped logs' own backward is 0 / 0: dp = dy * (p - t) / max((1 - p) * p, 1e-12) / N,
// dt = -logit(p) * dy / N. p = torch.tensor([0., 1.]), t = torch.tensor([1., 0.]) and then
// [0., 1.], both requiring grad: F.binary_cross_entropy(p, t).backward().
START_TEST(test_bce_grad_at_0_and_1) {
    const float targets[2][2] = {{1, 0}, {0, 1}};
    const uint32_t want_dp[2][2] = {{0xd2e8d4a5, 0x52e8d4a5}, {0, 0}}; // -+499999997952, 0
    const float want_loss[2] = {100, 0};
    for (int k = 0; k < 2; k++) {
        amp_tensor_t *p = param(1, S(2), 1), *t = param(1, S(2), 1), *loss;
        amp_tensor_write_f32(p, (float[]){0, 1});
        amp_tensor_write_f32(t, targets[k]);
        ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &loss), AMP_OK);
        ck_assert_float_eq(fabsf(amp_tensor_item(loss)), want_loss[k]);
        amp_backward(ctx, loss);
        uint32_t dp[2];
        float dt[2];
        read_bits32(amp_tensor_grad(p), 2, dp);
        amp_tensor_read_f32(amp_tensor_grad(t), dt);
        ck_assert_msg(dp[0] == want_dp[k][0] && dp[1] == want_dp[k][1], "case %d: dp = %08x %08x",
                      k, dp[0], dp[1]);
        ck_assert_msg(dt[0] == INFINITY && dt[1] == -INFINITY, "case %d: dt = %g %g", k,
                      (double)dt[0], (double)dt[1]);
        amp_ctx_reset(ctx);
    }
}
END_TEST

// binary_cross_entropy's forward takes log1p(-p), as PyTorch's kernels do, not log(1 - p), which
// rounds 1 - p first: a small p with target 0 costs p, not -log of the rounded 1 - p.
// F.binary_cross_entropy of one element each with target 0, torch 2.11 on an H200, the same on
// its CPU and CUDA: p = 1e-7 0x33d6bf96 (-log(1 - p) gives 0x34000001), 3e-5 0x37fba979
// (0x37fb80f7), 0.25 0x3e934b10.
START_TEST(test_bce_small_p_log1p) {
    const float ps[3] = {1e-7f, 3e-5f, 0.25f};
    const uint32_t want[3] = {0x33d6bf96, 0x37fba979, 0x3e934b10};
    for (int k = 0; k < 3; k++) {
        amp_tensor_t *p = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(1), &ps[k]);
        amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, S(1), (float[]){0});
        amp_tensor_t *loss;
        ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &loss), AMP_OK);
        uint32_t got;
        read_bits32(loss, 1, &got);
        ck_assert_msg(got == want[k], "p = %g: loss %08x, want %08x", (double)ps[k], got, want[k]);
        amp_ctx_reset(ctx);
    }
    // and the gradient of the mean over p = (1e-7, 3e-5, 0.25, 0.6), t = (0, 0, 0, 1): torch
    // 2.11's bits, CPU and CUDA alike
    amp_tensor_t *p = param(1, S(4), 1), *t = param(1, S(4), 1), *loss;
    amp_tensor_write_f32(p, (float[]){1e-7f, 3e-5f, 0.25f, 0.6f});
    amp_tensor_write_f32(t, (float[]){0, 0, 0, 1});
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, p, t, &loss), AMP_OK);
    amp_backward(ctx, loss);
    const uint32_t want_dp[4] = {0x3e800001, 0x3e8000fb, 0x3eaaaaab, 0xbed55555};
    uint32_t dp[4];
    read_bits32(amp_tensor_grad(p), 4, dp);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(dp[i] == want_dp[i], "dp[%d] = %08x, want %08x", i, dp[i], want_dp[i]);
}
END_TEST

// pow of a 16-bit tensor as PyTorch's CUDA kernel computes it: the exponent rounded to the
// tensor's dtype first (1.7 is 1.7002 in f16, 1.703125 in bf16), x * x rounded before the third
// factor (3) or the reciprocal (-2), and a backward of three tensor ops, each rounding
// (x ** (e - 1), times e, times the incoming gradient; 0.5 goes through rsqrt). torch.pow(x, e)
// then .backward(g), torch 2.11 on an H200; every f16 and bf16 x with 17 exponents matched these
// rules on the CPU and the GPU (2026-12-02), where one rounding of the f32 result missed e.g. the
// bf16 y of 1.7 below by 1 to 2 ulp.
START_TEST(test_pow_16bit_torch_bits) {
    static const struct {
        amp_dtype t;
        float e;
        uint16_t x, g, y, dx;
    } cases[] = {
        {AMP_DTYPE_F16, 3.0f, 0x4f37, 0xc1cf, 0x75de, 0xef17},   // x 28.86: dx -7260, not -7256
        {AMP_DTYPE_F16, 3.0f, 0xaf1f, 0x4454, 0x95a5, 0x3125},   // y -0.0013781, not -0.0013771
        {AMP_DTYPE_F16, -2.0f, 0x41f9, 0xc419, 0x2f2c, 0x34ec},  // y 0.112061, not 0.112122
        {AMP_DTYPE_F16, -2.0f, 0xc7c3, 0xbee6, 0x2440, 0x9f8d},  // dx -0.0073738
        {AMP_DTYPE_F16, 1.7f, 0x3bbe, 0xbe50, 0x3b91, 0xc13f},   // dx -2.62305, not -2.62109
        {AMP_DTYPE_F16, 1.7f, 0x4afa, 0x3fa2, 0x5585, 0x4d23},   // dx 20.5469, not 20.5312
        {AMP_DTYPE_F16, 0.5f, 0x3160, 0x3ef7, 0x368f, 0x403f},   // dx 2.12305, not 2.125
        {AMP_DTYPE_F16, 0.5f, 0x4b36, 0x3894, 0x4398, 0x2cd3},   // dx 0.0753784
        {AMP_DTYPE_BF16, 3.0f, 0x41f0, 0xbefb, 0x46d3, 0xc4a6},  // x 30: dx -1328, not -1320
        {AMP_DTYPE_BF16, 3.0f, 0xbdcf, 0x4020, 0xba87, 0x3d9c},  // dx 0.0761719
        {AMP_DTYPE_BF16, -2.0f, 0x4011, 0xc066, 0x3e48, 0x3f1e}, // y 0.195312, not 0.194336
        {AMP_DTYPE_BF16, -2.0f, 0xc0d2, 0x3d51, 0x3cbf, 0x39bd}, // y 0.0233154
        {AMP_DTYPE_BF16, 1.7f, 0x3f61, 0x3eee, 0x3f4d, 0x3f39},  // y 0.800781, not 0.804688
        {AMP_DTYPE_BF16, 1.7f, 0x4145, 0x4007, 0x4290, 0x41a6},  // x 12.3125: y 72, not 71.5
        {AMP_DTYPE_BF16, 0.5f, 0x3e51, 0xbe3f, 0x3ee7, 0xbe54},  // dx -0.207031
        {AMP_DTYPE_BF16, 0.5f, 0x4165, 0xc0aa, 0x4072, 0xbf33},  // dx -0.699219, not -0.703125
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        amp_tensor_t *x = amp_tensor_from(ctx, cases[k].t, 1, S(1), &cases[k].x);
        amp_tensor_t *g = amp_tensor_from(ctx, cases[k].t, 1, S(1), &cases[k].g);
        amp_tensor_set_requires_grad(x, true);
        amp_tensor_t *y = amp_pow(ctx, x, cases[k].e);
        amp_backward(ctx, amp_sum(ctx, amp_mul(ctx, y, g)));
        uint16_t yb, dxb;
        amp_tensor_read(y, &yb);
        amp_tensor_read(amp_tensor_grad(x), &dxb);
        ck_assert_msg(yb == cases[k].y && dxb == cases[k].dx,
                      "%s x %04x ** %g: y %04x dx %04x, want %04x %04x", amp_dtype_name(cases[k].t),
                      cases[k].x, (double)cases[k].e, yb, dxb, cases[k].y, cases[k].dx);
        amp_tensor_free(x);
        amp_tensor_free(g);
        amp_ctx_reset(ctx);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// nll_loss / cross_entropy with PyTorch's defaults (reduction='mean', ignore_index=-100), against
// torch 1.13 CPU

// F.nll_loss(logp, torch.tensor([2, -100, 0, -100, 3])) with logp the (5, 4) values below, then
// .backward(): (2.0625 + 0.375 + 0.3125) / 3 and -1/3 at the three targets. The values are
// dyadic, so the sum is exact in any order and only the division by the count (3, not 5) rounds.
START_TEST(test_nll_loss_ignore_index) {
    const float v[20] = {-1.25f,  -0.5f,   -2.0625f, -3.0f,   -0.75f,  -1.5f,   -2.5f,
                         -0.125f, -0.375f, -4.0f,    -1.0f,   -2.25f,  -3.5f,   -0.25f,
                         -1.75f,  -0.625f, -2.75f,   -1.125f, -0.875f, -0.3125f};
    const int64_t y[5] = {2, -100, 0, -100, 3};
    amp_tensor_t *logp = param(2, S(5, 4), 1);
    amp_tensor_write_f32(logp, v);
    amp_tensor_t *t = amp_tensor_from(ctx, AMP_DTYPE_I64, 1, S(5), y);
    amp_tensor_t *loss = amp_nll_loss(ctx, logp, t);
    uint32_t got;
    read_bits32(loss, 1, &got);
    ck_assert_msg(got == 0x3f6aaaab, "loss = %08x, want 3f6aaaab (0.9166667)", got);
    amp_backward(ctx, loss);
    uint32_t g[20];
    amp_tensor_read(amp_tensor_grad(logp), g);
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 4; j++) {
            const uint32_t want = y[r] == j ? 0xbeaaaaab : 0; // -0.33333334, else +0
            ck_assert_msg(g[r * 4 + j] == want, "dlogp[%d, %d] = %08x, want %08x", r, j,
                          g[r * 4 + j], want);
        }
}
END_TEST

// f16 logits under autocast: cross_entropy is fp32 there, so the loss is PyTorch's of the logits
// cast to f32 and the gradient comes back in f16. x16 = the (4, 5) values below as
// torch.float16, requiring grad; F.cross_entropy(x16.float(), torch.tensor([4, -100, 1, 0]))
// .backward(), then the loss's and x16.grad's bits.
START_TEST(test_cross_entropy_f16_ignore_index) {
    const float v[20] = {1.5f,  -0.25f, 2.0f, 0.75f, -1.0f, 0.5f,  3.0f,   -2.0f,  1.25f, 0.0f,
                         -0.5f, 0.25f,  1.0f, -1.5f, 2.5f,  2.25f, -0.75f, 0.125f, 1.75f, -0.375f};
    const uint16_t want[20] = {0x2e51, 0x2464, 0x3135, 0x29f8, 0xb534, 0,      0,
                               0,      0,      0,      0x2215, 0xb4ee, 0x2ad1, 0x1c7a,
                               0x33a3, 0xb0e5, 0x2099, 0x2584, 0x2f00, 0x22b0};
    amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 2, S(4, 5), v);
    amp_tensor_set_requires_grad(x, true);
    amp_tensor_t *t = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, S(4), (int32_t[]){4, -100, 1, 0});
    amp_autocast_begin(ctx, true, AMP_DTYPE_F16, true);
    amp_tensor_t *loss = amp_cross_entropy(ctx, x, t);
    amp_autocast_end(ctx);
    uint32_t got;
    read_bits32(loss, 1, &got);
    ck_assert_msg(got == 0x40138672, "loss = %08x, want 40138672 (2.3050809)", got);
    amp_backward(ctx, loss);
    ck_assert_int_eq(amp_tensor_dtype(amp_tensor_grad(x)), AMP_DTYPE_F16);
    uint16_t g[20];
    amp_tensor_read(amp_tensor_grad(x), g);
    for (int i = 0; i < 20; i++)
        ck_assert_msg(g[i] == want[i], "dx[%d] = %04x, want %04x", i, g[i], want[i]);
}
END_TEST

// Every target ignored: 0 / 0, a NaN loss, and a gradient of zeros (written at no position);
// an empty batch is NaN too. F.nll_loss(logp, torch.tensor([-100, -100, -100])).backward() and
// F.nll_loss(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)).
START_TEST(test_nll_loss_all_ignored) {
    amp_tensor_t *logp = param(2, S(3, 2), 1);
    amp_tensor_write_f32(logp, (float[]){-0.5f, -1, -2, -0.25f, -1.5f, -0.75f});
    amp_tensor_t *t = amp_tensor_from(ctx, AMP_DTYPE_I64, 1, S(3), (int64_t[]){-100, -100, -100});
    amp_tensor_t *loss = amp_nll_loss(ctx, logp, t);
    ck_assert(isnan(amp_tensor_item(loss)));
    amp_backward(ctx, loss);
    uint32_t g[6];
    read_bits32(amp_tensor_grad(logp), 6, g);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(g[i] == 0, "dlogp[%d] = %08x, want +0", i, g[i]);

    amp_tensor_t *x = param(2, S(2, 2), 1);
    amp_tensor_t *t2 = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, S(2), (int32_t[]){-100, -100});
    loss = amp_cross_entropy(ctx, x, t2);
    ck_assert(isnan(amp_tensor_item(loss)));
    amp_backward(ctx, loss);
    float gx[4];
    amp_tensor_read_f32(amp_tensor_grad(x), gx);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(gx[i], 0.0f);

    amp_tensor_t *empty = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, S(0, 4));
    amp_tensor_t *none = amp_tensor_new(ctx, AMP_DTYPE_I64, 1, S(0));
    ck_assert(isnan(amp_tensor_item(amp_nll_loss(ctx, empty, none))));
}
END_TEST

// Only -100 is ignored: -101 is out of range like 4. F.nll_loss(logp, torch.tensor([0, -101]))
// raises IndexError("Target -101 is out of bounds.").
START_TEST(test_nll_loss_other_negative_target_aborts) {
    amp_tensor_t *logp = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, S(2, 4));
    amp_tensor_write_f32(logp, (float[]){-1, -2, -3, -4, -1, -2, -3, -4});
    amp_tensor_t *t = amp_tensor_from(ctx, AMP_DTYPE_I64, 1, S(2), (int64_t[]){0, -101});
    test_expect_abort("Target -101 is out of bounds.");
    amp_nll_loss(ctx, logp, t);
}
END_TEST

START_TEST(test_nll_loss_target_past_the_classes_aborts) {
    amp_tensor_t *logp = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, S(2, 4));
    amp_tensor_write_f32(logp, (float[]){-1, -2, -3, -4, -1, -2, -3, -4});
    amp_tensor_t *t = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, S(2), (int32_t[]){-100, 4});
    test_expect_abort("Target 4 is out of bounds.");
    amp_nll_loss(ctx, logp, t);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// conv2d's bias and an empty batch

// PyTorch: "Given weight of size [4, 3, 3, 3], expected bias to be 1-dimensional with 4 elements,
// but got bias of size [2] instead". A short bias was read past its end, a long one in part.
START_TEST(test_conv2d_short_bias_aborts) {
    amp_tensor_t *x = param(4, S(1, 3, 4, 4), 1), *w = param(4, S(4, 3, 3, 3), 1);
    test_expect_abort("conv2d: given weight of size (4, 3, 3, 3), expected bias to be "
                      "1-dimensional with 4 elements, but got bias of size (2,) instead");
    amp_conv2d(ctx, x, w, param(1, S(2), 1), 1, 1);
}
END_TEST

START_TEST(test_conv2d_long_bias_aborts) {
    amp_tensor_t *x = param(4, S(1, 3, 4, 4), 1), *w = param(4, S(4, 3, 3, 3), 1);
    test_expect_abort("expected bias to be 1-dimensional with 4 elements, but got bias of size "
                      "(5,) instead");
    amp_conv2d(ctx, x, w, param(1, S(5), 1), 1, 1);
}
END_TEST

// N = 0 gives PyTorch's empty (0, C_out, H_out, W_out) output, and a backward of zero weight and
// bias gradients and an empty input gradient (it divided by zero).
START_TEST(test_conv2d_empty_batch) {
    amp_tensor_t *x = param(4, S(0, 3, 8, 8), 1), *w = param(4, S(2, 3, 3, 3), 1);
    amp_tensor_t *b = param(1, S(2), 1);
    amp_tensor_t *y = amp_conv2d(ctx, x, w, b, 2, 1);
    const int64_t want[4] = {0, 2, 4, 4};
    ck_assert_int_eq(amp_tensor_ndim(y), 4);
    for (int d = 0; d < 4; d++)
        ck_assert_int_eq(amp_tensor_dim(y, d), want[d]);
    amp_backward(ctx, amp_sum(ctx, y));
    float gw[54], gb[2];
    amp_tensor_read_f32(amp_tensor_grad(w), gw);
    amp_tensor_read_f32(amp_tensor_grad(b), gb);
    for (int i = 0; i < 54; i++)
        ck_assert_float_eq(gw[i], 0.0f);
    ck_assert(gb[0] == 0.0f && gb[1] == 0.0f);
    ck_assert_int_eq(amp_tensor_numel(amp_tensor_grad(x)), 0);
}
END_TEST

Suite *ops_suite(void) {
    Suite *s = suite_create("ops");
    TCase *g = tcase_create("gradcheck");
    tcase_add_checked_fixture(g, setup, teardown);
    tcase_add_test(g, test_grad_linear);
    tcase_add_test(g, test_grad_mm);
    tcase_add_test(g, test_grad_bmm);
    tcase_add_test(g, test_grad_matmul4d);
    tcase_add_test(g, test_grad_matmul_shared);
    tcase_add_test(g, test_grad_matmul_broadcast_a);
    tcase_add_test(g, test_grad_matmul_broadcast_both);
    tcase_add_test(g, test_grad_matmul_vector_first);
    tcase_add_test(g, test_grad_matmul_vector_second);
    tcase_add_test(g, test_grad_matmul_dot);
    tcase_add_test(g, test_grad_addmm);
    tcase_add_test(g, test_grad_addmm_full_bias);
    tcase_add_test(g, test_grad_conv2d);
    tcase_add_test(g, test_grad_conv2d_nobias);
    tcase_add_test(g, test_grad_max_pool2d);
    tcase_add_test(g, test_grad_relu);
    tcase_add_test(g, test_grad_gelu);
    tcase_add_test(g, test_grad_gelu_tanh);
    tcase_add_test(g, test_grad_tanh);
    tcase_add_test(g, test_grad_sigmoid);
    tcase_add_test(g, test_grad_exp);
    tcase_add_test(g, test_grad_log);
    tcase_add_test(g, test_grad_log1p);
    tcase_add_test(g, test_grad_pow);
    tcase_add_test(g, test_grad_clamp_min);
    tcase_add_test(g, test_grad_softmax);
    tcase_add_test(g, test_grad_softmax_dim0);
    tcase_add_test(g, test_grad_log_softmax);
    tcase_add_test(g, test_grad_layer_norm);
    tcase_add_test(g, test_grad_add_broadcast);
    tcase_add_test(g, test_grad_sub_broadcast);
    tcase_add_test(g, test_grad_mul_broadcast);
    tcase_add_test(g, test_grad_div_broadcast);
    tcase_add_test(g, test_grad_scalar_ops);
    tcase_add_test(g, test_grad_sum);
    tcase_add_test(g, test_grad_mean);
    tcase_add_test(g, test_grad_mse_loss);
    tcase_add_test(g, test_grad_reshape_transpose);
    tcase_add_test(g, test_grad_heads);
    tcase_add_test(g, test_grad_permute_contiguous);
    tcase_add_test(g, test_grad_split);
    tcase_add_test(g, test_grad_shared_grad_add);
    tcase_add_test(g, test_grad_shared_grad_split);
    tcase_add_test(g, test_grad_losses);
    suite_add_tcase(s, g);
    TCase *f = tcase_create("forward");
    tcase_add_checked_fixture(f, setup, teardown);
    tcase_add_test(f, test_linear_matches_naive);
    tcase_add_test(f, test_matmul_broadcasts_as_torch_does);
    tcase_add_test_raise_signal(f, test_matmul_batch_dims_that_do_not_broadcast_abort, SIGABRT);
    tcase_add_test(f, test_linear_no_input_features);
    tcase_add_test(f, test_softmax_and_layer_norm_values);
    tcase_add_test(f, test_softmax_of_a_0dim_tensor);
    tcase_add_test(f, test_log1p_backward_rounds_self_plus_one);
    tcase_add_test(f, test_a_0dim_operand_is_rounded_to_the_result_dtype);
    tcase_add_test(f, test_masked_softmax_rows);
    tcase_add_test(f, test_dropout_seeded);
    tcase_add_test(f, test_grad_accumulates_and_zero_grad);
    tcase_add_test(f, test_ops_read_a_narrower_gradient);
    tcase_add_test(f, test_half_storage_rounds);
    tcase_add_test(f, test_log_softmax_large_max);
    tcase_add_test(f, test_div_grad_of_large_divisor);
    suite_add_tcase(s, f);
    TCase *d = tcase_create("drop");
    tcase_add_checked_fixture(d, setup, teardown);
    tcase_add_test(d, test_drop_frees_what_no_backward_reads);
    tcase_add_test(d, test_ctx_memory_counts_storage);
    tcase_add_test(d, test_reshape_views_where_pytorch_does);
    tcase_add_test(d, test_reshape_random_layouts);
    tcase_add_test(d, test_drop_keeps_what_a_backward_reads);
    tcase_add_test(d, test_drop_conv_relu_pool);
    tcase_add_test(d, test_drop_embedding_layer_norm_dropout);
    tcase_add_test(d, test_conv_columns_in_slices);
    tcase_add_test_raise_signal(d, test_reading_a_dropped_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(d, test_second_backward_through_a_dropped_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(d, test_second_backward_through_the_graph_aborts, SIGABRT);
    tcase_add_test(d, test_second_backward_through_what_saved_nothing_accumulates);
    tcase_add_loop_test_raise_signal(d, test_host_copy_of_a_dropped_tensor_aborts, SIGABRT, 0,
                                     (int)(sizeof dropped_readers / sizeof dropped_readers[0]));
    tcase_add_loop_test_raise_signal(d, test_host_copy_of_a_tensor_dropped_for_later_aborts,
                                     SIGABRT, 0, 5);
    tcase_add_test_raise_signal(d, test_requires_grad_off_on_an_op_output_aborts, SIGABRT);
    suite_add_tcase(s, d);
    TCase *p = tcase_create("promotion");
    tcase_add_checked_fixture(p, setup, teardown);
    tcase_add_test(p, test_binary_int_with_float);
    tcase_add_test(p, test_unary_int_input);
    tcase_add_test_raise_signal(p, test_add_of_two_integer_tensors_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_gelu_of_an_integer_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_softmax_of_an_integer_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_softmax_of_a_0dim_tensor_at_dim_1_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_layer_norm_of_a_0dim_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_masked_fill_beyond_the_range_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_masked_fill_of_a_wider_mask_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_max_pool2d_stride_0_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_masked_fill_of_minus_inf_into_i32_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_masked_fill_beyond_i64_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_conv2d_of_integer_tensors_aborts, SIGABRT);
    tcase_add_test_raise_signal(p, test_dropout_of_an_integer_tensor_aborts, SIGABRT);
    tcase_add_test(p, test_cast_to_an_integer_is_not_differentiable);
    tcase_add_test_raise_signal(p, test_backward_through_an_integer_cast_aborts, SIGABRT);
    tcase_add_test(p, test_bce_null_arguments);
    tcase_add_test(p, test_bce_input_outside_0_1);
    tcase_add_test(p, test_bce_grad_at_0_and_1);
    tcase_add_test(p, test_bce_small_p_log1p);
    tcase_add_test(p, test_pow_16bit_torch_bits);
    suite_add_tcase(s, p);

    TCase *l = tcase_create("ignore_index");
    tcase_add_checked_fixture(l, setup, teardown);
    tcase_add_test(l, test_nll_loss_ignore_index);
    tcase_add_test(l, test_cross_entropy_f16_ignore_index);
    tcase_add_test(l, test_nll_loss_all_ignored);
    tcase_add_test_raise_signal(l, test_nll_loss_other_negative_target_aborts, SIGABRT);
    tcase_add_test_raise_signal(l, test_nll_loss_target_past_the_classes_aborts, SIGABRT);
    suite_add_tcase(s, l);

    TCase *c = tcase_create("conv2d");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_add_test_raise_signal(c, test_conv2d_short_bias_aborts, SIGABRT);
    tcase_add_test_raise_signal(c, test_conv2d_long_bias_aborts, SIGABRT);
    tcase_add_test(c, test_conv2d_empty_batch);
    suite_add_tcase(s, c);
    return s;
}
