/*
 * tensors.c — small tensor fixtures shared by the suites that drive the optimizers and the
 * GradScaler on the CPU, and the check of an abort's message: declared in tests.h.
 */
#include "tests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

amp_ctx_t *test_cpu_ctx(void) {
    amp_ctx_t *ctx;
    ck_assert_int_eq(amp_ctx_new(AMP_DEVICE_CPU, 1, &ctx), AMP_OK);
    return ctx;
}

amp_tensor_t *test_param_f32(amp_ctx_t *ctx, int n, const float *v) {
    amp_tensor_t *t = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 1, (int64_t[]){n}, v);
    amp_tensor_set_requires_grad(t, true);
    return t;
}

amp_tensor_t *test_param(amp_ctx_t *ctx, amp_dtype dt, const char *name, int ndim,
                         const int64_t *shape, float v0) {
    amp_tensor_t *t = amp_tensor_new(ctx, dt, ndim, shape);
    const int64_t n = amp_tensor_numel(t);
    float *v = amp_xmalloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = v0 + 0.25f * (float)i;
    amp_tensor_write_f32(t, v);
    free(v);
    amp_tensor_set_requires_grad(t, true);
    if (name) amp_tensor_set_name(t, name);
    return t;
}

void test_set_grad_f32(amp_ctx_t *ctx, amp_tensor_t *t, const float *v) {
    amp_tensor_zero_grad(t);
    amp_tensor_t *g = amp_scratch_new(ctx, AMP_DTYPE_F32, t->ndim, t->shape);
    amp_tensor_write_f32(g, v);
    amp_grad_accumulate(ctx, t, g);
}

static const char *expected_abort;

// The hook: a message without the expected words ends the process another way than SIGABRT.
static void check_abort_message(const char *msg) {
    if (strstr(msg, expected_abort)) return;
    fprintf(stderr, "the abort does not say \"%s\": %s\n", expected_abort, msg);
    _exit(3);
}

void test_expect_abort(const char *words) {
    expected_abort = words;
    amp_set_abort_hook(check_abort_message);
}
