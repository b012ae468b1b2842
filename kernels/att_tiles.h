/* The prefill attention's tiles for a ragged step: runs of up to max_rows tokens of one
 * sequence at consecutive positions, planned on the host from the step's per-token sequence
 * and position arrays (the CUDA backend's flash path, kernels/cuda/attention.cu, runs one
 * block per (query head, tile); tests/test_att_tiles.c checks the plans). Pure functions over
 * the caller's arrays, any thread.
 *
 * Header-only, in the C that C++ also takes: attention.cu (library tpd_cuda) compiles it in,
 * and tpd_cuda sits below tpd_kernels in the link order, so a .c in tpd_kernels would leave
 * the backend's reference to it unresolved. */
#ifndef TPD_ATT_TILES_H
#define TPD_ATT_TILES_H

#include <stdint.h>
#include <stdlib.h>

/* Tokens t0 .. t0 + n - 1 of the step, all of one sequence, their positions pos[t0] + 0 ..
 * n - 1; keys = pos[t0 + n - 1] + 1, the positions the tile's last token attends to, which is
 * how many keys a flash block walks for it: the tile's work, whatever n is. */
struct att_tile {
    int32_t t0, n, keys;
};

/* Cuts the step's tokens, in token order, into tiles: a token joins the tile before it when
 * it is of the same sequence, at the next position, and the tile has fewer than max_rows
 * tokens; else it starts one. Every tile is thus one sequence's consecutive positions by
 * construction, whatever the arrays hold; a step laid out as plan_add lays it out (each
 * sequence's tokens together, positions rising by one) gives each sequence ceil(n / max_rows)
 * tiles, its last one the shortest, and a decode token (one token of its sequence) a tile of
 * its own. tiles has room for n_tokens; returns how many there are (0 for no tokens). */
static inline int att_tiles_cut(const int32_t *seq_of, const int32_t *pos, int n_tokens,
                                int max_rows, struct att_tile *tiles) {
    int n = 0;
    for (int t = 0; t < n_tokens; t++) {
        struct att_tile *last = n ? &tiles[n - 1] : NULL;
        if (last && last->n < max_rows && seq_of[t] == seq_of[t - 1] && pos[t] == pos[t - 1] + 1) {
            last->n++;
            last->keys = pos[t] + 1;
        } else {
            tiles[n].t0 = t;
            tiles[n].n = 1;
            tiles[n].keys = pos[t] + 1;
            n++;
        }
    }
    return n;
}

/* Most keys first, then token order (a total order: the same plan on every rank and run). */
static inline int att_tiles_cmp(const void *pa, const void *pb) {
    const struct att_tile *a = (const struct att_tile *)pa, *b = (const struct att_tile *)pb;
    if (a->keys != b->keys) return a->keys > b->keys ? -1 : 1;
    return (a->t0 > b->t0) - (a->t0 < b->t0);
}

/* Orders tiles longest first (most keys), the order a GPU should start them in: its block
 * scheduler hands out blocks in grid order as SMs free up, so with more blocks than fit at
 * once the last to start are then the shortest, and the step's tail (SMs idle while the last
 * blocks finish) is a short tile's time, not a long one's. A prefill chunk in token order
 * has its longest tiles last (causal: later tokens see more keys), and a mixed step puts
 * short and long contexts anywhere; FlashAttention-2 orders its blocks the same way. Within
 * one wave of blocks the order changes nothing. */
static inline void att_tiles_order(struct att_tile *tiles, int n) {
    if (n > 1) qsort(tiles, (size_t)n, sizeof *tiles, att_tiles_cmp);
}

#endif
