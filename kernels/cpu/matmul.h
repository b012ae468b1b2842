/* Matrix products of f32 activations with weights in their stored type (F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), never dequantizing whole matrices. Quantized weights
 * take activations quantized per row the way llama.cpp does (Q8_0 / Q8_1 / Q8_K blocks)
 * and integer dot products; AVX2 when the CPU has it (checked at run time), scalar otherwise.
 * Called from one rank's compute thread; spreads rows over the thread pool. */
#ifndef TPD_CPU_MATMUL_H
#define TPD_CPU_MATMUL_H

#include <stdint.h>

#include "../../util/dtype.h"
#include "../../util/threadpool.h"

/* y[t*ldy + r] = sum_k W[r][k] * x[t*ldx + k]   for t < T, r < rows, k < cols.
 * W holds `rows` rows of `cols` elements of type wt, each row dtype_row_bytes(wt, cols)
 * bytes, back to back. cols must be a multiple of the type's block size.
 * Thread safety: the quantized activations live in a scratch buffer owned by the calling
 * thread (grown on demand, freed when that thread exits), so concurrent calls from different
 * threads are fine as long as each uses its own pool (a pool is not re-entrant). */
void cpu_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, int T, const void *W,
                enum dtype wt, int rows, int cols, struct threadpool *tp);

/* Several products sharing x (q/k/v, gate/up): x is prepared once per activation type and
 * one pass over the pool computes them all; each thread takes its share of every matrix.
 * Same semantics as cpu_matmul for each op, all with `cols` columns. */
#define CPU_MATMUL_MAX_OPS 8
struct cpu_matmul_op {
    float *y; /* y[t*ldy + r] */
    int64_t ldy;
    const void *W; /* rows x cols of type wt */
    enum dtype wt;
    int rows;
};
void cpu_matmul_multi(const struct cpu_matmul_op *ops, int n, const float *x, int64_t ldx, int T,
                      int cols, struct threadpool *tp);

/* Products that each have their own activations, shape and weights (the experts of a
 * mixture-of-experts layer, each over its own tokens): per op what cpu_matmul computes,
 * bit for bit, in one pass over the pool per CPU_MATMUL_MAX_OPS ops rather than one per op;
 * activations shared by several ops (same x, ldx, T, cols) are prepared once. */
struct cpu_matmul_gop {
    float *y; /* y[t*ldy + r] */
    int64_t ldy;
    const float *x; /* x[t*ldx + k] */
    int64_t ldx;
    int T;
    const void *W; /* rows x cols of type wt */
    enum dtype wt;
    int rows, cols;
};
void cpu_matmul_grouped(const struct cpu_matmul_gop *ops, int n, struct threadpool *tp);

/* Dequantize n elements (a multiple of the block size) of type t into f32. */
void cpu_dequant_row(enum dtype t, const void *src, float *dst, int64_t n);

/* 1 if the AVX2 path is in use (for logs and benchmarks). */
int cpu_matmul_has_avx2(void);
/* Force the scalar path (tests compare the two). */
void cpu_matmul_force_scalar(int on);
/* 1 if the AVX-VNNI tiles are in use: the AVX2 path's bits with vpdpbusd for Q4_0 / Q4_1
 * (x86 CPUs since Alder Lake / Sapphire Rapids); forcing them off lets tests and
 * benchmarks compare. */
int cpu_matmul_has_vnni(void);
void cpu_matmul_force_no_vnni(int on);
/* 1 if the AVX-512 tiles are in use (Q4_1 over 512-bit vpdpbusd; the same bits again). */
int cpu_matmul_has_avx512(void);
void cpu_matmul_force_no_avx512(int on);

#endif
