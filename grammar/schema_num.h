/* Internal to the grammar module: the exact language of the JSON numbers in a range, for the
 * JSON Schema converter (schema.c). Any thread. */
#ifndef TPD_GRAMMAR_SCHEMA_NUM_H
#define TPD_GRAMMAR_SCHEMA_NUM_H

#include "../util/sbuf.h"

/* Appends a GBNF item (a parenthesised group) matching the JSON numbers x with lo <= x <= hi
 * (lo_x / hi_x: strict; -INFINITY / INFINITY: unbounded). integer: integers of at most 16
 * digits (up to 40 beyond a bound at 10^40 or more). Else decimals with at most 15
 * significant digits (integer and fraction digits together), without exponent or normalized
 * (d.ddd e N, |N| <= 99), so that distinct ones are distinct doubles and each compares with
 * a bound as a double exactly as its decimal form compares with the bound's shortest decimal
 * form: the range holds for a validator that parses into doubles too. Bounds beyond what
 * that many digits reach are clamped to it (a subset of the range). 0, or -1 with err (no
 * such number). */
int schema_num_range(struct sbuf *b, double lo, int lo_x, double hi, int hi_x, int integer,
                     char *err);

#endif
