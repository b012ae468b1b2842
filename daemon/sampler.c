#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void sampler_init(struct sampler *s, float temperature, int top_k, float top_p, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
}

void sampler_free(struct sampler *s) {
    free(s->idx);
    free(s->prob);
    memset(s, 0, sizeof *s);
}

int sampler_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* xorshift64*: small, fast, and the same sequence everywhere for a given seed */
static double rng_uniform(uint64_t *st) {
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

static const float *cmp_base;
static int cmp_desc(const void *a, const void *b) {
    float x = cmp_base[*(const int *)a], y = cmp_base[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b; /* ties: lower id first, deterministic */
}

int sampler_sample(struct sampler *s, const float *logits, int n) {
    if (s->temperature <= 0) return sampler_argmax(logits, n);
    if (n > s->cap) {
        free(s->idx);
        free(s->prob);
        s->idx = xmalloc(sizeof(int) * (size_t)n);
        s->prob = xmalloc(sizeof(float) * (size_t)n);
        s->cap = n;
    }
    for (int i = 0; i < n; i++) s->idx[i] = i;
    cmp_base = logits;
    qsort(s->idx, (size_t)n, sizeof(int), cmp_desc);
    int k = s->top_k > 0 && s->top_k < n ? s->top_k : n;
    double sum = 0, mx = logits[s->idx[0]];
    for (int i = 0; i < k; i++) {
        s->prob[i] = (float)exp((logits[s->idx[i]] - mx) / s->temperature);
        sum += s->prob[i];
    }
    if (s->top_p < 1) { /* smallest prefix whose mass reaches top_p */
        double acc = 0;
        for (int i = 0; i < k; i++) {
            acc += s->prob[i] / sum;
            if (acc >= s->top_p) {
                k = i + 1;
                break;
            }
        }
        sum = 0;
        for (int i = 0; i < k; i++) sum += s->prob[i];
    }
    double r = rng_uniform(&s->rng) * sum, acc = 0;
    for (int i = 0; i < k; i++) {
        acc += s->prob[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[k - 1];
}
