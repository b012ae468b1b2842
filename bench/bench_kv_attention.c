/* CPU attention (cpu_attn_run) over an FP8 KV cache against F16 and F32 in the same run, on
 * SmolLM2-135M's shape (30 layers of 9 query heads over 3 KV heads of 64): one decode token
 * a 4-token step (a speculative verify step: the last token and 3 drafts) and a 64-token
 * prefill chunk at the end of `ctx` cached positions, every layer's cache
 * its own memory as in a forward step (so a long context streams from DRAM, not cache).
 * The types alternate for `reps` rounds and each keeps its fastest step (the least
 * disturbed by other load); printed as microseconds per step and as ratios to F16.
 *
 *   bench_kv_attention [ctx 4096] [threads 2] [reps 30] */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/attention.h"
#include "util/threadpool.h"
#include "util/clock.h"
#include "util/fp8.h"
#include "util/half.h"

enum { N_Q = 9, N_KV = 3, HD = 64, BS = 16, N_TYPES = 3, LAYERS = 30 };

int main(int argc, char **argv) {
    const int ctx = argc > 1 ? atoi(argv[1]) : 4096, nth = argc > 2 ? atoi(argv[2]) : 2,
              reps = argc > 3 ? atoi(argv[3]) : 30;
    if (ctx < 64 || nth < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_kv_attention [ctx >= 64] [threads] [reps]\n");
        return 2;
    }
    const enum dtype types[N_TYPES] = {DT_F16, DT_F8_E4M3, DT_F32};
    const int n_blocks = (ctx + BS - 1) / BS;
    const size_t rows = (size_t)n_blocks * BS * N_KV, elems = rows * HD;
    static struct kv_layer kv[N_TYPES][LAYERS];
    float *src = malloc(sizeof(float) * elems);
    unsigned seed = 1;
    for (size_t i = 0; i < elems; i++)
        src[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
    for (int t = 0; t < N_TYPES; t++)
        for (int l = 0; l < LAYERS; l++)
            for (int kv_i = 0; kv_i < 2; kv_i++) { /* K, then V: separate memory */
                struct kv_layer *x = &kv[t][l];
                void *data;
                int8_t *e = NULL;
                if (types[t] == DT_F32) {
                    float *f = malloc(sizeof(float) * elems);
                    for (size_t i = 0; i < elems; i++) f[i] = src[i];
                    data = f;
                } else if (types[t] == DT_F16) {
                    uint16_t *h = malloc(2 * elems);
                    for (size_t i = 0; i < elems; i++) h[i] = f32_to_f16(src[i]);
                    data = h;
                } else {
                    uint8_t *q8 = malloc(elems);
                    e = malloc(rows);
                    for (size_t r = 0; r < rows; r++)
                        e[r] = (int8_t)fp8_encode_row(q8 + r * HD, src + r * HD, HD);
                    data = q8;
                }
                if (kv_i == 0) {
                    x->k = data;
                    x->k_exp = e;
                } else {
                    x->v = data;
                    x->v_exp = e;
                }
            }
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)n_blocks), block_off[2] = {0, n_blocks};
    for (int i = 0; i < n_blocks; i++) blocks[i] = n_blocks - 1 - i; /* not in order */
    int32_t seq_of[64] = {0}, pos[64];
    float *q = malloc(sizeof(float) * 64 * N_Q * HD), *out = malloc(sizeof(float) * 64 * N_Q * HD);
    for (int i = 0; i < 64 * N_Q * HD; i++) q[i] = src[i];
    struct threadpool *tp = threadpool_create(nth);
    struct cpu_attn *a = cpu_attn_create();
    const int sizes[3] = {1, 4, 64}; /* decode, a speculative verify step, a prefill chunk */
    printf("cpu attention, %d layers x %d cached positions, %d/%d heads of %d, %d threads, fastest "
           "step of %d (us):\n",
           LAYERS, ctx, N_Q, N_KV, HD, nth, reps);
    for (int s = 0; s < 3; s++) {
        const int T = sizes[s];
        for (int i = 0; i < T; i++) pos[i] = ctx - T + i;
        struct attn_batch b = {.n_tokens = T,
                               .n_seqs = 1,
                               .seq_of = seq_of,
                               .pos = pos,
                               .block_off = block_off,
                               .blocks = blocks,
                               .block_size = BS};
        double best[N_TYPES];
        for (int t = 0; t < N_TYPES; t++) best[t] = 1e30;
        for (int r = 0; r < reps; r++)
            for (int t = 0; t < N_TYPES; t++) {
                const double t0 = clock_now();
                for (int l = 0; l < LAYERS; l++)
                    cpu_attn_run(a, tp, out, N_Q * HD, q, N_Q * HD, N_Q, 0, N_Q / N_KV, 0,
                                 &kv[t][l], types[t], N_KV, HD, &b);
                const double dt = clock_now() - t0;
                if (dt < best[t]) best[t] = dt;
            }
        printf("  %2d token(s): f16 %8.1f, fp8 %8.1f (%.2fx f16's time), f32 %8.1f (%.2fx)\n", T,
               best[0] * 1e6, best[1] * 1e6, best[1] / best[0], best[2] * 1e6, best[2] / best[0]);
    }
    cpu_attn_free(a);
    threadpool_free(tp);
    for (int t = 0; t < N_TYPES; t++)
        for (int l = 0; l < LAYERS; l++) {
            free(kv[t][l].k);
            free(kv[t][l].v);
            free(kv[t][l].k_exp);
            free(kv[t][l].v_exp);
        }
    free(src);
    free(blocks);
    free(q);
    free(out);
    return 0;
}
