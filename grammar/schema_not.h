/* JSON Schema -> GBNF: not, unevaluatedProperties and unevaluatedItems lowered
 * into the keywords the other modules write, exactly, or refused (rank 0, any
 * thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_NOT_H
#define TPD_GRAMMAR_SCHEMA_NOT_H

#include "schema_internal.h"

const cJSON *sc_lower_not(struct sc *c, const cJSON *s);
const cJSON *sc_lower_unevaluated(struct sc *c, const cJSON *s);

#endif
