/* FP8 W8A8 products for prefill-sized steps (more than 16 tokens, matmul_q.cu's
 * dequant_wins) of FP8 checkpoints' weights whose blocks share their row's scale
 * (bweight.row_scaled: per-tensor and per-channel checkpoints), on GPUs with FP8 tensor cores
 * (compute capability 8.9 and newer):
 *   1. the weight's E4M3 codes are gathered out of its 36-byte blocks into the workspace,
 *      rows x cols contiguous, with one f32 scale per row (1 byte a weight written, half of
 *      what the F16 copy writes);
 *   2. each token's activations are quantized to E4M3 with a scale per token
 *      (w8a8_dev.cuh: amax / 448, round to nearest even, saturating);
 *   3. cuBLASLt multiplies the two in FP8 with f32 accumulation and output, applying both
 *      scale vectors (gemm_lt.cu, outer-vector scaling); where it offers no f32 output for
 *      the shape, BF16 output into the workspace, widened into y by a small kernel (2^-9
 *      of |y| more).
 * Where cuBLASLt has no such product (no candidate for the shape, an older library, a GPU
 * without outer-vector FP8 scaling) the product goes through the F16/BF16 copy as before,
 * and the first such fallback is logged. 128x128-block checkpoints (scales that differ along
 * a row) always take the copy. The error against the CPU backend's W8A16 product is that of
 * the activations' E4M3 rounding: at most 2^-4 of sum |w x| plus 2^-10 s sum |w| (s the
 * token's scale), checked by tests/cuda/test_cuda_w8a8.cu. */
#include "ops.cuh"
#include "w8a8_dev.cuh"

extern "C" {
#include "../../util/log.h"
}

enum { W8A8_THREADS = 256 };

/* The weight's codes, contiguous (4 a thread), and each row's scale (its first block's):
 * rows along y, a row's words along x (no division per word) */
static __global__ void w8a8_weights_kernel(uint32_t *__restrict__ codes, float *__restrict__ scale,
                                           const uint8_t *__restrict__ W, int64_t rb, int rows,
                                           int cols) {
    const int wpr = cols / 4;
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint8_t *row = W + (int64_t)r * rb;
        uint32_t *out = codes + (int64_t)r * wpr;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < wpr; j += gridDim.x * blockDim.x)
            out[j] = *(const uint32_t *)(row + w8a8_word_off(j));
        if (blockIdx.x == 0 && threadIdx.x == 0) scale[r] = *(const float *)row;
    }
}

/* A block a token: the row's amax, then its codes (4 a thread) and its scale */
static __global__ void __launch_bounds__(W8A8_THREADS)
    w8a8_act_kernel(uint8_t *__restrict__ q, float *__restrict__ scale, const float *__restrict__ x,
                    int64_t ldx, int cols) {
    __shared__ float s_max[W8A8_THREADS / 32];
    const float *xt = x + (int64_t)blockIdx.x * ldx;
    float m = 0.0f;
    for (int k = threadIdx.x; k < cols; k += W8A8_THREADS) m = fmaxf(m, fabsf(xt[k]));
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) s_max[threadIdx.x >> 5] = m;
    __syncthreads();
    float amax = s_max[0];
#pragma unroll
    for (int i = 1; i < W8A8_THREADS / 32; i++) amax = fmaxf(amax, s_max[i]);
    const float inv = w8a8_inv_scale(amax);
    uint8_t *qt = q + (int64_t)blockIdx.x * cols;
    for (int k = 4 * threadIdx.x; k < cols; k += 4 * W8A8_THREADS) {
        uint32_t v = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) v |= (uint32_t)w8a8_code(xt[k + j], inv) << (8 * j);
        *(uint32_t *)(qt + k) = v;
    }
    if (threadIdx.x == 0) scale[blockIdx.x] = w8a8_scale(amax);
}

/* BF16 [T][rows] to y (T rows of ldy floats): tokens along y */
static __global__ void w8a8_widen_kernel(float *__restrict__ y, int64_t ldy,
                                         const __nv_bfloat16 *__restrict__ d, int rows, int T) {
    for (int t = blockIdx.y; t < T; t += gridDim.y)
        for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
            y[(int64_t)t * ldy + r] = __bfloat162float(d[(int64_t)t * rows + r]);
}

static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The workspace's parts: the weight codes, the activation codes, the row scales, the token
 * scales, then (BF16 output) the product; each 256-byte aligned */
struct w8a8_ws {
    size_t wb, xb, sb, tb;
};

static struct w8a8_ws w8a8_sizes(const struct bweight *w, int T) {
    return {round256((size_t)w->rows * (size_t)w->cols), round256((size_t)T * (size_t)w->cols),
            round256(4 * (size_t)w->rows), round256(4 * (size_t)T)};
}

/* f for the workspace at ws: output y (f32) or, bf16, the workspace's last part */
static struct lt_f8 w8a8_layout(char *ws, const struct w8a8_ws *z, const struct bweight *w, int T,
                                float *y, int64_t ldy, int bf16) {
    struct lt_f8 f = {ws,
                      ws + z->wb,
                      (const float *)(ws + z->wb + z->xb),
                      (const float *)(ws + z->wb + z->xb + z->sb),
                      w->rows,
                      w->cols,
                      T,
                      y,
                      ldy,
                      0};
    if (bf16) f.d = ws + z->wb + z->xb + z->sb + z->tb, f.ldd = w->rows, f.d_bf16 = 1;
    return f;
}

/* The first product cuBLASLt refuses, logged once per rank */
static void log_refusal(struct cuda_ctx *c, const struct bweight *w, int T) {
    if (c->w8a8_refused) return;
    c->w8a8_refused = 1;
    LOG(LOG_WARN,
        "cuda: cuBLASLt %ld has no FP8 product with per-row and per-token scales for a %dx%d "
        "weight at %d tokens on %s (compute capability %d.%d); FP8 prefill products it refuses "
        "use the F16/BF16 weight copy",
        cuda_lt_version(c), w->rows, w->cols, T, c->gpu_name, c->cc / 10, c->cc % 10);
}

/* The product's description: f32 output into y where cuBLASLt has a candidate for it, else
 * BF16 into the workspace; 0, or -1 when it has neither */
static int w8a8_plan(struct cuda_ctx *c, float *y, int64_t ldy, int T, const struct bweight *w,
                     struct lt_f8 *f) {
    const struct w8a8_ws z = w8a8_sizes(w, T);
    const size_t base = z.wb + z.xb + z.sb + z.tb;
    *f = w8a8_layout((char *)cuda_ws(c, base), &z, w, T, y, ldy, 0);
    if (cuda_lt_f8_candidates(c, f)) return 0;
    *f = w8a8_layout((char *)cuda_ws(c, base + 2 * (size_t)T * (size_t)w->rows), &z, w, T, y, ldy,
                     1);
    return cuda_lt_f8_candidates(c, f) ? 0 : -1;
}

int cuda_matmul_w8a8(struct cuda_ctx *c, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                     const struct bweight *w) {
    if (w->type != DT_F8_E4M3_S32 || !w->row_scaled || w->gather || c->cc < 89 || w->cols % 32 ||
        T < 1)
        return -1;
    struct lt_f8 f;
    if (w8a8_plan(c, y, ldy, T, w, &f)) {
        log_refusal(c, w, T);
        return -1;
    }
    const dim3 wgrid(cuda_blocks(w->cols / 4, W8A8_THREADS),
                     (unsigned)(w->rows < 65535 ? w->rows : 65535));
    w8a8_weights_kernel<<<wgrid, W8A8_THREADS, 0, c->stream>>>(
        (uint32_t *)f.w_codes, (float *)f.w_scale, (const uint8_t *)w->data,
        dtype_row_bytes(w->type, w->cols), w->rows, w->cols);
    CUDA_LAUNCH_CHECK(c->stream, "w8a8_weights_kernel");
    w8a8_act_kernel<<<(unsigned)T, W8A8_THREADS, 0, c->stream>>>(
        (uint8_t *)f.x_codes, (float *)f.x_scale, x, ldx, w->cols);
    CUDA_LAUNCH_CHECK(c->stream, "w8a8_act_kernel");
    if (cuda_lt_matmul_f8(c, &f)) {
        log_refusal(c, w, T);
        return -1;
    }
    if (f.d_bf16) {
        const dim3 grid(cuda_blocks(w->rows, W8A8_THREADS), (unsigned)(T < 65535 ? T : 65535));
        w8a8_widen_kernel<<<grid, W8A8_THREADS, 0, c->stream>>>(y, ldy, (const __nv_bfloat16 *)f.d,
                                                                w->rows, T);
        CUDA_LAUNCH_CHECK(c->stream, "w8a8_widen_kernel");
    }
    return 0;
}
