/* Products with F32 / F16 / BF16 weights, and the dispatch for every weight type. Up to
 * MMV_T tokens (decode): a warp per weight row, two rows a warp for 2..8 tokens, whose
 * activations are then staged in shared memory (debug.mmv_tile false: a warp per row for
 * those too), 16-byte loads, bandwidth-bound. More tokens (prefill, large batches): cuBLASLt
 * (gemm_lt.cu) or cuBLAS, with the activations rounded to the weight's 16-bit type first,
 * which is also what the CPU backend does before its dot products. For 16-bit weights the
 * GEMM tuning table (kernels/gemm_table.h) picks among them per shape and step size where a
 * sweep on this GPU measured them. */
#include <stdlib.h>
#include <string.h>

#include "ops.cuh"

enum { MMV_T = 8, MMV_WARPS = 4, MMV_U = 4 };
/* mmv_tile_kernel: most tokens, warps per block, rows per warp, columns staged per pass */
enum { MMV_TILE_T = MMV_T, MMV_WARPS2 = 8, MMV_R = 2, MMV_KC = 1024 };

/* 8 consecutive weights as loaded (16 bytes of F16/BF16, 32 of F32) and as floats. */
struct raw8 {
    uint4 a, b;
};

template <int WT>
static __device__ __forceinline__ struct raw8 load_raw8(const void *W, int64_t i) {
    struct raw8 r;
    if (WT == DT_F32) {
        r.a = *(const uint4 *)((const float *)W + i);
        r.b = *(const uint4 *)((const float *)W + i + 4);
    } else {
        r.a = *(const uint4 *)((const uint16_t *)W + i);
        r.b = make_uint4(0, 0, 0, 0);
    }
    return r;
}

template <int WT> static __device__ __forceinline__ void unpack8(const struct raw8 &r, float *w) {
    if (WT == DT_F32) {
        const uint32_t p[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int j = 0; j < 8; j++) w[j] = __uint_as_float(p[j]);
    } else {
        const uint32_t p[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (WT == DT_F16) {
                __half2 h;
                memcpy(&h, &p[j], 4);
                const float2 f = __half22float2(h);
                w[2 * j] = f.x, w[2 * j + 1] = f.y;
            } else {
                w[2 * j] = __uint_as_float(p[j] << 16);
                w[2 * j + 1] = __uint_as_float(p[j] & 0xffff0000u);
            }
        }
    }
}

template <int WT> static __device__ __forceinline__ float load1(const void *W, int64_t i) {
    if (WT == DT_F32) return ((const float *)W)[i];
    if (WT == DT_F16) return ld_f16(W, i);
    return ld_bf16(W, i);
}

/* Activations rounded to the weight's type, as the CPU backend rounds them. */
template <int WT> static __device__ __forceinline__ float round_x(float x) {
    if (WT == DT_F16) return __half2float(__float2half_rn(x));
    if (WT == DT_BF16) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

/* v[0..8) = p[0..8), 16 bytes at a time (p 16-byte aligned) */
static __device__ __forceinline__ void load8f(const float *p, float *v) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* acc[t] += w . x[t][k .. k+8) for the step's tokens */
template <int WT, int NT>
static __device__ __forceinline__ void dot8(float *acc, const float *w, const float *__restrict__ x,
                                            int64_t ldx, int k, int T) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < T) {
            float xs[8];
            load8f(x + t * ldx + k, xs);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[t] += w[j] * round_x<WT>(xs[j]);
        }
    }
}

/* Warp per row, T <= NT <= MMV_T tokens (NT a compile-time bound, so batch 1 keeps one
 * accumulator and full occupancy). vec: cols % 8 == 0 and x 16-byte aligned with ldx % 4
 * == 0, so rows and activations can be read 16 bytes at a time; the loads of MMV_U pieces
 * are issued before any is used, to keep enough bytes in flight. */
template <int WT, int NT>
static __global__ void __launch_bounds__(MMV_WARPS * 32)
    mmv_dense_kernel(float *__restrict__ y, int64_t ldy, const float *__restrict__ x, int64_t ldx,
                     const void *__restrict__ W, int rows, int cols, int T, int vec) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MMV_WARPS + warp;
    if (r >= rows) return;
    const int64_t row0 = (int64_t)r * cols;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    if (vec) {
        int k = lane * 8;
        for (; k + (MMV_U - 1) * 256 < cols; k += MMV_U * 256) {
            struct raw8 raw[MMV_U];
#pragma unroll
            for (int u = 0; u < MMV_U; u++) raw[u] = load_raw8<WT>(W, row0 + k + u * 256);
#pragma unroll
            for (int u = 0; u < MMV_U; u++) {
                float w[8];
                unpack8<WT>(raw[u], w);
                dot8<WT, NT>(acc, w, x, ldx, k + u * 256, T);
            }
        }
        for (; k < cols; k += 256) {
            float w[8];
            unpack8<WT>(load_raw8<WT>(W, row0 + k), w);
            dot8<WT, NT>(acc, w, x, ldx, k, T);
        }
    } else {
        for (int k = lane; k < cols; k += 32) {
            const float wk = load1<WT>(W, row0 + k);
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < T) acc[t] += wk * round_x<WT>(x[t * ldx + k]);
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t < T) y[t * ldy + r] = v;
    }
}

/* 2..MMV_TILE_T tokens: the same products with the step's activations staged in shared memory,
 * so that they are read from global memory once per block rather than once per row, and
 * each warp takes MMV_R rows so that every activation read from shared memory serves
 * MMV_R rows. A block of MMV_WARPS2 warps takes MMV_WARPS2 * MMV_R consecutive rows and walks
 * the columns MMV_KC at a time: all its threads copy x[0..T)[k0, k0 + MMV_KC) into shared
 * memory (rounded to the weight's type, as the CPU backend rounds them), while lane l of each
 * warp has loaded the 8 weights at k0 + 256u + 8l (u < MMV_KC / 256) of each of its rows, 16
 * bytes at a time, all before any is used (issued before the staging, so they are in flight
 * during it), and adds their products with the T staged rows into acc[row][token]. Needs
 * the vec conditions of mmv_dense_kernel. Per row the columns are summed in the same order
 * as mmv_dense_kernel (lane-strided pieces of 8, then warp_sum). */
template <int WT, int NT>
static __global__ void __launch_bounds__(MMV_WARPS2 * 32)
    mmv_tile_kernel(float *__restrict__ y, int64_t ldy, const float *__restrict__ x, int64_t ldx,
                    const void *__restrict__ W, int rows, int cols, int T) {
    extern __shared__ float4 xs4[]; /* [NT][MMV_KC] floats (32 KiB at NT = 8) */
    float *xs = (float *)xs4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (blockIdx.x * MMV_WARPS2 + warp) * MMV_R;
    float acc[MMV_R][NT];
#pragma unroll
    for (int r = 0; r < MMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    for (int k0 = 0; k0 < cols; k0 += MMV_KC) {
        const int kc = min(MMV_KC, cols - k0); /* a multiple of 8 */
        /* the weights first: their loads stay in flight while x is staged */
        struct raw8 raw[MMV_R][MMV_KC / 256];
#pragma unroll
        for (int r = 0; r < MMV_R; r++)
#pragma unroll
            for (int u = 0; u < MMV_KC / 256; u++)
                if (r0 + r < rows && 256 * u + 8 * lane < kc)
                    raw[r][u] = load_raw8<WT>(W,
                                              (int64_t)(r0 + r) * cols + k0 + 256 * u + 8 * lane);
        __syncthreads(); /* the previous chunk's readers are done */
        for (int e = threadIdx.x; e < T * (kc / 4); e += blockDim.x) {
            const int t = e / (kc / 4), i = 4 * (e % (kc / 4));
            float4 v = *(const float4 *)(x + t * ldx + k0 + i);
            v.x = round_x<WT>(v.x), v.y = round_x<WT>(v.y), v.z = round_x<WT>(v.z),
            v.w = round_x<WT>(v.w);
            *(float4 *)(xs + t * MMV_KC + i) = v;
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < MMV_KC / 256; u++) {
            const int k = 256 * u + 8 * lane;
            if (k >= kc) break;
            float w[MMV_R][8];
#pragma unroll
            for (int r = 0; r < MMV_R; r++) unpack8<WT>(raw[r][u], w[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < T) {
                    float xv[8];
                    load8f(xs + t * MMV_KC + k, xv);
#pragma unroll
                    for (int r = 0; r < MMV_R; r++)
#pragma unroll
                        for (int j = 0; j < 8; j++) acc[r][t] += w[r][j] * xv[j];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MMV_R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0 && t < T && r0 + r < rows) y[t * ldy + r0 + r] = v;
        }
}

static __device__ __forceinline__ void store16(__half *p, float v) { *p = __float2half_rn(v); }
static __device__ __forceinline__ void store16(__nv_bfloat16 *p, float v) {
    *p = __float2bfloat16_rn(v);
}

/* x [T][ldx] f32 -> [T][cols] 16-bit, round to nearest even */
template <typename H>
static __global__ void to_16bit_kernel(H *__restrict__ out, const float *__restrict__ x,
                                       int64_t ldx, int cols, int T) {
    const int64_t n = (int64_t)T * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        store16(out + i, x[(i / cols) * ldx + i % cols]);
}

/* debug.mmv_tile: steps of 2..MMV_TILE_T tokens take mmv_tile_kernel (on by default: every
 * GPU check passed with it on an H200, 2026-11-27, and it took batch 2 from 257 to 320 tok/s
 * and batch 8 from 344 to 460 on Llama-3-8B; at 16 tokens it ran 3.8x slower than cuBLAS,
 * so 9..16 stay with cuBLAS). */
static int mmv_tile_on(const struct cuda_ctx *c) { return c->dbg.mmv_tile; }

/* The mmv kernels when they take this product (returns 1), else 0 (then cuBLAS does). */
template <int WT>
static int launch_mmv_dense(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
                            int T, const struct bweight *w) {
    const int vec = w->cols % 8 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
    const int tile = vec && mmv_tile_on(c);
    if (T > MMV_T) return 0;
    if (tile && T >= 2) {
        const unsigned tb = cuda_blocks(w->rows, MMV_WARPS2 * MMV_R), tth = MMV_WARPS2 * 32;
        const size_t sh = sizeof(float) * MMV_KC * (T <= 2 ? 2 : T <= 4 ? 4 : MMV_TILE_T);
        if (T <= 2)
            mmv_tile_kernel<WT, 2>
                <<<tb, tth, sh, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T);
        else if (T <= 4)
            mmv_tile_kernel<WT, 4>
                <<<tb, tth, sh, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T);
        else
            mmv_tile_kernel<WT, MMV_TILE_T>
                <<<tb, tth, sh, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T);
        CUDA_LAUNCH_CHECK(c->stream, "mmv_tile_kernel");
        return 1;
    }
    const unsigned blocks = cuda_blocks(w->rows, MMV_WARPS), th = MMV_WARPS * 32;
    if (T <= 1)
        mmv_dense_kernel<WT, 1>
            <<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else if (T <= 2)
        mmv_dense_kernel<WT, 2>
            <<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else if (T <= 4)
        mmv_dense_kernel<WT, 4>
            <<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else
        mmv_dense_kernel<WT, MMV_T>
            <<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    CUDA_LAUNCH_CHECK(c->stream, "mmv_dense_kernel");
    return 1;
}

/* x [T][ldx] rounded to the 16-bit type of w, as [T][cols] at the workspace's start (which
 * stays at least ws_min bytes, so what a caller keeps past those bytes stays put). */
static const void *to_16bit(struct cuda_ctx *c, const float *x, int64_t ldx, int T,
                            const struct bweight *w, size_t ws_min) {
    const int is_half = w->type == DT_F16;
    const size_t need = (size_t)T * (size_t)w->cols * 2;
    void *xh = cuda_ws(c, need > ws_min ? need : ws_min);
    const int64_t n = (int64_t)T * w->cols;
    const unsigned blocks = cuda_blocks(n < 4096 * 256 ? n : 4096 * 256, 256);
    if (is_half)
        to_16bit_kernel<__half><<<blocks, 256, 0, c->stream>>>((__half *)xh, x, ldx, w->cols, T);
    else
        to_16bit_kernel<__nv_bfloat16>
            <<<blocks, 256, 0, c->stream>>>((__nv_bfloat16 *)xh, x, ldx, w->cols, T);
    CUDA_LAUNCH_CHECK(c->stream, "to_16bit_kernel");
    return xh;
}

/* cuBLAS is column-major: Y (rows x T, ld ldy) = W^T-as-stored (cols x rows, ld cols)^T * X
 * (cols x T, ld cols), 16-bit inputs, F32 accumulation and output. */
static void gemm_ex(struct cuda_ctx *c, float *y, int64_t ldy, const void *xh, int T,
                    const struct bweight *w) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t dt = w->type == DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                              w->data, dt, w->cols, xh, dt, w->cols, &zero, y, CUDA_R_32F, (int)ldy,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_matmul_16(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                    const struct bweight *w, struct gemm_pick p, size_t ws_min) {
    if (p.kind == GEMM_MMV) {
        const int done = w->type == DT_F16 ? launch_mmv_dense<DT_F16>(c, y, ldy, x, ldx, T, w)
                                           : launch_mmv_dense<DT_BF16>(c, y, ldy, x, ldx, T, w);
        if (done) return;
        p = (struct gemm_pick){GEMM_LT, 0};
    }
    const void *xh = to_16bit(c, x, ldx, T, w, ws_min);
    /* a candidate the heuristic does not offer for this exact shape, or one that fails:
     * its best, then cublasGemmEx */
    if (p.kind == GEMM_LT && !cuda_lt_matmul(c, y, ldy, xh, T, w, p.rank)) return;
    if (p.kind == GEMM_LT && p.rank && !cuda_lt_matmul(c, y, ldy, xh, T, w, 0)) return;
    gemm_ex(c, y, ldy, xh, T, w);
}

void cuda_matmul_as(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                    const struct bweight *w, struct gemm_pick p) {
    cuda_matmul_16(c, y, ldy, x, ldx, T, w, p, 0);
}

void cuda_matmul(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                 const struct bweight *w) {
    if (w->rows == 0 || T == 0) return;
    switch (w->type) {
    case DT_F32:
        if (!launch_mmv_dense<DT_F32>(c, y, ldy, x, ldx, T, w)) {
            const float one = 1.0f, zero = 0.0f;
            CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                                     (const float *)w->data, w->cols, x, (int)ldx, &zero, y,
                                     (int)ldy));
        }
        return;
    case DT_F16:
    case DT_BF16: {
        /* the tuning table's pick for this GPU, shape and step; without one the mmv kernels up
         * to MMV_T tokens, cuBLASLt's first candidate above */
        struct gemm_pick p = cuda_lt_pick(c, w->type == DT_F16, w->rows, w->cols, T);
        if (p.kind == GEMM_DEFAULT)
            p = T <= MMV_T ? (struct gemm_pick){GEMM_MMV, 0} : (struct gemm_pick){GEMM_LT, 0};
        cuda_matmul_16(c, y, ldy, x, ldx, T, w, p, 0);
        return;
    }
    case DT_Q4_0:
    case DT_Q4_1:
    case DT_Q8_0:
    case DT_Q4_K:
    case DT_Q6_K:
    case DT_F8_E4M3_S32:
    case DT_I4_S32: cuda_matmul_q(c, y, ldy, x, ldx, T, w); return;
    }
    FATAL("cuda_matmul: unsupported weight type %d", (int)w->type);
}
