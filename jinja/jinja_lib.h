/* The chat-template engine's library: the render state every evaluator layer shares,
 * str/dict methods, globals (range, namespace, raise_exception, strftime_now), loop objects
 * and string helpers with Python's semantics. Filters and tests build on it in
 * jinja_filters.h; jinja.c evaluates the AST with both. Used by the rendering thread only:
 * one struct rs per render. */
#ifndef TPD_JINJA_LIB_H
#define TPD_JINJA_LIB_H

#include <stddef.h>
#include <stdint.h>

#include "jinja_value.h"

struct jnode;

/* A variable scope: a macro call or loop body opens one over its parent. */
struct scope {
    struct jv vars; /* JV_DICT */
    struct scope *parent;
};

/* The state of one render; every value it makes lives in arena a. */
struct rs {
    struct arena *a;
    struct jv globals;
    char *err;
    int failed;
    int brk; /* 1 break, 2 continue pending */
    int depth;
    size_t steps;
    size_t out_limit;
};

enum jfunc_kind { JF_BUILTIN, JF_METHOD, JF_MACRO, JF_CYCLE };
struct jfunc {
    enum jfunc_kind kind;
    const char *name; /* builtin or method name */
    struct jv self;   /* bound object for methods / loop for cycle */
    const struct jnode *macro;
    struct scope *closure;
};

/* Sets the render error (first one wins); returns jv_undef() for convenience. */
struct jv rs_fail(struct rs *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
struct jv rs_str(struct rs *r, const char *s, size_t n);
/* The bytes of b as a new string value (a render error if b ran out of memory); frees b. */
struct jv rs_take_buf(struct rs *r, struct buf *b);
/* v with every string in it marked as request data (copies; v is not changed). */
struct jv rs_taint(struct rs *r, struct jv v);
/* Python str(v) as a new string value. */
struct jv rs_to_str(struct rs *r, struct jv v);

int64_t jl_int(struct jv v);
double jl_num(struct jv v);
int64_t jl_strlen(struct jv s); /* in codepoints */
struct jv jl_str_slice(struct rs *r, struct jv s, int64_t start, int64_t stop, int64_t step);
int jl_contains(struct rs *r, struct jv container, struct jv item);
/* A list to iterate over (dict -> keys, str -> chars, undefined -> empty). */
struct jv jl_iterable(struct rs *r, struct jv v);
struct jv jl_loop_object(struct rs *r, struct jv items, size_t i);
/* Bound method value for obj.name, or undefined when obj has no such method. */
struct jv jl_method(struct rs *r, struct jv obj, const char *name);
struct jv jl_global(struct rs *r, const char *name);
struct jv jl_call_builtin(struct rs *r, struct jfunc *f, struct jv *args, size_t n, struct jv *kwn,
                          struct jv *kwv, size_t nkw);

/* ---- string helpers (also used by jinja_filters.c) ---- */
struct cps {
    uint32_t *v;
    size_t n;
}; /* a string as codepoints, in the render arena */
int jl_to_cps(struct rs *r, struct jv s, struct cps *c);
struct jv jl_from_cps(struct rs *r, const uint32_t *v, size_t n);
int jl_py_space(uint32_t c); /* Python's str.isspace */
struct jv jl_strip(struct rs *r, struct jv s, struct jv chars, int left, int right);
/* mode 0 lower, 1 upper, 2 capitalize, 3 jinja2's title */
struct jv jl_map_case(struct rs *r, struct jv s, int mode);
struct jv jl_split(struct rs *r, struct jv s, struct jv sep, int64_t maxsplit);
struct jv jl_replace(struct rs *r, struct jv s, struct jv old, struct jv new, int64_t count);
struct jv jl_items_of(struct rs *r, struct jv d); /* dict -> list of [key, value] */
/* positional-or-keyword argument pos/name, or def */
struct jv jl_arg(struct jv *args, size_t n, struct jv *kwn, struct jv *kwv, size_t nkw, size_t pos,
                 const char *name, struct jv def);

#endif
