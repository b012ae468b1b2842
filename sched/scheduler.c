#include "scheduler.h"

#include <stdlib.h>

#include "../util/clock.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "batch.h"
#include "drafting.h"
#include "emit.h"
#include "metrics.h"
#include "queue.h"
#include "ring.h"

/* The scheduler is its parts, one per concern and thread: the queue is the only state the
 * HTTP threads touch (under its mutex); the rest belongs to the step loop. */
struct scheduler {
    struct engine *e;
    struct sched_opts o;
    struct metrics *m;
    struct sched_queue queue; /* queue.h: submit, drain, stats, health (HTTP threads + loop) */
    struct batch batch;       /* batch.h: admission, preemption, the step plan */
    struct drafting draft;    /* drafting.h: speculative drafts before a plan */
    struct mb_ring ring;      /* ring.h: micro-batches in flight in the pipeline */
    struct emit emit;         /* emit.h: sampling, verification, grammar, publishing */
    double last_ping;
};

struct scheduler *sched_new(struct engine *e, const struct sched_opts *o, struct metrics *m) {
    struct scheduler *s = xcalloc(1, sizeof *s);
    s->e = e;
    s->o = *o;
    s->m = m;
    const struct engine_info *info = engine_info(e);
    batch_init(&s->batch, info, &s->o, m);
    queue_init(&s->queue, o->max_queue, info->max_ctx, s->batch.pool.n_blocks, info->block_size,
               o->step_timeout_s, block_pool_available(&s->batch.pool));
    drafting_init(&s->draft, &s->o.spec, info->vocab, o->max_running);
    emit_init(&s->emit, &s->o, m, info->vocab, info->max_ctx, info->eos_id);
    /* a row per running sequence and draft, and SCORE_ROWS for one prompt being scored */
    size_t rows = (size_t)o->max_running * (size_t)s->batch.rows_per_seq + SCORE_ROWS;
    ring_init(&s->ring, e, o->micro_batches, rows, info->vocab);
    return s;
}

void sched_free(struct scheduler *s) {
    if (!s) return;
    sched_abort_all(s);
    queue_free(&s->queue);
    ring_free(&s->ring);
    drafting_free(&s->draft);
    emit_free(&s->emit);
    batch_free(&s->batch);
    free(s);
}

int sched_submit(struct scheduler *s, struct gen_request *r, char *err) {
    return queue_submit(&s->queue, r, err);
}

void sched_drain(struct scheduler *s) { queue_drain(&s->queue); }

void sched_stats(struct scheduler *s, struct sched_stats *out) { queue_stats(&s->queue, out); }

int sched_healthy(struct scheduler *s, char *why, size_t n) {
    return queue_healthy(&s->queue, why, n);
}

#define PING_S 2.0 /* idle heartbeat period */

/* No sequence runs: a heartbeat now and then, so a rank that stopped is noticed without
 * traffic, then a wait of up to idle_s for a request. */
static int sched_idle(struct scheduler *s, double idle_s) {
    if (clock_now() - s->last_ping > PING_S) {
        s->last_ping = clock_now();
        engine_ping(s->e);
    }
    batch_publish(&s->batch, &s->queue);
    return queue_wait(&s->queue, idle_s) + s->batch.n_preempted;
}

/* Waits for the oldest micro-batch's logits; its sequences sample and emit. */
static void collect_micro_batch(struct scheduler *s) {
    const struct micro_batch *mb = ring_collect(&s->ring, &s->queue);
    batch_learn_speed(&s->batch, mb->id, clock_now() - mb->t0);
    metrics_logits_rows(s->m, mb->n_out - mb->n_light, mb->n_light);
    double busiest, all;
    engine_moe_load(s->e, &busiest, &all);
    if (all > 0) metrics_moe_load(s->m, busiest, all, engine_info(s->e)->tp);
    emit_micro_batch(&s->emit, &s->batch, &s->queue, mb->id, mb->logits, mb->n_cands);
    /* what a decode step costs, verification included (spec.h); with micro-batches in
     * flight, from its submission to its sampling, other stages' overlap included */
    if (mb->decode_only) drafting_observe_cost(&s->draft, mb->n_tokens, clock_now() - mb->t0);
}

/* One step of the loop: drop what was cancelled, admit waiting work; then, with pipeline
 * stages, up to max_mb micro-batches are in flight: a new one (drafts, then a plan) is
 * submitted while there is room and some sequence is in none, else the oldest is collected
 * and its sequences sample (docs/tensor-parallel.md#micro-batches). With max_mb 1: one step. */
int sched_step(struct scheduler *s, double idle_s) {
    struct batch *b = &s->batch;
    batch_drop_cancelled(b);
    batch_admit(b, &s->queue);
    if (b->n_running == 0) return sched_idle(s, idle_s);
    plan_clear(&b->plan);
    if (ring_has_room(&s->ring)) {
        drafting_run(&s->draft, b);
        batch_build_plan(b, &s->queue, s->ring.n_mb, s->ring.max_mb);
    }
    if (b->plan.n_seqs > 0) {
        batch_mark_in_flight(b, ring_submit(&s->ring, &b->plan, b->plan_decode_only, &s->queue));
        if (s->ring.max_mb == 1) collect_micro_batch(s);
    } else if (s->ring.n_mb > 0) {
        collect_micro_batch(s);
    } else if (b->n_running == 1) {
        /* a lone sequence that cannot get a block: the cache is too small for it */
        struct seq *q = b->running[--b->n_running];
        LOG(LOG_WARN, "request %llu needs more KV blocks than the cache holds",
            (unsigned long long)q->req->id);
        batch_finish(b, q, FINISH_LENGTH);
    }
    batch_publish(b, &s->queue);
    return queue_length(&s->queue) + b->n_running + b->n_preempted;
}

void sched_abort_all(struct scheduler *s) {
    while (s->ring.n_mb > 0) /* the pipeline finishes what it holds: every rank expects it */
        batch_clear_in_flight(&s->batch, ring_collect(&s->ring, &s->queue)->id);
    batch_abort_all(&s->batch);
    queue_abort_all(&s->queue);
    batch_publish(&s->batch, &s->queue);
}
