#include "tpctl_api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "httpc_sse.h"
#include "util/err.h"
#include "util/fatal.h"
#include "util/sbuf.h"

/* After a failed connection (e is its errno, 0 when the connection was not the problem):
 * says what most likely went wrong. Returns -1. */
static int connect_failed(const struct api_target *t, int e, char *err) {
    const char *hint = "is the tpd daemon running? start it with `tpd serve`, or point --socket or "
                       "TPD_SOCKET at its socket";
    if (e == ENOENT)
        return err_set(err, "cannot connect to %s: no such socket (%s)", t->socket, hint);
    if (e == ECONNREFUSED)
        return err_set(err, "cannot connect to %s: connection refused, nothing listens there (%s)",
                       t->socket, hint);
    if (e == ENOTDIR)
        return err_set(err, "cannot connect to %s: a parent is not a directory (%s)", t->socket,
                       hint);
    return -1; /* httpc's own message names the socket and the reason */
}

int api_connect(struct httpc *c, const struct api_target *t, char *err) {
    int e = 0;
    if (httpc_open(c, t->socket, t->timeout_s, &e, err) == 0) return 0;
    return connect_failed(t, e, err);
}

static void put_common(cJSON *b, const struct gen_opts *o) {
    if (o->model) cJSON_AddStringToObject(b, "model", o->model);
    if (o->max_tokens > 0) cJSON_AddNumberToObject(b, "max_tokens", (double)o->max_tokens);
    if (o->temperature >= 0) cJSON_AddNumberToObject(b, "temperature", o->temperature);
    if (o->seed >= 0) cJSON_AddNumberToObject(b, "seed", (double)o->seed);
    if (o->ignore_eos) cJSON_AddBoolToObject(b, "ignore_eos", 1);
    if (o->stream) {
        cJSON_AddBoolToObject(b, "stream", 1);
        cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
        cJSON_AddBoolToObject(so, "include_usage", 1);
    }
}

cJSON *api_completion_body(const struct gen_opts *o, const char *prompt) {
    cJSON *b = cJSON_CreateObject();
    put_common(b, o);
    cJSON_AddStringToObject(b, "prompt", prompt);
    return b;
}

cJSON *api_chat_body(const struct gen_opts *o, cJSON *messages) {
    cJSON *b = cJSON_CreateObject();
    put_common(b, o);
    cJSON_AddItemReferenceToObject(b, "messages", messages);
    return b;
}

static const char *json_string(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Replaces control characters so that a hostile body cannot drive the terminal. */
static void clean_copy(char *dst, size_t cap, const char *src, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[k++] = (ch < 0x20 || ch == 0x7f) ? ' ' : (char)ch;
    }
    while (k && dst[k - 1] == ' ') k--;
    dst[k] = 0;
}

int api_error_from_body(int status, const char *body, size_t len, char *err) {
    char msg[300] = "";
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (j) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        const char *m = cJSON_IsString(e) ? e->valuestring : json_string(e, "message");
        if (!m) m = json_string(j, "message");
        if (!m) m = json_string(j, "detail");
        if (m) clean_copy(msg, sizeof msg, m, strlen(m));
        cJSON_Delete(j);
    }
    if (!msg[0]) clean_copy(msg, sizeof msg, body, len > 200 ? 200 : len);
    return err_set(err, "server answered %d: %s", status, msg[0] ? msg : "(empty body)");
}

struct gen_ctx {
    api_piece_fn on_piece;
    void *ud;
    struct api_result *res;
    struct sbuf text;
    struct sse_parser sse;
    int done;   /* data: [DONE] seen */
    int failed; /* err below holds the reason */
    char err[ERR_LEN];
};

static void take_usage(struct api_result *res, const cJSON *j) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    if (!cJSON_IsObject(u)) return;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    if (cJSON_IsNumber(p) && p->valuedouble >= 0) res->prompt_tokens = (long)p->valuedouble;
    if (cJSON_IsNumber(c) && c->valuedouble >= 0) res->completion_tokens = (long)c->valuedouble;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details");
    const cJSON *k = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "cached_tokens")
                                       : NULL;
    if (cJSON_IsNumber(k) && k->valuedouble >= 0) res->cached_tokens = (long)k->valuedouble;
}

/* One answer object, streamed chunk or whole: usage, error, and the first choice's text
 * (completions: text; chat: delta.content when streamed, message.content when not). */
static int take_answer(struct gen_ctx *g, const cJSON *j) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e && !cJSON_IsNull(e)) {
        char *s = cJSON_PrintUnformatted(j);
        api_error_from_body(g->res->status, s ? s : "", s ? strlen(s) : 0, g->err);
        free(s);
        g->failed = 1;
        return -1;
    }
    take_usage(g->res, j);
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *ch = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    if (!cJSON_IsObject(ch)) return 0; /* e.g. the usage-only chunk at the end */
    const char *text = json_string(ch, "text");
    if (!text) text = json_string(cJSON_GetObjectItemCaseSensitive(ch, "delta"), "content");
    if (!text) text = json_string(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content");
    const char *fr = json_string(ch, "finish_reason");
    if (fr) snprintf(g->res->finish_reason, sizeof g->res->finish_reason, "%s", fr);
    g->res->n_chunks++;
    size_t n = text ? strlen(text) : 0;
    if (n) sbuf_add(&g->text, text, n);
    if (g->on_piece && g->on_piece(g->ud, text ? text : "", n, fr != NULL)) {
        snprintf(g->err, sizeof g->err, "stopped by the caller");
        g->failed = 1;
        return -1;
    }
    return 0;
}

static int on_event(void *ud, const char *event, const char *data, size_t len) {
    struct gen_ctx *g = ud;
    (void)event;
    if (g->done) return 0; /* nothing after [DONE] matters */
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        g->done = 1;
        return 0;
    }
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        err_set(g->err, "malformed JSON in streamed event %zu", g->sse.n_events);
        g->failed = 1;
        return -1;
    }
    int rc = take_answer(g, j);
    cJSON_Delete(j);
    return rc;
}

static int on_stream_body(void *ud, const char *data, size_t n) {
    struct gen_ctx *g = ud;
    char err[ERR_LEN];
    if (sse_feed(&g->sse, data, n, on_event, g, err)) {
        if (!g->failed) snprintf(g->err, sizeof g->err, "%s", err);
        g->failed = 1;
        return -1;
    }
    return 0;
}

static int starts_with_ci(const char *s, const char *prefix) {
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

int api_generate(struct httpc *c, const char *target, const cJSON *body, api_piece_fn on_piece,
                 void *ud, struct api_result *res, char *err) {
    memset(res, 0, sizeof *res);
    res->prompt_tokens = res->completion_tokens = res->cached_tokens = -1;
    struct gen_ctx g = {.on_piece = on_piece, .ud = ud, .res = res};
    sse_init(&g.sse, API_MAX_EVENT);
    int rc = -1;
    char *json = cJSON_PrintUnformatted(body);
    if (!json) FATAL("out of memory printing a request body");
    if (httpc_send(c, "POST", target, "application/json", json, strlen(json), err)) goto out;
    if (httpc_read_head(c, err)) goto out;
    res->status = c->parser.status;
    if (res->status < 200 || res->status > 299) {
        char *b = NULL;
        size_t n = 0;
        if (httpc_read_body_all(c, 1u << 20, &b, &n, err)) goto out;
        api_error_from_body(res->status, b, n, err);
        free(b);
        goto out;
    }
    if (starts_with_ci(c->parser.content_type, "text/event-stream")) {
        if (httpc_read_body(c, on_stream_body, &g, err)) {
            if (g.failed) snprintf(err, ERR_LEN, "%s", g.err);
            goto out;
        }
        char ferr[ERR_LEN];
        if (!g.done && sse_finish(&g.sse, ferr)) {
            err_set(err, "%s", ferr);
            goto out;
        }
        /* A stream that just stops, with neither [DONE] nor a finish_reason, was cut off. */
        if (!g.done && !res->finish_reason[0]) {
            err_set(err, "the event stream ended before the answer was complete");
            goto out;
        }
    } else {
        /* not streamed (asked so, or the server chose to): one JSON answer */
        char *b = NULL;
        size_t n = 0;
        if (httpc_read_body_all(c, API_MAX_BODY, &b, &n, err)) goto out;
        cJSON *j = cJSON_ParseWithLength(b, n);
        free(b);
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            err_set(err, "the server's answer is not a JSON object");
            goto out;
        }
        int r = take_answer(&g, j);
        cJSON_Delete(j);
        if (r) {
            snprintf(err, ERR_LEN, "%s", g.err);
            goto out;
        }
        if (res->n_chunks == 0) {
            err_set(err, "the server's answer has no choices");
            goto out;
        }
    }
    rc = 0;
out:
    free(json);
    sse_free(&g.sse);
    if (!g.text.p) sbuf_add(&g.text, "", 0);
    res->text = g.text.p;
    res->text_len = g.text.len;
    return rc;
}

void api_result_free(struct api_result *res) {
    free(res->text);
    res->text = NULL;
}

int api_fetch(const struct api_target *t, const char *method, const char *target,
              const char *json_body, int *status, char **out, size_t *len, char *err) {
    int e = 0;
    if (httpc_fetch(t->socket, t->timeout_s, method, target, "application/json", json_body,
                    json_body ? strlen(json_body) : 0, API_MAX_BODY, status, out, len, &e,
                    err) == 0)
        return 0;
    return connect_failed(t, e, err);
}

int api_first_model(const struct api_target *t, char **id, char *err) {
    *id = NULL;
    int status = 0;
    char *b = NULL;
    size_t n = 0;
    if (api_fetch(t, "GET", "/v1/models", NULL, &status, &b, &n, err)) return -1;
    int rc = 0;
    if (status == 404) {
        rc = 0;
    } else if (status != 200) {
        rc = api_error_from_body(status, b, n, err);
    } else {
        cJSON *j = cJSON_ParseWithLength(b, n);
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "data"), 0);
        const char *s = json_string(m, "id");
        if (!j) rc = err_set(err, "GET /v1/models: the answer is not JSON");
        else if (s) *id = xstrdup(s);
        cJSON_Delete(j);
    }
    free(b);
    return rc;
}
