/*
 * amp-record.h — the record stream: what a training process (libampcore's instrumentation, a
 * PyTorch bridge through ctypes, the CUPTI injection library) tells ampprobe.
 *
 * A process never opens the database. Each emit function below encodes one compact, versioned
 * binary record into an in-memory buffer; a background thread write()s the buffer to this
 * process's spool file every 100 ms, and again at exit, so a kill -9 loses at most ~100 ms.
 * The collector (amp-store.h) tails every spool file of the run and is the single SQLite writer.
 *
 * Recording is on when the environment says so, read once when the library is loaded:
 *   AMPPROBE_SPOOL_DIR=dir  set by `ampprobe run`: spool into dir, the launcher collects;
 *   AMPPROBE_OUT=file       no launcher: this process writes file itself (the same collector code
 *                           on a thread of this process; file must not exist yet; made at the
 *                           first record: a process that records nothing leaves none, and
 *                           whether file exists is found out there too);
 *   AMPPROBE_TRACE=list     which categories to record (amp,cuda,nvtx; default all of them; a
 *                           list of anything else records all, said once on stderr); with
 *                           AMPPROBE_OUT only amp (a list naming cuda or nvtx said so once).
 * Otherwise every emit function returns at once, and instrumentation that tests
 * amp_record_enabled() first pays one predictable branch. Nothing needs initialising: the spool
 * file is created on the first record, flushed at exit (after the program's exit handlers). A
 * forked child drops the records it inherited unflushed and opens its own spool file on its
 * first record.
 *
 *     if (amp_record_enabled()) {                     // costs nothing when recording is off
 *         amp_rec_step r = {.step = step, .start_ns = t0, .end_ns = amp_record_now_ns(),
 *                           .loss = loss, .grad_norm = NAN};
 *         amp_record_step(&r);
 *     }
 *
 * Conventions: times are ns on CLOCK_REALTIME (amp_record_now_ns(); the clock CUPTI stamps
 * with), recorded in the database's META. Optional fields say "not known" as the comment on the
 * field says — NULL string, NaN, -1, or for a byte count 0 — and become SQL NULL, never 0; so do
 * other negative counts. Strings are copied into the record (at
 * most AMP_REC_STR_MAX bytes each; longer ones are cut) and should be UTF-8 (the collector stores
 * other bytes as U+FFFD). Steps are numbered from 0 by the process (a number recorded twice is
 * one step, SCHEMA.md's AMP_STEPS; the collector leaves out the records of a negative step, with
 * one warning a process); layer ids are the process's own: a forked child declares its
 * layers again. A program that is not libampcore says where it ran with the META key `device`
 * ("cuda" or "cpu": the report takes a run without it for libampcore's CPU backend) and, when it
 * records no op, its precision with `precision` ("fp16", "bf16", "fp32": `ampprobe diff` reads
 * it). Every function is thread-safe, none async-signal-safe: never record from a signal
 * handler (a lock may be held by the code it interrupted). Columns, units and tables:
 * probe/SCHEMA.md.
 *
 * Linking: the functions are in libamprecord.so (the build's folder, or installed beside the
 * `ampprobe` program), `-lamprecord`; libampcore.a holds them too. From Python's ctypes, which
 * cannot call the inline functions below, read the exported amp_record_trace_mask.
 */
#ifndef AMP_RECORD_H
#define AMP_RECORD_H

#include "amp.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---------------------------------------------------------------------------------------------
// Switches and the clock

typedef enum amp_trace {
    AMP_TRACE_AMP = 1u << 0,  // layers, steps, scale, tensor stats, ops, events
    AMP_TRACE_CUDA = 1u << 1, // kernels, memcpy/memset, runtime API, synchronisation, GPU info
    AMP_TRACE_NVTX = 1u << 2, // NVTX ranges and marks
} amp_trace;

// The categories being recorded (0: recording is off). Set when the library is loaded, and by
// amp_record_start / amp_record_stop. Read it through the functions below.
extern unsigned amp_record_trace_mask;

// True when AMP records are wanted: test this before computing what a record needs.
static inline bool amp_record_enabled(void) {
    return amp_record_trace_mask & AMP_TRACE_AMP;
}
// True when records of category t are wanted (the CUPTI and NVTX producers ask this).
static inline bool amp_record_tracing(amp_trace t) {
    return amp_record_trace_mask & t;
}

// Nanoseconds on the run's clock (CLOCK_REALTIME).
int64_t amp_record_now_ns(void);

// Starts recording into spool_dir (all categories), whatever the environment said: for tests and
// for producers that manage their own collector. It stops any recording first; AMP_ERR_IO
// (amp_last_error names the directory; libamprecord.so exports it) when the spool file cannot
// be created there, and recording then stays off; AMP_ERR_INVALID_ARGUMENT for a NULL or empty
// spool_dir, and recording stays as it was.
amp_status amp_record_start(const char *spool_dir);
// Writes out the buffered records now (the background thread does this every 100 ms anyway).
void amp_record_flush(void);
// Flushes, closes this process's spool file and turns recording off. With AMPPROBE_OUT, also
// finishes that database (the last records, indexes, end time). Runs at exit by itself.
void amp_record_stop(void);

// ---------------------------------------------------------------------------------------------
// Record types. The numbers are part of the spool format: never reuse one.

typedef enum amp_rec_type {
    AMP_REC_META = 1,
    AMP_REC_LAYER = 2,
    AMP_REC_STEP = 3,
    AMP_REC_SCALE = 4,
    AMP_REC_TENSOR_STATS = 5,
    AMP_REC_OP = 6,
    AMP_REC_EVENT = 7,
    // what the CUPTI injection library delivers (nsys-named tables)
    AMP_REC_STRING = 32,
    AMP_REC_KERNEL = 33,
    AMP_REC_MEMCPY = 34,
    AMP_REC_MEMSET = 35,
    AMP_REC_RUNTIME = 36,
    AMP_REC_SYNC = 37,
    AMP_REC_NVTX = 38,
    AMP_REC_GPU_INFO = 39,
    AMP_REC_GPU_METRIC = 40,
} amp_rec_type;

#define AMP_REC_STR_MAX 65535u // bytes kept of one string field

// ---------------------------------------------------------------------------------------------
// AMP records (AMP_TRACE_AMP)

// One META row (key, value, this pid): precision, scaler settings, device, model name, ...
typedef struct amp_rec_meta {
    const char *key;
    const char *value;
} amp_rec_meta;
void amp_record_meta(const amp_rec_meta *r);

// A named layer of this process ("blocks.1.attn.qkv"); emit it before records that name it.
typedef struct amp_rec_layer {
    int32_t id;        // this process's layer id (stats, ops and events refer to it)
    int32_t parent_id; // -1: top level
    const char *name;  // qualified name
} amp_rec_layer;
void amp_record_layer(const amp_rec_layer *r);

// One training step.
typedef struct amp_rec_step {
    int64_t step;
    int64_t start_ns, end_ns;
    double loss;      // the unscaled loss, non-finite included (NaN is stored as NULL + flag)
    double grad_norm; // NaN: not computed (an overflowed norm is INFINITY, not NaN)
    // The most bytes held by tensors on the training device at once up to the end of this step,
    // as amp_ctx_memory() (since the context was made) and torch.cuda.max_memory_allocated()
    // (since the process started or the peak was last reset) count them; 0 or less: not known.
    // (Added in the record's version 2: a version-1 record reads as 0.)
    int64_t mem_peak_bytes;
} amp_rec_step;
void amp_record_step(const amp_rec_step *r);

// One GradScaler update (joined into the step's AMP_STEPS row too).
typedef struct amp_rec_scale {
    int64_t step;
    double scale_before, scale_after;
    int32_t found_inf;      // summed found_inf of the update (0: all gradients finite)
    int32_t growth_tracker; // after the update
    bool skipped;           // the optimizer step was skipped
} amp_rec_scale;
void amp_record_scale(const amp_rec_scale *r);

typedef enum amp_stats_kind {
    AMP_STATS_ACTIVATION,      // forward output
    AMP_STATS_ACTIVATION_GRAD, // gradient of a forward output
    AMP_STATS_WEIGHT,
    AMP_STATS_WEIGHT_GRAD,
    // what an optimizer step did to a 16-bit parameter (no fp32 master weights): numel the
    // values compared (those with a non-zero gradient), n_zero those the update left unchanged
    // (rounded away); the other figures are not computed (the PyTorch bridge)
    AMP_STATS_WEIGHT_UPDATE,
} amp_stats_kind;
const char *amp_stats_kind_name(amp_stats_kind k); // "activation", "activation_grad", ...

// Statistics of one tensor. Counts are -1 and values NaN when not computed. Gradients
// (activation_grad, weight_grad) are recorded as the backward made them: multiplied by the
// GradScaler's scale of their step (the report divides by the scale of AMP_SCALE / the step),
// not after unscale_.
typedef struct amp_rec_tensor_stats {
    int64_t step;
    int32_t layer_id; // -1: none
    const char *op;   // producing op ("linear"), NULL: none
    amp_stats_kind kind;
    const char *dtype;        // storage dtype ("f16")
    const char *target_dtype; // autocast dtype the overflow/underflow counts refer to; NULL: none
    int64_t numel;
    double min, max, amax; // over the finite values; NaN when none is finite
    int64_t n_nan, n_posinf, n_neginf;
    int64_t n_overflow;  // finite values that round to inf in target_dtype
    int64_t n_underflow; // non-zero values that round to 0 or a subnormal in target_dtype
    int64_t n_zero;
} amp_rec_tensor_stats;
void amp_record_tensor_stats(const amp_rec_tensor_stats *r);

// Many tensors' statistics of one step in one call (the PyTorch bridge's end of step): entry i's
// figures are stats[i] as the fused device reduction leaves them (amp_stats_finish is applied
// here); an entry whose kind is negative is left out (a read superseded by a later one). Fills
// *summary, if not NULL, with what the caller decides on without reading every figure itself;
// it is filled also when recording is off. The same entries handed in step after step keep
// each activation's share of exact zeros in zero_share, so that a share that jumps is found.
typedef struct amp_rec_stats_entry {
    int32_t layer_id; // -1: none
    amp_stats_kind kind;
    const char *op;    // NULL: none
    const char *dtype; // storage dtype ("f16")
    float zero_share;  // kept by the call: the share of exact zeros last time; start it at -1
} amp_rec_stats_entry;

typedef struct amp_rec_stats_summary {
    int64_t nonfinite[4];     // NaN and ±inf values per amp_stats_kind
    int64_t f32_overflow;     // values of f32 activations beyond the target dtype's range
    double weight_grad_sumsq; // over the weight gradients' finite values
    int32_t weight_grads;     // how many weight gradients there were
    // the first activation entry whose share of exact zeros jumped from below 1% last time to
    // 5% or more (outputs zeroed where a value overflowed and was absorbed: rsqrt(inf) = 0);
    // -1: none
    int32_t zero_jump;
} amp_rec_stats_summary;

void amp_record_tensor_stats_many(int64_t step, const char *target_dtype, int n,
                                  amp_rec_stats_entry *entries, const amp_stats *stats,
                                  amp_rec_stats_summary *summary);

typedef enum amp_phase {
    AMP_PHASE_NONE,  // stored as NULL
    AMP_PHASE_FWD,   // "fwd"
    AMP_PHASE_BWD,   // "bwd"
    AMP_PHASE_OPTIM, // "optim": unscale, optimizer step, scale update
} amp_phase;
const char *amp_phase_name(amp_phase p); // NULL for AMP_PHASE_NONE

// One op launch with its autocast decision.
typedef struct amp_rec_op {
    int64_t step;
    int32_t layer_id; // -1: none
    const char *op;
    amp_phase phase;
    const char *in_dtypes; // "f32,f16" (after autocast casts)
    const char *out_dtype;
    const char *policy; // autocast policy name; NULL: autocast off
    const char *shapes; // "(8, 64),(64, 64)"
    int64_t flops;      // analytic; -1 unknown
    int64_t bytes;      // analytic bytes moved; -1 unknown
    int64_t start_ns, end_ns;
} amp_rec_op;
void amp_record_op(const amp_rec_op *r);

typedef enum amp_severity {
    AMP_SEVERITY_INFO,
    AMP_SEVERITY_WARNING,
    AMP_SEVERITY_ERROR
} amp_severity;
const char *amp_severity_name(amp_severity s); // "info", "warning", "error"

// Event kinds of the vocabulary; any other lower_snake_case name is stored as given. The report's
// nonfinite-root-cause rule reads NONFINITE_PRODUCER (an op whose finite inputs gave a non-finite
// output: name it, with its inputs' ranges in detail), LOSS_NONFINITE and STEP_SKIPPED; it judges
// overflow, underflow and the loss scale from the statistics (amp_record_tensor_stats) and scale
// records (amp_record_scale), not from OVERFLOW, UNDERFLOW, SCALE_* or NONFINITE_PROPAGATED
// events. A warning or an error of a kind no rule reads becomes a `recorded-events` finding of its
// own; notes (AMP_SEVERITY_INFO) are shown by the TUI's events view and counted.
#define AMP_EVENT_NONFINITE_PRODUCER "nonfinite_producer"
#define AMP_EVENT_NONFINITE_PROPAGATED "nonfinite_propagated"
#define AMP_EVENT_OVERFLOW "overflow"
#define AMP_EVENT_UNDERFLOW "underflow"
#define AMP_EVENT_SCALE_BACKOFF "scale_backoff"
#define AMP_EVENT_SCALE_GROWTH "scale_growth"
#define AMP_EVENT_STEP_SKIPPED "step_skipped"
#define AMP_EVENT_LOSS_NONFINITE "loss_nonfinite"

// Something worth a finding. The collector keeps the first occurrences of each (kind, layer, op,
// phase) as rows and folds later ones into one aggregate row (SCHEMA.md, AMP_EVENTS).
typedef struct amp_rec_event {
    int64_t step;
    int32_t layer_id; // -1: none
    const char *op;   // NULL: none
    amp_phase phase;
    const char *kind; // AMP_EVENT_*
    amp_severity severity;
    int64_t count;      // elements affected; -1 unknown
    double value;       // the kind's figure (amax, new scale, ...); NaN: none
    const char *detail; // free text: input ranges of the op, ...; NULL: none
} amp_rec_event;
void amp_record_event(const amp_rec_event *r);

// ---------------------------------------------------------------------------------------------
// CUDA and NVTX records (AMP_TRACE_CUDA, AMP_TRACE_NVTX), stored in the Nsight Systems export
// tables. Ids are CUPTI's; -1 marks an optional column as absent.

// A string of this process with a process-local id (an NVTX registered string or domain name);
// NVTX records refer to it by that id and the collector maps it into StringIds.
typedef struct amp_rec_string {
    uint64_t id; // > 0
    const char *value;
} amp_rec_string;
void amp_record_string(const amp_rec_string *r);

// CUPTI_ACTIVITY_KIND_KERNEL (from CUpti_ActivityKernel*).
typedef struct amp_rec_kernel {
    int64_t start_ns, end_ns;
    int32_t device_id, context_id, stream_id;
    int32_t green_context_id; // -1: none
    int64_t correlation_id;
    const char *name;                  // as CUPTI delivers it (mangled)
    const char *demangled;             // NULL: name is used
    const char *short_name;            // NULL: derived from the demangled name
    int32_t launch_type, cache_config; // -1: unknown
    int32_t registers_per_thread;
    int32_t grid_x, grid_y, grid_z, block_x, block_y, block_z;
    int32_t static_shared_memory, dynamic_shared_memory, local_memory_per_thread;
    int64_t local_memory_total;
    int64_t grid_id;
    int32_t shared_memory_executed;     // -1: unknown
    int32_t shared_memory_limit_config; // -1: unknown
    int64_t graph_node_id;              // -1: not a graph launch
} amp_rec_kernel;
void amp_record_kernel(const amp_rec_kernel *r);

// CUPTI_ACTIVITY_KIND_MEMCPY (CUpti_ActivityMemcpy*, MemcpyPtoP*).
typedef struct amp_rec_memcpy {
    int64_t start_ns, end_ns;
    int32_t device_id, context_id, stream_id;
    int32_t green_context_id; // -1: none
    int64_t correlation_id;
    int64_t bytes;
    int32_t copy_kind;          // ENUM_CUDA_MEMCPY_OPER
    int32_t src_kind, dst_kind; // ENUM_CUDA_MEM_KIND; -1 unknown
    int32_t src_device_id, src_context_id, dst_device_id, dst_context_id; // -1: not peer-to-peer
    int32_t migration_cause;                                              // -1: none
    int64_t graph_node_id;                                                // -1: none
    int64_t virtual_address;                                              // -1: none
} amp_rec_memcpy;
void amp_record_memcpy(const amp_rec_memcpy *r);

// CUPTI_ACTIVITY_KIND_MEMSET (CUpti_ActivityMemset*).
typedef struct amp_rec_memset {
    int64_t start_ns, end_ns;
    int32_t device_id, context_id, stream_id;
    int32_t green_context_id; // -1: none
    int64_t correlation_id;
    int32_t value;
    int64_t bytes;
    int64_t graph_node_id; // -1: none
    int32_t mem_kind;      // ENUM_CUDA_MEM_KIND; -1 unknown
} amp_rec_memset;
void amp_record_memset(const amp_rec_memset *r);

// CUPTI_ACTIVITY_KIND_RUNTIME (CUpti_ActivityAPI of the RUNTIME and DRIVER kinds).
typedef struct amp_rec_runtime {
    int64_t start_ns, end_ns;
    bool driver; // eventClass 1 (driver API) instead of 0 (runtime API)
    int32_t tid; // calling thread (Linux tid)
    int64_t correlation_id;
    const char *name; // "cudaLaunchKernel_v7000"
    int32_t return_value;
} amp_rec_runtime;
void amp_record_runtime(const amp_rec_runtime *r);

// CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (CUpti_ActivitySynchronization*).
typedef struct amp_rec_sync {
    int64_t start_ns, end_ns;
    int32_t device_id, context_id, stream_id;
    int32_t green_context_id; // -1: none
    int64_t correlation_id;
    int32_t sync_type; // ENUM_CUPTI_SYNC_TYPE
    int64_t event_id;
} amp_rec_sync;
void amp_record_sync(const amp_rec_sync *r);

typedef enum amp_nvtx_type {
    AMP_NVTX_MARK = 34,      // nsys NvtxMark
    AMP_NVTX_PUSH_POP = 59,  // nsys NvtxPushPopRange
    AMP_NVTX_START_END = 60, // nsys NvtxStartEndRange
} amp_nvtx_type;

typedef enum amp_nvtx_payload {
    AMP_NVTX_PAYLOAD_NONE,
    AMP_NVTX_PAYLOAD_U64,
    AMP_NVTX_PAYLOAD_I64,
    AMP_NVTX_PAYLOAD_DOUBLE,
    AMP_NVTX_PAYLOAD_U32,
    AMP_NVTX_PAYLOAD_I32,
    AMP_NVTX_PAYLOAD_FLOAT,
} amp_nvtx_payload;

// NVTX_EVENTS: one range (when it ends) or mark.
typedef struct amp_rec_nvtx {
    int64_t start_ns;
    int64_t end_ns; // -1 for a mark
    amp_nvtx_type type;
    int64_t range_id;   // -1: none
    int64_t category;   // -1: none
    int64_t color;      // ARGB; -1: none
    const char *text;   // message; NULL when text_id is used
    uint64_t text_id;   // amp_rec_string id of a registered message; 0: none
    uint64_t domain_id; // amp_rec_string id of the domain's name; 0: default domain
    int32_t tid;        // thread that started it
    int32_t end_tid;    // thread that ended it; -1: the same
    amp_nvtx_payload payload_type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64; // DOUBLE and FLOAT
    } payload;
} amp_rec_nvtx;
void amp_record_nvtx(const amp_rec_nvtx *r);

// TARGET_INFO_GPU: one device. Integer properties are -1 when unknown.
typedef struct amp_rec_gpu_info {
    int32_t id;                                         // device ordinal as CUPTI's deviceId
    int32_t cu_device;                                  // CUDA device ordinal
    const char *name, *bus_location, *uuid, *chip_name; // NULL: unknown
    int32_t is_discrete;
    int64_t l2_cache_size, total_memory, memory_bandwidth; // bytes, bytes, bytes/s
    int64_t clock_rate;                                    // Hz
    int32_t sm_count, compute_major, compute_minor;
    int32_t max_threads_per_block, max_registers_per_block, max_registers_per_sm;
    int64_t max_shmem_per_block, max_shmem_per_block_optin, max_shmem_per_sm;
    int32_t threads_per_warp, async_engines, max_warps_per_sm, max_blocks_per_sm;
} amp_rec_gpu_info;
void amp_record_gpu_info(const amp_rec_gpu_info *r);

// GPU_METRICS: one hardware-counter value of one device over [start_ns, end_ns) (`ampprobe run
// --counters`: CUPTI PM sampling), e.g. "dram__bytes_read.sum" bytes in that interval.
typedef struct amp_rec_gpu_metric {
    int32_t device_id; // as TARGET_INFO_GPU.id
    int64_t start_ns, end_ns;
    const char *metric; // the CUPTI metric name
    double value;
} amp_rec_gpu_metric;
void amp_record_gpu_metric(const amp_rec_gpu_metric *r);

#ifdef __cplusplus
}
#endif
#endif // AMP_RECORD_H
