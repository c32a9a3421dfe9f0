/*
 * dtype.c — data types and the f32 <-> f16/bf16 conversions, bit-exact with PyTorch:
 * f16 follows the FP16 library's fp16_ieee_from_fp32_value (round to nearest even, overflow to
 * inf, subnormals kept, NaN -> 0x7E00 | sign); bf16 follows c10's round_to_nearest_even
 * (NaN -> 0x7FC0). Widening is exact.
 */
#include "amp-impl.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name, *aliases[3]; // ours, then the short and PyTorch's spellings
    size_t size;
} dtypes[AMP_DTYPE_COUNT] = {
    [AMP_DTYPE_F32] = {"f32", {"fp32", "float32", "float"}, 4},
    [AMP_DTYPE_F16] = {"f16", {"fp16", "float16", "half"}, 2},
    [AMP_DTYPE_BF16] = {"bf16", {"bfloat16"}, 2},
    [AMP_DTYPE_I32] = {"i32", {"int32", "int"}, 4},
    [AMP_DTYPE_I64] = {"i64", {"int64", "long"}, 8},
};

const char *amp_dtype_name(amp_dtype t) {
    return (unsigned)t < AMP_DTYPE_COUNT ? dtypes[t].name : "?";
}
size_t amp_dtype_size(amp_dtype t) {
    return (unsigned)t < AMP_DTYPE_COUNT ? dtypes[t].size : 0;
}
bool amp_dtype_is_float(amp_dtype t) {
    return t == AMP_DTYPE_F32 || t == AMP_DTYPE_F16 || t == AMP_DTYPE_BF16;
}

bool amp_dtype_parse(const char *s, amp_dtype *out) {
    if (!s) return false;
    for (int i = 0; i < AMP_DTYPE_COUNT; i++) {
        bool match = strcmp(s, dtypes[i].name) == 0;
        for (int a = 0; a < 3 && !match && dtypes[i].aliases[a]; a++)
            match = strcmp(s, dtypes[i].aliases[a]) == 0;
        if (match) {
            *out = (amp_dtype)i;
            return true;
        }
    }
    return false;
}

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// The FP16 library's branch-free conversion: scaling by powers of two lets the FPU do the
// rounding, including into subnormals.
uint16_t amp_f32_to_f16(float f) {
    const float scale_to_inf = f32_from_bits(0x77800000u);  // 2^112
    const float scale_to_zero = f32_from_bits(0x08800000u); // 2^-110
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float amp_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return f32_from_bits(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        float v = (float)man * 5.9604644775390625e-08f; // man * 2^-24, exact
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t amp_f32_to_bf16(float x) {
    if (isnan(x)) return 0x7FC0;
    uint32_t u = f32_bits(x);
    uint32_t rounding_bias = 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding_bias) >> 16);
}

float amp_f16_table[65536];

__attribute__((constructor)) static void fill_f16_table(void) {
    for (uint32_t h = 0; h < 65536; h++)
        amp_f16_table[h] = amp_f16_to_f32((uint16_t)h);
}

float amp_bf16_to_f32(uint16_t h) {
    return f32_from_bits((uint32_t)h << 16);
}

float amp_round_to(amp_dtype t, float x) {
    switch (t) {
    case AMP_DTYPE_F16:
        return amp_f16_to_f32(amp_f32_to_f16(x));
    case AMP_DTYPE_BF16:
        return amp_bf16_to_f32(amp_f32_to_bf16(x));
    default:
        return x;
    }
}
