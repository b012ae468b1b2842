#include "jinja_lib.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "../util/err.h"
#include "../util/utf8.h"

/* ---- render state ---- */

struct jv rs_fail(struct rs *r, const char *fmt, ...) {
    if (!r->failed) {
        char msg[ERR_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        err_set(r->err, "%s", msg);
        r->failed = 1;
    }
    return jv_undef();
}

struct jv rs_str(struct rs *r, const char *s, size_t n) {
    struct jv v = jv_str(r->a, s, n);
    if (v.t != JV_STR) return rs_fail(r, "out of memory");
    return v;
}

struct jv rs_take_buf(struct rs *r, struct buf *b) {
    struct jv v = b->too_deep ? rs_fail(r, "a value nested too deep to print")
                              : rs_str(r, b->p ? b->p : "", b->n);
    if (v.t == JV_STR && b->nsp) {
        v.u.s->sp = arena_alloc(r->a, b->nsp * sizeof(struct jspan));
        if (!v.u.s->sp) v = rs_fail(r, "out of memory");
        else {
            memcpy(v.u.s->sp, b->sp, b->nsp * sizeof(struct jspan));
            v.u.s->nsp = b->nsp;
        }
    }
    buf_free(b);
    return v;
}

/* taint_d changes only strings, lists and dicts */
static int same(struct jv a, struct jv b) {
    if (a.t != b.t) return 0;
    return a.t == JV_STR    ? a.u.s == b.u.s
           : a.t == JV_LIST ? a.u.l == b.u.l
           : a.t == JV_DICT ? a.u.d == b.u.d
                            : 1;
}

/* Copies of lists and dicts are made only where a string changes: values may be shared
 * with the template (literals) or the caller's data, and are never written in place. */
static struct jv taint_d(struct rs *r, struct jv v, int depth) {
    if (r->failed || depth > 64) return v;
    if (v.t == JV_STR) {
        struct jv c = jv_str_as_data(r->a, v);
        return c.t == JV_STR ? c : rs_fail(r, "out of memory");
    }
    if (v.t == JV_LIST) {
        int changed = 0;
        struct jv *e = arena_alloc(r->a, (v.u.l->n + 1) * sizeof(struct jv));
        if (!e) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < v.u.l->n; i++) {
            e[i] = taint_d(r, v.u.l->v[i], depth + 1);
            if (r->failed) return jv_undef();
            changed |= !same(e[i], v.u.l->v[i]);
        }
        if (!changed) return v;
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        l.u.l->gen = v.u.l->gen;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (jv_list_push(r->a, l, e[i])) return rs_fail(r, "out of memory");
        return l;
    }
    if (v.t == JV_DICT && !v.u.d->ns) {
        int changed = 0;
        struct jv *kk = arena_alloc(r->a, (v.u.d->n + 1) * 2 * sizeof(struct jv));
        if (!kk) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < v.u.d->n; i++) {
            kk[2 * i] = taint_d(r, v.u.d->k[i], depth + 1);
            kk[2 * i + 1] = taint_d(r, v.u.d->v[i], depth + 1);
            if (r->failed) return jv_undef();
            changed |= !same(kk[2 * i], v.u.d->k[i]) || !same(kk[2 * i + 1], v.u.d->v[i]);
        }
        if (!changed) return v;
        struct jv d = jv_dict(r->a);
        if (d.t != JV_DICT) return rs_fail(r, "out of memory");
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_dict_set(r->a, d, kk[2 * i], kk[2 * i + 1])) return rs_fail(r, "out of memory");
        return d;
    }
    return v;
}

struct jv rs_taint(struct rs *r, struct jv v) {
    return taint_d(r, v, 0);
}

struct jv rs_to_str(struct rs *r, struct jv v) {
    if (v.t == JV_STR) return v;
    struct buf b = {0};
    jv_str_append(&b, v);
    return rs_take_buf(r, &b);
}

int64_t jl_int(struct jv v) {
    return v.t == JV_INT ? v.u.i : v.t == JV_BOOL ? v.u.b : v.t == JV_FLOAT ? (int64_t)v.u.f : 0;
}
double jl_num(struct jv v) { return v.t == JV_FLOAT ? v.u.f : (double)jl_int(v); }

/* ---- strings by codepoint ---- */

int jl_to_cps(struct rs *r, struct jv s, struct cps *c) {
    c->n = 0;
    c->v = arena_alloc(r->a, (s.u.s->len + 1) * sizeof(uint32_t));
    if (!c->v) {
        rs_fail(r, "out of memory");
        return -1;
    }
    const uint8_t *p = (const uint8_t *)s.u.s->s;
    size_t n = s.u.s->len;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_valid_len(p + i, n - i);
        c->v[c->n++] = l ? utf8_decode(p + i, l) : 0xFFFD;
        i += l ? l : 1;
    }
    return 0;
}

struct jv jl_from_cps(struct rs *r, const uint32_t *v, size_t n) {
    struct buf b = {0};
    for (size_t i = 0; i < n; i++) {
        uint8_t u[4];
        buf_put(&b, (const char *)u, utf8_encode(v[i], u));
    }
    return rs_take_buf(r, &b);
}

int64_t jl_strlen(struct jv s) {
    int64_t n = 0;
    for (size_t i = 0; i < s.u.s->len; i++) n += ((uint8_t)s.u.s->s[i] & 0xC0) != 0x80;
    return n;
}

static struct jv str_slice(struct rs *r, struct jv s, int64_t start, int64_t stop, int64_t step);

struct jv jl_str_slice(struct rs *r, struct jv s, int64_t start, int64_t stop, int64_t step) {
    struct jv v = str_slice(r, s, start, stop, step);
    return s.u.s->nsp ? rs_taint(r, v) : v;
}

static struct jv str_slice(struct rs *r, struct jv s, int64_t start, int64_t stop, int64_t step) {
    struct cps c;
    if (jl_to_cps(r, s, &c)) return jv_undef();
    uint32_t *o = arena_alloc(r->a, (c.n + 1) * sizeof(uint32_t));
    if (!o) return rs_fail(r, "out of memory");
    size_t k = 0;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (i >= 0 && (size_t)i < c.n) o[k++] = c.v[i];
    return jl_from_cps(r, o, k);
}

/* Python's str.isspace */
int jl_py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static int cp_in(struct cps set, uint32_t x);

/* Byte offset of codepoint k of s, stepping as jl_to_cps does. */
static size_t cp_off(struct jv s, size_t k) {
    const uint8_t *p = (const uint8_t *)s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    for (; k && i < n; k--) {
        size_t l = utf8_valid_len(p + i, n - i);
        i += l ? l : 1;
    }
    return i;
}

/* res, cut from s at byte off, gets s's data spans clipped to it; when its bytes are not
 * s's there (invalid UTF-8 was replaced) and s holds data, all of it is data. */
static struct jv sub_spans(struct rs *r, struct jv s, size_t off, struct jv res) {
    if (r->failed || res.t != JV_STR || !s.u.s->nsp) return res;
    if (off + res.u.s->len > s.u.s->len || memcmp(s.u.s->s + off, res.u.s->s, res.u.s->len))
        return rs_taint(r, res);
    size_t end = off + res.u.s->len, k = 0;
    for (size_t i = 0; i < s.u.s->nsp; i++)
        k += s.u.s->sp[i].off < end && off < s.u.s->sp[i].off + s.u.s->sp[i].len;
    if (!k) return res;
    struct jspan *sp = arena_alloc(r->a, k * sizeof(*sp));
    if (!sp) return rs_fail(r, "out of memory");
    k = 0;
    for (size_t i = 0; i < s.u.s->nsp; i++) {
        size_t a = s.u.s->sp[i].off, b = a + s.u.s->sp[i].len;
        if (a >= end || b <= off) continue;
        if (a < off) a = off;
        if (b > end) b = end;
        sp[k].off = a - off;
        sp[k].len = b - a;
        k++;
    }
    res.u.s->sp = sp;
    res.u.s->nsp = k;
    return res;
}

struct jv jl_strip(struct rs *r, struct jv s, struct jv chars, int left, int right) {
    struct cps c, set = {0};
    if (jl_to_cps(r, s, &c)) return jv_undef();
    int use_set = chars.t == JV_STR;
    if (use_set && jl_to_cps(r, chars, &set)) return jv_undef();
    size_t a = 0, b = c.n;
#define STRIPPABLE(x) (use_set ? cp_in(set, (x)) : jl_py_space(x))
    while (left && a < b && STRIPPABLE(c.v[a])) a++;
    while (right && b > a && STRIPPABLE(c.v[b - 1])) b--;
#undef STRIPPABLE
    return sub_spans(r, s, cp_off(s, a), jl_from_cps(r, c.v + a, b - a));
}

static int cp_in(struct cps set, uint32_t x) {
    for (size_t i = 0; i < set.n; i++)
        if (set.v[i] == x) return 1;
    return 0;
}

struct jv jl_map_case(struct rs *r, struct jv s, int mode) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title */
    struct cps c;
    if (jl_to_cps(r, s, &c)) return jv_undef();
    int word_start = 1;
    for (size_t i = 0; i < c.n; i++) {
        uint32_t x = c.v[i];
        int up;
        if (mode == 0) up = 0;
        else if (mode == 1) up = 1;
        else if (mode == 2) up = i == 0;
        else {
            /* jinja2's title: words begin after runs of '-', whitespace, '(', '{', '[', '<' */
            up = word_start;
            word_start = x == '-' || jl_py_space(x) || x == '(' || x == '{' || x == '[' || x == '<';
        }
        c.v[i] = (uint32_t)(up ? utf8proc_toupper((utf8proc_int32_t)x)
                               : utf8proc_tolower((utf8proc_int32_t)x));
    }
    return jl_from_cps(r, c.v, c.n);
}

static int str_find(struct jv hay, struct jv needle, size_t from, size_t *at) {
    size_t n = hay.u.s->len, m = needle.u.s->len;
    if (m == 0) {
        *at = from <= n ? from : n;
        return from <= n;
    }
    for (size_t i = from; i + m <= n; i++)
        if (!memcmp(hay.u.s->s + i, needle.u.s->s, m)) {
            *at = i;
            return 1;
        }
    return 0;
}

struct jv jl_replace(struct rs *r, struct jv s, struct jv old, struct jv new, int64_t count) {
    if (old.t != JV_STR || new.t != JV_STR)
        return rs_fail(r, "jl_replace() arguments must be strings");
    struct buf b = {0};
    size_t i = 0, at;
    int64_t done = 0;
    if (old.u.s->len == 0) { /* Python inserts between every character */
        struct cps c;
        if (jl_to_cps(r, s, &c)) return jv_undef();
        for (size_t k = 0; k <= c.n; k++) {
            if (count < 0 || done < count) {
                buf_put(&b, new.u.s->s, new.u.s->len);
                done++;
            }
            if (k < c.n) {
                uint8_t u[4];
                buf_put(&b, (const char *)u, utf8_encode(c.v[k], u));
            }
        }
    } else {
        while ((count < 0 || done < count) && str_find(s, old, i, &at)) {
            buf_put(&b, s.u.s->s + i, at - i);
            buf_put(&b, new.u.s->s, new.u.s->len);
            i = at + old.u.s->len;
            done++;
        }
        buf_put(&b, s.u.s->s + i, s.u.s->len - i);
    }
    return rs_take_buf(r, &b);
}

struct jv jl_split(struct rs *r, struct jv s, struct jv sep, int64_t maxsplit) {
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, i = 0;
    int64_t done = 0;
    if (sep.t == JV_STR) {
        if (sep.u.s->len == 0) return rs_fail(r, "empty separator");
        size_t at;
        while ((maxsplit < 0 || done < maxsplit) && str_find(s, sep, i, &at)) {
            if (jv_list_push(r->a, l, sub_spans(r, s, i, rs_str(r, p + i, at - i))))
                return rs_fail(r, "out of memory");
            i = at + sep.u.s->len;
            done++;
        }
        if (jv_list_push(r->a, l, sub_spans(r, s, i, rs_str(r, p + i, n - i))))
            return rs_fail(r, "out of memory");
        return l;
    }
    /* whitespace split: runs of whitespace, no empty strings */
    struct cps c;
    if (jl_to_cps(r, s, &c)) return jv_undef();
    size_t k = 0;
    while (k < c.n) {
        while (k < c.n && jl_py_space(c.v[k])) k++;
        if (k >= c.n) break;
        size_t a = k;
        if (maxsplit >= 0 && done >= maxsplit) {
            size_t e = c.n;
            while (e > a && jl_py_space(c.v[e - 1])) e--;
            if (jv_list_push(r->a, l, jl_from_cps(r, c.v + a, e - a)))
                return rs_fail(r, "out of memory");
            break;
        }
        while (k < c.n && !jl_py_space(c.v[k])) k++;
        if (jv_list_push(r->a, l, jl_from_cps(r, c.v + a, k - a)))
            return rs_fail(r, "out of memory");
        done++;
    }
    return s.u.s->nsp ? rs_taint(r, l) : l; /* coarse: pieces are not tracked */
}

int jl_contains(struct rs *r, struct jv c, struct jv x) {
    if (c.t == JV_STR) {
        if (x.t != JV_STR) {
            rs_fail(r, "'in <string>' requires string as left operand");
            return 0;
        }
        size_t at;
        return str_find(c, x, 0, &at);
    }
    if (c.t == JV_LIST) {
        for (size_t i = 0; i < c.u.l->n; i++)
            if (jv_equal(c.u.l->v[i], x)) return 1;
        return 0;
    }
    if (c.t == JV_DICT) return jv_dict_getv(c, x) != NULL;
    if (c.t == JV_UNDEF) return 0;
    rs_fail(r, "argument of type '%s' is not iterable", jv_type_name(c));
    return 0;
}

struct jv jl_iterable(struct rs *r, struct jv v) {
    if (v.t == JV_LIST) return v;
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    if (v.t == JV_UNDEF || v.t == JV_NONE) {
        if (v.t == JV_NONE) return rs_fail(r, "'NoneType' object is not iterable");
        return l;
    }
    if (v.t == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jv_list_push(r->a, l, v.u.d->k[i])) return rs_fail(r, "out of memory");
        return l;
    }
    if (v.t == JV_STR) {
        struct cps c;
        if (jl_to_cps(r, v, &c)) return jv_undef();
        for (size_t i = 0; i < c.n; i++)
            if (jv_list_push(r->a, l, jl_from_cps(r, c.v + i, 1)))
                return rs_fail(r, "out of memory");
        return l;
    }
    return rs_fail(r, "'%s' object is not iterable", jv_type_name(v));
}

static int dset(struct rs *r, struct jv d, const char *k, struct jv v) {
    if (jv_dict_set(r->a, d, rs_str(r, k, strlen(k)), v)) {
        rs_fail(r, "out of memory");
        return -1;
    }
    return 0;
}

static struct jv func(struct rs *r, enum jfunc_kind kind, const char *name, struct jv self) {
    struct jfunc *f = arena_alloc(r->a, sizeof(*f));
    if (!f) return rs_fail(r, "out of memory");
    f->kind = kind;
    f->name = name;
    f->self = self;
    struct jv v = {JV_FUNC, {0}};
    v.u.fn = f;
    return v;
}

struct jv jl_loop_object(struct rs *r, struct jv items, size_t i) {
    size_t n = items.u.l->n;
    struct jv d = jv_dict(r->a);
    if (d.t != JV_DICT) return rs_fail(r, "out of memory");
    if (dset(r, d, "index", jv_int((int64_t)i + 1)) || dset(r, d, "index0", jv_int((int64_t)i)) ||
        dset(r, d, "revindex", jv_int((int64_t)(n - i))) ||
        dset(r, d, "revindex0", jv_int((int64_t)(n - i - 1))) ||
        dset(r, d, "first", jv_bool(i == 0)) || dset(r, d, "last", jv_bool(i + 1 == n)) ||
        dset(r, d, "length", jv_int((int64_t)n)) || dset(r, d, "depth", jv_int(1)) ||
        dset(r, d, "depth0", jv_int(0)) ||
        dset(r, d, "previtem", i > 0 ? items.u.l->v[i - 1] : jv_undef()) ||
        dset(r, d, "nextitem", i + 1 < n ? items.u.l->v[i + 1] : jv_undef()) ||
        dset(r, d, "cycle", func(r, JF_CYCLE, "cycle", jv_int((int64_t)i))))
        return jv_undef();
    return d;
}

static const char *const str_methods[] = {
    "strip",   "lstrip",       "rstrip",       "split",      "startswith", "endswith",
    "upper",   "lower",        "title",        "capitalize", "replace",    "find",
    "count",   "join",         "splitlines",   "isdigit",    "isalpha",    "isspace",
    "isalnum", "removeprefix", "removesuffix", "format",     NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};

struct jv jl_method(struct rs *r, struct jv obj, const char *name) {
    const char *const *l = obj.t == JV_STR                    ? str_methods
                           : obj.t == JV_DICT && !obj.u.d->ns ? dict_methods
                                                              : NULL;
    if (!l) return jv_undef();
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name)) return func(r, JF_METHOD, l[i], obj);
    return jv_undef();
}

static const char *const globals[] = {"range",        "namespace", "raise_exception",
                                      "strftime_now", "dict",      NULL};

struct jv jl_global(struct rs *r, const char *name) {
    for (int i = 0; globals[i]; i++)
        if (!strcmp(globals[i], name)) return func(r, JF_BUILTIN, globals[i], jv_undef());
    return jv_undef();
}

/* positional-or-keyword argument */
struct jv jl_arg(struct jv *args, size_t n, struct jv *kwn, struct jv *kwv, size_t nkw, size_t pos,
                 const char *name, struct jv def) {
    if (pos < n) return args[pos];
    for (size_t i = 0; i < nkw; i++)
        if (kwn[i].t == JV_STR && !strcmp(kwn[i].u.s->s, name)) return kwv[i];
    return def;
}

struct jv jl_items_of(struct rs *r, struct jv d) {
    struct jv l = jv_list(r->a);
    if (l.t != JV_LIST) return rs_fail(r, "out of memory");
    for (size_t i = 0; i < d.u.d->n; i++) {
        struct jv p = jv_list(r->a);
        if (p.t != JV_LIST || jv_list_push(r->a, p, d.u.d->k[i]) ||
            jv_list_push(r->a, p, d.u.d->v[i]) || jv_list_push(r->a, l, p))
            return rs_fail(r, "out of memory");
    }
    return l;
}

/* str.format with {}, {N} and {name} fields ("{{" and "}}" escape); format specs and
 * conversions are not supported. */
static struct jv str_format(struct rs *r, struct jv s, struct jv *args, size_t n, struct jv *kwn,
                            struct jv *kwv, size_t nkw) {
    struct buf b = {0};
    const char *p = s.u.s->s;
    size_t len = s.u.s->len, auto_i = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '{' && i + 1 < len && p[i + 1] == '{') {
            buf_put(&b, "{", 1);
            i++;
            continue;
        }
        if (p[i] == '}' && i + 1 < len && p[i + 1] == '}') {
            buf_put(&b, "}", 1);
            i++;
            continue;
        }
        if (p[i] != '{') {
            buf_put(&b, p + i, 1);
            continue;
        }
        size_t e = i + 1;
        while (e < len && p[e] != '}') e++;
        if (e >= len) {
            buf_free(&b);
            return rs_fail(r, "single '{' in format string");
        }
        const char *f = p + i + 1;
        size_t fl = e - i - 1;
        if (memchr(f, ':', fl) || memchr(f, '!', fl)) {
            buf_free(&b);
            return rs_fail(r, "format specs are not supported");
        }
        struct jv v = jv_undef();
        int found = 0;
        if (fl == 0) {
            if (auto_i < n) {
                v = args[auto_i];
                found = 1;
            }
            auto_i++;
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = (size_t)atoi(f);
            if (k < n) {
                v = args[k];
                found = 1;
            }
        } else
            for (size_t k = 0; k < nkw; k++)
                if (kwn[k].u.s->len == fl && !memcmp(kwn[k].u.s->s, f, fl)) {
                    v = kwv[k];
                    found = 1;
                }
        if (!found) {
            buf_free(&b);
            return rs_fail(r, "format: missing argument '%.*s'", (int)fl, f);
        }
        jv_str_append(&b, v);
        i = e;
    }
    return rs_take_buf(r, &b);
}

static struct jv call_method(struct rs *r, struct jfunc *f, struct jv *args, size_t n,
                             struct jv *kwn, struct jv *kwv, size_t nkw) {
    struct jv s = f->self;
    const char *m = f->name;
    if (s.t == JV_DICT) {
        if (!strcmp(m, "items")) return jl_items_of(r, s);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            struct jv l = jv_list(r->a);
            if (l.t != JV_LIST) return rs_fail(r, "out of memory");
            for (size_t i = 0; i < s.u.d->n; i++)
                if (jv_list_push(r->a, l, m[0] == 'k' ? s.u.d->k[i] : s.u.d->v[i]))
                    return rs_fail(r, "out of memory");
            return l;
        }
        if (!strcmp(m, "get")) {
            if (n < 1) return rs_fail(r, "get() needs a key");
            struct jv *v = jv_dict_getv(s, args[0]);
            return v ? *v : n > 1 ? args[1] : jv_none();
        }
    }
    struct jv a0 = jl_arg(args, n, kwn, kwv, nkw, 0, "", jv_none());
    if (!strcmp(m, "strip")) return jl_strip(r, s, a0, 1, 1);
    if (!strcmp(m, "lstrip")) return jl_strip(r, s, a0, 1, 0);
    if (!strcmp(m, "rstrip")) return jl_strip(r, s, a0, 0, 1);
    if (!strcmp(m, "upper")) return jl_map_case(r, s, 1);
    if (!strcmp(m, "lower")) return jl_map_case(r, s, 0);
    if (!strcmp(m, "capitalize")) return jl_map_case(r, s, 2);
    if (!strcmp(m, "title")) return jl_map_case(r, s, 3);
    if (!strcmp(m, "split")) {
        struct jv ms = jl_arg(args, n, kwn, kwv, nkw, 1, "maxsplit", jv_int(-1));
        return jl_split(r, s, jl_arg(args, n, kwn, kwv, nkw, 0, "sep", jv_none()), jl_int(ms));
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        int end = m[0] == 'e';
        struct jv opts = a0.t == JV_LIST ? a0 : jv_undef();
        size_t k = opts.t == JV_LIST ? opts.u.l->n : 1;
        for (size_t i = 0; i < k; i++) {
            struct jv p = opts.t == JV_LIST ? opts.u.l->v[i] : a0;
            if (p.t != JV_STR) return rs_fail(r, "%s() argument must be str", m);
            size_t pl = p.u.s->len, sl = s.u.s->len;
            if (pl <= sl && !memcmp(s.u.s->s + (end ? sl - pl : 0), p.u.s->s, pl))
                return jv_bool(1);
        }
        return jv_bool(0);
    }
    if (!strcmp(m, "replace"))
        return jl_replace(r, s, a0, jl_arg(args, n, kwn, kwv, nkw, 1, "new", jv_none()),
                          jl_int(jl_arg(args, n, kwn, kwv, nkw, 2, "count", jv_int(-1))));
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        if (a0.t != JV_STR) return rs_fail(r, "%s() argument must be str", m);
        size_t at, i = 0;
        int64_t cnt = 0;
        if (m[0] == 'f') {
            if (!str_find(s, a0, 0, &at)) return jv_int(-1);
            struct jv pre = rs_str(r, s.u.s->s, at);
            return jv_int(jl_strlen(pre));
        }
        if (a0.u.s->len == 0) return jv_int(jl_strlen(s) + 1);
        while (str_find(s, a0, i, &at)) {
            cnt++;
            i = at + a0.u.s->len;
        }
        return jv_int(cnt);
    }
    if (!strcmp(m, "join")) {
        struct jv it = jl_iterable(r, a0);
        if (r->failed) return it;
        struct buf b = {0};
        for (size_t i = 0; i < it.u.l->n; i++) {
            if (it.u.l->v[i].t != JV_STR) {
                buf_free(&b);
                return rs_fail(r, "join() expects strings");
            }
            if (i) buf_put_jstr(&b, s.u.s);
            buf_put_jstr(&b, it.u.l->v[i].u.s);
        }
        return rs_take_buf(r, &b);
    }
    if (!strcmp(m, "splitlines")) {
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        const char *p = s.u.s->s;
        size_t len = s.u.s->len, a = 0;
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '\n' || p[i] == '\r') {
                if (jv_list_push(r->a, l, rs_str(r, p + a, i - a)))
                    return rs_fail(r, "out of memory");
                if (p[i] == '\r' && i + 1 < len && p[i + 1] == '\n') i++;
                a = i + 1;
            }
        }
        if (a < len && jv_list_push(r->a, l, rs_str(r, p + a, len - a)))
            return rs_fail(r, "out of memory");
        return l;
    }
    if (!strncmp(m, "is", 2)) {
        struct cps c;
        if (jl_to_cps(r, s, &c)) return jv_undef();
        if (c.n == 0) return jv_bool(0);
        for (size_t i = 0; i < c.n; i++) {
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c.v[i]);
            int alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            int digit = cat == UTF8PROC_CATEGORY_ND;
            int ok = !strcmp(m, "isdigit")   ? digit
                     : !strcmp(m, "isalpha") ? alpha
                     : !strcmp(m, "isspace") ? jl_py_space(c.v[i])
                                             : (alpha || digit);
            if (!ok) return jv_bool(0);
        }
        return jv_bool(1);
    }
    if (!strcmp(m, "format")) { /* its own text is copied without spans */
        struct jv v = str_format(r, s, args, n, kwn, kwv, nkw);
        return s.u.s->nsp ? rs_taint(r, v) : v;
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (a0.t != JV_STR) return rs_fail(r, "%s() argument must be str", m);
        size_t pl = a0.u.s->len, sl = s.u.s->len;
        int suf = m[6] == 's';
        if (pl <= sl && !memcmp(s.u.s->s + (suf ? sl - pl : 0), a0.u.s->s, pl))
            return rs_str(r, s.u.s->s + (suf ? 0 : pl), sl - pl);
        return s;
    }
    return rs_fail(r, "unsupported method '%s'", m);
}

struct jv jl_call_builtin(struct rs *r, struct jfunc *f, struct jv *args, size_t n, struct jv *kwn,
                          struct jv *kwv, size_t nkw) {
    if (f->kind == JF_METHOD) return call_method(r, f, args, n, kwn, kwv, nkw);
    if (f->kind == JF_CYCLE) {
        if (n == 0) return rs_fail(r, "no items for cycling given");
        return args[(size_t)jl_int(f->self) % n];
    }
    const char *m = f->name;
    if (!strcmp(m, "range")) {
        int64_t start = 0, stop, step = 1;
        for (size_t i = 0; i < n; i++)
            if (args[i].t != JV_INT && args[i].t != JV_BOOL)
                return rs_fail(r, "range() arguments must be integers");
        if (n == 1) stop = jl_int(args[0]);
        else if (n == 2 || n == 3) {
            start = jl_int(args[0]);
            stop = jl_int(args[1]);
            if (n == 3) step = jl_int(args[2]);
        } else return rs_fail(r, "range() takes 1 to 3 arguments");
        if (step == 0) return rs_fail(r, "range() step must not be zero");
        struct jv l = jv_list(r->a);
        if (l.t != JV_LIST) return rs_fail(r, "out of memory");
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l.u.l->n >= 1000000) return rs_fail(r, "range too large");
            if (jv_list_push(r->a, l, jv_int(i))) return rs_fail(r, "out of memory");
        }
        return l;
    }
    if (!strcmp(m, "namespace") || !strcmp(m, "dict")) {
        struct jv d = jv_dict(r->a);
        if (d.t != JV_DICT) return rs_fail(r, "out of memory");
        d.u.d->ns = m[0] == 'n';
        for (size_t i = 0; i < n; i++) {
            if (args[i].t != JV_DICT)
                return rs_fail(r, "%s() positional argument must be a mapping", m);
            for (size_t k = 0; k < args[i].u.d->n; k++)
                if (jv_dict_set(r->a, d, args[i].u.d->k[k], args[i].u.d->v[k]))
                    return rs_fail(r, "out of memory");
        }
        for (size_t i = 0; i < nkw; i++)
            if (jv_dict_set(r->a, d, kwn[i], kwv[i])) return rs_fail(r, "out of memory");
        return d;
    }
    if (!strcmp(m, "raise_exception")) {
        struct buf b = {0};
        if (n) jv_str_append(&b, args[0]);
        rs_fail(r, "template raised an exception: %s", b.p ? b.p : "");
        buf_free(&b);
        return jv_undef();
    }
    if (!strcmp(m, "strftime_now")) {
        if (n < 1 || args[0].t != JV_STR) return rs_fail(r, "strftime_now() needs a format string");
        char out[256];
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(out, sizeof(out), args[0].u.s->s, &tm);
        return rs_str(r, out, k);
    }
    return rs_fail(r, "unknown function '%s'", m);
}
