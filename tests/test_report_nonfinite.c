/*
 * test_report_nonfinite.c — the `report` suite's cases of rule nonfinite-root-cause (and of rule
 * divergence, which it defers to): the first producing op and layer, forward and backward,
 * producer against propagators, the cause each kind of input range points at, a benign
 * loss-scale overflow against a forward one, NaN data, a broken loss, and the counts of the
 * steps affected, on databases that report_fixtures.c builds.
 */
#include "report_fixtures.h"

#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// nonfinite-root-cause

// A focus after the run first broke says where it did: the focused steps' first error is not the
// run's.
START_TEST(a_focus_after_the_first_error_says_where_it_was) {
    attn_overflow(); // errors from step 3 on, steps 4-11 as one aggregated row
    static const struct {
        int64_t lo, hi;
        bool said;
    } cases[] = {
        {6, 11, true}, {4, 4, true}, {3, 11, false}, {0, 2, false}, {INT64_MIN, INT64_MAX, false}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        analyse(NULL, cases[i].lo, cases[i].hi);
        char verdict[2048];
        report_verdict(&model, &findings, verdict, sizeof verdict);
        const bool said =
            strstr(verdict, "The run had an error before the focused steps (--steps): "
                            "its first is at step 3.") != NULL;
        ck_assert_msg(said == cases[i].said, "steps %lld:%lld: %s", (long long)cases[i].lo,
                      (long long)cases[i].hi, verdict);
        release();
    }
    ck_assert_int_eq(CMD(db_path, "--format", "json", "--steps", "6:11", "-o", out_path), 0);
    char *j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"first_error_before_focus\": 3}"), "%s", j);
    free(j);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    j = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(j, "\"first_error_before_focus\": null}"), "%s", j);
    free(j);
}
END_TEST

// A focus inside an aggregate row (steps 4-11, one occurrence a step) cuts the row to it: the
// finding is of the focused steps, not of all the steps the row folded together.
START_TEST(a_focus_cuts_an_aggregate_row_to_its_steps) {
    attn_overflow();
    analyse(NULL, 9, 10);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 9);
    ck_assert_int_eq(f->last_step, 10);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_losses"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_elements"), 1976, 0, 0); // 7903 over 8 steps, 2 of them
    // the inputs and outputs quoted are of the row's first step, which is said
    ck_assert_close(evidence(f, "figures_step"), 4, 0, 0);
    ck_assert_msg(strstr(f->title, " (figures of step 4)"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "quoted are of step 4, before the focused steps"), "%s",
                  f->detail);
    release();
    analyse(NULL, 4, 10); // (a row that begins in the focus is of its steps: nothing to say)
    f = first_of("nonfinite-root-cause");
    ck_assert_ptr_null(strstr(f->title, "figures of"));
    for (int i = 0; i < f->n_evidence; i++)
        ck_assert_str_ne(f->evidence[i].key, "figures_step");
    release();
    analyse(NULL, 11, 40); // the row's last step
    f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 11);
    ck_assert_int_eq(f->last_step, 11);
    release();
}
END_TEST

// An aggregate row does not say which of its steps had an occurrence: a focus on steps of its range
// that did not break finds nothing there, and one that begins on such a step begins where the
// steps broke, with as many non-finite losses as the step records hold.
START_TEST(a_focus_on_healthy_steps_inside_an_aggregate_row_is_healthy) {
    attn_overflow(); // steps 4-11 broke, as one aggregated row each for the mul and the loss
    sql("UPDATE AMP_STEPS SET loss = 3, loss_finite = 1, skipped = 0, found_inf = 0, "
        "scale_after = scale_before WHERE step IN (8, 9);");
    analyse(NULL, 9, 9);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 0);
    release();
    analyse(NULL, 8, 11);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->first_step, 10);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    ck_assert_close(evidence(f, "nonfinite_losses"), 2, 0, 0);
    release();
    // a loss row alone, its value of its first step (+inf): each step's own loss is said (NaN)
    sql("DELETE FROM AMP_EVENTS WHERE kind != 'loss_nonfinite';"
        "UPDATE AMP_EVENTS SET value = 'Inf' WHERE aggregate = 1;");
    analyse(NULL, 8, 40);
    f = first_of("nonfinite-root-cause");
    ck_assert_msg(strstr(f->title, "the loss became NaN at step 10"), "%s", f->title);
    ck_assert_close(evidence(f, "steps_affected"), 2, 0, 0);
    release();
    // without a GradScaler a step's record does not tell (a NaN the loss never sees: a padded
    // sample): the producer's row is kept, in proportion
    wipe();
    layers();
    steps(20, 1);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;" EVENTS_VALUES
        "(1, 0, 0, 'softmax', 'fwd', 'nonfinite_producer', 'error', 64, NULL, 'input 0 bf16 (2, "
        "10) min -inf max 1 amax inf; output bf16 (2, 10) min nan max nan amax nan (64 nan, 0 "
        "+inf, 0 -inf); ', 1, 20, 19);");
    analyse(NULL, 5, 10);
    ck_assert_uint_eq(model.n_events, 1);
    ck_assert_int_eq(model.events[0].occurrences, 6);
    release();
    // nor where some steps of the range have a scale and others none (the row was cut at the
    // first step without: 2 of the 6 steps, all broken)
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, loss = NULL, "
        "loss_finite = 0 WHERE step != 7;");
    analyse(NULL, 5, 10);
    ck_assert_uint_eq(model.n_events, 1);
    ck_assert_int_eq(model.events[0].occurrences, 6);
    ck_assert_int_eq(model.events[0].step, 5);
    ck_assert_int_eq(model.events[0].last_step, 10);
    release();
}
END_TEST

// A scale that backed off to 2^-128 has no fp32 reciprocal: unscale_ multiplies the gradients by
// inf, its inf/NaN check (which reads them before) sees nothing, the optimizer steps, and every
// step after has a non-finite loss with no producer: said as a finding of its own, after the
// root that drove the scale down, or alone.
START_TEST(nonfinite_weights_poisoned_by_a_scale_without_reciprocal) {
    layers();
    steps(8, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step BETWEEN 1 AND 3 OR step >= 5;"
        "UPDATE AMP_STEPS SET scale_before = 2.938735877055719e-39, scale_after = "
        "2.938735877055719e-39 WHERE step = 4;" EVENTS_VALUES
        "(1, 1, NULL, 'log', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'input 0 f32 (2, 10) "
        "min 0 max 1 amax 1; output f32 (2, 10) min 0 max 0 amax 0 (0 nan, 0 +inf, 1 -inf); ', "
        "0, 1, 1),"
        "(1, 2, NULL, 'log', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'y', 1, 2, 3),"
        "(1, 1, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 'Inf', 'fwd', 1, 3, 3),"
        "(1, 5, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, NULL, 1, 3, 7);");
    nonfinite_errors(2);
    ck_assert_msg(strstr(findings.v[0].title, "log of zero"), "%s", findings.v[0].title);
    const report_finding *f = &findings.v[1];
    ck_assert_msg(strstr(f->title, "the weights went non-finite at step 4: its loss scale "
                                   "2.93873588e-39 has no fp32 reciprocal"),
                  "%s", f->title);
    ck_assert_int_eq(f->first_step, 4);
    ck_assert_int_eq(f->last_step, 7);
    ck_assert_double_eq(evidence(f, "nonfinite_losses_after"), 3);
    release();
    // a scale that fp32 can still invert: nothing said of the later steps
    sql("UPDATE AMP_STEPS SET scale_before = 1e-30 WHERE step = 4;");
    nonfinite_errors(1);
    release();
    // no root before it: the poisoned steps are the finding (of the loss events, or of the
    // step records when there are none)
    sql("UPDATE AMP_STEPS SET scale_before = 0 WHERE step = 4;"
        "UPDATE AMP_STEPS SET loss = 3, loss_finite = 1, skipped = 0, found_inf = 0 "
        "WHERE step BETWEEN 1 AND 3;"
        "DELETE FROM AMP_EVENTS WHERE step < 5;");
    for (int events = 1; events >= 0; events--) {
        nonfinite_errors(1);
        ck_assert_msg(strstr(findings.v[0].title, "the weights went non-finite at step 4"), "%s",
                      findings.v[0].title);
        ck_assert_int_eq(findings.v[0].last_step, 7);
        release();
        sql("DELETE FROM AMP_EVENTS;");
    }
    // steps numbered sparsely (by tokens seen): the step before is the process's previous record
    sql("UPDATE AMP_STEPS SET step = step * 1000;");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].title, "the weights went non-finite at step 4000"), "%s",
                  findings.v[0].title);
    ck_assert_int_eq(findings.v[0].last_step, 7000);
    release();
}
END_TEST

// Each rank of a data-parallel run shows the same fault: one finding, the processes counted.
START_TEST(a_fault_every_rank_shows_is_one_finding) {
    attn_overflow();
    analyse(NULL, INT64_MIN, INT64_MAX);
    const size_t alone = findings.n;
    release();
    static const char *const tables[] = {"AMP_LAYERS", "AMP_STEPS", "AMP_TENSOR_STATS",
                                         "AMP_OPS",    "AMP_SCALE", NULL};
    copy_rows(tables, 1, 2); // pid 2: pid 1's rows again
    sql("INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) SELECT 2, step + 1, layer_id, op, phase, kind, "
        "severity, count, value * 0.5, detail, aggregate, occurrences, last_step FROM AMP_EVENTS;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->processes, 1); // pid 2's starts a step later: not the same problem
    release();
    sql("UPDATE AMP_EVENTS SET step = step - 1 WHERE pid = 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(findings.n, alone);
    f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->processes, 2);
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_msg(strstr(f->detail, "The same in 2 processes"), "%s", f->detail);
    release();
}
END_TEST

// In a run of several processes each finding says which one it is of (text, md, html, json);
// one that every process shows says how many, and names none.
START_TEST(a_finding_of_one_of_several_processes_names_it) {
    two_trainings();
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[2048];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Training broke in tiny_gpt (pid 7), 1 of 2 processes: fp16 "
                                  "overflow in blocks.0.attn mul at step 3"),
                  "%s", verdict);
    ck_assert_int_eq(first_of("nonfinite-root-cause")->pid, 7);
    ck_assert_int_eq(first_of("loss-scale")->pid, 7);
    release();
    // a later image of a pid (an exec into a program that records) is named by its own pid
    static const char *const tables[] = {"AMP_PROCESSES",    "AMP_LAYERS", "AMP_STEPS",
                                         "AMP_TENSOR_STATS", "AMP_OPS",    "AMP_EVENTS"};
    for (int back = 0; back <= 1; back++) {
        for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
            char q[128];
            snprintf(q, sizeof q, "UPDATE %s SET pid = %d WHERE pid = %d;", tables[i],
                     back ? 7 : 7 + 4194304, back ? 7 + 4194304 : 7);
            sql(q);
        }
        if (back) break;
        analyse(NULL, INT64_MIN, INT64_MAX);
        report_verdict(&model, &findings, verdict, sizeof verdict);
        ck_assert_msg(strstr(verdict, "Training broke in tiny_gpt (pid 7, image 2 of it), 1 of 2 "),
                      "%s", verdict);
        release();
    }
    const char *formats[][2] = {
        {"text", "where: steps 3-11, layer blocks.0.attn, op mul (fwd), in tiny_gpt (pid 7)\n"},
        {"md", "- op: mul (fwd)\n- process: tiny\\_gpt (pid 7)\n"},
        {"html", "steps 3-11, layer blocks.0.attn, op mul (fwd), in tiny_gpt (pid 7)</div>"},
        {"json", "\"phase\": \"fwd\", \"processes\": 1, \"pid\": 7, \"program\": \"tiny_gpt\",\n"}};
    formats_say(formats, sizeof formats / sizeof *formats);
    // both break alike: one finding of 2 processes, which names neither
    sql("INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) SELECT 1, step, layer_id, op, phase, kind, "
        "severity, count, value, detail, aggregate, occurrences, last_step FROM AMP_EVENTS;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1, "
        "scale_after = scale_before / 2 WHERE step >= 3;");
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    char *t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "Training broke: fp16 overflow"), "%s", t);
    ck_assert_msg(strstr(t, "op mul (fwd), in 2 processes\n"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"processes\": 2, \"pid\": null, \"program\": null,"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "md", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "- op: mul (fwd)\n- processes: 2\n"), "%s", t);
    free(t);
    // a run of one process names none in text, its pid in json
    wipe();
    attn_overflow();
    ck_assert_int_eq(CMD(db_path, "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(!strstr(t, "(pid") && strstr(t, "op mul (fwd)\n"), "%s", t);
    free(t);
    ck_assert_int_eq(CMD(db_path, "--format", "json", "-o", out_path), 0);
    t = test_read_file(out_path, NULL);
    ck_assert_msg(strstr(t, "\"processes\": 1, \"pid\": 1, \"program\": null,"), "%s", t);
    free(t);
}
END_TEST

START_TEST(nonfinite_attention_overflow_is_the_first_finding) {
    attn_overflow();
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_ge(findings.n, 1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->rule, "nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->layer, "blocks.0.attn");
    ck_assert_str_eq(f->op, "mul");
    ck_assert_str_eq(f->phase, "fwd");
    ck_assert_int_eq(f->first_step, 3);
    ck_assert_int_eq(f->last_step, 11);
    ck_assert_ptr_nonnull(strstr(f->title, "fp16 overflow"));
    ck_assert_ptr_nonnull(strstr(f->advice, "1/sqrt(d_head)"));
    ck_assert_ptr_nonnull(strstr(f->advice, "bf16"));
    ck_assert_close(evidence(f, "input_amax"), 6.26953, 1e-9, 0);
    ck_assert_close(evidence(f, "output_posinf"), 3913, 0, 0);
    ck_assert_close(evidence(f, "steps_affected"), 9, 0, 0);
    // the values of the site's every row (step 3's and the aggregate row's of steps 4-11), as
    // the steps are: not step 3's alone (a focus on steps 4-11 had counted more than the run)
    ck_assert_close(evidence(f, "nonfinite_elements"), 7890 + 7903, 0, 0);
    // the backward producer of a step whose forward was already broken is no root of its own
    ck_assert_uint_eq(count("nonfinite-root-cause", AMP_SEVERITY_INFO), 1);
    ck_assert_msg(strstr(f->advice, "in fp32 (autocast disabled around it: torch.autocast(..., "
                                    "enabled=False)"),
                  "%s", f->advice);
    release();
    // the same overflow in a run without autocast (FSDP1's MixedPrecision in fp16, a model cast
    // with .half()): no autocast to disable, the module's parameters to keep in fp32
    sql("INSERT INTO META (key, value, pid) VALUES ('compute_dtype', 'f16', 1);");
    analyse(NULL, INT64_MIN, INT64_MAX);
    f = &findings.v[0];
    ck_assert_str_eq(f->op, "mul");
    ck_assert_msg(strstr(f->advice, "in fp32 (no autocast here: the fp16 is the parameters' "
                                    "(model.half(), FSDP's MixedPrecision), so .float() inputs "
                                    "and that module's parameters in fp32: module.float(), "),
                  "%s", f->advice);
    ck_assert_msg(!strstr(f->advice, "enabled=False"), "%s", f->advice);
    release();
}
END_TEST

START_TEST(nonfinite_input_and_log_zero_are_explained) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 5, NULL, 'add', 'fwd', 'nonfinite_input', 'error', 1, 4.5, 'input 1 f32 (16, 32) min "
        "0 max 0 amax 0 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 5, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 96, 2.3, 'x', 0, 1, 5),"
        "(1, 6, 2, 'log', 'fwd', 'nonfinite_producer', 'error', 199, 0, 'input 0 f32 (256, 64) "
        "min 0 max 1 amax 1; output f32 (256, 64) min 0 max 0 amax 0 (0 nan, 0 +inf, 199 -inf); ',"
        " 0, 1, 6);");
    nonfinite_errors(2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "input data"));
    ck_assert_int_eq(findings.v[0].first_step, 5);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Sanitize the data"));
    ck_assert_str_eq(findings.v[1].op, "log");
    ck_assert_str_eq(findings.v[1].layer, "head");
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "log of zero"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].advice, "clamp"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].advice, "this underflows in fp32 too")); // f32 in
    ck_assert_ptr_null(strstr(findings.v[1].detail, "not watched"));
    release();
    // a 16-bit argument's 0 may be a small value rounded to 0: fp32 is part of the fix
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'input 0 f32', 'input 0 f16') WHERE op "
        "= 'log';");
    nonfinite_errors(2);
    ck_assert_ptr_null(strstr(findings.v[1].advice, "this underflows in fp32 too"));
    ck_assert_msg(strstr(findings.v[1].advice, "Its argument was fp16, where a value below 6e-8 "
                                               "rounds to 0: the zero may be an underflow that "
                                               "fp32 would have kept"),
                  "%s", findings.v[1].advice);
    release();
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'input 0 f16', 'input 0 f32') WHERE op "
        "= 'log';");
    // made outside the model, in a run with modules the bridge did not watch: they are named
    sql("UPDATE AMP_EVENTS SET layer_id = NULL WHERE op = 'log';"
        "INSERT INTO META (key, value, pid) VALUES ('unwatched', 'Decoder (1.2 M values)', 1);");
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[1].op, "log");
    ck_assert_ptr_nonnull(strstr(findings.v[1].detail,
                                 "runs modules that were not watched, which may be where it was "
                                 "made: Decoder (1.2 M values)."));
    ck_assert_ptr_null(strstr(findings.v[0].detail, "not watched")); // the data's: in a layer
    release();
}
END_TEST

// NaN in the batch of step 2 of a run without a GradScaler: the weights are NaN from there on. A
// focus on steps 5-8 finds no producer there; its finding says the loss has been non-finite
// since step 2 (not "the loss became NaN at step 5", naming the first layer that read the NaN
// weights as where it was made), with or without the loss events.
START_TEST(a_focus_inside_a_nonfinite_run_points_before_it) {
    healthy(12);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 2;"
        "UPDATE AMP_TENSOR_STATS SET n_nan = numel WHERE step >= 3 AND kind = 'activation';");
    for (int events = 0; events < 2; events++) {
        if (events)
            sql(EVENTS_VALUES
                "(1, 2, 0, 'add', 'fwd', 'nonfinite_input', 'error', 1, NULL, 'input 1 f32 (2) "
                "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 2),"
                "(1, 2, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 1, 10, 11);");
        analyse("nonfinite-root-cause", 5, 8);
        ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 1);
        const report_finding *f = &findings.v[0];
        ck_assert_msg(strcmp(f->title, "the loss has been non-finite since step 2, before the "
                                       "focused steps") == 0,
                      "%d: %s", events, f->title);
        ck_assert_ptr_nonnull(strstr(f->advice, "ampprobe report --steps 2:2"));
        ck_assert_close(evidence(f, "nonfinite_since"), 2, 0, 0);
        release();
        // a focus from the first non-finite step on has its own root (or first step) to tell
        analyse("nonfinite-root-cause", 2, 8);
        ck_assert_ptr_null(strstr(findings.v[0].title, "since step"));
        release();
    }
}
END_TEST

// A learning rate too high: the loss and the gradient norm blow up step by step (in fp32) until
// a matmul's output is NaN. The finding leads with the divergence and its advice is the
// training's (no "keep it in fp32" in an fp32 run); the same NaN after a loss spike the training
// recovered from is the op's.
static void diverging_steps(double loss4) {
    layers();
    char buf[512];
    snprintf(buf, sizeof buf,
             "INSERT INTO AMP_STEPS VALUES (1, 0, 0, 900, 4.27, 1, 0.9, NULL, NULL, 0, 0, NULL),"
             "(1, 1, 1000, 1900, 9.35, 1, 7.3, NULL, NULL, 0, 0, NULL),"
             "(1, 2, 2000, 2900, 6498, 1, 6185, NULL, NULL, 0, 0, NULL),"
             "(1, 3, 3000, 3900, 1.8e6, 1, 9.9e5, NULL, NULL, 0, 0, NULL),"
             "(1, 4, 4000, 4900, %.17g, 1, 1.2e19, NULL, NULL, 0, 0, NULL),"
             "(1, 5, 5000, 5900, NULL, 0, NULL, NULL, NULL, 0, 0, NULL);",
             loss4);
    sql(buf);
    sql(EVENTS_VALUES "(1, 5, 0, 'matmul', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f32 (16, 96) min -3.4e36 max 3.6e36 amax 3.6e36; output f32 "
                      "(16, 16) no finite value (8192 nan, 0 +inf, 0 -inf); ', 0, 1, 5);");
}

START_TEST(nonfinite_after_a_divergence_blames_the_training) {
    diverging_steps(1.1e10);
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_str_eq(f->op, "matmul");
    ck_assert_int_eq(f->first_step, 5);
    ck_assert_msg(begins(f->title, "training diverged before step 5 (the loss 4.27 -> 1.1e+10 by "
                                   "step 4); its first non-finite value: blocks.0.attn matmul"),
                  "%s", f->title);
    ck_assert_ptr_nonnull(strstr(f->advice, "Lower the learning rate"));
    ck_assert_ptr_nonnull(strstr(f->advice, "the gradient norm from 0.9 to 1.2e+19"));
    ck_assert_ptr_null(strstr(f->advice, "in fp32 ("));
    ck_assert_close(evidence(f, "diverged_step"), 2, 0, 0); // (6498: over 100x the first 4.27)
    ck_assert_close(evidence(f, "loss_before"), 1.1e10, 0, 1e-12);
    ck_assert_close(evidence(f, "grad_norm_first"), 0.9, 0, 1e-12);
    release();
    // a focus after the loss took off measures it from the run's first loss all the same, also
    // one on the broken step alone (the loss before it is the step before the focus), and with
    // its divergence where it was (step 2)
    for (int lo = 3; lo <= 5; lo += 2) {
        analyse("nonfinite-root-cause", lo, 5);
        ck_assert_msg(title_starts("training diverged before step 5 (the loss "
                                   "4.27 -> 1.1e+10 by step 4)"),
                      "%d: %s", lo, findings.v[0].title);
        ck_assert_close(evidence(&findings.v[0], "diverged_step"), 2, 0, 0);
        release();
    }
    // the first step skipped with an infinite gradient norm (a GradScaler's calibration): the
    // first finite norm is the mark
    sql("UPDATE AMP_STEPS SET grad_norm = 9e999 WHERE step = 0;");
    nonfinite_errors(1);
    ck_assert_msg(title_starts("training diverged"), "%s", findings.v[0].title);
    ck_assert_close(evidence(&findings.v[0], "grad_norm_first"), 7.3, 0, 1e-12);
    release();
    // the loss still up at step 4 but its gradient norm back near the first: no longer diverging
    sql("UPDATE AMP_STEPS SET grad_norm = 0.9 WHERE step = 0;"
        "UPDATE AMP_STEPS SET grad_norm = 2 WHERE step = 4;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("training diverged"), "%s", findings.v[0].title);
    release();
    // the loss back down at step 4: the spike is over, the NaN is the matmul's own
    wipe();
    diverging_steps(3.9);
    nonfinite_errors(1);
    f = &findings.v[0];
    ck_assert_msg(begins(f->title, "blocks.0.attn matmul produced non-finite values"), "%s",
                  f->title);
    // an fp32 output past its range: no advice to keep it in fp32 or train in bf16
    ck_assert_ptr_nonnull(strstr(f->advice, "fp32 would not hold it either"));
    ck_assert_ptr_null(strstr(f->advice, "train in bf16"));
    release();
}
END_TEST

// Each parameter's largest |w| as steps 0..n-1 began (kind 'weight'), two parameters of layer 1.
static void weight_rows(const double *amax, int n) {
    for (int i = 0; i < n; i++) {
        char buf[512];
        snprintf(buf, sizeof buf,
                 "INSERT INTO AMP_TENSOR_STATS VALUES (1, %d, 1, 'fc.weight', 'weight', 'f32', "
                 "'f16', 4096, %.17g, %.17g, %.17g, 0, 0, 0, 0, 0, 0), (1, %d, 1, 'fc.bias', "
                 "'weight', 'f32', 'f16', 64, 0, 0.01, 0.01, 0, 0, 0, 0, 0, 0);",
                 i, -amax[i], amax[i], amax[i], i);
        sql(buf);
    }
}

// A learning rate too high with every loss finite (bf16, fp32): the loss and the gradient norm
// blow up together. An error while the loss stays up, a warning once it came back down; the
// weights' rows say which update blew them up; nothing for a spike whose gradient norm did not
// grow, nor for a divergence that ends in NaN (nonfinite-root-cause tells that one).
START_TEST(divergence_with_finite_losses_is_found) {
    layers();
    const double loss[] = {2.2, 300, 1e6, 80, 70, 60, 90, 80},
                 norm[] = {7, 100, 1e5, 50, 50, 50, 50, 50};
    const double w[] = {0.19, 100, 150, 150, 150, 150, 150, 150};
    loss_steps(loss, norm, 8);
    weight_rows(w, 8);
    divergences(1);
    const report_finding *f = &findings.v[0];
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_str_eq(f->title, "training diverged at step 1: the loss rose from 2.2 to 1e+06 "
                               "(step 2) and was 80 over steps 3-7 (the median)");
    ck_assert_int_eq(f->first_step, 1);
    ck_assert_int_eq(f->last_step, 7);
    ck_assert_ptr_nonnull(strstr(f->detail, "the update after step 0 multiplied the largest |w| "
                                            "of fc.weight by 526 (0.19 -> 100)"));
    ck_assert_ptr_nonnull(strstr(f->advice, "Lower the learning rate"));
    ck_assert_close(evidence(f, "diverged_step"), 1, 0, 0);
    ck_assert_close(evidence(f, "loss_end"), 80, 0, 0);
    ck_assert_close(evidence(f, "grad_norm_at"), 100, 0, 0);
    release();
    // every step from the divergence on skipped by a GradScaler: no update applied since (a
    // loss that jumped with weights written at once is the loss-scale collapse's), none
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536, found_inf = 0, "
        "skipped = 0 WHERE step = 0;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 32768, found_inf = 1, "
        "skipped = 1 WHERE step > 0;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET scale_after = 65536, found_inf = 0, skipped = 0 WHERE step = 3;");
    divergences(1);
    release();
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    // a focus after the divergence began still has it, from the focus's first step
    analyse("divergence", 2, 7);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_int_eq(findings.v[0].first_step, 2);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "by step 1, before the focus"));
    release();
    // the loss back down, whatever one batch at the end says: a warning
    sql("UPDATE AMP_STEPS SET loss = 2.3 WHERE step >= 3; UPDATE AMP_STEPS SET loss = 9 WHERE "
        "step = 7;");
    divergences(1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_WARNING);
    ck_assert_str_eq(findings.v[0].title, "the loss blew up from 2.2 to 1e+06 (step 2; diverging "
                                          "from step 1) and came back down to 2.3 over steps 3-7 "
                                          "(the median)");
    release();
    // without gradient norms it takes the loss a hundredfold (step 1: 300 against 2.2)
    sql("UPDATE AMP_STEPS SET grad_norm = NULL;");
    diverges_at(1);
    // a run resumed from a checkpoint (steps from 60) measures a trained model: before three
    // steps are in its base only a loss a hundredfold counts, so a rise to 90 at its second
    // step waits for its third
    sql("UPDATE AMP_STEPS SET loss = 90, grad_norm = 100 WHERE step = 1;"
        "UPDATE AMP_STEPS SET grad_norm = CASE step WHEN 0 THEN 7 WHEN 1 THEN 100 WHEN 2 THEN "
        "1e5 ELSE 50 END;");
    analyse("divergence", INT64_MIN, INT64_MAX);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), 1, 0, 0);
    release();
    sql("UPDATE AMP_STEPS SET step = step + 60; UPDATE AMP_TENSOR_STATS SET step = step + 60;");
    diverges_at(62);
    sql("UPDATE AMP_STEPS SET step = step - 60, loss = CASE step WHEN 61 THEN 300 ELSE loss END;"
        "UPDATE AMP_TENSOR_STATS SET step = step - 60;");
    // a loss spike whose gradient norm stayed within tenfold: none
    sql("UPDATE AMP_STEPS SET grad_norm = 7 + step;");
    divergences(0);
    release();
    // ... but where a step has no norm (skipped: inf; left out by --stats-every) its loss a
    // hundredfold is one
    sql("UPDATE AMP_STEPS SET grad_norm = 9e999 WHERE step = 2;");
    diverges_at(2);
    // the loss twice the first at one step and the norm tenfold at another: noise, none
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 2.2 WHEN 1 THEN 5 ELSE 2.3 END, "
        "grad_norm = CASE step WHEN 3 THEN 100 ELSE 7 END;");
    divergences(0);
    release();
    // a spike of a few times a small loss that came back down (a converged model's batch
    // noise): none; the same that stays up: a divergence
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 1.2e-4 WHEN 1 THEN 8e-4 ELSE 1.5e-4 "
        "END, grad_norm = CASE step WHEN 1 THEN 100 ELSE 7 END;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 8e-4, grad_norm = 100 WHERE step >= 3;");
    divergences(1);
    ck_assert_int_eq(findings.v[0].severity, AMP_SEVERITY_ERROR);
    release();
    // a fitted model resumed with batches of one: its first loss a lucky 3e-5, the next ones
    // many times that and a norm of twice the first now and then, all batch noise (measured from
    // the largest of the first five): none
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 3e-5 WHEN 1 THEN 4e-4 WHEN 2 THEN "
        "1e-4 WHEN 3 THEN 2e-4 WHEN 4 THEN 3e-4 WHEN 5 THEN 2e-3 ELSE 3e-4 END, grad_norm = CASE "
        "step WHEN 0 THEN 0.0013 WHEN 2 THEN 0.005 WHEN 5 THEN 0.0208 ELSE 0.01 END;");
    divergences(0);
    release();
    // ... and resumed at step 200, its four batches 3e-5, 4e-5, 3.5e-4 and 9e-4 over and over,
    // the hard ones' norms thirtyfold: each rise back down within three steps, none; a rise that
    // stays up is one
    sql("UPDATE AMP_STEPS SET step = step + 200, loss = CASE step % 4 WHEN 0 THEN 3.1e-5 WHEN 1 "
        "THEN 4e-5 WHEN 2 THEN 3.5e-4 ELSE 8.6e-4 END, grad_norm = CASE step % 4 WHEN 0 THEN "
        "0.0013 WHEN 1 THEN 0.0026 ELSE 0.044 END; UPDATE AMP_TENSOR_STATS SET step = step + 200;");
    divergences(0);
    release();
    sql("UPDATE AMP_STEPS SET loss = 8.6e-4, grad_norm = 0.044 WHERE step >= 204;");
    diverges_at(203);
    // ... whatever the focus: one that ends before the rise has stayed up three steps has it
    analyse("divergence", 200, 204);
    ck_assert_uint_eq(findings.n, 1);
    ck_assert_close(evidence(&findings.v[0], "diverged_step"), 203, 0, 0);
    release();
    // a loss of 0 between (a fitted batch) is back down: the rise that stays up is the next one
    sql("UPDATE AMP_STEPS SET loss = 0 WHERE step = 204;");
    diverges_at(205);
    // ... or one that goes a thousandfold, back down at once
    sql("UPDATE AMP_STEPS SET loss = CASE step % 4 WHEN 0 THEN 3.1e-5 WHEN 1 THEN 4e-5 WHEN 2 "
        "THEN 3.5e-4 ELSE 8.6e-4 END WHERE step >= 204; UPDATE AMP_STEPS SET loss = 0.1, "
        "grad_norm = 1 WHERE step = 205;");
    diverges_at(205);
    sql("UPDATE AMP_STEPS SET step = step - 200; UPDATE AMP_TENSOR_STATS SET step = step - 200;");
    // a fresh run (from step 0) whose first loss was NaN is no resumed one: its spike counts
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 4 THEN 300 WHEN 2 THEN 2.3 ELSE 2.2 END, "
        "grad_norm = CASE step WHEN 4 THEN 100 ELSE 7 END;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, grad_norm = NULL WHERE step = 0;");
    diverges_at(4);
    // a forward that broke after it began (an overflow that the loss did not show) is
    // nonfinite-root-cause's
    sql("UPDATE AMP_STEPS SET loss = CASE step WHEN 0 THEN 2.2 WHEN 1 THEN 9 WHEN 2 THEN 1e6 "
        "ELSE 80 END, grad_norm = CASE step WHEN 0 THEN 7 WHEN 1 THEN 100 ELSE 1e5 END;");
    sql(EVENTS_VALUES "(1, 3, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8 +inf, 0 -inf); ', 0, 1, 3);");
    divergences(0);
    release();
    // one a few steps later, the norm back down by then (an fp16 -inf the loss did not show): the
    // op's, and the divergence is this rule's all the same
    sql("UPDATE AMP_STEPS SET grad_norm = 50 WHERE step >= 3; UPDATE AMP_EVENTS SET step = 6, "
        "last_step = 6;");
    divergences(1);
    release();
    sql("DELETE FROM AMP_EVENTS;");
    // a divergence that ends in a NaN loss is nonfinite-root-cause's
    sql("UPDATE AMP_STEPS SET grad_norm = 1e5, loss = NULL, loss_finite = 0 WHERE step = 3;");
    divergences(0);
    release();
    // a healthy run has none
    wipe();
    healthy(20);
    divergences(0);
    release();
}
END_TEST

// Steps skipped after the training diverged: the loss-scale finding says so, and its advice is
// to fix the divergence before the scale; the same skips in a run that did not diverge keep the
// scale's advice.
START_TEST(skips_after_a_divergence_point_at_it) {
    layers();
    for (int i = 0; i < 10; i++) {
        const bool skip = i >= 6 && i % 2 == 0;
        const double loss = i < 5 ? 2.3 : 2.3 * (1 << (i - 3)), norm = i < 5 ? 0.2 : 5.0 * i;
        char buf[256];
        snprintf(buf, sizeof buf,
                 "INSERT INTO AMP_STEPS VALUES (1, %d, %d, %d, %.17g, 1, %s, 65536, %d, %d, %d, "
                 "NULL);",
                 i, i * 1000, i * 1000 + 900, loss, skip ? "9e999" : "0.2", skip ? 32768 : 65536,
                 skip, skip);
        sql(buf);
        if (!skip && i >= 5) {
            snprintf(buf, sizeof buf, "UPDATE AMP_STEPS SET grad_norm = %.17g WHERE step = %d;",
                     norm, i);
            sql(buf);
        }
    }
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("loss-scale");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_WARNING);
    ck_assert_ptr_nonnull(strstr(f->title, "of the steps were skipped"));
    ck_assert_ptr_nonnull(strstr(f->detail, "after the training diverged at step 5"));
    ck_assert_msg(begins(f->advice, "Stop the divergence first"), "%s", f->advice);
    release();
    // the loss flat: the scale's own advice
    sql("UPDATE AMP_STEPS SET loss = 2.3, grad_norm = 0.2 WHERE NOT skipped;");
    analyse("loss-scale", INT64_MIN, INT64_MAX);
    f = first_of("loss-scale");
    ck_assert_ptr_null(strstr(f->detail, "diverged"));
    ck_assert_msg(!begins(f->advice, "Stop the divergence"), "%s", f->advice);
    release();
}
END_TEST

// One update blows the weights up (Adam at lr 100) and the next forward overflows at once: no
// loss lived to show a divergence, the weights' rows do. Not told for weights that grew less than
// tenfold, nor for a NaN that came with the data.
START_TEST(nonfinite_after_a_weight_blowup_blames_the_update) {
    layers();
    const double loss[] = {2.2, NAN, NAN, NAN}, norm[] = {7, NAN, NAN, NAN};
    const double w[] = {0.19, 100, 100, 100};
    loss_steps(loss, norm, 4);
    weight_rows(w, 4);
    sql(EVENTS_VALUES "(1, 1, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 3, 3);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_msg(begins(f->title,
                         "the weights blew up before step 1 (fc.weight's largest |w| 0.19 at "
                         "step 0, 100 at step 1); its first non-finite value: fp16 "
                         "overflow in blocks.0.mlp linear"),
                  "%s", f->title);
    // the gradients it stepped with as they were (step 0's norm, the first): the learning rate,
    // or code that wrote the weights, not an update's length
    ck_assert_msg(begins(f->advice,
                         "Find what made the weights jump: the largest |w| of fc.weight grew "
                         "526-fold between steps 0 and 1 (0.19 -> 100) while the gradients were "
                         "ordinary (a norm of 7 at step 0, the first 7), so either the learning "
                         "rate is far too high"),
                  "%s", f->advice);
    ck_assert_ptr_null(strstr(f->advice, "train in bf16"));
    ck_assert_close(evidence(f, "weight_amax_before"), 0.19, 0, 1e-12);
    release();
    // no norm at that step (--stats-every left it out): the update's length, nothing said of
    // the gradients
    sql("UPDATE AMP_STEPS SET grad_norm = NULL WHERE step = 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Lower the learning rate"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the update after step 0 multiplied the "
                                                       "largest |w| of fc.weight by 526"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "gradients were"));
    ck_assert_ptr_null(strstr(findings.v[0].advice, "stepped with"));
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = 7 WHERE step = 0;");
    // the largest parameter grown less than tenfold, a smaller one of some size a hundredfold:
    // that one blew up (a transformer's embedding 3.6 -> 33, its projections 0.18 -> 30)
    sql("INSERT INTO AMP_TENSOR_STATS VALUES (1, 0, 0, 'wte', 'weight', 'f32', 'f16', 64, -3.6, "
        "3.6, 3.6, 0, 0, 0, 0, 0, 0), (1, 1, 0, 'wte', 'weight', 'f32', 'f16', 64, -33, 33, 33, "
        "0, 0, 0, 0, 0, 0);"
        "UPDATE AMP_TENSOR_STATS SET amax = 0.18 WHERE op = 'fc.weight' AND step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 30 WHERE op = 'fc.weight' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "of fc.weight grew 167-fold"));
    release();
    // of two that blew up, the larger now (a bias grown 500-fold to 5 beside it)
    sql("UPDATE AMP_TENSOR_STATS SET amax = 5 WHERE op = 'fc.bias' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "of fc.weight grew 167-fold"));
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0.01 WHERE op = 'fc.bias';");
    // one that grew a thousandfold from next to nothing (a layer scale of 1e-6, under a tenth
    // of the largest |w| then): no blow-up
    sql("UPDATE AMP_TENSOR_STATS SET amax = 0.18 WHERE op = 'fc.weight';"
        "UPDATE AMP_TENSOR_STATS SET amax = 3.6 WHERE op = 'wte';"
        "UPDATE AMP_TENSOR_STATS SET amax = 1e-6 WHERE op = 'fc.bias' AND step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 1e-3 WHERE op = 'fc.bias' AND step > 0;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    wipe();
    layers();
    loss_steps(loss, norm, 4);
    weight_rows(w, 4);
    sql(EVENTS_VALUES "(1, 3, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 1, 3);");
    // weights recorded every third step (--stats-every 3): a thousandfold over three updates is
    // tenfold each, on average; 526-fold is not
    sql("DELETE FROM AMP_TENSOR_STATS WHERE step IN (1, 2);"
        "UPDATE AMP_TENSOR_STATS SET amax = 190 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the 3 updates between steps 0 and 3 "
                                                       "multiplied"));
    release();
    // the last of them stepped with gradients a hundred times the first's: said
    sql("UPDATE AMP_STEPS SET grad_norm = 700 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "It stepped with a gradient norm of 700 at "
                                                       "step 2, 100 times the first"));
    release();
    sql("UPDATE AMP_STEPS SET grad_norm = NULL WHERE step = 2;");
    sql("UPDATE AMP_TENSOR_STATS SET amax = 100 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    // fiftyfold between steps 0 and 3 with two of the three steps skipped (the weights kept):
    // one update applied, tenfold and more
    sql("UPDATE AMP_TENSOR_STATS SET amax = 9.5 WHERE op = 'fc.weight' AND step = 3;"
        "UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 32768, found_inf = 1, "
        "skipped = 1 WHERE step IN (1, 2);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "the one update applied between steps 0 "
                                                       "and 3 multiplied"));
    release();
    // the NaN at step 1, which --stats-every left out: its weights are step 3's (the updates in
    // between skipped)
    sql("UPDATE AMP_EVENTS SET step = 1;");
    nonfinite_errors(1);
    ck_assert_msg(title_starts("the weights blew up before step 1 (fc.weight's "
                               "largest |w| 0.19 at step 0, 9.5 at step 3)"),
                  "%s", findings.v[0].title);
    release();
    sql("UPDATE AMP_EVENTS SET step = 3;");
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, found_inf = 0, "
        "skipped = 0;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
    // grown fivefold in one update: the op's own finding
    sql("INSERT INTO AMP_TENSOR_STATS SELECT pid, 2, layer_id, op, kind, dtype, target_dtype, "
        "numel, min, max, amax, n_nan, n_posinf, n_neginf, n_overflow, n_underflow, n_zero FROM "
        "AMP_TENSOR_STATS WHERE step = 0;"
        "UPDATE AMP_TENSOR_STATS SET amax = 0.95 WHERE op = 'fc.weight' AND step = 3;");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "bf16"));
    release();
    // NaN in the data is the data's, whatever the weights did
    sql("UPDATE AMP_TENSOR_STATS SET amax = 100 WHERE op = 'fc.weight' AND step = 3;"
        "UPDATE AMP_EVENTS SET kind = 'nonfinite_input';");
    nonfinite_errors(1);
    ck_assert_msg(!title_starts("the weights"), "%s", findings.v[0].title);
    release();
}
END_TEST

// Weights grown 3x a step (a learning rate too high, no update a blow-up) until a product
// overflows fp16: the op's finding, its advice led by the training's (the growth since the first
// step); nothing of it for weights grown 50-fold, nor for a NaN that came with the data.
START_TEST(nonfinite_after_weights_grew_blames_the_training_first) {
    layers();
    const double loss[] = {2.2, 2.3, 2.1, 2.4, 2.2, NAN}, norm[] = {7, 7, 7, 7, 7, NAN};
    const double w[] = {0.19, 0.57, 1.7, 5.1, 15.4, 46};
    loss_steps(loss, norm, 6);
    weight_rows(w, 6);
    sql(EVENTS_VALUES "(1, 5, 1, 'linear', 'fwd', 'nonfinite_producer', 'error', 8192, NULL, "
                      "'input 0 f16 (16, 96) min -3938 max 3938 amax 3938; output f16 (16, 16) "
                      "min -65472 max 65472 amax 65472 (0 nan, 8000 +inf, 192 -inf); ', 0, 1, 5);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_msg(begins(f->title, "fp16 overflow in blocks.0.mlp linear"), "%s", f->title);
    ck_assert_msg(begins(f->advice,
                         "Lower the learning rate or add weight decay: the weights grew 242-fold "
                         "over the run (the largest |w| 0.19 at step 0, 46 at step 5)"),
                  "%s", f->advice);
    ck_assert_ptr_nonnull(strstr(f->advice, "Meanwhile: Keep blocks.0.mlp linear in fp32"));
    ck_assert_close(evidence(f, "weight_amax_at"), 46, 0, 0);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 9.5 WHERE op = 'fc.weight' AND step = 5;");
    nonfinite_errors(1);
    ck_assert_msg(!begins(findings.v[0].advice, "Lower"), "%s", findings.v[0].advice);
    release();
    sql("UPDATE AMP_TENSOR_STATS SET amax = 46 WHERE op = 'fc.weight' AND step = 5;"
        "UPDATE AMP_EVENTS SET kind = 'nonfinite_input';");
    nonfinite_errors(1);
    ck_assert_msg(!begins(findings.v[0].advice, "Lower"), "%s", findings.v[0].advice);
    release();
}
END_TEST

// The loss NaN with no producer traced, the weights NaN as the step began (Adam with eps=0 over
// a gradient of 0): the parameter is named, not the first op that read it; with the weights
// finite, the first output the statistics show non-finite.
START_TEST(nonfinite_weights_as_a_step_began_are_named) {
    layers();
    const double loss[] = {2.2, NAN, NAN}, norm[] = {7, NAN, NAN}, w[] = {0.19, 0.2, 0.2};
    loss_steps(loss, norm, 3);
    weight_rows(w, 3);
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = 4 WHERE op = 'fc.weight' AND step > 0;"
        "INSERT INTO AMP_TENSOR_STATS VALUES (1, 1, 2, 'linear', 'activation', 'f32', 'f16', 64, "
        "NULL, NULL, NULL, 64, 0, 0, 0, 0, 0);");
    nonfinite_errors(1);
    const report_finding *f = &findings.v[0];
    ck_assert_ptr_nonnull(strstr(f->title, "; the weights were non-finite first: fc.weight as "
                                           "step 1 began"));
    ck_assert_str_eq(f->layer, "blocks.0.mlp");
    ck_assert_ptr_nonnull(strstr(f->detail, "its row of the step before finite"));
    ck_assert_msg(begins(f->advice, "Look at what wrote fc.weight before step 1: the optimizer's "
                                    "update"),
                  "%s", f->advice);
    ck_assert_close(evidence(f, "weights_nonfinite_step"), 1, 0, 0);
    release();
    sql("INSERT INTO META (key, value, pid) VALUES ('updates', 'by hand', 1);");
    nonfinite_errors(1);
    ck_assert_msg(begins(findings.v[0].advice, "Look at what wrote fc.weight before step 1: the "
                                               "update that no optimizer.step() made"),
                  "%s", findings.v[0].advice);
    release();
    // the parameter stored in fp16 (model.half()) under an Adam whose eps fp16 rounds to 0: the
    // update divided by zero, said with the fix; not with an eps fp16 holds, nor fused, nor for
    // an f32 parameter
    sql("DELETE FROM META WHERE key = 'updates';"
        "INSERT INTO META (key, value, pid) VALUES ('optimizer', 'AdamW', 1), "
        "('optimizer.eps', '1.0000000000000000e-08', 1);");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16")); // (an f32 parameter)
    release();
    sql("UPDATE AMP_TENSOR_STATS SET dtype = 'f16' WHERE kind = 'weight';");
    nonfinite_errors(1);
    f = &findings.v[0];
    ck_assert_msg(strstr(f->detail, " fc.weight is stored in fp16 (the model itself cast to fp16, "
                                    "no fp32 master copy), and AdamW's eps=1e-08 is 0 in fp16"),
                  "%s", f->detail);
    ck_assert_msg(begins(f->advice, "Keep fp32 master weights"), "%s", f->advice);
    ck_assert_ptr_nonnull(strstr(f->advice, "give AdamW an eps that fp16 holds"));
    ck_assert_close(evidence(f, "optimizer_eps"), 1e-8, 0, 0);
    ck_assert_close(evidence(f, "weights_nonfinite_step"), 1, 0, 0);
    release();
    sql("UPDATE META SET value = '0.0001' WHERE key = 'optimizer.eps';");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16"));
    ck_assert_msg(begins(findings.v[0].advice, "Look at what wrote fc.weight"), "%s",
                  findings.v[0].advice);
    release();
    sql("UPDATE META SET value = '2.9802322387695312e-08' WHERE key = 'optimizer.eps';"
        "INSERT INTO META (key, value, pid) VALUES ('optimizer.fused', '1', 1);");
    nonfinite_errors(1);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "stored in fp16"));
    release();
    sql("DELETE FROM META WHERE key = 'optimizer.fused';"); // 2^-25: a tie, rounded to 0
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "stored in fp16"));
    release();
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = 0 WHERE kind = 'weight';");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "the statistics show head linear's output"));
    release();
}
END_TEST

// Without a GradScaler the optimizer steps on the NaN gradients of the step the data brought a
// NaN to: the steps after it are non-finite from the weights, with no producer of their own,
// counted with the data's finding; a loss that turns finite again ends that count.
START_TEST(nonfinite_steps_after_an_unskipped_step_are_counted) {
    layers();
    steps(8, 1);
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 5;" EVENTS_VALUES
        "(1, 5, 0, 'linear', 'fwd', 'nonfinite_input', 'error', 64, 0, 'input 0 f32 (16, 32) "
        "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 5, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 0, NULL, 0, 1, 5),"
        "(1, 6, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 4096, 0, 'x', 0, 2, 7),"
        "(1, 6, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, 0, NULL, 0, 2, 7);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail,
                                 "1 step affected; non-finite loss in 1, 0 skipped. Then 2 more "
                                 "steps with a non-finite loss and no producer of their own "
                                 "(steps 6-7): the optimizer stepped on the non-finite gradients "
                                 "of step 5"));
    ck_assert_double_eq(evidence(&findings.v[0], "nonfinite_losses_after"), 2);
    release();
    // parameters updated with no optimizer.step() seen (the PyTorch bridge's META updates)
    sql("INSERT INTO META (key, value, pid) VALUES ('updates', 'by hand', 1);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail,
                         "(steps 6-7): the parameters were updated with the non-finite gradients "
                         "of step 5 (no optimizer.step() was seen: an update written in the "
                         "program, or an optimizer not given to watch()), with no GradScaler"),
                  "%s", findings.v[0].detail);
    release();
    sql("DELETE FROM META WHERE key = 'updates';"
        "UPDATE AMP_STEPS SET loss = 3, loss_finite = 1 WHERE step = 7;");
    analyse("nonfinite-root-cause", INT64_MIN, INT64_MAX);
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "Then 1 more step with a non-finite loss "
                                                       "and no producer of its own (step 6)"));
    release();
}
END_TEST

// A program that records its steps and the scaler but no loss_nonfinite or step_skipped events
// (the record API allows it): the counts come from the step records, and steps a GradScaler
// skipped are not blamed on an optimizer that stepped.
START_TEST(nonfinite_counts_come_from_the_step_records) {
    layers();
    steps(6, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step >= 3;" EVENTS_VALUES
        "(1, 3, 0, 'linear', 'fwd', 'nonfinite_producer', 'error', 5, 65504, 'input 0 f16 (2, 2) "
        "min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 (0 nan, 5 +inf, 0 -inf); ', "
        "0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail, "1 step affected; non-finite loss in 1, 1 skipped."),
                  "%s", findings.v[0].detail);
    ck_assert_ptr_null(strstr(findings.v[0].detail, "Then"));
    ck_assert_double_eq(evidence(&findings.v[0], "skipped_steps"), 1);
    release();
}
END_TEST

// A program killed between its GradScaler update and its step record (or one that records only
// the scaler): the row of that step has no loss (loss_finite NULL), which is no non-finite loss.
START_TEST(a_step_without_its_step_record_has_no_nonfinite_loss) {
    healthy(6);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = NULL, start_ns = NULL, end_ns = NULL "
        "WHERE step = 5;"
        "UPDATE META SET value = '137' WHERE key = 'exit_status';");
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_summary s;
    report_summarize(&model, &s);
    ck_assert_int_eq(s.nonfinite_losses, 0);
    ck_assert_double_eq_tol(s.final_loss, 3.96, 1e-12); // step 4's
    ck_assert_int_eq(s.last_step, 5);
    release();
    // nor is it one of the steps after a NaN input that the optimizer stepped on
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step = 4;" EVENTS_VALUES
        "(1, 4, 0, 'linear', 'fwd', 'nonfinite_input', 'error', 1, 0, 'input 0 f32 (16, 32) "
        "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 4);");
    nonfinite_errors(1);
    ck_assert_msg(strstr(findings.v[0].detail, "1 step affected; non-finite loss in 1, 0 skipped."),
                  "%s", findings.v[0].detail);
    ck_assert_msg(!strstr(findings.v[0].detail, "Then"), "%s", findings.v[0].detail);
    release();
}
END_TEST

// A program that numbers its steps by the tokens seen (10^12 apart): the steps a finding covers
// are counted from the recorded ones, not from every number between its first and last.
START_TEST(nonfinite_counts_sparse_step_numbers) {
    layers();
    sql("WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 3) "
        "INSERT INTO AMP_STEPS SELECT 1, i * 1000000000000, i * 1000, i * 1000 + 900, "
        "CASE WHEN i >= 2 THEN NULL ELSE 4.0 END, i < 2, NULL, 65536, "
        "CASE WHEN i >= 2 THEN 32768 ELSE 65536 END, i >= 2, i >= 2, NULL FROM s;" EVENTS_VALUES
        "(1, 2000000000000, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, "
        "'input 0 f16 (2, 2) min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 "
        "(0 nan, 5 +inf, 0 -inf); ', 0, 1, 2000000000000),"
        "(1, 3000000000000, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, 'x', 1, 1, "
        "3000000000000);");
    nonfinite_errors(1);
    ck_assert_msg(
        strstr(findings.v[0].detail, "2 steps affected; non-finite loss in 2, 2 skipped."), "%s",
        findings.v[0].detail);
    release();
}
END_TEST

// Gradient accumulation: two forwards a step, each overflowing in the same op from step 3 on (10
// single rows for steps 3-7, then an aggregate row of 8-9): 7 steps are affected, not 14.
START_TEST(nonfinite_steps_affected_count_each_step_once) {
    layers();
    steps(10, 65536);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step >= 3;"
        "WITH RECURSIVE s(i) AS (SELECT 6 UNION ALL SELECT i + 1 FROM s WHERE i < 15) "
        "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "
        "detail, aggregate, occurrences, last_step) "
        "SELECT 1, i / 2, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 5, 65504, "
        "'input 0 f16 (2, 2) min -1 max 1 amax 1; output f16 (2, 2) min 1 max 1 amax 1 "
        "(0 nan, 5 +inf, 0 -inf); ', 0, 1, i / 2 FROM s;" EVENTS_VALUES
        "(1, 8, 0, 'mul', 'fwd', 'nonfinite_producer', 'error', 20, 65504, NULL, 1, 4, 9);");
    nonfinite_errors(1);
    ck_assert_msg(
        strstr(findings.v[0].detail, "7 steps affected; non-finite loss in 7, 7 skipped."), "%s",
        findings.v[0].detail);
    ck_assert_double_eq(evidence(&findings.v[0], "steps_affected"), 7);
    release();
}
END_TEST

// One producer event (an AMP_EVENTS row's values) over a healthy run: the one error, its title
// and a part of its advice.
static void explained(const char *event, const char *title, const char *advice) {
    healthy(8);
    char buf[1024];
    snprintf(buf, sizeof buf, EVENTS_VALUES "%s;", event);
    sql(buf);
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, title);
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, advice));
    release();
}

// A weight grown beyond fp16's range: autocast's cast makes it inf, the GEMM's output NaN.
START_TEST(nonfinite_input_beyond_f16_range_is_explained) {
    explained("(1, 3, 2, 'linear', 'fwd', 'nonfinite_producer', 'error', 32768, 0, 'input 0 f16 "
              "(256, 128) min -2.04 max 2.09 amax 2.09; input 1 f32 (128, 128) min -88575.2 max "
              "88623.5 amax 88623.5; output f16 (256, 128) min nan max nan amax nan (32768 nan, "
              "0 +inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head linear at step 3: an input beyond fp16's range (amax "
              "88623.5) turned inf in autocast's cast, the output NaN",
              "weight decay");
}
END_TEST

// A residual stream added to in place (h += b(m)) past fp16's range.
START_TEST(nonfinite_sum_overflow_is_explained) {
    explained("(1, 3, 2, 'add', 'fwd', 'nonfinite_producer', 'error', 1024, 0, 'input 0 f16 "
              "(16, 64) min 40000 max 40000 amax 40000; input 1 f16 (16, 64) min 40000 max 40000 "
              "amax 40000; output f16 (16, 64) min nan max nan amax nan (0 nan, 1024 +inf, 0 "
              "-inf); ', 0, 1, 3)",
              "fp16 overflow in head add at step 3: finite inputs (amax 40000) summed past 65504",
              "pre-LN");
}
END_TEST

// A hand-written loss over logits masked by item assignment, a label on a masked class (or
// label smoothing, which takes in the masked class whatever the labels): the advice for each.
START_TEST(nonfinite_loss_of_a_masked_logit_is_explained) {
    const char *advice[] = {"ignore_index", "label_smoothing > 0"};
    for (int i = 0; i < 2; i++) {
        wipe();
        explained("(1, 3, 2, 'cross_entropy', 'fwd', 'nonfinite_producer', 'error', 1, 0, "
                  "'input 0 f32 (16, 10) min -0.157 max 0.163 amax 0.163 (0 nan, 0 +inf, 16 "
                  "-inf); output f32 () min nan max nan amax nan (0 nan, 1 +inf, 0 -inf); ', 0, "
                  "1, 3)",
                  "cross_entropy of a masked (-inf) logit in head at step 3 gives +inf: a target "
                  "falls on a class masked out, or label smoothing takes in every class",
                  advice[i]);
    }
}
END_TEST

// A batch of padding alone: cross_entropy's mean over no target is 0 / 0.
START_TEST(nonfinite_loss_with_every_target_ignored_is_explained) {
    explained("(1, 3, NULL, 'nll_loss', 'fwd', 'nonfinite_producer', 'error', 1, 0, 'input 0 f32 "
              "(32, 10) min -5.32564 max -0.896413 amax 5.32564; output f32 () no finite value "
              "(1 nan, 0 +inf, 0 -inf); ', 0, 1, 3)",
              "nll_loss with no target to average over gives NaN (0 / 0) in the top level at step "
              "3: every target of the batch is ignore_index (-100), or the batch is empty",
              "(y != -100).any()");
}
END_TEST

// Per-batch standardisation over a batch of one sample: the unbiased std is 0 / 0.
START_TEST(nonfinite_std_of_a_single_value_is_explained) {
    explained("(1, 3, 2, 'std', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f32 (1, 64) "
              "min -1.25098 max 1.85254 amax 1.85254; output f32 (64,) no finite value (64 nan, "
              "0 +inf, 0 -inf); ', 0, 1, 3)",
              "std of a single value gives NaN in head at step 3: the unbiased estimate divides "
              "by n - 1 = 0",
              "correction=0");
    // an inf out of it is no such thing (values grown past f32's range)
    wipe();
    explained("(1, 3, 2, 'var', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f32 (16, 64) "
              "min -2e+20 max 3e+20 amax 3e+20; output f32 (64,) min 1 max 3e+38 amax 3e+38 (0 "
              "nan, 3 +inf, 0 -inf); ', 0, 1, 3)",
              "head var produced non-finite values from finite inputs at step 3", "f32's range");
}
END_TEST

// A hand-written softmax under autocast: exp runs in fp32, and a logit above 88.7 is inf there.
START_TEST(nonfinite_exp_past_f32_range_is_explained) {
    explained("(1, 3, 2, 'exp', 'fwd', 'nonfinite_producer', 'error', 12, 0, 'input 0 f32 (16, 10) "
              "min -3.5 max 120.25 amax 120.25; output f32 (16, 10) min 0.03 max 3e+38 amax 3e+38 "
              "(0 nan, 12 +inf, 0 -inf); ', 0, 1, 3)",
              "f32 overflow in head exp at step 3: finite inputs (amax 120.25) gave +inf, past "
              "f32's 3.4e38",
              "subtract the row max before the exp");
    // in fp16 it is an fp16 overflow, with fp32 among the fixes
    wipe();
    explained("(1, 3, 2, 'exp', 'fwd', 'nonfinite_producer', 'error', 12, 0, 'input 0 f16 (16, 10) "
              "min -3.5 max 12.25 amax 12.25; output f16 (16, 10) min 0.03 max 65000 amax 65000 "
              "(0 nan, 12 +inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head exp at step 3: finite inputs (amax 12.25) gave +inf",
              "compute it in fp32");
}
END_TEST

// Counts near INT64_MAX (a database may hold anything) are held at 2^52, not overflowed in the
// loading or in the rules' sums (UBSan in the sanitizer build stops at a signed overflow).
START_TEST(huge_counts_do_not_overflow) {
    healthy(4);
    sql("UPDATE AMP_TENSOR_STATS SET numel = 9223372036854775000, n_nan = 9223372036854775000, "
        "n_posinf = 9223372036854775000, n_overflow = 9223372036854775000, "
        "n_underflow = 9223372036854775000, n_zero = 9223372036854775000;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    for (size_t i = 0; i < model.n_stats; i++) {
        ck_assert(model.stats[i].numel == (int64_t)1 << 52);
        ck_assert(model.stats[i].n_nonfinite == (int64_t)1 << 52);
    }
    release();
}
END_TEST

// A producer of its own that records steps with a NaN loss and no event at all: an error all the
// same, from the steps (the verdict read "Healthy ... stayed finite" over 12 NaN losses).
START_TEST(nonfinite_loss_of_the_steps_alone_is_an_error) {
    healthy(6);
    sql("UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count("nonfinite-root-cause", AMP_SEVERITY_ERROR), 1);
    ck_assert_str_eq(findings.v[0].title,
                     "the loss became NaN at step 2 with no op traced as the producer");
    ck_assert_close(evidence(&findings.v[0], "steps_affected"), 4, 0, 0);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training broke"), "verdict: %s", verdict);
    release();
    // its statistics show outputs turning NaN from step 2 on, without events: the first one
    // recorded at the first such step is named (the report advised recording statistics)
    sql("UPDATE AMP_TENSOR_STATS SET n_nan = numel, amax = NULL WHERE kind = 'activation' AND "
        "step >= 2 AND layer_id >= 2; UPDATE AMP_TENSOR_STATS SET n_nan = 1 WHERE kind = "
        "'activation' AND step = 4 AND layer_id = 0;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].title,
                     "the loss became NaN at step 2 with no op traced as the producer; the "
                     "statistics show head linear's output non-finite first (step 2)");
    ck_assert_str_eq(findings.v[0].layer, "head");
    ck_assert_str_eq(findings.v[0].op, "linear");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "Look at head linear at step 2"));
    release();
}
END_TEST

// A producer of its own that records steps alone (amp-record.h's example) is healthy as far as
// its records go, and the verdict says what went unchecked (it claimed the forward stayed within
// the autocast dtype's range and no gradient underflowed, with no statistics to show it).
START_TEST(healthy_without_statistics_says_what_was_not_checked) {
    steps(10, 65536);
    analyse(NULL, INT64_MIN, INT64_MAX);
    char verdict[1024];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "Healthy as far as the records go: no error or warning in ") &&
                      strstr(verdict, ", the loss finite. No tensor statistics were recorded, so "
                                      "neither the forward's headroom to the autocast dtype's "
                                      "range nor gradient underflow was checked: record tensor "
                                      "statistics"),
                  "%s", verdict);
    ck_assert_ptr_null(strstr(verdict, "stayed finite"));
    release();
    sql("INSERT INTO AMP_TENSOR_STATS (pid, step, layer_id, op, kind, dtype, target_dtype, numel, "
        "amax) VALUES (1, 3, 0, NULL, 'weight', 'f32', 'f16', 64, 0.5);"); // (weights alone)
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(strstr(verdict, "No activation or gradient statistics were recorded, so neither"),
                  "%s", verdict);
    release();
    healthy_stats(10); // with the statistics, the whole claim
    analyse(NULL, INT64_MIN, INT64_MAX);
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Healthy: "), "%s", verdict);
    release();
}
END_TEST

// A padding row masked whole: the attention's softmax over it is NaN.
START_TEST(nonfinite_softmax_of_a_row_masked_whole_is_explained) {
    explained("(1, 3, 2, 'softmax', 'fwd', 'nonfinite_producer', 'error', 32, 0, 'input 0 f16 "
              "(8, 4, 32, 32) min -6.2 max 6.1 amax 6.2 (0 nan, 0 +inf, 4000 -inf); output f16 "
              "(8, 4, 32, 32) min 0 max 1 amax 1 (32 nan, 0 +inf, 0 -inf); ', 0, 1, 3)",
              "softmax over a row with every position masked gives NaN in head at step 3",
              "all padding");
}
END_TEST

// x ** 2 of values near 300 in fp16: an overflow, not a pow of zero.
START_TEST(nonfinite_pow_overflow_is_not_a_pow_of_zero) {
    explained("(1, 3, 2, 'pow', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f16 (64) "
              "min 200 max 300 amax 300; output f16 (64) min 40000 max 65504 amax 65504 (0 nan, 12 "
              "+inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in head pow at step 3: finite inputs (amax 300) gave +inf",
              "square a normalised value");
}
END_TEST

// A linear whose output overflowed to -inf alone, which a ReLU then zeroed: the title names the
// -inf, and the detail says that the loss stayed finite (it read "non-finite loss in 0").
START_TEST(nonfinite_overflow_to_minus_inf_under_a_finite_loss) {
    healthy(8);
    sql(EVENTS_VALUES "(1, 3, 2, 'linear', 'fwd', 'nonfinite_producer', 'error', 32, 0, 'input 0 "
                      "f16 (32, 64) min -3.6 max 100 amax 100; input 1 f16 (10, 64) min -3000 max "
                      "0.23 amax 3000; output f16 (32, 10) min -17.5 max 15.1 amax 17.5 (0 nan, 0 "
                      "+inf, 32 -inf); ', 0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title,
                     "fp16 overflow in head linear at step 3: finite inputs (amax 3000) gave -inf");
    ck_assert_msg(
        strstr(findings.v[0].detail, "1 step affected; the loss stayed finite, 0 skipped."), "%s",
        findings.v[0].detail);
    release();
}
END_TEST

// A layer id that AMP_LAYERS does not declare (a producer of its own that skipped
// amp_record_layer, a forked child using its parent's ids) is named as such, not as the top level.
START_TEST(nonfinite_in_an_undeclared_layer_says_so) {
    explained("(1, 3, 42, 'pow', 'fwd', 'nonfinite_producer', 'error', 64, 0, 'input 0 f16 (64) "
              "min 200 max 300 amax 300; output f16 (64) min 40000 max 65504 amax 65504 (0 nan, 12 "
              "+inf, 0 -inf); ', 0, 1, 3)",
              "fp16 overflow in layer 42 (not declared) pow at step 3: finite inputs (amax 300) "
              "gave +inf",
              "square a normalised value");
}
END_TEST

// A division by values near zero but none zero: an overflow.
START_TEST(nonfinite_div_by_small_values_is_an_overflow) {
    explained("(1, 3, 2, 'div', 'fwd', 'nonfinite_producer', 'error', 5, 0, 'input 0 f16 (64) min "
              "-3 max 3 amax 3; input 1 f16 (64) min 1e-05 max 0.001 amax 0.001; output f16 (64) "
              "min -65504 max 65504 amax 65504 (0 nan, 3 +inf, 2 -inf); ', 0, 1, 3)",
              "fp16 overflow in head div at step 3: finite inputs (amax 3) gave +-inf",
              "clamp_min(eps)");
}
END_TEST

// A division by a range that takes in 0: of zero.
START_TEST(nonfinite_div_by_a_range_with_zero_is_of_zero) {
    explained("(1, 3, 2, 'div', 'fwd', 'nonfinite_producer', 'error', 5, 0, 'input 0 f16 (64) min "
              "-3 max 3 amax 3; input 1 f16 (64) min 0 max 0.001 amax 0.001; output f16 (64) min "
              "-65504 max 65504 amax 65504 (0 nan, 3 +inf, 2 -inf); ', 0, 1, 3)",
              "div of zero in head at step 3 gives +-inf", "eps to the denominator");
}
END_TEST

// The PyTorch bridge's op tracer sees autocast's cast as an op: an f32 input batch beyond fp16's
// range turned inf there.
START_TEST(nonfinite_cast_beyond_f16_range_is_explained) {
    explained("(1, 3, 2, 'to_copy', 'fwd', 'nonfinite_producer', 'error', 1400, 0, 'input 0 f32 "
              "(16, 128) min -431244 max 412873 amax 431244; output f16 (16, 128) min -65504 max "
              "64480 amax 65504 (0 nan, 700 +inf, 700 -inf); ', 0, 1, 3)",
              "fp16 overflow in head at step 3: autocast's cast to fp16 of a value beyond its "
              "range (amax 431244) gave +-inf",
              "Bring that input back under");
}
END_TEST

// A NaN batch whose first op is autocast's cast of it (libampcore's "to" in the layer): said so.
START_TEST(nonfinite_input_first_seen_by_a_cast_is_explained) {
    explained("(1, 5, 1, 'to', 'fwd', 'nonfinite_input', 'error', 1, 0, 'input 0 f32 (64, 32) "
              "min 0 max 1 amax 1 (1 nan, 0 +inf, 0 -inf); output bf16 (64, 32) min 0 max 1 "
              "amax 1 (1 nan, 0 +inf, 0 -inf); ', 0, 1, 5)",
              "NaN/inf in the input data at step 5, first seen by blocks.0.mlp (autocast's cast "
              "of its input)",
              "Sanitize the data");
}
END_TEST

// A sqrt of a variance that rounding drove below zero: not "of zero", and the input's min said.
START_TEST(nonfinite_sqrt_of_a_negative_value_is_explained) {
    explained("(1, 4, 1, 'sqrt', 'fwd', 'nonfinite_producer', 'error', 3, 0, 'input 0 f16 (64) min "
              "-0.000122 max 2.5 amax 2.5; output f16 (64) min 0 max 1.58 amax 1.58 (3 nan, 0 "
              "+inf, 0 -inf); ', 0, 1, 4)",
              "sqrt of a negative value in blocks.0.mlp at step 4 gives NaN (its input's min "
              "-0.000122)",
              "E[x^2] - E[x]^2");
}
END_TEST

// The PyTorch bridge on a model sharded over several processes (or whose re-run did not break
// again): the forward searched per module, the module named, and the code around it unless its
// inputs were other modules' finite outputs.
START_TEST(nonfinite_module_names_the_module_and_the_one_around_it) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 3, 0, 'attention', 'fwd', 'nonfinite_module', 'error', 512, 65504, 'output f16 (512,)"
        " min -65504 max 65504 amax 65504 (0 nan, 300 +inf, 212 -inf); not traced op by op: a "
        "model sharded over several processes cannot run its forward again on one', 0, 1, 3),"
        "(1, 3, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 3),"
        "(1, 5, 2, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 5),"
        "(1, 6, 3, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 6),"
        "(1, 7, 4, 'linear', 'fwd', 'nonfinite_module', 'error', 9, NULL, 'output f32 (8, 10) min "
        "nan max nan amax nan (9 nan, 0 +inf, 0 -inf); ', 0, 1, 7);"
        "INSERT INTO AMP_LAYERS VALUES (1, 3, NULL, 'layers.0'), (1, 4, NULL, 'net.1.0.fc');");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[0].rule, "nonfinite-root-cause");
    ck_assert_str_eq(findings.v[0].layer, "blocks.0.attn");
    ck_assert_int_eq(findings.v[0].first_step, 3);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "fp16 +-inf first in the output of "
                                                      "blocks.0.attn attention at step 3"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "in blocks.0's code just before it"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "fp16 overflow"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "not traced op by op: a model sharded"));
    ck_assert_double_eq(evidence(&findings.v[0], "output_amax"), 65504);
    ck_assert(isnan(evidence(&findings.v[0], "input_amax")));
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "NaN first in the output of head linear"));
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "in the top level code"));
    ck_assert_ptr_null(strstr(findings.v[1].advice, "fp16 overflow"));
    // a numbered layer's parent is a container (ModuleList, Sequential): the code around is above
    ck_assert_ptr_nonnull(strstr(findings.v[2].title, "layers.0 linear at step 6 (traced per "
                                                      "module: made there or in the top level"));
    ck_assert_ptr_nonnull(strstr(findings.v[3].title, "or in net.1.0's code"));
    // no loss-scale finding for a step whose forward broke: nonfinite-root-cause explains it
    ck_assert_uint_eq(count("loss-scale", AMP_SEVERITY_WARNING), 0);
    release();
    // its inputs were all outputs of modules that returned finite values: made in it
    sql("UPDATE AMP_EVENTS SET detail = detail || 'made in it: its inputs were finite (the output "
        "of net.0); not traced op by op: its forward, run again on the step''s inputs, did not "
        "break' WHERE step = 6;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_str_eq(findings.v[2].title, "NaN first in the output of layers.0 linear at step 6 "
                                          "(traced per module: made in it, its inputs (other "
                                          "modules' outputs) finite)");
    ck_assert_ptr_nonnull(strstr(findings.v[2].detail, "(the output of net.0)"));
    release();
}
END_TEST

// The GradScaler's overflows folded into an aggregate row from step 2 to 8; the focus (--steps
// 5:9) leaves its first step out: its scale is that of an overflow in the focus, not "no
// GradScaler" (exploding gradients at loss scale 1).
START_TEST(nonfinite_grad_overflow_begun_before_the_focus_is_not_an_error) {
    healthy(10);
    sql(EVENTS_VALUES
        "(1, 2, 2, 'linear', 'bwd', 'nonfinite_producer', 'warning', 99, 65056, 'incoming "
        "gradient f16 (16, 64) min -4080 max 416 amax 4080; gradient f16 (64, 32) min -64320 max "
        "65056 amax 65056 (0 nan, 20 +inf, 13 -inf); ', 1, 4, 8);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 "
        "WHERE step IN (2, 4, 6, 8);");
    analyse("nonfinite-root-cause", 5, 9);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_close(evidence(f, "loss_scale"), 65536, 0, 0);
    release();
}
END_TEST

START_TEST(nonfinite_benign_grad_overflow_is_not_an_error) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 2, 2, 'linear', 'bwd', 'nonfinite_producer', 'warning', 33, 65056, 'incoming "
        "gradient f16 (16, 64) min -4080 max 416 amax 4080; gradient f16 (64, 32) min -64320 max "
        "65056 amax 65056 (0 nan, 20 +inf, 13 -inf); ', 0, 1, 2),"
        "(1, 2, NULL, NULL, 'bwd', 'grad_overflow', 'info', NULL, 65536, 'scale overflow', 0, 1, "
        "2),"
        "(1, 2, NULL, NULL, 'optim', 'step_skipped', 'warning', 1, 65536, NULL, 0, 1, 2);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 WHERE step = 2;"
        "UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768 WHERE step > 2;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_WARNING), 0);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_INFO);
    ck_assert_str_eq(f->layer, "head");
    ck_assert_close(evidence(f, "loss_scale"), 65536, 0, 0);
    release();

    // the same overflow at scale 4 is gradients exploding, not the scaler probing
    sql("UPDATE AMP_STEPS SET scale_before = 4 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "exploding gradients"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "at loss scale 4"));
    release();
    // and with no GradScaler at all, no loss scale is made up (it read "at loss scale 1 ... The
    // loss scale is already low")
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, skipped = NULL, found_inf "
        "= NULL;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "exploding gradients: the backward of head linear went "
                                          "non-finite at step 2, with no loss scaling");
    ck_assert_ptr_null(strstr(findings.v[0].advice, "loss scale"));
    release();
    sql("UPDATE AMP_STEPS SET scale_before = 4, scale_after = 32768, skipped = 1, found_inf = 1 "
        "WHERE step = 2; UPDATE AMP_STEPS SET scale_before = 32768, scale_after = 32768, skipped "
        "= 0, found_inf = 0 WHERE step > 2; UPDATE AMP_STEPS SET scale_before = 65536, "
        "scale_after = 65536, skipped = 0, found_inf = 0 WHERE step < 2;");

    // NaN and no inf: no overflow but a derivative of 0 * inf or 0 / 0, at any scale
    sql("UPDATE AMP_EVENTS SET detail = 'in SqrtBackward0 (div); input 0 f32 (64) min 0 max 2 "
        "amax 2; gradient f32 (64) min -1 max 1 amax 1 (3 nan, 0 +inf, 0 -inf); ' "
        "WHERE kind = 'nonfinite_producer';"
        "UPDATE AMP_STEPS SET scale_before = 65536 WHERE step = 2;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradient in the backward of head linear at step 2 "
                                          "(forward finite): div of 0 / 0 or 0 * inf");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.sqrt(x + eps)"));
    ck_assert_close(evidence(&findings.v[0], "gradient_nan"), 3, 0, 0);
    ck_assert_close(evidence(&findings.v[0], "gradient_posinf"), 0, 0, 0);
    release();

    // a GEMM's NaN can be an overflow inside it (+inf + -inf): at this scale, the scaler's
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, '(div)', '(mm)') "
        "WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradient overflow in the backward"));
    release();
}
END_TEST

// sqrt's backward at 0 (a norm written as sqrt of a sum of squares, a padding sample of zeros): an
// inf gradient from finite values at every scale, a division by 0, not the loss scale's overflow;
// the collapse it drives says to fix that backward, not to clip exploding gradients.
START_TEST(nonfinite_inf_gradient_at_a_pole_is_an_error) {
    healthy(8);
    sql(EVENTS_VALUES
        "(1, 3, 2, 'sqrt', 'bwd', 'nonfinite_producer', 'warning', 1, 19.6, 'in SqrtBackward0 "
        "(div); input 0 f32 (16,) min 40.96 max 40.96 amax 40.96; input 1 f32 (16,) min 0 max "
        "3.36593 amax 3.36593; gradient f32 (16,) min 12.169 max 19.613 amax 19.613 (0 nan, 1 "
        "+inf, 0 -inf); ', 1, 5, 7);"
        "UPDATE AMP_STEPS SET scale_before = 65536.0 / (1 << (step - 3)), "
        "scale_after = 32768.0 / (1 << (step - 3)), skipped = 1, found_inf = 1 WHERE step >= 3;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 1);
    ck_assert_str_eq(findings.v[0].rule, "nonfinite-root-cause");
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head sqrt at step 3 "
                                          "(forward finite): a division by 0");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.linalg.vector_norm"));
    ck_assert_int_eq(findings.v[0].last_step, 7);
    const report_finding *f = first_of("loss-scale");
    ck_assert_msg(strstr(f->title, "collapse"), "%s", f->title);
    ck_assert_msg(begins(f->advice, "Make the backward finite first"), "%s", f->advice);
    release();

    // a divisor without a 0 (its range away from 0, or across it with no value at 0 said): the
    // gradients outgrew the scale, the scaler's business; the collapse is theirs to explain
    const char *divisors[] = {"min 0.5 max 3.36593", "min -1 max 3.36593"};
    for (int i = 0; i < 2; i++) {
        char q[512];
        snprintf(q, sizeof q,
                 "UPDATE AMP_EVENTS SET detail = replace(detail, 'min 0 max 3.36593', '%s');",
                 divisors[i]);
        sql(q);
        analyse(NULL, INT64_MIN, INT64_MAX);
        ck_assert_uint_eq(count(NULL, AMP_SEVERITY_ERROR), 0);
        ck_assert_msg(strstr(first_of("nonfinite-root-cause")->title, "gradient overflow in the "
                                                                      "backward"),
                      "%s", first_of("nonfinite-root-cause")->title);
        ck_assert_ptr_nonnull(strstr(first_of("loss-scale")->advice, "they explode"));
        release();
        snprintf(q, sizeof q,
                 "UPDATE AMP_EVENTS SET detail = replace(detail, '%s', 'min 0 max 3.36593');",
                 divisors[i]);
        sql(q);
    }

    // acos's backward at 1 (the angle between two equal vectors): the rsqrt of 1 - x^2 = 0
    sql("UPDATE AMP_EVENTS SET op = 'acos', detail = 'in AcosBackward0 (rsqrt); input 0 f32 (16,) "
        "min 0 max 2.38419e-07 amax 2.38419e-07; gradient f32 (16,) min 2048 max 2896.31 amax "
        "2896.31 (0 nan, 14 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head acos at step 3 "
                                          "(forward finite): rsqrt of 0");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "x.clamp(-1 + eps, 1 - eps) before acos"));
    release();
    sql("UPDATE AMP_EVENTS SET detail = replace(detail, 'min 0 max', 'min 1e-30 max') "
        "WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    release();

    // libampcore's pow(x, 0.5) at x = 0: its node's incoming gradient, then its forward input
    sql("UPDATE AMP_EVENTS SET op = 'pow', detail = 'incoming gradient f32 (64) min 1 max 2 amax "
        "2; forward input 0 f32 (64) min 0 max 3 amax 3; gradient f32 (64) min 0.2 max 0.5 amax "
        "0.5 (0 nan, 2 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "inf gradient in the backward of head pow at step 3 "
                                          "(forward finite): 0 raised to a power below 1");
    release();
    // its incoming gradient at 0 is no pole: the base is not 0
    sql("UPDATE AMP_EVENTS SET detail = 'incoming gradient f32 (64) min 0 max 2 amax 2; forward "
        "input 0 f32 (64) min 0.1 max 3 amax 3; gradient f32 (64) min 0.2 max 0.5 amax 0.5 (0 "
        "nan, 2 +inf, 0 -inf); ' WHERE kind = 'nonfinite_producer';");
    nonfinite_errors(0);
    release();
}
END_TEST

// A producer recorded without a phase (an outside framework through libamprecord: AMP_PHASE_NONE)
// is judged by its step: a non-finite loss there (the step record's, or a loss_nonfinite event's)
// makes it the forward's break, an error, never a healthy run with a benign backward overflow.
START_TEST(nonfinite_producer_without_a_phase_is_judged_by_its_step) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 3, 0, 'mul', NULL, 'nonfinite_producer', 'error', 7890, 65440, "
        " 'input 0 f16 (16, 2, 16, 16) min -6.26953 max 6.26172 amax 6.26953; output f16 (16, 2, "
        "16, 16) min -65120 max 65440 amax 65440 (0 nan, 3913 +inf, 3977 -inf); ', 0, 1, 3);"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0, skipped = 1, found_inf = 1 "
        "WHERE step = 3;");
    analyse(NULL, INT64_MIN, INT64_MAX);
    const report_finding *f = first_of("nonfinite-root-cause");
    ck_assert_int_eq(f->severity, AMP_SEVERITY_ERROR);
    ck_assert_msg(strstr(f->title, "fp16 overflow in blocks.0.attn mul at step 3"), "%s", f->title);
    ck_assert_msg(strstr(f->detail, "Recorded without a phase"), "%s", f->detail);
    char verdict[2048];
    report_verdict(&model, &findings, verdict, sizeof verdict);
    ck_assert_msg(begins(verdict, "Training went on past an error: fp16 overflow"), "%s", verdict);
    release();
    // no step record of its loss, a loss_nonfinite event: the same
    sql("UPDATE AMP_STEPS SET loss_finite = NULL WHERE step = 3;" EVENTS_VALUES
        "(1, 3, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 3);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "fp16 overflow"));
    release();
    // a finite loss at its step: the GradScaler's overflow of a backward, a note
    sql("DELETE FROM AMP_EVENTS WHERE kind = 'loss_nonfinite';"
        "UPDATE AMP_STEPS SET loss = 3.97, loss_finite = 1 WHERE step = 3;");
    nonfinite_errors(0);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "gradient overflow in the backward"));
    release();
}
END_TEST

// torch.where(p > 0, p * p.log(), 0): a finite forward, a NaN gradient at any scale.
START_TEST(nonfinite_gradient_through_a_left_out_value_is_an_error) {
    healthy(12);
    sql(EVENTS_VALUES
        "(1, 3, 2, 'mul', 'bwd', 'nonfinite_producer', 'warning', 48, 0.5, 'its forward made "
        "-inf (log) that where left out: the backward still goes through them; in MulBackward0 "
        "(mul); input 0 f32 (16, 8) min 0 max 0.01 amax 0.01; input 1 f32 (16, 8) min -inf max "
        "-0.1 amax 2.3 (0 nan, 0 +inf, 48 -inf); gradient f32 (16, 8) min -0.02 max 0.5 amax 0.5 "
        "(48 nan, 0 +inf, 0 -inf); ', 0, 1, 3),"
        "(1, 3, NULL, NULL, 'bwd', 'grad_overflow', 'info', NULL, 65536, 'scale overflow', 0, 1, "
        "3);"
        "UPDATE AMP_STEPS SET skipped = 1, found_inf = 1, scale_after = 32768 WHERE step = 3;");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradient through a value the forward left out: "
                                          "the backward of head mul at step 3");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "torch.where(p > 0, p, 1).log()"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].detail, "MulBackward0"));
    release();

    // without a GradScaler (bf16) the optimizer stepped on the NaN gradients: the next step's
    // NaN loss comes from the parameters, which that finding explains
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL, skipped = 0, "
        "found_inf = 0;"
        "DELETE FROM AMP_EVENTS WHERE kind = 'grad_overflow';"
        "UPDATE AMP_STEPS SET loss = NULL, loss_finite = 0 WHERE step >= 4;" EVENTS_VALUES
        "(1, 4, 0, 'linear', 'fwd', 'nonfinite_propagated', 'info', 64, NULL, 'x', 0, 1, 4),"
        "(1, 4, NULL, NULL, NULL, 'loss_nonfinite', 'error', 1, NULL, 'fwd', 0, 1, 4);");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "NaN gradient through a value"));
    release();
    // with one, the step was skipped: that NaN loss has no traced producer
    sql("UPDATE AMP_STEPS SET scale_before = 65536, scale_after = 65536;");
    nonfinite_errors(2);
    ck_assert_ptr_nonnull(strstr(findings.v[1].title, "with no op traced as the producer"));
    release();
    // seen a step late (no --check-grads): per module, and what would trace it
    sql("UPDATE AMP_STEPS SET scale_before = NULL, scale_after = NULL;"
        "UPDATE AMP_EVENTS SET detail = 'incoming gradient f16 (64) min -1 max 1 amax 1; "
        "gradient f32 (8, 64) min -2 max 2 amax 2 (40 nan, 0 +inf, 0 -inf); traced per module "
        "when the step was recorded, after the optimizer had stepped on these gradients; "
        "check_grads (ampprobe run --check-grads) traces it op by op at its step' "
        "WHERE kind = 'nonfinite_producer' AND phase = 'bwd';");
    nonfinite_errors(1);
    ck_assert_str_eq(findings.v[0].title, "NaN gradients at step 3, and no GradScaler to skip the "
                                          "step: the optimizer stepped on them (traced per "
                                          "module: made by the backward of head mul)");
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "ampprobe run --check-grads"));
    ck_assert_ptr_nonnull(strstr(findings.v[0].advice, "(2-9% more step time on an H200)"));
    release();
    // no one module takes that module's output as an input: the code that reads it is named
    sql("UPDATE AMP_EVENTS SET detail = 'gradient f32 (8, 64) min nan max nan amax nan (40 nan, "
        "0 +inf, 0 -inf); the gradient of head''s output, made by the code that reads it (not "
        "one module''s input); traced per module when the step was recorded, after the "
        "optimizer had stepped on these gradients; check_grads (ampprobe run --check-grads) "
        "traces it op by op at its step' WHERE kind = 'nonfinite_producer' AND phase = 'bwd';");
    nonfinite_errors(1);
    ck_assert_ptr_nonnull(strstr(findings.v[0].title, "(traced per module: made by the backward "
                                                      "of the code that reads head mul's "
                                                      "output)"));
    release();
}
END_TEST

// ---------------------------------------------------------------------------------------------

// The part's tests, in the `rules` test case.
void report_nonfinite_tests(TCase *tc) {
    tcase_add_test(tc, a_step_without_its_step_record_has_no_nonfinite_loss);
    tcase_add_test(tc, a_focus_after_the_first_error_says_where_it_was);
    tcase_add_test(tc, a_fault_every_rank_shows_is_one_finding);
    tcase_add_test(tc, a_finding_of_one_of_several_processes_names_it);
    tcase_add_test(tc, nonfinite_attention_overflow_is_the_first_finding);
    tcase_add_test(tc, nonfinite_module_names_the_module_and_the_one_around_it);
    tcase_add_test(tc, nonfinite_input_and_log_zero_are_explained);
    tcase_add_test(tc, nonfinite_steps_after_an_unskipped_step_are_counted);
    tcase_add_test(tc, nonfinite_after_a_divergence_blames_the_training);
    tcase_add_test(tc, divergence_with_finite_losses_is_found);
    tcase_add_test(tc, skips_after_a_divergence_point_at_it);
    tcase_add_test(tc, nonfinite_after_weights_grew_blames_the_training_first);
    tcase_add_test(tc, nonfinite_weights_as_a_step_began_are_named);
    tcase_add_test(tc, nonfinite_after_a_weight_blowup_blames_the_update);
    tcase_add_test(tc, a_focus_inside_a_nonfinite_run_points_before_it);
    tcase_add_test(tc, nonfinite_counts_come_from_the_step_records);
    tcase_add_test(tc, nonfinite_counts_sparse_step_numbers);
    tcase_add_test(tc, nonfinite_steps_affected_count_each_step_once);
    tcase_add_test(tc, a_focus_cuts_an_aggregate_row_to_its_steps);
    tcase_add_test(tc, a_focus_on_healthy_steps_inside_an_aggregate_row_is_healthy);
    tcase_add_test(tc, nonfinite_weights_poisoned_by_a_scale_without_reciprocal);
    tcase_add_test(tc, nonfinite_sqrt_of_a_negative_value_is_explained);
    tcase_add_test(tc, nonfinite_input_beyond_f16_range_is_explained);
    tcase_add_test(tc, nonfinite_cast_beyond_f16_range_is_explained);
    tcase_add_test(tc, nonfinite_sum_overflow_is_explained);
    tcase_add_test(tc, nonfinite_loss_of_a_masked_logit_is_explained);
    tcase_add_test(tc, nonfinite_loss_with_every_target_ignored_is_explained);
    tcase_add_test(tc, nonfinite_std_of_a_single_value_is_explained);
    tcase_add_test(tc, nonfinite_exp_past_f32_range_is_explained);
    tcase_add_test(tc, nonfinite_loss_of_the_steps_alone_is_an_error);
    tcase_add_test(tc, healthy_without_statistics_says_what_was_not_checked);
    tcase_add_test(tc, huge_counts_do_not_overflow);
    tcase_add_test(tc, nonfinite_softmax_of_a_row_masked_whole_is_explained);
    tcase_add_test(tc, nonfinite_pow_overflow_is_not_a_pow_of_zero);
    tcase_add_test(tc, nonfinite_overflow_to_minus_inf_under_a_finite_loss);
    tcase_add_test(tc, nonfinite_in_an_undeclared_layer_says_so);
    tcase_add_test(tc, nonfinite_div_by_small_values_is_an_overflow);
    tcase_add_test(tc, nonfinite_div_by_a_range_with_zero_is_of_zero);
    tcase_add_test(tc, nonfinite_input_first_seen_by_a_cast_is_explained);
    tcase_add_test(tc, nonfinite_benign_grad_overflow_is_not_an_error);
    tcase_add_test(tc, nonfinite_inf_gradient_at_a_pole_is_an_error);
    tcase_add_test(tc, nonfinite_grad_overflow_begun_before_the_focus_is_not_an_error);
    tcase_add_test(tc, nonfinite_gradient_through_a_left_out_value_is_an_error);
    tcase_add_test(tc, nonfinite_producer_without_a_phase_is_judged_by_its_step);
}
