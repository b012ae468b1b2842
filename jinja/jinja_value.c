#include "jinja_value.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "../util/sbuf.h"

#define MAX_VALUE_DEPTH 256

/* ---- arena ---- */

struct arena_chunk {
    struct arena_chunk *next;
    size_t size, used;
    _Alignas(16) char data[];
};

void *arena_alloc(struct arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > (1u << 16) ? n : (1u << 16);
        if (a->limit && a->total + sz > a->limit) return NULL; /* the template's memory limit */
        c = xmalloc(sizeof(*c) + sz);
        c->size = sz;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->total += sz;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void arena_free(struct arena *a) {
    struct arena_chunk *c = a->head;
    while (c) {
        struct arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->used = a->total = 0;
}

/* ---- output buffer ---- */

void buf_put(struct buf *b, const char *s, size_t n) {
    if (b->too_deep) return;
    struct sbuf sb = {b->p, b->n, b->cap}; /* util/sbuf does the growing */
    sbuf_add(&sb, s, n);
    b->p = sb.p;
    b->n = sb.len;
    b->cap = sb.cap;
}

void buf_puts(struct buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void mark_range(struct buf *b, size_t off, size_t len) {
    if (b->too_deep || len == 0) return;
    if (b->nsp) {
        struct jspan *l = &b->sp[b->nsp - 1];
        if (l->off + l->len >= off) { /* spans are appended in order: merge */
            if (off + len > l->off + l->len) l->len = off + len - l->off;
            return;
        }
    }
    if (b->nsp == b->capsp) {
        b->capsp = b->capsp ? 2 * b->capsp : 8;
        b->sp = xrealloc(b->sp, b->capsp * sizeof(*b->sp));
    }
    b->sp[b->nsp].off = off;
    b->sp[b->nsp].len = len;
    b->nsp++;
}

void buf_mark(struct buf *b, size_t from) {
    if (from < b->n) mark_range(b, from, b->n - from);
}

void buf_put_jstr(struct buf *b, const struct jstr *s) {
    size_t at = b->n;
    buf_put(b, s->s, s->len);
    for (size_t i = 0; i < s->nsp; i++) mark_range(b, at + s->sp[i].off, s->sp[i].len);
}

void buf_free(struct buf *b) {
    free(b->p);
    free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->n = b->cap = b->nsp = b->capsp = 0;
}

/* ---- constructors ---- */

struct jv jv_str_as_data(struct arena *a, struct jv v) {
    if (v.t != JV_STR || v.u.s->len == 0) return v;
    if (v.u.s->nsp == 1 && v.u.s->sp[0].off == 0 && v.u.s->sp[0].len == v.u.s->len) return v;
    struct jv c = jv_str(a, v.u.s->s, v.u.s->len);
    if (c.t != JV_STR) return c;
    c.u.s->markup = v.u.s->markup;
    c.u.s->sp = arena_alloc(a, sizeof(struct jspan));
    if (!c.u.s->sp) return jv_undef();
    c.u.s->sp[0].off = 0;
    c.u.s->sp[0].len = v.u.s->len;
    c.u.s->nsp = 1;
    return c;
}

static int has_data_d(struct jv v, int depth) {
    if (depth > MAX_VALUE_DEPTH) return 1; /* too deep to tell: assume so */
    switch (v.t) {
    case JV_STR: return v.u.s->nsp > 0;
    case JV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++)
            if (has_data_d(v.u.l->v[i], depth + 1)) return 1;
        return 0;
    case JV_DICT:
        for (size_t i = 0; i < v.u.d->n; i++)
            if (has_data_d(v.u.d->k[i], depth + 1) || has_data_d(v.u.d->v[i], depth + 1)) return 1;
        return 0;
    default: return 0;
    }
}

int jv_has_data(struct jv v) { return has_data_d(v, 0); }

struct jv jv_undef(void) {
    struct jv v = {JV_UNDEF, {0}};
    return v;
}
struct jv jv_none(void) {
    struct jv v = {JV_NONE, {0}};
    return v;
}
struct jv jv_bool(int b) {
    struct jv v = {JV_BOOL, {0}};
    v.u.b = !!b;
    return v;
}
struct jv jv_int(int64_t i) {
    struct jv v = {JV_INT, {0}};
    v.u.i = i;
    return v;
}
struct jv jv_float(double f) {
    struct jv v = {JV_FLOAT, {0}};
    v.u.f = f;
    return v;
}

struct jv jv_str(struct arena *a, const char *s, size_t n) {
    struct jv v = {JV_STR, {0}};
    v.u.s = arena_alloc(a, sizeof(struct jstr) + n + 1);
    if (!v.u.s) return jv_undef();
    v.u.s->len = n;
    if (n) memcpy(v.u.s->s, s, n);
    v.u.s->s[n] = 0;
    return v;
}

struct jv jv_list(struct arena *a) {
    struct jv v = {JV_LIST, {0}};
    v.u.l = arena_alloc(a, sizeof(struct jlist));
    if (!v.u.l) return jv_undef();
    return v;
}

struct jv jv_dict(struct arena *a) {
    struct jv v = {JV_DICT, {0}};
    v.u.d = arena_alloc(a, sizeof(struct jdict));
    if (!v.u.d) return jv_undef();
    return v;
}

int jv_list_push(struct arena *a, struct jv list, struct jv v) {
    struct jlist *l = list.u.l;
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 8;
        struct jv *p = arena_alloc(a, c * sizeof(*p));
        if (!p) return -1;
        if (l->n) memcpy(p, l->v, l->n * sizeof(*p));
        l->v = p;
        l->cap = c;
    }
    l->v[l->n++] = v;
    return 0;
}

struct jv *jv_dict_getv(struct jv dict, struct jv key) {
    if (dict.t != JV_DICT) return NULL;
    struct jdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

struct jv *jv_dict_get(struct jv dict, const char *key, size_t len) {
    if (dict.t != JV_DICT) return NULL;
    struct jdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s->len == len && !memcmp(d->k[i].u.s->s, key, len))
            return &d->v[i];
    return NULL;
}

int jv_dict_set(struct arena *a, struct jv dict, struct jv key, struct jv v) {
    struct jv *e = jv_dict_getv(dict, key);
    if (e) {
        *e = v;
        return 0;
    }
    struct jdict *d = dict.u.d;
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 8;
        struct jv *k = arena_alloc(a, c * sizeof(*k)), *vv = arena_alloc(a, c * sizeof(*vv));
        if (!k || !vv) return -1;
        if (d->n) {
            memcpy(k, d->k, d->n * sizeof(*k));
            memcpy(vv, d->v, d->n * sizeof(*vv));
        }
        d->k = k;
        d->v = vv;
        d->cap = c;
    }
    d->k[d->n] = key;
    d->v[d->n++] = v;
    return 0;
}

/* ---- semantics ---- */

int jv_truthy(struct jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0 || v.u.d->ns;
    case JV_FUNC: return 1;
    }
    return 0;
}

static int is_num(struct jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num(struct jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
}

/* Values built at render time can nest arbitrarily ({% set x = [x] %} in a loop); the
 * recursive walks stop at this depth instead of exhausting the stack. */

static int equal_d(struct jv a, struct jv b, int depth);
int jv_equal(struct jv a, struct jv b) { return equal_d(a, b, 0); }

static int equal_d(struct jv a, struct jv b, int depth) {
    if (depth > MAX_VALUE_DEPTH) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_d(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct jv *o = jv_dict_getv(b, a.u.d->k[i]);
            if (!o || !equal_d(a.u.d->v[i], *o, depth + 1)) return 0;
        }
        return 1;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return 0;
    }
}

static int compare_d(struct jv a, struct jv b, int *out, int depth);
int jv_compare(struct jv a, struct jv b, int *out) { return compare_d(a, b, out, 0); }

static int compare_d(struct jv a, struct jv b, int *out, int depth) {
    if (depth > MAX_VALUE_DEPTH) return -1;
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        if (a.t == JV_INT && b.t == JV_INT) *out = a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        else *out = x < y ? -1 : x > y;
        return 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        *out = c < 0 ? -1 : c > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            int c;
            if (compare_d(a.u.l->v[i], b.u.l->v[i], &c, depth + 1)) return -1;
            if (c) {
                *out = c;
                return 0;
            }
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return -1;
}

const char *jv_type_name(struct jv v) {
    static const char *const names[] = {"undefined", "NoneType", "bool", "int",     "float",
                                        "str",       "list",     "dict", "function"};
    return names[v.t];
}

/* Python's float repr: the shortest digits that round-trip, scientific notation when the
 * exponent is below -4 or at least 16. */
static void float_repr(struct buf *b, double f) {
    if (isnan(f)) {
        buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof(tmp), "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp = d.ddde[+-]XX with p significant digits */
    char digits[32];
    int nd = 0;
    const char *s = tmp;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (exp < -4 || exp >= 16) {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += snprintf(out + k, sizeof(out) - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+',
                      exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        out[k++] = '0';
        out[k++] = '.';
        for (int i = 0; i < -exp - 1; i++) out[k++] = '0';
        for (int i = 0; i < nd; i++) out[k++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++) out[k++] = i < nd ? digits[i] : '0';
        out[k++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++) out[k++] = digits[i];
        else out[k++] = '0';
    }
    buf_put(b, out, (size_t)k);
}

void jv_str_append(struct buf *b, struct jv v) {
    char tmp[32];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: buf_puts(b, "None"); return;
    case JV_BOOL: buf_puts(b, v.u.b ? "True" : "False"); return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i);
        buf_puts(b, tmp);
        return;
    case JV_FLOAT: float_repr(b, v.u.f); return;
    case JV_STR: buf_put_jstr(b, v.u.s); return;
    default: jv_repr_append(b, v); return;
    }
}

static void str_repr(struct buf *b, const char *s, size_t n) {
    /* Python picks single quotes unless the text has ' and no " */
    int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    buf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == (unsigned char)q || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            buf_put(b, e, 2);
        } else if (c == '\n') buf_puts(b, "\\n");
        else if (c == '\r') buf_puts(b, "\\r");
        else if (c == '\t') buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(e, sizeof(e), "\\x%02x", c);
            buf_puts(b, e);
        } else buf_put(b, (const char *)&c, 1);
    }
    buf_put(b, &q, 1);
}

static void repr_d(struct buf *b, struct jv v, int depth);
void jv_repr_append(struct buf *b, struct jv v) { repr_d(b, v, 0); }

static void repr_d(struct buf *b, struct jv v, int depth) {
    if (depth > MAX_VALUE_DEPTH) {
        b->too_deep = 1;
        return;
    }
    switch (v.t) {
    case JV_STR: {
        /* escaped: the quoted text as a whole is data when any of it is */
        size_t at = b->n;
        str_repr(b, v.u.s->s, v.u.s->len);
        if (v.u.s->nsp) buf_mark(b, at);
        return;
    }
    case JV_LIST:
        buf_puts(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) buf_puts(b, ", ");
            repr_d(b, v.u.l->v[i], depth + 1);
        }
        buf_puts(b, "]");
        return;
    case JV_DICT:
        if (v.u.d->ns) {
            buf_puts(b, "<Namespace>");
            return;
        }
        buf_puts(b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) buf_puts(b, ", ");
            repr_d(b, v.u.d->k[i], depth + 1);
            buf_puts(b, ": ");
            repr_d(b, v.u.d->v[i], depth + 1);
        }
        buf_puts(b, "}");
        return;
    case JV_FUNC: buf_puts(b, "<function>"); return;
    case JV_UNDEF: return;
    default: jv_str_append(b, v); return;
    }
}

/* A string as Python's json.dumps writes it: ascii (ensure_ascii=True) also escapes DEL
 * and every non-ASCII character as \uXXXX (a surrogate pair above U+FFFF). */
static void json_str(struct buf *b, const char *s, size_t n, int ascii) {
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[16];
        switch (c) {
        case '"': buf_puts(b, "\\\""); break;
        case '\\': buf_puts(b, "\\\\"); break;
        case '\n': buf_puts(b, "\\n"); break;
        case '\r': buf_puts(b, "\\r"); break;
        case '\t': buf_puts(b, "\\t"); break;
        case '\b': buf_puts(b, "\\b"); break;
        case '\f': buf_puts(b, "\\f"); break;
        default:
            if (c < 0x20 || (ascii && c == 0x7f)) {
                snprintf(e, sizeof(e), "\\u%04x", c);
                buf_puts(b, e);
            } else if (ascii && c >= 0x80) {
                int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
                uint32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0f : len == 2 ? c & 0x1f : c;
                if (i + (size_t)len > n) len = 1, cp = c;
                for (int k = 1; k < len; k++)
                    cp = (cp << 6) | ((unsigned char)s[i + (size_t)k] & 0x3f);
                i += (size_t)len - 1;
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    snprintf(e, sizeof(e), "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                             0xdc00 + (cp & 0x3ff));
                } else {
                    snprintf(e, sizeof(e), "\\u%04x", cp);
                }
                buf_puts(b, e);
            } else {
                buf_put(b, (const char *)&c, 1);
            }
        }
    }
    buf_puts(b, "\"");
}

static void newline_indent(struct buf *b, int indent, int depth) {
    buf_puts(b, "\n");
    for (int i = 0; i < indent * depth; i++) buf_puts(b, " ");
}

void jv_json_append(struct buf *b, struct jv v, int indent, int flags, int depth) {
    int sort_keys = flags & JV_JSON_SORT_KEYS, ascii = flags & JV_JSON_ASCII;
    if (depth > MAX_VALUE_DEPTH) {
        b->too_deep = 1;
        return;
    }
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: buf_puts(b, "null"); return;
    case JV_BOOL: buf_puts(b, v.u.b ? "true" : "false"); return;
    case JV_INT:
    case JV_FLOAT:
        if (v.t == JV_FLOAT && isnan(v.u.f)) {
            buf_puts(b, "NaN");
            return;
        }
        if (v.t == JV_FLOAT && isinf(v.u.f)) {
            buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
            return;
        }
        jv_str_append(b, v);
        return;
    case JV_STR: {
        size_t at = b->n;
        json_str(b, v.u.s->s, v.u.s->len, ascii);
        if (v.u.s->nsp) buf_mark(b, at);
        return;
    }
    case JV_LIST:
        if (v.u.l->n == 0) {
            buf_puts(b, "[]");
            return;
        }
        buf_puts(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) buf_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            jv_json_append(b, v.u.l->v[i], indent, flags, depth + 1);
        }
        if (indent >= 0) newline_indent(b, indent, depth);
        buf_puts(b, "]");
        return;
    case JV_DICT: {
        if (v.u.d->n == 0) {
            buf_puts(b, "{}");
            return;
        }
        size_t n = v.u.d->n;
        size_t order_stack[64];
        size_t *order = n <= 64 ? order_stack : xmalloc(n * sizeof(size_t));
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (sort_keys) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0; j--) {
                    int c = 0;
                    if (jv_compare(v.u.d->k[order[j - 1]], v.u.d->k[order[j]], &c) || c <= 0) break;
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        buf_puts(b, "{");
        for (size_t k = 0; k < n; k++) {
            size_t i = order[k];
            if (k) buf_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            struct jv key = v.u.d->k[i];
            size_t kat = b->n;
            if (key.t == JV_STR) {
                json_str(b, key.u.s->s, key.u.s->len, ascii);
                if (key.u.s->nsp) buf_mark(b, kat);
            } else {
                struct buf t = {0};
                jv_json_append(&t, key, -1, 0, 0);
                json_str(b, t.p ? t.p : "", t.n, ascii);
                buf_free(&t);
            }
            buf_puts(b, ": ");
            jv_json_append(b, v.u.d->v[i], indent, flags, depth + 1);
        }
        if (indent >= 0) newline_indent(b, indent, depth);
        buf_puts(b, "}");
        if (order != order_stack) free(order);
        return;
    }
    case JV_FUNC: buf_puts(b, "null"); return;
    }
}

int jv_from_cjson(struct arena *a, const cJSON *j, int data, struct jv *out) {
    if (!j || cJSON_IsNull(j)) {
        *out = jv_none();
        return 0;
    }
    if (cJSON_IsBool(j)) {
        *out = jv_bool(cJSON_IsTrue(j));
        return 0;
    }
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* cJSON keeps no int/float distinction: integral values within range are ints */
        if (d == floor(d) && fabs(d) < 9e15) *out = jv_int((int64_t)d);
        else *out = jv_float(d);
        return 0;
    }
    if (cJSON_IsString(j)) {
        *out = jv_str(a, j->valuestring, strlen(j->valuestring));
        if (data && out->t == JV_STR) *out = jv_str_as_data(a, *out);
        return out->t == JV_STR ? 0 : -1;
    }
    if (cJSON_IsArray(j)) {
        *out = jv_list(a);
        if (out->t != JV_LIST) return -1;
        const cJSON *x;
        cJSON_ArrayForEach(x, j) {
            struct jv v;
            if (jv_from_cjson(a, x, data, &v) || jv_list_push(a, *out, v)) return -1;
        }
        return 0;
    }
    if (cJSON_IsObject(j)) {
        *out = jv_dict(a);
        if (out->t != JV_DICT) return -1;
        const cJSON *x;
        cJSON_ArrayForEach(x, j) {
            struct jv v, k = jv_str(a, x->string, strlen(x->string));
            if (data && k.t == JV_STR) k = jv_str_as_data(a, k);
            if (k.t != JV_STR || jv_from_cjson(a, x, data, &v) || jv_dict_set(a, *out, k, v))
                return -1;
        }
        return 0;
    }
    *out = jv_none();
    return 0;
}
