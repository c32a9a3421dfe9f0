// example.c — the README's libampcore example, whole: a linear classifier trained in fp16 under
// autocast with a GradScaler and Adam (run it under `ampprobe run` to record it).
#include "amp-train.h" // includes amp.h

#include <stdio.h>
#include <string.h>

// It takes no flags: --help says so, anything else is refused (exit 2) rather than ignored.
static int usage(const char *arg) {
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        printf("usage: example\nTrains a linear classifier for 100 steps on the CPU in fp16 "
               "(autocast, GradScaler, Adam)\nand prints its first and last loss. No flags.\n");
        return 0;
    }
    fprintf(stderr, "example: %s: unexpected argument (try --help)\n", arg);
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1) return usage(argv[1]);
    amp_ctx_t *ctx;
    if (amp_ctx_new(AMP_DEVICE_CPU, /*seed*/ 1, &ctx) != AMP_OK) return 1;
    amp_tensor_t *x = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){32, 64}); // a batch
    amp_tensor_randn(x, 1.0f);
    int64_t labels[32];
    for (int i = 0; i < 32; i++)
        labels[i] = i % 10;
    amp_tensor_t *y = amp_tensor_from(ctx, AMP_DTYPE_I64, 1, (int64_t[]){32}, labels);
    amp_tensor_t *w = amp_tensor_new(ctx, AMP_DTYPE_F32, 2, (int64_t[]){10, 64});
    amp_tensor_randn(w, 0.1f);
    amp_tensor_set_requires_grad(w, true);
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    amp_scaler_params sp = amp_scaler_defaults();
    amp_optim_t *opt;
    amp_scaler_t *sc;
    if (amp_optim_new(ctx, &op, &w, 1, &opt) != AMP_OK || amp_scaler_new(&sp, &sc) != AMP_OK) {
        fprintf(stderr, "example: %s\n", amp_last_error());
        return 1;
    }

    float first = 0, last = 0;
    for (int step = 0; step < 100; step++) {
        amp_optim_zero_grad(opt);
        amp_autocast_begin(ctx, true, AMP_DTYPE_F16, true);
        amp_layer_begin(ctx, "fc");
        amp_tensor_t *logits = amp_linear(ctx, x, w, NULL); // f16 (autocast policy)
        amp_layer_end(ctx);
        amp_autocast_end(ctx);
        amp_tensor_t *loss = amp_cross_entropy(ctx, amp_to(ctx, logits, AMP_DTYPE_F32), y);
        amp_backward(ctx, amp_scaler_scale(sc, ctx, loss));
        amp_scaler_step(sc, opt, NULL); // unscale_, skip on inf/NaN
        amp_scaler_update(sc);
        last = amp_tensor_item(loss);
        if (step == 0) first = last;
        amp_ctx_step_end(ctx, last);
        amp_ctx_reset(ctx); // frees the step's tensors
    }
    printf("loss %.4f -> %.4f\n", first, last);
    amp_scaler_free(sc);
    amp_optim_free(opt);
    amp_ctx_free(ctx);
    return last < first ? 0 : 1;
}
