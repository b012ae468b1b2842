#include "chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../jinja/jinja.h"
#include "tokenizer.h"

#define ARENA_LIMIT (256u << 20)

int chat_template_load(struct chat_template *ct, const struct tokenizer *t, const char *src,
                       char *err) {
    memset(ct, 0, sizeof(*ct));
    if (!src) src = t ? t->chat_template : NULL;
    if (!src) return err_set(err, "the model has no chat template");
    if (jinja_load(&ct->tpl, src, strlen(src), err)) return -1;
    ct->bos = xstrdup(t && t->bos_text ? t->bos_text : "");
    ct->eos = xstrdup(t && t->eos_text ? t->eos_text : "");
    return 0;
}

void chat_template_free(struct chat_template *ct) {
    jinja_free(ct->tpl);
    free(ct->bos);
    free(ct->eos);
    memset(ct, 0, sizeof(*ct));
}

static int set_str(struct arena *a, struct jv ctx, const char *k, const char *v) {
    struct jv key = jv_str(a, k, strlen(k)), val = jv_str(a, v, strlen(v));
    if (key.t != JV_STR || val.t != JV_STR) return -1;
    return jv_dict_set(a, ctx, key, val);
}

static int set_val(struct arena *a, struct jv ctx, const char *k, struct jv v) {
    struct jv key = jv_str(a, k, strlen(k));
    if (key.t != JV_STR) return -1;
    return jv_dict_set(a, ctx, key, v);
}

int chat_template_render(const struct chat_template *ct, const char *messages_json,
                         int add_generation_prompt, const char *extra_json, char **out,
                         size_t *out_len, char *err) {
    struct arena a = {.limit = ARENA_LIMIT};
    cJSON *msgs = cJSON_Parse(messages_json);
    cJSON *extra = extra_json ? cJSON_Parse(extra_json) : NULL;
    int rc = -1;
    if (!cJSON_IsArray(msgs)) { err_set(err, "messages must be a JSON array"); goto done; }
    if (extra_json && !cJSON_IsObject(extra)) { err_set(err, "extra variables must be a JSON object"); goto done; }
    struct jv ctx = jv_dict(&a), m;
    if (ctx.t != JV_DICT || jv_from_cjson(&a, msgs, &m) || set_val(&a, ctx, "messages", m) ||
        set_val(&a, ctx, "tools", jv_none()) || set_val(&a, ctx, "documents", jv_none()) ||
        set_val(&a, ctx, "add_generation_prompt", jv_bool(add_generation_prompt)) ||
        set_str(&a, ctx, "bos_token", ct->bos) || set_str(&a, ctx, "eos_token", ct->eos)) {
        err_set(err, "out of memory");
        goto done;
    }
    if (extra) {
        const cJSON *x;
        cJSON_ArrayForEach(x, extra) {
            struct jv v;
            if (jv_from_cjson(&a, x, &v) || set_val(&a, ctx, x->string, v)) { err_set(err, "out of memory"); goto done; }
        }
    }
    rc = jinja_render(ct->tpl, &a, ctx, out, out_len, err);
done:
    cJSON_Delete(msgs);
    cJSON_Delete(extra);
    arena_free(&a);
    return rc;
}

int chat_render_json(const char *src, size_t src_len, const char *context_json, char **out,
                     size_t *out_len, char *err) {
    struct jtemplate *t;
    if (jinja_load(&t, src, src_len, err)) return -1;
    struct arena a = {.limit = ARENA_LIMIT};
    cJSON *c = cJSON_Parse(context_json);
    int rc = -1;
    struct jv ctx;
    if (!cJSON_IsObject(c)) err_set(err, "context must be a JSON object");
    else if (jv_from_cjson(&a, c, &ctx)) err_set(err, "out of memory");
    else rc = jinja_render(t, &a, ctx, out, out_len, err);
    cJSON_Delete(c);
    arena_free(&a);
    jinja_free(t);
    return rc;
}
