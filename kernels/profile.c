#include "profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../util/clock.h"

enum { T_CLASSES = 4 };
static const char *const t_class_name[T_CLASSES] = {"T=1", "T=2..8", "T=9..64", "T>64"};

enum prof_op {
    P_MATMUL,
    P_ATTENTION = P_MATMUL + T_CLASSES,
    P_EMBED = P_ATTENTION + T_CLASSES,
    P_RMSNORM,
    P_HEAD_RMSNORM,
    P_ADD_BIAS,
    P_ROPE,
    P_KV_STORE,
    P_SILU_MUL,
    P_GATHER_ROWS,
    P_ZERO,
    P_ADD,
    P_ADD_RMSNORM,
    P_TOP_CANDS,
    P_UPLOAD,
    P_DOWNLOAD,
    P_N
};

static const char *const op_name[P_N - P_EMBED] = {"embed",    "rmsnorm", "head_rmsnorm", "add_bias", "rope",
                                                   "kv_store", "silu_mul", "gather_rows", "zero",     "add",
                                                   "add_rmsnorm", "top_cands", "upload", "download"};

/* The wrapped backend's own ops and the counts: one profiled backend per process. */
static struct {
    struct backend inner;
    double total[P_N];
    long calls[P_N];
    int registered;
    int computing; /* set by the first compute op: uploads before it (the weights) are not counted */
} prof;

static int t_class(int T) { return T <= 1 ? 0 : T <= 8 ? 1 : T <= 64 ? 2 : 3; }

static double begin(void *ctx) {
    prof.inner.sync(ctx);
    return clock_now();
}

static void end(void *ctx, int op, double t0) {
    prof.inner.sync(ctx);
    if (op != P_UPLOAD && op != P_DOWNLOAD) prof.computing = 1;
    prof.total[op] += clock_now() - t0;
    prof.calls[op]++;
}

static const char *name_of(int op, char *buf, size_t n) {
    if (op < P_ATTENTION) snprintf(buf, n, "matmul %s", t_class_name[op - P_MATMUL]);
    else if (op < P_EMBED) snprintf(buf, n, "attention %s", t_class_name[op - P_ATTENTION]);
    else snprintf(buf, n, "%s", op_name[op - P_EMBED]);
    return buf;
}

static void report(void) {
    double sum = 0;
    for (int i = 0; i < P_N; i++) sum += prof.total[i];
    if (sum <= 0) return;
    int order[P_N];
    for (int i = 0; i < P_N; i++) order[i] = i;
    for (int i = 1; i < P_N; i++) /* by total time, largest first */
        for (int j = i; j > 0 && prof.total[order[j]] > prof.total[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* a forward pass of the first pipeline stage embeds once: its count is the step count */
    const double steps = prof.calls[P_EMBED] > 0 ? (double)prof.calls[P_EMBED] : 1.0;
    fprintf(stderr, "ops profile (pid %ld, %s backend, each op synchronized): %.3f s in ops over %.0f steps "
            "(model load not counted)\n", (long)getpid(), prof.inner.name ? prof.inner.name : "?", sum, steps);
    for (int k = 0; k < P_N; k++) {
        int i = order[k];
        if (!prof.calls[i]) continue;
        char buf[48];
        fprintf(stderr, "  %-18s %8ld calls %9.3f ms/step %9.1f us/call %5.1f%%\n", name_of(i, buf, sizeof buf),
                prof.calls[i], 1e3 * prof.total[i] / steps, 1e6 * prof.total[i] / (double)prof.calls[i],
                100.0 * prof.total[i] / sum);
    }
}

/* ---- the timed ops: each the inner op between begin() and end() ---- */

static void w_matmul(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T, const struct bweight *w) {
    double t0 = begin(ctx);
    prof.inner.matmul(ctx, y, ldy, x, ldx, T, w);
    end(ctx, P_MATMUL + t_class(T), t0);
}

static void w_embed(void *ctx, float *x, const int32_t *tok, int T, const struct bweight *table, int row0) {
    double t0 = begin(ctx);
    prof.inner.embed(ctx, x, tok, T, table, row0);
    end(ctx, P_EMBED, t0);
}

static void w_rmsnorm(void *ctx, float *y, const float *x, const float *w, int T, int n, float eps) {
    double t0 = begin(ctx);
    prof.inner.rmsnorm(ctx, y, x, w, T, n, eps);
    end(ctx, P_RMSNORM, t0);
}

static void w_head_rmsnorm(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd, const float *w, float eps) {
    double t0 = begin(ctx);
    prof.inner.head_rmsnorm(ctx, x, ld, T, n_heads, hd, w, eps);
    end(ctx, P_HEAD_RMSNORM, t0);
}

static void w_add_bias(void *ctx, float *x, int64_t ld, int T, int n, const float *b) {
    double t0 = begin(ctx);
    prof.inner.add_bias(ctx, x, ld, T, n, b);
    end(ctx, P_ADD_BIAS, t0);
}

static void w_rope(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd, const int32_t *pos,
                   const float *inv_freq, int neox) {
    double t0 = begin(ctx);
    prof.inner.rope(ctx, x, ld, T, n_heads, hd, pos, inv_freq, neox);
    end(ctx, P_ROPE, t0);
}

static void w_kv_store(void *ctx, struct kv_layer *kv, enum dtype kv_type, const float *k, const float *v, int64_t ld,
                       int n_kv, int hd, const struct attn_batch *b) {
    double t0 = begin(ctx);
    prof.inner.kv_store(ctx, kv, kv_type, k, v, ld, n_kv, hd, b);
    end(ctx, P_KV_STORE, t0);
}

static void w_attention(void *ctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q, int q_head0,
                        int group, int kv_head0, const struct kv_layer *kv, enum dtype kv_type, int n_kv, int hd,
                        const struct attn_batch *b) {
    double t0 = begin(ctx);
    prof.inner.attention(ctx, out, ldo, q, ldq, n_q, q_head0, group, kv_head0, kv, kv_type, n_kv, hd, b);
    end(ctx, P_ATTENTION + t_class(b->n_tokens), t0);
}

static void w_silu_mul(void *ctx, float *out, int64_t ldo, const float *g, const float *u, int64_t ld, int T, int n) {
    double t0 = begin(ctx);
    prof.inner.silu_mul(ctx, out, ldo, g, u, ld, T, n);
    end(ctx, P_SILU_MUL, t0);
}

static void w_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int n_rows, int n) {
    double t0 = begin(ctx);
    prof.inner.gather_rows(ctx, dst, src, idx, n_rows, n);
    end(ctx, P_GATHER_ROWS, t0);
}

static void w_zero(void *ctx, void *p, size_t bytes) {
    double t0 = begin(ctx);
    prof.inner.zero(ctx, p, bytes);
    end(ctx, P_ZERO, t0);
}

static void w_add(void *ctx, float *x, const float *y, size_t n) {
    double t0 = begin(ctx);
    prof.inner.add(ctx, x, y, n);
    end(ctx, P_ADD, t0);
}

static void w_add_rmsnorm(void *ctx, float *x, const float *y, float *y_norm, const float *w, int T, int n,
                          float eps) {
    double t0 = begin(ctx);
    prof.inner.add_rmsnorm(ctx, x, y, y_norm, w, T, n, eps);
    end(ctx, P_ADD_RMSNORM, t0);
}

static void w_top_cands(void *ctx, struct logit_cand *out, const float *x, int n_rows, int n_cols, int64_t ld,
                        int32_t id0, int k) {
    double t0 = begin(ctx);
    prof.inner.top_cands(ctx, out, x, n_rows, n_cols, ld, id0, k);
    end(ctx, P_TOP_CANDS, t0);
}

static void w_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    if (!prof.computing) { /* loading the model */
        prof.inner.upload(ctx, dst, src, bytes);
        return;
    }
    double t0 = begin(ctx);
    prof.inner.upload(ctx, dst, src, bytes);
    end(ctx, P_UPLOAD, t0);
}

static void w_download(void *ctx, void *dst, const void *src, size_t bytes) {
    double t0 = begin(ctx);
    prof.inner.download(ctx, dst, src, bytes);
    end(ctx, P_DOWNLOAD, t0);
}

void backend_profile_wrap(struct backend *b) {
    prof.inner = *b;
    b->matmul = w_matmul;
    b->embed = w_embed;
    b->rmsnorm = w_rmsnorm;
    b->head_rmsnorm = w_head_rmsnorm;
    b->add_bias = w_add_bias;
    b->rope = w_rope;
    b->kv_store = w_kv_store;
    b->attention = w_attention;
    b->silu_mul = w_silu_mul;
    b->gather_rows = w_gather_rows;
    b->zero = w_zero;
    b->add = w_add;
    b->add_rmsnorm = w_add_rmsnorm;
    if (b->top_cands) b->top_cands = w_top_cands;
    b->upload = w_upload;
    b->download = w_download;
    b->graph_run = NULL; /* the wrappers synchronize, which a capture cannot hold */
    if (!prof.registered) {
        prof.registered = 1;
        atexit(report);
    }
}
