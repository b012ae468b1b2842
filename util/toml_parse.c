/* The TOML document parser: expressions line by line, keys, [table] and [[array]] headers,
 * inline tables and arrays, and the spec's rules on which tables may be defined, redefined
 * or extended. Scalars (and the error helpers) come from toml_value.c; the tree from toml.c. */
#include "toml_internal.h"

#include "err.h"
#include "fatal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int at(const struct toml_parser *p) {
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static const char *at_name(const struct toml_parser *p, char *buf) {
    return p->pos < p->len ? toml_char_name((unsigned char)p->s[p->pos], buf) : "end of input";
}

static void skip_ws(struct toml_parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t')) p->pos++;
}

static bool eat_newline(struct toml_parser *p) {
    if (at(p) == '\n') {
        p->pos++;
    } else if (at(p) == '\r' && p->pos + 1 < p->len && p->s[p->pos + 1] == '\n') {
        p->pos += 2;
    } else {
        return false;
    }
    p->line++;
    return true;
}

/* At '#': up to, not including, the newline. Comments may hold no control character but tab. */
static int skip_comment(struct toml_parser *p) {
    char name[TOML_CHAR_NAME];
    for (p->pos++; p->pos < p->len; p->pos++) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '\n') break;
        if (c == '\r') {
            if (p->pos + 1 < p->len && p->s[p->pos + 1] == '\n') break;
            return toml_perr(p, p->line, "carriage return without line feed in comment");
        }
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return toml_perr(p, p->line, "control character %s in comment",
                             toml_char_name(c, name));
    }
    return 0;
}

/* Whitespace, comments and newlines, as allowed between array items. */
static int skip_wcn(struct toml_parser *p) {
    for (;;) {
        skip_ws(p);
        if (at(p) == '#' && skip_comment(p) < 0) return -1;
        if (!eat_newline(p)) return 0;
    }
}

struct key_part {
    char *s;
    size_t len;
};

struct key {
    struct key_part *v;
    size_t n, cap;
};

static void key_free(struct key *k) {
    for (size_t i = 0; i < k->n; i++) free(k->v[i].s);
    free(k->v);
}

/* The first `parts` parts joined by dots, control characters shown as '?', for messages. */
static const char *key_name(const struct key *k, size_t parts, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < parts && o + 1 < cap; i++) {
        if (i) buf[o++] = '.';
        for (size_t j = 0; j < k->v[i].len && o + 1 < cap; j++) {
            unsigned char c = (unsigned char)k->v[i].s[j];
            buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        }
    }
    buf[o] = '\0';
    return buf;
}

static bool bare_key_char(int c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '-';
}

/* simple-key *( "." simple-key ), whitespace allowed around the dots. */
static int parse_key(struct toml_parser *p, struct key *k) {
    char name[TOML_CHAR_NAME];
    for (;;) {
        skip_ws(p);
        if (k->n == TOML_MAX_DEPTH)
            return toml_perr(p, p->line, "key has more than %d dotted parts", TOML_MAX_DEPTH);
        if (k->n == k->cap) {
            size_t cap = k->cap ? 2 * k->cap : 4;
            k->v = xrealloc(k->v, cap * sizeof(*k->v));
            k->cap = cap;
        }
        struct key_part part;
        int c = at(p);
        if (c == '"' || c == '\'') {
            if (toml_lex_string(p, false, &part.s, &part.len) < 0) return -1;
        } else if (bare_key_char(c)) {
            size_t start = p->pos;
            while (bare_key_char(at(p))) p->pos++;
            part.len = p->pos - start;
            part.s = xstrndup(p->s + start, part.len);
        } else {
            return toml_perr(p, p->line, "expected a key, found %s", at_name(p, name));
        }
        k->v[k->n++] = part;
        skip_ws(p);
        if (at(p) != '.') return 0;
        p->pos++;
    }
}

/* A table counts as defined (closed to dotted keys and to a [header] naming it) once a header
 * named it, or once a section that used dotted keys on it is over. */
static bool is_defined(const struct toml_parser *p, const struct toml_node *t) {
    return (t->flags & TOML_F_HEADER) || ((t->flags & TOML_F_DOTTED) && t->section != p->section);
}

static struct toml_node *new_child(struct toml_parser *p, struct toml_node *parent,
                                   const struct key_part *kp, enum toml_type type, int line) {
    if (parent->depth >= TOML_MAX_DEPTH) {
        toml_perr(p, line, "tables nested deeper than %d levels", TOML_MAX_DEPTH);
        return NULL;
    }
    struct toml_node *c = toml_node_new(type, line, p->file);
    toml_table_add(parent, kp->s, kp->len, c);
    c->depth = (uint16_t)(parent->depth + 1);
    return c;
}

/* Finds or makes the tables a dotted key runs through below t, and checks that its last part
 * is new there. Returns the table the value goes into. */
static struct toml_node *keyval_parent(struct toml_parser *p, struct toml_node *t,
                                       const struct key *k, int line, const char *where) {
    char full[256], part[256];
    for (size_t i = 0; i + 1 < k->n; i++) {
        struct toml_node *c = toml_table_find(t, k->v[i].s, k->v[i].len);
        const char *why = NULL;
        char is[48];
        if (!c) {
            if (!(c = new_child(p, t, &k->v[i], TOML_TABLE, line))) return NULL;
        } else if (c->type != TOML_TABLE) {
            snprintf(is, sizeof(is), "is %s", toml_type_phrase((enum toml_type)c->type));
            why = is;
        } else if (c->flags & TOML_F_FROZEN) {
            why = "is an inline table, closed";
        } else if (is_defined(p, c)) {
            why = "is a table already defined";
        }
        if (why) {
            toml_perr(p, line, "cannot set key '%s' in %s: '%s' %s at line %d",
                      key_name(k, k->n, full, sizeof(full)), where,
                      key_name(k, i + 1, part, sizeof(part)), why, c->line);
            return NULL;
        }
        c->flags |= TOML_F_DOTTED;
        c->section = p->section;
        t = c;
    }
    const struct key_part *last = &k->v[k->n - 1];
    struct toml_node *old = toml_table_find(t, last->s, last->len);
    if (old) {
        toml_perr(p, line, "duplicate key '%s' in %s (already set at line %d)",
                  key_name(k, k->n, full, sizeof(full)), where, old->line);
        return NULL;
    }
    return t;
}

static int parse_value(struct toml_parser *p, int depth, struct toml_node **out);

/* key = value, into table t (a section's table or an inline table being built). */
static int parse_keyval(struct toml_parser *p, struct toml_node *t, const char *where) {
    int line = p->line, rc = -1;
    struct key k = {0};
    struct toml_node *parent, *v;
    char name[TOML_CHAR_NAME], full[256];
    if (parse_key(p, &k) < 0) goto out;
    if (at(p) != '=') {
        toml_perr(p, line, "expected '=' after key '%s', found %s",
                  key_name(&k, k.n, full, sizeof(full)), at_name(p, name));
        goto out;
    }
    p->pos++;
    skip_ws(p);
    if (!(parent = keyval_parent(p, t, &k, line, where))) goto out;
    if (parse_value(p, parent->depth + 1, &v) < 0) goto out;
    toml_table_add(parent, k.v[k.n - 1].s, k.v[k.n - 1].len, v);
    rc = 0;
out:
    key_free(&k);
    return rc;
}

static int unterminated(struct toml_parser *p, int line) {
    if (at(p) >= 0) return 0;
    return toml_perr(p, p->line, "unterminated array (opened at line %d)", line);
}

/* Array values are static: frozen, so no [[header]] may append to them later. */
static int parse_array(struct toml_parser *p, int depth, struct toml_node **out) {
    int line = p->line;
    char name[TOML_CHAR_NAME];
    struct toml_node *a = toml_node_new(TOML_ARRAY, line, p->file), *v;
    a->depth = (uint16_t)depth;
    a->flags = TOML_F_FROZEN;
    p->pos++;
    for (;;) {
        if (skip_wcn(p) < 0 || unterminated(p, line) < 0) goto fail;
        if (at(p) == ']') break;
        if (parse_value(p, depth + 1, &v) < 0) goto fail;
        toml_array_push(a, v);
        if (skip_wcn(p) < 0 || unterminated(p, line) < 0) goto fail;
        if (at(p) == ',') {
            p->pos++;
            continue;
        }
        if (at(p) == ']') break;
        toml_perr(p, p->line, "expected ',' or ']' in array (opened at line %d), found %s", line,
                  at_name(p, name));
        goto fail;
    }
    p->pos++;
    *out = a;
    return 0;
fail:
    toml_node_free(a);
    return -1;
}

/* { key = value, ... } on one line, no trailing comma (TOML 1.0); closed once parsed. */
static int parse_inline_table(struct toml_parser *p, int depth, struct toml_node **out) {
    int line = p->line;
    char name[TOML_CHAR_NAME];
    struct toml_node *t = toml_node_new(TOML_TABLE, line, p->file);
    t->depth = (uint16_t)depth;
    p->pos++;
    skip_ws(p);
    if (at(p) != '}') {
        for (;;) {
            skip_ws(p);
            int c = at(p);
            if (c == '\n' || c == '\r' || c == '#') {
                toml_perr(p, p->line, "inline table (opened at line %d) must be on one line", line);
                goto fail;
            }
            if (parse_keyval(p, t, "inline table") < 0) goto fail;
            skip_ws(p);
            if (at(p) == ',') {
                p->pos++;
                continue;
            }
            if (at(p) == '}') break;
            toml_perr(p, p->line, "expected ',' or '}' in inline table, found %s",
                      at_name(p, name));
            goto fail;
        }
    }
    p->pos++;
    t->flags |= TOML_F_FROZEN;
    *out = t;
    return 0;
fail:
    toml_node_free(t);
    return -1;
}

/* depth is the level the value will sit at; it bounds the recursion through nested values. */
static int parse_value(struct toml_parser *p, int depth, struct toml_node **out) {
    int c = at(p);
    if (c == '"' || c == '\'') {
        int line = p->line;
        char *s;
        size_t len;
        if (toml_lex_string(p, true, &s, &len) < 0) return -1;
        struct toml_node *v = toml_node_new(TOML_STRING, line, p->file);
        v->u.str.s = s;
        v->u.str.len = len;
        *out = v;
        return 0;
    }
    if (c == '[' || c == '{') {
        if (depth > TOML_MAX_DEPTH)
            return toml_perr(p, p->line, "values nested deeper than %d levels", TOML_MAX_DEPTH);
        return c == '[' ? parse_array(p, depth, out) : parse_inline_table(p, depth, out);
    }
    return toml_lex_bare(p, out);
}

/* [a.b.c] or [[a.b.c]]: starts a new section. Parts before the last may be made (implicitly),
 * or walked through, including the latest table of an array of tables; the last must be new,
 * or a table only made implicitly so far. */
static int parse_header(struct toml_parser *p) {
    int line = p->line, rc = -1;
    bool aot = p->pos + 1 < p->len && p->s[p->pos + 1] == '[';
    struct key k = {0};
    char full[256], part[256];
    p->pos += aot ? 2 : 1;
    if (parse_key(p, &k) < 0) goto out;
    if (at(p) != ']' || (aot && (p->pos + 1 >= p->len || p->s[p->pos + 1] != ']'))) {
        toml_perr(p, line, "expected '%s' to close the table header", aot ? "]]" : "]");
        goto out;
    }
    p->pos += aot ? 2 : 1;
    p->section++;
    key_name(&k, k.n, full, sizeof(full));
    snprintf(p->section_name, sizeof(p->section_name), aot ? "table [[%s]]" : "table [%s]", full);

    struct toml_node *t = p->root, *c;
    for (size_t i = 0; i + 1 < k.n; i++, t = c) {
        c = toml_table_find(t, k.v[i].s, k.v[i].len);
        if (!c) {
            if (!(c = new_child(p, t, &k.v[i], TOML_TABLE, line))) goto out;
        } else if (c->type == TOML_ARRAY && (c->flags & TOML_F_AOT)) {
            c = c->u.arr.v[c->u.arr.n - 1];
        } else if (c->type != TOML_TABLE || (c->flags & TOML_F_FROZEN)) {
            toml_perr(p, line, "cannot define [%s]: '%s' is %s%s (line %d)", full,
                      key_name(&k, i + 1, part, sizeof(part)),
                      toml_type_phrase((enum toml_type)c->type),
                      c->type == TOML_TABLE ? " given inline, closed" : "", c->line);
            goto out;
        }
    }
    const struct key_part *last = &k.v[k.n - 1];
    c = toml_table_find(t, last->s, last->len);
    if (!aot) {
        if (!c) {
            if (!(c = new_child(p, t, last, TOML_TABLE, line))) goto out;
        } else if (c->type != TOML_TABLE || (c->flags & TOML_F_FROZEN)) {
            toml_perr(p, line, "cannot define table [%s]: it is already %s%s (line %d)", full,
                      toml_type_phrase((enum toml_type)c->type),
                      c->type == TOML_TABLE ? " given inline" : "", c->line);
            goto out;
        } else if (is_defined(p, c)) {
            toml_perr(p, line, "table [%s] defined twice (first at line %d)", full, c->line);
            goto out;
        }
        c->flags |= TOML_F_HEADER;
        c->line = line;
        p->cur = c;
    } else {
        if (!c) {
            if (!(c = new_child(p, t, last, TOML_ARRAY, line))) goto out;
            c->flags = TOML_F_AOT | TOML_F_HEADER;
        } else if (c->type != TOML_ARRAY || !(c->flags & TOML_F_AOT)) {
            toml_perr(p, line, "cannot append to [[%s]]: it is already %s%s at line %d", full,
                      c->type == TOML_ARRAY ? "a static " : "",
                      c->type == TOML_ARRAY ? "array" : toml_type_phrase((enum toml_type)c->type),
                      c->line);
            goto out;
        }
        if (c->depth >= TOML_MAX_DEPTH) {
            toml_perr(p, line, "tables nested deeper than %d levels", TOML_MAX_DEPTH);
            goto out;
        }
        struct toml_node *e = toml_node_new(TOML_TABLE, line, p->file);
        toml_array_push(c, e);
        e->depth = (uint16_t)(c->depth + 1);
        e->flags = TOML_F_HEADER;
        p->cur = e;
    }
    rc = 0;
out:
    key_free(&k);
    return rc;
}

/* After a header or key/value: optional whitespace and comment, then a newline or the end. */
static int end_of_line(struct toml_parser *p, const char *after) {
    char name[TOML_CHAR_NAME];
    skip_ws(p);
    if (at(p) == '#' && skip_comment(p) < 0) return -1;
    if (at(p) < 0 || eat_newline(p)) return 0;
    return toml_perr(p, p->line, "expected a newline after %s, found %s", after, at_name(p, name));
}

static int parse_document(struct toml_parser *p) {
    char name[TOML_CHAR_NAME];
    if (p->len >= 3 && !memcmp(p->s, "\xef\xbb\xbf", 3)) p->pos = 3; /* a leading BOM */
    for (;;) {
        skip_ws(p);
        int c = at(p);
        if (c < 0) return 0;
        if (c == '[') {
            if (parse_header(p) < 0 || end_of_line(p, "the table header") < 0) return -1;
        } else if (c == '#' || c == '\n' || c == '\r') {
            if (c == '#' && skip_comment(p) < 0) return -1;
            if (at(p) >= 0 && !eat_newline(p))
                return toml_perr(p, p->line, "carriage return without line feed");
        } else if (bare_key_char(c) || c == '"' || c == '\'') {
            if (parse_keyval(p, p->cur, p->section_name) < 0 || end_of_line(p, "the value") < 0)
                return -1;
        } else {
            return toml_perr(p, p->line, "expected a key or [table], found %s", at_name(p, name));
        }
    }
}

int toml_parse(const char *buf, size_t len, const char *filename, struct toml_node **root,
               char *err) {
    const char *fname = filename ? filename : "<input>";
    *root = NULL;
    if (len > TOML_MAX_INPUT)
        return err_set(err, "%s:1: input is %zu bytes, more than the %u allowed", fname, len,
                       TOML_MAX_INPUT);
    if (!buf && len) return err_set(err, "%s:1: no input buffer", fname);
    char *file = xstrdup(fname);
    struct toml_node *r = toml_node_new(TOML_TABLE, 1, file);
    r->flags = TOML_F_ROOT | TOML_F_HEADER;
    struct toml_parser p = {
        .s = buf,
        .len = len,
        .line = 1,
        .file = file,
        .err = err,
        .root = r,
        .cur = r,
    };
    snprintf(p.section_name, sizeof(p.section_name), "the root table");
    if (toml_check_utf8(&p) < 0 || parse_document(&p) < 0) {
        toml_free(r);
        return -1;
    }
    *root = r;
    return 0;
}
