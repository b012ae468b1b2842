/* The scheduler's emit module: after a micro-batch returns with its logits, each of its
 * sequences that reached its last known token samples (presampled in parallel where no
 * order between sequences matters), verifies its speculative drafts, goes through its
 * grammar's mask, and publishes the tokens to its request; finished ones leave the batch.
 * Step-loop thread only (the sampling threads run inside emit_micro_batch). */
#ifndef TPD_SCHED_EMIT_H
#define TPD_SCHED_EMIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "spec.h"

struct batch;
struct metrics;
struct sched_opts;
struct sched_queue;
struct seq;
struct threadpool;

struct emit {
    const struct sched_opts *o;
    struct metrics *m;
    int vocab, max_ctx, eos_id;
    struct threadpool *pool; /* whole-row sampling of a step's sequences in parallel; NULL:
                              * one thread */
    struct presample_run {
        struct seq **jobs;
        float *logits;
        int n, vocab;
        atomic_int next;
    } pre;
    struct spec_stats spec_st; /* published to the queue (queue_publish_spec) */
};

void emit_init(struct emit *em, const struct sched_opts *o, struct metrics *m, int vocab,
               int max_ctx, int eos_id);
void emit_free(struct emit *em);
/* Micro-batch mb returned with its logits (k > 0: its light sequences' rows hold their k best
 * candidates, batch_seq_light): its sequences sample, verify, emit, and those that end are
 * finished and leave b. */
void emit_micro_batch(struct emit *em, struct batch *b, struct sched_queue *queue, int mb,
                      float *logits, int k);

#endif
