/* Internal to kernels/cuda: GGUF weight blocks, and the F8_E4M3_S32 / I4_S32 blocks of FP8
 * and INT4 checkpoints, decoded in registers (layouts as in kernels/cpu/quant.h). Everything
 * here is __host__ __device__ so that a host-only test (tests/cuda/test_cuda_quant.cu)
 * checks it against the CPU code without a GPU.
 *
 * A quantized matrix row is processed in 32-element units: unit u is block u for Q4_0,
 * Q4_1 and Q8_0, and 32-element part u % 8 of super-block u / 8 for Q4_K and Q6_K. A
 * unit's dot product with activations quantized as the CPU quantizes them (Q8_0, Q8_1 or
 * Q8_K, see kernels/cpu/quant.c) gives the same integer sums as the CPU's; only the
 * float accumulation order differs. */
#ifndef TPD_CUDA_QUANT_DEV_CUH
#define TPD_CUDA_QUANT_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#ifndef __CUDA_ARCH__
#include "../../util/half.h"
#endif

#define QD __host__ __device__ __forceinline__
/* loops unrolled on the device; the host compiler does not know the pragma */
#ifdef __CUDA_ARCH__
#define QD_UNROLL _Pragma("unroll")
#else
#define QD_UNROLL
#endif

static QD float qd_h2f(uint16_t u) {
#ifdef __CUDA_ARCH__
    __half_raw r;
    r.x = u;
    return __half2float(__half(r));
#else
    return f16_to_f32(u);
#endif
}

static QD float qd_bf2f(uint16_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)u << 16);
#else
    return bf16_to_f32(u);
#endif
}

/* fp16 rounding of a float (round to nearest even), as the CPU's f16_round. */
static QD float qd_f16_round(float x) {
#ifdef __CUDA_ARCH__
    return __half2float(__float2half_rn(x));
#else
    return f16_to_f32(f32_to_f16(x));
#endif
}

/* An E4M3 code's value, exactly (util/fp8.h's decode; the loader refuses NaN codes) */
static QD float qd_e4m3(uint8_t b) {
    const uint32_t e = (b >> 3) & 0xf, m = b & 7;
    const uint32_t u = ((e + 120) << 23) | (m << 20);
    float f;
    memcpy(&f, &u, 4);
    if (!e) f = (float)m * 0x1p-9f; /* zero and subnormals: m * 2^-9 */
    return (b & 0x80) ? -f : f;
}

/* a * b and a + b rounded on their own: no fused multiply-add changes the rounding */
static QD float qd_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
static QD float qd_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* The float whose bits are u. */
static QD float qd_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* I4_S32 (kernels/cpu/quant.h: f32 d | f32 z | 16 bytes of nibbles, element e in byte e % 16,
 * low half for e < 16): the 16 values of elements 8h..8h+7 (v[0..8)) and 16+8h..16+8h+7
 * (v[8..16)) from nibble bytes 8h..8h+3 (q0) and 8h+4..8h+7 (q1), each bit for bit the CPU's
 * i4_value, ((float)q - z) * d. (float)q is 2^23 + q read from its bits, less 2^23; when z is
 * an integer of magnitude <= 2^22 (every zero point the loader writes) 2^23 + z is exact and
 * one subtraction gives q - z rounded once, as the CPU's; any other z takes two. */
static QD void qd_i4_vals16(uint32_t q0, uint32_t q1, float d, float z, float *v) {
    const float two23 = 8388608.0f, zz = z + two23;
    if (fabsf(z) <= 4194304.0f && zz - two23 == z) { /* zz = 2^23 + z exactly */
        QD_UNROLL
        for (int k = 0; k < 8; k++) {
            const uint32_t b = ((k < 4 ? q0 : q1) >> (8 * (k & 3))) & 0xffu;
            v[k] = qd_mul(qd_bits_f32(0x4b000000u | (b & 15u)) - zz, d);
            v[k + 8] = qd_mul(qd_bits_f32(0x4b000000u | (b >> 4)) - zz, d);
        }
    } else {
        QD_UNROLL
        for (int k = 0; k < 8; k++) {
            const uint32_t b = ((k < 4 ? q0 : q1) >> (8 * (k & 3))) & 0xffu;
            v[k] = qd_mul((qd_bits_f32(0x4b000000u | (b & 15u)) - two23) - z, d);
            v[k + 8] = qd_mul((qd_bits_f32(0x4b000000u | (b >> 4)) - two23) - z, d);
        }
    }
}

/* 16-bit loads: blocks are packed back to back and only 2-byte aligned. */
static QD uint16_t qd_u16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    return *(const uint16_t *)p;
#else
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}

/* 4 bytes from a 2-byte aligned address. */
static QD int qd_ld4(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
#else
    int v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* 4 activation quants from a 4-byte aligned address. */
static QD int qd_a4(const int8_t *p) {
#ifdef __CUDA_ARCH__
    return *(const int *)p;
#else
    int v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* sum of the 4 signed byte products, plus c */
static QD int qd_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
#endif
}

/* ---- one 32-element unit of a weight row times 32 activation quants ----
 * row: the weight row; u: the unit; a: the activation row's quants (unit u at a + 32u);
 * ad: the activation row's scales (Q8_0: d per 32-block; Q8_1: (d, s) pairs; Q8_K: d per
 * 256-block). */

static QD float qd_dot_q4_0(const uint8_t *row, int u, const int8_t *a, const float *ad) {
    const uint8_t *w = row + 18 * u;
    const int8_t *x = a + 32 * u;
    int sumi = 0, suma = 0;
    QD_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t v = (uint32_t)qd_ld4(w + 2 + 4 * j);
        const int a0 = qd_a4(x + 4 * j), a1 = qd_a4(x + 16 + 4 * j);
        sumi = qd_dp4a((int)(v & 0x0f0f0f0fu), a0, sumi);        /* elements 4j..4j+3 */
        sumi = qd_dp4a((int)((v >> 4) & 0x0f0f0f0fu), a1, sumi); /* elements 16+4j.. */
        suma = qd_dp4a(0x01010101, a0, suma);
        suma = qd_dp4a(0x01010101, a1, suma);
    }
    sumi -= 8 * suma; /* weights are q - 8 */
    return (qd_h2f(qd_u16(w)) * ad[u]) * (float)sumi;
}

static QD float qd_dot_q4_1(const uint8_t *row, int u, const int8_t *a, const float *ad) {
    const uint8_t *w = row + 20 * u;
    const int8_t *x = a + 32 * u;
    int sumi = 0;
    QD_UNROLL
    for (int j = 0; j < 4; j++) {
        const uint32_t v = (uint32_t)qd_ld4(w + 4 + 4 * j);
        sumi = qd_dp4a((int)(v & 0x0f0f0f0fu), qd_a4(x + 4 * j), sumi);
        sumi = qd_dp4a((int)((v >> 4) & 0x0f0f0f0fu), qd_a4(x + 16 + 4 * j), sumi);
    }
    return (qd_h2f(qd_u16(w)) * ad[2 * u]) * (float)sumi + qd_h2f(qd_u16(w + 2)) * ad[2 * u + 1];
}

static QD float qd_dot_q8_0(const uint8_t *row, int u, const int8_t *a, const float *ad) {
    const uint8_t *w = row + 34 * u;
    const int8_t *x = a + 32 * u;
    int sumi = 0;
    QD_UNROLL
    for (int j = 0; j < 8; j++) sumi = qd_dp4a(qd_ld4(w + 2 + 4 * j), qd_a4(x + 4 * j), sumi);
    return (qd_h2f(qd_u16(w)) * ad[u]) * (float)sumi;
}

/* Q4_K's 6-bit scale and min of part s from the 12 packed bytes. */
static QD void qd_q4_K_scale(const uint8_t *q, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = q[s] & 63;
        *mn = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
        *mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

static QD float qd_dot_q4_K(const uint8_t *row, int u, const int8_t *a, const float *ad) {
    const int b = u >> 3, s = u & 7;
    const uint8_t *w = row + 144 * b;
    const uint8_t *qb = w + 16 + 32 * (s >> 1);
    const int shift = (s & 1) * 4;
    const int8_t *x = a + 32 * u;
    int sub = 0, suma = 0;
    QD_UNROLL
    for (int j = 0; j < 8; j++) {
        const uint32_t v = ((uint32_t)qd_ld4(qb + 4 * j) >> shift) & 0x0f0f0f0fu;
        const int xa = qd_a4(x + 4 * j);
        sub = qd_dp4a((int)v, xa, sub);
        suma = qd_dp4a(0x01010101, xa, suma);
    }
    int sc, mn;
    qd_q4_K_scale(w + 4, s, &sc, &mn);
    const float dd = ad[b] * qd_h2f(qd_u16(w)), dm = -ad[b] * qd_h2f(qd_u16(w + 2));
    return dd * (float)(sc * sub) + dm * (float)(mn * suma);
}

static QD float qd_dot_q6_K(const uint8_t *row, int u, const int8_t *a, const float *ad) {
    const int b = u >> 3, j = u & 7;
    const int c = j >> 2, quarter = j & 3;
    const uint8_t *w = row + 210 * b;
    const uint8_t *ql = w + 64 * c + 32 * (quarter & 1), *qh = w + 128 + 32 * c;
    const int8_t *scales = (const int8_t *)(w + 192);
    const int8_t *x = a + 32 * u;
    int sub[2] = {0, 0}, suma[2] = {0, 0};
    QD_UNROLL
    for (int k = 0; k < 8; k++) {
        uint32_t lo = (uint32_t)qd_ld4(ql + 4 * k);
        if (quarter >= 2) lo >>= 4;
        lo &= 0x0f0f0f0fu;
        const uint32_t hi = ((uint32_t)qd_ld4(qh + 4 * k) >> (2 * quarter)) & 0x03030303u;
        const int q = (int)(lo | (hi << 4)); /* 0..63 per byte */
        const int xa = qd_a4(x + 4 * k);
        sub[k >> 2] = qd_dp4a(q, xa, sub[k >> 2]);
        suma[k >> 2] = qd_dp4a(0x01010101, xa, suma[k >> 2]);
    }
    const int sumi = scales[2 * j] * (sub[0] - 32 * suma[0]) +
                     scales[2 * j + 1] * (sub[1] - 32 * suma[1]);
    return (ad[b] * qd_h2f(qd_u16(w + 208))) * (float)sumi;
}

/* ---- element i of a row, dequantized with the CPU's arithmetic (kernels/cpu/quant.c,
 * itself gguf's), qd_mul and qd_add keeping the multiply and add apart. For the embedding
 * lookup and the F16 copy of prefill. ---- */

static QD float qd_dequant(int type, const uint8_t *row, int i) {
    switch (type) {
    case 0: { /* F32 */
        float f;
        memcpy(&f, row + 4 * (int64_t)i, 4);
        return f;
    }
    case 1: return qd_h2f(qd_u16(row + 2 * (int64_t)i));   /* F16 */
    case 30: return qd_bf2f(qd_u16(row + 2 * (int64_t)i)); /* BF16 */
    case 2: {                                              /* Q4_0 */
        const uint8_t *w = row + 18 * (i / 32);
        const int j = i % 32;
        const int q = j < 16 ? (w[2 + j] & 0x0f) : (w[2 + j - 16] >> 4);
        return qd_mul(qd_h2f(qd_u16(w)), (float)(q - 8));
    }
    case 3: { /* Q4_1 */
        const uint8_t *w = row + 20 * (i / 32);
        const int j = i % 32;
        const int q = j < 16 ? (w[4 + j] & 0x0f) : (w[4 + j - 16] >> 4);
        return qd_add(qd_mul(qd_h2f(qd_u16(w)), (float)q), qd_h2f(qd_u16(w + 2)));
    }
    case 240: { /* F8_E4M3_S32 (FP8 checkpoints): e4m3(q) * d, d an f32 */
        const uint8_t *w = row + 36 * (i / 32);
        float d;
        memcpy(&d, w, 4);
        return qd_mul(qd_e4m3(w[4 + i % 32]), d);
    }
    case 241: { /* I4_S32 (INT4 checkpoints): ((float)q - z) * d, d and z f32 */
        const uint8_t *w = row + 24 * (i / 32);
        const int j = i % 32;
        float d, z;
        memcpy(&d, w, 4);
        memcpy(&z, w + 4, 4);
        const int q = j < 16 ? (w[8 + j] & 0x0f) : (w[8 + j - 16] >> 4);
        return qd_mul(qd_add((float)q, -z), d);
    }
    case 8: { /* Q8_0 */
        const uint8_t *w = row + 34 * (i / 32);
        return qd_mul((float)(int8_t)w[2 + i % 32], qd_h2f(qd_u16(w)));
    }
    case 12: { /* Q4_K */
        const uint8_t *w = row + 144 * (i / 256);
        const int e = i % 256, s = e / 32, j = e % 32;
        int sc, mn;
        qd_q4_K_scale(w + 4, s, &sc, &mn);
        const float dl = qd_mul(qd_h2f(qd_u16(w)), (float)sc),
                    ml = qd_mul(qd_h2f(qd_u16(w + 2)), (float)mn);
        const int q = (w[16 + 32 * (s / 2) + j] >> ((s & 1) * 4)) & 0x0f;
        return qd_add(qd_mul(dl, (float)q), -ml);
    }
    case 14: { /* Q6_K */
        const uint8_t *w = row + 210 * (i / 256);
        const int e = i % 256, c = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t lo = w[64 * c + l + 32 * (quarter & 1)];
        const int low4 = quarter < 2 ? (lo & 0x0f) : (lo >> 4);
        const int high2 = (w[128 + 32 * c + l] >> (2 * quarter)) & 3;
        const float d = qd_h2f(qd_u16(w + 208));
        return qd_mul(qd_mul(d, (float)((const int8_t *)(w + 192))[e / 16]),
                      (float)((low4 | (high2 << 4)) - 32));
    }
    }
    return 0.0f;
}

#endif
