/* The row-wise and element-wise ops of the forward pass: embedding lookup, RMSNorm (whole
 * rows and per head), biases, rotary embedding, the paged KV-cache write, SiLU-gate, row
 * gather and residual add. Each matches kernels/cpu/backend_cpu.c operation for operation. */
#include "ops.cuh"
#include "fp8_dev.cuh"
#include "quant_dev.cuh"

/* ---- embedding: one block per token ---- */

static __global__ void embed_kernel(float *__restrict__ x, const int32_t *__restrict__ tok,
                                    const uint8_t *table, int type, int64_t row_bytes, int rows,
                                    int cols, int row0) {
    const int t = blockIdx.x;
    const int r = tok[t] - row0;
    float *dst = x + (int64_t)t * cols;
    if (r < 0 || r >= rows) {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = 0.0f;
        return;
    }
    const uint8_t *row = table + (int64_t)r * row_bytes;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) dst[i] = qd_dequant(type, row, i);
}

void cuda_embed(struct cuda_ctx *c, float *x, const int32_t *tok, int T,
                const struct bweight *table, int row0) {
    if (T == 0) return;
    const int64_t rb = dtype_row_bytes(table->type, table->cols);
    if (rb < 0) FATAL("cuda_embed: %d columns of %s", table->cols, dtype_name(table->type));
    embed_kernel<<<T, 256, 0, c->stream>>>(x, tok, (const uint8_t *)table->data, (int)table->type,
                                           rb, table->rows, table->cols, row0);
    CUDA_LAUNCH_CHECK(c->stream, "embed_kernel");
}

/* ---- RMSNorm: one block per row of n at x + blockIdx.x * ld + blockIdx.y * n (per-head
 * norms use blockIdx.y for the head); y may equal x ---- */

static __global__ void rmsnorm_kernel(float *y, const float *x, const float *__restrict__ w, int n,
                                      int64_t ld, float eps) {
    __shared__ float red[32];
    const int64_t base = (int64_t)blockIdx.x * ld + (int64_t)blockIdx.y * n;
    const float *xr = x + base;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    float *yr = y + base;
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

/* The residual add and the next RMSNorm: one block per row; each thread adds its own
 * elements, keeps them for the sum of squares, and reads back only what it wrote. */
static __global__ void add_rmsnorm_kernel(float *x, const float *__restrict__ y,
                                          float *__restrict__ yn, const float *__restrict__ w,
                                          int n, float eps) {
    __shared__ float red[32];
    const int64_t base = (int64_t)blockIdx.x * n;
    float *xr = x + base;
    const float *yr = y + base;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i] + yr[i];
        xr[i] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    float *o = yn + base;
    for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * scale * w[i];
}

static int norm_threads(int n) {
    int t = 32;
    while (t < n && t < 1024) t *= 2;
    return t;
}

void cuda_rmsnorm(struct cuda_ctx *c, float *y, const float *x, const float *w, int T, int n,
                  float eps) {
    if (T == 0) return;
    rmsnorm_kernel<<<dim3(T, 1), norm_threads(n), 0, c->stream>>>(y, x, w, n, n, eps);
    CUDA_LAUNCH_CHECK(c->stream, "rmsnorm_kernel");
}

void cuda_add_rmsnorm(struct cuda_ctx *c, float *x, const float *y, float *y_norm, const float *w,
                      int T, int n, float eps) {
    if (T == 0) return;
    add_rmsnorm_kernel<<<T, norm_threads(n), 0, c->stream>>>(x, y, y_norm, w, n, eps);
    CUDA_LAUNCH_CHECK(c->stream, "add_rmsnorm_kernel");
}

void cuda_head_rmsnorm(struct cuda_ctx *c, float *x, int64_t ld, int T, int n_heads, int hd,
                       const float *w, float eps) {
    if (T == 0 || n_heads == 0) return;
    rmsnorm_kernel<<<dim3(T, n_heads), norm_threads(hd), 0, c->stream>>>(x, x, w, hd, ld, eps);
    CUDA_LAUNCH_CHECK(c->stream, "rmsnorm_kernel (per head)");
}

/* ---- bias: x[t][i] += b[i] ---- */

static __global__ void add_bias_kernel(float *x, int64_t ld, int T, int n,
                                       const float *__restrict__ b) {
    const int64_t total = (int64_t)T * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        x[(i / n) * ld + i % n] += b[i % n];
}

static unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

void cuda_add_bias(struct cuda_ctx *c, float *x, int64_t ld, int T, int n, const float *b) {
    if ((int64_t)T * n == 0) return;
    add_bias_kernel<<<grid_for((int64_t)T * n), 256, 0, c->stream>>>(x, ld, T, n, b);
    CUDA_LAUNCH_CHECK(c->stream, "add_bias_kernel");
}

/* ---- rotary embedding: one block per token, a thread per (head, pair) ---- */

static __global__ void rope_kernel(float *x, int64_t ld, int n_heads, int hd,
                                   const int32_t *__restrict__ pos,
                                   const float *__restrict__ inv_freq, int neox) {
    const int t = blockIdx.x, half = hd / 2;
    const float p = (float)pos[t];
    for (int j = threadIdx.x; j < n_heads * half; j += blockDim.x) {
        const int h = j / half, i = j % half;
        const float ang = p * inv_freq[i];
        const float cs = cosf(ang), sn = sinf(ang);
        float *v = x + t * ld + (int64_t)h * hd;
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * cs - x1 * sn;
        v[b] = x0 * sn + x1 * cs;
    }
}

void cuda_rope(struct cuda_ctx *c, float *x, int64_t ld, int T, int n_heads, int hd,
               const int32_t *pos, const float *inv_freq, int neox) {
    if (T == 0 || n_heads == 0) return;
    const int work = n_heads * (hd / 2);
    const int threads = work < 256 ? 32 * ((work + 31) / 32) : 256;
    rope_kernel<<<T, threads, 0, c->stream>>>(x, ld, n_heads, hd, pos, inv_freq, neox);
    CUDA_LAUNCH_CHECK(c->stream, "rope_kernel");
}

/* ---- KV cache write: one block per token ---- */

template <typename KT> static __device__ __forceinline__ void store_kv(KT *p, float v);
template <> __device__ __forceinline__ void store_kv<float>(float *p, float v) { *p = v; }
template <> __device__ __forceinline__ void store_kv<__half>(__half *p, float v) {
    *p = __float2half_rn(v);
}

template <typename KT>
static __global__ void
kv_store_kernel(KT *kc, KT *vc, const float *__restrict__ k, const float *__restrict__ v,
                int64_t ld, int n_kv, int hd, const int32_t *__restrict__ seq_of,
                const int32_t *__restrict__ pos, const int32_t *__restrict__ block_off,
                const int32_t *__restrict__ blocks, int bs) {
    const int t = blockIdx.x, p = pos[t];
    const int blk = blocks[block_off[seq_of[t]] + p / bs];
    const int64_t at = ((int64_t)blk * bs + p % bs) * n_kv * hd;
    const int n = n_kv * hd;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        store_kv<KT>(kc + at + i, k[t * ld + i]);
        store_kv<KT>(vc + at + i, v[t * ld + i]);
    }
}

/* FP8: one warp per (token, KV head) row, grid (tokens, n_kv): the row's largest magnitude
 * gives its power-of-two scale 2^e (util/fp8.h), e goes beside the block in kexp/vexp and
 * the codes of x / 2^e into the cache. Each row is written whole by one warp, so a block
 * filled token by token needs no rescaling of the rows already there. */
static __global__ void kv_store_fp8_kernel(uint8_t *kc, uint8_t *vc, int8_t *kexp, int8_t *vexp,
                                           __half *ksink, __half *vsink, int sink_blocks,
                                           int sink_rows, const float *__restrict__ k,
                                           const float *__restrict__ v, int64_t ld, int n_kv,
                                           int hd, const int32_t *__restrict__ seq_of,
                                           const int32_t *__restrict__ pos,
                                           const int32_t *__restrict__ block_off,
                                           const int32_t *__restrict__ blocks, int bs) {
    const int t = blockIdx.x, h = blockIdx.y, p = pos[t], lane = threadIdx.x;
    const int blk = blocks[block_off[seq_of[t]] + p / bs];
    const int64_t row = ((int64_t)blk * bs + p % bs) * n_kv + h, at = row * hd;
    const float *ks = k + t * ld + (int64_t)h * hd, *vs = v + t * ld + (int64_t)h * hd;
    float km = 0.0f, vm = 0.0f;
    for (int i = lane; i < hd; i += 32) {
        km = fmaxf(km, fabsf(ks[i])); /* fmaxf drops NaNs, as the host's compare does */
        vm = fmaxf(vm, fabsf(vs[i]));
    }
    const int ke = fp8_row_exp(warp_max(km)), ve = fp8_row_exp(warp_max(vm));
    const float kinv = fp8_exp2(-ke), vinv = fp8_exp2(-ve);
    for (int i = lane; i < hd; i += 32) {
        kc[at + i] = fp8_dev_encode(ks[i] * kinv);
        vc[at + i] = fp8_dev_encode(vs[i] * vinv);
    }
    if (lane == 0) {
        kexp[row] = (int8_t)ke;
        vexp[row] = (int8_t)ve;
    }
    if (blk < sink_blocks &&
        p % bs < sink_rows) { /* the sink (kernels/backend.h): F16 of x / 2^e too */
        const int64_t sa = (((int64_t)blk * sink_rows + p % bs) * n_kv + h) * hd;
        for (int i = lane; i < hd; i += 32) {
            ksink[sa + i] = __float2half_rn(ks[i] * kinv);
            vsink[sa + i] = __float2half_rn(vs[i] * vinv);
        }
    }
}

void cuda_kv_store(struct cuda_ctx *c, struct kv_layer *kv, enum dtype kv_type, const float *k,
                   const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b) {
    if (b->n_tokens == 0 || n_kv == 0) return;
    const int n = n_kv * hd, threads = n < 256 ? 32 * ((n + 31) / 32) : 256;
    if (kv_type == DT_F8_E4M3)
        kv_store_fp8_kernel<<<dim3(b->n_tokens, n_kv), 32, 0, c->stream>>>(
            (uint8_t *)kv->k, (uint8_t *)kv->v, kv->k_exp, kv->v_exp, (__half *)kv->k_sink,
            (__half *)kv->v_sink, kv->sink_blocks, kv->sink_rows, k, v, ld, n_kv, hd, b->seq_of,
            b->pos, b->block_off, b->blocks, b->block_size);
    else if (kv_type == DT_F32)
        kv_store_kernel<float><<<b->n_tokens, threads, 0, c->stream>>>(
            (float *)kv->k, (float *)kv->v, k, v, ld, n_kv, hd, b->seq_of, b->pos, b->block_off,
            b->blocks, b->block_size);
    else if (kv_type == DT_F16)
        kv_store_kernel<__half><<<b->n_tokens, threads, 0, c->stream>>>(
            (__half *)kv->k, (__half *)kv->v, k, v, ld, n_kv, hd, b->seq_of, b->pos, b->block_off,
            b->blocks, b->block_size);
    else
        FATAL("cuda_kv_store: KV cache type %s (F32, F16 or F8_E4M3 expected)",
              dtype_name(kv_type));
    CUDA_LAUNCH_CHECK(c->stream, "kv_store_kernel");
}

/* ---- SwiGLU: out = silu(g) * u ---- */

static __global__ void silu_mul_kernel(float *out, int64_t ldo, const float *g, const float *u,
                                       int64_t ld, int T, int n) {
    const int64_t total = (int64_t)T * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / n, j = i % n;
        const float x = g[t * ld + j];
        out[t * ldo + j] = x / (1.0f + expf(-x)) * u[t * ld + j];
    }
}

void cuda_silu_mul(struct cuda_ctx *c, float *out, int64_t ldo, const float *g, const float *u,
                   int64_t ld, int T, int n) {
    if ((int64_t)T * n == 0) return;
    silu_mul_kernel<<<grid_for((int64_t)T * n), 256, 0, c->stream>>>(out, ldo, g, u, ld, T, n);
    CUDA_LAUNCH_CHECK(c->stream, "silu_mul_kernel");
}

/* ---- dst[i] = src[idx[i]], rows of n ---- */

static __global__ void gather_rows_kernel(float *dst, const float *src,
                                          const int32_t *__restrict__ idx, int n) {
    const int r = blockIdx.x;
    const float *s = src + (int64_t)idx[r] * n;
    float *d = dst + (int64_t)r * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

void cuda_gather_rows(struct cuda_ctx *c, float *dst, const float *src, const int32_t *idx,
                      int n_rows, int n) {
    if (n_rows == 0 || n == 0) return;
    gather_rows_kernel<<<n_rows, 256, 0, c->stream>>>(dst, src, idx, n);
    CUDA_LAUNCH_CHECK(c->stream, "gather_rows_kernel");
}

/* ---- y[t] = sum_j w[t][j] src[pos[t][j]] (parallel/moe.h) ---- */

static __global__ void moe_combine_kernel(float *y, int64_t ldy, const float *src, int64_t lds,
                                          const int32_t *__restrict__ pos,
                                          const float *__restrict__ w, int k, int n) {
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int32_t p = pos[(int64_t)t * k + j];
        if (p >= 0) acc += w[(int64_t)t * k + j] * src[(int64_t)p * lds + i];
    }
    y[(int64_t)t * ldy + i] = acc;
}

void cuda_moe_combine(struct cuda_ctx *c, float *y, int64_t ldy, const float *src, int64_t lds,
                      const int32_t *pos, const float *w, int T, int k, int n) {
    if (T == 0 || n == 0) return;
    dim3 grid((unsigned)((n + 255) / 256), (unsigned)T);
    moe_combine_kernel<<<grid, 256, 0, c->stream>>>(y, ldy, src, lds, pos, w, k, n);
    CUDA_LAUNCH_CHECK(c->stream, "moe_combine_kernel");
}

/* ---- x += y ---- */

static __global__ void add_kernel(float *x, const float *y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

void cuda_add(struct cuda_ctx *c, float *x, const float *y, size_t n) {
    if (n == 0) return;
    add_kernel<<<grid_for((int64_t)n), 256, 0, c->stream>>>(x, y, (int64_t)n);
    CUDA_LAUNCH_CHECK(c->stream, "add_kernel");
}
