#include "options.h"

#include "../model/hfcache.h"
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../parallel/kvcache.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"
#include "../util/fatal.h"

#define MAX_CONFIG_BYTES (1 << 20)

static const struct {
    const char *name, *synopsis;
} commands[] = {
    {"serve", "[--config FILE] [--model PATH] [options]: the daemon (OpenAI API on a Unix socket)"},
    {"config", "--config FILE [options] [--get section.key]: print the effective configuration"},
    {"generate",
     "--model PATH (--prompt TEXT [--chat] | --prompt-ids 1,2,3) [options]: one completion"},
    {"eval", "--model PATH --seqs \"1,2;3,4\" --out FILE [options]: float32 logits of every token"},
    {"tokenize",
     "--tokenizer PATH (--text T | --file F | --chat MESSAGES.json) [options]: ids as JSON"},
};
#define N_COMMANDS (sizeof commands / sizeof *commands)

/* Rank 0 reads the file; every rank gets its bytes, or rank 0's reason it has none. */
static int read_config_file(struct comm *c, const char *path, char **text, int64_t *len,
                            char *err) {
    char rerr[ERR_LEN] = "";
    *text = NULL;
    *len = 0;
    if (c->rank == 0) {
        FILE *f = fopen(path, "rb");
        struct stat st;
        if (!f) {
            *len = -1;
            err_set(rerr, "cannot open config file %s: %s", path, strerror(errno));
        } else if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
            *len = -1;
            err_set(rerr, "config file %s is not a regular file%s", path,
                    S_ISDIR(st.st_mode) ? " (a directory)" : "");
            fclose(f);
        } else {
            *text = xmalloc(MAX_CONFIG_BYTES + 1);
            *len = (int64_t)fread(*text, 1, MAX_CONFIG_BYTES + 1, f);
            if (ferror(f)) {
                *len = -1;
                err_set(rerr, "cannot read config file %s: %s", path, strerror(errno));
            } else if (*len > MAX_CONFIG_BYTES) {
                *len = -1;
                err_set(rerr, "%s: config file larger than %d bytes", path, MAX_CONFIG_BYTES);
            }
            fclose(f);
        }
    }
    comm_bcast(c, len, sizeof *len, 0);
    comm_bcast(c, rerr, sizeof rerr, 0);
    if (*len < 0) {
        free(*text);
        *text = NULL;
        return err_set(err, "%s", rerr[0] ? rerr : "cannot read the config file");
    }
    if (c->rank != 0) *text = malloc((size_t)*len + 1);
    comm_bcast(c, *text, (size_t)*len, 0);
    return 0;
}

int options_load(struct comm *c, unsigned cmd, int argc, char **argv, struct config *cfg,
                 char *err) {
    config_defaults(cfg);
    if (!(cmd & (CMD_SERVE | CMD_CONFIG))) { /* one-shot commands: quiet unless asked */
        free(cfg->log_level);
        cfg->log_level = xstrdup("warn");
    }
    argc--, argv++; /* the command name */
    int at = (cmd & CMD_FILE) && c ? config_find_flag(cmd, argc, argv, "--config") : -1;
    if (at >= 0 && at + 1 < argc) {
        char *text;
        int64_t len;
        if (read_config_file(c, argv[at + 1], &text, &len, err)) return -1;
        int rc = config_apply_toml(cfg, text, (size_t)len, argv[at + 1], err);
        free(text);
        if (rc) return -1;
    }
    if (config_parse_args(cfg, cmd, argc, argv, err)) return -1;
    /* model.path may be a Hugging Face model id held in the local cache */
    char *snapshot;
    if (hfcache_resolve(cfg->model_path, &snapshot, err)) return -1;
    if (snapshot) {
        free(cfg->model_path);
        cfg->model_path = snapshot;
    }
    return config_validate_for(cfg, cmd, err);
}

int run_opts_parse(struct comm *c, int argc, char **argv, struct run_opts *o, char *err) {
    memset(o, 0, sizeof *o);
    unsigned cmd = config_command(argv[0]);
    if (!(cmd & (CMD_GENERATE | CMD_EVAL))) cmd = CMD_GENERATE;
    struct config *g = &o->cfg;
    if (options_load(c, cmd, argc, argv, g, err)) {
        config_free(g);
        return -1;
    }
    enum dtype kv_type;
    if (kvcache_type_parse(g->kv_type, &kv_type, err)) {
        config_free(g);
        return -1;
    }
    options_engine(g, cmd, kv_type, &o->eng);
    return 0;
}

void options_engine(const struct config *cfg, unsigned cmd, enum dtype kv_type,
                    struct engine_opts *eo) {
    *eo = (struct engine_opts){
        .model_path = cfg->model_path ? cfg->model_path : cfg->synthetic,
        .synthetic = cfg->synthetic,
        .backend = cfg->backend,
        .moe = cfg->moe,
        .threads = (int)cfg->threads,
        .pp = (int)cfg->pp,
        .kv_type = kv_type,
        .block_size = (int)cfg->block_size,
        .max_ctx = (int)cfg->max_ctx,
        .comm = cfg->comm,
        .debug = &cfg->debug,
    };
    if (cmd != CMD_SERVE) return;
    eo->tp = (int)cfg->tp;
    eo->n_blocks = (int)(cfg->kv_tokens / cfg->block_size);
    eo->sink_blocks = kvcache_sink_default(eo->n_blocks, (int)cfg->max_running);
    eo->step_timeout_s = cfg->step_timeout_s;
}

/* scheduler.sample_threads, 0 resolved: with a GPU backend the cores rank 0 may use, at most
 * 8 (a step's whole-row draws are a few ms at most; more threads only cost their wake-ups);
 * with the CPU backend one (a row's draw is ~1/1000 of a step there, and idle sampling
 * threads spinning would take cores from the backend's own pool). */
static int sample_threads(const struct config *cfg, const struct engine_info *info) {
    if (cfg->sample_threads > 0) return (int)cfg->sample_threads;
    if (!info->gpu) return 1;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                        : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

void options_sched(const struct config *cfg, unsigned cmd, const struct tokenizer *tok,
                   const struct engine_info *info, struct sched_opts *so) {
    *so = (struct sched_opts){.eog_ids = tok ? tok->eog : NULL,
                              .n_eog = tok ? (int)tok->n_eog : 0,
                              .logit_cands = cfg->logit_candidates};
    if (cmd != CMD_SERVE) { /* generate: one request, prompt chunks of run.chunk */
        so->max_running = so->max_queue = 1;
        so->step_tokens = (int)cfg->chunk;
        return;
    }
    so->max_running = (int)cfg->max_running;
    so->max_queue = (int)cfg->max_queue;
    so->step_tokens = (int)cfg->step_tokens;
    so->step_timeout_s = cfg->step_timeout_s;
    so->step_time_s = cfg->step_time_s;
    so->max_share = cfg->max_share;
    so->prefix_caching = cfg->prefix_caching;
    so->sample_threads = sample_threads(cfg, info);
    so->micro_batches = (int)cfg->micro_batches;
}

void run_opts_free(struct run_opts *o) { config_free(&o->cfg); }

int options_wants_help(int argc, char **argv) {
    unsigned cmd = config_command(argv[0]);
    return config_find_flag(cmd, argc - 1, argv + 1, "--help") >= 0 ||
           config_find_flag(cmd, argc - 1, argv + 1, "-h") >= 0;
}

int options_usage(FILE *f, const char *name) {
    if (!name) {
        fprintf(
            f, "usage: mpirun -np N tpd COMMAND [options]\n       tpd help [COMMAND]\ncommands:\n");
        for (size_t i = 0; i < N_COMMANDS; i++)
            fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].synopsis);
        fprintf(f, "options (the commands taking each in []; every key is also a flag "
                   "--section.key VALUE and,\n"
                   "for commands taking --config FILE, a TOML key: [section] key = VALUE):\n");
        config_usage(f, 0);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(name, commands[i].name)) continue;
        unsigned cmd = config_command(name);
        fprintf(f, "usage: %stpd %s %s\noptions%s:\n", cmd == CMD_TOKENIZE ? "" : "mpirun -np N ",
                name, commands[i].synopsis,
                cmd & CMD_FILE
                    ? " (each also a TOML key in the --config FILE: [section] key = VALUE)"
                    : "");
        config_usage(f, cmd);
        return 0;
    }
    return -1;
}
