#include "engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "../comm/monitor.h"
#include "../kernels/profile.h"
#include "../comm/gpu_comm.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "../util/sbuf.h"
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
    struct monitor *monitor; /* steps and the stop (step_timeout_s); the GPU collectives */
    /* rank 0: the steps in flight, oldest first; with pp > 1 their logits receives, and how
     * to unpack rows that came as candidates (plan_rows_unpack) */
    struct {
        void *recv;
        float *logits;
        int n_out, n_cands;
        int32_t *full; /* copy of the plan's out_full when n_cands > 0 */
    } pending[ENGINE_MAX_IN_FLIGHT];
    int n_pending;
};

#define LOAD_PROGRESS_S 3.0 /* a job line in a log this often; on a terminal it updates */
#define LOAD_POST_S 1.0     /* each rank posts its progress to rank 0 at most this often */

/* Loading progress of the whole job, logged by rank 0. Every rank posts what it has read
 * (and, first, what its plan says it will hold) to rank 0 with detached point-to-point
 * sends; rank 0 reads the posts that arrived between its own layers, then, its shard
 * loaded, until every rank posted its last (done or failed). No collective: a rank that
 * dies ends the job through mpirun or the fatal hook, and nobody waits on it in MPI. */
enum { LOAD_RUNNING = 0, LOAD_DONE = 1, LOAD_FAILED = 2 };
struct load_post {
    uint64_t planned, bytes; /* planned: model_plan_weights, what "weights loaded" will say */
    double seconds;
    int32_t state, pad;
};
struct load_report {
    struct comm *c;
    double t0, posted, printed;
    int tty, line_open; /* line_open: the updating line is on the terminal, unfinished */
    struct load_post mine;
    struct load_post *all; /* rank 0: each rank's latest */
    unsigned char *heard;  /* rank 0: 1 once a rank posted, 2 once its last */
    int n_heard, n_final;
};

static void load_log(struct load_report *r, int final) {
    uint64_t total = 0, read = 0;
    int done = 0, failed = 0;
    double now = clock_now(), dt = now - r->t0, left = 0;
    for (int i = 0; i < r->c->size; i++) {
        total += r->all[i].planned;
        read += r->all[i].bytes;
        done += r->all[i].state == LOAD_DONE;
        failed += r->all[i].state == LOAD_FAILED;
    }
    double rate = dt > 0 ? read / dt : 0;
    for (int i = 0; i < r->c->size; i++) { /* the ranks load side by side: the slowest ends it */
        const struct load_post *p = &r->all[i];
        double rr = p->seconds > 0 && p->bytes ? p->bytes / p->seconds : rate / r->c->size;
        double rest = p->planned > p->bytes ? (double)(p->planned - p->bytes) : 0;
        if (p->state == LOAD_RUNNING && rr > 0 && rest / rr > left) left = rest / rr;
    }
    char line[256], fails[32] = "";
    if (failed) snprintf(fails, sizeof fails, ", %d failed", failed);
    snprintf(line, sizeof line,
             "loading weights: %.2f of %.2f GiB (%.0f%%; %llu of %llu bytes) on %d rank%s, "
             "%d done%s, %.1f s, %.2f GB/s, about %.0f s left",
             read / 1073741824.0, total / 1073741824.0, total ? 100.0 * read / total : 100.0,
             (unsigned long long)read, (unsigned long long)total, r->c->size,
             r->c->size > 1 ? "s" : "", done, fails, dt, rate / 1e9, left);
    r->printed = now;
    if (r->tty && log_min_level <= LOG_INFO) {
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
        r->line_open = !final;
    } else {
        LOG(LOG_INFO, "%s", line);
    }
}

/* Rank 0: a post from rank `from` (its own included). */
static void load_heard(struct load_report *r, int from, const struct load_post *p) {
    if (from < 0 || from >= r->c->size || r->heard[from] == 2)
        FATAL("a loading post from rank %d after its last", from);
    r->all[from] = *p;
    r->n_heard += !r->heard[from];
    r->heard[from] = 1;
    if (p->state == LOAD_RUNNING) return;
    r->heard[from] = 2;
    r->n_final++;
    if (r->line_open) fprintf(stderr, "\r\033[K");
    r->line_open = 0;
    if (p->state == LOAD_DONE)
        LOG(LOG_INFO,
            "loading weights: rank %d finished: %.2f GiB (%llu bytes) in %.1f s "
            "(%.2f GB/s)",
            from, p->bytes / 1073741824.0, (unsigned long long)p->bytes, p->seconds,
            p->seconds > 0 ? p->bytes / 1e9 / p->seconds : 0.0);
    else
        LOG(LOG_INFO, "loading weights: rank %d failed after %.2f GiB in %.1f s", from,
            p->bytes / 1073741824.0, p->seconds);
}

/* Rank 0: every post that arrived, then a job line when one is due (all plans known). */
static void load_poll(struct load_report *r) {
    struct load_post p;
    int from;
    /* size 1: no peer to hear from (a draft model's engine on rank 0 has a comm of its own,
     * while the job's ranks may be posting for the target's load) */
    while (r->c->size > 1 && comm_recv_any(r->c, &p, sizeof p, COMM_TAG_LOAD, &from))
        load_heard(r, from, &p);
    if (r->n_heard == r->c->size && clock_now() - r->printed >= (r->tty ? 0.25 : LOAD_PROGRESS_S))
        load_log(r, 0);
}

/* This rank's progress: to rank 0 at most every LOAD_POST_S while running, its first and
 * last posts always (rank 0: its own entry, each time). */
static void load_post(struct load_report *r, size_t bytes, int state) {
    double now = clock_now();
    if (state == LOAD_RUNNING && r->c->rank && r->posted > 0 && now - r->posted < LOAD_POST_S)
        return;
    r->posted = now;
    r->mine.bytes = bytes;
    r->mine.seconds = now - r->t0;
    r->mine.state = state;
    if (r->c->rank == 0) load_heard(r, 0, &r->mine);
    else comm_send_detached(r->c, &r->mine, sizeof r->mine, 0, COMM_TAG_LOAD);
}

static void load_progress(void *arg, int done, int total, size_t bytes) {
    (void)done;
    (void)total;
    struct load_report *r = arg;
    load_post(r, bytes, LOAD_RUNNING);
    if (r->c->rank == 0) load_poll(r); /* between layers: what the others posted */
}

/* The last post; rank 0 then waits for every rank's last (each rank sends one, or dies and
 * takes the job with it), leaving no post unreceived, and logs the job's line. */
static void load_end(struct load_report *r, size_t bytes, int ok) {
    load_post(r, bytes, ok ? LOAD_DONE : LOAD_FAILED);
    if (r->c->rank != 0) return;
    struct timespec nap = {0, 10000000L}; /* 10 ms: nothing to rank 0's line, nothing to a core */
    while (r->n_final < r->c->size) {
        load_poll(r);
        if (r->n_final < r->c->size) nanosleep(&nap, NULL);
    }
    load_log(r, 1);
    free(r->all);
    free(r->heard);
}

/* After every rank loaded: one line with each rank's time, bytes and speed (rank 0 logs it). */
static void load_summary(struct comm *c, double seconds, size_t bytes) {
    double mine[2] = {seconds, (double)bytes}; /* bytes exact: what tpd config planned */
    double *all = c->rank == 0 ? xmalloc(sizeof mine * (size_t)c->size) : NULL;
    comm_gather_world(c, mine, sizeof mine, all);
    if (c->rank == 0) {
        struct sbuf b = {0};
        for (int r = 0; r < c->size; r++)
            sbuf_addf(&b, "%srank %d %.2f GiB (%.0f bytes) in %.1f s (%.2f GB/s)", r ? "; " : "", r,
                      all[2 * r + 1] / 1073741824.0, all[2 * r + 1], all[2 * r],
                      all[2 * r] > 0 ? all[2 * r + 1] / 1e9 / all[2 * r] : 0.0);
        LOG(LOG_INFO, "weights loaded: %s", b.p);
        sbuf_free(&b);
    }
    free(all);
}

/* engine_open's load step: the model loaded (or synthesized) on every rank, with the job's
 * progress lines and the summary; -1 when any rank failed (this rank's model freed). */
static int engine_load(struct engine *e, struct comm *c, const struct engine_opts *o, char *err) {
    int ok = 1;
    struct load_report rep = {.c = c, .t0 = clock_now(), .tty = isatty(2)};
    struct load_progress lp = {load_progress, &rep};
    if (!o->synthetic) {
        char why[ERR_LEN]; /* a plan that fails: the load fails alike, and says why */
        size_t planned = 0;
        if (model_plan_weights(o->model_path, c->tp, c->tp_rank, c->pp, c->stage,
                               moe_split_parse(o->moe), &planned, why))
            planned = 0;
        rep.mine.planned = planned;
        if (c->rank == 0) {
            rep.all = xcalloc((size_t)c->size, sizeof *rep.all);
            rep.heard = xcalloc((size_t)c->size, 1);
        }
        load_post(&rep, 0, LOAD_RUNNING);
    }
    size_t loaded = 0;
    if (o->synthetic ? model_synthesize(&e->model, o->synthetic, &e->be, c->tp, c->tp_rank, c->pp,
                                        c->stage, err)
                     : model_load(&e->model, o->model_path, &e->be, c->tp, c->tp_rank, c->pp,
                                  c->stage, moe_split_parse(o->moe), &lp, err))
        ok = 0;
    else loaded = e->model.weight_bytes;
    double load_s = clock_now() - rep.t0;
    if (!o->synthetic) load_end(&rep, ok ? loaded : rep.mine.bytes, ok);
    if (!comm_all_ok(c, ok)) {
        if (ok) {
            err_set(err, "another rank failed to load the model");
            model_free(&e->model);
        }
        return -1;
    }
    load_summary(c, load_s, e->model.weight_bytes);
    return 0;
}

/* engine_open's log step: the backend, the memory plan, the model's shape and, with pp > 1,
 * each stage's plan (rank 0 hears every stage's TP rank 0). */
static void engine_log_plan(struct engine *e, struct comm *c, const struct engine_opts *o,
                            int max_ctx) {
    const struct model_hparams *hp = &e->model.hp;
    struct mem_plan mp;
    char line[512];
    synthetic_mem_plan(&e->model, o->kv_type, (long long)o->n_blocks * o->block_size, max_ctx, 0,
                       &mp);
    synthetic_mem_plan_sink(&e->model, o->block_size, e->kv.sink_blocks, &mp);
    synthetic_mem_plan_format(&mp, line, sizeof line);
    const struct shard_plan *sp = &e->model.sp;
    LOG(LOG_INFO, "backend %s, all-reduce %s; %s", e->be.name, gpu_comm_describe(c), line);
    LOG(LOG_INFO,
        "model %s: %d layers, dim %d, %d/%d heads, ffn %d, vocab %d; tp %d x pp %d; rank 0 holds "
        "%.1f MiB of "
        "weights, KV cache %.1f MiB (%d blocks of %d)",
        o->model_path, hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->ffn_dim,
        hp->vocab_size, c->tp, c->pp, e->model.weight_bytes / 1048576.0, e->kv.bytes / 1048576.0,
        o->n_blocks, o->block_size);
    if (c->pp > 1) { /* the memory plan of every stage, as its TP rank 0 sees it */
        struct {
            int layer0, n_layers;
            double w, kv, total;
        } me = {sp->layer0, sp->n_layers, mp.weights / 1048576.0, mp.kv / 1048576.0,
                mp.total / 1048576.0};
        for (int s = 0; s < c->pp; s++) {
            if (s > 0 && c->rank == 0) comm_recv(c, &me, sizeof me, s * c->tp, COMM_TAG_PLAN_HDR);
            else if (s > 0 && c->stage == s && c->tp_rank == 0)
                comm_send(c, &me, sizeof me, 0, COMM_TAG_PLAN_HDR);
            if (c->rank == 0)
                LOG(LOG_INFO,
                    "stage %d of %d: layers %d-%d%s%s; per rank: weights %.1f MiB, KV cache %.1f "
                    "MiB, "
                    "total %.1f MiB",
                    s, c->pp, me.layer0, me.layer0 + me.n_layers - 1, s == 0 ? " + embedding" : "",
                    s == c->pp - 1 ? " + final norm and LM head" : "", me.w, me.kv, me.total);
        }
    }
}

/* engine_open's info step: what the scheduler reads of the engine (collective: the ranks
 * agree on the candidates they can all give). */
static void engine_fill_info(struct engine *e, struct comm *c, const struct engine_opts *o,
                             int max_ctx) {
    const struct model_hparams *hp = &e->model.hp;
    double q = (double)hp->n_heads * hp->head_dim, kv = (double)hp->n_kv_heads * hp->head_dim;
    double params = (double)hp->n_layers *
                        ((double)hp->dim * (2 * q + 2 * kv) + 3.0 * hp->dim * hp->ffn_dim) +
                    (double)hp->vocab_size * hp->dim;
    /* each rank's shard gives its best k of a row as 2k floats in its own row's space */
    int max_cands = e->be.top_cands ? LOGIT_CANDS_MAX : 0;
    for (int r = 0; r < c->tp; r++) {
        int v0, nv;
        shard_split(hp->vocab_size, c->tp, r, &v0, &nv);
        if (nv / 2 < max_cands) max_cands = nv / 2;
    }
    /* every rank must have the op (a CUDA rank has it unless debug.top_cands is false): a plan
     * asking for candidates runs on all of them */
    max_cands = comm_min_int(c, max_cands);
    e->info = (struct engine_info){.vocab = hp->vocab_size,
                                   .max_cands = max_cands,
                                   .eos_id = hp->eos_id,
                                   .block_size = o->block_size,
                                   .n_blocks = o->n_blocks,
                                   .sink_blocks = e->kv.sink_blocks,
                                   .max_ctx = max_ctx,
                                   .tp = c->tp,
                                   .pp = c->pp,
                                   .gpu = e->be.kind != BACKEND_CPU,
                                   .attn_ctx_unit = params / (2.0 * hp->n_layers * q),
                                   .weight_bytes = (double)e->model.weight_bytes,
                                   .kv_bytes = (double)e->kv.bytes};
    snprintf(e->info.backend, sizeof e->info.backend, "%s", e->be.name ? e->be.name : "?");
    snprintf(e->info.allreduce, sizeof e->info.allreduce, "%s", gpu_comm_describe(c));
}

int engine_open(struct engine **out, struct comm *c, const struct engine_opts *o, char *err) {
    *out = NULL;
    struct engine *e = xcalloc(1, sizeof *e);
    e->comm = c;
    plan_init(&e->plan);
    forward_state_init(&e->fs);
    int ok = 1;
    /* the same options on every rank: every rank reaches the same verdict */
    if (comm_groups_init(c, o->tp, o->pp > 0 ? o->pp : 1, err)) goto fail;
    if (backend_open(&e->be, o->backend, o->threads, o->local_rank, o->debug, err)) ok = 0;
    else if (o->debug && o->debug->profile_ops) backend_profile_wrap(&e->be); /* a table at exit */
    if (!comm_all_ok(c, ok)) {
        if (ok) err_set(err, "another rank failed to open its backend");
        goto fail;
    }
    /* collective: the all-reduce on the GPU backend's stream (NCCL, CUDA IPC or MPI staging);
     * on the CPU, the MPI groups are checked here (a GPU communicator checks its own paths) */
    e->monitor = monitor_start(c->rank, c->size);
    if (gpu_comm_init(c, &e->be, &o->comm, e->monitor, err)) goto fail;
    if (e->be.kind != BACKEND_CUDA && c->size > 1 &&
        comm_startup_check(c, o->comm.start_timeout_s, err))
        goto fail;
    if (engine_load(e, c, o, err)) goto fail;
    const struct model_hparams *hp = &e->model.hp;
    int max_ctx = o->max_ctx > 0 ? o->max_ctx : hp->max_ctx;
    if (max_ctx > hp->max_ctx) {
        err_set(err, "context %d is longer than the model's trained context %d", max_ctx,
                hp->max_ctx);
        ok = 0;
    }
    if (ok && kvcache_init(&e->kv, &e->be, o->kv_type, e->model.sp.n_layers, o->n_blocks,
                           o->block_size, e->model.sp.n_kv, hp->head_dim, o->sink_blocks, err))
        ok = 0;
    if (!comm_all_ok(c, ok)) {
        if (ok) err_set(err, "another rank failed to set up its KV cache");
        kvcache_free(&e->kv);
        model_free(&e->model);
        goto fail;
    }
    engine_log_plan(e, c, o, max_ctx);
    engine_fill_info(e, c, o, max_ctx);
    struct monitor_steps ms = {.step_timeout_s = o->step_timeout_s,
                               .stop_flag = o->stop_flag,
                               .stop_grace_s = o->stop_grace_s};
    monitor_watch_steps(e->monitor, &ms);
    *out = e;
    return 0;
fail:
    gpu_comm_free(c);
    monitor_free(e->monitor);
    backend_close(&e->be);
    plan_free(&e->plan);
    free(e);
    return -1;
}

void engine_close(struct engine *e) {
    if (!e) return;
    monitor_watch_steps(e->monitor, NULL); /* closing runs no steps */
    for (int i = 0; i < e->n_pending; i++)
        free(e->pending[i].full); /* collected before a clean close */
    forward_state_settle(&e->fs, e->comm);
    forward_state_free(&e->fs, &e->be);
    kvcache_free(&e->kv);
    model_free(&e->model);
    gpu_comm_free(e->comm);
    monitor_free(e->monitor);
    backend_close(&e->be);
    plan_free(&e->plan);
    free(e);
}

const struct engine_info *engine_info(const struct engine *e) { return &e->info; }

void engine_moe_load(const struct engine *e, double *busiest, double *all) {
    *busiest = e->fs.moe.pairs_busiest;
    *all = e->fs.moe.pairs_all;
}

/* The step deadline on rank 0 runs from the oldest step in flight: it restarts at each
 * collect that leaves steps in flight, so a pipeline kept full for hours never trips it,
 * while any one step that does not come back within step_timeout_s does. */
int engine_submit(struct engine *e, const struct step_plan *plan, float *logits) {
    struct comm *c = e->comm;
    for (int i = 0; i < plan->n_blocks; i++)
        if (plan->blocks[i] < 0 || plan->blocks[i] >= e->info.n_blocks)
            FATAL("step plan names KV block %d; the cache has %d", plan->blocks[i],
                  e->info.n_blocks);
    if (plan->n_cands < 0 || plan->n_cands > e->info.max_cands)
        FATAL("step plan asks for %d logit candidates a row; at most %d here", plan->n_cands,
              e->info.max_cands);
    if (e->n_pending == ENGINE_MAX_IN_FLIGHT)
        FATAL("more than %d steps in flight", ENGINE_MAX_IN_FLIGHT);
    if (e->n_pending == 0) monitor_step_begin(e->monitor);
    /* posted before the activations leave: the last stage never waits on rank 0 to send */
    int32_t *full = NULL;
    if (c->pp > 1 && plan->n_cands > 0) {
        full = xmalloc(sizeof *full * (size_t)(plan->n_out > 0 ? plan->n_out : 1));
        memcpy(full, plan->out_full, sizeof *full * (size_t)plan->n_out);
    }
    e->pending[e->n_pending].recv = c->pp > 1
                                        ? comm_irecv_floats(c, logits,
                                                            (size_t)plan->n_out * e->info.vocab,
                                                            (c->pp - 1) * c->tp, COMM_TAG_LOGITS)
                                        : NULL;
    e->pending[e->n_pending].logits = logits;
    e->pending[e->n_pending].n_out = plan->n_out;
    e->pending[e->n_pending].n_cands = plan->n_cands;
    e->pending[e->n_pending++].full = full;
    plan_send(c, plan);
    forward(&e->model, &e->kv, &e->fs, plan, c, logits);
    return e->n_pending;
}

int engine_collect(struct engine *e) {
    if (e->n_pending == 0) FATAL("engine_collect with no step in flight");
    if (e->pending[0].recv) {
        comm_wait(e->comm, e->pending[0].recv);
        if (e->pending[0].full) /* the last stage packed the light rows (plan_rows_pack) */
            plan_rows_unpack(e->pending[0].n_out, e->pending[0].n_cands, e->pending[0].full,
                             e->pending[0].logits, e->info.vocab);
    }
    free(e->pending[0].full);
    memmove(e->pending, e->pending + 1, sizeof *e->pending * (size_t)--e->n_pending);
    monitor_step_end(e->monitor);
    if (e->n_pending) monitor_step_begin(e->monitor);
    return e->n_pending;
}

void engine_step(struct engine *e, const struct step_plan *plan, float *logits) {
    engine_submit(e, plan, logits);
    while (engine_collect(e) > 0) {
    }
}

/* A heartbeat runs the pipeline's path without work: each stage's TP group meets in a
 * barrier, passes it on, and the last stage answers rank 0, so a hung rank anywhere keeps
 * rank 0's step (and its deadline) open. */
static void ping_answer(struct engine *e) {
    struct comm *c = e->comm;
    comm_tp_barrier(c);
    int32_t ack = 1;
    if (c->pp > 1 && c->stage == c->pp - 1 && c->tp_rank == 0)
        comm_send(c, &ack, sizeof ack, 0, COMM_TAG_LOGITS);
    if (c->pp > 1 && c->rank == 0)
        comm_recv(c, &ack, sizeof ack, (c->pp - 1) * c->tp, COMM_TAG_LOGITS);
}

void engine_ping(struct engine *e) {
    if (e->comm->size == 1) return;
    struct step_plan ping = e->plan;
    ping.n_seqs = -1; /* a heartbeat: nothing runs */
    ping.n_tokens = ping.n_blocks = ping.n_out = 0;
    monitor_step_begin(e->monitor);
    plan_send(e->comm, &ping);
    ping_answer(e);
    monitor_step_end(e->monitor);
}

void engine_stop(struct engine *e) {
    plan_clear(&e->plan);
    plan_send(e->comm, &e->plan);
}

void engine_follow(struct engine *e) {
    for (;;) {
        plan_recv(e->comm, &e->plan);
        if (e->plan.n_seqs == 0) return;
        monitor_step_begin(e->monitor);
        if (e->plan.n_seqs < 0) ping_answer(e); /* engine_ping */
        else forward(&e->model, &e->kv, &e->fs, &e->plan, e->comm, NULL);
        monitor_step_end(e->monitor);
    }
}
