/*
 * instrument.c — libampcore's numerics instrumentation, emitting the record stream (amp-record.h).
 *
 * On when the process records (AMPPROBE_SPOOL_DIR from `ampprobe run`, or AMPPROBE_OUT) as the
 * context is made, and off from the end of the step in which recording ended (the launcher was
 * killed, the disk filled, amp_record_stop): nothing would read the numbers. Every
 * forward op's output (and each leaf or view it reads), every gradient flowing into a backward
 * node and every parameter gradient gets its statistics queued: the backend computes them into a
 * slot of a buffer on the device (the CPU backend at once, into host memory) and nothing waits.
 * At the end of the step the slots come back in one download and the queue is read in order:
 *   - statistics records are emitted on sampled steps (AMPPROBE_STATS_EVERY, default 1);
 *   - non-finite values are traced, on every step, to the op that produced them: a producer's
 *     inputs hold no unexpected non-finite value but its output does; the others only propagate
 *     it. An attention mask's -inf (masked_fill with an infinite value) is expected, and so is what
 *     a softmax makes of it while a row keeps finite entries. In backward, the producer is the node
 *     that received a finite gradient, had a finite forward output, and handed a non-finite
 *     gradient to its inputs;
 *   - a non-finite value in a data tensor (persistent, not a parameter) is data arriving broken;
 *   - a step whose forward stayed finite but whose gradients overflowed is a loss-scale overflow
 *     (benign: the scaler skips the step and backs off).
 * On a device backend the op that writes a tensor computes the tensor's statistics in the same
 * kernel where it can: the op arms the context's sink (amp_stats_sink) with an entry reserved for
 * its output, and a kernel that takes it adds the numbers while it stores the values; otherwise
 * the queue launches the statistics kernel on the output after the op (AMPPROBE_STATS_FUSED=0
 * always does, for comparison). Gradients are armed where they are written (by the backward
 * that makes them, or accumulated into a tensor's .grad), so the entry of the gradient flowing
 * into a backward node is usually filled already when the node runs. Parameters' gradients are
 * read at the end of backward (their sum of squares, the gradient norm, is only computed there).
 * A device backend that can copy into host memory without waiting (download_async) gets a step's
 * slots and scale records copied back behind the step's own work, and its queue read at the end
 * of the next step (or before anything else is read, at amp_ctx_free, or at exit), so the host
 * never waits for the device at a step's end.
 * Off, the context holds no instrumentation and ops pay one predictable branch.
 */
#include "amp-impl.h"
#include "amp-record.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DETAIL_MAX 1024
#define SLOTS 4096            // device slots downloaded at once
#define ENTRIES_MAX (1 << 16) // a program that never ends a step is processed this often

typedef enum entry_kind {
    E_NONE,  // reserved for an armed output (amp_instr_arm) that no op has claimed
    E_OUT,   // a forward op's output; refs: its inputs' entries
    E_LEAF,  // a tensor an op read that no instrumented op made (data, a view)
    E_DY,    // the gradient flowing into a backward node; refs[0]: the node's forward output
    E_WGRAD, // a parameter's gradient at the end of backward
    E_PARAM, // a parameter at its batch's first op (before the step's update); op: its name
} entry_kind;

#define REFS 4
typedef struct entry {
    uint8_t kind;
    int8_t inf_fill;
    bool data;        // E_LEAF: a data tensor (persistent, no gradient)
    bool record;      // emit an AMP_TENSOR_STATS row (a sampled step)
    bool in_autocast; // E_OUT: made inside an enabled autocast region
    bool blamed;      // E_DY: already named as a backward producer
    int8_t n_ref, n_contrib;
    int32_t layer;
    int32_t backward; // E_WGRAD: which backward of the step queued it
    int64_t step;
    const char *op; // a literal; E_WGRAD, E_PARAM: an owned copy of the parameter's name
    amp_dtype dtype, target;
    int8_t ndim;
    int64_t shape[AMP_MAX_DIMS];
    int32_t ref[REFS];     // E_OUT: inputs; E_DY: forward output, then forward inputs (-1: none)
    int32_t contrib[REFS]; // E_DY/E_WGRAD: the E_DY entries of the nodes that made this gradient
    // E_DY: an earlier entry of the queue whose tensor held the same values (the gradient a
    // reshape, permute, contiguous or widening cast passed on unchanged: passes_gradient_on),
    // whose statistics this one takes instead of reading the tensor again; -1: none
    int32_t values_of;
} entry;

typedef struct pending_scale {
    int64_t step;
    float before, after, found_inf; // read from rec when the queue is processed
    int32_t tracker;
    bool skipped;
} pending_scale;

// A parameter's row read before a backward gave the parameter its layer (a batch read within step
// 0's forward, its queue full), held until one does or the step ends (release_held).
typedef struct held_row {
    entry e; // E_PARAM, its name owned
    amp_stats s;
} held_row;

// A batch's queue: what ops described, in order, and the scale updates. A step's queue can be set
// aside while its numbers come back (amp_instr.lag), so it is one struct.
typedef struct step_queue {
    entry *entries;
    amp_stats *host; // the entries' statistics, downloaded
    int32_t n_entries, cap_entries;
    int32_t *order;    // the entries in the order ops described them (a reserved entry is
    int32_t n_order;   // described later than its index says): the order they are processed in
    int32_t slot_base; // entry index of slots[0]
    int32_t backwards; // backward passes in this batch
    pending_scale scales[8];
    int n_scales;
} step_queue;

typedef struct amp_instr {
    int stats_every;
    bool fuse;         // let producing kernels compute outputs' statistics (amp_stats_sink)
    bool stats_step;   // this step's statistics are emitted
    int64_t step_base; // recorded step = ctx->step + step_base (see amp_instr_init)
    int64_t step_start_ns;
    int64_t last_op_ns; // where the next op's span starts
    bool step_ops;      // an op was recorded since the step began or the last backward ended
    int32_t layers_emitted;
    unsigned autocast_dtypes; // bit per dtype already written to META
    uint32_t epoch;           // changes whenever the queue is processed

    step_queue q;
    amp_stats *slots; // backend memory: SLOTS statistics
    amp_stats *empty; // SLOTS empty statistics to upload (device backends)

    int32_t armed;         // entry reserved for ctx->sink's output (-1: none)
    uint32_t params_epoch; // the batch whose parameters are queued
    int64_t params_step;   // the step whose parameters were recorded (weight rows)
    int32_t cur_dy;        // E_DY entry of the backward node running now (-1: none)
    held_row *held;        // parameters' rows waiting for their layers
    int32_t n_held, cap_held;
    int64_t n_described, n_reused; // entries over the run; of them, taken from an earlier one

    amp_tensor_t *scale_recs[8]; // i32 [AMP_SCALE_REC] each: q.scales' records, on the backend
    bool fwd_nonfinite; // the last processed batch had an unexpected non-finite forward value

    // The last step's queue, handed off at its end (hand_off) while its numbers come back, read
    // at the next one's (finish_lagged) by the code that reads q, once swapped into it. staged:
    // NULL when the backend cannot copy back without waiting (then each step is read at its end).
    struct lagged {
        bool active;
        step_queue q;
        amp_stats *staged;              // pinned host memory: SLOTS statistics, then
        int32_t (*recs)[AMP_SCALE_REC]; // the scale records
        int32_t n_staged;               // slots copied into staged
        int64_t step, start_ns, end_ns; // the step's own record
        int64_t mem_peak;               // amp_ctx_memory's peak at its end
        float loss;
        uint8_t *loss_raw;    // pinned: the loss tensor's element, copied with the slots, or
        amp_dtype loss_dtype; // AMP_DTYPE_COUNT when the loss came as a value
        bool stats_step;
    } lag;
} amp_instr;

static double process(amp_ctx_t *ctx);
static void release_held(amp_ctx_t *ctx);
static void clear_slots(amp_ctx_t *ctx, int32_t n);
static void finish_lagged(amp_ctx_t *ctx);

// Contexts with a step waiting to be read: read at exit, for programs that end without
// amp_ctx_free (a program killed by a signal loses it, with the step it was in).
enum { LAGGING_MAX = 16 };
static amp_ctx_t *lagging[LAGGING_MAX];
static pthread_mutex_t lagging_lock = PTHREAD_MUTEX_INITIALIZER;

static void read_lagging_at_exit(void) {
    pthread_mutex_lock(&lagging_lock);
    for (int k = 0; k < LAGGING_MAX; k++)
        if (lagging[k]) finish_lagged(lagging[k]);
    pthread_mutex_unlock(&lagging_lock);
}

// Whether ctx got a place among the lagging contexts (else its steps are read at their end).
static bool lagging_add(amp_ctx_t *ctx) {
    static bool hooked;
    bool added = false;
    pthread_mutex_lock(&lagging_lock);
    if (!hooked) hooked = atexit(read_lagging_at_exit) == 0;
    for (int k = 0; hooked && !added && k < LAGGING_MAX; k++)
        if (!lagging[k]) lagging[k] = ctx, added = true;
    pthread_mutex_unlock(&lagging_lock);
    return added;
}

static void lagging_remove(amp_ctx_t *ctx) {
    pthread_mutex_lock(&lagging_lock);
    for (int k = 0; k < LAGGING_MAX; k++)
        if (lagging[k] == ctx) lagging[k] = NULL;
    pthread_mutex_unlock(&lagging_lock);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

// AMPPROBE_STATS_EVERY (amp_parse_count); anything else (said once on stderr: the launcher
// checks it, a program run with AMPPROBE_OUT does not) is 1.
static int stats_every_of(const char *s) {
    int every = 1;
    if (!s || !*s || !amp_parse_count(s, &every)) return every;
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&said))
        fprintf(stderr,
                "ampprobe: AMPPROBE_STATS_EVERY='%s' is not a number of steps from 1 to "
                "2147483647; statistics every step\n",
                s);
    return 1;
}

// The step numbers this process has recorded in its current recording: a context made after
// another one (the first freed) numbers on from them, so that its steps do not replace the first
// one's rows (one per process and step) — unless the program numbers them itself
// (amp_ctx_set_step_index). Contexts are made and stepped on one thread at a time.
static struct {
    uint64_t session; // amp_record_session() they are of
    int64_t next;     // the first number not recorded yet
} numbered;

// The step number ctx's records carry now.
static int64_t rec_step(const amp_ctx_t *ctx) {
    return ctx->step + ctx->instr->step_base;
}

void amp_instr_init(amp_ctx_t *ctx) {
    if (!amp_record_enabled()) return;
    amp_instr *in = amp_xcalloc(1, sizeof *in);
    if (numbered.session != amp_record_session())
        numbered.session = amp_record_session(), numbered.next = 0;
    in->step_base = numbered.next;
    in->stats_every = stats_every_of(getenv("AMPPROBE_STATS_EVERY"));
    in->stats_step = true;
    const char *fused = getenv("AMPPROBE_STATS_FUSED"); // "0": a separate reading of every tensor
    in->fuse = ctx->be->stats_into && !(fused && !strcmp(fused, "0"));
    in->step_start_ns = in->last_op_ns = amp_record_now_ns();
    in->epoch = 1;
    in->params_step = INT64_MIN;
    in->cur_dy = in->armed = -1;
    in->slots = ctx->be->alloc(ctx->bctx, SLOTS * sizeof(amp_stats));
    AMP_ASSERT(in->slots != NULL, "(out of memory for the statistics slots)");
    ctx->instr = in;
    clear_slots(ctx, SLOTS);
    const amp_backend_i *be = ctx->be;
    if (be->stats_into && be->host_alloc && be->host_free && be->download_async &&
        be->download_wait) {
        const size_t n_recs = sizeof in->q.scales / sizeof in->q.scales[0];
        const size_t recs_bytes = n_recs * AMP_SCALE_REC * sizeof(int32_t);
        const size_t bytes = SLOTS * sizeof(amp_stats) + recs_bytes + sizeof(double);
        in->lag.staged = be->host_alloc(ctx->bctx, bytes);
        if (in->lag.staged && !lagging_add(ctx)) {
            be->host_free(ctx->bctx, in->lag.staged);
            in->lag.staged = NULL;
        }
        if (in->lag.staged) {
            in->lag.recs = (int32_t(*)[AMP_SCALE_REC])(in->lag.staged + SLOTS);
            in->lag.loss_raw = (uint8_t *)in->lag.recs + recs_bytes;
        }
    }
    amp_record_meta(&(amp_rec_meta){"device", ctx->device == AMP_DEVICE_CPU ? "cpu" : "cuda"});
    char buf[32];
    snprintf(buf, sizeof buf, "%d", in->stats_every);
    amp_record_meta(&(amp_rec_meta){"stats_every", buf});
}

void amp_instr_free(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    if (!in) return;
    process(ctx); // the last step, and what the unfinished one after it queued
    release_held(ctx);
    free(in->held);
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)in->n_described);
    amp_record_meta(&(amp_rec_meta){"stats_tensors", buf});
    snprintf(buf, sizeof buf, "%lld", (long long)in->n_reused);
    amp_record_meta(&(amp_rec_meta){"stats_reused", buf});
    if (in->lag.staged) {
        lagging_remove(ctx);
        ctx->be->host_free(ctx->bctx, in->lag.staged);
    }
    free(in->lag.q.entries);
    free(in->lag.q.order);
    free(in->lag.q.host);
    ctx->be->free(ctx->bctx, in->slots);
    for (size_t k = 0; k < sizeof in->scale_recs / sizeof in->scale_recs[0]; k++)
        amp_tensor_free(in->scale_recs[k]);
    free(in->q.entries);
    free(in->q.order);
    free(in->q.host);
    free(in->empty);
    free(in);
    ctx->instr = NULL;
    // out of the process's buffer now: a program that ends with _exit() (a forked worker, Python's
    // os._exit) runs no exit handler to write what its last 100 ms recorded
    amp_record_flush();
}

int64_t amp_ctx_step_index(const amp_ctx_t *ctx) {
    return ctx->step;
}

void amp_ctx_set_step_index(amp_ctx_t *ctx, int64_t step) {
    AMP_ASSERT(step >= 0, "(amp_ctx_set_step_index: a step number from 0)");
    ctx->step = step;
    if (ctx->instr) {
        ctx->instr->step_base = 0; // the program numbers its steps itself
        // the step is sampled as if the run had counted up to it (see step_end)
        ctx->instr->stats_step = step % ctx->instr->stats_every == 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

static void sync_layers(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    for (; in->layers_emitted < ctx->n_layers; in->layers_emitted++) {
        int32_t id = in->layers_emitted;
        amp_record_layer(&(amp_rec_layer){id, ctx->layer_parent[id], ctx->layer_names[id]});
    }
}

static int64_t nonfinite(const amp_stats *s) {
    return s->n_nan + s->n_posinf + s->n_neginf;
}

// Non-finite values a tensor should not hold: all of them, except the infinities of an attention
// mask (masked_fill with -inf) and what stays in views of it.
static int64_t unexpected(int8_t inf_fill, const amp_stats *s) {
    if (inf_fill < 0) return s->n_nan + s->n_posinf;
    if (inf_fill > 0) return s->n_nan + s->n_neginf;
    return nonfinite(s);
}

// The dtype the overflow/underflow counts refer to: the run's autocast dtype (f16 when autocast
// never ran: what f16 would do with an fp32 run's values).
static amp_dtype target_of(const amp_ctx_t *ctx) {
    return ctx->run_dtype;
}

// "what f16 (8, 64) min .. max .. amax ..[ (n nan, n +inf, n -inf)]; " (the range over the finite
// values: "no finite value" in its place when there is none)
static size_t describe(char *buf, size_t n, size_t k, const char *what, const entry *e,
                       const amp_stats *s) {
    char shape[AMP_SHAPE_STR_MAX];
    k = amp_appendf(buf, n, k, "%s %s %s", what, amp_dtype_name(e->dtype),
                    amp_dims_str(e->ndim, e->shape, shape, sizeof shape));
    if (isnan(s->amax))
        k = amp_appendf(buf, n, k, " no finite value");
    else
        k = amp_appendf(buf, n, k, " min %.6g max %.6g amax %.6g", (double)s->min, (double)s->max,
                        (double)s->amax);
    if (nonfinite(s))
        k = amp_appendf(buf, n, k, " (%lld nan, %lld +inf, %lld -inf)", (long long)s->n_nan,
                        (long long)s->n_posinf, (long long)s->n_neginf);
    return amp_appendf(buf, n, k, "; ");
}

// Analytic FLOPs of an op (GEMM-class: 2mnk; elementwise: one per output element).
static int64_t op_flops(const char *op, const amp_tensor_t *out, amp_tensor_t *const *in, int n) {
    int64_t numel = amp_tensor_numel(out);
    if (n >= 2 && (!strcmp(op, "linear") || !strcmp(op, "mm") || !strcmp(op, "bmm") ||
                   !strcmp(op, "matmul") || !strcmp(op, "addmm")))
        return 2 * numel * in[0]->shape[in[0]->ndim - 1];
    if (n >= 2 && !strcmp(op, "conv2d"))
        return 2 * numel * in[1]->shape[1] * in[1]->shape[2] * in[1]->shape[3];
    return numel;
}

// ---------------------------------------------------------------------------------------------
// The queue

// Empties the first n slots before entries use them again (a device backend adds into them).
static void clear_slots(amp_ctx_t *ctx, int32_t n) {
    amp_instr *in = ctx->instr;
    if (!ctx->be->stats_into) return; // the host computes whole values
    if (!in->empty) {
        in->empty = amp_xmalloc(SLOTS * sizeof *in->empty);
        for (int i = 0; i < SLOTS; i++)
            in->empty[i] = amp_stats_empty();
    }
    ctx->be->upload(ctx->bctx, in->slots, in->empty, (size_t)n * sizeof *in->empty);
}

// The statistics of the entries from slot_base on are in host[]: finished, and no longer on the
// device.
static void slots_arrived(amp_instr *in) {
    for (int32_t i = in->q.slot_base; i < in->q.n_entries; i++) {
        const int32_t same = in->q.entries[i].values_of; // earlier: arrived already
        if (same >= 0)
            in->q.host[i] = in->q.host[same];
        else
            amp_stats_finish(&in->q.host[i]);
    }
    in->q.slot_base = in->q.n_entries;
}

// Downloads the statistics of the entries whose slots are on the device.
static void download(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    int32_t n = in->q.n_entries - in->q.slot_base;
    if (n <= 0) return;
    ctx->be->download(ctx->bctx, in->q.host + in->q.slot_base, in->slots,
                      (size_t)n * sizeof(amp_stats));
    slots_arrived(in);
    clear_slots(ctx, n);
}

// A new entry (kind E_NONE) whose slot is on the device and empty.
static int32_t new_entry(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    if (in->q.n_entries - in->q.slot_base == SLOTS) download(ctx);
    if (in->q.n_entries == in->q.cap_entries) {
        in->q.cap_entries = in->q.cap_entries ? in->q.cap_entries * 2 : 1024;
        in->q.entries =
            amp_xrealloc(in->q.entries, (size_t)in->q.cap_entries * sizeof *in->q.entries);
        in->q.host = amp_xrealloc(in->q.host, (size_t)in->q.cap_entries * sizeof *in->q.host);
        in->q.order = amp_xrealloc(in->q.order, (size_t)in->q.cap_entries * sizeof *in->q.order);
    }
    int32_t i = in->q.n_entries++;
    in->q.entries[i] = (entry){.kind = E_NONE, .values_of = -1};
    return i;
}

// Entry i describes t (its statistics: computed into the slot, or launched by launch()).
static void set_entry(amp_ctx_t *ctx, int32_t i, const amp_tensor_t *t, entry_kind kind,
                      const char *op, int32_t layer) {
    amp_instr *in = ctx->instr;
    entry *e = &in->q.entries[i];
    *e = (entry){.kind = (uint8_t)kind,
                 .inf_fill = t->inf_fill,
                 .record = in->stats_step,
                 .layer = layer,
                 .step = rec_step(ctx),
                 .op = op,
                 .dtype = t->dtype,
                 .target = target_of(ctx),
                 .ndim = (int8_t)t->ndim,
                 .values_of = -1};
    memcpy(e->shape, t->shape, sizeof e->shape);
    AMP_ASSERT(in->q.n_order < in->q.n_entries, "(entry %d: more descriptions than entries)",
               (int)i);
    in->n_described++;
    in->q.order[in->q.n_order++] = i;
}

// Tensors whose statistics go out together, in few launches (the statistics kernel takes many
// tensors per launch): the parameters at the start of a step, their gradients at the end of
// backward.
typedef struct batch {
    const amp_tensor_t *t[AMP_STATS_BATCH];
    int32_t entry[AMP_STATS_BATCH];
    int n;
} batch;

// Queues the statistics of t[k] into entry[k]'s slot (still on the device).
static void launch_many(amp_ctx_t *ctx, const amp_tensor_t *const *t, const int32_t *entry, int n) {
    amp_instr *in = ctx->instr;
    int64_t slot[AMP_STATS_BATCH];
    bool sumsq = false; // wanted for parameters' gradients only (the gradient norm)
    for (int k = 0; k < n; k++) {
        slot[k] = entry[k] - in->q.slot_base;
        sumsq |= in->q.entries[entry[k]].kind == E_WGRAD;
    }
    if (ctx->nvtx) amp_nvtx_push("ampprobe.stats"); // the instrumentation's own kernels
    amp_tensors_stats_into(t, n, target_of(ctx), in->slots, slot, sumsq);
    if (ctx->nvtx) amp_nvtx_pop();
}

static void launch(amp_ctx_t *ctx, const amp_tensor_t *t, int32_t i) {
    launch_many(ctx, &t, &i, 1);
}

static void batch_flush(amp_ctx_t *ctx, batch *b) {
    if (b->n) launch_many(ctx, b->t, b->entry, b->n);
    b->n = 0;
}

// Queues the statistics of t and returns its entry.
static int32_t queue(amp_ctx_t *ctx, amp_tensor_t *t, entry_kind kind, const char *op,
                     int32_t layer) {
    int32_t i = new_entry(ctx);
    set_entry(ctx, i, t, kind, op, layer);
    launch(ctx, t, i);
    return i;
}

// Like queue(), with the launch left to the batch (flushed when full; the caller flushes the rest).
static int32_t batch_queue(amp_ctx_t *ctx, batch *b, const amp_tensor_t *t, entry_kind kind,
                           const char *op, int32_t layer) {
    amp_instr *in = ctx->instr;
    // room for the whole batch: no download may take its first slots off the device before it goes
    if (b->n == 0 && in->q.n_entries - in->q.slot_base > SLOTS - AMP_STATS_BATCH) download(ctx);
    int32_t i = new_entry(ctx);
    set_entry(ctx, i, t, kind, op, layer);
    b->t[b->n] = t;
    b->entry[b->n++] = i;
    if (b->n == AMP_STATS_BATCH) batch_flush(ctx, b);
    return i;
}

// A parameter's name in its rows: "param" when it has none.
static const char *param_name(const amp_tensor_t *p) {
    return p->name && p->name[0] ? p->name : "param";
}

// The parameters (tensors that require grad and own their storage) as this batch's inputs, read
// together before the first op reads any of them: as the last update left them (a sampled step
// records them, the weights' rows).
static void queue_parameters(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    // once a step: a batch read within the step (a queue grown past ENTRIES_MAX, the scale
    // records full) has the ops after it queue the parameters again, unrecorded
    const bool record = in->stats_step && in->params_step != rec_step(ctx);
    if (record) in->params_step = rec_step(ctx);
    batch b = {.n = 0};
    for (size_t k = 0; k < ctx->n_persist; k++) {
        amp_tensor_t *p = ctx->persist[k];
        if (!p->requires_grad || p->stat_epoch == in->epoch) continue;
        const char *name = record ? amp_xstrdup(param_name(p)) : NULL;
        p->stat_entry = batch_queue(ctx, &b, p, E_PARAM, name, p->layer);
        in->q.entries[p->stat_entry].record = record;
        p->stat_epoch = in->epoch;
    }
    batch_flush(ctx, &b);
    in->params_epoch = in->epoch;
}

// Disarms the sink. Returns the entry reserved for t with t's statistics queued (by the kernel
// that wrote t, or now by a launch of our own), or -1 when the sink was not armed for t.
static int32_t claim_armed(amp_ctx_t *ctx, const amp_tensor_t *t) {
    amp_instr *in = ctx->instr;
    int32_t i = in->armed;
    // (a download since the arm took the slot off the device: the numbers are queued anew)
    bool mine = i >= in->q.slot_base && ctx->sink.out == t, taken = ctx->sink.taken;
    in->armed = -1;
    ctx->sink = (amp_stats_sink){0};
    if (!mine) return -1;
    if (!taken) launch(ctx, t, i);
    return i;
}

void amp_instr_arm_slow(amp_ctx_t *ctx, const amp_tensor_t *out) {
    amp_instr *in = ctx->instr;
    if (!in->fuse) return; // the CPU computes statistics at once: nothing to fuse
    if (in->q.n_entries >= ENTRIES_MAX) process(ctx);
    in->armed = new_entry(ctx);
    ctx->sink = (amp_stats_sink){
        .out = out, .slot = in->slots + (in->armed - in->q.slot_base), .target = target_of(ctx)};
}

// The entry holding t's statistics, queueing them when no op of this batch made t.
static int32_t entry_of(amp_ctx_t *ctx, amp_tensor_t *t) {
    amp_instr *in = ctx->instr;
    if (t->stat_epoch == in->epoch) return t->stat_entry;
    int32_t i = queue(ctx, t, E_LEAF, NULL, -1);
    in->q.entries[i].data = t->persistent && !t->requires_grad;
    t->stat_epoch = in->epoch;
    t->stat_entry = i;
    return i;
}

// ---------------------------------------------------------------------------------------------
// Hooks: forward ops, backward, the GradScaler

// A program that never ends a step gets its queue processed now and then (before an op queues
// anything, so that no entry it refers to goes away).
static void bound_queue(amp_ctx_t *ctx) {
    if (ctx->instr->q.n_entries >= ENTRIES_MAX) process(ctx);
}

void amp_instr_input_slow(amp_ctx_t *ctx, amp_tensor_t *x) {
    amp_instr *in = ctx->instr;
    if (!in->fuse || x->requires_grad || x->stat_epoch == in->epoch) return;
    bound_queue(ctx);
    entry_of(ctx, x);
}

void amp_instr_work_begins_slow(amp_ctx_t *ctx) {
    if (!ctx->instr->step_ops) ctx->instr->last_op_ns = amp_record_now_ns();
}

void amp_instr_op_slow(amp_ctx_t *ctx, const char *op, amp_cast_policy policy, amp_tensor_t *out,
                       amp_tensor_t *const *inputs, int n) {
    amp_instr *in = ctx->instr;
    int32_t i = claim_armed(ctx, out); // before any other entry: its slot is still on the device
    if (i < 0) bound_queue(ctx);
    sync_layers(ctx);
    int32_t layer = out->layer >= 0 ? out->layer : amp_ctx_current_layer(ctx);
    int64_t now = amp_record_now_ns();
    if (in->stats_step) {
        char dts[64] = "", shapes[256] = "";
        size_t kd = 0, ks = 0;
        int64_t bytes = (int64_t)amp_tensor_numel(out) * (int64_t)amp_dtype_size(out->dtype);
        for (int k = 0; k < n; k++) {
            char shape[64];
            kd = amp_appendf(dts, sizeof dts, kd, k ? ",%s" : "%s",
                             amp_dtype_name(inputs[k]->dtype));
            ks = amp_appendf(shapes, sizeof shapes, ks, k ? ",%s" : "%s",
                             amp_shape_str(inputs[k], shape, sizeof shape));
            bytes += amp_tensor_numel(inputs[k]) * (int64_t)amp_dtype_size(inputs[k]->dtype);
        }
        amp_record_op(&(amp_rec_op){.step = rec_step(ctx),
                                    .layer_id = layer,
                                    .op = op,
                                    .phase = AMP_PHASE_FWD,
                                    .in_dtypes = dts,
                                    .out_dtype = amp_dtype_name(out->dtype),
                                    .policy = ctx->ac.enabled ? amp_cast_policy_name(policy) : NULL,
                                    .shapes = shapes,
                                    .flops = op_flops(op, out, inputs, n),
                                    .bytes = bytes,
                                    .start_ns = in->last_op_ns,
                                    .end_ns = now});
    }
    in->last_op_ns = now;
    in->step_ops = true;
    int32_t refs[REFS];
    int nr = n < REFS ? n : REFS;
    if (in->params_epoch != in->epoch) queue_parameters(ctx);
    for (int k = 0; k < nr; k++)
        refs[k] = entry_of(ctx, inputs[k]);
    if (i < 0)
        i = queue(ctx, out, E_OUT, op, layer);
    else
        set_entry(ctx, i, out, E_OUT, op, layer);
    entry *e = &in->q.entries[i];
    e->in_autocast = ctx->ac.enabled;
    e->n_ref = (int8_t)nr;
    memcpy(e->ref, refs, (size_t)nr * sizeof *refs);
    out->stat_epoch = in->epoch;
    out->stat_entry = i;
}

// The entry whose slot holds t's gradient as it is now (written in this backward pass of this
// batch by the write that amp_instr_grad claimed), or -1; used once.
static int32_t grad_entry(amp_instr *in, amp_tensor_t *t) {
    if (t->grad_epoch != in->epoch || t->grad_entry < 0 || t->grad_backward != in->q.backwards)
        return -1;
    int32_t i = t->grad_entry;
    t->grad_entry = -1;
    return i;
}

// Whether the node of E_DY entry e hands its incoming gradient on to an input of dtype `to` with
// the same values: a reshape, permute or contiguous, or a cast to a wider dtype (widening is
// exact; the gradient is narrowed when the cast's input is the narrower one).
static bool passes_gradient_on(const entry *e, amp_dtype to) {
    if (!strcmp(e->op, "to")) return amp_dtype_size(e->dtype) < amp_dtype_size(to);
    return !strcmp(e->op, "reshape") || !strcmp(e->op, "permute") || !strcmp(e->op, "contiguous");
}

// The entry whose statistics are those of t's gradient: the E_DY entry of the one node that made
// it when that node passed its own incoming gradient on unchanged; else -1.
static int32_t passed_on_entry(const amp_instr *in, const amp_tensor_t *t) {
    if (t->contrib_epoch != in->epoch || t->n_contrib != 1) return -1;
    const int32_t c = t->contrib[0];
    if (c < 0 || !passes_gradient_on(&in->q.entries[c], t->dtype)) return -1;
    return in->q.entries[c].values_of >= 0 ? in->q.entries[c].values_of : c;
}

void amp_instr_backward_node(amp_ctx_t *ctx, amp_node *n, amp_tensor_t *dy) {
    amp_instr *in = ctx->instr;
    int32_t i = dy == n->out->grad ? grad_entry(in, n->out) : -1;
    if (i >= 0) {
        set_entry(ctx, i, dy, E_DY, n->op, n->layer);
    } else {
        bound_queue(ctx); // (a new batch forgets the entries of the last)
        const int32_t same = dy == n->out->grad ? passed_on_entry(in, n->out) : -1;
        if (same >= 0) { // a gradient passed on unchanged: its numbers, not a second reading
            i = new_entry(ctx);
            set_entry(ctx, i, dy, E_DY, n->op, n->layer);
            in->q.entries[i].values_of = same;
            in->n_reused++;
        } else {
            i = queue(ctx, dy, E_DY, n->op, n->layer);
        }
    }
    entry *e = &in->q.entries[i];
    e->inf_fill = 0;
    e->dtype = n->out->dtype; // (a narrower dy holds the values of out's dtype: narrow_dy)
    e->ref[e->n_ref++] = n->out->stat_epoch == in->epoch ? n->out->stat_entry : -1;
    for (int k = 0; k < n->n_in && e->n_ref < REFS; k++)
        if (n->in[k] && n->in[k]->stat_epoch == in->epoch)
            e->ref[e->n_ref++] = n->in[k]->stat_entry;
    if (n->out->contrib_epoch == in->epoch) {
        e->n_contrib = (int8_t)n->out->n_contrib;
        memcpy(e->contrib, n->out->contrib, sizeof e->contrib);
    }
    in->cur_dy = i;
}

bool amp_instr_grad_passed_on(const amp_ctx_t *ctx, const amp_tensor_t *t) {
    const amp_instr *in = ctx->instr;
    return in->cur_dy >= 0 && (t->contrib_epoch != in->epoch || t->n_contrib == 0) &&
           passes_gradient_on(&in->q.entries[in->cur_dy], t->dtype);
}

void amp_instr_grad(amp_ctx_t *ctx, amp_tensor_t *t) {
    amp_instr *in = ctx->instr;
    t->grad_entry = claim_armed(ctx, t->grad);
    t->grad_epoch = in->epoch;
    t->grad_backward = in->q.backwards;
    if (in->cur_dy < 0) return; // the seed of backward
    if (t->persistent && t->layer < 0) t->layer = in->q.entries[in->cur_dy].layer; // first use
    if (t->contrib_epoch != in->epoch) {
        t->contrib_epoch = in->epoch;
        t->n_contrib = 0;
    }
    for (int k = 0; k < t->n_contrib; k++)
        if (t->contrib[k] == in->cur_dy) return;
    if (t->n_contrib < REFS) t->contrib[t->n_contrib++] = in->cur_dy;
}

void amp_instr_backward_end(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    // The next forward op (a micro-batch's under gradient accumulation) starts no earlier than
    // now, nor than the layer or autocast region it begins in: the backward is no op's time. (One
    // clock read a backward; an op's span otherwise starts where the previous op's ended.)
    in->last_op_ns = amp_record_now_ns();
    in->step_ops = false;
    in->cur_dy = -1;
    in->q.backwards++;
    batch b = {.n = 0};
    for (size_t k = 0; k < ctx->n_persist; k++) {
        amp_tensor_t *p = ctx->persist[k];
        if (!p->grad || !p->requires_grad) continue;
        // (a parameter's layer is known from its first backward on: its row of this batch too)
        if (p->stat_epoch == in->epoch && in->q.entries[p->stat_entry].kind == E_PARAM)
            in->q.entries[p->stat_entry].layer = p->layer;
        int32_t i = batch_queue(ctx, &b, p->grad, E_WGRAD, amp_xstrdup(param_name(p)), p->layer);
        entry *e = &in->q.entries[i];
        e->backward = in->q.backwards;
        e->dtype = p->dtype; // (a narrower gradient holds the values of p's dtype)
        if (p->contrib_epoch == in->epoch) {
            e->n_contrib = (int8_t)p->n_contrib;
            memcpy(e->contrib, p->contrib, sizeof e->contrib);
        }
    }
    batch_flush(ctx, &b);
    if (in->n_held) release_held(ctx); // (the parameters have their layers now)
}

void amp_instr_autocast_dtype(amp_ctx_t *ctx, amp_dtype t) {
    amp_instr *in = ctx->instr;
    if (in->autocast_dtypes & (1u << t)) return;
    in->autocast_dtypes |= 1u << t;
    amp_record_meta(&(amp_rec_meta){"autocast_dtype", amp_dtype_name(t)});
}

static void meta_number(const char *key, double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", v);
    amp_record_meta(&(amp_rec_meta){key, buf});
}

void amp_instr_scaler_settings(amp_ctx_t *ctx, float init_scale, double growth_factor,
                               double backoff_factor, int growth_interval) {
    (void)ctx;
    meta_number("scaler.init_scale", init_scale);
    meta_number("scaler.growth_factor", growth_factor);
    meta_number("scaler.backoff_factor", backoff_factor);
    meta_number("scaler.growth_interval", growth_interval);
}

// The update's record is copied aside on the backend (nothing waits) and read with the step's
// numerics, which its events also wait for (was the forward finite?).
void amp_instr_scale(amp_ctx_t *ctx, const amp_tensor_t *rec) {
    amp_instr *in = ctx->instr;
    enum { N = sizeof in->q.scales / sizeof in->q.scales[0] };
    if (in->q.n_scales == N) process(ctx);
    amp_tensor_t **slot = &in->scale_recs[in->q.n_scales];
    if (!*slot) *slot = amp_tensor_new(ctx, AMP_DTYPE_I32, 1, (int64_t[]){AMP_SCALE_REC});
    ctx->be->copy(ctx->bctx, *slot, rec);
    in->q.scales[in->q.n_scales++] = (pending_scale){.step = rec_step(ctx)};
}

// Reads the pending updates' records (from staged, copied back already, or from the backend)
// and records them.
static void read_scales(amp_ctx_t *ctx, int32_t (*staged)[AMP_SCALE_REC]) {
    amp_instr *in = ctx->instr;
    for (int k = 0; k < in->q.n_scales; k++) {
        pending_scale *p = &in->q.scales[k];
        int32_t rec[AMP_SCALE_REC];
        if (staged)
            memcpy(rec, staged[k], sizeof rec);
        else
            amp_tensor_read(in->scale_recs[k], rec);
        memcpy(&p->before, &rec[AMP_REC_BEFORE], 4);
        memcpy(&p->after, &rec[AMP_REC_AFTER], 4);
        memcpy(&p->found_inf, &rec[AMP_REC_FOUND_INF], 4);
        p->skipped = rec[AMP_REC_SKIPPED] != 0;
        p->tracker = rec[AMP_REC_TRACKER];
        amp_record_scale(&(amp_rec_scale){.step = p->step,
                                          .scale_before = p->before,
                                          .scale_after = p->after,
                                          .found_inf = (int32_t)p->found_inf,
                                          .growth_tracker = p->tracker,
                                          .skipped = p->skipped});
    }
}

// ---------------------------------------------------------------------------------------------
// Processing the queue

static void emit_stats(const entry *e, amp_stats_kind kind, const amp_stats *s) {
    amp_record_stats_of(&(amp_rec_tensor_stats){.step = e->step,
                                                .layer_id = e->layer,
                                                .op = e->op,
                                                .kind = kind,
                                                .dtype = amp_dtype_name(e->dtype),
                                                .target_dtype = amp_dtype_name(e->target)},
                        s);
}

// Holds a parameter's row (its name with it) until a backward gives the parameter its layer.
static void hold(amp_instr *in, const entry *e, const amp_stats *s) {
    if (in->n_held == in->cap_held) {
        in->cap_held = in->cap_held ? 2 * in->cap_held : 16;
        in->held = amp_xrealloc(in->held, (size_t)in->cap_held * sizeof *in->held);
    }
    in->held[in->n_held++] = (held_row){*e, *s};
}

// Emits the held rows, each in the layer of the one parameter of its name (none when no
// parameter or several have it: "param", the unnamed ones').
static void release_held(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    for (int32_t k = 0; k < in->n_held; k++) {
        held_row *h = &in->held[k];
        int found = 0;
        for (size_t j = 0; j < ctx->n_persist; j++) {
            const amp_tensor_t *p = ctx->persist[j];
            if (p->requires_grad && strcmp(param_name(p), h->e.op) == 0)
                h->e.layer = found++ ? -1 : p->layer;
        }
        emit_stats(&h->e, AMP_STATS_WEIGHT, &h->s);
        free((char *)h->e.op);
    }
    in->n_held = 0;
}

// A forward output: its statistics, and whether it produced or propagated a non-finite value.
static void process_out(amp_instr *in, const entry *e, const amp_stats *s) {
    if (e->record) {
        emit_stats(e, AMP_STATS_ACTIVATION, s);
        // an f32 output inside an autocast region (an fp32-policy op) that f16 could not hold
        if (s->n_overflow > 0 && e->in_autocast && e->dtype == AMP_DTYPE_F32 &&
            e->target == AMP_DTYPE_F16)
            amp_record_event(&(amp_rec_event){
                .step = e->step,
                .layer_id = e->layer,
                .op = e->op,
                .phase = AMP_PHASE_FWD,
                .kind = AMP_EVENT_OVERFLOW,
                .severity = AMP_SEVERITY_INFO, // (it runs in f32)
                .count = s->n_overflow,
                .value = s->amax,
                .detail =
                    "f32 values beyond the f16 range: this output overflows if it runs in f16"});
    }
    int64_t bad = unexpected(e->inf_fill, s);
    if (bad == 0) return;
    char detail[DETAIL_MAX];
    size_t k = 0;
    bool inputs_finite = true, from_data = false;
    for (int r = 0; r < e->n_ref; r++) {
        const entry *ie = &in->q.entries[e->ref[r]];
        const amp_stats *is = &in->q.host[e->ref[r]];
        if (unexpected(ie->inf_fill, is)) {
            inputs_finite = false;
            from_data |= ie->kind == E_LEAF && ie->data;
        }
        char what[32];
        snprintf(what, sizeof what, "input %d", r);
        k = describe(detail, sizeof detail, k, what, ie, is);
    }
    describe(detail, sizeof detail, k, "output", e, s);
    amp_record_event(&(amp_rec_event){.step = e->step,
                                      .layer_id = e->layer,
                                      .op = e->op,
                                      .phase = AMP_PHASE_FWD,
                                      .kind = inputs_finite ? AMP_EVENT_NONFINITE_PRODUCER
                                              : from_data   ? "nonfinite_input"
                                                            : AMP_EVENT_NONFINITE_PROPAGATED,
                                      .severity = inputs_finite || from_data ? AMP_SEVERITY_ERROR
                                                                             : AMP_SEVERITY_INFO,
                                      .count = bad,
                                      .value = s->amax,
                                      .detail = detail});
    in->fwd_nonfinite = true;
}

// A non-finite gradient (into a node, or a parameter's): the node that made it from a finite
// gradient and a finite forward output is the backward producer.
static void blame_contributors(amp_instr *in, int32_t i) {
    const entry *e = &in->q.entries[i];
    const amp_stats *s = &in->q.host[i];
    for (int c = 0; c < e->n_contrib; c++) {
        entry *ce = &in->q.entries[e->contrib[c]];
        const amp_stats *cs = &in->q.host[e->contrib[c]];
        if (ce->blamed || nonfinite(cs)) continue; // it only passed on what it received
        int32_t out = ce->ref[0];
        if (out >= 0 && unexpected(in->q.entries[out].inf_fill, &in->q.host[out])) continue;
        ce->blamed = true;
        char detail[DETAIL_MAX];
        size_t k = describe(detail, sizeof detail, 0, "incoming gradient", ce, cs);
        for (int r = 1; r < ce->n_ref; r++) {
            char what[32];
            snprintf(what, sizeof what, "forward input %d", r - 1);
            k = describe(detail, sizeof detail, k, what, &in->q.entries[ce->ref[r]],
                         &in->q.host[ce->ref[r]]);
        }
        describe(detail, sizeof detail, k, "gradient", e, s);
        amp_record_event(&(amp_rec_event){.step = ce->step,
                                          .layer_id = ce->layer,
                                          .op = ce->op,
                                          .phase = AMP_PHASE_BWD,
                                          .kind = AMP_EVENT_NONFINITE_PRODUCER,
                                          .severity = in->fwd_nonfinite ? AMP_SEVERITY_ERROR
                                                                        : AMP_SEVERITY_WARNING,
                                          .count = nonfinite(s),
                                          .value = s->amax,
                                          .detail = detail});
    }
}

static void emit_scale_events(const pending_scale *p, bool fwd_nonfinite) {
    char detail[256];
    if (p->found_inf != 0 && !fwd_nonfinite) {
        snprintf(detail, sizeof detail,
                 "gradients overflowed at loss scale %g while the forward pass stayed finite: "
                 "a loss-scale overflow, the step was skipped and the scale backed off to %g",
                 (double)p->before, (double)p->after);
        amp_record_event(&(amp_rec_event){.step = p->step,
                                          .layer_id = -1,
                                          .phase = AMP_PHASE_BWD,
                                          .kind = "grad_overflow",
                                          .severity = AMP_SEVERITY_INFO,
                                          .count = -1,
                                          .value = p->before,
                                          .detail = detail});
    }
    if (p->skipped)
        amp_record_event(&(amp_rec_event){.step = p->step,
                                          .layer_id = -1,
                                          .phase = AMP_PHASE_OPTIM,
                                          .kind = AMP_EVENT_STEP_SKIPPED,
                                          .severity = AMP_SEVERITY_WARNING,
                                          .count = 1,
                                          .value = p->before,
                                          .detail = NULL});
    if (p->after != p->before)
        amp_record_event(&(amp_rec_event){.step = p->step,
                                          .layer_id = -1,
                                          .phase = AMP_PHASE_OPTIM,
                                          .kind = p->after < p->before ? AMP_EVENT_SCALE_BACKOFF
                                                                       : AMP_EVENT_SCALE_GROWTH,
                                          .severity = AMP_SEVERITY_INFO,
                                          .count = -1,
                                          .value = p->after,
                                          .detail = NULL});
}

// Reads the queue in order (its statistics on the host, its scale updates read) and emits what it
// says, then empties it. Returns the L2 norm of the last backward's parameter gradients divided
// by the scale they had: the one the step's last update began with (the gradients were queued
// before the GradScaler unscaled them); NaN without gradients.
static double process_queue(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    sync_layers(ctx);
    const double scale = in->q.n_scales > 0 ? in->q.scales[in->q.n_scales - 1].before : 1.0;
    in->fwd_nonfinite = false;
    double sumsq = 0;
    bool any_wgrad = false;
    for (int32_t k = 0; k < in->q.n_order; k++) {
        const int32_t i = in->q.order[k];
        entry *e = &in->q.entries[i];
        const amp_stats *s = &in->q.host[i];
        switch ((entry_kind)e->kind) {
        case E_NONE:
            break;
        case E_OUT:
            process_out(in, e, s);
            break;
        case E_LEAF:
            break;
        case E_PARAM:
            if (e->record && e->layer < 0 && in->q.backwards == 0) {
                hold(in, e, s);
                break;
            }
            if (e->record) emit_stats(e, AMP_STATS_WEIGHT, s);
            free((char *)e->op);
            break;
        case E_DY:
            if (e->record) emit_stats(e, AMP_STATS_ACTIVATION_GRAD, s);
            if (nonfinite(s)) blame_contributors(in, i);
            break;
        case E_WGRAD:
            if (e->record) emit_stats(e, AMP_STATS_WEIGHT_GRAD, s);
            if (nonfinite(s)) blame_contributors(in, i);
            if (e->backward == in->q.backwards) {
                sumsq += nonfinite(s) ? INFINITY : s->sumsq;
                any_wgrad = true;
            }
            free((char *)e->op);
            break;
        }
    }
    for (int k = 0; k < in->q.n_scales; k++)
        emit_scale_events(&in->q.scales[k], in->fwd_nonfinite);
    in->q.n_scales = 0;
    in->q.n_entries = in->q.slot_base = in->q.n_order = 0;
    in->q.backwards = 0;
    return any_wgrad ? sqrt(sumsq) / scale : NAN;
}

// What the next ops start from once the queue is read or handed off: no tensor's entry is valid.
static void next_batch(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    in->cur_dy = in->armed = -1;
    ctx->sink = (amp_stats_sink){0};
    in->epoch++;
}

// Reads the queue now (the last step's first, when one waits).
static double process(amp_ctx_t *ctx) {
    finish_lagged(ctx);
    download(ctx);
    read_scales(ctx, NULL);
    double norm = process_queue(ctx);
    next_batch(ctx);
    return norm;
}

static void emit_step(amp_ctx_t *ctx, int64_t step, int64_t start, int64_t end, int64_t mem_peak,
                      float loss, bool stats_step, double norm) {
    amp_record_step(&(amp_rec_step){.step = step,
                                    .start_ns = start,
                                    .end_ns = end,
                                    .loss = loss,
                                    .grad_norm = stats_step ? norm : NAN,
                                    .mem_peak_bytes = mem_peak});
    if (!isfinite(loss))
        amp_record_event(&(amp_rec_event){
            .step = step,
            .layer_id = -1,
            .kind = AMP_EVENT_LOSS_NONFINITE,
            .severity = AMP_SEVERITY_ERROR,
            .count = 1,
            .value = loss,
            .detail = ctx->instr->fwd_nonfinite ? "the forward pass produced non-finite values"
                                                : "the loss itself became non-finite"});
}

// The queue and the lagged step's change places.
static void swap_queue(amp_instr *in) {
    const step_queue q = in->q;
    in->q = in->lag.q;
    in->lag.q = q;
}

// The step that ends: its slots and scale records are queued to come back behind its work, its
// queue is set aside, and the next step starts on empty slots (cleared behind the copy).
static void hand_off(amp_ctx_t *ctx, int64_t start, int64_t end, int64_t mem_peak, float loss,
                     const amp_tensor_t *loss_t, bool stats_step) {
    amp_instr *in = ctx->instr;
    struct lagged *l = &in->lag;
    const int32_t n = in->q.n_entries - in->q.slot_base;
    ctx->be->download_async(ctx->bctx, l->staged, in->slots, (size_t)n * sizeof(amp_stats));
    for (int k = 0; k < in->q.n_scales; k++)
        ctx->be->download_async(ctx->bctx, l->recs[k], amp_tensor_ptr(in->scale_recs[k]),
                                sizeof l->recs[k]);
    l->loss_dtype = loss_t ? loss_t->dtype : AMP_DTYPE_COUNT;
    if (loss_t)
        ctx->be->download_async(ctx->bctx, l->loss_raw, amp_tensor_ptr(loss_t),
                                amp_dtype_size(loss_t->dtype));
    swap_queue(in);
    l->active = true;
    l->n_staged = n;
    l->step = rec_step(ctx), l->start_ns = start, l->end_ns = end, l->mem_peak = mem_peak;
    l->loss = loss;
    l->stats_step = stats_step;
    next_batch(ctx);
    clear_slots(ctx, n);
}

// Reads the step handed off last, if one waits (its copies are done by now, as a rule).
static void finish_lagged(amp_ctx_t *ctx) {
    amp_instr *in = ctx->instr;
    struct lagged *l = &in->lag;
    if (!l->active) return;
    l->active = false;
    ctx->be->download_wait(ctx->bctx);
    swap_queue(in);
    memcpy(in->q.host + in->q.slot_base, l->staged, (size_t)l->n_staged * sizeof(amp_stats));
    if (l->loss_dtype != AMP_DTYPE_COUNT) l->loss = amp_load_f32(l->loss_dtype, l->loss_raw, 0);
    slots_arrived(in);
    read_scales(ctx, l->recs);
    const double norm = process_queue(ctx);
    emit_step(ctx, l->step, l->start_ns, l->end_ns, l->mem_peak, l->loss, l->stats_step, norm);
    swap_queue(in);
}

// Ends the step with its loss: the value, or (loss_t non-NULL) the tensor's, read behind the
// step's work when the backend can copy back without waiting.
static void step_end(amp_ctx_t *ctx, float loss, const amp_tensor_t *loss_t) {
    amp_instr *in = ctx->instr;
    if (in) {
        int64_t start = in->step_start_ns, end = amp_record_now_ns();
        const int64_t mem_peak = (int64_t)ctx->mem_peak;
        bool stats_step = in->stats_step;
        if (in->lag.staged) {
            finish_lagged(ctx);
            hand_off(ctx, start, end, mem_peak, loss, loss_t, stats_step);
        } else {
            if (loss_t) loss = amp_tensor_item(loss_t);
            emit_step(ctx, rec_step(ctx), start, end, mem_peak, loss, stats_step, process(ctx));
        }
        if (in->n_held) release_held(ctx); // (a step without a backward: in no layer)
        if (numbered.session == amp_record_session() && rec_step(ctx) + 1 > numbered.next)
            numbered.next = rec_step(ctx) + 1;
        in->step_start_ns = in->last_op_ns = amp_record_now_ns();
        in->step_ops = false;
        in->stats_step = (ctx->step + 1) % in->stats_every == 0;
        if (!amp_record_enabled()) amp_instr_free(ctx); // the rest of the run as uninstrumented
    }
    ctx->step++;
}

void amp_ctx_step_end(amp_ctx_t *ctx, float loss) {
    step_end(ctx, loss, NULL);
}

void amp_ctx_step_end_loss(amp_ctx_t *ctx, const amp_tensor_t *loss) {
    AMP_ASSERT(loss->ctx == ctx && amp_tensor_numel(loss) == 1 && amp_dtype_is_float(loss->dtype),
               "(the loss of amp_ctx_step_end_loss: one floating element of this context)");
    step_end(ctx, NAN, loss);
}
