/* Loader for HF tokenizer.json (+ tokenizer_config.json): the BPE model, normalizer,
 * pre-tokenizer, post-processor, decoder and added tokens, with HF's semantics. Anything
 * it cannot reproduce exactly is refused at load time with a clear error. */
#ifndef TPD_TOK_TOKJSON_H
#define TPD_TOK_TOKJSON_H

#include <stddef.h>

struct tokenizer;

/* Fills t (from tokenizer_alloc) from the JSON texts; config may be NULL. */
int tokjson_load(struct tokenizer *t, const char *json, size_t len, const char *config,
                 size_t config_len, char *err);

#endif
