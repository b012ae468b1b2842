/* forward(plan): one step of the model on this rank's shards, written once against the
 * backend op table. Every rank calls it with the same plan; the collectives inside the
 * stage's TP group (all-reduce after the embedding, after row-parallel Wo and W_down,
 * gather of the vocab shards) and the messages between pipeline stages (the residual
 * stream in from the previous stage, out to the next; logits from the last stage to rank
 * 0) are visible here. Rank 0 receives the logits. */
#ifndef TPD_FORWARD_H
#define TPD_FORWARD_H

#include "../comm/comm.h"
#include "kvcache.h"
#include "model.h"
#include "moe.h"
#include "plan.h"

/* Activation buffers, grown to the largest step seen. */
struct forward_state {
    int cap_tokens, cap_out;
    float *x, *xb, *qkv, *att, *y, *gu, *hb; /* backend memory */
    int32_t *idx, *idx_host; /* the plan's index arrays: backend buffer, host copy */
    size_t cap_idx;          /* int32 words in each */
    int32_t *tokens, *seq_of, *pos, *block_off, *blocks, *out_rows; /* in idx, set each step */
    float *xo, *logits_local;        /* [n_out][dim], [n_out][n_vocab local] */
    struct logit_cand *cands_local;  /* [n_out][LOGIT_CANDS_MAX]: plan->n_cands > 0 */
    float *host_local, *host_gather; /* host staging for the vocab gather */
    float *host_logits;   /* last stage's TP rank 0 when pp > 1: [n_out][vocab] for rank 0 */
    void *logits_send;    /* host_logits on its way to rank 0 (comm_isend_floats), or NULL */
    struct moe_state moe; /* mixture-of-experts layers' buffers */
};

void forward_state_init(struct forward_state *fs);
void forward_state_free(struct forward_state *fs, struct backend *be);
/* Completes the last stage's logits send still in flight, if any (before host_logits is
 * written or freed; engine_close calls it before forward_state_free). */
void forward_state_settle(struct forward_state *fs, struct comm *c);
/* Backend bytes of the activation buffers for steps of up to max_tokens tokens, all of them
 * wanting logits: what forward_state grows to (the memory plan counts it). */
size_t forward_activation_bytes(const struct model *m, int max_tokens);
/* logits (rank 0 only, may be NULL elsewhere): [plan->n_out][vocab] on the host (with
 * plan->n_cands > 0, each row begins with its candidates, the rest untouched), written
 * here when rank 0 is in the last stage (pp 1); else the last stage's TP rank 0 sends them to
 * rank 0 (tag COMM_TAG_LOGITS), which must have a receive posted (engine_submit). */
void forward(struct model *m, struct kvcache *kv, struct forward_state *fs,
             const struct step_plan *plan, struct comm *c, float *logits);

#endif
