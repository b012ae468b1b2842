/* The KV block pool on rank 0: which of the engine's KV blocks are free. The scheduler
 * takes blocks for a sequence as it grows and gives them back when it ends or is
 * preempted; the ids travel to every rank in the step plan's block tables. Step-loop
 * thread only. (Prefix caching will add reference counts and a hash chain here.) */
#ifndef TPD_BLOCK_POOL_H
#define TPD_BLOCK_POOL_H

#include <stdint.h>

struct block_pool {
    int n_blocks;
    int32_t *free_ids; /* a stack; the lowest ids on top, handed out first */
    int n_free;
};

void block_pool_init(struct block_pool *bp, int n_blocks);
void block_pool_free(struct block_pool *bp);
/* Takes n block ids into out; -1 (nothing taken) if fewer are free. */
int block_pool_take(struct block_pool *bp, int n, int32_t *out);
/* Returns n ids; an id returned twice is a fatal bug. */
void block_pool_give(struct block_pool *bp, int n, const int32_t *ids);
/* Blocks that hold `tokens` tokens of one sequence. */
int block_pool_blocks_for(int tokens, int block_size);

#endif
