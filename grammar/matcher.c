/* The matcher (grammar.h): a grammar state is a set of stacks of element positions (a
 * pushdown automaton run on all alternatives at once, llama.cpp style, with tail calls so
 * loops do not grow the stack). The mask of a state is the union over its stacks of a
 * per-stack mask computed once by walking the vocabulary's byte trie and then cached in
 * the grammar: the key is the stack's top GRAM_KEY_DEPTH positions (the whole stack when
 * shallower, the usual case for JSON), so a mask is computed the first time a state is
 * seen and is a lookup and an OR afterwards. Where the key leaves part of the stack out,
 * tokens whose bytes reach below it are recorded as uncertain and checked one by one
 * against the full stack at run time (xgrammar's context-dependent tokens).
 *
 * The budget-aware closer (grammar_matcher_mask_budget) rests on need: a bound on the
 * tokens that finish a stack, the sum of gram.rest[] over its entries (need_tables), and
 * of a state the least over its stacks. The same trie walk records, per cached stack, the
 * change of need most of its allowed tokens share (the base: 0, or -1 where the stack's
 * top is a string's next character) and the tokens that differ, sorted by delta (those
 * that open or close structures: few), so a budget far away costs a comparison or two per
 * stack, and near the end only those tokens are visited. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "gram_ir.h"
#include "grammar.h"

#define GRAM_KEY_DEPTH 24
#define GRAM_MAX_STACKS 256     /* stacks in one state (ambiguous grammars) */
#define GRAM_EXPAND_BUDGET 4096 /* expansion steps for one stack and byte */
#define GRAM_CACHE_GRAMMARS 64
#define GRAM_CACHE_ENTRIES 8192            /* cached stack masks per grammar */
#define GRAM_CACHE_BYTES (1024ull << 20)   /* all cached masks of one vocabulary */
#define GRAM_HISTORY 64

/* ---- stack sets ---- */

struct sset {
    int n, cap;
    uint32_t *off;
    uint16_t *len;
    int32_t *pool;
    size_t pn, pcap;
    int overflow;
};

static void sset_clear(struct sset *s) {
    s->n = 0;
    s->pn = 0;
}

static void sset_free(struct sset *s) {
    free(s->off);
    free(s->len);
    free(s->pool);
    memset(s, 0, sizeof *s);
}

static const int32_t *sset_stack(const struct sset *s, int i) { return s->pool + s->off[i]; }

/* The need of stack stk: each entry is a position in an alternative still to be finished
 * (the top the element to match now, the others where to return to), and they finish one
 * after the other, so their costs add (a token spanning two is not counted on: a bound). */
static uint32_t stack_need(const struct gram *g, const int32_t *stk, int len) {
    uint64_t n = 0;
    for (int i = 0; i < len; i++) n += g->rest[stk[i]];
    return n >= GRAM_NEED_INF ? GRAM_NEED_INF : (uint32_t)n;
}

/* The least need over the stacks of s (GRAM_NEED_INF when there are none). */
static uint32_t sset_need(const struct gram *g, const struct sset *s) {
    uint32_t best = GRAM_NEED_INF;
    for (int i = 0; i < s->n; i++) {
        uint32_t n = stack_need(g, sset_stack(s, i), s->len[i]);
        if (n < best) best = n;
    }
    return best;
}

static void sset_add(struct sset *s, const int32_t *stk, int len) {
    for (int i = 0; i < s->n; i++)
        if (s->len[i] == len && (len == 0 || memcmp(s->pool + s->off[i], stk, sizeof *stk * (size_t)len) == 0)) return;
    if (s->n >= GRAM_MAX_STACKS) {
        s->overflow = 1;
        return;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->off = xrealloc(s->off, sizeof *s->off * (size_t)s->cap);
        s->len = xrealloc(s->len, sizeof *s->len * (size_t)s->cap);
    }
    if (s->pn + (size_t)len > s->pcap) {
        s->pcap = (s->pn + (size_t)len) * 2 + 64;
        s->pool = xrealloc(s->pool, sizeof *s->pool * s->pcap);
    }
    if (len) memcpy(s->pool + s->pn, stk, sizeof *stk * (size_t)len);
    s->off[s->n] = (uint32_t)s->pn;
    s->len[s->n] = (uint16_t)len;
    s->pn += (size_t)len;
    s->n++;
}

static void sset_copy(struct sset *d, const struct sset *s) {
    sset_clear(d);
    for (int i = 0; i < s->n; i++) sset_add(d, sset_stack(s, i), s->len[i]);
}

/* ---- expansion and advancing ---- */

struct xctx {
    const struct gram *g;
    struct sset *out;
    int opaque;  /* the bottom of the stack is cut off (a cache key) */
    int touched; /* opaque: some path popped below the cut */
    int budget;
    int32_t buf[GRAMMAR_MAX_DEPTH + 2];
};

/* Adds to x->out every stack reachable from buf[0..len) without consuming a byte whose
 * top is a byte class (or the empty stack: the end). */
static void expand(struct xctx *x, int len) {
    if (--x->budget < 0) {
        x->out->overflow = 1;
        return;
    }
    if (len == 0) {
        if (x->opaque) x->touched = 1;
        else sset_add(x->out, x->buf, 0);
        return;
    }
    int32_t pos = x->buf[len - 1];
    struct gelem e = x->g->el[pos];
    if (e.type == E_CLASS) {
        sset_add(x->out, x->buf, len);
    } else if (e.type == E_END) {
        expand(x, len - 1);
    } else {
        int nl = len;
        if (x->g->el[pos + 1].type == E_END) nl = len - 1; /* tail call: nothing to return to */
        else x->buf[len - 1] = pos + 1;
        if (nl + 1 > GRAMMAR_MAX_DEPTH) {
            x->out->overflow = 1;
        } else {
            for (uint32_t a = x->g->alt_off[e.arg]; a < x->g->alt_off[e.arg + 1]; a++) {
                x->buf[nl] = (int32_t)x->g->alts[a];
                expand(x, nl + 1);
            }
        }
        x->buf[len - 1] = pos;
    }
}

static int class_has(const struct gram *g, int32_t pos, uint8_t c) {
    return (int)((g->cls[g->el[pos].arg][c >> 6] >> (c & 63)) & 1);
}

/* out = the stacks of in after byte c. Returns 1 when some stack consumed c. */
static int advance(const struct gram *g, const struct sset *in, uint8_t c, struct sset *out, int opaque,
                   int *touched) {
    struct xctx x;
    x.g = g;
    x.out = out;
    x.opaque = opaque;
    x.touched = 0;
    int matched = 0;
    for (int i = 0; i < in->n; i++) {
        int len = in->len[i];
        if (len == 0) continue;
        const int32_t *s = sset_stack(in, i);
        if (!class_has(g, s[len - 1], c)) continue;
        matched = 1;
        memcpy(x.buf, s, sizeof *s * (size_t)len);
        x.buf[len - 1]++;
        x.budget = GRAM_EXPAND_BUDGET;
        expand(&x, len);
    }
    if (touched) *touched = x.touched;
    return matched;
}

/* ---- vocabulary and its trie ---- */

struct tnode {
    uint32_t child, sib; /* 0: none (node 0 is the root, never a child) */
    uint32_t tok, n_tok; /* tokens ending here: sorted[tok .. tok + n_tok) */
    uint8_t byte;
};

struct grammar_vocab {
    int n;
    char **bytes;
    size_t *lens;
    uint8_t *usable;
    int32_t *eog;
    int n_eog;
    size_t max_len;
    struct tnode *t;
    uint32_t n_t;
    int32_t *sorted;
    /* compiled grammars, most recently used first */
    pthread_mutex_t mu;
    struct grammar *lru[GRAM_CACHE_GRAMMARS];
    int n_lru;
    atomic_ullong cache_bytes;
};

static const struct grammar_vocab *sort_v;
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = sort_v->lens[x], ly = sort_v->lens[y];
    int c = memcmp(sort_v->bytes[x], sort_v->bytes[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

struct grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                                        const uint8_t *usable, const int32_t *eog, int n_eog) {
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    struct grammar_vocab *v = xcalloc(1, sizeof *v);
    v->n = n_vocab;
    v->bytes = xcalloc((size_t)n_vocab, sizeof *v->bytes);
    v->lens = xcalloc((size_t)n_vocab, sizeof *v->lens);
    v->usable = xcalloc((size_t)n_vocab, 1);
    size_t total = 0;
    int n_use = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->lens[i] = lens[i];
        v->bytes[i] = xmalloc(lens[i] + 1);
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->bytes[i][lens[i]] = 0;
        v->usable[i] = usable[i] && lens[i] > 0;
        if (v->usable[i]) {
            n_use++;
            total += lens[i];
            if (lens[i] > v->max_len) v->max_len = lens[i];
        }
    }
    v->eog = xmalloc(sizeof *v->eog * (size_t)(n_eog > 0 ? n_eog : 1));
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab) {
            v->eog[v->n_eog++] = eog[i];
            v->usable[eog[i]] = 0;
        }
    v->sorted = xmalloc(sizeof *v->sorted * (size_t)(n_use ? n_use : 1));
    int k = 0;
    for (int i = 0; i < n_vocab; i++)
        if (v->usable[i]) v->sorted[k++] = i;
    n_use = k;
    pthread_mutex_lock(&sort_mu);
    sort_v = v;
    qsort(v->sorted, (size_t)n_use, sizeof *v->sorted, cmp_tok);
    pthread_mutex_unlock(&sort_mu);
    /* trie: tokens in byte order, each sharing its prefix with the one before */
    v->t = xcalloc(total + 1, sizeof *v->t);
    v->n_t = 1;
    uint32_t *path = xcalloc(v->max_len + 1, sizeof *path), *last = xcalloc(total + 1, sizeof *last);
    size_t prev_len = 0;
    const char *prev = "";
    for (int i = 0; i < n_use; i++) {
        int32_t id = v->sorted[i];
        const char *s = v->bytes[id];
        size_t l = v->lens[id], lcp = 0;
        while (lcp < l && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        for (size_t d = lcp; d < l; d++) {
            uint32_t parent = path[d], c = v->n_t++;
            v->t[c].byte = (uint8_t)s[d];
            v->t[c].tok = (uint32_t)i;
            if (last[parent]) v->t[last[parent]].sib = c;
            else v->t[parent].child = c;
            last[parent] = c;
            path[d + 1] = c;
        }
        struct tnode *nd = &v->t[path[l]];
        if (nd->n_tok == 0) nd->tok = (uint32_t)i;
        nd->n_tok++;
        prev = s;
        prev_len = l;
    }
    free(path);
    free(last);
    pthread_mutex_init(&v->mu, NULL);
    return v;
}

int grammar_vocab_size(const struct grammar_vocab *v) { return v->n; }

/* ---- compiled grammars and their mask cache ---- */

/* An allowed token whose need after it is the key stack's need + d, where d is not the
 * entry's base (the delta most of its tokens share: 0, or -1 where the key's top is one
 * more character of a string, which every token supplies). In jmp, d is exact; in bnd
 * (keys cut from a deeper stack, tokens whose bytes also reached below the cut), d is an
 * upper bound: a path below the cut may finish sooner, so the exact need is computed at
 * run time, and only where the bound does not already settle the token. */
struct jump {
    int32_t id;
    int32_t d;
};

struct mentry {
    uint64_t hash;
    int32_t *key;
    int klen, trunc;
    uint64_t *bits; /* dense accepted set, or NULL */
    int32_t *ids;   /* sparse accepted set */
    int n_ids;
    int n_acc;    /* tokens in the accepted set */
    int32_t *unc; /* uncertain tokens (only when trunc) */
    int n_unc;
    int32_t base;           /* the delta of every allowed token not in jmp or bnd */
    struct jump *jmp, *bnd; /* sorted by d, ascending (see struct jump); bnd only when trunc */
    int n_jmp, n_bnd;
    size_t bytes;
};

struct grammar {
    atomic_int refs;
    struct grammar_vocab *v;
    struct gram g;
    enum grammar_kind kind;
    char *text;
    size_t len;
    uint64_t hash;
    pthread_mutex_t mu;
    struct mentry **tab; /* open addressing */
    size_t cap, n;
};

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void mentry_free(struct mentry *e) {
    if (!e) return;
    free(e->key);
    free(e->bits);
    free(e->ids);
    free(e->unc);
    free(e->jmp);
    free(e->bnd);
    free(e);
}

void grammar_ref(struct grammar *g) { atomic_fetch_add(&g->refs, 1); }

void grammar_unref(struct grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    size_t bytes = 0;
    for (size_t i = 0; i < g->cap; i++)
        if (g->tab[i]) {
            bytes += g->tab[i]->bytes;
            mentry_free(g->tab[i]);
        }
    atomic_fetch_sub(&g->v->cache_bytes, bytes);
    free(g->tab);
    gram_free(&g->g);
    free(g->text);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v) return;
    for (int i = 0; i < v->n_lru; i++) grammar_unref(v->lru[i]);
    for (int i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lens);
    free(v->usable);
    free(v->eog);
    free(v->t);
    free(v->sorted);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

/* Trie walk for one key stack (see the top of the file). The walk runs a lazily built
 * DFA over stack sets: each distinct set is interned once and its transition on a byte is
 * computed once, so the many trie nodes that lead to the same set (a string's characters)
 * cost a table lookup each. */
struct dstate {
    struct sset s;
    uint64_t h;
    uint32_t need; /* sset_need of s (relative to the key's cut when opaque) */
    uint32_t *tr;  /* transitions by byte (see transition) */
};

struct walk {
    const struct grammar_vocab *v;
    const struct gram *g;
    int opaque;
    struct dstate *st; /* interned sets */
    int n_st, cap_st;
    int32_t *stab; /* set hash table: id + 1, 0 empty */
    size_t stab_cap;
    struct sset tmp;
    int32_t *acc, *unc;
    int n_acc, cap_acc, n_unc, cap_unc;
    uint32_t need0;  /* the key stack's need */
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

static uint64_t sset_hash(const struct sset *s) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++) {
        h = (h ^ s->len[i]) * 0x100000001b3ull;
        const int32_t *k = sset_stack(s, i);
        for (int j = 0; j < s->len[i]; j++) h = (h ^ (uint32_t)k[j]) * 0x100000001b3ull;
    }
    return h;
}

static int sset_equal(const struct sset *a, const struct sset *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->len[i] != b->len[i] || (a->len[i] && memcmp(sset_stack(a, i), sset_stack(b, i), sizeof(int32_t) * a->len[i]))) return 0;
    return 1;
}

static int intern(struct walk *w, const struct sset *s) {
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
 * a row of 256 per set, filled as the walk needs them (bit 31: known). */
static uint32_t transition(struct walk *w, int id, uint8_t c) {
    uint32_t *row = w->st[id].tr;
    if (row && (row[c] >> 31)) return row[c];
    sset_clear(&w->tmp);
    int touched = 0, matched = advance(w->g, &w->st[id].s, c, &w->tmp, w->opaque, &touched);
    int next = w->tmp.n ? intern(w, &w->tmp) : -1;
    uint32_t val = 1u << 31 | (uint32_t)(next + 1) << 2 | (uint32_t)matched << 1 | (uint32_t)touched;
    if (!w->st[id].tr) w->st[id].tr = xcalloc(256, sizeof(uint32_t)); /* after intern: st may have moved */
    w->st[id].tr[c] = val;
    return val;
}

static void walk(struct walk *w, uint32_t node, int id, int unc) {
    const struct tnode *t = w->v->t;
    for (uint32_t c = t[node].child; c; c = t[c].sib) {
        uint32_t tr = id >= 0 ? transition(w, id, t[c].byte) : 0;
        int next = (int)((tr & 0x7fffffffu) >> 2) - 1, matched = (tr >> 1) & 1, touched = tr & 1;
        /* the need after a token: the least over the sets it leads to (none: a limit was hit,
         * the token leads nowhere, so it never fits a budget) */
        int32_t d = (int32_t)(next >= 0 ? w->st[next].need : GRAM_NEED_INF) - (int32_t)w->need0;
        for (uint32_t k = 0; k < t[c].n_tok; k++) {
            int32_t tok = w->v->sorted[t[c].tok + k];
            if (matched) {
                push_id(&w->acc, &w->n_acc, &w->cap_acc, tok);
                if (unc || touched) push_jump(&w->bnd, &w->n_bnd, &w->cap_bnd, tok, d);
                push_id(&w->acc_d, &w->n_acc_d, &w->cap_acc_d, unc || touched ? BND_DELTA : d);
            } else if (unc) {
                push_id(&w->unc, &w->n_unc, &w->cap_unc, tok);
            }
        }
        if (t[c].child && (next >= 0 || unc || touched)) walk(w, c, next, unc || touched);
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

static struct mentry *mask_compute(const struct grammar *gr, const int32_t *key, int klen, int trunc) {
    const struct grammar_vocab *v = gr->v;
    struct walk w = {0};
    w.v = v;
    w.g = &gr->g;
    w.opaque = trunc;
    sset_add(&w.tmp, key, klen);
    int root = intern(&w, &w.tmp);
    w.need0 = w.st[root].need;
    walk(&w, 0, root, 0);
    for (int i = 0; i < w.n_st; i++) {
        sset_free(&w.st[i].s);
        free(w.st[i].tr);
    }
    free(w.st);
    free(w.stab);
    sset_free(&w.tmp);
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
    sort_jumps(w.bnd, w.n_bnd);
    e->bnd = w.bnd;
    e->n_bnd = w.n_bnd;
    e->bytes += (size_t)w.n_unc * 4 + (size_t)(e->n_jmp + w.n_bnd) * sizeof(struct jump) + (size_t)klen * 4 + sizeof *e;
    return e;
}

/* The cached mask entry of a stack; *tmp receives it instead when it is not cached
 * (caller frees). Takes gr->mu. */
static struct mentry *mask_entry(struct grammar *gr, const int32_t *stk, int len, struct mentry **tmp) {
    int trunc = len > GRAM_KEY_DEPTH;
    const int32_t *key = trunc ? stk + len - GRAM_KEY_DEPTH : stk;
    int klen = trunc ? GRAM_KEY_DEPTH : len;
    uint64_t h = hash_bytes(key, sizeof *key * (size_t)klen, 0xcbf29ce484222325ull ^ (uint64_t)trunc);
    *tmp = NULL;
    pthread_mutex_lock(&gr->mu);
    if (gr->cap) {
        for (size_t i = h & (gr->cap - 1);; i = (i + 1) & (gr->cap - 1)) {
            struct mentry *e = gr->tab[i];
            if (!e) break;
            if (e->hash == h && e->klen == klen && e->trunc == trunc &&
                memcmp(e->key, key, sizeof *key * (size_t)klen) == 0) {
                pthread_mutex_unlock(&gr->mu);
                return e;
            }
        }
    }
    struct mentry *e = mask_compute(gr, key, klen, trunc);
    e->hash = h;
    if (gr->n >= GRAM_CACHE_ENTRIES || atomic_load(&gr->v->cache_bytes) + e->bytes > GRAM_CACHE_BYTES) {
        pthread_mutex_unlock(&gr->mu);
        *tmp = e;
        return e;
    }
    if (2 * (gr->n + 1) > gr->cap) {
        size_t nc = gr->cap ? 2 * gr->cap : 64;
        struct mentry **nt = xcalloc(nc, sizeof *nt);
        for (size_t i = 0; i < gr->cap; i++)
            if (gr->tab[i]) {
                size_t j = gr->tab[i]->hash & (nc - 1);
                while (nt[j]) j = (j + 1) & (nc - 1);
                nt[j] = gr->tab[i];
            }
        free(gr->tab);
        gr->tab = nt;
        gr->cap = nc;
    }
    size_t j = h & (gr->cap - 1);
    while (gr->tab[j]) j = (j + 1) & (gr->cap - 1);
    gr->tab[j] = e;
    gr->n++;
    atomic_fetch_add(&gr->v->cache_bytes, e->bytes);
    pthread_mutex_unlock(&gr->mu);
    return e;
}

/* ---- compiling ---- */

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
    uint64_t single[4]; /* bytes that are tokens of their own */
    uint32_t root_child[256]; /* the trie root's child by byte (0: none) */
    long work;
    uint32_t *front, *next;
    size_t cap;
};

static void run_cost_vocab(void *ctx, const struct gram *g, uint32_t p, uint32_t q, uint32_t *cost) {
    struct runctx *rc = ctx;
    const struct tnode *t = rc->v->t;
#define AFTER(j) ((j) < q ? cost[(j) - p] : 0) /* the cost from element j on */
    for (uint32_t i = q; i-- > p;) {
        const uint64_t *cls = g->cls[g->el[i].arg];
        uint32_t best = GRAM_NEED_INF;
        if ((cls[0] & rc->single[0]) | (cls[1] & rc->single[1]) | (cls[2] & rc->single[2]) | (cls[3] & rc->single[3]))
            best = AFTER(i + 1) + 1;
        /* longer tokens: the trie nodes whose bytes match classes i, i+1, ... level by level */
        size_t nf = 0;
        for (int c = 0; c < 256 && rc->work > 0; c++)
            if (rc->root_child[c] && ((cls[c >> 6] >> (c & 63)) & 1) && t[rc->root_child[c]].child) {
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

static int compile_text(struct gram *out, enum grammar_kind kind, const char *text, size_t len, char *err) {
    struct sbuf gb = {0};
    const char *src = text;
    size_t n = len;
    int rc = 0;
    if (kind == GRAMMAR_REGEX) rc = grammar_gbnf_from_regex(text, len, "root", &gb, err);
    else if (kind == GRAMMAR_JSON_SCHEMA) rc = grammar_gbnf_from_json_schema(text, len, "root", &gb, err);
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

struct grammar *grammar_compile(struct grammar_vocab *v, enum grammar_kind kind, const char *text, size_t len,
                                char *err) {
    if (kind == GRAMMAR_JSON_OBJECT) {
        text = "";
        len = 0;
    }
    if (len > GRAMMAR_MAX_TEXT) {
        err_set(err, "grammar text of %zu bytes is longer than the limit of %u", len, GRAMMAR_MAX_TEXT);
        return NULL;
    }
    uint64_t h = hash_bytes(text, len, 0xcbf29ce484222325ull + (uint64_t)kind);
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
    struct grammar *g = xcalloc(1, sizeof *g);
    if (compile_text(&g->g, kind, text, len, err) < 0) {
        free(g);
        return NULL;
    }
    need_tables(&g->g, v);
    atomic_init(&g->refs, 2); /* the caller's and the cache's */
    g->v = v;
    g->kind = kind;
    g->text = xmalloc(len + 1);
    memcpy(g->text, text, len);
    g->text[len] = 0;
    g->len = len;
    g->hash = h;
    pthread_mutex_init(&g->mu, NULL);
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

/* ---- matcher ---- */

struct grammar_matcher {
    struct grammar *g;
    struct sset cur;
    int ended;
    struct sset hist[GRAM_HISTORY]; /* states before the last accepted tokens (a ring) */
    int hist_ended[GRAM_HISTORY];
    int h_head, h_n;
    struct sset a, b, one; /* scratch */
    int32_t *clr;          /* scratch of grammar_matcher_mask_budget */
    int n_clr, cap_clr;
    uint64_t *plain; /* the mask without a budget, (n_vocab + 63) / 64 words: mask_budget leaves it there when it returns 1 (apply_budget reads it) */
};

struct grammar_matcher *grammar_matcher_new(struct grammar *g) {
    struct grammar_matcher *m = xcalloc(1, sizeof *m);
    grammar_ref(g);
    m->g = g;
    struct xctx x;
    x.g = &g->g;
    x.out = &m->cur;
    x.opaque = 0;
    x.touched = 0;
    x.budget = GRAM_EXPAND_BUDGET;
    int32_t root = (int32_t)g->g.root;
    for (uint32_t a = g->g.alt_off[root]; a < g->g.alt_off[root + 1]; a++) {
        x.buf[0] = (int32_t)g->g.alts[a];
        expand(&x, 1);
    }
    return m;
}

void grammar_matcher_free(struct grammar_matcher *m) {
    if (!m) return;
    sset_free(&m->cur);
    for (int i = 0; i < GRAM_HISTORY; i++) sset_free(&m->hist[i]);
    sset_free(&m->a);
    sset_free(&m->b);
    sset_free(&m->one);
    free(m->clr);
    free(m->plain);
    grammar_unref(m->g);
    free(m);
}

int grammar_matcher_can_end(const struct grammar_matcher *m) {
    if (m->ended) return 1;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.len[i] == 0) return 1;
    return 0;
}

int grammar_matcher_done(const struct grammar_matcher *m) {
    if (m->ended) return 1;
    for (int i = 0; i < m->cur.n; i++)
        if (m->cur.len[i] > 0) return 0;
    return 1;
}

/* Runs bytes from the state in (copied into m->a) and leaves the result in m->a.
 * Returns 0, or -1 when some byte is refused. */
static int run_bytes(struct grammar_matcher *m, const struct sset *in, const char *s, size_t n) {
    sset_copy(&m->a, in);
    for (size_t i = 0; i < n; i++) {
        sset_clear(&m->b);
        m->b.overflow = 0;
        advance(&m->g->g, &m->a, (uint8_t)s[i], &m->b, 0, NULL);
        struct sset t = m->a;
        m->a = m->b;
        m->b = t;
        if (m->a.n == 0) return -1;
    }
    return 0;
}

static int token_ok(struct grammar_matcher *m, const int32_t *stk, int len, int32_t id) {
    sset_clear(&m->one);
    sset_add(&m->one, stk, len);
    return run_bytes(m, &m->one, m->g->v->bytes[id], m->g->v->lens[id]) == 0;
}

/* token_ok, and *need: the need of the state the token leads to from the full stack. */
static int token_need(struct grammar_matcher *m, const int32_t *stk, int len, int32_t id, uint32_t *need) {
    if (!token_ok(m, stk, len, id)) return 0;
    *need = sset_need(&m->g->g, &m->a);
    return 1;
}

uint32_t grammar_matcher_need(const struct grammar_matcher *m) {
    return m->ended ? 0 : sset_need(&m->g->g, &m->cur);
}

void grammar_matcher_mask(struct grammar_matcher *m, uint64_t *mask) {
    const struct grammar_vocab *v = m->g->v;
    size_t words = ((size_t)v->n + 63) / 64;
    memset(mask, 0, words * sizeof *mask);
    int any = 0;
    if (!m->ended) {
        for (int i = 0; i < m->cur.n; i++) {
            int len = m->cur.len[i];
            if (len == 0) continue;
            const int32_t *stk = sset_stack(&m->cur, i);
            struct mentry *tmp, *e = mask_entry(m->g, stk, len, &tmp);
            if (e->bits) {
                for (size_t w = 0; w < words; w++) mask[w] |= e->bits[w];
            } else {
                for (int k = 0; k < e->n_ids; k++) mask[e->ids[k] >> 6] |= 1ull << (e->ids[k] & 63);
            }
            any |= e->bits || e->n_ids;
            for (int k = 0; k < e->n_unc; k++) {
                int32_t id = e->unc[k];
                if ((mask[id >> 6] >> (id & 63)) & 1) continue;
                if (token_ok(m, stk, len, id)) {
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

static int bit_get(const uint64_t *mask, int32_t id) { return (int)((mask[id >> 6] >> (id & 63)) & 1); }
static void bit_set(uint64_t *mask, int32_t id) { mask[id >> 6] |= 1ull << (id & 63); }

static void push_clr(struct grammar_matcher *m, int32_t id) {
    if (m->n_clr == m->cap_clr) {
        m->cap_clr = m->cap_clr ? 2 * m->cap_clr : 256;
        m->clr = xrealloc(m->clr, sizeof *m->clr * (size_t)m->cap_clr);
    }
    m->clr[m->n_clr++] = id;
}

/* One stack's part of a budgeted mask: its allowed tokens whose need after, need_stk + d,
 * is at most allow. Where the entry's base fits (most of its tokens do), that is the cached
 * mask minus the jumps past it; as the mask is a union over stacks, a token taken out
 * stays when an earlier stack allowed it: those not yet set are noted, the entry ORed in,
 * and the noted ones cleared. Where the base does not fit, only the jumps up to it. The
 * uncertain tokens of a cut key get their exact need. Sets *any when the part is not
 * empty; returns 1 when it may lack some token of the plain mask. */
static int mask_stack_budget(struct grammar_matcher *m, const struct mentry *e, const int32_t *stk, int len,
                             uint32_t need_stk, int64_t allow, uint64_t *mask, int *any) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    int64_t fit = allow - need_stk; /* the largest delta that fits */
    int removed = 0;
    if (e->base <= fit) {
        m->n_clr = 0;
        int k = e->n_jmp;
        while (k > 0 && e->jmp[k - 1].d > fit) k--;
        for (; k < e->n_jmp; k++) {
            removed++;
            if (!bit_get(mask, e->jmp[k].id)) push_clr(m, e->jmp[k].id);
        }
        k = e->n_bnd;
        while (k > 0 && e->bnd[k - 1].d > fit) k--;
        for (; k < e->n_bnd; k++) {
            uint32_t need;
            if (token_need(m, stk, len, e->bnd[k].id, &need) && need <= allow) continue;
            removed++;
            if (!bit_get(mask, e->bnd[k].id)) push_clr(m, e->bnd[k].id);
        }
        if (e->bits) {
            for (size_t w = 0; w < words; w++) mask[w] |= e->bits[w];
        } else {
            for (int i = 0; i < e->n_ids; i++) bit_set(mask, e->ids[i]);
        }
        for (int i = 0; i < m->n_clr; i++) mask[m->clr[i] >> 6] &= ~(1ull << (m->clr[i] & 63));
        if (e->n_acc > removed) *any = 1;
    } else {
        removed = e->n_acc > 0;
        for (int k = 0; k < e->n_jmp && e->jmp[k].d <= fit; k++) {
            bit_set(mask, e->jmp[k].id);
            *any = 1;
        }
        for (int k = 0; k < e->n_bnd; k++) {
            int32_t id = e->bnd[k].id;
            uint32_t need;
            if (bit_get(mask, id)) continue;
            if (e->bnd[k].d <= fit || (token_need(m, stk, len, id, &need) && need <= allow)) {
                bit_set(mask, id);
                *any = 1;
            }
        }
    }
    for (int k = 0; k < e->n_unc; k++) {
        int32_t id = e->unc[k];
        uint32_t need;
        if (bit_get(mask, id) || !token_need(m, stk, len, id, &need)) continue;
        if (need <= allow) {
            bit_set(mask, id);
            *any = 1;
        } else {
            removed++;
        }
    }
    return removed > 0;
}

int grammar_matcher_mask_budget(struct grammar_matcher *m, uint64_t *mask, int64_t budget) {
    const struct grammar_vocab *v = m->g->v;
    const struct gram *g = &m->g->g;
    size_t words = ((size_t)v->n + 63) / 64;
    if (m->ended || budget >= GRAM_NEED_INF) { /* nothing to close, or no sentence is that long */
        grammar_matcher_mask(m, mask);
        return 0;
    }
    int64_t lim = (budget < 1 ? 1 : budget) - 1; /* the need left after this token must fit */
    uint32_t need_min = sset_need(g, &m->cur);
    /* force mode (the need does not fit): the tokens that lower it */
    int force = need_min > lim;
    int64_t allow = force ? (int64_t)need_min - 1 : lim;
    memset(mask, 0, words * sizeof *mask);
    int any = 0, maybe = force; /* maybe: some token the plain mask allows may be out */
    for (int i = 0; i < m->cur.n; i++) {
        int len = m->cur.len[i];
        if (len == 0) continue;
        const int32_t *stk = sset_stack(&m->cur, i);
        struct mentry *tmp, *e = mask_entry(m->g, stk, len, &tmp);
        maybe |= mask_stack_budget(m, e, stk, len, stack_need(g, stk, len), allow, mask, &any);
        mentry_free(tmp);
    }
    int can_end = grammar_matcher_can_end(m);
    if (!any && !can_end) { /* no token fits (a vocabulary without the bytes the shortest ending needs) */
        grammar_matcher_mask(m, mask);
        return 0;
    }
    if (can_end)
        for (int i = 0; i < v->n_eog; i++) bit_set(mask, v->eog[i]);
    if (!maybe) return 0;
    if (!m->plain) m->plain = xmalloc(words * sizeof *m->plain);
    grammar_matcher_mask(m, m->plain);
    return memcmp(mask, m->plain, words * sizeof *mask) != 0;
}

/* Writes -inf into logits[id] for every token not in mask (n = the logits row's length). */
/* restrict (the mask is never the logits row) and inline: without them the compiler must
 * assume a store to logits may change mask words, and this loop took 16 -> 22 us on a
 * 128k row (bench/bench_grammar.py's apply, 2026-11-26) */
static inline void apply_mask(const struct grammar_matcher *m, const uint64_t *restrict mask, float *restrict logits,
                              int n) {
    int nv = n < m->g->v->n ? n : m->g->v->n;
    int full = nv / 64;
    for (int w = 0; w < full; w++) { /* whole words: the common all-out and all-in ones cost little */
        uint64_t bits = mask[w];
        float *p = logits + (size_t)w * 64;
        if (bits == ~0ull) continue;
        if (bits == 0) {
            for (int k = 0; k < 64; k++) p[k] = -INFINITY;
            continue;
        }
        for (int k = 0; k < 64; k++)
            if (!((bits >> k) & 1)) p[k] = -INFINITY;
    }
    for (int i = full * 64; i < nv; i++)
        if (!((mask[i >> 6] >> (i & 63)) & 1)) logits[i] = -INFINITY;
    for (int i = nv; i < n; i++) logits[i] = -INFINITY; /* padding rows past the tokenizer's vocabulary */
}

void grammar_matcher_apply(struct grammar_matcher *m, float *logits, int n) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    uint64_t stackbuf[4096], *mask = words <= 4096 ? stackbuf : xmalloc(words * sizeof *mask);
    grammar_matcher_mask(m, mask);
    apply_mask(m, mask, logits, n);
    if (mask != stackbuf) free(mask);
}

/* The highest of logits[0 .. n) among the tokens in mask (the first on ties); -1: none. */
static int masked_argmax(const uint64_t *mask, const float *logits, int n) {
    int best = -1;
    for (int id = 0; id < n; id++)
        if ((mask[id >> 6] >> (id & 63) & 1) && (best < 0 || logits[id] > logits[best])) best = id;
    return best;
}

int grammar_matcher_apply_budget(struct grammar_matcher *m, float *logits, int n, int64_t budget) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    uint64_t stackbuf[4096], *mask = words <= 4096 ? stackbuf : xmalloc(words * sizeof *mask);
    int changed = 0;
    if (grammar_matcher_mask_budget(m, mask, budget)) { /* did the budget take out the first choice? */
        /* mask_budget returns 1 only after comparing with the plain mask, left in m->plain */
        const int top = masked_argmax(m->plain, logits, n < m->g->v->n ? n : m->g->v->n);
        changed = top >= 0 && !(mask[top >> 6] >> (top & 63) & 1);
    }
    apply_mask(m, mask, logits, n);
    if (mask != stackbuf) free(mask);
    return changed;
}

static void save_history(struct grammar_matcher *m) {
    int slot = m->h_head;
    sset_copy(&m->hist[slot], &m->cur);
    m->hist_ended[slot] = m->ended;
    m->h_head = (m->h_head + 1) % GRAM_HISTORY;
    if (m->h_n < GRAM_HISTORY) m->h_n++;
}

int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t n) {
    if (m->ended || run_bytes(m, &m->cur, s, n) < 0) return -1;
    save_history(m);
    struct sset t = m->cur;
    m->cur = m->a;
    m->a = t;
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
    }
    return 0;
}
