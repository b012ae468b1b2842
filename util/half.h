/* IEEE half and bfloat16 conversions, bit-exact with F16C (round to nearest even, NaNs
 * kept quiet). One implementation for the whole project: weights, KV cache, activations. */
#ifndef TPD_HALF_H
#define TPD_HALF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        float f = (float)man * 0x1p-24f; /* zero or subnormal: exact */
        memcpy(&u, &f, sizeof u);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13) |
            (man ? 0x400000u : 0); /* NaNs come out quiet, as with F16C */
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff)); /* quiet NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);               /* >= 65520: inf */
    if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
        float v;
        memcpy(&v, &a, sizeof v);
        /* v * 2^24 is exact and < 1024; rounding it half-even gives the subnormal mantissa
         * (1024 = the smallest normal, which encodes correctly too). */
        return (uint16_t)(sign | (uint16_t)nearbyintf(v * 0x1p24f));
    }
    uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff);
    uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry moves into the exponent */
    return (uint16_t)(sign | (uint16_t)h);
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* round to nearest even, NaN kept quiet (ggml's rule) */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#endif
