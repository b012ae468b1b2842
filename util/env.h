/* Numbers from environment variables (timeouts, buffer sizes), checked: unset or empty gives
 * the default, anything malformed is an error naming the variable. Any thread. */
#ifndef TPD_ENV_H
#define TPD_ENV_H

#include <stddef.h>

/* 1 when name is set to anything but "" or "0" (switches such as TPD_PROFILE_OPS). */
int env_flag(const char *name);
/* Seconds in (0, 1e6], else def. 0, or -1 with err. */
int env_seconds(const char *name, double def, double *out, char *err);
/* A decimal byte count in [lo, hi], else def. 0, or -1 with err. */
int env_bytes(const char *name, size_t def, size_t lo, size_t hi, size_t *out, char *err);

#endif
