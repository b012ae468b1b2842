/* Scalar lexers of the TOML parser: the UTF-8 check over the whole input, the four string
 * forms with their escapes, and bare values (booleans, integers, floats, dates and times);
 * and the parser's error helpers, which they and toml_parse.c share. */
#include "toml_internal.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "fatal.h"
#include "hex.h"
#include "sbuf.h"
#include "utf8.h"

int toml_perr(struct toml_parser *p, int line, const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return err_set(p->err, "%s:%d: %s", p->file, line, msg);
}

const char *toml_char_name(unsigned char c, char *buf) {
    if (c >= 0x20 && c < 0x7f) snprintf(buf, TOML_CHAR_NAME, "'%c'", c);
    else if (c < 0x80) snprintf(buf, TOML_CHAR_NAME, "U+%04X", c);
    else snprintf(buf, TOML_CHAR_NAME, "a non-ASCII character");
    return buf;
}

static bool is_ctrl(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Says why s is not a valid sequence (util/utf8 decided that it is not). */
static int utf8_error(struct toml_parser *p, int line, const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07, min = 0x10000;
    else return toml_perr(p, line, "invalid UTF-8 byte 0x%02x", c);
    if (k > n - 1) return toml_perr(p, line, "truncated UTF-8 sequence at end of input");
    for (size_t j = 1; j <= k; j++) {
        if ((s[j] & 0xc0) != 0x80)
            return toml_perr(p, line, "invalid UTF-8 sequence (byte 0x%02x)", c);
        cp = (cp << 6) | (s[j] & 0x3f);
    }
    if (cp < min) return toml_perr(p, line, "overlong UTF-8 encoding of U+%04X", (unsigned)cp);
    return toml_perr(p, line, "UTF-8 encodes U+%04X, not a Unicode scalar value", (unsigned)cp);
}

/* TOML documents are UTF-8 throughout (comments included), so one pass up front lets every
 * lexer after it copy bytes >= 0x80 without looking at them again. */
int toml_check_utf8(struct toml_parser *p) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t n = p->len, i = 0;
    int line = 1;
    while (i < n) {
        if (s[i] < 0x80) {
            line += s[i] == '\n';
            i++;
            continue;
        }
        size_t k = utf8_valid_len(s + i, n - i);
        if (!k) return utf8_error(p, line, s + i, n - i);
        i += k;
    }
    return 0;
}

/* At a backslash in a basic string. */
static int lex_escape(struct toml_parser *p, struct sbuf *b) {
    size_t i = p->pos + 1;
    if (i >= p->len) return toml_perr(p, p->line, "unterminated string");
    char c = p->s[i], name[TOML_CHAR_NAME];
    const char *rep;
    switch (c) {
    case 'b': rep = "\b"; break;
    case 't': rep = "\t"; break;
    case 'n': rep = "\n"; break;
    case 'f': rep = "\f"; break;
    case 'r': rep = "\r"; break;
    case '"': rep = "\""; break;
    case '\\': rep = "\\"; break;
    case 'u':
    case 'U': {
        size_t nd = c == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t k = 0; k < nd; k++) {
            int h = i + 1 + k < p->len ? hex_digit(p->s[i + 1 + k]) : -1;
            if (h < 0) return toml_perr(p, p->line, "escape \\%c needs %zu hex digits", c, nd);
            cp = (cp << 4) | (uint32_t)h;
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return toml_perr(p, p->line, "escape \\%c%.*s is not a Unicode scalar value", c,
                             (int)nd, p->s + i + 1);
        uint8_t o[4];
        p->pos = i + 1 + nd;
        sbuf_add(b, (const char *)o, utf8_encode(cp, o));
        return 0;
    }
    default:
        if (c > 0x20 && c < 0x7f) return toml_perr(p, p->line, "invalid escape sequence '\\%c'", c);
        return toml_perr(p, p->line, "invalid escape sequence: backslash before %s",
                         toml_char_name((unsigned char)c, name));
    }
    p->pos = i + 1;
    sbuf_add(b, rep, 1);
    return 0;
}

static int bad_char(struct toml_parser *p, unsigned char c, const char *where) {
    char name[TOML_CHAR_NAME];
    if (c == '\r') return toml_perr(p, p->line, "carriage return without line feed in %s", where);
    return toml_perr(p, p->line, "control character %s in %s", toml_char_name(c, name), where);
}

/* After the opening quote of a one-line string (basic if q is '"', else literal). */
static int lex_line_string(struct toml_parser *p, char q, struct sbuf *b) {
    int line = p->line;
    for (;;) {
        if (p->pos >= p->len) return toml_perr(p, line, "unterminated string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == (unsigned char)q) {
            p->pos++;
            return 0;
        }
        if (c == '\\' && q == '"') {
            if (lex_escape(p, b) < 0) return -1;
            continue;
        }
        if (c == '\n' || (c == '\r' && p->pos + 1 < p->len && p->s[p->pos + 1] == '\n'))
            return toml_perr(p, line, "unterminated string (line ends before the closing %c)", q);
        if (is_ctrl(c)) return bad_char(p, c, "string");
        size_t start = p->pos;
        while (p->pos < p->len) {
            unsigned char x = (unsigned char)p->s[p->pos];
            if (x == (unsigned char)q || (x == '\\' && q == '"') || is_ctrl(x)) break;
            p->pos++;
        }
        sbuf_add(b, p->s + start, p->pos - start);
    }
}

/* Consumes LF or CRLF, counting the line. */
static bool eat_newline(struct toml_parser *p) {
    if (p->pos < p->len && p->s[p->pos] == '\n') {
        p->pos++;
    } else if (p->pos + 1 < p->len && p->s[p->pos] == '\r' && p->s[p->pos + 1] == '\n') {
        p->pos += 2;
    } else {
        return false;
    }
    p->line++;
    return true;
}

/* After the opening triple quote of a multi-line string. CRLF inside becomes LF. */
static int lex_multi_string(struct toml_parser *p, char q, struct sbuf *b) {
    int line = p->line;
    eat_newline(p); /* a newline right after the delimiter is trimmed */
    for (;;) {
        if (p->pos >= p->len) return toml_perr(p, line, "unterminated multi-line string");
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == (unsigned char)q) {
            size_t run = 0;
            while (p->pos + run < p->len && p->s[p->pos + run] == q) run++;
            if (run < 3) { /* one or two quotes are content */
                sbuf_add(b, p->s + p->pos, run);
                p->pos += run;
                continue;
            }
            /* Up to two quotes right before the closing three belong to the string. */
            if (run > 5)
                return toml_perr(p, p->line, "too many quotes (%zu) ending a multi-line string",
                                 run);
            sbuf_add(b, p->s + p->pos, run - 3);
            p->pos += run;
            return 0;
        }
        if (c == '\\' && q == '"') {
            /* A backslash ending a line (spaces may follow it) trims all whitespace and
             * newlines up to the next other character. */
            size_t j = p->pos + 1;
            while (j < p->len && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
            size_t save = p->pos;
            p->pos = j;
            if (eat_newline(p)) {
                for (;;) {
                    if (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t')) p->pos++;
                    else if (!eat_newline(p)) break;
                }
                continue;
            }
            p->pos = save;
            if (lex_escape(p, b) < 0) return -1;
            continue;
        }
        if (eat_newline(p)) {
            sbuf_add(b, "\n", 1);
            continue;
        }
        if (is_ctrl(c)) return bad_char(p, c, "multi-line string");
        size_t start = p->pos;
        while (p->pos < p->len) {
            unsigned char x = (unsigned char)p->s[p->pos];
            if (x == (unsigned char)q || (x == '\\' && q == '"') || is_ctrl(x) || x == '\n') break;
            p->pos++;
        }
        sbuf_add(b, p->s + start, p->pos - start);
    }
}

int toml_lex_string(struct toml_parser *p, bool allow_multi, char **out, size_t *len) {
    char q = p->s[p->pos];
    struct sbuf b = {0};
    bool multi = p->pos + 2 < p->len && p->s[p->pos + 1] == q && p->s[p->pos + 2] == q;
    int rc;
    if (multi && !allow_multi) return toml_perr(p, p->line, "a key cannot be a multi-line string");
    if (multi) {
        p->pos += 3;
        rc = lex_multi_string(p, q, &b);
    } else {
        p->pos += 1;
        rc = lex_line_string(p, q, &b);
    }
    if (rc == 0) sbuf_add(&b, "", 0); /* the empty string still gets a buffer */
    if (rc < 0) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}

static bool bare_char(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           c == '+' || c == '-' || c == '.' || c == ':';
}

static bool is_date_shape(const char *t) {
    return is_digit(t[0]) && is_digit(t[1]) && is_digit(t[2]) && is_digit(t[3]) && t[4] == '-' &&
           is_digit(t[5]) && is_digit(t[6]) && t[7] == '-' && is_digit(t[8]) && is_digit(t[9]);
}

static int two_digits(const char *t) { return (t[0] - '0') * 10 + (t[1] - '0'); }

/* HH:MM:SS[.fraction] at *i; seconds are required in TOML 1.0. Returns a reason or NULL. */
static const char *scan_time(const char *t, size_t n, size_t *i) {
    const char *s = t + *i;
    if (n - *i < 8 || !is_digit(s[0]) || !is_digit(s[1]) || s[2] != ':' || !is_digit(s[3]) ||
        !is_digit(s[4]) || s[5] != ':' || !is_digit(s[6]) || !is_digit(s[7]))
        return "expected HH:MM:SS";
    if (two_digits(s) > 23) return "hour out of range";
    if (two_digits(s + 3) > 59) return "minute out of range";
    if (two_digits(s + 6) > 60) return "second out of range"; /* 60: leap second */
    *i += 8;
    if (*i < n && t[*i] == '.') {
        size_t d = ++*i;
        while (*i < n && is_digit(t[*i])) (*i)++;
        if (*i == d) return "expected digits after '.'";
    }
    return NULL;
}

static int days_in_month(int y, int m) {
    static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : d[m - 1];
}

/* The four date/time kinds of RFC 3339 as TOML uses them. Returns a reason or NULL. */
static const char *scan_datetime(const char *t, size_t n, enum toml_type *kind) {
    size_t i = 0;
    const char *why;
    if (n < 10 || !is_date_shape(t)) {
        if (n >= 5 && t[4] == '-') return "expected YYYY-MM-DD";
        if ((why = scan_time(t, n, &i))) return why;
        *kind = TOML_TIME_LOCAL;
        return i == n ? NULL : "unexpected text after the time";
    }
    int y = (t[0] - '0') * 1000 + (t[1] - '0') * 100 + two_digits(t + 2);
    int m = two_digits(t + 5), d = two_digits(t + 8);
    if (m < 1 || m > 12) return "month out of range";
    if (d < 1 || d > days_in_month(y, m)) return "day out of range";
    if (n == 10) {
        *kind = TOML_DATE_LOCAL;
        return NULL;
    }
    if (t[10] != 'T' && t[10] != 't' && t[10] != ' ') return "expected 'T' after the date";
    i = 11;
    if ((why = scan_time(t, n, &i))) return why;
    if (i == n) {
        *kind = TOML_DATETIME_LOCAL;
        return NULL;
    }
    *kind = TOML_DATETIME;
    const char *o = t + i;
    if ((o[0] == 'Z' || o[0] == 'z') && n - i == 1) return NULL;
    if ((o[0] == '+' || o[0] == '-') && n - i == 6 && is_digit(o[1]) && is_digit(o[2]) &&
        o[3] == ':' && is_digit(o[4]) && is_digit(o[5]) && two_digits(o + 1) < 24 &&
        two_digits(o + 4) < 60)
        return NULL;
    return "invalid time offset";
}

/* Kept as text, with 'T' and 'Z' upper case so that callers see one spelling. */
static int lex_datetime(struct toml_parser *p, const char *t, size_t n, int line,
                        struct toml_node **out) {
    enum toml_type kind = TOML_DATETIME;
    const char *why = scan_datetime(t, n, &kind);
    if (why)
        return toml_perr(p, line, "invalid date/time '%.*s': %s", n > 64 ? 64 : (int)n, t, why);

    struct toml_node *v = toml_node_new(kind, line, p->file);
    char *s = xmalloc(n + 1);
    for (size_t k = 0; k < n; k++) {
        char c = t[k];
        s[k] = (k == 10 && (c == ' ' || c == 't')) ? 'T' : c == 'z' ? 'Z' : c;
    }
    s[n] = '\0';
    v->u.str.s = s;
    v->u.str.len = n;
    *out = v;
    return 0;
}

static bool is_base_digit(char c, int base) {
    if (base == 16) return hex_digit(c) >= 0;
    return c >= '0' && c < '0' + base;
}

/* digit *( ["_"] digit ): an underscore must sit between two digits. */
static bool scan_digits(const char *t, size_t n, size_t *i, int base) {
    if (*i >= n || !is_base_digit(t[*i], base)) return false;
    (*i)++;
    while (*i < n) {
        if (t[*i] == '_') {
            if (*i + 1 >= n || !is_base_digit(t[*i + 1], base)) return false;
            *i += 2;
        } else if (is_base_digit(t[*i], base)) {
            (*i)++;
        } else {
            break;
        }
    }
    return true;
}

/* Decimal with optional sign, or 0x / 0o / 0b without one; all must fit int64_t. */
static const char *lex_integer(const char *t, size_t n, int64_t *v) {
    size_t i = 0;
    int base = 10;
    bool neg = false;
    if (n >= 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o' || t[1] == 'b')) {
        base = t[1] == 'x' ? 16 : t[1] == 'o' ? 8 : 2;
        i = 2;
    } else if (t[0] == '+' || t[0] == '-') {
        neg = t[0] == '-';
        i = 1;
    }
    size_t first = i;
    if (!scan_digits(t, n, &i, base) || i != n) return "malformed integer";
    if (base == 10 && t[first] == '0' && n - first > 1) return "leading zero";
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, acc = 0;
    for (size_t k = first; k < n; k++) {
        if (t[k] == '_') continue;
        uint64_t d = (uint64_t)hex_digit(t[k]);
        if (acc > (limit - d) / (uint64_t)base) return "does not fit in 64 bits";
        acc = acc * (uint64_t)base + d;
    }
    *v = !neg ? (int64_t)acc : acc == limit ? INT64_MIN : -(int64_t)acc;
    return NULL;
}

/* dec-int ( frac [exp] | exp ); the grammar is checked here, the value comes from strtod on a
 * copy without underscores, in the C locale whatever the process has set. */
static const char *lex_float(const char *t, size_t n, double *v) {
    size_t i = (t[0] == '+' || t[0] == '-') ? 1 : 0, first = i;
    bool frac = false, exp = false;
    if (!scan_digits(t, n, &i, 10)) return "malformed float";
    if (t[first] == '0' && i - first > 1) return "leading zero";
    if (i < n && t[i] == '.') {
        i++;
        if (!scan_digits(t, n, &i, 10)) return "expected digits after '.'";
        frac = true;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-')) i++;
        if (!scan_digits(t, n, &i, 10)) return "malformed exponent";
        exp = true;
    }
    if (i != n || !(frac || exp)) return "malformed float";

    char *clean = xmalloc(n + 1);
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (t[k] != '_') clean[m++] = t[k];
    clean[m] = '\0';
    locale_t c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    *v = c_locale ? strtod_l(clean, NULL, c_locale) : strtod(clean, NULL);
    if (c_locale) freelocale(c_locale);
    free(clean);
    if (isinf(*v)) return "out of range for a double";
    return NULL;
}

int toml_lex_bare(struct toml_parser *p, struct toml_node **out) {
    size_t start = p->pos;
    int line = p->line;
    while (p->pos < p->len && bare_char((unsigned char)p->s[p->pos])) p->pos++;
    /* "1979-05-27 07:32:00": a date, one space and a time make one value. */
    if (p->pos - start == 10 && is_date_shape(p->s + start) && p->pos + 3 < p->len &&
        p->s[p->pos] == ' ' && is_digit(p->s[p->pos + 1]) && is_digit(p->s[p->pos + 2]) &&
        p->s[p->pos + 3] == ':') {
        p->pos++;
        while (p->pos < p->len && bare_char((unsigned char)p->s[p->pos])) p->pos++;
    }
    const char *t = p->s + start;
    size_t n = p->pos - start;
    int shown = n > 64 ? 64 : (int)n;
    char name[TOML_CHAR_NAME];
    if (n == 0) {
        if (p->pos >= p->len) return toml_perr(p, line, "expected a value, found end of input");
        return toml_perr(p, line, "expected a value, found %s",
                         toml_char_name((unsigned char)p->s[p->pos], name));
    }

    if ((n == 4 && !memcmp(t, "true", 4)) || (n == 5 && !memcmp(t, "false", 5))) {
        *out = toml_node_new(TOML_BOOL, line, p->file);
        (*out)->u.b = n == 4;
        return 0;
    }
    size_t sign = (t[0] == '+' || t[0] == '-');
    if (n - sign == 3 && (!memcmp(t + sign, "inf", 3) || !memcmp(t + sign, "nan", 3))) {
        *out = toml_node_new(TOML_FLOAT, line, p->file);
        double x = t[sign] == 'i' ? INFINITY : NAN;
        (*out)->u.f = t[0] == '-' ? -x : x;
        return 0;
    }
    if (memchr(t, ':', n) || (n >= 5 && is_digit(t[0]) && t[4] == '-'))
        return lex_datetime(p, t, n, line, out);
    if (!is_digit(t[0]) && !sign)
        return toml_perr(p, line, "invalid value '%.*s' (strings need quotes)", shown, t);

    bool radix = n >= 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'o' || t[1] == 'b');
    bool is_float = !radix && (memchr(t, '.', n) || memchr(t, 'e', n) || memchr(t, 'E', n));
    struct toml_node *v = toml_node_new(is_float ? TOML_FLOAT : TOML_INTEGER, line, p->file);
    const char *why = is_float ? lex_float(t, n, &v->u.f) : lex_integer(t, n, &v->u.i);
    if (why) {
        free(v);
        return toml_perr(p, line, "invalid %s '%.*s': %s", is_float ? "float" : "integer", shown, t,
                         why);
    }
    *out = v;
    return 0;
}
