/*
 * cuda-fuse.h — the statistics of cuda-stats.cu as device pieces that any kernel can run on the
 * values it stores, and the host side of the instrumentation's sink (amp_stats_sink in
 * amp-impl.h): an op whose output the instrumentation wants computes the output's statistics in
 * the kernel that writes it instead of a second kernel reading it again.
 *
 * A kernel templated on `bool S` (every thread of every block must reach the end):
 *     thread_acc a = acc_empty();
 *     ... y[i] = v; if (S) acc_stored(a, (float)y[i], f.lim); ...
 *     cuda_fuse_end<S>(f, a);
 * or, storing 16-byte vectors of T (the 16-bit ones then go two values an instruction):
 *     stored_stats<S, T> st(f);
 *     for (...) { ... store the vector v; st.values(v, f.lim); ... }
 *     st.end(f);
 * launched through CUDA_FUSE_DISPATCH with cuda_fuse_grid() blocks: one wave as a rule, since
 * every block ends in a few atomics on the one slot.
 */
#ifndef AMP_CUDA_FUSE_H
#define AMP_CUDA_FUSE_H

#include <math.h>

#include <type_traits>

#include "cuda-impl.h"

struct stats_limits {
    float overflow, min_normal; // overflow inf, min_normal 0: neither counted (an f32 target)
};

// One thread's running numbers (32-bit counts: a thread sees far fewer than 2^32 values). `small`
// counts the finite values below min_normal, zeros included: underflow = small - zero. The sum of
// squares is f32 until the block adds it up in f64: values beyond 1.8e19 make it inf here, where
// the CPU's f64 sum stays finite.
struct thread_acc {
    float mn, mx, ss;
    unsigned nan, pinf, ninf, over, small, zero;
};

// A finite value within the target's range (the common case: no test for NaN, inf or overflow).
// SMALL drops the comparison that cannot count anything: an f32 target counts no underflow.
template <bool SMALL, bool SUMSQ = true>
__device__ __forceinline__ void acc_finite(thread_acc &a, float v, stats_limits lim) {
    const float m = fabsf(v);
    a.mn = fminf(a.mn, v);
    a.mx = fmaxf(a.mx, v);
    if (SUMSQ) a.ss = fmaf(v, v, a.ss);
    a.zero += m == 0.0f;
    if (SMALL) a.small += m < lim.min_normal;
}

// A value that is NaN, ±inf or beyond the target's range (a finite one is in min and max too).
template <bool SUMSQ> __device__ __forceinline__ void acc_rare(thread_acc &a, float v) {
    if (isnan(v)) {
        a.nan++;
    } else if (isinf(v)) {
        a.pinf += v > 0.0f;
        a.ninf += v < 0.0f;
    } else {
        a.over++;
        a.mn = fminf(a.mn, v);
        a.mx = fmaxf(a.mx, v);
        if (SUMSQ) a.ss = fmaf(v, v, a.ss);
    }
}

// Any value. One comparison tells the common case from the rare ones (NaN fails it too), on a
// branch that the warp almost never diverges on.
template <bool SUMSQ = true>
__device__ __forceinline__ void acc_value(thread_acc &a, float v, stats_limits lim) {
    if (!(fabsf(v) < lim.overflow)) return acc_rare<SUMSQ>(a, v);
    acc_finite<true, SUMSQ>(a, v, lim);
}

// A value a fusing kernel stores: no sum of squares (only parameter gradients need one, and the
// instrumentation reads those with the statistics kernel).
__device__ __forceinline__ void acc_stored(thread_acc &a, float v, stats_limits lim) {
    acc_value<false>(a, v, lim);
}

// ---------------------------------------------------------------------------------------------
// Two values per instruction: a 16-byte vector of the target's own 16-bit type (fp16 outputs
// under fp16 autocast, the common case) goes through the half2 / bfloat162 instructions, whose
// min, max and comparisons take a pair of values each, instead of being widened to f32 one by one
// (about ten instructions a value). A finite value of that type never overflows it, so a vector of
// finite values whose magnitudes are all at least the smallest normal (nearly every vector) costs
// a min and a max a pair and a test for the whole vector; one with a zero or a smaller value also
// counts those, a pair at a time, and one with an inf or a NaN goes value by value.

template <typename T> struct pair_of;
template <> struct pair_of<__half> {
    using T2 = __half2;
    static constexpr unsigned max_bits = 0x7bff, min_normal_bits = 0x0400, inf_bits = 0x7c00;
    static constexpr float min_normal = 6.103515625e-05f;
};
template <> struct pair_of<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    static constexpr unsigned max_bits = 0x7f7f, min_normal_bits = 0x0080, inf_bits = 0x7f80;
    static constexpr float min_normal = 1.1754943508222875e-38f;
};

template <typename T> struct acc_pairs { typename pair_of<T>::T2 mn, mx; };

// Both halves of a pair set to the 16-bit pattern `bits`.
template <typename T> __device__ __forceinline__ typename pair_of<T>::T2 pair_splat(unsigned bits) {
    const unsigned w = bits | bits << 16;
    typename pair_of<T>::T2 r;
    __builtin_memcpy(&r, &w, sizeof r);
    return r;
}

template <typename T> __device__ __forceinline__ acc_pairs<T> acc_pairs_empty(void) {
    constexpr unsigned inf = pair_of<T>::inf_bits;
    return acc_pairs<T>{pair_splat<T>(inf), pair_splat<T>(inf | 0x8000u)};
}

// Whether T's values can go in pairs under these limits: T is 16-bit and the target's own type.
template <typename T> __device__ __forceinline__ bool pairs_apply(stats_limits lim) {
    if constexpr (sizeof(T) == 2)
        return lim.min_normal == pair_of<T>::min_normal;
    else
        return false;
}

// One 16-byte vector (above).
template <typename T, bool SUMSQ>
__device__ __forceinline__ void acc_pairs_vector(acc_pairs<T> &p, thread_acc &a, const T *v,
                                                 stats_limits lim) {
    using T2 = typename pair_of<T>::T2;
    const T2 *h = reinterpret_cast<const T2 *>(v);
    const T2 m[4] = {__habs2(h[0]), __habs2(h[1]), __habs2(h[2]), __habs2(h[3])};
    // the largest magnitude (NaN if any is) and the smallest
    const T2 hi = __hmax2_nan(__hmax2_nan(m[0], m[1]), __hmax2_nan(m[2], m[3]));
    const T2 lo = __hmin2(__hmin2(m[0], m[1]), __hmin2(m[2], m[3]));
    if (!__hble2(hi, pair_splat<T>(pair_of<T>::max_bits))) { // an inf or a NaN among them
        // one infinity throughout (a mask's fill, half of a causal attention's scores): at once
        unsigned w[4];
        __builtin_memcpy(w, v, sizeof w);
        const unsigned inf = pair_of<T>::inf_bits, pos = inf | inf << 16, neg = pos | 0x80008000u;
        if ((w[0] == pos || w[0] == neg) && w[1] == w[0] && w[2] == w[0] && w[3] == w[0]) {
            (w[0] == pos ? a.pinf : a.ninf) += 8;
            return;
        }
#pragma unroll
        for (int k = 0; k < 8; k++)
            acc_value<SUMSQ>(a, cuda_io<T>::load(v[k]), lim);
        return;
    }
    p.mn = __hmin2(p.mn, __hmin2(__hmin2(h[0], h[1]), __hmin2(h[2], h[3])));
    p.mx = __hmax2(p.mx, __hmax2(__hmax2(h[0], h[1]), __hmax2(h[2], h[3])));
    const T2 tiny = pair_splat<T>(pair_of<T>::min_normal_bits);
    if (!__hbge2(lo, tiny)) { // a zero or a value below the smallest normal among them
        // counted in the pair's lanes (1 or 0 a comparison: at most 4, exact), then added up
        const T2 nil = pair_splat<T>(0);
        T2 zero = __heq2(m[0], nil), small = __hlt2(m[0], tiny);
#pragma unroll
        for (int k = 1; k < 4; k++) {
            zero = __hadd2(zero, __heq2(m[k], nil));
            small = __hadd2(small, __hlt2(m[k], tiny));
        }
        a.zero += (unsigned)(__low2float(zero) + __high2float(zero));
        a.small += (unsigned)(__low2float(small) + __high2float(small));
    }
    if (SUMSQ) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float v0 = __low2float(h[k]), v1 = __high2float(h[k]);
            a.ss = fmaf(v0, v0, a.ss);
            a.ss = fmaf(v1, v1, a.ss);
        }
    }
}

// The pairs' min and max into the thread's numbers (at the end).
template <typename T>
__device__ __forceinline__ void acc_pairs_end(const acc_pairs<T> &p, thread_acc &a) {
    a.mn = fminf(a.mn, fminf(__low2float(p.mn), __high2float(p.mn)));
    a.mx = fmaxf(a.mx, fmaxf(__low2float(p.mx), __high2float(p.mx)));
}

// (32-bit counts: a block sees far fewer than 2^32 values, and narrow shuffles keep the
// registers of the kernels that fuse this low.)
struct block_total {
    float min, max;
    unsigned nan, pinf, ninf, over, under, zero;
    double sumsq;
};

__device__ __forceinline__ void total_combine(block_total &a, const block_total &b) {
    a.min = fminf(a.min, b.min);
    a.max = fmaxf(a.max, b.max);
    a.nan += b.nan;
    a.pinf += b.pinf;
    a.ninf += b.ninf;
    a.over += b.over;
    a.under += b.under;
    a.zero += b.zero;
    a.sumsq += b.sumsq;
}

__device__ __forceinline__ block_total shfl_down(const block_total &r, int d) {
    block_total o;
    o.min = __shfl_down_sync(0xffffffffu, r.min, d);
    o.max = __shfl_down_sync(0xffffffffu, r.max, d);
    o.nan = __shfl_down_sync(0xffffffffu, r.nan, d);
    o.pinf = __shfl_down_sync(0xffffffffu, r.pinf, d);
    o.ninf = __shfl_down_sync(0xffffffffu, r.ninf, d);
    o.over = __shfl_down_sync(0xffffffffu, r.over, d);
    o.under = __shfl_down_sync(0xffffffffu, r.under, d);
    o.zero = __shfl_down_sync(0xffffffffu, r.zero, d);
    o.sumsq = __shfl_down_sync(0xffffffffu, r.sumsq, d);
    return o;
}

// A thread's index in its block, and the block's size (blocks of 1, 2 or 3 dims).
__device__ __forceinline__ unsigned block_thread(void) {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned block_size(void) {
    return blockDim.x * blockDim.y * blockDim.z;
}

// The block's total in its thread 0 (block_size() a multiple of 32, at most 1024).
__device__ __forceinline__ block_total block_reduce(block_total r) {
    __shared__ block_total warps[32];
    for (int d = 16; d > 0; d /= 2)
        total_combine(r, shfl_down(r, d));
    const unsigned warp = block_thread() / 32, lane = block_thread() % 32;
    __syncthreads(); // a kernel adding two tensors' numbers reduces twice: warp 0 has read warps
    if (lane == 0) warps[warp] = r;
    __syncthreads();
    if (warp == 0) {
        const unsigned n = block_size() / 32;
        r = lane < n ? warps[lane] : block_total{INFINITY, -INFINITY, 0, 0, 0, 0, 0, 0, 0.0};
        for (int d = 16; d > 0; d /= 2)
            total_combine(r, shfl_down(r, d));
    }
    return r;
}

// Float min/max by atomics on the bit patterns (ordered like the values for one sign).
__device__ __forceinline__ void atomic_min_float(float *a, float v) {
    if (v >= 0.0f)
        atomicMin((int *)a, __float_as_int(v));
    else
        atomicMax((unsigned *)a, __float_as_uint(v));
}

__device__ __forceinline__ void atomic_max_float(float *a, float v) {
    if (v >= 0.0f)
        atomicMax((int *)a, __float_as_int(v));
    else
        atomicMin((unsigned *)a, __float_as_uint(v));
}

// A block's total r into slot (by one thread); the tensor's first blocks also set numel.
__device__ __forceinline__ void slot_add(amp_stats *slot, const block_total &r, int64_t numel,
                                         bool first) {
    if (first) slot->numel = numel;
    // Up to a thousand blocks end together on one slot: atomics only where they change something.
    // The slot's min only falls and its max only rises, so a stale read can only be less tight.
    if (r.min <= r.max) { // the block saw a finite value (+ 0.0f: -0 would misorder the bits)
        // both reads first: one trip to L2 instead of one before each atomic
        const float min_now = __ldcg(&slot->min), max_now = __ldcg(&slot->max);
        if (r.min < min_now) atomic_min_float(&slot->min, r.min + 0.0f);
        if (r.max > max_now) atomic_max_float(&slot->max, r.max + 0.0f);
        if (r.sumsq != 0.0) atomicAdd(&slot->sumsq, r.sumsq);
    }
    const struct {
        unsigned long long n;
        int64_t *to;
    } counts[] = {{r.nan, &slot->n_nan},         {r.pinf, &slot->n_posinf},
                  {r.ninf, &slot->n_neginf},     {r.over, &slot->n_overflow},
                  {r.under, &slot->n_underflow}, {r.zero, &slot->n_zero}};
    for (const auto &c : counts)
        if (c.n) atomicAdd((unsigned long long *)c.to, c.n);
}

// The block's numbers into slot, and into slot2 too when it is set (a second entry for the same
// tensor): reduced over the block, added by its thread 0. Every thread of the block calls it.
__device__ __forceinline__ void block_add_to_slot(amp_stats *slot, int64_t numel, bool first,
                                                  const thread_acc &a, stats_limits lim,
                                                  amp_stats *slot2 = nullptr) {
    const unsigned under = lim.min_normal > 0.0f ? a.small - a.zero : 0u;
    block_total r = {a.mn, a.mx, a.nan, a.pinf, a.ninf, a.over, under, a.zero, (double)a.ss};
    r = block_reduce(r);
    if (block_thread() != 0) return;
    slot_add(slot, r, numel, first);
    if (slot2) slot_add(slot2, r, numel, first);
}

__device__ __forceinline__ thread_acc acc_empty(void) {
    return thread_acc{INFINITY, -INFINITY, 0.0f, 0, 0, 0, 0, 0, 0};
}

// The overflow threshold and smallest normal of an autocast dtype (f32: neither is counted).
__host__ __device__ static inline stats_limits stats_limits_of(amp_dtype target) {
    if (target == AMP_DTYPE_F16) return {65520.0f, 6.103515625e-05f};
    if (target == AMP_DTYPE_BF16) return {3.3961775292304854e38f, 1.1754943508222875e-38f};
    return {INFINITY, 0.0f};
}

// What a fusing kernel is given: where its output's statistics go (slot NULL: nowhere).
struct cuda_fuse {
    amp_stats *slot;
    int64_t numel;
    stats_limits lim;
};

// Whether a and b count under the same target (one set of numbers can serve both).
static inline bool cuda_fuse_same_target(const cuda_fuse &a, const cuda_fuse &b) {
    return a.lim.overflow == b.lim.overflow && a.lim.min_normal == b.lim.min_normal;
}

// The sink armed for y, taken (the caller's kernel will add y's statistics), or an empty one.
// Only floating outputs: the statistics kernel's integer path stays separate.
static inline cuda_fuse cuda_fuse_take(const amp_tensor_t *y) {
    amp_stats_sink *s = &y->ctx->sink;
    if (s->out != y || s->taken || !amp_dtype_is_float(y->dtype)) return cuda_fuse{NULL, 0, {}};
    s->taken = true;
    return cuda_fuse{s->slot, cuda_numel(y), stats_limits_of(s->target)};
}

// x's held statistics (cuda_ctx.held), taken by the caller's kernel, which reads x whole (its
// memory: x contiguous) and adds them without the sum of squares (those that want it stay held);
// otherwise empty. Call it only on the path whose kernel adds what it takes.
static inline cuda_fuse cuda_fuse_take_input(cuda_ctx *c, const amp_tensor_t *x) {
    amp_stats *slot;
    amp_dtype target;
    if (!amp_dtype_is_float(x->dtype) || !cuda_held_take(c, x, false, &slot, &target))
        return cuda_fuse{NULL, 0, {}};
    return cuda_fuse{slot, cuda_numel(x), stats_limits_of(target)};
}

// Blocks of `kernel` with `block` threads each that the device holds at once (asked once per
// kernel and block size; the backend's ops run on one thread).
int cuda_resident_blocks(const void *kernel, int block);
// The current device's multiprocessors, asked once (132, an H100's, if the runtime cannot say):
// what the reductions size their waves of blocks by.
int cuda_sm_count(void);
// n rows (or slices) split into about `want` parts (at least 1, at most `most` and 65535: a grid
// dimension) of *per each, the last perhaps shorter: returns how many parts there are (1 of 1
// when n is 0). How the reductions cut what they sum into blocks of partial sums.
static inline int64_t cuda_split(int64_t n, int64_t want, int64_t most, int64_t *per) {
    int64_t parts = want > most ? most : want;
    parts = parts < 1 ? 1 : parts > 65535 ? 65535 : parts;
    *per = n > 0 ? (n + parts - 1) / parts : 1;
    return n > 0 ? (n + *per - 1) / *per : 1;
}

// The grid of a launch of `kernel` that may fuse: `grid` as planned, capped at `waves` waves of
// that kernel when it does (one as a rule: more blocks would only add atomics and a tail).
template <typename K>
static inline unsigned cuda_fuse_grid(const cuda_fuse &f, unsigned grid, int block, K kernel,
                                      unsigned waves = 1) {
    if (!f.slot) return grid;
    const unsigned cap = waves * (unsigned)cuda_resident_blocks((const void *)kernel, block);
    return grid < cap ? grid : cap;
}

// The same for a kernel that may add two tensors' statistics (its output's f, an input's fi).
template <typename K>
static inline unsigned cuda_fuse_grid(const cuda_fuse &f, const cuda_fuse &fi, unsigned grid,
                                      int block, K kernel, unsigned waves = 1) {
    return cuda_fuse_grid(f.slot ? f : fi, grid, block, kernel, waves);
}

// A fusing kernel's last step: the block's numbers into the slot (f without one: nothing; the
// same in every block).
template <bool S>
__device__ __forceinline__ void cuda_fuse_end(const cuda_fuse &f, const thread_acc &a) {
    if (S && f.slot) block_add_to_slot(f.slot, f.numel, blockIdx.x == 0, a, f.lim);
}

// A fusing kernel's statistics of the 16-byte vectors of T it stores or reads (values()) and of
// single values (value(), its tail), in pairs where they can go (above). S false compiles them out;
// f without a slot turns them off (a kernel that may add two tensors' statistics, its input's and
// its output's, is compiled with S when either is on). No sum of squares: outputs and held inputs
// that do not want it (cuda_fuse_take_input).
template <bool S, typename T> struct stored_stats {
    static constexpr bool TWO = sizeof(T) == 2;
    thread_acc a;
    std::conditional_t<TWO, acc_pairs<T>, char> p;
    bool on, pairs;

    __device__ __forceinline__ explicit stored_stats(const cuda_fuse &f)
        : a(acc_empty()), on(S && f.slot), pairs(false) {
        if constexpr (TWO) {
            p = acc_pairs_empty<T>();
            pairs = on && pairs_apply<T>(f.lim);
        }
    }
    __device__ __forceinline__ void values(const T *v, stats_limits lim) {
        if constexpr (S) {
            if (!on) return;
            if constexpr (TWO)
                if (pairs) return acc_pairs_vector<T, false>(p, a, v, lim);
#pragma unroll
            for (int j = 0; j < 16 / (int)sizeof(T); j++)
                acc_value<false>(a, cuda_io<T>::load(v[j]), lim);
        }
    }
    __device__ __forceinline__ void value(T v, stats_limits lim) {
        if (S && on) acc_value<false>(a, cuda_io<T>::load(v), lim);
    }
    __device__ __forceinline__ void end(const cuda_fuse &f) { // `on` is the same in every block
        if constexpr (TWO)
            if (S && pairs) acc_pairs_end(p, a);
        cuda_fuse_end<S>(f, a);
    }
};

// Runs the statement(s) with `constexpr bool S` saying whether f is on: kernels templated on S
// compile the statistics out of the launches that do not add them.
#define CUDA_FUSE_DISPATCH(f, S, ...) CUDA_STATS_DISPATCH((f).slot != NULL, S, __VA_ARGS__)

// The same for a kernel that may add two tensors' statistics: S when either is on.
#define CUDA_FUSE_DISPATCH2(f, fi, S, ...)                                                         \
    CUDA_STATS_DISPATCH((f).slot != NULL || (fi).slot != NULL, S, __VA_ARGS__)

// The same on a condition: any of a kernel's statistics on.
#define CUDA_STATS_DISPATCH(on, S, ...)                                                            \
    do {                                                                                           \
        if (on) {                                                                                  \
            constexpr bool S = true;                                                               \
            __VA_ARGS__;                                                                           \
        } else {                                                                                   \
            constexpr bool S = false;                                                              \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)

#endif // AMP_CUDA_FUSE_H
