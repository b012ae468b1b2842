/* Every option of every command in one table: one row per key (TOML section.key, flags,
 * type, default, limits, help) with a mask of the commands that take it. Defaults, then a
 * TOML file, then command-line flags, each validated against the row, with messages naming
 * the key (and file and line). Parsed identically on every rank from the same bytes. */
#ifndef TPD_CONFIG_H
#define TPD_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "../comm/comm.h"
#include "../kernels/backend.h"

#define CONFIG_MAX_UIDS 64

/* The commands, as bits of a row's mask. */
enum {
    CMD_SERVE = 1 << 0,
    CMD_CONFIG = 1 << 1,
    CMD_GENERATE = 1 << 2,
    CMD_EVAL = 1 << 3,
    CMD_TOKENIZE = 1 << 4,
};
#define CMD_FILE \
    (CMD_SERVE | CMD_CONFIG | CMD_GENERATE | CMD_EVAL) /* commands taking --config FILE */

struct config {
    char *config_file; /* --config (flag only) */
    /* [model] */
    char *model_path;
    char *model_name;    /* served id; default: the file or directory name */
    char *tokenizer;     /* default: the model path */
    long max_ctx;        /* 0: the model's trained context */
    char *synthetic;     /* random weights of a geometry ("llama3-8b[:bf16]") instead of a file */
    char *chat_template; /* Jinja file served instead of the tokenizer's template */
    char *tool_format;   /* "auto" or a toolcall format name */
    /* [parallel] */
    long tp;               /* ranks per stage; 0: ranks started / pp; else tp x pp must match */
    long pp;               /* pipeline stages */
    long threads;          /* per rank; 0: all CPUs / ranks on this node */
    double step_timeout_s; /* a step running longer: a rank is hung */
    char *backend;         /* "cpu", "cuda", "auto" */
    char *moe;             /* "auto", "tp", "ep": mixture-of-experts split */
    struct comm_opts comm; /* GPU all-reduce and its timeouts; ipc_sync from [debug] */
    /* [server] */
    char *socket;
    long socket_mode;
    char *socket_group;
    long allowed_uids[CONFIG_MAX_UIDS];
    int n_allowed_uids;
    long tcp_port;
    long max_body_bytes;
    long grammar_cache_bytes;
    long max_connections;
    long max_connections_per_uid; /* 0: half of max_connections */
    long header_timeout_s, idle_timeout_s, http_threads;
    long send_timeout_s;
    double drain_timeout_s;
    /* [scheduler] */
    long max_running, max_queue, step_tokens;
    double step_time_s;
    double max_share;
    /* [speculative] */
    char *spec_method; /* "none", "ngram", "draft" */
    long spec_k, spec_ngram_min, spec_ngram_max, spec_max_batch_tokens;
    char *spec_draft_model;
    long micro_batches; /* in flight in the pipeline; 0: pp */
    /* [cache] */
    long block_size;
    long kv_tokens;           /* KV cache capacity in tokens per rank */
    int require_full_context; /* refuse (else warn) when kv_tokens < the context */
    int prefix_caching;       /* reuse cached KV blocks of earlier prompts */
    int logit_candidates;     /* light steps bring back rows' best logits only (sched_opts) */
    long sample_threads;      /* rank 0's parallel whole-row sampling; 0: auto */
    char *kv_type;            /* "f16", "f32" or "fp8" */
    /* [grammar] (grammar.h's struct grammar_limits) */
    long grammar_max_stacks, grammar_max_token_work;
    double grammar_max_compile_ms;
    int grammar_open_objects;
    int grammar_infer_types;
    /* [debug]: A/B switches for GPU paths not yet the default, and debugging aids */
    struct backend_debug debug;
    /* [log] */
    char *log_level; /* generate and eval: "warn" unless set (options_load) */
    int log_all_ranks;
    char *access_log;        /* "stderr", "off" or a file */
    double stats_interval_s; /* 0: no stats lines */
    /* [launch] (read by launch/tpd-launch) */
    char *launcher; /* "mpirun" or "srun" */
    char *bind;     /* mpirun --bind-to: "core", "socket", "none" */
    char *hostfile;
    char *mpirun_args;
    /* [run]: generate and eval */
    long chunk; /* most prompt tokens of one sequence per step */
    /* [generate] */
    char *prompt, *prompt_ids, *system;
    int chat;
    long n_predict;
    double temperature, top_p;
    long top_k, seed;
    int print_ids, ignore_eos;
    char *json_schema, *grammar; /* files: constrained decoding */
    /* [eval] */
    char *seqs, *out;
    int separate;
    /* [tokenize] */
    char *text, *file, *batch, *render_batch, *chat_file;
    int add_generation_prompt, print_prompt, no_special, no_parse_special;
    /* [config] */
    char *get;
};

enum config_kind { K_STR, K_INT, K_DBL, K_BOOL, K_MODE, K_UIDS };

/* One row. section NULL: a flag-only option (no TOML key, no --section.key). A K_BOOL row's
 * short flags are switches (no value); --section.key takes true or false. */
struct config_key {
    const char *section, *key;
    enum config_kind kind;
    size_t off;
    double lo, hi;       /* limits for numbers */
    const char *flags;   /* short command-line flags, '|'-separated ("-n|--n-predict"), or NULL */
    unsigned cmds;       /* CMD_* bits: the commands that take it as a flag */
    const char *def;     /* default as flag text, or NULL (empty / zero) */
    const char *choices; /* K_STR: the allowed values, '|'-separated, or NULL (any) */
    const char *meta;    /* value placeholder in usage ("PATH"), NULL: from the kind */
    const char *help;
};

/* The whole table, for usage text and for the tests that walk it. */
const struct config_key *config_keys(size_t *n);
/* CMD_* bit of a command name, or 0. */
unsigned config_command(const char *name);

void config_defaults(struct config *c);
void config_free(struct config *c);
/* Applies TOML text (file name for messages). Unknown sections or keys are errors; a
 * known key that the running command does not use is accepted, so that one file can
 * serve every command. */
int config_apply_toml(struct config *c, const char *text, size_t len, const char *filename,
                      char *err);
/* Applies the flags of command cmd: "--section.key value" or a row's short flags; argv[0]
 * is the first flag. A flag of another command is refused. Returns 0 or -1 with err. */
int config_parse_args(struct config *c, unsigned cmd, int argc, char **argv, char *err);
/* config_parse_args for `tpd serve`. */
int config_apply_args(struct config *c, int argc, char **argv, char *err);
/* Index in argv of the option `flag` as command cmd reads argv (values skipped), of its
 * last occurrence, or -1. */
int config_find_flag(unsigned cmd, int argc, char **argv, const char *flag);
/* Checks what the parsers cannot: choices, then what command cmd requires (serve: a
 * model; limits that must agree). cmd 0: the values alone. */
int config_validate_for(const struct config *c, unsigned cmd, char *err);
/* config_validate_for `tpd serve`. */
int config_validate(const struct config *c, char *err);
/* The options of command cmd (0: all, with the commands taking each) as usage lines. */
void config_usage(FILE *f, unsigned cmd);
/* The effective configuration of `tpd serve` as TOML text (malloc'ed), for the startup log. */
char *config_dump(const struct config *c);
/* Value of one key as text ("server.socket"), malloc'ed, or NULL if unknown. */
char *config_get(const struct config *c, const char *key);

#endif
