/* JSON Schema -> GBNF: not, unevaluatedProperties and unevaluatedItems lowered
 * into the keywords the other modules write, exactly, or refused. */
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
#include "schema_not.h"
#include "schema_merge.h"
#include "schema_object.h"
#include "schema_oneof.h"

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
        return sc_type_bits(t);
    const char *it = sc_infer_type(m);
    if (!it) return T_ANY;
    cJSON *tmp = cJSON_CreateString(it);
    int bits = sc_type_bits(tmp);
    cJSON_Delete(tmp);
    return bits;
}

/* m's type set to the types of bits. */
static int set_type_bits(struct sc *c, cJSON *m, int bits, int force) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string"};
    if ((bits & (T_INT | T_FRAC)) == T_FRAC) { /* no fractions only: other types, a subset */
        if (bits == T_FRAC)
            return sc_serr(c, "%s", "not: numbers that are not integers are not supported");
        bits &= ~T_FRAC;
    }
    if (!bits) return sc_serr(c, "%s", "unsatisfiable schema: 'not' rules out every type left");
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

/* m without the values in the array v (a not's const/enum values of the types tbits). */
static int not_values(struct sc *c, cJSON *m, const cJSON *v, int tbits) {
    const cJSON *k1 = cJSON_GetObjectItemCaseSensitive(m, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "enum");
    if (k1 || cJSON_IsArray(e)) { /* a finite set: the values left */
        cJSON *left = cJSON_CreateArray();
        for (const cJSON *x = k1 ? k1 : e->child; x; x = k1 ? NULL : x->next) {
            int out = 0;
            for (const cJSON *y = v->child; y && !out; y = y->next)
                out = (sc_value_type(y) & tbits) && cJSON_Compare(x, y, 1);
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
    for (const cJSON *y = v->child; y; y = y->next) {
        int t = sc_value_type(y) & tbits & bits;
        if (t == T_NULL) bits &= ~T_NULL;
        else if (t == T_BOOL) bools |= cJSON_IsTrue(y) ? 1 : 2;
        else if (t == T_STR) cJSON_AddItemToArray(strs, cJSON_Duplicate(y, 1));
        else if (t)
            return sc_serr(c, "%s",
                           "not: excluding numbers, objects or arrays from a type "
                           "is not supported (only from an enum)");
    }
    if (bools == 3) bits &= ~T_BOOL;
    if (bools && bools != 3) {
        if (bits != T_BOOL)
            return sc_serr(c, "%s",
                           "not: excluding one boolean beside other types is not supported");
        cJSON_AddItemToObject(m, "enum", cJSON_CreateArray());
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(m, "enum"),
                             cJSON_CreateBool(bools == 2));
    }
    if (strs->child) {
        static const char *const kw[] = {"pattern", "format", "minLength", "maxLength", NULL};
        int other = 0;
        for (int i = 0; kw[i]; i++) other |= cJSON_GetObjectItemCaseSensitive(m, kw[i]) != NULL;
        if (other || (bits != T_STR && sc_branches_of(m)))
            return sc_serr(c, "%s",
                           "not: excluding strings is supported beside type string "
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
        if (!cJSON_IsString(x)) return sc_serr(c, "%s", "'required' must list strings");
        if (!sc_writable(m, x->valuestring) &&                         /* never all there already */
            !cJSON_GetObjectItemCaseSensitive(m, "patternProperties")) /* its keys may be */
            return 0;
        if (!sc_is_required(m, x->valuestring)) pick = x->valuestring, n_pick++;
    }
    if (!cJSON_GetObjectItemCaseSensitive(m, "properties") &&
        !cJSON_GetObjectItemCaseSensitive(m, "additionalProperties"))
        cJSON_AddTrueToObject(m, "additionalProperties"); /* extra keys stay allowed */
    if (n_pick > 1 && !sc_branches_of(m)) { /* one of them absent: a branch each (exact) */
        cJSON *any = cJSON_AddArrayToObject(m, "anyOf");
        for (const cJSON *x = names->child; x; x = x->next) {
            if (sc_is_required(m, x->valuestring)) continue;
            cJSON *br = cJSON_CreateObject();
            cJSON_AddFalseToObject(cJSON_AddObjectToObject(br, "properties"), x->valuestring);
            cJSON_AddItemToArray(any, br);
        }
        pick = NULL;
    }
    if (!names->child || (!pick && !n_pick)) {
        if (!objects_only)
            return sc_serr(c, "%s", "unsatisfiable schema: 'not' forbids required names");
        return set_type_bits(c, m, bits & ~T_OBJ, 0);
    }
    return pick ? sc_forbid(c, m, pick, "not") : 0;
}

/* m narrowed by not p (p flat, one piece of the not). */
static int not_piece(struct sc *c, cJSON *m, const cJSON *p) {
    if (cJSON_IsFalse(p)) return 0;
    if (cJSON_IsTrue(p) || !sc_has_constraints(p))
        return sc_serr(c, "%s", "unsatisfiable schema: 'not' of a schema that accepts everything");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *vals = cJSON_GetObjectItemCaseSensitive(p, "const");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(p, "required");
    if (vals) { /* one value (an array const too) as a list of one */
        cJSON *one = cJSON_CreateArray();
        cJSON_AddItemToArray(c->owned, one);
        cJSON_AddItemToArray(one, cJSON_Duplicate(vals, 1));
        vals = one;
    } else {
        vals = cJSON_GetObjectItemCaseSensitive(p, "enum");
    }
    if (vals && !cJSON_IsArray(vals)) return sc_serr(c, "%s", "'enum' must be an array");
    int n_kw = 0;
    for (const cJSON *k = p->child; k; k = k->next) n_kw += sc_is_validity(p, k->string);
    int tb = sc_type_bits(t);
    if (t && !tb) return sc_serr(c, "%s", "not: 'type' must name JSON types");
    if (n_kw == 1 && t) return set_type_bits(c, m, gen_type_bits(m) & ~tb, 0);
    if (vals && n_kw == 1 + (t != NULL)) return not_values(c, m, vals, tb);
    if (cJSON_IsArray(req) && n_kw == 1 + (t != NULL) && (!t || tb == T_OBJ))
        return not_required(c, m, req, t != NULL);
    return sc_serr(c, "%s",
                   "not: only {type}, {enum}, {const}, {required} and anyOf of these are "
                   "supported");
}

const cJSON *sc_lower_not(struct sc *c, const cJSON *s) {
    static const char *const drop[] = {"not", NULL};
    cJSON *m = sc_without(c, s, drop);
    const cJSON *n = sc_flat(c, cJSON_GetObjectItemCaseSensitive(s, "not"), 0);
    if (!n) return NULL;
    const cJSON *any = cJSON_IsObject(n) ? cJSON_GetObjectItemCaseSensitive(n, "anyOf") : NULL;
    int n_kw = 0;
    for (const cJSON *k = cJSON_IsObject(n) ? n->child : NULL; k; k = k->next)
        n_kw += sc_is_validity(n, k->string);
    if (!cJSON_IsArray(any) || n_kw != 1) return not_piece(c, m, n) < 0 ? NULL : m;
    for (const cJSON *x = any->child; x; x = x->next) {
        const cJSON *p = sc_flat(c, x, 0);
        if (!p || not_piece(c, m, p) < 0) return NULL;
    }
    return m;
}

/* unevaluatedProperties / unevaluatedItems false: additionalProperties false (items false)
 * over what s and the allOf / $ref subschemas it merges declare, exact when no subschema on
 * the way applies conditionally (anyOf, oneOf, if, dependentSchemas) nor has its own
 * unevaluated keyword. true (or {}) changes nothing. */
static int uneval_plain(struct sc *c, const cJSON *s, int top, int depth) {
    static const char *const cond[] = {"anyOf",        "oneOf", "if", "dependentSchemas",
                                       "dependencies", NULL};
    if (!cJSON_IsObject(s)) return 0;
    if (depth > 64) return sc_serr(c, "%s", "unevaluatedProperties: subschemas nested too deep");
    for (int i = 0; cond[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, cond[i]))
            return sc_serr(c, "unevaluatedProperties/unevaluatedItems beside '%s' is not supported",
                           cond[i]);
    if (!top && (cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties") ||
                 cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems")))
        return sc_serr(c, "%s",
                       "unevaluatedProperties/unevaluatedItems in an allOf or $ref "
                       "subschema is not supported");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    for (const cJSON *x = cJSON_IsArray(all) ? all->child : NULL; x; x = x->next)
        if (uneval_plain(c, x, 0, depth + 1) < 0) return -1;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (cJSON_IsString(ref)) {
        const cJSON *t = sc_resolve_pointer(c, ref->valuestring);
        if (!t) return sc_serr(c, "$ref '%s' does not resolve", ref->valuestring);
        if (uneval_plain(c, t, 0, depth + 1) < 0) return -1;
    }
    return 0;
}

const cJSON *sc_lower_unevaluated(struct sc *c, const cJSON *s) {
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedProperties");
    const cJSON *ui = cJSON_GetObjectItemCaseSensitive(s, "unevaluatedItems");
    static const char *const drop[] = {"unevaluatedProperties", "unevaluatedItems", NULL};
    int closes_p = up && !cJSON_IsTrue(up) && !(cJSON_IsObject(up) && !sc_has_constraints(up));
    int closes_i = ui && !cJSON_IsTrue(ui) && !(cJSON_IsObject(ui) && !sc_has_constraints(ui));
    if ((closes_p && !cJSON_IsFalse(up)) || (closes_i && !cJSON_IsFalse(ui)))
        return sc_serr(c, "%s",
                       "unevaluatedProperties/unevaluatedItems other than true or false "
                       "is not supported"),
               NULL;
    if ((closes_p || closes_i) && uneval_plain(c, s, 1, 0) < 0) return NULL;
    const cJSON *f = sc_flat(c, sc_without(c, s, drop), 0);
    if (!f || !cJSON_IsObject(f)) return f;
    cJSON *m = sc_without(c, f, drop + 2);
    if (closes_p && !cJSON_GetObjectItemCaseSensitive(m, "additionalProperties"))
        cJSON_AddFalseToObject(m, "additionalProperties");
    if (closes_i && cJSON_GetObjectItemCaseSensitive(m, "contains"))
        return sc_serr(c, "%s", "unevaluatedItems beside contains is not supported"), NULL;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(m, "items");
    if (closes_i && cJSON_IsArray(items) && !cJSON_GetObjectItemCaseSensitive(m, "additionalItems"))
        cJSON_AddFalseToObject(m, "additionalItems");
    else if (closes_i && !items) cJSON_AddFalseToObject(m, "items");
    return m;
}
