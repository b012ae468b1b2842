#include "attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/fatal.h"
#include "../../util/fp8.h"
#include "../../util/half.h"
#include "attention_avx2.h"
#include "attention_item.h"

/* Work: consecutive batch tokens of one sequence form tiles of up to `tq` tokens; an item
 * is (tile, KV head, key range). All query heads of the KV head's group and all tokens of
 * the tile share each converted K/V tile, so every cached element is converted once per
 * item instead of once per query, and the scores never leave a 64-key tile (online
 * softmax: running max, sum and accumulator per row). Items are claimed from an atomic
 * counter by whichever thread runs a chunk, most expensive first (later tiles of a
 * sequence see more keys), so uneven causal work still keeps every thread busy. When a
 * step has fewer items than twice the threads (decode of one or two long sequences), the
 * key range is split and the partial max/sum/accumulators are merged after the run. */

static atomic_int force_scalar;

void cpu_attn_force_scalar(int on) {
    atomic_store_explicit(&force_scalar, on, memory_order_relaxed);
}

int cpu_attn_has_avx2(void) {
    return !atomic_load_explicit(&force_scalar, memory_order_relaxed) &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

struct tile {
    int t0, n_tok, seq, pmax;
};

struct cpu_attn {
    int n_bufs;
    size_t buf_floats; /* per buffer */
    float **bufs;      /* one per pool chunk index */
    float *part;
    size_t part_floats;
    struct tile *tiles;
    int tiles_cap;
};

struct cpu_attn *cpu_attn_create(void) {
    return xcalloc(1, sizeof(struct cpu_attn));
}

void cpu_attn_free(struct cpu_attn *a) {
    if (!a) return;
    for (int i = 0; i < a->n_bufs; i++) free(a->bufs[i]);
    free(a->bufs);
    free(a->part);
    free(a->tiles);
    free(a);
}

/* The scalar item: the same tiling as the AVX2 one, keys row-major. */
static void attn_item_scalar(const struct attn_call *c, const struct attn_item *it,
                             struct attn_buf *w) {
    const int hd = c->hd, rows = it->n_tok * it->n_h;
    const struct attn_batch *b = c->b;
    for (int r = 0; r < rows; r++) {
        const int t = it->t0 + r / it->n_h, h = it->h0 + r % it->n_h;
        const float *q = c->q + t * c->ldq + (int64_t)h * hd;
        for (int d = 0; d < hd; d++) w->qs[(int64_t)r * hd + d] = q[d] * c->scale;
    }
    attn_begin(it, w, hd);
    for (int kt = it->kt0; kt < it->kt1; kt++) {
        const int j0 = kt * ATTN_KT;
        int nk = it->pmax + 1 - j0;
        if (nk <= 0) break;
        if (nk > ATTN_KT) nk = ATTN_KT;
        for (int j = 0; j < nk; j++) {
            const int64_t at = attn_kv_index(b, it->seq, j0 + j, c->n_kv, hd) +
                               (int64_t)it->kvh * hd;
            int64_t sk; /* FP8: the position's row in the sink, when it has one */
            float *kd = w->kt + (int64_t)j * hd, *vd = w->vt + (int64_t)j * hd;
            if (c->kv_type == DT_F32) {
                memcpy(kd, (const float *)c->k + at, sizeof(float) * (size_t)hd);
                memcpy(vd, (const float *)c->v + at, sizeof(float) * (size_t)hd);
            } else if (c->kv_type == DT_F8_E4M3 &&
                       (sk = attn_sink_index(c, it->seq, j0 + j)) >= 0) {
                const int64_t s = sk + (int64_t)it->kvh * hd;
                const float kx = fp8_exp2(c->k_exp[at / hd]), vx = fp8_exp2(c->v_exp[at / hd]);
                for (int d = 0; d < hd; d++) {
                    kd[d] = f16_to_f32(c->kvl->k_sink[s + d]) * kx;
                    vd[d] = f16_to_f32(c->kvl->v_sink[s + d]) * vx;
                }
            } else if (c->kv_type == DT_F8_E4M3) {
                const uint8_t *ks = (const uint8_t *)c->k + at, *vs = (const uint8_t *)c->v + at;
                const float kx = fp8_exp2(c->k_exp[at / hd]), vx = fp8_exp2(c->v_exp[at / hd]);
                for (int d = 0; d < hd; d++) {
                    kd[d] = fp8_e4m3_to_f32(ks[d]) * kx;
                    vd[d] = fp8_e4m3_to_f32(vs[d]) * vx;
                }
            } else {
                const uint16_t *ks = (const uint16_t *)c->k + at, *vs = (const uint16_t *)c->v + at;
                for (int d = 0; d < hd; d++) {
                    kd[d] = f16_to_f32(ks[d]);
                    vd[d] = f16_to_f32(vs[d]);
                }
            }
        }
        for (int r = 0; r < rows; r++) {
            const int pos = b->pos[it->t0 + r / it->n_h];
            int nv = pos + 1 - j0;
            if (nv <= 0) continue;
            if (nv > nk) nv = nk;
            const float *qs = w->qs + (int64_t)r * hd;
            float s[ATTN_KT], mx = w->m[r];
            for (int j = 0; j < nv; j++) {
                const float *k = w->kt + (int64_t)j * hd;
                float dot = 0;
                for (int d = 0; d < hd; d++) dot += qs[d] * k[d];
                s[j] = dot;
                if (dot > mx) mx = dot;
            }
            const float corr = expf(w->m[r] - mx); /* 0 on the first tile: m was -inf */
            float *acc = w->acc + (int64_t)r * hd, sum = 0;
            for (int d = 0; d < hd; d++) acc[d] *= corr;
            for (int j = 0; j < nv; j++) {
                const float p = expf(s[j] - mx);
                const float *v = w->vt + (int64_t)j * hd;
                sum += p;
                for (int d = 0; d < hd; d++) acc[d] += p * v[d];
            }
            w->l[r] = w->l[r] * corr + sum;
            w->m[r] = mx;
        }
        if ((kt + 1) % ATTN_SEG == 0 || kt + 1 == it->kt1)
            attn_segment_end(c, it, w, kt / ATTN_SEG);
    }
    if (c->n_split == 1) attn_finish(c, it, w);
}

struct run_ctx {
    const struct attn_call *c;
    const struct tile *tiles;
    int n_tiles;
    int n_kvl, kv_first, q_head0, group, kv_head0;
    int avx2;
    float *const *bufs;
    int rows_max;
    atomic_int next;
    int n_items;
};

static void attn_task(void *p, int ith, int nth) {
    (void)nth;
    struct run_ctx *x = p;
    const struct attn_call *c = x->c;
    const int hd = c->hd, per_tile = x->n_kvl * c->n_split;
    float *base = x->bufs[ith];
    struct attn_buf w = {
        .kt = base, .vt = base + (size_t)hd * ATTN_KT, .qs = base + (size_t)2 * hd * ATTN_KT};
    w.acc = w.qs + (size_t)x->rows_max * hd;
    w.m = w.acc + (size_t)x->rows_max * hd;
    w.l = w.m + x->rows_max;
    w.facc = w.l + x->rows_max;
    w.fm = w.facc + (size_t)x->rows_max * hd;
    w.fl = w.fm + x->rows_max;
    int i;
    while ((i = atomic_fetch_add_explicit(&x->next, 1, memory_order_relaxed)) < x->n_items) {
        const struct tile *tl = &x->tiles[x->n_tiles - 1 - i / per_tile];
        const int rem = i % per_tile, kvl = rem / c->n_split, split = rem % c->n_split;
        const int kvh = x->kv_first + kvl, g = kvh + x->kv_head0;
        int h0 = g * x->group - x->q_head0, h1 = (g + 1) * x->group - x->q_head0;
        if (h0 < 0) h0 = 0;
        if (h1 > c->n_q) h1 = c->n_q;
        /* a split takes whole segments, so its partials are the unsplit item's */
        const int n_kt = tl->pmax / ATTN_KT + 1, n_seg = (n_kt + ATTN_SEG - 1) / ATTN_SEG;
        const int s0 = (int)((int64_t)split * n_seg / c->n_split),
                  s1 = (int)((int64_t)(split + 1) * n_seg / c->n_split);
        struct attn_item it = {.t0 = tl->t0,
                               .n_tok = tl->n_tok,
                               .seq = tl->seq,
                               .pmax = tl->pmax,
                               .kvh = kvh,
                               .h0 = h0,
                               .n_h = h1 - h0,
                               .kt0 = s0 * ATTN_SEG,
                               .kt1 = s1 * ATTN_SEG < n_kt ? s1 * ATTN_SEG : n_kt,
                               .split = split};
        if (it.kt0 >= it.kt1) continue;
        if (x->avx2) attn_item_avx2(c, &it, &w);
        else attn_item_scalar(c, &it, &w);
    }
}

/* Tiles of up to tq consecutive tokens of one sequence; returns how many. */
static int make_tiles(struct tile *tiles, const struct attn_batch *b, int tq) {
    int n = 0;
    for (int t = 0; t < b->n_tokens;) {
        struct tile tl = {.t0 = t, .n_tok = 0, .seq = b->seq_of[t], .pmax = 0};
        while (t < b->n_tokens && tl.n_tok < tq && b->seq_of[t] == tl.seq) {
            if (b->pos[t] > tl.pmax) tl.pmax = b->pos[t];
            tl.n_tok++;
            t++;
        }
        tiles[n++] = tl;
    }
    return n;
}

/* An item's key conversion (K transposed and V, to f32) costs about as much as scoring
 * ATTN_CONVERT_ROWS query rows against those keys (measured with bench_kv_attention: one
 * thread, SmolLM2's shape, 1 and 4 tokens of one sequence). */
#define ATTN_CONVERT_ROWS 10.0

/* Estimated time of the items these tiles make (n_kvl per tile), in row-key units, over nth
 * threads taking items as they free up: the average load plus the largest item's tail. */
static double tile_cost(const struct tile *tiles, int n_tiles, int n_kvl, int gl, int nth) {
    double total = 0, most = 0;
    for (int i = 0; i < n_tiles; i++) {
        const double w = (tiles[i].pmax + 1.0) * (ATTN_CONVERT_ROWS + (double)tiles[i].n_tok * gl);
        total += w * n_kvl;
        if (w > most) most = w;
    }
    return total / nth + most * (1.0 - 1.0 / nth);
}

/* Folds each row's segment partials, in order, into out. */
static void merge_splits(const struct attn_call *c) {
    const struct attn_batch *b = c->b;
    const int hd = c->hd;
    for (int t = 0; t < b->n_tokens; t++)
        for (int h = 0; h < c->n_q; h++) {
            const float *p = c->part + ((int64_t)t * c->n_q + h) * c->n_seg * (hd + 2);
            float *o = c->out + t * c->ldo + (int64_t)h * hd, M = 0, L = 0;
            for (int s = 0; s <= b->pos[t] / (ATTN_KT * ATTN_SEG); s++) {
                const float *ps = p + s * (hd + 2);
                attn_fold(&M, &L, o, ps[hd], ps[hd + 1], ps, hd);
            }
            const float inv = 1.0f / L;
            for (int d = 0; d < hd; d++) o[d] *= inv;
        }
}

void cpu_attn_run(struct cpu_attn *a, struct threadpool *tp, float *out, int64_t ldo,
                  const float *q, int64_t ldq, int n_q, int q_head0, int group, int kv_head0,
                  const struct kv_layer *kv, enum dtype kv_type, int n_kv, int hd,
                  const struct attn_batch *b) {
    if (b->n_tokens <= 0 || n_q <= 0) return;
    if (hd <= 0 || group <= 0 ||
        (kv_type != DT_F32 && kv_type != DT_F16 && kv_type != DT_F8_E4M3) ||
        (kv_type == DT_F8_E4M3 && (!kv->k_exp || !kv->v_exp)))
        FATAL("cpu attention: hd %d, group %d, kv type %s", hd, group, dtype_name(kv_type));
    const int nth = threadpool_size(tp);
    const int kv_first = q_head0 / group - kv_head0,
              kv_last = (q_head0 + n_q - 1) / group - kv_head0;
    const int n_kvl = kv_last - kv_first + 1, gl = group < n_q ? group : n_q;

    if (b->n_tokens > a->tiles_cap) {
        free(a->tiles);
        a->tiles_cap = b->n_tokens;
        a->tiles = xmalloc(sizeof(struct tile) * (size_t)a->tiles_cap);
    }
    /* about 64 query rows per item keep the scaled queries and accumulators in L2 while
     * amortising each converted K/V tile; fewer when that leaves threads idle, as long as
     * the time saved beats converting the keys once more per extra item (tile_cost) */
    int tq = 64 / gl > 1 ? 64 / gl : 1, best_tq = tq;
    double best = tile_cost(a->tiles, make_tiles(a->tiles, b, tq), n_kvl, gl, nth);
    while (tq > 1) {
        tq = (tq + 1) / 2;
        const double t = tile_cost(a->tiles, make_tiles(a->tiles, b, tq), n_kvl, gl, nth);
        if (t < best) best = t, best_tq = tq;
    }
    tq = best_tq;
    int n_tiles = make_tiles(a->tiles, b, tq);
    int max_seg = 1;
    for (int i = 0; i < n_tiles; i++)
        if (a->tiles[i].pmax / (ATTN_KT * ATTN_SEG) + 1 > max_seg)
            max_seg = a->tiles[i].pmax / (ATTN_KT * ATTN_SEG) + 1;
    int n_split = 1;
    if (nth > 1 && n_tiles * n_kvl < 2 * nth) {
        const int base = n_tiles * n_kvl;
        n_split = (2 * nth + base - 1) / base;
        if (n_split > max_seg) n_split = max_seg;
    }

    const int rows_max = tq * gl;
    const size_t need = (size_t)2 * hd * ATTN_KT + (size_t)3 * rows_max * hd + (size_t)4 * rows_max;
    if (nth > a->n_bufs || need > a->buf_floats) {
        for (int i = 0; i < a->n_bufs; i++) free(a->bufs[i]);
        free(a->bufs);
        a->n_bufs = nth;
        a->buf_floats = need > a->buf_floats ? need : a->buf_floats;
        a->bufs = xmalloc(sizeof(float *) * (size_t)nth);
        for (int i = 0; i < nth; i++) a->bufs[i] = xmalloc(sizeof(float) * a->buf_floats);
    }
    if (n_split > 1) {
        const size_t pf = (size_t)b->n_tokens * n_q * max_seg * (hd + 2);
        if (pf > a->part_floats) {
            free(a->part);
            a->part_floats = pf;
            a->part = xmalloc(sizeof(float) * pf);
        }
    }
    const struct attn_call c = {.out = out,
                                .ldo = ldo,
                                .q = q,
                                .ldq = ldq,
                                .n_q = n_q,
                                .hd = hd,
                                .n_kv = n_kv,
                                .k = kv->k,
                                .v = kv->v,
                                .k_exp = kv->k_exp,
                                .v_exp = kv->v_exp,
                                .kvl = kv,
                                .kv_type = kv_type,
                                .b = b,
                                .scale = 1.0f / sqrtf((float)hd),
                                .n_split = n_split,
                                .n_seg = max_seg,
                                .part = a->part};
    struct run_ctx x = {.c = &c,
                        .tiles = a->tiles,
                        .n_tiles = n_tiles,
                        .n_kvl = n_kvl,
                        .kv_first = kv_first,
                        .q_head0 = q_head0,
                        .group = group,
                        .kv_head0 = kv_head0,
                        .avx2 = hd % 8 == 0 && cpu_attn_has_avx2(),
                        .bufs = a->bufs,
                        .rows_max = rows_max,
                        .n_items = n_tiles * n_kvl * n_split};
    atomic_init(&x.next, 0);
    threadpool_run(tp, attn_task, &x);
    if (n_split > 1) merge_splits(&c);
}
