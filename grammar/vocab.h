/* The vocabulary as the grammar sees it (grammar.h's struct grammar_vocab): each token's
 * bytes, and a byte trie of the usable tokens, which the mask walk (mask_cache.c) and the
 * run costs (compile.c) descend. Built once per tokenizer, then read-only and shared by every
 * thread, but for the LRU of grammars compiled against it (compile.c, under mu) and the bytes
 * those grammars and their mask caches hold (compile.c, mask_cache.c; atomic), kept here as
 * the vocabulary owns both. */
#ifndef TPD_GRAMMAR_VOCAB_H
#define TPD_GRAMMAR_VOCAB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"

#define GRAM_CACHE_GRAMMARS 64 /* compiled grammars kept per vocabulary */

/* A trie node: tokens in byte order, so the tokens ending at a node are a run of sorted[]. */
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
    atomic_ullong cache_bytes; /* every live grammar's bytes and its cached masks' */
    size_t cache_limit;        /* grammar_vocab_set_cache_bytes */
    struct grammar_limits lim; /* of the grammars compiled from now on (grammar_vocab_set_limits) */
    unsigned schema_reading;   /* grammar_vocab_set_schema_reading */
};

/* Drops least recently used grammars (never keep) from the LRU until cache_bytes + need fits
 * cache_limit or none is left to drop; 1 if it fits. The caller may hold keep's cache.mu.
 * In compile.c, beside the rest of the LRU. */
int grammar_vocab_make_room(struct grammar_vocab *v, size_t need, const struct grammar *keep);

#endif
