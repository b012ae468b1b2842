/* JSON Schema -> GBNF, arrays: items, prefixItems, counts, uniqueItems over
 * finite domains, contains (rank 0, any thread: one struct sc per conversion).
 */
#ifndef TPD_GRAMMAR_SCHEMA_ARRAY_H
#define TPD_GRAMMAR_SCHEMA_ARRAY_H

#include "schema_internal.h"

int sc_read_count(struct sc *c, const cJSON *s, const char *key, long *out);
int sc_gen_array(struct sc *c, const cJSON *s, struct sbuf *b);

#endif
