#include "httpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/err.h"
#include "util/fatal.h"
#include "util/sbuf.h"

int httpc_open(struct httpc *c, const char *path, double timeout_s, int *sys_errno, char *err) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    c->timeout_s = timeout_s;
    if (sys_errno) *sys_errno = 0;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof sa.sun_path || n >= sizeof c->path)
        return err_set(err, "socket path '%s' is empty or longer than %zu bytes", path,
                       sizeof sa.sun_path - 1);
    memcpy(sa.sun_path, path, n + 1);
    memcpy(c->path, path, n + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        if (sys_errno) *sys_errno = errno;
        return err_set(err, "socket: %s", strerror(errno));
    }
    if (timeout_s > 0) {
        /* SO_SNDTIMEO also bounds connect() on a Unix socket whose backlog is full */
        struct timeval tv = {
            .tv_sec = (time_t)timeout_s,
            .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    int rc;
    do rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        int e = errno;
        close(fd);
        if (sys_errno) *sys_errno = e;
        return err_set(err, "cannot connect to %s: %s", path, strerror(e));
    }
    c->fd = fd;
    return 0;
}

void httpc_close(struct httpc *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

static int send_all(struct httpc *c, const char *p, size_t n, char *err) {
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return err_set(err, "timed out after %g s writing to %s", c->timeout_s, c->path);
            return err_set(err, "writing to %s: %s", c->path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Request-line pieces come from our own code, but a CR or LF in them would let a caller's
 * string inject headers, so they are checked anyway. */
static int token_safe(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f) return 0;
    return 1;
}

int httpc_send(struct httpc *c, const char *method, const char *target, const char *content_type,
               const char *body, size_t body_len, char *err) {
    if (c->fd < 0) return err_set(err, "connection is closed");
    if (!token_safe(method) || !token_safe(target) ||
        (content_type && strpbrk(content_type, "\r\n")))
        return err_set(err, "invalid character in the request line");
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tpctl\r\nAccept: */*\r\n",
                     method, target);
    if (n < 0 || (size_t)n >= sizeof head) return err_set(err, "request line too long");
    if (body) {
        int m = snprintf(head + n, sizeof head - (size_t)n,
                         "Content-Type: %s\r\nContent-Length: %zu\r\n",
                         content_type ? content_type : "application/json", body_len);
        if (m < 0 || (size_t)(n + m) >= sizeof head) return err_set(err, "request head too long");
        n += m;
    }
    if ((size_t)n + 2 >= sizeof head) return err_set(err, "request head too long");
    memcpy(head + n, "\r\n", 3);
    n += 2;
    if (send_all(c, head, (size_t)n, err)) return -1;
    if (body && body_len && send_all(c, body, body_len, err)) return -1;
    return 0;
}

/* Reads more bytes into the buffer; 0 on data or EOF (c->eof), -1 with err. */
static int fill(struct httpc *c, char *err) {
    if (c->buf_off == c->buf_len) c->buf_off = c->buf_len = 0;
    if (c->buf_len == sizeof c->buf) return err_set(err, "internal: read buffer full");
    for (;;) {
        ssize_t r = read(c->fd, c->buf + c->buf_len, sizeof c->buf - c->buf_len);
        if (r > 0) {
            c->buf_len += (size_t)r;
            return 0;
        }
        if (r == 0) {
            c->eof = 1;
            return 0;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return err_set(err, "no data from %s for %g s (timeout)", c->path, c->timeout_s);
        return err_set(err, "reading from %s: %s", c->path, strerror(errno));
    }
}

/* Feeds buffered bytes and reads more until `until_head` (the head is complete) or the
 * message is complete. */
static int pump(struct httpc *c, int until_head, http_body_fn on_body, void *ud, char *err) {
    struct http_parser *p = &c->parser;
    for (;;) {
        if (p->state == HP_DONE || (until_head && p->head_complete)) return 0;
        if (c->buf_off < c->buf_len) {
            long used = http_parser_feed(p, c->buf + c->buf_off, c->buf_len - c->buf_off, on_body,
                                         ud, err);
            if (used < 0) return -1;
            c->buf_off += (size_t)used;
            continue;
        }
        if (c->eof) {
            if (http_parser_eof(p, err)) return -1;
            if (until_head && !p->head_complete)
                return err_set(err, "internal: eof without a head");
            return 0;
        }
        if (c->fd < 0) return err_set(err, "connection is closed");
        if (fill(c, err)) return -1;
    }
}

int httpc_read_head(struct httpc *c, char *err) {
    http_parser_init(&c->parser);
    return pump(c, 1, NULL, NULL, err);
}

int httpc_read_body(struct httpc *c, http_body_fn on_body, void *ud, char *err) {
    if (!c->parser.head_complete) return err_set(err, "internal: body read before the head");
    return pump(c, 0, on_body, ud, err);
}

struct collect {
    struct sbuf body;
    size_t max;
    int too_big;
};

static int collect_body(void *ud, const char *data, size_t n) {
    struct collect *k = ud;
    if (n > k->max - k->body.len) {
        k->too_big = 1;
        return -1;
    }
    sbuf_add(&k->body, data, n);
    return 0;
}

int httpc_read_body_all(struct httpc *c, size_t max, char **out, size_t *len, char *err) {
    struct collect k = {.max = max};
    if (httpc_read_body(c, collect_body, &k, err)) {
        if (k.too_big) err_set(err, "response body larger than %zu bytes", max);
        sbuf_free(&k.body);
        return -1;
    }
    sbuf_add(&k.body, "", 0); /* an empty body still gets a buffer */
    *out = k.body.p;
    *len = k.body.len;
    return 0;
}

int httpc_fetch(const char *path, double timeout_s, const char *method, const char *target,
                const char *content_type, const char *body, size_t body_len, size_t max_body,
                int *status, char **out, size_t *len, int *sys_errno, char *err) {
    struct httpc *c = xmalloc(sizeof *c);
    int rc = -1;
    if (httpc_open(c, path, timeout_s, sys_errno, err)) goto done;
    if (httpc_send(c, method, target, content_type, body, body_len, err)) goto done;
    if (httpc_read_head(c, err)) goto done;
    if (httpc_read_body_all(c, max_body, out, len, err)) goto done;
    *status = c->parser.status;
    rc = 0;
done:
    httpc_close(c);
    free(c);
    return rc;
}
