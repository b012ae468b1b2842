/* The paged KV cache. Storage (this rank's KV heads for every block, per layer) lives on
 * every rank; the block allocator that hands out block ids is used by rank 0 only, which
 * puts the ids in each step plan. */
#ifndef TPD_KVCACHE_H
#define TPD_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"

struct kvcache {
    struct backend *be;
    enum dtype type;   /* F32 or F16 */
    int n_layers, n_blocks, block_size, n_kv, head_dim;
    struct kv_layer *layers;
    size_t bytes;
    /* rank 0: free block ids (a stack) */
    int32_t *free_ids;
    int n_free;
};

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers, int n_blocks,
                 int block_size, int n_kv, int head_dim, char *err);
void kvcache_free(struct kvcache *kv);
/* Takes n block ids into out; -1 (nothing taken) if fewer are free. */
int kvcache_take(struct kvcache *kv, int n, int32_t *out);
void kvcache_give(struct kvcache *kv, int n, const int32_t *ids);

#endif
