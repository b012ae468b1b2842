#include "matmul.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/err.h"
#include "../../util/fatal.h"
#include "matmul_avx2.h"
#include "quant.h"

/* One call: prepare the activations once (quantized as ggml would for this weight type; once
 * per distinct type for cpu_matmul_multi), then one pass over the pool in which each thread
 * takes a contiguous range of rows, aligned to 4, of every matrix.
 *
 * Scratch: the prepared activations live in a buffer owned by the calling thread (a
 * pthread key, freed when that thread exits), grown as needed and reused, so cpu_matmul
 * allocates only when a call is larger than every earlier one from that thread. Pool
 * workers only read it during the call. Several threads may call cpu_matmul at once as
 * long as each uses its own thread pool (a pool is not re-entrant). */

static atomic_int force_scalar;

void cpu_matmul_force_scalar(int on) {
    atomic_store_explicit(&force_scalar, on, memory_order_relaxed);
}

static int cpu_has_avx2(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

int cpu_matmul_has_avx2(void) {
    return !atomic_load_explicit(&force_scalar, memory_order_relaxed) && cpu_has_avx2();
}

/* tests/CMakeLists.txt builds this file a second time, for test_matmul_emu, with
 * TPD_MM_EMULATED: the AVX-VNNI and AVX-512 tiles are then compiled over an AVX2 emulation of
 * their instructions (tests/emu/x86_emu.h) and taken on any AVX2 CPU, so that the tiles a CPU
 * does not have are still run and checked against the AVX2 ones. */
#ifdef TPD_MM_EMULATED
#define cpu_has_wide(feature) 1
#else
#define cpu_has_wide(feature) __builtin_cpu_supports(feature)
#endif

static atomic_int no_vnni;

void cpu_matmul_force_no_vnni(int on) { atomic_store_explicit(&no_vnni, on, memory_order_relaxed); }

int cpu_matmul_has_vnni(void) {
    return cpu_matmul_has_avx2() && !atomic_load_explicit(&no_vnni, memory_order_relaxed) &&
           cpu_has_wide("avxvnni");
}

static atomic_int no_avx512;

void cpu_matmul_force_no_avx512(int on) {
    atomic_store_explicit(&no_avx512, on, memory_order_relaxed);
}

/* AVX-512 F, BW, VL and VNNI; not AVX-VNNI, which AMD Zen 4 lacks (its tiles use the EVEX
 * form). cpu_matmul_force_no_vnni turns these tiles off as well. */
int cpu_matmul_has_avx512(void) {
    return cpu_matmul_has_avx2() && !atomic_load_explicit(&no_vnni, memory_order_relaxed) &&
           !atomic_load_explicit(&no_avx512, memory_order_relaxed) && cpu_has_wide("avx512f") &&
           cpu_has_wide("avx512bw") && cpu_has_wide("avx512vl") && cpu_has_wide("avx512vnni");
}

/* ---- per-thread scratch ---- */

struct scratch {
    void *p;
    size_t cap;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) {
    struct scratch *s = p;
    free(s->p);
    free(s);
}

static void scratch_key_init(void) {
    if (pthread_key_create(&scratch_key, scratch_destroy) != 0) FATAL("pthread_key_create failed");
}

static void *scratch_get(size_t n) {
    pthread_once(&scratch_once, scratch_key_init);
    struct scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = xcalloc(1, sizeof *s);
        if (pthread_setspecific(scratch_key, s) != 0) FATAL("pthread_setspecific failed");
    }
    if (s->cap < n) {
        free(s->p);
        size_t cap = (n + 4095) & ~(size_t)4095;
        s->p = aligned_alloc(64, cap);
        if (!s->p) FATAL("out of memory for %zu bytes of matmul scratch", cap);
        s->cap = cap;
    }
    return s->p;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t checked_mul(size_t a, size_t b) {
    uint64_t r;
    if (size_mul(a, b, &r) != 0 || r > SIZE_MAX / 4) FATAL("cpu_matmul: size overflow");
    return (size_t)r;
}

/* ---- activation preparation ---- */

/* I4_S32 on the AVX2 path below 4 tokens takes the integer tiles (ACT_I16X2); from 4 tokens
 * on it decodes each weight group once into f32 (f32 x), as the scalar path always does. */
static enum act_kind act_kind_for(enum dtype wt, int avx2, int T) {
    switch (wt) {
    case DT_F32:
    case DT_F8_E4M3_S32: return ACT_F32;
    case DT_I4_S32: return avx2 && T < 4 ? ACT_I16X2 : ACT_F32;
    case DT_F16: return ACT_F16;
    case DT_BF16: return ACT_BF16;
    case DT_Q4_0:
    case DT_Q8_0: return ACT_Q8_0;
    case DT_Q4_1: return ACT_Q8_1;
    case DT_Q4_K:
    case DT_Q6_K: return ACT_Q8_K;
    }
    FATAL("cpu_matmul: unsupported weight type %d", (int)wt);
}

/* Sets a's shape and returns the scratch bytes it needs; act_place points its arrays at base. */
static size_t act_layout(struct act *a, enum act_kind kind, int T, int cols) {
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->T = T;
    a->cols = cols;
    a->nb = kind == ACT_Q8_K                                              ? cols / QK_K
            : (kind == ACT_Q8_0 || kind == ACT_Q8_1 || kind == ACT_I16X2) ? cols / QK
                                                                          : cols;
    const size_t n = checked_mul((size_t)T, (size_t)cols);
    switch (kind) {
    case ACT_F32: return 0;
    case ACT_F16:
    case ACT_BF16: return align64(checked_mul(n, sizeof(float)));
    case ACT_Q8_0:
    case ACT_Q8_1:
    case ACT_Q8_K: break;
    case ACT_I16X2:
        return align64(checked_mul(n, 2 * sizeof(int16_t))) +
               align64(checked_mul(checked_mul((size_t)T, (size_t)a->nb), 3 * sizeof(float)));
    }
    const size_t nbt = checked_mul((size_t)T, (size_t)a->nb);
    return align64(n) + align64(checked_mul(nbt, (kind == ACT_Q8_1 ? 2 : 1) * sizeof(float))) +
           (kind == ACT_Q8_K ? align64(checked_mul(nbt, 16 * sizeof(int16_t))) : 0);
}

static void act_place(struct act *a, uint8_t *base) {
    if (a->kind == ACT_F16 || a->kind == ACT_BF16) {
        a->xr = (float *)(void *)base;
        return;
    }
    if (a->kind == ACT_F32) return;
    if (a->kind == ACT_I16X2) {
        a->hl = (int16_t *)(void *)base;
        a->d = (float *)(void *)(base + align64((size_t)a->T * (size_t)a->cols * 4));
        return;
    }
    const size_t n = (size_t)a->T * (size_t)a->cols, nbt = (size_t)a->T * (size_t)a->nb;
    a->qs = (int8_t *)base;
    a->d = (float *)(void *)(base + align64(n));
    if (a->kind == ACT_Q8_K)
        a->bsums = (int16_t *)(void *)(base + align64(n) + align64(nbt * sizeof(float)));
}

struct prep_ctx {
    struct act *acts; /* one per distinct (x, kind); each reads its own a->x, a->ldx */
    int nacts;
    int avx2;
};

/* Tokens [t0, t1) of the rows of act i that this share covers. */
static void act_prepare_tokens(const struct prep_ctx *c, int ith, int nth) {
    for (int i = 0; i < c->nacts; i++) {
        struct act *a = &c->acts[i];
        const int n = a->cols, nb = a->nb;
        const int t0 = (int)((int64_t)a->T * ith / nth),
                  t1 = (int)((int64_t)a->T * (ith + 1) / nth);
        for (int t = t0; t < t1; t++) {
            const float *x = a->x + (int64_t)t * a->ldx;
            int8_t *qs = a->qs + (int64_t)t * n;
            switch (a->kind) {
            case ACT_F32: break;
            case ACT_F16:
                (c->avx2 ? round_row_f16_avx2 : round_row_f16)(x, n, a->xr + (int64_t)t * n);
                break;
            case ACT_BF16: round_row_bf16(x, n, a->xr + (int64_t)t * n); break;
            case ACT_Q8_0:
                (c->avx2 ? quant_row_q8_0_avx2 : quant_row_q8_0)(x, n, qs, a->d + (int64_t)t * nb);
                break;
            case ACT_Q8_1:
                (c->avx2 ? quant_row_q8_1_avx2 : quant_row_q8_1)(x, n, qs,
                                                                 a->d + (int64_t)t * nb * 2);
                break;
            case ACT_I16X2:
                quant_row_i16x2(x, n, a->hl + (int64_t)t * n * 2, a->d + (int64_t)t * nb * 3);
                break;
            case ACT_Q8_K:
                quant_row_q8_K(x, n, qs, a->d + (int64_t)t * nb, a->bsums + (int64_t)t * nb * 16);
                break;
            }
        }
    }
}

static void act_prepare_task(void *p, int ith, int nth) { act_prepare_tokens(p, ith, nth); }

/* ---- the row loops ---- */

static void mm_rows_scalar(const struct mm_job *j, int r0, int r1) {
    const struct act *a = &j->a;
    const int nb = a->nb;
    for (int r = r0; r < r1; r++) {
        const uint8_t *w = j->W + (int64_t)r * j->row_bytes;
        for (int t = 0; t < a->T; t++) {
            const int8_t *qs = a->qs + (int64_t)t * a->cols;
            float v = 0.0f;
            switch (j->wt) {
            case DT_F32:
                v = dot_f32((const float *)(const void *)w, a->x + (int64_t)t * a->ldx, a->cols);
                break;
            case DT_F16: v = dot_f16(w, a->xr + (int64_t)t * a->cols, a->cols); break;
            case DT_BF16: v = dot_bf16(w, a->xr + (int64_t)t * a->cols, a->cols); break;
            case DT_Q4_0: v = dot_q4_0_q8_0(w, qs, a->d + (int64_t)t * nb, nb); break;
            case DT_Q4_1: v = dot_q4_1_q8_1(w, qs, a->d + (int64_t)t * nb * 2, nb); break;
            case DT_Q8_0: v = dot_q8_0_q8_0(w, qs, a->d + (int64_t)t * nb, nb); break;
            case DT_Q4_K:
                v = dot_q4_K_q8_K(w, qs, a->d + (int64_t)t * nb, a->bsums + (int64_t)t * nb * 16,
                                  nb);
                break;
            case DT_Q6_K:
                v = dot_q6_K_q8_K(w, qs, a->d + (int64_t)t * nb, a->bsums + (int64_t)t * nb * 16,
                                  nb);
                break;
            case DT_F8_E4M3_S32: v = dot_f8_s32(w, a->x + (int64_t)t * a->ldx, a->cols / QK); break;
            case DT_I4_S32: v = dot_i4_s32(w, a->x + (int64_t)t * a->ldx, a->cols / QK); break;
            }
            j->y[(int64_t)t * j->ldy + r] = v;
        }
    }
}

struct mm_ctx {
    const struct mm_job *jobs;
    int njobs;
    int avx2;
    int vnni;   /* the AVX-VNNI tiles (the same bits as the AVX2 ones) */
    int avx512; /* the AVX-512 tiles (the same bits too) */
};

/* Boundary i of n over rows, rounded to a multiple of 4 so that neighbours rarely share a
 * cache line of y and the 4-row tiles stay whole. */
static int row_split(int rows, int i, int n) {
    if (i >= n) return rows;
    int64_t b = ((int64_t)rows * i / n + 2) & ~(int64_t)3;
    return b > rows ? rows : (int)b;
}

/* Every thread takes its share of every matrix, so one dispatch serves them all. */
static void mm_task(void *p, int ith, int nth) {
    const struct mm_ctx *c = p;
    for (int i = 0; i < c->njobs; i++) {
        const struct mm_job *j = &c->jobs[i];
        const int r0 = row_split(j->rows, ith, nth), r1 = row_split(j->rows, ith + 1, nth);
        if (r0 >= r1) continue;
        if (c->avx512) mm_rows_avx512(j, r0, r1);
        else if (c->vnni) mm_rows_avxvnni(j, r0, r1);
        else if (c->avx2) mm_rows_avx2(j, r0, r1);
        else mm_rows_scalar(j, r0, r1);
    }
}

/* One pass of at most CPU_MATMUL_MAX_OPS products. */
static void grouped_pass(const struct cpu_matmul_gop *ops, int n, int avx2, struct threadpool *tp) {
    /* one prepared activation per distinct (x, rows, kind), back to back in the scratch */
    struct act acts[CPU_MATMUL_MAX_OPS];
    int nacts = 0, act_of[CPU_MATMUL_MAX_OPS];
    size_t total = 0, offs[CPU_MATMUL_MAX_OPS], work = 0;
    for (int i = 0; i < n; i++) {
        const struct cpu_matmul_gop *op = &ops[i];
        if (!dtype_weight_ok(op->wt) || op->cols < 0 || dtype_row_bytes(op->wt, op->cols) < 0 ||
            op->rows < 0 || op->T < 0)
            FATAL("cpu_matmul: bad shape %d x %d of %s, T %d", op->rows, op->cols,
                  dtype_name(op->wt), op->T);
        if (op->T > 1 && (op->ldx < op->cols || op->ldy < op->rows))
            FATAL("cpu_matmul: ldx %lld < cols %d or ldy %lld < rows %d", (long long)op->ldx,
                  op->cols, (long long)op->ldy, op->rows);
        const enum act_kind kind = act_kind_for(op->wt, avx2, op->T);
        int k = 0;
        while (k < nacts &&
               !(acts[k].kind == kind && acts[k].x == op->x && acts[k].ldx == op->ldx &&
                 acts[k].T == op->T && acts[k].cols == op->cols))
            k++;
        if (k == nacts) {
            offs[nacts] = total;
            total += act_layout(&acts[nacts], kind, op->T, op->cols);
            acts[nacts].x = op->x;
            acts[nacts].ldx = op->ldx;
            work += (size_t)op->T * (size_t)op->cols;
            nacts++;
        }
        act_of[i] = k;
    }
    uint8_t *base = scratch_get(total ? total : 64);
    for (int k = 0; k < nacts; k++) act_place(&acts[k], base + offs[k]);

    struct prep_ctx prep = {.acts = acts, .nacts = nacts, .avx2 = avx2};
    /* Small batches are quantized by the caller alone: waking the pool twice costs more. */
    if (work >= 32768 && threadpool_size(tp) > 1) threadpool_run(tp, act_prepare_task, &prep);
    else act_prepare_tokens(&prep, 0, 1);

    struct mm_job jobs[CPU_MATMUL_MAX_OPS];
    int nj = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].T == 0 || ops[i].rows == 0) continue;
        jobs[nj++] = (struct mm_job){.y = ops[i].y,
                                     .ldy = ops[i].ldy,
                                     .W = ops[i].W,
                                     .row_bytes = dtype_row_bytes(ops[i].wt, ops[i].cols),
                                     .wt = ops[i].wt,
                                     .rows = ops[i].rows,
                                     .cols = ops[i].cols,
                                     .a = acts[act_of[i]]};
    }
    if (!nj) return;
    struct mm_ctx ctx = {.jobs = jobs,
                         .njobs = nj,
                         .avx2 = avx2,
                         .vnni = avx2 && cpu_matmul_has_vnni(),
                         .avx512 = avx2 && cpu_matmul_has_avx512()};
    threadpool_run(tp, mm_task, &ctx);
}

void cpu_matmul_grouped(const struct cpu_matmul_gop *ops, int n, struct threadpool *tp) {
    if (n < 0) FATAL("cpu_matmul: %d products", n);
    const int avx2 = cpu_matmul_has_avx2();
    for (int i = 0; i < n; i += CPU_MATMUL_MAX_OPS)
        grouped_pass(ops + i, n - i < CPU_MATMUL_MAX_OPS ? n - i : CPU_MATMUL_MAX_OPS, avx2, tp);
}

void cpu_matmul_multi(const struct cpu_matmul_op *ops, int n, const float *x, int64_t ldx, int T,
                      int cols, struct threadpool *tp) {
    if (n < 0 || n > CPU_MATMUL_MAX_OPS || T < 0 || cols < 0)
        FATAL("cpu_matmul: %d products, T %d, cols %d", n, T, cols);
    struct cpu_matmul_gop g[CPU_MATMUL_MAX_OPS];
    for (int i = 0; i < n; i++)
        g[i] = (struct cpu_matmul_gop){.y = ops[i].y,
                                       .ldy = ops[i].ldy,
                                       .x = x,
                                       .ldx = ldx,
                                       .T = T,
                                       .W = ops[i].W,
                                       .wt = ops[i].wt,
                                       .rows = ops[i].rows,
                                       .cols = cols};
    if (T > 0) grouped_pass(g, n, cpu_matmul_has_avx2(), tp);
}

void cpu_matmul(float *y, int64_t ldy, const float *x, int64_t ldx, int T, const void *W,
                enum dtype wt, int rows, int cols, struct threadpool *tp) {
    const struct cpu_matmul_op op = {.y = y, .ldy = ldy, .W = W, .wt = wt, .rows = rows};
    cpu_matmul_multi(&op, 1, x, ldx, T, cols, tp);
}
