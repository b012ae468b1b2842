#include "jinja_parse.h"

#include <stdlib.h>
#include <string.h>

#include "jinja_pstate.h"

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
    if (!n || !(n->a = jinja_parse_expr(P)) || block_end(P)) return NULL;
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
    if (!(n->a = jinja_parse_or(P))) return NULL;
    if (is_name(cur(P), "if")) {
        P->i++;
        struct jnode *f = jinja_parse_expr(P);
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
        n = node(P, JN_SET);
        if (!n || take_name(P, n, "attribute")) return NULL;
        n->kwnames = names.v;
        n->n_kw = 1;
        n->op = 1;
    } else {
        n = node(P, JN_SET);
        if (!n) return NULL;
        n->kwnames = names.v;
        n->n_kw = names.n;
    }
    if (is_op(cur(P), "=")) {
        P->i++;
        struct jnode *e = jinja_parse_expr(P);
        if (!e) return NULL;
        if (is_op(cur(P), ",")) { /* set a = x, y -> tuple */
            struct nvec items = {0};
            if (nvec_push(P, &items, e)) return NULL;
            while (is_op(cur(P), ",")) {
                P->i++;
                struct jnode *x = jinja_parse_expr(P);
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
    struct jnode *n = node(P, JN_MACRO);
    if (!n || take_name(P, n, "macro")) return NULL;
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
            if (!(d = jinja_parse_expr(P))) return NULL;
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
    if (!n || take_name(P, n, "filter")) return NULL;
    if (is_op(cur(P), "(")) {
        P->i++;
        if (jinja_parse_call_args(P, n)) return NULL;
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
            if (!n || !(n->a = jinja_parse_expr(P))) return NULL;
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
