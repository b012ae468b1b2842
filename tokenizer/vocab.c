#include "vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/utf8.h"

uint64_t vocab_hash(const void *p, size_t n) {
    /* FNV-1a, then a final mix so the low bits used for the slot index are well spread. */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t table_size(uint64_t n) {
    uint64_t s = 16;
    while (s < n * 2) s <<= 1;
    return s;
}

int vocab_init(struct vocab *v, uint32_t n, char *err) {
    memset(v, 0, sizeof(*v));
    if (n == 0 || n > (1u << 30)) return err_set(err, "vocabulary size %u out of range", n);
    v->n = n;
    v->str = calloc(n, sizeof(*v->str));
    v->len = calloc(n, sizeof(*v->len));
    v->attr = calloc(n, sizeof(*v->attr));
    if (!v->str || !v->len || !v->attr) return err_set(err, "out of memory for %u tokens", n);
    for (int i = 0; i < 256; i++) v->byte_tok[i] = v->byte_fallback[i] = -1;
    return 0;
}

int vocab_set(struct vocab *v, uint32_t id, const char *s, size_t len, char *err) {
    if (id >= v->n) return err_set(err, "token id %u out of range (vocabulary %u)", id, v->n);
    if (len > (1u << 20)) return err_set(err, "token %u is %zu bytes long", id, len);
    char *c = xmalloc(len + 1);
    if (len) memcpy(c, s, len);
    c[len] = 0;
    free(v->str[id]);
    v->str[id] = c;
    v->len[id] = (uint32_t)len;
    return 0;
}

int vocab_index(struct vocab *v, char *err) {
    uint64_t size = table_size(v->n);
    free(v->str_slots);
    v->str_slots = calloc(size, sizeof(*v->str_slots));
    if (!v->str_slots) return err_set(err, "out of memory");
    v->str_mask = size - 1;
    for (uint32_t id = 0; id < v->n; id++) {
        if (!v->str[id]) return err_set(err, "token id %u has no text", id);
        uint64_t h = vocab_hash(v->str[id], v->len[id]) & v->str_mask;
        for (;;) {
            uint32_t s = v->str_slots[h];
            if (s == 0) {
                v->str_slots[h] = id + 1;
                break;
            }
            if (v->len[s - 1] == v->len[id] && !memcmp(v->str[s - 1], v->str[id], v->len[id]))
                break; /* duplicate: the first id wins */
            h = (h + 1) & v->str_mask;
        }
    }
    return 0;
}

int32_t vocab_find(const struct vocab *v, const char *s, size_t len) {
    if (!v->str_slots) return -1;
    uint64_t h = vocab_hash(s, len) & v->str_mask;
    for (;;) {
        uint32_t x = v->str_slots[h];
        if (x == 0) return -1;
        if (v->len[x - 1] == len && !memcmp(v->str[x - 1], s, len)) return (int32_t)(x - 1);
        h = (h + 1) & v->str_mask;
    }
}

int vocab_merges_init(struct vocab *v, uint32_t n, char *err) {
    if (n > (1u << 28)) return err_set(err, "%u merges is too many", n);
    uint64_t size = table_size(n ? n : 1);
    v->merge_keys = calloc(size, sizeof(*v->merge_keys));
    v->merge_rank = calloc(size, sizeof(*v->merge_rank));
    v->merge_result = calloc(size, sizeof(*v->merge_result));
    if (!v->merge_keys || !v->merge_rank || !v->merge_result) return err_set(err, "out of memory");
    v->merge_mask = size - 1;
    v->n_merges = 0;
    return 0;
}

int vocab_merge_add(struct vocab *v, uint32_t left, uint32_t right, uint32_t result) {
    uint64_t key = (((uint64_t)left << 32) | right) + 1;
    uint64_t h = mix64(key) & v->merge_mask;
    uint32_t rank = v->n_merges++;
    for (;;) {
        if (v->merge_keys[h] == 0) {
            v->merge_keys[h] = key;
            v->merge_rank[h] = rank;
            v->merge_result[h] = result;
            return 0;
        }
        if (v->merge_keys[h] == key) return 0;
        h = (h + 1) & v->merge_mask;
    }
}

uint32_t vocab_merge_find(const struct vocab *v, uint32_t left, uint32_t right, uint32_t *result) {
    if (!v->merge_keys) return UINT32_MAX;
    uint64_t key = (((uint64_t)left << 32) | right) + 1;
    uint64_t h = mix64(key) & v->merge_mask;
    for (;;) {
        uint64_t k = v->merge_keys[h];
        if (k == 0) return UINT32_MAX;
        if (k == key) {
            *result = v->merge_result[h];
            return v->merge_rank[h];
        }
        h = (h + 1) & v->merge_mask;
    }
}

void vocab_byte_tables(struct vocab *v) {
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        size_t l = utf8_encode(utf8_byte_to_cp((uint8_t)b), u);
        v->byte_tok[b] = vocab_find(v, (const char *)u, l);
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        v->byte_fallback[b] = vocab_find(v, name, 6);
    }
}

void vocab_free(struct vocab *v) {
    if (v->str)
        for (uint32_t i = 0; i < v->n; i++) free(v->str[i]);
    free(v->str);
    free(v->len);
    free(v->attr);
    free(v->score);
    free(v->str_slots);
    free(v->merge_keys);
    free(v->merge_rank);
    free(v->merge_result);
    memset(v, 0, sizeof(*v));
}
