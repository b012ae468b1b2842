/* The paged KV cache's storage on one rank: this rank's KV heads for every block, per
 * layer. Which block belongs to which sequence is decided on rank 0 (sched/block_pool)
 * and arrives in each step plan's block tables. Element types: F32, F16, or FP8 E4M3 with
 * a power-of-two scale per (token, KV head) row (util/fp8.h; docs/configuration.md). */
#ifndef TPD_KVCACHE_H
#define TPD_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"

struct kvcache {
    struct backend *be;
    enum dtype type;   /* F32, F16 or F8_E4M3 */
    int n_layers, n_blocks, block_size, n_kv, head_dim;
    struct kv_layer *layers;
    size_t bytes;
};

/* cache.type's name ("f32", "f16", "fp8") to its element type; 0, or -1 with err. */
int kvcache_type_parse(const char *name, enum dtype *out, char *err);
/* The name cache.type gives the type ("f16"...), "?" for others. */
const char *kvcache_type_name(enum dtype type);
/* Bytes one token takes in one rank's cache (K and V, every layer, the rank's n_kv heads),
 * FP8's scale exponents included; 0 for a type the cache does not store. */
size_t kvcache_token_bytes(enum dtype type, int n_layers, int n_kv, int head_dim);

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers, int n_blocks,
                 int block_size, int n_kv, int head_dim, char *err);
void kvcache_free(struct kvcache *kv);

#endif
