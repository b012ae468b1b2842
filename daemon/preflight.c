#include "preflight.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../kernels/backend.h"
#include "../model/checkpoint.h"
#include "../parallel/kvcache.h"
#include "../parallel/model.h"
#include "../server/access_log.h"
#include "../tokenizer/tokenizer.h"
#include "../server/http.h"
#include "../util/err.h"
#include "../util/log.h"
#include "config.h"

int pid_file_check(const char *path, char *err) {
    struct stat st;
    if (lstat(path, &st)) {
        if (errno == ENOENT) return 0;
        return err_set(err, "cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1)
        return err_set(err,
                       "%s exists and is not a pid file of ours (%s); not touching it: remove it "
                       "and start again",
                       path,
                       S_ISLNK(st.st_mode)      ? "a symlink"
                       : !S_ISREG(st.st_mode)   ? "not a regular file"
                       : st.st_uid != geteuid() ? "owned by another user"
                                                : "a file with several links");
    return 0;
}

/* Rank 0's listeners: what http_start and the pid file will need, tried now. */
static int check_listeners(const struct config *cfg, char *err) {
    struct server_config sc = {.socket_path = cfg->socket,
                               .socket_group = cfg->socket_group,
                               .n_allowed_uids = cfg->n_allowed_uids,
                               .tcp_port = (int)cfg->tcp_port};
    if (http_check(&sc, err)) return -1;
    struct access_log *al; /* a file it cannot append to fails now, not after the weights */
    if (access_log_open(&al, cfg->access_log, err)) return -1;
    access_log_close(al);
    char pid_path[4200];
    snprintf(pid_path, sizeof pid_path, "%s.pid", cfg->socket);
    return pid_file_check(pid_path, err);
}

/* A lower bound on what one rank holds: its share of the weights (tensors replicated on
 * every rank counted once for all) and of the KV cache. On the CPU backend the ranks of a
 * node share its memory: a plan beyond the node's whole memory cannot run and is refused;
 * one beyond what is free now is a warning. On a GPU the ranks that share the device (local
 * ranks r with the same r % devices) need their plans in its free memory now: the weights
 * are not read before that is known. */
static int check_memory(const struct comm *c, const struct config *cfg, const struct model_file *mf,
                        enum dtype kv_type, char *err) {
    const struct model_hparams *hp = &mf->hp;
    int tp = c->tp > 0 ? c->tp : 1, pp = c->pp > 0 ? c->pp : 1;
    double weights = (double)modelfile_held_bytes(mf) / ((double)tp * pp);
    int layers = (hp->n_layers + pp - 1) / pp, kv_heads = (hp->n_kv_heads + tp - 1) / tp;
    double kv = (double)kvcache_token_bytes(kv_type, layers, kv_heads, hp->head_dim) *
                (double)cfg->kv_tokens;
    int local = c->local_size > 0 ? c->local_size : 1;
    const double G = 1073741824.0;
    struct backend_gpu_memory gm;
    int gpu = backend_gpu_memory(cfg->backend, c->local_rank, &gm, err);
    if (gpu < 0) return -1;
    if (gpu == 0) {
        /* local ranks r with r % devices == this device (at least this rank) */
        int share = local / gm.n_devices + (gm.device < local % gm.n_devices);
        if (share < 1) share = 1;
        double need = (weights + kv) * share;
        if (need > (double)gm.free_bytes)
            return err_set(err,
                           "memory plan: GPU %d needs at least %.1f GiB for its %d rank(s) (per "
                           "rank: weights %.1f GiB, KV cache %.1f GiB for %ld tokens) and has "
                           "%.1f GiB free of %.1f GiB; use more GPUs (parallel.tp / pp), fewer "
                           "cache.kv_tokens, cache.type = \"fp8\" or a smaller model",
                           gm.device, need / G, share, weights / G, kv / G, (long)cfg->kv_tokens,
                           (double)gm.free_bytes / G, (double)gm.total_bytes / G);
        return 0;
    }
    double need = (weights + kv) * local;
    struct sysinfo si;
    if (sysinfo(&si)) return 0;
    double total = (double)si.totalram * si.mem_unit,
           avail = (double)(si.freeram + si.bufferram) * si.mem_unit;
    if (need > total)
        return err_set(
            err,
            "memory plan: the %d rank(s) on this node need at least %.1f GiB (per rank: weights "
            "%.1f GiB, KV cache %.1f GiB for %ld tokens) and the node has %.1f GiB in all; use "
            "more "
            "nodes, fewer cache.kv_tokens or a smaller model",
            local, need / G, weights / G, kv / G, (long)cfg->kv_tokens, total / G);
    if (need > avail)
        LOG(LOG_WARN,
            "memory plan: the %d rank(s) on this node need at least %.1f GiB; %.1f GiB is free now",
            local, need / G, avail / G);
    return 0;
}

/* What the engine would refuse after loading, found from the tensor directory: a context
 * longer than the trained one, a split this model cannot take (the shard plan of this rank,
 * made by the loader run dry: tp over the heads, pp over the layers, quantized blocks). */
static int check_model(const struct comm *c, const struct config *cfg, const struct model_file *mf,
                       char *err) {
    int max_ctx = cfg->max_ctx > 0 ? (int)cfg->max_ctx : mf->hp.max_ctx;
    if (max_ctx > mf->hp.max_ctx)
        return err_set(err, "context %d is longer than the model's trained context %d", max_ctx,
                       mf->hp.max_ctx);
    size_t bytes;
    int tp = c->tp > 0 ? c->tp : 1, pp = c->pp > 0 ? c->pp : 1;
    return model_plan_weights(cfg->model_path, tp, c->tp_rank, pp, c->stage,
                              moe_split_parse(cfg->moe), &bytes, err);
}

int preflight_serve(struct comm *c, const struct config *cfg, enum dtype kv_type,
                    struct tokenizer **tok, char *err) {
    *tok = NULL;
    int ok = 1;
    if (c->rank == 0 && check_listeners(cfg, err)) ok = 0;
    if (ok && cfg->model_path) {
        struct model_file mf;
        if (checkpoint_open(&mf, cfg->model_path, err)) {
            ok = 0;
        } else {
            if (check_model(c, cfg, &mf, err) || check_memory(c, cfg, &mf, kv_type, err)) ok = 0;
            modelfile_close(&mf);
        }
    }
    if (ok && c->rank == 0) {
        const char *path = cfg->tokenizer ? cfg->tokenizer : cfg->model_path;
        char why[ERR_LEN];
        if (tokenizer_load(tok, path, why)) {
            err_set(err, "tokenizer: %s", why);
            ok = 0;
        }
    }
    if (comm_all_ok(c, ok)) return 0;
    tokenizer_free(*tok);
    *tok = NULL;
    if (!ok) return -1;
    err_set(err, "another rank failed its start-up checks");
    return -2;
}
