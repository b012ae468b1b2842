#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/parse.h"
#include "../util/sbuf.h"
#include "../util/toml.h"

enum ckind { K_STR, K_INT, K_DBL, K_BOOL, K_MODE, K_UIDS };

struct ckey {
    const char *section, *key;
    enum ckind kind;
    size_t off;
    double lo, hi;         /* limits for numbers */
    const char *flag;      /* short command-line flag, or NULL */
    const char *help;
};

#define F(field) offsetof(struct config, field)
/* One row per key: parsing, limits, flags and the dump all come from this table. */
static const struct ckey keys[] = {
    {"model", "path", K_STR, F(model_path), 0, 0, "--model", "GGUF file or HF directory"},
    {"model", "name", K_STR, F(model_name), 0, 0, "--model-name", "model id served by the API"},
    {"model", "tokenizer", K_STR, F(tokenizer), 0, 0, "--tokenizer", "tokenizer.json, its directory, or GGUF"},
    {"model", "max_ctx", K_INT, F(max_ctx), 0, 1 << 24, "--ctx", "longest sequence; 0 = trained context"},
    {"parallel", "tp", K_INT, F(tp), 0, 4096, NULL, "ranks; 0 = as started by mpirun"},
    {"parallel", "threads", K_INT, F(threads), 0, 1024, "--threads", "compute threads per rank; 0 = auto"},
    {"parallel", "backend", K_STR, F(backend), 0, 0, "--backend", "cpu"},
    {"server", "socket", K_STR, F(socket), 0, 0, "--socket", "Unix socket path"},
    {"server", "socket_mode", K_MODE, F(socket_mode), 0, 0777, NULL, "socket file mode (octal string)"},
    {"server", "socket_group", K_STR, F(socket_group), 0, 0, NULL, "group owning the socket"},
    {"server", "allowed_uids", K_UIDS, 0, 0, 4294967295.0, NULL, "peer uids allowed (empty = any)"},
    {"server", "tcp_port", K_INT, F(tcp_port), 0, 65535, "--port", "loopback TCP port; 0 = off"},
    {"server", "max_body_bytes", K_INT, F(max_body_bytes), 1024, 1 << 30, NULL, "largest request body"},
    {"server", "max_connections", K_INT, F(max_connections), 1, 65536, NULL, "concurrent connections"},
    {"server", "drain_timeout_s", K_DBL, F(drain_timeout_s), 0, 86400, NULL, "SIGTERM: time to finish requests"},
    {"scheduler", "max_running", K_INT, F(max_running), 1, 4096, "--max-running", "sequences per step"},
    {"scheduler", "max_queue", K_INT, F(max_queue), 1, 1 << 20, "--max-queue", "waiting requests"},
    {"scheduler", "step_tokens", K_INT, F(step_tokens), 1, 1 << 20, "--step-tokens", "token budget per step"},
    {"cache", "block_size", K_INT, F(block_size), 1, 4096, "--block-size", "tokens per KV block"},
    {"cache", "kv_tokens", K_INT, F(kv_tokens), 1, 1 << 28, "--kv-tokens", "KV cache capacity in tokens"},
    {"cache", "type", K_STR, F(kv_type), 0, 0, "--kv-type", "f16 or f32"},
    {"log", "level", K_STR, F(log_level), 0, 0, "--log-level", "debug, info, warn, error"},
    {"log", "all_ranks", K_BOOL, F(log_all_ranks), 0, 0, NULL, "INFO lines from every rank"},
    {"launch", "bind", K_STR, F(bind), 0, 0, NULL, "mpirun --bind-to: core, socket, none"},
    {"launch", "hostfile", K_STR, F(hostfile), 0, 0, NULL, "mpirun --hostfile"},
    {"launch", "mpirun_args", K_STR, F(mpirun_args), 0, 0, NULL, "extra mpirun arguments"},
};
#define N_KEYS (sizeof keys / sizeof *keys)

static char **str_at(struct config *c, const struct ckey *k) { return (char **)((char *)c + k->off); }

static void set_str(struct config *c, const struct ckey *k, const char *v) {
    char **p = str_at(c, k);
    free(*p);
    *p = v ? xstrdup(v) : NULL;
}

void config_defaults(struct config *c) {
    memset(c, 0, sizeof *c);
    c->backend = xstrdup("cpu");
    c->socket = xstrdup("/tmp/tpd/tpd.sock");
    c->socket_mode = 0600;
    c->max_body_bytes = 1 << 20;
    c->max_connections = 512;
    c->drain_timeout_s = 30;
    c->max_running = 32;
    c->max_queue = 1024;
    c->step_tokens = 512;
    c->block_size = 16;
    c->kv_tokens = 16384;
    c->kv_type = xstrdup("f16");
    c->log_level = xstrdup("info");
    c->bind = xstrdup("core");
}

void config_free(struct config *c) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].kind == K_STR) set_str(c, &keys[i], NULL);
}

static const struct ckey *find_key(const char *section, const char *key, size_t key_len) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(keys[i].section, section) && strlen(keys[i].key) == key_len && !memcmp(keys[i].key, key, key_len))
            return &keys[i];
    return NULL;
}

/* Range check shared by file and flags. where: "tpd.toml:12: " or "--threads: ". */
static int check_range(const struct ckey *k, double v, const char *where, char *err) {
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

static int apply_node(struct config *c, const struct ckey *k, const struct toml_node *n, const char *file, char *err) {
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
        c->socket_mode = v;
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
            const struct ckey *k = find_key(secname, key, klen);
            struct toml_node *v = toml_value(tab, j);
            if (!k) {
                int known_section = 0;
                for (size_t q = 0; q < N_KEYS; q++) known_section |= !strcmp(keys[q].section, secname);
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

static int apply_flag(struct config *c, const struct ckey *k, const char *flag, const char *v, char *err) {
    char where[128];
    snprintf(where, sizeof where, "%s: ", flag);
    long l;
    float f;
    switch (k->kind) {
    case K_STR:
        set_str(c, k, v);
        return 0;
    case K_INT:
        if (parse_long(v, (long)k->lo, (long)k->hi, &l))
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
        if (parse_mode(v, &c->socket_mode)) return err_set(err, "%s'%s' is not an octal mode", where, v);
        return 0;
    case K_UIDS:
        return err_set(err, "%sset allowed_uids in the config file", where);
    }
    return -1;
}

int config_apply_args(struct config *c, int argc, char **argv, char *err) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const struct ckey *k = NULL;
        for (size_t j = 0; j < N_KEYS && !k; j++) {
            char longname[80];
            snprintf(longname, sizeof longname, "--%s.%s", keys[j].section, keys[j].key);
            if ((keys[j].flag && !strcmp(a, keys[j].flag)) || !strcmp(a, longname)) k = &keys[j];
        }
        if (!k) return err_set(err, "unknown option '%s'", a);
        if (i + 1 >= argc) return err_set(err, "option %s needs a value", a);
        if (apply_flag(c, k, a, argv[++i], err)) return -1;
    }
    return 0;
}

int config_validate(const struct config *c, char *err) {
    if (!c->model_path) return err_set(err, "no model: set [model] path in the config or pass --model PATH");
    if (strcmp(c->kv_type, "f16") && strcmp(c->kv_type, "f32"))
        return err_set(err, "cache.type must be \"f16\" or \"f32\", not \"%s\"", c->kv_type);
    if (strcmp(c->backend, "cpu") && strcmp(c->backend, "cuda") && strcmp(c->backend, "auto"))
        return err_set(err, "parallel.backend must be \"cpu\", \"cuda\" or \"auto\", not \"%s\"", c->backend);
    if (strcmp(c->bind, "core") && strcmp(c->bind, "socket") && strcmp(c->bind, "none"))
        return err_set(err, "launch.bind must be \"core\", \"socket\" or \"none\", not \"%s\"", c->bind);
    if (!c->socket[0]) return err_set(err, "server.socket must not be empty");
    if (c->step_tokens < c->max_running)
        return err_set(err, "scheduler.step_tokens (%ld) must be at least scheduler.max_running (%ld): every running "
                       "sequence needs room for its decode token", c->step_tokens, c->max_running);
    if (c->kv_tokens < c->block_size) return err_set(err, "cache.kv_tokens must hold at least one block");
    return 0;
}

static void dump_value(const struct config *c, const struct ckey *k, char *buf, size_t n) {
    const char *base = (const char *)c + k->off;
    switch (k->kind) {
    case K_STR: {
        const char *s = *(char *const *)base;
        if (s) snprintf(buf, n, "\"%s\"", s);
        else snprintf(buf, n, "\"\"");
        break;
    }
    case K_INT: snprintf(buf, n, "%ld", *(const long *)base); break;
    case K_DBL: snprintf(buf, n, "%g", *(const double *)base); break;
    case K_BOOL: snprintf(buf, n, "%s", *(const int *)base ? "true" : "false"); break;
    case K_MODE: snprintf(buf, n, "\"%04lo\"", c->socket_mode); break;
    case K_UIDS: {
        size_t at = (size_t)snprintf(buf, n, "[");
        for (int i = 0; i < c->n_allowed_uids && at < n; i++)
            at += (size_t)snprintf(buf + at, n - at, "%s%ld", i ? ", " : "", c->allowed_uids[i]);
        if (at < n) snprintf(buf + at, n - at, "]");
        break;
    }
    }
}

char *config_dump(const struct config *c) {
    struct sbuf out = {0};
    sbuf_add(&out, "", 0);
    const char *sec = "";
    for (size_t i = 0; i < N_KEYS; i++) {
        char val[1200];
        dump_value(c, &keys[i], val, sizeof val);
        char line[1400];
        int n = snprintf(line, sizeof line, "%s%s%s%s = %s\n", strcmp(sec, keys[i].section) ? "[" : "",
                         strcmp(sec, keys[i].section) ? keys[i].section : "", strcmp(sec, keys[i].section) ? "]\n" : "",
                         keys[i].key, val);
        sec = keys[i].section;
        if (n < 0) continue;
        sbuf_add(&out, line, (size_t)n);
    }
    return out.p;
}

char *config_get(const struct config *c, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return NULL;
    char sec[64];
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - key), key);
    const struct ckey *k = find_key(sec, dot + 1, strlen(dot + 1));
    if (!k) return NULL;
    char val[1200];
    dump_value(c, k, val, sizeof val);
    size_t n = strlen(val);
    if (k->kind == K_STR || k->kind == K_MODE) { /* bare value for shell scripts */
        memmove(val, val + 1, n);
        val[n - 2] = 0;
    }
    return xstrdup(val);
}
