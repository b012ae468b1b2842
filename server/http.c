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
#include "endpoints.h"
#include "http_internal.h"
#include "sockpath.h"
#include "../sched/metrics.h"
#include "../sched/scheduler.h"

#define DEFAULT_SOCKET "/tmp/tpd/tpd.sock"
#define DEFAULT_BODY (1u << 20)
#define DEFAULT_CONNECTIONS 16384
#define DEFAULT_HEADER_TIMEOUT_S 10
#define DEFAULT_IDLE_TIMEOUT_S 60
#define DEFAULT_HTTP_THREADS 4
#define DEFAULT_SEND_TIMEOUT_S 30
#define FLUSH_GRACE_S 5.0 /* at shutdown, how long finished answers may take to be sent */

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

/* ---------------------------------------------------------------- MHD callbacks */

/* While draining, a new request is told to go elsewhere (or come back), and its connection
 * closed; /metrics still answers, for whoever watches the drain. */
static int drain_refuses(struct conn *c, const char *url, const char *method) {
    if (!http_draining(c->h)) return 0;
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    return !(get && !strcmp(url, "/metrics"));
}

static enum MHD_Result reply_draining(struct conn *c, struct MHD_Connection *mc) {
    c->close = 1;
    struct api_error e;
    api_err(&e, 503, "", "draining: the server is shutting down; retry later");
    e.code = "draining";
    return http_reply_api_error(c, mc, &e);
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
        return http_reply_error(c, mc, 403, "", "peer uid %d is not allowed to use this server",
                                (int)uid);
    c->uid = uid;
    if (drain_refuses(c, url, method)) return reply_draining(c, mc);
    int path_known = 0;
    for (unsigned i = 0; i < endpoints_n; i++) {
        size_t n = strlen(endpoints[i].path);
        if (endpoints[i].prefix ? strncmp(url, endpoints[i].path, n) || !url[n] ||
                                      strlen(url + n) >= sizeof c->path_arg
                                : strcmp(url, endpoints[i].path))
            continue;
        if (endpoints[i].prefix) snprintf(c->path_arg, sizeof c->path_arg, "%s", url + n);
        path_known = 1;
        c->route = &endpoints[i];
        if (!strcmp(method, endpoints[i].method) ||
            (!strcmp(endpoints[i].method, "GET") && !strcmp(method, "HEAD"))) {
            path_known = 2;
            break;
        }
    }
    if (!path_known) return http_reply_error(c, mc, 404, "", "no such endpoint: %.200s", url);
    if (path_known == 1)
        return http_reply_error(c, mc, 405, "", "method %.16s is not allowed on %s", method,
                                c->route->path);
    /* request smuggling guards: one framing, and only the one we understand */
    struct framing f = {0, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, count_framing, &f);
    const char *te = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (f.n_te > 1 || f.n_cl > 1 || (f.n_te && f.n_cl))
        return http_reply_error(c, mc, 400, "",
                                "conflicting Transfer-Encoding / Content-Length headers");
    if (te && strcasecmp(te, "chunked"))
        return http_reply_error(c, mc, 400, "", "unsupported Transfer-Encoding \"%.64s\"", te);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || *end || cl[0] == '-')
            return http_reply_error(c, mc, 400, "", "malformed Content-Length");
        if (n > h->max_body)
            return http_reply_error(c, mc, 413, "",
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
    if (c->status) return MHD_YES;                /* answered on the first call */
    if (c->gen) return endpoints_gen_wait(c, mc); /* resumed: a non-streamed generation goes on */
    c->close |= conns_close_after(h->cs, c->rec); /* read along with its body? */
    conns_request_begin(h->cs, c->rec); /* all of it arrived in time: no deadline while it runs */
    if (drain_refuses(c, url, method)) return reply_draining(c, mc); /* began before the drain */
    if (c->too_large)
        return http_reply_error(c, mc, 413, "", "request body exceeds the limit of %zu bytes",
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
