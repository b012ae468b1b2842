/* Attention's prefill path: FlashAttention-style tensor-core tiles (WMMA) over planned tiles.
 * Internal to kernels/cuda/attention.cu, which includes it (one translation unit: the kernels stay
 * static, and tests/cuda/test_cuda_attention.cu compiles them in). */
#ifndef TPD_CUDA_ATTENTION_PREFILL_CUH
#define TPD_CUDA_ATTENTION_PREFILL_CUH

#include <mma.h>

#include "../att_tiles.h"
#include "attention_common.cuh"
#include "attention_exact.cuh" /* the seams, token by token */

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
static __device__ __forceinline__ void fa_load8(__half *dst, const __half *src, int64_t at,
                                                const int8_t *exps, int64_t row) {
    (void)exps;
    (void)row;
    *(uint4 *)dst = *(const uint4 *)(src + at);
}
static __device__ __forceinline__ void fa_load8(__half *dst, const uint8_t *src, int64_t at,
                                                const int8_t *exps, int64_t row) {
    const float x = fp8_exp2(exps[row]);
    const uint2 raw = *(const uint2 *)(src + at); /* at is a multiple of 8: hd % 16 == 0 */
    const uint8_t *b = (const uint8_t *)&raw;
    __align__(16) __half h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = __float2half_rn(fp8_dev_decode(b[i]) * x);
    *(uint4 *)dst = *(const uint4 *)h;
}
/* The same from an FP8 sink row (kv_sink): its F16 values of x / 2^e, scaled by the row's 2^e. */
static __device__ __forceinline__ void fa_load8_sink(__half *dst, const __half *src, int64_t at,
                                                     const int8_t *exps, int64_t row) {
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
        for (int i = threadIdx.x; i < nt; i += blockDim.x)
            mine &= a.seq_of[t0 + i] == seq && a.pos[t0 + i] == p0 + i;
        if (!__syncthreads_and(mine)) {
            for (int i = 0; i < nt; i++) attend_one<KT>(a, kc, vc, t0 + i, h, 0, 1, (float *)smem);
            return;
        }
    }
    const int seq = a.seq_of[t0], p0 = a.pos[t0];

    const struct fa_layout L = fa_layout_for(hd);
    __half *Qs = (__half *)(smem + L.q), *Ks = (__half *)(smem + L.k), *Vs = (__half *)(smem + L.v);
    float *S = (float *)(smem + L.s), *O = (float *)(smem + L.o), *Mr = (float *)(smem + L.m),
          *Lr = (float *)(smem + L.l);
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
                wmma::load_matrix_sync(kb_, Ks + kt * 16 * L.ldh + d,
                                       L.ldh); /* K^T: column n = key n */
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

#endif
