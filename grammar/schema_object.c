/* JSON Schema -> GBNF, objects: the object keywords lowered to
 * properties/required/additionalProperties and the grammar of an object (key rules:
 * schema_keys.c). */
#define PCRE2_CODE_UNIT_WIDTH 8
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
#include "schema_merge.h"
#include "schema_oneof.h"

/* ---- objects ---- */

/* ---- object keywords lowered to properties / required / additionalProperties ----
 * patternProperties, propertyNames, dependentRequired, dependentSchemas, dependencies,
 * minProperties and maxProperties become a narrower schema in the keywords gen_object
 * writes, so that every object it writes satisfies them (a subset of what they allow):
 * pattern schemas join the declared properties whose names match (PCRE2, searched as JSON
 * Schema does); with propertyNames or maxProperties no extra keys are written, with
 * patternProperties only keys of the patterns (PATTERN_EXTRA, for gen_extra; none with
 * NO_PATTERN_EXTRA); a property with dependencies makes them
 * required (or, where they cannot be written or only as an extra key, is itself left out);
 * a dependentSchemas property is left out unless required
 * (then its schema joins); minProperties makes optional properties required in schema
 * order; maxProperties leaves optional ones out from the end. */

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
            int k = sc_name_matches(c, x->string, r->valuestring);
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
    static const char *const kws[] = {
        "dependentRequired", "dependentSchemas",  "dependencies",  "minProperties",
        "maxProperties",     "patternProperties", "propertyNames", NULL};
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
    /* dependentSchemas (and schema-valued dependencies): joined where required, else left out */
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
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(m, "patternProperties");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(m, "propertyNames");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(m, "maxProperties");
    if (pp && !cJSON_IsObject(pp))
        return sc_serr(c, "%s", "'patternProperties' must be an object"), NULL;
    /* the keys of patternProperties are written as extra keys (gen_extra) unless another
     * keyword here limits the keys */
    int pattern_keys = pp && pp->child && !pn && !mx &&
                       !cJSON_GetObjectItemCaseSensitive(m, NO_PATTERN_EXTRA);
    const cJSON *addl0 = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
    cJSON *unmatched = pattern_keys && !cJSON_IsFalse(addl0)
                           ? (addl0 ? cJSON_Duplicate(addl0, 1) : cJSON_CreateTrue())
                           : NULL;
    if (unmatched) cJSON_AddItemToArray(c->owned, unmatched);
    if ((pp || pn || mx) && close_extras(c, m) < 0) return NULL;
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
    for (cJSON *x = cJSON_IsObject(p) && pn ? p->child : NULL, *nx; x; x = nx) {
        nx = x->next; /* forbid replaces x in place */
        int k = cJSON_IsFalse(x) ? 1 : name_valid(c, pn, x->string);
        if (k < 0 || (k == 0 && sc_forbid(c, m, x->string, "propertyNames") < 0)) return NULL;
    }
    /* dependencies on names: made required, or the property left out; then minProperties */
    for (int pass = 0; pass < 2; pass++) {
        for (int changed = 1, rounds = 0; changed && rounds < 1000; rounds++) {
            changed = 0;
            for (int round = 0; round < 2; round++) {
                const cJSON *dr = cJSON_GetObjectItemCaseSensitive(m, round ? "dependencies"
                                                                            : "dependentRequired");
                for (const cJSON *d = cJSON_IsObject(dr) ? dr->child : NULL; d; d = d->next) {
                    if (!cJSON_IsArray(d) || !sc_writable(m, d->string)) continue;
                    if (!sc_prop_schema(m, d->string) && !sc_is_required(m, d->string)) {
                        /* only an extra key could bring it: left out, its names not needed */
                        if (sc_forbid(c, m, d->string, "dependentRequired") < 0) return NULL;
                        changed = 1;
                        continue;
                    }
                    int ok = 1;
                    for (const cJSON *n = d->child; n; n = n->next)
                        ok &= cJSON_IsString(n) && sc_writable(m, n->valuestring);
                    if (!ok) {
                        if (sc_forbid(c, m, d->string, "dependentRequired") < 0) return NULL;
                        changed = 1;
                        continue;
                    }
                    if (!sc_is_required(m, d->string) && all_declared(m, d))
                        continue; /* written exactly by gen_object (DEPENDS, below) */
                    for (const cJSON *n = d->child; n; n = n->next)
                        if (!sc_is_required(m, n->valuestring))
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
            if (!cJSON_IsFalse(x) && !sc_is_required(m, x->string))
                add_required(m, x->string), have++;
        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(m, "additionalProperties");
        int declared = 0;
        for (const cJSON *x = cJSON_IsObject(p) ? p->child : NULL; x; x = x->next)
            declared += !cJSON_IsFalse(x);
        if (have == 0 && mn->valuedouble <= 1 && !declared &&
            (!cJSON_IsFalse(ad) || pattern_keys)) {
            /* one extra key (a pattern's), at least: exact; refused if none can be written */
            cJSON_AddTrueToObject(m, MIN_EXTRA);
            have = 1;
        }
        if (have < mn->valuedouble)
            return sc_serr(
                       c, "%s",
                       "minProperties above the properties tpd can write (it writes no extra keys "
                       "to reach it)"),
                   NULL;
    }
    if (mx) {
        int req = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "required")), n = 0;
        p = cJSON_GetObjectItemCaseSensitive(m, "properties");
        if (req > mx->valuedouble)
            return sc_serr(c, "%s",
                           "unsatisfiable schema: more required properties than "
                           "maxProperties"),
                   NULL;
        for (const cJSON *x = p->child; x; x = x->next) n += !cJSON_IsFalse(x);
        for (int k = cJSON_GetArraySize(p) - 1; k >= 0 && n > mx->valuedouble;
             k--) { /* from the end */
            cJSON *x = cJSON_GetArrayItem(p, k);
            if (!cJSON_IsFalse(x) && !sc_is_required(m, x->string)) {
                cJSON_ReplaceItemInObjectCaseSensitive(p, x->string, cJSON_CreateFalse());
                n--;
            }
        }
    }
    static const char *const drop[] = {
        "dependentRequired", "dependentSchemas", "dependencies",   "minProperties", "maxProperties",
        "patternProperties", "propertyNames",    NO_PATTERN_EXTRA, DEPENDS,         NULL};
    cJSON *out = sc_without(c, m, drop);
    add_depends(m, out);
    if (pattern_keys) cJSON_AddItemToObject(out, PATTERN_EXTRA, cJSON_Duplicate(pp, 1));
    if (unmatched) cJSON_AddItemToObject(out, PATTERN_ADDL, cJSON_Duplicate(unmatched, 1));
    return out;
}

/* One property sc_gen_object writes: declared, or required and not declared. */
struct obj_prop {
    const char *key;
    const cJSON *schema;
    int required;
};

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

/* sc_gen_object's states R_k(f, w): properties k.. still to come, f = nothing written yet (no
 * comma needed), w = which of the properties in dependencies (bits, rel) were written, as far
 * as a later property's dependencies still ask (need: those property k needs written before
 * it; owed: those whose dependencies name k, so that k cannot be left out once one is). */
#define DEP_BITS 16
#define DEP_STATES 2048
struct ostates {
    const struct obj_prop *pl;
    int n;
    char (*vals)[RN]; /* "": the property is never written */
    const char *base, *entry;
    int min_extra;
    int *rel;                     /* property k's bit, -1: none */
    unsigned *need, *owed, *live; /* live[k]: bits that matter at k and after */
    int n_states, cap;
    struct {
        int k, f;
        unsigned w;
    } * st;
};

static void state_name(const struct ostates *o, int k, int f, unsigned w, char *nm, size_t len) {
    if (w) snprintf(nm, len, "%s-%d-%d-w%u", o->base, k, f, w);
    else snprintf(nm, len, "%s-%d-%d", o->base, k, f);
}

/* The state (k, f, w), its w reduced to the bits still asked; added to o's list unless
 * there. -1 when there are too many. */
static int state_ref(struct ostates *o, int k, int f, unsigned w, char *nm, size_t len) {
    w &= o->live[k];
    state_name(o, k, f, w, nm, len);
    int plain = 2 * (o->n + 1); /* the states without bits come first, all of them */
    if (!w && o->n_states >= plain) return 0;
    for (int i = plain; i < o->n_states; i++)
        if (o->st[i].k == k && o->st[i].f == f && o->st[i].w == w) return 0;
    if (o->n_states == plain + DEP_STATES) return -1;
    if (o->n_states == o->cap) o->st = xrealloc(o->st, sizeof *o->st * (size_t)(o->cap *= 2));
    o->st[o->n_states].k = k;
    o->st[o->n_states].f = f;
    o->st[o->n_states++].w = w;
    return 0;
}

/* The rule of state (k, f, w) into r; -1 when there are too many states. */
static int gen_rest_rule(struct sc *c, struct ostates *o, int k, int f, unsigned w,
                         struct sbuf *r) {
    const struct obj_prop *pl = o->pl;
    char nx[RN + 48];
    if (k == o->n) {
        if (o->entry[0]) {
            char sep[RN + 16] = "";
            if (!f) snprintf(sep, sizeof sep, "\",\" %s-ws ", c->j);
            sbuf_addf(r, "(%s%s %s-ws (\",\" %s-ws %s %s-ws)*)%s", sep, o->entry, c->j, c->j,
                      o->entry, c->j, f && o->min_extra ? "" : "?");
        } else sbuf_adds(r, "\"\"");
        return 0;
    }
    int can_skip = !pl[k].required && !(w & o->owed[k]);
    int can_write = o->vals[k][0] && !(o->need[k] & ~w);
    if (!can_write) { /* left out (lower_object and dead_deps see that it may be) */
        if (state_ref(o, k + 1, f, w, nx, sizeof nx) < 0) return -1;
        sbuf_adds(r, nx);
        return 0;
    }
    if (!f) sbuf_addf(r, "\",\" %s-ws ", c->j);
    cJSON *key = cJSON_CreateString(pl[k].key);
    char *t = cJSON_PrintUnformatted(key);
    gbnf_put_literal(r, t, strlen(t));
    free(t);
    cJSON_Delete(key);
    unsigned w2 = o->rel[k] >= 0 ? w | 1u << o->rel[k] : w;
    if (state_ref(o, k + 1, 0, w2, nx, sizeof nx) < 0) return -1;
    sbuf_addf(r, " %s-ws \":\" %s-ws %s %s-ws %s", c->j, c->j, o->vals[k], c->j, nx);
    if (can_skip) {
        if (state_ref(o, k + 1, f, w, nx, sizeof nx) < 0) return -1;
        sbuf_addf(r, " | %s", nx);
    }
    return 0;
}

/* The index in pl[0..n) of name, -1 if none. */
static int prop_index(const struct obj_prop *pl, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(pl[k].key, name) == 0) return k;
    return -1;
}

/* o's dependency bits from DEPENDS (deps): a property whose names cannot all be written is
 * never written itself; more than DEP_BITS properties involved: the properties with
 * dependencies are left out (fewer objects, never a wrong one). */
static void dep_bits(struct ostates *o, const cJSON *deps) {
    for (int changed = 1; changed;) { /* a property left out may be another's name */
        changed = 0;
        for (const cJSON *d = deps ? deps->child : NULL; d; d = d->next) {
            int k = prop_index(o->pl, o->n, d->string), ok = 1;
            for (const cJSON *x = d->child; x && k >= 0 && ok; x = x->next) {
                int j = prop_index(o->pl, o->n, x->valuestring);
                ok = j >= 0 && j != k && o->vals[j][0];
            }
            if (k >= 0 && o->vals[k][0] && !ok) o->vals[k][0] = 0, changed = 1;
        }
    }
    int nb = 0;
    for (const cJSON *d = deps ? deps->child : NULL; d && nb <= DEP_BITS; d = d->next) {
        int k = prop_index(o->pl, o->n, d->string);
        if (k < 0 || !o->vals[k][0]) continue;
        for (const cJSON *x = d->child; x && nb <= DEP_BITS; x = x->next) {
            int j = prop_index(o->pl, o->n, x->valuestring);
            if (o->rel[j] < 0) o->rel[j] = nb++;
            if (o->rel[k] < 0) o->rel[k] = nb++;
            if (nb > DEP_BITS) break;
            if (j < k) o->need[k] |= 1u << o->rel[j];
            else o->owed[j] |= 1u << o->rel[k];
        }
    }
    if (nb > DEP_BITS) {
        for (const cJSON *d = deps->child; d; d = d->next) {
            int k = prop_index(o->pl, o->n, d->string);
            if (k >= 0 && !o->pl[k].required) o->vals[k][0] = 0;
        }
        for (int k = 0; k < o->n; k++) o->need[k] = o->owed[k] = 0;
    }
    o->live[o->n] = 0;
    for (int k = o->n - 1; k >= 0; k--) o->live[k] = o->live[k + 1] | o->need[k] | o->owed[k];
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
    int min_extra = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, MIN_EXTRA));
    char entry[RN];
    if (gen_extra(c, s, pl, n, entry) < 0) goto out;
    if (min_extra && !entry[0]) {
        sc_serr(c, "%s", "minProperties above the properties tpd can write");
        goto out;
    }
    char(*vals)[RN] = xcalloc((size_t)n + 1, RN);
    if (gen_values(c, pl, n, vals) < 0) {
        free(vals);
        goto out;
    }
    char base[RN];
    sc_new_rule(c, base);
    struct ostates o = {pl, n, vals, base, entry, min_extra, NULL, NULL, NULL, NULL, 0, 64, NULL};
    o.rel = xmalloc(sizeof *o.rel * ((size_t)n + 1));
    o.need = xcalloc((size_t)n + 1, sizeof *o.need);
    o.owed = xcalloc((size_t)n + 1, sizeof *o.owed);
    o.live = xcalloc((size_t)n + 1, sizeof *o.live);
    o.st = xmalloc(sizeof *o.st * (size_t)o.cap);
    for (int k = 0; k <= n; k++) o.rel[k] = -1;
    dep_bits(&o, cJSON_GetObjectItemCaseSensitive(s, DEPENDS));
    char nm[RN + 48];
    for (int k = n; k >= 0; k--) /* R_k(f, none written) for every k, as without dependencies */
        for (int f = 0; f < 2; f++) state_ref(&o, k, f, 0, nm, sizeof nm);
    int bad = 0;
    for (int i = 0; i < o.n_states && !bad; i++) {
        struct sbuf r = {0};
        bad = gen_rest_rule(c, &o, o.st[i].k, o.st[i].f, o.st[i].w, &r) < 0;
        state_name(&o, o.st[i].k, o.st[i].f, o.st[i].w, nm, sizeof nm);
        if (!bad) sc_emit(c, nm, r.p);
        sbuf_free(&r);
    }
    free(o.rel);
    free(o.need);
    free(o.owed);
    free(o.live);
    free(o.st);
    free(vals);
    if (bad) {
        sc_serr(c, "%s", "dependencies: too many combinations of properties to write");
        goto out;
    }
    sbuf_addf(b, "\"{\" %s-ws %s-0-1 \"}\"", c->j, base);
    rc = 0;
out:
    free(pl);
    return rc;
}
