#include "reqhead.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

/* The next line from *pos: its start and length without its CR LF (libmicrohttpd takes a
 * bare LF too). 0 when no LF is in view. */
static int next_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n) {
    const char *lf = memchr(buf + *pos, '\n', len - *pos);
    if (!lf) return 0;
    *line = buf + *pos;
    *n = (size_t)(lf - *line);
    if (*n && (*line)[*n - 1] == '\r') (*n)--;
    *pos = (size_t)(lf - buf) + 1;
    return 1;
}

/* The field's value if the line is "name:value" (name matched without case, as
 * libmicrohttpd looks fields up), after the leading blanks libmicrohttpd skips (it keeps
 * trailing ones). NULL if the line is another field. */
static const char *field_value(const char *line, size_t n, const char *name, size_t *vn) {
    size_t k = strlen(name);
    if (n <= k || line[k] != ':' || strncasecmp(line, name, k)) return NULL;
    const char *v = line + k + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    *vn = (size_t)(end - v);
    return v;
}

/* 0 (*val the value), or the status a Content-Length value earns: 400 unless 1*DIGIT, 413
 * past 2^64 - 1. */
static int content_length_status(const char *v, size_t n, uint64_t *val) {
    if (n == 0) return 400;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return 400;
        if (__builtin_mul_overflow(x, 10, &x) ||
            __builtin_add_overflow(x, (uint64_t)(v[i] - '0'), &x)) {
            for (size_t j = i + 1; j < n; j++)
                if (v[j] < '0' || v[j] > '9') return 400;
            return 413;
        }
    }
    *val = x;
    return 0;
}

/* The end of the trailer section from pos (after the last chunk's size line): the offset
 * past its empty line, or 0 if that is not in view. */
static size_t trailer_end(const char *buf, size_t len, size_t pos) {
    const char *line;
    size_t n;
    while (next_line(buf, len, &pos, &line, &n))
        if (n == 0) return pos;
    return 0;
}

/* What a chunked body not yet all here earns: wait while the view has room, else 413 (its
 * chunk-size lines past the view would be libmicrohttpd's to judge, and it answers an
 * over-long one with 500). */
static enum reqhead_verdict chunks_wait(size_t len, size_t cap, struct api_error *e) {
    if (len < cap) return REQHEAD_MORE;
    api_err(e, 413, "",
            "a chunked request body must end within the first %d KiB of the request; send a "
            "longer body with Content-Length",
            REQHEAD_VIEW / 1024);
    return REQHEAD_REFUSE;
}

/* The chunked body from pos, waited for until all of it (trailers included) is in view, so
 * that every chunk-size line is judged here. A size libmicrohttpd judges right itself (a
 * bad hex number, one past 2^64) passes. *end: past the body's end. */
static enum reqhead_verdict screen_chunks(const char *buf, size_t len, size_t cap, size_t pos,
                                          struct api_error *e, size_t *end) {
    for (;;) {
        size_t start = pos, n;
        const char *line;
        if (!next_line(buf, len, &pos, &line, &n)) {
            if (len - start > REQHEAD_CHUNK_LINE_MAX) break;
            return chunks_wait(len, cap, e);
        }
        if (n > REQHEAD_CHUNK_LINE_MAX) break;
        uint64_t size = 0;
        size_t i = 0;
        for (; i < n && line[i] != ';'; i++) {
            int d = line[i] >= '0' && line[i] <= '9'   ? line[i] - '0'
                    : line[i] >= 'a' && line[i] <= 'f' ? line[i] - 'a' + 10
                    : line[i] >= 'A' && line[i] <= 'F' ? line[i] - 'A' + 10
                                                       : -1;
            if (d < 0 || size >> 60) return REQHEAD_PASS;
            size = size * 16 + (uint64_t)d;
        }
        if (i == 0) return REQHEAD_PASS; /* no size: libmicrohttpd's 400 */
        if (size == 0) {                 /* the last chunk */
            *end = trailer_end(buf, len, pos);
            return *end ? REQHEAD_PASS : chunks_wait(len, cap, e);
        }
        if (size > len - pos) return chunks_wait(len, cap, e);
        pos += (size_t)size;
        if (len - pos >= 2 && buf[pos] == '\r' && buf[pos + 1] == '\n') pos += 2;
        else if (len - pos >= 1 && buf[pos] == '\n') pos += 1;
        else if (len - pos == 0 || (len - pos == 1 && buf[pos] == '\r'))
            return chunks_wait(len, cap, e);
        else return REQHEAD_PASS; /* no line end after the data: libmicrohttpd's to judge */
    }
    api_err(e, 400, "", "a chunk-size line of the request body is longer than %d bytes",
            REQHEAD_CHUNK_LINE_MAX);
    return REQHEAD_REFUSE;
}

enum reqhead_verdict reqhead_screen(const char *buf, size_t len, size_t cap, struct api_error *e,
                                    size_t *end) {
    size_t pos = 0, n, vn;
    const char *line, *v;
    int request_line = 0, after_cl = 0, chunked = 0, expect = 0, have_cl = 0, http11 = 0;
    uint64_t cl = 0;
    *end = 0;
    for (;;) {
        if (!next_line(buf, len, &pos, &line, &n)) return len < cap ? REQHEAD_MORE : REQHEAD_PASS;
        if (!request_line) { /* empty lines before it are skipped */
            request_line = n > 0;
            /* without a version libmicrohttpd answers 400 at once: nothing to wait for */
            const char *sp = memrchr(line, ' ', n);
            if (n && (!sp || line + n - sp < 6 || memcmp(sp + 1, "HTTP/", 5))) return REQHEAD_PASS;
            http11 = n && line + n - sp == 9 && !memcmp(sp + 1, "HTTP/1.1", 8);
            continue;
        }
        if (n == 0) break; /* the end of the head */
        if (line[0] != ' ' && line[0] != '\t' && !memchr(line, ':', n))
            return REQHEAD_PASS;                 /* 400 */
        if (line[0] == ' ' || line[0] == '\t') { /* obs-fold: the previous field goes on */
            if (!after_cl) continue;
            api_err(e, 400, "", "malformed Content-Length (folded over lines)");
            return REQHEAD_REFUSE;
        }
        after_cl = 0;
        if ((v = field_value(line, n, "Content-Length", &vn))) {
            after_cl = 1;
            uint64_t x = 0;
            int st = content_length_status(v, vn, &x), shown = vn < 40 ? (int)vn : 40;
            if (st == 400) api_err(e, 400, "", "malformed Content-Length \"%.*s\"", shown, v);
            const char *more = vn > 40 ? "..." : "";
            if (st == 413)
                api_err(e, 413, "", "Content-Length %.*s%s is too large", shown, v, more);
            if (st) return REQHEAD_REFUSE;
            if (!have_cl) cl = x; /* libmicrohttpd reads the first (http.c refuses two) */
            have_cl = 1;
        } else if ((v = field_value(line, n, "Transfer-Encoding", &vn))) {
            chunked |= vn == 7 && !strncasecmp(v, "chunked", 7);
        } else if ((v = field_value(line, n, "Expect", &vn))) {
            expect = vn == 12 && !strncasecmp(v, "100-continue", 12);
        }
    }
    /* libmicrohttpd answers 100 Continue only once it has the head, and the body is waited
     * for here first */
    if (chunked && expect && http11 && pos == len) return REQHEAD_CONTINUE;
    if (chunked) return screen_chunks(buf, len, cap, pos, e, end);
    if (cl <= SIZE_MAX - pos) *end = pos + (size_t)cl; /* its body opaque to libmicrohttpd */
    return REQHEAD_PASS;
}
