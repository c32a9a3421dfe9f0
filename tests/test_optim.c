/*
 * test_optim.c — the `optim` suite: SGD (momentum, dampening, nesterov, weight decay), Adam (L2)
 * and AdamW (decoupled) against hand-computed values and a double-precision transcription of
 * torch.optim's single-tensor formulas, over 3 steps with changing gradients; gradients kept in
 * 16 bits; per-parameter step counts and state tensors; torch.optim's argument checks and
 * messages; the next autocast region's copies of the parameters, written by the step.
 */
#include "tests.h"

#include "amp-impl.h"

#include <signal.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Helpers (the tensor fixtures are in tensors.c)

#define N 4
#define STEPS 3

// torch.optim's single-tensor step, in double (params are kept in f32 between steps, as ours).
static void ref_step(const amp_optim_params *o, int64_t step, double *p, double *m, double *v,
                     const double *grad) {
    for (int i = 0; i < N; i++) {
        double g = grad[i];
        if (o->kind == AMP_OPTIM_SGD) {
            if (o->weight_decay != 0) g += o->weight_decay * p[i];
            if (o->momentum != 0) {
                m[i] = step == 1 ? g : o->momentum * m[i] + (1 - o->dampening) * g;
                g = o->nesterov ? g + o->momentum * m[i] : m[i];
            }
            p[i] = (float)(p[i] - o->lr * g);
            continue;
        }
        if (o->kind == AMP_OPTIM_ADAMW)
            p[i] *= 1 - (double)o->lr * o->weight_decay;
        else if (o->weight_decay != 0)
            g += o->weight_decay * p[i];
        m[i] = o->beta1 * m[i] + (1 - o->beta1) * g;
        v[i] = o->beta2 * v[i] + (1 - o->beta2) * g * g;
        double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
        p[i] = (float)(p[i] - o->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + o->eps));
    }
}

static const float p0[N] = {1.0f, -2.0f, 0.5f, 3.0f};
static const float grads[STEPS][N] = {
    {0.5f, -1.0f, 0.25f, 2.0f}, {0.1f, 0.3f, -0.7f, 1.5f}, {-0.4f, -0.2f, 0.9f, 0.05f}};

// Three steps of our optimizer and the reference; parameters and state must agree.
static void check_against_ref(const amp_optim_params *o) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, N, p0);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, o, &p, 1, &opt), AMP_OK);
    double rp[N], rm[N] = {0}, rv[N] = {0}, rg[N];
    for (int i = 0; i < N; i++)
        rp[i] = p0[i];
    for (int s = 0; s < STEPS; s++) {
        test_set_grad_f32(ctx, p, grads[s]);
        for (int i = 0; i < N; i++)
            rg[i] = grads[s][i];
        amp_optim_step(opt);
        ref_step(o, s + 1, rp, rm, rv, rg);
        float got[N];
        amp_tensor_read_f32(p, got);
        for (int i = 0; i < N; i++)
            ck_assert_close(got[i], rp[i], 1e-6, 2e-6);
    }
    ck_assert_int_eq(amp_optim_steps(opt), STEPS);
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), STEPS);
    amp_tensor_t *m = amp_optim_state(opt, 0, 0), *v = amp_optim_state(opt, 0, 1);
    float got[N];
    if (o->kind != AMP_OPTIM_SGD || o->momentum != 0) {
        ck_assert_ptr_nonnull(m);
        amp_tensor_read_f32(m, got);
        for (int i = 0; i < N; i++)
            ck_assert_close(got[i], rm[i], 1e-7, 2e-6);
    } else {
        ck_assert_ptr_null(m);
    }
    if (o->kind != AMP_OPTIM_SGD) {
        ck_assert_ptr_nonnull(v);
        amp_tensor_read_f32(v, got);
        for (int i = 0; i < N; i++)
            ck_assert_close(got[i], rv[i], 1e-9, 2e-6);
    } else {
        ck_assert_ptr_null(v);
    }
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}

// Steps a 1-element parameter with a constant gradient; returns the value after each step.
static void constant_grad_steps(const amp_optim_params *o, float w0, float g, float *out, int n) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, &w0);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, o, &p, 1, &opt), AMP_OK);
    for (int s = 0; s < n; s++) {
        test_set_grad_f32(ctx, p, &g);
        amp_optim_step(opt);
        out[s] = amp_tensor_item(p);
    }
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}

// A parameter that reaches the graph through a cast keeps the cast's 16-bit gradient (dt): the
// step reads it as it is and moves the parameter and its state bit for bit as the widened f32
// gradient would, in every optimizer.
static void check_narrow_gradient(const amp_optim_params *o, amp_dtype dt) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *pn = test_param_f32(ctx, N, p0), *pw = test_param_f32(ctx, N, p0);
    amp_optim_t *on, *ow;
    ck_assert_int_eq(amp_optim_new(ctx, o, &pn, 1, &on), AMP_OK);
    ck_assert_int_eq(amp_optim_new(ctx, o, &pw, 1, &ow), AMP_OK);
    for (int s = 0; s < STEPS; s++) {
        amp_tensor_t *c = amp_tensor_from_f32(ctx, dt, 1, (int64_t[]){N}, grads[s]);
        amp_backward(ctx, amp_sum(ctx, amp_mul(ctx, amp_to(ctx, pn, dt), c))); // pn.grad = c
        ck_assert_int_eq(pn->grad->dtype, dt);
        float g[N];
        amp_tensor_read_f32(c, g);
        test_set_grad_f32(ctx, pw, g);
        amp_optim_step(on);
        amp_optim_step(ow);
        for (int k = -1; k < 2; k++) { // the parameters, then their state
            const amp_tensor_t *a = k < 0 ? pn : amp_optim_state(on, 0, k),
                               *b = k < 0 ? pw : amp_optim_state(ow, 0, k);
            if (!a) continue;
            float x[N], y[N];
            amp_tensor_read_f32(a, x);
            amp_tensor_read_f32(b, y);
            ck_assert_mem_eq(x, y, sizeof x);
        }
        amp_optim_zero_grad(on);
        amp_optim_zero_grad(ow);
        amp_tensor_free(c);
        amp_ctx_reset(ctx);
    }
    amp_optim_free(on);
    amp_optim_free(ow);
    amp_ctx_free(ctx);
}

START_TEST(test_narrow_gradients) {
    amp_optim_params sgd = amp_optim_defaults(AMP_OPTIM_SGD);
    sgd.lr = 0.1f;
    sgd.momentum = 0.9f;
    sgd.nesterov = true;
    sgd.weight_decay = 0.01f;
    amp_optim_params adam = amp_optim_defaults(AMP_OPTIM_ADAM);
    adam.weight_decay = 0.1f;
    const amp_optim_params adamw = amp_optim_defaults(AMP_OPTIM_ADAMW);
    const amp_dtype dts[2] = {AMP_DTYPE_F16, AMP_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        check_narrow_gradient(&sgd, dts[d]);
        check_narrow_gradient(&adam, dts[d]);
        check_narrow_gradient(&adamw, dts[d]);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// The next autocast region's copy of a parameter, written by the optimizer step

// One parameter trained in autocast regions, through a GradScaler: `cache` false turns the
// region's cast cache off, so that nothing is made ahead (the reference).
typedef struct cast_run {
    amp_ctx_t *ctx;
    amp_tensor_t *w, *x;
    amp_optim_t *opt;
    amp_scaler_t *sc;
    bool cache;
} cast_run;

static const float w0[6] = {0.1f, -1.0f / 3.0f, 2.0f / 7.0f, 1.2345678f, -0.7f, 3.3333333f};
static const float x0[6] = {1.0f, 0.5f, -0.25f, 2.0f, 1.0f / 3.0f, -1.5f};

static cast_run cast_run_new(amp_optim_kind kind, bool cache) {
    cast_run r = {.ctx = test_cpu_ctx(), .cache = cache};
    r.w = amp_tensor_from_f32(r.ctx, AMP_DTYPE_F32, 2, (int64_t[]){3, 2}, w0);
    amp_tensor_set_requires_grad(r.w, true);
    r.x = amp_tensor_from_f32(r.ctx, AMP_DTYPE_F32, 2, (int64_t[]){3, 2}, x0);
    amp_optim_params o = amp_optim_defaults(kind);
    o.lr = 0.01f;
    ck_assert_int_eq(amp_optim_new(r.ctx, &o, &r.w, 1, &r.opt), AMP_OK);
    amp_scaler_params sp = amp_scaler_defaults();
    sp.init_scale = 1024.0f;
    ck_assert_int_eq(amp_scaler_new(&sp, &r.sc), AMP_OK);
    return r;
}

static void cast_run_free(cast_run *r) {
    amp_scaler_free(r->sc);
    amp_optim_free(r->opt);
    amp_ctx_free(r->ctx);
}

// Forward (a linear in a region of dtype dt; F32: no region) and backward; returns the region's
// cast of w (a scratch tensor, valid until amp_ctx_reset) and says whether it was the copy made
// ahead.
static amp_tensor_t *cast_forward_backward(cast_run *r, amp_dtype dt, bool *made) {
    amp_optim_zero_grad(r->opt);
    const bool region = dt != AMP_DTYPE_F32;
    if (region) amp_autocast_begin(r->ctx, true, dt, r->cache);
    amp_tensor_t *y = amp_linear(r->ctx, r->x, r->w, NULL);
    amp_tensor_t *c = region && r->cache ? r->ctx->cast_cache[0].cast : NULL;
    *made = c && c->buf == r->w->precast;
    if (region) amp_autocast_end(r->ctx);
    amp_tensor_t *loss = amp_mean(r->ctx, amp_mul(r->ctx, y, y));
    amp_backward(r->ctx, amp_scaler_scale(r->sc, r->ctx, loss));
    return c;
}

static void cast_step(cast_run *r) {
    ck_assert_int_eq(amp_scaler_step(r->sc, r->opt, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(r->sc), AMP_OK);
    amp_ctx_reset(r->ctx);
}

static void expect_same_weights(const cast_run *a, const cast_run *b, int step) {
    float wa[6], wb[6];
    amp_tensor_read_f32(a->w, wa);
    amp_tensor_read_f32(b->w, wb);
    for (int i = 0; i < 6; i++)
        ck_assert_msg(memcmp(&wa[i], &wb[i], 4) == 0, "step %d: w[%d] %.9g, reference %.9g", step,
                      i, (double)wa[i], (double)wb[i]);
}

// The copy holds w rounded to its dtype, bit for bit.
static void expect_copy_of(const cast_run *r, amp_dtype dt) {
    ck_assert_ptr_nonnull(r->w->precast);
    ck_assert_int_eq(r->w->precast_dtype, dt);
    amp_tensor_t *want = amp_to(r->ctx, r->w, dt), copy = *want;
    copy.buf = r->w->precast;
    copy.offset = 0;
    uint16_t a[6], b[6];
    amp_tensor_read(want, a);
    amp_tensor_read(&copy, b);
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
    amp_ctx_reset(r->ctx);
}

START_TEST(test_copies_made_ahead) {
    const amp_optim_kind kinds[3] = {AMP_OPTIM_SGD, AMP_OPTIM_ADAM, AMP_OPTIM_ADAMW};
    // the regions' dtypes step by step: the copy follows a change of dtype one step late; a step
    // without a region (F32) makes none for the next
    enum { S = 8 };
    const amp_dtype dts[S] = {AMP_DTYPE_F16, AMP_DTYPE_F16, AMP_DTYPE_BF16, AMP_DTYPE_BF16,
                              AMP_DTYPE_F16, AMP_DTYPE_F32, AMP_DTYPE_BF16, AMP_DTYPE_BF16};
    const bool made_want[S] = {false, true, false, true, false, false, false, true};
    for (int k = 0; k < 3; k++) {
        cast_run a = cast_run_new(kinds[k], true), b = cast_run_new(kinds[k], false);
        for (int s = 0; s < S; s++) {
            bool made, unused;
            cast_forward_backward(&a, dts[s], &made);
            cast_forward_backward(&b, dts[s], &unused);
            ck_assert_msg(made == made_want[s], "%s step %d: copy made ahead %d",
                          amp_optim_kind_name(kinds[k]), s, made);
            cast_step(&a);
            cast_step(&b);
            expect_same_weights(&a, &b, s);
            if (dts[s] == AMP_DTYPE_F32)
                ck_assert_ptr_null(a.w->precast); // its storage given back
            else
                expect_copy_of(&a, dts[s]);
            ck_assert_ptr_null(b.w->precast);
        }
        cast_run_free(&a);
        cast_run_free(&b);
    }
}
END_TEST

// A step the GradScaler skips leaves the copy holding the unchanged weights.
START_TEST(test_copy_on_a_skipped_step) {
    cast_run a = cast_run_new(AMP_OPTIM_ADAM, true), b = cast_run_new(AMP_OPTIM_ADAM, false);
    const float big[6] = {6e4f, 6e4f, 6e4f, 6e4f, 6e4f, 6e4f}; // y * y overflows f16's range
    for (int s = 0; s < 4; s++) {
        if (s == 1) {
            amp_tensor_write_f32(a.x, big);
            amp_tensor_write_f32(b.x, big);
        } else if (s == 2) {
            amp_tensor_write_f32(a.x, x0);
            amp_tensor_write_f32(b.x, x0);
        }
        bool made, unused, skipped;
        cast_forward_backward(&a, AMP_DTYPE_F16, &made);
        cast_forward_backward(&b, AMP_DTYPE_F16, &unused);
        ck_assert_int_eq(made, s > 0);
        ck_assert_int_eq(amp_scaler_step(a.sc, a.opt, &skipped), AMP_OK);
        ck_assert_msg(skipped == (s == 1), "step %d skipped %d", s, skipped);
        ck_assert_int_eq(amp_scaler_step(b.sc, b.opt, NULL), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(a.sc), AMP_OK);
        ck_assert_int_eq(amp_scaler_update(b.sc), AMP_OK);
        amp_ctx_reset(a.ctx);
        amp_ctx_reset(b.ctx);
        expect_same_weights(&a, &b, s);
        expect_copy_of(&a, AMP_DTYPE_F16);
    }
    cast_run_free(&a);
    cast_run_free(&b);
}
END_TEST

// A parameter written from the host after the step is cast anew; the copy that the tape still
// reads stays as it was when the step writes the next one.
START_TEST(test_copy_invalidated_and_kept) {
    cast_run a = cast_run_new(AMP_OPTIM_SGD, true);
    bool made;
    cast_forward_backward(&a, AMP_DTYPE_BF16, &made);
    cast_step(&a);
    const float w1[6] = {0.5f, 0.25f, -0.125f, 1.0f / 3.0f, 7.0f, -2.0f};
    amp_tensor_write_f32(a.w, w1);
    amp_tensor_t *c = cast_forward_backward(&a, AMP_DTYPE_BF16, &made);
    ck_assert(!made); // written since the step: cast again, from w1
    float got[6];
    amp_tensor_read_f32(c, got);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(got[i], amp_bf16_to_f32(amp_f32_to_bf16(w1[i])));
    cast_step(&a);

    c = cast_forward_backward(&a, AMP_DTYPE_BF16, &made);
    ck_assert(made);
    float before[6], after[6];
    amp_tensor_read_f32(c, before);
    ck_assert_int_eq(amp_scaler_step(a.sc, a.opt, NULL), AMP_OK); // the tape is kept
    ck_assert_ptr_ne(a.w->precast, c->buf);
    amp_tensor_read_f32(c, after);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);
    ck_assert_int_eq(amp_scaler_update(a.sc), AMP_OK);
    amp_ctx_reset(a.ctx);
    expect_copy_of(&a, AMP_DTYPE_BF16);
    cast_run_free(&a);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Defaults, names, checks

START_TEST(test_defaults_and_names) {
    amp_optim_params s = amp_optim_defaults(AMP_OPTIM_SGD);
    ck_assert_float_eq(s.lr, 1e-3f);
    ck_assert(s.momentum == 0 && s.dampening == 0 && !s.nesterov && s.weight_decay == 0);
    amp_optim_params a = amp_optim_defaults(AMP_OPTIM_ADAM);
    ck_assert_int_eq(a.kind, AMP_OPTIM_ADAM);
    ck_assert(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8); // doubles
    ck_assert_float_eq(a.weight_decay, 0);
    ck_assert_float_eq(amp_optim_defaults(AMP_OPTIM_ADAMW).weight_decay, 1e-2f);

    amp_optim_kind k;
    ck_assert(amp_optim_kind_parse("adamw", &k) && k == AMP_OPTIM_ADAMW);
    ck_assert(amp_optim_kind_parse("sgd", &k) && k == AMP_OPTIM_SGD);
    ck_assert(amp_optim_kind_parse("adam", &k) && k == AMP_OPTIM_ADAM);
    ck_assert(!amp_optim_kind_parse("rmsprop", &k));
    ck_assert_str_eq(amp_optim_kind_name(AMP_OPTIM_ADAM), "adam");
    ck_assert_str_eq(amp_optim_kind_name(AMP_OPTIM_SGD), "sgd");
    ck_assert_str_eq(amp_optim_kind_name(AMP_OPTIM_ADAMW), "adamw");
}
END_TEST

static void expect_param_error(amp_optim_params o, const char *msg) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 1, (float[]){1});
    amp_optim_t *opt = (amp_optim_t *)1;
    ck_assert_int_eq(amp_optim_new(ctx, &o, &p, 1, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(opt);
    ck_assert_str_eq(amp_last_error(), msg);
    amp_ctx_free(ctx);
}

START_TEST(test_hyperparameter_checks) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.lr = -0.5f;
    expect_param_error(o, "Invalid learning rate: -0.5");
    o.lr = NAN;
    expect_param_error(o, "Invalid learning rate: nan");
    o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.momentum = -1;
    expect_param_error(o, "Invalid momentum value: -1");
    o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.weight_decay = -0.25f;
    expect_param_error(o, "Invalid weight_decay value: -0.25");
    o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.nesterov = true;
    expect_param_error(o, "Nesterov momentum requires a momentum and zero dampening "
                          "(momentum=0, dampening=0)");
    o.momentum = 0.9f;
    o.dampening = 0.5f;
    expect_param_error(o, "Nesterov momentum requires a momentum and zero dampening "
                          "(momentum=0.9, dampening=0.5)");
    o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.beta1 = 1.0f;
    expect_param_error(o, "Invalid beta parameter at index 0: 1");
    o = amp_optim_defaults(AMP_OPTIM_ADAMW);
    o.beta2 = -0.5f;
    expect_param_error(o, "Invalid beta parameter at index 1: -0.5");
    o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.eps = -1e-8f;
    expect_param_error(o, "Invalid epsilon value: -1e-08");
    // two bad values: the one torch.optim checks first is named (Adam: betas before
    // weight_decay; SGD: momentum before it)
    o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.weight_decay = -1;
    o.beta2 = 1;
    expect_param_error(o, "Invalid beta parameter at index 1: 1");
    o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.weight_decay = -1;
    o.momentum = -1;
    expect_param_error(o, "Invalid momentum value: -1");
    o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.kind = (amp_optim_kind)7;
    expect_param_error(o, "unknown optimizer kind 7");
}
END_TEST

START_TEST(test_tensor_checks) {
    amp_ctx_t *ctx = test_cpu_ctx(), *other = test_cpu_ctx();
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_optim_t *opt;
    amp_tensor_t *good = test_param_f32(ctx, 2, (float[]){1, 2});
    amp_tensor_set_name(good, "fc.weight");

    ck_assert_int_eq(amp_optim_new(ctx, &o, &good, 0, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "optimizer got an empty parameter list (n = 0)");

    amp_tensor_t *list[2] = {good, NULL};
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "params[1] is NULL");

    list[1] = amp_tensor_from_f32(ctx, AMP_DTYPE_F16, 1, (int64_t[]){2}, (float[]){1, 2});
    amp_tensor_set_requires_grad(list[1], true);
    amp_tensor_set_name(list[1], "h");
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(),
                     "params[1] 'h' is f16; optimizers update f32 master weights");

    list[1] = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, (int64_t[]){2}, (float[]){1, 2});
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "params[1] '' does not require grad");

    list[1] = good;
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "params[0] and params[1] are the same tensor 'fc.weight' "
                                       "(it would be updated twice per step)");

    list[1] = amp_mul_scalar(ctx, good, 2); // an op output
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "params[1] '' is an op output"));

    list[1] = test_param_f32(other, 1, (float[]){1});
    ck_assert_int_eq(amp_optim_new(ctx, &o, list, 2, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "params[1] '' belongs to another context");
    amp_ctx_free(other);
    amp_ctx_free(ctx);
}
END_TEST

// NULL arguments of the functions that return a status: AMP_ERR_INVALID_ARGUMENT naming them.
START_TEST(test_null_arguments) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_SGD);
    amp_optim_t *opt = (amp_optim_t *)1;
    amp_tensor_t *w = test_param_f32(ctx, 2, (float[]){1, 2});
    ck_assert_int_eq(amp_optim_new(ctx, &o, NULL, 1, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_optim_new: params is NULL");
    ck_assert_ptr_null(opt);
    ck_assert_int_eq(amp_optim_new(ctx, &o, &w, 1, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_optim_new: out is NULL");
    ck_assert_int_eq(amp_optim_new(ctx, NULL, &w, 1, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_optim_new: p is NULL");
    ck_assert_int_eq(amp_optim_new(ctx, &o, &w, 1, &opt), AMP_OK);
    ck_assert_int_eq(amp_optim_set_params(opt, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_optim_set_params: p is NULL");
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

// A negative count made Adam's bias corrections NaN; amp_ctx_set_step_index(-5) aborts too.
START_TEST(test_set_steps_negative_aborts) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *w = test_param_f32(ctx, 2, (float[]){1, 2});
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &o, &w, 1, &opt), AMP_OK);
    amp_optim_set_steps(opt, 0, (int64_t[]){0}); // from 0: a fresh optimizer's
    test_expect_abort("amp_optim_set_steps: a step count from 0, got steps = -5");
    amp_optim_set_steps(opt, -5, (int64_t[]){0});
}
END_TEST

START_TEST(test_set_param_steps_negative_aborts) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *w[2] = {test_param_f32(ctx, 2, (float[]){1, 2}),
                          test_param_f32(ctx, 1, (float[]){3})};
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &o, w, 2, &opt), AMP_OK);
    test_expect_abort("amp_optim_set_steps: a step count from 0, got param_steps[1] = -1");
    amp_optim_set_steps(opt, 3, (int64_t[]){3, -1});
}
END_TEST

// ---------------------------------------------------------------------------------------------
// SGD

START_TEST(test_sgd_hand_values) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.lr = 0.1f;
    float w[3];
    constant_grad_steps(&o, 1, 0.5f, w, 3); // p -= 0.05 each step
    ck_assert_close(w[0], 0.95, 1e-7, 0);
    ck_assert_close(w[2], 0.85, 1e-7, 0);
    o.momentum = 0.9f; // buf = 1, 1.9, 2.71
    constant_grad_steps(&o, 1, 1, w, 3);
    ck_assert_close(w[0], 0.9, 1e-7, 0);
    ck_assert_close(w[1], 0.71, 1e-7, 0);
    ck_assert_close(w[2], 0.439, 1e-7, 0);
    o.nesterov = true; // d = g + 0.9 buf = 1.9, 2.71
    constant_grad_steps(&o, 1, 1, w, 2);
    ck_assert_close(w[0], 0.81, 1e-7, 0);
    ck_assert_close(w[1], 0.539, 1e-7, 0);
    o.nesterov = false;
    o.dampening = 0.5f; // the first step takes the gradient whole: buf = 1, then 0.9 + 0.5
    constant_grad_steps(&o, 1, 1, w, 2);
    ck_assert_close(w[0], 0.9, 1e-7, 0);
    ck_assert_close(w[1], 0.76, 1e-7, 0);
    o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.lr = 0.1f;
    o.weight_decay = 0.5f; // d = g + 0.5 p = 2: 2 - 0.1 * 2
    constant_grad_steps(&o, 2, 1, w, 1);
    ck_assert_close(w[0], 1.8, 1e-7, 0);
}
END_TEST

START_TEST(test_sgd_reference) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.lr = 0.05f;
    check_against_ref(&o);
    o.momentum = 0.9f;
    check_against_ref(&o);
    o.dampening = 0.3f;
    o.weight_decay = 0.01f;
    check_against_ref(&o);
    o.dampening = 0;
    o.nesterov = true;
    check_against_ref(&o);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Adam, AdamW

START_TEST(test_adam_hand_values) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.lr = 0.1f;
    float w[3];
    // A constant gradient has bias-corrected m = g and v = g^2: each step moves by lr.
    constant_grad_steps(&o, 1, 0.5f, w, 3);
    ck_assert_close(w[0], 0.9, 1e-6, 0);
    ck_assert_close(w[1], 0.8, 1e-6, 0);
    ck_assert_close(w[2], 0.7, 1e-6, 0);
    constant_grad_steps(&o, 1, -2, w, 1);
    ck_assert_close(w[0], 1.1, 1e-6, 0);
    // AdamW: p *= 1 - lr * wd first: 0.999 - 0.1, then 0.899 * 0.999 - 0.1, ...
    o = amp_optim_defaults(AMP_OPTIM_ADAMW);
    o.lr = 0.1f;
    constant_grad_steps(&o, 1, 0.5f, w, 3);
    ck_assert_close(w[0], 0.899, 1e-6, 0);
    ck_assert_close(w[1], 0.798101, 1e-6, 0);
    ck_assert_close(w[2], 0.697302899, 1e-6, 0);
}
END_TEST

START_TEST(test_adam_reference) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.lr = 0.01f;
    check_against_ref(&o);
    o.weight_decay = 0.1f; // L2 into the gradient
    check_against_ref(&o);
    o.beta1 = 0.5f;
    o.beta2 = 0.75f;
    o.eps = 1e-3f;
    check_against_ref(&o);
}
END_TEST

// The bits of torch.optim.Adam with its defaults (betas (0.9, 0.999) as Python floats), two
// steps without zero_grad between them: torch 2.x's single-tensor algorithm on Debian's torch 1.13
// CPU ops, without fused multiply-adds, with CUDA's addcdiv order p + v * (m / d). Adam holding its
// betas as f32 gave exp_avg 0x3d4cccd0 for 0x3d4ccccd: 1 - 0.9f is not 1 - 0.9 rounded.
START_TEST(test_adam_torch_bits) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *p = test_param_f32(ctx, 3, (float[]){1, -2, 3});
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &o, &p, 1, &opt), AMP_OK);
    static const uint32_t want[2][3][3] = {{{0x3f7fbe77, 0xbfffdf3b, 0x403fef9e},  // param
                                            {0x3d4ccccd, 0xbdcccccd, 0x3ccccccd},  // exp_avg
                                            {0x3983126f, 0x3a83126f, 0x3883126f}}, // exp_avg_sq
                                           {{0x3f7f7f36, 0xbfffbf9a, 0x403fdfce},
                                            {0x3e147ae1, 0xbe947ae1, 0x3d947ae1},
                                            {0x3aa3cea7, 0x3ba3cea7, 0x39a3cea7}}};
    for (int s = 0; s < 2; s++) { // the gradient (0.5, -1, 0.25), accumulated twice for step 2
        const float k = (float)(s + 1);
        test_set_grad_f32(ctx, p, (float[]){0.5f * k, -1 * k, 0.25f * k});
        amp_optim_step(opt);
        const amp_tensor_t *t[3] = {p, amp_optim_state(opt, 0, 0), amp_optim_state(opt, 0, 1)};
        for (int j = 0; j < 3; j++) {
            uint32_t got[3];
            amp_tensor_read_f32(t[j], (float *)got);
            for (int i = 0; i < 3; i++)
                ck_assert_msg(got[i] == want[s][j][i], "step %d tensor %d [%d]: %08x, want %08x",
                              s + 1, j, i, got[i], want[s][j][i]);
        }
    }
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_adamw_reference) {
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAMW);
    o.lr = 0.01f;
    check_against_ref(&o);
    o.weight_decay = 0.5f;
    check_against_ref(&o);
}
END_TEST

// Adam's state["step"] is per parameter: one that had no gradient on the first step gets the
// bias correction of its own first step on the second.
START_TEST(test_per_param_steps) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *ps[2] = {test_param_f32(ctx, 1, (float[]){1}),
                           test_param_f32(ctx, 1, (float[]){1})};
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_ADAM);
    o.lr = 0.1f;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &o, ps, 2, &opt), AMP_OK);
    test_set_grad_f32(ctx, ps[0], (float[]){1});
    amp_optim_step(opt);
    ck_assert_close(amp_tensor_item(ps[0]), 0.9, 1e-6, 0);
    ck_assert_float_eq(amp_tensor_item(ps[1]), 1); // no gradient: untouched
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), 1);
    ck_assert_int_eq(amp_optim_param_steps(opt, 1), 0);
    test_set_grad_f32(ctx, ps[0], (float[]){1});
    test_set_grad_f32(ctx, ps[1], (float[]){3});
    amp_optim_step(opt);
    ck_assert_close(amp_tensor_item(ps[0]), 0.8, 1e-6, 0);
    ck_assert_close(amp_tensor_item(ps[1]), 0.9, 1e-6, 0); // step 1 for it: moves by lr
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), 2);
    ck_assert_int_eq(amp_optim_param_steps(opt, 1), 1);
    ck_assert_int_eq(amp_optim_steps(opt), 2);
    // exp_avg / exp_avg_sq of the second after its one step: (1 - b1) g, (1 - b2) g^2, with
    // 1 - beta taken in double as Python does (1 - 0.999 = 0.001, where 1 - 0.999f = 0.000999987)
    ck_assert_close(amp_tensor_item(amp_optim_state(opt, 1, 0)), 0.1 * 3, 1e-7, 1e-7);
    ck_assert_close(amp_tensor_item(amp_optim_state(opt, 1, 1)), 0.001 * 9, 1e-7, 1e-7);
    amp_optim_zero_grad(opt);
    ck_assert_ptr_null(amp_tensor_grad(ps[0]));
    ck_assert_ptr_null(amp_tensor_grad(ps[1]));
    amp_optim_step(opt); // nothing has a gradient: nothing moves, the step still counts
    ck_assert_close(amp_tensor_item(ps[0]), 0.8, 1e-6, 0);
    ck_assert_int_eq(amp_optim_steps(opt), 3);
    ck_assert_int_eq(amp_optim_param_steps(opt, 0), 2);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
}
END_TEST

START_TEST(test_accessors_and_set_params) {
    amp_ctx_t *ctx = test_cpu_ctx();
    amp_tensor_t *ps[2] = {test_param_f32(ctx, 1, (float[]){1}),
                           test_param_f32(ctx, 1, (float[]){2})};
    amp_optim_params o = amp_optim_defaults(AMP_OPTIM_SGD);
    o.lr = 0.5f;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &o, ps, 2, &opt), AMP_OK);
    ck_assert_int_eq(amp_optim_num_params(opt), 2);
    ck_assert_ptr_eq(amp_optim_param(opt, 1), ps[1]);
    ck_assert_float_eq(amp_optim_get_params(opt)->lr, 0.5f);
    ck_assert_ptr_null(amp_optim_state(opt, 0, 0));

    amp_optim_params n = o;
    n.lr = 0.25f; // an LR schedule
    ck_assert_int_eq(amp_optim_set_params(opt, &n), AMP_OK);
    test_set_grad_f32(ctx, ps[0], (float[]){4});
    amp_optim_step(opt);
    ck_assert_float_eq(amp_tensor_item(ps[0]), 0);

    n.lr = -1;
    ck_assert_int_eq(amp_optim_set_params(opt, &n), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "Invalid learning rate: -1");
    n = amp_optim_defaults(AMP_OPTIM_ADAM);
    ck_assert_int_eq(amp_optim_set_params(opt, &n), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(),
                     "optimizer kind cannot change (this optimizer is sgd, got adam)");
    n = o;
    n.momentum = 0.9f;
    ck_assert_int_eq(amp_optim_set_params(opt, &n), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "created without momentum"));
    ck_assert_float_eq(amp_optim_get_params(opt)->lr, 0.25f); // the failures changed nothing

    amp_optim_set_steps(opt, 10, (int64_t[]){4, 5});
    ck_assert_int_eq(amp_optim_steps(opt), 10);
    ck_assert_int_eq(amp_optim_param_steps(opt, 1), 5);
    amp_optim_free(opt);
    amp_optim_free(NULL);
    amp_ctx_free(ctx);
}
END_TEST

Suite *optim_suite(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("checks");
    tcase_add_test(tc, test_defaults_and_names);
    tcase_add_test(tc, test_hyperparameter_checks);
    tcase_add_test(tc, test_tensor_checks);
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test_raise_signal(tc, test_set_steps_negative_aborts, SIGABRT);
    tcase_add_test_raise_signal(tc, test_set_param_steps_negative_aborts, SIGABRT);
    suite_add_tcase(s, tc);
    tc = tcase_create("math");
    tcase_add_test(tc, test_sgd_hand_values);
    tcase_add_test(tc, test_sgd_reference);
    tcase_add_test(tc, test_adam_hand_values);
    tcase_add_test(tc, test_adam_reference);
    tcase_add_test(tc, test_adam_torch_bits);
    tcase_add_test(tc, test_adamw_reference);
    tcase_add_test(tc, test_narrow_gradients);
    suite_add_tcase(s, tc);
    tc = tcase_create("state");
    tcase_add_test(tc, test_per_param_steps);
    tcase_add_test(tc, test_accessors_and_set_params);
    suite_add_tcase(s, tc);
    tc = tcase_create("autocast copies");
    tcase_add_test(tc, test_copies_made_ahead);
    tcase_add_test(tc, test_copy_on_a_skipped_step);
    tcase_add_test(tc, test_copy_invalidated_and_kept);
    suite_add_tcase(s, tc);
    return s;
}
