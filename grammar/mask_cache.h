/* Per-stack token masks: the tokens one stack allows, computed once by walking the
 * vocabulary's trie and then cached in the grammar, keyed by the stack's top GRAM_KEY_DEPTH
 * positions (the whole stack when shallower, the usual case for JSON). Where the key leaves
 * part of the stack out, tokens whose bytes reach below it are recorded as uncertain, for
 * the matcher to check one by one against the full stack (xgrammar's context-dependent
 * tokens). The same walk records each token's change of need, for the budget-aware closer.
 * Hides the walk (a lazily built DFA over stack sets) and the cache table. Any thread: the
 * table is under mu, and an entry once cached is immutable until its grammar is freed. */
#ifndef TPD_GRAMMAR_MASK_CACHE_H
#define TPD_GRAMMAR_MASK_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct gmeter;
struct grammar;
struct grammar_vocab;

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

/* A token allowed exactly when the unique quote at its byte `at` passes its check (uniq.h):
 * the rest of its bytes are certain either way, and the need after it is the key stack's
 * + d, exactly (as in jmp). */
struct held {
    int32_t id;
    int32_t at;
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
    int32_t *unc; /* uncertain tokens (a cut key, or more than one unique quote) */
    int n_unc;
    struct held *held; /* tokens that hang on one unique quote */
    int n_held;
    int32_t base;           /* the delta of every allowed token not in jmp or bnd */
    struct jump *jmp, *bnd; /* sorted by d, ascending (see struct jump); bnd only when trunc */
    int n_jmp, n_bnd;
    size_t bytes;
};

/* One grammar's entries (open addressing), at most GRAM_CACHE_ENTRIES of them; the
 * vocabulary's cache_limit bounds those of all its grammars and the grammars together. */
struct mask_cache {
    pthread_mutex_t mu;
    struct mentry **tab;
    size_t cap, n;
};

void mask_cache_init(struct mask_cache *c);
/* Frees the entries and gives their bytes back to v's count. */
void mask_cache_free(struct mask_cache *c, struct grammar_vocab *v);

/* The cached mask entry of stack stk[0..len) of grammar gr; *tmp receives it instead when
 * the cache is full (the caller frees it with mentry_free; *tmp is NULL otherwise). A new
 * entry's walk spends from m; NULL (nothing cached) where m is hit. */
struct mentry *mask_entry(struct grammar *gr, const int32_t *stk, int len, struct mentry **tmp,
                          struct gmeter *m);
void mentry_free(struct mentry *e);

/* ORs e's accepted set into mask (words: (n_vocab + 63) / 64). */
static inline void mentry_or(const struct mentry *e, uint64_t *mask, size_t words) {
    if (e->bits) {
        for (size_t w = 0; w < words; w++) mask[w] |= e->bits[w];
    } else {
        for (int k = 0; k < e->n_ids; k++) mask[e->ids[k] >> 6] |= 1ull << (e->ids[k] & 63);
    }
}

#endif
