/*
 * conform-e2e.c — e2e_<name>.manifest: trains PyTorch's reference MLP with libampcore's public
 * API and compares the trajectory with what PyTorch recorded.
 *
 * Model and step, as the reference README describes them: Linear(in, hidden) -> act ->
 * Linear(hidden, out) under autocast, logits upcast to fp32, loss = cross_entropy (mean); each
 * step zero_grad, forward, scale(loss).backward(), unscale_, step, update. Files beside the
 * manifest (prefix e2e_<name>_): W1 b1 W2 b2 (initial fp32 weights, [out, in] row-major), X
 * (steps x batch x in fp32), Y (steps x batch int32); the references, each optional but not
 * all (what is missing is said in a NOTE; none at all fails): _trace.txt (`step loss
 * scale_before found_inf scale_after`) and _final_{W1,b1,W2,b2}.f32.
 *
 * found_inf and the scales must match exactly, each loss within 1e-3 relative, each final
 * weight tensor within 1e-2 relative in the 2-norm (single elements legitimately differ more).
 *
 * Whether PyTorch used a GradScaler: bf16 runs often go without one (bf16 has fp32's range),
 * and the manifest has no key for it. A trace answers: a disabled torch GradScaler reports a
 * scale of 1.0, so a first scale_before of 1.0 with another init_scale means none. Without a
 * trace, fp16 uses one and bf16 only when the manifest gives a scaler key.
 */
#include "amp-impl.h" // amp_xcalloc
#include "conform.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOSS_RTOL 1e-3
#define WEIGHT_RTOL 1e-2

enum { W1, B1, W2, B2, NPARAM };
static const char *const param_names[NPARAM] = {"W1", "b1", "W2", "b2"};

struct trace_row {
    double loss, found_inf;
    float scale_before, scale_after;
};

struct e2e_case {
    const char *file; // the manifest
    char label[128];  // case name in verdicts
    char prefix[300]; // e2e_<name>
    struct conform_manifest m;
    float *init[NPARAM], *want[NPARAM]; // want[i] NULL when that final is absent
    float *x;
    int32_t *y;
    struct trace_row *trace; // NULL when absent
    bool use_scaler;
};

static int64_t param_numel(const struct conform_manifest *m, int i) {
    switch (i) {
    case W1:
        return m->hidden * m->in;
    case B1:
        return m->hidden;
    case W2:
        return m->out * m->hidden;
    default:
        return m->out;
    }
}

// ---------------------------------------------------------------------------------------------
// Training (run under conform_guarded)

struct e2e_job {
    const struct e2e_case *c;
    amp_device device;
    // per step
    float *loss, *scale_before, *found_inf, *scale_after;
    float *final[NPARAM];
    // the first runtime call that returned an error, and its message
    amp_status status;
    char failed_call[48];
    char message[512];
};

static bool ok(struct e2e_job *j, amp_status st, const char *call) {
    if (st == AMP_OK) return true;
    j->status = st;
    snprintf(j->failed_call, sizeof j->failed_call, "%s", call);
    snprintf(j->message, sizeof j->message, "%s", amp_last_error());
    return false;
}

static amp_tensor_t *activation(amp_ctx_t *ctx, conform_act act, amp_tensor_t *h) {
    switch (act) {
    case CONFORM_ACT_GELU:
        return amp_gelu(ctx, h, false);
    case CONFORM_ACT_GELU_TANH:
        return amp_gelu(ctx, h, true);
    default:
        return amp_relu(ctx, h);
    }
}

static void train(struct e2e_job *j, amp_ctx_t *ctx, amp_optim_t *opt, amp_scaler_t *sc,
                  amp_tensor_t *const *p) {
    const struct conform_manifest *m = &j->c->m;
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){m->batch, m->in});
    amp_tensor_t *y = amp_tensor_new(ctx, AMP_DTYPE_I32, 1, (int64_t[]){m->batch});
    for (int64_t s = 0; s < m->steps; s++) {
        amp_tensor_write(x, j->c->x + s * m->batch * m->in);
        amp_tensor_write(y, j->c->y + s * m->batch);
        amp_optim_zero_grad(opt);
        amp_autocast_begin(ctx, true, m->precision, true);
        amp_tensor_t *h = activation(ctx, m->act, amp_linear(ctx, x, p[W1], p[B1])); // (B, hidden)
        amp_tensor_t *logits = amp_linear(ctx, h, p[W2], p[B2]);                     // (B, out)
        amp_autocast_end(ctx);
        amp_tensor_t *loss = amp_cross_entropy(ctx, amp_to(ctx, logits, AMP_DTYPE_F32), y);
        j->loss[s] = amp_tensor_item(loss);
        j->scale_before[s] = amp_scaler_get_scale(sc);
        amp_backward(ctx, amp_scaler_scale(sc, ctx, loss));
        bool skipped = false;
        if (!ok(j, amp_scaler_unscale(sc, opt), "amp_scaler_unscale") ||
            !ok(j, amp_scaler_step(sc, opt, &skipped), "amp_scaler_step") ||
            !ok(j, amp_scaler_update(sc), "amp_scaler_update"))
            break;
        j->found_inf[s] = j->c->use_scaler ? amp_scaler_last_found_inf(sc) : (float)skipped;
        j->scale_after[s] = amp_scaler_get_scale(sc);
        amp_ctx_reset(ctx);
    }
    amp_tensor_free(x);
    amp_tensor_free(y);
}

static void run_e2e(void *arg) {
    struct e2e_job *j = arg;
    const struct conform_manifest *m = &j->c->m;
    amp_ctx_t *ctx = NULL;
    amp_optim_t *opt = NULL;
    amp_scaler_t *sc = NULL;
    if (!ok(j, amp_ctx_new(j->device, 0, &ctx), "amp_ctx_new")) return;
    amp_tensor_t *p[NPARAM];
    const int64_t shapes[NPARAM][2] = {
        {m->hidden, m->in}, {m->hidden, 0}, {m->out, m->hidden}, {m->out, 0}};
    for (int i = 0; i < NPARAM; i++) {
        p[i] = amp_tensor_from(ctx, AMP_DTYPE_F32, shapes[i][1] ? 2 : 1, shapes[i], j->c->init[i]);
        amp_tensor_set_name(p[i], param_names[i]);
        amp_tensor_set_requires_grad(p[i], true);
    }
    amp_scaler_params sp = m->scaler;
    sp.enabled = j->c->use_scaler;
    if (ok(j, amp_optim_new(ctx, &m->optim, p, NPARAM, &opt), "amp_optim_new") &&
        ok(j, amp_scaler_new(&sp, &sc), "amp_scaler_new")) {
        train(j, ctx, opt, sc, p);
        for (int i = 0; i < NPARAM; i++)
            amp_tensor_read_f32(p[i], j->final[i]);
    }
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}

// ---------------------------------------------------------------------------------------------
// Comparison

// ||got - want|| / ||want|| (0 when both are zero, inf when only want is zero)
static double rel_norm(const float *got, const float *want, int64_t n) {
    double d2 = 0, w2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        d2 += d * d;
        w2 += (double)want[i] * want[i];
    }
    if (w2 == 0) return d2 == 0 ? 0 : INFINITY;
    return sqrt(d2 / w2);
}

static double rel_err(double got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (got == want) return 0;
    return fabs(got - want) / fabs(want);
}

// The first step where found_inf, the scales or the loss differ: into msg, true when none.
static bool compare_trace(const struct e2e_case *c, const struct e2e_job *j, char *msg, size_t n,
                          double *max_loss_rel) {
    *max_loss_rel = 0;
    for (int64_t s = 0; s < c->m.steps; s++) {
        const struct trace_row *t = &c->trace[s];
        double rel = rel_err(j->loss[s], t->loss);
        if ((double)j->found_inf[s] != t->found_inf)
            snprintf(msg, n, "step %" PRId64 ": found_inf %g, expected %g", s, j->found_inf[s],
                     t->found_inf);
        else if (conform_bits(j->scale_before[s]) != conform_bits(t->scale_before))
            snprintf(msg, n, "step %" PRId64 ": scale_before %.9g, expected %.9g", s,
                     j->scale_before[s], t->scale_before);
        else if (conform_bits(j->scale_after[s]) != conform_bits(t->scale_after))
            snprintf(msg, n, "step %" PRId64 ": scale_after %.9g, expected %.9g", s,
                     j->scale_after[s], t->scale_after);
        else if (!(rel <= LOSS_RTOL))
            snprintf(msg, n,
                     "step %" PRId64 ": loss %.9g, expected %.9g (relative error %.2g > %g)", s,
                     j->loss[s], t->loss, rel, LOSS_RTOL);
        else {
            if (rel > *max_loss_rel) *max_loss_rel = rel;
            continue;
        }
        return false;
    }
    return true;
}

static void compare(struct conform_run *r, const struct e2e_case *c, const struct e2e_job *j) {
    char mismatch[256] = "", stats[256] = "";
    size_t used = 0;
    double max_loss_rel;
    if (c->trace && !compare_trace(c, j, mismatch, sizeof mismatch, &max_loss_rel)) {
        conform_fail(r, c->file, c->label, "%s", mismatch);
        return;
    }
    if (c->trace)
        used +=
            (size_t)snprintf(stats, sizeof stats, "; loss max relative error %.2g", max_loss_rel);
    for (int i = 0; i < NPARAM; i++) {
        if (!c->want[i]) continue;
        double rel = rel_norm(j->final[i], c->want[i], param_numel(&c->m, i));
        if (!(rel <= WEIGHT_RTOL)) {
            conform_fail(r, c->file, c->label,
                         "final %s: ||ours - ref|| / ||ref|| = %.3g, expected <= %g",
                         param_names[i], rel, WEIGHT_RTOL);
            return;
        }
        used = amp_appendf(stats, sizeof stats, used, "; %s %.2g", param_names[i], rel);
    }
    conform_pass(r, c->file, c->label, "(%" PRId64 " steps%s)", c->m.steps, stats);
}

// ---------------------------------------------------------------------------------------------
// Loading the case

// The trace (one row per step, steps numbered consecutively); false (error reported) when
// malformed.
static bool load_trace(struct conform_run *r, struct e2e_case *c, const char *name) {
    struct conform_text t;
    if (!conform_text_open(&t, r, name)) return false;
    c->trace = amp_xcalloc((size_t)c->m.steps, sizeof *c->trace);
    int64_t rows = 0;
    long first_step = 0;
    bool good = true;
    while (good && conform_text_next_record(&t)) {
        long step;
        double sb, sa;
        struct trace_row row;
        if (t.ntok != 5 || !conform_parse_long(t.tok[0], &step) ||
            !conform_parse_double(t.tok[1], &row.loss) || !conform_parse_double(t.tok[2], &sb) ||
            !conform_parse_double(t.tok[3], &row.found_inf) ||
            !conform_parse_double(t.tok[4], &sa)) {
            conform_error(r, name, t.lineno,
                          "expected 'step loss scale_before found_inf scale_after'");
            good = false;
            continue;
        }
        if (rows == 0) first_step = step; // numbering starts where the file does (0 or 1)
        if (step != first_step + rows) {
            conform_error(r, name, t.lineno, "step %ld, expected %ld", step,
                          first_step + (long)rows);
            good = false;
        } else if (rows == c->m.steps) {
            conform_error(r, name, t.lineno, "more steps than the manifest's %" PRId64, c->m.steps);
            good = false;
        } else {
            row.scale_before = (float)sb;
            row.scale_after = (float)sa;
            c->trace[rows++] = row;
        }
    }
    if (good && rows != c->m.steps) {
        conform_error(r, name, t.lineno, "%" PRId64 " steps, the manifest says %" PRId64, rows,
                      c->m.steps);
        good = false;
    }
    conform_text_close(&t);
    return good;
}

// Loads <prefix>_<part><ext>, of exactly count elements of 4 bytes; NULL (error reported) on
// failure.
static void *load_array(struct conform_run *r, const struct e2e_case *c, const char *part,
                        const char *ext, int64_t count, const char *what) {
    char name[400], desc[160];
    snprintf(name, sizeof name, "%s_%s%s", c->prefix, part, ext);
    snprintf(desc, sizeof desc, "%s: %" PRId64 " values of 4 bytes", what, count);
    return conform_load(r, name, (size_t)count * 4, desc, NULL);
}

// Loads what the case needs and the references it has; false (error reported) when malformed.
static bool load_case(struct conform_run *r, struct e2e_case *c) {
    const struct conform_manifest *m = &c->m;
    char name[400], what[64];
    for (int i = 0; i < NPARAM; i++) {
        snprintf(what, sizeof what, "initial %s", param_names[i]);
        c->init[i] = load_array(r, c, param_names[i], ".f32", param_numel(m, i), what);
        if (!c->init[i]) return false;
    }
    c->x = load_array(r, c, "X", ".f32", m->steps * m->batch * m->in, "steps x batch x in");
    c->y = load_array(r, c, "Y", ".i32", m->steps * m->batch, "steps x batch labels");
    if (!c->x || !c->y) return false;
    for (int64_t i = 0; i < m->steps * m->batch; i++) {
        if (c->y[i] < 0 || c->y[i] >= m->out) {
            snprintf(name, sizeof name, "%s_Y.i32", c->prefix);
            conform_error(r, name, 0,
                          "label %d at index %" PRId64 " is not a class of out=%" PRId64, c->y[i],
                          i, m->out);
            return false;
        }
    }
    snprintf(name, sizeof name, "%s_trace.txt", c->prefix);
    if (conform_has_file(r, name) && !load_trace(r, c, name)) return false;
    for (int i = 0; i < NPARAM; i++) {
        char part[16];
        snprintf(part, sizeof part, "final_%s", param_names[i]);
        snprintf(name, sizeof name, "%s_%s.f32", c->prefix, part);
        snprintf(what, sizeof what, "final %s", param_names[i]);
        if (!conform_has_file(r, name)) continue;
        c->want[i] = load_array(r, c, part, ".f32", param_numel(m, i), what);
        if (!c->want[i]) return false;
    }
    return true;
}

// The data files' prefix: the manifest's own stem, or e2e_<name> when only that one exists.
static void find_prefix(const struct conform_run *r, struct e2e_case *c) {
    size_t stem = strlen(c->file) - strlen(".manifest");
    snprintf(c->prefix, sizeof c->prefix, "%.*s", (int)stem, c->file);
    char probe[400];
    snprintf(probe, sizeof probe, "%s_W1.f32", c->prefix);
    if (conform_has_file(r, probe) || !c->m.name[0]) return;
    snprintf(probe, sizeof probe, "e2e_%s_W1.f32", c->m.name);
    if (conform_has_file(r, probe)) snprintf(c->prefix, sizeof c->prefix, "e2e_%s", c->m.name);
}

// Whether PyTorch trained with a GradScaler (see the top of the file), and why we think so.
static bool uses_scaler(const struct e2e_case *c, const char **why) {
    const struct conform_manifest *m = &c->m;
    if (c->trace) {
        *why = "as the trace's scale shows";
        return !(c->trace[0].scale_before == 1.0f && m->scaler.init_scale != 1.0f);
    }
    *why = m->precision == AMP_DTYPE_F16 ? "fp16"
           : m->scaler_keys              ? "the manifest sets it"
                                         : "no scaler key and no trace";
    return m->precision == AMP_DTYPE_F16 || m->scaler_keys;
}

static void run_case(struct conform_run *r, struct e2e_case *c) {
    const struct conform_manifest *m = &c->m;
    bool any_final = false;
    for (int i = 0; i < NPARAM; i++)
        any_final |= c->want[i] != NULL;
    if (!c->trace && !any_final) { // the reference outputs are missing, not a feature
        conform_fail(r, c->file, c->label,
                     "no %s_trace.txt and no %s_final_*.f32: nothing to compare", c->prefix,
                     c->prefix);
        return;
    }
    const char *why;
    c->use_scaler = uses_scaler(c, &why);
    if (m->precision == AMP_DTYPE_BF16 || !c->use_scaler)
        conform_note(r, c->file, c->label, "%s %s a GradScaler (%s)", amp_dtype_name(m->precision),
                     c->use_scaler ? "with" : "without", why);
    if (!c->trace)
        conform_note(r, c->file, c->label,
                     "no %s_trace.txt: found_inf, scale and loss per step not checked", c->prefix);
    if (!any_final)
        conform_note(r, c->file, c->label, "no %s_final_*.f32: final weights not checked",
                     c->prefix);
    for (int i = 0; any_final && i < NPARAM; i++)
        if (!c->want[i])
            conform_note(r, c->file, c->label, "no %s_final_%s.f32: final %s not checked",
                         c->prefix, param_names[i], param_names[i]);

    size_t steps = (size_t)m->steps;
    struct e2e_job j = {.c = c, .device = r->device};
    float *buf = amp_xcalloc(4 * steps, sizeof *buf);
    j.loss = buf, j.scale_before = buf + steps, j.found_inf = buf + 2 * steps;
    j.scale_after = buf + 3 * steps;
    for (int i = 0; i < NPARAM; i++)
        j.final[i] = amp_xcalloc((size_t)param_numel(m, i), sizeof(float));
    char msg[1024];
    if (!conform_guarded(run_e2e, &j, msg, sizeof msg))
        conform_fail(r, c->file, c->label, "libampcore aborted: %s", msg);
    else if (j.status != AMP_OK)
        conform_fail(r, c->file, c->label, "%s: %s: %s", j.failed_call, amp_status_name(j.status),
                     j.message);
    else
        compare(r, c, &j);
    free(buf);
    for (int i = 0; i < NPARAM; i++)
        free(j.final[i]);
}

void conform_e2e_file(struct conform_run *r, const char *name) {
    struct e2e_case c = {.file = name};
    if (!conform_manifest_parse(r, name, &c.m)) return;
    find_prefix(r, &c);
    snprintf(c.label, sizeof c.label, "%.127s", c.m.name[0] ? c.m.name : c.prefix);
    if (c.m.unsupported[0])
        conform_unsupported(r, name, c.label, "%s", c.m.unsupported);
    else if (load_case(r, &c))
        run_case(r, &c);
    for (int i = 0; i < NPARAM; i++) {
        free(c.init[i]);
        free(c.want[i]);
    }
    free(c.x);
    free(c.y);
    free(c.trace);
}
