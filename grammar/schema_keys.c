/* JSON Schema -> GBNF, object keys: rules of keys other than given names, and
 * patternProperties' patterns read for their shape (see schema_keys.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/sbuf.h"
#include "../util/utf8.h"
#include "gram_ir.h"
#include "regex.h"
#include "regex_dfa.h"
#include "schema_internal.h"
#include "schema_keys.h"

/* ---- patternProperties' keys: an automaton of the patterns and the names (regex_dfa.h) ---- */

#define PATTERN_STATES 1000 /* automaton states one pattern may need (regex_dfa.h) */

/* The value rule of a key that matches the patterns of known (bits of pe's children, in
 * order) and may match those of unknown: the schemas of all of them, and addl (NULL or false:
 * no key) where it may match none. 1, or 0 when no value can be written. */
static int set_value(struct sc *c, const cJSON *pe, const cJSON *addl, uint64_t known,
                     uint64_t unknown, char *val) {
    const cJSON *one = NULL;
    cJSON *every = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(every, "allOf");
    int i = 0, n = 0;
    cJSON_AddItemToArray(c->owned, every);
    if (!known && (!addl || cJSON_IsFalse(addl))) return 0;
    for (const cJSON *x = pe->child; x; x = x->next, i++)
        if ((known | unknown) >> i & 1) cJSON_AddItemToArray(all, cJSON_Duplicate(one = x, 1)), n++;
    if (!known) cJSON_AddItemToArray(all, cJSON_Duplicate(one = addl, 1)), n++;
    if (n == 1 && cJSON_IsFalse(one)) return 0;
    if (n == 1 && cJSON_IsTrue(one)) {
        snprintf(val, RN, "%s", c->j);
        return 1;
    }
    return sc_try_gen(c, n > 1 ? every : one, val, 1, NULL) == 1;
}

/* live[q]: a string with an end (out[q] >= 0: its own) can be read on from state q. */
static void live_states(const struct rdfa *d, const int *out, unsigned char *live) {
    size_t n = (size_t)d->n_states, w = (size_t)d->n_iv;
    int *cnt = xcalloc(n + 1, sizeof *cnt), *pred = xmalloc(sizeof *pred * (n * w + 1));
    int *queue = xmalloc(sizeof *queue * (n + 1)), qn = 0;
    for (size_t q = 0; q < n * w; q++) cnt[d->next[q] + 1]++;
    for (size_t q = 0; q < n; q++) cnt[q + 1] += cnt[q];
    int *fill = xmalloc(sizeof *fill * (n + 1));
    memcpy(fill, cnt, sizeof *fill * (n + 1));
    for (size_t q = 0; q < n * w; q++) pred[fill[d->next[q]]++] = (int)(q / w);
    for (size_t q = 0; q < n; q++)
        if ((live[q] = out[q] >= 0)) queue[qn++] = (int)q;
    while (qn) {
        int t = queue[--qn];
        for (int j = cnt[t]; j < cnt[t + 1]; j++)
            if (!live[pred[j]]) live[pred[j]] = 1, queue[qn++] = pred[j];
    }
    free(cnt);
    free(pred);
    free(queue);
    free(fill);
}

/* The character classes of one automaton's rules: a long one is written once, as a rule
 * of its own (base-cK), so that the grammar compiles each once. */
struct classes {
    char **text;
    int n, cap;
};

static void put_class(struct sc *c, struct classes *cl, const char *base, struct cpset *set,
                      struct sbuf *r) {
    struct sbuf t = {0};
    regex_put_set(&t, set, 1);
    if (t.len < 48) {
        sbuf_adds(r, t.p);
        sbuf_free(&t);
        return;
    }
    int k = 0;
    while (k < cl->n && strcmp(cl->text[k], t.p) != 0) k++;
    if (k == cl->n) {
        char rn[RN + 16];
        if (cl->n == cl->cap)
            cl->text = xrealloc(cl->text, sizeof *cl->text * (size_t)(cl->cap = 2 * cl->cap + 8));
        cl->text[cl->n++] = t.p;
        snprintf(rn, sizeof rn, "%s-c%d", base, k);
        sc_emit(c, rn, t.p);
    } else {
        sbuf_free(&t);
    }
    sbuf_addf(r, "%s-c%d", base, k);
}

/* The rule of state q's class (cls): the string may end here (end, NULL: not), or a
 * character leads to a live state (each written as JSON writes it: raw, or the one escape
 * regex_put_set gives). */
static void put_state(struct sc *c, const struct rdfa *d, int q, const char *end,
                      const unsigned char *live, const int *cls, const char *base,
                      struct classes *cl) {
    struct sbuf r = {0};
    const int *row = d->next + (size_t)q * (size_t)d->n_iv;
    const char *sep = "";
    if (end) {
        sbuf_adds(&r, end);
        sep = " | ";
    }
    for (int k = 0; k < d->n_iv; k++) {
        int t = cls[row[k]], seen = 0;
        for (int j = 0; j < k && !seen; j++) seen = cls[row[j]] == t;
        if (!live[row[k]] || seen) continue;
        struct cpset set = {0};
        for (int j = k; j < d->n_iv; j++)
            if (cls[row[j]] == t) cps_add(&set, d->iv[j][0], d->iv[j][1]);
        sbuf_adds(&r, sep);
        put_class(c, cl, base, &set, &r);
        sbuf_addf(&r, " %s-%d", base, t);
        sep = " | ";
        free(set.r);
    }
    sc_key_node(c, base, cls[q], &r);
}

/* The rules of d's states, one per class of states alike (rdfa_merge), those from which the
 * string can end: at state q when out[q] >= 0, with ends[out[q]]. The start's rule (the
 * opening quote, then state 0) into nm; 0 (no rule) when no string can end. */
static int put_automaton(struct sc *c, const struct rdfa *d, const int *out, char **ends,
                         char *nm) {
    unsigned char *live = xcalloc((size_t)d->n_states, 1), *done;
    live_states(d, out, live);
    int any = live[0], *cls = xmalloc(sizeof *cls * (size_t)d->n_states);
    done = xcalloc((size_t)rdfa_merge(d, out, cls), 1);
    if (any) {
        char base[RN];
        sc_new_rule(c, base);
        struct classes cl = {0};
        for (int q = 0; q < d->n_states; q++)
            if (live[q] && !done[cls[q]])
                done[cls[q]] = 1,
                put_state(c, d, q, out[q] >= 0 ? ends[out[q]] : NULL, live, cls, base, &cl);
        for (int k = 0; k < cl.n; k++) free(cl.text[k]);
        free(cl.text);

        sc_key_root(c, base, nm);
    }
    free(done);
    free(cls);
    free(live);
    return any;
}

int sc_gen_pattern_keys(struct sc *c, const cJSON *pe, const cJSON *addl, const char *const *names,
                        int nn, struct sbuf *e) {
    int np = cJSON_GetArraySize(pe), i = 0;
    if (np > RDFA_MAX_PATTERNS) return sc_serr(c, "%s", "patternProperties: more than 64 patterns");
    const char *pats[RDFA_MAX_PATTERNS];
    for (const cJSON *x = pe->child; x; x = x->next) pats[i++] = x->string;
    struct rdfa d;
    char err[ERR_LEN], key[RN];
    if (rdfa_build(&d, pats, np, names, nn, PATTERN_STATES, err) < 0) return sc_serr(c, "%s", err);
    /* the values, written before any key rule (a failed try takes back what it wrote) */
    int *out = xmalloc(sizeof *out * (size_t)d.n_states), n_seen = 0;
    char **ends = xcalloc((size_t)d.n_states, sizeof *ends);
    uint64_t *seen = xmalloc(sizeof *seen * (size_t)d.n_states);
    for (int q = 0; q < d.n_states; q++) { /* out[q]: which value, -1 none */
        uint64_t set = d.acc[q];
        int j = 0;
        out[q] = -1;
        if (d.name[q]) continue;
        while (j < n_seen && seen[j] != set) j++;
        if (j == n_seen) {
            char val[RN];
            seen[n_seen++] = set;
            if (set_value(c, pe, addl, set, d.unknown, val)) { /* unknown: may match any key */
                struct sbuf t = {0};
                sbuf_addf(&t, "\"\\\"\" %s-ws \":\" %s-ws %s", c->j, c->j, val);
                ends[j] = t.p;
            }
        }
        if (ends[j]) out[q] = j;
    }
    int any = put_automaton(c, &d, out, ends, key);
    if (any) sbuf_addf(e, "%s%s", e->len ? " | " : "", key);
    for (int j = 0; j < n_seen; j++) free(ends[j]);
    free(ends);
    free(seen);
    free(out);
    rdfa_free(&d);
    return any;
}

/* d: the automaton of one pattern (a string's); 0, or -1 with c->err. */
static int pattern_automaton(struct sc *c, const char *pattern, struct rdfa *d) {
    char err[ERR_LEN];
    if (rdfa_build(d, &pattern, 1, NULL, 0, PATTERN_STATES, err) < 0)
        return err_set(c->err, "JSON Schema: pattern: %s", err + strlen("patternProperties: "));
    return 0;
}

/* The rule of the JSON strings (quotes included) that d accepts, appended to b; 1, or -1
 * with c->err naming unsat where it accepts none. */
static int put_string_automaton(struct sc *c, const struct rdfa *d, const char *unsat,
                                struct sbuf *b) {
    char nm[RN], quote[] = "\"\\\"\"", *ends[1] = {quote};
    int *out = xmalloc(sizeof *out * (size_t)d->n_states);
    for (int q = 0; q < d->n_states; q++) out[q] = d->acc[q] ? 0 : -1;
    int rc = put_automaton(c, d, out, ends, nm) ? 1 : sc_serr(c, "unsatisfiable schema: %s", unsat);
    if (rc > 0) sbuf_adds(b, nm);
    free(out);
    return rc;
}

int sc_gen_pattern_string(struct sc *c, const char *pattern, struct sbuf *b) {
    struct rdfa d;
    if (pattern_automaton(c, pattern, &d) < 0) return -1;
    int rc = d.unknown ? 0 : put_string_automaton(c, &d, "no string matches the pattern", b);
    rdfa_free(&d);
    return rc;
}

int sc_gen_pattern_lengths(struct sc *c, const char *pattern, long lo, long hi, struct sbuf *b) {
    struct rdfa d, p = {0};
    if (pattern_automaton(c, pattern, &d) < 0) return -1;
    long cap = hi >= 0 ? hi : lo; /* counts past it are alike: too long, or long enough */
    if (d.unknown || (double)d.n_states * (double)(cap + 1) + 1 > PATTERN_LENGTH_STATES) {
        rdfa_free(&d);
        return 0;
    }
    /* state (q, k): the pattern's automaton at q after k characters (k = cap: cap or more);
     * the last state: past hi, a dead end */
    size_t w = (size_t)d.n_iv;
    p.n_states = d.n_states * (int)(cap + 1) + 1, p.n_iv = d.n_iv;
    p.iv = xmalloc(sizeof *p.iv * w);
    memcpy(p.iv, d.iv, sizeof *p.iv * w);
    p.next = xmalloc(sizeof *p.next * w * (size_t)p.n_states);
    p.acc = xcalloc((size_t)p.n_states, sizeof *p.acc);
    p.name = xcalloc((size_t)p.n_states, 1);
    int dead = p.n_states - 1;
    for (int q = 0; q < d.n_states; q++)
        for (long k = 0; k <= cap; k++) {
            int s = q * (int)(cap + 1) + (int)k;
            for (size_t j = 0; j < w; j++) {
                long k2 = k + 1 > cap ? cap : k + 1;
                p.next[(size_t)s * w + j] = hi >= 0 && k + 1 > hi
                                                ? dead
                                                : d.next[(size_t)q * w + j] * (int)(cap + 1) +
                                                      (int)k2;
            }
            p.acc[s] = k >= lo ? d.acc[q] : 0;
        }
    for (size_t j = 0; j < w; j++) p.next[(size_t)dead * w + j] = dead;
    int rc = put_string_automaton(c, &p, "no string of its minLength/maxLength matches the pattern",
                                  b);
    rdfa_free(&p);
    rdfa_free(&d);
    return rc;
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
