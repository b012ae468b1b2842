/* Chat-template engine: a Jinja subset large enough for real chat templates, rendering
 * byte for byte what jinja2 renders under HF's settings (trim_blocks, lstrip_blocks,
 * loop controls, raise_exception, HF's tojson). Parse once (errors at load time), render
 * many times; a template is read-only while rendering, so threads may share it. */
#ifndef TPD_JINJA_H
#define TPD_JINJA_H

#include <stddef.h>

#include "jinja_value.h"

struct jtemplate;

int jinja_load(struct jtemplate **out, const char *src, size_t len, char *err);
void jinja_free(struct jtemplate *t);

/* Renders with the variables of ctx (a JV_DICT built in arena a, which also holds every
 * value made while rendering). *out is malloc'd, NUL-terminated. Returns 0 or -1 + err. */
int jinja_render(const struct jtemplate *t, struct arena *a, struct jv ctx, char **out,
                 size_t *out_len, char *err);
/* The same, also returning the output's data spans (jinja_value.h: bytes that came from
 * strings marked as request data), sorted and disjoint; *spans is malloc'd (NULL if none). */
int jinja_render_spans(const struct jtemplate *t, struct arena *a, struct jv ctx, char **out,
                       size_t *out_len, struct jspan **spans, size_t *n_spans, char *err);

#endif
