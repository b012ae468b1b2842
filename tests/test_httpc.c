// link: tpd_httpc
/* tools/httpc*: the HTTP/1.1 response parser (Content-Length, chunked, close-delimited,
 * interim 1xx, keep-alive rules) fed whole, byte by byte and split at every position; each
 * malformed or truncated stream refused with its reason; the SSE splitter on every line-end
 * style and split; and the socket layer against a canned server thread (request bytes,
 * pieces arriving slowly, keep-alive reuse, timeout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tools/httpc.h"
#include "tools/httpc_parse.h"
#include "tools/httpc_sse.h"
#include "util/err.h"

/* ---- response parser ---- */

struct body {
    char buf[1 << 17];
    size_t len;
    int calls;
    int abort_after; /* >0: fail on that call */
};

static int on_body(void *ud, const char *d, size_t n) {
    struct body *b = ud;
    b->calls++;
    if (b->abort_after && b->calls >= b->abort_after) return -1;
    assert_true(b->len + n <= sizeof b->buf);
    memcpy(b->buf + b->len, d, n);
    b->len += n;
    return 0;
}

/* Feeds msg in pieces of at most `step` bytes (the first piece `first` bytes when non-zero),
 * as a socket would deliver it, then signals EOF when `eof`. Returns 0 or -1 with err; the
 * number of bytes the parser left unconsumed goes to *left. */
static int parse_pieces(struct http_parser *p, struct body *b, const char *msg, size_t n,
                        size_t first, size_t step, int eof, size_t *left, char *err) {
    http_parser_init(p);
    memset(b, 0, sizeof *b);
    size_t off = 0;
    while (off < n && p->state != HP_DONE) {
        size_t piece = first && off == 0 ? first : step;
        if (piece > n - off) piece = n - off;
        /* the parser may stop early (end of head): hand it the rest of the piece again */
        size_t end = off + piece;
        while (off < end && p->state != HP_DONE) {
            long used = http_parser_feed(p, msg + off, end - off, on_body, b, err);
            if (used < 0) return -1;
            off += (size_t)used;
            if (used == 0 && p->state != HP_DONE) break;
        }
    }
    if (left) *left = n - off;
    if (eof && http_parser_eof(p, err)) return -1;
    return 0;
}

static int parse_all(struct http_parser *p, struct body *b, const char *msg, int eof, char *err) {
    return parse_pieces(p, b, msg, strlen(msg), 0, strlen(msg) + 1, eof, NULL, err);
}

static void expect_error(const char *msg, int eof, const char *want_substr) {
    struct http_parser p;
    struct body b;
    char err[ERR_LEN] = "";
    int rc = parse_all(&p, &b, msg, eof, err);
    if (rc != -1) fail_msg("accepted: %s", msg);
    if (!strstr(err, want_substr)) fail_msg("error '%s' lacks '%s'", err, want_substr);
}

static const char CL_RESP[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n"
    "X-Other:  spaced value  \r\n\r\n{\"ok\": true}\n";

static void test_content_length(void **state) {
    (void)state;
    struct http_parser p;
    struct body b;
    char err[ERR_LEN];
    size_t left;
    assert_int_equal(parse_pieces(&p, &b, CL_RESP, strlen(CL_RESP), 0, 4096, 0, &left, err), 0);
    assert_int_equal(p.state, HP_DONE);
    assert_int_equal(p.status, 200);
    assert_int_equal(p.minor_version, 1);
    assert_true(p.keep_alive);
    assert_false(p.chunked);
    assert_string_equal(p.content_type, "application/json");
    assert_int_equal(b.len, 13);
    assert_memory_equal(b.buf, "{\"ok\": true}\n", 13);
    assert_int_equal(left, 0);
}

/* Every way of cutting a message into two pieces, and one byte at a time. */
static void check_all_splits(const char *msg, const char *want_body, int eof) {
    size_t n = strlen(msg), wn = strlen(want_body);
    for (size_t cut = 0; cut <= n; cut++) {
        struct http_parser p;
        struct body b;
        char err[ERR_LEN] = "";
        int rc = parse_pieces(&p, &b, msg, n, cut, n, eof, NULL, err);
        if (rc) fail_msg("split at %zu: %s", cut, err);
        assert_int_equal(p.state, HP_DONE);
        assert_int_equal(b.len, wn);
        assert_memory_equal(b.buf, want_body, wn);
    }
    struct http_parser p;
    struct body b;
    char err[ERR_LEN] = "";
    assert_int_equal(parse_pieces(&p, &b, msg, n, 0, 1, eof, NULL, err), 0);
    assert_int_equal(b.len, wn);
    assert_memory_equal(b.buf, want_body, wn);
}

static const char CHUNKED_RESP[] = "HTTP/1.1 200 OK\r\n"
                                   "Content-Type: text/event-stream\r\n"
                                   "Transfer-Encoding: chunked\r\n"
                                   "\r\n"
                                   "7\r\ndata: a\r\n"
                                   "17;name=\"ext\"\r\n" /* 23 bytes, with a chunk extension */
                                   "\r\ndata: {\"x\": \"\\r\\n\"}\r\n\r\n"
                                   "c \r\ndata: [DONE]\r\n" /* BWS before CRLF */
                                   "0\r\n"
                                   "X-Trailer: t\r\n"
                                   "\r\n";
static const char CHUNKED_BODY[] = "data: a\r\ndata: {\"x\": \"\\r\\n\"}\r\ndata: [DONE]";

static void test_chunked_splits(void **state) {
    (void)state;
    check_all_splits(CHUNKED_RESP, CHUNKED_BODY, 0);
    check_all_splits(CL_RESP, "{\"ok\": true}\n", 0);
    struct http_parser p;
    struct body b;
    char err[ERR_LEN];
    assert_int_equal(parse_all(&p, &b, CHUNKED_RESP, 0, err), 0);
    assert_true(p.chunked);
    assert_true(p.keep_alive);
    assert_string_equal(p.content_type, "text/event-stream");
}

static void test_chunked_bare_lf_and_hex_case(void **state) {
    (void)state;
    /* LF-only line ends are tolerated (RFC 9112 2.2); hex digits in either case */
    const char *msg =
        "HTTP/1.1 200 OK\ntransfer-encoding: CHUNKED\n\nA\n0123456789\nb\nabcdefghijk\n0\n\n";
    check_all_splits(msg, "0123456789abcdefghijk", 0);
}

static void test_close_delimited(void **state) {
    (void)state;
    const char *msg = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end";
    check_all_splits(msg, "until the end", 1);
    struct http_parser p;
    struct body b;
    char err[ERR_LEN];
    assert_int_equal(parse_all(&p, &b, msg, 0, err), 0);
    assert_int_equal(p.state, HP_BODY_CLOSE);
    assert_false(p.keep_alive);
    assert_int_equal(http_parser_eof(&p, err), 0);
    assert_int_equal(p.state, HP_DONE);
}

static void test_keep_alive_rules(void **state) {
    (void)state;
    struct http_parser p;
    struct body b;
    char err[ERR_LEN];
    assert_int_equal(
        parse_all(&p, &b, "HTTP/1.1 200 OK\r\nConnection: foo, Close\r\nContent-Length: 0\r\n\r\n",
                  0, err),
        0);
    assert_false(p.keep_alive);
    assert_int_equal(p.state, HP_DONE);
    assert_int_equal(parse_all(&p, &b, "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 0, err), 0);
    assert_false(p.keep_alive);
    assert_int_equal(
        parse_all(&p, &b, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
                  0, err),
        0);
    assert_true(p.keep_alive);
    /* Transfer-Encoding wins over Content-Length, but such a connection is not reused */
    assert_int_equal(parse_all(&p, &b,
                               "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: "
                               "chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
                               0, err),
                     0);
    assert_int_equal(b.len, 2);
    assert_false(p.keep_alive);
}

static void test_interim_and_no_body(void **state) {
    (void)state;
    struct http_parser p;
    struct body b;
    char err[ERR_LEN];
    const char *msg = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
                      "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found";
    check_all_splits(msg, "not found", 0);
    assert_int_equal(parse_all(&p, &b, msg, 0, err), 0);
    assert_int_equal(p.status, 404);
    /* 204 and 304 have no body whatever the headers say */
    assert_int_equal(
        parse_all(&p, &b, "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", 0, err), 0);
    assert_int_equal(p.state, HP_DONE);
    assert_int_equal(b.len, 0);
    /* no reason phrase at all is allowed */
    assert_int_equal(parse_all(&p, &b, "HTTP/1.1 503\r\nContent-Length: 2\r\n\r\nno", 0, err), 0);
    assert_int_equal(p.status, 503);
}

/* The parser stops at the end of the head, and at the end of the message: a second response
 * behind the first stays in the buffer. */
static void test_stops_at_boundaries(void **state) {
    (void)state;
    const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 201 "
                      "Created\r\nContent-Length: 0\r\n\r\n";
    struct http_parser p;
    struct body b = {0};
    char err[ERR_LEN];
    http_parser_init(&p);
    size_t n = strlen(two);
    long used = http_parser_feed(&p, two, n, on_body, &b, err);
    assert_int_equal(used, strlen("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"));
    assert_true(p.head_complete);
    assert_int_equal(b.len, 0);
    long used2 = http_parser_feed(&p, two + used, n - (size_t)used, on_body, &b, err);
    assert_int_equal(used2, 3);
    assert_int_equal(p.state, HP_DONE);
    assert_int_equal(
        http_parser_feed(&p, two + used + used2, n - (size_t)(used + used2), on_body, &b, err), 0);
    http_parser_init(&p);
    long used3 = http_parser_feed(&p, two + used + used2, n - (size_t)(used + used2), on_body, &b,
                                  err);
    assert_int_equal((size_t)(used + used2 + used3), n);
    assert_int_equal(p.status, 201);
    assert_int_equal(p.state, HP_DONE);
}

static void test_malformed_heads(void **state) {
    (void)state;
    expect_error("HTTP/2 200 OK\r\n\r\n", 0, "malformed status line");
    expect_error("HTTX/1.1 200 OK\r\n\r\n", 0, "malformed status line");
    expect_error("HTTP/1.1 20 OK\r\n\r\n", 0, "malformed status");
    expect_error("HTTP/1.1 2000 OK\r\n\r\n", 0, "malformed status line after the code");
    expect_error("HTTP/1.1 099 Low\r\n\r\n", 0, "out of range");
    expect_error("HTTP/1.1 101 Switching Protocols\r\n\r\n", 0, "101");
    expect_error("HTTP/1.1 200 O\x01K\r\n\r\n", 0, "reason phrase");
    expect_error("HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", 0, "malformed header line");
    expect_error("HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", 0, "malformed header line");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx", 0, "header name");
    expect_error("HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n", 0, "folding");
    expect_error("HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", 0, "bare CR");
    const char nul[] = "HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n";
    struct http_parser p;
    struct body b;
    char err[ERR_LEN] = "";
    assert_int_equal(parse_pieces(&p, &b, nul, sizeof nul - 1, 0, 64, 0, NULL, err), -1);
    assert_non_null(strstr(err, "control character"));
}

static void test_malformed_framing(void **state) {
    (void)state;
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", 0,
                 "conflicting");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx", 0, "malformed Content-Length");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nx", 0, "malformed Content-Length");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\nx", 0, "empty Content-Length");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551616\r\n\r\n", 0, "overflows");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0,
                 "unsupported transfer coding");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 0,
                 "last transfer coding");
    expect_error(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
        "last transfer coding");
    const char *te = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    char buf[256];
    snprintf(buf, sizeof buf, "%szz\r\n", te);
    expect_error(buf, 0, "malformed chunk size");
    snprintf(buf, sizeof buf, "%s\r\n", te);
    expect_error(buf, 0, "malformed chunk size");
    snprintf(buf, sizeof buf, "%s5x\r\nhello\r\n", te);
    expect_error(buf, 0, "malformed chunk size");
    snprintf(buf, sizeof buf, "%s10000000000000000\r\n", te); /* 2^64 */
    expect_error(buf, 0, "chunk size overflows");
    snprintf(buf, sizeof buf, "%s3\r\nhello\r\n0\r\n\r\n", te);
    expect_error(buf, 0, "longer than its declared size");
    snprintf(buf, sizeof buf, "%s3\r\nhel\rX0\r\n\r\n", te);
    expect_error(buf, 0, "longer than its declared size");
    snprintf(buf, sizeof buf, "%s3\r\nhel\r\n0\r\nbad trailer\r\n\r\n", te);
    expect_error(buf, 0, "malformed header line");
}

static void test_truncated(void **state) {
    (void)state;
    expect_error("", 1, "without a response");
    expect_error("HTTP/1.1 200", 1, "middle of the response head");
    expect_error("HTTP/1.1 200 OK\r\nContent-Le", 1, "middle of the response head");
    expect_error("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1,
                 "7 of 10 body bytes missing");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 1, "chunked body");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n", 1,
                 "chunked body");
    expect_error("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n", 1, "chunked body");
}

static void test_limits(void **state) {
    (void)state;
    /* one header line over HTTP_MAX_LINE */
    size_t n = HTTP_MAX_LINE + 200;
    char *msg = malloc(n + 100);
    int k = sprintf(msg, "HTTP/1.1 200 OK\r\nX-Big: ");
    memset(msg + k, 'a', HTTP_MAX_LINE);
    strcpy(msg + k + HTTP_MAX_LINE, "\r\n\r\n");
    expect_error(msg, 0, "header line longer than");
    free(msg);
    /* more header lines than allowed */
    char *many = malloc(HTTP_MAX_HEADERS * 16 + 64);
    k = sprintf(many, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i <= HTTP_MAX_HEADERS; i++) k += sprintf(many + k, "X-%d: v\r\n", i);
    strcpy(many + k, "\r\n");
    expect_error(many, 0, "header lines");
    free(many);
    /* a head over HTTP_MAX_HEAD made of lines under the line limit */
    char *big = malloc(HTTP_MAX_HEAD + 8192);
    k = sprintf(big, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; k < HTTP_MAX_HEAD + 100; i++) {
        k += sprintf(big + k, "X-%d: ", i);
        memset(big + k, 'v', 4000);
        k += 4000;
        k += sprintf(big + k, "\r\n");
    }
    strcpy(big + k, "\r\n");
    expect_error(big, 0, "response head longer than");
    free(big);
    /* endless 1xx responses are bounded by the same budget */
    char *flood = malloc(HTTP_MAX_HEAD + 64);
    k = 0;
    while (k < HTTP_MAX_HEAD + 10) k += sprintf(flood + k, "HTTP/1.1 100 Continue\r\n\r\n");
    expect_error(flood, 0, "response head longer than");
    free(flood);
    /* an endless chunk-size line */
    char *ext = malloc(HTTP_MAX_LINE + 200);
    k = sprintf(ext, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;");
    memset(ext + k, 'e', HTTP_MAX_LINE);
    ext[k + HTTP_MAX_LINE] = 0;
    expect_error(ext, 0, "chunk-size line longer than");
    free(ext);
}

static void test_body_abort(void **state) {
    (void)state;
    struct http_parser p;
    struct body b = {.abort_after = 1};
    char err[ERR_LEN];
    http_parser_init(&p);
    long used = http_parser_feed(&p, CL_RESP, strlen(CL_RESP), on_body, &b, err);
    assert_true(used > 0);
    assert_int_equal(
        http_parser_feed(&p, CL_RESP + used, strlen(CL_RESP) - (size_t)used, on_body, &b, err), -1);
    assert_string_equal(err, "body handler aborted");
}

/* ---- SSE ---- */

struct events {
    char names[16][SSE_MAX_EVENT_NAME];
    char data[16][256];
    size_t len[16];
    int n;
    int stop_at; /* >0: stop on that event */
};

static int on_event(void *ud, const char *event, const char *data, size_t len) {
    struct events *e = ud;
    assert_true(e->n < 16 && len < 256);
    assert_int_equal(strlen(data), len);
    snprintf(e->names[e->n], SSE_MAX_EVENT_NAME, "%s", event);
    memcpy(e->data[e->n], data, len + 1);
    e->len[e->n] = len;
    e->n++;
    return e->stop_at && e->n >= e->stop_at;
}

static const char *SSE_WANT[] = {"{\"a\":1}", "line1\nline2", "", " two spaces", "[DONE]"};

/* The same events written with each line-end style. */
static void sse_stream(char *out, const char *eol) {
    const char *lines[] = {"\xEF\xBB\xBF: comment, then a BOM-prefixed stream",
                           "data: {\"a\":1}",
                           "",
                           "event: delta",
                           "data:line1",
                           "data: line2",
                           "id: 7",
                           "retry: 10",
                           "unknown: x",
                           "",
                           "event: no data so no event",
                           "",
                           "data",
                           "",
                           "data:  two spaces",
                           "",
                           "data: [DONE]",
                           "",
                           NULL};
    out[0] = 0;
    for (int i = 0; lines[i]; i++) {
        const char *l = lines[i];
        if (i > 0 && l[0] == '\xEF') l += 3;
        strcat(out, l);
        strcat(out, eol);
    }
}

static void check_sse(const char *stream, size_t first) {
    struct sse_parser s;
    struct events e = {0};
    char err[ERR_LEN];
    sse_init(&s, 1024);
    size_t n = strlen(stream);
    if (first > n) first = n;
    assert_int_equal(sse_feed(&s, stream, first, on_event, &e, err), 0);
    for (size_t i = first; i < n; i += 3) {
        size_t k = n - i < 3 ? n - i : 3;
        assert_int_equal(sse_feed(&s, stream + i, k, on_event, &e, err), 0);
    }
    assert_int_equal(sse_finish(&s, err), 0);
    assert_int_equal(e.n, 5);
    for (int i = 0; i < 5; i++) {
        assert_string_equal(e.data[i], SSE_WANT[i]);
        assert_string_equal(e.names[i], i == 1 ? "delta" : "");
    }
    assert_int_equal(s.n_events, 5);
    sse_free(&s);
}

static void test_sse_line_ends_and_splits(void **state) {
    (void)state;
    const char *eols[] = {"\n", "\r\n", "\r"};
    char stream[1024];
    for (int k = 0; k < 3; k++) {
        sse_stream(stream, eols[k]);
        /* stream[0..2] is the BOM, only recognised at the very start of the stream */
        for (size_t cut = 0; cut <= strlen(stream); cut++) check_sse(stream, cut);
    }
}

static void test_sse_errors(void **state) {
    (void)state;
    struct sse_parser s;
    struct events e = {0};
    char err[ERR_LEN];
    /* a line over the bound */
    sse_init(&s, 16);
    assert_int_equal(sse_feed(&s, "data: 0123456789abcdef\n", 23, on_event, &e, err), -1);
    assert_non_null(strstr(err, "line longer than 16"));
    sse_free(&s);
    /* an event's data over the bound, in lines under it */
    sse_init(&s, 16);
    assert_int_equal(sse_feed(&s, "data: 01234567\ndata: 01234567\n", 30, on_event, &e, err), -1);
    assert_non_null(strstr(err, "event data longer than 16"));
    sse_free(&s);
    /* a stream cut in the middle of an event: the event is dropped and the cut reported */
    sse_init(&s, 1024);
    memset(&e, 0, sizeof e);
    assert_int_equal(sse_feed(&s, "data: 1\n\ndata: 2\n", 17, on_event, &e, err), 0);
    assert_int_equal(e.n, 1);
    assert_int_equal(sse_finish(&s, err), -1);
    assert_non_null(strstr(err, "middle of an event"));
    assert_int_equal(e.n, 1);
    sse_free(&s);
    sse_init(&s, 1024);
    assert_int_equal(sse_feed(&s, "data: 1", 7, on_event, &e, err), 0);
    assert_int_equal(sse_finish(&s, err), -1);
    sse_free(&s);
    /* the handler stops the stream */
    sse_init(&s, 1024);
    memset(&e, 0, sizeof e);
    e.stop_at = 1;
    assert_int_equal(sse_feed(&s, "data: 1\n\ndata: 2\n\n", 18, on_event, &e, err), -1);
    assert_int_equal(e.n, 1);
    sse_free(&s);
}

/* ---- socket layer against a canned server ---- */

struct server {
    char path[108];
    int lfd;
    const char *const *pieces; /* written one by one with a pause between */
    int n_pieces;
    int responses;      /* how many requests to answer on the one connection */
    int silent;         /* accept and never answer */
    char request[4096]; /* the first request as received */
    size_t request_len;
};

static void read_request(int fd, struct server *s) {
    char buf[4096];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
        if (r <= 0) return;
        len += (size_t)r;
        buf[len] = 0;
        char *end = strstr(buf, "\r\n\r\n");
        if (!end) continue;
        const char *cl = strcasestr(buf, "Content-Length: ");
        size_t body = cl ? (size_t)atol(cl + 16) : 0;
        if (len >= (size_t)(end + 4 - buf) + body) break;
    }
    if (!s->request_len) {
        memcpy(s->request, buf, len + 1);
        s->request_len = len;
    }
}

static void *serve(void *arg) {
    struct server *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    for (int r = 0; r < s->responses; r++) {
        read_request(fd, s);
        if (s->silent) {
            usleep(500000);
            break;
        }
        for (int i = 0; i < s->n_pieces; i++) {
            ssize_t w = write(fd, s->pieces[i], strlen(s->pieces[i]));
            (void)w;
            usleep(2000);
        }
    }
    close(fd);
    return NULL;
}

static void server_start(struct server *s, pthread_t *th) {
    snprintf(s->path, sizeof s->path, "/tmp/test_httpc.%d.sock", (int)getpid());
    unlink(s->path);
    s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, s->path);
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(s->lfd, 4), 0);
    assert_int_equal(pthread_create(th, NULL, serve, s), 0);
}

static void server_stop(struct server *s, pthread_t th) {
    pthread_join(th, NULL);
    close(s->lfd);
    unlink(s->path);
}

static void test_socket_chunked_keep_alive(void **state) {
    (void)state;
    static const char *const pieces[] = {
        "HTTP/1.1 200 OK\r\nTransfer-",
        "Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n", "5\r\nhel", "lo\r\n",
        "6\r\n world\r\n0\r\n\r\n"};
    struct server s = {.pieces = pieces, .n_pieces = 5, .responses = 2};
    pthread_t th;
    server_start(&s, &th);
    struct httpc *c = malloc(sizeof *c);
    char err[ERR_LEN];
    int e = -1;
    assert_int_equal(httpc_open(c, s.path, 5, &e, err), 0);
    for (int round = 0; round < 2; round++) {
        const char *body = "{\"prompt\":\"x\"}";
        assert_int_equal(
            httpc_send(c, "POST", "/v1/completions", "application/json", body, strlen(body), err),
            0);
        assert_int_equal(httpc_read_head(c, err), 0);
        assert_int_equal(c->parser.status, 200);
        assert_true(c->parser.keep_alive);
        char *out = NULL;
        size_t n = 0;
        assert_int_equal(httpc_read_body_all(c, 1024, &out, &n, err), 0);
        assert_string_equal(out, "hello world");
        free(out);
    }
    httpc_close(c);
    free(c);
    server_stop(&s, th);
    const char *want = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n";
    assert_memory_equal(s.request, want, strlen(want));
    assert_non_null(strstr(s.request, "\r\nContent-Type: application/json\r\n"));
    assert_non_null(strstr(s.request, "\r\nContent-Length: 14\r\n"));
    assert_non_null(strstr(s.request, "\r\n\r\n{\"prompt\":\"x\"}"));
}

static void test_socket_errors(void **state) {
    (void)state;
    struct httpc *c = malloc(sizeof *c);
    char err[ERR_LEN];
    int e = 0;
    /* nothing there */
    assert_int_equal(httpc_open(c, "/tmp/test_httpc.does-not-exist.sock", 1, &e, err), -1);
    assert_int_equal(e, 2 /* ENOENT */);
    assert_non_null(strstr(err, "/tmp/test_httpc.does-not-exist.sock"));
    /* a path too long for sun_path */
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    assert_int_equal(httpc_open(c, longp, 1, &e, err), -1);
    assert_int_equal(e, 0);
    /* header injection through the request line */
    struct server s = {.silent = 1, .responses = 1};
    pthread_t th;
    server_start(&s, &th);
    assert_int_equal(httpc_open(c, s.path, 0.2, &e, err), 0);
    assert_int_equal(httpc_send(c, "GET", "/x\r\nEvil: 1", NULL, NULL, 0, err), -1);
    /* a server that never answers: the timeout ends the wait */
    assert_int_equal(httpc_send(c, "GET", "/health", NULL, NULL, 0, err), 0);
    assert_int_equal(httpc_read_head(c, err), -1);
    assert_non_null(strstr(err, "timeout"));
    httpc_close(c);
    server_stop(&s, th);
    /* a server that answers with a truncated body */
    static const char *const cut[] = {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"};
    struct server s2 = {.pieces = cut, .n_pieces = 1, .responses = 1};
    server_start(&s2, &th);
    char *out = NULL;
    size_t n = 0;
    int status = 0;
    assert_int_equal(
        httpc_fetch(s2.path, 5, "GET", "/", NULL, NULL, 0, 1024, &status, &out, &n, &e, err), -1);
    assert_non_null(strstr(err, "95 of 100 body bytes missing"));
    server_stop(&s2, th);
    /* a body over the caller's bound */
    static const char *const big[] = {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"};
    struct server s3 = {.pieces = big, .n_pieces = 1, .responses = 1};
    server_start(&s3, &th);
    assert_int_equal(
        httpc_fetch(s3.path, 5, "GET", "/", NULL, NULL, 0, 9, &status, &out, &n, &e, err), -1);
    assert_non_null(strstr(err, "larger than 9 bytes"));
    server_stop(&s3, th);
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_chunked_splits),
        cmocka_unit_test(test_chunked_bare_lf_and_hex_case),
        cmocka_unit_test(test_close_delimited),
        cmocka_unit_test(test_keep_alive_rules),
        cmocka_unit_test(test_interim_and_no_body),
        cmocka_unit_test(test_stops_at_boundaries),
        cmocka_unit_test(test_malformed_heads),
        cmocka_unit_test(test_malformed_framing),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_body_abort),
        cmocka_unit_test(test_sse_line_ends_and_splits),
        cmocka_unit_test(test_sse_errors),
        cmocka_unit_test(test_socket_chunked_keep_alive),
        cmocka_unit_test(test_socket_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
