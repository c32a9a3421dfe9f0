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
// Our names, the short ones and PyTorch's; nothing else, NULL included.
START_TEST(test_dtype_and_device_names) {
    static const struct {
        const char *s;
        amp_dtype t;
    } ok[] = {{"f16", AMP_DTYPE_F16},   {"fp16", AMP_DTYPE_F16},    {"float16", AMP_DTYPE_F16},
              {"half", AMP_DTYPE_F16},  {"bf16", AMP_DTYPE_BF16},   {"bfloat16", AMP_DTYPE_BF16},
              {"f32", AMP_DTYPE_F32},   {"float32", AMP_DTYPE_F32}, {"float", AMP_DTYPE_F32},
              {"int64", AMP_DTYPE_I64}, {"long", AMP_DTYPE_I64},    {"int", AMP_DTYPE_I32}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        amp_dtype t = ok[i].t == AMP_DTYPE_I32 ? AMP_DTYPE_F32 : AMP_DTYPE_I32; // not the answer
        ck_assert_msg(amp_dtype_parse(ok[i].s, &t) && t == ok[i].t, "%s", ok[i].s);
    }
    amp_dtype t;
    ck_assert(!amp_dtype_parse(NULL, &t));
    ck_assert(!amp_dtype_parse("", &t));
    ck_assert(!amp_dtype_parse("F16", &t));
    ck_assert(!amp_dtype_parse("float8", &t));
    amp_device d;
    ck_assert(!amp_device_parse(NULL, &d));
    ck_assert(!amp_device_parse("gpu", &d));
    ck_assert(amp_device_parse("cuda", &d) && d == AMP_DEVICE_CUDA);
}
END_TEST

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
    for (uint32_t h = 0; h < 65536; h += 7)
        ck_assert_uint_eq(bits(amp_bf16_to_f32((uint16_t)h)), h << 16);
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
    ck_assert_int_eq(s.n_overflow, 2);  // 65520 and -70000
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

// Statistics of views: a permutation of a contiguous tensor (read as its memory, in another
// order), the same of a piece of it (an offset), and a slice with gaps (read through a copy) all
// match the statistics of their contiguous copies.
START_TEST(test_stats_of_views) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    int64_t shape[3] = {4, 3, 6}, n = 4 * 3 * 6;
    float v[72];
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((i * 37) % 71) - 35.0f;
    v[5] = 7e4f, v[40] = -INFINITY, v[41] = NAN, v[70] = ldexpf(1, -20), v[71] = 0.0f;
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 3, shape, v);
    amp_tensor_t *pieces[4], *cols[3];
    ck_assert_int_eq(amp_split(ctx, t, 3, 0, pieces, 4), 2); // (3,3,6) at 0, (1,3,6) at 54
    ck_assert_int_eq(amp_split(ctx, t, 2, 2, cols, 3), 3);   // (4,3,2) with gaps
    const int perm[3] = {2, 0, 1};
    amp_tensor_t *views[] = {amp_permute(ctx, t, perm), amp_transpose(ctx, pieces[1], 0, 2),
                             amp_permute(ctx, pieces[0], perm), cols[1],
                             amp_transpose(ctx, cols[2], 1, 2)};
    for (int k = 0; k < (int)(sizeof views / sizeof *views); k++) {
        ck_assert(!amp_tensor_is_contiguous(views[k]) || k == 1);
        amp_stats a, b;
        amp_tensor_stats(views[k], AMP_DTYPE_F16, &a);
        amp_tensor_stats(amp_contiguous(ctx, views[k]), AMP_DTYPE_F16, &b);
        ck_assert_msg(a.numel == b.numel && a.n_nan == b.n_nan && a.n_neginf == b.n_neginf &&
                          a.n_overflow == b.n_overflow && a.n_underflow == b.n_underflow &&
                          a.n_zero == b.n_zero && a.min == b.min && a.max == b.max,
                      "view %d: numel %lld min %g max %g, contiguous copy: %lld %g %g", k,
                      (long long)a.numel, (double)a.min, (double)a.max, (long long)b.numel,
                      (double)b.min, (double)b.max);
        ck_assert_close(a.sumsq, b.sumsq, 0, 1e-12);
    }
    amp_ctx_free(ctx);
}
END_TEST

Suite *half_suite(void) {
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("convert");
    tcase_add_test(tc, test_f16_edges);
    tcase_add_test(tc, test_dtype_and_device_names);
    tcase_add_test(tc, test_bf16_edges);
    tcase_add_test(tc, test_f16_round_trip_all);
    tcase_add_test(tc, test_bf16_widen);
    tcase_add_test(tc, test_stats_boundaries);
    tcase_add_test(tc, test_stats_of_views);
    suite_add_tcase(s, tc);
    return s;
}
