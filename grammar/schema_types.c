/* JSON Schema -> GBNF: the JSON types a schema's keywords speak of. */
#include <string.h>

#include "schema_internal.h"
#include "schema_types.h"

/* 1 when keyword kw's value v says nothing of any value, such as `additionalProperties:
 * true`, `properties: {}` or `minLength: 0`: no type is inferred from it. */
static int trivial(const char *kw, const cJSON *v) {
    if (strcmp(kw, "contains") == 0) return 0; /* contains {} asks for an item */
    if (strcmp(kw, "uniqueItems") == 0) return cJSON_IsFalse(v);
    if (cJSON_IsTrue(v)) return 1; /* a schema that takes anything */
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) return v->child == NULL;
    return cJSON_IsNumber(v) && v->valuedouble == 0 && strncmp(kw, "min", 3) == 0 &&
           strcmp(kw, "minimum") != 0;
}

/* The keywords that constrain values of one type only: a value of another type ignores them */
static const struct {
    const char *kw, *type;
    int bits;
} one_type[] = {
    {"properties", "object", T_OBJ},
    {"additionalProperties", "object", T_OBJ},
    {"required", "object", T_OBJ},
    {"items", "array", T_ARR},
    {"prefixItems", "array", T_ARR},
    {"minItems", "array", T_ARR},
    {"maxItems", "array", T_ARR},
    {"minLength", "string", T_STR},
    {"maxLength", "string", T_STR},
    {"pattern", "string", T_STR},
    {"format", "string", T_STR},
    {"minimum", "number", T_INT | T_FRAC},
    {"maximum", "number", T_INT | T_FRAC},
    {"exclusiveMinimum", "number", T_INT | T_FRAC},
    {"exclusiveMaximum", "number", T_INT | T_FRAC},
    {"contains", "array", T_ARR},
    /* the other keywords of one type: a value of another type ignores them, and tpd
     * writes values of their type (a subset) so that they apply */
    {"patternProperties", "object", T_OBJ},
    {"propertyNames", "object", T_OBJ},
    {"minProperties", "object", T_OBJ},
    {"maxProperties", "object", T_OBJ},
    {"dependentRequired", "object", T_OBJ},
    {"dependentSchemas", "object", T_OBJ},
    {"dependencies", "object", T_OBJ},
    {"uniqueItems", "array", T_ARR},
    {"multipleOf", "number", T_INT | T_FRAC},
};

/* The entry of one_type of s's first keyword of one type whose value says something, or -1. */
static int first_one_type(const cJSON *s) {
    for (size_t i = 0; i < sizeof one_type / sizeof one_type[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, one_type[i].kw);
        if (v && !trivial(one_type[i].kw, v)) return (int)i;
    }
    return -1;
}

const char *sc_infer_type(const cJSON *s) {
    int i = first_one_type(s);
    return i < 0 ? NULL : one_type[i].type;
}

int sc_free_types(const cJSON *s) {
    if (cJSON_IsTrue(s)) return T_ANY;
    if (!cJSON_IsObject(s)) return 0;
    int bound = 0;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!sc_is_validity(s, k->string)) continue;
        size_t i = 0;
        while (i < sizeof one_type / sizeof one_type[0] && strcmp(one_type[i].kw, k->string)) i++;
        if (i == sizeof one_type / sizeof one_type[0]) return 0; /* type, enum, anyOf, ... */
        if (!trivial(k->string, k)) bound |= one_type[i].bits;
    }
    return T_ANY & ~bound;
}

int sc_implied_bits(const struct sc *c, const cJSON *s) {
    int i = c->every_type ? -1 : first_one_type(s);
    return i < 0 ? T_ANY : one_type[i].bits;
}

cJSON *sc_type_list(int bits) {
    static const char *const names[] = {"null", "boolean", "object", "array", "string"};
    cJSON *t = cJSON_CreateArray();
    for (int i = 0; i < 5; i++)
        if (bits & (1 << i)) cJSON_AddItemToArray(t, cJSON_CreateString(names[i]));
    if (bits & T_INT)
        cJSON_AddItemToArray(t, cJSON_CreateString(bits & T_FRAC ? "number" : "integer"));
    return t;
}
