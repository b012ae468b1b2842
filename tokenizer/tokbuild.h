/* The tokenizer's data and how it is built: the loaders (tokjson, tokgguf) fill a struct
 * tokenizer from tokenizer_alloc with the vocabulary, added tokens and options, then
 * tokenizer_finish derives the lookup tables. Any thread while building; read-only after. */
#ifndef TPD_TOKBUILD_H
#define TPD_TOKBUILD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/utf8.h"
#include "bpe.h"
#include "pretok.h"
#include "vocab.h"

struct added_tok {
    int32_t id;
    char *s;
    uint32_t len;
    uint8_t special, lstrip, rstrip, single_word;
};

struct trie_node {
    int32_t tok;      /* index into added[], or -1 */
    uint32_t child;   /* first child node, 0 = none */
    uint32_t sibling; /* next sibling, 0 = none */
    uint8_t byte;
};

/* Fields are filled by the loaders and read-only afterwards. */
struct tokenizer {
    struct vocab v;
    struct pretok pt;
    struct bpe_opts bpe;
    enum utf8_policy utf8; /* how invalid UTF-8 in input is repaired */
    int from_gguf;         /* llama.cpp semantics: special-token splitting, SPM prefix */
    int spm_space_prefix;  /* llama.cpp SPM: " " before text at the start/after a special */
    int spm_escape;        /* llama.cpp SPM: ' ' -> U+2581 before the model */

    struct added_tok *added; /* matched in the text before the model */
    size_t n_added;
    struct trie_node *trie;
    size_t n_trie;
    uint32_t trie_root[256]; /* first byte -> trie node, 0 = no added token starts so */

    int32_t *prefix_ids, *suffix_ids; /* added by TOK_ADD_SPECIAL (post-processor) */
    size_t n_prefix, n_suffix;

    int32_t bos, eos, eot, unk, pad; /* -1 when absent */
    int32_t *eog;                    /* ids that end generation */
    size_t n_eog;

    char **dec; /* decoded bytes of each token */
    uint32_t *dec_len;
    int dec_strip_space; /* drop one leading space at the start of the text */

    char *chat_template;       /* NULL when the model has none */
    char *bos_text, *eos_text; /* for the template's bos_token / eos_token */

    pthread_mutex_t cache_lock;
    struct bpe_cache *cache;
};

/* Loads from a tokenizer.json, a directory holding one (with tokenizer_config.json and
 * chat_template.jinja when present), or a GGUF file. Returns 0, or -1 with err. */

/* ---- for the loaders ---- */
struct tokenizer *tokenizer_alloc(void);
/* Adds an added/special token matched in text before the model. */
int tokenizer_add_token(struct tokenizer *t, int32_t id, const char *s, size_t len, int special,
                        int lstrip, int rstrip, int single_word, char *err);
/* Builds the added-token trie, decode table and EOG list once the vocabulary is complete. */
void tokenizer_finish(struct tokenizer *t);
void tokenizer_free(struct tokenizer *t);

#endif
