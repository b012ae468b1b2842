/* JSON Schema -> GBNF (grammar.h). Each subschema becomes a rule; $ref targets become rules
 * once each (so recursion works) through a work list, never by recursion over the chain.
 * Choices, documented in grammar.h and docs/structured-output.md: properties come out in
 * the schema's order; without additionalProperties only the declared properties appear (a
 * subset of what the schema allows), and extra keys never take a declared name;
 * minimum/maximum on numbers yield decimals in the range (schema_num.c); anyOf is the union of its
 * branches, oneOf too once its branches are shown (or narrowed to be) exclusive, else it is
 * refused; allOf merges its subschemas' keywords (merge_props for the object ones). A
 * keyword that changes validity and is not implemented is an error that names it; unknown
 * keywords are ignored, as the specification says. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
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

/* The keywords implemented; those that change what is valid but are not implemented (a
 * schema using one is refused, never half-honoured). Any other name is ignored, as the
 * specification says of unknown keywords (drafts 4-7) and annotations (2019-09, 2020-12):
 * id, x-* extensions, readonly, links, example, javaType... */
static const char *const keywords[] = {"type", "properties", "required", "additionalProperties",
                                       "items", "prefixItems", "minItems", "maxItems", "enum",
                                       "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
                                       "maxLength", "pattern", "format", "minimum", "maximum",
                                       "exclusiveMinimum", "exclusiveMaximum", "additionalItems",
                                       "dependentRequired", "dependentSchemas", "dependencies",
                                       "minProperties", "maxProperties", "patternProperties",
                                       "propertyNames", "if", "uniqueItems", "multipleOf", "not",
                                       "contains", "unevaluatedProperties", "unevaluatedItems",
                                       "$tpd-not-strings", NULL};
static const char *const unimplemented[] = {"$dynamicRef", "$recursiveRef", NULL};

static int in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (strcmp(*l, s) == 0) return 1;
    return 0;
}

/* 1 when keyword k of schema s changes what s accepts (implemented or not). Keywords that
 * only act beside another (then/else beside if, additionalItems beside an items array,
 * minContains/maxContains beside contains) count through that one. */
static int is_validity(const cJSON *s, const char *k) {
    if (strcmp(k, "additionalItems") == 0)
        return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "items"));
    if (strcmp(k, "if") == 0)
        return cJSON_GetObjectItemCaseSensitive(s, "then") ||
               cJSON_GetObjectItemCaseSensitive(s, "else");
    return in_list(keywords, k) || in_list(unimplemented, k);
}

static int serr(struct sc *c, const char *fmt, const char *a) {
    char m[ERR_LEN];
    snprintf(m, sizeof m, fmt, a);
    return err_set(c->err, "JSON Schema: %s", m);
}

static void new_rule(struct sc *c, char *nm) { snprintf(nm, RN, "%s-%d", c->name, c->n_rules++); }

static void emit(struct sc *c, const char *nm, const char *body) { sbuf_addf(c->out, "%s ::= %s\n", nm, body); }

static int gen(struct sc *c, const cJSON *s, char *nm);
static const cJSON *flat(struct sc *c, const cJSON *s, int gen);
static const cJSON *lower_object(struct sc *c, const cJSON *s);
static int might_accept(struct sc *c, const cJSON *s, const cJSON *v, int depth);
static const cJSON *prop_schema(const cJSON *s, const char *name);
static int value_valid(struct sc *c, const cJSON *s, const cJSON *v);

/* A JSON value as a literal. */
static void put_json_literal(struct sbuf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) FATAL("out of memory");
    gbnf_put_literal(b, t, strlen(t));
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
        if (strcmp(k->string, "$ref") != 0 && is_validity(s, k->string)) return 0;
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

/* all of x and y as one schema (x alone when they are equal), owned by the caller */
static cJSON *all_of2(const cJSON *x, const cJSON *y) {
    if (cJSON_IsTrue(x) || cJSON_Compare(x, y, 1)) return cJSON_Duplicate(y, 1);
    if (cJSON_IsTrue(y)) return cJSON_Duplicate(x, 1);
    if (cJSON_IsFalse(x) || cJSON_IsFalse(y)) return cJSON_CreateFalse();
    cJSON *both = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(both, "allOf");
    cJSON_AddItemToArray(arr, cJSON_Duplicate(x, 1));
    cJSON_AddItemToArray(arr, cJSON_Duplicate(y, 1));
    return both;
}

/* The object keywords of a and b together, into m (a copy of a): each side's
 * additionalProperties governs the names the other side declares and it does not, so a
 * name only one side declares is false where the other's additionalProperties is false
 * (and must satisfy it where it is a schema); the additionalProperties of both apply to
 * the names neither declares. */
static void merge_props(cJSON *m, const cJSON *a, const cJSON *b) {
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    if (!pa && !pb && !aa && !ab) return;
    cJSON *p = cJSON_CreateObject();
    for (const cJSON *x = pa ? pa->child : NULL; x; x = x->next) {
        const cJSON *y = pb ? cJSON_GetObjectItemCaseSensitive(pb, x->string) : NULL;
        cJSON_AddItemToObject(p, x->string,
                              y    ? all_of2(x, y)
                              : ab ? all_of2(x, ab)
                                   : cJSON_Duplicate(x, 1));
    }
    for (const cJSON *y = pb ? pb->child : NULL; y; y = y->next)
        if (!pa || !cJSON_GetObjectItemCaseSensitive(pa, y->string))
            cJSON_AddItemToObject(p, y->string, aa ? all_of2(y, aa) : cJSON_Duplicate(y, 1));
    cJSON_DeleteItemFromObjectCaseSensitive(m, "properties");
    cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
    if (p->child || pa || pb)
        cJSON_AddItemToObject(m, "properties", p);
    else
        cJSON_Delete(p);
    if (aa || ab)
        cJSON_AddItemToObject(m, "additionalProperties",
                              !aa   ? cJSON_Duplicate(ab, 1)
                              : !ab ? cJSON_Duplicate(aa, 1)
                                    : all_of2(aa, ab));
}

/* Two values of keyword k that both apply, as one (a new item), or NULL where tpd does not
 * combine them: bounds take the tighter (lower bounds the larger, upper bounds the smaller),
 * type and enum the values in both (an empty array: none), items both schemas. */
static cJSON *merge_values(const char *k, const cJSON *x, const cJSON *y) {
    static const char *const lower[] = {"minimum",  "exclusiveMinimum", "minLength",
                                        "minItems", "minProperties",    NULL};
    static const char *const upper[] = {"maximum",  "exclusiveMaximum", "maxLength",
                                        "maxItems", "maxProperties",    NULL};
    if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && (in_list(lower, k) || in_list(upper, k)))
        return cJSON_CreateNumber(in_list(lower, k) == (x->valuedouble > y->valuedouble)
                                      ? x->valuedouble
                                      : y->valuedouble);
    if (strcmp(k, "items") == 0 && !cJSON_IsArray(x) && !cJSON_IsArray(y)) return all_of2(x, y);
    if (strcmp(k, "type") == 0 || strcmp(k, "enum") == 0) {
        if (strcmp(k, "enum") == 0 && (!cJSON_IsArray(x) || !cJSON_IsArray(y))) return NULL;
        cJSON *out = cJSON_CreateArray();
        for (const cJSON *p = cJSON_IsArray(x) ? x->child : x; p;
             p = cJSON_IsArray(x) ? p->next : NULL)
            for (const cJSON *q = cJSON_IsArray(y) ? y->child : y; q;
                 q = cJSON_IsArray(y) ? q->next : NULL) {
                int t = strcmp(k, "type") == 0 && cJSON_IsString(p) && cJSON_IsString(q);
                const cJSON *take = cJSON_Compare(p, q, 1) ? p : NULL;
                if (t && !strcmp(p->valuestring, "integer") && !strcmp(q->valuestring, "number"))
                    take = p;
                if (t && !strcmp(p->valuestring, "number") && !strcmp(q->valuestring, "integer"))
                    take = q;
                int dup = 0;
                for (const cJSON *o = out->child; o && take && !dup; o = o->next)
                    dup = cJSON_Compare(o, take, 1);
                if (take && !dup) cJSON_AddItemToArray(out, cJSON_Duplicate(take, 1));
            }
        return out;
    }
    return NULL;
}

/* Keywords of a beside b's, for allOf and for siblings of anyOf: properties and
 * additionalProperties as merge_props says, required combines, anything else must agree.
 * Returns a new schema owned by c, or NULL. */
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
        if (!is_validity(b, k->string)) continue;
        if (strncmp(k->string, "unevaluated", 11) == 0 && !cJSON_IsTrue(k))
            return serr(c, "%s", "unevaluatedProperties/unevaluatedItems in an allOf or $ref "
                                 "subschema is not supported"), NULL;
        if (strcmp(k->string, "properties") == 0 ||
            strcmp(k->string, "additionalProperties") == 0) {
            if (!cJSON_IsObject(k) && !cJSON_IsBool(k))
                return serr(c, "'%s' must be an object", k->string), NULL;
            continue;
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(m, k->string);
        if (!have) {
            cJSON_AddItemToObject(m, k->string, cJSON_Duplicate(k, 1));
        } else if (strcmp(k->string, "required") == 0 && cJSON_IsArray(k) && cJSON_IsArray(have)) {
            for (const cJSON *p = k->child; p; p = p->next) {
                int dup = 0;
                for (const cJSON *q = have->child; q; q = q->next) dup |= cJSON_Compare(p, q, 1);
                if (!dup) cJSON_AddItemToArray(have, cJSON_Duplicate(p, 1));
            }
        } else if (!cJSON_Compare(k, have, 1)) {
            cJSON *both = merge_values(k->string, have, k);
            if (!both)
                return serr(c,
                            "allOf: the subschemas disagree on '%s' (only compatible keywords can "
                            "be "
                            "combined)",
                            k->string),
                       NULL;
            if (cJSON_IsArray(both) && !both->child) {
                cJSON_Delete(both);
                return serr(c, "unsatisfiable schema: allOf: no value meets both '%s'", k->string),
                       NULL;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, k->string, both);
        }
    }
    merge_props(m, a, b);
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
        if (is_validity(s, k->string)) return 1;
    return 0;
}

/* ---- numbers ---- */

static void num_range(const cJSON *s, double *lo, int *lo_x, double *hi, int *hi_x);

/* integer or number with minimum / maximum (exclusive ones too, draft 4's booleans
 * included): schema_num_range's exact language of the range. */
static int gen_num_range(struct sc *c, const cJSON *s, int integer, struct sbuf *b) {
    static const char *const keys[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, keys[i]);
        if (v && !cJSON_IsNumber(v) && !(i >= 2 && cJSON_IsBool(v)))
            return serr(c, "'%s' must be a number", keys[i]);
    }
    double lo, hi;
    int lo_x, hi_x;
    num_range(s, &lo, &lo_x, &hi, &hi_x);
    char e[ERR_LEN];
    if (schema_num_range(b, lo, lo_x, hi, hi_x, integer, e) < 0)
        return err_set(c->err, "JSON Schema: %s", e);
    return 0;
}

/* ---- strings ---- */

static int read_count(struct sc *c, const cJSON *s, const char *key, long *out);

static void gen_key_not_in(struct sc *c, const char *const *names, int n, char *nm);
#define NOT_STRINGS "$tpd-not-strings" /* lower_not's strings left out (an array) */

static int gen_string(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(s, NOT_STRINGS);
    if (cJSON_IsArray(ns)) { /* beside type string only (lower_not) */
        int n = 0;
        const char **names = xmalloc(sizeof *names * ((size_t)cJSON_GetArraySize(ns) + 1));
        for (const cJSON *x = ns->child; x; x = x->next)
            if (cJSON_IsString(x)) names[n++] = x->valuestring;
        char nm[RN];
        gen_key_not_in(c, names, n, nm);
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
    if (fmt && !cJSON_IsString(fmt)) return serr(c, "%s", "'format' must be a string");
    if (fmt) fg = schema_format(fmt->valuestring, &fmin, &fmax); /* NULL: unknown, an annotation */
    if (fg && pat) return serr(c, "%s", "combining format and pattern is not supported");
    if (fg && (mn || mx)) { /* the lengths must hold for every string of the format */
        long lo = 0, hi = -1;
        if (read_count(c, s, "minLength", &lo) < 0) return -1;
        if (mx && cJSON_IsNumber(mx)) hi = mx->valuedouble > 1e9 ? -1 : (long)mx->valuedouble;
        if (fmin < lo || (hi >= 0 && (fmax < 0 || fmax > hi)))
            return serr(
                c,
                "format '%s' with a minLength/maxLength it does not always meet is not supported",
                fmt->valuestring);
    }
    if (pat && (mn || mx)) { /* one-character atoms only: the lengths bound their counts */
        long lo = 0, hi = -1;
        if (read_count(c, s, "minLength", &lo) < 0) return -1;
        if (mx && (!cJSON_IsNumber(mx) || mx->valuedouble < 0))
            return serr(c, "%s", "'maxLength' must be a number");
        if (mx) hi = mx->valuedouble > 1e9 ? -1 : (long)mx->valuedouble;
        if (!cJSON_IsString(pat)) return serr(c, "%s", "'pattern' must be a string");
        char e[ERR_LEN];
        struct sbuf t = {0};
        int k = regex_to_gbnf_lengths(pat->valuestring, strlen(pat->valuestring), lo, hi, &t, e);
        if (k > 0) sbuf_addf(b, "\"\\\"\" %s \"\\\"\"", t.p);
        sbuf_free(&t);
        if (k < 0) return err_set(c->err, "JSON Schema: pattern: %s", e);
        if (k > 0) return 0;
        return serr(c, "%s",
                    "combining pattern and minLength/maxLength is supported for patterns of single "
                    "characters with counts only");
    }
    if (fg) {
        sbuf_addf(b, "\"\\\"\" %s \"\\\"\"", fg);
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
        sbuf_adds(b, " \"\\\"\"");
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
        hi = mx->valuedouble > 1e6 ? -1
                                   : (long)mx->valuedouble; /* beyond 10^6: no practical bound */
    }
    if (hi >= 0 && hi < lo) return serr(c, "%s", "unsatisfiable schema: minLength is above maxLength");
    if (hi < 0) {
        sbuf_addf(b, "\"\\\"\" %s-char{%ld,} \"\\\"\"", c->j, lo);
    } else if (hi <= GRAMMAR_MAX_REPEAT) {
        sbuf_addf(b, "\"\\\"\" %s-char{%ld,%ld} \"\\\"\"", c->j, lo, hi);
    } else { /* L = 1000 a + r characters: a = 0 (L >= lo), 0 < a < q, or a = q (r <= hi % 1000) */
        long q = hi / 1000, rest = hi % 1000;
        char k[RN];
        new_rule(c, k);
        sbuf_addf(c->out, "%s ::= %s-char{1000}\n", k, c->j);
        sbuf_addf(b, "\"\\\"\" (%s-char{%ld,999}", c->j, lo);
        if (q >= 2) sbuf_addf(b, " | %s (%s){0,%ld} %s-char{0,999}", k, k, q - 2, c->j);
        sbuf_addf(b, " | (%s){%ld} %s-char{0,%ld}) \"\\\"\"", k, q, c->j, rest);
    }
    return 0;
}

/* ---- objects ---- */

/* A code point inside a GBNF character class. */
static void class_cp(struct sbuf *b, uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        sbuf_addf(b, "%c", cp);
    else if (cp < 0x80)
        sbuf_addf(b, "\\x%02X", cp);
    else if (cp <= 0xFFFF)
        sbuf_addf(b, "\\u%04X", cp);
    else
        sbuf_addf(b, "\\U%08X", cp);
}

/* The one-letter JSON escape of cp ('"' -> '"', '\n' -> 'n'), or 0. */
static char short_escape(uint32_t cp) {
    static const char from[] = "\"\\/\b\f\n\r\t", to[] = "\"\\/bfnrt";
    for (int i = 0; from[i]; i++)
        if ((uint32_t)(uint8_t)from[i] == cp) return to[i];
    return 0;
}

static int raw_ok(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F; }

/* The ways a key's character cp may be written: raw and/or its short escape. */
static void put_key_char(struct sbuf *b, uint32_t cp) {
    char e = short_escape(cp), esc[3] = {'\\', e, 0};
    uint8_t u[4];
    size_t n = utf8_encode(cp, u);
    sbuf_adds(b, "(");
    if (raw_ok(cp)) gbnf_put_literal(b, (const char *)u, n);
    if (e) {
        if (raw_ok(cp)) sbuf_adds(b, " | ");
        gbnf_put_literal(b, esc, 2);
    }
    sbuf_adds(b, ")");
}

struct knode {
    uint32_t cp;     /* the character leading here */
    int first, next; /* first child, next sibling (-1: none) */
    int is_name;
};

/* The rule nm: a JSON string (quotes included, no whitespace after) whose decoded value is
 * none of names[0..n), as in a trie of the names: at each node the string may end (unless
 * the node ends a name), take a child's character, or take any other character and then
 * anything. Keys written this way use raw characters and the short escapes only (no \\u):
 * a subset of the keys JSON allows, so that each decoded character has few spellings. */
static void gen_key_not_in(struct sc *c, const char *const *names, int n, char *nm) {
    int cap = 16, used = 1;
    struct knode *t = xmalloc(sizeof *t * (size_t)cap);
    t[0] = (struct knode){0, -1, -1, 0};
    for (int i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)names[i];
        size_t len = strlen(names[i]), at = 0;
        int cur = 0;
        while (at < len) {
            size_t l = utf8_valid_len(p + at, len - at);
            uint32_t cp = l ? utf8_decode(p + at, l) : p[at];
            at += l ? l : 1;
            int k = t[cur].first;
            while (k >= 0 && t[k].cp != cp) k = t[k].next;
            if (k < 0) {
                if (used == cap) t = xrealloc(t, sizeof *t * (size_t)(cap *= 2));
                k = used++;
                t[k] = (struct knode){cp, -1, t[cur].first, 0};
                t[cur].first = k;
            }
            cur = k;
        }
        t[cur].is_name = 1;
    }
    char base[RN];
    new_rule(c, base);
    /* any key character (no \\u escapes), then the closing quote */
    sbuf_addf(c->out,
              "%s-any ::= ([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt])* \"\\\"\"\n", base);
    for (int k = 0; k < used; k++) {
        struct sbuf r = {0}, cls = {0}, esc = {0};
        if (!t[k].is_name) sbuf_adds(&r, "\"\\\"\" | ");
        for (int ch = t[k].first; ch >= 0; ch = t[ch].next) {
            put_key_char(&r, t[ch].cp);
            sbuf_addf(&r, " %s-%d | ", base, ch);
            class_cp(&cls, t[ch].cp);
        }
        /* any other character: raw ones outside the children, short escapes of others */
        sbuf_addf(&r, "([^\"\\\\\\x7F\\x00-\\x1F%s]", cls.p ? cls.p : "");
        static const char letters[] = "\"\\/bfnrt", dec[] = "\"\\/\b\f\n\r\t";
        for (int i = 0; letters[i]; i++) {
            int child = 0;
            for (int ch = t[k].first; ch >= 0; ch = t[ch].next)
                child |= t[ch].cp == (uint8_t)dec[i];
            if (child) continue;
            if (letters[i] == '"' || letters[i] == '\\') sbuf_adds(&esc, "\\");
            sbuf_add(&esc, &letters[i], 1);
        }
        if (esc.len) sbuf_addf(&r, " | \"\\\\\" [%s]", esc.p);
        sbuf_addf(&r, ") %s-any", base);
        char rn[RN + 16];
        snprintf(rn, sizeof rn, "%s-%d", base, k);
        emit(c, rn, r.p);
        sbuf_free(&r);
        sbuf_free(&cls);
        sbuf_free(&esc);
    }
    free(t);
    snprintf(nm, RN, "%.100s-key", base);
    sbuf_addf(c->out, "%s ::= \"\\\"\" %s-0\n", nm, base);
}

/* ---- object keywords lowered to properties / required / additionalProperties ----
 * patternProperties, propertyNames, dependentRequired, dependentSchemas, dependencies,
 * minProperties and maxProperties become a narrower schema in the keywords gen_object
 * writes, so that every object it writes satisfies them (a subset of what they allow):
 * pattern schemas join the declared properties whose names match (PCRE2, searched as JSON
 * Schema does); with patternProperties, propertyNames or maxProperties no extra keys are
 * written; a property with dependencies makes them required (or, where they cannot be
 * written, is itself left out); a dependentSchemas property is left out unless required
 * (then its schema joins); minProperties makes optional properties required in schema
 * order; maxProperties leaves optional ones out from the end. */

static int name_matches(struct sc *c, const char *pattern, const char *name) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) return serr(c, "patternProperties: the pattern '%s' does not compile", pattern);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc < -1) return serr(c, "patternProperties: matching '%s' failed", pattern);
    return rc >= 0;
}

static int is_required(const cJSON *m, const char *name) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "required");
    for (const cJSON *x = cJSON_IsArray(r) ? r->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && strcmp(x->valuestring, name) == 0) return 1;
    return 0;
}

static void add_required(cJSON *m, const char *name) {
    if (is_required(m, name)) return;
    cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "required");
    if (!cJSON_IsArray(r)) {
        cJSON_DeleteItemFromObjectCaseSensitive(m, "required");
        r = cJSON_AddArrayToObject(m, "required");
    }
    cJSON_AddItemToArray(r, cJSON_CreateString(name));
}

static cJSON *props_of(cJSON *m) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
    return cJSON_IsObject(p) ? p : cJSON_AddObjectToObject(m, "properties");
}

static int extras_allowed(const cJSON *m) {
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    return addl ? !cJSON_IsFalse(addl) : !cJSON_GetObjectItemCaseSensitive(m, "properties");
}

/* 1 when gen_object may write name (declared and not false, or as an extra key) */
static int writable(const cJSON *m, const char *name) {
    const cJSON *p = prop_schema(m, name);
    return p ? !cJSON_IsFalse(p) : extras_allowed(m);
}

static int forbid(struct sc *c, cJSON *m, const char *name, const char *why) {
    if (is_required(m, name))
        return err_set(
            c->err, "JSON Schema: unsatisfiable schema: required property '%s' is ruled out by %s",
            name, why);
    cJSON *p = props_of(m), *x = cJSON_GetObjectItemCaseSensitive(p, name);
    if (x)
        cJSON_ReplaceItemInObjectCaseSensitive(p, name, cJSON_CreateFalse());
    else
        cJSON_AddFalseToObject(p, name);
    return 0;
}

/* Declares every required name (its schema: the pattern schemas it matches, else
 * additionalProperties) and writes no other key. */
static int close_extras(struct sc *c, cJSON *m) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(m, "patternProperties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    cJSON *p = props_of(m);
    for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(p, r->valuestring)) continue;
        int matched = 0;
        for (const cJSON *x = cJSON_IsObject(pp) ? pp->child : NULL; x && !matched; x = x->next) {
            int k = name_matches(c, x->string, r->valuestring);
            if (k < 0) return -1;
            matched = k;
        }
        if (!matched && cJSON_IsFalse(addl))
            return err_set(
                c->err,
                "JSON Schema: unsatisfiable schema: required property '%s' is not allowed by "
                "additionalProperties",
                r->valuestring);
        cJSON_AddItemToObject(p, r->valuestring,
                              !matched && addl ? cJSON_Duplicate(addl, 1) : cJSON_CreateTrue());
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
    cJSON_AddFalseToObject(m, "additionalProperties");
    return 0;
}

/* 1 when the string name satisfies schema ps, 0 when not, -1 (err) when tpd cannot tell. */
static int name_valid(struct sc *c, const cJSON *ps, const char *name) {
    if (!(ps = flat(c, ps, 0))) return -1;
    if (cJSON_IsBool(ps)) return cJSON_IsTrue(ps);
    static const char *const known[] = {"type",      "enum",    "const", "minLength",
                                        "maxLength", "pattern", NULL};
    for (const cJSON *k = ps->child; k; k = k->next)
        if (is_validity(ps, k->string) && !in_list(known, k->string))
            return serr(c, "propertyNames: '%s' is not supported there", k->string);
    cJSON *v = cJSON_CreateString(name);
    int ok = might_accept(c, ps, v, 0); /* exact for these keywords but pattern */
    cJSON_Delete(v);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(ps, "pattern");
    if (ok && cJSON_IsString(pat)) ok = name_matches(c, pat->valuestring, name);
    return ok;
}

static const cJSON *lower_object(struct sc *c, const cJSON *s) {
    static const char *const kws[] = {
        "dependentRequired", "dependentSchemas",  "dependencies",  "minProperties",
        "maxProperties",     "patternProperties", "propertyNames", NULL};
    int any = 0;
    for (int i = 0; kws[i]; i++) any |= cJSON_GetObjectItemCaseSensitive(s, kws[i]) != NULL;
    if (!any) return s;
    static const char *const none[] = {NULL};
    cJSON *m = without(c, s, none);
    /* dependentSchemas (and schema-valued dependencies): joined where required, else left out */
    for (int round = 0; round < 2; round++) {
        const cJSON *ds =
            cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies" : "dependentSchemas");
        for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next) {
            if (cJSON_IsArray(d) || cJSON_IsTrue(d)) continue;
            if (is_required(m, d->string)) {
                static const char *const drop[] = {"dependentSchemas", NULL};
                cJSON *x = merge(c, without(c, m, drop), d);
                if (!x) return NULL;
                m = x;
            } else if (writable(m, d->string) && forbid(c, m, d->string, "dependentSchemas") < 0) {
                return NULL;
            }
        }
    }
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(m, "patternProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(m, "propertyNames");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(m, "maxProperties");
    if (pp && !cJSON_IsObject(pp))
        return serr(c, "%s", "'patternProperties' must be an object"), NULL;
    if ((pp || pn || mx) && close_extras(c, m) < 0) return NULL;
    cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
    for (cJSON *x = cJSON_IsObject(p) ? p->child : NULL; x && pp;
         x = x->next) /* pattern schemas join */
        for (const cJSON *q = pp->child; q; q = q->next) {
            int k = name_matches(c, q->string, x->string);
            if (k < 0) return NULL;
            if (k && !cJSON_IsFalse(x)) {
                cJSON *both = all_of2(x, q);
                cJSON_ReplaceItemInObjectCaseSensitive(p, x->string, both);
                x = both;
            }
        }
    for (cJSON *x = cJSON_IsObject(p) && pn ? p->child : NULL, *nx; x; x = nx) {
        nx = x->next; /* forbid replaces x in place */
        int k = cJSON_IsFalse(x) ? 1 : name_valid(c, pn, x->string);
        if (k < 0 || (k == 0 && forbid(c, m, x->string, "propertyNames") < 0)) return NULL;
    }
    /* dependencies on names: made required, or the property left out; then minProperties */
    for (int pass = 0; pass < 2; pass++) {
        for (int changed = 1, rounds = 0; changed && rounds < 1000; rounds++) {
            changed = 0;
            for (int round = 0; round < 2; round++) {
                const cJSON *dr = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                            : "dependentRequired");
                for (const cJSON *d = cJSON_IsObject(dr) ? dr->child : NULL; d; d = d->next) {
                    if (!cJSON_IsArray(d) || !writable(m, d->string)) continue;
                    int ok = 1;
                    for (const cJSON *n = d->child; n; n = n->next)
                        ok &= cJSON_IsString(n) && writable(m, n->valuestring);
                    if (!ok) {
                        if (forbid(c, m, d->string, "dependentRequired") < 0) return NULL;
                        changed = 1;
                        continue;
                    }
                    for (const cJSON *n = d->child; n; n = n->next)
                        if (!is_required(m, n->valuestring))
                            add_required(m, n->valuestring), changed = 1;
                }
            }
        }
        const cJSON *mn = cJSON_GetObjectItemCaseSensitive(m, "minProperties");
        if (pass || !mn) break;
        int have = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "required"));
        p = cJSON_GetObjectItemCaseSensitive(m, "properties");
        for (const cJSON *x = cJSON_IsObject(p) ? p->child : NULL; x && have < mn->valuedouble;
             x = x->next)
            if (!cJSON_IsFalse(x) && !is_required(m, x->string)) add_required(m, x->string), have++;
        if (have < mn->valuedouble)
            return serr(c, "%s",
                        "minProperties above the properties tpd can write (it writes no extra keys "
                        "to reach it)"),
                   NULL;
    }
    if (mx) {
        int req = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "required")), n = 0;
        p = cJSON_GetObjectItemCaseSensitive(m, "properties");
        if (req > mx->valuedouble)
            return serr(c, "%s",
                        "unsatisfiable schema: more required properties than "
                        "maxProperties"),
                   NULL;
        for (const cJSON *x = p->child; x; x = x->next) n += !cJSON_IsFalse(x);
        for (int k = cJSON_GetArraySize(p) - 1; k >= 0 && n > mx->valuedouble;
             k--) { /* from the end */
            cJSON *x = cJSON_GetArrayItem(p, k);
            if (!cJSON_IsFalse(x) && !is_required(m, x->string)) {
                cJSON_ReplaceItemInObjectCaseSensitive(p, x->string, cJSON_CreateFalse());
                n--;
            }
        }
    }
    static const char *const drop[] = {
        "dependentRequired", "dependentSchemas",  "dependencies",  "minProperties",
        "maxProperties",     "patternProperties", "propertyNames", NULL};
    return without(c, m, drop);
}

static int gen_object(struct sc *c, const cJSON *s, struct sbuf *b) {
    if (!(s = lower_object(c, s))) return -1;
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
    char extra_val[RN] = "", extra_key[RN] = "";
    if (extra) {
        if (addl && cJSON_IsObject(addl)) {
            if (gen(c, addl, extra_val) < 0) goto out;
        } else {
            snprintf(extra_val, RN, "%s", c->j);
        }
        /* an extra key is never a declared name (false ones included), so no property
         * escapes its own schema nor comes out twice */
        int nn = 0;
        const char **names =
            xmalloc(sizeof *names * ((size_t)n + (size_t)cJSON_GetArraySize(props) + 1));
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next) names[nn++] = p->string;
        for (int k = 0; k < n; k++)
            if (!props || !cJSON_GetObjectItemCaseSensitive(props, pl[k].key))
                names[nn++] = pl[k].key;
        if (nn)
            gen_key_not_in(c, names, nn, extra_key);
        else
            snprintf(extra_key, RN, "%s-string", c->j);
        free(names);
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
                    sbuf_addf(&r,
                              "(%s%s %s-ws \":\" %s-ws %s %s-ws (\",\" %s-ws %s %s-ws \":\" %s-ws "
                              "%s %s-ws)*)?",
                              sep, extra_key, c->j, c->j, extra_val, c->j, c->j, extra_key, c->j,
                              c->j, extra_val, c->j);
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
                sbuf_addf(&r, " %s-ws \":\" %s-ws %s %s-ws %s-%d-0", c->j, c->j, vals[k], c->j,
                          base, k + 1);
                if (!pl[k].required) sbuf_addf(&r, " | %s-%d-%d", base, k + 1, f);
            }
            emit(c, nm, r.p);
            sbuf_free(&r);
        }
    free(vals);
    sbuf_addf(b, "\"{\" %s-ws %s-0-1 \"}\"", c->j, base);
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

static int gen_unique(struct sc *c, const cJSON *items, long lo, long hi, struct sbuf *b);

static int gen_contains(struct sc *c, const cJSON *s, const cJSON *items, struct sbuf *b);

static int gen_array(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (cJSON_GetObjectItemCaseSensitive(s, "contains")) return gen_contains(c, s, items, b);
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    if (cJSON_IsArray(items)) { /* draft 4 tuples */
        if (prefix) return serr(c, "%s", "'items' as an array together with 'prefixItems'");
        prefix = items;
        items = cJSON_GetObjectItemCaseSensitive(s, "additionalItems"); /* the rest (NULL: any) */
    }
    if (prefix && !cJSON_IsArray(prefix)) return serr(c, "%s", "'prefixItems' must be an array");
    long lo = 0, hi = -1;
    if (read_count(c, s, "minItems", &lo) < 0 || read_count(c, s, "maxItems", &hi) < 0) return -1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems"))) {
        if (prefix) return serr(c, "%s", "uniqueItems beside prefixItems is not supported");
        return gen_unique(c, items, lo, hi, b);
    }
    int m = prefix ? cJSON_GetArraySize(prefix) : 0;
    int more = !(items && cJSON_IsFalse(items));
    if (!more && (hi < 0 || hi > m)) hi = m;
    if (hi >= 0 && hi < lo) return serr(c, "%s", "unsatisfiable schema: minItems is above maxItems (or the items allowed)");
    if (m > GRAMMAR_MAX_REPEAT) return serr(c, "%s", "more than 1000 prefixItems");
    char item0[RN], item[2 * RN];
    if (!more || !items || cJSON_IsTrue(items))
        snprintf(item0, RN, "%s", c->j);
    else if (gen(c, items, item0) < 0)
        return -1;
    snprintf(item, sizeof item, "%s %s-ws", item0, c->j); /* whitespace after each item */
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
                snprintf(el, RN, "%s", item0);
            }
            if (j >= lo) sbuf_adds(&r, "\"\" | ");
            if (j > 0) sbuf_addf(&r, "\",\" %s-ws ", c->j);
            sbuf_addf(&r, "%s %s-ws %s-%d", el, c->j, base, j + 1);
        }
        emit(c, nm, r.p);
        sbuf_free(&r);
    }
    sbuf_addf(b, "\"[\" %s-ws %s-0 \"]\"", c->j, base);
    return 0;
}

/* ---- oneOf: exclusive branches ----
 * A value of oneOf must match exactly one branch. The grammar produces branch i's values
 * (gen, a subset of what i accepts) and none may be accepted by another branch j (acc: what
 * j accepts, over-approximated where unsure). That is decided from types, const/enum values,
 * numeric, length and item-count ranges, and for objects a property one branch always writes
 * and the other forbids or constrains disjointly (a discriminator). Where a branch i may
 * write a property that j requires, i is narrowed to never write it ("sharpened"), which
 * keeps its values valid for i and rejected by j. Anything else is refused. */

/* JSON types as bits (T_INT: integral numbers, T_FRAC: others) */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_INT = 32, T_FRAC = 64 };
#define T_ANY 127

static int value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJ;
    if (cJSON_IsArray(v)) return T_ARR;
    if (cJSON_IsString(v)) return T_STR;
    return v->valuedouble == floor(v->valuedouble) ? T_INT : T_FRAC;
}

static int type_bits(const cJSON *t) {
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

static const char *infer_type(const cJSON *s);

/* if/then/else as the subset "if and then": s with if and then merged in. NULL with err
 * (else without then cannot be written without a "not"). */
static const cJSON *lower_if(struct sc *c, const cJSON *s) {
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(s, "if"),
                *t = cJSON_GetObjectItemCaseSensitive(s, "then");
    if (!t) return serr(c, "%s", "'if' with 'else' and no 'then' is not supported"), NULL;
    static const char *const drop[] = {"if", "then", "else", NULL};
    cJSON *m = merge(c, without(c, s, drop), i);
    return m ? merge(c, m, t) : NULL;
}

/* s with its $ref chain followed and allOf (and $ref beside keywords) merged at its top;
 * gen: as the grammar writes it (if/then and the object keywords lowered: narrower),
 * else as it accepts (if/then/else left for the callers to over-approximate). NULL with err
 * on an error the generation would report too. */
static const cJSON *flat(struct sc *c, const cJSON *s, int gen) {
    for (int hops = 0; cJSON_IsObject(s); hops++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
        if (hops > 64) return serr(c, "%s", "$ref: a chain of references without end"), NULL;
        if (only_ref(s) && cJSON_IsString(ref)) {
            s = resolve_pointer(c, ref->valuestring);
            if (!s) return serr(c, "$ref '%s' does not resolve", ref->valuestring), NULL;
        } else if (cJSON_IsString(ref)) {
            static const char *const drop[] = {"$ref", NULL};
            cJSON *r = cJSON_CreateObject();
            cJSON_AddItemToArray(c->owned, r);
            cJSON_AddStringToObject(r, "$ref", ref->valuestring);
            s = merge(c, without(c, s, drop), r);
        } else if (gen && is_validity(s, "if") && cJSON_GetObjectItemCaseSensitive(s, "if")) {
            s = lower_if(c, s);
        } else if (cJSON_IsArray(all)) {
            static const char *const drop[] = {"allOf", NULL};
            cJSON *m = without(c, s, drop);
            for (const cJSON *x = all->child; x && m; x = x->next) m = merge(c, m, x);
            s = m;
        } else {
            break;
        }
        if (!s) return NULL;
    }
    return gen && cJSON_IsObject(s) ? lower_object(c, s) : s;
}

static const cJSON *branches_of(const cJSON *s) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    return b ? b : cJSON_GetObjectItemCaseSensitive(s, "oneOf");
}

/* The types the grammar of s produces (s flat). */
static int gen_types(struct sc *c, const cJSON *s, int depth) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? T_ANY : 0;
    if (!cJSON_IsObject(s) || depth > 16) return T_ANY;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *br = branches_of(s), *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int m = 0;
    if (br) {
        for (const cJSON *x = br->child; x; x = x->next) {
            const cJSON *f = flat(c, x, 1);
            m |= f ? gen_types(c, f, depth + 1) : T_ANY;
        }
        return m & type_bits(t);
    }
    if (v) return value_type(v);
    if (cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next) m |= value_type(x);
        return m;
    }
    if (t) return type_bits(t);
    const char *it = infer_type(s);
    if (!it) return T_ANY;
    cJSON *tmp = cJSON_CreateString(it);
    m = type_bits(tmp);
    cJSON_Delete(tmp);
    return m;
}

/* The types s accepts, or more (s flat). */
static int acc_types(struct sc *c, const cJSON *s, int depth) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? T_ANY : 0;
    if (!cJSON_IsObject(s) || depth > 16) return T_ANY;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *br = branches_of(s);
    int m = type_bits(cJSON_GetObjectItemCaseSensitive(s, "type"));
    if (v) m &= value_type(v);
    if (cJSON_IsArray(e)) {
        int u = 0;
        for (const cJSON *x = e->child; x; x = x->next) u |= value_type(x);
        m &= u;
    }
    if (br) {
        int u = 0;
        for (const cJSON *x = br->child; x; x = x->next) {
            const cJSON *f = flat(c, x, 0);
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

/* The numbers s admits, as [lo, hi] with exclusive ends flagged (draft-4 boolean
 * exclusiveMinimum/Maximum too). */
static void num_range(const cJSON *s, double *lo, int *lo_x, double *hi, int *hi_x) {
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

/* 0 when s surely rejects the value v, else 1 (unsure counts as accepting). */
static int might_accept(struct sc *c, const cJSON *s, const cJSON *v, int depth) {
    s = flat(c, s, 0);
    if (!s || depth > 16) return 1;
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s);
    if (!cJSON_IsObject(s)) return 1;
    int vt = value_type(v);
    if (!(acc_types(c, s, depth) & vt)) return 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (k && !cJSON_Compare(k, v, 1)) return 0;
    if (cJSON_IsArray(e)) {
        int in = 0;
        for (const cJSON *x = e->child; x && !in; x = x->next) in = cJSON_Compare(x, v, 1);
        if (!in) return 0;
    }
    const cJSON *br = branches_of(s);
    if (br) {
        int any = 0;
        for (const cJSON *x = br->child; x && !any; x = x->next)
            any = might_accept(c, x, v, depth + 1);
        if (!any) return 0;
    }
    if (vt == T_STR) {
        double lo, hi, n = (double)cp_len(v->valuestring);
        count_range(s, "minLength", "maxLength", &lo, &hi);
        if (n < lo || (hi >= 0 && n > hi)) return 0;
    } else if (vt & (T_INT | T_FRAC)) {
        double lo, hi, x = v->valuedouble;
        int lx, hx;
        num_range(s, &lo, &lx, &hi, &hx);
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
                !might_accept(c, ps, p, depth + 1))
                return 0;
        }
    }
    return 1;
}

static int disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth);

static const cJSON *prop_schema(const cJSON *s, const char *name) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "properties");
    return p ? cJSON_GetObjectItemCaseSensitive(p, name) : NULL;
}

/* 1 when the objects a writes never satisfy b (both flat). */
static int obj_disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth) {
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    const cJSON *aa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    int extras_a = aa ? !cJSON_IsFalse(aa) : !cJSON_GetObjectItemCaseSensitive(a, "properties");
    int pattern_b = cJSON_GetObjectItemCaseSensitive(b, "patternProperties") != NULL;
    for (const cJSON *r = cJSON_IsArray(ra) ? ra->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) continue;
        const cJSON *bp = prop_schema(b, r->valuestring), *ap = prop_schema(a, r->valuestring);
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
        const cJSON *ap = prop_schema(a, r->valuestring);
        if (ap ? cJSON_IsFalse(ap) : !extras_a) return 1;
    }
    return 0;
}

/* 1: no value the grammar of a produces is accepted by b; 0: unsure; -1: an error (err). */
static int disjoint(struct sc *c, const cJSON *a, const cJSON *b, int depth) {
    if (!(a = flat(c, a, 1)) || !(b = flat(c, b, 0))) return -1;
    if (depth > 16) return 0;
    int common = gen_types(c, a, depth) & acc_types(c, b, depth);
    if (!common) return 1;
    if (cJSON_IsBool(a) || cJSON_IsBool(b)) return 0;
    const cJSON *ka = cJSON_GetObjectItemCaseSensitive(a, "const"),
                *ea = cJSON_GetObjectItemCaseSensitive(a, "enum");
    const cJSON *bra = branches_of(a), *brb = branches_of(b);
    if (brb) { /* b accepts no more than the union of its branches */
        for (const cJSON *x = brb->child; x; x = x->next) {
            int d = disjoint(c, a, x, depth + 1);
            if (d != 1) return d;
        }
        return 1;
    }
    if (bra) {
        static const char *const drop[] = {"anyOf", "oneOf", NULL};
        const cJSON *sib = without(c, a, drop);
        for (const cJSON *x = bra->child; x; x = x->next) {
            const cJSON *m = has_constraints(sib) ? merge(c, sib, x) : x;
            if (!m) return -1;
            int d = disjoint(c, m, b, depth + 1);
            if (d != 1) return d;
        }
        return 1;
    }
    if (ka || cJSON_IsArray(ea)) { /* a writes finitely many values: test each */
        for (const cJSON *x = ka ? ka : ea->child; x; x = ka ? NULL : x->next)
            if (might_accept(c, b, x, depth + 1)) return 0;
        return 1;
    }
    const cJSON *kb = cJSON_GetObjectItemCaseSensitive(b, "const"),
                *eb = cJSON_GetObjectItemCaseSensitive(b, "enum");
    for (int bit = 1; bit < T_ANY; bit <<= 1) {
        if (!(common & bit)) continue;
        if (bit == T_INT || bit == T_FRAC) {
            double la, ha, lb, hb;
            int lax, hax, lbx, hbx;
            num_range(a, &la, &lax, &ha, &hax);
            num_range(b, &lb, &lbx, &hb, &hbx);
            if (kb || cJSON_IsArray(eb)) {
                for (const cJSON *x = kb ? kb : eb->child; x; x = kb ? NULL : x->next)
                    if (cJSON_IsNumber(x) && x->valuedouble >= la && x->valuedouble <= ha) return 0;
            } else if (!(ha < lb || (ha == lb && (hax || lbx)) || hb < la ||
                         (hb == la && (hbx || lax)))) {
                return 0;
            }
        } else if (bit == T_STR) {
            double la, ha, lb, hb;
            if (cJSON_GetObjectItemCaseSensitive(a, "format") ||
                cJSON_GetObjectItemCaseSensitive(a, "pattern"))
                return 0;
            count_range(a, "minLength", "maxLength", &la, &ha);
            count_range(b, "minLength", "maxLength", &lb, &hb);
            if (kb || cJSON_IsArray(eb)) {
                for (const cJSON *x = kb ? kb : eb->child; x; x = kb ? NULL : x->next) {
                    double n = cJSON_IsString(x) ? (double)cp_len(x->valuestring) : -1;
                    if (n >= la && (ha < 0 || n <= ha)) return 0;
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

/* Branch a (flat) narrowed so that it never writes a property b requires and a does not;
 * NULL when there is none to narrow by. */
static const cJSON *sharpen(struct sc *c, const cJSON *a, const cJSON *b) {
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required");
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
    if (!cJSON_IsObject(a) || !(gen_types(c, a, 0) & T_OBJ) || branches_of(a)) return NULL;
    for (const cJSON *r = cJSON_IsArray(rb) ? rb->child : NULL; r; r = r->next) {
        int in_ra = 0;
        for (const cJSON *q = cJSON_IsArray(ra) ? ra->child : NULL; q; q = q->next)
            in_ra |= cJSON_Compare(q, r, 1);
        if (in_ra || !cJSON_IsString(r)) continue;
        static const char *const none[] = {NULL};
        cJSON *m = without(c, a, none), *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
        if (!p) p = cJSON_AddObjectToObject(m, "properties");
        if (!cJSON_IsObject(p)) return NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(p, r->valuestring);
        cJSON_AddFalseToObject(p, r->valuestring);
        return m;
    }
    return NULL;
}

/* br[0..n): oneOf's branches (siblings merged in); narrows them where that makes them
 * exclusive (br[i] replaced), or refuses. 0, or -1 with err. */
static int one_of_exclusive(struct sc *c, const cJSON **br, int n) {
    const cJSON **acc = xmalloc(sizeof *acc * (size_t)n);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!(acc[i] = flat(c, br[i], 0))) rc = -1;
    for (int i = 0; i < n && rc == 0; i++)
        for (int j = 0; j < n && rc == 0; j++) {
            if (i == j) continue;
            int d = disjoint(c, br[i], acc[j], 0);
            const cJSON *s = NULL;
            for (int tries = 0; d == 0 && tries < 64 && (s = sharpen(c, flat(c, br[i], 1), acc[j]));
                 tries++) {
                br[i] = s;
                d = disjoint(c, br[i], acc[j], 0);
            }
            if (d < 0)
                rc = -1;
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
static int value_valid(struct sc *c, const cJSON *s, const cJSON *v) {
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
                                        NULL};
    int vt = value_type(v);
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!is_validity(s, k->string) || in_list(known, k->string)) continue;
        int applies = strcmp(k->string, "items") == 0 || strstr(k->string, "Items") ? vt == T_ARR
                      : strstr(k->string, "ropert") || strcmp(k->string, "required") == 0 ||
                              strstr(k->string, "ependen")
                          ? vt == T_OBJ
                          : 1;
        if (applies) return serr(c, "enum/const beside '%s' is not supported", k->string);
    }
    if (vt == T_STR && cJSON_GetObjectItemCaseSensitive(s, "format")) {
        long lo, hi;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "format");
        if (cJSON_IsString(f) && schema_format(f->valuestring, &lo, &hi))
            return serr(c, "enum/const beside format '%s' is not supported", f->valuestring);
    }
    if (!might_accept(c, s, v, 0)) return 0; /* exact for type, const, enum, lengths, bounds */
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    return vt == T_STR && cJSON_IsString(pat) ? name_matches(c, pat->valuestring, v->valuestring)
                                              : 1;
}

/* uniqueItems over items of a finite domain (an enum, a const, boolean, null): the sets of
 * distinct values between minItems and maxItems, each written in the domain's order (one
 * array per set: a subset of the orders allowed). S(i, n): values i.. with n written. */
#define UNIQUE_MAX_VALUES 64
static int gen_unique(struct sc *c, const cJSON *items, long lo, long hi, struct sbuf *b) {
    const cJSON *f = items ? flat(c, items, 1) : NULL;
    if (items && !f) return -1;
    const cJSON *k1 = f ? cJSON_GetObjectItemCaseSensitive(f, "const") : NULL;
    const cJSON *e = f ? cJSON_GetObjectItemCaseSensitive(f, "enum") : NULL;
    cJSON *dom = cJSON_CreateArray();
    cJSON_AddItemToArray(c->owned, dom);
    int t = f ? type_bits(cJSON_GetObjectItemCaseSensitive(f, "type")) : T_ANY;
    if (k1 || cJSON_IsArray(e)) {
        for (const cJSON *x = k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
            int dup = 0, ok;
            for (const cJSON *y = dom->child; y && !dup; y = y->next) dup = cJSON_Compare(x, y, 1);
            if (dup || (ok = value_valid(c, f, x)) == 0) continue;
            if (ok < 0) return -1;
            cJSON_AddItemToArray(dom, cJSON_Duplicate(x, 1));
        }
    } else if (f && !branches_of(f) && (t == T_BOOL || t == T_NULL || t == (T_BOOL | T_NULL))) {
        if (t & T_BOOL)
            cJSON_AddItemToArray(dom, cJSON_CreateTrue()),
                cJSON_AddItemToArray(dom, cJSON_CreateFalse());
        if (t & T_NULL) cJSON_AddItemToArray(dom, cJSON_CreateNull());
    } else {
        return serr(
            c, "%s",
            "uniqueItems is supported over items of an enum, a const, boolean or null only");
    }
    int k = cJSON_GetArraySize(dom);
    if (k > UNIQUE_MAX_VALUES)
        return serr(c, "%s", "uniqueItems over more than 64 values is not supported");
    if (hi < 0 || hi > k) hi = k;
    if (lo > hi)
        return serr(c, "%s",
                    "unsatisfiable schema: minItems above the distinct values uniqueItems allows");
    char base[RN];
    new_rule(c, base);
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
                put_json_literal(&r, cJSON_GetArrayItem(dom, i));
                sbuf_addf(&r, " %s-ws %s-%d-%ld", c->j, base, i + 1, n + 1);
            }
            if (i < k && ex[i + 1][n])
                sbuf_addf(&r, "%s%s-%d-%ld", alts++ ? " | " : "", base, i + 1, n);
            if (alts) {
                char nm[RN + 48];
                snprintf(nm, sizeof nm, "%s-%d-%ld", base, i, n);
                emit(c, nm, r.p);
            }
            sbuf_free(&r);
        }
    sbuf_addf(b, "\"[\" %s-ws %s-0-0 \"]\"", c->j, base);
    return 0;
}

/* ---- not, contains, unevaluatedProperties / unevaluatedItems ----
 * not is lowered into its siblings where the complement is exact: {type}, {enum}/{const},
 * {required} (objects without one of the names; with type "object" beside it non-objects
 * pass too), and anyOf of these (each one applies: not (A or B) = not A and not B).
 * Strings outside an enum are gen_key_not_in's automaton (the internal keyword NOT_STRINGS
 * beside type string, without other string keywords). Anything else is refused. */
/* The types m's grammar may write (its type, else the one its keywords imply). */
static int gen_type_bits(const cJSON *m) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (t || cJSON_GetObjectItemCaseSensitive(m, "enum") ||
        cJSON_GetObjectItemCaseSensitive(m, "const"))
        return type_bits(t);
    const char *it = infer_type(m);
    if (!it) return T_ANY;
    cJSON *tmp = cJSON_CreateString(it);
    int bits = type_bits(tmp);
    cJSON_Delete(tmp);
    return bits;
}

/* m's type set to the types of bits. */
static int set_type_bits(struct sc *c, cJSON *m, int bits, int force) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string"};
    if ((bits & (T_INT | T_FRAC)) == T_FRAC) { /* no fractions only: other types, a subset */
        if (bits == T_FRAC)
            return serr(c, "%s", "not: numbers that are not integers are not supported");
        bits &= ~T_FRAC;
    }
    if (!bits) return serr(c, "%s", "unsatisfiable schema: 'not' rules out every type left");
    if (bits == T_ANY && !cJSON_GetObjectItemCaseSensitive(m, "type") && !force) return 0;
    cJSON *t = cJSON_CreateArray();
    for (int i = 0; i < 5; i++)
        if (bits & (1 << i)) cJSON_AddItemToArray(t, cJSON_CreateString(names[i]));
    if (bits & T_INT)
        cJSON_AddItemToArray(t, cJSON_CreateString(bits & T_FRAC ? "number" : "integer"));
    cJSON_DeleteItemFromObjectCaseSensitive(m, "type");
    cJSON_AddItemToObject(m, "type", t);
    return 0;
}

/* m without the values of v (const/enum values of a not whose types are tbits). */
static int not_values(struct sc *c, cJSON *m, const cJSON *v, int tbits) {
    const cJSON *k1 = cJSON_GetObjectItemCaseSensitive(m, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "enum");
    if (k1 || cJSON_IsArray(e)) { /* a finite set: the values left */
        cJSON *left = cJSON_CreateArray();
        for (const cJSON *x = k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
            int out = 0;
            for (const cJSON *y = cJSON_IsArray(v) ? v->child : v; y && !out;
                 y = cJSON_IsArray(v) ? y->next : NULL)
                out = (value_type(y) & tbits) && cJSON_Compare(x, y, 1);
            if (!out) cJSON_AddItemToArray(left, cJSON_Duplicate(x, 1));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(m, "const");
        cJSON_DeleteItemFromObjectCaseSensitive(m, "enum");
        cJSON_AddItemToObject(m, "enum", left);
        return 0;
    }
    int bits = gen_type_bits(m), bools = 0;
    cJSON *strs = cJSON_CreateArray();
    cJSON_AddItemToArray(c->owned, strs);
    for (const cJSON *y = cJSON_IsArray(v) ? v->child : v; y;
         y = cJSON_IsArray(v) ? y->next : NULL) {
        int t = value_type(y) & tbits & bits;
        if (t == T_NULL) bits &= ~T_NULL;
        else if (t == T_BOOL) bools |= cJSON_IsTrue(y) ? 1 : 2;
        else if (t == T_STR) cJSON_AddItemToArray(strs, cJSON_Duplicate(y, 1));
        else if (t) return serr(c, "%s", "not: excluding numbers, objects or arrays from a type "
                                         "is not supported (only from an enum)");
    }
    if (bools == 3) bits &= ~T_BOOL;
    if (bools && bools != 3) {
        if (bits != T_BOOL)
            return serr(c, "%s", "not: excluding one boolean beside other types is not supported");
        cJSON_AddItemToObject(m, "enum", cJSON_CreateArray());
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(m, "enum"),
                             cJSON_CreateBool(bools == 2));
    }
    if (strs->child) {
        static const char *const kw[] = {"pattern", "format", "minLength", "maxLength", NULL};
        int other = 0;
        for (int i = 0; kw[i]; i++) other |= cJSON_GetObjectItemCaseSensitive(m, kw[i]) != NULL;
        if (other || (bits != T_STR && branches_of(m)))
            return serr(c, "%s", "not: excluding strings is supported beside type string "
                                 "without pattern, format or lengths only");
        cJSON *at = m;
        if (bits != T_STR) { /* the strings and the other types as two disjoint branches */
            cJSON *any = cJSON_AddArrayToObject(m, "anyOf");
            cJSON *rest = cJSON_CreateObject();
            cJSON_AddItemToArray(any, rest);
            if (set_type_bits(c, rest, bits & ~T_STR, 1) < 0) return -1;
            at = cJSON_CreateObject();
            cJSON_AddItemToArray(any, at);
            cJSON_AddStringToObject(at, "type", "string");
        }
        cJSON *have = cJSON_GetObjectItemCaseSensitive(at, NOT_STRINGS);
        if (!have) have = cJSON_AddArrayToObject(at, NOT_STRINGS);
        for (const cJSON *y = strs->child; y; y = y->next)
            cJSON_AddItemToArray(have, cJSON_Duplicate(y, 1));
    }
    return set_type_bits(c, m, bits, 0);
}

/* m's objects never hold all of the names (non-objects ruled out unless objects_only). */
static int not_required(struct sc *c, cJSON *m, const cJSON *names, int objects_only) {
    int bits = gen_type_bits(m);
    if (set_type_bits(c, m, objects_only ? bits : bits & T_OBJ, 1) < 0) return -1;
    if (!(bits & T_OBJ)) return 0;
    const char *pick = NULL;
    int n_pick = 0;
    for (const cJSON *x = names->child; x; x = x->next) {
        if (!cJSON_IsString(x)) return serr(c, "%s", "'required' must list strings");
        if (!writable(m, x->valuestring)) return 0; /* never all there already */
        if (!is_required(m, x->valuestring)) pick = x->valuestring, n_pick++;
    }
    if (!cJSON_GetObjectItemCaseSensitive(m, "properties") &&
        !cJSON_GetObjectItemCaseSensitive(m, "additionalProperties"))
        cJSON_AddTrueToObject(m, "additionalProperties"); /* extra keys stay allowed */
    if (n_pick > 1 && !branches_of(m)) { /* one of them absent: a branch each (exact) */
        cJSON *any = cJSON_AddArrayToObject(m, "anyOf");
        for (const cJSON *x = names->child; x; x = x->next) {
            if (is_required(m, x->valuestring)) continue;
            cJSON *br = cJSON_CreateObject();
            cJSON_AddFalseToObject(cJSON_AddObjectToObject(br, "properties"), x->valuestring);
            cJSON_AddItemToArray(any, br);
        }
        pick = NULL;
    }
    if (!names->child || (!pick && !n_pick)) {
        if (!objects_only)
            return serr(c, "%s", "unsatisfiable schema: 'not' forbids required names");
        return set_type_bits(c, m, bits & ~T_OBJ, 0);
    }
    return pick ? forbid(c, m, pick, "not") : 0;
}

/* m narrowed by not p (p flat, one piece of the not). */
static int not_piece(struct sc *c, cJSON *m, const cJSON *p) {
    if (cJSON_IsFalse(p)) return 0;
    if (cJSON_IsTrue(p) || !has_constraints(p))
        return serr(c, "%s", "unsatisfiable schema: 'not' of a schema that accepts everything");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(p, "const");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(p, "required");
    if (!vals) vals = cJSON_GetObjectItemCaseSensitive(p, "enum");
    int n_kw = 0;
    for (const cJSON *k = p->child; k; k = k->next) n_kw += is_validity(p, k->string);
    int tb = type_bits(t);
    if (t && !tb) return serr(c, "%s", "not: 'type' must name JSON types");
    if (n_kw == 1 && t) return set_type_bits(c, m, gen_type_bits(m) & ~tb, 0);
    if (vals && n_kw == 1 + (t != NULL))
        return not_values(c, m, vals, tb);
    if (cJSON_IsArray(req) && n_kw == 1 + (t != NULL) && (!t || tb == T_OBJ))
        return not_required(c, m, req, t != NULL);
    return serr(c, "%s", "not: only {type}, {enum}, {const}, {required} and anyOf of these are "
                         "supported");
}

static const cJSON *lower_not(struct sc *c, const cJSON *s) {
    static const char *const drop[] = {"not", NULL};
    cJSON *m = without(c, s, drop);
    const cJSON *n = flat(c, cJSON_GetObjectItemCaseSensitive(s, "not"), 0);
    if (!n) return NULL;
    const cJSON *any = cJSON_IsObject(n) ? cJSON_GetObjectItemCaseSensitive(n, "anyOf") : NULL;
    int n_kw = 0;
    for (const cJSON *k = cJSON_IsObject(n) ? n->child : NULL; k; k = k->next)
        n_kw += is_validity(n, k->string);
    if (!cJSON_IsArray(any) || n_kw != 1) return not_piece(c, m, n) < 0 ? NULL : m;
    for (const cJSON *x = any->child; x; x = x->next) {
        const cJSON *p = flat(c, x, 0);
        if (!p || not_piece(c, m, p) < 0) return NULL;
    }
    return m;
}

/* unevaluatedProperties / unevaluatedItems false: additionalProperties false (items false)
 * over what s and the allOf / $ref subschemas it merges declare, exact when no subschema on
 * the way applies conditionally (anyOf, oneOf, if, dependentSchemas) nor has its own
 * unevaluated keyword. true (or {}) changes nothing. */
static int uneval_plain(struct sc *c, const cJSON *s, int top, int depth) {
    static const char *const cond[] = {"anyOf", "oneOf", "if", "dependentSchemas", "dependencies",
                                       NULL};
    if (!cJSON_IsObject(s)) return 0;
    if (depth > 64) return serr(c, "%s", "unevaluatedProperties: subschemas nested too deep");
    for (int i = 0; cond[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, cond[i]))
            return serr(c, "unevaluatedProperties/unevaluatedItems beside '%s' is not supported",
                        cond[i]);
    if (!top && (cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties") ||
                 cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems")))
        return serr(c, "%s", "unevaluatedProperties/unevaluatedItems in an allOf or $ref "
                             "subschema is not supported");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    for (const cJSON *x = cJSON_IsArray(all) ? all->child : NULL; x; x = x->next)
        if (uneval_plain(c, x, 0, depth + 1) < 0) return -1;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (cJSON_IsString(ref)) {
        const cJSON *t = resolve_pointer(c, ref->valuestring);
        if (!t) return serr(c, "$ref '%s' does not resolve", ref->valuestring);
        if (uneval_plain(c, t, 0, depth + 1) < 0) return -1;
    }
    return 0;
}

static const cJSON *lower_unevaluated(struct sc *c, const cJSON *s) {
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    const cJSON *ui = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems");
    static const char *const drop[] = {"unevaluatedProperties", "unevaluatedItems", NULL};
    int closes_p = up && !cJSON_IsTrue(up) && !(cJSON_IsObject(up) && !has_constraints(up));
    int closes_i = ui && !cJSON_IsTrue(ui) && !(cJSON_IsObject(ui) && !has_constraints(ui));
    if ((closes_p && !cJSON_IsFalse(up)) || (closes_i && !cJSON_IsFalse(ui)))
        return serr(c, "%s", "unevaluatedProperties/unevaluatedItems other than true or false "
                             "is not supported"), NULL;
    if ((closes_p || closes_i) && uneval_plain(c, s, 1, 0) < 0) return NULL;
    const cJSON *f = flat(c, without(c, s, drop), 0);
    if (!f || !cJSON_IsObject(f)) return f;
    cJSON *m = without(c, f, drop + 2);
    if (closes_p && !cJSON_GetObjectItemCaseSensitive(m, "additionalProperties"))
        cJSON_AddFalseToObject(m, "additionalProperties");
    if (closes_i && cJSON_GetObjectItemCaseSensitive(m, "contains"))
        return serr(c, "%s", "unevaluatedItems beside contains is not supported"), NULL;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(m, "items");
    if (closes_i && cJSON_IsArray(items) && !cJSON_GetObjectItemCaseSensitive(m, "additionalItems"))
        cJSON_AddFalseToObject(m, "additionalItems");
    else if (closes_i && !items)
        cJSON_AddFalseToObject(m, "items");
    return m;
}

/* contains with minContains / maxContains, as the arrays whose items match contains (C) at
 * least lo times (and at most hi): A* C (A* C){lo-1..hi-1} A*, commas between, where A is
 * items (hi unbounded) or items and not contains (bounded: not must be exact, lower_not). */
static int gen_contains(struct sc *c, const cJSON *s, const cJSON *items, struct sbuf *b) {
    const cJSON *con = cJSON_GetObjectItemCaseSensitive(s, "contains");
    long lo = 1, hi = -1, mn = 0, mx = -1;
    if (read_count(c, s, "minContains", &lo) < 0 || read_count(c, s, "maxContains", &hi) < 0 ||
        read_count(c, s, "minItems", &mn) < 0 || read_count(c, s, "maxItems", &mx) < 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(s, "prefixItems") || cJSON_IsArray(items) ||
        cJSON_IsFalse(items) || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "uniqueItems")) ||
        mx >= 0 || mn > lo)
        return serr(c, "%s", "contains beside prefixItems, items arrays or false, uniqueItems, "
                             "maxItems or a minItems above minContains is not supported");
    if (hi >= 0 && hi < lo) return serr(c, "%s", "unsatisfiable schema: minContains > maxContains");
    int any_item = !items || cJSON_IsTrue(items);
    const cJSON *yes = any_item ? con : merge(c, items, con);
    cJSON *neg = cJSON_CreateObject();
    cJSON_AddItemToArray(c->owned, neg);
    cJSON_AddItemToObject(neg, "not", cJSON_Duplicate(con, 1));
    const cJSON *no = any_item ? neg : merge(c, items, neg);
    char cr[RN], ar[RN];
    if (!yes || !no) return -1;
    if (hi < 0 && any_item) snprintf(ar, RN, "%s", c->j);
    else if (gen(c, hi < 0 ? items : no, ar) < 0) return -1;
    const char *j = c->j;
    struct sbuf r = {0}; /* ar-items and cr-items, at least one cr */
    if (hi != 0) {
        if (gen(c, yes, cr) < 0) return -1;
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
        sbuf_addf(b, "\"[\" %s-ws (%s%s%s %s-ws (\",\" %s-ws %s %s-ws)*)? \"]\"", j,
                  r.p ? r.p : "", r.p ? " | " : "", ar, j, j, ar, j);
    else
        sbuf_addf(b, "\"[\" %s-ws %s \"]\"", j, r.p);
    sbuf_free(&r);
    return 0;
}

/* ---- dispatch ---- */

/* multipleOf an integer k (up to 1000), without bounds: the integers divisible by k, by the
 * remainder automaton over their decimal digits (M_r: the digits so far leave r). Integers
 * only, also for a number (a subset there): a validator checks them exactly. */
static int gen_multiple(struct sc *c, const cJSON *mul, int bounded, struct sbuf *b) {
    if (!cJSON_IsNumber(mul) || mul->valuedouble <= 0)
        return serr(c, "%s", "'multipleOf' must be a positive number");
    double k = mul->valuedouble;
    if (k != floor(k) || k > 1000 || bounded)
        return serr(c, "%s",
                    "multipleOf is supported for integers up to 1000 without minimum/maximum");
    int n = (int)k;
    if (n == 1) {
        sbuf_addf(b, "%s-integer", c->j);
        return 0;
    }
    char base[RN];
    new_rule(c, base);
    for (int r = 0; r < n; r++) {
        struct sbuf t = {0};
        sbuf_adds(&t, r == 0 ? "\"\"" : "");
        for (int d = 0; d <= 9; d++)
            sbuf_addf(&t, "%s\"%d\" %s-%d", r == 0 || d ? " | " : "", d, base, (10 * r + d) % n);
        char nm[RN + 16];
        snprintf(nm, sizeof nm, "%s-%d", base, r);
        emit(c, nm, t.p);
        sbuf_free(&t);
    }
    sbuf_addf(b, "(\"0\" | \"-\"? (");
    for (int d = 1; d <= 9; d++) sbuf_addf(b, "%s\"%d\" %s-%d", d > 1 ? " | " : "", d, base, d % n);
    sbuf_adds(b, "))");
    return 0;
}

static int gen_typed(struct sc *c, const cJSON *s, const char *type, struct sbuf *b) {
    if (strcmp(type, "string") == 0) return gen_string(c, s, b);
    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        int bounded = cJSON_GetObjectItemCaseSensitive(s, "minimum") || cJSON_GetObjectItemCaseSensitive(s, "maximum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        const cJSON *mul = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
        if (mul) return gen_multiple(c, mul, bounded, b);
        if (bounded) return gen_num_range(c, s, strcmp(type, "integer") == 0, b);
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
        {"contains", "array"},
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
        if (is_validity(s, k->string) && !in_list(keywords, k->string))
            return serr(c, "unsupported keyword '%s'", k->string);
    const cJSON *lowered = s;
    if (cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties") ||
        cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems"))
        lowered = lower_unevaluated(c, s);
    else if (is_validity(s, "if") && cJSON_GetObjectItemCaseSensitive(s, "if"))
        lowered = lower_if(c, s);
    else if (cJSON_GetObjectItemCaseSensitive(s, "not") && !branches_of(s) &&
             !cJSON_GetObjectItemCaseSensitive(s, "$ref") &&
             !cJSON_GetObjectItemCaseSensitive(s, "allOf"))
        lowered = lower_not(c, s); /* after $ref/allOf merged and anyOf/oneOf distributed */
    if (lowered != s) {
        int r = lowered ? gen(c, lowered, nm) : -1;
        c->depth--;
        return r;
    }
    int rc = 0;
    struct sbuf b = {0};
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    int one = !any; /* both: anyOf here, oneOf in each branch (it stays among the siblings) */
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
        static const char *const drop_any[] = {"anyOf", NULL}, *const drop_one[] = {"oneOf", NULL};
        cJSON *sib = rc == 0 ? without(c, s, one ? drop_one : drop_any) : NULL;
        int n = rc == 0 ? cJSON_GetArraySize(any) : 0, k = 0;
        const cJSON **br = xcalloc((size_t)n + 1, sizeof *br);
        for (const cJSON *x = rc == 0 ? any->child : NULL; x; x = x->next, k++) {
            br[k] = has_constraints(sib) ? merge(c, sib, x) : x;
            if (!br[k]) rc = -1;
        }
        if (rc == 0 && one && n > 1) rc = one_of_exclusive(c, br, n);
        for (k = 0; rc == 0 && k < n; k++) {
            char nm2[RN];
            if (gen(c, br[k], nm2) < 0)
                rc = -1;
            else
                sbuf_addf(&b, "%s%s", k ? " | " : "", nm2);
        }
        free(br);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "const") ||
               cJSON_GetObjectItemCaseSensitive(s, "enum")) {
        const cJSON *k1 = cJSON_GetObjectItemCaseSensitive(s, "const"),
                    *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
        if (!k1 && (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0))
            rc = serr(c, "%s", "'enum' must be a non-empty array");
        int k = 0;
        for (const cJSON *x = rc < 0 ? NULL : k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
            int dup = 0; /* each value once (an enum may repeat one) */
            for (const cJSON *y = k1 ? x : e->child; y != x && !dup; y = y->next)
                dup = cJSON_Compare(x, y, 1);
            int ok = dup ? 0 : value_valid(c, s, x);
            if (ok < 0) {
                rc = -1;
                break;
            }
            if (!ok) continue;
            sbuf_adds(&b, k++ ? " | " : "");
            put_json_literal(&b, x);
        }
        if (rc == 0 && k == 0)
            rc =
                serr(c, "%s", "unsatisfiable schema: no enum/const value meets the other keywords");
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
        if (out->len > (size_t)GRAMMAR_MAX_GBNF) rc = serr(&c, "%s", "the schema's grammar is too large");
    }
    if (rc == 0) emit(&c, name, top);
    if (rc == 0 && out->len > (size_t)GRAMMAR_MAX_GBNF) rc = serr(&c, "%s", "the schema's grammar is too large");
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    cJSON_Delete(c.owned);
    cJSON_Delete(root);
    return rc;
}

void grammar_gbnf_json_value(const char *n, struct sbuf *o) {
    sbuf_addf(o, "%s ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", n, n, n, n, n, n, n);
    sbuf_addf(o,
              "%s-object ::= \"{\" %s-ws (%s-string %s-ws \":\" %s-ws %s %s-ws (\",\" %s-ws "
              "%s-string %s-ws \":\" "
              "%s-ws %s %s-ws)*)? \"}\"\n",
              n, n, n, n, n, n, n, n, n, n, n, n, n);
    sbuf_addf(o, "%s-array ::= \"[\" %s-ws (%s %s-ws (\",\" %s-ws %s %s-ws)*)? \"]\"\n", n, n, n, n,
              n, n, n);
    sbuf_addf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", n, n);
    sbuf_addf(o,
              "%s-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
              "([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n",
              n);
    sbuf_addf(o, "%s-int-part ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n", n);
    sbuf_addf(o, "%s-integer ::= %s-int-part\n", n, n);
    sbuf_addf(o, "%s-number ::= %s-int-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n", n, n);
    sbuf_addf(o, "%s-boolean ::= \"true\" | \"false\"\n", n);
    sbuf_addf(o, "%s-null ::= \"null\"\n", n);
    sbuf_addf(o, "%s-ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n", n);
}
