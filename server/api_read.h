/* Readers of one field of a request's JSON object, each answering 1 (present), 0 (absent or
 * null) or -1 (wrong type or out of range: e names the field). Any thread. */
#ifndef TPD_API_READ_H
#define TPD_API_READ_H

#include <cjson/cJSON.h>

#include "api_err.h"

/* o's member name, NULL when absent or null. */
cJSON *api_field(const cJSON *o, const char *name);
int api_read_bool(const cJSON *o, const char *name, int *out, struct api_error *e);
/* A finite number in [lo, hi] (or (lo, hi] with lo_open). */
int api_read_num(const cJSON *o, const char *name, double lo, double hi, int lo_open, double *out,
                 struct api_error *e);
/* A finite number with no fractional part. */
int api_is_integral(const cJSON *v);
/* An integral number in [lo, hi]. */
int api_read_int(const cJSON *o, const char *name, long lo, long hi, long *out,
                 struct api_error *e);

#endif
