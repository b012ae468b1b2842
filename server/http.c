#include "http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <grp.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../tokenizer/chat.h"
#include "../tokenizer/tokenizer.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "../util/memtrim.h"
#include "api.h"
#include "access_log.h"
#include "api_gen.h"
#include "conns.h"
#include "sockpath.h"
#include "../sched/metrics.h"
#include "../sched/scheduler.h"

#define DEFAULT_SOCKET "/tmp/tpd/tpd.sock"
#define DEFAULT_BODY (1u << 20)
#define DEFAULT_CONNECTIONS 16384
#define DEFAULT_HEADER_TIMEOUT_S 10
#define DEFAULT_IDLE_TIMEOUT_S 60
#define DEFAULT_HTTP_THREADS 4
#define KEEPALIVE_S 10.0 /* a stream with no token for this long gets an SSE comment */
#define DEFAULT_SEND_TIMEOUT_S 30
#define RETRY_AFTER_S "1" /* seconds, on 429 and 503 */
#define FLUSH_GRACE_S 5.0 /* at shutdown, how long finished answers may take to be sent */

struct http_server {
    struct scheduler *sched;
    const struct api_ctx *api; /* built once by the caller; read-only here */
    struct api_ctx no_api;     /* stands in when there is none (socket-only tests) */
    struct metrics *m;
    struct access_log *access; /* NULL: none */
    char *socket_path;
    unsigned *uids;
    int n_uids;
    size_t max_body;
    unsigned send_timeout_s; /* a client that takes no bytes for this long is dropped */
    double keepalive_s;
    unsigned idle_timeout_s;
    struct MHD_Daemon *d; /* serves the connections conns hands over, unix and TCP alike */
    struct conns *cs;     /* accepts, counts, times out and wakes connections */
    dev_t sock_dev;
    ino_t sock_ino;
    const atomic_int *stop_flag; /* the daemon's signal flag, or NULL */
    atomic_int draining;         /* http_drain was called */
    atomic_int stopping;
    atomic_int active; /* generation requests whose answer is not completely sent */
    atomic_int failed; /* 1: http_fail set fail_msg (2 while it writes it) */
    char fail_msg[512];
    long created;
};

/* One HTTP request (MHD's per-request context). */
struct conn {
    struct http_server *h;
    const struct route *route;
    struct sbuf body;
    int too_large;
    int status; /* what was answered, for the metrics; 0 = nothing yet */
    int fd;
    int close;                  /* answer with Connection: close */
    int early;                  /* answered on the first call: libmicrohttpd closes after it */
    int http11;                 /* HTTP/1.1: kept alive unless a side says close; else HTTP/1.0 */
    char dropped[256];          /* "strict": false schema keywords dropped (X-Tpd-Schema-Dropped) */
    struct api_gen *gen;        /* a generation this request started (a reference) */
    unsigned uid;               /* peer uid, REQ_UID_UNKNOWN over TCP */
    struct conn_rec *rec;       /* the connection's record in conns (waking, deadlines) */
    char path_arg[256];         /* a prefix route's rest of the path ("/v1/models/ID": ID) */
    double t0;                  /* the request's first call, for the access log */
    char method[16], path[128]; /* as the client sent them (cut), for the access log */
};

/* A streamed response: the SSE bytes produced but not yet handed to MHD. */
struct stream {
    struct http_server *h;
    struct api_gen *gen;
    struct sbuf out;
    size_t off;
    int fd;
    struct conn_rec *rec;
    struct MHD_Connection *mc;
    double last_out; /* when bytes were last produced, for the keep-alive comment */
    int fail_sent;   /* the job's failure event (http_fail) is in out */
};

typedef enum MHD_Result (*handler_fn)(struct conn *c, struct MHD_Connection *mc);

struct route {
    const char *method; /* GET routes answer HEAD too */
    const char *path;
    handler_fn fn;
    int prefix; /* 1: path is a prefix; the non-empty rest goes to conn.path_arg */
};

/* ---------------------------------------------------------------- listening */

static int unix_listen(struct http_server *h, const struct server_config *cfg, int *out,
                       char *err) {
    const char *path = h->socket_path;
    struct sockaddr_un sa;
    if (sockpath_ready(path, &sa, err)) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(err, "socket: %s", strerror(errno));
    /* born 0600: nobody else can connect between bind and chmod */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    if (rc) {
        close(fd);
        if (e == EADDRINUSE) return err_set(err, "another daemon is already listening on %s", path);
        return err_set(err, "cannot bind %s: %s", path, strerror(e));
    }
    unsigned mode = cfg->socket_mode ? cfg->socket_mode : 0600;
    if (cfg->socket_group && cfg->socket_group[0]) {
        struct group gr, *res = NULL;
        char buf[4096];
        if (getgrnam_r(cfg->socket_group, &gr, buf, sizeof buf, &res) || !res) {
            err_set(err, "socket group \"%s\" does not exist", cfg->socket_group);
            goto fail;
        }
        if (chown(path, (uid_t)-1, gr.gr_gid)) {
            err_set(err, "cannot give %s to group %s: %s", path, cfg->socket_group,
                    strerror(errno));
            goto fail;
        }
    }
    if (chmod(path, (mode_t)(mode & 0777))) {
        err_set(err, "cannot chmod %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (stat(path, &st)) {
        err_set(err, "cannot stat %s: %s", path, strerror(errno));
        goto fail;
    }
    h->sock_dev = st.st_dev;
    h->sock_ino = st.st_ino;
    if (listen(fd, SOMAXCONN)) {
        err_set(err, "listen on %s: %s", path, strerror(errno));
        goto fail;
    }
    *out = fd;
    return 0;
fail:
    close(fd);
    unlink(path);
    return -1;
}

static int tcp_listen(int port, int *out, char *err) {
    if (port < 1 || port > 65535) return err_set(err, "tcp port %d out of range", port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(err, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* loopback only, by design */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, SOMAXCONN)) {
        int e = errno;
        close(fd);
        return err_set(err, "cannot listen on 127.0.0.1:%d: %s", port, strerror(e));
    }
    *out = fd;
    return 0;
}

int http_check(const struct server_config *cfg, char *err) {
    if (cfg->n_allowed_uids > 0 && cfg->tcp_port)
        return err_set(
            err, "an allow-list of peer uids cannot be enforced on TCP; leave the TCP port off");
    struct sockaddr_un sa;
    if (sockpath_ready(cfg->socket_path && cfg->socket_path[0] ? cfg->socket_path : DEFAULT_SOCKET,
                       &sa, err))
        return -1;
    if (cfg->socket_group && cfg->socket_group[0]) {
        struct group gr, *res = NULL;
        char buf[4096];
        if (getgrnam_r(cfg->socket_group, &gr, buf, sizeof buf, &res) || !res)
            return err_set(err, "socket group \"%s\" does not exist", cfg->socket_group);
    }
    int fd = -1;
    if (cfg->tcp_port && tcp_listen(cfg->tcp_port, &fd, err)) return -1;
    if (fd >= 0) close(fd); /* SO_REUSEADDR: free again at once for http_start */
    return 0;
}

/* Removes the socket file only if it is still ours (another daemon may own the path now). */
static void unlink_ours(struct http_server *h) {
    struct stat st;
    if (!lstat(h->socket_path, &st) && S_ISSOCK(st.st_mode) && st.st_dev == h->sock_dev &&
        st.st_ino == h->sock_ino)
        unlink(h->socket_path);
}

/* ---------------------------------------------------------------- replies */

static enum MHD_Result reply(struct conn *c, struct MHD_Connection *mc, int status,
                             const char *type, const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (c->route && !strcmp(c->route->method, "GET") && status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    else if (status == 405) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST");
    /* queue full, draining, unhealthy: a client may come back (RFC 9110, 10.2.3) */
    if (status == 429 || status == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
    if (c->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (c->dropped[0]) MHD_add_response_header(r, "X-Tpd-Schema-Dropped", c->dropped);
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)status, r);
    MHD_destroy_response(r);
    if (rc == MHD_YES) c->status = status;
    return rc;
}

static enum MHD_Result reply_json(struct conn *c, struct MHD_Connection *mc, int status, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) FATAL("out of memory for a response");
    enum MHD_Result rc = reply(c, mc, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

static enum MHD_Result reply_api_error(struct conn *c, struct MHD_Connection *mc,
                                       const struct api_error *e) {
    size_t len;
    char *s = api_error_json(e, &len);
    enum MHD_Result rc = reply(c, mc, e->status, "application/json", s, len);
    free(s);
    return rc;
}

static enum MHD_Result reply_error(struct conn *c, struct MHD_Connection *mc, int status,
                                   const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_error(struct conn *c, struct MHD_Connection *mc, int status,
                                   const char *param, const char *fmt, ...) {
    struct api_error e;
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_err(&e, status, param, "%s", msg);
    return reply_api_error(c, mc, &e);
}

/* The job is ending (http_fail): the error its clients get, code job_failed, status 503. */
static void fail_error(const struct http_server *h, struct api_error *e) {
    api_err(e, 503, "", "%s", h->fail_msg);
    e->code = "job_failed";
}

/* The peer hung up (or the socket broke): nothing we write will be read. */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* ---------------------------------------------------------------- handlers */

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
            fail_error(s->h, &e);
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
        if (client_gone(s->fd) || atomic_load(&s->h->stopping)) {
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

static enum MHD_Result gen_wait(struct conn *c, struct MHD_Connection *mc);

static enum MHD_Result h_generate(struct conn *c, struct MHD_Connection *mc, enum api_kind kind) {
    struct http_server *h = c->h;
    struct api_params p;
    struct api_error e;
    if (api_parse_generate(h->api, kind, c->body.p ? c->body.p : "", c->body.len, &p, &e))
        return reply_api_error(c, mc, &e);
    snprintf(c->dropped, sizeof c->dropped, "%s", p.schema_dropped);
    struct api_gen *g;
    if (gen_start(&g, h->sched, h->api->tok, h->api->model_name, c->uid, &p, &e)) {
        api_params_free(&p);
        return reply_api_error(c, mc, &e);
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
    return gen_wait(c, mc);
}

/* A non-streamed generation: answers once it is done; until then the connection is
 * suspended and MHD calls on_request (hence here) again when it is woken. */
static enum MHD_Result gen_wait(struct conn *c, struct MHD_Connection *mc) {
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
            fail_error(h, &e);
            return reply_api_error(c, mc, &e);
        }
        if (client_gone(c->fd) || atomic_load(&h->stopping)) {
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
    enum MHD_Result rc = reply(c, mc, status, "application/json", body.p, body.len);
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
    return reply_json(c, mc, 200, o);
}

/* GET /v1/models/{id} (the SDK's models.retrieve): the model, or 404 as OpenAI words it. */
static enum MHD_Result h_model(struct conn *c, struct MHD_Connection *mc) {
    if (strcmp(c->path_arg, c->h->api->model_name)) {
        struct api_error e;
        api_err(&e, 404, "model", "The model '%.200s' does not exist", c->path_arg);
        e.code = "model_not_found";
        return reply_api_error(c, mc, &e);
    }
    return reply_json(c, mc, 200, model_object(c->h));
}

static enum MHD_Result h_tokenize(struct conn *c, struct MHD_Connection *mc) {
    struct api_error e;
    int32_t *ids;
    int n;
    if (api_parse_tokenize(c->h->api, c->body.p ? c->body.p : "", c->body.len, &ids, &n, &e))
        return reply_api_error(c, mc, &e);
    /* written directly: a cJSON node per token would cost ~80 bytes each (a 700 KB
     * prompt can be 560k tokens) */
    struct sbuf b = {0};
    sbuf_adds(&b, "{\"tokens\":[");
    for (int i = 0; i < n; i++) sbuf_addf(&b, i ? ",%d" : "%d", (int)ids[i]);
    free(ids);
    sbuf_addf(&b, "],\"count\":%d,\"max_model_len\":%d}", n, c->h->api->max_ctx);
    enum MHD_Result rc = reply(c, mc, 200, "application/json", b.p, b.len);
    sbuf_free(&b);
    return rc;
}

static enum MHD_Result h_detokenize(struct conn *c, struct MHD_Connection *mc) {
    struct api_error e;
    int32_t *ids;
    int n;
    if (api_parse_detokenize(c->h->api, c->body.p ? c->body.p : "", c->body.len, &ids, &n, &e))
        return reply_api_error(c, mc, &e);
    char err[ERR_LEN], *text;
    size_t len;
    int rc = tokenizer_decode(c->h->api->tok, ids, (size_t)n, 0, &text, &len, err);
    free(ids);
    if (rc) return reply_error(c, mc, 400, "tokens", "tokens: %s", err);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text);
    free(text);
    return reply_json(c, mc, 200, o);
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
    return reply_json(c, mc, 200, o);
}

/* From the signal (the step loop may be stuck in a step for long) or from http_drain. */
static int draining(const struct http_server *h) {
    return atomic_load(&h->draining) || (h->stop_flag && atomic_load(h->stop_flag) > 0);
}

/* Healthy means the engine steps: the loop ran recently and is not draining. */
static enum MHD_Result h_health(struct conn *c, struct MHD_Connection *mc) {
    char why[256];
    if (!sched_healthy(c->h->sched, why, sizeof why)) return reply_error(c, mc, 503, "", "%s", why);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    return reply_json(c, mc, 200, o);
}

static enum MHD_Result h_metrics(struct conn *c, struct MHD_Connection *mc) {
    struct sched_stats st;
    sched_stats(c->h->sched, &st);
    st.draining |= draining(c->h); /* from the signal on, before the step loop sees it */
    char *text;
    size_t len;
    if (metrics_render(c->h->m, &st, &text, &len))
        return reply_error(c, mc, 500, "", "cannot render the metrics");
    struct sbuf b = {0};
    sbuf_add(&b, text, len);
    free(text);
    conns_metrics(c->h->cs, &b);
    enum MHD_Result rc = reply(c, mc, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
    sbuf_free(&b);
    return rc;
}

static const struct route routes[] = {
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

/* ---------------------------------------------------------------- MHD callbacks */

/* While draining, a new request is told to go elsewhere (or come back), and its connection
 * closed; /metrics still answers, for whoever watches the drain. */
static int drain_refuses(struct conn *c, const char *url, const char *method) {
    if (!draining(c->h)) return 0;
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return !(get && !strcmp(url, "/metrics"));
}

static enum MHD_Result reply_draining(struct conn *c, struct MHD_Connection *mc) {
    c->close = 1;
    struct api_error e;
    api_err(&e, 503, "", "draining: the server is shutting down; retry later");
    e.code = "draining";
    return reply_api_error(c, mc, &e);
}

struct framing {
    int n_te, n_cl;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value) {
    (void)kind;
    (void)value;
    struct framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->n_te++;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) f->n_cl++;
    return MHD_YES;
}

/* The peer's uid (for the allow-list and the scheduler's per-uid shares; unknown over TCP). */
static int peer_allowed(struct http_server *h, int fd, unsigned *uid) {
    struct ucred cr;
    socklen_t len = sizeof cr;
    int known = fd >= 0 && !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
    if (known) *uid = cr.uid;
    if (h->n_uids == 0) return 1;
    if (!known) return 0;
    for (int i = 0; i < h->n_uids; i++)
        if (h->uids[i] == (unsigned)cr.uid) return 1;
    return 0;
}

/* First call for a request: everything decidable from the request line and headers. */
static enum MHD_Result on_headers(struct conn *c, struct MHD_Connection *mc, const char *url,
                                  const char *method) {
    struct http_server *h = c->h;
    unsigned uid = REQ_UID_UNKNOWN;
    if (!peer_allowed(h, c->fd, &uid))
        return reply_error(c, mc, 403, "", "peer uid %d is not allowed to use this server",
                           (int)uid);
    c->uid = uid;
    if (drain_refuses(c, url, method)) return reply_draining(c, mc);
    int path_known = 0;
    for (unsigned i = 0; i < sizeof routes / sizeof *routes; i++) {
        size_t n = strlen(routes[i].path);
        if (routes[i].prefix ? strncmp(url, routes[i].path, n) || !url[n] ||
                                   strlen(url + n) >= sizeof c->path_arg
                             : strcmp(url, routes[i].path))
            continue;
        if (routes[i].prefix) snprintf(c->path_arg, sizeof c->path_arg, "%s", url + n);
        path_known = 1;
        c->route = &routes[i];
        if (!strcmp(method, routes[i].method) ||
            (!strcmp(routes[i].method, "GET") && !strcmp(method, "HEAD"))) {
            path_known = 2;
            break;
        }
    }
    if (!path_known) return reply_error(c, mc, 404, "", "no such endpoint: %.200s", url);
    if (path_known == 1)
        return reply_error(c, mc, 405, "", "method %.16s is not allowed on %s", method,
                           c->route->path);
    /* request smuggling guards: one framing, and only the one we understand */
    struct framing f = {0, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, count_framing, &f);
    const char *te = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (f.n_te > 1 || f.n_cl > 1 || (f.n_te && f.n_cl))
        return reply_error(c, mc, 400, "",
                           "conflicting Transfer-Encoding / Content-Length headers");
    if (te && strcasecmp(te, "chunked"))
        return reply_error(c, mc, 400, "", "unsupported Transfer-Encoding \"%.64s\"", te);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || *end || cl[0] == '-')
            return reply_error(c, mc, 400, "", "malformed Content-Length");
        if (n > h->max_body)
            return reply_error(c, mc, 413, "",
                               "request body of %llu bytes exceeds the limit of %zu bytes", n,
                               h->max_body);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    struct http_server *h = cls;
    struct conn *c = *con_cls;
    if (!c) {
        c = xcalloc(1, sizeof *c);
        c->h = h;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        const union MHD_ConnectionInfo *si = MHD_get_connection_info(
            mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->rec = si ? si->socket_context : NULL;
        c->t0 = clock_now();
        snprintf(c->method, sizeof c->method, "%s", method);
        /* the log line stays one token per field: bytes outside printable ASCII become '?' */
        snprintf(c->path, sizeof c->path, "%s", url);
        for (char *q = c->path; *q; q++)
            if (*q <= ' ' || *q > '~') *q = '?';
        for (char *q = c->method; *q; q++)
            if (*q <= ' ' || *q > '~') *q = '?';
        *con_cls = c;
        c->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
        c->close = conns_close_after(h->cs, c->rec);
        enum MHD_Result rc = on_headers(c, mc, url, method);
        c->early = c->status != 0;
        return rc;
    }
    if (*upload_size) {
        /* past the limit the rest is read and dropped, then answered 413 (a chunked body
         * announces no length up front) */
        if (!c->too_large && c->body.len + *upload_size <= h->max_body)
            sbuf_add(&c->body, upload, *upload_size);
        else c->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->status) return MHD_YES;      /* answered on the first call */
    if (c->gen) return gen_wait(c, mc); /* resumed: a non-streamed generation goes on */
    conns_request_begin(h->cs, c->rec); /* all of it arrived in time: no deadline while it runs */
    if (drain_refuses(c, url, method)) return reply_draining(c, mc); /* began before the drain */
    if (c->too_large)
        return reply_error(c, mc, 413, "", "request body exceeds the limit of %zu bytes",
                           h->max_body);
    return c->route->fn(c, mc);
}

struct tokens {
    const char *want;
    int found;
};

static enum MHD_Result find_token(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    (void)kind;
    struct tokens *t = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONNECTION) || !value) return MHD_YES;
    size_t n = strlen(t->want);
    for (const char *p = value; *p;) {
        p += strspn(p, " \t,");
        size_t k = strcspn(p, ",");
        size_t m = k;
        while (m && (p[m - 1] == ' ' || p[m - 1] == '\t')) m--;
        if (m == n && !strncasecmp(p, t->want, n)) t->found = 1;
        p += k;
    }
    return MHD_YES;
}

static int connection_token(struct MHD_Connection *mc, const char *want) {
    struct tokens t = {want, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, find_token, &t);
    return t.found;
}

/* Whether libmicrohttpd keeps the connection for another request after this answer (as
 * its keepalive_possible decides): HTTP/1.1 unless either side said close, HTTP/1.0 only
 * with Keep-Alive; never after an answer queued on the first call (0.9.75 then reads
 * nothing more of the connection). A wrong
 * guess either way is safe: a closed connection suspended by conns_next is given back
 * when its client leaves, or at its deadline; a kept one not suspended is read by
 * libmicrohttpd alone. */
static int keeps_alive(const struct conn *c, struct MHD_Connection *mc) {
    if (c->close || c->early || connection_token(mc, "close")) return 0;
    return c->http11 || connection_token(mc, "keep-alive");
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    struct http_server *h = cls;
    struct conn *c = *con_cls;
    if (!c) return;
    struct access_rec ar = {.uid = c->uid,
                            .method = c->method,
                            .path = c->path,
                            .status = c->status ? c->status : 499,
                            .total_s = clock_now() - c->t0,
                            .ttft_s = -1};
    if (c->gen) {
        struct gen_summary gs;
        gen_summary(c->gen, &gs);
        ar.gen = 1;
        ar.prompt_tokens = gs.prompt_tokens, ar.cached_tokens = gs.cached_tokens;
        ar.completion_tokens = gs.completion_tokens, ar.ttft_s = gs.ttft_s, ar.finish = gs.finish;
    }
    access_log_write(h->access, &ar);
    if (c->gen) {
        gen_set_notify(c->gen, NULL, NULL); /* from here the record may go */
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) gen_cancel(c->gen);
        gen_unref(c->gen);
        MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, h->idle_timeout_s);
        atomic_fetch_sub(&h->active, 1);
    }
    conns_request_end(h->cs, c->rec);
    /* the next request's head is looked at before libmicrohttpd parses it */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && keeps_alive(c, mc))
        conns_next(h->cs, c->rec, mc);
    /* 499: the client left before any answer (nginx's convention) */
    metrics_request(h->m, c->status ? c->status : 499);
    sbuf_free(&c->body);
    free(c);
    *con_cls = NULL;
    memtrim_note();
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    LOG(LOG_DEBUG, "libmicrohttpd: %s", msg);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct http_server *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
            mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        conns_started(h->cs, ci ? ci->connect_fd : -1, socket_context);
    } else {
        conns_closed(h->cs, socket_context);
    }
}

static int handoff(void *arg, int fd, const struct sockaddr *sa, socklen_t len) {
    struct http_server *h = arg;
    return MHD_add_connection(h->d, fd, sa, len) == MHD_YES ? 0 : -1;
}

/* A pool of threads each running an epoll loop over its share of the connections; they
 * come from conns (MHD_add_connection), never from a listening socket of MHD's own. */
static struct MHD_Daemon *start_mhd(struct http_server *h, int max_conn, int threads) {
    return MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ITC | MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        NULL, /* first, so that every message goes to it */
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
        /* conns enforces max_conn; MHD's own limit is split per thread, so give it room */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conn + 64u * (unsigned)threads,
        MHD_OPTION_CONNECTION_TIMEOUT, h->idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_END);
}

/* ---------------------------------------------------------------- lifetime */

static void server_free(struct http_server *h) {
    api_ctx_free(&h->no_api);
    free(h->socket_path);
    access_log_close(h->access);
    free(h->uids);
    free(h);
}

int http_start(struct http_server **out, const struct server_config *cfg, struct scheduler *s,
               const struct api_ctx *api, struct metrics *m, char *err) {
    if (cfg->n_allowed_uids > 0 && cfg->tcp_port)
        return err_set(
            err, "an allow-list of peer uids cannot be enforced on TCP; leave the TCP port off");
    if (cfg->n_allowed_uids < 0) return err_set(err, "negative uid count");
    struct http_server *h = xcalloc(1, sizeof *h);
    h->sched = s;
    h->stop_flag = cfg->stop_flag;
    if (!api) api_ctx_init(&h->no_api, NULL, NULL, 0, 0, 0);
    h->api = api ? api : &h->no_api;
    h->m = m;
    h->socket_path = xstrdup(cfg->socket_path && cfg->socket_path[0] ? cfg->socket_path
                                                                     : DEFAULT_SOCKET);
    if (cfg->n_allowed_uids) {
        h->uids = xmalloc(sizeof *h->uids * (size_t)cfg->n_allowed_uids);
        memcpy(h->uids, cfg->allowed_uids, sizeof *h->uids * (size_t)cfg->n_allowed_uids);
        h->n_uids = cfg->n_allowed_uids;
    }
    h->max_body = cfg->max_body_bytes ? cfg->max_body_bytes : DEFAULT_BODY;
    h->send_timeout_s = cfg->send_timeout_s ? cfg->send_timeout_s : DEFAULT_SEND_TIMEOUT_S;
    h->keepalive_s = h->send_timeout_s / 3.0 < KEEPALIVE_S ? h->send_timeout_s / 3.0 : KEEPALIVE_S;
    h->idle_timeout_s = cfg->idle_timeout_s ? cfg->idle_timeout_s : DEFAULT_IDLE_TIMEOUT_S;
    int max_conn = cfg->max_connections > 0 ? cfg->max_connections : DEFAULT_CONNECTIONS;
    conns_raise_fd_limit(&max_conn);
    int per_uid = cfg->max_connections_per_uid > 0 ? cfg->max_connections_per_uid
                                                   : (max_conn + 1) / 2;
    if (per_uid > max_conn) per_uid = max_conn;
    struct conns_config cc = {
        .max_connections = max_conn,
        .max_per_uid = per_uid,
        .header_timeout_s = cfg->header_timeout_s > 0 ? cfg->header_timeout_s
                                                      : DEFAULT_HEADER_TIMEOUT_S,
        .idle_timeout_s = h->idle_timeout_s,
        .keepalive_s = h->keepalive_s,
    };
    h->created = (long)time(NULL);
    if (access_log_open(&h->access, cfg->access_log, err)) {
        server_free(h);
        return -1;
    }
    int ufd = -1, tfd = -1;
    if (unix_listen(h, cfg, &ufd, err)) {
        server_free(h);
        return -1;
    }
    if (cfg->tcp_port && tcp_listen(cfg->tcp_port, &tfd, err)) {
        close(ufd);
        unlink_ours(h);
        server_free(h);
        return -1;
    }
    h->d = start_mhd(h, max_conn, cfg->http_threads > 0 ? cfg->http_threads : DEFAULT_HTTP_THREADS);
    int lfds[2] = {ufd, tfd};
    if (!h->d || conns_start(&h->cs, &cc, lfds, tfd >= 0 ? 2 : 1, handoff, h, err)) {
        if (h->d) MHD_stop_daemon(h->d);
        else err_set(err, "libmicrohttpd failed to start");
        close(ufd);
        if (tfd >= 0) close(tfd);
        unlink_ours(h);
        server_free(h);
        return -1;
    }
    *out = h;
    return 0;
}

void http_drain(struct http_server *h) {
    if (h) atomic_store(&h->draining, 1);
}

void http_fail(struct http_server *h, const char *msg, double grace_s) {
    if (!h || atomic_exchange(&h->failed, 2)) return; /* once */
    snprintf(h->fail_msg, sizeof h->fail_msg, "%s", msg);
    atomic_store(&h->failed, 1);
    conns_wake_all(h->cs); /* each waiting handler sees the failure and answers */
    double deadline = clock_now() + grace_s;
    while (atomic_load(&h->active) > 0 && clock_now() < deadline) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void http_free(struct http_server *h) {
    if (!h) return;
    http_drain(h);
    /* the scheduler has finished every request, but the last events (finish_reason,
     * usage, [DONE]) or a whole non-streamed body may still be on their way out: let
     * them go before connections are cut */
    double deadline = clock_now() + FLUSH_GRACE_S;
    while (atomic_load(&h->active) > 0 && clock_now() < deadline) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    conns_stop_accepting(h->cs); /* closes the listening sockets */
    unlink_ours(h);
    atomic_store(&h->stopping, 1); /* waiting handlers give up when woken, */
    conns_release_all(h->cs);      /* which happens now to every suspended one */
    MHD_stop_daemon(h->d);
    conns_free(h->cs);
    server_free(h);
}
