/* One work item of cpu_attn_run (kernels/cpu/attention.c): a call's shape, an item (a
 * tile of one sequence's tokens, one KV head, a key range), one thread's scratch, and the
 * online-softmax bookkeeping the scalar and AVX2 item kernels share (begin, segment end,
 * finish, the fold of two partials). Internal to kernels/cpu. */
#ifndef TPD_CPU_ATTENTION_ITEM_H
#define TPD_CPU_ATTENTION_ITEM_H

#include <stdint.h>

#include "../backend.h"

/* Keys per key tile: K is converted (and transposed) one tile at a time. */
#define ATTN_KT 64
/* Key tiles per segment. Each segment's softmax partial (max, sum, accumulator) starts
 * afresh and segments are folded in order by one function (attn_segment_end), so a
 * row's result does not depend on how the key range was split over threads. */
#define ATTN_SEG 8

struct attn_call {
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    int n_q, hd, n_kv;
    const void *k, *v;
    const int8_t *k_exp, *v_exp; /* F8_E4M3: per (slot, KV head) scale exponents */
    const struct kv_layer *kvl;  /* the layer (its FP8 sink) */
    enum dtype kv_type;
    const struct attn_batch *b;
    float scale;
    int n_split; /* key ranges per (tile, KV head); > 1 writes partials */
    int n_seg;   /* segments of the longest row, when n_split > 1 */
    float *part; /* [n_tokens][n_q][n_seg][hd + 2]: acc, then max, then sum */
};

struct attn_item {
    int t0, n_tok; /* batch tokens t0.. of one sequence */
    int seq, pmax; /* their sequence and largest position */
    int kvh;       /* local KV head */
    int h0, n_h;   /* its query heads h0.. on this rank */
    int kt0, kt1;  /* key tiles [kt0, kt1) */
    int split;     /* which key range, when n_split > 1 */
};

/* One chunk's scratch, sized for rows = tokens x heads of an item and hd. */
struct attn_buf {
    float *kt;             /* [hd][ATTN_KT] keys transposed (AVX2) or [ATTN_KT][hd] (scalar) */
    float *vt;             /* [ATTN_KT][hd] */
    float *qs;             /* [rows][hd] scaled queries */
    float *acc;            /* [rows][hd] */
    float *m, *l;          /* [rows] running max and sum */
    float *facc, *fm, *fl; /* the same, folded over the finished segments */
};

/* The KV block holding position pos of sequence seq. */
static inline int attn_kv_block(const struct attn_batch *b, int seq, int pos) {
    return b->blocks[b->block_off[seq] + pos / b->block_size];
}

/* Element offset of (position, kv head 0) in a layer's cache. */
static inline int64_t attn_kv_index(const struct attn_batch *b, int seq, int pos, int n_kv,
                                    int hd) {
    int blk = attn_kv_block(b, seq, pos);
    return (((int64_t)blk * b->block_size + pos % b->block_size) * n_kv) * hd;
}

/* Element offset of (block blk, row, KV head 0) in a layer's FP8 sink (kernels/backend.h,
 * struct kv_layer); -1 when it has none. */
static inline int64_t kv_sink_index(const struct kv_layer *kv, int blk, int row, int n_kv, int hd) {
    if (blk >= kv->sink_blocks || row >= kv->sink_rows) return -1;
    return (((int64_t)blk * kv->sink_rows + row) * n_kv) * hd;
}

/* Element offset of a sequence's position pos (KV head 0) in the layer's FP8 sink, or -1
 * when that position is read from the codes (kernels/backend.h, struct kv_layer). */
static inline int64_t attn_sink_index(const struct attn_call *c, int seq, int pos) {
    if (!c->kvl->sink_blocks || pos >= c->kvl->sink_rows) return -1;
    return kv_sink_index(c->kvl, attn_kv_block(c->b, seq, 0), pos, c->n_kv, c->hd);
}

/* (M, L, ACC) += segment (m, l, acc), both unnormalised softmax partials: one function for
 * the in-item fold and the split merge, so both round alike. */
void attn_fold(float *M, float *L, float *ACC, float m, float l, const float *acc, int hd);
/* Resets the item's running rows (before its first segment). */
void attn_begin(const struct attn_item *it, struct attn_buf *w, int hd);
/* Ends segment `seg` of the item: writes its partials when n_split > 1, else folds them
 * into the item's total; then resets the running rows. */
void attn_segment_end(const struct attn_call *c, const struct attn_item *it, struct attn_buf *w,
                      int seg);
/* Writes the item's rows, normalised, into out (n_split == 1 only). */
void attn_finish(const struct attn_call *c, const struct attn_item *it, const struct attn_buf *w);

#endif
