/* tpd: tensor-parallel LLM inference. `mpirun -np N tpd COMMAND ...` starts one rank per
 * GPU (or CPU share); every rank runs the same command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../comm/comm.h"
#include "../util/log.h"
#include "cmd_run.h"
#include "cmd_serve.h"
#include "cmd_tokenize.h"

/* tokenize needs no ranks: only rank 0 runs it */
static int run_tokenize(struct comm *c, int argc, char **argv) { return c->rank == 0 ? cmd_tokenize(argc, argv) : 0; }

struct command {
    const char *name;
    int (*run)(struct comm *c, int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"generate", cmd_generate, "--model PATH (--prompt TEXT [--chat] [--system S] | --prompt-ids 1,2,3) [-n 32] [--temperature 0] [--top-k K] [--top-p P] [--seed S] [--ids] [--ignore-eos]"},
    {"serve", cmd_serve, "[--config FILE] [--model PATH] [--socket PATH] [--threads N] [--section.key VALUE ...]"},
    {"config", cmd_config, "--config FILE [--get section.key]: print the effective configuration"},
    {"tokenize", run_tokenize, "--tokenizer PATH (--text T | --file F) [--no-special]: ids as JSON"},
    {"eval", cmd_eval, "--model PATH --seqs \"1,2;3,4\" --out FILE [--chunk N] [--separate] [--kv-type f32|f16]"},
};

static void usage(void) {
    fprintf(stderr, "usage: mpirun -np N tpd COMMAND [options]\ncommands:\n");
    for (unsigned i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(stderr, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(stderr, "common: [--backend cpu|cuda|auto] [--comm auto|nccl|ipc|mpi] [--synthetic llama3-8b[:bf16]] [--threads N] [--kv-type f16|f32] [--block-size 16] [--ctx N] [--chunk 512]\n"
                    "environment: TPD_LOG=debug|info|warn|error\n");
}

int main(int argc, char **argv) {
    struct comm c;
    comm_init(&c, &argc, &argv);
    enum log_level lvl = LOG_WARN;
    const char *env = getenv("TPD_LOG");
    if (env && log_parse_level(env, &lvl)) lvl = LOG_WARN;
    log_init(c.rank, lvl, 0);
    int rc = 2;
    const struct command *cmd = NULL;
    for (unsigned i = 0; argc > 1 && i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) cmd = &commands[i];
    if (cmd) {
        rc = cmd->run(&c, argc - 1, argv + 1);
    } else if (c.rank == 0) {
        if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")) fprintf(stderr, "tpd: unknown command '%s'\n", argv[1]);
        usage();
    }
    comm_finalize(&c);
    return rc;
}
