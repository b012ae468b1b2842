/* JSON Schema -> GBNF, object keys: the rule of a key that is none of the declared names,
 * and patternProperties' patterns read for their shape: the characters
 * their keys start with (to tell two patterns apart) and patterns of one character class
 * repeated, whose keys can be written as a trie beside the declared names (rank 0, any
 * thread: one struct sc per conversion). */
#ifndef TPD_GRAMMAR_SCHEMA_KEYS_H
#define TPD_GRAMMAR_SCHEMA_KEYS_H

#include <cjson/cJSON.h>

#include "schema_internal.h"

/* 1 when no string matches both patterns (searched, as JSON Schema does), decided from the
 * characters their matches must start with where both are anchored at the start; 0 when
 * tpd cannot tell. */
int sc_patterns_disjoint(const char *a, const char *b);
/* The shape of pattern p: 2 when it matches every string (`^[a-z]*`, `x*`); 1 when the
 * strings of one ASCII class of printable characters repeated lo to hi times (hi -1: no
 * bound) all match it (`^[a-z0-9_]+$`, `[A-Z]+`), the class's characters other than the
 * quote and backslash into set (128 bits); else 0. */
int sc_pattern_class(const char *p, unsigned char set[128], long *lo, long *hi);
/* The rule nm: a JSON string (quotes included) of lo to hi characters of set (raw; the first
 * one of first where not NULL), none of names[0..n), as sc_gen_key_not_in's trie; 1, or 0
 * (no rule) when there is no such key. */
int sc_gen_key_class_not_in(struct sc *c, const char *const *names, int n,
                            const unsigned char set[128], const unsigned char *first, long lo,
                            long hi, char *nm);
/* Into first: the printable ASCII characters (but the quote and backslash) that no match of
 * any pattern of pe (patternProperties) starts with, where every pattern is anchored at its
 * start with a known first character; 1, or 0 when there are none or tpd cannot tell. A key
 * starting with one matches none of the patterns. */
int sc_patterns_first(const cJSON *pe, unsigned char first[128]);
/* The rule nm: a JSON string (quotes included, no whitespace after) whose decoded value is
 * none of names[0..n) (one_line: non-empty, without a newline), as a trie of the names; raw
 * characters and the short escapes only (no \\u). */
void sc_gen_key_not_in(struct sc *c, const char *const *names, int n, int one_line, char *nm);
/* A key trie's node rule base-k (body r, freed here), and its start nm ("base-key"). */
void sc_key_node(struct sc *c, const char *base, int k, struct sbuf *r);
void sc_key_root(struct sc *c, const char *base, char *nm);

#endif
