/*
 * test_report_numerics.c — the `report` suite's cases of the loss-scale, overflow-headroom and
 * grad-underflow rules: a positive and a negative case each, the scale they recommend, and the
 * steps, layers and models they name, on databases that report_fixtures.c builds.
 */
#include "report_fixtures.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// loss-scale

START_TEST(scale_sawtooth_is_a_warning) {
    layers();
    // growth x4 after every clean step, /8 on every third: a sawtooth
    sql("WITH RECURSIVE s(i, sc) AS (SELECT 0, 65536.0 UNION ALL SELECT i + 1, "
        "CASE WHEN (i + 1) % 3 = 2 THEN sc * 4 / 8 ELSE sc * 4 END FROM s WHERE i < 14) "
        "INSERT INTO AMP_STEPS SELECT 1, i, 0, 0, 3.0, 1, 0.9, sc, "
        "CASE WHEN i % 3 = 2 THEN sc / 8 ELSE sc * 4 END, i % 3 = 2, i % 3 = 2, NULL FROM s;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("loss-scale", AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("loss-scale");
    ck_assert_ptr_nonnull(strstr(f->title, "sawtooth"));
    ck_assert_close(evidence(f, "observed_growth_interval"), 1, 0, 0);
    ck_assert_close(evidence(f, "skipped_steps"), 5, 0, 0);
    ck_assert_ptr_nonnull(strstr(f->advice, "growth_interval=2000"));
    release();
}
END_TEST

// A sawtooth that ends in a collapse: both named, each with its steps.
START_TEST(scale_sawtooth_then_collapse_are_both_warnings) {
    layers();
    sql("WITH RECURSIVE s(i, sc) AS (SELECT 0, 65536.0 UNION ALL SELECT i + 1, "
        "CASE WHEN (i + 1) % 3 = 2 THEN sc * 4 / 8 ELSE sc * 4 END FROM s WHERE i < 14) "
        "INSERT INTO AMP_STEPS SELECT 1, i, 0, 0, 3.0, 1, 0.9, sc, "
        "CASE WHEN i % 3 = 2 THEN sc / 8 ELSE sc * 4 END, i % 3 = 2, i % 3 = 2, NULL FROM s;");
    // from step 15 on every update overflows: halved six times more
    sql("WITH RECURSIVE s(i, sc) AS (SELECT 15, (SELECT scale_after FROM AMP_STEPS WHERE step = "
        "14) UNION ALL SELECT i + 1, sc / 2 FROM s WHERE i < 20) "
        "INSERT INTO AMP_STEPS SELECT 1, i, 0, 0, 3.0, 1, 0.9, sc, sc / 2, 1, 1, NULL FROM s;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("loss-scale", AMP_SEVERITY_WARNING), 2);
    const report_finding *collapse = NULL, *sawtooth = NULL;
    for (size_t k = 0; k < findings.n; k++) {
        if (strstr(findings.v[k].title, "collapse")) collapse = &findings.v[k];
        if (strstr(findings.v[k].title, "sawtooth")) sawtooth = &findings.v[k];
    }
    ck_assert_ptr_nonnull(sawtooth);
    ck_assert_ptr_nonnull(collapse);
    ck_assert_msg(strstr(collapse->title, "7 consecutive backoffs"), "%s", collapse->title);
    ck_assert_int_eq(collapse->first_step, 14); // (step 14 was a backoff of the sawtooth)
    ck_assert_int_eq(collapse->last_step, 20);
    release();
}
END_TEST

START_TEST(scale_collapse_and_stuck_low_are_warnings) {
    layers();
    steps(12, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "collapse"));
    ck_assert_int_eq(findings.v[0].first_step, 3);
    ck_assert_close(evidence(&findings.v[0], "consecutive_backoffs"), 9, 0, 0);
    // no non-finite forward recorded: the gradients explode
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Clip"));
    ck_assert_ptr_null(strstr(findings.v[0].detail, "jumped")); // the loss did not
    release();
    // a focus on its last step leaves one backoff of it, to a scale below 1: one, one step
    sql("DELETE FROM AMP_STEPS;");
    steps(20, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse("loss-scale", 19, 19);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale collapse: 1 backoff from 1 to 0.5 (step 19)");
    release();
    sql("DELETE FROM AMP_STEPS;");
    steps(12, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    // the loss jumped where the collapse began: said, with how much
    sql("UPDATE AMP_STEPS SET loss = loss * 600 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].detail, "The loss jumped 597x at step 3, from 3.99 (the "
                                               "steps before) to 2382: "),
                  "%s", findings.v[0].detail);
    ck_assert_close(evidence(&findings.v[0], "loss_jump"), 3.97 * 600 / 3.99, 1e-9, 0);
    release();
    // halved past the smallest float the scale is 0, and stays there: the steps at 0 belong to
    // the collapse
    sql("UPDATE AMP_STEPS SET scale_after = 0 WHERE step = 8;"
        "UPDATE AMP_STEPS SET scale_before = 0, scale_after = 0 WHERE step > 8;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale collapse: 6 consecutive backoffs from 65536 "
                                          "to 0 (steps 3-8), then 3 more overflowing steps at 0 "
                                          "(to step 11)");
    ck_assert_int_eq(findings.v[0].last_step, 11);
    ck_assert_close(evidence(&findings.v[0], "steps_at_zero"), 3, 0, 0);
    release();

    sql("DELETE FROM AMP_STEPS;");
    steps(12, 1);
    sql("INSERT INTO AMP_TENSOR_STATS SELECT 1, step, 2, 'to', 'activation_grad', 'f32', 'f16', "
        "16384, -4e-11, 4e-11, 4e-11, 0, 0, 0, 0, 16384, 0 FROM AMP_STEPS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "stuck low"));
    ck_assert_close(evidence(&findings.v[0], "recommended_init_scale"), 16777216, 0, 0);
    release();
}
END_TEST

// Skips now and then after the calibration: a warning whose advice follows the cause (the
// scale, outlier steps, a forward that went non-finite).
START_TEST(scale_skip_rate_advice_follows_the_cause) {
    healthy(20);
    sql("UPDATE AMP_STEPS SET scale_after = scale_before / 2, skipped = 1, found_inf = 1 WHERE "
        "step IN (5, 9, 13);"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 5;"
        "UPDATE AMP_STEPS SET scale_after = 16384 WHERE step = 9;"
        "UPDATE AMP_STEPS SET scale_before = 16384, scale_after = 16384 WHERE step > 9;"
        "UPDATE AMP_STEPS SET scale_after = 8192 WHERE step = 13;"
        "UPDATE AMP_STEPS SET scale_before = 8192, scale_after = 8192 WHERE step > 13;"
        "UPDATE AMP_TENSOR_STATS SET amax = amax / 8 WHERE kind != 'activation';");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "15% of the steps were skipped"));
    // the kept steps' gradients (amax 835 at 8192) fit 262144, above every scale that
    // overflowed: not "start lower"
    ck_assert_msg(strstr(findings.v[0].advice, "the overflows come from outlier batches"), "%s",
                  findings.v[0].advice);
    // the scales the skipped steps ran at (not 8192, where the last skip left it)
    ck_assert_msg(strstr(findings.v[0].detail, "overflowing at scales between 16384 and 65536;"),
                  "%s", findings.v[0].detail);
    release();
    // after a calibration down from 2^24: the advice weighs the scales of the skips after it,
    // and the finding's steps are theirs
    sql("UPDATE AMP_STEPS SET scale_before = 16777216, scale_after = 65536, skipped = 1, "
        "found_inf = 1 WHERE step = 0;"
        "UPDATE AMP_STEPS SET scale_before = 65536 WHERE step = 1;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "the overflows come from outlier batches"), "%s",
                  findings.v[0].advice);
    ck_assert_int_eq(findings.v[0].first_step, 5);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, skipped = 0, "
        "found_inf = 0 WHERE step = 0;");
    sql("UPDATE AMP_TENSOR_STATS SET amax = amax * 64, max = max * 64, min = min * 64;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "Start lower and grow slower: init_scale="), "%s",
                  findings.v[0].advice);
    release();
    sql(EVENTS_VALUES "(1, 9, 0, 'matmul', 'fwd', 'nonfinite_producer', 'error', 8, 0, NULL, 0, "
                      "1, 9);");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Make the forward pass finite first"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "The forward pass was non-finite"));
    release();
}
END_TEST

// The loss-scale finding of a GradScaler in a bf16 run; NULL: none.
static const report_finding *bf16_scaler_finding(void) {
    for (size_t i = 0; i < findings.n; i++)
        if (begins(findings.v[i].title, "a GradScaler in a bf16 run")) return &findings.v[i];
    return NULL;
}

// Updates of bf16 weights compared before and after each step (weight_update rows: numel the
// values with a non-zero gradient, n_zero those left unchanged), three parameters of very
// different sizes, of which fc.weight loses lost/4096 of its updates every step.
static void lost_updates(int n, const char *dtype, int lost) {
    char buf[1024];
    snprintf(buf, sizeof buf,
             "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < %d), "
             "t(l, op, kind, numel, zero) AS (VALUES "
             "(1, 'fc.weight', 'weight', 1000000, 0), (2, 'head.weight', 'weight', 10000, 0), "
             "(2, 'head.bias', 'weight', 10, 0), (1, 'fc.weight', 'weight_update', 4096, %d), "
             "(2, 'head.weight', 'weight_update', 4096, 0), "
             "(2, 'head.bias', 'weight_update', 10, 10)) "
             "INSERT INTO AMP_TENSOR_STATS SELECT 1, i, l, op, kind, '%s', NULL, numel, NULL, "
             "NULL, NULL, NULL, NULL, NULL, NULL, NULL, zero FROM s, t;",
             n - 1, lost, dtype);
    sql(buf);
}

// 16-bit weights whose updates round away: a warning weighed by the parameters' sizes (the
// large fc.weight's share, not the tiny bias's 100%), a note below a quarter, nothing below 5%;
// the advice keeps fp32 master weights (with a GradScaler for fp16).
START_TEST(lost_updates_of_16_bit_weights_are_named) {
    healthy(12);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("lost-updates", AMP_SEVERITY_INFO), 0);
    release();
    lost_updates(12, "bf16", 3900);
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("lost-updates", AMP_SEVERITY_INFO), 1);
    const report_finding *f = first_of("lost-updates");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->title, "optimizer updates rounded away in bf16 weights: 94% of their "
                               "values kept their value through an update (fc.weight 95%)");
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "fc.weight");
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_close(evidence(f, "values_compared"), 12 * (4096 + 4096 + 10), 0, 0);
    ck_assert_close(evidence(f, "values_unchanged"), 12 * (3900 + 10), 0, 0);
    ck_assert_close(evidence(f, "lost_share"), (3900.0 / 4096 * 1e6 + 10) / (1e6 + 1e4 + 10), 1e-12,
                    0);
    ck_assert_msg(strstr(f->detail, "about 2^-9 of its magnitude in bf16") &&
                      strstr(f->detail, "Most values lost: fc.weight 95% (1 M values), head.bias "
                                        "100% (10 values), head.weight 0% (10 k values)."),
                  "%s", f->detail);
    ck_assert_msg(strstr(f->advice, "torch.autocast(\"cuda\", dtype=torch.bfloat16)") &&
                      !strstr(f->advice, "GradScaler"),
                  "%s", f->advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_zero = 400 WHERE kind = 'weight_update' AND op = "
        "'fc.weight'; UPDATE AMP_TENSOR_STATS SET dtype = 'f16' WHERE kind LIKE 'weight%';");
    analyse("lost-updates", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_msg(strstr(findings.v[0].detail, "about 2^-12 of its magnitude in fp16") &&
                      strstr(findings.v[0].advice, "torch.amp.GradScaler(\"cuda\")"),
                  "%s | %s", findings.v[0].detail, findings.v[0].advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_zero = 40 WHERE kind = 'weight_update' AND op = "
        "'fc.weight';");
    analyse("lost-updates", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// A GradScaler in a bf16 run: an info that it protects nothing, told from the gradients' target
// dtype, else the autocast ops' output dtype, else META; none in fp16 or without a GradScaler.
START_TEST(a_gradscaler_in_bf16_is_an_info) {
    healthy(12);
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding()); // fp16: what it is for
    release();
    sql("UPDATE AMP_TENSOR_STATS SET target_dtype = 'bf16', dtype = replace(dtype, 'f16', 'bf16');"
        "UPDATE AMP_OPS SET out_dtype = replace(out_dtype, 'f16', 'bf16');");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = bf16_scaler_finding();
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(f->rule, "loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->title, "a GradScaler in a bf16 run: loss scaling protects nothing here "
                               "(12 updates, scale 65536 at the end)");
    ck_assert_ptr_nonnull(strstr(f->advice, "enabled=False"));
    ck_assert_ptr_null(strstr(f->detail, "skipped"));
    ck_assert_close(evidence(f, "scale_updates"), 12, 0, 0);
    release();
    // CUDA capture's synchronisations a step: the loop's (one a step), step 0's five more left out
    sql("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, "
        "streamId, globalPid, syncType, eventId) SELECT start_ns + 100 + x * 100, "
        "start_ns + 150 + x * 100, 0, 1, 7, " GPID ", 3, 0 FROM AMP_STEPS, (SELECT 0 AS x UNION "
        "SELECT 1 UNION SELECT 2 UNION SELECT 3 UNION SELECT 4 UNION SELECT 5) WHERE step = 0 OR "
        "x = 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = bf16_scaler_finding();
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(strstr(f->detail, "CUDA capture recorded 1 host synchronisations a step"), "%s",
                  f->detail);
    release();
    sql("DELETE FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;");
    // an inf gradient skipped one step: said, and pointed at its cause
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_after = 32768 WHERE step = 5;"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 5;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = bf16_scaler_finding();
    ck_assert_ptr_nonnull(f);
    ck_assert_msg(strstr(f->detail, "Its 1 skipped step had gradients that were inf/NaN at any "
                                    "scale"),
                  "%s", f->detail);
    release();
    // no gradient statistics: the autocast ops say bf16; without them META does
    sql("DELETE FROM AMP_TENSOR_STATS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(bf16_scaler_finding());
    release();
    sql("DELETE FROM AMP_OPS;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding());
    release();
    sql("INSERT INTO META (key, value, pid) VALUES ('autocast_dtype', 'bf16', 1);");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(bf16_scaler_finding());
    release();
    // bf16 without a GradScaler: nothing to say
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_ptr_null(bf16_scaler_finding());
    release();
}
END_TEST

// Gradients clipped before they were unscaled: every applied step's norm is max_norm over the
// scale (the scale grown once between), while the loss moves; not so for a norm that moves, a
// loss that does not, a scale of 1 (clipped unscaled), or too few steps.
START_TEST(scale_clipped_while_scaled_is_a_warning) {
    layers();
    steps(10, 65536);
    sql("UPDATE AMP_STEPS SET scale_before = 131072, scale_after = 131072 WHERE step >= 6;"
        "UPDATE AMP_STEPS SET scale_after = 131072 WHERE step = 5;"
        "UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = first_of("loss-scale");
    ck_assert_str_eq(f->title, "gradients clipped while still scaled: every step's gradient norm "
                               "was 1 divided by the loss scale (10 steps)");
    ck_assert_msg(strstr(f->detail, "the gradient norm times the loss scale (65536 to 131072) "
                                    "stayed at 1,"),
                  "%s", f->detail);
    ck_assert_ptr_nonnull(strstr(f->advice, "scaler.unscale_(optimizer); "
                                            "torch.nn.utils.clip_grad_norm_(params, 1);"));
    ck_assert_close(evidence(f, "max_norm"), 1, 1e-12, 0);
    ck_assert_int_eq(f->first_step, 0);
    ck_assert_int_eq(f->last_step, 9);
    release();
    // a first step read before the clip (a bridge attached late): the others still tell
    sql("UPDATE AMP_STEPS SET grad_norm = 0.9 WHERE step = 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = first_of("loss-scale");
    ck_assert_msg(begins(f->title, "gradients clipped while still scaled") &&
                      strstr(f->title, "(9 steps)"),
                  "%s", f->title);
    ck_assert_int_eq(f->first_step, 1);
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before;"
        "UPDATE AMP_STEPS SET grad_norm = grad_norm * (1 + step * 1e-4);"); // a norm that moves
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 1.0 / scale_before, loss = 3.5;"); // nothing learns
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 4.0 - step * 0.01;");
    analyse("loss-scale", 0, 3); // four steps: too few to tell
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 1, scale_after = 1, grad_norm = 1;"); // unscaled
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    for (size_t i = 0; i < findings.n; i++)
        ck_assert_msg(!begins(findings.v[i].title, "gradients clipped"), "%s", findings.v[i].title);
    release();
}
END_TEST

START_TEST(scale_calibration_and_stable_scale_are_not_warnings) {
    healthy(20);
    // the usual start: three skipped steps while the scale backs off to where gradients fit
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << step), "
        "scale_after = 32768.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 3;"
        "UPDATE AMP_STEPS SET scale_before = 8192, scale_after = 8192 WHERE step >= 3;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    release();
    // skips in the middle of a run are no calibration when a focus (--steps) begins at them
    sql("UPDATE AMP_STEPS SET scale_after = scale_before / 2, skipped = 1, found_inf = 1 WHERE "
        "step BETWEEN 10 AND 13;");
    analyse("loss-scale", 10, 13);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_close(evidence(&findings.v[0], "calibration_skips"), 0, 0, 0);
    release();

    // init_scale 2^24: six skips down to 2^18, where the gradients fit, then training: the
    // calibration, not a collapse, however many backoffs; the info says what they cost
    sql("UPDATE AMP_STEPS SET scale_before = 16777216.0 / (1 << step), "
        "scale_after = 8388608.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 6;"
        "UPDATE AMP_STEPS SET scale_before = 262144, scale_after = 262144, skipped = 0, "
        "found_inf = 0 WHERE step >= 6;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "The scale started too high: 6 steps were thrown "
                                               "away bringing it down to 262144"),
                  "%s", findings.v[0].advice);
    release();
    // ... also from a focus inside it: its skips are still the calibration's
    analyse("loss-scale", 2, 10);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_close(evidence(&findings.v[0], "calibration_skips"), 4, 0, 0);
    release();
    // never applied: still at 2^30 after 20 skips from 2^50, it started too high
    sql("UPDATE AMP_STEPS SET scale_before = 1125899906842624.0 / (1 << step), "
        "scale_after = 562949953421312.0 / (1 << step), skipped = 1, found_inf = 1;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(title_starts("loss scale set too high, still coming down: 20 "
                               "consecutive backoffs"),
                  "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "no step was applied whose gradients"));
    release();
    // ... also from a focus after its start (its steps before had losses, but none applied)
    analyse("loss-scale", 3, 19);
    ck_assert_msg(title_starts("loss scale set too high"), "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "at step 3)"));
    release();
    // the calibration (6 skips from 2^24), training at 2^18 with skips at steps 10 and 14, then
    // a collapse over the last 4 steps to below 1: the collapse found is the last one (not the
    // calibration, the longer run of backoffs), and the skips' scales are those after it
    sql("UPDATE AMP_STEPS SET scale_before = 16777216.0 / (1 << step), "
        "scale_after = 8388608.0 / (1 << step), skipped = 1, found_inf = 1 WHERE step < 6;"
        "UPDATE AMP_STEPS SET scale_before = 262144, scale_after = 262144, skipped = 0, "
        "found_inf = 0 WHERE step >= 6;"
        "UPDATE AMP_STEPS SET scale_after = 131072, skipped = 1, found_inf = 1 WHERE step = 10;"
        "UPDATE AMP_STEPS SET scale_before = 131072, scale_after = 131072 WHERE step > 10;"
        "UPDATE AMP_STEPS SET scale_after = 65536, skipped = 1, found_inf = 1 WHERE step = 14;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536 WHERE step > 14;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].detail, "overflowing at scales between 131072 and 262144;"),
                  "%s", findings.v[0].detail);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 4.0 / (1 << (step - 16)), "
        "scale_after = 2.0 / (1 << (step - 16)), skipped = 1, found_inf = 1 WHERE step >= 16;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strcmp(findings.v[0].title, "loss scale collapse: 4 consecutive backoffs from 4 "
                                              "to 0.25 (steps 16-19)") == 0,
                  "%s", findings.v[0].title);
    release();
    // a scale grown to 2^30 over applied steps, then five backoffs to 2^25: a collapse, not an
    // init_scale "set too high" (steps were applied before it)
    sql("UPDATE AMP_STEPS SET scale_before = 65536.0 * (1 << step), scale_after = 131072.0 * "
        "(1 << step), skipped = 0, found_inf = 0 WHERE step < 14;"
        "UPDATE AMP_STEPS SET scale_before = 1073741824.0 / (1 << (step - 14)), scale_after = "
        "536870912.0 / (1 << (step - 14)), skipped = 1, found_inf = 1 WHERE step >= 14;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(title_starts("loss scale collapse: 6 consecutive backoffs from "
                               "1.07374182e+09"),
                  "%s", findings.v[0].title);
    release();
}
END_TEST

// A run shorter than its GradScaler's growth interval could not grow the scale: a low scale is
// an info there (META scaler.growth_interval), a warning when the scale had the time.
START_TEST(scale_low_in_a_run_shorter_than_the_growth_interval_is_an_info) {
    layers();
    steps(12, 1);
    sql("INSERT INTO AMP_TENSOR_STATS SELECT 1, step, 2, 'to', 'activation_grad', 'f32', 'f16', "
        "16384, -4e-3, 4e-3, 4e-3, 0, 0, 0, 0, 0, 0 FROM AMP_STEPS;"
        "INSERT INTO META (key, value, pid) VALUES ('scaler.growth_interval', '2000', 1),"
        "('scaler.growth_interval', '10', 0);"); // (another process's, no steps: not pid 1's)
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_INFO), 1);
    ck_assert_str_eq(findings.v[0].title, "loss scale low at 1 for all 12 steps: it grows only "
                                          "after growth_interval=2000 clean steps");
    release();
    sql("UPDATE META SET value = '10' WHERE key = 'scaler.growth_interval' AND pid = 1;");
    analyse("loss-scale", 0, 5); // (the run's 12 updates had the time, not the focus's 6)
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    release();
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "stuck low"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "(largest unscaled gradient 0.004; x"));
    release();
    // statistics of one step in 4 (--stats-every 4): the number is of those, and a focus on
    // steps none of which was sampled says so (not "record gradient statistics")
    sql("INSERT INTO META (key, value, pid) VALUES ('stats_every', '4', 1);"
        "DELETE FROM AMP_TENSOR_STATS WHERE step % 4 != 0;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "(largest unscaled gradient 0.004 of the steps "
                                               "sampled, one in 4; x"),
                  "%s", findings.v[0].advice);
    release();
    analyse("loss-scale", 5, 7);
    ck_assert_msg(strstr(findings.v[0].advice, "no focused step had its gradients sampled "
                                               "(--stats-every): widen --steps"),
                  "%s", findings.v[0].advice);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// overflow-headroom

// A layer growing into overflow: 40000 at step 2, then outputs with +inf (their finite values
// up to 65376) at steps 3-5. The headroom told is of the outputs that had not overflowed yet,
// with their step (not 65376 from step 5 beside "step 2"); the overflowed ones are the
// root-cause rule's.
START_TEST(overflow_headroom_tells_the_outputs_before_the_overflow) {
    healthy(6);
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 2, 1, 'linear', 'activation', 'f16', 'f16', 4096, "
        "-40000, 40000, 40000, 0, 0, 0, 0, 0, 0), (1, 3, 1, 'linear', 'activation', 'f16', "
        "'f16', 4096, -60000, 60000, 60000, 0, 3, 0, 0, 0, 0), (1, 5, 1, 'linear', 'activation', "
        "'f16', 'f16', 4096, -65376, 65376, 65376, 0, 9, 0, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->title, "blocks.0.mlp linear output reaches amax 40000 at step 2, 0.71 "
                               "bits below the f16 max 65504");
    ck_assert_int_eq(f->first_step, 2);
    ck_assert_close(evidence(f, "amax_step"), 2, 0, 0);
    ck_assert_msg(strstr(f->advice, "keep this op in fp32 (autocast disabled around it"), "%s",
                  f->advice);
    release();
    // in a run without autocast its fp16 is the parameters': no autocast to disable
    sql("INSERT INTO META (key, value, pid) VALUES ('compute_dtype', 'f16', 1);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].advice, "keep this op in fp32 (no autocast here: "), "%s",
                  findings.v[0].advice);
    release();
    sql("DELETE FROM META WHERE key = 'compute_dtype';");
    // -inf out of a linear is an overflow too (no mask comes out of a GEMM)
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f16', 'f16', "
        "4096, -65000, 60000, 65000, 0, 0, 2, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(title_starts("blocks.0.mlp linear output reaches amax 40000 at "
                               "step 2"),
                  "%s", findings.v[0].title);
    release();
}
END_TEST

START_TEST(overflow_headroom_near_f16_max_is_a_warning) {
    healthy(6);
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f16', 'f16', 4096, "
        "-40000, 40000, 40000, 0, 0, 0, 0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_str_eq(f->op, "linear");
    ck_assert_int_eq(f->first_step, 4);
    ck_assert_close(evidence(f, "headroom_bits"), log2(65504.0 / 40000.0), 1e-9, 0);
    ck_assert_ptr_nonnull(strstr(f->title, "bits below the f16 max"));
    release();
    // near bf16's max, which is fp32's, no precision helps: no fp32 or bf16 offered
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16', min = -2.5e38, "
        "max = 2.5e38, amax = 2.5e38 WHERE amax = 40000;");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "fp32 has bf16's range: no precision change helps"),
                  "%s", findings.v[0].advice);
    ck_assert_msg(!strstr(findings.v[0].advice, "train in bf16"), "%s", findings.v[0].advice);
    release();
}
END_TEST

START_TEST(overflow_headroom_ignores_fp32_ops_and_overflowed_outputs) {
    healthy(6);
    // an fp32 op (the scaled loss, a softmax) is not at risk at 65504; an output that already
    // holds +inf belongs to nonfinite-root-cause
    sql("INSERT INTO AMP_TENSOR_STATS VALUES "
        "(1, 4, 0, 'softmax', 'activation', 'f32', 'f16', 4096, 0, 1e6, 1e6, 0, 0, 0, 10, 0, 0),"
        "(1, 5, 0, 'mul', 'activation', 'f16', 'f16', 8192, -65120, 65440, 65440, 0, 3913, 3977, "
        "0, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// An fp32 run (no autocast anywhere): outputs beyond fp16's max are notes of what fp16 would
// make of them, said to be beyond the max (not "within 2x" of it), and the healthy verdict does
// not claim that no op came near a range the run never had.
START_TEST(overflow_headroom_of_an_fp32_run_is_a_note_beyond_the_max) {
    healthy(6);
    sql("UPDATE AMP_OPS SET policy = NULL, in_dtypes = 'f32,f32', out_dtype = 'f32';"
        "UPDATE AMP_TENSOR_STATS SET dtype = 'f32';"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 4, 1, 'linear', 'activation', 'f32', 'f16', "
        "4096, -8e6, 8e6, 8e6, 0, 0, 0, 120, 0, 0);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("overflow-headroom", AMP_SEVERITY_INFO), 1);
    const report_finding *f = NULL;
    for (size_t i = 0; i < findings.n; i++)
        if (strcmp(findings.v[i].rule, "overflow-headroom") == 0) f = &findings.v[i];
    ck_assert_msg(strstr(f->title, "(fp32, amax 8e+06 at step 4) would overflow f16"), "%s",
                  f->title);
    ck_assert_msg(strstr(f->detail, "1 of 1 sampled outputs within 2x of the max or beyond it") &&
                      strstr(f->detail, "120 fp32 values beyond it would round to inf"),
                  "%s", f->detail);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy") &&
                      strstr(verdict, "the run is fp32, with no "
                                      "autocast dtype to come near") &&
                      !strstr(verdict, "no op came near"),
                  "verdict: %s", verdict);
    release();
    // at risk only by a step whose output also held NaN: the amax told is that step's (not 3,
    // the clean steps', which would overflow nothing)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 3, max = 3, min = -3, n_overflow = 0 WHERE layer_id "
        "= 1 AND op = 'linear';"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 5, 1, 'linear', 'activation', 'f32', 'f16', "
        "4096, -1e6, 1e6, 1e6, 4, 0, 0, 100, 0, 0);");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    ck_assert_msg(strstr(findings.v[0].title, "(fp32, amax 1e+06) would overflow f16"), "%s",
                  findings.v[0].title);
    ck_assert(isnan(evidence(&findings.v[0], "amax_step")));
    release();
}
END_TEST

// A hand-written RMSNorm's x * x overflowed fp16 at steps 3-5 and rsqrt(inf) = 0 left it out (the
// PyTorch bridge's overflow_absorbed, found when the norm's output turned to zeros): a warning
// with the fp32 mean square as the fix; the verdict says the run went on with a problem. The
// same inf left out of a GEMM's output by a clamp: generic advice. Without the event: healthy.
START_TEST(overflow_absorbed_inside_a_layer_is_a_warning) {
    healthy(8);
    sql(EVENTS_VALUES "(1, 3, 1, 'mul', 'fwd', 'overflow_absorbed', 'warning', 6, NULL, 'input 0 "
                      "f16 (16, 64) min -706 max 876.5 amax 876.5; input 1 f16 (16, 64) min -706 "
                      "max 876.5 amax 876.5; output f16 (16, 64) min 0 max 6.5e4 amax 6.5e4 (0 "
                      "nan, 6 +inf, 0 -inf); left out by rsqrt', 1, 3, 5);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("recorded-events", AMP_SEVERITY_INFO), 0);
    const report_finding *f = first_of("overflow-headroom");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(f->title, "fp16 overflow hidden in blocks.0.mlp at step 3: mul made +inf from "
                               "finite inputs (amax 876.5), and rsqrt turned it into 0");
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_int_eq(f->last_step, 5);
    ck_assert_msg(strstr(f->detail, "made 6 non-finite values in blocks.0.mlp mul (past fp16's "
                                    "max 65504)") &&
                      strstr(f->detail, "share of exact zeros jumped") &&
                      strstr(f->detail, "Seen again up to step 5."),
                  "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Take the mean square in fp32: x.float().pow(2)"), "%s",
                  f->advice);
    ck_assert_close(evidence(f, "input_amax"), 876.5, 0, 0);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training ran, with problems: fp16 overflow hidden in "
                                  "blocks.0.mlp at step 3"),
                  "verdict: %s", verdict);
    release();
    // a GEMM's -inf that a clamp cut back, on a step the GradScaler skipped anyway
    sql("UPDATE AMP_EVENTS SET op = 'addmm', detail = replace(replace(detail, 'rsqrt', "
        "'clamp'), '0 nan, 6 +inf, 0 -inf', '0 nan, 0 +inf, 6 -inf'), last_step = 3;"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1 WHERE step = 3;");
    analyse("overflow-headroom", INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_str_eq(f->title, "fp16 overflow hidden in blocks.0.mlp at step 3: addmm made -inf "
                               "from finite inputs (amax 876.5), and clamp clipped it to a finite "
                               "value");
    ck_assert_msg(!strstr(f->detail, "zeros jumped") && !strstr(f->detail, "Seen again"), "%s",
                  f->detail);
    ck_assert_msg(begins(f->advice, "Run addmm in fp32: cast its inputs with .float()"), "%s",
                  f->advice);
    release();
    sql("DELETE FROM AMP_EVENTS;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("overflow-headroom", AMP_SEVERITY_INFO), 0);
    release();
}
END_TEST

// The recorders' sources (the PyTorch bridge's Python, libampcore's C) in one malloc'd text,
// each with adjacent string literals joined ("a" "b", across lines too, as C and Python join
// them), so that a phrase written over two literals is found whole.
static char *recorders_text(void) {
    static const char *const dirs[][2] = {{"/probe/python/ampprobe", ".py"},
                                          {"/libampcore/src", ".c"}};
    size_t len = 0;
    char *all = calloc(1, 1);
    for (size_t k = 0; k < sizeof dirs / sizeof dirs[0]; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s%s", AMP_SOURCE_DIR, dirs[k][0]);
        DIR *d = opendir(dir);
        ck_assert_msg(d != NULL, "cannot open %s", dir);
        for (struct dirent *e; (e = readdir(d));) {
            size_t name = strlen(e->d_name), ext = strlen(dirs[k][1]);
            if (name <= ext || strcmp(e->d_name + name - ext, dirs[k][1]) != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            size_t n;
            char *text = test_read_file(path, &n);
            all = realloc(all, len + n + 2);
            for (size_t i = 0; i < n; i++) {
                if (text[i] == '"') { // the end of one literal, spaces, the next one's start
                    size_t j = i + 1;
                    while (j < n && (text[j] == ' ' || text[j] == '\n' || text[j] == '\\'))
                        j++;
                    if (j > i + 1 && j < n && text[j] == '"') {
                        i = j;
                        continue;
                    }
                }
                all[len++] = text[i];
            }
            all[len++] = '\n';
            all[len] = '\0';
            free(text);
        }
        closedir(d);
    }
    return all;
}

// The phrases the rules read in event details (report.h's REPORT_DETAIL_*) are the recorders'
// words: rewording one there without the rules would change a diagnosis silently.
START_TEST(the_rules_read_phrases_the_recorders_write) {
    const char *const phrases[] = {REPORT_DETAIL_AMAX,          REPORT_DETAIL_NO_FINITE,
                                   REPORT_DETAIL_MADE_IN_LAYER, REPORT_DETAIL_READER,
                                   REPORT_DETAIL_LEFT_OUT,      REPORT_DETAIL_LATE,
                                   REPORT_DETAIL_ABSORBED_BY,   REPORT_DETAIL_UNSCALED};
    char *text = recorders_text();
    for (size_t i = 0; i < sizeof phrases / sizeof phrases[0]; i++)
        ck_assert_msg(strstr(text, phrases[i]) != NULL,
                      "no recorder writes \"%s\", which the report reads in event details",
                      phrases[i]);
    ck_assert(strstr(text, "no recorder writes this phrase, which the test itself names") == NULL);
    free(text);
}
END_TEST

// sgd.step() called directly beside scaler.step(adam) (the bridge's step_outside_scaler, at
// steps 0 and 1: one finding, at the first): an error with scaler.step() for each optimizer as
// the fix; after scaler.unscale_() the gradients are right but no skip protects them: a warning.
START_TEST(an_optimizer_stepped_outside_the_scaler_is_named) {
    healthy(6);
    sql(EVENTS_VALUES "(1, 0, NULL, 'SGD', 'optim', 'step_outside_scaler', 'error', 2, 65536, "
                      "'SGD.step() called directly: it stepped on gradients still multiplied by "
                      "the loss scale 65536', 0, 1, 0),"
                      "(1, 1, NULL, 'SGD', 'optim', 'step_outside_scaler', 'error', 2, 65536, "
                      "'SGD.step() called directly', 0, 1, 1);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_uint_eq(count("recorded-events", AMP_SEVERITY_INFO), 0);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->rule, "loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "SGD stepped outside the GradScaler from step 0: optimizer.step() "
                               "on gradients still multiplied by the loss scale 65536");
    ck_assert_msg(strstr(f->detail, "gradients 65536 times too large"), "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Step every optimizer through the scaler: "
                                    "scaler.step(optimizer) for each one"),
                  "%s", f->advice);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training broke: SGD stepped outside the GradScaler"),
                  "verdict: %s", verdict);
    release();
    sql("DELETE FROM AMP_EVENTS WHERE step = 1; UPDATE AMP_EVENTS SET severity = 'warning', "
        "detail = 'SGD.step() called directly after scaler.unscale_(): its gradients are "
        "unscaled, but a step whose gradients hold inf/NaN is applied, not skipped';");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_msg(strstr(f->title, "after scaler.unscale_(), so a step whose gradients overflow "
                                   "is applied"),
                  "%s", f->title);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// grad-underflow

// Every gradient's amax, min and max times `by` (an SQL factor: "* 4096", "/ 65536"), and so
// the largest unscaled gradient the loss scale is recommended from.
static void grads_times(const char *by) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "UPDATE AMP_TENSOR_STATS SET amax = amax %s, min = min %s, max = max %s "
             "WHERE kind IN ('activation_grad', 'weight_grad');",
             by, by, by);
    sql(buf);
}

START_TEST(grad_underflow_names_the_layer_and_a_scale) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(f->detail, "blocks.0.mlp"));
    ck_assert_close(evidence(f, "layers_affected"), 1, 0, 0);
    ck_assert_close(evidence(f, "worst_share"), (32768 * 3 / 10 + 4096 * 3 / 10) / (32768.0 + 4096),
                    1e-9, 0);
    ck_assert_close(evidence(f, "worst_weight_share"), (4096 * 3 / 10) / 4096.0, 1e-9, 0);
    ck_assert_msg(strstr(f->detail, "lose 30% at most (blocks.0.mlp)."), "%s", f->detail);
    // largest gradient 6680 at scale 65536: 0.1019 unscaled, 2^18 keeps it under 32752
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    ck_assert_msg(strstr(f->advice, "Raise the loss scale to 262144"), "%s", f->advice);
    release();
}
END_TEST

// The steps a grad-underflow finding names are those whose gradients it counted: not the
// skipped steps after them, whose gradients never reached the weights.
START_TEST(grad_underflow_names_the_steps_it_counted) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = scale_before / 2 "
        "WHERE step >= 4;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_int_eq(findings.v[0].first_step, 0);
    ck_assert_int_eq(findings.v[0].last_step, 3);
    release();
}
END_TEST

// A scale already above the recommended one (a sawtooth that grew too far) is not "as high as
// the gradients allow", nor told to rise: the values are lost at a scale that overflows already.
START_TEST(grad_underflow_at_a_scale_above_the_recommended_one) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET scale_before = 268435456, scale_after = 268435456;");
    grads_times("* 4096");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    ck_assert_close(evidence(f, "loss_scale"), 268435456, 0, 0);
    ck_assert_msg(strstr(f->advice, "The scale (268435456 at the last step applied) is already "
                                    "above what the largest gradients allow (262144 keeps"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "as high as"));
    release();
    // just below it: raised by less than a bit (not "0 bits")
    sql("UPDATE AMP_STEPS SET scale_before = 196608, scale_after = 196608;");
    grads_times("/ 4096 * 3");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].advice, "Raise the loss scale to 262144") &&
                      strstr(findings.v[0].advice, "move less than a bit away"),
                  "%s", findings.v[0].advice);
    release();
}
END_TEST

// The scale is recommended from the gradients stored in the run's 16-bit dtype: an f32 gradient
// does not overflow (the mean loss's 1/batch towards its log-probabilities, 0.5 at a batch of 2
// however well the model fits, read "above what the largest gradients allow" over a run that
// never skipped a step); what of it reaches f16 is a row of its own.
START_TEST(grad_underflow_scale_is_of_the_16_bit_gradients) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_TENSOR_STATS SET amax = 1e6, min = -1e6, max = 1e6 WHERE op = 'log_softmax' "
        "AND kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    const report_finding *f = &findings.v[0];
    ck_assert_close(evidence(f, "grad_amax_unscaled"), 6680.0 / 65536, 1e-12, 0);
    ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
    release();
    // a weight gradient counts whatever its dtype (an fp32 master's comes out of an f16 GEMM)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 30000, min = -30000, max = 30000 WHERE kind = "
        "'weight_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 30000.0 / 65536, 1e-12, 0);
    release();
    // with no 16-bit gradient recorded (an fp32 run), all of them
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'f32' WHERE kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 1e6 / 65536, 1e-9, 0);
    release();
}
END_TEST

// A run of two programs (a script that trains one after the other): each model's gradients are
// judged by themselves, and the loss scale recommended from its own largest gradient; the ranks
// of one model (the same layers) stay one finding.
START_TEST(grad_underflow_and_scale_are_of_each_model) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const double values = evidence(&findings.v[0], "gradient_values"),
                 layers = evidence(&findings.v[0], "layers");
    release();
    // pid 7: an mlp whose loss scale is stuck at 1 and whose gradients (4e-11) all underflow
    sql("INSERT INTO AMP_LAYERS VALUES (7, 0, NULL, 'fc1'), (7, 1, NULL, 'fc2');"
        "CREATE TEMP TABLE t AS SELECT * FROM AMP_STEPS; UPDATE t SET pid = 7, scale_before = 1, "
        "scale_after = 1; INSERT INTO AMP_STEPS SELECT * FROM t; DROP TABLE t;"
        "INSERT INTO AMP_TENSOR_STATS SELECT 7, step, 1, 'linear', 'weight_grad', 'f16', 'f16', "
        "1000, -4e-11, 4e-11, 4e-11, 0, 0, 0, 0, 1000, 0 FROM AMP_STEPS WHERE pid = 7;"
        "INSERT INTO AMP_PROCESSES (pid, ppid, globalPid, name, status) VALUES "
        "(1, 0, 16777216, 'tiny_gpt', 'complete'), (7, 0, 117440512, 'mlp', 'complete');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    for (size_t i = 0; i < 2; i++) {
        const report_finding *f = &findings.v[i];
        if (f->pid == 1) {
            ck_assert_close(evidence(f, "gradient_values"), values, 0, 0);
            ck_assert_close(evidence(f, "layers"), layers, 0, 0);
            ck_assert_close(evidence(f, "recommended_scale"), 262144, 0, 0);
        } else {
            ck_assert_int_eq(f->pid, 7);
            ck_assert_str_eq(f->layer, "fc2");
            ck_assert_close(evidence(f, "gradient_values"), 6000, 0, 0);
            ck_assert_close(evidence(f, "grad_amax_unscaled"), 4e-11, 1e-9, 0);
        }
    }
    release();
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("loss-scale");
    ck_assert_int_eq(f->pid, 7);
    ck_assert_ptr_nonnull(strstr(f->title, "stuck low"));
    ck_assert_close(evidence(f, "grad_amax_unscaled"), 4e-11, 1e-9, 0);
    release();
    // pid 8: a second rank of pid 1's model, the same gradients: still one finding of that model
    static const char *const tables[] = {"AMP_LAYERS", "AMP_STEPS", "AMP_TENSOR_STATS", NULL};
    copy_rows(tables, 1, 8);
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 2);
    release();
}
END_TEST

// Activation gradients losing their smallest values while the weight gradients keep theirs (a
// model that fits most of its examples: their gradients shrink toward zero) is no warning: what
// the optimizer steps with decides.
START_TEST(grad_underflow_weighs_what_reaches_the_optimizer) {
    healthy(6);
    mlp_underflows("'activation_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_msg(strstr(f->detail, "The weight gradients, what the optimizer steps with, lose "
                                    "0.024% at most (blocks.0.mlp)"),
                  "%s", f->detail);
    release();
    // a run that recorded no weight gradient: its activation gradients decide
    sql("DELETE FROM AMP_TENSOR_STATS WHERE kind = 'weight_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "weight gradients"));
    release();
}
END_TEST

// A long layer name in a title is cut on a character's boundary, with "…" to show the cut, and
// every sentence of a finding is UTF-8.
START_TEST(finding_titles_cut_names_as_utf8) {
    healthy(6);
    sql("UPDATE AMP_LAYERS SET name = "
        "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaééééé' WHERE id = 1;"
        "UPDATE AMP_TENSOR_STATS SET n_underflow = numel * 3 / 10 WHERE layer_id = 1 AND "
        "kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    const char *t = findings.v[0].title;
    ck_assert_msg(strstr(t, "aaaé… the worst"), "%s", t);
    for (const char *p = t; *p;) {
        size_t n = amp_utf8_seq(p, SIZE_MAX);
        ck_assert_msg(n > 0, "not UTF-8 at byte %zu of %s", (size_t)(p - t), t);
        p += n;
    }
    release();
    // the text format's lines are wrapped between characters, not inside one
    sql("UPDATE AMP_LAYERS SET name = 'блок.внимание.очень_длинное_имя_слоя_которое_не_помещается_"
        "в_одну_строку' WHERE id = 1;");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *text = test_read_file(out_path, NULL);
    for (const char *p = text; *p;) {
        size_t n = amp_utf8_seq(p, SIZE_MAX);
        ck_assert_msg(n > 0, "not UTF-8 at byte %zu of %s", (size_t)(p - text), text);
        p += n;
    }
    free(text);
}
END_TEST

// Advice for runs without a GradScaler: an fp32 run is told what fp16 would need, an fp16 one
// without a scaler to use one (never "the scale (nan) is already as high as ...").
START_TEST(grad_underflow_advice_without_a_scaler) {
    healthy(6);
    mlp_underflows("'activation_grad', 'weight_grad'");
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;");
    grads_times("/ 65536");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(begins(findings.v[0].advice, "Use a GradScaler (init_scale=262144: "
                                               "amp_scaler_new, or PyTorch's "
                                               "torch.amp.GradScaler): "),
                  "%s", findings.v[0].advice);
    release();
    // a PyTorch run's in PyTorch's words, of its device
    sql("INSERT INTO META (key, value, pid) VALUES ('bridge', 'torch 2.11.0', 1), "
        "('device', 'cpu', 1);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(begins(findings.v[0].advice, "Use a GradScaler (torch.amp.GradScaler(\"cpu\", "
                                               "init_scale=262144)): fp16 gradients"),
                  "%s", findings.v[0].advice);
    release();
    // parameters stored in fp16 (model.half()): a GradScaler refuses their gradients
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 0, 1, 'fc.weight', 'weight', 'f16', 'f16', 4096, "
        "-0.1, 0.1, 0.1, 0, 0, 0, 0, 0, 0);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(begins(findings.v[0].advice, "Keep fp32 master weights: leave the parameters in "
                                               "fp32 and compute in fp16 under torch.autocast "
                                               "with a GradScaler (init_scale=262144)"),
                  "%s", findings.v[0].advice);
    release();
    sql("DELETE FROM AMP_TENSOR_STATS WHERE kind = 'weight';"
        "DELETE FROM META WHERE key IN ('bridge', 'device');"
        "UPDATE AMP_TENSOR_STATS SET dtype = 'f32' WHERE kind IN ('activation_grad', "
        "'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_msg(strstr(findings.v[0].advice, "Nothing to change in fp32") &&
                      strstr(findings.v[0].advice, "init_scale=262144"),
                  "%s", findings.v[0].advice);
    ck_assert_ptr_null(strstr(findings.v[0].advice, "nan"));
    release();
}
END_TEST

START_TEST(grad_underflow_counts_vanished_gradients_not_structural_zeros) {
    healthy(6);
    // structural zeros (healthy_stats: the mask's 3872 of 8192) and a NaN step whose finite
    // values are all zero are no underflow...
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 3, 0, 'mul', 'activation_grad', 'f16', 'f16', "
        "8192, 0, 0, 0, 4352, 0, 0, 0, 0, 3840);");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
    // ... a gradient that is entirely zero is
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE "
        "layer_id = 2 AND kind = 'activation_grad';"
        "INSERT INTO AMP_TENSOR_STATS SELECT pid, step, 2, 'head.weight', 'weight_grad', 'f32', "
        "'f16', 4096, 0, 0, 0, 0, 0, 0, 0, 0, 4096 FROM AMP_STEPS;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].layer, "head");
    ck_assert_msg(strstr(findings.v[0].detail, "lose 100% at most (head)."), "%s",
                  findings.v[0].detail);
    release();
    // ... unless the GradScaler skipped those steps (a scale collapsed to 0 zeroes every
    // gradient): their gradients never reached the weights
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_before = 0, scale_after = 0 "
        "WHERE step >= 2;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1); // steps 0 and 1
    ck_assert_close(evidence(&findings.v[0], "loss_scale"), 65536, 0, 0);
    release();
    sql("UPDATE AMP_STEPS SET found_inf = 1, skipped = 1, scale_before = 0, scale_after = 0;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 0);
    release();
}
END_TEST

// In bf16 (fp32's range) a gradient of zeros is a saturated softmax or a dead ReLU, not
// underflow; values below bf16's smallest normal are, named as bf16's without loss-scale advice.
START_TEST(grad_underflow_in_bf16_counts_no_zero_gradient) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16';"
        "UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE "
        "layer_id = 2 AND kind = 'activation_grad';");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    mlp_underflows("'activation_grad', 'weight_grad'");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradients underflow in bf16"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "loss scale"));
    release();
}
END_TEST

// fp16 gradients of 4e-10 at a scale of 2^24 (the most ampprobe recommends) lose half their
// values: the advice says no scale recovers them (not "init_scale=16777216 lifts them", the
// scale the run had), nor bf16; at 65536 a higher scale recovers some.
START_TEST(grad_underflow_of_vanishing_gradients_at_the_highest_scale) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e-6, max = max * 1e-6, amax = amax * 1e-6, "
        "n_underflow = numel / 2 WHERE kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET scale_before = 16777216, scale_after = 16777216;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("grad-underflow");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_msg(strstr(f->advice, "The scale is already 16777216 and these values are lost even "
                                    "so: no loss scale brings gradients this small"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "bf16"));
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    f = first_of("grad-underflow");
    ck_assert_msg(strstr(f->advice,
                         "a scale of 16777216 (init_scale=16777216, growth_interval=2000) "
                         "recovers some of the values lost"),
                  "%s", f->advice);
    release();
}
END_TEST

// Gradients all vanishingly small (a loss multiplied by 1e-10) in a bf16 run without a
// GradScaler: nothing underflows, but the weights barely move; a warning once the loss stalls.
START_TEST(grad_underflow_names_vanishing_gradients) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'bf16', target_dtype = 'bf16';"
        "UPDATE AMP_TENSOR_STATS SET min = min * 1e-10, max = max * 1e-10, amax = amax * 1e-10 "
        "WHERE kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1); // the loss fell (4.0 to 3.95): information
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(&findings.v[0], "grad_amax_unscaled"), 6680e-10, 1e-6, 0);
    release();
    // under Adam's eps (1e-8) nothing trains, whatever the loss did
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e-3, max = max * 1e-3, amax = amax * 1e-3 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(strstr(findings.v[0].title, "under Adam's eps"), "%s", findings.v[0].title);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET min = min * 1e3, max = max * 1e3, amax = amax * 1e3 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    sql("UPDATE AMP_STEPS SET loss = 4.0 + step * 0.001;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(
        strstr(findings.v[0].title, "the loss did not fall (4 at step 0, 4.005 at step 5)"), "%s",
        findings.v[0].title);
    release();
    // a second process's lower losses are no fall of the first's
    sql("INSERT INTO AMP_STEPS SELECT 2, step, start_ns, end_ns, 1.0 - step * 0.01, 1, grad_norm, "
        "scale_before, scale_after, found_inf, skipped, mem_peak_bytes FROM AMP_STEPS WHERE pid = "
        "1;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 1);
    ck_assert_msg(
        strstr(findings.v[0].title, "the loss did not fall (4 at step 0, 4.005 at step 5)"), "%s",
        findings.v[0].title);
    release();
}
END_TEST

// A step whose loss was NaN (a batch of padding alone: the loss's mean over no target) has
// gradients of zeros that the GradScaler does not skip (nothing in them is non-finite): they are
// no underflow.
START_TEST(grad_underflow_leaves_out_a_broken_step) {
    healthy(6);
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0, min = 0, max = 0, n_zero = numel WHERE step = 3 "
        "AND kind IN ('activation_grad', 'weight_grad');"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 3;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    // the same zeros at a step that trained, of gradients that reach 37-6680 (scaled) in the
    // other steps: exact zeros (a saturated tanh, a dead ReLU), no underflow: not counted
    sql("UPDATE AMP_STEPS SET loss = 2.0, loss_finite = 1 WHERE step = 3;");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
    release();
    // of gradients that stay below 1 (scaled), where a tensor can underflow whole: counted
    sql("UPDATE AMP_TENSOR_STATS SET amax = amax * 1e-4, min = min * 1e-4, max = max * 1e-4 "
        "WHERE kind IN ('activation_grad', 'weight_grad');");
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "all-zero gradients included"));
    release();
    // and left out where the batch is fitted, the loss 0 or a millionth of the first: a large
    // mlp on the samples' data got there within three steps on an H200, its gradients all zero
    // or underflowing at a loss of 1.4e-9; each process by its own first loss (two more here,
    // with no statistics, whose first losses would make step 3 fitted or not)
    sql("CREATE TEMP TABLE other AS SELECT * FROM AMP_STEPS;"
        "UPDATE other SET pid = 0, loss = loss * 1e-12; INSERT INTO AMP_STEPS SELECT * FROM other;"
        "UPDATE other SET pid = 2, loss = loss * 1e24; INSERT INTO AMP_STEPS SELECT * FROM other;");
    for (int i = 0; i < 2; i++) {
        sql(i ? "UPDATE AMP_STEPS SET loss = 0 WHERE pid = 1 AND step = 3;"
              : "UPDATE AMP_STEPS SET loss = 1.4e-9 * (SELECT loss FROM AMP_STEPS WHERE pid = 1 "
                "AND step = 0) WHERE pid = 1 AND step = 3;");
        analyse("grad-underflow", INT64_MIN, INT64_MAX);
        ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
        release();
        analyse("grad-underflow", 3, 3); // whatever the focus
        ck_assert_msg(findings.n == 0, "%s", findings.n ? findings.v[0].title : "");
        release();
    }
    sql("UPDATE AMP_STEPS SET loss = 1e-5 * (SELECT loss FROM AMP_STEPS WHERE pid = 1 AND step = "
        "0) WHERE pid = 1 AND step = 3;"); // a small loss that still trains
    analyse("grad-underflow", INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, 1);
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------

// The part's tests, in the `rules` test case.
void report_numerics_tests(TCase *tc) {
    tcase_add_test(tc, scale_sawtooth_is_a_warning);
    tcase_add_test(tc, scale_sawtooth_then_collapse_are_both_warnings);
    tcase_add_test(tc, scale_collapse_and_stuck_low_are_warnings);
    tcase_add_test(tc, scale_low_in_a_run_shorter_than_the_growth_interval_is_an_info);
    tcase_add_test(tc, scale_calibration_and_stable_scale_are_not_warnings);
    tcase_add_test(tc, a_gradscaler_in_bf16_is_an_info);
    tcase_add_test(tc, lost_updates_of_16_bit_weights_are_named);
    tcase_add_test(tc, scale_clipped_while_scaled_is_a_warning);
    tcase_add_test(tc, scale_skip_rate_advice_follows_the_cause);
    tcase_add_test(tc, overflow_headroom_near_f16_max_is_a_warning);
    tcase_add_test(tc, overflow_headroom_tells_the_outputs_before_the_overflow);
    tcase_add_test(tc, overflow_headroom_ignores_fp32_ops_and_overflowed_outputs);
    tcase_add_test(tc, overflow_headroom_of_an_fp32_run_is_a_note_beyond_the_max);
    tcase_add_test(tc, overflow_absorbed_inside_a_layer_is_a_warning);
    tcase_add_test(tc, the_rules_read_phrases_the_recorders_write);
    tcase_add_test(tc, an_optimizer_stepped_outside_the_scaler_is_named);
    tcase_add_test(tc, grad_underflow_names_the_layer_and_a_scale);
    tcase_add_test(tc, grad_underflow_at_a_scale_above_the_recommended_one);
    tcase_add_test(tc, grad_underflow_scale_is_of_the_16_bit_gradients);
    tcase_add_test(tc, grad_underflow_names_the_steps_it_counted);
    tcase_add_test(tc, grad_underflow_and_scale_are_of_each_model);
    tcase_add_test(tc, grad_underflow_weighs_what_reaches_the_optimizer);
    tcase_add_test(tc, grad_underflow_advice_without_a_scaler);
    tcase_add_test(tc, finding_titles_cut_names_as_utf8);
    tcase_add_test(tc, grad_underflow_counts_vanished_gradients_not_structural_zeros);
    tcase_add_test(tc, grad_underflow_leaves_out_a_broken_step);
    tcase_add_test(tc, grad_underflow_in_bf16_counts_no_zero_gradient);
    tcase_add_test(tc, grad_underflow_names_vanishing_gradients);
    tcase_add_test(tc, grad_underflow_of_vanishing_gradients_at_the_highest_scale);
}
