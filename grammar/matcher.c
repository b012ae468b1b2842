/* The matcher (grammar.h): a grammar state is a set of stacks of element positions
 * (stackset.h), a pushdown automaton run on all alternatives at once. The mask of a state
 * is the union over its stacks of a per-stack mask, computed once by walking the
 * vocabulary's byte trie and then cached in the grammar (mask_cache.h), so a mask is
 * computed the first time a state is seen and is a lookup and an OR afterwards; the tokens
 * a cut cache key leaves uncertain are checked here against the full stack. Each public
 * call spends from a meter filled from the grammar's limits, so none costs more than a
 * bounded amount whatever the grammar; past a limit the matcher stops for good. The
 * budget-aware closer, the other half of grammar_matcher, is closer.c. */
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "grammar.h"
#include "mask_cache.h"
#include "matcher_internal.h"

void matcher_begin(struct grammar_matcher *m) {
    const struct grammar_limits *l = &m->g->lim;
    gmeter_init(&m->meter, l->max_token_work, l->max_stacks, m->g->deadline, l->max_compile_ms);
}

void matcher_end(struct grammar_matcher *m) {
    if (!m->meter.hit || m->failed) return;
    m->failed = 1;
    gmeter_why(&m->meter, m->err);
}

const char *grammar_matcher_error(const struct grammar_matcher *m) {
    return m->failed ? m->err : NULL;
}

long grammar_matcher_work(const struct grammar_matcher *m) {
    return m->meter.limit - m->meter.left;
}

struct grammar_matcher *grammar_matcher_new(struct grammar *g) {
    struct grammar_matcher *m = xcalloc(1, sizeof *m);
    grammar_ref(g);
    m->g = g;
    m->tgen = 1;
    matcher_begin(m);
    sset_start(&g->g, &m->cur, &m->meter);
    matcher_end(m);
    return m;
}

void grammar_matcher_free(struct grammar_matcher *m) {
    if (!m) return;
    sset_free(&m->cur);
    for (int i = 0; i < GRAM_HISTORY; i++) sset_free(&m->hist[i]);
    sset_free(&m->a);
    sset_free(&m->b);
    sset_free(&m->one);
    free(m->text);
    uniq_cache_free(&m->uc);
    free(m->clr);
    free(m->plain);
    grammar_unref(m->g);
    free(m);
}

int grammar_matcher_can_end(const struct grammar_matcher *m) {
    if (m->ended || m->failed) return 1;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.len[i] == 0) return 1;
    return 0;
}

int grammar_matcher_done(const struct grammar_matcher *m) {
    if (m->ended || m->failed) return 1;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.len[i] > 0) return 0;
    return 1;
}

/* Runs bytes from the state in (copied into m->a) and leaves the result in m->a.
 * Returns 0, or -1 when some byte is refused or the meter is hit. */
static int run_bytes(struct grammar_matcher *m, const struct sset *in, const char *s, size_t n) {
    sset_copy(&m->a, in);
    struct gtext tx = {m->text, m->tlen, s, 0, &m->uc, m->tgen};
    for (size_t i = 0; i < n; i++) {
        sset_clear(&m->b);
        m->b.overflow = 0;
        tx.nb = i + 1;
        sset_advance(&m->g->g, &m->a, (uint8_t)s[i], &m->b, 0, &tx, NULL, NULL, &m->meter);
        struct sset t = m->a;
        m->a = m->b;
        m->b = t;
        if (m->a.n == 0 || m->meter.hit) return -1;
    }
    return 0;
}

/* Whether token id may follow the full stack stk[0..len); leaves the state it leads to in
 * m->a. */
static int token_ok(struct grammar_matcher *m, const int32_t *stk, int len, int32_t id) {
    if (m->meter.hit) return 0;
    sset_clear(&m->one);
    sset_add(&m->one, stk, len);
    return run_bytes(m, &m->one, m->g->v->bytes[id], m->g->v->lens[id]) == 0;
}

int held_ok(struct grammar_matcher *m, const struct held *h) {
    struct gtext tx = {m->text, m->tlen, m->g->v->bytes[h->id], (size_t)h->at + 1, &m->uc, m->tgen};
    long cost = 0;
    int ok = uniq_string_ok(&tx, &cost);
    return gmeter_spend(&m->meter, 1 + cost / 4) == 0 && ok;
}

int matcher_token_need(struct grammar_matcher *m, const int32_t *stk, int len, int32_t id,
                       uint32_t *need) {
    if (!token_ok(m, stk, len, id)) return 0;
    *need = sset_need(&m->g->g, &m->a);
    return 1;
}

void matcher_mask_end(const struct grammar_matcher *m, uint64_t *mask) {
    const struct grammar_vocab *v = m->g->v;
    memset(mask, 0, ((size_t)v->n + 63) / 64 * sizeof *mask);
    for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
}

void matcher_mask_plain(struct grammar_matcher *m, uint64_t *mask) {
    const struct grammar_vocab *v = m->g->v;
    size_t words = ((size_t)v->n + 63) / 64;
    memset(mask, 0, words * sizeof *mask);
    int any = 0;
    if (!m->ended) {
        for (int i = 0; i < m->cur.n && !m->meter.hit; i++) {
            int len = m->cur.len[i];
            if (len == 0) continue;
            const int32_t *stk = sset_stack(&m->cur, i);
            struct mentry *tmp, *e = mask_entry(m->g, stk, len, &tmp, &m->meter);
            if (!e) break;
            mentry_or(e, mask, words);
            any |= e->bits || e->n_ids;
            for (int k = 0; k < e->n_unc && !m->meter.hit; k++) {
                int32_t id = e->unc[k];
                if ((mask[id >> 6] >> (id & 63)) & 1) continue;
                if (token_ok(m, stk, len, id)) {
                    mask[id >> 6] |= 1ull << (id & 63);
                    any = 1;
                }
            }
            for (int k = 0; k < e->n_held && !m->meter.hit; k++) {
                int32_t id = e->held[k].id;
                if ((mask[id >> 6] >> (id & 63)) & 1) continue;
                if (held_ok(m, &e->held[k])) {
                    mask[id >> 6] |= 1ull << (id & 63);
                    any = 1;
                }
            }
            mentry_free(tmp);
        }
    }
    if (!any || grammar_matcher_can_end(m))
        for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 6] |= 1ull << (v->eog[i] & 63);
}

void grammar_matcher_mask(struct grammar_matcher *m, uint64_t *mask) {
    if (m->failed) {
        matcher_mask_end(m, mask);
        return;
    }
    matcher_begin(m);
    matcher_mask_plain(m, mask);
    matcher_end(m);
    if (m->failed) matcher_mask_end(m, mask);
}

void grammar_matcher_apply(struct grammar_matcher *m, float *logits, int n) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    uint64_t stackbuf[4096], *mask = words <= 4096 ? stackbuf : xmalloc(words * sizeof *mask);
    grammar_matcher_mask(m, mask);
    apply_mask(m, mask, logits, n);
    if (mask != stackbuf) free(mask);
}

static void save_history(struct grammar_matcher *m) {
    int slot = m->h_head;
    sset_copy(&m->hist[slot], &m->cur);
    m->hist_ended[slot] = m->ended;
    m->hist_tlen[slot] = m->tlen;
    m->h_head = (m->h_head + 1) % GRAM_HISTORY;
    if (m->h_n < GRAM_HISTORY) m->h_n++;
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t n) {
    if (m->ended || m->failed) return -1;
    matcher_begin(m);
    int rc = run_bytes(m, &m->cur, s, n);
    matcher_end(m);
    if (rc < 0) return -1;
    save_history(m);
    struct sset t = m->cur;
    m->cur = m->a;
    m->a = t;
    if (m->g->g.uq_cls && n) { /* the unique quote's check reads the text */
        if (m->tlen + n > m->tcap) {
            m->tcap = (m->tlen + n) * 2 + 256;
            m->text = xrealloc(m->text, m->tcap);
        }
        memcpy(m->text + m->tlen, s, n);
        m->tlen += n;
        m->tgen++;
    }
    return 0;
}

int grammar_matcher_accept(struct grammar_matcher *m, int32_t id) {
    const struct grammar_vocab *v = m->g->v;
    if (id < 0 || id >= v->n || m->ended) return -1;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            if (!grammar_matcher_can_end(m)) return -1;
            save_history(m);
            m->ended = 1;
            return 0;
        }
    if (!v->usable[id]) return -1;
    return grammar_matcher_accept_bytes(m, v->bytes[id], v->lens[id]);
}

int grammar_matcher_rollback(struct grammar_matcher *m, int k) {
    if (k < 0 || k > m->h_n) return -1;
    for (int i = 0; i < k; i++) {
        m->h_head = (m->h_head + GRAM_HISTORY - 1) % GRAM_HISTORY;
        m->h_n--;
        sset_copy(&m->cur, &m->hist[m->h_head]);
        m->ended = m->hist_ended[m->h_head];
        m->tlen = m->hist_tlen[m->h_head];
        m->tgen++;
    }
    return 0;
}
