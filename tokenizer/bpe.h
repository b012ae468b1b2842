/* The BPE model: turns one pre-token into ids. Two merge orders, one per reference:
 * ranked merges (HF tokenizers and llama.cpp's byte-level BPE: lowest merge rank first,
 * leftmost on ties) and scored merges (llama.cpp's SentencePiece: highest token score
 * first). A word cache makes repeated pre-tokens cheap. Callers serialize use of a cache. */
#ifndef TPD_TOK_BPE_H
#define TPD_TOK_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "vocab.h"

/* Growing id array. */
struct idbuf {
    int32_t *v;
    size_t n, cap;
};
void idbuf_push(struct idbuf *b, int32_t id);
void idbuf_free(struct idbuf *b);

struct bpe_opts {
    int byte_level;    /* initial symbols are bytes mapped through the GPT-2 alphabet */
    int byte_fallback; /* chars missing from the vocabulary become <0xNN> tokens */
    int scored;        /* SentencePiece score order instead of merge ranks */
    int ignore_merges; /* a pre-token that is itself a token is emitted whole */
    int fuse_unk;      /* consecutive unknowns collapse into one <unk> */
    int32_t unk;       /* -1: none (unknown chars are dropped, as HF does) */
};

struct bpe_cache;
struct bpe_cache *bpe_cache_new(void);
void bpe_cache_free(struct bpe_cache *c);

/* Appends the ids of piece s[0..n) to out. cache may be NULL. */
void bpe_encode(const struct vocab *v, const struct bpe_opts *o, struct bpe_cache *cache,
                const char *s, size_t n, struct idbuf *out);

#endif
