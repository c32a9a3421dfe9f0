/*
 * exit_prog.c — a few training steps under the instrumentation, then exit() without
 * amp_ctx_free: every step must still reach the database (on a device the last step's statistics
 * come back one step late and are read at exit). tests/test_e2e.c and tests/test_cuda_gpu.c run
 * it under `ampprobe run`. Steps 1, 4, ... end with the loss as an f32 tensor and steps 2, 5, ...
 * as an f16 one (amp_ctx_step_end_loss: read by the instrumentation, on a device behind the
 * step's work), the others with its value; META "exit_prog_loss_N" holds what the program read
 * of step N's loss, for the test to compare with AMP_STEPS.
 *
 * EXIT_PROG_EXTRA_OPS=N in the environment: each forward adds N ops on a 1-element tensor before
 * the layer (more than the instrumentation's queue holds at once: it reads it within the step).
 * EXIT_PROG_NO_BACKWARD=1: the steps run their forward alone (an evaluation loop).
 *
 * PAUSE_MS: the program idles that long between steps (a batch being loaded), then enters its
 * layer: no op's time may include the pause. `_exit`: it frees the context and ends with _exit()
 * instead (no exit handler runs): freeing the context writes out what it recorded.
 *
 *   amp_exit_prog cpu|cuda STEPS [PAUSE_MS [_exit]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amp-record.h"

// The context is never freed, on purpose: no leak report in the sanitizer build.
__attribute__((used)) const char *__asan_default_options(void) {
    return "detect_leaks=0";
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5 || (strcmp(argv[1], "cpu") != 0 && strcmp(argv[1], "cuda") != 0) ||
        atoi(argv[2]) <= 0 || (argc == 5 && strcmp(argv[4], "_exit") != 0)) {
        fprintf(stderr, "usage: amp_exit_prog cpu|cuda STEPS [PAUSE_MS [_exit]]\n");
        return 2;
    }
    const int pause_ms = argc >= 4 ? atoi(argv[3]) : 0;
    const amp_device dev = strcmp(argv[1], "cuda") == 0 ? AMP_DEVICE_CUDA : AMP_DEVICE_CPU;
    amp_ctx_t *ctx;
    if (amp_ctx_new(dev, 1, &ctx) != AMP_OK) {
        fprintf(stderr, "amp_exit_prog: %s\n", amp_last_error());
        return 2;
    }
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){16, 32});
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){64, 32});
    amp_tensor_randn(w, 0.1f);
    amp_tensor_randn(x, 1.0f);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_name(w, "model.weight");
    const char *extra_env = getenv("EXIT_PROG_EXTRA_OPS");
    const long extra = extra_env ? atol(extra_env) : 0;
    const char *no_backward = getenv("EXIT_PROG_NO_BACKWARD");
    for (int s = 0, steps = atoi(argv[2]); s < steps; s++) {
        if (pause_ms) nanosleep(&(struct timespec){0, pause_ms * 1000000L}, NULL);
        amp_tensor_t *t = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
        for (long k = 0; k < extra; k++)
            t = amp_add_scalar(ctx, t, 1.0);
        amp_layer_begin(ctx, "model");
        amp_tensor_t *loss = amp_mean(ctx, amp_gelu(ctx, amp_linear(ctx, x, w, NULL), false));
        amp_layer_end(ctx);
        if (!no_backward || strcmp(no_backward, "1") != 0) amp_backward(ctx, loss);
        const amp_tensor_t *given = s % 3 == 2 ? amp_to(ctx, loss, AMP_DTYPE_F16) : loss;
        char key[32], value[32];
        snprintf(key, sizeof key, "exit_prog_loss_%d", s);
        snprintf(value, sizeof value, "%.9g", amp_tensor_item(given));
        amp_record_meta(&(amp_rec_meta){key, value});
        if (s % 3 == 0)
            amp_ctx_step_end(ctx, amp_tensor_item(loss));
        else
            amp_ctx_step_end_loss(ctx, given);
        amp_ctx_reset(ctx);
    }
    if (argc == 5) {
        amp_ctx_free(ctx);
        _exit(0);
    }
    exit(0); // no amp_ctx_free
}
