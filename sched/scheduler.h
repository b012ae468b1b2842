/* The scheduler on rank 0: a bounded FCFS queue of requests, continuous (iteration-level)
 * batching over the paged KV cache, chunked prefill under a per-step token budget,
 * automatic prefix caching (a prompt starts from the cached blocks of earlier ones), and
 * preemption by recompute when blocks run out. HTTP threads call sched_submit() and
 * sched_stats(); only the step-loop thread calls sched_step(). */
#ifndef TPD_SCHEDULER_H
#define TPD_SCHEDULER_H

#include "../parallel/engine.h"
#include "spec.h"
#include "stats.h"
#include "request.h"

struct sched_opts {
    int max_running; /* sequences in one step */
    int max_queue;   /* waiting requests before submit refuses */
    int step_tokens; /* token budget of one step (decode tokens + prefill chunks) */
    const int32_t
        *eog_ids; /* tokens that end generation (the tokenizer's list); NULL: the model's EOS */
    int n_eog;
    double step_timeout_s; /* a step running longer means a rank is hung (health fails); 0: none */
    double step_time_s;    /* target duration of one step, so prefill chunks (whose cost grows with
                            * their position) never stall decode for long; 0: tokens only */
    double max_share;      /* while others wait, one API request (its n choices) or one peer uid
                            * holds at most this share of the running slots and KV blocks (a block
                            * shared through the prefix cache counts for each holder); 0 or 1: off */
    int prefix_caching;    /* reuse cached full KV blocks of earlier prompts (block_pool.h) */
    int micro_batches;     /* most micro-batches in flight in the pipeline; 0: one per stage (pp) */
    int logit_cands;       /* 1: the rows of sampler_light sequences come back as their
                            * engine_info max_cands best logits (util/logit_cand.h); 0: whole rows */
    int sample_threads;    /* threads drawing a step's whole-row tokens in parallel; < 2: one */
    struct spec_opts spec; /* speculative decoding (spec.drafter NULL: off) */
};

/* The length rule, in one place: one sequence (prompt + generated tokens) may be as long
 * as the model's context and as the whole KV cache (kv_tokens; 0: no cache limit), so that
 * nothing is accepted that could never be admitted. sched_room is how many tokens a
 * sequence whose prompt has n_prompt tokens may generate (< 1: the prompt alone does not
 * fit). The API layer defaults and checks max_tokens with it; sched_submit refuses by it. */
static inline long sched_seq_limit(int max_ctx, int kv_tokens) {
    return kv_tokens > 0 && kv_tokens < max_ctx ? kv_tokens : max_ctx;
}
static inline long sched_room(int max_ctx, int kv_tokens, int n_prompt) {
    return sched_seq_limit(max_ctx, kv_tokens) - n_prompt;
}

enum sched_submit_result {
    SUBMIT_OK = 0,
    SUBMIT_QUEUE_FULL = -1,
    SUBMIT_DRAINING = -2,
    SUBMIT_TOO_LONG = -3
};

struct metrics;
struct scheduler;

struct scheduler *sched_new(struct engine *e, const struct sched_opts *o, struct metrics *m);
void sched_free(struct scheduler *s);
/* Thread-safe. Takes a reference on success. SUBMIT_TOO_LONG: prompt + max_tokens does
 * not fit the context (err says the limits). */
int sched_submit(struct scheduler *s, struct gen_request *r, char *err);
/* Thread-safe: stop accepting new requests. */
void sched_drain(struct scheduler *s);
void sched_stats(struct scheduler *s, struct sched_stats *out);

/* Thread-safe: 1 if the daemon serves (steps progress, however long each takes); 0 with
 * the reason in why: draining, a step past step_timeout_s, or a loop that stopped running. */
int sched_healthy(struct scheduler *s, char *why, size_t n);
/* Step-loop thread: runs at most one step; waits up to idle_s for work when there is
 * none. Returns the number of requests queued or running afterwards. */
int sched_step(struct scheduler *s, double idle_s);
/* Step-loop thread: finishes every request with FINISH_ABORTED. */
void sched_abort_all(struct scheduler *s);

#endif
