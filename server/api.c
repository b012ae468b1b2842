#include "api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../tokenizer/tokenizer.h"
#include "../sched/scheduler.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "../util/parse.h"
#include "../util/utf8.h"
#include "../tokenizer/chat.h"
#include "toolcall.h"
#include "../grammar/grammar.h"
#include "api_fields.h"
#include "api_grammar.h"
#include "api_prompt.h"
#include "api_read.h"

/* ---- small pieces ---- */

void api_ctx_init(struct api_ctx *c, struct tokenizer *tok, const char *model_name, int max_ctx,
                  int kv_tokens, int max_queue) {
    memset(c, 0, sizeof *c);
    c->tok = tok;
    c->name_own = xstrdup(model_name && model_name[0] ? model_name : "tpd");
    c->model_name = c->name_own;
    c->gvocab = tok ? api_grammar_vocab(tok) : NULL;
    c->max_ctx = max_ctx;
    c->kv_tokens = kv_tokens;
    c->max_queue = max_queue;
    c->chat_err = c->chat_err_buf;
    for (uint32_t i = 0, nv = tok ? tokenizer_n_vocab(tok) : 0; i < nv; i++) {
        size_t l = 0;
        if (tokenizer_token_bytes(tok, (int32_t)i, &l) && l > c->max_token_bytes)
            c->max_token_bytes = l;
    }
    if (!tok) {
        snprintf(c->chat_err_buf, sizeof c->chat_err_buf, "no tokenizer");
        return;
    }
    c->chat_own = xcalloc(1, sizeof *c->chat_own);
    if (chat_template_load(c->chat_own, tok, NULL, c->chat_err_buf)) {
        LOG(LOG_WARN, "chat: %s", c->chat_err_buf);
        free(c->chat_own);
        c->chat_own = NULL;
    }
    c->chat = c->chat_own;
    if (c->chat) c->tool_format = toolcall_detect(tok->chat_template);
}

int api_ctx_set_chat_template(struct api_ctx *c, const char *src, int format, char *err) {
    struct chat_template *ct = xcalloc(1, sizeof *ct);
    if (chat_template_load(ct, c->tok, src, err)) {
        free(ct);
        return -1;
    }
    if (c->chat_own) {
        chat_template_free(c->chat_own);
        free(c->chat_own);
    }
    c->chat = c->chat_own = ct;
    c->tool_format = format >= 0 ? (enum tool_format)format : toolcall_detect(src);
    return 0;
}

void api_ctx_free(struct api_ctx *c) {
    if (c->chat_own) {
        chat_template_free(c->chat_own);
        free(c->chat_own);
    }
    free(c->name_own);
    grammar_vocab_free(c->gvocab);
    memset(c, 0, sizeof *c);
}

/* ---- the generation request ---- */

static uint64_t random_seed(void) {
    uint64_t s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s) return s;
    static atomic_ulong ctr;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
        (atomic_fetch_add(&ctr, 1) * 0x9E3779B97F4A7C15ull);
    return s;
}

static int read_stops(const cJSON *o, struct api_params *p, struct api_error *e) {
    cJSON *v = api_field(o, "stop");
    if (!v) return 0;
    const cJSON *one = cJSON_IsString(v) ? v : NULL;
    if (!one && !cJSON_IsArray(v))
        return api_err(e, 400, "stop", "stop: must be a string or an array of strings");
    int n = one ? 1 : cJSON_GetArraySize(v);
    if (n > API_MAX_STOPS)
        return api_err(e, 400, "stop", "stop: at most %d strings", API_MAX_STOPS);
    const cJSON *x = one ? one : v->child;
    for (int i = 0; i < n; i++, x = x->next) {
        if (!cJSON_IsString(x)) return api_err(e, 400, "stop", "stop[%d]: must be a string", i);
        size_t len = strlen(x->valuestring);
        if (!len) return api_err(e, 400, "stop", "stop[%d]: must not be empty", i);
        if (len > API_MAX_STOP_LEN)
            return api_err(e, 400, "stop", "stop[%d]: longer than %d bytes", i, API_MAX_STOP_LEN);
        p->stops[p->n_stops] = xmalloc(len + 1);
        memcpy(p->stops[p->n_stops++], x->valuestring, len + 1);
    }
    return 0;
}

static int read_logit_bias(const struct api_ctx *c, const cJSON *o, struct sampling_params *sp,
                           struct api_error *e) {
    cJSON *v = api_field(o, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v))
        return api_err(e, 400, "logit_bias", "logit_bias: must be an object of token id -> bias");
    int n = cJSON_GetArraySize(v);
    if (n > API_MAX_LOGIT_BIAS)
        return api_err(e, 400, "logit_bias", "logit_bias: at most %d entries", API_MAX_LOGIT_BIAS);
    if (!n) return 0;
    sp->logit_bias_ids = xmalloc(sizeof(int32_t) * (size_t)n);
    sp->logit_bias = xmalloc(sizeof(float) * (size_t)n);
    uint32_t nv = tokenizer_n_vocab(c->tok);
    for (const cJSON *x = v->child; x; x = x->next) {
        const char *k = x->string;
        char *end;
        long id = (k[0] >= '0' && k[0] <= '9') ? strtol(k, &end, 10) : -1;
        if (id < 0 || *end || id >= (long)nv || strlen(k) > 10)
            return api_err(e, 400, "logit_bias",
                           "logit_bias: key \"%.32s\" is not a token id in [0, %u)", k, nv);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < -100 ||
            x->valuedouble > 100)
            return api_err(e, 400, "logit_bias",
                           "logit_bias[\"%s\"]: must be a number in [-100, 100]", k);
        sp->logit_bias_ids[sp->n_logit_bias] = (int32_t)id;
        sp->logit_bias[sp->n_logit_bias++] = (float)x->valuedouble;
    }
    return 0;
}

static int read_sampling(const struct api_ctx *c, const cJSON *o, struct api_params *p,
                         struct api_error *e) {
    struct sampling_params *sp = &p->sp;
    double x;
    long i;
    int r;
    if ((r = api_read_num(o, "temperature", 0, 2, 0, &x, e)) < 0) return -1;
    if (r) sp->temperature = (float)x;
    if ((r = api_read_num(o, "top_p", 0, 1, 1, &x, e)) < 0) return -1;
    if (r) sp->top_p = (float)x;
    if ((r = api_read_int(o, "top_k", -1, INT32_MAX, &i, e)) < 0) return -1;
    if (r) {
        uint32_t nv = tokenizer_n_vocab(c->tok);
        sp->top_k = i <= 0 ? 0 : i > (long)nv ? (int)nv : (int)i;
    }
    if ((r = api_read_num(o, "min_p", 0, 1, 0, &x, e)) < 0) return -1;
    if (r) sp->min_p = (float)x;
    if ((r = api_read_num(o, "repetition_penalty", 0, 2, 1, &x, e)) < 0) return -1;
    if (r) sp->repetition_penalty = (float)x;
    if ((r = api_read_num(o, "presence_penalty", -2, 2, 0, &x, e)) < 0) return -1;
    if (r) sp->presence_penalty = (float)x;
    if ((r = api_read_num(o, "frequency_penalty", -2, 2, 0, &x, e)) < 0) return -1;
    if (r) sp->frequency_penalty = (float)x;
    cJSON *seed = api_field(o, "seed");
    if (seed) {
        /* any 64-bit integer; negative seeds wrap as two's complement */
        if (!api_is_integral(seed) || seed->valuedouble < -9223372036854775808.0 ||
            seed->valuedouble >= 18446744073709551616.0)
            return api_err(e, 400, "seed", "seed: must be a 64-bit integer");
        double d = seed->valuedouble;
        sp->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    } else {
        sp->seed = random_seed();
    }
    sp->has_seed = 1;
    return read_logit_bias(c, o, sp, e);
}

static int read_logprobs(const cJSON *o, struct api_params *p, struct api_error *e) {
    long i;
    int r;
    if (p->kind == API_COMPLETION) {
        /* legacy completions: "logprobs": k asks for the chosen token and k alternatives */
        if ((r = api_read_int(o, "logprobs", 0, REQ_MAX_TOP_LOGPROBS, &i, e)) < 0) return -1;
        if (r) {
            p->logprobs = 1;
            p->top_logprobs = (int)i;
        }
        return 0;
    }
    int want = 0;
    if (api_read_bool(o, "logprobs", &want, e) < 0) return -1;
    p->logprobs = want;
    if ((r = api_read_int(o, "top_logprobs", 0, REQ_MAX_TOP_LOGPROBS, &i, e)) < 0) return -1;
    if (r && i > 0 && !want)
        return api_err(e, 400, "top_logprobs", "top_logprobs: needs \"logprobs\": true");
    if (r) p->top_logprobs = (int)i;
    return 0;
}

static int check_model(const struct api_ctx *c, const cJSON *o, struct api_error *e) {
    cJSON *m = api_field(o, "model");
    if (!m) return 0; /* optional, as in vLLM */
    if (!cJSON_IsString(m)) return api_err(e, 400, "model", "model: must be a string");
    if (c->model_name && strcmp(m->valuestring, c->model_name)) {
        api_err(e, 404, "model",
                "model: the model `%.200s` does not exist; this server serves `%.200s`",
                m->valuestring, c->model_name);
        e->code = "model_not_found";
        return -1;
    }
    return 0;
}

/* JSON values a request may hold beyond its context length: 4096 messages of a few keys
 * each, logit_bias, stop and the scalars, with room to spare. */
#define API_JSON_VALUES_SLACK 32768

static int json_delim(char ch) {
    return ch == ',' || ch == ']' || ch == '}' || ch == ':' || ch == ' ' || ch == '\t' ||
           ch == '\n' || ch == '\r' || ch == '"' || ch == '[' || ch == '{';
}

/* cJSON spends ~80 bytes of heap on every value (a 2-byte "0," included), so a body of
 * small values would cost ~40x its size once parsed. Before parsing, the values are
 * counted (a scan that trusts nothing: malformed text is refused by the parser after)
 * and a body with more than the context length + API_JSON_VALUES_SLACK is refused,
 * naming the top-level field that holds the most. Any legal request fits: a prompt of
 * token ids longer than the context is refused anyway. Nesting is bounded by cJSON
 * (CJSON_NESTING_LIMIT). */
static int check_json_values(const struct api_ctx *c, const char *s, size_t n,
                             struct api_error *e) {
    long limit = (long)(c->max_ctx > 0 ? c->max_ctx : 0) + API_JSON_VALUES_SLACK;
    long total = 0, in_field = 0, worst = 0;
    int depth = 0;
    const char *key = "", *worst_key = "";
    int key_len = 0, worst_len = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '"') {
            size_t a = ++i;
            while (i < n && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
            size_t b = i < n ? i : n, j = i + 1;
            while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r')) j++;
            if (j < n && s[j] == ':') { /* a key: stored in its value's node */
                if (depth == 1) {
                    if (in_field > worst) worst = in_field, worst_key = key, worst_len = key_len;
                    key = s + a;
                    key_len = b - a > 64 ? 64 : (int)(b - a);
                    in_field = 0;
                }
                continue;
            }
            total++, in_field++;
        } else if (ch == '{' || ch == '[') {
            depth++, total++, in_field++;
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == '-' || (ch >= '0' && ch <= '9') || ch == 't' || ch == 'f' || ch == 'n') {
            total++, in_field++;
            while (i + 1 < n && !json_delim(s[i + 1])) i++;
        }
    }
    if (total <= limit) return 0;
    if (in_field > worst) worst_key = key, worst_len = key_len;
    char name[80];
    snprintf(name, sizeof name, "%.*s", worst_len, worst_key);
    return api_err(e, 400, name,
                   "%s%srequest body holds %ld JSON values; at most %ld are allowed (the context "
                   "length %d + %d)",
                   name, name[0] ? ": too large: the " : "", total, limit, c->max_ctx,
                   API_JSON_VALUES_SLACK);
}

/* Body -> root object; the JSON and UTF-8 checks every endpoint shares. */
static cJSON *parse_body(const struct api_ctx *c, const char *body, size_t len,
                         struct api_error *e) {
    if (!utf8_valid(body, len)) {
        api_err(e, 400, "", "request body is not valid UTF-8");
        return NULL;
    }
    if (memchr(body, 0, len)) {
        api_err(e, 400, "", "request body holds a NUL byte");
        return NULL;
    }
    if (json_has_nul_escape(body, len)) {
        api_err(e, 400, "",
                "request body holds \\u0000: NUL characters in strings are not supported");
        return NULL;
    }
    if (check_json_values(c, body, len, e)) return NULL;
    /* body[len] is the NUL: requiring it makes trailing bytes after the value an error */
    const char *at = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len + 1, &at, 1);
    if (!root) {
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        api_err(e, 400, "", "request body is not valid JSON (near byte %ld)", off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        api_err(e, 400, "", "request body must be a JSON object");
        return NULL;
    }
    return root;
}

int api_parse_generate(const struct api_ctx *c, enum api_kind kind, const char *body, size_t len,
                       struct api_params *p, struct api_error *e) {
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->sp = sampling_defaults();
    cJSON *o = parse_body(c, body, len, e);
    if (!o) return -1;
    long i;
    int r, rc = -1;
    char *echo_text = NULL;
    size_t echo_len = 0;
    if (check_model(c, o, e)) goto out;
    if (api_read_bool(o, "stream", &p->stream, e) < 0) goto out;
    cJSON *so = api_field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            api_err(e, 400, "stream_options", "stream_options: must be an object");
            goto out;
        }
        if (!p->stream) {
            api_err(e, 400, "stream_options",
                    "stream_options: only allowed when \"stream\" is true");
            goto out;
        }
        cJSON *iu = api_field(so, "include_usage");
        if (iu && !cJSON_IsBool(iu)) {
            api_err(e, 400, "stream_options.include_usage",
                    "stream_options.include_usage: must be a boolean");
            goto out;
        }
        p->include_usage = iu && cJSON_IsTrue(iu);
    }
    if (kind == API_COMPLETION && api_read_bool(o, "echo", &p->echo, e) < 0) goto out;
    if (api_read_bool(o, "ignore_eos", &p->ignore_eos, e) < 0) goto out;
    p->speculative = 1;
    if (api_read_bool(o, "speculative", &p->speculative, e) < 0) goto out;
    p->n = 1;
    if ((r = api_read_int(o, "n", 1, API_MAX_N, &i, e)) < 0) goto out;
    if (r) p->n = (int)i;
    if (c->max_queue > 0 && p->n > c->max_queue) {
        api_err(e, 400, "n", "n: %d choices can never wait in a queue of %d (scheduler.max_queue)",
                p->n, c->max_queue);
        goto out;
    }
    if (api_fields_check(o, kind, p->n, e)) goto out;
    if (read_sampling(c, o, p, e) || read_logprobs(o, p, e) || read_stops(o, p, e)) goto out;
    if (api_read_grammar(c->gvocab, o, &p->grammar, p->schema_dropped, e)) goto out;
    p->guided_close = 1; /* the budget-aware closer is on unless the request opts out */
    if (api_read_bool(o, "guided_close", &p->guided_close, e) < 0) goto out;
    /* max_completion_tokens is the newer name; it wins when both are given */
    long max_tokens = -1;
    const char *mt_name = api_field(o, "max_completion_tokens") ? "max_completion_tokens"
                                                                : "max_tokens";
    if ((r = api_read_int(o, mt_name, 1, INT32_MAX, &max_tokens, e)) < 0) goto out;
    if (!r) max_tokens = -1;

    if (kind == API_COMPLETION) {
        int add_special = 1;
        if (api_prompt_read(c, o, add_special, p, p->echo ? &echo_text : NULL, &echo_len, e))
            goto out;
    } else {
        p->n_prompts = 1;
        int add_gen = 1;
        if (api_read_bool(o, "add_generation_prompt", &add_gen, e) < 0) goto out;
        if (api_tools_read(o, c->tool_format, &p->tools, e)) goto out;
        if (p->tools.prefix && !add_gen) {
            api_err(e, 400, "tool_choice",
                    "tool_choice: a required call needs \"add_generation_prompt\": true");
            goto out;
        }
        if (p->tools.prefix && p->grammar) {
            api_err(
                e, 400, "tool_choice",
                "tool_choice: a required call cannot be combined with response_format or guided_*");
            goto out;
        }
        /* only a required/named call sets the grammar: api_tools_grammar clears *out otherwise,
         * which would drop (and leak) a response_format / guided_* grammar read above */
        if (p->tools.prefix && api_tools_grammar(&p->tools, c->gvocab, &p->grammar, e)) goto out;
        if (api_chat_render(c, o, add_gen, &p->tools, &p->prompt, &p->n_prompt, e)) goto out;
    }
    const char *pname = kind == API_COMPLETION ? "prompt" : "messages";
    int longest = p->n_prompt; /* of a list of prompts, the longest is the one that must fit */
    for (int k = 1; k < p->n_prompts; k++)
        if (p->more[k - 1].n > longest) longest = p->more[k - 1].n;
    long scored = 0; /* echo with logprobs keeps an event per prompt token of each choice */
    for (int k = 0; p->echo && p->logprobs && k < p->n_prompts; k++)
        scored += (long)p->n * (k ? p->more[k - 1].n : p->n_prompt);
    if (scored > API_MAX_SCORED) {
        api_err(e, 400, "echo",
                "echo: with logprobs, at most %d prompt tokens are scored per request (all choices "
                "together); this one has %ld",
                API_MAX_SCORED, scored);
        goto out;
    }
    long room = sched_room(c->max_ctx, c->kv_tokens, longest);
    int by_cache = sched_seq_limit(c->max_ctx, c->kv_tokens) < c->max_ctx;
    if (room < 1) {
        if (by_cache)
            api_err(
                e, 400, pname,
                "%s: the KV cache holds %d tokens (cache.kv_tokens), but the prompt has %d tokens",
                pname, c->kv_tokens, longest);
        else
            api_err(e, 400, pname,
                    "%s: this model's maximum context length is %d tokens, but the prompt has %d "
                    "tokens",
                    pname, c->max_ctx, longest);
        goto out;
    }
    if (max_tokens < 0) {
        /* OpenAI's defaults: 16 for completions, the rest of the context for chat */
        max_tokens = kind == API_COMPLETION && room > 16 ? 16 : room;
    } else if (max_tokens > room && by_cache) {
        api_err(e, 400, mt_name,
                "%s: the KV cache holds %d tokens (cache.kv_tokens), which one sequence cannot "
                "exceed; the prompt "
                "has %d tokens and %s is %ld (%ld in all)",
                mt_name, c->kv_tokens, longest, mt_name, max_tokens, max_tokens + longest);
        goto out;
    } else if (max_tokens > room) {
        api_err(
            e, 400, mt_name,
            "%s: this model's maximum context length is %d tokens; the prompt has %d tokens and "
            "%s is %ld (%ld in all)",
            mt_name, c->max_ctx, longest, mt_name, max_tokens, max_tokens + longest);
        goto out;
    }
    p->max_tokens = (int)max_tokens;
    p->sp.logprobs = p->logprobs;
    p->sp.top_logprobs = p->top_logprobs;
    rc = 0;
out:
    cJSON_Delete(o);
    if (rc) {
        free(echo_text);
        api_params_free(p);
        return -1;
    }
    p->echo_text = echo_text;
    p->echo_len = echo_len;
    return 0;
}

void api_params_free(struct api_params *p) {
    free(p->prompt);
    for (int k = 0; k + 1 < p->n_prompts; k++) {
        free(p->more[k].ids);
        free(p->more[k].echo_text);
    }
    free(p->sp.logit_bias_ids);
    free(p->sp.logit_bias);
    free(p->echo_text);
    for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
    api_tools_free(&p->tools);
    grammar_unref(p->grammar);
    memset(p, 0, sizeof *p);
}

int api_parse_tokenize(const struct api_ctx *c, const char *body, size_t len, int32_t **ids, int *n,
                       struct api_error *e) {
    cJSON *o = parse_body(c, body, len, e);
    if (!o) return -1;
    int rc = -1;
    if (check_model(c, o, e)) goto out;
    if (api_field(o, "messages")) {
        int add_gen = 1;
        struct api_tools tools = {0};
        if (api_read_bool(o, "add_generation_prompt", &add_gen, e) < 0) goto out;
        if (api_tools_read(o, c->tool_format, &tools, e) == 0)
            rc = api_chat_render(c, o, add_gen, &tools, ids, n, e);
        api_tools_free(&tools);
    } else if (api_field(o, "prompt")) {
        int add_special = 1;
        if (api_read_bool(o, "add_special_tokens", &add_special, e) < 0) goto out;
        const cJSON *v = api_field(o, "prompt");
        if (cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 &&
            (cJSON_IsString(v->child) || cJSON_IsArray(v->child))) {
            if (cJSON_GetArraySize(v) > 1) {
                api_err(e, 400, "prompt", "prompt: one prompt at a time");
                goto out;
            }
            v = v->child; /* a list of one */
        }
        rc = api_prompt_one(c, v, add_special, ids, n, NULL, NULL, e);
    } else {
        api_err(e, 400, "prompt", "prompt: required (or messages)");
    }
out:
    cJSON_Delete(o);
    return rc;
}

int api_chat_prompt(const struct api_ctx *c, const char *body, size_t len, char **text,
                    size_t *text_len, struct api_error *e) {
    cJSON *o = parse_body(c, body, len, e);
    if (!o) return -1;
    int add_gen = 1, rc = -1;
    struct api_tools tools = {0};
    struct tok_span *data = NULL;
    size_t n_data = 0;
    if (api_read_bool(o, "add_generation_prompt", &add_gen, e) >= 0 &&
        api_tools_read(o, c->tool_format, &tools, e) == 0)
        rc = api_chat_text(c, o, add_gen, &tools, text, text_len, &data, &n_data, e);
    free(data);
    api_tools_free(&tools);
    cJSON_Delete(o);
    return rc;
}

int api_parse_detokenize(const struct api_ctx *c, const char *body, size_t len, int32_t **ids,
                         int *n, struct api_error *e) {
    cJSON *o = parse_body(c, body, len, e);
    if (!o) return -1;
    int rc = -1;
    cJSON *t = api_field(o, "tokens");
    if (check_model(c, o, e)) goto out;
    if (!t) api_err(e, 400, "tokens", "tokens: required");
    else if (!cJSON_IsArray(t)) api_err(e, 400, "tokens", "tokens: must be an array of token ids");
    else rc = api_prompt_ids(c, t, "tokens", ids, n, e);
out:
    cJSON_Delete(o);
    return rc;
}
