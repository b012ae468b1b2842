/* The mixture-of-experts MLP of one layer on one rank (model/hparams.h says which layers):
 * the router runs on every rank on the same inputs, so every rank makes the same choices
 * and none waits for another's. The choices come to the host, which groups
 * the tokens by expert; each of this rank's experts then multiplies its tokens' rows at
 * once (its weights read once per step), and one combine writes each token's weighted sum
 * of its experts' outputs (and of the shared expert's), this rank's part of the MLP output
 * that the all-reduce after the MLP sums as for a dense one. Owned by the compute thread. */
#ifndef TPD_MOE_H
#define TPD_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* Buffers for steps of up to cap_tokens tokens (moe_reserve grows them). */
struct moe_state {
    int cap_tokens;
    float *logits;      /* backend: [T][ld] router logits (and the shared expert's gate) */
    float *xg, *yg;     /* backend: inputs grouped by expert and the experts' outputs */
    float *gu, *hb;     /* backend: gate+up and SwiGLU rows of every (token, expert) pair */
    int32_t *idx;       /* backend: rows [T * k] | pos [T * kk] | weights [T * kk] (floats) */
    float *host_logits; /* host copies */
    int32_t *host_idx;
    int32_t *ids;           /* host: [T * k] chosen experts */
    float *w;               /* host: [T * k] their weights */
    int32_t *count, *start; /* host: [n_exp + 1] tokens of each local expert, first row */
    int32_t *owner, *load;  /* host, expert parallel: each expert's rank; pairs per rank */
    struct bmatmul *ops;    /* host: [2 * n_exp] a grouped matmul's products (experts_swiglu) */
    /* Expert parallel: the (token, expert) pairs of the busiest rank and of all ranks,
     * summed over every layer of every step (the load imbalance is busiest x tp / all). */
    double pairs_busiest, pairs_all;
};

/* Token t's k experts: the largest logits[t * ld + e] of e < n_experts, larger first, ties
 * to the lower id (NaN never chosen before a number); w their softmax probabilities over
 * all n_experts, divided by the chosen ones' sum when norm. */
void moe_route(const float *logits, int64_t ld, int T, int n_experts, int k, int norm, int32_t *ids,
               float *w);
/* Groups the (token, expert) pairs of experts [e0, e0 + n_exp) by expert, tokens in order
 * within each: rows[start[i] + j] is the token of expert e0 + i's j-th row, count[i] its
 * rows; pos[t * kk + j] the row pair (t, j) went to, or -1 when expert ids[t * k + j] is
 * another rank's (kk >= k: the pairs of a token are kk apart). Returns the rows in all. */
int moe_group(const int32_t *ids, int T, int k, int kk, int e0, int n_exp, int32_t *count,
              int32_t *start, int32_t *rows, int32_t *pos);

/* Backend bytes of the buffers for steps of up to max_tokens tokens (the memory plan). */
size_t moe_activation_bytes(const struct model *m, int max_tokens);
void moe_reserve(struct moe_state *ms, const struct model *m, int n_tokens);
void moe_free(struct moe_state *ms, struct backend *be);
/* y[T][dim] = this rank's part of layer lw's MLP of xb[T][dim]. Waits for the router's
 * logits (a download): not for a captured graph. */
/* One SwiGLU MLP over T rows of x (dim wide) into y (dim wide): gate and up (fused: one
 * matrix of 2 nf rows; else two of nf) into gu (T x 2 nf), silu(gate) * up into hb (T x nf),
 * then down. Each expert, the shared expert and the dense layers' MLP (forward.c). */
void moe_swiglu(struct backend *be, float *y, const float *x, int dim, int T,
                const struct bweight *gate_up, int fused, const struct bweight *down, int nf,
                float *gu, float *hb);
void moe_forward(const struct model *m, struct moe_state *ms, const struct layer_weights *lw,
                 float *y, const float *xb, int T);

#endif
