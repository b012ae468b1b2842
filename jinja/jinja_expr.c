/* Jinja expressions: literals, names, attributes and subscripts, calls, filters and tests,
 * unary and binary operators by precedence, the conditional expression. */
#include <stdlib.h>
#include <string.h>

#include "jinja_pstate.h"

static struct jnode *parse_unary(struct parser *P, int with_filter);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *e, int with_filter);

/* (args, kw=args) after '(' was consumed */
int jinja_parse_call_args(struct parser *P, struct jnode *n) {
    struct nvec args = {0}, kwv = {0};
    struct svec kwn = {0};
    while (!is_op(cur(P), ")")) {
        if (cur(P)->t == TK_NAME && is_op(&P->L->toks[P->i + 1], "=")) {
            if (svec_push(P, &kwn, tok_str(P, cur(P)))) return -1;
            P->i += 2;
            struct jnode *v = jinja_parse_expr(P);
            if (!v || nvec_push(P, &kwv, v)) return -1;
        } else {
            if (kwn.n) return fail(P, "positional argument after keyword argument");
            struct jnode *v = jinja_parse_expr(P);
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
        parts[k] = jinja_parse_expr(P);
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
    if (jinja_parse_call_args(P, n)) return NULL;
    return n;
}

/* e | name or e | name(args) ('|' is the current token) */
static struct jnode *parse_filter(struct parser *P, struct jnode *e) {
    P->i++;
    struct jnode *n = node(P, JN_FILTER);
    if (!n || take_name(P, n, "filter")) return NULL;
    n->a = e;
    if (is_op(cur(P), "(")) {
        P->i++;
        if (jinja_parse_call_args(P, n)) return NULL;
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
    if (take_name(P, n, "test")) return NULL;
    n->a = e;
    struct tok *c = cur(P);
    if (is_op(c, "(")) {
        P->i++;
        if (jinja_parse_call_args(P, n)) return NULL;
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
        struct jnode *e = jinja_parse_expr(P);
        if (!e) return NULL;
        if (is_op(cur(P), ",")) {
            struct nvec items = {0};
            if (nvec_push(P, &items, e)) return NULL;
            while (is_op(cur(P), ",")) {
                P->i++;
                if (is_op(cur(P), ")")) break;
                struct jnode *x = jinja_parse_expr(P);
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
            struct jnode *x = jinja_parse_expr(P);
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
            struct jnode *k = jinja_parse_expr(P);
            if (!k || expect_op(P, ":")) return NULL;
            struct jnode *v = jinja_parse_expr(P);
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
struct jnode *jinja_parse_or(struct parser *P) {
    return parse_logic(P, "or", JN_OR, parse_and);
}

static struct jnode *parse_expr_inner(struct parser *P);

struct jnode *jinja_parse_expr(struct parser *P) {
    if (++P->depth > MAX_NESTING) {
        fail(P, "expression nested too deeply");
        return NULL;
    }
    struct jnode *e = parse_expr_inner(P);
    P->depth--;
    return e;
}

static struct jnode *parse_expr_inner(struct parser *P) {
    struct jnode *e = jinja_parse_or(P);
    while (e && is_name(cur(P), "if")) {
        P->i++;
        struct jnode *n = node(P, JN_COND);
        if (!n) return NULL;
        n->a = e;
        if (!(n->c = jinja_parse_or(P))) return NULL;
        if (is_name(cur(P), "else")) {
            P->i++;
            if (!(n->b = jinja_parse_expr(P))) return NULL;
        }
        e = n;
    }
    return e;
}
