#include "drafting.h"

#include <stdlib.h>

#include "../grammar/grammar.h"
#include "../util/fatal.h"
#include "batch.h"
#include "drafter.h"

void drafting_init(struct drafting *d, const struct spec_opts *o, int vocab, int max_running) {
    d->o = o;
    d->vocab = vocab;
    d->max_running = max_running;
    d->jobs = xcalloc((unsigned long)max_running, sizeof *d->jobs);
    d->cost = (struct spec_cost){0};
}

void drafting_free(struct drafting *d) { free(d->jobs); }

/* How many of the n drafts the grammar allows in a row from its state (which it keeps): a
 * draft it refuses would be rejected at verification (its target probability is 0), and
 * with a drafter that proposes tokens the verification then samples from the target's
 * distribution as it would without that draft, so cutting there changes no output. */
static int grammar_drafts(struct grammar_matcher *g, const int32_t *draft, int n) {
    int ok = 0;
    /* 64: rollback's reach */
    while (ok < n && ok < 64 && grammar_matcher_accept(g, draft[ok]) == 0) ok++;
    if (ok && grammar_matcher_rollback(g, ok)) FATAL("grammar rollback of %d drafts failed", ok);
    return ok;
}

/* The job of a decoding sequence q that may speculate; 0 when it drafts nothing now. */
static int draft_job_for(struct drafting *d, const struct batch *b, struct seq *q, int n_dec,
                         struct draft_job *job) {
    const struct spec_opts *o = d->o;
    /* a grammar-constrained request speculates with a drafter that proposes tokens (not
     * distributions: a stochastic drafter's q would have to be masked as the draft
     * advances); its drafts are cut where the grammar refuses one (grammar_drafts) */
    if (q->mb || q->n_tokens - q->n_cached != 1 || q->req->no_speculation ||
        q->req->max_tokens == 0 || (q->req->grammar && o->drafter->stochastic))
        return 0;
    /* every draft accepted still leaves one more token to emit within max_tokens and
     * the context: the step then emits n_draft + 1 */
    long limit = batch_seq_limit(b);
    long room = q->req->max_tokens - q->n_generated - 1;
    if (limit - q->n_tokens < room) room = limit - q->n_tokens;
    int k = spec_want(o, &q->spec, n_dec, (int)(room < o->k ? room : o->k),
                      o->no_cost ? NULL : &d->cost);
    if (k < 1) return 0;
    if (o->drafter->stochastic && !q->spec.q)
        q->spec.q = xmalloc(sizeof(float) * (size_t)o->k * (size_t)d->vocab);
    *job = (struct draft_job){.seq = (uint64_t)(uintptr_t)q,
                              .request = q->req->id,
                              .tokens = q->tokens,
                              .n_tokens = q->n_tokens,
                              .k = k,
                              .out = q->tokens + q->n_tokens,
                              .q = o->drafter->stochastic ? q->spec.q : NULL};
    return 1;
}

void drafting_run(struct drafting *d, struct batch *b) {
    int n_dec = 0, n_jobs = 0;
    for (int i = 0; i < b->n_running; i++) {
        struct seq *q = b->running[i];
        if (q->mb) continue; /* in flight in the pipeline */
        q->spec.n_draft = 0;
        n_dec += q->n_tokens - q->n_cached == 1;
    }
    if (!d->o->drafter) return;
    for (int i = 0; i < b->n_running; i++)
        if (draft_job_for(d, b, b->running[i], n_dec, &d->jobs[n_jobs])) n_jobs++;
    if (!n_jobs) return;
    drafter_propose(d->o->drafter, d->jobs, n_jobs);
    for (int j = 0; j < n_jobs; j++) {
        struct seq *q = (struct seq *)(uintptr_t)d->jobs[j].seq;
        q->spec.n_draft = q->req->grammar
                              ? grammar_drafts(q->req->grammar, d->jobs[j].out, d->jobs[j].n_out)
                              : d->jobs[j].n_out;
    }
}

void drafting_observe_cost(struct drafting *d, int n_tokens, double seconds) {
    if (d->o->drafter) spec_cost_observe(&d->cost, n_tokens, seconds);
}
