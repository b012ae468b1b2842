/* Internal to the matcher (matcher.c) and its budget-aware closer (closer.c), the two halves
 * of grammar.h's grammar_matcher: the matcher's state, the check of one token against a
 * full stack that both use, and the masking of a logits row. One thread at a time. */
#ifndef TPD_GRAMMAR_MATCHER_INTERNAL_H
#define TPD_GRAMMAR_MATCHER_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "compiled.h"
#include "stackset.h"
#include "vocab.h"

#define GRAM_HISTORY 64

struct grammar_matcher {
    struct grammar *g;
    struct sset cur;
    int ended;
    struct sset hist[GRAM_HISTORY]; /* states before the last accepted tokens (a ring) */
    int hist_ended[GRAM_HISTORY];
    int h_head, h_n;
    char *text; /* the accepted bytes, kept where the grammar has a unique quote (uniq.h) */
    size_t tlen, tcap;
    size_t hist_tlen[GRAM_HISTORY];
    unsigned long tgen;    /* the text's generation: a new number at each change */
    struct uniq_cache uc;  /* the unique quote's checks of this text */
    struct sset a, b, one; /* scratch */
    int32_t *clr;          /* scratch of grammar_matcher_mask_budget */
    int n_clr, cap_clr;
    uint64_t *plain; /* the mask without a budget, (n_vocab + 63) / 64 words: mask_budget leaves it
                        there when it returns 1 (apply_budget reads it) */
    struct gmeter meter; /* of the operation under way (matcher_begin) */
    int failed;          /* a limit was hit: err says which (grammar_matcher_error) */
    char err[ERR_LEN];
};

/* Every public operation runs between these: begin fills the meter from the grammar's
 * limits (and its deadline while it is compiled); end records a hit as the matcher's error
 * (sticky). */
void matcher_begin(struct grammar_matcher *m);
void matcher_end(struct grammar_matcher *m);
/* The mask of the current state (grammar_matcher_mask's, inside an operation): on a hit,
 * partial (the caller ends the operation and uses the failed matcher's mask instead). */
void matcher_mask_plain(struct grammar_matcher *m, uint64_t *mask);
/* The failed or ended matcher's mask: the end-of-generation tokens only. */
void matcher_mask_end(const struct grammar_matcher *m, uint64_t *mask);

/* Whether token id may follow the full stack stk[0..len) (a cache key cut from it leaves
 * the token uncertain), and if so *need: the need of the state it leads to. Uses m's scratch
 * and meter (0 on a hit). */
int matcher_token_need(struct grammar_matcher *m, const int32_t *stk, int len, int32_t id,
                       uint32_t *need);

/* Whether token h->id, which hangs on one unique quote (mask_cache.h), may follow: that
 * quote's check on the text (uses m's meter; 0 on a hit). */
int held_ok(struct grammar_matcher *m, const struct held *h);

/* Writes -inf into logits[id] for every token not in mask (n = the logits row's length).
 * restrict (the mask is never the logits row) and inline (here, so that both apply
 * functions inline it): without them the compiler must assume a store to logits may change
 * mask words, and this loop took 16 -> 22 us on a 128k row (bench/bench_grammar.py's
 * apply, 2026-11-26) */
static inline void apply_mask(const struct grammar_matcher *m, const uint64_t *restrict mask,
                              float *restrict logits, int n) {
    int nv = n < m->g->v->n ? n : m->g->v->n;
    int full = nv / 64;
    for (int w = 0; w < full;
         w++) { /* whole words: the common all-out and all-in ones cost little */
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
    for (int i = nv; i < n; i++)
        logits[i] = -INFINITY; /* padding rows past the tokenizer's vocabulary */
}

#endif
