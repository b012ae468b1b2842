/* Tokenizer: text <-> token ids, matching HF tokenizers (when loaded from tokenizer.json)
 * and llama.cpp (when loaded from GGUF metadata) token for token. Byte-level BPE (GPT-2,
 * Llama 3, Qwen2, SmolLM2) and SentencePiece-style BPE (Llama 2, Gemma). Loaded once,
 * then shared read-only: encode and decode may run on any thread concurrently. */
#ifndef TPD_TOKENIZER_H
#define TPD_TOKENIZER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "bpe.h"
#include "pretok.h"
#include "../util/utf8.h"
#include "vocab.h"

struct gguf_file;

/* encode flags */
#define TOK_ADD_SPECIAL 1   /* add BOS/EOS the way the reference's encode(text) does */
#define TOK_PARSE_SPECIAL 2 /* special tokens written in the text become special ids;
                               off (default), they are tokenized as plain text */
/* decode flags */
#define TOK_SKIP_SPECIAL 1  /* leave control tokens (BOS, <|im_end|>) out of the text */

struct added_tok {
    int32_t id;
    char *s;
    uint32_t len;
    uint8_t special, lstrip, rstrip, single_word;
};

struct trie_node {
    int32_t tok;          /* index into added[], or -1 */
    uint32_t child;       /* first child node, 0 = none */
    uint32_t sibling;     /* next sibling, 0 = none */
    uint8_t byte;
};

/* Fields are filled by the loaders and read-only afterwards. */
struct tokenizer {
    struct vocab v;
    struct pretok pt;
    struct bpe_opts bpe;
    enum utf8_policy utf8;      /* how invalid UTF-8 in input is repaired */
    int from_gguf;              /* llama.cpp semantics: special-token splitting, SPM prefix */
    int spm_space_prefix;       /* llama.cpp SPM: " " before text at the start/after a special */
    int spm_escape;             /* llama.cpp SPM: ' ' -> U+2581 before the model */

    struct added_tok *added;    /* matched in the text before the model */
    size_t n_added;
    struct trie_node *trie;
    size_t n_trie;
    uint32_t trie_root[256];    /* first byte -> trie node, 0 = no added token starts so */

    int32_t *prefix_ids, *suffix_ids; /* added by TOK_ADD_SPECIAL (post-processor) */
    size_t n_prefix, n_suffix;

    int32_t bos, eos, eot, unk, pad; /* -1 when absent */
    int32_t *eog;               /* ids that end generation */
    size_t n_eog;

    char **dec;                 /* decoded bytes of each token */
    uint32_t *dec_len;
    int dec_strip_space;        /* drop one leading space at the start of the text */

    char *chat_template;        /* NULL when the model has none */
    char *bos_text, *eos_text;  /* for the template's bos_token / eos_token */

    pthread_mutex_t cache_lock;
    struct bpe_cache *cache;
};

/* Loads from a tokenizer.json, a directory holding one (with tokenizer_config.json and
 * chat_template.jinja when present), or a GGUF file. Returns 0, or -1 with err. */
int tokenizer_load(struct tokenizer **out, const char *path, char *err);
int tokenizer_load_json(struct tokenizer **out, const char *json, size_t len,
                        const char *config_json, size_t config_len, char *err);
int tokenizer_load_gguf(struct tokenizer **out, const struct gguf_file *g, char *err);
void tokenizer_free(struct tokenizer *t);

/* Encodes text[0..len) (any bytes). *ids is malloc'd (caller frees), *n_ids its length.
 * Returns 0, or -1 with err. */
int tokenizer_encode(struct tokenizer *t, const char *text, size_t len, int flags,
                     int32_t **ids, size_t *n_ids, char *err);

/* Byte range [off, off + len) of a text. */
struct tok_span { size_t off, len; };

/* tokenizer_encode, except that inside the spans plain[0..n_plain) (sorted, disjoint) special
 * tokens are never parsed: a special token matches only where none of its bytes lies in a
 * span. Everything else, the pre-tokenizer and BPE included, runs over the whole text as
 * tokenizer_encode does (the chat encoder, chat.h, marks request data so). */
int tokenizer_encode_spans(struct tokenizer *t, const char *text, size_t len, int flags,
                           const struct tok_span *plain, size_t n_plain, int32_t **ids,
                           size_t *n_ids, char *err);

/* Decodes ids to bytes, invalid UTF-8 replaced by U+FFFD. *text is malloc'd and
 * NUL-terminated. Returns 0, or -1 with err (an id out of range). */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int flags,
                     char **text, size_t *len, char *err);

/* Raw bytes of one token as decode would produce them (no leading-space strip). */
const char *tokenizer_token_bytes(const struct tokenizer *t, int32_t id, size_t *len);

uint32_t tokenizer_n_vocab(const struct tokenizer *t);
int tokenizer_is_eog(const struct tokenizer *t, int32_t id);
int tokenizer_is_special(const struct tokenizer *t, int32_t id);
/* Id of a token written exactly as text, or -1. */
int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len);

/* ---- for the loaders ---- */
struct tokenizer *tokenizer_alloc(void);
/* Adds an added/special token matched in text before the model. */
int tokenizer_add_token(struct tokenizer *t, int32_t id, const char *s, size_t len, int special,
                        int lstrip, int rstrip, int single_word, char *err);
/* Builds the added-token trie, decode table and EOG list once the vocabulary is complete. */
void tokenizer_finish(struct tokenizer *t);

#endif
