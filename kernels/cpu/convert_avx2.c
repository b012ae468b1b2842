#include "convert_avx2.h"

#include <immintrin.h>

#include "../../util/half.h"

int cpu_has_f16c(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }

void f16_from_f32_row_avx2(uint16_t *out, const float *x, int n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) out[i] = f32_to_f16(x[i] * scale);
}
