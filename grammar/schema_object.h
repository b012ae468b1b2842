/* JSON Schema -> GBNF, objects: the object keywords lowered to
 * properties/required/additionalProperties, the grammar of an object, and keys
 * that are none of the declared names (rank 0, any thread: one struct sc per
 * conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_OBJECT_H
#define TPD_GRAMMAR_SCHEMA_OBJECT_H

#include "schema_internal.h"

void sc_gen_key_not_in(struct sc *c, const char *const *names, int n, int one_line, char *nm);
int sc_name_matches(struct sc *c, const char *pattern, const char *name);
int sc_is_required(const cJSON *m, const char *name);
int sc_writable(const cJSON *m, const char *name);
int sc_forbid(struct sc *c, cJSON *m, const char *name, const char *why);
const cJSON *sc_lower_object(struct sc *c, const cJSON *s);
int sc_gen_object(struct sc *c, const cJSON *s, struct sbuf *b);

#endif
