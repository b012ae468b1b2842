/* The OpenAI-compatible request layer of the HTTP frontend (rank 0, any HTTP thread):
 * parses and bounds-checks request bodies into generation parameters and formats errors
 * in OpenAI's shape. Pure functions of the body and an api_ctx; no sockets, no scheduler. */
#ifndef TPD_API_H
#define TPD_API_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "../util/sbuf.h"
#include "../sched/request.h"
#include "api_err.h"
#include "api_tools.h"

#define API_MAX_N 16 /* choices per request */
#define API_MAX_SCORED \
    65536                       /* echo with logprobs: prompt tokens scored per request, all \
                                 * choices together (each keeps a token_event, ~170 bytes) */
#define API_MAX_STOPS 16        /* stop strings per request */
#define API_MAX_STOP_LEN 1024   /* bytes per stop string */
#define API_MAX_LOGIT_BIAS 1024 /* logit_bias entries */
#define API_MAX_MESSAGES 4096

struct tokenizer;
struct chat_template;
struct grammar;
struct grammar_vocab;

/* What a request is validated against: built once at start by api_ctx_init (the chat
 * template loaded, the limits known), read-only afterwards by every HTTP thread. */
struct api_ctx {
    struct tokenizer *tok;
    const char *model_name;
    int max_ctx;   /* prompt + generated tokens of one sequence */
    int kv_tokens; /* the whole KV cache, which one sequence cannot exceed (0: no limit) */
    int max_queue; /* choices that may wait at once: a larger n can never be served (0: no limit) */
    const struct chat_template *chat; /* NULL: chat requests fail with chat_err */
    const char *chat_err;
    size_t max_token_bytes; /* the longest token's bytes (0: unknown): bounds a text's tokens from
                               below */
    enum tool_format tool_format; /* the call format chat's template teaches (toolcall_detect) */
    struct grammar_vocab *gvocab; /* structured output (api_grammar.h); owned */
    /* owned by api_ctx_init */
    struct chat_template *chat_own;
    char *name_own;
    char chat_err_buf[ERR_LEN];
};

/* Fills c for a served model: loads tok's chat template (a model without a usable one
 * still serves completions; chat requests then get 400 with the reason, also logged). */
void api_ctx_init(struct api_ctx *c, struct tokenizer *tok, const char *model_name, int max_ctx,
                  int kv_tokens, int max_queue);
void api_ctx_free(struct api_ctx *c);
/* Serves chat with the template src instead of the tokenizer's own (model.chat_template);
 * format: the tool-call format, or -1 to detect it from src. 0, or -1 with err. */
int api_ctx_set_chat_template(struct api_ctx *c, const char *src, int format, char *err);

enum api_kind { API_COMPLETION, API_CHAT };

/* A completions prompt after the first (which is api_params.prompt and echo_text). */
struct api_prompt {
    int32_t *ids; /* owned */
    int n;
    char *echo_text; /* owned, when echo */
    size_t echo_len;
};

/* A validated generation request: n choices of each prompt (chat: one prompt; completions:
 * a list of n_prompts, choice i of prompt k at index k * n + i, as OpenAI numbers them). */
struct api_params {
    enum api_kind kind;
    int32_t *prompt; /* owned: the first prompt */
    int n_prompt;
    int n_prompts;                         /* >= 1 */
    struct api_prompt more[API_MAX_N - 1]; /* prompts 2..n_prompts */
    int max_tokens;
    int n;
    int stream, include_usage;
    int echo;        /* completions: prepend the prompt text to the output */
    char *echo_text; /* owned: the prompt as text, when echo */
    size_t echo_len;
    int ignore_eos;
    int speculative; /* 0: the request opts out of speculative decoding ("speculative": false) */
    int logprobs;    /* return the chosen tokens' logprobs */
    int top_logprobs;
    struct sampling_params sp;  /* has_seed is always set: drawn when the client gave none */
    char *stops[API_MAX_STOPS]; /* owned */
    int n_stops;
    struct api_tools tools;   /* chat: the request's functions and tool_choice (tools.n 0: none) */
    struct grammar *grammar;  /* owned reference: response_format / guided_* (NULL: none) */
    char schema_dropped[256]; /* "strict": false: the keywords dropped (API_DROPPED_LEN) */
    int guided_close;         /* 1 (default): the grammar's output ends complete within max_tokens
                         (grammar_matcher_mask_budget); 0: "guided_close": false, cut as is */
};

/* Every body handed to the parsers is NUL-terminated at body[len]. */

/* Body of POST /v1/completions or /v1/chat/completions -> p. 0, or -1 with e (status 400,
 * or 404 for an unknown model). */
int api_parse_generate(const struct api_ctx *c, enum api_kind kind, const char *body, size_t len,
                       struct api_params *p, struct api_error *e);
void api_params_free(struct api_params *p);

/* The prompt text a chat request's body renders to, tools and the forced start of a call
 * included (tests compare it with HF's rendering). *text malloc'd. 0, or -1 with e. */
int api_chat_prompt(const struct api_ctx *c, const char *body, size_t len, char **text,
                    size_t *text_len, struct api_error *e);

/* POST /tokenize: {"prompt": str, "add_special_tokens"?} or {"messages": [...],
 * "add_generation_prompt"?} -> malloc'ed ids. */
int api_parse_tokenize(const struct api_ctx *c, const char *body, size_t len, int32_t **ids, int *n,
                       struct api_error *e);
/* POST /detokenize: {"tokens": [ids]} -> malloc'ed ids. */
int api_parse_detokenize(const struct api_ctx *c, const char *body, size_t len, int32_t **ids,
                         int *n, struct api_error *e);

#endif
