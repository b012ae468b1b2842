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
    ct->src = xstrdup(src);
    ct->bos = xstrdup(t && t->bos_text ? t->bos_text : "");
    ct->eos = xstrdup(t && t->eos_text ? t->eos_text : "");
    return 0;
}

void chat_template_free(struct chat_template *ct) {
    jinja_free(ct->tpl);
    free(ct->src);
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

/* Templates build role markers from the role (Phi-3's '<|' + role + '|>', Zephyr's
 * <|user|>): the usual role names stay template text so those still become special tokens.
 * Any other role is data like the rest of the request. */
static const char *const known_roles[] = {"system",   "user",      "assistant", "tool",
                                          "function", "developer", "ipython",   NULL};

static int known_roles_literal(struct arena *a, struct jv msgs) {
    for (size_t i = 0; i < msgs.u.l->n; i++) {
        struct jv m = msgs.u.l->v[i];
        if (m.t != JV_DICT) continue;
        struct jv *role = jv_dict_get(m, "role", 4);
        if (!role || role->t != JV_STR) continue;
        for (const char *const *k = known_roles; *k; k++) {
            if (strlen(*k) != role->u.s->len || memcmp(*k, role->u.s->s, role->u.s->len)) continue;
            *role = jv_str(a, role->u.s->s, role->u.s->len);
            if (role->t != JV_STR) return -1;
            break;
        }
    }
    return 0;
}

int chat_template_render(const struct chat_template *ct, const char *messages_json,
                         int add_generation_prompt, const char *extra_json, char **out,
                         size_t *out_len, char *err) {
    return chat_template_render_spans(ct, messages_json, add_generation_prompt, extra_json, out,
                                      out_len, NULL, NULL, err);
}

int chat_template_render_spans(const struct chat_template *ct, const char *messages_json,
                               int add_generation_prompt, const char *extra_json, char **out,
                               size_t *out_len, struct tok_span **data, size_t *n_data, char *err) {
    struct arena a = {.limit = ARENA_LIMIT};
    cJSON *msgs = cJSON_Parse(messages_json);
    cJSON *extra = extra_json ? cJSON_Parse(extra_json) : NULL;
    int rc = -1;
    if (!cJSON_IsArray(msgs)) {
        err_set(err, "messages must be a JSON array");
        goto done;
    }
    if (extra_json && !cJSON_IsObject(extra)) {
        err_set(err, "extra variables must be a JSON object");
        goto done;
    }
    struct jv ctx = jv_dict(&a), m;
    if (ctx.t != JV_DICT || jv_from_cjson(&a, msgs, 1, &m) || known_roles_literal(&a, m) ||
        set_val(&a, ctx, "messages", m) || set_val(&a, ctx, "tools", jv_none()) ||
        set_val(&a, ctx, "documents", jv_none()) ||
        set_val(&a, ctx, "add_generation_prompt", jv_bool(add_generation_prompt)) ||
        set_str(&a, ctx, "bos_token", ct->bos) || set_str(&a, ctx, "eos_token", ct->eos)) {
        err_set(err, "out of memory");
        goto done;
    }
    if (extra) {
        const cJSON *x;
        cJSON_ArrayForEach(x, extra) {
            struct jv v;
            if (jv_from_cjson(&a, x, 1, &v) || set_val(&a, ctx, x->string, v)) {
                err_set(err, "out of memory");
                goto done;
            }
        }
    }
    struct jspan *sp = NULL;
    size_t nsp = 0;
    rc = jinja_render_spans(ct->tpl, &a, ctx, out, out_len, &sp, &nsp, err);
    if (rc == 0 && data) {
        *data = NULL;
        *n_data = nsp;
        if (nsp) {
            *data = xmalloc(nsp * sizeof(**data));
            for (size_t i = 0; i < nsp; i++) {
                (*data)[i].off = sp[i].off;
                (*data)[i].len = sp[i].len;
            }
        }
    }
    free(sp);
done:
    cJSON_Delete(msgs);
    cJSON_Delete(extra);
    arena_free(&a);
    return rc;
}

int chat_template_encode(const struct chat_template *ct, struct tokenizer *t,
                         const char *messages_json, int add_generation_prompt,
                         const char *extra_json, int allow_special_in_content, int32_t **ids,
                         size_t *n_ids, char **text, size_t *text_len, char *err) {
    char *s = NULL;
    size_t len = 0, nd = 0;
    struct tok_span *d = NULL;
    *ids = NULL;
    *n_ids = 0;
    if (chat_template_render_spans(ct, messages_json, add_generation_prompt, extra_json, &s, &len,
                                   &d, &nd, err))
        return -1;
    if (allow_special_in_content) nd = 0;
    int rc = tokenizer_encode_spans(t, s, len, TOK_PARSE_SPECIAL, d, nd, ids, n_ids, err);
    free(d);
    if (rc == 0 && text) {
        *text = s;
        if (text_len) *text_len = len;
    } else {
        free(s);
    }
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
    else if (jv_from_cjson(&a, c, 0, &ctx)) err_set(err, "out of memory");
    else rc = jinja_render(t, &a, ctx, out, out_len, err);
    cJSON_Delete(c);
    arena_free(&a);
    jinja_free(t);
    return rc;
}
