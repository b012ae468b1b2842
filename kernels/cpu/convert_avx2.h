/* Row conversions with F16C (compiled with AVX2 + F16C flags: call only where the CPU has
 * them, cpu_has_f16c). The same bits as util/half.h's scalar conversions: F16C rounds to
 * nearest even, keeps subnormals, saturates to infinity from 65520 and keeps a NaN's top
 * payload bits quiet, as f32_to_f16 does. Internal to kernels/cpu. */
#ifndef TPD_CPU_CONVERT_AVX2_H
#define TPD_CPU_CONVERT_AVX2_H

#include <stdint.h>

/* out[i] = f32_to_f16(x[i] * scale) for i < n (scale 1: plain conversion). */
void f16_from_f32_row_avx2(uint16_t *out, const float *x, int n, float scale);
/* 1 when the CPU can run this module. */
int cpu_has_f16c(void);

#endif
