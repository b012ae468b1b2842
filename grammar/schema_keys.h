/* JSON Schema -> GBNF, object keys: the rule of a key that is none of the declared names,
 * and the keys of patternProperties beside them (rank 0, any thread: one struct sc per
 * conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_KEYS_H
#define TPD_GRAMMAR_SCHEMA_KEYS_H

#include <cjson/cJSON.h>

#include "schema_internal.h"

/* The entries (key, value) of an object's keys that are none of names[0..nn), as one more
 * alternative into e: a key that patterns of pe (patternProperties) match takes the schemas
 * of all of them, one that none matches takes addl (NULL or false: no such key). Keys are
 * read by one automaton of the patterns and the names (regex_dfa.h); a pattern outside the
 * subset it reads is taken as matching any key. Returns how many alternatives (0 or 1), -1
 * with c->err (a pattern that needs too many automaton states). */
int sc_gen_pattern_keys(struct sc *c, const cJSON *pe, const cJSON *addl, const char *const *names,
                        int nn, struct sbuf *e);
/* Appends the rule of the JSON strings (quotes included) that pattern matches (searched),
 * as sc_gen_pattern_keys reads keys: for patterns regex_to_gbnf refuses (anchors inside).
 * 1; 0 (nothing appended) when the pattern is outside the subset the automaton reads; -1
 * with c->err (too many states, or no string matches). */
int sc_gen_pattern_string(struct sc *c, const char *pattern, struct sbuf *b);
/* sc_gen_pattern_string for the strings of lo to hi characters (hi -1: no bound) that pattern
 * matches: its automaton read beside a count of the characters (up to hi, or to lo where
 * there is no hi), exact. 1; 0 (nothing appended) when the pattern is outside the subset
 * the automaton reads or the two together need more than PATTERN_LENGTH_STATES states; -1
 * with c->err (no string meets both). */
#define PATTERN_LENGTH_STATES 8192
int sc_gen_pattern_lengths(struct sc *c, const char *pattern, long lo, long hi, struct sbuf *b);
/* The rule nm: a JSON string (quotes included, no whitespace after) whose decoded value is
 * none of names[0..n) (one_line: non-empty, without a newline), as a trie of the names; raw
 * characters and the short escapes only (no \\u). */
void sc_gen_key_not_in(struct sc *c, const char *const *names, int n, int one_line, char *nm);
/* A key trie's node rule base-k (body r, freed here), and its start nm ("base-key"). */
void sc_key_node(struct sc *c, const char *base, int k, struct sbuf *r);
void sc_key_root(struct sc *c, const char *base, char *nm);

#endif
