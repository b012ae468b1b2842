/* JSON Schema -> GBNF (grammar.h). Each subschema becomes a rule; $ref targets become rules
 * once each (so recursion works) through a work list, never by recursion over the chain.
 * Choices, documented in grammar.h and docs: properties come out in the schema's order;
 * without additionalProperties only the declared properties appear (a subset of what the
 * schema allows); minimum/maximum on numbers yield integers in the range; anyOf and oneOf
 * are the union of their branches (oneOf's exclusivity is not enforced); allOf merges its
 * subschemas' keywords (properties and required are combined). Any other keyword is an
 * error that names it. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"

#define RN 128 /* rule name buffer */

struct sref {
    char *ref;
    int id;
    const cJSON *target;
};

struct sc {
    const cJSON *root;
    char name[64];
    char j[80]; /* the generic JSON rules' prefix */
    struct sbuf *out;
    char *err;
    int n_rules;
    struct sref *refs;
    int n_refs, cap_refs;
    int depth;
    cJSON *owned; /* merged schemas, freed at the end */
};

static const char *const annotations[] = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};
static const char *const keywords[] = {"type", "properties", "required", "additionalProperties", "items",
                                       "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                       "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "minimum",
                                       "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static int in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (strcmp(*l, s) == 0) return 1;
    return 0;
}

static int serr(struct sc *c, const char *fmt, const char *a) {
    char m[ERR_LEN];
    snprintf(m, sizeof m, fmt, a);
    return err_set(c->err, "JSON Schema: %s", m);
}

static void new_rule(struct sc *c, char *nm) { snprintf(nm, RN, "%s-%d", c->name, c->n_rules++); }

static void emit(struct sc *c, const char *nm, const char *body) { sbuf_addf(c->out, "%s ::= %s\n", nm, body); }

static int gen(struct sc *c, const cJSON *s, char *nm);

/* A JSON value as a literal followed by whitespace. */
static void put_json_literal(struct sc *c, struct sbuf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) FATAL("out of memory");
    gbnf_put_literal(b, t, strlen(t));
    sbuf_addf(b, " %s-ws", c->j);
    free(t);
}

static const cJSON *resolve_pointer(struct sc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            if (*end || i < 0) return NULL;
            cur = cJSON_GetArrayItem(cur, (int)i);
        } else if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        } else {
            return NULL;
        }
        if (!cur) return NULL;
    }
    return cur;
}

static int only_ref(const cJSON *s) {
    if (!cJSON_IsObject(s) || !cJSON_GetObjectItemCaseSensitive(s, "$ref")) return 0;
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") != 0 && !in_list(annotations, k->string)) return 0;
    return 1;
}

/* The rule of a $ref, queued for generation the first time it is seen. */
static int ref_rule(struct sc *c, const char *ref, char *nm) {
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) {
            snprintf(nm, RN, "%s-r%d", c->name, c->refs[i].id);
            return 0;
        }
    const cJSON *t = resolve_pointer(c, ref);
    if (!t) return serr(c, "$ref '%s' does not resolve (only local refs \"#/...\" are supported)", ref);
    /* a chain of bare $refs that returns to itself can never produce a value */
    const cJSON *x = t;
    for (int hops = 0; only_ref(x); hops++) {
        const char *r2 = cJSON_GetObjectItemCaseSensitive(x, "$ref")->valuestring;
        if (!r2 || hops > 64) return serr(c, "$ref '%s' is a chain of references without end", ref);
        if (strcmp(r2, ref) == 0) return serr(c, "unsatisfiable schema: $ref '%s' refers to itself", ref);
        x = resolve_pointer(c, r2);
        if (!x) return serr(c, "$ref '%s' does not resolve", r2);
    }
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? 2 * c->cap_refs : 8;
        c->refs = xrealloc(c->refs, sizeof *c->refs * (size_t)c->cap_refs);
    }
    c->refs[c->n_refs] = (struct sref){xstrdup(ref), c->n_refs, t};
    snprintf(nm, RN, "%s-r%d", c->name, c->n_refs);
    c->n_refs++;
    return 0;
}

/* Keywords of a beside b's, for allOf and for siblings of anyOf: properties and required
 * combine, anything else must agree. Returns a new schema owned by c, or NULL. */
static cJSON *merge(struct sc *c, const cJSON *a, const cJSON *b) {
    for (int hops = 0; only_ref(b); hops++) {
        b = resolve_pointer(c, cJSON_GetObjectItemCaseSensitive(b, "$ref")->valuestring);
        if (!b || hops > 64) return serr(c, "%s", "allOf: a $ref that does not resolve"), NULL;
    }
    if (cJSON_IsBool(b)) {
        if (cJSON_IsTrue(b)) {
            cJSON *m = cJSON_Duplicate(a, 1);
            cJSON_AddItemToArray(c->owned, m);
            return m;
        }
        return serr(c, "%s", "unsatisfiable schema: allOf contains false"), NULL;
    }
    if (!cJSON_IsObject(b)) return serr(c, "%s", "allOf: a subschema is not an object"), NULL;
    cJSON *m = cJSON_Duplicate(a, 1);
    if (!m) FATAL("out of memory");
    cJSON_AddItemToArray(c->owned, m);
    for (const cJSON *k = b->child; k; k = k->next) {
        if (in_list(annotations, k->string)) continue;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(m, k->string);
        if (!have) {
            cJSON_AddItemToObject(m, k->string, cJSON_Duplicate(k, 1));
        } else if (strcmp(k->string, "properties") == 0 && cJSON_IsObject(k) && cJSON_IsObject(have)) {
            for (const cJSON *p = k->child; p; p = p->next) {
                cJSON *q = cJSON_GetObjectItemCaseSensitive(have, p->string);
                if (!q) {
                    cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, 1));
                } else if (!cJSON_Compare(p, q, 1)) { /* both apply: allOf of the two */
                    cJSON *both = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(both, "allOf");
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(q, 1));
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(p, 1));
                    cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, both);
                }
            }
        } else if (strcmp(k->string, "required") == 0 && cJSON_IsArray(k) && cJSON_IsArray(have)) {
            for (const cJSON *p = k->child; p; p = p->next) {
                int dup = 0;
                for (const cJSON *q = have->child; q; q = q->next) dup |= cJSON_Compare(p, q, 1);
                if (!dup) cJSON_AddItemToArray(have, cJSON_Duplicate(p, 1));
            }
        } else if (!cJSON_Compare(k, have, 1)) {
            return serr(c, "allOf: the subschemas disagree on '%s' (only compatible keywords can be combined)",
                        k->string),
                   NULL;
        }
    }
    return m;
}

/* A copy of s without the keys named in drop (NULL-terminated), owned by c. */
static cJSON *without(struct sc *c, const cJSON *s, const char *const *drop) {
    cJSON *m = cJSON_Duplicate(s, 1);
    if (!m) FATAL("out of memory");
    cJSON_AddItemToArray(c->owned, m);
    for (; *drop; drop++) cJSON_DeleteItemFromObjectCaseSensitive(m, *drop);
    return m;
}

static int has_constraints(const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(annotations, k->string)) return 1;
    return 0;
}

/* ---- numbers ---- */

static void digits_str(unsigned long long v, int n, char *out) {
    for (int i = n - 1; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
    out[n] = 0;
}

/* Strings of n digits from a to b (same length), as a GBNF sequence. */
static void same_len(struct sbuf *b, const char *a, const char *z, int n) {
    if (n == 0) {
        sbuf_adds(b, "\"\"");
        return;
    }
    if (a[0] == z[0]) {
        sbuf_addf(b, "\"%c\" ", a[0]);
        same_len(b, a + 1, z + 1, n - 1);
        return;
    }
    int rest_min = 1, rest_max = 1;
    for (int i = 1; i < n; i++) {
        rest_min &= a[i] == '0';
        rest_max &= z[i] == '9';
    }
    if (rest_min && rest_max) {
        sbuf_addf(b, "[%c-%c]", a[0], z[0]);
        if (n > 1) sbuf_addf(b, " [0-9]{%d}", n - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    sbuf_addf(b, "(\"%c\" ", a[0]);
    same_len(b, a + 1, nines, n - 1);
    if (z[0] - a[0] > 1) {
        sbuf_addf(b, " | [%c-%c]", a[0] + 1, z[0] - 1);
        if (n > 1) sbuf_addf(b, " [0-9]{%d}", n - 1);
    }
    sbuf_addf(b, " | \"%c\" ", z[0]);
    same_len(b, zeros, z + 1, n - 1);
    sbuf_adds(b, ")");
}

static int ndigits(unsigned long long v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/* Non-negative integers in [lo, hi] without leading zeros, as alternatives. */
static void range_nonneg(struct sbuf *b, unsigned long long lo, unsigned long long hi, int *alts) {
    unsigned long long p = 1;
    for (int d = 1; d <= ndigits(hi); d++, p *= 10) {
        unsigned long long a = lo > (d == 1 ? 0 : p) ? lo : (d == 1 ? 0 : p), z = hi < p * 10 - 1 ? hi : p * 10 - 1;
        if (a > z) continue;
        char as[24], zs[24];
        digits_str(a, d, as);
        digits_str(z, d, zs);
        sbuf_adds(b, (*alts)++ ? " | " : "");
        same_len(b, as, zs, d);
    }
}

#define INT_LIMIT 9999999999999999.0 /* 16 digits */

static int read_bound(struct sc *c, const cJSON *s, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return serr(c, "'%s' must be a number", key);
    *out = v->valuedouble;
    return 1;
}

/* integer (or number) with minimum / maximum: the integers in the range. */
static int gen_int_range(struct sc *c, const cJSON *s, struct sbuf *b) {
    double lo = -INT_LIMIT, hi = INT_LIMIT, v = 0;
    int r;
    if ((r = read_bound(c, s, "minimum", &v)) < 0) return -1;
    if (r && ceil(v) > lo) lo = ceil(v);
    if ((r = read_bound(c, s, "exclusiveMinimum", &v)) < 0) return -1;
    if (r && floor(v) + 1 > lo) lo = floor(v) + 1;
    if ((r = read_bound(c, s, "maximum", &v)) < 0) return -1;
    if (r && floor(v) < hi) hi = floor(v);
    if ((r = read_bound(c, s, "exclusiveMaximum", &v)) < 0) return -1;
    if (r && ceil(v) - 1 < hi) hi = ceil(v) - 1;
    if (lo > hi) return serr(c, "%s", "unsatisfiable schema: minimum is above maximum");
    if (lo < -INT_LIMIT || hi > INT_LIMIT) return serr(c, "%s", "minimum/maximum beyond 16 digits are not supported");
    long long l = (long long)lo, h = (long long)hi;
    int alts = 0;
    sbuf_adds(b, "(");
    if (l < 0) {
        sbuf_adds(b, "\"-\" (");
        int a2 = 0;
        range_nonneg(b, (unsigned long long)(h < 0 ? -h : 1), (unsigned long long)-l, &a2);
        sbuf_adds(b, ")");
        alts++;
    }
    if (h >= 0) range_nonneg(b, (unsigned long long)(l > 0 ? l : 0), (unsigned long long)h, &alts);
    sbuf_addf(b, ") %s-ws", c->j);
    return 0;
}

/* ---- strings ---- */

static int gen_string(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minLength");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if ((fmt != NULL) + (pat != NULL) + (mn || mx) > 1)
        return serr(c, "%s", "combining format, pattern and minLength/maxLength is not supported");
    if (fmt) {
        static const char *const names[] = {"date", "time", "date-time", "uuid", "email", NULL};
        static const char *const g[] = {
            "DATE",
            "TIME",
            "DATE \"T\" TIME",
            "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}",
            "[a-zA-Z0-9._%+-]{1,64} \"@\" [a-zA-Z0-9-]{1,63} (\".\" [a-zA-Z0-9-]{1,63}){0,3} \".\" [a-zA-Z]{2,10}",
        };
        if (!cJSON_IsString(fmt)) return serr(c, "%s", "'format' must be a string");
        int k = 0;
        while (names[k] && strcmp(names[k], fmt->valuestring) != 0) k++;
        if (!names[k]) return serr(c, "unsupported format '%s' (supported: date, time, date-time, uuid, email)", fmt->valuestring);
        /* days 01-28 only: valid in every month, so a format checker never refuses them */
        const char *date = "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])";
        const char *time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                           "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
        sbuf_adds(b, "\"\\\"\" ");
        for (const char *p = g[k]; *p;) {
            if (strncmp(p, "DATE", 4) == 0) {
                sbuf_addf(b, "(%s)", date);
                p += 4;
            } else if (strncmp(p, "TIME", 4) == 0) {
                sbuf_addf(b, "(%s)", time);
                p += 4;
            } else {
                sbuf_add(b, p++, 1);
            }
        }
        sbuf_addf(b, " \"\\\"\" %s-ws", c->j);
        return 0;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return serr(c, "%s", "'pattern' must be a string");
        const char *p = pat->valuestring;
        size_t n = strlen(p);
        size_t bs = 0;
        while (bs + 1 < n && p[n - 2 - bs] == '\\') bs++;
        int start = n > 0 && p[0] == '^', end = n > 0 && p[n - 1] == '$' && bs % 2 == 0;
        sbuf_adds(b, "\"\\\"\" ");
        if (!start) sbuf_addf(b, "%s-char* ", c->j);
        char e[ERR_LEN];
        if (regex_to_gbnf(p, n, 1, b, e) < 0) return err_set(c->err, "JSON Schema: pattern: %s", e);
        if (!end) sbuf_addf(b, " %s-char*", c->j);
        sbuf_addf(b, " \"\\\"\" %s-ws", c->j);
        return 0;
    }
    long lo = 0, hi = -1;
    if (mn) {
        if (!cJSON_IsNumber(mn) || mn->valuedouble < 0) return serr(c, "%s", "'minLength' must be a non-negative integer");
        if (mn->valuedouble > GRAMMAR_MAX_REPEAT) return serr(c, "%s", "minLength above 1000 is not supported");
        lo = (long)mn->valuedouble;
    }
    if (mx) {
        if (!cJSON_IsNumber(mx) || mx->valuedouble < 0) return serr(c, "%s", "'maxLength' must be a non-negative integer");
        hi = mx->valuedouble > GRAMMAR_MAX_REPEAT ? -1 : (long)mx->valuedouble; /* beyond: no practical bound */
        if (mx->valuedouble > GRAMMAR_MAX_REPEAT && mx->valuedouble < 1e6)
            return serr(c, "%s", "maxLength between 1000 and 1000000 is not supported");
    }
    if (hi >= 0 && hi < lo) return serr(c, "%s", "unsatisfiable schema: minLength is above maxLength");
    if (hi < 0) sbuf_addf(b, "\"\\\"\" %s-char{%ld,} \"\\\"\" %s-ws", c->j, lo, c->j);
    else sbuf_addf(b, "\"\\\"\" %s-char{%ld,%ld} \"\\\"\" %s-ws", c->j, lo, hi, c->j);
    return 0;
}

/* ---- objects ---- */

static int gen_object(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return serr(c, "%s", "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return serr(c, "%s", "'required' must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return serr(c, "%s", "'additionalProperties' must be a boolean or a schema");
    /* declared properties, then required names not declared */
    int n = 0, cap = 8;
    struct prop { const char *key; const cJSON *schema; int required; } *pl = xmalloc(sizeof *pl * (size_t)cap);
    int rc = -1;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        if (cJSON_IsFalse(p)) continue;
        if (n == cap) pl = xrealloc(pl, sizeof *pl * (size_t)(cap *= 2));
        pl[n++] = (struct prop){p->string, p, 0};
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) {
            serr(c, "%s", "'required' must list strings");
            goto out;
        }
        int k = 0;
        while (k < n && strcmp(pl[k].key, r->valuestring) != 0) k++;
        if (k == n) {
            if (props && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(props, r->valuestring))) {
                serr(c, "unsatisfiable schema: required property '%s' is false", r->valuestring);
                goto out;
            }
            if (addl && cJSON_IsFalse(addl)) {
                serr(c, "unsatisfiable schema: required property '%s' is not allowed by additionalProperties", r->valuestring);
                goto out;
            }
            if (n == cap) pl = xrealloc(pl, sizeof *pl * (size_t)(cap *= 2));
            pl[n++] = (struct prop){r->valuestring, addl ? addl : NULL, 0};
        }
        pl[k].required = 1;
    }
    /* extra keys: any when the schema says nothing about properties at all */
    int extra = addl ? !cJSON_IsFalse(addl) : props == NULL;
    char extra_val[RN] = "";
    if (extra) {
        if (addl && cJSON_IsObject(addl)) {
            if (gen(c, addl, extra_val) < 0) goto out;
        } else {
            snprintf(extra_val, RN, "%s", c->j);
        }
    }
    char (*vals)[RN] = xcalloc((size_t)n + 1, RN);
    for (int k = 0; k < n; k++) {
        if (!pl[k].schema) snprintf(vals[k], RN, "%s", c->j);
        else if (gen(c, pl[k].schema, vals[k]) < 0) {
            free(vals);
            goto out;
        }
    }
    /* R_k(f): properties k.. with f = nothing written yet (no comma needed) */
    char base[RN];
    new_rule(c, base);
    for (int k = n; k >= 0; k--)
        for (int f = 0; f < 2; f++) {
            struct sbuf r = {0};
            char nm[RN + 32];
            snprintf(nm, sizeof nm, "%s-%d-%d", base, k, f);
            if (k == n) {
                if (extra) {
                    char sep[RN + 16] = "";
                    if (!f) snprintf(sep, sizeof sep, "\",\" %s-ws ", c->j);
                    sbuf_addf(&r, "(%s%s-string \":\" %s-ws %s (\",\" %s-ws %s-string \":\" %s-ws %s)*)?", sep, c->j,
                              c->j, extra_val, c->j, c->j, c->j, extra_val);
                }
                else
                    sbuf_adds(&r, "\"\"");
            } else {
                if (!f) sbuf_addf(&r, "\",\" %s-ws ", c->j);
                cJSON *key = cJSON_CreateString(pl[k].key);
                char *t = cJSON_PrintUnformatted(key);
                gbnf_put_literal(&r, t, strlen(t));
                free(t);
                cJSON_Delete(key);
                sbuf_addf(&r, " %s-ws \":\" %s-ws %s %s-%d-0", c->j, c->j, vals[k], base, k + 1);
                if (!pl[k].required) sbuf_addf(&r, " | %s-%d-%d", base, k + 1, f);
            }
            emit(c, nm, r.p);
            sbuf_free(&r);
        }
    free(vals);
    sbuf_addf(b, "\"{\" %s-ws %s-0-1 \"}\" %s-ws", c->j, base, c->j);
    rc = 0;
out:
    free(pl);
    return rc;
}

/* ---- arrays ---- */

static int read_count(struct sc *c, const cJSON *s, const char *key, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return serr(c, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > GRAMMAR_MAX_REPEAT) return serr(c, "'%s' above 1000 is not supported", key);
    *out = (long)v->valuedouble;
    return 1;
}

static int gen_array(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (cJSON_IsArray(items)) { /* draft 4 tuples */
        if (prefix) return serr(c, "%s", "'items' as an array together with 'prefixItems'");
        prefix = items;
        items = NULL;
    }
    if (prefix && !cJSON_IsArray(prefix)) return serr(c, "%s", "'prefixItems' must be an array");
    long lo = 0, hi = -1;
    if (read_count(c, s, "minItems", &lo) < 0 || read_count(c, s, "maxItems", &hi) < 0) return -1;
    int m = prefix ? cJSON_GetArraySize(prefix) : 0;
    int more = !(items && cJSON_IsFalse(items));
    if (!more && (hi < 0 || hi > m)) hi = m;
    if (hi >= 0 && hi < lo) return serr(c, "%s", "unsatisfiable schema: minItems is above maxItems (or the items allowed)");
    if (m > GRAMMAR_MAX_REPEAT) return serr(c, "%s", "more than 1000 prefixItems");
    char item[RN];
    if (!more || !items || cJSON_IsTrue(items)) snprintf(item, RN, "%s", c->j);
    else if (gen(c, items, item) < 0) return -1;
    int K = (int)(lo > m ? lo : m);
    if (hi >= 0 && K > hi) K = (int)hi;
    char base[RN];
    new_rule(c, base);
    for (int j = K; j >= 0; j--) {
        struct sbuf r = {0};
        char nm[RN + 32];
        snprintf(nm, sizeof nm, "%s-%d", base, j);
        if (j == K) {
            long left = hi >= 0 ? hi - K : -1;
            if (left == 0) sbuf_adds(&r, "\"\"");
            else if (K == 0 && left < 0) sbuf_addf(&r, "(%s (\",\" %s-ws %s)*)?", item, c->j, item);
            else if (K == 0) sbuf_addf(&r, "(%s (\",\" %s-ws %s){0,%ld})?", item, c->j, item, left - 1);
            else if (left < 0) sbuf_addf(&r, "(\",\" %s-ws %s)*", c->j, item);
            else sbuf_addf(&r, "(\",\" %s-ws %s){0,%ld}", c->j, item, left);
        } else {
            char el[RN];
            if (j < m) {
                if (gen(c, cJSON_GetArrayItem(prefix, j), el) < 0) {
                    sbuf_free(&r);
                    return -1;
                }
            } else {
                snprintf(el, RN, "%s", item);
            }
            if (j >= lo) sbuf_adds(&r, "\"\" | ");
            if (j > 0) sbuf_addf(&r, "\",\" %s-ws ", c->j);
            sbuf_addf(&r, "%s %s-%d", el, base, j + 1);
        }
        emit(c, nm, r.p);
        sbuf_free(&r);
    }
    sbuf_addf(b, "\"[\" %s-ws %s-0 \"]\" %s-ws", c->j, base, c->j);
    return 0;
}

/* ---- dispatch ---- */

static int gen_typed(struct sc *c, const cJSON *s, const char *type, struct sbuf *b) {
    if (strcmp(type, "string") == 0) return gen_string(c, s, b);
    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        int bounded = cJSON_GetObjectItemCaseSensitive(s, "minimum") || cJSON_GetObjectItemCaseSensitive(s, "maximum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        if (bounded) return gen_int_range(c, s, b);
        sbuf_addf(b, "%s-%s", c->j, type);
        return 0;
    }
    if (strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0) {
        sbuf_addf(b, "%s-%s", c->j, type);
        return 0;
    }
    if (strcmp(type, "object") == 0) return gen_object(c, s, b);
    if (strcmp(type, "array") == 0) return gen_array(c, s, b);
    return serr(c, "unknown type '%s'", type);
}

static const char *infer_type(const cJSON *s) {
    static const struct { const char *kw, *type; } t[] = {
        {"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
        {"items", "array"},       {"prefixItems", "array"},           {"minItems", "array"},
        {"maxItems", "array"},    {"minLength", "string"},            {"maxLength", "string"},
        {"pattern", "string"},    {"format", "string"},               {"minimum", "number"},
        {"maximum", "number"},    {"exclusiveMinimum", "number"},     {"exclusiveMaximum", "number"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, t[i].kw)) return t[i].type;
    return NULL;
}

/* Generates the rule for schema s; its name goes to nm. */
static int gen(struct sc *c, const cJSON *s, char *nm) {
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !has_constraints(s))) {
        snprintf(nm, RN, "%s", c->j);
        return 0;
    }
    if (cJSON_IsFalse(s)) return serr(c, "%s", "unsatisfiable schema: the schema false matches nothing");
    if (!cJSON_IsObject(s)) return serr(c, "%s", "a schema must be an object or a boolean");
    if (++c->depth > GRAMMAR_MAX_NESTING) return serr(c, "%s", "schema nested deeper than 64 levels");
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(keywords, k->string) && !in_list(annotations, k->string))
            return serr(c, "unsupported keyword '%s'", k->string);
    int rc = 0;
    struct sbuf b = {0};
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (ref) {
        if (!cJSON_IsString(ref)) rc = serr(c, "%s", "'$ref' must be a string");
        else if (!only_ref(s)) { /* $ref beside other keywords: both apply, as allOf */
            static const char *const drop[] = {"$ref", NULL};
            cJSON *sib = without(c, s, drop), *all2 = cJSON_CreateObject(), *r = cJSON_CreateObject();
            cJSON_AddItemToArray(c->owned, all2);
            cJSON *arr = cJSON_AddArrayToObject(all2, "allOf");
            cJSON_AddItemToArray(arr, cJSON_Duplicate(sib, 1));
            cJSON_AddStringToObject(r, "$ref", ref->valuestring);
            cJSON_AddItemToArray(arr, r);
            rc = gen(c, all2, nm);
            c->depth--;
            return rc;
        } else {
            rc = ref_rule(c, ref->valuestring, nm);
            c->depth--;
            return rc;
        }
    } else if (all) {
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0) rc = serr(c, "%s", "'allOf' must be a non-empty array");
        else {
            static const char *const drop[] = {"allOf", NULL};
            cJSON *m = without(c, s, drop);
            for (const cJSON *x = all->child; x && m; x = x->next) m = merge(c, m, x);
            if (!m) rc = -1;
            else {
                rc = gen(c, m, nm);
                c->depth--;
                return rc;
            }
        }
    } else if (any) {
        if (!cJSON_IsArray(any) || cJSON_GetArraySize(any) == 0) rc = serr(c, "%s", "'anyOf'/'oneOf' must be a non-empty array");
        static const char *const drop[] = {"anyOf", "oneOf", NULL};
        cJSON *sib = rc == 0 ? without(c, s, drop) : NULL;
        int k = 0;
        for (const cJSON *x = rc == 0 ? any->child : NULL; x; x = x->next, k++) {
            const cJSON *branch = x;
            if (has_constraints(sib)) branch = merge(c, sib, x);
            char br[RN];
            if (!branch || gen(c, branch, br) < 0) {
                rc = -1;
                break;
            }
            sbuf_addf(&b, "%s%s", k ? " | " : "", br);
        }
    } else if (cJSON_GetObjectItemCaseSensitive(s, "const")) {
        put_json_literal(c, &b, cJSON_GetObjectItemCaseSensitive(s, "const"));
    } else if (cJSON_GetObjectItemCaseSensitive(s, "enum")) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0) rc = serr(c, "%s", "'enum' must be a non-empty array");
        int k = 0;
        for (const cJSON *x = rc == 0 ? e->child : NULL; x; x = x->next) {
            sbuf_adds(&b, k++ ? " | " : "");
            put_json_literal(c, &b, x);
        }
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (!t) {
            const char *it = infer_type(s);
            if (it) rc = gen_typed(c, s, it, &b);
            else sbuf_adds(&b, c->j);
        } else if (cJSON_IsString(t)) {
            rc = gen_typed(c, s, t->valuestring, &b);
        } else if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0) {
            int k = 0;
            for (const cJSON *x = t->child; x && rc == 0; x = x->next) {
                if (!cJSON_IsString(x)) {
                    rc = serr(c, "%s", "'type' must list strings");
                    break;
                }
                sbuf_adds(&b, k++ ? " | (" : "(");
                rc = gen_typed(c, s, x->valuestring, &b);
                sbuf_adds(&b, ")");
            }
        } else {
            rc = serr(c, "%s", "'type' must be a string or a non-empty array of strings");
        }
    }
    if (rc == 0) {
        new_rule(c, nm);
        emit(c, nm, b.p ? b.p : "\"\"");
    }
    sbuf_free(&b);
    c->depth--;
    return rc;
}

int grammar_gbnf_from_json_schema(const char *schema, size_t len, const char *name, struct sbuf *out, char *err) {
    if (len > GRAMMAR_MAX_TEXT)
        return err_set(err, "JSON Schema of %zu bytes is longer than the limit of %u", len, GRAMMAR_MAX_TEXT);
    if (strlen(name) > 40) return err_set(err, "grammar rule name longer than 40 characters");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, 0);
    if (!root) return err_set(err, "JSON Schema: not valid JSON (at byte %zu)", end ? (size_t)(end - schema) : 0);
    struct sc c;
    memset(&c, 0, sizeof c);
    c.root = root;
    snprintf(c.name, sizeof c.name, "%s", name);
    snprintf(c.j, sizeof c.j, "%s-j", name);
    c.out = out;
    c.err = err;
    c.owned = cJSON_CreateArray();
    grammar_gbnf_json_value(c.j, out);
    char top[RN];
    int rc = gen(&c, root, top);
    for (int i = 0; rc == 0 && i < c.n_refs; i++) { /* the work list grows while we go */
        char body[RN], nm[RN];
        rc = gen(&c, c.refs[i].target, body);
        if (rc == 0) {
            snprintf(nm, RN, "%s-r%d", c.name, c.refs[i].id);
            emit(&c, nm, body);
        }
        if (out->len > 32ull * GRAMMAR_MAX_TEXT) rc = serr(&c, "%s", "the schema's grammar is too large");
    }
    if (rc == 0) emit(&c, name, top);
    if (rc == 0 && out->len > 32ull * GRAMMAR_MAX_TEXT) rc = serr(&c, "%s", "the schema's grammar is too large");
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    cJSON_Delete(c.owned);
    cJSON_Delete(root);
    return rc;
}

void grammar_gbnf_json_value(const char *n, struct sbuf *o) {
    sbuf_addf(o, "%s ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", n, n, n, n, n, n, n);
    sbuf_addf(o, "%s-object ::= \"{\" %s-ws (%s-string \":\" %s-ws %s (\",\" %s-ws %s-string \":\" %s-ws %s)*)? \"}\" %s-ws\n",
              n, n, n, n, n, n, n, n, n, n);
    sbuf_addf(o, "%s-array ::= \"[\" %s-ws (%s (\",\" %s-ws %s)*)? \"]\" %s-ws\n", n, n, n, n, n, n);
    sbuf_addf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\" %s-ws\n", n, n, n);
    sbuf_addf(o, "%s-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n", n);
    sbuf_addf(o, "%s-int-part ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n", n);
    sbuf_addf(o, "%s-integer ::= %s-int-part %s-ws\n", n, n, n);
    sbuf_addf(o, "%s-number ::= %s-int-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? %s-ws\n", n, n, n);
    sbuf_addf(o, "%s-boolean ::= (\"true\" | \"false\") %s-ws\n", n, n);
    sbuf_addf(o, "%s-null ::= \"null\" %s-ws\n", n, n);
    sbuf_addf(o, "%s-ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n", n);
}
