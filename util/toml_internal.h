/* Private to the tpd_toml library: the node layout, the parser's cursor, and the helpers its
 * files share (toml.c: tree and lookups; toml_parse.c: document; toml_value.c: scalars). */
#ifndef TPD_TOML_INTERNAL_H
#define TPD_TOML_INTERNAL_H

#include "toml.h"

enum {
    TOML_F_ROOT = 1,   /* owns the file name string */
    TOML_F_FROZEN = 2, /* inline table or array value: nothing may be added to it later */
    TOML_F_HEADER = 4, /* table declared by [header], or array made by [[header]] */
    TOML_F_DOTTED = 8, /* table made or extended by dotted keys, in section `section` */
    TOML_F_AOT = 16,   /* array of tables made by [[header]] */
};

struct toml_entry {
    char *key; /* NUL-terminated copy; klen bytes */
    size_t klen;
    struct toml_node *val;
};

struct toml_node {
    uint8_t type;
    uint8_t flags;
    uint16_t depth; /* root 0; each table or array level adds one */
    int line;
    uint32_t section; /* for TOML_F_DOTTED: the section (header count) that used dotted keys */
    const char *file; /* the root's copy */
    union {
        struct {
            struct toml_entry *e;
            size_t n, cap;
            uint32_t *idx; /* hash slots holding entry index + 1, once the table is big */
            size_t idx_cap;
        } tab;
        struct {
            struct toml_node **v;
            size_t n, cap;
        } arr;
        struct {
            char *s; /* strings, and the date-time kinds as normalized text */
            size_t len;
        } str;
        int64_t i;
        double f;
        bool b;
    } u;
};

/* Tree (toml.c). Out of memory is fatal. */
struct toml_node *toml_node_new(enum toml_type t, int line, const char *file);
void toml_node_free(struct toml_node *n);
struct toml_node *toml_table_find(const struct toml_node *t, const char *key, size_t klen);
void toml_table_add(struct toml_node *t, const char *key, size_t klen, struct toml_node *val);
void toml_array_push(struct toml_node *a, struct toml_node *v);
const char *toml_type_phrase(enum toml_type t); /* "an integer", for messages */

struct toml_parser {
    const char *s;
    size_t len, pos;
    int line;
    const char *file;
    char *err;
    struct toml_node *root;
    struct toml_node *cur;  /* table the current section's key/values go into */
    uint32_t section;       /* headers seen so far */
    char section_name[280]; /* "[server]" or "the root table", for messages */
};

/* Formats "FILE:LINE: message" into p->err; returns -1. */
int toml_perr(struct toml_parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes c for a message: 'x', or U+000D for control bytes, into TOML_CHAR_NAME bytes. */
#define TOML_CHAR_NAME 32
const char *toml_char_name(unsigned char c, char *buf);

/* Scalars (toml_value.c). */
int toml_check_utf8(struct toml_parser *p);
/* At a ' or ": any of the four string forms (multi-line ones only if allow_multi). Returns a
 * malloc'd NUL-terminated string. */
int toml_lex_string(struct toml_parser *p, bool allow_multi, char **out, size_t *len);
/* At a bare value: boolean, integer, float or one of the date-time kinds. */
int toml_lex_bare(struct toml_parser *p, struct toml_node **out);

#endif
