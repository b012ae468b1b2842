#include "jinja_filters.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const filters[] = {
    "trim",   "upper",   "lower",    "title",  "capitalize", "length",     "count",      "tojson",
    "string", "int",     "float",    "list",   "join",       "default",    "d",          "first",
    "last",   "replace", "safe",     "indent", "map",        "selectattr", "rejectattr", "select",
    "reject", "items",   "dictsort", "sort",   "reverse",    "unique",     "abs",        "round",
    "min",    "max",     "sum",      "escape", "e",          "wordcount",  NULL};
static const char *const tests[] = {
    "defined",     "undefined", "none",    "boolean",  "true",     "false",    "string", "number",
    "integer",     "float",     "mapping", "iterable", "sequence", "callable", "even",   "odd",
    "divisibleby", "eq",        "equalto", "ne",       "lt",       "gt",       "le",     "ge",
    "in",          "sameas",    "lower",   "upper",    NULL};

static int in_list(const char *const *l, const char *s) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s)) return 1;
    return 0;
}
int jinja_known_filter(const char *name) { return in_list(filters, name); }
int jinja_known_test(const char *name) { return in_list(tests, name); }

/* ---- tests ---- */

int jl_test(struct rs *r, const char *t, struct jv v, struct jv *args, size_t n) {
    struct jv a0 = n ? args[0] : jv_undef();
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.u.b;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.u.b;
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT;
    if (!strcmp(t, "iterable"))
        return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (!strcmp(t, "sequence"))
        return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (!strcmp(t, "callable")) return v.t == JV_FUNC;
    if (!strcmp(t, "even") || !strcmp(t, "odd")) {
        if (v.t != JV_INT && v.t != JV_BOOL) {
            rs_fail(r, "%s test needs an integer", t);
            return 0;
        }
        return (jl_int(v) % 2 == 0) == (t[0] == 'e');
    }
    if (!strcmp(t, "divisibleby")) {
        if (jl_int(a0) == 0) {
            rs_fail(r, "division by zero");
            return 0;
        }
        return jl_int(v) % jl_int(a0) == 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto")) return jv_equal(v, a0);
    if (!strcmp(t, "ne")) return !jv_equal(v, a0);
    if (!strcmp(t, "sameas"))
        return v.t == a0.t && (v.t == JV_NONE || v.t == JV_UNDEF ||
                               (v.t == JV_BOOL && v.u.b == a0.u.b) || jv_equal(v, a0));
    if (!strcmp(t, "in")) return jl_contains(r, a0, v);
    if (!strcmp(t, "lt") || !strcmp(t, "gt") || !strcmp(t, "le") || !strcmp(t, "ge")) {
        int c;
        if (jv_compare(v, a0, &c)) {
            rs_fail(r, "values do not compare");
            return 0;
        }
        return t[0] == 'l' ? (t[1] == 't' ? c < 0 : c <= 0) : (t[1] == 't' ? c > 0 : c >= 0);
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.t != JV_STR) return 0;
        struct jv m = jl_map_case(r, v, t[0] == 'u');
        return jv_equal(m, v);
    }
    rs_fail(r, "unknown test '%s'", t);
    return 0;
}

/* ---- filters ---- */

static struct jv attr_of(struct rs *r, struct jv v, struct jv name) {
    /* dotted attribute path, items of dicts */
    if (name.t == JV_INT)
        return v.t == JV_LIST && name.u.i >= 0 && (size_t)name.u.i < v.u.l->n ? v.u.l->v[name.u.i]
                                                                              : jv_undef();
    if (name.t != JV_STR) return jv_undef();
    const char *p = name.u.s->s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        struct jv *x = jv_dict_get(v, p, l);
        v = x ? *x : jv_undef();
        if (!dot) return v;
        p = dot + 1;
    }
    (void)r;
}

static int sort_cmp(struct rs *r, struct jv a, struct jv b, int case_sensitive, int *out) {
    if (!case_sensitive && a.t == JV_STR && b.t == JV_STR) {
        a = jl_map_case(r, a, 0);
        b = jl_map_case(r, b, 0);
    }
    if (jv_compare(a, b, out)) {
        rs_fail(r, "values in sort do not compare");
        return -1;
    }
    return 0;
}

/* stable insertion sort on keys (lists in templates are short) */
static int sort_list(struct rs *r, struct jv l, struct jv *keys, int reverse, int cs) {
    size_t n = l.u.l->n;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int c;
            if (sort_cmp(r, keys[j - 1], keys[j], cs, &c)) return -1;
            if (reverse ? c >= 0 : c <= 0) break;
            struct jv t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
            t = l.u.l->v[j];
            l.u.l->v[j] = l.u.l->v[j - 1];
            l.u.l->v[j - 1] = t;
        }
    return 0;
}

static struct jv gen_list(struct rs *r) {
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    l.u.l->gen = 1;
    return l;
}

static int has_gen(struct jv v, int depth) {
    if (depth > 256) return 1; /* too deep to serialize anyway */
    if (v.t == JV_LIST) {
        if (v.u.l->gen) return 1;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (has_gen(v.u.l->v[i], depth + 1)) return 1;
    }
    if (v.t == JV_DICT)
        for (size_t i = 0; i < v.u.d->n; i++)
            if (has_gen(v.u.d->v[i], depth + 1)) return 1;
    return 0;
}

static struct jv copy_list(struct rs *r, struct jv it) {
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    for (size_t i = 0; i < it.u.l->n; i++)
        if (jv_list_push(r->a, l, it.u.l->v[i])) return rs_fail(r, "out of memory");
    return l;
}

struct jv jl_escape(struct rs *r, struct jv v) {
    if (v.t == JV_STR && v.u.s->markup) return v;
    struct jv s = rs_to_str(r, v);
    if (r->failed) return s;
    struct buf b = {0};
    for (size_t i = 0; i < s.u.s->len; i++) {
        char c = s.u.s->s[i];
        switch (c) {
        case '&': buf_puts(&b, "&amp;"); break;
        case '<': buf_puts(&b, "&lt;"); break;
        case '>': buf_puts(&b, "&gt;"); break;
        case '"': buf_puts(&b, "&#34;"); break;
        case '\'': buf_puts(&b, "&#39;"); break;
        default: buf_put(&b, &c, 1);
        }
    }
    struct jv o = rs_take_buf(r, &b);
    if (o.t == JV_STR) o.u.s->markup = 1;
    return o;
}

static struct jv indent(struct rs *r, struct jv v, struct jv width, int first, int blank) {
    struct jv s = rs_to_str(r, v);
    if (r->failed) return s;
    struct buf ind = {0};
    if (width.t == JV_STR) buf_put(&ind, width.u.s->s, width.u.s->len);
    else
        for (int64_t i = 0; i < jl_int(width) && i < 1000; i++) buf_put(&ind, " ", 1);
    /* jinja2: s + "\n", splitlines, indent every line but the first (and blank ones only
     * when asked) */
    struct buf src = {0};
    buf_put(&src, s.u.s->s, s.u.s->len);
    buf_put(&src, "\n", 1);
    struct buf b = {0};
    size_t a = 0, line = 0;
    const char *p = src.p;
    for (size_t i = 0; i < src.n; i++) {
        if (p[i] != '\n' && p[i] != '\r') continue;
        size_t e = i;
        if (p[i] == '\r' && i + 1 < src.n && p[i + 1] == '\n') i++;
        if (line > 0) buf_put(&b, "\n", 1);
        if ((line > 0 || first) && (blank || e > a)) buf_put(&b, ind.p ? ind.p : "", ind.n);
        buf_put(&b, p + a, e - a);
        a = i + 1;
        line++;
    }
    struct jv o = b.too_deep || ind.too_deep || src.too_deep
                      ? rs_fail(r, "a value nested too deep to print")
                      : rs_str(r, b.p ? b.p : "", b.n);
    buf_free(&b);
    buf_free(&ind);
    buf_free(&src);
    return o;
}

struct jv jl_filter(struct rs *r, const char *f, struct jv v, struct jv *args, size_t n,
                    struct jv *kwn, struct jv *kwv, size_t nkw) {
#define ARG(pos, name, def) jl_arg(args, n, kwn, kwv, nkw, (pos), (name), (def))
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        int boolean = jv_truthy(ARG(1, "boolean", jv_bool(0)));
        if (v.t == JV_UNDEF || (boolean && !jv_truthy(v)))
            return ARG(0, "default_value", rs_str(r, "", 0));
        return v;
    }
    if (!strcmp(f, "safe")) {
        if (v.t == JV_STR && v.u.s->markup) return v;
        struct jv m = rs_to_str(r, v);
        if (r->failed) return m;
        struct jv c = rs_str(r, m.u.s->s, m.u.s->len);
        if (c.t == JV_STR) {
            c.u.s->markup = 1;
            c.u.s->sp = m.u.s->sp; /* arena-owned, read-only: shared */
            c.u.s->nsp = m.u.s->nsp;
        }
        m = c;
        return m;
    }
    if (!strcmp(f, "string")) return rs_to_str(r, v);
    if (!strcmp(f, "escape") || !strcmp(f, "e")) return jl_escape(r, v);
    if (!strcmp(f, "tojson")) {
        /* HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
        struct jv ind = ARG(1, "indent", jv_none());
        int flags = (jv_truthy(ARG(3, "sort_keys", jv_bool(0))) ? JV_JSON_SORT_KEYS : 0) |
                    (jv_truthy(ARG(0, "ensure_ascii", jv_bool(0))) ? JV_JSON_ASCII : 0);
        if (v.t == JV_UNDEF) return rs_fail(r, "Object of type Undefined is not JSON serializable");
        if (has_gen(v, 0)) return rs_fail(r, "Object of type generator is not JSON serializable");
        struct buf b = {0};
        jv_json_append(&b, v, ind.t == JV_INT ? (int)jl_int(ind) : -1, flags, 0);
        return rs_take_buf(r, &b);
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (v.t == JV_STR) return jv_int(jl_strlen(v));
        if (v.t == JV_LIST && v.u.l->gen)
            return rs_fail(r, "object of type 'generator' has no len()");
        if (v.t == JV_LIST) return jv_int((int64_t)v.u.l->n);
        if (v.t == JV_DICT) return jv_int((int64_t)v.u.d->n);
        if (v.t == JV_UNDEF) return jv_int(0);
        return rs_fail(r, "object of type '%s' has no len()", jv_type_name(v));
    }
    if (!strcmp(f, "int")) {
        if (v.t == JV_STR) {
            char *end;
            long long x = strtoll(v.u.s->s, &end, 10);
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            if (*end == 0 && end != v.u.s->s) return jv_int(x);
            double d = strtod(v.u.s->s, &end);
            if (end != v.u.s->s && isfinite(d)) return jv_int((int64_t)d);
            return ARG(0, "default", jv_int(0));
        }
        if (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT) return jv_int(jl_int(v));
        return ARG(0, "default", jv_int(0));
    }
    if (!strcmp(f, "float")) {
        if (v.t == JV_STR) {
            char *end;
            double d = strtod(v.u.s->s, &end);
            return end != v.u.s->s ? jv_float(d) : ARG(0, "default", jv_float(0));
        }
        if (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT) return jv_float(jl_num(v));
        return ARG(0, "default", jv_float(0));
    }
    if (!strcmp(f, "abs")) {
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_int(jl_int(v) < 0 ? -jl_int(v) : jl_int(v));
        return rs_fail(r, "bad operand type for abs()");
    }
    if (!strcmp(f, "round")) {
        int64_t prec = jl_int(ARG(0, "precision", jv_int(0)));
        struct jv method = ARG(1, "method", jv_undef());
        double x = jl_num(v), m = pow(10, (double)prec);
        double y = x * m;
        if (method.t == JV_STR && !strcmp(method.u.s->s, "floor")) y = floor(y);
        else if (method.t == JV_STR && !strcmp(method.u.s->s, "ceil")) y = ceil(y);
        else y = round(y);
        return jv_float(y / m);
    }
    if (!strcmp(f, "trim"))
        return v.t == JV_STR ? jl_strip(r, v, ARG(0, "chars", jv_none()), 1, 1)
                             : jl_strip(r, rs_to_str(r, v), jv_none(), 1, 1);
    if (!strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "capitalize") ||
        !strcmp(f, "title")) {
        struct jv s = rs_to_str(r, v);
        if (r->failed) return s;
        return jl_map_case(r, s, f[0] == 'l' ? 0 : f[0] == 'u' ? 1 : f[0] == 'c' ? 2 : 3);
    }
    if (!strcmp(f, "replace")) {
        struct jv s = rs_to_str(r, v);
        if (r->failed) return s;
        return jl_replace(r, s, ARG(0, "old", jv_none()), ARG(1, "new", jv_none()),
                          jl_int(ARG(2, "count", jv_int(-1))));
    }
    if (!strcmp(f, "indent"))
        return indent(r, v, ARG(0, "width", jv_int(4)), jv_truthy(ARG(1, "first", jv_bool(0))),
                      jv_truthy(ARG(2, "blank", jv_bool(0))));
    if (!strcmp(f, "wordcount")) {
        struct jv s = rs_to_str(r, v);
        if (r->failed) return s;
        struct jv w = jl_split(r, s, jv_none(), -1);
        return r->failed ? w : jv_int((int64_t)w.u.l->n);
    }
    if (!strcmp(f, "items")) {
        if (v.t == JV_UNDEF) return jv_list(r->a);
        if (v.t != JV_DICT) return rs_fail(r, "items filter needs a mapping");
        return jl_items_of(r, v);
    }
    if (!strcmp(f, "dictsort")) {
        if (v.t != JV_DICT) return rs_fail(r, "dictsort filter needs a mapping");
        struct jv l = jl_items_of(r, v);
        if (r->failed) return l;
        int by_value = ARG(1, "by", jv_undef()).t == JV_STR &&
                       !strcmp(ARG(1, "by", jv_undef()).u.s->s, "value");
        struct jv *keys = arena_alloc(r->a, (l.u.l->n + 1) * sizeof(*keys));
        if (!keys) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < l.u.l->n; i++) keys[i] = l.u.l->v[i].u.l->v[by_value];
        if (sort_list(r, l, keys, jv_truthy(ARG(2, "reverse", jv_bool(0))),
                      jv_truthy(ARG(0, "case_sensitive", jv_bool(0)))))
            return jv_undef();
        return l;
    }
    /* the rest work on a sequence; jinja2's select/reject/map family skip a false one */
    int lazy = !strcmp(f, "map") || !strcmp(f, "select") || !strcmp(f, "reject") ||
               !strcmp(f, "selectattr") || !strcmp(f, "rejectattr");
    if (lazy && !jv_truthy(v)) return gen_list(r);
    struct jv it = jl_iterable(r, v);
    if (r->failed) return it;
    if (!strcmp(f, "list")) return copy_list(r, it);
    if (!strcmp(f, "first")) return it.u.l->n ? it.u.l->v[0] : jv_undef();
    if (!strcmp(f, "last")) return it.u.l->n ? it.u.l->v[it.u.l->n - 1] : jv_undef();
    if (!strcmp(f, "reverse")) {
        if (v.t == JV_STR) return jl_str_slice(r, v, jl_strlen(v) - 1, -1, -1);
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (size_t i = it.u.l->n; i-- > 0;)
            if (jv_list_push(r->a, l, it.u.l->v[i])) return rs_fail(r, "out of memory");
        return l;
    }
    if (!strcmp(f, "join")) {
        struct jv sep = ARG(0, "d", rs_str(r, "", 0));
        struct jv at = ARG(1, "attribute", jv_none());
        struct buf b = {0};
        for (size_t i = 0; i < it.u.l->n; i++) {
            if (i) jv_str_append(&b, sep);
            jv_str_append(&b, at.t != JV_NONE ? attr_of(r, it.u.l->v[i], at) : it.u.l->v[i]);
        }
        return rs_take_buf(r, &b);
    }
    if (!strcmp(f, "map")) {
        struct jv at = ARG(99, "attribute", jv_undef());
        struct jv l = gen_list(r);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < it.u.l->n; i++) {
            struct jv x;
            if (at.t != JV_UNDEF) {
                x = attr_of(r, it.u.l->v[i], at);
                if (x.t == JV_UNDEF) x = ARG(99, "default", jv_undef());
            } else if (n >= 1 && args[0].t == JV_STR) {
                if (!jinja_known_filter(args[0].u.s->s))
                    return rs_fail(r, "unknown filter '%s'", args[0].u.s->s);
                x = jl_filter(r, args[0].u.s->s, it.u.l->v[i], args + 1, n - 1, kwn, kwv, nkw);
            } else {
                return rs_fail(r, "map needs a filter name or attribute=");
            }
            if (r->failed || jv_list_push(r->a, l, x)) return rs_fail(r, "out of memory");
        }
        return l;
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") ||
        !strcmp(f, "rejectattr")) {
        int by_attr = strstr(f, "attr") != NULL, keep_true = f[0] == 's';
        size_t k = by_attr ? 1 : 0;
        struct jv l = gen_list(r);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < it.u.l->n; i++) {
            struct jv x = by_attr ? attr_of(r, it.u.l->v[i], n ? args[0] : jv_undef())
                                  : it.u.l->v[i];
            int ok;
            if (n > k) {
                if (args[k].t != JV_STR || !jinja_known_test(args[k].u.s->s))
                    return rs_fail(r, "unknown test in %s", f);
                ok = jl_test(r, args[k].u.s->s, x, args + k + 1, n - k - 1);
                if (r->failed) return jv_undef();
            } else {
                ok = jv_truthy(x);
            }
            if (ok == keep_true && jv_list_push(r->a, l, it.u.l->v[i]))
                return rs_fail(r, "out of memory");
        }
        return l;
    }
    if (!strcmp(f, "unique")) {
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < it.u.l->n; i++)
            if (!jl_contains(r, l, it.u.l->v[i]) && jv_list_push(r->a, l, it.u.l->v[i]))
                return rs_fail(r, "out of memory");
        return l;
    }
    if (!strcmp(f, "sort") || !strcmp(f, "min") || !strcmp(f, "max")) {
        int is_sort = f[0] == 's';
        struct jv l = copy_list(r, it);
        if (r->failed) return l;
        struct jv at = ARG(is_sort ? 2 : 1, "attribute", jv_none());
        int cs = jv_truthy(ARG(is_sort ? 1 : 0, "case_sensitive", jv_bool(0)));
        struct jv *keys = arena_alloc(r->a, (l.u.l->n + 1) * sizeof(*keys));
        if (!keys) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < l.u.l->n; i++)
            keys[i] = at.t != JV_NONE ? attr_of(r, l.u.l->v[i], at) : l.u.l->v[i];
        if (sort_list(r, l, keys, is_sort && jv_truthy(ARG(0, "reverse", jv_bool(0))), cs))
            return jv_undef();
        if (is_sort) return l;
        if (!l.u.l->n) return jv_undef();
        return f[1] == 'i' ? l.u.l->v[0] : l.u.l->v[l.u.l->n - 1];
    }
    if (!strcmp(f, "sum")) {
        struct jv at = ARG(0, "attribute", jv_none());
        struct jv acc = ARG(1, "start", jv_int(0));
        for (size_t i = 0; i < it.u.l->n; i++) {
            struct jv x = at.t != JV_NONE ? attr_of(r, it.u.l->v[i], at) : it.u.l->v[i];
            if ((x.t != JV_INT && x.t != JV_FLOAT && x.t != JV_BOOL) ||
                (acc.t != JV_INT && acc.t != JV_FLOAT && acc.t != JV_BOOL))
                return rs_fail(r, "sum needs numbers");
            if (acc.t == JV_FLOAT || x.t == JV_FLOAT) acc = jv_float(jl_num(acc) + jl_num(x));
            else acc = jv_int(jl_int(acc) + jl_int(x));
        }
        return acc;
    }
#undef ARG
    return rs_fail(r, "unsupported filter '%s'", f);
}
