/* The CUDA backend's FP8 E4M3 conversions (kernels/cuda/fp8_dev.cuh: cuda_fp8.h's, run here
 * in their host versions, so this runs without a GPU) against util/fp8.h, which the CPU
 * backend uses and tests/py/test_fp8.py checks against ml_dtypes: all 256 codes decode
 * alike, and every 2^9th float32 bit pattern, every tie between neighbouring E4M3 values
 * (and its float32 neighbours) and the overflow range encode alike. Also the row exponent
 * the device computes with util/fp8.h's host-and-device fp8_row_exp, on the same sweep. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cuda/fp8_dev.cuh"

static int failures;

static void check_encode(float x) {
    const uint8_t want = fp8_e4m3_from_f32(x), got = fp8_dev_encode(x);
    if (isnan(x) ? (got & 0x7f) != 0x7f : got != want) {
        if (failures++ < 10)
            fprintf(stderr, "encode %a: cuda_fp8.h 0x%02x, util/fp8.h 0x%02x\n", (double)x, got,
                    want);
    }
}

int main(void) {
    for (int b = 0; b < 256; b++) {
        const float want = fp8_e4m3_to_f32((uint8_t)b), got = fp8_dev_decode((uint8_t)b);
        if (isnan(want) ? !isnan(got) : memcmp(&want, &got, sizeof want) != 0) {
            fprintf(stderr, "decode 0x%02x: cuda_fp8.h %a, util/fp8.h %a\n", b, (double)got,
                    (double)want);
            failures++;
        }
    }
    long n = 0;
    for (uint64_t u = 0; u < (1ull << 32); u += 1u << 9, n++) {
        const uint32_t v = (uint32_t)u;
        float x;
        memcpy(&x, &v, sizeof x);
        check_encode(x);
        if (fp8_row_exp(fabsf(x)) != fp8_row_exp(x)) failures++; /* the sign is ignored */
    }
    for (int b = 0; b < 0x7e; b++) { /* ties between code b and b + 1, and their neighbours */
        const float lo = fp8_e4m3_to_f32((uint8_t)b), hi = fp8_e4m3_to_f32((uint8_t)(b + 1));
        const float mid = (float)(((double)lo + hi) / 2);
        const float xs[] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int i = 0; i < 3; i++, n += 2) {
            check_encode(xs[i]);
            check_encode(-xs[i]);
        }
    }
    const float big[] = {448.0f, 460.0f, 464.0f, 470.0f, 480.0f, 1e6f, 3.4e38f, INFINITY, NAN};
    for (size_t i = 0; i < sizeof big / sizeof *big; i++, n += 2) {
        check_encode(big[i]);
        check_encode(-big[i]);
    }
    if (failures) {
        fprintf(stderr, "test_cuda_fp8: %d mismatches\n", failures);
        return 1;
    }
    printf("test_cuda_fp8: 256 codes decode and %ld floats encode alike\n", n);
    return 0;
}
