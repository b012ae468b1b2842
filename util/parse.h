/* Checked parsing of numbers and id lists from untrusted text (command line, requests). */
#ifndef TPD_PARSE_H
#define TPD_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Whole string must be a decimal integer in [lo, hi]. */
int parse_long(const char *s, long lo, long hi, long *out);
/* Whole string must be a finite number in [lo, hi]. */
int parse_float(const char *s, double lo, double hi, float *out);
/* "1,2,3" -> malloc'ed ids (each in [0, INT32_MAX]); at most max_n; -1 with err. */
int parse_ids(const char *s, int max_n, int32_t **ids, int *n, char *err);
/* 1 if the JSON text s[0..n) holds the escape \u0000 (a NUL character in a string).
 * cJSON's strings are C strings, which silently end at such a NUL, so callers refuse it.
 * Every backslash starts an escape whose next character is skipped, so an escaped
 * backslash followed by "u0000" is not one. */
int json_has_nul_escape(const char *s, size_t n);

#endif
