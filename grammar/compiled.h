/* A compiled grammar (grammar.h's struct grammar): the flattened grammar, its need tables
 * costed over one vocabulary's tokens, and its cache of per-stack masks. compile.c builds
 * it from any front end's text and keeps the vocabulary's LRU of compiled grammars;
 * mask_cache.c fills its cache. Only the layout lives here (no .c of its own), so that those
 * two depend on it and not on each other both ways. Immutable once compiled, but for the
 * cache (mask_cache.h) and the reference count: any thread. */
#ifndef TPD_GRAMMAR_COMPILED_H
#define TPD_GRAMMAR_COMPILED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gram_ir.h"
#include "grammar.h"
#include "mask_cache.h"

struct grammar {
    atomic_int refs;
    struct grammar_vocab *v;
    struct gram g;
    enum grammar_kind kind;
    char *text;
    size_t len;
    uint64_t hash;
    struct grammar_limits lim; /* the vocabulary's when it was compiled */
    double
        deadline; /* while compiling: clock_now() by which its first mask must be done (0 after) */
    size_t bytes; /* the compiled form's and the text's, in the vocabulary's cache_bytes */
    struct mask_cache cache;
};

#endif
