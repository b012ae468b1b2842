#include "drafter.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void drafter_propose(struct drafter *d, struct draft_job *jobs, int n_jobs) {
    for (int i = 0; i < n_jobs; i++) jobs[i].n_out = 0;
    d->propose(d->self, jobs, n_jobs);
    for (int i = 0; i < n_jobs; i++)
        if (jobs[i].n_out < 0 || jobs[i].n_out > jobs[i].k)
            FATAL("drafter returned %d tokens", jobs[i].n_out);
}

void drafter_keep(struct drafter *d, uint64_t seq, int n_valid) {
    if (d->keep) d->keep(d->self, seq, n_valid);
}

void drafter_forget(struct drafter *d, uint64_t seq) {
    if (d->forget) d->forget(d->self, seq);
}

void drafter_free(struct drafter *d) {
    if (!d) return;
    if (d->destroy) d->destroy(d->self);
    free(d);
}

/* ---- n-gram / prompt lookup ---- */

struct ngram {
    int min, max;
};

int drafter_ngram_lookup(const int32_t *t, int n_tokens, int ngram_min, int ngram_max, int k,
                         int32_t *out) {
    if (ngram_min < 1) ngram_min = 1;
    for (int n = ngram_max; n >= ngram_min; n--) {
        if (n >= n_tokens) continue;
        const int32_t *tail = t + n_tokens - n;
        /* latest earlier occurrence: start positions from n_tokens - n - 1 down to 0 */
        for (int st = n_tokens - n - 1; st >= 0; st--) {
            if (t[st] != tail[0] || memcmp(t + st, tail, sizeof *t * (size_t)n) != 0) continue;
            int from = st + n, m = n_tokens - from < k ? n_tokens - from : k;
            memcpy(out, t + from, sizeof *t * (size_t)m);
            return m;
        }
    }
    return 0;
}

static void ngram_propose(void *self, struct draft_job *jobs, int n_jobs) {
    const struct ngram *g = self;
    for (int i = 0; i < n_jobs; i++)
        jobs[i].n_out = drafter_ngram_lookup(jobs[i].tokens, jobs[i].n_tokens, g->min, g->max,
                                             jobs[i].k, jobs[i].out);
}

struct drafter *drafter_ngram_new(int ngram_min, int ngram_max) {
    struct ngram *g = xmalloc(sizeof *g);
    g->min = ngram_min < 1 ? 1 : ngram_min;
    g->max = ngram_max < g->min ? g->min : ngram_max;
    struct drafter *d = xcalloc(1, sizeof *d);
    d->self = g;
    d->propose = ngram_propose;
    d->destroy = free;
    return d;
}
