#include "env.h"

#include <stdlib.h>
#include <string.h>

#include "err.h"

int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

int env_seconds(const char *name, double def, double *out, char *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0) || d > 1e6) return err_set(err, "%s=%s: expected seconds in (0, 1e6]", name, v);
    *out = d;
    return 0;
}

int env_bytes(const char *name, size_t def, size_t lo, size_t hi, size_t *out, char *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    char *end = NULL;
    unsigned long long b = strtoull(v, &end, 10);
    if (end == v || *end || b < lo || b > hi)
        return err_set(err, "%s=%s: expected a byte count in [%zu, %zu]", name, v, lo, hi);
    *out = (size_t)b;
    return 0;
}
