/* A growable byte buffer, always NUL-terminated (response bodies, SSE events, metrics
 * text, request bytes). Out of memory is fatal, as everywhere in tpd. Any thread; one
 * buffer belongs to one thread at a time. */
#ifndef TPD_SBUF_H
#define TPD_SBUF_H

#include <stddef.h>
#include <stdio.h>

struct sbuf {
    char *p;
    size_t len, cap;
};

void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_adds(struct sbuf *b, const char *s);
/* printf-style append (any length). */
void sbuf_addf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the rest of f up to its end; b->p is non-NULL afterwards even when f was empty.
 * Returns 0, or -1 on a read error (what was read stays in b). */
int sbuf_add_stream(struct sbuf *b, FILE *f);
void sbuf_free(struct sbuf *b);

#endif
