/*
 * rule_precision.c — rule `precision-placement`: where autocast's dtype decisions cost time,
 * from AMP_OPS (op, layer, policy, in/out dtypes, analytic FLOPs, time):
 *   - GEMM-class ops (autocast's lower_precision_fp list) that ran in fp32 in a process that
 *     uses autocast: an autocast-disabled region or a .float() around them, so they miss the
 *     Tensor Cores (about 12x the fp32 rate on an H200);
 *   - ops the policy upcast to fp32 (fp32 / fp32_set_opt_dtype / promote lists with an
 *     fp16/bf16 input): correct for accuracy, but each one is an extra fp32 pass over the data;
 *   - dtype casts (`to`): the price of mixing precisions (weights recast every step, fp32
 *     residuals cast down before each GEMM);
 *   - 16-bit GEMMs whose K or N (the matrices' contiguous dimensions) is not a multiple of 8,
 *     which cuBLAS runs several times slower (measured on an H200: below), with or without
 *     autocast (a model cast to fp16 has them too).
 * Time is the GPU kernel time attributed to the ops when CUDA capture recorded kernels, the
 * ops' host time otherwise. Host time on the CPU backend measures the fp16 emulation, not what a
 * GPU would spend, so without kernels the time-based findings stay notes (info). A run without
 * autocast gets nothing here (rule amp-payoff says whether AMP would pay off).
 */
#include "report.h"

#include <math.h>
#include <string.h>

#define RULE "precision-placement"
#define FP32_GEMM_WARN_SHARE 0.10 // share of the GEMM FLOPs left in fp32 that is a warning
#define UPCAST_NOTE_SHARE 0.05    // share of op time in upcast ops worth a note
#define UPCAST_WARN_SHARE 0.30
#define CAST_NOTE_SHARE 0.10 // share of op time in casts worth a note
#define CAST_WARN_SHARE 0.40
#define LIST_MAX 4
#define ODD_GEMM_NOTE_SHARE 0.02 // share of the 16-bit GEMM FLOPs with odd dimensions worth a note
#define ODD_GEMM_WARN_SHARE 0.10

// True when a dtype of the comma list is f16/bf16.
static bool any_lowp(const char *list) {
    return strstr(list, "f16") != NULL; // "f16" and "bf16"
}

static bool upcast(const report_op *o) {
    static const char *const policies[] = {"fp32", "fp32_set_opt_dtype", "fp32_append_dtype",
                                           "promote"};
    if (strcmp(o->out_dtype, "f32") != 0 || !any_lowp(o->in_dtypes)) return false;
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (strcmp(o->policy, policies[i]) == 0) return true;
    return false;
}

static bool fp32_gemm(const report_op *o) {
    return report_op_is_gemm(o->op) && strcmp(o->out_dtype, "f32") == 0 && !any_lowp(o->in_dtypes);
}

static bool cast_op(const report_op *o) {
    return report_op_is_cast(o->op);
}

// The time of an op group: its kernels when the run has them, else host time.
static double op_time(const report_model *m, const report_op *o) {
    return m->perf.attributed_ns > 0 ? (double)o->kernel_ns : (double)o->host_ns;
}

typedef struct tally {
    double time, flops;
    int64_t launches, first_step, last_step;
    const report_op *worst; // largest time
    double worst_time;
} tally;

static void tally_add(tally *t, const report_model *m, const report_op *o) {
    double time = op_time(m, o);
    t->time += time;
    t->flops += o->flops;
    t->launches += o->launches;
    if (t->first_step < 0 || o->first_step < t->first_step) t->first_step = o->first_step;
    if (o->last_step > t->last_step) t->last_step = o->last_step;
    if (!t->worst || time > t->worst_time) {
        t->worst = o;
        t->worst_time = time;
    }
}

// Of pid's ops that pick() selects and used[0..n_used) does not hold, the largest by size();
// NULL: none left.
static const report_op *largest(const report_model *m, int32_t pid, const report_op *const *used,
                                int n_used, bool (*pick)(const report_op *),
                                double (*size)(const report_model *, const report_op *)) {
    size_t end;
    const report_op *best = NULL;
    for (size_t i = report_ops_of(m, pid, &end); i < end; i++) {
        const report_op *o = &m->ops[i];
        bool taken = false;
        for (int r = 0; r < n_used; r++)
            taken |= used[r] == o;
        if (!taken && pick(o) && (!best || size(m, o) > size(m, best))) best = o;
    }
    return best;
}

// Lists the largest members (by time) of the class pick() selects, "layer op (x ms)".
static void list_members(const report_model *m, int32_t pid, bool (*pick)(const report_op *),
                         double total, char *buf, size_t n) {
    const report_op *used[LIST_MAX] = {0};
    buf[0] = 0;
    for (int round = 0; round < LIST_MAX; round++) {
        const report_op *best = largest(m, pid, used, round, pick, op_time);
        if (!best) break;
        used[round] = best;
        const char *layer = report_layer_name(m, best->pid, best->layer_id);
        report_appendf(buf, n, "%s%s %s %s->%s %.3g ms (%.0f%%)", round ? "; " : "",
                       layer ? layer : "(top level)", best->op, best->in_dtypes, best->out_dtype,
                       op_time(m, best) / 1e6, total > 0 ? 100 * op_time(m, best) / total : 0.0);
    }
}

static void where_of(report_finding *f, const report_model *m, const tally *t) {
    report_finding_where(f, report_layer_name(m, t->worst->pid, t->worst->layer_id), t->worst->op,
                         t->worst->phase[0] ? t->worst->phase : NULL);
    f->pid = t->worst->pid; // (run_pid: one process's ops)
    f->of_many = true;
    f->first_step = t->first_step;
    f->last_step = t->last_step;
}

// A time share's severity: a warning only when measured on the GPU.
static amp_severity by_share(const report_model *m, double share, double warn) {
    return share >= warn && m->perf.attributed_ns > 0 ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO;
}

// One process's ops, as the three findings below judge them.
typedef struct precision_ctx {
    const report_model *m;
    int32_t pid;
    report_findings *out;
    const char *basis; // what time is measured in
    const char *dt;    // the run's 16-bit dtype's name
    double total;      // the ops' time
    double gemm_flops;
} precision_ctx;

// GEMM-class ops that ran in fp32 under autocast (no Tensor Cores).
static void fp32_gemm_finding(const precision_ctx *c, const tally *fp32) {
    const report_model *m = c->m;
    char list[600], cut[84]; // cut: a layer's name in a title
    if (!(fp32->worst && fp32->flops > 0)) return;
    double share = c->gemm_flops > 0 ? fp32->flops / c->gemm_flops : 0;
    report_finding *f = report_finding_add(
        c->out, RULE, share >= FP32_GEMM_WARN_SHARE ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    where_of(f, m, fp32);
    snprintf(f->title, sizeof f->title,
             "GEMMs in fp32 under autocast: %s %s and others hold %.0f%% of the GEMM FLOPs "
             "and run without Tensor Cores",
             report_layer_words(cut, sizeof cut, f->layer), f->op, 100 * share);
    list_members(m, c->pid, fp32_gemm, c->total, list, sizeof list);
    snprintf(f->detail, sizeof f->detail,
             "fp32 GEMMs (%s): %s. They are %.3g of %.3g GEMM FLOPs and %.0f%% of the %s.",
             c->basis, list, fp32->flops, c->gemm_flops,
             c->total > 0 ? 100 * fp32->time / c->total : 0.0, c->basis);
    snprintf(f->advice, sizeof f->advice,
             "Let autocast run them in %s: remove the autocast-disabled region "
             "(torch.autocast(..., enabled=False); amp_autocast_begin(ctx, false, ...) here) or "
             "the .float() casts around them. If they were kept "
             "in fp32 for range (attention logits beyond 65504), scale the inputs instead "
             "(1/sqrt(d_head)) or autocast to bf16, which has fp32's range and the same "
             "Tensor Core rate.",
             c->dt);
    report_finding_evidence(f, "fp32_gemm_flops", fp32->flops);
    report_finding_evidence(f, "gemm_flops", c->gemm_flops);
    report_finding_evidence(f, "flops_share", share);
    report_finding_evidence(f, "time_ms", fp32->time / 1e6);
    report_finding_evidence(f, "time_share", c->total > 0 ? fp32->time / c->total : NAN);
    report_finding_evidence(f, "launches", (double)fp32->launches);
}

// A finding of the ops tallied in t when they take at least `note` of the time (a warning from
// `warn` on, when measured on the GPU), with their time as its first evidence, else NULL;
// *share: their share of the time.
static report_finding *share_finding(const precision_ctx *c, const tally *t, double note,
                                     double warn, double *share) {
    *share = c->total > 0 ? t->time / c->total : 0;
    if (!(t->worst && *share >= note)) return NULL;
    report_finding *f = report_finding_add(c->out, RULE, by_share(c->m, *share, warn));
    where_of(f, c->m, t);
    report_finding_evidence(f, "time_ms", t->time / 1e6);
    report_finding_evidence(f, "time_share", *share);
    return f;
}

// Ops the autocast policy upcast to fp32, when they take a share of the time.
static void upcast_finding(const precision_ctx *c, const tally *up) {
    const report_model *m = c->m;
    char list[600], cut[84]; // cut: a layer's name in a title
    double up_share;
    report_finding *f = share_finding(c, up, UPCAST_NOTE_SHARE, UPCAST_WARN_SHARE, &up_share);
    if (!f) return;
    snprintf(f->title, sizeof f->title,
             "ops upcast to fp32 by the autocast policy take %.0f%% of the %s (%s %s the "
             "largest)",
             100 * up_share, c->basis, report_layer_words(cut, sizeof cut, f->layer), f->op);
    list_members(m, c->pid, upcast, c->total, list, sizeof list);
    snprintf(f->detail, sizeof f->detail,
             "%s inputs, fp32 outputs (policy fp32/fp32_set_opt_dtype/promote): %s.", c->dt, list);
    snprintf(f->advice, sizeof f->advice,
             "Keep the policy (these ops lose accuracy in %s) but make them cheaper: fused "
             "kernels that read %s and accumulate in fp32 internally (log_softmax + nll_loss "
             "as one cross_entropy, scaled_dot_product_attention instead of an explicit "
             "softmax, a fused LayerNorm), or fewer of them per step.",
             c->dt, c->dt);
    report_finding_evidence(f, "launches", (double)up->launches);
}

// The dtype casts, when they take a share of the time.
static void cast_finding(const precision_ctx *c, const tally *cast) {
    const report_model *m = c->m;
    char list[600], cut[84]; // cut: a layer's name in a title
    double cast_share;
    report_finding *f = share_finding(c, cast, CAST_NOTE_SHARE, CAST_WARN_SHARE, &cast_share);
    if (!f) return;
    snprintf(f->title, sizeof f->title,
             "dtype casts take %.0f%% of the %s (%lld cast%s; %s the largest)", 100 * cast_share,
             c->basis, (long long)cast->launches, cast->launches == 1 ? "" : "s",
             report_layer_words(cut, sizeof cut, f->layer));
    list_members(m, c->pid, cast_op, c->total, list, sizeof list);
    snprintf(f->detail, sizeof f->detail, "Largest casts: %s.", list);
    snprintf(f->advice, sizeof f->advice,
             "Cast less: keep activations in %s between layers instead of an fp32 residual "
             "stream cast down before every GEMM, let autocast's weight cache cast each "
             "weight once per step (one autocast region around the whole forward, not one "
             "per layer), or keep fp32 master weights with %s copies updated by the "
             "optimizer. On a GPU each cast is a memory-bound kernel.",
             c->dt, c->dt);
    report_finding_evidence(f, "casts", (double)cast->launches);
}

static void run_pid(const report_model *m, int32_t pid, report_findings *out) {
    precision_ctx c = {.m = m,
                       .pid = pid,
                       .out = out,
                       .basis =
                           m->perf.attributed_ns > 0 ? "GPU kernel time" : "host time of the ops"};
    tally fp32 = {.first_step = -1, .last_step = -1}, up = fp32, cast = fp32;
    const char *lowp_dtype = NULL;
    size_t end;
    for (size_t i = report_ops_of(m, pid, &end); i < end; i++) {
        const report_op *o = &m->ops[i];
        c.total += op_time(m, o);
        if (report_op_is_gemm(o->op)) c.gemm_flops += o->flops;
        if (!lowp_dtype && report_dtype_lowp(o->out_dtype)) lowp_dtype = o->out_dtype;
        if (fp32_gemm(o)) tally_add(&fp32, m, o);
        if (upcast(o)) tally_add(&up, m, o);
        if (report_op_is_cast(o->op)) tally_add(&cast, m, o);
    }
    c.dt = lowp_dtype && strcmp(lowp_dtype, "bf16") == 0 ? "bf16" : "fp16";
    fp32_gemm_finding(&c, &fp32);
    upcast_finding(&c, &up);
    cast_finding(&c, &cast);
}

static bool odd_gemm(const report_op *o) {
    return o->odd_flops > 0;
}

static double odd_flops(const report_model *m, const report_op *o) {
    (void)m;
    return o->odd_flops;
}

// The dimension d rounded up to the padding advised: a multiple of 64 from 1024 on (a
// vocabulary: 50257 -> 50304), else of 8.
static int64_t padded(int64_t d) {
    const int64_t to = d >= 1024 ? 64 : 8;
    return (d + to - 1) / to * to;
}

// 16-bit GEMMs of pid whose K or N is not a multiple of 8 (report_op.odd_flops).
static void odd_gemms(const report_model *m, int32_t pid, report_findings *out) {
    double flops16 = 0, odd = 0, odd_ns = 0;
    const report_op *worst = NULL;
    size_t end;
    const size_t begin = report_ops_of(m, pid, &end);
    for (size_t i = begin; i < end; i++) {
        const report_op *o = &m->ops[i];
        if (!report_op_is_gemm(o->op) || !any_lowp(o->in_dtypes) ||
            (o->phase[0] && strcmp(o->phase, "fwd") != 0))
            continue;
        flops16 += o->flops;
        if (o->odd_flops <= 0) continue;
        odd += o->odd_flops;
        odd_ns += o->flops > 0 ? (double)o->kernel_ns * o->odd_flops / o->flops : 0;
        if (!worst || o->odd_flops > worst->odd_flops) worst = o;
    }
    const double share = flops16 > 0 ? odd / flops16 : 0;
    if (!worst || share < ODD_GEMM_NOTE_SHARE) return;
    report_finding *f = report_finding_add(
        out, RULE, share >= ODD_GEMM_WARN_SHARE ? AMP_SEVERITY_WARNING : AMP_SEVERITY_INFO);
    report_finding_where(f, report_layer_name(m, pid, worst->layer_id), worst->op, "fwd");
    f->pid = pid;
    f->of_many = true;
    f->first_step = worst->first_step;
    f->last_step = worst->last_step;
    const bool odd_k = worst->odd_k % 8 != 0;
    const int64_t dim = odd_k ? worst->odd_k : worst->odd_n;
    char cut[84], list[600] = "";
    snprintf(f->title, sizeof f->title,
             "16-bit GEMMs with a dimension not a multiple of 8 hold %.0f%% of their FLOPs "
             "(%s %s: %s=%lld), which cuBLAS runs several times slower",
             100 * share, report_layer_words(cut, sizeof cut, f->layer), f->op, odd_k ? "K" : "N",
             (long long)dim);
    // the largest few, by their odd FLOPs
    const report_op *used[LIST_MAX] = {0};
    for (int round = 0; round < LIST_MAX; round++) {
        const report_op *best = largest(m, pid, used, round, odd_gemm, odd_flops);
        if (!best) break;
        used[round] = best;
        report_appendf(
            list, sizeof list, "%s%s %s K=%lld N=%lld (%.0f%%)", round ? "; " : "",
            report_layer_words(cut, sizeof cut, report_layer_name(m, pid, best->layer_id)),
            best->op, (long long)best->odd_k, (long long)best->odd_n,
            100 * best->odd_flops / flops16);
    }
    snprintf(f->detail, sizeof f->detail,
             "%s. cuBLAS's fastest fp16/bf16 Tensor Core kernels need the matrices' "
             "contiguous dimensions, K (the inner one) and N (the output's columns), in "
             "multiples of 8 elements (16 bytes); M (the rows: batch x sequence) does not "
             "matter. On an H200 (torch 2.11, 2026-12-04) a linear's forward and backward "
             "at M=8192, K=768 took 15.6 ms at N=50257 against 3.1 ms at N=50304, and at "
             "K=4096 6.6 ms at N=4095 against 1.2 ms at N=4096.",
             list);
    if (m->perf.attributed_ns > 0)
        report_appendf(f->detail, sizeof f->detail,
                       " Their forward kernels took %.3g ms, %.0f%% of the GPU time of the ops "
                       "recorded.",
                       odd_ns / 1e6, 100 * odd_ns / (double)m->perf.attributed_ns);
    snprintf(f->advice, sizeof f->advice,
             "Pad the dimension up to a multiple of 8 (64 for a vocabulary): %s %lld -> %lld "
             "here. Vocabulary and class counts (logits never trained as labels cost nothing), "
             "hidden, head and feed-forward sizes; an input's features padded with zeros.",
             odd_k ? "K" : "N", (long long)dim, (long long)padded(dim));
    report_finding_evidence(f, "odd_gemm_flops", odd);
    report_finding_evidence(f, "gemm16_flops", flops16);
    report_finding_evidence(f, "flops_share", share);
    report_finding_evidence(f, "k", (double)worst->odd_k);
    report_finding_evidence(f, "n", (double)worst->odd_n);
    if (m->perf.attributed_ns > 0) report_finding_evidence(f, "time_ms", odd_ns / 1e6);
}

void rule_precision_run(const report_model *m, report_findings *out) {
    for (size_t i = 0; i < m->n_ops; i++) {
        int32_t pid = m->ops[i].pid;
        if (i > 0 && m->ops[i - 1].pid == pid) continue; // ops are sorted by pid
        if (report_pid_autocast(m, pid)) run_pid(m, pid, out);
        odd_gemms(m, pid, out);
    }
}
