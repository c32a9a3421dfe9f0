/*
 * cpu-nn.c — the CPU backend's row-wise neural-network ops: softmax and log_softmax over the
 * last dim, layer_norm, embedding and nll_loss, each with its backward. nll_loss is PyTorch's with
 * its defaults: the mean over the rows whose target is not -100 (ignore_index), NaN when all are.
 *
 * Rows are widened into f32 buffers from the backend workspace; reductions over a row use the
 * pairwise f32 sum. Formulas and operation order follow PyTorch's CUDA kernels (the reference
 * the CUDA backend is held to): log_softmax is x - max - log(sum), the layer_norm input
 * gradient is rstd / C * (C * w * dy - x_hat * sum(w * dy * x_hat) - sum(w * dy)).
 */
#include "cpu-impl.h"

#include <math.h>
#include <string.h>

// Row r of a contiguous tensor with rows of len elements, as a byte pointer.
static inline char *row_ptr(const amp_tensor_t *t, int64_t r, int64_t len) {
    return (char *)amp_tensor_ptr(t) + r * len * (int64_t)amp_dtype_size(t->dtype);
}

static inline int64_t cpu_rows(const amp_tensor_t *t) {
    const int64_t len = cpu_row_len(t);
    return len > 0 ? cpu_numel(t) / len : 0;
}

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

void amp_cpu_softmax(void *bctx, bool log, amp_tensor_t *y, const amp_tensor_t *x) {
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(x);
    CPU_ASSERT_FLOAT(y);
    const int64_t C = cpu_row_len(x), rows = cpu_rows(x);
    AMP_ASSERT(cpu_numel(y) == cpu_numel(x) && cpu_row_len(y) == C);
    float *v = amp_cpu_workspace(bctx, (size_t)(2 * C + 1));
    float *e = v + C;
    for (int64_t r = 0; r < rows; r++) {
        amp_cpu_load_f32(x->dtype, row_ptr(x, r, C), 1, C, v);
        float max = -INFINITY;
        for (int64_t j = 0; j < C; j++)
            max = v[j] > max ? v[j] : max;
        // An all -inf row gives -inf - -inf = NaN everywhere, like PyTorch; a masked (-inf)
        // entry of any other row gives exp(-inf) = exactly 0.
        for (int64_t j = 0; j < C; j++)
            e[j] = expf(v[j] - max);
        const float sum = amp_cpu_sum_f32(e, C);
        if (log) { // x - max - log(sum), as PyTorch: max + log(sum) would round at |max| >> 1
            const float logsum = logf(sum);
            for (int64_t j = 0; j < C; j++)
                e[j] = v[j] - max - logsum;
        } else {
            for (int64_t j = 0; j < C; j++)
                e[j] = e[j] / sum;
        }
        amp_cpu_store_f32(y->dtype, row_ptr(y, r, C), C, e);
    }
}

void amp_cpu_softmax_backward(void *bctx, bool log, amp_tensor_t *dx, const amp_tensor_t *dy,
                              const amp_tensor_t *y) {
    CPU_ASSERT_CONTIGUOUS(dx);
    CPU_ASSERT_CONTIGUOUS(dy);
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_FLOAT(dx);
    const int64_t C = cpu_row_len(y), rows = cpu_rows(y);
    AMP_ASSERT(cpu_numel(dx) == cpu_numel(y) && cpu_numel(dy) == cpu_numel(y));
    float *g = amp_cpu_workspace(bctx, (size_t)(3 * C + 1));
    float *yv = g + C, *t = yv + C;
    for (int64_t r = 0; r < rows; r++) {
        amp_cpu_load_f32(dy->dtype, row_ptr(dy, r, C), 1, C, g);
        amp_cpu_load_f32(y->dtype, row_ptr(y, r, C), 1, C, yv);
        if (log) { // dx = dy - exp(y) * sum(dy)
            const float s = amp_cpu_sum_f32(g, C);
            for (int64_t j = 0; j < C; j++)
                t[j] = g[j] - expf(yv[j]) * s;
        } else { // dx = y * (dy - sum(dy * y))
            for (int64_t j = 0; j < C; j++)
                t[j] = g[j] * yv[j];
            const float s = amp_cpu_sum_f32(t, C);
            for (int64_t j = 0; j < C; j++)
                t[j] = yv[j] * (g[j] - s);
        }
        amp_cpu_store_f32(dx->dtype, row_ptr(dx, r, C), C, t);
    }
}

// ---------------------------------------------------------------------------------------------
// layer_norm

void amp_cpu_layer_norm(void *bctx, amp_tensor_t *y, amp_tensor_t *mean, amp_tensor_t *rstd,
                        const amp_tensor_t *x, const amp_tensor_t *w, const amp_tensor_t *b,
                        float eps) {
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(x);
    CPU_ASSERT_FLOAT(y);
    const int64_t C = cpu_row_len(x), rows = cpu_rows(x);
    AMP_ASSERT(cpu_numel(y) == cpu_numel(x));
    AMP_ASSERT(mean->dtype == AMP_DTYPE_F32 && cpu_numel(mean) == rows);
    AMP_ASSERT(rstd->dtype == AMP_DTYPE_F32 && cpu_numel(rstd) == rows);
    AMP_ASSERT(!w || cpu_numel(w) == C, "(weight must have %lld elements)", (long long)C);
    AMP_ASSERT(!b || cpu_numel(b) == C, "(bias must have %lld elements)", (long long)C);
    CPU_ASSERT_CONTIGUOUS(mean);
    CPU_ASSERT_CONTIGUOUS(rstd);
    if (w) CPU_ASSERT_CONTIGUOUS(w);
    if (b) CPU_ASSERT_CONTIGUOUS(b);

    float *v = amp_cpu_workspace(bctx, (size_t)(4 * C + 1));
    float *t = v + C, *wv = t + C, *bv = wv + C;
    if (w) amp_cpu_load_f32(w->dtype, amp_tensor_ptr(w), 1, C, wv);
    if (b) amp_cpu_load_f32(b->dtype, amp_tensor_ptr(b), 1, C, bv);
    float *meanp = amp_tensor_ptr(mean), *rstdp = amp_tensor_ptr(rstd);
    for (int64_t r = 0; r < rows; r++) {
        amp_cpu_load_f32(x->dtype, row_ptr(x, r, C), 1, C, v);
        // Two passes: the mean, then the biased variance around it.
        const float mu = amp_cpu_sum_f32(v, C) / (float)C;
        for (int64_t j = 0; j < C; j++)
            t[j] = (v[j] - mu) * (v[j] - mu);
        const float var = amp_cpu_sum_f32(t, C) / (float)C;
        const float rs = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < C; j++) {
            float o = (v[j] - mu) * rs;
            if (w) o = o * wv[j];
            if (b) o = o + bv[j];
            t[j] = o;
        }
        amp_cpu_store_f32(y->dtype, row_ptr(y, r, C), C, t);
        meanp[r] = mu;
        rstdp[r] = rs;
    }
}

void amp_cpu_layer_norm_backward(void *bctx, amp_tensor_t *dx, amp_tensor_t *dw, amp_tensor_t *db,
                                 const amp_tensor_t *dy, const amp_tensor_t *x,
                                 const amp_tensor_t *mean, const amp_tensor_t *rstd,
                                 const amp_tensor_t *w) {
    CPU_ASSERT_CONTIGUOUS(dx);
    CPU_ASSERT_CONTIGUOUS(dy);
    CPU_ASSERT_CONTIGUOUS(x);
    CPU_ASSERT_FLOAT(dx);
    const int64_t C = cpu_row_len(x), rows = cpu_rows(x);
    AMP_ASSERT(cpu_numel(dx) == cpu_numel(x) && cpu_numel(dy) == cpu_numel(x));
    AMP_ASSERT(mean->dtype == AMP_DTYPE_F32 && cpu_numel(mean) == rows);
    AMP_ASSERT(rstd->dtype == AMP_DTYPE_F32 && cpu_numel(rstd) == rows);
    AMP_ASSERT(!w || cpu_numel(w) == C);
    AMP_ASSERT(!dw || cpu_numel(dw) == C);
    AMP_ASSERT(!db || cpu_numel(db) == C);
    CPU_ASSERT_CONTIGUOUS(mean);
    CPU_ASSERT_CONTIGUOUS(rstd);
    if (w) CPU_ASSERT_CONTIGUOUS(w);
    if (dw) CPU_ASSERT_CONTIGUOUS(dw);
    if (db) CPU_ASSERT_CONTIGUOUS(db);

    float *g = amp_cpu_workspace(bctx, (size_t)(7 * C + 1));
    float *xh = g + C, *t = xh + C, *wv = t + C, *dyv = wv + C, *dwacc = dyv + C,
          *dbacc = dwacc + C;
    for (int64_t j = 0; j < C; j++)
        wv[j] = 1.0f;
    if (w) amp_cpu_load_f32(w->dtype, amp_tensor_ptr(w), 1, C, wv);
    memset(dwacc, 0, (size_t)(2 * C) * sizeof(float));
    const float *meanp = amp_tensor_ptr(mean), *rstdp = amp_tensor_ptr(rstd);
    const float fC = (float)C;
    for (int64_t r = 0; r < rows; r++) {
        const float mu = meanp[r], rs = rstdp[r];
        amp_cpu_load_f32(dy->dtype, row_ptr(dy, r, C), 1, C, dyv);
        amp_cpu_load_f32(x->dtype, row_ptr(x, r, C), 1, C, xh);
        for (int64_t j = 0; j < C; j++) {
            xh[j] = (xh[j] - mu) * rs; // x_hat
            dwacc[j] += dyv[j] * xh[j];
            dbacc[j] += dyv[j];
            g[j] = dyv[j] * wv[j];
            t[j] = g[j] * xh[j];
        }
        const float s1 = amp_cpu_sum_f32(g, C); // sum(w * dy)
        const float s2 = amp_cpu_sum_f32(t, C); // sum(w * dy * x_hat)
        const float term = (1.0f / fC) * rs;
        for (int64_t j = 0; j < C; j++) {
            float f = fC * wv[j] * dyv[j];
            f -= xh[j] * s2;
            f -= s1;
            t[j] = f * term;
        }
        amp_cpu_store_f32(dx->dtype, row_ptr(dx, r, C), C, t);
    }
    if (dw) amp_cpu_store_f32(dw->dtype, amp_tensor_ptr(dw), C, dwacc);
    if (db) amp_cpu_store_f32(db->dtype, amp_tensor_ptr(db), C, dbacc);
}

// ---------------------------------------------------------------------------------------------
// embedding

void amp_cpu_embedding(void *bctx, amp_tensor_t *y, const amp_tensor_t *idx,
                       const amp_tensor_t *w) {
    (void)bctx;
    CPU_ASSERT_CONTIGUOUS(y);
    CPU_ASSERT_CONTIGUOUS(idx);
    CPU_ASSERT_CONTIGUOUS(w);
    AMP_ASSERT(w->ndim == 2);
    const int64_t V = w->shape[0], C = w->shape[1], n = cpu_numel(idx);
    AMP_ASSERT(cpu_numel(y) == n * C);
    const void *ip = amp_tensor_ptr(idx);
    float buf[CPU_CHUNK];
    for (int64_t r = 0; r < n; r++) {
        const int64_t i = cpu_load_index(idx->dtype, ip, r);
        AMP_ASSERT(i >= 0 && i < V, "(embedding index %lld out of range [0, %lld))", (long long)i,
                   (long long)V);
        if (y->dtype == w->dtype) {
            memcpy(row_ptr(y, r, C), row_ptr(w, i, C), (size_t)C * amp_dtype_size(w->dtype));
            continue;
        }
        for (int64_t j = 0; j < C; j += CPU_CHUNK) {
            int64_t c = C - j < CPU_CHUNK ? C - j : CPU_CHUNK;
            amp_cpu_load_f32(w->dtype, row_ptr(w, i, C) + j * (int64_t)amp_dtype_size(w->dtype), 1,
                             c, buf);
            amp_cpu_store_f32(y->dtype, row_ptr(y, r, C) + j * (int64_t)amp_dtype_size(y->dtype), c,
                              buf);
        }
    }
}

void amp_cpu_embedding_backward(void *bctx, amp_tensor_t *dw, const amp_tensor_t *dy,
                                const amp_tensor_t *idx) {
    CPU_ASSERT_CONTIGUOUS(dw);
    CPU_ASSERT_CONTIGUOUS(dy);
    CPU_ASSERT_CONTIGUOUS(idx);
    CPU_ASSERT_FLOAT(dw);
    AMP_ASSERT(dw->ndim == 2);
    const int64_t V = dw->shape[0], C = dw->shape[1], n = cpu_numel(idx);
    AMP_ASSERT(cpu_numel(dy) == n * C);
    // f32 accumulators: dw itself when it is f32, else the workspace (plus one row for dy).
    const bool direct = dw->dtype == AMP_DTYPE_F32;
    float *ws = amp_cpu_workspace(bctx, (size_t)((direct ? 0 : V * C) + C + 1));
    float *acc = direct ? (float *)amp_tensor_ptr(dw) : ws + C;
    float *g = ws;
    memset(acc, 0, (size_t)(V * C) * sizeof(float));
    const void *ip = amp_tensor_ptr(idx);
    for (int64_t r = 0; r < n; r++) {
        const int64_t i = cpu_load_index(idx->dtype, ip, r);
        AMP_ASSERT(i >= 0 && i < V, "(embedding index %lld out of range [0, %lld))", (long long)i,
                   (long long)V);
        amp_cpu_load_f32(dy->dtype, row_ptr(dy, r, C), 1, C, g);
        float *a = acc + i * C;
        for (int64_t j = 0; j < C; j++)
            a[j] += g[j];
    }
    if (!direct) amp_cpu_store_f32(dw->dtype, amp_tensor_ptr(dw), V * C, acc);
}

// ---------------------------------------------------------------------------------------------
// nll_loss (mean reduction, no class weights, PyTorch's ignore_index of -100)

// The target of row r, or AMP_NLL_IGNORE_INDEX; any other value outside [0, C) aborts with
// PyTorch's message.
static int64_t nll_target(const amp_tensor_t *target, int64_t r, int64_t C) {
    const int64_t t = cpu_load_index(target->dtype, amp_tensor_ptr(target), r);
    AMP_ASSERT(t == AMP_NLL_IGNORE_INDEX || (t >= 0 && t < C), "(Target %lld is out of bounds.)",
               (long long)t);
    return t;
}

void amp_cpu_nll_loss(void *bctx, amp_tensor_t *loss, const amp_tensor_t *logp,
                      const amp_tensor_t *target) {
    CPU_ASSERT_CONTIGUOUS(logp);
    CPU_ASSERT_CONTIGUOUS(target);
    AMP_ASSERT(logp->ndim == 2 && cpu_numel(target) == logp->shape[0] && cpu_numel(loss) == 1);
    const int64_t N = logp->shape[0], C = logp->shape[1];
    float *nl = amp_cpu_workspace(bctx, (size_t)(N + 1));
    const void *lp = amp_tensor_ptr(logp);
    int64_t kept = 0;
    for (int64_t r = 0; r < N; r++) {
        const int64_t t = nll_target(target, r, C);
        // An ignored row adds +0, which changes no partial sum (none is ever -0: each starts at
        // +0), so the loss is the same pairwise sum over the kept rows in their places.
        nl[r] = t == AMP_NLL_IGNORE_INDEX ? 0.0f : -amp_load_f32(logp->dtype, lp, r * C + t);
        kept += t != AMP_NLL_IGNORE_INDEX;
    }
    // The summed negative log-likelihood divided by the total weight, the kept rows' count (NaN
    // when there is none, 0 / 0, as in PyTorch).
    cpu_store(loss->dtype, amp_tensor_ptr(loss), 0, amp_cpu_sum_f32(nl, N) / (float)kept);
}

void amp_cpu_nll_loss_backward(void *bctx, amp_tensor_t *dlogp, const amp_tensor_t *dloss,
                               const amp_tensor_t *target) {
    CPU_ASSERT_CONTIGUOUS(dlogp);
    CPU_ASSERT_CONTIGUOUS(target);
    CPU_ASSERT_FLOAT(dlogp);
    AMP_ASSERT(dlogp->ndim == 2 && cpu_numel(target) == dlogp->shape[0] && cpu_numel(dloss) == 1);
    const int64_t N = dlogp->shape[0], C = dlogp->shape[1];
    amp_cpu_fill(bctx, dlogp, 0.0f);
    int64_t kept = 0;
    for (int64_t r = 0; r < N; r++)
        kept += nll_target(target, r, C) != AMP_NLL_IGNORE_INDEX;
    // PyTorch's -(dloss / total_weight); with every row ignored it is written nowhere.
    const float g = -(amp_load_f32(dloss->dtype, amp_tensor_ptr(dloss), 0) / (float)kept);
    void *dp = amp_tensor_ptr(dlogp);
    for (int64_t r = 0; r < N; r++) {
        const int64_t t = nll_target(target, r, C);
        if (t != AMP_NLL_IGNORE_INDEX) cpu_store(dlogp->dtype, dp, r * C + t, g);
    }
}
