// link: tpd_kernels
/* cpu_matmul and its pieces. For every weight type: random valid blocks, random x, odd row
 * counts, several block multiples of columns, T in {1,2,3,7,16}, strides larger than the
 * shape, pools of 1/2/3 threads. Each result is checked twice:
 *  - AVX2 path against the scalar path: both see bit-identical quantized activations (checked
 *    separately), so they differ only in float summation order: bound (terms + 16) * 2^-22
 *    times the sum of the absolute terms;
 *  - both against a double-precision product of cpu_dequant_row(W) and the unquantized x,
 *    within the error that activation quantization allows (derived per element below) plus
 *    float summation error.
 * cpu_dequant_row itself is checked against the gguf Python package in
 * tests/py/test_quant_dequant.py, and against hand-computed blocks here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_avx2.h"
#include "kernels/cpu/quant.h"
#include "util/threadpool.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}
static float rnd_unit(void) { return (float)(rnd() & 0xffffff) / (float)0x1000000; } /* [0, 1) */
static float rnd_sym(void) { return rnd_unit() * 2.0f - 1.0f; }                      /* [-1, 1) */

static const enum dtype all_types[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0,        DT_Q4_0,
                                       DT_Q4_1, DT_Q4_K, DT_Q6_K, DT_F8_E4M3_S32, DT_I4_S32};

static void put_f16(uint8_t *p, float f) {
    uint16_t h = f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random valid blocks: random bytes for the quants, sane scales. */
static void fill_weights(enum dtype t, uint8_t *w, int rows, int cols) {
    const int64_t bytes = dtype_row_bytes(t, cols) * rows;
    for (int64_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    const int bb = dtype_block_bytes(t);
    for (int64_t o = 0; o < bytes; o += bb) {
        uint8_t *p = w + o;
        switch (t) {
        case DT_F32: {
            float f = rnd_sym();
            memcpy(p, &f, 4);
            break;
        }
        case DT_F16: put_f16(p, rnd_sym()); break;
        case DT_BF16: {
            uint16_t h = f32_to_bf16(rnd_sym());
            memcpy(p, &h, 2);
            break;
        }
        case DT_Q8_0:
        case DT_Q4_0: put_f16(p, 0.002f + 0.02f * rnd_unit()); break;
        case DT_Q4_1:
            put_f16(p, 0.002f + 0.02f * rnd_unit());
            put_f16(p + 2, 0.1f * rnd_sym());
            break;
        case DT_Q4_K:
            put_f16(p, 0.0005f + 0.002f * rnd_unit());
            put_f16(p + 2, 0.001f * rnd_unit());
            break;
        case DT_Q6_K: put_f16(p + 208, 0.0005f + 0.002f * rnd_unit()); break;
        case DT_I4_S32: { /* a scale (F16- or F32-like) and an integer zero point 0..16 */
            const float d = 0.0005f + 0.005f * rnd_unit(), z = (float)(rnd() % 17);
            memcpy(p, &d, 4);
            memcpy(p + 4, &z, 4);
            break;
        }
        case DT_F8_E4M3_S32: { /* any code but NaN (the loader refuses those); now and then a
                                * scale >= 2^100 (the AVX2 decode's other branch) */
            const float d = rnd() % 16 ? 0.0005f + 0.005f * rnd_unit()
                                       : 0x1p101f * (1 + rnd_unit());
            memcpy(p, &d, 4);
            for (int k = 4; k < 36; k++)
                if ((p[k] & 0x7f) == 0x7f) p[k] ^= 1;
            break;
        }
        }
    }
}

/* x: random in [-1, 1), with some blocks all zero and some scaled up, to reach the amax = 0
 * branch of the quantizers and blocks of different magnitude. */
static void fill_x(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = rnd_sym();
    for (int b = 0; b + 32 <= n; b += 32) {
        uint32_t r = rnd() % 8;
        if (r == 0) memset(x + b, 0, 32 * sizeof(float));
        if (r == 1)
            for (int i = 0; i < 32; i++) x[b + i] *= 8.0f;
    }
}

/* ---- reference and error bound ---- */

/* Per element bound of |x_k - (value the kernel multiplies W_k with)|. Rounding x to fp16 /
 * bf16 is within half an ulp: 2^-11 / 2^-8 relative, 2^-25 absolute near zero (fp16
 * subnormals). Q8_0/Q8_1: q = round(x * 127/amax) is within 0.5 (+ float error of the
 * product, < 1e-4) of x/d, d = amax/127, and the stored fp16(d) is within 2^-11 d (or 2^-25)
 * of d while |q| <= 127. Q8_K keeps d in f32: 0.5 d plus float error. */
static void act_error(enum dtype t, const float *x, int n, double *e) {
    switch (t) {
    case DT_F32:
    case DT_F8_E4M3_S32:
    case DT_I4_S32:
        for (int k = 0; k < n; k++) e[k] = 0;
        break;
    case DT_F16:
        for (int k = 0; k < n; k++) e[k] = fmax(ldexp(fabs(x[k]), -11), ldexp(1, -25));
        break;
    case DT_BF16:
        for (int k = 0; k < n; k++) e[k] = ldexp(fabs(x[k]), -8) + 1e-38;
        break;
    case DT_Q8_0:
    case DT_Q4_0:
    case DT_Q4_1:
    case DT_Q4_K:
    case DT_Q6_K: {
        const int bs = (t == DT_Q4_K || t == DT_Q6_K) ? 256 : 32;
        for (int b = 0; b < n; b += bs) {
            double amax = 0;
            for (int k = b; k < b + bs; k++) amax = fmax(amax, fabs(x[k]));
            const double d = amax / 127;
            const double eb = bs == 256 ? d * (0.5 + 1e-4)
                                        : d * (0.5 + 1e-4) + 127 * (ldexp(d, -11) + ldexp(1, -25));
            for (int k = b; k < b + bs; k++) e[k] = eb;
        }
        break;
    }
    }
}

/* Offsets that the kernels apply through activation sums rather than per element: Q4_1's m
 * (added as m * s, s = fp16(d * sum q)) and Q4_K's dmin * min (through the Q8_K group sums).
 * Read back through cpu_dequant_row of the row with every quant set to 0. */
static void weight_offsets(enum dtype t, const uint8_t *row, int cols, float *off) {
    const int64_t rb = dtype_row_bytes(t, cols);
    uint8_t *z = malloc((size_t)rb);
    memcpy(z, row, (size_t)rb);
    if (t == DT_Q4_1)
        for (int64_t o = 0; o < rb; o += 20) memset(z + o + 4, 0, 16);
    else if (t == DT_Q4_K)
        for (int64_t o = 0; o < rb; o += 144) memset(z + o + 16, 0, 128);
    if (t == DT_Q4_1 || t == DT_Q4_K) cpu_dequant_row(t, z, off, cols);
    else memset(off, 0, sizeof(float) * (size_t)cols);
    free(z);
}

struct expect {
    double ref;   /* double-precision W_dequant . x */
    double bound; /* allowed |y - ref| */
    double mag;   /* sum of the absolute terms the kernel adds (for AVX2 vs scalar) */
    int nterms;
};

static struct expect expect_dot(enum dtype t, const float *w, const float *off, const float *x,
                                const double *e, int cols) {
    struct expect r = {0, 0, 0, 0};
    double a = 0, eact = 0, eoff = 0;
    const int bs = dtype_block_elems(t) > 1 ? dtype_block_elems(t) : 1;
    for (int k = 0; k < cols; k++) {
        r.ref += (double)w[k] * x[k];
        a += fabs((double)w[k]) * fabs((double)x[k]);
        /* W_k = (scaled quant) + offset: the quant part meets the quantized x_k... */
        eact += (fabs((double)w[k]) + fabs((double)off[k])) * e[k];
        r.mag += (fabs((double)w[k]) + 2 * fabs((double)off[k])) * (fabs((double)x[k]) + e[k]);
    }
    /* ...and the offset part (constant over 32 elements for both types) meets s or the
     * group sums, whose error is at most the sum of the per element errors plus, for Q4_1,
     * the fp16 rounding of s: 2^-11 * d * 32 * 127 (+ 2^-25 near zero). */
    for (int g = 0; g + 32 <= cols && (t == DT_Q4_1 || t == DT_Q4_K); g += 32) {
        double se = 0, amax = 0;
        for (int k = g; k < g + 32; k++) {
            se += e[k];
            amax = fmax(amax, fabs((double)x[k]));
        }
        if (t == DT_Q4_1) se += ldexp(amax / 127 * 32 * 127, -11) + ldexp(1, -25);
        eoff += fabs((double)off[g]) * se;
    }
    r.nterms = bs > 1 ? 3 * (cols / bs) : cols;
    const double efp = (r.nterms + 16) * ldexp(1, -22) * (r.mag + eoff);
    r.bound = eact + eoff + efp + a * ldexp(1, -20);
    return r;
}

/* ---- matmul checks ---- */

static struct threadpool *pools[4]; /* NULL, 1, 2, 3 threads */
static double worst_ratio;          /* largest |y - ref| / bound seen, printed at the end */

static void check_case(enum dtype t, int rows, int cols, int T, int pool, int ldx_pad,
                       int ldy_pad) {
    const int64_t rb = dtype_row_bytes(t, cols);
    assert_true(rb > 0);
    uint8_t *W = malloc((size_t)(rb * rows));
    fill_weights(t, W, rows, cols);
    const int64_t ldx = cols + ldx_pad, ldy = rows + ldy_pad;
    float *x = malloc(sizeof(float) * (size_t)(ldx * T));
    for (int tt = 0; tt < T; tt++) fill_x(x + tt * ldx, cols);
    float *y_simd = malloc(sizeof(float) * (size_t)(ldy * T));
    float *y_scal = malloc(sizeof(float) * (size_t)(ldy * T));
    for (int64_t i = 0; i < ldy * T; i++) y_simd[i] = y_scal[i] = NAN; /* sentinels */

    cpu_matmul_force_scalar(1);
    assert_int_equal(cpu_matmul_has_avx2(), 0);
    cpu_matmul(y_scal, ldy, x, ldx, T, W, t, rows, cols, pools[pool]);
    cpu_matmul_force_scalar(0);
    cpu_matmul(y_simd, ldy, x, ldx, T, W, t, rows, cols, pools[pool]);

    float *wd = malloc(sizeof(float) * (size_t)cols), *off = malloc(sizeof(float) * (size_t)cols);
    double *e = malloc(sizeof(double) * (size_t)cols);
    for (int r = 0; r < rows; r++) {
        cpu_dequant_row(t, W + r * rb, wd, cols);
        weight_offsets(t, W + r * rb, cols, off);
        for (int tt = 0; tt < T; tt++) {
            const float *xt = x + tt * ldx;
            act_error(t, xt, cols, e);
            const struct expect ex = expect_dot(t, wd, off, xt, e, cols);
            const double ys = y_scal[tt * ldy + r], yv = y_simd[tt * ldy + r];
            const double tight = (ex.nterms + 16) * ldexp(1, -22) * ex.mag + 1e-30;
            if (!(fabs(ys - ex.ref) <= ex.bound) || !(fabs(yv - ex.ref) <= ex.bound) ||
                !(fabs(yv - ys) <= tight)) {
                fail_msg("%s rows %d cols %d T %d pool %d: row %d token %d: simd %.9g scalar %.9g "
                         "ref %.9g (bound %.3g, simd-scalar bound %.3g)",
                         dtype_name(t), rows, cols, T, pool, r, tt, yv, ys, ex.ref, ex.bound,
                         tight);
            }
            if (ex.bound > 0) {
                worst_ratio = fmax(worst_ratio, fabs(ys - ex.ref) / ex.bound);
                worst_ratio = fmax(worst_ratio, fabs(yv - ex.ref) / ex.bound);
            }
        }
    }
    /* nothing written between rows and ldy */
    for (int tt = 0; tt < T; tt++)
        for (int64_t i = rows; i < ldy; i++) {
            assert_true(isnan(y_scal[tt * ldy + i]));
            assert_true(isnan(y_simd[tt * ldy + i]));
        }
    free(W);
    free(x);
    free(y_simd);
    free(y_scal);
    free(wd);
    free(off);
    free(e);
}

static void check_type(enum dtype t) {
    const int be = dtype_block_elems(t);
    int colsv[4];
    int ncols = 0;
    if (be == 1) {
        colsv[ncols++] = 1;
        colsv[ncols++] = 13;
        colsv[ncols++] = 64;
        colsv[ncols++] = 200;
    } else {
        colsv[ncols++] = be;
        colsv[ncols++] = 2 * be;
        colsv[ncols++] = 3 * be;
        if (be == 32) colsv[ncols++] = 7 * be;
    }
    const int rowsv[] = {1, 5, 33};
    const int Tv[] = {1, 2, 3, 7, 16};
    int pool = 0;
    for (size_t ri = 0; ri < 3; ri++)
        for (int ci = 0; ci < ncols; ci++)
            for (size_t ti = 0; ti < 5; ti++) {
                pool = (pool + 1) % 4; /* cycle NULL, 1, 2, 3 threads */
                const int pad = (int)(rnd() % 3) * 5;
                check_case(t, rowsv[ri], colsv[ci], Tv[ti], pool, pad, pad + 3);
            }
}

static void test_matmul_f32(void **s) {
    (void)s;
    check_type(DT_F32);
}
static void test_matmul_f16(void **s) {
    (void)s;
    check_type(DT_F16);
}
static void test_matmul_bf16(void **s) {
    (void)s;
    check_type(DT_BF16);
}
static void test_matmul_q8_0(void **s) {
    (void)s;
    check_type(DT_Q8_0);
}
static void test_matmul_q4_0(void **s) {
    (void)s;
    check_type(DT_Q4_0);
}
static void test_matmul_q4_1(void **s) {
    (void)s;
    check_type(DT_Q4_1);
}
static void test_matmul_q4_K(void **s) {
    (void)s;
    check_type(DT_Q4_K);
}
static void test_matmul_q6_K(void **s) {
    (void)s;
    check_type(DT_Q6_K);
}

/* Large enough (T * cols >= 32768) that the activations are quantized by the pool, and the
 * SmolLM2 shapes with all pools. */
static void test_matmul_big(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
        const enum dtype t = all_types[i];
        const int cols = (t == DT_Q4_K || t == DT_Q6_K) ? 1536 : 576;
        check_case(t, 67, cols, 64, 3, 0, 0);
        check_case(t, 192, cols, 1, 2, 0, 0);
    }
}

/* cpu_matmul_multi: several matrices of mixed types sharing x give, bit for bit, what
 * separate cpu_matmul calls give (same prepared activations, same kernels, same splits). */
static void test_matmul_multi(void **s) {
    (void)s;
    const enum dtype types[] = {DT_Q4_1, DT_Q8_0, DT_Q4_1, DT_F16,
                                DT_Q4_0, DT_F32,  DT_BF16, DT_Q4_K};
    const int rows[] = {33, 17, 4, 9, 1, 12, 7, 5};
    const int cols = 512, Tv[] = {1, 5, 70};
    for (int scalar = 0; scalar < 2; scalar++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int pool = 0; pool < 4; pool++) {
                const int T = Tv[ti];
                struct cpu_matmul_op ops[8];
                float *ysep[8];
                float *x = malloc(sizeof(float) * (size_t)(T * cols));
                for (int tt = 0; tt < T; tt++) fill_x(x + tt * cols, cols);
                for (int i = 0; i < 8; i++) {
                    const int64_t rb = dtype_row_bytes(types[i], cols);
                    uint8_t *W = malloc((size_t)(rb * rows[i]));
                    fill_weights(types[i], W, rows[i], cols);
                    ops[i] = (struct cpu_matmul_op){
                        .y = malloc(sizeof(float) * (size_t)(rows[i] + 2) * T),
                        .ldy = rows[i] + 2,
                        .W = W,
                        .wt = types[i],
                        .rows = rows[i]};
                    ysep[i] = malloc(sizeof(float) * (size_t)(rows[i] + 2) * T);
                    for (int64_t k = 0; k < (rows[i] + 2) * T; k++) ops[i].y[k] = ysep[i][k] = 0.0f;
                }
                cpu_matmul_force_scalar(scalar);
                cpu_matmul_multi(ops, 8, x, cols, T, cols, pools[pool]);
                for (int i = 0; i < 8; i++)
                    cpu_matmul(ysep[i], ops[i].ldy, x, cols, T, ops[i].W, types[i], rows[i], cols,
                               pools[pool]);
                cpu_matmul_force_scalar(0);
                for (int i = 0; i < 8; i++) {
                    assert_memory_equal(ops[i].y, ysep[i],
                                        sizeof(float) * (size_t)(rows[i] + 2) * T);
                    free((void *)ops[i].W);
                    free(ops[i].y);
                    free(ysep[i]);
                }
                free(x);
            }
}

/* cpu_matmul_grouped: products with their own x, T, cols and types (more than one pass's
 * worth, two sharing x, one with no tokens) give, bit for bit, what separate cpu_matmul
 * calls give. */
static void test_matmul_grouped(void **s) {
    (void)s;
    enum { N = 11 };
    const enum dtype types[N] = {DT_Q8_0, DT_Q8_0, DT_Q4_1, DT_F16,  DT_Q4_0, DT_F32,
                                 DT_BF16, DT_Q4_K, DT_Q8_0, DT_Q6_K, DT_Q8_0};
    const int rows[N] = {33, 17, 4, 9, 1, 12, 7, 5, 64, 8, 20};
    const int Tv[N] = {1, 1, 3, 70, 2, 5, 1, 4, 9, 1, 0};
    for (int scalar = 0; scalar < 2; scalar++)
        for (int pool = 0; pool < 4; pool += 3) {
            struct cpu_matmul_gop ops[N];
            float *ysep[N], *xs[N];
            for (int i = 0; i < N; i++) {
                const int cols = types[i] == DT_Q4_K || types[i] == DT_Q6_K ? 768 : 512;
                const int T = Tv[i];
                xs[i] = malloc(sizeof(float) * (size_t)((T ? T : 1) * (cols + 3)));
                for (int tt = 0; tt < T; tt++) fill_x(xs[i] + tt * (cols + 3), cols);
                uint8_t *W = malloc((size_t)(dtype_row_bytes(types[i], cols) * rows[i]));
                fill_weights(types[i], W, rows[i], cols);
                const size_t ny = (size_t)(rows[i] + 2) * (size_t)(T ? T : 1);
                ops[i] = (struct cpu_matmul_gop){.y = calloc(ny, sizeof(float)),
                                                 .ldy = rows[i] + 2,
                                                 .x = i == 1 ? xs[0] : xs[i],
                                                 .ldx = cols + 3,
                                                 .T = T,
                                                 .W = W,
                                                 .wt = types[i],
                                                 .rows = rows[i],
                                                 .cols = cols};
                ysep[i] = calloc(ny, sizeof(float));
            }
            cpu_matmul_force_scalar(scalar);
            cpu_matmul_grouped(ops, N, pools[pool]);
            for (int i = 0; i < N; i++)
                cpu_matmul(ysep[i], ops[i].ldy, ops[i].x, ops[i].ldx, ops[i].T, ops[i].W, types[i],
                           rows[i], ops[i].cols, pools[pool]);
            cpu_matmul_force_scalar(0);
            for (int i = 0; i < N; i++) {
                const size_t ny = (size_t)(rows[i] + 2) * (size_t)(Tv[i] ? Tv[i] : 1);
                assert_memory_equal(ops[i].y, ysep[i], sizeof(float) * ny);
                free((void *)ops[i].W);
                free(ops[i].y);
                free(ysep[i]);
                free(xs[i]);
            }
        }
}

/* Each row is computed by one thread with lane-for-lane the same arithmetic wherever its
 * 4-row group starts, so the result does not depend on the number of threads. */
static void test_matmul_thread_invariance(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
        const enum dtype t = all_types[i];
        const int rows = 101, cols = 512, T = 5;
        const int64_t rb = dtype_row_bytes(t, cols);
        uint8_t *W = malloc((size_t)(rb * rows));
        fill_weights(t, W, rows, cols);
        float *x = malloc(sizeof(float) * T * cols), *y1 = malloc(sizeof(float) * T * rows),
              *y3 = malloc(sizeof(float) * T * rows);
        for (int tt = 0; tt < T; tt++) fill_x(x + tt * cols, cols);
        for (int scalar = 0; scalar < 2; scalar++) {
            cpu_matmul_force_scalar(scalar);
            cpu_matmul(y1, rows, x, cols, T, W, t, rows, cols, pools[1]);
            cpu_matmul(y3, rows, x, cols, T, W, t, rows, cols, pools[3]);
            assert_memory_equal(y1, y3, sizeof(float) * T * rows);
        }
        cpu_matmul_force_scalar(0);
        free(W);
        free(x);
        free(y1);
        free(y3);
    }
}

/* ---- dequantization against hand-computed blocks ---- */

static void test_dequant_known(void **s) {
    (void)s;
    uint8_t b[210];
    float y[256];
    /* Q4_0: d = 0.5; byte j = (j & 15) | ((15 - j) << 4) -> element j: (j - 8)/2, j+16: (7 - j)/2
     */
    put_f16(b, 0.5f);
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    cpu_dequant_row(DT_Q4_0, b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_float_equal(y[j], (j - 8) * 0.5f, 0);
        assert_float_equal(y[j + 16], (7 - j) * 0.5f, 0);
    }
    /* Q4_1: d = 0.25, m = -1: q * 0.25 - 1 */
    put_f16(b, 0.25f);
    put_f16(b + 2, -1.0f);
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | ((15 - j) << 4));
    cpu_dequant_row(DT_Q4_1, b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_float_equal(y[j], j * 0.25f - 1.0f, 0);
        assert_float_equal(y[j + 16], (15 - j) * 0.25f - 1.0f, 0);
    }
    /* Q8_0: d = 2, q = j - 16, and -128 */
    put_f16(b, 2.0f);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j - 16);
    b[2 + 31] = 0x80;
    cpu_dequant_row(DT_Q8_0, b, y, 32);
    for (int j = 0; j < 31; j++) assert_float_equal(y[j], (j - 16) * 2.0f, 0);
    assert_float_equal(y[31], -256.0f, 0);
    /* Q4_K: d = 1, dmin = 0.5, scales: sub-block s has scale s+1 and min 2s (6-bit packing
     * written out by hand), every nibble = 3 -> element in sub-block s: 3(s+1) - s */
    memset(b, 0, sizeof b);
    put_f16(b, 1.0f);
    put_f16(b + 2, 0.5f);
    uint8_t sc[8], mn[8];
    for (int i = 0; i < 8; i++) {
        sc[i] = (uint8_t)(i + 1);
        mn[i] = (uint8_t)(2 * i + 40); /* >= 16 for i >= 4... uses the high bits too */
    }
    for (int i = 0; i < 4; i++) {
        b[4 + i] = (uint8_t)((sc[i] & 63) | ((sc[i + 4] >> 4) << 6));
        b[8 + i] = (uint8_t)((mn[i] & 63) | ((mn[i + 4] >> 4) << 6));
        b[12 + i] = (uint8_t)((sc[i + 4] & 15) | ((mn[i + 4] & 15) << 4));
    }
    memset(b + 16, 0x33, 128);
    cpu_dequant_row(DT_Q4_K, b, y, 256);
    for (int e = 0; e < 256; e++) {
        const int s5 = e / 32;
        assert_float_equal(y[e], 3.0f * (float)sc[s5] - 0.5f * (float)mn[s5], 0);
    }
    /* Q6_K: d = 0.5, scales[i] = i - 8, every 6-bit quant = 40 (low 4 bits 8, high 2 bits 2):
     * element e = 0.5 * (e/16 - 8) * (40 - 32) */
    memset(b, 0x88, 128);
    memset(b + 128, 0xaa, 64);
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(int8_t)(i - 8);
    put_f16(b + 208, 0.5f);
    cpu_dequant_row(DT_Q6_K, b, y, 256);
    for (int e = 0; e < 256; e++) assert_float_equal(y[e], 0.5f * (float)(e / 16 - 8) * 8.0f, 0);
    /* I4_S32: d = 0.25, z = 9, byte j = j | (15 - j) << 4 -> element j: (j - 9) / 4,
     * j + 16: (6 - j) / 4 */
    const float d4 = 0.25f, z4 = 9.0f;
    memcpy(b, &d4, 4);
    memcpy(b + 4, &z4, 4);
    for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | ((15 - j) << 4));
    cpu_dequant_row(DT_I4_S32, b, y, 32);
    for (int j = 0; j < 16; j++) {
        assert_float_equal(y[j], (float)(j - 9) * 0.25f, 0);
        assert_float_equal(y[j + 16], (float)(6 - j) * 0.25f, 0);
    }
}

/* ---- conversions ---- */

__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

static void test_f16_conversion(void **s) {
    (void)s;
    if (!__builtin_cpu_supports("f16c")) skip();
    for (uint32_t h = 0; h < 65536; h++) {
        float a = f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
        assert_memory_equal(&a, &b, sizeof a);
    }
    const float edge[] = {
        0.0f,       -0.0f,     65504.0f,     65519.99f,       65520.0f,
        -65520.0f,  1e9f,      0x1p-14f,     0x1p-24f,        0x1p-25f,
        0x1.8p-25f, 0x1p-26f,  0x1.ffcp-15f, 1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f,
        INFINITY,   -INFINITY, 1e-40f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        assert_int_equal(f32_to_f16(edge[i]), hw_f32_to_f16(edge[i]));
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rnd() ^ (rnd() << 21);
        float f;
        memcpy(&f, &u, sizeof f);
        if (isnan(f)) continue;
        if (f32_to_f16(f) != hw_f32_to_f16(f))
            fail_msg("f32_to_f16(%a) = %04x, F16C %04x", (double)f, f32_to_f16(f),
                     hw_f32_to_f16(f));
    }
}

static void test_bf16_conversion(void **s) {
    (void)s;
    /* round to nearest even on the 16 dropped bits */
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(f32_to_bf16(0x1.01p0f), 0x3f80);  /* below half: down */
    assert_int_equal(f32_to_bf16(0x1.018p0f), 0x3f81); /* above half: up */
    assert_int_equal(f32_to_bf16(0x1.01p0f + 0x1p-9f), 0x3f81);
    assert_int_equal(f32_to_bf16(-2.0f), 0xc000);
    assert_int_equal(f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    for (int i = 0; i < 100000; i++) {
        float f = rnd_sym() * 1000;
        float r = bf16_to_f32(f32_to_bf16(f));
        assert_true(fabsf(r - f) <= ldexpf(fabsf(f), -8));
    }
}

/* ---- activation quantizers ---- */

static void test_quantizers(void **s) {
    (void)s;
    enum { N = 576 * 4 };
    float x[N], d1[N / 32], d2[N / 32], ds1[N / 16], ds2[N / 16], r1[N], r2[N], dk[N / 256];
    int8_t q1[N], q2[N];
    int16_t bs[N / 16];
    for (int rep = 0; rep < 50; rep++) {
        fill_x(x, N);
        if (rep == 1) /* amax = 127 in every block, the rest k + 0.5: every x * 127/amax is a tie */
            for (int i = 0; i < N; i++)
                x[i] = i % 32 == 0 ? 127.0f : (float)((int)(rnd() % 254) - 127) + 0.5f;
        /* Q8_0: properties of ggml's rule */
        quant_row_q8_0(x, N, q1, d1);
        for (int b = 0; b < N / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
            assert_float_equal(d1[b], f16_to_f32(f32_to_f16(amax / 127.0f)), 0);
            for (int i = 0; i < 32; i++) {
                const float v = amax ? x[32 * b + i] * (127.0f / amax) : 0;
                assert_true(fabsf(v - q1[32 * b + i]) <= 0.5f);
                if (fabsf(v - q1[32 * b + i]) == 0.5f)
                    assert_int_equal(q1[32 * b + i] % 2, 0); /* ties to even */
            }
        }
        quant_row_q8_1(x, N, q2, ds1);
        assert_memory_equal(q1, q2, N);
        for (int b = 0; b < N / 32; b++) {
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += q2[32 * b + i];
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
            assert_float_equal(ds1[2 * b], d1[b], 0);
            assert_float_equal(ds1[2 * b + 1], f16_to_f32(f32_to_f16(amax / 127.0f * (float)sum)),
                               0);
        }
        /* Q8_K: |x - d q| <= |d|/2, group sums */
        quant_row_q8_K(x, N, q1, dk, bs);
        for (int b = 0; b < N / 256; b++) {
            for (int i = 0; i < 256; i++)
                assert_true(fabs(x[256 * b + i] - (double)dk[b] * q1[256 * b + i]) <=
                            fabs(dk[b]) * (0.5 + 1e-5));
            for (int g = 0; g < 16; g++) {
                int sum = 0;
                for (int i = 0; i < 16; i++) sum += q1[256 * b + 16 * g + i];
                assert_int_equal(bs[16 * b + g], sum);
            }
        }
        /* the AVX2 versions give the same bits */
        if (!cpu_matmul_has_avx2()) continue;
        quant_row_q8_0(x, N, q1, d1);
        quant_row_q8_0_avx2(x, N, q2, d2);
        assert_memory_equal(q1, q2, N);
        assert_memory_equal(d1, d2, sizeof d1);
        quant_row_q8_1(x, N, q1, ds1);
        quant_row_q8_1_avx2(x, N, q2, ds2);
        assert_memory_equal(q1, q2, N);
        assert_memory_equal(ds1, ds2, sizeof ds1);
        round_row_f16(x, N - 3, r1);
        round_row_f16_avx2(x, N - 3, r2);
        assert_memory_equal(r1, r2, sizeof(float) * (N - 3));
    }
}

/* The AVX-VNNI tiles (vpdpbusd) and the AVX-512 ones, each where the CPU has them (everywhere
 * in test_matmul_emu), give the AVX2 tiles' bits for every type and token count,
 * on rows that end mid-group and extreme quants (all 15s against activations of +-127). */
static void test_vnni_same_bits(void **s) {
    (void)s;
    const int vnni = cpu_matmul_has_vnni(), avx512 = cpu_matmul_has_avx512();
    if (!vnni && !avx512) {
        printf("vnni: skipped: this CPU has neither AVX-VNNI nor AVX-512 VNNI\n");
        return;
    }
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++)
        for (int extreme = 0; extreme < 2; extreme++) {
            const enum dtype t = all_types[i];
            const int rows = 103, cols = 512, T = 7;
            const int64_t rb = dtype_row_bytes(t, cols);
            uint8_t *W = malloc((size_t)(rb * rows));
            fill_weights(t, W, rows, cols);
            float *x = malloc(sizeof(float) * T * cols), *y0 = malloc(sizeof(float) * T * rows),
                  *y1 = malloc(sizeof(float) * T * rows);
            for (int tt = 0; tt < T; tt++) fill_x(x + tt * cols, cols);
            if (extreme &&
                (t == DT_Q4_0 || t == DT_Q4_1)) { /* every nibble 15, x at the block's amax */
                const int bb = dtype_block_bytes(t), head = t == DT_Q4_0 ? 2 : 4;
                for (int64_t o = 0; o < rb * rows; o += bb)
                    memset(W + o + head, 0xff, (size_t)(bb - head));
                for (int k = 0; k < T * cols; k++) x[k] = k % 3 ? 1.0f : -1.0f;
            }
            for (int tn = 1; tn <= T; tn++) {
                cpu_matmul_force_no_vnni(1);
                cpu_matmul(y0, rows, x, cols, tn, W, t, rows, cols, pools[2]);
                cpu_matmul_force_no_vnni(0);
                for (int wide = 0; wide < 2;
                     wide++) { /* the AVX-VNNI tiles, then the AVX-512 ones */
                    if ((wide && !avx512) || (!wide && !vnni)) continue;
                    cpu_matmul_force_no_avx512(!wide);
                    cpu_matmul(y1, rows, x, cols, tn, W, t, rows, cols, pools[2]);
                    assert_memory_equal(y0, y1, sizeof(float) * (size_t)(tn * rows));
                }
                cpu_matmul_force_no_avx512(0);
            }
            free(W);
            free(x);
            free(y0);
            free(y1);
        }
#ifdef TPD_MM_EMULATED
    const char *how = " (emulated on AVX2)";
#else
    const char *how = "";
#endif
    printf("vnni: the %s%s give the AVX2 tiles' bits (%zu types, 1..7 tokens)\n",
           vnni && avx512 ? "AVX-VNNI and AVX-512 tiles"
           : vnni         ? "AVX-VNNI tiles (no AVX-512 here)"
                          : "AVX-512 tiles (no AVX-VNNI here)",
           how, sizeof all_types / sizeof *all_types);
}

static int setup(void **s) {
    (void)s;
    pools[0] = NULL;
    for (int i = 1; i < 4; i++) pools[i] = threadpool_create(i);
    return 0;
}

static int teardown(void **s) {
    (void)s;
    for (int i = 1; i < 4; i++) threadpool_free(pools[i]);
    printf("largest |y - ref| / bound over all cases: %.3g (AVX2 %s)\n", worst_ratio,
           cpu_matmul_has_avx2() ? "on" : "absent");
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_conversion), cmocka_unit_test(test_bf16_conversion),
        cmocka_unit_test(test_quantizers),     cmocka_unit_test(test_dequant_known),
        cmocka_unit_test(test_matmul_f32),     cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_bf16),    cmocka_unit_test(test_matmul_q8_0),
        cmocka_unit_test(test_matmul_q4_0),    cmocka_unit_test(test_matmul_q4_1),
        cmocka_unit_test(test_matmul_q4_K),    cmocka_unit_test(test_matmul_q6_K),
        cmocka_unit_test(test_matmul_big),     cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_matmul_grouped), cmocka_unit_test(test_matmul_thread_invariance),
        cmocka_unit_test(test_vnni_same_bits),
    };
#ifdef TPD_MM_EMULATED
    /* test_matmul_emu: only the dispatched tiles, over the emulation (tests/CMakeLists.txt) */
    cmocka_set_test_filter("test_vnni_same_bits");
#endif
    return cmocka_run_group_tests(tests, setup, teardown);
}
