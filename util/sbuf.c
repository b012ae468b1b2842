#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fatal.h"

static void sbuf_reserve(struct sbuf *b, size_t n) {
    if (b->len + n + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

void sbuf_add(struct sbuf *b, const char *s, size_t n) {
    sbuf_reserve(b, n);
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sbuf_adds(struct sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_addf(struct sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sbuf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

int sbuf_add_stream(struct sbuf *b, FILE *f) {
    char chunk[1 << 16];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) sbuf_add(b, chunk, r);
    sbuf_add(b, "", 0);
    return ferror(f) ? -1 : 0;
}

void sbuf_free(struct sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
