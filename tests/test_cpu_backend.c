/*
 * test_cpu_backend.c — the `cpu_backend` suite: every member of the CPU reference backend's table,
 * called directly on hand-built tensors (no context), against naive loops and double-precision
 * formulas: dtype-converting strided copies, unary ops and their PyTorch derivatives, broadcast
 * binary ops, reduce_sum, the blocked GEMM (f32/f16/bf16, transposes, batches, bias, alpha/beta,
 * every blocking edge), softmax, layer_norm, embedding, im2col/col2im, max_pool2d, nll_loss,
 * masked_fill, dropout, the GradScaler unscale kernel (AMP-SEMANTICS §6 U1-U5) and the optimizer
 * step. Broken invariants (an out-of-range index) must abort.
 */
#include "tests.h"

#include "amp-impl.h"

#include <signal.h>
#include <string.h>

#define F32 AMP_DTYPE_F32
#define F16 AMP_DTYPE_F16
#define BF16 AMP_DTYPE_BF16
#define I32 AMP_DTYPE_I32
#define I64 AMP_DTYPE_I64

// ---------------------------------------------------------------------------------------------
// Fixture: the backend, and every tensor a test makes (freed in teardown so ASan sees no leak).

static const amp_backend_i *be;
static void *bctx;
static amp_tensor_t *made[256];
static int n_made;

static void setup(void) {
    be = amp_cpu_backend();
    bctx = amp_cpu_backend_init();
    n_made = 0;
}

static void teardown(void) {
    for (int i = 0; i < n_made; i++) {
        amp_tensor_t *t = made[i];
        if (!t->is_view) {
            be->free(bctx, t->buf->data);
            free(t->buf);
        }
        free(t);
    }
    be->release(bctx);
}

static amp_tensor_t *track(amp_tensor_t *t) {
    ck_assert_int_lt(n_made, (int)(sizeof made / sizeof made[0]));
    made[n_made++] = t;
    return t;
}

static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

// A zero-filled contiguous tensor with ctx = NULL.
static amp_tensor_t *tnew(amp_dtype dt, int ndim, const int64_t *shape) {
    amp_tensor_t *t = calloc(1, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->stride[d] = s;
        s *= shape[d];
    }
    t->buf = calloc(1, sizeof *t->buf);
    t->buf->refcount = 1;
    t->buf->nbytes = (size_t)s * amp_dtype_size(dt);
    t->buf->data = be->alloc(bctx, t->buf->nbytes); // uninitialised: zero it like the frontend
    memset(t->buf->data, 0, t->buf->nbytes);
    t->layer = -1;
    return track(t);
}

// A view of t's storage with its own shape, strides and offset.
static amp_tensor_t *tview(const amp_tensor_t *t, int ndim, const int64_t *shape,
                           const int64_t *stride, int64_t offset) {
    amp_tensor_t *v = calloc(1, sizeof *v);
    *v = *t;
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(v->stride, stride, (size_t)ndim * sizeof *stride);
    v->offset = offset;
    v->is_view = true;
    return track(v);
}

// Element i of t's storage (from the tensor's offset), as float / set from a float (rounded).
static float tget(const amp_tensor_t *t, int64_t i) {
    const char *p = amp_tensor_ptr(t);
    switch (t->dtype) {
    case F32:
        return ((const float *)p)[i];
    case F16:
        return amp_f16_to_f32(((const uint16_t *)p)[i]);
    case BF16:
        return amp_bf16_to_f32(((const uint16_t *)p)[i]);
    case I32:
        return (float)((const int32_t *)p)[i];
    default:
        return (float)((const int64_t *)p)[i];
    }
}

static void tset(amp_tensor_t *t, int64_t i, float v) {
    char *p = amp_tensor_ptr(t);
    switch (t->dtype) {
    case F32:
        ((float *)p)[i] = v;
        break;
    case F16:
        ((uint16_t *)p)[i] = amp_f32_to_f16(v);
        break;
    case BF16:
        ((uint16_t *)p)[i] = amp_f32_to_bf16(v);
        break;
    case I32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    default:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    }
}

static uint64_t rng_state;

// Uniform in [lo, hi), deterministic per test.
static float frand(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)(rng_state >> 40) * (1.0f / 16777216.0f);
}

static amp_tensor_t *trand(amp_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    amp_tensor_t *t = tnew(dt, ndim, shape);
    for (int64_t i = 0; i < numel_of(ndim, shape); i++)
        tset(t, i, frand(lo, hi));
    return t;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// ---------------------------------------------------------------------------------------------
// Table, memory, copy, fill

START_TEST(test_table_and_memory) {
    ck_assert_str_eq(be->name, "cpu");
#define REQUIRED(member) ck_assert_msg(be->member != NULL, "%s is NULL", #member)
    REQUIRED(alloc);
    REQUIRED(free);
    REQUIRED(upload);
    REQUIRED(download);
    REQUIRED(copy);
    REQUIRED(fill);
    REQUIRED(unary);
    REQUIRED(unary_backward);
    REQUIRED(binary);
    REQUIRED(reduce_sum);
    REQUIRED(gemm);
    REQUIRED(softmax);
    REQUIRED(softmax_backward);
    REQUIRED(layer_norm);
    REQUIRED(layer_norm_backward);
    REQUIRED(embedding);
    REQUIRED(embedding_backward);
    REQUIRED(im2col);
    REQUIRED(col2im);
    REQUIRED(max_pool2d);
    REQUIRED(max_pool2d_backward);
    REQUIRED(nll_loss);
    REQUIRED(nll_loss_backward);
    REQUIRED(masked_fill);
    REQUIRED(dropout_mask);
    REQUIRED(unscale);
    REQUIRED(optim_step);
    REQUIRED(release);
#undef REQUIRED
    unsigned char *p = be->alloc(bctx, 1000);
    unsigned char host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (unsigned char)(i * 7);
    be->upload(bctx, p, host, sizeof host);
    be->download(bctx, back, p, sizeof back);
    ck_assert_mem_eq(back, host, sizeof host);
    be->free(bctx, p);
}
END_TEST

// A permuted, offset, broadcast f32 view copied into contiguous f16/bf16/f32/i32 tensors.
START_TEST(test_copy_strided_convert) {
    rng_state = 1;
    amp_tensor_t *base = trand(F32, 1, (int64_t[]){200}, -300.0f, 300.0f);
    // view (3, 4, 5): dim 0 broadcast, dims 1 and 2 transposed, offset 7
    int64_t shape[3] = {3, 4, 5}, stride[3] = {0, 1, 6};
    amp_tensor_t *src = tview(base, 3, shape, stride, 7);
    const amp_dtype dts[] = {F32, F16, BF16, I32, I64};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        amp_tensor_t *dst = tnew(dts[k], 3, shape);
        be->copy(bctx, dst, src);
        for (int64_t a = 0; a < 3; a++)
            for (int64_t b = 0; b < 4; b++)
                for (int64_t c = 0; c < 5; c++) {
                    float v = tget(base, 7 + b * 1 + c * 6);
                    float want =
                        dts[k] == I32 || dts[k] == I64 ? truncf(v) : amp_round_to(dts[k], v);
                    ck_assert_float_eq(tget(dst, (a * 4 + b) * 5 + c), want);
                }
    }
}
END_TEST

START_TEST(test_copy_bit_exact_and_ints) {
    // same dtype: bits, NaN payloads included
    amp_tensor_t *h = tnew(F16, 1, (int64_t[]){3});
    uint16_t hb[3] = {0x7E01, 0xFC00, 0x8000};
    memcpy(amp_tensor_ptr(h), hb, sizeof hb);
    amp_tensor_t *h2 = tnew(F16, 1, (int64_t[]){3});
    be->copy(bctx, h2, h);
    ck_assert_mem_eq(amp_tensor_ptr(h2), hb, sizeof hb);
    // i64 -> i64 and i64 -> i32 without a detour through float
    amp_tensor_t *l = tnew(I64, 1, (int64_t[]){2});
    ((int64_t *)amp_tensor_ptr(l))[0] = (1ll << 53) + 1;
    ((int64_t *)amp_tensor_ptr(l))[1] = -123456789;
    amp_tensor_t *l2 = tnew(I64, 1, (int64_t[]){2}), *i2 = tnew(I32, 1, (int64_t[]){2});
    be->copy(bctx, l2, l);
    be->copy(bctx, i2, l);
    ck_assert_int_eq(((int64_t *)amp_tensor_ptr(l2))[0], (1ll << 53) + 1);
    ck_assert_int_eq(((int32_t *)amp_tensor_ptr(i2))[1], -123456789);
    // int -> float rounds like a C cast; float -> int truncates
    amp_tensor_t *f = tnew(F32, 1, (int64_t[]){2});
    be->copy(bctx, f, l);
    ck_assert_float_eq(tget(f, 0), (float)((1ll << 53) + 1));
    amp_tensor_t *fi = tnew(F32, 1, (int64_t[]){2}), *ii = tnew(I32, 1, (int64_t[]){2});
    tset(fi, 0, -2.7f);
    tset(fi, 1, 3.99f);
    be->copy(bctx, ii, fi);
    ck_assert_int_eq(((int32_t *)amp_tensor_ptr(ii))[0], -2);
    ck_assert_int_eq(((int32_t *)amp_tensor_ptr(ii))[1], 3);
}
END_TEST

START_TEST(test_fill) {
    amp_tensor_t *h = tnew(F16, 2, (int64_t[]){3, 5}), *b = tnew(BF16, 1, (int64_t[]){4}),
                 *i = tnew(I32, 1, (int64_t[]){4});
    be->fill(bctx, h, 0.1f);
    be->fill(bctx, b, 0.1f);
    be->fill(bctx, i, -7.9f);
    for (int k = 0; k < 15; k++)
        ck_assert_uint_eq(((uint16_t *)amp_tensor_ptr(h))[k], 0x2E66);
    for (int k = 0; k < 4; k++)
        ck_assert_uint_eq(((uint16_t *)amp_tensor_ptr(b))[k], 0x3DCD);
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(((int32_t *)amp_tensor_ptr(i))[k], -7);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Unary ops

static double unary_ref(amp_unary_op op, double a, double x) {
    const double c = sqrt(2.0 / M_PI);
    switch (op) {
    case AMP_UNARY_RELU:
        return x > 0 ? x : 0;
    case AMP_UNARY_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case AMP_UNARY_GELU_TANH:
        return 0.5 * x * (1 + tanh(c * (x + 0.044715 * x * x * x)));
    case AMP_UNARY_TANH:
        return tanh(x);
    case AMP_UNARY_SIGMOID:
        return 1 / (1 + exp(-x));
    case AMP_UNARY_EXP:
        return exp(x);
    case AMP_UNARY_LOG:
        return log(x);
    case AMP_UNARY_LOG1P:
        return log1p(x);
    case AMP_UNARY_POW:
        return pow(x, a);
    case AMP_UNARY_SCALE:
        return x * a;
    case AMP_UNARY_ADD_SCALAR:
        return x + a;
    case AMP_UNARY_CLAMP_MIN:
        return x < a ? a : x;
    }
    return NAN;
}

static double unary_grad_ref(amp_unary_op op, double a, double x) {
    const double c = sqrt(2.0 / M_PI);
    switch (op) {
    case AMP_UNARY_RELU:
        return x > 0;
    case AMP_UNARY_GELU:
        return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case AMP_UNARY_GELU_TANH: {
        double t = tanh(c * (x + 0.044715 * x * x * x));
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
    }
    case AMP_UNARY_TANH:
        return 1 - tanh(x) * tanh(x);
    case AMP_UNARY_SIGMOID:
        return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x)));
    case AMP_UNARY_EXP:
        return exp(x);
    case AMP_UNARY_LOG:
        return 1 / x;
    case AMP_UNARY_LOG1P:
        return 1 / (1 + x);
    case AMP_UNARY_POW:
        return a * pow(x, a - 1);
    case AMP_UNARY_SCALE:
        return a;
    case AMP_UNARY_ADD_SCALAR:
        return 1;
    case AMP_UNARY_CLAMP_MIN:
        return x >= a;
    }
    return NAN;
}

static const struct {
    amp_unary_op op;
    float alpha, lo, hi;
} unary_cases[] = {
    {AMP_UNARY_RELU, 0, -3, 3},          {AMP_UNARY_GELU, 0, -5, 5},
    {AMP_UNARY_GELU_TANH, 0, -5, 5},     {AMP_UNARY_TANH, 0, -4, 4},
    {AMP_UNARY_SIGMOID, 0, -8, 8},       {AMP_UNARY_EXP, 0, -5, 5},
    {AMP_UNARY_LOG, 0, 0.01f, 50},       {AMP_UNARY_LOG1P, 0, -0.99f, 50},
    {AMP_UNARY_POW, 2, -3, 3},           {AMP_UNARY_POW, 3, -3, 3},
    {AMP_UNARY_POW, 0.5f, 0.01f, 9},     {AMP_UNARY_POW, -1, 0.1f, 4},
    {AMP_UNARY_POW, 1.7f, 0.1f, 4},      {AMP_UNARY_SCALE, -0.3f, -9, 9},
    {AMP_UNARY_ADD_SCALAR, 2.5f, -9, 9}, {AMP_UNARY_CLAMP_MIN, 0.25f, -2, 2},
};

// Forward and backward of every op on f32, against double formulas; f16 storage rounds once.
START_TEST(test_unary_against_double) {
    const int64_t n = 1000;
    for (size_t c = 0; c < sizeof unary_cases / sizeof unary_cases[0]; c++) {
        rng_state = 10 + c;
        const amp_unary_op op = unary_cases[c].op;
        const float a = unary_cases[c].alpha;
        amp_tensor_t *x = trand(F32, 1, &n, unary_cases[c].lo, unary_cases[c].hi);
        amp_tensor_t *dy = trand(F32, 1, &n, -2, 2);
        amp_tensor_t *y = tnew(F32, 1, &n), *dx = tnew(F32, 1, &n), *yh = tnew(F16, 1, &n);
        be->unary(bctx, op, a, y, x);
        be->unary(bctx, op, a, yh, x);
        be->unary_backward(bctx, op, a, dx, dy, x, y, 0);
        for (int64_t i = 0; i < n; i++) {
            double xv = tget(x, i), want = unary_ref(op, a, xv);
            ck_assert_close(tget(y, i), want, 1e-6, 4e-6);
            ck_assert_float_eq(tget(yh, i), amp_round_to(F16, tget(y, i)));
            ck_assert_close(tget(dx, i), tget(dy, i) * unary_grad_ref(op, a, xv), 1e-6, 1e-5);
        }
    }
}
END_TEST

START_TEST(test_unary_special_values) {
    const int64_t n = 4;
    amp_tensor_t *x = tnew(F32, 1, &n), *y = tnew(F32, 1, &n), *dy = tnew(F32, 1, &n),
                 *dx = tnew(F32, 1, &n);
    const float xs[4] = {NAN, -0.5f, 2.0f, -INFINITY};
    for (int i = 0; i < 4; i++) {
        tset(x, i, xs[i]);
        tset(dy, i, 3.0f);
    }
    be->unary(bctx, AMP_UNARY_RELU, 0, y, x);
    ck_assert(isnan(tget(y, 0))); // relu(NaN) = NaN
    ck_assert_float_eq(tget(y, 1), 0.0f);
    ck_assert_float_eq(tget(y, 3), 0.0f);
    be->unary_backward(bctx, AMP_UNARY_RELU, 0, dx, dy, x, y, 0);
    ck_assert_float_eq(tget(dx, 0), 3.0f); // threshold_backward passes dy where y is NaN
    ck_assert_float_eq(tget(dx, 1), 0.0f);
    ck_assert_float_eq(tget(dx, 2), 3.0f);
    be->unary(bctx, AMP_UNARY_CLAMP_MIN, 1.0f, y, x);
    ck_assert(isnan(tget(y, 0)));
    ck_assert_float_eq(tget(y, 1), 1.0f);
    be->unary_backward(bctx, AMP_UNARY_CLAMP_MIN, 1.0f, dx, dy, x, y, 0);
    ck_assert_float_eq(tget(dx, 0), 0.0f); // nothing flows back through NaN
    ck_assert_float_eq(tget(dx, 2), 3.0f);
    be->unary(bctx, AMP_UNARY_SIGMOID, 0, y, x);
    ck_assert_float_eq(tget(y, 3), 0.0f);
    be->unary(bctx, AMP_UNARY_POW, 2.0f, y, x);
    ck_assert_float_eq(tget(y, 1), 0.25f);
    ck_assert_float_eq(tget(y, 3), INFINITY);
    be->unary_backward(bctx, AMP_UNARY_POW, 0.0f, dx, dy, x, y, 0);
    ck_assert_float_eq(tget(dx, 2), 0.0f); // d(x**0) = 0
    // in place (y aliases x), the frontend's scale of a gradient
    be->unary(bctx, AMP_UNARY_SCALE, -2.0f, x, x);
    ck_assert_float_eq(tget(x, 2), -4.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Binary and reduce_sum

START_TEST(test_binary_broadcast) {
    rng_state = 3;
    amp_tensor_t *a = trand(F16, 3, (int64_t[]){2, 3, 4}, -4, 4);
    amp_tensor_t *b0 = trand(BF16, 2, (int64_t[]){4, 3}, 0.5f, 3); // read transposed, broadcast
    int64_t shape[3] = {2, 3, 4};
    amp_tensor_t *b = tview(b0, 3, shape, (int64_t[]){0, 1, 3}, 0);
    const amp_binary_op ops[] = {AMP_BINARY_ADD, AMP_BINARY_SUB, AMP_BINARY_MUL, AMP_BINARY_DIV};
    for (int k = 0; k < 4; k++) {
        amp_tensor_t *y = tnew(F32, 3, shape), *yh = tnew(F16, 3, shape);
        be->binary(bctx, ops[k], y, a, b);
        be->binary(bctx, ops[k], yh, a, b);
        for (int64_t i = 0; i < 2; i++)
            for (int64_t j = 0; j < 3; j++)
                for (int64_t l = 0; l < 4; l++) {
                    int64_t at = (i * 3 + j) * 4 + l;
                    float av = tget(a, at), bv = tget(b0, l * 3 + j);
                    float want = k == 0 ? av + bv : k == 1 ? av - bv : k == 2 ? av * bv : av / bv;
                    ck_assert_float_eq(tget(y, at), want);
                    ck_assert_float_eq(tget(yh, at), amp_round_to(F16, want));
                }
    }
}
END_TEST

START_TEST(test_reduce_sum) {
    rng_state = 4;
    int64_t xs[3] = {4, 5, 6};
    amp_tensor_t *x = trand(F16, 3, xs, -2, 2);
    const int64_t outs[4][3] = {{1, 5, 1}, {4, 1, 6}, {1, 1, 1}, {4, 5, 1}};
    for (int k = 0; k < 4; k++) {
        amp_tensor_t *y = tnew(F32, 3, outs[k]);
        be->reduce_sum(bctx, y, x, 0.5f);
        for (int64_t yi = 0; yi < numel_of(3, outs[k]); yi++) {
            int64_t c[3] = {yi / (outs[k][1] * outs[k][2]), yi / outs[k][2] % outs[k][1],
                            yi % outs[k][2]};
            double want = 0;
            for (int64_t i = 0; i < 4; i++)
                for (int64_t j = 0; j < 5; j++)
                    for (int64_t l = 0; l < 6; l++) {
                        if ((outs[k][0] == 4 && i != c[0]) || (outs[k][1] == 5 && j != c[1]) ||
                            (outs[k][2] == 6 && l != c[2]))
                            continue;
                        want += tget(x, (i * 5 + j) * 6 + l);
                    }
            ck_assert_close(tget(y, yi), 0.5 * want, 1e-5, 1e-6);
        }
    }
}
END_TEST

// A million 0.1s: a running f32 sum drifts by ~1e-3 relative; the pairwise sum must not (the
// f16 input goes through the chunked conversion path).
START_TEST(test_reduce_sum_large_is_accurate) {
    const int64_t n = 1 << 20;
    const amp_dtype dts[2] = {F32, F16};
    for (int k = 0; k < 2; k++) {
        amp_tensor_t *x = tnew(dts[k], 2, (int64_t[]){n / 1024, 1024});
        amp_tensor_t *y = tnew(F32, 2, (int64_t[]){1, 1});
        be->fill(bctx, x, 0.1f);
        be->reduce_sum(bctx, y, x, 1.0f);
        ck_assert_close(tget(y, 0), (double)n * amp_round_to(dts[k], 0.1f), 0, 1e-6);
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// GEMM against a naive loop. The blocked GEMM sums over k in order in f32 and applies the same
// epilogue, so it must match the naive loop bit for bit whatever the blocking.

static void gemm_check(amp_dtype dt, int64_t batch, int64_t m, int64_t n, int64_t k, bool ta,
                       bool tb, bool shared_a, bool with_bias, float alpha, float beta) {
    const int64_t sa = shared_a ? 0 : m * k, sb = k * n, sc = m * n;
    const int64_t na = shared_a ? m * k : batch * m * k;
    amp_tensor_t *a = trand(dt, 1, &na, -1, 1);
    amp_tensor_t *b = trand(dt, 1, (int64_t[]){batch * k * n}, -1, 1);
    amp_tensor_t *c = trand(dt, 1, (int64_t[]){batch * m * n}, -1, 1);
    amp_tensor_t *bias = with_bias ? trand(dt, 1, &n, -1, 1) : NULL;
    float *c_old = malloc((size_t)(batch * m * n) * sizeof(float));
    for (int64_t i = 0; i < batch * m * n; i++)
        c_old[i] = tget(c, i);
    if (beta == 0.0f) be->fill(bctx, c, NAN); // C must not be read when beta is 0
    amp_gemm_desc d = {.batch = batch,
                       .m = m,
                       .n = n,
                       .k = k,
                       .trans_a = ta,
                       .trans_b = tb,
                       .stride_a = sa,
                       .stride_b = sb,
                       .stride_c = sc,
                       .alpha = alpha,
                       .beta = beta};
    be->gemm(bctx, &d, c, a, b, bias);
    for (int64_t bt = 0; bt < batch; bt++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float acc = 0;
                for (int64_t p = 0; p < k; p++) {
                    float av = tget(a, bt * sa + (ta ? p * m + i : i * k + p));
                    float bv = tget(b, bt * sb + (tb ? j * k + p : p * n + j));
                    acc += av * bv;
                }
                float v = alpha * acc;
                if (beta != 0.0f) v += beta * c_old[bt * sc + i * n + j];
                if (bias) v += tget(bias, j);
                const float want = amp_round_to(dt, v);
                const float got = tget(c, bt * sc + i * n + j);
                ck_assert_msg(
                    f32_bits(got) == f32_bits(want),
                    "%s b%lld m%lld n%lld k%lld ta%d tb%d at (%lld,%lld,%lld): %.9g vs %.9g",
                    amp_dtype_name(dt), (long long)batch, (long long)m, (long long)n, (long long)k,
                    ta, tb, (long long)bt, (long long)i, (long long)j, got, want);
            }
    free(c_old);
}

START_TEST(test_gemm_dtypes_transposes) {
    rng_state = 5;
    const amp_dtype dts[] = {F32, F16, BF16};
    for (int t = 0; t < 3; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                gemm_check(dts[t], 1, 13, 37, 29, ta, tb, false, false, 1, 0);
}
END_TEST

START_TEST(test_gemm_batch_bias_alpha_beta) {
    rng_state = 6;
    gemm_check(F32, 3, 9, 21, 17, false, true, true, true, 1.0f, 0.0f); // shared A, like conv
    gemm_check(F16, 2, 5, 40, 33, true, false, false, true, 0.5f, 0.75f);
    gemm_check(BF16, 2, 18, 7, 64, false, false, false, false, -2.0f, 1.0f);
    gemm_check(F32, 1, 3, 5, 0, false, false, false, true, 1.0f, 0.5f); // k = 0: beta C + bias
}
END_TEST

// Every blocking edge: k past one KC block, n past NC, m past MB, and ragged micro-tiles.
START_TEST(test_gemm_blocking_edges) {
    rng_state = 7;
    gemm_check(F32, 1, 7, 19, 700, false, false, false, true, 1, 0);
    gemm_check(F16, 1, 3, 1100, 40, false, true, false, true, 1, 0.5f);
    gemm_check(F32, 1, 530, 9, 20, true, false, false, false, 1, 0.5f);
    gemm_check(F32, 1, 1, 1, 1, false, false, false, true, 1, 0);
}
END_TEST

// Integer-valued operands make every order of summation exact: the result must be too.
START_TEST(test_gemm_exact_integers) {
    const int64_t m = 33, n = 70, k = 300;
    amp_tensor_t *a = tnew(F32, 2, (int64_t[]){m, k}), *b = tnew(F32, 2, (int64_t[]){k, n}),
                 *c = tnew(F32, 2, (int64_t[]){m, n});
    for (int64_t i = 0; i < m * k; i++)
        tset(a, i, (float)((i * 7) % 5 - 2));
    for (int64_t i = 0; i < k * n; i++)
        tset(b, i, (float)((i * 3) % 7 - 3));
    amp_gemm_desc d = {.batch = 1, .m = m, .n = n, .k = k, .alpha = 1.0f};
    be->gemm(bctx, &d, c, a, b, NULL);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t want = 0;
            for (int64_t p = 0; p < k; p++)
                want += (int64_t)tget(a, i * k + p) * (int64_t)tget(b, p * n + j);
            ck_assert_float_eq(tget(c, i * n + j), (float)want);
        }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

START_TEST(test_softmax_forward) {
    rng_state = 8;
    const int64_t R = 4, C = 300;
    amp_tensor_t *x = trand(F16, 2, (int64_t[]){R, C}, -8, 8);
    for (int64_t j = 0; j < C; j += 3)
        tset(x, 1 * C + j, -INFINITY); // masked entries
    for (int64_t j = 0; j < C; j++)
        tset(x, 2 * C + j, -INFINITY); // fully masked row
    amp_tensor_t *y = tnew(F32, 2, (int64_t[]){R, C}), *ly = tnew(F32, 2, (int64_t[]){R, C});
    be->softmax(bctx, false, y, x);
    be->softmax(bctx, true, ly, x);
    for (int64_t r = 0; r < R; r++) {
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < C; j++)
            max = fmax(max, tget(x, r * C + j));
        for (int64_t j = 0; j < C; j++)
            sum += exp(tget(x, r * C + j) - max);
        for (int64_t j = 0; j < C; j++) {
            const double xv = tget(x, r * C + j);
            if (r == 2) { // PyTorch: an all -inf row is NaN
                ck_assert(isnan(tget(y, r * C + j)) && isnan(tget(ly, r * C + j)));
                continue;
            }
            if (isinf(xv)) { // exactly zero probability
                ck_assert_float_eq(tget(y, r * C + j), 0.0f);
                ck_assert_float_eq(tget(ly, r * C + j), -INFINITY);
                continue;
            }
            ck_assert_close(tget(y, r * C + j), exp(xv - max) / sum, 1e-9, 1e-5);
            ck_assert_close(tget(ly, r * C + j), xv - max - log(sum), 1e-5, 1e-6);
        }
    }
}
END_TEST

START_TEST(test_softmax_backward) {
    rng_state = 9;
    const int64_t R = 3, C = 50;
    amp_tensor_t *x = trand(F32, 2, (int64_t[]){R, C}, -3, 3),
                 *dy = trand(F32, 2, (int64_t[]){R, C}, -1, 1);
    for (int lg = 0; lg < 2; lg++) {
        amp_tensor_t *y = tnew(F32, 2, (int64_t[]){R, C}), *dx = tnew(F32, 2, (int64_t[]){R, C});
        be->softmax(bctx, lg, y, x);
        be->softmax_backward(bctx, lg, dx, dy, y);
        for (int64_t r = 0; r < R; r++) {
            double s = 0;
            for (int64_t j = 0; j < C; j++)
                s += lg ? tget(dy, r * C + j) : tget(dy, r * C + j) * tget(y, r * C + j);
            for (int64_t j = 0; j < C; j++) {
                double g = tget(dy, r * C + j), yv = tget(y, r * C + j);
                double want = lg ? g - exp(yv) * s : yv * (g - s);
                ck_assert_close(tget(dx, r * C + j), want, 1e-6, 1e-5);
            }
        }
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// layer_norm

START_TEST(test_layer_norm) {
    rng_state = 11;
    const int64_t R = 5, C = 77;
    const float eps = 1e-5f;
    amp_tensor_t *x = trand(F32, 2, (int64_t[]){R, C}, -3, 5), *w = trand(F32, 1, &C, 0.5f, 1.5f),
                 *b = trand(F32, 1, &C, -1, 1), *dy = trand(F32, 2, (int64_t[]){R, C}, -1, 1);
    amp_tensor_t *y = tnew(F32, 2, (int64_t[]){R, C}), *mean = tnew(F32, 1, &R),
                 *rstd = tnew(F32, 1, &R);
    amp_tensor_t *dx = tnew(F32, 2, (int64_t[]){R, C}), *dw = tnew(F32, 1, &C),
                 *db = tnew(F32, 1, &C);
    be->fill(bctx, dw, 123.0f); // overwritten, not accumulated
    be->fill(bctx, db, 123.0f);
    be->layer_norm(bctx, y, mean, rstd, x, w, b, eps);
    be->layer_norm_backward(bctx, dx, dw, db, dy, x, mean, rstd, w);
    double dw_ref[77] = {0}, db_ref[77] = {0};
    for (int64_t r = 0; r < R; r++) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < C; j++)
            mu += tget(x, r * C + j) / (double)C;
        for (int64_t j = 0; j < C; j++)
            var += pow(tget(x, r * C + j) - mu, 2) / (double)C;
        const double rs = 1 / sqrt(var + eps);
        ck_assert_close(tget(mean, r), mu, 1e-6, 1e-6);
        ck_assert_close(tget(rstd, r), rs, 0, 1e-5);
        double s1 = 0, s2 = 0, xh[77];
        for (int64_t j = 0; j < C; j++) {
            xh[j] = (tget(x, r * C + j) - mu) * rs;
            ck_assert_close(tget(y, r * C + j), xh[j] * tget(w, j) + tget(b, j), 1e-5, 1e-5);
            double g = tget(dy, r * C + j) * tget(w, j);
            s1 += g;
            s2 += g * xh[j];
            dw_ref[j] += tget(dy, r * C + j) * xh[j];
            db_ref[j] += tget(dy, r * C + j);
        }
        for (int64_t j = 0; j < C; j++) {
            double g = tget(dy, r * C + j) * tget(w, j);
            ck_assert_close(tget(dx, r * C + j), rs / C * (C * g - s1 - xh[j] * s2), 1e-5, 1e-4);
        }
    }
    for (int64_t j = 0; j < C; j++) {
        ck_assert_close(tget(dw, j), dw_ref[j], 1e-5, 1e-5);
        ck_assert_close(tget(db, j), db_ref[j], 1e-5, 1e-5);
    }
}
END_TEST

// f16 input without weight or bias: the output rounds once from the f32 normalisation.
START_TEST(test_layer_norm_f16_no_affine) {
    rng_state = 12;
    const int64_t R = 2, C = 16;
    amp_tensor_t *x = trand(F16, 2, (int64_t[]){R, C}, -100, 100);
    amp_tensor_t *y = tnew(F16, 2, (int64_t[]){R, C}), *mean = tnew(F32, 1, &R),
                 *rstd = tnew(F32, 1, &R);
    be->layer_norm(bctx, y, mean, rstd, x, NULL, NULL, 1e-5f);
    for (int64_t i = 0; i < R * C; i++) {
        float want = (tget(x, i) - tget(mean, i / C)) * tget(rstd, i / C);
        ck_assert_float_eq(tget(y, i), amp_round_to(F16, want));
    }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// embedding

START_TEST(test_embedding) {
    rng_state = 13;
    const int64_t V = 10, C = 6;
    const int64_t ids[7] = {3, 0, 9, 3, 3, 5, 0};
    for (int it = 0; it < 2; it++) { // f16 weights with i32 indices, f32 with i64
        const amp_dtype wdt = it ? F32 : F16;
        amp_tensor_t *w = trand(wdt, 2, (int64_t[]){V, C}, -1, 1);
        amp_tensor_t *idx = tnew(it ? I64 : I32, 2, (int64_t[]){7, 1});
        for (int i = 0; i < 7; i++)
            tset(idx, i, (float)ids[i]);
        amp_tensor_t *y = tnew(wdt, 3, (int64_t[]){7, 1, C});
        be->embedding(bctx, y, idx, w);
        for (int i = 0; i < 7; i++)
            for (int64_t j = 0; j < C; j++)
                ck_assert_float_eq(tget(y, i * C + j), tget(w, ids[i] * C + j));
        amp_tensor_t *dy = trand(wdt, 3, (int64_t[]){7, 1, C}, -1, 1),
                     *dw = tnew(wdt, 2, (int64_t[]){V, C});
        be->fill(bctx, dw, 5.0f);
        be->embedding_backward(bctx, dw, dy, idx);
        for (int64_t v = 0; v < V; v++)
            for (int64_t j = 0; j < C; j++) {
                float acc = 0; // f32 accumulation in row order, one rounding
                for (int i = 0; i < 7; i++)
                    if (ids[i] == v) acc += tget(dy, i * C + j);
                ck_assert_float_eq(tget(dw, v * C + j), amp_round_to(wdt, acc));
            }
    }
}
END_TEST

START_TEST(test_embedding_out_of_range_aborts) {
    amp_tensor_t *w = tnew(F32, 2, (int64_t[]){4, 2}), *idx = tnew(I32, 1, (int64_t[]){1});
    amp_tensor_t *y = tnew(F32, 2, (int64_t[]){1, 2});
    tset(idx, 0, 4);
    be->embedding(bctx, y, idx, w);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// im2col / col2im

START_TEST(test_im2col_col2im) {
    rng_state = 14;
    amp_conv_desc d = {.n = 2, .c = 3, .h = 5, .w = 6, .kh = 3, .kw = 2, .stride = 2, .padding = 1};
    d.oh = (d.h + 2 * d.padding - d.kh) / d.stride + 1;
    d.ow = (d.w + 2 * d.padding - d.kw) / d.stride + 1;
    const int64_t CK = d.c * d.kh * d.kw, L = d.oh * d.ow;
    amp_tensor_t *x = trand(F32, 4, (int64_t[]){d.n, d.c, d.h, d.w}, -1, 1);
    amp_tensor_t *cols = tnew(F32, 3, (int64_t[]){d.n, CK, L});
    be->im2col(bctx, &d, cols, x);
    amp_conv_desc dr = d; // the same rows laid out (CK, N, L)
    dr.by_row = true;
    amp_tensor_t *rows = tnew(F32, 3, (int64_t[]){CK, d.n, L});
    be->im2col(bctx, &dr, rows, x);
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t r = 0; r < CK; r++)
            for (int64_t l = 0; l < L; l++)
                ck_assert_float_eq(tget(rows, (r * d.n + n) * L + l),
                                   tget(cols, (n * CK + r) * L + l));
    amp_tensor_t *g = trand(F32, 3, (int64_t[]){d.n, CK, L}, -1, 1);
    amp_tensor_t *dx = tnew(F32, 4, (int64_t[]){d.n, d.c, d.h, d.w});
    be->fill(bctx, dx, 9.0f); // overwritten
    be->col2im(bctx, &d, dx, g);
    double *dx_ref = calloc((size_t)(d.n * d.c * d.h * d.w), sizeof(double));
    for (int64_t n = 0; n < d.n; n++)
        for (int64_t c = 0; c < d.c; c++)
            for (int64_t i = 0; i < d.kh; i++)
                for (int64_t j = 0; j < d.kw; j++)
                    for (int64_t oy = 0; oy < d.oh; oy++)
                        for (int64_t ox = 0; ox < d.ow; ox++) {
                            int64_t row = (c * d.kh + i) * d.kw + j,
                                    at = (n * CK + row) * L + oy * d.ow + ox;
                            int64_t iy = oy * d.stride - d.padding + i,
                                    ix = ox * d.stride - d.padding + j;
                            bool in = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w;
                            int64_t xi = ((n * d.c + c) * d.h + iy) * d.w + ix;
                            ck_assert_float_eq(tget(cols, at), in ? tget(x, xi) : 0.0f);
                            if (in) dx_ref[xi] += tget(g, at);
                        }
    for (int64_t i = 0; i < d.n * d.c * d.h * d.w; i++)
        ck_assert_close(tget(dx, i), dx_ref[i], 1e-6, 1e-6);
    free(dx_ref);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// max_pool2d

START_TEST(test_max_pool2d) {
    // one 4x5 plane, kernel 3, stride 1 (overlapping windows): (2, 3) outputs
    const float v[20] = {1, 5,   2, 0,   -1, //
                         3, NAN, 4, 9,   2,  //
                         7, 1,   6, NAN, 2,  //
                         0, 8,   3, 1,   1};
    amp_tensor_t *x = tnew(F32, 4, (int64_t[]){1, 1, 4, 5});
    for (int i = 0; i < 20; i++)
        tset(x, i, v[i]);
    amp_tensor_t *y = tnew(F32, 4, (int64_t[]){1, 1, 2, 3}),
                 *am = tnew(I32, 4, (int64_t[]){1, 1, 2, 3});
    be->max_pool2d(bctx, y, am, x, 3, 1);
    // A NaN in a window wins, and of two NaNs (at 6 and 13) the last one.
    const int32_t want[6] = {6, 13, 13, 6, 13, 13};
    const int32_t *a = amp_tensor_ptr(am);
    for (int i = 0; i < 6; i++) {
        ck_assert(isnan(tget(y, i)));
        ck_assert_int_eq(a[i], want[i]);
    }
    amp_tensor_t *dy = tnew(F32, 4, (int64_t[]){1, 1, 2, 3}),
                 *dx = tnew(F32, 4, (int64_t[]){1, 1, 4, 5});
    for (int i = 0; i < 6; i++)
        tset(dy, i, (float)(i + 1));
    be->fill(bctx, dx, 7.0f); // overwritten
    be->max_pool2d_backward(bctx, dx, dy, am, 3, 1);
    for (int i = 0; i < 20; i++)
        ck_assert_float_eq(tget(dx, i), i == 6 ? 1 + 4 : i == 13 ? 2 + 3 + 5 + 6 : 0);
}
END_TEST

START_TEST(test_max_pool2d_plain_and_neg_inf) {
    rng_state = 15;
    amp_tensor_t *x = trand(BF16, 4, (int64_t[]){2, 3, 6, 6}, -5, 5);
    for (int i = 0; i < 4; i++)
        tset(x, (i / 2) * 6 + i % 2, -INFINITY); // plane 0's first window
    amp_tensor_t *y = tnew(BF16, 4, (int64_t[]){2, 3, 3, 3}),
                 *am = tnew(I32, 4, (int64_t[]){2, 3, 3, 3});
    be->max_pool2d(bctx, y, am, x, 2, 2);
    const int32_t *a = amp_tensor_ptr(am);
    ck_assert_float_eq(tget(y, 0), -INFINITY);
    ck_assert_int_eq(a[0], 0); // no value beats -inf: the window's first position
    for (int64_t p = 0; p < 6; p++)
        for (int64_t oy = 0; oy < 3; oy++)
            for (int64_t ox = 0; ox < 3; ox++) {
                if (p == 0 && oy == 0 && ox == 0) continue;
                float best = -INFINITY;
                int64_t at = -1;
                for (int64_t h = 2 * oy; h < 2 * oy + 2; h++)
                    for (int64_t w = 2 * ox; w < 2 * ox + 2; w++) {
                        const float xv = tget(x, p * 36 + h * 6 + w);
                        if (xv > best) {
                            best = xv;
                            at = h * 6 + w;
                        }
                    }
                ck_assert_float_eq(tget(y, p * 9 + oy * 3 + ox), best);
                ck_assert_int_eq(a[p * 9 + oy * 3 + ox], at);
            }
}
END_TEST

// ---------------------------------------------------------------------------------------------
// nll_loss, masked_fill, dropout

START_TEST(test_nll_loss) {
    rng_state = 16;
    const int64_t N = 6, C = 4;
    amp_tensor_t *logp = trand(F32, 2, (int64_t[]){N, C}, -5, 0), *t = tnew(I64, 1, &N);
    const int tg[6] = {0, 3, 2, 2, 1, 0};
    double want = 0;
    for (int i = 0; i < N; i++) {
        tset(t, i, (float)tg[i]);
        want -= tget(logp, i * C + tg[i]) / (double)N;
    }
    amp_tensor_t *loss = tnew(F32, 0, NULL), *dl = tnew(F32, 0, NULL),
                 *dx = tnew(F16, 2, (int64_t[]){N, C});
    be->nll_loss(bctx, loss, logp, t);
    ck_assert_close(tget(loss, 0), want, 1e-6, 1e-6);
    tset(dl, 0, 3.0f);
    be->fill(bctx, dx, 1.0f);
    be->nll_loss_backward(bctx, dx, dl, t);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++)
            ck_assert_float_eq(tget(dx, i * C + j), j == tg[i] ? amp_round_to(F16, -0.5f) : 0.0f);
}
END_TEST

START_TEST(test_nll_loss_bad_target_aborts) {
    amp_tensor_t *logp = tnew(F32, 2, (int64_t[]){2, 3}), *t = tnew(I32, 1, (int64_t[]){2});
    amp_tensor_t *loss = tnew(F32, 0, NULL);
    tset(t, 1, -1);
    be->nll_loss(bctx, loss, logp, t);
}
END_TEST

// A causal (T, T) mask broadcast over the batch fills -inf; other values keep their bits.
START_TEST(test_masked_fill) {
    rng_state = 17;
    const int64_t B = 2, T = 5;
    amp_tensor_t *x = trand(F16, 3, (int64_t[]){B, T, T}, -3, 3);
    ((uint16_t *)amp_tensor_ptr(x))[T] = 0x7E01; // a NaN payload below the diagonal
    amp_tensor_t *m0 = tnew(I32, 2, (int64_t[]){T, T});
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
            tset(m0, i * T + j, j > i);
    int64_t shape[3] = {B, T, T};
    amp_tensor_t *mask = tview(m0, 3, shape, (int64_t[]){0, T, 1}, 0);
    amp_tensor_t *y = tnew(F16, 3, shape);
    be->masked_fill(bctx, y, x, mask, -INFINITY);
    const uint16_t *yb = amp_tensor_ptr(y), *xb = amp_tensor_ptr(x);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) {
                int64_t at = (b * T + i) * T + j;
                if (j > i)
                    ck_assert_uint_eq(yb[at], 0xFC00);
                else
                    ck_assert_uint_eq(yb[at], xb[at]);
            }
}
END_TEST

START_TEST(test_dropout_mask) {
    const int64_t n = 20000;
    const float p = 0.3f;
    amp_tensor_t *m = tnew(F32, 1, &n), *m2 = tnew(BF16, 1, &n);
    be->dropout_mask(bctx, m, p, 42, 1000);
    be->dropout_mask(bctx, m2, p, 42, 1000);
    const float scale = 1.0f / (float)(1.0 - (double)p);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        const bool drop = amp_rng_uniform(42, 1000 + (uint64_t)i) < p;
        ck_assert_float_eq(tget(m, i), drop ? 0.0f : scale);
        ck_assert_float_eq(tget(m2, i), amp_round_to(BF16, tget(m, i)));
        zeros += drop;
    }
    ck_assert_close((double)zeros / n, p, 0.02, 0);
    be->dropout_mask(bctx, m, 0.0f, 1, 0);
    for (int64_t i = 0; i < n; i++)
        ck_assert_float_eq(tget(m, i), 1.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// GradScaler unscale (AMP-SEMANTICS §6 U1-U5 and the golden bits)

static amp_tensor_t *bits_tensor(const uint32_t *u, int64_t n) {
    amp_tensor_t *t = tnew(F32, 1, &n);
    memcpy(amp_tensor_ptr(t), u, (size_t)n * 4);
    return t;
}

// A 0-dim f32 tensor holding v (the GradScaler's inv_scale).
static amp_tensor_t *scalar(float v) {
    amp_tensor_t *t = tnew(F32, 0, NULL);
    *(float *)amp_tensor_ptr(t) = v;
    return t;
}

START_TEST(test_unscale_golden) {
    amp_tensor_t *fi = tnew(F32, 1, (int64_t[]){1});
    amp_tensor_t *inv16 = scalar(1.52587890625e-05f);
    // U1: finite values scaled, found_inf stays 0
    amp_tensor_t *g1 = bits_tensor((uint32_t[]){0x48000000, 0xc0400000, 0x00000000, 0x0da24260}, 4);
    be->unscale(bctx, &g1, NULL, 1, inv16, fi);
    const uint32_t u1[4] = {0x40000000, 0xb8400000, 0x00000000, 0x05a24260};
    ck_assert_mem_eq(amp_tensor_ptr(g1), u1, sizeof u1);
    ck_assert_float_eq(tget(fi, 0), 0.0f);
    // U2: an inf (in a second tensor of the same call) sets found_inf; values still scaled
    amp_tensor_t *g2[2] = {bits_tensor((uint32_t[]){0x3f800000}, 1),
                           bits_tensor((uint32_t[]){0xff800000, 0x40000000, 0x7fc00000}, 3)};
    be->unscale(bctx, g2, NULL, 2, inv16, fi);
    ck_assert_uint_eq(f32_bits(tget(g2[0], 0)), 0x37800000);
    ck_assert_float_eq(tget(g2[1], 0), -INFINITY);
    ck_assert_uint_eq(f32_bits(tget(g2[1], 1)), 0x38000000);
    ck_assert(isnan(tget(g2[1], 2)));
    ck_assert_float_eq(tget(fi, 0), 1.0f);
    // found_inf is never reset by the kernel
    amp_tensor_t *g3 = bits_tensor((uint32_t[]){0x3f800000}, 1);
    be->unscale(bctx, &g3, NULL, 1, inv16, fi);
    ck_assert_float_eq(tget(fi, 0), 1.0f);
    // U3: inv_scale 1 is a pure check, bit for bit
    be->fill(bctx, fi, 0.0f);
    const uint32_t u3[4] = {0x80000000, 0x3fc00000, 0x7fc00001, 0x40e00000};
    amp_tensor_t *g4 = bits_tensor(u3, 4);
    be->unscale(bctx, &g4, NULL, 1, scalar(1.0f), fi);
    ck_assert_mem_eq(amp_tensor_ptr(g4), u3, sizeof u3);
    ck_assert_float_eq(tget(fi, 0), 1.0f);
    // U4: scale 3
    be->fill(bctx, fi, 0.0f);
    amp_tensor_t *g5 = bits_tensor((uint32_t[]){0x40400000, 0x40e00000}, 2);
    be->unscale(bctx, &g5, NULL, 1, scalar(f32_from_bits(0x3eaaaaab)), fi);
    ck_assert_uint_eq(f32_bits(tget(g5, 0)), 0x3f800000);
    ck_assert_uint_eq(f32_bits(tget(g5, 1)), 0x40155556);
    // U5: inv_scale = +inf turns finite grads into NaN / inf without flagging them
    amp_tensor_t *g6 = tnew(F32, 1, (int64_t[]){2});
    tset(g6, 1, 1e-3f);
    be->unscale(bctx, &g6, NULL, 1, scalar(INFINITY), fi);
    ck_assert(isnan(tget(g6, 0)));
    ck_assert_float_eq(tget(g6, 1), INFINITY);
    ck_assert_float_eq(tget(fi, 0), 0.0f);
    // f16 grads through the pure check keep their bits, NaN payloads included
    const uint16_t hb[3] = {0x3555, 0x7E01, 0x8001};
    amp_tensor_t *h = tnew(F16, 1, (int64_t[]){3});
    memcpy(amp_tensor_ptr(h), hb, sizeof hb);
    be->unscale(bctx, &h, NULL, 1, scalar(1.0f), fi);
    ck_assert_mem_eq(amp_tensor_ptr(h), hb, sizeof hb);
    ck_assert_float_eq(tget(fi, 0), 1.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Optimizer step against the torch.optim update rules evaluated in double

static amp_optim_params optim(amp_optim_kind kind) {
    return (amp_optim_params){
        .kind = kind, .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
}

// The backend's step of one parameter as its `step`-th update (its count goes from step - 1 to
// step), unless found_inf (may be NULL) is non-zero.
static void optim_at(const amp_optim_params *o, int64_t step, amp_tensor_t *p, amp_tensor_t *g,
                     amp_tensor_t *m, amp_tensor_t *v, const amp_tensor_t *found_inf) {
    amp_tensor_t *counts = tnew(I64, 1, (int64_t[]){2});
    int64_t *c = amp_tensor_ptr(counts);
    c[0] = step - 1;
    c[1] = 7;
    be->optim_step(bctx, o, &p, &g, m ? &m : NULL, v ? &v : NULL, NULL, 1, counts,
                   (int32_t[]){0, 1}, found_inf);
    const bool skipped = found_inf && *(const float *)amp_tensor_ptr(found_inf) != 0.0f;
    ck_assert_int_eq(c[0], skipped ? step - 1 : step);
    ck_assert_int_eq(c[1], skipped ? 7 : 8);
}

START_TEST(test_optim_sgd) {
    const int64_t n = 3;
    const float g0[3] = {0.5f, -2.0f, 0.0f};
    for (int variant = 0; variant < 3; variant++) { // plain, momentum + wd, nesterov + dampening
        amp_optim_params o = optim(AMP_OPTIM_SGD);
        if (variant > 0) o.momentum = 0.9f, o.weight_decay = 0.01f;
        if (variant == 2) o.nesterov = true, o.dampening = 0.25f;
        amp_tensor_t *p = tnew(F32, 1, &n), *g = tnew(F32, 1, &n), *m = tnew(F32, 1, &n);
        be->fill(bctx, p, 1.0f);
        be->fill(bctx, m, 77.0f); // ignored on step 1: the buffer starts as the gradient
        double pr[3] = {1, 1, 1}, buf[3] = {0};
        for (int64_t step = 1; step <= 3; step++) {
            for (int i = 0; i < 3; i++)
                tset(g, i, g0[i] * (float)step);
            optim_at(&o, step, p, g, variant ? m : NULL, NULL, NULL);
            for (int i = 0; i < 3; i++) {
                double gi = g0[i] * step + (double)o.weight_decay * pr[i];
                if (o.momentum != 0) {
                    buf[i] = step == 1 ? gi : buf[i] * o.momentum + (1 - o.dampening) * gi;
                    gi = o.nesterov ? gi + o.momentum * buf[i] : buf[i];
                }
                pr[i] -= (double)o.lr * gi;
                ck_assert_close(tget(p, i), pr[i], 1e-6, 1e-6);
            }
        }
    }
}
END_TEST

START_TEST(test_optim_adam_adamw) {
    const int64_t n = 4;
    const float g0[4] = {0.3f, -1e-3f, 5.0f, 1e-6f};
    for (int kind = AMP_OPTIM_ADAM; kind <= AMP_OPTIM_ADAMW; kind++) {
        amp_optim_params o = optim((amp_optim_kind)kind);
        o.weight_decay = 0.05f;
        amp_tensor_t *p = tnew(F32, 1, &n), *g = tnew(F32, 1, &n), *m = tnew(F32, 1, &n),
                     *v = tnew(F32, 1, &n);
        be->fill(bctx, p, 0.5f);
        double pr[4] = {0.5, 0.5, 0.5, 0.5}, mr[4] = {0}, vr[4] = {0};
        for (int64_t step = 1; step <= 5; step++) {
            for (int i = 0; i < 4; i++)
                tset(g, i, g0[i] * (step % 2 ? 1.0f : -0.5f));
            optim_at(&o, step, p, g, m, v, NULL);
            for (int i = 0; i < 4; i++) {
                double gi = tget(g, i);
                if (kind == AMP_OPTIM_ADAMW)
                    pr[i] *= 1 - (double)o.lr * o.weight_decay;
                else
                    gi += (double)o.weight_decay * pr[i];
                mr[i] = o.beta1 * mr[i] + (1 - (double)o.beta1) * gi;
                vr[i] = o.beta2 * vr[i] + (1 - (double)o.beta2) * gi * gi;
                double bc1 = 1 - pow(o.beta1, (double)step), bc2 = 1 - pow(o.beta2, (double)step);
                pr[i] -= o.lr / bc1 * mr[i] / (sqrt(vr[i]) / sqrt(bc2) + o.eps);
                ck_assert_close(tget(p, i), pr[i], 1e-6, 1e-5);
                ck_assert_close(tget(m, i), mr[i], 1e-9, 1e-5);
                ck_assert_close(tget(v, i), vr[i], 1e-12, 1e-5);
            }
        }
    }
}
END_TEST

// The first Adam step moves every parameter by lr * sign(g) (m_hat / sqrt(v_hat) = +-1).
START_TEST(test_optim_adam_first_step) {
    const int64_t n = 2;
    amp_optim_params o = optim(AMP_OPTIM_ADAM);
    amp_tensor_t *p = tnew(F32, 1, &n), *g = tnew(F32, 1, &n), *m = tnew(F32, 1, &n),
                 *v = tnew(F32, 1, &n);
    tset(g, 0, 3.0f);
    tset(g, 1, -0.25f);
    optim_at(&o, 1, p, g, m, v, NULL);
    ck_assert_close(tget(p, 0), -0.1, 1e-7, 0);
    ck_assert_close(tget(p, 1), 0.1, 1e-7, 0);
}
END_TEST

// torch.lerp's second form keeps weight 1 (beta1 = 0) exact: m becomes g even when m is huge.
START_TEST(test_optim_adam_lerp_weight_one) {
    const int64_t n = 1;
    amp_optim_params o = optim(AMP_OPTIM_ADAM);
    o.beta1 = 0.0f;
    amp_tensor_t *p = tnew(F32, 1, &n), *g = tnew(F32, 1, &n), *m = tnew(F32, 1, &n),
                 *v = tnew(F32, 1, &n);
    tset(m, 0, 3e7f);
    tset(g, 0, 0.1f);
    optim_at(&o, 2, p, g, m, v, NULL);
    ck_assert_float_eq(tget(m, 0), 0.1f);
}
END_TEST

// A found_inf that is not zero (NaN included) skips the step: parameters, state and counts stay.
START_TEST(test_optim_skipped_by_found_inf) {
    const int64_t n = 2;
    amp_optim_params o = optim(AMP_OPTIM_ADAMW);
    o.weight_decay = 0.01f;
    amp_tensor_t *p = tnew(F32, 1, &n), *g = tnew(F32, 1, &n), *m = tnew(F32, 1, &n),
                 *v = tnew(F32, 1, &n);
    tset(p, 0, 1.5f);
    tset(g, 0, 3.0f);
    tset(g, 1, -0.25f);
    const float found[] = {1.0f, NAN};
    for (int k = 0; k < 2; k++) {
        optim_at(&o, 4, p, g, m, v, scalar(found[k]));
        ck_assert_float_eq(tget(p, 0), 1.5f);
        ck_assert_float_eq(tget(p, 1), 0.0f);
        ck_assert_float_eq(tget(m, 0), 0.0f);
        ck_assert_float_eq(tget(v, 1), 0.0f);
    }
    optim_at(&o, 1, p, g, m, v, scalar(0.0f)); // a clean found_inf steps
    ck_assert_close(tget(p, 1), 0.1, 1e-6, 0);
}
END_TEST

// scale_update: found_inf summed over the optimizers; skipped only where one that stepped had
// an inf; the scale, its reciprocal and the tracker as amp_scale_update makes them.
START_TEST(test_scale_update_record) {
    const amp_scaler_params sp = {
        .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2};
    amp_tensor_t *scale = scalar(1024.0f), *inv = scalar(0.0f), *tracker = tnew(I32, 0, NULL);
    amp_tensor_t *rec = tnew(I32, 1, (int64_t[]){AMP_SCALE_REC});
    const int32_t *r = amp_tensor_ptr(rec);
    float before, after, found;
    // clean: the tracker counts, the scale stays
    be->scale_update(bctx, scale, inv, tracker, (amp_tensor_t *[]){scalar(0), scalar(0)},
                     (bool[]){true, true}, 2, &sp, rec);
    ck_assert_float_eq(tget(scale, 0), 1024.0f);
    ck_assert_float_eq(tget(inv, 0), 1.0f / 1024);
    ck_assert_int_eq(*(int32_t *)amp_tensor_ptr(tracker), 1);
    ck_assert_int_eq(r[AMP_REC_TRACKER], 1);
    ck_assert_int_eq(r[AMP_REC_SKIPPED], 0);
    // the second clean update grows the scale
    be->scale_update(bctx, scale, inv, tracker, (amp_tensor_t *[]){scalar(0)}, (bool[]){true}, 1,
                     &sp, rec);
    memcpy(&before, &r[AMP_REC_BEFORE], 4);
    memcpy(&after, &r[AMP_REC_AFTER], 4);
    ck_assert_float_eq(before, 1024.0f);
    ck_assert_float_eq(after, 2048.0f);
    ck_assert_int_eq(r[AMP_REC_TRACKER], 0);
    // two optimizers overflowed, only the unstepped one... then the stepped one too
    be->scale_update(bctx, scale, inv, tracker, (amp_tensor_t *[]){scalar(0), scalar(1)},
                     (bool[]){true, false}, 2, &sp, rec);
    memcpy(&found, &r[AMP_REC_FOUND_INF], 4);
    memcpy(&after, &r[AMP_REC_AFTER], 4);
    ck_assert_float_eq(found, 1.0f);
    ck_assert_float_eq(after, 512.0f);
    ck_assert_float_eq(tget(inv, 0), 1.0f / 512);
    ck_assert_int_eq(r[AMP_REC_SKIPPED], 0);
    be->scale_update(bctx, scale, inv, tracker, (amp_tensor_t *[]){scalar(1), scalar(1)},
                     (bool[]){true, true}, 2, &sp, rec);
    memcpy(&found, &r[AMP_REC_FOUND_INF], 4);
    ck_assert_float_eq(found, 2.0f);
    ck_assert_int_eq(r[AMP_REC_SKIPPED], 1);
    ck_assert_float_eq(tget(scale, 0), 128.0f);
}
END_TEST

Suite *cpu_backend_suite(void) {
    Suite *s = suite_create("cpu_backend");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_table_and_memory);
    tcase_add_test(tc, test_optim_skipped_by_found_inf);
    tcase_add_test(tc, test_scale_update_record);
    tcase_add_test(tc, test_copy_strided_convert);
    tcase_add_test(tc, test_copy_bit_exact_and_ints);
    tcase_add_test(tc, test_fill);
    tcase_add_test(tc, test_unary_against_double);
    tcase_add_test(tc, test_unary_special_values);
    tcase_add_test(tc, test_binary_broadcast);
    tcase_add_test(tc, test_reduce_sum);
    tcase_add_test(tc, test_reduce_sum_large_is_accurate);
    tcase_add_test(tc, test_gemm_dtypes_transposes);
    tcase_add_test(tc, test_gemm_batch_bias_alpha_beta);
    tcase_add_test(tc, test_gemm_blocking_edges);
    tcase_add_test(tc, test_gemm_exact_integers);
    tcase_add_test(tc, test_softmax_forward);
    tcase_add_test(tc, test_softmax_backward);
    tcase_add_test(tc, test_layer_norm);
    tcase_add_test(tc, test_layer_norm_f16_no_affine);
    tcase_add_test(tc, test_embedding);
    tcase_add_test_raise_signal(tc, test_embedding_out_of_range_aborts, SIGABRT);
    tcase_add_test(tc, test_im2col_col2im);
    tcase_add_test(tc, test_max_pool2d);
    tcase_add_test(tc, test_max_pool2d_plain_and_neg_inf);
    tcase_add_test(tc, test_nll_loss);
    tcase_add_test_raise_signal(tc, test_nll_loss_bad_target_aborts, SIGABRT);
    tcase_add_test(tc, test_masked_fill);
    tcase_add_test(tc, test_dropout_mask);
    tcase_add_test(tc, test_unscale_golden);
    tcase_add_test(tc, test_optim_sgd);
    tcase_add_test(tc, test_optim_adam_adamw);
    tcase_add_test(tc, test_optim_adam_first_step);
    tcase_add_test(tc, test_optim_adam_lerp_weight_one);
    suite_add_tcase(s, tc);
    return s;
}
