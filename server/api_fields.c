#include "api_fields.h"

#include <string.h>

/* present and not at its neutral value */
static int set(const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsFalse(v)) return 0;
    if (cJSON_IsString(v) && !v->valuestring[0]) return 0;
    if (cJSON_IsNumber(v) && v->valuedouble == 0) return 0;
    return 1;
}

/* what each field is, and what to do instead */
static const struct {
    const char *name;
    int kinds; /* 1: completions, 2: chat */
    const char *why;
} unimplemented[] = {
    {"suffix", 1, "insertion (text after the completion) is not supported"},
    {"functions", 2, "the legacy function-calling fields are not supported; use \"tools\""},
    {"function_call", 2,
     "the legacy function-calling fields are not supported; use \"tool_choice\""},
    {"audio", 2, "audio output is not supported"},
    {"prediction", 2, "predicted outputs are not supported"},
    {"web_search_options", 2, "web search is not supported"},
    {"use_beam_search", 3, "beam search is not supported"},
    {"min_tokens", 3, "a minimum number of tokens is not supported"},
    {"prompt_logprobs", 3,
     "vLLM's prompt_logprobs is not supported; use /v1/completions with "
     "\"echo\": true and \"logprobs\""},
    {"truncate_prompt_tokens", 3, "prompt truncation is not supported"},
    {"include_stop_str_in_output", 3, "stop strings are always left out of the output"},
};

int api_fields_check(const cJSON *body, enum api_kind kind, int n, struct api_error *e) {
    int k = kind == API_COMPLETION ? 1 : 2;
    for (size_t i = 0; i < sizeof unimplemented / sizeof *unimplemented; i++) {
        const char *name = unimplemented[i].name;
        if ((unimplemented[i].kinds & k) && set(cJSON_GetObjectItemCaseSensitive(body, name)))
            return api_err(e, 400, name, "%s: %s", name, unimplemented[i].why);
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(body, "best_of");
    if (b && !cJSON_IsNull(b) && !(cJSON_IsNumber(b) && b->valuedouble == n))
        return api_err(e, 400, "best_of",
                       "best_of: only best_of = n (%d) is supported: choices are not ranked "
                       "on the server",
                       n);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "modalities");
    if (m && !cJSON_IsNull(m)) {
        const cJSON *x;
        int ok = cJSON_IsArray(m);
        cJSON_ArrayForEach(x, m) ok &= cJSON_IsString(x) && !strcmp(x->valuestring, "text");
        if (!ok) return api_err(e, 400, "modalities", "modalities: only [\"text\"] is supported");
    }
    return 0;
}
