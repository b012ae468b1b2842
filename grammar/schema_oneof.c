/* JSON Schema -> GBNF: what a schema accepts (over-approximated) and writes:
 * oneOf made exclusive or refused, enum/const values checked against their
 * siblings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"
#include "schema_fmt.h"
#include "schema_num.h"

#include "schema_internal.h"
#include "schema_types.h"
#include "schema_oneof.h"
#include "schema_merge.h"
#include "schema_object.h"

static int disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth);

int sc_value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJ;
    if (cJSON_IsArray(v)) return T_ARR;
    if (cJSON_IsString(v)) return T_STR;
    return v->valuedouble == floor(v->valuedouble) ? T_INT : T_FRAC;
}

int sc_type_bits(const cJSON *t) {
    static const char *const names[] = {"null",   "boolean", "object", "array",
                                        "string", "integer", "number"};
    static const int bits[] = {T_NULL, T_BOOL, T_OBJ, T_ARR, T_STR, T_INT, T_INT | T_FRAC};
    if (!t) return T_ANY;
    int m = 0;
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : t; x; x = cJSON_IsArray(t) ? x->next : NULL)
        for (int i = 0; i < 7; i++)
            if (cJSON_IsString(x) && strcmp(x->valuestring, names[i]) == 0) m |= bits[i];
    return m;
}

const cJSON *sc_branches_of(const cJSON *s) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    return b ? b : cJSON_GetObjectItemCaseSensitive(s, "oneOf");
}

/* The types the grammar of s produces (s flat). */
static int gen_types(struct sc *c, const cJSON *s, int depth) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? T_ANY : 0;
    if (!cJSON_IsObject(s) || depth > 16) return T_ANY;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *br = sc_branches_of(s), *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int m = 0;
    if (br) {
        for (const cJSON *x = br->child; x; x = x->next) {
            const cJSON *f = sc_flat(c, x, 1);
            m |= f ? gen_types(c, f, depth + 1) : T_ANY;
        }
        return m & sc_type_bits(t);
    }
    if (v) return sc_value_type(v);
    if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next) m |= sc_value_type(x);
        return m;
    }
    if (t) return sc_type_bits(t);
    return sc_implied_bits(c, s);
}

/* The types s accepts, or more (s flat). */
static int acc_types(struct sc *c, const cJSON *s, int depth) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? T_ANY : 0;
    if (!cJSON_IsObject(s) || depth > 16) return T_ANY;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *br = sc_branches_of(s);
    int m = sc_type_bits(cJSON_GetObjectItemCaseSensitive(s, "type"));
    if (v) m &= sc_value_type(v);
    if (cJSON_IsArray(e)) {
        int u = 0;
        for (const cJSON *x = e->child; x; x = x->next) u |= sc_value_type(x);
        m &= u;
    }
    if (br) {
        int u = 0;
        for (const cJSON *x = br->child; x; x = x->next) {
            const cJSON *f = sc_flat(c, x, 0);
            u |= f ? acc_types(c, f, depth + 1) : T_ANY;
        }
        m &= u;
    }
    return m;
}

static double num_kw(const cJSON *s, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* [lo, hi] of a keyword pair (minLength/maxLength...), hi < 0: none */
static void count_range(const cJSON *s, const char *mn, const char *mx, double *lo, double *hi) {
    *lo = num_kw(s, mn, 0);
    *hi = num_kw(s, mx, -1);
}

/* [lo, hi] of the lengths of s's strings (hi < 0: none) narrowed by its pattern (the least
 * and, where anchored at both ends, the most characters of a match) and, where gen (the
 * strings tpd writes), by its format (schema_format's lengths: tpd writes a subset of it). */
static void string_lengths(const cJSON *s, int gen, double *lo, double *hi) {
    count_range(s, "minLength", "maxLength", lo, hi);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "format");
    long l = 0, h = -1;
    char e[ERR_LEN];
    if (cJSON_IsString(p)) {
        if (regex_search_lengths(p->valuestring, strlen(p->valuestring), &l, &h, e) < 0)
            l = 0, h = -1;
    } else if (gen && cJSON_IsString(f) && !schema_format(f->valuestring, &l, &h)) {
        l = 0, h = -1; /* an annotation */
    }
    if (l > *lo) *lo = (double)l;
    if (h >= 0 && (*hi < 0 || h < *hi)) *hi = (double)h;
}

/* The numbers s admits, as [lo, hi] with exclusive ends flagged (draft-4 boolean
 * exclusiveMinimum/Maximum too). */
void sc_num_range(const cJSON *s, double *lo, int *lo_x, double *hi, int *hi_x) {
    const cJSON *xmn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *xmx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    *lo = num_kw(s, "minimum", -INFINITY);
    *hi = num_kw(s, "maximum", INFINITY);
    *lo_x = cJSON_IsTrue(xmn);
    *hi_x = cJSON_IsTrue(xmx);
    if (cJSON_IsNumber(xmn) && xmn->valuedouble >= *lo) *lo = xmn->valuedouble, *lo_x = 1;
    if (cJSON_IsNumber(xmx) && xmx->valuedouble <= *hi) *hi = xmx->valuedouble, *hi_x = 1;
}

static size_t cp_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xC0) != 0x80;
    return n;
}

/* 1 when the schema n, a not, surely takes v (then its schema rejects v): n is a const or
 * an enum, with or without type, and holds v. */
static int not_values_take(struct sc *c, const cJSON *n, const cJSON *v) {
    if (n && !(n = sc_flat(c, n, 0))) c->err[0] = 0; /* unsure */
    if (!n || !cJSON_IsObject(n)) return cJSON_IsTrue(n);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(n, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(n, "enum");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(n, "type");
    int n_kw = 0;
    for (const cJSON *x = n->child; x; x = x->next) n_kw += sc_is_validity(n, x->string);
    if (n_kw != (k || e) + (t != NULL) || (!k && !cJSON_IsArray(e)) ||
        !(sc_type_bits(t) & sc_value_type(v)))
        return 0;
    for (const cJSON *x = k ? k : e->child; x; x = k ? NULL : x->next)
        if (cJSON_IsNumber(v) ? cJSON_IsNumber(x) && x->valuedouble == v->valuedouble
                              : cJSON_Compare(x, v, 1)) /* numbers: no tolerance */
            return 1;
    return 0;
}

/* 0 when s surely rejects the value v, else 1 (unsure counts as accepting). */
int sc_might_accept(struct sc *c, const cJSON *s, const cJSON *v, int depth) {
    s = sc_flat(c, s, 0);
    if (!s || depth > 16) return 1;
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s);
    if (!cJSON_IsObject(s)) return 1;
    int vt = sc_value_type(v);
    if (!(acc_types(c, s, depth) & vt)) return 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (k && !cJSON_Compare(k, v, 1)) return 0;
    if (cJSON_IsArray(e)) {
        int in = 0;
        for (const cJSON *x = e->child; x && !in; x = x->next) in = cJSON_Compare(x, v, 1);
        if (!in) return 0;
    }
    const cJSON *br = sc_branches_of(s);
    if (br) {
        int any = 0;
        for (const cJSON *x = br->child; x && !any; x = x->next)
            any = sc_might_accept(c, x, v, depth + 1);
        if (!any) return 0;
    }
    if (not_values_take(c, cJSON_GetObjectItemCaseSensitive(s, "not"), v)) return 0;
    if (vt == T_STR) {
        double lo, hi, n = (double)cp_len(v->valuestring);
        count_range(s, "minLength", "maxLength", &lo, &hi);
        if (n < lo || (hi >= 0 && n > hi)) return 0;
    } else if (vt & (T_INT | T_FRAC)) {
        double lo, hi, x = v->valuedouble;
        int lx, hx;
        sc_num_range(s, &lo, &lx, &hi, &hx);
        if (x < lo || (lx && x == lo) || x > hi || (hx && x == hi)) return 0;
    } else if (vt == T_OBJ) {
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return 0;
        for (const cJSON *p = v->child; p; p = p->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, p->string) : NULL;
            if (!ps) ps = addl;
            if (ps && !cJSON_GetObjectItemCaseSensitive(s, "patternProperties") &&
                !sc_might_accept(c, ps, p, depth + 1))
                return 0;
        }
    }
    return 1;
}

/* 0 when s (flat) surely rejects v, else 1: sc_might_accept, and for a string s's pattern
 * (as gen_values filters an enum: sc_value_valid) */
static int may_take(struct sc *c, const cJSON *s, const cJSON *v, int depth) {
    if (!sc_might_accept(c, s, v, depth)) return 0;
    const cJSON *pat = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "pattern") : NULL;
    if (!cJSON_IsString(v) || !cJSON_IsString(pat)) return 1;
    int r = sc_name_matches(c, pat->valuestring, v->valuestring);
    if (r < 0) c->err[0] = 0; /* unsure */
    return r != 0;
}

const cJSON *sc_prop_schema(const cJSON *s, const char *name) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "properties");
    return p ? cJSON_GetObjectItemCaseSensitive(p, name) : NULL;
}

/* 1 when the objects a writes never satisfy b (both flat). */
static int obj_disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth) {
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    int extras_a = !cJSON_IsFalse(aa) || cJSON_GetObjectItemCaseSensitive(a, PATTERN_EXTRA);
    int pattern_b = cJSON_GetObjectItemCaseSensitive(b, "patternProperties") != NULL;
    for (const cJSON *r = cJSON_IsArray(ra) ? ra->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) continue;
        const cJSON *bp = sc_prop_schema(b, r->valuestring),
                    *ap = sc_prop_schema(a, r->valuestring);
        if (bp && cJSON_IsFalse(bp)) return 1;
        if (!bp && !pattern_b && cJSON_IsFalse(ab)) return 1;
        if (!ap) ap = cJSON_IsObject(aa) ? aa : NULL;
        if (!bp && !pattern_b) bp = cJSON_IsObject(ab) ? ab : NULL;
        if (ap && bp && disjoint(c, ap, bp, depth + 1) == 1) return 1;
    }
    for (const cJSON *r = cJSON_IsArray(rb) ? rb->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) continue;
        int in_ra = 0;
        for (const cJSON *q = cJSON_IsArray(ra) ? ra->child : NULL; q; q = q->next)
            in_ra |= cJSON_Compare(q, r, 1);
        if (in_ra) continue;
        const cJSON *ap = sc_prop_schema(a, r->valuestring);
        if (ap ? cJSON_IsFalse(ap) : !extras_a) return 1;
    }
    return 0;
}

/* 1: no value the grammar of a produces is accepted by b; 0: unsure; -1: an error (err). */
static int disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth) {
    const cJSON *fa = sc_flat(c, a, 1);
    if (!fa && strstr(c->err, "unsatisfiable schema")) { /* a writes nothing */
        c->err[0] = 0;
        return 1;
    }
    if (!(a = fa) || !(b = sc_flat(c, b, 0))) return -1;
    if (depth > 16) return 0;
    int common = gen_types(c, a, depth) & acc_types(c, b, depth);
    if (!common) return 1;
    if (cJSON_IsBool(a) || cJSON_IsBool(b)) return 0;
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(a, "const"),
                *ea = cJSON_GetObjectItemCaseSensitive(a, "enum");
    const cJSON *bra = sc_branches_of(a), *brb = sc_branches_of(b);
    if (brb) { /* b accepts no more than the union of its branches */
        for (const cJSON *x = brb->child; x; x = x->next) {
            int d = disjoint(c, a, x, depth + 1);
            if (d != 1) return d;
        }
        return 1;
    }
    if (bra) {
        static const char *const drop[] = {"anyOf", "oneOf", NULL};
        const cJSON *sib = sc_without(c, a, drop);
        for (const cJSON *x = bra->child; x; x = x->next) {
            const cJSON *m = sc_has_constraints(sib) ? sc_merge(c, sib, x) : x;
            if (!m) return -1;
            int d = disjoint(c, m, b, depth + 1);
            if (d != 1) return d;
        }
        return 1;
    }
    if (ka || cJSON_IsArray(ea)) { /* a writes finitely many values: test each it writes */
        for (const cJSON *x = ka ? ka : ea->child; x; x = ka ? NULL : x->next)
            if (may_take(c, a, x, depth + 1) && may_take(c, b, x, depth + 1)) return 0;
        return 1;
    }
    const cJSON *kb = cJSON_GetObjectItemCaseSensitive(b, "const"),
                *eb = cJSON_GetObjectItemCaseSensitive(b, "enum");
    for (int bit = 1; bit < T_ANY; bit <<= 1) {
        if (!(common & bit)) continue;
        if (bit == T_INT || bit == T_FRAC) {
            double la, ha, lb, hb;
            int lax, hax, lbx, hbx;
            sc_num_range(a, &la, &lax, &ha, &hax);
            sc_num_range(b, &lb, &lbx, &hb, &hbx);
            if (kb || cJSON_IsArray(eb)) {
                for (const cJSON *x = kb ? kb : eb->child; x; x = kb ? NULL : x->next)
                    if (cJSON_IsNumber(x) && x->valuedouble >= la && x->valuedouble <= ha) return 0;
            } else if (!(ha < lb || (ha == lb && (hax || lbx)) || hb < la ||
                         (hb == la && (hbx || lax)))) {
                return 0;
            }
        } else if (bit == T_STR) {
            double la, ha, lb, hb;
            string_lengths(a, 1, &la, &ha);
            string_lengths(b, 0, &lb, &hb);
            if (kb || cJSON_IsArray(eb)) {
                const cJSON *out = cJSON_GetObjectItemCaseSensitive(a, NOT_STRINGS);
                for (const cJSON *x = kb ? kb : eb->child; x; x = kb ? NULL : x->next) {
                    double n = cJSON_IsString(x) ? (double)cp_len(x->valuestring) : -1;
                    int left_out = 0; /* a string a's not rules out */
                    for (const cJSON *y = cJSON_IsArray(out) ? out->child : NULL; y && !left_out;
                         y = y->next)
                        left_out = cJSON_Compare(x, y, 1);
                    if (n >= la && (ha < 0 || n <= ha) && !left_out) return 0;
                }
            } else if (!((ha >= 0 && ha < lb) || (hb >= 0 && hb < la))) {
                return 0;
            }
        } else if (bit == T_ARR) {
            double la, ha, lb, hb;
            count_range(a, "minItems", "maxItems", &la, &ha);
            count_range(b, "minItems", "maxItems", &lb, &hb);
            if (kb || cJSON_IsArray(eb) || !((ha >= 0 && ha < lb) || (hb >= 0 && hb < la)))
                return 0;
        } else if (bit == T_OBJ) {
            if (kb || cJSON_IsArray(eb) || !obj_disjoint(c, a, b, depth)) return 0;
        } else {
            return 0; /* null, boolean: the grammar may write any of them */
        }
    }
    return 1;
}

/* Branch a (flat) narrowed to always write an optional property whose values b never
 * accepts (a discriminator: both declare it), or NULL. */
static const cJSON *require_discriminator(struct sc *c, const cJSON *a, const cJSON *b) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    for (const cJSON *x = cJSON_IsObject(pa) ? pa->child : NULL; x; x = x->next) {
        const cJSON *y = sc_prop_schema(b, x->string);
        if (!y || sc_is_required(a, x->string) || cJSON_IsFalse(x)) continue;
        int d = disjoint(c, x, y, 1);
        if (d < 0) c->err[0] = 0;
        if (d != 1) continue;
        static const char *const none[] = {NULL};
        cJSON *m = sc_without(c, a, none), *r = cJSON_GetObjectItemCaseSensitive(m, "required");
        if (!r) r = cJSON_AddArrayToObject(m, "required");
        if (!cJSON_IsArray(r)) return NULL;
        cJSON_AddItemToArray(r, cJSON_CreateString(x->string));
        return m;
    }
    return NULL;
}

/* Branch a (flat) narrowed (one more each call) so that it always writes a discriminator
 * (require_discriminator) or never writes a property b, or one of b's own branches,
 * requires and a does not; NULL when there is none left to narrow by. */
static const cJSON *sharpen(struct sc *c, const cJSON *a, const cJSON *b) {
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *brb = sc_branches_of(b), *d;
    if (!cJSON_IsObject(a) || !(gen_types(c, a, 0) & T_OBJ)) return NULL; /* branches: each */
    if (!brb && (d = require_discriminator(c, a, b))) return d;
    const cJSON *x = brb ? brb->child : NULL, *from = b;
    for (; from; from = x ? sc_flat(c, x, 0) : NULL, x = x ? x->next : NULL) {
        const cJSON *rb = cJSON_GetObjectItemCaseSensitive(from, "required");
        for (const cJSON *r = cJSON_IsArray(rb) ? rb->child : NULL; r; r = r->next) {
            int in_ra = 0;
            for (const cJSON *q = cJSON_IsArray(ra) ? ra->child : NULL; q; q = q->next)
                in_ra |= cJSON_Compare(q, r, 1);
            if (in_ra || !cJSON_IsString(r) || cJSON_IsFalse(sc_prop_schema(a, r->valuestring)))
                continue;
            static const char *const none[] = {NULL};
            cJSON *m = sc_without(c, a, none),
                  *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
            if (!p) p = cJSON_AddObjectToObject(m, "properties");
            if (!cJSON_IsObject(p)) return NULL;
            cJSON_DeleteItemFromObjectCaseSensitive(p, r->valuestring);
            cJSON_AddFalseToObject(p, r->valuestring);
            return m;
        }
    }
    return NULL;
}

/* Where the schema without type of more than one oneOf branch takes every value of one type
 * (every_type: {"required": ["a"]} takes any string), those values match two branches, so
 * none of them is valid: that type leaves every branch (a branch left with none is false). */
static int drop_shared_types(struct sc *c, const cJSON **br, int n) {
    int once = 0, twice = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *f = sc_flat(c, br[i], 0);
        if (!f) return -1;
        int t = sc_free_types(f);
        twice |= once & t;
        once |= t;
    }
    if ((twice & (T_INT | T_FRAC)) != (T_INT | T_FRAC)) twice &= ~(T_INT | T_FRAC);
    if (!twice) return 0;
    cJSON *keep = cJSON_CreateObject(), *t = sc_type_list(T_ANY & ~twice);
    cJSON_AddItemToObject(keep, "type", t);
    cJSON_AddItemToArray(c->owned, keep);
    for (int i = 0; i < n; i++) {
        const cJSON *m = t->child ? sc_merge(c, br[i], keep) : NULL;
        if (!m && c->err[0] && !strstr(c->err, "unsatisfiable schema")) return -1;
        if (!m) { /* no type left to it */
            c->err[0] = 0;
            cJSON *no = cJSON_CreateFalse();
            cJSON_AddItemToArray(c->owned, no);
            m = no;
        }
        br[i] = m;
    }
    return 0;
}

/* br[0..n): oneOf's branches (siblings merged in); narrows them where that makes them
 * exclusive (br[i] replaced), or refuses. 0, or -1 with err. */
int sc_one_of_exclusive(struct sc *c, const cJSON **br, int n) {
    const cJSON **acc = xmalloc(sizeof *acc * (size_t)n);
    int rc = c->every_type ? drop_shared_types(c, br, n) : 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!(acc[i] = sc_flat(c, br[i], 0))) rc = -1;
    for (int i = 0; i < n && rc == 0; i++)
        for (int j = 0; j < n && rc == 0; j++) {
            if (i == j) continue;
            int d = disjoint(c, br[i], acc[j], 0);
            const cJSON *s = NULL;
            for (int tries = 0;
                 d == 0 && tries < 64 && (s = sharpen(c, sc_flat(c, br[i], 1), acc[j])); tries++) {
                br[i] = s;
                d = disjoint(c, br[i], acc[j], 0);
            }
            if (d < 0) rc = -1;
            else if (d == 0)
                rc = err_set(
                    c->err,
                    "JSON Schema: oneOf: branches %d and %d may both match one value, which "
                    "oneOf forbids, and tpd cannot tell them apart (it does by type, const/enum "
                    "values, "
                    "numeric, length or item-count ranges, and properties one branch requires and "
                    "the "
                    "other forbids or constrains differently); use anyOf if a value may match both",
                    i, j);
        }
    free(acc);
    return rc;
}

/* 1 when the enum/const value v meets s's other keywords, 0 when not, -1 (err) when tpd
 * cannot tell (a keyword it does not check here). */
int sc_value_valid(struct sc *c, const cJSON *s, const cJSON *v) {
    static const char *const known[] = {"type",
                                        "enum",
                                        "const",
                                        "minLength",
                                        "maxLength",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "pattern",
                                        "format",
                                        NO_PATTERN_EXTRA,
                                        NULL};
    int vt = sc_value_type(v);
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!sc_is_validity(s, k->string) || sc_in_list(known, k->string)) continue;
        int applies = strcmp(k->string, "items") == 0 || strstr(k->string, "Items") ? vt == T_ARR
                      : strstr(k->string, "ropert") || strcmp(k->string, "required") == 0 ||
                              strstr(k->string, "ependen")
                          ? vt == T_OBJ
                          : 1;
        if (applies) return sc_serr(c, "enum/const beside '%s' is not supported", k->string);
    }
    if (vt == T_STR && cJSON_GetObjectItemCaseSensitive(s, "format")) {
        long lo, hi;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "format");
        if (cJSON_IsString(f) && schema_format(f->valuestring, &lo, &hi))
            return sc_serr(c, "enum/const beside format '%s' is not supported", f->valuestring);
    }
    if (!sc_might_accept(c, s, v, 0)) return 0; /* exact for type, const, enum, lengths, bounds */
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    return vt == T_STR && cJSON_IsString(pat) ? sc_name_matches(c, pat->valuestring, v->valuestring)
                                              : 1;
}
