/* The step plan: what one forward step computes, as a ragged batch. For each sequence,
 * its new tokens, the position of the first, its KV block table, and whether logits are
 * wanted for all its tokens or only the last. Rank 0 builds it and broadcasts it; every
 * rank runs forward() on the same plan. A plan with no sequences tells ranks to stop. */
#ifndef TPD_PLAN_H
#define TPD_PLAN_H

#include <stdint.h>

#include "../comm/comm.h"

/* n_seqs == -1 marks a heartbeat (engine_ping): nothing to run. */
struct step_plan {
    int n_seqs, n_tokens, n_blocks, n_out;
    int32_t *tokens;    /* [n_tokens] */
    int32_t *seq_of;    /* [n_tokens] */
    int32_t *pos;       /* [n_tokens] */
    int32_t *block_off; /* [n_seqs + 1] */
    int32_t *blocks;    /* [n_blocks] */
    int32_t *out_rows;  /* [n_out] indices of the tokens whose logits are returned */
    /* > 0: each logits row i with out_full[i] == 0 comes back as its n_cands best candidates
     * (util/logit_cand.h, at most engine_info's max_cands) at the start of the row's memory,
     * the others whole; 0: every row whole */
    int n_cands;
    int32_t *out_full; /* [n_out] 1: row i comes back whole (plan_add's default), 0: candidates */
    int cap_tokens, cap_seqs, cap_blocks;
};

void plan_init(struct step_plan *p);
void plan_free(struct step_plan *p);
void plan_clear(struct step_plan *p);
/* Appends a sequence: n tokens starting at position pos0, whose KV block table is
 * blocks[0..n_blocks) (covering positions up to pos0 + n - 1). */
void plan_add(struct step_plan *p, const int32_t *tokens, int n, int pos0, const int32_t *blocks,
              int n_blocks, int logits_all);
/* Collective: rank 0 sends its plan (plan_send); every other rank's plan is replaced by
 * it (plan_recv). The plan travels as the activations do: broadcast inside stage 0's TP
 * group, then from each rank to its counterpart (same TP rank) in the next stage, which
 * receives it (waiting idle) and passes it on before its own step. */
void plan_send(struct comm *c, const struct step_plan *p);
/* Whether out row i comes back whole (else as its n_cands candidates). */
static inline int plan_row_whole(const struct step_plan *p, int i) {
    return p->n_cands == 0 || p->out_full[i];
}
/* The logits rows of a step (n_out rows of vocab floats) packed in place for the last stage's
 * send to rank 0: each light row (n_cands > 0, out_full[i] == 0) shrinks to its 2 x n_cands
 * floats of candidates, whole rows stay whole; returns the floats now used. plan_rows_unpack
 * puts them back at row i x vocab, in place (what is past a light row's candidates is left
 * stale). */
size_t plan_rows_pack(const struct step_plan *p, float *rows, int vocab);
void plan_rows_unpack(int n_out, int n_cands, const int32_t *full, float *rows, int vocab);
void plan_recv(struct comm *c, struct step_plan *p);

#endif
