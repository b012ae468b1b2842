#include "quant.h"

#include "../../util/fp8.h"

#include <math.h>

#include "../../util/dtype.h"
#include "../../util/fatal.h"

/* This file is compiled without -mfma on purpose: a fused multiply-add would change the
 * rounding of cpu_dequant_row (which must equal gguf's numpy arithmetic bit for bit) and of
 * the scalar dots (which follow ggml's mul-then-add). */

/* ---- fp16 / bf16 ---- */

static inline float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

/* ---- activation quantization ---- */

static void quant_block_q8(const float *x, int8_t *qs, float *d_out, int *sum_out, float *d32) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; j++) {
        int q = (int)nearbyintf(x[j] * id);
        qs[j] = (int8_t)q;
        sum += q;
    }
    *d_out = f16_round(d);
    *sum_out = sum;
    *d32 = d;
}

void quant_row_q8_0(const float *x, int n, int8_t *qs, float *d) {
    for (int b = 0; b < n / QK; b++) {
        int sum;
        float d32;
        quant_block_q8(x + b * QK, qs + b * QK, &d[b], &sum, &d32);
    }
}

void quant_row_q8_1(const float *x, int n, int8_t *qs, float *ds) {
    for (int b = 0; b < n / QK; b++) {
        int sum;
        float d32;
        quant_block_q8(x + b * QK, qs + b * QK, &ds[2 * b], &sum, &d32);
        ds[2 * b + 1] = f16_round(d32 * (float)sum);
    }
}

/* ggml's nearest_int: round half to even through the float adder, valid for |v| < 2^22. */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void quant_row_q8_K(const float *x, int n, int8_t *qs, float *d, int16_t *bsums) {
    for (int b = 0; b < n / QK_K; b++, x += QK_K, qs += QK_K, bsums += QK_K / 16) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(qs, 0, QK_K);
            memset(bsums, 0, QK_K / 16 * sizeof *bsums);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += qs[g * 16 + j];
            bsums[g] = (int16_t)sum;
        }
        d[b] = 1 / iscale;
    }
}

void round_row_f16(const float *x, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = f16_round(x[i]);
}

void round_row_bf16(const float *x, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

/* ---- scalar dot products ---- */

float dot_q4_0_q8_0(const uint8_t *w, const int8_t *qs, const float *d, int nb) {
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++, w += 18, qs += QK) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((w[2 + j] & 0x0f) - 8) * qs[j];
            sumi += ((w[2 + j] >> 4) - 8) * qs[j + 16];
        }
        sumf += (f16_to_f32(load_u16(w)) * d[b]) * (float)sumi;
    }
    return sumf;
}

float dot_q4_1_q8_1(const uint8_t *w, const int8_t *qs, const float *ds, int nb) {
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++, w += 20, qs += QK) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (w[4 + j] & 0x0f) * qs[j];
            sumi += (w[4 + j] >> 4) * qs[j + 16];
        }
        sumf += (f16_to_f32(load_u16(w)) * ds[2 * b]) * (float)sumi +
                f16_to_f32(load_u16(w + 2)) * ds[2 * b + 1];
    }
    return sumf;
}

float dot_q8_0_q8_0(const uint8_t *w, const int8_t *qs, const float *d, int nb) {
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++, w += 34, qs += QK) {
        const int8_t *wq = (const int8_t *)(w + 2);
        int sumi = 0;
        for (int j = 0; j < QK; j++) sumi += wq[j] * qs[j];
        sumf += (f16_to_f32(load_u16(w)) * d[b]) * (float)sumi;
    }
    return sumf;
}

void q4_K_scales(const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Per super-block: an int32 sum of sc * q4 * q8 times d, and the mins through the
 * activation's group sums times -dmin, each accumulated apart as ggml's AVX2 kernel does. */
float dot_q4_K_q8_K(const uint8_t *w, const int8_t *qs, const float *d, const int16_t *bsums,
                    int nb) {
    float sumf = 0.0f, summ = 0.0f;
    for (int b = 0; b < nb; b++, w += 144, qs += QK_K, bsums += 16) {
        uint8_t sc[8], mn[8];
        q4_K_scales(w + 4, sc, mn);
        const uint8_t *q4 = w + 16;
        int sumi = 0, sumins = 0;
        for (int s = 0; s < 8; s++) {
            const uint8_t *qb = q4 + 32 * (s / 2);
            const int shift = (s & 1) * 4;
            int sub = 0;
            for (int j = 0; j < 32; j++) sub += ((qb[j] >> shift) & 0x0f) * qs[32 * s + j];
            sumi += sc[s] * sub;
            sumins += mn[s] * (bsums[2 * s] + bsums[2 * s + 1]);
        }
        const float dd = d[b] * f16_to_f32(load_u16(w));
        const float dm = -d[b] * f16_to_f32(load_u16(w + 2));
        sumf += dd * (float)sumi;
        summ += dm * (float)sumins;
    }
    return sumf + summ;
}

float dot_q6_K_q8_K(const uint8_t *w, const int8_t *qs, const float *d, const int16_t *bsums,
                    int nb) {
    (void)bsums;
    float sumf = 0.0f;
    for (int b = 0; b < nb; b++, w += 210, qs += QK_K) {
        const int8_t *scales = (const int8_t *)(w + 192);
        int sumi = 0;
        for (int c = 0; c < 2; c++) { /* 128 elements: 64 ql bytes, 32 qh bytes, 8 scales */
            const uint8_t *ql = w + 64 * c, *qh = w + 128 + 32 * c;
            const int8_t *y = qs + 128 * c;
            int sub[8] = {0}; /* per 16 elements: group l/16 + 2 * quarter */
            for (int l = 0; l < 32; l++) {
                const int g = l / 16;
                sub[g + 0] += (((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32) * y[l];
                sub[g + 2] += (((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32) * y[l + 32];
                sub[g + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * y[l + 64];
                sub[g + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * y[l + 96];
            }
            for (int g = 0; g < 8; g++) sumi += scales[8 * c + g] * sub[g];
        }
        sumf += (d[b] * f16_to_f32(load_u16(w + 208))) * (float)sumi;
    }
    return sumf;
}

float dot_f32(const float *w, const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += w[i] * x[i];
    return s;
}

float dot_f16(const uint8_t *w, const float *xr, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += f16_to_f32(load_u16(w + 2 * i)) * xr[i];
    return s;
}

float dot_bf16(const uint8_t *w, const float *xr, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += bf16_to_f32(load_u16(w + 2 * i)) * xr[i];
    return s;
}

/* F8_E4M3_S32 (quant.h): each code through util/fp8.h's exact decode, times its block's
 * scale, then the product with x, accumulated in f32. */
float dot_f8_s32(const uint8_t *w, const float *x, int nb) {
    float s = 0.0f;
    for (int b = 0; b < nb; b++, w += 36, x += QK) {
        float d;
        memcpy(&d, w, sizeof d);
        for (int j = 0; j < QK; j++) s += fp8_e4m3_to_f32(w[4 + j]) * d * x[j];
    }
    return s;
}

static void dequant_f8_s32(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 36, y += QK) {
        float d;
        memcpy(&d, w, sizeof d);
        for (int j = 0; j < QK; j++) y[j] = fp8_e4m3_to_f32(w[4 + j]) * d;
    }
}

void quant_row_i16x2(const float *x, int n, int16_t *hl, float *s3) {
    for (int b = 0; b < n / QK; b++, x += QK, hl += 2 * QK, s3 += 3) {
        float amax = 0.0f;
        for (int k = 0; k < QK; k++) amax = fmaxf(amax, fabsf(x[k]));
        int e = 0;
        if (!isfinite(amax) || amax != amax) {
            memset(hl, 0, 2 * QK * sizeof *hl);
            s3[0] = s3[1] = s3[2] = NAN;
            continue;
        }
        if (amax > 0.0f) (void)frexpf(amax, &e); /* amax = m 2^e, m in [0.5, 1) */
        const int sh = 14 - e;                   /* x * 2^sh: |.| < 2^14 */
        const double p = ldexp(1.0, sh);
        double sum = 0.0;
        for (int k = 0; k < QK; k++) {
            const float u = (float)(x[k] * p); /* exact but for values under 2^-120 amax */
            const float h = nearbyintf(u);
            const float l = nearbyintf((u - h) * 32768.0f); /* u - h exact (|u - h| <= 0.5) */
            hl[k] = (int16_t)h;
            hl[QK + k] = (int16_t)l;
            sum += (double)h + (double)l / 32768.0;
        }
        s3[0] = ldexpf(1.0f, -sh);
        s3[1] = ldexpf(1.0f, -sh - 15);
        s3[2] = (float)ldexp(sum, -sh);
    }
}

/* I4_S32 (quant.h): each value exactly (i4_value), times x, accumulated in f32. */
float dot_i4_s32(const uint8_t *w, const float *x, int nb) {
    float s = 0.0f;
    for (int b = 0; b < nb; b++, w += 24, x += QK)
        for (int j = 0; j < QK; j++) s += i4_value(w, j) * x[j];
    return s;
}

static void dequant_i4_s32(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 24, y += QK)
        for (int j = 0; j < QK; j++) y[j] = i4_value(w, j);
}

/* ---- dequantization: the arithmetic of gguf.quants.dequantize, operation for operation ---- */

static void dequant_q4_0(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 18, y += QK) {
        const float d = f16_to_f32(load_u16(w));
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((w[2 + j] & 0x0f) - 8);
            y[j + 16] = d * (float)((w[2 + j] >> 4) - 8);
        }
    }
}

static void dequant_q4_1(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 20, y += QK) {
        const float d = f16_to_f32(load_u16(w)), m = f16_to_f32(load_u16(w + 2));
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(w[4 + j] & 0x0f) + m;
            y[j + 16] = d * (float)(w[4 + j] >> 4) + m;
        }
    }
}

static void dequant_q8_0(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 34, y += QK) {
        const float d = f16_to_f32(load_u16(w));
        for (int j = 0; j < QK; j++) y[j] = (float)(int8_t)w[2 + j] * d;
    }
}

static void dequant_q4_K(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 144, y += QK_K) {
        const float d = f16_to_f32(load_u16(w)), dmin = f16_to_f32(load_u16(w + 2));
        uint8_t sc[8], mn[8];
        q4_K_scales(w + 4, sc, mn);
        for (int s = 0; s < 8; s++) {
            const float dl = d * (float)sc[s], ml = dmin * (float)mn[s];
            const uint8_t *qb = w + 16 + 32 * (s / 2);
            const int shift = (s & 1) * 4;
            for (int j = 0; j < 32; j++) y[32 * s + j] = dl * (float)((qb[j] >> shift) & 0x0f) - ml;
        }
    }
}

static void dequant_q6_K(const uint8_t *w, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, w += 210, y += QK_K) {
        const uint8_t *ql = w, *qh = w + 128;
        const int8_t *scales = (const int8_t *)(w + 192);
        const float d = f16_to_f32(load_u16(w + 208));
        for (int c = 0; c < 2; c++) {
            for (int l = 0; l < 32; l++) {
                const int q1 = ((ql[64 * c + l] & 0x0f) | (((qh[32 * c + l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[64 * c + l + 32] & 0x0f) | (((qh[32 * c + l] >> 2) & 3) << 4)) -
                               32;
                const int q3 = ((ql[64 * c + l] >> 4) | (((qh[32 * c + l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[64 * c + l + 32] >> 4) | (((qh[32 * c + l] >> 6) & 3) << 4)) -
                               32;
                float *yc = y + 128 * c;
                yc[l] = (d * (float)scales[(128 * c + l) / 16]) * (float)q1;
                yc[l + 32] = (d * (float)scales[(128 * c + l + 32) / 16]) * (float)q2;
                yc[l + 64] = (d * (float)scales[(128 * c + l + 64) / 16]) * (float)q3;
                yc[l + 96] = (d * (float)scales[(128 * c + l + 96) / 16]) * (float)q4;
            }
        }
    }
}

void cpu_dequant_row(enum dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *w = src;
    const int be = dtype_block_elems(t);
    if (be <= 0 || n < 0 || n % be)
        FATAL("cpu_dequant_row: %lld elements of %s", (long long)n, dtype_name(t));
    switch (t) {
    case DT_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case DT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(load_u16(w + 2 * i));
        return;
    case DT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(load_u16(w + 2 * i));
        return;
    case DT_Q4_0: dequant_q4_0(w, dst, n / QK); return;
    case DT_Q4_1: dequant_q4_1(w, dst, n / QK); return;
    case DT_Q8_0: dequant_q8_0(w, dst, n / QK); return;
    case DT_Q4_K: dequant_q4_K(w, dst, n / QK_K); return;
    case DT_Q6_K: dequant_q6_K(w, dst, n / QK_K); return;
    case DT_F8_E4M3_S32: dequant_f8_s32(w, dst, n / QK); return;
    case DT_I4_S32: dequant_i4_s32(w, dst, n / QK); return;
    }
}
