/* The scheduler's client side: the bounded FCFS queue of submitted requests, drain, and
 * what the daemon reports of itself (stats, health, per-uid usage). It owns the one mutex
 * shared between the HTTP threads (submit, drain, stats, health) and the step loop (the
 * queue_* calls marked "step loop"); nothing else in the scheduler is shared. */
#ifndef TPD_SCHED_QUEUE_H
#define TPD_SCHED_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"
#include "spec.h"
#include "stats.h"

struct sched_queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* fixed at init: the limits a submission is checked against and stats report */
    int max_queue, max_ctx, kv_tokens, n_blocks;
    double step_timeout_s;
    /* under mu */
    struct gen_request **ring; /* [max_queue] waiting requests, oldest at head */
    int head, len;
    int draining;
    uint64_t arrivals; /* requests submitted so far: the next one's arrival */
    int n_running_pub, kv_free_pub, kv_cached_pub;
    int n_uids_pub;
    struct sched_uid_usage uids_pub[SCHED_MAX_UID_STATS];
    long preemptions;
    struct spec_stats spec_pub;
    double last_step, step_started;
};

void queue_init(struct sched_queue *q, int max_queue, int max_ctx, int n_blocks, int block_size,
                double step_timeout_s, int kv_free);
void queue_free(struct sched_queue *q);

/* HTTP threads (all thread-safe). queue_submit returns an enum sched_submit_result
 * (scheduler.h) and takes a reference on success. */
int queue_submit(struct sched_queue *q, struct gen_request *r, char *err);
void queue_drain(struct sched_queue *q);
void queue_stats(struct sched_queue *q, struct sched_stats *out);
int queue_healthy(struct sched_queue *q, char *why, size_t n);

/* Step loop: the waiting requests are read and taken under the lock. */
void queue_lock(struct sched_queue *q);
void queue_unlock(struct sched_queue *q);
/* Under the lock: how many wait, the k-th of them (0: the oldest), and taking it out. */
int queue_waiting(const struct sched_queue *q);
struct gen_request *queue_peek(const struct sched_queue *q, int k);
struct gen_request *queue_take(struct sched_queue *q, int k);
/* Under the lock: finishes the cancelled requests at the head (they never started). */
void queue_drop_cancelled(struct sched_queue *q);
/* Step loop: the number waiting, after waiting up to idle_s for one when there are none
 * (idle_s <= 0: no wait). */
int queue_wait(struct sched_queue *q, double idle_s);
int queue_length(struct sched_queue *q);
/* Step loop: finishes every waiting request with FINISH_ABORTED. */
void queue_abort_all(struct sched_queue *q);

/* Fairness accounting: adds one sequence or request of uid to a usage table (the first uids
 * seen keep their rows when there are more than it holds). */
void queue_count_uid(struct sched_uid_usage *u, int *n, unsigned uid, int running, int queued,
                     int blocks);
/* Step loop: publishes the running set's state for stats (u: the running and preempted
 * sequences' usage, to which the queued requests are added) and marks the loop alive. */
void queue_publish(struct sched_queue *q, const struct sched_uid_usage *u, int n_u, int n_running,
                   int kv_free, int kv_cached);
void queue_publish_spec(struct sched_queue *q, const struct spec_stats *st);
void queue_count_preemption(struct sched_queue *q);
/* Step loop: t is the monotonic start of the step in progress (0: none). */
void queue_set_step_started(struct sched_queue *q, double t);

#endif
