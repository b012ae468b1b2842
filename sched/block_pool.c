#include "block_pool.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void block_pool_init(struct block_pool *bp, int n_blocks, int block_size, int caching,
                     int sink_blocks) {
    memset(bp, 0, sizeof *bp);
    size_t n = (size_t)(n_blocks > 0 ? n_blocks : 1);
    bp->n_blocks = n_blocks;
    bp->block_size = block_size;
    bp->caching = caching;
    bp->sink_blocks = sink_blocks < 0 ? 0 : sink_blocks > n_blocks ? n_blocks : sink_blocks;
    bp->free_ids = xmalloc(sizeof(int32_t) * n);
    bp->free_sink = xmalloc(sizeof(int32_t) * n);
    for (int i = n_blocks - 1; i >= 0; i--) {
        if (i < bp->sink_blocks) bp->free_sink[bp->n_free_sink++] = i;
        else bp->free_ids[bp->n_free++] = i;
    }
    bp->refs = xcalloc(n, sizeof(int32_t));
    bp->lru_head = bp->lru_tail = -1;
    bp->next_serial = 1;
    if (!caching) return;
    bp->hash = xcalloc(n, sizeof(uint64_t));
    bp->serial = xcalloc(n, sizeof(uint64_t));
    bp->parent_serial = xcalloc(n, sizeof(uint64_t));
    bp->salt = xcalloc(n, sizeof(uint64_t));
    bp->tokens = xmalloc(sizeof(int32_t) * n * (size_t)block_size);
    bp->next_in_bucket = xmalloc(sizeof(int32_t) * n);
    bp->lru_prev = xmalloc(sizeof(int32_t) * n);
    bp->lru_next = xmalloc(sizeof(int32_t) * n);
    bp->n_buckets = 1;
    while (bp->n_buckets < 2 * n_blocks) bp->n_buckets *= 2;
    bp->bucket = xmalloc(sizeof(int32_t) * (size_t)bp->n_buckets);
    for (int i = 0; i < bp->n_buckets; i++) bp->bucket[i] = -1;
}

void block_pool_free(struct block_pool *bp) {
    free(bp->free_ids);
    free(bp->free_sink);
    free(bp->refs);
    free(bp->hash);
    free(bp->serial);
    free(bp->parent_serial);
    free(bp->salt);
    free(bp->tokens);
    free(bp->next_in_bucket);
    free(bp->lru_prev);
    free(bp->lru_next);
    free(bp->bucket);
    memset(bp, 0, sizeof *bp);
}

int block_pool_available(const struct block_pool *bp) {
    return bp->n_free + bp->n_free_sink + bp->n_idle;
}

/* ---- the LRU list of idle blocks ---- */

static void lru_append(struct block_pool *bp, int32_t b) {
    bp->lru_prev[b] = bp->lru_tail;
    bp->lru_next[b] = -1;
    if (bp->lru_tail >= 0) bp->lru_next[bp->lru_tail] = b;
    else bp->lru_head = b;
    bp->lru_tail = b;
    bp->n_idle++;
}

static void lru_remove(struct block_pool *bp, int32_t b) {
    if (bp->lru_prev[b] >= 0) bp->lru_next[bp->lru_prev[b]] = bp->lru_next[b];
    else bp->lru_head = bp->lru_next[b];
    if (bp->lru_next[b] >= 0) bp->lru_prev[bp->lru_next[b]] = bp->lru_prev[b];
    else bp->lru_tail = bp->lru_prev[b];
    bp->n_idle--;
}

/* ---- the hash table ---- */

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The chained hash of a block: its parent's hash (0 for the first block), the salt and
 * its token ids. */
static uint64_t block_hash(uint64_t parent_hash, uint64_t salt, const int32_t *tokens, int n) {
    uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull) ^ mix64(salt + 0x632be59bd9b4e019ull);
    for (int i = 0; i < n; i++)
        h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] * 0xff51afd7ed558ccdull + (uint64_t)i));
    return h;
}

/* The cached block with this identity, or -1. */
static int32_t find(const struct block_pool *bp, uint64_t h, uint64_t parent_serial, uint64_t salt,
                    const int32_t *tokens) {
    for (int32_t b = bp->bucket[h & (uint64_t)(bp->n_buckets - 1)]; b >= 0;
         b = bp->next_in_bucket[b])
        if (bp->hash[b] == h && bp->parent_serial[b] == parent_serial && bp->salt[b] == salt &&
            !memcmp(bp->tokens + (size_t)b * (size_t)bp->block_size, tokens,
                    sizeof(int32_t) * (size_t)bp->block_size))
            return b;
    return -1;
}

static void uncache(struct block_pool *bp, int32_t b) {
    int32_t *p = &bp->bucket[bp->hash[b] & (uint64_t)(bp->n_buckets - 1)];
    while (*p != b) p = &bp->next_in_bucket[*p];
    *p = bp->next_in_bucket[b];
    bp->serial[b] = 0;
    bp->n_cached--;
}

/* ---- references ---- */

static void evict(struct block_pool *bp, int32_t b) {
    lru_remove(bp, b);
    uncache(bp, b);
    bp->evictions++;
}

/* A sink block for a sequence's first block: free, else the least recently released idle
 * one; -1 when every sink block is held. */
static int32_t take_sink(struct block_pool *bp) {
    if (bp->n_free_sink) return bp->free_sink[--bp->n_free_sink];
    if (!bp->caching) return -1;
    for (int32_t b = bp->lru_head; b >= 0; b = bp->lru_next[b])
        if (b < bp->sink_blocks) {
            evict(bp, b);
            return b;
        }
    return -1;
}

/* Any other block (one is available): free, else the least recently released idle one,
 * else a free sink block. */
static int32_t take_other(struct block_pool *bp) {
    if (bp->n_free) return bp->free_ids[--bp->n_free];
    if (bp->n_idle) {
        int32_t b = bp->lru_head;
        evict(bp, b);
        return b;
    }
    return bp->free_sink[--bp->n_free_sink];
}

int block_pool_take(struct block_pool *bp, int n, int32_t *out, int first) {
    if (n > block_pool_available(bp)) return -1;
    for (int i = 0; i < n; i++) {
        int32_t b = i == 0 && first && bp->sink_blocks ? take_sink(bp) : -1;
        if (b < 0) b = take_other(bp);
        bp->refs[b] = 1;
        out[i] = b;
    }
    return 0;
}

static void put_free(struct block_pool *bp, int32_t b) {
    if (b < bp->sink_blocks) bp->free_sink[bp->n_free_sink++] = b;
    else bp->free_ids[bp->n_free++] = b;
}

void block_pool_release(struct block_pool *bp, int n, const int32_t *ids) {
    for (int i = n - 1; i >= 0; i--) {
        int32_t b = ids[i];
        if (b < 0 || b >= bp->n_blocks || bp->refs[b] < 1)
            FATAL("KV block %d released but not held", b);
        if (--bp->refs[b]) continue;
        if (bp->caching && bp->serial[b]) lru_append(bp, b);
        else put_free(bp, b);
    }
}

void block_pool_ref(struct block_pool *bp, int n, const int32_t *ids) {
    for (int i = 0; i < n; i++) {
        int32_t b = ids[i];
        if (b < 0 || b >= bp->n_blocks || (!bp->refs[b] && !(bp->caching && bp->serial[b])))
            FATAL("KV block %d referenced but neither held nor cached", b);
        if (bp->refs[b]++ == 0) lru_remove(bp, b);
    }
}

/* ---- the prefix cache ---- */

int block_pool_match(const struct block_pool *bp, uint64_t salt, const int32_t *tokens, int n_full,
                     int32_t *out, int *n_idle) {
    *n_idle = 0;
    if (!bp->caching) return 0;
    uint64_t h = 0, parent = 0;
    int k = 0;
    for (; k < n_full; k++) {
        const int32_t *t = tokens + (size_t)k * (size_t)bp->block_size;
        h = block_hash(h, salt, t, bp->block_size);
        int32_t b = find(bp, h, parent, salt, t);
        if (b < 0) break;
        out[k] = b;
        *n_idle += bp->refs[b] == 0;
        parent = bp->serial[b];
    }
    return k;
}

int32_t block_pool_commit(struct block_pool *bp, int32_t id, int32_t parent, uint64_t salt,
                          const int32_t *tokens) {
    if (!bp->caching) return id;
    if (id < 0 || id >= bp->n_blocks || bp->refs[id] < 1)
        FATAL("KV block %d committed but not held", id);
    if (bp->serial[id]) return id; /* already cached (a prefix hit) */
    if (parent >= 0 && !bp->serial[parent])
        FATAL("KV block %d committed after uncached block %d", id, parent);
    uint64_t ph = parent >= 0 ? bp->hash[parent] : 0, ps = parent >= 0 ? bp->serial[parent] : 0;
    uint64_t h = block_hash(ph, salt, tokens, bp->block_size);
    int32_t same = find(bp, h, ps, salt, tokens);
    if (same >= 0) { /* computed twice at once: keep the cached copy */
        block_pool_ref(bp, 1, &same);
        block_pool_release(bp, 1, &id);
        return same;
    }
    bp->hash[id] = h;
    bp->serial[id] = bp->next_serial++;
    bp->parent_serial[id] = ps;
    bp->salt[id] = salt;
    memcpy(bp->tokens + (size_t)id * (size_t)bp->block_size, tokens,
           sizeof(int32_t) * (size_t)bp->block_size);
    size_t slot = h & (uint64_t)(bp->n_buckets - 1);
    bp->next_in_bucket[id] = bp->bucket[slot];
    bp->bucket[slot] = id;
    bp->n_cached++;
    return id;
}

int block_pool_blocks_for(int tokens, int block_size) {
    return (tokens + block_size - 1) / block_size;
}
