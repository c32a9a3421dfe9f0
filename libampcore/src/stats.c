/*
 * stats.c — the numerics of one tensor in one pass: min/max/amax over the finite values, NaN and
 * ±inf counts, and how many values the autocast dtype could not hold (overflow to inf, underflow
 * to zero or a subnormal). Thresholds come from the formats (AMP-SEMANTICS §5): f16 rounds to inf
 * from 65520 and is subnormal below 2^-14; bf16 rounds to inf from (2 - 2^-8) * 2^127 and is
 * subnormal below 2^-126.
 */
#include "amp-impl.h"

#include <math.h>
#include <string.h>

typedef struct limits {
    float overflow;  // |x| >= overflow rounds to inf
    float min_normal; // 0 < |x| < min_normal is subnormal or zero after rounding
} limits;

static limits limits_of(amp_dtype target) {
    switch (target) {
    case AMP_DTYPE_F16: return (limits){65520.0f, 6.103515625e-05f};
    case AMP_DTYPE_BF16: return (limits){3.3961775292304854e38f, 1.1754943508222875e-38f};
    default: return (limits){INFINITY, 0.0f};
    }
}

static inline float load(const void *p, amp_dtype dt, int64_t i) {
    switch (dt) {
    case AMP_DTYPE_F16: return amp_f16_to_f32(((const uint16_t *)p)[i]);
    case AMP_DTYPE_BF16: return amp_bf16_to_f32(((const uint16_t *)p)[i]);
    case AMP_DTYPE_F32: return ((const float *)p)[i];
    case AMP_DTYPE_I32: return (float)((const int32_t *)p)[i];
    case AMP_DTYPE_I64: return (float)((const int64_t *)p)[i];
    default: return NAN;
    }
}

static void stats_host(const void *p, amp_dtype dt, int64_t n, amp_dtype target, amp_stats *s) {
    limits lim = limits_of(target);
    float mn = INFINITY, mx = -INFINITY;
    int64_t nan = 0, pinf = 0, ninf = 0, over = 0, under = 0, zero = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = load(p, dt, i);
        if (isnan(v)) {
            nan++;
            continue;
        }
        if (isinf(v)) {
            if (v > 0) pinf++;
            else ninf++;
            continue;
        }
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
        float a = fabsf(v);
        zero += a == 0.0f;
        over += a >= lim.overflow;
        under += a != 0.0f && a < lim.min_normal;
    }
    bool any = n - nan - pinf - ninf > 0;
    *s = (amp_stats){.numel = n,
                     .min = any ? mn : NAN,
                     .max = any ? mx : NAN,
                     .amax = any ? fmaxf(fabsf(mn), fabsf(mx)) : NAN,
                     .n_nan = nan,
                     .n_posinf = pinf,
                     .n_neginf = ninf,
                     .n_overflow = over,
                     .n_underflow = under,
                     .n_zero = zero};
}

void amp_tensor_stats(const amp_tensor_t *t, amp_dtype target, amp_stats *out) {
    amp_ctx_t *ctx = t->ctx;
    amp_tensor_t *x = (amp_tensor_t *)t;
    if (!amp_tensor_is_contiguous(x)) {
        x = amp_scratch_new(ctx, t->dtype, t->ndim, t->shape);
        ctx->be->copy(ctx->bctx, x, t);
    }
    int64_t n = amp_tensor_numel(x);
    if (ctx->be->stats) {
        ctx->be->stats(ctx->bctx, x, target, out);
    } else if (ctx->device == AMP_DEVICE_CPU) {
        stats_host(amp_tensor_ptr(x), x->dtype, n, target, out);
    } else {
        size_t nbytes = (size_t)n * amp_dtype_size(x->dtype);
        void *host = amp_xmalloc(nbytes);
        ctx->be->download(ctx->bctx, host, amp_tensor_ptr(x), nbytes);
        stats_host(host, x->dtype, n, target, out);
        free(host);
    }
}
