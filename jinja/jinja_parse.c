#include "jinja_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_lex.h"

/* ---- parser ---- */

struct parser {
    struct lexer *L;
    size_t i;
    struct jtemplate *tpl;
    struct arena *a;
    int depth; /* recursion guard: nesting of expressions and blocks */
};

#define MAX_NESTING 200

static struct tok *cur(struct parser *P) { return &P->L->toks[P->i]; }

static int fail(struct parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *P, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    jinja_lex_vfail(P->L, cur(P)->line, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_op(struct tok *t, const char *op) {
    return t->t == TK_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static int is_name(struct tok *t, const char *name) {
    return t->t == TK_NAME && t->n == strlen(name) && !memcmp(t->s, name, t->n);
}

static int expect_op(struct parser *P, const char *op) {
    if (!is_op(cur(P), op))
        return fail(P, "expected '%s', found '%.*s'", op, (int)cur(P)->n, cur(P)->s);
    P->i++;
    return 0;
}

static struct jnode *node(struct parser *P, enum jn_kind k) {
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

static int nvec_push(struct parser *P, struct nvec *v, struct jnode *x) {
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

static int svec_push(struct parser *P, struct svec *v, struct jv x) {
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

static struct jv tok_str(struct parser *P, struct tok *t) { return jv_str(P->a, t->s, t->n); }

static struct jnode *parse_expr(struct parser *P);
static struct jnode *parse_or(struct parser *P);
static struct jnode *parse_unary(struct parser *P, int with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *e, int with_filter);

/* (args, kw=args) after '(' was consumed */
static int parse_call_args(struct parser *P, struct jnode *n) {
    struct nvec args = {0}, kwv = {0};
    struct svec kwn = {0};
    while (!is_op(cur(P), ")")) {
        if (cur(P)->t == TK_NAME && is_op(&P->L->toks[P->i + 1], "=")) {
            if (svec_push(P, &kwn, tok_str(P, cur(P)))) return -1;
            P->i += 2;
            struct jnode *v = parse_expr(P);
            if (!v || nvec_push(P, &kwv, v)) return -1;
        } else {
            if (kwn.n) return fail(P, "positional argument after keyword argument");
            struct jnode *v = parse_expr(P);
            if (!v || nvec_push(P, &args, v)) return -1;
        }
        if (!is_op(cur(P), ",")) break;
        P->i++;
    }
    if (expect_op(P, ")")) return -1;
    n->args = args.v;
    n->n_args = args.n;
    n->kwvals = kwv.v;
    n->kwnames = kwn.v;
    n->n_kw = kwn.n;
    return 0;
}

/* e.name or e.0 ('.' is the current token) */
static struct jnode *parse_attr(struct parser *P, struct jnode *e) {
    P->i++;
    struct tok *nm = cur(P);
    if (nm->t != TK_NAME && nm->t != TK_INT) {
        fail(P, "expected attribute name after '.'");
        return NULL;
    }
    struct jnode *n = node(P, nm->t == TK_NAME ? JN_ATTR : JN_ITEM);
    if (!n) return NULL;
    n->a = e;
    if (nm->t == TK_NAME) n->lit = tok_str(P, nm);
    else {
        n->b = node(P, JN_LIT);
        if (!n->b) return NULL;
        n->b->lit = nm->v;
    }
    P->i++;
    return n;
}

/* e[i] or e[start:stop:step] ('[' is the current token) */
static struct jnode *parse_subscript(struct parser *P, struct jnode *e) {
    P->i++;
    struct jnode *parts[3] = {NULL, NULL, NULL};
    int k = 0, slice = 0;
    for (;;) {
        if (is_op(cur(P), ":")) {
            slice = 1;
            if (++k > 2) {
                fail(P, "bad slice");
                return NULL;
            }
            P->i++;
            continue;
        }
        if (is_op(cur(P), "]")) break;
        parts[k] = parse_expr(P);
        if (!parts[k]) return NULL;
        if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) {
            fail(P, "expected ']'");
            return NULL;
        }
    }
    P->i++;
    struct jnode *n = node(P, slice ? JN_SLICE : JN_ITEM);
    if (!n) return NULL;
    n->a = e;
    if (slice) {
        /* args hold start, stop, step (NULL = absent) */
        n->args = arena_alloc(P->a, 3 * sizeof(*n->args));
        if (!n->args) {
            fail(P, "out of memory");
            return NULL;
        }
        memcpy(n->args, parts, sizeof(parts));
        n->n_args = 3;
    } else {
        if (!parts[0]) {
            fail(P, "empty subscript");
            return NULL;
        }
        n->b = parts[0];
    }
    return n;
}

/* e(args) ('(' is the current token) */
static struct jnode *parse_call(struct parser *P, struct jnode *e) {
    P->i++;
    struct jnode *n = node(P, JN_CALL);
    if (!n) return NULL;
    n->a = e;
    if (parse_call_args(P, n)) return NULL;
    return n;
}

/* e | name or e | name(args) ('|' is the current token) */
static struct jnode *parse_filter(struct parser *P, struct jnode *e) {
    P->i++;
    if (cur(P)->t != TK_NAME) {
        fail(P, "expected filter name");
        return NULL;
    }
    struct jnode *n = node(P, JN_FILTER);
    if (!n) return NULL;
    n->lit = tok_str(P, cur(P));
    P->i++;
    n->a = e;
    if (is_op(cur(P), "(")) {
        P->i++;
        if (parse_call_args(P, n)) return NULL;
    }
    return n;
}

/* e is [not] name, e is name(args) or e is name ARG, ARG a primary with its attributes,
 * subscripts and calls ('is' is the current token) */
static struct jnode *parse_test(struct parser *P, struct jnode *e) {
    P->i++;
    struct jnode *n = node(P, JN_TEST);
    if (!n) return NULL;
    if (is_name(cur(P), "not")) {
        n->op = 1;
        P->i++;
    }
    if (cur(P)->t != TK_NAME) {
        fail(P, "expected test name");
        return NULL;
    }
    n->lit = tok_str(P, cur(P));
    P->i++;
    n->a = e;
    struct tok *c = cur(P);
    if (is_op(c, "(")) {
        P->i++;
        if (parse_call_args(P, n)) return NULL;
    } else if ((c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT || c->t == TK_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and") &&
               !is_name(c, "if") && !is_name(c, "in") && !is_name(c, "is")) {
        struct jnode *arg = parse_primary(P);
        if (!arg || !(arg = parse_postfix(P, arg, 0))) return NULL;
        n->args = arena_alloc(P->a, sizeof(*n->args));
        if (!n->args) {
            fail(P, "out of memory");
            return NULL;
        }
        n->args[0] = arg;
        n->n_args = 1;
    }
    return n;
}

/* The operators after a primary, in one loop: attributes, subscripts and calls, then (when
 * with_filter) filters and tests, each of which may be called. Once a filter or a test has
 * come, only filters, tests and calls follow, as in Jinja2 (its parse_postfix, then its
 * parse_filter_expr). */
static struct jnode *parse_postfix(struct parser *P, struct jnode *e, int with_filter) {
    int filtered = 0;
    for (;;) {
        struct tok *t = cur(P);
        if (!filtered && is_op(t, ".")) e = parse_attr(P, e);
        else if (!filtered && is_op(t, "[")) e = parse_subscript(P, e);
        else if (is_op(t, "(")) e = parse_call(P, e);
        else if (with_filter && is_op(t, "|")) e = parse_filter(P, e), filtered = 1;
        else if (with_filter && is_name(t, "is")) e = parse_test(P, e), filtered = 1;
        else return e;
        if (!e) return NULL;
    }
}

static struct jnode *parse_primary(struct parser *P) {
    struct tok *t = cur(P);
    struct jnode *n;
    if (t->t == TK_NAME) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else {
            n->k = JN_NAME;
            n->lit = tok_str(P, t);
        }
        P->i++;
        return n;
    }
    if (t->t == TK_STR) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->lit = t->v;
        P->i++;
        while (cur(P)->t == TK_STR) { /* adjacent literals concatenate */
            struct jstr *a = n->lit.u.s, *b = cur(P)->v.u.s;
            struct buf bb = {0};
            buf_put(&bb, a->s, a->len);
            buf_put(&bb, b->s, b->len);
            n->lit = jv_str(P->a, bb.p ? bb.p : "", bb.n);
            buf_free(&bb);
            P->i++;
        }
        return n;
    }
    if (t->t == TK_INT || t->t == TK_FLOAT) {
        n = node(P, JN_LIT);
        if (!n) return NULL;
        n->lit = t->v;
        P->i++;
        return n;
    }
    if (is_op(t, "(")) {
        P->i++;
        if (is_op(cur(P), ")")) { /* empty tuple */
            P->i++;
            return node(P, JN_TUPLE);
        }
        struct jnode *e = parse_expr(P);
        if (!e) return NULL;
        if (is_op(cur(P), ",")) {
            struct nvec items = {0};
            if (nvec_push(P, &items, e)) return NULL;
            while (is_op(cur(P), ",")) {
                P->i++;
                if (is_op(cur(P), ")")) break;
                struct jnode *x = parse_expr(P);
                if (!x || nvec_push(P, &items, x)) return NULL;
            }
            e = node(P, JN_TUPLE);
            if (!e) return NULL;
            e->args = items.v;
            e->n_args = items.n;
        }
        if (expect_op(P, ")")) return NULL;
        return e;
    }
    if (is_op(t, "[")) {
        P->i++;
        struct nvec items = {0};
        while (!is_op(cur(P), "]")) {
            struct jnode *x = parse_expr(P);
            if (!x || nvec_push(P, &items, x)) return NULL;
            if (!is_op(cur(P), ",")) break;
            P->i++;
        }
        if (expect_op(P, "]")) return NULL;
        n = node(P, JN_LIST);
        if (!n) return NULL;
        n->args = items.v;
        n->n_args = items.n;
        return n;
    }
    if (is_op(t, "{")) {
        P->i++;
        struct nvec keys = {0}, vals = {0};
        while (!is_op(cur(P), "}")) {
            struct jnode *k = parse_expr(P);
            if (!k || expect_op(P, ":")) return NULL;
            struct jnode *v = parse_expr(P);
            if (!v || nvec_push(P, &keys, k) || nvec_push(P, &vals, v)) return NULL;
            if (!is_op(cur(P), ",")) break;
            P->i++;
        }
        if (expect_op(P, "}")) return NULL;
        n = node(P, JN_DICT);
        if (!n) return NULL;
        n->args = keys.v;
        n->kwvals = vals.v;
        n->n_args = keys.n;
        return n;
    }
    fail(P, "unexpected '%.*s'", (int)t->n, t->s);
    return NULL;
}

static struct jnode *parse_unary(struct parser *P, int with_filter) {
    struct jnode *e;
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        int neg = is_op(cur(P), "-");
        P->i++;
        if (++P->depth > MAX_NESTING) {
            fail(P, "expression nested too deeply");
            return NULL;
        }
        e = node(P, neg ? JN_NEG : JN_POS);
        if (!e || !(e->a = parse_unary(P, 0))) return NULL;
        P->depth--;
    } else {
        e = parse_primary(P);
        if (!e) return NULL;
    }
    return parse_postfix(P, e, with_filter);
}

static struct jnode *binop(struct parser *P, int op, struct jnode *a, struct jnode *b) {
    if (!a || !b) return NULL;
    struct jnode *n = node(P, JN_BIN);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *P) {
    struct jnode *e = parse_unary(P, 1);
    while (e && is_op(cur(P), "**")) {
        P->i++;
        e = binop(P, JB_POW, e, parse_unary(P, 1));
    }
    return e;
}

static struct jnode *parse_math2(struct parser *P) {
    struct jnode *e = parse_pow(P);
    for (;;) {
        int op = is_op(cur(P), "*")    ? JB_MUL
                 : is_op(cur(P), "/")  ? JB_DIV
                 : is_op(cur(P), "//") ? JB_FDIV
                 : is_op(cur(P), "%")  ? JB_MOD
                                       : -1;
        if (!e || op < 0) return e;
        P->i++;
        e = binop(P, op, e, parse_pow(P));
    }
}

static struct jnode *parse_math1(struct parser *P) {
    struct jnode *e = parse_math2(P);
    for (;;) {
        int op = is_op(cur(P), "+") ? JB_ADD : is_op(cur(P), "-") ? JB_SUB : -1;
        if (!e || op < 0) return e;
        P->i++;
        e = binop(P, op, e, parse_math2(P));
    }
}

static struct jnode *parse_concat(struct parser *P) {
    struct jnode *e = parse_math1(P);
    while (e && is_op(cur(P), "~")) {
        P->i++;
        e = binop(P, JB_CAT, e, parse_math1(P));
    }
    return e;
}

static struct jnode *parse_compare(struct parser *P) {
    struct jnode *e = parse_concat(P);
    for (;;) {
        struct tok *t = cur(P);
        int op = is_op(t, "==")     ? JB_EQ
                 : is_op(t, "!=")   ? JB_NE
                 : is_op(t, "<")    ? JB_LT
                 : is_op(t, "<=")   ? JB_LE
                 : is_op(t, ">")    ? JB_GT
                 : is_op(t, ">=")   ? JB_GE
                 : is_name(t, "in") ? JB_IN
                                    : -1;
        if (op < 0 && is_name(t, "not") && is_name(&P->L->toks[P->i + 1], "in")) {
            op = JB_NOTIN;
            P->i++;
        }
        if (!e || op < 0) return e;
        P->i++;
        e = binop(P, op, e, parse_concat(P));
    }
}

static struct jnode *parse_not(struct parser *P) {
    if (is_name(cur(P), "not")) {
        P->i++;
        if (++P->depth > MAX_NESTING) {
            fail(P, "expression nested too deeply");
            return NULL;
        }
        struct jnode *n = node(P, JN_NOT);
        if (!n || !(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

/* a chain "x and y and z" (or "or"): left-associative JN_AND / JN_OR nodes */
static struct jnode *parse_logic(struct parser *P, const char *word, enum jn_kind k,
                                 struct jnode *(*operand)(struct parser *)) {
    struct jnode *e = operand(P);
    while (e && is_name(cur(P), word)) {
        P->i++;
        struct jnode *n = node(P, k);
        if (!n) return NULL;
        n->a = e;
        if (!(n->b = operand(P))) return NULL;
        e = n;
    }
    return e;
}

static struct jnode *parse_and(struct parser *P) {
    return parse_logic(P, "and", JN_AND, parse_not);
}
static struct jnode *parse_or(struct parser *P) { return parse_logic(P, "or", JN_OR, parse_and); }

static struct jnode *parse_expr_inner(struct parser *P);

static struct jnode *parse_expr(struct parser *P) {
    if (++P->depth > MAX_NESTING) {
        fail(P, "expression nested too deeply");
        return NULL;
    }
    struct jnode *e = parse_expr_inner(P);
    P->depth--;
    return e;
}

static struct jnode *parse_expr_inner(struct parser *P) {
    struct jnode *e = parse_or(P);
    while (e && is_name(cur(P), "if")) {
        P->i++;
        struct jnode *n = node(P, JN_COND);
        if (!n) return NULL;
        n->a = e;
        if (!(n->c = parse_or(P))) return NULL;
        if (is_name(cur(P), "else")) {
            P->i++;
            if (!(n->b = parse_expr(P))) return NULL;
        }
        e = n;
    }
    return e;
}

/* ---- statements ---- */

static struct jnode *parse_body(struct parser *P, const char *const *ends, int *which);
static struct jnode *parse_body_inner(struct parser *P, const char *const *ends, int *which);

static int block_end(struct parser *P) {
    if (cur(P)->t != TK_BLOCK_END)
        return fail(P, "expected end of tag, found '%.*s'", (int)cur(P)->n, cur(P)->s);
    P->i++;
    return 0;
}

static int parse_targets(struct parser *P, struct svec *names) {
    for (;;) {
        if (cur(P)->t != TK_NAME) return fail(P, "expected a variable name");
        if (svec_push(P, names, tok_str(P, cur(P)))) return -1;
        P->i++;
        if (!is_op(cur(P), ",")) return 0;
        P->i++;
    }
}

static struct jnode *parse_if(struct parser *P) {
    struct jnode *n = node(P, JN_IF);
    if (!n || !(n->a = parse_expr(P)) || block_end(P)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which))) return NULL;
    if (which == 0) {
        n->c = parse_if(P);
        return n->c ? n : NULL;
    }
    if (which == 1) {
        if (block_end(P)) return NULL;
        static const char *const ends2[] = {"endif", NULL};
        if (!(n->c = parse_body(P, ends2, &which))) return NULL;
    }
    return block_end(P) ? NULL : n;
}

static struct jnode *parse_for(struct parser *P) {
    struct jnode *n = node(P, JN_FOR);
    if (!n) return NULL;
    struct svec names = {0};
    if (is_op(cur(P), "(")) P->i++;
    if (parse_targets(P, &names)) return NULL;
    if (is_op(cur(P), ")")) P->i++;
    n->kwnames = names.v;
    n->n_kw = names.n;
    if (!is_name(cur(P), "in")) {
        fail(P, "expected 'in' in for");
        return NULL;
    }
    P->i++;
    /* the iterable: parse_or, so that a trailing "if" is the loop filter */
    if (!(n->a = parse_or(P))) return NULL;
    if (is_name(cur(P), "if")) {
        P->i++;
        struct jnode *f = parse_expr(P);
        if (!f) return NULL;
        n->args = arena_alloc(P->a, sizeof(*n->args));
        if (!n->args) {
            fail(P, "out of memory");
            return NULL;
        }
        n->args[0] = f;
        n->n_args = 1;
    }
    if (is_name(cur(P), "recursive")) {
        fail(P, "recursive loops are not supported");
        return NULL;
    }
    if (block_end(P)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which))) return NULL;
    if (which == 0) {
        if (block_end(P)) return NULL;
        static const char *const ends2[] = {"endfor", NULL};
        if (!(n->c = parse_body(P, ends2, &which))) return NULL;
    }
    return block_end(P) ? NULL : n;
}

static struct jnode *parse_set(struct parser *P) {
    struct svec names = {0};
    if (parse_targets(P, &names)) return NULL;
    struct jnode *n;
    if (names.n == 1 && is_op(cur(P), ".")) { /* set ns.attr = value */
        P->i++;
        if (cur(P)->t != TK_NAME) {
            fail(P, "expected attribute name");
            return NULL;
        }
        n = node(P, JN_SET);
        if (!n) return NULL;
        n->lit = tok_str(P, cur(P));
        n->kwnames = names.v;
        n->n_kw = 1;
        n->op = 1;
        P->i++;
    } else {
        n = node(P, JN_SET);
        if (!n) return NULL;
        n->kwnames = names.v;
        n->n_kw = names.n;
    }
    if (is_op(cur(P), "=")) {
        P->i++;
        struct jnode *e = parse_expr(P);
        if (!e) return NULL;
        if (is_op(cur(P), ",")) { /* set a = x, y -> tuple */
            struct nvec items = {0};
            if (nvec_push(P, &items, e)) return NULL;
            while (is_op(cur(P), ",")) {
                P->i++;
                struct jnode *x = parse_expr(P);
                if (!x || nvec_push(P, &items, x)) return NULL;
            }
            e = node(P, JN_TUPLE);
            if (!e) return NULL;
            e->args = items.v;
            e->n_args = items.n;
        }
        n->a = e;
        return block_end(P) ? NULL : n;
    }
    if (n->op || names.n != 1) {
        fail(P, "expected '=' in set");
        return NULL;
    }
    n->k = JN_SETBLOCK;
    if (is_op(cur(P), "|")) {
        fail(P, "filtered block set is not supported");
        return NULL;
    }
    if (block_end(P)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which))) return NULL;
    return block_end(P) ? NULL : n;
}

static struct jnode *parse_macro(struct parser *P) {
    if (cur(P)->t != TK_NAME) {
        fail(P, "expected macro name");
        return NULL;
    }
    struct jnode *n = node(P, JN_MACRO);
    if (!n) return NULL;
    n->lit = tok_str(P, cur(P));
    P->i++;
    if (expect_op(P, "(")) return NULL;
    struct svec names = {0};
    struct nvec defs = {0};
    while (!is_op(cur(P), ")")) {
        if (cur(P)->t != TK_NAME) {
            fail(P, "expected parameter name");
            return NULL;
        }
        if (svec_push(P, &names, tok_str(P, cur(P)))) return NULL;
        P->i++;
        struct jnode *d = NULL;
        if (is_op(cur(P), "=")) {
            P->i++;
            if (!(d = parse_expr(P))) return NULL;
        }
        if (nvec_push(P, &defs, d)) return NULL;
        if (!is_op(cur(P), ",")) break;
        P->i++;
    }
    if (expect_op(P, ")") || block_end(P)) return NULL;
    n->kwnames = names.v;
    n->kwvals = defs.v;
    n->n_kw = names.n;
    static const char *const ends[] = {"endmacro", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which))) return NULL;
    return block_end(P) ? NULL : n;
}

static struct jnode *parse_filter_block(struct parser *P) {
    struct jnode *n = node(P, JN_FILTERBLOCK);
    if (!n) return NULL;
    if (cur(P)->t != TK_NAME) {
        fail(P, "expected filter name");
        return NULL;
    }
    n->lit = tok_str(P, cur(P));
    P->i++;
    if (is_op(cur(P), "(")) {
        P->i++;
        if (parse_call_args(P, n)) return NULL;
    }
    if (block_end(P)) return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    int which;
    if (!(n->b = parse_body(P, ends, &which))) return NULL;
    return block_end(P) ? NULL : n;
}

/* Parses statements until one of ends (a block tag name) or EOF (ends == NULL); on return
 * the end tag's name has been consumed and *which says which one. */
static struct jnode *parse_body(struct parser *P, const char *const *ends, int *which) {
    if (P->depth + 1 > MAX_NESTING) {
        fail(P, "blocks nested too deeply");
        return NULL;
    }
    P->depth++;
    struct jnode *b = parse_body_inner(P, ends, which);
    P->depth--;
    return b;
}

static struct jnode *parse_body_inner(struct parser *P, const char *const *ends, int *which) {
    struct nvec stmts = {0};
    struct jnode *body = node(P, JN_BODY);
    if (!body) return NULL;
    for (;;) {
        struct tok *t = cur(P);
        if (t->t == TK_EOF) {
            if (ends) {
                fail(P, "missing {%% %s %%}", ends[0]);
                return NULL;
            }
            break;
        }
        if (t->t == TK_TEXT) {
            struct jnode *n = node(P, JN_TEXT);
            if (!n) return NULL;
            n->lit = jv_str(P->a, t->s, t->n);
            if (n->lit.t != JV_STR || nvec_push(P, &stmts, n)) return NULL;
            P->i++;
            continue;
        }
        if (t->t == TK_VAR_BEGIN) {
            P->i++;
            struct jnode *n = node(P, JN_OUT);
            if (!n || !(n->a = parse_expr(P))) return NULL;
            if (cur(P)->t != TK_VAR_END) {
                fail(P, "expected '}}', found '%.*s'", (int)cur(P)->n, cur(P)->s);
                return NULL;
            }
            P->i++;
            if (nvec_push(P, &stmts, n)) return NULL;
            continue;
        }
        if (t->t != TK_BLOCK_BEGIN) {
            fail(P, "unexpected token");
            return NULL;
        }
        P->i++;
        struct tok *kw = cur(P);
        if (kw->t != TK_NAME) {
            fail(P, "expected a tag name");
            return NULL;
        }
        if (ends) {
            for (int i = 0; ends[i]; i++)
                if (is_name(kw, ends[i])) {
                    *which = i;
                    P->i++;
                    body->args = stmts.v;
                    body->n_args = stmts.n;
                    return body;
                }
        }
        P->i++;
        struct jnode *n = NULL;
        if (is_name(kw, "if")) n = parse_if(P);
        else if (is_name(kw, "for")) n = parse_for(P);
        else if (is_name(kw, "set")) n = parse_set(P);
        else if (is_name(kw, "macro")) n = parse_macro(P);
        else if (is_name(kw, "filter")) n = parse_filter_block(P);
        else if (is_name(kw, "break") || is_name(kw, "continue")) {
            n = node(P, is_name(kw, "break") ? JN_BREAK : JN_CONTINUE);
            if (n && block_end(P)) n = NULL;
        } else if (is_name(kw, "generation")) {
            /* HF's {% generation %} marks assistant text for masks; it renders its body */
            if (block_end(P)) return NULL;
            static const char *const e2[] = {"endgeneration", NULL};
            int w;
            n = parse_body(P, e2, &w);
            if (n && block_end(P)) n = NULL;
        } else {
            fail(P, "unsupported tag '%.*s'", (int)kw->n, kw->s);
            return NULL;
        }
        if (!n || nvec_push(P, &stmts, n)) return NULL;
    }
    body->args = stmts.v;
    body->n_args = stmts.n;
    return body;
}

int jinja_parse_source(struct jtemplate *t, const char *src, size_t len, char *err) {
    struct lexer L = {.a = &t->arena, .src = src, .len = len, .line = 1, .err = err};
    if (jinja_lex(&L)) {
        free(L.toks);
        return -1;
    }
    struct parser P = {.L = &L, .tpl = t, .a = &t->arena};
    t->body = parse_body(&P, NULL, NULL);
    free(L.toks);
    return t->body ? 0 : -1;
}
