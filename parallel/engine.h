/* The engine on one rank: backend, model shards, KV cache and the step loop every rank
 * runs. Rank 0 fills e->plan and calls engine_step(); the other ranks sit in
 * engine_follow() running whatever plan rank 0 broadcasts, until it sends an empty one. */
#ifndef TPD_ENGINE_H
#define TPD_ENGINE_H

#include "../comm/comm.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "plan.h"

struct engine_opts {
    const char *model_path;
    const char *backend; /* "cpu", "cuda", "auto" (NULL: auto) */
    int local_rank;      /* rank on this node: picks the GPU */
    int threads;        /* per rank; < 1: all online CPUs */
    enum dtype kv_type; /* DT_F16 (default) or DT_F32 */
    int block_size;     /* tokens per KV block */
    int n_blocks;       /* KV blocks per rank */
    int max_ctx;        /* longest sequence served; 0: the model's trained context */
    const char *comm;      /* GPU all-reduce: "auto", "nccl", "ipc", "mpi" (NULL: $TPD_COMM, else auto) */
    const char *synthetic; /* random weights of a geometry ("llama3-8b[:bf16]"), no file; NULL: model_path */
};

struct engine {
    struct comm *comm;
    struct backend be;
    struct model model;
    struct kvcache kv;
    struct forward_state fs;
    struct step_plan plan;
    int max_ctx;
};

/* Collective. On failure every rank returns -1: a rank whose own load failed has the
 * reason in err; the others say that another rank failed. */
int engine_open(struct engine *e, struct comm *c, const struct engine_opts *o, char *err);
void engine_close(struct engine *e);
/* Rank 0: broadcasts e->plan and runs it; logits [plan.n_out][vocab]. */
void engine_step(struct engine *e, float *logits);
/* Rank 0: releases the followers from engine_follow(). */
void engine_stop(struct engine *e);
/* Ranks other than 0. */
void engine_follow(struct engine *e);

#endif
