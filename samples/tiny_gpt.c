/*
 * tiny_gpt.c — a small pre-LN GPT trained with libampcore on next-token prediction.
 *
 *   wte, wpe     token embedding + learned positions                      (B, T, C)
 *   blocks.<i>   x += attn(ln1(x)); x += mlp(ln2(x))
 *     attn       qkv linear, split into q, k, v, heads (B, H, T, D);
 *                att = softmax(masked_fill(q @ k^T * 1/sqrt(D), causal, -inf)) @ v; proj linear
 *     mlp        fc linear (4C) + GELU, proj linear (C)
 *   ln_f, head   final layer_norm, linear to vocab logits; cross-entropy on fp32 logits
 *
 * Data: token sequences from a fixed random bigram table (each token is followed by its own
 * successor with probability 0.85, else by a uniform random token), fixed by --seed; the best
 * achievable loss is about 1.0 nat against ln(vocab) at the start. Defaults are small so a CPU
 * run takes a few seconds; the benchmark's shape (shared/bench/README.md) is
 * `--vocab 8192 --seq 512 --d-model 768 --layers 4 --heads 12 --batch 16`.
 *
 * --fault attn-overflow breaks the attention of blocks.1 (the last block when --layers 1).
 *
 *     tiny_gpt --precision fp16 --fault attn-overflow
 */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define FOLLOW_PROB 0.85f // probability that a token is followed by its successor
#define LN_EPS 1e-5f

static struct {
    int64_t vocab, seq, d_model, layers, heads;
} shape = {.vocab = 64, .seq = 16, .d_model = 32, .layers = 2, .heads = 2};

static const sample_int_flag shape_flags[] = {
    {"--vocab", "vocabulary size", &shape.vocab, 1},
    {"--seq", "sequence length T (also the number of positions)", &shape.seq, 1},
    {"--d-model", "embedding width C (a multiple of --heads)", &shape.d_model, 1},
    {"--layers", "transformer blocks", &shape.layers, 1},
    {"--heads", "attention heads", &shape.heads, 1},
};

static const sample_spec spec = {
    .name = "tiny_gpt",
    .summary = "Trains a small pre-LN GPT (causal softmax attention) on synthetic bigram text.",
    .steps = 60,
    .batch = 16,
    .lr_adam = 3e-3,
    .lr_sgd = 0.1,
    .has_attention = true,
    .shape_flags = shape_flags,
    .n_shape_flags = sizeof shape_flags / sizeof shape_flags[0],
};

typedef struct layer_norm {
    const char *layer;
    amp_tensor_t *w, *b; // (C), ones and zeros
} layer_norm;

typedef struct block {
    layer_norm ln1, ln2;
    sample_linear qkv, attn_proj; // blocks.<i>.attn.qkv, blocks.<i>.attn.proj
    sample_linear fc, mlp_proj;   // blocks.<i>.mlp.fc, blocks.<i>.mlp.proj
} block;

typedef struct tiny_gpt {
    sample_params params;
    amp_tensor_t *wte, *wpe; // (V, C), (T, C)
    block *blocks;           // [layers]
    layer_norm ln_f;
    sample_linear head;
    amp_tensor_t *pos;                      // (T) i32: 0 .. T-1
    amp_tensor_t *causal;                   // (T, T) i32: 1 where the key is in the query's future
    int overflow_block;                     // the block --fault attn-overflow breaks
    sample_batch data[SAMPLE_DATA_BATCHES]; // x (B, T) tokens, y (B, T) the next tokens
} tiny_gpt;

// ---------------------------------------------------------------------------------------------
// Parameters

static layer_norm layer_norm_init(sample_params *ps, amp_ctx_t *ctx, const char *prefix,
                                  const char *layer, int64_t C) {
    char name[96];
    layer_norm ln = {.layer = layer};
    float *ones = sample_calloc("a layer norm's weights (--d-model floats)", C, sizeof *ones);
    for (int64_t i = 0; i < C; i++)
        ones[i] = 1.0f;
    snprintf(name, sizeof name, "%s%s%s.weight", prefix, *prefix ? "." : "", layer);
    ln.w = sample_param(ps, ctx, name, 1, &C);
    amp_tensor_write_f32(ln.w, ones);
    snprintf(name, sizeof name, "%s%s%s.bias", prefix, *prefix ? "." : "", layer);
    ln.b = sample_param(ps, ctx, name, 1, &C);
    free(ones);
    return ln;
}

static void block_init(block *blk, sample_params *ps, amp_ctx_t *ctx, int index) {
    int64_t C = shape.d_model;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "blocks.%d", index);
    blk->ln1 = layer_norm_init(ps, ctx, prefix, "ln1", C);
    snprintf(prefix, sizeof prefix, "blocks.%d.attn", index);
    sample_linear_init(&blk->qkv, ps, ctx, prefix, "qkv", C, 3 * C, true);
    sample_linear_init(&blk->attn_proj, ps, ctx, prefix, "proj", C, C, true);
    snprintf(prefix, sizeof prefix, "blocks.%d", index);
    blk->ln2 = layer_norm_init(ps, ctx, prefix, "ln2", C);
    snprintf(prefix, sizeof prefix, "blocks.%d.mlp", index);
    sample_linear_init(&blk->fc, ps, ctx, prefix, "fc", C, 4 * C, true);
    sample_linear_init(&blk->mlp_proj, ps, ctx, prefix, "proj", 4 * C, C, true);
}

// The bigram sequences, and the position and causal-mask tensors.
static void make_data(tiny_gpt *m, amp_ctx_t *ctx, const sample_opts *o) {
    sample_rng rng = sample_rng_new(o->seed, 3);
    int64_t B = o->batch, T = shape.seq;
    int32_t V = (int32_t)shape.vocab;
    int32_t *successor = sample_calloc("the bigram table (--vocab)", V, sizeof *successor);
    int32_t *seq = sample_calloc("a sequence (--seq)", T + 1, sizeof *seq);
    int32_t *x = sample_calloc("a token batch (--batch x --seq)", sample_mul(B, T), sizeof *x);
    int32_t *y = sample_calloc("a target batch (--batch x --seq)", sample_mul(B, T), sizeof *y);
    int32_t *mask =
        sample_calloc("the causal mask (--seq x --seq)", sample_mul(T, T), sizeof *mask);
    for (int32_t v = 0; v < V; v++)
        successor[v] = sample_rng_below(&rng, V);
    for (int d = 0; d < SAMPLE_DATA_BATCHES; d++) {
        for (int64_t b = 0; b < B; b++) {
            seq[0] = sample_rng_below(&rng, V);
            for (int64_t t = 1; t <= T; t++)
                seq[t] = sample_rng_uniform(&rng) < FOLLOW_PROB ? successor[seq[t - 1]]
                                                                : sample_rng_below(&rng, V);
            for (int64_t t = 0; t < T; t++) {
                x[b * T + t] = seq[t];
                y[b * T + t] = seq[t + 1];
            }
        }
        m->data[d].x = amp_tensor_from(ctx, AMP_DTYPE_I32, 2, (int64_t[]){B, T}, x);
        m->data[d].y = amp_tensor_from(ctx, AMP_DTYPE_I32, 2, (int64_t[]){B, T}, y);
    }
    for (int64_t i = 0; i < T; i++) {
        seq[i] = (int32_t)i;
        for (int64_t j = 0; j < T; j++)
            mask[i * T + j] = j > i;
    }
    m->pos = amp_tensor_from(ctx, AMP_DTYPE_I32, 1, &T, seq);
    m->causal = amp_tensor_from(ctx, AMP_DTYPE_I32, 2, (int64_t[]){T, T}, mask);
    free(successor);
    free(seq);
    free(x);
    free(y);
    free(mask);
}

// What the flags ask for at once, lower bounds, checked before the first tensor is made (the
// library aborts when it cannot allocate one). Backward keeps every block's attention
// probabilities (B, heads, T, T), f32 as softmax runs under autocast, and the logits (B, T, V),
// 16-bit under autocast. Autocast reads the Linears' parameters (not the embeddings' or layer
// norms') as 16-bit copies.
static bool tiny_gpt_memory_fits(const sample_opts *o) {
    int64_t B = o->batch, T = shape.seq, V = shape.vocab, C = shape.d_model, L = shape.layers;
    int64_t act = (int64_t)amp_dtype_size(o->precision);
    int64_t per_block = sample_add(sample_mul(12, sample_mul(C, C)), 13 * C); // in 12 tensors
    int64_t embeddings = sample_mul(2 * V + T, C); // wte, wpe and the head
    int64_t floats = sample_add(embeddings, sample_add(sample_mul(L, per_block), 2 * C));
    int64_t linears = sample_add(sample_mul(L, sample_add(sample_mul(12, sample_mul(C, C)), 9 * C)),
                                 sample_mul(V, C)); // the blocks' four, and the head
    int64_t tokens = sample_mul(B, T);
    const sample_mem_part parts[] = {
        {"the data (4 batches of 2 x --batch x --seq tokens)",
         sample_mul(SAMPLE_DATA_BATCHES * 2 * 4, tokens)},
        {"the causal mask (--seq x --seq)", sample_mul(sample_mul(T, T), 4)},
        {"the parameters with their gradients, optimizer state and 16-bit copies (--vocab, "
         "--seq, --d-model, --layers)",
         sample_param_bytes(o, floats, sample_add(sample_mul(12, L), 5), linears)},
        {"the attention probabilities (--layers x --batch x --heads x --seq^2 floats)",
         sample_mul(sample_mul(sample_mul(L, tokens), sample_mul(shape.heads, T)), 4)},
        {"the logits (--batch x --seq x --vocab)", sample_mul(sample_mul(tokens, V), act)},
    };
    return sample_memory_fits(o, parts, (int)(sizeof parts / sizeof parts[0]));
}

static void tiny_gpt_init(tiny_gpt *m, amp_ctx_t *ctx, const sample_opts *o) {
    int64_t C = shape.d_model;
    *m = (tiny_gpt){.overflow_block = shape.layers > 1 ? 1 : 0};
    m->wte = sample_param(&m->params, ctx, "wte.weight", 2, (int64_t[]){shape.vocab, C});
    m->wpe = sample_param(&m->params, ctx, "wpe.weight", 2, (int64_t[]){shape.seq, C});
    amp_tensor_randn(m->wte, 1.0f); // nn.Embedding's N(0, 1)
    amp_tensor_randn(m->wpe, 1.0f);
    m->blocks = sample_calloc("the block list (--layers)", shape.layers, sizeof *m->blocks);
    for (int i = 0; i < shape.layers; i++)
        block_init(&m->blocks[i], &m->params, ctx, i);
    m->ln_f = layer_norm_init(&m->params, ctx, "", "ln_f", C);
    sample_linear_init(&m->head, &m->params, ctx, "", "head", C, shape.vocab, false);
    make_data(m, ctx, o);
}

static void tiny_gpt_free(tiny_gpt *m) {
    sample_data_free(m->data);
    amp_tensor_free(m->pos);
    amp_tensor_free(m->causal);
    sample_params_free(&m->params);
    free(m->blocks);
}

// ---------------------------------------------------------------------------------------------
// Forward

static amp_tensor_t *layer_norm_forward(amp_ctx_t *ctx, const layer_norm *ln, amp_tensor_t *x) {
    amp_layer_begin(ctx, ln->layer);
    amp_tensor_t *y = amp_layer_norm(ctx, x, ln->w, ln->b, LN_EPS);
    amp_layer_end(ctx);
    return y;
}

// Causal self-attention of block `index` on h (B, T, C).
static amp_tensor_t *attention(const tiny_gpt *m, sample_step *s, int index, amp_tensor_t *h) {
    amp_ctx_t *ctx = s->ctx;
    const block *blk = &m->blocks[index];
    int64_t B = amp_tensor_dim(h, 0), T = amp_tensor_dim(h, 1), C = amp_tensor_dim(h, 2);
    int64_t H = shape.heads, D = C / H;
    amp_layer_begin(ctx, "attn");
    amp_tensor_t *qkv = sample_linear_forward(ctx, &blk->qkv, h, SAMPLE_ACT_NONE); // (B, T, 3C)
    amp_tensor_t *p[3];                                                            // q, k, v
    amp_split(ctx, qkv, C, -1, p, 3);
    for (int i = 0; i < 3; i++) // (B, T, C) -> (B, H, T, D)
        p[i] = amp_transpose(ctx, amp_reshape(ctx, p[i], 4, (int64_t[]){B, T, H, D}), 1, 2);
    // --fault attn-overflow: a temperature bug multiplies the logits by a huge gain instead of
    // 1/sqrt(D); in fp16 this mul, right after the q @ k^T matmul, is the first op to give inf.
    bool broken = index == m->overflow_block && sample_fault_now(s, SAMPLE_FAULT_ATTN_OVERFLOW);
    double scale = broken ? SAMPLE_ATTN_OVERFLOW_GAIN : 1.0 / sqrt((double)D);
    // the scores, scaled and masked, are read by no backward (the softmax's reads its output):
    // each is dropped once the next op has read it (peak memory)
    amp_tensor_t *scores = amp_matmul(ctx, p[0], amp_transpose(ctx, p[1], -2, -1)); // (B, H, T, T)
    amp_tensor_t *scaled = amp_mul_scalar(ctx, scores, scale);
    amp_tensor_drop(scores);
    amp_tensor_t *masked = amp_masked_fill(ctx, scaled, m->causal, -INFINITY);
    amp_tensor_drop(scaled);
    amp_tensor_t *att = amp_softmax(ctx, masked, -1);
    amp_tensor_drop(masked);
    amp_tensor_t *y = amp_matmul(ctx, att, p[2]);                               // (B, H, T, D)
    y = amp_reshape(ctx, amp_transpose(ctx, y, 1, 2), 3, (int64_t[]){B, T, C}); // (B, T, C)
    y = sample_linear_forward(ctx, &blk->attn_proj, y, SAMPLE_ACT_NONE);
    amp_layer_end(ctx);
    return y;
}

// x (B, T, C) -> x + attn(ln1(x)), then + mlp(ln2(x)).
static amp_tensor_t *block_forward(const tiny_gpt *m, sample_step *s, int index, amp_tensor_t *x) {
    amp_ctx_t *ctx = s->ctx;
    const block *blk = &m->blocks[index];
    amp_layer_beginf(ctx, "blocks.%d", index);
    x = amp_add(ctx, x, attention(m, s, index, layer_norm_forward(ctx, &blk->ln1, x)));
    amp_tensor_t *h = layer_norm_forward(ctx, &blk->ln2, x);
    amp_layer_begin(ctx, "mlp");
    h = sample_linear_forward(ctx, &blk->fc, h, SAMPLE_ACT_GELU); // (B, T, 4C)
    h = sample_linear_forward(ctx, &blk->mlp_proj, h, SAMPLE_ACT_NONE);
    amp_layer_end(ctx);
    x = amp_add(ctx, x, h);
    amp_layer_end(ctx);
    return x;
}

static amp_tensor_t *tiny_gpt_loss(void *model, sample_step *s) {
    tiny_gpt *m = model;
    amp_ctx_t *ctx = s->ctx;
    const sample_batch *batch = sample_step_batch(s, m->data);
    int64_t B = amp_tensor_dim(batch->x, 0), T = shape.seq, C = shape.d_model;
    amp_layer_begin(ctx, "wte");
    amp_tensor_t *x = amp_embedding(ctx, batch->x, m->wte); // (B, T, C)
    amp_layer_end(ctx);
    amp_layer_begin(ctx, "wpe");
    amp_tensor_t *pos = amp_embedding(ctx, m->pos, m->wpe); // (T, C)
    amp_layer_end(ctx);
    x = amp_add(ctx, x, pos);
    amp_tensor_t *nan = sample_nan_input(s, 3, (int64_t[]){B, T, C}); // --fault nan-input
    if (nan) x = amp_add(ctx, x, nan);
    for (int i = 0; i < shape.layers; i++)
        x = block_forward(m, s, i, x);
    x = layer_norm_forward(ctx, &m->ln_f, x);
    amp_tensor_t *logits = sample_linear_forward(ctx, &m->head, x, SAMPLE_ACT_NONE); // (B, T, V)
    logits = amp_reshape(ctx, logits, 2, (int64_t[]){B * T, shape.vocab});
    return sample_loss(s, logits, amp_reshape(ctx, batch->y, 1, (int64_t[]){B * T}));
}

int main(int argc, char **argv) {
    sample_opts o;
    int rc = sample_parse_args(&spec, argc, argv, &o);
    if (rc != SAMPLE_CONTINUE) return rc;
    if (shape.d_model % shape.heads != 0)
        return sample_usage_error(&o, "--d-model and --heads",
                                  "the model width %lld is not a multiple of the heads %lld (each "
                                  "head takes an equal share of it)",
                                  (long long)shape.d_model, (long long)shape.heads);
    if (!tiny_gpt_memory_fits(&o)) return 1;
    amp_ctx_t *ctx = sample_ctx_new(&o);
    if (!ctx) return 1;
    tiny_gpt m;
    tiny_gpt_init(&m, ctx, &o);
    rc = sample_train(&o, ctx, &m.params, tiny_gpt_loss, &m);
    tiny_gpt_free(&m);
    amp_ctx_free(ctx);
    return rc;
}
