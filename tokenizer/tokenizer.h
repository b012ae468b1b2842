/* Tokenizer: text <-> token ids, matching HF tokenizers (when loaded from tokenizer.json)
 * and llama.cpp (when loaded from GGUF metadata) token for token. Byte-level BPE (GPT-2,
 * Llama 3, Qwen2, SmolLM2) and SentencePiece-style BPE (Llama 2, Gemma). Loaded once,
 * then shared read-only: encode and decode may run on any thread concurrently. */
#ifndef TPD_TOKENIZER_H
#define TPD_TOKENIZER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tokbuild.h"

struct gguf_file;

/* encode flags */
#define TOK_ADD_SPECIAL 1 /* add BOS/EOS the way the reference's encode(text) does */
#define TOK_PARSE_SPECIAL \
    2 /* special tokens written in the text become special ids; \
                               off (default), they are tokenized as plain text */
/* decode flags */
#define TOK_SKIP_SPECIAL 1 /* leave control tokens (BOS, <|im_end|>) out of the text */

int tokenizer_load(struct tokenizer **out, const char *path, char *err);
int tokenizer_load_json(struct tokenizer **out, const char *json, size_t len,
                        const char *config_json, size_t config_len, char *err);
int tokenizer_load_gguf(struct tokenizer **out, const struct gguf_file *g, char *err);

/* Encodes text[0..len) (any bytes). *ids is malloc'd (caller frees), *n_ids its length.
 * Returns 0, or -1 with err. */
int tokenizer_encode(struct tokenizer *t, const char *text, size_t len, int flags, int32_t **ids,
                     size_t *n_ids, char *err);

/* Byte range [off, off + len) of a text. */
struct tok_span {
    size_t off, len;
};

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
/* The model's BOS, EOS and padding tokens (tokenizer_config.json / GGUF metadata): an id,
 * or -1 when it has none. */
enum tok_role { TOK_ROLE_BOS, TOK_ROLE_EOS, TOK_ROLE_PAD };
int32_t tokenizer_role_id(const struct tokenizer *t, enum tok_role role);
/* Id of a token written exactly as text, or -1. */
int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len);

#endif
