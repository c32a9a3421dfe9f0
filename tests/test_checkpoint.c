/*
 * test_checkpoint.c — the `checkpoint` suite: save/load round trips (parameters, Adam and SGD
 * state, GradScaler state) that resume bit-identically; every truncation and every flipped byte
 * of a small checkpoint is refused with nothing changed; mismatched names, shapes, dtypes,
 * optimizer kinds and scaler states; I/O errors; hand-built files (the documented format,
 * with a valid CRC) that lie about their lengths, hold step counts that cannot grow or hide a
 * duplicate among 200k records; and a huge foreign file, refused by its header without being
 * read.
 */
#define _GNU_SOURCE // memmem
#include "tests.h"

#include "amp-impl.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Helpers

static char dir[64];

static void make_dir(void) {
    ck_assert_ptr_nonnull(amp_make_temp_dir(dir, sizeof dir, "/tmp/ampckpt-"));
}

// dir/name in a static buffer (two slots, so two paths can be live at once).
static const char *path(const char *name) {
    static char buf[2][128];
    static int k;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void remove_dir(void) {
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void spit(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

// CRC-32 (IEEE), bit by bit: an independent check of the file's trailer.
static uint32_t crc32_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crc(uint8_t *b, size_t n) {
    put_le(b + n - 4, crc32_bitwise(b, n - 4), 4);
}

static void set_grad(amp_ctx_t *ctx, amp_tensor_t *t, float v0) {
    amp_tensor_zero_grad(t);
    amp_tensor_t *g = amp_scratch_new(ctx, AMP_DTYPE_F32, t->ndim, t->shape);
    int64_t n = amp_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = v0 - 0.5f * (float)i;
    amp_tensor_write_f32(g, v);
    free(v);
    amp_grad_accumulate(ctx, t, g);
}

static bool same_bytes(const amp_tensor_t *a, const amp_tensor_t *b) {
    size_t n = (size_t)amp_tensor_numel(a) * amp_dtype_size(a->dtype);
    if (n != (size_t)amp_tensor_numel(b) * amp_dtype_size(b->dtype)) return false;
    uint8_t *x = malloc(n), *y = malloc(n);
    amp_tensor_read(a, x);
    amp_tensor_read(b, y);
    bool same = memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

// A small model: fc.weight (2, 3) f32, fc.bias (3) f32, an unnamed f16 (2) buffer ("param.2");
// the optimizer holds the two f32 ones.
typedef struct model {
    amp_ctx_t *ctx;
    amp_tensor_t *p[3];
    amp_optim_t *opt;
    amp_scaler_t *sc;
} model;

static void model_init(model *m, amp_optim_kind kind, float momentum, float v0, bool scaler_on) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &m->ctx), AMP_OK);
    m->p[0] = test_param(m->ctx, AMP_DTYPE_F32, "fc.weight", 2, (int64_t[]){2, 3}, v0);
    m->p[1] = test_param(m->ctx, AMP_DTYPE_F32, "fc.bias", 1, (int64_t[]){3}, -v0);
    m->p[2] = test_param(m->ctx, AMP_DTYPE_F16, NULL, 1, (int64_t[]){2}, v0 * 2);
    amp_optim_params op = amp_optim_defaults(kind);
    op.lr = 0.01f * v0;
    op.momentum = momentum;
    ck_assert_int_eq(amp_optim_new(m->ctx, &op, m->p, 2, &m->opt), AMP_OK);
    amp_scaler_params sp = {1024.0f * v0, 2, 0.5, 3, scaler_on};
    ck_assert_int_eq(amp_scaler_new(&sp, &m->sc), AMP_OK);
}

static void model_free(model *m) {
    amp_scaler_free(m->sc);
    amp_optim_free(m->opt);
    amp_ctx_free(m->ctx);
}

// One scaled training step with made-up gradients (g0 = INFINITY makes it skip).
static void model_step(model *m, float g0) {
    amp_tensor_t *loss = amp_tensor_from_f32(m->ctx, AMP_DTYPE_F32, 0, NULL, (float[]){1});
    amp_scaler_scale(m->sc, m->ctx, loss);
    float s = amp_scaler_get_scale(m->sc);
    set_grad(m->ctx, m->p[0], g0 * s);
    set_grad(m->ctx, m->p[1], 0.5f * s);
    ck_assert_int_eq(amp_scaler_step(m->sc, m->opt, NULL), AMP_OK);
    ck_assert_int_eq(amp_scaler_update(m->sc), AMP_OK);
    amp_ctx_step_end(m->ctx, 1);
    amp_tensor_free(loss);
    amp_ctx_reset(m->ctx);
}

// ---------------------------------------------------------------------------------------------
// Round trips

static void check_round_trip(amp_optim_kind kind, float momentum) {
    make_dir();
    model a, b;
    model_init(&a, kind, momentum, 1, true);
    model_step(&a, 1);
    model_step(&a, INFINITY); // a skipped step: scale backs off, state stays
    model_step(&a, -2);
    ck_assert_int_eq(amp_checkpoint_save(path("m.ckpt"), a.p, 3, a.opt, a.sc), AMP_OK);
    char ls[160]; // the temporary file renamed away
    snprintf(ls, sizeof ls, "test \"$(ls '%s')\" = m.ckpt", dir);
    ck_assert_int_eq(system(ls), 0);

    model_init(&b, kind, momentum, 3, true);
    ck_assert_int_eq(amp_checkpoint_load(path("m.ckpt"), b.p, 3, b.opt, b.sc), AMP_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(same_bytes(a.p[i], b.p[i]));
    ck_assert_int_eq(amp_optim_steps(b.opt), 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(amp_optim_param_steps(b.opt, i), 2);
        for (int k = 0; k < 2; k++) {
            amp_tensor_t *sa = amp_optim_state(a.opt, i, k), *sb = amp_optim_state(b.opt, i, k);
            ck_assert((sa == NULL) == (sb == NULL));
            if (sa) ck_assert(same_bytes(sa, sb));
        }
    }
    const amp_optim_params *pa = amp_optim_get_params(a.opt), *pb = amp_optim_get_params(b.opt);
    ck_assert_float_eq(pb->lr, 0.01f); // hyperparameters restored (b was made with 0.03)
    ck_assert(pa->kind == pb->kind && pa->lr == pb->lr && pa->momentum == pb->momentum &&
              pa->dampening == pb->dampening && pa->nesterov == pb->nesterov &&
              pa->weight_decay == pb->weight_decay && pa->beta1 == pb->beta1 &&
              pa->beta2 == pb->beta2 && pa->eps == pb->eps);
    amp_scaler_state sa, sb;
    ck_assert_int_eq(amp_scaler_state_dict(a.sc, &sa), AMP_OK);
    ck_assert_int_eq(amp_scaler_state_dict(b.sc, &sb), AMP_OK);
    ck_assert(sa.scale == sb.scale && sa.growth_factor == sb.growth_factor &&
              sa.backoff_factor == sb.backoff_factor && sa.growth_interval == sb.growth_interval &&
              sa.growth_tracker == sb.growth_tracker);
    ck_assert_float_eq(sb.scale, 512);
    ck_assert_int_eq(sb.growth_tracker, 1);
    // the number the next step has: three steps run, the skipped one counted
    int64_t next = 0;
    ck_assert_int_eq(amp_checkpoint_next_step(path("m.ckpt"), &next), AMP_OK);
    ck_assert_int_eq(next, 3);

    // Resuming: the same next step gives bit-identical results.
    model_step(&a, 0.75f);
    model_step(&b, 0.75f);
    for (int i = 0; i < 2; i++)
        ck_assert(same_bytes(a.p[i], b.p[i]));
    ck_assert_float_eq(amp_scaler_get_scale(a.sc), amp_scaler_get_scale(b.sc));
    model_free(&a);
    model_free(&b);
    remove_dir();
}

START_TEST(test_round_trip_adam) {
    check_round_trip(AMP_OPTIM_ADAM, 0);
}
END_TEST

START_TEST(test_round_trip_sgd_momentum) {
    check_round_trip(AMP_OPTIM_SGD, 0.9f);
}
END_TEST

START_TEST(test_round_trip_params_only) {
    make_dir();
    model a, b;
    model_init(&a, AMP_OPTIM_SGD, 0, 1, true);
    model_init(&b, AMP_OPTIM_SGD, 0, 2, true);
    ck_assert_int_eq(amp_checkpoint_save(path("p.ckpt"), a.p, 3, NULL, NULL), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("p.ckpt"), b.p, 3, NULL, NULL), AMP_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(same_bytes(a.p[i], b.p[i]));
    // Saving again replaces the file.
    model_step(&a, 1);
    ck_assert_int_eq(amp_checkpoint_save(path("p.ckpt"), a.p, 3, NULL, NULL), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("p.ckpt"), b.p, 3, NULL, NULL), AMP_OK);
    ck_assert(same_bytes(a.p[0], b.p[0]));
    int64_t next = 0; // no optimizer saved, no step number
    ck_assert_int_eq(amp_checkpoint_next_step(path("p.ckpt"), &next), AMP_OK);
    ck_assert_int_eq(next, -1);
    model_free(&a);
    model_free(&b);
    remove_dir();
}
END_TEST

// A dropout model trained from a context seeded with `seed`, fresh noise (amp_tensor_randn) added
// to its input each step: w (4, 8), x (6, 8) -> mean(dropout(x + noise @ w^T)^2).
typedef struct dropout_run {
    amp_ctx_t *ctx;
    amp_tensor_t *w, *x, *noise;
    amp_optim_t *opt;
} dropout_run;

static void dropout_run_init(dropout_run *r, uint64_t seed) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, seed, &r->ctx), AMP_OK);
    r->w = test_param(r->ctx, AMP_DTYPE_F32, "w", 2, (int64_t[]){4, 8}, 0.1f);
    float xv[48];
    for (int i = 0; i < 48; i++)
        xv[i] = sinf(0.7f * (float)i);
    r->x = amp_tensor_from_f32(r->ctx, AMP_DTYPE_F32, 2, (int64_t[]){6, 8}, xv);
    r->noise = amp_tensor_new(r->ctx, AMP_DTYPE_F32, 2, (int64_t[]){6, 8});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    ck_assert_int_eq(amp_optim_new(r->ctx, &op, &r->w, 1, &r->opt), AMP_OK);
}

// One step; returns its loss's bits.
static uint32_t dropout_run_step(dropout_run *r) {
    amp_ctx_t *ctx = r->ctx;
    amp_optim_zero_grad(r->opt);
    amp_tensor_randn(r->noise, 0.1f);
    amp_tensor_t *h = amp_linear(ctx, amp_add(ctx, r->x, r->noise), r->w, NULL);
    amp_tensor_t *d = amp_dropout(ctx, h, 0.5f, true);
    amp_tensor_t *loss = amp_mean(ctx, amp_mul(ctx, d, d));
    amp_backward(ctx, loss);
    float l = amp_tensor_item(loss);
    amp_optim_step(r->opt);
    amp_ctx_step_end(ctx, l);
    amp_ctx_reset(ctx);
    uint32_t bits;
    memcpy(&bits, &l, 4);
    return bits;
}

static void dropout_run_free(dropout_run *r) {
    amp_optim_free(r->opt);
    amp_ctx_free(r->ctx);
}

// A run resumed from a checkpoint draws the dropout masks and the noise the uninterrupted run
// drew: the losses after the resume are bit-identical (the checkpoint carries the context's
// random state, which the resumed run's own seed would not reproduce).
START_TEST(test_resume_with_dropout_is_exact) {
    make_dir();
    enum { STEPS = 6, SAVE_AT = 3 };
    uint32_t want[STEPS];
    dropout_run a, b;
    dropout_run_init(&a, 7);
    for (int s = 0; s < STEPS; s++) {
        want[s] = dropout_run_step(&a);
        if (s + 1 == SAVE_AT)
            ck_assert_int_eq(amp_checkpoint_save(path("d.ckpt"), &a.w, 1, a.opt, NULL), AMP_OK);
    }
    dropout_run_init(&b, 7); // a fresh process, seeded as the first was
    ck_assert_int_eq(amp_checkpoint_load(path("d.ckpt"), &b.w, 1, b.opt, NULL), AMP_OK);
    for (int s = SAVE_AT; s < STEPS; s++)
        ck_assert_msg(dropout_run_step(&b) == want[s], "step %d after the resume differs", s);
    ck_assert(same_bytes(a.w, b.w));
    amp_rng_state ra = amp_ctx_rng_state(a.ctx), rb = amp_ctx_rng_state(b.ctx);
    ck_assert(ra.seed == rb.seed && ra.host == rb.host && ra.dropout_offset == rb.dropout_offset);
    ck_assert_uint_eq(ra.dropout_offset, STEPS * 6 * 4); // one (6, 4) mask a step

    // The getter and setter: a state put back draws again what it drew.
    amp_rng_state st = amp_ctx_rng_state(b.ctx);
    float n1[48], n2[48];
    amp_tensor_randn(b.noise, 1);
    amp_tensor_read_f32(b.noise, n1);
    amp_ctx_set_rng_state(b.ctx, st);
    amp_tensor_randn(b.noise, 1);
    amp_tensor_read_f32(b.noise, n2);
    ck_assert(memcmp(n1, n2, sizeof n1) == 0);
    // The file's state, not the loading context's own seed
    dropout_run_free(&a);
    dropout_run_init(&a, 1);
    ck_assert_int_eq(amp_checkpoint_load(path("d.ckpt"), &a.w, 1, a.opt, NULL), AMP_OK);
    ck_assert_uint_eq(amp_ctx_rng_state(a.ctx).seed, 7);
    ck_assert_uint_eq(amp_ctx_rng_state(a.ctx).dropout_offset, SAVE_AT * 6 * 4);
    dropout_run_free(&a);
    dropout_run_free(&b);
    remove_dir();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Damaged files change nothing

// A small checkpoint: one parameter, momentum SGD, scaler. Returns its bytes.
static uint8_t *small_checkpoint(size_t *n) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *w = test_param(ctx, AMP_DTYPE_F32, "w", 1, (int64_t[]){2}, 1);
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.momentum = 0.5f;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_OK);
    amp_scaler_t *sc;
    amp_scaler_params sp = amp_scaler_defaults();
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_save(path("small.ckpt"), &w, 1, opt, sc), AMP_OK);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
    return (uint8_t *)test_read_file(path("small.ckpt"), n);
}

typedef struct target {
    amp_ctx_t *ctx;
    amp_tensor_t *w;
    amp_optim_t *opt;
    amp_scaler_t *sc;
} target;

static void target_init(target *t) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &t->ctx), AMP_OK);
    t->w = test_param(t->ctx, AMP_DTYPE_F32, "w", 1, (int64_t[]){2}, 7);
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.momentum = 0.25f;
    op.lr = 0.125f;
    ck_assert_int_eq(amp_optim_new(t->ctx, &op, &t->w, 1, &t->opt), AMP_OK);
    amp_scaler_params sp = {8, 3, 0.25, 5, true};
    ck_assert_int_eq(amp_scaler_new(&sp, &t->sc), AMP_OK);
}

static void target_unchanged(const target *t) {
    float w[2];
    amp_tensor_read_f32(t->w, w);
    ck_assert(w[0] == 7 && w[1] == 7.25f);
    ck_assert_float_eq(amp_optim_get_params(t->opt)->lr, 0.125f);
    ck_assert_float_eq(amp_optim_get_params(t->opt)->momentum, 0.25f);
    ck_assert_float_eq(amp_scaler_get_scale(t->sc), 8);
}

static void target_free(target *t) {
    amp_scaler_free(t->sc);
    amp_optim_free(t->opt);
    amp_ctx_free(t->ctx);
}

START_TEST(test_small_checkpoint_loads) {
    make_dir();
    size_t n;
    free(small_checkpoint(&n));
    target t;
    target_init(&t);
    ck_assert_int_eq(amp_checkpoint_load(path("small.ckpt"), &t.w, 1, t.opt, t.sc), AMP_OK);
    float buf[2] = {1, 1};
    amp_tensor_read_f32(amp_optim_state(t.opt, 0, 0), buf); // the saved buffer was still zero
    ck_assert(buf[0] == 0 && buf[1] == 0);
    amp_tensor_read_f32(t.w, buf);
    ck_assert(buf[0] == 1 && buf[1] == 1.25f);
    ck_assert_float_eq(amp_optim_get_params(t.opt)->momentum, 0.5f);
    ck_assert_float_eq(amp_scaler_get_scale(t.sc), 65536);
    target_free(&t);
    remove_dir();
}
END_TEST

START_TEST(test_truncated_at_every_length) {
    make_dir();
    size_t n;
    uint8_t *b = small_checkpoint(&n);
    target t;
    target_init(&t);
    for (size_t len = 0; len < n; len++) {
        spit(path("cut.ckpt"), b, len);
        amp_status st = amp_checkpoint_load(path("cut.ckpt"), &t.w, 1, t.opt, t.sc);
        ck_assert_msg(st == AMP_ERR_CORRUPT, "length %zu of %zu: %s (%s)", len, n,
                      amp_status_name(st), amp_last_error());
        ck_assert_ptr_nonnull(strstr(amp_last_error(), path("cut.ckpt")));
        target_unchanged(&t);
    }
    spit(path("cut.ckpt"), b, 20);
    amp_checkpoint_load(path("cut.ckpt"), &t.w, 1, t.opt, t.sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "truncated"));
    spit(path("cut.ckpt"), b, n - 1);
    amp_checkpoint_load(path("cut.ckpt"), &t.w, 1, t.opt, t.sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "truncated: the header says"));
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, b, n);
    longer[n] = 0;
    spit(path("cut.ckpt"), longer, n + 1);
    ck_assert_int_eq(amp_checkpoint_load(path("cut.ckpt"), &t.w, 1, t.opt, t.sc), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "trailing bytes"));
    free(longer);
    target_free(&t);
    free(b);
    remove_dir();
}
END_TEST

START_TEST(test_every_flipped_byte) {
    make_dir();
    size_t n;
    uint8_t *b = small_checkpoint(&n);
    target t;
    target_init(&t);
    for (size_t i = 0; i < n; i++) {
        b[i] ^= 0x10;
        spit(path("flip.ckpt"), b, n);
        b[i] ^= 0x10;
        amp_status st = amp_checkpoint_load(path("flip.ckpt"), &t.w, 1, t.opt, t.sc);
        ck_assert_msg(st == AMP_ERR_CORRUPT, "byte %zu of %zu: %s (%s)", i, n, amp_status_name(st),
                      amp_last_error());
        target_unchanged(&t);
    }
    b[0] ^= 1;
    spit(path("flip.ckpt"), b, n);
    amp_checkpoint_load(path("flip.ckpt"), &t.w, 1, t.opt, t.sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "bad magic"));
    b[0] ^= 1;
    b[40] ^= 1;
    spit(path("flip.ckpt"), b, n);
    amp_checkpoint_load(path("flip.ckpt"), &t.w, 1, t.opt, t.sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "CRC mismatch"));
    b[40] ^= 1;
    b[8] = 5; // version
    spit(path("flip.ckpt"), b, n);
    amp_checkpoint_load(path("flip.ckpt"), &t.w, 1, t.opt, t.sc);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "unsupported version 5"));
    target_free(&t);
    free(b);
    remove_dir();
}
END_TEST

// Records with values the scaler or optimizer refuses (CRC made valid): corrupt, and for the
// scaler the optimizer's hyperparameters, set just before, are put back.
START_TEST(test_bad_scaler_factors_undo) {
    make_dir();
    size_t n;
    uint8_t *b = small_checkpoint(&n);
    // The scaler record is last: body (32 bytes) then the CRC; growth_factor at body + 8.
    double half = 0.5;
    uint64_t u;
    memcpy(&u, &half, 8);
    put_le(b + n - 4 - 32 + 8, u, 8);
    fix_crc(b, n);
    spit(path("bad.ckpt"), b, n);
    target t;
    target_init(&t);
    ck_assert_int_eq(amp_checkpoint_load(path("bad.ckpt"), &t.w, 1, t.opt, t.sc), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "The growth factor must be > 1.0."));
    ck_assert_ptr_nonnull(strstr(amp_last_error(), path("bad.ckpt")));
    target_unchanged(&t);

    // A negative learning rate: the optimizer refuses it first.
    free(b);
    b = small_checkpoint(&n);
    uint8_t *opt_name = NULL;
    for (size_t i = 0; !opt_name && i + 9 <= n; i++)
        if (memcmp(b + i, "optimizer", 9) == 0) opt_name = b + i;
    ck_assert_ptr_nonnull(opt_name);
    put_le(opt_name + 9 + 8 + 4, 0xBFF0000000000000u, 8); // after name, body_len, kind: lr = -1
    fix_crc(b, n);
    spit(path("bad.ckpt"), b, n);
    ck_assert_int_eq(amp_checkpoint_load(path("bad.ckpt"), &t.w, 1, t.opt, t.sc), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "Invalid learning rate: -1"));
    target_unchanged(&t);
    target_free(&t);
    free(b);
    remove_dir();
}
END_TEST

// Step counts the next step could not increment (the optimizer's counter overflowed), the
// optimizer's and a parameter's own.
START_TEST(test_uncountable_steps) {
    make_dir();
    target t;
    target_init(&t);
    for (int k = 0; k < 2; k++) {
        size_t n;
        uint8_t *b = small_checkpoint(&n);
        uint8_t *opt_name = NULL;
        for (size_t i = 0; !opt_name && i + 9 <= n; i++)
            if (memcmp(b + i, "optimizer", 9) == 0) opt_name = b + i;
        ck_assert_ptr_nonnull(opt_name);
        // steps: after name, body_len, kind, lr, momentum, dampening, nesterov and four more
        // doubles; or in the state record of "w" that follows the 80-byte body (after its type,
        // name_len, name, body_len)
        put_le(opt_name + 9 + 8 + (k == 0 ? 64 : 80 + 4 + 4 + 1 + 8), INT64_MAX, 8);
        fix_crc(b, n);
        spit(path("steps.ckpt"), b, n);
        free(b);
        ck_assert_int_eq(amp_checkpoint_load(path("steps.ckpt"), &t.w, 1, t.opt, t.sc),
                         AMP_ERR_CORRUPT);
        ck_assert_ptr_nonnull(strstr(amp_last_error(), k == 0 ? "'optimizer': bad optimizer header"
                                                              : "'w': bad optimizer state header"));
        target_unchanged(&t);
    }
    target_free(&t);
    remove_dir();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Mismatches

START_TEST(test_wrong_shape) {
    make_dir();
    model a;
    model_init(&a, AMP_OPTIM_ADAM, 0, 1, true);
    ck_assert_int_eq(amp_checkpoint_save(path("m.ckpt"), a.p, 3, NULL, NULL), AMP_OK);
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    amp_tensor_t *p[3] = {test_param(ctx, AMP_DTYPE_F32, "fc.bias", 1, (int64_t[]){3}, 9),
                          test_param(ctx, AMP_DTYPE_F32, "fc.weight", 2, (int64_t[]){3, 2}, 9),
                          test_param(ctx, AMP_DTYPE_F16, NULL, 1, (int64_t[]){2}, 9)};
    ck_assert_int_eq(amp_checkpoint_load(path("m.ckpt"), p, 3, NULL, NULL), AMP_ERR_MISMATCH);
    char want[256];
    snprintf(want, sizeof want,
             "checkpoint '%s': parameter 'fc.weight' has shape (2, 3) in the file, (3, 2) here",
             path("m.ckpt"));
    ck_assert_str_eq(amp_last_error(), want);
    float bias[3];
    amp_tensor_read_f32(p[0], bias);
    ck_assert_float_eq(bias[0], 9); // fc.bias matched but was not written

    // Same shape, other dtype; a missing name; a different count.
    p[1] = test_param(ctx, AMP_DTYPE_F32, "fc.weight", 2, (int64_t[]){2, 3}, 9);
    p[2] = test_param(ctx, AMP_DTYPE_F32, NULL, 1, (int64_t[]){2}, 9);
    ck_assert_int_eq(amp_checkpoint_load(path("m.ckpt"), p, 3, NULL, NULL), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(
        strstr(amp_last_error(), "parameter 'param.2' is f16 in the file, f32 here"));
    amp_tensor_set_name(p[2], "other");
    ck_assert_int_eq(amp_checkpoint_load(path("m.ckpt"), p, 3, NULL, NULL), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "has no parameter 'other'"));
    ck_assert_int_eq(amp_checkpoint_load(path("m.ckpt"), p, 2, NULL, NULL), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "holds 3 parameters, the model has 2"));
    amp_ctx_free(ctx);
    model_free(&a);
    remove_dir();
}
END_TEST

START_TEST(test_optimizer_mismatch) {
    make_dir();
    model a, b, c;
    model_init(&a, AMP_OPTIM_ADAM, 0, 1, true);
    model_init(&b, AMP_OPTIM_SGD, 0, 2, true);
    model_init(&c, AMP_OPTIM_SGD, 0.9f, 2, true);
    ck_assert_int_eq(amp_checkpoint_save(path("adam.ckpt"), a.p, 3, a.opt, a.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("adam.ckpt"), b.p, 3, b.opt, b.sc), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "holds adam state, the optimizer is sgd"));
    ck_assert_int_eq(amp_checkpoint_save(path("sgd.ckpt"), b.p, 3, b.opt, b.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("sgd.ckpt"), c.p, 3, c.opt, c.sc), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "0 state tensors per parameter in the file, 1"));
    ck_assert_int_eq(amp_checkpoint_save(path("none.ckpt"), a.p, 3, NULL, a.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("none.ckpt"), b.p, 3, b.opt, b.sc), AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "has no optimizer state"));
    // Without an optimizer to load into, its state in the file is ignored.
    ck_assert_int_eq(amp_checkpoint_load(path("adam.ckpt"), b.p, 3, NULL, b.sc), AMP_OK);
    model_free(&a);
    model_free(&b);
    model_free(&c);
    remove_dir();
}
END_TEST

START_TEST(test_scaler_mismatch) {
    make_dir();
    model off, on;
    model_init(&off, AMP_OPTIM_SGD, 0, 1, false);
    model_init(&on, AMP_OPTIM_SGD, 0, 2, true);
    ck_assert_int_eq(amp_checkpoint_save(path("off.ckpt"), off.p, 3, off.opt, off.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("off.ckpt"), on.p, 3, on.opt, on.sc),
                     AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(),
                                 "The source state dict is empty, possibly because it was saved "
                                 "from a disabled instance of GradScaler."));
    ck_assert_int_eq(amp_checkpoint_save(path("nosc.ckpt"), off.p, 3, off.opt, NULL), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("nosc.ckpt"), on.p, 3, on.opt, on.sc),
                     AMP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "has no GradScaler state"));
    // A disabled scaler loads nothing (PyTorch: a no-op), whatever the file holds.
    ck_assert_int_eq(amp_checkpoint_save(path("on.ckpt"), on.p, 3, on.opt, on.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("on.ckpt"), off.p, 3, off.opt, off.sc), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("nosc.ckpt"), off.p, 3, off.opt, off.sc), AMP_OK);
    ck_assert_float_eq(amp_scaler_get_scale(off.sc), 1);
    // which of them holds an enabled GradScaler's state (an fp16 run's), loading nothing
    bool enabled = false;
    ck_assert_int_eq(amp_checkpoint_scaler_enabled(path("on.ckpt"), &enabled), AMP_OK);
    ck_assert(enabled);
    ck_assert_int_eq(amp_checkpoint_scaler_enabled(path("off.ckpt"), &enabled), AMP_OK);
    ck_assert(!enabled);
    enabled = true;
    ck_assert_int_eq(amp_checkpoint_scaler_enabled(path("nosc.ckpt"), &enabled), AMP_OK);
    ck_assert(!enabled);
    ck_assert_int_eq(amp_checkpoint_scaler_enabled(path("none.ckpt"), &enabled), AMP_ERR_IO);
    model_free(&off);
    model_free(&on);
    remove_dir();
}
END_TEST

START_TEST(test_duplicate_names_refused) {
    make_dir();
    model a;
    model_init(&a, AMP_OPTIM_SGD, 0, 1, true);
    amp_tensor_set_name(a.p[2], "fc.bias");
    ck_assert_int_eq(amp_checkpoint_save(path("d.ckpt"), a.p, 3, NULL, NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(
        strstr(amp_last_error(), "params[1] and params[2] are both named 'fc.bias'"));
    ck_assert_int_eq(access(path("d.ckpt"), F_OK), -1);
    model_free(&a);
    remove_dir();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// I/O errors

START_TEST(test_io_errors) {
    make_dir();
    target t;
    target_init(&t);
    ck_assert_int_eq(amp_checkpoint_load(path("missing.ckpt"), &t.w, 1, NULL, NULL), AMP_ERR_IO);
    char want[256];
    snprintf(want, sizeof want, "cannot open checkpoint '%s': No such file or directory",
             path("missing.ckpt"));
    ck_assert_str_eq(amp_last_error(), want);
    ck_assert_int_eq(amp_checkpoint_load(dir, &t.w, 1, NULL, NULL), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "not a regular file"));

    ck_assert_int_eq(amp_checkpoint_save(path("no/such/dir.ckpt"), &t.w, 1, NULL, NULL),
                     AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "no/such/dir.ckpt"));
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "No such file or directory"));
    // a directory that takes no new file (sysfs refuses one even to root, where it is mounted)
    // is named as the cause
    struct stat sys;
    if (stat("/sys/kernel", &sys) == 0) {
        ck_assert_int_eq(amp_checkpoint_save("/sys/x.ckpt", &t.w, 1, NULL, NULL), AMP_ERR_IO);
        ck_assert_msg(strncmp(amp_last_error(),
                              "cannot write checkpoint '/sys/x.ckpt': no file "
                              "can be made in its directory '/sys' (",
                              84) == 0,
                      "%s", amp_last_error()); // (Permission denied, or a read-only file system)
    }
    // Over a directory, a pipe or a device: refused before anything is written, the file stays
    ck_assert_int_eq(amp_checkpoint_save(dir, &t.w, 1, NULL, NULL), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "not a regular file (a directory)"));
    ck_assert_int_eq(access(dir, F_OK), 0);
    ck_assert_int_eq(mkfifo(path("pipe"), 0600), 0);
    ck_assert_int_eq(amp_checkpoint_save(path("pipe"), &t.w, 1, NULL, NULL), AMP_ERR_IO);
    ck_assert_int_eq(amp_checkpoint_writable(path("pipe")), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "not a regular file (a device, a pipe"));
    struct stat sb;
    ck_assert(stat(path("pipe"), &sb) == 0 && S_ISFIFO(sb.st_mode));
    ck_assert_int_eq(amp_checkpoint_save("/dev/null", &t.w, 1, NULL, NULL), AMP_ERR_IO);
    ck_assert(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    // loading from a pipe no writer opens is refused, not waited on
    ck_assert_int_eq(amp_checkpoint_load(path("pipe"), &t.w, 1, NULL, NULL), AMP_ERR_IO);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "not a regular file"));
    unlink(path("pipe"));
    target_unchanged(&t);
    target_free(&t);
    remove_dir();
}
END_TEST

// A save through a symbolic link replaces the file it names (the link stays a link), or makes it;
// a file of the user's named like a temporary file (PATH.tmp) is left alone.
START_TEST(test_save_through_a_link_and_beside_other_files) {
    make_dir();
    target t;
    target_init(&t);
    ck_assert_int_eq(symlink("real.ckpt", path("link.ckpt")), 0); // (relative to the link)
    ck_assert_int_eq(amp_checkpoint_save(path("link.ckpt"), &t.w, 1, NULL, NULL), AMP_OK);
    struct stat sb; // a link to nothing yet: the file it names is made, as open() would
    ck_assert(lstat(path("link.ckpt"), &sb) == 0 && S_ISLNK(sb.st_mode));
    ck_assert(lstat(path("real.ckpt"), &sb) == 0 && S_ISREG(sb.st_mode));
    FILE *f = fopen(path("real.ckpt"), "w");
    fputs("old", f);
    fclose(f);
    f = fopen(path("link.ckpt.tmp"), "w");
    fputs("notes", f);
    fclose(f);
    ck_assert_int_eq(amp_checkpoint_writable(path("link.ckpt")), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_save(path("link.ckpt"), &t.w, 1, NULL, NULL), AMP_OK);
    ck_assert(lstat(path("link.ckpt"), &sb) == 0 && S_ISLNK(sb.st_mode));
    ck_assert(stat(path("real.ckpt"), &sb) == 0 && sb.st_size > 24); // (not "old")
    ck_assert(stat(path("link.ckpt.tmp"), &sb) == 0 && sb.st_size == 5);
    ck_assert_int_eq(amp_checkpoint_load(path("link.ckpt"), &t.w, 1, NULL, NULL), AMP_OK);
    unlink(path("link.ckpt"));
    unlink(path("link.ckpt.tmp"));
    unlink(path("real.ckpt"));
    target_free(&t);
    remove_dir();
}
END_TEST

// A save over a file keeps its permission bits (a private 0600 checkpoint stayed private only
// until the first save over it: the new file was 0644).
START_TEST(test_save_over_a_file_keeps_its_mode) {
    make_dir();
    target t;
    target_init(&t);
    const char *ck = path("mode.ckpt");
    spit(ck, "old", 3);
    ck_assert_int_eq(chmod(ck, 0600), 0);
    ck_assert_int_eq(amp_checkpoint_save(ck, &t.w, 1, t.opt, t.sc), AMP_OK);
    struct stat sb;
    ck_assert(stat(ck, &sb) == 0 && sb.st_size > 24);
    ck_assert_uint_eq(sb.st_mode & 07777, 0600);
    ck_assert_int_eq(amp_checkpoint_load(ck, &t.w, 1, t.opt, t.sc), AMP_OK);
    target_free(&t);
    remove_dir();
}
END_TEST

// A non-contiguous view among the parameters is refused by save and by load, naming it, before
// anything changes (a load wrote the parameters before it, then aborted on it).
START_TEST(test_views_are_refused) {
    make_dir();
    target t;
    target_init(&t);
    amp_tensor_t *m = test_param(t.ctx, AMP_DTYPE_F32, "m", 2, (int64_t[]){2, 3}, 1);
    amp_tensor_t *ps[2] = {t.w, amp_transpose(t.ctx, m, 0, 1)};
    ck_assert_int_eq(amp_checkpoint_save(path("v.ckpt"), ps, 2, NULL, NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "checkpoint: params[1] ('param.1') is a non-contiguous "
                                       "view; checkpoints hold whole tensors (pass the tensor it "
                                       "views)");
    ck_assert_int_eq(access(path("v.ckpt"), F_OK), -1);
    amp_tensor_t *whole[2] = {t.w, m};
    ck_assert_int_eq(amp_checkpoint_save(path("v.ckpt"), whole, 2, NULL, NULL), AMP_OK);
    float w[2] = {-1, -2};
    amp_tensor_write_f32(t.w, w);
    amp_tensor_t *tm = amp_transpose(t.ctx, m, 0, 1);
    amp_tensor_set_name(tm, "m");
    amp_tensor_t *into[2] = {t.w, tm};
    ck_assert_int_eq(amp_checkpoint_load(path("v.ckpt"), into, 2, NULL, NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "params[1] ('m') is a non-contiguous view"));
    amp_tensor_read_f32(t.w, w);
    ck_assert(w[0] == -1 && w[1] == -2);
    target_free(&t);
    remove_dir();
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Hand-built files in the documented format

typedef struct buf {
    uint8_t b[512];
    size_t n;
} buf;

static void b_put(buf *b, uint64_t v, int bytes) {
    put_le(b->b + b->n, v, bytes);
    b->n += (size_t)bytes;
}

static void b_str(buf *b, const char *s) {
    memcpy(b->b + b->n, s, strlen(s));
    b->n += strlen(s);
}

// Header for n_records, then the records in rec; payload_bytes from rec; CRC appended.
static void b_file(buf *out, uint32_t n_records, const buf *rec) {
    out->n = 0;
    b_str(out, "AMPCKPT1");
    b_put(out, 1, 4);
    b_put(out, n_records, 4);
    b_put(out, rec->n, 8);
    memcpy(out->b + out->n, rec->b, rec->n);
    out->n += rec->n;
    b_put(out, crc32_bitwise(out->b, out->n), 4);
}

// A PARAM record: its tensor header, count floats of 1.5 and extra zero bytes.
static void b_param(buf *r, const char *name, uint32_t dtype, uint32_t ndim, const uint64_t *shape,
                    int count, int extra) {
    b_put(r, 1, 4);
    b_put(r, strlen(name), 4);
    b_str(r, name);
    b_put(r, 8 + 8 * (uint64_t)ndim + 4 * (uint64_t)count + (uint64_t)extra, 8);
    b_put(r, dtype, 4);
    b_put(r, ndim, 4);
    for (uint32_t d = 0; d < ndim; d++)
        b_put(r, shape[d], 8);
    for (int i = 0; i < count; i++)
        b_put(r, 0x3FC00000u, 4);
    for (int i = 0; i < extra; i++)
        b_put(r, 0, 1);
}

static amp_status load_built(const buf *f, target *t) {
    spit(path("built.ckpt"), f->b, f->n);
    return amp_checkpoint_load(path("built.ckpt"), &t->w, 1, NULL, NULL);
}

START_TEST(test_hand_built_files) {
    make_dir();
    target t;
    target_init(&t);
    buf r = {0}, f;
    const uint64_t two[1] = {2};

    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0); // a valid file: the format as documented
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_OK);
    float w[2];
    amp_tensor_read_f32(t.w, w);
    ck_assert(w[0] == 1.5f && w[1] == 1.5f);

    // n_records far beyond what the payload can hold
    b_file(&f, 0xFFFFFFFFu, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // a name length past the end
    r.n = 0;
    b_put(&r, 1, 4);
    b_put(&r, 0xFFFFFFFFu, 4);
    b_put(&r, 0, 8);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // a body length past the end
    r.n = 0;
    b_put(&r, 1, 4);
    b_put(&r, 1, 4);
    b_str(&r, "w");
    b_put(&r, 1ull << 63, 8);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "runs past the end"));
    // too many dims; a shape whose element count overflows; a negative dim; a bad dtype
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 7, (uint64_t[]){1, 1, 1, 1, 1, 1, 2}, 2, 0);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 3, (uint64_t[]){(1ull << 62) + 1, 2, 2}, 4, 0); // wraps to 4
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 1, (uint64_t[]){~0ull}, 2, 0);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    r.n = 0;
    b_param(&r, "w", 99, 1, two, 2, 0);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // a body longer than its tensor
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 3);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // the same name twice
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
    b_file(&f, 2, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "duplicate name"));
    // bytes after the last record
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
    b_put(&r, 0, 4);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // an unknown record type
    r.n = 0;
    b_put(&r, 9, 4);
    b_put(&r, 1, 4);
    b_str(&r, "x");
    b_put(&r, 0, 8);
    b_file(&f, 1, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // an optimizer record that promises one parameter state and has none
    r.n = 0;
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
    b_put(&r, 2, 4);
    b_put(&r, 9, 4);
    b_str(&r, "optimizer");
    b_put(&r, 52, 8);
    for (int i = 0; i < 9; i++)
        b_put(&r, 0, 4); // sgd, all zero
    b_put(&r, 0, 8);     // steps
    b_put(&r, 1, 4);     // n_params
    b_put(&r, 0, 4);     // n_state
    b_file(&f, 2, &r);
    ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
    // two STEP records; one whose count cannot grow
    for (int twice = 0; twice < 2; twice++) {
        r.n = 0;
        b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
        for (int k = 0; k <= twice; k++) {
            b_put(&r, 5, 4);
            b_put(&r, 4, 4);
            b_str(&r, "step");
            b_put(&r, 8, 8);
            b_put(&r, twice ? 7 : INT64_MAX, 8);
        }
        b_file(&f, 2 + (uint32_t)twice, &r);
        ck_assert_int_eq(load_built(&f, &t), AMP_ERR_CORRUPT);
        ck_assert_ptr_nonnull(
            strstr(amp_last_error(), twice ? "a second step record" : "bad step record"));
    }
    target_free(&t);
    remove_dir();
}
END_TEST

// A version 1 file (the optimizer's hyperparameters in f32) still loads, widened to doubles; a
// version 2 file keeps a double such as lr = 0.1 exactly (as a Python float), not as 0.1f.
START_TEST(test_version_1_and_double_hyperparameters) {
    make_dir();
    target t;
    target_init(&t);
    buf r = {0}, f;
    const uint64_t two[1] = {2};
    b_param(&r, "w", AMP_DTYPE_F32, 1, two, 2, 0);
    b_put(&r, 2, 4); // OPTIM
    b_put(&r, 9, 4);
    b_str(&r, "optimizer");
    b_put(&r, 52, 8);
    b_put(&r, AMP_OPTIM_SGD, 4);
    b_put(&r, 0x3F000000u, 4); // lr 0.5f
    b_put(&r, 0x3E800000u, 4); // momentum 0.25f
    b_put(&r, 0, 4);           // dampening
    b_put(&r, 0, 4);           // nesterov
    for (int i = 0; i < 4; i++)
        b_put(&r, 0, 4); // weight_decay, beta1, beta2, eps
    b_put(&r, 3, 8);     // steps
    b_put(&r, 1, 4);     // n_params
    b_put(&r, 1, 4);     // n_state
    b_put(&r, 3, 4);     // OPTIM_STATE of w: steps, one state tensor of two 1.5s
    b_put(&r, 1, 4);
    b_str(&r, "w");
    b_put(&r, 8 + 4 + 8 + 8 + 8, 8);
    b_put(&r, 3, 8);
    b_put(&r, 1, 4);
    b_put(&r, AMP_DTYPE_F32, 4);
    b_put(&r, 1, 4);
    b_put(&r, 2, 8);
    b_put(&r, 0x3FC00000u, 4);
    b_put(&r, 0x3FC00000u, 4);
    b_file(&f, 3, &r);
    spit(path("v1.ckpt"), f.b, f.n);
    amp_ctx_set_rng_state(t.ctx, (amp_rng_state){11, 12, 13});
    ck_assert_msg(amp_checkpoint_load(path("v1.ckpt"), &t.w, 1, t.opt, NULL) == AMP_OK, "%s",
                  amp_last_error());
    amp_rng_state rng = amp_ctx_rng_state(t.ctx); // no RNG record: the context's stays
    ck_assert(rng.seed == 11 && rng.host == 12 && rng.dropout_offset == 13);
    ck_assert(amp_optim_get_params(t.opt)->lr == 0.5 &&
              amp_optim_get_params(t.opt)->momentum == 0.25);
    ck_assert_int_eq(amp_optim_steps(t.opt), 3);
    int64_t next = 0; // no STEP record before version 3
    ck_assert_int_eq(amp_checkpoint_next_step(path("v1.ckpt"), &next), AMP_OK);
    ck_assert_int_eq(next, -1);
    float buf_v[2];
    amp_tensor_read_f32(amp_optim_state(t.opt, 0, 0), buf_v);
    ck_assert(buf_v[0] == 1.5f && buf_v[1] == 1.5f);

    amp_optim_params p = *amp_optim_get_params(t.opt);
    p.lr = 0.1;
    p.momentum = 0.9;
    ck_assert_int_eq(amp_optim_set_params(t.opt, &p), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_save(path("v2.ckpt"), &t.w, 1, t.opt, NULL), AMP_OK);
    p.lr = 0.3;
    p.momentum = 0.5;
    ck_assert_int_eq(amp_optim_set_params(t.opt, &p), AMP_OK);
    ck_assert_int_eq(amp_checkpoint_load(path("v2.ckpt"), &t.w, 1, t.opt, NULL), AMP_OK);
    ck_assert(amp_optim_get_params(t.opt)->lr == 0.1 &&
              amp_optim_get_params(t.opt)->momentum == 0.9);
    target_free(&t);
    remove_dir();
}
END_TEST

// A hostile file of many small records whose last repeats the first one's name: the duplicate is
// found by sorting (comparing every pair took minutes for a few MB of records).
START_TEST(test_many_records_one_duplicate) {
    make_dir();
    enum { HEADER = 24, N = 200000, REC = 4 + 4 + 10 + 8 + 10 }; // REC: type, name, body
    const size_t n = HEADER + (size_t)N * REC + 4;
    uint8_t *b = calloc(n, 1), *p = b + HEADER;
    memcpy(b, "AMPCKPT1", 8);
    put_le(b + 8, 1, 4);
    put_le(b + 12, N, 4);
    put_le(b + 16, (uint64_t)N * REC, 8);
    for (int i = 0; i < N; i++, p += REC) {
        char name[16];
        snprintf(name, sizeof name, "p%09d", i == N - 1 ? 0 : i);
        put_le(p, 1, 4); // PARAM
        put_le(p + 4, 10, 4);
        memcpy(p + 8, name, 10);
        put_le(p + 18, 10, 8);
        put_le(p + 26, AMP_DTYPE_F16, 4); // ndim 0: one element, zero
    }
    fix_crc(b, n);
    spit(path("many.ckpt"), b, n);
    free(b);
    target t;
    target_init(&t);
    ck_assert_int_eq(amp_checkpoint_load(path("many.ckpt"), &t.w, 1, t.opt, t.sc), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "record 'p000000000': duplicate name"));
    target_unchanged(&t);
    target_free(&t);
    remove_dir();
}
END_TEST

// A large file that is no checkpoint (sparse, 1 TiB) is refused by its header before it would be
// read into memory (an allocation that failed: an abort inside the caller's process).
START_TEST(test_large_foreign_file) {
    make_dir();
    FILE *f = fopen(path("big.bin"), "wb");
    ck_assert_ptr_nonnull(f);
    fputs("not a checkpoint", f);
    ck_assert_int_eq(ftruncate(fileno(f), (off_t)1 << 40), 0);
    fclose(f);
    target t;
    target_init(&t);
    ck_assert_int_eq(amp_checkpoint_load(path("big.bin"), &t.w, 1, t.opt, t.sc), AMP_ERR_CORRUPT);
    ck_assert_ptr_nonnull(strstr(amp_last_error(), "big.bin': bad magic"));
    target_unchanged(&t);
    target_free(&t);
    remove_dir();
}
END_TEST

Suite *checkpoint_suite(void) {
    Suite *s = suite_create("checkpoint");
    TCase *tc = tcase_create("round_trip");
    tcase_add_test(tc, test_round_trip_adam);
    tcase_add_test(tc, test_round_trip_sgd_momentum);
    tcase_add_test(tc, test_round_trip_params_only);
    tcase_add_test(tc, test_resume_with_dropout_is_exact);
    tcase_add_test(tc, test_small_checkpoint_loads);
    suite_add_tcase(s, tc);
    tc = tcase_create("damaged");
    tcase_add_test(tc, test_truncated_at_every_length);
    tcase_add_test(tc, test_every_flipped_byte);
    tcase_add_test(tc, test_bad_scaler_factors_undo);
    tcase_add_test(tc, test_uncountable_steps);
    tcase_add_test(tc, test_hand_built_files);
    tcase_add_test(tc, test_version_1_and_double_hyperparameters);
    tcase_add_test(tc, test_many_records_one_duplicate);
    tcase_add_test(tc, test_large_foreign_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("mismatch");
    tcase_add_test(tc, test_wrong_shape);
    tcase_add_test(tc, test_optimizer_mismatch);
    tcase_add_test(tc, test_scaler_mismatch);
    tcase_add_test(tc, test_duplicate_names_refused);
    tcase_add_test(tc, test_io_errors);
    tcase_add_test(tc, test_save_through_a_link_and_beside_other_files);
    tcase_add_test(tc, test_save_over_a_file_keeps_its_mode);
    tcase_add_test(tc, test_views_are_refused);
    suite_add_tcase(s, tc);
    return s;
}
