/* The GEMM tuning table: which way each 16-bit weight product is done on the GPU, by shape
 * and tokens per step, as a sweep on that GPU measured it (bench/bench_gpu_gemm writes the
 * table, kernels/cuda/gemm_table.inc holds the committed one, the CUDA backend reads it when
 * it opens). Plain C, no CUDA: parsed and looked up the same on any machine.
 *
 * A line (tab-separated; '#' starts a comment line):
 *   GPU-NAME  CUBLASLT-VERSION  DTYPE  ROWS  COLS  T-MAX  PICK  [anything: the timings]
 * DTYPE bf16 or f16; ROWS x COLS the weight; the line serves steps of T tokens for the
 * smallest T-MAX >= T of its shape (and the largest T-MAX serves every T above it); PICK mmv
 * (the warp-per-row kernels, T <= 8 only), ex (cublasGemmEx) or ltK (cuBLASLt, the K-th
 * algorithm of its heuristic for the step's shape, K 0..7). Only lines of the GPU and
 * library version the backend runs on are kept: any other GPU takes the default picks. */
#ifndef TPD_GEMM_TABLE_H
#define TPD_GEMM_TABLE_H

#include <stddef.h>

enum gemm_kind { GEMM_DEFAULT = 0, GEMM_MMV, GEMM_EX, GEMM_LT };
enum { GEMM_LT_RANKS = 8, GEMM_MMV_MAX_T = 8 };

struct gemm_pick {
    enum gemm_kind kind;
    int rank; /* GEMM_LT: the heuristic's rank */
};

struct gemm_entry {
    int half; /* 1: f16, 0: bf16 */
    int rows, cols, t_max;
    struct gemm_pick pick;
};

struct gemm_table {
    struct gemm_entry *e;
    int n;
};

/* Keeps text's lines for this gpu and lt_version (others skipped). 0, or -1 with err naming the
 * line and what is wrong with it (t is then empty). */
int gemm_table_load(struct gemm_table *t, const char *text, const char *gpu, long lt_version,
                    char *err);
/* The pick for a product of T tokens with a rows x cols weight: the table's, else
 * GEMM_DEFAULT. An mmv pick is returned only for T <= GEMM_MMV_MAX_T. */
struct gemm_pick gemm_table_pick(const struct gemm_table *t, int half, int rows, int cols, int T);
/* "mmv", "ex", "lt3": as in the table; buf of at least 8 bytes. */
const char *gemm_pick_name(struct gemm_pick p, char *buf, size_t n);
/* Parses a PICK word; 0, or -1. */
int gemm_pick_parse(const char *s, struct gemm_pick *p);
void gemm_table_free(struct gemm_table *t);

#endif
