/* Attention's exact path: one block per (query head, token, split), and the merge of splits.
 * Internal to kernels/cuda/attention.cu, which includes it (one translation unit: the kernels stay
 * static, and tests/cuda/test_cuda_attention.cu compiles them in). */
#ifndef TPD_CUDA_ATTENTION_EXACT_CUH
#define TPD_CUDA_ATTENTION_EXACT_CUH

#include "attention_common.cuh"

/* ---- exact path ---- */

/* Query head h of token t over positions [k0, k1) of its split, by all ATT_WARPS warps of the
 * block; sm: ATT_WARPS * (ATT_MAX_HD + 2) floats of shared memory. With n_split == 1 the
 * normalized result goes to out, else the partial to a.part. */
template <typename KT>
static __device__ void attend_one(const struct att_args &a, const KT *__restrict__ kc,
                                  const KT *__restrict__ vc, int t, int h, int split, int n_split,
                                  float *sm) {
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
        const int64_t row = kv_row(a, btab, j, kvh), at = row * hd,
                      sk = kv_sink<KT>(a, btab, j, kvh);
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
            if (i < hd)
                acc[r] = acc[r] * corr +
                         pv * (sk >= 0 ? __half2float(a.vsink[sk + i]) : kv_ld(vc, at + i));
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
static __global__ void __launch_bounds__(ATT_WARPS * 32)
    attention_kernel(struct att_args a, const KT *__restrict__ kc, const KT *__restrict__ vc) {
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

#endif
