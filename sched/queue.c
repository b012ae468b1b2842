#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "scheduler.h"

void queue_init(struct sched_queue *q, int max_queue, int max_ctx, int n_blocks, int block_size,
                double step_timeout_s, int kv_free) {
    memset(q, 0, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    clock_cond_init(&q->cv);
    q->max_queue = max_queue;
    q->max_ctx = max_ctx;
    q->n_blocks = n_blocks;
    q->kv_tokens = n_blocks * block_size;
    q->step_timeout_s = step_timeout_s;
    q->ring = xcalloc((unsigned long)max_queue, sizeof *q->ring);
    q->kv_free_pub = kv_free;
    q->last_step = clock_now();
}

void queue_free(struct sched_queue *q) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->ring);
}

int queue_submit(struct sched_queue *q, struct gen_request *r, char *err) {
    if (r->n_prompt < 1) {
        err_set(err, "the prompt is empty");
        return SUBMIT_TOO_LONG;
    }
    if (r->max_tokens > sched_room(q->max_ctx, q->kv_tokens, r->n_prompt)) {
        if (sched_seq_limit(q->max_ctx, q->kv_tokens) < q->max_ctx)
            err_set(err,
                    "the KV cache holds %d tokens (cache.kv_tokens), which no sequence can "
                    "exceed; the prompt has %d and max_tokens asks for %d more",
                    q->kv_tokens, r->n_prompt, r->max_tokens);
        else
            err_set(err,
                    "this model's context is %d tokens; the prompt has %d and max_tokens "
                    "asks for %d more",
                    q->max_ctx, r->n_prompt, r->max_tokens);
        return SUBMIT_TOO_LONG;
    }
    pthread_mutex_lock(&q->mu);
    int rc = SUBMIT_OK;
    if (q->draining) {
        rc = SUBMIT_DRAINING;
        err_set(err, "the server is shutting down");
    } else if (q->len >= q->max_queue) {
        rc = SUBMIT_QUEUE_FULL;
        err_set(err, "the request queue is full (%d waiting); retry later", q->len);
    } else {
        req_ref(r);
        r->t_submit = clock_now();
        r->arrival = ++q->arrivals;
        q->ring[(q->head + q->len++) % q->max_queue] = r;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void queue_drain(struct sched_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->draining = 1;
    pthread_mutex_unlock(&q->mu);
}

void queue_stats(struct sched_queue *q, struct sched_stats *out) {
    pthread_mutex_lock(&q->mu);
    out->queued = q->len;
    out->running = q->n_running_pub;
    out->kv_blocks_free = q->kv_free_pub;
    out->kv_blocks_used = q->n_blocks - q->kv_free_pub;
    out->kv_blocks_cached = q->kv_cached_pub;
    out->max_ctx = q->max_ctx;
    out->kv_tokens = q->kv_tokens;
    out->max_queue = q->max_queue;
    out->draining = q->draining;
    out->preemptions = q->preemptions;
    out->spec_drafted = q->spec_pub.drafted;
    out->spec_accepted = q->spec_pub.accepted;
    out->spec_verified = q->spec_pub.verified;
    out->last_step = q->last_step;
    out->step_started = q->step_started;
    out->step_timeout_s = q->step_timeout_s;
    out->n_uids = q->n_uids_pub;
    memcpy(out->uids, q->uids_pub, sizeof out->uids);
    pthread_mutex_unlock(&q->mu);
}

/* The loop outside a step must come round this often (it waits at most idle_s). */
#define LOOP_STALE_S 5.0

int queue_healthy(struct sched_queue *q, char *why, size_t n) {
    struct sched_stats st;
    queue_stats(q, &st);
    double now = clock_now();
    if (st.draining) snprintf(why, n, "draining: the server is shutting down");
    else if (st.step_started > 0 && st.step_timeout_s > 0 &&
             now - st.step_started > st.step_timeout_s)
        snprintf(why, n,
                 "a step has run for %.1f s (parallel.step_timeout_s = %g): a rank may "
                 "be hung",
                 now - st.step_started, st.step_timeout_s);
    else if (st.step_started == 0 && now - st.last_step > LOOP_STALE_S)
        snprintf(why, n, "the step loop has not run for %.1f s", now - st.last_step);
    else return 1;
    return 0;
}

void queue_lock(struct sched_queue *q) { pthread_mutex_lock(&q->mu); }
void queue_unlock(struct sched_queue *q) { pthread_mutex_unlock(&q->mu); }

int queue_waiting(const struct sched_queue *q) { return q->len; }

struct gen_request *queue_peek(const struct sched_queue *q, int k) {
    return q->ring[(q->head + k) % q->max_queue];
}

struct gen_request *queue_take(struct sched_queue *q, int k) {
    int m = q->max_queue;
    struct gen_request *r = q->ring[(q->head + k) % m];
    for (int i = k; i > 0; i--) q->ring[(q->head + i) % m] = q->ring[(q->head + i - 1) % m];
    q->head = (q->head + 1) % m;
    q->len--;
    return r;
}

void queue_drop_cancelled(struct sched_queue *q) {
    while (q->len && atomic_load(&q->ring[q->head]->cancelled)) {
        struct gen_request *r = queue_take(q, 0);
        req_finish(r, FINISH_CANCELLED);
        req_unref(r);
    }
}

int queue_wait(struct sched_queue *q, double idle_s) {
    pthread_mutex_lock(&q->mu);
    if (q->len == 0 && idle_s > 0) {
        struct timespec dl = clock_deadline(idle_s);
        pthread_cond_timedwait(&q->cv, &q->mu, &dl);
    }
    int n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

int queue_length(struct sched_queue *q) {
    pthread_mutex_lock(&q->mu);
    int n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void queue_abort_all(struct sched_queue *q) {
    pthread_mutex_lock(&q->mu);
    while (q->len) {
        struct gen_request *r = queue_take(q, 0);
        req_finish(r, FINISH_ABORTED);
        req_unref(r);
    }
    pthread_mutex_unlock(&q->mu);
}

void queue_count_uid(struct sched_uid_usage *u, int *n, unsigned uid, int running, int queued,
                     int blocks) {
    int i = 0;
    while (i < *n && u[i].uid != uid) i++;
    if (i == *n) {
        if (*n == SCHED_MAX_UID_STATS) return;
        u[(*n)++] = (struct sched_uid_usage){.uid = uid};
    }
    u[i].running += running;
    u[i].queued += queued;
    u[i].kv_blocks += blocks;
}

void queue_publish(struct sched_queue *q, const struct sched_uid_usage *u, int n_u, int n_running,
                   int kv_free, int kv_cached) {
    pthread_mutex_lock(&q->mu);
    memset(q->uids_pub, 0, sizeof q->uids_pub);
    memcpy(q->uids_pub, u, sizeof *u * (size_t)n_u);
    q->n_uids_pub = n_u;
    for (int i = 0; i < q->len; i++)
        queue_count_uid(q->uids_pub, &q->n_uids_pub, queue_peek(q, i)->uid, 0, 1, 0);
    q->n_running_pub = n_running;
    q->kv_free_pub = kv_free;
    q->kv_cached_pub = kv_cached;
    q->last_step = clock_now();
    pthread_mutex_unlock(&q->mu);
}

void queue_publish_spec(struct sched_queue *q, const struct spec_stats *st) {
    pthread_mutex_lock(&q->mu);
    q->spec_pub = *st;
    pthread_mutex_unlock(&q->mu);
}

void queue_count_preemption(struct sched_queue *q) {
    pthread_mutex_lock(&q->mu);
    q->preemptions++;
    pthread_mutex_unlock(&q->mu);
}

void queue_set_step_started(struct sched_queue *q, double t) {
    pthread_mutex_lock(&q->mu);
    q->step_started = t;
    pthread_mutex_unlock(&q->mu);
}
