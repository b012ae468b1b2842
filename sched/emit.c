#include "emit.h"

#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../util/clock.h"
#include "../util/fatal.h"
#include "../util/threadpool.h"
#include "batch.h"
#include "drafter.h"
#include "metrics.h"
#include "queue.h"
#include "sampler.h"
#include "scheduler.h"

void emit_init(struct emit *em, const struct sched_opts *o, struct metrics *m, int vocab,
               int max_ctx, int eos_id) {
    memset(em, 0, sizeof *em);
    em->o = o;
    em->m = m;
    em->vocab = vocab;
    em->max_ctx = max_ctx;
    em->eos_id = eos_id;
    int sample_threads = o->sample_threads > 0 ? o->sample_threads : 1;
    if (sample_threads > o->max_running) sample_threads = o->max_running;
    if (sample_threads > 1) em->pool = threadpool_create(sample_threads);
    em->pre.jobs = xcalloc((size_t)o->max_running, sizeof *em->pre.jobs);
}

void emit_free(struct emit *em) {
    threadpool_free(em->pool);
    free(em->pre.jobs);
}

static int is_eog(const struct emit *em, int32_t tok) {
    if (!em->o->eog_ids) return tok == em->eos_id;
    for (int i = 0; i < em->o->n_eog; i++)
        if (em->o->eog_ids[i] == tok) return 1;
    return 0;
}

/* Appends a sampled token to q and its request; returns why q ends now (FINISH_NONE: it
 * goes on). */
static enum finish_reason emit_token(struct emit *em, struct seq *q, int32_t tok,
                                     const struct token_event *ev, double now) {
    q->tokens[q->n_tokens++] = tok;
    q->n_generated++;
    if (q->n_generated == 1) {
        q->req->t_first_token = now;
        metrics_observe(em->m, HIST_TTFT, now - q->req->t_submit);
    } else {
        metrics_observe(em->m, HIST_ITL, now - q->t_last);
    }
    q->t_last = now;
    req_push(q->req, ev);
    if (!q->req->ignore_eos && is_eog(em, tok)) return FINISH_EOS;
    if (q->n_generated >= q->req->max_tokens || q->n_tokens >= em->max_ctx) return FINISH_LENGTH;
    return FINISH_NONE;
}

/* Prompt tokens n_cached+1 .. scored from the rows of the tokens fed this step (row t of
 * q's rows follows token n_cached + t); once the last prompt token is fed, they are all
 * there and the frontend may read them. */
static void score_prompt(struct emit *em, struct seq *q, const float *rows) {
    struct gen_request *r = q->req;
    for (int t = 0; t < q->in_step && q->n_cached + t + 1 < r->n_prompt; t++) {
        int p = q->n_cached + t + 1;
        sampler_score(q->smp, rows + (size_t)t * (size_t)em->vocab, r->prompt[p],
                      &r->prompt_events[p]);
    }
    if (q->n_cached + q->in_step >= r->n_prompt - 1) {
        q->prompt_scored = 1;
        req_set_prompt_scored(r);
    }
}

/* The grammar's mask on q's logits row. With the closer (the default), the budget is the
 * tokens q may still generate, this one included: max_tokens and the sequence's context
 * limit both count, as emit_token ends q at either; the output then ends complete within it. */
static void apply_grammar(struct emit *em, const struct batch *b, struct seq *q, float *lg) {
    if (q->req->grammar_no_close) {
        grammar_matcher_apply(q->req->grammar, lg, em->vocab);
        return;
    }
    long limit = batch_seq_limit(b);
    long budget = (long)q->req->max_tokens - q->n_generated;
    if (limit - q->n_tokens < budget) budget = limit - q->n_tokens;
    if (grammar_matcher_apply_budget(q->req->grammar, lg, em->vocab, budget)) q->closed = 1;
}

/* Samples q's next token from its logits row (k > 0: the row holds its k best candidates),
 * through q's grammar when it has one, and emits it. draft >= 0: verifies that draft instead
 * (qd: the drafter's distribution, NULL for a drafter that proposes tokens), *ok = 1 when it
 * is accepted. */
static enum finish_reason sample_token(struct emit *em, const struct batch *b, struct seq *q,
                                       float *row, int k, int32_t draft, const float *qd, int *ok,
                                       double now) {
    struct token_event ev;
    memset(&ev, 0, sizeof ev);
    *ok = 0;
    int32_t tok;
    if (q->presampled) { /* presample_all drew it already (draft < 0, no grammar, whole row) */
        tok = q->pre_tok;
        ev = q->pre_ev;
        q->presampled = 0;
    } else if (k > 0) { /* the row's best k candidates: q is light (batch_seq_light) */
        const struct logit_cand *c = (const struct logit_cand *)row;
        tok = draft >= 0 ? sampler_verify_cands(q->smp, c, k, draft, ok, &ev)
                         : sampler_next_cands(q->smp, c, k, &ev);
    } else {
        if (q->req->grammar) apply_grammar(em, b, q, row); /* before any sampling step */
        tok = draft >= 0 ? sampler_verify(q->smp, row, draft, qd, ok, &ev)
                         : sampler_next(q->smp, row, &ev);
    }
    if (q->req->grammar) grammar_matcher_accept(q->req->grammar, tok);
    enum finish_reason why = emit_token(em, q, tok, &ev, now);
    /* a grammar past its limits allows only the end from now on: the request ends here (with
     * ignore_eos too), and the frontend reports the matcher's error */
    if (why == FINISH_NONE && q->req->grammar && grammar_matcher_error(q->req->grammar))
        why = FINISH_EOS;
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
static enum finish_reason verify_drafts(struct emit *em, struct batch *b, struct seq *q, float *lg,
                                        int k, int n_draft, double now) {
    int32_t draft[n_draft];
    memcpy(draft, q->tokens + q->n_tokens, sizeof draft); /* emit_token overwrites them */
    const struct drafter *drafter = em->o->spec.drafter;
    const float *qd = drafter->stochastic ? q->spec.q : NULL;
    size_t vocab = (size_t)em->vocab;
    enum finish_reason why = FINISH_NONE;
    int accepted = 0;
    for (int j = 0; j <= n_draft && why == FINISH_NONE; j++) {
        int ok; /* every draft accepted: row n_draft gives the bonus token */
        why = sample_token(em, b, q, lg + (size_t)j * vocab, k, j < n_draft ? draft[j] : -1,
                           qd && j < n_draft ? qd + (size_t)j * vocab : NULL, &ok, now);
        if (!ok) break;
        accepted++;
    }
    spec_observe(&q->spec, &em->spec_st, n_draft, accepted);
    q->n_cached += accepted; /* the accepted drafts' K/V was written this step */
    if (why == FINISH_NONE) {
        batch_trim_blocks(b, q);
        batch_commit_blocks(b, q);
        drafter_keep(em->o->spec.drafter, (uint64_t)(uintptr_t)q, q->n_tokens);
    }
    return why;
}

static void presample_run(void *p, int ith, int nth) {
    (void)ith;
    (void)nth;
    struct presample_run *r = p;
    for (int j; (j = atomic_fetch_add(&r->next, 1)) < r->n;) {
        struct seq *q = r->jobs[j];
        q->pre_tok = sampler_next(q->smp, r->logits + (size_t)q->row0 * (size_t)r->vocab,
                                  &q->pre_ev);
        q->presampled = 1;
    }
}

/* The whole-row draws of micro-batch mb, on the sampling threads: at ~0.15 ms a row for a
 * 152k vocabulary (sampler.h), 64 of them one after another would take longer than a GPU's
 * decode step. Only what needs no order between sequences runs here: sequences sampling one
 * token from a whole row with no grammar (a grammar's matcher shares its compiled grammar's
 * caches; drafts are verified in order). Each sampler is one request's alone, so its tokens
 * are the ones emit_micro_batch would have drawn; it emits them in the usual order. */
static void presample_all(struct emit *em, const struct batch *b, int mb, float *logits, int k) {
    if (!em->pool) return;
    struct presample_run *r = &em->pre;
    r->n = 0;
    r->logits = logits;
    r->vocab = em->vocab;
    for (int i = 0; i < b->n_running; i++) {
        struct seq *q = b->running[i];
        if (!q->in_step || q->mb != mb) continue;
        if (q->spec.n_draft > 0 || q->req->grammar || q->req->max_tokens == 0 ||
            (k > 0 && batch_seq_light(b, q)) || seq_scores_prompt(q))
            continue;
        if (q->n_cached + q->in_step < q->n_tokens) continue; /* mid-prompt chunk */
        r->jobs[r->n++] = q;
    }
    if (r->n < 2) return;
    atomic_store(&r->next, 0);
    threadpool_run(em->pool, presample_run, r);
}

/* q's step returned with its rows at lg (k > 0: candidates): it scores its prompt rows,
 * counts what it computed as cached, and, when its fed tokens reached its last known token,
 * samples (verifying its drafts first, when it had some). Returns why q ends now. */
static enum finish_reason seq_returned(struct emit *em, struct batch *b, struct seq *q, float *lg,
                                       int k, double now) {
    int n_draft = q->spec.n_draft;
    /* as batch_build_plan marked q's rows (batch_seq_light reads the same n_draft) */
    const int kq = k > 0 && batch_seq_light(b, q) ? k : 0;
    if (seq_scores_prompt(q)) { /* a row per fed token: the step's last one samples */
        score_prompt(em, q, lg);
        lg += (size_t)(q->in_step - 1) * (size_t)em->vocab;
    }
    int fed = q->n_cached + q->in_step;
    int prompt_end = fed < q->req->n_prompt ? fed : q->req->n_prompt;
    if (prompt_end > q->n_cached) /* prompt tokens computed, not found in the cache */
        metrics_prompt_computed(em->m, prompt_end - q->n_cached);
    q->n_cached += q->in_step - n_draft; /* drafts count once accepted */
    q->in_step = 0;
    q->mb = 0;
    q->spec.n_draft = 0;
    batch_commit_blocks(b, q);
    if (q->n_cached < q->n_tokens) return FINISH_NONE; /* mid-prompt chunk */
    if (q->req->max_tokens == 0) return FINISH_LENGTH; /* prefill only (tpd generate -n 0) */
    if (n_draft > 0) return verify_drafts(em, b, q, lg, kq, n_draft, now);
    int ok;
    return sample_token(em, b, q, lg, kq, -1, NULL, &ok, now);
}

void emit_micro_batch(struct emit *em, struct batch *b, struct sched_queue *queue, int mb,
                      float *logits, int k) {
    presample_all(em, b, mb, logits, k);
    double now = clock_now();
    for (int i = 0; i < b->n_running;) {
        struct seq *q = b->running[i];
        if (!q->in_step || q->mb != mb) {
            i++;
            continue;
        }
        float *lg = logits + (size_t)q->row0 * (size_t)em->vocab;
        enum finish_reason why = seq_returned(em, b, q, lg, k, now);
        if (why != FINISH_NONE) {
            /* a client that sees its request end finds its drafts counted */
            queue_publish_spec(queue, &em->spec_st);
            batch_finish(b, batch_remove(b, i), why);
        } else {
            i++;
        }
    }
    queue_publish_spec(queue, &em->spec_st);
}
