/* Causal attention over the paged KV cache (layout [n_blocks][block_size][n_kv][hd]).
 *
 * Decode path (the default; debug.attn_decode false turns it off, see decode_on; every step
 * the prefill path does not take; head_dim a multiple of 8, cache 16-byte aligned): one 4-warp
 * block per (token, KV head, split of the sequence) serves the query heads of the KV head's GQA
 * group (8 at a time), so each K and V row is read once for all of them. A warp takes 16 positions
 * at a time, their K and V rows loaded together with wide loads, and keeps an online softmax per
 * head; the warps merge at the end. F16 and FP8 caches with head_dim a multiple of 32 do S = K Q^T
 * and O += P V on tensor cores (mma.sync, f32 operands split into two f16 so the products keep
 * f32-like precision); the F32 cache and other head_dims on CUDA cores. Decode steps have few
 * tokens, so the positions are split over several blocks (partial results in scratch, merged by a
 * second kernel) to fill the GPU on long contexts.
 *
 * Exact path (debug.attn_exact, or debug.attn_decode false; a head_dim or cache alignment
 * the decode path cannot take): one 4-warp block per (query head, token, split), one position at a
 * time per warp; also the code for the prefill path's seams.
 *
 * Prefill path (steps of more than 64 tokens, F16 or FP8 cache, head_dim a multiple of 16 up
 * to 128): FlashAttention-style tiles on tensor cores (WMMA, f16 inputs, f32 accumulation). A
 * block takes a tile of up to 64 consecutive positions of one sequence for one head and walks
 * the sequence's keys 64 at a time: S = Q K^T, online softmax, O += P V, with K/V tiles staged
 * in shared memory once for all the tile's queries (FP8 rows decoded and scaled to f16 as
 * they are staged). The tiles are planned on the host per step (kernels/att_tiles.h, from the
 * batch's host arrays): each sequence's tokens cut into runs of 64, longest first, passed in
 * the kernel's parameters. One-token tiles (decode tokens in a step with a prefill chunk) go
 * to the decode path instead (the exact path while it is off): a flash block would walk
 * every key for one query row of its 64, where a decode block serves the KV head's whole GQA
 * group and long contexts split over blocks. Without host arrays, block y takes tokens
 * 64 y .. 64 y + 63, and a tile of them that is not consecutive positions of one sequence (a
 * ragged batch's seams) is done token by token with the exact path's code, serially.
 * debug.attn_exact (docs/configuration.md) forces the exact path everywhere (a reference for
 * debugging the other two).
 *
 * The code by path: attention_common.cuh (arguments, loads, addresses), attention_exact.cuh,
 * attention_decode.cuh, attention_prefill.cuh; here the dispatch (which path a step's tokens
 * take, splits, launches). */
#include <stdlib.h>
#include <string.h>

#include "attention_decode.cuh"
#include "attention_exact.cuh"
#include "attention_prefill.cuh"

/* ---- launch ---- */

/* Splits per block of a step (the blocks being the kernel's work for one split: a (head,
 * token) pair on the exact path, a (KV head tile, token) on the decode path): enough blocks
 * for two waves over the SMs when a step has few tokens; none for prefill-sized steps. */
static int att_splits(const struct cuda_ctx *c, int64_t per_split, int T) {
    if (T > 64) return 1;
    const int64_t s = (2 * (int64_t)c->n_sm + per_split - 1) / per_split, most = ATT_MAX_SPLIT;
    return (int)(s < 1 ? 1 : s > most ? most : s);
}

/* debug.attn_exact: the exact path for every step */
static int exact_only(const struct cuda_ctx *c) { return c->dbg.attn_exact; }

/* debug.attn_decode: the decode path, on by default since every GPU check passed with it on an
 * H200 (2026-11-27; 1.33x the exact kernel at batch 64, bench/RESULTS.md); false: the exact
 * path (the bench controls' comparison) */
static int decode_on(const struct cuda_ctx *c) { return c->dbg.attn_decode; }

/* debug.attn_tiles: the planned tiles (attend_tiles), on by default since the H200 run of
 * 2026-11-27 (mixed-step checks passed; a 2048-token prefill 5% faster); false: the fixed
 * 64-token tiles, seams token by token. */
static int tiles_on(const struct cuda_ctx *c) { return c->dbg.attn_tiles; }

/* The prefill path for an F16 (KT = __half) or FP8 (KT = uint8_t) cache over the tiles tl
 * (tl.n == 0: the step's tokens 64 at a time, seams token by token). */
template <typename KT>
static void launch_flash(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv,
                         int T, const struct fa_tiles &tl) {
    const struct fa_layout L = fa_layout_for(a.hd);
    const size_t exact = sizeof(float) * ATT_WARPS *
                         (ATT_MAX_HD + 2); /* attend_one's, at the seams */
    const size_t need = L.bytes > exact ? L.bytes : exact;
    CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)need));
    dim3 grid(a.n_q, tl.n ? (unsigned)tl.n : cuda_blocks(T, FA_BQ));
    flash_kernel<KT>
        <<<grid, ATT_WARPS * 32, need, c->stream>>>(a, (const KT *)kv->k, (const KT *)kv->v, T, tl);
    CUDA_LAUNCH_CHECK(c->stream, "flash_kernel");
}

/* The decode path for a cache of KT: ng query heads per block at most (1, 2, 4 or
 * DEC_MAX_G), head_dim up to 128 or 256. */
template <typename KT, int NG>
static void launch_decode_ng(struct cuda_ctx *c, const struct att_args &a,
                             const struct kv_layer *kv, dim3 grid, int kvl0, int n_ht) {
    const KT *k = (const KT *)kv->k, *v = (const KT *)kv->v;
    if (a.hd <= 128)
        decode_kernel<KT, NG, 128><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    else
        decode_kernel<KT, NG, ATT_MAX_HD>
            <<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    CUDA_LAUNCH_CHECK(c->stream, "decode_kernel");
}

/* The tensor-core decode path for an F16 (KT = __half) or FP8 (KT = uint8_t) cache. */
template <typename KT>
static void launch_decode_mma(struct cuda_ctx *c, const struct att_args &a,
                              const struct kv_layer *kv, dim3 grid, int kvl0, int n_ht) {
    const KT *k = (const KT *)kv->k, *v = (const KT *)kv->v;
    if (a.hd <= 128)
        decode_mma_kernel<KT, 128><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    else
        decode_mma_kernel<KT, ATT_MAX_HD>
            <<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    CUDA_LAUNCH_CHECK(c->stream, "decode_mma_kernel");
}

template <typename KT>
static void launch_decode(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv,
                          dim3 grid, int ng, int kvl0, int n_ht) {
    if (ng == 1) launch_decode_ng<KT, 1>(c, a, kv, grid, kvl0, n_ht);
    else if (ng == 2) launch_decode_ng<KT, 2>(c, a, kv, grid, kvl0, n_ht);
    else if (ng == 4) launch_decode_ng<KT, 4>(c, a, kv, grid, kvl0, n_ht);
    else launch_decode_ng<KT, DEC_MAX_G>(c, a, kv, grid, kvl0, n_ht);
}

/* The exact path's kernel over T tokens from a.t_base (a.n_split and a.part set). */
static void launch_exact(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv,
                         enum dtype kv_type, int T) {
    const dim3 grid(a.n_q, T, a.n_split);
    if (kv_type == DT_F32)
        attention_kernel<float>
            <<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const float *)kv->k, (const float *)kv->v);
    else if (kv_type == DT_F8_E4M3)
        attention_kernel<uint8_t><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const uint8_t *)kv->k,
                                                                          (const uint8_t *)kv->v);
    else
        attention_kernel<__half><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const __half *)kv->k,
                                                                         (const __half *)kv->v);
    CUDA_LAUNCH_CHECK(c->stream, "attention_kernel");
}

/* The splits' partial results of T tokens from a.t_base merged into a.out (nothing when they
 * are not split). */
static void launch_merge(struct cuda_ctx *c, const struct att_args &a, int T) {
    if (a.n_split <= 1) return;
    int threads = a.hd < 128 ? 32 * ((a.hd + 31) / 32) : 128;
    attention_merge_kernel<<<dim3(a.n_q, T), threads, 0, c->stream>>>(a);
    CUDA_LAUNCH_CHECK(c->stream, "attention_merge_kernel");
}

/* Tokens t_base .. t_base + n - 1 of the step on the decode path (debug.attn_decode, for the
 * head_dims and caches it takes), else on the exact path: the whole of a step that is not
 * prefill-sized, or a run of a prefill-sized step's one-token tiles. a: the step's arguments
 * (t_base, n_split and part are set here). Graph-safe as every op: workspace only. */
static void attend_tokens(struct cuda_ctx *c, struct att_args a, const struct kv_layer *kv,
                          enum dtype kv_type, int t_base, int n) {
    const int hd = a.hd, n_q = a.n_q, group = a.group, q_head0 = a.q_head0, kv_head0 = a.kv_head0;
    const int fp8 = kv_type == DT_F8_E4M3;
    const int decode = hd % 8 == 0 && ((uintptr_t)kv->k | (uintptr_t)kv->v) % 16 == 0 &&
                       !exact_only(c) && decode_on(c);
    /* decode path: local KV heads kvl0.., and per KV head up to min(group, n_q) query heads in
     * tiles of ng: 8 on tensor cores, else the smallest of 1, 2, 4, 8 that holds them */
    const int mma = decode && kv_type != DT_F32 && hd % 32 == 0;
    const int kvl0 = q_head0 / group - kv_head0,
              n_kvl = (q_head0 + n_q - 1) / group - kv_head0 - kvl0 + 1;
    const int gh = group < n_q ? group : n_q;
    const int ng = mma || gh > 4 ? DEC_MAX_G : gh > 2 ? 4 : gh;
    const int n_ht = (gh + ng - 1) / ng;
    for (int done = 0; done < n;) {
        const int T = n - done < 65535 ? n - done : 65535; /* gridDim.y's limit */
        a.t_base = t_base + done;
        a.n_split = decode ? att_splits(c, (int64_t)n_kvl * n_ht * T, T)
                           : att_splits(c, (int64_t)n_q * T, T);
        const size_t part_floats = (size_t)T * (size_t)n_q * (size_t)a.n_split * (size_t)(hd + 2);
        a.part = a.n_split > 1 ? (float *)cuda_ws(c, sizeof(float) * part_floats) : NULL;
        if (decode) {
            const dim3 grid(n_kvl * n_ht, T, a.n_split);
            if (mma && fp8) launch_decode_mma<uint8_t>(c, a, kv, grid, kvl0, n_ht);
            else if (mma) launch_decode_mma<__half>(c, a, kv, grid, kvl0, n_ht);
            else if (kv_type == DT_F32) launch_decode<float>(c, a, kv, grid, ng, kvl0, n_ht);
            else if (fp8) launch_decode<uint8_t>(c, a, kv, grid, ng, kvl0, n_ht);
            else launch_decode<__half>(c, a, kv, grid, ng, kvl0, n_ht);
        } else {
            launch_exact(c, a, kv, kv_type, T);
        }
        launch_merge(c, a, T);
        done += T;
    }
}

/* A prefill-sized step with host arrays: cut into tiles per sequence (att_tiles_cut); each run
 * of consecutive one-token tiles to attend_tokens, the other tiles to flash_kernel longest
 * first (att_tiles_order), FA_TILES a launch. Planned at each call (each layer), O(tokens) on
 * the host beside kernels of this size; nothing is kept between calls. */
template <typename KT>
static void attend_tiles(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv,
                         enum dtype kv_type, const struct attn_batch *b) {
    const int T = b->n_tokens;
    if (T >= 1 << 26)
        FATAL("cuda_attention: %d tokens in one step (fa_tiles packs token indices in 26 bits)", T);
    struct att_tile *tiles = (struct att_tile *)xmalloc(sizeof(struct att_tile) * (unsigned long)T);
    const int n = att_tiles_cut(b->host_seq_of, b->host_pos, T, FA_BQ, tiles);
    int n_flash = 0; /* tiles of 2 or more tokens, compacted to the front */
    for (int i = 0; i < n;) {
        if (tiles[i].n > 1) {
            tiles[n_flash++] = tiles[i++];
            continue;
        }
        int j = i + 1;
        while (j < n && tiles[j].n == 1) j++;
        attend_tokens(c, a, kv, kv_type, tiles[i].t0,
                      j - i); /* tiles i..j-1: tokens t0 .. t0 + j-i-1 */
        i = j;
    }
    att_tiles_order(tiles, n_flash);
    struct fa_tiles tl = {};
    for (int i = 0; i < n_flash; i += FA_TILES) {
        tl.n = n_flash - i < FA_TILES ? n_flash - i : FA_TILES;
        for (int k = 0; k < tl.n; k++)
            tl.t[k] = (uint32_t)tiles[i + k].t0 << 6 | (uint32_t)(tiles[i + k].n - 1);
        launch_flash<KT>(c, a, kv, T, tl);
    }
    free(tiles);
}

void cuda_attention(struct cuda_ctx *c, float *out, int64_t ldo, const float *q, int64_t ldq,
                    int n_q, int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                    enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b) {
    const int T = b->n_tokens;
    if (T == 0 || n_q == 0) return;
    if (hd > ATT_MAX_HD) FATAL("cuda_attention: head_dim %d > %d", hd, ATT_MAX_HD);
    const int fp8 = kv_type == DT_F8_E4M3;
    if (kv_type != DT_F32 && kv_type != DT_F16 && !fp8)
        FATAL("cuda_attention: KV cache type %s (F32, F16 or F8_E4M3 expected)",
              dtype_name(kv_type));
    if (fp8 && (!kv->k_exp || !kv->v_exp)) FATAL("cuda_attention: FP8 KV cache without its scales");
    struct att_args a = {out,
                         ldo,
                         q,
                         ldq,
                         n_q,
                         q_head0,
                         group,
                         kv_head0,
                         n_kv,
                         hd,
                         b->seq_of,
                         b->pos,
                         b->block_off,
                         b->blocks,
                         b->block_size,
                         1,
                         NULL,
                         kv->k_exp,
                         kv->v_exp,
                         (const __half *)kv->k_sink,
                         (const __half *)kv->v_sink,
                         fp8 ? kv->sink_blocks : 0,
                         fp8 && kv->k_sink ? kv->sink_rows : 0,
                         0};
    if (T > 64 && kv_type != DT_F32 && hd % 16 == 0 && hd <= FA_MAX_HD && !exact_only(c)) {
        if (b->host_seq_of && b->host_pos && tiles_on(c)) {
            if (fp8) attend_tiles<uint8_t>(c, a, kv, kv_type, b);
            else attend_tiles<__half>(c, a, kv, kv_type, b);
            return;
        }
        const struct fa_tiles fixed = {}; /* n == 0: 64 tokens a block */
        if (fp8) launch_flash<uint8_t>(c, a, kv, T, fixed);
        else launch_flash<__half>(c, a, kv, T, fixed);
        return;
    }
    attend_tokens(c, a, kv, kv_type, 0, T);
}
