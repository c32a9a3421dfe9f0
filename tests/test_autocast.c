/*
 * test_autocast.c — the autocast policy (decisions per op and dtype, PyTorch's errors), regions
 * and their nesting, the weight-cast cache, and what autocast does to a real forward/backward.
 */
#include "amp-train.h"
#include "amp.h"
#include "tests.h"

#include <stdio.h>
#include <string.h>

#define F32 AMP_DTYPE_F32
#define F16 AMP_DTYPE_F16
#define BF16 AMP_DTYPE_BF16
#define I64 AMP_DTYPE_I64

static amp_dtype decide(const char *op, int n, const amp_dtype *in, amp_dtype ac) {
    amp_dtype out;
    amp_status s = amp_autocast_decide(op, n, in, ac, &out);
    ck_assert_msg(s == AMP_OK, "%s: %s", op, amp_last_error());
    return out;
}

START_TEST(test_policy_table) {
    ck_assert_int_eq(amp_autocast_policy("linear"), AMP_POLICY_LOWER_PRECISION_FP);
    ck_assert_int_eq(amp_autocast_policy("conv2d"), AMP_POLICY_LOWER_PRECISION_FP);
    ck_assert_int_eq(amp_autocast_policy("softmax"), AMP_POLICY_FP32_SET_OPT_DTYPE);
    ck_assert_int_eq(amp_autocast_policy("layer_norm"), AMP_POLICY_FP32);
    ck_assert_int_eq(amp_autocast_policy("norm"), AMP_POLICY_FP32_APPEND_DTYPE);
    ck_assert_int_eq(amp_autocast_policy("addcdiv"), AMP_POLICY_PROMOTE);
    ck_assert_int_eq(amp_autocast_policy("binary_cross_entropy"), AMP_POLICY_BANNED);
    ck_assert_int_eq(amp_autocast_policy("relu"), AMP_POLICY_NATIVE);
    ck_assert_int_eq(amp_autocast_policy("cross_entropy"), AMP_POLICY_FP32);
}
END_TEST

START_TEST(test_decisions) {
    ck_assert_int_eq(decide("mm", 2, (amp_dtype[]){F32, F32}, F16), F16);
    ck_assert_int_eq(decide("mm", 2, (amp_dtype[]){F32, F32}, BF16), BF16);
    ck_assert_int_eq(decide("softmax", 1, (amp_dtype[]){F16}, F16), F32);
    ck_assert_int_eq(decide("sum", 1, (amp_dtype[]){I64}, F16), I64);
    ck_assert_int_eq(decide("layer_norm", 3, (amp_dtype[]){F16, F32, F32}, F16), F32);
    ck_assert_int_eq(decide("addcdiv", 3, (amp_dtype[]){F32, F16, F16}, F16), F32);
    ck_assert_int_eq(decide("addcdiv", 3, (amp_dtype[]){F16, F16, F16}, F16), F16);
    ck_assert_int_eq(decide("cat", 2, (amp_dtype[]){F16, F32}, F16), F32);
    ck_assert_int_eq(decide("cat", 2, (amp_dtype[]){F16, F16}, F16), F16);
    ck_assert_int_eq(decide("relu", 1, (amp_dtype[]){F16}, F16), F16);
    ck_assert_int_eq(decide("add", 2, (amp_dtype[]){BF16, F16}, BF16), F32);
    amp_dtype out;
    ck_assert_int_eq(amp_autocast_decide("addcdiv", 3, (amp_dtype[]){BF16, F16, F16}, F16, &out),
                     AMP_ERR_AUTOCAST_DTYPE);
    ck_assert_str_eq(amp_last_error(),
                     "Unexpected floating ScalarType in at::autocast::prioritize");
    ck_assert_int_eq(
        amp_autocast_decide("binary_cross_entropy", 2, (amp_dtype[]){F32, F32}, F16, &out),
        AMP_ERR_AUTOCAST_BANNED);
    ck_assert(strstr(amp_last_error(), "binary_cross_entropy_with_logits") != NULL);
}
END_TEST

// Integer tensors as PyTorch promotes them: unary float ops and true division give f32, the
// sums i64, i32 with i64 is i64, a promote op without a floating argument runs natively; ops
// without an integer kernel raise.
START_TEST(test_decisions_with_integers) {
    const amp_dtype I32 = AMP_DTYPE_I32;
    ck_assert_int_eq(decide("exp", 1, (amp_dtype[]){I64}, F16), F32);
    ck_assert_int_eq(decide("log", 1, (amp_dtype[]){I32}, BF16), F32);
    ck_assert_int_eq(decide("tanh", 1, (amp_dtype[]){I64}, F16), F32);
    ck_assert_int_eq(decide("sigmoid", 1, (amp_dtype[]){I32}, F16), F32);
    ck_assert_int_eq(decide("div", 2, (amp_dtype[]){I32, I32}, F16), F32);
    ck_assert_int_eq(decide("add", 2, (amp_dtype[]){I32, F16}, F16), F16);
    ck_assert_int_eq(decide("mul", 2, (amp_dtype[]){BF16, I64}, F16), BF16);
    ck_assert_int_eq(decide("add", 2, (amp_dtype[]){I32, I64}, F16), I64);
    ck_assert_int_eq(decide("sum", 1, (amp_dtype[]){I32}, F16), I64);
    ck_assert_int_eq(decide("relu", 1, (amp_dtype[]){I32}, F16), I32);
    ck_assert_int_eq(decide("addcdiv", 3, (amp_dtype[]){I64, I64, I64}, F16), I64);
    ck_assert_int_eq(decide("mse_loss", 2, (amp_dtype[]){I64, F16}, F16), F32);
    ck_assert_int_eq(decide("nll_loss", 2, (amp_dtype[]){F16, I64}, F16), F32);
    const char *float_only[] = {"gelu", "softmax", "log_softmax", "layer_norm", "mean"};
    for (int i = 0; i < 5; i++) {
        amp_dtype out;
        ck_assert_int_eq(amp_autocast_decide(float_only[i], 1, (amp_dtype[]){I64}, F16, &out),
                         AMP_ERR_INVALID_ARGUMENT);
        char want[160];
        snprintf(want, sizeof want,
                 "%s takes floating tensors only (PyTorch has no integer kernel for it), got "
                 "i64: cast it with amp_to",
                 float_only[i]);
        ck_assert_str_eq(amp_last_error(), want);
    }
    // a lower-precision op given an integer tensor beside floating ones: PyTorch's autocast
    // leaves the integer one, and the op raises (it answered i32 for addmm(i32, f16, f16))
    amp_dtype out;
    ck_assert_int_eq(amp_autocast_decide("addmm", 3, (amp_dtype[]){I32, F16, F16}, F16, &out),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(),
                     "addmm: argument 0 is i32 beside floating tensors; autocast leaves an integer "
                     "tensor as it is and addmm takes one dtype (PyTorch raises a dtype "
                     "mismatch): cast it with amp_to");
    ck_assert_int_eq(amp_autocast_decide("conv2d", 2, (amp_dtype[]){F32, I64}, BF16, &out),
                     AMP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_null_and_bad_arguments) {
    ck_assert_int_eq(amp_autocast_policy(NULL), AMP_POLICY_NATIVE);
    amp_dtype out;
    ck_assert_int_eq(amp_autocast_decide("mm", 2, (amp_dtype[]){F32, F32}, F16, NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_autocast_decide: out is NULL");
    ck_assert_int_eq(amp_autocast_decide(NULL, 1, (amp_dtype[]){F32}, F16, &out),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(amp_autocast_decide("mm", 2, NULL, F16, &out), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(amp_autocast_decide("add", 2, (amp_dtype[]){F32, AMP_DTYPE_COUNT}, F16, &out),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "add: argument 1 has no dtype (5)");
    ck_assert_int_eq(amp_autocast_decide("add", 1, (amp_dtype[]){F32}, AMP_DTYPE_COUNT, &out),
                     AMP_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_regions_and_cache) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 3, &ctx), AMP_OK);
    int64_t ws[2] = {4, 3}, xs[2] = {2, 3};
    amp_tensor_t *w = amp_tensor_new(ctx, F32, 2, ws), *x = amp_tensor_new(ctx, F32, 2, xs);
    amp_tensor_randn(w, 1);
    amp_tensor_randn(x, 1);
    amp_tensor_set_requires_grad(w, true);

    ck_assert(!amp_autocast_is_enabled(ctx));
    amp_autocast_begin(ctx, true, F16, true);
    amp_tensor_t *y1 = amp_linear(ctx, x, w, NULL);
    ck_assert_int_eq(amp_tensor_dtype(y1), F16);
    amp_autocast_begin(ctx, false, F16, true); // a disabled region inside
    ck_assert_int_eq(amp_tensor_dtype(amp_linear(ctx, x, w, NULL)), F32);
    amp_autocast_begin(ctx, true, BF16, true);
    ck_assert_int_eq(amp_tensor_dtype(amp_linear(ctx, x, w, NULL)), BF16);
    amp_autocast_end(ctx);
    amp_autocast_end(ctx);
    ck_assert(amp_autocast_is_enabled(ctx));
    ck_assert_int_eq(amp_autocast_dtype(ctx), F16);
    amp_tensor_t *y2 = amp_linear(ctx, x, w, NULL);
    // softmax of an f16 tensor computes and returns f32; layer_norm casts to f32
    ck_assert_int_eq(amp_tensor_dtype(amp_softmax(ctx, y2, -1)), F32);
    ck_assert_int_eq(amp_tensor_dtype(amp_layer_norm(ctx, y2, NULL, NULL, 1e-5f)), F32);
    ck_assert_int_eq(amp_tensor_dtype(amp_relu(ctx, y2)), F16);
    ck_assert_int_eq(amp_tensor_dtype(amp_add(ctx, y2, amp_to(ctx, y2, F32))), F32);
    amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, y1, y2));
    ck_assert_int_eq(amp_tensor_dtype(loss), F32); // sum: fp32_set_opt_dtype
    amp_autocast_end(ctx);
    ck_assert(!amp_autocast_is_enabled(ctx));

    // the fp32 leaf gets an fp32 gradient, accumulated over both uses through one cached cast
    amp_backward(ctx, loss);
    ck_assert_int_eq(amp_tensor_dtype(amp_tensor_grad(w)), F32);
    float g[12];
    amp_tensor_read_f32(amp_tensor_grad(w), g);
    double norm = 0;
    for (int i = 0; i < 12; i++)
        norm += g[i] * g[i];
    ck_assert(norm > 0);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_bce_banned_under_autocast) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 3, &ctx), AMP_OK);
    int64_t n = 4;
    float p[4] = {0.1f, 0.5f, 0.9f, 0.0f}, t[4] = {0, 1, 1, 1};
    amp_tensor_t *P = amp_tensor_from_f32(ctx, F32, 1, &n, p),
                 *T = amp_tensor_from_f32(ctx, F32, 1, &n, t);
    amp_tensor_t *out;
    amp_autocast_begin(ctx, true, F16, true);
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, P, T, &out), AMP_ERR_AUTOCAST_BANNED);
    ck_assert_ptr_null(out);
    amp_autocast_end(ctx);
    ck_assert_int_eq(amp_binary_cross_entropy(ctx, P, T, &out), AMP_OK);
    // log(0) is clamped at -100 like PyTorch: (−log .9 − log .5 − log .9 + 100) / 4
    double want = (-log(0.9) - log(0.5) - log(0.9) + 100.0) / 4.0;
    ck_assert_close(amp_tensor_item(out), want, 1e-5, 1e-5);
    amp_ctx_free(ctx);
}
END_TEST

Suite *autocast_suite(void) {
    Suite *s = suite_create("autocast");
    TCase *tc = tcase_create("policy");
    tcase_add_test(tc, test_policy_table);
    tcase_add_test(tc, test_decisions);
    tcase_add_test(tc, test_decisions_with_integers);
    tcase_add_test(tc, test_null_and_bad_arguments);
    tcase_add_test(tc, test_regions_and_cache);
    tcase_add_test(tc, test_bce_banned_under_autocast);
    suite_add_tcase(s, tc);
    return s;
}
