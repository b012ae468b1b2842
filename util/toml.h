/* TOML v1.0.0 parser: reads a buffer into a tree of tables, arrays and typed values, each
 * remembering its source line, so the daemon can read tpd.toml and say "FILE:LINE: why".
 * No global state: any thread may parse; a finished tree is read-only and may be shared. */
#ifndef TPD_TOML_H
#define TPD_TOML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOML_MAX_DEPTH 256         /* tables and arrays nested deeper than this are refused */
#define TOML_MAX_INPUT (64u << 20) /* bytes; a config file, not a data set */

/* The tags of toml-test's JSON (toml_type_name) name the same kinds. */
enum toml_type {
    TOML_TABLE,
    TOML_ARRAY, /* values in [..], or tables from [[header]] */
    TOML_STRING,
    TOML_INTEGER, /* int64_t */
    TOML_FLOAT,   /* double */
    TOML_BOOL,
    TOML_DATETIME,       /* offset date-time:  1979-05-27T07:32:00.5-07:00 */
    TOML_DATETIME_LOCAL, /* 1979-05-27T07:32:00 */
    TOML_DATE_LOCAL,     /* 1979-05-27 */
    TOML_TIME_LOCAL,     /* 07:32:00.999 */
};

struct toml_node;

/* Parses len bytes (NUL bytes and bad UTF-8 inside are errors, not terminators). On success
 * *root is a table to free with toml_free. On failure returns -1, *root is NULL and err holds
 * "FILE:LINE: message"; filename is only used in messages (NULL reads as "<input>"). */
int toml_parse(const char *buf, size_t len, const char *filename, struct toml_node **root,
               char *err);
void toml_free(struct toml_node *root);

enum toml_type toml_type(const struct toml_node *n);
const char *toml_type_name(enum toml_type t); /* "table", "integer", "datetime-local", ... */
int toml_line(const struct toml_node *n);     /* line that defined it, from 1 */
const char *toml_file(const struct toml_node *n);

/* Tables keep their keys in definition order; arrays their items. Out of range gives NULL. */
size_t toml_len(const struct toml_node *n); /* entries of a table, items of an array, else 0 */
const char *toml_key(const struct toml_node *table, size_t i, size_t *len); /* len may be NULL;
                                                                              keys may hold NUL */
struct toml_node *toml_value(const struct toml_node *table, size_t i);
struct toml_node *toml_item(const struct toml_node *array, size_t i);

/* One key, taken whole (it may contain dots). */
struct toml_node *toml_table_get(const struct toml_node *table, const char *key);
/* A dotted path of keys, "server.socket"; NULL if any part is missing or not a table. */
struct toml_node *toml_get(const struct toml_node *table, const char *path);

/* Typed reads of one node: 0, or -1 with "FILE:LINE: expected an integer, found a string".
 * The string is NUL-terminated; len (may be NULL) counts bytes, as \u0000 may sit inside.
 * toml_double also takes integers. toml_datetime takes the four date/time kinds and gives
 * RFC 3339 text with 'T' and 'Z' upper case and the fraction digits as written. */
int toml_string(const struct toml_node *n, const char **s, size_t *len, char *err);
int toml_int(const struct toml_node *n, int64_t *v, char *err);
int toml_double(const struct toml_node *n, double *v, char *err);
int toml_bool(const struct toml_node *n, bool *v, char *err);
int toml_datetime(const struct toml_node *n, const char **s, char *err);

/* Typed reads by dotted path, for config loading over defaults: 0 when found (out set), 1 when
 * absent (out untouched, err untouched), -1 with "FILE:LINE: 'server.port' must be an integer,
 * not a string" (also when a part of the path is not a table). toml_get_string refuses
 * strings holding a NUL byte. */
int toml_get_string(const struct toml_node *table, const char *path, const char **s, char *err);
int toml_get_int(const struct toml_node *table, const char *path, int64_t *v, char *err);
int toml_get_double(const struct toml_node *table, const char *path, double *v, char *err);
int toml_get_bool(const struct toml_node *table, const char *path, bool *v, char *err);

#endif
