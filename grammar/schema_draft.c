/* JSON Schema drafts: which one a document names, and the keywords it lacks. */
#include "schema_draft.h"

#include <string.h>

int schema_draft(const cJSON *root) {
    static const struct {
        const char *uri;
        int draft;
    } known[] = {
        {"http://json-schema.org/draft-03/schema", 3},
        {"http://json-schema.org/draft-04/schema", 4},
        {"http://json-schema.org/draft-06/schema", 6},
        {"http://json-schema.org/draft-07/schema", 7},
        {"https://json-schema.org/draft/2019-09/schema", 2019},
        {"https://json-schema.org/draft/2020-12/schema", 2020},
    };
    const cJSON *d = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "$schema")
                                          : NULL;
    if (!cJSON_IsString(d)) return 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        size_t n = strlen(known[i].uri);
        const char *v = d->valuestring;
        if (strncmp(v, known[i].uri, n) == 0 && (!v[n] || strcmp(v + n, "#") == 0))
            return known[i].draft;
    }
    return 0;
}

/* 1 when draft lacks keyword k (one tpd implements or refuses). Draft 3's own keywords
 * (`required: true` in a property, `extends`, `disallow`) stay as they are. */
static int lacks(int draft, const char *k) {
    static const struct {
        const char *k;
        int from, until; /* defined in drafts [from, until] */
    } kw[] = {
        {"if", 7, 9999},
        {"then", 7, 9999},
        {"else", 7, 9999},
        {"const", 6, 9999},
        {"contains", 6, 9999},
        {"propertyNames", 6, 9999},
        {"dependentRequired", 2019, 9999},
        {"dependentSchemas", 2019, 9999},
        {"unevaluatedProperties", 2019, 9999},
        {"unevaluatedItems", 2019, 9999},
        {"prefixItems", 2020, 9999},
        {"$recursiveRef", 2019, 2019},
        {"$dynamicRef", 2020, 9999},
        {"allOf", 4, 9999},
        {"anyOf", 4, 9999},
        {"oneOf", 4, 9999},
        {"not", 4, 9999},
        {"minProperties", 4, 9999},
        {"maxProperties", 4, 9999},
        {"multipleOf", 4, 9999},
        {"dependencies", 0, 7},
        {"additionalItems", 0, 2019},
    };
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (strcmp(kw[i].k, k) == 0) return draft < kw[i].from || draft > kw[i].until;
    return 0;
}

/* 1 when the members of the value of keyword k are names, each holding a schema. */
static int names_schemas(const char *k) {
    static const char *const m[] = {"properties",       "patternProperties", "definitions", "$defs",
                                    "dependentSchemas", "dependencies",      NULL};
    for (int i = 0; m[i]; i++)
        if (strcmp(m[i], k) == 0) return 1;
    return 0;
}

static int is_data(const char *k) {
    static const char *const m[] = {"enum", "const", "default", "examples", "example", NULL};
    for (int i = 0; m[i]; i++)
        if (strcmp(m[i], k) == 0) return 1;
    return 0;
}

static void strip(cJSON *s, int draft, int depth);

static void strip_members(cJSON *v, int draft, int depth) {
    for (cJSON *x = v->child; x; x = x->next) strip(x, draft, depth + 1);
}

static void strip(cJSON *s, int draft, int depth) {
    if (depth > 512) return; /* deeper than any schema tpd compiles (its depth limit) */
    if (cJSON_IsArray(s)) {
        strip_members(s, draft, depth);
        return;
    }
    if (!cJSON_IsObject(s)) return;
    for (cJSON *k = s->child, *next; k; k = next) {
        next = k->next;
        if (lacks(draft, k->string)) {
            cJSON_Delete(cJSON_DetachItemViaPointer(s, k));
        } else if (names_schemas(k->string) && cJSON_IsObject(k)) {
            strip_members(k, draft, depth + 1);
        } else if (!is_data(k->string)) {
            strip(k, draft, depth + 1);
        }
    }
}

void schema_draft_strip(cJSON *root, int draft) {
    if (draft) strip(root, draft, 0);
}
