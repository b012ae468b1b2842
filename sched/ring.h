/* The pipeline's micro-batch ring around engine_submit / engine_collect: with pipeline
 * stages, up to max_mb plans are in flight at once, oldest first, each with its own logits
 * buffer (docs/tensor-parallel.md#micro-batches); with one stage, one. It tells the queue
 * when the step in progress began (health). Step-loop thread only. */
#ifndef TPD_SCHED_RING_H
#define TPD_SCHED_RING_H

#include <stddef.h>

#include "../parallel/engine.h"

struct sched_queue;

/* One micro-batch in flight, as it was submitted. */
struct micro_batch {
    int id;          /* its sequences' seq.mb */
    int n_tokens;    /* tokens fed */
    int decode_only; /* every sequence in it decoding (spec_cost_observe) */
    int n_cands;     /* > 0: its light rows hold this many logit candidates */
    int n_out;       /* logits rows */
    int n_light;     /* of which candidate rows */
    double t0;       /* monotonic submission time */
    float *logits;   /* where its rows land */
};

struct mb_ring {
    struct engine *e;
    int max_mb, n_mb, head, last_id;
    struct micro_batch mb[ENGINE_MAX_IN_FLIGHT];
};

/* max_mb: the most micro-batches in flight (0: one per pipeline stage); rows: logits rows of
 * one plan at most. */
void ring_init(struct mb_ring *r, struct engine *e, int max_mb, size_t rows, int vocab);
void ring_free(struct mb_ring *r);
/* 1 while another micro-batch may go in flight. */
int ring_has_room(const struct mb_ring *r);
/* Puts plan in flight as a new micro-batch; returns its id (for batch_mark_in_flight). */
int ring_submit(struct mb_ring *r, const struct step_plan *plan, int decode_only,
                struct sched_queue *queue);
/* Waits for the oldest micro-batch's logits; the returned record (its logits included) stays
 * valid until the next ring_submit. */
const struct micro_batch *ring_collect(struct mb_ring *r, struct sched_queue *queue);

#endif
