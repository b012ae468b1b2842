/* JSON Schema -> GBNF, object keys: rules of keys other than given names, and
 * patternProperties' patterns read for their shape (see schema_keys.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "../util/sbuf.h"
#include "../util/utf8.h"
#include "regex.h"
#include "schema_internal.h"
#include "schema_keys.h"

/* A set of characters: ASCII ones by bit, and whether any non-ASCII one is in. */
struct cset {
    unsigned char ascii[128];
    int other;
};

static void add_range(struct cset *s, int a, int b) {
    for (int ch = a; ch <= b && ch < 128; ch++) s->ascii[ch] = 1;
}

/* \d, \w or an escaped punctuation character into s; -1 for other escapes. */
static int read_escape(char e, struct cset *s) {
    if (e == 'd') add_range(s, '0', '9');
    else if (e == 'w')
        add_range(s, '0', '9'), add_range(s, 'a', 'z'), add_range(s, 'A', 'Z'),
            add_range(s, '_', '_');
    else if (e > 0x20 && e < 0x7F && !((e | 0x20) >= 'a' && (e | 0x20) <= 'z') &&
             !(e >= '0' && e <= '9'))
        add_range(s, e, e);
    else return -1;
    return 0;
}

/* One atom at *pp (a character, an escape, a class; ASCII only) into s, *pp past it; -1
 * where the pattern has something else there. */
static int read_atom(const char **pp, struct cset *s) {
    const char *p = *pp;
    memset(s, 0, sizeof *s);
    if (*p == '\\') {
        if (!p[1] || read_escape(p[1], s) < 0) return -1;
        *pp = p + 2;
        return 0;
    }
    if (*p != '[') {
        if (!*p || strchr(".()|*+?{}^$]", *p) || (unsigned char)*p >= 0x80) return -1;
        add_range(s, *p, *p);
        *pp = p + 1;
        return 0;
    }
    int neg = *++p == '^';
    if (neg) p++;
    if (*p == ']') return -1;
    while (*p && *p != ']') {
        int a;
        if (*p == '\\') {
            if (!p[1]) return -1;
            if (p[1] == 'd' || p[1] == 'w') {
                read_escape(p[1], s);
                p += 2;
                continue;
            }
            if (read_escape(p[1], s) < 0) return -1;
            a = p[1];
            p += 2;
        } else {
            if ((unsigned char)*p >= 0x80 || *p == '[') return -1;
            a = *p++;
        }
        if (p[0] == '-' && p[1] && p[1] != ']') {
            int b = p[1];
            if (b == '\\' || (unsigned char)b >= 0x80 || b < a) return -1;
            add_range(s, a, b);
            p += 2;
        } else add_range(s, a, a);
    }
    if (*p != ']') return -1;
    if (neg) {
        for (int ch = 0; ch < 128; ch++) s->ascii[ch] = !s->ascii[ch];
        s->other = 1;
    }
    *pp = p + 1;
    return 0;
}

/* 1 when p has a `|` outside brackets and groups (then its anchors bind to one side). */
static int top_alternation(const char *p) {
    int depth = 0, in_class = 0;
    for (; *p; p++) {
        if (*p == '\\' && p[1]) p++;
        else if (in_class) in_class = *p != ']';
        else if (*p == '[') in_class = 1;
        else if (*p == '(') depth++;
        else if (*p == ')') depth--;
        else if (*p == '|' && depth == 0) return 1;
    }
    return 0;
}

/* The sets of the first characters every match of p (anchored at the start) has, up to
 * cap; how many (0 when p is not anchored at its start). */
static int pattern_prefix(const char *p, struct cset *s, int cap) {
    if (*p != '^' || top_alternation(p)) return 0;
    p++;
    int n = 0;
    while (n < cap && read_atom(&p, &s[n]) == 0) {
        if (*p == '*' || *p == '?' || *p == '{') break; /* optional or counted: not fixed */
        n++;
        if (*p == '+') break; /* one at least, then not fixed */
    }
    return n;
}

/* p as one atom (a class) repeated lo to hi times (hi -1: no bound), anchored at the start
 * and/or the end as *start, *end say; 0 when p is not of that shape. */
static int class_run(const char *p, struct cset *s, long *lo, long *hi, int *start, int *end) {
    int group;
    *start = *p == '^';
    p += *start;
    group = *p == '(';
    p += group;
    if (read_atom(&p, s) < 0 || (group && *p++ != ')')) return 0;
    *lo = 1;
    *hi = 1;
    if (*p == '*') *lo = 0, *hi = -1, p++;
    else if (*p == '+') *hi = -1, p++;
    else if (*p == '{') {
        char *e;
        if (p[1] < '0' || p[1] > '9') return 0;
        *lo = strtol(p + 1, &e, 10);
        if (*lo > 100000) return 0;
        if (*e == ',') {
            const char *f = e + 1;
            if (*f == '}') *hi = -1, e = (char *)f;
            else if (*f < '0' || *f > '9') return 0;
            else if ((*hi = strtol(f, &e, 10)) < *lo) return 0;
        } else *hi = *lo;
        if (*e != '}') return 0;
        p = e + 1;
    }
    *end = *p == '$';
    p += *end;
    return *p == 0;
}

/* pattern_prefix, and whether the empty string matches where p is a whole run of a class
 * that may be empty (`^[a-z]*$`: its first character, if any, is in the class) */
static int prefix_of(const char *p, struct cset *s, int cap, int *nullable) {
    long lo, hi;
    int start, end;
    *nullable = 0;
    if (class_run(p, s, &lo, &hi, &start, &end) && start && end && lo == 0) return *nullable = 1;
    return pattern_prefix(p, s, cap);
}

int sc_patterns_disjoint(const char *a, const char *b) {
    struct cset sa[16], sb[16];
    int za, zb;
    int na = prefix_of(a, sa, 16, &za), nb = prefix_of(b, sb, 16, &zb);
    for (int i = 0; i < na && i < nb; i++) {
        int meet = sa[i].other && sb[i].other;
        for (int ch = 0; ch < 128 && !meet; ch++) meet = sa[i].ascii[ch] && sb[i].ascii[ch];
        if (!meet && !(i == 0 && za && zb)) return 1; /* both may be the empty string */
    }
    return 0;
}

int sc_pattern_class(const char *p, unsigned char set[128], long *lo, long *hi) {
    struct cset s;
    int start, end;
    if (!class_run(p, &s, lo, hi, &start, &end)) return 0;
    if (*lo == 0 && !(start && end)) return 2; /* the empty match is found in any string */
    if (!(start && end)) *hi = -1;             /* a longer run of the class still holds a match */
    for (int ch = 0; ch < 128; ch++)
        set[ch] = s.ascii[ch] && ch >= 0x20 && ch < 0x7F && ch != '"' && ch != '\\';
    return 1;
}

struct cnode {
    char ch;
    int first, next, depth, is_name;
};

static void put_class(struct sbuf *r, const unsigned char set[128], const struct cnode *t, int k) {
    sbuf_adds(r, "[");
    for (int ch = 0; ch < 128; ch++) {
        int child = 0;
        for (int x = k >= 0 ? t[k].first : -1; x >= 0 && !child; x = t[x].next)
            child = t[x].ch == ch;
        if (!set[ch] || child) continue;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'))
            sbuf_addf(r, "%c", ch);
        else sbuf_addf(r, "\\x%02X", ch);
    }
    sbuf_adds(r, "]");
}

int sc_patterns_first(const cJSON *pe, unsigned char first[128]) {
    for (int ch = 0; ch < 128; ch++) first[ch] = ch >= 0x20 && ch < 0x7F && ch != '"' && ch != '\\';
    for (const cJSON *x = pe->child; x; x = x->next) {
        struct cset s[1];
        int z;
        if (prefix_of(x->string, s, 1, &z) < 1) return 0;
        for (int ch = 0; ch < 128; ch++) first[ch] &= !s[0].ascii[ch];
    }
    int any = 0;
    for (int ch = 0; ch < 128; ch++) any |= first[ch];
    return any;
}

int sc_gen_key_class_not_in(struct sc *c, const char *const *names, int n,
                            const unsigned char set[128], const unsigned char *first, long lo,
                            long hi, char *nm) {
    int cap = 16, used = 1;
    struct cnode *t = xmalloc(sizeof *t * (size_t)cap);
    t[0] = (struct cnode){0, -1, -1, 0, 0};
    for (int i = 0; i < n; i++) { /* the names the class can spell (others never collide) */
        size_t len = strlen(names[i]), at = 0;
        while (at < len && (unsigned char)names[i][at] < 128 &&
               (at || !first ? set : first)[(int)names[i][at]])
            at++;
        if (at < len || (hi >= 0 && (long)len > hi)) continue;
        int cur = 0;
        for (at = 0; at < len; at++) {
            int k = t[cur].first;
            while (k >= 0 && t[k].ch != names[i][at]) k = t[k].next;
            if (k < 0) {
                if (used == cap) t = xrealloc(t, sizeof *t * (size_t)(cap *= 2));
                k = used++;
                t[k] = (struct cnode){names[i][at], -1, t[cur].first, t[cur].depth + 1, 0};
                t[cur].first = k;
            }
            cur = k;
        }
        t[cur].is_name = 1;
    }
    /* alive: some key goes through the node (children come after their parent) */
    int *alive = xcalloc((size_t)used, sizeof *alive);
    for (int k = used - 1; k >= 0; k--) {
        int off = 0;
        const unsigned char *here = k == 0 && first ? first : set;
        for (int ch = 0; ch < 128 && !off; ch++) {
            off = here[ch];
            for (int x = t[k].first; x >= 0 && off; x = t[x].next) off = t[x].ch != ch;
        }
        alive[k] = (!t[k].is_name && t[k].depth >= lo) || (off && (hi < 0 || t[k].depth < hi));
        for (int x = t[k].first; x >= 0; x = t[x].next) alive[k] |= alive[x];
    }
    if (!alive[0]) {
        free(alive);
        free(t);
        return 0;
    }
    char base[RN];
    sc_new_rule(c, base);
    for (int k = 0; k < used; k++) {
        if (!alive[k]) continue;
        struct sbuf r = {0};
        long d = t[k].depth;
        const char *sep = "";
        if (!t[k].is_name && d >= lo) sbuf_adds(&r, "\"\\\"\""), sep = " | ";
        for (int x = t[k].first; x >= 0; x = t[x].next) {
            if (!alive[x]) continue;
            sbuf_addf(&r, "%s", sep);
            gbnf_put_literal(&r, &t[x].ch, 1);
            sbuf_addf(&r, " %s-%d", base, x);
            sep = " | ";
        }
        struct sbuf cls = {0};
        put_class(&cls, k == 0 && first ? first : set, t, k);
        if ((hi < 0 || d < hi) && strcmp(cls.p, "[]") != 0) { /* off the trie: any run */
            long a = lo - d - 1 > 0 ? lo - d - 1 : 0;
            sbuf_addf(&r, "%s", sep);
            sbuf_addf(&r, "%s ", cls.p);
            put_class(&r, set, NULL, -1);
            if (hi < 0) sbuf_addf(&r, "{%ld,}", a);
            else sbuf_addf(&r, "{%ld,%ld}", a, hi - d - 1);
            sbuf_adds(&r, " \"\\\"\"");
            sep = " | ";
        }
        sbuf_free(&cls);
        sc_key_node(c, base, k, &r);
    }
    free(alive);
    free(t);
    sc_key_root(c, base, nm);
    return 1;
}

void sc_key_node(struct sc *c, const char *base, int k, struct sbuf *r) {
    char rn[RN + 16];
    snprintf(rn, sizeof rn, "%s-%d", base, k);
    sc_emit(c, rn, r->p);
    sbuf_free(r);
}

void sc_key_root(struct sc *c, const char *base, char *nm) {
    snprintf(nm, RN, "%.100s-key", base);
    sbuf_addf(c->out, "%s ::= \"\\\"\" %s-0\n", nm, base);
}

/* ---- keys that are none of the declared names (sc_gen_key_not_in) ---- */

/* A code point inside a GBNF character class. */
static void class_cp(struct sbuf *b, uint32_t cp) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9'))
        sbuf_addf(b, "%c", cp);
    else if (cp < 0x80) sbuf_addf(b, "\\x%02X", cp);
    else if (cp <= 0xFFFF) sbuf_addf(b, "\\u%04X", cp);
    else sbuf_addf(b, "\\U%08X", cp);
}

/* The one-letter JSON escape of cp ('"' -> '"', '\n' -> 'n'), or 0. */
static char short_escape(uint32_t cp) {
    static const char from[] = "\"\\/\b\f\n\r\t", to[] = "\"\\/bfnrt";
    for (int i = 0; from[i]; i++)
        if ((uint32_t)(uint8_t)from[i] == cp) return to[i];
    return 0;
}

static int raw_ok(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F; }

/* The ways a key's character cp may be written: raw and/or its short escape. */
static void put_key_char(struct sbuf *b, uint32_t cp) {
    char e = short_escape(cp), esc[3] = {'\\', e, 0};
    uint8_t u[4];
    size_t n = utf8_encode(cp, u);
    sbuf_adds(b, "(");
    if (raw_ok(cp)) gbnf_put_literal(b, (const char *)u, n);
    if (e) {
        if (raw_ok(cp)) sbuf_adds(b, " | ");
        gbnf_put_literal(b, esc, 2);
    }
    sbuf_adds(b, ")");
}

struct knode {
    uint32_t cp;     /* the character leading here */
    int first, next; /* first child, next sibling (-1: none) */
    int is_name;
};

/* Into r: a key character other than ch[0..nc) (raw, or the short escape of another
 * character; not a newline where one_line), then the rule any (the rest of the key). */
static void key_other(struct sbuf *r, const uint32_t *ch, int nc, int one_line, const char *any) {
    struct sbuf cls = {0}, esc = {0};
    for (int i = 0; i < nc; i++) class_cp(&cls, ch[i]);
    sbuf_addf(r, "([^\"\\\\\\x7F\\x00-\\x1F%s]", cls.p ? cls.p : "");
    static const char letters[] = "\"\\/bfnrt", dec[] = "\"\\/\b\f\n\r\t";
    for (int i = 0; letters[i]; i++) {
        int child = one_line && letters[i] == 'n';
        for (int j = 0; j < nc; j++) child |= ch[j] == (uint8_t)dec[i];
        if (child) continue;
        if (letters[i] == '"' || letters[i] == '\\') sbuf_adds(&esc, "\\");
        sbuf_add(&esc, &letters[i], 1);
    }
    if (esc.len) sbuf_addf(r, " | \"\\\\\" [%s]", esc.p);
    sbuf_addf(r, ") %s", any);
    sbuf_free(&cls);
    sbuf_free(&esc);
}

/* The key rules a conversion's tries share (written once, into nm): KEY_ANY, any key
 * characters then the closing quote; KEY_OTHER, any character then KEY_ANY; an ASCII
 * character, any character but it then KEY_ANY. Most trie nodes have one child or none, so
 * that the tries of a large schema stay small. */
static void key_shared(struct sc *c, int which, int one_line, char *nm) {
    snprintf(nm, RN, "%s-k%d-%d", c->name, one_line, which);
    if (c->key_rules[one_line][which]) return;
    c->key_rules[one_line][which] = 1;
    struct sbuf r = {0};
    if (which == KEY_ANY) {
        sbuf_addf(&r, "([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" [\"\\\\/bf%srt])* \"\\\"\"",
                  one_line ? "" : "n");
    } else {
        char any[RN];
        uint32_t cp = (uint32_t)which;
        key_shared(c, KEY_ANY, one_line, any);
        key_other(&r, &cp, which == KEY_OTHER ? 0 : 1, one_line, any);
    }
    sc_emit(c, nm, r.p);
    sbuf_free(&r);
}

/* The rule nm: a JSON string (quotes included, no whitespace after) whose decoded value is
 * none of names[0..n), as in a trie of the names: at each node the string may end (unless
 * the node ends a name), take a child's character, or take any other character and then
 * anything. Keys written this way use raw characters and the short escapes only (no \\u):
 * a subset of the keys JSON allows, so that each decoded character has few spellings.
 * one_line: only non-empty keys without a newline (a subset of what `.+` matches). */
void sc_gen_key_not_in(struct sc *c, const char *const *names, int n, int one_line, char *nm) {
    int cap = 16, used = 1;
    struct knode *t = xmalloc(sizeof *t * (size_t)cap);
    t[0] = (struct knode){0, -1, -1, 0};
    for (int i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)names[i];
        size_t len = strlen(names[i]), at = 0;
        int cur = 0;
        while (at < len) {
            size_t l = utf8_valid_len(p + at, len - at);
            uint32_t cp = l ? utf8_decode(p + at, l) : p[at];
            at += l ? l : 1;
            int k = t[cur].first;
            while (k >= 0 && t[k].cp != cp) k = t[k].next;
            if (k < 0) {
                if (used == cap) t = xrealloc(t, sizeof *t * (size_t)(cap *= 2));
                k = used++;
                t[k] = (struct knode){cp, -1, t[cur].first, 0};
                t[cur].first = k;
            }
            cur = k;
        }
        t[cur].is_name = 1;
    }
    char base[RN], any[RN];
    sc_new_rule(c, base);
    key_shared(c, KEY_ANY, one_line, any);
    uint32_t *ch = xmalloc(sizeof *ch * (size_t)used);
    for (int k = 0; k < used; k++) {
        struct sbuf r = {0};
        int nc = 0;
        if (!t[k].is_name && !(one_line && k == 0)) sbuf_adds(&r, "\"\\\"\" | ");
        for (int x = t[k].first; x >= 0; x = t[x].next) {
            if (one_line && t[x].cp == '\n') continue;
            put_key_char(&r, t[x].cp);
            sbuf_addf(&r, " %s-%d | ", base, x);
            ch[nc++] = t[x].cp;
        }
        if (nc <= 1 && (nc == 0 || ch[0] < 128)) { /* the common case: a rule shared */
            char o[RN];
            key_shared(c, nc ? (int)ch[0] : KEY_OTHER, one_line, o);
            sbuf_adds(&r, o);
        } else {
            key_other(&r, ch, nc, one_line, any);
        }
        sc_key_node(c, base, k, &r);
    }
    free(ch);
    free(t);
    sc_key_root(c, base, nm);
}
