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
    return 2 * (size_t)n_layers * (size_t)n_kv * ((size_t)head_dim * (size_t)elem_bytes(type) + (size_t)row_extra(type));
}

int kvcache_init(struct kvcache *kv, struct backend *be, enum dtype type, int n_layers, int n_blocks,
                 int block_size, int n_kv, int head_dim, char *err) {
    memset(kv, 0, sizeof *kv);
    if (!elem_bytes(type)) return err_set(err, "KV cache type must be f32, f16 or fp8");
    if (n_blocks < 1 || block_size < 1) return err_set(err, "KV cache needs at least one block of one token");
    uint64_t rows = 0, per = 0;
    if (size_mul((uint64_t)n_blocks * (uint64_t)block_size, (uint64_t)n_kv, &rows) ||
        size_mul(rows, (uint64_t)head_dim * (uint64_t)elem_bytes(type), &per))
        return err_set(err, "KV cache size overflows");
    *kv = (struct kvcache){.be = be, .type = type, .n_layers = n_layers, .n_blocks = n_blocks,
                           .block_size = block_size, .n_kv = n_kv, .head_dim = head_dim};
    kv->layers = xcalloc((unsigned long)n_layers, sizeof *kv->layers);
    const int scaled = row_extra(type) > 0;
    for (int l = 0; l < n_layers; l++) {
        kv->layers[l].k = be->alloc(be->ctx, per);
        kv->layers[l].v = be->alloc(be->ctx, per);
        if (scaled) {
            kv->layers[l].k_exp = be->alloc(be->ctx, rows);
            kv->layers[l].v_exp = be->alloc(be->ctx, rows);
        }
    }
    kv->bytes = ((size_t)per + (scaled ? (size_t)rows : 0)) * 2 * (size_t)n_layers;
    return 0;
}

void kvcache_free(struct kvcache *kv) {
    if (!kv->layers) return;
    for (int l = 0; l < kv->n_layers; l++) {
        kv->be->free(kv->be->ctx, kv->layers[l].k);
        kv->be->free(kv->be->ctx, kv->layers[l].v);
        if (kv->layers[l].k_exp) kv->be->free(kv->be->ctx, kv->layers[l].k_exp);
        if (kv->layers[l].v_exp) kv->be->free(kv->be->ctx, kv->layers[l].v_exp);
    }
    free(kv->layers);
    memset(kv, 0, sizeof *kv);
}
