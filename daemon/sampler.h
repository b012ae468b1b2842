/* Token sampling on rank 0: greedy, or temperature with top-k / top-p from a seeded
 * generator (same seed, same tokens). Owned by the thread that steps the engine. */
#ifndef TPD_SAMPLER_H
#define TPD_SAMPLER_H

#include <stdint.h>

struct sampler {
    float temperature; /* 0: greedy */
    int top_k;         /* 0: all */
    float top_p;       /* 1: all */
    uint64_t rng;
    /* scratch */
    int cap;
    int *idx;
    float *prob;
};

void sampler_init(struct sampler *s, float temperature, int top_k, float top_p, uint64_t seed);
void sampler_free(struct sampler *s);
int sampler_argmax(const float *logits, int n);
int sampler_sample(struct sampler *s, const float *logits, int n);

#endif
