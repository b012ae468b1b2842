/* JSON Schema -> GBNF: not, unevaluatedProperties and unevaluatedItems lowered
 * into the keywords the other modules write, exactly (a not of several keywords: the
 * complements tpd writes), or refused. */
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
#include "schema_not.h"
#include "schema_merge.h"
#include "schema_object.h"
#include "schema_oneof.h"

/* ---- not, contains, unevaluatedProperties / unevaluatedItems ----
 * not is lowered into its siblings where the complement is exact: {type}, {enum}/{const},
 * {required} (objects without one of the names; with type "object" beside it non-objects
 * pass too) narrow them in place, any other schema is the union of its keywords'
 * complements (not_union), and anyOf of these (each one applies: not (A or B) = not A and
 * not B). Strings outside an enum are gen_key_not_in's automaton (the internal keyword
 * NOT_STRINGS beside type string, without other string keywords), numbers outside one the
 * open intervals between them. What cannot be written exactly is refused. */
/* The types m's grammar may write (its type, else the one its keywords imply). */
static int gen_type_bits(const struct sc *c, const cJSON *m) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (t || cJSON_GetObjectItemCaseSensitive(m, "enum") ||
        cJSON_GetObjectItemCaseSensitive(m, "const"))
        return sc_type_bits(t);
    return sc_implied_bits(c, m);
}

/* m's type set to the types of bits. */
static int set_type_bits(struct sc *c, cJSON *m, int bits, int force) {
    if ((bits & (T_INT | T_FRAC)) == T_FRAC) { /* no fractions only: other types, a subset */
        if (bits == T_FRAC)
            return sc_serr(c, "%s", "not: numbers that are not integers are not supported");
        bits &= ~T_FRAC;
    }
    if (!bits) return sc_serr(c, "%s", "unsatisfiable schema: 'not' rules out every type left");
    if (bits == T_ANY && !cJSON_GetObjectItemCaseSensitive(m, "type") && !force) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(m, "type");
    cJSON_AddItemToObject(m, "type", sc_type_list(bits));
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* m's numbers other than those of nums, as the open intervals between them: an anyOf of a
 * branch of m's other types and one of numbers per interval (exclusive bounds, exact at
 * any spelling of the value). Where m has branches, multipleOf or draft 4's boolean
 * exclusive bounds: refused. */
static int not_numbers(struct sc *c, cJSON *m, const cJSON *nums, int bits) {
    static const char *const no[] = {"anyOf", "oneOf", "multipleOf", NULL};
    for (int i = 0; no[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(m, no[i]))
            return sc_serr(c, "not: excluding numbers beside '%s' is not supported", no[i]);
    if (cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(m, "exclusiveMinimum")) ||
        cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(m, "exclusiveMaximum")))
        return sc_serr(c, "%s",
                       "not: excluding numbers beside draft 4's exclusive bounds is not "
                       "supported");
    int n = cJSON_GetArraySize(nums), k = 0;
    double *x = xmalloc(sizeof *x * (size_t)n);
    for (const cJSON *y = nums->child; y; y = y->next) x[k++] = y->valuedouble;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    cJSON *any = cJSON_AddArrayToObject(m, "anyOf");
    int num = bits & (T_INT | T_FRAC), rc = 0;
    if (bits & ~num) {
        cJSON *rest = cJSON_CreateObject();
        cJSON_AddItemToArray(any, rest);
        rc = set_type_bits(c, rest, bits & ~num, 1);
    }
    for (int i = 0; i <= n && rc == 0; i++) { /* (x[i-1], x[i]) */
        if (i > 0 && i < n && x[i] == x[i - 1]) continue;
        cJSON *br = cJSON_CreateObject();
        cJSON_AddItemToArray(any, br);
        rc = set_type_bits(c, br, num, 1);
        if (i > 0) cJSON_AddNumberToObject(br, "exclusiveMinimum", x[i - 1]);
        if (i < n) cJSON_AddNumberToObject(br, "exclusiveMaximum", x[i]);
    }
    free(x);
    return rc;
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
        return left->child ? 0
                           : sc_serr(c, "%s", "unsatisfiable schema: 'not' rules out every value");
    }
    int bits = gen_type_bits(c, m), bools = 0;
    cJSON *strs = cJSON_CreateArray(), *nums = cJSON_CreateArray();
    cJSON_AddItemToArray(c->owned, strs);
    cJSON_AddItemToArray(c->owned, nums);
    for (const cJSON *y = v->child; y; y = y->next) {
        int t = sc_value_type(y) & tbits & bits;
        if (t == T_NULL) bits &= ~T_NULL;
        else if (t == T_BOOL) bools |= cJSON_IsTrue(y) ? 1 : 2;
        else if (t == T_STR) cJSON_AddItemToArray(strs, cJSON_Duplicate(y, 1));
        else if (t & (T_INT | T_FRAC)) cJSON_AddItemToArray(nums, cJSON_Duplicate(y, 1));
        else if (t)
            return sc_serr(c, "%s",
                           "not: excluding objects or arrays from a type is not supported (only "
                           "from an enum)");
    }
    if (nums->child && (strs->child || not_numbers(c, m, nums, bits) < 0))
        return strs->child ? sc_serr(c, "%s",
                                     "not: excluding both strings and numbers from types is not "
                                     "supported")
                           : -1;
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
    int bits = gen_type_bits(c, m);
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

/* ---- not of a conjunction: the union of its keywords' complements ----
 * Every keyword of p applies, so a value fails p where it fails one of them: not p is the
 * union over p's keywords k of not {k}. Each keyword's complement tpd writes exactly is one
 * branch, m narrowed by it: type (the other types), const/enum (the other values),
 * required (objects without one of the names), each of properties (objects that have the
 * name with a value that fails its schema: {not} again), items (arrays that contain an
 * item that fails it), not (its schema), anyOf (none of the branches: {not} again), bounds
 * and counts (the values beyond them). A keyword of one type alone fails values of that
 * type only. Any other keyword, or one whose complement cannot be written, is left out: a
 * subset of not p, so the grammar stays within the schema. */
struct not_union {
    struct sc *c;
    const cJSON *m, *p;
    int tbits;    /* the types p's type admits (T_ANY without one) */
    cJSON *any;   /* the branches */
    int left_out; /* a keyword's complement not written */
};

static int not_shape(struct sc *c, const cJSON *x, int depth);

/* A copy of m for one branch, its types narrowed to bits (T_ANY: as they are); NULL when
 * none of them is left. */
static cJSON *branch_of(struct not_union *u, int bits) {
    cJSON *b = cJSON_Duplicate(u->m, 1);
    if (!b) FATAL("out of memory");
    if (bits != T_ANY && set_type_bits(u->c, b, gen_type_bits(u->c, b) & bits & u->tbits, 1) < 0) {
        cJSON_Delete(b);
        u->c->err[0] = 0; /* no value of those types: the branch is empty */
        return NULL;
    }
    return b;
}

/* b joins the branches where rc is 0; else (err) it is left out: empty where unsatisfiable,
 * else a complement tpd does not write. */
static void branch_add(struct not_union *u, cJSON *b, int rc) {
    if (rc == 0 && b) {
        cJSON_AddItemToArray(u->any, b);
        return;
    }
    if (rc < 0 && !strstr(u->c->err, "unsatisfiable schema")) u->left_out = 1;
    u->c->err[0] = 0;
    cJSON_Delete(b);
}

/* the objects with name whose value fails x */
static void not_property(struct not_union *u, const char *name, const cJSON *x) {
    const cJSON *f = sc_flat(u->c, x, 0);
    if (!f) return branch_add(u, NULL, -1);
    if (cJSON_IsTrue(f) || (cJSON_IsObject(f) && !sc_has_constraints(f))) return;
    if (!not_shape(u->c, f, 0)) return branch_add(u, NULL, -1);
    cJSON *b = branch_of(u, T_OBJ);
    if (!b) return;
    cJSON *with = cJSON_CreateObject();
    cJSON_AddItemToArray(u->c->owned, with);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(with, "required"), cJSON_CreateString(name));
    cJSON *neg = cJSON_AddObjectToObject(cJSON_AddObjectToObject(with, "properties"), name);
    cJSON_AddItemToObject(neg, "not", cJSON_Duplicate(x, 1));
    cJSON *m = sc_merge(u->c, b, with);
    branch_add(u, m ? cJSON_Duplicate(m, 1) : NULL, m ? 0 : -1);
    cJSON_Delete(b);
}

/* the arrays with an item that fails x (contains, where gen_contains writes it) */
static void not_items(struct not_union *u, const cJSON *x) {
    const cJSON *f = sc_flat(u->c, x, 0);
    if (!f) return branch_add(u, NULL, -1);
    if (cJSON_IsTrue(f) || (cJSON_IsObject(f) && !sc_has_constraints(f))) return;
    static const char *const no[] = {"contains", "prefixItems", "uniqueItems", "maxItems", NULL};
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(u->m, "minItems");
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(u->m, "items");
    int ok = not_shape(u->c, f, 0) && !(cJSON_IsNumber(mn) && mn->valuedouble > 1) &&
             !cJSON_IsArray(it) && !cJSON_IsFalse(it);
    for (int i = 0; no[i] && ok; i++) ok = !cJSON_GetObjectItemCaseSensitive(u->m, no[i]);
    if (!ok) return branch_add(u, NULL, -1);
    cJSON *b = branch_of(u, T_ARR);
    if (b)
        cJSON_AddItemToObject(cJSON_AddObjectToObject(b, "contains"), "not", cJSON_Duplicate(x, 1));
    if (b) branch_add(u, b, 0);
}

/* keyword k (a count or a bound) of value v passed: the values of its type beyond it */
static void not_bound(struct not_union *u, const char *k, const cJSON *v) {
    static const struct {
        const char *kw, *other;
        int type, upper, step; /* other: an upper bound (upper) at v - step, else a lower */
    } t[] = {
        {"minItems", "maxItems", T_ARR, 1, 1},
        {"maxItems", "minItems", T_ARR, 0, 1},
        {"minLength", "maxLength", T_STR, 1, 1},
        {"maxLength", "minLength", T_STR, 0, 1},
        {"minProperties", "maxProperties", T_OBJ, 1, 1},
        {"maxProperties", "minProperties", T_OBJ, 0, 1},
        {"minimum", "exclusiveMaximum", T_INT | T_FRAC, 1, 0},
        {"maximum", "exclusiveMinimum", T_INT | T_FRAC, 0, 0},
        {"exclusiveMinimum", "maximum", T_INT | T_FRAC, 1, 0},
        {"exclusiveMaximum", "minimum", T_INT | T_FRAC, 0, 0},
    };
    int i = 0;
    while (i < 10 && strcmp(t[i].kw, k)) i++;
    double x = cJSON_IsNumber(v) ? v->valuedouble : 0;
    if (t[i].step && x - t[i].upper < 0) return; /* minItems 0: every array meets it */
    x += t[i].upper ? -t[i].step : t[i].step;
    cJSON *b = branch_of(u, t[i].type);
    if (!b) return;
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(b, t[i].other);
    if (cJSON_IsNumber(have) && (t[i].upper ? have->valuedouble <= x : have->valuedouble >= x))
        return branch_add(u, b, 0);
    cJSON_DeleteItemFromObjectCaseSensitive(b, t[i].other);
    cJSON_AddNumberToObject(b, t[i].other, x);
    branch_add(u, b, 0);
}

/* the branch of one keyword k of p */
static void not_keyword(struct not_union *u, const cJSON *k) {
    static const char *const bounds[] = {
        "minItems",         "maxItems",         "minLength", "maxLength",
        "minProperties",    "maxProperties",    "minimum",   "maximum",
        "exclusiveMinimum", "exclusiveMaximum", NULL};
    struct sc *c = u->c;
    const char *kw = k->string;
    int finite = cJSON_GetObjectItemCaseSensitive(u->m, "const") ||
                 cJSON_GetObjectItemCaseSensitive(u->m, "enum");
    if (!strcmp(kw, "type")) {
        cJSON *b = branch_of(u, T_ANY);
        branch_add(u, b, set_type_bits(c, b, gen_type_bits(c, b) & ~u->tbits, 0));
    } else if (!strcmp(kw, "const") || !strcmp(kw, "enum")) {
        const cJSON *vals = k;
        if (!strcmp(kw, "const")) { /* one value as a list of one */
            cJSON *one = cJSON_CreateArray();
            cJSON_AddItemToArray(c->owned, one);
            cJSON_AddItemToArray(one, cJSON_Duplicate(k, 1));
            vals = one;
        }
        cJSON *b = branch_of(u, T_ANY);
        branch_add(u, b, cJSON_IsArray(vals) ? not_values(c, b, vals, T_ANY) : -1);
    } else if (finite) { /* the values of an enum beside the keywords below: not written */
        u->left_out = 1;
    } else if (!strcmp(kw, "required") && cJSON_IsArray(k)) {
        cJSON *b = branch_of(u, T_OBJ);
        if (b) branch_add(u, b, not_required(c, b, k, 0));
    } else if (!strcmp(kw, "properties") && cJSON_IsObject(k)) {
        for (const cJSON *x = k->child; x; x = x->next) not_property(u, x->string, x);
    } else if (!strcmp(kw, "items") && !cJSON_IsArray(k) &&
               !cJSON_GetObjectItemCaseSensitive(u->p, "prefixItems")) {
        not_items(u, k);
    } else if (!strcmp(kw, "not")) { /* not not x: x */
        cJSON *b = branch_of(u, T_ANY), *m = sc_merge(c, b, k);
        branch_add(u, m ? cJSON_Duplicate(m, 1) : NULL, m ? 0 : -1);
        cJSON_Delete(b);
    } else if (!strcmp(kw, "anyOf") && cJSON_IsArray(k) && not_shape(c, k, 0)) {
        cJSON *b = branch_of(u, T_ANY); /* none of the branches: not each */
        cJSON_AddItemToObject(cJSON_AddObjectToObject(b, "not"), "anyOf", cJSON_Duplicate(k, 1));
        branch_add(u, b, 0);
    } else if (sc_in_list(bounds, kw) && cJSON_IsNumber(k)) {
        int flags = 0; /* draft 4's exclusiveMinimum/Maximum true beside either: not written */
        for (int i = 0; i < 2; i++) {
            const char *x = i ? "exclusiveMinimum" : "exclusiveMaximum";
            flags |= cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(u->p, x)) ||
                     cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(u->m, x));
        }
        if (flags && strstr(kw, "imum")) u->left_out = 1;
        else not_bound(u, kw, k);
    } else {
        u->left_out = 1;
    }
}

/* 1 when tpd writes some of not x (x, or a keyword of it, as not_keyword does; for an anyOf
 * array, of each branch); 0 also where x is met by every value. */
static int not_shape(struct sc *c, const cJSON *x, int depth) {
    static const char *const kws[] = {"type",
                                      "const",
                                      "enum",
                                      "required",
                                      "not",
                                      "minItems",
                                      "maxItems",
                                      "minLength",
                                      "maxLength",
                                      "minProperties",
                                      "maxProperties",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      NULL};
    if (cJSON_IsArray(x)) { /* anyOf's branches */
        for (const cJSON *y = x->child; y; y = y->next)
            if (!not_shape(c, y, depth + 1)) return 0;
        return x->child != NULL;
    }
    const cJSON *f = sc_flat(c, x, 0);
    if (!f) c->err[0] = 0;
    if (!f || depth > 8 || cJSON_IsTrue(f)) return 0;
    if (!cJSON_IsObject(f)) return cJSON_IsFalse(f);
    for (const cJSON *k = f->child; k; k = k->next) {
        if (!sc_is_validity(f, k->string)) continue;
        if (sc_in_list(kws, k->string)) return 1;
        if (!strcmp(k->string, "properties") && cJSON_IsObject(k))
            for (const cJSON *y = k->child; y; y = y->next)
                if (not_shape(c, y, depth + 1)) return 1;
        if ((!strcmp(k->string, "items") && cJSON_IsObject(k)) ||
            (!strcmp(k->string, "anyOf") && cJSON_IsArray(k)))
            if (not_shape(c, k, depth + 1)) return 1;
    }
    return 0;
}

/* m narrowed by not p, p's keywords one branch each (a new schema: their anyOf, or the one
 * branch), or NULL with err where none can be written. */
static const cJSON *not_union(struct sc *c, const cJSON *m, const cJSON *p, int tbits) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(c->owned, o);
    struct not_union u = {c, m, p, tbits, cJSON_AddArrayToObject(o, "anyOf"), 0};
    for (const cJSON *k = p->child; k; k = k->next)
        if (sc_is_validity(p, k->string)) not_keyword(&u, k);
    int n = cJSON_GetArraySize(u.any);
    if ((c->not_branches += n) > NOT_BRANCHES_MAX)
        return sc_serr(c, "%s", "not: more than 4096 branches to write"), NULL;
    if (n == 0 && u.left_out)
        return sc_serr(c, "%s",
                       "not: only {type}, {enum}, {const}, {required}, {properties}, {items}, "
                       "{not}, anyOf, bounds and counts are supported"),
               NULL;
    if (n == 0)
        return sc_serr(c, "%s", "unsatisfiable schema: every value meets the 'not' schema"), NULL;
    if (n > 1) return o;
    cJSON *one = cJSON_DetachItemFromArray(u.any, 0);
    cJSON_AddItemToArray(c->owned, one);
    return one;
}

/* 1 when not p narrows a schema in place (p flat: false, {type}, {enum}/{const} with or
 * without type, {required} with or without type object, or one met by every value, which
 * not_piece refuses), 0 when it is a union of branches (not_union). */
static int not_in_place(const cJSON *p) {
    if (!cJSON_IsObject(p) || !sc_has_constraints(p)) return 1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(p, "required");
    int vals = cJSON_GetObjectItemCaseSensitive(p, "const") ||
               cJSON_GetObjectItemCaseSensitive(p, "enum");
    int n_kw = 0;
    for (const cJSON *k = p->child; k; k = k->next) n_kw += sc_is_validity(p, k->string);
    return (n_kw == 1 && t) || (vals && n_kw == 1 + (t != NULL)) ||
           (cJSON_IsArray(req) && n_kw == 1 + (t != NULL) && (!t || sc_type_bits(t) == T_OBJ));
}

/* m narrowed by not p (p flat, one piece of the not): m itself, or a new schema where the
 * complement is a union (not_union); NULL with err. */
static const cJSON *not_piece(struct sc *c, cJSON *m, const cJSON *p) {
    if (cJSON_IsFalse(p)) return m;
    if (cJSON_IsTrue(p) || !sc_has_constraints(p))
        return sc_serr(c, "%s", "unsatisfiable schema: 'not' of a schema that accepts everything"),
               NULL;
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
    if (vals && !cJSON_IsArray(vals)) return sc_serr(c, "%s", "'enum' must be an array"), NULL;
    int n_kw = 0;
    for (const cJSON *k = p->child; k; k = k->next) n_kw += sc_is_validity(p, k->string);
    int tb = sc_type_bits(t);
    if (t && !tb) return sc_serr(c, "%s", "not: 'type' must name JSON types"), NULL;
    if (n_kw == 1 && t) return set_type_bits(c, m, gen_type_bits(c, m) & ~tb, 0) < 0 ? NULL : m;
    if (vals && n_kw == 1 + (t != NULL)) return not_values(c, m, vals, tb) < 0 ? NULL : m;
    if (cJSON_IsArray(req) && n_kw == 1 + (t != NULL) && (!t || tb == T_OBJ))
        return not_required(c, m, req, t != NULL) < 0 ? NULL : m;
    return not_union(c, m, p, t ? tb : T_ANY);
}

/* n's pieces (n flat) into out, copies: its anyOf's branches, flat, nested anyOfs of one
 * keyword spliced (not (a or b) = not a and not b); n itself when it has other keywords. */
static int not_pieces(struct sc *c, const cJSON *n, cJSON *out, int depth) {
    const cJSON *any = cJSON_IsObject(n) ? cJSON_GetObjectItemCaseSensitive(n, "anyOf") : NULL;
    int n_kw = 0;
    for (const cJSON *k = cJSON_IsObject(n) ? n->child : NULL; k; k = k->next)
        n_kw += sc_is_validity(n, k->string);
    if (!cJSON_IsArray(any) || n_kw != 1) {
        cJSON_AddItemToArray(out, cJSON_Duplicate(n, 1));
        return 0;
    }
    if (depth > GRAMMAR_MAX_NESTING) return sc_serr(c, "%s", "not: anyOf nested too deep");
    for (const cJSON *x = any->child; x; x = x->next) {
        const cJSON *p = sc_flat(c, x, 0);
        if (!p || not_pieces(c, p, out, depth + 1) < 0) return -1;
    }
    return 0;
}

/* s narrowed by its not: the pieces that narrow in place first, then the first union, the
 * other unions left as its not (each branch is lowered again). */
const cJSON *sc_lower_not(struct sc *c, const cJSON *s) {
    static const char *const drop[] = {"not", NULL}, *const none[] = {NULL};
    cJSON *m = sc_without(c, s, drop), *pieces = cJSON_CreateArray(), *rest = NULL;
    cJSON_AddItemToArray(c->owned, pieces);
    const cJSON *n = sc_flat(c, cJSON_GetObjectItemCaseSensitive(s, "not"), 0), *r = m;
    if (!n || not_pieces(c, n, pieces, 0) < 0) return NULL;
    for (const cJSON *p = pieces->child; p; p = p->next)
        if (not_in_place(p) && !not_piece(c, m, p)) return NULL;
    for (const cJSON *p = pieces->child; p; p = p->next) {
        if (not_in_place(p)) continue;
        if (r == m) {
            if (!(r = not_piece(c, m, p))) return NULL;
            continue;
        }
        if (!rest) rest = cJSON_CreateArray();
        cJSON_AddItemToArray(rest, cJSON_Duplicate(p, 1));
    }
    if (!rest) return r;
    cJSON *w = sc_without(c, r, none);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(w, "not"), "anyOf", rest);
    return w;
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
