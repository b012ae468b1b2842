/* The replies http.c and the endpoints share (http_internal.h). */
#include "http_internal.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"

enum MHD_Result http_reply(struct conn *c, struct MHD_Connection *mc, int status, const char *type,
                           const char *body, size_t len) {
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

enum MHD_Result http_reply_json(struct conn *c, struct MHD_Connection *mc, int status, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) FATAL("out of memory for a response");
    enum MHD_Result rc = http_reply(c, mc, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

enum MHD_Result http_reply_api_error(struct conn *c, struct MHD_Connection *mc,
                                     const struct api_error *e) {
    size_t len;
    char *s = api_error_json(e, &len);
    enum MHD_Result rc = http_reply(c, mc, e->status, "application/json", s, len);
    free(s);
    return rc;
}

enum MHD_Result http_reply_error(struct conn *c, struct MHD_Connection *mc, int status,
                                 const char *param, const char *fmt, ...) {
    struct api_error e;
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_err(&e, status, param, "%s", msg);
    return http_reply_api_error(c, mc, &e);
}

void http_fail_error(const struct http_server *h, struct api_error *e) {
    api_err(e, 503, "", "%s", h->fail_msg);
    e->code = "job_failed";
}

int http_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

int http_draining(const struct http_server *h) {
    return atomic_load(&h->draining) || (h->stop_flag && atomic_load(h->stop_flag) > 0);
}
