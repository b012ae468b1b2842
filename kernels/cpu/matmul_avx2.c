#include "matmul_avx2.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/fatal.h"
#include "../../util/fp8.h"

/* Tiles: each kernel computes a few weight rows against NT tokens (NT = 1 for decode, 2 for
 * prefill) so that a weight block is loaded and unpacked once for all of them, and the
 * quantized activation block once for all the rows. Integer dots use maddubs (unsigned x
 * signed bytes -> int16 pairs) and madd (int16 pairs -> int32) (Q8_0: madd of both sides
 * widened to int16), then one FMA per block with the product of the two scales: the
 * arithmetic of ggml's AVX2 vec_dot kernels, exact integers, floats rounded the same way up
 * to summation order.
 *
 * Q4_0 / Q4_1 pack two rows into one register: the 16 nibble bytes of row A in the low lane
 * and of row B in the high lane, so one shift + two ands unpack two rows, and the activation
 * halves are broadcast to both lanes. The accumulator then holds row A in lanes 0-3 and row B
 * in lanes 4-7. Rows past the end of the range alias the last valid row (computed, not
 * stored), and so do tokens past T. */

#define INLINE static inline __attribute__((always_inline))

/* matmul_avxvnni.c compiles this file again with TPD_MM_VNNI and AVX-VNNI enabled: the tiles
 * and their dispatch (mm_rows_avxvnni) then take 4-byte dot products with vpdpbusd, which
 * sums unsigned x signed byte products straight into int32 lanes. maddubs + madd add the
 * same products, in int16 pairs that never saturate for 4-bit weights (at most 2 x 15 x 128
 * a pair), so both give the same int32 sums and the same floats after them. */
/* Tokens a tile serves at most: 4 with VNNI (its dot products leave registers for them), 2
 * otherwise. A token's arithmetic is the same in a tile of any size. */
#ifdef TPD_MM_VNNI
#define MAX_NT 4
#else
#define MAX_NT 2
#endif

#if defined(TPD_MM_AVX512)
#define MM_ROWS mm_rows_avx512
#elif defined(TPD_MM_VNNI)
#define MM_ROWS mm_rows_avxvnni
#else
#define MM_ROWS mm_rows_avx2
#endif

#ifdef TPD_MM_AVX512
/* sum over each 4-byte group of lo * yl + hi * yh, as int32 lanes: the EVEX vpdpbusd of
 * AVX512-VNNI + VL, which AMD Zen 4 has without AVX-VNNI's VEX form */
INLINE __m256i dot2_u8s8(__m256i lo, __m256i yl, __m256i hi, __m256i yh, __m256i ones) {
    (void)ones;
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, yl), hi, yh);
}
#elif defined(TPD_MM_VNNI)
/* the same with AVX-VNNI's VEX vpdpbusd */
INLINE __m256i dot2_u8s8(__m256i lo, __m256i yl, __m256i hi, __m256i yh, __m256i ones) {
    (void)ones;
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, yl), hi, yh);
}
#else
INLINE __m256i dot2_u8s8(__m256i lo, __m256i yl, __m256i hi, __m256i yh, __m256i ones) {
    return _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, yl), _mm256_maddubs_epi16(hi, yh)), ones);
}
#endif

INLINE __m128i ld128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m256i bcast128(const void *p) { return _mm256_broadcastsi128_si256(ld128(p)); }
INLINE int ld32(const void *p) {
    int v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE short ld16(const void *p) {
    short v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE float f16(const void *p) { return _cvtsh_ss((unsigned short)ld16(p)); }

/* The weights stream from memory once per call. Four interleaved row streams of a few
 * hundred bytes each defeat the hardware prefetcher (measured: ~7 GB/s instead of ~15 per
 * core), so the tiles prefetch the matrix as one linear stream: at block b of a 4-row group
 * starting at w0, w0 + 3 * row_bytes + PF_DIST + 4 * (bytes of b blocks), i.e. PF_DIST ahead
 * of the last row of the group (whose data the previous group's prefetches must already
 * cover). Prefetches past the end of the matrix are harmless. */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
INLINE void prefetch_span(const uint8_t *p, const int bytes) {
#pragma GCC unroll 4
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

INLINE float hsum128(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}
INLINE float hsum256(__m256 v) {
    return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}
INLINE int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* Two pair accumulators (A|B, C|D) -> [A, B, C, D]. */
INLINE __m128 pairs_sum(__m256 ab, __m256 cd) {
    __m256 h = _mm256_hadd_ps(ab, cd); /* [A01 A23 C01 C23 | B01 B23 D01 D23] */
    h = _mm256_hadd_ps(h, h);          /* [A C A C | B D B D] */
    return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Four row accumulators -> [sum r0, sum r1, sum r2, sum r3]. */
INLINE __m128 rows4_sum(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

INLINE void store_rows(float *y, __m128 v, int nr) {
    if (nr == 4) {
        _mm_storeu_ps(y, v);
        return;
    }
    float t[4];
    _mm_storeu_ps(t, v);
    for (int i = 0; i < nr; i++) y[i] = t[i];
}

/* Row pointers of a 4-row group starting at r with nr valid rows. */
INLINE void group_rows(const struct mm_job *j, int r, int nr, const uint8_t *w[4]) {
    for (int i = 0; i < 4; i++) w[i] = j->W + (int64_t)(r + (i < nr ? i : nr - 1)) * j->row_bytes;
}
INLINE int clamp_token(int t0, int t, int nt) { return t0 + (t < nt ? t : nt - 1); }

/* ---------------------------------------------------------------- Q4_1 x Q8_1 */

/* Block o of a 4-row group: wdm = [dA mA dB mB dC mC dD mD] (scales and mins), ab = the
 * nibble bytes of rows A | B, cd = those of C | D. */
INLINE void q4_1_block(const uint8_t *const w[4], int o, __m256 *wdm, __m256i *ab, __m256i *cd) {
    *wdm = _mm256_cvtph_ps(
        _mm_setr_epi32(ld32(w[0] + o), ld32(w[1] + o), ld32(w[2] + o), ld32(w[3] + o)));
    *ab = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(w[0] + o + 4)), ld128(w[1] + o + 4),
                                  1);
    *cd = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(w[2] + o + 4)), ld128(w[3] + o + 4),
                                  1);
}

INLINE void tile_q4_1(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const int8_t *q[MAX_NT];
    const float *ds[MAX_NT];
    __m256 acc0[MAX_NT], acc1[MAX_NT], ms[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        ds[t] = a->d + (int64_t)tt * a->nb * 2;
        acc0[t] = acc1[t] = ms[t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i iab = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
    const __m256i icd = _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6);
    for (int b = 0; b < a->nb; b++) {
        const int o = 20 * b;
        prefetch_span(pf + 4 * o, 80);
        __m256 wdm;
        __m256i ab, cd;
        q4_1_block(w, o, &wdm, &ab, &cd);
        const __m256i abl = _mm256_and_si256(ab, m4);
        const __m256i abh = _mm256_and_si256(_mm256_srli_epi16(ab, 4), m4);
        const __m256i cdl = _mm256_and_si256(cd, m4);
        const __m256i cdh = _mm256_and_si256(_mm256_srli_epi16(cd, 4), m4);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const __m256i yl = bcast128(q[t] + QK * b), yh = bcast128(q[t] + QK * b + 16);
            double dsv; /* the (d, s) pair of this activation block */
            memcpy(&dsv, ds[t] + 2 * b, sizeof dsv);
            /* [dA*d mA*s dB*d mB*s ...]: the odd lanes sum to the m*s terms */
            const __m256 p = _mm256_mul_ps(wdm, _mm256_castpd_ps(_mm256_set1_pd(dsv)));
            ms[t] = _mm256_add_ps(ms[t], p);
            acc0[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, iab),
                                      _mm256_cvtepi32_ps(dot2_u8s8(abl, yl, abh, yh, ones)),
                                      acc0[t]);
            acc1[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, icd),
                                      _mm256_cvtepi32_ps(dot2_u8s8(cdl, yl, cdh, yh, ones)),
                                      acc1[t]);
        }
    }
    const __m256i iodd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        const __m128 m = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(ms[t], iodd));
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r,
                   _mm_add_ps(pairs_sum(acc0[t], acc1[t]), m), nr);
    }
}

#ifdef TPD_MM_AVX512
/* Q4_1 on AVX-512 (matmul_avx512.c): the four rows' nibbles in one 512-bit register (row A in
 * lanes 0-3 ... row D in lanes 12-15), so a block takes two vpdpbusd a token, where the AVX2
 * tile takes four. Each lane does the AVX2 tile's arithmetic exactly: acc0's lanes are
 * lanes 0-7 here and acc1's lanes 8-15 (the same int32 sums, the same scale, one FMA a
 * block), and the sums at the end are the AVX2 tile's on those halves: the same bits. */
INLINE void tile_q4_1_512(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const int8_t *q[4];
    const float *ds[4];
    __m512 acc[4];
    __m256 ms[4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        ds[t] = a->d + (int64_t)tt * a->nb * 2;
        acc[t] = _mm512_setzero_ps();
        ms[t] = _mm256_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i iabcd = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    for (int b = 0; b < a->nb; b++) {
        const int o = 20 * b;
        prefetch_span(pf + 4 * o, 80);
        __m256 wdm;
        __m256i ab, cd;
        q4_1_block(w, o, &wdm, &ab, &cd);
        const __m512i abcd = _mm512_inserti64x4(_mm512_castsi256_si512(ab), cd, 1);
        const __m512i lo = _mm512_and_si512(abcd, m4),
                      hi = _mm512_and_si512(_mm512_srli_epi16(abcd, 4), m4);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const __m512i yl = _mm512_broadcast_i32x4(ld128(q[t] + QK * b));
            const __m512i yh = _mm512_broadcast_i32x4(ld128(q[t] + QK * b + 16));
            double dsv;
            memcpy(&dsv, ds[t] + 2 * b, sizeof dsv);
            const __m256 p = _mm256_mul_ps(wdm, _mm256_castpd_ps(_mm256_set1_pd(dsv)));
            ms[t] = _mm256_add_ps(ms[t], p);
            const __m512i sum = _mm512_dpbusd_epi32(
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, yl), hi, yh);
            acc[t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(iabcd, _mm512_castps256_ps512(p)),
                                     _mm512_cvtepi32_ps(sum), acc[t]);
        }
    }
    const __m256i iodd = _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7);
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        const __m256 acc0 = _mm512_castps512_ps256(acc[t]);
        const __m256 acc1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1));
        const __m128 m = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(ms[t], iodd));
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r, _mm_add_ps(pairs_sum(acc0, acc1), m), nr);
    }
}
#endif

/* ---------------------------------------------------------------- Q4_0 x Q8_0 */

INLINE void tile_q4_0(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const int8_t *q[MAX_NT];
    const float *dy[MAX_NT];
    __m256 acc0[MAX_NT], acc1[MAX_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        dy[t] = a->d + (int64_t)tt * a->nb;
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i eight = _mm256_set1_epi8(8);
    const __m256i iab = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m256i icd = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    for (int b = 0; b < a->nb; b++) {
        const int o = 18 * b;
        prefetch_span(pf + 4 * o, 72);
        const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(ld16(w[0] + o), ld16(w[1] + o),
                                                      ld16(w[2] + o), ld16(w[3] + o), 0, 0, 0, 0));
        const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(w[0] + o + 2)),
                                                   ld128(w[1] + o + 2), 1);
        const __m256i cd = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(w[2] + o + 2)),
                                                   ld128(w[3] + o + 2), 1);
        const __m256i abl = _mm256_and_si256(ab, m4);
        const __m256i abh = _mm256_and_si256(_mm256_srli_epi16(ab, 4), m4);
        const __m256i cdl = _mm256_and_si256(cd, m4);
        const __m256i cdh = _mm256_and_si256(_mm256_srli_epi16(cd, 4), m4);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const __m256i yl = bcast128(q[t] + QK * b), yh = bcast128(q[t] + QK * b + 16);
            const __m256 p = _mm256_castps128_ps256(_mm_mul_ps(wd, _mm_set1_ps(dy[t][b])));
#ifdef TPD_MM_VNNI
            /* sum (q - 8) * y = sum q * y - 8 * sum y, exactly, in int32 lanes */
            const __m256i c8 = dot2_u8s8(eight, yl, eight, yh, ones);
            const __m256i sab = _mm256_sub_epi32(dot2_u8s8(abl, yl, abh, yh, ones), c8);
            const __m256i scd = _mm256_sub_epi32(dot2_u8s8(cdl, yl, cdh, yh, ones), c8);
#else
            /* sum (q - 8) * y = sum q * y - 8 * sum y, exactly, in the same int16 lanes */
            const __m256i c8 = _mm256_add_epi16(_mm256_maddubs_epi16(eight, yl),
                                                _mm256_maddubs_epi16(eight, yh));
            const __m256i sab = _mm256_madd_epi16(
                _mm256_sub_epi16(
                    _mm256_add_epi16(_mm256_maddubs_epi16(abl, yl), _mm256_maddubs_epi16(abh, yh)),
                    c8),
                ones);
            const __m256i scd = _mm256_madd_epi16(
                _mm256_sub_epi16(
                    _mm256_add_epi16(_mm256_maddubs_epi16(cdl, yl), _mm256_maddubs_epi16(cdh, yh)),
                    c8),
                ones);
#endif
            acc0[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, iab), _mm256_cvtepi32_ps(sab),
                                      acc0[t]);
            acc1[t] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(p, icd), _mm256_cvtepi32_ps(scd),
                                      acc1[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r, pairs_sum(acc0[t], acc1[t]), nr);
    }
}

/* ---------------------------------------------------------------- Q8_0 x Q8_0 */

/* Signed x signed bytes: both sides are widened to int16 (vpmovsxbw, a shuffle-port uop)
 * and multiplied with madd, which leaves the two multiply ports fewer uops than ggml's
 * abs/sign + maddubs route; the products are exact either way. */
INLINE void tile_q8_0(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const int8_t *q[2];
    const float *dy[2];
    __m256 acc[4][2];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        dy[t] = a->d + (int64_t)tt * a->nb;
        for (int i = 0; i < 4; i++) acc[i][t] = _mm256_setzero_ps();
    }
    for (int b = 0; b < a->nb; b++) {
        const int o = 34 * b;
        prefetch_span(pf + 4 * o, 136);
        const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(ld16(w[0] + o), ld16(w[1] + o),
                                                      ld16(w[2] + o), ld16(w[3] + o), 0, 0, 0, 0));
        /* Scales go through memory so that each is a broadcast load, not a shuffle. */
        float sc[2][4] __attribute__((aligned(16)));
        __m256i ylo[2], yhi[2];
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            _mm_store_ps(sc[t], _mm_mul_ps(wd, _mm_set1_ps(dy[t][b])));
            ylo[t] = _mm256_cvtepi8_epi16(ld128(q[t] + QK * b));
            yhi[t] = _mm256_cvtepi8_epi16(ld128(q[t] + QK * b + 16));
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256i wlo = _mm256_cvtepi8_epi16(ld128(w[i] + o + 2));
            const __m256i whi = _mm256_cvtepi8_epi16(ld128(w[i] + o + 18));
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++) {
                const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(wlo, ylo[t]),
                                                   _mm256_madd_epi16(whi, yhi[t]));
                acc[i][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[t][i]), _mm256_cvtepi32_ps(s),
                                            acc[i][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r,
                   rows4_sum(acc[0][t], acc[1][t], acc[2][t], acc[3][t]), nr);
    }
}

/* ---------------------------------------------------------------- Q4_K x Q8_K */

INLINE __m256i scale_shuffle_k4(int i) {
    return _mm256_set1_epi16((short)((2 * i + 1) << 8 | 2 * i));
}

INLINE void tile_q4_K(const struct mm_job *j, int r, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w = j->W + (int64_t)r * j->row_bytes;
    const int8_t *q[2];
    const float *dy[2];
    const int16_t *bs[2];
    __m256 acc[2];
    __m128 accm[2];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        dy[t] = a->d + (int64_t)tt * a->nb;
        bs[t] = a->bsums + (int64_t)tt * a->nb * 16;
        acc[t] = _mm256_setzero_ps();
        accm[t] = _mm_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    for (int b = 0; b < a->nb; b++) {
        const uint8_t *x = w + 144 * b;
        prefetch_span(x + PF_DIST, 144);
        uint32_t u[4];
        memcpy(u, x + 4, 12);
        /* unpack to [sc0..sc7, m0..m7] (see q4_K_scales) */
        u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
        const uint32_t uaux = u[1] & kmask1;
        u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
        u[2] = uaux;
        u[0] &= kmask1;
        const __m256i mins_scales = _mm256_cvtepu8_epi16(
            _mm_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3]));
        const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(mins_scales));
        const __m128i mins = _mm256_extracti128_si256(mins_scales, 1);
        const float dx = f16(x), dmx = f16(x + 2);
        __m256i sumi[2];
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            const __m256i b16 = ld256(bs[t] + 16 * b);
            const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(b16),
                                               _mm256_extracti128_si256(b16, 1));
            const __m128i prod = _mm_madd_epi16(mins, q8s);
            accm[t] = _mm_fmadd_ps(_mm_set1_ps(-dy[t][b] * dmx), _mm_cvtepi32_ps(prod), accm[t]);
            sumi[t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i sl = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * k));
            const __m256i sh = _mm256_shuffle_epi8(scales, scale_shuffle_k4(2 * k + 1));
            const __m256i bits = ld256(x + 16 + 32 * k);
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++) {
                const int8_t *y = q[t] + QK_K * b + 64 * k;
                const __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, ld256(y)));
                const __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, ld256(y + 32)));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy[t][b] * dx), _mm256_cvtepi32_ps(sumi[t]),
                                     acc[t]);
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        j->y[(int64_t)(t0 + t) * j->ldy + r] = hsum256(acc[t]) + hsum128(accm[t]);
    }
}

/* ---------------------------------------------------------------- Q6_K x Q8_K */

/* Q6_K quants are unsigned 6-bit q with value q - 32: the kernel multiplies q (unsigned, as
 * maddubs wants) and takes 32 * sum_g scale_g * (sum of the activations of group g) off
 * once per super-block, from the Q8_K group sums. Integer arithmetic, so exactly ggml's sum.
 * Scales: sc16 holds the 16 int16 scales with the even groups in the low lane and the odd
 * ones in the high lane, so one in-lane shuffle gives [scale 2k x 8 | scale 2k+1 x 8], the
 * multipliers of 32-element chunk k (the madd lanes 0-7 are elements 0-15, 8-15 are 16-31). */
INLINE void tile_q6_K(const struct mm_job *j, int r, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const uint8_t *w = j->W + (int64_t)r * j->row_bytes;
    const int8_t *q[2];
    const float *dy[2];
    const int16_t *bs[2];
    __m256 acc[2];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        q[t] = a->qs + (int64_t)tt * a->cols;
        dy[t] = a->d + (int64_t)tt * a->nb;
        bs[t] = a->bsums + (int64_t)tt * a->nb * 16;
        acc[t] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    const __m256i m3_2 = _mm256_set1_epi8(3 << 2), m3_4 = _mm256_set1_epi8(3 << 4),
                  m3_6 = _mm256_set1_epi8((char)(3 << 6));
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    for (int b = 0; b < a->nb; b++) {
        const uint8_t *x = w + 210 * b;
        prefetch_span(x + PF_DIST, 210);
        const __m128i sc8 = ld128(x + 192);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, even_odd));
        const __m256i scn = _mm256_cvtepi8_epi16(sc8);
        const float dx = f16(x + 208);
        __m256i sumi[2];
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
            sumi[t] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(scn, ld256(bs[t] + 16 * b)), 5));
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            const __m256i hb = ld256(x + 128 + 32 * c);
            const __m256i b1 = ld256(x + 64 * c), b2 = ld256(x + 64 * c + 32);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                __m256i qq;
                switch (i) { /* low 4 bits | high 2 bits << 4 */
                case 0:
                    qq = _mm256_or_si256(_mm256_and_si256(b1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
                    break;
                case 1:
                    qq = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(hb, m3_2), 2));
                    break;
                case 2:
                    qq = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                         _mm256_and_si256(hb, m3_4));
                    break;
                default:
                    qq = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                         _mm256_srli_epi16(_mm256_and_si256(hb, m3_6), 2));
                    break;
                }
                const int k = 4 * c + i;
                const __m256i s16 = _mm256_shuffle_epi8(
                    sc16, _mm256_set1_epi16((short)((2 * k + 1) << 8 | 2 * k)));
#pragma GCC unroll 2
                for (int t = 0; t < NT; t++) {
                    const __m256i p = _mm256_maddubs_epi16(qq, ld256(q[t] + QK_K * b + 32 * k));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s16, p));
                }
            }
        }
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dy[t][b] * dx), _mm256_cvtepi32_ps(sumi[t]),
                                     acc[t]);
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        j->y[(int64_t)(t0 + t) * j->ldy + r] = hsum256(acc[t]);
    }
}

/* ---------------------------------------------- F32 / F16 / BF16 / F8_E4M3_S32 / I4_S32 */

/* Eight E4M3 codes as 2^-8 times their values, exactly: each code's magnitude bits shifted
 * into an F16's exponent and mantissa (<< 7) and its sign into the F16's sign make that
 * F16, subnormal codes included (F16 subnormals, which vcvtph2ps widens without the
 * microcode assists that f32 denormals would cost). */
INLINE __m256 f8x8_raw(const uint8_t *q) {
    /* code << 7 puts the sign on bit 14; adding bit 14 to itself moves it to bit 15 */
    const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)q);
    const __m128i v = _mm_slli_epi16(_mm_cvtepu8_epi16(b), 7);
    return _mm256_cvtph_ps(_mm_add_epi16(v, _mm_and_si128(v, _mm_set1_epi16(0x4000))));
}

/* The F8 tiles' fast case: d * 2^8 is exact for |d| < 2^100 */
#define F8_SCALE_FAST 0x1p100f

/* Eight codes times their block's scale d, as the scalar decode, with one f32 rounding:
 * one multiply by d * 2^8 where that is exact, else by 2^8 (exact) and d. */
INLINE __m256 f8x8(const uint8_t *q, float d) {
    const __m256 f = f8x8_raw(q);
    if (fabsf(d) < F8_SCALE_FAST) return _mm256_mul_ps(f, _mm256_set1_ps(d * 0x1p8f));
    return _mm256_mul_ps(_mm256_mul_ps(f, _mm256_set1_ps(0x1p8f)), _mm256_set1_ps(d));
}

/* FT_F8: F8_E4M3_S32 blocks (f32 activations); FT_I4: I4_S32 blocks, decoded into f32 by
 * rows_decoded only (fewer tokens take tile_i4) */
enum ftype { FT_F32, FT_F16, FT_BF16, FT_F8, FT_I4 };

/* Eight I4_S32 values from element o (a multiple of 8) of the block at b: the nibbles
 * (low halves of bytes 0..15 for elements 0..15, high halves for 16..31) widened to f32,
 * minus the zero point, times the scale: the scalar decode's operations, so its bits. */
INLINE __m256 i4x8(const uint8_t *b, int o) {
    float d, z;
    memcpy(&d, b, sizeof d);
    memcpy(&z, b + 4, sizeof z);
    const __m128i raw = _mm_loadl_epi64((const __m128i *)(const void *)(b + 8 + (o & 15)));
    __m256i v = _mm256_cvtepu8_epi32(raw);
    if (o & 16) v = _mm256_srli_epi32(v, 4);
    v = _mm256_and_si256(v, _mm256_set1_epi32(15));
    return _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(z)),
                         _mm256_set1_ps(d));
}

INLINE float f8_scale(const uint8_t *w, int k) {
    float d;
    memcpy(&d, w + 36 * (k >> 5), sizeof d);
    return d;
}

INLINE __m256 load8(const uint8_t *w, int k, enum ftype ft) {
    switch (ft) {
    case FT_F32: return _mm256_loadu_ps((const float *)(const void *)w + k);
    case FT_F16: return _mm256_cvtph_ps(ld128(w + 2 * k));
    case FT_F8: /* each 8-code group is decoded and scaled once for the tile's NT tokens */
        return f8x8(w + 36 * (k >> 5) + 4 + (k & 31), f8_scale(w, k));
    case FT_I4: return i4x8(w + 24 * (k >> 5), k & 31);
    case FT_BF16:
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128(w + 2 * k)), 16));
    }
}

INLINE float load1(const uint8_t *w, int k, enum ftype ft) {
    switch (ft) {
    case FT_F32: {
        float f;
        memcpy(&f, w + 4 * k, sizeof f);
        return f;
    }
    case FT_F16: return f16(w + 2 * k);
    case FT_F8: return fp8_e4m3_to_f32(w[36 * (k >> 5) + 4 + (k & 31)]) * f8_scale(w, k);
    case FT_I4: return i4_value(w + 24 * (k >> 5), k & 31);
    case FT_BF16:
    default: return bf16_to_f32((uint16_t)ld16(w + 2 * k));
    }
}

INLINE void tile_float(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT,
                       enum ftype ft) {
    const struct act *a = &j->a;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const float *x[2];
    __m256 acc[4][2];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        x[t] = ft == FT_F32 || ft == FT_F8 ? a->x + (int64_t)tt * a->ldx
                                           : a->xr + (int64_t)tt * a->cols;
        for (int i = 0; i < 4; i++) acc[i][t] = _mm256_setzero_ps();
    }
    const int n8 = a->cols & ~7;
    /* row bytes per 8 elements */
    const int step = ft == FT_F32 ? 32 : ft == FT_F8 ? 9 : 16;
    __m256 ds[4]; /* FT_F8: the 4 rows' block scales times 2^8, set at each block's start */
    int slow = 0; /* FT_F8: a scale of the block is too large for the one-multiply decode */
    for (int k = 0; k < n8; k += 8) {
        prefetch_span(pf + 4 * step * k / 8, 4 * step);
        __m256 xv[2];
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x[t] + k);
        if (ft == FT_F8 && !(k & 31)) {
            slow = 0;
            for (int i = 0; i < 4; i++) {
                const float d = f8_scale(w[i], k);
                slow |= !(fabsf(d) < F8_SCALE_FAST);
                ds[i] = _mm256_set1_ps(d * 0x1p8f);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const uint8_t *q = w[i] + 36 * (k >> 5) + 4 + (k & 31); /* FT_F8's codes */
            const __m256 wv = ft == FT_F8 && !slow ? _mm256_mul_ps(f8x8_raw(q), ds[i])
                                                   : load8(w[i], k, ft);
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        float tail[4] = {0, 0, 0, 0};
        for (int k = n8; k < a->cols; k++)
            for (int i = 0; i < 4; i++) tail[i] += load1(w[i], k, ft) * x[t][k];
        const __m128 v = _mm_add_ps(rows4_sum(acc[0][t], acc[1][t], acc[2][t], acc[3][t]),
                                    _mm_loadu_ps(tail));
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r, v, nr);
    }
}

/* I4_S32 x ACT_I16X2 (decode and short verify steps): per 32-block and row, the nibbles
 * widened to int16 (elements 0..15 low halves, 16..31 high halves) meet the activation's h
 * and l parts in vpmaddwd (int32 sums: at most 4 x 15 x 2^14 a lane, exact), so the block
 * gives sum_k q_k x_k = s * (H + L / 2^15) with one f32 rounding (s a power of two); that times
 * the scale d, and the zero point enters once per block through the activation sum:
 * y = sum_b d_b (s_b (H_b + L_b / 2^15) - z_b * sum_b x). Weight-only arithmetic as the scalar
 * decode, with x kept to 2^-29 of its block's largest value (quant_row_i16x2) and sums of
 * integers where the scalar path adds f32 products, so within the F32 tolerance of it. */
INLINE void tile_i4(const struct mm_job *j, int r, int nr, int t0, int nt, const int NT) {
    const struct act *a = &j->a;
    const int nb = a->nb;
    const uint8_t *w[4];
    group_rows(j, r, nr, w);
    const uint8_t *pf = j->W + (int64_t)r * j->row_bytes + 3 * j->row_bytes + PF_DIST;
    const int16_t *hl[2];
    const float *s3[2];
    __m256 acc[4][2];
    float zacc[4][2];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        const int tt = clamp_token(t0, t, nt);
        hl[t] = a->hl + (int64_t)tt * a->cols * 2;
        s3[t] = a->d + (int64_t)tt * nb * 3;
        for (int i = 0; i < 4; i++) {
            acc[i][t] = _mm256_setzero_ps();
            zacc[i][t] = 0.0f;
        }
    }
    const __m256i m4 = _mm256_set1_epi16(15);
    for (int b = 0; b < nb; b++) {
        prefetch_span(pf + 4 * 24 * b, 4 * 24);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const uint8_t *blk = w[i] + 24 * b;
            const __m256i q = _mm256_cvtepu8_epi16(ld128(blk + 8));
            const __m256i ql = _mm256_and_si256(q, m4), qh = _mm256_srli_epi16(q, 4);
            float dz[2];
            memcpy(dz, blk, sizeof dz);
            const __m256 dv = _mm256_set1_ps(dz[0]);
            const float dzz = dz[0] * dz[1];
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++) {
                const int16_t *p = hl[t] + 64 * b;
                const __m256i hs = _mm256_add_epi32(_mm256_madd_epi16(ql, ld256(p)),
                                                    _mm256_madd_epi16(qh, ld256(p + 16)));
                const __m256i ls = _mm256_add_epi32(_mm256_madd_epi16(ql, ld256(p + 32)),
                                                    _mm256_madd_epi16(qh, ld256(p + 48)));
                const __m256 v = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(ls), _mm256_broadcast_ss(s3[t] + 3 * b + 1),
                    _mm256_mul_ps(_mm256_cvtepi32_ps(hs), _mm256_broadcast_ss(s3[t] + 3 * b)));
                acc[i][t] = _mm256_fmadd_ps(v, dv, acc[i][t]);
                zacc[i][t] = fmaf(dzz, s3[t][3 * b + 2], zacc[i][t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++) {
        if (t >= nt) break;
        const __m128 v = _mm_sub_ps(rows4_sum(acc[0][t], acc[1][t], acc[2][t], acc[3][t]),
                                    _mm_setr_ps(zacc[0][t], zacc[1][t], zacc[2][t], zacc[3][t]));
        store_rows(j->y + (int64_t)(t0 + t) * j->ldy + r, v, nr);
    }
}

/* FP8 and INT4 steps of several tokens: each group of 4 rows is decoded once into f32 (the
 * values load8 gives) and the F32 tiles run over it for every token pair, so a weight block
 * is read and decoded once per step rather than once per 2 tokens; the same sums in the
 * same order as the FT_F8 / FT_I4 tiles, so the same bits. */
static void rows_decoded(const struct mm_job *j, int r0, int r1, enum ftype ft) {
    const int cols = j->cols, T = j->a.T;
    float *buf = aligned_alloc(64, (size_t)cols * 4 * sizeof(float));
    if (!buf) FATAL("cpu_matmul: out of memory (%d columns)", cols);
    struct mm_job d = *j;
    d.W = (const uint8_t *)buf;
    d.row_bytes = (int64_t)cols * (int64_t)sizeof(float);
    d.wt = DT_F32;
    for (int r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? r1 - r : 4;
        for (int i = 0; i < nr; i++) {
            const uint8_t *w = j->W + (int64_t)(r + i) * j->row_bytes;
            float *row = buf + (int64_t)i * cols;
            for (int k = 0; k < cols; k += 8) _mm256_store_ps(row + k, load8(w, k, ft));
        }
        d.y = j->y + r;
        d.rows = nr;
        int t0 = 0;
        for (; t0 + 2 <= T; t0 += 2) tile_float(&d, 0, nr, t0, 2, 2, FT_F32);
        if (t0 < T) tile_float(&d, 0, nr, t0, 1, 1, FT_F32);
    }
    free(buf);
}

/* ---------------------------------------------------------------- dispatch */

/* Decode (T = 1) runs NT = 1 tiles; prefill pairs tokens so each weight tile serves two. */
#define FOR_TILES4(call1, call2) \
    for (int r = r0; r < r1; r += 4) { \
        const int nr = r1 - r < 4 ? r1 - r : 4; \
        int t0 = 0; \
        for (; t0 + 2 <= T; t0 += 2) call2; \
        if (t0 < T) call1; \
    }
/* Q4_0 / Q4_1 with VNNI: tiles of 4, then 3, 2 or 1 for the rest (a verify step of 3 or 4
 * tokens reads and unpacks each weight block once). */
#define FOR_TILES4_Q4(tile) \
    for (int r = r0; r < r1; r += 4) { \
        const int nr = r1 - r < 4 ? r1 - r : 4; \
        int t0 = 0; \
        for (; t0 + 4 <= T; t0 += 4) tile(j, r, nr, t0, 4, 4); \
        if (T - t0 == 3) tile(j, r, nr, t0, 3, 3); \
        else if (T - t0 == 2) tile(j, r, nr, t0, 2, 2); \
        else if (T - t0 == 1) tile(j, r, nr, t0, 1, 1); \
    }
#define FOR_TILES1(call1, call2) \
    for (int r = r0; r < r1; r++) { \
        int t0 = 0; \
        for (; t0 + 2 <= T; t0 += 2) call2; \
        if (t0 < T) call1; \
    }

void MM_ROWS(const struct mm_job *j, int r0, int r1) {
    const int T = j->a.T;
    /* the first lines of the range, which the tiles' look-ahead never covers */
    const int64_t head = (r1 - r0) * j->row_bytes;
    const uint8_t *w0 = j->W + (int64_t)r0 * j->row_bytes;
    for (int64_t o = 0; o < head && o < 3 * j->row_bytes + PF_DIST; o += 64)
        _mm_prefetch((const char *)w0 + o, _MM_HINT_T0);
    switch (j->wt) {
#if defined(TPD_MM_AVX512)
    case DT_Q4_1: FOR_TILES4_Q4(tile_q4_1_512); break;
    case DT_Q4_0: FOR_TILES4_Q4(tile_q4_0); break;
#elif defined(TPD_MM_VNNI)
    case DT_Q4_1: FOR_TILES4_Q4(tile_q4_1); break;
    case DT_Q4_0: FOR_TILES4_Q4(tile_q4_0); break;
#else
    case DT_Q4_1: FOR_TILES4(tile_q4_1(j, r, nr, t0, 1, 1), tile_q4_1(j, r, nr, t0, 2, 2)); break;
    case DT_Q4_0: FOR_TILES4(tile_q4_0(j, r, nr, t0, 1, 1), tile_q4_0(j, r, nr, t0, 2, 2)); break;
#endif
    case DT_Q8_0: FOR_TILES4(tile_q8_0(j, r, nr, t0, 1, 1), tile_q8_0(j, r, nr, t0, 2, 2)); break;
    case DT_Q4_K: FOR_TILES1(tile_q4_K(j, r, t0, 1, 1), tile_q4_K(j, r, t0, 2, 2)); break;
    case DT_Q6_K: FOR_TILES1(tile_q6_K(j, r, t0, 1, 1), tile_q6_K(j, r, t0, 2, 2)); break;
    case DT_F8_E4M3_S32:
        if (T >= 4) {
            rows_decoded(j, r0, r1, FT_F8);
            break;
        }
        FOR_TILES4(tile_float(j, r, nr, t0, 1, 1, FT_F8), tile_float(j, r, nr, t0, 2, 2, FT_F8));
        break;
    case DT_I4_S32:
        if (T >= 4) {
            rows_decoded(j, r0, r1, FT_I4);
            break;
        }
        FOR_TILES4(tile_i4(j, r, nr, t0, 1, 1), tile_i4(j, r, nr, t0, 2, 2));
        break;
    case DT_F32:
        FOR_TILES4(tile_float(j, r, nr, t0, 1, 1, FT_F32), tile_float(j, r, nr, t0, 2, 2, FT_F32));
        break;
    case DT_F16:
        FOR_TILES4(tile_float(j, r, nr, t0, 1, 1, FT_F16), tile_float(j, r, nr, t0, 2, 2, FT_F16));
        break;
    case DT_BF16:
        FOR_TILES4(tile_float(j, r, nr, t0, 1, 1, FT_BF16),
                   tile_float(j, r, nr, t0, 2, 2, FT_BF16));
        break;
    }
}

#ifndef TPD_MM_VNNI /* the rest once, in matmul_avx2.c */
/* ---------------------------------------------------------------- activation quantizers */

/* ggml's AVX2 quantize_row_q8_0/q8_1 block: returns the f32 d and the sum of the quants. */
INLINE float q8_block(const float *x, int8_t *qs, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const int rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), rnd));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), rnd));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), rnd));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), rnd));
    *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    /* the packs work per 128-bit lane; put the dwords back in element order */
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, i0);
    return d;
}

/* fp16 rounding through F16C (quant.c rounds the same way in plain C) */
INLINE float f16c_round(float x) { return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)); }

void quant_row_q8_0_avx2(const float *x, int n, int8_t *qs, float *d) {
    for (int b = 0; b < n / QK; b++) {
        int sum;
        d[b] = f16c_round(q8_block(x + QK * b, qs + QK * b, &sum));
    }
}

void quant_row_q8_1_avx2(const float *x, int n, int8_t *qs, float *ds) {
    for (int b = 0; b < n / QK; b++) {
        int sum;
        const float d = q8_block(x + QK * b, qs + QK * b, &sum);
        ds[2 * b] = f16c_round(d);
        ds[2 * b + 1] = f16c_round(d * (float)sum);
    }
}

void round_row_f16_avx2(const float *x, int n, float *out) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                  _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) out[i] = f16c_round(x[i]);
}
#endif
