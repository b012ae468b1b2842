/* The CUDA backend's block decoding (kernels/cuda/quant_dev.cuh), compiled for the host and
 * checked against the CPU backend's code on random blocks, so that it is tested on machines
 * without a GPU: unit dot products against the CPU's scalar vec_dot (same integer sums;
 * only float accumulation order may differ) and element dequantization bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/cuda/quant_dev.cuh"

extern "C" {
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
        case DT_I4_S32: break; /* the CUDA backend refuses INT4 at load: no kernel to check */
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

int main(void) {
    const enum dtype q[] = {DT_Q4_0, DT_Q4_1, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (int rep = 0; rep < 4; rep++)
        for (unsigned i = 0; i < sizeof q / sizeof *q; i++) check_dot(q[i], 256 * (rep + 1));
    const enum dtype all[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q4_0,       DT_Q4_1,
                              DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_F8_E4M3_S32};
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++) check_dequant(all[i], 1024);
    if (failures) printf("%d checks failed\n", failures);
    return failures ? 1 : 0;
}
