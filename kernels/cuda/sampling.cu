/* Logits helpers for sampling on the device: argmax and top-k per row, so that a step need
 * not copy the whole vocabulary to the host. One block per row. Order: larger value first,
 * equal values by lower index (the order a stable host sort gives). NaNs are never picked. */
#include "ops.cuh"

enum { SAMPLE_THREADS = 256, TOPK_MAX = 64 };

/* a comes before b */
static __device__ __forceinline__ bool before(float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
}

/* The first element of the row (in the order above) that comes after (pv, pi); pi < 0
 * means no bound. Every thread gets the answer; idx -1 when none is left. */
static __device__ void row_next(const float *row, int n, float pv, int pi, float *ov, int *oi) {
    __shared__ float s_v[SAMPLE_THREADS / 32];
    __shared__ int s_i[SAMPLE_THREADS / 32];
    float bv = -INFINITY;
    int bi = -1;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float v = row[j];
        if (v != v) continue; /* NaN */
        if (pi >= 0 && !before(pv, pi, v, j)) continue;
        if (bi < 0 || before(v, j, bv, bi)) {
            bv = v;
            bi = j;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, o);
        const int i = __shfl_xor_sync(0xffffffffu, bi, o);
        if (i >= 0 && (bi < 0 || before(v, i, bv, bi))) {
            bv = v;
            bi = i;
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* s_v / s_i may still be read by a previous call */
    if (lane == 0) {
        s_v[warp] = bv;
        s_i[warp] = bi;
    }
    __syncthreads();
    bv = -INFINITY;
    bi = -1;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        if (s_i[w] >= 0 && (bi < 0 || before(s_v[w], s_i[w], bv, bi))) {
            bv = s_v[w];
            bi = s_i[w];
        }
    *ov = bv;
    *oi = bi;
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) topk_kernel(const float *__restrict__ logits, int n, int k,
                                                                      int32_t *idx, float *val) {
    const float *row = logits + (int64_t)blockIdx.x * n;
    float pv = 0.0f, v = 0.0f;
    int pi = -1, i = -1;
    bool done = false; /* the same on every thread: row_next's answer is block-wide */
    for (int r = 0; r < k; r++) {
        if (!done) row_next(row, n, pv, pi, &v, &i);
        if (i < 0) done = true; /* fewer than k non-NaN values: the rest are -1 */
        if (threadIdx.x == 0) {
            idx[(int64_t)blockIdx.x * k + r] = done ? -1 : i;
            if (val) val[(int64_t)blockIdx.x * k + r] = done ? -INFINITY : v;
        }
        pv = v;
        pi = i;
    }
}

void cuda_topk(struct cuda_ctx *c, const float *logits, int n_rows, int n, int k, int32_t *idx, float *val) {
    if (n_rows == 0) return;
    if (k < 1 || k > TOPK_MAX) FATAL("cuda_topk: k = %d (1..%d)", k, TOPK_MAX);
    topk_kernel<<<n_rows, SAMPLE_THREADS, 0, c->stream>>>(logits, n, k, idx, val);
    CUDA_LAUNCH_CHECK(c->stream, "topk_kernel");
}

void cuda_argmax(struct cuda_ctx *c, const float *logits, int n_rows, int n, int32_t *idx) {
    cuda_topk(c, logits, n_rows, n, 1, idx, NULL);
}
