/* The paged KV cache's storage on one rank: this rank's KV heads for every block, per
 * layer. Which block belongs to which sequence is decided on rank 0 (sched/block_pool)
 * and arrives in each step plan's block tables. Element types: F32, F16, or FP8 E4M3 with
 * a power-of-two scale per (token, KV head) row (util/fp8.h; docs/configuration.md). */
#ifndef TPD_KVCACHE_H
#define TPD_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/backend.h"

/* Positions at the start of a sequence kept in F16 beside an FP8 cache (kernels/backend.h,
 * struct kv_layer: the attention sink). */
#define KV_SINK_ROWS 4

struct kvcache {
    struct backend *be;
    enum dtype type; /* F32, F16 or F8_E4M3 */
    int n_layers, n_blocks, block_size, n_kv, head_dim;
    int sink_blocks; /* FP8: blocks 0 .. sink_blocks-1 keep an F16 sink; else 0 */
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

/* How many blocks get an F16 sink: for FP8, sink_blocks clamped to [0, n_blocks] (the
 * engine's option; the scheduler puts sequences' first blocks there); 0 for other types. */
int kvcache_sink_blocks(enum dtype type, int n_blocks, int sink_blocks);
/* The sink blocks a server gets: room for every running sequence's first block twice
 * over, or a sixteenth of the cache (the sink then costs about 3% of it) when that is
 * more, so that a prefix cache keeps many first blocks with their sink. */
int kvcache_sink_default(int n_blocks, int max_running);
/* Bytes of the sink beside the cache (every layer, K and V, the rank's n_kv heads). */
size_t kvcache_sink_bytes(enum dtype type, int n_layers, int n_kv, int head_dim, int block_size,
                          int sink_blocks);

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers,
                 int n_blocks, int block_size, int n_kv, int head_dim, int sink_blocks, char *err);
void kvcache_free(struct kvcache *kv);

#endif
