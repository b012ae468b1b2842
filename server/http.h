/* The HTTP frontend on rank 0: an OpenAI-compatible API served by libmicrohttpd over a
 * Unix socket (and optionally loopback TCP). conns.c accepts and admits connections
 * (limits, per-uid share, timeouts) and hands them to a small pool of libmicrohttpd
 * threads; a request waiting for tokens is suspended, holding no thread, and resumed by
 * the step loop. Owns the socket file: creation, permissions and removal (its directory's
 * trust walk and stale-file detection: sockpath.c). Routes to api.c (parsing) and
 * api_gen.c (generation). */
#ifndef TPD_HTTP_H
#define TPD_HTTP_H

#include <stdatomic.h>
#include <stddef.h>

struct api_ctx;
struct scheduler;
struct metrics;
struct http_server;

struct server_config {
    const char *socket_path;  /* default "/tmp/tpd/tpd.sock"; its directory is created 0700 if
                               * missing  and must be ours (or root's), writable by nobody else */
    unsigned socket_mode;     /* default 0600 (0 = default) */
    const char *socket_group; /* optional: chgrp the socket (then mode typically 0660) */
    unsigned *allowed_uids;   /* optional SO_PEERCRED allow-list; empty = any */
    int n_allowed_uids;
    int tcp_port;          /* 0 = off (default); when set, listens on 127.0.0.1 only */
    size_t max_body_bytes; /* default 1 MiB (0 = default) -> 413 beyond */
    int max_connections;   /* default 16384 (0 = default); lowered to fit the open-file limit */
    int max_connections_per_uid; /* one peer uid's share (all TCP peers together); 0 = half */
    unsigned header_timeout_s;   /* a request (header and body) must be complete this long after
                                  * its first byte; default 10 (0 = default) */
    unsigned idle_timeout_s;     /* a connection with no request under way for this long is
                                  * closed; default 60 (0 = default) */
    int http_threads;            /* libmicrohttpd's threads; default 4 (0 = default) */
    unsigned send_timeout_s;     /* a client that takes no bytes of its answer for this long is
                                  * dropped and its generation cancelled; default 30 (0 = default) */
    const char *access_log;      /* "stderr", a file path (appended to) or "off"; NULL: off */
    const atomic_int *stop_flag; /* optional: once > 0 (a signal handler sets it), draining as
                                  * after http_drain, even while the step loop is stuck */
};

/* Creates the socket and starts serving: requests are validated against api (built once
 * by the caller, outliving the server; NULL: every model endpoint fails cleanly), and
 * generations go to s. The config's strings are copied. 0, or -1 with err (a live daemon
 * on the path, a non-socket file there, permissions, ...). */
int http_start(struct http_server **out, const struct server_config *cfg, struct scheduler *s,
               const struct api_ctx *api, struct metrics *m, char *err);
/* The checks http_start makes before it listens, for a start-up that has not loaded the
 * model yet: the socket's directory (created 0700 when missing) trusted, no live daemon
 * at the path (a stale socket is removed), the group there, the TCP port free. 0, or -1
 * with err. */
int http_check(const struct server_config *cfg, char *err);
/* Draining: from now on /health and every new request but GET /metrics are answered 503
 * with Retry-After and Connection: close, while the requests in flight go on. The
 * listeners stay open, so a client is told the server is going instead of finding nobody. */
void http_drain(struct http_server *h);
/* After in-flight requests ended (or were aborted by the scheduler): lets their last
 * bytes go, closes the listeners, unlinks the socket, stops the connection threads and
 * frees everything. */
void http_free(struct http_server *h);
/* The job is about to end (a fatal error or a stuck step on rank 0; any thread): every
 * stream in flight gets an error event in OpenAI's shape (type server_error, the message
 * given) after what it already had, and ends; a waiting non-streamed request gets 503.
 * Returns once they are sent, or after at most grace_s seconds. */
void http_fail(struct http_server *h, const char *msg, double grace_s);

#endif
