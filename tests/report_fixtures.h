/*
 * report_fixtures.h — what the files of the `report` suite share: a run database per test (an
 * empty one from the collector, filled by INSERTs with the real schema), the fixtures that fill
 * it, the report run over it and questions about its findings, and `ampprobe report` run as a
 * command (report_fixtures.c). Each file of the suite adds its tests to the suite's `rules` case
 * through the function declared at the end.
 */
#ifndef AMP_REPORT_FIXTURES_H
#define AMP_REPORT_FIXTURES_H

#include "tests.h"

#include "report.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---------------------------------------------------------------------------------------------
// Fixtures

extern char tmpdir[64], db_path[128], out_path[128], err_path[128];

// A run database per test in a fresh directory (tmpdir), and its removal.
void report_setup(void);
void report_teardown(void);

// Runs SQL on the test's database (the test fails when it does not run).
void sql(const char *text);

// Layers of pid 1: 0 blocks.0.attn, 1 blocks.0.mlp, 2 head.
void layers(void);

// n steps of pid 1 with finite losses and a constant scale.
void steps(int n, double scale);

// Healthy statistics for every step: f16 activations far from 65504, gradients with a few
// subnormals and structural zeros (a causal mask), an fp32 scaled loss beyond 65504.
void healthy_stats(int n);

// Healthy AMP ops for every step: f16 GEMMs under autocast, an fp32 softmax, one weight cast.
void healthy_ops(int n);

// A healthy run of n steps: layers(), steps(n, 65536), healthy_stats(n), healthy_ops(n).
void healthy(int n);

// Empties the tables the fixtures fill, for a second fixture in one test.
void wipe(void);

// ---------------------------------------------------------------------------------------------
// Running the report

// The report run over the test's database: analyse() loads steps lo..hi into model and runs
// one rule (NULL: all) into findings; release() frees both; count() counts the findings of a
// rule (NULL: any) at min_severity or above.
extern report_model model;
extern report_findings findings;
void analyse(const char *rule, int64_t lo, int64_t hi);
void release(void);
size_t count(const char *rule, amp_severity min_severity);

// Runs rule divergence over the fixture and checks that it found n findings.
void divergences(size_t n);

// Runs rule nonfinite-root-cause over the fixture and checks that it found `errors` errors.
void nonfinite_errors(size_t errors);

// The analysed model's kernel of that name (the test fails without one).
const report_kernel *kernel_named(const char *name);

// Kernel k's layer (the one most of its time ran in), how many layers launched it, and the time
// in its layer (ns < 0: not checked).
void kernel_layer_is(const report_kernel *k, int32_t layer, int n_layers, int64_t ns);

// The first finding of a rule, and a finding's evidence of that key (the test fails without).
const report_finding *first_of(const char *rule);
double evidence(const report_finding *f, const char *key);

// Whether s begins with prefix.
bool begins(const char *s, const char *prefix);

// Whether the first finding's title begins with prefix.
bool title_starts(const char *prefix);

// How many times s occurs in t.
size_t occurrences(const char *t, const char *s);

// Runs rule divergence over the fixture, checks that it found one divergence, at `step`, and
// releases the findings.
void diverges_at(int64_t step);

// Runs `ampprobe report ARGS...` with stderr captured into err_path; returns the exit status.
#define CMD(...) cmd((const char *[]){__VA_ARGS__, NULL})
int cmd(const char **args);

// ---------------------------------------------------------------------------------------------
// Runs and checks that several parts of the suite use

// Each {format, text}: the report in that format holds the text.
void formats_say(const char *formats[][2], size_t n);

// AMP_EVENTS rows in the order the fixtures give them.
#define EVENTS_VALUES                                                                              \
    "INSERT INTO AMP_EVENTS (pid, step, layer_id, op, phase, kind, severity, count, value, "       \
    "detail, aggregate, occurrences, last_step) VALUES "

// The attention-logit overflow of tiny_gpt --fault attn-overflow: the mul after q@k^T overflows
// fp16 from step 3 on; softmax and the loss propagate it.
void attn_overflow(void);

// Copies process from's rows of each table (NULL-terminated) as process to's.
void copy_rows(const char *const *tables, int from, int to);

// Two trainings in one run (a script that starts both): tiny_gpt pid 1 healthy, tiny_gpt pid 7
// broken as attn_overflow() breaks it, each named in AMP_PROCESSES.
void two_trainings(void);

// Steps 0-3 of pid 1 with these losses and gradient norms (NAN: NULL).
void loss_steps(const double *loss, const double *norm, int n);

// 30% of blocks.0.mlp's gradient values of the kinds given (an SQL list) underflow.
void mlp_underflows(const char *kinds);

// ---------------------------------------------------------------------------------------------
// GPU runs, with hand-made CUPTI rows

#define STEP_NS 10000000LL // 10 ms steps
#define GPID "16777216"    // globalPid of pid 1 (pid << 24)

// A GPU run of n steps: one f16 linear op of layer 2 (head) per step with the given analytic
// FLOPs and bytes, launching k kernels of kernel_ns each, gap_ns apart.
void gpu_run(int n, int k, long long kernel_ns, long long gap_ns, double flops, double bytes);

// ---------------------------------------------------------------------------------------------
// The suite's parts (test_report_*.c), each adding its tests to the `rules` test case

void report_nonfinite_tests(TCase *tc);
void report_numerics_tests(TCase *tc);
void report_perf_tests(TCase *tc);

#endif
