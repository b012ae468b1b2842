/* The tensors of a model, in one table: each row gives a tensor's id, GGUF and Hugging Face
 * names, role in the tensor-parallel split, shape in terms of the hyperparameters, and when
 * the forward pass needs it (as llama.cpp's LLM_TENSOR_NAMES / LLM_TENSOR_INFOS). The HF name
 * mapping and the checks on open (model/modelfile.c) and the weight loader (parallel/model.c)
 * all read it: a new kind of tensor (quantization scales, experts) is a new row here, then
 * its loading code. Constant data, read by any thread. */
#ifndef TPD_TENSORS_H
#define TPD_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../util/dtype.h"
#include "hparams.h"

/* The rows, in the order modelfile_open checks them: the model-wide tensors, then those of
 * each layer. */
enum tensor_id {
    TENSOR_TOKEN_EMBD,
    TENSOR_OUTPUT_NORM,
    TENSOR_OUTPUT,
    TENSOR_ROPE_FREQS,
    TENSOR_ATTN_NORM,
    TENSOR_ATTN_Q,
    TENSOR_ATTN_K,
    TENSOR_ATTN_V,
    TENSOR_ATTN_OUTPUT,
    TENSOR_FFN_NORM,
    TENSOR_FFN_GATE,
    TENSOR_FFN_UP,
    TENSOR_FFN_DOWN,
    TENSOR_ATTN_Q_BIAS,
    TENSOR_ATTN_K_BIAS,
    TENSOR_ATTN_V_BIAS,
    TENSOR_ATTN_Q_NORM,
    TENSOR_ATTN_K_NORM,
    /* mixture of experts (hparams_layer_moe layers) */
    TENSOR_FFN_GATE_INP,
    TENSOR_FFN_GATE_EXPS,
    TENSOR_FFN_UP_EXPS,
    TENSOR_FFN_DOWN_EXPS,
    TENSOR_FFN_GATE_INP_SHEXP,
    TENSOR_FFN_GATE_SHEXP,
    TENSOR_FFN_UP_SHEXP,
    TENSOR_FFN_DOWN_SHEXP,
    TENSOR_COUNT
};

/* How a rank holds the tensor (parallel/shard.h), which also decides the types it may have:
 * matrices any type the readers know, vectors F32, F16 or BF16 (made F32 on load). */
enum tensor_role {
    TROLE_EMBEDDING, /* matrix: vocabulary rows split over the ranks */
    TROLE_OUTPUT,    /* the LM head: vocabulary rows split over the ranks */
    TROLE_COLUMN,    /* column-parallel matrix: a rank's whole rows (its heads or MLP columns) */
    TROLE_ROW,       /* row-parallel matrix: a rank's slice of every row's columns */
    TROLE_BIAS,      /* vector along a column-parallel output: a rank's slice of it */
    TROLE_NORM,      /* norm weights: a vector every rank holds whole */
    TROLE_ROPE,      /* rotary frequency divisors: an F32 vector every rank holds whole */
    TROLE_WHOLE,     /* matrix every rank holds whole (MoE routers: every rank routes) */
};

/* The sizes a shape rule names, from the hyperparameters. */
enum tensor_dim {
    TDIM_ONE,
    TDIM_MODEL,     /* dim */
    TDIM_Q,         /* n_heads * head_dim */
    TDIM_KV,        /* n_kv_heads * head_dim */
    TDIM_FFN,       /* ffn_dim */
    TDIM_VOCAB,     /* vocab_size */
    TDIM_HEAD,      /* head_dim */
    TDIM_HALF_HEAD, /* head_dim / 2 */
    TDIM_EXPERTS,   /* n_experts */
    TDIM_FFN_EXP,   /* expert_ffn_dim */
    TDIM_FFN_SHEXP, /* shexp_ffn_dim */
};

/* When the forward pass reads the tensor; a file that lacks a needed one is refused. */
enum tensor_need {
    TNEED_ALWAYS,
    TNEED_UNTIED,     /* unless hp.tied_embeddings (the LM head is then token_embd) */
    TNEED_QKV_BIAS,   /* when hp.qkv_bias */
    TNEED_QK_NORM,    /* when hp.qk_norm */
    TNEED_IF_PRESENT, /* optional: read when the file has it */
    TNEED_DENSE,      /* in a layer whose MLP is dense (every layer of a dense model) */
    TNEED_MOE,        /* in a mixture-of-experts layer */
    TNEED_SHEXP,      /* in a mixture-of-experts layer when hp.shexp_ffn_dim > 0 */
};

/* Which ranks hold it: every layer has one (a rank holds its pipeline stage's layers), or
 * one for the model, held by the first or last pipeline stage or by every rank. */
enum tensor_scope { TSCOPE_LAYER, TSCOPE_FIRST, TSCOPE_LAST, TSCOPE_EVERY };

/* A name's spelling: as in GGUF files (the names model_file uses) or in HF safetensors. */
/* TNAMES_HF_ALT: the row's second HF spelling where it has one (hf_alt), else its HF one. */
enum tensor_naming { TNAMES_GGUF, TNAMES_HF, TNAMES_HF_ALT };

struct tensor_info {
    /* Names in each spelling; a per-layer row's hold one "%d" for the layer. hf is NULL
     * where HF checkpoints have no such tensor. */
    const char *gguf, *hf;
    enum tensor_role role;
    enum tensor_dim ne0, ne1; /* the shape in ne order: ne0 is contiguous (a matrix's inputs) */
    enum tensor_need need;
    enum tensor_scope scope;
    /* Expert rows: TDIM_EXPERTS, a GGUF tensor holds every expert's matrix one after the
     * other ([ne0, ne1, n_experts], llama.cpp's *_exps), and an HF checkpoint one tensor per
     * expert, its hf name holding a second "%d" for the expert. TDIM_ONE otherwise. */
    enum tensor_dim ne2;
    /* A second HF spelling (Mixtral's block_sparse_moe names), or NULL. */
    const char *hf_alt;
};

const struct tensor_info *tensor_info(enum tensor_id id);
/* The tensor's name for layer `layer` (ignored for model-wide rows) into buf. Returns -1
 * when the row has no name in that spelling or buf is too short. */
int tensor_name(enum tensor_id id, int layer, enum tensor_naming naming, char *buf, size_t n);
/* The row a name belongs to, with its layer in *layer (-1 for a model-wide row); -1 when no
 * row has that name. Layer numbers have at most 7 digits. */
int tensor_parse(const char *name, enum tensor_naming naming, int *layer);
/* Expert rows: the name of expert `expert`'s own matrix of layer `layer`: HF, or in GGUF
 * spelling the 3-D tensor's name with ".<expert>" before ".weight" (the name an HF
 * expert tensor has in a model_file). -1 for other rows or a short buf. */
int tensor_expert_name(enum tensor_id id, int layer, int expert, enum tensor_naming naming,
                       char *buf, size_t n);
/* An HF tensor name's GGUF name into out: 1, or 0 when it is no tensor we use
 * (rotary_emb.inv_freq, ...) or out is too short. */
int tensor_hf_to_gguf(const char *hf, char *out, size_t n);

int64_t tensor_dim_size(const struct model_hparams *hp, enum tensor_dim d);
/* 1 when the forward pass of this model reads the tensor; present: whether the file has it
 * (it decides only TNEED_IF_PRESENT rows, so present 0 asks whether the tensor is required). */
int tensor_needed(const struct model_hparams *hp, enum tensor_id id, int layer, int present);
int tensor_is_matrix(enum tensor_id id);
/* Whether a tensor of the row may have this type, and the types it may have, for messages. */
int tensor_type_ok(enum tensor_id id, enum dtype type);
const char *tensor_types(enum tensor_id id);

#endif
