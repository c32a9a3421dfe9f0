/*
 * test_tensor.c — the `tensor` suite: what the tensor API promises around the autograd tape and
 * host memory. A persistent tensor freed while the tape holds it lives until amp_ctx_reset (an
 * optimizer's parameters cannot be freed); shapes whose sizes overflow abort; a backward that
 * reads a tensor written since its op ran aborts with PyTorch's message; host copies work on views.
 */
#include "amp-train.h"
#include "amp.h"
#include "tests.h"

#include <signal.h>
#include <string.h>

#define F32 AMP_DTYPE_F32
#define F16 AMP_DTYPE_F16
#define S(...) ((int64_t[]){__VA_ARGS__})

static amp_ctx_t *ctx;

static void setup(void) {
    ctx = test_cpu_ctx();
}
static void teardown(void) {
    amp_ctx_free(ctx);
}

static size_t in_use(void) {
    size_t n;
    amp_ctx_memory(ctx, &n, NULL);
    return n;
}

static amp_tensor_t *param(int ndim, const int64_t *shape, const float *v) {
    amp_tensor_t *t = amp_tensor_from_f32(ctx, F32, ndim, shape, v);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

// ---------------------------------------------------------------------------------------------
// Freeing what the tape holds

// Two micro-batches of gradient accumulation (one amp_ctx_reset for the step), the targets of
// each made and freed around its backward: the second cross_entropy drops its log-probabilities,
// which scans the tape that holds the first targets. Writes w's gradient; with free_targets, says
// whether each freed target's storage stayed until the reset.
static void accumulate(bool free_targets, float *gw, bool *kept) {
    amp_tensor_t *x = amp_tensor_from_f32(ctx, F32, 2, S(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    amp_tensor_t *w = param(2, S(3, 3), (float[]){.1f, -.2f, .3f, .4f, .5f, -.6f, .7f, .8f, .9f});
    *kept = true;
    for (int mb = 0; mb < 2; mb++) {
        amp_tensor_t *y = amp_tensor_from(ctx, AMP_DTYPE_I64, 1, S(2), (int64_t[]){0, 2 - mb});
        amp_tensor_t *loss = amp_cross_entropy(ctx, amp_linear(ctx, x, w, NULL), y);
        amp_backward(ctx, loss);
        if (!free_targets) continue;
        const size_t before = in_use();
        amp_tensor_free(y);
        *kept &= in_use() == before;
    }
    const size_t before = in_use();
    amp_ctx_reset(ctx);
    ck_assert_msg(!free_targets || in_use() < before, "the freed targets outlived the reset");
    amp_tensor_read_f32(amp_tensor_grad(w), gw);
    amp_tensor_free(x);
    amp_tensor_free(w);
}

START_TEST(test_free_targets_between_micro_batches) {
    float want[9], got[9];
    bool kept;
    accumulate(false, want, &kept);
    accumulate(true, got, &kept);
    ck_assert_msg(kept, "a target the tape holds was freed at once");
    ck_assert_mem_eq(got, want, sizeof want);
}
END_TEST

// Freed before the backward: an operand that mul's backward reads, and a parameter whose
// gradient the backward accumulates. Both stay until the reset; the gradients are right.
START_TEST(test_free_before_backward) {
    amp_tensor_t *p = param(1, S(2), (float[]){1, 2}), *q = param(1, S(2), (float[]){5, 6});
    amp_tensor_t *x = amp_tensor_from_f32(ctx, F32, 1, S(2), (float[]){3, 4});
    amp_tensor_t *loss =
        amp_add(ctx, amp_sum(ctx, amp_mul(ctx, p, x)), amp_sum(ctx, amp_mul(ctx, q, q)));
    const size_t before = in_use();
    amp_tensor_free(x);
    amp_tensor_free(q);
    ck_assert_uint_eq(in_use(), before);
    amp_backward(ctx, loss);
    float g[2];
    amp_tensor_read_f32(amp_tensor_grad(p), g);
    ck_assert_float_eq(g[0], 3.0f);
    ck_assert_float_eq(g[1], 4.0f);
    amp_ctx_reset(ctx);
    ck_assert_uint_lt(in_use(), before);
    // without a tape, a free gives the storage back at once
    amp_tensor_t *z = amp_tensor_new(ctx, F32, 1, S(1000));
    const size_t with_z = in_use();
    amp_tensor_free(z);
    ck_assert_uint_lt(in_use(), with_z);
}
END_TEST

// p's gradient read by an op (mul saves it for q's gradient), then dropped by zero_grad before
// the backward that reads it: it stays until the reset, and q's gradient is p's old one.
START_TEST(test_zero_grad_of_a_gradient_the_tape_holds) {
    amp_tensor_t *p = param(1, S(2), (float[]){1, 2}), *q = param(1, S(2), (float[]){5, 6});
    amp_tensor_t *x = amp_tensor_from_f32(ctx, F32, 1, S(2), (float[]){3, 4});
    amp_backward(ctx, amp_sum(ctx, amp_mul(ctx, p, x)));
    amp_ctx_reset(ctx);
    amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, q, amp_tensor_grad(p)));
    const size_t before = in_use();
    amp_tensor_zero_grad(p);
    ck_assert_uint_eq(in_use(), before);
    ck_assert_ptr_null(amp_tensor_grad(p));
    amp_backward(ctx, loss);
    float g[2];
    amp_tensor_read_f32(amp_tensor_grad(q), g);
    ck_assert_float_eq(g[0], 3.0f);
    ck_assert_float_eq(g[1], 4.0f);
    amp_ctx_reset(ctx);
    ck_assert_uint_lt(in_use(), before);
}
END_TEST

START_TEST(test_free_after_the_optimizer) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_OK);
    amp_optim_free(opt);
    amp_tensor_free(w); // the optimizer let go of it
}
END_TEST

START_TEST(test_free_of_an_optimizer_parameter_aborts) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2});
    amp_tensor_set_name(w, "fc.weight");
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_OK);
    test_expect_abort("'fc.weight' (f32 (2,)), which an optimizer holds");
    amp_tensor_free(w);
    test_set_grad_f32(ctx, w, (float[]){1, 1});
    amp_optim_step(opt);
}
END_TEST

// A parameter's gradient belongs to the parameter: freeing it left the parameter's gradient
// pointer dangling. amp_tensor_zero_grad drops it.
START_TEST(test_free_of_a_gradient_aborts) {
    amp_tensor_t *w = param(1, S(4), (float[]){1, 2, 3, 4});
    amp_backward(ctx, amp_sum(ctx, amp_exp(ctx, w)));
    test_expect_abort("amp_tensor_free of a gradient (f32 (4,)), which the tensor it belongs to "
                      "owns: drop a gradient with amp_tensor_zero_grad");
    amp_tensor_free(amp_tensor_grad(w));
    ck_abort_msg("the gradient was freed"); // (not the SIGABRT of a double free at the teardown)
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Shapes

START_TEST(test_byte_size_overflow_aborts) {
    test_expect_abort("shape (2147483648, 2147483648, 1) of f32 is too large");
    amp_tensor_new(ctx, F32, 3, S(1LL << 31, 1LL << 31, 1)); // 2^62 elements, 2^64 bytes
}
END_TEST

START_TEST(test_numel_overflow_aborts) {
    test_expect_abort("shape (1099511627776, 1073741824) of f16 is too large");
    amp_tensor_new(ctx, F16, 2, S(1LL << 40, 1LL << 30)); // 2^70 elements
}
END_TEST

START_TEST(test_reshape_negative_dim_aborts) {
    amp_tensor_t *x = amp_tensor_new(ctx, F32, 1, S(6));
    test_expect_abort("invalid shape (-2, -3): dimension 0 is -2");
    amp_reshape(ctx, x, 2, S(-2, -3));
}
END_TEST

START_TEST(test_empty_shapes) {
    amp_tensor_t *x = amp_tensor_new(ctx, F32, 2, S(0, 5));
    amp_tensor_t *y = amp_reshape(ctx, x, 3, S(5, -1, 2));
    ck_assert_int_eq(amp_tensor_dim(y, 1), 0);
    ck_assert_int_eq(amp_tensor_numel(y), 0);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Writes after an op saved a tensor for its backward

// The tester's case: mul's backward reads w, written since; without the check, x's gradient
// would be 10 20 (the new w) instead of 1 2.
START_TEST(test_write_after_save_aborts) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2}), *x = param(1, S(2), (float[]){3, 4});
    amp_tensor_t *loss = amp_sum(ctx, amp_mul(ctx, w, x));
    test_expect_abort("one of the variables needed for gradient computation has been modified by "
                      "an inplace operation: [f32 (2,)] is at version 2; expected version 1 "
                      "instead");
    amp_tensor_write_f32(w, (float[]){10, 20});
    amp_backward(ctx, loss);
}
END_TEST

// x @ W^T reads a contiguous copy of the transposed W for x's gradient: a write to W since is
// caught all the same (it went unnoticed, x's gradient made of the old W), as PyTorch, which
// saves the view, catches it; so is a write to x under log(x^T), which reads a copy of the view.
START_TEST(test_write_to_what_an_op_copied_aborts) {
    amp_tensor_t *w = param(2, S(3, 2), (float[]){1, 2, 3, 4, 5, 6});
    amp_tensor_t *x = param(2, S(2, 2), (float[]){1, 2, 3, 4});
    amp_tensor_t *loss;
    if (_i == 0) {
        loss = amp_sum(ctx, amp_matmul(ctx, x, amp_transpose(ctx, w, 0, 1)));
        test_expect_abort("[f32 (2, 3)] is at version 2; expected version 1 instead (the "
                          "backward of matmul reads it)");
        amp_tensor_write_f32(w, (float[]){0, 0, 0, 0, 0, 0});
    } else {
        loss = amp_sum(ctx, amp_log(ctx, amp_transpose(ctx, x, 0, 1)));
        test_expect_abort("[f32 (2, 2)] is at version 2; expected version 1 instead (the "
                          "backward of log reads it)");
        amp_tensor_write_f32(x, (float[]){1, 1, 1, 1});
    }
    amp_backward(ctx, loss);
}
END_TEST

// Layer names are kept whole: two children of a long qualified name stay two layers (cut at
// 511 bytes, "....first" and "....second" were one), also through amp_layer_beginf.
START_TEST(test_long_layer_names_stay_apart) {
    char longname[600];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    amp_layer_begin(ctx, longname);
    amp_layer_begin(ctx, "first");
    char *first = strdup(amp_layer_current(ctx));
    amp_layer_end(ctx);
    amp_layer_beginf(ctx, "%s", "second");
    ck_assert_uint_eq(strlen(amp_layer_current(ctx)), 599 + 7);
    ck_assert_str_ne(first, amp_layer_current(ctx));
    ck_assert_str_eq(first + 600, "first");
    amp_layer_end(ctx);
    amp_layer_end(ctx);
    free(first);
}
END_TEST

// tanh's backward reads its output; a write through a view of its storage changes it too.
START_TEST(test_write_through_a_view_after_save_aborts) {
    amp_tensor_t *x = param(2, S(2, 2), (float[]){.1f, .2f, .3f, .4f});
    amp_tensor_t *h = amp_tanh(ctx, x);
    amp_tensor_t *loss = amp_sum(ctx, h);
    test_expect_abort("[f32 (2, 2)] is at version 1; expected version 0 instead (the backward of "
                      "tanh reads it)");
    amp_tensor_write_f32(amp_transpose(ctx, h, 0, 1), (float[]){0, 0, 0, 0});
    amp_backward(ctx, loss);
}
END_TEST

// A weight written between the forward and the backward of an op whose other operand needs no
// gradient (data): its gradient reads the data alone, so the write passes, as in PyTorch (which
// saves each operand only for the other's gradient): weight clipping, an EMA swap.
START_TEST(test_a_weight_only_its_own_gradient_needs_may_change) {
    const float xs[6] = {1, 2, 3, 4, 5, 6};
    amp_tensor_t *x = amp_tensor_from_f32(ctx, F32, 2, S(2, 3), xs);
    float g[6];
    // linear: dL/dw[o] = the rows of x summed
    amp_tensor_t *w = param(2, S(2, 3), (float[]){1, 1, 1, 1, 1, 1});
    amp_tensor_t *loss = amp_sum(ctx, amp_linear(ctx, x, w, NULL));
    amp_tensor_write_f32(w, (float[]){0, 0, 0, 0, 0, 0});
    amp_backward(ctx, loss);
    amp_tensor_read_f32(amp_tensor_grad(w), g);
    const float dw[6] = {5, 7, 9, 5, 7, 9}, db[6] = {5, 5, 7, 7, 9, 9}, da[4] = {6, 15, 6, 15};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(g[i], dw[i]);
    // mm with the weight second, and first
    amp_tensor_t *b = param(2, S(3, 2), (float[]){1, 1, 1, 1, 1, 1});
    loss = amp_sum(ctx, amp_mm(ctx, x, b));
    amp_tensor_write_f32(b, (float[]){2, 2, 2, 2, 2, 2});
    amp_backward(ctx, loss);
    amp_tensor_read_f32(amp_tensor_grad(b), g);
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(g[i], db[i]);
    amp_tensor_t *a = param(2, S(2, 2), (float[]){1, 1, 1, 1});
    amp_tensor_t *d = amp_tensor_from_f32(ctx, F32, 2, S(2, 3), xs);
    loss = amp_sum(ctx, amp_mm(ctx, a, d));
    amp_tensor_write_f32(a, (float[]){3, 3, 3, 3});
    amp_backward(ctx, loss);
    amp_tensor_read_f32(amp_tensor_grad(a), g);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(g[i], da[i]);
    // mul, div (b for a's gradient only), conv2d
    amp_tensor_t *m = param(1, S(3), (float[]){1, 1, 1});
    amp_tensor_t *v = amp_tensor_from_f32(ctx, F32, 1, S(3), xs);
    loss = amp_sum(ctx, amp_add(ctx, amp_mul(ctx, v, m), amp_div(ctx, m, v)));
    amp_tensor_write_f32(m, (float[]){7, 7, 7});
    amp_backward(ctx, loss);
    amp_tensor_read_f32(amp_tensor_grad(m), g);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(g[i], xs[i] + 1.0f / xs[i]);
    amp_tensor_t *k = param(4, S(1, 1, 1, 1), (float[]){1});
    amp_tensor_t *img = amp_tensor_from_f32(ctx, F32, 4, S(1, 1, 2, 2), xs);
    loss = amp_sum(ctx, amp_conv2d(ctx, img, k, NULL, 1, 0));
    amp_tensor_write_f32(k, (float[]){5});
    amp_backward(ctx, loss);
    amp_tensor_read_f32(amp_tensor_grad(k), g);
    ck_assert_float_eq(g[0], 10);
}
END_TEST

// The data written instead, where the weight's gradient reads it: that still aborts.
START_TEST(test_the_data_a_weight_gradient_reads_may_not_change) {
    amp_tensor_t *x = amp_tensor_from_f32(ctx, F32, 2, S(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    amp_tensor_t *w = param(2, S(2, 3), (float[]){1, 1, 1, 1, 1, 1});
    amp_tensor_t *loss = amp_sum(ctx, amp_linear(ctx, x, w, NULL));
    test_expect_abort("(the backward of linear reads it)");
    amp_tensor_write_f32(x, (float[]){0, 0, 0, 0, 0, 0});
    amp_backward(ctx, loss);
}
END_TEST

// What the runtime writes in place, and writes that no backward reads, pass: an add's operand
// written after the add, optimizer steps and the GradScaler between micro-batches (without a
// reset, under autocast with its cached casts and the copies the optimizer makes ahead).
START_TEST(test_writes_that_no_backward_reads) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2}), *x = param(1, S(2), (float[]){3, 4});
    amp_tensor_t *loss = amp_sum(ctx, amp_add(ctx, w, x));
    amp_tensor_write_f32(x, (float[]){30, 40});
    amp_backward(ctx, loss);
    float g[2];
    amp_tensor_read_f32(amp_tensor_grad(w), g);
    ck_assert_float_eq(g[0], 1.0f);
    ck_assert_float_eq(g[1], 1.0f);
    amp_ctx_reset(ctx);

    amp_tensor_t *a = param(2, S(2, 3), (float[]){.1f, .2f, .3f, -.1f, -.2f, -.3f});
    amp_tensor_t *in =
        amp_tensor_from_f32(ctx, F32, 2, S(4, 3), (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAMW);
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &a, 1, &opt), AMP_OK);
    amp_scaler_params sp = amp_scaler_defaults();
    amp_scaler_t *sc;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    for (int step = 0; step < 3; step++) {
        amp_autocast_begin(ctx, true, F16, true);
        for (int mb = 0; mb < 2; mb++) {
            amp_tensor_t *h = amp_gelu(ctx, amp_linear(ctx, in, a, NULL), false);
            amp_backward(ctx, amp_scaler_scale(sc, ctx, amp_mean(ctx, amp_mul(ctx, h, h))));
            ck_assert_int_eq(amp_scaler_step(sc, opt, NULL), AMP_OK); // a step per micro-batch
            ck_assert_int_eq(amp_scaler_update(sc), AMP_OK);
        }
        amp_autocast_end(ctx);
        amp_optim_zero_grad(opt);
        amp_ctx_reset(ctx);
    }
    amp_optim_free(opt);
    amp_scaler_free(sc);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Host copies and views

START_TEST(test_write_f32_into_views) {
    amp_tensor_t *t = amp_tensor_new(ctx, F32, 2, S(2, 3));
    amp_tensor_t *v = amp_transpose(ctx, t, 0, 1); // (3, 2)
    amp_tensor_write_f32(v, (float[]){0, 1, 2, 3, 4, 5});
    float got[6];
    amp_tensor_read_f32(t, got);
    ck_assert_mem_eq(got, ((float[]){0, 2, 4, 1, 3, 5}), sizeof got);
    amp_tensor_read_f32(v, got);
    ck_assert_mem_eq(got, ((float[]){0, 1, 2, 3, 4, 5}), sizeof got);

    amp_tensor_t *h = amp_tensor_new(ctx, F16, 2, S(2, 4)), *piece[2];
    ck_assert_int_eq(amp_split(ctx, h, 2, 1, piece, 2), 2); // (2, 2) each, strides (4, 1)
    amp_tensor_write_f32(piece[1], (float[]){1, 2, 3, 1.0f / 3});
    float hv[8];
    amp_tensor_read_f32(h, hv);
    ck_assert_mem_eq(hv, ((float[]){0, 0, 1, 2, 0, 0, 3, amp_round_to(F16, 1.0f / 3)}), sizeof hv);
}
END_TEST

// torch.split's count whatever max: the views written are the first max of them (the caller sees
// that some were left out); a dimension of length 0 is one empty view, as in PyTorch.
START_TEST(test_split_counts_as_torch_does) {
    amp_tensor_t *x = amp_tensor_new(ctx, F32, 2, S(2, 8)), *p[2];
    ck_assert_int_eq(amp_split(ctx, x, 2, 1, p, 2), 4);
    ck_assert_int_eq(amp_tensor_dim(p[1], 1), 2);
    ck_assert_int_eq(amp_split(ctx, x, 3, 1, p, 2), 3); // 3, 3, 2
    amp_tensor_t *e = amp_tensor_new(ctx, F32, 2, S(0, 4));
    ck_assert_int_eq(amp_split(ctx, e, 2, 0, p, 2), 1);
    ck_assert_int_eq(amp_tensor_dim(p[0], 0), 0);
    ck_assert_int_eq(amp_tensor_dim(p[0], 1), 4);
}
END_TEST

START_TEST(test_tensor_from_null_data_aborts) {
    test_expect_abort("(amp_tensor_write: NULL host data for 6 elements)");
    amp_tensor_from(ctx, F32, 2, S(2, 3), NULL);
}
END_TEST

START_TEST(test_read_raw_from_a_view) {
    amp_tensor_t *t =
        amp_tensor_from(ctx, AMP_DTYPE_I32, 2, S(2, 3), (int32_t[]){0, 1, 2, 3, 4, 5});
    int32_t got[6];
    amp_tensor_read(amp_transpose(ctx, t, 0, 1), got);
    ck_assert_mem_eq(got, ((int32_t[]){0, 3, 1, 4, 2, 5}), sizeof got);
}
END_TEST

START_TEST(test_write_f32_into_an_integer_view_aborts) {
    amp_tensor_t *t = amp_tensor_new(ctx, AMP_DTYPE_I64, 2, S(2, 3));
    test_expect_abort("writes an integer tensor only when it is contiguous");
    amp_tensor_write_f32(amp_transpose(ctx, t, 0, 1), (float[]){0, 1, 2, 3, 4, 5});
}
END_TEST

// PyTorch's normal_ and uniform_ have no integer kernel; an integer tensor got rounded values.
START_TEST(test_randn_of_an_integer_tensor_aborts) {
    amp_tensor_t *t = amp_tensor_new(ctx, AMP_DTYPE_I32, 1, S(4));
    test_expect_abort("amp_tensor_randn of an i32 tensor: PyTorch's normal_ has no integer kernel");
    amp_tensor_randn(t, 1.0f);
}
END_TEST

START_TEST(test_uniform_of_an_integer_tensor_aborts) {
    amp_tensor_t *t = amp_tensor_new(ctx, AMP_DTYPE_I64, 1, S(4));
    test_expect_abort("amp_tensor_uniform of an i64 tensor: PyTorch's uniform_ has no integer "
                      "kernel");
    amp_tensor_uniform(t, 3.0f);
}
END_TEST

// ---------------------------------------------------------------------------------------------
// Arguments

START_TEST(test_checkpoint_null_arguments) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2});
    ck_assert_int_eq(amp_checkpoint_save(NULL, &w, 1, NULL, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "checkpoint: path is NULL");
    ck_assert_int_eq(amp_checkpoint_load(NULL, &w, 1, NULL, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(amp_checkpoint_save("/nonexistent/ck", NULL, 1, NULL, NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(amp_checkpoint_scaler_enabled("/nonexistent/ck", NULL),
                     AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "checkpoint: enabled is NULL");
}
END_TEST

// A NULL out is AMP_ERR_INVALID_ARGUMENT (it crashed); zero_grad(NULL) does nothing, as free.
START_TEST(test_null_arguments) {
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, NULL), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "amp_ctx_new: out is NULL");
    amp_tensor_zero_grad(NULL);
    amp_tensor_free(NULL);
}
END_TEST

// amp_last_error() is the message of the last call that returned a status: "" once a later one
// returns AMP_OK (it kept the old message), and an op in between leaves it alone.
START_TEST(test_last_error_cleared_on_success) {
    amp_tensor_t *w = param(1, S(2), (float[]){1, 2});
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_SGD);
    op.lr = -1;
    amp_optim_t *opt;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(amp_last_error(), "Invalid learning rate: -1");
    amp_tensor_t *y = amp_mul(ctx, w, w); // ops decide their dtype without touching it
    amp_autocast_begin(ctx, true, AMP_DTYPE_BF16, true);
    amp_linear(ctx, amp_reshape(ctx, y, 2, (int64_t[]){1, 2}),
               amp_reshape(ctx, w, 2, (int64_t[]){1, 2}), NULL);
    amp_autocast_end(ctx);
    ck_assert_str_eq(amp_last_error(), "Invalid learning rate: -1");
    op.lr = 0.1;
    ck_assert_int_eq(amp_optim_new(ctx, &op, &w, 1, &opt), AMP_OK);
    ck_assert_str_eq(amp_last_error(), "");
    ck_assert_int_eq(amp_scaler_update(NULL), AMP_ERR_INVALID_ARGUMENT);
    amp_scaler_params sp = amp_scaler_defaults();
    amp_scaler_t *sc;
    ck_assert_int_eq(amp_scaler_new(&sp, &sc), AMP_OK);
    ck_assert_str_eq(amp_last_error(), "");
    amp_dtype dt;
    ck_assert_int_eq(
        amp_autocast_decide("gelu", 1, (amp_dtype[]){AMP_DTYPE_I32}, AMP_DTYPE_F16, &dt),
        AMP_ERR_INVALID_ARGUMENT);
    ck_assert_str_ne(amp_last_error(), "");
    ck_assert_int_eq(amp_autocast_decide("mm", 1, (amp_dtype[]){AMP_DTYPE_F32}, AMP_DTYPE_F16, &dt),
                     AMP_OK);
    ck_assert_str_eq(amp_last_error(), "");
    amp_scaler_free(sc);
    amp_optim_free(opt);
}
END_TEST

Suite *tensor_suite(void) {
    Suite *s = suite_create("tensor");
    TCase *f = tcase_create("free");
    tcase_add_checked_fixture(f, setup, teardown);
    tcase_add_test(f, test_free_targets_between_micro_batches);
    tcase_add_test(f, test_free_before_backward);
    tcase_add_test(f, test_zero_grad_of_a_gradient_the_tape_holds);
    tcase_add_test(f, test_free_after_the_optimizer);
    tcase_add_test_raise_signal(f, test_free_of_an_optimizer_parameter_aborts, SIGABRT);
    tcase_add_test_raise_signal(f, test_free_of_a_gradient_aborts, SIGABRT);
    suite_add_tcase(s, f);
    TCase *sh = tcase_create("shape");
    tcase_add_checked_fixture(sh, setup, teardown);
    tcase_add_test_raise_signal(sh, test_byte_size_overflow_aborts, SIGABRT);
    tcase_add_test_raise_signal(sh, test_numel_overflow_aborts, SIGABRT);
    tcase_add_test_raise_signal(sh, test_reshape_negative_dim_aborts, SIGABRT);
    tcase_add_test(sh, test_empty_shapes);
    suite_add_tcase(s, sh);
    TCase *v = tcase_create("version");
    tcase_add_checked_fixture(v, setup, teardown);
    tcase_add_test_raise_signal(v, test_write_after_save_aborts, SIGABRT);
    tcase_add_test_raise_signal(v, test_write_through_a_view_after_save_aborts, SIGABRT);
    tcase_add_loop_test_raise_signal(v, test_write_to_what_an_op_copied_aborts, SIGABRT, 0, 2);
    tcase_add_test(v, test_long_layer_names_stay_apart);
    tcase_add_test(v, test_writes_that_no_backward_reads);
    tcase_add_test(v, test_a_weight_only_its_own_gradient_needs_may_change);
    tcase_add_test_raise_signal(v, test_the_data_a_weight_gradient_reads_may_not_change, SIGABRT);
    suite_add_tcase(s, v);
    TCase *h = tcase_create("host_copy");
    tcase_add_checked_fixture(h, setup, teardown);
    tcase_add_test(h, test_write_f32_into_views);
    tcase_add_test(h, test_read_raw_from_a_view);
    tcase_add_test(h, test_split_counts_as_torch_does);
    tcase_add_test_raise_signal(h, test_tensor_from_null_data_aborts, SIGABRT);
    tcase_add_test_raise_signal(h, test_write_f32_into_an_integer_view_aborts, SIGABRT);
    tcase_add_test_raise_signal(h, test_randn_of_an_integer_tensor_aborts, SIGABRT);
    tcase_add_test_raise_signal(h, test_uniform_of_an_integer_tensor_aborts, SIGABRT);
    suite_add_tcase(s, h);
    TCase *a = tcase_create("args");
    tcase_add_checked_fixture(a, setup, teardown);
    tcase_add_test(a, test_checkpoint_null_arguments);
    tcase_add_test(a, test_null_arguments);
    tcase_add_test(a, test_last_error_cleared_on_success);
    suite_add_tcase(s, a);
    return s;
}
