/* INT4 weight-only checkpoints: packed tensor shapes, and the repacking of a rank's shard
 * into DT_I4_S32 blocks. */
#include "int4w.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/half.h"
#include "modelfile.h"
#include "tensors.h"

/* AWQ's GEMM packing puts output column c of each 8 in nibble awq_pos[c] (its pack order
 * 0, 2, 4, 6, 1, 3, 5, 7, inverted). */
static const int awq_pos[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* ---- checks on open ----------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static const struct mf_tensor *part(const struct model_file *m, const struct mf_tensor *t,
                                    enum int4w_part p) {
    char name[112];
    snprintf(name, sizeof name, "%s%s", t->name, int4w_part_suffix[p]);
    return modelfile_find(m, name);
}

static const char *src(const struct mf_tensor *t) { return t->src_name ? t->src_name : t->name; }

/* Part s has file dtype one of dts ("I32", "F16 BF16 F32", ...) and shape [d0, d1]
 * (outermost first; d1 < 0: 1-D [d0]). */
static int part_ok(const struct model_file *m, const struct mf_tensor *s, const char *dts,
                   int64_t d0, int64_t d1, const char *why, char *err) {
    const char *path = m->paths[s->file];
    const char *dt = strstr(dts, s->qdtype);
    size_t l = strlen(s->qdtype);
    if (!l || !dt || (dt[l] && dt[l] != ' '))
        return err_set(err, "%s: tensor '%s' has dtype %s (%s expected)", path, src(s), s->qdtype,
                       dts);
    int ok = d1 < 0 ? s->n_dims == 1 && s->ne[0] == d0
                    : s->n_dims == 2 && s->ne[1] == d0 && s->ne[0] == d1;
    if (ok) return 0;
    char got[64], want[48];
    if (s->n_dims == 1) snprintf(got, sizeof got, "[%lld]", (long long)s->ne[0]);
    else
        snprintf(got, sizeof got, "[%lld, %lld]%s", (long long)s->ne[1], (long long)s->ne[0],
                 s->n_dims > 2 ? " (more dimensions)" : "");
    if (d1 < 0) snprintf(want, sizeof want, "[%lld]", (long long)d0);
    else snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
    return err_set(err, "%s: tensor '%s' has shape %s; %s needs %s", path, src(s), got, why, want);
}

/* compressed-tensors' weight_shape must say the [out, in] the packed tensor stands for. */
static int shape_values_ok(const struct model_file *m, const struct mf_tensor *s, int64_t rows,
                           int64_t cols, char *err) {
    int64_t v[2];
    int32_t v32[2];
    int i64 = !strcmp(s->qdtype, "I64");
    if (modelfile_read(m, s, 0, i64 ? 16 : 8, i64 ? (void *)v : (void *)v32, err)) return -1;
    if (!i64) v[0] = v32[0], v[1] = v32[1];
    if (v[0] != rows || v[1] != cols)
        return err_set(err,
                       "%s: tensor '%s' says [%lld, %lld]; the packed weight holds "
                       "[%lld, %lld]",
                       m->paths[s->file], src(s), (long long)v[0], (long long)v[1], (long long)rows,
                       (long long)cols);
    return 0;
}

/* The parts of packed weight t against its format. */
static int check_one(const struct model_file *m, const struct mf_tensor *t, char *err) {
    const struct int4w_config *q = &m->int4;
    const char *path = m->paths[t->file];
    int layer, id = tensor_parse(t->name, TNAMES_GGUF, &layer);
    enum tensor_role role = id >= 0 ? tensor_info(id)->role : TROLE_NORM;
    if (role != TROLE_COLUMN && role != TROLE_ROW)
        return err_set(err,
                       "%s: tensor '%s': INT4 is supported for the attention and MLP "
                       "matrices only",
                       path, src(t));
    const int64_t rows = t->ne[1], cols = t->ne[0];
    if (strcmp(t->qdtype, "I32"))
        return err_set(err, "%s: tensor '%s' has dtype %s (I32 expected)", path, src(t), t->qdtype);
    if (cols % I4_ELEMS || rows % 8)
        return err_set(err,
                       "%s: tensor '%s': a %lld x %lld INT4 weight; tpd needs a multiple "
                       "of %d input columns and of 8 output rows",
                       path, src(t), (long long)rows, (long long)cols, I4_ELEMS);
    const int64_t ng = q->group ? ceil_div(cols, q->group) : 1;
    char why[96], grp[32] = "per channel";
    if (q->group) snprintf(grp, sizeof grp, "groups of %d", q->group);
    snprintf(why, sizeof why, "the %lld x %lld weight (%s, %s)", (long long)rows, (long long)cols,
             q->method, grp);
    const struct mf_tensor *s = part(m, t, INT4W_SCALE), *z = part(m, t, INT4W_ZERO);
    const struct mf_tensor *gi = part(m, t, INT4W_GIDX), *sh = part(m, t, INT4W_SHAPE);
    const char *fl = "F16 BF16 F32";
    if (!s)
        return err_set(err, "%s: tensor '%s' (%s) has no scale tensor", path, src(t), q->method);
    if (!z && (q->format != INT4W_CT || !q->sym))
        return err_set(err, "%s: tensor '%s' (%s, asymmetric) has no zero point tensor", path,
                       src(t), q->method);
    if (q->format == INT4W_CT) {
        if (part_ok(m, s, fl, rows, ng, why, err)) return -1;
        if (z && !q->sym && !strcmp(z->qdtype, "I32") &&
            part_ok(m, z, "I32", ceil_div(rows, 8), ng, why, err))
            return -1;
        if (z && !q->sym && strcmp(z->qdtype, "I32") && part_ok(m, z, "I8", rows, ng, why, err))
            return -1;
        if (!sh) return err_set(err, "%s: tensor '%s' has no weight_shape", path, src(t));
        if (part_ok(m, sh, "I32 I64", 2, -1, why, err) || shape_values_ok(m, sh, rows, cols, err))
            return -1;
    } else {
        if (part_ok(m, s, fl, ng, rows, why, err) ||
            part_ok(m, z, "I32", ng, ceil_div(rows, 8), why, err))
            return -1;
    }
    /* per channel, a g_idx (GPTQ writes one) must be all 0: int4w_read checks its range */
    return gi ? part_ok(m, gi, "I32", cols, -1, why, err) : 0;
}

int int4w_check(const struct model_file *m, char *err) {
    for (int i = 0; i < m->n_tensors; i++) {
        const struct mf_tensor *t = &m->tensors[i];
        if (t->int4 == INT4W_PACKED && check_one(m, t, err)) return -1;
        if (t->int4 > INT4W_PACKED) {
            char wname[96];
            size_t ln = strlen(t->name), ls = strlen(int4w_part_suffix[t->int4]);
            snprintf(wname, sizeof wname, "%.*s", (int)(ln - ls), t->name);
            const struct mf_tensor *w = modelfile_find(m, wname);
            if (!w || w->int4 != INT4W_PACKED)
                return err_set(err, "%s: tensor '%s' belongs to no packed INT4 weight",
                               m->paths[t->file], src(t));
        }
    }
    return 0;
}

/* ---- reading a shard ---------------------------------------------------------------- */

/* Rows [r0, r0 + nr) x elements [c0, c0 + nc) of a row-major tensor with rows of C
 * elements of es bytes. */
static int read_rect(const struct model_file *m, const struct mf_tensor *t, int es, int64_t C,
                     int64_t r0, int64_t nr, int64_t c0, int64_t nc, uint8_t *dst, char *err) {
    for (int64_t r = 0; r < nr; r++)
        if (modelfile_read(m, t, (uint64_t)((r0 + r) * C + c0) * (uint64_t)es, (uint64_t)(nc * es),
                           dst + r * nc * es, err))
            return -1;
    return 0;
}

static int32_t i32_at(const uint8_t *p, int64_t i) {
    int32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

static int nib(int32_t v, int k) { return (int)(((uint32_t)v >> (4 * k)) & 15); }

/* The scales (or, with zero set, the zero points) of groups [g0, g0 + ng) and rows
 * [row0, row0 + nrows), as f32 into out[(g - g0) * nrows + r]. */
static int read_group_params(const struct model_file *m, const struct mf_tensor *t,
                             const struct mf_tensor *p, int zero, int64_t row0, int64_t nrows,
                             int64_t g0, int64_t ng, float *out, char *err) {
    const struct int4w_config *q = &m->int4;
    const int64_t G = q->group ? ceil_div(t->ne[0], q->group) : 1, R = t->ne[1];
    if (zero && !p) { /* compressed-tensors symmetric: zero point 0, i.e. 8 unsigned */
        for (int64_t i = 0; i < ng * nrows; i++) out[i] = 8;
        return 0;
    }
    const int ct = q->format == INT4W_CT;
    const int packed = zero && !strcmp(p->qdtype, "I32"); /* 8 rows a word */
    const int es = !zero ? (p->qdtype[1] == '3' ? 4 : 2) : packed ? 4 : 1;
    const int64_t pr0 = packed ? row0 / 8 : row0;
    const int64_t npr = packed ? (row0 + nrows - 1) / 8 - pr0 + 1 : nrows;
    const int64_t W = packed ? ceil_div(R, 8) : R;
    uint8_t *raw = xmalloc((size_t)(npr * ng * es) + 1);
    int rc = ct ? read_rect(m, p, es, G, pr0, npr, g0, ng, raw, err)  /* [rows, groups] */
                : read_rect(m, p, es, W, g0, ng, pr0, npr, raw, err); /* [groups, rows] */
    for (int64_t g = 0; g < ng && !rc; g++)
        for (int64_t r = 0; r < nrows && !rc; r++) {
            const int64_t pr = (packed ? (row0 + r) / 8 : row0 + r) - pr0;
            const int64_t i = ct ? pr * ng + g : g * npr + pr;
            float v;
            if (!zero) {
                uint16_t h;
                memcpy(&h, raw + 2 * i, 2);
                if (es == 4) memcpy(&v, raw + 4 * i, 4);
                else v = !strcmp(p->qdtype, "F16") ? f16_to_f32(h) : bf16_to_f32(h);
                if (!isfinite(v))
                    rc = err_set(err,
                                 "%s: tensor '%s': scale of row %lld, group %lld is not "
                                 "finite",
                                 m->paths[p->file], src(p), (long long)(row0 + r),
                                 (long long)(g0 + g));
            } else if (!packed) { /* compressed-tensors int8 zero point, signed */
                v = (float)((int8_t)raw[i] + 8);
            } else {
                const int k = (int)((row0 + r) % 8);
                v = (float)(nib(i32_at(raw, i), q->format == INT4W_AWQ ? awq_pos[k] : k) +
                            q->zero_offset);
            }
            out[g * nrows + r] = v;
        }
    free(raw);
    return rc;
}

/* Entry c of g_idx part gi holds v: a group of 0..G-1? */
static int gidx_entry_ok(const struct model_file *m, const struct mf_tensor *gi, int64_t c,
                         int32_t v, int64_t G, char *err) {
    if (v >= 0 && v < G) return 0;
    return err_set(err, "%s: tensor '%s': element %lld is %d, not a group of 0..%lld",
                   m->paths[gi->file], src(gi), (long long)c, v, (long long)(G - 1));
}

int int4w_order(const struct model_file *m, const struct mf_tensor *t, int64_t col0, int64_t ncols,
                int32_t **gather, int64_t *kp, char *err) {
    const struct int4w_config *q = &m->int4;
    const struct mf_tensor *gi = part(m, t, INT4W_GIDX);
    const int64_t cols = t->ne[0], G = q->group ? ceil_div(cols, q->group) : 1;
    *gather = NULL;
    *kp = ncols;
    if (!gi || ncols <= 0 || col0 < 0 || col0 + ncols > cols) return 0; /* int4w_read refuses */
    int32_t *g = xmalloc(sizeof(int32_t) * (size_t)cols);
    int64_t *n = xcalloc((size_t)G + 1, sizeof(int64_t)), *at = NULL;
    int rc = modelfile_read(m, gi, 0, (uint64_t)cols * 4, g, err), spread = 0;
    for (int64_t c = 0; c < cols && !rc; c++)
        if (!(rc = gidx_entry_ok(m, gi, c, g[c], G, err))) n[g[c]]++;
    /* the whole input: every group holds its group_size columns (the last one the rest),
     * as GPTQ's act-order assigns them along its permutation */
    for (int64_t k = 0; k < G && !rc; k++) {
        const int64_t want = q->group ? (k + 1 < G ? q->group : cols - k * q->group) : cols;
        if (n[k] != want)
            rc = err_set(err,
                         "%s: tensor '%s': group %lld has %lld columns, not %lld (a g_idx "
                         "gives each group of %s its group_size columns)",
                         m->paths[gi->file], src(gi), (long long)k, (long long)n[k],
                         (long long)want, q->method);
    }
    for (int64_t c = 1; c < ncols && !rc; c++)
        spread |= c % I4_ELEMS && g[col0 + c] != g[col0 + c - 1];
    if (!rc && spread) {
        /* the slice's columns by group (stably), each group's run padded to whole blocks */
        memset(n, 0, sizeof(int64_t) * (size_t)G);
        for (int64_t c = 0; c < ncols; c++) n[g[col0 + c]]++;
        at = xmalloc(sizeof(int64_t) * (size_t)G);
        *kp = 0;
        for (int64_t k = 0; k < G; k++) at[k] = *kp, *kp += ceil_div(n[k], I4_ELEMS) * I4_ELEMS;
        if (*kp > I4_MAX_STORED)
            rc = err_set(err, "%s: tensor '%s': %lld columns once regrouped (at most %d)",
                         m->paths[t->file], src(t), (long long)*kp, I4_MAX_STORED);
    }
    if (!rc && spread) {
        *gather = xmalloc(sizeof(int32_t) * (size_t)*kp);
        for (int64_t j = 0; j < *kp; j++) (*gather)[j] = -1;
        for (int64_t c = 0; c < ncols; c++) (*gather)[at[g[col0 + c]]++] = (int32_t)c;
    }
    if (rc) *kp = ncols;
    free(at);
    free(n);
    free(g);
    return rc;
}

int int4w_read(const struct model_file *m, const struct mf_tensor *t, int64_t row0, int64_t nrows,
               int64_t col0, int64_t ncols, const int32_t *gather, int64_t kp, uint8_t *dst,
               char *err) {
    const struct int4w_config *q = &m->int4;
    const int64_t cols = t->ne[0], rows = t->ne[1];
    const char *path = m->paths[t->file];
    if (t->int4 != INT4W_PACKED || col0 % I4_ELEMS || ncols % I4_ELEMS || col0 + ncols > cols ||
        row0 + nrows > rows || kp % I4_ELEMS || (!gather && kp != ncols))
        return err_set(err, "%s: tensor '%s': bad INT4 read (columns [%lld, %lld))", path, t->name,
                       (long long)col0, (long long)(col0 + ncols));
    if (q->group && col0 % q->group)
        return err_set(err,
                       "%s: tensor '%s': this rank's columns [%lld, %lld) do not start "
                       "on a boundary of its groups of %d columns",
                       path, src(t), (long long)col0, (long long)(col0 + ncols), q->group);
    if (nrows == 0 || ncols == 0) return 0;
    const struct mf_tensor *gi = part(m, t, INT4W_GIDX);
    const int64_t G = q->group ? ceil_div(cols, q->group) : 1, nb = kp / I4_ELEMS;
    int32_t *gidx = xmalloc(sizeof(int32_t) * (size_t)ncols);
    int64_t g0 = q->group ? col0 / q->group : 0, g1 = q->group ? (col0 + ncols - 1) / q->group : 0;
    int64_t *bg = xmalloc(sizeof(int64_t) * (size_t)nb); /* each stored block's group */
    int rc = 0;
    for (int64_t c = 0; c < ncols; c++) gidx[c] = (int32_t)(q->group ? (col0 + c) / q->group : 0);
    if (gi) {
        rc = modelfile_read(m, gi, (uint64_t)col0 * 4, (uint64_t)ncols * 4, gidx, err);
        g0 = G, g1 = -1;
        for (int64_t c = 0; c < ncols && !rc; c++) {
            rc = gidx_entry_ok(m, gi, col0 + c, gidx[c], G, err);
            if (!rc && gidx[c] < g0) g0 = gidx[c];
            if (!rc && gidx[c] > g1) g1 = gidx[c];
        }
    }
    /* the stored columns of one block (gather: the slice's columns it names) share a group */
    for (int64_t j = 0, prev = -1; j < kp && !rc; j++) {
        const int64_t c = gather ? gather[j] : j;
        if (j % I4_ELEMS == 0) bg[j / I4_ELEMS] = -1, prev = -1;
        if (c < -1 || c >= ncols || (!gather && c < 0))
            rc = err_set(err, "%s: tensor '%s': bad INT4 gather index", path, t->name);
        else if (c >= 0 && prev >= 0 && gidx[c] != gidx[prev])
            rc = err_set(err,
                         "%s: tensor '%s': columns %lld and %lld of one 32-column block are "
                         "in groups %d and %d",
                         path, gi ? src(gi) : src(t), (long long)(col0 + prev),
                         (long long)(col0 + c), gidx[prev], gidx[c]);
        else if (c >= 0) bg[j / I4_ELEMS] = gidx[c] - g0, prev = c;
    }
    for (int64_t b = 0; b < nb && !rc; b++)
        if (bg[b] < 0) rc = err_set(err, "%s: tensor '%s': bad INT4 gather index", path, t->name);
    const int64_t ng = g1 - g0 + 1;
    float *sc = rc ? NULL : xmalloc(sizeof(float) * (size_t)(ng * nrows));
    float *zp = rc ? NULL : xmalloc(sizeof(float) * (size_t)(ng * nrows));
    if (!rc) rc = read_group_params(m, t, part(m, t, INT4W_SCALE), 0, row0, nrows, g0, ng, sc, err);
    if (!rc)
        rc = read_group_params(m, t,
                               q->format == INT4W_CT && q->sym ? NULL /* zero 0 */
                                                               : part(m, t, INT4W_ZERO),
                               1, row0, nrows, g0, ng, zp, err);
    /* the packed codes of the shard: CT [rows, cols/8], GPTQ [cols/8, rows], AWQ
     * [cols, rows/8] (AWQ's word range covers the rows' words) */
    const int64_t pr0 = row0 / 8, npr = (row0 + nrows - 1) / 8 - pr0 + 1;
    uint8_t *pk = NULL;
    if (!rc) {
        pk = xmalloc((size_t)(nrows * ncols / 2 + npr * ncols * 4 + 4));
        if (q->format == INT4W_CT)
            rc = read_rect(m, t, 4, cols / 8, row0, nrows, col0 / 8, ncols / 8, pk, err);
        else if (q->format == INT4W_GPTQ)
            rc = read_rect(m, t, 4, rows, col0 / 8, ncols / 8, row0, nrows, pk, err);
        else rc = read_rect(m, t, 4, rows / 8, col0, ncols, pr0, npr, pk, err);
    }
    for (int64_t r = 0; r < nrows && !rc; r++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = dst + (r * nb + b) * I4_BLOCK_BYTES;
            const float z = zp[bg[b] * nrows + r];
            memcpy(o, &sc[bg[b] * nrows + r], 4);
            memcpy(o + 4, &z, 4);
            uint8_t code[I4_ELEMS];
            for (int k = 0; k < I4_ELEMS; k++) {
                const int64_t c = gather ? gather[b * I4_ELEMS + k] : b * I4_ELEMS + k;
                const int64_t ra = row0 + r;
                /* padding (its activation is 0): the zero point where a code can hold it */
                code[k] = (uint8_t)(c < 0 ? (z >= 0 && z <= 15 ? (int)z : 0)
                                    : q->format == INT4W_CT
                                        ? nib(i32_at(pk, r * (ncols / 8) + c / 8), (int)(c % 8))
                                    : q->format == INT4W_GPTQ
                                        ? nib(i32_at(pk, (c / 8) * nrows + r), (int)(c % 8))
                                        : nib(i32_at(pk, c * npr + ra / 8 - pr0), awq_pos[ra % 8]));
            }
            for (int k = 0; k < 16; k++) o[8 + k] = (uint8_t)(code[k] | code[k + 16] << 4);
        }
    free(pk);
    free(sc);
    free(zp);
    free(bg);
    free(gidx);
    return rc;
}

/* The largest |((float)q - z) * d| of the blocks, over the codes each block holds (as the
 * CPU's i4_value computes them). */
float int4w_amax(const uint8_t *blocks, size_t bytes) {
    float amax = 0;
    for (size_t b = 0; b < bytes / I4_BLOCK_BYTES; b++, blocks += I4_BLOCK_BYTES) {
        float d, z;
        memcpy(&d, blocks, sizeof d);
        memcpy(&z, blocks + 4, sizeof z);
        int qmin = 15, qmax = 0;
        for (int k = 0; k < I4_ELEMS / 2; k++) {
            const int lo = blocks[8 + k] & 15, hi = blocks[8 + k] >> 4;
            qmin = lo < qmin ? lo : qmin, qmax = lo > qmax ? lo : qmax;
            qmin = hi < qmin ? hi : qmin, qmax = hi > qmax ? hi : qmax;
        }
        const float a = fmaxf(fabsf(((float)qmin - z) * d), fabsf(((float)qmax - z) * d));
        if (a > amax) amax = a;
    }
    return amax;
}
