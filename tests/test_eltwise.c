// link: tpd_kernels
/* kernels/cpu/eltwise_avx2: the F16C row conversion gives f32_to_f16's bits (every float
 * class: normals, F16 subnormals, the rounding boundaries, overflow to infinity, NaN), and
 * the vector SiLU gate x / (1 + e^-x) * u gives the scalar formula's bits on the correctly
 * rounded e^-x ((float) of double exp) on 4 million inputs, the special values and both ends
 * of the exponential's range included; it equals the formula on glibc's expf but for the
 * ~0.06% of inputs where glibc's expf misses correct rounding (printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/eltwise_avx2.h"
#include "util/half.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_f16_row(void **state) {
    (void)state;
    if (!cpu_has_f16c()) {
        printf("skipped: no F16C\n");
        return;
    }
    enum { N = 1 << 16 };
    static float x[N];
    static uint16_t got[N];
    for (int i = 0; i < N; i++) {
        const uint32_t r = rnd();
        switch (i % 4) {
        case 0: x[i] = from_bits(r); break; /* any class, NaN included */
        case 1:
            x[i] = from_bits((r & 0x80001fffu) | (0x33000000u + (r % 24) * 0x00800000u));
            break; /* 2^-25.. 2^-2 */
        case 2:
            x[i] = from_bits(((uint32_t)(0x38000000u + (r & 0x0fffffffu))) | (r & 0x80000000u));
            break;
        default:
            x[i] = (float)((int)(r % 140000) - 70000) + 0.5f * (float)(r & 1) +
                   0x1p-11f * (float)((r >> 1) & 3);
        }
    }
    for (int s = 0; s < 2; s++) {
        const float scale = s ? 0x1p-7f : 1.0f;
        f16_from_f32_row_avx2(got, x, N - 3, scale); /* a tail past the last 8 */
        for (int i = 0; i < N - 3; i++) {
            const uint16_t want = f32_to_f16(x[i] * scale);
            if (got[i] != want)
                fail_msg("x %a scale %a: got %04x want %04x", (double)x[i], (double)scale, got[i],
                         want);
        }
    }
}

static void silu_ref(float *out, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void test_silu_row(void **state) {
    (void)state;
    if (!cpu_has_f16c()) {
        printf("skipped: no AVX2/FMA/F16C\n");
        return;
    }
    enum { N = 1 << 22 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N),
          *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    const float special[] = {0.0f,    -0.0f,  INFINITY, -INFINITY, NAN,      1e-45f,
                             -1e-45f, 88.72f, -88.72f,  103.9f,    -103.9f,  104.0f,
                             -110.0f, 120.0f, -120.0f,  FLT_MAX,   -FLT_MAX, 0x1p-126f};
    const int ns = (int)(sizeof special / sizeof *special);
    for (int i = 0; i < N; i++) {
        const uint32_t r = rnd();
        g[i] = i < ns  ? special[i]
               : i % 2 ? (float)r / 4294967296.0f * 240.0f - 120.0f
                       : from_bits(r & 0xbfffffffu);
        u[i] = i % 3 ? 1.0f : (float)rnd() / 4294967296.0f * 4.0f - 2.0f;
    }
    silu_mul_row_avx2(a, g, u, N - 5); /* a tail past the last 8 */
    silu_ref(b, g, u, N - 5);
    long differ = 0, off = 0;
    for (int i = 0; i < N - 5; i++) {
        differ += !(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])));
        /* the scalar formula's float operations on the correctly rounded e^-x: the same bits */
        const float e = (float)exp(-(double)g[i]), want = g[i] / (1.0f + e) * u[i];
        if (!(a[i] == want || (isnan(a[i]) && isnan(want)))) {
            if (++off <= 5)
                printf("g %a u %a: vector %a, want %a\n", (double)g[i], (double)u[i], (double)a[i],
                       (double)want);
        }
    }
    printf("silu: %ld of %d outputs differ from the formula on the correctly rounded exponential, "
           "%ld from it on "
           "glibc's expf\n",
           off, N - 5, differ);
    assert_true(off <= 2); /* only where double exp itself rounds the wrong way: ~2^-29 of inputs */
    assert_true(differ <= N / 1000); /* glibc's expf misses correct rounding on ~0.06% of inputs */
    free(g);
    free(u);
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_f16_row),
                                       cmocka_unit_test(test_silu_row)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
