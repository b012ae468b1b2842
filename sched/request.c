#include "request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../util/clock.h"
#include "../util/fatal.h"

struct gen_request *req_new(void) {
    struct gen_request *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    clock_cond_init(&r->cv);
    atomic_init(&r->refs, 1);
    r->sp = sampling_defaults();
    r->uid = REQ_UID_UNKNOWN;
    return r;
}

struct sampling_params sampling_defaults(void) {
    return (struct sampling_params){.temperature = 1, .top_p = 1, .repetition_penalty = 1};
}

void req_ref(struct gen_request *r) { atomic_fetch_add(&r->refs, 1); }

void req_unref(struct gen_request *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->prompt);
    free(r->sp.logit_bias_ids);
    free(r->sp.logit_bias);
    free(r->events);
    free(r->prompt_events);
    grammar_matcher_free(r->grammar);
    free(r);
}

void req_set_prompt_scored(struct gen_request *r) {
    pthread_mutex_lock(&r->mu);
    r->prompt_scored = 1;
    pthread_mutex_unlock(&r->mu);
}

int req_prompt_scored(struct gen_request *r) {
    pthread_mutex_lock(&r->mu);
    int v = r->prompt_scored;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void req_push(struct gen_request *r, const struct token_event *ev) {
    pthread_mutex_lock(&r->mu);
    if (r->n_events == r->cap_events) {
        int cap = r->cap_events ? 2 * r->cap_events : 16;
        r->events = xrealloc(r->events, sizeof *r->events * (size_t)cap);
        r->cap_events = cap;
    }
    r->events[r->n_events++] = *ev;
    pthread_cond_broadcast(&r->cv);
    if (r->notify) r->notify(r->notify_arg);
    pthread_mutex_unlock(&r->mu);
}

void req_finish(struct gen_request *r, enum finish_reason why) {
    pthread_mutex_lock(&r->mu);
    if (r->finish == FINISH_NONE) r->finish = why;
    pthread_cond_broadcast(&r->cv);
    if (r->notify) r->notify(r->notify_arg);
    pthread_mutex_unlock(&r->mu);
}

void req_set_cached_tokens(struct gen_request *r, int n) {
    pthread_mutex_lock(&r->mu);
    r->cached_tokens = n;
    pthread_mutex_unlock(&r->mu);
}

int req_cached_tokens(struct gen_request *r) {
    pthread_mutex_lock(&r->mu);
    int n = r->cached_tokens;
    pthread_mutex_unlock(&r->mu);
    return n;
}

int req_wait(struct gen_request *r, int seen, struct token_event *out, int max, double timeout_s,
             enum finish_reason *finish) {
    struct timespec dl = clock_deadline(timeout_s);
    pthread_mutex_lock(&r->mu);
    while (r->n_events <= seen && r->finish == FINISH_NONE)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT) break;
    int n = r->n_events - seen;
    if (n < 0) n = 0;
    if (n > max) n = max;
    if (n) memcpy(out, r->events + seen, sizeof *out * (size_t)n);
    /* the finish reason only counts once every event before it has been handed out */
    *finish = seen + n == r->n_events ? r->finish : FINISH_NONE;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void req_cancel(struct gen_request *r) { atomic_store(&r->cancelled, 1); }

void req_set_notify(struct gen_request *r, void (*fn)(void *arg), void *arg) {
    pthread_mutex_lock(&r->mu);
    r->notify = fn;
    r->notify_arg = arg;
    pthread_mutex_unlock(&r->mu);
}
