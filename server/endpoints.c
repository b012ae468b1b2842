/* The endpoints: one handler per route of the OpenAI-compatible API and the operator's
 * endpoints (health, metrics, tokenizer), and the table http.c routes requests by. */
#include "endpoints.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sched/metrics.h"
#include "../sched/scheduler.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "api.h"
#include "api_gen.h"
#include "conns.h"
#include "http_internal.h"

/* MHD asks for more of a stream once the client took what was sent. With nothing to
 * send, the connection is suspended (no thread waits) until the request gets an event,
 * its client leaves, or a keep-alive comment (which clients ignore) is due; then MHD calls
 * again. A client that stops reading is not suspended but waits in MHD, whose timeout
 * (send_timeout_s) drops it. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct stream *s = cls;
    while (s->off == s->out.len) {
        if (s->fail_sent) { /* the failure event went out: nothing follows it */
            gen_cancel(s->gen);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (atomic_load(&s->h->failed) == 1 && !gen_done(s->gen)) {
            struct api_error e;
            http_fail_error(s->h, &e);
            size_t len;
            char *j = api_error_json(&e, &len);
            s->out.len = 0;
            s->off = 0;
            sbuf_adds(&s->out, "data: ");
            sbuf_add(&s->out, j, len);
            sbuf_adds(&s->out, "\n\n");
            free(j);
            s->fail_sent = 1;
            break;
        }
        if (gen_done(s->gen)) return MHD_CONTENT_READER_END_OF_STREAM;
        s->out.len = 0;
        s->off = 0;
        gen_poll(s->gen, &s->out, 0);
        double now = clock_now();
        if (s->out.len) {
            s->last_out = now;
            break;
        }
        if (http_client_gone(s->fd) || atomic_load(&s->h->stopping)) {
            gen_cancel(s->gen);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (now - s->last_out >= s->h->keepalive_s) {
            sbuf_adds(&s->out, ": keep-alive\n\n");
            s->last_out = now;
            break;
        }
        if (conns_suspend(s->h->cs, s->rec, s->mc)) return 0;
    }
    size_t n = s->out.len - s->off;
    if (n > max) n = max;
    memcpy(buf, s->out.p + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    struct stream *s = cls;
    gen_unref(s->gen);
    sbuf_free(&s->out);
    free(s);
}

static void notify_conn(void *rec) { conns_wake(rec); }

static enum MHD_Result h_generate(struct conn *c, struct MHD_Connection *mc, enum api_kind kind) {
    struct http_server *h = c->h;
    struct api_params p;
    struct api_error e;
    if (api_parse_generate(h->api, kind, c->body.p ? c->body.p : "", c->body.len, &p, &e))
        return http_reply_api_error(c, mc, &e);
    snprintf(c->dropped, sizeof c->dropped, "%s", p.schema_dropped);
    struct api_gen *g;
    if (gen_start(&g, h->sched, h->api->tok, h->api->model_name, c->uid, &p, &e)) {
        api_params_free(&p);
        return http_reply_api_error(c, mc, &e);
    }
    /* a generation may wait long for its first token: no idle timeout while it runs
     * (suspended, or watched by conns); on_completed restores it */
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    c->gen = g; /* the request's reference: on_completed cancels on a broken connection */
    atomic_fetch_add(&h->active, 1);
    if (c->rec) gen_set_notify(g, notify_conn, c->rec); /* cleared by on_completed */
    if (gen_streaming(g)) {
        struct stream *s = xcalloc(1, sizeof *s);
        s->h = h;
        s->gen = g;
        s->fd = c->fd;
        s->rec = c->rec;
        s->mc = mc;
        s->last_out = clock_now();
        gen_ref(g);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                   stream_read, s, stream_free);
        if (!r) {
            stream_free(s);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        if (c->dropped[0]) MHD_add_response_header(r, "X-Tpd-Schema-Dropped", c->dropped);
        if (c->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
        enum MHD_Result rc = MHD_queue_response(mc, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        if (rc == MHD_YES) c->status = 200;
        /* from here MHD waits only on the client: one that takes nothing for send_timeout_s
         * is dropped, which cancels its generation and frees its KV blocks */
        MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, h->send_timeout_s);
        return rc;
    }
    return endpoints_gen_wait(c, mc);
}

/* A non-streamed generation: answers once it is done; until then the connection is
 * suspended and MHD calls on_request (hence here) again when it is woken. */
enum MHD_Result endpoints_gen_wait(struct conn *c, struct MHD_Connection *mc) {
    struct http_server *h = c->h;
    struct api_gen *g = c->gen;
    struct sbuf scratch = {0};
    for (;;) {
        int done = gen_poll(g, &scratch, 0);
        scratch.len = 0;
        if (done) break;
        if (atomic_load(&h->failed) == 1) {
            sbuf_free(&scratch);
            gen_cancel(g);
            struct api_error e;
            http_fail_error(h, &e);
            return http_reply_api_error(c, mc, &e);
        }
        if (http_client_gone(c->fd) || atomic_load(&h->stopping)) {
            sbuf_free(&scratch);
            gen_cancel(g);
            return MHD_NO; /* closes the connection */
        }
        if (conns_suspend(h->cs, c->rec, mc)) {
            sbuf_free(&scratch);
            return MHD_YES;
        }
    }
    sbuf_free(&scratch);
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, h->send_timeout_s); /* see above */
    struct sbuf body = {0};
    int status = gen_body(g, &body);
    enum MHD_Result rc = http_reply(c, mc, status, "application/json", body.p, body.len);
    sbuf_free(&body);
    return rc;
}

static enum MHD_Result h_completions(struct conn *c, struct MHD_Connection *mc) {
    return h_generate(c, mc, API_COMPLETION);
}

static enum MHD_Result h_chat(struct conn *c, struct MHD_Connection *mc) {
    return h_generate(c, mc, API_CHAT);
}

/* The one model served, as OpenAI's model object. */
static cJSON *model_object(const struct http_server *h) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", h->api->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)h->created);
    cJSON_AddStringToObject(m, "owned_by", "tpd");
    cJSON_AddNumberToObject(m, "max_model_len", h->api->max_ctx);
    return m;
}

static enum MHD_Result h_models(struct conn *c, struct MHD_Connection *mc) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(c->h));
    return http_reply_json(c, mc, 200, o);
}

/* GET /v1/models/{id} (the SDK's models.retrieve): the model, or 404 as OpenAI words it. */
static enum MHD_Result h_model(struct conn *c, struct MHD_Connection *mc) {
    if (strcmp(c->path_arg, c->h->api->model_name)) {
        struct api_error e;
        api_err(&e, 404, "model", "The model '%.200s' does not exist", c->path_arg);
        e.code = "model_not_found";
        return http_reply_api_error(c, mc, &e);
    }
    return http_reply_json(c, mc, 200, model_object(c->h));
}

static enum MHD_Result h_tokenize(struct conn *c, struct MHD_Connection *mc) {
    struct api_error e;
    int32_t *ids;
    int n;
    if (api_parse_tokenize(c->h->api, c->body.p ? c->body.p : "", c->body.len, &ids, &n, &e))
        return http_reply_api_error(c, mc, &e);
    /* written directly: a cJSON node per token would cost ~80 bytes each (a 700 KB
     * prompt can be 560k tokens) */
    struct sbuf b = {0};
    sbuf_adds(&b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) sbuf_addf(&b, i ? ",%d" : "%d", (int)ids[i]);
    free(ids);
    sbuf_addf(&b, "],\"count\":%d,\"max_model_len\":%d}", n, c->h->api->max_ctx);
    enum MHD_Result rc = http_reply(c, mc, 200, "application/json", b.p, b.len);
    sbuf_free(&b);
    return rc;
}

static enum MHD_Result h_detokenize(struct conn *c, struct MHD_Connection *mc) {
    struct api_error e;
    int32_t *ids;
    int n;
    if (api_parse_detokenize(c->h->api, c->body.p ? c->body.p : "", c->body.len, &ids, &n, &e))
        return http_reply_api_error(c, mc, &e);
    char err[ERR_LEN], *text;
    size_t len;
    int rc = tokenizer_decode(c->h->api->tok, ids, (size_t)n, 0, &text, &len, err);
    free(ids);
    if (rc) return http_reply_error(c, mc, 400, "tokens", "tokens: %s", err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return http_reply_json(c, mc, 200, o);
}

/* A role's token text, or JSON null when the model has none. */
static void add_role_token(cJSON *o, const char *key, const struct tokenizer *t, enum tok_role r) {
    int32_t id = tokenizer_role_id(t, r);
    size_t len;
    const char *s = id >= 0 ? tokenizer_token_bytes(t, id, &len) : NULL;
    if (!s) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    char *text = xstrndup(s, len);
    cJSON_AddStringToObject(o, key, text);
    free(text);
}

/* GET /tokenizer_info (vLLM's): what a client needs to tokenize as the server does (lm-eval's
 * remote tokenizer reads the special tokens and the chat template here, then calls
 * /tokenize and /detokenize). */
static enum MHD_Result h_tokenizer_info(struct conn *c, struct MHD_Connection *mc) {
    const struct api_ctx *a = c->h->api;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tokenizer_class", "tpd");
    add_role_token(o, "bos_token", a->tok, TOK_ROLE_BOS);
    add_role_token(o, "eos_token", a->tok, TOK_ROLE_EOS);
    add_role_token(o, "pad_token", a->tok, TOK_ROLE_PAD);
    if (a->chat) cJSON_AddStringToObject(o, "chat_template", a->chat->src);
    else cJSON_AddNullToObject(o, "chat_template");
    cJSON_AddNumberToObject(o, "model_max_length", a->max_ctx);
    cJSON_AddNumberToObject(o, "vocab_size", tokenizer_n_vocab(a->tok));
    return http_reply_json(c, mc, 200, o);
}

/* Healthy means the engine steps: the loop ran recently and is not draining. */
static enum MHD_Result h_health(struct conn *c, struct MHD_Connection *mc) {
    char why[256];
    if (!sched_healthy(c->h->sched, why, sizeof why))
        return http_reply_error(c, mc, 503, "", "%s", why);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    return http_reply_json(c, mc, 200, o);
}

static enum MHD_Result h_metrics(struct conn *c, struct MHD_Connection *mc) {
    struct sched_stats st;
    sched_stats(c->h->sched, &st);
    st.draining |= http_draining(c->h); /* from the signal on, before the step loop sees it */
    char *text;
    size_t len;
    if (metrics_render(c->h->m, &st, &text, &len))
        return http_reply_error(c, mc, 500, "", "cannot render the metrics");
    struct sbuf b = {0};
    sbuf_add(&b, text, len);
    free(text);
    conns_metrics(c->h->cs, &b);
    enum MHD_Result rc = http_reply(c, mc, 200, "text/plain; version=0.0.4; charset=utf-8", b.p,
                                    b.len);
    sbuf_free(&b);
    return rc;
}

const struct route endpoints[] = {
    {"POST", "/v1/completions", h_completions, 0},
    {"POST", "/v1/chat/completions", h_chat, 0},
    {"GET", "/v1/models", h_models, 0},
    {"GET", "/v1/models/", h_model, 1},
    {"POST", "/tokenize", h_tokenize, 0},
    {"POST", "/detokenize", h_detokenize, 0},
    {"GET", "/tokenizer_info", h_tokenizer_info, 0},
    {"GET", "/health", h_health, 0},
    {"GET", "/metrics", h_metrics, 0},
};
const size_t endpoints_n = sizeof endpoints / sizeof *endpoints;
