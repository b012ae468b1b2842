/* Loader for a GGUF file's tokenizer.ggml.* metadata, with llama.cpp's semantics: the
 * pre-tokenizer regexes llama.cpp uses for each tokenizer.ggml.pre name, its defaults for
 * BOS/EOS and the SentencePiece space prefix, and its special-token splitting. */
#ifndef TPD_TOK_TOKGGUF_H
#define TPD_TOK_TOKGGUF_H

struct tokenizer;
struct gguf_file;

int tokgguf_load(struct tokenizer *t, const struct gguf_file *g, char *err);

#endif
