/* Hugging Face config.json -> model_hparams. The file is untrusted input: each field is
 * type-checked and must fit its C type; limits shared with GGUF are checked by modelfile.
 * Called by modelfile_open on every rank. */
#ifndef TPD_HFCONFIG_H
#define TPD_HFCONFIG_H

#include <stddef.h>

#include "hparams.h"

/* Largest config.json we read. */
#define HFCONFIG_MAX_BYTES (4u << 20)

/* Fills *hp from the JSON text (len bytes; name is used in messages). Sets rope_neox = 1,
 * qkv_bias for Qwen2 (and for Llama/Mistral with "attention_bias": true), qk_norm for
 * Qwen3, tied_embeddings from "tie_word_embeddings" (modelfile also ties when lm_head is
 * absent). Returns 0, or -1 with err. */
int hfconfig_parse(struct model_hparams *hp, const char *json, size_t len, const char *name,
                   char *err);
/* Reads and parses the file at path. */
int hfconfig_load(struct model_hparams *hp, const char *path, char *err);
/* Reads a whole small text file (at most cap bytes) into a malloc'd buffer, not
 * NUL-terminated; the caller frees *out. Also used for model.safetensors.index.json. */
int hfconfig_read_text(const char *path, size_t cap, char **out, size_t *len, char *err);

#endif
