/* Causal attention over the paged KV cache (layout [n_blocks][block_size][n_kv][hd]).
 *
 * Exact path (any step; the only one for an F32 cache): one 4-warp block per (query head,
 * token, split of the sequence); the warps take the split's positions in turn, each keeping
 * an online softmax (running max, sum and weighted V in registers), and merge at the end.
 * Decode steps have few tokens, so the positions are split over several blocks (partial
 * results in scratch, merged by a second kernel) to fill the GPU on long contexts.
 *
 * Prefill path (steps of more than 64 tokens, F16 or FP8 cache, head_dim a multiple of 16 up
 * to 128): FlashAttention-style tiles on tensor cores (WMMA, f16 inputs, f32 accumulation). A
 * block takes 64 consecutive tokens of one sequence for one head and walks the sequence's
 * keys 64 at a time: S = Q K^T, online softmax, O += P V, with K/V tiles staged in shared
 * memory once for all 64 queries (FP8 rows decoded and scaled to f16 as they are staged).
 * A tile whose tokens are not consecutive positions of one sequence (a ragged batch's
 * seams) is done token by token with the exact path's code.
 * TPD_ATTN_EXACT=1 in the environment forces the exact path everywhere. */
#include <mma.h>
#include <stdlib.h>
#include <string.h>

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
    float *part; /* n_split > 1: [T][n_q][n_split][hd + 2] = unnormalized sum of p*V, max, sum of p */
    const int8_t *kexp, *vexp; /* FP8 cache: scale exponent per (slot, KV head) row; else NULL */
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
        const int64_t row = kv_row(a, btab, j, kvh), at = row * hd;
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int i = lane + 32 * r;
            if (i < hd) s += qr[r] * kv_ld(kc, at + i);
        }
        s = warp_sum(s) * (scale * kv_row_scale<KT>(a.kexp, row));
        const float mn = fmaxf(m, s);
        const float corr = expf(m - mn), p = expf(s - mn); /* corr = 0 on the first key */
        const float pv = p * kv_row_scale<KT>(a.vexp, row);
        l = l * corr + p;
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int i = lane + 32 * r;
            if (i < hd) acc[r] = acc[r] * corr + pv * kv_ld(vc, at + i);
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
        float *pp = a.part + (((int64_t)t * a.n_q + h) * n_split + split) * (hd + 2);
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
    attend_one<KT>(a, kc, vc, blockIdx.y, blockIdx.x, blockIdx.z, a.n_split, sm);
}

/* Merges the splits of one (head, token): out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M). */
static __global__ void attention_merge_kernel(struct att_args a) {
    const int h = blockIdx.x, t = blockIdx.y, hd = a.hd, S = a.n_split;
    const float *pp = a.part + ((int64_t)t * a.n_q + h) * S * (hd + 2);
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

template <typename KT>
static __global__ void __launch_bounds__(ATT_WARPS * 32) flash_kernel(struct att_args a, const KT *__restrict__ kc,
                                                                       const KT *__restrict__ vc, int T) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char smem[];
    const int h = blockIdx.x, t0 = blockIdx.y * FA_BQ, nt = min(FA_BQ, T - t0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hd = a.hd;

    /* one sequence, consecutive positions? else token by token on the exact path */
    const int seq = a.seq_of[t0], p0 = a.pos[t0];
    int mine = 1;
    for (int i = threadIdx.x; i < nt; i += blockDim.x) mine &= a.seq_of[t0 + i] == seq && a.pos[t0 + i] == p0 + i;
    if (!__syncthreads_and(mine)) {
        for (int i = 0; i < nt; i++) attend_one<KT>(a, kc, vc, t0 + i, h, 0, 1, (float *)smem);
        return;
    }

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
            if (j < n_keys) {
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

/* Splits per (head, token): enough blocks for two waves over the SMs when a step has few
 * tokens; none for prefill-sized steps. */
static int att_splits(const struct cuda_ctx *c, int n_q, int T) {
    const int64_t pairs = (int64_t)n_q * T;
    if (T > 64) return 1;
    const int64_t s = (2 * (int64_t)c->n_sm + pairs - 1) / pairs, most = ATT_MAX_SPLIT;
    return (int)(s < 1 ? 1 : s > most ? most : s);
}

static int exact_only(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TPD_ATTN_EXACT");
        v = e && *e && strcmp(e, "0") != 0;
    }
    return v;
}

/* The prefill path for an F16 (KT = __half) or FP8 (KT = uint8_t) cache. */
template <typename KT>
static void launch_flash(struct cuda_ctx *c, const struct att_args &a, const struct kv_layer *kv, int T) {
    const struct fa_layout L = fa_layout_for(a.hd);
    const size_t exact = sizeof(float) * ATT_WARPS * (ATT_MAX_HD + 2); /* attend_one's, at the seams */
    const size_t need = L.bytes > exact ? L.bytes : exact;
    CUDA_CHECK(cudaFuncSetAttribute(flash_kernel<KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    dim3 grid(a.n_q, cuda_blocks(T, FA_BQ));
    flash_kernel<KT><<<grid, ATT_WARPS * 32, need, c->stream>>>(a, (const KT *)kv->k, (const KT *)kv->v, T);
    CUDA_LAUNCH_CHECK(c->stream, "flash_kernel");
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
                         b->seq_of, b->pos, b->block_off, b->blocks, b->block_size, 1, NULL, kv->k_exp, kv->v_exp};
    if (T > 64 && kv_type != DT_F32 && hd % 16 == 0 && hd <= FA_MAX_HD && !exact_only()) {
        if (fp8)
            launch_flash<uint8_t>(c, a, kv, T);
        else
            launch_flash<__half>(c, a, kv, T);
        return;
    }
    if (T > 65535) FATAL("cuda_attention: %d tokens in one step (at most 65535 on the exact path)", T);
    a.n_split = att_splits(c, n_q, T);
    if (a.n_split > 1)
        a.part = (float *)cuda_ws(c, sizeof(float) * (size_t)T * (size_t)n_q * (size_t)a.n_split * (size_t)(hd + 2));
    dim3 grid(n_q, T, a.n_split);
    if (kv_type == DT_F32)
        attention_kernel<float><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const float *)kv->k, (const float *)kv->v);
    else if (fp8)
        attention_kernel<uint8_t><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const uint8_t *)kv->k,
                                                                           (const uint8_t *)kv->v);
    else
        attention_kernel<__half><<<grid, ATT_WARPS * 32, 0, c->stream>>>(a, (const __half *)kv->k,
                                                                          (const __half *)kv->v);
    CUDA_LAUNCH_CHECK(c->stream, "attention_kernel");
    if (a.n_split > 1) {
        attention_merge_kernel<<<dim3(n_q, T), hd < 128 ? 32 * ((hd + 31) / 32) : 128, 0, c->stream>>>(a);
        CUDA_LAUNCH_CHECK(c->stream, "attention_merge_kernel");
    }
}
