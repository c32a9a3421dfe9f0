/*
 * cuda-optim.cu — the GradScaler's fused unscale + non-finite check and the optimizer step, each
 * over many tensors in few launches (multi-tensor apply).
 *
 * Up to MT_MAX tensors go into one launch; their pointers and sizes travel as a kernel argument
 * (no upload, nothing the host must keep alive) and each block finds its tensor and chunk from
 * the per-tensor first-block table. unscale follows _amp_foreach_non_finite_check_and_unscale_:
 * the test is on the input value, found_inf is only ever set to 1, inv_scale == 1 writes
 * nothing. The optimizers repeat the CPU reference's f32 arithmetic in torch.optim's order, with
 * the scalars (bias corrections, step size) computed in double from each parameter's update count
 * on the device, and write a parameter's new value rounded into the next autocast region's copy
 * where the frontend asks for one. Both add the statistics that the instrumentation holds for the
 * tensors they read (cuda_held_take: the gradients' at the end of backward, the parameters' of
 * the step) as they go, in place of a launch of the statistics kernel; a skipped optimizer step
 * still reads them, and writes the copies of the unchanged parameters.
 * A whole chunk of f32 tensors (all but the last of each) moves 16 bytes a load, every load of
 * the thread issued before the first value is used: these kernels only stream memory.
 * Everything the host does not know without waiting is read on the device: the inverse scale,
 * found_inf (a skipped step returns at once, its statistics and copies aside), the update counts;
 * the scale update is one thread's work.
 */
#include "cuda-fuse.h"
#include "cuda-stats.h"

#include <math.h>

#define MT_MAX 32
#define MT_CHUNK 4096 // elements per block
#define MT_BLOCK 256
#define MT_VEC (MT_CHUNK / (4 * MT_BLOCK)) // float4 per thread in a whole chunk

typedef struct mt_args {
    void *p[5][MT_MAX]; // per slot: params/grads, grads, m, v, autocast copies (unscale: 0, 1)
    const int64_t *steps[MT_MAX]; // optimizers: the parameter's update count
    int64_t n[MT_MAX];
    int32_t first_block[MT_MAX + 1];
    int8_t dtype[MT_MAX];        // array 1's (the gradient's)
    int8_t ldtype[MT_MAX];       // array 4's (a 16-bit copy; F32: none)
    amp_stats *slot[2][MT_MAX];  // statistics of array 0 / 1 of the tensor (NULL: none)
    amp_stats *slot2[2][MT_MAX]; // a second entry's for the same array (a parameter's gradient
                                 // that is the one a widening cast handed on, read for both)
    int8_t target[2][MT_MAX];
    bool stats; // any slot set
    int count;
} mt_args;

// The tensor of block b and the block's element range in it.
__device__ __forceinline__ int mt_locate(const mt_args &a, int64_t *begin, int64_t *end) {
    const int b = blockIdx.x;
    int t = 0;
    while (t + 1 < a.count && a.first_block[t + 1] <= b)
        t++;
    *begin = (int64_t)(b - a.first_block[t]) * MT_CHUNK;
    *end = *begin + MT_CHUNK < a.n[t] ? *begin + MT_CHUNK : a.n[t];
    return t;
}

// Whether the block's chunk [begin, end) of the f32 arrays ps[0..n) is whole and 16-byte aligned.
__device__ __forceinline__ bool mt_whole_f32(const void *const *ps, int n, int64_t begin,
                                             int64_t end) {
    bool ok = end - begin == MT_CHUNK;
    for (int k = 0; k < n; k++)
        ok &= ps[k] == nullptr || ((uintptr_t)ps[k] & 15) == 0;
    return ok;
}

// Whether the block's chunk [begin, end) is whole and array p of elements of `size` bytes can
// move 4 elements a load (aligned to 4 of them).
__device__ __forceinline__ bool mt_whole4(const void *p, unsigned size, int64_t begin,
                                          int64_t end) {
    return end - begin == MT_CHUNK && ((uintptr_t)p & (4 * size - 1)) == 0;
}

// Elements 4i..4i+3 of array p as f32, in one load.
__device__ __forceinline__ float4 load4(const float *p, int64_t i) {
    return ((const float4 *)p)[i];
}
__device__ __forceinline__ float4 load4(const __half *p, int64_t i) {
    const uint2 u = ((const uint2 *)p)[i];
    const float2 lo = __half22float2(*(const __half2 *)&u.x),
                 hi = __half22float2(*(const __half2 *)&u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p, int64_t i) {
    const uint2 u = ((const uint2 *)p)[i];
    const float2 lo = __bfloat1622float2(*(const __nv_bfloat162 *)&u.x),
                 hi = __bfloat1622float2(*(const __nv_bfloat162 *)&u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Stores f32 values 4i..4i+3 rounded to p's 16-bit type, in one store.
template <typename L> __device__ __forceinline__ void store4(L *p, int64_t i, float4 v) {
    uint2 u;
    *(L *)&u.x = cuda_io<L>::store(v.x), ((L *)&u.x)[1] = cuda_io<L>::store(v.y);
    *(L *)&u.y = cuda_io<L>::store(v.z), ((L *)&u.y)[1] = cuda_io<L>::store(v.w);
    ((uint2 *)p)[i] = u;
}

// f(G *) with p as an array of floating dtype dt: the type-specific code chosen once per block.
template <typename F>
__device__ __forceinline__ void with_float_type(amp_dtype dt, const void *p, F f) {
    if (dt == AMP_DTYPE_F16)
        f((const __half *)p);
    else if (dt == AMP_DTYPE_BF16)
        f((const __nv_bfloat16 *)p);
    else
        f((const float *)p);
}

// f(L *) with p as a 16-bit array of dtype dt, or f((float *)nullptr) when dt is F32 (none).
template <typename F> __device__ __forceinline__ void with_copy_type(amp_dtype dt, void *p, F f) {
    if (dt == AMP_DTYPE_F16)
        f((__half *)p);
    else if (dt == AMP_DTYPE_BF16)
        f((__nv_bfloat16 *)p);
    else
        f((float *)nullptr);
}

// Adds tensor t's chunks to a; returns false when a is full.
static bool mt_add(mt_args *a, void *p0, void *p1, void *p2, void *p3, int64_t n, amp_dtype dt) {
    if (a->count == MT_MAX) return false;
    const int i = a->count++;
    a->p[0][i] = p0;
    a->p[1][i] = p1;
    a->p[2][i] = p2;
    a->p[3][i] = p3;
    a->n[i] = n;
    a->dtype[i] = (int8_t)dt;
    const int64_t blocks = (n + MT_CHUNK - 1) / MT_CHUNK;
    AMP_ASSERT(a->first_block[i] + blocks < INT32_MAX, "(tensor of %lld elements)", (long long)n);
    a->first_block[i + 1] = a->first_block[i] + (int32_t)blocks;
    return true;
}

// Array k of the last tensor added to a: its statistics taken when the instrumentation holds
// them, else its buffer guarded when the kernel writes it (before any launch that could).
static void mt_take(cuda_ctx *c, mt_args *a, int k, const amp_tensor_t *t, bool written) {
    amp_stats *slot;
    amp_dtype target;
    if (cuda_held_take(c, t, true, &slot, &target)) {
        a->slot[k][a->count - 1] = slot;
        a->target[k][a->count - 1] = (int8_t)target;
        a->stats = true;
        amp_stats *slot2;
        amp_dtype target2;
        if (cuda_held_take(c, t, true, &slot2, &target2)) { // the same numbers, held twice
            if (target2 == target) {
                a->slot2[k][a->count - 1] = slot2;
            } else { // (another autocast dtype: counted against its own limits, now)
                const cuda_stats_job job = {amp_tensor_ptr(t), cuda_numel(t), slot2, t->dtype};
                CUDA_CHECK(cuda_stats_launch(&job, 1, target2, c->stream));
            }
        }
    } else if (written) {
        cuda_held_guard_tensor(c, t);
    }
}

// A block's share of the statistics of array k of tensor t (on: a slot for it).
struct mt_stats {
    amp_stats *slot, *slot2;
    stats_limits lim;
    thread_acc a;

    __device__ __forceinline__ mt_stats(const mt_args &m, int k, int t, bool S)
        : slot(S ? m.slot[k][t] : nullptr), slot2(S ? m.slot2[k][t] : nullptr),
          lim(stats_limits_of((amp_dtype)m.target[k][t])), a(acc_empty()) {}
    __device__ __forceinline__ void add(float v) {
        if (slot) acc_value(a, v, lim);
    }
    __device__ __forceinline__ void add(float4 v) {
        if (slot) {
            acc_value(a, v.x, lim);
            acc_value(a, v.y, lim);
            acc_value(a, v.z, lim);
            acc_value(a, v.w, lim);
        }
    }
    // Every thread of the block; `slot` is the same for all of them.
    __device__ __forceinline__ void end(const mt_args &m, int t, int64_t begin) {
        if (slot) block_add_to_slot(slot, m.n[t], begin == 0, a, lim, slot2);
    }
};

// ---------------------------------------------------------------------------------------------
// unscale

// One block's chunk [begin, end) of gradient g: checked, and unscaled into out (g itself, or an
// f32 gradient when g is narrower) when `write`.
template <bool S, typename G>
__device__ __forceinline__ bool unscale_chunk(const G *g, float *out, bool write, float inv_scale,
                                              int64_t begin, int64_t end, mt_stats &st) {
    bool bad = false;
    if ((sizeof(G) == 4 || (void *)out != (void *)g) && mt_whole4(g, sizeof(G), begin, end) &&
        mt_whole4(out, 4, begin, end)) {
        float4 *o4 = (float4 *)(out + begin);
        float4 r[MT_VEC];
#pragma unroll
        for (int k = 0; k < MT_VEC; k++)
            r[k] = load4(g + begin, threadIdx.x + k * MT_BLOCK);
#pragma unroll
        for (int k = 0; k < MT_VEC; k++) {
            if (S) st.add(r[k]);
            bad |= !isfinite(r[k].x) || !isfinite(r[k].y) || !isfinite(r[k].z) || !isfinite(r[k].w);
            if (write)
                o4[threadIdx.x + k * MT_BLOCK] = make_float4(
                    r[k].x * inv_scale, r[k].y * inv_scale, r[k].z * inv_scale, r[k].w * inv_scale);
        }
        return bad;
    }
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const float v = cuda_io<G>::load(g[i]);
        if (S) st.add(v);
        bad |= !isfinite(v);
        if (!write) continue;
        if ((void *)out != (void *)g)
            out[i] = v * inv_scale;
        else
            ((G *)g)[i] = cuda_io<G>::store(v * inv_scale);
    }
    return bad;
}

template <bool S>
__global__ void __launch_bounds__(MT_BLOCK)
    unscale_kernel(mt_args a, const float *inv, float *found_inf) {
    const float inv_scale = *inv;
    int64_t begin, end;
    const int t = mt_locate(a, &begin, &end);
    const void *g = a.p[0][t];
    float *out = (float *)a.p[1][t]; // f32, when g is a narrower gradient; else g in place
    const bool write = out || inv_scale != 1.0f;
    if (!out) out = (float *)g;
    mt_stats st(a, 0, t, S);
    bool bad = false;
    with_float_type((amp_dtype)a.dtype[t], g, [&](auto *gt) {
        bad = unscale_chunk<S>(gt, out, write, inv_scale, begin, end, st);
    });
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
    if (S) st.end(a, t, begin);
}

static void unscale_launch(cuda_ctx *c, const mt_args *a, const float *inv_scale,
                           float *found_inf) {
    if (a->count == 0 || a->first_block[a->count] == 0) return;
    const unsigned grid = (unsigned)a->first_block[a->count];
    CUDA_STATS_DISPATCH(
        a->stats, S, unscale_kernel<S><<<grid, MT_BLOCK, 0, c->stream>>>(*a, inv_scale, found_inf));
    CUDA_LAUNCH_CHECK();
}

void cuda_unscale(void *bctx, amp_tensor_t *const *grads, const amp_tensor_t *const *from, int n,
                  const amp_tensor_t *inv, amp_tensor_t *found_inf) {
    cuda_ctx *c = cuda_of(bctx);
    float *fp = amp_f32_scalar(found_inf);
    const float *inv_scale = amp_f32_scalar(inv);
    mt_args a = {};
    for (int t = 0; t < n; t++) {
        amp_tensor_t *g = grads[t];
        const amp_tensor_t *src = from && from[t] ? from[t] : g;
        CUDA_ASSERT_CONTIGUOUS(g);
        CUDA_ASSERT_CONTIGUOUS(src);
        CUDA_ASSERT_FLOAT(src);
        AMP_ASSERT(src == g || (g->dtype == AMP_DTYPE_F32 && cuda_numel(src) == cuda_numel(g)));
        void *sp = amp_tensor_ptr(src), *op = src == g ? NULL : amp_tensor_ptr(g);
        if (!mt_add(&a, sp, op, NULL, NULL, cuda_numel(g), src->dtype)) {
            unscale_launch(c, &a, inv_scale, fp);
            a = mt_args{};
            mt_add(&a, sp, op, NULL, NULL, cuda_numel(g), src->dtype);
        }
        mt_take(c, &a, 0, src, src == g);
        if (src != g) cuda_held_guard_tensor(c, g);
    }
    unscale_launch(c, &a, inv_scale, fp);
}

// ---------------------------------------------------------------------------------------------
// The scale update (_amp_update_scale_), one thread: the found_infs come MT_MAX a launch, summed
// into rec, and the last launch updates the scale.

typedef struct scale_args {
    const float *found[MT_MAX];
    bool stepped[MT_MAX];
    int n;
    bool first, last;
    float *scale, *inv_scale;
    int32_t *tracker, *rec;
    amp_scaler_params p;
} scale_args;

__global__ void scale_update_kernel(scale_args a) {
    int32_t *rec = a.rec;
    float found = a.first ? 0.0f : __int_as_float(rec[AMP_REC_FOUND_INF]);
    int32_t skipped = a.first ? 0 : rec[AMP_REC_SKIPPED];
    for (int i = 0; i < a.n; i++) {
        const float f = *a.found[i];
        found += f;
        skipped |= a.stepped[i] && f != 0.0f;
    }
    if (a.last) {
        amp_scale_update_record(a.scale, a.inv_scale, a.tracker, found, skipped, &a.p, rec);
        return;
    }
    rec[AMP_REC_FOUND_INF] = __float_as_int(found); // the sum so far, for the next launch
    rec[AMP_REC_SKIPPED] = skipped;
}

void cuda_scale_update(void *bctx, amp_tensor_t *scale, amp_tensor_t *inv_scale,
                       amp_tensor_t *tracker, amp_tensor_t *const *found_infs, const bool *stepped,
                       int n, const amp_scaler_params *p, amp_tensor_t *rec) {
    cuda_ctx *c = cuda_of(bctx);
    AMP_ASSERT(n >= 1);
    AMP_ASSERT(tracker->dtype == AMP_DTYPE_I32 && cuda_numel(tracker) == 1);
    AMP_ASSERT(rec->dtype == AMP_DTYPE_I32 && cuda_numel(rec) == AMP_SCALE_REC);
    scale_args a = {};
    a.scale = amp_f32_scalar(scale);
    a.inv_scale = amp_f32_scalar(inv_scale);
    a.tracker = (int32_t *)amp_tensor_ptr(tracker);
    a.rec = (int32_t *)amp_tensor_ptr(rec);
    a.p = *p;
    for (int base = 0; base < n; base += MT_MAX) {
        a.n = n - base < MT_MAX ? n - base : MT_MAX;
        for (int i = 0; i < a.n; i++) {
            a.found[i] = amp_f32_scalar(found_infs[base + i]);
            a.stepped[i] = stepped[base + i];
        }
        a.first = base == 0;
        a.last = base + a.n == n;
        scale_update_kernel<<<1, 1, 0, c->stream>>>(a);
        CUDA_LAUNCH_CHECK();
    }
}

// ---------------------------------------------------------------------------------------------
// Optimizers (f32 parameters, gradients and state)

typedef struct optim_scalars {
    int kind;               // amp_optim_kind
    const float *found_inf; // non-zero: the step is skipped (NULL: never)
    float lr, weight_decay, momentum, damp1, beta2, eps; // rounded once from the doubles
    bool nesterov, with_weight_decay, with_momentum;     // the doubles != 0, as Python tests them
    float decay, w1, w2;                                 // Adam / AdamW
    double lr64, beta1_64, beta2_64; // the bias corrections' inputs (amp_adam_step_scalars)
} optim_scalars;

// What depends on the parameter's update count (amp_adam_step_scalars).
typedef struct step_scalars {
    int64_t step;
    float step_size, bc2_sqrt;
} step_scalars;

// Increments the counts of one optimizer step (the update counts of the parameters stepped and
// the optimizer's own) unless the step is skipped.
#define COUNTS_MAX 512
typedef struct counts_args {
    int32_t idx[COUNTS_MAX];
    int n;
} counts_args;

__global__ void counts_kernel(counts_args a, int64_t *counts, const float *found_inf) {
    if (found_inf && *found_inf != 0.0f) return;
    for (int k = threadIdx.x; k < a.n; k += blockDim.x)
        counts[a.idx[k]]++;
}

// One element of torch.optim's Adam / AdamW (amsgrad off).
__device__ __forceinline__ void adam_element(const optim_scalars &o, const step_scalars &s,
                                             bool decoupled, float &p, float g, float &m,
                                             float &v) {
    float gi = g, pi = p;
    if (o.with_weight_decay) {
        if (decoupled)
            pi = pi * o.decay;
        else
            gi = gi + o.weight_decay * pi;
    }
    float mi = m;
    mi = fabsf(o.w1) < 0.5f ? mi + o.w1 * (gi - mi) : gi - (gi - mi) * (1.0f - o.w1);
    const float vi = v * o.beta2 + o.w2 * gi * gi;
    const float denom = sqrtf(vi) / s.bc2_sqrt + o.eps;
    p = pi + s.step_size * (mi / denom);
    m = mi;
    v = vi;
}

// The update of one block's chunk [begin, end) of a parameter, with the statistics of its values
// before the update (sp) and of its gradient (sg) when S, and its new values rounded into lw (the
// next autocast region's copy) unless L is float (none).
template <bool S, typename G, typename L>
__device__ __forceinline__ void optim_chunk(const optim_scalars &o, const step_scalars s, float *p,
                                            const G *g, float *m, float *v, L *lw, int64_t begin,
                                            int64_t end, mt_stats &sp, mt_stats &sg) {
    constexpr bool copy = sizeof(L) == 2;
    if (o.kind == AMP_OPTIM_SGD) {
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            float gi = cuda_io<G>::load(g[i]);
            if (S) {
                sp.add(p[i]);
                sg.add(gi);
            }
            if (o.with_weight_decay) gi = gi + o.weight_decay * p[i];
            if (o.with_momentum) {
                m[i] = s.step == 1 ? gi : m[i] * o.momentum + o.damp1 * gi;
                gi = o.nesterov ? gi + o.momentum * m[i] : m[i];
            }
            p[i] = p[i] + -o.lr * gi;
            if constexpr (copy) lw[i] = cuda_io<L>::store(p[i]);
        }
        return;
    }
    const bool decoupled = o.kind == AMP_OPTIM_ADAMW;
    const void *arrays[3] = {p, m, v};
    if (mt_whole_f32(arrays, 3, begin, end) && mt_whole4(g, sizeof(G), begin, end) &&
        (!copy || mt_whole4(lw, sizeof(L), begin, end))) {
        float4 *p4 = (float4 *)(p + begin), *m4 = (float4 *)(m + begin),
               *v4 = (float4 *)(v + begin);
        float4 P[MT_VEC], G4[MT_VEC], M[MT_VEC], V[MT_VEC];
#pragma unroll
        for (int k = 0; k < MT_VEC; k++) {
            const int i = threadIdx.x + k * MT_BLOCK;
            P[k] = p4[i], G4[k] = load4(g + begin, i), M[k] = m4[i], V[k] = v4[i];
        }
#pragma unroll
        for (int k = 0; k < MT_VEC; k++) {
            if (S) {
                sp.add(P[k]);
                sg.add(G4[k]);
            }
            adam_element(o, s, decoupled, P[k].x, G4[k].x, M[k].x, V[k].x);
            adam_element(o, s, decoupled, P[k].y, G4[k].y, M[k].y, V[k].y);
            adam_element(o, s, decoupled, P[k].z, G4[k].z, M[k].z, V[k].z);
            adam_element(o, s, decoupled, P[k].w, G4[k].w, M[k].w, V[k].w);
            const int i = threadIdx.x + k * MT_BLOCK;
            p4[i] = P[k], m4[i] = M[k], v4[i] = V[k];
            if constexpr (copy) store4(lw + begin, i, P[k]);
        }
        return;
    }
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        const float gi = cuda_io<G>::load(g[i]);
        if (S) {
            sp.add(p[i]);
            sg.add(gi);
        }
        adam_element(o, s, decoupled, p[i], gi, m[i], v[i]);
        if constexpr (copy) lw[i] = cuda_io<L>::store(p[i]);
    }
}

template <bool S>
__global__ void __launch_bounds__(MT_BLOCK) optim_kernel(mt_args a, optim_scalars o) {
    const bool skip = o.found_inf && *o.found_inf != 0.0f; // `if (*found_inf)`: NaN counts
    int64_t begin, end;
    const int t = mt_locate(a, &begin, &end);
    void *lw = a.p[4][t];
    const amp_dtype lt = (amp_dtype)a.ldtype[t];
    if (!S && skip && !lw) return;
    float *p = (float *)a.p[0][t];
    const void *g = a.p[1][t];
    const amp_dtype gt = (amp_dtype)a.dtype[t]; // the gradient's: f32 or narrower
    float *m = (float *)a.p[2][t], *v = (float *)a.p[3][t];
    mt_stats sp(a, 0, t, S), sg(a, 1, t, S); // the parameter's before the update, its gradient's
    if (skip) { // the statistics, and the copy of the values as they are
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            if (S) {
                sp.add(p[i]);
                sg.add(cuda_load(gt, g, i));
            }
            if (lw) cuda_store(lt, lw, i, p[i]);
        }
    } else {
        __shared__ step_scalars ss;
        if (threadIdx.x == 0) {
            ss.step = *a.steps[t];
            amp_adam_step_scalars(o.lr64, o.beta1_64, o.beta2_64, ss.step, &ss.step_size,
                                  &ss.bc2_sqrt);
        }
        __syncthreads();
        with_float_type(gt, g, [&](auto *gtyped) {
            with_copy_type(lt, lw, [&](auto *ltyped) {
                optim_chunk<S>(o, ss, p, gtyped, m, v, ltyped, begin, end, sp, sg);
            });
        });
    }
    if (S) {
        sp.end(a, t, begin);
        sg.end(a, t, begin);
    }
}

static void optim_launch(cuda_ctx *c, const mt_args *a, const optim_scalars *o) {
    if (a->count == 0 || a->first_block[a->count] == 0) return;
    const unsigned grid = (unsigned)a->first_block[a->count];
    CUDA_STATS_DISPATCH(a->stats, S, optim_kernel<S><<<grid, MT_BLOCK, 0, c->stream>>>(*a, *o));
    CUDA_LAUNCH_CHECK();
}

void cuda_optim_step(void *bctx, const amp_optim_params *op, amp_tensor_t *const *params,
                     amp_tensor_t *const *grads, amp_tensor_t *const *m, amp_tensor_t *const *v,
                     amp_tensor_t *const *lowered, int n, amp_tensor_t *counts, const int32_t *idx,
                     const amp_tensor_t *found_inf) {
    cuda_ctx *c = cuda_of(bctx);
    const bool adam = op->kind == AMP_OPTIM_ADAM || op->kind == AMP_OPTIM_ADAMW;
    AMP_ASSERT(adam || op->kind == AMP_OPTIM_SGD, "(optimizer kind %d)", (int)op->kind);
    AMP_ASSERT(counts->dtype == AMP_DTYPE_I64);
    int64_t *cp = (int64_t *)amp_tensor_ptr(counts);
    const float *fp = found_inf ? amp_f32_scalar(found_inf) : NULL;
    for (int base = 0; base <= n; base += COUNTS_MAX) { // n + 1 counts, the step's own last
        counts_args ca = {};
        ca.n = n + 1 - base < COUNTS_MAX ? n + 1 - base : COUNTS_MAX;
        for (int k = 0; k < ca.n; k++) {
            AMP_ASSERT(idx[base + k] >= 0 && idx[base + k] < cuda_numel(counts));
            ca.idx[k] = idx[base + k];
        }
        counts_kernel<<<1, 128, 0, c->stream>>>(ca, cp, fp);
        CUDA_LAUNCH_CHECK();
    }
    optim_scalars o = {};
    o.kind = op->kind;
    o.found_inf = fp;
    o.lr = (float)op->lr;
    o.weight_decay = (float)op->weight_decay;
    o.momentum = (float)op->momentum;
    o.damp1 = (float)(1.0 - op->dampening);
    o.nesterov = op->nesterov;
    o.with_weight_decay = op->weight_decay != 0.0;
    o.with_momentum = op->momentum != 0.0;
    o.beta2 = (float)op->beta2;
    o.eps = (float)op->eps;
    if (adam) {
        o.decay = (float)(1.0 - op->lr * op->weight_decay);
        o.w1 = (float)(1.0 - op->beta1);
        o.w2 = (float)(1.0 - op->beta2);
        o.lr64 = op->lr, o.beta1_64 = op->beta1, o.beta2_64 = op->beta2;
    }
    // what the step writes besides the parameters (copies, moments): their held statistics, if
    // any, in one launch
    if (c->n_held) {
        const amp_tensor_t **w = (const amp_tensor_t **)malloc(3 * (size_t)n * sizeof *w);
        AMP_ASSERT(w != NULL || n == 0, "(out of host memory)");
        for (int t = 0; t < n; t++) {
            w[3 * t] = lowered ? lowered[t] : NULL;
            w[3 * t + 1] = m ? m[t] : NULL;
            w[3 * t + 2] = v ? v[t] : NULL;
        }
        cuda_held_guard_tensors(c, w, 3 * n);
        free(w);
    }
    mt_args a = {};
    for (int t = 0; t < n; t++) {
        amp_tensor_t *p = params[t];
        const amp_tensor_t *g = grads[t];
        const int64_t count = cuda_numel(p);
        AMP_ASSERT(p->dtype == AMP_DTYPE_F32, "(param %d)", t);
        CUDA_ASSERT_FLOAT(g);
        AMP_ASSERT(cuda_numel(g) == count);
        CUDA_ASSERT_CONTIGUOUS(p);
        CUDA_ASSERT_CONTIGUOUS(g);
        amp_tensor_t *mt = m ? m[t] : NULL, *vt = v ? v[t] : NULL;
        if (adam || op->momentum != 0.0) {
            AMP_ASSERT(mt && mt->dtype == AMP_DTYPE_F32 && cuda_numel(mt) == count,
                       "(param %d needs an f32 first-moment / momentum buffer)", t);
            CUDA_ASSERT_CONTIGUOUS(mt);
        }
        if (adam) {
            AMP_ASSERT(vt && vt->dtype == AMP_DTYPE_F32 && cuda_numel(vt) == count,
                       "(param %d needs an f32 second-moment buffer)", t);
            CUDA_ASSERT_CONTIGUOUS(vt);
        }
        void *pp = amp_tensor_ptr(p), *gp = amp_tensor_ptr(g);
        void *mp = mt ? amp_tensor_ptr(mt) : NULL, *vp = vt ? amp_tensor_ptr(vt) : NULL;
        if (!mt_add(&a, pp, gp, mp, vp, count, g->dtype)) {
            optim_launch(c, &a, &o);
            a = mt_args{};
            mt_add(&a, pp, gp, mp, vp, count, g->dtype);
        }
        a.steps[a.count - 1] = cp + idx[t];
        if (lowered && lowered[t]) {
            const amp_tensor_t *l = lowered[t];
            AMP_ASSERT((l->dtype == AMP_DTYPE_F16 || l->dtype == AMP_DTYPE_BF16) &&
                           cuda_numel(l) == count,
                       "(param %d's copy)", t);
            CUDA_ASSERT_CONTIGUOUS(l);
            a.p[4][a.count - 1] = amp_tensor_ptr(l);
            a.ldtype[a.count - 1] = (int8_t)l->dtype;
        }
        mt_take(c, &a, 0, p, true);
        mt_take(c, &a, 1, g, false);
    }
    optim_launch(c, &a, &o);
}
