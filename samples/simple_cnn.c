/*
 * simple_cnn.c — the SimpleCNN of the hands-on PyTorch AMP tutorial, trained with libampcore,
 * with the tutorial's shape bug fixed (its fc layer is sized for 64x64 images but it is fed
 * 32x32 ones): here fc is sized from --image.
 *
 *   conv1: conv3x3(3 -> 32, padding 1) + relu + maxpool2     (B, 32, H/2, W/2)
 *   conv2: conv3x3(32 -> 64, padding 1) + relu + maxpool2    (B, 64, H/4, W/4)
 *   fc:    linear(64 * H/4 * W/4 -> 10)                      (B, 10), cross-entropy on fp32
 *
 * Data: 10 classes, each a fixed random colour pattern on a 4x4 grid of blocks; an example is its
 * class pattern plus N(0, 1) pixel noise, all fixed by --seed. Default images are 32x32 so a CPU
 * run is quick; `--image 64 --batch 64` is the benchmark's shape (shared/bench/README.md).
 *
 *     simple_cnn --precision bf16
 *     simple_cnn --precision fp16 --fault scale-thrash
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CLASSES 10
#define GRID 4           // pattern blocks per side
#define PATTERN_STD 0.5f // pattern amplitude; the noise has std 1

static int64_t image = 32; // H = W

static const sample_int_flag shape_flags[] = {
    {"--image", "image height and width in pixels, a multiple of 4", &image, 4},
};

static const sample_spec spec = {
    .name = "simple_cnn",
    .summary = "Trains the AMP tutorial's SimpleCNN (2 conv+relu+maxpool, 1 linear) on synthetic\n"
               "10-class images.",
    .steps = 20,
    .batch = 16,
    .lr_adam = 1e-3,
    .lr_sgd = 0.02,
    .shape_flags = shape_flags,
    .n_shape_flags = sizeof shape_flags / sizeof shape_flags[0],
};

typedef struct conv {
    const char *layer;
    amp_tensor_t *w, *b; // (Cout, Cin, 3, 3), (Cout)
} conv;

typedef struct simple_cnn {
    sample_params params;
    conv conv1, conv2;
    sample_linear fc;
    sample_batch data[SAMPLE_DATA_BATCHES];
} simple_cnn;

// nn.Conv2d(cin, cout, 3) with PyTorch's default initialisation, U(+-1/sqrt(cin * 9)).
static conv conv_init(sample_params *ps, amp_ctx_t *ctx, const char *layer, int64_t cin,
                      int64_t cout) {
    char name[64];
    float bound = 1.0f / sqrtf((float)(cin * 9));
    conv c = {.layer = layer};
    snprintf(name, sizeof name, "%s.weight", layer);
    c.w = sample_param(ps, ctx, name, 4, (int64_t[]){cout, cin, 3, 3});
    snprintf(name, sizeof name, "%s.bias", layer);
    c.b = sample_param(ps, ctx, name, 1, &cout);
    amp_tensor_uniform(c.w, bound);
    amp_tensor_uniform(c.b, bound);
    return c;
}

// conv3x3 (padding 1) + relu + maxpool2: (B, Cin, H, W) -> (B, Cout, H/2, W/2).
static amp_tensor_t *conv_forward(amp_ctx_t *ctx, const conv *c, amp_tensor_t *x) {
    amp_layer_begin(ctx, c->layer);
    amp_tensor_t *conv_out = amp_conv2d(ctx, x, c->w, c->b, 1, 1);
    amp_tensor_t *act = amp_relu(ctx, conv_out);
    amp_tensor_drop(conv_out); // no backward reads it (ReLU's reads its output): peak memory
    amp_tensor_t *y = amp_max_pool2d(ctx, act, 2, 2);
    amp_layer_end(ctx);
    return y;
}

static void make_data(simple_cnn *m, amp_ctx_t *ctx, const sample_opts *o) {
    sample_rng rng = sample_rng_new(o->seed, 2);
    int64_t B = o->batch, H = image, plane = H * H, block = H / GRID;
    float pattern[CLASSES][3][GRID][GRID];
    for (int k = 0; k < CLASSES; k++)
        for (int ch = 0; ch < 3; ch++)
            for (int i = 0; i < GRID; i++)
                for (int j = 0; j < GRID; j++)
                    pattern[k][ch][i][j] = PATTERN_STD * sample_rng_normal(&rng);
    float *x = sample_calloc("an input batch (--batch x 3 x --image^2 floats)",
                             sample_mul(B, sample_mul(3, plane)), sizeof *x);
    int32_t *y = sample_calloc("the targets of a batch (--batch)", B, sizeof *y);
    for (int d = 0; d < SAMPLE_DATA_BATCHES; d++) {
        for (int64_t b = 0; b < B; b++) {
            y[b] = sample_rng_below(&rng, CLASSES);
            for (int ch = 0; ch < 3; ch++)
                for (int64_t p = 0; p < plane; p++)
                    x[(b * 3 + ch) * plane + p] =
                        pattern[y[b]][ch][p / H / block][p % H / block] + sample_rng_normal(&rng);
        }
        m->data[d].x = amp_tensor_from_f32(ctx, AMP_DTYPE_F32, 4, (int64_t[]){B, 3, H, H}, x);
        m->data[d].y = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, &B, y);
    }
    free(x);
    free(y);
}

// fc's input features: 64 channels of (H/4) x (H/4).
static int64_t fc_in(void) {
    return sample_mul(64, sample_mul(image / 4, image / 4));
}

// What the flags ask for at once, lower bounds, checked before the first tensor is made (the
// library aborts when it cannot allocate one). Every parameter is a conv's or the Linear's, read by
// autocast as a 16-bit copy. The ReLU outputs that backward keeps, conv1's (B, 32, H, H) and
// conv2's (B, 64, H/2, H/2), are 16-bit under autocast.
static bool simple_cnn_memory_fits(const sample_opts *o) {
    int64_t B = o->batch, plane = sample_mul(image, image);
    int64_t act = (int64_t)amp_dtype_size(o->precision);
    int64_t convs = 32 * 3 * 9 + 32 + 64 * 32 * 9 + 64;
    int64_t floats = sample_add(convs, sample_add(sample_mul(fc_in(), CLASSES), CLASSES));
    const sample_mem_part parts[] = {
        {"the data (4 batches of --batch x 3 x --image^2 floats)",
         sample_mul(SAMPLE_DATA_BATCHES, sample_mul(B, sample_add(sample_mul(12, plane), 4)))},
        {"the parameters with their gradients, optimizer state and 16-bit copies (--image)",
         sample_param_bytes(o, floats, 6, floats)},
        {"the activations (--batch x 48 x --image^2)",
         sample_mul(sample_mul(B, 48), sample_mul(plane, act))},
    };
    return sample_memory_fits(o, parts, (int)(sizeof parts / sizeof parts[0]));
}

static void simple_cnn_init(simple_cnn *m, amp_ctx_t *ctx, const sample_opts *o) {
    *m = (simple_cnn){0};
    m->conv1 = conv_init(&m->params, ctx, "conv1", 3, 32);
    m->conv2 = conv_init(&m->params, ctx, "conv2", 32, 64);
    sample_linear_init(&m->fc, &m->params, ctx, "", "fc", fc_in(), CLASSES, true);
    make_data(m, ctx, o);
}

static void simple_cnn_free(simple_cnn *m) {
    sample_data_free(m->data);
    sample_params_free(&m->params);
}

static amp_tensor_t *simple_cnn_loss(void *model, sample_step *s) {
    simple_cnn *m = model;
    const sample_batch *batch = sample_step_batch(s, m->data);
    amp_tensor_t *x = sample_input(s, batch->x);                          // (B, 3, H, W)
    x = conv_forward(s->ctx, &m->conv1, x);                               // (B, 32, H/2, W/2)
    x = conv_forward(s->ctx, &m->conv2, x);                               // (B, 64, H/4, W/4)
    x = amp_reshape(s->ctx, x, 2, (int64_t[]){amp_tensor_dim(x, 0), -1}); // (B, 64*H/4*W/4)
    amp_tensor_t *logits = sample_linear_forward(s->ctx, &m->fc, x, SAMPLE_ACT_NONE); // (B, 10)
    return sample_loss(s, logits, batch->y);
}

int main(int argc, char **argv) {
    sample_opts o;
    int rc = sample_parse_args(&spec, argc, argv, &o);
    if (rc != SAMPLE_CONTINUE) return rc;
    if (!simple_cnn_memory_fits(&o)) return 1;
    amp_ctx_t *ctx = sample_ctx_new(&o);
    if (!ctx) return 1;
    simple_cnn m;
    simple_cnn_init(&m, ctx, &o);
    rc = sample_train(&o, ctx, &m.params, simple_cnn_loss, &m);
    simple_cnn_free(&m);
    amp_ctx_free(ctx);
    return rc;
}
