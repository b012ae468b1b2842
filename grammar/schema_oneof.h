/* JSON Schema -> GBNF: what a schema accepts (over-approximated) and writes:
 * oneOf made exclusive or refused, enum/const values checked against their
 * siblings (rank 0, any thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_ONEOF_H
#define TPD_GRAMMAR_SCHEMA_ONEOF_H

#include "schema_internal.h"

int sc_value_type(const cJSON *v);
int sc_type_bits(const cJSON *t);
const cJSON *sc_branches_of(const cJSON *s);
void sc_num_range(const cJSON *s, double *lo, int *lo_x, double *hi, int *hi_x);
int sc_might_accept(struct sc *c, const cJSON *s, const cJSON *v, int depth);
const cJSON *sc_prop_schema(const cJSON *s, const char *name);
int sc_one_of_exclusive(struct sc *c, const cJSON **br, int n);
int sc_value_valid(struct sc *c, const cJSON *s, const cJSON *v);

#endif
