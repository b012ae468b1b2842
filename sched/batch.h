/* The scheduler's step module: the running batch on rank 0's step loop. It admits waiting
 * work (preempted sequences, then the queue, FCFS with fairness), preempts by recompute when
 * KV blocks run out, glues sequences to the prefix cache, and builds each step's plan.
 * Step-loop thread only; the queue it admits from is read under the queue's lock. */
#ifndef TPD_SCHED_BATCH_H
#define TPD_SCHED_BATCH_H

#include "../parallel/engine.h"
#include "block_pool.h"
#include "request.h"
#include "spec.h"

struct drafter;
struct metrics;
struct sampler;
struct sched_opts;
struct sched_queue;

/* Echo with logprobs: a step feeds at most this many tokens of a prompt being scored, whose
 * rows all come back, and one such prompt at a time (the logits buffers hold them beside
 * the usual row per sequence and draft). */
#define SCORE_ROWS 64

/* One request while the step loop owns it. tokens holds the prompt and then every
 * sampled token; the first n_cached of them have their K/V in the cache. */
struct seq {
    struct gen_request *req;
    int32_t *tokens;
    int n_tokens, cap_tokens;
    int n_cached;
    int n_generated;
    int32_t *blocks;
    int n_blocks, cap_blocks;
    int n_committed; /* leading full blocks registered in the prefix cache (shared, read-only) */
    int admitted;    /* admitted at least once (prefix hits are counted on the first admission) */
    struct sampler *smp;
    double t_last;
    int in_step; /* tokens fed this step (the last token and spec.n_draft drafts when decoding) */
    int mb;      /* the micro-batch it is in flight in (ring.h); 0: none */
    int row0;    /* its first logits row in that micro-batch's plan */
    int closed;  /* the grammar's closer took out the first choice at some step: finish is
                  * "length" */
    int prompt_scored; /* its request's prompt_events are complete (or none were asked) */
    struct spec_seq spec;
    /* sampled ahead on the sampling threads (emit.c), emitted in order with the rest */
    int presampled;
    int32_t pre_tok;
    struct token_event pre_ev;
};

struct batch {
    const struct sched_opts *o;
    struct metrics *m;
    struct drafter *drafter; /* o->spec.drafter: told of sequences that end or are preempted */
    int vocab, block_size, max_ctx;
    double attn_ctx_unit; /* see engine_info */
    double sec_per_unit;  /* measured: seconds one token-equivalent of work takes (0: not yet) */
    int rows_per_seq;     /* logits rows one sequence may get: 1 + spec.k */
    int max_cands;        /* > 0: light steps ask for this many logit candidates a row */
    struct seq **running; /* oldest (earliest arrival) first */
    int n_running;
    struct seq **preempted; /* waiting to be resumed, oldest first; ahead of the queue */
    int n_preempted;
    struct block_pool pool;
    int32_t *hit_ids; /* [n_blocks] the prefix-cache hit of the candidate being admitted */
    struct step_plan plan;
    int plan_decode_only; /* the plan built has decoding sequences only */
};

void batch_init(struct batch *b, const struct engine_info *info, const struct sched_opts *o,
                struct metrics *m);
void batch_free(struct batch *b);

/* Finishes the cancelled sequences that are not in flight; those in flight once they return. */
void batch_drop_cancelled(struct batch *b);
/* Moves waiting work into the running set while there is room (see batch.c). */
void batch_admit(struct batch *b, struct sched_queue *queue);
/* Fills b->plan from the sequences in no micro-batch, for one of max_mb micro-batches
 * (n_mb of them in flight); a sequence's drafts (drafting.h) must be made before. */
void batch_build_plan(struct batch *b, struct sched_queue *queue, int n_mb, int max_mb);
/* The plan just built went in flight as micro-batch id: its sequences are marked. */
void batch_mark_in_flight(struct batch *b, int id);
/* Micro-batch id returned without being sampled (abort): its sequences are in no step. */
void batch_clear_in_flight(struct batch *b, int id);
/* After micro-batch id took seconds: learns seconds per token-equivalent of work. */
void batch_learn_speed(struct batch *b, int id, double seconds);

/* Takes running[i] out of the running set (its order kept) and returns it. */
struct seq *batch_remove(struct batch *b, int i);
/* Ends q (already out of every list): the request learns why, the metrics count it. */
void batch_finish(struct batch *b, struct seq *q, enum finish_reason why);
/* Finishes every running and preempted sequence with FINISH_ABORTED. */
void batch_abort_all(struct batch *b);
/* Publishes the running set's state (queue_publish). */
void batch_publish(const struct batch *b, struct sched_queue *queue);

/* The longest a sequence may grow (sched_seq_limit of this cache). */
long batch_seq_limit(const struct batch *b);
/* Every block of q that is now full joins the prefix cache. */
void batch_commit_blocks(struct batch *b, struct seq *q);
/* Gives back the blocks past what q's tokens need (those that held only rejected drafts). */
void batch_trim_blocks(struct batch *b, struct seq *q);
/* Whether q's rows come back as their max_cands best candidates (sampler_light). */
int batch_seq_light(const struct batch *b, const struct seq *q);
/* Whether q's step feeds prompt tokens whose rows score the next prompt token (echo with
 * logprobs): then every fed token's logits row comes back. */
int seq_scores_prompt(const struct seq *q);

#endif
