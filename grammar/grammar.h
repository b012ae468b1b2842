/* Constrained decoding: a context-free grammar over bytes, compiled from llama.cpp's GBNF
 * notation, a regular expression, a JSON Schema or "any JSON object", and matched token by
 * token against a model's vocabulary. Rank 0 only. A grammar_vocab is built once per
 * tokenizer at load and shared by every thread; compiled grammars are immutable, cached by
 * their text and reference-counted (any thread); a grammar_matcher is one sequence's state,
 * used by one thread at a time (the step loop).
 *
 * Front ends all produce GBNF text, so that callers can compose grammars: the JSON Schema
 * and regex converters append rules to a GBNF text under a name the caller chooses (tool
 * calling wraps a function's parameter schema in the model's call syntax this way).
 *
 * GBNF as in llama.cpp (grammars/README.md): `name ::= alternatives`, "literals" and
 * [character classes] over Unicode code points (UTF-8 on the wire), `.`, ( groups ),
 * postfix * + ? {m} {m,} {m,n}, # comments; the start rule is `root`. Left recursion is
 * refused (as llama.cpp does).
 *
 * Whitespace policy of the JSON grammars (JSON Schema and json_object): llama.cpp's, after
 * `{ [ : ,` and every key and value inside a container: nothing, one space, or one newline
 * followed by at most 20 spaces or tabs, so output may be compact or pretty-printed but the
 * model cannot emit whitespace without end; nothing after the root value, whose end is then
 * the only way on. The rules of grammar_gbnf_from_json_schema and grammar_gbnf_json_value
 * produce values without trailing whitespace. Numbers have at most 16 integer and 16
 * fraction digits. */
#ifndef TPD_GRAMMAR_H
#define TPD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "../util/sbuf.h"

/* Bounds on untrusted grammar input (each is an error naming itself when exceeded). */
/* bytes of a schema, regex or GBNF text given (a tool-call grammar's GBNF too): real
 * schemas reach 1.3 MB (Kubernetes); the cost of what they compile to is bounded by the
 * element, rule and compile-time limits, not by the text */
#define GRAMMAR_MAX_TEXT (4u << 20)
#define GRAMMAR_MAX_GBNF (32u << 20) /* bytes of the GBNF a schema or regex converts to */
#define GRAMMAR_MAX_ELEMS (1u << 20) /* compiled grammar elements */
#define GRAMMAR_MAX_RULES (1u << 17)
#define GRAMMAR_MAX_NESTING 64   /* schema / regex / GBNF group nesting */
#define GRAMMAR_MAX_REPEAT 1000  /* m, n in {m,n}; minItems/maxItems; maxLength */
#define GRAMMAR_MAX_DEPTH 512    /* matcher stack depth (nesting of the output) */
#define GRAMMAR_MAX_STACKS 16384 /* the most grammar_limits.max_stacks may be */

/* What matching a grammar may cost: the limits that keep every token's mask and advance
 * bounded whatever the grammar (the [grammar] config keys). A compiled grammar's start
 * state and its first mask must fit them, or grammar_compile refuses it naming the limit;
 * a state past them later stops the matcher (grammar_matcher_error). */
struct grammar_limits {
    int max_stacks;        /* parses one state may hold (an ambiguous grammar has many, an enum or
                            an object one per value or property): 1..GRAMMAR_MAX_STACKS */
    long max_token_work;   /* work units one token's mask or advance may take: an expansion step,
                            a stack added, a trie node walked (each at most tens of ns) */
    double max_compile_ms; /* wall time of one compilation, the first mask included */
};
/* the defaults (those of the config keys too) */
#define GRAMMAR_DEFAULT_MAX_STACKS 1024
#define GRAMMAR_DEFAULT_MAX_TOKEN_WORK (1l << 22)
#define GRAMMAR_DEFAULT_MAX_COMPILE_MS 2000.0

enum grammar_kind {
    GRAMMAR_GBNF,        /* text: GBNF, start rule `root` */
    GRAMMAR_REGEX,       /* text: a regular expression, matched whole (Python re.fullmatch) */
    GRAMMAR_JSON_SCHEMA, /* text: a JSON Schema (JSON) */
    GRAMMAR_JSON_OBJECT, /* text ignored: any JSON object (response_format json_object) */
};

/* The vocabulary as the grammar sees it: each token's bytes (tokenizer_token_bytes), which
 * tokens grammars may produce (special/control tokens never; usable[id] == 0), and the
 * end-of-generation tokens, allowed exactly where the grammar may end. */
struct grammar_vocab;

struct grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                                        const uint8_t *usable, const int32_t *eog, int n_eog);
void grammar_vocab_free(struct grammar_vocab *v);
/* Sets the limits of the grammars compiled against v from now on (the defaults above until
 * then). Before v is shared: not thread-safe. */
void grammar_vocab_set_limits(struct grammar_vocab *v, const struct grammar_limits *lim);
int grammar_vocab_size(const struct grammar_vocab *v);
/* How JSON Schemas compiled against v from now on are read, GRAMMAR_SCHEMA_* flags (0, the
 * default: the generation reading). OPEN_OBJECTS: an object schema with properties and no
 * additionalProperties takes any other key too, as the JSON Schema specification reads it;
 * without it only its declared keys (and the required ones) are written, as llama.cpp's
 * converter, XGrammar (vLLM's default) and OpenAI's strict mode generate. EVERY_TYPE: a
 * schema without type whose keywords belong to one type (properties, items, minLength,
 * minimum, ...) takes values of every type, those keywords constraining theirs, as the
 * specification reads it; without it it is written as values of that type only (a model
 * asked for {"minLength": 1} means a string). Before v is shared: not thread-safe. */
enum { GRAMMAR_SCHEMA_OPEN_OBJECTS = 1, GRAMMAR_SCHEMA_EVERY_TYPE = 2 };
void grammar_vocab_set_schema_reading(struct grammar_vocab *v, unsigned flags);
/* The memory the grammars compiled against v may keep: their compiled form and cached
 * token masks together (default GRAMMAR_CACHE_BYTES). Past it the least recently used
 * grammars leave the cache, and a mask that does not fit is computed each time it is
 * needed instead of kept. Grammars in use count until their last user drops them. */
#define GRAMMAR_CACHE_BYTES (64ull << 20)
void grammar_vocab_set_cache_bytes(struct grammar_vocab *v, size_t bytes);
/* The bytes those grammars hold now (any thread). */
size_t grammar_vocab_cache_bytes(const struct grammar_vocab *v);

/* A compiled grammar bound to one vocabulary. */
struct grammar;

/* Compiles text[0..len) of the given kind, or returns a cached grammar compiled from the
 * same kind and text (an LRU of the last 64, within the vocabulary's cache bytes). NULL
 * with err (ERR_LEN bytes) naming the problem: an unsupported JSON Schema keyword, the
 * position of a parse error, an unsatisfiable schema or grammar, a limit exceeded (those of
 * grammar_limits: "too costly to match: ..." with the limit's key and value). Bounded time
 * and memory. Computes the start state's mask too (cached in the grammar), so a request's
 * first token costs the step loop no walk of the vocabulary. The caller owns one reference. */
struct grammar *grammar_compile(struct grammar_vocab *v, enum grammar_kind kind, const char *text,
                                size_t len, char *err);
void grammar_ref(struct grammar *g);
void grammar_unref(struct grammar *g);

/* Converters to GBNF. Each appends rules to out: `name ::= ...` and helpers named
 * `name-...`, so several can share one text under distinct names (names: [A-Za-z0-9-]).
 * Return 0, or -1 with err. */
/* reading: GRAMMAR_SCHEMA_* flags, as grammar_vocab_set_schema_reading's. */
int grammar_gbnf_from_json_schema(const char *schema, size_t len, const char *name,
                                  unsigned reading, struct sbuf *out, char *err);
int grammar_gbnf_from_regex(const char *re, size_t len, const char *name, struct sbuf *out,
                            char *err);
/* Any JSON value (`name`) and any JSON object (`name-object`), with the whitespace above. */
void grammar_gbnf_json_value(const char *name, struct sbuf *out);

/* One sequence's position in a grammar. */
struct grammar_matcher;

struct grammar_matcher *grammar_matcher_new(struct grammar *g); /* takes its own reference */
void grammar_matcher_free(struct grammar_matcher *m);

/* The tokens allowed next, as bits (bit id of mask[id / 64]) over the vocabulary:
 * tokens whose bytes keep the output a prefix of the grammar's language, plus the
 * end-of-generation tokens where the grammar may end. Never empty: at a dead end (a limit
 * reached) the end-of-generation tokens are allowed. mask has (n_vocab + 63) / 64 words. */
void grammar_matcher_mask(struct grammar_matcher *m, uint64_t *mask);
/* Sets logits[id] = -INFINITY for every token not in the mask (n = n_vocab). */
void grammar_matcher_apply(struct grammar_matcher *m, float *logits, int n);
/* The budget-aware closer: the mask when at most `budget` more tokens may be generated,
 * this one included (max_tokens and the context both count), chosen so that the output is
 * a complete sentence of the grammar by the time the budget is spent. It rests on need
 * (grammar_matcher_need): an upper bound on the tokens that finish the output so far,
 * the cheapest completion with each literal run spelled in the fewest of the vocabulary's
 * tokens (JSON's keys cost a token or two, not a token per byte), which always has a
 * token that lowers it by one. A token is allowed when the plain mask allows it and the
 * need after it is at most budget - 1, so that each step keeps need <= the budget left;
 * where that cannot hold (need >= budget: force mode) the tokens that lower the need
 * are. Where the need at the start exceeds the budget, force mode from the first token
 * finishes as soon as it can, but the output is then cut as without the closer. Never
 * empty (the plain mask's rule at dead ends; the plain mask where no token fits, which a
 * vocabulary with every byte as a token never meets). Returns 1 when the budget took out
 * some token the plain mask allows (the caller reports finish "length": the content was
 * shortened to fit), else 0; budget >= GRAM_NEED_INF (2^30) is the plain mask. Costs a
 * comparison per stack while the budget is far; near the end, a pass over the tokens that
 * change the need and a plain mask to compare with. */
int grammar_matcher_mask_budget(struct grammar_matcher *m, uint64_t *mask, int64_t budget);
/* grammar_matcher_apply with grammar_matcher_mask_budget's mask. Returns 1 when the budget
 * took out the token of highest logit that the plain mask allows (the model's first
 * choice: the caller reports finish "length", the content was shortened to fit), else 0
 * (also when it took out only tokens the model preferred less). */
int grammar_matcher_apply_budget(struct grammar_matcher *m, float *logits, int n, int64_t budget);
/* The closer's need: an upper bound on the tokens that finish the output so far (0:
 * complete or ended; 2^30 saturates it). */
uint32_t grammar_matcher_need(const struct grammar_matcher *m);
/* Advances on token id. Returns 0, or -1 (state unchanged) when the grammar does not
 * allow it. An end-of-generation token ends the matcher. */
int grammar_matcher_accept(struct grammar_matcher *m, int32_t id);
/* Advances on raw bytes (a forced prefix). 0, or -1 (state unchanged). */
int grammar_matcher_accept_bytes(struct grammar_matcher *m, const char *s, size_t n);
/* 1 when the output so far is a complete sentence of the grammar. */
int grammar_matcher_can_end(const struct grammar_matcher *m);
/* 1 when nothing but the end may follow (the grammar is complete and cannot continue). */
int grammar_matcher_done(const struct grammar_matcher *m);
/* Undoes the last k accepted tokens (speculative decoding); at most the last 64.
 * Returns 0, or -1 (state unchanged) when fewer are remembered. */
int grammar_matcher_rollback(struct grammar_matcher *m, int k);
/* NULL, or why the matcher stopped: a mask or an advance went past the grammar's limits
 * (struct grammar_limits), the limit named with its key and value. Sticky: from then on its
 * masks allow the end-of-generation tokens only (rollback does not clear it), accept takes
 * those only, and every call costs a constant. */
const char *grammar_matcher_error(const struct grammar_matcher *m);
/* The work units the last call (mask, accept) spent, for benchmarks: at most the grammar's
 * max_token_work. */
long grammar_matcher_work(const struct grammar_matcher *m);

#endif
