#include "api_tools.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar.h"
#include "../util/fatal.h"
#include "api_err.h"
#include "api_read.h"

/* OpenAI's rule for function names; it also keeps names free of anything that would need
 * escaping in JSON or could spell a special token. */
static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > API_MAX_TOOL_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int read_tool(const cJSON *x, int i, struct api_tools *t, struct api_error *e) {
    char p[96];
    snprintf(p, sizeof p, "tools[%d]", i);
    if (!cJSON_IsObject(x)) return api_err(e, 400, p, "%s: must be an object", p);
    cJSON *type = api_field(x, "type");
    if (!cJSON_IsString(type)) return api_err(e, 400, p, "%s.type: required, \"function\"", p);
    if (strcmp(type->valuestring, "function"))
        return api_err(e, 400, p, "%s.type: \"%.40s\" is not supported; only \"function\"", p,
                       type->valuestring);
    cJSON *fn = api_field(x, "function");
    if (!cJSON_IsObject(fn)) return api_err(e, 400, p, "%s.function: required, an object", p);
    cJSON *name = api_field(fn, "name");
    if (!cJSON_IsString(name)) return api_err(e, 400, p, "%s.function.name: required, a string", p);
    if (!valid_name(name->valuestring))
        return api_err(e, 400, p,
                       "%s.function.name: \"%.80s\" must be 1 to %d letters, digits, '_' or '-'", p,
                       name->valuestring, API_MAX_TOOL_NAME);
    for (int k = 0; k < t->n; k++)
        if (!strcmp(t->names[k], name->valuestring))
            return api_err(e, 400, p, "%s.function.name: \"%s\" is declared twice (also tools[%d])",
                           p, name->valuestring, k);
    cJSON *desc = api_field(fn, "description");
    if (desc && !cJSON_IsString(desc))
        return api_err(e, 400, p, "%s.function.description: must be a string", p);
    cJSON *strict = api_field(fn, "strict");
    if (strict && !cJSON_IsBool(strict))
        return api_err(e, 400, p, "%s.function.strict: must be a boolean", p);
    cJSON *params = api_field(fn, "parameters");
    char *ptext = NULL;
    if (params) {
        if (!cJSON_IsObject(params))
            return api_err(e, 400, p,
                           "%s.function.parameters: must be a JSON Schema object (the arguments "
                           "are an object)",
                           p);
        cJSON *pt = cJSON_GetObjectItemCaseSensitive(params, "type");
        if (pt && !(cJSON_IsString(pt) && !strcmp(pt->valuestring, "object")))
            return api_err(e, 400, p,
                           "%s.function.parameters.type: must be \"object\": a call's arguments "
                           "are a JSON object",
                           p);
        ptext = cJSON_PrintUnformatted(params);
        if (!ptext) FATAL("out of memory for a tool's parameters");
    }
    t->names[t->n] = xstrdup(name->valuestring);
    t->params[t->n] = ptext;
    t->n++;
    return 0;
}

static int read_choice(const cJSON *body, struct api_tools *t, struct api_error *e) {
    cJSON *c = api_field(body, "tool_choice");
    t->choice = t->n ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    if (!c) return 0;
    if (cJSON_IsString(c)) {
        const char *s = c->valuestring;
        if (!strcmp(s, "none")) t->choice = TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto")) t->choice = TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "required")) t->choice = TOOL_CHOICE_REQUIRED;
        else
            return api_err(
                e, 400, "tool_choice",
                "tool_choice: \"%.40s\" is not one of \"none\", \"auto\", \"required\" or "
                "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                s);
    } else if (cJSON_IsObject(c)) {
        cJSON *type = api_field(c, "type"), *fn = api_field(c, "function");
        cJSON *name = fn ? api_field(fn, "name") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn) ||
            !cJSON_IsString(name))
            return api_err(e, 400, "tool_choice",
                           "tool_choice: an object must be {\"type\": \"function\", \"function\": "
                           "{\"name\": string}}");
        t->choice = TOOL_CHOICE_NAMED;
        t->named = -1;
        for (int k = 0; k < t->n; k++)
            if (!strcmp(t->names[k], name->valuestring)) t->named = k;
        if (t->named < 0)
            return api_err(e, 400, "tool_choice",
                           "tool_choice.function.name: no function named \"%.80s\" in tools",
                           name->valuestring);
    } else {
        return api_err(e, 400, "tool_choice", "tool_choice: must be a string or an object");
    }
    if (t->choice != TOOL_CHOICE_NONE && !t->n)
        return api_err(e, 400, "tool_choice", "tool_choice: \"%s\" needs tools",
                       cJSON_IsString(c) ? c->valuestring : "function");
    return 0;
}

int api_tools_read(const cJSON *body, enum tool_format format, struct api_tools *t,
                   struct api_error *e) {
    memset(t, 0, sizeof *t);
    t->format = format;
    t->parallel = 1;
    cJSON *v = api_field(body, "parallel_tool_calls");
    if (v && !cJSON_IsBool(v))
        return api_err(e, 400, "parallel_tool_calls", "parallel_tool_calls: must be a boolean");
    if (v) t->parallel = cJSON_IsTrue(v);
    cJSON *tools = api_field(body, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return api_err(e, 400, "tools", "tools: must be an array");
        int n = cJSON_GetArraySize(tools);
        if (n == 0)
            return api_err(e, 400, "tools", "tools: must not be empty (leave it out for no tools)");
        if (n > API_MAX_TOOLS)
            return api_err(e, 400, "tools", "tools: at most %d functions", API_MAX_TOOLS);
        t->names = xcalloc((size_t)n, sizeof *t->names);
        t->params = xcalloc((size_t)n, sizeof *t->params);
        int i = 0;
        for (const cJSON *x = tools->child; x; x = x->next, i++)
            if (read_tool(x, i, t, e)) return -1;
        cJSON *wrap = cJSON_CreateObject();
        cJSON_AddItemToObject(wrap, "tools", cJSON_Duplicate(tools, 1));
        t->tools_json = cJSON_PrintUnformatted(wrap);
        cJSON_Delete(wrap);
        if (!t->tools_json) FATAL("out of memory for tools");
    }
    if (read_choice(body, t, e)) return -1;
    if (t->choice != TOOL_CHOICE_NONE && format == TOOL_FORMAT_NONE)
        return api_err(
            e, 400, "tools",
            "tools: this model's chat template shows the model no tool-calling format tpd knows "
            "(Hermes/Qwen <tool_call>, Llama 3 JSON, Mistral [TOOL_CALLS]); send \"tool_choice\": "
            "\"none\" "
            "or serve it with a tool-aware template (model.chat_template)");
    if (t->choice == TOOL_CHOICE_REQUIRED || t->choice == TOOL_CHOICE_NAMED)
        t->prefix = toolcall_prefix(format,
                                    t->choice == TOOL_CHOICE_NAMED ? t->names[t->named] : NULL);
    return 0;
}

int api_tools_grammar(const struct api_tools *t, struct grammar_vocab *v, struct grammar **out,
                      struct api_error *e) {
    *out = NULL;
    if (!t->prefix) return 0;
    if (!v)
        return api_err(e, 400, "tool_choice",
                       "tool_choice: constrained decoding is not available for this model");
    struct sbuf g = {0};
    char err[ERR_LEN];
    int bad = -1;
    int named = t->choice == TOOL_CHOICE_NAMED ? t->named : -1;
    if (toolcall_grammar(t->format, (const char *const *)t->names, (const char *const *)t->params,
                         t->n, named, t->parallel, &g, &bad, err)) {
        sbuf_free(&g);
        char p[64];
        snprintf(p, sizeof p, "tools[%d].function.parameters", bad);
        if (bad >= 0)
            return api_err(e, 400, p, "%s: cannot constrain a call to this schema: %s", p, err);
        return api_err(e, 400, "tool_choice", "tool_choice: %s", err);
    }
    *out = grammar_compile(v, GRAMMAR_GBNF, g.p, g.len, err);
    sbuf_free(&g);
    if (!*out) return api_err(e, 400, "tool_choice", "tool_choice: the grammar of a call: %s", err);
    return 0;
}

void api_tools_free(struct api_tools *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        cJSON_free(t->params[i]);
    }
    free(t->names);
    free(t->params);
    cJSON_free(t->tools_json);
    free(t->prefix);
    memset(t, 0, sizeof *t);
}

/* An assistant's tool_calls[j]: checked, its arguments string parsed into an object. */
static int prepare_call(cJSON *call, int i, int j, struct api_error *e) {
    char p[96];
    snprintf(p, sizeof p, "messages[%d].tool_calls[%d]", i, j);
    if (!cJSON_IsObject(call)) return api_err(e, 400, p, "%s: must be an object", p);
    cJSON *id = api_field(call, "id"), *type = api_field(call, "type"),
          *fn = api_field(call, "function");
    if (id && !cJSON_IsString(id)) return api_err(e, 400, p, "%s.id: must be a string", p);
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
        return api_err(e, 400, p, "%s.type: must be \"function\"", p);
    if (!cJSON_IsObject(fn)) return api_err(e, 400, p, "%s.function: required, an object", p);
    cJSON *name = api_field(fn, "name"), *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    if (!cJSON_IsString(name)) return api_err(e, 400, p, "%s.function.name: required, a string", p);
    if (cJSON_IsObject(args)) return 0; /* already what the template expects */
    if (!cJSON_IsString(args))
        return api_err(e, 400, p, "%s.function.arguments: required, a string holding a JSON object",
                       p);
    cJSON *obj = cJSON_Parse(args->valuestring);
    if (!cJSON_IsObject(obj)) {
        cJSON_Delete(obj);
        return api_err(e, 400, p, "%s.function.arguments: not a JSON object: %.60s", p,
                       args->valuestring);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
    return 0;
}

int api_tools_message(cJSON *m, int i, const char *role, struct api_error *e) {
    char p[96];
    cJSON *calls = api_field(m, "tool_calls");
    if (calls) {
        snprintf(p, sizeof p, "messages[%d].tool_calls", i);
        if (strcmp(role, "assistant"))
            return api_err(e, 400, p, "%s: only an assistant message makes tool calls", p);
        if (!cJSON_IsArray(calls)) return api_err(e, 400, p, "%s: must be an array", p);
        int j = 0;
        for (cJSON *c = calls->child; c; c = c->next, j++)
            if (prepare_call(c, i, j, e)) return -1;
    }
    if (!strcmp(role, "tool")) {
        snprintf(p, sizeof p, "messages[%d].tool_call_id", i);
        cJSON *id = api_field(m, "tool_call_id");
        if (!cJSON_IsString(id))
            return api_err(e, 400, p, "%s: required in a tool message, a string", p);
    }
    return 0;
}
