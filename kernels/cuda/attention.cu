/* Causal attention over the paged KV cache (layout [n_blocks][block_size][n_kv][hd]).
 *
 * Decode path (the default; debug.attn_decode false turns it off, see decode_on; every step
 * the prefill path does not take; head_dim a multiple of 8, cache 16-byte aligned): one 4-warp block per (token, KV head, split of the sequence) serves the
 * query heads of the KV head's GQA group (8 at a time), so each K and V row is read once for
 * all of them. A warp takes 16 positions at a time, their K and V rows loaded together with
 * wide loads, and keeps an online softmax per head; the warps merge at the end. F16 and FP8
 * caches with head_dim a multiple of 32 do S = K Q^T and O += P V on tensor cores (mma.sync,
 * f32 operands split into two f16 so the products keep f32-like precision); the F32 cache and
 * other head_dims on CUDA cores. Decode steps have few tokens, so the positions are split over
 * several blocks (partial results in scratch, merged by a second kernel) to fill the GPU on
 * long contexts.
 *
 * Exact path (debug.attn_exact, or debug.attn_decode false; a head_dim or cache alignment
 * the decode path cannot take): one 4-warp block per (query head, token, split), one position at a time per warp;
 * also the code for the prefill path's seams.
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
 * debugging the other two). */
#include <mma.h>
#include <stdlib.h>
#include <string.h>

#include "../att_tiles.h"
#include "fp8_dev.cuh"
#include "ops.cuh"

enum { ATT_WARPS = 4, ATT_MAX_HD = 256, ATT_R = ATT_MAX_HD / 32, ATT_MAX_SPLIT = 32 };
enum { FA_BQ = 64, FA_BK = 64, FA_MAX_HD = 128 };

static __device__ __forceinline__ float kv_ld(const float *p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float kv_ld(const __half *p, int64_t i) { return __half2float(p[i]); }
static __device__ __forceinline__ float kv_ld(const uint8_t *p, int64_t i) { return fp8_dev_decode(p[i]); }

struct att_args {
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    int n_q, q_head0, group, kv_head0, n_kv, hd;
    const int32_t *seq_of, *pos, *block_off, *blocks;
    int bs, n_split;
    /* n_split > 1: [the launch's tokens][n_q][n_split][hd + 2] = unnormalized sum of p*V, max, sum of p */
    float *part;
    const int8_t *kexp, *vexp; /* FP8 cache: scale exponent per (slot, KV head) row; else NULL */
    const __half *ksink, *vsink; /* FP8 cache: its sink (kernels/backend.h); sink_rows 0: none */
    int sink_blocks, sink_rows;
    /* the exact and decode kernels' tokens are t_base + blockIdx.y (the step's tokens from
     * t_base on: a step's one-token tiles, a run at a time); part's rows are counted from it */
    int t_base;
};

/* 2^e of cache row `row` (a (slot, KV head) pair) for an FP8 cache: its codes times it are
 * the values; 1 for F32 and F16. */
template <typename KT>
static __device__ __forceinline__ float kv_row_scale(const int8_t *exps, int64_t row) {
    return 1.0f;
}
template <>
__device__ __forceinline__ float kv_row_scale<uint8_t>(const int8_t *exps, int64_t row) {
    return fp8_exp2(exps[row]);
}

/* Row (slot * n_kv + kvh) of (position j, KV head kvh) of a sequence whose block table is
 * btab; its elements start at row * hd. */
static __device__ __forceinline__ int64_t kv_row(const struct att_args &a, const int32_t *btab, int j, int kvh) {
    return ((int64_t)btab[j / a.bs] * a.bs + j % a.bs) * a.n_kv + kvh;
}

/* Element offset of position j (KV head kvh) of a sequence whose block table is btab in the
 * FP8 sink, or -1 when j is read from the codes. A sink row holds F16 values of x / 2^e with
 * the row's own exponent (kernels/backend.h), so a kernel takes them in place of the decoded
 * codes and keeps every scale as it is. Only KT = uint8_t (FP8) has a sink. */
template <typename KT>
static __device__ __forceinline__ int64_t kv_sink(const struct att_args &a, const int32_t *btab, int j, int kvh) {
    if (sizeof(KT) != 1 || j >= a.sink_rows || btab[0] >= a.sink_blocks) return -1;
    return (((int64_t)btab[0] * a.sink_rows + j) * a.n_kv + kvh) * a.hd;
}

/* ---- exact path ---- */

/* Query head h of token t over positions [k0, k1) of its split, by all ATT_WARPS warps of the
 * block; sm: ATT_WARPS * (ATT_MAX_HD + 2) floats of shared memory. With n_split == 1 the
 * normalized result goes to out, else the partial to a.part. */
template <typename KT>
static __device__ void attend_one(const struct att_args &a, const KT *__restrict__ kc, const KT *__restrict__ vc, int t,
                                  int h, int split, int n_split, float *sm) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.hd;
    const int seq = a.seq_of[t], n_keys = a.pos[t] + 1;
    const int chunk = (n_keys + n_split - 1) / n_split;
    const int k0 = split * chunk, k1 = min(n_keys, k0 + chunk);
    const int kvh = (a.q_head0 + h) / a.group - a.kv_head0;
    const int32_t *btab = a.blocks + a.block_off[seq];
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qp = a.q + t * a.ldq + (int64_t)h * hd;
    float *s_acc = sm, *s_m = sm + ATT_WARPS * ATT_MAX_HD, *s_l = s_m + ATT_WARPS;

    float qr[ATT_R], acc[ATT_R];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int i = lane + 32 * r;
        qr[r] = i < hd ? qp[i] : 0.0f;
        acc[r] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = k0 + warp; j < k1; j += ATT_WARPS) {
        const int64_t row = kv_row(a, btab, j, kvh), at = row * hd, sk = kv_sink<KT>(a, btab, j, kvh);
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int i = lane + 32 * r;
            if (i < hd) s += qr[r] * (sk >= 0 ? __half2float(a.ksink[sk + i]) : kv_ld(kc, at + i));
        }
        s = warp_sum(s) * (scale * kv_row_scale<KT>(a.kexp, row));
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), p = expf(s - mn); /* corr = 0 on the first key */
        const float pv = p * kv_row_scale<KT>(a.vexp, row);
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int i = lane + 32 * r;
            if (i < hd) acc[r] = acc[r] * corr + pv * (sk >= 0 ? __half2float(a.vsink[sk + i]) : kv_ld(vc, at + i));
        }
        m = mn;
    }
    __syncthreads(); /* sm may still be read from the previous call */
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int i = lane + 32 * r;
        if (i < hd) s_acc[warp * ATT_MAX_HD + i] = acc[r];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, s_m[w]);
    float e[ATT_WARPS], L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++) {
        e[w] = s_m[w] == -INFINITY ? 0.0f : expf(s_m[w] - M); /* a warp with no keys adds nothing */
        L += s_l[w] * e[w];
    }
    if (n_split == 1) {
        float *o = a.out + t * a.ldo + (int64_t)h * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            float v = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) v += s_acc[w * ATT_MAX_HD + i] * e[w];
            o[i] = v / L;
        }
    } else {
        float *pp = a.part + (((int64_t)(t - a.t_base) * a.n_q + h) * n_split + split) * (hd + 2);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            float v = 0.0f;
            for (int w = 0; w < ATT_WARPS; w++) v += s_acc[w * ATT_MAX_HD + i] * e[w];
            pp[i] = v;
        }
        if (threadIdx.x == 0) {
            pp[hd] = M; /* -inf when this split had no positions */
            pp[hd + 1] = L;
        }
    }
}

template <typename KT>
static __global__ void __launch_bounds__(ATT_WARPS * 32) attention_kernel(struct att_args a, const KT *__restrict__ kc,
                                                                           const KT *__restrict__ vc) {
    __shared__ float sm[ATT_WARPS * (ATT_MAX_HD + 2)];
    attend_one<KT>(a, kc, vc, a.t_base + (int)blockIdx.y, blockIdx.x, blockIdx.z, a.n_split, sm);
}

/* Merges the splits of one (head, token): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M). */
static __global__ void attention_merge_kernel(struct att_args a) {
    const int h = blockIdx.x, t = a.t_base + (int)blockIdx.y, hd = a.hd, S = a.n_split;
    const float *pp = a.part + ((int64_t)blockIdx.y * a.n_q + h) * S * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < S; s++) M = fmaxf(M, pp[s * (hd + 2) + hd]);
    float L = 0.0f;
    for (int s = 0; s < S; s++) {
        const float ms = pp[s * (hd + 2) + hd];
        if (ms != -INFINITY) L += pp[s * (hd + 2) + hd + 1] * expf(ms - M);
    }
    float *o = a.out + t * a.ldo + (int64_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < S; s++) {
            const float ms = pp[s * (hd + 2) + hd];
            if (ms != -INFINITY) v += pp[s * (hd + 2) + i] * expf(ms - M);
        }
        o[i] = v / L;
    }
}

/* ---- decode path ---- */

enum { DEC_WARPS = 4, DEC_TILE = 16, DEC_MAX_G = 8 };

/* 8 consecutive cached elements of a row as loaded (element offset a multiple of 8): two
 * float4, one 16-byte piece of F16, or 8 FP8 codes. */
template <typename KT>
struct kv8;
template <>
struct kv8<float> {
    float4 lo, hi;
};
template <>
struct kv8<__half> {
    uint4 u;
};
template <>
struct kv8<uint8_t> {
    uint2 u;
};

/* 2 consecutive cached elements (element offset even). */
template <typename KT>
struct kv2;
template <>
struct kv2<float> {
    float2 u;
};
template <>
struct kv2<__half> {
    unsigned u;
};
template <>
struct kv2<uint8_t> {
    unsigned short u;
};

static __device__ __forceinline__ float2 f16x2_f32(unsigned w) {
    __half2_raw r;
    r.x = (unsigned short)(w & 0xffffu);
    r.y = (unsigned short)(w >> 16);
    return __half22float2(__half2(r));
}

/* Two FP8 codes (low 16 bits of w, the lower-addressed one in the low byte) as an f16x2 word
 * (first in the low half); each decoded as fp8_dev_decode does, which F16 holds exactly. */
static __device__ __forceinline__ unsigned fp8x2_f16x2(unsigned w) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    return (unsigned)r.x | ((unsigned)r.y << 16);
}

static __device__ __forceinline__ float2 fp8x2_f32(unsigned w) { return f16x2_f32(fp8x2_f16x2(w)); }

static __device__ __forceinline__ void kv_load8(kv8<float> &x, const float *p, int64_t at) {
    x.lo = *(const float4 *)(p + at);
    x.hi = *(const float4 *)(p + at + 4);
}
static __device__ __forceinline__ void kv_load8(kv8<__half> &x, const __half *p, int64_t at) {
    x.u = *(const uint4 *)(p + at);
}
static __device__ __forceinline__ void kv_load8(kv8<uint8_t> &x, const uint8_t *p, int64_t at) {
    x.u = *(const uint2 *)(p + at);
}

static __device__ __forceinline__ void kv_unpack8(float f[8], const kv8<float> &x) {
    f[0] = x.lo.x, f[1] = x.lo.y, f[2] = x.lo.z, f[3] = x.lo.w;
    f[4] = x.hi.x, f[5] = x.hi.y, f[6] = x.hi.z, f[7] = x.hi.w;
}
static __device__ __forceinline__ void kv_unpack8(float f[8], const kv8<__half> &x) {
    const unsigned w[4] = {x.u.x, x.u.y, x.u.z, x.u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = f16x2_f32(w[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
static __device__ __forceinline__ void kv_unpack8(float f[8], const kv8<uint8_t> &x) {
    const unsigned w[4] = {x.u.x & 0xffffu, x.u.x >> 16, x.u.y & 0xffffu, x.u.y >> 16};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 v = fp8x2_f32(w[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

static __device__ __forceinline__ void kv_load2(kv2<float> &x, const float *p, int64_t at) {
    x.u = *(const float2 *)(p + at);
}
static __device__ __forceinline__ void kv_load2(kv2<__half> &x, const __half *p, int64_t at) {
    x.u = *(const unsigned *)(p + at);
}
static __device__ __forceinline__ void kv_load2(kv2<uint8_t> &x, const uint8_t *p, int64_t at) {
    x.u = *(const unsigned short *)(p + at);
}

static __device__ __forceinline__ float2 kv_unpack2(const kv2<float> &x) { return x.u; }
static __device__ __forceinline__ float2 kv_unpack2(const kv2<__half> &x) { return f16x2_f32(x.u); }
static __device__ __forceinline__ float2 kv_unpack2(const kv2<uint8_t> &x) { return fp8x2_f32(x.u); }

/* What a decode block works on (blockIdx: x = local KV head kvh = kvl0 + x / n_ht and head
 * tile x % n_ht, y = token t - a.t_base, z = split): the query heads hb .. hb+ng-1 (ng <= tile
 * heads nt; ng <= 0 for a tile past the heads of kvh's GQA group that this rank holds, those h with
 * (q_head0 + h) / group == kvh + kv_head0), positions [k0, k1) of t's sequence (split as
 * attend_one splits them; none for a split past the end), and the sequence's block table. */
struct dec_work {
    int t, split, kvh, hb, ng, k0, k1;
    const int32_t *btab;
};

static __device__ __forceinline__ struct dec_work dec_work_of(const struct att_args &a, int nt, int kvl0, int n_ht) {
    struct dec_work w;
    w.t = a.t_base + (int)blockIdx.y;
    w.split = blockIdx.z;
    w.kvh = kvl0 + (int)blockIdx.x / n_ht;
    const int kvg = w.kvh + a.kv_head0;
    const int h_lo = max(0, kvg * a.group - a.q_head0), h_hi = min(a.n_q, (kvg + 1) * a.group - a.q_head0);
    w.hb = h_lo + ((int)blockIdx.x % n_ht) * nt;
    w.ng = min(nt, h_hi - w.hb);
    const int seq = a.seq_of[w.t], n_keys = a.pos[w.t] + 1;
    const int chunk = (n_keys + a.n_split - 1) / a.n_split;
    w.k0 = w.split * chunk;
    w.k1 = min(n_keys, w.k0 + chunk);
    w.btab = a.blocks + a.block_off[seq];
    return w;
}

/* The end of both decode kernels, after a __syncthreads: each warp's running max and sum
 * (s_m, s_l) and unnormalized sum of p V (s_acc) per head of the block, combined per (head,
 * element) by the block's threads as attend_one does; the normalized result goes to out
 * (n_split == 1), else the split's partial to a.part. */
template <int NG, int HDM>
static __device__ __forceinline__ void dec_finish(const struct att_args &a, const struct dec_work &wk,
                                                  const float (*s_m)[NG], const float (*s_l)[NG],
                                                  const float (*s_acc)[NG][HDM]) {
    const int hd = a.hd, n_split = a.n_split, t = wk.t, hb = wk.hb;
    for (int e = threadIdx.x; e < wk.ng * hd; e += blockDim.x) {
        const int g = e / hd, i = e % hd;
        float M = -INFINITY;
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, s_m[w][g]);
        float L = 0.0f, v = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) {
            const float ew = s_m[w][g] == -INFINITY ? 0.0f : expf(s_m[w][g] - M); /* a warp with no keys adds nothing */
            L += s_l[w][g] * ew;
            v += s_acc[w][g][i] * ew;
        }
        if (n_split == 1) {
            a.out[t * a.ldo + (int64_t)(hb + g) * hd + i] = v / L;
        } else {
            float *pp = a.part + (((int64_t)(t - a.t_base) * a.n_q + hb + g) * n_split + wk.split) * (hd + 2);
            pp[i] = v;
            if (i == 0) {
                pp[hd] = M; /* -inf when this split had no positions */
                pp[hd + 1] = L;
            }
        }
    }
}

/* Decode attention on CUDA cores, any cache type, hd a multiple of 8 up to HDM: one block of
 * DEC_WARPS warps per (token, split, KV head, tile of NG query heads), as dec_work_of reads
 * blockIdx; the block's ng <= NG heads share every K and V row it loads.
 *
 * Work to threads ("unit" = 8 consecutive elements of a row, nc = hd / 8 of them):
 *   q: the ng heads' queries in shared memory as f32, sq[head * hd + d] (zero past ng).
 *   Warp w takes tiles of DEC_TILE = 16 positions j0 = k0 + 16 (w + DEC_WARPS i), j0 < k1;
 *   lane L (and L + 16) works out the cache row of position j0 + (L & 15).
 *   Scores: lane L = 4 ks + cs (ks 0..7, cs 0..3) takes positions j0 + ks and j0 + 8 + ks and
 *     of each row the units c = cs, cs + 4, ... (so 4 lanes read 64 consecutive bytes of an
 *     F16 row, 16 bytes each); it sums q.k over its units for every head, then the 4 lanes of
 *     a position add theirs (shuffles), leaving all 4 with the two positions' scores.
 *   Softmax per head: the tile's max over its 16 positions (shuffles over ks), the running
 *     max m (the same in every lane), p = e^(s - m); l is kept per lane for its own two
 *     positions (equal copies in the 4 lanes of a position) and summed over ks at the end.
 *     p times the row's V scale goes to shared memory, sp[w][position][head].
 *   P.V: lane L owns the element pairs d = 2 L + 64 r (r < HDM / 64, d < hd) of every head's
 *     output; for each of the tile's positions (their V loads issued 8 positions at a time) it
 *     loads those V elements (a warp reads 128 consecutive bytes of an F16 row) and adds
 *     p * v to its accumulators (registers).
 *   Merge: every warp's running max, sum and accumulators go to shared memory; dec_finish. */
template <typename KT, int NG, int HDM>
static __global__ void __launch_bounds__(DEC_WARPS * 32)
    decode_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc, int kvl0, int n_ht) {
    enum { VR = HDM / 64 };
    __shared__ __align__(16) float sq[NG * HDM];
    __shared__ float sp[DEC_WARPS][DEC_TILE][NG];
    __shared__ float s_acc[DEC_WARPS][NG][HDM];
    __shared__ float s_m[DEC_WARPS][NG], s_l[DEC_WARPS][NG];

    const struct dec_work wk = dec_work_of(a, NG, kvl0, n_ht);
    if (wk.ng <= 0) return; /* a head tile past this KV head's part of the group (the whole block) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.hd, nc = hd >> 3;
    const int ng = wk.ng, k1 = wk.k1, kvh = wk.kvh;
    const int32_t *btab = wk.btab;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qp = a.q + wk.t * a.ldq + (int64_t)wk.hb * hd;
    for (int e = threadIdx.x; e < NG * hd; e += blockDim.x) sq[e] = e < ng * hd ? qp[e] : 0.0f;
    __syncthreads();

    const int ks = lane >> 2, cs = lane & 3;
    float m[NG], l[NG], acc[NG][2 * VR];
#pragma unroll
    for (int g = 0; g < NG; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int r = 0; r < 2 * VR; r++) acc[g][r] = 0.0f;
    }
    for (int j0 = wk.k0 + warp * DEC_TILE; j0 < k1; j0 += DEC_WARPS * DEC_TILE) {
        const int jr = j0 + (lane & 15);
        const int64_t row = jr < k1 ? kv_row(a, btab, jr, kvh) : 0;
        const int64_t ra = __shfl_sync(0xffffffffu, row, ks), rb = __shfl_sync(0xffffffffu, row, ks + 8);
        const bool va = j0 + ks < k1, vb = j0 + 8 + ks < k1;
        const int64_t sink_a = va ? kv_sink<KT>(a, btab, j0 + ks, kvh) : -1;
        const int64_t sink_b = vb ? kv_sink<KT>(a, btab, j0 + 8 + ks, kvh) : -1;

        /* scores of positions j0 + ks (sa) and j0 + 8 + ks (sb), up to 4 units per lane per pass */
        float sa[NG], sb[NG];
#pragma unroll
        for (int g = 0; g < NG; g++) sa[g] = sb[g] = 0.0f;
        for (int cb = 0; cb < nc; cb += 16) {
            kv8<KT> xa[4], xb[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int c = cb + 4 * u + cs;
                xa[u] = {};
                xb[u] = {};
                if (c < nc && va) kv_load8(xa[u], kc, ra * hd + 8 * c);
                if (c < nc && vb) kv_load8(xb[u], kc, rb * hd + 8 * c);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int c = cb + 4 * u + cs;
                if (c >= nc) continue;
                float fa[8], fb[8];
                kv_unpack8(fa, xa[u]);
                kv_unpack8(fb, xb[u]);
                if (sink_a >= 0 || sink_b >= 0) { /* the sink's rows instead of the codes */
                    kv8<__half> h;
                    if (sink_a >= 0) kv_load8(h, a.ksink, sink_a + 8 * c), kv_unpack8(fa, h);
                    if (sink_b >= 0) kv_load8(h, a.ksink, sink_b + 8 * c), kv_unpack8(fb, h);
                }
#pragma unroll
                for (int g = 0; g < NG; g++) {
                    if (g >= ng) continue;
                    const float4 q0 = *(const float4 *)(sq + g * hd + 8 * c);
                    const float4 q1 = *(const float4 *)(sq + g * hd + 8 * c + 4);
                    sa[g] += q0.x * fa[0] + q0.y * fa[1] + q0.z * fa[2] + q0.w * fa[3] + q1.x * fa[4] + q1.y * fa[5] +
                             q1.z * fa[6] + q1.w * fa[7];
                    sb[g] += q0.x * fb[0] + q0.y * fb[1] + q0.z * fb[2] + q0.w * fb[3] + q1.x * fb[4] + q1.y * fb[5] +
                             q1.z * fb[6] + q1.w * fb[7];
                }
            }
        }

        /* softmax: scores scaled (FP8: by the K row's 2^e), positions past k1 at -inf */
        const float ka = va ? scale * kv_row_scale<KT>(a.kexp, ra) : 0.0f;
        const float kb = vb ? scale * kv_row_scale<KT>(a.kexp, rb) : 0.0f;
        const float wa = va ? kv_row_scale<KT>(a.vexp, ra) : 0.0f, wb = vb ? kv_row_scale<KT>(a.vexp, rb) : 0.0f;
        float corr[NG];
#pragma unroll
        for (int g = 0; g < NG; g++) {
            sa[g] += __shfl_xor_sync(0xffffffffu, sa[g], 1);
            sb[g] += __shfl_xor_sync(0xffffffffu, sb[g], 1);
            sa[g] += __shfl_xor_sync(0xffffffffu, sa[g], 2);
            sb[g] += __shfl_xor_sync(0xffffffffu, sb[g], 2);
            sa[g] = va ? sa[g] * ka : -INFINITY;
            sb[g] = vb ? sb[g] * kb : -INFINITY;
            float mt = fmaxf(sa[g], sb[g]);
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 4));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 8));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 16));
            const float mn = fmaxf(m[g], mt); /* finite: position j0 < k1 is in the tile */
            corr[g] = expf(m[g] - mn);        /* 0 on the first tile */
            sa[g] = expf(sa[g] - mn);         /* 0 past k1 */
            sb[g] = expf(sb[g] - mn);
            l[g] = l[g] * corr[g] + sa[g] + sb[g];
            m[g] = mn;
#pragma unroll
            for (int r = 0; r < 2 * VR; r++) acc[g][r] *= corr[g];
        }
        __syncwarp(); /* the previous tile's sp is read */
#pragma unroll
        for (int g = 0; g < NG; g++) {
            if ((g & 3) != cs) continue;
            sp[warp][ks][g] = sa[g] * wa;
            sp[warp][ks + 8][g] = sb[g] * wb;
        }
        __syncwarp();

        /* P.V, 8 positions' loads at a time */
#pragma unroll
        for (int ib = 0; ib < DEC_TILE; ib += 8) {
            kv2<KT> xv[8][VR];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int64_t rv = __shfl_sync(0xffffffffu, row, ib + i);
                const bool ok = j0 + ib + i < k1;
#pragma unroll
                for (int r = 0; r < VR; r++) {
                    const int d = 2 * lane + 64 * r;
                    xv[i][r] = {};
                    if (ok && d < hd) kv_load2(xv[i][r], vc, rv * hd + d);
                }
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if (j0 + ib + i >= k1) continue;
                const int64_t sv = kv_sink<KT>(a, btab, j0 + ib + i, kvh);
                float p[NG];
#pragma unroll
                for (int g = 0; g < NG; g++) p[g] = sp[warp][ib + i][g];
#pragma unroll
                for (int r = 0; r < VR; r++) {
                    const int d = 2 * lane + 64 * r;
                    float2 v = kv_unpack2(xv[i][r]);
                    if (sv >= 0 && d < hd) v = __half22float2(*(const __half2 *)(a.vsink + sv + d));
#pragma unroll
                    for (int g = 0; g < NG; g++) {
                        if (g >= ng) continue;
                        acc[g][2 * r] += p[g] * v.x;
                        acc[g][2 * r + 1] += p[g] * v.y;
                    }
                }
            }
        }
    }

    /* merge the warps */
#pragma unroll
    for (int g = 0; g < NG; g++) {
        l[g] += __shfl_xor_sync(0xffffffffu, l[g], 4);
        l[g] += __shfl_xor_sync(0xffffffffu, l[g], 8);
        l[g] += __shfl_xor_sync(0xffffffffu, l[g], 16);
        if (lane == 0) {
            s_m[warp][g] = m[g];
            s_l[warp][g] = l[g];
        }
#pragma unroll
        for (int r = 0; r < VR; r++) {
            const int d = 2 * lane + 64 * r;
            if (d < hd) {
                s_acc[warp][g][d] = acc[g][2 * r];
                s_acc[warp][g][d + 1] = acc[g][2 * r + 1];
            }
        }
    }
    __syncthreads();
    dec_finish<NG, HDM>(a, wk, s_m, s_l, s_acc);
}

/* V elements 4 at a time (element offset a multiple of 4): 8 bytes of F16, 4 FP8 codes. */
template <typename KT>
struct kv4;
template <>
struct kv4<__half> {
    uint2 u;
};
template <>
struct kv4<uint8_t> {
    unsigned u;
};

static __device__ __forceinline__ void kv_load4(kv4<__half> &x, const __half *p, int64_t at) {
    x.u = *(const uint2 *)(p + at);
}
static __device__ __forceinline__ void kv_load4(kv4<uint8_t> &x, const uint8_t *p, int64_t at) {
    x.u = *(const unsigned *)(p + at);
}

/* As f16x2 words, elements in order (the first in the low half of w[0]). */
static __device__ __forceinline__ void kv_f16x8(unsigned w[4], const kv8<__half> &x) {
    w[0] = x.u.x, w[1] = x.u.y, w[2] = x.u.z, w[3] = x.u.w;
}
static __device__ __forceinline__ void kv_f16x8(unsigned w[4], const kv8<uint8_t> &x) {
    w[0] = fp8x2_f16x2(x.u.x), w[1] = fp8x2_f16x2(x.u.x >> 16);
    w[2] = fp8x2_f16x2(x.u.y), w[3] = fp8x2_f16x2(x.u.y >> 16);
}
static __device__ __forceinline__ void kv_f16x4(unsigned w[2], const kv4<__half> &x) { w[0] = x.u.x, w[1] = x.u.y; }
static __device__ __forceinline__ void kv_f16x4(unsigned w[2], const kv4<uint8_t> &x) {
    w[0] = fp8x2_f16x2(x.u), w[1] = fp8x2_f16x2(x.u >> 16);
}

/* x as hi + lo, two f16 (22 bits or so of x's 24; |x| < 65504): their halves of f16x2 words. */
static __device__ __forceinline__ void f16_split(float x, unsigned short &hi, unsigned short &lo) {
    const __half h = __float2half_rn(x);
    hi = __half_as_ushort(h);
    lo = __half_as_ushort(__float2half_rn(x - __half2float(h)));
}

/* c += A B on tensor cores, one m16n8k16 tile (A 16 x 16 row-major, B 16 x 8 column-major,
 * f16 in, f32 accumulate). With g = lane / 4, t = lane % 4 the fragments hold (row, column):
 * A words a0 (g, 2t..2t+1), a1 (g+8, 2t..2t+1), a2 (g, 2t+8..2t+9), a3 (g+8, 2t+8..2t+9);
 * B words b0 (2t..2t+1, g), b1 (2t+8..2t+9, g); C c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t),
 * c3 (g+8, 2t+1). */
static __device__ __forceinline__ void mma_16816(float c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                                 unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Decode attention on tensor cores for an F16 (KT = __half) or FP8 (KT = uint8_t) cache, hd a
 * multiple of 32 up to HDM: the blocks as decode_kernel's (dec_work_of) with tiles of
 * DEC_MAX_G = 8 query heads (the MMAs' N; heads past ng are zero queries whose results are
 * dropped). Cached values are exact in F16 (FP8 codes decode to F16 exactly, their row scale
 * applied in f32); the f32 operands, q and the softmax weights, go in as hi + lo F16 pairs,
 * two MMAs each, so the products keep about 22 bits, summed in f32.
 *
 * Work to threads, g = lane / 4, t = lane % 4 (g, t as in mma_16816):
 *   q: the 8 heads' queries in shared memory as hi and lo F16 rows, sqh / sql[head][d].
 *   Warp w takes tiles of DEC_TILE = 16 positions j0 = k0 + 16 (w + DEC_WARPS i), j0 < k1;
 *   lane L (and L + 16) works out the cache row of position j0 + (L & 15).
 *   Loads, all issued at the tile's start: K elements 32u + 8t .. +7 (16 bytes of F16) of
 *     positions j0 + g and j0 + g + 8 for each 32-element block u; V elements 32u + 4g .. +3
 *     of positions j0 + 2t, 2t+1, 2t+8, 2t+9.
 *   S = K Q^T (16 positions x 8 heads), per block u two MMAs of 16 elements each, hi and lo:
 *     A = the K rows, rows g / g+8 = positions j0 + g / g + 8, and the MMA's k slots 2t, 2t+1,
 *     2t+8, 2t+9 = elements 32u + 8t + 4v + 0, 1, 2, 3 in MMA v (any order of the elements
 *     sums the same; this one makes each lane's 16-byte K load its A words); B = the same
 *     elements of q for head g from shared memory. C: lane holds positions g, g+8 x heads
 *     2t, 2t+1.
 *   Softmax per head as decode_kernel, over the C layout: the tile's max by shuffles over g,
 *     running max m and sum l for heads 2t, 2t+1 in the lane (l summed over g at the end).
 *     p times the position's V scale over the tile's largest V scale W (FP8; 1 for F16) goes to
 *     shared memory sp[w][position][head] and comes back transposed, as hi + lo F16 B words
 *     (k = positions 2t, 2t+1 / 2t+8, 2t+9, n = head g).
 *   O^T += V^T P^T per 16 elements (M = elements, N = heads, K = positions), into a tile
 *     accumulator (hi and lo MMAs) then o = o corr + W tile: A rows g / g+8 of MMA x in block u
 *     = elements 32u + 4g + 2x and + 1, so each lane's 8-byte V loads give its A words after a
 *     byte permute. Lane holds o for heads 2t, 2t+1 x elements 32u + 4g + 0..3.
 *   Merge: as decode_kernel, dec_finish. */
template <typename KT, int HDM>
static __global__ void __launch_bounds__(DEC_WARPS * 32)
    decode_mma_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc, int kvl0, int n_ht) {
    enum { NG = DEC_MAX_G, NU = HDM / 32, LQ = HDM + 32 /* sqh/sql row stride: rows 64 bytes apart mod 128 */ };
    __shared__ __align__(16) __half sqh[NG * LQ];
    __shared__ __align__(16) __half sql[NG * LQ];
    __shared__ float sp[DEC_WARPS][DEC_TILE][NG];
    __shared__ float s_acc[DEC_WARPS][NG][HDM];
    __shared__ float s_m[DEC_WARPS][NG], s_l[DEC_WARPS][NG];

    const struct dec_work wk = dec_work_of(a, NG, kvl0, n_ht);
    if (wk.ng <= 0) return; /* a head tile past this KV head's part of the group (the whole block) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.hd, nu = hd >> 5;
    const int k1 = wk.k1;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qp = a.q + wk.t * a.ldq + (int64_t)wk.hb * hd;
    for (int e = threadIdx.x; e < NG * hd; e += blockDim.x) {
        const int h = e / hd, d = e % hd;
        unsigned short hi, lo;
        f16_split(h < wk.ng ? qp[e] : 0.0f, hi, lo);
        sqh[h * LQ + d] = __ushort_as_half(hi);
        sql[h * LQ + d] = __ushort_as_half(lo);
    }
    __syncthreads();

    const int g = lane >> 2, t = lane & 3;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, o[NU][2][4];
#pragma unroll
    for (int u = 0; u < NU; u++)
#pragma unroll
        for (int i = 0; i < 8; i++) o[u][i / 4][i % 4] = 0.0f;
    for (int j0 = wk.k0 + warp * DEC_TILE; j0 < k1; j0 += DEC_WARPS * DEC_TILE) {
        const int jr = j0 + (lane & 15);
        const int64_t row = jr < k1 ? kv_row(a, wk.btab, jr, wk.kvh) : 0;
        const int64_t ra = __shfl_sync(0xffffffffu, row, g), rb = __shfl_sync(0xffffffffu, row, g + 8);
        const bool va = j0 + g < k1, vb = j0 + g + 8 < k1;
        const int64_t sink_a = va ? kv_sink<KT>(a, wk.btab, j0 + g, wk.kvh) : -1;
        const int64_t sink_b = vb ? kv_sink<KT>(a, wk.btab, j0 + g + 8, wk.kvh) : -1;
        const int kv_i[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9}; /* tile positions of this lane's V rows */
        int64_t rv[4];
#pragma unroll
        for (int i = 0; i < 4; i++) rv[i] = __shfl_sync(0xffffffffu, row, kv_i[i]);

        kv8<KT> xa[NU], xb[NU];
        kv4<KT> xv[NU][4];
#pragma unroll
        for (int u = 0; u < NU; u++) {
            xa[u] = {};
            xb[u] = {};
            if (u < nu && va) kv_load8(xa[u], kc, ra * hd + 32 * u + 8 * t);
            if (u < nu && vb) kv_load8(xb[u], kc, rb * hd + 32 * u + 8 * t);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                xv[u][i] = {};
                if (u < nu && j0 + kv_i[i] < k1) kv_load4(xv[u][i], vc, rv[i] * hd + 32 * u + 4 * g);
            }
        }

        /* S = K Q^T */
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < NU; u++) {
            if (u >= nu) continue;
            unsigned ka[4], kb[4];
            kv_f16x8(ka, xa[u]);
            kv_f16x8(kb, xb[u]);
            if (sink_a >= 0 || sink_b >= 0) { /* the sink's rows (F16 words) instead of the codes */
                kv8<__half> h;
                if (sink_a >= 0) kv_load8(h, a.ksink, sink_a + 32 * u + 8 * t), kv_f16x8(ka, h);
                if (sink_b >= 0) kv_load8(h, a.ksink, sink_b + 32 * u + 8 * t), kv_f16x8(kb, h);
            }
            const uint4 qh = *(const uint4 *)(sqh + g * LQ + 32 * u + 8 * t);
            const uint4 ql = *(const uint4 *)(sql + g * LQ + 32 * u + 8 * t);
            mma_16816(c, ka[0], kb[0], ka[1], kb[1], qh.x, qh.y);
            mma_16816(c, ka[0], kb[0], ka[1], kb[1], ql.x, ql.y);
            mma_16816(c, ka[2], kb[2], ka[3], kb[3], qh.z, qh.w);
            mma_16816(c, ka[2], kb[2], ka[3], kb[3], ql.z, ql.w);
        }

        /* softmax: s[0], s[1] = position g, heads 2t, 2t+1; s[2], s[3] = position g + 8 */
        const float ska = va ? scale * kv_row_scale<KT>(a.kexp, ra) : 0.0f;
        const float skb = vb ? scale * kv_row_scale<KT>(a.kexp, rb) : 0.0f;
        float s[4] = {va ? c[0] * ska : -INFINITY, va ? c[1] * ska : -INFINITY, vb ? c[2] * skb : -INFINITY,
                      vb ? c[3] * skb : -INFINITY};
        float mt0 = fmaxf(s[0], s[2]), mt1 = fmaxf(s[1], s[3]);
        const float wa = va ? kv_row_scale<KT>(a.vexp, ra) : 0.0f, wb = vb ? kv_row_scale<KT>(a.vexp, rb) : 0.0f;
        float W = fmaxf(wa, wb);
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
            mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, x));
            mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, x));
            W = fmaxf(W, __shfl_xor_sync(0xffffffffu, W, x));
        }
        const float mn0 = fmaxf(m0, mt0), mn1 = fmaxf(m1, mt1); /* finite: position j0 < k1 is in the tile */
        const float corr0 = expf(m0 - mn0), corr1 = expf(m1 - mn1); /* 0 on the first tile */
        s[0] = expf(s[0] - mn0); /* 0 past k1 */
        s[1] = expf(s[1] - mn1);
        s[2] = expf(s[2] - mn0);
        s[3] = expf(s[3] - mn1);
        l0 = l0 * corr0 + s[0] + s[2];
        l1 = l1 * corr1 + s[1] + s[3];
        m0 = mn0;
        m1 = mn1;
        const float fa = wa / W, fb = wb / W; /* powers of 2 at most 1 (FP8), or 1 */
        __syncwarp(); /* the previous tile's sp is read */
        sp[warp][g][2 * t] = s[0] * fa;
        sp[warp][g][2 * t + 1] = s[1] * fa;
        sp[warp][g + 8][2 * t] = s[2] * fb;
        sp[warp][g + 8][2 * t + 1] = s[3] * fb;
        __syncwarp();
        unsigned short ph[4], pl[4];
#pragma unroll
        for (int i = 0; i < 4; i++) f16_split(sp[warp][kv_i[i]][g], ph[i], pl[i]);
        const unsigned bh0 = ph[0] | ((unsigned)ph[1] << 16), bh1 = ph[2] | ((unsigned)ph[3] << 16);
        const unsigned bl0 = pl[0] | ((unsigned)pl[1] << 16), bl1 = pl[2] | ((unsigned)pl[3] << 16);

        /* O^T += V^T P^T */
#pragma unroll
        for (int u = 0; u < NU; u++) {
            if (u >= nu) continue;
            unsigned w[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                kv_f16x4(w[i], xv[u][i]);
                const int64_t sv = j0 + kv_i[i] < k1 ? kv_sink<KT>(a, wk.btab, j0 + kv_i[i], wk.kvh) : -1;
                if (sv >= 0) {
                    kv4<__half> h;
                    kv_load4(h, a.vsink, sv + 32 * u + 4 * g);
                    kv_f16x4(w[i], h);
                }
            }
#pragma unroll
            for (int x = 0; x < 2; x++) {
                const unsigned a0 = __byte_perm(w[0][x], w[1][x], 0x5410), a1 = __byte_perm(w[0][x], w[1][x], 0x7632);
                const unsigned a2 = __byte_perm(w[2][x], w[3][x], 0x5410), a3 = __byte_perm(w[2][x], w[3][x], 0x7632);
                float ct[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_16816(ct, a0, a1, a2, a3, bh0, bh1);
                mma_16816(ct, a0, a1, a2, a3, bl0, bl1);
                o[u][x][0] = o[u][x][0] * corr0 + ct[0] * W;
                o[u][x][1] = o[u][x][1] * corr1 + ct[1] * W;
                o[u][x][2] = o[u][x][2] * corr0 + ct[2] * W;
                o[u][x][3] = o[u][x][3] * corr1 + ct[3] * W;
            }
        }
    }

    /* merge the warps */
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }
    if (g == 0) {
        s_m[warp][2 * t] = m0;
        s_m[warp][2 * t + 1] = m1;
        s_l[warp][2 * t] = l0;
        s_l[warp][2 * t + 1] = l1;
    }
#pragma unroll
    for (int u = 0; u < NU; u++) {
        if (u >= nu) continue;
#pragma unroll
        for (int x = 0; x < 2; x++) {
            const int d = 32 * u + 4 * g + 2 * x;
            s_acc[warp][2 * t][d] = o[u][x][0];
            s_acc[warp][2 * t + 1][d] = o[u][x][1];
            s_acc[warp][2 * t][d + 1] = o[u][x][2];
            s_acc[warp][2 * t + 1][d + 1] = o[u][x][3];
        }
    }
    __syncthreads();
    dec_finish<NG, HDM>(a, wk, s_m, s_l, s_acc);
}

/* ---- prefill path: tensor-core tiles ---- */

/* Shared memory layout (element strides padded for bank spread; every WMMA pointer stays
 * 32-byte aligned): Q, K, V tiles in f16, per warp S (f32) and P (f16) for its 16 rows,
 * O (f32) for the 64 rows, then the running max and sum of each row. */
struct fa_layout {
    int ldh, lds, ldp, ldo;
    size_t q, k, v, s, p, o, m, l, bytes;
};

static __host__ __device__ struct fa_layout fa_layout_for(int hd) {
    struct fa_layout L;
    L.ldh = hd + 8;
    L.lds = FA_BK + 4;
    L.ldp = FA_BK + 8;
    L.ldo = hd + 4;
    size_t at = 0;
#define FA_PUT(field, n) (L.field = at, at += ((size_t)(n) + 127) & ~(size_t)127)
    FA_PUT(q, (size_t)FA_BQ * L.ldh * 2);
    FA_PUT(k, (size_t)FA_BK * L.ldh * 2);
    FA_PUT(v, (size_t)FA_BK * L.ldh * 2);
    FA_PUT(s, (size_t)FA_BQ * L.lds * 4);
    FA_PUT(p, (size_t)FA_BQ * L.ldp * 2);
    FA_PUT(o, (size_t)FA_BQ * L.ldo * 4);
    FA_PUT(m, (size_t)FA_BQ * 4);
    FA_PUT(l, (size_t)FA_BQ * 4);
#undef FA_PUT
    L.bytes = at;
    return L;
}

/* 8 cached elements of cache row `row` from element offset `at` into 8 f16 of shared memory
 * (16-byte aligned): F16 copied as they are; FP8 codes decoded and scaled by the row's 2^e,
 * which lands on the values an F16 cache would hold, rounded to F16 only where they have
 * more than F16's precision (below 2^-14). */
static __device__ __forceinline__ void fa_load8(__half *dst, const __half *src, int64_t at, const int8_t *exps,
                                                int64_t row) {
    (void)exps;
    (void)row;
    *(uint4 *)dst = *(const uint4 *)(src + at);
}
static __device__ __forceinline__ void fa_load8(__half *dst, const uint8_t *src, int64_t at, const int8_t *exps,
                                                int64_t row) {
    const float x = fp8_exp2(exps[row]);
    const uint2 raw = *(const uint2 *)(src + at); /* at is a multiple of 8: hd % 16 == 0 */
    const uint8_t *b = (const uint8_t *)&raw;
    __align__(16) __half h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = __float2half_rn(fp8_dev_decode(b[i]) * x);
    *(uint4 *)dst = *(const uint4 *)h;
}
/* The same from an FP8 sink row (kv_sink): its F16 values of x / 2^e, scaled by the row's 2^e. */
static __device__ __forceinline__ void fa_load8_sink(__half *dst, const __half *src, int64_t at, const int8_t *exps,
                                                     int64_t row) {
    const float x = fp8_exp2(exps[row]);
    const uint4 raw = *(const uint4 *)(src + at);
    const __half *v = (const __half *)&raw;
    __align__(16) __half h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = __float2half_rn(__half2float(v[i]) * x);
    *(uint4 *)dst = *(const uint4 *)h;
}

/* A flash launch's tiles (kernels/att_tiles.h), block y taking tile t[y] = (first token << 6) |
 * (tokens - 1), or with n == 0 block y taking tokens 64 y .. 64 y + 63 of the step (no host
 * arrays to plan from). They travel by value in the kernel's parameters: no upload, device
 * buffer or host-device ordering to keep (a captured graph would hold them as they were), the
 * way PyTorch's multi_tensor_apply passes its lists; FA_TILES keeps the parameters within the
 * 4 KiB every driver takes, and a step of more tiles takes more launches. */
enum { FA_TILES = 768 };
struct fa_tiles {
    int n;
    uint32_t t[FA_TILES];
};
static_assert(FA_BQ == 64, "fa_tiles packs a tile's token count in 6 bits");

/* __grid_constant__: the tile table is read where the parameters are, never copied into a
 * thread's local memory (which nvcc may do for a by-value parameter whose address is taken). */
template <typename KT>
static __global__ void __launch_bounds__(ATT_WARPS * 32)
    flash_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc, int T,
                 const __grid_constant__ struct fa_tiles tiles) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    const int h = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.hd;
    int t0, nt;
    if (tiles.n) { /* planned: one sequence's consecutive positions (att_tiles_cut) */
        t0 = (int)(tiles.t[blockIdx.y] >> 6);
        nt = (int)(tiles.t[blockIdx.y] & 63) + 1;
    } else {
        t0 = blockIdx.y * FA_BQ;
        nt = min(FA_BQ, T - t0);
        /* one sequence, consecutive positions? else token by token on the exact path */
        const int seq = a.seq_of[t0], p0 = a.pos[t0];
        int mine = 1;
        for (int i = threadIdx.x; i < nt; i += blockDim.x) mine &= a.seq_of[t0 + i] == seq && a.pos[t0 + i] == p0 + i;
        if (!__syncthreads_and(mine)) {
            for (int i = 0; i < nt; i++) attend_one<KT>(a, kc, vc, t0 + i, h, 0, 1, (float *)smem);
            return;
        }
    }
    const int seq = a.seq_of[t0], p0 = a.pos[t0];

    const struct fa_layout L = fa_layout_for(hd);
    __half *Qs = (__half *)(smem + L.q), *Ks = (__half *)(smem + L.k), *Vs = (__half *)(smem + L.v);
    float *S = (float *)(smem + L.s), *O = (float *)(smem + L.o), *Mr = (float *)(smem + L.m), *Lr = (float *)(smem + L.l);
    __half *P = (__half *)(smem + L.p);
    const int kvh = (a.q_head0 + h) / a.group - a.kv_head0;
    const int32_t *btab = a.blocks + a.block_off[seq];
    const float scale = 1.0f / sqrtf((float)hd);

    /* Q pre-scaled by 1/sqrt(hd), rows past the step's tokens zero; O, max and sum reset */
    for (int e = threadIdx.x; e < FA_BQ * hd; e += blockDim.x) {
        const int i = e / hd, d = e % hd;
        const float v = i < nt ? a.q[(t0 + i) * a.ldq + (int64_t)h * hd + d] * scale : 0.0f;
        Qs[i * L.ldh + d] = __float2half_rn(v);
        O[i * L.ldo + d] = 0.0f;
    }
    for (int i = threadIdx.x; i < FA_BQ; i += blockDim.x) {
        Mr[i] = -INFINITY;
        Lr[i] = 0.0f;
    }
    const int n_keys = p0 + nt; /* the tile's last query sees positions 0..p0+nt-1 */
    const int chunks = hd / 8;  /* 16-byte pieces of a row */
    for (int kb = 0; kb < n_keys; kb += FA_BK) {
        __syncthreads(); /* the previous tile's K, V (and at the start Q, O) are settled */
        for (int e = threadIdx.x; e < FA_BK * chunks; e += blockDim.x) {
            const int r = e / chunks, c = e % chunks, j = kb + r;
            __half *kd = Ks + r * L.ldh + 8 * c, *vd = Vs + r * L.ldh + 8 * c;
            const int64_t sk = j < n_keys ? kv_sink<KT>(a, btab, j, kvh) : -1;
            if (sk >= 0) {
                const int64_t row = kv_row(a, btab, j, kvh);
                fa_load8_sink(kd, a.ksink, sk + 8 * c, a.kexp, row);
                fa_load8_sink(vd, a.vsink, sk + 8 * c, a.vexp, row);
            } else if (j < n_keys) {
                const int64_t row = kv_row(a, btab, j, kvh), at = row * hd + 8 * c;
                fa_load8(kd, kc, at, a.kexp, row);
                fa_load8(vd, vc, at, a.vexp, row);
            } else {
                *(uint4 *)kd = make_uint4(0, 0, 0, 0);
                *(uint4 *)vd = make_uint4(0, 0, 0, 0);
            }
        }
        __syncthreads();

        /* S = Q K^T for this warp's 16 rows and the 64 keys */
        float *Sw = S + warp * 16 * L.lds;
        for (int kt = 0; kt < FA_BK / 16; kt++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int d = 0; d < hd; d += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb_;
                wmma::load_matrix_sync(qa, Qs + warp * 16 * L.ldh + d, L.ldh);
                wmma::load_matrix_sync(kb_, Ks + kt * 16 * L.ldh + d, L.ldh); /* K^T: column n = key n */
                wmma::mma_sync(acc, qa, kb_, acc);
            }
            wmma::store_matrix_sync(Sw + kt * 16, acc, L.lds, wmma::mem_row_major);
        }
        __syncwarp();

        /* online softmax: two lanes per row, 32 keys each; causal mask by position */
        {
            const int r = lane >> 1, half_ = lane & 1, i = warp * 16 + r;
            const int qpos = p0 + i;
            const float *srow = Sw + r * L.lds + 32 * half_;
            float mx = -INFINITY;
            for (int c = 0; c < 32; c++) {
                const int j = kb + 32 * half_ + c;
                if (j <= qpos && j < n_keys && i < nt) mx = fmaxf(mx, srow[c]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = Mr[i], m_new = fmaxf(m_old, mx);
            const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
            float sum = 0.0f;
            __half *prow = P + (warp * 16 + r) * L.ldp + 32 * half_;
            for (int c = 0; c < 32; c++) {
                const int j = kb + 32 * half_ + c;
                const float p = (j <= qpos && j < n_keys && i < nt) ? expf(srow[c] - m_new) : 0.0f;
                sum += p;
                prow[c] = __float2half_rn(p);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            float *orow = O + i * L.ldo;
            for (int d = half_ * (hd / 2); d < (half_ + 1) * (hd / 2); d++) orow[d] *= corr;
            __syncwarp(); /* both lanes of the row have read Mr[i] */
            if (!half_) {
                Lr[i] = Lr[i] * corr + sum;
                Mr[i] = m_new;
            }
        }
        __syncwarp();

        /* O += P V for this warp's 16 rows */
        for (int dt = 0; dt < hd; dt += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, O + warp * 16 * L.ldo + dt, L.ldo, wmma::mem_row_major);
            for (int kk = 0; kk < FA_BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
                wmma::load_matrix_sync(pa, P + warp * 16 * L.ldp + kk, L.ldp);
                wmma::load_matrix_sync(vb, Vs + kk * L.ldh + dt, L.ldh);
                wmma::mma_sync(acc, pa, vb, acc);
            }
            wmma::store_matrix_sync(O + warp * 16 * L.ldo + dt, acc, L.ldo, wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nt * hd; e += blockDim.x) {
        const int i = e / hd, d = e % hd;
        a.out[(t0 + i) * a.ldo + (int64_t)h * hd + d] = O[i * L.ldo + d] / Lr[i];
    }
}

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
static void launch_flash(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, int T,
                         const struct fa_tiles &tl) {
    const struct fa_layout L = fa_layout_for(a.hd);
    const size_t exact = sizeof(float) * ATT_WARPS * (ATT_MAX_HD + 2); /* attend_one's, at the seams */
    const size_t need = L.bytes > exact ? L.bytes : exact;
    CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    dim3 grid(a.n_q, tl.n ? (unsigned)tl.n : cuda_blocks(T, FA_BQ));
    flash_kernel<KT><<<grid, ATT_WARPS * 32, need, c->stream>>>(a, (const KT *)kv->k, (const KT *)kv->v, T, tl);
    CUDA_LAUNCH_CHECK(c->stream, "flash_kernel");
}

/* The decode path for a cache of KT: ng query heads per block at most (1, 2, 4 or
 * DEC_MAX_G), head_dim up to 128 or 256. */
template <typename KT, int NG>
static void launch_decode_ng(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, dim3 grid,
                             int kvl0, int n_ht) {
    const KT *k = (const KT *)kv->k, *v = (const KT *)kv->v;
    if (a.hd <= 128)
        decode_kernel<KT, NG, 128><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    else
        decode_kernel<KT, NG, ATT_MAX_HD><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    CUDA_LAUNCH_CHECK(c->stream, "decode_kernel");
}

/* The tensor-core decode path for an F16 (KT = __half) or FP8 (KT = uint8_t) cache. */
template <typename KT>
static void launch_decode_mma(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, dim3 grid,
                              int kvl0, int n_ht) {
    const KT *k = (const KT *)kv->k, *v = (const KT *)kv->v;
    if (a.hd <= 128)
        decode_mma_kernel<KT, 128><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    else
        decode_mma_kernel<KT, ATT_MAX_HD><<<grid, DEC_WARPS * 32, 0, c->stream>>>(a, k, v, kvl0, n_ht);
    CUDA_LAUNCH_CHECK(c->stream, "decode_mma_kernel");
}

template <typename KT>
static void launch_decode(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, dim3 grid, int ng,
                          int kvl0, int n_ht) {
    if (ng == 1)
        launch_decode_ng<KT, 1>(c, a, kv, grid, kvl0, n_ht);
    else if (ng == 2)
        launch_decode_ng<KT, 2>(c, a, kv, grid, kvl0, n_ht);
    else if (ng == 4)
        launch_decode_ng<KT, 4>(c, a, kv, grid, kvl0, n_ht);
    else
        launch_decode_ng<KT, DEC_MAX_G>(c, a, kv, grid, kvl0, n_ht);
}

/* The exact path's kernel over T tokens from a.t_base (a.n_split and a.part set). */
static void launch_exact(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, enum dtype kv_type,
                         int T) {
    const dim3 grid(a.n_q, T, a.n_split);
    if (kv_type == DT_F32)
        attention_kernel<float><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const float *)kv->k, (const float *)kv->v);
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
    attention_merge_kernel<<<dim3(a.n_q, T), a.hd < 128 ? 32 * ((a.hd + 31) / 32) : 128, 0, c->stream>>>(a);
    CUDA_LAUNCH_CHECK(c->stream, "attention_merge_kernel");
}

/* Tokens t_base .. t_base + n - 1 of the step on the decode path (debug.attn_decode, for the
 * head_dims and caches it takes), else on the exact path: the whole of a step that is not
 * prefill-sized, or a run of a prefill-sized step's one-token tiles. a: the step's arguments
 * (t_base, n_split and part are set here). Graph-safe as every op: workspace only. */
static void attend_tokens(struct cuda_ctx *c, struct att_args a, const struct kv_layer *kv, enum dtype kv_type,
                          int t_base, int n) {
    const int hd = a.hd, n_q = a.n_q, group = a.group, q_head0 = a.q_head0, kv_head0 = a.kv_head0;
    const int fp8 = kv_type == DT_F8_E4M3;
    const int decode = hd % 8 == 0 && ((uintptr_t)kv->k | (uintptr_t)kv->v) % 16 == 0 && !exact_only(c) && decode_on(c);
    /* decode path: local KV heads kvl0.., and per KV head up to min(group, n_q) query heads in
     * tiles of ng: 8 on tensor cores, else the smallest of 1, 2, 4, 8 that holds them */
    const int mma = decode && kv_type != DT_F32 && hd % 32 == 0;
    const int kvl0 = q_head0 / group - kv_head0, n_kvl = (q_head0 + n_q - 1) / group - kv_head0 - kvl0 + 1;
    const int gh = group < n_q ? group : n_q;
    const int ng = mma || gh > 4 ? DEC_MAX_G : gh > 2 ? 4 : gh;
    const int n_ht = (gh + ng - 1) / ng;
    for (int done = 0; done < n;) {
        const int T = n - done < 65535 ? n - done : 65535; /* gridDim.y's limit */
        a.t_base = t_base + done;
        a.n_split = decode ? att_splits(c, (int64_t)n_kvl * n_ht * T, T) : att_splits(c, (int64_t)n_q * T, T);
        const size_t part_floats = (size_t)T * (size_t)n_q * (size_t)a.n_split * (size_t)(hd + 2);
        a.part = a.n_split > 1 ? (float *)cuda_ws(c, sizeof(float) * part_floats) : NULL;
        if (decode) {
            const dim3 grid(n_kvl * n_ht, T, a.n_split);
            if (mma && fp8)
                launch_decode_mma<uint8_t>(c, a, kv, grid, kvl0, n_ht);
            else if (mma)
                launch_decode_mma<__half>(c, a, kv, grid, kvl0, n_ht);
            else if (kv_type == DT_F32)
                launch_decode<float>(c, a, kv, grid, ng, kvl0, n_ht);
            else if (fp8)
                launch_decode<uint8_t>(c, a, kv, grid, ng, kvl0, n_ht);
            else
                launch_decode<__half>(c, a, kv, grid, ng, kvl0, n_ht);
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
static void attend_tiles(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, enum dtype kv_type,
                         const struct attn_batch *b) {
    const int T = b->n_tokens;
    if (T >= 1 << 26) FATAL("cuda_attention: %d tokens in one step (fa_tiles packs token indices in 26 bits)", T);
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
        attend_tokens(c, a, kv, kv_type, tiles[i].t0, j - i); /* tiles i..j-1: tokens t0 .. t0 + j-i-1 */
        i = j;
    }
    att_tiles_order(tiles, n_flash);
    struct fa_tiles tl = {};
    for (int i = 0; i < n_flash; i += FA_TILES) {
        tl.n = n_flash - i < FA_TILES ? n_flash - i : FA_TILES;
        for (int k = 0; k < tl.n; k++) tl.t[k] = (uint32_t)tiles[i + k].t0 << 6 | (uint32_t)(tiles[i + k].n - 1);
        launch_flash<KT>(c, a, kv, T, tl);
    }
    free(tiles);
}

void cuda_attention(struct cuda_ctx *c, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q, int q_head0,
                    int group, int kv_head0, const struct kv_layer *kv, enum dtype kv_type, int n_kv, int hd,
                    const struct attn_batch *b) {
    const int T = b->n_tokens;
    if (T == 0 || n_q == 0) return;
    if (hd > ATT_MAX_HD) FATAL("cuda_attention: head_dim %d > %d", hd, ATT_MAX_HD);
    const int fp8 = kv_type == DT_F8_E4M3;
    if (kv_type != DT_F32 && kv_type != DT_F16 && !fp8)
        FATAL("cuda_attention: KV cache type %s (F32, F16 or F8_E4M3 expected)", dtype_name(kv_type));
    if (fp8 && (!kv->k_exp || !kv->v_exp)) FATAL("cuda_attention: FP8 KV cache without its scales");
    struct att_args a = {out, ldo, q, ldq, n_q, q_head0, group, kv_head0, n_kv, hd,
                         b->seq_of, b->pos, b->block_off, b->blocks, b->block_size, 1, NULL, kv->k_exp, kv->v_exp,
                         (const __half *)kv->k_sink, (const __half *)kv->v_sink, fp8 ? kv->sink_blocks : 0,
                         fp8 && kv->k_sink ? kv->sink_rows : 0, 0};
    if (T > 64 && kv_type != DT_F32 && hd % 16 == 0 && hd <= FA_MAX_HD && !exact_only(c)) {
        if (b->host_seq_of && b->host_pos && tiles_on(c)) {
            if (fp8)
                attend_tiles<uint8_t>(c, a, kv, kv_type, b);
            else
                attend_tiles<__half>(c, a, kv, kv_type, b);
            return;
        }
        const struct fa_tiles fixed = {}; /* n == 0: 64 tokens a block */
        if (fp8)
            launch_flash<uint8_t>(c, a, kv, T, fixed);
        else
            launch_flash<__half>(c, a, kv, T, fixed);
        return;
    }
    attend_tokens(c, a, kv, kv_type, 0, T);
}
