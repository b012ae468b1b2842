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
#define DEBUG_SWITCH(name, dflt, help) /* a row per switch of kernels/backend.h */ \
    {"debug", #name, K_BOOL, F(debug.name), 0, 0, NULL, S | R, (dflt) ? "true" : "false", NULL, NULL, help},
/* One row per key: defaults, parsing, limits, flags, usage and the dump come from here.
 * config prints what serve would run with, so it takes serve's keys. */
static const struct config_key keys[] = {
    {NULL, "config", K_STR, F(config_file), 0, 0, "--config", S | R, NULL, NULL, "FILE", "TOML file: defaults, then the file, then flags"},
    {"model", "path", K_STR, F(model_path), 0, 0, "--model", S | R, NULL, NULL, "PATH", "GGUF file or HF directory"},
    {"model", "name", K_STR, F(model_name), 0, 0, "--model-name", S, NULL, NULL, "ID", "model id served by the API"},
    {"model", "tokenizer", K_STR, F(tokenizer), 0, 0, "--tokenizer", S | R | T, NULL, NULL, "PATH", "tokenizer.json, its directory, or GGUF; default: the model"},
    {"model", "max_ctx", K_INT, F(max_ctx), 0, 1 << 24, "--ctx", S | R, "0", NULL, NULL, "longest sequence; 0 = trained context (generate, eval: what they need)"},
    {"model", "chat_template", K_STR, F(chat_template), 0, 0, "--chat-template", S, NULL, NULL, "FILE", "Jinja chat template to serve chat with instead of the model's own"},
    {"model", "tool_format", K_STR, F(tool_format), 0, 0, "--tool-format", S, "auto", "auto|none|hermes|llama3|mistral", NULL, "tool-call syntax of the chat template; auto = detected from it"},
    {"model", "synthetic", K_STR, F(synthetic), 0, 0, "--synthetic", S | R, NULL, NULL, "GEOMETRY", "random weights of a geometry (llama3-8b[:bf16]) instead of a model file"},
    {"parallel", "tp", K_INT, F(tp), 0, 4096, NULL, S, "0", NULL, NULL, "ranks per pipeline stage; 0 = ranks started / pp"},
    {"parallel", "pp", K_INT, F(pp), 1, 4096, "--pp", S | R, "1", NULL, NULL, "pipeline stages (layer ranges); ranks = tp x pp, stage-major"},
    {"parallel", "threads", K_INT, F(threads), 0, 1024, "--threads", S | R, "0", NULL, NULL, "compute threads per rank; 0 = auto"},
    {"parallel", "step_timeout_s", K_DBL, F(step_timeout_s), 1, 86400, NULL, S, "300", NULL, NULL,
     "a step running longer means a rank is hung: the job ends (non-zero)"},
    {"parallel", "backend", K_STR, F(backend), 0, 0, "--backend", S | R, "auto", "cpu|cuda|auto", NULL, "compute backend; auto = cuda when built with it and a GPU is there"},
    {"parallel", "moe", K_STR, F(moe), 0, 0, "--moe", S | R, "auto", "auto|tp|ep", NULL, "how experts split over a stage's ranks: slices of each (tp) or whole experts (ep)"},
    {"parallel", "comm", K_STR, F(comm.mode), 0, 0, "--comm", S | R, "auto", "auto|nccl|ipc|mpi", NULL, "GPU all-reduce"},
    {"parallel", "comm_timeout_s", K_DBL, F(comm.timeout_s), 1, 86400, NULL, S | R, STR(COMM_TIMEOUT_S), NULL, NULL,
     "a GPU collective (NCCL, IPC) not done by then means a peer died or hung: the job ends (non-zero)"},
    {"parallel", "comm_start_timeout_s", K_DBL, F(comm.start_timeout_s), 1, 86400, NULL, S | R, STR(COMM_START_TIMEOUT_S),
     NULL, NULL, "the startup all-reduce and stage-to-stage checks (and NCCL's set-up) must finish within this"},
    {"parallel", "ipc_small_bytes", K_INT, F(comm.ipc_small_bytes), 1, 4294967296.0, NULL, S | R, STR(COMM_IPC_SMALL_BYTES),
     NULL, NULL, "GPU all-reduce auto on one node with NCCL: messages up to this size go over CUDA IPC"},
    {"parallel", "ipc_buffer_bytes", K_INT, F(comm.ipc_buffer_bytes), 4096, 4294967296.0, NULL, S | R,
     STR(COMM_IPC_BUFFER_BYTES), NULL, NULL, "CUDA IPC all-reduce: each of a rank's two device slots (larger messages go in pieces)"},
    {"server", "socket", K_STR, F(socket), 0, 0, "--socket", S, "/tmp/tpd/tpd.sock", NULL, "PATH", "Unix socket path"},
    {"server", "socket_mode", K_MODE, F(socket_mode), 0, 0777, NULL, S, "0600", NULL, NULL, "socket file mode (octal string)"},
    {"server", "socket_group", K_STR, F(socket_group), 0, 0, NULL, S, NULL, NULL, "GROUP", "group owning the socket"},
    {"server", "allowed_uids", K_UIDS, F(allowed_uids), 0, 4294967295.0, NULL, S, NULL, NULL, NULL, "peer uids allowed (empty = any; config file only)"},
    {"server", "tcp_port", K_INT, F(tcp_port), 0, 65535, "--port", S, "0", NULL, NULL, "loopback TCP port; 0 = off"},
    {"server", "max_body_bytes", K_INT, F(max_body_bytes), 1024, 1 << 30, NULL, S, "1048576", NULL, NULL, "largest request body"},
    {"server", "grammar_cache_bytes", K_INT, F(grammar_cache_bytes), 0, 1ll << 40, NULL, S,
     "67108864", NULL, NULL,
     "memory kept by compiled grammars and their token masks; least recently used leave first"},
    {"server", "max_connections", K_INT, F(max_connections), 1, 1 << 20, NULL, S, "16384", NULL, NULL,
     "open connections; a new one past it gets a 503 at once (lowered to fit the open-file limit)"},
    {"server", "max_connections_per_uid", K_INT, F(max_connections_per_uid), 0, 1 << 20, NULL, S, "0", NULL, NULL,
     "open connections of one client uid (TCP clients: together); 0 = half of max_connections"},
    {"server", "header_timeout_s", K_INT, F(header_timeout_s), 1, 3600, NULL, S, "10", NULL, NULL,
     "a request (header and body) not complete this long after its first byte: the connection is closed"},
    {"server", "idle_timeout_s", K_INT, F(idle_timeout_s), 1, 86400, NULL, S, "60", NULL, NULL,
     "a connection with no request under way (new or kept alive) for this long is closed"},
    {"server", "http_threads", K_INT, F(http_threads), 1, 256, NULL, S, "4", NULL, NULL,
     "HTTP threads (epoll each); requests waiting for tokens hold none"},
    {"server", "send_timeout_s", K_INT, F(send_timeout_s), 1, 86400, NULL, S, "30", NULL, NULL,
     "a client that takes no bytes of its answer for this long is dropped, its generation cancelled"},
    {"server", "drain_timeout_s", K_DBL, F(drain_timeout_s), 0, 86400, NULL, S, "30", NULL, NULL, "SIGTERM: time to finish requests"},
    {"scheduler", "max_running", K_INT, F(max_running), 1, 4096, "--max-running", S, "32", NULL, NULL, "sequences per step"},
    {"scheduler", "max_queue", K_INT, F(max_queue), 1, 1 << 20, "--max-queue", S, "1024", NULL, NULL, "waiting requests"},
    {"scheduler", "step_tokens", K_INT, F(step_tokens), 1, 1 << 20, "--step-tokens", S, "512", NULL, NULL, "token budget per step"},
    {"scheduler", "max_share", K_DBL, F(max_share), 0, 1, NULL, S, "0.5", NULL, NULL,
     "while others wait, one request (its n choices) or one client uid holds at most this share of slots and KV; 1 = off"},
    {"scheduler", "micro_batches", K_INT, F(micro_batches), 0, 16, NULL, S, "0", NULL, NULL,
     "micro-batches in flight through the pipeline stages; 0 = one per stage (pp), 1 = one batch at a time"},
    {"scheduler", "logit_candidates", K_BOOL, F(logit_candidates), 0, 0, NULL, S | G, "true", NULL, NULL,
     "steps whose requests are all greedy or small-top_k (no penalties, bias or logprobs) bring back each row's 64 best logits, not the whole vocabulary"},
    {"scheduler", "sample_threads", K_INT, F(sample_threads), 0, 256, NULL, S, "0", NULL, NULL,
     "threads on rank 0 that sample a step's whole-vocabulary rows in parallel; 0 = auto (the cores, at most 8)"},
    {"scheduler", "step_time_s", K_DBL, F(step_time_s), 0, 3600, NULL, S, "0.5", NULL, NULL,
     "target step duration: long-prompt chunks shrink so decode keeps its pace; 0 = tokens only"},
    {"speculative", "method", K_STR, F(spec_method), 0, 0, NULL, S | G, "none", "none|ngram|draft", NULL,
     "speculative decoding: draft tokens by prompt lookup (ngram) or a small model (draft), verify them in one step"},
    {"speculative", "k", K_INT, F(spec_k), 1, 32, NULL, S | G, "4", NULL, NULL, "most tokens drafted per sequence per step"},
    {"speculative", "ngram_min", K_INT, F(spec_ngram_min), 1, 64, NULL, S | G, "2", NULL, NULL, "shortest n-gram the lookup matches"},
    {"speculative", "ngram_max", K_INT, F(spec_ngram_max), 1, 64, NULL, S | G, "4", NULL, NULL, "longest n-gram the lookup matches (tried first)"},
    {"speculative", "draft_model", K_STR, F(spec_draft_model), 0, 0, NULL, S | G, NULL, NULL, "PATH", "the draft model (method draft): same tokenizer as the model"},
    {"speculative", "max_batch_tokens", K_INT, F(spec_max_batch_tokens), 0, 1 << 20, NULL, S | G, "0", NULL, NULL,
     "with n sequences decoding each drafts at most this / n - 1 tokens (off once n >= this / 2); 0 = auto: 4 on the CPU, 64 on a GPU"},
    {"cache", "block_size", K_INT, F(block_size), 1, 4096, "--block-size", S | R, "16", NULL, NULL, "tokens per KV block"},
    {"cache", "kv_tokens", K_INT, F(kv_tokens), 1, 1 << 28, "--kv-tokens", S, "16384", NULL, NULL, "KV cache capacity in tokens"},
    {"cache", "require_full_context", K_BOOL, F(require_full_context), 0, 0, NULL, S, "false", NULL, NULL,
     "refuse to start when the cache cannot hold one full-context sequence (else a warning)"},
    {"cache", "prefix_caching", K_BOOL, F(prefix_caching), 0, 0, NULL, S, "true", NULL, NULL,
     "reuse the KV blocks of prompt prefixes computed before (automatic prefix caching)"},
    {"cache", "type", K_STR, F(kv_type), 0, 0, "--kv-type", S | R, "f16", "f16|f32|fp8", NULL,
     "KV cache element type; fp8: E4M3 with a scale per token and head, half F16's bytes"},
    {"grammar", "max_stacks", K_INT, F(grammar_max_stacks), 1, 16384, NULL, S, "1024", NULL, NULL,
     "structured output: parses of the output one grammar state may hold"},
    {"grammar", "max_token_work", K_INT, F(grammar_max_token_work), 1024, 1l << 40, NULL, S, "4194304", NULL, NULL,
     "structured output: work units one token's mask or advance may take"},
    {"grammar", "max_compile_ms", K_DBL, F(grammar_max_compile_ms), 1, 600000, NULL, S, "2000", NULL, NULL,
     "structured output: wall time to compile a grammar and its first mask"},
    BACKEND_DEBUG_SWITCHES(DEBUG_SWITCH)
    {"debug", "ipc_sync", K_STR, F(comm.ipc_sync), 0, 0, NULL, S | R, "auto", "auto|host|device", NULL,
     "CUDA IPC all-reduce barrier: host (MPI) or device (spinning kernel); auto = host when ranks share a GPU"},
    {"log", "level", K_STR, F(log_level), 0, 0, "--log-level", S | R, "info", "debug|info|warn|error", NULL,
     "log threshold (generate, eval: warn unless set)"},
    {"log", "all_ranks", K_BOOL, F(log_all_ranks), 0, 0, NULL, S, "false", NULL, NULL, "INFO lines from every rank"},
    {"log", "access", K_STR, F(access_log), 0, 0, "--access-log", S, "stderr", NULL, "stderr|off|FILE",
     "a line per HTTP request (serve)"},
    {"log", "stats_interval_s", K_DBL, F(stats_interval_s), 0, 86400, NULL, S, "10", NULL, NULL,
     "a stats line this often while there is traffic (0: none)"},
    {"launch", "launcher", K_STR, F(launcher), 0, 0, NULL, S, "mpirun", "mpirun|srun", NULL,
     "what tpd-launch starts the ranks with (srun inside a Slurm allocation)"},
    {"launch", "bind", K_STR, F(bind), 0, 0, NULL, S, "core", "core|socket|none", NULL, "mpirun --bind-to"},
    {"launch", "hostfile", K_STR, F(hostfile), 0, 0, NULL, S, NULL, NULL, "FILE", "mpirun --hostfile"},
    {"launch", "mpirun_args", K_STR, F(mpirun_args), 0, 0, NULL, S, NULL, NULL, "ARGS", "extra mpirun (or srun) arguments"},
    {"run", "chunk", K_INT, F(chunk), 1, 1 << 20, "--chunk", R, "512", NULL, NULL, "most prompt tokens of one sequence per step"},
    {"generate", "prompt", K_STR, F(prompt), 0, 0, "--prompt", G, NULL, NULL, "TEXT", "prompt text (encoded by the tokenizer)"},
    {"generate", "prompt_ids", K_STR, F(prompt_ids), 0, 0, "--prompt-ids", G, NULL, NULL, "1,2,3", "prompt as token ids"},
    {"generate", "chat", K_BOOL, F(chat), 0, 0, "--chat", G, "false", NULL, NULL, "render the prompt with the model's chat template"},
    {"generate", "system", K_STR, F(system), 0, 0, "--system", G, NULL, NULL, "TEXT", "system message (with --chat)"},
    {"generate", "n_predict", K_INT, F(n_predict), 0, 1 << 24, "-n|--n-predict", G, "32", NULL, NULL, "tokens to generate"},
    {"generate", "temperature", K_DBL, F(temperature), 0, 100, "--temperature|--temp", G, "0", NULL, NULL, "sampling temperature; 0 = greedy"},
    {"generate", "top_k", K_INT, F(top_k), 0, 1 << 24, "--top-k", G, "0", NULL, NULL, "keep the K likeliest tokens; 0 = all"},
    {"generate", "top_p", K_DBL, F(top_p), 0, 1, "--top-p", G, "1", NULL, NULL, "nucleus sampling mass, in (0, 1]"},
    {"generate", "seed", K_INT, F(seed), 0, BIG, "--seed", G, "0", NULL, NULL, "sampler seed"},
    {"generate", "ids", K_BOOL, F(print_ids), 0, 0, "--ids", G, "false", NULL, NULL, "print token ids instead of text"},
    {"generate", "ignore_eos", K_BOOL, F(ignore_eos), 0, 0, "--ignore-eos", G, "false", NULL, NULL, "keep going past end-of-generation tokens"},
    {"generate", "json_schema", K_STR, F(json_schema), 0, 0, "--json-schema", G, NULL, NULL, "FILE", "constrain the output to this JSON Schema"},
    {"generate", "grammar", K_STR, F(grammar), 0, 0, "--grammar", G, NULL, NULL, "FILE", "constrain the output to this GBNF grammar (start rule root)"},
    {"eval", "seqs", K_STR, F(seqs), 0, 0, "--seqs", E, NULL, NULL, "\"1,2;3,4\"", "token sequences, ';'-separated (required)"},
    {"eval", "out", K_STR, F(out), 0, 0, "--out", E, NULL, NULL, "FILE", "float32 logits of every token (required)"},
    {"eval", "separate", K_BOOL, F(separate), 0, 0, "--separate", E, "false", NULL, NULL, "run the sequences one at a time"},
    {"tokenize", "text", K_STR, F(text), 0, 0, "--text", T, NULL, NULL, "TEXT", "text to encode"},
    {"tokenize", "file", K_STR, F(file), 0, 0, "--file", T, NULL, NULL, "FILE", "file whose bytes to encode"},
    {"tokenize", "chat", K_STR, F(chat_file), 0, 0, "--chat", T, NULL, NULL, "MESSAGES.json", "render the chat template over these messages, then encode"},
    {"tokenize", "add_generation_prompt", K_BOOL, F(add_generation_prompt), 0, 0, "--add-generation-prompt", T, "false", NULL, NULL, "with --chat: end with the assistant's turn opening"},
    {"tokenize", "print_prompt", K_BOOL, F(print_prompt), 0, 0, "--print-prompt", T, "false", NULL, NULL, "with --chat: print the rendered prompt, not ids"},
    {"tokenize", "no_special", K_BOOL, F(no_special), 0, 0, "--no-special", T, "false", NULL, NULL, "do not add BOS/EOS as the tokenizer would"},
    {"tokenize", "no_parse_special", K_BOOL, F(no_parse_special), 0, 0, "--no-parse-special", T, "false", NULL, NULL, "special tokens in the text are plain text"},
    {"tokenize", "batch", K_STR, F(batch), 0, 0, "--batch", T, NULL, NULL, "FILE", "tests: hex texts, one a line -> JSON lines"},
    {"tokenize", "render_batch", K_STR, F(render_batch), 0, 0, "--render-batch", T, NULL, NULL, "FILE", "tests: JSON lines {template, context} -> rendered (no tokenizer)"},
    {"config", "get", K_STR, F(get), 0, 0, "--get", CMD_CONFIG, NULL, NULL, "SECTION.KEY", "print this key's value only"},
};
#define N_KEYS (sizeof keys / sizeof *keys)

static const struct {
    const char *name;
    unsigned bit;
} command_names[] = {
    {"serve", CMD_SERVE}, {"config", CMD_CONFIG}, {"generate", CMD_GENERATE}, {"eval", CMD_EVAL}, {"tokenize", CMD_TOKENIZE},
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

static char **str_at(struct config *c, const struct config_key *k) { return (char **)((char *)c + k->off); }

static void set_str(struct config *c, const struct config_key *k, const char *v) {
    char **p = str_at(c, k);
    free(*p);
    *p = v ? xstrdup(v) : NULL;
}

/* Integer limits as longs: the seed's upper limit is LONG_MAX, which a double rounds up. */
static long lim_long(double d) { return d >= BIG ? LONG_MAX : (long)d; }

static int apply_text(struct config *c, const struct config_key *k, const char *flag, const char *v, char *err);

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
        if (keys[i].section && !strcmp(keys[i].section, section) && strlen(keys[i].key) == key_len &&
            !memcmp(keys[i].key, key, key_len))
            return &keys[i];
    return NULL;
}

/* Range check shared by file and flags. where: "tpd.toml:12: " or "--threads: ". */
static int check_range(const struct config_key *k, double v, const char *where, char *err) {
    if (!isfinite(v))
        return err_set(err, "%s%s.%s = %g is not a finite number", where, k->section, k->key, v);
    if (v < k->lo || v > k->hi)
        return err_set(err, "%s%s.%s = %g is out of range [%g, %g]", where, k->section, k->key, v, k->lo, k->hi);
    return 0;
}

static int parse_mode(const char *s, long *out) {
    char *end;
    long v = strtol(s, &end, 8);
    if (!*s || *end || v < 0 || v > 0777) return -1;
    *out = v;
    return 0;
}

static int apply_node(struct config *c, const struct config_key *k, const struct toml_node *n, const char *file, char *err) {
    char where[600];
    snprintf(where, sizeof where, "%s:%d: ", file, toml_line(n));
    char terr[ERR_LEN];
    switch (k->kind) {
    case K_STR: {
        const char *s;
        size_t len;
        if (toml_string(n, &s, &len, terr) || strlen(s) != len)
            return err_set(err, "%s%s.%s must be a string without NUL bytes", where, k->section, k->key);
        set_str(c, k, s);
        return 0;
    }
    case K_INT: {
        int64_t v;
        if (toml_int(n, &v, terr)) return err_set(err, "%s%s.%s must be an integer", where, k->section, k->key);
        if (check_range(k, (double)v, where, err)) return -1;
        *(long *)((char *)c + k->off) = (long)v;
        return 0;
    }
    case K_DBL: {
        double v;
        if (toml_double(n, &v, terr)) return err_set(err, "%s%s.%s must be a number", where, k->section, k->key);
        if (check_range(k, v, where, err)) return -1;
        *(double *)((char *)c + k->off) = v;
        return 0;
    }
    case K_BOOL: {
        bool v;
        if (toml_bool(n, &v, terr)) return err_set(err, "%s%s.%s must be true or false", where, k->section, k->key);
        *(int *)((char *)c + k->off) = v;
        return 0;
    }
    case K_MODE: {
        const char *s;
        long v;
        if (toml_string(n, &s, NULL, terr) || parse_mode(s, &v))
            return err_set(err, "%s%s.%s must be an octal mode string such as \"0660\"", where, k->section, k->key);
        *(long *)((char *)c + k->off) = v;
        return 0;
    }
    case K_UIDS: {
        if (toml_type(n) != TOML_ARRAY || toml_len(n) > CONFIG_MAX_UIDS)
            return err_set(err, "%s%s.%s must be an array of at most %d uids", where, k->section, k->key,
                           CONFIG_MAX_UIDS);
        c->n_allowed_uids = 0;
        for (size_t i = 0; i < toml_len(n); i++) {
            int64_t v;
            if (toml_int(toml_item(n, i), &v, terr) || check_range(k, (double)v, where, err))
                return err_set(err, "%s%s.%s[%zu] must be a uid (0..4294967295)", where, k->section, k->key, i);
            c->allowed_uids[c->n_allowed_uids++] = (long)v;
        }
        return 0;
    }
    }
    return -1;
}

int config_apply_toml(struct config *c, const char *text, size_t len, const char *filename, char *err) {
    struct toml_node *root;
    if (toml_parse(text, len, filename, &root, err)) return -1;
    int rc = 0;
    for (size_t i = 0; i < toml_len(root) && !rc; i++) {
        size_t slen;
        const char *sec = toml_key(root, i, &slen);
        struct toml_node *tab = toml_value(root, i);
        if (toml_type(tab) != TOML_TABLE) {
            rc = err_set(err, "%s:%d: '%.*s' must be a section such as [server]", filename, toml_line(tab), (int)slen, sec);
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
                for (size_t q = 0; q < N_KEYS; q++) known_section |= keys[q].section && !strcmp(keys[q].section, secname);
                rc = known_section ? err_set(err, "%s:%d: unknown key '%.*s' in [%s]", filename, toml_line(v), (int)klen, key, secname)
                                   : err_set(err, "%s:%d: unknown section [%s]", filename, toml_line(tab), secname);
            } else {
                rc = apply_node(c, k, v, filename, err);
            }
        }
    }
    toml_free(root);
    return rc;
}

/* Flag or default text. flag: the flag as given, for messages. */
static int apply_text(struct config *c, const struct config_key *k, const char *flag, const char *v, char *err) {
    char where[200];
    if (k->section) snprintf(where, sizeof where, "%s (%s.%s): ", flag, k->section, k->key);
    else snprintf(where, sizeof where, "%s: ", flag);
    long l;
    float f;
    switch (k->kind) {
    case K_STR:
        set_str(c, k, v);
        return 0;
    case K_INT:
        if (parse_long(v, lim_long(k->lo), lim_long(k->hi), &l))
            return err_set(err, "%s'%s' is not an integer in [%.0f, %.0f]", where, v, k->lo, k->hi);
        *(long *)((char *)c + k->off) = l;
        return 0;
    case K_DBL:
        if (parse_float(v, k->lo, k->hi, &f)) return err_set(err, "%s'%s' is not a number in [%g, %g]", where, v, k->lo, k->hi);
        *(double *)((char *)c + k->off) = f;
        return 0;
    case K_BOOL:
        if (strcmp(v, "true") && strcmp(v, "false")) return err_set(err, "%s'%s' is not true or false", where, v);
        *(int *)((char *)c + k->off) = !strcmp(v, "true");
        return 0;
    case K_MODE:
        if (parse_mode(v, (long *)((char *)c + k->off))) return err_set(err, "%s'%s' is not an octal mode", where, v);
        return 0;
    case K_UIDS:
        return err_set(err, "%sset %s.%s in the config file", where, k->section, k->key);
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
            if (find_flag(~0u, a, &sw)) return err_set(err, "option %s does not apply to `tpd %s`", a, command_name(cmd));
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
        return err_set(err, "speculative.ngram_min (%ld) must not exceed speculative.ngram_max (%ld)", c->spec_ngram_min,
                       c->spec_ngram_max);
    if (cmd & (CMD_SERVE | CMD_CONFIG)) {
        if (!c->model_path && !c->synthetic)
            return err_set(err, "no model: set [model] path in the config or pass --model PATH (or --synthetic GEOMETRY)");
        if ((cmd & CMD_SERVE) && !c->model_path && !c->tokenizer)
            return err_set(err, "model.synthetic has no tokenizer: serve needs model.tokenizer (--tokenizer PATH)");
        if (!c->socket || !c->socket[0]) return err_set(err, "server.socket must not be empty");
        if (c->step_tokens < c->max_running)
            return err_set(err, "scheduler.step_tokens (%ld) must be at least scheduler.max_running (%ld): every running "
                           "sequence needs room for its decode token", c->step_tokens, c->max_running);
        if (c->kv_tokens < c->block_size) return err_set(err, "cache.kv_tokens must hold at least one block");
    }
    if ((cmd & (CMD_GENERATE | CMD_EVAL)) && !c->model_path && !c->synthetic)
        return err_set(err, "--model PATH (or --synthetic GEOMETRY) is required");
    return 0;
}

int config_validate(const struct config *c, char *err) { return config_validate_for(c, CMD_SERVE, err); }

static void usage_row(FILE *f, const struct config_key *k, unsigned cmd) {
    char names[160] = "", val[80] = "";
    size_t at = 0;
    for (const char *p = k->flags; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        at += (size_t)snprintf(names + at, sizeof names - at, "%s%.*s", at ? ", " : "", (int)len, p);
        p = bar ? bar + 1 : NULL;
    }
    int sw = k->kind == K_BOOL && k->flags;
    if (k->section && at < sizeof names)
        at += (size_t)snprintf(names + at, sizeof names - at, "%s--%s.%s%s", at ? ", " : "", k->section, k->key,
                               sw ? " true|false" : "");
    if (k->meta) snprintf(val, sizeof val, " %s", k->meta);
    else if (k->choices) snprintf(val, sizeof val, " %s", k->choices);
    else if (k->kind == K_INT) snprintf(val, sizeof val, " N");
    else if (k->kind == K_DBL) snprintf(val, sizeof val, " X");
    else if (k->kind == K_MODE) snprintf(val, sizeof val, " MODE");
    else if (k->kind == K_BOOL && !sw) snprintf(val, sizeof val, " true|false");
    char left[260];
    /* the value goes after the first spelling: "--threads N, --parallel.threads" */
    const char *comma = strstr(names, ", ");
    if (comma && !sw) snprintf(left, sizeof left, "%.*s%s%s", (int)(comma - names), names, val, comma);
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
        for (int i = 0; i < c->n_allowed_uids; i++) sbuf_addf(out, "%s%ld", i ? ", " : "", c->allowed_uids[i]);
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
