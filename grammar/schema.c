/* JSON Schema -> GBNF (grammar.h). Each subschema becomes a rule; $ref targets become rules
 * once each (so recursion works) through a work list, never by recursion over the chain.
 * Choices, documented in grammar.h and docs/structured-output.md: properties come out in
 * the schema's order, other keys after them (additionalProperties absent: allowed with
 * open_objects, as the specification says, else none beside properties, the default;
 * patternProperties: the keys of the patterns tpd can write), and extra keys never take a
 * declared name;
 * minimum/maximum on numbers yield decimals in the range (schema_num.c); anyOf is the union of its
 * branches, oneOf too once its branches are shown (or narrowed to be) exclusive, else it is
 * refused; allOf merges its subschemas' keywords (merge_props for the object ones). A
 * keyword that changes validity and is not implemented is an error that names it; unknown
 * keywords are ignored, as the specification says.
 * This file: dispatch (gen), $ref rules, the entry points; keywords by kind in schema_merge
 * (allOf, $ref beside keywords, if), schema_scalar, schema_object, schema_array, schema_oneof
 * (what a schema accepts; oneOf exclusive) and schema_not (not, unevaluated*). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/hex.h"
#include "../util/parse.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"
#include "schema_internal.h"
#include "schema_types.h"
#include "schema_array.h"
#include "schema_draft.h"
#include "schema_merge.h"
#include "schema_not.h"
#include "schema_object.h"
#include "schema_oneof.h"
#include "schema_scalar.h"

/* The keywords implemented; those that change what is valid but are not implemented (a
 * schema using one is refused, never half-honoured). Any other name is ignored, as the
 * specification says of unknown keywords (drafts 4-7) and annotations (2019-09, 2020-12):
 * id, x-* extensions, readonly, links, example, javaType... */
static const char *const keywords[] = {"type",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "items",
                                       "prefixItems",
                                       "minItems",
                                       "maxItems",
                                       "enum",
                                       "const",
                                       "anyOf",
                                       "oneOf",
                                       "allOf",
                                       "$ref",
                                       "minLength",
                                       "maxLength",
                                       "pattern",
                                       "format",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "additionalItems",
                                       "dependentRequired",
                                       "dependentSchemas",
                                       "dependencies",
                                       "minProperties",
                                       "maxProperties",
                                       "patternProperties",
                                       "propertyNames",
                                       "if",
                                       "uniqueItems",
                                       "multipleOf",
                                       "not",
                                       "contains",
                                       "unevaluatedProperties",
                                       "unevaluatedItems",
                                       "$tpd-not-strings",
                                       DEPENDS,
                                       NO_PATTERN_EXTRA,
                                       NULL};

static const char *const unimplemented[] = {"$dynamicRef", "$recursiveRef", NULL};

int sc_in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (strcmp(*l, s) == 0) return 1;
    return 0;
}

/* 1 when keyword k of schema s changes what s accepts (implemented or not). Keywords that
 * only act beside another (then/else beside if, additionalItems beside an items array,
 * minContains/maxContains beside contains) count through that one. */
int sc_is_validity(const cJSON *s, const char *k) {
    if (strcmp(k, "additionalItems") == 0)
        return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(s, "items"));
    if (strcmp(k, "if") == 0)
        return cJSON_GetObjectItemCaseSensitive(s, "then") ||
               cJSON_GetObjectItemCaseSensitive(s, "else");
    return sc_in_list(keywords, k) || sc_in_list(unimplemented, k);
}

int sc_serr(struct sc *c, const char *fmt, const char *a) {
    char m[ERR_LEN];
    snprintf(m, sizeof m, fmt, a);
    return err_set(c->err, "JSON Schema: %s", m);
}

void sc_new_rule(struct sc *c, char *nm) { snprintf(nm, RN, "%s-%d", c->name, c->n_rules++); }

void sc_emit(struct sc *c, const char *nm, const char *body) {
    sbuf_addf(c->out, "%s ::= %s\n", nm, body);
}

/* A JSON value as a literal. */
void sc_put_json_literal(struct sbuf *b, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) FATAL("out of memory");
    gbnf_put_literal(b, t, strlen(t));
    free(t);
}

/* ref's fragment ("#..."), where ref is local or names the root by its own URI (the root's
 * $id, or draft 4's id, without a fragment): "https://x/s.json#/a" in a schema whose $id is
 * "https://x/s.json" is "#/a". NULL for any other URI. */
static const char *local_part(const struct sc *c, const char *ref) {
    if (ref[0] == '#') return ref;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c->root, "$id");
    if (!cJSON_IsString(id)) id = cJSON_GetObjectItemCaseSensitive(c->root, "id");
    if (!cJSON_IsString(id)) return NULL;
    size_t n = strcspn(id->valuestring, "#"), m = strcspn(ref, "#");
    if (n == 0 || n != m || strncmp(id->valuestring, ref, n) != 0) return NULL;
    return ref[m] ? ref + m : "#";
}

const cJSON *sc_resolve_pointer(struct sc *c, const char *ref) {
    ref = local_part(c, ref);
    if (!ref) return NULL;
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '%') { /* a URI fragment's percent-encoded octet (RFC 6901, 6) */
                int hi = hex_digit(p[0]), lo = hi < 0 ? -1 : hex_digit(p[1]);
                if (lo < 0) return NULL;
                ch = (char)(hi * 16 + lo);
                p += 2;
            }
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

int sc_only_ref(const struct sc *c, const cJSON *s) {
    if (!cJSON_IsObject(s) || !cJSON_GetObjectItemCaseSensitive(s, "$ref")) return 0;
    if (c->ref_alone && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return 1;
    for (const cJSON *k = s->child; k; k = k->next)
        if (strcmp(k->string, "$ref") != 0 && sc_is_validity(s, k->string)) return 0;
    return 1;
}

/* 1 with the rule's name in nm when a rule is queued under key (queue_ref), else 0. */
static int queued(const struct sc *c, const char *key, char *nm) {
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, key) == 0) {
            snprintf(nm, RN, "%s-r%d", c->name, c->refs[i].id);
            return 1;
        }
    return 0;
}

/* Queues target's rule under key (a $ref, or a merged schema's text: sc_gen), unless it is
 * queued already; its name to nm. The queue frees key. */
static void queue_ref(struct sc *c, char *key, const cJSON *target, char *nm) {
    if (queued(c, key, nm)) {
        free(key);
        return;
    }
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? 2 * c->cap_refs : 8;
        c->refs = xrealloc(c->refs, sizeof *c->refs * (size_t)c->cap_refs);
    }
    c->refs[c->n_refs] = (struct sref){key, c->n_refs, target, 0};
    snprintf(nm, RN, "%s-r%d", c->name, c->n_refs);
    c->n_refs++;
}

/* The rule of a $ref, queued for generation the first time it is seen. */
static int ref_rule(struct sc *c, const char *ref, char *nm) {
    if (queued(c, ref, nm)) return 0;
    const cJSON *t = sc_resolve_pointer(c, ref);
    if (!t)
        return sc_serr(c,
                       "$ref '%s' does not resolve (only local refs \"#/...\", or the "
                       "root's own $id with one, are supported)",
                       ref);
    /* a chain of bare $refs that returns to itself can never produce a value */
    const cJSON *x = t;
    for (int hops = 0; sc_only_ref(c, x); hops++) {
        const char *r2 = cJSON_GetObjectItemCaseSensitive(x, "$ref")->valuestring;
        if (!r2 || hops > 64)
            return sc_serr(c, "$ref '%s' is a chain of references without end", ref);
        if (strcmp(r2, ref) == 0)
            return sc_serr(c, "unsatisfiable schema: $ref '%s' refers to itself", ref);
        x = sc_resolve_pointer(c, r2);
        if (!x) return sc_serr(c, "$ref '%s' does not resolve", r2);
    }
    queue_ref(c, xstrdup(ref), t, nm);
    return 0;
}

/* 1 when sc_gen merges parts of s into one schema (allOf; $ref, anyOf or oneOf beside other
 * keywords), which inlines what a $ref names: through a $ref back to s, without end. */
static int merges(const struct sc *c, const cJSON *s) {
    if (!cJSON_IsObject(s) || (c->ref_alone && cJSON_GetObjectItemCaseSensitive(s, "$ref")))
        return 0;
    int parts = 0, other = 0;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!strcmp(k->string, "allOf")) return 1;
        if (!strcmp(k->string, "$ref") || !strcmp(k->string, "anyOf") ||
            !strcmp(k->string, "oneOf"))
            parts++;
        else other |= sc_is_validity(s, k->string);
    }
    return parts && (other || parts > 1);
}

static int gen_node(struct sc *c, const cJSON *s, char *nm);

/* gen_node for s, whose text key (freed here) is busy meanwhile. */
static int gen_busy(struct sc *c, const cJSON *s, char *key, char *nm) {
    if (c->n_busy == c->cap_busy) {
        c->cap_busy = c->cap_busy ? 2 * c->cap_busy : 8;
        c->busy = xrealloc(c->busy, sizeof *c->busy * (size_t)c->cap_busy);
    }
    c->busy[c->n_busy++] = key;
    int rc = gen_node(c, s, nm);
    free(c->busy[--c->n_busy]);
    return rc;
}

/* Generates the rule for schema s; its name goes to nm. A schema that merges (merges) met
 * again while its own rule is being written, through a $ref, is a rule of its own (queued
 * like a $ref's, under its text), so that a recursive schema has a recursive rule. */
int sc_gen(struct sc *c, const cJSON *s, char *nm) {
    if (!merges(c, s)) return gen_node(c, s, nm);
    char *key = cJSON_PrintUnformatted(s);
    if (!key) FATAL("out of memory");
    for (int i = 0; i < c->n_busy; i++)
        if (strcmp(c->busy[i], key) == 0) {
            size_t n = strlen(key) + 2;
            char *r = xmalloc(n);
            snprintf(r, n, "\x01%s", key); /* no $ref of a written schema starts so */
            free(key);
            queue_ref(c, r, s, nm);
            return 0;
        }
    return gen_busy(c, s, key, nm);
}

/* The body of queued rule i: its $ref's target, or the merged schema queued (sc_gen), which
 * is written here even while an outer rule writes it (where its recursion was met). */
static int gen_queued(struct sc *c, int i, char *body) {
    const cJSON *t = c->refs[i].target; /* c->refs may move while t is written */
    if (c->refs[i].ref[0] != '\x01') return sc_gen(c, t, body);
    return gen_busy(c, t, xstrdup(c->refs[i].ref + 1), body);
}

/* Writes queued rule i (name-rID ::= its body) and marks it done; 0, or -1 with err. */
static int write_queued(struct sc *c, int i) {
    char body[RN], rn[RN];
    if (gen_queued(c, i, body) < 0) return -1;
    snprintf(rn, RN, "%s-r%d", c->name, c->refs[i].id);
    sc_emit(c, rn, body);
    c->refs[i].done = 1;
    return 0;
}

static int gen_typed(struct sc *c, const cJSON *s, const char *type, struct sbuf *b) {
    if (strcmp(type, "string") == 0) return sc_gen_string(c, s, b);
    if (strcmp(type, "integer") == 0 || strcmp(type, "number") == 0) {
        int bounded = cJSON_GetObjectItemCaseSensitive(s, "minimum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "maximum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum") ||
                      cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
        const cJSON *mul = cJSON_GetObjectItemCaseSensitive(s, "multipleOf");
        if (mul) return sc_gen_multiple(c, s, mul, bounded, b);
        if (bounded) return sc_gen_num_range(c, s, strcmp(type, "integer") == 0, b);
        if (strcmp(type, "integer") == 0) sc_put_integers(c, b);
        else sbuf_addf(b, "%s-number", c->j);
        return 0;
    }
    if (strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0) {
        sbuf_addf(b, "%s-%s", c->j, type);
        return 0;
    }
    if (strcmp(type, "object") == 0) return sc_gen_object(c, s, b);
    if (strcmp(type, "array") == 0) return sc_gen_array(c, s, b);
    return sc_serr(c, "unknown type '%s'", type);
}

/* A schema without type whose keywords constrain some types, read as the specification
 * does: values of every type, each type's keywords constraining it, into b; a type no value
 * of which meets them (minLength above maxLength) is left out. */
static int gen_every_type(struct sc *c, const cJSON *s, struct sbuf *b) {
    static const char *const types[] = {"object", "array", "string", "number", "boolean", "null"};
    char why[ERR_LEN] = "";
    int alts = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        cJSON *one = cJSON_CreateObject(); /* s's keywords (shared, not copied) and one type */
        cJSON_AddItemToArray(c->owned, one);
        for (cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, "type") && !cJSON_AddItemReferenceToObject(one, k->string, k))
                FATAL("out of memory");
        cJSON_AddStringToObject(one, "type", types[i]);
        char nm[RN], w[ERR_LEN] = "";
        int r = sc_try_gen(c, one, nm, 0, w);
        if (r < 0) return -1;
        if (r) sbuf_addf(b, "%s%s", alts++ ? " | " : "", nm);
        else if (!why[0]) snprintf(why, sizeof why, "%s", w);
    }
    return alts ? 0 : err_set(c->err, "%s", why);
}

/* anyOf (oneOf when one: made exclusive first) as the union of its branches, each with the
 * siblings merged in, into b. */
static int gen_branches(struct sc *c, const cJSON *s, const cJSON *any, int one, struct sbuf *b) {
    int rc = 0;
    if (!cJSON_IsArray(any) || cJSON_GetArraySize(any) == 0)
        rc = sc_serr(c, "%s", "'anyOf'/'oneOf' must be a non-empty array");
    static const char *const drop_any[] = {"anyOf", NULL}, *const drop_one[] = {"oneOf", NULL};
    cJSON *sib = rc == 0 ? sc_without(c, s, one ? drop_one : drop_any) : NULL;
    int n = rc == 0 ? cJSON_GetArraySize(any) : 0, k = 0, alts = 0;
    const cJSON **br = xcalloc((size_t)n + 1, sizeof *br);
    for (const cJSON *x = rc == 0 ? any->child : NULL; x; x = x->next, k++) {
        br[k] = sc_has_constraints(sib) ? sc_merge(c, sib, x) : x;
        if (!br[k] && strstr(c->err, "unsatisfiable schema")) { /* no value: a branch left out */
            cJSON *no = cJSON_CreateFalse();
            cJSON_AddItemToArray(c->owned, no);
            br[k] = no;
            c->err[0] = 0;
        }
        if (!br[k]) rc = -1;
    }
    if (rc == 0 && one && n > 1) rc = sc_one_of_exclusive(c, br, n);
    int split = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, SPLIT_DEP));
    int either = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, EITHER_BRANCH));
    char why[ERR_LEN] = "";
    for (k = 0; rc == 0 && k < n; k++) { /* a branch no value meets is left out */
        char nm2[RN], w[ERR_LEN] = "";
        int r = sc_try_gen(c, br[k], nm2, either || (split && k == 1), w); /* any error: out */
        if (r < 0) rc = -1;
        else if (r) sbuf_addf(b, "%s%s", alts++ ? " | " : "", nm2);
        else if (!why[0] && !strstr(w, "unsatisfiable schema")) snprintf(why, sizeof why, "%s", w);
    }
    if (rc == 0 && !alts && why[0]) rc = err_set(c->err, "%s", why); /* none written */
    if (rc == 0 && !alts)
        rc = sc_serr(c, "%s", "unsatisfiable schema: no anyOf/oneOf branch can be met");
    free(br);
    return rc;
}

static int cmp_text(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The texts t[lo..hi) (sorted, distinct, sharing their first d bytes) from byte d on, as a
 * trie of alternatives: one per next byte, so that a parse holds one branch per prefix
 * rather than one per value (a large enum would pass grammar.max_stacks). */
static void put_trie(struct sbuf *b, char **t, int lo, int hi, size_t d) {
    int i = lo;
    const char *sep = "";
    if (strlen(t[i]) == d) { /* a value that ends here (sorted first) */
        sbuf_adds(b, "\"\"");
        sep = " | ";
        i++;
    }
    while (i < hi) {
        /* grouped by the whole character at d (a literal never ends inside one) */
        unsigned char lead = (unsigned char)t[i][d];
        size_t n = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        int j = i;
        while (j < hi && strncmp(t[j] + d, t[i] + d, n) == 0) j++;
        size_t l = d;
        while (t[i][l] && t[i][l] == t[j - 1][l]) l++; /* the group's common prefix */
        while (l > d + 1 && ((unsigned char)t[i][l] & 0xC0) == 0x80) l--;
        sbuf_adds(b, sep);
        sep = " | ";
        gbnf_put_literal(b, t[i] + d, (j - i == 1 ? strlen(t[i]) : l) - d);
        if (j - i > 1) {
            sbuf_adds(b, " (");
            put_trie(b, t, i, j, l);
            sbuf_adds(b, ")");
        }
        i = j;
    }
}

/* 1 when an enum/const number of s may be written with zeros after its digits (2.0 for 2:
 * equal values): drafts 6 on, or where no type integer asks for no fraction at all */
static int number_spellings(const struct sc *c, const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int integer = 0;
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : t; x; x = cJSON_IsArray(t) ? x->next : NULL)
        integer |= cJSON_IsString(x) && strcmp(x->valuestring, "integer") == 0;
    return c->int_frac || !integer;
}

/* After the text of a number value (no exponent), the zeros that keep its value: a zero
 * fraction ("2.0") or more fraction digits ("2.50"), where frac. */
static void put_zeros(struct sbuf *b, const char *t, int frac) {
    if (!frac || !(t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) || strpbrk(t, "eE")) return;
    sbuf_adds(b, strchr(t, '.') ? " \"0\"{0,15}" : " " INT_FRAC);
}

/* Value x as GBNF literals, compact, its numbers inside arrays and objects also with the
 * zeros that keep their value where frac ({"a": 0.0} is {"a": 0}). */
static void put_value(struct sbuf *b, const cJSON *x, int frac) {
    int obj = cJSON_IsObject(x);
    if (!obj && !cJSON_IsArray(x)) {
        char *t = cJSON_PrintUnformatted(x);
        if (!t) FATAL("out of memory");
        gbnf_put_literal(b, t, strlen(t));
        if (cJSON_IsNumber(x)) put_zeros(b, t, frac);
        free(t);
        return;
    }
    sbuf_adds(b, obj ? "\"{\"" : "\"[\"");
    for (const cJSON *y = x->child; y; y = y->next) {
        if (y != x->child) sbuf_adds(b, " \",\"");
        if (obj) {
            cJSON *k = cJSON_CreateString(y->string);
            sbuf_adds(b, " ");
            put_value(b, k, 0);
            cJSON_Delete(k);
            sbuf_adds(b, " \":\"");
        }
        sbuf_adds(b, " ");
        put_value(b, y, frac);
    }
    sbuf_adds(b, obj ? " \"}\"" : " \"]\"");
}

/* const / enum: each value once, those that meet the sibling keywords, into b (more than
 * 16: as a trie of their texts). */
static int gen_values(struct sc *c, const cJSON *s, struct sbuf *b) {
    int rc = 0;
    const cJSON *k1 = cJSON_GetObjectItemCaseSensitive(s, "const"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (!k1 && (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0))
        rc = sc_serr(c, "%s", "'enum' must be a non-empty array");
    int k = 0, cap = 0;
    char **texts = NULL;
    const cJSON **vals = NULL;
    for (const cJSON *x = rc < 0 ? NULL : k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
        int dup = 0; /* each value once (an enum may repeat one) */
        for (const cJSON *y = k1 ? x : e->child; y != x && !dup; y = y->next)
            dup = cJSON_Compare(x, y, 1);
        int ok = dup ? 0 : sc_value_valid(c, s, x);
        if (ok < 0) {
            rc = -1;
            break;
        }
        if (!ok) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            texts = xrealloc(texts, sizeof *texts * (size_t)cap);
            vals = xrealloc(vals, sizeof *vals * (size_t)cap);
        }
        vals[k] = x;
        texts[k] = cJSON_PrintUnformatted(x);
        if (!texts[k++]) FATAL("out of memory");
    }
    if (rc == 0 && k == 0)
        rc = sc_serr(c, "%s", "unsatisfiable schema: no enum/const value meets the other keywords");
    if (rc == 0 && k > 16) {
        qsort(texts, (size_t)k, sizeof *texts, cmp_text);
        sbuf_adds(b, "(");
        put_trie(b, texts, 0, k, 0);
        sbuf_adds(b, ")");
    }
    int frac = number_spellings(c, s);
    for (int i = 0; i < k; i++) {
        if (rc == 0 && k <= 16) {
            sbuf_adds(b, i ? " | " : "");
            if (cJSON_IsObject(vals[i]) || cJSON_IsArray(vals[i]))
                put_value(b, vals[i], c->int_frac);
            else gbnf_put_literal(b, texts[i], strlen(texts[i])), put_zeros(b, texts[i], frac);
        }
        free(texts[i]);
    }
    free(texts);
    free(vals);
    return rc;
}

static int gen_node(struct sc *c, const cJSON *s, char *nm) {
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !sc_has_constraints(s))) {
        snprintf(nm, RN, "%s", c->j);
        return 0;
    }
    if (cJSON_IsFalse(s))
        return sc_serr(c, "%s", "unsatisfiable schema: the schema false matches nothing");
    if (!cJSON_IsObject(s)) return sc_serr(c, "%s", "a schema must be an object or a boolean");
    if (++c->depth > GRAMMAR_MAX_NESTING)
        return sc_serr(c, "%s", "schema nested deeper than 64 levels");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (c->ref_alone && cJSON_IsString(ref)) { /* drafts 3-7: nothing else applies beside it */
        int rc = ref_rule(c, ref->valuestring, nm);
        c->depth--;
        return rc;
    }
    for (const cJSON *k = s->child; k; k = k->next)
        if (sc_is_validity(s, k->string) && !sc_in_list(keywords, k->string))
            return sc_serr(c, "unsupported keyword '%s'", k->string);
    const cJSON *lowered = s;
    if (cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties") ||
        cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems"))
        lowered = sc_lower_unevaluated(c, s);
    else if (sc_is_validity(s, "if") && cJSON_GetObjectItemCaseSensitive(s, "if"))
        lowered = sc_lower_if(c, s);
    else if (cJSON_GetObjectItemCaseSensitive(s, "not") && !sc_branches_of(s) &&
             !cJSON_GetObjectItemCaseSensitive(s, "$ref") &&
             !cJSON_GetObjectItemCaseSensitive(s, "allOf"))
        lowered = sc_lower_not(c, s); /* after $ref/allOf merged and anyOf/oneOf distributed */
    if (lowered != s) {
        int r = lowered ? sc_gen(c, lowered, nm) : -1;
        c->depth--;
        return r;
    }
    int rc = 0;
    struct sbuf b = {0};
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    int one = !any; /* both: anyOf here, oneOf in each branch (it stays among the siblings) */
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (ref) {
        if (!cJSON_IsString(ref)) rc = sc_serr(c, "%s", "'$ref' must be a string");
        else if (!sc_only_ref(c, s)) { /* $ref beside other keywords: both apply, as allOf */
            static const char *const drop[] = {"$ref", NULL};
            cJSON *sib = sc_without(c, s, drop), *all2 = cJSON_CreateObject(),
                  *r = cJSON_CreateObject();
            cJSON_AddItemToArray(c->owned, all2);
            cJSON *arr = cJSON_AddArrayToObject(all2, "allOf");
            cJSON_AddItemToArray(arr, cJSON_Duplicate(sib, 1));
            cJSON_AddStringToObject(r, "$ref", ref->valuestring);
            cJSON_AddItemToArray(arr, r);
            rc = sc_gen(c, all2, nm);
            c->depth--;
            return rc;
        } else {
            rc = ref_rule(c, ref->valuestring, nm);
            c->depth--;
            return rc;
        }
    } else if (all) {
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)
            rc = sc_serr(c, "%s", "'allOf' must be a non-empty array");
        else {
            static const char *const drop[] = {"allOf", NULL};
            cJSON *m = sc_without(c, s, drop);
            for (const cJSON *x = all->child; x && m; x = x->next) m = sc_merge(c, m, x);
            if (!m) rc = -1;
            else {
                rc = sc_gen(c, m, nm);
                c->depth--;
                return rc;
            }
        }
    } else if (any) {
        rc = gen_branches(c, s, any, one, &b);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "const") ||
               cJSON_GetObjectItemCaseSensitive(s, "enum")) {
        rc = gen_values(c, s, &b);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
        if (!t) {
            const char *it = sc_infer_type(s);
            if (it && c->every_type) rc = gen_every_type(c, s, &b);
            else if (it) rc = gen_typed(c, s, it, &b);
            else sbuf_adds(&b, c->j);
        } else if (cJSON_IsString(t)) {
            rc = gen_typed(c, s, t->valuestring, &b);
        } else if (cJSON_IsArray(t) && cJSON_GetArraySize(t) > 0) {
            int k = 0;
            for (const cJSON *x = t->child; x && rc == 0; x = x->next) {
                if (!cJSON_IsString(x)) {
                    rc = sc_serr(c, "%s", "'type' must list strings");
                    break;
                }
                sbuf_adds(&b, k++ ? " | (" : "(");
                rc = gen_typed(c, s, x->valuestring, &b);
                sbuf_adds(&b, ")");
            }
        } else {
            rc = sc_serr(c, "%s", "'type' must be a string or a non-empty array of strings");
        }
    }
    if (rc == 0) {
        sc_new_rule(c, nm);
        sc_emit(c, nm, b.p ? b.p : "\"\"");
    }
    sbuf_free(&b);
    c->depth--;
    return rc;
}

/* sc_gen for what tpd may leave out of a grammar: where it fails, nothing is left of it
 * (output, queued $refs, the error; why, unless NULL, keeps the error). deep: the $refs it
 * queues are written now and any error leaves it out; else only an unsatisfiable schema
 * does (the $refs are written later, as usual) and another error is returned. 1, 0 (left
 * out), or -1 with err. */
int sc_try_gen(struct sc *c, const cJSON *s, char *nm, int deep, char *why) {
    size_t len = c->out->len;
    int n_refs = c->n_refs, depth = c->depth;
    unsigned char keys[sizeof c->key_rules];
    memcpy(keys, c->key_rules, sizeof keys);
    int ok = sc_gen(c, s, nm) == 0;
    if (!ok && !deep && !strstr(c->err, "unsatisfiable schema")) return -1;
    for (int i = n_refs; deep && ok && i < c->n_refs; i++)  /* the list grows while we go */
        if (!c->refs[i].done) ok = write_queued(c, i) == 0; /* done: by a try inside this one */
    if (ok) return 1;
    c->out->len = len;
    if (c->out->p) c->out->p[len] = 0;
    for (int i = n_refs; i < c->n_refs; i++) free(c->refs[i].ref);
    c->n_refs = n_refs;
    c->depth = depth;
    memcpy(c->key_rules, keys, sizeof keys);
    if (why) snprintf(why, ERR_LEN, "%s", c->err);
    c->err[0] = 0;
    return 0;
}

int grammar_gbnf_from_json_schema(const char *schema, size_t len, const char *name,
                                  unsigned reading, struct sbuf *out, char *err) {
    if (len > GRAMMAR_MAX_TEXT)
        return err_set(err, "JSON Schema of %zu bytes is longer than the limit of %u", len,
                       GRAMMAR_MAX_TEXT);
    if (strlen(name) > 40) return err_set(err, "grammar rule name longer than 40 characters");
    if (json_has_nul_escape(schema, len))
        return err_set(err, "JSON Schema holds \\u0000: NUL characters in strings are not "
                            "supported");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, 0);
    if (!root)
        return err_set(err, "JSON Schema: not valid JSON (at byte %zu)",
                       end ? (size_t)(end - schema) : 0);
    struct sc c;
    memset(&c, 0, sizeof c);
    c.root = root;
    snprintf(c.name, sizeof c.name, "%s", name);
    snprintf(c.j, sizeof c.j, "%s-j", name);
    c.out = out;
    c.err = err;
    c.owned = cJSON_CreateArray();
    c.closed = !(reading & GRAMMAR_SCHEMA_OPEN_OBJECTS);
    c.every_type = (reading & GRAMMAR_SCHEMA_EVERY_TYPE) != 0;
    int draft = schema_draft(root);
    schema_draft_strip(root, draft); /* what that draft's validators ignore */
    c.ref_alone = draft >= 3 && draft <= 7;
    c.int_frac = draft == 0 || draft >= 6; /* draft 4's integer: no fraction at all */
    grammar_gbnf_json_value(c.j, out);
    char top[RN];
    int rc = sc_gen(&c, root, top);
    for (int i = 0; rc == 0 && i < c.n_refs; i++) { /* the work list grows while we go */
        if (!c.refs[i].done) rc = write_queued(&c, i);
        if (out->len > (size_t)GRAMMAR_MAX_GBNF)
            rc = sc_serr(&c, "%s", "the schema's grammar is too large");
    }
    if (rc == 0) sc_emit(&c, name, top);
    if (rc == 0 && out->len > (size_t)GRAMMAR_MAX_GBNF)
        rc = sc_serr(&c, "%s", "the schema's grammar is too large");
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    free(c.busy);
    cJSON_Delete(c.owned);
    cJSON_Delete(root);
    return rc;
}

void grammar_gbnf_json_value(const char *n, struct sbuf *o) {
    sbuf_addf(o,
              "%s ::= %s-object | %s-array | %s-string | %s-number | %s-boolean "
              "| %s-null\n",
              n, n, n, n, n, n, n);
    sbuf_addf(o,
              "%s-object ::= \"{\" %s-ws (%s-string %s-ws \":\" %s-ws %s %s-ws "
              "(\",\" %s-ws "
              "%s-string %s-ws \":\" "
              "%s-ws %s %s-ws)*)? \"}\"\n",
              n, n, n, n, n, n, n, n, n, n, n, n, n);
    sbuf_addf(o, "%s-array ::= \"[\" %s-ws (%s %s-ws (\",\" %s-ws %s %s-ws)*)? \"]\"\n", n, n, n, n,
              n, n, n);
    sbuf_addf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", n, n);
    sbuf_addf(o,
              "%s-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] "
              "| \"u\" "
              "([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))\n",
              n);
    sbuf_addf(o, "%s-int-part ::= \"-\"? (\"0\" | [1-9] [0-9]{0,39})\n", n);
    sbuf_addf(o, "%s-integer ::= %s-int-part\n", n, n);
    sbuf_addf(o,
              "%s-number ::= %s-int-part (\".\" [0-9]{1,16})? ([eE] [-+]? "
              "[0-9]{1,3})?\n",
              n, n);
    sbuf_addf(o, "%s-boolean ::= \"true\" | \"false\"\n", n);
    sbuf_addf(o, "%s-null ::= \"null\"\n", n);
    sbuf_addf(o, "%s-ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n", n);
}
