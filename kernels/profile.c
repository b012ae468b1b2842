#include "profile.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../util/clock.h"

/* Every op the table has is known here: a new one needs a timed wrapper below when it is
 * BOP_TIMED (and backend_profile_wrap to set it); then count it here. */
static_assert(BACKEND_OP_COUNT == 25, "a new backend op: wrap it in the profiler");

enum { T_CLASSES = 4 };
static const char *const t_class_name[T_CLASSES] = {"T=1", "T=2..8", "T=9..64", "T>64"};
enum { N_ROWS = BACKEND_OP_COUNT * T_CLASSES }; /* report rows: (op, class), class 0 if unsplit */

/* The wrapped backend's own ops and the counts: one profiled backend per process. */
static struct {
    struct backend inner;
    double total[N_ROWS];
    long calls[N_ROWS];
    int registered;
    int computing; /* set by the first compute op: uploads before it (the weights) are not counted
                    */
} prof;

static int t_class(int T) { return T <= 1 ? 0 : T <= 8 ? 1 : T <= 64 ? 2 : 3; }

/* matmul and attention are timed by tokens per step, which their cost depends on most */
static int split_by_tokens(int op) {
    return op == BACKEND_OP_MATMUL || op == BACKEND_OP_MATMUL_GROUPED || op == BACKEND_OP_ATTENTION;
}

static double begin(void *ctx) {
    prof.inner.sync(ctx);
    return clock_now();
}

/* op's call with T tokens (T_CLASSES classes for split ops) started at t0 has ended */
static void end(void *ctx, enum backend_op op, int T, double t0) {
    prof.inner.sync(ctx);
    if (op != BACKEND_OP_UPLOAD && op != BACKEND_OP_DOWNLOAD) prof.computing = 1;
    int row = op * T_CLASSES + (split_by_tokens(op) ? t_class(T) : 0);
    prof.total[row] += clock_now() - t0;
    prof.calls[row]++;
}

static const char *name_of(int row, char *buf, size_t n) {
    int op = row / T_CLASSES;
    if (split_by_tokens(op))
        snprintf(buf, n, "%s %s", backend_op_name(op), t_class_name[row % T_CLASSES]);
    else snprintf(buf, n, "%s", backend_op_name(op));
    return buf;
}

static void report(void) {
    double sum = 0;
    for (int i = 0; i < N_ROWS; i++) sum += prof.total[i];
    if (sum <= 0) return;
    int order[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) order[i] = i;
    for (int i = 1; i < N_ROWS; i++) /* by total time, largest first */
        for (int j = i; j > 0 && prof.total[order[j]] > prof.total[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* a forward pass of the first pipeline stage embeds once: its count is the step count */
    const long embeds = prof.calls[BACKEND_OP_EMBED * T_CLASSES];
    const double steps = embeds > 0 ? (double)embeds : 1.0;
    fprintf(
        stderr,
        "ops profile (pid %ld, %s backend, each op synchronized): %.3f s in ops over %.0f steps "
        "(model load not counted)\n",
        (long)getpid(), prof.inner.name ? prof.inner.name : "?", sum, steps);
    for (int k = 0; k < N_ROWS; k++) {
        int i = order[k];
        if (!prof.calls[i]) continue;
        char buf[48];
        fprintf(stderr, "  %-18s %8ld calls %9.3f ms/step %9.1f us/call %5.1f%%\n",
                name_of(i, buf, sizeof buf), prof.calls[i], 1e3 * prof.total[i] / steps,
                1e6 * prof.total[i] / (double)prof.calls[i], 100.0 * prof.total[i] / sum);
    }
}

/* ---- the timed ops: each the inner op between begin() and end() ---- */

static void w_matmul(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                     const struct bweight *w) {
    double t0 = begin(ctx);
    prof.inner.matmul(ctx, y, ldy, x, ldx, T, w);
    end(ctx, BACKEND_OP_MATMUL, T, t0);
}

static void w_matmul_grouped(void *ctx, const struct bmatmul *ops, int n) {
    double t0 = begin(ctx);
    prof.inner.matmul_grouped(ctx, ops, n);
    end(ctx, BACKEND_OP_MATMUL_GROUPED, n > 0 ? ops[0].T : 1, t0);
}

static void w_embed(void *ctx, float *x, const int32_t *tok, int T, const struct bweight *table,
                    int row0) {
    double t0 = begin(ctx);
    prof.inner.embed(ctx, x, tok, T, table, row0);
    end(ctx, BACKEND_OP_EMBED, 1, t0);
}

static void w_rmsnorm(void *ctx, float *y, const float *x, const float *w, int T, int n,
                      float eps) {
    double t0 = begin(ctx);
    prof.inner.rmsnorm(ctx, y, x, w, T, n, eps);
    end(ctx, BACKEND_OP_RMSNORM, 1, t0);
}

static void w_head_rmsnorm(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd,
                           const float *w, float eps) {
    double t0 = begin(ctx);
    prof.inner.head_rmsnorm(ctx, x, ld, T, n_heads, hd, w, eps);
    end(ctx, BACKEND_OP_HEAD_RMSNORM, 1, t0);
}

static void w_add_bias(void *ctx, float *x, int64_t ld, int T, int n, const float *b) {
    double t0 = begin(ctx);
    prof.inner.add_bias(ctx, x, ld, T, n, b);
    end(ctx, BACKEND_OP_ADD_BIAS, 1, t0);
}

static void w_rope(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd, const int32_t *pos,
                   const float *inv_freq, int neox) {
    double t0 = begin(ctx);
    prof.inner.rope(ctx, x, ld, T, n_heads, hd, pos, inv_freq, neox);
    end(ctx, BACKEND_OP_ROPE, 1, t0);
}

static void w_kv_store(void *ctx, struct kv_layer *kv, enum dtype kv_type, const float *k,
                       const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b) {
    double t0 = begin(ctx);
    prof.inner.kv_store(ctx, kv, kv_type, k, v, ld, n_kv, hd, b);
    end(ctx, BACKEND_OP_KV_STORE, 1, t0);
}

static void w_attention(void *ctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q,
                        int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                        enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b) {
    double t0 = begin(ctx);
    prof.inner.attention(ctx, out, ldo, q, ldq, n_q, q_head0, group, kv_head0, kv, kv_type, n_kv,
                         hd, b);
    end(ctx, BACKEND_OP_ATTENTION, b->n_tokens, t0);
}

static void w_silu_mul(void *ctx, float *out, int64_t ldo, const float *g, const float *u,
                       int64_t ld, int T, int n) {
    double t0 = begin(ctx);
    prof.inner.silu_mul(ctx, out, ldo, g, u, ld, T, n);
    end(ctx, BACKEND_OP_SILU_MUL, 1, t0);
}

static void w_moe_combine(void *ctx, float *y, int64_t ldy, const float *src, int64_t lds,
                          const int32_t *pos, const float *w, int T, int k, int n) {
    double t0 = begin(ctx);
    prof.inner.moe_combine(ctx, y, ldy, src, lds, pos, w, T, k, n);
    end(ctx, BACKEND_OP_MOE_COMBINE, T, t0);
}

static void w_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int n_rows,
                          int n) {
    double t0 = begin(ctx);
    prof.inner.gather_rows(ctx, dst, src, idx, n_rows, n);
    end(ctx, BACKEND_OP_GATHER_ROWS, 1, t0);
}

static void w_zero(void *ctx, void *p, size_t bytes) {
    double t0 = begin(ctx);
    prof.inner.zero(ctx, p, bytes);
    end(ctx, BACKEND_OP_ZERO, 1, t0);
}

static void w_add(void *ctx, float *x, const float *y, size_t n) {
    double t0 = begin(ctx);
    prof.inner.add(ctx, x, y, n);
    end(ctx, BACKEND_OP_ADD, 1, t0);
}

static void w_add_rmsnorm(void *ctx, float *x, const float *y, float *y_norm, const float *w, int T,
                          int n, float eps) {
    double t0 = begin(ctx);
    prof.inner.add_rmsnorm(ctx, x, y, y_norm, w, T, n, eps);
    end(ctx, BACKEND_OP_ADD_RMSNORM, 1, t0);
}

static void w_top_cands(void *ctx, struct logit_cand *out, const float *x, int n_rows, int n_cols,
                        int64_t ld, int32_t id0, int k) {
    double t0 = begin(ctx);
    prof.inner.top_cands(ctx, out, x, n_rows, n_cols, ld, id0, k);
    end(ctx, BACKEND_OP_TOP_CANDS, 1, t0);
}

static void w_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    if (!prof.computing) { /* loading the model */
        prof.inner.upload(ctx, dst, src, bytes);
        return;
    }
    double t0 = begin(ctx);
    prof.inner.upload(ctx, dst, src, bytes);
    end(ctx, BACKEND_OP_UPLOAD, 1, t0);
}

static void w_download(void *ctx, void *dst, const void *src, size_t bytes) {
    double t0 = begin(ctx);
    prof.inner.download(ctx, dst, src, bytes);
    end(ctx, BACKEND_OP_DOWNLOAD, 1, t0);
}

void backend_profile_wrap(struct backend *b) {
    prof.inner = *b;
    b->matmul = w_matmul;
    b->matmul_grouped = w_matmul_grouped;
    b->embed = w_embed;
    b->rmsnorm = w_rmsnorm;
    b->head_rmsnorm = w_head_rmsnorm;
    b->add_bias = w_add_bias;
    b->rope = w_rope;
    b->kv_store = w_kv_store;
    b->attention = w_attention;
    b->silu_mul = w_silu_mul;
    b->gather_rows = w_gather_rows;
    b->moe_combine = w_moe_combine;
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
