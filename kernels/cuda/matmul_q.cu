/* Products with GGUF-quantized weights (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), FP8 checkpoints'
 * F8_E4M3_S32 and INT4 checkpoints' I4_S32 (both weight-only: f32 activations, mmv_f8_kernel
 * and mmv_i4_kernel up to 16 tokens). GGUF types, steps of few tokens:
 * the activations are first quantized the way the CPU backend quantizes them (Q8_0 / Q8_1 /
 * Q8_K, same rounding), then each warp takes one weight row, decodes its blocks in registers
 * and forms int8 dot products (dp4a) with up to MMV_T tokens at a time: every weight byte is
 * read once per MMV_T tokens. Steps of more than 16 tokens (dequant_wins): the matrix is
 * dequantized to F16 in the workspace, each element exactly as the CPU dequantizes it then
 * rounded to F16, and multiplied by cuBLASLt or cuBLAS as F16 weights are (matmul.cu, the
 * tuning table); FP8 checkpoints' weights with one scale per row go through cuBLASLt's FP8
 * product instead where the GPU has one (matmul_w8a8.cu). */
#include "ops.cuh"
#include "quant_dev.cuh"

enum { MMV_T = 8, MMV_WARPS = 4 };

/* ---- activation quantization (kernels/cpu/quant.c, rule for rule) ---- */

/* Q8_0 / Q8_1: one warp per 32-block; d = fp16(amax/127), q = round-half-even(x * 127/amax),
 * Q8_1 adds s = fp16(d * sum q). ds holds d per block (Q8_0) or (d, s) pairs (Q8_1). */
template <bool Q81>
static __global__ void quant_q8_32_kernel(const float *__restrict__ x, int64_t ldx, int cols, int T,
                                          int8_t *__restrict__ qs, float *__restrict__ ds) {
    const int nb = cols / 32, lane = threadIdx.x & 31;
    const int64_t n = (int64_t)T * nb;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < n; g += nwarps) {
        const int t = (int)(g / nb), b = (int)(g % nb);
        const float v = x[t * ldx + 32 * b + lane];
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const int q = __float2int_rn(v * id);
        qs[(int64_t)t * cols + 32 * b + lane] = (int8_t)q;
        const int sum = warp_sum_int(q);
        if (lane == 0) {
            if (Q81) {
                ds[(int64_t)t * 2 * nb + 2 * b] = qd_f16_round(d);
                ds[(int64_t)t * 2 * nb + 2 * b + 1] = qd_f16_round(d * (float)sum);
            } else {
                ds[(int64_t)t * nb + b] = qd_f16_round(d);
            }
        }
    }
}

/* Q8_K: one 256-thread block per 256-block. max = the value of largest magnitude (the
 * first such), iscale = -127/max, q = min(round-half-even(iscale * x), 127), d = 1/iscale. */
static __global__ void __launch_bounds__(256)
    quant_q8_K_kernel(const float *__restrict__ x, int64_t ldx, int cols, int T,
                      int8_t *__restrict__ qs, float *__restrict__ d) {
    __shared__ float s_ax[8];
    __shared__ int s_idx[8];
    __shared__ float s_max, s_amax;
    const int nb = cols / 256, i = threadIdx.x, lane = i & 31, warp = i >> 5;
    for (int64_t g = blockIdx.x; g < (int64_t)T * nb; g += gridDim.x) {
        const int t = (int)(g / nb), b = (int)(g % nb);
        const float *xb = x + t * ldx + 256 * b;
        const float v = xb[i];
        float ax = fabsf(v);
        int idx = i;
        for (int o = 16; o > 0; o >>= 1) {
            const float oa = __shfl_xor_sync(0xffffffffu, ax, o);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (oa > ax || (oa == ax && oi < idx)) {
                ax = oa;
                idx = oi;
            }
        }
        if (lane == 0) {
            s_ax[warp] = ax;
            s_idx[warp] = idx;
        }
        __syncthreads();
        if (i == 0) {
            float best = s_ax[0];
            int bi = s_idx[0];
            for (int w = 1; w < 8; w++)
                if (s_ax[w] > best || (s_ax[w] == best && s_idx[w] < bi)) {
                    best = s_ax[w];
                    bi = s_idx[w];
                }
            s_amax = best;
            s_max = xb[bi];
        }
        __syncthreads();
        const float amax = s_amax, mx = s_max;
        int8_t q = 0;
        if (amax != 0.0f) {
            const float iscale = -127.f / mx;
            const int vq = __float2int_rn(iscale * v);
            q = (int8_t)(vq < 127 ? vq : 127);
            if (i == 0) d[(int64_t)t * nb + b] = 1 / iscale;
        } else if (i == 0) {
            d[(int64_t)t * nb + b] = 0.0f;
        }
        qs[(int64_t)t * cols + 256 * b + i] = q;
        __syncthreads(); /* the shared values are rewritten by the next block */
    }
}

/* ---- the product ---- */

template <int TYPE>
static __device__ __forceinline__ float unit_dot(const uint8_t *row, int u, const int8_t *a,
                                                 const float *ad) {
    if (TYPE == DT_Q4_0) return qd_dot_q4_0(row, u, a, ad);
    if (TYPE == DT_Q4_1) return qd_dot_q4_1(row, u, a, ad);
    if (TYPE == DT_Q8_0) return qd_dot_q8_0(row, u, a, ad);
    if (TYPE == DT_Q4_K) return qd_dot_q4_K(row, u, a, ad);
    return qd_dot_q6_K(row, u, a, ad);
}

/* Warp per row, tokens [blockIdx.y * NT, + NT). aq: [T][cols] quants; ad: T rows of sstride
 * scales. */
template <int TYPE, int NT>
static __global__ void __launch_bounds__(MMV_WARPS * 32)
    mmv_q_kernel(float *__restrict__ y, int64_t ldy, const uint8_t *__restrict__ W,
                 int64_t row_bytes, int rows, int cols, const int8_t *__restrict__ aq,
                 const float *__restrict__ ad, int sstride, int T) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MMV_WARPS + warp;
    if (r >= rows) return; /* a whole warp leaves; no block-wide sync below */
    const int t0 = blockIdx.y * NT;
    const int nt = min(NT, T - t0);
    const int nu = cols / 32;
    const uint8_t *row = W + r * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int u = lane; u < nu; u += 32) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < nt)
                acc[t] += unit_dot<TYPE>(row, u, aq + (int64_t)(t0 + t) * cols,
                                         ad + (int64_t)(t0 + t) * sstride);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t < nt) y[(int64_t)(t0 + t) * ldy + r] = v;
    }
}

template <int TYPE>
static void launch_mmv_q(struct cuda_ctx *c, float *y, int64_t ldy, const struct bweight *w,
                         const int8_t *aq, const float *ad, int sstride, int T) {
    const int64_t rb = dtype_row_bytes(w->type, w->cols);
    const uint8_t *W = (const uint8_t *)w->data;
    if (T <= 1) {
        dim3 grid(cuda_blocks(w->rows, MMV_WARPS), 1);
        mmv_q_kernel<TYPE, 1><<<grid, MMV_WARPS * 32, 0, c->stream>>>(y, ldy, W, rb, w->rows,
                                                                      w->cols, aq, ad, sstride, T);
    } else {
        dim3 grid(cuda_blocks(w->rows, MMV_WARPS), cuda_blocks(T, MMV_T));
        mmv_q_kernel<TYPE, MMV_T><<<grid, MMV_WARPS * 32, 0, c->stream>>>(
            y, ldy, W, rb, w->rows, w->cols, aq, ad, sstride, T);
    }
    CUDA_LAUNCH_CHECK(c->stream, "mmv_q_kernel");
}

/* Row r of W (rb bytes a row) dequantized into out[r][0..cols) as F16 (or BF16: OUT is
 * __nv_bfloat16): a thread an element, qd_dequant's value (the CPU's arithmetic, checked bit
 * for bit by test_cuda_quant). */
static __device__ __forceinline__ void store_16(__half *o, float v) { *o = __float2half_rn(v); }
static __device__ __forceinline__ void store_16(__nv_bfloat16 *o, float v) {
    *o = __float2bfloat16_rn(v);
}

template <int TYPE, typename OUT>
static __global__ void dequant_f16_kernel(OUT *__restrict__ out, const uint8_t *__restrict__ W,
                                          int64_t rb, int rows, int cols) {
    const int64_t n = (int64_t)rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols;
        store_16(out + i, qd_dequant(TYPE, W + r * rb, (int)(i - r * cols)));
    }
}

/* Whether a step of T tokens takes the F16 copy: above 16 tokens (never a step a graph may
 * hold). Measured on an H200 (2026-11-27, synthetic Llama-3-8B Q8_0): one 8-token pass of
 * mmv_q_kernel took 26.4 ms a step, 5.2x its one-token time (dp4a-bound, not bandwidth-bound),
 * and a 64-token step through the F16 copy 28.6 ms, so every step of 17 or more tokens is
 * cheaper this way; where the line lies below that, per type and shape, is for a sweep. */
static int dequant_wins(const struct bweight *w, int T) {
    (void)w;
    return T > 16;
}

template <int TYPE, typename OUT>
static void dequant_f16(struct cuda_ctx *c, OUT *out, const struct bweight *w) {
    const int64_t n = (int64_t)w->rows * w->cols;
    const unsigned blocks = cuda_blocks(n < (int64_t)c->n_sm * 2048 ? n : (int64_t)c->n_sm * 2048,
                                        256);
    dequant_f16_kernel<TYPE, OUT><<<blocks, 256, 0, c->stream>>>(
        out, (const uint8_t *)w->data, dtype_row_bytes(w->type, w->cols), w->rows, w->cols);
    CUDA_LAUNCH_CHECK(c->stream, "dequant_f16_kernel");
}

/* The prefill path: W as F16 in the workspace past the bytes cuda_matmul_16 uses for the
 * activations, then the F16 product as the tuning table picks it. An FP8 or INT4 matrix
 * whose largest weight (w->amax, found on load) is beyond F16's range (65504) goes through
 * BF16 instead: code * scale can reach 448 * scale (FP8), (q - z) * scale any f32 (INT4). */
static void matmul_dequant(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
                           int T, const struct bweight *w) {
    const size_t skip = ((size_t)T * (size_t)w->cols * 2 + 255) & ~(size_t)255;
    void *wh = (char *)cuda_ws(c, skip + (size_t)w->rows * (size_t)w->cols * 2) + skip;
    __half *w16 = (__half *)wh;
    const int bf16 = (w->type == DT_F8_E4M3_S32 || w->type == DT_I4_S32) && !(w->amax <= 65504.0f);
    switch (w->type) {
    case DT_Q4_0: dequant_f16<DT_Q4_0>(c, w16, w); break;
    case DT_Q4_1: dequant_f16<DT_Q4_1>(c, w16, w); break;
    case DT_Q8_0: dequant_f16<DT_Q8_0>(c, w16, w); break;
    case DT_Q4_K: dequant_f16<DT_Q4_K>(c, w16, w); break;
    case DT_Q6_K: dequant_f16<DT_Q6_K>(c, w16, w); break;
    case DT_I4_S32:
        if (bf16) dequant_f16<DT_I4_S32>(c, (__nv_bfloat16 *)wh, w);
        else dequant_f16<DT_I4_S32>(c, w16, w);
        break;
    case DT_F8_E4M3_S32:
        if (bf16) dequant_f16<DT_F8_E4M3_S32>(c, (__nv_bfloat16 *)wh, w);
        else dequant_f16<DT_F8_E4M3_S32>(c, w16, w);
        break;
    default: FATAL("cuda_matmul_q: weight type %s is not quantized", dtype_name(w->type));
    }
    const struct bweight h = {wh, bf16 ? DT_BF16 : DT_F16, w->rows, w->cols, 0};
    struct gemm_pick p = cuda_lt_pick(c, !bf16, w->rows, w->cols, T);
    if (p.kind == GEMM_DEFAULT || p.kind == GEMM_MMV) p = (struct gemm_pick){GEMM_LT, 0};
    cuda_matmul_16(c, y, ldy, x, ldx, T, &h, p, skip + (size_t)w->rows * (size_t)w->cols * 2);
}

/* FP8 weight-only (W8A16) GEMV for steps of up to MMV_T tokens: a warp a row, 8 lanes a
 * 36-byte block (4 codes each), so a warp reads 4 blocks per pass; each decoded code serves
 * every token of the pass. f32 activations and accumulation, as the CPU backend. */
static __global__ void __launch_bounds__(32 * MMV_WARPS)
    mmv_f8_kernel(float *__restrict__ y, int64_t ldy, const float *__restrict__ x, int64_t ldx,
                  const uint8_t *__restrict__ W, int64_t rb, int rows, int cols, int T) {
    const int row = blockIdx.x * MMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const uint8_t *w = W + (int64_t)row * rb;
    const int nb = cols / 32, sub = lane & 7;
    float acc[MMV_T];
#pragma unroll
    for (int t = 0; t < MMV_T; t++) acc[t] = 0.0f;
    for (int b = lane >> 3; b < nb; b += 4) {
        const uint8_t *blk = w + 36 * (int64_t)b;
        const float d = *(const float *)blk;
        const uint32_t q = *(const uint32_t *)(blk + 4 + 4 * sub);
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = qd_e4m3((uint8_t)(q >> (8 * k))) * d;
        const int col = 32 * b + 4 * sub;
#pragma unroll
        for (int t = 0; t < MMV_T; t++) {
            if (t >= T) break;
            const float *xt = x + t * ldx + col;
            acc[t] += v[0] * xt[0] + v[1] * xt[1] + v[2] * xt[2] + v[3] * xt[3];
        }
    }
#pragma unroll
    for (int t = 0; t < MMV_T; t++) {
        if (t >= T) break;
        const float s = warp_sum(acc[t]);
        if (lane == 0) y[t * ldy + row] = s;
    }
}

/* FP8 checkpoints' weights (DT_F8_E4M3_S32): the GEMV up to 16 tokens, MMV_T at a time (no
 * workspace, so a captured graph may hold it), the F16/BF16 copy above. */
static void matmul_f8(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                      const struct bweight *w) {
    if (w->cols % 32)
        FATAL("cuda_matmul_q: %d columns of %s are not whole blocks", w->cols, dtype_name(w->type));
    const unsigned blocks = (unsigned)((w->rows + MMV_WARPS - 1) / MMV_WARPS);
    const int64_t rb = dtype_row_bytes(w->type, w->cols);
    for (int t0 = 0; t0 < T; t0 += MMV_T) {
        const int nt = T - t0 < MMV_T ? T - t0 : MMV_T;
        mmv_f8_kernel<<<blocks, 32 * MMV_WARPS, 0, c->stream>>>(y + t0 * ldy, ldy, x + t0 * ldx,
                                                                ldx, (const uint8_t *)w->data, rb,
                                                                w->rows, w->cols, nt);
        CUDA_LAUNCH_CHECK(c->stream, "mmv_f8_kernel");
    }
}

/* INT4 weight-only (W4A16) GEMV for steps of up to NT <= MMV_T tokens: a warp a row, two
 * lanes a 24-byte I4_S32 block (lane half h: nibble bytes 8h..8h+7, i.e. elements 8h..8h+7
 * and 16+8h..16+8h+7), so a warp covers 16 blocks (512 columns) a pass, and the loads of
 * I4_U passes are issued before any is used, to keep bytes in flight. Each weight is the
 * CPU's value bit for bit (qd_i4_vals16, checked on the host by test_cuda_quant) and serves
 * every token of the step; f32 activations and accumulation, as the CPU backend. VEC: x
 * 16-byte aligned with ldx % 4 == 0, read 16 bytes at a time (columns 8h.. of a block are
 * 32-byte aligned). Rows are 24 * cols / 32 bytes, so blocks (and their f32 d, z) stay
 * 8-byte aligned from the 256-byte aligned matrix. */
enum { I4_U = 2 };

template <bool VEC> static __device__ __forceinline__ void load_x8(const float *p, float *v) {
    if (VEC) {
        const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
        v[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = p[k];
    }
}

template <int NT, bool VEC>
static __global__ void __launch_bounds__(32 * MMV_WARPS)
    mmv_i4_kernel(float *__restrict__ y, int64_t ldy, const float *__restrict__ x, int64_t ldx,
                  const uint8_t *__restrict__ W, int64_t rb, int rows, int cols, int T) {
    const int row = blockIdx.x * MMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    const uint8_t *w = W + (int64_t)row * rb;
    const int nb = cols / 32, h = lane & 1;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int b0 = lane >> 1; b0 < nb; b0 += 16 * I4_U) {
        float2 dz[I4_U];
        uint2 q[I4_U];
#pragma unroll
        for (int u = 0; u < I4_U; u++) {
            dz[u] = make_float2(0.0f, 0.0f);
            q[u] = make_uint2(0u, 0u);
            if (b0 + 16 * u < nb) {
                const uint8_t *blk = w + 24 * (int64_t)(b0 + 16 * u);
                dz[u] = *(const float2 *)blk;             /* d, z */
                q[u] = *(const uint2 *)(blk + 8 + 8 * h); /* nibble bytes 8h..8h+7 */
            }
        }
#pragma unroll
        for (int u = 0; u < I4_U; u++) {
            const int b = b0 + 16 * u;
            if (b >= nb) break;
            float v[16];
            qd_i4_vals16(q[u].x, q[u].y, dz[u].x, dz[u].y, v);
            const int col = 32 * b + 8 * h;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= T) break;
                const float *xt = x + t * ldx + col;
                float xs[16];
                load_x8<VEC>(xt, xs);
                load_x8<VEC>(xt + 16, xs + 8);
                float s = acc[t];
#pragma unroll
                for (int k = 0; k < 16; k++) s += v[k] * xs[k];
                acc[t] = s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= T) break;
        const float s = warp_sum(acc[t]);
        if (lane == 0) y[t * ldy + row] = s;
    }
}

template <int NT>
static void launch_mmv_i4(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx,
                          int T, const struct bweight *w, int vec) {
    const unsigned blocks = (unsigned)((w->rows + MMV_WARPS - 1) / MMV_WARPS);
    const int64_t rb = dtype_row_bytes(w->type, w->cols);
    const uint8_t *W = (const uint8_t *)w->data;
    if (vec)
        mmv_i4_kernel<NT, true>
            <<<blocks, 32 * MMV_WARPS, 0, c->stream>>>(y, ldy, x, ldx, W, rb, w->rows, w->cols, T);
    else
        mmv_i4_kernel<NT, false>
            <<<blocks, 32 * MMV_WARPS, 0, c->stream>>>(y, ldy, x, ldx, W, rb, w->rows, w->cols, T);
    CUDA_LAUNCH_CHECK(c->stream, "mmv_i4_kernel");
}

/* INT4 checkpoints' weights (DT_I4_S32): the GEMV up to 16 tokens, MMV_T at a time (no
 * workspace, so a captured graph may hold it; one accumulator at batch 1), the F16 copy
 * above. */
static void matmul_i4(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                      const struct bweight *w) {
    if (w->cols % 32)
        FATAL("cuda_matmul_q: %d columns of %s are not whole blocks", w->cols, dtype_name(w->type));
    const int vec = ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
    if (T == 1) {
        launch_mmv_i4<1>(c, y, ldy, x, ldx, 1, w, vec);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += MMV_T) {
        const int nt = T - t0 < MMV_T ? T - t0 : MMV_T;
        launch_mmv_i4<MMV_T>(c, y + t0 * ldy, ldy, x + t0 * ldx, ldx, nt, w, vec);
    }
}

void cuda_matmul_q(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                   const struct bweight *w) {
    if (w->type == DT_F8_E4M3_S32 && !dequant_wins(w, T)) {
        matmul_f8(c, y, ldy, x, ldx, T, w);
        return;
    }
    if (w->type == DT_I4_S32 && !dequant_wins(w, T)) {
        matmul_i4(c, y, ldy, x, ldx, T, w);
        return;
    }
    if (dequant_wins(w, T)) {
        /* row-scaled FP8 weights on FP8 tensor cores: W8A8 (matmul_w8a8.cu), else the copy */
        if (w->type == DT_F8_E4M3_S32 && !cuda_matmul_w8a8(c, y, ldy, x, ldx, T, w)) return;
        matmul_dequant(c, y, ldy, x, ldx, T, w);
        return;
    }
    const int cols = w->cols;
    const int kblock = (w->type == DT_Q4_K || w->type == DT_Q6_K) ? 256 : 32;
    if (cols % kblock)
        FATAL("cuda_matmul_q: %d columns of %s are not whole blocks", cols, dtype_name(w->type));
    const int nb = cols / kblock;
    const int sstride = w->type == DT_Q4_1 ? 2 * nb : nb;
    /* quants first (16-byte aligned), then the scales */
    const size_t qbytes = ((size_t)T * (size_t)cols + 255) & ~(size_t)255;
    char *ws = (char *)cuda_ws(c, qbytes + sizeof(float) * (size_t)T * (size_t)sstride);
    int8_t *aq = (int8_t *)ws;
    float *ad = (float *)(ws + qbytes);
    if (kblock == 256) {
        const int64_t n = (int64_t)T * nb;
        quant_q8_K_kernel<<<(unsigned)(n > 65535 ? 65535 : n), 256, 0, c->stream>>>(x, ldx, cols, T,
                                                                                    aq, ad);
        CUDA_LAUNCH_CHECK(c->stream, "quant_q8_K_kernel");
    } else {
        const int64_t warps = (int64_t)T * nb;
        const unsigned blocks = cuda_blocks(warps < 65535 * 8 ? warps : 65535 * 8, 8);
        if (w->type == DT_Q4_1)
            quant_q8_32_kernel<true><<<blocks, 256, 0, c->stream>>>(x, ldx, cols, T, aq, ad);
        else quant_q8_32_kernel<false><<<blocks, 256, 0, c->stream>>>(x, ldx, cols, T, aq, ad);
        CUDA_LAUNCH_CHECK(c->stream, "quant_q8_32_kernel");
    }
    switch (w->type) {
    case DT_Q4_0: launch_mmv_q<DT_Q4_0>(c, y, ldy, w, aq, ad, sstride, T); break;
    case DT_Q4_1: launch_mmv_q<DT_Q4_1>(c, y, ldy, w, aq, ad, sstride, T); break;
    case DT_Q8_0: launch_mmv_q<DT_Q8_0>(c, y, ldy, w, aq, ad, sstride, T); break;
    case DT_Q4_K: launch_mmv_q<DT_Q4_K>(c, y, ldy, w, aq, ad, sstride, T); break;
    case DT_Q6_K: launch_mmv_q<DT_Q6_K>(c, y, ldy, w, aq, ad, sstride, T); break;
    default: FATAL("cuda_matmul_q: weight type %s is not quantized", dtype_name(w->type));
    }
}
