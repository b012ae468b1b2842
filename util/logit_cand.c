#include "logit_cand.h"

#include <math.h>
#include <stddef.h>

/* Insertion into a sorted list of at most k (small k: a shift beats a heap's branches, and
 * nearly every entry of a real row fails the first comparison with the current k-th). */
static void insert(struct logit_cand *c, int *n, int k, float v, int32_t id) {
    int i = *n < k ? (*n)++ : k - 1;
    while (i > 0 && logit_cand_before(v, id, c[i - 1].v, c[i - 1].id)) {
        c[i] = c[i - 1];
        i--;
    }
    c[i] = (struct logit_cand){v, id};
}

void logit_cands_select(struct logit_cand *out, const float *x, int n, int32_t id0, int k) {
    int m = 0, i = 0;
    for (; i < n && m < k; i++)
        if (x[i] == x[i]) insert(out, &m, k, x[i], id0 + i);
    /* full: an entry enters only when strictly better than the k-th (a later equal one has a
     * higher id, so it comes after) */
    float worst = m ? out[m - 1].v : INFINITY;
    for (; i < n; i++) {
        if (!(x[i] > worst)) continue; /* NaN fails too */
        insert(out, &m, k, x[i], id0 + i);
        worst = out[k - 1].v;
    }
    for (; m < k; m++) out[m] = (struct logit_cand){-INFINITY, -1};
}

void logit_cands_merge(struct logit_cand *out, const struct logit_cand *const lists[], int n_lists,
                       int k) {
    int at[n_lists > 0 ? n_lists : 1];
    for (int i = 0; i < n_lists; i++) at[i] = 0;
    for (int j = 0; j < k; j++) {
        const struct logit_cand *b = NULL;
        int best = -1;
        for (int i = 0; i < n_lists; i++) {
            const struct logit_cand *c = lists[i] + at[i];
            if (at[i] >= k || c->id < 0) continue;
            if (!b || logit_cand_before(c->v, c->id, b->v, b->id)) {
                b = c;
                best = i;
            }
        }
        if (best < 0) {
            out[j] = (struct logit_cand){-INFINITY, -1};
            continue;
        }
        out[j] = *b;
        at[best]++;
    }
}
