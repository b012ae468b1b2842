/* Element-wise rows with AVX2 + FMA + F16C (compiled with those flags: call only where
 * cpu_has_f16c() says the CPU has them). Internal to kernels/cpu.
 *
 * f16_from_f32_row_avx2 gives util/half.h's f32_to_f16 bits: F16C rounds to nearest even,
 * keeps subnormals, saturates to infinity from 65520 and keeps a NaN's top payload bits
 * quiet, as f32_to_f16 does.
 *
 * silu_mul_row_avx2 computes x / (1 + e^-x) * u in the scalar loop's float operations, with
 * e^-x from a double-precision exponential (range reduction by ln 2, a degree-12 Taylor
 * polynomial: relative error below 2^-52) rounded once to float, so it is the correctly
 * rounded expf; glibc's expf is correct to 0.502 ulp, so the two agree but for rare
 * halfway cases (tests/test_eltwise.c counts them). */
#ifndef TPD_CPU_ELTWISE_AVX2_H
#define TPD_CPU_ELTWISE_AVX2_H

#include <stdint.h>

/* out[i] = f32_to_f16(x[i] * scale) for i < n (scale 1: plain conversion). */
void f16_from_f32_row_avx2(uint16_t *out, const float *x, int n, float scale);
/* out[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n (out may be g or u). */
void silu_mul_row_avx2(float *out, const float *g, const float *u, int n);
/* 1 when the CPU can run this module. */
int cpu_has_f16c(void);

#endif
