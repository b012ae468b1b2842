#include "api_prompt.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer/tokenizer.h"
#include "../tokenizer/chat.h"
#include "../util/fatal.h"
#include "../util/utf8.h"
#include "api_read.h"

int api_prompt_ids(const struct api_ctx *c, const cJSON *arr, const char *name, int32_t **ids,
                   int *n, struct api_error *e) {
    uint32_t nv = tokenizer_n_vocab(c->tok);
    int cnt = cJSON_GetArraySize(arr);
    int32_t *v = xmalloc(sizeof *v * (size_t)(cnt ? cnt : 1));
    int i = 0;
    for (const cJSON *x = arr->child; x; x = x->next, i++) {
        if (!api_is_integral(x) || x->valuedouble < 0 || x->valuedouble >= (double)nv) {
            free(v);
            if (!cJSON_IsNumber(x))
                return api_err(e, 400, name, "%s[%d]: must be a token id (an integer)", name, i);
            return api_err(e, 400, name, "%s[%d]: token id %g is outside the vocabulary [0, %u)",
                           name, i, x->valuedouble, nv);
        }
        v[i] = (int32_t)x->valuedouble;
    }
    *ids = v;
    *n = cnt;
    return 0;
}

static int encode(const struct api_ctx *c, const char *s, size_t len, int flags, const char *name,
                  int32_t **ids, int *n, struct api_error *e) {
    char err[ERR_LEN];
    size_t nid;
    /* A text longer than the context length x the longest token is refused before it is
     * tokenized: the tokenizer's working memory on one long word (a run of punctuation
     * is one pre-token) is ~50 bytes per byte. Every token covers at most max_token_bytes,
     * so with a byte-level or byte-fallback vocabulary such a text could never fit. */
    size_t most = c->max_token_bytes; /* 0: not known (a context not from api_ctx_init) */
    if (most && c->max_ctx > 0 && len > (size_t)c->max_ctx * most)
        return api_err(e, 400, name,
                       "%s: the text has %zu bytes; at most %zu are accepted (this model's maximum "
                       "context length "
                       "%d tokens x %zu bytes, its longest token)",
                       name, len, (size_t)c->max_ctx * most, c->max_ctx, most);
    if (tokenizer_encode(c->tok, s, len, flags, ids, &nid, err))
        return api_err(e, 400, name, "%s: cannot be tokenized: %s", name, err);
    if (nid > INT32_MAX) {
        free(*ids);
        return api_err(e, 400, name, "%s: too long", name);
    }
    *n = (int)nid;
    return 0;
}

/* One prompt: a string, or an array of token ids. */
int api_prompt_one(const struct api_ctx *c, const cJSON *v, int add_special, int32_t **ids, int *n,
                   char **text, size_t *text_len, struct api_error *e) {
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring);
        if (!len) return api_err(e, 400, "prompt", "prompt: must not be empty");
        int flags = TOK_PARSE_SPECIAL | (add_special ? TOK_ADD_SPECIAL : 0);
        if (encode(c, v->valuestring, len, flags, "prompt", ids, n, e)) return -1;
        if (text) {
            *text = xmalloc(len + 1);
            memcpy(*text, v->valuestring, len + 1);
            *text_len = len;
        }
    } else if (cJSON_IsArray(v)) {
        if (!cJSON_GetArraySize(v)) return api_err(e, 400, "prompt", "prompt: must not be empty");
        if (api_prompt_ids(c, v, "prompt", ids, n, e)) return -1;
        if (text) {
            char err[ERR_LEN];
            if (tokenizer_decode(c->tok, *ids, (size_t)*n, 0, text, text_len, err)) {
                free(*ids);
                return api_err(e, 400, "prompt", "prompt: %s", err);
            }
        }
    } else {
        return api_err(
            e, 400, "prompt",
            "prompt: must be a string, an array of token ids, or an array of strings or of "
            "token-id arrays");
    }
    if (*n == 0) { /* a non-empty string that tokenizes to nothing (all characters dropped) */
        free(*ids);
        if (text) free(*text);
        return api_err(e, 400, "prompt", "prompt: tokenizes to zero tokens");
    }
    return 0;
}

/* "prompt": one prompt, or a list of them (strings or token-id arrays): the first into
 * p->prompt (and echo text), the others into p->more; n_choices choices of each must fit
 * in API_MAX_N. */
int api_prompt_read(const struct api_ctx *c, const cJSON *o, int add_special, struct api_params *p,
                    char **text, size_t *text_len, struct api_error *e) {
    cJSON *v = api_field(o, "prompt");
    if (!v) return api_err(e, 400, "prompt", "prompt: required");
    p->n_prompts = 1;
    if (!(cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 &&
          (cJSON_IsString(v->child) || cJSON_IsArray(v->child))))
        return api_prompt_one(c, v, add_special, &p->prompt, &p->n_prompt, text, text_len, e);
    int k = cJSON_GetArraySize(v);
    if (k * p->n > API_MAX_N)
        return api_err(e, 400, "prompt",
                       "prompt: %d prompts of n = %d choices each are more than the %d "
                       "choices a request may have",
                       k, p->n, API_MAX_N);
    if (c->max_queue > 0 && k * p->n > c->max_queue)
        return api_err(e, 400, "prompt",
                       "prompt: %d choices can never wait in a queue of %d (scheduler.max_queue)",
                       k * p->n, c->max_queue);
    if (api_prompt_one(c, v->child, add_special, &p->prompt, &p->n_prompt, text, text_len, e))
        return -1;
    int i = 0;
    for (const cJSON *x = v->child->next; x; x = x->next, i++) {
        struct api_prompt *m = &p->more[i];
        if (api_prompt_one(c, x, add_special, &m->ids, &m->n, text ? &m->echo_text : NULL,
                           &m->echo_len, e))
            return -1;
        p->n_prompts++;
    }
    return 0;
}

static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};

/* "messages" -> the JSON array the chat template sees: each message as the client sent it
 * (extra keys such as "name" pass through), with content as one string (text parts joined
 * with "\n", as vLLM does for string-content templates). */
static int read_messages(const cJSON *o, cJSON **out, struct api_error *e) {
    cJSON *v = api_field(o, "messages");
    if (!v) return api_err(e, 400, "messages", "messages: required");
    if (!cJSON_IsArray(v)) return api_err(e, 400, "messages", "messages: must be an array");
    int n = cJSON_GetArraySize(v);
    if (n == 0) return api_err(e, 400, "messages", "messages: must not be empty");
    if (n > API_MAX_MESSAGES)
        return api_err(e, 400, "messages", "messages: at most %d messages", API_MAX_MESSAGES);
    cJSON *arr = cJSON_CreateArray();
    char name[96];
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        if (!cJSON_IsObject(x)) {
            snprintf(name, sizeof name, "messages[%d]", i);
            cJSON_Delete(arr);
            return api_err(e, 400, name, "%s: must be an object", name);
        }
        snprintf(name, sizeof name, "messages[%d].role", i);
        cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
        const char *known = NULL;
        for (unsigned k = 0; cJSON_IsString(role) && k < sizeof roles / sizeof *roles; k++)
            if (!strcmp(role->valuestring, roles[k])) known = roles[k];
        if (!known) {
            cJSON_Delete(arr);
            if (!cJSON_IsString(role)) return api_err(e, 400, name, "%s: required, a string", name);
            return api_err(e, 400, name,
                           "%s: must be one of system, user, assistant, tool, developer", name);
        }
        snprintf(name, sizeof name, "messages[%d].content", i);
        cJSON *content = cJSON_GetObjectItemCaseSensitive(x, "content");
        cJSON *text = NULL;
        if (cJSON_IsString(content)) {
            text = cJSON_CreateString(content->valuestring);
        } else if (cJSON_IsArray(content)) {
            struct sbuf b = {0};
            sbuf_add(&b, "", 0);
            int j = 0;
            for (const cJSON *part = content->child; part; part = part->next, j++) {
                cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsObject(part) || !cJSON_IsString(type) ||
                    strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
                    snprintf(name, sizeof name, "messages[%d].content[%d]", i, j);
                    sbuf_free(&b);
                    cJSON_Delete(arr);
                    return api_err(
                        e, 400, name,
                        "%s: only {\"type\": \"text\", \"text\": string} parts are supported",
                        name);
                }
                if (j) sbuf_add(&b, "\n", 1);
                sbuf_adds(&b, t->valuestring);
            }
            text = cJSON_CreateString(b.p);
            sbuf_free(&b);
        } else if ((content && !cJSON_IsNull(content)) || strcmp(known, "assistant")) {
            /* only an assistant turn (one that made tool calls) may come without content */
            cJSON_Delete(arr);
            return api_err(e, 400, name, "%s: must be a string or an array of text parts", name);
        } else {
            text = cJSON_CreateNull();
        }
        cJSON *m = cJSON_Duplicate(x, 1);
        if (!m || !text) FATAL("out of memory for messages");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
        cJSON_AddItemToObject(m, "content", text);
        cJSON_AddItemToArray(arr, m);
        if (api_tools_message(m, i, known, e)) {
            cJSON_Delete(arr);
            return -1;
        }
    }
    *out = arr;
    return 0;
}

/* The chat prompt of body o as text, with the byte spans that came from the request's data
 * (chat.h). tools: the request's tools (their JSON goes to the template's `tools`; a forced
 * call's start follows the generation prompt). */
int api_chat_text(const struct api_ctx *c, const cJSON *o, int add_gen,
                  const struct api_tools *tools, char **text, size_t *len, struct tok_span **data,
                  size_t *n_data, struct api_error *e) {
    cJSON *msgs = NULL;
    if (read_messages(o, &msgs, e)) return -1;
    if (!c->chat) {
        cJSON_Delete(msgs);
        return api_err(e, 400, "messages",
                       "messages: cannot render a chat prompt: %s; use /v1/completions",
                       c->chat_err ? c->chat_err : "the model has no chat template");
    }
    char *js = cJSON_PrintUnformatted(msgs);
    cJSON_Delete(msgs);
    if (!js) FATAL("out of memory for messages");
    char err[ERR_LEN];
    int rc = chat_template_render_spans(c->chat, js, add_gen, tools->tools_json, text, len, data,
                                        n_data, err);
    free(js);
    /* a template may refuse a conversation (raise_exception: roles must alternate, ...) */
    if (rc) return api_err(e, 400, "messages", "messages: the chat template refused them: %s", err);
    if (tools->prefix && add_gen) {
        /* template text, not data: its markers are the model's own tokens */
        size_t pl = strlen(tools->prefix);
        *text = xrealloc(*text, *len + pl + 1);
        memcpy(*text + *len, tools->prefix, pl + 1);
        *len += pl;
    }
    return 0;
}

int api_chat_render(const struct api_ctx *c, const cJSON *o, int add_gen,
                    const struct api_tools *tools, int32_t **ids, int *n, struct api_error *e) {
    struct tok_span *data = NULL;
    size_t n_data = 0;
    /* Only the template's own markers (BOS, turn markers) become special tokens: special-
     * token text inside the messages is plain text unless a trusted caller allows it, or
     * a message could forge a turn (chat.h). */
    int allow = 0;
    if (api_read_bool(o, "allow_special_tokens_in_content", &allow, e) < 0) return -1;
    char err[ERR_LEN], *text;
    size_t len;
    if (api_chat_text(c, o, add_gen, tools, &text, &len, &data, &n_data, e)) return -1;
    size_t nid;
    int rc = tokenizer_encode_spans(c->tok, text, len, TOK_PARSE_SPECIAL, data, allow ? 0 : n_data,
                                    ids, &nid, err);
    free(text);
    free(data);
    if (rc) return api_err(e, 400, "messages", "messages: cannot be tokenized: %s", err);
    if (nid > INT32_MAX) {
        free(*ids);
        return api_err(e, 400, "messages", "messages: too long");
    }
    *n = (int)nid;
    return 0;
}
