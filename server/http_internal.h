/* What http.c and the endpoints (endpoints.c) share: the server, one request, a stream, a
 * route, and the replies (http_internal.c). Internal to server/; http.h is the module's
 * interface. */
#ifndef TPD_HTTP_INTERNAL_H
#define TPD_HTTP_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>

#include "../util/sbuf.h"
#include "api.h"
#include "api_err.h"

#define KEEPALIVE_S 10.0  /* a stream with no token for this long gets an SSE comment */
#define RETRY_AFTER_S "1" /* seconds, on 429 and 503 */

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

/* Queues an answer with the headers every answer gets (Allow on 405, Retry-After on 429/503,
 * Connection: close, X-Tpd-Schema-Dropped) and records its status in c. */
enum MHD_Result http_reply(struct conn *c, struct MHD_Connection *mc, int status, const char *type,
                           const char *body, size_t len);
/* http_reply of o's text; takes o. */
enum MHD_Result http_reply_json(struct conn *c, struct MHD_Connection *mc, int status, cJSON *o);
enum MHD_Result http_reply_api_error(struct conn *c, struct MHD_Connection *mc,
                                     const struct api_error *e);
enum MHD_Result http_reply_error(struct conn *c, struct MHD_Connection *mc, int status,
                                 const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The job is ending (http_fail): the error its clients get, code job_failed, status 503. */
void http_fail_error(const struct http_server *h, struct api_error *e);
/* The peer hung up (or the socket broke): nothing we write will be read. */
int http_client_gone(int fd);
/* From the signal (the step loop may be stuck in a step for long) or from http_drain. */
int http_draining(const struct http_server *h);

#endif
