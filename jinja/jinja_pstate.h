/* The state shared by Jinja's expression parser (jinja_expr.c) and statement parser
 * (jinja_parse.c): the token cursor, error reporting, node allocation in the template's
 * arena and growable arrays. Internal to jinja/: the loading thread only. */
#ifndef TPD_JINJA_PSTATE_H
#define TPD_JINJA_PSTATE_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "jinja_lex.h"
#include "jinja_parse.h"

struct parser {
    struct lexer *L;
    size_t i;
    struct jtemplate *tpl;
    struct arena *a;
    int depth; /* recursion guard: nesting of expressions and blocks */
};

#define MAX_NESTING 200

static inline struct tok *cur(struct parser *P) { return &P->L->toks[P->i]; }

static inline int fail(struct parser *P, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int fail(struct parser *P, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    jinja_lex_vfail(P->L, cur(P)->line, fmt, ap);
    va_end(ap);
    return -1;
}

static inline int is_op(struct tok *t, const char *op) {
    return t->t == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static inline int is_name(struct tok *t, const char *name) {
    return t->t == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static inline int expect_op(struct parser *P, const char *op) {
    if (!is_op(cur(P), op))
        return fail(P, "expected '%s', found '%.*s'", op, (int)cur(P)->n, cur(P)->s);
    P->i++;
    return 0;
}

static inline struct jnode *node(struct parser *P, enum jn_kind k) {
    struct jnode *n = arena_alloc(P->a, sizeof(*n));
    if (!n) {
        fail(P, "out of memory");
        return NULL;
    }
    n->k = k;
    n->line = cur(P)->line;
    return n;
}

/* growable node/name arrays during parsing */
struct nvec {
    struct jnode **v;
    size_t n, cap;
};
struct svec {
    struct jv *v;
    size_t n, cap;
};

static inline int nvec_push(struct parser *P, struct nvec *v, struct jnode *x) {
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 4;
        struct jnode **p = arena_alloc(P->a, c * sizeof(*p));
        if (!p) return fail(P, "out of memory");
        if (v->n) memcpy(p, v->v, v->n * sizeof(*p));
        v->v = p;
        v->cap = c;
    }
    v->v[v->n++] = x;
    return 0;
}

static inline int svec_push(struct parser *P, struct svec *v, struct jv x) {
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 4;
        struct jv *p = arena_alloc(P->a, c * sizeof(*p));
        if (!p) return fail(P, "out of memory");
        if (v->n) memcpy(p, v->v, v->n * sizeof(*p));
        v->v = p;
        v->cap = c;
    }
    v->v[v->n++] = x;
    return 0;
}

static inline struct jv tok_str(struct parser *P, struct tok *t) {
    return jv_str(P->a, t->s, t->n);
}

/* The current token, a name ("expected WHAT name" otherwise), into n->lit; the cursor moves
 * past it. */
static inline int take_name(struct parser *P, struct jnode *n, const char *what) {
    if (cur(P)->t != TK_NAME) return fail(P, "expected %s name", what);
    n->lit = tok_str(P, cur(P));
    P->i++;
    return 0;
}

/* The expression parser (jinja_expr.c): a whole expression (with `a if c else b`); one
 * without the conditional (for a `for` loop's iterable, which its own `if` follows); a
 * call's arguments after '(' was consumed, into n. */
struct jnode *jinja_parse_expr(struct parser *P);
struct jnode *jinja_parse_or(struct parser *P);
int jinja_parse_call_args(struct parser *P, struct jnode *n);

#endif
