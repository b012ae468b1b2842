/* JSON Schema -> GBNF, an object's members: the rules that write its properties in order,
 * then its extra keys, as states that remember what was written where a later choice
 * depends on it (dependencies between optional properties; minProperties/maxProperties: how
 * many) (rank 0, any thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_MEMBERS_H
#define TPD_GRAMMAR_SCHEMA_MEMBERS_H

#include <cjson/cJSON.h>

#include "schema_internal.h"

/* One property sc_gen_object writes: declared, or required and not declared. */
struct obj_prop {
    const char *key;
    const cJSON *schema;
    int required;
};

struct members {
    const struct obj_prop *pl; /* the properties, in the order they are written */
    int n;
    char (*vals)[RN];  /* property k's value rule, "": never written (may be cleared here) */
    const char *entry; /* the rule of one extra entry (key, value), "": none */
    const cJSON *deps; /* DEPENDS: {name: [names]} among optional properties, or NULL */
    long min, max;     /* minProperties (0: none), maxProperties (-1: none) */
};

/* The rules that write m's members (what comes between the braces, whitespace after the
 * opening one already written), the first one's name into nm. Every path through them
 * ends in an object that meets m: none leads where no valid object can be finished. 0, or
 * -1 with err (no object can be written, or too many states). */
int sc_gen_members(struct sc *c, const struct members *m, char *nm);

#endif
