/*
 * report.h — `ampprobe report`: the run database turned into findings a user can act on.
 *
 * Three layers, one way:
 *   the model   (report.c)        plain structs loaded from the database with read-only SELECTs,
 *                                 already narrowed to the focused steps (--steps A:B);
 *   the rules   (rule_*.c)        one file each; a rule reads the model and adds findings: rule
 *                                 id, severity, step range, layer/op/phase, evidence numbers,
 *                                 the cause in words and the advice;
 *   the formats (format_*.c)      text for people (verdict, findings, run summary), json for CI.
 *
 *     report_model m;
 *     if (report_model_load(db, path, lo, hi, &m, err) != AMP_OK) fail(err);
 *     report_findings f = {0};
 *     report_run(&m, NULL, &f);                 // every rule, sorted: severity, then first step
 *     report_format_text(stdout, &m, &f, isatty(1));
 *     report_findings_free(&f);
 *     report_model_free(&m);
 *
 * A rule must degrade gracefully: every table may be empty (a run without stats, a run that died
 * before its first step), and a healthy run must yield no error and no warning.
 */
#ifndef AMPPROBE_REPORT_H
#define AMPPROBE_REPORT_H

#include "amp-record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sqlite3 sqlite3;

#define REPORT_F16_MAX 65504.0         // largest finite fp16
#define REPORT_F16_MIN_NORMAL 6.103515625e-05 // 2^-14
#define REPORT_BF16_MAX 3.3895313892515355e38
#define REPORT_SCALE_TARGET (REPORT_F16_MAX / 2) // scaled gradient amax a good loss scale stays under
#define REPORT_ERR_MAX 512

// ---------------------------------------------------------------------------------------------
// The model

// One training step (AMP_STEPS, which also holds the GradScaler update of the step).
typedef struct report_step {
    int32_t pid;
    int64_t step;
    double loss;      // NaN: not recorded or NaN; +-inf as recorded
    bool loss_finite; // false also when not recorded
    bool has_scale;   // a GradScaler update was recorded
    double scale_before, scale_after;
    bool found_inf, skipped;
    double grad_amax; // largest finite gradient amax of the step (numel > 1, as scaled); NaN: none
} report_step;

// One AMP_EVENTS row; an aggregate row stands for occurrences events from step to last_step.
typedef struct report_event {
    int64_t id;
    int32_t pid;
    int64_t step, last_step;
    int32_t layer_id; // -1: none
    const char *op, *phase, *kind, *severity, *detail; // NULL: none (kind never)
    int64_t count;                                     // -1: unknown
    double value;                                      // NaN: none
    bool aggregate;
    int64_t occurrences;
} report_event;

// AMP_TENSOR_STATS of one (pid, layer, op, kind, dtype, target dtype) over the focused steps.
typedef struct report_stats {
    int32_t pid;
    int32_t layer_id;                          // -1: none
    const char *op, *kind, *dtype, *target;    // "" when not recorded
    int64_t tensors, numel;                    // rows, and their elements summed
    double amax;                               // largest amax; NaN: no finite value
    int64_t first_step, last_step;
    int64_t n_overflow, n_underflow, n_zero, n_nonfinite; // summed
    int64_t zero_tensors, zero_numel;          // tensors (numel > 1) that were all zero
    int64_t near_max_tensors;                  // tensors with amax >= half the target's max
    int64_t near_first_step, near_last_step;   // -1: none
} report_stats;

typedef struct report_layer {
    int32_t pid, id;
    const char *name;
} report_layer;

typedef struct report_model {
    const char *path;
    int64_t step_lo, step_hi; // the focus, inclusive
    report_step *steps;       // sorted by pid, step
    size_t n_steps;
    report_event *events; // in recording order (id)
    size_t n_events;
    report_stats *stats;
    size_t n_stats;
    report_layer *layers; // sorted by pid, id
    size_t n_layers;
    const char *device, *command; // META; NULL: not recorded
} report_model; // every string is owned by the model (report_model_free)

// Loads the model of the steps lo..hi (inclusive) from db (opened by amp_store_open_readonly).
// AMP_ERR_IO with one line naming path in err when a SELECT fails (a foreign schema).
amp_status report_model_load(sqlite3 *db, const char *path, int64_t lo, int64_t hi, report_model *m,
                             char err[REPORT_ERR_MAX]);
void report_model_free(report_model *m);
// The layer's qualified name; NULL for layer -1 or an unknown id.
const char *report_layer_name(const report_model *m, int32_t pid, int32_t layer_id);
// The step record of (pid, step); NULL when none.
const report_step *report_step_find(const report_model *m, int32_t pid, int64_t step);

// ---------------------------------------------------------------------------------------------
// Findings

#define REPORT_EVIDENCE_MAX 12

typedef struct report_finding {
    const char *rule;
    amp_severity severity;
    int64_t first_step, last_step; // -1: not tied to steps
    char layer[160], op[64], phase[16]; // "" when none
    char title[512];    // what happened, one line
    char detail[1024];  // the evidence in words (input ranges, the worst layers, ...)
    char advice[1024];  // what to change
    int n_evidence;
    struct {
        const char *key; // lower_snake_case, stable (json)
        double value;    // NaN/inf print as null in json
    } evidence[REPORT_EVIDENCE_MAX];
} report_finding;

typedef struct report_findings {
    report_finding *v;
    size_t n, cap;
} report_findings;

// A zeroed finding appended to out (steps -1), for the rule to fill in.
report_finding *report_finding_add(report_findings *out, const char *rule, amp_severity severity);
// Appends one evidence number (ignored past REPORT_EVIDENCE_MAX: a rule bug, asserted in debug).
void report_finding_evidence(report_finding *f, const char *key, double value);
// Sets layer/op/phase from a model's names (NULL: left empty).
void report_finding_where(report_finding *f, const char *layer, const char *op, const char *phase);
void report_findings_free(report_findings *f);

// ---------------------------------------------------------------------------------------------
// Rules: one file each

typedef struct report_rule {
    const char *id;
    const char *summary;
    void (*run)(const report_model *m, report_findings *out);
} report_rule;

void rule_nonfinite_run(const report_model *m, report_findings *out); // rule_nonfinite.c
void rule_scale_run(const report_model *m, report_findings *out);     // rule_scale.c
void rule_overflow_run(const report_model *m, report_findings *out);  // rule_overflow.c
void rule_underflow_run(const report_model *m, report_findings *out); // rule_underflow.c

extern const report_rule report_rules[];
extern const size_t report_n_rules;
const report_rule *report_rule_find(const char *id); // NULL: no such rule

// Runs one rule (only != NULL) or all of them, then sorts: errors first, then by first step.
void report_run(const report_model *m, const report_rule *only, report_findings *out);

// Shared by the rules: the loss scale that keeps a gradient of unscaled amax u below
// REPORT_SCALE_TARGET, a power of two in [1, 2^24]; NaN when u is not a positive number.
double report_scale_for_amax(double u);
// The largest unscaled gradient amax of the focused non-skipped steps (grad_amax / scale);
// NaN when no step has both.
double report_unscaled_grad_amax(const report_model *m);

// ---------------------------------------------------------------------------------------------
// The run in numbers, and the verdict

typedef struct report_summary {
    int64_t steps, first_step, last_step; // steps recorded; -1 when none
    int64_t skipped, nonfinite_losses;
    double final_loss;           // NaN: none
    double scale_min, scale_max; // over scale_after (and the first scale_before); NaN: no scaler
} report_summary;

void report_summarize(const report_model *m, report_summary *s);
// One paragraph: the answer first (the top finding in words, or that the run is healthy).
void report_verdict(const report_model *m, const report_findings *f, char *buf, size_t n);

// ---------------------------------------------------------------------------------------------
// Formats

void report_format_text(FILE *out, const report_model *m, const report_findings *f, bool color);
void report_format_json(FILE *out, const report_model *m, const report_findings *f);

#endif
