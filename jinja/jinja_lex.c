#include "jinja_lex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/utf8.h"

static int lex_fail(struct lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lex_fail(struct lexer *L, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    jinja_lex_vfail(L, L->line, fmt, ap);
    va_end(ap);
    return -1;
}

int jinja_lex_vfail(struct lexer *L, int line, const char *fmt, va_list ap) {
    if (L->failed) return -1;
    char msg[ERR_LEN - 32];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    L->failed = 1;
    return err_set(L->err, "template line %d: %s", line, msg);
}

static int push_tok(struct lexer *L, struct tok t) {
    if (L->n == L->cap) {
        size_t c = L->cap ? L->cap * 2 : 256;
        L->toks = xrealloc(L->toks, c * sizeof(*L->toks));
        L->cap = c;
    }
    t.line = L->line;
    L->toks[L->n++] = t;
    return 0;
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static void count_lines(struct lexer *L, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) L->line += s[i] == '\n';
}

/* Python string literal body -> bytes. */
static int lex_string(struct lexer *L, char q) {
    size_t i = L->pos + 1;
    struct buf b = {0};
    while (i < L->len && L->src[i] != q) {
        char c = L->src[i];
        if (c == '\\' && i + 1 < L->len) {
            char e = L->src[++i];
            char o;
            switch (e) {
            case 'n': o = '\n'; break;
            case 't': o = '\t'; break;
            case 'r': o = '\r'; break;
            case '0': o = '\0'; break;
            case 'a': o = '\a'; break;
            case 'b': o = '\b'; break;
            case 'f': o = '\f'; break;
            case 'v': o = '\v'; break;
            case '\\':
            case '\'':
            case '"': o = e; break;
            case '\n': i++; continue;
            case 'x':
            case 'u':
            case 'U': {
                int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
                if (i + (size_t)nd >= L->len) {
                    buf_free(&b);
                    return lex_fail(L, "bad escape in string");
                }
                char hex[9] = {0};
                memcpy(hex, L->src + i + 1, (size_t)nd);
                char *end;
                unsigned long cp = strtoul(hex, &end, 16);
                if (end != hex + nd || cp > 0x10FFFF) {
                    buf_free(&b);
                    return lex_fail(L, "bad escape in string");
                }
                uint8_t u[4];
                buf_put(&b, (const char *)u, utf8_encode((uint32_t)cp, u));
                i += (size_t)nd + 1;
                continue;
            }
            default:
                buf_put(&b, "\\", 1);
                o = e;
                break; /* unknown escapes stay as written */
            }
            buf_put(&b, &o, 1);
            i++;
            continue;
        }
        buf_put(&b, &c, 1);
        i++;
    }
    if (i >= L->len) {
        buf_free(&b);
        return lex_fail(L, "unterminated string");
    }
    struct tok t = {TK_STR, L->src + L->pos, i + 1 - L->pos, jv_str(L->a, b.p ? b.p : "", b.n), 0};
    buf_free(&b);
    if (t.v.t != JV_STR) return lex_fail(L, "out of memory");
    count_lines(L, L->src + L->pos, i + 1 - L->pos);
    L->pos = i + 1;
    return push_tok(L, t);
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "|",  ".",  ",",  ":", "(", ")",
                                  "[",  "]",  "{",  "}",  "<",  ">",  "=", NULL};

/* Tokens inside {{ }} or {% %} up to the closing marker. Returns the strip sign before it. */
static int lex_tag(struct lexer *L, int block, char *strip_after) {
    const char *close = block ? "%}" : "}}";
    for (;;) {
        while (L->pos < L->len && is_ws(L->src[L->pos])) {
            L->line += L->src[L->pos] == '\n';
            L->pos++;
        }
        if (L->pos >= L->len) return lex_fail(L, "unclosed tag");
        const char *p = L->src + L->pos;
        size_t left = L->len - L->pos;
        if ((*p == '-' || *p == '+') && left >= 3 && !memcmp(p + 1, close, 2)) {
            *strip_after = *p;
            L->pos += 3;
            return push_tok(L,
                            (struct tok){block ? TK_BLOCK_END : TK_VAR_END, p, 3, jv_undef(), 0});
        }
        if (left >= 2 && !memcmp(p, close, 2)) {
            *strip_after = 0;
            L->pos += 2;
            return push_tok(L,
                            (struct tok){block ? TK_BLOCK_END : TK_VAR_END, p, 2, jv_undef(), 0});
        }
        if (*p == '\'' || *p == '"') {
            if (lex_string(L, *p)) return -1;
            continue;
        }
        if (is_name0(*p)) {
            size_t n = 1;
            while (n < left && (is_name0(p[n]) || is_digit(p[n]))) n++;
            L->pos += n;
            if (push_tok(L, (struct tok){TK_NAME, p, n, jv_undef(), 0})) return -1;
            continue;
        }
        if (is_digit(*p)) {
            /* extent first: digits/_ [. digits/_] [e[+-]digits] */
            size_t n = 0;
            int is_float = 0;
            while (n < left && (is_digit(p[n]) || p[n] == '_')) n++;
            if (n + 1 < left && p[n] == '.' && is_digit(p[n + 1])) {
                is_float = 1;
                n++;
                while (n < left && (is_digit(p[n]) || p[n] == '_')) n++;
            }
            if (n < left && (p[n] == 'e' || p[n] == 'E')) {
                size_t m = n + 1;
                if (m < left && (p[m] == '+' || p[m] == '-')) m++;
                if (m < left && is_digit(p[m])) {
                    is_float = 1;
                    n = m;
                    while (n < left && is_digit(p[n])) n++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = 0; i < n; i++) {
                if (p[i] == '_') continue;
                if (k + 1 >= sizeof(num)) return lex_fail(L, "number literal too long");
                num[k++] = p[i];
            }
            num[k] = 0;
            errno = 0;
            struct jv v = is_float ? jv_float(strtod(num, NULL)) : jv_int(strtoll(num, NULL, 10));
            if (errno == ERANGE && !is_float) return lex_fail(L, "integer literal out of range");
            L->pos += n;
            struct tok t = {is_float ? TK_FLOAT : TK_INT, p, n, v, 0};
            if (push_tok(L, t)) return -1;
            continue;
        }
        int found = 0;
        for (int i = 0; ops[i]; i++) {
            size_t n = strlen(ops[i]);
            if (left >= n && !memcmp(p, ops[i], n)) {
                L->pos += n;
                if (push_tok(L, (struct tok){TK_OP, p, n, jv_undef(), 0})) return -1;
                found = 1;
                break;
            }
        }
        if (!found) return lex_fail(L, "unexpected character '%c'", *p);
    }
}

/* Splits the source into text and tag tokens, applying jinja2's whitespace control as HF
 * configures it: trim_blocks (the newline after a block or comment tag goes),
 * lstrip_blocks (spaces before a block or comment tag on its own line go), '-' strips all
 * whitespace on that side, '+' disables both. */
int jinja_lex(struct lexer *L) {
    int ls = 1;          /* jinja2's line_starting: the last match ended with a newline */
    char strip_next = 0; /* '-' closing: strip leading whitespace of the next text */
    int trim_nl = 0;     /* trim_blocks: drop one newline after a block tag */
    for (;;) {
        size_t i = L->pos;
        const char *open = NULL;
        while (i + 1 < L->len) {
            if (L->src[i] == '{' &&
                (L->src[i + 1] == '{' || L->src[i + 1] == '%' || L->src[i + 1] == '#')) {
                open = L->src + i;
                break;
            }
            i++;
        }
        size_t text_end = open ? i : L->len;
        const char *text = L->src + L->pos;
        size_t tn = text_end - L->pos;
        if (trim_nl) {
            ls = 0;
            if (tn >= 1 && text[0] == '\n') {
                text++;
                tn--;
                ls = 1;
            }
        }
        if (strip_next) {
            ls = 0;
            size_t k = 0;
            while (k < tn && is_ws(text[k])) k++;
            if (k && text[k - 1] == '\n') ls = 1;
            text += k;
            tn -= k;
        }
        char kind = open ? open[1] : 0;
        char sign = open && open + 2 < L->src + L->len && (open[2] == '-' || open[2] == '+')
                        ? open[2]
                        : 0;
        if (open) {
            if (sign == '-') {
                while (tn && is_ws(text[tn - 1])) tn--;
            } else if (sign != '+' && kind != '{') {
                size_t l = tn;
                while (l && text[l - 1] != '\n') l--;
                size_t k = l;
                while (k < tn && is_ws(text[k])) k++;
                if ((l > 0 || ls) && k == tn) tn = l;
            }
        }
        if (tn && push_tok(L, (struct tok){TK_TEXT, text, tn, jv_undef(), 0})) return -1;
        count_lines(L, L->src + L->pos, text_end - L->pos);
        if (!open) break;
        L->pos = text_end + 2 + (sign ? 1 : 0);
        strip_next = 0;
        trim_nl = 0;
        ls = 0;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t j = L->pos; j + 1 < L->len; j++)
                if (L->src[j] == '#' && L->src[j + 1] == '}') {
                    e = L->src + j;
                    break;
                }
            if (!e) return lex_fail(L, "unclosed comment");
            char s = e > L->src + L->pos && (e[-1] == '-' || e[-1] == '+') ? e[-1] : 0;
            count_lines(L, L->src + L->pos, (size_t)(e - L->src) - L->pos);
            L->pos = (size_t)(e - L->src) + 2;
            if (s == '-') strip_next = 1;
            else if (s != '+') trim_nl = 1;
        } else {
            int block = kind == '%';
            if (push_tok(
                    L, (struct tok){block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, open, 2, jv_undef(), 0}))
                return -1;
            char s = 0;
            if (lex_tag(L, block, &s)) return -1;
            if (s == '-') strip_next = 1;
            else if (block && s != '+') trim_nl = 1;
        }
    }
    return push_tok(L, (struct tok){TK_EOF, L->src + L->len, 0, jv_undef(), 0});
}
