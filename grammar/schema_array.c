/* JSON Schema -> GBNF, arrays: items, prefixItems, counts, uniqueItems over
 * finite domains, contains. */
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
#include "schema_array.h"
#include "schema_merge.h"
#include "schema_oneof.h"

static int gen_unique(struct sc *c, const cJSON *items, long lo, long hi, struct sbuf *b);
static int gen_unique_strings(struct sc *c, const cJSON *items, char *nm);
static int gen_contains(struct sc *c, const cJSON *s, const cJSON *items, struct sbuf *b);

/* ---- arrays ---- */

int sc_read_count(struct sc *c, const cJSON *s, const char *key, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return sc_serr(c, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > GRAMMAR_MAX_REPEAT)
        return sc_serr(c, "'%s' above 1000 is not supported", key);
    *out = (long)v->valuedouble;
    return 1;
}

int sc_gen_array(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (cJSON_GetObjectItemCaseSensitive(s, "contains")) return gen_contains(c, s, items, b);
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (cJSON_IsArray(items)) { /* draft 4 tuples */
        if (prefix) return sc_serr(c, "%s", "'items' as an array together with 'prefixItems'");
        prefix = items;
        items = cJSON_GetObjectItemCaseSensitive(s, "additionalItems"); /* the rest (NULL: any) */
    }
    if (prefix && !cJSON_IsArray(prefix)) return sc_serr(c, "%s", "'prefixItems' must be an array");
    long lo = 0, hi = -1;
    if (sc_read_count(c, s, "minItems", &lo) < 0 || sc_read_count(c, s, "maxItems", &hi) < 0)
        return -1;
    char item0[RN], item[2 * RN];
    int uq = 0; /* 1: items are strings told apart by the unique quote */
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems"))) {
        if (prefix) return sc_serr(c, "%s", "uniqueItems beside prefixItems is not supported");
        if ((uq = gen_unique_strings(c, items, item0)) < 0) return -1;
        if (!uq) return gen_unique(c, items, lo, hi, b);
    }
    int m = prefix ? cJSON_GetArraySize(prefix) : 0;
    int more = !(items && cJSON_IsFalse(items));
    if (!more && (hi < 0 || hi > m)) hi = m;
    if (hi >= 0 && hi < lo)
        return sc_serr(c, "%s",
                       "unsatisfiable schema: minItems is above maxItems (or the "
                       "items allowed)");
    if (m > GRAMMAR_MAX_REPEAT) return sc_serr(c, "%s", "more than 1000 prefixItems");
    if (uq) { /* item0 written */
    } else if (!more || !items || cJSON_IsTrue(items)) snprintf(item0, RN, "%s", c->j);
    else if (sc_gen(c, items, item0) < 0) return -1;
    snprintf(item, sizeof item, "%s %s-ws", item0, c->j); /* whitespace after each item */
    int K = (int)(lo > m ? lo : m);
    if (hi >= 0 && K > hi) K = (int)hi;
    char base[RN];
    sc_new_rule(c, base);
    for (int j = K; j >= 0; j--) {
        struct sbuf r = {0};
        char nm[RN + 32];
        snprintf(nm, sizeof nm, "%s-%d", base, j);
        if (j == K) {
            long left = hi >= 0 ? hi - K : -1;
            if (left == 0) sbuf_adds(&r, "\"\"");
            else if (K == 0 && left < 0) sbuf_addf(&r, "(%s (\",\" %s-ws %s)*)?", item, c->j, item);
            else if (K == 0)
                sbuf_addf(&r, "(%s (\",\" %s-ws %s){0,%ld})?", item, c->j, item, left - 1);
            else if (left < 0) sbuf_addf(&r, "(\",\" %s-ws %s)*", c->j, item);
            else sbuf_addf(&r, "(\",\" %s-ws %s){0,%ld}", c->j, item, left);
        } else {
            char el[RN];
            if (j < m) {
                if (sc_gen(c, cJSON_GetArrayItem(prefix, j), el) < 0) {
                    sbuf_free(&r);
                    return -1;
                }
            } else {
                snprintf(el, RN, "%s", item0);
            }
            if (j >= lo) sbuf_adds(&r, "\"\" | ");
            if (j > 0) sbuf_addf(&r, "\",\" %s-ws ", c->j);
            sbuf_addf(&r, "%s %s-ws %s-%d", el, c->j, base, j + 1);
        }
        sc_emit(c, nm, r.p);
        sbuf_free(&r);
    }
    sbuf_addf(b, "\"[\" %s-ws %s-0 \"]\"", c->j, base);
    return 0;
}

/* Whether every string pattern p matches can be made longer and still match, so that an
 * item it writes can always turn into one not written before: p is unanchored at its end,
 * or it ends with a one-character atom (a class, '.', an escape, a character) repeated
 * without bound ('*', '+', '{n,}') and has no '|' outside groups, no lookaround and no
 * word boundary (which could bound that repetition). */
static int pattern_extendable(const char *p) {
    size_t n = strlen(p);
    if (!regex_anchored_end(p, strlen(p))) return 1;
    long atom = -1, depth = 0; /* where the last atom at depth 0 starts */
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] == '\\') {
            if (i + 1 < n && (p[i + 1] == 'b' || p[i + 1] == 'B')) return 0;
            if (!depth) atom = (long)i;
            i++;
        } else if (p[i] == '[') {
            if (!depth) atom = (long)i;
            for (i++; i + 1 < n && p[i] != ']'; i++) /* to the class's end */
                if (p[i] == '\\') i++;
        } else if (p[i] == '(') {
            if (i + 1 < n && p[i + 1] == '?') return 0;
            if (!depth++) atom = -1; /* a group: not one character */
        } else if (p[i] == ')') {
            depth--;
        } else if (p[i] == '|' && !depth) {
            return 0;
        } else if (!depth && !strchr("*+?{}0123456789,^", p[i])) {
            atom = (long)i;
        }
    }
    size_t e = n - 1; /* the quantifier before '$', less a lazy '?' */
    if (e > 1 && p[e - 1] == '?') e--;
    if (atom < 0 || e < 2) return 0;
    char q = p[e - 1];
    return q == '*' || q == '+' || (q == '}' && p[e - 2] == ',');
}

/* uniqueItems over strings that only a minLength or an extendable pattern (not both) bound:
 * any such string can be made longer, so the grammar writes them with the unique quote closing each
 * (uniq.h), which turns away a repeat, exactly, and never leaves the array without a way
 * on. Other strings (a format, maxLength: one may be the last of its kind) go to
 * gen_unique. 1 with the item's rule name in nm, 0 when items are not such strings, -1 on
 * an error. */
static int gen_unique_strings(struct sc *c, const cJSON *items, char *nm) {
    const cJSON *f = items ? sc_flat(c, items, 1) : NULL;
    if (!f) return items ? -1 : 0;
    if (!cJSON_IsObject(f) || sc_branches_of(f) ||
        sc_type_bits(cJSON_GetObjectItemCaseSensitive(f, "type")) != T_STR)
        return 0;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(f, "pattern");
    if (pat && (!cJSON_IsString(pat) || !pattern_extendable(pat->valuestring))) return 0;
    for (const cJSON *k = f->child; k; k = k->next)
        if (strcmp(k->string, "type") != 0 && strcmp(k->string, "minLength") != 0 &&
            strcmp(k->string, "pattern") != 0 && sc_is_validity(f, k->string))
            return 0;
    long lo = 0;
    if (sc_read_count(c, f, "minLength", &lo) < 0) return -1;
    struct sbuf b = {0};
    char e[ERR_LEN];
    sbuf_adds(&b, "\"\\\"\" ");
    if (!pat) {
        sbuf_addf(&b, "%s-char{%ld,}", c->j, lo);
    } else { /* as sc_gen_string writes a pattern searched for (no lengths beside it) */
        const char *p = pat->valuestring;
        size_t n = strlen(p);
        int start = n > 0 && p[0] == '^', end = regex_anchored_end(p, strlen(p));
        if (!start) sbuf_addf(&b, "%s-char* ", c->j);
        if (lo > 0 || regex_to_gbnf(p, n, 1, &b, e) < 0) {
            sbuf_free(&b);
            return 0;
        }
        if (!end) sbuf_addf(&b, " %s-char*", c->j);
    }
    sbuf_adds(&b, " %unique-quote");
    sc_new_rule(c, nm);
    sc_emit(c, nm, b.p);
    sbuf_free(&b);
    return 1;
}

/* uniqueItems over items of a finite domain (an enum, a const, boolean, null): the sets of
 * distinct values between minItems and maxItems, each written in the domain's order (one
 * array per set: a subset of the orders allowed). S(i, n): values i.. with n written. */
#define UNIQUE_MAX_VALUES 64

static int gen_unique(struct sc *c, const cJSON *items, long lo, long hi, struct sbuf *b) {
    const cJSON *f = items ? sc_flat(c, items, 1) : NULL;
    if (items && !f) return -1;
    const cJSON *k1 = f ? cJSON_GetObjectItemCaseSensitive(f, "const") : NULL;
    const cJSON *e = f ? cJSON_GetObjectItemCaseSensitive(f, "enum") : NULL;
    cJSON *dom = cJSON_CreateArray();
    cJSON_AddItemToArray(c->owned, dom);
    int t = f ? sc_type_bits(cJSON_GetObjectItemCaseSensitive(f, "type")) : T_ANY;
    if (k1 || cJSON_IsArray(e)) {
        for (const cJSON *x = k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
            int dup = 0, ok;
            for (const cJSON *y = dom->child; y && !dup; y = y->next) dup = cJSON_Compare(x, y, 1);
            if (dup || (ok = sc_value_valid(c, f, x)) == 0) continue;
            if (ok < 0) return -1;
            cJSON_AddItemToArray(dom, cJSON_Duplicate(x, 1));
        }
    } else if (f && !sc_branches_of(f) && (t == T_BOOL || t == T_NULL || t == (T_BOOL | T_NULL))) {
        if (t & T_BOOL)
            cJSON_AddItemToArray(dom, cJSON_CreateTrue()),
                cJSON_AddItemToArray(dom, cJSON_CreateFalse());
        if (t & T_NULL) cJSON_AddItemToArray(dom, cJSON_CreateNull());
    } else {
        return sc_serr(
            c, "%s",
            "uniqueItems is supported over items of an enum, a const, boolean or null, and "
            "strings that only a minLength or a pattern whose matches can all be made longer "
            "bound");
    }
    int k = cJSON_GetArraySize(dom);
    if (k > UNIQUE_MAX_VALUES)
        return sc_serr(c, "%s", "uniqueItems over more than 64 values is not supported");
    if (hi < 0 || hi > k) hi = k;
    if (lo > hi)
        return sc_serr(
            c, "%s", "unsatisfiable schema: minItems above the distinct values uniqueItems allows");
    char base[RN];
    sc_new_rule(c, base);
    static _Thread_local char ex[UNIQUE_MAX_VALUES + 2]
                                [UNIQUE_MAX_VALUES + 2]; /* S(i, n) has a sentence */
    for (int i = k; i >= 0; i--)
        for (long n = hi; n >= 0; n--) {
            ex[i][n] = n >= lo || (i < k && ((n < hi && ex[i + 1][n + 1]) || ex[i + 1][n]));
            if (!ex[i][n]) continue;
            struct sbuf r = {0};
            int alts = 0;
            if (n >= lo) sbuf_adds(&r, "\"\""), alts++;
            if (i < k && n < hi && ex[i + 1][n + 1]) {
                sbuf_addf(&r, "%s%s", alts++ ? " | " : "", n ? "\",\" " : "");
                if (n) sbuf_addf(&r, "%s-ws ", c->j);
                sc_put_json_literal(&r, cJSON_GetArrayItem(dom, i));
                sbuf_addf(&r, " %s-ws %s-%d-%ld", c->j, base, i + 1, n + 1);
            }
            if (i < k && ex[i + 1][n])
                sbuf_addf(&r, "%s%s-%d-%ld", alts++ ? " | " : "", base, i + 1, n);
            if (alts) {
                char nm[RN + 48];
                snprintf(nm, sizeof nm, "%s-%d-%ld", base, i, n);
                sc_emit(c, nm, r.p);
            }
            sbuf_free(&r);
        }
    sbuf_addf(b, "\"[\" %s-ws %s-0-0 \"]\"", c->j, base);
    return 0;
}

/* contains with minContains / maxContains, as the arrays whose items match contains (C) at
 * least lo times (and at most hi): A* C (A* C){lo-1..hi-1} A*, commas between, where A is
 * items (hi unbounded) or items and not contains (bounded: not must be exact, lower_not). */
static int gen_contains(struct sc *c, const cJSON *s, const cJSON *items, struct sbuf *b) {
    const cJSON *con = cJSON_GetObjectItemCaseSensitive(s, "contains");
    long lo = 1, hi = -1, mn = 0, mx = -1;
    if (sc_read_count(c, s, "minContains", &lo) < 0 ||
        sc_read_count(c, s, "maxContains", &hi) < 0 || sc_read_count(c, s, "minItems", &mn) < 0 ||
        sc_read_count(c, s, "maxItems", &mx) < 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(s, "prefixItems") || cJSON_IsArray(items) ||
        cJSON_IsFalse(items) || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems")) ||
        mx >= 0 || mn > lo)
        return sc_serr(c, "%s",
                       "contains beside prefixItems, items arrays or false, uniqueItems, "
                       "maxItems or a minItems above minContains is not supported");
    if (hi >= 0 && hi < lo)
        return sc_serr(c, "%s", "unsatisfiable schema: minContains > maxContains");
    int any_item = !items || cJSON_IsTrue(items);
    const cJSON *yes = any_item ? con : sc_merge(c, items, con);
    cJSON *neg = cJSON_CreateObject();
    cJSON_AddItemToArray(c->owned, neg);
    cJSON_AddItemToObject(neg, "not", cJSON_Duplicate(con, 1));
    const cJSON *no = any_item ? neg : sc_merge(c, items, neg);
    char cr[RN], ar[RN];
    if (!yes || !no) return -1;
    if (hi < 0 && any_item) snprintf(ar, RN, "%s", c->j);
    else if (sc_gen(c, hi < 0 ? items : no, ar) < 0) return -1;
    const char *j = c->j;
    struct sbuf r = {0}; /* ar-items and cr-items, at least one cr */
    if (hi != 0) {
        if (sc_gen(c, yes, cr) < 0) return -1;
        sbuf_addf(&r, "(%s %s-ws \",\" %s-ws)* %s %s-ws (\",\" %s-ws %s %s-ws)*", ar, j, j, cr, j,
                  j, ar, j);
        long from = lo > 1 ? lo - 1 : 0, to = hi < 0 ? from : hi - 1;
        if (to > 0) {
            sbuf_addf(&r, " (\",\" %s-ws %s %s-ws (\",\" %s-ws %s %s-ws)*)", j, cr, j, j, ar, j);
            if (from == to) sbuf_addf(&r, "{%ld}", from);
            else sbuf_addf(&r, "{%ld,%ld}", from, to);
        }
    }
    if (lo == 0) /* or ar-items only */
        sbuf_addf(b, "\"[\" %s-ws (%s%s%s %s-ws (\",\" %s-ws %s %s-ws)*)? \"]\"", j, r.p ? r.p : "",
                  r.p ? " | " : "", ar, j, j, ar, j);
    else sbuf_addf(b, "\"[\" %s-ws %s \"]\"", j, r.p);
    sbuf_free(&r);
    return 0;
}
