#include "shard.h"

#include "../util/err.h"

void shard_split(int n, int tp, int r, int *start, int *count) {
    int a = (int)((long long)n * r / tp), b = (int)((long long)n * (r + 1) / tp);
    *start = a;
    *count = b - a;
}

int shard_plan_make(struct shard_plan *sp, const struct model_hparams *hp, int tp, int rank,
                    int wo_block, int down_block, char *err) {
    if (tp < 1 || tp > hp->n_heads)
        return err_set(err,
                       "tensor-parallel size %d cannot serve this model: it has %d query heads, "
                       "so tp must be one of 1..%d",
                       tp, hp->n_heads, hp->n_heads);
    if (rank < 0 || rank >= tp) return err_set(err, "rank %d outside tp %d", rank, tp);
    if (wo_block < 1 || down_block < 1 || hp->ffn_dim % down_block)
        return err_set(err, "ffn_down block size %d does not divide the MLP size %d", down_block,
                       hp->ffn_dim);
    sp->tp = tp;
    sp->rank = rank;
    shard_stage(sp, hp->n_layers, 1, 0, 0, err);
    shard_split(hp->n_heads, tp, rank, &sp->q_head0, &sp->n_q);

    int group = hp->n_heads / hp->n_kv_heads;
    int kv_last = (sp->q_head0 + sp->n_q - 1) / group;
    sp->kv_head0 = sp->q_head0 / group;
    sp->n_kv = kv_last - sp->kv_head0 + 1;

    /* MLP: split in whole blocks of ffn_down's type so each rank's column slice of the
     * row-parallel down projection is a run of whole blocks. A rank may get none when the
     * MLP has fewer blocks than ranks; it then contributes zeros to the all-reduce. */
    int units, u0, un;
    units = hp->ffn_dim / down_block;
    shard_split(units, tp, rank, &u0, &un);
    sp->ffn0 = u0 * down_block;
    sp->n_ffn = un * down_block;

    shard_split(hp->vocab_size, tp, rank, &sp->vocab0, &sp->n_vocab);

    int c0 = sp->q_head0 * hp->head_dim, c1 = (sp->q_head0 + sp->n_q) * hp->head_dim;
    int width = hp->n_heads * hp->head_dim;
    if (width % wo_block)
        return err_set(err, "attn_output row length %d is not a multiple of its block size %d",
                       width, wo_block);
    sp->wo_col0 = c0 / wo_block * wo_block;
    int end = (c1 + wo_block - 1) / wo_block * wo_block;
    sp->wo_ncols = end - sp->wo_col0;
    sp->wo_pad = c0 - sp->wo_col0;
    return 0;
}

double shard_head_layers(double head_elems, double layer_elems) {
    return layer_elems > 0 && head_elems > 0 ? head_elems / layer_elems : 0;
}

int shard_stage(struct shard_plan *sp, int n_layers, int pp, int s, double head_layers, char *err) {
    if (pp < 1 || pp > n_layers)
        return err_set(err,
                       "pipeline size %d cannot serve this model: it has %d layers, so pp must be "
                       "one of 1..%d",
                       pp, n_layers, n_layers);
    if (s < 0 || s >= pp) return err_set(err, "stage %d outside pp %d", s, pp);
    if (!(head_layers >= 0)) head_layers = 0; /* NaN or negative: no weight */
    int n_last = n_layers;
    if (pp > 1) {
        double best = 0;
        for (int n = 1; n <= n_layers - (pp - 1); n++) {
            double others = (n_layers - n + pp - 2) / (pp - 1), last = n + head_layers;
            double cost = others > last ? others : last;
            if (n == 1 || cost <= best) best = cost, n_last = n;
        }
    }
    int n_rest = n_layers - n_last, front = pp - 1;
    int base = front ? n_rest / front : 0, extra = front ? n_rest % front : 0;
    sp->pp = pp;
    sp->stage = s;
    sp->layer0 = 0;
    for (int i = 0; i <= s; i++) {
        /* stages 1.. take a remaining layer before stage 0 does */
        int n = i == pp - 1 ? n_last : base + (i > 0 && i <= extra);
        if (i == s) sp->n_layers = n;
        else sp->layer0 += n;
    }
    sp->first = s == 0;
    sp->last = s == pp - 1;
    return 0;
}

/* [*c0, *c0 + *n) of an MLP of n_cols columns, split over tp in whole blocks */
static int split_cols(int n_cols, int block, int tp, int rank, int *c0, int *n, const char *what,
                      char *err) {
    if (block < 1 || n_cols % block)
        return err_set(err, "%s block size %d does not divide its MLP size %d", what, block,
                       n_cols);
    int u0, un;
    shard_split(n_cols / block, tp, rank, &u0, &un);
    *c0 = u0 * block;
    *n = un * block;
    return 0;
}

int shard_plan_moe(struct shard_plan *sp, const struct model_hparams *hp, int ep, int exp_block,
                   int shexp_block, char *err) {
    sp->ep = ep && hp->n_experts > 0;
    sp->exp0 = sp->n_exp = sp->effn0 = sp->n_effn = sp->sffn0 = sp->n_sffn = 0;
    if (hp->n_experts <= 0) return 0;
    if (sp->ep) {
        shard_split(hp->n_experts, sp->tp, sp->rank, &sp->exp0, &sp->n_exp);
        sp->n_effn = hp->expert_ffn_dim;
    } else {
        sp->n_exp = hp->n_experts;
        if (split_cols(hp->expert_ffn_dim, exp_block, sp->tp, sp->rank, &sp->effn0, &sp->n_effn,
                       "ffn_down_exps", err))
            return -1;
    }
    if (hp->shexp_ffn_dim > 0 && split_cols(hp->shexp_ffn_dim, shexp_block, sp->tp, sp->rank,
                                            &sp->sffn0, &sp->n_sffn, "ffn_down_shexp", err))
        return -1;
    return 0;
}
