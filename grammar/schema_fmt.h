/* Internal to the grammar module: the JSON Schema string formats the converter (schema.c)
 * produces, as GBNF. Any thread. */
#ifndef TPD_GRAMMAR_SCHEMA_FMT_H
#define TPD_GRAMMAR_SCHEMA_FMT_H

/* The GBNF item of format name's string contents (quotes left out; nothing in it needs a
 * JSON escape) and its length range in characters (*max_len -1: unbounded); NULL for a
 * format tpd does not produce, which is an annotation (the caller ignores it). */
const char *schema_format(const char *name, long *min_len, long *max_len);

#endif
