/* Structured output on the API (see api_grammar.h). */
#include "api_grammar.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../tokenizer/tokenizer.h"
#include "../util/fatal.h"
#include "../util/sbuf.h"

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
    if (!gv)
        return api_err(e, 400, param, "%s: structured output is not available for this model",
                       param);
    char err[ERR_LEN];
    *out = grammar_compile(gv, kind, text, len, err);
    if (!*out) return api_err(e, 400, param, "%s: %s", param, err);
    return 0;
}

/* A schema given as an object (or, for guided_json, as a JSON string) -> compiled. */
static int compile_schema(struct grammar_vocab *gv, const cJSON *s, const char *param,
                          struct grammar **out, struct api_error *e) {
    if (cJSON_IsString(s))
        return compile(gv, GRAMMAR_JSON_SCHEMA, s->valuestring, strlen(s->valuestring), param, out,
                       e);
    if (!cJSON_IsObject(s) && !cJSON_IsBool(s))
        return api_err(e, 400, param, "%s: must be a JSON Schema object", param);
    char *text = cJSON_PrintUnformatted(s);
    if (!text) FATAL("out of memory");
    int rc = compile(gv, GRAMMAR_JSON_SCHEMA, text, strlen(text), param, out, e);
    free(text);
    return rc;
}

/* ---- "strict": false: best effort ----
 * Each keyword a compile refuses (named in its error) is dropped from every subschema and
 * the compile tried again; a oneOf tpd cannot make exclusive becomes anyOf. Names in maps
 * of names (properties, $defs...) and values (enum, const, default...) are left alone. */
static const char *const refusable[] = {"$dynamicRef",
                                        "$recursiveRef",
                                        "unevaluatedProperties",
                                        "unevaluatedItems",
                                        "contains",
                                        "not",
                                        "uniqueItems",
                                        "multipleOf",
                                        "oneOf",
                                        "else",
                                        "minProperties",
                                        "propertyNames",
                                        "patternProperties",
                                        "dependentSchemas",
                                        "dependentRequired",
                                        "dependencies",
                                        "format",
                                        "pattern",
                                        "minLength",
                                        "maxLength",
                                        "allOf",
                                        "if",
                                        NULL};

/* The keyword err names, or NULL (an error that dropping cannot mend). */
static const char *refused_keyword(const char *err) {
    if (strstr(err, "unsatisfiable") || strstr(err, "does not resolve") ||
        strstr(err, "not valid JSON") || strstr(err, "longer than"))
        return NULL;
    if (strstr(err, "oneOf")) return "oneOf";
    if (strstr(err, "'if' with 'else'")) return "else";
    for (int i = 0; refusable[i]; i++) {
        char q[64];
        snprintf(q, sizeof q, "'%s'", refusable[i]);
        if (strstr(err, q)) return refusable[i];
    }
    /* unquoted, as a word: "uniqueItems is supported over..." ("not", "if" and "else" only
     * quoted: they are English words too) */
    for (int i = 0; refusable[i]; i++) {
        size_t n = strlen(refusable[i]);
        if (n <= 4) continue;
        for (const char *at = strstr(err, refusable[i]); at; at = strstr(at + 1, refusable[i]))
            if ((at == err || !isalnum((unsigned char)at[-1])) && !isalnum((unsigned char)at[n]))
                return refusable[i];
    }
    return NULL;
}

static void drop_keyword(cJSON *s, const char *kw, int depth) {
    static const char *const name_maps[] = {"properties",  "patternProperties", "$defs",
                                            "definitions", "dependentSchemas",  NULL};
    static const char *const values[] = {"enum",    "const",    "default", "examples",
                                         "example", "required", NULL};
    if (depth > 256 || (!cJSON_IsObject(s) && !cJSON_IsArray(s))) return;
    for (cJSON *k = s->child, *next; k; k = next) {
        next = k->next;
        int is_map = 0, is_value = 0;
        for (int i = 0; cJSON_IsObject(s) && name_maps[i]; i++)
            is_map |= strcmp(k->string, name_maps[i]) == 0;
        for (int i = 0; cJSON_IsObject(s) && values[i]; i++)
            is_value |= strcmp(k->string, values[i]) == 0;
        if (cJSON_IsObject(s) && strcmp(k->string, kw) == 0) {
            if (strcmp(kw, "oneOf") == 0 && !cJSON_GetObjectItemCaseSensitive(s, "anyOf")) {
                cJSON_DetachItemViaPointer(s, k);     /* the same branches, not exclusive */
                cJSON_AddItemToObject(s, "anyOf", k); /* met again (last) and walked then */
            } else {
                cJSON_Delete(cJSON_DetachItemViaPointer(s, k));
            }
        } else if (is_map) {
            for (cJSON *x = cJSON_IsObject(k) ? k->child : NULL; x; x = x->next)
                drop_keyword(x, kw, depth + 1);
        } else if (!is_value) {
            drop_keyword(k, kw, depth + 1);
        }
    }
}

/* compile_schema, dropping what it refuses (see above); names the keywords in dropped. */
static int compile_lenient(struct grammar_vocab *gv, const cJSON *s, const char *param,
                           struct grammar **out, char *dropped, struct api_error *e) {
    cJSON *m = cJSON_Duplicate(s, 1);
    if (!m) FATAL("out of memory");
    int rc = 1;
    for (int tries = 0; tries < 32 && rc > 0; tries++) {
        char *text = cJSON_PrintUnformatted(m), err[ERR_LEN];
        if (!text) FATAL("out of memory");
        *out = gv ? grammar_compile(gv, GRAMMAR_JSON_SCHEMA, text, strlen(text), err) : NULL;
        free(text);
        if (!gv) {
            rc = compile(gv, GRAMMAR_JSON_SCHEMA, "", 0, param, out, e);
            break;
        }
        const char *kw = *out ? NULL : refused_keyword(err);
        if (*out || !kw || strstr(dropped, kw)) {
            rc = *out ? 0 : api_err(e, 400, param, "%s: %s", param, err);
            break;
        }
        size_t n = strlen(dropped);
        snprintf(dropped + n, API_DROPPED_LEN - n, "%s%s", n ? ", " : "", kw);
        drop_keyword(m, kw, 0);
    }
    cJSON_Delete(m);
    if (rc > 0) rc = api_err(e, 400, param, "%s: too many keywords to drop", param);
    return rc;
}

/* guided_choice / structured_outputs.choice: the output is exactly one of the strings. */
static int compile_choice(struct grammar_vocab *gv, const cJSON *ch, const char *param,
                          struct grammar **out, struct api_error *e) {
    if (!cJSON_IsArray(ch) || cJSON_GetArraySize(ch) == 0)
        return api_err(e, 400, param, "%s: must be a non-empty array of strings", param);
    struct sbuf g = {0};
    sbuf_adds(&g, "root ::= ");
    int k = 0;
    for (const cJSON *x = ch->child; x; x = x->next, k++) {
        if (!cJSON_IsString(x) || !x->valuestring[0]) {
            sbuf_free(&g);
            return api_err(e, 400, param, "%s: must be a non-empty array of non-empty strings",
                           param);
        }
        sbuf_adds(&g, k ? " | \"" : "\"");
        for (const unsigned char *c = (const unsigned char *)x->valuestring; *c; c++) {
            if (*c == '"' || *c == '\\') sbuf_addf(&g, "\\%c", *c);
            else if (*c < 0x20) sbuf_addf(&g, "\\x%02X", *c);
            else sbuf_add(&g, (const char *)c, 1);
        }
        sbuf_adds(&g, "\"");
    }
    sbuf_adds(&g, "\n");
    int rc = compile(gv, GRAMMAR_GBNF, g.p, g.len, param, out, e);
    sbuf_free(&g);
    return rc;
}

/* vLLM's structured_outputs object: exactly one of json, regex, choice, grammar, json_object;
 * anything else (structural_tag, backend options) is a 400, never silently dropped. */
static int read_structured_outputs(struct grammar_vocab *gv, const cJSON *so, struct grammar **out,
                                   struct api_error *e) {
    static const char *const keys[] = {"json", "regex", "choice", "grammar", "json_object"};
    if (!cJSON_IsObject(so))
        return api_err(e, 400, "structured_outputs", "structured_outputs: must be an object");
    const cJSON *got = NULL;
    int which = -1;
    for (const cJSON *k = so->child; k; k = k->next) {
        int i = 0;
        while (i < 5 && strcmp(k->string, keys[i]) != 0) i++;
        if (i == 5)
            return api_err(e, 400, "structured_outputs",
                           "structured_outputs.%.64s: not supported (supported: json, "
                           "regex, choice, grammar, json_object)",
                           k->string);
        if (cJSON_IsNull(k) || (i == 4 && cJSON_IsFalse(k))) continue;
        if (got)
            return api_err(e, 400, "structured_outputs",
                           "structured_outputs: give at most one constraint");
        got = k;
        which = i;
    }
    switch (which) {
    case 0: return compile_schema(gv, got, "structured_outputs.json", out, e);
    case 1:
    case 3:
        if (!cJSON_IsString(got))
            return api_err(e, 400, "structured_outputs", "structured_outputs.%s: must be a string",
                           keys[which]);
        return compile(gv, which == 1 ? GRAMMAR_REGEX : GRAMMAR_GBNF, got->valuestring,
                       strlen(got->valuestring),
                       which == 1 ? "structured_outputs.regex" : "structured_outputs.grammar", out,
                       e);
    case 2: return compile_choice(gv, got, "structured_outputs.choice", out, e);
    case 4:
        if (!cJSON_IsTrue(got))
            return api_err(e, 400, "structured_outputs",
                           "structured_outputs.json_object: must be a boolean");
        return compile(gv, GRAMMAR_JSON_OBJECT, "", 0, "structured_outputs.json_object", out, e);
    default: return 0;
    }
}

int api_read_grammar(struct grammar_vocab *gv, const cJSON *o, struct grammar **out, char *dropped,
                     struct api_error *e) {
    *out = NULL;
    dropped[0] = 0;
    static const char *const fields[] = {"response_format", "guided_json",   "guided_regex",
                                         "guided_grammar",  "guided_choice", "structured_outputs"};
    enum { N_FIELDS = sizeof fields / sizeof *fields };
    const cJSON *f[N_FIELDS];
    int given = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        f[i] = cJSON_GetObjectItemCaseSensitive(o, fields[i]);
        if (f[i] && cJSON_IsNull(f[i])) f[i] = NULL;
        given += f[i] != NULL;
    }
    /* vLLM's other guided_* fields (guided_decoding_backend, guided_whitespace_pattern...)
     * would change the output if honoured: refused rather than dropped */
    for (const cJSON *k = o->child; k; k = k->next)
        if (strncmp(k->string, "guided_", 7) == 0 && strcmp(k->string, "guided_close") != 0) {
            int i = 1;
            while (i < N_FIELDS && strcmp(k->string, fields[i]) != 0) i++;
            if (i == N_FIELDS)
                return api_err(
                    e, 400, k->string,
                    "%.64s: unsupported structured-output field (supported: "
                    "guided_json, guided_regex, guided_grammar, guided_choice, guided_close)",
                    k->string);
        }
    if (given > 1)
        return api_err(
            e, 400, "response_format",
            "response_format, guided_json, guided_regex, guided_grammar, guided_choice and "
            "structured_outputs: give at most one");
    if (f[0]) {
        const cJSON *rf = f[0], *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
            return api_err(e, 400, "response_format",
                           "response_format: must be an object with a string \"type\"");
        if (strcmp(type->valuestring, "text") == 0) return 0;
        if (strcmp(type->valuestring, "json_object") == 0)
            return compile(gv, GRAMMAR_JSON_OBJECT, "", 0, "response_format", out, e);
        if (strcmp(type->valuestring, "json_schema") != 0)
            return api_err(e, 400, "response_format.type",
                           "response_format.type: must be \"text\", \"json_object\" or "
                           "\"json_schema\", not \"%.64s\"",
                           type->valuestring);
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        if (!cJSON_IsObject(js))
            return api_err(e, 400, "response_format.json_schema",
                           "response_format.json_schema: must be an object");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
        const cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
        if (!cJSON_IsString(name))
            return api_err(e, 400, "response_format.json_schema.name",
                           "response_format.json_schema.name: a string is required");
        if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
            return api_err(e, 400, "response_format.json_schema.strict",
                           "response_format.json_schema.strict: must be a boolean");
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema) /* OpenAI: no schema means any JSON object */
            return compile(gv, GRAMMAR_JSON_OBJECT, "", 0, "response_format", out, e);
        if (cJSON_IsFalse(strict) && cJSON_IsObject(schema))
            return compile_lenient(gv, schema, "response_format.json_schema.schema", out, dropped,
                                   e);
        if (compile_schema(gv, schema, "response_format.json_schema.schema", out, e) == 0) return 0;
        if (refused_keyword(e->message)) { /* say how to opt into best effort */
            size_t n = strlen(e->message);
            snprintf(e->message + n, sizeof e->message - n,
                     " (\"strict\": false drops what tpd refuses, best effort)");
        }
        return -1;
    }
    if (f[1]) return compile_schema(gv, f[1], "guided_json", out, e);
    for (int i = 2; i < 4; i++)
        if (f[i]) {
            if (!cJSON_IsString(f[i]))
                return api_err(e, 400, fields[i], "%s: must be a string", fields[i]);
            return compile(gv, i == 2 ? GRAMMAR_REGEX : GRAMMAR_GBNF, f[i]->valuestring,
                           strlen(f[i]->valuestring), fields[i], out, e);
        }
    if (f[4]) return compile_choice(gv, f[4], "guided_choice", out, e);
    if (f[5]) return read_structured_outputs(gv, f[5], out, e);
    return 0;
}
