/* Stack sets: a grammar state as a set of stacks of element positions in a struct gram
 * (gram_ir.h), and the pushdown step that advances such a set on one byte, on all
 * alternatives at once (llama.cpp style, with tail calls so loops do not grow the stack).
 * Hides the expansion from a stack to those whose top is a byte class, and its limits.
 * Every step spends from a meter (struct gmeter), so that one token's work is bounded
 * whatever the grammar. Plain data: one thread at a time. */
#ifndef TPD_GRAMMAR_STACKSET_H
#define TPD_GRAMMAR_STACKSET_H

#include <stdint.h>
#include <string.h>

#include "gram_ir.h"
#include "uniq.h"

/* n stacks, stack i at pool[off[i] .. off[i] + len[i]), its top last, hash[i] its hash;
 * tab indexes them by hash (i + 1, 0: empty; tcap a power of two, at least 2n), so that
 * adding a stack costs the same however many the set has. overflow: some stack was
 * dropped for the depth limit (GRAMMAR_MAX_DEPTH). */
struct sset {
    int n, cap;
    uint32_t *off;
    uint16_t *len;
    uint32_t *hash;
    int32_t *pool;
    size_t pn, pcap;
    int32_t *tab;
    int tcap;
    int overflow;
};

/* The cost budget of one matcher operation (one token's mask or advance, or the start
 * state's mask when a grammar is compiled): work units left (an expansion step, a stack
 * added, a trie node walked, a set interned: each tens of ns at most) and the stacks one
 * state may hold (grammar.h's struct grammar_limits). Once one is spent, hit names it and
 * the operation's result is not used (the matcher stops, grammar_matcher_error). */
enum { GM_OK, GM_STACKS, GM_WORK, GM_EXPAND, GM_TIME };
struct gmeter {
    long left;
    long limit; /* left at the start (for the message) */
    int max_stacks;
    double deadline; /* clock_now() past which work stops (0: none): compilation's time limit */
    double limit_ms; /* the time limit (for the message) */
    int hit;         /* GM_* */
    int next_clock;  /* units until the deadline is looked at again */
};

void gmeter_init(struct gmeter *m, long work, int max_stacks, double deadline, double limit_ms);
/* Spends units; 0, or -1 once some limit is hit (then for good). */
int gmeter_spend(struct gmeter *m, long units);
/* The limit hit, in words, into err (ERR_LEN bytes). */
void gmeter_why(const struct gmeter *m, char *err);

static inline void sset_clear(struct sset *s) {
    if (s->n) memset(s->tab, 0, sizeof *s->tab * (size_t)s->tcap);
    s->n = 0;
    s->pn = 0;
}

static inline const int32_t *sset_stack(const struct sset *s, int i) { return s->pool + s->off[i]; }

void sset_free(struct sset *s);
/* Adds stk[0..len) unless s has it already. Returns 1 when added, 0 when s had it, -1 when
 * s is full (GRAMMAR_MAX_STACKS, the storage's bound: the meter's limit is below it). */
int sset_add(struct sset *s, const int32_t *stk, int len);
void sset_copy(struct sset *d, const struct sset *s);
/* A hash of the whole set (its stacks' hashes in order), and equality. */
uint64_t sset_hash(const struct sset *s);
int sset_equal(const struct sset *a, const struct sset *b);

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

/* Adds to out the start state: the stacks of g's root, expanded. Spends from m (on a hit
 * out is partial). */
void sset_start(const struct gram *g, struct sset *out, struct gmeter *m);
/* Adds to out the stacks of in after byte c. opaque: the stacks are cache keys cut from
 * deeper ones, so a path that pops the last entry leads below the cut, where nothing is
 * known: it adds nothing and sets *touched instead (touched may be NULL otherwise).
 * tx: the text up to and including c, which the unique quote's check reads (uniq.h); NULL
 * where it is not known (a cached walk): a stack whose top is the unique quote then leaves
 * what it would lead to, were the check to pass, in held instead of out. Returns 1 when
 * some stack consumed c into out. Spends from m (on a hit out is partial). */
int sset_advance(const struct gram *g, const struct sset *in, uint8_t c, struct sset *out,
                 int opaque, const struct gtext *tx, struct sset *held, int *touched,
                 struct gmeter *m);

#endif
