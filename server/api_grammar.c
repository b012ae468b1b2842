/* Structured output on the API (see api_grammar.h). */
#include "api_grammar.h"

#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../tokenizer/tokenizer.h"
#include "../util/fatal.h"

struct grammar_vocab *api_grammar_vocab(const struct tokenizer *t) {
    int n = (int)tokenizer_n_vocab(t);
    const char **bytes = xcalloc((size_t)n, sizeof *bytes);
    size_t *lens = xcalloc((size_t)n, sizeof *lens);
    uint8_t *usable = xcalloc((size_t)n, 1);
    int32_t *eog = xcalloc((size_t)n, sizeof *eog);
    int n_eog = 0;
    for (int i = 0; i < n; i++) {
        bytes[i] = tokenizer_token_bytes(t, i, &lens[i]);
        if (!bytes[i]) {
            bytes[i] = "";
            lens[i] = 0;
        }
        usable[i] = !tokenizer_is_special(t, i);
        if (tokenizer_is_eog(t, i)) eog[n_eog++] = i;
    }
    struct grammar_vocab *v = grammar_vocab_new(n, bytes, lens, usable, eog, n_eog);
    free(bytes);
    free(lens);
    free(usable);
    free(eog);
    return v;
}

static int compile(struct grammar_vocab *gv, enum grammar_kind kind, const char *text, size_t len,
                   const char *param, struct grammar **out, struct api_error *e) {
    if (!gv) return api_err(e, 400, param, "%s: structured output is not available for this model", param);
    char err[ERR_LEN];
    *out = grammar_compile(gv, kind, text, len, err);
    if (!*out) return api_err(e, 400, param, "%s: %s", param, err);
    return 0;
}

/* A schema given as an object (or, for guided_json, as a JSON string) -> compiled. */
static int compile_schema(struct grammar_vocab *gv, const cJSON *s, const char *param, struct grammar **out,
                          struct api_error *e) {
    if (cJSON_IsString(s)) return compile(gv, GRAMMAR_JSON_SCHEMA, s->valuestring, strlen(s->valuestring), param, out, e);
    if (!cJSON_IsObject(s) && !cJSON_IsBool(s)) return api_err(e, 400, param, "%s: must be a JSON Schema object", param);
    char *text = cJSON_PrintUnformatted(s);
    if (!text) FATAL("out of memory");
    int rc = compile(gv, GRAMMAR_JSON_SCHEMA, text, strlen(text), param, out, e);
    free(text);
    return rc;
}

int api_read_grammar(struct grammar_vocab *gv, const cJSON *o, struct grammar **out, struct api_error *e) {
    *out = NULL;
    static const char *const fields[] = {"response_format", "guided_json", "guided_regex", "guided_grammar"};
    const cJSON *f[4];
    int given = 0;
    for (int i = 0; i < 4; i++) {
        f[i] = cJSON_GetObjectItemCaseSensitive(o, fields[i]);
        if (f[i] && cJSON_IsNull(f[i])) f[i] = NULL;
        given += f[i] != NULL;
    }
    if (given > 1)
        return api_err(e, 400, "response_format",
                       "response_format, guided_json, guided_regex and guided_grammar: give at most one");
    if (f[0]) {
        const cJSON *rf = f[0], *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
            return api_err(e, 400, "response_format", "response_format: must be an object with a string \"type\"");
        if (strcmp(type->valuestring, "text") == 0) return 0;
        if (strcmp(type->valuestring, "json_object") == 0)
            return compile(gv, GRAMMAR_JSON_OBJECT, "", 0, "response_format", out, e);
        if (strcmp(type->valuestring, "json_schema") != 0)
            return api_err(e, 400, "response_format.type",
                           "response_format.type: must be \"text\", \"json_object\" or \"json_schema\", not \"%.64s\"",
                           type->valuestring);
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return api_err(e, 400, "response_format.json_schema", "response_format.json_schema: must be an object");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
        if (!cJSON_IsString(name))
            return api_err(e, 400, "response_format.json_schema.name", "response_format.json_schema.name: a string is required");
        if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
            return api_err(e, 400, "response_format.json_schema.strict", "response_format.json_schema.strict: must be a boolean");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema) /* OpenAI: no schema means any JSON object */
            return compile(gv, GRAMMAR_JSON_OBJECT, "", 0, "response_format", out, e);
        return compile_schema(gv, schema, "response_format.json_schema.schema", out, e);
    }
    if (f[1]) return compile_schema(gv, f[1], "guided_json", out, e);
    for (int i = 2; i < 4; i++)
        if (f[i]) {
            if (!cJSON_IsString(f[i])) return api_err(e, 400, fields[i], "%s: must be a string", fields[i]);
            return compile(gv, i == 2 ? GRAMMAR_REGEX : GRAMMAR_GBNF, f[i]->valuestring, strlen(f[i]->valuestring),
                           fields[i], out, e);
        }
    return 0;
}
