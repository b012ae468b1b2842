/* FP8 E4M3 ("e4m3fn": 4 exponent bits, bias 7, 3 mantissa bits, no infinities, S.1111.111
 * is NaN, largest finite 448) and the per-row power-of-two scale of the FP8 KV cache. One
 * implementation for the host: the CPU backend and the tests; kernels/cuda uses cuda_fp8.h,
 * checked against this one by tests/cuda/test_cuda_fp8.cu. Pure functions, any thread. */
#ifndef TPD_FP8_H
#define TPD_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FP8_FN static inline __host__ __device__
#else
#define FP8_FN static inline
#endif

enum { FP8_E4M3_MAX_CODE = 0x7e, FP8_E4M3_NAN = 0x7f };
#define FP8_E4M3_MAX 448.0f

static inline float fp8_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80) << 24, e = (b >> 3) & 0xf, m = b & 7;
    uint32_t u;
    if (e == 0xf && m == 7) {
        u = sign | 0x7fc00000u; /* quiet NaN */
    } else if (e == 0) {
        float f = (float)m * 0x1p-9f; /* zero or subnormal: m * 2^-9, exact */
        memcpy(&u, &f, sizeof u);
        u |= sign;
    } else {
        u = sign | ((e + 120) << 23) | (m << 20); /* rebias 7 -> 127 */
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; magnitudes of 448 and above (infinities too) saturate to
 * +-448, as CUDA's __NV_SATFINITE does; NaN gives the NaN code with the input's sign. */
static inline uint8_t fp8_e4m3_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | FP8_E4M3_NAN);
    if (a >= 0x43e00000u) return (uint8_t)(sign | FP8_E4M3_MAX_CODE); /* >= 448 */
    if (a < 0x3c800000u) { /* below 2^-6: subnormal or zero */
        float v;
        memcpy(&v, &a, sizeof v);
        /* v * 2^9 is exact and < 8; rounding it half-even gives the subnormal mantissa (8 = the
         * smallest normal, which encodes correctly too) */
        return (uint8_t)(sign | (uint8_t)nearbyintf(v * 512.0f));
    }
    uint32_t h = (((a >> 23) - 120) << 3) | ((a >> 20) & 7);
    const uint32_t rem = a & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (h & 1)))
        h++; /* a carry moves into the exponent;
              * below 448 it never reaches NaN */
    return (uint8_t)(sign | h);
}

/* The KV cache stores each (token, KV head) row of head_dim values as FP8 codes of x / 2^e
 * and the exponent e beside them (int8). e is the smallest with amax <= 448 * 2^e for the
 * row's largest magnitude amax, so nothing saturates and the largest element lands in
 * (224, 448]; a power of two makes the scaling exact both ways. 0 for a zero or non-finite
 * amax; clamped to +-FP8_EXP_LIMIT so that 2^e, 2^-e and 2^(e+8) (the AVX2 decode) are normal
 * floats. */
enum { FP8_EXP_LIMIT = 100 };
FP8_FN int fp8_row_exp(float amax) {
    uint32_t u;
    memcpy(&u, &amax, sizeof u);
    u &= 0x7fffffffu;
    if (u == 0 || u >= 0x7f800000u) return 0;
    /* amax = 1.m * 2^p (a subnormal amax reads as a tiny p: the clamp takes it);
     * 448 = 1.75 * 2^8, so amax <= 448 * 2^e needs e = p - 8 when 1.m <= 1.75, else p - 7 */
    const int p = (int)(u >> 23) - 127;
    int e = (u & 0x7fffffu) <= 0x600000u ? p - 8 : p - 7;
    if (e < -FP8_EXP_LIMIT) e = -FP8_EXP_LIMIT;
    if (e > FP8_EXP_LIMIT) e = FP8_EXP_LIMIT;
    return e;
}

/* 2^e as a float, for |e| <= FP8_EXP_LIMIT */
FP8_FN float fp8_exp2(int e) {
    const uint32_t u = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One row of n values into codes q and its exponent; returns the exponent. */
static inline int fp8_encode_row(uint8_t *q, const float *x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > amax) amax = a; /* NaNs never compare greater: they encode as NaN below */
    }
    const int e = fp8_row_exp(amax);
    const float inv = fp8_exp2(-e);
    for (int i = 0; i < n; i++) q[i] = fp8_e4m3_from_f32(x[i] * inv);
    return e;
}

#endif
