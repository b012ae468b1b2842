#include "spec.h"

#include <math.h>

#define ACCEPT_WEIGHT 0.3
#define FULL_K_AT 0.5
#define OFF_BELOW 0.1
#define PROBE_EVERY 16
#define COST_WEIGHT 0.2
#define COST_WEIGHT_DOWN 0.5
#define COST_MARGIN 1.02
#define COST_CLAMP 3.0

/* 1 on every PROBE_EVERY-th call while a sequence does not draft: the one-token probe. */
static int probe_now(struct spec_seq *q) { return ++q->idle_steps % PROBE_EVERY == 0; }

/* 1 when t[T] is to be measured again (spec.h: few samples and not lately, or none lately). */
static int stale(const struct spec_cost *c, int T) {
    return c->seen[T] < c->n_obs - (c->count[T] < 3 ? SPEC_COST_CONFIRM : SPEC_COST_STALE);
}

/* The cost part of the rule (spec.h): the j in 0..k with the largest E(j) / r(j). */
static int cost_k(struct spec_seq *q, int n, int k, const struct spec_cost *c) {
    const double base = n <= SPEC_COST_T ? c->t[n] : 0;
    if (base <= 0) return n <= SPEC_COST_T ? 0 : k; /* t(n) first; past the table: no data */
    const double p = q->started ? q->chain : 1.0;
    double e = 1, pj = 1, best_v = COST_MARGIN;
    int best = 0;
    for (int j = 1; j <= k && n * (1 + j) <= SPEC_COST_T; j++) {
        pj *= p;
        e += pj;
        const int T = n * (1 + j);
        const double tj = stale(c, T) ? 0 : c->t[T]; /* stale: try it again */
        const double v = e / (tj > 0 ? tj / base : 1.0);
        if (v > best_v) {
            best_v = v;
            best = j;
        }
        if (tj <= 0) break; /* an untimed size counts as free, the larger ones wait for it */
    }
    if (best == 0 && k > 0)
        return probe_now(q); /* a probe now and then keeps p and t(2n) current */
    return best;
}

int spec_want(const struct spec_opts *o, struct spec_seq *q, int n_decoding, int room,
              const struct spec_cost *cost) {
    if (!o->drafter || o->k < 1 || room < 1) return 0;
    int k = o->k;
    const int n = n_decoding > 0 ? n_decoding : 1;
    if (o->max_batch_tokens > 0) {
        int cap = o->max_batch_tokens / n - 1;
        k = cap < k ? cap : k;
    }
    int probing = 0;
    if (q->started && q->accept < FULL_K_AT) {
        if (q->accept < OFF_BELOW) {
            k = probe_now(q) ? (k < 1 ? k : 1) : 0;
            probing = 1;
        } else {
            int ka = (int)ceil(o->k * q->accept / FULL_K_AT);
            k = ka < k ? ka : k;
        }
    }
    if (cost && k > 0 && !probing) k = cost_k(q, n, k < room ? k : room, cost);
    return k < room ? (k > 0 ? k : 0) : room;
}

void spec_cost_observe(struct spec_cost *c, int T, double seconds) {
    if (T < 1 || T > SPEC_COST_T || !(seconds > 0)) return;
    if (stale(c, T)) c->t[T] = 0; /* this sample replaces it */
    if (c->t[T] > 0 && seconds > COST_CLAMP * c->t[T])
        seconds = COST_CLAMP * c->t[T]; /* a hiccup */
    const double w = seconds < c->t[T] ? COST_WEIGHT_DOWN : COST_WEIGHT;
    c->t[T] = c->t[T] > 0 ? (1 - w) * c->t[T] + w * seconds : seconds;
    c->seen[T] = ++c->n_obs;
    if (c->count[T] < 1000) c->count[T]++;
}

void spec_observe(struct spec_seq *q, struct spec_stats *st, int drafted, int accepted) {
    if (drafted <= 0) return;
    double rate = (double)accepted / drafted;
    /* drafts are tried in order until one is rejected: accepted successes in accepted + 1
     * tries (accepted tries when all were) */
    double chain = (double)accepted / (accepted + (accepted < drafted));
    if (!q->started) q->accept = q->chain = 1;
    q->started = 1;
    q->accept = (1 - ACCEPT_WEIGHT) * q->accept + ACCEPT_WEIGHT * rate;
    q->chain = (1 - ACCEPT_WEIGHT) * q->chain + ACCEPT_WEIGHT * chain;
    if (q->accept >= OFF_BELOW) q->idle_steps = 0;
    st->drafted += drafted;
    st->accepted += accepted;
    st->verified++;
}
