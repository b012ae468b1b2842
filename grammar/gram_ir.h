/* The grammar module's internal form: rules of alternatives of elements over bytes (a
 * byte class or a rule reference), built by the GBNF parser and flattened into the arrays
 * the matcher walks. Checked once: every rule defined, no left recursion, alternatives
 * that can match nothing removed. Any thread (one builder per compile). */
#ifndef TPD_GRAM_IR_H
#define TPD_GRAM_IR_H

#include <stddef.h>
#include <stdint.h>

enum { E_END = 0, E_CLASS = 1, E_REF = 2 };

struct gelem {
    uint32_t type : 2;
    uint32_t arg : 30; /* class index or rule id */
};

struct galt {
    struct gelem *e;
    int n, cap;
};

struct grule {
    char *name; /* NULL for anonymous rules */
    struct galt *alts;
    int n_alts, cap_alts;
    int defined;
    size_t def_pos; /* where it was first referenced (errors) */
};

struct gbuild {
    struct grule *r;
    int n, cap;
    uint64_t (*cls)[4];
    int n_cls, cap_cls;
    size_t n_elems;   /* elements so far, against GRAMMAR_MAX_ELEMS */
    int uq_cls;       /* the unique-quote class (gb_unique_quote) + 1, 0: none yet */
    int32_t *names;   /* named rules by name hash (open addressing): id + 1, 0 empty */
    size_t names_cap; /* a power of two, at least twice the named rules */
    int n_named;
};

/* Shortest-completion lengths saturate here: nested repetitions ({1000} inside {1000}...)
 * could otherwise overflow, and a need this large is "more than any budget" anyway. */
#define GRAM_NEED_INF (1u << 30)

/* The flattened grammar: alternatives are runs of elements ended by E_END; rule r's
 * alternatives start at alts[alt_off[r] .. alt_off[r+1]). rest[pos] bounds the tokens
 * that finish the alternative holding pos from pos on (E_END: 0; a rule reference costs its
 * cheapest sentence; a run of byte classes the fewest tokens that spell it, as
 * gram_need_tables' run cost says), so the sum of rest[] over a matcher stack's entries
 * bounds the tokens that finish it (the budget-aware closer, grammar.h). */
struct gram {
    struct gelem *el;
    uint32_t n_el;
    uint64_t (*cls)[4];
    uint32_t n_cls;
    uint32_t *alt_off;
    uint32_t *alts;
    uint32_t n_rules;
    uint32_t root;
    uint32_t *rest;  /* n_el entries, saturated at GRAM_NEED_INF (gram_need_tables) */
    uint32_t uq_cls; /* the unique-quote class + 1 (0: none), see gb_unique_quote */
};

/* FNV-1a over p[0..n), from h: the keys of the rule names, the grammar LRU and the mask
 * cache. */
static inline uint64_t gram_hash_bytes(const void *p, size_t n, uint64_t h) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

void gb_init(struct gbuild *b);
void gb_free(struct gbuild *b);
/* Rule id by name, created undefined when new (-1 past GRAMMAR_MAX_RULES). */
int gb_rule(struct gbuild *b, const char *name, size_t len, size_t pos);
int gb_anon(struct gbuild *b);
/* Starts a new alternative of rule r; returns it. */
struct galt *gb_alt(struct gbuild *b, int r);
/* Appends to alternative a. -1 past GRAMMAR_MAX_ELEMS. */
int gb_class(struct gbuild *b, struct galt *a, const uint64_t bits[4]);
int gb_byte(struct gbuild *b, struct galt *a, uint8_t c);
int gb_ref(struct gbuild *b, struct galt *a, int rule);
int gb_copy(struct gbuild *b, struct galt *a, const struct gelem *e, int n);
/* Appends the unique quote: a '"' that closes a string item of an array, consumed only
 * where the item differs from the array's earlier items (GBNF `%unique-quote`; the check
 * reads the text, so the matcher makes it: uniq.h). One class, never shared with a plain
 * '"'. */
int gb_unique_quote(struct gbuild *b, struct galt *a);

/* The cost of a run of byte classes, elements [p, q) of one alternative: cost[i - p] for
 * i in [p, q) = the fewest tokens that spell elements i..q-1 (GRAM_NEED_INF: none can). */
typedef void (*gram_run_cost)(void *ctx, const struct gram *g, uint32_t p, uint32_t q,
                              uint32_t *cost);
/* (Re)computes g->rest with run costs from fn (NULL: one per byte). */
void gram_need_tables(struct gram *g, gram_run_cost fn, void *ctx);

/* Checks and flattens b into g with start rule `root` (rest left NULL: gram_need_tables
 * fills it). 0, or -1 with err. */
int gb_finish(struct gbuild *b, const char *root, struct gram *g, char *err);
void gram_free(struct gram *g);

/* Code point sets: ranges [lo, hi]; cps_norm sorts and merges, cps_negate complements
 * over [0, U+10FFFF]. */
struct cpset {
    uint32_t (*r)[2];
    int n, cap;
};
void cps_add(struct cpset *s, uint32_t lo, uint32_t hi);
void cps_norm(struct cpset *s);
void cps_negate(struct cpset *s);

/* GBNF text -> builder (gbnf.c). 0, or -1 with err naming line and column. */
int gbnf_parse(struct gbuild *b, const char *text, size_t len, char *err);

#endif
