/*
 * cuda_bench.c — the ../shared/bench workloads (simplecnn, mlp, gpt) trained with libampcore on
 * the CUDA backend, timed like torch_baseline.py: same shapes, batch, Adam lr 1e-4, cross-entropy
 * on f32 logits, autocast + GradScaler for fp16, autocast alone for bf16; 10 warm-up steps, then
 * the median step time and the peak of device memory held by tensors: peak_mib in the sizes the
 * tensors asked for (512-byte steps, the counterpart of torch.cuda.max_memory_allocated), and
 * peak_block_mib in the pool's blocks (sizes rounded up to 2 MiB steps above 1 MiB). Prints one
 * JSON line per run, like the baseline.
 *
 * Step time is host wall time between stream synchronisations at step ends (each step gets an
 * explicit sync: the GradScaler decides on the device and never waits); host_ms is the part of
 * it the host spent issuing the step, before waiting for the GPU. pipelined_ms is the wall time
 * of as many steps again run back to back with one sync at the end, per step: what a training
 * loop that does not read the loss every step gets, and the closer match to torch_baseline.py's
 * CUDA-event times (which do not count the start of a step on an idle GPU).
 *
 *     cuda_bench [--workload simplecnn|mlp|gpt]... [--mode fp32|fp16|bf16]... [--steps N]
 *                [--warmup N] [--stats]
 *
 * --stats labels a run made with the full per-layer statistics of every step on: libampcore reads
 * AMPPROBE_OUT when it loads, so the caller sets it (AMPPROBE_OUT=/tmp/x.sqlite cuda_bench
 * --stats). With AMPPROBE_STATS_FUSED=0 as well (every tensor read again by the statistics
 * kernel instead of the producing kernels adding the numbers) the label is "stats-separate".
 */
#include "amp-impl.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PARAMS 64

typedef struct model {
    const char *name;
    amp_ctx_t *ctx;
    amp_tensor_t *params[MAX_PARAMS];
    int n;
    amp_tensor_t *causal; // gpt: (T, T) i32, 1 above the diagonal
} model;

static amp_tensor_t *param(model *m, int ndim, const int64_t *shape, float std) {
    amp_tensor_t *t = amp_tensor_new(m->ctx, AMP_DTYPE_F32, ndim, shape);
    if (std > 0) amp_tensor_randn(t, std);
    amp_tensor_set_requires_grad(t, true);
    AMP_ASSERT(m->n < MAX_PARAMS);
    m->params[m->n++] = t;
    return t;
}

static amp_tensor_t *linear_param(model *m, int64_t in, int64_t out, amp_tensor_t **bias) {
    amp_tensor_t *w = param(m, 2, (int64_t[]){out, in}, 1.0f / sqrtf((float)in));
    *bias = param(m, 1, (int64_t[]){out}, 0.01f);
    return w;
}

// ---------------------------------------------------------------------------------------------
// The workloads (torch_baseline.py's models)

enum { P_CONV1_W, P_CONV1_B, P_CONV2_W, P_CONV2_B, P_FC_W, P_FC_B };

static void simplecnn_init(model *m) {
    param(m, 4, (int64_t[]){32, 3, 3, 3}, 0.2f);
    param(m, 1, (int64_t[]){32}, 0.01f);
    param(m, 4, (int64_t[]){64, 32, 3, 3}, 0.06f);
    param(m, 1, (int64_t[]){64}, 0.01f);
    amp_tensor_t *b;
    linear_param(m, 64 * 16 * 16, 10, &b);
}

static amp_tensor_t *simplecnn_forward(model *m, amp_tensor_t *x) {
    amp_ctx_t *c = m->ctx;
    amp_tensor_t **p = m->params;
    for (int k = 0; k < 2; k++) { // conv, relu, pool; the conv's output goes once relu has run
        amp_tensor_t *y = amp_conv2d(c, x, p[P_CONV1_W + 2 * k], p[P_CONV1_B + 2 * k], 1, 1);
        x = amp_relu(c, y);
        amp_tensor_drop(y);
        x = amp_max_pool2d(c, x, 2, 2);
    }
    x = amp_reshape(c, x, 2, (int64_t[]){amp_tensor_dim(x, 0), -1});
    return amp_linear(c, x, p[P_FC_W], p[P_FC_B]);
}

static void mlp_init(model *m) {
    amp_tensor_t *b;
    for (int i = 0; i < 4; i++)
        linear_param(m, 4096, 4096, &b);
    linear_param(m, 4096, 1000, &b);
}

// Each op output is dropped once its last forward reader has run: it goes as soon as the last
// backward that reads it has run (the GELU's, the next linear's), as PyTorch frees it. (The
// batch, persistent, is left alone.)
static amp_tensor_t *mlp_forward(model *m, amp_tensor_t *x) {
    for (int i = 0; i < 4; i++) {
        amp_tensor_t *y = amp_linear(m->ctx, x, m->params[2 * i], m->params[2 * i + 1]);
        amp_tensor_drop(x);
        x = amp_gelu(m->ctx, y, false);
        amp_tensor_drop(y);
    }
    amp_tensor_t *out = amp_linear(m->ctx, x, m->params[8], m->params[9]);
    amp_tensor_drop(x);
    return out;
}

#define GPT_V 8192
#define GPT_C 768
#define GPT_H 12
#define GPT_L 4
#define GPT_T 512
// per block: ln1 w b, qkv w b, proj w b, ln2 w b, fc1 w b, fc2 w b
#define GPT_BLOCK_PARAMS 12

static amp_tensor_t *ln_param(model *m, float v) {
    amp_tensor_t *t = param(m, 1, (int64_t[]){GPT_C}, 0);
    float *h = malloc(GPT_C * sizeof *h);
    for (int i = 0; i < GPT_C; i++)
        h[i] = v;
    amp_tensor_write_f32(t, h);
    free(h);
    return t;
}

static void gpt_init(model *m) {
    param(m, 2, (int64_t[]){GPT_V, GPT_C}, 1.0f);     // emb
    param(m, 3, (int64_t[]){1, GPT_T, GPT_C}, 0.02f); // pos
    amp_tensor_t *b;
    for (int l = 0; l < GPT_L; l++) {
        ln_param(m, 1.0f), ln_param(m, 0.0f);
        linear_param(m, GPT_C, 3 * GPT_C, &b);
        linear_param(m, GPT_C, GPT_C, &b);
        ln_param(m, 1.0f), ln_param(m, 0.0f);
        linear_param(m, GPT_C, 4 * GPT_C, &b);
        linear_param(m, 4 * GPT_C, GPT_C, &b);
    }
    ln_param(m, 1.0f), ln_param(m, 0.0f);
    linear_param(m, GPT_C, GPT_V, &b);
    int32_t *mask = malloc((size_t)GPT_T * GPT_T * sizeof *mask);
    for (int i = 0; i < GPT_T; i++)
        for (int j = 0; j < GPT_T; j++)
            mask[i * GPT_T + j] = j > i;
    m->causal = amp_tensor_from(m->ctx, AMP_DTYPE_I32, 2, (int64_t[]){GPT_T, GPT_T}, mask);
    free(mask);
}

static amp_tensor_t *gpt_forward(model *m, amp_tensor_t *idx) {
    amp_ctx_t *c = m->ctx;
    amp_tensor_t **p = m->params;
    const int64_t B = amp_tensor_dim(idx, 0), T = GPT_T, C = GPT_C, H = GPT_H, D = C / H;
    // Each op output is dropped once its last forward reader has run, as PyTorch frees them: one
    // that no backward reads goes at once (the embedding, the residual branches: an add reads
    // neither operand; the attention's scores before the softmax; the qkv projection, whose
    // pieces the matmuls copy), the others once the last backward that reads them has run.
    amp_tensor_t *e = amp_embedding(c, idx, p[0]);
    amp_tensor_t *x = amp_add(c, e, p[1]);
    amp_tensor_drop(e);
    for (int l = 0; l < GPT_L; l++) {
        amp_tensor_t **q = p + 2 + l * GPT_BLOCK_PARAMS;
        amp_tensor_t *h = amp_layer_norm(c, x, q[0], q[1], 1e-5f);
        amp_tensor_t *qkv = amp_linear(c, h, q[2], q[3]), *s[3];
        amp_tensor_drop(h);
        amp_split(c, qkv, C, -1, s, 3);
        for (int i = 0; i < 3; i++)
            s[i] = amp_transpose(c, amp_reshape(c, s[i], 4, (int64_t[]){B, T, H, D}), 1, 2);
        amp_tensor_t *scores = amp_matmul(c, s[0], amp_transpose(c, s[1], -2, -1));
        amp_tensor_t *scaled = amp_mul_scalar(c, scores, 1.0 / sqrt((double)D));
        amp_tensor_drop(scores);
        amp_tensor_t *masked = amp_masked_fill(c, scaled, m->causal, -INFINITY);
        amp_tensor_drop(scaled);
        amp_tensor_t *att = amp_softmax(c, masked, -1);
        amp_tensor_drop(masked);
        amp_tensor_t *y = amp_matmul(c, att, s[2]);
        amp_tensor_drop(att);
        amp_tensor_drop(qkv);
        amp_tensor_t *yc = amp_reshape(c, amp_transpose(c, y, 1, 2), 3, (int64_t[]){B, T, C});
        amp_tensor_drop(y);
        amp_tensor_t *proj = amp_linear(c, yc, q[4], q[5]);
        amp_tensor_drop(yc);
        amp_tensor_t *x1 = amp_add(c, x, proj);
        amp_tensor_drop(proj);
        amp_tensor_drop(x);
        h = amp_layer_norm(c, x1, q[6], q[7], 1e-5f);
        amp_tensor_t *f1 = amp_linear(c, h, q[8], q[9]);
        amp_tensor_drop(h);
        amp_tensor_t *g = amp_gelu(c, f1, false);
        amp_tensor_drop(f1);
        amp_tensor_t *fc2 = amp_linear(c, g, q[10], q[11]);
        amp_tensor_drop(g);
        x = amp_add(c, x1, fc2);
        amp_tensor_drop(fc2);
        amp_tensor_drop(x1);
    }
    amp_tensor_t **f = p + 2 + GPT_L * GPT_BLOCK_PARAMS;
    amp_tensor_t *h = amp_layer_norm(c, x, f[0], f[1], 1e-5f);
    amp_tensor_drop(x);
    x = amp_linear(c, h, f[2], f[3]);
    amp_tensor_drop(h);
    return amp_reshape(c, x, 2, (int64_t[]){B * T, GPT_V});
}

// ---------------------------------------------------------------------------------------------
// Running one workload in one mode

typedef struct workload {
    const char *name;
    void (*init)(model *m);
    amp_tensor_t *(*forward)(model *m, amp_tensor_t *x);
    int default_steps;
} workload;

static const workload workloads[] = {
    {"simplecnn", simplecnn_init, simplecnn_forward, 100},
    {"mlp", mlp_init, mlp_forward, 30},
    {"gpt", gpt_init, gpt_forward, 30},
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The batches: 4 inputs and 4 label sets, like the baseline.
static void make_batches(model *m, const workload *w, amp_tensor_t **xs, amp_tensor_t **ys) {
    for (int i = 0; i < 4; i++) {
        if (strcmp(w->name, "simplecnn") == 0) {
            xs[i] = amp_tensor_new(m->ctx, AMP_DTYPE_F32, 4, (int64_t[]){64, 3, 64, 64});
            amp_tensor_randn(xs[i], 1.0f);
        } else if (strcmp(w->name, "mlp") == 0) {
            xs[i] = amp_tensor_new(m->ctx, AMP_DTYPE_F32, 2, (int64_t[]){8192, 4096});
            amp_tensor_randn(xs[i], 1.0f);
        } else {
            int64_t n = 16 * GPT_T;
            int64_t *v = malloc((size_t)n * sizeof *v);
            for (int64_t j = 0; j < n; j++)
                v[j] = rand() % GPT_V;
            xs[i] = amp_tensor_from(m->ctx, AMP_DTYPE_I64, 2, (int64_t[]){16, GPT_T}, v);
            free(v);
        }
        int64_t rows = strcmp(w->name, "simplecnn") == 0 ? 64
                       : strcmp(w->name, "mlp") == 0     ? 8192
                                                         : 16 * GPT_T;
        int64_t classes = strcmp(w->name, "simplecnn") == 0 ? 10
                          : strcmp(w->name, "mlp") == 0     ? 1000
                                                            : GPT_V;
        int64_t *v = malloc((size_t)rows * sizeof *v);
        for (int64_t j = 0; j < rows; j++)
            v[j] = rand() % classes;
        ys[i] = amp_tensor_from(m->ctx, AMP_DTYPE_I64, 1, &rows, v);
        free(v);
    }
}

typedef size_t (*peak_fn)(int reset);
// the module's two peak queries (amp_cuda_peak_bytes, amp_cuda_peak_requested_bytes)
typedef struct peaks {
    peak_fn blocks, requested;
} peaks;

// AMPPROBE_STATS_FUSED=0: the instrumentation reads every tensor with a kernel of its own.
static bool separate_stats(void) {
    const char *v = getenv("AMPPROBE_STATS_FUSED");
    return v && strcmp(v, "0") == 0;
}

static int run(const workload *w, const char *mode, int warmup, int steps, bool stats, peaks peak) {
    model m = {.name = w->name};
    if (amp_ctx_new(AMP_DEVICE_CUDA, 0, &m.ctx) != AMP_OK) {
        fprintf(stderr, "cuda_bench: %s\n", amp_last_error());
        return 1;
    }
    srand(0);
    w->init(&m);
    amp_tensor_t *xs[4], *ys[4];
    make_batches(&m, w, xs, ys);
    const bool fp16 = strcmp(mode, "fp16") == 0, bf16 = strcmp(mode, "bf16") == 0;
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    op.lr = 1e-4;
    amp_optim_t *opt;
    amp_scaler_t *sc;
    amp_scaler_params sp = amp_scaler_defaults();
    sp.enabled = fp16;
    if (amp_optim_new(m.ctx, &op, m.params, m.n, &opt) != AMP_OK ||
        amp_scaler_new(&sp, &sc) != AMP_OK) {
        fprintf(stderr, "cuda_bench: %s\n", amp_last_error());
        return 1;
    }
    double *ms = calloc((size_t)steps, sizeof *ms), *host = calloc((size_t)steps, sizeof *host);
    float loss_v = 0;
    amp_tensor_t *loss = NULL;
    double pipelined_t0 = 0;
    for (int i = 0; i < warmup + 2 * steps; i++) {
        if (i == warmup) {
            m.ctx->be->synchronize(m.ctx->bctx);
            if (peak.blocks) peak.blocks(1);
            if (peak.requested) peak.requested(1);
        }
        const bool timed = i < warmup + steps; // then the back-to-back steps
        if (i == warmup + steps) {
            m.ctx->be->synchronize(m.ctx->bctx);
            pipelined_t0 = now_ms();
        }
        double t0 = now_ms();
        amp_optim_zero_grad(opt);
        if (fp16 || bf16)
            amp_autocast_begin(m.ctx, true, fp16 ? AMP_DTYPE_F16 : AMP_DTYPE_BF16, true);
        amp_tensor_t *out = w->forward(&m, xs[i % 4]);
        if (fp16 || bf16) amp_autocast_end(m.ctx);
        amp_tensor_t *out32 = amp_to(m.ctx, out, AMP_DTYPE_F32);
        loss = amp_cross_entropy(m.ctx, out32, ys[i % 4]);
        amp_tensor_drop(out); // the logits and their f32 copy: no backward reads them
        amp_tensor_drop(out32);
        amp_backward(m.ctx, amp_scaler_scale(sc, m.ctx, loss));
        amp_scaler_step(sc, opt, NULL);
        amp_scaler_update(sc);
        if (i == warmup + steps - 1) loss_v = amp_tensor_item(loss);
        amp_ctx_step_end_loss(m.ctx, loss); // read behind the step's work, not waited for
        amp_ctx_reset(m.ctx);
        if (!timed) continue;
        const double t1 = now_ms();
        m.ctx->be->synchronize(m.ctx->bctx);
        if (i >= warmup) {
            ms[i - warmup] = now_ms() - t0;
            host[i - warmup] = t1 - t0;
        }
    }
    m.ctx->be->synchronize(m.ctx->bctx);
    const double pipelined = (now_ms() - pipelined_t0) / steps;
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    qsort(host, (size_t)steps, sizeof *host, cmp_double);
    double median = steps % 2 ? ms[steps / 2] : 0.5 * (ms[steps / 2 - 1] + ms[steps / 2]);
    double host_median =
        steps % 2 ? host[steps / 2] : 0.5 * (host[steps / 2 - 1] + host[steps / 2]);
    double peak_mib = peak.requested ? (double)peak.requested(0) / (1024.0 * 1024.0) : NAN;
    double block_mib = peak.blocks ? (double)peak.blocks(0) / (1024.0 * 1024.0) : NAN;
    printf("{\"workload\": \"%s\", \"mode\": \"%s\", \"extra\": \"%s\", \"steps\": %d, "
           "\"step_ms_median\": %.4f, \"host_ms_median\": %.4f, \"pipelined_ms\": %.4f, "
           "\"peak_mib\": %.1f, \"peak_block_mib\": %.1f, \"loss\": %.4f, "
           "\"impl\": \"libampcore\"}\n",
           w->name, mode,
           !stats             ? "-"
           : separate_stats() ? "stats-separate"
                              : "stats",
           steps, median, host_median, pipelined, peak_mib, block_mib, loss_v);
    fflush(stdout);
    free(ms);
    free(host);
    amp_optim_free(opt);
    amp_scaler_free(sc);
    amp_ctx_free(m.ctx);
    return 0;
}

// The module's peak-memory queries: the loader opens libampcore_cuda.so privately, so find the
// same file (AMPPROBE_CUDA_MODULE, else beside the build folder) and ask for the loaded copy.
static peaks find_peaks(void) {
    char path[4096];
    const char *env = getenv("AMPPROBE_CUDA_MODULE");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char exe[4000];
        if (!amp_exe_dir(exe, sizeof exe)) return (peaks){NULL, NULL};
        snprintf(path, sizeof path, "%s/../libampcore_cuda.so", exe);
    }
    setenv("AMPPROBE_CUDA_MODULE", path, 1);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return (peaks){NULL, NULL};
    return (peaks){(peak_fn)(uintptr_t)dlsym(h, "amp_cuda_peak_bytes"),
                   (peak_fn)(uintptr_t)dlsym(h, "amp_cuda_peak_requested_bytes")};
}

int main(int argc, char **argv) {
    const char *names[3], *modes[3];
    int n_names = 0, n_modes = 0, steps = 0, warmup = 10;
    bool stats = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--workload") == 0 && i + 1 < argc && n_names < 3)
            names[n_names++] = argv[++i];
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc && n_modes < 3)
            modes[n_modes++] = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--stats") == 0)
            stats = true;
        else {
            fprintf(
                stderr,
                "usage: cuda_bench [--workload simplecnn|mlp|gpt]... [--mode fp32|fp16|bf16]... "
                "[--steps N] [--warmup N] [--stats]\n");
            return 2;
        }
    }
    if (stats && !getenv("AMPPROBE_OUT") && !getenv("AMPPROBE_SPOOL_DIR")) {
        fprintf(stderr, "cuda_bench: --stats needs AMPPROBE_OUT=FILE.sqlite in the environment "
                        "(or a run under `ampprobe run`)\n");
        return 2;
    }
    peaks peak = find_peaks();
    static const char *all_modes[3] = {"fp32", "fp16", "bf16"};
    int rc = 0;
    for (size_t k = 0; k < sizeof workloads / sizeof workloads[0]; k++) {
        bool want = n_names == 0;
        for (int i = 0; i < n_names; i++)
            want |= strcmp(names[i], workloads[k].name) == 0;
        if (!want) continue;
        for (int j = 0; j < (n_modes ? n_modes : 3); j++)
            rc |= run(&workloads[k], n_modes ? modes[j] : all_modes[j], warmup,
                      steps ? steps : workloads[k].default_steps, stats, peak);
    }
    return rc;
}
