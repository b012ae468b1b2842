/* cpu_attn_run's AVX2 (+FMA, F16C) item kernel. attention_avx2.c is compiled with those
 * flags, so call it only after cpu_attn_has_avx2(). Internal to kernels/cpu. */
#ifndef TPD_CPU_ATTENTION_AVX2_H
#define TPD_CPU_ATTENTION_AVX2_H

#include "attention_item.h"

/* The whole item; hd must be a multiple of 8. */
void attn_item_avx2(const struct attn_call *c, const struct attn_item *it, struct attn_buf *w);

#endif
