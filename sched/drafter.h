/* Drafters for speculative decoding: they guess the next few tokens of running sequences,
 * which the scheduler then verifies in one target step (sched/spec.h). One interface, two
 * kinds: n-gram / prompt lookup (no model: the continuation of the latest earlier
 * occurrence of the sequence's last n tokens) and, behind the same calls, any drafter a
 * caller builds (a draft model, a test's random drafter). Owned and called by the step-loop
 * thread on rank 0 only. */
#ifndef TPD_DRAFTER_H
#define TPD_DRAFTER_H

#include <stdint.h>

/* One sequence to draft for. */
struct draft_job {
    uint64_t seq;          /* the scheduler's id of the sequence (stable while it lives) */
    uint64_t request;      /* the request's id (gen_request.id) */
    const int32_t *tokens; /* prompt + generated tokens so far */
    int n_tokens;
    int k;        /* draft at most this many */
    int32_t *out; /* [k] the drafted tokens */
    float *q;     /* [k][vocab] when the drafter is stochastic: the distribution each
                   * drafted token was drawn from; NULL otherwise */
    int n_out;    /* set by the drafter: 0..k */
};

struct drafter {
    /* 1: drafts are drawn from distributions it reports in job.q (verification then uses
     * the general rejection rule); 0: drafts are deterministic (q a point mass). */
    int stochastic;
    void *self;
    void (*propose)(void *self, struct draft_job *jobs, int n_jobs);
    /* The sequence keeps its first n_valid tokens (the rest were rejected drafts): a
     * drafter with state per sequence rolls it back. May be NULL. */
    void (*keep)(void *self, uint64_t seq, int n_valid);
    /* The sequence ended or was preempted. May be NULL. */
    void (*forget)(void *self, uint64_t seq);
    void (*destroy)(void *self);
};

/* Fills every job (n_out and out). */
void drafter_propose(struct drafter *d, struct draft_job *jobs, int n_jobs);
void drafter_keep(struct drafter *d, uint64_t seq, int n_valid);
void drafter_forget(struct drafter *d, uint64_t seq);
void drafter_free(struct drafter *d);

/* Prompt lookup: for n from ngram_max down to ngram_min, finds the latest earlier
 * occurrence of the last n tokens in tokens[] and proposes the (up to k) tokens that
 * followed it. Nothing when no n-gram recurs. Stateless. */
struct drafter *drafter_ngram_new(int ngram_min, int ngram_max);
/* The same search on one token array, for tests: returns the number of tokens drafted. */
int drafter_ngram_lookup(const int32_t *tokens, int n_tokens, int ngram_min, int ngram_max, int k,
                         int32_t *out);

#endif
