/*
 * test_scaler.c — the `scaler` suite: GradScaler against AMP-SEMANTICS.md §3, §4 and §6 — the
 * update arithmetic (S1–S9, bit-exact), unscale_ (U1–U7, including lines of the golden
 * unscale.txt), the per-optimizer stage machine with PyTorch's messages (U8), lazy scale
 * creation, several optimizers, gradient accumulation, the disabled scaler and state save/load.
 */
#include "tests.h"

#include "amp-impl.h"

#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers

static uint32_t bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static void read(const amp_tensor_t *t, float *out) {
    amp_tensor_read_f32(t, out);
}

static amp_optim_t *sgd(amp_ctx_t *ctx, amp_tensor_t *p, float lr) {
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.lr = lr;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &p, 1, &opt), AMP_OK);
    return opt;
}

static amp_scaler_t *scaler(float init, double gf, double bf, int interval) {
    amp_scaler_params sp = {init, gf, bf, interval, true};
    amp_scaler_t *sc;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    return sc;
}

// Runs scale() once on a dummy loss so that _scale exists.
static void create_scale(amp_scaler_t *sc, amp_ctx_t *ctx) {
    amp_tensor_t *loss = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){1.0f});
    ck_assert_ptr_nonnull(amp_scaler_scale(sc, ctx, loss));
}

#define ck_assert_error(expr, status, msg)                                                         \
    do {                                                                                           \
        ck_assert_int_eq((expr), (status));                                                        \
        ck_assert_str_eq(amp_last_error(), (msg));                                                 \
    } while (0)

#define MSG_NONE(fn)                                                                               \
    "Attempted " fn " but _scale is None.  This may indicate your script did not use "             \
    "scaler.scale(loss or outputs) earlier in the iteration."

// ---------------------------------------------------------------------------------------------
// amp_scale_update: §6 S1–S9

typedef struct upd {
    float fi;
    float scale;
    int32_t tracker;
} upd;

static void run_updates(float init, double gf, double bf, int interval, const upd *u, int n) {
    float s = init;
    int32_t t = 0;
    for (int i = 0; i < n; i++) {
        amp_scale_update(&s, &t, u[i].fi, gf, bf, interval);
        ck_assert_msg(bits(s) == bits(u[i].scale) && t == u[i].tracker,
                      "update %d: got (%.9g, %d), want (%.9g, %d)", i, s, t, u[i].scale,
                      u[i].tracker);
    }
}

START_TEST(test_s1_growth_and_backoff) {
    const upd u[] = {{0, 65536, 1}, {0, 65536, 2}, {0, 131072, 0}, {1, 65536, 0},
                     {0, 65536, 1}, {1, 32768, 0}, {1, 16384, 0},  {0, 16384, 1},
                     {0, 16384, 2}, {0, 32768, 0}, {0, 32768, 1}};
    run_updates(65536, 2, 0.5, 3, u, 11);
}
END_TEST

START_TEST(test_s2_odd_scale) {
    const upd u[] = {{0, 3, 1}, {0, 6, 0}, {1, 3, 0}, {0, 3, 1}, {0, 6, 0}};
    run_updates(3, 2, 0.5, 2, u, 5);
}
END_TEST

START_TEST(test_s3_growth_cap) {
    const float max = 1.7014118346046923e38f; // 2^127
    const upd u[] = {{0, max, 0}, {0, max, 0}, {0, max, 0}};
    run_updates(ldexpf(1, 126), 2, 0.5, 1, u, 3);
}
END_TEST

START_TEST(test_s4_rounding) {
    const upd u[] = {{0, from_bits(0x3F8CCCCD), 0},
                     {0, from_bits(0x3F9AE148), 0},
                     {0, from_bits(0x3FAA5E36), 0}};
    run_updates(1, 1.1, 0.5, 1, u, 3);
}
END_TEST

START_TEST(test_s5_backoff_rounding) {
    const upd u[] = {{1, from_bits(0x4699999A), 0},
                     {1, from_bits(0x45B851EC), 0},
                     {1, from_bits(0x44DD2F1B), 0}};
    run_updates(65536, 2, 0.3, 2000, u, 3);
}
END_TEST

START_TEST(test_s6_collapse) {
    float s = 65536;
    int32_t t = 0;
    for (int i = 1; i <= 200; i++) {
        amp_scale_update(&s, &t, 1, 2, 0.5, 2000);
        if (i == 16) ck_assert_uint_eq(bits(s), bits(1.0f));
        if (i == 165) ck_assert_uint_eq(bits(s), 0x00000001u); // 2^-149, no flush to zero
        if (i >= 166) ck_assert_uint_eq(bits(s), 0u);          // the tie rounds to even: +0
    }
}
END_TEST

START_TEST(test_s7_summed_found_inf) {
    float s = 65536;
    int32_t t = 7;
    amp_scale_update(&s, &t, 2.0f, 2, 0.5, 2000);
    ck_assert_float_eq(s, 32768);
    ck_assert_int_eq(t, 0);
    amp_scale_update(&s, &t, NAN, 2, 0.5, 2000); // `if (*found_inf)`: NaN is true
    ck_assert_float_eq(s, 16384);
}
END_TEST

START_TEST(test_s8_update_to_keeps_tracker) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(65536, 2, 0.5, 2000);
    create_scale(sc, ctx);
    for (int i = 0; i < 5; i++) {
        test_set_grad_f32(ctx, p, (float[]){1});
        ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    }
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 5);
    ck_assert_int_eq(amp_scaler_update_to(sc, 1024.0f), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 1024);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 5);
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), -1);
    // update_to also resets the stages: step is allowed again.
    test_set_grad_f32(ctx, p, (float[]){1});
    ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_s9_interval_zero) {
    const upd u[] = {{0, 1024, 1}, {0, 1024, 2}, {0, 1024, 3}};
    run_updates(1024, 2, 0.5, 0, u, 3);
    float s = 1024;
    int32_t t = INT32_MAX; // counts on without limit: wraps instead of UB
    amp_scale_update(&s, &t, 0, 2, 0.5, 0);
    ck_assert_int_eq(t, INT32_MIN);
    ck_assert_float_eq(s, 1024);
}
END_TEST

// Lines of ../shared/golden/scaler_updates.txt (PyTorch 2.11 on an H200), copied by hand:
// case seed_tuned 262144.0 1.2 0.8 500, infs at updates 500, 1000, 1500 only.
START_TEST(test_golden_seed_tuned) {
    float s = 262144;
    int32_t t = 0;
    for (int k = 1; k <= 2000; k++) {
        amp_scale_update(&s, &t, k % 500 == 0 && k < 2000 ? 1 : 0, 1.2, 0.8, 500);
        if (k == 499) ck_assert_int_eq(t, 499);
        if (k == 500) ck_assert_uint_eq(bits(s), 0x484ccccdu);  // 209715.203125
        if (k == 1000) ck_assert_uint_eq(bits(s), 0x4823d70au); // 167772.15625
        if (k == 1500) ck_assert_uint_eq(bits(s), 0x4803126eu); // 134217.71875
    }
    ck_assert_uint_eq(bits(s), 0x481d4951u); // 161061.265625: grown at update 2000
    ck_assert_int_eq(t, 0);
}
END_TEST

START_TEST(test_inv_scale) {
    ck_assert_uint_eq(bits(amp_inv_scale(65536)), 0x37800000u);
    ck_assert_uint_eq(bits(amp_inv_scale(3)), 0x3EAAAAABu);
    ck_assert_float_eq(amp_inv_scale(ldexpf(1, -127)), ldexpf(1, 127));
    ck_assert(isinf(amp_inv_scale(ldexpf(1, -128))));
    ck_assert(isinf(amp_inv_scale(0)));
}
END_TEST

// ---------------------------------------------------------------------------------------------
// unscale_: §6 U1–U7

// unscale_ of one f32 gradient at a scale; returns found_inf as update() would see it.
static float unscale_one(float scale, int n, const float *in, float *out) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, n, in);
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(scale, 2, 0.5, 2000);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, p, in);
    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
    read(amp_tensor_grad(p), out);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    float fi = amp_scaler_last_found_inf(sc);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
    return fi;
}

START_TEST(test_u1_finite) {
    float out[4];
    float fi = unscale_one(65536, 4, (float[]){131072, -3, 0, 1e-30f}, out);
    ck_assert_float_eq(fi, 0);
    ck_assert_float_eq(out[0], 2);
    ck_assert_float_eq(out[1], -4.57763671875e-05f);
    ck_assert_uint_eq(bits(out[2]), 0u);
    ck_assert_uint_eq(bits(out[3]), bits(1.5258789110886793e-35f));
    // golden unscale.txt U1: 48000000 c0400000 00000000 0da24260 -> 40000000 b8400000 0 05a24260
    fi = unscale_one(
        65536, 4, (float[]){from_bits(0x48000000), from_bits(0xc0400000), 0, from_bits(0x0da24260)},
        out);
    const uint32_t want[4] = {0x40000000, 0xb8400000, 0, 0x05a24260};
    ck_assert_float_eq(fi, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(bits(out[i]), want[i]);
}
END_TEST

START_TEST(test_u2_nonfinite) {
    float out[2];
    ck_assert_float_eq(unscale_one(65536, 2, (float[]){1, INFINITY}, out), 1);
    ck_assert_float_eq(out[0], 1.52587890625e-05f);
    ck_assert(isinf(out[1]) && out[1] > 0);
    ck_assert_float_eq(unscale_one(65536, 1, (float[]){NAN}, out), 1);
    ck_assert(isnan(out[0]));
    ck_assert_float_eq(unscale_one(65536, 2, (float[]){-INFINITY, 2}, out), 1);
    ck_assert(isinf(out[0]) && out[0] < 0);
    ck_assert_uint_eq(bits(out[1]), 0x38000000u);
}
END_TEST

START_TEST(test_u3_scale_one_is_bit_exact) {
    const uint32_t in[4] = {0x80000000, 0x3fc00000, 0x7fc00001, 0x40e00000};
    float v[4], out[4];
    for (int i = 0; i < 4; i++)
        v[i] = from_bits(in[i]);
    ck_assert_float_eq(unscale_one(1, 4, v, out), 1);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(bits(out[i]), in[i]);
}
END_TEST

START_TEST(test_u4_multiply_not_divide) {
    float out[2];
    ck_assert_float_eq(unscale_one(3, 2, (float[]){3, 7}, out), 0);
    ck_assert_uint_eq(bits(out[0]), 0x3f800000u);
    ck_assert_uint_eq(bits(out[1]), 0x40155556u); // 2.3333334922790527 (7 / 3 would be ...552)
}
END_TEST

START_TEST(test_u5_tiny_scale_steps_with_nan) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 2, (float[]){1, 1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(ldexpf(1, -128), 2, 0.5, 2000);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, p, (float[]){0, 1e-3f});
    bool skipped = true;
    ck_assert_int_eq(amp_scaler_step(sc, opt, &skipped), AMP_OK);
    ck_assert(!skipped); // found_inf stays 0: the inputs were finite
    float g[2], w[2];
    read(amp_tensor_grad(p), g);
    ck_assert(isnan(g[0]));
    ck_assert(isinf(g[1]) && g[1] > 0);
    read(p, w);
    ck_assert(isnan(w[0]) && isinf(w[1]));
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), 0);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_u6_fp16_grads) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 2, (float[]){1, 2});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(65536, 2, 0.5, 2000);
    create_scale(sc, ctx);
    // PyTorch refuses the gradients of f16 parameters. Optimizers take f32 parameters only, so
    // one is planted by relabelling p (nothing reads its storage before the error).
    test_set_grad_f32(ctx, p, (float[]){65536, 65536});
    p->dtype = AMP_DTYPE_F16;
    ck_assert_error(amp_scaler_unscale(sc, opt), AMP_ERR_SCALER_FP16_GRADS,
                    "Attempting to unscale FP16 gradients.");
    ck_assert_error(amp_scaler_step(sc, opt, NULL), AMP_ERR_SCALER_FP16_GRADS,
                    "Attempting to unscale FP16 gradients.");
    p->dtype = AMP_DTYPE_F32;
    // The stage stayed READY: with a real gradient the step goes through.
    ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
    float w[2];
    read(p, w);
    ck_assert_float_eq(w[0], 0.9f);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// A parameter that reaches the graph only through a cast to f16 keeps its gradient in f16 (the
// cast's backward hands it on; widening is exact): unscale_ reads it there and writes the
// unscaled f32 gradient, the same bits as unscaling the widened gradient. bits[] are f16
// gradients at scale 2^16: normal, subnormal once unscaled, the f16 max, and inf (found_inf).
START_TEST(test_u6_narrow_grads) {
    const float g16[3][2] = {{0.5f, 3.0f}, {65504.0f, 1.0f}, {INFINITY, 2.0f}};
    for (int k = 0; k < 3; k++) {
        amp_ctx_t *ctx = test_cpu_ctx();
        amp_tensor_t *p = test_param_f32(ctx, 2, (float[]){1, 2});
        amp_optim_t *opt = sgd(ctx, p, 0.1f);
        amp_scaler_t *sc = scaler(65536, 2, 0.5, 2000);
        create_scale(sc, ctx);
        // loss = sum(f16(p) * c), so p's gradient is c's values, made in f16
        amp_tensor_t *c = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, (int64_t[]){2}, g16[k]);
        amp_backward(ctx, amp_sum(ctx, amp_mul(ctx, amp_to(ctx, p, AMP_DTYPE_F16), c)));
        ck_assert_int_eq(p->grad->dtype, AMP_DTYPE_F16); // kept narrow, in storage of p's own
        ck_assert(p->grad->persistent);
        amp_ctx_reset(ctx); // the step's scratch goes; the gradient stays
        ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
        ck_assert_int_eq(p->grad->dtype, AMP_DTYPE_F32);
        float g[2];
        read(amp_tensor_grad(p), g);
        for (int i = 0; i < 2; i++) { // float32(1 / 65536) is exact
            ck_assert_uint_eq(bits(g[i]), bits(g16[k][i] * (1.0f / 65536)));
        }
        ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
        ck_assert_float_eq(amp_scaler_last_found_inf(sc), k == 2 ? 1 : 0);
        amp_scaler_free(sc);
        amp_optim_free(opt);
        amp_ctx_free(ctx);
    }
}
END_TEST

// The fused kernel's pure check path (inv_scale == 1) on f16: golden unscale.txt F16check.
START_TEST(test_u6_kernel_f16_check_path) {
    amp_ctx_t *ctx = test_cpu_ctx();
    const uint16_t in[4] = {0x3c00, 0x7bff, 0x7c00, 0x0001};
    amp_tensor_t *g = amp_tensor_from(ctx, AMP_DTYPE_F16, 1, (int64_t[]){4}, in);
    amp_tensor_t *fi = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
    const float one = 1.0f;
    ctx->be->unscale(ctx->bctx, &g, NULL, 1, amp_tensor_from(ctx, AMP_DTYPE_F32, 0, NULL, &one),
                     fi);
    uint16_t out[4];
    amp_tensor_read(g, out);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(out[i], in[i]);
    ck_assert_float_eq(amp_tensor_item(fi), 1);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_u7_two_optimizers) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *a = test_param_f32(ctx, 1, (float[]){1}),
                 *b = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *oa = sgd(ctx, a, 1), *ob = sgd(ctx, b, 1);
    amp_scaler_t *sc = scaler(4, 2, 0.5, 1);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, a, (float[]){2});
    test_set_grad_f32(ctx, b, (float[]){INFINITY});
    bool sa = true, sb = false;
    ck_assert_int_eq(amp_scaler_step(sc, oa, &sa), AMP_OK);
    ck_assert_int_eq(amp_scaler_step(sc, ob, &sb), AMP_OK);
    ck_assert(!sa && sb);
    float wa, wb;
    read(a, &wa);
    read(b, &wb);
    ck_assert_float_eq(wa, 0.5f); // 1 - 2/4
    ck_assert_float_eq(wb, 1);
    ck_assert_int_eq(amp_optim_steps(oa), 1);
    ck_assert_int_eq(amp_optim_steps(ob), 0);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 2); // backoff, although A was clean
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), 1);

    // Both overflow: the found_infs are summed (S7 through the scaler).
    test_set_grad_f32(ctx, a, (float[]){NAN});
    test_set_grad_f32(ctx, b, (float[]){INFINITY});
    ck_assert_int_eq(amp_scaler_step(sc, oa, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_step(sc, ob, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), 2);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 1);

    // Both clean: one update counts once (interval 1 grows once, not twice).
    test_set_grad_f32(ctx, a, (float[]){1});
    test_set_grad_f32(ctx, b, (float[]){1});
    ck_assert_int_eq(amp_scaler_step(sc, oa, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_step(sc, ob, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 2);
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), 0);
    amp_scaler_free(sc);
    amp_optim_free(oa);
    amp_optim_free(ob);
    amp_ctx_free(ctx);
}
END_TEST

// An optimizer that was unscaled but not stepped still counts in update() (PyTorch sums every
// recorded found_inf).
START_TEST(test_unscaled_only_counts_in_update) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *a = test_param_f32(ctx, 1, (float[]){1}),
                 *b = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *oa = sgd(ctx, a, 1), *ob = sgd(ctx, b, 1);
    amp_scaler_t *sc = scaler(4, 2, 0.5, 2000);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, a, (float[]){1});
    test_set_grad_f32(ctx, b, (float[]){INFINITY});
    ck_assert_int_eq(amp_scaler_step(sc, oa, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_unscale(sc, ob), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 2);
    amp_scaler_free(sc);
    amp_optim_free(oa);
    amp_optim_free(ob);
    amp_ctx_free(ctx);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The stage machine and lazy scale: §6 U8

START_TEST(test_u8_stage_errors) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(2, 2, 0.5, 2000);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, p, (float[]){1});

    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
    ck_assert_error(amp_scaler_unscale(sc, opt), AMP_ERR_SCALER_STATE,
                    "unscale_() has already been called on this optimizer since the last "
                    "update().");
    float g;
    read(amp_tensor_grad(p), &g);
    ck_assert_float_eq(g, 0.5f); // unscaled once, not twice
    ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
    ck_assert_error(amp_scaler_unscale(sc, opt), AMP_ERR_SCALER_STATE,
                    "unscale_() is being called after step().");
    ck_assert_error(amp_scaler_step(sc, opt, NULL), AMP_ERR_SCALER_STATE,
                    "step() has already been called since the last update().");
    ck_assert_int_eq(amp_optim_steps(opt), 1);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    // update() forgot the optimizer: with no step since, there is nothing to update from.
    ck_assert_error(amp_scaler_update(sc), AMP_ERR_SCALER_STATE,
                    "No inf checks were recorded prior to update.");
    // ... and it is READY again.
    test_set_grad_f32(ctx, p, (float[]){1});
    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_u8_before_scale) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(1024, 2, 0.5, 2000);
    test_set_grad_f32(ctx, p, (float[]){1});
    ck_assert_error(amp_scaler_unscale(sc, opt), AMP_ERR_SCALER_STATE, MSG_NONE("unscale_"));
    ck_assert_error(amp_scaler_step(sc, opt, NULL), AMP_ERR_SCALER_STATE, MSG_NONE("step"));
    ck_assert_error(amp_scaler_update(sc), AMP_ERR_SCALER_STATE, MSG_NONE("update"));
    ck_assert_error(amp_scaler_update_to(sc, 8), AMP_ERR_SCALER_STATE, MSG_NONE("update"));
    // Nothing happened, and the queries report the init values.
    float w, g;
    read(p, &w);
    read(amp_tensor_grad(p), &g);
    ck_assert_float_eq(w, 1);
    ck_assert_float_eq(g, 1);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 1024);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 0);
    ck_assert_float_eq(amp_scaler_last_found_inf(sc), -1);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_no_grads_recorded) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(2, 2, 0.5, 2000);
    create_scale(sc, ctx);
    ck_assert_error(amp_scaler_step(sc, opt, NULL), AMP_ERR_SCALER_STATE,
                    "No inf checks were recorded for this optimizer.");
    ck_assert_error(amp_scaler_update(sc), AMP_ERR_SCALER_STATE,
                    "No inf checks were recorded prior to update.");
    ck_assert_int_eq(amp_optim_steps(opt), 0);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_null_grads_skipped) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *ps[2] = {test_param_f32(ctx, 1, (float[]){1}),
                           test_param_f32(ctx, 1, (float[]){5})};
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.lr = 1;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, ps, 2, &opt), AMP_OK);
    amp_scaler_t *sc = scaler(8, 2, 0.5, 2000);
    create_scale(sc, ctx);
    test_set_grad_f32(ctx, ps[1], (float[]){8});
    ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
    ck_assert_ptr_null(amp_tensor_grad(ps[0]));
    float w0, w1;
    read(ps[0], &w0);
    read(ps[1], &w1);
    ck_assert_float_eq(w0, 1);
    ck_assert_float_eq(w1, 4);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// scale(), accumulation, a short training loop

START_TEST(test_scale_dtypes) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_scaler_t *sc = scaler(65536, 2, 0.5, 2000);
    amp_tensor_t *l32 = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){1.5f});
    amp_tensor_t *s = amp_scaler_scale(sc, ctx, l32);
    ck_assert_int_eq(amp_tensor_dtype(s), AMP_DTYPE_F32);
    ck_assert_float_eq(amp_tensor_item(s), 98304);
    // A 0-dim f16 loss meets the 0-dim f32 scale: the result is f32 and does not overflow.
    amp_tensor_t *l16 = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 0, NULL, (float[]){2.0f});
    s = amp_scaler_scale(sc, ctx, l16);
    ck_assert_int_eq(amp_tensor_dtype(s), AMP_DTYPE_F32);
    ck_assert_float_eq(amp_tensor_item(s), 131072);
    // A dimensioned f16 tensor keeps its dtype and overflows.
    amp_tensor_t *v16 = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, (int64_t[]){1}, (float[]){2.0f});
    s = amp_scaler_scale(sc, ctx, v16);
    ck_assert_int_eq(amp_tensor_dtype(s), AMP_DTYPE_F16);
    ck_assert(isinf(amp_tensor_item(s)));
    amp_scaler_free(sc);
    amp_ctx_free(ctx);
}
END_TEST

// Several scale(loss).backward() before one step: the gradients add up, scaled, and one
// unscale_ brings the sum back.
START_TEST(test_gradient_accumulation) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *w = test_param_f32(ctx, 2, (float[]){1, 2});
    amp_optim_t *opt = sgd(ctx, w, 1);
    amp_scaler_t *sc = scaler(1024, 2, 0.5, 2000);
    const float xs[3][2] = {{1, 2}, {3, -1}, {0.5f, 0.25f}};
    for (int m = 0; m < 3; m++) {
        amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, (int64_t[]){2}, xs[m]);
        amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, w, x)); // d loss / d w = x
        amp_backward(ctx, amp_scaler_scale(sc, ctx, loss));
        amp_ctx_reset(ctx);
    }
    float g[2];
    read(amp_tensor_grad(w), g);
    ck_assert_float_eq(g[0], 1024 * 4.5f);
    ck_assert_float_eq(g[1], 1024 * 1.25f);
    bool skipped = true;
    ck_assert_int_eq(amp_scaler_step(sc, opt, &skipped), AMP_OK);
    ck_assert(!skipped);
    float v[2];
    read(w, v);
    ck_assert_float_eq(v[0], 1 - 4.5f);
    ck_assert_float_eq(v[1], 2 - 1.25f);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 1);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// A loop whose loss overflows the f16 scaled gradient at a high scale: the scale backs off
// until the step succeeds, skipped steps leave the weights and the step count alone.
START_TEST(test_training_loop_backoff) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *w = test_param_f32(ctx, 1, (float[]){3});
    amp_optim_t *opt = sgd(ctx, w, 0.01f);
    amp_scaler_t *sc = scaler(65536, 2, 0.5, 2);
    int skips = 0;
    for (int step = 0; step < 8; step++) {
        amp_optim_zero_grad(opt);
        amp_tensor_t *x = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, (int64_t[]){1}, (float[]){4});
        amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, amp_to(ctx, w, AMP_DTYPE_F16), x));
        amp_backward(ctx, amp_scaler_scale(sc, ctx, loss));
        float before;
        read(w, &before);
        bool skipped;
        ck_assert_int_eq(amp_scaler_step(sc, opt, &skipped), AMP_OK);
        float after;
        read(w, &after);
        // scale * 4 in f16 overflows while scale >= 16384 (4 * 16384 = 65536 > 65504)
        ck_assert_int_eq(skipped, amp_scaler_get_scale(sc) >= 16384);
        ck_assert(skipped ? after == before : after != before);
        skips += skipped;
        ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
        amp_tensor_free(x);
        amp_ctx_reset(ctx);
    }
    // 65536, 32768, 16384 skip; 8192 twice grows to 16384 (interval 2), which skips again; ...
    ck_assert_int_eq(skips, 4);
    ck_assert_int_eq(amp_optim_steps(opt), 4);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Construction, disabled scaler, state_dict

START_TEST(test_constructor_checks) {
    amp_scaler_t *sc = (amp_scaler_t *)1;
    amp_scaler_params sp = amp_scaler_defaults();
    ck_assert_float_eq(sp.init_scale, 65536);
    ck_assert(sp.growth_factor == 2.0 && sp.backoff_factor == 0.5);
    ck_assert_int_eq(sp.growth_interval, 2000);
    ck_assert(sp.enabled);
    sp.growth_factor = 1.0;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "The growth factor must be > 1.0."));
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "growth_factor=1"));
    sp.growth_factor = NAN;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_ERR_INVALID_ARGUMENT);
    sp = amp_scaler_defaults();
    sp.backoff_factor = 1.0;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "The backoff factor must be < 1.0."));
    // Accepted as in PyTorch: interval <= 0, backoff <= 0; and anything when disabled.
    sp = amp_scaler_defaults();
    sp.growth_interval = -3;
    sp.backoff_factor = 0;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    amp_scaler_free(sc);
    sp.enabled = false;
    sp.growth_factor = 0.5;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    amp_scaler_free(sc);
    amp_scaler_free(NULL);
}
END_TEST

START_TEST(test_disabled_passes_through) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 1);
    amp_scaler_params sp = amp_scaler_defaults();
    sp.enabled = false;
    amp_scaler_t *sc;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    ck_assert(!amp_scaler_is_enabled(sc));
    amp_tensor_t *loss = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 0, NULL, (float[]){3});
    ck_assert_ptr_eq(amp_scaler_scale(sc, ctx, loss), loss);
    test_set_grad_f32(ctx, p, (float[]){INFINITY});
    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK); // no stages either
    test_set_grad_f32(ctx, p, (float[]){2});
    bool skipped = true;
    ck_assert_int_eq(amp_scaler_step(sc, opt, &skipped), AMP_OK);
    ck_assert(!skipped);
    float w;
    read(p, &w);
    ck_assert_float_eq(w, -1); // unscaled gradient used as is
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_int_eq(amp_scaler_update_to(sc, 5), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 1);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 0);
    amp_scaler_state st;
    ck_assert_int_eq(amp_scaler_state_dict(sc, &st), AMP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "disabled"));
    st = (amp_scaler_state){8, 0.5, 2, 1, 1}; // invalid factors too: load is a no-op
    ck_assert_int_eq(amp_scaler_load_state_dict(sc, &st), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 1);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_state_dict_round_trip) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = sgd(ctx, p, 0.1f);
    amp_scaler_t *sc = scaler(512, 3, 0.25, 4);
    amp_scaler_state st;
    ck_assert_int_eq(amp_scaler_state_dict(sc, &st), AMP_OK); // before scale(): init values
    ck_assert_float_eq(st.scale, 512);
    ck_assert_int_eq(st.growth_tracker, 0);
    create_scale(sc, ctx);
    for (int i = 0; i < 3; i++) { // 3 clean updates, then one inf
        test_set_grad_f32(ctx, p, (float[]){i == 2 ? INFINITY : 1});
        ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    }
    test_set_grad_f32(ctx, p, (float[]){1});
    ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    ck_assert_int_eq(amp_scaler_state_dict(sc, &st), AMP_OK);
    ck_assert_float_eq(st.scale, 128);
    ck_assert_int_eq(st.growth_tracker, 1);
    ck_assert(st.growth_factor == 3 && st.backoff_factor == 0.25);
    ck_assert_int_eq(st.growth_interval, 4);

    // Into a fresh scaler: the loaded values are the init values until scale() creates them.
    amp_scaler_t *sc2 = scaler(65536, 2, 0.5, 2000);
    ck_assert_int_eq(amp_scaler_load_state_dict(sc2, &st), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc2), 128);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc2), 1);
    ck_assert_error(amp_scaler_update(sc2), AMP_ERR_SCALER_STATE, MSG_NONE("update"));
    create_scale(sc2, ctx);
    for (int i = 0; i < 3; i++) {
        test_set_grad_f32(ctx, p, (float[]){1});
        ck_assert_int_eq(amp_scaler_step(sc2, opt, NULL), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(sc2), AMP_OK);
    }
    ck_assert_float_eq(amp_scaler_get_scale(sc2), 384); // grew by 3 after 4 clean in a row
    ck_assert_int_eq(amp_scaler_growth_tracker(sc2), 0);

    // Into a live scaler: fill_ of the live values. Bad factors are refused, nothing changes.
    st.scale = 7;
    st.growth_tracker = 2;
    ck_assert_int_eq(amp_scaler_load_state_dict(sc, &st), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 7);
    ck_assert_int_eq(amp_scaler_growth_tracker(sc), 2);
    amp_scaler_state bad = st;
    bad.scale = 99;
    bad.backoff_factor = 2;
    ck_assert_int_eq(amp_scaler_load_state_dict(sc, &bad), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_float_eq(amp_scaler_get_scale(sc), 7);
    amp_scaler_free(sc);
    amp_scaler_free(sc2);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// NULL arguments: AMP_ERR_INVALID_ARGUMENT naming them (they crashed).
START_TEST(test_null_arguments) {
    amp_scaler_params sp = amp_scaler_defaults();
    amp_scaler_t *sc = (amp_scaler_t *)1;
    ck_assert_int_eq(amp_scaler_new(NULL, &sc), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_scaler_new: p is NULL");
    ck_assert_ptr_null(sc);
    ck_assert_int_eq(amp_scaler_new(&sp, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_scaler_new: out is NULL");
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    ck_assert_int_eq(amp_scaler_state_dict(sc, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_scaler_state_dict: out is NULL");
    ck_assert_int_eq(amp_scaler_load_state_dict(sc, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_scaler_load_state_dict: st is NULL");
    amp_scaler_free(sc);
}
END_TEST

// A NULL scaler or optimizer in the training loop's calls: AMP_ERR_INVALID_ARGUMENT naming it,
// enabled or not (update(NULL) crashed; unscale and step blamed "_scale is None").
START_TEST(test_null_scaler_or_optimizer) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &p, 1, &opt), AMP_OK);
    for (int enabled = 0; enabled < 2; enabled++) {
        amp_scaler_params sp = amp_scaler_defaults();
        sp.enabled = enabled;
        amp_scaler_t *sc;
        ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
        bool skipped = true;
        ck_assert_int_eq(amp_scaler_update(NULL), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_update: sc is NULL");
        ck_assert_int_eq(amp_scaler_update_to(NULL, 2), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_update_to: sc is NULL");
        ck_assert_int_eq(amp_scaler_unscale(NULL, opt), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_unscale: sc is NULL");
        ck_assert_int_eq(amp_scaler_unscale(sc, NULL), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_unscale: opt is NULL");
        ck_assert_int_eq(amp_scaler_step(NULL, opt, &skipped), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_step: sc is NULL");
        ck_assert(!skipped);
        ck_assert_int_eq(amp_scaler_step(sc, NULL, NULL), AMP_ERR_INVALID_ARGUMENT);
        ck_assert_str_eq(amp_last_error(), "amp_scaler_step: opt is NULL");
        amp_scaler_free(sc);
    }
    ck_assert_int_eq(amp_optim_set_params(NULL, &op), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_optim_set_params: opt is NULL");
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// Clipping with a GradScaler, as README's libampcore section says: unscale, then scale the
// gradients in place through amp_tensor_grad (a gradient autocast's cast kept in f16 included):
// the step applies the clipped gradients.
START_TEST(test_clip_after_unscale_reaches_the_step) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *w =
        amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_t *x =
        amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, (int64_t[]){1, 3}, (float[]){1, -2, 0.5f});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.lr = 0.5;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_OK);
    amp_scaler_params sp = amp_scaler_defaults();
    sp.init_scale = 1024; // (65536 * 2 overflows the f16 gradient)
    amp_scaler_t *sc;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    amp_autocast_begin(ctx, true, AMP_DTYPE_F16, true);
    amp_tensor_t *y = amp_linear(ctx, x, w, NULL); // (1, 2) f16: w's gradient is kept in f16
    amp_autocast_end(ctx);
    amp_backward(ctx, amp_scaler_scale(sc, ctx, amp_sum(ctx, amp_to(ctx, y, AMP_DTYPE_F32))));
    ck_assert_int_eq(amp_scaler_unscale(sc, opt), AMP_OK);
    amp_tensor_t *g = amp_tensor_grad(w);
    float gv[6], w0[6] = {1, 2, 3, 4, 5, 6}, w1[6];
    amp_tensor_read_f32(g, gv);
    for (int i = 0; i < 6; i++) { // d sum(x w^T) / dw = x in each row
        ck_assert_float_eq(gv[i], ((float[]){1, -2, 0.5f})[i % 3]);
        gv[i] *= 0.25f; // clip
    }
    amp_tensor_write_f32(g, gv);
    bool skipped = true;
    ck_assert_int_eq(amp_scaler_step(sc, opt, &skipped), AMP_OK);
    ck_assert(!skipped);
    ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
    amp_tensor_read_f32(w, w1);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(w1[i], w0[i] - 0.5f * gv[i]);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

Suite *scaler_suite(void) {
    Suite *s = suite_create("scaler");
    TCase *tc = tcase_create("update");
    tcase_add_test(tc, test_s1_growth_and_backoff);
    tcase_add_test(tc, test_s2_odd_scale);
    tcase_add_test(tc, test_s3_growth_cap);
    tcase_add_test(tc, test_s4_rounding);
    tcase_add_test(tc, test_s5_backoff_rounding);
    tcase_add_test(tc, test_s6_collapse);
    tcase_add_test(tc, test_s7_summed_found_inf);
    tcase_add_test(tc, test_s8_update_to_keeps_tracker);
    tcase_add_test(tc, test_s9_interval_zero);
    tcase_add_test(tc, test_golden_seed_tuned);
    tcase_add_test(tc, test_inv_scale);
    suite_add_tcase(s, tc);

    tc = tcase_create("unscale");
    tcase_add_test(tc, test_u1_finite);
    tcase_add_test(tc, test_u2_nonfinite);
    tcase_add_test(tc, test_u3_scale_one_is_bit_exact);
    tcase_add_test(tc, test_u4_multiply_not_divide);
    tcase_add_test(tc, test_u5_tiny_scale_steps_with_nan);
    tcase_add_test(tc, test_u6_fp16_grads);
    tcase_add_test(tc, test_u6_narrow_grads);
    tcase_add_test(tc, test_u6_kernel_f16_check_path);
    tcase_add_test(tc, test_u7_two_optimizers);
    tcase_add_test(tc, test_unscaled_only_counts_in_update);
    suite_add_tcase(s, tc);

    tc = tcase_create("stages");
    tcase_add_test(tc, test_u8_stage_errors);
    tcase_add_test(tc, test_u8_before_scale);
    tcase_add_test(tc, test_no_grads_recorded);
    tcase_add_test(tc, test_null_grads_skipped);
    suite_add_tcase(s, tc);

    tc = tcase_create("training");
    tcase_add_test(tc, test_scale_dtypes);
    tcase_add_test(tc, test_gradient_accumulation);
    tcase_add_test(tc, test_training_loop_backoff);
    suite_add_tcase(s, tc);

    tc = tcase_create("state");
    tcase_add_test(tc, test_constructor_checks);
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test(tc, test_null_scaler_or_optimizer);
    tcase_add_test(tc, test_clip_after_unscale_reaches_the_step);
    tcase_add_test(tc, test_disabled_passes_through);
    tcase_add_test(tc, test_state_dict_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
