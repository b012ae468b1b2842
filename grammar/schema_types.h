/* Internal to the grammar module: the JSON types a schema's keywords speak of, for the
 * converter (schema.c) to read a schema without type (struct sc's every_type). Any thread. */
#ifndef TPD_GRAMMAR_SCHEMA_TYPES_H
#define TPD_GRAMMAR_SCHEMA_TYPES_H

#include <cjson/cJSON.h>

struct sc;

/* The type ("object", "array", "string", "number") that s's first keyword of one type
 * (properties, items, minLength, minimum, ...) speaks of, unless its value says nothing
 * (properties {}, minLength 0); NULL when none does. */
const char *sc_infer_type(const cJSON *s);
/* The types whose every value s accepts where s is a schema without type all of whose
 * keywords constrain one type each (properties, minLength, ...; true: all types), else 0
 * (s has a type, an enum, branches ...: none known). T_* bits (schema_internal.h). */
int sc_free_types(const cJSON *s);
/* The T_* bits of sc_infer_type's type, T_ANY where there is none or c reads every type
 * (c->every_type). */
int sc_implied_bits(const struct sc *c, const cJSON *s);
/* A "type" array of the types of bits (T_* bits, T_FRAC only beside T_INT: "number"). */
cJSON *sc_type_list(int bits);

#endif
