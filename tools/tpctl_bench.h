/* tpctl bench: a concurrency sweep against tpd. Per level, C threads (one connection each)
 * send streamed completions with generated prompts and report requests/s, output tokens/s,
 * time to first token and inter-token latency percentiles, and the share of prompt tokens
 * the server found in its prefix cache. Prompts are distinct by default; the shared-prefix
 * workload starts every prompt with one long system prompt and sends conversations that
 * resend the whole exchange turn by turn (a thread runs one conversation at a time). Run
 * from tpctl's main thread. */
#ifndef TPD_TPCTL_BENCH_H
#define TPD_TPCTL_BENCH_H

#include <stdio.h>

#include "tpctl_api.h"

#define BENCH_MAX_LEVELS 32
#define BENCH_MAX_CONCURRENCY 4096

struct bench_opts {
    struct api_target target;
    const char *model; /* NULL: omitted */
    int levels[BENCH_MAX_LEVELS];
    int n_levels;
    int requests;      /* per level; at least the concurrency */
    int prompt_len;    /* words in each generated prompt (about one token each); with turns,
                        * the words each turn adds */
    int shared_prefix; /* words of a system prompt every prompt starts with; 0: none */
    int turns;         /* requests per conversation, each resending the ones before and their
                        * answers; <= 1: every request stands alone */
    int max_tokens;
    double temperature;       /* < 0: omitted (the server's default) */
    int warmup;               /* requests before the sweep, not measured */
    int json;                 /* one JSON object per level instead of a table */
    const char *samples_path; /* if set: every TTFT and ITL sample, as JSON, for checking */
};

/* Percentile q in [0, 1] of a sorted array, linearly interpolated between the closest ranks
 * (numpy's default); NAN when n is 0. */
double bench_percentile(const double *sorted, size_t n, double q);

/* Runs the sweep and prints to out. 0, or -1 with err when a level had failed requests or
 * nothing could be measured (the results that were measured are still printed). */
int bench_run(const struct bench_opts *o, FILE *out, char *err);

#endif
