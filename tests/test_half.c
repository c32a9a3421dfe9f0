/*
 * test_half.c — f32 <-> f16/bf16 conversions against AMP-SEMANTICS §5/§6 (PyTorch's values) and
 * the tensor statistics at the f16/bf16 range boundaries.
 */
#include "amp.h"
#include "tests.h"

#include <string.h>

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

START_TEST(test_f16_edges) {
    ck_assert_uint_eq(amp_f32_to_f16(65519.99f), 0x7BFF);
    ck_assert_uint_eq(amp_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(amp_f32_to_f16(-65520.0f), 0xFC00);
    ck_assert_uint_eq(amp_f32_to_f16(ldexpf(1, -25)), 0x0000);
    ck_assert_uint_eq(amp_f32_to_f16(ldexpf(1, -25) * (1 + 1.2e-7f)), 0x0001);
    ck_assert_uint_eq(amp_f32_to_f16(1 + ldexpf(1, -11)), 0x3C00);
    ck_assert_float_eq(amp_f16_to_f32(amp_f32_to_f16(1 + 3 * ldexpf(1, -11))), 1.001953125f);
    ck_assert_uint_eq(amp_f32_to_f16(0.1f), 0x2E66);
    ck_assert_uint_eq(amp_f32_to_f16(NAN), 0x7E00);
    ck_assert_uint_eq(amp_f32_to_f16(-NAN), 0xFE00);
    ck_assert_uint_eq(amp_f32_to_f16(INFINITY), 0x7C00);
    ck_assert_uint_eq(amp_f32_to_f16(-0.0f), 0x8000);
}
END_TEST

START_TEST(test_bf16_edges) {
    ck_assert_uint_eq(amp_f32_to_bf16(1 + ldexpf(1, -8)), 0x3F80);
    ck_assert_uint_eq(amp_f32_to_bf16(1 + 3 * ldexpf(1, -8)), 0x3F82);
    ck_assert_uint_eq(amp_f32_to_bf16(65504.0f), 0x4780);
    ck_assert_uint_eq(amp_f32_to_bf16(0.1f), 0x3DCD);
    ck_assert_float_eq(amp_bf16_to_f32(amp_f32_to_bf16(3.14159265f)), 3.140625f);
    ck_assert_uint_eq(amp_f32_to_bf16(3.3961775292304854e38f), 0x7F80);
    ck_assert_uint_eq(amp_f32_to_bf16(NAN), 0x7FC0);
    ck_assert_uint_eq(amp_f32_to_bf16(-INFINITY), 0xFF80);
}
END_TEST

// Every f16 value widens exactly and narrows back to itself (NaNs stay NaN).
START_TEST(test_f16_round_trip_all) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = amp_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            ck_assert((h & 0x7C00) == 0x7C00 && (h & 0x3FF));
            continue;
        }
        ck_assert_msg(amp_f32_to_f16(f) == h, "0x%04x -> %a -> 0x%04x", h, (double)f,
                      amp_f32_to_f16(f));
    }
}
END_TEST

// Widening a bf16 value is a 16-bit shift.
START_TEST(test_bf16_widen) {
    for (uint32_t h = 0; h < 65536; h += 7) ck_assert_uint_eq(bits(amp_bf16_to_f32((uint16_t)h)), h << 16);
}
END_TEST

START_TEST(test_stats_boundaries) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    float v[] = {65519.99f, 65520.0f, -70000.0f, ldexpf(1, -14), ldexpf(1, -15), 0.0f,
                 -0.0f,     NAN,      INFINITY,  -INFINITY,      1.0f,           -3.0f};
    int64_t n = sizeof v / sizeof v[0];
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, &n, v);
    amp_stats s;
    amp_tensor_stats(t, AMP_DTYPE_F16, &s);
    ck_assert_int_eq(s.numel, n);
    ck_assert_int_eq(s.n_nan, 1);
    ck_assert_int_eq(s.n_posinf, 1);
    ck_assert_int_eq(s.n_neginf, 1);
    ck_assert_int_eq(s.n_overflow, 2); // 65520 and -70000
    ck_assert_int_eq(s.n_underflow, 1); // 2^-15 is subnormal in f16; 2^-14 is the min normal
    ck_assert_int_eq(s.n_zero, 2);
    ck_assert_float_eq(s.min, -70000.0f);
    ck_assert_float_eq(s.max, 65520.0f);
    ck_assert_float_eq(s.amax, 70000.0f);
    double ss = 0; // the finite values' squares
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) ss += (double)v[i] * v[i];
    ck_assert_close(s.sumsq, ss, 0, 1e-6);

    amp_tensor_stats(t, AMP_DTYPE_BF16, &s); // bf16 holds all of these
    ck_assert_int_eq(s.n_overflow, 0);
    ck_assert_int_eq(s.n_underflow, 0);

    float w[] = {3.3961775e38f, 3.3e38f, ldexpf(1, -127), ldexpf(1, -126)};
    int64_t m = 4;
    amp_tensor_t *u = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, &m, w);
    amp_tensor_stats(u, AMP_DTYPE_BF16, &s);
    ck_assert_int_eq(s.n_overflow, 1);
    ck_assert_int_eq(s.n_underflow, 1);

    // an f16 tensor's subnormals count as underflow; no finite value -> NaN range
    float x[] = {ldexpf(1, -24), NAN};
    int64_t k = 2;
    amp_tensor_t *h = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, &k, x);
    amp_tensor_stats(h, AMP_DTYPE_F16, &s);
    ck_assert_int_eq(s.n_underflow, 1);
    float y[] = {NAN};
    int64_t one = 1;
    amp_tensor_stats(amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, &one, y), AMP_DTYPE_F16, &s);
    ck_assert(isnan(s.amax) && isnan(s.min));
    amp_ctx_free(ctx);
}
END_TEST

Suite *half_suite(void) {
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("convert");
    tcase_add_test(tc, test_f16_edges);
    tcase_add_test(tc, test_bf16_edges);
    tcase_add_test(tc, test_f16_round_trip_all);
    tcase_add_test(tc, test_bf16_widen);
    tcase_add_test(tc, test_stats_boundaries);
    suite_add_tcase(s, tc);
    return s;
}
