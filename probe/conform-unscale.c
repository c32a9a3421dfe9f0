/*
 * conform-unscale.c — unscale*.txt: GradScaler.unscale_'s inverse scale and PyTorch's
 * _amp_foreach_non_finite_check_and_unscale_ on one gradient tensor per case.
 *
 *   case NAME dtype(f32|f16) scale
 *   inv_scale inv_scale_bits_hex found_inf
 *   input bits (hex, space separated)
 *   output bits (after the in-place unscale)
 *   end
 *
 * The inverse scale is amp_inv_scale(float32(scale)) and must match bit for bit. The kernel is
 * the backend's own unscale member (the one amp_scaler_unscale runs): the public GradScaler can
 * only unscale gradients that came out of backward, and these cases hand it exact bit patterns.
 * Outputs match bit for bit, except that an expected NaN only asks for a NaN (CUDA canonicalises
 * NaN payloads); found_inf matches exactly.
 */
#include "conform.h"

#include "amp-impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct unscale_case {
    char name[128];
    amp_dtype dtype;
    double scale;
    uint32_t inv_bits;
    double found_inf;
    int64_t n;
    uint32_t *in, *want; // bit patterns, widened to 32 bits
};

// The backend's unscale on a tensor holding the case's input bits (run under conform_guarded).
struct unscale_job {
    const struct unscale_case *c;
    amp_device device;
    float inv_scale;
    uint32_t *got; // output bits
    float found_inf;
    amp_status status;
};

static void run_unscale(void *arg) {
    struct unscale_job *j = arg;
    const struct unscale_case *c = j->c;
    amp_ctx_t *ctx;
    j->status = amp_ctx_new(j->device, 0, &ctx);
    if (j->status != AMP_OK) return;
    bool wide = amp_dtype_size(c->dtype) == 4;
    uint16_t *half = wide ? NULL : amp_xmalloc((size_t)c->n * sizeof *half);
    for (int64_t i = 0; !wide && i < c->n; i++)
        half[i] = (uint16_t)c->in[i];
    amp_tensor_t *grad =
        amp_tensor_from(ctx, c->dtype, 1, (int64_t[]){c->n}, wide ? (const void *)c->in : half);
    amp_tensor_t *found_inf = amp_tensor_new(ctx, AMP_DTYPE_F32, 1, (int64_t[]){1});
    amp_tensor_t *inv = amp_tensor_from(ctx, AMP_DTYPE_F32, 0, NULL, &j->inv_scale);
    ctx->be->unscale(ctx->bctx, &grad, NULL, 1, inv, found_inf);
    amp_tensor_read(grad, wide ? (void *)j->got : half);
    for (int64_t i = 0; !wide && i < c->n; i++)
        j->got[i] = half[i];
    amp_tensor_read(found_inf, &j->found_inf);
    free(half);
    amp_ctx_free(ctx);
}

static void check_case(struct conform_run *r, const char *file, const struct unscale_case *c) {
    int digits = (int)amp_dtype_size(c->dtype) * 2;
    float inv = amp_inv_scale((float)c->scale); // GradScaler: _scale is float32
    if (conform_bits(inv) != c->inv_bits) {
        conform_fail(r, file, c->name, "inv_scale 0x%08x, expected 0x%08x", conform_bits(inv),
                     c->inv_bits);
        return;
    }
    struct unscale_job j = {.c = c,
                            .device = r->device,
                            .inv_scale = inv,
                            .got = amp_xcalloc((size_t)c->n, sizeof *j.got)};
    char msg[1024];
    if (!conform_guarded(run_unscale, &j, msg, sizeof msg)) {
        conform_fail(r, file, c->name, "libampcore aborted: %s", msg);
    } else if (j.status != AMP_OK) {
        conform_fail(r, file, c->name, "%s: %s", amp_status_name(j.status), amp_last_error());
    } else if ((double)j.found_inf != c->found_inf) {
        conform_fail(r, file, c->name, "found_inf %g, expected %g", j.found_inf, c->found_inf);
    } else {
        for (int64_t i = 0; i < c->n; i++) {
            bool same = conform_is_nan_bits(c->dtype, c->want[i])
                            ? conform_is_nan_bits(c->dtype, j.got[i])
                            : j.got[i] == c->want[i];
            if (!same) {
                conform_fail(r, file, c->name, "element %" PRId64 ": 0x%0*x, expected 0x%0*x", i,
                             digits, j.got[i], digits, c->want[i]);
                free(j.got);
                return;
            }
        }
        conform_pass(r, file, c->name, "(%" PRId64 " %s values)", c->n, amp_dtype_name(c->dtype));
    }
    free(j.got);
}

// A line of bit patterns of dtype t into a new array; false when a field does not parse.
static bool parse_bits(const struct conform_text *t, amp_dtype dt, uint32_t **out) {
    uint32_t max = amp_dtype_size(dt) == 4 ? UINT32_MAX : 0xFFFFu;
    uint32_t *v = amp_xmalloc((size_t)t->ntok * sizeof *v);
    for (int i = 0; i < t->ntok; i++) {
        if (!conform_parse_hex(t->tok[i], max, &v[i])) {
            free(v);
            return false;
        }
    }
    *out = v;
    return true;
}

// Reads the four records after a case header; false (error reported) when malformed.
static bool read_case(struct conform_run *r, struct conform_text *t, struct unscale_case *c) {
    double inv_decimal;
    if (!conform_text_next_record(t) || t->ntok != 3 ||
        !conform_parse_double(t->tok[0], &inv_decimal) ||
        !conform_parse_hex(t->tok[1], UINT32_MAX, &c->inv_bits) ||
        !conform_parse_double(t->tok[2], &c->found_inf)) {
        conform_error(r, t->name, t->lineno, "expected 'inv_scale inv_scale_bits_hex found_inf'");
        return false;
    }
    if (!conform_text_next_record(t) || !parse_bits(t, c->dtype, &c->in)) {
        conform_error(r, t->name, t->lineno, "expected the input bits (%d hex digits each)",
                      (int)amp_dtype_size(c->dtype) * 2);
        return false;
    }
    c->n = t->ntok;
    if (!conform_text_next_record(t) || !parse_bits(t, c->dtype, &c->want)) {
        conform_error(r, t->name, t->lineno, "expected the output bits (%d hex digits each)",
                      (int)amp_dtype_size(c->dtype) * 2);
        return false;
    }
    if (t->ntok != c->n) {
        conform_error(r, t->name, t->lineno, "%d output values for %" PRId64 " inputs", t->ntok,
                      c->n);
        return false;
    }
    if (!conform_text_next_record(t) || t->ntok != 1 || strcmp(t->tok[0], "end") != 0) {
        conform_error(r, t->name, t->lineno, "expected 'end' after the output bits of case %s",
                      c->name);
        return false;
    }
    return true;
}

void conform_unscale_file(struct conform_run *r, const char *name) {
    struct conform_text t;
    if (!conform_text_open(&t, r, name)) return;
    while (conform_text_next_record(&t)) {
        struct unscale_case c = {0};
        if (t.ntok != 4 || strcmp(t.tok[0], "case") != 0 || !amp_dtype_parse(t.tok[2], &c.dtype) ||
            !amp_dtype_is_float(c.dtype) || !conform_parse_double(t.tok[3], &c.scale)) {
            conform_error(r, name, t.lineno, "expected 'case NAME f32|f16|bf16 scale'");
            break;
        }
        snprintf(c.name, sizeof c.name, "%s", t.tok[1]);
        bool ok = read_case(r, &t, &c);
        if (ok) check_case(r, name, &c);
        free(c.in);
        free(c.want);
        if (!ok) break;
    }
    // only a file without any record: a malformed one was reported above
    conform_text_had_records(r, &t, "'case NAME f32|f16|bf16 scale'");
    conform_text_close(&t);
}
