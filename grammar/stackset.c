/* Stack sets and the pushdown step (stackset.h). */
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "grammar.h"
#include "stackset.h"

#define GRAM_MAX_STACKS 256     /* stacks in one state (ambiguous grammars) */
#define GRAM_EXPAND_BUDGET 4096 /* expansion steps for one stack and byte */

void sset_free(struct sset *s) {
    free(s->off);
    free(s->len);
    free(s->pool);
    memset(s, 0, sizeof *s);
}

void sset_add(struct sset *s, const int32_t *stk, int len) {
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

void sset_copy(struct sset *d, const struct sset *s) {
    sset_clear(d);
    for (int i = 0; i < s->n; i++) sset_add(d, sset_stack(s, i), s->len[i]);
}

/* ---- expansion ---- */

struct xctx {
    const struct gram *g;
    struct sset *out;
    int opaque;  /* the bottom of the stack is cut off (a cache key) */
    int touched; /* opaque: some path popped below the cut */
    int budget;
    int32_t buf[GRAMMAR_MAX_DEPTH + 2];
};

/* Field by field, not an initializer: that would clear buf, 2 KiB, on every byte. */
static void xctx_init(struct xctx *x, const struct gram *g, struct sset *out, int opaque) {
    x->g = g;
    x->out = out;
    x->opaque = opaque;
    x->touched = 0;
}

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

void sset_start(const struct gram *g, struct sset *out) {
    struct xctx x;
    xctx_init(&x, g, out, 0);
    x.budget = GRAM_EXPAND_BUDGET;
    int32_t root = (int32_t)g->root;
    for (uint32_t a = g->alt_off[root]; a < g->alt_off[root + 1]; a++) {
        x.buf[0] = (int32_t)g->alts[a];
        expand(&x, 1);
    }
}

static int class_has(const struct gram *g, int32_t pos, uint8_t c) {
    return (int)((g->cls[g->el[pos].arg][c >> 6] >> (c & 63)) & 1);
}

int sset_advance(const struct gram *g, const struct sset *in, uint8_t c, struct sset *out, int opaque, int *touched) {
    struct xctx x;
    xctx_init(&x, g, out, opaque);
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
