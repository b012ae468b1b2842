/* Regular expression -> GBNF (grammar.h). The Python `re` subset that has a regular
 * language: literals, classes ([...], \d \w \s and their negations, .), groups ((...),
 * (?:...), (?P<n>...), (?<n>...)), alternation, * + ? {m} {m,} {m,n} (lazy forms too: same
 * language), ^ at the start and $ at the end. Backreferences, lookaround, \b, inline flags
 * are refused by name. A star over a group that matches "" is the star of its non-empty
 * strings (parse_item), the same language without a left-recursive rule. \d \w \s are
 * their ASCII forms (a subset of Python's Unicode ones).
 * In JSON-string mode (JSON Schema `pattern`) the language is that of the JSON string
 * contents whose decoded text matches: '"', '\' and control characters appear escaped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/hex.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"

struct rx {
    const char *s;
    size_t n, i;
    int json;
    int depth;
    int inner;       /* parsing a group's inside again: no anchors there */
    long lmin, lmax; /* characters in the strings of the last sequence or group parsed (-1: any) */
    struct sbuf *out;
    char *err;
};

static int rerr(struct rx *r, const char *what) {
    return err_set(r->err, "regex error at offset %zu: %s", r->i, what);
}

/* One code point as a GBNF class or literal character. */
static void put_cp(struct sbuf *o, uint32_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ') {
        char ch = (char)c;
        sbuf_add(o, &ch, 1);
    } else if (c < 0x80) {
        sbuf_addf(o, "\\x%02X", c);
    } else if (c <= 0xFFFF) {
        sbuf_addf(o, "\\u%04X", c);
    } else {
        sbuf_addf(o, "\\U%08X", c);
    }
}

int regex_anchored_end(const char *re, size_t n) {
    size_t bs = 0;
    while (bs + 1 < n && re[n - 2 - bs] == '\\') bs++;
    return n > 0 && re[n - 1] == '$' && bs % 2 == 0;
}

int regex_search_lengths(const char *re, size_t n, long *lmin, long *lmax, char *err) {
    struct sbuf t = {0};
    int k = regex_to_gbnf_range(re, n, 1, &t, lmin, lmax, err);
    sbuf_free(&t);
    if (!(n > 0 && re[0] == '^' && regex_anchored_end(re, n))) *lmax = -1; /* a search */
    return k;
}

void gbnf_put_literal(struct sbuf *o, const char *s, size_t n) {
    sbuf_adds(o, "\"");
    for (size_t i = 0; i < n;) {
        size_t l = utf8_valid_len((const uint8_t *)s + i, n - i);
        if (l == 0) { /* not UTF-8: the byte as its own code point is the best we can say */
            put_cp(o, (uint8_t)s[i]);
            i++;
            continue;
        }
        put_cp(o, utf8_decode((const uint8_t *)s + i, l));
        i += l;
    }
    sbuf_adds(o, "\"");
}

static int json_escaped(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

int regex_put_set(struct sbuf *out, struct cpset *s, int json) {
    cps_norm(s);
    struct sbuf cls = {0};
    int n_cls = 0, n_esc = 0;
    struct sbuf esc = {0};
    for (int k = 0; k < s->n; k++)
        for (uint32_t lo = s->r[k][0], hi = s->r[k][1]; lo <= hi;) {
            if (json && json_escaped(lo)) {
                if (n_esc++) sbuf_adds(&esc, " | ");
                char e[8];
                if (lo == '"') strcpy(e, "\\\"");
                else if (lo == '\\') strcpy(e, "\\\\");
                else if (lo == '\n') strcpy(e, "\\n");
                else if (lo == '\t') strcpy(e, "\\t");
                else if (lo == '\r') strcpy(e, "\\r");
                else snprintf(e, sizeof e, "\\u%04x", lo);
                gbnf_put_literal(&esc, e, strlen(e));
                lo++;
                continue;
            }
            uint32_t end = hi;
            if (json) /* stop before the next escaped character */
                for (uint32_t c = lo; c <= hi && c < 0x80; c++)
                    if (json_escaped(c)) {
                        end = c - 1;
                        break;
                    }
            put_cp(&cls, lo);
            if (end > lo) {
                sbuf_adds(&cls, "-");
                put_cp(&cls, end);
            }
            n_cls++;
            if (end == hi) break;
            lo = end + 1;
        }
    if (n_esc) sbuf_adds(out, "(");
    if (n_cls) sbuf_addf(out, "[%s]", cls.p);
    if (n_esc) sbuf_addf(out, "%s%s)", n_cls ? " | " : "", esc.p);
    sbuf_free(&cls);
    sbuf_free(&esc);
    return n_cls || n_esc ? 0 : -1;
}

/* Emits a set of code points as one GBNF item. */
static int put_set(struct rx *r, struct cpset *s) {
    if (regex_put_set(r->out, s, r->json) < 0)
        return rerr(r, "a character class that matches nothing");
    return 0;
}

static void add_class_escape(struct cpset *s, char e) {
    switch (e) {
    case 'd': cps_add(s, '0', '9'); break;
    case 'w':
        cps_add(s, '0', '9');
        cps_add(s, 'a', 'z');
        cps_add(s, 'A', 'Z');
        cps_add(s, '_', '_');
        break;
    case 's':
        cps_add(s, '\t', '\r');
        cps_add(s, ' ', ' ');
        break;
    }
}

/* After a backslash: adds the escape's code points to s. */
static int read_escape(struct rx *r, struct cpset *s) {
    if (r->i >= r->n) return rerr(r, "pattern ends with a backslash");
    char e = r->s[r->i++];
    if (e == 'd' || e == 'w' || e == 's') {
        add_class_escape(s, e);
        return 0;
    }
    if (e == 'D' || e == 'W' || e == 'S') {
        struct cpset t = {0};
        add_class_escape(&t, (char)(e + 32));
        cps_negate(&t);
        for (int k = 0; k < t.n; k++) cps_add(s, t.r[k][0], t.r[k][1]);
        free(t.r);
        return 0;
    }
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = r->i < r->n ? hex_digit(r->s[r->i]) : -1;
            if (h < 0) return rerr(r, "bad hexadecimal escape");
            v = v * 16 + (uint32_t)h;
            r->i++;
        }
        if (v > 0x10FFFF) return rerr(r, "escape past U+10FFFF");
        cps_add(s, v, v);
        return 0;
    }
    const char *map = "n\nt\tr\rf\fv\va\a";
    for (const char *m = map; *m; m += 2)
        if (*m == e) {
            cps_add(s, (uint8_t)m[1], (uint8_t)m[1]);
            return 0;
        }
    if ((e >= '0' && e <= '9')) return rerr(r, "backreferences are not supported");
    if (e == 'b' || e == 'B' || e == 'A' || e == 'Z' || e == 'z' || e == 'G')
        return rerr(r, "assertions (\\b, \\B, \\A, \\Z) are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return rerr(r, "unknown escape");
    cps_add(s, (uint8_t)e, (uint8_t)e); /* escaped punctuation */
    return 0;
}

static int read_cp(struct rx *r, uint32_t *cp) {
    size_t l = utf8_valid_len((const uint8_t *)r->s + r->i, r->n - r->i);
    if (l == 0) return rerr(r, "invalid UTF-8");
    *cp = utf8_decode((const uint8_t *)r->s + r->i, l);
    r->i += l;
    return 0;
}

static int parse_class(struct rx *r, struct cpset *s) {
    int neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    int first = 1;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = 0;
        struct cpset one = {0};
        if (r->s[r->i] == '\\') {
            r->i++;
            if (read_escape(r, &one) < 0) return free(one.r), -1;
        } else if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            return rerr(r, "POSIX classes are not supported");
        } else {
            uint32_t c;
            if (read_cp(r, &c) < 0) return -1;
            cps_add(&one, c, c);
        }
        /* a range a-b (single characters on both sides) */
        if (one.n == 1 && one.r[0][0] == one.r[0][1] && r->i + 1 < r->n && r->s[r->i] == '-' &&
            r->s[r->i + 1] != ']') {
            r->i++;
            struct cpset two = {0};
            if (r->s[r->i] == '\\') {
                r->i++;
                if (read_escape(r, &two) < 0) return free(one.r), free(two.r), -1;
            } else {
                uint32_t c;
                if (read_cp(r, &c) < 0) return free(one.r), -1;
                cps_add(&two, c, c);
            }
            if (two.n != 1 || two.r[0][0] != two.r[0][1] || two.r[0][0] < one.r[0][0]) {
                free(one.r);
                free(two.r);
                return rerr(r, "bad character range");
            }
            one.r[0][1] = two.r[0][0];
            free(two.r);
        }
        for (int k = 0; k < one.n; k++) cps_add(s, one.r[k][0], one.r[k][1]);
        free(one.r);
    }
    if (r->i >= r->n) return rerr(r, "unterminated character class");
    r->i++;
    if (neg) cps_negate(s);
    return 0;
}

static int parse_alt(struct rx *r, int ne, int *nullable);

/* {m}, {m,}, {m,n} at r->i: 1 with the bounds, 0 when it is not a quantifier (a literal '{'). */
static int read_braces(struct rx *r, long *lo, long *hi) {
    size_t j = r->i + 1;
    long a = -1, b = -1;
    if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
        a = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && a <= 100000)
            a = a * 10 + (r->s[j++] - '0');
    }
    if (j < r->n && r->s[j] == ',') {
        j++;
        if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
            b = 0;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && b <= 100000)
                b = b * 10 + (r->s[j++] - '0');
        }
        if (a < 0) a = 0; /* {,n} */
    } else {
        b = a;
    }
    if (j >= r->n || r->s[j] != '}' || (a < 0 && b < 0)) return 0;
    r->i = j + 1;
    *lo = a;
    *hi = b;
    return 1;
}

/* One atom and its quantifier, as parse_item reads them. */
struct item {
    struct sbuf atom; /* the atom's GBNF */
    int atom_null;    /* the atom matches "" */
    size_t in0, in1;  /* a group's inside in the pattern (in1 == 0: not a group) */
    long lo, hi;      /* the quantifier ({1,1}: none; hi -1: unbounded) */
    long amin, amax;  /* characters in the atom's strings (amax -1: unbounded) */
    struct sbuf text; /* the item's GBNF */
};

/* The GBNF of the non-empty strings of a group's inside (ne mode). 0 when there are none. */
static int ne_group(struct rx *r, const struct item *it, struct sbuf *o) {
    struct rx sub = *r;
    sub.s = r->s + it->in0;
    sub.n = it->in1 - it->in0;
    sub.i = 0;
    sub.inner = 1;
    sub.out = o;
    int null, rc = parse_alt(&sub, 1, &null);
    return rc < 0 ? -1 : rc;
}

/* Reads an atom and its quantifier at r->i into it (text: the item's GBNF). A star (or +,
 * {m,}) over an atom that matches "" would be a left-recursive rule: it becomes the star of
 * the atom's non-empty strings, the same language. */
static int parse_item(struct rx *r, struct item *it) {
    char c = r->s[r->i];
    it->in1 = 0;
    it->lo = it->hi = 1;
    it->atom_null = 0;
    it->amin = it->amax = 1;
    struct sbuf *save = r->out;
    r->out = &it->atom;
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else if (r->i + 2 < r->n && (r->s[r->i + 1] == 'P' || r->s[r->i + 1] == '<') &&
                       (r->s[r->i + 2] == '<' || (r->s[r->i + 1] == '<' && r->s[r->i + 2] != '=' &&
                                                  r->s[r->i + 2] != '!'))) {
                size_t e = r->i;
                while (e < r->n && r->s[e] != '>') e++;
                if (e >= r->n) return rerr(r, "unterminated group name");
                r->i = e + 1;
            } else {
                return rerr(r,
                            "lookaround, inline flags and other (?...) groups are not supported");
            }
        }
        if (++r->depth > GRAMMAR_MAX_NESTING) return rerr(r, "groups nested too deeply");
        it->in0 = r->i;
        if (parse_alt(r, 0, &it->atom_null) < 0) return -1;
        it->amin = r->lmin;
        it->amax = r->lmax;
        r->depth--;
        if (r->i >= r->n || r->s[r->i] != ')') return rerr(r, "missing ')'");
        it->in1 = r->i++;
    } else {
        struct cpset set = {0};
        int rc = 0;
        if (c == '[') {
            r->i++;
            rc = parse_class(r, &set);
        } else if (c == '.') {
            r->i++;
            cps_add(&set, '\n', '\n');
            cps_negate(&set);
        } else if (c == '\\') {
            r->i++;
            rc = read_escape(r, &set);
        } else {
            uint32_t cp;
            rc = read_cp(r, &cp);
            if (rc == 0) cps_add(&set, cp, cp);
        }
        if (rc == 0) rc = put_set(r, &set);
        free(set.r);
        if (rc < 0) return -1;
    }
    r->out = save;
    /* quantifier */
    long lo, hi;
    if (r->i < r->n) {
        c = r->s[r->i];
        if (c == '*' || c == '+' || c == '?') {
            it->lo = c == '+';
            it->hi = c == '?' ? 1 : -1;
            r->i++;
        } else if (c == '{' && read_braces(r, &lo, &hi)) {
            if (lo > GRAMMAR_MAX_REPEAT || hi > GRAMMAR_MAX_REPEAT)
                return rerr(r, "repetition count above 1000");
            if (hi >= 0 && hi < lo) return rerr(r, "repetition {m,n} with n < m");
            it->lo = lo;
            it->hi = hi;
        } else {
            goto text;
        }
        if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: same language */
        else if (r->i < r->n && r->s[r->i] == '+')
            return rerr(r, "possessive quantifiers are not supported");
        if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?'))
            return rerr(r, "multiple repeat");
    }
text:
    if (it->atom_null && it->hi < 0) { /* X* with X nullable = (non-empty X)* */
        struct sbuf ne = {0};
        int k = ne_group(r, it, &ne);
        if (k < 0) return sbuf_free(&ne), -1;
        if (k) sbuf_addf(&it->text, "(%s)*", ne.p);
        else sbuf_adds(&it->text, "\"\"");
        sbuf_free(&ne);
    } else if (it->lo == 1 && it->hi == 1) {
        sbuf_adds(&it->text, it->atom.p);
    } else if (it->hi < 0) {
        sbuf_addf(&it->text, "%s%s", it->atom.p, it->lo == 0 ? "*" : it->lo == 1 ? "+" : "");
        if (it->lo > 1) sbuf_addf(&it->text, "{%ld,}", it->lo);
    } else {
        sbuf_addf(&it->text, "%s{%ld,%ld}", it->atom.p, it->lo, it->hi);
    }
    if (r->out->len > (size_t)GRAMMAR_MAX_GBNF)
        return rerr(r, "the pattern's grammar is too large");
    return 0;
}

/* The non-empty strings of item it, as GBNF into o. 0 when there are none. */
static int ne_item(struct rx *r, const struct item *it, struct sbuf *o) {
    if (!(it->lo == 0 || it->atom_null)) {
        sbuf_adds(o, it->text.p);
        return 1;
    }
    if (it->hi == 0) return 0;
    struct sbuf a = {0};
    int k = 1;
    if (it->atom_null) k = ne_group(r, it, &a);
    else sbuf_adds(&a, it->atom.p);
    if (k > 0) {
        if (it->hi == 1) sbuf_addf(o, "(%s)", a.p);
        else if (it->hi < 0) sbuf_addf(o, "(%s) %s", a.p, it->text.p);
        else sbuf_addf(o, "(%s) %s{0,%ld}", a.p, it->atom.p, it->hi - 1);
    }
    sbuf_free(&a);
    return k;
}

/* Adds item it's least and most characters to [*mn, *mx] (-1: unbounded; counts past 10^9
 * are taken as unbounded, the least one capped). */
static void len_add(long *mn, long *mx, const struct item *it) {
    long a = it->amin * it->lo, b = it->hi < 0 || it->amax < 0 ? -1 : it->amax * it->hi;
    if (it->amax == 0 || it->hi == 0) b = 0;
    *mn = *mn + a > 1000000000L ? 1000000000L : *mn + a;
    *mx = *mx < 0 || b < 0 || *mx + b > 1000000000L ? -1 : *mx + b;
}

/* A sequence up to '|' or ')'. ne: only its non-empty strings (0 returned when there are
 * none): an item that can be non-empty, the ones before it empty. */
static int parse_seq(struct rx *r, int ne, int *nullable) {
    int n = 0, cap = 8, rc = 0;
    long smin = 0, smax = 0;
    struct item *its = xcalloc((size_t)cap, sizeof *its);
    *nullable = 1;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        if (!r->inner && c == '^' && r->i == 0) {
            r->i++;
            continue;
        }
        if (!r->inner && c == '$' && r->i == r->n - 1) {
            r->i++;
            continue;
        }
        if (c == '^' || c == '$') {
            rc = rerr(r, "anchors inside the pattern are not supported");
            break;
        }
        long lo, hi;
        if (c == '*' || c == '+' || c == '?') {
            rc = rerr(r, "nothing to repeat");
            break;
        }
        if (c == '{') {
            size_t save = r->i;
            int q = read_braces(r, &lo, &hi);
            r->i = save;
            if (q) {
                rc = rerr(r, "nothing to repeat");
                break;
            }
        }
        if (n == cap) {
            its = xrealloc(its, sizeof *its * (size_t)(cap *= 2));
            memset(its + n, 0, sizeof *its * (size_t)(cap - n));
        }
        if ((rc = parse_item(r, &its[n++])) < 0) break;
        *nullable &= its[n - 1].lo == 0 || its[n - 1].atom_null;
        len_add(&smin, &smax, &its[n - 1]);
    }
    r->lmin = smin;
    r->lmax = smax;
    int alts = 0;
    if (rc == 0 && !ne) {
        for (int k = 0; k < n; k++) sbuf_addf(r->out, "%s%s", k ? " " : "", its[k].text.p);
        if (n == 0) sbuf_adds(r->out, "\"\"");
    }
    for (int k = 0; rc == 0 && ne && k < n; k++) { /* items before k empty, k non-empty */
        struct sbuf a = {0};
        int got = ne_item(r, &its[k], &a);
        if (got < 0) rc = -1;
        if (got > 0) {
            sbuf_addf(r->out, "%s%s", alts++ ? " | " : "", a.p);
            for (int j = k + 1; j < n; j++) sbuf_addf(r->out, " %s", its[j].text.p);
        }
        sbuf_free(&a);
        if (!(its[k].lo == 0 || its[k].atom_null)) break;
    }
    for (int k = 0; k < n; k++) sbuf_free(&its[k].atom), sbuf_free(&its[k].text);
    free(its);
    return rc < 0 ? -1 : ne ? alts > 0 : 1;
}

/* Alternatives up to ')' as a group. ne: only their non-empty strings; returns 0 when
 * there are none (nothing written), else 1. */
static int parse_alt(struct rx *r, int ne, int *nullable) {
    struct sbuf body = {0}, *save = r->out;
    int alts = 0, rc = 0, first = 1;
    long amin = 0, amax = 0;
    *nullable = 0;
    for (;;) {
        struct sbuf one = {0};
        int null;
        r->out = &one;
        rc = parse_seq(r, ne, &null);
        r->out = save;
        if (rc >= 0) {
            amin = first || r->lmin < amin ? r->lmin : amin;
            amax = amax < 0 || r->lmax < 0 ? -1 : first || r->lmax > amax ? r->lmax : amax;
            first = 0;
        }
        if (rc > 0) sbuf_addf(&body, "%s%s", alts++ ? " | " : "", one.p);
        sbuf_free(&one);
        if (rc < 0) break;
        *nullable |= null;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    if (rc >= 0 && alts) sbuf_addf(r->out, "(%s)", body.p);
    r->lmin = amin;
    r->lmax = amax;
    sbuf_free(&body);
    return rc < 0 ? -1 : alts > 0;
}

int regex_to_gbnf_lengths(const char *re, size_t len, long lo, long hi, struct sbuf *out,
                          char *err) {
    if (len > GRAMMAR_MAX_TEXT)
        return err_set(err, "regex of %zu bytes is longer than the limit of %u", len,
                       GRAMMAR_MAX_TEXT);
    struct rx r = {re, len, 0, 1, 0, 0, 0, 0, NULL, err};
    int start = r.n && r.s[0] == '^', end = 0;
    if (start) r.i = 1;
    size_t bs = 0;
    while (bs + 1 < r.n && r.s[r.n - 2 - bs] == '\\') bs++;
    if (r.n > r.i && r.s[r.n - 1] == '$' && bs % 2 == 0) r.n--, end = 1;
    r.inner = 1;
    int n = 0, cap = 8, rc = 1;
    struct item *its = xcalloc((size_t)cap, sizeof *its);
    struct rx pad = {".*", 2, 0, 1,    0,
                     1,    0, 0, NULL, err}; /* a search: any text around the match */
    struct sbuf dummy = {0};
    pad.out = &dummy;
    if (!start && parse_item(&pad, &its[n++]) < 0) rc = -1;
    while (rc > 0 && r.i < r.n) {
        char c = r.s[r.i];
        if (c == '|' || c == ')' || c == '^' || c == '$' || c == '*' || c == '+' || c == '?' ||
            c == '{') {
            rc = 0; /* alternatives, or what parse_seq would refuse: not this shape */
            break;
        }
        if (n == cap) {
            its = xrealloc(its, sizeof *its * (size_t)(cap *= 2));
            memset(its + n, 0, sizeof *its * (size_t)(cap - n));
        }
        r.out = &dummy;
        if (parse_item(&r, &its[n++]) < 0) rc = -1;
        if (rc > 0 && its[n - 1].in1) rc = 0; /* a group: not one character per repeat */
    }
    if (rc > 0 && !end) {
        if (n == cap)
            its = xrealloc(its, sizeof *its * (size_t)(cap += 1)), memset(its + n, 0, sizeof *its);
        pad.i = 0;
        if (parse_item(&pad, &its[n++]) < 0) rc = -1;
    }
    sbuf_free(&dummy);
    long fixed = 0;
    int flex = -1;
    for (int k = 0; rc > 0 && k < n; k++) {
        fixed += its[k].lo;
        if (its[k].hi != its[k].lo &&
            (flex < 0 || its[k].hi < 0 || (its[flex].hi >= 0 && its[k].hi > its[flex].hi)))
            flex = k;
    }
    long a = 0, b = 0;
    if (rc > 0 && flex >= 0) { /* the others at their least count; this one takes the slack */
        long rest = fixed - its[flex].lo;
        a = lo - rest > its[flex].lo ? lo - rest : its[flex].lo;
        b = hi < 0                                         ? its[flex].hi
            : its[flex].hi < 0 || hi - rest < its[flex].hi ? hi - rest
                                                           : its[flex].hi;
        if (b >= 0 && a > b)
            rc = err_set(err, "unsatisfiable schema: pattern and minLength/maxLength");
        else if (a > GRAMMAR_MAX_REPEAT || b > GRAMMAR_MAX_REPEAT) rc = 0;
    } else if (rc > 0 && (fixed < lo || (hi >= 0 && fixed > hi))) {
        rc = err_set(err, "unsatisfiable schema: pattern and minLength/maxLength");
    }
    if (rc > 0) {
        sbuf_adds(out, "(");
        for (int k = 0; k < n; k++) {
            long x = k == flex ? a : its[k].lo, y = k == flex ? b : its[k].lo;
            sbuf_addf(out, "%s%s", k ? " " : "", its[k].atom.p);
            if (y < 0) sbuf_addf(out, "{%ld,}", x);
            else if (x != 1 || y != 1) sbuf_addf(out, "{%ld,%ld}", x, y);
        }
        sbuf_adds(out, n ? ")" : "\"\")");
    }
    for (int k = 0; k < n; k++) sbuf_free(&its[k].atom), sbuf_free(&its[k].text);
    free(its);
    return rc;
}

int regex_to_gbnf(const char *re, size_t len, int json, struct sbuf *out, char *err) {
    return regex_to_gbnf_range(re, len, json, out, NULL, NULL, err);
}

int regex_to_gbnf_range(const char *re, size_t len, int json, struct sbuf *out, long *lmin,
                        long *lmax, char *err) {
    if (len > GRAMMAR_MAX_TEXT)
        return err_set(err, "regex of %zu bytes is longer than the limit of %u", len,
                       GRAMMAR_MAX_TEXT);
    struct rx r = {re, len, 0, json, 0, 0, 0, 0, out, err};
    int null;
    if (parse_alt(&r, 0, &null) < 0) return -1;
    if (r.i < r.n) return rerr(&r, "unbalanced ')'");
    if (lmin) *lmin = r.lmin;
    if (lmax) *lmax = r.lmax;
    return 0;
}

int grammar_gbnf_from_regex(const char *re, size_t len, const char *name, struct sbuf *out,
                            char *err) {
    struct sbuf body = {0};
    int rc = regex_to_gbnf(re, len, 0, &body, err);
    if (rc == 0) sbuf_addf(out, "%s ::= %s\n", name, body.p);
    sbuf_free(&body);
    return rc;
}

int regex_atom_set(const char *re, size_t len, size_t *i, struct cpset *s, char *err) {
    struct rx r = {re, len, *i, 0, 0, 0, 0, 0, NULL, err};
    char c = re[r.i];
    int rc = 0;
    if (c == '[') {
        r.i++;
        rc = parse_class(&r, s);
    } else if (c == '.') {
        r.i++;
        cps_add(s, '\n', '\n');
        cps_negate(s);
    } else if (c == '\\') {
        r.i++;
        rc = read_escape(&r, s);
    } else {
        uint32_t cp;
        rc = read_cp(&r, &cp);
        if (rc == 0) cps_add(s, cp, cp);
    }
    *i = r.i;
    return rc;
}

int regex_braces(const char *re, size_t len, size_t *i, long *lo, long *hi) {
    struct rx r = {re, len, *i, 0, 0, 0, 0, 0, NULL, NULL};
    int q = read_braces(&r, lo, hi);
    *i = r.i;
    return q;
}
