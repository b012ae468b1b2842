/* GBNF text -> grammar builder (llama.cpp's notation, grammars/README.md). Literals and
 * character classes are over code points; they become UTF-8 byte sequences here, so the
 * matcher works on bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/hex.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "grammar.h"

struct gp {
    struct gbuild *b;
    const char *s;
    size_t n, i;
    int depth;
    char *err;
};

static int perr(struct gp *p, const char *what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    return err_set(p->err, "GBNF parse error at line %zu column %zu: %s", line, col, what);
}

static int limit(struct gp *p) {
    return perr(p, "grammar too large (limit of elements or rules reached)");
}

static int is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips spaces and comments; newlines too when nested (inside parentheses, after '|'). */
static void skip_space(struct gp *p, int newlines) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
            p->i++;
        } else {
            break;
        }
    }
}

/* One code point of a literal or class, escapes decoded; -1 on error. */
static long read_char(struct gp *p) {
    if (p->i >= p->n) return perr(p, "unexpected end of text"), -1;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n) return perr(p, "unexpected end of text after '\\'"), -1;
        char e = p->s[p->i + 1];
        p->i += 2;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            long v = 0;
            for (int k = 0; k < digits; k++) {
                int h = p->i < p->n ? hex_digit(p->s[p->i]) : -1;
                if (h < 0) return perr(p, "bad hexadecimal escape"), -1;
                v = v * 16 + h;
                p->i++;
            }
            if (v > 0x10FFFF) return perr(p, "escape past U+10FFFF"), -1;
            return v;
        }
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^': return e;
        default: p->i--; return perr(p, "unknown escape"), -1;
        }
    }
    size_t l = utf8_valid_len((const uint8_t *)p->s + p->i, p->n - p->i);
    if (l == 0) return perr(p, "invalid UTF-8"), -1;
    long v = (long)utf8_decode((const uint8_t *)p->s + p->i, l);
    p->i += l;
    return v;
}

/* UTF-8 byte-range sequences of the code points [lo, hi] (surrogates left out), each an
 * alternative of rule r (RE2's / utf8-ranges' splitting). */
static int utf8_ranges(struct gp *p, int r, uint32_t lo, uint32_t hi, int depth) {
    if (lo > hi) return 0;
    if (depth > 16) return 0;
    if (lo <= 0xDFFF && hi >= 0xD800) { /* surrogates are not characters */
        if (lo < 0xD800 && utf8_ranges(p, r, lo, 0xD7FF, depth + 1) < 0) return -1;
        return hi > 0xDFFF ? utf8_ranges(p, r, 0xE000, hi, depth + 1) : 0;
    }
    static const uint32_t maxlen[] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++)
        if (lo <= maxlen[k] && hi > maxlen[k]) {
            if (utf8_ranges(p, r, lo, maxlen[k], depth + 1) < 0) return -1;
            return utf8_ranges(p, r, maxlen[k] + 1, hi, depth + 1);
        }
    if (hi <= 0x7F) {
        uint64_t bits[4] = {0};
        for (uint32_t c = lo; c <= hi; c++) bits[c >> 6] |= 1ull << (c & 63);
        struct galt *a = gb_alt(p->b, r);
        return gb_class(p->b, a, bits) < 0 ? limit(p) : 0;
    }
    int n = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                if (utf8_ranges(p, r, lo, lo | m, depth + 1) < 0) return -1;
                return utf8_ranges(p, r, (lo | m) + 1, hi, depth + 1);
            }
            if ((hi & m) != m) {
                if (utf8_ranges(p, r, lo, (hi & ~m) - 1, depth + 1) < 0) return -1;
                return utf8_ranges(p, r, hi & ~m, hi, depth + 1);
            }
        }
    }
    uint8_t a8[4], b8[4];
    utf8_encode(lo, a8);
    utf8_encode(hi, b8);
    struct galt *a = gb_alt(p->b, r);
    for (int i = 0; i < n; i++) {
        uint64_t bits[4] = {0};
        for (unsigned c = a8[i]; c <= b8[i]; c++) bits[c >> 6] |= 1ull << (c & 63);
        if (gb_class(p->b, a, bits) < 0) return limit(p);
    }
    return 0;
}

/* Appends a class matching one code point of s to alternative a: one byte class when all
 * of s is ASCII, else a reference to a rule of UTF-8 sequences. */
static int emit_cpset(struct gp *p, int rule, int alt, struct cpset *s) {
    cps_norm(s);
    if (s->n == 0) return perr(p, "empty character class");
    if (s->r[s->n - 1][1] <= 0x7F) {
        uint64_t bits[4] = {0};
        for (int k = 0; k < s->n; k++)
            for (uint32_t c = s->r[k][0]; c <= s->r[k][1]; c++) bits[c >> 6] |= 1ull << (c & 63);
        return gb_class(p->b, &p->b->r[rule].alts[alt], bits) < 0 ? limit(p) : 0;
    }
    int r = gb_anon(p->b);
    if (r < 0) return limit(p);
    /* ASCII ranges share one alternative */
    uint64_t bits[4] = {0};
    int any_ascii = 0;
    for (int k = 0; k < s->n; k++)
        for (uint32_t c = s->r[k][0]; c <= s->r[k][1] && c <= 0x7F; c++) {
            bits[c >> 6] |= 1ull << (c & 63);
            any_ascii = 1;
        }
    if (any_ascii && gb_class(p->b, gb_alt(p->b, r), bits) < 0) return limit(p);
    for (int k = 0; k < s->n; k++) {
        uint32_t lo = s->r[k][0] < 0x80 ? 0x80 : s->r[k][0];
        if (s->r[k][1] >= 0x80 && utf8_ranges(p, r, lo, s->r[k][1], 0) < 0) return -1;
    }
    return gb_ref(p->b, &p->b->r[rule].alts[alt], r) < 0 ? limit(p) : 0;
}

static int parse_alternates(struct gp *p, int rule, int nested);

/* Replaces elements [start, end) of rule's alternative alt (one item) by item{lo,hi}
 * (hi < 0: unbounded). */
static int repeat(struct gp *p, int rule, int alt, int start, int lo, int hi) {
    struct galt *a = &p->b->r[rule].alts[alt];
    int len = a->n - start;
    struct gelem *item = xmalloc(sizeof *item * (size_t)(len > 0 ? len : 1));
    if (len > 0) memcpy(item, a->e + start, sizeof *item * (size_t)len);
    a->n = start;
    p->b->n_elems -= (size_t)len;
    int rc = 0;
    for (int k = 0; k < lo && rc == 0; k++) rc = gb_copy(p->b, &p->b->r[rule].alts[alt], item, len);
    if (rc == 0 && hi < 0) { /* R ::= item R | ε */
        int r = gb_anon(p->b);
        if (r < 0) rc = -1;
        else {
            struct galt *x = gb_alt(p->b, r);
            rc = gb_copy(p->b, x, item, len);
            if (rc == 0) rc = gb_ref(p->b, &p->b->r[r].alts[0], r);
            gb_alt(p->b, r);
            if (rc == 0) rc = gb_ref(p->b, &p->b->r[rule].alts[alt], r);
        }
    } else if (rc == 0 && hi > lo) { /* S_1 ::= item | ε; S_k ::= item S_{k-1} | ε */
        int prev = -1;
        for (int k = 0; k < hi - lo && rc == 0; k++) {
            int r = gb_anon(p->b);
            if (r < 0) {
                rc = -1;
                break;
            }
            struct galt *x = gb_alt(p->b, r);
            rc = gb_copy(p->b, x, item, len);
            if (rc == 0 && prev >= 0) rc = gb_ref(p->b, &p->b->r[r].alts[0], prev);
            gb_alt(p->b, r);
            prev = r;
        }
        if (rc == 0) rc = gb_ref(p->b, &p->b->r[rule].alts[alt], prev);
    }
    free(item);
    return rc < 0 ? limit(p) : 0;
}

static int read_int(struct gp *p, int *out) {
    long v = 0;
    size_t s = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAMMAR_MAX_REPEAT) return perr(p, "repetition count above 1000");
    }
    if (p->i == s) return perr(p, "expected a number");
    *out = (int)v;
    return 0;
}

/* %unique-quote (gb_unique_quote), the one %-item, onto alternative a. */
static int parse_percent(struct gp *p, struct galt *a) {
    static const char kw[] = "%unique-quote";
    if (p->n - p->i < sizeof kw - 1 || memcmp(p->s + p->i, kw, sizeof kw - 1) != 0)
        return perr(p, "unknown %-item (only %unique-quote)");
    p->i += sizeof kw - 1;
    return gb_unique_quote(p->b, a) < 0 ? limit(p) : 0;
}

static int parse_sequence(struct gp *p, int rule, int nested) {
    int alt = p->b->r[rule].n_alts;
    gb_alt(p->b, rule);
    int last = -1; /* start of the last item, for postfix operators */
    for (;;) {
        skip_space(p, nested);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        struct galt *a = &p->b->r[rule].alts[alt];
        if (c == '"') {
            p->i++;
            last = a->n;
            while (p->i < p->n && p->s[p->i] != '"') {
                long cp = read_char(p);
                if (cp < 0) return -1;
                uint8_t u[4];
                size_t l = utf8_encode((uint32_t)cp, u);
                for (size_t k = 0; k < l; k++)
                    if (gb_byte(p->b, &p->b->r[rule].alts[alt], u[k]) < 0) return limit(p);
            }
            if (p->i >= p->n) return perr(p, "unterminated literal");
            p->i++;
        } else if (c == '[' || c == '.') {
            struct cpset s = {0};
            if (c == '.') {
                p->i++;
                cps_add(&s, 0, 0x10FFFF);
            } else {
                p->i++;
                int neg = p->i < p->n && p->s[p->i] == '^';
                if (neg) p->i++;
                while (p->i < p->n && p->s[p->i] != ']') {
                    long lo = read_char(p), hi = lo;
                    if (lo < 0) {
                        free(s.r);
                        return -1;
                    }
                    if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                        p->i++;
                        hi = read_char(p);
                        if (hi < 0 || hi < lo) {
                            free(s.r);
                            return hi < 0 ? -1 : perr(p, "character range out of order");
                        }
                    }
                    cps_add(&s, (uint32_t)lo, (uint32_t)hi);
                }
                if (p->i >= p->n) {
                    free(s.r);
                    return perr(p, "unterminated character class");
                }
                p->i++;
                if (neg) cps_negate(&s);
            }
            last = a->n;
            int rc = emit_cpset(p, rule, alt, &s);
            free(s.r);
            if (rc < 0) return -1;
        } else if (is_name(c)) {
            size_t s = p->i;
            while (p->i < p->n && is_name(p->s[p->i])) p->i++;
            size_t e = p->i;
            skip_space(p, 0);
            if (p->i + 2 < p->n && memcmp(p->s + p->i, "::=", 3) == 0) { /* the next rule */
                p->i = s;
                break;
            }
            p->i = e;
            int r = gb_rule(p->b, p->s + s, e - s, s);
            if (r < 0) return limit(p);
            last = p->b->r[rule].alts[alt].n;
            if (gb_ref(p->b, &p->b->r[rule].alts[alt], r) < 0) return limit(p);
        } else if (c == '(') {
            if (++p->depth > GRAMMAR_MAX_NESTING) return perr(p, "groups nested too deeply");
            p->i++;
            int r = gb_anon(p->b);
            if (r < 0) return limit(p);
            if (parse_alternates(p, r, 1) < 0) return -1;
            skip_space(p, 1);
            if (p->i >= p->n || p->s[p->i] != ')') return perr(p, "expected ')'");
            p->i++;
            p->depth--;
            last = p->b->r[rule].alts[alt].n;
            if (gb_ref(p->b, &p->b->r[rule].alts[alt], r) < 0) return limit(p);
        } else if (c == '%') {
            last = p->b->r[rule].alts[alt].n;
            if (parse_percent(p, &p->b->r[rule].alts[alt]) < 0) return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) return perr(p, "repetition operator without an item before it");
            p->i++;
            int lo = 0, hi = -1;
            if (c == '+') lo = 1;
            else if (c == '?') hi = 1;
            else if (c == '{') {
                skip_space(p, 1);
                if (read_int(p, &lo) < 0) return -1;
                skip_space(p, 1);
                hi = lo;
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_space(p, 1);
                    hi = -1;
                    if (p->i < p->n && p->s[p->i] != '}' && read_int(p, &hi) < 0) return -1;
                    skip_space(p, 1);
                }
                if (p->i >= p->n || p->s[p->i] != '}') return perr(p, "expected '}'");
                p->i++;
                if (hi >= 0 && hi < lo) return perr(p, "repetition {m,n} with n < m");
            }
            if (repeat(p, rule, alt, last, lo, hi) < 0) return -1;
            last = -1;
        } else {
            break; /* '|', ')', newline: the caller decides */
        }
    }
    return 0;
}

static int parse_alternates(struct gp *p, int rule, int nested) {
    for (;;) {
        if (parse_sequence(p, rule, nested) < 0) return -1;
        skip_space(p, nested);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            skip_space(p, 1);
            continue;
        }
        return 0;
    }
}

int gbnf_parse(struct gbuild *b, const char *text, size_t len, char *err) {
    struct gp p = {b, text, len, 0, 0, err};
    if (len > (size_t)GRAMMAR_MAX_GBNF)
        return err_set(err, "grammar text longer than %u bytes", GRAMMAR_MAX_GBNF);
    for (;;) {
        skip_space(&p, 1);
        if (p.i >= p.n) break;
        size_t s = p.i;
        while (p.i < p.n && is_name(p.s[p.i])) p.i++;
        if (p.i == s) return perr(&p, "expected a rule name");
        size_t e = p.i;
        skip_space(&p, 0);
        if (p.i + 2 >= p.n || memcmp(p.s + p.i, "::=", 3) != 0) return perr(&p, "expected '::='");
        p.i += 3;
        int r = gb_rule(b, text + s, e - s, s);
        if (r < 0) return limit(&p);
        if (b->r[r].defined) {
            p.i = s;
            return perr(&p, "rule defined twice");
        }
        b->r[r].defined = 1;
        skip_space(&p, 0);
        if (parse_alternates(&p, r, 0) < 0) return -1;
        skip_space(&p, 0);
        if (p.i < p.n && p.s[p.i] != '\n') return perr(&p, "unexpected character");
    }
    return 0;
}
