/*
 * mlp.c — a multilayer perceptron trained with libampcore: --depth x [Linear + GELU], then a
 * Linear to class logits (layers fc1 .. fc<depth+1>), cross-entropy on fp32 logits.
 *
 * Data: Gaussian clusters, one random centre per class in R^width, examples = centre + N(0, 1)
 * noise, all fixed by --seed: learnable in a few dozen steps. Defaults are small so that a CPU
 * run takes well under a second; the benchmark's shape (shared/bench/README.md) is
 * `--width 4096 --depth 4 --classes 1000 --batch 8192`.
 *
 *     mlp --precision fp16 --steps 60
 *     mlp --precision fp16 --fault nan-input     (see --help for every fault)
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

#define CENTRE_STD 0.5f // per coordinate; the noise has std 1

static struct { int64_t width, depth, classes; } shape = {.width = 64, .depth = 3, .classes = 10};

static const sample_int_flag shape_flags[] = {
    {"--width", "input and hidden width", &shape.width, 1},
    {"--depth", "Linear+GELU layers before the logits layer", &shape.depth, 1},
    {"--classes", "classes (logits layer width)", &shape.classes, 1},
};

static const sample_spec spec = {
    .name = "mlp",
    .summary = "Trains an MLP classifier (Linear+GELU layers, cross-entropy) on Gaussian clusters.",
    .steps = 60,
    .batch = 64,
    .lr_adam = 3e-3,
    .lr_sgd = 0.05,
    .shape_flags = shape_flags,
    .n_shape_flags = sizeof shape_flags / sizeof shape_flags[0],
};

typedef struct mlp {
    sample_params params;
    sample_linear *fc; // [depth + 1]: fc1 .. fc<depth+1>
    int64_t n_fc;
    sample_batch data[SAMPLE_DATA_BATCHES];
} mlp;

// What the flags ask for at once, lower bounds, checked before the first tensor is made (the
// library aborts when it cannot allocate one). Every parameter is a Linear's, read by autocast as
// a 16-bit copy; activations are 16-bit under autocast.
static bool mlp_memory_fits(const sample_opts *o) {
    int64_t W = shape.width, D = shape.depth, K = shape.classes, B = o->batch;
    int64_t act = (int64_t)amp_dtype_size(o->precision);
    int64_t floats = sample_add(sample_mul(D, sample_mul(W, W) + W), sample_mul(W, K) + K);
    const sample_mem_part parts[] = {
        {"the data (4 batches of --batch x --width floats)",
         sample_mul(SAMPLE_DATA_BATCHES, sample_mul(B, 4 * W + 4))},
        {"the parameters with their gradients, optimizer state and 16-bit copies (--width, "
         "--depth, --classes)",
         sample_param_bytes(o, floats, 2 * (D + 1), floats)},
        {"the activations (--batch x (2 x --depth x --width + --classes))", // Linear, GELU, logits
         sample_mul(sample_mul(B, sample_add(sample_mul(2 * D, W), K)), act)},
    };
    return sample_memory_fits(o, parts, (int)(sizeof parts / sizeof parts[0]));
}

static void mlp_init(mlp *m, amp_ctx_t *ctx, const sample_opts *o) {
    *m = (mlp){.n_fc = shape.depth + 1};
    m->fc = sample_calloc("the layer list (--depth)", m->n_fc, sizeof *m->fc);
    for (int64_t i = 0; i < m->n_fc; i++) {
        char name[32];
        snprintf(name, sizeof name, "fc%lld", (long long)i + 1);
        int64_t out = i + 1 < m->n_fc ? shape.width : shape.classes;
        sample_linear_init(&m->fc[i], &m->params, ctx, "", name, shape.width, out, true);
    }

    sample_rng rng = sample_rng_new(o->seed, 1);
    int64_t W = shape.width, B = o->batch, K = shape.classes;
    float *centres = sample_calloc("the class centres (--classes x --width floats)",
                                   sample_mul(K, W), sizeof *centres);
    float *x =
        sample_calloc("an input batch (--batch x --width floats)", sample_mul(B, W), sizeof *x);
    int32_t *y = sample_calloc("the targets of a batch (--batch)", B, sizeof *y);
    for (int64_t i = 0; i < K * W; i++)
        centres[i] = CENTRE_STD * sample_rng_normal(&rng);
    for (int k = 0; k < SAMPLE_DATA_BATCHES; k++) {
        for (int64_t b = 0; b < B; b++) {
            y[b] = sample_rng_below(&rng, (int32_t)shape.classes);
            for (int64_t j = 0; j < W; j++)
                x[b * W + j] = centres[y[b] * W + j] + sample_rng_normal(&rng);
        }
        m->data[k].x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 2, (int64_t[]){B, W}, x); // (B, W)
        m->data[k].y = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, &B, y);                    // (B)
    }
    free(centres);
    free(x);
    free(y);
}

static void mlp_free(mlp *m) {
    sample_data_free(m->data);
    sample_params_free(&m->params);
    free(m->fc);
}

static amp_tensor_t *mlp_loss(void *model, sample_step *s) {
    mlp *m = model;
    const sample_batch *batch = sample_step_batch(s, m->data);
    amp_tensor_t *h = sample_input(s, batch->x); // (B, W)
    for (int64_t i = 0; i + 1 < m->n_fc; i++)
        h = sample_linear_forward(s->ctx, &m->fc[i], h, SAMPLE_ACT_GELU);
    amp_tensor_t *logits =
        sample_linear_forward(s->ctx, &m->fc[m->n_fc - 1], h, SAMPLE_ACT_NONE); // (B, classes)
    return sample_loss(s, logits, batch->y);
}

int main(int argc, char **argv) {
    sample_opts o;
    int rc = sample_parse_args(&spec, argc, argv, &o);
    if (rc != SAMPLE_CONTINUE) return rc;
    if (!mlp_memory_fits(&o)) return 1;
    amp_ctx_t *ctx = sample_ctx_new(&o);
    if (!ctx) return 1;
    mlp m;
    mlp_init(&m, ctx, &o);
    rc = sample_train(&o, ctx, &m.params, mlp_loss, &m);
    mlp_free(&m);
    amp_ctx_free(ctx);
    return rc;
}
