#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "../comm/deadline.h"
#include "../comm/gpu_comm.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "forward.h"
#include "kvcache.h"
#include "model.h"
#include "synthetic.h"

struct engine {
    struct comm *comm;
    struct backend be;
    struct model model;
    struct kvcache kv;
    struct forward_state fs;
    struct step_plan plan; /* followers: the plan rank 0 sent */
    struct engine_info info;
    struct deadline *deadline; /* NULL: no step timeout */
};

int engine_open(struct engine **out, struct comm *c, const struct engine_opts *o, char *err) {
    *out = NULL;
    struct engine *e = xcalloc(1, sizeof *e);
    e->comm = c;
    plan_init(&e->plan);
    forward_state_init(&e->fs);
    int ok = 1;
    if (backend_open(&e->be, o->backend, o->threads, o->local_rank, err)) ok = 0;
    if (!comm_all_ok(c, ok)) {
        if (ok) err_set(err, "another rank failed to open its backend");
        goto fail;
    }
    /* collective: the all-reduce on the GPU backend's stream (NCCL, CUDA IPC or MPI staging) */
    if (gpu_comm_init(c, &e->be, o->comm, err)) goto fail;
    if (o->synthetic ? model_synthesize(&e->model, o->synthetic, &e->be, c->size, c->rank, err)
                     : model_load(&e->model, o->model_path, &e->be, c->size, c->rank, err))
        ok = 0;
    if (!comm_all_ok(c, ok)) {
        if (ok) {
            err_set(err, "another rank failed to load the model");
            model_free(&e->model);
        }
        goto fail;
    }
    const struct model_hparams *hp = &e->model.hp;
    int max_ctx = o->max_ctx > 0 ? o->max_ctx : hp->max_ctx;
    if (max_ctx > hp->max_ctx) {
        err_set(err, "context %d is longer than the model's trained context %d", max_ctx, hp->max_ctx);
        ok = 0;
    }
    if (ok && kvcache_init(&e->kv, &e->be, o->kv_type, hp->n_layers, o->n_blocks, o->block_size, e->model.sp.n_kv,
                           hp->head_dim, err))
        ok = 0;
    if (!comm_all_ok(c, ok)) {
        if (ok) err_set(err, "another rank failed to set up its KV cache");
        kvcache_free(&e->kv);
        model_free(&e->model);
        goto fail;
    }
    struct mem_plan mp;
    char line[512];
    synthetic_mem_plan(&e->model, o->kv_type, (long long)o->n_blocks * o->block_size, max_ctx, 0, &mp);
    synthetic_mem_plan_format(&mp, line, sizeof line);
    LOG(LOG_INFO, "backend %s, all-reduce %s; %s", e->be.name, gpu_comm_describe(c), line);
    LOG(LOG_INFO, "model %s: %d layers, dim %d, %d/%d heads, ffn %d, vocab %d; tp %d; rank 0 holds %.1f MiB of weights, "
        "KV cache %.1f MiB (%d blocks of %d)", o->model_path, hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads,
        hp->ffn_dim, hp->vocab_size, c->size, e->model.weight_bytes / 1048576.0, e->kv.bytes / 1048576.0,
        o->n_blocks, o->block_size);
    double q = (double)hp->n_heads * hp->head_dim, kv = (double)hp->n_kv_heads * hp->head_dim;
    double params = (double)hp->n_layers * ((double)hp->dim * (2 * q + 2 * kv) + 3.0 * hp->dim * hp->ffn_dim) +
                    (double)hp->vocab_size * hp->dim;
    e->info = (struct engine_info){.vocab = hp->vocab_size, .eos_id = hp->eos_id, .block_size = o->block_size,
                                   .n_blocks = o->n_blocks, .max_ctx = max_ctx, .tp = c->size,
                                   .gpu = e->be.kind != BACKEND_CPU,
                                   .attn_ctx_unit = params / (2.0 * hp->n_layers * q)};
    e->deadline = deadline_start(c->rank, c->size, o->step_timeout_s, o->stop_flag, o->stop_grace_s);
    *out = e;
    return 0;
fail:
    gpu_comm_free(c);
    backend_close(&e->be);
    plan_free(&e->plan);
    free(e);
    return -1;
}

void engine_close(struct engine *e) {
    if (!e) return;
    deadline_free(e->deadline);
    forward_state_free(&e->fs, &e->be);
    kvcache_free(&e->kv);
    model_free(&e->model);
    gpu_comm_free(e->comm);
    backend_close(&e->be);
    plan_free(&e->plan);
    free(e);
}

const struct engine_info *engine_info(const struct engine *e) { return &e->info; }

void engine_step(struct engine *e, const struct step_plan *plan, float *logits) {
    for (int i = 0; i < plan->n_blocks; i++)
        if (plan->blocks[i] < 0 || plan->blocks[i] >= e->info.n_blocks)
            FATAL("step plan names KV block %d; the cache has %d", plan->blocks[i], e->info.n_blocks);
    deadline_step_begin(e->deadline);
    plan_send(e->comm, plan);
    forward(&e->model, &e->kv, &e->fs, plan, e->comm, logits);
    deadline_step_end(e->deadline);
}

void engine_ping(struct engine *e) {
    if (e->comm->size == 1) return;
    struct step_plan ping = e->plan;
    ping.n_seqs = -1; /* a heartbeat: every rank answers in a barrier, and nothing runs */
    ping.n_tokens = ping.n_blocks = ping.n_out = 0;
    deadline_step_begin(e->deadline);
    plan_send(e->comm, &ping);
    comm_barrier(e->comm);
    deadline_step_end(e->deadline);
}

void engine_stop(struct engine *e) {
    plan_clear(&e->plan);
    plan_send(e->comm, &e->plan);
}

void engine_follow(struct engine *e) {
    for (;;) {
        plan_recv(e->comm, &e->plan);
        if (e->plan.n_seqs == 0) return;
        if (e->plan.n_seqs < 0) { /* engine_ping */
            deadline_step_begin(e->deadline);
            comm_barrier(e->comm);
            deadline_step_end(e->deadline);
            continue;
        }
        deadline_step_begin(e->deadline);
        forward(&e->model, &e->kv, &e->fs, &e->plan, e->comm, NULL);
        deadline_step_end(e->deadline);
    }
}
