/* Internal to kernels/cuda: the launchers each .cu file exports to backend_cuda.cu, which
 * wires them into the op table. Every launcher queues work on c->stream and returns. */
#ifndef TPD_CUDA_OPS_CUH
#define TPD_CUDA_OPS_CUH

#include "cuda_common.cuh"

extern "C" {
#include "../backend.h"
#include "../gemm_table.h"
}

/* matmul.cu: y[t*ldy + r] = sum_k W[r][k] x[t*ldx + k], every weight type */
void cuda_matmul(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                 const struct bweight *w);
/* matmul.cu: a 16-bit weight's product done as p says (an mmv pick above MMV_T tokens, or an
 * Lt rank the heuristic does not offer, falls back to Lt's first candidate, then to
 * cublasGemmEx); what cuda_matmul does after its table lookup, and what the GEMM sweep
 * (bench/bench_gpu_gemm.cu) times */
void cuda_matmul_as(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                    const struct bweight *w, struct gemm_pick p);
/* The same, with the workspace kept at least ws_min bytes: the activations rounded to 16 bits
 * take its first T * cols * 2 bytes, and a caller's data past them stays (matmul_q.cu's
 * dequantized weights) */
void cuda_matmul_16(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                    const struct bweight *w, struct gemm_pick p, size_t ws_min);

/* gemm_lt.cu: cuBLASLt, its workspace (also cuBLAS's) and the GEMM tuning table. open: when
 * the backend opens, for the GPU named gpu; 0, or -1 with err */
int cuda_lt_open(struct cuda_ctx *c, const char *gpu, char *err);
void cuda_lt_close(struct cuda_ctx *c);
/* The table's pick (GEMM_DEFAULT where it has none) */
struct gemm_pick cuda_lt_pick(const struct cuda_ctx *c, int half, int rows, int cols, int T);
/* y = xh W^T with cuBLASLt's candidate `rank` for the shape: 0, or -1 when the heuristic has
 * no such candidate or the call fails (nothing queued) */
int cuda_lt_matmul(struct cuda_ctx *c, float *y, int64_t ldy, const void *xh, int T,
                   const struct bweight *w, int rank);
/* How many candidates the heuristic has for this product (0..GEMM_LT_RANKS) */
int cuda_lt_candidates(struct cuda_ctx *c, float *y, int64_t ldy, const void *xh, int T,
                       const struct bweight *w);
/* An FP8 product for cuBLASLt: rows x cols E4M3 weight codes (row-major) with a scale per
 * row, T x cols E4M3 activation codes with a scale per token, the output d (T rows of ldd
 * f32, or BF16 where d_bf16), all device memory */
struct lt_f8 {
    const void *w_codes, *x_codes;
    const float *w_scale, *x_scale;
    int rows, cols, T;
    void *d;
    int64_t ldd;
    int d_bf16;
};
/* d[t*ldd + r] = w_scale[r] x_scale[t] sum_k W[r][k] X[t][k]: 0, or -1 when the heuristic
 * has no candidate or the call fails (nothing queued) */
int cuda_lt_matmul_f8(struct cuda_ctx *c, const struct lt_f8 *f);
/* How many candidates the heuristic has for it (0 where this GPU or library has none) */
int cuda_lt_f8_candidates(struct cuda_ctx *c, const struct lt_f8 *f);
long cuda_lt_version(const struct cuda_ctx *c);
int cuda_lt_table_lines(const struct cuda_ctx *c);

/* matmul_q.cu: the quantized types (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F8_E4M3_S32, I4_S32) */
void cuda_matmul_q(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                   const struct bweight *w);

/* matmul_w8a8.cu: the FP8 W8A8 product of a row-scaled DT_F8_E4M3_S32 weight (bweight's
 * row_scaled) through cuBLASLt on GPUs with FP8 tensor cores: 0, or -1 when it does not
 * apply here (y untouched; the caller takes another path) */
int cuda_matmul_w8a8(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                     const struct bweight *w);

/* elementwise.cu: the ops of kernels/backend.h with the same names and meaning */
void cuda_embed(struct cuda_ctx *c, float *x, const int32_t *tok, int T,
                const struct bweight *table, int row0);
void cuda_rmsnorm(struct cuda_ctx *c, float *y, const float *x, const float *w, int T, int n,
                  float eps);
void cuda_add_rmsnorm(struct cuda_ctx *c, float *x, const float *y, float *y_norm, const float *w,
                      int T, int n, float eps);
void cuda_head_rmsnorm(struct cuda_ctx *c, float *x, int64_t ld, int T, int n_heads, int hd,
                       const float *w, float eps);
void cuda_add_bias(struct cuda_ctx *c, float *x, int64_t ld, int T, int n, const float *b);
void cuda_rope(struct cuda_ctx *c, float *x, int64_t ld, int T, int n_heads, int hd,
               const int32_t *pos, const float *inv_freq, int neox);
void cuda_kv_store(struct cuda_ctx *c, struct kv_layer *kv, enum dtype kv_type, const float *k,
                   const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b);
void cuda_silu_mul(struct cuda_ctx *c, float *out, int64_t ldo, const float *g, const float *u,
                   int64_t ld, int T, int n);
void cuda_gather_rows(struct cuda_ctx *c, float *dst, const float *src, const int32_t *idx,
                      int n_rows, int n);
void cuda_moe_combine(struct cuda_ctx *c, float *y, int64_t ldy, const float *src, int64_t lds,
                      const int32_t *pos, const float *w, int T, int k, int n);
void cuda_add(struct cuda_ctx *c, float *x, const float *y, size_t n);

/* attention.cu */
void cuda_attention(struct cuda_ctx *c, float *out, int64_t ldo, const float *q, int64_t ldq,
                    int n_q, int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                    enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b);

/* sampling.cu: kernels/backend.h's top_cands (workspace: cuda_ws, for rows over 4096 columns) */
void cuda_top_cands(struct cuda_ctx *c, struct logit_cand *out, const float *x, int n_rows,
                    int n_cols, int64_t ld, int32_t id0, int k);

#endif
