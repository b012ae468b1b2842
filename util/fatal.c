#include "fatal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*fatal_hook)(int code);

void fatal_set_hook(void (*hook)(int code)) { fatal_hook = hook; }

void fatal_exit(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tpd: fatal: %s (%s:%d)\n", msg, file, line);
    fflush(stderr);
    if (fatal_hook) fatal_hook(1);
    exit(1);
}

void fatal_abort(int code) {
    fflush(stderr);
    if (fatal_hook) fatal_hook(code);
    exit(code);
}

void *xmalloc(unsigned long n) {
    void *p = malloc(n ? n : 1);
    if (!p) FATAL("out of memory allocating %lu bytes", n);
    return p;
}

void *xcalloc(unsigned long n, unsigned long size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) FATAL("out of memory allocating %lu x %lu bytes", n, size);
    return p;
}

void *xrealloc(void *p, unsigned long n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) FATAL("out of memory growing a buffer to %lu bytes", n);
    return q;
}

char *xstrdup(const char *s) {
    char *d = strdup(s);
    if (!d) FATAL("out of memory copying a %zu-byte string", strlen(s));
    return d;
}

char *xstrndup(const char *s, unsigned long n) {
    char *d = strndup(s, n);
    if (!d) FATAL("out of memory copying a string of up to %lu bytes", n);
    return d;
}
