/* Each command's options from the one table in config.h: rank 0 reads --config FILE and
 * broadcasts it so every rank parses the same bytes and reaches the same verdict; the
 * usage text of `tpd help [COMMAND]`. Called by every rank (tokenize: rank 0 alone). */
#ifndef TPD_OPTIONS_H
#define TPD_OPTIONS_H

#include <stdio.h>

#include "../parallel/engine.h"
#include "../sched/scheduler.h"
#include "config.h"

struct comm;
struct tokenizer;

/* Defaults, then --config FILE (commands in CMD_FILE), then the flags of command cmd
 * (argv[0] is the command name), then config_validate_for. Collective when c is non-NULL;
 * c NULL: no file is read (a command run by one rank only). cfg is filled either way
 * (config_free it). */
int options_load(struct comm *c, unsigned cmd, int argc, char **argv, struct config *cfg,
                 char *err);

/* What `tpd generate` and `tpd eval` read: the configuration, and the engine's options from
 * it (their strings belong to cfg). */
struct run_opts {
    struct engine_opts eng;
    struct config cfg;
};

/* The engine's options from the configuration as command cmd runs it (pointers into cfg):
 * the model or synthetic geometry, backend, split, threads, KV element type and block, the
 * context and the communicator. Serve adds the stage width, the cache's size (kv_tokens),
 * its FP8 sink blocks and the step timeout; generate and eval size their cache to what they
 * run. The caller adds what is not configuration (local_rank, the stop flag). */
void options_engine(const struct config *cfg, unsigned cmd, enum dtype kv_type,
                    struct engine_opts *eo);
/* The scheduler's options from the configuration: serve's [scheduler] keys (sample_threads 0
 * resolved for info's backend), or generate's one request in chunks of run.chunk; the
 * end-of-generation ids from tok (NULL: the model's EOS). so->spec is left off (spec_setup). */
void options_sched(const struct config *cfg, unsigned cmd, const struct tokenizer *tok,
                   const struct engine_info *info, struct sched_opts *so);

/* options_load for generate or eval (by argv[0]), into o. Collective. */
int run_opts_parse(struct comm *c, int argc, char **argv, struct run_opts *o, char *err);
void run_opts_free(struct run_opts *o);

/* argv[0] is a command's name: does it ask for help (-h or --help as an option)? */
int options_wants_help(int argc, char **argv);
/* `tpd help`: the commands and every option (name NULL), or one command's options.
 * Returns -1 for an unknown command name. */
int options_usage(FILE *f, const char *name);

#endif
