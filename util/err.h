/* Recoverable errors: functions return 0 / -1 and write the reason into a caller's
 * buffer of ERR_LEN bytes (redis anet style). Libraries never print or exit. */
#ifndef TPD_ERR_H
#define TPD_ERR_H

#include <stddef.h>
#include <stdint.h>

#define ERR_LEN 512

/* Formats into err (if non-NULL) and returns -1, so callers can `return err_set(...)`. */
int err_set(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overflow-checked size arithmetic for untrusted counts: return 0 on success, -1 on overflow. */
static inline int size_mul(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int size_add(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

#endif
