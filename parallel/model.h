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

struct layer_weights {
    float *attn_norm; /* [dim] */
    float *ffn_norm;  /* [dim] */
    /* Q, K and V: one matrix of n_q*hd + 2*n_kv*hd rows when the three share a type
     * (one matmul instead of three), else three matrices. */
    struct bweight qkv[3];
    int qkv_fused;
    float *qkv_bias;  /* [n_q*hd + 2*n_kv*hd] (Qwen2), or NULL */
    float *q_norm, *k_norm; /* [hd] (Qwen3), or NULL */
    struct bweight wo;      /* dim rows x wo_ncols columns (row-parallel slice) */
    struct bweight gate_up[2]; /* fused like qkv: 2*n_ffn rows, or gate and up */
    int gate_up_fused;
    struct bweight down;    /* dim rows x n_ffn columns (row-parallel slice) */
};

struct model {
    struct model_hparams hp;
    struct shard_plan sp;
    struct backend *be;
    struct bweight tok_embd;   /* n_vocab local rows x dim (first stage only) */
    struct bweight output;     /* LM head, n_vocab local rows x dim (last stage only; aliases tok_embd when tied) */
    float *output_norm;        /* [dim] (last stage only) */
    float *inv_freq;           /* [head_dim / 2] rotary frequencies, scaling applied */
    struct layer_weights *layers; /* the stage's: [sp.n_layers], layer sp.layer0 + i at i */
    size_t weight_bytes;       /* bytes of weights this rank holds */
};

/* Told after each layer a rank loads: its layers done of its total, and the bytes of
 * weights it holds so far (for a progress line). */
struct load_progress {
    void (*fn)(void *arg, int layers_done, int layers_total, size_t bytes);
    void *arg;
};

/* Rank `rank` of tp in stage `stage` of pp. lp: NULL, or told of the progress. */
int model_load(struct model *m, const char *path, struct backend *be, int tp, int rank, int pp, int stage,
               const struct load_progress *lp, char *err);
void model_free(struct model *m);
/* Rotary frequencies theta^(-2i/d), i < head_dim/2, into out: divided by factors[i] when
 * the file carries them (GGUF rope_freqs, NULL otherwise), else scaled by the HF llama3
 * rule when hp asks for it. Shared by loaded and synthetic models. */
void model_inv_freq(const struct model_hparams *hp, const float *factors, float *out);

#endif
