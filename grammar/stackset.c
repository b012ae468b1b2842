/* Stack sets, the pushdown step and the work meter (stackset.h). */
#include <stdlib.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/fatal.h"
#include "grammar.h"
#include "stackset.h"

#define GRAM_EXPAND_DEPTH \
    4096 /* nested expansion steps (the recursion's depth): a chain of empty rules */
#define GM_CLOCK_EVERY 16384 /* work units between looks at the clock (a few hundred us) */

void gmeter_init(struct gmeter *m, long work, int max_stacks, double deadline, double limit_ms) {
    m->left = m->limit = work;
    m->max_stacks = max_stacks;
    m->deadline = deadline;
    m->limit_ms = limit_ms;
    m->hit = GM_OK;
    m->next_clock = GM_CLOCK_EVERY;
}

int gmeter_spend(struct gmeter *m, long units) {
    if (m->hit) return -1;
    m->left -= units;
    if (m->left < 0) m->hit = GM_WORK;
    else if (m->deadline > 0 &&
             (m->next_clock -= (int)(units < GM_CLOCK_EVERY ? units : GM_CLOCK_EVERY)) <= 0) {
        m->next_clock = GM_CLOCK_EVERY;
        if (clock_now() > m->deadline) m->hit = GM_TIME;
    }
    return m->hit ? -1 : 0;
}

void gmeter_why(const struct gmeter *m, char *err) {
    switch (m->hit) {
    case GM_STACKS:
        err_set(err, "more than %d parses of the output at once (limit grammar.max_stacks = %d)",
                m->max_stacks, m->max_stacks);
        break;
    case GM_WORK:
        err_set(err,
                "more than %ld units of work for one token (limit grammar.max_token_work = %ld)",
                m->limit, m->limit);
        break;
    case GM_EXPAND:
        err_set(err, "a chain of more than %d empty rules in a row (a fixed limit)",
                GRAM_EXPAND_DEPTH);
        break;
    case GM_TIME:
        err_set(err, "its first mask not done in %g ms (limit grammar.max_compile_ms = %g)",
                m->limit_ms, m->limit_ms);
        break;
    default: err_set(err, "no limit hit");
    }
}

void sset_free(struct sset *s) {
    free(s->off);
    free(s->len);
    free(s->hash);
    free(s->pool);
    free(s->tab);
    memset(s, 0, sizeof *s);
}

static uint32_t stack_hash(const int32_t *stk, int len) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)len;
    for (int i = 0; i < len; i++) h = (h ^ (uint32_t)stk[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ h >> 32);
}

/* Doubles the hash table (or makes the first) and indexes every stack in it. */
static void grow_tab(struct sset *s) {
    int nc = s->tcap ? 2 * s->tcap : 16;
    free(s->tab);
    s->tab = xcalloc((size_t)nc, sizeof *s->tab);
    s->tcap = nc;
    for (int i = 0; i < s->n; i++) {
        int j = (int)(s->hash[i] & (uint32_t)(nc - 1));
        while (s->tab[j]) j = (j + 1) & (nc - 1);
        s->tab[j] = i + 1;
    }
}

int sset_add(struct sset *s, const int32_t *stk, int len) {
    uint32_t h = stack_hash(stk, len);
    if (2 * (s->n + 1) > s->tcap) grow_tab(s);
    int j = (int)(h & (uint32_t)(s->tcap - 1));
    for (; s->tab[j]; j = (j + 1) & (s->tcap - 1)) {
        int i = s->tab[j] - 1;
        if (s->hash[i] == h && s->len[i] == len &&
            (len == 0 || memcmp(s->pool + s->off[i], stk, sizeof *stk * (size_t)len) == 0))
            return 0;
    }
    if (s->n >= GRAMMAR_MAX_STACKS) return -1;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->off = xrealloc(s->off, sizeof *s->off * (size_t)s->cap);
        s->len = xrealloc(s->len, sizeof *s->len * (size_t)s->cap);
        s->hash = xrealloc(s->hash, sizeof *s->hash * (size_t)s->cap);
    }
    if (s->pn + (size_t)len > s->pcap) {
        s->pcap = (s->pn + (size_t)len) * 2 + 64;
        s->pool = xrealloc(s->pool, sizeof *s->pool * s->pcap);
    }
    if (len) memcpy(s->pool + s->pn, stk, sizeof *stk * (size_t)len);
    s->off[s->n] = (uint32_t)s->pn;
    s->len[s->n] = (uint16_t)len;
    s->hash[s->n] = h;
    s->tab[j] = s->n + 1;
    s->pn += (size_t)len;
    s->n++;
    return 1;
}

void sset_copy(struct sset *d, const struct sset *s) {
    sset_clear(d);
    for (int i = 0; i < s->n; i++) sset_add(d, sset_stack(s, i), s->len[i]);
}

uint64_t sset_hash(const struct sset *s) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++) h = (h ^ s->hash[i]) * 0x100000001b3ull;
    return h;
}

int sset_equal(const struct sset *a, const struct sset *b) {
    if (a->n != b->n || a->pn != b->pn) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->hash[i] != b->hash[i] || a->len[i] != b->len[i]) return 0;
    return a->pn == 0 || memcmp(a->pool, b->pool, sizeof *a->pool * a->pn) == 0;
}

/* ---- expansion ---- */

struct xctx {
    const struct gram *g;
    struct sset *out;
    struct gmeter *m;
    int opaque;  /* the bottom of the stack is cut off (a cache key) */
    int touched; /* opaque: some path popped below the cut */
    int depth;   /* of expand's recursion */
    int32_t buf[GRAMMAR_MAX_DEPTH + 2];
};

/* Field by field, not an initializer: that would clear buf, 2 KiB, on every byte. */
static void xctx_init(struct xctx *x, const struct gram *g, struct sset *out, int opaque,
                      struct gmeter *m) {
    x->g = g;
    x->out = out;
    x->opaque = opaque;
    x->touched = 0;
    x->m = m;
    x->depth = 0;
}

/* Adds buf[0..len) to the output: a stack costs its hash, lookup and copy (4 units and one
 * per 4 entries: as long as 4 trie nodes walked), and past the meter's limit of stacks (or
 * the storage's) the meter is hit. */
static void emit(struct xctx *x, int len) {
    if (gmeter_spend(x->m, 4 + len / 4)) return;
    int added = sset_add(x->out, x->buf, len);
    if (added < 0 || (added && x->out->n > x->m->max_stacks)) x->m->hit = GM_STACKS;
}

/* Adds to x->out every stack reachable from buf[0..len) without consuming a byte whose
 * top is a byte class (or the empty stack: the end). */
static void expand(struct xctx *x, int len) {
    if (x->depth >= GRAM_EXPAND_DEPTH) {
        if (!x->m->hit) x->m->hit = GM_EXPAND;
        return;
    }
    if (gmeter_spend(x->m, 1)) return;
    if (len == 0) {
        if (x->opaque) x->touched = 1;
        else emit(x, 0);
        return;
    }
    x->depth++;
    int32_t pos = x->buf[len - 1];
    struct gelem e = x->g->el[pos];
    if (e.type == E_CLASS) {
        emit(x, len);
    } else if (e.type == E_END) {
        expand(x, len - 1);
    } else {
        int nl = len;
        if (x->g->el[pos + 1].type == E_END) nl = len - 1; /* tail call: nothing to return to */
        else x->buf[len - 1] = pos + 1;
        if (nl + 1 > GRAMMAR_MAX_DEPTH) {
            x->out->overflow = 1;
        } else {
            for (uint32_t a = x->g->alt_off[e.arg]; a < x->g->alt_off[e.arg + 1] && !x->m->hit;
                 a++) {
                x->buf[nl] = (int32_t)x->g->alts[a];
                expand(x, nl + 1);
            }
        }
        x->buf[len - 1] = pos;
    }
    x->depth--;
}

void sset_start(const struct gram *g, struct sset *out, struct gmeter *m) {
    struct xctx x;
    xctx_init(&x, g, out, 0, m);
    int32_t root = (int32_t)g->root;
    for (uint32_t a = g->alt_off[root]; a < g->alt_off[root + 1] && !m->hit; a++) {
        x.buf[0] = (int32_t)g->alts[a];
        expand(&x, 1);
    }
}

static int class_has(const struct gram *g, int32_t pos, uint8_t c) {
    return (int)((g->cls[g->el[pos].arg][c >> 6] >> (c & 63)) & 1);
}

/* Whether the unique quote on top of a stack may consume the byte that ends tx. */
static int unique_quote_ok(const struct gtext *tx, struct gmeter *m) {
    long cost = 0;
    int ok = uniq_string_ok(tx, &cost);
    return gmeter_spend(m, 1 + cost / 4) == 0 && ok;
}

int sset_advance(const struct gram *g, const struct sset *in, uint8_t c, struct sset *out,
                 int opaque, const struct gtext *tx, struct sset *held, int *touched,
                 struct gmeter *m) {
    struct xctx x, xh;
    xctx_init(&x, g, out, opaque, m);
    xctx_init(&xh, g, held, opaque, m);
    int matched = 0;
    for (int i = 0; i < in->n && !m->hit; i++) {
        int len = in->len[i];
        if (len == 0) continue;
        const int32_t *s = sset_stack(in, i);
        if (!class_has(g, s[len - 1], c)) continue;
        struct xctx *to = &x;
        if (g->uq_cls && g->el[s[len - 1]].arg == g->uq_cls - 1) {
            if (!tx && !held) continue;
            if (!tx) to = &xh; /* what passing its check would lead to */
            else if (!unique_quote_ok(tx, m)) continue;
        }
        matched |= to == &x;
        memcpy(to->buf, s, sizeof *s * (size_t)len);
        to->buf[len - 1]++;
        expand(to, len);
    }
    if (touched) *touched = x.touched || xh.touched;
    return matched;
}
