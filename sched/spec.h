/* Speculative decoding policy on rank 0's step loop: how many tokens each decoding
 * sequence drafts this step (adaptive k), and the counters behind the metrics. The
 * scheduler (sched/scheduler.c, its "speculative decoding" section) asks a drafter
 * (sched/drafter.h) for that many tokens, feeds the last token plus the drafts in one step
 * with a logits row each, verifies them in order with sampler_verify (sched/sampler.h),
 * and rolls the rejected ones back. Step-loop thread only.
 *
 * The rule for k (documented in docs/configuration.md, [speculative]):
 *  - batch: decode is weight-bound while a step carries few tokens; with n sequences
 *    decoding, each drafts at most max_batch_tokens / n - 1 tokens, so speculation turns
 *    itself off once n >= max_batch_tokens / 2.
 *  - acceptance: each sequence keeps a moving average a of its acceptance rate (accepted /
 *    drafted, weight 0.3 per verification, starting at 1). It drafts k tokens while
 *    a >= 0.5, fewer below (ceil(k * a / 0.5), at least 1), and none once a < 0.1, except
 *    for a one-token probe every PROBE_EVERY steps, which lets a recover. */
#ifndef TPD_SPEC_H
#define TPD_SPEC_H

#include <stdint.h>

struct drafter;

struct spec_opts {
    struct drafter *drafter; /* NULL: speculation off; the scheduler does not own it */
    int k;                   /* most tokens drafted per sequence per step */
    int max_batch_tokens;    /* see the rule above; 0: no batch limit (daemon/spec_setup.c picks it by backend) */
};

/* Per sequence. Zero-initialised is the starting state. */
struct spec_seq {
    int n_draft;       /* drafted tokens fed this step */
    float *q;          /* [k][vocab] for a stochastic drafter, else NULL */
    double accept;     /* moving average of the acceptance rate; used once started */
    int started;
    int idle_steps;    /* steps without drafting since acceptance fell */
};

struct spec_stats {
    long drafted, accepted, verified; /* verified: sequence-steps with at least one draft */
};

/* How many tokens to draft for this sequence now: 0..o->k per the rule, and at most room. */
int spec_want(const struct spec_opts *o, struct spec_seq *q, int n_decoding, int room);
/* After verification: drafted tokens, how many were accepted. */
void spec_observe(struct spec_seq *q, struct spec_stats *st, int drafted, int accepted);

#endif
