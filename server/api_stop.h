/* Stop strings over streamed text (rank 0, the HTTP thread of one request): text arrives
 * in pieces as tokens are detokenized; a stop string may straddle pieces. Text that could
 * still turn into a stop string is held back, so nothing past a stop is ever released.
 * The first stop to be completed in the text wins, however the text was cut. */
#ifndef TPD_API_STOP_H
#define TPD_API_STOP_H

#include <stddef.h>

#include "../util/sbuf.h"
#include "api.h"

struct stop_matcher {
    const char *const *stops; /* borrowed; non-empty strings */
    int n_stops;
    struct sbuf held; /* text not released yet: a possible start of a stop */
    int matched;      /* index of the stop string found, or -1 */
};

void stop_init(struct stop_matcher *m, const char *const *stops, int n_stops);
void stop_free(struct stop_matcher *m);
/* Feeds s[0..n); appends the text now known to precede any stop to out. Returns 1 once a
 * stop string matched (the text before it is released, it and all after are dropped;
 * later calls release nothing), else 0. */
int stop_feed(struct stop_matcher *m, const char *s, size_t n, struct sbuf *out);
/* End of the stream: releases the held-back text (no stop can complete any more). */
void stop_flush(struct stop_matcher *m, struct sbuf *out);

#endif
