/* The AVX-512 (F, BW, VNNI) and AVX-VNNI intrinsics kernels/cpu/matmul_avx2.c uses, emulated
 * lane for lane on AVX2, so test_matmul_emu runs the AVX-VNNI and AVX-512 tiles on a CPU that
 * has neither (AMD Zen 3 has no AVX-512, Zen 4 no AVX-VNNI). Force-included (-include) before
 * the tiles' source: it takes <immintrin.h> first, then renames the types and intrinsics.
 * A 512-bit register is two AVX2 halves, lanes 0-7 in lo and 8-15 in hi; every operation
 * is the instruction's definition per lane (Intel SDM), integer sums wrapping as vpdpbusd's
 * do. Upper halves the instructions leave undefined (the 256 -> 512 casts) are zero here.
 * Names <immintrin.h> defines as macros are undefined first. */
#ifndef TPD_TESTS_X86_EMU_H
#define TPD_TESTS_X86_EMU_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    __m256 lo, hi;
} emu_m512;
typedef struct {
    __m256i lo, hi;
} emu_m512i;
typedef struct {
    __m256d lo, hi;
} emu_m512d;

#define EMU static inline __attribute__((always_inline))

EMU emu_m512 emu_mm512_setzero_ps(void) {
    return (emu_m512){_mm256_setzero_ps(), _mm256_setzero_ps()};
}
EMU emu_m512i emu_mm512_setzero_si512(void) {
    return (emu_m512i){_mm256_setzero_si256(), _mm256_setzero_si256()};
}
EMU emu_m512i emu_mm512_set1_epi8(char c) {
    return (emu_m512i){_mm256_set1_epi8(c), _mm256_set1_epi8(c)};
}
EMU emu_m512i emu_mm512_setr_epi32(int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7,
                                   int a8, int a9, int a10, int a11, int a12, int a13, int a14,
                                   int a15) {
    return (emu_m512i){_mm256_setr_epi32(a0, a1, a2, a3, a4, a5, a6, a7),
                       _mm256_setr_epi32(a8, a9, a10, a11, a12, a13, a14, a15)};
}
EMU emu_m512i emu_mm512_castsi256_si512(__m256i a) {
    return (emu_m512i){a, _mm256_setzero_si256()};
}
EMU emu_m512 emu_mm512_castps256_ps512(__m256 a) { return (emu_m512){a, _mm256_setzero_ps()}; }
EMU __m256 emu_mm512_castps512_ps256(emu_m512 a) { return a.lo; }
EMU emu_m512d emu_mm512_castps_pd(emu_m512 a) {
    return (emu_m512d){_mm256_castps_pd(a.lo), _mm256_castps_pd(a.hi)};
}
EMU __m256d emu_mm512_extractf64x4_pd(emu_m512d a, int imm) { return imm & 1 ? a.hi : a.lo; }
EMU emu_m512i emu_mm512_inserti64x4(emu_m512i a, __m256i b, int imm) {
    if (imm & 1) a.hi = b;
    else a.lo = b;
    return a;
}
EMU emu_m512i emu_mm512_and_si512(emu_m512i a, emu_m512i b) {
    return (emu_m512i){_mm256_and_si256(a.lo, b.lo), _mm256_and_si256(a.hi, b.hi)};
}
EMU emu_m512i emu_mm512_srli_epi16(emu_m512i a, unsigned imm) {
    const __m128i n = _mm_cvtsi32_si128((int)imm);
    return (emu_m512i){_mm256_srl_epi16(a.lo, n), _mm256_srl_epi16(a.hi, n)};
}
EMU emu_m512i emu_mm512_broadcast_i32x4(__m128i a) {
    const __m256i b = _mm256_broadcastsi128_si256(a);
    return (emu_m512i){b, b};
}
EMU emu_m512 emu_mm512_fmadd_ps(emu_m512 a, emu_m512 b, emu_m512 c) {
    return (emu_m512){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
EMU emu_m512 emu_mm512_cvtepi32_ps(emu_m512i a) {
    return (emu_m512){_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)};
}
/* vpermps: lane i takes a's lane idx[i] mod 16 */
EMU emu_m512 emu_mm512_permutexvar_ps(emu_m512i idx, emu_m512 a) {
    int32_t ix[16];
    float v[16], r[16];
    memcpy(ix, &idx.lo, 32);
    memcpy(ix + 8, &idx.hi, 32);
    memcpy(v, &a.lo, 32);
    memcpy(v + 8, &a.hi, 32);
    for (int i = 0; i < 16; i++) r[i] = v[ix[i] & 15];
    emu_m512 out;
    memcpy(&out.lo, r, 32);
    memcpy(&out.hi, r + 8, 32);
    return out;
}
/* vpdpbusd on 8 int32 lanes: each adds its four unsigned(a) x signed(b) byte products,
 * without saturation (modulo 2^32) */
EMU __m256i emu_dpbusd8(__m256i src, __m256i a, __m256i b) {
    uint8_t ua[32];
    int8_t sb[32];
    uint32_t acc[8];
    memcpy(ua, &a, 32);
    memcpy(sb, &b, 32);
    memcpy(acc, &src, 32);
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 4; k++)
            acc[i] += (uint32_t)((int32_t)ua[4 * i + k] * (int32_t)sb[4 * i + k]);
    __m256i out;
    memcpy(&out, acc, 32);
    return out;
}
EMU emu_m512i emu_mm512_dpbusd_epi32(emu_m512i src, emu_m512i a, emu_m512i b) {
    return (emu_m512i){emu_dpbusd8(src.lo, a.lo, b.lo), emu_dpbusd8(src.hi, a.hi, b.hi)};
}

#undef __m512
#define __m512 emu_m512
#undef __m512i
#define __m512i emu_m512i
#undef __m512d
#define __m512d emu_m512d
#undef _mm512_setzero_ps
#define _mm512_setzero_ps emu_mm512_setzero_ps
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 emu_mm512_setzero_si512
#undef _mm512_set1_epi8
#define _mm512_set1_epi8 emu_mm512_set1_epi8
#undef _mm512_setr_epi32
#define _mm512_setr_epi32 emu_mm512_setr_epi32
#undef _mm512_castsi256_si512
#define _mm512_castsi256_si512 emu_mm512_castsi256_si512
#undef _mm512_castps256_ps512
#define _mm512_castps256_ps512 emu_mm512_castps256_ps512
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 emu_mm512_castps512_ps256
#undef _mm512_castps_pd
#define _mm512_castps_pd emu_mm512_castps_pd
#undef _mm512_extractf64x4_pd
#define _mm512_extractf64x4_pd emu_mm512_extractf64x4_pd
#undef _mm512_inserti64x4
#define _mm512_inserti64x4 emu_mm512_inserti64x4
#undef _mm512_and_si512
#define _mm512_and_si512 emu_mm512_and_si512
#undef _mm512_srli_epi16
#define _mm512_srli_epi16 emu_mm512_srli_epi16
#undef _mm512_broadcast_i32x4
#define _mm512_broadcast_i32x4 emu_mm512_broadcast_i32x4
#undef _mm512_fmadd_ps
#define _mm512_fmadd_ps emu_mm512_fmadd_ps
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps emu_mm512_cvtepi32_ps
#undef _mm512_permutexvar_ps
#define _mm512_permutexvar_ps emu_mm512_permutexvar_ps
#undef _mm512_dpbusd_epi32
#define _mm512_dpbusd_epi32 emu_mm512_dpbusd_epi32
#undef _mm256_dpbusd_avx_epi32
#define _mm256_dpbusd_avx_epi32 emu_dpbusd8
#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_epi32 emu_dpbusd8

#endif
