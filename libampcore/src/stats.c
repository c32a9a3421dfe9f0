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
    float overflow;   // |x| >= overflow rounds to inf
    float min_normal; // 0 < |x| < min_normal is subnormal or zero after rounding
} limits;

static limits limits_of(amp_dtype target) {
    switch (target) {
    case AMP_DTYPE_F16:
        return (limits){65520.0f, 6.103515625e-05f};
    case AMP_DTYPE_BF16:
        return (limits){3.3961775292304854e38f, 1.1754943508222875e-38f};
    default:
        return (limits){INFINITY, 0.0f};
    }
}

// One pass over values already widened to f32 (the common core of every dtype).
typedef struct acc {
    float mn, mx;
    int64_t nan, pinf, ninf, over, under, zero;
    double sumsq;
} acc;

static inline void acc_add(acc *a, float v, limits lim) {
    if (!isfinite(v)) {
        a->nan += isnan(v);
        a->pinf += v == INFINITY;
        a->ninf += v == -INFINITY;
        return;
    }
    a->mn = v < a->mn ? v : a->mn;
    a->mx = v > a->mx ? v : a->mx;
    a->sumsq += (double)v * v;
    float m = fabsf(v);
    a->zero += m == 0.0f;
    a->over += m >= lim.overflow;
    a->under += m != 0.0f && m < lim.min_normal;
}

// NaN/inf count from the exponent bits alone, in blocks with 32-bit counters (vectorised).
#define NONFINITE_COUNT(T, MASK)                                                                   \
    do {                                                                                           \
        const T *u = p;                                                                            \
        for (int64_t i = 0; i < n; i += 4096) {                                                    \
            int64_t m = n - i < 4096 ? n - i : 4096;                                               \
            int32_t b = 0;                                                                         \
            for (int64_t k = 0; k < m; k++)                                                        \
                b += (u[i + k] & (MASK)) == (MASK);                                                \
            c += b;                                                                                \
        }                                                                                          \
    } while (0)

static int64_t count_nonfinite_host(const void *p, amp_dtype dt, int64_t n) {
    int64_t c = 0;
    switch (dt) {
    case AMP_DTYPE_F32:
        NONFINITE_COUNT(uint32_t, 0x7F800000u);
        break;
    case AMP_DTYPE_F16:
        NONFINITE_COUNT(uint16_t, 0x7C00u);
        break;
    case AMP_DTYPE_BF16:
        NONFINITE_COUNT(uint16_t, 0x7F80u);
        break;
    default:
        break; // integers are always finite
    }
    return c;
}

// All-finite values: one loop the compiler vectorises. Its min/max reductions need
// finite-math-only (the values are all finite here) and no-signed-zeros (min of -0 and 0 may
// come out as either; amax is the same); the block's sum of squares may be reassociated.
#if defined(__GNUC__) && !defined(__clang__) // GCC's per-function options; others plain math
#define FAST_FINITE_MATH                                                                           \
    __attribute__((                                                                                \
        optimize("finite-math-only", "no-signed-zeros", "no-trapping-math", "associative-math")))
#else
#define FAST_FINITE_MATH
#endif
FAST_FINITE_MATH static void acc_finite(acc *a, const float *v, int64_t n, limits lim) {
    float mn = a->mn, mx = a->mx, ss = 0.0f;
    int32_t zero = 0, over = 0, under = 0; // n <= BLOCK
    for (int64_t i = 0; i < n; i++) {
        float x = v[i], m = fabsf(x);
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        ss += x * x;
        zero += m == 0.0f;
        over += m >= lim.overflow;
        under += (m != 0.0f) & (m < lim.min_normal);
    }
    a->mn = mn, a->mx = mx, a->sumsq += ss;
    a->zero += zero, a->over += over, a->under += under;
}

// Feeds acc_finite blocks of BLOCK values, widening f16/bf16/integers into a stack buffer.
#define BLOCK 1024
static void acc_finite_any(acc *a, const void *p, amp_dtype dt, int64_t n, limits lim) {
    float buf[BLOCK];
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t m = n - i < BLOCK ? n - i : BLOCK;
        const float *v = buf;
        switch (dt) {
        case AMP_DTYPE_F32:
            v = (const float *)p + i;
            break;
        case AMP_DTYPE_F16:
            for (int64_t k = 0; k < m; k++)
                buf[k] = amp_f16_to_f32_fast(((const uint16_t *)p)[i + k]);
            break;
        case AMP_DTYPE_BF16:
            for (int64_t k = 0; k < m; k++)
                buf[k] = amp_bf16_to_f32(((const uint16_t *)p)[i + k]);
            break;
        case AMP_DTYPE_I32:
            for (int64_t k = 0; k < m; k++)
                buf[k] = (float)((const int32_t *)p)[i + k];
            break;
        default:
            for (int64_t k = 0; k < m; k++)
                buf[k] = (float)((const int64_t *)p)[i + k];
            break;
        }
        acc_finite(a, v, m, lim);
    }
}

static void stats_host(const void *p, amp_dtype dt, int64_t n, amp_dtype target, amp_stats *s) {
    limits lim = limits_of(target);
    acc a = {.mn = INFINITY, .mx = -INFINITY};
    if (count_nonfinite_host(p, dt, n) == 0)
        acc_finite_any(&a, p, dt, n, lim); // the common case
    else
        switch (dt) { // one loop per dtype: no per-element dispatch
        case AMP_DTYPE_F32:
            for (int64_t i = 0; i < n; i++)
                acc_add(&a, ((const float *)p)[i], lim);
            break;
        case AMP_DTYPE_F16:
            for (int64_t i = 0; i < n; i++)
                acc_add(&a, amp_f16_to_f32_fast(((const uint16_t *)p)[i]), lim);
            break;
        case AMP_DTYPE_BF16:
            for (int64_t i = 0; i < n; i++)
                acc_add(&a, amp_bf16_to_f32(((const uint16_t *)p)[i]), lim);
            break;
        case AMP_DTYPE_I32:
            for (int64_t i = 0; i < n; i++)
                acc_add(&a, (float)((const int32_t *)p)[i], lim);
            break;
        case AMP_DTYPE_I64:
            for (int64_t i = 0; i < n; i++)
                acc_add(&a, (float)((const int64_t *)p)[i], lim);
            break;
        default:
            AMP_ASSERT(0, "(bad dtype %d)", (int)dt);
        }
    bool any = n - a.nan - a.pinf - a.ninf > 0;
    *s = (amp_stats){.numel = n,
                     .min = any ? a.mn : NAN,
                     .max = any ? a.mx : NAN,
                     .amax = any ? fmaxf(fabsf(a.mn), fabsf(a.mx)) : NAN,
                     .n_nan = a.nan,
                     .n_posinf = a.pinf,
                     .n_neginf = a.ninf,
                     .n_overflow = a.over,
                     .n_underflow = a.under,
                     .n_zero = a.zero,
                     .sumsq = a.sumsq};
}

// x itself when contiguous, else its memory as one contiguous run when it fills it
// (amp_tensor_fills_run), else a contiguous scratch copy.
static const amp_tensor_t *dense_of(const amp_tensor_t *t) {
    if (amp_tensor_is_contiguous(t)) return t;
    const int64_t numel = amp_tensor_numel(t);
    if (amp_tensor_fills_run(t))
        return amp_view_new(t->ctx, (amp_tensor_t *)t, 1, &numel, (const int64_t[]){1}, t->offset);
    amp_tensor_t *x = amp_scratch_new(t->ctx, t->dtype, t->ndim, t->shape);
    t->ctx->be->copy(t->ctx->bctx, x, t);
    return x;
}

// Statistics computed on the host (downloading a device tensor first).
static void stats_on_host(const amp_tensor_t *x, amp_dtype target, amp_stats *out) {
    amp_ctx_t *ctx = x->ctx;
    int64_t n = amp_tensor_numel(x);
    if (ctx->device == AMP_DEVICE_CPU) {
        stats_host(amp_tensor_ptr(x), x->dtype, n, target, out);
        return;
    }
    size_t nbytes = (size_t)n * amp_dtype_size(x->dtype);
    void *host = amp_xmalloc(nbytes);
    ctx->be->download(ctx->bctx, host, amp_tensor_ptr(x), nbytes);
    stats_host(host, x->dtype, n, target, out);
    free(host);
}

void amp_tensors_stats_into(const amp_tensor_t *const *t, int n, amp_dtype target, amp_stats *slots,
                            const int64_t *slot, bool sumsq) {
    if (n <= 0) return;
    amp_ctx_t *ctx = t[0]->ctx;
    if (ctx->be->stats_into) {
        const amp_tensor_t *x[AMP_STATS_BATCH];
        for (int done = 0; done < n; done += AMP_STATS_BATCH) {
            int m = n - done < AMP_STATS_BATCH ? n - done : AMP_STATS_BATCH;
            for (int k = 0; k < m; k++)
                x[k] = dense_of(t[done + k]);
            ctx->be->stats_into(ctx->bctx, x, m, target, slots, slot + done, sumsq);
        }
        return;
    }
    for (int k = 0; k < n; k++) {
        const amp_tensor_t *x = dense_of(t[k]);
        if (ctx->device == AMP_DEVICE_CPU) { // slots are host memory
            stats_on_host(x, target, &slots[slot[k]]);
        } else {
            amp_stats s;
            stats_on_host(x, target, &s);
            ctx->be->upload(ctx->bctx, &slots[slot[k]], &s, sizeof s);
        }
    }
}

void amp_tensor_stats_into(const amp_tensor_t *t, amp_dtype target, amp_stats *slots,
                           int64_t slot) {
    amp_tensors_stats_into(&t, 1, target, slots, &slot, true);
}

amp_stats amp_stats_empty(void) {
    return (amp_stats){.min = INFINITY, .max = -INFINITY};
}

void amp_stats_finish(amp_stats *s) {
    if (s->min <= s->max) {
        s->amax = fmaxf(fabsf(s->min), fabsf(s->max));
    } else { // no finite value
        s->min = s->max = s->amax = NAN;
    }
}

void amp_tensor_stats(const amp_tensor_t *t, amp_dtype target, amp_stats *out) {
    AMP_ASSERT(t->buf && t->buf->data,
               "(amp_tensor_stats reads a tensor whose storage was dropped with amp_tensor_drop)");
    amp_ctx_t *ctx = t->ctx;
    if (!ctx->be->stats_into) {
        stats_on_host(dense_of(t), target, out);
        return;
    }
    amp_stats *slot = ctx->be->alloc(ctx->bctx, sizeof *slot);
    AMP_ASSERT(slot != NULL, "(out of device memory for one statistics slot)");
    amp_stats empty = amp_stats_empty();
    ctx->be->upload(ctx->bctx, slot, &empty, sizeof empty);
    amp_tensor_stats_into(t, target, slot, 0);
    ctx->be->download(ctx->bctx, out, slot, sizeof *out);
    ctx->be->free(ctx->bctx, slot);
    amp_stats_finish(out);
}
