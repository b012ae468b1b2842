/* The engine: everything one rank needs to run forward steps (backend, model shards of its
 * pipeline stage, KV storage for that stage's layers, the communicator), behind a small
 * interface. Rank 0 (stage 0, TP rank 0) runs the plans: its scheduler through
 * engine_submit() / engine_collect() (micro-batches in flight), `tpd eval` and the draft model
 * through engine_step(); the other ranks sit in engine_follow() running the plans rank 0
 * sends (through stage 0's TP group, then stage to stage) until engine_stop(). Nothing outside
 * parallel/ sees the model or the cache: callers read engine_info() for the few numbers they
 * need. */
#ifndef TPD_ENGINE_H
#define TPD_ENGINE_H

#include <stdatomic.h>

#include "../comm/comm.h"
#include "../kernels/backend.h"
#include "../util/dtype.h"
#include "plan.h"

struct engine_opts {
    const char *model_path;
    const char *backend; /* "cpu", "cuda", "auto" (NULL: auto) */
    const char *moe;     /* experts' split: "tp", "ep", "auto" (NULL: auto; model.h) */
    int local_rank;      /* rank on this node: picks the GPU */
    int tp, pp;  /* ranks per stage (0: ranks / pp), pipeline stages (0: 1); tp x pp = ranks */
    int threads; /* per rank; < 1: all online CPUs */
    enum dtype kv_type; /* DT_F16 (default) or DT_F32 */
    int block_size;     /* tokens per KV block */
    int n_blocks;       /* KV blocks per rank */
    int sink_blocks; /* FP8 cache: blocks with an F16 sink, for sequences' first blocks (kvcache.h)
                      */
    int max_ctx;     /* longest sequence served; 0: the model's trained context */
    struct comm_opts comm; /* GPU all-reduce (mode NULL: auto), timeouts (0: defaults) */
    const struct backend_debug *debug; /* the [debug] switches (NULL: their defaults) */
    const char *synthetic; /* random weights of a geometry ("llama3-8b[:bf16]"), no file; NULL:
                              model_path */
    double step_timeout_s; /* a step not done by then ends the job (a peer is hung); 0: no limit */
    const atomic_int *stop_flag; /* when set, the job must end within stop_grace_s */
    double stop_grace_s;
};

/* What a scheduler needs to know of the engine; the same on every rank. */
struct engine_info {
    int vocab;      /* length of one logits row */
    int max_cands;  /* the most logit candidates a plan may ask per row (step_plan.n_cands); 0: none
                     */
    int eos_id;     /* the model's end-of-sequence token (tokenizers may add more) */
    int block_size; /* tokens per KV block */
    int n_blocks;   /* KV blocks; ids 0..n_blocks-1 are valid in a plan */
    int sink_blocks;  /* blocks 0..sink_blocks-1 keep a sequence's first positions exact (FP8); else
                         0 */
    int max_ctx;      /* longest sequence (prompt + generated) */
    int tp;           /* ranks each layer is split over */
    int pp;           /* pipeline stages the layers are split over */
    int gpu;          /* 1: the backend is a GPU's (weight-bound decode up to larger batches) */
    char backend[32]; /* the backend's name, for the start-up banner */
    char allreduce[96];  /* the communicator, as gpu_comm_describe says it */
    double weight_bytes; /* this rank's weights and KV cache (rank 0's: stage 0's) */
    double kv_bytes;
    /* The context length at which one token's attention costs as much as its share of the
     * weights (weight flops 2 x params; attention 4 x layers x heads x head_dim per cached
     * position): a prefill token at position p costs about 1 + p / attn_ctx_unit tokens. */
    double attn_ctx_unit;
};

struct engine;

/* Collective. On failure every rank returns -1: a rank whose own load failed has the
 * reason in err; the others say that another rank failed. */
int engine_open(struct engine **out, struct comm *c, const struct engine_opts *o, char *err);
void engine_close(struct engine *e);
const struct engine_info *engine_info(const struct engine *e);
/* Rank 0, a mixture-of-experts model split expert-parallel: the (token, expert) pairs of the
 * busiest rank and of all ranks, summed over every MoE layer of every step so far (parallel/
 * moe.h); both 0 otherwise. A step's own: the change over it. */
void engine_moe_load(const struct engine *e, double *busiest, double *all);
/* Rank 0: broadcasts the plan and runs it on every rank; logits [plan->n_out][vocab].
 * Every block id in the plan must be below engine_info()->n_blocks. */
void engine_step(struct engine *e, const struct step_plan *plan, float *logits);
/* Rank 0, the same in two halves so that up to ENGINE_MAX_IN_FLIGHT steps (micro-batches)
 * are in the pipeline at once: engine_submit sends the plan, runs stage 0's layers and passes
 * the activations on (with pp 1 it runs the whole step); engine_collect waits for the oldest
 * submitted step's logits, which land in the buffer given to its submit (kept alive and
 * untouched until then). engine_step = submit + collect. Returns the steps in flight. */
#define ENGINE_MAX_IN_FLIGHT 16
int engine_submit(struct engine *e, const struct step_plan *plan, float *logits);
int engine_collect(struct engine *e);
/* Rank 0, while idle: a heartbeat every rank must answer, so that a stopped or hung rank
 * ends the job (step_timeout_s) even when no request comes. */
void engine_ping(struct engine *e);
/* Rank 0: releases the followers from engine_follow(). */
void engine_stop(struct engine *e);
/* Ranks other than 0: run rank 0's plans until it calls engine_stop(). */
void engine_follow(struct engine *e);

#endif
