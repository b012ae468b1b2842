#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../model/checkpoint.h"
#include "../model/fp8w.h"
#include "../model/int4w.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/half.h"
#include "../util/log.h"

struct loader {
    struct model_file mf;
    struct model *m;
    int dry; /* model_plan_weights: sizes only, nothing read (the backend counts) */
    unsigned char read[TENSOR_COUNT]; /* the table rows this rank has read (check_all_read) */
    char *err;
    int fp8_mats, fp8_row_scaled; /* FP8 matrices loaded, those with one scale per row */
};

/* Tensor id of layer il (ignored by model-wide rows), checked by modelfile_open against the
 * table; marks the row read. */
static const struct mf_tensor *need(struct loader *L, enum tensor_id id, int il) {
    const struct mf_tensor *t = modelfile_tensor(&L->mf, id, il);
    if (t) {
        L->read[id] = 1;
        return t;
    }
    char name[96];
    tensor_name(id, il, TNAMES_GGUF, name, sizeof name);
    err_set(L->err, "%s: tensor '%s' is missing", L->mf.paths[0], name);
    return NULL;
}

/* This rank's part [*off, *off + *n) of tensor id along the dimension tensor parallelism
 * splits (shard.h): rows of a column-parallel or vocabulary matrix, elements of a bias,
 * columns of a row-parallel matrix (Wo's block-aligned span around the rank's heads); all
 * of a replicated vector. */
static void rank_part(const struct model *m, enum tensor_id id, int *off, int *n) {
    const struct tensor_info *ti = tensor_info(id);
    const struct shard_plan *sp = &m->sp;
    int hd = m->hp.head_dim;
    enum tensor_dim d = ti->ne0;
    if (ti->role == TROLE_COLUMN || ti->role == TROLE_EMBEDDING || ti->role == TROLE_OUTPUT ||
        ti->role == TROLE_WHOLE)
        d = ti->ne1;
    *off = 0;
    *n = (int)tensor_dim_size(&m->hp, d);
    if (ti->role == TROLE_NORM || ti->role == TROLE_ROPE || ti->role == TROLE_WHOLE) return;
    if (ti->role == TROLE_ROW && d == TDIM_Q) {
        *off = sp->wo_col0;
        *n = sp->wo_ncols;
    } else if (d == TDIM_Q) {
        *off = sp->q_head0 * hd;
        *n = sp->n_q * hd;
    } else if (d == TDIM_KV) {
        *off = sp->kv_head0 * hd;
        *n = sp->n_kv * hd;
    } else if (d == TDIM_FFN) {
        *off = sp->ffn0;
        *n = sp->n_ffn;
    } else if (d == TDIM_VOCAB) {
        *off = sp->vocab0;
        *n = sp->n_vocab;
    } else if (d == TDIM_FFN_EXP) {
        *off = sp->effn0;
        *n = sp->n_effn;
    } else if (d == TDIM_FFN_SHEXP) {
        *off = sp->sffn0;
        *n = sp->n_sffn;
    }
}

static void *upload_host(struct loader *L, const void *host, size_t bytes) {
    struct backend *be = L->m->be;
    void *d = be->alloc(be->ctx, bytes);
    be->upload(be->ctx, d, host, bytes);
    L->m->weight_bytes += bytes;
    return d;
}

/* struct bweight's amax of a matrix read into host: FP8 and INT4 weights' largest |value|
 * (the CUDA backend's prefill copy is F16 when it fits), 0 for other types. */
static float weight_amax(const struct loader *L, const struct mf_tensor *t, const char *host,
                         size_t bytes) {
    if (L->dry) return 0;
    return t->fp8    ? fp8w_amax((const uint8_t *)host, bytes)
           : t->int4 ? int4w_amax((const uint8_t *)host, bytes)
                     : 0;
}

/* struct bweight's row_scaled of FP8 weights read into host (fp8w_row_scaled): the CUDA
 * backend's W8A8 prefill applies; 0 for other types. Counted for load's log line. */
static int weight_row_scaled(struct loader *L, const struct mf_tensor *t, const char *host,
                             size_t bytes, int64_t cols) {
    if (L->dry || !t->fp8) return 0;
    const int yes = fp8w_row_scaled((const uint8_t *)host, bytes, cols);
    L->fp8_mats++;
    L->fp8_row_scaled += yes;
    return yes;
}

/* How a rank stores a matrix's columns: as they are (gather NULL, kp the columns), or as
 * int4w_order regroups an INT4 act-order slice (kp stored columns; struct bweight's gather). */
struct col_order {
    int32_t *gather;
    int64_t kp;
};

/* The order of t's columns [col0, col0 + ncols). A gather index needs the backend's gather
 * (matmul): the CPU backend's; the CUDA backend refuses such weights here. */
static int col_order(struct loader *L, const struct mf_tensor *t, int col0, int ncols,
                     struct col_order *o) {
    *o = (struct col_order){NULL, ncols};
    if (!t->int4) return 0;
    if (int4w_order(&L->mf, t, col0, ncols, &o->gather, &o->kp, L->err)) return -1;
    if (o->gather && L->m->be->kind == BACKEND_CUDA) {
        free(o->gather);
        o->gather = NULL;
        return err_set(L->err,
                       "%s: tensor '%s': a GPTQ act-order g_idx whose groups are not runs of 32 "
                       "columns needs the activations gathered before the matmul, which only "
                       "the CPU backend does (use backend = \"cpu\")",
                       L->mf.paths[t->file], t->src_name ? t->src_name : t->name);
    }
    return 0;
}

static int same_order(const struct col_order *a, const struct col_order *b) {
    if (a->kp != b->kp || !a->gather != !b->gather) return 0;
    return !a->gather || !memcmp(a->gather, b->gather, sizeof(int32_t) * (size_t)a->kp);
}

/* The weight's gather index into backend memory, when it has one. */
static void attach_order(struct loader *L, struct bweight *w, const struct col_order *o) {
    if (o->gather) w->gather = upload_host(L, o->gather, sizeof(int32_t) * (size_t)o->kp);
}

/* Rows [row0, row0 + nrows) of a matrix that starts at row `base` of tensor t (an expert's
 * in a 3-D tensor; else 0): one contiguous byte range of the file. */
static int read_rows(struct loader *L, const struct mf_tensor *t, int64_t base, int row0, int nrows,
                     const struct col_order *o, char *dst) {
    row0 += (int)base;
    if (t->fp8) return fp8w_read(&L->mf, t, row0, nrows, 0, t->ne[0], (uint8_t *)dst, L->err);
    if (t->int4)
        return int4w_read(&L->mf, t, row0, nrows, 0, t->ne[0], o->gather, o->kp, (uint8_t *)dst,
                          L->err);
    int64_t rb = dtype_row_bytes(t->type, t->ne[0]);
    if (rb < 0) return err_set(L->err, "%s: tensor '%s': bad row length", L->mf.paths[0], t->name);
    if (nrows == 0) return 0;
    return modelfile_read(&L->mf, t, (uint64_t)row0 * (uint64_t)rb, (uint64_t)nrows * (uint64_t)rb,
                          dst, L->err);
}

/* This rank's rows of column-parallel or vocabulary matrices t[0..n) of one type and one
 * column order o (col_order of the whole input), stacked into one matrix (n > 1: fused QKV,
 * gate+up); base[i]: t[i]'s first row (experts), or base NULL. */
static int load_rows(struct loader *L, struct bweight *w, int n, const struct mf_tensor **t,
                     const enum tensor_id *ids, const int64_t *base, const struct col_order *o) {
    int row0[4], nrows[4], rows = 0;
    for (int i = 0; i < n; i++) {
        rank_part(L->m, ids[i], &row0[i], &nrows[i]);
        rows += nrows[i];
    }
    int cols = (int)o->kp;
    int64_t rb = dtype_row_bytes(t[0]->type, cols);
    size_t bytes = (size_t)rb * (size_t)rows;
    char *host = xmalloc(L->dry || !bytes ? 1 : bytes);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        if (!L->dry && read_rows(L, t[i], base ? base[i] : 0, row0[i], nrows[i], o, host + at)) {
            free(host);
            return -1;
        }
        at += (size_t)rb * (size_t)nrows[i];
    }
    *w = (struct bweight){.data = upload_host(L, host, bytes),
                          .type = t[0]->type,
                          .rows = rows,
                          .cols = cols,
                          .amax = weight_amax(L, t[0], host, bytes),
                          .row_scaled = weight_row_scaled(L, t[0], host, bytes, cols)};
    attach_order(L, w, o);
    free(host);
    return 0;
}

/* Column-parallel matrices t[0..n) (n <= 4; ids, base as load_rows'), stacked into w[0] when
 * they share a type and a column order (one matmul instead of n; *fused set), else one
 * each into w[0..n). */
static int load_rows_stacked(struct loader *L, struct bweight *w, int *fused, int n,
                             const struct mf_tensor **t, const enum tensor_id *ids,
                             const int64_t *base) {
    struct col_order o[4];
    *fused = 1;
    for (int i = 0; i < n; i++) {
        if (col_order(L, t[i], 0, (int)t[i]->ne[0], &o[i])) {
            while (i--) free(o[i].gather);
            return -1;
        }
        *fused &= t[i]->type == t[0]->type && same_order(&o[0], &o[i]);
    }
    int rc = *fused ? load_rows(L, &w[0], n, t, ids, base, &o[0]) : 0;
    for (int i = 0; i < n && !*fused && !rc; i++)
        rc = load_rows(L, &w[i], 1, &t[i], &ids[i], base ? &base[i] : NULL, &o[i]);
    for (int i = 0; i < n; i++) free(o[i].gather);
    return rc;
}

/* Row-parallel weights: this rank's columns [col0, col0 + ncols) of every row, which must
 * fall on block boundaries (the shard plan makes sure). One read per row. The matrix starts
 * at row `base` of t (an expert's in a 3-D tensor; else 0). INT4 act-order: the columns
 * regrouped and padded (col_order), so the stored width may exceed ncols. */
static int load_cols(struct loader *L, struct bweight *w, const struct mf_tensor *t,
                     enum tensor_id id, int64_t base) {
    int col0, ncols;
    rank_part(L->m, id, &col0, &ncols);
    int be_ = dtype_block_elems(t->type);
    int rows = (int)t->ne[1];
    if (col0 % be_ || ncols % be_)
        return err_set(L->err,
                       "%s: tensor '%s': column slice [%d, %d) is not on %s block "
                       "boundaries",
                       L->mf.paths[0], t->name, col0, col0 + ncols, dtype_name(t->type));
    struct col_order o;
    if (col_order(L, t, col0, ncols, &o)) return -1;
    int64_t rb = dtype_row_bytes(t->type, t->ne[0]);
    int64_t sb = dtype_row_bytes(t->type, o.kp), off = dtype_row_bytes(t->type, col0);
    size_t bytes = (size_t)sb * (size_t)rows;
    char *host = xmalloc(L->dry || !bytes ? 1 : bytes);
    if (!L->dry &&
        ((t->fp8 && fp8w_read(&L->mf, t, (int)base, rows, col0, ncols, (uint8_t *)host, L->err)) ||
         (t->int4 && int4w_read(&L->mf, t, (int)base, rows, col0, ncols, o.gather, o.kp,
                                (uint8_t *)host, L->err)))) {
        free(o.gather);
        free(host);
        return -1;
    }
    for (int r = 0; r < rows && sb > 0 && !t->fp8 && !t->int4 && !L->dry; r++)
        if (modelfile_read(&L->mf, t, (uint64_t)(base + r) * (uint64_t)rb + (uint64_t)off,
                           (uint64_t)sb, host + (size_t)r * (size_t)sb, L->err)) {
            free(host);
            return -1;
        }
    *w = (struct bweight){.data = upload_host(L, host, bytes),
                          .type = t->type,
                          .rows = rows,
                          .cols = (int)o.kp,
                          .amax = weight_amax(L, t, host, bytes),
                          .row_scaled = weight_row_scaled(L, t, host, bytes, o.kp)};
    attach_order(L, w, &o);
    free(o.gather);
    free(host);
    return 0;
}

/* Matrix id of layer il as its role splits it. */
static int load_matrix(struct loader *L, struct bweight *w, enum tensor_id id, int il) {
    const struct mf_tensor *t = need(L, id, il);
    if (!t) return -1;
    if (tensor_info(id)->role == TROLE_ROW) return load_cols(L, w, t, id, 0);
    struct col_order o;
    if (col_order(L, t, 0, (int)t->ne[0], &o)) return -1;
    int rc = load_rows(L, w, 1, &t, &id, NULL, &o);
    free(o.gather);
    return rc;
}

/* Column-parallel matrices ids[0..n) of layer il (n <= 4), as load_rows_stacked. */
static int load_stacked(struct loader *L, struct bweight *w, int *fused, int n,
                        const enum tensor_id *ids, int il) {
    const struct mf_tensor *t[4];
    for (int i = 0; i < n; i++)
        if (!(t[i] = need(L, ids[i], il))) return -1;
    return load_rows_stacked(L, w, fused, n, t, ids, NULL);
}

/* Expert `e` of expert row id, layer il; marks the row read. */
static const struct mf_tensor *need_expert(struct loader *L, enum tensor_id id, int il, int e,
                                           int64_t *base) {
    const struct mf_tensor *t = modelfile_expert(&L->mf, id, il, e, base);
    if (t) {
        L->read[id] = 1;
        return t;
    }
    char name[128];
    tensor_expert_name(id, il, e, TNAMES_GGUF, name, sizeof name);
    err_set(L->err, "%s: tensor '%s' is missing", L->mf.paths[0], name);
    return NULL;
}

/* Expert e's gate+up rows and down columns as the shard plan gives them to this rank. */
static int load_expert(struct loader *L, struct moe_expert *x, int il, int e) {
    static const enum tensor_id gu[2] = {TENSOR_FFN_GATE_EXPS, TENSOR_FFN_UP_EXPS};
    const struct mf_tensor *t[2], *down;
    int64_t base[2], dbase;
    for (int i = 0; i < 2; i++)
        if (!(t[i] = need_expert(L, gu[i], il, e, &base[i]))) return -1;
    if (!(down = need_expert(L, TENSOR_FFN_DOWN_EXPS, il, e, &dbase))) return -1;
    if (load_rows_stacked(L, x->gate_up, &x->gate_up_fused, 2, t, gu, base)) return -1;
    return load_cols(L, &x->down, down, TENSOR_FFN_DOWN_EXPS, dbase);
}

/* A mixture-of-experts layer's router, this rank's experts, and the shared expert. */
static int load_moe(struct loader *L, struct layer_weights *lw, int il) {
    static const enum tensor_id shexp[2] = {TENSOR_FFN_GATE_SHEXP, TENSOR_FFN_UP_SHEXP};
    const struct shard_plan *sp = &L->m->sp;
    lw->moe = 1;
    if (load_matrix(L, &lw->router, TENSOR_FFN_GATE_INP, il)) return -1;
    lw->experts = xcalloc((size_t)sp->n_exp + 1, sizeof *lw->experts);
    for (int i = 0; i < sp->n_exp; i++)
        if (load_expert(L, &lw->experts[i], il, sp->exp0 + i)) return -1;
    if (L->m->hp.shexp_ffn_dim <= 0) return 0;
    if (load_matrix(L, &lw->shexp_gate, TENSOR_FFN_GATE_INP_SHEXP, il) ||
        load_stacked(L, lw->shexp_gate_up, &lw->shexp_fused, 2, shexp, il))
        return -1;
    return load_matrix(L, &lw->shexp_down, TENSOR_FFN_DOWN_SHEXP, il);
}

/* This rank's part of vector id of layer il, converted to f32 into dst (host); *n_out its
 * length. */
static int read_vec(struct loader *L, enum tensor_id id, int il, float *dst, int *n_out) {
    const struct mf_tensor *t = need(L, id, il);
    if (!t) return -1;
    int off, n;
    rank_part(L->m, id, &off, &n);
    *n_out = n;
    int es = t->type == DT_F32 ? 4 : 2; /* modelfile_open allowed F32, F16 and BF16 only */
    char *raw = xmalloc((size_t)n * 4 + 1);
    int rc = n && !L->dry ? modelfile_read(&L->mf, t, (uint64_t)off * (uint64_t)es,
                                           (uint64_t)n * (uint64_t)es, raw, L->err)
                          : 0;
    if (L->dry) memset(raw, 0, (size_t)n * 4 + 1);
    if (!rc)
        for (int i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            dst[i] = t->type == DT_F32   ? ((float *)raw)[i]
                     : t->type == DT_F16 ? f16_to_f32(h)
                                         : bf16_to_f32(h);
        }
    free(raw);
    return rc;
}

/* Vectors ids[0..n) of layer il, this rank's part of each, one after the other in backend
 * memory (n > 1: the QKV bias). */
static float *load_vecs(struct loader *L, int n, const enum tensor_id *ids, int il) {
    int total = 0;
    for (int i = 0; i < n; i++) {
        int off, len;
        rank_part(L->m, ids[i], &off, &len);
        total += len;
    }
    float *host = xmalloc(sizeof(float) * (size_t)(total ? total : 1)), *d = NULL;
    int at = 0, rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        int len = 0;
        rc = read_vec(L, ids[i], il, host + at, &len);
        at += len;
    }
    if (!rc) d = upload_host(L, host, sizeof(float) * (size_t)total);
    free(host);
    return d;
}

static float *load_vec(struct loader *L, enum tensor_id id, int il) {
    return load_vecs(L, 1, &id, il);
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
    int half = hp->head_dim / 2, n;
    float *f = xmalloc(sizeof(float) * (size_t)half);
    float *factors = NULL;
    if (modelfile_tensor(&L->mf, TENSOR_ROPE_FREQS, -1)) {
        factors = xmalloc(sizeof(float) * (size_t)half);
        if (read_vec(L, TENSOR_ROPE_FREQS, -1, factors, &n)) {
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
    static const enum tensor_id qkv[3] = {TENSOR_ATTN_Q, TENSOR_ATTN_K, TENSOR_ATTN_V};
    static const enum tensor_id qkv_bias[3] = {TENSOR_ATTN_Q_BIAS, TENSOR_ATTN_K_BIAS,
                                               TENSOR_ATTN_V_BIAS};
    static const enum tensor_id gate_up[2] = {TENSOR_FFN_GATE, TENSOR_FFN_UP};
    const struct model_hparams *hp = &L->m->hp;
    struct layer_weights *lw = &L->m->layers[il - L->m->sp.layer0];
    if (!(lw->attn_norm = load_vec(L, TENSOR_ATTN_NORM, il))) return -1;
    if (!(lw->ffn_norm = load_vec(L, TENSOR_FFN_NORM, il))) return -1;
    if (load_stacked(L, lw->qkv, &lw->qkv_fused, 3, qkv, il)) return -1;
    if (hp->qkv_bias && !(lw->qkv_bias = load_vecs(L, 3, qkv_bias, il))) return -1;
    if (hp->qk_norm) {
        if (!(lw->q_norm = load_vec(L, TENSOR_ATTN_Q_NORM, il))) return -1;
        if (!(lw->k_norm = load_vec(L, TENSOR_ATTN_K_NORM, il))) return -1;
    }
    if (load_matrix(L, &lw->wo, TENSOR_ATTN_OUTPUT, il)) return -1;
    if (hparams_layer_moe(hp, il)) return load_moe(L, lw, il);
    if (load_stacked(L, lw->gate_up, &lw->gate_up_fused, 2, gate_up, il)) return -1;
    return load_matrix(L, &lw->down, TENSOR_FFN_DOWN, il);
}

/* Every row of the tensor table this rank holds and this model needs has been read: a row
 * added to the table without loading code is refused here rather than left out of the
 * forward pass. */
static int check_all_read(struct loader *L) {
    const struct shard_plan *sp = &L->m->sp;
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const struct tensor_info *ti = tensor_info(id);
        int il = ti->scope == TSCOPE_LAYER ? sp->layer0 : -1;
        int here = ti->scope == TSCOPE_LAYER || ti->scope == TSCOPE_EVERY ||
                   (ti->scope == TSCOPE_FIRST && sp->first) ||
                   (ti->scope == TSCOPE_LAST && sp->last);
        int present = modelfile_tensor(&L->mf, id, il) != NULL;
        if (L->read[id] || !here || !tensor_needed(&L->m->hp, id, il, present)) continue;
        char name[96];
        tensor_name(id, il, TNAMES_GGUF, name, sizeof name);
        return err_set(L->err,
                       "%s: tensor '%s' is needed but the weight loader "
                       "(parallel/model.c) does not read it",
                       L->mf.paths[0], name);
    }
    return 0;
}

/* The LM head's cost in layers' worth (shard_stage): its elements over layer 0's matrices'. */
static double head_layers(const struct model_file *mf) {
    double layer = 0;
    for (int id = 0; id < TENSOR_COUNT; id++) {
        const struct mf_tensor *t = modelfile_tensor(mf, id, 0);
        if (t && tensor_info(id)->scope == TSCOPE_LAYER && tensor_is_matrix(id))
            layer += (double)t->ne[0] * (double)t->ne[1];
    }
    return shard_head_layers((double)mf->hp.vocab_size * mf->hp.dim, layer);
}

/* The block size (elements) the split of row-parallel matrix id must respect: the largest
 * its type has in any layer, since one split serves all layers (block sizes are 1, 32 or
 * 256, so the largest is a multiple of the others). An INT4 matrix's block is its group
 * (32 .. 2^16 columns, a multiple of 32): each rank's columns start on a group boundary. */
static int split_block(const struct model_file *mf, enum tensor_id id, int tp) {
    int block = 1;
    int64_t row0;
    for (int il = 0; il < mf->hp.n_layers; il++) {
        const struct mf_tensor *t = tensor_info(id)->ne2 == TDIM_EXPERTS
                                        ? modelfile_expert(mf, id, il, 0, &row0)
                                        : modelfile_tensor(mf, id, il);
        int b = t ? dtype_block_elems(t->type) : 1;
        if (t && t->int4 && tp > 1 && mf->int4.group > b) b = mf->int4.group; /* tp 1: no cut */
        if (b > block) block = b;
    }
    return block;
}

enum moe_split moe_split_parse(const char *s) {
    if (s && !strcmp(s, "tp")) return MOE_SPLIT_TP;
    if (s && !strcmp(s, "ep")) return MOE_SPLIT_EP;
    return MOE_SPLIT_AUTO;
}

static int moe_ep(const struct model_hparams *hp, enum moe_split moe, int tp) {
    if (moe != MOE_SPLIT_AUTO) return moe == MOE_SPLIT_EP;
    return hp->n_experts >= tp && hp->expert_ffn_dim / tp < MOE_AUTO_MIN_COLS;
}

static int load(struct model *m, const char *path, struct backend *be, int tp, int rank, int pp,
                int stage, enum moe_split moe, const struct load_progress *lp, int dry, char *err) {
    memset(m, 0, sizeof *m);
    m->be = be;
    struct loader L = {.m = m, .err = err, .dry = dry};
    if (checkpoint_open(&L.mf, path, err)) return -1;
    m->hp = L.mf.hp;
    const struct model_hparams *hp = &m->hp;
    int rc = -1;
    if (shard_plan_make(&m->sp, hp, tp, rank, split_block(&L.mf, TENSOR_ATTN_OUTPUT, tp),
                        split_block(&L.mf, TENSOR_FFN_DOWN, tp), err)) {
        if (L.mf.int4.group) { /* name the tensor and the group the split must respect */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", err);
            err_set(err,
                    "%s: INT4 (%s) groups of %d columns: the row-parallel "
                    "blk.*.attn_output.weight and blk.*.ffn_down.weight are split on group "
                    "boundaries, and %s",
                    L.mf.paths[0], L.mf.int4.method, L.mf.int4.group, msg);
        }
        goto out;
    }
    if (shard_plan_moe(&m->sp, hp, moe_ep(hp, moe, tp),
                       split_block(&L.mf, TENSOR_FFN_DOWN_EXPS, tp),
                       split_block(&L.mf, TENSOR_FFN_DOWN_SHEXP, tp), err) ||
        shard_stage(&m->sp, hp->n_layers, pp, stage, head_layers(&L.mf), err))
        goto out;
    if (m->sp.first && load_matrix(&L, &m->tok_embd, TENSOR_TOKEN_EMBD, -1)) goto out;
    if (m->sp.last) {
        if (hp->tied_embeddings && m->sp.first) m->output = m->tok_embd;
        else if (load_matrix(&L, &m->output,
                             hp->tied_embeddings ? TENSOR_TOKEN_EMBD : TENSOR_OUTPUT, -1))
            goto out;
        if (!(m->output_norm = load_vec(&L, TENSOR_OUTPUT_NORM, -1))) goto out;
    }
    if (load_inv_freq(&L)) goto out;
    m->layers = xcalloc((unsigned long)m->sp.n_layers + 1, sizeof *m->layers);
    for (int il = m->sp.layer0; il < m->sp.layer0 + m->sp.n_layers; il++) {
        if (load_layer(&L, il)) goto out;
        if (lp && lp->fn) lp->fn(lp->arg, il - m->sp.layer0 + 1, m->sp.n_layers, m->weight_bytes);
    }
    rc = check_all_read(&L);
    if (!rc && L.fp8_mats)
        LOG(LOG_INFO,
            "FP8 weights: %d of %d matrices with one scale per row (on GPUs with FP8 tensor "
            "cores the CUDA backend's prefill multiplies those as FP8 W8A8, the others through "
            "a 16-bit copy)",
            L.fp8_row_scaled, L.fp8_mats);
out:
    modelfile_close(&L.mf);
    if (rc) model_free(m);
    return rc;
}

static void free_w(struct backend *be, struct bweight *w) {
    if (w->data) be->free(be->ctx, w->data);
    if (w->gather) be->free(be->ctx, w->gather);
    w->data = NULL;
    w->gather = NULL;
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
            for (int e = 0; lw->experts && e < m->sp.n_exp; e++) {
                for (int i = 0; i < 2; i++) free_w(be, &lw->experts[e].gate_up[i]);
                free_w(be, &lw->experts[e].down);
            }
            free(lw->experts);
            struct bweight *moe_w[] = {&lw->router, &lw->shexp_gate, &lw->shexp_gate_up[0],
                                       &lw->shexp_gate_up[1], &lw->shexp_down};
            for (unsigned i = 0; i < sizeof moe_w / sizeof *moe_w; i++) free_w(be, moe_w[i]);
        }
        free(m->layers);
    }
    if (m->output.data != m->tok_embd.data) free_w(be, &m->output);
    free_w(be, &m->tok_embd);
    if (m->output_norm) be->free(be->ctx, m->output_norm);
    if (m->inv_freq) be->free(be->ctx, m->inv_freq);
    memset(m, 0, sizeof *m);
}

int model_load(struct model *m, const char *path, struct backend *be, int tp, int rank, int pp,
               int stage, enum moe_split moe, const struct load_progress *lp, char *err) {
    return load(m, path, be, tp, rank, pp, stage, moe, lp, 0, err);
}

/* The planning backend: allocations are distinct addresses never touched, copies nothing. */
static uintptr_t plan_next;
static void *plan_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    (void)bytes;
    return (void *)(plan_next += 64);
}
static void plan_free(void *ctx, void *p) {
    (void)ctx;
    (void)p;
}
static void plan_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    (void)dst;
    (void)src;
    (void)bytes;
}

int model_plan_weights(const char *path, int tp, int rank, int pp, int stage, enum moe_split moe,
                       size_t *bytes, char *err) {
    struct backend be = {.kind = BACKEND_NONE,
                         .name = "plan",
                         .alloc = plan_alloc,
                         .free = plan_free,
                         .upload = plan_copy,
                         .download = plan_copy};
    struct model m;
    if (load(&m, path, &be, tp, rank, pp, stage, moe, NULL, 1, err)) return -1;
    *bytes = m.weight_bytes;
    model_free(&m);
    return 0;
}
