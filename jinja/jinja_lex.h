/* Chat-template lexer: splits Jinja source into text and tag tokens, applying jinja2's
 * whitespace control as HF configures it (trim_blocks, lstrip_blocks, '-' and '+'). Used
 * by jinja_parse.c at load time only. */
#ifndef TPD_TOK_JINJA_LEX_H
#define TPD_TOK_JINJA_LEX_H

#include <stddef.h>

#include "jinja_parse.h"

enum tk { TK_TEXT, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STR,
          TK_INT, TK_FLOAT, TK_OP, TK_EOF };

struct tok {
    enum tk t;
    const char *s;
    size_t n;
    struct jv v;
    int line;
};

struct lexer {
    struct jtemplate *tpl;
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

#endif
