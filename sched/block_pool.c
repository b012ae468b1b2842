#include "block_pool.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void block_pool_init(struct block_pool *bp, int n_blocks) {
    bp->n_blocks = n_blocks;
    bp->free_ids = xmalloc(sizeof(int32_t) * (size_t)(n_blocks > 0 ? n_blocks : 1));
    for (int i = 0; i < n_blocks; i++) bp->free_ids[i] = n_blocks - 1 - i;
    bp->n_free = n_blocks;
}

void block_pool_free(struct block_pool *bp) {
    free(bp->free_ids);
    memset(bp, 0, sizeof *bp);
}

int block_pool_take(struct block_pool *bp, int n, int32_t *out) {
    if (n > bp->n_free) return -1;
    for (int i = 0; i < n; i++) out[i] = bp->free_ids[--bp->n_free];
    return 0;
}

void block_pool_give(struct block_pool *bp, int n, const int32_t *ids) {
    for (int i = 0; i < n; i++) {
        if (bp->n_free >= bp->n_blocks || ids[i] < 0 || ids[i] >= bp->n_blocks)
            FATAL("KV block %d returned twice or out of range", ids[i]);
        bp->free_ids[bp->n_free++] = ids[i];
    }
}

int block_pool_blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }
