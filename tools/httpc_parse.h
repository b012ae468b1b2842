/* Incremental HTTP/1.1 response parser for tpctl: status line, headers (bounded), and a body
 * framed by Content-Length, chunked transfer coding, or connection close. Pure state machine
 * over caller-supplied bytes (no I/O); one parser per response, owned by one thread. */
#ifndef TPD_HTTPC_PARSE_H
#define TPD_HTTPC_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define HTTP_MAX_LINE 8192  /* one status, header, chunk-size or trailer line */
#define HTTP_MAX_HEAD 65536 /* all header (or trailer) lines of one response */
#define HTTP_MAX_HEADERS 100
#define HTTP_MAX_CONTENT_TYPE 128

enum http_parse_state {
    HP_STATUS,        /* expecting the status line */
    HP_HEADERS,       /* header lines until the empty one */
    HP_BODY_LENGTH,   /* Content-Length bytes left in `remaining` */
    HP_BODY_CLOSE,    /* body runs until the server closes the connection */
    HP_CHUNK_SIZE,    /* chunk-size [; ext] line */
    HP_CHUNK_DATA,    /* `remaining` bytes of chunk data */
    HP_CHUNK_DATA_CR, /* CRLF after chunk data */
    HP_CHUNK_DATA_LF,
    HP_TRAILER, /* trailer lines after the last chunk */
    HP_DONE,
};

struct http_parser {
    enum http_parse_state state;
    int head_complete; /* the final (non-1xx) head has been parsed */
    int status;        /* e.g. 200 */
    int minor_version; /* HTTP/1.x */
    int keep_alive;    /* the connection may carry another request after this response */
    int chunked;
    int has_length;
    uint64_t content_length;
    uint64_t remaining;
    char content_type[HTTP_MAX_CONTENT_TYPE]; /* as sent, truncated; "" if absent */

    /* bounded line assembly across feeds */
    char line[HTTP_MAX_LINE];
    size_t line_len;
    size_t head_bytes;
    int n_headers;
    int flags; /* private: what Transfer-Encoding and Connection said */
};

/* Called with each piece of decoded body; returning non-zero aborts the parse. */
typedef int (*http_body_fn)(void *ud, const char *data, size_t n);

void http_parser_init(struct http_parser *p);

/* Consumes bytes of the response. Stops early right after the final head is complete (so
 * the caller may look at status and headers before any body byte is delivered) and at the
 * end of the message (state HP_DONE); bytes after the end are left unconsumed. Returns the
 * number of bytes consumed, or -1 with err on malformed input or when on_body aborted. */
long http_parser_feed(struct http_parser *p, const char *data, size_t n, http_body_fn on_body,
                      void *ud, char *err);

/* The connection reached end of file: returns 0 when that legitimately ends the message
 * (a close-delimited body, or the message was already complete), else -1 with err. */
int http_parser_eof(struct http_parser *p, char *err);

#endif
