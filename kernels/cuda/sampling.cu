/* Each logits row's best candidates on the device (kernels/backend.h top_cands): after the LM
 * head every rank reduces its vocabulary shard to k (value, id) pairs a row, so that a step
 * brings back k entries a row instead of the whole shard. Exact for every input, in
 * util/logit_cand.h's order: larger value first, equal values (-0 equal to +0) by lower id;
 * NaN never; rows with fewer than k others padded with {-inf, -1}.
 *
 * Two kernels; each row is read from memory once:
 *   top_cands_chunk_kernel  a block per (chunk of TOPC_CHUNK columns, row) loads its chunk
 *                           into shared memory and selects the chunk's k best (topc_select),
 *                           written sorted to the workspace as one list of k;
 *   top_cands_merge_kernel  a block per (group of lists, row) selects the k best of the up to
 *                           TOPC_CHUNK candidates of its lists the same way; repeated until
 *                           one list a row is left (one merge for rows of up to
 *                           TOPC_CHUNK / k * TOPC_CHUNK columns: 262144 at k = 64), which is
 *                           written to out with id0 added.
 * Rows of at most TOPC_CHUNK columns take the chunk kernel alone, writing out directly.
 *
 * Why several blocks a row rather than one (even of 1024 threads): at batch 1 a single block
 * would read a 64k-150k column shard with one SM's worth of loads in flight while the rest
 * of the GPU idles. Chunks of 4096 give 16 blocks for a 64k-column row (the merge then
 * takes 1024 candidates) and, for 64 such rows, 1024 blocks of 256 threads: about one wave
 * at 8 blocks an SM (24 KB of shared memory each), every thread with its 16 loads in
 * flight. The radix passes then read shared memory, not global memory.
 *
 * Exactness rests on two facts. The order is a strict total order on (key, id) pairs, so
 * each of a row's k best is among the k best of its own chunk, and the k best of all the
 * chunks' lists together are the row's.
 * And in a block's array, entries of equal key appear by increasing id: a chunk holds its
 * columns in order; a merge reads lists that are each sorted and that come in column order
 * (list i covers lower columns than list i + 1). So "the lowest ids among entries equal to
 * the threshold" is "the first ones in array order", which a prefix count finds. */
#include <string.h>

#include "ops.cuh"

enum {
    TOPC_THREADS = 256,
    TOPC_WARPS = TOPC_THREADS / 32,
    TOPC_CHUNK = 4096, /* entries one block selects from */
    TOPC_PER_THREAD = TOPC_CHUNK / TOPC_THREADS,
    TOPC_SEG = TOPC_CHUNK /
               TOPC_WARPS, /* a warp's contiguous share of the array in the compaction */
    TOPC_PASSES = 3,       /* radix digits of 11, 11 and 10 bits */
    TOPC_BINS = 1 << 11,
    TOPC_BINS_PER_THREAD = TOPC_BINS / TOPC_THREADS,
    TOPC_GRID_Y = 65535, /* rows beyond it loop in the kernels */
};
static_assert(TOPC_BINS_PER_THREAD * TOPC_THREADS == TOPC_BINS, "each thread owns whole bins");
static_assert(TOPC_SEG % 32 == 0 && TOPC_PER_THREAD * TOPC_THREADS == TOPC_CHUNK,
              "whole warps, whole chunk");
static_assert(LOGIT_CANDS_MAX <= TOPC_THREADS && LOGIT_CANDS_MAX <= TOPC_CHUNK,
              "a thread per candidate");

/* Pass p's digit: the key's bits [shift, shift + width). */
static __host__ __device__ __forceinline__ int topc_shift(int p) {
    return p == 0 ? 21 : p == 1 ? 10 : 0;
}
static __host__ __device__ __forceinline__ int topc_width(int p) { return p < 2 ? 11 : 10; }

/* The order-preserving key of a value: a larger value has a larger key, -0 and +0 the same
 * one, denormals their own. 0 for NaN, which no other value has (it would be the bits of a
 * negative NaN), so that 0 means "not a candidate". Integer work only, so that no compiler
 * flag (flush-to-zero) can change it. */
static __host__ __device__ __forceinline__ uint32_t topc_key(float v) {
#ifdef __CUDA_ARCH__
    uint32_t b = __float_as_uint(v);
#else
    uint32_t b;
    memcpy(&b, &v, sizeof b);
#endif
    const uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0;
    if (a == 0) return 0x80000000u;
    return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}

/* A block's shared memory: the entries' keys (0: no entry) and the selection's state. The
 * keys are made once as the entries are loaded; the few chosen values are read again from
 * global memory (the key loses the sign of a zero). */
struct topc_shared {
    uint32_t key[TOPC_CHUNK];
    uint32_t hist[TOPC_BINS];
    uint32_t warp_a[TOPC_WARPS], warp_b[TOPC_WARPS];
    uint32_t bin, above, count; /* the pass's bin holding the k-th, keys above it, keys in it */
    uint32_t sel_key[LOGIT_CANDS_MAX];
    int32_t sel_id[LOGIT_CANDS_MAX];
    float sel_v[LOGIT_CANDS_MAX];
};

/* The k best of the block's entries written to out[0..k), sorted, ids + id_add, then
 * {-inf, -1} past the non-NaN entries. Entry j: key s.key[j], value vals[j * vstep], id ids[j]
 * (or base + j without ids). Every thread of the block calls it after s.key is written and
 * synchronized; it ends synchronized. */
static __device__ void topc_select(struct topc_shared &s, const float *vals, int vstep,
                                   const int32_t *ids, int32_t base, int k, struct logit_cand *out,
                                   int32_t id_add) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    /* Radix select of the k-th largest key: after each pass, `prefix` (under `pmask`) is the
     * digits so far of the k-th key and k_rem its rank among the keys that share them. The
     * result: every key above T, and the first `need` entries whose key is T. */
    uint32_t prefix = 0, pmask = 0, k_rem = (uint32_t)k, T = 0, need = 0;
    for (int p = 0; p < TOPC_PASSES; p++) {
        const int shift = topc_shift(p);
        const uint32_t dmask = (1u << topc_width(p)) - 1;
        for (int b = t; b < TOPC_BINS; b += TOPC_THREADS) s.hist[b] = 0;
        __syncthreads();
        /* a thread adds a run of equal bins at once: a row of ties costs an atomic a thread,
         * not one per entry on the same address */
        uint32_t run_bin = 0, run_n = 0;
#pragma unroll
        for (int i = 0; i < TOPC_PER_THREAD; i++) {
            const uint32_t key = s.key[t + i * TOPC_THREADS];
            if (key == 0 || (key & pmask) != prefix) continue;
            const uint32_t bin = (key >> shift) & dmask;
            if (run_n && bin != run_bin) {
                atomicAdd(&s.hist[run_bin], run_n);
                run_n = 0;
            }
            run_bin = bin;
            run_n++;
        }
        if (run_n) atomicAdd(&s.hist[run_bin], run_n);
        __syncthreads();
        /* thread t owns bins [8t, 8t + 8); counts above them: the warp's suffix sum, then
         * the warps above */
        uint32_t c[TOPC_BINS_PER_THREAD], mine = 0;
#pragma unroll
        for (int q = 0; q < TOPC_BINS_PER_THREAD; q++)
            mine += c[q] = s.hist[t * TOPC_BINS_PER_THREAD + q];
        uint32_t suf = mine;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t n = __shfl_down_sync(0xffffffffu, suf, o);
            if (lane + o < 32) suf += n;
        }
        if (lane == 0) s.warp_a[warp] = suf;
        __syncthreads();
        uint32_t total = 0, above = suf - mine;
        for (int w = 0; w < TOPC_WARPS; w++) {
            total += s.warp_a[w];
            if (w > warp) above += s.warp_a[w];
        }
        if (p == 0 && total <= (uint32_t)k) { /* k or fewer non-NaN entries: all of them */
            T = 0;
            need = 0;
            break;
        }
        for (int q = TOPC_BINS_PER_THREAD - 1; q >= 0; q--) { /* exactly one (t, q) holds it */
            if (above < k_rem && above + c[q] >= k_rem) {
                s.bin = (uint32_t)(t * TOPC_BINS_PER_THREAD + q);
                s.above = above;
                s.count = c[q];
            }
            above += c[q];
        }
        __syncthreads();
        k_rem -= s.above;
        prefix |= s.bin << shift;
        pmask |= dmask << shift;
        if (s.count == k_rem) { /* the bin is taken whole: every key >= prefix */
            T = prefix - 1;     /* prefix > 0: NaN's key 0 is never counted */
            need = 0;
            break;
        }
        T = prefix;
        need = k_rem;
    }
    __syncthreads(); /* warp_a may still be read (the all-of-them break) */

    /* Ordered compaction: warp w walks positions [w * SEG, (w + 1) * SEG) in order, so a
     * prefix count over warps and lanes gives each chosen entry its place; keys above T fill
     * slots [0, n_gt), the first `need` equal to T the slots after. */
    const int j0 = warp * TOPC_SEG;
    const uint32_t lt = (1u << lane) - 1;
    uint32_t ng = 0, ne = 0;
    for (int i = 0; i < TOPC_SEG; i += 32) {
        const uint32_t key = s.key[j0 + i + lane];
        ng += __popc(__ballot_sync(0xffffffffu, key > T));
        ne += __popc(__ballot_sync(0xffffffffu, need && key == T));
    }
    if (lane == 0) {
        s.warp_a[warp] = ng;
        s.warp_b[warp] = ne;
    }
    __syncthreads();
    uint32_t g = 0, e = 0, n_gt = 0;
    for (int w = 0; w < TOPC_WARPS; w++) {
        if (w < warp) {
            g += s.warp_a[w];
            e += s.warp_b[w];
        }
        n_gt += s.warp_a[w];
    }
    for (int i = 0; i < TOPC_SEG && (g < n_gt || e < need);
         i += 32) { /* g, e: the same on the warp */
        const int j = j0 + i + lane;
        const uint32_t key = s.key[j];
        const uint32_t bg = __ballot_sync(0xffffffffu, key > T),
                       be = __ballot_sync(0xffffffffu, need && key == T);
        uint32_t slot = LOGIT_CANDS_MAX;
        if (key > T) {
            slot = g + __popc(bg & lt);
        } else if (need && key == T) {
            const uint32_t r = e + __popc(be & lt);
            if (r < need) slot = n_gt + r;
        }
        if (slot < LOGIT_CANDS_MAX) {
            s.sel_key[slot] = key;
            s.sel_v[slot] = vals[(int64_t)j * vstep];
            s.sel_id[slot] = ids ? ids[j] : base + j;
        }
        g += __popc(bg);
        e += __popc(be);
    }
    __syncthreads();

    /* Rank sort of the chosen (distinct (key, id) pairs), written in order. */
    const uint32_t n_sel = n_gt + need;
    if (t < k) {
        if ((uint32_t)t < n_sel) {
            const uint32_t key = s.sel_key[t];
            const int32_t id = s.sel_id[t];
            uint32_t rank = 0;
            for (uint32_t q = 0; q < n_sel; q++)
                rank += s.sel_key[q] > key || (s.sel_key[q] == key && s.sel_id[q] < id);
            out[rank].v = s.sel_v[t];
            out[rank].id = id + id_add;
        } else {
            out[t].v = -INFINITY;
            out[t].id = -1;
        }
    }
    __syncthreads(); /* s is reused by the block's next row */
}

/* out: gridDim.x lists of k a row (one: the row's answer). */
static __global__ void __launch_bounds__(TOPC_THREADS)
    top_cands_chunk_kernel(struct logit_cand *out, const float *__restrict__ x, int64_t ld,
                           int n_rows, int n_cols, int k, int32_t id_add) {
    __shared__ struct topc_shared s;
    const int c0 = (int)blockIdx.x * TOPC_CHUNK;
    const int m = min(TOPC_CHUNK, n_cols - c0);
    for (int row = blockIdx.y; row < n_rows; row += gridDim.y) {
        const float *xr = x + (int64_t)row * ld + c0;
        float r[TOPC_PER_THREAD]; /* every load issued before the first store */
#pragma unroll
        for (int i = 0; i < TOPC_PER_THREAD; i++) {
            const int j = threadIdx.x + i * TOPC_THREADS;
            r[i] = j < m ? xr[j] : __uint_as_float(0x7fffffffu); /* NaN: no entry */
        }
#pragma unroll
        for (int i = 0; i < TOPC_PER_THREAD; i++)
            s.key[threadIdx.x + i * TOPC_THREADS] = topc_key(r[i]);
        __syncthreads();
        topc_select(s, xr, 1, NULL, c0, k, out + ((int64_t)row * gridDim.x + blockIdx.x) * k,
                    id_add);
    }
}

/* in: n_lists sorted lists of k a row; block b takes lists [b * per_block, ...); out:
 * gridDim.x lists of k a row. Padding ({-inf, -1}) is no entry (key 0). */
static __global__ void __launch_bounds__(TOPC_THREADS)
    top_cands_merge_kernel(struct logit_cand *out, const struct logit_cand *__restrict__ in,
                           int n_rows, int n_lists, int per_block, int k, int32_t id_add) {
    __shared__ struct topc_shared s;
    __shared__ int32_t s_id[TOPC_CHUNK];
    const int l0 = (int)blockIdx.x * per_block;
    const int m = min(per_block, n_lists - l0) * k;
    for (int row = blockIdx.y; row < n_rows; row += gridDim.y) {
        const struct logit_cand *ir = in + ((int64_t)row * n_lists + l0) * k;
        for (int j = threadIdx.x; j < TOPC_CHUNK; j += TOPC_THREADS) {
            const struct logit_cand cd = j < m ? ir[j] : logit_cand{0.0f, -1};
            s.key[j] = cd.id < 0 ? 0 : topc_key(cd.v);
            s_id[j] = cd.id;
        }
        __syncthreads();
        /* values: the v of each listed candidate, 2 floats apart */
        static_assert(sizeof(struct logit_cand) == 2 * sizeof(float),
                      "logit_cand is {float, int32}");
        topc_select(s, &ir->v, 2, s_id, 0, k, out + ((int64_t)row * gridDim.x + blockIdx.x) * k,
                    id_add);
    }
}

void cuda_top_cands(struct cuda_ctx *c, struct logit_cand *out, const float *x, int n_rows,
                    int n_cols, int64_t ld, int32_t id0, int k) {
    if (n_rows <= 0) return;
    if (k < 1 || k > LOGIT_CANDS_MAX || k > n_cols)
        FATAL("cuda_top_cands: k = %d (1..%d, at most n_cols = %d)", k, LOGIT_CANDS_MAX, n_cols);
    const unsigned gy = (unsigned)(n_rows < TOPC_GRID_Y ? n_rows : TOPC_GRID_Y);
    int n_lists = (int)(((int64_t)n_cols + TOPC_CHUNK - 1) / TOPC_CHUNK);
    if (n_lists == 1) {
        top_cands_chunk_kernel<<<dim3(1, gy), TOPC_THREADS, 0, c->stream>>>(out, x, ld, n_rows,
                                                                            n_cols, k, id0);
        CUDA_LAUNCH_CHECK(c->stream, "top_cands_chunk_kernel");
        return;
    }
    /* the chunks' lists in a, the first merge's in b, later merges alternating (each level
     * has fewer lists than the one before, so both fit) */
    const int per_block = TOPC_CHUNK / k;
    const int n_second = (n_lists + per_block - 1) / per_block;
    const size_t a_n = (size_t)n_rows * (size_t)n_lists * (size_t)k;
    const size_t b_n = n_second > 1 ? (size_t)n_rows * (size_t)n_second * (size_t)k : 0;
    struct logit_cand *a = (struct logit_cand *)cuda_ws(c, (a_n + b_n) * sizeof(struct logit_cand));
    struct logit_cand *b = a + a_n;
    top_cands_chunk_kernel<<<dim3((unsigned)n_lists, gy), TOPC_THREADS, 0, c->stream>>>(
        a, x, ld, n_rows, n_cols, k, 0);
    CUDA_LAUNCH_CHECK(c->stream, "top_cands_chunk_kernel");
    while (n_lists > 1) {
        const int n_next = (n_lists + per_block - 1) / per_block;
        struct logit_cand *dst = n_next == 1 ? out : b;
        top_cands_merge_kernel<<<dim3((unsigned)n_next, gy), TOPC_THREADS, 0, c->stream>>>(
            dst, a, n_rows, n_lists, per_block, k, n_next == 1 ? id0 : 0);
        CUDA_LAUNCH_CHECK(c->stream, "top_cands_merge_kernel");
        b = a;
        a = dst;
        n_lists = n_next;
    }
}
