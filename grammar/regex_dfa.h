/* Regular expressions -> one deterministic automaton over code points: the strings a set of
 * patterns match (searched, as JSON Schema applies patternProperties) read together with a
 * set of names, so that each state knows which patterns match the string read so far and
 * whether it is one of the names (rank 0, any thread: one automaton per call). */
#ifndef TPD_GRAMMAR_REGEX_DFA_H
#define TPD_GRAMMAR_REGEX_DFA_H

#include <stdint.h>

#define RDFA_MAX_PATTERNS 64

/* The automaton. Its alphabet is the code points of intervals iv[0..n_iv) (those that are
 * written raw or with a short JSON escape, U+FFFF at most, and where no pattern's reading
 * differs between ECMA-262 and Python/PCRE2: keys are never written with the others).
 * State 0 is the start (the empty string). */
struct rdfa {
    int n_states, n_iv;
    uint32_t (*iv)[2];   /* interval k: code points iv[k][0] to iv[k][1] */
    int *next;           /* next[q * n_iv + k]: the state after a code point of interval k */
    uint64_t *acc;       /* acc[q]: bit i, pattern i matches the string read */
    unsigned char *name; /* name[q]: the string read is one of the names */
    uint64_t unknown;    /* bit i: pattern i is outside the subset read here (not in acc) */
};

/* Builds d from patterns pats[0..np) (np <= RDFA_MAX_PATTERNS) and names[0..nn). A pattern
 * whose syntax is outside the ECMA-262 subset read here (lookaround other than lookaheads
 * right after a leading ^, backreferences, flags, syntax ECMA-262 and Python read
 * differently) gets its bit in d->unknown: the caller must take it as possibly matching any
 * string. 0; or -1 with err when a pattern alone needs more than max_states states, or all
 * of them together with the names more than 4 times that plus two per byte of the names. */
int rdfa_build(struct rdfa *d, const char *const *pats, int np, const char *const *names, int nn,
               int max_states, char *err);
/* Into cls[q]: a class of the states that no string tells apart, given each state's output
 * out[q] (states of one class have the same output and, on every interval, lead to one
 * class); the start's class is 0. Returns how many classes. */
int rdfa_merge(const struct rdfa *d, const int *out, int *cls);
void rdfa_free(struct rdfa *d);

#endif
