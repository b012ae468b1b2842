/* Token vocabulary shared by the tokenizer loaders and the BPE model: token strings with
 * their attributes and scores, string -> id and (id, id) -> merge lookups (open-addressing
 * hash tables), and the byte -> token tables. Built once at load time, then read-only. */
#ifndef TPD_TOK_VOCAB_H
#define TPD_TOK_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/* Token attributes (llama.cpp's GGUF token types map onto these). */
enum tok_attr {
    TOK_NORMAL = 0,
    TOK_CONTROL = 1,      /* special: <s>, <|im_start|>; only produced from text when asked */
    TOK_USER_DEFINED = 2, /* added, non-special: matched whole in text, always */
    TOK_BYTE = 3,         /* <0xNN> byte fallback */
    TOK_UNKNOWN = 4,
    TOK_UNUSED = 5,
};

struct vocab {
    uint32_t n; /* number of tokens */
    char **str; /* token text as stored (byte-level or ▁-escaped) */
    uint32_t *len;
    uint8_t *attr; /* enum tok_attr */
    float *score;  /* SentencePiece scores, or NULL */
    /* string -> id */
    uint32_t *str_slots; /* id + 1, 0 = empty */
    uint64_t str_mask;
    /* (left id, right id) -> merge: rank and result */
    uint64_t *merge_keys; /* (left << 32 | right) + 1, 0 = empty */
    uint32_t *merge_rank;
    uint32_t *merge_result;
    uint64_t merge_mask;
    uint32_t n_merges;
    int32_t byte_tok[256];      /* byte-level: byte -> id of its mapped char; -1 if absent */
    int32_t byte_fallback[256]; /* <0xNN> -> id; -1 if absent */
};

/* Takes n token strings (copied). Duplicate strings keep the first id for lookup, as the
 * references do. Returns 0 or -1 with err. */
int vocab_init(struct vocab *v, uint32_t n, char *err);
int vocab_set(struct vocab *v, uint32_t id, const char *s, size_t len, char *err);
/* Builds the string index once every vocab_set is done. */
int vocab_index(struct vocab *v, char *err);
void vocab_free(struct vocab *v);

/* Returns the id of s[0..len), or -1. */
int32_t vocab_find(const struct vocab *v, const char *s, size_t len);

/* Merges: call vocab_merges_init with the count, then vocab_merge_add in rank order. */
int vocab_merges_init(struct vocab *v, uint32_t n, char *err);
/* Adds merge (left, right) with the next rank; a duplicate pair keeps its first rank. */
int vocab_merge_add(struct vocab *v, uint32_t left, uint32_t right, uint32_t result);
/* Returns the rank (and *result) of merging left+right, or UINT32_MAX. */
uint32_t vocab_merge_find(const struct vocab *v, uint32_t left, uint32_t right, uint32_t *result);

/* Fills byte_tok (GPT-2 alphabet) and byte_fallback (<0xNN>) from the string index. */
void vocab_byte_tables(struct vocab *v);

uint64_t vocab_hash(const void *p, size_t n);

#endif
