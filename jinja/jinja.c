#include "jinja.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "jinja_filters.h"
#include "jinja_parse.h"

#define MAX_DEPTH 64
#define MAX_STEPS 50000000u
#define MAX_OUT (64u << 20)

int jinja_load(struct jtemplate **out, const char *src, size_t len, char *err) {
    struct jtemplate *t = xcalloc(1, sizeof(*t));
    t->arena.limit = 1u << 30;
    if (jinja_parse_source(t, src, len, err)) {
        jinja_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(struct jtemplate *t) {
    if (!t) return;
    arena_free(&t->arena);
    free(t);
}

/* ---- scopes ---- */

static struct jv *lookup(struct scope *s, const char *name, size_t n) {
    for (; s; s = s->parent) {
        struct jv *v = jv_dict_get(s->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static int assign(struct rs *r, struct scope *s, struct jv name, struct jv v) {
    if (jv_dict_set(r->a, s->vars, name, v)) {
        rs_fail(r, "out of memory");
        return -1;
    }
    return 0;
}

static struct scope *new_scope(struct rs *r, struct scope *parent) {
    struct scope *s = arena_alloc(r->a, sizeof(*s));
    if (!s) {
        rs_fail(r, "out of memory");
        return NULL;
    }
    s->vars = jv_dict(r->a);
    if (s->vars.t != JV_DICT) {
        rs_fail(r, "out of memory");
        return NULL;
    }
    s->parent = parent;
    return s;
}

/* ---- request-data tracking ----
 * Strings from the request (chat.h) carry data spans. Concatenation, output and the
 * calls below keep them exactly; any other filter or method that sees data in its input
 * marks its whole string result (or every string in a list/dict result) as data. Being
 * coarse there costs nothing in safety: data is only ever encoded as plain text. */

static int in_list(const char *name, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(name, *list)) return 1;
    return 0;
}

/* These return their input values unchanged or build strings only through the span-keeping
 * appenders (jv_str_append, jv_json_append, buf_put_jstr). */
static const char *const precise_filters[] = {
    "join",   "tojson",     "string",     "default", "d",     "safe", "first", "select",
    "reject", "selectattr", "rejectattr", "length",  "count", "trim", NULL};
static const char *const precise_methods[] = {
    "get", "items", "keys", "values", "join", "format", "strip", "lstrip", "rstrip", "split", NULL};

static struct jv taint_call(struct rs *r, struct jv res, struct jv self, const struct jv *args,
                            size_t n, const struct jv *kwv, size_t nkw) {
    if (r->failed || (res.t != JV_STR && res.t != JV_LIST && res.t != JV_DICT)) return res;
    int data = jv_has_data(self);
    for (size_t i = 0; !data && i < n; i++) data = jv_has_data(args[i]);
    for (size_t i = 0; !data && i < nkw; i++) data = jv_has_data(kwv[i]);
    return data ? rs_taint(r, res) : res;
}

static struct jv taint_filter(struct rs *r, const char *name, struct jv res, struct jv v,
                              const struct jv *args, size_t n, const struct jv *kwv, size_t nkw) {
    if (in_list(name, precise_filters)) return res;
    return taint_call(r, res, v, args, n, kwv, nkw);
}

/* ---- expressions ---- */

static struct jv eval(struct rs *r, struct scope *s, const struct jnode *n);
static struct jv rs_call(struct rs *r, struct jv fn, struct jv *args, size_t n, struct jv *kwn,
                         struct jv *kwv, size_t nkw);
static int exec_body(struct rs *r, struct scope *s, const struct jnode *body, struct buf *out);

/* A body rendered into a new string value: {% set %} and filter blocks, macro calls. */
static struct jv render_to_str(struct rs *r, struct scope *s, const struct jnode *body) {
    struct buf b = {0};
    if (exec_body(r, s, body, &b)) {
        buf_free(&b);
        return jv_undef();
    }
    return rs_take_buf(r, &b);
}

static int eval_args(struct rs *r, struct scope *s, const struct jnode *n, struct jv **args,
                     struct jv **kwv) {
    *args = n->n_args ? arena_alloc(r->a, n->n_args * sizeof(struct jv)) : NULL;
    *kwv = n->n_kw ? arena_alloc(r->a, n->n_kw * sizeof(struct jv)) : NULL;
    if ((n->n_args && !*args) || (n->n_kw && !*kwv)) {
        rs_fail(r, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n->n_args; i++) {
        (*args)[i] = eval(r, s, n->args[i]);
        if (r->failed) return -1;
    }
    for (size_t i = 0; i < n->n_kw; i++) {
        (*kwv)[i] = eval(r, s, n->kwvals[i]);
        if (r->failed) return -1;
    }
    return 0;
}

/* The escaped form of s keeps s's spans when escaping changed nothing; else it is all data
 * when s holds any. */
static struct jv escaped_spans(struct rs *r, struct jv s, struct jv e) {
    if (r->failed || e.t != JV_STR || e.u.s == s.u.s || !s.u.s->nsp) return e;
    if (e.u.s->len != s.u.s->len || memcmp(e.u.s->s, s.u.s->s, s.u.s->len)) return rs_taint(r, e);
    e.u.s->sp = s.u.s->sp; /* arena-owned, read-only: shared */
    e.u.s->nsp = s.u.s->nsp;
    return e;
}

static int64_t py_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static struct jv arith(struct rs *r, int op, struct jv a, struct jv b) {
    int ai = a.t == JV_INT || a.t == JV_BOOL, bi = b.t == JV_INT || b.t == JV_BOOL;
    int an = ai || a.t == JV_FLOAT, bn = bi || b.t == JV_FLOAT;
    if (op == JB_ADD) {
        if (a.t == JV_STR && b.t == JV_STR) {
            /* Markup + str escapes the plain operand (markupsafe), and stays Markup */
            int markup = a.u.s->markup || b.u.s->markup;
            if (markup) {
                struct jv ea = jl_escape(r, a), eb = jl_escape(r, b);
                if (r->failed) return jv_undef();
                a = escaped_spans(r, a, ea);
                b = escaped_spans(r, b, eb);
                if (r->failed) return jv_undef();
            }
            struct buf x = {0};
            buf_put_jstr(&x, a.u.s);
            buf_put_jstr(&x, b.u.s);
            struct jv v = rs_take_buf(r, &x);
            if (v.t == JV_STR) v.u.s->markup = markup;
            return v;
        }
        if (a.t == JV_LIST && b.t == JV_LIST) {
            struct jv l = jv_list(r->a);
            if (l.t != JV_LIST) return rs_fail(r, "out of memory");
            for (size_t i = 0; i < a.u.l->n; i++)
                if (jv_list_push(r->a, l, a.u.l->v[i])) return rs_fail(r, "out of memory");
            for (size_t i = 0; i < b.u.l->n; i++)
                if (jv_list_push(r->a, l, b.u.l->v[i])) return rs_fail(r, "out of memory");
            return l;
        }
    }
    if (op == JB_MUL && ((a.t == JV_STR && bi) || (ai && b.t == JV_STR))) {
        struct jv s = a.t == JV_STR ? a : b;
        int64_t k = a.t == JV_STR ? jl_int(b) : jl_int(a);
        if (k < 0) k = 0;
        if ((uint64_t)k * s.u.s->len > r->out_limit)
            return rs_fail(r, "string repetition too large");
        struct buf x = {0};
        for (int64_t i = 0; i < k; i++) buf_put_jstr(&x, s.u.s);
        return rs_take_buf(r, &x);
    }
    if (!an || !bn)
        return rs_fail(r, "unsupported operand types for arithmetic: '%s' and '%s'",
                       jv_type_name(a), jv_type_name(b));
    if (ai && bi && op != JB_DIV && op != JB_POW) {
        int64_t x = jl_int(a), y = jl_int(b), z = 0;
        switch (op) {
        case JB_ADD:
            if (__builtin_add_overflow(x, y, &z)) return rs_fail(r, "integer overflow");
            return jv_int(z);
        case JB_SUB:
            if (__builtin_sub_overflow(x, y, &z)) return rs_fail(r, "integer overflow");
            return jv_int(z);
        case JB_MUL:
            if (__builtin_mul_overflow(x, y, &z)) return rs_fail(r, "integer overflow");
            return jv_int(z);
        case JB_FDIV:
            if (y == 0) return rs_fail(r, "integer division by zero");
            if (x == INT64_MIN && y == -1) return rs_fail(r, "integer overflow");
            return jv_int(py_floordiv(x, y));
        case JB_MOD:
            if (y == 0) return rs_fail(r, "integer modulo by zero");
            if (x == INT64_MIN && y == -1) return jv_int(0);
            return jv_int(x - py_floordiv(x, y) * y);
        }
    }
    double x = jl_num(a), y = jl_num(b);
    switch (op) {
    case JB_ADD: return jv_float(x + y);
    case JB_SUB: return jv_float(x - y);
    case JB_MUL: return jv_float(x * y);
    case JB_DIV:
        if (y == 0) return rs_fail(r, "division by zero");
        return jv_float(x / y);
    case JB_FDIV:
        if (y == 0) return rs_fail(r, "division by zero");
        return jv_float(floor(x / y));
    case JB_MOD:
        if (y == 0) return rs_fail(r, "modulo by zero");
        return jv_float(x - floor(x / y) * y);
    case JB_POW:
        if (ai && bi && jl_int(b) >= 0) {
            int64_t base = jl_int(a), e = jl_int(b), res = 1;
            for (int64_t i = 0; i < e; i++)
                if (__builtin_mul_overflow(res, base, &res)) return rs_fail(r, "integer overflow");
            return jv_int(res);
        }
        return jv_float(pow(x, y));
    }
    return rs_fail(r, "bad operator");
}

static struct jv binary(struct rs *r, struct scope *s, const struct jnode *n) {
    struct jv a = eval(r, s, n->a);
    if (r->failed) return a;
    struct jv b = eval(r, s, n->b);
    if (r->failed) return b;
    int c;
    switch (n->op) {
    case JB_EQ: return jv_bool(jv_equal(a, b));
    case JB_NE: return jv_bool(!jv_equal(a, b));
    case JB_LT:
    case JB_LE:
    case JB_GT:
    case JB_GE:
        if (jv_compare(a, b, &c))
            return rs_fail(r, "'<' not supported between '%s' and '%s'", jv_type_name(a),
                           jv_type_name(b));
        return jv_bool(n->op == JB_LT   ? c < 0
                       : n->op == JB_LE ? c <= 0
                       : n->op == JB_GT ? c > 0
                                        : c >= 0);
    case JB_IN:
    case JB_NOTIN: {
        int in = jl_contains(r, b, a);
        if (r->failed) return jv_undef();
        return jv_bool(n->op == JB_IN ? in : !in);
    }
    case JB_CAT: {
        struct buf x = {0};
        jv_str_append(&x, a);
        jv_str_append(&x, b);
        return rs_take_buf(r, &x);
    }
    default:
        if (a.t == JV_UNDEF || b.t == JV_UNDEF) return rs_fail(r, "undefined value in arithmetic");
        return arith(r, n->op, a, b);
    }
}

/* jinja2's getattr: attributes (methods) first, then items. */
static struct jv get_attr(struct rs *r, struct jv obj, struct jv name) {
    if (obj.t == JV_UNDEF)
        return rs_fail(r, "'%s' is undefined (attribute of an undefined value)", name.u.s->s);
    struct jv m = jl_method(r, obj, name.u.s->s);
    if (m.t != JV_UNDEF || r->failed) return m;
    if (obj.t == JV_DICT) {
        struct jv *v = jv_dict_getv(obj, name);
        if (v) return *v;
    }
    return jv_undef();
}

static struct jv get_item(struct rs *r, struct jv obj, struct jv key) {
    if (obj.t == JV_UNDEF) return rs_fail(r, "cannot index an undefined value");
    if (obj.t == JV_DICT) {
        struct jv *v = jv_dict_getv(obj, key);
        return v ? *v : jv_undef();
    }
    if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
        int64_t i = jl_int(key);
        int64_t n = obj.t == JV_LIST ? (int64_t)obj.u.l->n : jl_strlen(obj);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return jv_undef();
        if (obj.t == JV_LIST) return obj.u.l->v[i];
        return jl_str_slice(r, obj, i, i + 1, 1);
    }
    if (key.t == JV_STR) return get_attr(r, obj, key);
    return jv_undef();
}

static struct jv eval_slice(struct rs *r, struct scope *s, const struct jnode *n) {
    struct jv obj = eval(r, s, n->a);
    if (r->failed) return obj;
    int64_t len;
    if (obj.t == JV_LIST) len = (int64_t)obj.u.l->n;
    else if (obj.t == JV_STR) len = jl_strlen(obj);
    else return rs_fail(r, "cannot slice a '%s'", jv_type_name(obj));
    struct jv p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = n->args[i] ? eval(r, s, n->args[i]) : jv_none();
        if (r->failed) return jv_undef();
        if (p[i].t != JV_NONE && p[i].t != JV_INT && p[i].t != JV_BOOL)
            return rs_fail(r, "slice indices must be integers");
    }
    int64_t step = p[2].t == JV_NONE ? 1 : jl_int(p[2]);
    if (step == 0) return rs_fail(r, "slice step cannot be zero");
    int64_t start, stop;
    /* Python's slice.indices */
    if (p[0].t == JV_NONE) start = step < 0 ? len - 1 : 0;
    else {
        start = jl_int(p[0]);
        if (start < 0) {
            start += len;
            if (start < 0) start = step < 0 ? -1 : 0;
        } else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (p[1].t == JV_NONE) stop = step < 0 ? -1 : len;
    else {
        stop = jl_int(p[1]);
        if (stop < 0) {
            stop += len;
            if (stop < 0) stop = step < 0 ? -1 : 0;
        } else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    if (obj.t == JV_STR) return jl_str_slice(r, obj, start, stop, step);
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (jv_list_push(r->a, l, obj.u.l->v[i])) return rs_fail(r, "out of memory");
    return l;
}

static struct jv eval(struct rs *r, struct scope *s, const struct jnode *n) {
    if (r->failed) return jv_undef();
    if (++r->steps > MAX_STEPS) return rs_fail(r, "template too expensive to render");
    switch (n->k) {
    case JN_LIT: return n->lit;
    case JN_NAME: {
        struct jv *v = lookup(s, n->lit.u.s->s, n->lit.u.s->len);
        if (v) return *v;
        v = jv_dict_getv(r->globals, n->lit);
        if (v) return *v;
        return jl_global(r, n->lit.u.s->s);
    }
    case JN_ATTR: {
        struct jv o = eval(r, s, n->a);
        return r->failed ? o : get_attr(r, o, n->lit);
    }
    case JN_ITEM: {
        struct jv o = eval(r, s, n->a);
        if (r->failed) return o;
        struct jv k = eval(r, s, n->b);
        return r->failed ? k : get_item(r, o, k);
    }
    case JN_SLICE: return eval_slice(r, s, n);
    case JN_CALL: {
        struct jv fn = eval(r, s, n->a);
        if (r->failed) return fn;
        struct jv *args, *kwv;
        if (eval_args(r, s, n, &args, &kwv)) return jv_undef();
        return rs_call(r, fn, args, n->n_args, n->kwnames, kwv, n->n_kw);
    }
    case JN_FILTER: {
        struct jv v = eval(r, s, n->a);
        if (r->failed) return v;
        struct jv *args, *kwv;
        if (eval_args(r, s, n, &args, &kwv)) return jv_undef();
        struct jv res = jl_filter(r, n->lit.u.s->s, v, args, n->n_args, n->kwnames, kwv, n->n_kw);
        return taint_filter(r, n->lit.u.s->s, res, v, args, n->n_args, kwv, n->n_kw);
    }
    case JN_TEST: {
        struct jv v = eval(r, s, n->a);
        if (r->failed) return v;
        struct jv *args, *kwv;
        if (eval_args(r, s, n, &args, &kwv)) return jv_undef();
        int t = jl_test(r, n->lit.u.s->s, v, args, n->n_args);
        return r->failed ? jv_undef() : jv_bool(n->op ? !t : t);
    }
    case JN_NOT: {
        struct jv v = eval(r, s, n->a);
        return r->failed ? v : jv_bool(!jv_truthy(v));
    }
    case JN_NEG:
    case JN_POS: {
        struct jv v = eval(r, s, n->a);
        if (r->failed) return v;
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = jl_int(v);
            if (n->k == JN_POS) return jv_int(i);
            if (i == INT64_MIN) return rs_fail(r, "integer overflow");
            return jv_int(-i);
        }
        if (v.t == JV_FLOAT) return jv_float(n->k == JN_NEG ? -v.u.f : v.u.f);
        return rs_fail(r, "bad operand type for unary -: '%s'", jv_type_name(v));
    }
    case JN_BIN: return binary(r, s, n);
    case JN_AND: {
        struct jv a = eval(r, s, n->a);
        if (r->failed || !jv_truthy(a)) return a;
        return eval(r, s, n->b);
    }
    case JN_OR: {
        struct jv a = eval(r, s, n->a);
        if (r->failed || jv_truthy(a)) return a;
        return eval(r, s, n->b);
    }
    case JN_COND: {
        struct jv c = eval(r, s, n->c);
        if (r->failed) return c;
        if (jv_truthy(c)) return eval(r, s, n->a);
        return n->b ? eval(r, s, n->b) : jv_undef();
    }
    case JN_LIST:
    case JN_TUPLE: {
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < n->n_args; i++) {
            struct jv v = eval(r, s, n->args[i]);
            if (r->failed) return v;
            if (jv_list_push(r->a, l, v)) return rs_fail(r, "out of memory");
        }
        return l;
    }
    case JN_DICT: {
        struct jv d = jv_dict(r->a);
        if (d.t != JV_DICT) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < n->n_args; i++) {
            struct jv k = eval(r, s, n->args[i]);
            if (r->failed) return k;
            struct jv v = eval(r, s, n->kwvals[i]);
            if (r->failed) return v;
            if (jv_dict_set(r->a, d, k, v)) return rs_fail(r, "out of memory");
        }
        return d;
    }
    default: return rs_fail(r, "statement used as an expression");
    }
}

/* ---- calls ---- */

static struct jv rs_call(struct rs *r, struct jv fn, struct jv *args, size_t n, struct jv *kwn,
                         struct jv *kwv, size_t nkw) {
    if (fn.t != JV_FUNC) {
        if (fn.t == JV_UNDEF) return rs_fail(r, "called an undefined value");
        return rs_fail(r, "'%s' object is not callable", jv_type_name(fn));
    }
    struct jfunc *f = fn.u.fn;
    if (f->kind != JF_MACRO) {
        struct jv res = jl_call_builtin(r, f, args, n, kwn, kwv, nkw);
        if (f->kind == JF_METHOD && in_list(f->name, precise_methods)) return res;
        struct jv self = f->kind == JF_METHOD ? f->self : jv_undef();
        return taint_call(r, res, self, args, n, kwv, nkw);
    }
    const struct jnode *m = f->macro;
    if (r->depth >= MAX_DEPTH) return rs_fail(r, "macro recursion too deep");
    struct scope *s = new_scope(r, f->closure);
    if (!s) return jv_undef();
    if (n > m->n_kw)
        return rs_fail(r, "macro '%s' takes %zu arguments, %zu given", m->lit.u.s->s, m->n_kw, n);
    for (size_t i = 0; i < m->n_kw; i++) {
        struct jv v = jv_undef();
        int have = 0;
        if (i < n) {
            v = args[i];
            have = 1;
        }
        for (size_t k = 0; k < nkw; k++)
            if (jv_equal(kwn[k], m->kwnames[i])) {
                v = kwv[k];
                have = 1;
            }
        if (!have && m->kwvals[i]) {
            v = eval(r, s, m->kwvals[i]);
            if (r->failed) return v;
        }
        if (assign(r, s, m->kwnames[i], v)) return jv_undef();
    }
    r->depth++;
    struct jv res = render_to_str(r, s, m->b);
    r->depth--;
    return res;
}

/* ---- statements ---- */

static int set_targets(struct rs *r, struct scope *s, struct jv *names, size_t n, struct jv v) {
    if (n == 1) return assign(r, s, names[0], v);
    if (v.t != JV_LIST || v.u.l->n != n) {
        rs_fail(r, "cannot unpack %s into %zu names", jv_type_name(v), n);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (assign(r, s, names[i], v.u.l->v[i])) return -1;
    return 0;
}

static int exec_for(struct rs *r, struct scope *s, const struct jnode *n, struct buf *out) {
    struct jv it = eval(r, s, n->a);
    if (r->failed) return -1;
    struct jv items = jl_iterable(r, it);
    if (r->failed) return -1;
    if (it.t == JV_STR && it.u.s->nsp) items = rs_taint(r, items); /* its characters */
    if (r->failed) return -1;
    struct scope *ls = new_scope(r, s);
    if (!ls) return -1;
    /* the loop filter runs before loop.index etc. are counted */
    struct jv kept = items;
    if (n->n_args) {
        kept = jv_list(r->a);
        if (kept.t != JV_LIST) {
            rs_fail(r, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (set_targets(r, ls, n->kwnames, n->n_kw, items.u.l->v[i])) return -1;
            struct jv c = eval(r, ls, n->args[0]);
            if (r->failed) return -1;
            if (jv_truthy(c) && jv_list_push(r->a, kept, items.u.l->v[i])) {
                rs_fail(r, "out of memory");
                return -1;
            }
        }
    }
    size_t len = kept.u.l->n;
    if (len == 0) return n->c ? exec_body(r, s, n->c, out) : 0;
    struct jv loop_name = rs_str(r, "loop", 4);
    for (size_t i = 0; i < len; i++) {
        struct jv loop = jl_loop_object(r, kept, i);
        if (r->failed) return -1;
        if (assign(r, ls, loop_name, loop)) return -1;
        if (set_targets(r, ls, n->kwnames, n->n_kw, kept.u.l->v[i])) return -1;
        if (exec_body(r, ls, n->b, out)) return -1;
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
    return 0;
}

static int exec_stmt(struct rs *r, struct scope *s, const struct jnode *n, struct buf *out) {
    switch (n->k) {
    case JN_TEXT: buf_put(out, n->lit.u.s->s, n->lit.u.s->len); break;
    case JN_OUT: {
        struct jv v = eval(r, s, n->a);
        if (r->failed) return -1;
        if (v.t == JV_LIST && v.u.l->gen) {
            rs_fail(r, "printing a generator object is not supported");
            return -1;
        }
        jv_str_append(out, v);
        break;
    }
    case JN_IF: {
        struct jv c = eval(r, s, n->a);
        if (r->failed) return -1;
        if (jv_truthy(c)) return exec_body(r, s, n->b, out);
        if (n->c) return n->c->k == JN_IF ? exec_stmt(r, s, n->c, out) : exec_body(r, s, n->c, out);
        break;
    }
    case JN_FOR: return exec_for(r, s, n, out);
    case JN_SET: {
        struct jv v = eval(r, s, n->a);
        if (r->failed) return -1;
        if (n->op) { /* ns.attr = v */
            struct jv *ns = lookup(s, n->kwnames[0].u.s->s, n->kwnames[0].u.s->len);
            if (!ns) ns = jv_dict_getv(r->globals, n->kwnames[0]);
            if (!ns || ns->t != JV_DICT || !ns->u.d->ns) {
                rs_fail(r, "cannot assign attribute on non-namespace object");
                return -1;
            }
            if (jv_dict_set(r->a, *ns, n->lit, v)) {
                rs_fail(r, "out of memory");
                return -1;
            }
            break;
        }
        return set_targets(r, s, n->kwnames, n->n_kw, v);
    }
    case JN_SETBLOCK: {
        struct jv v = render_to_str(r, s, n->b);
        if (r->failed) return -1;
        return assign(r, s, n->kwnames[0], v);
    }
    case JN_MACRO: {
        struct jfunc *f = arena_alloc(r->a, sizeof(*f));
        if (!f) {
            rs_fail(r, "out of memory");
            return -1;
        }
        f->kind = JF_MACRO;
        f->macro = n;
        f->closure = s;
        struct jv v = {JV_FUNC, {0}};
        v.u.fn = f;
        return assign(r, s, n->lit, v);
    }
    case JN_FILTERBLOCK: {
        struct jv v = render_to_str(r, s, n->b);
        if (r->failed) return -1;
        struct jv *args, *kwv;
        if (eval_args(r, s, n, &args, &kwv)) return -1;
        struct jv res = jl_filter(r, n->lit.u.s->s, v, args, n->n_args, n->kwnames, kwv, n->n_kw);
        v = taint_filter(r, n->lit.u.s->s, res, v, args, n->n_args, kwv, n->n_kw);
        if (r->failed) return -1;
        jv_str_append(out, v);
        break;
    }
    case JN_BREAK: r->brk = 1; break;
    case JN_CONTINUE: r->brk = 2; break;
    case JN_BODY: return exec_body(r, s, n, out);
    default: rs_fail(r, "bad statement"); return -1;
    }
    if (out->too_deep) {
        rs_fail(r, "a value nested too deep to print");
        return -1;
    }
    if (out->n > r->out_limit) {
        rs_fail(r, "rendered text too large");
        return -1;
    }
    return 0;
}

static int exec_body(struct rs *r, struct scope *s, const struct jnode *body, struct buf *out) {
    for (size_t i = 0; i < body->n_args; i++) {
        if (exec_stmt(r, s, body->args[i], out)) return -1;
        if (r->brk) return 0;
    }
    return r->failed ? -1 : 0;
}

int jinja_render(const struct jtemplate *t, struct arena *a, struct jv ctx, char **out,
                 size_t *out_len, char *err) {
    return jinja_render_spans(t, a, ctx, out, out_len, NULL, NULL, err);
}

int jinja_render_spans(const struct jtemplate *t, struct arena *a, struct jv ctx, char **out,
                       size_t *out_len, struct jspan **spans, size_t *n_spans, char *err) {
    struct rs r = {.a = a, .globals = ctx, .err = err, .out_limit = MAX_OUT};
    struct scope *s = new_scope(&r, NULL);
    struct buf b = {0};
    if (!s || exec_body(&r, s, t->body, &b) || r.failed || b.too_deep) {
        if (!r.failed)
            err_set(err, b.too_deep ? "a value nested too deep to print" : "out of memory");
        buf_free(&b);
        return -1;
    }
    if (!b.p) b.p = xcalloc(1, 1);
    *out = b.p;
    *out_len = b.n;
    if (spans) {
        *spans = b.sp;
        *n_spans = b.nsp;
    } else {
        free(b.sp);
    }
    return 0;
}
