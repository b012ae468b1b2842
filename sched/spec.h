/* Speculative decoding policy on rank 0's step loop: how many tokens each decoding
 * sequence drafts this step (adaptive k), and the counters behind the metrics. The
 * scheduler's drafting step (sched/drafting.c) asks a drafter (sched/drafter.h) for that
 * many tokens, the plan feeds the last token plus the drafts in one step with a logits row
 * each, and sched/emit.c verifies them in order with sampler_verify (sched/sampler.h),
 * and rolls the rejected ones back. Step-loop thread only.
 *
 * The rule for k (documented in docs/configuration.md, [speculative]):
 *  - batch: decode is weight-bound while a step carries few tokens; with n sequences
 *    decoding, each drafts at most max_batch_tokens / n - 1 tokens, so speculation turns
 *    itself off once n >= max_batch_tokens / 2.
 *  - acceptance: each sequence keeps a moving average a of its acceptance rate (accepted /
 *    drafted, weight 0.3 per verification, starting at 1). It drafts k tokens while
 *    a >= 0.5, fewer below (ceil(k * a / 0.5), at least 1), and none once a < 0.1, except
 *    for a one-token probe every PROBE_EVERY steps, which lets a recover.
 *  - cost (when the scheduler passes its step costs): drafting j tokens is worth it only if
 *    the tokens a step then yields, E(j) = 1 + p + ... + p^j (p: the sequence's moving
 *    average of the chance that a draft is accepted given the one before was), beat what
 *    the step costs over a step without drafts, r(j) = t(n (1 + j)) / t(n) (t(T): the moving
 *    average of the seconds of a decode step of T tokens: forward pass, sampling and
 *    verification, not drafting, whose first call for a sequence (a draft model catching up
 *    on the prompt) says nothing of the next; a sample over 3 times the average counts as 3
 *    times; n: sequences decoding). Within the caps above, k is the j of the largest
 *    E(j) / r(j), 0 when none beats 1 by 2%; a step size not measured yet counts as free
 *    (r = 1), so each is tried, the smallest first (larger ones are not considered until
 *    it is measured: a first verify step whose drafts all fail then costs one draft, not
 *    k); t(n) itself is measured by a step without drafts first.
 *    The average falls fast (half way to a lower sample) and rises slowly (a fifth of the
 *    way), since a step is only ever slowed by something else (the first steps of a run, a
 *    busy moment). A size measured fewer than 3 times and not in the last SPEC_COST_CONFIRM
 *    decode steps, or not in the last SPEC_COST_STALE, counts as free again (its next
 *    sample replaces the average), so that one slow sample cannot keep it out for good.
 *    While the cost says 0, a one-token probe every PROBE_EVERY steps keeps p and t(2n)
 *    current. */
#ifndef TPD_SPEC_H
#define TPD_SPEC_H

#include <stdint.h>

struct drafter;

struct spec_opts {
    struct drafter *drafter; /* NULL: speculation off; the scheduler does not own it */
    int k;                   /* most tokens drafted per sequence per step */
    int max_batch_tokens; /* see the rule above; 0: no batch limit (daemon/spec_setup.c picks it by
                             backend) */
    int no_cost; /* 1: the rule without its cost part, so drafting does not depend on timing (tests)
                  */
};

/* Per sequence. Zero-initialised is the starting state. */
struct spec_seq {
    int n_draft;   /* drafted tokens fed this step */
    float *q;      /* [k][vocab] for a stochastic drafter, else NULL */
    double accept; /* moving average of the acceptance rate; used once started */
    double chain;  /* moving average of P(draft accepted | the one before was); once started */
    int started;
    int idle_steps; /* steps without drafting since acceptance fell (or the cost said 0) */
};

/* Decode step costs, measured by the scheduler (spec_cost_observe). Zero-initialised: none. */
enum { SPEC_COST_T = 64, SPEC_COST_STALE = 64, SPEC_COST_CONFIRM = 16 };
struct spec_cost {
    double t[SPEC_COST_T +
             1]; /* [T]: moving average of a decode step's seconds at T tokens; 0 unknown */
    long n_obs;  /* decode steps observed */
    long seen[SPEC_COST_T + 1]; /* [T]: n_obs when T was last observed */
    int count[SPEC_COST_T + 1]; /* [T]: samples in t[T] (saturates) */
};

struct spec_stats {
    long drafted, accepted, verified; /* verified: sequence-steps with at least one draft */
};

/* How many tokens to draft for this sequence now: 0..o->k per the rule, and at most room;
 * cost NULL: the rule without its cost part. */
int spec_want(const struct spec_opts *o, struct spec_seq *q, int n_decoding, int room,
              const struct spec_cost *cost);
/* A decode-only step (every sequence in it decoding, with or without drafts) of T tokens took
 * seconds: forward pass, sampling and verification (not drafting). */
void spec_cost_observe(struct spec_cost *c, int T, double seconds);
/* After verification: drafted tokens, how many were accepted. */
void spec_observe(struct spec_seq *q, struct spec_stats *st, int drafted, int accepted);

#endif
