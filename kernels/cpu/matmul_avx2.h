/* The AVX2 + FMA + F16C half of cpu_matmul: vector activation quantizers (same bits as the
 * scalar ones in quant.c) and the row-range kernels. matmul_avx2.c is compiled with those
 * flags, so call these only after cpu_matmul_has_avx2()-style checks. Internal to kernels/cpu. */
#ifndef TPD_CPU_MATMUL_AVX2_H
#define TPD_CPU_MATMUL_AVX2_H

#include <stdint.h>

#include "../../util/dtype.h"
#include "quant.h"

/* One cpu_matmul call, as the row kernels see it. */
struct mm_job {
    float *y; /* y[t*ldy + r] */
    int64_t ldy;
    const uint8_t *W; /* rows of row_bytes bytes */
    int64_t row_bytes;
    enum dtype wt;
    int rows, cols;
    struct act a; /* the activations, prepared for wt */
};

/* Rows [r0, r1) of y, for every token. */
void mm_rows_avx2(const struct mm_job *job, int r0, int r1);
/* The same bits with AVX-VNNI as well (matmul_avxvnni.c); only where the CPU has it. */
void mm_rows_avxvnni(const struct mm_job *job, int r0, int r1);
/* The same bits with AVX-512 F/BW/VNNI (matmul_avx512.c); only where the CPU has them. */
void mm_rows_avx512(const struct mm_job *job, int r0, int r1);

void quant_row_q8_0_avx2(const float *x, int n, int8_t *qs, float *d);
void quant_row_q8_1_avx2(const float *x, int n, int8_t *qs, float *ds);
void round_row_f16_avx2(const float *x, int n, float *out);

#endif
