// link: tpd_server
/* The request-head screen in front of libmicrohttpd (server/reqhead.c): a head not yet all
 * here waits, whatever its split (a bad Content-Length is refused once its line is here);
 * the Content-Length values libmicrohttpd 0.9.75 answers with a doubled header block are
 * refused (400, 413 past 2^64 - 1) as it would judge them (leading blanks skipped, trailing
 * ones not, folded lines); a chunked body is waited for until all of it is in view (413 if
 * it does not fit; a client waiting for 100 Continue is asked for it) and a chunk-size line
 * longer than REQHEAD_CHUNK_LINE_MAX refused; everything else passes to libmicrohttpd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/reqhead.h"

static size_t end; /* of the last request screened */

static enum reqhead_verdict screen(const char *s, int *status) {
    struct api_error e = {0};
    enum reqhead_verdict v = reqhead_screen(s, strlen(s), REQHEAD_VIEW, &e, &end);
    *status = v == REQHEAD_REFUSE ? e.status : 0;
    return v;
}

#define POST "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"

static void test_content_length(void **state) {
    (void)state;
    static const struct {
        const char *head;
        int status;
    } cases[] = {
        {POST "Content-Length: 12\r\n\r\n", 0},
        {POST "content-length:12\r\n\r\n", 0},
        {POST "Content-Length: \t 0012\r\n\r\n", 0},
        {POST "Content-Length: 18446744073709551615\r\n\r\n", 0}, /* 2^64 - 1: 413 from http.c */
        {POST "Content-Length: -1\r\n\r\n", 400},
        {POST "Content-Length: 1x\r\n\r\n", 400},
        {POST "Content-Length: 12 \r\n\r\n", 400},
        {POST "Content-Length:\r\n\r\n", 400},
        {POST "Content-Length: +5\r\n\r\n", 400},
        {POST "Content-Length: 18446744073709551616\r\n\r\n", 413},
        {POST "Content-Length: 99999999999999999999999999999\r\n\r\n", 413},
        {POST "Content-Length: 99999999999999999999999999999x\r\n\r\n", 400},
        {POST "Content-Length: 1\r\n 2\r\n\r\n", 400}, /* folded */
        {POST "X-A: 1\r\n 2\r\nContent-Length: 3\r\n\r\n", 0},
        {POST "Content-Length: 3\r\nContent-Length: x\r\n\r\n", 400}, /* every one judged */
        {POST "Content-Length : 5x\r\n\r\n", 0},     /* another field to libmicrohttpd */
        {"\r\n" POST "Content-Length: -1\n\n", 400}, /* bare LF, a leading empty line */
        /* what libmicrohttpd answers 400 at once is not waited for */
        {"GET /health\r\n", 0},
        {"GET /health HTTP/1.1\r\nno colon\r\n", 0},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st;
        enum reqhead_verdict v = screen(cases[i].head, &st);
        if (v != (cases[i].status ? REQHEAD_REFUSE : REQHEAD_PASS) || st != cases[i].status)
            fail_msg("case %u: verdict %d status %d", i, (int)v, st);
    }
}

static void test_incomplete_waits(void **state) {
    (void)state;
    const char *good = POST "Content-Length: 2\r\n\r\n{}";
    struct api_error e;
    size_t head = strlen(good) - 2;
    for (size_t n = 0; n < head; n++)
        assert_int_equal(reqhead_screen(good, n, REQHEAD_VIEW, &e, &end), REQHEAD_MORE);
    assert_int_equal(reqhead_screen(good, head, REQHEAD_VIEW, &e, &end), REQHEAD_PASS);
    assert_int_equal(end, head + 2); /* its body is not here yet; where it ends is known */
    assert_int_equal(reqhead_screen(good, head + 2, REQHEAD_VIEW, &e, &end), REQHEAD_PASS);
    assert_int_equal(end, head + 2);
    /* a bad Content-Length is refused once its line is here */
    const char *whole = POST "Content-Length: -1\r\nX-A: b\r\n\r\n";
    size_t line_end = strlen(POST "Content-Length: -1\r\n");
    for (size_t n = 0; n < line_end; n++)
        assert_int_equal(reqhead_screen(whole, n, REQHEAD_VIEW, &e, &end), REQHEAD_MORE);
    for (size_t n = line_end; n <= strlen(whole); n++)
        assert_int_equal(reqhead_screen(whole, n, REQHEAD_VIEW, &e, &end), REQHEAD_REFUSE);
    /* with the view full and no end of the head: libmicrohttpd answers 431 */
    assert_int_equal(reqhead_screen(whole, 20, 20, &e, &end), REQHEAD_PASS);
}

static void test_chunk_lines(void **state) {
    (void)state;
    int st;
    const char *head = POST "Transfer-Encoding: chunked\r\n\r\n";
    char *buf = malloc(8192);
    /* the first chunk-size line is waited for, then judged */
    assert_int_equal(screen(head, &st), REQHEAD_MORE);
    snprintf(buf, 8192, "%s2;ext=1", head);
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    snprintf(buf, 8192, "%s2;ext=1\r\n{}\r\n0\r\n\r\n", head);
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    /* too long, complete or not */
    int n = snprintf(buf, 8192, "%s2;", head);
    memset(buf + n, 'e', 2000);
    buf[n + 2000] = 0;
    assert_int_equal(screen(buf, &st), REQHEAD_REFUSE);
    assert_int_equal(st, 400);
    strcpy(buf + n + 2000, "\r\n{}\r\n0\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_REFUSE);
    /* a later one in view */
    n = snprintf(buf, 8192, "%s2\r\n{}\r\n1;", head);
    memset(buf + n, 'e', 2000);
    strcpy(buf + n + 2000, "\r\n \r\n0\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_REFUSE);
    /* the whole body is waited for (every chunk-size line is judged here), 413 if it does
     * not fit in the view */
    n = snprintf(buf, 8192, "%s10\r\n{}", head);
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    struct api_error e;
    assert_int_equal(reqhead_screen(buf, (size_t)n, (size_t)n, &e, &end), REQHEAD_REFUSE);
    assert_int_equal(e.status, 413);
    n = snprintf(buf, 8192, "%s2\r\n{}\r", head);
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    assert_int_equal(reqhead_screen(buf, (size_t)n, (size_t)n, &e, &end), REQHEAD_REFUSE);
    snprintf(buf, 8192, "%s2\r\n{}\r\n0\r\n", head);
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    /* a bad size, or data without its line end: libmicrohttpd's to judge */
    snprintf(buf, 8192, "%szz\r\n{}\r\n0\r\n\r\n", head);
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    snprintf(buf, 8192, "%s2\r\n{}xx", head);
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    /* where the request ends, when all of it is in view: a chunked body's trailers, a GET */
    n = snprintf(buf, 8192, "%s2\r\n{}\r\n0;x=1\r\nT: 1\r\n\r\n", head);
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    assert_int_equal(end, (size_t)n);
    strcpy(buf + n, "GET /health HTTP/1.1\r\n\r\n"); /* pipelined: it ends before the view */
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    assert_int_equal(end, (size_t)n);
    assert_int_equal(screen(buf + n, &st), REQHEAD_PASS);
    assert_int_equal(end, strlen(buf + n));
    buf[n - 2] = 0; /* the trailers' end not here */
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    /* a client waiting for 100 Continue sends no body yet: it is asked for it (HTTP/1.1) */
    n = snprintf(buf, 8192, POST "Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_CONTINUE);
    snprintf(buf + n, 8192 - (size_t)n, "2\r\n{}\r\n0\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    assert_int_equal(end, strlen(buf));
    snprintf(buf, 8192,
             "POST / HTTP/1.0\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_MORE);
    snprintf(buf, 8192, POST "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_PASS); /* libmicrohttpd reads that body right */
    /* not chunked for libmicrohttpd (http.c refuses it) */
    snprintf(buf, 8192, POST "Transfer-Encoding: gzip, chunked\r\n\r\n");
    assert_int_equal(screen(buf, &st), REQHEAD_PASS);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_length),
        cmocka_unit_test(test_incomplete_waits),
        cmocka_unit_test(test_chunk_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
