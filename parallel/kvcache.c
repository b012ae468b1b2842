#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"

static const struct {
    const char *name;
    enum dtype type;
} types[] = {{"f16", DT_F16}, {"f32", DT_F32}, {"fp8", DT_F8_E4M3}};

const char *kvcache_type_name(enum dtype type) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (types[i].type == type) return types[i].name;
    return "?";
}

int kvcache_type_parse(const char *name, enum dtype *out, char *err) {
    for (size_t i = 0; name && i < sizeof types / sizeof *types; i++)
        if (!strcmp(name, types[i].name)) {
            *out = types[i].type;
            return 0;
        }
    return err_set(err, "KV cache type \"%s\": expected f16, f32 or fp8", name ? name : "");
}

/* Bytes per element of the codes, and per (token, head) row of the scale exponents. */
static int elem_bytes(enum dtype type) {
    return type == DT_F32 ? 4 : type == DT_F16 ? 2 : type == DT_F8_E4M3 ? 1 : 0;
}
static int row_extra(enum dtype type) { return type == DT_F8_E4M3 ? 1 : 0; }

size_t kvcache_token_bytes(enum dtype type, int n_layers, int n_kv, int head_dim) {
    if (!elem_bytes(type)) return 0;
    return 2 * (size_t)n_layers * (size_t)n_kv *
           ((size_t)head_dim * (size_t)elem_bytes(type) + (size_t)row_extra(type));
}

static int sink_rows(int block_size) {
    return block_size < KV_SINK_ROWS ? block_size : KV_SINK_ROWS;
}

int kvcache_sink_blocks(enum dtype type, int n_blocks, int sink_blocks) {
    if (type != DT_F8_E4M3 || sink_blocks < 0) return 0;
    return sink_blocks < n_blocks ? sink_blocks : n_blocks;
}

int kvcache_sink_default(int n_blocks, int max_running) {
    const long want = 2L * max_running > n_blocks / 16 ? 2L * max_running : n_blocks / 16;
    return want < n_blocks ? (int)want : n_blocks;
}

/* Bytes of one layer's K (or V) sink: F16 rows. The sink is at most a few rows of each
 * block, so it cannot overflow where the codes' size did not. */
static size_t sink_tensor_bytes(int n_kv, int head_dim, int block_size, int sink_blocks) {
    return (size_t)sink_blocks * (size_t)sink_rows(block_size) * (size_t)n_kv * (size_t)head_dim *
           2;
}

size_t kvcache_sink_bytes(enum dtype type, int n_layers, int n_kv, int head_dim, int block_size,
                          int sink_blocks) {
    if (type != DT_F8_E4M3 || sink_blocks <= 0) return 0;
    return 2 * (size_t)n_layers * sink_tensor_bytes(n_kv, head_dim, block_size, sink_blocks);
}

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers,
                 int n_blocks, int block_size, int n_kv, int head_dim, int sink_blocks, char *err) {
    memset(kv, 0, sizeof *kv);
    if (!elem_bytes(type)) return err_set(err, "KV cache type must be f32, f16 or fp8");
    if (n_blocks < 1 || block_size < 1)
        return err_set(err, "KV cache needs at least one block of one token");
    uint64_t rows = 0, per = 0;
    if (size_mul((uint64_t)n_blocks * (uint64_t)block_size, (uint64_t)n_kv, &rows) ||
        size_mul(rows, (uint64_t)head_dim * (uint64_t)elem_bytes(type), &per))
        return err_set(err, "KV cache size overflows");
    const int sinks = kvcache_sink_blocks(type, n_blocks, sink_blocks),
              srows = sink_rows(block_size);
    const size_t sink = sink_tensor_bytes(n_kv, head_dim, block_size, sinks);
    *kv = (struct kvcache){.be = be,
                           .type = type,
                           .n_layers = n_layers,
                           .n_blocks = n_blocks,
                           .block_size = block_size,
                           .n_kv = n_kv,
                           .head_dim = head_dim,
                           .sink_blocks = sinks};
    kv->layers = xcalloc((unsigned long)n_layers, sizeof *kv->layers);
    const int scaled = row_extra(type) > 0;
    for (int l = 0; l < n_layers; l++) {
        struct kv_layer *x = &kv->layers[l];
        x->k = be->alloc(be->ctx, per);
        x->v = be->alloc(be->ctx, per);
        if (scaled) {
            x->k_exp = be->alloc(be->ctx, rows);
            x->v_exp = be->alloc(be->ctx, rows);
        }
        if (sinks) {
            x->k_sink = be->alloc(be->ctx, sink);
            x->v_sink = be->alloc(be->ctx, sink);
            x->sink_blocks = sinks;
            x->sink_rows = srows;
        }
    }
    kv->bytes = ((size_t)per + (scaled ? (size_t)rows : 0) + sink) * 2 * (size_t)n_layers;
    return 0;
}

void kvcache_free(struct kvcache *kv) {
    if (!kv->layers) return;
    for (int l = 0; l < kv->n_layers; l++) {
        kv->be->free(kv->be->ctx, kv->layers[l].k);
        kv->be->free(kv->be->ctx, kv->layers[l].v);
        if (kv->layers[l].k_exp) kv->be->free(kv->be->ctx, kv->layers[l].k_exp);
        if (kv->layers[l].v_exp) kv->be->free(kv->be->ctx, kv->layers[l].v_exp);
        if (kv->layers[l].k_sink) kv->be->free(kv->be->ctx, kv->layers[l].k_sink);
        if (kv->layers[l].v_sink) kv->be->free(kv->be->ctx, kv->layers[l].v_sink);
    }
    free(kv->layers);
    memset(kv, 0, sizeof *kv);
}
