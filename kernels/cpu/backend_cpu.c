#include "backend_cpu.h"

#include <math.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../util/fatal.h"
#include "../../util/half.h"
#include "../../util/log.h"
#include "matmul.h"
#include "threadpool.h"

struct cpu_ctx {
    struct threadpool *tp;
    int n_threads;
    int max_ctx;   /* positions the attention scratch holds; grown on demand */
    float *scores; /* [n_threads][max_ctx] attention scratch */
};

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    /* 64-byte alignment keeps SIMD loads and rows of quantized blocks cache-friendly */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) FATAL("out of memory allocating %zu bytes", bytes);
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

static void cpu_matmul_op(void *vctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                          const struct bweight *w) {
    struct cpu_ctx *c = vctx;
    if (w->rows == 0 || T == 0) return;
    cpu_matmul(y, ldy, x, ldx, T, w->data, w->type, w->rows, w->cols, c->tp);
}

static void cpu_embed(void *vctx, float *x, const int32_t *tok, int T, const struct bweight *table, int row0) {
    (void)vctx;
    int64_t rb = dtype_row_bytes(table->type, table->cols);
    for (int t = 0; t < T; t++) {
        float *dst = x + (int64_t)t * table->cols;
        int r = tok[t] - row0;
        if (r >= 0 && r < table->rows)
            cpu_dequant_row(table->type, (const char *)table->data + (int64_t)r * rb, dst, table->cols);
        else
            memset(dst, 0, sizeof(float) * (size_t)table->cols);
    }
}

static void rmsnorm_row(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0; /* double: the sum of squares of a few thousand values loses bits in f32 */
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void cpu_rmsnorm(void *vctx, float *y, const float *x, const float *w, int T, int n, float eps) {
    (void)vctx;
    for (int t = 0; t < T; t++) rmsnorm_row(y + (int64_t)t * n, x + (int64_t)t * n, w, n, eps);
}

static void cpu_head_rmsnorm(void *vctx, float *x, int64_t ld, int T, int n_heads, int hd, const float *w,
                             float eps) {
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

static void cpu_rope(void *vctx, float *x, int64_t ld, int T, int n_heads, int hd, const int32_t *pos,
                     const float *inv_freq, int neox) {
    (void)vctx;
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            float ang = (float)pos[t] * inv_freq[i];
            float cs = cosf(ang), sn = sinf(ang);
            for (int h = 0; h < n_heads; h++) {
                float *p = x + t * ld + (int64_t)h * hd;
                int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = p[a], x1 = p[b];
                p[a] = x0 * cs - x1 * sn;
                p[b] = x0 * sn + x1 * cs;
            }
        }
}

/* Element offset of (position, kv head) in a layer's cache. */
static inline int64_t kv_index(const struct attn_batch *b, int seq, int pos, int n_kv, int hd) {
    int blk = b->blocks[b->block_off[seq] + pos / b->block_size];
    return (((int64_t)blk * b->block_size + pos % b->block_size) * n_kv) * hd;
}

static void cpu_kv_store(void *vctx, struct kv_layer *kv, enum dtype kv_type, const float *k, const float *v,
                         int64_t ld, int n_kv, int hd, const struct attn_batch *b) {
    (void)vctx;
    int n = n_kv * hd;
    for (int t = 0; t < b->n_tokens; t++) {
        int64_t at = kv_index(b, b->seq_of[t], b->pos[t], n_kv, hd);
        const float *ks = k + t * ld, *vs = v + t * ld;
        if (kv_type == DT_F32) {
            memcpy((float *)kv->k + at, ks, sizeof(float) * (size_t)n);
            memcpy((float *)kv->v + at, vs, sizeof(float) * (size_t)n);
        } else {
            uint16_t *kd = (uint16_t *)kv->k + at, *vd = (uint16_t *)kv->v + at;
            for (int i = 0; i < n; i++) {
                kd[i] = f32_to_f16(ks[i]);
                vd[i] = f32_to_f16(vs[i]);
            }
        }
    }
}

struct attn_args {
    struct cpu_ctx *c;
    float *out;
    int64_t ldo;
    const float *q;
    int64_t ldq;
    int n_q, q_head0, group, kv_head0;
    const struct kv_layer *kv;
    enum dtype kv_type;
    int n_kv, hd;
    const struct attn_batch *b;
};

/* half -> float by table: the attention loops convert every cached K and V element of
 * every step, and the bit-twiddling conversion would cost more than the math */
static float half_table[65536];
static pthread_once_t half_once = PTHREAD_ONCE_INIT;
static void half_table_init(void) {
    for (uint32_t h = 0; h < 65536; h++) half_table[h] = f16_to_f32((uint16_t)h);
}

/* One head's row of the cache as f32: in place for an F32 cache, converted into buf else. */
static inline const float *kv_row(const void *base, enum dtype t, int64_t at, int hd, float *buf) {
    if (t == DT_F32) return (const float *)base + at;
    const uint16_t *h = (const uint16_t *)base + at;
    for (int i = 0; i < hd; i++) buf[i] = half_table[h[i]];
    return buf;
}

/* One (token, head) pair per task, spread round-robin over threads: decode steps have
 * few tokens and many heads, prefill chunks the reverse. */
static void attn_task(void *p, int ith, int nth) {
    struct attn_args *a = p;
    const struct attn_batch *b = a->b;
    float *sc = a->c->scores + (int64_t)ith * a->c->max_ctx;
    float scale = 1.0f / sqrtf((float)a->hd);
    int hd = a->hd;
    for (int task = ith; task < b->n_tokens * a->n_q; task += nth) {
        int t = task / a->n_q, h = task % a->n_q;
        int seq = b->seq_of[t], pos = b->pos[t];
        int kvh = (a->q_head0 + h) / a->group - a->kv_head0;
        const float *q = a->q + t * a->ldq + (int64_t)h * hd;
        float mx = -INFINITY;
        float row[1024]; /* head_dim <= 1024 (checked when the model loads) */
        for (int j = 0; j <= pos; j++) {
            int64_t at = kv_index(b, seq, j, a->n_kv, hd) + (int64_t)kvh * hd;
            const float *k = kv_row(a->kv->k, a->kv_type, at, hd, row);
            float s = 0;
            for (int i = 0; i < hd; i++) s += q[i] * k[i];
            s *= scale;
            sc[j] = s;
            if (s > mx) mx = s;
        }
        float sum = 0;
        for (int j = 0; j <= pos; j++) {
            sc[j] = expf(sc[j] - mx);
            sum += sc[j];
        }
        float inv = 1.0f / sum;
        float *o = a->out + t * a->ldo + (int64_t)h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int j = 0; j <= pos; j++) {
            int64_t at = kv_index(b, seq, j, a->n_kv, hd) + (int64_t)kvh * hd;
            const float *v = kv_row(a->kv->v, a->kv_type, at, hd, row);
            float w = sc[j] * inv;
            for (int i = 0; i < hd; i++) o[i] += w * v[i];
        }
    }
}

static void cpu_attention(void *vctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q, int q_head0,
                          int group, int kv_head0, const struct kv_layer *kv, enum dtype kv_type, int n_kv, int hd,
                          const struct attn_batch *b) {
    struct cpu_ctx *c = vctx;
    int need = 0;
    for (int t = 0; t < b->n_tokens; t++)
        if (b->pos[t] + 1 > need) need = b->pos[t] + 1;
    if (need > c->max_ctx) { /* grown here, before the threads start */
        free(c->scores);
        c->max_ctx = need > 2 * c->max_ctx ? need : 2 * c->max_ctx;
        c->scores = xmalloc(sizeof(float) * (size_t)c->n_threads * (size_t)c->max_ctx);
    }
    struct attn_args a = {c, out, ldo, q, ldq, n_q, q_head0, group, kv_head0, kv, kv_type, n_kv, hd, b};
    threadpool_run(c->tp, attn_task, &a);
}

static void cpu_silu_mul(void *vctx, float *out, int64_t ldo, const float *g, const float *u, int64_t ld, int T,
                         int n) {
    (void)vctx;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < n; i++) {
            float x = g[t * ld + i];
            out[t * ldo + i] = x / (1.0f + expf(-x)) * u[t * ld + i];
        }
}

static void cpu_add(void *vctx, float *x, const float *y, size_t n) {
    (void)vctx;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_gather_rows(void *vctx, float *dst, const float *src, const int32_t *idx, int n_rows, int n) {
    (void)vctx;
    for (int i = 0; i < n_rows; i++) memcpy(dst + (int64_t)i * n, src + (int64_t)idx[i] * n, sizeof(float) * (size_t)n);
}

static void cpu_zero(void *vctx, void *p, size_t bytes) {
    (void)vctx;
    memset(p, 0, bytes);
}

static void cpu_sync(void *vctx) { (void)vctx; }

static void cpu_destroy(struct backend *b) { backend_cpu_free(b); }

void backend_cpu_init(struct backend *b, int n_threads) {
    pthread_once(&half_once, half_table_init);
    struct cpu_ctx *c = xcalloc(1, sizeof *c);
    /* mpirun binds each rank (to one core when np <= 2): count the cores this rank may use,
     * since threads sharing a core spin against each other */
    cpu_set_t set;
    int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (usable < 1) usable = 1;
    if (n_threads < 1) n_threads = usable;
    else if (n_threads > usable)
        LOG(LOG_WARN, "%d compute threads on %d usable core(s): start mpirun with --bind-to none (or fewer threads)",
            n_threads, usable);
    c->n_threads = n_threads;
    c->tp = threadpool_create(n_threads);
    c->max_ctx = 256;
    c->scores = xmalloc(sizeof(float) * (size_t)n_threads * (size_t)c->max_ctx);
    *b = (struct backend){
        .kind = BACKEND_CPU, .name = "cpu", .ctx = c, .alloc = cpu_alloc, .free = cpu_free,
        .upload = cpu_copy, .download = cpu_copy, .matmul = cpu_matmul_op, .embed = cpu_embed,
        .rmsnorm = cpu_rmsnorm, .head_rmsnorm = cpu_head_rmsnorm, .add_bias = cpu_add_bias,
        .rope = cpu_rope, .kv_store = cpu_kv_store, .attention = cpu_attention,
        .silu_mul = cpu_silu_mul, .gather_rows = cpu_gather_rows, .zero = cpu_zero, .add = cpu_add,
        .sync = cpu_sync, .destroy = cpu_destroy,
    };
}

void backend_cpu_free(struct backend *b) {
    struct cpu_ctx *c = b->ctx;
    if (!c) return;
    threadpool_free(c->tp);
    free(c->scores);
    free(c);
    b->ctx = NULL;
}
