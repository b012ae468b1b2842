/* JSON Schema -> GBNF, objects: the object keywords lowered to
 * properties/required/additionalProperties and the grammar of an object (key rules:
 * schema_keys.c). */
#define PCRE2_CODE_UNIT_WIDTH 8

/* optional properties with dependency schemas written both ways (split_on), at most */
#define SPLIT_DEPS 3
#include <cjson/cJSON.h>
#include <math.h>
#include <pcre2.h>
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
#include "schema_keys.h"
#include "schema_object.h"
#include "schema_members.h"
#include "schema_merge.h"
#include "schema_oneof.h"

/* ---- objects ---- */

/* ---- object keywords lowered to properties / required / additionalProperties ----
 * patternProperties, propertyNames, dependentRequired, dependentSchemas and dependencies
 * become a narrower schema in the keywords gen_object writes, so that every object it
 * writes satisfies them (a subset of what they allow): pattern schemas join the declared
 * properties whose names match (PCRE2, searched as JSON Schema does); with propertyNames no
 * extra keys are written, with patternProperties only keys of the patterns (PATTERN_EXTRA,
 * for gen_extra; none with NO_PATTERN_EXTRA); a property with dependencies makes them
 * required (or, where they cannot be written or only as an extra key, is itself left out;
 * between optional declared properties gen_object meets them exactly: DEPENDS); a
 * dependentSchemas property is left out unless required (then its schema joins).
 * minProperties and maxProperties stay as they are: gen_object counts the properties it
 * writes (schema_members.c). */

int sc_name_matches(struct sc *c, const char *pattern, const char *name) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo,
                                   NULL);
    if (!re) return sc_serr(c, "patternProperties: the pattern '%s' does not compile", pattern);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)name, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (rc < -1) return sc_serr(c, "patternProperties: matching '%s' failed", pattern);
    return rc >= 0;
}

int sc_is_required(const cJSON *m, const char *name) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "required");
    for (const cJSON *x = cJSON_IsArray(r) ? r->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && strcmp(x->valuestring, name) == 0) return 1;
    return 0;
}

static void add_required(cJSON *m, const char *name) {
    if (sc_is_required(m, name)) return;
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

/* 1 when gen_object writes extra keys: additionalProperties absent (true, as the
 * specification says; the closed reading has made it false first: close_default), true or
 * a schema */
static int extras_allowed(const cJSON *m) {
    return !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m, "additionalProperties"));
}

/* 1 when gen_object may write name (declared and not false, or as an extra key) */
int sc_writable(const cJSON *m, const char *name) {
    const cJSON *p = sc_prop_schema(m, name);
    return p ? !cJSON_IsFalse(p) : extras_allowed(m);
}

int sc_forbid(struct sc *c, cJSON *m, const char *name, const char *why) {
    if (sc_is_required(m, name))
        return err_set(
            c->err, "JSON Schema: unsatisfiable schema: required property '%s' is ruled out by %s",
            name, why);
    cJSON *p = props_of(m), *x = cJSON_GetObjectItemCaseSensitive(p, name);
    if (x) cJSON_ReplaceItemInObjectCaseSensitive(p, name, cJSON_CreateFalse());
    else cJSON_AddFalseToObject(p, name);
    return 0;
}

/* Declares name, an extra key of m, with the schema it has as one (true where a pattern
 * matches it: those schemas join declared names later; else additionalProperties). 1, 0
 * when additionalProperties rules it out, -1 with err. */
static int declare_extra(struct sc *c, cJSON *m, const char *name) {
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(m, "patternProperties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    int matched = 0;
    for (const cJSON *x = cJSON_IsObject(pp) ? pp->child : NULL; x && !matched; x = x->next) {
        int k = sc_name_matches(c, x->string, name);
        if (k < 0) return -1;
        matched = k;
    }
    if (!matched && cJSON_IsFalse(addl)) return 0;
    cJSON_AddItemToObject(props_of(m), name,
                          !matched && addl ? cJSON_Duplicate(addl, 1) : cJSON_CreateTrue());
    return 1;
}

/* Declares every required name (its schema: the pattern schemas it matches, else
 * additionalProperties) and writes no other key. */
static int close_extras(struct sc *c, cJSON *m) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required");
    cJSON *p = props_of(m);
    for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(p, r->valuestring)) continue;
        int k = declare_extra(c, m, r->valuestring);
        if (k < 0) return -1;
        if (k == 0)
            return err_set(
                c->err,
                "JSON Schema: unsatisfiable schema: required property '%s' is not allowed by "
                "additionalProperties",
                r->valuestring);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
    cJSON_AddFalseToObject(m, "additionalProperties");
    return 0;
}

/* 1 when the names dependency d lists are all declared properties (gen_object can then
 * write d's property exactly: only beside them) */
static int all_declared(const cJSON *m, const cJSON *d) {
    for (const cJSON *n = d->child; n; n = n->next) {
        const cJSON *p = cJSON_IsString(n) ? sc_prop_schema(m, n->valuestring) : NULL;
        if (!p || cJSON_IsFalse(p)) return 0;
    }
    return 1;
}

/* Into out, DEPENDS: m's dependencies on names (dependentRequired, array-valued
 * dependencies) of declared optional properties, for gen_object to meet (those of required
 * properties are met by their names made required). */
static void add_depends(const cJSON *m, cJSON *out) {
    cJSON *dep = NULL;
    for (int round = 0; round < 2; round++) {
        const cJSON *dr = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                    : "dependentRequired");
        for (const cJSON *d = cJSON_IsObject(dr) ? dr->child : NULL; d; d = d->next) {
            const cJSON *p = sc_prop_schema(m, d->string);
            if (!cJSON_IsArray(d) || !p || cJSON_IsFalse(p) || sc_is_required(m, d->string))
                continue;
            if (!dep) dep = cJSON_AddObjectToObject(out, DEPENDS);
            cJSON *names = cJSON_GetObjectItemCaseSensitive(dep, d->string);
            if (!names) names = cJSON_AddArrayToObject(dep, d->string);
            for (const cJSON *n = d->child; n; n = n->next)
                if (cJSON_IsString(n) && !sc_is_required(m, n->valuestring))
                    cJSON_AddItemToArray(names, cJSON_CreateString(n->valuestring));
        }
    }
}

/* Dependencies on names (dependentRequired, array-valued dependencies) of m: those of a
 * required property made required; an optional property left out where they cannot all be
 * written or it could only come as an extra key; names of an optional property that are
 * extra keys declared (with the schema they have as such), so that gen_object writes them
 * beside it and only there (DEPENDS), as for declared names. 0, or -1 with err. */
static int lower_depends(struct sc *c, cJSON *m) {
    for (int changed = 1, rounds = 0; changed && rounds < 1000; rounds++) {
        changed = 0;
        for (int round = 0; round < 2; round++) {
            const cJSON *dr = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                        : "dependentRequired");
            for (const cJSON *d = cJSON_IsObject(dr) ? dr->child : NULL; d; d = d->next) {
                if (!cJSON_IsArray(d) || !sc_writable(m, d->string)) continue;
                int ok = sc_prop_schema(m, d->string) || sc_is_required(m, d->string);
                for (const cJSON *n = d->child; n && ok; n = n->next)
                    ok &= cJSON_IsString(n) && sc_writable(m, n->valuestring);
                if (!ok) { /* left out, its names not needed */
                    if (sc_forbid(c, m, d->string, "dependentRequired") < 0) return -1;
                    changed = 1;
                    continue;
                }
                if (!sc_is_required(m, d->string) && all_declared(m, d))
                    continue;                        /* written exactly by gen_object (DEPENDS) */
                if (!sc_is_required(m, d->string)) { /* its names declared, DEPENDS then */
                    for (const cJSON *n = d->child; n; n = n->next)
                        if (!sc_prop_schema(m, n->valuestring) &&
                            declare_extra(c, m, n->valuestring) < 0)
                            return -1;
                    changed = 1;
                    continue;
                }
                for (const cJSON *n = d->child; n; n = n->next)
                    if (!sc_is_required(m, n->valuestring))
                        add_required(m, n->valuestring), changed = 1;
            }
        }
    }
    return 0;
}

/* 1 when the string name satisfies schema ps, 0 when not, -1 (err) when tpd cannot tell. */
static int name_valid(struct sc *c, const cJSON *ps, const char *name) {
    if (!(ps = sc_flat(c, ps, 0))) return -1;
    if (cJSON_IsBool(ps)) return cJSON_IsTrue(ps);
    static const char *const known[] = {"type",      "enum",    "const", "minLength",
                                        "maxLength", "pattern", NULL};
    for (const cJSON *k = ps->child; k; k = k->next)
        if (sc_is_validity(ps, k->string) && !sc_in_list(known, k->string))
            return sc_serr(c, "propertyNames: '%s' is not supported there", k->string);
    cJSON *v = cJSON_CreateString(name);
    int ok = sc_might_accept(c, ps, v, 0); /* exact for these keywords but pattern */
    cJSON_Delete(v);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(ps, "pattern");
    if (ok && cJSON_IsString(pat)) ok = sc_name_matches(c, pat->valuestring, name);
    return ok;
}

/* The declared properties of m whose names propertyNames pn rejects, left out. 0, or -1
 * with err. */
static int forbid_bad_names(struct sc *c, cJSON *m, const cJSON *pn) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
    for (cJSON *x = cJSON_IsObject(p) ? p->child : NULL, *nx; x; x = nx) {
        nx = x->next; /* forbid replaces x in place */
        int k = cJSON_IsFalse(x) ? 1 : name_valid(c, pn, x->string);
        if (k < 0 || (k == 0 && sc_forbid(c, m, x->string, "propertyNames") < 0)) return -1;
    }
    return 0;
}

/* m's propertyNames (flat) when it says nothing but that keys are strings (dropped) or
 * that they match one pattern: with no patternProperties and additionalProperties true or
 * absent, or no declared property, the pattern's keys are the extra keys (patternProperties
 * {P: additionalProperties}, additionalProperties false) and the declared names it does not
 * match are left out. Else propertyNames stays (no extra keys written). 0, or -1 with err. */
static int names_as_patterns(struct sc *c, cJSON *m) {
    const cJSON *pn0 = cJSON_GetObjectItemCaseSensitive(m, "propertyNames");
    if (!pn0) return 0;
    const cJSON *pn = sc_flat(c, pn0, 0);
    if (!pn) return -1;
    if (!cJSON_IsObject(pn) && !cJSON_IsTrue(pn)) return 0;
    const cJSON *pat = NULL, *addl = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    for (const cJSON *k = cJSON_IsObject(pn) ? pn->child : NULL; k; k = k->next) {
        if (!sc_is_validity(pn, k->string)) continue;
        if (strcmp(k->string, "pattern") == 0 && cJSON_IsString(k)) pat = k;
        else if (strcmp(k->string, "type") != 0 || !(sc_type_bits(k) & T_STR)) return 0;
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
    if (pat && (cJSON_GetObjectItemCaseSensitive(m, "patternProperties") ||
                (cJSON_IsObject(p) && p->child && addl && !cJSON_IsTrue(addl))))
        return 0;
    if (pat && forbid_bad_names(c, m, pn) < 0) return -1;
    if (pat) {
        cJSON *pp = cJSON_AddObjectToObject(m, "patternProperties");
        cJSON_AddItemToObject(pp, pat->valuestring,
                              addl ? cJSON_Duplicate(addl, 1) : cJSON_CreateTrue());
        cJSON_DeleteItemFromObjectCaseSensitive(m, "additionalProperties");
        cJSON_AddFalseToObject(m, "additionalProperties");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "propertyNames");
    return 0;
}

/* Optional properties with a dependency schema (dependentSchemas, schema-valued
 * dependencies) that m may write: how many, and the first's name in *first. */
static int optional_schema_deps(const cJSON *m, const char **first) {
    int n = 0;
    for (int round = 0; round < 2; round++) {
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                    : "dependentSchemas");
        for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next) {
            int opt = !cJSON_IsArray(d) && !cJSON_IsTrue(d) && !sc_is_required(m, d->string) &&
                      sc_writable(m, d->string);
            if (opt && !n++) *first = d->string;
        }
    }
    return n;
}

/* m as the union of its objects without the optional property name and those with it
 * (required, so that its dependency schema is joined when sc_gen lowers that branch). The
 * branches exclude each other; each is lowered again, so an object with k such properties
 * becomes up to 2^k branches (k <= SPLIT_DEPS). */
static const cJSON *split_on(struct sc *c, const cJSON *m, const char *name) {
    cJSON *without = cJSON_Duplicate(m, 1), *with = cJSON_Duplicate(m, 1);
    cJSON *u = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(u, "anyOf");
    cJSON_AddItemToArray(c->owned, u);
    cJSON_AddItemToArray(any, without);
    cJSON_AddItemToArray(any, with);
    cJSON_AddStringToObject(u, "type", "object");
    cJSON_AddTrueToObject(u, SPLIT_DEP);
    add_required(with, name);
    return sc_forbid(c, without, name, "dependentSchemas") < 0 ? NULL : u;
}

/* The dependency schema d's one property and its values when d is {"properties": {P:
 * {"enum": [...]}}} (or a const), nothing else; NULL if not. */
static const cJSON *narrowed(const cJSON *d, const char **p) {
    const cJSON *props = NULL, *vals = NULL;
    for (const cJSON *k = cJSON_IsObject(d) ? d->child : NULL; k; k = k->next) {
        if (!sc_is_validity(d, k->string)) continue;
        if (props || strcmp(k->string, "properties")) return NULL;
        props = k;
    }
    const cJSON *q = cJSON_IsObject(props) ? props->child : NULL;
    if (!q || q->next || !cJSON_IsObject(q)) return NULL;
    for (const cJSON *k = q->child; k; k = k->next) {
        if (!sc_is_validity(q, k->string)) continue;
        int is_vals = !strcmp(k->string, "const") ||
                      (!strcmp(k->string, "enum") && cJSON_IsArray(k));
        if (vals || !is_vals) return NULL;
        vals = k;
    }
    *p = q->string;
    return vals;
}

/* 1 when v is among vals (an enum's array, or a const) */
static int among(const cJSON *vals, const cJSON *v) {
    for (const cJSON *x = cJSON_IsArray(vals) ? vals->child : vals; x;
         x = cJSON_IsArray(vals) ? x->next : NULL)
        if (cJSON_Compare(x, v, 1)) return 1;
    return 0;
}

/* The property P that every optional dependency schema of m narrows to some of its values
 * (narrowed), P's own schema an enum or const of at most 64 values, and those values (the
 * enum's array or the const) in *vals; NULL where m's dependency schemas are not all so. */
static const char *shared_enum_dep(struct sc *c, const cJSON *m, const cJSON **vals) {
    const char *p = NULL;
    for (int round = 0; round < 2; round++) {
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                    : "dependentSchemas");
        for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next) {
            const char *q = NULL;
            if (cJSON_IsArray(d) || cJSON_IsTrue(d) || sc_is_required(m, d->string) ||
                !sc_writable(m, d->string))
                continue;
            if (!narrowed(d, &q) || (p && strcmp(p, q)) || !strcmp(q, d->string)) return NULL;
            p = q;
        }
    }
    const cJSON *ps = p && sc_writable(m, p) ? sc_prop_schema(m, p) : NULL;
    if (ps && !(ps = sc_flat(c, ps, 0))) c->err[0] = 0;
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(ps, "const");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(ps, "enum");
    *vals = k ? k : e;
    if (!k && !(cJSON_IsArray(e) && cJSON_GetArraySize(e) <= 64)) return NULL;
    return p;
}

/* m with its optional dependency schemas taken out (shared_enum_dep's; each branch of
 * split_by_value meets them in its own way) */
static cJSON *without_deps(const cJSON *m) {
    cJSON *b = cJSON_Duplicate(m, 1);
    for (int round = 0; round < 2; round++) {
        cJSON *ds = cJSON_GetObjectItemCaseSensitive(b,
                                                     round ? "dependencies" : "dependentSchemas");
        for (cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL, *nx; d; d = nx) {
            nx = d->next;
            if (!cJSON_IsArray(d) && !cJSON_IsTrue(d) && !sc_is_required(m, d->string))
                cJSON_DeleteItemFromObjectCaseSensitive(ds, d->string);
        }
    }
    return b;
}

/* More optional dependency schemas than split_on takes, each of which narrows one shared
 * property P to some of its values (shared_enum_dep): m as the union of its objects without
 * P, and for each value v of P, those with P = v, where the properties whose dependency
 * does not admit v are left out. The branches exclude each other and are exact. m itself
 * where its dependencies are not of that form. */
static const cJSON *split_by_value(struct sc *c, const cJSON *m) {
    const cJSON *vals = NULL;
    const char *p = shared_enum_dep(c, m, &vals);
    if (!p) return m;
    cJSON *u = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(u, "anyOf");
    cJSON_AddItemToArray(c->owned, u);
    cJSON_AddStringToObject(u, "type", "object");
    for (const cJSON *v = cJSON_IsArray(vals) ? vals->child : vals; v;
         v = cJSON_IsArray(vals) ? v->next : NULL) {
        cJSON *b = without_deps(m), *one = cJSON_CreateObject();
        cJSON_AddItemToArray(any, b);
        cJSON *all = cJSON_AddArrayToObject(one, "allOf"), *is = cJSON_CreateObject();
        cJSON_AddItemToArray(all, cJSON_Duplicate(sc_prop_schema(m, p), 1));
        cJSON_AddItemToObject(is, "const", cJSON_Duplicate(v, 1));
        cJSON_AddItemToArray(all, is);
        cJSON_ReplaceItemInObjectCaseSensitive(props_of(b), p, one);
        add_required(b, p);
        for (int round = 0; round < 2; round++) {
            const cJSON *ds = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                        : "dependentSchemas");
            for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next) {
                const char *q;
                const cJSON *admit = narrowed(d, &q);
                if (admit && !sc_is_required(m, d->string) && sc_writable(m, d->string) &&
                    !among(admit, v) && sc_forbid(c, b, d->string, "dependencies") < 0)
                    return NULL;
            }
        }
    }
    if (!sc_is_required(m, p)) {
        cJSON *b = without_deps(m);
        cJSON_AddItemToArray(any, b);
        if (sc_forbid(c, b, p, "dependencies") < 0) return NULL;
    }
    return u;
}

/* c->closed: an object with properties and no additionalProperties is written as if it had
 * additionalProperties false, its required names declared (close_extras), before anything
 * else is lowered, so that every keyword below sees the keys it may write. A subset of what
 * the schema accepts, so every check made on the open reading (oneOf's) still holds. */
static const cJSON *close_default(struct sc *c, const cJSON *s) {
    if (!c->closed || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s, "properties")) ||
        cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"))
        return s;
    static const char *const none[] = {NULL};
    cJSON *m = sc_without(c, s, none);
    return close_extras(c, m) < 0 ? NULL : m;
}

const cJSON *sc_lower_object(struct sc *c, const cJSON *s) {
    if (!(s = close_default(c, s))) return NULL;
    static const char *const kws[] = {"dependentRequired", "dependentSchemas", "dependencies",
                                      "patternProperties", "propertyNames",    NULL};
    int any = 0;
    for (int i = 0; kws[i]; i++) any |= cJSON_GetObjectItemCaseSensitive(s, kws[i]) != NULL;
    if (!any) return s;
    static const char *const none[] = {NULL};
    cJSON *m = sc_without(c, s, none);
    /* beside patternProperties, a name with dependencies that only a pattern's key could
     * bring is left out (so the patterns' keys are none of them) */
    for (int i = 0;
         i < 3 && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s, "patternProperties")); i++) {
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
        for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next)
            if (!sc_prop_schema(m, d->string) && !sc_is_required(m, d->string))
                sc_forbid(c, m, d->string, kws[i]);
    }
    /* dependentSchemas (and schema-valued dependencies): joined where required; an optional
     * property's written both ways (split_on) while there are few, else left out */
    const char *opt = NULL;
    int n_opt = optional_schema_deps(m, &opt);
    if (n_opt <= SPLIT_DEPS && opt) return split_on(c, m, opt);
    const cJSON *by_value = n_opt > SPLIT_DEPS ? split_by_value(c, m) : m;
    if (by_value != m) return by_value;
    for (int round = 0; round < 2; round++) {
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                    : "dependentSchemas");
        for (const cJSON *d = cJSON_IsObject(ds) ? ds->child : NULL; d; d = d->next) {
            if (cJSON_IsArray(d) || cJSON_IsTrue(d)) continue;
            if (sc_is_required(m, d->string)) {
                static const char *const drop[] = {"dependentSchemas", NULL};
                cJSON *x = sc_merge(c, sc_without(c, m, drop), d);
                if (!x) return NULL;
                m = x;
            } else if (sc_writable(m, d->string) &&
                       sc_forbid(c, m, d->string, "dependentSchemas") < 0) {
                return NULL;
            }
        }
    }
    if (names_as_patterns(c, m) < 0) return NULL;
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(m, "patternProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(m, "propertyNames");
    if (pp && !cJSON_IsObject(pp))
        return sc_serr(c, "%s", "'patternProperties' must be an object"), NULL;
    /* the keys of patternProperties are written as extra keys (gen_extra) unless another
     * keyword here limits the keys */
    int pattern_keys = pp && pp->child && !pn &&
                       !cJSON_GetObjectItemCaseSensitive(m, NO_PATTERN_EXTRA);
    const cJSON *addl0 = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    cJSON *unmatched = pattern_keys && !cJSON_IsFalse(addl0)
                           ? (addl0 ? cJSON_Duplicate(addl0, 1) : cJSON_CreateTrue())
                           : NULL;
    if (unmatched) cJSON_AddItemToArray(c->owned, unmatched);
    if ((pp || pn) && close_extras(c, m) < 0) return NULL;
    cJSON *p = cJSON_GetObjectItemCaseSensitive(m, "properties");
    for (cJSON *x = cJSON_IsObject(p) ? p->child : NULL; x && pp;
         x = x->next) /* pattern schemas join */
        for (const cJSON *q = pp->child; q; q = q->next) {
            int k = sc_name_matches(c, q->string, x->string);
            if (k < 0) return NULL;
            if (k && !cJSON_IsFalse(x)) {
                cJSON *both = sc_all_of2(x, q);
                cJSON_ReplaceItemInObjectCaseSensitive(p, x->string, both);
                x = both;
            }
        }
    if (pn && forbid_bad_names(c, m, pn) < 0) return NULL;
    if (lower_depends(c, m) < 0) return NULL;
    static const char *const drop[] = {
        "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
        "propertyNames",     NO_PATTERN_EXTRA,   DEPENDS,        NULL};
    cJSON *out = sc_without(c, m, drop);
    add_depends(m, out);
    if (pattern_keys) cJSON_AddItemToObject(out, PATTERN_EXTRA, cJSON_Duplicate(pp, 1));
    if (unmatched) cJSON_AddItemToObject(out, PATTERN_ADDL, cJSON_Duplicate(unmatched, 1));
    return out;
}

/* sc_gen_object's property list: declared properties, then required names not declared;
 * -1 on an error (*plp, grown here, is the caller's to free either way). */
static int collect_props(struct sc *c, const cJSON *props, const cJSON *req, const cJSON *addl,
                         struct obj_prop **plp, int *np) {
    int n = 0, cap = 8;
    struct obj_prop *pl = *plp;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        if (cJSON_IsFalse(p)) continue;
        if (n == cap) pl = xrealloc(pl, sizeof *pl * (size_t)(cap *= 2));
        pl[n++] = (struct obj_prop){p->string, p, 0};
    }
    *plp = pl;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return sc_serr(c, "%s", "'required' must list strings");
        int k = 0;
        while (k < n && strcmp(pl[k].key, r->valuestring) != 0) k++;
        if (k == n) {
            if (props && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(props, r->valuestring)))
                return sc_serr(c, "unsatisfiable schema: required property '%s' is false",
                               r->valuestring);
            if (addl && cJSON_IsFalse(addl))
                return sc_serr(c,
                               "unsatisfiable schema: required property '%s' is not "
                               "allowed by additionalProperties",
                               r->valuestring);
            if (n == cap) *plp = pl = xrealloc(pl, sizeof *pl * (size_t)(cap *= 2));
            pl[n++] = (struct obj_prop){r->valuestring, addl ? addl : NULL, 0};
        }
        pl[k].required = 1;
    }
    *np = n;
    return 0;
}

/* sc_gen_object's extra keys: the rule of an entry (key, value) into entry, "" where there
 * is none. Their names are never a declared name (false ones included) nor a required one,
 * so no property escapes its own schema nor comes out twice; additionalProperties gives
 * their values, else the schema's patternProperties (lower_object) give keys and values. */
static int gen_extra(struct sc *c, const cJSON *s, const struct obj_prop *pl, int n, char *entry) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *pe = cJSON_GetObjectItemCaseSensitive(s, PATTERN_EXTRA);
    entry[0] = 0;
    if (!extras_allowed(s) && !cJSON_IsObject(pe)) return 0;
    int nn = 0;
    const char **names = xmalloc(sizeof *names *
                                 ((size_t)n + (size_t)cJSON_GetArraySize(props) + 1));
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) names[nn++] = p->string;
    for (int k = 0; k < n; k++)
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, pl[k].key)) names[nn++] = pl[k].key;
    struct sbuf e = {0};
    if (extras_allowed(s)) {
        char val[RN], key[RN];
        if (cJSON_IsObject(addl)) {
            if (sc_gen(c, addl, val) < 0) {
                free(names);
                return -1;
            }
        } else {
            snprintf(val, RN, "%s", c->j);
        }
        if (nn) sc_gen_key_not_in(c, names, nn, 0, key);
        else snprintf(key, RN, "%s-string", c->j);
        sbuf_addf(&e, "%s %s-ws \":\" %s-ws %s", key, c->j, c->j, val);
    } else {
        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(s, PATTERN_ADDL);
        int alts = sc_gen_pattern_keys(c, pe, ad, names, nn, &e);
        if (alts <= 0) {
            sbuf_free(&e);
            free(names);
            return alts;
        }
    }
    free(names);
    sc_new_rule(c, entry);
    sc_emit(c, entry, e.p);
    sbuf_free(&e);
    return 0;
}

/* sc_gen_object's values: each property's rule into vals[k] ("" for an optional property
 * left out); -1 on an error. */
static int gen_values(struct sc *c, const struct obj_prop *pl, int n, char (*vals)[RN]) {
    for (int k = 0; k < n; k++) {
        int depth = c->depth;
        if (!pl[k].schema) snprintf(vals[k], RN, "%s", c->j);
        else if (sc_gen(c, pl[k].schema, vals[k]) < 0) {
            /* an optional property no value satisfies can only be left out (as a false one;
             * extra keys never take its name) */
            if (!pl[k].required && strstr(c->err, "unsatisfiable schema")) {
                c->depth = depth;
                c->err[0] = 0;
                vals[k][0] = 0;
                continue;
            }
            return -1;
        }
    }
    return 0;
}

/* minProperties into *min and maxProperties into *max where s has them (non-negative
 * integers; beyond 10^9: no bound); 0, or -1 with err. */
static int count_bounds(struct sc *c, const cJSON *s, long *min, long *max) {
    static const char *const kws[] = {"minProperties", "maxProperties"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kws[i]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
            return sc_serr(c, "'%s' must be a non-negative integer", kws[i]);
        if (v->valuedouble <= 1e9) *(i ? max : min) = (long)v->valuedouble;
        else if (!i) return sc_serr(c, "%s", "unsatisfiable schema: minProperties above 10^9");
    }
    if (*max >= 0 && *min > *max)
        return sc_serr(c, "%s", "unsatisfiable schema: minProperties is above maxProperties");
    return 0;
}

/* 1 when sc_gen acts on a keyword of s before its type (a dependentSchemas schema merged
 * in by lower_object can bring one: anyOf, oneOf, $ref...) */
static int dispatched(const cJSON *s) {
    static const char *const kws[] = {"anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "not",
                                      "if",
                                      "enum",
                                      "const",
                                      "unevaluatedProperties",
                                      "unevaluatedItems",
                                      NULL};
    for (int i = 0; kws[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, kws[i]) && sc_is_validity(s, kws[i])) return 1;
    return 0;
}

int sc_gen_object(struct sc *c, const cJSON *s, struct sbuf *b) {
    const cJSON *low = sc_lower_object(c, s);
    if (!low) return -1;
    if (low != s && dispatched(low)) { /* an object: the lowered schema, through sc_gen */
        cJSON *m = cJSON_Duplicate(low, 1);
        cJSON_AddItemToArray(c->owned, m);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "type");
        cJSON_AddStringToObject(m, "type", "object");
        char nm[RN];
        if (sc_gen(c, m, nm) < 0) return -1;
        sbuf_adds(b, nm);
        return 0;
    }
    s = low;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return sc_serr(c, "%s", "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return sc_serr(c, "%s", "'required' must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return sc_serr(c, "%s", "'additionalProperties' must be a boolean or a schema");
    int n = 0;
    struct obj_prop *pl = xmalloc(sizeof *pl * 8);
    int rc = -1;
    if (collect_props(c, props, req, addl, &pl, &n) < 0) goto out;
    char entry[RN];
    if (gen_extra(c, s, pl, n, entry) < 0) goto out;
    struct members mb = {
        pl, n, xcalloc((size_t)n + 1, RN), entry, cJSON_GetObjectItemCaseSensitive(s, DEPENDS),
        0,  -1};
    char nm[RN];
    rc = count_bounds(c, s, &mb.min, &mb.max);
    if (rc == 0) rc = gen_values(c, pl, n, mb.vals);
    if (rc == 0) rc = sc_gen_members(c, &mb, nm);
    free(mb.vals);
    if (rc == 0) sbuf_addf(b, "\"{\" %s-ws %s \"}\"", c->j, nm);
out:
    free(pl);
    return rc;
}
