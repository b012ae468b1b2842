/* Internal to the grammar module: the regex converter's pieces the JSON Schema converter
 * uses. */
#ifndef TPD_GRAMMAR_REGEX_H
#define TPD_GRAMMAR_REGEX_H

#include <stddef.h>

#include "../util/sbuf.h"

struct cpset;

/* Appends the GBNF item (a parenthesised group) matching the regex, whole. json: the
 * contents of a JSON string whose decoded text matches. 0, or -1 with err. */
int regex_to_gbnf(const char *re, size_t len, int json, struct sbuf *out, char *err);
/* regex_to_gbnf, and the least and most characters of the strings the regex matches whole
 * (*lmax -1: unbounded; anchors and the search's free ends are the caller's). */
int regex_to_gbnf_range(const char *re, size_t len, int json, struct sbuf *out, long *lmin,
                        long *lmax, char *err);
/* Appends the GBNF item of the JSON string contents whose decoded text matches the regex
 * (searched, as JSON Schema does: unanchored ends take any text) and has lo to hi characters (hi
 * -1: no bound), where the regex is a sequence of one-character atoms with quantifiers: the
 * one with the widest count takes the slack, the others their least count (exact when only
 * one count varies). 1, 0 (not that shape: nothing appended), or -1 with err. */
int regex_to_gbnf_lengths(const char *re, size_t len, long lo, long hi, struct sbuf *out,
                          char *err);
/* Appends the GBNF item of the code points of s (normalised here; json: as JSON string
 * contents, '"', '\\' and control characters escaped). -1 (nothing appended) when s is
 * empty. */
int regex_put_set(struct sbuf *out, struct cpset *s, int json);
/* The code points of the atom at re[*i] (a class, an escape, '.', one character) added to
 * s, *i past it; 0, or -1 with err. */
int regex_atom_set(const char *re, size_t len, size_t *i, struct cpset *s, char *err);
/* A quantifier {m}, {m,}, {m,n} or {,n} at re[*i]: 1 with its bounds (*hi -1: none) and *i
 * past it; 0 (*i unchanged) when the brace is a literal one. */
int regex_braces(const char *re, size_t len, size_t *i, long *lo, long *hi);
/* 1 when re[0..n) ends with an anchor '$' (not an escaped '\\$'). */
int regex_anchored_end(const char *re, size_t n);
/* The least and most characters of the strings that contain a match of re (searched, as
 * JSON Schema's pattern: *lmax -1 unless anchored at both ends, or unbounded); 0, or -1 with
 * err where regex_to_gbnf_range cannot read re. */
int regex_search_lengths(const char *re, size_t n, long *lmin, long *lmax, char *err);
/* Appends s[0..n) as a GBNF literal. */
void gbnf_put_literal(struct sbuf *o, const char *s, size_t n);

#endif
