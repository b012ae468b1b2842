/* Stack sets: a grammar state as a set of stacks of element positions in a struct gram
 * (gram_ir.h), and the pushdown step that advances such a set on one byte, on all
 * alternatives at once (llama.cpp style, with tail calls so loops do not grow the stack).
 * Hides the expansion from a stack to those whose top is a byte class, and its limits.
 * Plain data: one thread at a time. */
#ifndef TPD_GRAMMAR_STACKSET_H
#define TPD_GRAMMAR_STACKSET_H

#include <stdint.h>

#include "gram_ir.h"

/* n stacks, stack i at pool[off[i] .. off[i] + len[i]), its top last. overflow: a limit was
 * hit (too many stacks, too deep, too many expansion steps) and some stack was dropped. */
struct sset {
    int n, cap;
    uint32_t *off;
    uint16_t *len;
    int32_t *pool;
    size_t pn, pcap;
    int overflow;
};

static inline void sset_clear(struct sset *s) {
    s->n = 0;
    s->pn = 0;
}

static inline const int32_t *sset_stack(const struct sset *s, int i) { return s->pool + s->off[i]; }

void sset_free(struct sset *s);
/* Adds stk[0..len) unless s has it already (dropped, with overflow set, past the limit). */
void sset_add(struct sset *s, const int32_t *stk, int len);
void sset_copy(struct sset *d, const struct sset *s);

/* The need of stack stk: each entry is a position in an alternative still to be finished
 * (the top the element to match now, the others where to return to), and they finish one
 * after the other, so their costs add (a token spanning two is not counted on: a bound).
 * Inline: the closer sums it per stack on every budgeted mask. */
static inline uint32_t stack_need(const struct gram *g, const int32_t *stk, int len) {
    uint64_t n = 0;
    for (int i = 0; i < len; i++) n += g->rest[stk[i]];
    return n >= GRAM_NEED_INF ? GRAM_NEED_INF : (uint32_t)n;
}

/* The least need over the stacks of s (GRAM_NEED_INF when there are none). */
static inline uint32_t sset_need(const struct gram *g, const struct sset *s) {
    uint32_t best = GRAM_NEED_INF;
    for (int i = 0; i < s->n; i++) {
        uint32_t n = stack_need(g, sset_stack(s, i), s->len[i]);
        if (n < best) best = n;
    }
    return best;
}

/* Adds to out the start state: the stacks of g's root, expanded. */
void sset_start(const struct gram *g, struct sset *out);
/* Adds to out the stacks of in after byte c. opaque: the stacks are cache keys cut from
 * deeper ones, so a path that pops the last entry leads below the cut, where nothing is
 * known: it adds nothing and sets *touched instead (touched may be NULL otherwise).
 * Returns 1 when some stack consumed c. */
int sset_advance(const struct gram *g, const struct sset *in, uint8_t c, struct sset *out, int opaque, int *touched);

#endif
