/* The KV block pool on rank 0, with automatic prefix caching: which of the engine's KV
 * blocks are free, which sequences hold each (reference counts), and which full blocks
 * hold a known token prefix that a later request may reuse instead of recomputing it.
 * The scheduler takes blocks for a sequence as it grows and gives them back when it ends
 * or is preempted; the ids travel to every rank in the step plan's block tables, so other
 * ranks know nothing of sharing. Step-loop thread only.
 *
 * Every block is exactly one of:
 *   free       unreferenced, holds nothing reusable (a stack, lowest ids handed out first);
 *   referenced held by refs[b] >= 1 sequences; may also be cached (read-only then);
 *   idle       cached but unreferenced: kept for reuse, evicted (least recently released
 *              first) when a block is needed and none is free. Idle blocks count as
 *              available (kv_blocks_free): they are reclaimable at once.
 *
 * A cached block is identified by its chain: (the cached block before it in its sequence,
 * or a salt for the first block, and its block_size token ids). The hash table is keyed
 * by a 64-bit chained hash of (parent's hash, salt, tokens); a hit is confirmed by
 * comparing the token ids, the salt and the parent's identity (a serial number unique to
 * each cached content, never reused), so a hash collision costs a probe, never a wrong
 * block. A block's K/V depends on nothing else today; the salt is where an adapter or
 * a per-tenant cache separation would go.
 *
 * Leaves go first: a sequence releases its blocks last-first, and a block's parent is
 * held at least as long as the block itself, so in the LRU order a chain's tail blocks
 * always precede the blocks they extend.
 *
 * Sink blocks: ids below sink_blocks are where an FP8 cache keeps its first rows exact
 * (parallel/kvcache.h), so a sequence's first block is taken from them: a free one, else
 * the least recently released idle one (its cached chain's later blocks then stay cached
 * but unreachable until evicted in turn), else any block as above. Other blocks are taken
 * from the rest first (free, then idle), and from free sink blocks only when nothing else
 * is left. With sink_blocks above the number of sequences that run at once, every first
 * block is a sink block. */
#ifndef TPD_BLOCK_POOL_H
#define TPD_BLOCK_POOL_H

#include <stdint.h>

struct block_pool {
    int n_blocks, block_size;
    int caching;       /* prefix caching on: full blocks are kept for reuse */
    int32_t *free_ids; /* free blocks from sink_blocks up: a stack, the lowest ids on top */
    int n_free;
    int sink_blocks;    /* ids 0 .. sink_blocks-1 are for sequences' first blocks */
    int32_t *free_sink; /* free blocks below sink_blocks: a stack, the lowest ids on top */
    int n_free_sink;
    int32_t *refs; /* [n_blocks] sequences holding each block */
    int n_idle;    /* cached, unreferenced */
    int n_cached;  /* cached, referenced or not */

    /* prefix cache, per block (serial 0: not cached) */
    uint64_t *hash, *serial, *parent_serial, *salt;
    int32_t *tokens; /* [n_blocks][block_size] token ids of cached blocks */
    int32_t *bucket; /* [n_buckets] first block of each hash bucket, -1: empty */
    int32_t *next_in_bucket;
    int n_buckets;                /* a power of two */
    int32_t *lru_prev, *lru_next; /* idle blocks, head = evicted first */
    int32_t lru_head, lru_tail;
    uint64_t next_serial;
    long evictions;
};

void block_pool_init(struct block_pool *bp, int n_blocks, int block_size, int caching,
                     int sink_blocks);
void block_pool_free(struct block_pool *bp);
/* Free plus idle blocks: what take can hand out. */
int block_pool_available(const struct block_pool *bp);
/* Takes n blocks (one reference each) into out, evicting idle cached blocks when no free
 * one is left; -1 (nothing taken) if fewer than n are available. first: out[0] is to be a
 * sequence's first block (a sink block when one can be had). */
int block_pool_take(struct block_pool *bp, int n, int32_t *out, int first);
/* Drops one reference to each of n blocks, last first; a block nobody holds becomes idle
 * if cached, else free. Releasing an unheld block is a fatal bug. */
void block_pool_release(struct block_pool *bp, int n, const int32_t *ids);
/* Takes one more reference to each of n blocks already held or idle (a prefix hit). */
void block_pool_ref(struct block_pool *bp, int n, const int32_t *ids);

/* The longest chain of cached blocks that holds tokens[0 .. n_full * block_size) under
 * salt: their ids into out (no reference taken), and how many of them are idle (taking
 * them makes that many fewer blocks available). Returns the number of blocks. */
int block_pool_match(const struct block_pool *bp, uint64_t salt, const int32_t *tokens, int n_full,
                     int32_t *out, int *n_idle);
/* Block id, held by the caller, has been filled with `tokens` (block_size ids) after the
 * cached block parent (-1: it is the first). Makes it cached and returns id; when an
 * identical block is cached already (two sequences computed the same prefix at once),
 * the caller's reference moves to that one, id is released, and that one is returned. */
int32_t block_pool_commit(struct block_pool *bp, int32_t id, int32_t parent, uint64_t salt,
                          const int32_t *tokens);

/* Blocks that hold `tokens` tokens of one sequence. */
int block_pool_blocks_for(int tokens, int block_size);

#endif
