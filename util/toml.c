/* The TOML tree: nodes, tables with a hash index once they grow, and the lookups and typed
 * reads the daemon's config loader uses. Parsing lives in toml_parse.c and toml_value.c. */
#include "toml_internal.h"

#include "err.h"
#include "fatal.h"

#include <stdlib.h>
#include <string.h>

/* Tables up to this size are searched linearly; bigger ones get an open-addressing index so
 * that a hostile file with a million keys stays linear, not quadratic. */
#define TABLE_INDEX_MIN 16

struct toml_node *toml_node_new(enum toml_type t, int line, const char *file) {
    struct toml_node *n = xcalloc(1, sizeof(*n));
    n->type = (uint8_t)t;
    n->line = line;
    n->file = file;
    return n;
}

/* Recursion is bounded by TOML_MAX_DEPTH, which the parser enforces on every node. */
void toml_node_free(struct toml_node *n) {
    if (!n) return;
    switch (n->type) {
    case TOML_TABLE:
        for (size_t i = 0; i < n->u.tab.n; i++) {
            free(n->u.tab.e[i].key);
            toml_node_free(n->u.tab.e[i].val);
        }
        free(n->u.tab.e);
        free(n->u.tab.idx);
        break;
    case TOML_ARRAY:
        for (size_t i = 0; i < n->u.arr.n; i++) toml_node_free(n->u.arr.v[i]);
        free(n->u.arr.v);
        break;
    case TOML_STRING:
    case TOML_DATETIME:
    case TOML_DATETIME_LOCAL:
    case TOML_DATE_LOCAL:
    case TOML_TIME_LOCAL: free(n->u.str.s); break;
    default: break;
    }
    if (n->flags & TOML_F_ROOT) free((char *)n->file);
    free(n);
}

void toml_free(struct toml_node *root) { toml_node_free(root); }

static uint64_t key_hash(const char *k, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

static void index_rebuild(struct toml_node *t, size_t cap) {
    uint32_t *idx = xcalloc(cap, sizeof(*idx));
    for (size_t i = 0; i < t->u.tab.n; i++) {
        size_t s = key_hash(t->u.tab.e[i].key, t->u.tab.e[i].klen) & (cap - 1);
        while (idx[s]) s = (s + 1) & (cap - 1);
        idx[s] = (uint32_t)(i + 1);
    }
    free(t->u.tab.idx);
    t->u.tab.idx = idx;
    t->u.tab.idx_cap = cap;
}

struct toml_node *toml_table_find(const struct toml_node *t, const char *key, size_t klen) {
    if (!t || t->type != TOML_TABLE) return NULL;
    const struct toml_entry *e = t->u.tab.e;
    if (!t->u.tab.idx) {
        for (size_t i = 0; i < t->u.tab.n; i++)
            if (e[i].klen == klen && memcmp(e[i].key, key, klen) == 0) return e[i].val;
        return NULL;
    }
    size_t mask = t->u.tab.idx_cap - 1;
    for (size_t s = key_hash(key, klen) & mask; t->u.tab.idx[s]; s = (s + 1) & mask) {
        const struct toml_entry *x = &e[t->u.tab.idx[s] - 1];
        if (x->klen == klen && memcmp(x->key, key, klen) == 0) return x->val;
    }
    return NULL;
}

/* The caller has checked that key is absent. */
void toml_table_add(struct toml_node *t, const char *key, size_t klen, struct toml_node *val) {
    if (t->u.tab.n == t->u.tab.cap) {
        size_t cap = t->u.tab.cap ? 2 * t->u.tab.cap : 4;
        t->u.tab.e = xrealloc(t->u.tab.e, cap * sizeof(*t->u.tab.e));
        t->u.tab.cap = cap;
    }
    char *k = xstrndup(key, klen);
    size_t i = t->u.tab.n;
    t->u.tab.e[i] = (struct toml_entry){k, klen, val};
    t->u.tab.n++;
    /* Keep the index at most half full. */
    if (t->u.tab.n >= TABLE_INDEX_MIN && 2 * t->u.tab.n > t->u.tab.idx_cap) {
        index_rebuild(t, t->u.tab.idx_cap ? 2 * t->u.tab.idx_cap : 4 * TABLE_INDEX_MIN);
    } else if (t->u.tab.idx) {
        size_t mask = t->u.tab.idx_cap - 1, s = key_hash(k, klen) & mask;
        while (t->u.tab.idx[s]) s = (s + 1) & mask;
        t->u.tab.idx[s] = (uint32_t)(i + 1);
    }
}

void toml_array_push(struct toml_node *a, struct toml_node *v) {
    if (a->u.arr.n == a->u.arr.cap) {
        size_t cap = a->u.arr.cap ? 2 * a->u.arr.cap : 4;
        a->u.arr.v = xrealloc(a->u.arr.v, cap * sizeof(*a->u.arr.v));
        a->u.arr.cap = cap;
    }
    a->u.arr.v[a->u.arr.n++] = v;
}

enum toml_type toml_type(const struct toml_node *n) { return (enum toml_type)n->type; }

const char *toml_type_name(enum toml_type t) {
    switch (t) {
    case TOML_TABLE: return "table";
    case TOML_ARRAY: return "array";
    case TOML_STRING: return "string";
    case TOML_INTEGER: return "integer";
    case TOML_FLOAT: return "float";
    case TOML_BOOL: return "bool";
    case TOML_DATETIME: return "datetime";
    case TOML_DATETIME_LOCAL: return "datetime-local";
    case TOML_DATE_LOCAL: return "date-local";
    case TOML_TIME_LOCAL: return "time-local";
    }
    return "?";
}

/* The type with its article, for messages. */
const char *toml_type_phrase(enum toml_type t) {
    switch (t) {
    case TOML_TABLE: return "a table";
    case TOML_ARRAY: return "an array";
    case TOML_STRING: return "a string";
    case TOML_INTEGER: return "an integer";
    case TOML_FLOAT: return "a float";
    case TOML_BOOL: return "a boolean";
    case TOML_DATETIME: return "an offset date-time";
    case TOML_DATETIME_LOCAL: return "a local date-time";
    case TOML_DATE_LOCAL: return "a local date";
    case TOML_TIME_LOCAL: return "a local time";
    }
    return "?";
}

int toml_line(const struct toml_node *n) { return n->line; }
const char *toml_file(const struct toml_node *n) { return n->file; }

size_t toml_len(const struct toml_node *n) {
    if (n->type == TOML_TABLE) return n->u.tab.n;
    if (n->type == TOML_ARRAY) return n->u.arr.n;
    return 0;
}

const char *toml_key(const struct toml_node *t, size_t i, size_t *len) {
    if (t->type != TOML_TABLE || i >= t->u.tab.n) return NULL;
    if (len) *len = t->u.tab.e[i].klen;
    return t->u.tab.e[i].key;
}

struct toml_node *toml_value(const struct toml_node *t, size_t i) {
    if (t->type != TOML_TABLE || i >= t->u.tab.n) return NULL;
    return t->u.tab.e[i].val;
}

struct toml_node *toml_item(const struct toml_node *a, size_t i) {
    if (a->type != TOML_ARRAY || i >= a->u.arr.n) return NULL;
    return a->u.arr.v[i];
}

struct toml_node *toml_table_get(const struct toml_node *t, const char *key) {
    return toml_table_find(t, key, strlen(key));
}

/* Walks a dotted path: 0 found, 1 absent, -1 (with err) when a part on the way is not a
 * table, since a config that has `server = 5` where [server] is expected is wrong, not empty. */
static int path_lookup(const struct toml_node *t, const char *path, struct toml_node **out,
                       char *err) {
    const struct toml_node *n = t;
    const char *p = path;
    if (n->type != TOML_TABLE) return 1;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = toml_table_find(n, p, len);
        if (!n) return 1;
        if (!dot) break;
        if (n->type != TOML_TABLE) {
            return err_set(err, "%s:%d: '%.*s' must be a table, not %s", n->file, n->line,
                           (int)(dot - path), path, toml_type_phrase((enum toml_type)n->type));
        }
        p = dot + 1;
    }
    *out = (struct toml_node *)n;
    return 0;
}

struct toml_node *toml_get(const struct toml_node *t, const char *path) {
    struct toml_node *n = NULL;
    return path_lookup(t, path, &n, NULL) == 0 ? n : NULL;
}

static int type_err(const struct toml_node *n, const char *path, const char *want, char *err) {
    const char *have = toml_type_phrase((enum toml_type)n->type);
    if (path)
        return err_set(err, "%s:%d: '%s' must be %s, not %s", n->file, n->line, path, want, have);
    return err_set(err, "%s:%d: expected %s, found %s", n->file, n->line, want, have);
}

static int get_string(const struct toml_node *n, const char *path, const char **s, size_t *len,
                      char *err) {
    if (n->type != TOML_STRING) return type_err(n, path, "a string", err);
    *s = n->u.str.s;
    if (len) *len = n->u.str.len;
    return 0;
}

static int get_int(const struct toml_node *n, const char *path, int64_t *v, char *err) {
    if (n->type != TOML_INTEGER) return type_err(n, path, "an integer", err);
    *v = n->u.i;
    return 0;
}

static int get_double(const struct toml_node *n, const char *path, double *v, char *err) {
    if (n->type == TOML_FLOAT) *v = n->u.f;
    else if (n->type == TOML_INTEGER) *v = (double)n->u.i;
    else return type_err(n, path, "a number", err);
    return 0;
}

static int get_bool(const struct toml_node *n, const char *path, bool *v, char *err) {
    if (n->type != TOML_BOOL) return type_err(n, path, "a boolean", err);
    *v = n->u.b;
    return 0;
}

int toml_string(const struct toml_node *n, const char **s, size_t *len, char *err) {
    return get_string(n, NULL, s, len, err);
}
int toml_int(const struct toml_node *n, int64_t *v, char *err) { return get_int(n, NULL, v, err); }
int toml_double(const struct toml_node *n, double *v, char *err) {
    return get_double(n, NULL, v, err);
}
int toml_bool(const struct toml_node *n, bool *v, char *err) { return get_bool(n, NULL, v, err); }

int toml_datetime(const struct toml_node *n, const char **s, char *err) {
    if (n->type < TOML_DATETIME || n->type > TOML_TIME_LOCAL)
        return type_err(n, NULL, "a date or time", err);
    *s = n->u.str.s;
    return 0;
}

int toml_get_string(const struct toml_node *t, const char *path, const char **s, char *err) {
    struct toml_node *n;
    int rc = path_lookup(t, path, &n, err);
    if (rc) return rc;
    const char *v = NULL;
    size_t len = 0;
    if (get_string(n, path, &v, &len, err) < 0) return -1;
    if (strlen(v) != len)
        return err_set(err, "%s:%d: '%s' must not contain a NUL character", n->file, n->line, path);
    *s = v;
    return 0;
}

int toml_get_int(const struct toml_node *t, const char *path, int64_t *v, char *err) {
    struct toml_node *n;
    int rc = path_lookup(t, path, &n, err);
    return rc ? rc : get_int(n, path, v, err);
}

int toml_get_double(const struct toml_node *t, const char *path, double *v, char *err) {
    struct toml_node *n;
    int rc = path_lookup(t, path, &n, err);
    return rc ? rc : get_double(n, path, v, err);
}

int toml_get_bool(const struct toml_node *t, const char *path, bool *v, char *err) {
    struct toml_node *n;
    int rc = path_lookup(t, path, &n, err);
    return rc ? rc : get_bool(n, path, v, err);
}
