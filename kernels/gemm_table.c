/* The GEMM tuning table (gemm_table.h): parsing and lookup. */
#include "gemm_table.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"

enum { FIELDS = 7, FIELD_MAX = 128, DIM_MAX = 1 << 30 };

const char *gemm_pick_name(struct gemm_pick p, char *buf, size_t n) {
    switch (p.kind) {
    case GEMM_MMV: snprintf(buf, n, "mmv"); break;
    case GEMM_EX: snprintf(buf, n, "ex"); break;
    case GEMM_LT: snprintf(buf, n, "lt%d", p.rank); break;
    default: snprintf(buf, n, "default"); break;
    }
    return buf;
}

int gemm_pick_parse(const char *s, struct gemm_pick *p) {
    if (!strcmp(s, "mmv")) *p = (struct gemm_pick){GEMM_MMV, 0};
    else if (!strcmp(s, "ex")) *p = (struct gemm_pick){GEMM_EX, 0};
    else if (s[0] == 'l' && s[1] == 't' && s[2] >= '0' && s[2] < '0' + GEMM_LT_RANKS && !s[3])
        *p = (struct gemm_pick){GEMM_LT, s[2] - '0'};
    else return -1;
    return 0;
}

/* A decimal in 1..DIM_MAX (or 0..LONG_MAX for the version: max < 0). */
static int parse_num(const char *s, long max, long *out) {
    if (!*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || (max > 0 && (v < 1 || v > max))) return -1;
    *out = v;
    return 0;
}

/* Splits line (len bytes, no newline) at tabs into at most FIELDS fields of < FIELD_MAX
 * bytes (the rest of the line after field FIELDS is ignored). Returns the count, or -1. */
static int split(const char *line, size_t len, char f[FIELDS][FIELD_MAX]) {
    int n = 0;
    size_t i = 0;
    while (n < FIELDS) {
        size_t j = i;
        while (j < len && line[j] != '\t') j++;
        if (j - i >= FIELD_MAX) return -1;
        memcpy(f[n], line + i, j - i);
        f[n][j - i] = 0;
        n++;
        if (j >= len) break;
        i = j + 1;
    }
    return n;
}

static int add(struct gemm_table *t, const struct gemm_entry *e, int *cap) {
    if (t->n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        struct gemm_entry *ne = realloc(t->e, (size_t)nc * sizeof *ne);
        if (!ne) return -1;
        t->e = ne;
        *cap = nc;
    }
    t->e[t->n++] = *e;
    return 0;
}

int gemm_table_load(struct gemm_table *t, const char *text, const char *gpu, long lt_version,
                    char *err) {
    memset(t, 0, sizeof *t);
    int cap = 0, lineno = 0;
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p = nl ? nl + 1 : NULL;
        lineno++;
        if (len == 0 || line[0] == '#') continue;
        char f[FIELDS][FIELD_MAX];
        long ver, rows, cols, t_max;
        struct gemm_entry e = {0};
        const char *why = NULL;
        if (split(line, len, f) != FIELDS) why = "expected 7 tab-separated fields of < 128 bytes";
        else if (parse_num(f[1], -1, &ver)) why = "bad cuBLASLt version";
        else if (strcmp(f[2], "bf16") && strcmp(f[2], "f16")) why = "dtype is not bf16 or f16";
        else if (parse_num(f[3], DIM_MAX, &rows) || parse_num(f[4], DIM_MAX, &cols))
            why = "bad rows or cols";
        else if (parse_num(f[5], DIM_MAX, &t_max)) why = "bad T-MAX";
        else if (gemm_pick_parse(f[6], &e.pick)) why = "PICK is not mmv, ex or lt0..lt7";
        else if (e.pick.kind == GEMM_MMV && t_max > GEMM_MMV_MAX_T)
            why = "mmv serves at most 8 tokens";
        if (why) {
            gemm_table_free(t);
            return err_set(err, "GEMM table line %d: %s", lineno, why);
        }
        if (strcmp(f[0], gpu) || ver != lt_version) continue;
        e.half = !strcmp(f[2], "f16");
        e.rows = (int)rows, e.cols = (int)cols, e.t_max = (int)t_max;
        if (add(t, &e, &cap)) {
            gemm_table_free(t);
            return err_set(err, "GEMM table: out of memory");
        }
    }
    return 0;
}

struct gemm_pick gemm_table_pick(const struct gemm_table *t, int half, int rows, int cols, int T) {
    const struct gemm_entry *best = NULL, *top = NULL;
    for (int i = 0; i < t->n; i++) {
        const struct gemm_entry *e = &t->e[i];
        if (e->half != half || e->rows != rows || e->cols != cols) continue;
        if (e->t_max >= T && (!best || e->t_max < best->t_max)) best = e;
        if (!top || e->t_max > top->t_max) top = e;
    }
    if (!best) best = top;
    if (!best || (best->pick.kind == GEMM_MMV && T > GEMM_MMV_MAX_T))
        return (struct gemm_pick){GEMM_DEFAULT, 0};
    return best->pick;
}

void gemm_table_free(struct gemm_table *t) {
    free(t->e);
    t->e = NULL;
    t->n = 0;
}
