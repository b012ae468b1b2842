/* Attention's decode path: a block per (token, KV head, split) serving the head's GQA group, on
 * CUDA cores and on tensor cores (mma.sync). Internal to kernels/cuda/attention.cu, which includes
 * it (one translation unit: the kernels stay static, and tests/cuda/test_cuda_attention.cu
 * compiles them in). */
#ifndef TPD_CUDA_ATTENTION_DECODE_CUH
#define TPD_CUDA_ATTENTION_DECODE_CUH

#include "attention_common.cuh"

/* ---- decode path ---- */

enum { DEC_WARPS = 4, DEC_TILE = 16, DEC_MAX_G = 8 };

/* 8 consecutive cached elements of a row as loaded (element offset a multiple of 8): two
 * float4, one 16-byte piece of F16, or 8 FP8 codes. */
template <typename KT> struct kv8;
template <> struct kv8<float> { float4 lo, hi; };
template <> struct kv8<__half> { uint4 u; };
template <> struct kv8<uint8_t> { uint2 u; };

/* 2 consecutive cached elements (element offset even). */
template <typename KT> struct kv2;
template <> struct kv2<float> { float2 u; };
template <> struct kv2<__half> { unsigned u; };
template <> struct kv2<uint8_t> { unsigned short u; };

static __device__ __forceinline__ float2 f16x2_f32(unsigned w) {
    __half2_raw r;
    r.x = (unsigned short)(w & 0xffffu);
    r.y = (unsigned short)(w >> 16);
    return __half22float2(__half2(r));
}

/* Two FP8 codes (low 16 bits of w, the lower-addressed one in the low byte) as an f16x2 word
 * (first in the low half); each decoded as fp8_dev_decode does, which F16 holds exactly. */
static __device__ __forceinline__ unsigned fp8x2_f16x2(unsigned w) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu),
                                                     __NV_E4M3);
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
static __device__ __forceinline__ float2 kv_unpack2(const kv2<uint8_t> &x) {
    return fp8x2_f32(x.u);
}

/* What a decode block works on (blockIdx: x = local KV head kvh = kvl0 + x / n_ht and head
 * tile x % n_ht, y = token t - a.t_base, z = split): the query heads hb .. hb+ng-1 (ng <= tile
 * heads nt; ng <= 0 for a tile past the heads of kvh's GQA group that this rank holds, those h with
 * (q_head0 + h) / group == kvh + kv_head0), positions [k0, k1) of t's sequence (split as
 * attend_one splits them; none for a split past the end), and the sequence's block table. */
struct dec_work {
    int t, split, kvh, hb, ng, k0, k1;
    const int32_t *btab;
};

static __device__ __forceinline__ struct dec_work dec_work_of(const struct att_args &a, int nt,
                                                              int kvl0, int n_ht) {
    struct dec_work w;
    w.t = a.t_base + (int)blockIdx.y;
    w.split = blockIdx.z;
    w.kvh = kvl0 + (int)blockIdx.x / n_ht;
    const int kvg = w.kvh + a.kv_head0;
    const int h_lo = max(0, kvg * a.group - a.q_head0),
              h_hi = min(a.n_q, (kvg + 1) * a.group - a.q_head0);
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
static __device__ __forceinline__ void
dec_finish(const struct att_args &a, const struct dec_work &wk, const float (*s_m)[NG],
           const float (*s_l)[NG], const float (*s_acc)[NG][HDM]) {
    const int hd = a.hd, n_split = a.n_split, t = wk.t, hb = wk.hb;
    for (int e = threadIdx.x; e < wk.ng * hd; e += blockDim.x) {
        const int g = e / hd, i = e % hd;
        float M = -INFINITY;
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, s_m[w][g]);
        float L = 0.0f, v = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) {
            const float ew = s_m[w][g] == -INFINITY
                                 ? 0.0f
                                 : expf(s_m[w][g] - M); /* a warp with no keys adds nothing */
            L += s_l[w][g] * ew;
            v += s_acc[w][g][i] * ew;
        }
        if (n_split == 1) {
            a.out[t * a.ldo + (int64_t)(hb + g) * hd + i] = v / L;
        } else {
            float *pp = a.part + (((int64_t)(t - a.t_base) * a.n_q + hb + g) * n_split + wk.split) *
                                     (hd + 2);
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
    decode_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc, int kvl0,
                  int n_ht) {
    enum { VR = HDM / 64 };
    __shared__ __align__(16) float sq[NG * HDM];
    __shared__ float sp[DEC_WARPS][DEC_TILE][NG];
    __shared__ float s_acc[DEC_WARPS][NG][HDM];
    __shared__ float s_m[DEC_WARPS][NG], s_l[DEC_WARPS][NG];

    const struct dec_work wk = dec_work_of(a, NG, kvl0, n_ht);
    if (wk.ng <= 0)
        return; /* a head tile past this KV head's part of the group (the whole block) */
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
        const int64_t ra = __shfl_sync(0xffffffffu, row, ks),
                      rb = __shfl_sync(0xffffffffu, row, ks + 8);
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
                    sa[g] += q0.x * fa[0] + q0.y * fa[1] + q0.z * fa[2] + q0.w * fa[3] +
                             q1.x * fa[4] + q1.y * fa[5] + q1.z * fa[6] + q1.w * fa[7];
                    sb[g] += q0.x * fb[0] + q0.y * fb[1] + q0.z * fb[2] + q0.w * fb[3] +
                             q1.x * fb[4] + q1.y * fb[5] + q1.z * fb[6] + q1.w * fb[7];
                }
            }
        }

        /* softmax: scores scaled (FP8: by the K row's 2^e), positions past k1 at -inf */
        const float ka = va ? scale * kv_row_scale<KT>(a.kexp, ra) : 0.0f;
        const float kb = vb ? scale * kv_row_scale<KT>(a.kexp, rb) : 0.0f;
        const float wa = va ? kv_row_scale<KT>(a.vexp, ra) : 0.0f,
                    wb = vb ? kv_row_scale<KT>(a.vexp, rb) : 0.0f;
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
template <typename KT> struct kv4;
template <> struct kv4<__half> { uint2 u; };
template <> struct kv4<uint8_t> { unsigned u; };

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
static __device__ __forceinline__ void kv_f16x4(unsigned w[2], const kv4<__half> &x) {
    w[0] = x.u.x, w[1] = x.u.y;
}
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
static __device__ __forceinline__ void mma_16816(float c[4], unsigned a0, unsigned a1, unsigned a2,
                                                 unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
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
    decode_mma_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc,
                      int kvl0, int n_ht) {
    enum {
        NG = DEC_MAX_G,
        NU = HDM / 32,
        LQ = HDM + 32 /* sqh/sql row stride: rows 64 bytes apart mod 128 */
    };
    __shared__ __align__(16) __half sqh[NG * LQ];
    __shared__ __align__(16) __half sql[NG * LQ];
    __shared__ float sp[DEC_WARPS][DEC_TILE][NG];
    __shared__ float s_acc[DEC_WARPS][NG][HDM];
    __shared__ float s_m[DEC_WARPS][NG], s_l[DEC_WARPS][NG];

    const struct dec_work wk = dec_work_of(a, NG, kvl0, n_ht);
    if (wk.ng <= 0)
        return; /* a head tile past this KV head's part of the group (the whole block) */
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
        const int64_t ra = __shfl_sync(0xffffffffu, row, g),
                      rb = __shfl_sync(0xffffffffu, row, g + 8);
        const bool va = j0 + g < k1, vb = j0 + g + 8 < k1;
        const int64_t sink_a = va ? kv_sink<KT>(a, wk.btab, j0 + g, wk.kvh) : -1;
        const int64_t sink_b = vb ? kv_sink<KT>(a, wk.btab, j0 + g + 8, wk.kvh) : -1;
        const int kv_i[4] = {2 * t, 2 * t + 1, 2 * t + 8,
                             2 * t + 9}; /* tile positions of this lane's V rows */
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
                if (u < nu && j0 + kv_i[i] < k1)
                    kv_load4(xv[u][i], vc, rv[i] * hd + 32 * u + 4 * g);
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
        float s[4] = {va ? c[0] * ska : -INFINITY, va ? c[1] * ska : -INFINITY,
                      vb ? c[2] * skb : -INFINITY, vb ? c[3] * skb : -INFINITY};
        float mt0 = fmaxf(s[0], s[2]), mt1 = fmaxf(s[1], s[3]);
        const float wa = va ? kv_row_scale<KT>(a.vexp, ra) : 0.0f,
                    wb = vb ? kv_row_scale<KT>(a.vexp, rb) : 0.0f;
        float W = fmaxf(wa, wb);
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
            mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, x));
            mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, x));
            W = fmaxf(W, __shfl_xor_sync(0xffffffffu, W, x));
        }
        const float mn0 = fmaxf(m0, mt0),
                    mn1 = fmaxf(m1, mt1); /* finite: position j0 < k1 is in the tile */
        const float corr0 = expf(m0 - mn0), corr1 = expf(m1 - mn1); /* 0 on the first tile */
        s[0] = expf(s[0] - mn0);                                    /* 0 past k1 */
        s[1] = expf(s[1] - mn1);
        s[2] = expf(s[2] - mn0);
        s[3] = expf(s[3] - mn1);
        l0 = l0 * corr0 + s[0] + s[2];
        l1 = l1 * corr1 + s[1] + s[3];
        m0 = mn0;
        m1 = mn1;
        const float fa = wa / W, fb = wb / W; /* powers of 2 at most 1 (FP8), or 1 */
        __syncwarp();                         /* the previous tile's sp is read */
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
                const int64_t sv = j0 + kv_i[i] < k1 ? kv_sink<KT>(a, wk.btab, j0 + kv_i[i], wk.kvh)
                                                     : -1;
                if (sv >= 0) {
                    kv4<__half> h;
                    kv_load4(h, a.vsink, sv + 32 * u + 4 * g);
                    kv_f16x4(w[i], h);
                }
            }
#pragma unroll
            for (int x = 0; x < 2; x++) {
                const unsigned a0 = __byte_perm(w[0][x], w[1][x], 0x5410),
                               a1 = __byte_perm(w[0][x], w[1][x], 0x7632);
                const unsigned a2 = __byte_perm(w[2][x], w[3][x], 0x5410),
                               a3 = __byte_perm(w[2][x], w[3][x], 0x7632);
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

#endif
