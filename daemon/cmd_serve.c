#include "cmd_serve.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../parallel/engine.h"
#include "../tokenizer/tokenizer.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "config.h"
#include "../server/http.h"
#include "../sched/metrics.h"
#include "../sched/scheduler.h"

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

#define MAX_CONFIG_BYTES (1 << 20)

/* Rank 0 reads the file and broadcasts it, so every rank parses the same bytes and
 * reaches the same verdict (and remote ranks need no copy of the file). */
static int load_config(struct comm *c, int argc, char **argv, struct config *cfg, char *err) {
    config_defaults(cfg);
    const char *path = NULL;
    int n_rest = 0;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) path = argv[++i];
        else rest[n_rest++] = argv[i];
    }
    int64_t len = 0;
    char *text = NULL, rerr[ERR_LEN] = "";
    if (path && c->rank == 0) {
        FILE *f = fopen(path, "rb");
        if (!f) {
            len = -1;
            err_set(rerr, "cannot open config file %s", path);
        } else {
            text = xmalloc(MAX_CONFIG_BYTES + 1);
            len = (int64_t)fread(text, 1, MAX_CONFIG_BYTES + 1, f);
            if (len > MAX_CONFIG_BYTES) {
                len = -1;
                err_set(rerr, "%s: config file larger than %d bytes", path, MAX_CONFIG_BYTES);
            }
            fclose(f);
        }
    }
    if (path) {
        comm_bcast(c, &len, sizeof len, 0);
        comm_bcast(c, rerr, sizeof rerr, 0);
        if (len >= 0) {
            if (c->rank != 0) text = xmalloc((size_t)len + 1);
            comm_bcast(c, text, (size_t)len, 0);
        }
    }
    int rc = 0;
    if (len < 0) rc = err_set(err, "%s", rerr);
    else if (path && config_apply_toml(cfg, text, (size_t)len, path, err)) rc = -1;
    else if (config_apply_args(cfg, n_rest, rest, err)) rc = -1;
    else if (config_validate(cfg, err)) rc = -1;
    free(text);
    free(rest);
    return rc;
}

static const char *base_name(const char *p) {
    const char *b = p;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--; /* "dir/" names "dir" */
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '/') b = p + i + 1;
    return b;
}

int cmd_config(struct comm *c, int argc, char **argv) {
    struct config cfg;
    char err[ERR_LEN];
    const char *key = NULL;
    char **args = xcalloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    args[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--get") && i + 1 < argc) key = argv[++i];
        else args[n++] = argv[i];
    }
    int rc = 0;
    if (load_config(c, n, args, &cfg, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd config: %s\n", err);
        rc = 2;
    } else if (c->rank == 0) {
        char *v = key ? config_get(&cfg, key) : config_dump(&cfg);
        if (!v) {
            fprintf(stderr, "tpd config: unknown key '%s'\n", key);
            rc = 2;
        } else {
            printf("%s%s", v, key ? "\n" : "");
            free(v);
        }
    }
    config_free(&cfg);
    free(args);
    return rc;
}

/* Rank 0 after the engine is up: frontend, scheduler, and the step loop until SIGTERM. */
static int serve_rank0(struct engine *e, const struct config *cfg) {
    char err[ERR_LEN];
    char *dump = config_dump(cfg);
    LOG(LOG_INFO, "effective configuration:\n%s", dump);
    free(dump);
    struct tokenizer *tok = NULL;
    const char *tok_path = cfg->tokenizer ? cfg->tokenizer : cfg->model_path;
    if (tokenizer_load(&tok, tok_path, err)) {
        fprintf(stderr, "tpd serve: tokenizer: %s\n", err);
        return 1;
    }
    struct metrics *m = metrics_new();
    struct sched_opts so = {(int)cfg->max_running, (int)cfg->max_queue, (int)cfg->step_tokens, tok->eog,
                            (int)tok->n_eog};
    struct scheduler *s = sched_new(e, &so, m);
    struct server_config sc = {
        .socket_path = cfg->socket, .socket_mode = (unsigned)cfg->socket_mode, .socket_group = cfg->socket_group,
        .n_allowed_uids = cfg->n_allowed_uids, .tcp_port = (int)cfg->tcp_port,
        .max_body_bytes = (size_t)cfg->max_body_bytes, .max_connections = (int)cfg->max_connections,
        .model_name = cfg->model_name ? cfg->model_name : base_name(cfg->model_path),
    };
    unsigned uids[CONFIG_MAX_UIDS];
    for (int i = 0; i < cfg->n_allowed_uids; i++) uids[i] = (unsigned)cfg->allowed_uids[i];
    sc.allowed_uids = uids;
    struct http_server *h = NULL;
    int rc = 0;
    if (http_start(&h, &sc, s, tok, m, err)) {
        fprintf(stderr, "tpd serve: %s\n", err);
        rc = 1;
    } else {
        /* rank 0's pid beside the socket: SIGTERM goes to it (launch/tpd-launch forwards) */
        char pid_path[4200];
        snprintf(pid_path, sizeof pid_path, "%s.pid", cfg->socket);
        FILE *pf = fopen(pid_path, "w");
        if (pf) {
            fprintf(pf, "%ld\n", (long)getpid());
            fclose(pf);
        } else {
            LOG(LOG_WARN, "cannot write %s", pid_path);
        }
        LOG(LOG_INFO, "serving %s on %s (tp %d)", sc.model_name, cfg->socket, e->comm->size);
        while (!stop_requested) sched_step(s, 0.05);
        unlink(pid_path);
        LOG(LOG_INFO, "stopping: no new requests; finishing in-flight ones (up to %.0f s)", cfg->drain_timeout_s);
        http_stop_accepting(h);
        sched_drain(s);
        double deadline = clock_now() + cfg->drain_timeout_s;
        while (sched_step(s, 0.05) > 0 && clock_now() < deadline) {
        }
    }
    sched_abort_all(s);
    if (h) http_free(h);
    sched_free(s);
    metrics_free(m);
    tokenizer_free(tok);
    return rc;
}

int cmd_serve(struct comm *c, int argc, char **argv) {
    struct config cfg;
    char err[ERR_LEN];
    if (load_config(c, argc, argv, &cfg, err) ||
        (cfg.tp && cfg.tp != c->size && !err_set(err, "parallel.tp = %ld but mpirun started %d ranks", cfg.tp, c->size))) {
        if (c->rank == 0) fprintf(stderr, "tpd serve: %s\n", err);
        config_free(&cfg);
        return 2;
    }
    enum log_level lvl;
    if (!log_parse_level(cfg.log_level, &lvl)) log_init(c->rank, lvl, cfg.log_all_ranks);
    /* SIGTERM/SIGINT: rank 0 drains; the other ranks keep following its plans until it
     * releases them (mpirun may forward the signal to every rank). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = c->rank == 0 ? on_stop_signal : SIG_IGN;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct engine_opts eo = {
        .model_path = cfg.model_path, .backend = cfg.backend, .local_rank = c->local_rank,
        .threads = (int)cfg.threads,
        .kv_type = strcmp(cfg.kv_type, "f32") ? DT_F16 : DT_F32, .block_size = (int)cfg.block_size,
        .n_blocks = (int)(cfg.kv_tokens / cfg.block_size), .max_ctx = (int)cfg.max_ctx,
    };
    struct engine e;
    if (engine_open(&e, c, &eo, err)) {
        fprintf(stderr, "tpd serve: rank %d: %s\n", c->rank, err);
        config_free(&cfg);
        return 1;
    }
    int rc = 0;
    if (c->rank == 0) {
        rc = serve_rank0(&e, &cfg);
        engine_stop(&e);
    } else {
        engine_follow(&e);
    }
    engine_close(&e);
    config_free(&cfg);
    /* a failure on rank 0 after startup still lets every rank leave the loop and exit;
     * the exit status says it failed */
    return rc;
}
