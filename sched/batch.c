#include "batch.h"

#include <stdlib.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "drafter.h"
#include "metrics.h"
#include "queue.h"
#include "sampler.h"
#include "scheduler.h"

void batch_init(struct batch *b, const struct engine_info *info, const struct sched_opts *o,
                struct metrics *m) {
    memset(b, 0, sizeof *b);
    b->o = o;
    b->m = m;
    b->drafter = o->spec.drafter;
    b->vocab = info->vocab;
    b->block_size = info->block_size;
    b->max_ctx = info->max_ctx;
    b->attn_ctx_unit = info->attn_ctx_unit > 1 ? info->attn_ctx_unit : 1;
    b->rows_per_seq = 1 + (o->spec.drafter && o->spec.k > 0 ? o->spec.k : 0);
    b->max_cands = o->logit_cands ? info->max_cands : 0;
    block_pool_init(&b->pool, info->n_blocks, info->block_size, o->prefix_caching,
                    info->sink_blocks);
    b->hit_ids = xmalloc(sizeof(int32_t) * (size_t)(info->n_blocks > 0 ? info->n_blocks : 1));
    plan_init(&b->plan);
    b->running = xcalloc((unsigned long)o->max_running, sizeof *b->running);
    /* fairness may admit from the queue while others wait preempted */
    b->preempted = xcalloc((unsigned long)o->max_running + (unsigned long)o->max_queue,
                           sizeof *b->preempted);
}

void batch_free(struct batch *b) {
    free(b->running);
    free(b->preempted);
    free(b->hit_ids);
    plan_free(&b->plan);
    block_pool_free(&b->pool);
}

/* ---- sequences ---- */

static struct seq *seq_from_request(struct batch *b, struct gen_request *r) {
    struct seq *q = xcalloc(1, sizeof *q);
    q->req = r;
    q->cap_tokens = r->n_prompt + r->max_tokens + b->rows_per_seq; /* room for drafts */
    q->tokens = xmalloc(sizeof(int32_t) * (size_t)q->cap_tokens);
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    q->n_tokens = r->n_prompt;
    q->cap_blocks = (q->cap_tokens + b->block_size - 1) / b->block_size;
    q->blocks = xmalloc(sizeof(int32_t) * (size_t)q->cap_blocks);
    q->smp = sampler_new(&r->sp, b->vocab, r->prompt, r->n_prompt);
    q->prompt_scored = !r->prompt_events || r->n_prompt < 2; /* a lone token has nothing to score */
    if (r->prompt_events && q->prompt_scored) req_set_prompt_scored(r);
    return q;
}

static void seq_free(struct batch *b, struct seq *q) {
    if (b->drafter) drafter_forget(b->drafter, (uint64_t)(uintptr_t)q);
    free(q->spec.q);
    block_pool_release(&b->pool, q->n_blocks, q->blocks);
    free(q->blocks);
    free(q->tokens);
    if (q->smp) sampler_delete(q->smp);
    req_unref(q->req);
    free(q);
}

void batch_finish(struct batch *b, struct seq *q, enum finish_reason why) {
    req_finish(q->req, why);
    metrics_observe(b->m, HIST_E2E, clock_now() - q->req->t_submit);
    metrics_tokens(b->m, q->req->n_prompt, q->n_generated);
    seq_free(b, q);
}

struct seq *batch_remove(struct batch *b, int i) {
    struct seq *q = b->running[i];
    memmove(b->running + i, b->running + i + 1,
            sizeof *b->running * (size_t)(b->n_running - i - 1));
    b->n_running--;
    return q;
}

void batch_abort_all(struct batch *b) {
    while (b->n_running) batch_finish(b, b->running[--b->n_running], FINISH_ABORTED);
    while (b->n_preempted) batch_finish(b, b->preempted[--b->n_preempted], FINISH_ABORTED);
}

void batch_publish(const struct batch *b, struct sched_queue *queue) {
    struct sched_uid_usage u[SCHED_MAX_UID_STATS];
    int n = 0;
    memset(u, 0, sizeof u);
    for (int i = 0; i < b->n_running; i++)
        queue_count_uid(u, &n, b->running[i]->req->uid, 1, 0, b->running[i]->n_blocks);
    for (int i = 0; i < b->n_preempted; i++)
        queue_count_uid(u, &n, b->preempted[i]->req->uid, 1, 0, 0);
    queue_publish(queue, u, n, b->n_running + b->n_preempted, block_pool_available(&b->pool),
                  b->pool.n_cached);
}

long batch_seq_limit(const struct batch *b) {
    return sched_seq_limit(b->max_ctx, b->pool.n_blocks * b->block_size);
}

int seq_scores_prompt(const struct seq *q) {
    return q->req->prompt_events && !q->prompt_scored && q->n_cached < q->req->n_prompt - 1;
}

/* Whether q samples from its rows' best max_cands candidates alone (sampler_light; no
 * grammar mask, no drafter distribution to verify against), so its rows may come back as
 * candidates instead of whole. */
int batch_seq_light(const struct batch *b, const struct seq *q) {
    if (b->max_cands < 1 || q->req->grammar || !sampler_light(q->smp, b->max_cands)) return 0;
    return !(q->spec.n_draft > 0 && b->drafter->stochastic);
}

/* Blocks a sequence needs to cache `tokens` tokens. */
static int blocks_needed(const struct batch *b, int tokens) {
    return block_pool_blocks_for(tokens, b->block_size);
}

void batch_trim_blocks(struct batch *b, struct seq *q) {
    int keep = blocks_needed(b, q->n_tokens);
    if (q->n_blocks > keep) {
        block_pool_release(&b->pool, q->n_blocks - keep, q->blocks + keep);
        q->n_blocks = keep;
    }
}

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

/* ---- preemption ---- */

/* Preemption by recompute: the sequence gives back every block and will prefill its
 * prompt and generated tokens again (less whatever of them is still in the prefix cache
 * when it resumes: its full blocks stay cached until evicted); its sampler state is kept,
 * so it continues exactly as it would have. The youngest running sequence goes first
 * (vLLM's policy, by arrival: insert_by_age). */
static void preempt_last(struct batch *b, struct sched_queue *queue) {
    struct seq *q = b->running[--b->n_running];
    block_pool_release(&b->pool, q->n_blocks, q->blocks); /* its full blocks stay cached */
    q->n_blocks = 0;
    q->n_committed = 0;
    q->n_cached = 0;
    q->in_step = 0;
    q->spec.n_draft = 0;
    if (b->drafter) drafter_forget(b->drafter, (uint64_t)(uintptr_t)q);
    insert_by_age(b->preempted, &b->n_preempted, q); /* resumed oldest first, before the queue */
    metrics_preemption(b->m);
    queue_count_preemption(queue);
    LOG(LOG_DEBUG, "preempted request %llu (%d tokens)", (unsigned long long)q->req->id,
        q->n_tokens);
}

/* Preemption by recompute of running[i] (see preempt_last). */
static void preempt_at(struct batch *b, struct sched_queue *queue, int i) {
    struct seq *q = b->running[i];
    memmove(b->running + i, b->running + i + 1,
            sizeof *b->running * (size_t)(b->n_running - i - 1));
    b->running[b->n_running - 1] = q;
    preempt_last(b, queue);
}

/* Makes sure q has blocks for `tokens` cached tokens, preempting the youngest sequences
 * while blocks are short; q yields itself when it is the youngest left (never taking the
 * blocks of an older one). Returns -1 when q itself had to be preempted, when it waits for
 * sequences in flight (n_mb micro-batches), or when q runs alone and the cache still cannot
 * hold it. */
static int grow_blocks(struct batch *b, struct sched_queue *queue, int n_mb, struct seq *q,
                       int tokens) {
    int need = blocks_needed(b, tokens) - q->n_blocks;
    while (need > 0 && block_pool_available(&b->pool) < need) {
        if (b->n_running == 1) return -1;
        int v = b->n_running - 1; /* a sequence in flight keeps its blocks until it returns */
        while (v >= 0 && b->running[v]->mb) v--;
        if (v < 0 || (b->running[v] == q && n_mb > 0)) return -1; /* q waits for them */
        struct seq *last = b->running[v];
        preempt_at(b, queue, v);
        if (last == q) return -1;
    }
    if (need > 0) {
        if (block_pool_take(&b->pool, need, q->blocks + q->n_blocks, q->n_blocks == 0)) return -1;
        q->n_blocks += need;
    }
    return 0;
}

void batch_drop_cancelled(struct batch *b) {
    for (int i = 0; i < b->n_running;) {
        struct seq *q = b->running[i];
        if (atomic_load(&q->req->cancelled) && !q->mb) /* in flight: once it returns */
            batch_finish(b, batch_remove(b, i), FINISH_CANCELLED);
        else i++;
    }
    for (int i = 0; i < b->n_preempted;) {
        struct seq *q = b->preempted[i];
        if (atomic_load(&q->req->cancelled)) {
            memmove(b->preempted + i, b->preempted + i + 1,
                    sizeof *b->preempted * (size_t)(b->n_preempted - i - 1));
            b->n_preempted--;
            batch_finish(b, q, FINISH_CANCELLED);
        } else {
            i++;
        }
    }
}

/* ---- fairness: one API request (its n choices) or one peer uid may hold at most
 * max_share of the running slots and KV blocks while others wait ---- */

static uint64_t group_of(const struct gen_request *r) { return r->group ? r->group : r->id; }

static int fairness_on(const struct batch *b) { return b->o->max_share > 0 && b->o->max_share < 1; }

/* 1 if running sequences holding `slots` slots and `blocks` blocks hold a share. */
static int is_share(const struct batch *b, int slots, int blocks) {
    int cap_slots = (int)(b->o->max_share * b->o->max_running);
    int cap_blocks = (int)(b->o->max_share * b->pool.n_blocks);
    return slots >= (cap_slots > 1 ? cap_slots : 1) || blocks >= (cap_blocks > 1 ? cap_blocks : 1);
}

/* The slots and blocks the running sequences of r's request (by_uid = 0) or of r's uid (1)
 * hold. */
static void usage_of(const struct batch *b, const struct gen_request *r, int by_uid, int *slots,
                     int *blocks) {
    *slots = *blocks = 0;
    for (int i = 0; i < b->n_running; i++) {
        const struct gen_request *o = b->running[i]->req;
        if (by_uid ? o->uid == r->uid : group_of(o) == group_of(r)) {
            (*slots)++;
            *blocks += b->running[i]->n_blocks;
        }
    }
}

/* 1 if the running sequences of r's request (by_uid = 0) or of r's uid (1) already hold
 * their share of slots or blocks. */
static int holds_share(const struct batch *b, const struct gen_request *r, int by_uid) {
    int slots, blocks;
    usage_of(b, r, by_uid, &slots, &blocks);
    return is_share(b, slots, blocks);
}

/* A waiting request deserves to go ahead of earlier ones (and to take a slot from a request
 * over its share) when its own request is under its share, and its uid is too unless the
 * slot would come from that same uid. */
static int deserves(const struct batch *b, const struct gen_request *r) {
    return fairness_on(b) && !holds_share(b, r, 0);
}

/* The running sequence to give way to r: the youngest of another request that holds its
 * share even without it, from r's own uid or from a uid over its share. -1: none, and
 * fairness yields where taking a slot would stop progress (issue 24): a request is trimmed
 * down to its share, never below it, so the victim never deserves to come back at once by
 * preempting r in turn (two requests each needing more than a share of the cache took
 * turns that way forever, neither keeping its blocks long enough to finish); a request's
 * last running sequence is never taken; nor is the oldest running sequence by a younger
 * request (it always progresses, see insert_by_age). */
static int victim_for(const struct batch *b, const struct gen_request *r) {
    int uid_over = holds_share(b, r, 1);
    for (int i = b->n_running - 1; i >= 0; i--) {
        const struct seq *v = b->running[i];
        const struct gen_request *o = v->req;
        if (v->mb || group_of(o) == group_of(r) || (i == 0 && o->arrival < r->arrival)) continue;
        int slots, blocks;
        usage_of(b, o, 0, &slots, &blocks);
        if (!is_share(b, slots - 1, blocks - v->n_blocks)) continue;
        if (o->uid == r->uid ? 1 : (!uid_over && holds_share(b, o, 1))) return i;
    }
    return -1;
}

/* ---- automatic prefix caching (the cache itself is block_pool's) ---- */

/* The prefix-cache hit of a sequence about to be admitted with these tokens: how many of
 * its leading full blocks are cached (their ids in b->hit_ids), and how many of those are
 * idle. The block holding its last token is never reused: that token must be computed for
 * its logits, so a prompt cached whole recomputes its last block (at most block_size
 * tokens) rather than copying a shared block to write into. */
static int prefix_lookup(struct batch *b, const struct gen_request *r, const int32_t *tokens, int n,
                         int *n_idle) {
    /* every prompt row is computed */
    if (r->prompt_events && !req_prompt_scored((struct gen_request *)r)) {
        *n_idle = 0;
        return 0;
    }
    return block_pool_match(&b->pool, r->cache_salt, tokens, (n - 1) / b->block_size, b->hit_ids,
                            n_idle);
}

/* On admission: q starts from the `hit` cached blocks prefix_lookup found (shared and
 * read-only: q writes only past them) and prefills only the rest. The first admission
 * tells the request and the metrics how many prompt tokens came from the cache. */
static void seq_take_prefix(struct batch *b, struct seq *q, int hit) {
    memcpy(q->blocks, b->hit_ids, sizeof(int32_t) * (size_t)hit);
    block_pool_ref(&b->pool, hit, q->blocks);
    q->n_blocks = q->n_committed = hit;
    q->n_cached = hit * b->block_size;
    if (q->admitted) return;
    q->admitted = 1;
    int cached = q->n_cached < q->req->n_prompt ? q->n_cached : q->req->n_prompt;
    req_set_cached_tokens(q->req, cached);
    if (b->pool.caching) metrics_prefix_cache(b->m, q->req->n_prompt, cached);
}

/* After a step: every block of q that is now full joins the prefix cache (during prefill
 * and decode alike), in order, each chained to the one before. A block another sequence
 * computed at the same time is replaced by that cached copy. */
void batch_commit_blocks(struct batch *b, struct seq *q) {
    if (!b->pool.caching) return;
    for (int bs = b->block_size; (q->n_committed + 1) * bs <= q->n_cached; q->n_committed++) {
        int k = q->n_committed;
        q->blocks[k] = block_pool_commit(&b->pool, q->blocks[k], k ? q->blocks[k - 1] : -1,
                                         q->req->cache_salt, q->tokens + (size_t)k * (size_t)bs);
    }
}

/* ---- admission ---- */

/* The k-th candidate for admission: preempted sequences first, then the queue. Under the
 * queue's lock. */
static struct gen_request *candidate(const struct batch *b, const struct sched_queue *queue,
                                     int k) {
    return k < b->n_preempted ? b->preempted[k]->req : queue_peek(queue, k - b->n_preempted);
}

/* Moves waiting work into the running set while there is room: preempted sequences first,
 * then the queue in arrival order (FCFS), except that a request under its share goes ahead
 * of ones whose request or uid is over theirs, and may take a slot (or blocks) from a
 * request over its share by preempting it. A sequence is admitted only when the blocks for
 * all of its known tokens are free. */
void batch_admit(struct batch *b, struct sched_queue *queue) {
    for (int guard = 0; guard < 4 * (b->o->max_running + b->o->max_queue); guard++) {
        /* candidates in order: preempted, then the queue; pick the first that deserves to go
         * ahead, else the first */
        queue_lock(queue);
        queue_drop_cancelled(queue); /* never started */
        int n_cand = b->n_preempted + queue_waiting(queue), pick = -1;
        for (int k = 0; k < n_cand && pick < 0; k++)
            if (deserves(b, candidate(b, queue, k))) pick = k;
        int fair = pick >= 0;
        if (!fair) pick = n_cand ? 0 : -1;
        if (pick < 0) {
            queue_unlock(queue);
            return;
        }
        struct gen_request *r = candidate(b, queue, pick);
        int resumed = pick < b->n_preempted;
        int tokens = resumed ? b->preempted[pick]->n_tokens : r->n_prompt;
        const int32_t *known = resumed ? b->preempted[pick]->tokens : r->prompt;
        int idle, hit = prefix_lookup(b, r, known, tokens, &idle);
        int room = b->n_running < b->o->max_running &&
                   blocks_needed(b, tokens + 1) - hit <= block_pool_available(&b->pool) - idle;
        if (!room) {
            int v = fair ? victim_for(b, r) : -1;
            queue_unlock(queue);
            if (v < 0) return;
            preempt_at(b, queue, v); /* then r is picked again */
            continue;
        }
        struct seq *q;
        if (resumed) {
            queue_unlock(queue);
            q = b->preempted[pick];
            memmove(b->preempted + pick, b->preempted + pick + 1,
                    sizeof *b->preempted * (size_t)(--b->n_preempted - pick));
        } else {
            queue_take(queue, pick - b->n_preempted);
            queue_unlock(queue);
            q = seq_from_request(b, r);
        }
        seq_take_prefix(b, q, hit);
        insert_by_age(b->running, &b->n_running, q);
    }
}

/* ---- the step plan ---- */

/* The work of n tokens fed at positions pos..pos+n-1, in token-equivalents: each costs its
 * share of the weights (1) plus attention over its context (position / attn_ctx_unit). */
static double step_units(const struct batch *b, int pos, int n) {
    return n * (1.0 + (pos + (n - 1) / 2.0) / b->attn_ctx_unit);
}

/* The longest prefill chunk from pos whose units fit in `room` (at least min_n tokens, so a
 * long prompt always progresses), at most max_n. */
static int chunk_within(const struct batch *b, int pos, int max_n, double room, int min_n) {
    if (step_units(b, pos, max_n) <= room) return max_n;
    int lo = 0, hi = max_n; /* step_units grows with n: bisect for the largest that fits */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (step_units(b, pos, mid) <= room) lo = mid;
        else hi = mid - 1;
    }
    return lo > min_n ? lo : (min_n < max_n ? min_n : max_n);
}

#define PREFILL_MIN_TOKENS 16

/* Gives tokens to the sequences in no micro-batch, at most seqs of them: first one decode
 * token (and its drafts) for every sequence whose tokens are all cached but the last, then
 * prefill chunks in running order, within the token budget and, once the speed of a step is
 * known, within step_time_s (a chunk deep into a long prompt costs more per token, so it
 * gets fewer tokens: other sequences' decode keeps its pace). */
static void give_tokens(struct batch *b, struct sched_queue *queue, int n_mb, int seqs) {
    const struct sched_opts *o = b->o;
    int budget = o->step_tokens;
    double units = o->step_time_s > 0 && b->sec_per_unit > 0 ? o->step_time_s / b->sec_per_unit
                                                             : 1e300;
    int scoring = 0; /* a prompt being scored is in this plan */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < b->n_running && budget > 0 && seqs > 0; i++) {
            struct seq *q = b->running[i];
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
            if (!is_decode) n = chunk_within(b, q->n_cached, n, units, PREFILL_MIN_TOKENS);
            /* q preempted, or alone and too long */
            if (grow_blocks(b, queue, n_mb, q, q->n_cached + n)) {
                q->spec.n_draft = 0;
                continue;
            }
            q->in_step = n;
            scoring |= !is_decode && seq_scores_prompt(q);
            if (!is_decode) b->plan_decode_only = 0;
            seqs--;
            budget -= n;
            units -= step_units(b, q->n_cached, n);
        }
}

void batch_build_plan(struct batch *b, struct sched_queue *queue, int n_mb, int max_mb) {
    struct step_plan *p = &b->plan;
    plan_clear(p);
    b->plan_decode_only = 1;
    /* micro-batches share the running sequences: each takes at most its part */
    give_tokens(b, queue, n_mb, max_mb > 1 ? (b->n_running + max_mb - 1) / max_mb : b->n_running);
    /* preemption may have removed sequences already given tokens; build from survivors:
     * those whose rows come back whole first, then the light ones, so that the whole rows are
     * one block at the front (one download each rank: forward.c gather_logits) */
    for (int i = 0; i < b->n_running; i++)
        if (!b->running[i]->in_step) b->running[i]->spec.n_draft = 0;
    for (int light = 0; light < 2; light++)
        for (int i = 0; i < b->n_running; i++) {
            struct seq *q = b->running[i];
            if (!q->in_step || q->mb || batch_seq_light(b, q) != light) continue;
            q->row0 = p->n_out;
            plan_add(p, q->tokens + q->n_cached, q->in_step, q->n_cached, q->blocks, q->n_blocks,
                     q->spec.n_draft > 0 || seq_scores_prompt(q));
            if (light) {
                for (int r = q->row0; r < p->n_out; r++) p->out_full[r] = 0;
                p->n_cands = b->max_cands;
            }
        }
}

void batch_mark_in_flight(struct batch *b, int id) {
    for (int i = 0; i < b->n_running; i++)
        if (b->running[i]->in_step && !b->running[i]->mb) b->running[i]->mb = id;
}

void batch_clear_in_flight(struct batch *b, int id) {
    for (int i = 0; i < b->n_running; i++)
        if (b->running[i]->mb == id) b->running[i]->mb = b->running[i]->in_step = 0;
}

/* Seconds per token-equivalent, averaged over recent steps large enough that fixed per-step
 * costs do not dominate. */
void batch_learn_speed(struct batch *b, int id, double seconds) {
    double u = 0;
    for (int i = 0; i < b->n_running; i++) {
        const struct seq *q = b->running[i];
        if (q->in_step && q->mb == id) u += step_units(b, q->n_cached, q->in_step);
    }
    if (u < 32) return;
    double spu = seconds / u;
    b->sec_per_unit = b->sec_per_unit > 0 ? 0.7 * b->sec_per_unit + 0.3 * spu : spu;
}
