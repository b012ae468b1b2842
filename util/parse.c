#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fatal.h"

int parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int parse_float(const char *s, double lo, double hi, float *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = (float)v;
    return 0;
}

int parse_ids(const char *s, int max_n, int32_t **ids, int *n, char *err) {
    int count = 1;
    for (const char *p = s; *p; p++) count += *p == ',';
    if (!*s) return err_set(err, "empty id list");
    if (count > max_n) return err_set(err, "%d ids, at most %d allowed", count, max_n);
    int32_t *out = xmalloc(sizeof(int32_t) * (size_t)count);
    int k = 0;
    const char *p = s;
    while (k < count) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end != ',' && *end != 0)) {
            free(out);
            return err_set(err, "id %d of the list is not a non-negative integer", k + 1);
        }
        out[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *ids = out;
    *n = count;
    return 0;
}

int json_has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
        i++;
    }
    return 0;
}
