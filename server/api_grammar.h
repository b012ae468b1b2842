/* Structured output on the API (rank 0, any HTTP thread): the request fields that constrain
 * decoding (response_format json_object / json_schema, and vLLM's extensions guided_json,
 * guided_regex, guided_grammar, guided_choice, structured_outputs) compiled into a grammar
 * (grammar/grammar.h; any other structured-output field is refused), and the
 * vocabulary view the grammars need, built once from the tokenizer. */
#ifndef TPD_API_GRAMMAR_H
#define TPD_API_GRAMMAR_H

#include <cjson/cJSON.h>

#include "api_err.h"

struct grammar;
struct grammar_vocab;
struct tokenizer;

/* The tokenizer's vocabulary as grammars see it: every token's bytes, special tokens left
 * out, the end-of-generation tokens allowed where a grammar may end. */
struct grammar_vocab *api_grammar_vocab(const struct tokenizer *t);

#define API_DROPPED_LEN 256
/* Reads the body's constraint fields into *out (NULL when there are none), compiled for
 * gv (NULL: the model has no vocabulary view, and a constraint is a 400). 0, or -1 with a
 * 400 naming the field and the problem (an unsupported keyword, a parse error...). With
 * response_format json_schema "strict": false, the keywords tpd refuses are dropped instead
 * (best effort) and named in dropped (API_DROPPED_LEN bytes, "" when none), which the
 * reply's X-Tpd-Schema-Dropped header carries. */
int api_read_grammar(struct grammar_vocab *gv, const cJSON *o, struct grammar **out, char *dropped,
                     struct api_error *e);

#endif
