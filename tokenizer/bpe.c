#include "bpe.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "../util/utf8.h"

void idbuf_push(struct idbuf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t c = b->cap ? b->cap * 2 : 64;
        b->v = xrealloc(b->v, c * sizeof(*b->v));
        b->cap = c;
    }
    b->v[b->n++] = id;
}

void idbuf_free(struct idbuf *b) {
    free(b->v);
    memset(b, 0, sizeof(*b));
}

/* ---- word cache: piece bytes -> ids, cleared wholesale when full ---- */

#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_PIECE 64

struct cache_entry {
    uint64_t hash;
    uint32_t off, len;   /* key in arena */
    uint32_t ids, n_ids; /* ids in id arena */
};

struct bpe_cache {
    struct cache_entry *slots; /* len == 0 marks empty (empty pieces are never cached) */
    uint32_t n_entries;
    char *keys;
    size_t keys_len, keys_cap;
    int32_t *ids;
    size_t ids_len, ids_cap;
};

struct bpe_cache *bpe_cache_new(void) {
    struct bpe_cache *c = xcalloc(1, sizeof(*c));
    c->slots = xcalloc(CACHE_SLOTS, sizeof(*c->slots));
    return c;
}

void bpe_cache_free(struct bpe_cache *c) {
    if (!c) return;
    free(c->slots);
    free(c->keys);
    free(c->ids);
    free(c);
}

static void cache_clear(struct bpe_cache *c) {
    memset(c->slots, 0, CACHE_SLOTS * sizeof(*c->slots));
    c->n_entries = 0;
    c->keys_len = c->ids_len = 0;
}

static const struct cache_entry *cache_get(const struct bpe_cache *c, uint64_t h, const char *s,
                                           size_t n) {
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        const struct cache_entry *e = &c->slots[i];
        if (e->len == 0) return NULL;
        if (e->hash == h && e->len == n && !memcmp(c->keys + e->off, s, n)) return e;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

static void cache_put(struct bpe_cache *c, uint64_t h, const char *s, size_t n, const int32_t *ids,
                      size_t n_ids) {
    if (c->n_entries >= CACHE_MAX_ENTRIES || c->keys_len + n > (64u << 20) ||
        c->ids_len + n_ids > (16u << 20))
        cache_clear(c);
    if (c->keys_len + n > c->keys_cap) {
        size_t cap = c->keys_cap ? c->keys_cap * 2 : 1 << 16;
        while (cap < c->keys_len + n) cap *= 2;
        c->keys = xrealloc(c->keys, cap);
        c->keys_cap = cap;
    }
    if (c->ids_len + n_ids > c->ids_cap) {
        size_t cap = c->ids_cap ? c->ids_cap * 2 : 1 << 14;
        while (cap < c->ids_len + n_ids) cap *= 2;
        c->ids = xrealloc(c->ids, cap * sizeof(*c->ids));
        c->ids_cap = cap;
    }
    uint32_t i = (uint32_t)h & (CACHE_SLOTS - 1);
    while (c->slots[i].len) i = (i + 1) & (CACHE_SLOTS - 1);
    struct cache_entry *e = &c->slots[i];
    e->hash = h;
    e->off = (uint32_t)c->keys_len;
    e->len = (uint32_t)n;
    e->ids = (uint32_t)c->ids_len;
    e->n_ids = (uint32_t)n_ids;
    memcpy(c->keys + c->keys_len, s, n);
    c->keys_len += n;
    memcpy(c->ids + c->ids_len, ids, n_ids * sizeof(*ids));
    c->ids_len += n_ids;
    c->n_entries++;
}

/* ---- symbols and the merge queue ---- */

struct sym {
    int32_t id;      /* current token (ranked mode) */
    uint32_t off, n; /* bytes of the piece it covers; n == 0 once merged away */
    int32_t prev, next;
};

struct cand {
    uint64_t key; /* ordering key: smaller pops first */
    int32_t left, right;
    uint32_t size; /* scored mode: byte length of the pair when it was queued */
};

struct heap {
    struct cand *v;
    size_t n, cap;
};

static void heap_push(struct heap *h, struct cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        h->v = xrealloc(h->v, cap * sizeof(*h->v));
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p].key <= c.key) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static struct cand heap_pop(struct heap *h) {
    struct cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint64_t mk = last.key;
        if (l < h->n && h->v[l].key < mk) {
            m = l;
            mk = h->v[l].key;
        }
        if (r < h->n && h->v[r].key < mk) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* Ranked: key = rank << 32 | left position, so ties go to the leftmost pair. */
static void queue_ranked(const struct vocab *v, struct heap *h, const struct sym *s, int32_t l,
                         int32_t r) {
    if (l < 0 || r < 0) return;
    uint32_t res;
    uint32_t rank = vocab_merge_find(v, (uint32_t)s[l].id, (uint32_t)s[r].id, &res);
    if (rank == UINT32_MAX) return;
    struct cand c = {((uint64_t)rank << 32) | (uint32_t)l, l, r, 0};
    heap_push(h, c);
}

/* Order-preserving map of a float to an unsigned key (larger score -> smaller key). */
static uint32_t score_key(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending */
    return ~u;                                      /* descending */
}

/* Scored: the pair is a candidate if its text is a token; highest score, then leftmost. */
static void queue_scored(const struct vocab *v, struct heap *h, const struct sym *s,
                         const char *text, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    uint32_t size = s[l].n + s[r].n;
    int32_t id = vocab_find(v, text + s[l].off, size);
    if (id < 0) return;
    float sc = v->score ? v->score[id] : 0.0f;
    struct cand c = {((uint64_t)score_key(sc) << 32) | (uint32_t)l, l, r, size};
    heap_push(h, c);
}

static void emit_bytes(const struct vocab *v, const struct bpe_opts *o, const char *s, size_t n,
                       struct idbuf *out, int *prev_unk) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_fallback[(uint8_t)s[i]];
        if (id < 0) {
            if (o->unk < 0) continue;
            if (o->fuse_unk && *prev_unk) continue;
            id = o->unk;
            *prev_unk = 1;
        } else {
            *prev_unk = 0;
        }
        idbuf_push(out, id);
    }
}

static void encode_word(const struct vocab *v, const struct bpe_opts *o, const char *s, size_t n,
                        struct idbuf *out) {
    if (o->ignore_merges) {
        int32_t id = -1;
        if (o->byte_level) {
            /* the vocabulary spells the word in the GPT-2 alphabet */
            char stackbuf[256] = {0};
            char *m = n * 2 <= sizeof(stackbuf) ? stackbuf : xcalloc(n, 2);
            size_t ml = 0;
            for (size_t i = 0; i < n; i++)
                ml += utf8_encode(utf8_byte_to_cp((uint8_t)s[i]), (uint8_t *)m + ml);
            id = vocab_find(v, m, ml);
            if (m != stackbuf) free(m);
        } else {
            id = vocab_find(v, s, n);
        }
        if (id >= 0) {
            idbuf_push(out, id);
            return;
        }
    }

    struct sym stack_syms[64];
    struct sym *sy = n <= 64 ? stack_syms : xmalloc(n * sizeof(*sy));
    int32_t ns = 0;
    struct heap h = {0};

    /* Initial symbols: bytes (byte-level) or UTF-8 characters. In ranked mode a character
     * missing from the vocabulary becomes its <0xNN> tokens (byte_fallback) or a pending
     * <unk> (fused with the next unknown if asked), or is dropped when there is no <unk>:
     * HF's BPE word construction, including where the pending <unk> lands. */
    int32_t unk_pending = 0; /* bytes covered by a pending <unk>, 0 = none */
    uint32_t unk_off = 0;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (o->byte_level) l = 1;
        else if (o->scored) l = utf8_lead_len((uint8_t)s[i]);
        else {
            l = utf8_valid_len((const uint8_t *)s + i, n - i);
            if (!l) l = 1;
        }
        if (l > n - i) l = n - i;
        int32_t id = -1;
        if (o->byte_level) id = v->byte_tok[(uint8_t)s[i]];
        else if (!o->scored) id = vocab_find(v, s + i, l);
        if (o->scored || id >= 0) {
            if (unk_pending) {
                struct sym u = {o->unk, unk_off, (uint32_t)unk_pending, ns - 1, -1};
                if (ns > 0) sy[ns - 1].next = ns;
                sy[ns++] = u;
                unk_pending = 0;
            }
            struct sym y = {id, (uint32_t)i, (uint32_t)l, ns - 1, -1};
            if (ns > 0) sy[ns - 1].next = ns;
            sy[ns++] = y;
        } else {
            int ok = o->byte_fallback;
            for (size_t k = 0; ok && k < l; k++) ok = v->byte_fallback[(uint8_t)s[i + k]] >= 0;
            if (ok) {
                for (size_t k = 0; k < l; k++) {
                    struct sym y = {v->byte_fallback[(uint8_t)s[i + k]], (uint32_t)(i + k), 1,
                                    ns - 1, -1};
                    if (ns > 0) sy[ns - 1].next = ns;
                    sy[ns++] = y;
                }
            } else if (o->unk >= 0) {
                if (unk_pending && o->fuse_unk) {
                    unk_pending += (int32_t)l;
                } else {
                    if (unk_pending) {
                        struct sym u = {o->unk, unk_off, (uint32_t)unk_pending, ns - 1, -1};
                        if (ns > 0) sy[ns - 1].next = ns;
                        sy[ns++] = u;
                    }
                    unk_pending = (int32_t)l;
                    unk_off = (uint32_t)i;
                }
            }
        }
        i += l;
    }
    if (unk_pending) {
        struct sym u = {o->unk, unk_off, (uint32_t)unk_pending, ns - 1, -1};
        if (ns > 0) sy[ns - 1].next = ns;
        sy[ns++] = u;
    }

    for (int32_t i = 0; i + 1 < ns; i++)
        if (o->scored) queue_scored(v, &h, sy, s, i, i + 1);
        else queue_ranked(v, &h, sy, i, i + 1);

    while (h.n) {
        struct cand c = heap_pop(&h);
        struct sym *L = &sy[c.left], *R = &sy[c.right];
        if (L->n == 0 || R->n == 0 || L->next != c.right) continue;
        if (o->scored) {
            if (L->n + R->n != c.size) continue;
        } else {
            uint32_t res;
            uint32_t rank = vocab_merge_find(v, (uint32_t)L->id, (uint32_t)R->id, &res);
            if (rank != (uint32_t)(c.key >> 32)) continue;
            L->id = (int32_t)res;
        }
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) sy[R->next].prev = c.left;
        if (o->scored) {
            queue_scored(v, &h, sy, s, L->prev, c.left);
            queue_scored(v, &h, sy, s, c.left, L->next);
        } else {
            queue_ranked(v, &h, sy, L->prev, c.left);
            queue_ranked(v, &h, sy, c.left, L->next);
        }
    }

    int prev_unk = 0;
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sy[i].next) {
        if (o->scored) {
            int32_t id = vocab_find(v, s + sy[i].off, sy[i].n);
            if (id >= 0) {
                idbuf_push(out, id);
                prev_unk = 0;
            } else {
                emit_bytes(v, o, s + sy[i].off, sy[i].n, out, &prev_unk);
            }
        } else {
            idbuf_push(out, sy[i].id);
        }
    }
    free(h.v);
    if (sy != stack_syms) free(sy);
}

void bpe_encode(const struct vocab *v, const struct bpe_opts *o, struct bpe_cache *cache,
                const char *s, size_t n, struct idbuf *out) {
    if (n == 0) return;
    if (!cache || n > CACHE_MAX_PIECE) {
        encode_word(v, o, s, n, out);
        return;
    }
    uint64_t h = vocab_hash(s, n);
    const struct cache_entry *e = cache_get(cache, h, s, n);
    if (e) {
        for (uint32_t i = 0; i < e->n_ids; i++) idbuf_push(out, cache->ids[e->ids + i]);
        return;
    }
    size_t before = out->n;
    encode_word(v, o, s, n, out);
    if (out->n > before) cache_put(cache, h, s, n, out->v + before, out->n - before);
}
