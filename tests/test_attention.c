// link: tpd_kernels
/* cpu_attn_run (the CPU backend's attention op) against a double-precision reference on
 * random Q/K/V: F32, F16 and FP8 caches, head_dim 64/128 (and 40, which takes the scalar path),
 * GQA groups 1/3/4, block sizes 16/1/7, shuffled block tables, ragged batches mixing a
 * whole prompt, a chunk that starts mid-sequence and decode tokens, a rank's slice of the
 * heads (q_head0/kv_head0 as tensor parallelism gives them), pools of 1/2/3 threads (3
 * threads on a single decode token exercises the key-range split and merge, whose result
 * must be bit-identical to one thread's), and both the AVX2 and the scalar item kernels.
 *
 * The reference reads K/V through the same F16 bits the kernel reads, so F16 rounding is
 * in both and only float arithmetic separates them. Bound per output row (u = 2^-24):
 *  - each score s_j = scale * q.k_j is a float sum of hd products plus the rounding of
 *    scale and of q*scale: |ds_j| <= (hd + 3) * 2u * S, S = max_j scale * sum_d |q_d k_dj|;
 *  - a weight p_j = exp(s_j - m) / sum then carries relative error <= 2 max|ds| (numerator
 *    and denominator) + 1e-6 (the vector exp is good to ~2e-7, plus the rescaling of the
 *    running sums by exp(m_old - m_new) once per 64-key tile and per key range) + the
 *    float sums over n keys ((n + 8) * 2u for the denominator and the accumulator);
 *  - so |o - o_ref| <= max_j |v_j| * (2 max|ds| + 1e-6 + 2 (n + 8) * 2u).
 * The factor 2u (not u) covers the FMA/non-FMA difference between the two paths.
 *
 * FP8 caches (E4M3 with a power-of-two scale per (token, KV head) row, util/fp8.h) take the
 * same bound against a reference on the decoded FP8 values, which the kernels' tile
 * conversion reproduces exactly; their rows get magnitudes from 2^-4 to 2^3, so the
 * scales differ. The error against the unrounded K/V (what FP8 storage costs) is printed
 * and held to the bound that E4M3's relative rounding of 2^-4 implies (see run_case). Half
 * of the pool's blocks have an FP8 sink (kernels/backend.h): sequences whose first block is
 * one of them read their first 4 positions as F16, and no other position may read one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/attention.h"
#include "util/threadpool.h"
#include "util/fp8.h"
#include "util/half.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float frand(float a) { return a * ((float)rnd() / 4294967296.0f * 2.0f - 1.0f); }

/* One sequence of a batch: `len` cached positions, the batch holds positions
 * [first, first + n). */
struct seqspec {
    int len, first, n;
};

struct config {
    enum dtype kv;
    int hd, n_heads, n_kv_heads, block_size;
    int n_q, q_head0; /* this rank's query heads */
    float qscale;     /* spread of the queries: larger makes peakier softmax */
};

static long g_sink_seqs; /* FP8 sequences that read their first positions from the sink */

static void run_case(const struct config *cf, const struct seqspec *ss, int n_seqs) {
    const int hd = cf->hd, group = cf->n_heads / cf->n_kv_heads, bs = cf->block_size;
    const int kv_head0 = cf->q_head0 / group, kv_last = (cf->q_head0 + cf->n_q - 1) / group;
    const int n_kv = kv_last - kv_head0 + 1; /* KV heads this rank caches */
    const int esz = cf->kv == DT_F32 ? 4 : cf->kv == DT_F16 ? 2 : 1;

    int n_tok = 0, n_blocks = 0;
    int32_t *block_off = malloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    for (int s = 0; s < n_seqs; s++) {
        block_off[s] = n_blocks;
        n_blocks += (ss[s].len + bs - 1) / bs;
        n_tok += ss[s].n;
    }
    block_off[n_seqs] = n_blocks;
    /* block ids: a shuffled permutation of the pool, with spare blocks interleaved */
    const int pool = n_blocks * 2 + 1;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool);
    for (int i = 0; i < pool; i++) perm[i] = i;
    for (int i = pool - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *blocks = perm; /* the first n_blocks of the permutation */
    const size_t row = (size_t)n_kv * hd, cache_elems = (size_t)pool * bs * row;
    void *kc = calloc(cache_elems, (size_t)esz), *vc = calloc(cache_elems, (size_t)esz);
    double *kd = calloc(cache_elems, sizeof(double)), *vd = calloc(cache_elems, sizeof(double));
    double *kraw = calloc(cache_elems, sizeof(double)), *vraw = calloc(cache_elems, sizeof(double));
    const size_t n_rows = (size_t)pool * bs * n_kv;
    int8_t *kexp = calloc(n_rows, 1), *vexp = calloc(n_rows, 1);
    float *kf = malloc(sizeof(float) * (size_t)hd), *vf = malloc(sizeof(float) * (size_t)hd);
    for (int s = 0; s < n_seqs; s++)
        for (int p = 0; p < ss[s].len; p++) {
            size_t at = ((size_t)blocks[block_off[s] + p / bs] * bs + (size_t)(p % bs)) * row;
            if (cf->kv == DT_F8_E4M3) { /* row by row, as the backends' kv_store writes them */
                for (size_t r = 0; r < row / (size_t)hd; r++) {
                    const size_t a = at + r * (size_t)hd;
                    const float ka = ldexpf(1.0f, (int)(rnd() % 8) - 4),
                                va = ldexpf(1.0f, (int)(rnd() % 8) - 4);
                    for (int d = 0; d < hd; d++) {
                        kf[d] = frand(ka);
                        vf[d] = frand(va);
                        kraw[a + d] = kf[d];
                        vraw[a + d] = vf[d];
                    }
                    uint8_t *kq = (uint8_t *)kc + a, *vq = (uint8_t *)vc + a;
                    kexp[a / hd] = (int8_t)fp8_encode_row(kq, kf, hd);
                    vexp[a / hd] = (int8_t)fp8_encode_row(vq, vf, hd);
                    for (int d = 0; d < hd; d++) {
                        kd[a + d] = ldexp(fp8_e4m3_to_f32(kq[d]), kexp[a / hd]);
                        vd[a + d] = ldexp(fp8_e4m3_to_f32(vq[d]), vexp[a / hd]);
                    }
                }
                continue;
            }
            for (size_t i = 0; i < row; i++) {
                float k = frand(1.0f), v = frand(1.0f);
                kraw[at + i] = k;
                vraw[at + i] = v;
                if (cf->kv == DT_F32) {
                    ((float *)kc)[at + i] = k;
                    ((float *)vc)[at + i] = v;
                    kd[at + i] = k;
                    vd[at + i] = v;
                } else {
                    uint16_t kh = f32_to_f16(k), vh = f32_to_f16(v);
                    ((uint16_t *)kc)[at + i] = kh;
                    ((uint16_t *)vc)[at + i] = vh;
                    kd[at + i] = f16_to_f32(kh);
                    vd[at + i] = f16_to_f32(vh);
                }
            }
        }

    /* FP8's sink: the lower half of the pool's block ids keep their first rows in F16. A
     * sequence whose first block is one of them reads its first positions from there (the
     * reference then reads them F16-rounded); the sink rows of every other block are NaN,
     * so reading one where the codes should be read would show. */
    uint16_t *ksink = NULL, *vsink = NULL;
    const int sink_blocks = pool / 2, sink_rows = bs < 4 ? bs : 4;
    if (cf->kv == DT_F8_E4M3) {
        const size_t n_sink = (size_t)sink_blocks * sink_rows * row;
        ksink = malloc(sizeof(uint16_t) * (n_sink ? n_sink : 1));
        vsink = malloc(sizeof(uint16_t) * (n_sink ? n_sink : 1));
        for (size_t i = 0; i < n_sink; i++) ksink[i] = vsink[i] = 0x7e00;
        for (int s = 0; s < n_seqs; s++) {
            const int b0 = blocks[block_off[s]];
            if (b0 >= sink_blocks) continue;
            g_sink_seqs++;
            for (int p = 0; p < sink_rows && p < ss[s].len; p++)
                for (size_t i = 0; i < row; i++) { /* F16 of x / 2^e, e the row's FP8 exponent */
                    const size_t at = ((size_t)b0 * bs + (size_t)p) * row + i,
                                 sa = ((size_t)b0 * sink_rows + p) * row + i;
                    const int ke = kexp[at / (size_t)hd], ve = vexp[at / (size_t)hd];
                    ksink[sa] = f32_to_f16(ldexpf((float)kraw[at], -ke));
                    vsink[sa] = f32_to_f16(ldexpf((float)vraw[at], -ve));
                    kd[at] = ldexp(f16_to_f32(ksink[sa]), ke);
                    vd[at] = ldexp(f16_to_f32(vsink[sa]), ve);
                }
        }
    }

    int32_t *seq_of = malloc(sizeof(int32_t) * (size_t)n_tok),
            *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    for (int s = 0, t = 0; s < n_seqs; s++)
        for (int i = 0; i < ss[s].n; i++, t++) {
            seq_of[t] = s;
            pos[t] = ss[s].first + i;
        }
    const int64_t ldq = (int64_t)cf->n_q * hd + 5,
                  ldo = (int64_t)cf->n_q * hd + 3; /* strides past the rows */
    float *q = malloc(sizeof(float) * (size_t)(n_tok * ldq));
    for (int64_t i = 0; i < n_tok * ldq; i++) q[i] = frand(cf->qscale);
    struct attn_batch b = {.n_tokens = n_tok,
                           .n_seqs = n_seqs,
                           .seq_of = seq_of,
                           .pos = pos,
                           .block_off = block_off,
                           .blocks = blocks,
                           .block_size = bs};
    struct kv_layer kv = {.k = kc, .v = vc};
    if (cf->kv == DT_F8_E4M3) {
        kv.k_exp = kexp;
        kv.v_exp = vexp;
        kv.k_sink = ksink;
        kv.v_sink = vsink;
        kv.sink_blocks = sink_blocks;
        kv.sink_rows = sink_rows;
    }

    /* reference and bound per (token, head); raw: the same on the unrounded K/V */
    double *ref = malloc(sizeof(double) * (size_t)n_tok * cf->n_q * hd);
    double *raw = malloc(sizeof(double) * (size_t)n_tok * cf->n_q * hd);
    double *tol = malloc(sizeof(double) * (size_t)n_tok * cf->n_q);
    double *tol_raw = malloc(sizeof(double) * (size_t)n_tok * cf->n_q);
    const double u = 0x1p-24, scale = 1.0 / sqrt((double)hd);
    double *sc = malloc(sizeof(double) * 70000);
    for (int pass = 0; pass < 2; pass++) /* 0: on the values the kernel reads; 1: unrounded */
        for (int t = 0; t < n_tok; t++)
            for (int h = 0; h < cf->n_q; h++) {
                const int kvh = (cf->q_head0 + h) / group - kv_head0, s = seq_of[t], n = pos[t] + 1;
                const float *qr = q + t * ldq + (int64_t)h * hd;
                const double *kp = pass ? kraw : kd, *vp = pass ? vraw : vd;
                double mx = -INFINITY, smax = 0, vmax = 0, sum = 0;
                for (int j = 0; j < n; j++) {
                    size_t at = ((size_t)blocks[block_off[s] + j / bs] * bs + (size_t)(j % bs)) *
                                    row +
                                (size_t)kvh * hd;
                    double dot = 0, adot = 0;
                    for (int d = 0; d < hd; d++) {
                        dot += qr[d] * kp[at + d];
                        adot += fabs(qr[d] * kp[at + d]);
                        if (fabs(vp[at + d]) > vmax) vmax = fabs(vp[at + d]);
                    }
                    sc[j] = dot * scale;
                    if (sc[j] > mx) mx = sc[j];
                    if (adot * scale > smax) smax = adot * scale;
                }
                double *o = (pass ? raw : ref) + ((size_t)t * cf->n_q + h) * hd;
                memset(o, 0, sizeof(double) * (size_t)hd);
                for (int j = 0; j < n; j++) {
                    size_t at = ((size_t)blocks[block_off[s] + j / bs] * bs + (size_t)(j % bs)) *
                                    row +
                                (size_t)kvh * hd;
                    double p = exp(sc[j] - mx);
                    sum += p;
                    for (int d = 0; d < hd; d++) o[d] += p * vp[at + d];
                }
                for (int d = 0; d < hd; d++) o[d] /= sum;
                const double ds = (hd + 3) * 2 * u * smax;
                if (!pass) tol[t * cf->n_q + h] = vmax * (2 * ds + 1e-6 + 2 * (n + 8) * 2 * u);
                /* FP8 vs unrounded: each element moves by <= 2^-4 of itself (plus 2^-18 of its
                 * row's largest, the subnormals), so each score by <= dl = 2^-4 * 1.07 smax, each
                 * softmax weight by a factor within e^(+-2 dl), and the output by <= max|v| *
                 * (e^(2 dl) - 1 + 2^-4 * 1.07) */
                if (pass)
                    tol_raw[t * cf->n_q + h] = vmax * (expm1(2 * 0.0625 * 1.07 * smax) +
                                                       0.0625 * 1.07) +
                                               1e-6;
            }

    float *out = malloc(sizeof(float) * (size_t)(n_tok * ldo)),
          *out1 = malloc(sizeof(float) * (size_t)(n_tok * ldo));
    for (int scalar = 0; scalar < 2; scalar++) {
        if (!scalar && !cpu_attn_has_avx2()) continue;
        cpu_attn_force_scalar(scalar);
        for (int nth = 1; nth <= 3; nth++) {
            struct threadpool *tp = threadpool_create(nth);
            struct cpu_attn *a = cpu_attn_create();
            for (int64_t i = 0; i < n_tok * ldo; i++) out[i] = NAN;
            cpu_attn_run(a, tp, out, ldo, q, ldq, cf->n_q, cf->q_head0, group, kv_head0, &kv,
                         cf->kv, n_kv, hd, &b);
            double worst = 0;
            for (int t = 0; t < n_tok; t++)
                for (int h = 0; h < cf->n_q; h++)
                    for (int d = 0; d < hd; d++) {
                        const double e = fabs(out[t * ldo + (int64_t)h * hd + d] -
                                              ref[((size_t)t * cf->n_q + h) * hd + d]);
                        const double r = e / tol[t * cf->n_q + h];
                        if (!(r <= 1.0)) {
                            print_error(
                                "kv %s hd %d group %d bs %d n_q %d q_head0 %d scalar %d threads "
                                "%d: token %d "
                                "(pos %d) head %d dim %d: got %g want %g (err %g, bound %g)\n",
                                dtype_name(cf->kv), hd, group, bs, cf->n_q, cf->q_head0, scalar,
                                nth, t, pos[t], h, d, out[t * ldo + (int64_t)h * hd + d],
                                ref[((size_t)t * cf->n_q + h) * hd + d], e, tol[t * cf->n_q + h]);
                            fail();
                        }
                        if (r > worst) worst = r;
                    }
            if (cf->kv == DT_F8_E4M3 && nth == 1 && !scalar) { /* what FP8 storage costs */
                double e_raw = 0, r_raw = 0, vmax = 0;
                for (size_t i = 0; i < cache_elems; i++)
                    if (fabs(vraw[i]) > vmax) vmax = fabs(vraw[i]);
                for (int t = 0; t < n_tok; t++)
                    for (int64_t i = 0; i < (int64_t)cf->n_q * hd; i++) {
                        const double e = fabs(out[t * ldo + i] -
                                              raw[(size_t)t * cf->n_q * hd + (size_t)i]);
                        if (e > e_raw) e_raw = e;
                        if (e / tol_raw[t * cf->n_q + i / hd] > r_raw)
                            r_raw = e / tol_raw[t * cf->n_q + i / hd];
                    }
                printf("fp8 hd %3d group %d bs %2d n_q %d qscale %.0f: vs unrounded K/V max err "
                       "%.4f of max|v| (%.2f of "
                       "its bound); vs FP8 values %.3f of the float bound\n",
                       hd, group, bs, cf->n_q, cf->qscale, e_raw / vmax, r_raw, worst);
                assert_true(r_raw <= 1.0);
            }
            /* more threads may split the key range, but the segments are folded alike:
             * the same bits as one thread */
            if (nth == 1) memcpy(out1, out, sizeof(float) * (size_t)(n_tok * ldo));
            else
                for (int64_t i = 0; i < n_tok * ldo; i++)
                    if (!isnan(out1[i])) assert_memory_equal(&out[i], &out1[i], sizeof(float));
            /* the padding between rows of out is left alone */
            for (int t = 0; t < n_tok; t++)
                for (int64_t i = (int64_t)cf->n_q * hd; i < ldo; i++)
                    assert_true(isnan(out[t * ldo + i]));
            cpu_attn_free(a);
            threadpool_free(tp);
        }
    }
    cpu_attn_force_scalar(0);
    free(out);
    free(out1);
    free(sc);
    free(tol);
    free(tol_raw);
    free(ref);
    free(q);
    free(seq_of);
    free(pos);
    free(kc);
    free(vc);
    free(kd);
    free(vd);
    free(kraw);
    free(vraw);
    free(kexp);
    free(vexp);
    free(ksink);
    free(vsink);
    free(kf);
    free(vf);
    free(raw);
    free(perm);
    free(block_off);
}

/* a prompt from 0, a chunk starting mid-sequence, two decode tokens, a 1-token prompt */
static const struct seqspec ragged[] = {
    {70, 0, 70}, {150, 83, 67}, {40, 39, 1}, {200, 199, 1}, {1, 0, 1}};

static void test_ragged(void **state) {
    (void)state;
    const enum dtype kvs[] = {DT_F32, DT_F16, DT_F8_E4M3};
    const int hds[] = {64, 128, 40};
    const int bss[] = {16, 1, 7};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                /* SmolLM2-like GQA: 9 heads over 3 KV heads, whole model on one rank */
                struct config c = {kvs[k], hds[i], 9, 3, bss[j], 9, 0, 1.0f};
                run_case(&c, ragged, 5);
                /* tp 2 as the shard plan cuts it: heads 5..8 (KV heads 1..2) on rank 1 */
                c.n_q = 4;
                c.q_head0 = 5;
                run_case(&c, ragged, 5);
                /* rank 0's heads 0..4: the second KV group cut in the middle */
                c.n_q = 5;
                c.q_head0 = 0;
                run_case(&c, ragged, 5);
            }
    printf("fp8: %ld sequences read their first positions from the sink\n", g_sink_seqs);
    assert_true(g_sink_seqs > 0);
}

static void test_groups(void **state) {
    (void)state;
    /* MHA (group 1) and group 4, one long prompt in two chunks, peaky softmax */
    const struct seqspec two[] = {{300, 0, 150}, {300, 150, 150}};
    struct config mha = {DT_F16, 64, 4, 4, 16, 4, 0, 3.0f};
    run_case(&mha, two, 1);
    run_case(&mha, two + 1, 1);
    struct config g4 = {DT_F32, 128, 8, 2, 16, 8, 0, 3.0f};
    run_case(&g4, two, 1);
    run_case(&g4, two + 1, 1);
    struct config f8 = {DT_F8_E4M3, 128, 8, 2, 16, 8, 0, 3.0f};
    run_case(&f8, two, 1);
    run_case(&f8, two + 1, 1);
}

static void test_decode_split(void **state) {
    (void)state;
    /* one decode token over a long context: fewer items than threads, so the key range
     * is split and merged (3 threads); lengths on and off the 64-key tiles */
    const int lens[] = {1, 63, 64, 65, 700, 1500};
    for (int i = 0; i < 6; i++) {
        struct seqspec s = {lens[i], lens[i] - 1, 1};
        struct config c = {DT_F16, 64, 9, 3, 16, 9, 0, 2.0f};
        run_case(&c, &s, 1);
        c.n_q = 4;
        c.q_head0 = 5;
        run_case(&c, &s, 1);
        struct config c1 = {DT_F32, 128, 4, 4, 7, 1, 2, 2.0f}; /* one head on this rank */
        run_case(&c1, &s, 1);
        struct config c8 = {DT_F8_E4M3, 64, 9, 3, 16, 4, 5, 2.0f};
        run_case(&c8, &s, 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ragged),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_decode_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
