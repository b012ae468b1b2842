/* Chat-template lexer: splits Jinja source into text and tag tokens, applying jinja2's
 * whitespace control as HF configures it (trim_blocks, lstrip_blocks, '-' and '+'). Used
 * by jinja_parse.c at load time only, on the loading thread. */
#ifndef TPD_JINJA_LEX_H
#define TPD_JINJA_LEX_H

#include <stdarg.h>
#include <stddef.h>

#include "jinja_value.h"

enum tk {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STR,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF
};

struct tok {
    enum tk t;
    const char *s;
    size_t n;
    struct jv v;
    int line;
};

struct lexer {
    struct arena *a; /* string literals live here: the template's arena */
    const char *src;
    size_t len, pos;
    int line;
    struct tok *toks;
    size_t n, cap;
    char *err;
    int failed;
};

/* Fills L->toks (malloc'd; ends with TK_EOF). Returns 0, or -1 with L->err set. */
int jinja_lex(struct lexer *L);

/* Records a load error "template line N: ..." in L->err unless one is already there (the
 * first error wins; the parser reports through this too). Always returns -1. */
int jinja_lex_vfail(struct lexer *L, int line, const char *fmt, va_list ap);

#endif
