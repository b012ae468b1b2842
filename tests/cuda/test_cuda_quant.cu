/* The CUDA backend's block decoding (kernels/cuda/quant_dev.cuh), compiled for the host and
 * checked against the CPU backend's code on random blocks, so that it is tested on machines
 * without a GPU: unit dot products against the CPU's scalar vec_dot (same integer sums;
 * only float accumulation order may differ), element dequantization bit for bit, and the
 * I4_S32 decode of mmv_i4_kernel (qd_i4_vals16) bit for bit against i4_value. On a machine
 * with a GPU, also the CUDA backend's matmul against the CPU backend's for the weight-only
 * types (F8_E4M3_S32, I4_S32) at T = 1, 8, 16 (the GEMVs) and 17, 64 (the F16 copy and the
 * GEMM); without one that part prints "skipped: no GPU".
 *   test_cuda_quant [--host | --gpu]   (--host: the host checks only; --gpu: the GPU part
 *   only, exit 77 without a GPU; tests/gpu/run runs the two in its host and backends steps) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/cuda/quant_dev.cuh"

extern "C" {
#include "../../kernels/backend.h"
#include "../../kernels/cuda/backend_cuda.h"
#include "backend_pair.h"
#include "../../model/int4w.h" /* int4w_amax: the loader's bweight.amax of I4_S32 weights */
#include "../../util/dtype.h"
#include "../../util/half.h" /* at global scope: quant.h below sees it already included */
}
namespace cpu {
extern "C" {
#include "../../kernels/cpu/matmul.h"
#include "../../kernels/cpu/quant.h"
}
} // namespace cpu

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)(next_u32() & 0xffffff) / 16777216.0f;
}

static void put_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* A random row of `cols` elements of type t with finite, modest scales. */
static void random_row(enum dtype t, uint8_t *row, int cols) {
    int64_t rb = dtype_row_bytes(t, cols);
    for (int64_t i = 0; i < rb; i++) row[i] = (uint8_t)next_u32();
    const int bb = dtype_block_bytes(t), nb = (int)(rb / bb);
    for (int b = 0; b < nb; b++) {
        uint8_t *w = row + (int64_t)b * bb;
        switch (t) {
        case DT_Q4_0:
        case DT_Q8_0: put_f16(w, uniform(-0.02f, 0.02f)); break;
        case DT_Q4_1:
            put_f16(w, uniform(0.001f, 0.02f));
            put_f16(w + 2, uniform(-0.1f, 0.1f));
            break;
        case DT_Q4_K:
            put_f16(w, uniform(0.0001f, 0.002f));
            put_f16(w + 2, uniform(0.0001f, 0.002f));
            break;
        case DT_Q6_K: put_f16(w + 208, uniform(0.0001f, 0.002f)); break;
        case DT_F32: {
            float v = uniform(-1, 1);
            memcpy(w, &v, 4);
            break;
        }
        case DT_F16: put_f16(w, uniform(-1, 1)); break;
        case DT_BF16:
            break; /* every bit pattern but NaN/inf is fine; random exponent bytes rarely hit them
                    */
        case DT_F8_E4M3_S32: { /* every code but NaN (the loader refuses those), subnormals included
                                */
            const float v = uniform(0.0001f, 0.01f);
            memcpy(w, &v, 4);
            for (int k = 4; k < 36; k++)
                if ((w[k] & 0x7f) == 0x7f) w[k] ^= 1;
            break;
        }
        case DT_I4_S32: { /* f32 scale; an integer zero point (as every loader writes: the
                           * one-subtraction path of qd_i4_vals16) in 3 blocks of 4, any
                           * other f32 in the fourth */
            const float dd = uniform(0.001f, 0.02f);
            const float z = b % 4 == 3 ? uniform(-2, 18) : (float)((int)(next_u32() % 33) - 8);
            memcpy(w, &dd, 4);
            memcpy(w + 4, &z, 4);
            break;
        }
        }
    }
    if (t == DT_BF16)
        for (int i = 0; i < cols; i++) {
            uint16_t h = (uint16_t)((next_u32() & 0x807f) | 0x3c00); /* |v| in [2^-7, 2^-6) */
            memcpy(row + 2 * i, &h, 2);
        }
}

static int failures = 0;

static void check_dot(enum dtype t, int cols) {
    const int rows = 16;
    const int64_t rb = dtype_row_bytes(t, cols);
    uint8_t *W = (uint8_t *)malloc((size_t)(rb * rows));
    float *x = (float *)malloc(sizeof(float) * cols);
    int8_t *qs = (int8_t *)malloc((size_t)cols);
    float *d = (float *)malloc(sizeof(float) * cols);
    int16_t *bsums = (int16_t *)malloc(sizeof(int16_t) * cols);
    for (int r = 0; r < rows; r++) random_row(t, W + r * rb, cols);
    for (int i = 0; i < cols; i++) x[i] = uniform(-2, 2);
    if (t == DT_Q4_1) cpu::quant_row_q8_1(x, cols, qs, d);
    else if (t == DT_Q4_K || t == DT_Q6_K) cpu::quant_row_q8_K(x, cols, qs, d, bsums);
    else cpu::quant_row_q8_0(x, cols, qs, d);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        const uint8_t *row = W + r * rb;
        float ref = 0;
        switch (t) {
        case DT_Q4_0: ref = cpu::dot_q4_0_q8_0(row, qs, d, cols / 32); break;
        case DT_Q4_1: ref = cpu::dot_q4_1_q8_1(row, qs, d, cols / 32); break;
        case DT_Q8_0: ref = cpu::dot_q8_0_q8_0(row, qs, d, cols / 32); break;
        case DT_Q4_K: ref = cpu::dot_q4_K_q8_K(row, qs, d, bsums, cols / 256); break;
        case DT_Q6_K: ref = cpu::dot_q6_K_q8_K(row, qs, d, bsums, cols / 256); break;
        default: break;
        }
        double got = 0, mag = 0;
        for (int u = 0; u < cols / 32; u++) {
            float v = 0;
            switch (t) {
            case DT_Q4_0: v = qd_dot_q4_0(row, u, qs, d); break;
            case DT_Q4_1: v = qd_dot_q4_1(row, u, qs, d); break;
            case DT_Q8_0: v = qd_dot_q8_0(row, u, qs, d); break;
            case DT_Q4_K: v = qd_dot_q4_K(row, u, qs, d); break;
            case DT_Q6_K: v = qd_dot_q6_K(row, u, qs, d); break;
            default: break;
            }
            got += v;
            mag += fabs(v);
        }
        /* the same integer sums; float rounding of at most a few ulps of the magnitudes summed */
        double err = fabs(got - ref) / (mag + 1e-30);
        if (err > worst) worst = err;
    }
    printf("%-5s dot (%d cols): worst error %.2e of the summed magnitudes\n", dtype_name(t), cols,
           worst);
    if (!(worst < 1e-5)) {
        printf("FAIL: %s unit dot products differ from the CPU's\n", dtype_name(t));
        failures++;
    }
    free(W), free(x), free(qs), free(d), free(bsums);
}

static void check_dequant(enum dtype t, int cols) {
    const int64_t rb = dtype_row_bytes(t, cols);
    uint8_t *row = (uint8_t *)malloc((size_t)rb);
    float *ref = (float *)malloc(sizeof(float) * cols);
    random_row(t, row, cols);
    cpu::cpu_dequant_row(t, row, ref, cols);
    int bad = 0;
    for (int i = 0; i < cols; i++) {
        float v = qd_dequant((int)t, row, i);
        if (memcmp(&v, &ref[i], 4) != 0 && !(v != v && ref[i] != ref[i])) {
            if (bad < 3) printf("  %s element %d: %.9g, CPU %.9g\n", dtype_name(t), i, v, ref[i]);
            bad++;
        }
    }
    printf("%-5s dequant (%d elements): %d differ\n", dtype_name(t), cols, bad);
    if (bad) {
        printf("FAIL: %s element dequantization differs from the CPU's\n", dtype_name(t));
        failures++;
    }
    free(row), free(ref);
}

/* mmv_i4_kernel's decode: lane half h of a block loads nibble bytes 8h..8h+7 as two
 * little-endian words and qd_i4_vals16 turns them into elements 8h.. and 16+8h..; each
 * value must be the CPU's i4_value bit for bit. Random blocks, then zero points at the
 * edges of the one-subtraction path (-0, +-2^22, 2^22 + 1, halves, 2^30). */
static void check_i4_decode(void) {
    const int cols = 1024, nb = cols / 32;
    const int64_t rb = dtype_row_bytes(DT_I4_S32, cols);
    uint8_t *row = (uint8_t *)malloc((size_t)rb);
    random_row(DT_I4_S32, row, cols);
    const float edge[] = {-0.0f, 4194304.0f,    -4194304.0f, 4194305.0f, 0.5f,
                          -7.5f, 1073741824.0f, 7.0f,        16.0f};
    for (int b = 0; b < (int)(sizeof edge / sizeof *edge); b++)
        memcpy(row + 24 * b + 4, &edge[b], 4);
    int bad = 0;
    float amax = 0;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = row + 24 * b;
        float d, z;
        memcpy(&d, blk, 4);
        memcpy(&z, blk + 4, 4);
        for (int h = 0; h < 2; h++) {
            uint32_t q0, q1;
            memcpy(&q0, blk + 8 + 8 * h, 4);
            memcpy(&q1, blk + 12 + 8 * h, 4);
            float v[16];
            qd_i4_vals16(q0, q1, d, z, v);
            for (int k = 0; k < 16; k++) {
                const int e = k < 8 ? 8 * h + k : 16 + 8 * h + (k - 8);
                const float want = cpu::i4_value(blk, e);
                amax = fmaxf(amax, fabsf(want));
                if (memcmp(&v[k], &want, 4) != 0) {
                    if (bad < 3)
                        printf("  I4_S32 block %d (z %.9g) element %d: %.9g, CPU %.9g\n", b,
                               (double)z, e, (double)v[k], (double)want);
                    bad++;
                }
            }
        }
    }
    printf("I4_S32 GEMV decode (%d blocks): %d values differ\n", nb, bad);
    if (bad) {
        printf("FAIL: qd_i4_vals16 differs from the CPU's i4_value\n");
        failures++;
    }
    /* the largest |value| (the F16 or BF16 choice of the prefill copy): 2^30 z's block here */
    const float got = int4w_amax(row, (size_t)rb);
    if (got != amax || !(amax > 65504.0f)) {
        printf("FAIL: int4w_amax %.9g, largest |i4_value| %.9g\n", (double)got, (double)amax);
        failures++;
    }
    free(row);
}

/* ---- on a GPU: the CUDA backend's matmul against the CPU backend's ---- */

/* Largest |CUDA - CPU| over each output's sum of |w_k x_k| (the CPU's exact weights), for
 * T tokens of x (row stride ldx, y's ldy), both backends' matmul op. */
static double backend_err(struct backend *gpu, struct backend *cpu, enum dtype t, int rows,
                          int cols, int T, int64_t ldx, int64_t ldy) {
    const int64_t rb = dtype_row_bytes(t, cols);
    uint8_t *W = (uint8_t *)malloc((size_t)(rb * rows));
    float *x = (float *)calloc((size_t)(ldx * T), sizeof(float));
    float *y_cpu = (float *)calloc((size_t)(ldy * T), sizeof(float));
    float *y_gpu = (float *)calloc((size_t)(ldy * T), sizeof(float));
    float *wf = (float *)malloc(sizeof(float) * (size_t)cols * rows);
    for (int r = 0; r < rows; r++) random_row(t, W + r * rb, cols);
    for (int i = 0; i < T; i++)
        for (int k = 0; k < cols; k++) x[i * ldx + k] = uniform(-2, 2);
    for (int r = 0; r < rows; r++)
        cpu::cpu_dequant_row(t, W + r * rb, wf + (int64_t)r * cols, cols);
    float amax = 0;
    for (int64_t i = 0; i < (int64_t)rows * cols; i++) amax = fmaxf(amax, fabsf(wf[i]));

    const struct bweight wc = {W, t, rows, cols, amax};
    cpu->matmul(cpu->ctx, y_cpu, ldy, x, ldx, T, &wc);

    void *dW = gpu->alloc(gpu->ctx, (size_t)(rb * rows));
    float *dx = (float *)gpu->alloc(gpu->ctx, sizeof(float) * (size_t)(ldx * T));
    float *dy = (float *)gpu->alloc(gpu->ctx, sizeof(float) * (size_t)(ldy * T));
    gpu->upload(gpu->ctx, dW, W, (size_t)(rb * rows));
    gpu->upload(gpu->ctx, dx, x, sizeof(float) * (size_t)(ldx * T));
    const struct bweight wg = {dW, t, rows, cols, amax};
    gpu->matmul(gpu->ctx, dy, ldy, dx, ldx, T, &wg);
    gpu->download(gpu->ctx, y_gpu, dy, sizeof(float) * (size_t)(ldy * T));

    double worst = 0;
    for (int i = 0; i < T; i++)
        for (int r = 0; r < rows; r++) {
            double mag = 0;
            for (int k = 0; k < cols; k++)
                mag += fabs((double)wf[(int64_t)r * cols + k] * x[i * ldx + k]);
            const double g = y_gpu[i * ldy + r], c = y_cpu[i * ldy + r];
            const double e = g == g ? fabs(g - c) / (mag + 1e-30) : INFINITY;
            if (e > worst) worst = e;
        }
    gpu->free(gpu->ctx, dW), gpu->free(gpu->ctx, dx), gpu->free(gpu->ctx, dy);
    free(W), free(x), free(y_cpu), free(y_gpu), free(wf);
    return worst;
}

/* Weight-only types (f32 activations on both backends): up to 16 tokens the GEMVs, whose
 * weights are the CPU's values bit for bit, so only the f32 summation order differs (the
 * bound of check_dot); above 16 tokens weights and activations rounded to F16 (2^-11
 * each) before the GEMM: at most 2 * 2^-11 + f32 rounding of the summed magnitudes. The
 * strides leave gaps (ldx, ldy > cols, rows); ldx odd once (the unaligned loads). */
static int check_backend_matmul(void) {
    struct backend gpu, cpu;
    const int opened = backend_pair_open(&gpu, &cpu, "CUDA vs CPU backend matmul");
    if (opened < 0) failures++;
    if (opened <= 0) return opened < 0;
    double worst[2] = {0, 0}; /* GEMV steps, F16-copy steps */
    const enum dtype types[] = {DT_F8_E4M3_S32, DT_I4_S32};
    const int steps[] = {1, 8, 16, 17, 64};
    for (unsigned i = 0; i < sizeof types / sizeof *types; i++)
        for (unsigned j = 0; j < sizeof steps / sizeof *steps; j++) {
            const int T = steps[j], rows = 200, cols = 1024;
            const int64_t ldx = T == 8 ? cols + 1 : cols + 4, ldy = rows + 3;
            const double tol = T <= 16 ? 1e-5 : 1.2e-3;
            const double e = backend_err(&gpu, &cpu, types[i], rows, cols, T, ldx, ldy);
            printf("%-11s CUDA vs CPU matmul T=%-2d (%dx%d, ldx %lld): worst error %.2e of the "
                   "summed magnitudes (tol %.1e)\n",
                   dtype_name(types[i]), T, rows, cols, (long long)ldx, e, tol);
            if (!(e <= tol)) {
                printf("FAIL: %s CUDA matmul at T=%d differs from the CPU backend's\n",
                       dtype_name(types[i]), T);
                failures++;
            }
            if (!(e <= worst[T > 16])) worst[T > 16] = e;
        }
    backend_close(&gpu);
    backend_close(&cpu);
    printf("test_cuda_quant: CUDA vs CPU matmul, F8_E4M3_S32 and I4_S32 at T = 1, 8, 16, 17, 64: "
           "worst %.1e (GEMV, tol 1e-5), %.1e (F16 copy, tol 1.2e-3) of the summed magnitudes\n",
           worst[0], worst[1]);
    return 1;
}

int main(int argc, char **argv) {
    const int host = argc < 2 || !strcmp(argv[1], "--host");
    const int gpu = argc < 2 || !strcmp(argv[1], "--gpu");
    if (!host && !gpu) {
        fprintf(stderr, "usage: test_cuda_quant [--host | --gpu]\n");
        return 2;
    }
    if (gpu && !host) {
        const int ran = check_backend_matmul();
        if (failures) printf("%d checks failed\n", failures);
        return failures ? 1 : ran ? 0 : 77;
    }
    const enum dtype q[] = {DT_Q4_0, DT_Q4_1, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (int rep = 0; rep < 4; rep++)
        for (unsigned i = 0; i < sizeof q / sizeof *q; i++) check_dot(q[i], 256 * (rep + 1));
    const enum dtype all[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q4_0,        DT_Q4_1,
                              DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_F8_E4M3_S32, DT_I4_S32};
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++) check_dequant(all[i], 1024);
    check_i4_decode();
    if (gpu) check_backend_matmul();
    if (failures) printf("%d checks failed\n", failures);
    return failures ? 1 : 0;
}
