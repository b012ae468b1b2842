/* JSON Schema -> GBNF: allOf and $ref beside keywords merged into one schema
 * (merge, flat), if/then lowered. */
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
#include "schema_merge.h"
#include "schema_not.h"
#include "schema_object.h"
#include "schema_oneof.h"

/* all of x and y as one schema (x alone when they are equal), owned by the caller */
cJSON *sc_all_of2(const cJSON *x, const cJSON *y) {
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
                              y    ? sc_all_of2(x, y)
                              : ab ? sc_all_of2(x, ab)
                                   : cJSON_Duplicate(x, 1));
    }
    for (const cJSON *y = pb ? pb->child : NULL; y; y = y->next)
        if (!pa || !cJSON_GetObjectItemCaseSensitive(pa, y->string))
            cJSON_AddItemToObject(p, y->string, aa ? sc_all_of2(y, aa) : cJSON_Duplicate(y, 1));
    cJSON_DeleteItemFromObjectCaseSensitive(m, "properties");
    cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
    if (p->child || pa || pb) cJSON_AddItemToObject(m, "properties", p);
    else cJSON_Delete(p);
    if (aa || ab)
        cJSON_AddItemToObject(m, "additionalProperties",
                              !aa   ? cJSON_Duplicate(ab, 1)
                              : !ab ? cJSON_Duplicate(aa, 1)
                                    : sc_all_of2(aa, ab));
}

/* not x and not y as one not: {anyOf: [x, y]} (a new item), the branches of an x or y
 * that is an anyOf alone spliced in */
cJSON *sc_not_either(const cJSON *x, const cJSON *y) {
    cJSON *out = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(out, "anyOf");
    for (const cJSON *z = x; z; z = z == x ? y : NULL) {
        const cJSON *a = cJSON_IsObject(z) ? cJSON_GetObjectItemCaseSensitive(z, "anyOf") : NULL;
        int alone = cJSON_IsArray(a) && z->child == a && !a->next;
        for (const cJSON *w = alone ? a->child : z; w; w = alone ? w->next : NULL)
            cJSON_AddItemToArray(any, cJSON_Duplicate(w, 1));
    }
    return out;
}

/* Two values of keyword k that both apply, as one (a new item), or NULL where tpd does not
 * combine them: bounds take the tighter (lower bounds the larger, upper bounds the smaller),
 * type and enum the values in both (an empty array: none), items both schemas, not either. */
static cJSON *merge_values(const char *k, const cJSON *x, const cJSON *y) {
    static const char *const lower[] = {"minimum",  "exclusiveMinimum", "minLength",
                                        "minItems", "minProperties",    NULL};
    static const char *const upper[] = {"maximum",  "exclusiveMaximum", "maxLength",
                                        "maxItems", "maxProperties",    NULL};
    if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && (sc_in_list(lower, k) || sc_in_list(upper, k)))
        return cJSON_CreateNumber(sc_in_list(lower, k) == (x->valuedouble > y->valuedouble)
                                      ? x->valuedouble
                                      : y->valuedouble);
    if (strcmp(k, "items") == 0 && !cJSON_IsArray(x) && !cJSON_IsArray(y)) return sc_all_of2(x, y);
    if (strcmp(k, "not") == 0) return sc_not_either(x, y);
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
cJSON *sc_merge(struct sc *c, const cJSON *a, const cJSON *b) {
    for (int hops = 0; c->ref_alone && sc_only_ref(c, a); hops++) { /* a's siblings ignored */
        a = sc_resolve_pointer(c, cJSON_GetObjectItemCaseSensitive(a, "$ref")->valuestring);
        if (!a || hops > 64) return sc_serr(c, "%s", "allOf: a $ref that does not resolve"), NULL;
    }
    if (cJSON_IsFalse(a))
        return sc_serr(c, "%s", "unsatisfiable schema: allOf contains false"), NULL;
    if (cJSON_IsTrue(a)) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(c->owned, e);
        a = e;
    }
    for (int hops = 0; sc_only_ref(c, b); hops++) {
        b = sc_resolve_pointer(c, cJSON_GetObjectItemCaseSensitive(b, "$ref")->valuestring);
        if (!b || hops > 64) return sc_serr(c, "%s", "allOf: a $ref that does not resolve"), NULL;
    }
    if (cJSON_IsBool(b)) {
        if (cJSON_IsTrue(b)) {
            cJSON *m = cJSON_Duplicate(a, 1);
            cJSON_AddItemToArray(c->owned, m);
            return m;
        }
        return sc_serr(c, "%s", "unsatisfiable schema: allOf contains false"), NULL;
    }
    if (!cJSON_IsObject(b)) return sc_serr(c, "%s", "allOf: a subschema is not an object"), NULL;
    cJSON *m = cJSON_Duplicate(a, 1);
    if (!m) FATAL("out of memory");
    cJSON_AddItemToArray(c->owned, m);
    for (const cJSON *k = b->child; k; k = k->next) {
        /* then/else and min/maxContains count through if and contains: they come along */
        int companion = ((!strcmp(k->string, "then") || !strcmp(k->string, "else")) &&
                         sc_is_validity(b, "if")) ||
                        ((!strcmp(k->string, "minContains") || !strcmp(k->string, "maxContains")) &&
                         cJSON_GetObjectItemCaseSensitive(b, "contains"));
        if (!sc_is_validity(b, k->string) && !companion) continue;
        if (strncmp(k->string, "unevaluated", 11) == 0 && !cJSON_IsTrue(k))
            return sc_serr(c, "%s",
                           "unevaluatedProperties/unevaluatedItems in an allOf or $ref "
                           "subschema is not supported"),
                   NULL;
        if (strcmp(k->string, "properties") == 0 ||
            strcmp(k->string, "additionalProperties") == 0) {
            if (!cJSON_IsObject(k) && !cJSON_IsBool(k))
                return sc_serr(c, "'%s' must be an object", k->string), NULL;
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
        } else if (strcmp(k->string, "const") == 0 && !cJSON_Compare(k, have, 1)) {
            return sc_serr(c, "%s", "unsatisfiable schema: allOf: two different 'const' values"),
                   NULL;
        } else if (!cJSON_Compare(k, have, 1)) {
            cJSON *both = merge_values(k->string, have, k);
            if (!both)
                return sc_serr(
                           c,
                           "allOf: the subschemas disagree on '%s' (only compatible keywords can "
                           "be "
                           "combined)",
                           k->string),
                       NULL;
            if (cJSON_IsArray(both) && !both->child) {
                cJSON_Delete(both);
                return sc_serr(c,
                               "unsatisfiable schema: allOf: no value meets "
                               "both '%s'",
                               k->string),
                       NULL;
            }
            cJSON_ReplaceItemInObjectCaseSensitive(m, k->string, both);
        }
    }
    merge_props(m, a, b);
    /* keys that match no pattern are written only where both sides say so alike */
    const cJSON *ua = cJSON_GetObjectItemCaseSensitive(a, PATTERN_ADDL),
                *ub = cJSON_GetObjectItemCaseSensitive(b, PATTERN_ADDL);
    if (ua && !(ub && cJSON_Compare(ua, ub, 1) &&
                cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, PATTERN_EXTRA),
                              cJSON_GetObjectItemCaseSensitive(b, PATTERN_EXTRA), 1)))
        cJSON_DeleteItemFromObjectCaseSensitive(m, PATTERN_ADDL);
    /* the keys of one side's patternProperties are extra keys to the other side: none are
     * written where it closes them (additionalProperties false or a schema) */
    for (int side = 0; side < 2; side++) {
        const cJSON *x = side ? b : a, *y = side ? a : b;
        const cJSON *ax = cJSON_GetObjectItemCaseSensitive(x, "additionalProperties");
        int px = cJSON_GetObjectItemCaseSensitive(x, "patternProperties") ||
                 cJSON_GetObjectItemCaseSensitive(x, PATTERN_EXTRA);
        int py = cJSON_GetObjectItemCaseSensitive(y, "patternProperties") ||
                 cJSON_GetObjectItemCaseSensitive(y, PATTERN_EXTRA);
        if (py && !px && ax && !cJSON_IsTrue(ax)) {
            cJSON_DeleteItemFromObjectCaseSensitive(m, PATTERN_EXTRA);
            if (!cJSON_GetObjectItemCaseSensitive(m, NO_PATTERN_EXTRA))
                cJSON_AddTrueToObject(m, NO_PATTERN_EXTRA);
        }
    }
    return m;
}

/* A copy of s without the keys named in drop (NULL-terminated), owned by c. */
cJSON *sc_without(struct sc *c, const cJSON *s, const char *const *drop) {
    cJSON *m = cJSON_Duplicate(s, 1);
    if (!m) FATAL("out of memory");
    cJSON_AddItemToArray(c->owned, m);
    for (; *drop; drop++) cJSON_DeleteItemFromObjectCaseSensitive(m, *drop);
    return m;
}

int sc_has_constraints(const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next)
        if (sc_is_validity(s, k->string)) return 1;
    return 0;
}

/* The else branch of if/then/else: s (without them) and else and not if, lowered here
 * where nothing else comes first (sc_gen: anyOf, $ref, allOf, if), so that a not tpd
 * cannot write is known now; NULL with err. */
static const cJSON *if_else(struct sc *c, const cJSON *base, const cJSON *i, const cJSON *e) {
    static const char *const none[] = {NULL}, *const first[] = {"anyOf",
                                                                "oneOf",
                                                                "$ref",
                                                                "allOf",
                                                                "if",
                                                                "unevaluatedProperties",
                                                                "unevaluatedItems",
                                                                NULL};
    cJSON *m = e ? sc_merge(c, base, e) : sc_without(c, base, none);
    if (!m || !cJSON_IsObject(m)) return m;
    cJSON *had = cJSON_DetachItemFromObjectCaseSensitive(m, "not");
    cJSON_AddItemToObject(m, "not", had ? sc_not_either(had, i) : cJSON_Duplicate(i, 1));
    cJSON_Delete(had);
    for (int k = 0; first[k]; k++)
        if (cJSON_GetObjectItemCaseSensitive(m, first[k])) return m;
    return sc_lower_not(c, m);
}

/* if/then/else as the union of (s, if and then) and (s, not if and else): the values that
 * meet if take then, the others else, so the two exclude each other value by value and
 * their anyOf is exact. The else branch stands where not if can be written (lower_not),
 * else the subset "s, if and then" is left; a branch no value meets, or one tpd cannot
 * write (EITHER_BRANCH), is left out. NULL with err. */
const cJSON *sc_lower_if(struct sc *c, const cJSON *s) {
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(s, "if"),
                *t = cJSON_GetObjectItemCaseSensitive(s, "then"),
                *e = cJSON_GetObjectItemCaseSensitive(s, "else");
    static const char *const drop[] = {"if", "then", "else", NULL};
    const cJSON *base = sc_without(c, s, drop);
    cJSON *yes = sc_merge(c, base, i);
    if (yes && t) yes = sc_merge(c, yes, t);
    char why[ERR_LEN]; /* why the if branch is not written */
    snprintf(why, sizeof why, "%s", c->err);
    c->err[0] = 0;
    const cJSON *no = if_else(c, base, i, e);
    if (!no && !yes) { /* err: the if branch's reason, else the else branch's */
        if (!strstr(why, "unsatisfiable schema")) err_set(c->err, "%s", why);
        return NULL;
    }
    c->err[0] = 0;
    if (!no || !yes) return no ? no : yes;
    cJSON *u = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(u, "anyOf");
    cJSON_AddItemToArray(c->owned, u);
    cJSON_AddItemToArray(any, cJSON_Duplicate(yes, 1));
    cJSON_AddItemToArray(any, cJSON_Duplicate(no, 1));
    cJSON_AddTrueToObject(u, EITHER_BRANCH);
    return u;
}

/* s with its $ref chain followed and allOf (and $ref beside keywords) merged at its top;
 * gen: as the grammar writes it (if/then/else, not where tpd writes it and the object
 * keywords lowered: narrower), else as it accepts (if/then/else and not left for the
 * callers to over-approximate). NULL with err on an error the generation would report too. */
const cJSON *sc_flat(struct sc *c, const cJSON *s, int as_gen) {
    for (int hops = 0; cJSON_IsObject(s); hops++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
        if (hops > 64) return sc_serr(c, "%s", "$ref: a chain of references without end"), NULL;
        if (sc_only_ref(c, s) && cJSON_IsString(ref)) {
            s = sc_resolve_pointer(c, ref->valuestring);
            if (!s) return sc_serr(c, "$ref '%s' does not resolve", ref->valuestring), NULL;
        } else if (cJSON_IsString(ref)) {
            static const char *const drop[] = {"$ref", NULL};
            cJSON *r = cJSON_CreateObject();
            cJSON_AddItemToArray(c->owned, r);
            cJSON_AddStringToObject(r, "$ref", ref->valuestring);
            s = sc_merge(c, sc_without(c, s, drop), r);
        } else if (as_gen && sc_is_validity(s, "if") && cJSON_GetObjectItemCaseSensitive(s, "if")) {
            s = sc_lower_if(c, s);
        } else if (as_gen && cJSON_GetObjectItemCaseSensitive(s, "not") && !sc_branches_of(s) &&
                   !all) {
            const cJSON *low = sc_lower_not(c, s); /* where it fails, s: more than is written */
            if (!low) c->err[0] = 0;
            if (!low) break;
            s = low;
        } else if (cJSON_IsArray(all)) {
            static const char *const drop[] = {"allOf", NULL};
            cJSON *m = sc_without(c, s, drop);
            for (const cJSON *x = all->child; x && m; x = x->next) m = sc_merge(c, m, x);
            s = m;
        } else {
            break;
        }
        if (!s) return NULL;
    }
    return as_gen && cJSON_IsObject(s) ? sc_lower_object(c, s) : s;
}
