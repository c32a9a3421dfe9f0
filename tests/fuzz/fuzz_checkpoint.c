/*
 * fuzz_checkpoint.c — a libFuzzer target: amp_checkpoint_load (and the two queries that read a
 * checkpoint without loading it) on a file whose bytes are the input, its CRC trailer made right
 * first so that the input reaches the records (a CRC failure would stop nearly every mutation at
 * the door). The model it loads into: "w" (f32, 2 x 3), "b" (f32, 3), an unnamed f16 (4) buffer;
 * Adam over w and b, one step taken; an enabled GradScaler. A load must succeed, or fail with
 * the file's path in its message and nothing changed: parameters, optimizer state and step
 * counts, hyperparameters, the scaler's state, the context's random state.
 *
 * With AMP_FUZZ_WRITE_SEED=PATH set it saves that model's checkpoint to PATH and exits: the seed
 * (tests/fuzz/make_seeds.sh). Built and run by tests/fuzz/run.sh.
 */
#include "fuzz.h"
#include "tests.h"

#include "amp-impl.h"
#include "amp-train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model {
    amp_ctx_t *ctx;
    amp_tensor_t *p[3];
    amp_optim_t *opt;
    amp_scaler_t *sc;
} model;

static void model_init(model *m) {
    if (amp_ctx_new(AMP_DEVICE_CPU, 1, &m->ctx) != AMP_OK) abort();
    m->p[0] = test_param(m->ctx, AMP_DTYPE_F32, "w", 2, (int64_t[]){2, 3}, 1);
    m->p[1] = test_param(m->ctx, AMP_DTYPE_F32, "b", 1, (int64_t[]){3}, -1);
    m->p[2] = test_param(m->ctx, AMP_DTYPE_F16, NULL, 1, (int64_t[]){4}, 2);
    amp_optim_params op = amp_optim_defaults(AMP_OPTIM_ADAM);
    if (amp_optim_new(m->ctx, &op, m->p, 2, &m->opt) != AMP_OK) abort();
    amp_scaler_params sp = amp_scaler_defaults();
    if (amp_scaler_new(&sp, &m->sc) != AMP_OK) abort();
    for (int k = 0; k < 2; k++) { // one step, so that Adam's state is not all zeros
        amp_tensor_t *g = amp_scratch_new(m->ctx, AMP_DTYPE_F32, m->p[k]->ndim, m->p[k]->shape);
        float v[8];
        for (int64_t i = 0; i < amp_tensor_numel(g); i++)
            v[i] = 0.5f - 0.125f * (float)i;
        amp_tensor_write_f32(g, v);
        amp_grad_accumulate(m->ctx, m->p[k], g);
    }
    amp_optim_step(m->opt);
    amp_ctx_step_end(m->ctx, 1);
    amp_ctx_reset(m->ctx);
}

static void model_free(model *m) {
    amp_scaler_free(m->sc);
    amp_optim_free(m->opt);
    amp_ctx_free(m->ctx);
}

// Everything a load may change, as bytes (a failed load must leave them as they were).
typedef struct snapshot {
    uint8_t bytes[512];
    size_t n;
} snapshot;

static void put(snapshot *s, const void *p, size_t n) {
    if (s->n + n > sizeof s->bytes) abort();
    memcpy(s->bytes + s->n, p, n);
    s->n += n;
}

static void put_tensor(snapshot *s, const amp_tensor_t *t) {
    uint8_t b[64];
    amp_tensor_read(t, b);
    put(s, b, (size_t)amp_tensor_numel(t) * amp_dtype_size(t->dtype));
}

static void take(const model *m, snapshot *s) {
    s->n = 0;
    for (int k = 0; k < 3; k++)
        put_tensor(s, m->p[k]);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++)
            put_tensor(s, amp_optim_state(m->opt, k, j));
    const amp_optim_params *op = amp_optim_get_params(m->opt);
    put(s, op, sizeof *op);
    const int64_t steps = amp_optim_steps(m->opt), next = amp_ctx_step_index(m->ctx);
    put(s, &steps, sizeof steps);
    put(s, &next, sizeof next);
    amp_scaler_state st;
    memset(&st, 0, sizeof st);
    if (amp_scaler_state_dict(m->sc, &st) != AMP_OK) abort();
    put(s, &st, sizeof st);
    const amp_rng_state rng = amp_ctx_rng_state(m->ctx);
    put(s, &rng, sizeof rng);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *seed = getenv("AMP_FUZZ_WRITE_SEED");
    if (!seed) return 0;
    model m;
    model_init(&m);
    amp_status st = amp_checkpoint_save(seed, m.p, 3, m.opt, m.sc);
    model_free(&m);
    if (st != AMP_OK) fprintf(stderr, "fuzz_checkpoint: %s\n", amp_last_error());
    exit(st == AMP_OK ? 0 : 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[64], path[96];
    if (!dir[0]) {
        fuzz_temp_dir(dir, "checkpoint");
        snprintf(path, sizeof path, "%s/in.ckpt", dir);
    }
    uint8_t *b = malloc(size ? size : 1);
    if (!b) abort();
    memcpy(b, data, size);
    if (size >= 4) { // the trailer made right
        const uint32_t c = amp_crc32(b, size - 4);
        for (int i = 0; i < 4; i++)
            b[size - 4 + (size_t)i] = (uint8_t)(c >> (8 * i));
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, size, f) != size || fclose(f) != 0) abort();
    free(b);

    model m;
    model_init(&m);
    snapshot before, after;
    take(&m, &before);
    const amp_status st = amp_checkpoint_load(path, m.p, 3, m.opt, m.sc);
    char why[512];
    snprintf(why, sizeof why, "%s", amp_last_error()); // (before other calls set it again)
    if (st != AMP_OK) {
        take(&m, &after);
        if (after.n != before.n || memcmp(after.bytes, before.bytes, before.n) != 0) {
            fprintf(stderr, "fuzz_checkpoint: a failed load (%s) changed the model\n", why);
            abort();
        }
        if (!strstr(why, path)) {
            fprintf(stderr, "fuzz_checkpoint: '%s' does not name the file\n", why);
            abort();
        }
    }
    model_free(&m);
    bool enabled;
    int64_t next;
    amp_checkpoint_scaler_enabled(path, &enabled);
    amp_checkpoint_next_step(path, &next);
    return 0;
}
