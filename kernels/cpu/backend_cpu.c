#include "backend_cpu.h"

#include <assert.h>
#include <math.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../util/fatal.h"
#include "../../util/fp8.h"
#include "../../util/half.h"
#include "../../util/log.h"
#include "attention.h"
#include "attention_item.h"
#include "eltwise_avx2.h"
#include "matmul.h"
#include "../../util/threadpool.h"

/* The angles of the last rope call (every layer of a step asks for the same positions):
 * cos and sin of pos[t] * inv_freq[i], computed once a step instead of once a layer. */
struct rope_cache {
    int32_t *pos;
    int T, pos_cap, cap, half;
    const float *inv_freq;
    float *cs, *sn; /* [T][half] */
};

struct cpu_ctx {
    struct threadpool *tp;
    int n_threads;
    struct cpu_attn *attn;
    int f16c; /* eltwise_avx2.c's rows (AVX2, FMA and F16C) */
    struct rope_cache rope;
    float *gx; /* activations gathered for weights with a gather index (gather_x) */
    size_t gx_cap;
};

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    /* 64-byte alignment keeps SIMD loads and rows of quantized blocks cache-friendly */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        FATAL("out of memory allocating %zu bytes", bytes);
    memset(p, 0, bytes);
    return p;
}

static void cpu_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
}

/* The context's gather scratch, at least n floats. */
static float *gather_scratch(struct cpu_ctx *c, size_t n) {
    if (c->gx_cap < n) {
        free(c->gx);
        c->gx = xmalloc(sizeof(float) * n);
        c->gx_cap = n;
    }
    return c->gx;
}

/* Weights with a gather index (struct bweight): their T rows of x regrouped into dst as the
 * stored columns take them, zeros at the padding, so that the ordinary kernel reads each
 * weight block once for all T tokens. */
static void gather_x(float *dst, const float *x, int64_t ldx, int T, const struct bweight *w) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (int64_t)t * ldx;
        float *d = dst + (int64_t)t * w->cols;
        for (int j = 0; j < w->cols; j++) d[j] = w->gather[j] >= 0 ? xt[w->gather[j]] : 0.0f;
    }
}

static void cpu_matmul_op(void *vctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                          const struct bweight *w) {
    struct cpu_ctx *c = vctx;
    if (w->rows == 0 || T == 0) return;
    if (w->gather) {
        float *gx = gather_scratch(c, (size_t)T * (size_t)w->cols);
        gather_x(gx, x, ldx, T, w);
        x = gx, ldx = w->cols;
    }
    cpu_matmul(y, ldy, x, ldx, T, w->data, w->type, w->rows, w->cols, c->tp);
}

static void cpu_matmul_grouped_op(void *vctx, const struct bmatmul *ops, int n) {
    struct cpu_ctx *c = vctx;
    struct cpu_matmul_gop g[CPU_MATMUL_MAX_OPS];
    for (int i = 0; i < n; i += CPU_MATMUL_MAX_OPS) {
        const int m = n - i < CPU_MATMUL_MAX_OPS ? n - i : CPU_MATMUL_MAX_OPS;
        size_t gathered = 0; /* floats of the pass's gathered activations */
        for (int j = 0; j < m; j++)
            if (ops[i + j].w->gather) gathered += (size_t)ops[i + j].T * (size_t)ops[i + j].w->cols;
        float *gx = gathered ? gather_scratch(c, gathered) : NULL;
        for (int j = 0; j < m; j++) {
            const struct bmatmul *o = &ops[i + j];
            g[j] = (struct cpu_matmul_gop){.y = o->y,
                                           .ldy = o->ldy,
                                           .x = o->x,
                                           .ldx = o->ldx,
                                           .T = o->T,
                                           .W = o->w->data,
                                           .wt = o->w->type,
                                           .rows = o->w->rows,
                                           .cols = o->w->cols};
            if (o->w->gather) {
                gather_x(gx, o->x, o->ldx, o->T, o->w);
                g[j].x = gx, g[j].ldx = o->w->cols;
                gx += (size_t)o->T * (size_t)o->w->cols;
            }
        }
        cpu_matmul_grouped(g, m, c->tp);
    }
}

static void cpu_embed(void *vctx, float *x, const int32_t *tok, int T, const struct bweight *table,
                      int row0) {
    (void)vctx;
    int64_t rb = dtype_row_bytes(table->type, table->cols);
    for (int t = 0; t < T; t++) {
        float *dst = x + (int64_t)t * table->cols;
        int r = tok[t] - row0;
        if (r >= 0 && r < table->rows)
            cpu_dequant_row(table->type, (const char *)table->data + (int64_t)r * rb, dst,
                            table->cols);
        else memset(dst, 0, sizeof(float) * (size_t)table->cols);
    }
}

static void rmsnorm_row(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0; /* double: the sum of squares of a few thousand values loses bits in f32 */
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void cpu_rmsnorm(void *vctx, float *y, const float *x, const float *w, int T, int n,
                        float eps) {
    (void)vctx;
    for (int t = 0; t < T; t++) rmsnorm_row(y + (int64_t)t * n, x + (int64_t)t * n, w, n, eps);
}

/* x += y, then y_norm = rmsnorm(x) * w, rows split over the pool's threads in contiguous
 * ranges (each row computed by one thread exactly as alone: the split changes no bit) */
struct add_rmsnorm_task {
    float *x, *y_norm;
    const float *y, *w;
    int T, n;
    float eps;
};

static void add_rmsnorm_run(void *p, int ith, int nth) {
    const struct add_rmsnorm_task *a = p;
    const int t0 = (int)((int64_t)a->T * ith / nth), t1 = (int)((int64_t)a->T * (ith + 1) / nth);
    for (int t = t0; t < t1; t++) {
        float *xr = a->x + (int64_t)t * a->n;
        const float *yr = a->y + (int64_t)t * a->n;
        for (int i = 0; i < a->n; i++) xr[i] += yr[i];
        rmsnorm_row(a->y_norm + (int64_t)t * a->n, xr, a->w, a->n, a->eps);
    }
}

static void cpu_add_rmsnorm(void *vctx, float *x, const float *y, float *y_norm, const float *w,
                            int T, int n, float eps) {
    const struct cpu_ctx *c = vctx;
    struct add_rmsnorm_task a = {
        .x = x, .y_norm = y_norm, .y = y, .w = w, .T = T, .n = n, .eps = eps};
    if (T > 1 && (int64_t)T * n >= 2048 && c->n_threads > 1)
        threadpool_run(c->tp, add_rmsnorm_run, &a);
    else add_rmsnorm_run(&a, 0, 1);
}

static void cpu_head_rmsnorm(void *vctx, float *x, int64_t ld, int T, int n_heads, int hd,
                             const float *w, float eps) {
    (void)vctx;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++) {
            float *p = x + t * ld + (int64_t)h * hd;
            rmsnorm_row(p, p, w, hd, eps);
        }
}

static void cpu_add_bias(void *vctx, float *x, int64_t ld, int T, int n, const float *b) {
    (void)vctx;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) x[t * ld + i] += b[i];
}

/* Points rc at the angles of (pos, inv_freq), computing them only when they changed. */
static void rope_angles(struct rope_cache *rc, int T, int half, const int32_t *pos,
                        const float *inv_freq) {
    if (rc->T == T && rc->half == half && rc->inv_freq == inv_freq &&
        !memcmp(rc->pos, pos, sizeof *pos * (size_t)T))
        return;
    if (T * half > rc->cap) {
        free(rc->cs);
        free(rc->sn);
        rc->cap = T * half;
        rc->cs = xmalloc(sizeof(float) * (size_t)rc->cap);
        rc->sn = xmalloc(sizeof(float) * (size_t)rc->cap);
    }
    if (T > rc->pos_cap) {
        free(rc->pos);
        rc->pos_cap = T;
        rc->pos = xmalloc(sizeof(int32_t) * (size_t)T);
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float ang = (float)pos[t] * inv_freq[i];
            rc->cs[t * half + i] = cosf(ang);
            rc->sn[t * half + i] = sinf(ang);
        }
    memcpy(rc->pos, pos, sizeof *pos * (size_t)T);
    rc->T = T;
    rc->half = half;
    rc->inv_freq = inv_freq;
}

static void cpu_rope(void *vctx, float *x, int64_t ld, int T, int n_heads, int hd,
                     const int32_t *pos, const float *inv_freq, int neox) {
    struct cpu_ctx *c = vctx;
    int half = hd / 2;
    rope_angles(&c->rope, T, half, pos, inv_freq);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float cs = c->rope.cs[t * half + i], sn = c->rope.sn[t * half + i];
            for (int h = 0; h < n_heads; h++) {
                float *p = x + t * ld + (int64_t)h * hd;
                int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = p[a], x1 = p[b];
                p[a] = x0 * cs - x1 * sn;
                p[b] = x0 * sn + x1 * cs;
            }
        }
}

static void cpu_kv_store(void *vctx, struct kv_layer *kv, enum dtype kv_type, const float *k,
                         const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b) {
    const struct cpu_ctx *c = vctx;
    int n = n_kv * hd;
    for (int t = 0; t < b->n_tokens; t++) {
        int64_t at = attn_kv_index(b, b->seq_of[t], b->pos[t], n_kv, hd);
        const float *ks = k + t * ld, *vs = v + t * ld;
        if (kv_type == DT_F32) {
            memcpy((float *)kv->k + at, ks, sizeof(float) * (size_t)n);
            memcpy((float *)kv->v + at, vs, sizeof(float) * (size_t)n);
        } else if (kv_type == DT_F8_E4M3) { /* one scale exponent per (token, KV head) row */
            uint8_t *kd = (uint8_t *)kv->k + at, *vd = (uint8_t *)kv->v + at;
            const int64_t row = at / hd;
            for (int h = 0; h < n_kv; h++) {
                kv->k_exp[row + h] = (int8_t)fp8_encode_row(kd + (int64_t)h * hd,
                                                            ks + (int64_t)h * hd, hd);
                kv->v_exp[row + h] = (int8_t)fp8_encode_row(vd + (int64_t)h * hd,
                                                            vs + (int64_t)h * hd, hd);
            }
            const int64_t s = kv_sink_index(kv, attn_kv_block(b, b->seq_of[t], b->pos[t]),
                                            b->pos[t] % b->block_size, n_kv, hd);
            for (int h = 0; s >= 0 && h < n_kv;
                 h++) { /* the sink: these rows in F16 too, same scale */
                const float kx = fp8_exp2(-kv->k_exp[row + h]), vx = fp8_exp2(-kv->v_exp[row + h]);
                for (int i = h * hd; i < (h + 1) * hd; i++) {
                    kv->k_sink[s + i] = f32_to_f16(ks[i] * kx);
                    kv->v_sink[s + i] = f32_to_f16(vs[i] * vx);
                }
            }
        } else if (c->f16c) {
            f16_from_f32_row_avx2((uint16_t *)kv->k + at, ks, n, 1.0f);
            f16_from_f32_row_avx2((uint16_t *)kv->v + at, vs, n, 1.0f);
        } else {
            uint16_t *kd = (uint16_t *)kv->k + at, *vd = (uint16_t *)kv->v + at;
            for (int i = 0; i < n; i++) {
                kd[i] = f32_to_f16(ks[i]);
                vd[i] = f32_to_f16(vs[i]);
            }
        }
    }
}

static void cpu_attention(void *vctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q,
                          int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                          enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b) {
    struct cpu_ctx *c = vctx;
    cpu_attn_run(c->attn, c->tp, out, ldo, q, ldq, n_q, q_head0, group, kv_head0, kv, kv_type, n_kv,
                 hd, b);
}

/* silu(g) * u over the elements [e0, e1) of a T x n block (rows of ld / ldo floats): each
 * thread takes a contiguous share of the elements, so one row splits too */
struct silu_task {
    float *out;
    const float *g, *u;
    int64_t ldo, ld, elems;
    int n;
    int avx2; /* eltwise_avx2's row (the correctly rounded exponential) */
};

static void silu_mul_run(void *p, int ith, int nth) {
    const struct silu_task *t = p;
    const int64_t e0 = t->elems * ith / nth, e1 = t->elems * (ith + 1) / nth;
    for (int64_t e = e0; e < e1;) {
        const int64_t row = e / t->n;
        const int i0 = (int)(e % t->n), i1 = e1 - row * t->n < t->n ? (int)(e1 - row * t->n) : t->n;
        const float *g = t->g + row * t->ld, *u = t->u + row * t->ld;
        float *out = t->out + row * t->ldo;
        if (t->avx2) {
            silu_mul_row_avx2(out + i0, g + i0, u + i0, i1 - i0);
        } else {
            for (int i = i0; i < i1; i++) {
                const float x = g[i];
                out[i] = x / (1.0f + expf(-x)) * u[i];
            }
        }
        e = row * t->n + i1;
    }
}

static void cpu_silu_mul(void *vctx, float *out, int64_t ldo, const float *g, const float *u,
                         int64_t ld, int T, int n) {
    const struct cpu_ctx *c = vctx;
    struct silu_task t = {.out = out,
                          .g = g,
                          .u = u,
                          .ldo = ldo,
                          .ld = ld,
                          .elems = (int64_t)T * n,
                          .n = n,
                          .avx2 = c->f16c};
    if (t.elems >= 1024 && c->n_threads > 1) threadpool_run(c->tp, silu_mul_run, &t);
    else silu_mul_run(&t, 0, 1);
}

static void cpu_add(void *vctx, float *x, const float *y, size_t n) {
    (void)vctx;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_gather_rows(void *vctx, float *dst, const float *src, const int32_t *idx,
                            int n_rows, int n) {
    (void)vctx;
    for (int i = 0; i < n_rows; i++)
        memcpy(dst + (int64_t)i * n, src + (int64_t)idx[i] * n, sizeof(float) * (size_t)n);
}

static void cpu_moe_combine(void *vctx, float *y, int64_t ldy, const float *src, int64_t lds,
                            const int32_t *pos, const float *w, int T, int k, int n) {
    (void)vctx;
    for (int t = 0; t < T; t++) {
        float *yt = y + (int64_t)t * ldy;
        memset(yt, 0, sizeof(float) * (size_t)n);
        for (int j = 0; j < k; j++) {
            int32_t p = pos[(int64_t)t * k + j];
            if (p < 0) continue;
            const float *s = src + (int64_t)p * lds, wj = w[(int64_t)t * k + j];
            for (int i = 0; i < n; i++) yt[i] += wj * s[i];
        }
    }
}

struct cands_task {
    struct logit_cand *out;
    const float *x;
    int n_rows, n_cols, k;
    int64_t ld;
    int32_t id0;
};

static void top_cands_run(void *p, int ith, int nth) {
    const struct cands_task *t = p;
    for (int r = t->n_rows * ith / nth; r < t->n_rows * (ith + 1) / nth; r++)
        logit_cands_select(t->out + (int64_t)r * t->k, t->x + r * t->ld, t->n_cols, t->id0, t->k);
}

static void cpu_top_cands(void *vctx, struct logit_cand *out, const float *x, int n_rows,
                          int n_cols, int64_t ld, int32_t id0, int k) {
    const struct cpu_ctx *c = vctx;
    struct cands_task t = {out, x, n_rows, n_cols, k, ld, id0};
    if (n_rows > 1 && c->n_threads > 1) threadpool_run(c->tp, top_cands_run, &t);
    else top_cands_run(&t, 0, 1);
}

static void cpu_zero(void *vctx, void *p, size_t bytes) {
    (void)vctx;
    memset(p, 0, bytes);
}

static void cpu_sync(void *vctx) { (void)vctx; }

static void cpu_destroy(struct backend *b) { backend_cpu_free(b); }

/* The table below has every op of kernels/backend.h: a new one is added there, then count it
 * here (backend_open refuses a table without a required op). */
static_assert(BACKEND_OP_COUNT == 25, "a new backend op: add it to the CPU backend's table");

void backend_cpu_init(struct backend *b, int n_threads) {
    struct cpu_ctx *c = xcalloc(1, sizeof *c);
    /* mpirun binds each rank (to one core when np <= 2): count the cores this rank may use,
     * since threads sharing a core spin against each other */
    cpu_set_t set;
    int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                             : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (usable < 1) usable = 1;
    if (n_threads < 1) n_threads = usable;
    else if (n_threads > usable)
        LOG(LOG_WARN,
            "%d compute threads on %d usable core(s): start mpirun with --bind-to none (or fewer "
            "threads)",
            n_threads, usable);
    c->n_threads = n_threads;
    c->tp = threadpool_create(n_threads);
    c->f16c = cpu_has_f16c();
    c->attn = cpu_attn_create();
    *b = (struct backend){
        .kind = BACKEND_CPU,
        .name = "cpu",
        .ctx = c,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .alloc_host = cpu_alloc,
        .free_host = cpu_free,
        .upload = cpu_copy,
        .download = cpu_copy,
        .matmul = cpu_matmul_op,
        .matmul_grouped = cpu_matmul_grouped_op,
        .embed = cpu_embed,
        .rmsnorm = cpu_rmsnorm,
        .add_rmsnorm = cpu_add_rmsnorm,
        .head_rmsnorm = cpu_head_rmsnorm,
        .add_bias = cpu_add_bias,
        .rope = cpu_rope,
        .kv_store = cpu_kv_store,
        .attention = cpu_attention,
        .silu_mul = cpu_silu_mul,
        .gather_rows = cpu_gather_rows,
        .moe_combine = cpu_moe_combine,
        .top_cands = cpu_top_cands,
        .zero = cpu_zero,
        .add = cpu_add,
        .sync = cpu_sync,
        .destroy = cpu_destroy,
    };
}

void backend_cpu_free(struct backend *b) {
    struct cpu_ctx *c = b->ctx;
    if (!c) return;
    threadpool_free(c->tp);
    cpu_attn_free(c->attn);
    free(c->rope.pos);
    free(c->rope.cs);
    free(c->rope.sn);
    free(c->gx);
    free(c);
    b->ctx = NULL;
}
