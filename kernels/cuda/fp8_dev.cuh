/* Internal to kernels/cuda: FP8 E4M3 codes of the KV cache on the device, with cuda_fp8.h's
 * conversions (hardware ones on sm_89 and newer). Round to nearest even, saturating to
 * +-448, NaN to NaN: util/fp8.h's rules on the host; tests/cuda/test_cuda_fp8.cu checks the
 * two agree on every code and on a sweep of floats. The row scale's exponent comes from
 * util/fp8.h itself (fp8_row_exp, fp8_exp2 are host and device functions). */
#ifndef TPD_FP8_DEV_CUH
#define TPD_FP8_DEV_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "../../util/fp8.h"

static __host__ __device__ __forceinline__ uint8_t fp8_dev_encode(float x) {
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

static __host__ __device__ __forceinline__ float fp8_dev_decode(uint8_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));
}

#endif
