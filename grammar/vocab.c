/* The grammar's vocabulary and its byte trie (vocab.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "grammar.h"
#include "vocab.h"

/* Token order for the trie: by bytes, then id. qsort takes no context, so the vocabulary
 * being sorted is passed here, under grammar_vocab_new's sort_mu. */
static const struct grammar_vocab *sort_v;
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = sort_v->lens[x], ly = sort_v->lens[y];
    int c = memcmp(sort_v->bytes[x], sort_v->bytes[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

struct grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                                        const uint8_t *usable, const int32_t *eog, int n_eog) {
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    struct grammar_vocab *v = xcalloc(1, sizeof *v);
    v->n = n_vocab;
    v->bytes = xcalloc((size_t)n_vocab, sizeof *v->bytes);
    v->lens = xcalloc((size_t)n_vocab, sizeof *v->lens);
    v->usable = xcalloc((size_t)n_vocab, 1);
    size_t total = 0;
    int n_use = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->lens[i] = lens[i];
        v->bytes[i] = xmalloc(lens[i] + 1);
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->bytes[i][lens[i]] = 0;
        v->usable[i] = usable[i] && lens[i] > 0;
        if (v->usable[i]) {
            n_use++;
            total += lens[i];
            if (lens[i] > v->max_len) v->max_len = lens[i];
        }
    }
    v->eog = xmalloc(sizeof *v->eog * (size_t)(n_eog > 0 ? n_eog : 1));
    for (int i = 0; i < n_eog; i++)
        if (eog[i] >= 0 && eog[i] < n_vocab) {
            v->eog[v->n_eog++] = eog[i];
            v->usable[eog[i]] = 0;
        }
    v->sorted = xmalloc(sizeof *v->sorted * (size_t)(n_use ? n_use : 1));
    int k = 0;
    for (int i = 0; i < n_vocab; i++)
        if (v->usable[i]) v->sorted[k++] = i;
    n_use = k;
    pthread_mutex_lock(&sort_mu);
    sort_v = v;
    qsort(v->sorted, (size_t)n_use, sizeof *v->sorted, cmp_tok);
    pthread_mutex_unlock(&sort_mu);
    /* trie: tokens in byte order, each sharing its prefix with the one before */
    v->t = xcalloc(total + 1, sizeof *v->t);
    v->n_t = 1;
    uint32_t *path = xcalloc(v->max_len + 1, sizeof *path),
             *last = xcalloc(total + 1, sizeof *last);
    size_t prev_len = 0;
    const char *prev = "";
    for (int i = 0; i < n_use; i++) {
        int32_t id = v->sorted[i];
        const char *s = v->bytes[id];
        size_t l = v->lens[id], lcp = 0;
        while (lcp < l && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        for (size_t d = lcp; d < l; d++) {
            uint32_t parent = path[d], c = v->n_t++;
            v->t[c].byte = (uint8_t)s[d];
            v->t[c].tok = (uint32_t)i;
            if (last[parent]) v->t[last[parent]].sib = c;
            else v->t[parent].child = c;
            last[parent] = c;
            path[d + 1] = c;
        }
        struct tnode *nd = &v->t[path[l]];
        if (nd->n_tok == 0) nd->tok = (uint32_t)i;
        nd->n_tok++;
        prev = s;
        prev_len = l;
    }
    free(path);
    free(last);
    pthread_mutex_init(&v->mu, NULL);
    v->lim = (struct grammar_limits){GRAMMAR_DEFAULT_MAX_STACKS, GRAMMAR_DEFAULT_MAX_TOKEN_WORK,
                                     GRAMMAR_DEFAULT_MAX_COMPILE_MS};
    v->cache_limit = GRAMMAR_CACHE_BYTES;
    return v;
}

void grammar_vocab_set_limits(struct grammar_vocab *v, const struct grammar_limits *lim) {
    v->lim = *lim;
}

void grammar_vocab_set_schema_reading(struct grammar_vocab *v, unsigned flags) {
    v->schema_reading = flags & (GRAMMAR_SCHEMA_OPEN_OBJECTS | GRAMMAR_SCHEMA_EVERY_TYPE);
}

int grammar_vocab_size(const struct grammar_vocab *v) { return v->n; }

void grammar_vocab_set_cache_bytes(struct grammar_vocab *v, size_t bytes) {
    v->cache_limit = bytes;
}

size_t grammar_vocab_cache_bytes(const struct grammar_vocab *v) {
    return (size_t)atomic_load(&v->cache_bytes);
}

void grammar_vocab_free(struct grammar_vocab *v) {
    if (!v) return;
    for (int i = 0; i < v->n_lru; i++) grammar_unref(v->lru[i]);
    for (int i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lens);
    free(v->usable);
    free(v->eog);
    free(v->t);
    free(v->sorted);
    pthread_mutex_destroy(&v->mu);
    free(v);
}
