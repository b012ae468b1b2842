#include "api_stop.h"

#include <stdlib.h>
#include <string.h>

void stop_init(struct stop_matcher *m, const char *const *stops, int n_stops) {
    memset(m, 0, sizeof *m);
    m->stops = stops;
    m->n_stops = n_stops;
    m->matched = -1;
}

void stop_free(struct stop_matcher *m) {
    sbuf_free(&m->held);
    memset(m, 0, sizeof *m);
    m->matched = -1;
}

/* Longest k < |stop| such that the last k bytes of s are the first k bytes of stop. */
static size_t partial_suffix(const char *s, size_t n, const char *stop, size_t sl) {
    size_t k = sl - 1 < n ? sl - 1 : n;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, stop, k)) return k;
    return 0;
}

/* The held buffer never exceeds the longest stop string, so each call scans at most that
 * plus the new piece: matching is linear in the generated text. */
int stop_feed(struct stop_matcher *m, const char *s, size_t n, struct sbuf *out) {
    if (m->matched >= 0) return 1;
    if (m->n_stops == 0) {
        sbuf_add(out, s, n);
        return 0;
    }
    sbuf_add(&m->held, s, n);
    /* The stop that completes first wins, as generation would have stopped there
     * (whatever text came in the same piece); of those ending at the same byte, the one
     * starting earliest. This makes the result independent of how text is cut into
     * pieces. A stop ending in earlier pieces would already have matched. */
    size_t best = (size_t)-1, best_end = (size_t)-1;
    for (int i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        const char *hit = memmem(m->held.p, m->held.len, m->stops[i], sl);
        if (!hit) continue;
        size_t at = (size_t)(hit - m->held.p);
        if (at + sl < best_end || (at + sl == best_end && at < best)) {
            best = at;
            best_end = at + sl;
            m->matched = i;
        }
    }
    if (m->matched >= 0) {
        sbuf_add(out, m->held.p, best);
        m->held.len = 0;
        return 1;
    }
    size_t keep = 0;
    for (int i = 0; i < m->n_stops; i++) {
        size_t k = partial_suffix(m->held.p, m->held.len, m->stops[i], strlen(m->stops[i]));
        if (k > keep) keep = k;
    }
    sbuf_add(out, m->held.p, m->held.len - keep);
    memmove(m->held.p, m->held.p + m->held.len - keep, keep);
    m->held.len = keep;
    return 0;
}

void stop_flush(struct stop_matcher *m, struct sbuf *out) {
    if (m->matched < 0) sbuf_add(out, m->held.p, m->held.len);
    m->held.len = 0;
}
