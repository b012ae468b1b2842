/* Synthetic models for benchmarks: random weights of a real model's geometry built directly
 * in backend memory (no file), sharded for one rank exactly as model_load would shard them,
 * and a per-rank memory plan. Owned by the rank's compute thread, like model_load. */
#ifndef TPD_SYNTHETIC_H
#define TPD_SYNTHETIC_H

#include <stddef.h>

#include "model.h"

/* geometry: "llama3-8b", "llama3-70b", "qwen2.5-72b" or "tiny" (a small llama for tests),
 * optionally followed by ":bf16" (default), ":f16", ":f32", ":q8_0" or ":i4" (I4_S32, as INT4
 * checkpoints load) for the matrices.
 * Fills m like model_load. 0, or -1 with err (unknown geometry, tp that does not divide). */
int model_synthesize(struct model *m, const char *geometry, struct backend *be, int tp, int rank,
                     int pp, int stage, char *err);

/* Bytes one rank needs: weights (exact for the shard of its stage), KV cache of its stage's
 * layers for kv_tokens positions of
 * kv_type, activations for a step of max_tokens (the forward_state buffers), and a bound on
 * backend scratch. kv_tokens_fit: how many KV positions fit in mem_bytes after the rest. */
struct mem_plan {
    size_t weights, kv_per_token, kv, activations, workspace, total;
    enum dtype kv_type;
    long long kv_tokens;     /* the cache's capacity, as asked */
    long long kv_tokens_fit; /* 0 when mem_bytes is 0 */
    size_t kv_sink;          /* FP8: the F16 sink beside the cache (in kv and total) */
    int sink_blocks;         /* blocks that have one */
};
void synthetic_mem_plan(const struct model *m, enum dtype kv_type, long long kv_tokens,
                        int max_tokens, size_t mem_bytes, struct mem_plan *out);
/* Adds an FP8 cache's sink (parallel/kvcache.h) of sink_blocks blocks to the plan. */
void synthetic_mem_plan_sink(const struct model *m, int block_size, int sink_blocks,
                             struct mem_plan *p);
/* One line per item, for a log. The KV cache's tokens per GiB say what the chosen type
 * holds in a given memory (FP8: 2 hd / (hd + 1) times F16's, hd = head_dim). */
void synthetic_mem_plan_format(const struct mem_plan *p, char *buf, size_t len);

#endif
