/* JSON Schema -> GBNF: allOf and $ref beside keywords merged into one schema
 * (merge, flat), if/then lowered (rank 0, any thread: one struct sc per
 * conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_MERGE_H
#define TPD_GRAMMAR_SCHEMA_MERGE_H

#include "schema_internal.h"

cJSON *sc_all_of2(const cJSON *x, const cJSON *y);
cJSON *sc_not_either(const cJSON *x, const cJSON *y);
cJSON *sc_merge(struct sc *c, const cJSON *a, const cJSON *b);
cJSON *sc_without(struct sc *c, const cJSON *s, const char *const *drop);
int sc_has_constraints(const cJSON *s);
const cJSON *sc_lower_if(struct sc *c, const cJSON *s);
const cJSON *sc_flat(struct sc *c, const cJSON *s, int as_gen);

#endif
