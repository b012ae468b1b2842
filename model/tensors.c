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
    [TENSOR_FFN_NORM] = {BLK("ffn_norm.weight"), HFL("post_attention_layernorm.weight"), TROLE_NORM,
                         TDIM_MODEL, TDIM_ONE, TNEED_ALWAYS, TSCOPE_LAYER},
    [TENSOR_FFN_GATE] = {BLK("ffn_gate.weight"), HFL("mlp.gate_proj.weight"), TROLE_COLUMN,
                         TDIM_MODEL, TDIM_FFN, TNEED_DENSE, TSCOPE_LAYER},
    [TENSOR_FFN_UP] = {BLK("ffn_up.weight"), HFL("mlp.up_proj.weight"), TROLE_COLUMN, TDIM_MODEL,
                       TDIM_FFN, TNEED_DENSE, TSCOPE_LAYER},
    [TENSOR_FFN_DOWN] = {BLK("ffn_down.weight"), HFL("mlp.down_proj.weight"), TROLE_ROW, TDIM_FFN,
                         TDIM_MODEL, TNEED_DENSE, TSCOPE_LAYER},
    /* Qwen2 */
    [TENSOR_ATTN_Q_BIAS] = {BLK("attn_q.bias"), HFL("self_attn.q_proj.bias"), TROLE_BIAS, TDIM_Q,
                            TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    [TENSOR_ATTN_K_BIAS] = {BLK("attn_k.bias"), HFL("self_attn.k_proj.bias"), TROLE_BIAS, TDIM_KV,
                            TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    [TENSOR_ATTN_V_BIAS] = {BLK("attn_v.bias"), HFL("self_attn.v_proj.bias"), TROLE_BIAS, TDIM_KV,
                            TDIM_ONE, TNEED_QKV_BIAS, TSCOPE_LAYER},
    /* Qwen3 */
    [TENSOR_ATTN_Q_NORM] = {BLK("attn_q_norm.weight"), HFL("self_attn.q_norm.weight"), TROLE_NORM,
                            TDIM_HEAD, TDIM_ONE, TNEED_QK_NORM, TSCOPE_LAYER},
    [TENSOR_ATTN_K_NORM] = {BLK("attn_k_norm.weight"), HFL("self_attn.k_norm.weight"), TROLE_NORM,
                            TDIM_HEAD, TDIM_ONE, TNEED_QK_NORM, TSCOPE_LAYER},
    /* Mixture of experts: the router, the experts (Qwen-MoE names; Mixtral's alternative),
     * and Qwen2-MoE's shared expert with its gate */
    [TENSOR_FFN_GATE_INP] = {BLK("ffn_gate_inp.weight"), HFL("mlp.gate.weight"), TROLE_WHOLE,
                             TDIM_MODEL, TDIM_EXPERTS, TNEED_MOE, TSCOPE_LAYER, TDIM_ONE,
                             HFL("block_sparse_moe.gate.weight")},
    [TENSOR_FFN_GATE_EXPS] = {BLK("ffn_gate_exps.weight"), HFL("mlp.experts.%d.gate_proj.weight"),
                              TROLE_COLUMN, TDIM_MODEL, TDIM_FFN_EXP, TNEED_MOE, TSCOPE_LAYER,
                              TDIM_EXPERTS, HFL("block_sparse_moe.experts.%d.w1.weight")},
    [TENSOR_FFN_UP_EXPS] = {BLK("ffn_up_exps.weight"), HFL("mlp.experts.%d.up_proj.weight"),
                            TROLE_COLUMN, TDIM_MODEL, TDIM_FFN_EXP, TNEED_MOE, TSCOPE_LAYER,
                            TDIM_EXPERTS, HFL("block_sparse_moe.experts.%d.w3.weight")},
    [TENSOR_FFN_DOWN_EXPS] = {BLK("ffn_down_exps.weight"), HFL("mlp.experts.%d.down_proj.weight"),
                              TROLE_ROW, TDIM_FFN_EXP, TDIM_MODEL, TNEED_MOE, TSCOPE_LAYER,
                              TDIM_EXPERTS, HFL("block_sparse_moe.experts.%d.w2.weight")},
    [TENSOR_FFN_GATE_INP_SHEXP] = {BLK("ffn_gate_inp_shexp.weight"),
                                   HFL("mlp.shared_expert_gate.weight"), TROLE_WHOLE, TDIM_MODEL,
                                   TDIM_ONE, TNEED_SHEXP, TSCOPE_LAYER},
    [TENSOR_FFN_GATE_SHEXP] = {BLK("ffn_gate_shexp.weight"),
                               HFL("mlp.shared_expert.gate_proj.weight"), TROLE_COLUMN, TDIM_MODEL,
                               TDIM_FFN_SHEXP, TNEED_SHEXP, TSCOPE_LAYER},
    [TENSOR_FFN_UP_SHEXP] = {BLK("ffn_up_shexp.weight"), HFL("mlp.shared_expert.up_proj.weight"),
                             TROLE_COLUMN, TDIM_MODEL, TDIM_FFN_SHEXP, TNEED_SHEXP, TSCOPE_LAYER},
    [TENSOR_FFN_DOWN_SHEXP] = {BLK("ffn_down_shexp.weight"),
                               HFL("mlp.shared_expert.down_proj.weight"), TROLE_ROW, TDIM_FFN_SHEXP,
                               TDIM_MODEL, TNEED_SHEXP, TSCOPE_LAYER},
};
static_assert(sizeof table / sizeof table[0] == TENSOR_COUNT,
              "every enum tensor_id has a row in the tensor table");

const struct tensor_info *tensor_info(enum tensor_id id) {
    return (unsigned)id < TENSOR_COUNT ? &table[id] : NULL;
}

static const char *pattern(enum tensor_id id, enum tensor_naming naming) {
    const struct tensor_info *ti = tensor_info(id);
    if (!ti) return NULL;
    if (naming == TNAMES_HF_ALT) return ti->hf_alt ? ti->hf_alt : ti->hf;
    return naming == TNAMES_HF ? ti->hf : ti->gguf;
}

/* p with its "%d"s replaced by a, then b, into buf */
static int fill(const char *p, int a, int b, char *buf, size_t n) {
    size_t at = 0;
    int k = 0;
    for (const char *s = p; *s && at < n; s++) {
        if (s[0] == '%' && s[1] == 'd') {
            int w = snprintf(buf + at, n - at, "%d", k++ ? b : a);
            if (w < 0) return -1;
            at += (size_t)w;
            s++;
        } else {
            buf[at++] = *s;
        }
    }
    if (at >= n) return -1;
    buf[at] = 0;
    return 0;
}

static int n_slots(const char *p) {
    int k = 0;
    for (const char *d = strstr(p, "%d"); d; d = strstr(d + 2, "%d")) k++;
    return k;
}

int tensor_name(enum tensor_id id, int layer, enum tensor_naming naming, char *buf, size_t n) {
    const char *p = pattern(id, naming);
    if (!p || !n || n_slots(p) > 1) return -1;
    return fill(p, layer, 0, buf, n);
}

int tensor_expert_name(enum tensor_id id, int layer, int expert, enum tensor_naming naming,
                       char *buf, size_t n) {
    const struct tensor_info *ti = tensor_info(id);
    if (!ti || ti->ne2 != TDIM_EXPERTS || !n) return -1;
    if (naming != TNAMES_GGUF) return fill(pattern(id, naming), layer, expert, buf, n);
    char base[96];
    if (fill(ti->gguf, layer, 0, base, sizeof base)) return -1;
    size_t lb = strlen(base);
    if (lb < 7 || strcmp(base + lb - 7, ".weight")) return -1;
    int w = snprintf(buf, n, "%.*s.%d.weight", (int)(lb - 7), base, expert);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* name against one pattern with up to two "%d" (layer, then expert): 1 on a match, with
 * the numbers (-1 where the pattern has none) */
static int match(const char *name, const char *p, int *layer, int *expert) {
    int nums[2] = {-1, -1}, k = 0;
    const char *s = name;
    while (*p) {
        if (p[0] == '%' && p[1] == 'd') {
            int v = 0, digits = 0;
            for (; *s >= '0' && *s <= '9' && digits < 7; s++, digits++) v = v * 10 + (*s - '0');
            if (!digits || k >= 2) return 0;
            nums[k++] = v;
            p += 2;
        } else if (*p++ != *s++) {
            return 0;
        }
    }
    if (*s) return 0;
    *layer = nums[0];
    *expert = nums[1];
    return 1;
}

static int parse(const char *name, enum tensor_naming naming, int *layer, int *expert) {
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const char *p = pattern(id, naming);
        if (p && match(name, p, layer, expert)) return id;
        p = naming == TNAMES_HF ? table[id].hf_alt : NULL;
        if (p && match(name, p, layer, expert)) return id;
        /* GGUF spelling of one expert's matrix (an HF expert tensor in a model_file) */
        char piece[96];
        size_t lp = strlen(table[id].gguf);
        if (naming == TNAMES_GGUF && table[id].ne2 == TDIM_EXPERTS && lp > 7 &&
            snprintf(piece, sizeof piece, "%.*s.%%d.weight", (int)(lp - 7), table[id].gguf) <
                (int)sizeof piece &&
            match(name, piece, layer, expert))
            return id;
    }
    *layer = *expert = -1;
    return -1;
}

int tensor_parse(const char *name, enum tensor_naming naming, int *layer) {
    int expert;
    return parse(name, naming, layer, &expert);
}

int tensor_hf_to_gguf(const char *hf, char *out, size_t n) {
    int layer, expert, id = parse(hf, TNAMES_HF, &layer, &expert);
    if (id >= 0 && expert >= 0) return !tensor_expert_name(id, layer, expert, TNAMES_GGUF, out, n);
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
    case TDIM_EXPERTS: return hp->n_experts;
    case TDIM_FFN_EXP: return hp->expert_ffn_dim;
    case TDIM_FFN_SHEXP: return hp->shexp_ffn_dim;
    }
    return -1;
}

int tensor_needed(const struct model_hparams *hp, enum tensor_id id, int layer, int present) {
    switch (tensor_info(id)->need) {
    case TNEED_DENSE: return !hparams_layer_moe(hp, layer);
    case TNEED_MOE: return hparams_layer_moe(hp, layer);
    case TNEED_SHEXP: return hparams_layer_moe(hp, layer) && hp->shexp_ffn_dim > 0;
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
    return r == TROLE_EMBEDDING || r == TROLE_OUTPUT || r == TROLE_COLUMN || r == TROLE_ROW ||
           r == TROLE_WHOLE;
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
