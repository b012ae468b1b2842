/* Incremental detokenizer for streaming: fed one token at a time, it returns the text
 * that is final so far. It never returns part of a UTF-8 sequence (an incomplete tail is
 * held until the next token completes it), drops SentencePiece's leading space at the
 * start, and replaces invalid bytes with U+FFFD exactly as tokenizer_decode does, so the
 * concatenated outputs equal tokenizer_decode of the same ids. One per stream/thread. */
#ifndef TPD_TOK_DETOK_H
#define TPD_TOK_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "../util/sbuf.h"

struct tokenizer;

struct detok {
    const struct tokenizer *t;
    int flags;       /* TOK_SKIP_SPECIAL */
    int started;     /* some byte has been produced (the leading-space strip is done) */
    uint8_t pend[4]; /* incomplete UTF-8 tail held back */
    size_t n_pend;
    struct sbuf out; /* buffer returned by push/flush */
};

void detok_init(struct detok *d, const struct tokenizer *t, int flags);
/* Returns the text token id makes final (possibly empty; valid until the next call), or
 * NULL when id is out of range. *len is its length. */
const char *detok_push(struct detok *d, int32_t id, size_t *len);
/* End of stream: returns what was held back (an incomplete sequence becomes U+FFFD). */
const char *detok_flush(struct detok *d, size_t *len);
void detok_free(struct detok *d);

#endif
