/* Compiling grammars, their need tables, the check of their first mask against their limits,
 * and the vocabulary's LRU of them (grammar.h, compiled.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/sbuf.h"
#include "compiled.h"
#include "vocab.h"

void grammar_ref(struct grammar *g) { atomic_fetch_add(&g->refs, 1); }

void grammar_unref(struct grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    mask_cache_free(&g->cache, g->v);
    atomic_fetch_sub(&g->v->cache_bytes, g->bytes);
    gram_free(&g->g);
    free(g->text);
    free(g);
}

#define GRAM_RUN_WORK (1l << 22) /* trie children visited for a grammar's run costs */

/* gram_run_cost over the vocabulary: the fewest tokens that spell a run of byte classes,
 * by dynamic programming from its end: from element i, a token whose bytes match the
 * classes i..i+len-1 leads to i+len. Tokens are found by walking the trie along the
 * classes (one path for a literal, as JSON's keys are). The walks of one grammar share a
 * bound on trie children visited (GRAM_RUN_WORK); past it, single-byte tokens only, which
 * bounds the cost as well (a byte-level vocabulary has every byte). The cost is an upper
 * bound on the tokens needed, never less, and has the property the closer relies on: from
 * a stack whose need is n > 0, the token that starts the cheapest spelling leads to a
 * stack whose need is at most n - 1. */
struct runctx {
    const struct grammar_vocab *v;
    uint64_t single[4];       /* bytes that are tokens of their own */
    uint32_t root_child[256]; /* the trie root's child by byte (0: none) */
    long work;
    uint32_t *front, *next;
    size_t cap;
};

static void run_cost_vocab(void *ctx, const struct gram *g, uint32_t p, uint32_t q,
                           uint32_t *cost) {
    struct runctx *rc = ctx;
    const struct tnode *t = rc->v->t;
#define AFTER(j) ((j) < q ? cost[(j)-p] : 0) /* the cost from element j on */
    for (uint32_t i = q; i-- > p;) {
        const uint64_t *cls = g->cls[g->el[i].arg];
        uint32_t best = GRAM_NEED_INF;
        if ((cls[0] & rc->single[0]) | (cls[1] & rc->single[1]) | (cls[2] & rc->single[2]) |
            (cls[3] & rc->single[3]))
            best = AFTER(i + 1) + 1;
        /* longer tokens: the trie nodes whose bytes match classes i, i+1, ... level by level */
        size_t nf = 0;
        for (int c = 0; c < 256 && rc->work > 0; c++)
            if (rc->root_child[c] && ((cls[c >> 6] >> (c & 63)) & 1) &&
                t[rc->root_child[c]].child) {
                rc->front[nf++] = rc->root_child[c];
                rc->work--;
            }
        for (uint32_t j = i + 1; j < q && nf > 0 && rc->work > 0; j++) {
            const uint64_t *cj = g->cls[g->el[j].arg];
            size_t nn = 0;
            for (size_t k = 0; k < nf && rc->work > 0; k++)
                for (uint32_t c = t[rc->front[k]].child; c && rc->work > 0; c = t[c].sib) {
                    rc->work--;
                    if (!((cj[t[c].byte >> 6] >> (t[c].byte & 63)) & 1)) continue;
                    if (t[c].n_tok && AFTER(j + 1) + 1 < best) best = AFTER(j + 1) + 1;
                    if (!t[c].child) continue;
                    if (nn == rc->cap) {
                        rc->cap *= 2;
                        rc->front = xrealloc(rc->front, sizeof *rc->front * rc->cap);
                        rc->next = xrealloc(rc->next, sizeof *rc->next * rc->cap);
                    }
                    rc->next[nn++] = c;
                }
            uint32_t *tmp = rc->front;
            rc->front = rc->next;
            rc->next = tmp;
            nf = nn;
        }
        cost[i - p] = best >= GRAM_NEED_INF ? GRAM_NEED_INF : best;
    }
#undef AFTER
}

static void need_tables(struct gram *g, const struct grammar_vocab *v) {
    struct runctx rc;
    memset(&rc, 0, sizeof rc);
    rc.v = v;
    rc.work = GRAM_RUN_WORK;
    for (uint32_t c = v->t[0].child; c; c = v->t[c].sib) {
        rc.root_child[v->t[c].byte] = c;
        if (v->t[c].n_tok) rc.single[v->t[c].byte >> 6] |= 1ull << (v->t[c].byte & 63);
    }
    rc.cap = 1024;
    rc.front = xmalloc(sizeof *rc.front * rc.cap);
    rc.next = xmalloc(sizeof *rc.next * rc.cap);
    gram_need_tables(g, run_cost_vocab, &rc);
    free(rc.front);
    free(rc.next);
}

static int compile_text(struct gram *out, enum grammar_kind kind, const char *text, size_t len,
                        unsigned reading, char *err) {
    struct sbuf gb = {0};
    const char *src = text;
    size_t n = len;
    int rc = 0;
    if (kind == GRAMMAR_REGEX) rc = grammar_gbnf_from_regex(text, len, "root", &gb, err);
    else if (kind == GRAMMAR_JSON_SCHEMA)
        rc = grammar_gbnf_from_json_schema(text, len, "root", reading, &gb, err);
    else if (kind == GRAMMAR_JSON_OBJECT) {
        grammar_gbnf_json_value("json", &gb);
        sbuf_adds(&gb, "root ::= json-object\n");
    }
    if (rc == 0 && kind != GRAMMAR_GBNF) {
        src = gb.p;
        n = gb.len;
    }
    if (rc == 0) {
        struct gbuild b;
        gb_init(&b);
        rc = gbnf_parse(&b, src, n, err);
        if (rc == 0) rc = gb_finish(&b, "root", out, err);
        gb_free(&b);
    }
    sbuf_free(&gb);
    return rc;
}

/* The start state and its mask, within the limits that every token's will have to fit (and
 * by the deadline), here on the caller's thread rather than on the step loop at the first
 * token; the mask stays cached in g. 0, or -1 with err naming the limit. */
static int first_mask(struct grammar *g, double deadline, char *err) {
    g->deadline = deadline; /* no other thread has g yet */
    struct grammar_matcher *m = grammar_matcher_new(g);
    uint64_t *mask = xmalloc(((size_t)g->v->n + 63) / 64 * sizeof *mask);
    grammar_matcher_mask(m, mask);
    const char *why = grammar_matcher_error(m);
    int rc = why ? err_set(err, "the grammar is too costly to match: %s", why) : 0;
    free(mask);
    grammar_matcher_free(m);
    g->deadline = 0;
    return rc;
}

/* What a compiled grammar holds (struct gram's arrays, as gb_finish sizes them). */
static size_t grammar_bytes(const struct grammar *g) {
    const struct gram *x = &g->g;
    return sizeof *g + g->len + 1 + (size_t)x->n_el * (sizeof *x->el + sizeof *x->rest) +
           (size_t)x->n_cls * sizeof *x->cls + ((size_t)x->n_rules + 1) * sizeof *x->alt_off +
           (size_t)x->alt_off[x->n_rules] * sizeof *x->alts;
}

/* Takes the LRU's tail under mu; the references are dropped outside it (a grammar's last
 * one frees its masks). Grammars still in use give their bytes back only when their last
 * user is done, so this may drop every one and still not fit. */
int grammar_vocab_make_room(struct grammar_vocab *v, size_t need, const struct grammar *keep) {
    for (;;) {
        if (atomic_load(&v->cache_bytes) + need <= v->cache_limit) return 1;
        struct grammar *evict = NULL;
        pthread_mutex_lock(&v->mu);
        for (int i = v->n_lru; i-- > 0;)
            if (v->lru[i] != keep) {
                evict = v->lru[i];
                memmove(v->lru + i, v->lru + i + 1, sizeof *v->lru * (size_t)(v->n_lru - i - 1));
                v->n_lru--;
                break;
            }
        pthread_mutex_unlock(&v->mu);
        if (!evict) return 0;
        grammar_unref(evict);
    }
}

struct grammar *grammar_compile(struct grammar_vocab *v, enum grammar_kind kind, const char *text,
                                size_t len, char *err) {
    if (kind == GRAMMAR_JSON_OBJECT) {
        text = "";
        len = 0;
    }
    if (len > GRAMMAR_MAX_TEXT) {
        err_set(err, "grammar text of %zu bytes is longer than the limit of %u", len,
                GRAMMAR_MAX_TEXT);
        return NULL;
    }
    uint64_t h = gram_hash_bytes(text, len, 0xcbf29ce484222325ull + (uint64_t)kind);
    pthread_mutex_lock(&v->mu);
    for (int i = 0; i < v->n_lru; i++) {
        struct grammar *g = v->lru[i];
        if (g->hash == h && g->kind == kind && g->len == len && memcmp(g->text, text, len) == 0) {
            memmove(v->lru + 1, v->lru, sizeof *v->lru * (size_t)i);
            v->lru[0] = g;
            grammar_ref(g);
            pthread_mutex_unlock(&v->mu);
            return g;
        }
    }
    pthread_mutex_unlock(&v->mu);
    double deadline = clock_now() + v->lim.max_compile_ms / 1e3;
    struct grammar *g = xcalloc(1, sizeof *g);
    if (compile_text(&g->g, kind, text, len, v->schema_reading, err) < 0) {
        free(g);
        return NULL;
    }
    need_tables(&g->g, v);
    atomic_init(&g->refs, 1); /* the caller's (the cache's is added below) */
    g->v = v;
    g->kind = kind;
    g->text = xmalloc(len + 1);
    memcpy(g->text, text, len);
    g->text[len] = 0;
    g->len = len;
    g->hash = h;
    g->lim = v->lim;
    g->bytes = grammar_bytes(g);
    mask_cache_init(&g->cache);
    atomic_fetch_add(&v->cache_bytes, g->bytes); /* given back by the last grammar_unref */
    if (clock_now() > deadline) {
        err_set(err,
                "the grammar is too costly to compile: more than %g ms (limit "
                "grammar.max_compile_ms = %g)",
                v->lim.max_compile_ms, v->lim.max_compile_ms);
        grammar_unref(g);
        return NULL;
    }
    if (first_mask(g, deadline, err) < 0) {
        grammar_unref(g);
        return NULL;
    }
    if (!grammar_vocab_make_room(v, 0, g))
        return g;   /* larger than the whole cache: the caller's only */
    grammar_ref(g); /* the cache's */
    pthread_mutex_lock(&v->mu);
    struct grammar *evict = NULL;
    if (v->n_lru == GRAM_CACHE_GRAMMARS) evict = v->lru[--v->n_lru];
    memmove(v->lru + 1, v->lru, sizeof *v->lru * (size_t)v->n_lru);
    v->lru[0] = g;
    v->n_lru++;
    pthread_mutex_unlock(&v->mu);
    grammar_unref(evict);
    return g;
}
