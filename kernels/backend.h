/* The compute backend op table: the forward pass (parallel/forward.c) is written once
 * against these operations; kernels/cpu implements them on the host, kernels/cuda on a
 * GPU. All pointers are backend memory. One backend per rank, used by its compute thread. */
#ifndef TPD_BACKEND_H
#define TPD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../util/dtype.h"
#include "../util/logit_cand.h"

/* A weight matrix of `rows` outputs by `cols` inputs in its stored type. */
struct bweight {
    void *data;
    enum dtype type;
    int rows, cols;
    float amax; /* DT_F8_E4M3_S32, DT_I4_S32: the largest |weight| (the CUDA backend's F16
                 * or BF16 copy for prefill); 0 for other types */
    /* NULL, or the input column each of the cols stored columns multiplies: stored column j
     * takes x[t][gather[j]], or 0 where gather[j] is -1. Backend memory, [cols]. Only
     * DT_I4_S32 from a GPTQ act-order checkpoint (model/int4w.h) has one: its columns
     * regrouped so that each group fills whole 32-column blocks, padded with -1 columns.
     * matmul and matmul_grouped gather x themselves; x then has the input's width, not cols
     * (a backend without the gather refuses such weights at load: parallel/model.c). In
     * C++ (the CUDA sources) a default leaves it out of their positional initializers. */
#ifdef __cplusplus
    int32_t *gather = nullptr;
#else
    int32_t *gather;
#endif
    /* DT_F8_E4M3_S32: 1 when every block of each row has its row's scale (per-tensor and
     * per-channel checkpoints, found on load by fp8w_row_scaled; synthetic FP8 models), so
     * the CUDA backend's prefill may run the product as FP8 x FP8 (W8A8) with one scale per
     * row; 0 for 128x128-block checkpoints and every other type. */
#ifdef __cplusplus
    int row_scaled = 0;
#else
    int row_scaled;
#endif
};

/* One product of matmul_grouped: y[t][r] = sum_k w[r][k] x[t][k] for t < T. */
struct bmatmul {
    float *y;
    int64_t ldy;
    const float *x;
    int64_t ldx;
    int T;
    const struct bweight *w;
};

/* Where each token of a ragged step sits, for attention over the paged KV cache. */
struct attn_batch {
    int n_tokens, n_seqs;
    const int32_t *seq_of;    /* [n_tokens] sequence index of each token */
    const int32_t *pos;       /* [n_tokens] absolute position of each token */
    const int32_t *block_off; /* [n_seqs + 1] start of each sequence's blocks in `blocks` */
    const int32_t *blocks;    /* KV block ids, concatenated per sequence */
    int block_size;           /* tokens per KV block */
    /* Host copies of seq_of and pos (the step plan's), or NULL: the CUDA backend cuts a
     * prefill-sized step into per-sequence tiles from them when attention is called
     * (kernels/att_tiles.h), never inside a captured graph (only steps of more than 64 tokens
     * read them); without them it falls back to fixed 64-token tiles. The CPU backend plans
     * from seq_of and pos, host memory there. */
    const int32_t *host_seq_of, *host_pos;
};

/* One layer's KV cache on this rank: [n_blocks][block_size][n_kv][head_dim] of kv_type
 * (F32, F16 or F8_E4M3) for K and for V. F8_E4M3 rows are codes of x / 2^e, with each
 * (token, KV head) row's exponent e in k_exp / v_exp: [n_blocks][block_size][n_kv] int8
 * (util/fp8.h); NULL for the other types.
 *
 * The FP8 sink: blocks with id < sink_blocks also keep their first sink_rows rows in F16,
 * in k_sink / v_sink: [sink_blocks][sink_rows][n_kv][head_dim] (written by kv_store
 * beside the codes), as x / 2^e with the row's own exponent e, so that a kernel swaps the
 * codes for these values and changes nothing else. Attention reads a sequence's positions
 * 0 .. sink_rows-1 from there when its first block is such a block. Those first positions are the
 * attention sink that every later query attends to most; E4M3's 3 mantissa bits there alone flip
 * the argmax of SmolLM2 at 4 of 546 positions, and keeping them exact flips none
 * (docs/configuration.md). sink_blocks is 0 (no sink) for the other types. */
struct kv_layer {
    void *k, *v;
    int8_t *k_exp, *v_exp;
    uint16_t *k_sink, *v_sink;
    int sink_blocks, sink_rows;
};

/* Which implementation a backend is, for code that must tell them apart (the communicator
 * picks the GPU all-reduce only when every rank has a CUDA backend). 0: no backend open. */
enum backend_kind { BACKEND_NONE = 0, BACKEND_CPU, BACKEND_CUDA };

struct backend {
    enum backend_kind kind;
    const char *name; /* for logs: "cpu", "cuda" */
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes); /* zero-filled; fatal on failure */
    void (*free)(void *ctx, void *p);
    /* upload: src may be reused once it returns; dst is written before any op queued after
     * it runs (the copy itself may still be in flight: no need to wait for it). download:
     * dst holds the bytes when it returns, after every op queued before it. */
    void (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    void (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    /* host memory that download/upload move fastest (page-locked on a GPU; plain zeroed
     * memory on the CPU); fatal on failure */
    void *(*alloc_host)(void *ctx, size_t bytes);
    void (*free_host)(void *ctx, void *p);

    /* y[t][r] = sum_k W[r][k] x[t][k] */
    void (*matmul)(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                   const struct bweight *w);
    /* n products, each what matmul computes (the same bits), each with its own x, T and
     * weight: the experts of a mixture-of-experts layer over their own tokens, in one go */
    void (*matmul_grouped)(void *ctx, const struct bmatmul *ops, int n);
    /* x[t] = row (tok[t] - row0) of table when inside [row0, row0 + table->rows), else 0 */
    void (*embed)(void *ctx, float *x, const int32_t *tok, int T, const struct bweight *table,
                  int row0);
    /* y[t] = x[t] / rms(x[t]) * w, rows of n, contiguous */
    void (*rmsnorm)(void *ctx, float *y, const float *x, const float *w, int T, int n, float eps);
    /* the residual add and the next RMSNorm in one pass: x += y, then y_norm = rmsnorm(x) * w
     * (T rows of n; what add then rmsnorm compute, without reading x twice) */
    void (*add_rmsnorm)(void *ctx, float *x, const float *y, float *y_norm, const float *w, int T,
                        int n, float eps);
    /* the same per head, in place: T rows of ld floats holding n_heads heads of hd */
    void (*head_rmsnorm)(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd,
                         const float *w, float eps);
    void (*add_bias)(void *ctx, float *x, int64_t ld, int T, int n, const float *b);
    /* rotary embedding in place; inv_freq[hd/2]; neox: pairs (i, i+hd/2), else (2i, 2i+1) */
    void (*rope)(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd, const int32_t *pos,
                 const float *inv_freq, int neox);
    /* stores k and v rows of each token into the cache at its position */
    void (*kv_store)(void *ctx, struct kv_layer *kv, enum dtype kv_type, const float *k,
                     const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b);
    /* causal attention of each token's query heads over its sequence's cached positions
     * 0..pos. Query head h uses KV head h / group - kv_head0 (group = query heads per KV
     * head, globally); out[t] + h*hd receives the result. */
    void (*attention)(void *ctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q,
                      int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                      enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b);
    /* out[t][i] = silu(g[t][i]) * u[t][i] */
    void (*silu_mul)(void *ctx, float *out, int64_t ldo, const float *g, const float *u, int64_t ld,
                     int T, int n);
    /* out[r][0..k) = the k best entries of row r of x (n_rows rows of n_cols, ld apart), in
     * util/logit_cand.h's order (larger first, ties lower column; NaN never), ids = column +
     * id0; past a row's non-NaN entries {-INFINITY, -1}. 1 <= k <= LOGIT_CANDS_MAX, k <= n_cols.
     * out is backend memory. Optional: NULL on the CUDA backend with debug.top_cands false; then
     * engine_info's max_cands is 0 on every rank and no plan asks for candidates. */
    void (*top_cands)(void *ctx, struct logit_cand *out, const float *x, int n_rows, int n_cols,
                      int64_t ld, int32_t id0, int k);
    /* dst[i] = src[idx[i]], rows of n floats */
    void (*gather_rows)(void *ctx, float *dst, const float *src, const int32_t *idx, int n_rows,
                        int n);
    /* y[t][i] = sum over j < k, in order, of w[t*k + j] * src[pos[t*k + j]][i], leaving out
     * pairs whose pos is negative (0 when all are): each token's weighted sum of its
     * experts' output rows (parallel/moe.h); rows of n floats, ldy / lds apart */
    void (*moe_combine)(void *ctx, float *y, int64_t ldy, const float *src, int64_t lds,
                        const int32_t *pos, const float *w, int T, int k, int n);
    void (*zero)(void *ctx, void *p, size_t bytes);
    /* x += y, n floats */
    void (*add)(void *ctx, float *x, const float *y, size_t n);
    void (*sync)(void *ctx); /* wait for queued work (no-op on the CPU) */
    /* Optional (NULL where the backend has none): body(arg) queues a step's work, the same
     * work whenever key is the same (same buffers, sizes and launch shapes; the data in the
     * buffers may differ). Returns 1 when that work has been queued as a graph (replayed,
     * or captured now), 0 when the caller must run body itself (a key's first sighting). */
    int (*graph_run)(void *ctx, uint64_t key, void (*body)(void *arg), void *arg);
    void (*destroy)(struct backend *b);
};

/* The entries of struct backend's op table, in its order, each X(ID, field, flags): the one
 * op list, from which the op enum and names come. kernels/backend.c checks at compile time
 * that it and the struct's function pointers agree slot for slot; each backend's table
 * (kernels/cpu, kernels/cuda) and the profiler check BACKEND_OP_COUNT, so a new op is added
 * to the struct and here, and then to each of them. */
#define BACKEND_OPS(X) \
    X(ALLOC, alloc, 0) \
    X(FREE, free, 0) \
    X(UPLOAD, upload, BOP_TIMED) \
    X(DOWNLOAD, download, BOP_TIMED) \
    X(ALLOC_HOST, alloc_host, 0) \
    X(FREE_HOST, free_host, 0) \
    X(MATMUL, matmul, BOP_TIMED) \
    X(MATMUL_GROUPED, matmul_grouped, BOP_TIMED) \
    X(EMBED, embed, BOP_TIMED) \
    X(RMSNORM, rmsnorm, BOP_TIMED) \
    X(ADD_RMSNORM, add_rmsnorm, BOP_TIMED) \
    X(HEAD_RMSNORM, head_rmsnorm, BOP_TIMED) \
    X(ADD_BIAS, add_bias, BOP_TIMED) \
    X(ROPE, rope, BOP_TIMED) \
    X(KV_STORE, kv_store, BOP_TIMED) \
    X(ATTENTION, attention, BOP_TIMED) \
    X(SILU_MUL, silu_mul, BOP_TIMED) \
    X(TOP_CANDS, top_cands, BOP_TIMED | BOP_OPTIONAL) \
    X(GATHER_ROWS, gather_rows, BOP_TIMED) \
    X(MOE_COMBINE, moe_combine, BOP_TIMED) \
    X(ZERO, zero, BOP_TIMED) \
    X(ADD, add, BOP_TIMED) \
    X(SYNC, sync, 0) \
    X(GRAPH_RUN, graph_run, BOP_OPTIONAL) \
    X(DESTROY, destroy, 0)

/* BOP_TIMED: the profiler (kernels/profile.h) times it; BOP_OPTIONAL: NULL where a backend
 * lacks it (callers check), every other op is in every backend's table (backend_check). */
enum { BOP_TIMED = 1, BOP_OPTIONAL = 2 };

enum backend_op {
#define BACKEND_OP_ID(ID, field, flags) BACKEND_OP_##ID,
    BACKEND_OPS(BACKEND_OP_ID)
#undef BACKEND_OP_ID
        BACKEND_OP_COUNT
};

/* The op's field name ("matmul"), for logs and the profiler. */
const char *backend_op_name(enum backend_op op);
int backend_op_flags(enum backend_op op);
/* Whether b's table has op (non-NULL). */
int backend_has_op(const struct backend *b, enum backend_op op);
/* 0 when b's table has every op not BOP_OPTIONAL; else -1 with err naming the first missing. */
int backend_check(const struct backend *b, char *err);

/* The [debug] section's switches (docs/configuration.md): paths proven on the GPU that are on
 * by default and can be turned off for A/B checks (tests/gpu/run's bench controls), and aids
 * for debugging, off by default. The CPU backend reads none (profile_ops: the engine
 * wraps either backend with kernels/profile.h).
 * X(name, default, help): the one list, from which struct backend_debug, its defaults, the
 * configuration's [debug] rows (daemon/config.c) and the benchmarks' flags come. */
#define BACKEND_DEBUG_SWITCHES(X) \
    X(profile_ops, 0, \
      "time every backend op, synchronized; a table per op at exit (where a " \
      "step's time goes)") \
    X(cuda_sync, 0, "CUDA: synchronize after every kernel, so that a fault names its kernel") \
    X(cuda_graphs, 1, \
      "CUDA: capture decode steps once and replay them as graphs (not with " \
      "cuda_sync)") \
    X(top_cands, 1, \
      "CUDA: the top-candidates op, so that light steps bring back each row's best " \
      "logits, not whole rows") \
    X(attn_decode, 1, \
      "CUDA: the decode attention kernels (a block serves a KV head's query " \
      "group); off: the exact kernel") \
    X(attn_tiles, 1, \
      "CUDA: prefill attention in tiles planned per sequence (off: fixed 64-token " \
      "tiles)") \
    X(attn_exact, 0, \
      "CUDA: the exact attention kernel for every step (a reference for the " \
      "others)") \
    X(mmv_tile, 1, \
      "CUDA: steps of 2..8 tokens take the shared-memory product kernel (off: a " \
      "warp per weight row)")

struct backend_debug {
#define BACKEND_DEBUG_FIELD(name, dflt, help) int name;
    BACKEND_DEBUG_SWITCHES(BACKEND_DEBUG_FIELD)
#undef BACKEND_DEBUG_FIELD
};

/* Every switch at its default. */
static inline struct backend_debug backend_debug_defaults(void) {
    struct backend_debug d;
#define BACKEND_DEBUG_DEFAULT(name, dflt, help) d.name = dflt;
    BACKEND_DEBUG_SWITCHES(BACKEND_DEBUG_DEFAULT)
#undef BACKEND_DEBUG_DEFAULT
    return d;
}

/* Opens the backend a config names: "cpu", "cuda" (device = local_rank % devices) or
 * "auto" (CUDA when this build has it and a GPU is visible, else CPU), its table checked
 * (backend_check). dbg NULL: every switch at its default (profile_ops is the caller's:
 * kernels/profile.h wraps an open backend). Returns 0, or -1 with err. */
int backend_open(struct backend *b, const char *kind, int threads, int local_rank,
                 const struct backend_debug *dbg, char *err);
void backend_close(struct backend *b);
/* 1 when backend_open(kind) would open the CPU backend (nothing is opened). */
int backend_resolves_to_cpu(const char *kind);

/* The memory of the GPU backend_open(kind, local_rank) would use, before anything is loaded:
 * its index, the visible device count, and its free and total bytes. 0 with them filled;
 * 1 when kind resolves to the CPU backend (nothing filled); -1 with err when kind needs a
 * GPU this process cannot use. Opens the device's context (once per process). */
struct backend_gpu_memory {
    int device, n_devices;
    size_t free_bytes, total_bytes;
};
int backend_gpu_memory(const char *kind, int local_rank, struct backend_gpu_memory *m, char *err);

#endif
