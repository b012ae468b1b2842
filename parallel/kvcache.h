/* The paged KV cache's storage on one rank: this rank's KV heads for every block, per
 * layer. Which block belongs to which sequence is decided on rank 0 (sched/block_pool)
 * and arrives in each step plan's block tables. */
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
};

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers, int n_blocks,
                 int block_size, int n_kv, int head_dim, char *err);
void kvcache_free(struct kvcache *kv);

#endif
