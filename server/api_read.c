#include "api_read.h"

#include <math.h>

cJSON *api_field(const cJSON *o, const char *name) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int api_read_bool(const cJSON *o, const char *name, int *out, struct api_error *e) {
    cJSON *v = api_field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return api_err(e, 400, name, "%s: must be a boolean", name);
    *out = cJSON_IsTrue(v);
    return 1;
}

/* A finite number in [lo, hi] (or (lo, hi] with lo_open). */
int api_read_num(const cJSON *o, const char *name, double lo, double hi, int lo_open, double *out,
                 struct api_error *e) {
    cJSON *v = api_field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return api_err(e, 400, name, "%s: must be a number", name);
    double x = v->valuedouble;
    if (x > hi || (lo_open ? x <= lo : x < lo))
        return api_err(e, 400, name, "%s: must be in %c%g, %g], got %g", name, lo_open ? '(' : '[',
                       lo, hi, x);
    *out = x;
    return 1;
}

int api_is_integral(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

int api_read_int(const cJSON *o, const char *name, long lo, long hi, long *out,
                 struct api_error *e) {
    cJSON *v = api_field(o, name);
    if (!v) return 0;
    if (!api_is_integral(v)) return api_err(e, 400, name, "%s: must be an integer", name);
    double x = v->valuedouble;
    if (x < (double)lo || x > (double)hi)
        return api_err(e, 400, name, "%s: must be in [%ld, %ld], got %.0f", name, lo, hi, x);
    *out = (long)x;
    return 1;
}
