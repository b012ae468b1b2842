/* A first look at each request's head (and at the chunk-size lines of a chunked body, all
 * of which must be in view), taken by conns.c from what the socket holds before
 * libmicrohttpd reads a byte of it. libmicrohttpd 0.9.75 answers some malformed requests
 * wrongly: a bad Content-Length gets its 400/413 header block twice, the first without a
 * body, and a chunk-size line longer than its buffer a 500; those are answered here with
 * one 4xx. Anything else, well-formed or not, is left to libmicrohttpd. Pure; any thread. */
#ifndef TPD_REQHEAD_H
#define TPD_REQHEAD_H

#include <stddef.h>

#include "api_err.h"

#define REQHEAD_VIEW (64 * 1024)    /* bytes of a connection looked at, at most */
#define REQHEAD_CHUNK_LINE_MAX 1024 /* a chunk-size line (extensions included) beyond this: 400 */

enum reqhead_verdict {
    REQHEAD_MORE,     /* the head (or a chunked body) is not all here yet */
    REQHEAD_CONTINUE, /* as MORE, and the client waits for 100 Continue before its chunked body */
    REQHEAD_PASS,     /* hand it to libmicrohttpd */
    REQHEAD_REFUSE,   /* answer e (400 or 413) and close */
};

/* buf[0..len): the bytes the client sent so far, len <= cap (the caller's view). A head
 * still incomplete with the view full passes (libmicrohttpd answers 431). A chunked body
 * is waited for until all of it is in view (413 if it does not fit); a Content-Length
 * body is not (libmicrohttpd reads it right). On a pass, *end is the offset just past the request
 * (head, body, trailers) when its length is known (a Content-Length body may end past len), else
 * 0: the caller learns whether the client sent more behind it (pipelined, *end < len) or
 * libmicrohttpd will read more of it from the socket (*end > len). */
enum reqhead_verdict reqhead_screen(const char *buf, size_t len, size_t cap, struct api_error *e,
                                    size_t *end);

#endif
