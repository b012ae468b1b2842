#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/modelfile.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/half.h"

struct loader {
    struct model_file mf;
    struct model *m;
    char *err;
};

static const struct mf_tensor *need(struct loader *L, const char *name) {
    const struct mf_tensor *t = modelfile_find(&L->mf, name);
    if (!t) err_set(L->err, "%s: tensor '%s' is missing", L->mf.paths[0], name);
    return t;
}

static const struct mf_tensor *need_matrix(struct loader *L, const char *name, int rows, int cols) {
    const struct mf_tensor *t = need(L, name);
    if (!t) return NULL;
    if (t->n_dims > 2 || t->ne[0] != cols || t->ne[1] != rows) {
        err_set(L->err, "%s: tensor '%s' has shape [%lld, %lld], expected [%d, %d] (rows, cols)", L->mf.paths[0],
                name, (long long)t->ne[1], (long long)t->ne[0], rows, cols);
        return NULL;
    }
    return t;
}

static void *upload_host(struct loader *L, const void *host, size_t bytes) {
    struct backend *be = L->m->be;
    void *d = be->alloc(be->ctx, bytes);
    be->upload(be->ctx, d, host, bytes);
    L->m->weight_bytes += bytes;
    return d;
}

/* Rows [row0, row0 + nrows) of a matrix: one contiguous byte range of the file. Written
 * into dst (host) at byte offset `at`. */
static int read_rows(struct loader *L, const struct mf_tensor *t, int row0, int nrows, char *dst) {
    int64_t rb = dtype_row_bytes(t->type, t->ne[0]);
    if (rb < 0) return err_set(L->err, "%s: tensor '%s': bad row length", L->mf.paths[0], t->name);
    if (nrows == 0) return 0;
    return modelfile_read(&L->mf, t, (uint64_t)row0 * (uint64_t)rb, (uint64_t)nrows * (uint64_t)rb, dst, L->err);
}

/* Column-parallel weights: whole rows. Several tensors of one type are concatenated into
 * one matrix (fused QKV, gate+up). */
static int load_rows_fused(struct loader *L, struct bweight *w, int n, const struct mf_tensor **t,
                           const int *row0, const int *nrows) {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += nrows[i];
    int cols = (int)t[0]->ne[0];
    int64_t rb = dtype_row_bytes(t[0]->type, cols);
    size_t bytes = (size_t)rb * (size_t)rows;
    char *host = xmalloc(bytes);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (read_rows(L, t[i], row0[i], nrows[i], host + at)) {
            free(host);
            return -1;
        }
        at += (size_t)rb * (size_t)nrows[i];
    }
    *w = (struct bweight){upload_host(L, host, bytes), t[0]->type, rows, cols};
    free(host);
    return 0;
}

static int load_rows(struct loader *L, struct bweight *w, const struct mf_tensor *t, int row0, int nrows) {
    return load_rows_fused(L, w, 1, &t, &row0, &nrows);
}

/* Row-parallel weights: columns [col0, col0 + ncols) of every row, which must fall on
 * block boundaries (the shard plan makes sure). One read per row. */
static int load_cols(struct loader *L, struct bweight *w, const struct mf_tensor *t, int col0, int ncols) {
    int be_ = dtype_block_elems(t->type);
    int rows = (int)t->ne[1];
    if (col0 % be_ || ncols % be_)
        return err_set(L->err, "%s: tensor '%s': column slice [%d, %d) is not on %s block boundaries",
                       L->mf.paths[0], t->name, col0, col0 + ncols, dtype_name(t->type));
    int64_t rb = dtype_row_bytes(t->type, t->ne[0]);
    int64_t sb = dtype_row_bytes(t->type, ncols), off = dtype_row_bytes(t->type, col0);
    size_t bytes = (size_t)sb * (size_t)rows;
    char *host = xmalloc(bytes ? bytes : 1);
    for (int r = 0; r < rows && sb > 0; r++)
        if (modelfile_read(&L->mf, t, (uint64_t)r * (uint64_t)rb + (uint64_t)off, (uint64_t)sb,
                           host + (size_t)r * (size_t)sb, L->err)) {
            free(host);
            return -1;
        }
    *w = (struct bweight){upload_host(L, host, bytes), t->type, rows, ncols};
    free(host);
    return 0;
}

/* A vector (norm weight or bias) slice [off, off + n) converted to f32. dst_host may hold
 * several slices; it is uploaded by the caller. */
static int read_vec(struct loader *L, const struct mf_tensor *t, int expect_len, int off, int n, float *dst) {
    if (t->n_dims != 1 || t->ne[0] != expect_len)
        return err_set(L->err, "%s: tensor '%s' has %lld elements, expected %d", L->mf.paths[0], t->name,
                       (long long)t->ne[0], expect_len);
    int es = t->type == DT_F32 ? 4 : 2;
    if (t->type != DT_F32 && t->type != DT_F16 && t->type != DT_BF16)
        return err_set(L->err, "%s: tensor '%s' has type %s, expected F32, F16 or BF16", L->mf.paths[0], t->name,
                       dtype_name(t->type));
    char *raw = xmalloc((size_t)n * 4 + 1);
    int rc = n ? modelfile_read(&L->mf, t, (uint64_t)off * (uint64_t)es, (uint64_t)n * (uint64_t)es, raw, L->err) : 0;
    if (!rc)
        for (int i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            dst[i] = t->type == DT_F32 ? ((float *)raw)[i] : t->type == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
    free(raw);
    return rc;
}

static float *load_vec(struct loader *L, const char *name, int len) {
    const struct mf_tensor *t = need(L, name);
    if (!t) return NULL;
    float *host = xmalloc(sizeof(float) * (size_t)len);
    float *d = NULL;
    if (!read_vec(L, t, len, 0, len, host)) d = upload_host(L, host, sizeof(float) * (size_t)len);
    free(host);
    return d;
}

void model_inv_freq(const struct model_hparams *hp, const float *factors, float *out) {
    for (int i = 0; i < hp->head_dim / 2; i++) {
        double inv = pow((double)hp->rope_theta, -2.0 * i / hp->head_dim);
        if (factors) {
            inv /= factors[i];
        } else if (hp->rope_scaling_llama3) {
            double lo_wl = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double hi_wl = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            double wl = 2 * M_PI / inv;
            if (wl > lo_wl) {
                inv /= hp->rope_factor;
            } else if (wl >= hi_wl) {
                double smooth = (hp->rope_orig_ctx / wl - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                inv = (1 - smooth) * inv / hp->rope_factor + smooth * inv;
            }
        }
        out[i] = (float)inv;
    }
}

/* The rotary table, with the file's per-dimension factors (GGUF rope_freqs) when it has them. */
static int load_inv_freq(struct loader *L) {
    const struct model_hparams *hp = &L->m->hp;
    int half = hp->head_dim / 2;
    float *f = xmalloc(sizeof(float) * (size_t)half);
    float *factors = NULL;
    const struct mf_tensor *rf = modelfile_find(&L->mf, "rope_freqs.weight");
    if (rf) {
        factors = xmalloc(sizeof(float) * (size_t)half);
        if (read_vec(L, rf, half, 0, half, factors)) {
            free(f);
            free(factors);
            return -1;
        }
    }
    model_inv_freq(hp, factors, f);
    L->m->inv_freq = upload_host(L, f, sizeof(float) * (size_t)half);
    free(f);
    free(factors);
    return 0;
}

/* Layer il of the file into the stage's slot il - layer0. */
static int load_layer(struct loader *L, int il) {
    struct model *m = L->m;
    const struct model_hparams *hp = &m->hp;
    const struct shard_plan *sp = &m->sp;
    struct layer_weights *lw = &m->layers[il - sp->layer0];
    int hd = hp->head_dim;
    char name[96];
#define NAME(s) (snprintf(name, sizeof name, "blk.%d.%s", il, s), name)
    if (!(lw->attn_norm = load_vec(L, NAME("attn_norm.weight"), hp->dim))) return -1;
    if (!(lw->ffn_norm = load_vec(L, NAME("ffn_norm.weight"), hp->dim))) return -1;

    const struct mf_tensor *tq, *tk, *tv;
    if (!(tq = need_matrix(L, NAME("attn_q.weight"), hp->n_heads * hd, hp->dim))) return -1;
    if (!(tk = need_matrix(L, NAME("attn_k.weight"), hp->n_kv_heads * hd, hp->dim))) return -1;
    if (!(tv = need_matrix(L, NAME("attn_v.weight"), hp->n_kv_heads * hd, hp->dim))) return -1;
    const struct mf_tensor *tqkv[3] = {tq, tk, tv};
    int r0[3] = {sp->q_head0 * hd, sp->kv_head0 * hd, sp->kv_head0 * hd};
    int nr[3] = {sp->n_q * hd, sp->n_kv * hd, sp->n_kv * hd};
    lw->qkv_fused = tq->type == tk->type && tk->type == tv->type;
    if (lw->qkv_fused) {
        if (load_rows_fused(L, &lw->qkv[0], 3, tqkv, r0, nr)) return -1;
    } else {
        for (int i = 0; i < 3; i++)
            if (load_rows(L, &lw->qkv[i], tqkv[i], r0[i], nr[i])) return -1;
    }
    if (hp->qkv_bias) {
        static const char *bn[3] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
        int total = nr[0] + nr[1] + nr[2], at = 0;
        float *host = xmalloc(sizeof(float) * (size_t)total);
        for (int i = 0; i < 3; i++) {
            const struct mf_tensor *t = need(L, NAME(bn[i]));
            int full = i == 0 ? hp->n_heads * hd : hp->n_kv_heads * hd;
            if (!t || read_vec(L, t, full, r0[i], nr[i], host + at)) {
                free(host);
                return -1;
            }
            at += nr[i];
        }
        lw->qkv_bias = upload_host(L, host, sizeof(float) * (size_t)total);
        free(host);
    }
    if (hp->qk_norm) {
        if (!(lw->q_norm = load_vec(L, NAME("attn_q_norm.weight"), hd))) return -1;
        if (!(lw->k_norm = load_vec(L, NAME("attn_k_norm.weight"), hd))) return -1;
    }
    const struct mf_tensor *to = need_matrix(L, NAME("attn_output.weight"), hp->dim, hp->n_heads * hd);
    if (!to || load_cols(L, &lw->wo, to, sp->wo_col0, sp->wo_ncols)) return -1;

    const struct mf_tensor *tg, *tu, *td;
    if (!(tg = need_matrix(L, NAME("ffn_gate.weight"), hp->ffn_dim, hp->dim))) return -1;
    if (!(tu = need_matrix(L, NAME("ffn_up.weight"), hp->ffn_dim, hp->dim))) return -1;
    if (!(td = need_matrix(L, NAME("ffn_down.weight"), hp->dim, hp->ffn_dim))) return -1;
    const struct mf_tensor *tgu[2] = {tg, tu};
    int g0[2] = {sp->ffn0, sp->ffn0}, gn[2] = {sp->n_ffn, sp->n_ffn};
    lw->gate_up_fused = tg->type == tu->type;
    if (lw->gate_up_fused) {
        if (load_rows_fused(L, &lw->gate_up[0], 2, tgu, g0, gn)) return -1;
    } else {
        for (int i = 0; i < 2; i++)
            if (load_rows(L, &lw->gate_up[i], tgu[i], g0[i], gn[i])) return -1;
    }
    if (load_cols(L, &lw->down, td, sp->ffn0, sp->n_ffn)) return -1;
#undef NAME
    return 0;
}

/* The LM head's cost in layers' worth (shard_stage): its elements over layer 0's matrices'. */
static double head_layers(const struct model_file *mf) {
    double layer = 0;
    for (int i = 0; i < mf->n_tensors; i++) {
        const struct mf_tensor *t = &mf->tensors[i];
        if (!strncmp(t->name, "blk.0.", 6) && t->n_dims >= 2) layer += (double)t->ne[0] * (double)t->ne[1];
    }
    return shard_head_layers((double)mf->hp.vocab_size * mf->hp.dim, layer);
}

int model_load(struct model *m, const char *path, struct backend *be, int tp, int rank, int pp, int stage, char *err) {
    memset(m, 0, sizeof *m);
    m->be = be;
    struct loader L = {.m = m, .err = err};
    if (modelfile_open(&L.mf, path, err)) return -1;
    m->hp = L.mf.hp;
    const struct model_hparams *hp = &m->hp;
    int rc = -1;
    const struct mf_tensor *to = modelfile_find(&L.mf, "blk.0.attn_output.weight");
    const struct mf_tensor *td = modelfile_find(&L.mf, "blk.0.ffn_down.weight");
    if (!to || !td) {
        err_set(err, "%s: layer 0 attention output or MLP down projection is missing", path);
        goto out;
    }
    /* The split is computed once for all layers: align it to the largest block size any
     * layer's row-parallel matrices use (block sizes are 1, 32 or 256, so it fits all). */
    for (int il = 1; il < hp->n_layers; il++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "blk.%d.attn_output.weight", il);
        snprintf(b, sizeof b, "blk.%d.ffn_down.weight", il);
        const struct mf_tensor *ta = modelfile_find(&L.mf, a), *tb = modelfile_find(&L.mf, b);
        if (ta && dtype_block_elems(ta->type) > dtype_block_elems(to->type)) to = ta;
        if (tb && dtype_block_elems(tb->type) > dtype_block_elems(td->type)) td = tb;
    }
    if (shard_plan_make(&m->sp, hp, tp, rank, dtype_block_elems(to->type), dtype_block_elems(td->type), err))
        goto out;
    const struct mf_tensor *te = need_matrix(&L, "token_embd.weight", hp->vocab_size, hp->dim);
    if (!te || shard_stage(&m->sp, hp->n_layers, pp, stage, head_layers(&L.mf), err)) goto out;

    if (m->sp.first && load_rows(&L, &m->tok_embd, te, m->sp.vocab0, m->sp.n_vocab)) goto out;
    if (m->sp.last) {
        if (hp->tied_embeddings && m->sp.first) {
            m->output = m->tok_embd;
        } else {
            const struct mf_tensor *tout =
                hp->tied_embeddings ? te : need_matrix(&L, "output.weight", hp->vocab_size, hp->dim);
            if (!tout || load_rows(&L, &m->output, tout, m->sp.vocab0, m->sp.n_vocab)) goto out;
        }
        if (!(m->output_norm = load_vec(&L, "output_norm.weight", hp->dim))) goto out;
    }
    if (load_inv_freq(&L)) goto out;
    m->layers = xcalloc((unsigned long)m->sp.n_layers + 1, sizeof *m->layers);
    for (int il = m->sp.layer0; il < m->sp.layer0 + m->sp.n_layers; il++)
        if (load_layer(&L, il)) goto out;
    rc = 0;
out:
    modelfile_close(&L.mf);
    if (rc) model_free(m);
    return rc;
}

static void free_w(struct backend *be, struct bweight *w) {
    if (w->data) be->free(be->ctx, w->data);
    w->data = NULL;
}

void model_free(struct model *m) {
    struct backend *be = m->be;
    if (!be) return;
    if (m->layers) {
        for (int il = 0; il < m->sp.n_layers; il++) {
            struct layer_weights *lw = &m->layers[il];
            float *vecs[] = {lw->attn_norm, lw->ffn_norm, lw->qkv_bias, lw->q_norm, lw->k_norm};
            for (unsigned i = 0; i < sizeof vecs / sizeof *vecs; i++)
                if (vecs[i]) be->free(be->ctx, vecs[i]);
            for (int i = 0; i < 3; i++) free_w(be, &lw->qkv[i]);
            for (int i = 0; i < 2; i++) free_w(be, &lw->gate_up[i]);
            free_w(be, &lw->wo);
            free_w(be, &lw->down);
        }
        free(m->layers);
    }
    if (m->output.data != m->tok_embd.data) free_w(be, &m->output);
    free_w(be, &m->tok_embd);
    if (m->output_norm) be->free(be->ctx, m->output_norm);
    if (m->inv_freq) be->free(be->ctx, m->inv_freq);
    memset(m, 0, sizeof *m);
}
