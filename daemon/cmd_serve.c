#include "cmd_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../grammar/grammar.h"
#include "../parallel/engine.h"
#include "../parallel/kvcache.h"
#include "../parallel/model.h"
#include "../tokenizer/tokenizer.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "../util/memtrim.h"
#include "../util/version.h"
#include "config.h"
#include "options.h"
#include "preflight.h"
#include "spec_setup.h"
#include "../server/api.h"
#include "../server/http.h"
#include "../server/toolcall.h"
#include "../util/sbuf.h"
#include "../sched/metrics.h"
#include "../sched/scheduler.h"

/* an atomic, not a volatile sig_atomic_t: the deadline thread reads it too (lock-free, so
 * the handler may update it) */
static atomic_int stop_requested;

static void on_stop_signal(int sig) {
    (void)sig;
    atomic_fetch_add(&stop_requested, 1); /* the second one: stop at once */
}

static const char *base_name(const char *p) {
    const char *b = p;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--; /* "dir/" names "dir" */
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '/') b = p + i + 1;
    return b;
}

/* Each rank's weights as model_load would hold them, from the model's tensor directory (no
 * weight is read; INT4 g_idx tensors are), for the configured tp (1 when it is 0: ranks / pp)
 * and pp: comment lines after the configuration. */
static int print_plan(const struct config *cfg, char *err) {
    int tp = cfg->tp > 0 ? (int)cfg->tp : 1, pp = cfg->pp > 0 ? (int)cfg->pp : 1;
    printf("\n# memory plan: weights per rank at tp %d x pp %d (parallel.moe = %s), from the "
           "file's tensors\n",
           tp, pp, cfg->moe ? cfg->moe : "auto");
    for (int stage = 0; stage < pp; stage++)
        for (int r = 0; r < tp; r++) {
            size_t bytes;
            if (model_plan_weights(cfg->model_path, tp, r, pp, stage, moe_split_parse(cfg->moe),
                                   &bytes, err))
                return -1;
            printf("#   rank %d (stage %d): %zu bytes (%.2f GiB)\n", stage * tp + r, stage, bytes,
                   bytes / 1073741824.0);
        }
    return 0;
}

int cmd_config(struct comm *c, int argc, char **argv) {
    struct config cfg;
    char err[ERR_LEN];
    int rc = 0;
    if (options_load(c, CMD_CONFIG, argc, argv, &cfg, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd config: %s\n", err);
        rc = 2;
    } else if (c->rank == 0) {
        char *v = cfg.get ? config_get(&cfg, cfg.get) : config_dump(&cfg);
        if (!v) {
            fprintf(stderr, "tpd config: unknown key '%s'\n", cfg.get);
            rc = 2;
        } else {
            printf("%s%s", v, cfg.get ? "\n" : "");
            free(v);
            /* the configuration stays printable where the model is not (a login node) */
            if (!cfg.get && cfg.model_path && !cfg.synthetic && print_plan(&cfg, err))
                printf("#   none: %s\n", err);
        }
    }
    config_free(&cfg);
    return rc;
}

/* SOCKET.pid, in the socket's directory (which http_start checked is ours alone): created
 * afresh, never through a symlink nor over a file that is not ours; a stale one of ours
 * (a crashed run) is replaced. dev/ino identify it for pid_file_remove. */
static int pid_file_write(const char *path, dev_t *dev, ino_t *ino, char *err) {
    struct stat st;
    if (pid_file_check(path, err)) return -1;
    if (unlink(path) && errno != ENOENT)
        return err_set(err, "cannot remove the stale %s: %s", path, strerror(errno));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return err_set(err, "cannot create %s: %s", path, strerror(errno));
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (write(fd, buf, (size_t)n) != n || fstat(fd, &st)) {
        err_set(err, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    close(fd);
    *dev = st.st_dev;
    *ino = st.st_ino;
    return 0;
}

/* Only if it is still the file pid_file_write made (not one put in its place since). */
static void pid_file_remove(const char *path, dev_t dev, ino_t ino) {
    struct stat st;
    if (!lstat(path, &st) && S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino)
        unlink(path);
}

/* Rank 0 after the engine is up: frontend, scheduler, and the step loop until SIGTERM. */
/* model.chat_template and model.tool_format: what chat requests render and parse with. */
static int set_chat_template(struct api_ctx *api, const struct config *cfg, char *err) {
    int format = strcmp(cfg->tool_format, "auto") ? toolcall_format_parse(cfg->tool_format) : -1;
    if (!cfg->chat_template) {
        if (format >= 0) api->tool_format = (enum tool_format)format;
        return 0;
    }
    FILE *f = fopen(cfg->chat_template, "rb");
    if (!f) return err_set(err, "model.chat_template %s: %s", cfg->chat_template, strerror(errno));
    struct sbuf src = {0};
    int rc = sbuf_add_stream(&src, f);
    fclose(f);
    if (rc) {
        sbuf_free(&src);
        return err_set(err, "model.chat_template %s: read error", cfg->chat_template);
    }
    rc = api_ctx_set_chat_template(api, src.p, format, err);
    sbuf_free(&src);
    if (rc) {
        char why[ERR_LEN];
        snprintf(why, sizeof why, "%s", err);
        return err_set(err, "model.chat_template %s: %s", cfg->chat_template, why);
    }
    LOG(LOG_INFO, "chat template from %s; tool calls: %s", cfg->chat_template,
        toolcall_format_name(api->tool_format));
    return 0;
}

/* Rank 0's server while it serves, for the fatal hook: a failing job (a fatal error, a
 * stuck step past parallel.step_timeout_s) tells its clients before it ends. */
static _Atomic(struct http_server *) serving;

static void serve_fatal(int code) {
    struct http_server *h = atomic_exchange(&serving, NULL);
    if (h)
        http_fail(h,
                  "the tpd job is ending: a rank failed, stopped or cannot be reached (see the "
                  "daemon's log); this request did not finish",
                  0.5);
    comm_abort(code);
}

/* log.stats_interval_s: what the server did since the last line, vLLM-style, printed only
 * while there is traffic (requests running or waiting, or finished since the last line). */
struct stats_line {
    double t_last;
    struct metrics_totals last;
};

static void stats_maybe_log(struct stats_line *sl, const struct config *cfg, struct scheduler *s,
                            struct metrics *m, double now) {
    if (cfg->stats_interval_s <= 0 || now - sl->t_last < cfg->stats_interval_s) return;
    struct metrics_totals t;
    metrics_totals(m, &t);
    struct sched_stats st;
    sched_stats(s, &st);
    double dt = now - sl->t_last;
    unsigned long req = t.requests - sl->last.requests,
                  in = t.prompt_computed - sl->last.prompt_computed;
    unsigned long out = t.generated - sl->last.generated,
                  q = t.prefix_queried - sl->last.prefix_queried;
    unsigned long hit = t.prefix_hit - sl->last.prefix_hit;
    sl->t_last = now;
    sl->last = t;
    if (!req && !in && !out && !st.running && !st.queued) return;
    int blocks = st.kv_blocks_used + st.kv_blocks_free;
    LOG(LOG_INFO,
        "stats: running %d, waiting %d; prompt %.1f tokens/s, generation %.1f tokens/s; KV cache "
        "%.1f%% "
        "used (%d of %d blocks); prefix cache hit %.1f%% (%lu of %lu prompt tokens); %lu requests "
        "finished in "
        "%.1f s",
        st.running, st.queued, in / dt, out / dt, blocks ? 100.0 * st.kv_blocks_used / blocks : 0.0,
        st.kv_blocks_used, blocks, q ? 100.0 * hit / q : 0.0, hit, q, req, dt);
}

/* The start-up banner, once serving: what runs (build, parallelism, communicator, memory)
 * and where clients reach it. */
static void log_banner(const struct config *cfg, const struct engine_info *in, const char *model,
                       const char *pid_path) {
    char v[256], tcp[48] = "tcp off";
    version_line("tpd", v, sizeof v);
    if (cfg->tcp_port) snprintf(tcp, sizeof tcp, "tcp 127.0.0.1:%ld", (long)cfg->tcp_port);
    LOG(LOG_INFO,
        "%s serving %s: tp %d x pp %d, backend %s, all-reduce %s; memory per rank (rank 0): "
        "weights "
        "%.1f MiB, KV cache %.1f MiB (%d blocks of %d = %ld tokens), context %d; socket %s (mode "
        "%04lo), %s, "
        "pid file %s",
        v, model, in->tp, in->pp, in->backend, in->allreduce, in->weight_bytes / 1048576.0,
        in->kv_bytes / 1048576.0, in->n_blocks, in->block_size, (long)in->n_blocks * in->block_size,
        in->max_ctx, cfg->socket, (unsigned long)(cfg->socket_mode ? cfg->socket_mode : 0600), tcp,
        pid_path);
}

/* tok: loaded by the start-up checks; freed here. */
static int serve_rank0(struct engine *e, const struct config *cfg, struct tokenizer *tok) {
    char err[ERR_LEN];
    memtrim_init();
    char *dump = config_dump(cfg);
    LOG(LOG_INFO, "effective configuration:\n%s", dump);
    free(dump);
    struct metrics *m = metrics_new();
    struct sched_opts so;
    options_sched(cfg, CMD_SERVE, tok, engine_info(e), &so);
    if (spec_setup(cfg, e, &so.spec, err)) {
        fprintf(stderr, "tpd serve: %s\n", err);
        metrics_free(m);
        tokenizer_free(tok);
        return 1;
    }
    struct scheduler *s = sched_new(e, &so, m);
    struct server_config sc = {
        .socket_path = cfg->socket,
        .socket_mode = (unsigned)cfg->socket_mode,
        .socket_group = cfg->socket_group,
        .n_allowed_uids = cfg->n_allowed_uids,
        .tcp_port = (int)cfg->tcp_port,
        .max_body_bytes = (size_t)cfg->max_body_bytes,
        .max_connections = (int)cfg->max_connections,
        .send_timeout_s = (unsigned)cfg->send_timeout_s,
        .max_connections_per_uid = (int)cfg->max_connections_per_uid,
        .header_timeout_s = (unsigned)cfg->header_timeout_s,
        .idle_timeout_s = (unsigned)cfg->idle_timeout_s,
        .http_threads = (int)cfg->http_threads,
        .access_log = cfg->access_log,
        .stop_flag = &stop_requested, /* /health is 503 from the signal on, even mid-step */
    };
    struct sched_stats st;
    sched_stats(s, &st);
    struct api_ctx api;
    api_ctx_init(&api, tok,
                 cfg->model_name ? cfg->model_name
                                 : base_name(cfg->model_path ? cfg->model_path : cfg->synthetic),
                 st.max_ctx, st.kv_tokens, st.max_queue);
    if (api.gvocab)
        grammar_vocab_set_limits(api.gvocab, &(struct grammar_limits){(int)cfg->grammar_max_stacks,
                                                                      cfg->grammar_max_token_work,
                                                                      cfg->grammar_max_compile_ms});
    if (api.gvocab) grammar_vocab_set_cache_bytes(api.gvocab, (size_t)cfg->grammar_cache_bytes);
    if (api.gvocab)
        grammar_vocab_set_schema_reading(
            api.gvocab, (cfg->grammar_open_objects ? GRAMMAR_SCHEMA_OPEN_OBJECTS : 0) |
                            (cfg->grammar_infer_types ? 0 : GRAMMAR_SCHEMA_EVERY_TYPE));
    unsigned uids[CONFIG_MAX_UIDS];
    for (int i = 0; i < cfg->n_allowed_uids; i++) uids[i] = (unsigned)cfg->allowed_uids[i];
    sc.allowed_uids = uids;
    struct http_server *h = NULL;
    int rc = 0;
    /* rank 0's pid beside the socket, for operators (SIGTERM to it drains); nothing in the
     * tree reads it: tpd-launch finds rank 0 among its own descendants */
    char pid_path[4200];
    snprintf(pid_path, sizeof pid_path, "%s.pid", cfg->socket);
    dev_t pid_dev = 0;
    ino_t pid_ino = 0;
    if (set_chat_template(&api, cfg, err) || http_start(&h, &sc, s, &api, m, err) ||
        pid_file_write(pid_path, &pid_dev, &pid_ino, err)) {
        fprintf(stderr, "tpd serve: %s\n", err);
        rc = 1;
    } else {
        log_banner(cfg, engine_info(e), api.model_name, pid_path);
        atomic_store(&serving, h);
        fatal_set_hook(serve_fatal);
        /* idle: give back what a burst of requests left in the allocator's arenas */
        struct stats_line sl = {.t_last = clock_now()};
        while (!stop_requested) {
            if (sched_step(s, 0.05) == 0) memtrim_idle(clock_now());
            stats_maybe_log(&sl, cfg, s, m, clock_now());
        }
        pid_file_remove(pid_path, pid_dev, pid_ino);
        LOG(LOG_INFO, "stopping: new requests get 503; finishing in-flight ones (up to %.0f s)",
            cfg->drain_timeout_s);
        http_drain(h);
        sched_drain(s);
        double deadline = clock_now() + cfg->drain_timeout_s;
        int left = 1;
        while ((left = sched_step(s, 0.05)) > 0 && clock_now() < deadline && stop_requested < 2) {
        }
        if (left > 0) {
            LOG(LOG_WARN, "%s: ending %d request(s) unfinished",
                stop_requested >= 2 ? "a second stop signal" : "the drain timeout passed", left);
            rc = 1;
        }
    }
    fatal_set_hook(comm_abort);
    atomic_store(&serving, NULL);
    sched_abort_all(s);
    if (h) http_free(h);
    sched_free(s);
    spec_teardown(&so.spec);
    api_ctx_free(&api);
    metrics_free(m);
    tokenizer_free(tok);
    return rc;
}

int cmd_serve(struct comm *c, int argc, char **argv) {
    struct config cfg;
    char err[ERR_LEN];
    enum dtype kv_type = DT_F16;
    if (options_load(c, CMD_SERVE, argc, argv, &cfg, err) ||
        comm_groups_init(c, (int)cfg.tp, (int)cfg.pp, err) ||
        kvcache_type_parse(cfg.kv_type, &kv_type, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd serve: %s\n", err);
        config_free(&cfg);
        return 2;
    }
    enum log_level lvl;
    if (!log_parse_level(cfg.log_level, &lvl)) log_init(c->rank, lvl, cfg.log_all_ranks);
    /* which ranks share a node, and a TP group split across nodes (slow: every all-reduce
     * of the forward pass goes over the network), in the startup log */
    struct comm_placement pl;
    comm_placement(c, &pl);
    if (c->rank == 0 && c->size > 1)
        LOG(LOG_INFO, "placement: %d node%s: %s", pl.n_nodes, pl.n_nodes > 1 ? "s" : "", pl.nodes);
    if (c->rank == 0 && pl.split_groups)
        LOG(LOG_WARN,
            "%s: every all-reduce of the forward pass crosses the network between "
            "nodes (slow); place each stage's TP group on one node (a hostfile with slots = tp "
            "and parallel.pp = nodes, or Slurm --ntasks-per-node = tp)",
            pl.split);
    /* SIGTERM/SIGINT: rank 0 drains; the other ranks keep following its plans until it
     * releases them (mpirun may forward the signal to every rank). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = c->rank == 0 ? on_stop_signal : SIG_IGN;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* every check that needs no weights, before any is read */
    struct tokenizer *tok = NULL;
    int pre = preflight_serve(c, &cfg, kv_type, &tok, err);
    if (pre) { /* each problem said once, by the rank that found it (rank 0 says something) */
        if (pre == -1 || c->rank == 0) fprintf(stderr, "tpd serve: rank %d: %s\n", c->rank, err);
        config_free(&cfg);
        return 2;
    }
    struct engine_opts eo;
    options_engine(&cfg, CMD_SERVE, kv_type, &eo);
    eo.local_rank = c->local_rank;
    /* rank 0 drains on SIGTERM; if a step hangs meanwhile, the job still ends */
    eo.stop_flag = c->rank == 0 ? &stop_requested : NULL;
    eo.stop_grace_s = cfg.drain_timeout_s + 10;
    struct engine *e;
    if (engine_open(&e, c, &eo, err)) {
        fprintf(stderr, "tpd serve: rank %d: %s\n", c->rank, err);
        tokenizer_free(tok);
        config_free(&cfg);
        return 1;
    }
    /* every rank knows both numbers, so every rank reaches the same verdict */
    const struct engine_info *info = engine_info(e);
    long kv_tokens = (long)info->n_blocks * info->block_size;
    if (kv_tokens < info->max_ctx) {
        if (cfg.require_full_context) {
            if (c->rank == 0)
                fprintf(
                    stderr,
                    "tpd serve: cache.kv_tokens = %ld cannot hold one sequence of the full context "
                    "(%d tokens); "
                    "raise it, lower model.max_ctx, or set cache.require_full_context = false\n",
                    kv_tokens, info->max_ctx);
            engine_close(e);
            tokenizer_free(tok);
            config_free(&cfg);
            return 2;
        }
        LOG(LOG_WARN,
            "cache.kv_tokens = %ld is less than the context (%d tokens): longer requests are "
            "refused with 400",
            kv_tokens, info->max_ctx);
    }
    int rc = 0;
    if (c->rank == 0) {
        rc = serve_rank0(e, &cfg, tok);
        engine_stop(e);
    } else {
        engine_follow(e);
    }
    engine_close(e);
    config_free(&cfg);
    /* a failure on rank 0 after startup still lets every rank leave the loop and exit;
     * the exit status says it failed */
    return rc;
}
