/* Products with F32 / F16 / BF16 weights, and the dispatch for every weight type. Up to
 * MMV_T tokens (decode): a warp per weight row, 16-byte loads, bandwidth-bound. More tokens
 * (prefill, large batches): cuBLAS, with the activations rounded to the weight's 16-bit type
 * first, which is also what the CPU backend does before its dot products. */
#include <string.h>

#include "ops.cuh"

enum { MMV_T = 8, MMV_WARPS = 4, MMV_U = 4 };

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

template <int WT>
static __device__ __forceinline__ void unpack8(const struct raw8 &r, float *w) {
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

template <int WT>
static __device__ __forceinline__ float load1(const void *W, int64_t i) {
    if (WT == DT_F32) return ((const float *)W)[i];
    if (WT == DT_F16) return ld_f16(W, i);
    return ld_bf16(W, i);
}

/* Activations rounded to the weight's type, as the CPU backend rounds them. */
template <int WT>
static __device__ __forceinline__ float round_x(float x) {
    if (WT == DT_F16) return __half2float(__float2half_rn(x));
    if (WT == DT_BF16) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

/* acc[t] += w . x[t][k .. k+8) for the step's tokens */
template <int WT, int NT>
static __device__ __forceinline__ void dot8(float *acc, const float *w, const float *__restrict__ x, int64_t ldx,
                                            int k, int T) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < T) {
            const float4 a = *(const float4 *)(x + t * ldx + k), b = *(const float4 *)(x + t * ldx + k + 4);
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
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

static __device__ __forceinline__ void store16(__half *p, float v) { *p = __float2half_rn(v); }
static __device__ __forceinline__ void store16(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* x [T][ldx] f32 -> [T][cols] 16-bit, round to nearest even */
template <typename H>
static __global__ void to_16bit_kernel(H *__restrict__ out, const float *__restrict__ x, int64_t ldx, int cols, int T) {
    const int64_t n = (int64_t)T * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store16(out + i, x[(i / cols) * ldx + i % cols]);
}

template <int WT>
static void launch_mmv_dense(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                             const struct bweight *w) {
    const int vec = w->cols % 8 == 0 && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
    const unsigned blocks = cuda_blocks(w->rows, MMV_WARPS), th = MMV_WARPS * 32;
    if (T <= 1)
        mmv_dense_kernel<WT, 1><<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else if (T <= 2)
        mmv_dense_kernel<WT, 2><<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else if (T <= 4)
        mmv_dense_kernel<WT, 4><<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    else
        mmv_dense_kernel<WT, MMV_T><<<blocks, th, 0, c->stream>>>(y, ldy, x, ldx, w->data, w->rows, w->cols, T, vec);
    CUDA_LAUNCH_CHECK(c->stream, "mmv_dense_kernel");
}

/* cuBLAS is column-major: Y (rows x T, ld ldy) = W^T-as-stored (cols x rows, ld cols)^T * X
 * (cols x T, ld). */
static void gemm_cublas(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                        const struct bweight *w) {
    const float one = 1.0f, zero = 0.0f;
    if (w->type == DT_F32) {
        CUBLAS_CHECK(cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one,
                                 (const float *)w->data, w->cols, x, (int)ldx, &zero, y, (int)ldy));
        return;
    }
    const int is_half = w->type == DT_F16;
    void *xh = cuda_ws(c, (size_t)T * (size_t)w->cols * 2);
    const int64_t n = (int64_t)T * w->cols;
    const unsigned blocks = cuda_blocks(n < 4096 * 256 ? n : 4096 * 256, 256);
    if (is_half)
        to_16bit_kernel<__half><<<blocks, 256, 0, c->stream>>>((__half *)xh, x, ldx, w->cols, T);
    else
        to_16bit_kernel<__nv_bfloat16><<<blocks, 256, 0, c->stream>>>((__nv_bfloat16 *)xh, x, ldx, w->cols, T);
    CUDA_LAUNCH_CHECK(c->stream, "to_16bit_kernel");
    const cudaDataType_t dt = is_half ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasGemmEx(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, w->rows, T, w->cols, &one, w->data, dt, w->cols,
                              xh, dt, w->cols, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

void cuda_matmul(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                 const struct bweight *w) {
    if (w->rows == 0 || T == 0) return;
    switch (w->type) {
    case DT_F32:
    case DT_F16:
    case DT_BF16:
        if (T > MMV_T) {
            gemm_cublas(c, y, ldy, x, ldx, T, w);
        } else if (w->type == DT_F32) {
            launch_mmv_dense<DT_F32>(c, y, ldy, x, ldx, T, w);
        } else if (w->type == DT_F16) {
            launch_mmv_dense<DT_F16>(c, y, ldy, x, ldx, T, w);
        } else {
            launch_mmv_dense<DT_BF16>(c, y, ldy, x, ldx, T, w);
        }
        return;
    case DT_Q4_0:
    case DT_Q4_1:
    case DT_Q8_0:
    case DT_Q4_K:
    case DT_Q6_K: cuda_matmul_q(c, y, ldy, x, ldx, T, w); return;
    }
    FATAL("cuda_matmul: unsupported weight type %d", (int)w->type);
}
