#include "scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../grammar/grammar.h"
#include "../util/threadpool.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "block_pool.h"
#include "drafter.h"
#include "metrics.h"
#include "sampler.h"

/* One request while the step loop owns it. tokens holds the prompt and then every
 * sampled token; the first n_cached of them have their K/V in the cache. */
/* Echo with logprobs: a step feeds at most this many tokens of a prompt being scored, whose
 * rows all come back, and one such prompt at a time (the logits buffers hold them beside
 * the usual row per sequence and draft). */
#define SCORE_ROWS 64

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
    int mb;      /* the micro-batch it is in flight in (see sched_step); 0: none */
    int row0;    /* its first logits row in that micro-batch's plan */
    int closed;  /* the grammar's closer took out the first choice at some step: finish is "length" */
    int prompt_scored; /* its request's prompt_events are complete (or none were asked) */
    struct spec_seq spec;
    /* sampled ahead on the sampling threads (presample_all), emitted in order by sample_all */
    int presampled;
    int32_t pre_tok;
    struct token_event pre_ev;
};

struct scheduler {
    struct engine *e;
    struct sched_opts o;
    struct metrics *m;
    int vocab, block_size, max_ctx, eos_id;
    double attn_ctx_unit; /* see engine_info */
    double sec_per_unit;  /* measured: seconds one token-equivalent of work takes (0: not yet) */

    /* shared with HTTP threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct gen_request **queue; /* ring of max_queue */
    int q_head, q_len;
    int draining;
    int n_running_pub, kv_free_pub, kv_cached_pub;
    int n_uids_pub;
    struct sched_uid_usage uids_pub[SCHED_MAX_UID_STATS];
    long preemptions;
    uint64_t arrivals; /* requests submitted so far: the next one's arrival */
    double last_step, step_started;
    double last_ping; /* step loop only */

    /* step loop only */
    struct seq **running;   /* oldest (earliest arrival) first */
    int n_running;
    struct seq **preempted; /* waiting to be resumed, oldest first; ahead of the queue */
    int n_preempted;
    struct block_pool pool;
    int32_t *hit_ids; /* [n_blocks] the prefix-cache hit of the candidate being admitted */
    struct step_plan plan;
    float *logits;
    int rows_per_seq; /* logits rows one sequence may get: 1 + spec.k */
    int max_cands;    /* > 0: light steps ask for this many logit candidates a row (o.logit_cands) */
    struct threadpool *sample_pool; /* whole-row sampling of a step's sequences in parallel; NULL: one thread */
    struct presample_run { struct seq **jobs; float *logits; int n, vocab; atomic_int next; } pre;
    struct draft_job *jobs;
    struct spec_stats spec_st, spec_pub; /* pub: under mu */
    struct spec_cost spec_cost;          /* decode step costs for the speculation rule */
    int plan_decode_only;                /* the plan being built has decoding sequences only */
    /* micro-batches in flight in the pipeline, a ring of max_mb oldest first; slot k's logits
     * land in mb_logits[k] (slot 0: logits) */
    int max_mb, n_mb, mb_head, mb_last_id;
    struct { int id, n_tokens, decode_only, n_cands, n_out, n_light; double t0; } mb[ENGINE_MAX_IN_FLIGHT];
    float *mb_logits[ENGINE_MAX_IN_FLIGHT];
};

struct scheduler *sched_new(struct engine *e, const struct sched_opts *o, struct metrics *m) {
    struct scheduler *s = xcalloc(1, sizeof *s);
    s->e = e;
    s->o = *o;
    s->m = m;
    const struct engine_info *info = engine_info(e);
    s->vocab = info->vocab;
    s->block_size = info->block_size;
    s->max_ctx = info->max_ctx;
    s->eos_id = info->eos_id;
    s->attn_ctx_unit = info->attn_ctx_unit > 1 ? info->attn_ctx_unit : 1;
    block_pool_init(&s->pool, info->n_blocks, info->block_size, o->prefix_caching, info->sink_blocks);
    s->hit_ids = xmalloc(sizeof(int32_t) * (size_t)(info->n_blocks > 0 ? info->n_blocks : 1));
    plan_init(&s->plan);
    pthread_mutex_init(&s->mu, NULL);
    clock_cond_init(&s->cv);
    s->queue = xcalloc((unsigned long)o->max_queue, sizeof *s->queue);
    s->running = xcalloc((unsigned long)o->max_running, sizeof *s->running);
    /* fairness may admit from the queue while others wait preempted */
    s->preempted = xcalloc((unsigned long)o->max_running + (unsigned long)o->max_queue, sizeof *s->preempted);
    s->rows_per_seq = 1 + (o->spec.drafter && o->spec.k > 0 ? o->spec.k : 0);
    s->max_cands = o->logit_cands ? info->max_cands : 0;
    int sample_threads = o->sample_threads > 0 ? o->sample_threads : 1;
    if (sample_threads > o->max_running) sample_threads = o->max_running;
    if (sample_threads > 1) s->sample_pool = threadpool_create(sample_threads);
    s->pre.jobs = xcalloc((size_t)o->max_running, sizeof *s->pre.jobs);
    /* a row per running sequence and draft, and SCORE_ROWS for one prompt being scored */
    size_t rows = (size_t)o->max_running * (size_t)s->rows_per_seq + SCORE_ROWS;
    s->logits = xmalloc(sizeof(float) * rows * (size_t)s->vocab);
    s->jobs = xcalloc((unsigned long)o->max_running, sizeof *s->jobs);
    /* one micro-batch per pipeline stage keeps every stage busy; with one stage, one */
    s->max_mb = o->micro_batches > 0 ? o->micro_batches : info->pp;
    if (s->max_mb > ENGINE_MAX_IN_FLIGHT) s->max_mb = ENGINE_MAX_IN_FLIGHT;
    s->mb_logits[0] = s->logits;
    for (int k = 1; k < s->max_mb; k++)
        s->mb_logits[k] = xmalloc(sizeof(float) * rows * (size_t)s->vocab);
    s->kv_free_pub = block_pool_available(&s->pool);
    s->last_step = clock_now();
    return s;
}

static void seq_free(struct scheduler *s, struct seq *q) {
    if (s->o.spec.drafter) drafter_forget(s->o.spec.drafter, (uint64_t)(uintptr_t)q);
    free(q->spec.q);
    block_pool_release(&s->pool, q->n_blocks, q->blocks);
    free(q->blocks);
    free(q->tokens);
    if (q->smp) sampler_delete(q->smp);
    req_unref(q->req);
    free(q);
}

void sched_free(struct scheduler *s) {
    if (!s) return;
    sched_abort_all(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->queue);
    free(s->running);
    free(s->preempted);
    for (int k = 0; k < s->max_mb; k++) free(s->mb_logits[k]);
    free(s->hit_ids);
    free(s->jobs);
    free(s->pre.jobs);
    threadpool_free(s->sample_pool);
    plan_free(&s->plan);
    block_pool_free(&s->pool);
    free(s);
}

int sched_submit(struct scheduler *s, struct gen_request *r, char *err) {
    if (r->n_prompt < 1) {
        err_set(err, "the prompt is empty");
        return SUBMIT_TOO_LONG;
    }
    int kv_tokens = s->pool.n_blocks * s->block_size;
    if (r->max_tokens > sched_room(s->max_ctx, kv_tokens, r->n_prompt)) {
        if (sched_seq_limit(s->max_ctx, kv_tokens) < s->max_ctx)
            err_set(err, "the KV cache holds %d tokens (cache.kv_tokens), which no sequence can exceed; the prompt has "
                    "%d and max_tokens asks for %d more", kv_tokens, r->n_prompt, r->max_tokens);
        else
            err_set(err, "this model's context is %d tokens; the prompt has %d and max_tokens asks for %d more",
                    s->max_ctx, r->n_prompt, r->max_tokens);
        return SUBMIT_TOO_LONG;
    }
    pthread_mutex_lock(&s->mu);
    int rc = SUBMIT_OK;
    if (s->draining) {
        rc = SUBMIT_DRAINING;
        err_set(err, "the server is shutting down");
    } else if (s->q_len >= s->o.max_queue) {
        rc = SUBMIT_QUEUE_FULL;
        err_set(err, "the request queue is full (%d waiting); retry later", s->q_len);
    } else {
        req_ref(r);
        r->t_submit = clock_now();
        r->arrival = ++s->arrivals;
        s->queue[(s->q_head + s->q_len++) % s->o.max_queue] = r;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void sched_drain(struct scheduler *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

void sched_stats(struct scheduler *s, struct sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->queued = s->q_len;
    out->running = s->n_running_pub;
    out->kv_blocks_free = s->kv_free_pub;
    out->kv_blocks_used = s->pool.n_blocks - s->kv_free_pub;
    out->kv_blocks_cached = s->kv_cached_pub;
    out->max_ctx = s->max_ctx;
    out->kv_tokens = s->pool.n_blocks * s->block_size;
    out->max_queue = s->o.max_queue;
    out->draining = s->draining;
    out->preemptions = s->preemptions;
    out->spec_drafted = s->spec_pub.drafted;
    out->spec_accepted = s->spec_pub.accepted;
    out->spec_verified = s->spec_pub.verified;
    out->last_step = s->last_step;
    out->step_started = s->step_started;
    out->step_timeout_s = s->o.step_timeout_s;
    out->n_uids = s->n_uids_pub;
    memcpy(out->uids, s->uids_pub, sizeof out->uids);
    pthread_mutex_unlock(&s->mu);
}

#define PING_S 2.0 /* idle heartbeat period */

/* The loop outside a step must come round this often (it waits at most idle_s). */
#define LOOP_STALE_S 5.0

int sched_healthy(struct scheduler *s, char *why, size_t n) {
    struct sched_stats st;
    sched_stats(s, &st);
    double now = clock_now();
    if (st.draining) snprintf(why, n, "draining: the server is shutting down");
    else if (st.step_started > 0 && st.step_timeout_s > 0 && now - st.step_started > st.step_timeout_s)
        snprintf(why, n, "a step has run for %.1f s (parallel.step_timeout_s = %g): a rank may be hung",
                 now - st.step_started, st.step_timeout_s);
    else if (st.step_started == 0 && now - st.last_step > LOOP_STALE_S)
        snprintf(why, n, "the step loop has not run for %.1f s", now - st.last_step);
    else return 1;
    return 0;
}

/* Adds one sequence or request of uid to the usage table (the first uids seen keep their
 * rows when there are more than it holds). */
static void count_uid(struct sched_uid_usage *u, int *n, unsigned uid, int running, int queued, int blocks) {
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

static void publish(struct scheduler *s) {
    pthread_mutex_lock(&s->mu);
    s->n_uids_pub = 0;
    memset(s->uids_pub, 0, sizeof s->uids_pub);
    for (int i = 0; i < s->n_running; i++)
        count_uid(s->uids_pub, &s->n_uids_pub, s->running[i]->req->uid, 1, 0, s->running[i]->n_blocks);
    for (int i = 0; i < s->n_preempted; i++) count_uid(s->uids_pub, &s->n_uids_pub, s->preempted[i]->req->uid, 1, 0, 0);
    for (int i = 0; i < s->q_len; i++)
        count_uid(s->uids_pub, &s->n_uids_pub, s->queue[(s->q_head + i) % s->o.max_queue]->uid, 0, 1, 0);
    s->n_running_pub = s->n_running + s->n_preempted;
    s->kv_free_pub = block_pool_available(&s->pool);
    s->kv_cached_pub = s->pool.n_cached;
    s->last_step = clock_now();
    pthread_mutex_unlock(&s->mu);
}

static void finish_seq(struct scheduler *s, struct seq *q, enum finish_reason why) {
    req_finish(q->req, why);
    metrics_observe(s->m, HIST_E2E, clock_now() - q->req->t_submit);
    metrics_tokens(s->m, q->req->n_prompt, q->n_generated);
    seq_free(s, q);
}

static struct seq *seq_from_request(struct scheduler *s, struct gen_request *r) {
    struct seq *q = xcalloc(1, sizeof *q);
    q->req = r;
    q->cap_tokens = r->n_prompt + r->max_tokens + s->rows_per_seq; /* room for drafts */
    q->tokens = xmalloc(sizeof(int32_t) * (size_t)q->cap_tokens);
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    q->n_tokens = r->n_prompt;
    q->cap_blocks = (q->cap_tokens + s->block_size - 1) / s->block_size;
    q->blocks = xmalloc(sizeof(int32_t) * (size_t)q->cap_blocks);
    q->smp = sampler_new(&r->sp, s->vocab, r->prompt, r->n_prompt);
    q->prompt_scored = !r->prompt_events || r->n_prompt < 2; /* a lone token has nothing to score */
    if (r->prompt_events && q->prompt_scored) req_set_prompt_scored(r);
    return q;
}

/* Blocks a sequence needs to cache `tokens` tokens. */
static int blocks_needed(struct scheduler *s, int tokens) { return block_pool_blocks_for(tokens, s->block_size); }

/* Puts q into list (n sequences, oldest first) at its place in arrival order. The running
 * and preempted sequences are kept so, whatever order they were admitted or resumed in:
 * preemption takes the youngest first and resumption the oldest, so the oldest running
 * sequence is never preempted by a younger one and always progresses (issue 24: with
 * admission order, a resumed old sequence was the first victim of the ones it had let
 * run, and two sequences could take turns forever). */
static void insert_by_age(struct seq **list, int *n, struct seq *q) {
    int i = *n;
    for (; i > 0 && list[i - 1]->req->arrival > q->req->arrival; i--) list[i] = list[i - 1];
    list[i] = q;
    (*n)++;
}

/* Preemption by recompute: the sequence gives back every block and will prefill its
 * prompt and generated tokens again (less whatever of them is still in the prefix cache
 * when it resumes: its full blocks stay cached until evicted); its sampler state is kept,
 * so it continues exactly as it would have. The youngest running sequence goes first
 * (vLLM's policy, by arrival: insert_by_age). */
static void preempt_last(struct scheduler *s) {
    struct seq *q = s->running[--s->n_running];
    block_pool_release(&s->pool, q->n_blocks, q->blocks); /* its full blocks stay cached */
    q->n_blocks = 0;
    q->n_committed = 0;
    q->n_cached = 0;
    q->in_step = 0;
    q->spec.n_draft = 0;
    if (s->o.spec.drafter) drafter_forget(s->o.spec.drafter, (uint64_t)(uintptr_t)q);
    insert_by_age(s->preempted, &s->n_preempted, q); /* resumed oldest first, before the queue */
    metrics_preemption(s->m);
    pthread_mutex_lock(&s->mu);
    s->preemptions++;
    pthread_mutex_unlock(&s->mu);
    LOG(LOG_DEBUG, "preempted request %llu (%d tokens)", (unsigned long long)q->req->id, q->n_tokens);
}

/* Makes sure q has blocks for `tokens` cached tokens, preempting the youngest sequences
 * while blocks are short; q yields itself when it is the youngest left (never taking the
 * blocks of an older one). Returns -1 when q itself had to be preempted, when it waits for
 * sequences in flight, or when q runs alone and the cache still cannot hold it. */
static void preempt_at(struct scheduler *s, int i);
static int grow_blocks(struct scheduler *s, struct seq *q, int tokens) {
    int need = blocks_needed(s, tokens) - q->n_blocks;
    while (need > 0 && block_pool_available(&s->pool) < need) {
        if (s->n_running == 1) return -1;
        int v = s->n_running - 1; /* a sequence in flight keeps its blocks until it returns */
        while (v >= 0 && s->running[v]->mb) v--;
        if (v < 0 || (s->running[v] == q && s->n_mb > 0)) return -1; /* q waits for them */
        struct seq *last = s->running[v];
        preempt_at(s, v);
        if (last == q) return -1;
    }
    if (need > 0) {
        if (block_pool_take(&s->pool, need, q->blocks + q->n_blocks, q->n_blocks == 0)) return -1;
        q->n_blocks += need;
    }
    return 0;
}

static void drop_cancelled(struct scheduler *s) {
    for (int i = 0; i < s->n_running;) {
        struct seq *q = s->running[i];
        if (atomic_load(&q->req->cancelled) && !q->mb) { /* in flight: once it returns */
            memmove(s->running + i, s->running + i + 1, sizeof *s->running * (size_t)(s->n_running - i - 1));
            s->n_running--;
            finish_seq(s, q, FINISH_CANCELLED);
        } else {
            i++;
        }
    }
    for (int i = 0; i < s->n_preempted;) {
        struct seq *q = s->preempted[i];
        if (atomic_load(&q->req->cancelled)) {
            memmove(s->preempted + i, s->preempted + i + 1, sizeof *s->preempted * (size_t)(s->n_preempted - i - 1));
            s->n_preempted--;
            finish_seq(s, q, FINISH_CANCELLED);
        } else {
            i++;
        }
    }
}

/* ---- fairness: one API request (its n choices) or one peer uid may hold at most
 * max_share of the running slots and KV blocks while others wait ---- */

static uint64_t group_of(const struct gen_request *r) { return r->group ? r->group : r->id; }

static int fairness_on(const struct scheduler *s) { return s->o.max_share > 0 && s->o.max_share < 1; }

/* 1 if running sequences holding `slots` slots and `blocks` blocks hold a share. */
static int is_share(const struct scheduler *s, int slots, int blocks) {
    int cap_slots = (int)(s->o.max_share * s->o.max_running), cap_blocks = (int)(s->o.max_share * s->pool.n_blocks);
    return slots >= (cap_slots > 1 ? cap_slots : 1) || blocks >= (cap_blocks > 1 ? cap_blocks : 1);
}

/* The slots and blocks the running sequences of r's request (by_uid = 0) or of r's uid (1) hold. */
static void usage_of(const struct scheduler *s, const struct gen_request *r, int by_uid, int *slots, int *blocks) {
    *slots = *blocks = 0;
    for (int i = 0; i < s->n_running; i++) {
        const struct gen_request *o = s->running[i]->req;
        if (by_uid ? o->uid == r->uid : group_of(o) == group_of(r)) {
            (*slots)++;
            *blocks += s->running[i]->n_blocks;
        }
    }
}

/* 1 if the running sequences of r's request (by_uid = 0) or of r's uid (1) already hold
 * their share of slots or blocks. */
static int holds_share(const struct scheduler *s, const struct gen_request *r, int by_uid) {
    int slots, blocks;
    usage_of(s, r, by_uid, &slots, &blocks);
    return is_share(s, slots, blocks);
}

/* A waiting request deserves to go ahead of earlier ones (and to take a slot from a request
 * over its share) when its own request is under its share, and its uid is too unless the
 * slot would come from that same uid. */
static int deserves(const struct scheduler *s, const struct gen_request *r) {
    return fairness_on(s) && !holds_share(s, r, 0);
}

/* The running sequence to give way to r: the youngest of another request that holds its
 * share even without it, from r's own uid or from a uid over its share. -1: none, and
 * fairness yields where taking a slot would stop progress (issue 24): a request is trimmed
 * down to its share, never below it, so the victim never deserves to come back at once by
 * preempting r in turn (two requests each needing more than a share of the cache took
 * turns that way forever, neither keeping its blocks long enough to finish); a request's
 * last running sequence is never taken; nor is the oldest running sequence by a younger
 * request (it always progresses, see insert_by_age). */
static int victim_for(const struct scheduler *s, const struct gen_request *r) {
    int uid_over = holds_share(s, r, 1);
    for (int i = s->n_running - 1; i >= 0; i--) {
        const struct seq *v = s->running[i];
        const struct gen_request *o = v->req;
        if (v->mb || group_of(o) == group_of(r) || (i == 0 && o->arrival < r->arrival)) continue;
        int slots, blocks;
        usage_of(s, o, 0, &slots, &blocks);
        if (!is_share(s, slots - 1, blocks - v->n_blocks)) continue;
        if (o->uid == r->uid ? 1 : (!uid_over && holds_share(s, o, 1))) return i;
    }
    return -1;
}

/* Takes the k-th waiting request (0: the oldest) out of the queue ring. Under mu. */
static struct gen_request *queue_take(struct scheduler *s, int k) {
    int m = s->o.max_queue;
    struct gen_request *r = s->queue[(s->q_head + k) % m];
    for (int i = k; i > 0; i--) s->queue[(s->q_head + i) % m] = s->queue[(s->q_head + i - 1) % m];
    s->q_head = (s->q_head + 1) % m;
    s->q_len--;
    return r;
}

/* Preemption by recompute of running[i] (see preempt_last). */
static void preempt_at(struct scheduler *s, int i) {
    struct seq *q = s->running[i];
    memmove(s->running + i, s->running + i + 1, sizeof *s->running * (size_t)(s->n_running - i - 1));
    s->running[s->n_running - 1] = q;
    preempt_last(s);
}

/* ---- automatic prefix caching (the cache itself is block_pool's) ---- */

/* The prefix-cache hit of a sequence about to be admitted with these tokens: how many of
 * its leading full blocks are cached (their ids in s->hit_ids), and how many of those are
 * idle. The block holding its last token is never reused: that token must be computed for
 * its logits, so a prompt cached whole recomputes its last block (at most block_size
 * tokens) rather than copying a shared block to write into. */
static int prefix_lookup(struct scheduler *s, const struct gen_request *r, const int32_t *tokens, int n, int *n_idle) {
    if (r->prompt_events && !req_prompt_scored((struct gen_request *)r)) { /* every prompt row is computed */
        *n_idle = 0;
        return 0;
    }
    return block_pool_match(&s->pool, r->cache_salt, tokens, (n - 1) / s->block_size, s->hit_ids, n_idle);
}

/* On admission: q starts from the `hit` cached blocks prefix_lookup found (shared and
 * read-only: q writes only past them) and prefills only the rest. The first admission
 * tells the request and the metrics how many prompt tokens came from the cache. */
static void seq_take_prefix(struct scheduler *s, struct seq *q, int hit) {
    memcpy(q->blocks, s->hit_ids, sizeof(int32_t) * (size_t)hit);
    block_pool_ref(&s->pool, hit, q->blocks);
    q->n_blocks = q->n_committed = hit;
    q->n_cached = hit * s->block_size;
    if (q->admitted) return;
    q->admitted = 1;
    int cached = q->n_cached < q->req->n_prompt ? q->n_cached : q->req->n_prompt;
    req_set_cached_tokens(q->req, cached);
    if (s->pool.caching) metrics_prefix_cache(s->m, q->req->n_prompt, cached);
}

/* After a step: every block of q that is now full joins the prefix cache (during prefill
 * and decode alike), in order, each chained to the one before. A block another sequence
 * computed at the same time is replaced by that cached copy. */
static void seq_commit_blocks(struct scheduler *s, struct seq *q) {
    if (!s->pool.caching) return;
    for (int bs = s->block_size; (q->n_committed + 1) * bs <= q->n_cached; q->n_committed++) {
        int k = q->n_committed;
        q->blocks[k] = block_pool_commit(&s->pool, q->blocks[k], k ? q->blocks[k - 1] : -1, q->req->cache_salt,
                                         q->tokens + (size_t)k * (size_t)bs);
    }
}

/* Moves waiting work into the running set while there is room: preempted sequences first,
 * then the queue in arrival order (FCFS), except that a request under its share goes ahead
 * of ones whose request or uid is over theirs, and may take a slot (or blocks) from a
 * request over its share by preempting it. A sequence is admitted only when the blocks for
 * all of its known tokens are free. */
static void admit(struct scheduler *s) {
    for (int guard = 0; guard < 4 * (s->o.max_running + s->o.max_queue); guard++) {
        /* candidates in order: preempted, then the queue; pick the first that deserves to go
         * ahead, else the first */
        pthread_mutex_lock(&s->mu);
        while (s->q_len && atomic_load(&s->queue[s->q_head]->cancelled)) { /* never started */
            struct gen_request *r = queue_take(s, 0);
            req_finish(r, FINISH_CANCELLED);
            req_unref(r);
        }
        int n_cand = s->n_preempted + s->q_len, pick = -1;
        for (int k = 0; k < n_cand && pick < 0; k++) {
            const struct gen_request *r =
                k < s->n_preempted ? s->preempted[k]->req : s->queue[(s->q_head + k - s->n_preempted) % s->o.max_queue];
            if (deserves(s, r)) pick = k;
        }
        int fair = pick >= 0;
        if (!fair) pick = n_cand ? 0 : -1;
        if (pick < 0) {
            pthread_mutex_unlock(&s->mu);
            return;
        }
        struct gen_request *r =
            pick < s->n_preempted ? s->preempted[pick]->req : s->queue[(s->q_head + pick - s->n_preempted) % s->o.max_queue];
        int tokens = pick < s->n_preempted ? s->preempted[pick]->n_tokens : r->n_prompt;
        const int32_t *known = pick < s->n_preempted ? s->preempted[pick]->tokens : r->prompt;
        int idle, hit = prefix_lookup(s, r, known, tokens, &idle);
        int room = s->n_running < s->o.max_running &&
                   blocks_needed(s, tokens + 1) - hit <= block_pool_available(&s->pool) - idle;
        if (!room) {
            int v = fair ? victim_for(s, r) : -1;
            pthread_mutex_unlock(&s->mu);
            if (v < 0) return;
            preempt_at(s, v); /* then r is picked again */
            continue;
        }
        struct seq *q;
        if (pick < s->n_preempted) {
            pthread_mutex_unlock(&s->mu);
            q = s->preempted[pick];
            memmove(s->preempted + pick, s->preempted + pick + 1, sizeof *s->preempted * (size_t)(--s->n_preempted - pick));
        } else {
            queue_take(s, pick - s->n_preempted);
            pthread_mutex_unlock(&s->mu);
            q = seq_from_request(s, r);
        }
        seq_take_prefix(s, q, hit);
        insert_by_age(s->running, &s->n_running, q);
    }
}

/* ---- speculative decoding (policy in spec.h): drafts before the plan, verification
 * after the step, rollback of what was rejected ---- */

static enum finish_reason emit(struct scheduler *s, struct seq *q, int32_t tok, const struct token_event *ev,
                               double now);

/* How many of the n drafts the grammar allows in a row from its state (which it keeps): a
 * draft it refuses would be rejected at verification (its target probability is 0), and
 * with a drafter that proposes tokens the verification then samples from the target's
 * distribution as it would without that draft, so cutting there changes no output. */
static int grammar_drafts(struct grammar_matcher *g, const int32_t *draft, int n) {
    int ok = 0;
    while (ok < n && ok < 64 && grammar_matcher_accept(g, draft[ok]) == 0) ok++; /* 64: rollback's reach */
    if (ok && grammar_matcher_rollback(g, ok)) FATAL("grammar rollback of %d drafts failed", ok);
    return ok;
}

/* Asks the drafter for tokens for every decoding sequence that may speculate; the drafts
 * go into q->tokens after its last token (not counted in n_tokens until accepted). */
static void draft_all(struct scheduler *s) {
    const struct spec_opts *o = &s->o.spec;
    int n_dec = 0, n_jobs = 0;
    for (int i = 0; i < s->n_running; i++) {
        struct seq *q = s->running[i];
        if (q->mb) continue; /* in flight in the pipeline */
        q->spec.n_draft = 0;
        n_dec += q->n_tokens - q->n_cached == 1;
    }
    if (!o->drafter) return;
    long limit = sched_seq_limit(s->max_ctx, s->pool.n_blocks * s->block_size);
    for (int i = 0; i < s->n_running; i++) {
        struct seq *q = s->running[i];
        /* a grammar-constrained request speculates with a drafter that proposes tokens (not
         * distributions: a stochastic drafter's q would have to be masked as the draft
         * advances); its drafts are cut where the grammar refuses one (grammar_drafts) */
        if (q->mb || q->n_tokens - q->n_cached != 1 || q->req->no_speculation || q->req->max_tokens == 0 ||
            (q->req->grammar && o->drafter->stochastic))
            continue;
        /* every draft accepted still leaves one more token to emit within max_tokens and
         * the context: the step then emits n_draft + 1 */
        long room = q->req->max_tokens - q->n_generated - 1;
        if (limit - q->n_tokens < room) room = limit - q->n_tokens;
        int k = spec_want(o, &q->spec, n_dec, (int)(room < o->k ? room : o->k), o->no_cost ? NULL : &s->spec_cost);
        if (k < 1) continue;
        if (o->drafter->stochastic && !q->spec.q)
            q->spec.q = xmalloc(sizeof(float) * (size_t)o->k * (size_t)s->vocab);
        s->jobs[n_jobs++] = (struct draft_job){.seq = (uint64_t)(uintptr_t)q, .request = q->req->id, .tokens = q->tokens,
                                              .n_tokens = q->n_tokens, .k = k, .out = q->tokens + q->n_tokens,
                                              .q = o->drafter->stochastic ? q->spec.q : NULL};
    }
    if (!n_jobs) return;
    drafter_propose(o->drafter, s->jobs, n_jobs);
    for (int j = 0; j < n_jobs; j++) {
        struct seq *q = (struct seq *)(uintptr_t)s->jobs[j].seq;
        q->spec.n_draft = q->req->grammar ? grammar_drafts(q->req->grammar, s->jobs[j].out, s->jobs[j].n_out)
                                          : s->jobs[j].n_out;
    }
}

/* Gives back the blocks past what q's tokens need (those that held only rejected drafts). */
static void trim_blocks(struct scheduler *s, struct seq *q) {
    int keep = blocks_needed(s, q->n_tokens);
    if (q->n_blocks > keep) {
        block_pool_release(&s->pool, q->n_blocks - keep, q->blocks + keep);
        q->n_blocks = keep;
    }
}

/* The grammar's mask on q's logits row. With the closer (the default), the budget is the
 * tokens q may still generate, this one included: max_tokens and the sequence's context
 * limit both count, as emit ends q at either; the output then ends complete within it. */
static void apply_grammar(struct scheduler *s, struct seq *q, float *lg) {
    if (q->req->grammar_no_close) {
        grammar_matcher_apply(q->req->grammar, lg, s->vocab);
        return;
    }
    long limit = sched_seq_limit(s->max_ctx, s->pool.n_blocks * s->block_size);
    long budget = (long)q->req->max_tokens - q->n_generated;
    if (limit - q->n_tokens < budget) budget = limit - q->n_tokens;
    if (grammar_matcher_apply_budget(q->req->grammar, lg, s->vocab, budget)) q->closed = 1;
}

/* Samples q's next token from its logits row (k > 0: the row holds its k best candidates),
 * through q's grammar when it has one, and emits it. draft >= 0: verifies that draft instead
 * (qd: the drafter's distribution, NULL for a drafter that proposes tokens), *ok = 1 when it
 * is accepted. */
static enum finish_reason sample_token(struct scheduler *s, struct seq *q, float *row, int k, int32_t draft,
                                       const float *qd, int *ok, double now) {
    struct token_event ev;
    memset(&ev, 0, sizeof ev);
    *ok = 0;
    int32_t tok;
    if (q->presampled) { /* presample_all drew it already (draft < 0, no grammar, whole row) */
        tok = q->pre_tok;
        ev = q->pre_ev;
        q->presampled = 0;
    } else if (k > 0) { /* the row's best k candidates: q is light (seq_light) */
        const struct logit_cand *c = (const struct logit_cand *)row;
        tok = draft >= 0 ? sampler_verify_cands(q->smp, c, k, draft, ok, &ev) : sampler_next_cands(q->smp, c, k, &ev);
    } else {
        if (q->req->grammar) apply_grammar(s, q, row); /* before any sampling step */
        tok = draft >= 0 ? sampler_verify(q->smp, row, draft, qd, ok, &ev) : sampler_next(q->smp, row, &ev);
    }
    if (q->req->grammar) grammar_matcher_accept(q->req->grammar, tok);
    enum finish_reason why = emit(s, q, tok, &ev, now);
    /* a grammar past its limits allows only the end from now on: the request ends here (with
     * ignore_eos too), and the frontend reports the matcher's error */
    if (why == FINISH_NONE && q->req->grammar && grammar_matcher_error(q->req->grammar)) why = FINISH_EOS;
    /* the grammar ended early because the budget shortened it: the client learns the
     * content was cut to fit, as OpenAI's "length" says */
    if (why == FINISH_EOS && q->closed) why = FINISH_LENGTH;
    return why;
}

/* Rows lg[0..n_draft] are the target's logits after q's last token and after each draft.
 * Emits the accepted drafts, then the correction (at the first rejection) or a bonus token
 * (all accepted), stopping early where the request ends. The K/V of the last token and
 * of the accepted drafts stays cached; positions past them (rejected drafts) are rolled
 * back and later steps overwrite them. */
static enum finish_reason verify_drafts(struct scheduler *s, struct seq *q, float *lg, int k, int n_draft,
                                        double now) {
    int32_t draft[n_draft];
    memcpy(draft, q->tokens + q->n_tokens, sizeof draft); /* emit overwrites them */
    const float *qd = s->o.spec.drafter->stochastic ? q->spec.q : NULL;
    enum finish_reason why = FINISH_NONE;
    int accepted = 0;
    for (int j = 0; j <= n_draft && why == FINISH_NONE; j++) {
        int ok; /* every draft accepted: row n_draft gives the bonus token */
        why = sample_token(s, q, lg + (size_t)j * (size_t)s->vocab, k, j < n_draft ? draft[j] : -1,
                           qd && j < n_draft ? qd + (size_t)j * (size_t)s->vocab : NULL, &ok, now);
        if (!ok) break;
        accepted++;
    }
    spec_observe(&q->spec, &s->spec_st, n_draft, accepted);
    q->n_cached += accepted; /* the accepted drafts' K/V was written this step */
    if (why == FINISH_NONE) {
        trim_blocks(s, q);
        seq_commit_blocks(s, q);
        drafter_keep(s->o.spec.drafter, (uint64_t)(uintptr_t)q, q->n_tokens);
    }
    return why;
}

/* Fills the plan: first one decode token for every sequence whose tokens are all cached
 * but the last, then prefill chunks in running order, all within the token budget. */
/* The work of n tokens fed at positions pos..pos+n-1, in token-equivalents: each costs its
 * share of the weights (1) plus attention over its context (position / attn_ctx_unit). */
static double step_units(const struct scheduler *s, int pos, int n) {
    return n * (1.0 + (pos + (n - 1) / 2.0) / s->attn_ctx_unit);
}

/* The longest prefill chunk from pos whose units fit in `room` (at least min_n tokens, so a
 * long prompt always progresses), at most max_n. */
static int chunk_within(const struct scheduler *s, int pos, int max_n, double room, int min_n) {
    if (step_units(s, pos, max_n) <= room) return max_n;
    int lo = 0, hi = max_n; /* step_units grows with n: bisect for the largest that fits */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (step_units(s, pos, mid) <= room) lo = mid;
        else hi = mid - 1;
    }
    return lo > min_n ? lo : (min_n < max_n ? min_n : max_n);
}

#define PREFILL_MIN_TOKENS 16

/* Whether q's step feeds prompt tokens whose rows score the next prompt token (echo with
 * logprobs): then every fed token's logits row comes back. */
static int seq_scores_prompt(const struct seq *q) {
    return q->req->prompt_events && !q->prompt_scored && q->n_cached < q->req->n_prompt - 1;
}

/* Prompt tokens n_cached+1 .. scored from the rows of the tokens fed this step (row t of
 * q's rows follows token n_cached + t); once the last prompt token is fed, they are all
 * there and the frontend may read them. */
static void score_prompt(struct scheduler *s, struct seq *q, const float *rows) {
    struct gen_request *r = q->req;
    for (int t = 0; t < q->in_step && q->n_cached + t + 1 < r->n_prompt; t++) {
        int p = q->n_cached + t + 1;
        sampler_score(q->smp, rows + (size_t)t * (size_t)s->vocab, r->prompt[p], &r->prompt_events[p]);
    }
    if (q->n_cached + q->in_step >= r->n_prompt - 1) {
        q->prompt_scored = 1;
        req_set_prompt_scored(r);
    }
}

/* Whether q samples from its rows' best max_cands candidates alone (sampler_light; no
 * grammar mask, no drafter distribution to verify against), so its rows may come back as
 * candidates instead of whole. */
static int seq_light(const struct scheduler *s, const struct seq *q) {
    if (s->max_cands < 1 || q->req->grammar || !sampler_light(q->smp, s->max_cands)) return 0;
    return !(q->spec.n_draft > 0 && s->o.spec.drafter->stochastic);
}

/* Fills the plan: first one decode token for every sequence whose tokens are all cached
 * but the last, then prefill chunks in running order, within the token budget and, once
 * the speed of a step is known, within step_time_s (a chunk deep into a long prompt costs
 * more per token, so it gets fewer tokens: other sequences' decode keeps its pace). */
static void build_plan(struct scheduler *s) {
    struct step_plan *p = &s->plan;
    plan_clear(p);
    int budget = s->o.step_tokens;
    double units = s->o.step_time_s > 0 && s->sec_per_unit > 0 ? s->o.step_time_s / s->sec_per_unit : 1e300;
    s->plan_decode_only = 1;
    int scoring = 0; /* a prompt being scored is in this plan */
    draft_all(s);
    /* micro-batches share the running sequences: each takes at most its part */
    int seqs = s->max_mb > 1 ? (s->n_running + s->max_mb - 1) / s->max_mb : s->n_running;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n_running && budget > 0 && seqs > 0; i++) {
            struct seq *q = s->running[i];
            if (q->mb) continue; /* in flight in another micro-batch */
            int pending = q->n_tokens - q->n_cached;
            int is_decode = pending == 1;
            if (pass == 0 ? !is_decode : is_decode) continue;
            if (is_decode) pending += q->spec.n_draft;
            int n = pending < budget ? pending : budget;
            if (is_decode) q->spec.n_draft = n - 1; /* drafts past the budget dropped */
            if (!is_decode && seq_scores_prompt(q)) {
                if (scoring) continue;
                if (n > SCORE_ROWS) n = SCORE_ROWS;
            }
            if (!is_decode) n = chunk_within(s, q->n_cached, n, units, PREFILL_MIN_TOKENS);
            if (grow_blocks(s, q, q->n_cached + n)) { /* q preempted, or alone and too long */
                q->spec.n_draft = 0;
                continue;
            }
            q->in_step = n;
            scoring |= !is_decode && seq_scores_prompt(q);
            if (!is_decode) s->plan_decode_only = 0;
            seqs--;
            budget -= n;
            units -= step_units(s, q->n_cached, n);
        }
    /* preemption may have removed sequences already given tokens; build from survivors:
     * those whose rows come back whole first, then the light ones, so that the whole rows are
     * one block at the front (one download each rank: forward.c gather_logits) */
    for (int i = 0; i < s->n_running; i++)
        if (!s->running[i]->in_step) s->running[i]->spec.n_draft = 0;
    for (int light = 0; light < 2; light++)
        for (int i = 0; i < s->n_running; i++) {
            struct seq *q = s->running[i];
            if (!q->in_step || q->mb || seq_light(s, q) != light) continue;
            q->row0 = p->n_out;
            plan_add(p, q->tokens + q->n_cached, q->in_step, q->n_cached, q->blocks, q->n_blocks,
                     q->spec.n_draft > 0 || seq_scores_prompt(q));
            if (light) {
                for (int r = q->row0; r < p->n_out; r++) p->out_full[r] = 0;
                p->n_cands = s->max_cands;
            }
        }
}

static int is_eog(const struct scheduler *s, int32_t tok) {
    if (!s->o.eog_ids) return tok == s->eos_id;
    for (int i = 0; i < s->o.n_eog; i++)
        if (s->o.eog_ids[i] == tok) return 1;
    return 0;
}

/* Appends a sampled token to q and its request; returns why q ends now (FINISH_NONE: it goes on). */
static enum finish_reason emit(struct scheduler *s, struct seq *q, int32_t tok, const struct token_event *ev,
                               double now) {
    q->tokens[q->n_tokens++] = tok;
    q->n_generated++;
    if (q->n_generated == 1) {
        q->req->t_first_token = now;
        metrics_observe(s->m, HIST_TTFT, now - q->req->t_submit);
    } else {
        metrics_observe(s->m, HIST_ITL, now - q->t_last);
    }
    q->t_last = now;
    req_push(q->req, ev);
    if (!q->req->ignore_eos && is_eog(s, tok)) return FINISH_EOS;
    if (q->n_generated >= q->req->max_tokens || q->n_tokens >= s->max_ctx) return FINISH_LENGTH;
    return FINISH_NONE;
}

/* The speculative-decoding counters, for sched_stats. */
static void publish_spec(struct scheduler *s) {
    pthread_mutex_lock(&s->mu);
    s->spec_pub = s->spec_st;
    pthread_mutex_unlock(&s->mu);
}


static void presample_run(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct presample_run *r = p;
    for (int j; (j = atomic_fetch_add(&r->next, 1)) < r->n;) {
        struct seq *q = r->jobs[j];
        q->pre_tok = sampler_next(q->smp, r->logits + (size_t)q->row0 * (size_t)r->vocab, &q->pre_ev);
        q->presampled = 1;
    }
}

/* The whole-row draws of micro-batch mb, on the sampling threads: at ~0.15 ms a row for a
 * 152k vocabulary (sampler.h), 64 of them one after another would take longer than a GPU's
 * decode step. Only what needs no order between sequences runs here: sequences sampling one
 * token from a whole row with no grammar (a grammar's matcher shares its compiled grammar's
 * caches; drafts are verified in order). Each sampler is one request's alone, so its tokens
 * are the ones sample_all would have drawn; sample_all emits them in the usual order. */
static void presample_all(struct scheduler *s, int mb, float *logits, int k) {
    if (!s->sample_pool) return;
    struct presample_run *r = &s->pre;
    r->n = 0;
    r->logits = logits;
    r->vocab = s->vocab;
    for (int i = 0; i < s->n_running; i++) {
        struct seq *q = s->running[i];
        if (!q->in_step || q->mb != mb) continue;
        if (q->spec.n_draft > 0 || q->req->grammar || q->req->max_tokens == 0 || (k > 0 && seq_light(s, q)) ||
            seq_scores_prompt(q))
            continue;
        if (q->n_cached + q->in_step < q->n_tokens) continue; /* mid-prompt chunk */
        r->jobs[r->n++] = q;
    }
    if (r->n < 2) return;
    atomic_store(&r->next, 0);
    threadpool_run(s->sample_pool, presample_run, r);
}

/* After micro-batch mb returned with its logits (k > 0: its light sequences' rows hold their
 * k best candidates, seq_light): every sequence of it whose fed tokens reached its last
 * known token samples (verifying its drafts first, when it had some). */
static void sample_all(struct scheduler *s, int mb, float *logits, int k) {
    presample_all(s, mb, logits, k);
    double now = clock_now();
    for (int i = 0; i < s->n_running;) {
        struct seq *q = s->running[i];
        if (!q->in_step || q->mb != mb) {
            i++;
            continue;
        }
        int n_draft = q->spec.n_draft;
        /* as build_plan marked q's rows (seq_light reads the same n_draft) */
        const int kq = k > 0 && seq_light(s, q) ? k : 0;
        float *lg = logits + (size_t)q->row0 * (size_t)s->vocab;
        if (seq_scores_prompt(q)) { /* a row per fed token: the step's last one samples */
            score_prompt(s, q, lg);
            lg += (size_t)(q->in_step - 1) * (size_t)s->vocab;
        }
        int prompt_end = q->n_cached + q->in_step < q->req->n_prompt ? q->n_cached + q->in_step : q->req->n_prompt;
        if (prompt_end > q->n_cached) /* prompt tokens computed, not found in the cache */
            metrics_prompt_computed(s->m, prompt_end - q->n_cached);
        q->n_cached += q->in_step - n_draft; /* drafts count once accepted */
        q->in_step = 0;
        q->mb = 0;
        q->spec.n_draft = 0;
        seq_commit_blocks(s, q);
        if (q->n_cached < q->n_tokens) { /* mid-prompt chunk */
            i++;
            continue;
        }
        enum finish_reason why = FINISH_NONE;
        if (q->req->max_tokens == 0) { /* prefill only (tpd generate -n 0) */
            why = FINISH_LENGTH;
        } else if (n_draft > 0) {
            why = verify_drafts(s, q, lg, kq, n_draft, now);
        } else {
            int ok;
            why = sample_token(s, q, lg, kq, -1, NULL, &ok, now);
        }
        if (why != FINISH_NONE) {
            publish_spec(s); /* a client that sees its request end finds its drafts counted */
            memmove(s->running + i, s->running + i + 1, sizeof *s->running * (size_t)(s->n_running - i - 1));
            s->n_running--;
            finish_seq(s, q, why);
        } else {
            i++;
        }
    }
    publish_spec(s);
}

/* After a step: seconds per token-equivalent, averaged over recent steps large enough
 * that fixed per-step costs do not dominate. */
static void learn_step_speed(struct scheduler *s, int mb, double seconds) {
    double u = 0;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->in_step && s->running[i]->mb == mb) u += step_units(s, s->running[i]->n_cached, s->running[i]->in_step);
    if (u < 32) return;
    double spu = seconds / u;
    s->sec_per_unit = s->sec_per_unit > 0 ? 0.7 * s->sec_per_unit + 0.3 * spu : spu;
}

/* The plan just built goes into the pipeline as a new micro-batch; its sequences are marked
 * in flight, so no later plan feeds them until it returns. */
static void submit_micro_batch(struct scheduler *s) {
    int slot = (s->mb_head + s->n_mb) % s->max_mb;
    int id = s->mb_last_id = s->mb_last_id % 1000000000 + 1;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->in_step && !s->running[i]->mb) s->running[i]->mb = id;
    s->mb[slot].id = id;
    s->mb[slot].n_tokens = s->plan.n_tokens;
    s->mb[slot].decode_only = s->plan_decode_only;
    s->mb[slot].n_cands = s->plan.n_cands;
    s->mb[slot].n_out = s->plan.n_out;
    s->mb[slot].n_light = 0;
    for (int r = 0; s->plan.n_cands > 0 && r < s->plan.n_out; r++) s->mb[slot].n_light += !s->plan.out_full[r];
    s->mb[slot].t0 = clock_now();
    if (s->n_mb++ == 0) {
        pthread_mutex_lock(&s->mu);
        s->step_started = s->mb[slot].t0;
        pthread_mutex_unlock(&s->mu);
    }
    engine_submit(s->e, &s->plan, s->mb_logits[slot]);
}

/* Waits for the oldest micro-batch's logits; its sequences sample. */
static void collect_micro_batch(struct scheduler *s) {
    int slot = s->mb_head;
    engine_collect(s->e);
    s->mb_head = (s->mb_head + 1) % s->max_mb;
    s->n_mb--;
    pthread_mutex_lock(&s->mu);
    s->step_started = s->n_mb ? s->mb[s->mb_head].t0 : 0;
    pthread_mutex_unlock(&s->mu);
    learn_step_speed(s, s->mb[slot].id, clock_now() - s->mb[slot].t0);
    metrics_logits_rows(s->m, s->mb[slot].n_out - s->mb[slot].n_light, s->mb[slot].n_light);
    sample_all(s, s->mb[slot].id, s->mb_logits[slot], s->mb[slot].n_cands);
    /* what a decode step costs, verification included (spec.h); with micro-batches in
     * flight, from its submission to its sampling, other stages' overlap included */
    if (s->o.spec.drafter && s->mb[slot].decode_only)
        spec_cost_observe(&s->spec_cost, s->mb[slot].n_tokens, clock_now() - s->mb[slot].t0);
}

int sched_step(struct scheduler *s, double idle_s) {
    drop_cancelled(s);
    admit(s);
    if (s->n_running == 0) {
        /* idle: a heartbeat now and then, so a rank that stopped is noticed without traffic */
        if (clock_now() - s->last_ping > PING_S) {
            s->last_ping = clock_now();
            engine_ping(s->e);
        }
        publish(s);
        pthread_mutex_lock(&s->mu);
        if (s->q_len == 0 && idle_s > 0) {
            struct timespec dl = clock_deadline(idle_s);
            pthread_cond_timedwait(&s->cv, &s->mu, &dl);
        }
        int n = s->q_len + s->n_preempted;
        pthread_mutex_unlock(&s->mu);
        return n;
    }
    /* With pipeline stages, up to max_mb micro-batches are in flight: a new one is submitted
     * while there is room and some sequence is in none; else the oldest is collected and its
     * sequences sample (docs/tensor-parallel.md#micro-batches). With max_mb 1: one step. */
    plan_clear(&s->plan);
    if (s->n_mb < s->max_mb) build_plan(s);
    if (s->plan.n_seqs > 0) {
        submit_micro_batch(s);
        if (s->max_mb == 1) collect_micro_batch(s);
    } else if (s->n_mb > 0) {
        collect_micro_batch(s);
    } else if (s->n_running == 1) {
        /* a lone sequence that cannot get a block: the cache is too small for it */
        struct seq *q = s->running[--s->n_running];
        LOG(LOG_WARN, "request %llu needs more KV blocks than the cache holds", (unsigned long long)q->req->id);
        finish_seq(s, q, FINISH_LENGTH);
    }
    publish(s);
    pthread_mutex_lock(&s->mu);
    int n = s->q_len + s->n_running + s->n_preempted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sched_abort_all(struct scheduler *s) {
    while (s->n_mb > 0) { /* the pipeline finishes what it holds: every rank expects it */
        int slot = s->mb_head;
        engine_collect(s->e);
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i]->mb == s->mb[slot].id) s->running[i]->mb = s->running[i]->in_step = 0;
        s->mb_head = (s->mb_head + 1) % s->max_mb;
        s->n_mb--;
    }
    while (s->n_running) finish_seq(s, s->running[--s->n_running], FINISH_ABORTED);
    while (s->n_preempted) finish_seq(s, s->preempted[--s->n_preempted], FINISH_ABORTED);
    pthread_mutex_lock(&s->mu);
    while (s->q_len) {
        struct gen_request *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->o.max_queue;
        s->q_len--;
        req_finish(r, FINISH_ABORTED);
        req_unref(r);
    }
    pthread_mutex_unlock(&s->mu);
    publish(s);
}
