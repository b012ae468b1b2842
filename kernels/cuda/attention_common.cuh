/* Attention over the paged KV cache: what its three paths share (the step's arguments, loads
 * of cached elements, row addresses in the paged layout, the FP8 sink). Internal to
 * kernels/cuda/attention.cu, which includes it (one translation unit: the kernels stay static, and
 * tests/cuda/test_cuda_attention.cu compiles them in). */
#ifndef TPD_CUDA_ATTENTION_COMMON_CUH
#define TPD_CUDA_ATTENTION_COMMON_CUH

#include "fp8_dev.cuh"
#include "ops.cuh"

enum { ATT_WARPS = 4, ATT_MAX_HD = 256, ATT_R = ATT_MAX_HD / 32, ATT_MAX_SPLIT = 32 };
enum { FA_BQ = 64, FA_BK = 64, FA_MAX_HD = 128 };

static __device__ __forceinline__ float kv_ld(const float *p, int64_t i) { return p[i]; }
static __device__ __forceinline__ float kv_ld(const __half *p, int64_t i) {
    return __half2float(p[i]);
}
static __device__ __forceinline__ float kv_ld(const uint8_t *p, int64_t i) {
    return fp8_dev_decode(p[i]);
}

struct att_args {
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    int n_q, q_head0, group, kv_head0, n_kv, hd;
    const int32_t *seq_of, *pos, *block_off, *blocks;
    int bs, n_split;
    /* n_split > 1: [the launch's tokens][n_q][n_split][hd + 2] = unnormalized sum of p*V, max, sum
     * of p */
    float *part;
    const int8_t *kexp, *vexp;   /* FP8 cache: scale exponent per (slot, KV head) row; else NULL */
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
static __device__ __forceinline__ int64_t kv_row(const struct att_args &a, const int32_t *btab,
                                                 int j, int kvh) {
    return ((int64_t)btab[j / a.bs] * a.bs + j % a.bs) * a.n_kv + kvh;
}

/* Element offset of position j (KV head kvh) of a sequence whose block table is btab in the
 * FP8 sink, or -1 when j is read from the codes. A sink row holds F16 values of x / 2^e with
 * the row's own exponent (kernels/backend.h), so a kernel takes them in place of the decoded
 * codes and keeps every scale as it is. Only KT = uint8_t (FP8) has a sink. */
template <typename KT>
static __device__ __forceinline__ int64_t kv_sink(const struct att_args &a, const int32_t *btab,
                                                  int j, int kvh) {
    if (sizeof(KT) != 1 || j >= a.sink_rows || btab[0] >= a.sink_blocks) return -1;
    return (((int64_t)btab[0] * a.sink_rows + j) * a.n_kv + kvh) * a.hd;
}

#endif
