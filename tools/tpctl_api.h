/* tpctl's side of the OpenAI-style API of tpd: request bodies (cJSON), one generation
 * request read as a stream of server-sent events or as one JSON answer, and the server's
 * error messages. Used from one thread per connection (tpctl commands, bench workers). */
#ifndef TPD_TPCTL_API_H
#define TPD_TPCTL_API_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "httpc.h"

#define API_MAX_BODY (64u << 20) /* bound on a whole (non-streamed) response */
#define API_MAX_EVENT (4u << 20) /* bound on one streamed event */

/* Where the daemon is. */
struct api_target {
    const char *socket;
    double timeout_s;
};

/* Sampling and framing of a generation request; unset fields are left out of the body. */
struct gen_opts {
    const char *model;  /* NULL: omitted */
    long max_tokens;    /* 0: omitted */
    double temperature; /* < 0: omitted */
    long long seed;     /* < 0: omitted */
    int stream;         /* "stream": true with stream_options.include_usage */
    int ignore_eos;     /* tpd extension: generate max_tokens regardless of EOS */
};

struct api_result {
    int status; /* HTTP status of the answer (0 if none came) */
    char *text; /* the whole generated text, malloc'ed, NUL-terminated */
    size_t text_len;
    char finish_reason[32]; /* "" if the server gave none */
    long prompt_tokens;     /* from usage; -1 if the server did not say */
    long completion_tokens;
    long cached_tokens; /* usage.prompt_tokens_details.cached_tokens; -1 if not said */
    long n_chunks;      /* streamed chunks that carried a choice */
};

/* Called for each streamed piece of text as it arrives; `finished` is set when the chunk
 * also carried a finish_reason. Returning non-zero stops the request. */
typedef int (*api_piece_fn)(void *ud, const char *text, size_t len, int finished);

/* Opens a connection; when nothing listens there the message names the socket and says that
 * the daemon does not seem to be running. */
int api_connect(struct httpc *c, const struct api_target *t, char *err);

cJSON *api_completion_body(const struct gen_opts *o, const char *prompt);
/* messages: an array of {"role", "content"}; referenced into the body, not copied. */
cJSON *api_chat_body(const struct gen_opts *o, cJSON *messages);

/* Sends body (built above) to target ("/v1/completions" or "/v1/chat/completions") on an open
 * connection and reads the answer: streamed pieces go to on_piece (may be NULL) as they
 * arrive, the whole is in *res (freed with api_result_free). A non-2xx answer is -1 with the
 * server's own error message in err. On success the connection may be reused when
 * c->parser.keep_alive. */
int api_generate(struct httpc *c, const char *target, const cJSON *body, api_piece_fn on_piece,
                 void *ud, struct api_result *res, char *err);
void api_result_free(struct api_result *res);

/* GET or POST on a fresh connection, whole body returned (*out malloc'ed). */
int api_fetch(const struct api_target *t, const char *method, const char *target,
              const char *json_body, int *status, char **out, size_t *len, char *err);

/* The message of an OpenAI-style error body ({"error": {"message": ...}}), else a cleaned
 * prefix of the body; written as "server answered STATUS: MESSAGE". Returns -1. */
int api_error_from_body(int status, const char *body, size_t len, char *err);

/* The first model id listed by GET /v1/models, malloc'ed into *id; *id NULL when the server
 * lists none or has no such endpoint (404). -1 with err on other failures. */
int api_first_model(const struct api_target *t, char **id, char *err);

#endif
