/* uniqueItems over strings, checked on the text (the unique quote, gram_ir.h's
 * gb_unique_quote): whether the JSON string item that the text's last byte closes differs,
 * as a decoded value ("a" and "\u0061" are the same), from every earlier item of its array.
 * Reads the text backwards: the item's opening quote is the first unescaped '"' before the
 * last byte; before it come whitespace and ',' then the previous item, or the array's '['
 * (the JSON Schema grammar writes nothing else there). Pure: any thread. */
#ifndef TPD_GRAMMAR_UNIQ_H
#define TPD_GRAMMAR_UNIQ_H

#include <stddef.h>

#include <stdint.h>

/* What the checks of one accepted text share (a matcher holds one): the array's earlier
 * items as hashes of their decoded values, sorted, and the current item decoded as far as
 * the accepted text goes, so that checking a token costs its own bytes and a lookup, not a
 * reading of the whole array. Made again when the text changes (gen). */
struct uniq_cache {
    unsigned long gen; /* the text's generation it was made for (0: never) */
    int usable;        /* 0: the accepted text does not end inside an item */
    uint64_t h;        /* the hash of the current item's code points before `safe` */
    size_t safe;       /* where its still undecoded bytes start (at most 12 from the end) */
    uint64_t *items;
    int n, cap;
};

/* A text in two pieces: what the matcher accepted, then the bytes of the token under test
 * up to and including the byte being consumed; uc (may be NULL) the cache of that accepted
 * text, gen its generation (never 0: a new text, a new number). */
struct gtext {
    const char *a;
    size_t na;
    const char *b;
    size_t nb;
    struct uniq_cache *uc;
    unsigned long gen;
};

/* 1 when the item differs from every earlier one (or the text holds no such item), 0 when it
 * repeats one. *cost += the bytes read, for the caller's meter. */
int uniq_string_ok(const struct gtext *t, long *cost);
void uniq_cache_free(struct uniq_cache *uc);

#endif
