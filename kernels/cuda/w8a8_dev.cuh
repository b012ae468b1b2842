/* Internal to kernels/cuda: the per-value arithmetic of the FP8 W8A8 product (matmul_w8a8.cu),
 * host and device functions so that tests/cuda/test_cuda_w8a8.cu checks it on the host.
 *
 * Activations, per token: with amax the row's largest |x|, the scale is s = amax' / 448 and
 * each code e4m3(x * (448 / amax')) (round to nearest even, saturating to +-448: cuda_fp8.h's
 * __NV_SATFINITE, fp8_dev_encode), where amax' = max(amax, 2^-100) keeps 448 / amax' finite:
 * a row of zeros gets codes 0 and a finite scale, and a row below 2^-100 loses at most
 * 2^-100 per value. Decoded, code * s is x within 2^-4 |x| (half a unit of E4M3's 3-bit
 * mantissa) for |x * 448 / amax'| >= 2^-6 (normal codes), within 2^-10 s (half the
 * subnormal step 2^-9) below that.
 *
 * Weights: a DT_F8_E4M3_S32 matrix whose blocks share their row's scale (bweight.row_scaled)
 * is the E4M3 codes, rows x cols contiguous, and one f32 scale per row; w8a8_word_off gives
 * where each 4-code word of a row lies in its 36-byte blocks (f32 d | 32 codes). */
#ifndef TPD_W8A8_DEV_CUH
#define TPD_W8A8_DEV_CUH

#include <stdint.h>

#include "fp8_dev.cuh"

#define W8A8_AMAX_MIN 0x1p-100f

/* 448 / amax', the factor that takes the row's values to codes */
static __host__ __device__ __forceinline__ float w8a8_inv_scale(float amax) {
    return 448.0f / fmaxf(amax, W8A8_AMAX_MIN);
}

/* amax' / 448, the scale the product multiplies the token's codes by */
static __host__ __device__ __forceinline__ float w8a8_scale(float amax) {
    return fmaxf(amax, W8A8_AMAX_MIN) / 448.0f;
}

/* x's code for a token whose factor is inv (w8a8_inv_scale) */
static __host__ __device__ __forceinline__ uint8_t w8a8_code(float x, float inv) {
    return fp8_dev_encode(x * inv);
}

/* The byte offset, in a DT_F8_E4M3_S32 row, of word j (codes 4j..4j+3) of its codes */
static __host__ __device__ __forceinline__ int w8a8_word_off(int j) {
    return 36 * (j >> 3) + 4 + 4 * (j & 7);
}

#endif
