/* uniqueItems over strings, checked on the text (uniq.h). */
#include <stdint.h>
#include <stdlib.h>

#include "../util/fatal.h"
#include "../util/hex.h"
#include "uniq.h"

static int at(const struct gtext *t, size_t i) {
    return (unsigned char)(i < t->na ? t->a[i] : t->b[i - t->na]);
}

/* The opening quote of the string whose closing quote is at q (-1 when there is none). */
static long open_quote(const struct gtext *t, size_t q, long *cost) {
    for (size_t i = q; i-- > 0;) {
        ++*cost;
        if (at(t, i) != '"') continue;
        size_t bs = 0;
        while (bs < i && at(t, i - 1 - bs) == '\\') bs++;
        *cost += (long)bs;
        if (bs % 2 == 0) return (long)i;
    }
    return -1;
}

/* The byte before i that is not JSON whitespace (-1: none). */
static long skip_ws_back(const struct gtext *t, size_t i, long *cost) {
    while (i-- > 0) {
        ++*cost;
        int c = at(t, i);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return (long)i;
    }
    return -1;
}

static uint32_t hex4(const struct gtext *t, size_t i, size_t end) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int d = i + (size_t)k < end ? hex_digit(at(t, i + (size_t)k)) : -1;
        if (d < 0) return 0xFFFFFFFFu;
        v = v << 4 | (uint32_t)d;
    }
    return v;
}

/* The code point of the string body at *i (below end), *i moved past it: an escape, or the
 * raw UTF-8 sequence (the grammar admits valid UTF-8 only; a stray byte stands for itself). */
static uint32_t next_cp(const struct gtext *t, size_t *i, size_t end) {
    int c = at(t, (*i)++);
    if (c == '\\' && *i < end) {
        int e = at(t, (*i)++);
        switch (e) {
        case 'b': return '\b';
        case 'f': return '\f';
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'u': break;
        default: return (uint32_t)e; /* " \ / */
        }
        uint32_t u = hex4(t, *i, end);
        if (u == 0xFFFFFFFFu) return u;
        *i += 4;
        if (u >= 0xD800 && u < 0xDC00 && *i + 6 <= end && at(t, *i) == '\\' &&
            at(t, *i + 1) == 'u') {
            uint32_t lo = hex4(t, *i + 2, end);
            if (lo >= 0xDC00 && lo < 0xE000) {
                *i += 6;
                return 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
        }
        return u;
    }
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = n ? (uint32_t)c & (0x3Fu >> n) : (uint32_t)c;
    for (; n > 0 && *i < end && (at(t, *i) & 0xC0) == 0x80; n--)
        cp = cp << 6 | (at(t, (*i)++) & 0x3F);
    return cp;
}

/* Whether the bodies [i, ie) and [j, je) decode to the same string. */
static int same(const struct gtext *t, size_t i, size_t ie, size_t j, size_t je, long *cost) {
    size_t i0 = i, j0 = j;
    int eq = 1;
    while (eq && i < ie && j < je) eq = next_cp(t, &i, ie) == next_cp(t, &j, je);
    *cost += (long)(i - i0 + j - j0);
    return eq && i == ie && j == je;
}

/* FNV-1a over the code points of the body [i, end), from h; *i moved to end. */
static uint64_t hash_cps(const struct gtext *t, size_t *i, size_t end, uint64_t h) {
    while (*i < end) h = (h ^ next_cp(t, i, end)) * 0x100000001b3ull;
    return h;
}

#define FNV0 0xcbf29ce484222325ull
#define PENDING 12 /* the longest escape, a surrogate pair: \uXXXX\uXXXX */

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* uc for the accepted text alone (t->a): its last unescaped quote taken as the current
 * item's opening one, the earlier items before it. */
static void cache_build(const struct gtext *t, struct uniq_cache *uc, long *cost) {
    struct gtext a = {t->a, t->na, NULL, 0, NULL, 0};
    uc->gen = t->gen;
    uc->n = 0;
    long o = open_quote(&a, a.na, cost);
    uc->usable = o >= 0;
    if (!uc->usable) return;
    size_t i = (size_t)o + 1, stop = a.na > PENDING ? a.na - PENDING : 0;
    uc->h = FNV0;
    while (i < stop) uc->h = (uc->h ^ next_cp(&a, &i, a.na)) * 0x100000001b3ull;
    uc->safe = i;
    *cost += (long)(i - (size_t)o);
    for (long p = skip_ws_back(&a, (size_t)o, cost); p >= 0 && at(&a, (size_t)p) == ',';) {
        long q = skip_ws_back(&a, (size_t)p, cost);
        long po = q >= 0 && at(&a, (size_t)q) == '"' ? open_quote(&a, (size_t)q, cost) : -1;
        if (po < 0) break;
        if (uc->n == uc->cap) {
            uc->cap = uc->cap ? 2 * uc->cap : 16;
            uc->items = xrealloc(uc->items, sizeof *uc->items * (size_t)uc->cap);
        }
        size_t j = (size_t)po + 1;
        uc->items[uc->n++] = hash_cps(&a, &j, (size_t)q, FNV0);
        *cost += q - po;
        p = skip_ws_back(&a, (size_t)po, cost);
    }
    if (uc->n > 1) qsort(uc->items, (size_t)uc->n, sizeof *uc->items, cmp_u64);
}

/* The check where the item opened in the accepted text (no quote in the token before its
 * last byte): the item's hash looked up among the earlier ones'. -1: not this case. */
static int cached_check(const struct gtext *t, long *cost) {
    struct uniq_cache *uc = t->uc;
    if (!uc || !t->gen) return -1;
    for (size_t k = 0; k + 1 < t->nb; k++)
        if (t->b[k] == '"') return -1;
    if (uc->gen != t->gen) cache_build(t, uc, cost);
    if (!uc->usable) return -1;
    size_t i = uc->safe, end = t->na + t->nb - 1;
    uint64_t h = hash_cps(t, &i, end, uc->h);
    *cost += (long)(end - uc->safe);
    if (uc->n && bsearch(&h, uc->items, (size_t)uc->n, sizeof h, cmp_u64)) return -1; /* confirm */
    return 1;
}

void uniq_cache_free(struct uniq_cache *uc) {
    free(uc->items);
    uc->items = NULL;
    uc->n = uc->cap = 0;
    uc->gen = 0;
}

int uniq_string_ok(const struct gtext *t, long *cost) {
    int fast = cached_check(t, cost);
    if (fast >= 0) return fast;
    size_t n = t->na + t->nb;
    if (n < 2) return 1;
    long o = open_quote(t, n - 1, cost);
    if (o < 0) return 1;
    size_t body = (size_t)o + 1, end = n - 1;
    for (long p = skip_ws_back(t, (size_t)o, cost); p >= 0 && at(t, (size_t)p) == ',';) {
        long q = skip_ws_back(t, (size_t)p, cost); /* the earlier item's closing quote */
        if (q < 0 || at(t, (size_t)q) != '"') return 1;
        long po = open_quote(t, (size_t)q, cost);
        if (po < 0) return 1;
        if (same(t, body, end, (size_t)po + 1, (size_t)q, cost)) return 0;
        p = skip_ws_back(t, (size_t)po, cost);
    }
    return 1;
}
