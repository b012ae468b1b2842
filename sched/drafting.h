/* The drafting step of the scheduler loop (speculative decoding, policy in spec.h): before a
 * plan is built, the drafter guesses the next tokens of every decoding sequence that may
 * speculate; emit.c verifies them after the step. Step-loop thread only. */
#ifndef TPD_SCHED_DRAFTING_H
#define TPD_SCHED_DRAFTING_H

#include "spec.h"

struct batch;
struct draft_job;

struct drafting {
    const struct spec_opts *o; /* o->drafter NULL: no speculation (drafts are only reset) */
    int vocab, max_running;
    struct draft_job *jobs; /* [max_running] */
    struct spec_cost cost;  /* decode step costs for the speculation rule */
};

void drafting_init(struct drafting *d, const struct spec_opts *o, int vocab, int max_running);
void drafting_free(struct drafting *d);
/* Drafts for the sequences of b in no micro-batch: each one's spec.n_draft drafted tokens go
 * into its tokens after its last one (not counted in n_tokens until accepted). */
void drafting_run(struct drafting *d, struct batch *b);
/* A decode-only micro-batch of n_tokens tokens took seconds, from submission to sampling. */
void drafting_observe_cost(struct drafting *d, int n_tokens, double seconds);

#endif
