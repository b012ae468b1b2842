/* The GEMM sweep: every way the CUDA backend can do a 16-bit weight product (the mmv kernels
 * up to 8 tokens, cublasGemmEx, cuBLASLt's heuristic candidates 0..7) timed on this GPU for
 * each weight shape of a model and tokens per step, each checked against cublasGemmEx's
 * result; the fastest per (shape, T) written as the GEMM tuning table (kernels/gemm_table.h)
 * that the backend reads when it opens.
 *
 *   bench_gpu_gemm [--model llama3-8b] [--tp 1] [--tokens 1,2,...] [--table FILE]
 *
 * Times: CUDA events around `reps` launches, the weight rotated over copies that together
 * are several times the L2 cache, so every launch streams its weight from memory; the median
 * of 5 such runs. Prints per shape and T a "BENCH gemm" line: the best pick, its time, the
 * weight bytes over that time as a share of the streaming-read floor measured here (a kernel
 * reading 4 GiB), and the speedup over cublasGemmEx and over the default pick (mmv up to 8
 * tokens, else Lt's first candidate). With --table, the table lines (C string literals, as
 * kernels/cuda/gemm_table.inc holds them). Exit 1 if any candidate's result is off by more
 * than 1e-3 of the reference's largest value. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/ops.cuh"

extern "C" {
#include "kernels/backend.h"
#include "util/err.h"
}

enum { MAX_T = 32, RUNS = 5, N_PICKS = 2 + GEMM_LT_RANKS };

struct shape {
    const char *name;
    int rows, cols;
};

static __global__ void fill_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed, float scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2bfloat16(((float)(h & 0xffffff) / 16777216.0f - 0.5f) * scale);
    }
}

static __global__ void fill_f32(float *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2246822519u ^ seed;
        h ^= h >> 16, h *= 2654435761u, h ^= h >> 13;
        p[i] = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    }
}

static __global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned *sink) {
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint4 a = p[i];
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Streaming-read floor, GB/s: 4 GiB read with 16-byte loads, median of 5. */
static double read_floor(struct cuda_ctx *c) {
    const size_t bytes = (size_t)4 << 30;
    void *buf;
    unsigned *sink;
    CUDA_CHECK(cudaMalloc(&buf, bytes));
    CUDA_CHECK(cudaMalloc(&sink, sizeof *sink));
    CUDA_CHECK(cudaMemsetAsync(buf, 1, bytes, c->stream));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float ms[RUNS];
    for (int r = 0; r < RUNS; r++) {
        CUDA_CHECK(cudaEventRecord(e0, c->stream));
        read_kernel<<<c->n_sm * 8, 512, 0, c->stream>>>((const uint4 *)buf, bytes / 16, sink);
        CUDA_CHECK(cudaEventRecord(e1, c->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, RUNS, sizeof *ms, cmp_f);
    CUDA_CHECK(cudaFree(buf));
    CUDA_CHECK(cudaFree(sink));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return (double)bytes / (ms[RUNS / 2] * 1e-3) / 1e9;
}

/* The pick of index i: 0 mmv, 1 ex, 2.. lt0.. */
static struct gemm_pick pick_of(int i) {
    if (i == 0) return (struct gemm_pick){GEMM_MMV, 0};
    if (i == 1) return (struct gemm_pick){GEMM_EX, 0};
    return (struct gemm_pick){GEMM_LT, i - 2};
}

static int parse_list(const char *s, int *v, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > 65536) return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *model = "llama3-8b", *table_path = NULL;
    int tp = 1,
        tokens[MAX_T] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048},
        n_tok = 18;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--tp")) tp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--table")) table_path = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) {
            if ((n_tok = parse_list(argv[i + 1], tokens, MAX_T)) < 1) goto usage;
        } else goto usage;
    }
    if (argc % 2 == 0 || tp < 1 || tp > 8) goto usage;
    {
        int hid, q_dim, kv_dim, ffn, vocab;
        if (!strcmp(model, "llama3-8b"))
            hid = 4096, q_dim = 4096, kv_dim = 1024, ffn = 14336, vocab = 128256;
        else if (!strcmp(model, "llama3-70b"))
            hid = 8192, q_dim = 8192, kv_dim = 1024, ffn = 28672, vocab = 128256;
        else goto usage;
        /* the shards rank 0 holds: QKV and gate+up column shards, O and down row shards, LM
         * head rows of the vocabulary */
        const struct shape shapes[] = {
            {"qkv", (q_dim + 2 * kv_dim) / tp, hid},
            {"o", hid, q_dim / tp},
            {"gate_up", 2 * ffn / tp, hid},
            {"down", hid, ffn / tp},
            {"lm_head", vocab / tp, hid},
        };
        struct backend be;
        char err[512];
        if (backend_open(&be, "cuda", 0, 0, NULL, err)) {
            fprintf(stderr, "bench_gpu_gemm: %s\n", err);
            return 77;
        }
        struct cuda_ctx *c = (struct cuda_ctx *)be.ctx;
        const double floor_gbps = read_floor(c);
        printf("BENCH gemm_floor gpu=\"%s\" cublaslt=%ld stream_read_GBps=%.1f\n", c->gpu_name,
               cuda_lt_version(c), floor_gbps);
        FILE *tf = NULL;
        if (table_path && !(tf = fopen(table_path, "w"))) {
            perror(table_path);
            return 1;
        }
        if (tf)
            fprintf(tf,
                    "/* The GEMM tuning table (kernels/gemm_table.h says the format), as C string "
                    "literals:\n"
                    " * written by `bench_gpu_gemm --table` (tests/gpu/run's perf step) on the GPU "
                    "named in\n"
                    " * each line, and committed. A GPU or cuBLASLt version without lines here "
                    "takes the\n"
                    " * default picks. Times in us: mmv ex lt0..lt7 (- where there is none). */\n");
        int bad = 0;
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            const struct shape sh = shapes[s];
            const size_t wbytes = (size_t)sh.rows * sh.cols * 2;
            int copies = (int)((512ull << 20) / wbytes) + 1;
            if (copies > 16) copies = 16;
            struct bweight w[16];
            for (int k = 0; k < copies; k++) {
                w[k] = (struct bweight){NULL, DT_BF16, sh.rows, sh.cols, 0};
                CUDA_CHECK(cudaMalloc(&w[k].data, wbytes));
                fill_bf16<<<c->n_sm * 4, 256, 0, c->stream>>>(
                    (__nv_bfloat16 *)w[k].data, wbytes / 2, 17u + (unsigned)k, 0.0625f);
                CUDA_LAUNCH_CHECK(c->stream, "fill_bf16");
            }
            const int t_most = tokens[n_tok - 1] > 8 ? tokens[n_tok - 1] : 8;
            float *x, *y, *yref;
            CUDA_CHECK(cudaMalloc(&x, (size_t)t_most * sh.cols * 4));
            CUDA_CHECK(cudaMalloc(&y, (size_t)t_most * sh.rows * 4));
            CUDA_CHECK(cudaMalloc(&yref, (size_t)t_most * sh.rows * 4));
            fill_f32<<<c->n_sm * 4, 256, 0, c->stream>>>(x, (size_t)t_most * sh.cols, 99u);
            CUDA_LAUNCH_CHECK(c->stream, "fill_f32");
            const size_t y_bytes = (size_t)t_most * sh.rows * 4;
            float *href = (float *)malloc(y_bytes), *hy = (float *)malloc(y_bytes);
            if (!href || !hy) FATAL("bench_gpu_gemm: out of host memory");
            for (int ti = 0; ti < n_tok; ti++) {
                const int T = tokens[ti];
                /* LM head products are of the rows whose logits a step wants: a batch's worth */
                if (!strcmp(sh.name, "lm_head") && T > 256) continue;
                const size_t ny = (size_t)T * sh.rows;
                cuda_matmul_as(c, yref, sh.rows, x, sh.cols, T, &w[0], pick_of(1));
                CUDA_CHECK(cudaMemcpyAsync(href, yref, ny * 4, cudaMemcpyDeviceToHost, c->stream));
                CUDA_CHECK(cudaStreamSynchronize(c->stream));
                double ref_max = 0;
                for (size_t i = 0; i < ny; i++)
                    ref_max = fabs(href[i]) > ref_max ? fabs(href[i]) : ref_max;
                /* which picks exist here: mmv up to 8 tokens, each Lt candidate the heuristic has
                 */
                const int n_lt = cuda_lt_candidates(c, y, sh.rows,
                                                    cuda_ws(c, (size_t)T * sh.cols * 2), T, &w[0]);
                float us[N_PICKS];
                for (int p = 0; p < N_PICKS; p++) {
                    us[p] = -1;
                    if ((p == 0 && T > GEMM_MMV_MAX_T) || (p >= 2 && p - 2 >= n_lt)) continue;
                    const struct gemm_pick pk = pick_of(p);
                    CUDA_CHECK(cudaMemsetAsync(y, 0xff, ny * 4,
                                               c->stream)); /* NaN: every element must be written */
                    cuda_matmul_as(c, y, sh.rows, x, sh.cols, T, &w[0], pk);
                    CUDA_CHECK(cudaMemcpyAsync(hy, y, ny * 4, cudaMemcpyDeviceToHost, c->stream));
                    CUDA_CHECK(cudaStreamSynchronize(c->stream));
                    double worst = 0;
                    for (size_t i = 0; i < ny; i++) {
                        const double d = fabs((double)hy[i] - href[i]);
                        if (!(d <= worst)) worst = d; /* NaN too */
                    }
                    char nb[16];
                    if (!(worst <= 1e-3 * ref_max)) {
                        printf("FAIL gemm %s T=%d pick=%s: largest difference %.3g vs largest "
                               "value %.3g\n",
                               sh.name, T, gemm_pick_name(pk, nb, sizeof nb), worst, ref_max);
                        bad = 1;
                        continue;
                    }
                    /* reps: about 5 ms of work a run (one launch timed after the check's
                     * warmed the path up), at least 2 launches */
                    float ms[RUNS], one;
                    CUDA_CHECK(cudaEventRecord(e0, c->stream));
                    cuda_matmul_as(c, y, sh.rows, x, sh.cols, T, &w[1 % copies], pk);
                    CUDA_CHECK(cudaEventRecord(e1, c->stream));
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    CUDA_CHECK(cudaEventElapsedTime(&one, e0, e1));
                    const int want = (int)(5.0f / (one > 1e-3f ? one : 1e-3f));
                    const int reps = want < 2 ? 2 : want > 200 ? 200 : want;
                    for (int r = 0; r < RUNS; r++) {
                        CUDA_CHECK(cudaEventRecord(e0, c->stream));
                        for (int k = 0; k < reps; k++)
                            cuda_matmul_as(c, y, sh.rows, x, sh.cols, T, &w[k % copies], pk);
                        CUDA_CHECK(cudaEventRecord(e1, c->stream));
                        CUDA_CHECK(cudaEventSynchronize(e1));
                        CUDA_CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
                        ms[r] /= (float)reps;
                    }
                    qsort(ms, RUNS, sizeof *ms, cmp_f);
                    us[p] = ms[RUNS / 2] * 1000.0f;
                }
                int best = -1;
                for (int p = 0; p < N_PICKS; p++)
                    if (us[p] > 0 && (best < 0 || us[p] < us[best])) best = p;
                if (best < 0) continue;
                const int dflt = T <= GEMM_MMV_MAX_T ? 0 : 2;
                char nb[16];
                const double gbps = (double)wbytes / (us[best] * 1e-6) / 1e9;
                printf("BENCH gemm shape=%s rows=%d cols=%d T=%d best=%s us=%.2f weight_GBps=%.1f "
                       "of_floor=%.2f "
                       "vs_ex=%.2f vs_default=%.2f\n",
                       sh.name, sh.rows, sh.cols, T, gemm_pick_name(pick_of(best), nb, sizeof nb),
                       us[best], gbps, gbps / floor_gbps, us[1] > 0 ? us[1] / us[best] : 0.0,
                       us[dflt] > 0 ? us[dflt] / us[best] : 0.0);
                if (tf) {
                    fprintf(tf, "\"%s\\t%ld\\tbf16\\t%d\\t%d\\t%d\\t%s\\t", c->gpu_name,
                            cuda_lt_version(c), sh.rows, sh.cols, T,
                            gemm_pick_name(pick_of(best), nb, sizeof nb));
                    for (int p = 0; p < N_PICKS; p++) {
                        if (us[p] > 0) fprintf(tf, "%s%.1f", p ? " " : "", us[p]);
                        else fprintf(tf, "%s-", p ? " " : "");
                    }
                    fprintf(tf, "\\n\"\n");
                }
            }
            free(href);
            free(hy);
            CUDA_CHECK(cudaFree(x));
            CUDA_CHECK(cudaFree(y));
            CUDA_CHECK(cudaFree(yref));
            for (int k = 0; k < copies; k++) CUDA_CHECK(cudaFree(w[k].data));
        }
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        if (tf && fclose(tf)) {
            perror(table_path);
            return 1;
        }
        backend_close(&be);
        return bad;
    }
usage:
    fprintf(stderr,
            "usage: bench_gpu_gemm [--model llama3-8b|llama3-70b] [--tp N] [--tokens 1,2,...] "
            "[--table FILE]\n");
    return 2;
}
