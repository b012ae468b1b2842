/* tpctl: command-line client of the tpd daemon (OpenAI-style HTTP over its Unix socket).
 * Commands: chat, complete, models, health, metrics, tokenize, bench. Exit codes: 0 success,
 * 1 failure (daemon unreachable, HTTP or protocol error, unhealthy), 2 bad usage. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpctl_api.h"
#include "tpctl_bench.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/fatal.h"
#include "util/version.h"
#include "util/parse.h"
#include "util/sbuf.h"

#define DEFAULT_SOCKET "/tmp/tpd/tpd.sock"

struct cli {
    const char *cmd;
    struct api_target target;
    int verbose;
    const char *model;
    const char *system;
    const char *once;
    long max_tokens;    /* 0: unset */
    double temperature; /* < 0: unset */
    long long seed;     /* < 0: unset */
    int stream;
    int json;
    const char *concurrency;
    long requests, prompt_len, warmup, shared_prefix, turns;
    const char *samples;
    char **args; /* positional arguments after the command */
    int n_args;
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: tpctl [--socket PATH] [--timeout S] COMMAND [options]   (tpctl --version: the "
        "build)\n"
        "commands:\n"
        "  chat [--system TEXT] [--model M] [-n MAX] [--temperature T] [--seed S] [--once "
        "QUESTION]\n"
        "        interactive chat: one user message per line of stdin (EOF ends); answers stream\n"
        "        as they arrive; /help lists the slash commands (/reset, /system, /temperature,\n"
        "        /quit; //TEXT sends /TEXT). Sampling is the server's default (temperature 1, the\n"
        "        rest of the context as max tokens) unless --temperature or -n set it\n"
        "  complete PROMPT|- [--model M] [-n MAX] [--temperature T] [--seed S] [--stream]\n"
        "  models [--json]      models the daemon serves\n"
        "  health               exit 0 when the daemon answers 200\n"
        "  metrics              Prometheus metrics\n"
        "  tokenize TEXT        token ids of TEXT\n"
        "  bench [--concurrency 1,4,16] [--requests N] [--prompt-len P] [--max-tokens M]\n"
        "        [--warmup W] [--model M] [--temperature T] [--json] [--samples FILE]\n"
        "        [--shared-prefix WORDS] [--turns T]   shared-prefix workload: every prompt "
        "starts\n"
        "        with one WORDS-word system prompt; conversations of T turns resend the whole\n"
        "        exchange each turn; the table shows the share of prompt tokens the server cached\n"
        "options: --socket PATH (default $TPD_SOCKET or " DEFAULT_SOCKET
        "), --timeout S (no data for\n"
        "  S seconds ends a request; default 600, 0 waits forever), -v (usage and timing on "
        "stderr)\n");
}

/* Each option, with the commands it applies to ("*": all). */
struct opt_def {
    struct option o;
    const char *cmds;
};

enum {
    O_SOCKET = 1000,
    O_TIMEOUT,
    O_MODEL,
    O_SYSTEM,
    O_ONCE,
    O_TEMP,
    O_SEED,
    O_STREAM,
    O_JSON,
    O_CONC,
    O_REQUESTS,
    O_PROMPT_LEN,
    O_WARMUP,
    O_SAMPLES,
    O_SHARED_PREFIX,
    O_TURNS,
};

static const struct opt_def OPTS[] = {
    {{"socket", required_argument, 0, O_SOCKET}, "*"},
    {{"timeout", required_argument, 0, O_TIMEOUT}, "*"},
    {{"verbose", no_argument, 0, 'v'}, "*"},
    {{"help", no_argument, 0, 'h'}, "*"},
    {{"model", required_argument, 0, O_MODEL}, "chat complete bench"},
    {{"system", required_argument, 0, O_SYSTEM}, "chat"},
    {{"once", required_argument, 0, O_ONCE}, "chat"},
    {{"max-tokens", required_argument, 0, 'n'}, "chat complete bench"},
    {{"temperature", required_argument, 0, O_TEMP}, "chat complete bench"},
    {{"seed", required_argument, 0, O_SEED}, "chat complete"},
    {{"stream", no_argument, 0, O_STREAM}, "complete"},
    {{"json", no_argument, 0, O_JSON}, "models bench"},
    {{"concurrency", required_argument, 0, O_CONC}, "bench"},
    {{"requests", required_argument, 0, O_REQUESTS}, "bench"},
    {{"prompt-len", required_argument, 0, O_PROMPT_LEN}, "bench"},
    {{"warmup", required_argument, 0, O_WARMUP}, "bench"},
    {{"samples", required_argument, 0, O_SAMPLES}, "bench"},
    {{"shared-prefix", required_argument, 0, O_SHARED_PREFIX}, "bench"},
    {{"turns", required_argument, 0, O_TURNS}, "bench"},
};
#define N_OPTS (sizeof OPTS / sizeof *OPTS)

static int applies(const struct opt_def *d, const char *cmd) {
    if (strcmp(d->cmds, "*") == 0) return 1;
    size_t n = strlen(cmd);
    for (const char *p = d->cmds; (p = strstr(p, cmd)); p += n)
        if ((p == d->cmds || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static int bad_value(const char *opt, const char *v, const char *want) {
    fprintf(stderr, "tpctl: --%s '%s': expected %s\n", opt, v, want);
    return -1;
}

/* Fills *o from argv (argv[1] is the command). 0, 1 for --help, -1 on bad usage. */
static int parse_cli(int argc, char **argv, struct cli *o) {
    struct option lo[N_OPTS + 1];
    for (size_t i = 0; i < N_OPTS; i++) lo[i] = OPTS[i].o;
    memset(&lo[N_OPTS], 0, sizeof lo[N_OPTS]);
    const char *env = getenv("TPD_SOCKET");
    o->target.socket = env && *env ? env : DEFAULT_SOCKET;
    o->target.timeout_s = 600;
    o->temperature = -1;
    o->seed = -1;
    o->concurrency = "1,4,16";
    o->requests = 32;
    o->prompt_len = 128;
    o->warmup = 1;
    o->cmd = argv[1];
    opterr = 0;
    optind = 1;
    int c, li;
    /* parse argv[1..]: the command name plays getopt's program name */
    while ((c = getopt_long(argc - 1, argv + 1, ":n:vh", lo, &li)) != -1) {
        if (c == '?' || c == ':') {
            const char *bad = argv[optind]; /* getopt's argv is argv + 1: the option just read */
            if (c == ':')
                fprintf(stderr, "tpctl: option %s needs a value\n",
                        optopt ? (char[]){'-', (char)optopt, 0} : bad);
            else
                fprintf(stderr, "tpctl: unknown option %s\n",
                        optopt ? (char[]){'-', (char)optopt, 0} : bad);
            return -1;
        }
        const struct opt_def *d = NULL;
        for (size_t i = 0; i < N_OPTS; i++)
            if (OPTS[i].o.val == c) d = &OPTS[i];
        if (d && !applies(d, o->cmd)) {
            fprintf(stderr, "tpctl: --%s does not apply to '%s'\n", d->o.name, o->cmd);
            return -1;
        }
        long v;
        float f;
        switch (c) {
        case 'h': return 1;
        case 'v': o->verbose = 1; break;
        case O_SOCKET: o->target.socket = optarg; break;
        case O_TIMEOUT:
            if (parse_float(optarg, 0, 1e7, &f))
                return bad_value("timeout", optarg, "seconds >= 0");
            o->target.timeout_s = f;
            break;
        case O_MODEL: o->model = optarg; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_ONCE: o->once = optarg; break;
        case 'n':
            if (parse_long(optarg, 1, 1000000000, &o->max_tokens))
                return bad_value("max-tokens", optarg, "a positive integer");
            break;
        case O_TEMP:
            if (parse_float(optarg, 0, 1e6, &f))
                return bad_value("temperature", optarg, "a number >= 0");
            o->temperature = f;
            break;
        case O_SEED:
            if (parse_long(optarg, 0, (long)1 << 53, &v))
                return bad_value("seed", optarg, "an integer in [0, 2^53]");
            o->seed = v;
            break;
        case O_STREAM: o->stream = 1; break;
        case O_JSON: o->json = 1; break;
        case O_CONC: o->concurrency = optarg; break;
        case O_REQUESTS:
            if (parse_long(optarg, 1, 10000000, &o->requests))
                return bad_value("requests", optarg, "a positive integer");
            break;
        case O_PROMPT_LEN:
            if (parse_long(optarg, 1, 1000000, &o->prompt_len))
                return bad_value("prompt-len", optarg, "a positive integer");
            break;
        case O_WARMUP:
            if (parse_long(optarg, 0, 1000000, &o->warmup))
                return bad_value("warmup", optarg, "an integer >= 0");
            break;
        case O_SAMPLES: o->samples = optarg; break;
        case O_SHARED_PREFIX:
            if (parse_long(optarg, 0, 1000000, &o->shared_prefix))
                return bad_value("shared-prefix", optarg, "an integer >= 0");
            break;
        case O_TURNS:
            if (parse_long(optarg, 1, 10000, &o->turns))
                return bad_value("turns", optarg, "an integer in [1, 10000]");
            break;
        default: return -1;
        }
    }
    o->args = argv + 1 + optind;
    o->n_args = argc - 1 - optind;
    return 0;
}

static int fail(const char *err) {
    fprintf(stderr, "tpctl: %s\n", err);
    return 1;
}

/* The model to name in requests: --model, else the first one the daemon lists (left out when
 * it lists none). Also the first contact with the daemon, so its failure is reported. */
static int resolve_model(struct cli *o, char **owned, char *err) {
    *owned = NULL;
    if (o->model) return 0;
    if (api_first_model(&o->target, owned, err)) return -1;
    o->model = *owned;
    return 0;
}

static int print_piece(void *ud, const char *text, size_t len, int finished) {
    (void)ud;
    (void)finished;
    if (len) fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static void report_usage(const struct cli *o, const struct api_result *r, double secs) {
    if (!o->verbose) return;
    fprintf(stderr, "[finish: %s", r->finish_reason[0] ? r->finish_reason : "?");
    if (r->prompt_tokens >= 0) fprintf(stderr, "; prompt %ld tokens", r->prompt_tokens);
    if (r->completion_tokens >= 0) fprintf(stderr, "; completion %ld tokens", r->completion_tokens);
    fprintf(stderr, "; %.3f s", secs);
    if (r->completion_tokens > 0 && secs > 0)
        fprintf(stderr, "; %.1f tok/s", (double)r->completion_tokens / secs);
    fprintf(stderr, "]\n");
}

/* One request on a fresh connection, its answer streamed to stdout (or printed whole). */
static int generate(const struct cli *o, const char *target, const cJSON *body, int stream,
                    struct api_result *res, char *err) {
    struct httpc *c = xmalloc(sizeof *c);
    int rc = api_connect(c, &o->target, err);
    double t0 = clock_now();
    if (rc == 0) {
        rc = api_generate(c, target, body, stream ? print_piece : NULL, NULL, res, err);
        if (rc == 0 && !stream) fwrite(res->text, 1, res->text_len, stdout);
        if (rc == 0 || res->text_len) fputc('\n', stdout);
        fflush(stdout);
        if (rc == 0) report_usage(o, res, clock_now() - t0);
    } else {
        memset(res, 0, sizeof *res);
    }
    httpc_close(c);
    free(c);
    return rc;
}

static struct gen_opts gen_opts_of(const struct cli *o, int stream) {
    return (struct gen_opts){.model = o->model,
                             .max_tokens = o->max_tokens,
                             .temperature = o->temperature,
                             .seed = o->seed,
                             .stream = stream};
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

/* One user turn: on success the answer joins the history; on failure the question leaves it. */
static int chat_turn(const struct cli *o, cJSON *msgs, const char *question, int *fatal,
                     char *err) {
    add_message(msgs, "user", question);
    struct gen_opts g = gen_opts_of(o, 1);
    cJSON *body = api_chat_body(&g, msgs);
    struct api_result res;
    int rc = generate(o, "/v1/chat/completions", body, 1, &res, err);
    cJSON_Delete(body);
    if (rc == 0) {
        add_message(msgs, "assistant", res.text);
    } else {
        cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
        *fatal = res.status == 0; /* no HTTP answer at all: the daemon is gone */
    }
    api_result_free(&res);
    return rc;
}

static const char CHAT_HELP[] =
    "commands:\n"
    "  /help               this list\n"
    "  /reset              forget the conversation (the system message stays)\n"
    "  /system [TEXT]      set the system message (none: remove it); the conversation stays\n"
    "  /temperature [T]    set the sampling temperature, 0 to 2 (none: back to the server's "
    "default, 1)\n"
    "  /quit, /exit        leave (so does end of input)\n"
    "  //TEXT              send /TEXT as a message\n";

/* The system message: msgs[0] when present; text NULL removes it. */
static void chat_set_system(cJSON *msgs, const char *text) {
    cJSON *first = cJSON_GetArrayItem(msgs, 0);
    const cJSON *role = first ? cJSON_GetObjectItem(first, "role") : NULL;
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "system"))
        cJSON_DeleteItemFromArray(msgs, 0);
    if (!text) return;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", text);
    cJSON_InsertItemInArray(msgs, 0, m);
}

/* A line of tpctl chat that starts with '/': 0 when it is a message after all ("//TEXT"),
 * 1 when it was a command (done, or refused with a note on stderr), 2 to leave. */
static int chat_command(struct cli *o, cJSON *msgs, const char *line) {
    if (line[1] == '/') return 0;
    const char *arg = line + 1 + strcspn(line + 1, " \t");
    size_t name_len = (size_t)(arg - line);
    while (*arg == ' ' || *arg == '\t') arg++;
#define IS(cmd) (name_len == strlen(cmd) && !strncmp(line, cmd, name_len))
    if (IS("/quit") || IS("/exit")) return 2;
    if (IS("/help")) {
        fputs(CHAT_HELP, stderr);
    } else if (IS("/reset")) {
        const cJSON *first = cJSON_GetArrayItem(msgs, 0);
        const cJSON *role = first ? cJSON_GetObjectItem(first, "role") : NULL;
        int keep = cJSON_IsString(role) && !strcmp(role->valuestring, "system");
        while (cJSON_GetArraySize(msgs) > keep)
            cJSON_DeleteItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
    } else if (IS("/system")) {
        chat_set_system(msgs, *arg ? arg : NULL);
        fprintf(stderr, *arg ? "(system message set)\n" : "(system message removed)\n");
    } else if (IS("/temperature")) {
        char *end;
        double t = *arg ? strtod(arg, &end) : -1;
        if (*arg && (*end || !(t >= 0 && t <= 2))) {
            fprintf(stderr, "/temperature: \"%s\" is not a number from 0 to 2\n", arg);
        } else {
            o->temperature = t;
            if (t < 0) fprintf(stderr, "(temperature: the server's default)\n");
            else fprintf(stderr, "(temperature %g)\n", t);
        }
    } else {
        fprintf(stderr, "unknown command %.*s; /help lists them (//TEXT sends /TEXT)\n",
                (int)name_len, line);
    }
#undef IS
    return 1;
}

static int cmd_chat(struct cli *o) {
    char err[ERR_LEN];
    if (o->n_args)
        return fprintf(stderr, "tpctl chat: unexpected argument '%s' (use --once QUESTION)\n",
                       o->args[0]),
               2;
    char *model = NULL;
    if (resolve_model(o, &model, err)) return fail(err);
    cJSON *msgs = cJSON_CreateArray();
    if (o->system) add_message(msgs, "system", o->system);
    int rc = 0, fatal = 0;
    if (o->once) {
        if (chat_turn(o, msgs, o->once, &fatal, err)) rc = fail(err);
    } else {
        int tty = isatty(STDIN_FILENO);
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        for (;;) {
            if (tty) fputs("> ", stderr);
            if ((n = getline(&line, &cap, stdin)) < 0) break;
            while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
            if (n == 0) continue;
            int cmd = line[0] == '/' ? chat_command(o, msgs, line) : 0;
            if (cmd == 2) break;
            if (cmd == 1) continue;
            if (chat_turn(o, msgs, line[0] == '/' ? line + 1 : line, &fatal, err)) {
                rc = fail(err);
                if (fatal) break;
            }
        }
        if (tty && n < 0) fputc('\n', stderr);
        free(line);
    }
    cJSON_Delete(msgs);
    free(model);
    return rc;
}

static char *read_stdin(void) {
    struct sbuf b = {0};
    sbuf_add_stream(&b, stdin);
    return b.p;
}

static int cmd_complete(struct cli *o) {
    char err[ERR_LEN];
    if (o->n_args != 1)
        return fprintf(stderr, "tpctl complete: expected one PROMPT (or - for stdin)\n"), 2;
    char *model = NULL;
    if (resolve_model(o, &model, err)) return fail(err);
    char *in = strcmp(o->args[0], "-") == 0 ? read_stdin() : NULL;
    struct gen_opts g = gen_opts_of(o, o->stream);
    cJSON *body = api_completion_body(&g, in ? in : o->args[0]);
    struct api_result res;
    int rc = generate(o, "/v1/completions", body, o->stream, &res, err) ? fail(err) : 0;
    api_result_free(&res);
    cJSON_Delete(body);
    free(in);
    free(model);
    return rc;
}

/* GET target; the body on success (200), else an error message and 1. */
static int get_ok(const struct cli *o, const char *target, char **body, size_t *len) {
    char err[ERR_LEN];
    int status = 0;
    if (api_fetch(&o->target, "GET", target, NULL, &status, body, len, err)) return fail(err);
    if (status != 200) {
        api_error_from_body(status, *body, *len, err);
        free(*body);
        return fail(err);
    }
    return 0;
}

static int cmd_models(struct cli *o) {
    char *b;
    size_t n;
    if (o->n_args) return fprintf(stderr, "tpctl models: no arguments expected\n"), 2;
    if (get_ok(o, "/v1/models", &b, &n)) return 1;
    int rc = 0;
    cJSON *j = cJSON_ParseWithLength(b, n);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    if (!cJSON_IsArray(data)) {
        rc = fail("GET /v1/models: the answer has no \"data\" list");
    } else if (o->json) {
        fwrite(b, 1, n, stdout);
        if (n && b[n - 1] != '\n') putchar('\n');
    } else {
        const cJSON *m;
        cJSON_ArrayForEach(m, data) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
            if (cJSON_IsString(id)) printf("%s\n", id->valuestring);
        }
    }
    cJSON_Delete(j);
    free(b);
    return rc;
}

static int cmd_health(struct cli *o) {
    char err[ERR_LEN], *b = NULL;
    size_t n = 0;
    int status = 0;
    if (o->n_args) return fprintf(stderr, "tpctl health: no arguments expected\n"), 2;
    if (api_fetch(&o->target, "GET", "/health", NULL, &status, &b, &n, err)) return fail(err);
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == ' ')) b[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)b[i] < 0x20 || b[i] == 0x7f) b[i] = ' ';
    if (status == 200) printf("ok (200)%s%s\n", n ? ": " : "", n ? b : "");
    else printf("unhealthy (%d)%s%s\n", status, n ? ": " : "", n ? b : "");
    free(b);
    return status == 200 ? 0 : 1;
}

static int cmd_metrics(struct cli *o) {
    char *b;
    size_t n;
    if (o->n_args) return fprintf(stderr, "tpctl metrics: no arguments expected\n"), 2;
    if (get_ok(o, "/metrics", &b, &n)) return 1;
    fwrite(b, 1, n, stdout);
    if (n && b[n - 1] != '\n') putchar('\n');
    free(b);
    return 0;
}

static int cmd_tokenize(struct cli *o) {
    char err[ERR_LEN], *b = NULL;
    size_t n = 0;
    int status = 0;
    if (o->n_args != 1) return fprintf(stderr, "tpctl tokenize: expected one TEXT\n"), 2;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "prompt", o->args[0]);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    int rc = api_fetch(&o->target, "POST", "/tokenize", body, &status, &b, &n, err);
    free(body);
    if (rc) return fail(err);
    if (status != 200) {
        api_error_from_body(status, b, n, err);
        free(b);
        return fail(err);
    }
    cJSON *j = cJSON_ParseWithLength(b, n);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (cJSON_IsArray(toks)) {
        char *s = cJSON_PrintUnformatted(toks);
        printf("%s\n", s);
        if (o->verbose) fprintf(stderr, "[%d tokens]\n", cJSON_GetArraySize(toks));
        free(s);
    } else {
        rc = fail("POST /tokenize: the answer has no \"tokens\" list");
    }
    cJSON_Delete(j);
    free(b);
    return rc;
}

static int cmd_bench(struct cli *o) {
    char err[ERR_LEN];
    if (o->n_args) return fprintf(stderr, "tpctl bench: unexpected argument '%s'\n", o->args[0]), 2;
    struct bench_opts b = {.target = o->target,
                           .requests = (int)o->requests,
                           .prompt_len = (int)o->prompt_len,
                           .max_tokens = o->max_tokens ? (int)o->max_tokens : 64,
                           .temperature = o->temperature,
                           .warmup = (int)o->warmup,
                           .json = o->json,
                           .samples_path = o->samples,
                           .shared_prefix = (int)o->shared_prefix,
                           .turns = (int)o->turns};
    int32_t *levels = NULL;
    int n = 0;
    if (parse_ids(o->concurrency, BENCH_MAX_LEVELS, &levels, &n, err))
        return fprintf(stderr, "tpctl bench: --concurrency: %s\n", err), 2;
    for (int i = 0; i < n; i++) {
        if (levels[i] < 1 || levels[i] > BENCH_MAX_CONCURRENCY) {
            free(levels);
            return fprintf(stderr, "tpctl bench: concurrency must be in [1, %d]\n",
                           BENCH_MAX_CONCURRENCY),
                   2;
        }
        b.levels[i] = levels[i];
    }
    b.n_levels = n;
    free(levels);
    char *model = NULL;
    if (resolve_model(o, &model, err)) return fail(err);
    b.model = o->model;
    int rc = bench_run(&b, stdout, err) ? fail(err) : 0;
    free(model);
    return rc;
}

struct command {
    const char *name;
    int (*run)(struct cli *o);
};

static const struct command COMMANDS[] = {
    {"chat", cmd_chat},     {"complete", cmd_complete}, {"models", cmd_models},
    {"health", cmd_health}, {"metrics", cmd_metrics},   {"tokenize", cmd_tokenize},
    {"bench", cmd_bench},
};

int main(int argc, char **argv) {
    /* global options may come before the command: move them after it */
    int k = 1;
    while (k < argc && argv[k][0] == '-') {
        if (strcmp(argv[k], "-h") == 0 || strcmp(argv[k], "--help") == 0) return usage(stdout), 0;
        if (strcmp(argv[k], "--version") == 0) {
            char v[256];
            version_line("tpctl", v, sizeof v);
            printf("%s\n", v);
            return 0;
        }
        int takes_value = (strcmp(argv[k], "--socket") == 0 || strcmp(argv[k], "--timeout") == 0);
        k += takes_value ? 2 : 1;
    }
    if (k >= argc) return usage(stderr), 2;
    const struct command *cmd = NULL;
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (strcmp(argv[k], COMMANDS[i].name) == 0) cmd = &COMMANDS[i];
    if (!cmd) {
        fprintf(stderr, "tpctl: unknown command '%s'\n", argv[k]);
        return usage(stderr), 2;
    }
    /* argv[1] becomes the command, the options that preceded it follow */
    char **av = xmalloc(sizeof(char *) * (size_t)(argc + 1));
    av[0] = argv[0];
    av[1] = argv[k];
    int n = 2;
    for (int i = 1; i < argc; i++)
        if (i != k) av[n++] = argv[i];
    av[n] = NULL;
    struct cli o = {0};
    int pr = parse_cli(argc, av, &o);
    int rc = pr < 0 ? 2 : pr > 0 ? (usage(stdout), 0) : cmd->run(&o);
    free(av);
    return rc;
}
