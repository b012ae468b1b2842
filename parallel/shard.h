/* The tensor-parallel sharding plan: which query heads, KV heads, MLP columns and
 * vocabulary rows one rank holds (Megatron style). Any tp from 1 to n_heads works: heads
 * go out in contiguous near-even ranges, a rank holds every KV head its query heads use
 * (replicated where a GQA group straddles ranks), and row-parallel splits of quantized
 * weights are widened to block boundaries with zero-padded inputs (see wo_col0).
 * Computed identically on every rank from the hyperparameters. */
#ifndef TPD_SHARD_H
#define TPD_SHARD_H

#include "../model/hparams.h"

struct shard_plan {
    int tp, rank;
    int q_head0, n_q;    /* local query heads [q_head0, q_head0 + n_q) */
    int kv_head0, n_kv;  /* local KV heads [kv_head0, kv_head0 + n_kv) */
    int ffn0, n_ffn;     /* local MLP intermediate columns */
    int vocab0, n_vocab; /* local vocabulary rows (embedding and LM head) */
    /* Columns of Wo this rank multiplies: the block-aligned span around its heads. The
     * attention output is written at wo_pad inside a zeroed row of wo_ncols, so columns
     * that belong to neighbouring ranks meet zeros and add nothing. */
    int wo_col0, wo_ncols, wo_pad;
    /* Pipeline stage (shard_stage; shard_plan_make sets one stage of every layer): layers
     * [layer0, layer0 + n_layers); the first stage holds the embedding, the last the final
     * norm and LM head. */
    int pp, stage, layer0, n_layers, first, last;
    /* Mixture of experts (shard_plan_moe): the experts [exp0, exp0 + n_exp) this rank
     * computes, and of each its MLP columns [effn0, effn0 + n_effn): every expert and a
     * 1/tp slice of each (tensor-parallel experts), or whole experts in a near-even share
     * (ep, expert parallel). The shared expert is always split like a dense MLP:
     * [sffn0, sffn0 + n_sffn). */
    int ep;
    int exp0, n_exp, effn0, n_effn, sffn0, n_sffn;
};

/* Part r of n items split into tp contiguous near-even parts (sizes differ by at most 1). */
void shard_split(int n, int tp, int r, int *start, int *count);

/* Stage s of pp: contiguous layer ranges balanced by cost, with head_layers the cost of
 * the final norm and LM head in layers' worth (shard_head_layers; the first stage's
 * embedding is a lookup, counted as nothing). The last stage gets the n_last layers that
 * make the most loaded stage cheapest, max(ceil((n_layers - n_last) / (pp - 1)),
 * n_last + head_layers), the larger n_last on a tie; the other stages split the rest
 * near-evenly, a remaining layer one each to stages 1, 2, ..., never to stage 0 (whose
 * rank 0 also schedules and samples). head_layers 0 gives near-even ranges. Returns -1 with err
 * when pp exceeds the layers. */
int shard_stage(struct shard_plan *sp, int n_layers, int pp, int s, double head_layers, char *err);
/* The LM head's cost in layers' worth: its weight elements over one layer's, i.e. its
 * multiply-adds per token over a layer's (attention over the context left out). Elements,
 * not bytes: with one weight type they agree; where the head's type is wider than the
 * layers' (GGUFs often keep it Q8_0 beside Q4 layers), a CPU's time followed elements
 * (SmolLM2 Q4_1 at pp 2: 19 + 11 layers, 394 tok/s; by bytes 22 + 8, 362 tok/s). */
double shard_head_layers(double head_elems, double layer_elems);

/* wo_block / down_block: block sizes (elements) of attn_output and ffn_down's type.
 * Returns -1 with a message listing the tp values that work when tp cannot be served. */
int shard_plan_make(struct shard_plan *sp, const struct model_hparams *hp, int tp, int rank,
                    int wo_block, int down_block, char *err);

/* The experts' part of the plan, after shard_plan_make: ep 0 splits every expert's MLP in
 * blocks of exp_block (ffn_down_exps' type), ep 1 gives whole experts to each rank (a rank
 * gets none when there are more ranks than experts); the shared expert splits in blocks of
 * shexp_block. -1 with err when a block size does not divide its MLP size. */
int shard_plan_moe(struct shard_plan *sp, const struct model_hparams *hp, int ep, int exp_block,
                   int shexp_block, char *err);

#endif
