/* JSON Schema -> GBNF: the grammars of strings (lengths, pattern, format,
 * strings left out by not) and of numbers (bounds, multipleOf). */
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
#include "schema_scalar.h"
#include "schema_array.h"
#include "schema_keys.h"
#include "schema_object.h"
#include "schema_oneof.h"

/* integer or number with minimum / maximum (exclusive ones too, draft 4's booleans
 * included): schema_num_range's exact language of the range. */
int sc_gen_num_range(struct sc *c, const cJSON *s, int integer, struct sbuf *b) {
    static const char *const keys[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, keys[i]);
        if (v && !cJSON_IsNumber(v) && !(i >= 2 && cJSON_IsBool(v)))
            return sc_serr(c, "'%s' must be a number", keys[i]);
    }
    double lo, hi;
    int lo_x, hi_x;
    sc_num_range(s, &lo, &lo_x, &hi, &hi_x);
    char e[ERR_LEN];
    struct sbuf t = {0};
    int rc = schema_num_range(&t, lo, lo_x, hi, hi_x, integer, e);
    if (rc == 0 && integer && c->int_frac) sbuf_addf(b, "(%s %s)", t.p, INT_FRAC);
    else if (rc == 0) sbuf_adds(b, t.p);
    sbuf_free(&t);
    return rc < 0 ? err_set(c->err, "JSON Schema: %s", e) : 0;
}

/* The JSON strings whose text pattern p matches (searched: unanchored ends take any text),
 * through regex.c, else (anchors inside) the pattern automaton. */
static int gen_pattern(struct sc *c, const char *p, struct sbuf *b) {
    size_t n = strlen(p);
    int start = n > 0 && p[0] == '^', end = regex_anchored_end(p, n);
    size_t at = b->len;
    sbuf_adds(b, "\"\\\"\" ");
    if (!start) sbuf_addf(b, "%s-char* ", c->j);
    char e[ERR_LEN];
    if (regex_to_gbnf(p, n, 1, b, e) < 0) {
        b->len = at;
        b->p[at] = 0;
        int k = sc_gen_pattern_string(c, p, b);
        return k ? (k < 0 ? -1 : 0) : err_set(c->err, "JSON Schema: pattern: %s", e);
    }
    if (!end) sbuf_addf(b, " %s-char*", c->j);
    sbuf_adds(b, " \"\\\"\"");
    return 0;
}

int sc_gen_string(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(s, NOT_STRINGS);
    if (cJSON_IsArray(ns)) { /* beside type string only (lower_not) */
        int n = 0;
        const char **names = xmalloc(sizeof *names * ((size_t)cJSON_GetArraySize(ns) + 1));
        for (const cJSON *x = ns->child; x; x = x->next)
            if (cJSON_IsString(x)) names[n++] = x->valuestring;
        char nm[RN];
        sc_gen_key_not_in(c, names, n, 0, nm);
        free(names);
        sbuf_adds(b, nm);
        return 0;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    long fmin = 0, fmax = -1;
    const char *fg = NULL;
    if (fmt && !cJSON_IsString(fmt)) return sc_serr(c, "%s", "'format' must be a string");
    if (fmt) fg = schema_format(fmt->valuestring, &fmin, &fmax); /* NULL: unknown, an annotation */
    if (fg && pat) return sc_serr(c, "%s", "combining format and pattern is not supported");
    if (fg && (mn || mx)) { /* the lengths must hold for every string of the format */
        long lo = 0, hi = -1;
        if (sc_read_count(c, s, "minLength", &lo) < 0) return -1;
        if (mx && cJSON_IsNumber(mx)) hi = mx->valuedouble > 1e9 ? -1 : (long)mx->valuedouble;
        if (fmin < lo || (hi >= 0 && (fmax < 0 || fmax > hi)))
            return sc_serr(
                c,
                "format '%s' with a minLength/maxLength it does not always meet is not supported",
                fmt->valuestring);
    }
    if (pat && (mn || mx)) { /* one-character atoms only: the lengths bound their counts */
        long lo = 0, hi = -1;
        if (sc_read_count(c, s, "minLength", &lo) < 0) return -1;
        if (mx && (!cJSON_IsNumber(mx) || mx->valuedouble < 0))
            return sc_serr(c, "%s", "'maxLength' must be a number");
        if (mx) hi = mx->valuedouble > 1e9 ? -1 : (long)mx->valuedouble;
        if (!cJSON_IsString(pat)) return sc_serr(c, "%s", "'pattern' must be a string");
        char e[ERR_LEN];
        struct sbuf t = {0};
        int k = regex_to_gbnf_lengths(pat->valuestring, strlen(pat->valuestring), lo, hi, &t, e);
        if (k > 0) sbuf_addf(b, "\"\\\"\" %s \"\\\"\"", t.p);
        sbuf_free(&t);
        if (k < 0) return err_set(c->err, "JSON Schema: pattern: %s", e);
        if (k > 0) return 0;
        /* any other pattern: exact when every string it matches meets the lengths */
        const char *p = pat->valuestring;
        long pmin, pmax;
        k = regex_search_lengths(p, strlen(p), &pmin, &pmax, e);
        /* lengths that bound nothing (minLength 0): the pattern alone, below */
        if (k < 0 && (lo > 0 || hi >= 0)) { /* anchors inside: the automaton may read it */
            k = sc_gen_pattern_lengths(c, p, lo, hi, b);
            return k ? (k < 0 ? -1 : 0) : err_set(c->err, "JSON Schema: pattern: %s", e);
        }
        if (k == 0 && ((pmax >= 0 && pmax < lo) || (hi >= 0 && pmin > hi)))
            return sc_serr(c, "%s", "unsatisfiable schema: pattern and minLength/maxLength");
        if (k == 0 && !(pmin >= lo && (hi < 0 || (pmax >= 0 && pmax <= hi)))) {
            k = sc_gen_pattern_lengths(c, p, lo, hi, b); /* the automaton and a count */
            if (k != 0) return k < 0 ? -1 : 0;
            return err_set(c->err,
                           "JSON Schema: combining pattern and minLength/maxLength is supported "
                           "for patterns the automaton reads (its states x (maxLength, else "
                           "minLength, + 1) <= %d), patterns of single characters with counts, "
                           "or patterns whose strings all meet the lengths",
                           PATTERN_LENGTH_STATES);
        }
    }
    if (fg) {
        sbuf_addf(b, "\"\\\"\" %s \"\\\"\"", fg);
        return 0;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return sc_serr(c, "%s", "'pattern' must be a string");
        return gen_pattern(c, pat->valuestring, b);
    }
    long lo = 0, hi = -1;
    if (mn) {
        if (!cJSON_IsNumber(mn) || mn->valuedouble < 0)
            return sc_serr(c, "%s", "'minLength' must be a non-negative integer");
        if (mn->valuedouble > GRAMMAR_MAX_REPEAT)
            return sc_serr(c, "%s", "minLength above 1000 is not supported");
        lo = (long)mn->valuedouble;
    }
    if (mx) {
        if (!cJSON_IsNumber(mx) || mx->valuedouble < 0)
            return sc_serr(c, "%s", "'maxLength' must be a non-negative integer");
        hi = mx->valuedouble > 1e6 ? -1
                                   : (long)mx->valuedouble; /* beyond 10^6: no practical bound */
    }
    if (hi >= 0 && hi < lo)
        return sc_serr(c, "%s", "unsatisfiable schema: minLength is above maxLength");
    if (hi < 0) {
        sbuf_addf(b, "\"\\\"\" %s-char{%ld,} \"\\\"\"", c->j, lo);
    } else if (hi <= GRAMMAR_MAX_REPEAT) {
        sbuf_addf(b, "\"\\\"\" %s-char{%ld,%ld} \"\\\"\"", c->j, lo, hi);
    } else { /* L = 1000 a + r characters: a = 0 (L >= lo), 0 < a < q, or a = q (r <= hi % 1000) */
        long q = hi / 1000, rest = hi % 1000;
        char k[RN];
        sc_new_rule(c, k);
        sbuf_addf(c->out, "%s ::= %s-char{1000}\n", k, c->j);
        sbuf_addf(b, "\"\\\"\" (%s-char{%ld,999}", c->j, lo);
        if (q >= 2) sbuf_addf(b, " | %s (%s){0,%ld} %s-char{0,999}", k, k, q - 2, c->j);
        sbuf_addf(b, " | (%s){%ld} %s-char{0,%ld}) \"\\\"\"", k, q, c->j, rest);
    }
    return 0;
}

/* ---- dispatch ---- */

void sc_put_integers(const struct sc *c, struct sbuf *b) {
    if (c->int_frac) sbuf_addf(b, "(%s-integer %s)", c->j, INT_FRAC);
    else sbuf_addf(b, "%s-integer", c->j);
}

/* An integer multipleOf k between s's two finite bounds: its multiples there (at most 1024),
 * as an enum, into b. 1; 0 (nothing written) where there are more or a bound is missing. */
static int multiples_between(struct sc *c, const cJSON *s, double k, struct sbuf *b) {
    double lo, hi;
    int lox, hix;
    sc_num_range(s, &lo, &lox, &hi, &hix);
    if (!isfinite(lo) || !isfinite(hi) || fabs(lo) > 1e15 || fabs(hi) > 1e15) return 0;
    double first = ceil(lo / k) * k, last = floor(hi / k) * k;
    if (lox && first == lo) first += k;
    if (hix && last == hi) last -= k;
    if (last < first)
        return sc_serr(c, "%s",
                       "unsatisfiable schema: no multiple of multipleOf within the bounds");
    if ((last - first) / k >= 1024) return 0;
    cJSON *e = cJSON_CreateObject(), *vals = cJSON_AddArrayToObject(e, "enum");
    cJSON_AddItemToArray(c->owned, e);
    for (double v = first; v <= last; v += k) cJSON_AddItemToArray(vals, cJSON_CreateNumber(v));
    char nm[RN];
    if (sc_gen(c, e, nm) < 0) return -1;
    sbuf_adds(b, nm);
    return 1;
}

/* multipleOf an integer k (up to 1000), without bounds: the integers divisible by k, by the
 * remainder automaton over their decimal digits (M_r: the digits so far leave r). Integers
 * only, also for a number (a subset there): a validator checks them exactly. */
int sc_gen_multiple(struct sc *c, const cJSON *s, const cJSON *mul, int bounded, struct sbuf *b) {
    if (!cJSON_IsNumber(mul) || mul->valuedouble <= 0)
        return sc_serr(c, "%s", "'multipleOf' must be a positive number");
    double k = mul->valuedouble;
    /* every integer is a multiple of 1 and of 0.1 ... 0.000001, and a validator's floating
     * division of an integer by those is whole (of 0.07 by 0.01 it is not): the integers */
    static const double whole[] = {1, 0.1, 0.01, 0.001, 0.0001, 0.00001, 0.000001};
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (k == whole[i]) {
            if (bounded) return sc_gen_num_range(c, s, 1, b);
            sc_put_integers(c, b);
            return 0;
        }
    int between = bounded && k == floor(k) ? multiples_between(c, s, k, b) : 0;
    if (between) return between < 0 ? -1 : 0;
    if (k != floor(k) || k > 1000 || bounded)
        return sc_serr(c, "%s",
                       "multipleOf is supported for 1 and 0.1 ... 0.000001 (integers are written), "
                       "integers up to 1000 without minimum/maximum, and integers between "
                       "minimum and maximum with at most 1024 multiples there");
    int n = (int)k;
    char base[RN];
    sc_new_rule(c, base);
    for (int r = 0; r < n; r++) {
        struct sbuf t = {0};
        sbuf_adds(&t, r == 0 ? "\"\"" : "");
        for (int d = 0; d <= 9; d++)
            sbuf_addf(&t, "%s\"%d\" %s-%d", r == 0 || d ? " | " : "", d, base, (10 * r + d) % n);
        char nm[RN + 16];
        snprintf(nm, sizeof nm, "%s-%d", base, r);
        sc_emit(c, nm, t.p);
        sbuf_free(&t);
    }
    sbuf_addf(b, "(\"0\" | \"-\"? (");
    for (int d = 1; d <= 9; d++) sbuf_addf(b, "%s\"%d\" %s-%d", d > 1 ? " | " : "", d, base, d % n);
    sbuf_adds(b, "))");
    return 0;
}
