#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/parse.h"
#include "../util/sbuf.h"
#include "../util/toml.h"

#define S (CMD_SERVE | CMD_CONFIG)
#define R (CMD_GENERATE | CMD_EVAL)
#define G CMD_GENERATE
#define E CMD_EVAL
#define T CMD_TOKENIZE
#define F(field) offsetof(struct config, field)
#define BIG 9223372036854775807.0
#define STR_(x) #x
#define STR(x) STR_(x) /* a default from its macro: "300" */
/* The rows' typed constructors (as redis's createIntConfig): a row names its field, whose C
 * type must fit the kind (a compile error otherwise). Arguments: TOML section (NULL: a flag
 * only) and key, the struct config field, short flags ('|'-separated, or NULL), the commands
 * taking it, the default as flag text (NULL: empty or zero), then per kind: KEY_INT and
 * KEY_DBL their limits, KEY_STR the value's placeholder in usage (NULL: from the kind),
 * KEY_ENUM the allowed values ('|'-separated); last the help line. */
#define TYPED(field, T) (F(field) + 0 * sizeof(_Generic(((struct config *)0)->field, T : 1)))
#define TYPED_STR(field) \
    (F(field) + 0 * sizeof(_Generic(((struct config *)0)->field, char * : 1, const char * : 1)))
#define KEY_STR(sec, key, field, flags, cmds, def, meta, help) \
    { sec, key, K_STR, TYPED_STR(field), 0, 0, flags, cmds, def, NULL, meta, help }
#define KEY_ENUM(sec, key, field, flags, cmds, def, choices, help) \
    { sec, key, K_STR, TYPED_STR(field), 0, 0, flags, cmds, def, choices, NULL, help }
#define KEY_INT(sec, key, field, flags, cmds, def, lo, hi, help) \
    { sec, key, K_INT, TYPED(field, long), lo, hi, flags, cmds, def, NULL, NULL, help }
#define KEY_DBL(sec, key, field, flags, cmds, def, lo, hi, help) \
    { sec, key, K_DBL, TYPED(field, double), lo, hi, flags, cmds, def, NULL, NULL, help }
#define KEY_BOOL(sec, key, field, flags, cmds, def, help) \
    { sec, key, K_BOOL, TYPED(field, int), 0, 0, flags, cmds, def, NULL, NULL, help }
/* an octal file mode, 0 to 0777, from TOML or a flag */
#define KEY_MODE(sec, key, field, cmds, def, help) \
    { sec, key, K_MODE, TYPED(field, long), 0, 0777, NULL, cmds, def, NULL, NULL, help }
/* a list of uids, from TOML only (an array of integers) */
#define KEY_UIDS(sec, key, field, cmds, help) \
    { sec, key, K_UIDS, TYPED(field, long *), 0, 4294967295.0, NULL, cmds, NULL, NULL, NULL, help }
#define DEBUG_SWITCH(name, dflt, help) /* a row per switch of kernels/backend.h */ \
    KEY_BOOL("debug", #name, debug.name, NULL, S | R, (dflt) ? "true" : "false", help),
/* One row per key: defaults, parsing, limits, flags, usage and the dump come from here.
 * config prints what serve would run with, so it takes serve's keys. */
static const struct config_key keys[] = {
    KEY_STR(NULL, "config", config_file, "--config", S | R, NULL, "FILE",
            "TOML file: defaults, then the file, then flags"),
    KEY_STR("model", "path", model_path, "--model", S | R, NULL, "PATH",
            "GGUF file or HF directory"),
    KEY_STR("model", "name", model_name, "--model-name", S, NULL, "ID",
            "model id served by the API"),
    KEY_STR("model", "tokenizer", tokenizer, "--tokenizer", S | R | T, NULL, "PATH",
            "tokenizer.json, its directory, or GGUF; default: the model"),
    KEY_INT("model", "max_ctx", max_ctx, "--ctx", S | R, "0", 0, 1 << 24,
            "longest sequence; 0 = trained context (generate, eval: what they need)"),
    KEY_STR("model", "chat_template", chat_template, "--chat-template", S, NULL, "FILE",
            "Jinja chat template to serve chat with instead of the model's own"),
    KEY_ENUM("model", "tool_format", tool_format, "--tool-format", S, "auto",
             "auto|none|hermes|llama3|mistral",
             "tool-call syntax of the chat template; auto = detected from it"),
    KEY_STR("model", "synthetic", synthetic, "--synthetic", S | R, NULL, "GEOMETRY",
            "random weights of a geometry (llama3-8b[:bf16]) instead of a model file"),
    KEY_INT("parallel", "tp", tp, NULL, S, "0", 0, 4096,
            "ranks per pipeline stage; 0 = ranks started / pp"),
    KEY_INT("parallel", "pp", pp, "--pp", S | R, "1", 1, 4096,
            "pipeline stages (layer ranges); ranks = tp x pp, stage-major"),
    KEY_INT("parallel", "threads", threads, "--threads", S | R, "0", 0, 1024,
            "compute threads per rank; 0 = auto"),
    KEY_DBL("parallel", "step_timeout_s", step_timeout_s, NULL, S, "300", 1, 86400,
            "a step running longer means a rank is hung: the job ends (non-zero)"),
    KEY_ENUM("parallel", "backend", backend, "--backend", S | R, "auto", "cpu|cuda|auto",
             "compute backend; auto = cuda when built with it and a GPU is there"),
    KEY_ENUM("parallel", "moe", moe, "--moe", S | R, "auto", "auto|tp|ep",
             "how experts split over a stage's ranks: slices of each (tp) or whole experts (ep)"),
    KEY_ENUM("parallel", "comm", comm.mode, "--comm", S | R, "auto", "auto|nccl|ipc|mpi",
             "GPU all-reduce"),
    KEY_DBL("parallel", "comm_timeout_s", comm.timeout_s, NULL, S | R, STR(COMM_TIMEOUT_S), 1,
            86400,
            "a GPU collective (NCCL, IPC) not done by then means a peer died or hung: the job "
            "ends (non-zero)"),
    KEY_DBL("parallel", "comm_start_timeout_s", comm.start_timeout_s, NULL, S | R,
            STR(COMM_START_TIMEOUT_S), 1, 86400,
            "the startup all-reduce and stage-to-stage checks (and NCCL's set-up) must finish "
            "within this"),
    KEY_INT("parallel", "ipc_small_bytes", comm.ipc_small_bytes, NULL, S | R,
            STR(COMM_IPC_SMALL_BYTES), 1, 4294967296.0,
            "GPU all-reduce auto on one node with NCCL: messages up to this size go over CUDA "
            "IPC"),
    KEY_INT("parallel", "ipc_buffer_bytes", comm.ipc_buffer_bytes, NULL, S | R,
            STR(COMM_IPC_BUFFER_BYTES), 4096, 4294967296.0,
            "CUDA IPC all-reduce: each of a rank's two device slots (larger messages go in "
            "pieces)"),
    KEY_STR("server", "socket", socket, "--socket", S, "/tmp/tpd/tpd.sock", "PATH",
            "Unix socket path"),
    KEY_MODE("server", "socket_mode", socket_mode, S, "0600", "socket file mode (octal string)"),
    KEY_STR("server", "socket_group", socket_group, NULL, S, NULL, "GROUP",
            "group owning the socket"),
    KEY_UIDS("server", "allowed_uids", allowed_uids, S,
             "peer uids allowed (empty = any; config file only)"),
    KEY_INT("server", "tcp_port", tcp_port, "--port", S, "0", 0, 65535,
            "loopback TCP port; 0 = off"),
    KEY_INT("server", "max_body_bytes", max_body_bytes, NULL, S, "1048576", 1024, 1 << 30,
            "largest request body"),
    KEY_INT("server", "grammar_cache_bytes", grammar_cache_bytes, NULL, S, "67108864", 0, 1ll << 40,
            "memory kept by compiled grammars and their token masks; least recently used leave "
            "first"),
    KEY_INT("server", "max_connections", max_connections, NULL, S, "16384", 1, 1 << 20,
            "open connections; a new one past it gets a 503 at once (lowered to fit the "
            "open-file limit)"),
    KEY_INT("server", "max_connections_per_uid", max_connections_per_uid, NULL, S, "0", 0, 1 << 20,
            "open connections of one client uid (TCP clients: together); 0 = half of "
            "max_connections"),
    KEY_INT("server", "header_timeout_s", header_timeout_s, NULL, S, "10", 1, 3600,
            "a request (header and body) not complete this long after its first byte: the "
            "connection is closed"),
    KEY_INT("server", "idle_timeout_s", idle_timeout_s, NULL, S, "60", 1, 86400,
            "a connection with no request under way (new or kept alive) for this long is closed"),
    KEY_INT("server", "http_threads", http_threads, NULL, S, "4", 1, 256,
            "HTTP threads (epoll each); requests waiting for tokens hold none"),
    KEY_INT("server", "send_timeout_s", send_timeout_s, NULL, S, "30", 1, 86400,
            "a client that takes no bytes of its answer for this long is dropped, its "
            "generation cancelled"),
    KEY_DBL("server", "drain_timeout_s", drain_timeout_s, NULL, S, "30", 0, 86400,
            "SIGTERM: time to finish requests"),
    KEY_INT("scheduler", "max_running", max_running, "--max-running", S, "32", 1, 4096,
            "sequences per step"),
    KEY_INT("scheduler", "max_queue", max_queue, "--max-queue", S, "1024", 1, 1 << 20,
            "waiting requests"),
    KEY_INT("scheduler", "step_tokens", step_tokens, "--step-tokens", S, "512", 1, 1 << 20,
            "token budget per step"),
    KEY_DBL("scheduler", "max_share", max_share, NULL, S, "0.5", 0, 1,
            "while others wait, one request (its n choices) or one client uid holds at most "
            "this share of slots and KV; 1 = off"),
    KEY_INT("scheduler", "micro_batches", micro_batches, NULL, S, "0", 0, 16,
            "micro-batches in flight through the pipeline stages; 0 = one per stage (pp), 1 = "
            "one batch at a time"),
    KEY_BOOL("scheduler", "logit_candidates", logit_candidates, NULL, S | G, "true",
             "steps whose requests are all greedy or small-top_k (no penalties, bias or "
             "logprobs) bring back each row's 64 best logits, not the whole vocabulary"),
    KEY_INT("scheduler", "sample_threads", sample_threads, NULL, S, "0", 0, 256,
            "threads on rank 0 that sample a step's whole-vocabulary rows in parallel; 0 = auto "
            "(the cores, at most 8)"),
    KEY_DBL("scheduler", "step_time_s", step_time_s, NULL, S, "0.5", 0, 3600,
            "target step duration: long-prompt chunks shrink so decode keeps its pace; 0 = "
            "tokens only"),
    KEY_ENUM("speculative", "method", spec_method, NULL, S | G, "none", "none|ngram|draft",
             "speculative decoding: draft tokens by prompt lookup (ngram) or a small model "
             "(draft), verify them in one step"),
    KEY_INT("speculative", "k", spec_k, NULL, S | G, "4", 1, 32,
            "most tokens drafted per sequence per step"),
    KEY_INT("speculative", "ngram_min", spec_ngram_min, NULL, S | G, "2", 1, 64,
            "shortest n-gram the lookup matches"),
    KEY_INT("speculative", "ngram_max", spec_ngram_max, NULL, S | G, "4", 1, 64,
            "longest n-gram the lookup matches (tried first)"),
    KEY_STR("speculative", "draft_model", spec_draft_model, NULL, S | G, NULL, "PATH",
            "the draft model (method draft): same tokenizer as the model"),
    KEY_INT("speculative", "max_batch_tokens", spec_max_batch_tokens, NULL, S | G, "0", 0, 1 << 20,
            "with n sequences decoding each drafts at most this / n - 1 tokens (off once n >= "
            "this / 2); 0 = auto: 4 on the CPU, 64 on a GPU"),
    KEY_INT("cache", "block_size", block_size, "--block-size", S | R, "16", 1, 4096,
            "tokens per KV block"),
    KEY_INT("cache", "kv_tokens", kv_tokens, "--kv-tokens", S, "16384", 1, 1 << 28,
            "KV cache capacity in tokens"),
    KEY_BOOL("cache", "require_full_context", require_full_context, NULL, S, "false",
             "refuse to start when the cache cannot hold one full-context sequence (else a "
             "warning)"),
    KEY_BOOL("cache", "prefix_caching", prefix_caching, NULL, S, "true",
             "reuse the KV blocks of prompt prefixes computed before (automatic prefix caching)"),
    KEY_ENUM("cache", "type", kv_type, "--kv-type", S | R, "f16", "f16|f32|fp8",
             "KV cache element type; fp8: E4M3 with a scale per token and head, half F16's bytes"),
    KEY_INT("grammar", "max_stacks", grammar_max_stacks, NULL, S, "1024", 1, 16384,
            "structured output: parses of the output one grammar state may hold"),
    KEY_INT("grammar", "max_token_work", grammar_max_token_work, NULL, S, "4194304", 1024, 1l << 40,
            "structured output: work units one token's mask or advance may take"),
    KEY_DBL("grammar", "max_compile_ms", grammar_max_compile_ms, NULL, S, "2000", 1, 600000,
            "structured output: wall time to compile a grammar and its first mask"),
    KEY_BOOL("grammar", "open_objects", grammar_open_objects, NULL, S, "false",
             "structured output: an object schema with properties and no additionalProperties "
             "also takes undeclared keys (the JSON Schema reading); false: only its declared "
             "keys are generated (llama.cpp, XGrammar, OpenAI strict)"),
    KEY_BOOL("grammar", "infer_types", grammar_infer_types, NULL, S, "true",
             "structured output: a schema without type whose keywords belong to one type "
             "(properties, items, minLength, ...) is written as that type; false: every type, "
             "those keywords constraining theirs (the JSON Schema reading)"),
    /* clang-format off: the rows this macro expands to end in their own commas */
    BACKEND_DEBUG_SWITCHES(DEBUG_SWITCH)
    /* clang-format on */
    KEY_ENUM("debug", "ipc_sync", comm.ipc_sync, NULL, S | R, "auto", "auto|host|device",
             "CUDA IPC all-reduce barrier: host (MPI) or device (spinning kernel); auto = host "
             "when ranks share a GPU"),
    KEY_ENUM("log", "level", log_level, "--log-level", S | R, "info", "debug|info|warn|error",
             "log threshold (generate, eval: warn unless set)"),
    KEY_BOOL("log", "all_ranks", log_all_ranks, NULL, S, "false", "INFO lines from every rank"),
    KEY_STR("log", "access", access_log, "--access-log", S, "stderr", "stderr|off|FILE",
            "a line per HTTP request (serve)"),
    KEY_DBL("log", "stats_interval_s", stats_interval_s, NULL, S, "10", 0, 86400,
            "a stats line this often while there is traffic (0: none)"),
    KEY_ENUM("launch", "launcher", launcher, NULL, S, "mpirun", "mpirun|srun",
             "what tpd-launch starts the ranks with (srun inside a Slurm allocation)"),
    KEY_ENUM("launch", "bind", bind, NULL, S, "core", "core|socket|none", "mpirun --bind-to"),
    KEY_STR("launch", "hostfile", hostfile, NULL, S, NULL, "FILE", "mpirun --hostfile"),
    KEY_STR("launch", "mpirun_args", mpirun_args, NULL, S, NULL, "ARGS",
            "extra mpirun (or srun) arguments"),
    KEY_INT("run", "chunk", chunk, "--chunk", R, "512", 1, 1 << 20,
            "most prompt tokens of one sequence per step"),
    KEY_STR("generate", "prompt", prompt, "--prompt", G, NULL, "TEXT",
            "prompt text (encoded by the tokenizer)"),
    KEY_STR("generate", "prompt_ids", prompt_ids, "--prompt-ids", G, NULL, "1,2,3",
            "prompt as token ids"),
    KEY_BOOL("generate", "chat", chat, "--chat", G, "false",
             "render the prompt with the model's chat template"),
    KEY_STR("generate", "system", system, "--system", G, NULL, "TEXT",
            "system message (with --chat)"),
    KEY_INT("generate", "n_predict", n_predict, "-n|--n-predict", G, "32", 0, 1 << 24,
            "tokens to generate"),
    KEY_DBL("generate", "temperature", temperature, "--temperature|--temp", G, "0", 0, 100,
            "sampling temperature; 0 = greedy"),
    KEY_INT("generate", "top_k", top_k, "--top-k", G, "0", 0, 1 << 24,
            "keep the K likeliest tokens; 0 = all"),
    KEY_DBL("generate", "top_p", top_p, "--top-p", G, "1", 0, 1,
            "nucleus sampling mass, in (0, 1]"),
    KEY_INT("generate", "seed", seed, "--seed", G, "0", 0, BIG, "sampler seed"),
    KEY_BOOL("generate", "ids", print_ids, "--ids", G, "false", "print token ids instead of text"),
    KEY_BOOL("generate", "ignore_eos", ignore_eos, "--ignore-eos", G, "false",
             "keep going past end-of-generation tokens"),
    KEY_STR("generate", "json_schema", json_schema, "--json-schema", G, NULL, "FILE",
            "constrain the output to this JSON Schema"),
    KEY_STR("generate", "grammar", grammar, "--grammar", G, NULL, "FILE",
            "constrain the output to this GBNF grammar (start rule root)"),
    KEY_STR("eval", "seqs", seqs, "--seqs", E, NULL, "\"1,2;3,4\"",
            "token sequences, ';'-separated (required)"),
    KEY_STR("eval", "out", out, "--out", E, NULL, "FILE",
            "float32 logits of every token (required)"),
    KEY_BOOL("eval", "separate", separate, "--separate", E, "false",
             "run the sequences one at a time"),
    KEY_STR("tokenize", "text", text, "--text", T, NULL, "TEXT", "text to encode"),
    KEY_STR("tokenize", "file", file, "--file", T, NULL, "FILE", "file whose bytes to encode"),
    KEY_STR("tokenize", "chat", chat_file, "--chat", T, NULL, "MESSAGES.json",
            "render the chat template over these messages, then encode"),
    KEY_BOOL("tokenize", "add_generation_prompt", add_generation_prompt, "--add-generation-prompt",
             T, "false", "with --chat: end with the assistant's turn opening"),
    KEY_BOOL("tokenize", "print_prompt", print_prompt, "--print-prompt", T, "false",
             "with --chat: print the rendered prompt, not ids"),
    KEY_BOOL("tokenize", "no_special", no_special, "--no-special", T, "false",
             "do not add BOS/EOS as the tokenizer would"),
    KEY_BOOL("tokenize", "no_parse_special", no_parse_special, "--no-parse-special", T, "false",
             "special tokens in the text are plain text"),
    KEY_STR("tokenize", "batch", batch, "--batch", T, NULL, "FILE",
            "tests: hex texts, one a line -> JSON lines"),
    KEY_STR("tokenize", "render_batch", render_batch, "--render-batch", T, NULL, "FILE",
            "tests: JSON lines {template, context} -> rendered (no tokenizer)"),
    KEY_STR("config", "get", get, "--get", CMD_CONFIG, NULL, "SECTION.KEY",
            "print this key's value only"),
};
#define N_KEYS (sizeof keys / sizeof *keys)

static const struct {
    const char *name;
    unsigned bit;
} command_names[] = {
    {"serve", CMD_SERVE}, {"config", CMD_CONFIG},     {"generate", CMD_GENERATE},
    {"eval", CMD_EVAL},   {"tokenize", CMD_TOKENIZE},
};

const struct config_key *config_keys(size_t *n) {
    *n = N_KEYS;
    return keys;
}

unsigned config_command(const char *name) {
    for (size_t i = 0; i < sizeof command_names / sizeof *command_names; i++)
        if (!strcmp(name, command_names[i].name)) return command_names[i].bit;
    return 0;
}

static char **str_at(struct config *c, const struct config_key *k) {
    return (char **)((char *)c + k->off);
}

static void set_str(struct config *c, const struct config_key *k, const char *v) {
    char **p = str_at(c, k);
    free(*p);
    *p = v ? xstrdup(v) : NULL;
}

/* Integer limits as longs: the seed's upper limit is LONG_MAX, which a double rounds up. */
static long lim_long(double d) { return d >= BIG ? LONG_MAX : (long)d; }

static int apply_text(struct config *c, const struct config_key *k, const char *flag, const char *v,
                      char *err);

void config_defaults(struct config *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].def && apply_text(c, &keys[i], "default", keys[i].def, NULL))
            FATAL("options table: bad default '%s' for %s", keys[i].def, keys[i].key);
}

void config_free(struct config *c) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].kind == K_STR) set_str(c, &keys[i], NULL);
}

static const struct config_key *find_key(const char *section, const char *key, size_t key_len) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].section && !strcmp(keys[i].section, section) &&
            strlen(keys[i].key) == key_len && !memcmp(keys[i].key, key, key_len))
            return &keys[i];
    return NULL;
}

/* Range check shared by file and flags. where: "tpd.toml:12: " or "--threads: ". */
static int check_range(const struct config_key *k, double v, const char *where, char *err) {
    if (!isfinite(v))
        return err_set(err, "%s%s.%s = %g is not a finite number", where, k->section, k->key, v);
    if (v < k->lo || v > k->hi)
        return err_set(err, "%s%s.%s = %g is out of range [%g, %g]", where, k->section, k->key, v,
                       k->lo, k->hi);
    return 0;
}

static int parse_mode(const char *s, long *out) {
    char *end;
    long v = strtol(s, &end, 8);
    if (!*s || *end || v < 0 || v > 0777) return -1;
    *out = v;
    return 0;
}

static int apply_node(struct config *c, const struct config_key *k, const struct toml_node *n,
                      const char *file, char *err) {
    char where[600];
    snprintf(where, sizeof where, "%s:%d: ", file, toml_line(n));
    char terr[ERR_LEN];
    switch (k->kind) {
    case K_STR: {
        const char *s;
        size_t len;
        if (toml_string(n, &s, &len, terr) || strlen(s) != len)
            return err_set(err, "%s%s.%s must be a string without NUL bytes", where, k->section,
                           k->key);
        set_str(c, k, s);
        return 0;
    }
    case K_INT: {
        int64_t v;
        if (toml_int(n, &v, terr))
            return err_set(err, "%s%s.%s must be an integer", where, k->section, k->key);
        if (check_range(k, (double)v, where, err)) return -1;
        *(long *)((char *)c + k->off) = (long)v;
        return 0;
    }
    case K_DBL: {
        double v;
        if (toml_double(n, &v, terr))
            return err_set(err, "%s%s.%s must be a number", where, k->section, k->key);
        if (check_range(k, v, where, err)) return -1;
        *(double *)((char *)c + k->off) = v;
        return 0;
    }
    case K_BOOL: {
        bool v;
        if (toml_bool(n, &v, terr))
            return err_set(err, "%s%s.%s must be true or false", where, k->section, k->key);
        *(int *)((char *)c + k->off) = v;
        return 0;
    }
    case K_MODE: {
        const char *s;
        long v;
        if (toml_string(n, &s, NULL, terr) || parse_mode(s, &v))
            return err_set(err, "%s%s.%s must be an octal mode string such as \"0660\"", where,
                           k->section, k->key);
        *(long *)((char *)c + k->off) = v;
        return 0;
    }
    case K_UIDS: {
        if (toml_type(n) != TOML_ARRAY || toml_len(n) > CONFIG_MAX_UIDS)
            return err_set(err, "%s%s.%s must be an array of at most %d uids", where, k->section,
                           k->key, CONFIG_MAX_UIDS);
        c->n_allowed_uids = 0;
        for (size_t i = 0; i < toml_len(n); i++) {
            int64_t v;
            if (toml_int(toml_item(n, i), &v, terr) || check_range(k, (double)v, where, err))
                return err_set(err, "%s%s.%s[%zu] must be a uid (0..4294967295)", where, k->section,
                               k->key, i);
            c->allowed_uids[c->n_allowed_uids++] = (long)v;
        }
        return 0;
    }
    }
    return -1;
}

int config_apply_toml(struct config *c, const char *text, size_t len, const char *filename,
                      char *err) {
    struct toml_node *root;
    if (toml_parse(text, len, filename, &root, err)) return -1;
    int rc = 0;
    for (size_t i = 0; i < toml_len(root) && !rc; i++) {
        size_t slen;
        const char *sec = toml_key(root, i, &slen);
        struct toml_node *tab = toml_value(root, i);
        if (toml_type(tab) != TOML_TABLE) {
            rc = err_set(err, "%s:%d: '%.*s' must be a section such as [server]", filename,
                         toml_line(tab), (int)slen, sec);
            break;
        }
        char secname[64];
        snprintf(secname, sizeof secname, "%.*s", (int)slen, sec);
        for (size_t j = 0; j < toml_len(tab) && !rc; j++) {
            size_t klen;
            const char *key = toml_key(tab, j, &klen);
            const struct config_key *k = find_key(secname, key, klen);
            struct toml_node *v = toml_value(tab, j);
            if (!k) {
                int known_section = 0;
                for (size_t q = 0; q < N_KEYS; q++)
                    known_section |= keys[q].section && !strcmp(keys[q].section, secname);
                rc = known_section ? err_set(err, "%s:%d: unknown key '%.*s' in [%s]", filename,
                                             toml_line(v), (int)klen, key, secname)
                                   : err_set(err, "%s:%d: unknown section [%s]", filename,
                                             toml_line(tab), secname);
            } else {
                rc = apply_node(c, k, v, filename, err);
            }
        }
    }
    toml_free(root);
    return rc;
}

/* Flag or default text. flag: the flag as given, for messages. */
static int apply_text(struct config *c, const struct config_key *k, const char *flag, const char *v,
                      char *err) {
    char where[200];
    if (k->section) snprintf(where, sizeof where, "%s (%s.%s): ", flag, k->section, k->key);
    else snprintf(where, sizeof where, "%s: ", flag);
    long l;
    float f;
    switch (k->kind) {
    case K_STR: set_str(c, k, v); return 0;
    case K_INT:
        if (parse_long(v, lim_long(k->lo), lim_long(k->hi), &l))
            return err_set(err, "%s'%s' is not an integer in [%.0f, %.0f]", where, v, k->lo, k->hi);
        *(long *)((char *)c + k->off) = l;
        return 0;
    case K_DBL:
        if (parse_float(v, k->lo, k->hi, &f))
            return err_set(err, "%s'%s' is not a number in [%g, %g]", where, v, k->lo, k->hi);
        *(double *)((char *)c + k->off) = f;
        return 0;
    case K_BOOL:
        if (strcmp(v, "true") && strcmp(v, "false"))
            return err_set(err, "%s'%s' is not true or false", where, v);
        *(int *)((char *)c + k->off) = !strcmp(v, "true");
        return 0;
    case K_MODE:
        if (parse_mode(v, (long *)((char *)c + k->off)))
            return err_set(err, "%s'%s' is not an octal mode", where, v);
        return 0;
    case K_UIDS: return err_set(err, "%sset %s.%s in the config file", where, k->section, k->key);
    }
    return -1;
}

/* Is a one of the '|'-separated names in list? */
static int in_list(const char *list, const char *a) {
    size_t n = strlen(a);
    for (const char *p = list; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, a, n)) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

/* The row that flag a names among those of commands in mask; *is_switch when a is a
 * K_BOOL row's short flag, which takes no value. */
static const struct config_key *find_flag(unsigned mask, const char *a, int *is_switch) {
    for (size_t j = 0; j < N_KEYS; j++) {
        const struct config_key *k = &keys[j];
        if (!(k->cmds & mask)) continue;
        if (in_list(k->flags, a)) {
            *is_switch = k->kind == K_BOOL;
            return k;
        }
        char longname[80];
        snprintf(longname, sizeof longname, "--%s.%s", k->section, k->key);
        if (k->section && !strcmp(a, longname)) {
            *is_switch = 0;
            return k;
        }
    }
    return NULL;
}

static const char *command_name(unsigned bit) {
    for (size_t i = 0; i < sizeof command_names / sizeof *command_names; i++)
        if (command_names[i].bit == bit) return command_names[i].name;
    return "?";
}

int config_parse_args(struct config *c, unsigned cmd, int argc, char **argv, char *err) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int sw;
        const struct config_key *k = find_flag(cmd, a, &sw);
        if (!k) {
            if (find_flag(~0u, a, &sw))
                return err_set(err, "option %s does not apply to `tpd %s`", a, command_name(cmd));
            return err_set(err, "unknown option '%s'", a);
        }
        if (sw) {
            *(int *)((char *)c + k->off) = 1;
            continue;
        }
        if (i + 1 >= argc) return err_set(err, "option %s needs a value", a);
        if (apply_text(c, k, a, argv[++i], err)) return -1;
    }
    return 0;
}

int config_apply_args(struct config *c, int argc, char **argv, char *err) {
    return config_parse_args(c, CMD_SERVE, argc, argv, err);
}

int config_find_flag(unsigned cmd, int argc, char **argv, const char *flag) {
    int at = -1;
    for (int i = 0; i < argc; i++) {
        int sw = 1;
        const struct config_key *k = find_flag(cmd, argv[i], &sw);
        if (!strcmp(argv[i], flag)) at = i;
        if (k && !sw) i++; /* its value */
    }
    return at;
}

/* "\"f16\" or \"f32\"", "\"a\", \"b\" or \"c\"" */
static void choices_text(const char *list, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (const char *p = list; p && *p && at < n;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        const char *sep = p == list ? "" : bar ? ", " : " or ";
        at += (size_t)snprintf(buf + at, n - at, "%s\"%.*s\"", sep, (int)len, p);
        p = bar ? bar + 1 : NULL;
    }
}

int config_validate_for(const struct config *c, unsigned cmd, char *err) {
    for (size_t i = 0; i < N_KEYS; i++) {
        const struct config_key *k = &keys[i];
        const char *v = k->kind == K_STR ? *(char *const *)((const char *)c + k->off) : NULL;
        if (!k->choices || !v || in_list(k->choices, v)) continue;
        char list[200];
        choices_text(k->choices, list, sizeof list);
        return err_set(err, "%s.%s must be %s, not \"%s\"", k->section, k->key, list, v);
    }
    if (c->top_p <= 0) return err_set(err, "generate.top_p must be in (0, 1], not %g", c->top_p);
    if (c->spec_ngram_min > c->spec_ngram_max)
        return err_set(err,
                       "speculative.ngram_min (%ld) must not exceed speculative.ngram_max (%ld)",
                       c->spec_ngram_min, c->spec_ngram_max);
    if (cmd & (CMD_SERVE | CMD_CONFIG)) {
        if (!c->model_path && !c->synthetic)
            return err_set(err, "no model: set [model] path in the config or pass --model PATH (or "
                                "--synthetic GEOMETRY)");
        if ((cmd & CMD_SERVE) && !c->model_path && !c->tokenizer)
            return err_set(
                err,
                "model.synthetic has no tokenizer: serve needs model.tokenizer (--tokenizer PATH)");
        if (!c->socket || !c->socket[0]) return err_set(err, "server.socket must not be empty");
        if (c->step_tokens < c->max_running)
            return err_set(err,
                           "scheduler.step_tokens (%ld) must be at least scheduler.max_running "
                           "(%ld): every running "
                           "sequence needs room for its decode token",
                           c->step_tokens, c->max_running);
        if (c->kv_tokens < c->block_size)
            return err_set(err, "cache.kv_tokens must hold at least one block");
    }
    if ((cmd & (CMD_GENERATE | CMD_EVAL)) && !c->model_path && !c->synthetic)
        return err_set(err, "--model PATH (or --synthetic GEOMETRY) is required");
    return 0;
}

int config_validate(const struct config *c, char *err) {
    return config_validate_for(c, CMD_SERVE, err);
}

static void usage_row(FILE *f, const struct config_key *k, unsigned cmd) {
    char names[160] = "", val[80] = "";
    size_t at = 0;
    for (const char *p = k->flags; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%.*s", at ? ", " : "", (int)len,
                               p);
        p = bar ? bar + 1 : NULL;
    }
    int sw = k->kind == K_BOOL && k->flags;
    if (k->section && at < sizeof names)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s--%s.%s%s", at ? ", " : "",
                               k->section, k->key, sw ? " true|false" : "");
    if (k->meta) snprintf(val, sizeof val, " %s", k->meta);
    else if (k->choices) snprintf(val, sizeof val, " %s", k->choices);
    else if (k->kind == K_INT) snprintf(val, sizeof val, " N");
    else if (k->kind == K_DBL) snprintf(val, sizeof val, " X");
    else if (k->kind == K_MODE) snprintf(val, sizeof val, " MODE");
    else if (k->kind == K_BOOL && !sw) snprintf(val, sizeof val, " true|false");
    char left[260];
    /* the value goes after the first spelling: "--threads N, --parallel.threads" */
    const char *comma = strstr(names, ", ");
    if (comma && !sw)
        snprintf(left, sizeof left, "%.*s%s%s", (int)(comma - names), names, val, comma);
    else snprintf(left, sizeof left, "%s%s", names, sw ? "" : val);
    if (strlen(left) > 40) fprintf(f, "  %s\n  %-40s %s", left, "", k->help);
    else fprintf(f, "  %-40s %s", left, k->help);
    if (k->def && k->kind != K_BOOL && strcmp(k->def, "0")) fprintf(f, " (default %s)", k->def);
    if (!cmd) {
        fprintf(f, " [");
        int first = 1;
        for (size_t i = 0; i < sizeof command_names / sizeof *command_names; i++)
            if (k->cmds & command_names[i].bit) {
                fprintf(f, "%s%s", first ? "" : " ", command_names[i].name);
                first = 0;
            }
        fprintf(f, "]");
    }
    fprintf(f, "\n");
}

void config_usage(FILE *f, unsigned cmd) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!cmd || (keys[i].cmds & cmd)) usage_row(f, &keys[i], cmd);
}

/* A TOML basic string: quotes, backslashes and control characters escaped. */
static void dump_string(struct sbuf *out, const char *s) {
    sbuf_add(out, "\"", 1);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') sbuf_addf(out, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f) sbuf_addf(out, "\\u%04x", ch);
        else sbuf_add(out, s, 1);
    }
    sbuf_add(out, "\"", 1);
}

/* The value as TOML, whole however long (a log line shows it uncut). */
static void dump_value(const struct config *c, const struct config_key *k, struct sbuf *out) {
    const char *base = (const char *)c + k->off;
    switch (k->kind) {
    case K_STR: dump_string(out, *(char *const *)base); break;
    case K_INT: sbuf_addf(out, "%ld", *(const long *)base); break;
    case K_DBL: sbuf_addf(out, "%g", *(const double *)base); break;
    case K_BOOL: sbuf_adds(out, *(const int *)base ? "true" : "false"); break;
    case K_MODE: sbuf_addf(out, "\"%04lo\"", *(const long *)base); break;
    case K_UIDS:
        sbuf_add(out, "[", 1);
        for (int i = 0; i < c->n_allowed_uids; i++)
            sbuf_addf(out, "%s%ld", i ? ", " : "", c->allowed_uids[i]);
        sbuf_add(out, "]", 1);
        break;
    }
}

char *config_dump(const struct config *c) {
    struct sbuf out = {0};
    sbuf_add(&out, "", 0);
    const char *sec = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!keys[i].section || !(keys[i].cmds & CMD_SERVE)) continue;
        if (strcmp(sec, keys[i].section)) sbuf_addf(&out, "[%s]\n", keys[i].section);
        sec = keys[i].section;
        sbuf_addf(&out, "%s = ", keys[i].key);
        dump_value(c, &keys[i], &out);
        sbuf_add(&out, "\n", 1);
    }
    return out.p;
}

char *config_get(const struct config *c, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return NULL;
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - key), key);
    const struct config_key *k = find_key(sec, dot + 1, strlen(dot + 1));
    if (!k) return NULL;
    struct sbuf val = {0};
    if (k->kind == K_STR) { /* bare value for shell scripts */
        const char *v = *(char *const *)((const char *)c + k->off);
        sbuf_adds(&val, v ? v : "");
    } else if (k->kind == K_MODE) {
        sbuf_addf(&val, "%04lo", *(const long *)((const char *)c + k->off));
    } else {
        dump_value(c, k, &val);
    }
    sbuf_add(&val, "", 0);
    return val.p;
}
