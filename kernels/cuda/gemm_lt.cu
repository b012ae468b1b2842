/* 16-bit weight products through cuBLASLt, and the GEMM tuning table (kernels/gemm_table.h)
 * that says, per weight shape and tokens per step, whether a product takes the mmv kernels,
 * cublasGemmEx or one of cuBLASLt's heuristic candidates.
 *
 * cuBLASLt gets a fixed 32 MiB workspace, allocated when the backend opens and never moved,
 * so captured graphs can hold its address; cuBLAS's own handle is given the same buffer
 * (both queue on c->stream, one call at a time). The heuristic's candidates for a shape
 * (weight rows x cols, T, the output's leading dimension, each pointer's alignment) are
 * asked for once and kept in a small cache; split-K candidates that add their partial sums
 * into the output in place are excluded (CUBLASLT_REDUCTION_SCHEME_INPLACE), so a product's
 * result does not depend on the order in which blocks finish.
 *
 * FP8 products (matmul_w8a8.cu's W8A8 prefill): E4M3 weights and activations in the same
 * layout (the "TN" one FP8 requires: A transposed, B not), f32 or BF16 out, one f32 scale per
 * weight row and per token (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: D[r][t] = a[r] b[t]
 * sum_k A[r][k] B[k][t], cuBLAS 12.9 and newer on Hopper; where the heuristic offers no
 * candidate, e.g. on GPUs without that scaling, the caller falls back). */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "ops.cuh"

extern "C" {
#include "../../util/err.h"
}

enum { LT_WS_BYTES = 32 << 20, LT_CACHE = 256 };
/* lt_entry's kind: the operands' type */
enum { LT_BF16 = 0, LT_F16 = 1, LT_FP8 = 2, LT_FP8_BF16 = 3 /* FP8 in, BF16 out */ };

static const char lt_table_text[] =
#include "gemm_table.inc"
    ;

/* One shape's descriptors and heuristic candidates. */
struct lt_entry {
    int used, kind, rows, cols, T; /* kind: LT_BF16, LT_F16, LT_FP8 or LT_FP8_BF16 */
    int64_t ldy;
    int align; /* the smallest of the three pointers' alignments, capped at 256 */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulHeuristicResult_t cand[GEMM_LT_RANKS];
    int n_cand;
};

struct cuda_lt {
    cublasLtHandle_t h;
    void *ws;
    struct gemm_table table;
    long version;
    struct lt_entry cache[LT_CACHE];
    int next_victim;
};

static void entry_free(struct lt_entry *e) {
    if (!e->used) return;
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(e->op));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(e->a));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(e->b));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(e->d));
    memset(e, 0, sizeof *e);
}

int cuda_lt_open(struct cuda_ctx *c, const char *gpu, char *err) {
    struct cuda_lt *lt = (struct cuda_lt *)calloc(1, sizeof *lt);
    if (!lt) return err_set(err, "backend \"cuda\": out of host memory");
    lt->version = (long)cublasLtGetVersion();
    if (gemm_table_load(&lt->table, lt_table_text, gpu, lt->version, err)) {
        free(lt);
        return -1;
    }
    cublasStatus_t s = cublasLtCreate(&lt->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        gemm_table_free(&lt->table);
        free(lt);
        return err_set(err, "backend \"cuda\": cuBLASLt: %s", cublasGetStatusString(s));
    }
    cudaError_t e = cudaMalloc(&lt->ws, LT_WS_BYTES);
    if (e != cudaSuccess) {
        cudaGetLastError();
        CUBLAS_CHECK(cublasLtDestroy(lt->h));
        gemm_table_free(&lt->table);
        free(lt);
        return err_set(err, "backend \"cuda\": the 32 MiB GEMM workspace: %s",
                       cudaGetErrorString(e));
    }
    CUBLAS_CHECK(cublasSetWorkspace(c->cublas, lt->ws, LT_WS_BYTES));
    c->lt = lt;
    return 0;
}

void cuda_lt_close(struct cuda_ctx *c) {
    struct cuda_lt *lt = c->lt;
    if (!lt) return;
    for (int i = 0; i < LT_CACHE; i++) entry_free(&lt->cache[i]);
    CUBLAS_CHECK(cublasLtDestroy(lt->h));
    CUDA_CHECK(cudaFree(lt->ws));
    gemm_table_free(&lt->table);
    free(lt);
    c->lt = NULL;
}

long cuda_lt_version(const struct cuda_ctx *c) { return c->lt->version; }
int cuda_lt_table_lines(const struct cuda_ctx *c) { return c->lt->table.n; }

struct gemm_pick cuda_lt_pick(const struct cuda_ctx *c, int half, int rows, int cols, int T) {
    return gemm_table_pick(&c->lt->table, half, rows, cols, T);
}

static int align_of(const void *p) {
    uintptr_t v = (uintptr_t)p;
    int a = 256;
    while (a > 1 && v % (uintptr_t)a) a /= 2;
    return a;
}

static void set_attr(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const void *v,
                     size_t n) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, v, n));
}

/* LT_FP8: the per-row and per-token scale vectors (outer-vector mode) */
static void set_f8_scales(cublasLtMatmulDesc_t op, const float *w_scale, const float *x_scale) {
    set_attr(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
    set_attr(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale, sizeof x_scale);
}

/* Column-major, as cuBLAS sees row-major data: W (rows x cols, row-major) is a cols x rows
 * matrix with ld cols, used transposed; the activations xh (T x cols, row-major) cols x T
 * with ld cols; y (T x ldy floats) rows x T with ld ldy. D = W^T-as-stored * xh, F32 out.
 * LT_FP8: the scale vectors are set before the heuristic is asked (then on every call). */
static struct lt_entry *lt_entry(struct cuda_ctx *c, int kind, int rows, int cols, int T,
                                 int64_t ldy, int align, const float *w_scale,
                                 const float *x_scale) {
    struct cuda_lt *lt = c->lt;
    for (int i = 0; i < LT_CACHE; i++) {
        struct lt_entry *e = &lt->cache[i];
        if (e->used && e->kind == kind && e->rows == rows && e->cols == cols && e->T == T &&
            e->ldy == ldy && e->align == align)
            return e;
    }
    struct lt_entry *e = &lt->cache[lt->next_victim];
    lt->next_victim = (lt->next_victim + 1) % LT_CACHE;
    entry_free(e);
    const int fp8 = kind == LT_FP8 || kind == LT_FP8_BF16;
    const cudaDataType_t dt = fp8 ? CUDA_R_8F_E4M3 : kind == LT_F16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    set_attr(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (fp8) {
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        set_attr(e->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
        set_attr(e->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
        set_f8_scales(e->op, w_scale, x_scale);
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->a, dt, (uint64_t)cols, (uint64_t)rows, cols));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->b, dt, (uint64_t)cols, (uint64_t)T, cols));
    const cudaDataType_t dd = kind == LT_FP8_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&e->d, dd, (uint64_t)rows, (uint64_t)T, ldy));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = LT_WS_BYTES;
    const uint32_t al = (uint32_t)align;
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_MASK &
                         ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
    const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
    int n = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt->h, e->op, e->a, e->b, e->d, e->d, pref,
                                                      GEMM_LT_RANKS, e->cand, &n);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    e->n_cand = s == CUBLAS_STATUS_SUCCESS ? n : 0;
    e->used = 1, e->kind = kind, e->rows = rows, e->cols = cols, e->T = T, e->ldy = ldy,
    e->align = align;
    return e;
}

/* The alignment every operand keeps, each column included: the smallest of the pointers'
 * and the column strides' (in bytes), capped at 256. */
static int lt_align(const float *y, int64_t ldy, const void *xh, const struct bweight *w) {
    int al = align_of(y);
    const uintptr_t more[] = {(uintptr_t)xh, (uintptr_t)w->data, (uintptr_t)ldy * 4,
                              (uintptr_t)w->cols * 2};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        const int a = align_of((const void *)more[i]);
        if (a < al) al = a;
    }
    return al;
}

int cuda_lt_candidates(struct cuda_ctx *c, float *y, int64_t ldy, const void *xh, int T,
                       const struct bweight *w) {
    return lt_entry(c, w->type == DT_F16 ? LT_F16 : LT_BF16, w->rows, w->cols, T, ldy,
                    lt_align(y, ldy, xh, w), NULL, NULL)
        ->n_cand;
}

int cuda_lt_matmul(struct cuda_ctx *c, float *y, int64_t ldy, const void *xh, int T,
                   const struct bweight *w, int rank) {
    struct lt_entry *e = lt_entry(c, w->type == DT_F16 ? LT_F16 : LT_BF16, w->rows, w->cols, T, ldy,
                                  lt_align(y, ldy, xh, w), NULL, NULL);
    if (rank >= e->n_cand) return -1;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(c->lt->h, e->op, &one, w->data, e->a, xh, e->b, &zero, y,
                                      e->d, y, e->d, &e->cand[rank].algo, c->lt->ws, LT_WS_BYTES,
                                      c->stream);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

/* The FP8 product's entry: the alignment of the output, its column stride, both code
 * matrices (their column stride cols bytes) and the scale vectors */
static struct lt_entry *lt_entry_f8(struct cuda_ctx *c, const struct lt_f8 *f) {
    const int64_t ldb = f->ldd * (f->d_bf16 ? 2 : 4);
    int al = align_of(f->d);
    const uintptr_t more[] = {(uintptr_t)ldb,     (uintptr_t)f->w_codes, (uintptr_t)f->x_codes,
                              (uintptr_t)f->cols, (uintptr_t)f->w_scale, (uintptr_t)f->x_scale};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) {
        const int a = align_of((const void *)more[i]);
        if (a < al) al = a;
    }
    return lt_entry(c, f->d_bf16 ? LT_FP8_BF16 : LT_FP8, f->rows, f->cols, f->T, f->ldd, al,
                    f->w_scale, f->x_scale);
}

int cuda_lt_f8_candidates(struct cuda_ctx *c, const struct lt_f8 *f) {
    return lt_entry_f8(c, f)->n_cand;
}

int cuda_lt_matmul_f8(struct cuda_ctx *c, const struct lt_f8 *f) {
    struct lt_entry *e = lt_entry_f8(c, f);
    if (!e->n_cand) return -1;
    set_f8_scales(e->op, f->w_scale, f->x_scale);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasLtMatmul(c->lt->h, e->op, &one, f->w_codes, e->a, f->x_codes, e->b,
                                      &zero, f->d, e->d, f->d, e->d, &e->cand[0].algo, c->lt->ws,
                                      LT_WS_BYTES, c->stream);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}
