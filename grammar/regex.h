/* Internal to the grammar module: the regex converter's pieces the JSON Schema converter
 * uses. */
#ifndef TPD_GRAMMAR_REGEX_H
#define TPD_GRAMMAR_REGEX_H

#include <stddef.h>

#include "../util/sbuf.h"

/* Appends the GBNF item (a parenthesised group) matching the regex, whole. json: the
 * contents of a JSON string whose decoded text matches. 0, or -1 with err. */
int regex_to_gbnf(const char *re, size_t len, int json, struct sbuf *out, char *err);
/* Appends s[0..n) as a GBNF literal. */
void gbnf_put_literal(struct sbuf *o, const char *s, size_t n);

#endif
