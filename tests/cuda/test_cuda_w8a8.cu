/* The CUDA backend's FP8 W8A8 product (kernels/cuda/matmul_w8a8.cu, w8a8_dev.cuh).
 *
 * On the host (no GPU needed): the activations' per-value arithmetic, compiled for the host,
 * against a float64 reference of E4M3 (every finite code's value, nearest with ties to the
 * even code, saturation at 448): midpoints between codes and their neighbours, random values
 * at every scale, saturation, NaN, rows of zeros; the per-token quantization of whole rows
 * within its error bound (below); the weights' code gathering (w8a8_word_off) and the
 * loader's row-scale test (fp8w_row_scaled) on random blocks.
 *
 * On a GPU with FP8 tensor cores: the W8A8 product (called directly, and through the
 * backend's matmul op) against the CPU backend's W8A16 product of the same row-scaled FP8
 * weights at T = 17, 64, 200. The tolerance, per output y[t][r] = sum_k w_rk x_tk: both use
 * the same weights exactly (E4M3 code times the row's f32 scale); the GPU uses x'_tk =
 * e4m3(x_tk / s_t) s_t instead of x_tk, with |x' - x| <= 2^-4 |x| for normal codes (3
 * mantissa bits: half a unit is 2^-4 of the value at most) and <= 2^-10 s_t for subnormal
 * ones (step 2^-9 s_t), so |y' - y| <= 2^-4 sum_k |w x| + 2^-10 s_t sum_k |w|. Products of
 * two E4M3 codes are exact in f32; on top of that 2^-8 sum_k |w x|: 2^-10 for the tensor
 * cores' accumulator between its f32 promotions (a generous allowance; the CPU's f32 sum is
 * far inside it) and 2^-9 |y| for the BF16 output cuBLASLt may be given instead of f32
 * (matmul_w8a8.cu). Without a GPU that half prints "skipped: no GPU".
 *   test_cuda_w8a8 [--host | --gpu]   (--gpu: the GPU half only, exit 77 without a GPU) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cuda/ops.cuh"
#include "../../kernels/cuda/w8a8_dev.cuh"

extern "C" {
#include "../../kernels/backend.h"
#include "../../kernels/cuda/backend_cuda.h"
#include "backend_pair.h"
#include "../../model/fp8w.h"
#include "../../util/dtype.h"
}

static int failures;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(next_u32() & 0xffffff) / 16777216.0f;
}

/* ---- the float64 reference of E4M3 ---- */

/* The value of a finite non-negative code (0..126) */
static double e4m3_value(int code) {
    const int e = code >> 3, m = code & 7;
    return e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp((double)m, -9);
}

/* v to E4M3: nearest finite code, ties to the even code, beyond 448 saturated, NaN to NaN */
static uint8_t ref_encode(float v) {
    if (v != v) return 0x7f;
    const uint8_t sign = signbit(v) ? 0x80 : 0;
    const double a = fabs((double)v);
    if (a >= 448.0) return sign | 0x7e;
    int best = 0;
    for (int c = 1; c <= 126; c++) {
        const double dc = fabs(e4m3_value(c) - a), db = fabs(e4m3_value(best) - a);
        if (dc < db || (dc == db && !(c & 1))) best = c;
    }
    return sign | (uint8_t)best;
}

static double ref_decode(uint8_t q) {
    const double v = e4m3_value(q & 0x7f);
    return q & 0x80 ? -v : v;
}

static void check_code(float x, float inv, const char *what) {
    const uint8_t got = w8a8_code(x, inv), want = ref_encode(x * inv);
    const int nan_ok = (want & 0x7f) == 0x7f && (got & 0x7f) == 0x7f;
    if (got != want && !nan_ok) {
        if (failures < 20)
            printf("FAIL: %s: w8a8_code(%.9g, %.9g) = 0x%02x, reference 0x%02x\n", what, (double)x,
                   (double)inv, got, want);
        failures++;
    }
}

/* Midpoints between neighbouring codes (the ties) and the floats either side, saturation,
 * NaN, and random values at scales 2^-30..2^30 against random factors. */
static void check_codes(void) {
    for (int c = 0; c < 126; c++) {
        const float mid = (float)((e4m3_value(c) + e4m3_value(c + 1)) / 2);
        const float v[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, 1e9f), (float)e4m3_value(c)};
        for (int i = 0; i < 4; i++) {
            check_code(v[i], 1.0f, "tie");
            check_code(-v[i], 1.0f, "tie");
        }
    }
    const float sat[] = {448.0f, 449.0f, 464.0f, 465.0f, 480.0f, 1e30f, INFINITY};
    for (int i = 0; i < 7; i++) {
        check_code(sat[i], 1.0f, "saturation");
        check_code(-sat[i], 1.0f, "saturation");
    }
    check_code(NAN, 1.0f, "NaN");
    for (int i = 0; i < 200000; i++) {
        const float amax = ldexpf(uniform(0.5f, 1.0f), (int)(next_u32() % 61) - 30);
        const float x = amax * uniform(-1.0f, 1.0f) * ldexpf(1.0f, -(int)(next_u32() % 12));
        check_code(x, w8a8_inv_scale(amax), "random");
    }
    /* a row of zeros: a finite factor and scale, codes 0 */
    const float inv0 = w8a8_inv_scale(0.0f), s0 = w8a8_scale(0.0f);
    if (!isfinite(inv0) || !isfinite(s0) || !(s0 > 0) || w8a8_code(0.0f, inv0) != 0) {
        printf("FAIL: amax 0: factor %g, scale %g, code of 0 0x%02x\n", (double)inv0, (double)s0,
               w8a8_code(0.0f, inv0));
        failures++;
    }
}

/* Whole rows quantized as w8a8_act_kernel does: each decoded value within the bound of the
 * header (plus 2^-20 relative for s * inv != 1 in f32), the largest at +-448 exactly. */
static void check_rows(void) {
    double worst = 0; /* |x' - x| over the bound */
    const int cols = 4096;
    float *x = (float *)malloc(sizeof(float) * cols);
    for (int rep = 0; rep < 64; rep++) {
        const float scale = ldexpf(1.0f, (int)(next_u32() % 41) - 20);
        for (int k = 0; k < cols; k++) {
            /* every fourth row: a wide range of magnitudes (subnormal codes included) */
            const float m = rep % 4 == 3 ? ldexpf(1.0f, -(int)(next_u32() % 20)) : 1.0f;
            x[k] = rep % 16 == 15 ? 0.0f : scale * m * uniform(-1.0f, 1.0f);
        }
        float amax = 0;
        for (int k = 0; k < cols; k++) amax = fmaxf(amax, fabsf(x[k]));
        const float inv = w8a8_inv_scale(amax), s = w8a8_scale(amax);
        if (!(fabs((double)s * inv - 1.0) <= 0x1p-22)) { /* the factor and the scale agree */
            printf("FAIL: amax %g: scale %.9g times factor %.9g is not 1\n", (double)amax,
                   (double)s, (double)inv);
            failures++;
        }
        for (int k = 0; k < cols; k++) {
            const uint8_t q = w8a8_code(x[k], inv);
            const double d = ref_decode(q) * s;
            const double bound = ldexp(fabs((double)x[k]), -4) * (1 + ldexp(1.0, -20)) +
                                 ldexp((double)s, -10);
            const double e = fabs(d - x[k]) / bound;
            if (e > worst) worst = e;
            if (fabsf(x[k]) == amax && amax > 0 && (q & 0x7f) != 0x7e) {
                printf("FAIL: row %d: the largest |x| %g has code 0x%02x, not +-448\n", rep,
                       (double)amax, q);
                failures++;
            }
        }
    }
    free(x);
    printf("per-token E4M3 quantization: worst error %.3f of its bound (2^-4 |x| + 2^-10 s)\n",
           worst);
    if (!(worst <= 1.0) || !(worst > 0.5)) { /* > 0.5: the bound is also near tight */
        printf("FAIL: per-token quantization error %.3f of the bound\n", worst);
        failures++;
    }
}

/* Random row-scaled DT_F8_E4M3_S32 rows (no NaN codes; scale_of(r) per row) */
static void random_f8(uint8_t *W, int rows, int cols, float (*scale_of)(int)) {
    const int64_t rb = dtype_row_bytes(DT_F8_E4M3_S32, cols);
    for (int r = 0; r < rows; r++) {
        const float d = scale_of(r);
        for (int b = 0; b < cols / 32; b++) {
            uint8_t *blk = W + r * rb + 36 * b;
            memcpy(blk, &d, 4);
            for (int k = 0; k < 32; k++) {
                uint8_t q = (uint8_t)next_u32();
                if ((q & 0x7f) == 0x7f) q ^= 1;
                blk[4 + k] = q;
            }
        }
    }
}

static float scale_random(int r) { return (r % 7 == 3) ? 1e-3f : uniform(0.001f, 0.02f); }

/* The codes gathered word by word through w8a8_word_off are each row's codes in order;
 * fp8w_row_scaled says yes to such rows and no once one block's scale differs. */
static void check_gather(void) {
    const int rows = 5, cols = 160;
    const int64_t rb = dtype_row_bytes(DT_F8_E4M3_S32, cols);
    uint8_t *W = (uint8_t *)malloc((size_t)(rb * rows));
    random_f8(W, rows, cols, scale_random);
    int bad = 0;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols / 4; j++)
            for (int b = 0; b < 4; b++) {
                const int k = 4 * j + b;
                bad += W[r * rb + w8a8_word_off(j) + b] != W[r * rb + 36 * (k / 32) + 4 + k % 32];
            }
    if (bad) {
        printf("FAIL: w8a8_word_off: %d codes out of place\n", bad);
        failures++;
    }
    const int yes = fp8w_row_scaled(W, (size_t)(rb * rows), cols);
    float d;
    memcpy(&d, W + 3 * rb + 36 * 4, 4);
    d *= 2;
    memcpy(W + 3 * rb + 36 * 4, &d, 4); /* row 3's last block */
    const int no = fp8w_row_scaled(W, (size_t)(rb * rows), cols);
    if (yes != 1 || no != 0) {
        printf("FAIL: fp8w_row_scaled: %d for row-scaled blocks, %d with one scale changed\n", yes,
               no);
        failures++;
    }
    free(W);
}

/* ---- on a GPU: the W8A8 product against the CPU backend's ---- */

struct case_data {
    int rows, cols, T;
    int64_t ldx, ldy;
    uint8_t *W;
    float *x, *wf, *y_cpu;
};

/* Largest |GPU - CPU| over the header's bound, for y_gpu of the case */
static double worst_ratio(const struct case_data *d, const float *y_gpu) {
    double worst = 0;
    for (int t = 0; t < d->T; t++) {
        float amax = 0;
        for (int k = 0; k < d->cols; k++) amax = fmaxf(amax, fabsf(d->x[t * d->ldx + k]));
        const double s = w8a8_scale(amax);
        for (int r = 0; r < d->rows; r++) {
            double wx = 0, w1 = 0;
            for (int k = 0; k < d->cols; k++) {
                const double w = d->wf[(int64_t)r * d->cols + k];
                wx += fabs(w * d->x[t * d->ldx + k]);
                w1 += fabs(w);
            }
            const double bound = (ldexp(1.0, -4) + ldexp(1.0, -8)) * wx + ldexp(s, -10) * w1 +
                                 1e-30;
            const double g = y_gpu[t * d->ldy + r], c = d->y_cpu[t * d->ldy + r];
            const double e = g == g ? fabs(g - c) / bound : INFINITY;
            if (e > worst) worst = e;
        }
    }
    return worst;
}

/* One step of T tokens: x uniform(-2, 2), token 1 all zeros, token 2 one outlier of 1000
 * (its other values in subnormal codes); failures counted */
static void check_step(struct backend *gpu, struct backend *cpu, int T) {
    struct case_data d = {320, 1024, T, 1024 + 4, 320, NULL, NULL, NULL, NULL};
    const int64_t rb = dtype_row_bytes(DT_F8_E4M3_S32, d.cols);
    d.W = (uint8_t *)malloc((size_t)(rb * d.rows));
    d.x = (float *)calloc((size_t)(d.ldx * T), sizeof(float));
    d.y_cpu = (float *)calloc((size_t)(d.ldy * T), sizeof(float));
    d.wf = (float *)malloc(sizeof(float) * (size_t)d.cols * d.rows);
    float *y_gpu = (float *)calloc((size_t)(d.ldy * T), sizeof(float));
    random_f8(d.W, d.rows, d.cols, scale_random);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < d.cols; k++) d.x[t * d.ldx + k] = t == 1 ? 0.0f : uniform(-2, 2);
    d.x[2 * d.ldx + 17] = 1000.0f;
    float amax = 0;
    for (int r = 0; r < d.rows; r++)
        for (int b = 0; b < d.cols / 32; b++) {
            float s;
            memcpy(&s, d.W + r * rb + 36 * b, 4);
            for (int k = 0; k < 32; k++) {
                const float v = (float)ref_decode(d.W[r * rb + 36 * b + 4 + k]) * s;
                d.wf[(int64_t)r * d.cols + 32 * b + k] = v;
                amax = fmaxf(amax, fabsf(v));
            }
        }
    struct bweight wc = {d.W, DT_F8_E4M3_S32, d.rows, d.cols, amax};
    wc.row_scaled = 1;
    cpu->matmul(cpu->ctx, d.y_cpu, d.ldy, d.x, d.ldx, T, &wc);

    void *dW = gpu->alloc(gpu->ctx, (size_t)(rb * d.rows));
    float *dx = (float *)gpu->alloc(gpu->ctx, sizeof(float) * (size_t)(d.ldx * T));
    float *dy = (float *)gpu->alloc(gpu->ctx, sizeof(float) * (size_t)(d.ldy * T));
    gpu->upload(gpu->ctx, dW, d.W, (size_t)(rb * d.rows));
    gpu->upload(gpu->ctx, dx, d.x, sizeof(float) * (size_t)(d.ldx * T));
    struct bweight wg = {dW, DT_F8_E4M3_S32, d.rows, d.cols, amax};
    wg.row_scaled = 1;
    struct cuda_ctx *c = (struct cuda_ctx *)gpu->ctx;
    const char *how[2] = {"cuda_matmul_w8a8", "the backend's matmul"};
    for (int via = 0; via < 2; via++) {
        CUDA_CHECK(cudaMemset(dy, 0xff, sizeof(float) * (size_t)(d.ldy * T))); /* NaN */
        if (via == 0 && cuda_matmul_w8a8(c, dy, d.ldy, dx, d.ldx, T, &wg)) {
            /* Hopper and newer have it (cuBLAS 12.9+); sm_89 may not */
            if (c->cc >= 90) {
                printf("FAIL: T=%d: cuBLASLt offers no FP8 outer-vector product on %s (cc %d)\n", T,
                       c->gpu_name, c->cc);
                failures++;
            } else {
                printf("T=%d: cuBLASLt has no FP8 outer-vector product on %s (cc %d): the "
                       "backend falls back to the F16 copy\n",
                       T, c->gpu_name, c->cc);
            }
            continue;
        }
        if (via == 1) gpu->matmul(gpu->ctx, dy, d.ldy, dx, d.ldx, T, &wg);
        gpu->download(gpu->ctx, y_gpu, dy, sizeof(float) * (size_t)(d.ldy * T));
        const double e = worst_ratio(&d, y_gpu);
        printf("F8_E4M3_S32 W8A8 vs CPU matmul T=%-3d (%dx%d) via %s: worst error %.3f of the "
               "bound\n",
               T, d.rows, d.cols, how[via], e);
        if (!(e <= 1.0)) {
            printf("FAIL: W8A8 at T=%d via %s beyond its bound\n", T, how[via]);
            failures++;
        }
    }
    gpu->free(gpu->ctx, dW), gpu->free(gpu->ctx, dx), gpu->free(gpu->ctx, dy);
    free(d.W), free(d.x), free(d.y_cpu), free(d.wf), free(y_gpu);
}

/* 1 when it ran */
static int check_gpu(void) {
    struct backend gpu, cpu;
    const int opened = backend_pair_open(&gpu, &cpu, "CUDA W8A8 vs CPU backend matmul");
    if (opened < 0) failures++;
    if (opened <= 0) return opened < 0;
    const int cc = ((struct cuda_ctx *)gpu.ctx)->cc;
    if (cc < 89) {
        printf("CUDA W8A8 vs CPU backend matmul: skipped: compute capability %d.%d has no FP8 "
               "tensor cores\n",
               cc / 10, cc % 10);
    } else {
        const int steps[] = {17, 64, 200};
        for (int i = 0; i < 3; i++) check_step(&gpu, &cpu, steps[i]);
    }
    backend_close(&gpu);
    backend_close(&cpu);
    return 1;
}

int main(int argc, char **argv) {
    const int host = argc < 2 || !strcmp(argv[1], "--host");
    const int gpu = argc < 2 || !strcmp(argv[1], "--gpu");
    if (!host && !gpu) {
        fprintf(stderr, "usage: test_cuda_w8a8 [--host | --gpu]\n");
        return 2;
    }
    int ran = 1;
    if (host) {
        check_codes();
        check_rows();
        check_gather();
    }
    if (gpu) ran = check_gpu();
    if (failures) printf("%d checks failed\n", failures);
    else printf("test_cuda_w8a8: passed\n");
    return failures ? 1 : gpu && !host && !ran ? 77 : 0;
}
