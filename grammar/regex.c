/* Regular expression -> GBNF (grammar.h). The Python `re` subset that has a regular
 * language: literals, classes ([...], \d \w \s and their negations, .), groups ((...),
 * (?:...), (?P<n>...), (?<n>...)), alternation, * + ? {m} {m,} {m,n} (lazy forms too: same
 * language), ^ at the start and $ at the end. Backreferences, lookaround, \b, inline flags
 * are refused by name. \d \w \s are their ASCII forms (a subset of Python's Unicode ones).
 * In JSON-string mode (JSON Schema `pattern`) the language is that of the JSON string
 * contents whose decoded text matches: '"', '\' and control characters appear escaped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"

struct rx {
    const char *s;
    size_t n, i;
    int json;
    int depth;
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

/* Emits a set of code points as one GBNF item. */
static int put_set(struct rx *r, struct cpset *s) {
    cps_norm(s);
    struct sbuf cls = {0};
    int n_cls = 0, n_esc = 0;
    struct sbuf esc = {0};
    for (int k = 0; k < s->n; k++)
        for (uint32_t lo = s->r[k][0], hi = s->r[k][1]; lo <= hi;) {
            if (r->json && json_escaped(lo)) {
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
            if (r->json) /* stop before the next escaped character */
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
    if (n_cls == 0 && n_esc == 0) {
        sbuf_free(&cls);
        sbuf_free(&esc);
        return rerr(r, "a character class that matches nothing");
    }
    if (n_esc) sbuf_adds(r->out, "(");
    if (n_cls) sbuf_addf(r->out, "[%s]", cls.p);
    if (n_esc) sbuf_addf(r->out, "%s%s)", n_cls ? " | " : "", esc.p);
    sbuf_free(&cls);
    sbuf_free(&esc);
    return 0;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void add_class_escape(struct cpset *s, char e) {
    switch (e) {
    case 'd': cps_add(s, '0', '9'); break;
    case 'w': cps_add(s, '0', '9'); cps_add(s, 'a', 'z'); cps_add(s, 'A', 'Z'); cps_add(s, '_', '_'); break;
    case 's': cps_add(s, '\t', '\r'); cps_add(s, ' ', ' '); break;
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
            int h = r->i < r->n ? hexv(r->s[r->i]) : -1;
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
        if (one.n == 1 && one.r[0][0] == one.r[0][1] && r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
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

static int parse_alt(struct rx *r);

/* {m}, {m,}, {m,n} at r->i: 1 with the bounds, 0 when it is not a quantifier (a literal '{'). */
static int read_braces(struct rx *r, long *lo, long *hi) {
    size_t j = r->i + 1;
    long a = -1, b = -1;
    if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
        a = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && a <= 100000) a = a * 10 + (r->s[j++] - '0');
    }
    if (j < r->n && r->s[j] == ',') {
        j++;
        if (j < r->n && r->s[j] >= '0' && r->s[j] <= '9') {
            b = 0;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && b <= 100000) b = b * 10 + (r->s[j++] - '0');
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

static int parse_seq(struct rx *r) {
    int items = 0;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        if (c == '^' && r->i == 0) {
            r->i++;
            continue;
        }
        if (c == '$' && r->i == r->n - 1) {
            r->i++;
            continue;
        }
        if (c == '^' || c == '$') return rerr(r, "anchors inside the pattern are not supported");
        long lo, hi;
        if (c == '*' || c == '+' || c == '?') return rerr(r, "nothing to repeat");
        if (c == '{') {
            size_t save = r->i;
            int q = read_braces(r, &lo, &hi);
            r->i = save;
            if (q) return rerr(r, "nothing to repeat");
        }
        sbuf_adds(r->out, items++ ? " " : "");
        if (c == '(') {
            r->i++;
            if (r->i < r->n && r->s[r->i] == '?') {
                if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                    r->i += 2;
                } else if (r->i + 2 < r->n && (r->s[r->i + 1] == 'P' || r->s[r->i + 1] == '<') &&
                           (r->s[r->i + 2] == '<' || (r->s[r->i + 1] == '<' && r->s[r->i + 2] != '=' && r->s[r->i + 2] != '!'))) {
                    size_t e = r->i;
                    while (e < r->n && r->s[e] != '>') e++;
                    if (e >= r->n) return rerr(r, "unterminated group name");
                    r->i = e + 1;
                } else {
                    return rerr(r, "lookaround, inline flags and other (?...) groups are not supported");
                }
            }
            if (++r->depth > GRAMMAR_MAX_NESTING) return rerr(r, "groups nested too deeply");
            if (parse_alt(r) < 0) return -1;
            r->depth--;
            if (r->i >= r->n || r->s[r->i] != ')') return rerr(r, "missing ')'");
            r->i++;
        } else {
            struct cpset s = {0};
            int rc = 0;
            if (c == '[') {
                r->i++;
                rc = parse_class(r, &s);
            } else if (c == '.') {
                r->i++;
                cps_add(&s, '\n', '\n');
                cps_negate(&s);
            } else if (c == '\\') {
                r->i++;
                rc = read_escape(r, &s);
            } else {
                uint32_t cp;
                rc = read_cp(r, &cp);
                if (rc == 0) cps_add(&s, cp, cp);
            }
            if (rc == 0) rc = put_set(r, &s);
            free(s.r);
            if (rc < 0) return -1;
        }
        /* quantifier */
        if (r->i < r->n) {
            c = r->s[r->i];
            if (c == '*' || c == '+' || c == '?') {
                sbuf_add(r->out, &c, 1);
                r->i++;
            } else if (c == '{' && read_braces(r, &lo, &hi)) {
                if (lo > GRAMMAR_MAX_REPEAT || hi > GRAMMAR_MAX_REPEAT) return rerr(r, "repetition count above 1000");
                if (hi >= 0 && hi < lo) return rerr(r, "repetition {m,n} with n < m");
                if (hi < 0) sbuf_addf(r->out, "{%ld,}", lo);
                else sbuf_addf(r->out, "{%ld,%ld}", lo, hi);
            } else {
                continue;
            }
            if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: same language */
            else if (r->i < r->n && r->s[r->i] == '+') return rerr(r, "possessive quantifiers are not supported");
            if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?'))
                return rerr(r, "multiple repeat");
        }
    }
    if (items == 0) sbuf_adds(r->out, "\"\"");
    return 0;
}

static int parse_alt(struct rx *r) {
    sbuf_adds(r->out, "(");
    for (;;) {
        if (parse_seq(r) < 0) return -1;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            sbuf_adds(r->out, " | ");
            continue;
        }
        break;
    }
    sbuf_adds(r->out, ")");
    return 0;
}

int regex_to_gbnf(const char *re, size_t len, int json, struct sbuf *out, char *err) {
    if (len > GRAMMAR_MAX_TEXT) return err_set(err, "regex of %zu bytes is longer than the limit of %u", len, GRAMMAR_MAX_TEXT);
    struct rx r = {re, len, 0, json, 0, out, err};
    if (parse_alt(&r) < 0) return -1;
    if (r.i < r.n) return rerr(&r, "unbalanced ')'");
    return 0;
}

int grammar_gbnf_from_regex(const char *re, size_t len, const char *name, struct sbuf *out, char *err) {
    struct sbuf body = {0};
    int rc = regex_to_gbnf(re, len, 0, &body, err);
    if (rc == 0) sbuf_addf(out, "%s ::= %s\n", name, body.p);
    sbuf_free(&body);
    return rc;
}
