/* Causal attention over the paged KV cache for the CPU backend, flash-attention style:
 * each work item is (tile of one sequence's query tokens, KV head, key range) and walks
 * its keys once. Called by backend_cpu's compute thread; runs on that backend's pool. */
#ifndef TPD_CPU_ATTENTION_H
#define TPD_CPU_ATTENTION_H

#include <stdint.h>

#include "../backend.h"
#include "../../util/threadpool.h"

struct cpu_attn; /* scratch buffers, grown on demand; one per backend */

struct cpu_attn *cpu_attn_create(void);
void cpu_attn_free(struct cpu_attn *a);

/* The backend's attention op (see kernels/backend.h) on tp. */
void cpu_attn_run(struct cpu_attn *a, struct threadpool *tp, float *out, int64_t ldo,
                  const float *q, int64_t ldq, int n_q, int q_head0, int group, int kv_head0,
                  const struct kv_layer *kv, enum dtype kv_type, int n_kv, int hd,
                  const struct attn_batch *b);

/* Tests: 1 makes cpu_attn_run take the scalar path even where AVX2 is available. */
void cpu_attn_force_scalar(int on);
int cpu_attn_has_avx2(void);

#endif
