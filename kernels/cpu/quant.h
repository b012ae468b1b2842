/* Weight block layouts as in GGUF files, fp16/bf16 conversion, activation quantization the
 * way ggml's CPU backend does it (Q8_0, Q8_1, Q8_K) and the portable scalar dot products.
 * Internal to kernels/cpu (matmul.c, matmul_avx2.c and their tests); pure functions. */
#ifndef TPD_CPU_QUANT_H
#define TPD_CPU_QUANT_H

#include <stdint.h>
#include <string.h>
#include "../../util/half.h"

/* Block layouts (byte offsets; blocks are packed back to back and only 2-byte aligned, so
 * the code reads them through these offsets and memcpy, never through struct casts):
 *   Q4_0  18 B: f16 d | 16 B nibbles; low nibble of byte j = element j, high = element j+16;
 *               value (q - 8) * d
 *   Q4_1  20 B: f16 d | f16 m | 16 B nibbles as Q4_0; value q * d + m
 *   Q8_0  34 B: f16 d | 32 x int8; value q * d
 *   Q4_K 144 B: f16 d | f16 dmin | 12 B packed 6-bit (scale, min) x 8 | 128 B nibbles. Sub-block
 *               s (32 elements) = nibbles of bytes 32*(s/2).. : low for even s, high for odd;
 *               value d * sc[s] * q - dmin * m[s]
 *   Q6_K 210 B: 128 B ql (low 4 bits) | 64 B qh (high 2 bits) | 16 x int8 scales | f16 d;
 *               value d * scales[e/16] * (q - 32)
 *   F8_E4M3_S32 36 B: f32 d | 32 E4M3 codes (util/fp8.h); value e4m3(q) * d. Weights only,
 *               from FP8 checkpoints; activations stay f32 (ACT_F32: weight-only math)
 *   I4_S32 24 B: f32 d | f32 z | 16 B nibbles (element e: byte e % 16, low half for e < 16,
 *               high half for e >= 16); value (q - z) * d. Weights only, from INT4
 *               checkpoints (model/int4w.h); activations stay f32 */
enum {
    QK = 32,    /* elements per Q4_0 / Q4_1 / Q8_0 block and per Q8_0 / Q8_1 activation block */
    QK_K = 256, /* elements per K-quant super-block */
};

static inline uint16_t load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* fp16 / bf16 conversions: util/half.h */

/* ---- activations prepared for one cpu_matmul call ----
 * Token t's values start at qs + t*cols, d + t*nb*dstride, bsums + t*nb*16 and xr + t*cols,
 * where nb = cols / block and dstride is 2 for Q8_1 (d, s pairs) and 1 otherwise. */
enum act_kind {
    ACT_F32,   /* F32 weights: the caller's x is used as is */
    ACT_F16,   /* F16 weights: x rounded to fp16 (kept as f32 in xr) */
    ACT_BF16,  /* BF16 weights: x rounded to bf16 (kept as f32 in xr) */
    ACT_Q8_0,  /* Q4_0 / Q8_0 weights: 32-blocks, d = fp16(amax/127) */
    ACT_Q8_1,  /* Q4_1 weights: Q8_0 plus s = fp16(d * sum q) */
    ACT_Q8_K,  /* Q4_K / Q6_K weights: 256-blocks, f32 d, int16 sums of 16 quants */
    ACT_I16X2, /* I4_S32 weights on the AVX2 path, T < 4: each 32-block of x as
                * s * (h + l / 2^15), h and l int16, s a power of two (quant_row_i16x2) */
};

struct act {
    enum act_kind kind;
    int T, cols, nb;
    const float *x; /* ACT_F32: caller's activations, row stride ldx */
    int64_t ldx;
    float *xr;      /* ACT_F16 / ACT_BF16: T*cols rounded values */
    int8_t *qs;     /* ACT_Q8_*: T*cols quants */
    float *d;       /* ACT_Q8_0 / ACT_Q8_K: T*nb scales; ACT_Q8_1: T*nb (d, s) pairs */
    int16_t *bsums; /* ACT_Q8_K: T*nb*16 */
    int16_t *hl;    /* ACT_I16X2: T*nb blocks of 32 h then 32 l; d holds T*nb (s, s / 2^15,
                     * sum of the block's represented values) triples */
};

/* Row quantizers (n a multiple of the block). The Q8_0 / Q8_1 rule is that of ggml's AVX2
 * quantize_row_q8_0 / q8_1 (the kernels llama.cpp runs on x86): d = amax/127 stored as
 * fp16, q = round-half-even(x * (127/amax)), s = fp16(d * sum q). matmul_avx2.c has
 * vector versions that give the same bits. Q8_K is ggml's quantize_row_q8_K_ref. */
void quant_row_q8_0(const float *x, int n, int8_t *qs, float *d);
void quant_row_q8_1(const float *x, int n, int8_t *qs, float *ds);
void quant_row_q8_K(const float *x, int n, int8_t *qs, float *d, int16_t *bsums);
void round_row_f16(const float *x, int n, float *out);
/* ACT_I16X2 (n a multiple of 32): per block s = 2^e with amax / s in [2^13, 2^14), h =
 * round(x / s) (exact: x / s is), l = round((x / s - h) * 2^15) in [-2^14, 2^14], so each
 * x_k is represented within 2^-16 s <= 2^-29 amax (f32 would round the products it meets
 * by 2^-24 |x_k|); s3 = (s, s / 2^15, f32(s * sum(h + l / 2^15))). A block with a non-finite
 * value gets s = NaN, so the products it meets are NaN as the f32 arithmetic's would be. */
void quant_row_i16x2(const float *x, int n, int16_t *hl, float *s3);
void round_row_bf16(const float *x, int n, float *out);

/* Dot product of one weight row (nb blocks) with one prepared activation row, scalar,
 * block by block in the order and rounding of ggml's reference vec_dot. */
float dot_q4_0_q8_0(const uint8_t *w, const int8_t *qs, const float *d, int nb);
float dot_q4_1_q8_1(const uint8_t *w, const int8_t *qs, const float *ds, int nb);
float dot_q8_0_q8_0(const uint8_t *w, const int8_t *qs, const float *d, int nb);
float dot_q4_K_q8_K(const uint8_t *w, const int8_t *qs, const float *d, const int16_t *bsums,
                    int nb);
float dot_q6_K_q8_K(const uint8_t *w, const int8_t *qs, const float *d, const int16_t *bsums,
                    int nb);
float dot_f32(const float *w, const float *x, int n);
float dot_f16(const uint8_t *w, const float *xr, int n);
float dot_bf16(const uint8_t *w, const float *xr, int n);
float dot_f8_s32(const uint8_t *w, const float *x, int nb);
float dot_i4_s32(const uint8_t *w, const float *x, int nb);

/* Element o (0..31) of the I4_S32 block at b, exactly: (q - z) * d in f32. */
static inline float i4_value(const uint8_t *b, int o) {
    float d, z;
    memcpy(&d, b, sizeof d);
    memcpy(&z, b + 4, sizeof z);
    const int q = o < 16 ? b[8 + o] & 15 : b[8 + o - 16] >> 4;
    return ((float)q - z) * d;
}

/* Q4_K's 6-bit packed scales: sc[8] and mn[8] from the 12 scale bytes. */
void q4_K_scales(const uint8_t *packed, uint8_t *sc, uint8_t *mn);

#endif
