#include "httpc_parse.h"

#include <string.h>
#include <strings.h>

#include "util/err.h"

/* Bits of http_parser.flags. */
#define F_CHUNKED 1    /* Transfer-Encoding ended in chunked */
#define F_CLOSE 2      /* Connection: close */
#define F_KEEP_ALIVE 4 /* Connection: keep-alive (matters for HTTP/1.0) */

void http_parser_init(struct http_parser *p) {
    memset(p, 0, sizeof *p);
    p->state = HP_STATUS;
}

static int is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
    return strchr("!#$%&'*+-.^_`|~", c) != NULL && c != 0;
}

/* Field values and reason phrases: visible ASCII, SP, HTAB and obs-text; no CR, LF, NUL. */
static int text_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
    }
    return 1;
}

static void trim(const char **s, size_t *n) {
    while (*n && (**s == ' ' || **s == '\t')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

/* Calls fn on each comma-separated, trimmed, non-empty element of a list-valued field. */
static int for_each_token(const char *v, size_t n,
                          int (*fn)(struct http_parser *, const char *, size_t, char *),
                          struct http_parser *p, char *err) {
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && v[j] != ',') j++;
        const char *t = v + i;
        size_t tn = j - i;
        trim(&t, &tn);
        if (tn && fn(p, t, tn, err)) return -1;
        i = j + 1;
    }
    return 0;
}

static int token_is(const char *t, size_t n, const char *word) {
    return strlen(word) == n && strncasecmp(t, word, n) == 0;
}

static int te_token(struct http_parser *p, const char *t, size_t n, char *err) {
    if (p->flags & F_CHUNKED) return err_set(err, "chunked must be the last transfer coding");
    if (!token_is(t, n, "chunked"))
        return err_set(err, "unsupported transfer coding '%.*s'", (int)(n > 40 ? 40 : n), t);
    p->flags |= F_CHUNKED;
    return 0;
}

static int conn_token(struct http_parser *p, const char *t, size_t n, char *err) {
    (void)err;
    if (token_is(t, n, "close")) p->flags |= F_CLOSE;
    if (token_is(t, n, "keep-alive")) p->flags |= F_KEEP_ALIVE;
    return 0;
}

static int parse_status_line(struct http_parser *p, const char *s, size_t n, char *err) {
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0 || s[7] < '0' || s[7] > '9' || s[8] != ' ')
        return err_set(err, "malformed status line (not an HTTP/1.x response)");
    for (int i = 9; i < 12; i++)
        if (s[i] < '0' || s[i] > '9') return err_set(err, "malformed status code");
    if (n > 12 && s[12] != ' ') return err_set(err, "malformed status line after the code");
    if (!text_ok(s + 12, n - 12)) return err_set(err, "control character in the reason phrase");
    p->minor_version = s[7] - '0';
    p->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    if (p->status < 100) return err_set(err, "status code %d out of range", p->status);
    return 0;
}

static int parse_content_length(struct http_parser *p, const char *v, size_t n, char *err) {
    if (n == 0) return err_set(err, "empty Content-Length");
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return err_set(err, "malformed Content-Length");
        if (size_mul(x, 10, &x) || size_add(x, (uint64_t)(v[i] - '0'), &x))
            return err_set(err, "Content-Length overflows");
    }
    if (p->has_length && p->content_length != x)
        return err_set(err, "conflicting Content-Length headers");
    p->has_length = 1;
    p->content_length = x;
    return 0;
}

static int parse_header_line(struct http_parser *p, const char *s, size_t n, int trailer,
                             char *err) {
    if (s[0] == ' ' || s[0] == '\t') return err_set(err, "obsolete header line folding");
    const char *colon = memchr(s, ':', n);
    if (!colon || colon == s) return err_set(err, "malformed header line");
    size_t nn = (size_t)(colon - s);
    for (size_t i = 0; i < nn; i++)
        if (!is_tchar((unsigned char)s[i]))
            return err_set(err, "invalid character in a header name");
    const char *v = colon + 1;
    size_t vn = n - nn - 1;
    if (!text_ok(v, vn)) return err_set(err, "control character in a header value");
    trim(&v, &vn);
    if (++p->n_headers > HTTP_MAX_HEADERS)
        return err_set(err, "more than %d header lines", HTTP_MAX_HEADERS);
    if (trailer) return 0; /* trailers cannot change framing; their content is ignored */
    if (token_is(s, nn, "content-length")) return parse_content_length(p, v, vn, err);
    if (token_is(s, nn, "transfer-encoding")) return for_each_token(v, vn, te_token, p, err);
    if (token_is(s, nn, "connection")) return for_each_token(v, vn, conn_token, p, err);
    if (token_is(s, nn, "content-type")) {
        size_t k = vn < sizeof p->content_type - 1 ? vn : sizeof p->content_type - 1;
        memcpy(p->content_type, v, k);
        p->content_type[k] = 0;
    }
    return 0;
}

/* The empty line after the head: decide how the body is framed. */
static int end_of_head(struct http_parser *p, char *err) {
    if (p->status < 200) {
        if (p->status == 101) return err_set(err, "unexpected protocol switch (101)");
        /* interim response: the real one follows; head_bytes keeps counting so that a flood
         * of 1xx responses is still bounded */
        size_t hb = p->head_bytes;
        http_parser_init(p);
        p->head_bytes = hb;
        return 0;
    }
    int flags = p->flags;
    p->chunked = (flags & F_CHUNKED) != 0;
    if (p->minor_version >= 1) p->keep_alive = !(flags & F_CLOSE);
    else p->keep_alive = (flags & F_KEEP_ALIVE) && !(flags & F_CLOSE);
    p->head_complete = 1;
    if (p->status == 204 || p->status == 304) {
        p->state = HP_DONE;
    } else if (p->chunked) {
        /* Transfer-Encoding overrides Content-Length; such a message is suspect, so the
         * connection is not reused (RFC 9112 6.3) */
        if (p->has_length) p->keep_alive = 0;
        p->state = HP_CHUNK_SIZE;
    } else if (p->has_length) {
        p->remaining = p->content_length;
        p->state = p->remaining ? HP_BODY_LENGTH : HP_DONE;
    } else {
        p->keep_alive = 0;
        p->state = HP_BODY_CLOSE;
    }
    return 0;
}

static int parse_chunk_size(struct http_parser *p, const char *s, size_t n, char *err) {
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0) break;
        if (v > (UINT64_MAX >> 4)) return err_set(err, "chunk size overflows");
        v = (v << 4) | (uint64_t)d;
    }
    if (i == 0) return err_set(err, "malformed chunk size");
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i < n && s[i] != ';') return err_set(err, "malformed chunk size");
    if (!text_ok(s + i, n - i)) return err_set(err, "control character in a chunk extension");
    if (v == 0) {
        p->state = HP_TRAILER;
        p->head_bytes = 0;
        p->n_headers = 0;
    } else {
        p->remaining = v;
        p->state = HP_CHUNK_DATA;
    }
    return 0;
}

/* One complete line (without its LF; a CR before the LF is stripped here). */
static int process_line(struct http_parser *p, char *err) {
    size_t n = p->line_len;
    const char *s = p->line;
    if (n && s[n - 1] == '\r') n--;
    p->line_len = 0;
    if (memchr(s, '\r', n)) return err_set(err, "bare CR in a line");
    switch (p->state) {
    case HP_STATUS:
        if (n == 0) return 0; /* tolerate stray empty lines before a response */
        if (parse_status_line(p, s, n, err)) return -1;
        p->state = HP_HEADERS;
        return 0;
    case HP_HEADERS:
        if (n == 0) return end_of_head(p, err);
        return parse_header_line(p, s, n, 0, err);
    case HP_CHUNK_SIZE: return parse_chunk_size(p, s, n, err);
    case HP_TRAILER:
        if (n == 0) {
            p->state = HP_DONE;
            return 0;
        }
        return parse_header_line(p, s, n, 1, err);
    default: return err_set(err, "internal: line in state %d", (int)p->state);
    }
}

static int line_state(enum http_parse_state s) {
    return s == HP_STATUS || s == HP_HEADERS || s == HP_CHUNK_SIZE || s == HP_TRAILER;
}

long http_parser_feed(struct http_parser *p, const char *data, size_t n, http_body_fn on_body,
                      void *ud, char *err) {
    size_t i = 0;
    while (i < n && p->state != HP_DONE) {
        if (line_state(p->state)) {
            const char *nl = memchr(data + i, '\n', n - i);
            size_t take = nl ? (size_t)(nl - (data + i)) : n - i;
            int counts_head = p->state != HP_CHUNK_SIZE;
            if (p->line_len + take >= HTTP_MAX_LINE)
                return err_set(err, "%s line longer than %d bytes",
                               p->state == HP_CHUNK_SIZE ? "chunk-size" : "header", HTTP_MAX_LINE);
            if (counts_head && p->head_bytes + take + 1 > HTTP_MAX_HEAD)
                return err_set(err, "%s longer than %d bytes",
                               p->state == HP_TRAILER ? "trailer" : "response head", HTTP_MAX_HEAD);
            memcpy(p->line + p->line_len, data + i, take);
            p->line_len += take;
            i += take;
            if (counts_head) p->head_bytes += take;
            if (!nl) break;
            i++; /* the LF */
            if (counts_head) p->head_bytes++;
            int had_head = p->head_complete;
            if (process_line(p, err)) return -1;
            if (!had_head && p->head_complete) return (long)i; /* let the caller see the head */
            continue;
        }
        switch (p->state) {
        case HP_BODY_LENGTH:
        case HP_CHUNK_DATA:
        case HP_BODY_CLOSE: {
            size_t take = n - i;
            if (p->state != HP_BODY_CLOSE && take > p->remaining) take = (size_t)p->remaining;
            if (take && on_body && on_body(ud, data + i, take))
                return err_set(err, "body handler aborted");
            i += take;
            if (p->state != HP_BODY_CLOSE) {
                p->remaining -= take;
                if (p->remaining == 0)
                    p->state = p->state == HP_BODY_LENGTH ? HP_DONE : HP_CHUNK_DATA_CR;
            }
            break;
        }
        case HP_CHUNK_DATA_CR:
            if (data[i] == '\r') p->state = HP_CHUNK_DATA_LF;
            else if (data[i] == '\n') p->state = HP_CHUNK_SIZE;
            else return err_set(err, "chunk data longer than its declared size");
            i++;
            break;
        case HP_CHUNK_DATA_LF:
            if (data[i] != '\n') return err_set(err, "chunk data longer than its declared size");
            p->state = HP_CHUNK_SIZE;
            i++;
            break;
        default: return err_set(err, "internal: parser state %d", (int)p->state);
        }
    }
    return (long)i;
}

int http_parser_eof(struct http_parser *p, char *err) {
    switch (p->state) {
    case HP_DONE: return 0;
    case HP_BODY_CLOSE: p->state = HP_DONE; return 0;
    case HP_STATUS:
        if (p->line_len == 0 && p->head_bytes == 0)
            return err_set(err, "server closed the connection without a response");
        return err_set(err, "connection closed in the middle of the response head");
    case HP_HEADERS: return err_set(err, "connection closed in the middle of the response head");
    case HP_BODY_LENGTH:
        return err_set(err, "connection closed with %llu of %llu body bytes missing",
                       (unsigned long long)p->remaining, (unsigned long long)p->content_length);
    default: return err_set(err, "connection closed in the middle of a chunked body");
    }
}
