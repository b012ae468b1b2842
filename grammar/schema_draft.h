/* Internal to the grammar module: the JSON Schema draft a document names in its root's
 * `$schema`, and the keywords that draft does not have (unknown there, so ignored, as
 * the specification says). Any thread. */
#ifndef TPD_GRAMMAR_SCHEMA_DRAFT_H
#define TPD_GRAMMAR_SCHEMA_DRAFT_H

#include <cjson/cJSON.h>

/* The draft of root's $schema: 3, 4, 6, 7, 2019 (2019-09), 2020 (2020-12), or 0 when
 * there is none or it names no draft tpd knows (every keyword tpd knows then applies). */
int schema_draft(const cJSON *root);

/* Deletes from every subschema of root (reached through the keywords that hold schemas, and
 * through any other member, since a $ref may point anywhere) the keywords that draft does
 * not define, which a validator of that draft ignores: `if`/`then`/`else` before draft 7,
 * `const`, `contains` and `propertyNames` before draft 6, `dependentRequired`,
 * `dependentSchemas`, `unevaluated*` and `prefixItems` before 2019-09 (prefixItems before
 * 2020-12), `dependencies` from 2019-09 on, `additionalItems` in 2020-12, and in draft 3 the
 * keywords draft 4 brought (`allOf`, `anyOf`, `oneOf`, `not`, `minProperties`,
 * `maxProperties`, `multipleOf`). Values that
 * are data (`enum`, `const`, `default`, `examples`) and the names of `properties` and its
 * kin are left as they are. Nothing is deleted for draft 0. */
void schema_draft_strip(cJSON *root, int draft);

#endif
