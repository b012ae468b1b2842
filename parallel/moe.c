#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

/* a before b as a choice: the larger logit, NaN last, ties to the lower id */
static int better(float la, int a, float lb, int b) {
    if (isnan(lb)) return !isnan(la) || a < b;
    if (isnan(la)) return 0;
    return la > lb || (la == lb && a < b);
}

/* softmax probability of logit v given the row's largest logit and sum of exponentials */
static double prob(float v, double mx, double sum) {
    return isnan(v) || !(sum > 0) ? 0 : exp((double)v - mx) / sum;
}

void moe_route(const float *logits, int64_t ld, int T, int n_experts, int k, int norm, int32_t *ids,
               float *w) {
    for (int t = 0; t < T; t++) {
        const float *l = logits + (int64_t)t * ld;
        int32_t *id = ids + (int64_t)t * k;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n_experts; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++) taken = id[i] == e;
                if (!taken && (best < 0 || better(l[e], e, l[best], best))) best = e;
            }
            id[j] = best;
        }
        double mx = -INFINITY, sum = 0, chosen = 0;
        for (int e = 0; e < n_experts; e++)
            if (!isnan(l[e]) && l[e] > mx) mx = l[e];
        for (int e = 0; e < n_experts; e++) sum += isnan(l[e]) ? 0 : exp((double)l[e] - mx);
        for (int j = 0; j < k; j++) chosen += prob(l[id[j]], mx, sum);
        for (int j = 0; j < k; j++) {
            double pj = prob(l[id[j]], mx, sum);
            w[(int64_t)t * k + j] = (float)(norm && chosen > 0 ? pj / chosen : pj);
        }
    }
}

int moe_group(const int32_t *ids, int T, int k, int kk, int e0, int n_exp, int32_t *count,
              int32_t *start, int32_t *rows, int32_t *pos) {
    memset(count, 0, sizeof *count * (size_t)(n_exp + 1));
    for (int64_t i = 0; i < (int64_t)T * k; i++)
        if (ids[i] >= e0 && ids[i] < e0 + n_exp) count[ids[i] - e0]++;
    int n = 0;
    for (int e = 0; e < n_exp; e++) {
        start[e] = n;
        n += count[e];
        count[e] = 0; /* refilled below */
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e = ids[(int64_t)t * k + j] - e0;
            int32_t *p = &pos[(int64_t)t * kk + j];
            if (e < 0 || e >= n_exp) {
                *p = -1;
                continue;
            }
            *p = start[e] + count[e]++;
            rows[*p] = t;
        }
    return n;
}

/* Widths of a step's buffers: router logits per token, pairs per token (with the shared
 * expert's), the widest MLP slice. */
struct moe_dims {
    int ld, k, kk, nf;
};

static struct moe_dims dims(const struct model *m) {
    const struct model_hparams *hp = &m->hp;
    int sh = hp->shexp_ffn_dim > 0;
    int nf = m->sp.n_effn > m->sp.n_sffn ? m->sp.n_effn : m->sp.n_sffn;
    return (struct moe_dims){hp->n_experts + sh, hp->n_experts_used, hp->n_experts_used + sh, nf};
}

/* bytes of each buffer for T tokens: logits, xg, yg, gu, hb, idx (gu and hb: a row per
 * pair, so that all the experts' products go to the backend at once) */
static void sizes(const struct model *m, size_t T, size_t b[6]) {
    const struct moe_dims d = dims(m);
    const size_t f = sizeof(float), dim = (size_t)m->hp.dim;
    b[0] = T * (size_t)d.ld * f;
    b[1] = T * (size_t)d.k * dim * f;
    b[2] = T * (size_t)d.kk * dim * f;
    b[3] = T * (size_t)d.k * 2 * (size_t)d.nf * f;
    b[4] = T * (size_t)d.k * (size_t)d.nf * f;
    b[5] = T * ((size_t)d.k + 2 * (size_t)d.kk) * sizeof(int32_t);
}

size_t moe_activation_bytes(const struct model *m, int max_tokens) {
    if (m->hp.n_experts <= 0) return 0;
    size_t b[6], sum = 0;
    sizes(m, (size_t)(max_tokens > 0 ? max_tokens : 1), b);
    for (int i = 0; i < 6; i++) sum += b[i];
    return sum;
}

static void bfree(struct backend *be, void *p) {
    if (p) be->free(be->ctx, p);
}

void moe_free(struct moe_state *ms, struct backend *be) {
    void *bufs[] = {ms->logits, ms->xg, ms->yg, ms->gu, ms->hb, ms->idx};
    for (unsigned i = 0; i < sizeof bufs / sizeof *bufs; i++) bfree(be, bufs[i]);
    free(ms->host_logits);
    free(ms->host_idx);
    free(ms->ids);
    free(ms->w);
    free(ms->count);
    free(ms->start);
    free(ms->owner);
    free(ms->load);
    free(ms->ops);
    double busiest = ms->pairs_busiest, all = ms->pairs_all; /* counters outlive the buffers */
    memset(ms, 0, sizeof *ms);
    ms->pairs_busiest = busiest;
    ms->pairs_all = all;
}

void moe_reserve(struct moe_state *ms, const struct model *m, int n_tokens) {
    if (m->hp.n_experts <= 0 || n_tokens <= ms->cap_tokens) return;
    struct backend *be = m->be;
    moe_free(ms, be);
    size_t b[6], T = (size_t)n_tokens;
    sizes(m, T, b);
    float **f[] = {&ms->logits, &ms->xg, &ms->yg, &ms->gu, &ms->hb};
    for (int i = 0; i < 5; i++) *f[i] = be->alloc(be->ctx, b[i] ? b[i] : 1);
    ms->idx = be->alloc(be->ctx, b[5]);
    ms->host_logits = xmalloc(b[0]);
    ms->host_idx = xmalloc(b[5]);
    const struct moe_dims d = dims(m);
    ms->ids = xmalloc(T * (size_t)d.k * sizeof *ms->ids);
    ms->w = xmalloc(T * (size_t)d.k * sizeof *ms->w);
    ms->count = xmalloc(((size_t)m->sp.n_exp + 1) * sizeof *ms->count);
    ms->start = xmalloc(((size_t)m->sp.n_exp + 1) * sizeof *ms->start);
    ms->owner = xmalloc((size_t)m->hp.n_experts * sizeof *ms->owner);
    ms->load = xmalloc((size_t)m->sp.tp * sizeof *ms->load);
    ms->ops = xmalloc(2 * ((size_t)m->sp.n_exp + 1) * sizeof *ms->ops);
    for (int r = 0; r < m->sp.tp; r++) {
        int e0, ne;
        shard_split(m->hp.n_experts, m->sp.tp, r, &e0, &ne);
        for (int e = e0; e < e0 + ne; e++) ms->owner[e] = r;
    }
    ms->cap_tokens = n_tokens;
}

/* out[T][dim] = down(silu(gate x) * up x) of one expert's slice of nf columns */
void moe_swiglu(struct backend *be, float *y, const float *x, int dim, int T,
                const struct bweight *gate_up, int fused, const struct bweight *down, int nf,
                float *gu, float *hb) {
    be->matmul(be->ctx, gu, 2 * nf, x, dim, T, &gate_up[0]);
    if (!fused) be->matmul(be->ctx, gu + nf, 2 * nf, x, dim, T, &gate_up[1]);
    be->silu_mul(be->ctx, hb, nf, gu, gu + nf, 2 * nf, T, nf);
    be->matmul(be->ctx, y, dim, hb, nf, T, down);
}

/* Every local expert's SwiGLU over its rows of xg (n in all, grouped by ms->start/count) into
 * yg: the gate and up products of all of them in one grouped matmul, one silu_mul over all n
 * rows, the down products in another: three backend calls a layer rather than three per
 * expert, the same bits as moe_swiglu per expert. */
static void experts_swiglu(struct backend *be, struct moe_state *ms, const struct layer_weights *lw,
                           int n_exp, int n, int dim, int nf) {
    struct bmatmul *ops = ms->ops;
    int no = 0;
    for (int i = 0; i < n_exp; i++) {
        if (!ms->count[i]) continue;
        const struct moe_expert *x = &lw->experts[i];
        const size_t at = (size_t)ms->start[i];
        const struct bmatmul g = {.y = ms->gu + at * 2 * (size_t)nf,
                                  .ldy = 2 * nf,
                                  .x = ms->xg + at * (size_t)dim,
                                  .ldx = dim,
                                  .T = ms->count[i],
                                  .w = &x->gate_up[0]};
        ops[no++] = g;
        if (x->gate_up_fused) continue;
        ops[no] = g;
        ops[no].y += nf;
        ops[no++].w = &x->gate_up[1];
    }
    be->matmul_grouped(be->ctx, ops, no);
    be->silu_mul(be->ctx, ms->hb, nf, ms->gu, ms->gu + nf, 2 * nf, n, nf);
    no = 0;
    for (int i = 0; i < n_exp; i++) {
        if (!ms->count[i]) continue;
        const size_t at = (size_t)ms->start[i];
        ops[no++] = (struct bmatmul){.y = ms->yg + at * (size_t)dim,
                                     .ldy = dim,
                                     .x = ms->hb + at * (size_t)nf,
                                     .ldx = nf,
                                     .T = ms->count[i],
                                     .w = &lw->experts[i].down};
    }
    be->matmul_grouped(be->ctx, ops, no);
}

/* Expert parallel: how many of the step's pairs each rank computes (every rank routes alike,
 * so any rank can count for all). */
static void count_load(const struct model *m, struct moe_state *ms, int T, int k) {
    const int tp = m->sp.tp;
    memset(ms->load, 0, sizeof *ms->load * (size_t)tp);
    for (int64_t i = 0; i < (int64_t)T * k; i++) ms->load[ms->owner[ms->ids[i]]]++;
    int32_t busiest = 0;
    for (int r = 0; r < tp; r++) busiest = ms->load[r] > busiest ? ms->load[r] : busiest;
    ms->pairs_busiest += busiest;
    ms->pairs_all += (double)T * k;
}

void moe_forward(const struct model *m, struct moe_state *ms, const struct layer_weights *lw,
                 float *y, const float *xb, int T) {
    struct backend *be = m->be;
    void *bc = be->ctx;
    const struct model_hparams *hp = &m->hp;
    const struct shard_plan *sp = &m->sp;
    const struct moe_dims d = dims(m);
    const int E = hp->n_experts, k = d.k, kk = d.kk, dim = hp->dim, sh = kk > k;
    const int nf = sp->n_effn, ns = sp->n_sffn;
    // the router (and the shared expert's gate) on every rank, to the host
    be->matmul(bc, ms->logits, d.ld, xb, dim, T, &lw->router);
    if (sh) be->matmul(bc, ms->logits + E, d.ld, xb, dim, T, &lw->shexp_gate);
    be->download(bc, ms->host_logits, ms->logits, sizeof(float) * (size_t)T * (size_t)d.ld);
    moe_route(ms->host_logits, d.ld, T, E, k, hp->moe_norm_topk, ms->ids, ms->w);
    if (sp->ep) count_load(m, ms, T, k);
    // this rank's experts' tokens, grouped; each token's pairs with their weights
    int32_t *rows = ms->host_idx, *pos = rows + (size_t)T * k;
    float *wts = (float *)(pos + (size_t)T * kk);
    int n = moe_group(ms->ids, T, k, kk, sp->exp0, nf > 0 ? sp->n_exp : 0, ms->count, ms->start,
                      rows, pos);
    for (int t = 0; t < T; t++) {
        memcpy(wts + (size_t)t * kk, ms->w + (size_t)t * k, sizeof(float) * (size_t)k);
        if (!sh) continue;
        pos[(size_t)t * kk + k] = ns > 0 ? n + t : -1;
        wts[(size_t)t * kk + k] =
            (float)(1.0 / (1.0 + exp(-(double)ms->host_logits[(size_t)t * d.ld + E])));
    }
    be->upload(bc, ms->idx, ms->host_idx, sizeof(int32_t) * (size_t)T * (size_t)(k + 2 * kk));
    const int32_t *drows = ms->idx, *dpos = ms->idx + (size_t)T * k;
    const float *dw = (const float *)(dpos + (size_t)T * kk);
    if (n > 0) be->gather_rows(bc, ms->xg, xb, drows, n, dim);
    if (n > 0 && nf > 0) experts_swiglu(be, ms, lw, sp->n_exp, n, dim, nf);
    if (sh && ns > 0)
        moe_swiglu(be, ms->yg + (size_t)n * (size_t)dim, xb, dim, T, lw->shexp_gate_up,
                   lw->shexp_fused, &lw->shexp_down, ns, ms->gu, ms->hb);
    be->moe_combine(bc, y, dim, ms->yg, dim, dpos, dw, T, kk, dim);
}
