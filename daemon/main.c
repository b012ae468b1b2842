/* tpd: tensor-parallel LLM inference. `mpirun -np N tpd COMMAND ...` starts one rank per
 * GPU (or CPU share); every rank runs the same command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../util/log.h"
#include "../util/version.h"
#include "cmd_run.h"
#include "cmd_serve.h"
#include "cmd_tokenize.h"
#include "options.h"

/* tokenize needs no ranks: only rank 0 runs it */
static int run_tokenize(struct comm *c, int argc, char **argv) {
    return c->rank == 0 ? cmd_tokenize(argc, argv) : 0;
}

struct command {
    const char *name;
    int (*run)(struct comm *c, int argc, char **argv);
};

/* Options and usage text come from the table in config.c (options_usage). */
static const struct command commands[] = {
    {"generate", cmd_generate}, {"serve", cmd_serve}, {"config", cmd_config},
    {"tokenize", run_tokenize}, {"eval", cmd_eval},
};

static int is_help(const char *a) {
    return !strcmp(a, "help") || !strcmp(a, "--help") || !strcmp(a, "-h");
}

int main(int argc, char **argv) {
    struct comm c;
    comm_init(&c, &argc, &argv);
    log_init(c.rank, LOG_WARN, 0); /* until a command reads its log.level */
    int rc = 2;
    const struct command *cmd = NULL;
    for (unsigned i = 0; argc > 1 && i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) cmd = &commands[i];
    if (argc > 1 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
        rc = 0;
        if (c.rank == 0) {
            char v[256];
            version_line("tpd", v, sizeof v);
            printf("%s\n", v);
        }
    } else if (argc > 1 && is_help(argv[1])) {             /* tpd help [COMMAND] */
        rc = argc > 2 && !config_command(argv[2]) ? 2 : 0; /* every rank: the same status */
        if (c.rank == 0 && options_usage(stdout, argc > 2 ? argv[2] : NULL)) {
            fprintf(stderr, "tpd: unknown command '%s'\n", argv[2]);
            options_usage(stderr, NULL);
        }
    } else if (cmd && options_wants_help(argc - 1, argv + 1)) {
        rc = 0;
        if (c.rank == 0) options_usage(stdout, cmd->name);
    } else if (cmd) {
        rc = cmd->run(&c, argc - 1, argv + 1);
    } else if (c.rank == 0) {
        if (argc > 1) fprintf(stderr, "tpd: unknown command '%s'\n", argv[1]);
        options_usage(stderr, NULL);
    }
    comm_finalize(&c);
    return rc;
}
