#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers, int n_blocks,
                 int block_size, int n_kv, int head_dim, char *err) {
    memset(kv, 0, sizeof *kv);
    if (type != DT_F32 && type != DT_F16) return err_set(err, "KV cache type must be f32 or f16");
    if (n_blocks < 1 || block_size < 1) return err_set(err, "KV cache needs at least one block of one token");
    uint64_t per = 0;
    if (size_mul((uint64_t)n_blocks * (uint64_t)block_size, (uint64_t)n_kv * (uint64_t)head_dim, &per) ||
        size_mul(per, type == DT_F32 ? 4 : 2, &per))
        return err_set(err, "KV cache size overflows");
    *kv = (struct kvcache){.be = be, .type = type, .n_layers = n_layers, .n_blocks = n_blocks,
                           .block_size = block_size, .n_kv = n_kv, .head_dim = head_dim};
    kv->layers = xcalloc((unsigned long)n_layers, sizeof *kv->layers);
    for (int l = 0; l < n_layers; l++) {
        kv->layers[l].k = be->alloc(be->ctx, per);
        kv->layers[l].v = be->alloc(be->ctx, per);
    }
    kv->bytes = (size_t)per * 2 * (size_t)n_layers;
    return 0;
}

void kvcache_free(struct kvcache *kv) {
    if (!kv->layers) return;
    for (int l = 0; l < kv->n_layers; l++) {
        kv->be->free(kv->be->ctx, kv->layers[l].k);
        kv->be->free(kv->be->ctx, kv->layers[l].v);
    }
    free(kv->layers);
    memset(kv, 0, sizeof *kv);
}
