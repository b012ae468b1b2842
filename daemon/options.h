/* Each command's options from the one table in config.h: rank 0 reads --config FILE and
 * broadcasts it so every rank parses the same bytes and reaches the same verdict; the
 * usage text of `tpd help [COMMAND]`. Called by every rank (tokenize: rank 0 alone). */
#ifndef TPD_OPTIONS_H
#define TPD_OPTIONS_H

#include <stdio.h>

#include "../parallel/engine.h"
#include "config.h"

struct comm;

/* Defaults, then --config FILE (commands in CMD_FILE), then the flags of command cmd
 * (argv[0] is the command name), then config_validate_for. Collective when c is non-NULL;
 * c NULL: no file is read (a command run by one rank only). cfg is filled either way
 * (config_free it). */
int options_load(struct comm *c, unsigned cmd, int argc, char **argv, struct config *cfg, char *err);

/* What `tpd generate` and `tpd eval` read. The strings belong to cfg. */
struct run_opts {
    struct engine_opts eng;
    int chunk; /* most prompt tokens of one sequence per step */
    const char *prompt_ids, *prompt, *system, *tokenizer;
    int chat;
    long n_predict;
    float temperature, top_p;
    long top_k, seed;
    int print_ids, ignore_eos;
    const char *json_schema, *grammar; /* files */
    const char *seqs, *out;
    int separate;
    struct config cfg;
};

/* options_load for generate or eval (by argv[0]), into o. Collective. */
int run_opts_parse(struct comm *c, int argc, char **argv, struct run_opts *o, char *err);
void run_opts_free(struct run_opts *o);

/* argv[0] is a command's name: does it ask for help (-h or --help as an option)? */
int options_wants_help(int argc, char **argv);
/* `tpd help`: the commands and every option (name NULL), or one command's options.
 * Returns -1 for an unknown command name. */
int options_usage(FILE *f, const char *name);

#endif
