/*
 * cpu-optim.c — the CPU backend's GradScaler kernel and optimizer step.
 *
 * unscale is PyTorch's _amp_foreach_non_finite_check_and_unscale_ (AMP-SEMANTICS.md §4.1): the
 * finiteness test is on the input value, found_inf is only ever set to 1, and inv_scale == 1 is
 * a pure check that leaves every bit alone. optim_step follows torch.optim's single-tensor SGD,
 * Adam and AdamW: per-element f32 arithmetic in the order of their tensor ops (addcdiv as
 * PyTorch's CUDA kernel orders it, p + v * (m / d)), with the Python-side scalars (1 - beta, bias
 * corrections, step size) computed in double from the double hyperparameters and passed to the
 * f32 kernels as floats, as a Python float Scalar is. No multiply-add is fused here (PyTorch's
 * CPU and CUDA kernels, and ours on CUDA, fuse some), so the CUDA backend's steps agree with
 * these to rounding, not bit for bit. scale_update is _amp_update_scale_ over
 * the summed found_infs (amp_scale_update_record, as the CUDA kernel). State lives in tensors, as
 * on a device.
 */
#include "cpu-impl.h"

#include <math.h>

void amp_cpu_unscale(void *bctx, amp_tensor_t *const *grads, const amp_tensor_t *const *from, int n,
                     const amp_tensor_t *inv, amp_tensor_t *found_inf) {
    (void)bctx;
    const float inv_scale = *amp_f32_scalar(inv);
    float *fp = amp_f32_scalar(found_inf);
    bool found = false;
    for (int t = 0; t < n; t++) {
        amp_tensor_t *g = grads[t];
        const amp_tensor_t *src = from && from[t] ? from[t] : g;
        CPU_ASSERT_CONTIGUOUS(g);
        CPU_ASSERT_CONTIGUOUS(src);
        CPU_ASSERT_FLOAT(src);
        AMP_ASSERT(src == g || (g->dtype == AMP_DTYPE_F32 && cpu_numel(src) == cpu_numel(g)));
        const void *sp = amp_tensor_ptr(src);
        void *gp = amp_tensor_ptr(g);
        const int64_t count = cpu_numel(g);
        const bool write = inv_scale != 1.0f || src != g;
        for (int64_t i = 0; i < count; i++) {
            const float v = amp_load_f32(src->dtype, sp, i);
            if (!isfinite(v)) found = true;
            if (write) cpu_store(g->dtype, gp, i, v * inv_scale);
        }
    }
    if (found) *fp = 1.0f;
}

void amp_cpu_scale_update(void *bctx, amp_tensor_t *scale, amp_tensor_t *inv_scale,
                          amp_tensor_t *tracker, amp_tensor_t *const *found_infs,
                          const bool *stepped, int n, const amp_scaler_params *p,
                          amp_tensor_t *rec) {
    (void)bctx;
    AMP_ASSERT(tracker->dtype == AMP_DTYPE_I32 && cpu_numel(tracker) == 1);
    AMP_ASSERT(rec->dtype == AMP_DTYPE_I32 && cpu_numel(rec) == AMP_SCALE_REC);
    float found = 0.0f;
    bool skipped = false;
    for (int i = 0; i < n; i++) { // found_infs[0] += found_infs[i], in order
        const float f = *amp_f32_scalar(found_infs[i]);
        found += f;
        skipped |= stepped[i] && f != 0.0f;
    }
    amp_scale_update_record(amp_f32_scalar(scale), amp_f32_scalar(inv_scale),
                            amp_tensor_ptr(tracker), found, skipped, p, amp_tensor_ptr(rec));
}

// ---------------------------------------------------------------------------------------------
// Optimizers (f32 parameters, gradients and state)

// torch.optim.SGD: weight decay into the gradient, then the momentum buffer (a copy of the
// gradient on the first step), nesterov or not, then p -= lr * g.
static void sgd_step(const amp_optim_params *o, int64_t step, float *p, const float *g, float *buf,
                     int64_t n) {
    // Python's `if weight_decay != 0` and `if momentum != 0` test the doubles
    const float lr = (float)o->lr, weight_decay = (float)o->weight_decay;
    const float momentum = (float)o->momentum, damp1 = (float)(1.0 - o->dampening);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        if (o->weight_decay != 0.0) gi = gi + weight_decay * p[i];
        if (o->momentum != 0.0) {
            buf[i] = step == 1 ? gi : buf[i] * momentum + damp1 * gi;
            gi = o->nesterov ? gi + momentum * buf[i] : buf[i];
        }
        p[i] = p[i] + -lr * gi;
    }
}

// torch.optim.Adam / AdamW (amsgrad off): m.lerp_(g, 1 - beta1);
// v.mul_(beta2).addcmul_(g, g, 1 - beta2); p.addcdiv_(m, sqrt(v) / sqrt(bc2) + eps, -lr / bc1).
static void adam_step(const amp_optim_params *o, int64_t step, float *p, const float *g, float *m,
                      float *v, int64_t n) {
    const bool decoupled = o->kind == AMP_OPTIM_ADAMW;
    const float weight_decay = (float)o->weight_decay, beta2 = (float)o->beta2, eps = (float)o->eps;
    const float decay = (float)(1.0 - o->lr * o->weight_decay);
    const float w1 = (float)(1.0 - o->beta1); // lerp weight
    const float w2 = (float)(1.0 - o->beta2);
    float step_size, bc2_sqrt;
    amp_adam_step_scalars(o->lr, o->beta1, o->beta2, step, &step_size, &bc2_sqrt);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        if (o->weight_decay != 0.0) {
            if (decoupled)
                p[i] = p[i] * decay;
            else
                gi = gi + weight_decay * p[i];
        }
        // torch.lerp switches form at weight 0.5 to stay exact at weight 1.
        m[i] = fabsf(w1) < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
        v[i] = v[i] * beta2 + w2 * gi * gi;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + step_size * (m[i] / denom);
    }
}

// The autocast copy of each parameter that wants one: its value rounded to the copy's dtype.
static void write_lowered(amp_tensor_t *const *params, amp_tensor_t *const *lowered, int n) {
    for (int t = 0; lowered && t < n; t++) {
        if (!lowered[t]) continue;
        AMP_ASSERT(cpu_numel(lowered[t]) == cpu_numel(params[t]), "(copy of param %d)", t);
        CPU_ASSERT_CONTIGUOUS(lowered[t]);
        amp_cpu_store_f32(lowered[t]->dtype, amp_tensor_ptr(lowered[t]), cpu_numel(params[t]),
                          amp_tensor_ptr(params[t]));
    }
}

void amp_cpu_optim_step(void *bctx, const amp_optim_params *o, amp_tensor_t *const *params,
                        amp_tensor_t *const *grads, amp_tensor_t *const *m, amp_tensor_t *const *v,
                        amp_tensor_t *const *lowered, int n, amp_tensor_t *counts,
                        const int32_t *idx, const amp_tensor_t *found_inf) {
    (void)bctx;
    const bool adam = o->kind == AMP_OPTIM_ADAM || o->kind == AMP_OPTIM_ADAMW;
    AMP_ASSERT(adam || o->kind == AMP_OPTIM_SGD, "(optimizer kind %d)", (int)o->kind);
    AMP_ASSERT(counts->dtype == AMP_DTYPE_I64);
    if (found_inf && *amp_f32_scalar(found_inf) != 0.0f) { // `if (*found_inf)`: NaN counts
        write_lowered(params, lowered, n);
        return;
    }
    int64_t *step = amp_tensor_ptr(counts);
    for (int k = 0; k <= n; k++) {
        AMP_ASSERT(idx[k] >= 0 && idx[k] < cpu_numel(counts), "(count %d of %lld)", idx[k],
                   (long long)cpu_numel(counts));
        step[idx[k]]++;
    }
    for (int t = 0; t < n; t++) {
        amp_tensor_t *p = params[t];
        const amp_tensor_t *g = grads[t];
        const int64_t count = cpu_numel(p);
        AMP_ASSERT(p->dtype == AMP_DTYPE_F32 && amp_dtype_is_float(g->dtype), "(param %d)", t);
        AMP_ASSERT(cpu_numel(g) == count);
        CPU_ASSERT_CONTIGUOUS(p);
        CPU_ASSERT_CONTIGUOUS(g);
        amp_tensor_t *mt = m ? m[t] : NULL, *vt = v ? v[t] : NULL;
        if (adam || o->momentum != 0.0) {
            AMP_ASSERT(mt && mt->dtype == AMP_DTYPE_F32 && cpu_numel(mt) == count,
                       "(param %d needs an f32 first-moment / momentum buffer)", t);
            CPU_ASSERT_CONTIGUOUS(mt);
        }
        if (adam) {
            AMP_ASSERT(vt && vt->dtype == AMP_DTYPE_F32 && cpu_numel(vt) == count,
                       "(param %d needs an f32 second-moment buffer)", t);
            CPU_ASSERT_CONTIGUOUS(vt);
        }
        float *wide = NULL; // a narrower gradient, widened (exactly) for the f32 arithmetic
        if (g->dtype != AMP_DTYPE_F32) {
            wide = amp_xmalloc((size_t)count * sizeof *wide);
            for (int64_t i = 0; i < count; i++)
                wide[i] = amp_load_f32(g->dtype, amp_tensor_ptr(g), i);
        }
        const float *gp = wide ? wide : amp_tensor_ptr(g);
        if (adam)
            adam_step(o, step[idx[t]], amp_tensor_ptr(p), gp, amp_tensor_ptr(mt),
                      amp_tensor_ptr(vt), count);
        else
            sgd_step(o, step[idx[t]], amp_tensor_ptr(p), gp, mt ? amp_tensor_ptr(mt) : NULL, count);
        free(wide);
    }
    write_lowered(params, lowered, n);
}
