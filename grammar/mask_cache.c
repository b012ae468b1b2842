/* Per-stack token masks and their cache (mask_cache.h). */
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "compiled.h"
#include "mask_cache.h"
#include "stackset.h"
#include "vocab.h"

#define GRAM_KEY_DEPTH 24
#define GRAM_CACHE_ENTRIES 8192 /* cached stack masks per grammar */

void mentry_free(struct mentry *e) {
    if (!e) return;
    free(e->key);
    free(e->bits);
    free(e->ids);
    free(e->unc);
    free(e->held);
    free(e->jmp);
    free(e->bnd);
    free(e);
}

void mask_cache_init(struct mask_cache *c) { pthread_mutex_init(&c->mu, NULL); }

void mask_cache_free(struct mask_cache *c, struct grammar_vocab *v) {
    size_t bytes = 0;
    for (size_t i = 0; i < c->cap; i++)
        if (c->tab[i]) {
            bytes += c->tab[i]->bytes;
            mentry_free(c->tab[i]);
        }
    atomic_fetch_sub(&v->cache_bytes, bytes);
    free(c->tab);
    pthread_mutex_destroy(&c->mu);
}

/* Trie walk for one key stack (mask_cache.h). The walk runs a lazily built DFA over stack
 * sets: each distinct set is interned once and its transition on a byte is computed once,
 * so the many trie nodes that lead to the same set (a string's characters) cost a table
 * lookup each. */
struct dstate {
    struct sset s;
    uint64_t h;
    uint32_t need; /* sset_need of s (relative to the key's cut when opaque) */
    uint32_t *tr;  /* transitions by byte (see transition) */
    int32_t *held; /* by byte: the set a unique quote leads to if its check passes, + 1 (0:
                      none; NULL: none on any byte so far) */
};

struct walk {
    const struct grammar_vocab *v;
    const struct gram *g;
    struct gmeter *m;
    int opaque;
    struct dstate *st; /* interned sets */
    int n_st, cap_st;
    int32_t *stab; /* set hash table: id + 1, 0 empty */
    size_t stab_cap;
    struct sset tmp, tmp_held;
    int32_t *acc, *unc;
    int n_acc, cap_acc, n_unc, cap_unc;
    struct held *held;
    int n_held, cap_held;
    uint32_t need0; /* the key stack's need */
    int32_t *acc_d; /* by acc: each token's delta (BND_DELTA: it went to bnd) */
    int n_acc_d, cap_acc_d;
    struct jump *bnd;
    int n_bnd, cap_bnd;
};

#define BND_DELTA INT32_MIN

static void push_id(int32_t **a, int *n, int *cap, int32_t id) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *a = xrealloc(*a, sizeof **a * (size_t)*cap);
    }
    (*a)[(*n)++] = id;
}

static void push_jump(struct jump **a, int *n, int *cap, int32_t id, int32_t d) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *a = xrealloc(*a, sizeof **a * (size_t)*cap);
    }
    (*a)[(*n)++] = (struct jump){id, d};
}

static int cmp_jump(const void *a, const void *b) {
    const struct jump *x = a, *y = b;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Sorts a by d. The deltas of one key span a small range (a token opens or closes a few
 * structures), while a state can have tens of thousands of them (every token that starts a
 * string), so a counting sort, linear, stands in for qsort, which cost more than the walk
 * itself; a wide range (a saturated need) falls back to qsort. */
static void sort_jumps(struct jump *a, int n) {
    if (n < 2) return;
    int32_t lo = a[0].d, hi = a[0].d;
    for (int i = 1; i < n; i++) {
        if (a[i].d < lo) lo = a[i].d;
        if (a[i].d > hi) hi = a[i].d;
    }
    int64_t range = (int64_t)hi - lo + 1;
    if (range > 2 * (int64_t)n + 1024) {
        qsort(a, (size_t)n, sizeof *a, cmp_jump);
        return;
    }
    int *count = xcalloc((size_t)range + 1, sizeof *count);
    struct jump *out = xmalloc(sizeof *out * (size_t)n);
    for (int i = 0; i < n; i++) count[a[i].d - lo + 1]++;
    for (int64_t k = 1; k <= range; k++) count[k] += count[k - 1];
    for (int i = 0; i < n; i++) out[count[a[i].d - lo]++] = a[i];
    memcpy(a, out, sizeof *a * (size_t)n);
    free(out);
    free(count);
}

/* The id of set s among the walk's sets, added when new. Costs the meter as adding its
 * stacks would (hash, compare, copy, need: stackset.c's emit), and a new set the row of
 * transitions it gets. */
static int intern(struct walk *w, const struct sset *s) {
    gmeter_spend(w->m, 4 + (long)(s->pn / 4) + 4l * s->n);
    uint64_t h = sset_hash(s);
    if (2 * ((size_t)w->n_st + 1) > w->stab_cap) {
        size_t nc = w->stab_cap ? 2 * w->stab_cap : 256;
        int32_t *nt = xcalloc(nc, sizeof *nt);
        for (int i = 0; i < w->n_st; i++) {
            size_t j = w->st[i].h & (nc - 1);
            while (nt[j]) j = (j + 1) & (nc - 1);
            nt[j] = i + 1;
        }
        free(w->stab);
        w->stab = nt;
        w->stab_cap = nc;
    }
    size_t j = h & (w->stab_cap - 1);
    for (; w->stab[j]; j = (j + 1) & (w->stab_cap - 1)) {
        struct dstate *d = &w->st[w->stab[j] - 1];
        if (d->h == h && sset_equal(&d->s, s)) return w->stab[j] - 1;
    }
    if (w->n_st == w->cap_st) {
        w->cap_st = w->cap_st ? 2 * w->cap_st : 64;
        w->st = xrealloc(w->st, sizeof *w->st * (size_t)w->cap_st);
    }
    struct dstate *d = &w->st[w->n_st];
    memset(d, 0, sizeof *d);
    sset_copy(&d->s, s);
    d->h = h;
    d->need = sset_need(w->g, s);
    w->stab[j] = w->n_st + 1;
    return w->n_st++;
}

/* The transition of interned set id on byte c: next id (-1: empty), matched, touched;
 * a row of 256 per set, filled as the walk needs them (bit 31: known). The held set (a
 * unique quote's, sset_advance) goes to the set's held row. */
static uint32_t transition(struct walk *w, int id, uint8_t c) {
    uint32_t *row = w->st[id].tr;
    if (row && (row[c] >> 31)) return row[c];
    sset_clear(&w->tmp);
    sset_clear(&w->tmp_held);
    int touched = 0, matched = sset_advance(w->g, &w->st[id].s, c, &w->tmp, w->opaque, NULL,
                                            &w->tmp_held, &touched, w->m);
    int next = w->tmp.n ? intern(w, &w->tmp) : -1;
    if (w->tmp_held.n) {
        int h = intern(w, &w->tmp_held); /* after intern: st may have moved */
        if (!w->st[id].held) w->st[id].held = xcalloc(256, sizeof(int32_t));
        w->st[id].held[c] = h + 1;
    }
    if (!w->st[id].tr) gmeter_spend(w->m, 64); /* the row: 1 KiB */
    uint32_t val = 1u << 31 | (uint32_t)(next + 1) << 2 | (uint32_t)matched << 1 |
                   (uint32_t)touched;
    if (!w->st[id].tr)
        w->st[id].tr = xcalloc(256, sizeof(uint32_t)); /* after intern: st may have moved */
    w->st[id].tr[c] = val;
    return val;
}

static void push_held(struct walk *w, int32_t id, int32_t at, int32_t d) {
    if (w->n_held == w->cap_held) {
        w->cap_held = w->cap_held ? 2 * w->cap_held : 256;
        w->held = xrealloc(w->held, sizeof *w->held * (size_t)w->cap_held);
    }
    w->held[w->n_held++] = (struct held){id, at, d};
}

/* The need after a token: the least over the sets it leads to (none: a limit was hit, the
 * token leads nowhere, so it never fits a budget), less the key's. */
static int32_t need_delta(const struct walk *w, int next) {
    return (int32_t)(next >= 0 ? w->st[next].need : GRAM_NEED_INF) - (int32_t)w->need0;
}

static int held_of(const struct walk *w, int id, uint8_t c) {
    return id >= 0 && w->st[id].held ? w->st[id].held[c] - 1 : -1;
}

/* The tokens below node that the walk from set id takes only if a unique quote met on the
 * way passes its check: where that quote is the only doubt (at: its byte), in held, to be
 * checked on the text alone; else (cond: unknown below the cut too, or at -1: a second
 * unique quote) uncertain, checked against the full stack. */
static void walk_held(struct walk *w, uint32_t node, int id, int cond, int at) {
    const struct tnode *t = w->v->t;
    for (uint32_t c = t[node].child; c; c = t[c].sib) {
        if (gmeter_spend(w->m, 1 + t[c].n_tok)) return;
        uint32_t tr = id >= 0 ? transition(w, id, t[c].byte) : 0;
        int next = (int)((tr & 0x7fffffffu) >> 2) - 1, touched = tr & 1, matched = (tr >> 1) & 1,
            held = held_of(w, id, t[c].byte);
        for (uint32_t k = 0; k < t[c].n_tok; k++) {
            int32_t tok = w->v->sorted[t[c].tok + k];
            if (matched && !cond && at >= 0) push_held(w, tok, at, need_delta(w, next));
            else if (matched || cond || touched || held >= 0)
                push_id(&w->unc, &w->n_unc, &w->cap_unc, tok);
        }
        if (t[c].child && (next >= 0 || cond || touched))
            walk_held(w, c, next, cond || touched, at);
        if (t[c].child && held >= 0) walk_held(w, c, held, cond, -1);
    }
}

/* Stops where the meter is hit (the entry is then dropped). */
static void walk(struct walk *w, uint32_t node, int id, int unc, int depth) {
    const struct tnode *t = w->v->t;
    for (uint32_t c = t[node].child; c; c = t[c].sib) {
        if (gmeter_spend(w->m, 1 + t[c].n_tok)) return;
        uint32_t tr = id >= 0 ? transition(w, id, t[c].byte) : 0;
        int next = (int)((tr & 0x7fffffffu) >> 2) - 1, matched = (tr >> 1) & 1, touched = tr & 1,
            held = held_of(w, id, t[c].byte);
        int32_t d = need_delta(w, next);
        for (uint32_t k = 0; k < t[c].n_tok; k++) {
            int32_t tok = w->v->sorted[t[c].tok + k];
            if (matched) {
                push_id(&w->acc, &w->n_acc, &w->cap_acc, tok);
                if (unc || touched) push_jump(&w->bnd, &w->n_bnd, &w->cap_bnd, tok, d);
                push_id(&w->acc_d, &w->n_acc_d, &w->cap_acc_d, unc || touched ? BND_DELTA : d);
            } else if (unc) {
                push_id(&w->unc, &w->n_unc, &w->cap_unc, tok);
            } else if (held >= 0) {
                push_held(w, tok, depth, need_delta(w, held));
            }
        }
        if (t[c].child && (next >= 0 || unc || touched))
            walk(w, c, next, unc || touched, depth + 1);
        if (t[c].child && held >= 0) walk_held(w, c, held, unc, depth);
    }
}

/* e->base, the delta most of the n accepted tokens ids[] share (deltas d[], BND_DELTA for
 * those in bnd), and e->jmp, the others sorted. Where the deltas spread too wide to count
 * cheaply, the base is 0. */
static void jumps_from_deltas(struct mentry *e, const int32_t *ids, const int32_t *d, int n) {
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (int i = 0; i < n; i++)
        if (d[i] != BND_DELTA) {
            if (d[i] < lo) lo = d[i];
            if (d[i] > hi) hi = d[i];
        }
    e->base = 0;
    if (lo <= hi && (int64_t)hi - lo < 4096) {
        int *count = xcalloc((size_t)(hi - lo) + 1, sizeof *count);
        for (int i = 0; i < n; i++)
            if (d[i] != BND_DELTA) count[d[i] - lo]++;
        int best = 0;
        for (int k = 1; k <= hi - lo; k++)
            if (count[k] > count[best]) best = k;
        e->base = lo + best;
        free(count);
    }
    int m = 0;
    for (int i = 0; i < n; i++) m += d[i] != BND_DELTA && d[i] != e->base;
    e->jmp = xmalloc(sizeof *e->jmp * (size_t)(m ? m : 1));
    for (int i = 0; i < n; i++)
        if (d[i] != BND_DELTA && d[i] != e->base) e->jmp[e->n_jmp++] = (struct jump){ids[i], d[i]};
    sort_jumps(e->jmp, e->n_jmp);
}

/* NULL where the meter was hit. A walk costs it what it visits, and 64 units and one per
 * 16 words of the vocabulary's mask besides (its tables and the entry). */
static struct mentry *mask_compute(const struct grammar *gr, const int32_t *key, int klen,
                                   int trunc, struct gmeter *m) {
    const struct grammar_vocab *v = gr->v;
    if (gmeter_spend(m, 64 + v->n / 1024)) return NULL;
    struct walk w = {0};
    w.v = v;
    w.g = &gr->g;
    w.m = m;
    w.opaque = trunc;
    sset_add(&w.tmp, key, klen);
    int root = intern(&w, &w.tmp);
    w.need0 = w.st[root].need;
    walk(&w, 0, root, 0, 0);
    for (int i = 0; i < w.n_st; i++) {
        sset_free(&w.st[i].s);
        free(w.st[i].tr);
        free(w.st[i].held);
    }
    free(w.st);
    free(w.stab);
    sset_free(&w.tmp);
    sset_free(&w.tmp_held);
    if (m->hit) {
        free(w.acc);
        free(w.unc);
        free(w.held);
        free(w.acc_d);
        free(w.bnd);
        return NULL;
    }
    struct mentry *e = xcalloc(1, sizeof *e);
    jumps_from_deltas(e, w.acc, w.acc_d, w.n_acc);
    free(w.acc_d);
    e->key = xmalloc(sizeof *key * (size_t)(klen ? klen : 1));
    memcpy(e->key, key, sizeof *key * (size_t)klen);
    e->klen = klen;
    e->trunc = trunc;
    size_t words = ((size_t)v->n + 63) / 64;
    if ((size_t)w.n_acc * 32 >= (size_t)v->n) {
        e->bits = xcalloc(words, sizeof *e->bits);
        for (int i = 0; i < w.n_acc; i++) e->bits[w.acc[i] >> 6] |= 1ull << (w.acc[i] & 63);
        free(w.acc);
        e->bytes = words * 8;
    } else {
        e->ids = w.acc;
        e->n_ids = w.n_acc;
        e->bytes = (size_t)w.n_acc * 4;
    }
    e->n_acc = w.n_acc;
    e->unc = w.unc;
    e->n_unc = w.n_unc;
    e->held = w.held;
    e->n_held = w.n_held;
    sort_jumps(w.bnd, w.n_bnd);
    e->bnd = w.bnd;
    e->n_bnd = w.n_bnd;
    e->bytes += (size_t)w.n_unc * 4 + (size_t)w.n_held * sizeof *w.held +
                (size_t)(e->n_jmp + w.n_bnd) * sizeof(struct jump) + (size_t)klen * 4 + sizeof *e;
    return e;
}

/* Takes gr->cache.mu, held across the walk of a new entry (two threads never compute the
 * same one; the walk is bounded by the meter). */
struct mentry *mask_entry(struct grammar *gr, const int32_t *stk, int len, struct mentry **tmp,
                          struct gmeter *m) {
    struct mask_cache *c = &gr->cache;
    int trunc = len > GRAM_KEY_DEPTH;
    const int32_t *key = trunc ? stk + len - GRAM_KEY_DEPTH : stk;
    int klen = trunc ? GRAM_KEY_DEPTH : len;
    uint64_t h = gram_hash_bytes(key, sizeof *key * (size_t)klen,
                                 0xcbf29ce484222325ull ^ (uint64_t)trunc);
    *tmp = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->cap) {
        for (size_t i = h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
            struct mentry *e = c->tab[i];
            if (!e) break;
            if (e->hash == h && e->klen == klen && e->trunc == trunc &&
                memcmp(e->key, key, sizeof *key * (size_t)klen) == 0) {
                pthread_mutex_unlock(&c->mu);
                return e;
            }
        }
    }
    struct mentry *e = mask_compute(gr, key, klen, trunc, m);
    if (!e) {
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    e->hash = h;
    if (c->n >= GRAM_CACHE_ENTRIES || !grammar_vocab_make_room(gr->v, e->bytes, gr)) {
        pthread_mutex_unlock(&c->mu);
        *tmp = e;
        return e;
    }
    if (2 * (c->n + 1) > c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 64;
        struct mentry **nt = xcalloc(nc, sizeof *nt);
        for (size_t i = 0; i < c->cap; i++)
            if (c->tab[i]) {
                size_t j = c->tab[i]->hash & (nc - 1);
                while (nt[j]) j = (j + 1) & (nc - 1);
                nt[j] = c->tab[i];
            }
        free(c->tab);
        c->tab = nt;
        c->cap = nc;
    }
    size_t j = h & (c->cap - 1);
    while (c->tab[j]) j = (j + 1) & (c->cap - 1);
    c->tab[j] = e;
    c->n++;
    atomic_fetch_add(&gr->v->cache_bytes, e->bytes);
    pthread_mutex_unlock(&c->mu);
    return e;
}
