/* Values of the chat-template engine (jinja.h): Python-like none/bool/int/float/str/
 * list/dict plus callables, allocated in an arena freed at once, with Python's str(),
 * repr() and json.dumps() spellings so output matches jinja2 byte for byte. */
#ifndef TPD_TOK_JINJA_VALUE_H
#define TPD_TOK_JINJA_VALUE_H

#include <stddef.h>
#include <stdint.h>

struct arena {
    struct arena_chunk *head;
    size_t used, total;
    size_t limit; /* bytes; 0 = unlimited */
};
void *arena_alloc(struct arena *a, size_t n); /* zeroed; NULL when out of memory/limit */
void arena_free(struct arena *a);

enum jv_type { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC };

struct jv;
/* Byte range of a string (or of rendered output) that came from request data (the
 * messages JSON): the chat encoder tokenizes it without special-token parsing. */
struct jspan {
    size_t off, len;
};
struct jstr {
    size_t len;
    int markup; /* markupsafe.Markup */
    size_t nsp; /* data spans, sorted, disjoint, not adjacent; 0 = all template text */
    struct jspan *sp;
    char s[];
};
struct jlist {
    size_t n, cap;
    struct jv *v;
    int gen; /* a jinja2 generator (map, select...) */
};
struct jdict {
    size_t n, cap;
    struct jv *k, *v;
    int ns; /* a namespace() object */
};
struct jfunc;

struct jv {
    enum jv_type t;
    union {
        int b;
        int64_t i;
        double f;
        struct jstr *s;
        struct jlist *l;
        struct jdict *d;
        struct jfunc *fn;
    } u;
};

struct buf {
    char *p;
    size_t n, cap;
    int too_deep; /* output refused: a value nested deeper than its printers go (out of memory is
                     fatal) */
    struct jspan *sp; /* data spans of p (malloc'd) */
    size_t nsp, capsp;
};
void buf_put(struct buf *b, const char *s, size_t n);
void buf_puts(struct buf *b, const char *s);
/* Appends a string value's bytes with its data spans. */
void buf_put_jstr(struct buf *b, const struct jstr *s);
/* Marks b's bytes [from, b->n) as data. */
void buf_mark(struct buf *b, size_t from);
void buf_free(struct buf *b);

struct jv jv_undef(void);
struct jv jv_none(void);
struct jv jv_bool(int b);
struct jv jv_int(int64_t i);
struct jv jv_float(double f);
struct jv jv_str(struct arena *a, const char *s, size_t n); /* JV_UNDEF-typed NULL on oom */
/* The same string as request data throughout (v itself when it already is). */
struct jv jv_str_as_data(struct arena *a, struct jv v);
/* Whether any string in v (nested at most MAX_VALUE_DEPTH deep) holds data. */
int jv_has_data(struct jv v);
struct jv jv_list(struct arena *a);
struct jv jv_dict(struct arena *a);
int jv_list_push(struct arena *a, struct jv list, struct jv v);
int jv_dict_set(struct arena *a, struct jv dict, struct jv key, struct jv v);
/* Returns a pointer to the value, or NULL. */
struct jv *jv_dict_get(struct jv dict, const char *key, size_t len);
struct jv *jv_dict_getv(struct jv dict, struct jv key);

int jv_truthy(struct jv v);
int jv_equal(struct jv a, struct jv b);
/* Ordering for <, sort: returns -1/0/1 in *out, or -1 when the types do not compare. */
int jv_compare(struct jv a, struct jv b, int *out);
const char *jv_type_name(struct jv v);

/* Python str(v) / repr(v) / json.dumps(v, ensure_ascii=False, indent, sort_keys). */
void jv_str_append(struct buf *b, struct jv v);
void jv_repr_append(struct buf *b, struct jv v);
#define JV_JSON_SORT_KEYS 1
#define JV_JSON_ASCII 2 /* ensure_ascii */
void jv_json_append(struct buf *b, struct jv v, int indent, int flags, int depth);

/* JSON text (cJSON) -> value; data: its strings (keys too) are marked request data.
 * Returns 0, or -1 when out of memory. */
struct cJSON;
int jv_from_cjson(struct arena *a, const struct cJSON *j, int data, struct jv *out);

#endif
