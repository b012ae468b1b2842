/* A candidate token of a logits row: its logit and its id in the whole vocabulary. The rows
 * of requests that need only a row's best few entries (greedy, small top_k: sampler_light)
 * come back as their best candidates instead of the whole vocabulary
 * (docs/architecture.md#logits): every rank reduces its vocabulary shard on its device, and
 * only candidates cross ranks and reach the host.
 *
 * The order, everywhere candidates are listed: larger logit first, equal logits by lower id.
 * NaN logits are never candidates (a row with fewer than k others pads with {-inf, -1}). */
#ifndef TPD_LOGIT_CAND_H
#define TPD_LOGIT_CAND_H

#include <stdint.h>

struct logit_cand {
    float v;
    int32_t id;
};

/* The most candidates a step may ask for per row. */
#define LOGIT_CANDS_MAX 64

/* a comes first in the order above (neither NaN) */
static inline int logit_cand_before(float av, int32_t ai, float bv, int32_t bi) {
    return av > bv || (av == bv && ai < bi);
}

/* out[0..k) = the k best entries of x[0..n) (ids = index + id0), in the order above; past
 * the row's non-NaN entries {-INFINITY, -1}. 1 <= k <= LOGIT_CANDS_MAX. The CPU backend's
 * top_cands, and the reference the device kernel is tested against. */
void logit_cands_select(struct logit_cand *out, const float *x, int n, int32_t id0, int k);

/* out[0..k) = the k best of n_lists lists (each sorted in the order above, k entries,
 * padding {-INFINITY, -1} last): what selecting from the lists' rows put end to end gives,
 * when each list is its row's best k. */
void logit_cands_merge(struct logit_cand *out, const struct logit_cand *const lists[], int n_lists,
                       int k);

#endif
