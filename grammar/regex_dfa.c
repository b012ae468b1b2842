/* Regular expressions -> a deterministic automaton (regex_dfa.h). Each pattern is parsed
 * into a Thompson NFA (regex.c reads its atoms: classes, escapes, '.'), wrapped as a search
 * (any text before and after, ^ and $ as assertions at the ends; a lookahead right after a
 * leading ^ as a part of its own, see add_guarded), the names added as chains, and the union
 * determinised by subset construction over intervals of code points on which every edge
 * agrees. Keys are written with the characters where ECMA-262 (the reading JSON
 * Schema names) and Python/PCRE2 (jsonschema, tpd's own matching of names) agree: '.' differs
 * on \r, U+2028, U+2029; \d \w \s on non-ASCII and U+001C-U+001F; `$` on a final newline;
 * characters past U+FFFF are two units to ECMA-262. A pattern using one of these leaves the
 * characters out of every key; syntax read differently (`[]`, `{,n}`, \a, \U...) makes the
 * pattern unknown. */
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "grammar.h"
#include "regex.h"
#include "regex_dfa.h"

#define MAX_NFA 200000 /* NFA states of one build */

enum { E_CHR, E_EPS, E_BOL, E_EOL };

struct nedge {
    int from, to, kind;
    uint32_t lo, hi; /* E_CHR: code points, then interval indices (lo > hi: none allowed) */
};

/* What a part of a pattern says of the string: the pattern (its body; a lookahead's X at the
 * start of a ^-anchored pattern, which must match a prefix of the string, or must not). */
enum { C_BODY, C_AHEAD, C_NOT_AHEAD };

struct nfa {
    struct nedge *e;
    int ne, cap_e;
    int *fin, *owner; /* fin[s]: the part (nc: a name) s ends, -1; owner[s]: its part */
    int ns, cap_s;
    int *part_pat, *part_kind; /* part c: of pattern part_pat[c], a C_ kind */
    int nc, cap_c;
    struct cpset unsure; /* code points some pattern reads otherwise in another engine */
    int big;             /* a pattern took more than MAX_NFA states */
    int cur;             /* the pattern being added (owner of new states) */
};

static int nfa_state(struct nfa *a) {
    if (a->ns == a->cap_s) {
        a->cap_s = a->cap_s ? 2 * a->cap_s : 64;
        a->fin = xrealloc(a->fin, sizeof *a->fin * (size_t)a->cap_s);
        a->owner = xrealloc(a->owner, sizeof *a->owner * (size_t)a->cap_s);
    }
    a->fin[a->ns] = -1;
    a->owner[a->ns] = a->cur;
    return a->ns++;
}

/* A new part of pattern k (it owns the states made next). */
static void nfa_part(struct nfa *a, int k, int kind) {
    if (a->nc == a->cap_c) {
        a->cap_c = a->cap_c ? 2 * a->cap_c : 64;
        a->part_pat = xrealloc(a->part_pat, sizeof *a->part_pat * (size_t)a->cap_c);
        a->part_kind = xrealloc(a->part_kind, sizeof *a->part_kind * (size_t)a->cap_c);
    }
    a->part_pat[a->nc] = k;
    a->part_kind[a->nc] = kind;
    a->cur = a->nc++;
}

static void nfa_edge(struct nfa *a, int from, int to, int kind, uint32_t lo, uint32_t hi) {
    if (a->ne == a->cap_e)
        a->e = xrealloc(a->e, sizeof *a->e * (size_t)(a->cap_e = a->cap_e ? 2 * a->cap_e : 64));
    a->e[a->ne++] = (struct nedge){from, to, kind, lo, hi};
}

/* ---- patterns -> NFA ---- */

struct rp {
    struct nfa *a;
    const char *s;
    size_t n, i;
    int depth;
};

struct frag {
    int in, out;
};

static int parse_alt(struct rp *p, struct frag *f);

/* The atom re[from..to) (a class, an escape, '.'): the code points where its reading differs
 * between engines into a->unsure; -1 for syntax they read differently. */
static int note_atom(struct rp *p, size_t from, size_t to) {
    const char *s = p->s;
    struct cpset *u = &p->a->unsure;
    if (s[from] == '.') {
        cps_add(u, '\r', '\r');
        cps_add(u, 0x2028, 0x2029);
        return 0;
    }
    if (s[from] == '[' && (s[from + 1] == ']' || (s[from + 1] == '^' && s[from + 2] == ']')))
        return -1; /* ECMA-262: an empty class, or any character */
    for (size_t k = from; k + 1 < to; k++) {
        if (s[k] != '\\') continue;
        char e = s[++k];
        if (strchr("dwsDWS", e)) {
            cps_add(u, 0x1C, 0x1F);
            cps_add(u, 0x80, 0x10FFFF);
        } else if (e == 'a' || e == 'U') {
            return -1; /* ECMA-262: the letter itself */
        }
    }
    return 0;
}

/* A group, an anchor or a set of code points at p->i into f: 0, 1 for an anchor, -1 when
 * the pattern is outside the subset. */
static int parse_atom(struct rp *p, struct frag *f) {
    struct nfa *a = p->a;
    char c = p->s[p->i];
    f->in = nfa_state(a);
    f->out = nfa_state(a);
    if (c == '(') {
        const char *s = p->s + ++p->i;
        size_t left = p->n - p->i;
        if (left >= 2 && s[0] == '?' && s[1] == ':') p->i += 2;
        else if (left >= 3 && s[0] == '?' && (s[1] == 'P' || s[1] == '<') &&
                 (s[2] == '<' || (s[1] == '<' && s[2] != '=' && s[2] != '!'))) {
            const char *e = memchr(s, '>', left);
            if (!e) return -1;
            p->i += (size_t)(e - s) + 1;
        } else if (left && s[0] == '?') return -1; /* lookaround, flags */
        struct frag g;
        if (++p->depth > GRAMMAR_MAX_NESTING || parse_alt(p, &g) < 0) return -1;
        p->depth--;
        if (p->i >= p->n || p->s[p->i] != ')') return -1;
        p->i++;
        nfa_edge(a, f->in, g.in, E_EPS, 0, 0);
        nfa_edge(a, g.out, f->out, E_EPS, 0, 0);
        return 0;
    }
    if (c == '^' || c == '$') {
        p->i++;
        nfa_edge(a, f->in, f->out, c == '^' ? E_BOL : E_EOL, 0, 0);
        if (c == '$') cps_add(&a->unsure, '\n', '\n'); /* Python: also before a final newline */
        return 1;
    }
    long lo, hi;
    size_t from = p->i, j = p->i;
    if (c == '*' || c == '+' || c == '?' || (c == '{' && regex_braces(p->s, p->n, &j, &lo, &hi)))
        return -1; /* nothing to repeat */
    struct cpset set = {0};
    char err[ERR_LEN];
    int rc = regex_atom_set(p->s, p->n, &p->i, &set, err) < 0 || note_atom(p, from, p->i) < 0;
    cps_norm(&set);
    for (int k = 0; !rc && k < set.n; k++)
        nfa_edge(a, f->in, f->out, E_CHR, set.r[k][0], set.r[k][1]);
    free(set.r);
    return rc ? -1 : 0;
}

/* The quantifier at p->i into *lo, *hi (hi -1: no bound); 0 when there is none, -1 when
 * outside the subset. */
static int read_quant(struct rp *p, long *lo, long *hi) {
    *lo = *hi = 1;
    if (p->i >= p->n) return 0;
    char c = p->s[p->i];
    if (c == '*' || c == '+' || c == '?') {
        *lo = c == '+';
        *hi = c == '?' ? 1 : -1;
        p->i++;
    } else if (c == '{' && p->i + 1 < p->n && p->s[p->i + 1] == ',') {
        return -1; /* {,n}: a quantifier to Python, literal text to ECMA-262 */
    } else if (c == '{' && regex_braces(p->s, p->n, &p->i, lo, hi)) {
        if (*lo > GRAMMAR_MAX_REPEAT || *hi > GRAMMAR_MAX_REPEAT || (*hi >= 0 && *hi < *lo))
            return -1;
    } else {
        return 0;
    }
    if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: the same strings */
    size_t j = p->i;
    long a, b;
    if (p->i < p->n && (strchr("*+?", p->s[p->i]) || regex_braces(p->s, p->n, &j, &a, &b)))
        return -1; /* possessive, or a repeat repeated */
    return 1;
}

/* An atom and its quantifier into f: lo copies of the atom (parsed again for each), then
 * one loop, or hi - lo optional ones nested (X(X(X)?)?)? so that a set of the automaton holds
 * the next copy and the exit, not every copy after it. */
static int parse_item(struct rp *p, struct frag *f) {
    size_t at = p->i;
    int anchor = parse_atom(p, f);
    long lo, hi;
    int q = anchor < 0 ? -1 : read_quant(p, &lo, &hi);
    if (q <= 0) return q;
    if (anchor) return -1;
    size_t end = p->i;
    struct frag first = *f, g;
    long copies = lo + (hi < 0 ? 1 : hi - lo);
    int cur = f->in = nfa_state(p->a), out = nfa_state(p->a);
    for (long k = 0; k < copies; k++) {
        if (p->a->ns > MAX_NFA) return p->a->big = 1, -1;
        if (k == 0) g = first;
        else {
            p->i = at;
            if (parse_atom(p, &g) < 0) return -1;
        }
        nfa_edge(p->a, cur, g.in, E_EPS, 0, 0);
        if (k < lo) {
            cur = g.out;
            continue;
        }
        if (hi < 0) nfa_edge(p->a, g.out, g.in, E_EPS, 0, 0);
        nfa_edge(p->a, cur, out, E_EPS, 0, 0);
        cur = g.out;
    }
    nfa_edge(p->a, cur, out, E_EPS, 0, 0);
    p->i = end;
    f->out = out;
    return 0;
}

static int parse_seq(struct rp *p, struct frag *f) {
    f->in = f->out = nfa_state(p->a);
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        struct frag g;
        if (parse_item(p, &g) < 0) return -1;
        nfa_edge(p->a, f->out, g.in, E_EPS, 0, 0);
        f->out = g.out;
    }
    return 0;
}

static int parse_alt(struct rp *p, struct frag *f) {
    f->in = nfa_state(p->a);
    f->out = nfa_state(p->a);
    for (;;) {
        struct frag g;
        if (parse_seq(p, &g) < 0) return -1;
        nfa_edge(p->a, f->in, g.in, E_EPS, 0, 0);
        nfa_edge(p->a, g.out, f->out, E_EPS, 0, 0);
        if (p->i >= p->n || p->s[p->i] != '|') return 0;
        p->i++;
    }
}

/* Fragment f of the current part as a search from start: any text, f, any text (its end
 * state, tagged with the part, loops on every character: a match for good). */
static void add_search(struct nfa *a, struct frag f, int start) {
    int pre = nfa_state(a), fin = nfa_state(a);
    nfa_edge(a, start, pre, E_EPS, 0, 0);
    nfa_edge(a, pre, pre, E_CHR, 0, 0x10FFFF);
    nfa_edge(a, pre, f.in, E_EPS, 0, 0);
    nfa_edge(a, f.out, fin, E_EPS, 0, 0);
    nfa_edge(a, fin, fin, E_CHR, 0, 0x10FFFF);
    a->fin[fin] = a->cur;
}

/* 1 when the pattern at p->i opens a lookahead, (?= or (?!. */
static int at_lookahead(const struct rp *p) {
    return p->i + 2 < p->n && p->s[p->i] == '(' && p->s[p->i + 1] == '?' &&
           (p->s[p->i + 2] == '=' || p->s[p->i + 2] == '!');
}

/* ^ then what parse (parse_seq, or parse_alt inside a lookahead) reads at p->i into f: the
 * part anchored at the start of the string. */
static int parse_anchored(struct rp *p, struct frag *f, int (*parse)(struct rp *, struct frag *)) {
    struct frag g;
    f->in = nfa_state(p->a);
    int mid = nfa_state(p->a);
    nfa_edge(p->a, f->in, mid, E_BOL, 0, 0);
    if (parse(p, &g) < 0) return -1;
    nfa_edge(p->a, mid, g.in, E_EPS, 0, 0);
    f->out = g.out;
    return 0;
}

/* A pattern ^(?=X)(?!Y)...R: one part per lookahead (X searched from the start of the string:
 * X matches a prefix, the whole string when it ends with $), then ^R; pattern k matches when
 * ^R and every (?=X) part do and no (?!Y) part does (rdfa_build's acc). A lookahead quantified
 * or elsewhere, or R with a | outside groups (only its first branch would be guarded), is
 * outside the subset. */
static int add_guarded(struct rp *p, int k, int start) {
    struct frag f;
    p->i = 1;
    while (at_lookahead(p)) {
        nfa_part(p->a, k, p->s[p->i + 2] == '=' ? C_AHEAD : C_NOT_AHEAD);
        p->i += 3;
        if (parse_anchored(p, &f, parse_alt) < 0 || p->i >= p->n || p->s[p->i] != ')') return -1;
        p->i++;
        add_search(p->a, f, start);
    }
    nfa_part(p->a, k, C_BODY);
    if (parse_anchored(p, &f, parse_seq) < 0 || p->i < p->n) return -1;
    add_search(p->a, f, start);
    return 0;
}

/* Pattern k as a search from start (add_search), or its parts (add_guarded). -1 (nothing
 * added) when it is outside the subset. */
static int add_pattern(struct nfa *a, const char *pat, int k, int start) {
    struct rp p = {a, pat, strlen(pat), 1, 0};
    int ne = a->ne, ns = a->ns, nu = a->unsure.n, nc = a->nc, rc;
    struct frag f;
    if (pat[0] == '^' && at_lookahead(&p)) {
        rc = add_guarded(&p, k, start);
    } else {
        p.i = 0;
        nfa_part(a, k, C_BODY);
        rc = parse_alt(&p, &f) < 0 || p.i < p.n ? -1 : 0;
        if (rc == 0) add_search(a, f, start);
    }
    if (rc < 0) {
        a->ne = ne;
        a->ns = ns;
        a->unsure.n = nu;
        a->nc = nc;
    }
    return rc;
}

/* Name nm as a chain of states from start, its end tagged tag. */
static void add_name(struct nfa *a, const char *nm, int tag, int start) {
    const uint8_t *s = (const uint8_t *)nm;
    size_t len = strlen(nm), l;
    int cur = start;
    a->cur = tag;
    for (size_t at = 0; at < len; at += l) {
        if (!(l = utf8_valid_len(s + at, len - at))) return; /* never a key */
        uint32_t cp = utf8_decode(s + at, l);
        int nx = nfa_state(a);
        nfa_edge(a, cur, nx, E_CHR, cp, cp);
        cur = nx;
    }
    a->fin[cur] = tag;
}

/* ---- the alphabet: intervals of the code points keys are written with ---- */

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* The interval index of the first interval at or after cp (n when none). */
static int iv_at(uint32_t (*iv)[2], int n, uint32_t cp) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (iv[mid][1] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* d->iv: the code points JSON writes raw or with a short escape, U+FFFF at most, none that a
 * pattern reads differently between engines, cut where any edge's range starts or ends; the
 * edges' ranges become interval indices. */
static void build_alphabet(struct nfa *a, struct rdfa *d) {
    struct cpset out = {0};
    for (int k = 0; k < a->unsure.n; k++) cps_add(&out, a->unsure.r[k][0], a->unsure.r[k][1]);
    cps_add(&out, 0, 7);
    cps_add(&out, 0x0B, 0x0B);
    cps_add(&out, 0x0E, 0x1F);
    cps_add(&out, 0xD800, 0xDFFF);
    cps_add(&out, 0x10000, 0x10FFFF);
    cps_negate(&out); /* now the allowed code points */
    size_t nb = 0, cap = 2 * (size_t)(out.n + a->ne) + 2;
    uint32_t *b = xmalloc(sizeof *b * cap);
    for (int k = 0; k < out.n; k++) b[nb++] = out.r[k][0], b[nb++] = out.r[k][1] + 1;
    for (int k = 0; k < a->ne; k++)
        if (a->e[k].kind == E_CHR) b[nb++] = a->e[k].lo, b[nb++] = a->e[k].hi + 1;
    qsort(b, nb, sizeof *b, cmp_u32);
    d->iv = xmalloc(sizeof *d->iv * (nb + 1));
    d->n_iv = 0;
    for (size_t k = 0, r = 0; k + 1 < nb; k++) {
        if (b[k] == b[k + 1]) continue;
        while (r < (size_t)out.n && out.r[r][1] < b[k]) r++;
        if (r < (size_t)out.n && out.r[r][0] <= b[k]) { /* inside an allowed range */
            d->iv[d->n_iv][0] = b[k];
            d->iv[d->n_iv++][1] = b[k + 1] - 1;
        }
    }
    for (int k = 0; k < a->ne; k++) {
        struct nedge *e = &a->e[k];
        if (e->kind != E_CHR) continue;
        int lo = iv_at(d->iv, d->n_iv, e->lo), hi = iv_at(d->iv, d->n_iv, e->hi + 1) - 1;
        e->lo = hi < lo ? 1 : (uint32_t)lo; /* none: lo > hi */
        e->hi = hi < lo ? 0 : (uint32_t)hi;
    }
    free(b);
    free(out.r);
}

/* ---- subset construction ---- */

struct subset {
    const struct nfa *a;
    int nc;      /* the patterns' parts (a->nc): end tags past them are names' */
    int *guards; /* the parts that are lookaheads, n_guards of them */
    int n_guards;
    int *adj_off, *adj; /* edges by source state */
    int *stack, *matched;
    unsigned *mark, *in_set, gen; /* in_set: marks of the set state_of looks up */
    unsigned char *useful;        /* the state can reach an end without passing a ^ */
    int *pool; /* the DFA states' NFA sets (in no order): pool[off[q]..off[q] + len[q]) */
    size_t used, cap;
    size_t *off;
    int *len, n, cap_n;
    int *slot; /* hash table of the sets: state + 1, 0 empty (the start is not in it) */
    size_t n_slot;
};

/* The states seeds[0..n) reach by empty edges (bol, eol: the anchors' too) into out (in
 * no order); without those that can no longer reach an end (past the start, behind a ^) and
 * the states of a part whose end state is in (a match for good: its end loops on every
 * character). Returns how many. */
static int closure(struct subset *sb, const int *seeds, int n, int bol, int eol, int *out) {
    const struct nfa *a = sb->a;
    int top = 0, m = 0, drop = 0;
    unsigned g = ++sb->gen;
    for (int i = 0; i < n; i++)
        if (sb->mark[seeds[i]] != g) sb->mark[seeds[i]] = g, sb->stack[top++] = seeds[i];
    while (top) {
        int s = sb->stack[--top];
        if (bol || sb->useful[s]) out[m++] = s;
        for (int j = sb->adj_off[s]; j < sb->adj_off[s + 1]; j++) {
            const struct nedge *e = &a->e[sb->adj[j]];
            if (e->kind == E_CHR || (e->kind == E_BOL && !bol) || (e->kind == E_EOL && !eol))
                continue;
            if (sb->mark[e->to] != g) sb->mark[e->to] = g, sb->stack[top++] = e->to;
        }
    }
    for (int i = 0; i < m; i++) {
        int f = a->fin[out[i]];
        if (f >= 0 && f < sb->nc) sb->matched[f] = (int)g, drop = 1;
    }
    if (drop) {
        int k = 0;
        for (int i = 0; i < m; i++) {
            int o = a->owner[out[i]];
            if (o < 0 || o >= sb->nc || sb->matched[o] != (int)g || a->fin[out[i]] == o)
                out[k++] = out[i];
        }
        m = k;
    }
    return m;
}

/* A hash of the set x[0..n) that does not depend on the order of its elements. */
static size_t set_hash(const int *x, int n, size_t mod) {
    uint64_t h = (uint64_t)n;
    for (int i = 0; i < n; i++) {
        uint64_t v = (uint64_t)(unsigned)x[i] * 0x9E3779B97F4A7C15ull;
        h += (v ^ (v >> 29)) * 0xBF58476D1CE4E5B9ull;
    }
    return (size_t)(h % mod);
}

static void rehash(struct subset *sb) {
    free(sb->slot);
    sb->n_slot = sb->n_slot ? 2 * sb->n_slot : 1024;
    sb->slot = xcalloc(sb->n_slot, sizeof *sb->slot);
    for (int q = 1; q < sb->n; q++) {
        size_t h = set_hash(sb->pool + sb->off[q], sb->len[q], sb->n_slot);
        while (sb->slot[h]) h = (h + 1) % sb->n_slot;
        sb->slot[h] = q + 1;
    }
}

/* The DFA state of the set x[0..n), added when new (the start always). */
static int state_of(struct subset *sb, const int *x, int n, int start) {
    if (2 * (size_t)(sb->n + 1) > sb->n_slot) rehash(sb);
    size_t h = set_hash(x, n, sb->n_slot);
    unsigned g = ++sb->gen;
    for (int i = 0; i < n; i++) sb->in_set[x[i]] = g;
    for (; !start && sb->slot[h]; h = (h + 1) % sb->n_slot) {
        int q = sb->slot[h] - 1, same = sb->len[q] == n; /* sets: no element twice */
        for (int i = 0; i < n && same; i++)
            same = sb->in_set[sb->pool[sb->off[q] + (size_t)i]] == g;
        if (same) return q;
    }
    if (sb->n == sb->cap_n) {
        sb->cap_n = sb->cap_n ? 2 * sb->cap_n : 64;
        sb->off = xrealloc(sb->off, sizeof *sb->off * (size_t)sb->cap_n);
        sb->len = xrealloc(sb->len, sizeof *sb->len * (size_t)sb->cap_n);
    }
    while (sb->used + (size_t)n > sb->cap)
        sb->pool = xrealloc(sb->pool, sizeof *sb->pool * (sb->cap = sb->cap ? 2 * sb->cap : 1024));
    memcpy(sb->pool + sb->used, x, sizeof *x * (size_t)n);
    sb->off[sb->n] = sb->used;
    sb->len[sb->n] = n;
    sb->used += (size_t)n;
    if (!start) sb->slot[h] = sb->n + 1;
    return sb->n++;
}

struct ev {
    int at, s, delta; /* at interval at, NFA state s enters (+1) or leaves (-1) */
};

/* ev[0..n) ordered by interval (counting sort through tmp, by: n_iv + 2 counters). */
static void sort_ev(struct ev *ev, struct ev *tmp, size_t n, int *by, int n_iv) {
    memset(by, 0, sizeof *by * (size_t)(n_iv + 2));
    for (size_t i = 0; i < n; i++) by[ev[i].at + 1]++;
    for (int k = 0; k <= n_iv; k++) by[k + 1] += by[k];
    for (size_t i = 0; i < n; i++) tmp[by[ev[i].at]++] = ev[i];
    if (n) memcpy(ev, tmp, sizeof *ev * n);
}

/* The active states' multiset (cnt) changed by v; 1 when the set itself changed. */
static int apply_ev(const struct ev *v, int *cnt, int *act, int *pos, int *na) {
    int s = v->s;
    if (v->delta > 0 && cnt[s]++ == 0) {
        pos[s] = *na;
        act[(*na)++] = s;
        return 1;
    }
    if (v->delta < 0 && --cnt[s] == 0) {
        int j = pos[s];
        act[j] = act[--*na];
        pos[act[j]] = j;
        return 1;
    }
    return 0;
}

/* d->next of state q: a sweep over the intervals with the NFA states its edges reach there. */
static int step_state(struct subset *sb, struct rdfa *d, int q, int cap, int *buf, int *cnt,
                      int *act, int *pos, struct ev **evp, size_t *ecap, int *by) {
    const struct nfa *a = sb->a;
    size_t nev = 0;
    for (int i = 0; i < sb->len[q]; i++) {
        int s = sb->pool[sb->off[q] + (size_t)i];
        for (int j = sb->adj_off[s]; j < sb->adj_off[s + 1]; j++) {
            const struct nedge *e = &a->e[sb->adj[j]];
            if (e->kind != E_CHR || e->lo > e->hi) continue;
            if (2 * (nev + 2) > *ecap) /* the second half: sort_ev's */
                *evp = xrealloc(*evp, sizeof **evp * (*ecap = 2 * *ecap + 128));
            (*evp)[nev++] = (struct ev){(int)e->lo, e->to, 1};
            (*evp)[nev++] = (struct ev){(int)e->hi + 1, e->to, -1};
        }
    }
    struct ev *ev = *evp;
    sort_ev(ev, ev + *ecap / 2, nev, by, d->n_iv);
    int na = 0, changed = 1, t = 0, rc = 0;
    size_t e = 0;
    for (int k = 0; k < d->n_iv; k++) {
        while (e < nev && ev[e].at == k) changed |= apply_ev(&ev[e++], cnt, act, pos, &na);
        if (changed && rc == 0) {
            /* the empty set too: keys that match no pattern and are no name go on */
            t = state_of(sb, buf, na ? closure(sb, act, na, 0, 0, buf) : 0, 0);
            changed = 0;
            if (sb->n > cap) rc = -1;
        }
        d->next[(size_t)q * (size_t)d->n_iv + (size_t)k] = t;
    }
    while (e < nev) apply_ev(&ev[e++], cnt, act, pos, &na);
    return rc;
}

/* The patterns that match where the closure at the end of the string is x[0..m) (closure
 * just left sb->matched[c] == sb->gen for the parts c whose end is in): each whose body
 * matches, whose (?=X) parts all match and whose (?!Y) parts none. *name: a name ends. */
static uint64_t accepted(const struct subset *sb, const int *x, int m, unsigned char *name) {
    const struct nfa *a = sb->a;
    uint64_t acc = 0;
    for (int i = 0; i < m; i++) {
        int f = a->fin[x[i]];
        if (f >= 0 && f < sb->nc && a->part_kind[f] == C_BODY) acc |= 1ull << a->part_pat[f];
        else if (f == sb->nc) *name = 1;
    }
    for (int i = 0; i < sb->n_guards; i++) {
        int c = sb->guards[i];
        if ((sb->matched[c] == (int)sb->gen) != (a->part_kind[c] == C_AHEAD))
            acc &= ~(1ull << a->part_pat[c]);
    }
    return acc;
}

/* d's states from the NFA's start state: -1 past cap states. */
static int determinise(struct subset *sb, struct rdfa *d, int start, int cap) {
    const struct nfa *a = sb->a;
    int *buf = xmalloc(sizeof *buf * (size_t)a->ns), *act = xmalloc(sizeof *act * (size_t)a->ns);
    int *pos = xmalloc(sizeof *pos * (size_t)a->ns), *cnt = xcalloc((size_t)a->ns, sizeof *cnt);
    struct ev *ev = NULL;
    size_t ecap = 0, ncap = 0;
    int *by = xmalloc(sizeof *by * (size_t)(d->n_iv + 2));
    int m = closure(sb, &start, 1, 1, 0, buf), rc = 0;
    state_of(sb, buf, m, 1);
    for (int q = 0; q < sb->n && rc == 0; q++) {
        if ((size_t)sb->n > ncap) {
            ncap = (size_t)sb->cap_n;
            d->next = xrealloc(d->next, sizeof *d->next * ncap * (size_t)(d->n_iv ? d->n_iv : 1));
        }
        rc = step_state(sb, d, q, cap, buf, cnt, act, pos, &ev, &ecap, by);
    }
    d->n_states = sb->n;
    d->acc = xcalloc((size_t)sb->n, sizeof *d->acc);
    d->name = xcalloc((size_t)sb->n, 1);
    for (int q = 0; q < sb->n && rc == 0; q++) { /* what matches, the end of the key here */
        m = closure(sb, sb->pool + sb->off[q], sb->len[q], q == 0, 1, buf);
        d->acc[q] = accepted(sb, buf, m, &d->name[q]);
    }
    free(buf);
    free(act);
    free(pos);
    free(cnt);
    free(ev);
    free(by);
    return rc;
}

/* ---- building ---- */

/* The edges of a grouped by their source state (by_target: their target): those of state s
 * are (*idx)[(*off)[s]..(*off)[s + 1]). */
static void edges_by(const struct nfa *a, int by_target, int **off, int **idx) {
    int *o = xcalloc((size_t)a->ns + 1, sizeof *o), *x = xmalloc(sizeof *x * (size_t)(a->ne + 1));
    int *fill = xmalloc(sizeof *fill * (size_t)(a->ns + 1));
    for (int k = 0; k < a->ne; k++) o[(by_target ? a->e[k].to : a->e[k].from) + 1]++;
    for (int s = 0; s < a->ns; s++) o[s + 1] += o[s];
    memcpy(fill, o, sizeof *fill * (size_t)a->ns);
    for (int k = 0; k < a->ne; k++) x[fill[by_target ? a->e[k].to : a->e[k].from]++] = k;
    free(fill);
    *off = o;
    *idx = x;
}

/* The states from which an end state (a pattern's or a name's) can be reached by edges
 * other than ^ (which hold only at the start). */
static unsigned char *useful_states(const struct nfa *a) {
    int *off, *by, *queue = xmalloc(sizeof *queue * (size_t)a->ns), qn = 0;
    unsigned char *ok = xcalloc((size_t)a->ns, 1);
    edges_by(a, 1, &off, &by);
    for (int s = 0; s < a->ns; s++)
        if (a->fin[s] >= 0) ok[s] = 1, queue[qn++] = s;
    while (qn) {
        int t = queue[--qn];
        for (int j = off[t]; j < off[t + 1]; j++) {
            const struct nedge *e = &a->e[by[j]];
            if (e->kind == E_BOL || (e->kind == E_CHR && e->lo > e->hi) || ok[e->from]) continue;
            ok[e->from] = 1;
            queue[qn++] = e->from;
        }
    }
    free(off);
    free(by);
    free(queue);
    return ok;
}

/* d from pats[0..np) and names[0..nn): 0, or -1 past cap states (or a pattern of more than
 * MAX_NFA NFA states). */
static int build_once(struct rdfa *d, const char *const *pats, int np, const char *const *names,
                      int nn, int cap) {
    struct nfa a = {0};
    memset(d, 0, sizeof *d);
    a.cur = -1;
    int start = nfa_state(&a), rc = 0;
    for (int i = 0; i < np && !a.big; i++)
        if (add_pattern(&a, pats[i], i, start) < 0) d->unknown |= 1ull << i;
    for (int i = 0; i < nn && !a.big; i++) add_name(&a, names[i], a.nc, start);
    struct subset sb = {0};
    sb.a = &a;
    sb.nc = a.nc;
    sb.guards = xmalloc(sizeof *sb.guards * (size_t)(a.nc + 1));
    for (int c = 0; c < a.nc; c++)
        if (a.part_kind[c] != C_BODY) sb.guards[sb.n_guards++] = c;
    if (a.big) {
        rc = -1;
        goto out;
    }
    build_alphabet(&a, d);
    edges_by(&a, 0, &sb.adj_off, &sb.adj);
    sb.stack = xmalloc(sizeof *sb.stack * (size_t)a.ns);
    sb.matched = xcalloc((size_t)a.nc + 1, sizeof *sb.matched);
    sb.mark = xcalloc((size_t)a.ns, sizeof *sb.mark);
    sb.in_set = xcalloc((size_t)a.ns, sizeof *sb.in_set);
    sb.useful = useful_states(&a);
    rc = determinise(&sb, d, start, cap);
out:
    free(sb.guards);
    free(sb.adj_off);
    free(sb.adj);
    free(sb.stack);
    free(sb.matched);
    free(sb.mark);
    free(sb.in_set);
    free(sb.useful);
    free(sb.pool);
    free(sb.off);
    free(sb.len);
    free(sb.slot);
    free(a.e);
    free(a.fin);
    free(a.owner);
    free(a.part_pat);
    free(a.part_kind);
    free(a.unsure.r);
    if (rc < 0) rdfa_free(d);
    return rc;
}

int rdfa_build(struct rdfa *d, const char *const *pats, int np, const char *const *names, int nn,
               int max_states, char *err) {
    if (np > RDFA_MAX_PATTERNS)
        return err_set(err, "patternProperties: more than %d patterns", RDFA_MAX_PATTERNS);
    long cap = 4L * max_states; /* and two per character of the names (their trie) */
    for (int i = 0; i < nn && cap < 1000000; i++) cap += 2 * (long)strlen(names[i]);
    if (cap > 1000000) cap = 1000000;
    int rc = build_once(d, pats, np, names, nn, (int)cap);
    if (rc == 0 && d->n_states <= max_states) return 0;
    for (int i = 0; i < np; i++) { /* the pattern that alone needs too many, if one does */
        struct rdfa one;
        if (build_once(&one, pats + i, 1, NULL, 0, max_states) == 0) {
            rdfa_free(&one);
            continue;
        }
        if (rc == 0) rdfa_free(d);
        return err_set(err,
                       "patternProperties: pattern '%.200s' needs more than %d automaton states",
                       pats[i], max_states);
    }
    if (rc == 0) return 0;
    return err_set(err,
                   "patternProperties: the patterns and property names together need more than "
                   "%ld automaton states",
                   cap);
}

void rdfa_free(struct rdfa *d) {
    free(d->iv);
    free(d->next);
    free(d->acc);
    free(d->name);
    memset(d, 0, sizeof *d);
}

/* 1 when states p and q have the same output and lead to the same classes on every interval. */
static int same_row(const struct rdfa *d, const int *out, const int *cls, int p, int q) {
    if (out[p] != out[q]) return 0;
    const int *a = d->next + (size_t)p * (size_t)d->n_iv,
              *b = d->next + (size_t)q * (size_t)d->n_iv;
    for (int k = 0; k < d->n_iv; k++)
        if (cls[a[k]] != cls[b[k]]) return 0;
    return 1;
}

int rdfa_merge(const struct rdfa *d, const int *out, int *cls) {
    size_t n = (size_t)d->n_states, n_slot = 2 * n + 1;
    int *slot = xmalloc(sizeof *slot * n_slot), *nc = xmalloc(sizeof *nc * n);
    int n_cls = (int)n, before;
    for (size_t q = 0; q < n; q++) cls[q] = (int)q;
    do { /* classes of the states alike under the last classes, until none merge */
        before = n_cls;
        n_cls = 0;
        for (size_t i = 0; i < n_slot; i++) slot[i] = -1;
        for (size_t q = 0; q < n; q++) {
            uint64_t h = (uint64_t)(unsigned)out[q] * 1099511628211ull;
            const int *row = d->next + q * (size_t)d->n_iv;
            for (int k = 0; k < d->n_iv; k++)
                h = (h ^ (uint64_t)(unsigned)cls[row[k]]) * 1099511628211ull;
            size_t at = (size_t)(h % n_slot);
            while (slot[at] >= 0 && !same_row(d, out, cls, slot[at], (int)q))
                at = (at + 1) % n_slot;
            if (slot[at] < 0) slot[at] = (int)q, nc[q] = n_cls++;
            else nc[q] = nc[slot[at]];
        }
        memcpy(cls, nc, sizeof *cls * n);
    } while (n_cls < before);
    free(slot);
    free(nc);
    return n_cls;
}
