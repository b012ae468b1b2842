/* The model as one rank holds it: the layers of its pipeline stage, its shards of their
 * attention and MLP matrices (see shard.h), replicated norms, its vocabulary rows of the
 * embedding (first stage) and LM head (last stage), and the rotary frequency table, all in
 * backend memory. Loaded by reading only this rank's byte
 * ranges from the model file. Owned by the rank's compute thread. */
#ifndef TPD_MODEL_H
#define TPD_MODEL_H

#include <stddef.h>

#include "../kernels/backend.h"
#include "../model/hparams.h"
#include "shard.h"

/* One expert's matrices as this rank holds them (shard.h: a slice of its columns, or whole). */
struct moe_expert {
    struct bweight gate_up[2]; /* fused like gate_up below when the types agree */
    int gate_up_fused;
    struct bweight down;
};

struct layer_weights {
    float *attn_norm; /* [dim] */
    float *ffn_norm;  /* [dim] */
    /* Q, K and V: one matrix of n_q*hd + 2*n_kv*hd rows when the three share a type
     * (one matmul instead of three), else three matrices. */
    struct bweight qkv[3];
    int qkv_fused;
    float *qkv_bias;           /* [n_q*hd + 2*n_kv*hd] (Qwen2), or NULL */
    float *q_norm, *k_norm;    /* [hd] (Qwen3), or NULL */
    struct bweight wo;         /* dim rows x wo_ncols columns (row-parallel slice) */
    struct bweight gate_up[2]; /* fused like qkv: 2*n_ffn rows, or gate and up */
    int gate_up_fused;
    struct bweight down; /* dim rows x n_ffn columns (row-parallel slice) */
    /* A mixture-of-experts layer (moe set; the dense MLP above is then empty): the router,
     * n_experts rows x dim, whole on every rank; this rank's experts sp.exp0 + i at i of
     * sp.n_exp; and when the model has one, the shared expert (split like a dense MLP) with
     * its gate, 1 row x dim, whole. */
    int moe;
    struct bweight router;
    struct moe_expert *experts;
    struct bweight shexp_gate, shexp_gate_up[2], shexp_down;
    int shexp_fused;
};

struct model {
    struct model_hparams hp;
    struct shard_plan sp;
    struct backend *be;
    struct bweight tok_embd; /* n_vocab local rows x dim (first stage only) */
    struct bweight output;   /* LM head, n_vocab local rows x dim (last stage only; aliases tok_embd
                                when tied) */
    float *output_norm;      /* [dim] (last stage only) */
    float *inv_freq;         /* [head_dim / 2] rotary frequencies, scaling applied */
    struct layer_weights *layers; /* the stage's: [sp.n_layers], layer sp.layer0 + i at i */
    size_t weight_bytes;          /* bytes of weights this rank holds */
};

/* Told after each layer a rank loads: its layers done of its total, and the bytes of
 * weights it holds so far (for a progress line). */
struct load_progress {
    void (*fn)(void *arg, int layers_done, int layers_total, size_t bytes);
    void *arg;
};

/* How a mixture-of-experts model's experts are split over the tp ranks of a stage (config
 * key parallel.moe): a slice of every expert on every rank, or whole experts per rank. */
enum moe_split { MOE_SPLIT_TP = 0, MOE_SPLIT_EP = 1, MOE_SPLIT_AUTO = 2 };
/* "tp", "ep"; anything else (NULL, "auto") MOE_SPLIT_AUTO: ep when a tp slice of an expert
 * would be narrower than MOE_AUTO_MIN_COLS columns and there are at least tp experts. */
enum moe_split moe_split_parse(const char *s);
#define MOE_AUTO_MIN_COLS 128

/* Rank `rank` of tp in stage `stage` of pp. lp: NULL, or told of the progress. */
int model_load(struct model *m, const char *path, struct backend *be, int tp, int rank, int pp,
               int stage, enum moe_split moe, const struct load_progress *lp, char *err);
void model_free(struct model *m);
/* The bytes of weights model_load would give rank `rank` of tp in stage `stage` of pp (its
 * weight_bytes), from the file's tensor directory, nothing allocated; the only data read are
 * INT4 g_idx tensors (an act-order slice's padded width and gather index depend on them). */
int model_plan_weights(const char *path, int tp, int rank, int pp, int stage, enum moe_split moe,
                       size_t *bytes, char *err);
/* Rotary frequencies theta^(-2i/d), i < head_dim/2, into out: divided by factors[i] when
 * the file carries them (GGUF rope_freqs, NULL otherwise), else scaled by the HF llama3
 * rule when hp asks for it. Shared by loaded and synthetic models. */
void model_inv_freq(const struct model_hparams *hp, const float *factors, float *out);

#endif
