#include "attention_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../../util/fp8.h"
#include "../../util/half.h"

/* K is stored transposed per key tile ([hd][64]): a query row's 64 scores are then 8
 * vector accumulators fed by one broadcast query element per dimension, with no
 * horizontal sums. V stays row-major: each key's weight is broadcast over its row. */

/* exp for x <= 0 (Cephes' polynomial, relative error ~2e-7 over the range used here);
 * inputs below -87 give ~1e-38 instead of 0, and masked lanes are zeroed by the caller. */
static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* r[i] = row i (8 keys x 8 dims) in, r[d] = dim d across the 8 keys out */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* 8 FP8 E4M3 codes times x256 = 2^(e + 8). A code's magnitude bits shifted left by 7 (and
 * its sign to bit 15) are the F16 number 2^-8 times the code's value: the exponent biases
 * differ by 8 and subnormals map to subnormals. F16C converts exactly, one multiply by a
 * power of two rescales exactly, so this equals the scalar fp8_e4m3_to_f32(code) * 2^e. The
 * NaN code gets an all-ones F16 exponent and stays NaN. */
static inline __m256 load8_fp8(const uint8_t *p, float x256) {
    const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
    __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7),
                             _mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8));
    h = _mm_or_si128(
        h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7c00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(x256));
}

/* 8 elements from element offset at; x256: the row's FP8 scale times 256 (F8_E4M3 only) */
static inline __m256 load8(const void *base, enum dtype t, int64_t at, float x256) {
    if (t == DT_F32) return _mm256_loadu_ps((const float *)base + at);
    if (t == DT_F8_E4M3) return load8_fp8((const uint8_t *)base + at, x256);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + at)));
}

/* 2^(e + 8) for the scale exponent e of cache row `rix` ((slot, KV head)); one for the
 * unscaled types */
static inline float row_x256(const struct attn_call *c, const int8_t *exps, int64_t rix) {
    return c->kv_type == DT_F8_E4M3 ? fp8_exp2(exps[rix] + 8) : 1.0f;
}

/* Keys j0 .. j0+nk-1 of the item's KV head: K transposed into w->kt (zero past nk), V
 * row-major into w->vt. Decode items (a few rows) transpose too: every row's scores then
 * come from the same operations whatever the batch, so a token's result does not depend
 * on what else is in the step. */
static void load_tile(const struct attn_call *c, const struct attn_item *it, struct attn_buf *w,
                      int j0, int nk) {
    const int hd = c->hd;
    int64_t at[ATTN_KT], rix[ATTN_KT]; /* element offset and cache row of each key */
    const struct attn_batch *b = c->b;
    const int32_t *blocks = b->blocks + b->block_off[it->seq];
    int bi = j0 / b->block_size, off = j0 % b->block_size; /* walked, not divided per key */
    for (int j = 0; j < nk; j++) {
        rix[j] = ((int64_t)blocks[bi] * b->block_size + off) * c->n_kv + it->kvh;
        at[j] = rix[j] * hd;
        if (++off == b->block_size) {
            off = 0;
            bi++;
        }
    }
    float kx[ATTN_KT];
    for (int j = 0; j < nk; j++) kx[j] = row_x256(c, c->k_exp, rix[j]);
    for (int jb = 0; jb < ATTN_KT; jb += 8) {
        if (jb >= nk) { /* whole block past the keys: zeros keep the score lanes finite */
            for (int d = 0; d < hd; d++)
                _mm256_storeu_ps(w->kt + (int64_t)d * ATTN_KT + jb, _mm256_setzero_ps());
            continue;
        }
        for (int db = 0; db < hd; db += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = jb + i < nk ? load8(c->k, c->kv_type, at[jb + i] + db, kx[jb + i])
                                   : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8; i++)
                _mm256_storeu_ps(w->kt + (int64_t)(db + i) * ATTN_KT + jb, r[i]);
        }
    }
    for (int j = 0; j < nk; j++) {
        float *vd = w->vt + (int64_t)j * hd;
        const float vx = row_x256(c, c->v_exp, rix[j]);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(vd + d, load8(c->v, c->kv_type, at[j] + d, vx));
    }
    /* an FP8 cache's sink: the sequence's first positions replaced by their exact rows */
    for (int j = 0; c->kv_type == DT_F8_E4M3 && j < nk; j++) {
        const int64_t sk = attn_sink_index(c, it->seq, j0 + j);
        if (sk < 0) break; /* the sink rows are a sequence's first positions */
        const int64_t s = sk + (int64_t)it->kvh * hd;
        const float kx = fp8_exp2(c->k_exp[rix[j]]), vx = fp8_exp2(c->v_exp[rix[j]]);
        for (int d = 0; d < hd; d++) {
            w->kt[(int64_t)d * ATTN_KT + j] = f16_to_f32(c->kvl->k_sink[s + d]) * kx;
            w->vt[(int64_t)j * hd + d] = f16_to_f32(c->kvl->v_sink[s + d]) * vx;
        }
    }
}

/* NR (1..3) rows against one key tile; row i has nv[i] valid keys. Rows are blocked so
 * that each loaded K or V vector feeds NR FMAs: with one row the loops are bound by
 * loads, not by the FMA units. */
static inline __attribute__((always_inline)) void rows_tile(const int NR, const float *qs,
                                                            float *acc, float *m, float *l,
                                                            const int *nv, const float *kt,
                                                            const float *vt, int hd) {
    int nvmax = 0;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        if (nv[r] > nvmax) nvmax = nv[r];
    __m256 s[3][8];
    for (int h = 0; h < 2; h++) { /* two halves of 32 keys: 4 vectors x NR rows in registers */
        if (h == 1 && nvmax <= 32) {
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                for (int i = 4; i < 8; i++) s[r][i] = _mm256_setzero_ps();
            break;
        }
        __m256 c[3][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) c[r][i] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const float *kr = kt + (int64_t)d * ATTN_KT + 32 * h;
            const __m256 k0 = _mm256_loadu_ps(kr), k1 = _mm256_loadu_ps(kr + 8),
                         k2 = _mm256_loadu_ps(kr + 16), k3 = _mm256_loadu_ps(kr + 24);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const __m256 qd = _mm256_broadcast_ss(qs + (int64_t)r * hd + d);
                c[r][0] = _mm256_fmadd_ps(qd, k0, c[r][0]);
                c[r][1] = _mm256_fmadd_ps(qd, k1, c[r][1]);
                c[r][2] = _mm256_fmadd_ps(qd, k2, c[r][2]);
                c[r][3] = _mm256_fmadd_ps(qd, k3, c[r][3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) s[r][4 * h + i] = c[r][i];
    }
    /* lanes past nv are masked to -inf for the max and to 0 after exp */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    float p[3][ATTN_KT] __attribute__((aligned(32)));
    float corr[3];
    const int nvec = (nvmax + 7) / 8;
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        __m256 mk[8];
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        for (int i = 0; i < nvec; i++) {
            mk[i] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nv[r] - 8 * i), lane));
            vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s[r][i], mk[i]));
        }
        const float mold = m[r], mx = fmaxf(mold, hmax256(vmax));
        const __m256 vmx = _mm256_set1_ps(mx);
        __m256 vsum = _mm256_setzero_ps();
        for (int i = 0; i < nvec; i++) {
            const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(s[r][i], vmx)), mk[i]);
            vsum = _mm256_add_ps(vsum, e);
            _mm256_store_ps(p[r] + 8 * i, e);
        }
        corr[r] = mold == -INFINITY ? 0.0f : expf(mold - mx);
        l[r] = l[r] * corr[r] + hsum256(vsum);
        m[r] = mx;
    }
    int d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 a[3][4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const __m256 vc = _mm256_set1_ps(corr[r]);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                a[r][i] = _mm256_mul_ps(_mm256_loadu_ps(acc + (int64_t)r * hd + d + 8 * i), vc);
        }
        for (int j = 0; j < nvmax; j++) {
            const float *v = vt + (int64_t)j * hd + d;
            const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8),
                         v2 = _mm256_loadu_ps(v + 16), v3 = _mm256_loadu_ps(v + 24);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const __m256 pj = _mm256_broadcast_ss(p[r] + j);
                a[r][0] = _mm256_fmadd_ps(pj, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(pj, v1, a[r][1]);
                a[r][2] = _mm256_fmadd_ps(pj, v2, a[r][2]);
                a[r][3] = _mm256_fmadd_ps(pj, v3, a[r][3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                _mm256_storeu_ps(acc + (int64_t)r * hd + d + 8 * i, a[r][i]);
    }
    for (; d < hd; d += 8) {
        __m256 a[3];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            a[r] = _mm256_mul_ps(_mm256_loadu_ps(acc + (int64_t)r * hd + d),
                                 _mm256_set1_ps(corr[r]));
        for (int j = 0; j < nvmax; j++) {
            const __m256 v0 = _mm256_loadu_ps(vt + (int64_t)j * hd + d);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p[r] + j), v0, a[r]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) _mm256_storeu_ps(acc + (int64_t)r * hd + d, a[r]);
    }
}

static void rows_tile3(const float *qs, float *acc, float *m, float *l, const int *nv,
                       const float *kt, const float *vt, int hd) {
    rows_tile(3, qs, acc, m, l, nv, kt, vt, hd);
}
static void rows_tile2(const float *qs, float *acc, float *m, float *l, const int *nv,
                       const float *kt, const float *vt, int hd) {
    rows_tile(2, qs, acc, m, l, nv, kt, vt, hd);
}
static void rows_tile1(const float *qs, float *acc, float *m, float *l, const int *nv,
                       const float *kt, const float *vt, int hd) {
    rows_tile(1, qs, acc, m, l, nv, kt, vt, hd);
}

void attn_item_avx2(const struct attn_call *c, const struct attn_item *it, struct attn_buf *w) {
    const int hd = c->hd, rows = it->n_tok * it->n_h;
    const struct attn_batch *b = c->b;
    const __m256 sc = _mm256_set1_ps(c->scale);
    for (int r = 0; r < rows; r++) {
        const int t = it->t0 + r / it->n_h, h = it->h0 + r % it->n_h;
        const float *q = c->q + t * c->ldq + (int64_t)h * hd;
        float *qs = w->qs + (int64_t)r * hd;
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(qs + d, _mm256_mul_ps(_mm256_loadu_ps(q + d), sc));
    }
    attn_begin(it, w, hd);
    for (int kt = it->kt0; kt < it->kt1; kt++) {
        const int j0 = kt * ATTN_KT;
        int nk = it->pmax + 1 - j0;
        if (nk <= 0) break;
        if (nk > ATTN_KT) nk = ATTN_KT;
        load_tile(c, it, w, j0, nk);
        /* rows whose keys all lie before this tile are left out of the blocks of 3 */
        int r = 0;
        while (r < rows) {
            int idx[3], nv[3], nr = 0;
            for (; r < rows && nr < 3; r++) {
                int n = b->pos[it->t0 + r / it->n_h] + 1 - j0;
                if (n <= 0) continue;
                idx[nr] = r;
                nv[nr++] = n > nk ? nk : n;
            }
            if (nr == 0) break;
            /* blocked rows must be consecutive: they share the qs/acc stride */
            int run = 1;
            while (run < nr && idx[run] == idx[0] + run) run++;
            const int r0 = idx[0];
            float *qs = w->qs + (int64_t)r0 * hd, *acc = w->acc + (int64_t)r0 * hd;
            if (run == 3) rows_tile3(qs, acc, w->m + r0, w->l + r0, nv, w->kt, w->vt, hd);
            else if (run == 2) rows_tile2(qs, acc, w->m + r0, w->l + r0, nv, w->kt, w->vt, hd);
            else rows_tile1(qs, acc, w->m + r0, w->l + r0, nv, w->kt, w->vt, hd);
            r = idx[run - 1] + 1; /* rows of the block not taken are revisited */
        }
        if ((kt + 1) % ATTN_SEG == 0 || kt + 1 == it->kt1)
            attn_segment_end(c, it, w, kt / ATTN_SEG);
    }
    if (c->n_split == 1) attn_finish(c, it, w);
}
