/* A request's prompt as token ids: "prompt" of the completions API (a string, token ids, or a
 * list of either) and "messages" of the chat API rendered through the model's chat template.
 * Each reader returns 0, or -1 with e naming the field. Any thread. */
#ifndef TPD_API_PROMPT_H
#define TPD_API_PROMPT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "../tokenizer/tokenizer.h"
#include "api.h"
#include "api_err.h"

/* arr: an array of token ids of c's vocabulary, as *ids (malloc'ed) and *n. */
int api_prompt_ids(const struct api_ctx *c, const cJSON *arr, const char *name, int32_t **ids,
                   int *n, struct api_error *e);
/* One prompt v: a string (tokenized with special-token parsing, add_special: BOS and the
 * like) or an array of token ids; text (may be NULL): its text, for echo. */
int api_prompt_one(const struct api_ctx *c, const cJSON *v, int add_special, int32_t **ids, int *n,
                   char **text, size_t *text_len, struct api_error *e);
/* o's "prompt", one or a list: the first into p->prompt (and text), the others into p->more;
 * p->n choices of each must fit in API_MAX_N. */
int api_prompt_read(const struct api_ctx *c, const cJSON *o, int add_special, struct api_params *p,
                    char **text, size_t *text_len, struct api_error *e);
/* o's "messages" rendered by c's chat template (add_gen: with the generation prompt; tools:
 * the request's tools, a forced call's start appended) as text, with the byte spans that
 * came from the request's data (chat.h). */
int api_chat_text(const struct api_ctx *c, const cJSON *o, int add_gen,
                  const struct api_tools *tools, char **text, size_t *len, struct tok_span **data,
                  size_t *n_data, struct api_error *e);
/* api_chat_text tokenized: only the template's own markers become special tokens unless
 * o's "allow_special_tokens_in_content" is true. */
int api_chat_render(const struct api_ctx *c, const cJSON *o, int add_gen,
                    const struct api_tools *tools, int32_t **ids, int *n, struct api_error *e);

#endif
