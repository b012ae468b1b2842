/* Connection admission for the HTTP frontend on rank 0. One thread of its own owns the
 * listening sockets: it accepts, reads the peer's uid (SO_PEERCRED; TCP peers share one
 * bucket), refuses at the total limit or the uid's share with a 503 written at once, and
 * keeps a new connection itself (an fd, no HTTP state) until its first request head is all
 * here, peeking at it: one libmicrohttpd would answer wrongly gets a 400 or 413 written
 * here (reqhead.h); any other is handed to libmicrohttpd. After each answer on a kept-alive
 * connection libmicrohttpd suspends it and the same look is taken at the next request.
 * The same thread, every TICK_S,
 * closes connections past their deadline (no first byte within idle_timeout_s; no whole
 * request, header and body, within header_timeout_s of the first byte; no whole next
 * request within idle_timeout_s of an answer) and wakes suspended connections whose
 * client went away or whose stream is due a keep-alive.
 * A connection waiting for tokens is suspended in libmicrohttpd (no thread held) and
 * resumed by conns_wake, which the step loop calls through the request's notifier.
 * Everything here is under one mutex; the callbacks may come from any thread. */
#ifndef TPD_CONNS_H
#define TPD_CONNS_H

#include <stddef.h>
#include <sys/socket.h>

#include "../util/sbuf.h"

struct MHD_Connection;
struct conns;
struct conn_rec;

struct conns_config {
    int max_connections; /* open connections in all */
    int max_per_uid;     /* of them, one peer uid (all TCP peers together) */
    double header_timeout_s;
    double idle_timeout_s;
    double keepalive_s; /* a suspended stream is woken after this long (SSE comment) */
};

/* Hands an accepted, non-blocking socket to the HTTP engine (which owns it from then on,
 * closing it on failure): 0, or -1. */
typedef int (*conns_handoff_fn)(void *arg, int fd, const struct sockaddr *sa, socklen_t len);

/* Raises RLIMIT_NOFILE to its hard limit (logged) and returns the connection count that
 * fits in it (a warning when *max must shrink). Call before conns_start. */
void conns_raise_fd_limit(int *max);

/* Starts the accept thread over the n listening sockets (taken over: closed by
 * conns_stop_accepting). *out is set before the thread starts, so the HTTP engine's
 * callbacks may read it from the first connection on. 0, or -1 with err. */
int conns_start(struct conns **out, const struct conns_config *cfg, const int *listen_fds, int n,
                conns_handoff_fn handoff, void *arg, char *err);
/* Closes the listening sockets: new connections are refused by the kernel. */
void conns_stop_accepting(struct conns *cs);
/* Before the HTTP engine stops: stops the thread (nothing more is handed over or timed
 * out), then resumes every suspended connection, and nothing suspends from now on (the
 * engine must hold no suspended connection when it stops). */
void conns_release_all(struct conns *cs);
/* Resumes every suspended connection, so that each handler looks at its request again
 * (the job is ending: http_fail). Any thread. */
void conns_wake_all(struct conns *cs);
/* After the HTTP engine stopped: closes the connections never handed over, frees. */
void conns_free(struct conns *cs);

/* libmicrohttpd's connection notifications: started (finds the record of fd; *ctx gets
 * it) and closed (the record is freed, its counts released). */
void conns_started(struct conns *cs, int fd, void **ctx);
void conns_closed(struct conns *cs, void **ctx);
/* A whole request (header and body) arrived: no deadline while it runs / its answer
 * ended: the next request is due within idle_timeout_s. rec may be NULL (not ours). */
void conns_request_begin(struct conns *cs, struct conn_rec *rec);
void conns_request_end(struct conns *cs, struct conn_rec *rec);

/* The request under way is to be the connection's last (answer with Connection: close):
 * libmicrohttpd has read past the requests the accept thread looked at (conns.c learns it
 * from SO_PEEK_OFF, or without it assumes so when anything followed the request). Asked
 * when its head is parsed and again before it is answered. */
int conns_close_after(struct conns *cs, struct conn_rec *rec);
/* From libmicrohttpd's request-completed callback, when it keeps the connection for another
 * request: suspends mc until the accept thread has seen the next request's head (and
 * answers it itself if libmicrohttpd would answer it wrongly, as for a new connection). */
void conns_next(struct conns *cs, struct conn_rec *rec, struct MHD_Connection *mc);

/* From the connection's own handler or content reader: suspends mc unless a wake came
 * since the last call or the server stops. 1: suspended (return and wait to be called
 * again), 0: not (look for events again). */
int conns_suspend(struct conns *cs, struct conn_rec *rec, struct MHD_Connection *mc);
/* Any thread (the step loop, on a new event): resumes rec if suspended, else remembers
 * the wake for its next conns_suspend. */
void conns_wake(struct conn_rec *rec);

/* Prometheus lines: open connections (total, per uid, waiting for tokens), refusals and
 * timeouts. */
void conns_metrics(struct conns *cs, struct sbuf *out);

#endif
