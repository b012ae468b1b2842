/* Jinja filters and tests for the chat-template engine, with jinja2's and Python's
 * semantics, and whether a name is one of them. Used by the rendering thread. */
#ifndef TPD_JINJA_FILTERS_H
#define TPD_JINJA_FILTERS_H

#include <stddef.h>

#include "jinja_lib.h"

/* Whether a filter / test of that name is implemented (the map and select filters ask). */
int jinja_known_filter(const char *name);
int jinja_known_test(const char *name);

struct jv jl_filter(struct rs *r, const char *name, struct jv v, struct jv *args, size_t n,
                    struct jv *kwn, struct jv *kwv, size_t nkw);
int jl_test(struct rs *r, const char *name, struct jv v, struct jv *args, size_t n);
/* markupsafe.escape: Markup stays, anything else is escaped into Markup. */
struct jv jl_escape(struct rs *r, struct jv v);

#endif
