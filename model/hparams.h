/* Model hyperparameters, architecture-independent: what the forward pass needs to know,
 * filled from GGUF metadata or an HF config.json. Read-only after loading, on every rank. */
#ifndef TPD_HPARAMS_H
#define TPD_HPARAMS_H

/* The most layers a model may have (check_hparams refuses more). */
#define HPARAMS_MAX_LAYERS 1024

enum model_arch {
    ARCH_LLAMA = 0, /* Llama 2/3/3.1, Mistral, SmolLM2 */
    ARCH_QWEN2 = 1, /* Qwen2/2.5: QKV bias */
    ARCH_QWEN3 = 2, /* Qwen3: per-head RMSNorm on q and k */
};

struct model_hparams {
    enum model_arch arch;
    int n_layers;
    int dim;     /* hidden size */
    int n_heads; /* query heads */
    int n_kv_heads;
    int head_dim; /* usually dim / n_heads; Qwen3 may differ */
    int ffn_dim;  /* MLP intermediate size */
    int vocab_size;
    int max_ctx; /* trained context length */
    float norm_eps;
    float rope_theta;
    /* Rotary pairing: 1 = NEOX/HF rotate_half (x[i], x[i+d/2]); 0 = interleaved pairs
     * (x[2i], x[2i+1]), which llama-arch GGUF files use because their converter permutes
     * the Q/K rows. */
    int rope_neox;
    /* llama3 rope scaling; rope_scaling_llama3 == 0 means none. */
    int rope_scaling_llama3;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_orig_ctx;
    int tied_embeddings; /* LM head reuses token_embd */
    int qkv_bias;        /* attn_q/k/v.bias present */
    int qk_norm;         /* attn_q_norm / attn_k_norm present */
    int bos_id, eos_id;  /* -1 if unknown */
    /* Mixture of experts (n_experts > 0): a sparse layer's MLP is a router over n_experts
     * SwiGLU experts of expert_ffn_dim, of which each token takes the n_experts_used with
     * the largest router logits (ties to the lower id), weighted by their softmax
     * probabilities, renormalized over the chosen ones when moe_norm_topk; plus, when
     * shexp_ffn_dim > 0, a shared expert gated by sigmoid(x . shexp_gate) (Qwen2-MoE).
     * Layer l is sparse unless it is in moe_dense (mlp_only_layers) or (l + 1) is not a
     * multiple of moe_step (decoder_sparse_step); dense layers use ffn_dim. */
    int n_experts, n_experts_used, expert_ffn_dim, shexp_ffn_dim;
    int moe_norm_topk;
    int moe_step;
    unsigned char moe_dense[HPARAMS_MAX_LAYERS / 8];
};

/* Layer l's MLP is a mixture of experts. */
static inline int hparams_layer_moe(const struct model_hparams *hp, int l) {
    if (hp->n_experts <= 0 || l < 0 || l >= HPARAMS_MAX_LAYERS) return 0;
    if (hp->moe_dense[l / 8] >> (l % 8) & 1) return 0;
    return hp->moe_step <= 1 || (l + 1) % hp->moe_step == 0;
}

#endif
