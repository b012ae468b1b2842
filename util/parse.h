/* Checked parsing of numbers and id lists from untrusted text (command line, requests). */
#ifndef TPD_PARSE_H
#define TPD_PARSE_H

#include <stdint.h>

/* Whole string must be a decimal integer in [lo, hi]. */
int parse_long(const char *s, long lo, long hi, long *out);
/* Whole string must be a finite number in [lo, hi]. */
int parse_float(const char *s, double lo, double hi, float *out);
/* "1,2,3" -> malloc'ed ids (each in [0, INT32_MAX]); at most max_n; -1 with err. */
int parse_ids(const char *s, int max_n, int32_t **ids, int *n, char *err);

#endif
