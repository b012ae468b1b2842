/* The tensor table and the lookups on it: names in both spellings, shapes, needs. */
#include "tensors.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#define BLK(s) "blk.%d." s
#define HFL(s) "model.layers.%d." s

static const struct tensor_info table[] = {
    [TENSOR_TOKEN_EMBD] = {"token_embd.weight", "model.embed_tokens.weight", TROLE_EMBEDDING,
                           TDIM_MODEL, TDIM_VOCAB, TNEED_ALWAYS, TSCOPE_FIRST},
    [TENSOR_OUTPUT_NORM] = {"output_norm.weight", "model.norm.weight", TROLE_NORM, TDIM_MODEL,
                            TDIM_ONE, TNEED_ALWAYS, TSCOPE_LAST},
    [TENSOR_OUTPUT] = {"output.weight", "lm_head.weight", TROLE_OUTPUT, TDIM_MODEL, TDIM_VOCAB,
                       TNEED_UNTIED, TSCOPE_LAST},
    /* llama3 rope scaling as GGUF converters write it; HF configs say it in config.json */
    [TENSOR_ROPE_FREQS] = {"rope_freqs.weight", NULL, TROLE_ROPE, TDIM_HALF_HEAD, TDIM_ONE,
                           TNEED_IF_PRESENT, TSCOPE_EVERY},
    [TENSOR_ATTN_NORM] = {BLK("attn_norm.weight"), HFL("input_layernorm.weight"), TROLE_NORM,
                          TDIM_MODEL, TDIM_ONE, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_ATTN_Q] = {BLK("attn_q.weight"), HFL("self_attn.q_proj.weight"), TROLE_COLUMN,
                       TDIM_MODEL, TDIM_Q, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_ATTN_K] = {BLK("attn_k.weight"), HFL("self_attn.k_proj.weight"), TROLE_COLUMN,
                       TDIM_MODEL, TDIM_KV, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_ATTN_V] = {BLK("attn_v.weight"), HFL("self_attn.v_proj.weight"), TROLE_COLUMN,
                       TDIM_MODEL, TDIM_KV, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_ATTN_OUTPUT] = {BLK("attn_output.weight"), HFL("self_attn.o_proj.weight"), TROLE_ROW,
                            TDIM_Q, TDIM_MODEL, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_FFN_NORM] = {BLK("ffn_norm.weight"), HFL("post_attention_layernorm.weight"),
                         TROLE_NORM, TDIM_MODEL, TDIM_ONE, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_FFN_GATE] = {BLK("ffn_gate.weight"), HFL("mlp.gate_proj.weight"), TROLE_COLUMN,
                         TDIM_MODEL, TDIM_FFN, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_FFN_UP] = {BLK("ffn_up.weight"), HFL("mlp.up_proj.weight"), TROLE_COLUMN,
                       TDIM_MODEL, TDIM_FFN, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_FFN_DOWN] = {BLK("ffn_down.weight"), HFL("mlp.down_proj.weight"), TROLE_ROW,
                         TDIM_FFN, TDIM_MODEL, TNEED_ALWAYS, TSCOPE_LAYER},
    /* Qwen2 */
    [TENSOR_ATTN_Q_BIAS] = {BLK("attn_q.bias"), HFL("self_attn.q_proj.bias"), TROLE_BIAS,
                            TDIM_Q, TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    [TENSOR_ATTN_K_BIAS] = {BLK("attn_k.bias"), HFL("self_attn.k_proj.bias"), TROLE_BIAS,
                            TDIM_KV, TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    [TENSOR_ATTN_V_BIAS] = {BLK("attn_v.bias"), HFL("self_attn.v_proj.bias"), TROLE_BIAS,
                            TDIM_KV, TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    /* Qwen3 */
    [TENSOR_ATTN_Q_NORM] = {BLK("attn_q_norm.weight"), HFL("self_attn.q_norm.weight"),
                            TROLE_NORM, TDIM_HEAD, TDIM_ONE, TNEED_QK_NORM, TSCOPE_LAYER},
    [TENSOR_ATTN_K_NORM] = {BLK("attn_k_norm.weight"), HFL("self_attn.k_norm.weight"),
                            TROLE_NORM, TDIM_HEAD, TDIM_ONE, TNEED_QK_NORM, TSCOPE_LAYER},
};
static_assert(sizeof table / sizeof table[0] == TENSOR_COUNT,
              "every enum tensor_id has a row in the tensor table");

const struct tensor_info *tensor_info(enum tensor_id id) {
    return (unsigned)id < TENSOR_COUNT ? &table[id] : NULL;
}

static const char *pattern(enum tensor_id id, enum tensor_naming naming) {
    const struct tensor_info *ti = tensor_info(id);
    if (!ti) return NULL;
    return naming == TNAMES_HF ? ti->hf : ti->gguf;
}

int tensor_name(enum tensor_id id, int layer, enum tensor_naming naming, char *buf, size_t n) {
    const char *p = pattern(id, naming);
    if (!p || !n) return -1;
    const char *d = strstr(p, "%d");
    int len = d ? snprintf(buf, n, "%.*s%d%s", (int)(d - p), p, layer, d + 2)
                : snprintf(buf, n, "%s", p);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}

/* name against one row's pattern: 1 on a match, with the layer (-1: model-wide) */
static int match(const char *name, const char *p, int *layer) {
    const char *d = strstr(p, "%d");
    if (!d) {
        *layer = -1;
        return !strcmp(name, p);
    }
    size_t pre = (size_t)(d - p);
    if (strncmp(name, p, pre)) return 0;
    const char *s = name + pre;
    int n = 0, digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 7; s++, digits++) n = n * 10 + (*s - '0');
    if (!digits || strcmp(s, d + 2)) return 0;
    *layer = n;
    return 1;
}

int tensor_parse(const char *name, enum tensor_naming naming, int *layer) {
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const char *p = pattern(id, naming);
        if (p && match(name, p, layer)) return id;
    }
    *layer = -1;
    return -1;
}

int tensor_hf_to_gguf(const char *hf, char *out, size_t n) {
    int layer, id = tensor_parse(hf, TNAMES_HF, &layer);
    return id >= 0 && !tensor_name(id, layer, TNAMES_GGUF, out, n);
}

int64_t tensor_dim_size(const struct model_hparams *hp, enum tensor_dim d) {
    switch (d) {
    case TDIM_ONE: return 1;
    case TDIM_MODEL: return hp->dim;
    case TDIM_Q: return (int64_t)hp->n_heads * hp->head_dim;
    case TDIM_KV: return (int64_t)hp->n_kv_heads * hp->head_dim;
    case TDIM_FFN: return hp->ffn_dim;
    case TDIM_VOCAB: return hp->vocab_size;
    case TDIM_HEAD: return hp->head_dim;
    case TDIM_HALF_HEAD: return hp->head_dim / 2;
    }
    return -1;
}

int tensor_needed(const struct model_hparams *hp, enum tensor_id id, int present) {
    switch (tensor_info(id)->need) {
    case TNEED_ALWAYS: return 1;
    case TNEED_UNTIED: return !hp->tied_embeddings;
    case TNEED_QKV_BIAS: return hp->qkv_bias;
    case TNEED_QK_NORM: return hp->qk_norm;
    case TNEED_IF_PRESENT: return present;
    }
    return 0;
}

int tensor_is_matrix(enum tensor_id id) {
    enum tensor_role r = tensor_info(id)->role;
    return r == TROLE_EMBEDDING || r == TROLE_OUTPUT || r == TROLE_COLUMN || r == TROLE_ROW;
}

int tensor_type_ok(enum tensor_id id, enum dtype type) {
    if (tensor_is_matrix(id)) return 1;
    if (tensor_info(id)->role == TROLE_ROPE) return type == DT_F32;
    return type == DT_F32 || type == DT_F16 || type == DT_BF16;
}

const char *tensor_types(enum tensor_id id) {
    if (tensor_is_matrix(id)) return "any supported type";
    return tensor_info(id)->role == TROLE_ROPE ? "F32" : "F32, F16 or BF16";
}
