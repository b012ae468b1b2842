/* uniqueItems over strings, checked on the text (the unique quote, gram_ir.h's
 * gb_unique_quote): whether the JSON string item that the text's last byte closes differs,
 * as a decoded value ("a" and "\u0061" are the same), from every earlier item of its array.
 * Reads the text backwards: the item's opening quote is the first unescaped '"' before the
 * last byte; before it come whitespace and ',' then the previous item, or the array's '['
 * (the JSON Schema grammar writes nothing else there). Pure: any thread. */
#ifndef TPD_GRAMMAR_UNIQ_H
#define TPD_GRAMMAR_UNIQ_H

#include <stddef.h>

/* A text in two pieces: what the matcher accepted, then the bytes of the token under test
 * up to and including the byte being consumed. */
struct gtext {
    const char *a;
    size_t na;
    const char *b;
    size_t nb;
};

/* 1 when the item differs from every earlier one (or the text holds no such item), 0 when it
 * repeats one. *cost += the bytes read, for the caller's meter. */
int uniq_string_ok(const struct gtext *t, long *cost);

#endif
