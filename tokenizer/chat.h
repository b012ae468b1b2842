/* Chat prompts: renders a model's chat template (tokenizer_config.json / GGUF
 * tokenizer.chat_template) with messages, add_generation_prompt, bos_token and eos_token,
 * the way HF's apply_chat_template does. Load once (a template the engine cannot handle
 * fails here, not at request time); render from any thread. */
#ifndef TPD_TOK_CHAT_H
#define TPD_TOK_CHAT_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct tok_span;
struct jtemplate;

struct chat_template {
    struct jtemplate *tpl;
    char *src;       /* the template's text (GET /tokenizer_info serves it) */
    char *bos, *eos; /* token texts, "" when the model has none */
};

/* src NULL: the tokenizer's own template (error if it has none). */
int chat_template_load(struct chat_template *ct, const struct tokenizer *t, const char *src,
                       char *err);
void chat_template_free(struct chat_template *ct);

/* messages_json: a JSON array of {"role": ..., "content": ...} objects (any extra keys are
 * passed through). extra_json: NULL or a JSON object of more template variables. *out is
 * malloc'd and NUL-terminated. Returns 0, or -1 with err. */
int chat_template_render(const struct chat_template *ct, const char *messages_json,
                         int add_generation_prompt, const char *extra_json, char **out,
                         size_t *out_len, char *err);

/* The same, also returning the byte spans of *out that came from the request's data
 * (message contents, names, tool calls, any role but the usual ones, extra_json): sorted,
 * disjoint; *data is malloc'd (NULL when none). */
int chat_template_render_spans(const struct chat_template *ct, const char *messages_json,
                               int add_generation_prompt, const char *extra_json, char **out,
                               size_t *out_len, struct tok_span **data, size_t *n_data, char *err);

/* Renders and encodes a chat prompt the safe way: special tokens are parsed only where the
 * template itself wrote them; special-token text inside the request's data is tokenized as
 * plain text, so a message cannot forge a turn (<|im_end|><|im_start|>system...). The whole
 * text is still encoded in one pass (tokenizer_encode_spans), so a prompt whose data holds
 * no special-token text gets exactly the ids HF's apply_chat_template(tokenize=True) gives.
 * allow_special_in_content: trusted callers only; parses specials everywhere (HF's way).
 * No BOS/EOS is added beyond what the template writes. text (may be NULL): the rendered
 * prompt, malloc'd. Returns 0, or -1 with err. */
int chat_template_encode(const struct chat_template *ct, struct tokenizer *t,
                         const char *messages_json, int add_generation_prompt,
                         const char *extra_json, int allow_special_in_content, int32_t **ids,
                         size_t *n_ids, char **text, size_t *text_len, char *err);

/* Renders a template source against a JSON object of variables (tests, tools). */
int chat_render_json(const char *src, size_t src_len, const char *context_json, char **out,
                     size_t *out_len, char *err);

#endif
