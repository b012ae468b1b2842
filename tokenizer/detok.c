#include "detok.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "../util/fatal.h"
#include "../util/utf8.h"

void detok_init(struct detok *d, const struct tokenizer *t, int flags) {
    memset(d, 0, sizeof(*d));
    d->t = t;
    d->flags = flags;
}

void detok_free(struct detok *d) {
    sbuf_free(&d->out);
    memset(d, 0, sizeof(*d));
}

const char *detok_push(struct detok *d, int32_t id, size_t *len) {
    const struct tokenizer *t = d->t;
    *len = 0;
    d->out.len = 0;
    if (id < 0 || (uint32_t)id >= t->v.n) return NULL;
    sbuf_add(&d->out, "", 0);
    if ((d->flags & TOK_SKIP_SPECIAL) && t->v.attr[id] == TOK_CONTROL) return d->out.p;
    const uint8_t *b = (const uint8_t *)t->dec[id];
    size_t n = t->dec_len[id];
    if (n && !d->started) {
        d->started = 1;
        if (t->dec_strip_space && b[0] == ' ') {
            b++;
            n--;
        }
    }
    if (n == 0) return d->out.p;
    /* join the held-back tail with this token, keep back a new incomplete tail */
    uint8_t stack[256];
    size_t total = d->n_pend + n;
    uint8_t *data = total <= sizeof(stack) ? stack : xmalloc(total);
    if (d->n_pend) memcpy(data, d->pend, d->n_pend);
    memcpy(data + d->n_pend, b, n);
    size_t keep = utf8_incomplete_tail(data, total);
    utf8_lossy_append(data, total - keep, &d->out);
    memcpy(d->pend, data + total - keep, keep);
    d->n_pend = keep;
    if (data != stack) free(data);
    *len = d->out.len;
    return d->out.p;
}

const char *detok_flush(struct detok *d, size_t *len) {
    d->out.len = 0;
    sbuf_add(&d->out, "", 0);
    utf8_lossy_append(d->pend, d->n_pend, &d->out);
    d->n_pend = 0;
    *len = d->out.len;
    return d->out.p;
}
