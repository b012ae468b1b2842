#include "draft_model.h"

#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "block_pool.h"
#include "sampler.h"

/* What the draft cache holds of one sequence. */
struct dm_seq {
    uint64_t id;
    int32_t *blocks;
    int n_blocks, cap_blocks;
    int n_cached; /* tokens of the sequence whose K/V is in the draft cache */
};

struct dm {
    struct comm self; /* rank 0 alone */
    struct engine *e;
    int vocab, block_size, max_ctx;
    struct block_pool pool;
    struct step_plan plan;
    float *logits;
    int cap_rows;
    struct dm_seq *seqs;
    int n_seqs, cap_seqs;
    int *slot; /* per job: index into seqs, -1 when it drafts nothing */
    int cap_slot;
};

static struct dm_seq *find(struct dm *d, uint64_t id) {
    for (int i = 0; i < d->n_seqs; i++)
        if (d->seqs[i].id == id) return &d->seqs[i];
    return NULL;
}

static void drop(struct dm *d, struct dm_seq *q) {
    if (q->n_blocks) block_pool_release(&d->pool, q->n_blocks, q->blocks);
    free(q->blocks);
    *q = d->seqs[--d->n_seqs];
}

static void dm_forget(void *self, uint64_t id) {
    struct dm *d = self;
    struct dm_seq *q = find(d, id);
    if (q) drop(d, q);
}

static void dm_keep(void *self, uint64_t id, int n_valid) {
    struct dm *d = self;
    struct dm_seq *q = find(d, id);
    /* the last kept token (the target's correction or bonus) is always fed next time; past
     * it the cache holds rejected drafts */
    if (q && q->n_cached > n_valid - 1) q->n_cached = n_valid - 1 > 0 ? n_valid - 1 : 0;
}

/* Blocks for `tokens` positions of q; 0, or -1 when the pool is short. */
static int grow(struct dm *d, struct dm_seq *q, int tokens) {
    int need = block_pool_blocks_for(tokens, d->block_size) - q->n_blocks;
    if (need <= 0) return 0;
    if (block_pool_take(&d->pool, need, q->blocks + q->n_blocks, q->n_blocks == 0)) return -1;
    q->n_blocks += need;
    return 0;
}

/* Runs the plan; one logits row per sequence in it. */
static void run(struct dm *d) {
    if (d->plan.n_out > d->cap_rows) {
        d->cap_rows = d->plan.n_out;
        free(d->logits);
        d->logits = xmalloc(sizeof(float) * (size_t)d->cap_rows * (size_t)d->vocab);
    }
    engine_step(d->e, &d->plan, d->logits);
}

static void dm_propose(void *self, struct draft_job *jobs, int n_jobs) {
    struct dm *d = self;
    if (n_jobs > d->cap_slot) {
        d->cap_slot = n_jobs;
        d->slot = xrealloc(d->slot, sizeof *d->slot * (size_t)n_jobs);
    }
    /* first step: what is new since the last proposal, up to and including the last token */
    plan_clear(&d->plan);
    int k_max = 0;
    for (int j = 0; j < n_jobs; j++) {
        struct draft_job *b = &jobs[j];
        d->slot[j] = -1;
        int k = b->n_tokens + b->k - 1 <= d->max_ctx ? b->k : d->max_ctx - b->n_tokens + 1;
        if (k < 1) continue;
        struct dm_seq *q = find(d, b->seq);
        if (!q) {
            if (d->n_seqs == d->cap_seqs) {
                d->cap_seqs = d->cap_seqs ? 2 * d->cap_seqs : 16;
                d->seqs = xrealloc(d->seqs, sizeof *d->seqs * (size_t)d->cap_seqs);
            }
            q = &d->seqs[d->n_seqs++];
            *q = (struct dm_seq){.id = b->seq,
                                 .cap_blocks = block_pool_blocks_for(d->max_ctx, d->block_size)};
            q->blocks = xmalloc(sizeof *q->blocks * (size_t)q->cap_blocks);
        }
        if (q->n_cached > b->n_tokens - 1) q->n_cached = b->n_tokens - 1;
        if (grow(d, q, b->n_tokens + k - 1)) { /* the draft cache is full: no drafts now */
            drop(d, q);
            continue;
        }
        b->k = k;
        d->slot[j] = (int)(q - d->seqs);
        plan_add(&d->plan, b->tokens + q->n_cached, b->n_tokens - q->n_cached, q->n_cached,
                 q->blocks, q->n_blocks, 0);
        q->n_cached = b->n_tokens;
        k_max = k > k_max ? k : k_max;
    }
    for (int t = 0; t < k_max; t++) {
        if (t > 0) { /* feed each sequence's previous draft */
            plan_clear(&d->plan);
            for (int j = 0; j < n_jobs; j++) {
                if (d->slot[j] < 0 || jobs[j].k <= t) continue;
                struct dm_seq *q = &d->seqs[d->slot[j]];
                plan_add(&d->plan, &jobs[j].out[t - 1], 1, q->n_cached, q->blocks, q->n_blocks, 0);
                q->n_cached++;
            }
        }
        run(d);
        int row = 0;
        for (int j = 0; j < n_jobs; j++) {
            if (d->slot[j] < 0 || jobs[j].k <= t) continue;
            jobs[j].out[t] = sampler_argmax(d->logits + (size_t)row++ * (size_t)d->vocab, d->vocab);
            jobs[j].n_out = t + 1;
        }
    }
}

static void dm_destroy(void *self) {
    struct dm *d = self;
    while (d->n_seqs) drop(d, &d->seqs[0]);
    free(d->seqs);
    free(d->slot);
    free(d->logits);
    plan_free(&d->plan);
    block_pool_free(&d->pool);
    engine_close(d->e);
    free(d);
}

struct drafter *draft_model_new(const struct engine_opts *o, int target_vocab, char *err) {
    struct dm *d = xcalloc(1, sizeof *d);
    d->self = (struct comm){.rank = 0, .size = 1, .local_rank = 0, .local_size = 1, .node = 0};
    char e2[ERR_LEN] = "";
    if (engine_open(&d->e, &d->self, o, e2)) {
        err_set(err, "speculative.draft_model %s: %s", o->model_path, e2);
        free(d);
        return NULL;
    }
    const struct engine_info *info = engine_info(d->e);
    if (info->vocab != target_vocab) {
        err_set(err,
                "speculative.draft_model %s has a vocabulary of %d tokens, the model %d: a draft "
                "model must share "
                "the model's tokenizer",
                o->model_path, info->vocab, target_vocab);
        engine_close(d->e);
        free(d);
        return NULL;
    }
    d->vocab = info->vocab;
    d->block_size = info->block_size;
    d->max_ctx = info->max_ctx;
    block_pool_init(&d->pool, info->n_blocks, info->block_size, 0, 0);
    plan_init(&d->plan);
    struct drafter *dr = xcalloc(1, sizeof *dr);
    dr->self = d;
    dr->propose = dm_propose;
    dr->keep = dm_keep;
    dr->forget = dm_forget;
    dr->destroy = dm_destroy;
    return dr;
}
