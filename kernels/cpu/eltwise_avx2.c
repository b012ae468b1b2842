#include "eltwise_avx2.h"

#include <immintrin.h>
#include <math.h>

#include "../../util/half.h"

int cpu_has_f16c(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

void f16_from_f32_row_avx2(uint16_t *out, const float *x, int n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(
            (__m128i *)(out + i),
            _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) out[i] = f32_to_f16(x[i] * scale);
}

/* e^y in double for y in [-110, 100] (NaN stays NaN): y = k ln2 + r, |r| <= ln2 / 2, with ln2
 * in two parts (k ln2_hi exact for |k| < 2^11), e^r by Taylor to r^12 (error below
 * 0.35^13 / 13! < 2^-52), times 2^k built in the exponent bits. */
static inline __m256d exp_pd(__m256d y) {
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(y, _mm256_set1_pd(1.4426950408889634)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816490e-01), y);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770002e-10), r);
    static const double c[13] = {1.0,
                                 1.0,
                                 1.0 / 2,
                                 1.0 / 6,
                                 1.0 / 24,
                                 1.0 / 120,
                                 1.0 / 720,
                                 1.0 / 5040,
                                 1.0 / 40320,
                                 1.0 / 362880,
                                 1.0 / 3628800,
                                 1.0 / 39916800,
                                 1.0 / 479001600};
    __m256d p = _mm256_set1_pd(c[12]);
    for (int i = 11; i >= 0; i--) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c[i]));
    const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    const __m256i two_k = _mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52);
    return _mm256_mul_pd(p, _mm256_castsi256_pd(two_k));
}

/* e^y for 8 floats, correctly rounded (see the header); beyond [-110, 100] the float result
 * is 0 or infinity either way, so y is clamped there first (NaN passes: min/max return
 * their second operand when one is NaN). */
static inline __m256 exp_ps(__m256 y) {
    y = _mm256_max_ps(_mm256_set1_ps(-110.0f), _mm256_min_ps(_mm256_set1_ps(100.0f), y));
    const __m128 lo = _mm256_cvtpd_ps(exp_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(y))));
    const __m128 hi = _mm256_cvtpd_ps(exp_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(y, 1))));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

void silu_mul_row_avx2(float *out, const float *g, const float *u, int n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp_ps(_mm256_xor_ps(x, neg));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)),
                                                _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) { /* the tail through the same exponential, one lane used */
        float xs[8] = {-g[i]}, es[8];
        _mm256_storeu_ps(es, exp_ps(_mm256_loadu_ps(xs)));
        out[i] = g[i] / (1.0f + es[0]) * u[i];
    }
}
