/*
 * report.h — `ampprobe report`: the run database turned into findings a user can act on.
 *
 * Three layers, one way:
 *   the model   (report_model.c)  plain structs loaded from the database with read-only SELECTs,
 *                                 already narrowed to the focused steps (--steps A:B);
 *   the rules   (rule_*.c)        one file each; a rule reads the model and adds findings: rule
 *                                 id, severity, step range, layer/op/phase, evidence numbers,
 *                                 the cause in words and the advice;
 *   the formats (format_*.c)      text for people (verdict, findings, run summary), md, html
 *                                 (one self-contained page with inline SVG plots), json for CI.
 * The kernel side of the model (report_perf.c) is loaded from the Nsight-named CUPTI tables when
 * CUDA capture filled them, and stays empty (n_kernels 0) otherwise.
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
#include "amp-store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sqlite3 sqlite3;

#define REPORT_F16_MAX 65504.0                // largest finite fp16
#define REPORT_F16_MIN_NORMAL 6.103515625e-05 // 2^-14
#define REPORT_BF16_MAX 3.3895313892515355e38
// the scaled gradient amax a good loss scale stays under
#define REPORT_SCALE_TARGET (REPORT_F16_MAX / 2)
#define REPORT_ERR_MAX 512

// ---------------------------------------------------------------------------------------------
// The model

// One training step (AMP_STEPS, which also holds the GradScaler update of the step).
typedef struct report_step {
    int32_t pid;
    int64_t step;
    double loss;         // NaN: not recorded or NaN; +-inf as recorded
    bool loss_finite;    // false also when not recorded
    bool has_loss;       // a step record came (its row holds more than the GradScaler's update)
    bool loss_nonfinite; // a step record came with a NaN/inf loss (has_loss, not loss_finite)
    bool fitted; // the loss is 0 or within a millionth of its process's first: the batch is fitted
    bool has_scale; // a GradScaler update was recorded
    double scale_before, scale_after;
    bool found_inf, skipped;
    // a skipped update before its process's first applied one, whatever the focus: the scale
    // coming down from init_scale to where the gradients fit (the initial calibration)
    bool calibration;
    double grad_amax; // largest finite gradient amax of the step (numel > 1, as scaled); NaN: none
    // the same of the gradients stored in their target dtype (f16 of an fp16 run: what a scale
    // can overflow; an f32 activation gradient, the loss's 1/batch among them, reaches f16 as
    // another row), and of the weight gradients whatever their dtype (an fp32 master weight's
    // comes out of an f16 GEMM)
    double grad_amax_16, grad_amax_weight;
    double grad_norm; // the gradients' global norm as recorded; NaN: none or not finite
    // the largest finite amax of the parameters as the step began, before its update (kind
    // 'weight', libampcore's); NaN: none recorded
    double weight_amax;
    // the growth of one parameter's amax into this step from its row before (at
    // weight_from_step), of the parameters whose amax now is at least a tenth of the model's
    // largest then (a bias or a layer scale that starts near 0 may grow tenfold in a healthy
    // step): of those that blew up (report_weights_blew_up) the largest now, else the one that
    // grew most; weight_to / weight_from; NaN: none. weight_param: that parameter's name
    double weight_growth, weight_from, weight_to;
    int64_t weight_from_step, weight_updates; // updates: those applied in between (not skipped)
    const char *weight_param;
    int64_t start_ns, end_ns; // -1: not recorded
    int64_t mem_peak;         // tensor bytes held at most, to the step's end; -1: none
    // AMP_OPS of the step (sampled steps only; 0 otherwise): host time of all recorded ops, of
    // the GEMM-class ones and of the dtype casts
    int64_t op_ns, gemm_ns, cast_ns;
    // CUDA capture: busy time (on each GPU of the process, the union of its kernels starting in
    // the step's window; summed over gpu_devices GPUs), copy time
    int64_t gpu_busy_ns, copy_ns;
    int32_t gpu_devices;
} report_step;

// The ranges an event's detail gives (libampcore's and the PyTorch bridge's producers): "input 0
// f16 (8, 64) min -6.2 max 6.1 amax 6.2; output f16 (...) min ... amax 65440 (0 nan, 3913 +inf,
// 3977 -inf); ". Parsed by report_parse_ranges (rule_nonfinite.c).
typedef struct report_ranges {
    double in_amax;  // largest amax over the inputs (forward inputs, incoming gradient); NaN: none
    double in0_min;  // input 0's min (the argument of a log, the base of a pow); NaN: none
    double out_amax; // NaN: none
    char out_dtype[8], in0_dtype[8];
    long long nan, posinf, neginf; // of the output
    bool in_nonfinite;             // an input held non-finite values
    int n_in;                      // inputs described
    bool in_zero[2];               // input 0's, input 1's range takes in 0 (min <= 0 <= max)
    bool in_has_zero[3];           // input 0, 1, 2 holds an exact 0 (its min or max is 0)
} report_ranges;
void report_parse_ranges(const char *detail, report_ranges *r);

// The phrases the rules look for in an event's detail, as the recorders write them (the PyTorch
// bridge, probe/python/ampprobe/; libampcore, libampcore/src/): a recorder that rewords one
// changes the diagnosis, so test_report.c's wording test finds each in a recorder's source.
#define REPORT_DETAIL_AMAX " amax "                // a range (report_parse_ranges)
#define REPORT_DETAIL_NO_FINITE " no finite value" // a range of only NaN/inf
#define REPORT_DETAIL_MADE_IN_LAYER "made in it: its inputs were finite"    // per-module search
#define REPORT_DETAIL_READER ", made by the code that reads it"             // per-module search
#define REPORT_DETAIL_LEFT_OUT " left out: the backward still goes through" // masked -inf
#define REPORT_DETAIL_LATE "(ampprobe run --check-grads)" // no scaler: seen a step late
#define REPORT_DETAIL_ABSORBED_BY "left out by "          // overflow_absorbed: the op that hid it
#define REPORT_DETAIL_UNSCALED "after scaler.unscale_()"  // step_outside_scaler, unscaled

// One AMP_EVENTS row; an aggregate row stands for occurrences events from step to last_step.
typedef struct report_event {
    int64_t id;
    int32_t pid;
    int64_t step, last_step;
    int32_t layer_id;                                  // -1: none
    const char *op, *phase, *kind, *severity, *detail; // NULL: none (kind never)
    int64_t count;                                     // -1: unknown
    double value;                                      // NaN: none
    bool aggregate;
    int64_t occurrences;
    // the step detail and value are of: step, unless the focus (--steps) cut an aggregate row
    // that began before it (its detail is of the first step folded into it)
    int64_t detail_step;
} report_event;

// AMP_TENSOR_STATS of one (pid, layer, op, kind, dtype, target dtype) over the focused steps.
typedef struct report_stats {
    int32_t pid;
    int32_t layer_id;                       // -1: none
    const char *op, *kind, *dtype, *target; // "" when not recorded
    // numel, n_underflow, n_zero and zero_*: of gradients, those of the steps whose update was
    // applied (a step the GradScaler skipped threw its gradients away)
    int64_t tensors, numel; // rows, and their elements summed
    double amax;            // largest amax; NaN: no finite value
    int64_t first_step, last_step;
    int64_t counted_first_step, counted_last_step;        // of the rows numel and n_underflow count
                                                          // (INT64_MAX, INT64_MIN: none)
    int64_t n_overflow, n_underflow, n_zero, n_nonfinite; // summed
    int64_t zero_tensors, zero_numel;                     // tensors (numel > 1) that were all zero
    int64_t near_max_tensors;                // tensors with amax >= half the target's max
    int64_t near_first_step, near_last_step; // -1: none
    // the largest amax of the tensors that had not overflowed (no NaN or +inf; no -inf out of a
    // GEMM), and its first step; NaN, -1: none
    double clean_amax;
    int64_t clean_amax_step;
    bool gemm; // op is GEMM-class (report_op_is_gemm): its -inf is an overflow, never a mask's
    // the largest amax of the counted rows (not thrown) that had not overflowed; NaN: none
    double counted_amax;
    // the first row that overflowed (NaN or +inf; -inf out of a GEMM): its step and its place
    // among the rows read (which come in the order recorded within a step); INT64_MAX: none
    int64_t bad_step, bad_row;
    // kind weight (a parameter as its step began): the amax of its last row read and that row's
    // step (-1: none), for the growth into the next one (report_step.weight_growth)
    double weight_amax;
    int64_t weight_step;
} report_stats;

typedef struct report_layer {
    int32_t pid, id;
    const char *name;
} report_layer;

// A process that recorded the run: a pid of AMP_STEPS, AMP_LAYERS or AMP_EVENTS (whatever the
// focus), with its name from AMP_PROCESSES (/proc/PID/comm, "tiny_gpt"; NULL: not recorded).
typedef struct report_process {
    int32_t pid;
    const char *name;
    size_t step0, n_steps; // its focused steps: m->steps[step0 .. step0 + n_steps)
    // the pid of the first process that trains the same model (the same layer names in the same
    // order: the ranks of a data-parallel run, one script's runs of one sample); its own when
    // none does, or when it recorded no layer
    int32_t model;
    // under a focus (--steps A:B): the first step of the non-finite losses that run on into the
    // focus from before it (its weights or its state went non-finite there); -1: none
    int64_t nonfinite_since;
    // its first finite loss and first finite gradient norm (> 0), whatever the focus; NaN: none
    double loss0, grad_norm0;
    // what a divergence is measured from: the median of its first few finite losses and
    // gradient norms short of a divergence (divergence_feed: base_losses[0..base_n),
    // base_norms[0..base_norm_n))
#define DIVERGE_BASE 5
    double base_loss, base_norm;
    double base_losses[DIVERGE_BASE], base_norms[DIVERGE_BASE];
    int base_n, base_norm_n;
    int64_t first_step; // its first step, whatever the focus (-1: none)
    // where its training diverged, whatever the focus: the first step whose loss is twice
    // base_loss with its gradient norm ten times base_norm (or, where the step has no gradient
    // norm, its loss a hundredfold), and in a run resumed from a checkpoint (first_step > 0)
    // whose loss stayed up (DIVERGE_STAY steps twice base_loss or more: the steps after the
    // focus settle one still up at its end) or rose DIVERGE_SPIKE-fold or went non-finite in
    // those steps; -1: it did not, or cannot be told (no loss0 > 0: a loss negative or 0 at
    // first has no fold to rise by). loss_max (NaN: none) and its step: the largest loss up to
    // the focus's last step
#define DIVERGE_STAY 3
#define DIVERGE_SPIKE 1000
    int64_t diverged_step;
    int64_t rise_step; // a step that diverged, its loss not yet seen to stay up (-1: none)
    int rise_n;        // the steps from it on whose loss stayed up
    double loss_max;
    int64_t loss_max_step;
    // the last finite loss before the focus (--steps A:B), its step (-1: none) and gradient norm
    int64_t pre_last_step;
    double pre_last_loss, pre_last_grad_norm;
    // META scaler.growth_interval of its GradScaler (libampcore and the PyTorch bridge record
    // it; -1: not recorded), and the updates its GradScaler made, whatever the focus
    int64_t growth_interval, scale_updates;
    int64_t first_applied; // its first applied scale update, whatever the focus; -1: none
} report_process;

// The largest forward-activation amax of a layer over a bucket of steps (at most
// REPORT_AMAX_BUCKETS buckets over the focus), for the html plot.
#define REPORT_AMAX_BUCKETS 200
typedef struct report_amax {
    int32_t pid, layer_id;
    int64_t step;     // first step of the bucket with statistics of the layer's outputs
    double amax;      // NaN: none of them had a finite value
    int64_t bad_step; // the bucket's first step where an output held NaN or +inf; -1: none
} report_amax;        // (-inf is left out: an attention mask's is no fault)

// AMP_OPS of one (pid, layer, op, phase, in/out dtypes, policy) over the focused steps.
typedef struct report_op {
    int32_t pid, layer_id;                                   // layer -1: none
    const char *op, *phase, *in_dtypes, *out_dtype, *policy; // "" when not recorded
    int64_t launches;                                        // rows (sampled steps)
    double flops, bytes;        // analytic, summed (rows without a model add 0)
    int64_t host_ns;            // summed end_ns - start_ns
    int64_t kernels, kernel_ns; // GPU kernels whose launch fell inside the op (CUDA capture)
    int64_t first_step, last_step;
    // of a 16-bit GEMM's forward rows of REPORT_ODD_GEMM_FLOPS or more whose K or N (the
    // matrices' contiguous dimensions: report_gemm_kn) is not a multiple of 8: their FLOPs, and
    // the K and N of the first
    double odd_flops;
    int64_t odd_k, odd_n;
} report_op;

// CUPTI_ACTIVITY_KIND_KERNEL by shortName over the focused steps' time window.
typedef struct report_kernel {
    const char *name;
    int64_t launches, total_ns;
    int64_t short_launches; // shorter than REPORT_LAUNCH_BOUND_NS
    // analytic, from the ops that launched it (shared by duration), over all its launches: when
    // only some steps recorded their ops (the PyTorch bridge's op steps), what those launches did
    // scaled by total_ns / attributed_ns; 0: none
    double flops, bytes;
    int64_t attributed_ns; // of its launches tied to an op row
    // the layer where most of that time went (layer_id -1: none), that time, and how many
    // layers it ran in
    int32_t layer_pid, layer_id, n_layers;
    int64_t layer_ns;
    // hardware counters (GPU_METRICS, `ampprobe run --counters`): the DRAM bytes and tensor-pipe
    // busy time of the samples its launches overlap, shared by overlap time; covered_ns is the
    // part of total_ns that samples covered (0: no counters)
    double dram_bytes, tensor_ns, covered_ns;
} report_kernel;

#define REPORT_LAUNCH_BOUND_NS 5000 // a kernel shorter than this is dominated by launch overhead
// An SQL condition: the row's pid is a 32-bit integer (a damaged file's other values are no
// process, and read as int one would pass for another). The unary + keeps SQLite from taking it
// for an index range on pid: a scan of AMP_OPS through its (pid, step) index took 1.4 s more than
// reading the table in order (report_bench).
#define REPORT_PID_OK "typeof(pid) = 'integer' AND +pid BETWEEN -2147483648 AND 2147483647"
#define REPORT_GAP_NS 10000 // idle stretches shorter than this are launch spacing, not gaps

// The card's ceilings: TARGET_INFO_GPU where it has them, else the default table (report_perf.c).
typedef struct report_gpu {
    const char *name;                     // NULL: no TARGET_INFO_GPU row
    double peak_flops;                    // fp16/bf16 dense Tensor Core FLOP/s
    double peak_flops_fp32;               // fp32 (no Tensor Cores) FLOP/s
    double bandwidth;                     // DRAM bytes/s
    bool peak_assumed, bandwidth_assumed; // from the default table, not measured on this card
    const char *table_entry;              // the default table's row used
} report_gpu;

// What CUDA capture recorded (all zero when the tables are empty: a CPU run).
typedef struct report_perf {
    report_gpu gpu;
    report_kernel *kernels; // by total_ns, largest first
    size_t n_kernels;
    int64_t launches, kernel_ns; // kernels and their summed durations
    // The loop's timeline: kernels launched before the end of their process's step 0
    // (one-time set-up, library initialisation, the first step's lazy work) are left out of
    // these when step 0 is recorded, and so are those launched after its last step ended (a final
    // evaluation, a save; where a launch call is not recorded, the first kernel past that end
    // that follows an idle gap, and the rest)
    // per GPU, summed over the GPUs (a data-parallel run's ranks each keep one busy: one GPU's
    // gap is no less idle for another's kernels meanwhile)
    int64_t busy_ns, span_ns; // union of its kernel intervals; its first start to last end
    int64_t gaps, gap_ns;     // idle stretches >= REPORT_GAP_NS inside its span
    int32_t devices;          // GPUs with kernels after the warm-up
    int64_t process_span_ns;  // per process, its first kernel's start to its last end, summed
    int64_t largest_gap_ns, largest_gap_start_ns;
    int64_t warmup_kernels, warmup_ns; // left out: kernels, first start to the end of step 0
    int64_t warmup_copies;             // host-to-device copies left out of htod_* likewise
    // left out after the loop: kernels, their first start to last end; host-to-device copies
    // that start after the last step's end
    int64_t tail_kernels, tail_ns, tail_copies;
    // left out between steps: stretches of a process's run that no step holds (an evaluation
    // the script ran between two steps, a re-run of a broken step), their summed length, the
    // kernels launched in them and the host-to-device copies that start in them; the idle time
    // in them is not in gap_ns or span_ns
    int64_t betweens, between_ns, between_kernels, between_copies;
    int64_t short_launches; // kernels shorter than REPORT_LAUNCH_BOUND_NS
    int64_t htod_copies, htod_bytes, htod_ns, pageable_copies, pageable_bytes;
    int64_t syncs, sync_ns; // CUPTI_ACTIVITY_KIND_SYNCHRONIZATION that block the host (not syncType
                            // 2, a stream waiting on an event)
    int64_t step_syncs, step_sync_ns; // of them: those that began inside a step of their process
                                      // (its warm-up aside: report_step_is_warmup)
    int64_t warmup_syncs, warmup_sync_ns; // of them: those that began inside a warm-up step
    int64_t sync_gap_ns;                  // of gap_ns: gaps a host synchronisation ended in
    int64_t attributed_ns;                // kernel time attributed to an AMP_OPS op
    int64_t counter_samples;              // GPU_METRICS samples in the window
} report_perf;

// A process whose records were cut short (AMP_PROCESSES.status truncated, corrupt, unfinished).
typedef struct report_cut {
    int32_t pid;
    const char *name, *status;
} report_cut;

// How the run ended (META, AMP_PROCESSES), for the rule run-end.
typedef struct report_end {
    int exit_status;       // the program's (shell convention: 128+N for signal N); -1: not recorded
    int exit_signal;       // the signal that ended it, 0: it exited; -1: not recorded (older runs)
    amp_run_state capture; // finished, still being recorded, or cut short (amp_store_run_state)
    int64_t last_step;     // the last step recorded by any process, focus aside; -1: none
    int64_t first_error_before; // the first step before the focus (--steps A:B) with an error
                                // event (a non-finite loss, its producer); -1: none, or no focus
    bool last_loss_nonfinite;   // that step's loss was NaN/inf (in some process)
    report_cut *cut;
    size_t n_cut;
    // A run cut short whose spool directory is still beside the database (".NAME.spool-" and six
    // random characters, as collector.c names it: records that never reached the database, which
    // nothing reads any more): its path and the bytes its files hold on disk; NULL: none there
    char *spool;
    int64_t spool_bytes;
} report_end;

// The signal that ended the program: META exit_signal, or in older databases (none) 128+N of
// the exit status; 0: it exited, or its end is not recorded. (rule_run_end.c)
int report_end_signal(const report_end *e);
// Whether that signal stopped it (SIGINT, SIGTERM, SIGHUP: a note, not a failure).
bool report_signal_stops(int sig);
// "SIGTERM" ("signal 42" for a number without a name) into buf[n]; returns buf.
const char *report_signal_name(int sig, char *buf, size_t n);

// The steps of a set of events per process, for questions asked of every event (is a step of
// this process covered by one of them? the next one after a step?) in log time, not in a pass
// over all events. Add, sort once, then ask.
typedef struct report_span {
    int32_t pid;
    int64_t step, last_step;
    int64_t reach; // (sorted) the largest last_step of pid's spans up to this one
    size_t event;  // the event's index in m->events
} report_span;
typedef struct report_spans {
    report_span *v;
    size_t n, cap;
} report_spans;

typedef struct report_model {
    const char *path;
    int64_t step_lo, step_hi; // the focus, inclusive
    report_step *steps;       // sorted by pid, step
    size_t n_steps;
    report_event *events; // in recording order (id)
    size_t n_events;
    // per kind of break (loss non-finite, skipped, broken under a GradScaler; and steps without
    // a scale), how many of steps[0..i) had it (n_steps + 1 each): a range's breaks at once
    int64_t *broke_cum[4];
    report_spans loss_events;    // the steps of the loss_nonfinite events
    report_spans forward_breaks; // of those that break their step's forward (below)
    // the steps of the backward producers no loss scale avoids (report_backward_at_any_scale)
    report_spans backward_breaks;
    report_stats *stats;
    size_t n_stats;
    report_layer *layers; // sorted by pid, id
    size_t n_layers;
    report_process *procs; // sorted by pid
    size_t n_procs;
    report_op *ops; // sorted by pid, layer, op, phase, in/out dtypes, policy (strcmp order)
    size_t n_ops;
    report_amax *amax; // forward amax per layer over step buckets, sorted by pid, layer, step
    size_t n_amax;
    int64_t amax_first, amax_width; // the buckets: (step - amax_first) / amax_width; 0: none
    report_perf perf;
    const char *device, *command, *precision; // META; NULL: not recorded
    const char *trace; // META: what ampprobe run traced ("amp,cuda,nvtx"); NULL: not recorded
    const char *torch; // META: "1" when ampprobe run --torch started it; NULL: not
    const char *counters_reason; // META: why --counters recorded none; NULL: not asked or had them
    // META of a PyTorch run under torch.compile: "model" (compiled as a whole: only its output
    // and the gradients are recorded) or "modules" (compiled parts); NULL: eager
    const char *compiled;
    // META of a PyTorch run: what the optimizer trained outside the watched model ("Decoder
    // (1.2 M values)"), whose modules are not recorded; NULL: nothing
    const char *unwatched;
    // META of a PyTorch run under ampprobe run --torch: the second models found that way and
    // recorded from a later step on ("Linear (110 values) from step 1"); NULL: none
    const char *added_models;
    // META of a PyTorch run: "by hand" when its parameters changed between steps with no
    // optimizer.step() seen (an update written in the program, or an optimizer not given to
    // watch()); NULL: an optimizer's steps
    const char *updates;
    // What the program died of in its own words, the first process's: the uncaught exception
    // of a Python program under ampprobe run --torch (META exception, "RuntimeError: CUDA out
    // of memory. ...") or libampcore's abort message (META abort); NULL: none
    const char *exception;
    // Why recording stopped short of the run (META capture_error, the collector's: "the
    // database could not be written: ... disk is full"); NULL: it did not
    const char *capture_error;
    // Why the PyTorch bridge did not attach under ampprobe run --torch (META bridge_error,
    // "ImportError: ampprobe.torch needs torch 2.4 or newer; ..."); NULL: it did, or not asked
    const char *bridge_error;
    // Why the bridge found no model to watch under ampprobe run --torch (META no_model, of any
    // process: "no module called in training mode had trainable parameters"); said only of a
    // run without steps. NULL: none
    const char *no_model;
    // Processes the program left running when it exited (META orphans, the launcher's:
    // "tiny_gpt (pid 6454), ..."); NULL: none
    const char *orphans;
    // META stats_every: statistics recorded on one step in that many (ampprobe run
    // --stats-every); NULL: not recorded (every step)
    const char *stats_every;
    // META compute_dtype of a PyTorch run without autocast: the 16-bit dtype its model computes
    // in (a model cast with .half() or .bfloat16(), FSDP's MixedPrecision param_dtype); NULL:
    // under autocast, or fp32
    const char *compute_dtype;
    // META autocast_dtype: the dtype autocast cast to ("f16", "bf16"; libampcore's and the
    // PyTorch bridge's, the first process's); NULL: not recorded
    const char *autocast_dtype;
    // META of a PyTorch run, the first optimizer's: its class ("Adam"), its first parameter
    // group's eps ("1.0000000000000000e-08") and "1" when it is fused; NULL: not recorded
    const char *optimizer, *optimizer_eps, *optimizer_fused;
    // META bridge of a PyTorch run ("torch 2.11.0+cu130"); NULL: a run of libampcore or of a
    // producer of its own
    const char *bridge;
    report_end end; // how the program and the capture ended, whatever the focus
} report_model;     // every string is owned by the model (report_model_free)

// Loads the model of the steps lo..hi (inclusive) from db (opened by amp_store_open_readonly).
// AMP_ERR_IO with one line naming path in err (control characters shown as '?') when a SELECT
// fails (a foreign schema, a damaged file). The run's strings are copied with bytes 1-6 (the text
// format's style marks) and bytes that are not UTF-8 made '?' (report_strdup), names with every
// control character made '?' (report_strdup_name).
amp_status report_model_load(sqlite3 *db, const char *path, int64_t lo, int64_t hi, report_model *m,
                             char err[REPORT_ERR_MAX]);
void report_model_free(report_model *m);
// s (NULL: "") into dst[n]; a longer s cut on a character's boundary and ended with "…", so
// that the cut shows. Returns dst: names in a finding's sentences go through it, never "%.80s".
const char *report_cut_name(char *dst, size_t n, const char *s);
// printf into what is left of buf[size] after the text already there (a finding's title,
// detail or advice: cut at the end, as a rule's snprintf cuts).
void report_appendf(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// A layer's name in a finding's sentence, cut as report_cut_name cuts it: "the top level" for
// none (NULL or "": ops outside every layer).
const char *report_layer_words(char *dst, size_t n, const char *layer);
// A copy of a string from the database (NULL: none) with bytes 1-6 and bytes that are not UTF-8
// made '?'.
char *report_strdup(const char *s);
// The same for a name (a layer, op or kernel), which shows no control character at all: a
// newline in a name would forge a line of the report.
char *report_strdup_name(const char *s);
// s itself when it is a clean name, else report_strdup_name's copy in *scratch (freed by the
// caller).
const char *report_clean(const char *s, char **scratch);
// The layer's qualified name; NULL for layer -1 or an unknown id.
// qsort's comparison of two int64_t (steps, times).
int report_cmp_i64(const void *a, const void *b);

const char *report_layer_name(const report_model *m, int32_t pid, int32_t layer_id);
// What a layer id that AMP_LAYERS does not declare (a producer that skipped amp_record_layer, a
// forked child using its parent's ids) is called: "layer 42 (not declared)".
#define REPORT_UNDECLARED_MAX 40
void report_undeclared_layer(char *buf, size_t n, int32_t layer_id);
// The step record of (pid, step); NULL when none.
const report_step *report_step_find(const report_model *m, int32_t pid, int64_t step);
// Whether s is its process's warm-up: step 0 of a process with later steps in the model (its
// one-time set-up, the first step's lazy work and autotuning are not the loop's: gpu-idle and
// host-sync leave it out).
bool report_step_is_warmup(const report_model *m, const report_step *s);
// Of process pid's step records from first to last: how many there are, with a non-finite loss,
// skipped.
void report_step_counts(const report_model *m, int32_t pid, int64_t first, int64_t last,
                        int64_t *recorded, int64_t *losses, int64_t *skipped);
// The process of pid; NULL when none recorded anything.
const report_process *report_process_find(const report_model *m, int32_t pid);
// Whether a non-finite value of pid at step `at` ends its divergence: one that began before it
// and is still on at its last finite loss within 16 steps before (*last: that step's record, the
// one before the focus when none is in it), the loss twice the base and the gradient norm, where
// that step has one, ten times the base's (a spike the training recovered from is not it).
bool report_diverged_before(const report_model *m, int32_t pid, int64_t at, report_step *last);
// Process pid's weights over its focused steps up to step `upto`: the largest |w|
// (report_step.weight_amax) at the first step that has it and at the last one, and the last
// one's largest growth of a parameter (report_step.weight_growth); false when no step up to upto
// has weight rows.
typedef struct report_weights {
    int64_t first_step, last_step;
    double first, last;
    double growth, from, to;    // growth NaN: none
    int64_t from_step, updates; // updates: applied from from_step to last_step (not skipped)
    const char *param;
} report_weights;
bool report_weights_upto(const report_model *m, int32_t pid, int64_t upto, report_weights *w);
// Whether the updates applied between w->from_step and w->last_step blew a parameter up: its
// largest |w| grew tenfold or more an update (on average, between two sampled steps; a step the
// GradScaler skipped changed nothing). Adam at lr 1e-3 moves a weight of 0.1 by 1%; a tenfold
// growth in one step takes a learning rate near the weights' size.
#define REPORT_WEIGHTS_BLOWUP 10.0
bool report_weights_blew_up(const report_weights *w);
// "the update after step 0" or "the 3 updates between steps 0 and 3" (w->from_step, last_step).
void report_weights_updates(const report_weights *w, char *buf, size_t n);
// Whether e is a backward producer (a nonfinite_producer event of the backward) that made its
// NaN/inf where no loss scale avoids it: at a derivative's singular point (0 / 0, 0 * inf, a
// division by 0, a power below 1 of 0, an rsqrt of 0) or through a value the forward left out
// (rule_nonfinite.c says which).
bool report_backward_at_any_scale(const report_event *e);
// "tiny_gpt (pid 1234)", or "pid 1234" when its name was not recorded.
void report_process_phrase(const report_model *m, int32_t pid, char *buf, size_t n);
// How many processes have steps in the focus.
size_t report_processes_with_steps(const report_model *m);
// The model process pid trains (report_process.model); pid itself for a process not recorded.
int32_t report_process_model(const report_model *m, int32_t pid);
// The forward-amax bucket of a step (m->amax_first, m->amax_width), floored, without overflow
// whatever the steps' numbers (a step past the buckets' first counts from it in unsigned).
int64_t report_amax_bucket(const report_model *m, int64_t step);
// Hashing for the report's tables: a 64-bit finaliser, and a string folded into a hash (FNV-1a).
static inline uint64_t report_mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}
static inline uint64_t report_hash_str(uint64_t h, const char *s) {
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return (h ^ 0xff) * 0x100000001b3ULL;
}

// Open addressing over indexes + 1 into an array of entries (0: empty), grown at half full.
typedef struct report_index {
    size_t *slots;
    size_t n_slots;
} report_index;

// The slot of the entry of key (hash h) among the n_entries of arr — same(arr, i, key) tells —
// or the empty one to put index + 1 of a new entry in; rehash(arr, i) is an entry's hash, for
// when the table grows. Free t->slots when done.
size_t *report_index_slot(report_index *t, size_t n_entries, uint64_t h, const void *arr,
                          const void *key, bool (*same)(const void *, size_t, const void *),
                          uint64_t (*rehash)(const void *, size_t));

// Loads m->ops (AMP_OPS in one pass), the op and kernel columns of m->steps, and m->perf
// (report_perf.c); called by report_model_load after the steps. false (err filled) when a
// SELECT fails.
bool report_perf_load(sqlite3 *db, report_model *m, char err[REPORT_ERR_MAX]);
void report_perf_free(report_perf *p);
// The default ceilings for a GPU name (case-insensitive substring match; an unknown or NULL name
// gets the H200 row, marked assumed).
void report_gpu_defaults(const char *name, report_gpu *g);
// GEMM-class ops (autocast's lower_precision_fp list: Tensor Core work) and dtype casts, as C
// string lists.
#define REPORT_GEMM_OPS                                                                            \
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "conv1d", "conv2d",   \
        "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_convolution",      \
        "convolution", "scaled_dot_product_attention"
#define REPORT_CAST_OPS "to", "_to_copy", "to_copy", "type_as"

// A GEMM this large (FLOPs a call) is past launch-bound: how its dimensions sit in memory
// decides its speed.
#define REPORT_ODD_GEMM_FLOPS 1e9
// The inner dimension K and the output's columns N of GEMM-class op `op` from its AMP_OPS shapes
// ("(8, 128, 768),(50257, 768),(50257,)": the tensors' shapes in argument order): linear's input
// (..., K) and weight (N, K); matmul/mm/bmm's (..., M, K) and (..., K, N); addmm/baddbmm/addbmm's
// second and third tensors likewise. False for other ops (convolutions, einsum, attention) and
// for shapes it cannot read (a vector operand, a shape missing).
bool report_gemm_kn(const char *op, const char *shapes, int64_t *k, int64_t *n);
bool report_op_is_gemm(const char *op);
bool report_op_is_cast(const char *op);
// A kernel name that looks like a GEMM/convolution (gemm, nvjet, xmma, cutlass, conv, ...).
bool report_kernel_is_gemm(const char *name);
// A collective communication kernel (NCCL's: ncclDevKernel_AllReduce_Sum_f32_RING_LL, ...): its
// time is waiting for and moving data between GPUs, neither compute- nor memory-bound, and not
// something fp16/bf16 arithmetic shortens.
bool report_kernel_is_comm(const char *name);
// A kernel's bound class from its name and mean duration alone, as rule roofline classes one
// without FLOPs, bytes or counters: "comm" (report_kernel_is_comm), "launch" (a mean under
// REPORT_LAUNCH_BOUND_NS), "compute" (report_kernel_is_gemm), else "memory".
const char *report_kernel_class_guess(const char *name, double mean_ns);
// A kernel of m's performance model classed as rule roofline classes it (its ops' FLOPs and
// bytes, or its counters, where it has them; else as report_kernel_class_guess): "compute",
// "memory", "launch" or "comm".
const char *report_kernel_class(const report_model *m, const report_kernel *k);
// The largest finite value of a 16-bit dtype by its name ("f16", "bf16"); NaN for any other.
double report_dtype_max(const char *dtype);
// A 16-bit floating dtype by its name: "f16" or "bf16".
bool report_dtype_lowp(const char *dtype);
// An event that says where a step's forward first went non-finite: a forward producer, NaN/inf
// in the input data, or the first module output (nonfinite_module: traced per module). A
// producer recorded without a phase (AMP_PHASE_NONE: a framework outside libampcore, through
// libamprecord) is judged by its steps: a forward break when one of them has a non-finite loss
// (its step record, or a loss_nonfinite event of its process).
bool report_event_breaks_forward(const report_model *m, const report_event *e);
// Orders events by where they happened: process, layer, kind, op (and phase when with_phase); 0
// for the same place. The rules group events by it (a sort, then runs of equal places).
int report_event_cmp_place(const report_event *a, const report_event *b, bool with_phase);

void report_spans_add(report_spans *s, int32_t pid, int64_t step, int64_t last_step, size_t event);
// Sorts them by pid, step, then event (recording order), and sets reach.
void report_spans_sort(report_spans *s);
// Whether a span of pid shares a step with first..last.
bool report_spans_cover(const report_spans *s, int32_t pid, int64_t first, int64_t last);
// The first step of pid's spans after step; INT64_MAX: none.
int64_t report_spans_next(const report_spans *s, int32_t pid, int64_t step);
void report_spans_free(report_spans *s);

// True when --steps narrowed the report to some steps.
bool report_focused(const report_model *m);
// What the Run section says when no step is in the report: "none recorded", or none in the focus.
const char *report_no_steps_phrase(const report_model *m);
// True when pid ran any op under autocast (a policy was recorded).
bool report_pid_autocast(const report_model *m, int32_t pid);
// True when the run computes in a 16-bit dtype without autocast (META compute_dtype): its fp16
// is its parameters', so the advice does not say to disable autocast.
bool report_no_autocast(const report_model *m);
// The device argument of PyTorch's GradScaler for the run's advice: "cpu" for a run on the
// CPU (META device), else "cuda".
const char *report_scaler_device(const report_model *m);
// How the advice keeps a computation in fp32, for its parentheses after "keep X in fp32 (": under
// autocast, autocast disabled around it; without (report_no_autocast), fp32 inputs and that
// module's parameters in fp32 (model.half(), FSDP1's or FSDP2's MixedPrecision).
const char *report_fp32_how(const report_model *m);
// The ops of process pid: m->ops[returned .. *end) (they are sorted by pid first).
size_t report_ops_of(const report_model *m, int32_t pid, size_t *end);
// The focused steps' median step time in ns (a first step's set-up or a stall does not move
// it); NaN: no step times.
double report_median_step_ns(const report_model *m);
// The same of steps s[0..n) (one process's).
double report_steps_median_ns(const report_step *s, size_t n);
// The median of v[0..n) (sorts v); NaN when n is 0.
double report_median(double *v, size_t n);

// ---------------------------------------------------------------------------------------------
// Findings

#define REPORT_EVIDENCE_MAX 20

typedef struct report_finding {
    const char *rule;
    amp_severity severity;
    int64_t first_step, last_step;       // -1: not tied to steps
    char layer[160], op[160], phase[16]; // "" when none; a longer name cut, ending in "…"
    char title[512];                     // what happened, one line
    char detail[1024]; // the evidence in words (input ranges, the worst layers, ...)
    char advice[1024]; // what to change
    int processes;     // how many processes showed it (data-parallel ranks: one finding)
    bool leads;        // first among its severity, whatever its step (how a run died)
    int32_t pid;       // the process it is of (the first one's when merged); 0: run-wide
    // a share of many ops' time: its layer and op (and the title's) name the largest of them,
    // which two runs of the same program may pick differently (ampprobe diff matches it on its
    // rule, severity and the title's words before the names)
    bool of_many;
    int n_evidence;
    struct {
        const char *key; // lower_snake_case, stable (json)
        double value;    // NaN/inf print as null in json
    } evidence[REPORT_EVIDENCE_MAX];
} report_finding;

typedef struct report_findings {
    report_finding *v;
    size_t n, cap;
    const char *only; // the one rule that ran (--rule), for the verdict; NULL: all of them
} report_findings;

// A zeroed finding appended to out (steps -1), for the rule to fill in.
report_finding *report_finding_add(report_findings *out, const char *rule, amp_severity severity);
// Appends one evidence number (ignored past REPORT_EVIDENCE_MAX: a rule bug, asserted in debug).
void report_finding_evidence(report_finding *f, const char *key, double value);
// The evidence number of that key into *value; false when f has none.
bool report_finding_evidence_of(const report_finding *f, const char *key, double *value);
// Sets layer/op/phase from a model's names (NULL: left empty).
void report_finding_where(report_finding *f, const char *layer, const char *op, const char *phase);
// Where a finding is in a run of several processes: "in tiny_gpt (pid 1234)", or "in 2
// processes" for one merged across ranks; false (buf "") when the run has one process or the
// finding is run-wide.
bool report_finding_process(const report_model *m, const report_finding *f, char *buf, size_t n);
// The process the plots and the verdict follow: that of the top error or warning when it is one
// process's with steps, else the first process with steps; 0: no steps.
int32_t report_lead_pid(const report_model *m, const report_findings *f);
// What to do about host synchronisations (rules host-sync and gpu-idle give the same advice).
extern const char report_sync_advice[];
// The training loop's timed steps (a warm-up aside: report_step_is_warmup) and their summed
// time in ns (wall_ns may be NULL): what host-sync weighs the steps' synchronisations against,
// and where gpu-idle takes them for the loop's (with none, the whole run's are).
int64_t report_loop_steps(const report_model *m, double *wall_ns);
void report_findings_free(report_findings *f);

// ---------------------------------------------------------------------------------------------
// Rules: one file each

typedef struct report_rule {
    const char *id;
    const char *summary;
    void (*run)(const report_model *m, report_findings *out);
} report_rule;

void rule_nonfinite_run(const report_model *m, report_findings *out);  // rule_nonfinite.c
void rule_divergence_run(const report_model *m, report_findings *out); // rule_divergence.c
void rule_scale_run(const report_model *m, report_findings *out);      // rule_scale.c
void rule_overflow_run(const report_model *m, report_findings *out);   // rule_overflow.c
void rule_underflow_run(const report_model *m, report_findings *out);  // rule_underflow.c
void rule_precision_run(const report_model *m, report_findings *out);  // rule_precision.c
void rule_roofline_run(const report_model *m, report_findings *out);   // rule_roofline.c
void rule_gpu_idle_run(const report_model *m, report_findings *out);   // rule_gpu_idle.c
void rule_copies_run(const report_model *m, report_findings *out);     // rule_copies.c
void rule_sync_run(const report_model *m, report_findings *out);       // rule_sync.c
void rule_amp_payoff_run(const report_model *m, report_findings *out); // rule_amp_payoff.c
void rule_run_end_run(const report_model *m, report_findings *out);    // rule_run_end.c
void rule_events_run(const report_model *m, report_findings *out);     // rule_events.c
void rule_updates_run(const report_model *m, report_findings *out);    // rule_updates.c

extern const report_rule report_rules[];
extern const size_t report_n_rules;
const report_rule *report_rule_find(const char *id); // NULL: no such rule

// Runs one rule (only != NULL) or all of them, then sorts: errors first, then by first step.
void report_run(const report_model *m, const report_rule *only, report_findings *out);

// Shared by the rules: the loss scale that keeps a gradient of unscaled amax u below
// REPORT_SCALE_TARGET, a power of two in [1, 2^24]; NaN when u is not a positive number.
double report_scale_for_amax(double u);
// META stats_every as a number: 1 when every step's statistics were recorded (or it is unknown).
int64_t report_stats_every(const report_model *m);
// The largest unscaled gradient amax of process pid's focused non-skipped steps (grad_amax /
// scale, the scale 1 where no GradScaler ran); NaN when no step has one.
double report_unscaled_grad_amax(const report_model *m, int32_t pid);

// ---------------------------------------------------------------------------------------------
// The run in numbers, and the verdict

typedef struct report_summary {
    int64_t steps, first_step, last_step; // steps recorded (of all processes); -1 when none
    int processes;                        // processes that recorded steps (ranks of a DDP run)
    int64_t skipped, nonfinite_losses;
    double final_loss;           // of the last step that recorded a loss; NaN: none, or NaN
    bool loss_recorded;          // a step recorded a loss (final_loss is one)
    double scale_min, scale_max; // over scale_after (and the first scale_before); NaN: no scaler
    double peak_mem;             // bytes held by tensors at most (AMP_STEPS); NaN: not recorded
} report_summary;

void report_summarize(const report_model *m, report_summary *s);
// The final loss in words: "2.3012", "nan", or "not recorded" (no step record came with a loss:
// a run whose records were cut short keeps only the GradScaler's update of a step).
const char *report_final_loss_words(const report_summary *s, char buf[32]);
// "12 steps", or "24 steps of 2 processes" (a data-parallel run records each rank's steps);
// without the noun "12", "24 of 2 processes".
void report_steps_phrase(const report_summary *s, bool noun, char *buf, size_t n);
// What the run recorded of the model, for the Run section of every format: a line each for
// what torch.compile left out ("compiled", "the model as a whole (torch.compile): the outputs
// of the modules inside it are not recorded, ..."), models recorded beside it ("also
// watched"), models trained but not watched ("not watched"), statistics sampled every N steps
// ("statistics", "every 5 steps") and parameters updated with no optimizer.step() seen
// ("updates"); text and note are printed one after the other (the note fixed wording, the text
// the run's own: escape it; "statistics" has it in its own `own`). Returns how many.
typedef struct report_coverage {
    const char *label, *text, *note;
    char own[32]; // a text made for the line ("every 5 steps"), which text then points to
} report_coverage;
#define REPORT_COVERAGE_MAX 5
int report_coverage_lines(const report_model *m, report_coverage out[REPORT_COVERAGE_MAX]);
// One paragraph: the answer first (the top finding in words, or that the run is healthy).
void report_verdict(const report_model *m, const report_findings *f, char *buf, size_t n);
// Whether the run's one error is one it went past (sorted findings): the GradScaler skipped a NaN
// batch's step and every later loss is finite ("Training went on past an error", not "broke").
bool report_went_past_error(const report_model *m, const report_findings *f);
// Two findings' titles say the same but for their numbers (a rank's own figures, a run's own).
bool report_same_title(const char *a, const char *b);

// ---------------------------------------------------------------------------------------------
// Formats

void report_format_text(FILE *out, const report_model *m, const report_findings *f, bool color);
// Text for a terminal, written into t.f between report_text_begin and report_text_end, which
// writes it to out with every control character but newline and tab made '?' (the run's
// strings may hold any) and format_text's style marks (bytes 1-6) turned into escape sequences
// when color, else left out.
typedef struct report_text {
    FILE *f;
    char *buf;
    size_t n;
} report_text;
void report_text_begin(report_text *t);
void report_text_end(report_text *t, FILE *out, bool color);
void report_format_json(FILE *out, const report_model *m, const report_findings *f);
void report_format_md(FILE *out, const report_model *m, const report_findings *f);
void report_format_html(FILE *out, const report_model *m, const report_findings *f);
// JSON values (format_json.c): a string escaped (NULL: null), a number (NaN/inf: null), a step
// (negative: null).
void report_json_str(FILE *out, const char *s);
void report_json_num(FILE *out, double v);
void report_json_step(FILE *out, int64_t s);
// ", "key": value" of an object being written, value as above.
void report_json_key_num(FILE *out, const char *key, double v);
void report_json_key_str(FILE *out, const char *key, const char *s);

// ---------------------------------------------------------------------------------------------
// ampprobe diff A B (diff.c): two runs side by side and a verdict

typedef struct report_run_figures {
    const char *precision, *device; // META; NULL: not recorded
    const char *compiled;           // META (torch.compile: "model", "modules"); NULL: eager
    char program[64];               // what ran (report_program_of META command); "": unknown
    bool autocast;                  // any op ran under autocast
    int64_t steps, skipped;         // of all its processes
    double step_ms;                 // median step time; NaN: no times
    double throughput;              // steps per second (1000 / step_ms)
    double peak_mem;                // tensor bytes held at most (AMP_STEPS); NaN: not known
    size_t errors, warnings;
    size_t processes; // processes with steps
    // The losses, of one process (a run of several trains as many models): its pid (0: no
    // steps), "tiny_gpt pid 12" ("pid 12" without a name), its steps, the mean loss of its last
    // 10% of steps (at least 1; NaN: none, or one of them non-finite) and its last step's loss
    // (NaN: none, or not finite)
    int32_t loss_pid;
    char loss_process[160];
    int64_t loss_steps;
    double final_loss, last_loss;
} report_run_figures;

// The figures of m, the losses of process p (NULL: its first process with steps).
void report_figures(const report_model *m, const report_findings *f, const report_process *p,
                    report_run_figures *r);
// The program a command line ran, for telling two runs' programs apart: the executable's base
// name (past `env` and NAME=value), or the script an interpreter or launcher runs (the first
// word ending in .py or .sh: "train.py" of python3, torchrun, bash, python3 -m
// torch.distributed.run ...), else a Python interpreter's -m module or "python -c"; the command
// as amp_shell_join quoted it (single quotes). "" when command is NULL or empty.
void report_program_of(const char *command, char *out, size_t n);
// The diff of a and b (text or json) with the verdict; b is the candidate (usually the AMP run).
void report_diff_text(FILE *out, const report_model *a, const report_findings *fa,
                      const report_model *b, const report_findings *fb);
void report_diff_json(FILE *out, const report_model *a, const report_findings *fa,
                      const report_model *b, const report_findings *fb);
// One sentence: "AMP run is 2.3x faster, same loss within 0.4%" / "... 26% slower: launch-bound".
void report_diff_verdict(const report_model *a, const report_findings *fa, const report_model *b,
                         const report_findings *fb, char *buf, size_t n);

#endif
