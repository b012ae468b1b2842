/* Small HTTP/1.1 client over a Unix domain socket, for tpctl: one connection per struct,
 * used by one thread; requests written whole, responses read through httpc_parse (head first,
 * then the body streamed to a callback or collected with a size bound). Keep-alive aware. */
#ifndef TPD_HTTPC_H
#define TPD_HTTPC_H

#include <stddef.h>

#include "httpc_parse.h"

#define HTTPC_READ_BUF 16384

struct httpc {
    int fd;                    /* -1 when closed */
    char path[108];            /* socket path (sun_path size) */
    double timeout_s;          /* per read/write inactivity limit; 0: none */
    struct http_parser parser; /* the response being read */
    char buf[HTTPC_READ_BUF];  /* bytes read but not yet parsed */
    size_t buf_off, buf_len;
    int eof; /* the server closed its side */
};

/* Opens a connection to the Unix socket at path. On failure *sys_errno (if non-NULL)
 * receives the errno of the failing call (ENOENT, ECONNREFUSED, ...) so that the caller can
 * say why; 0 for a path that is too long. */
int httpc_open(struct httpc *c, const char *path, double timeout_s, int *sys_errno, char *err);
void httpc_close(struct httpc *c);

/* Writes one request (Host: localhost; Content-Length when body is non-NULL). */
int httpc_send(struct httpc *c, const char *method, const char *target, const char *content_type,
               const char *body, size_t body_len, char *err);

/* Reads up to the end of the next final response head; status, content type and framing are
 * then in c->parser. */
int httpc_read_head(struct httpc *c, char *err);
/* Streams the rest of the body to on_body (may be NULL to discard). After it returns 0 the
 * connection can carry another request when c->parser.keep_alive. */
int httpc_read_body(struct httpc *c, http_body_fn on_body, void *ud, char *err);
/* Collects the rest of the body: *out malloc'ed and NUL-terminated, at most max bytes. */
int httpc_read_body_all(struct httpc *c, size_t max, char **out, size_t *len, char *err);

/* One request and its whole response on a fresh connection: for the simple commands. */
int httpc_fetch(const char *path, double timeout_s, const char *method, const char *target,
                const char *content_type, const char *body, size_t body_len, size_t max_body,
                int *status, char **out, size_t *len, int *sys_errno, char *err);

#endif
