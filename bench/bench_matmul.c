/* Benchmark of cpu_matmul on the SmolLM2-135M shapes: GB/s of weight bytes streamed per call,
 * next to a streaming read of a 1 GB buffer measured in the same run, and, when the
 * environment variable TPD_GGML_CPU_LIB names llama.cpp's libggml-cpu.so, next to ggml's own
 * vec_dot kernels driven over the same rows and threads.
 *
 *   bench_matmul [--quick] [--threads 1,2] [--tokens 1,64] [--no-vnni] [--no-avx512]
 *   (--no-vnni: the AVX2 tiles where the CPU has AVX-VNNI; --no-avx512: the AVX-VNNI ones
 *   where it has AVX-512; to compare them)
 *   TPD_GGML_CPU_LIB=.venv/lib/python3.11/site-packages/llama_cpp/lib/libggml-cpu.so bench_matmul
 *
 * Weights are random valid blocks; each case cycles through enough copies (>= 256 MB) that
 * every call reads its weights from memory, not from cache. "step" is one whole SmolLM2
 * decode step: the 210 Q4_1 layer matrices (distinct buffers, 66 MB) and the Q8_0 head, one
 * call per matrix, then with q/k/v and gate/up fused through cpu_matmul_multi. */
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "util/threadpool.h"
#include "util/clock.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd_f(void) { return (float)(rnd_u32() & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f; }

static void *xalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Random weights with sane scales (random bytes for the quants). */
static void fill_weights(enum dtype t, uint8_t *w, int64_t bytes) {
    for (int64_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd_u32();
    const int bb = dtype_block_bytes(t);
    for (int64_t o = 0; o < bytes; o += bb) {
        uint8_t *p = w + o;
        uint16_t h[2] = {f32_to_f16(0.01f * (1.5f + rnd_f())), f32_to_f16(0.02f * rnd_f())};
        switch (t) {
        case DT_F32: {
            float f = rnd_f();
            memcpy(p, &f, 4);
            break;
        }
        case DT_F16:
            h[0] = f32_to_f16(rnd_f());
            memcpy(p, h, 2);
            break;
        case DT_BF16:
            h[0] = f32_to_bf16(rnd_f());
            memcpy(p, h, 2);
            break;
        case DT_Q4_0:
        case DT_Q8_0: memcpy(p, h, 2); break;
        case DT_Q4_1:
        case DT_Q4_K: memcpy(p, h, 4); break;
        case DT_Q6_K: memcpy(p + 208, h, 2); break;
        case DT_F8_E4M3_S32: {
            const float d = 0.002f * (1.5f + rnd_f());
            memcpy(p, &d, 4);
            for (int k = 4; k < 36; k++)
                if ((p[k] & 0x7f) == 0x7f) p[k] ^= 1; /* no NaN codes, as the loader */
            break;
        }
        case DT_I4_S32: {
            const float d = 0.002f * (1.5f + rnd_f()), z = (float)(rnd_u32() % 16);
            memcpy(p, &d, 4);
            memcpy(p + 4, &z, 4);
            break;
        }
        }
    }
}

/* ---- streaming read bandwidth ---- */

struct stream_ctx {
    const float *buf;
    size_t n;
    float sums[64];
};

__attribute__((target("avx2"))) static void stream_task(void *p, int ith, int nth) {
    struct stream_ctx *c = p;
    size_t a = c->n / (size_t)nth * (size_t)ith, b = c->n / (size_t)nth * (size_t)(ith + 1);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = a; i + 32 <= b; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(c->buf + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(c->buf + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(c->buf + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(c->buf + i + 24));
    }
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    c->sums[ith] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

/* Best of a few passes over 1 GB, in GB/s. */
static double stream_read_gbs(struct threadpool *tp, const float *buf, size_t bytes) {
    struct stream_ctx c = {.buf = buf, .n = bytes / sizeof(float)};
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = clock_now();
        threadpool_run(tp, stream_task, &c);
        double gbs = (double)bytes / (clock_now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    volatile float sink = c.sums[0];
    (void)sink;
    return best;
}

/* ---- ggml's kernels (optional) ---- */

typedef void (*ggml_from_float_fn)(const float *x, void *y, int64_t k);
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);
struct ggml_traits_cpu {
    ggml_from_float_fn from_float;
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
};
static const struct ggml_traits_cpu *(*ggml_traits)(int type);
static size_t (*ggml_row_size_fn)(int type, int64_t ne);

static int ggml_load(void) {
    const char *path = getenv("TPD_GGML_CPU_LIB");
    if (!path || !*path) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return 0;
    }
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    ggml_traits = (const struct ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    ggml_row_size_fn = (size_t(*)(int, int64_t))dlsym(h, "ggml_row_size");
    if (!init || !ggml_traits || !ggml_row_size_fn) {
        fprintf(stderr, "%s lacks the ggml CPU symbols\n", path);
        return 0;
    }
    init();
    return 1;
}

struct ggml_ctx {
    const struct ggml_traits_cpu *tr;
    float *y;
    const uint8_t *W;
    int64_t row_bytes;
    const uint8_t *xq;
    size_t xq_row;
    int rows, cols, T;
};

static void ggml_task(void *p, int ith, int nth) {
    const struct ggml_ctx *c = p;
    /* same split as cpu_matmul: contiguous ranges, multiples of 4 */
    int r0 = (int)((((int64_t)c->rows * ith / nth) + 2) & ~3),
        r1 = (int)((((int64_t)c->rows * (ith + 1) / nth) + 2) & ~3);
    if (r1 > c->rows) r1 = c->rows;
    if (r0 > c->rows) r0 = c->rows;
    for (int r = r0; r < r1; r++)
        for (int t = 0; t < c->T; t++)
            c->tr->vec_dot(c->cols, &c->y[(int64_t)t * c->rows + r], 0,
                           c->W + (int64_t)r * c->row_bytes, 0, c->xq + (size_t)t * c->xq_row, 0,
                           1);
}

/* y = W x through ggml: quantize x as ggml's mul_mat does (caller thread), then vec_dot rows. */
static void ggml_matmul(float *y, const float *x, int T, const uint8_t *W, enum dtype wt, int rows,
                        int cols, struct threadpool *tp, uint8_t *xq_buf) {
    const struct ggml_traits_cpu *tr = ggml_traits((int)wt);
    const struct ggml_traits_cpu *vt = ggml_traits(tr->vec_dot_type);
    size_t xq_row = ggml_row_size_fn(tr->vec_dot_type, cols);
    const uint8_t *xq = (const uint8_t *)x;
    if (tr->vec_dot_type != (int)DT_F32) {
        for (int t = 0; t < T; t++)
            vt->from_float(x + (int64_t)t * cols, xq_buf + (size_t)t * xq_row, cols);
        xq = xq_buf;
    }
    struct ggml_ctx c = {.tr = tr,
                         .y = y,
                         .W = W,
                         .row_bytes = dtype_row_bytes(wt, cols),
                         .xq = xq,
                         .xq_row = xq_row,
                         .rows = rows,
                         .cols = cols,
                         .T = T};
    threadpool_run(tp, ggml_task, &c);
}

/* ---- cases ---- */

struct shape {
    const char *name;
    int rows, cols;
};
static const struct shape shapes[] = {
    {"attn_q/o", 576, 576},  {"attn_k/v", 192, 576},  {"ffn_gate/up", 1536, 576},
    {"ffn_down", 576, 1536}, {"lm_head", 49152, 576},
};

enum impl { IMPL_TPD, IMPL_TPD_SCALAR, IMPL_GGML };

static void run_impl(enum impl im, float *y, const float *x, int T, const uint8_t *W, enum dtype wt,
                     int rows, int cols, struct threadpool *tp, uint8_t *xq_buf) {
    if (im == IMPL_GGML) {
        ggml_matmul(y, x, T, W, wt, rows, cols, tp, xq_buf);
        return;
    }
    cpu_matmul_force_scalar(im == IMPL_TPD_SCALAR);
    cpu_matmul(y, rows, x, cols, T, W, wt, rows, cols, tp);
    cpu_matmul_force_scalar(0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds per call over copies of W (each call on the next copy); *p10 gets the 10th
 * percentile, which shows what calls reach when no other process takes the cores. */
static double time_case(enum impl im, int T, uint8_t **copies, int ncopies, enum dtype wt, int rows,
                        int cols, const float *x, float *y, struct threadpool *tp, uint8_t *xq_buf,
                        double budget_s, double *p10) {
    enum { MAXREP = 4096 };
    static double ts[MAXREP];
    int n = 0;
    double start = clock_now();
    run_impl(im, y, x, T, copies[0], wt, rows, cols, tp, xq_buf); /* warm the code and scratch */
    while (n < MAXREP && (n < 5 || clock_now() - start < budget_s)) {
        double t0 = clock_now();
        run_impl(im, y, x, T, copies[n % ncopies], wt, rows, cols, tp, xq_buf);
        ts[n++] = clock_now() - t0;
    }
    qsort(ts, (size_t)n, sizeof *ts, cmp_double);
    if (p10) *p10 = ts[n / 10];
    return ts[n / 2];
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        while (*s && *s != ',') s++;
        if (*s == ',') s++;
    }
    return n;
}

int main(int argc, char **argv) {
    int quick = 0, threads[8] = {1, 2}, nthreads = 2, tokens[8] = {1, 64}, ntokens = 2;
    int stream_only = 0; /* the streaming-read floor alone (bench/moe_decode reads it) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--stream-only")) stream_only = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            nthreads = parse_list(argv[++i], threads, 8);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            ntokens = parse_list(argv[++i], tokens, 8);
        else if (!strcmp(argv[i], "--no-vnni")) cpu_matmul_force_no_vnni(1);
        else if (!strcmp(argv[i], "--no-avx512")) cpu_matmul_force_no_avx512(1);
        else {
            fprintf(
                stderr,
                "usage: %s [--quick] [--stream-only] [--threads 1,2] [--tokens 1,64] [--no-vnni] "
                "[--no-avx512]\n",
                argv[0]);
            return 2;
        }
    }
    const double budget = quick ? 0.15 : 0.5;
    const int have_ggml = ggml_load();
    const char *path = cpu_matmul_has_avx512() ? "AVX-512 VNNI"
                       : cpu_matmul_has_vnni() ? "AVX2 + AVX-VNNI"
                       : cpu_matmul_has_avx2() ? "AVX2"
                                               : "scalar";
    printf("cpu_matmul: %s path%s\n", path,
           have_ggml ? "; ggml = llama.cpp's vec_dot kernels over the same rows and threads" : "");

    const size_t stream_bytes = (size_t)1 << 30;
    float *stream_buf = xalloc(stream_bytes);
    for (size_t i = 0; i < stream_bytes / sizeof(float); i++) stream_buf[i] = (float)(i & 255);
    double stream_gbs[8];
    for (int ti = 0; ti < nthreads; ti++) {
        struct threadpool *tp = threadpool_create(threads[ti]);
        stream_gbs[ti] = stream_read_gbs(tp, stream_buf, stream_bytes);
        printf("streaming read, %d thread(s): %.2f GB/s\n", threads[ti], stream_gbs[ti]);
        threadpool_free(tp);
    }
    if (stream_only) {
        free(stream_buf);
        return 0;
    }

    int maxT = 1;
    for (int i = 0; i < ntokens; i++) maxT = tokens[i] > maxT ? tokens[i] : maxT;
    float *x = xalloc(sizeof(float) * (size_t)maxT * 1536);
    for (int i = 0; i < maxT * 1536; i++) x[i] = rnd_f();
    float *y = xalloc(sizeof(float) * ((size_t)maxT * 49152 + 32768));
    uint8_t *xq_buf = xalloc((size_t)maxT * 1536 * 4 + 4096);

    const enum dtype types[] = {DT_Q4_1, DT_Q8_0, DT_Q4_K,        DT_Q6_K,
                                DT_F16,  DT_F32,  DT_F8_E4M3_S32, DT_I4_S32};
    printf(
        "\nmedians per call; GB/s: weight bytes per second; /read: that over the streaming read;\n"
        "Gop/s: 2*rows*cols*T per second; p10: 10th percentile of tpd's calls\n");
    printf("%-5s %-12s %11s %3s %3s | %9s %7s %6s %7s %8s | %9s %7s | %9s %7s | %s\n", "type",
           "shape", "rows x cols", "T", "thr", "tpd us", "GB/s", "/read", "Gop/s", "p10 GB/s",
           "scalar us", "GB/s", "ggml us", "Gop/s", "tpd vs ggml");
    for (size_t ty = 0; ty < sizeof types / sizeof *types; ty++) {
        const enum dtype wt = types[ty];
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const struct shape *sh = &shapes[si];
            if (sh->cols % dtype_block_elems(wt)) continue; /* K-quants need cols % 256 == 0 */
            const int64_t bytes = dtype_row_bytes(wt, sh->cols) * sh->rows;
            int ncopies = (int)((256ll << 20) / bytes) + 1;
            if (quick && ncopies > 8) ncopies = 8;
            uint8_t **copies = malloc(sizeof *copies * (size_t)ncopies);
            for (int c = 0; c < ncopies; c++) {
                copies[c] = xalloc((size_t)bytes);
                fill_weights(wt, copies[c], bytes);
            }
            for (int tk = 0; tk < ntokens; tk++) {
                const int T = tokens[tk];
                for (int ti = 0; ti < nthreads; ti++) {
                    struct threadpool *tp = threadpool_create(threads[ti]);
                    double t_p10;
                    const double t_tpd = time_case(IMPL_TPD, T, copies, ncopies, wt, sh->rows,
                                                   sh->cols, x, y, tp, xq_buf, budget, &t_p10);
                    /* the scalar path is slow: only at T = 1 and on the smaller shapes */
                    double t_sc = 0;
                    if (T == 1 && sh->rows <= 1536)
                        t_sc = time_case(IMPL_TPD_SCALAR, T, copies, ncopies, wt, sh->rows,
                                         sh->cols, x, y, tp, xq_buf, budget / 2, NULL);
                    double t_gg = have_ggml ? time_case(IMPL_GGML, T, copies, ncopies, wt, sh->rows,
                                                        sh->cols, x, y, tp, xq_buf, budget, NULL)
                                            : 0;
                    const double g_tpd = (double)bytes / t_tpd / 1e9,
                                 ops = 2.0 * sh->rows * sh->cols * T;
                    printf("%-5s %-12s %5d x %-5d %3d %3d | %9.1f %7.2f %5.0f%% %7.1f %8.2f | ",
                           dtype_name(wt), sh->name, sh->rows, sh->cols, T, threads[ti],
                           t_tpd * 1e6, g_tpd, 100 * g_tpd / stream_gbs[ti], ops / t_tpd / 1e9,
                           (double)bytes / t_p10 / 1e9);
                    if (t_sc > 0) printf("%9.1f %7.2f | ", t_sc * 1e6, (double)bytes / t_sc / 1e9);
                    else printf("%9s %7s | ", "-", "-");
                    if (t_gg > 0)
                        printf("%9.1f %7.1f | %.2fx\n", t_gg * 1e6, ops / t_gg / 1e9, t_gg / t_tpd);
                    else printf("%9s %7s |\n", "-", "-");
                    fflush(stdout);
                    threadpool_free(tp);
                }
            }
            for (int c = 0; c < ncopies; c++) free(copies[c]);
            free(copies);
        }
    }

    /* One SmolLM2-135M decode step worth of matmuls, every matrix its own buffer. */
    {
        enum { LAYERS = 30, PER_LAYER = 7 };
        const struct shape layer[PER_LAYER] = {
            {"q", 576, 576},     {"k", 192, 576},   {"v", 192, 576},    {"o", 576, 576},
            {"gate", 1536, 576}, {"up", 1536, 576}, {"down", 576, 1536}};
        uint8_t *mats[LAYERS * PER_LAYER];
        int64_t total = 0;
        for (int l = 0; l < LAYERS; l++)
            for (int m = 0; m < PER_LAYER; m++) {
                const int64_t b = dtype_row_bytes(DT_Q4_1, layer[m].cols) * layer[m].rows;
                mats[l * PER_LAYER + m] = xalloc((size_t)b);
                fill_weights(DT_Q4_1, mats[l * PER_LAYER + m], b);
                total += b;
            }
        const int64_t head_bytes = dtype_row_bytes(DT_Q8_0, 576) * 49152;
        uint8_t *head = xalloc((size_t)head_bytes);
        fill_weights(DT_Q8_0, head, head_bytes);
        total += head_bytes;
        printf("\nSmolLM2-135M decode step (T=1): %d Q4_1 matrices + Q8_0 head, %.1f MB\n",
               LAYERS * PER_LAYER, (double)total / 1e6);
        for (int ti = 0; ti < nthreads; ti++) {
            struct threadpool *tp = threadpool_create(threads[ti]);
            /* tpd one call per matrix; tpd with q/k/v and gate/up fused by cpu_matmul_multi; ggml
             */
            double best[3] = {1e9, 1e9, 1e9};
            const int reps = quick ? 5 : 20;
            float *ys[3] = {y, y + 8192, y + 16384};
            for (int rep = 0; rep < reps; rep++) {
                for (int im = 0; im < (have_ggml ? 3 : 2);
                     im++) { /* alternate, so drifts hit all */
                    double t0 = clock_now();
                    for (int l = 0; l < LAYERS; l++) {
                        uint8_t *const *lm = mats + l * PER_LAYER;
                        if (im == 1) {
                            struct cpu_matmul_op qkv[3], gu[2];
                            for (int m = 0; m < 3; m++)
                                qkv[m] = (struct cpu_matmul_op){.y = ys[m],
                                                                .ldy = 576,
                                                                .W = lm[m],
                                                                .wt = DT_Q4_1,
                                                                .rows = layer[m].rows};
                            for (int m = 0; m < 2; m++)
                                gu[m] = (struct cpu_matmul_op){.y = ys[m],
                                                               .ldy = 1536,
                                                               .W = lm[4 + m],
                                                               .wt = DT_Q4_1,
                                                               .rows = 1536};
                            cpu_matmul_multi(qkv, 3, x, 576, 1, 576, tp);
                            cpu_matmul(y, 576, x, 576, 1, lm[3], DT_Q4_1, 576, 576, tp);
                            cpu_matmul_multi(gu, 2, x, 576, 1, 576, tp);
                            cpu_matmul(y, 576, x, 1536, 1, lm[6], DT_Q4_1, 576, 1536, tp);
                            continue;
                        }
                        for (int m = 0; m < PER_LAYER; m++)
                            run_impl(im ? IMPL_GGML : IMPL_TPD, y, x, 1, lm[m], DT_Q4_1,
                                     layer[m].rows, layer[m].cols, tp, xq_buf);
                    }
                    run_impl(im == 2 ? IMPL_GGML : IMPL_TPD, y, x, 1, head, DT_Q8_0, 49152, 576, tp,
                             xq_buf);
                    double t = clock_now() - t0;
                    if (t < best[im]) best[im] = t;
                }
            }
            printf("  %d thread(s): tpd %.3f ms (%.2f GB/s, %.0f%% of read); fused qkv/gate-up "
                   "%.3f ms (%.0f%%)",
                   threads[ti], best[0] * 1e3, (double)total / best[0] / 1e9,
                   100 * (double)total / best[0] / 1e9 / stream_gbs[ti], best[1] * 1e3,
                   100 * (double)total / best[1] / 1e9 / stream_gbs[ti]);
            if (have_ggml)
                printf("; ggml %.3f ms (%.2f GB/s); tpd vs ggml %.2fx", best[2] * 1e3,
                       (double)total / best[2] / 1e9, best[2] / best[0]);
            printf("\n");
            threadpool_free(tp);
        }
        for (int i = 0; i < LAYERS * PER_LAYER; i++) free(mats[i]);
        free(head);
    }
    free(stream_buf);
    free(x);
    free(y);
    free(xq_buf);
    return 0;
}
