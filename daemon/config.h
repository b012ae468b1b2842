/* The daemon's configuration: defaults, then a TOML file, then command-line flags, each
 * key validated against a table of types and limits with messages naming file, line and
 * key. Parsed identically on every rank from the bytes rank 0 read. */
#ifndef TPD_CONFIG_H
#define TPD_CONFIG_H

#include <stddef.h>

#define CONFIG_MAX_UIDS 64

struct config {
    /* [model] */
    char *model_path;
    char *model_name;   /* served id; default: the file or directory name */
    char *tokenizer;    /* default: the model path */
    long max_ctx;       /* 0: the model's trained context */
    /* [parallel] */
    long tp;            /* 0: whatever mpirun started; else must match */
    long threads;       /* per rank; 0: all CPUs / ranks on this node */
    char *backend;      /* "cpu" (more with the CUDA backend) */
    /* [server] */
    char *socket;
    long socket_mode;
    char *socket_group;
    long allowed_uids[CONFIG_MAX_UIDS];
    int n_allowed_uids;
    long tcp_port;
    long max_body_bytes;
    long max_connections;
    double drain_timeout_s;
    /* [scheduler] */
    long max_running, max_queue, step_tokens;
    /* [cache] */
    long block_size;
    long kv_tokens;     /* KV cache capacity in tokens per rank */
    char *kv_type;      /* "f16" or "f32" */
    /* [log] */
    char *log_level;
    int log_all_ranks;
    /* [launch] (read by launch/tpd-launch) */
    char *bind;         /* mpirun --bind-to: "core", "socket", "none" */
    char *hostfile;
    char *mpirun_args;
};

void config_defaults(struct config *c);
void config_free(struct config *c);
/* Applies TOML text (file name for messages). Unknown sections or keys are errors. */
int config_apply_toml(struct config *c, const char *text, size_t len, const char *filename, char *err);
/* Applies "--section.key value" or the short flags (--model, --socket, --threads, ...);
 * argv[0] is the first flag. Returns 0 or -1 with err. */
int config_apply_args(struct config *c, int argc, char **argv, char *err);
/* Checks what no single key can: a model is given, limits agree. */
int config_validate(const struct config *c, char *err);
/* The effective configuration as TOML text (malloc'ed), for the startup log. */
char *config_dump(const struct config *c);
/* Value of one key as text ("server.socket"), malloc'ed, or NULL if unknown. */
char *config_get(const struct config *c, const char *key);

#endif
