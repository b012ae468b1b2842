/* Chat-template engine: a Jinja subset large enough for real chat templates, rendering
 * byte for byte what jinja2 renders under HF's settings (trim_blocks, lstrip_blocks,
 * loop controls, raise_exception, HF's tojson). Parse once (errors at load time), render
 * many times; a template is read-only while rendering, so threads may share it. */
#ifndef TPD_TOK_JINJA_H
#define TPD_TOK_JINJA_H

#include <stddef.h>

#include "jinja_value.h"

struct jtemplate;

int jinja_load(struct jtemplate **out, const char *src, size_t len, char *err);
void jinja_free(struct jtemplate *t);
/* Name of the first filter or test the template uses that the engine lacks, or NULL. A
 * render that reaches it fails with an error (as jinja2 would only fail there). */
const char *jinja_unsupported(const struct jtemplate *t);

/* Renders with the variables of ctx (a JV_DICT built in arena a, which also holds every
 * value made while rendering). *out is malloc'd, NUL-terminated. Returns 0 or -1 + err. */
int jinja_render(const struct jtemplate *t, struct arena *a, struct jv ctx, char **out,
                 size_t *out_len, char *err);

/* ---- shared with jinja_lib.c ---- */
struct jnode;
struct scope {
    struct jv vars; /* JV_DICT */
    struct scope *parent;
};

struct rs {
    struct arena *a;
    struct jv globals;
    char *err;
    int failed;
    int brk;          /* 1 break, 2 continue pending */
    int depth;
    size_t steps;
    size_t out_limit;
};

enum jfunc_kind { JF_BUILTIN, JF_METHOD, JF_MACRO, JF_CYCLE };
struct jfunc {
    enum jfunc_kind kind;
    const char *name;   /* builtin or method name */
    struct jv self;     /* bound object for methods / loop for cycle */
    const struct jnode *macro;
    struct scope *closure;
};

/* Sets the render error (first one wins); returns jv_undef() for convenience. */
struct jv rs_fail(struct rs *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct jv rs_str(struct rs *r, const char *s, size_t n);
/* Python str(v) as a new string value. */
struct jv rs_to_str(struct rs *r, struct jv v);
/* Calls a function value with evaluated arguments. */
struct jv rs_call(struct rs *r, struct jv fn, struct jv *args, size_t n, struct jv *kwn,
                  struct jv *kwv, size_t nkw);

#endif
