/* FP8 E4M3 weights of Hugging Face checkpoints: scale shapes, and the repacking of a rank's
 * shard into DT_F8_E4M3_S32 blocks. */
#include "fp8w.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/fp8.h"
#include "../util/half.h"
#include "modelfile.h"
#include "tensors.h"

/* ---- checks on open ----------------------------------------------------------------- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The shape the scheme gives the scale of a rows x cols weight (outermost first, as the
 * scale's ne reversed); a per-tensor scale may be [] or [1], a per-row one [rows] or
 * [rows, 1]. */
static int scale_shape_ok(const struct fp8w_config *q, const struct mf_tensor *s, int64_t rows,
                          int64_t cols) {
    int64_t n = s->ne[0] * s->ne[1] * s->ne[2] * s->ne[3];
    switch (q->scheme) {
    case FP8W_TENSOR: return n == 1;
    case FP8W_CHANNEL: return n == rows && (s->ne[0] == rows || s->ne[1] == rows);
    case FP8W_BLOCK:
        return s->n_dims == 2 && s->ne[1] == ceil_div(rows, q->block_rows) &&
               s->ne[0] == ceil_div(cols, q->block_cols);
    case FP8W_NONE: break;
    }
    return 0;
}

static const char *scheme_shape(const struct fp8w_config *q, int64_t rows, int64_t cols, char *buf,
                                size_t n) {
    if (q->scheme == FP8W_TENSOR) snprintf(buf, n, "[] or [1]");
    else if (q->scheme == FP8W_CHANNEL) snprintf(buf, n, "[%lld, 1]", (long long)rows);
    else
        snprintf(buf, n, "[%lld, %lld]", (long long)ceil_div(rows, q->block_rows),
                 (long long)ceil_div(cols, q->block_cols));
    return buf;
}

int fp8w_check(const struct model_file *m, char *err) {
    const struct fp8w_config *q = &m->fp8;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct mf_tensor *t = &m->tensors[i];
        const char *path = m->paths[t->file];
        const char *src = t->src_name ? t->src_name : t->name;
        size_t ln = strlen(t->name);
        if (ln > 6 && !strcmp(t->name + ln - 6, ".scale")) {
            char wname[96];
            snprintf(wname, sizeof wname, "%.*s", (int)(ln - 6), t->name);
            const struct mf_tensor *w = modelfile_find(m, wname);
            if (!w || !w->fp8)
                return err_set(err, "%s: scale tensor '%s' belongs to no F8_E4M3 weight", path,
                               src);
            continue;
        }
        if (!t->fp8) continue;
        int layer, id = tensor_parse(t->name, TNAMES_GGUF, &layer);
        enum tensor_role role = id >= 0 ? tensor_info(id)->role : TROLE_NORM;
        if (role != TROLE_COLUMN && role != TROLE_ROW)
            return err_set(err,
                           "%s: tensor '%s': F8_E4M3 is supported for the attention and "
                           "MLP matrices only",
                           path, src);
        int64_t rows = t->ne[1], cols = t->ne[0];
        if (t->n_dims != 2 || cols % FP8W_ELEMS)
            return err_set(err,
                           "%s: tensor '%s': an F8_E4M3 weight needs 2 dimensions and a "
                           "multiple of %d columns (tpd's FP8 blocks); found %lld columns",
                           path, src, FP8W_ELEMS, (long long)cols);
        char sname[104], want[64];
        snprintf(sname, sizeof sname, "%s.scale", t->name);
        const struct mf_tensor *s = modelfile_find(m, sname);
        if (!s)
            return err_set(err, "%s: tensor '%s' (F8_E4M3, %s) has no '%s' scale tensor", path, src,
                           q->method, q->scale_suffix);
        if (s->type != DT_F32 && s->type != DT_BF16 && s->type != DT_F16)
            return err_set(err, "%s: scale '%s' has type %s (F32, BF16 or F16)", m->paths[s->file],
                           s->src_name, dtype_name(s->type));
        if (!scale_shape_ok(q, s, rows, cols)) {
            char got[96];
            int n = snprintf(got, sizeof got, "[");
            for (int d = s->n_dims - 1; d >= 0; d--)
                n += snprintf(got + n, sizeof got - (size_t)n, "%lld%s", (long long)s->ne[d],
                              d ? ", " : "");
            snprintf(got + n, sizeof got - (size_t)n, "]");
            return err_set(err,
                           "%s: scale '%s' of the %lld x %lld weight has shape %s; the "
                           "%s scheme needs %s",
                           m->paths[s->file], s->src_name, (long long)rows, (long long)cols, got,
                           q->method, scheme_shape(q, rows, cols, want, sizeof want));
        }
    }
    return 0;
}

/* ---- reading a shard ---------------------------------------------------------------- */

/* n scale values of s from element off, as f32; each must be finite. */
static int read_scales(const struct model_file *m, const struct mf_tensor *s, int64_t off,
                       int64_t n, float *dst, char *err) {
    const int es = s->type == DT_F32 ? 4 : 2;
    uint8_t *raw = xmalloc((size_t)n * 4 + 1);
    int rc = modelfile_read(m, s, (uint64_t)off * (uint64_t)es, (uint64_t)n * (uint64_t)es, raw,
                            err);
    for (int64_t i = 0; i < n && !rc; i++) {
        uint16_t h;
        memcpy(&h, raw + 2 * i, 2);
        if (s->type == DT_F32) memcpy(&dst[i], raw + 4 * i, 4);
        else dst[i] = s->type == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        if (!isfinite(dst[i]))
            rc = err_set(err, "%s: scale '%s': element %lld is not finite", m->paths[s->file],
                         s->src_name, (long long)(off + i));
    }
    free(raw);
    return rc;
}

int fp8w_read(const struct model_file *m, const struct mf_tensor *t, int64_t row0, int64_t nrows,
              int64_t col0, int64_t ncols, uint8_t *dst, char *err) {
    const struct fp8w_config *q = &m->fp8;
    const int64_t cols = t->ne[0];
    char sname[104];
    snprintf(sname, sizeof sname, "%s.scale", t->name);
    const struct mf_tensor *s = modelfile_find(m, sname);
    if (!t->fp8 || !s || col0 % FP8W_ELEMS || ncols % FP8W_ELEMS || col0 + ncols > cols)
        return err_set(err, "%s: tensor '%s': bad FP8 read (columns [%lld, %lld))",
                       m->paths[t->file], t->name, (long long)col0, (long long)(col0 + ncols));
    if (nrows == 0 || ncols == 0) return 0;
    /* the scales that cover the shard: one, a row's each, or its block rows' tiles */
    int64_t s_off = 0, s_n = 1, br0 = 0, nbc = 1;
    if (q->scheme == FP8W_CHANNEL) {
        s_off = row0;
        s_n = nrows;
    } else if (q->scheme == FP8W_BLOCK) {
        br0 = row0 / q->block_rows;
        nbc = ceil_div(cols, q->block_cols);
        s_off = br0 * nbc;
        s_n = ((row0 + nrows - 1) / q->block_rows - br0 + 1) * nbc;
    }
    float *sc = xmalloc(sizeof(float) * (size_t)s_n);
    uint8_t *codes = xmalloc((size_t)ncols);
    int rc = read_scales(m, s, s_off, s_n, sc, err);
    const int64_t nb = ncols / FP8W_ELEMS;
    for (int64_t r = 0; r < nrows && !rc; r++) {
        const int64_t row = row0 + r;
        rc = modelfile_read(m, t, (uint64_t)row * (uint64_t)cols + (uint64_t)col0, (uint64_t)ncols,
                            codes, err);
        for (int64_t b = 0; b < nb && !rc; b++) {
            const int64_t col = col0 + FP8W_ELEMS * b;
            float d = sc[0];
            if (q->scheme == FP8W_CHANNEL) d = sc[r];
            else if (q->scheme == FP8W_BLOCK)
                d = sc[(row / q->block_rows - br0) * nbc + col / q->block_cols];
            uint8_t *o = dst + (r * nb + b) * FP8W_BLOCK_BYTES;
            memcpy(o, &d, sizeof d);
            memcpy(o + 4, codes + FP8W_ELEMS * b, FP8W_ELEMS);
            for (int k = 0; k < FP8W_ELEMS; k++)
                if ((o[4 + k] & 0x7f) == FP8_E4M3_NAN)
                    rc = err_set(err, "%s: tensor '%s': NaN code at row %lld, column %lld",
                                 m->paths[t->file], t->src_name ? t->src_name : t->name,
                                 (long long)row, (long long)(col + k));
        }
    }
    free(codes);
    free(sc);
    return rc;
}

float fp8w_amax(const uint8_t *blocks, size_t bytes) {
    float amax = 0;
    for (size_t b = 0; b < bytes / FP8W_BLOCK_BYTES; b++, blocks += FP8W_BLOCK_BYTES) {
        float d;
        memcpy(&d, blocks, sizeof d);
        uint8_t qmax = 0;
        for (int k = 0; k < FP8W_ELEMS; k++)
            if ((blocks[4 + k] & 0x7f) > qmax) qmax = blocks[4 + k] & 0x7f;
        const float a = fabsf(fp8_e4m3_to_f32(qmax) * d); /* codes order like magnitudes */
        if (a > amax) amax = a;
    }
    return amax;
}

int fp8w_row_scaled(const uint8_t *blocks, size_t bytes, int64_t cols) {
    const size_t nb = (size_t)(cols / FP8W_ELEMS), rb = nb * FP8W_BLOCK_BYTES;
    if (cols <= 0 || cols % FP8W_ELEMS || bytes % rb) return 0;
    for (size_t r = 0; r < bytes / rb; r++)
        for (size_t b = 1; b < nb; b++)
            if (memcmp(blocks + r * rb, blocks + r * rb + b * FP8W_BLOCK_BYTES, 4)) return 0;
    return 1;
}
