/* JSON Schema -> GBNF, objects: the object keywords lowered to
 * properties/required/additionalProperties and the grammar of an object (key rules:
 * schema_keys.h) (rank 0, any thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_OBJECT_H
#define TPD_GRAMMAR_SCHEMA_OBJECT_H

#include "schema_internal.h"

int sc_name_matches(struct sc *c, const char *pattern, const char *name);
int sc_is_required(const cJSON *m, const char *name);
int sc_writable(const cJSON *m, const char *name);
int sc_forbid(struct sc *c, cJSON *m, const char *name, const char *why);
const cJSON *sc_lower_object(struct sc *c, const cJSON *s);
int sc_gen_object(struct sc *c, const cJSON *s, struct sbuf *b);

#endif
