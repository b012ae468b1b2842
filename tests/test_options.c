// link: tpd_daemon
/* The one options table, walked row by row: every key of every command is accepted in
 * TOML (commands taking --config FILE) and as each of its flags with a valid value, a bad
 * value is refused naming the key, flags are unambiguous per command, usage lists every
 * flag, and the spellings scripts use still fill struct run_opts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "daemon/config.h"
#include "daemon/options.h"
#include "util/err.h"

static const unsigned all_cmds[] = {CMD_SERVE, CMD_CONFIG, CMD_GENERATE, CMD_EVAL, CMD_TOKENIZE};
#define N_CMDS (sizeof all_cmds / sizeof *all_cmds)

/* A valid value as flag text and as TOML, and what config_get then says. */
static void sample(const struct config_key *k, char *flag, char *toml, char *got, size_t n) {
    switch (k->kind) {
    case K_STR: {
        const char *v = "sample/value";
        size_t len = strlen(v);
        if (k->choices) { /* the last choice: not the default of any row */
            v = strrchr(k->choices, '|') + 1;
            len = strlen(v);
        }
        snprintf(flag, n, "%.*s", (int)len, v);
        snprintf(toml, n, "\"%.*s\"", (int)len, v);
        snprintf(got, n, "%.*s", (int)len, v);
        break;
    }
    case K_INT:
        snprintf(flag, n, "%.0f", k->lo + 1);
        snprintf(toml, n, "%.0f", k->lo + 1);
        snprintf(got, n, "%.0f", k->lo + 1);
        break;
    case K_DBL:
        snprintf(flag, n, "%g", (k->lo + k->hi) / 2);
        snprintf(toml, n, "%g", (k->lo + k->hi) / 2);
        if (!strchr(toml, '.') && !strchr(toml, 'e')) strcat(toml, ".0"); /* a TOML float */
        snprintf(got, n, "%g", (k->lo + k->hi) / 2);
        break;
    case K_BOOL:
        snprintf(flag, n, "true");
        snprintf(toml, n, "true");
        snprintf(got, n, "true");
        break;
    case K_MODE:
        snprintf(flag, n, "0640");
        snprintf(toml, n, "\"0640\"");
        snprintf(got, n, "0640");
        break;
    case K_UIDS:
        snprintf(flag, n, "7");
        snprintf(toml, n, "[7, 8]");
        snprintf(got, n, "[7, 8]");
        break;
    }
}

/* A value the row refuses as a flag (NULL: any text is valid), and one it refuses in TOML. */
static const char *bad_flag(const struct config_key *k, char *buf, size_t n) {
    switch (k->kind) {
    case K_STR: return k->choices ? "bogus" : NULL;
    case K_INT: snprintf(buf, n, "%.0f", k->hi + 1); return buf;
    case K_DBL: snprintf(buf, n, "%g", k->hi * 2 + 1); return buf;
    case K_BOOL: return "maybe";
    case K_MODE: return "0999";
    case K_UIDS: return "7";
    }
    return NULL;
}

static const char *bad_toml(const struct config_key *k) {
    switch (k->kind) {
    case K_STR: return k->choices ? "\"bogus\"" : "1";
    case K_INT:
    case K_DBL:
    case K_BOOL: return "\"x\"";
    case K_MODE: return "\"0999\"";
    case K_UIDS: return "[\"x\"]";
    }
    return NULL;
}

/* The key's name as messages give it: "section.key", or the flag of a flag-only row. */
static void key_name(const struct config_key *k, char *buf, size_t n) {
    if (k->section) snprintf(buf, n, "%s.%s", k->section, k->key);
    else snprintf(buf, n, "%s", k->flags);
}

/* Every spelling of a row's flags: its short flags, then --section.key. */
static int spellings(const struct config_key *k, char out[][80], int max) {
    int n = 0;
    for (const char *p = k->flags; p && *p && n < max;) {
        const char *bar = strchr(p, '|');
        int len = bar ? (int)(bar - p) : (int)strlen(p);
        snprintf(out[n++], 80, "%.*s", len, p);
        p = bar ? bar + 1 : NULL;
    }
    if (k->section && n < max) snprintf(out[n++], 80, "--%s.%s", k->section, k->key);
    return n;
}

/* Does a row of command cmd other than k take spelling a? (--chat: generate's switch,
 * tokenize's file) */
static int other_row_takes(const struct config_key *keys, size_t n, const struct config_key *k,
                           unsigned cmd, const char *a) {
    for (size_t i = 0; i < n; i++) {
        if (&keys[i] == k || !(keys[i].cmds & cmd)) continue;
        char sp[8][80];
        int ns = spellings(&keys[i], sp, 8);
        for (int s = 0; s < ns; s++)
            if (!strcmp(sp[s], a)) return 1;
    }
    return 0;
}

static void check_value(const struct config *c, const struct config_key *k, const char *want,
                        const char *how) {
    if (!k->section) return; /* flag-only rows have no key to read back */
    char name[160];
    key_name(k, name, sizeof name);
    char *v = config_get(c, name);
    if (!v || strcmp(v, want))
        fail_msg("%s: %s is '%s', expected '%s'", how, name, v ? v : "(null)", want);
    free(v);
}

static void test_every_key_in_toml(void **state) {
    (void)state;
    size_t n;
    const struct config_key *keys = config_keys(&n);
    int checked = 0;
    for (size_t i = 0; i < n; i++) {
        const struct config_key *k = &keys[i];
        if (!k->section || !(k->cmds & CMD_FILE)) continue;
        char flag[200], toml[200], got[200], text[600], err[ERR_LEN] = "", name[160];
        sample(k, flag, toml, got, sizeof flag);
        key_name(k, name, sizeof name);
        struct config c;
        config_defaults(&c);
        snprintf(text, sizeof text, "[%s]\n%s = %s\n", k->section, k->key, toml);
        if (config_apply_toml(&c, text, strlen(text), "t.toml", err) ||
            config_validate_for(&c, 0, err))
            fail_msg("%s refused in TOML: %s", name, err);
        check_value(&c, k, got, "TOML");
        config_free(&c);

        config_defaults(&c);
        snprintf(text, sizeof text, "[%s]\n%s = %s\n", k->section, k->key, bad_toml(k));
        err[0] = 0;
        int rc = config_apply_toml(&c, text, strlen(text), "t.toml", err);
        if (!rc) rc = config_validate_for(&c, 0, err);
        if (rc != -1 || !strstr(err, name) || (!k->choices && !strstr(err, "t.toml:2: ")))
            fail_msg("bad TOML value for %s: rc %d, '%s'", name, rc, err);
        config_free(&c);
        checked++;
    }
    assert_true(checked >= 30);
}

static void test_every_flag_of_every_command(void **state) {
    (void)state;
    size_t n;
    const struct config_key *keys = config_keys(&n);
    int checked = 0;
    for (size_t i = 0; i < n; i++) {
        const struct config_key *k = &keys[i];
        char names[8][80], name[160];
        int ns = spellings(k, names, 8);
        key_name(k, name, sizeof name);
        assert_true(ns >= 1);
        assert_true(k->cmds != 0);
        for (size_t ci = 0; ci < N_CMDS; ci++) {
            unsigned cmd = all_cmds[ci];
            for (int si = 0; si < ns; si++) {
                char flag[200], toml[200], got[200], bad[200], err[ERR_LEN] = "";
                sample(k, flag, toml, got, sizeof flag);
                int is_long = k->section && si == ns - 1; /* --section.key always takes a value */
                int sw = k->kind == K_BOOL && !is_long;
                char *argv[] = {names[si], flag};
                int argc = sw ? 1 : 2;
                struct config c;
                config_defaults(&c);
                int rc = config_parse_args(&c, cmd, argc, argv, err);
                if (!(k->cmds & cmd) && other_row_takes(keys, n, k, cmd, names[si])) {
                    config_free(&c);
                    continue;
                }
                if (!(k->cmds & cmd)) { /* another command's flag: refused by name */
                    if (rc != -1 || !strstr(err, names[si]))
                        fail_msg("%s taken by command %u: '%s'", names[si], cmd, err);
                    config_free(&c);
                    continue;
                }
                if (k->kind == K_UIDS) { /* a list: the config file only, and the message says so */
                    if (rc != -1 || !strstr(err, name))
                        fail_msg("%s as a flag: rc %d '%s'", names[si], rc, err);
                    config_free(&c);
                    continue;
                }
                if (rc || config_validate_for(&c, 0, err))
                    fail_msg("%s %s refused: %s", names[si], flag, err);
                check_value(&c, k, got, names[si]);
                config_free(&c);
                checked++;

                const char *b = sw ? NULL : bad_flag(k, bad, sizeof bad);
                if (!b) continue;
                char *bargv[] = {names[si], (char *)b};
                config_defaults(&c);
                err[0] = 0;
                rc = config_parse_args(&c, cmd, 2, bargv, err);
                if (!rc) rc = config_validate_for(&c, 0, err);
                if (rc != -1 || !strstr(err, name))
                    fail_msg("%s %s: rc %d, '%s' lacks %s", names[si], b, rc, err, name);
                config_free(&c);
                /* and a missing value */
                if (!sw) {
                    config_defaults(&c);
                    assert_int_equal(config_parse_args(&c, cmd, 1, argv, err), -1);
                    assert_non_null(strstr(err, names[si]));
                    config_free(&c);
                }
            }
        }
    }
    assert_true(checked >= 100);
}

/* One spelling names one row for each command. */
static void test_flags_unambiguous(void **state) {
    (void)state;
    size_t n;
    const struct config_key *keys = config_keys(&n);
    for (size_t i = 0; i < n; i++) {
        char a[8][80];
        int na = spellings(&keys[i], a, 8);
        for (size_t j = i + 1; j < n; j++) {
            if (!(keys[i].cmds & keys[j].cmds)) continue;
            char b[8][80];
            int nb = spellings(&keys[j], b, 8);
            for (int x = 0; x < na; x++)
                for (int y = 0; y < nb; y++)
                    if (!strcmp(a[x], b[y])) fail_msg("%s names two rows of one command", a[x]);
        }
        if (keys[i].section) { /* and TOML keys are unique */
            for (size_t j = i + 1; j < n; j++)
                if (keys[j].section && !strcmp(keys[i].section, keys[j].section) &&
                    !strcmp(keys[i].key, keys[j].key))
                    fail_msg("[%s] %s twice", keys[i].section, keys[i].key);
        }
    }
}

/* Usage, generated from the table, lists every spelling of every flag of the command. */
static void test_usage_lists_every_flag(void **state) {
    (void)state;
    size_t n;
    const struct config_key *keys = config_keys(&n);
    static const char *names[] = {"serve", "config", "generate", "eval", "tokenize"};
    for (size_t ci = 0; ci < N_CMDS; ci++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_int_equal(options_usage(f, names[ci]), 0);
        fclose(f);
        assert_int_equal(config_command(names[ci]), all_cmds[ci]);
        for (size_t i = 0; i < n; i++) {
            if (!(keys[i].cmds & all_cmds[ci])) continue;
            char sp[8][80];
            int ns = spellings(&keys[i], sp, 8);
            for (int s = 0; s < ns; s++)
                if (!strstr(buf, sp[s])) fail_msg("`tpd help %s` lacks %s", names[ci], sp[s]);
        }
        free(buf);
    }
    FILE *f = fopen("/dev/null", "w");
    assert_int_equal(options_usage(f, NULL), 0);
    assert_int_equal(options_usage(f, "nonsense"), -1);
    fclose(f);
}

/* serve's engine and scheduler options come from its keys; generate's leave the cache size
 * and the step timeout to the command (it sizes the cache to what it runs). */
static void test_engine_and_sched_opts(void **state) {
    (void)state;
    struct config cfg;
    char err[ERR_LEN] = "";
    char *a[] = {"--model",
                 "m.gguf",
                 "--kv-tokens",
                 "4096",
                 "--block-size",
                 "32",
                 "--max-running",
                 "8",
                 "--parallel.step_timeout_s",
                 "7",
                 "--scheduler.sample_threads",
                 "3",
                 "--pp",
                 "2"};
    config_defaults(&cfg);
    if (config_apply_args(&cfg, (int)(sizeof a / sizeof *a), a, err)) fail_msg("%s", err);
    struct engine_opts eo;
    options_engine(&cfg, CMD_SERVE, DT_F16, &eo);
    assert_string_equal(eo.model_path, "m.gguf");
    assert_int_equal(eo.n_blocks, 4096 / 32);
    assert_int_equal(eo.block_size, 32);
    assert_int_equal(eo.pp, 2);
    assert_true(eo.step_timeout_s == 7 && eo.debug == &cfg.debug);
    options_engine(&cfg, CMD_GENERATE, DT_F32, &eo);
    assert_int_equal(eo.n_blocks, 0);
    assert_true(eo.step_timeout_s == 0 && eo.kv_type == DT_F32);
    struct engine_info info = {.gpu = 0};
    struct sched_opts so;
    options_sched(&cfg, CMD_SERVE, NULL, &info, &so);
    assert_int_equal(so.max_running, 8);
    assert_int_equal(so.sample_threads, 3);
    assert_true(so.step_timeout_s == 7 && so.prefix_caching == 1 && so.eog_ids == NULL);
    options_sched(&cfg, CMD_GENERATE, NULL, &info, &so);
    assert_int_equal(so.max_running, 1);
    assert_int_equal(so.step_tokens, 512);
    assert_true(so.step_timeout_s == 0);
    config_free(&cfg);
}

/* The flags of tests/, bench/ and tpd_cli.py, and the keys serve and generate now share. */
static void test_run_opts_spellings(void **state) {
    (void)state;
    struct run_opts o;
    char err[ERR_LEN] = "";
    char *g[] = {"generate",  "--synthetic", "llama3-8b",    "--prompt",
                 "hi",        "--chat",      "--system",     "sys",
                 "-n",        "5",           "--temp",       "0.5",
                 "--top-k",   "3",           "--top-p",      "0.9",
                 "--seed",    "7",           "--ids",        "--ignore-eos",
                 "--kv-type", "f32",         "--block-size", "32",
                 "--ctx",     "100",         "--chunk",      "8",
                 "--comm",    "mpi",         "--threads",    "2",
                 "--backend", "cpu",         "--tokenizer",  "tok.json"};
    if (run_opts_parse(NULL, (int)(sizeof g / sizeof *g), g, &o, err)) fail_msg("%s", err);
    assert_string_equal(o.eng.model_path, "llama3-8b");
    assert_string_equal(o.eng.synthetic, "llama3-8b");
    assert_string_equal(o.cfg.prompt, "hi");
    assert_string_equal(o.cfg.system, "sys");
    assert_string_equal(o.cfg.tokenizer, "tok.json");
    assert_true(o.cfg.chat && o.cfg.print_ids && o.cfg.ignore_eos);
    assert_int_equal(o.cfg.n_predict, 5);
    assert_true((float)o.cfg.temperature == 0.5f && (float)o.cfg.top_p == 0.9f);
    assert_int_equal(o.cfg.top_k, 3);
    assert_int_equal(o.cfg.seed, 7);
    assert_int_equal(o.eng.kv_type, DT_F32);
    assert_int_equal(o.eng.block_size, 32);
    assert_int_equal(o.eng.max_ctx, 100);
    assert_int_equal(o.cfg.chunk, 8);
    assert_int_equal(o.eng.threads, 2);
    assert_string_equal(o.eng.comm.mode, "mpi");
    assert_string_equal(o.eng.backend, "cpu");
    assert_null(o.cfg.prompt_ids);
    run_opts_free(&o);

    char *e[] = {"eval",  "--model", "m.gguf",     "--seqs",      "1,2;3",
                 "--out", "o.f32",   "--separate", "--n-predict", "4"};
    assert_int_equal(run_opts_parse(NULL, 10, e, &o, err), -1); /* -n is generate's */
    assert_non_null(strstr(err, "--n-predict"));
    assert_int_equal(run_opts_parse(NULL, 8, e, &o, err), 0);
    assert_string_equal(o.eng.model_path, "m.gguf");
    assert_string_equal(o.eng.comm.mode, "auto");
    assert_true(o.eng.comm.timeout_s == COMM_TIMEOUT_S &&
                o.eng.comm.start_timeout_s == COMM_START_TIMEOUT_S);
    assert_int_equal(o.eng.comm.ipc_small_bytes, COMM_IPC_SMALL_BYTES);
    assert_int_equal(o.eng.comm.ipc_buffer_bytes, COMM_IPC_BUFFER_BYTES);
    /* the proven CUDA paths on, the debugging aids off (kernels/backend.h's defaults) */
    assert_int_equal(o.eng.debug->attn_decode + o.eng.debug->cuda_graphs + o.eng.debug->top_cands,
                     3);
    assert_int_equal(o.eng.debug->attn_tiles + o.eng.debug->mmv_tile, 2);
    assert_int_equal(o.eng.debug->profile_ops + o.eng.debug->cuda_sync + o.eng.debug->attn_exact,
                     0);
    assert_string_equal(o.cfg.log_level, "warn"); /* one-shot commands are quiet unless asked */
    assert_string_equal(o.eng.backend, "auto");
    assert_int_equal(o.eng.kv_type, DT_F16);
    assert_int_equal(o.eng.block_size, 16);
    assert_int_equal(o.cfg.chunk, 512);
    assert_string_equal(o.cfg.seqs, "1,2;3");
    assert_string_equal(o.cfg.out, "o.f32");
    assert_true(o.cfg.separate);
    run_opts_free(&o);

    /* the [debug] switches and the communicator's keys reach the engine's options */
    char *d[] = {"eval",   "--model",
                 "m.gguf", "--seqs",
                 "1",      "--out",
                 "o.f32",  "--debug.attn_decode",
                 "false",  "--parallel.comm_timeout_s",
                 "42",     "--debug.ipc_sync",
                 "host",   "--log-level",
                 "info"};
    if (run_opts_parse(NULL, 15, d, &o, err)) fail_msg("%s", err);
    assert_true(!o.eng.debug->attn_decode && o.eng.debug->attn_tiles);
    assert_true(o.eng.comm.timeout_s == 42);
    assert_string_equal(o.eng.comm.ipc_sync, "host");
    assert_string_equal(o.cfg.log_level, "info");
    run_opts_free(&o);
    char *bad[] = {"eval",  "--model", "m.gguf",           "--seqs", "1",
                   "--out", "o.f32",   "--debug.ipc_sync", "gpu"};
    assert_int_equal(run_opts_parse(NULL, 9, bad, &o, err), -1);
    assert_non_null(strstr(err, "debug.ipc_sync"));

    char *none[] = {"generate", "--prompt-ids", "1,2"};
    assert_int_equal(run_opts_parse(NULL, 3, none, &o, err), -1);
    assert_non_null(strstr(err, "--model"));

    /* serve takes what generate takes, under the same names */
    struct config c;
    char *s[] = {"serve",     "--model",      "m",  "--comm",    "nccl", "--kv-type",
                 "f32",       "--block-size", "32", "--ctx",     "64",   "--synthetic",
                 "llama3-8b", "--threads",    "1",  "--backend", "cpu",  "--tokenizer",
                 "t.json"};
    if (options_load(NULL, CMD_SERVE, 19, s, &c, err)) fail_msg("%s", err);
    assert_string_equal(c.comm.mode, "nccl");
    assert_string_equal(c.log_level, "info");
    assert_int_equal(c.block_size, 32);
    assert_int_equal(c.max_ctx, 64);
    assert_string_equal(c.synthetic, "llama3-8b");
    config_free(&c);
    char *syn[] = {"serve", "--synthetic", "llama3-8b"}; /* no file: no tokenizer either */
    assert_int_equal(options_load(NULL, CMD_SERVE, 3, syn, &c, err), -1);
    assert_non_null(strstr(err, "model.tokenizer"));
    config_free(&c);
}

/* -h / --help as an option, not as the value of one. */
static void test_wants_help(void **state) {
    (void)state;
    char *a[] = {"generate", "--model", "m", "--help"};
    assert_true(options_wants_help(4, a));
    char *b[] = {"generate", "--prompt", "--help"};
    assert_false(options_wants_help(3, b));
    char *c[] = {"tokenize", "--no-special", "-h"};
    assert_true(options_wants_help(3, c));
    char *d[] = {"serve", "--model", "-h"};
    assert_false(options_wants_help(3, d));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_key_in_toml),
        cmocka_unit_test(test_every_flag_of_every_command),
        cmocka_unit_test(test_flags_unambiguous),
        cmocka_unit_test(test_usage_lists_every_flag),
        cmocka_unit_test(test_run_opts_spellings),
        cmocka_unit_test(test_engine_and_sched_opts),
        cmocka_unit_test(test_wants_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
