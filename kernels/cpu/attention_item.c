#include "attention_item.h"

#include <math.h>
#include <string.h>

/* (M, L, ACC) += segment (m, l, acc), both unnormalised softmax partials. One function
 * for the in-item fold and the split merge, so both round alike. */
void attn_fold(float *M, float *L, float *ACC, float m, float l, const float *acc, int hd) {
    if (l == 0) return; /* a segment past the row's position */
    if (*L == 0) {
        *M = m;
        *L = l;
        memcpy(ACC, acc, sizeof(float) * (size_t)hd);
        return;
    }
    const float nm = *M > m ? *M : m, fa = expf(*M - nm), fb = expf(m - nm);
    *L = *L * fa + l * fb;
    for (int d = 0; d < hd; d++) ACC[d] = ACC[d] * fa + acc[d] * fb;
    *M = nm;
}

static void reset_rows(const struct attn_item *it, struct attn_buf *w, int hd) {
    const int rows = it->n_tok * it->n_h;
    memset(w->acc, 0, sizeof(float) * (size_t)rows * (size_t)hd);
    for (int r = 0; r < rows; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0;
    }
}

void attn_begin(const struct attn_item *it, struct attn_buf *w, int hd) {
    reset_rows(it, w, hd);
    for (int r = 0; r < it->n_tok * it->n_h; r++) w->fl[r] = 0;
}

void attn_segment_end(const struct attn_call *c, const struct attn_item *it, struct attn_buf *w,
                      int seg) {
    const int hd = c->hd;
    for (int r = 0; r < it->n_tok * it->n_h; r++) {
        const float *acc = w->acc + (int64_t)r * hd;
        if (c->n_split == 1) {
            attn_fold(&w->fm[r], &w->fl[r], w->facc + (int64_t)r * hd, w->m[r], w->l[r], acc, hd);
        } else {
            const int t = it->t0 + r / it->n_h, h = it->h0 + r % it->n_h;
            float *p = c->part + (((int64_t)t * c->n_q + h) * c->n_seg + seg) * (hd + 2);
            memcpy(p, acc, sizeof(float) * (size_t)hd);
            p[hd] = w->m[r];
            p[hd + 1] = w->l[r];
        }
    }
    reset_rows(it, w, hd);
}

void attn_finish(const struct attn_call *c, const struct attn_item *it, const struct attn_buf *w) {
    const int hd = c->hd;
    for (int r = 0; r < it->n_tok * it->n_h; r++) {
        const int t = it->t0 + r / it->n_h, h = it->h0 + r % it->n_h;
        const float *acc = w->facc + (int64_t)r * hd;
        float *o = c->out + t * c->ldo + (int64_t)h * hd;
        const float inv = 1.0f / w->fl[r]; /* >= 1: the row's max key contributes exp(0) */
        for (int d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}
