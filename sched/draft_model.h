/* A draft model as a drafter (sched/drafter.h): a small model with the target's tokenizer,
 * run on rank 0 alone with its own engine (a one-rank communicator: no collective per
 * drafted token, and the other ranks, which wait for the target step's plan anyway, need
 * no copy), its own paged KV cache and block pool. For each sequence it keeps the K/V of
 * the tokens it has seen; a proposal first feeds what is new since the last one (the
 * accepted drafts and the target's correction or bonus token; the whole prompt the first
 * time), then drafts k tokens autoregressively, all sequences batched in each step. Drafts
 * are the draft model's argmax (a point mass: exact under every sampler setting, and
 * seeded sampling gives the same tokens as without speculation). After verification the
 * cache is rolled back to the accepted tokens (drafter_keep). Step-loop thread, rank 0. */
#ifndef TPD_DRAFT_MODEL_H
#define TPD_DRAFT_MODEL_H

#include "../parallel/engine.h"
#include "drafter.h"

/* o: the draft engine's options (model_path, threads, block_size, n_blocks, max_ctx, ...).
 * target_vocab: the target's logits row length, which the draft's must equal. NULL with
 * err on failure. */
struct drafter *draft_model_new(const struct engine_opts *o, int target_vocab, char *err);

#endif
