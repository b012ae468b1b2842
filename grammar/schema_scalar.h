/* JSON Schema -> GBNF: the grammars of strings (lengths, pattern, format,
 * strings left out by not) and of numbers (bounds, multipleOf) (rank 0, any
 * thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_SCALAR_H
#define TPD_GRAMMAR_SCHEMA_SCALAR_H

#include "schema_internal.h"

int sc_gen_num_range(struct sc *c, const cJSON *s, int integer, struct sbuf *b);
/* Any integer, into b (with a zero fraction where c->int_frac: "2.0"). */
void sc_put_integers(const struct sc *c, struct sbuf *b);
int sc_gen_string(struct sc *c, const cJSON *s, struct sbuf *b);
/* The numbers of s (type number or integer; bounded: it has minimum/maximum) that are
 * multiples of mul, into b: exact, or integers only where mul is 0.1 ... 0.000001. */
int sc_gen_multiple(struct sc *c, const cJSON *s, const cJSON *mul, int bounded, struct sbuf *b);

#endif
