/* Grammar builder, checks and flattening (see gram_ir.h). */
#include "gram_ir.h"

#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "grammar.h"

void gb_init(struct gbuild *b) { memset(b, 0, sizeof *b); }

void gb_free(struct gbuild *b) {
    for (int i = 0; i < b->n; i++) {
        free(b->r[i].name);
        for (int j = 0; j < b->r[i].n_alts; j++) free(b->r[i].alts[j].e);
        free(b->r[i].alts);
    }
    free(b->r);
    free(b->cls);
    free(b->names);
    memset(b, 0, sizeof *b);
}

static int new_rule(struct gbuild *b) {
    if (b->n >= (int)GRAMMAR_MAX_RULES) return -1;
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->r = xrealloc(b->r, sizeof *b->r * (size_t)b->cap);
    }
    memset(&b->r[b->n], 0, sizeof b->r[b->n]);
    return b->n++;
}

static size_t name_hash(const char *s, size_t len) {
    uint64_t h = gram_hash_bytes(s, len, 0xcbf29ce484222325ull);
    return (size_t)(h ^ h >> 32);
}

/* Doubles the name table (or makes the first) and indexes every named rule in it. */
static void grow_names(struct gbuild *b) {
    size_t nc = b->names_cap ? 2 * b->names_cap : 256;
    free(b->names);
    b->names = xcalloc(nc, sizeof *b->names);
    b->names_cap = nc;
    for (int i = 0; i < b->n; i++)
        if (b->r[i].name) {
            size_t j = name_hash(b->r[i].name, strlen(b->r[i].name)) & (nc - 1);
            while (b->names[j]) j = (j + 1) & (nc - 1);
            b->names[j] = i + 1;
        }
}

/* By a hash of the names: a schema of thousands of definitions makes as many rules, and a
 * search through all of them per reference had made compiling quadratic (2000 $refs: 8 s). */
int gb_rule(struct gbuild *b, const char *name, size_t len, size_t pos) {
    if (2 * ((size_t)b->n_named + 1) > b->names_cap) grow_names(b);
    size_t j = name_hash(name, len) & (b->names_cap - 1);
    for (; b->names[j]; j = (j + 1) & (b->names_cap - 1)) {
        const char *n = b->r[b->names[j] - 1].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) return b->names[j] - 1;
    }
    int r = new_rule(b);
    if (r < 0) return -1;
    b->r[r].name = xmalloc(len + 1);
    memcpy(b->r[r].name, name, len);
    b->r[r].name[len] = 0;
    b->r[r].def_pos = pos;
    b->names[j] = r + 1;
    b->n_named++;
    return r;
}

int gb_anon(struct gbuild *b) {
    int r = new_rule(b);
    if (r >= 0) b->r[r].defined = 1;
    return r;
}

struct galt *gb_alt(struct gbuild *b, int r) {
    struct grule *ru = &b->r[r];
    if (ru->n_alts == ru->cap_alts) {
        ru->cap_alts = ru->cap_alts ? 2 * ru->cap_alts : 2;
        ru->alts = xrealloc(ru->alts, sizeof *ru->alts * (size_t)ru->cap_alts);
    }
    struct galt *a = &ru->alts[ru->n_alts++];
    memset(a, 0, sizeof *a);
    b->n_elems++; /* its E_END */
    return a;
}

static int push(struct gbuild *b, struct galt *a, struct gelem e) {
    if (b->n_elems >= GRAMMAR_MAX_ELEMS) return -1;
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->e = xrealloc(a->e, sizeof *a->e * (size_t)a->cap);
    }
    a->e[a->n++] = e;
    b->n_elems++;
    return 0;
}

static int add_class(struct gbuild *b, struct galt *a, const uint64_t bits[4], int shared) {
    int c = -1;
    /* recent classes first: literals repeat the same few bytes */
    for (int i = b->n_cls - 1; shared && i >= 0 && i >= b->n_cls - 512; i--)
        if (i != b->uq_cls - 1 && memcmp(b->cls[i], bits, 32) == 0) {
            c = i;
            break;
        }
    if (c < 0) {
        if (b->n_cls >= (int)GRAMMAR_MAX_ELEMS) return -1;
        if (b->n_cls == b->cap_cls) {
            b->cap_cls = b->cap_cls ? 2 * b->cap_cls : 64;
            b->cls = xrealloc(b->cls, sizeof *b->cls * (size_t)b->cap_cls);
        }
        memcpy(b->cls[b->n_cls], bits, 32);
        c = b->n_cls++;
    }
    return push(b, a, (struct gelem){E_CLASS, (uint32_t)c});
}

int gb_class(struct gbuild *b, struct galt *a, const uint64_t bits[4]) {
    return add_class(b, a, bits, 1);
}

int gb_unique_quote(struct gbuild *b, struct galt *a) {
    uint64_t bits[4] = {0};
    bits['"' >> 6] = 1ull << ('"' & 63);
    if (b->uq_cls) return push(b, a, (struct gelem){E_CLASS, (uint32_t)b->uq_cls - 1});
    int rc = add_class(b, a, bits, 0);
    if (rc == 0) b->uq_cls = b->n_cls;
    return rc;
}

int gb_byte(struct gbuild *b, struct galt *a, uint8_t c) {
    uint64_t bits[4] = {0};
    bits[c >> 6] = 1ull << (c & 63);
    return gb_class(b, a, bits);
}

int gb_ref(struct gbuild *b, struct galt *a, int rule) {
    return push(b, a, (struct gelem){E_REF, (uint32_t)rule});
}

int gb_copy(struct gbuild *b, struct galt *a, const struct gelem *e, int n) {
    for (int i = 0; i < n; i++)
        if (push(b, a, e[i]) < 0) return -1;
    return 0;
}

static const char *rname(const struct gbuild *b, int r) {
    return b->r[r].name ? b->r[r].name : "(group)";
}

/* An alternative's elements are all productive / nullable under the current marks. */
static int alt_all(const struct galt *a, const uint8_t *mark, int classes_ok) {
    for (int i = 0; i < a->n; i++) {
        if (a->e[i].type == E_CLASS) {
            if (!classes_ok) return 0;
        } else if (!mark[a->e[i].arg]) {
            return 0;
        }
    }
    return 1;
}

static void fixpoint(const struct gbuild *b, uint8_t *mark, int classes_ok) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < b->n; r++) {
            if (mark[r]) continue;
            for (int j = 0; j < b->r[r].n_alts; j++)
                if (alt_all(&b->r[r].alts[j], mark, classes_ok)) {
                    mark[r] = 1;
                    changed = 1;
                    break;
                }
        }
    }
}

/* Left recursion: rule r calls s at a position preceded only by nullable references.
 * Iterative depth-first search for a cycle over those edges. */
static int left_recursive(const struct gbuild *b, const uint8_t *nullable, char *err) {
    uint8_t *state = xcalloc((size_t)b->n, 1); /* 0 new, 1 on path, 2 done */
    struct frame {
        int r, alt, pos;
    } *st = xmalloc(sizeof *st * (size_t)(b->n + 1));
    int bad = -1;
    for (int start = 0; start < b->n && bad < 0; start++) {
        if (state[start]) continue;
        int sp = 0;
        st[sp++] = (struct frame){start, 0, 0};
        state[start] = 1;
        while (sp > 0 && bad < 0) {
            struct frame *f = &st[sp - 1];
            const struct grule *ru = &b->r[f->r];
            if (f->alt >= ru->n_alts) {
                state[f->r] = 2;
                sp--;
                continue;
            }
            const struct galt *a = &ru->alts[f->alt];
            if (f->pos >= a->n || (f->pos > 0 && (a->e[f->pos - 1].type != E_REF ||
                                                  !nullable[a->e[f->pos - 1].arg]))) {
                f->alt++;
                f->pos = 0;
                continue;
            }
            struct gelem e = a->e[f->pos++];
            if (e.type != E_REF) {
                f->pos = a->n; /* a byte: nothing further is leftmost */
                continue;
            }
            if (state[e.arg] == 1) {
                bad = (int)e.arg;
            } else if (state[e.arg] == 0) {
                state[e.arg] = 1;
                st[sp++] = (struct frame){(int)e.arg, 0, 0};
            }
        }
    }
    if (bad >= 0)
        err_set(err, "grammar: left recursion through rule '%s' (not supported)", rname(b, bad));
    free(st);
    free(state);
    return bad >= 0 ? -1 : 0;
}

/* A binary min-heap of (cost, rule) for gram_need_tables. */
struct lheap {
    uint64_t *v; /* length << 32 | rule */
    size_t n, cap;
};

static void lheap_push(struct lheap *h, uint32_t len, uint32_t rule) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->v = xrealloc(h->v, sizeof *h->v * h->cap);
    }
    size_t i = h->n++;
    uint64_t x = (uint64_t)len << 32 | rule;
    while (i > 0 && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static uint64_t lheap_pop(struct lheap *h) {
    uint64_t top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

static uint32_t sat_add(uint32_t a, uint32_t b) {
    return a + b >= GRAM_NEED_INF ? GRAM_NEED_INF : a + b;
}

/* Bytes as the cost of a run: one token per byte (the default, and where no vocabulary is
 * known). */
static void run_cost_bytes(void *ctx, const struct gram *g, uint32_t p, uint32_t q,
                           uint32_t *cost) {
    (void)ctx;
    (void)g;
    for (uint32_t i = p; i < q; i++) cost[i - p] = q - i;
}

/* The shortest sentence of each rule, in the cost of gram_need_tables, comes from Knuth's
 * generalisation of Dijkstra to grammars (a sum of parts is a "superior function"): an
 * alternative's cost is known once every rule it refers to is, the smallest known cost is
 * final, so each rule is settled once, in O(elements log elements) whatever the grammar's
 * shape (an iterated fixed point could take a pass per rule). Every rule left after
 * flattening is productive, so every cost is finite (or saturated, or a run no token can
 * emit). */
void gram_need_tables(struct gram *g, gram_run_cost fn, void *ctx) {
    if (!fn) fn = run_cost_bytes;
    uint32_t n_alts = g->alt_off[g->n_rules];
    /* runs of byte classes: runc[i] = the cost from i to the end of i's run */
    uint32_t *runc = xmalloc(sizeof *runc * ((size_t)g->n_el + 1));
    for (uint32_t a = 0; a < n_alts; a++)
        for (uint32_t p = g->alts[a]; g->el[p].type != E_END;) {
            if (g->el[p].type != E_CLASS) {
                p++;
                continue;
            }
            uint32_t q = p;
            while (g->el[q].type == E_CLASS) q++;
            fn(ctx, g, p, q, runc + p);
            p = q;
        }
    uint32_t *minlen = xmalloc(sizeof *minlen * ((size_t)g->n_rules + 1));
    uint32_t *alt_len = xcalloc((size_t)n_alts + 1, sizeof *alt_len); /* cost known so far */
    uint32_t *alt_wait = xcalloc((size_t)n_alts + 1,
                                 sizeof *alt_wait); /* rule references not settled */
    uint32_t *alt_rule = xmalloc(sizeof *alt_rule * ((size_t)n_alts + 1));
    uint32_t *use_off = xcalloc((size_t)g->n_rules + 2,
                                sizeof *use_off); /* references to rule r, by alternative */
    uint32_t *use = xmalloc(sizeof *use * ((size_t)g->n_el + 1));
    for (uint32_t r = 0; r < g->n_rules; r++) {
        minlen[r] = GRAM_NEED_INF;
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) {
            alt_rule[a] = r;
            for (uint32_t p = g->alts[a]; g->el[p].type != E_END; p++)
                if (g->el[p].type == E_REF) {
                    alt_wait[a]++;
                    use_off[g->el[p].arg + 1]++;
                } else if (p == g->alts[a] || g->el[p - 1].type != E_CLASS) { /* a run's start */
                    alt_len[a] = sat_add(alt_len[a], runc[p]);
                }
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++) use_off[r + 1] += use_off[r];
    uint32_t *fill = xmalloc(sizeof *fill * ((size_t)g->n_rules + 1));
    memcpy(fill, use_off, sizeof *fill * g->n_rules);
    for (uint32_t a = 0; a < n_alts; a++)
        for (uint32_t p = g->alts[a]; g->el[p].type != E_END; p++)
            if (g->el[p].type == E_REF) use[fill[g->el[p].arg]++] = a;
    free(fill);
    struct lheap h = {0};
    for (uint32_t a = 0; a < n_alts; a++)
        if (alt_wait[a] == 0) lheap_push(&h, alt_len[a], alt_rule[a]);
    uint8_t *settled = xcalloc((size_t)g->n_rules + 1, 1);
    while (h.n) {
        uint64_t x = lheap_pop(&h);
        uint32_t r = (uint32_t)x, len = (uint32_t)(x >> 32);
        if (settled[r]) continue;
        settled[r] = 1;
        minlen[r] = len;
        for (uint32_t k = use_off[r]; k < use_off[r + 1]; k++) {
            uint32_t a = use[k];
            alt_len[a] = sat_add(alt_len[a], len);
            if (--alt_wait[a] == 0) lheap_push(&h, alt_len[a], alt_rule[a]);
        }
    }
    free(h.v);
    free(settled);
    free(g->rest);
    g->rest = xmalloc(sizeof *g->rest * ((size_t)g->n_el + 1));
    for (uint32_t a = 0; a < n_alts; a++) {
        uint32_t end = g->alts[a];
        while (g->el[end].type != E_END) end++;
        g->rest[end] = 0;
        uint32_t run_end = end; /* the first element after the run holding p */
        for (uint32_t p = end; p-- > g->alts[a];) {
            if (g->el[p].type == E_REF) {
                g->rest[p] = sat_add(g->rest[p + 1], minlen[g->el[p].arg]);
                run_end = p;
            } else {
                g->rest[p] = sat_add(g->rest[run_end], runc[p]);
            }
        }
    }
    free(runc);
    free(minlen);
    free(alt_len);
    free(alt_wait);
    free(alt_rule);
    free(use_off);
    free(use);
}

int gb_finish(struct gbuild *b, const char *root, struct gram *g, char *err) {
    memset(g, 0, sizeof *g);
    int ro = -1;
    for (int i = 0; i < b->n; i++) {
        if (!b->r[i].defined)
            return err_set(err, "grammar: rule '%s' is used but not defined", rname(b, i));
        if (b->r[i].name && strcmp(b->r[i].name, root) == 0) ro = i;
    }
    if (ro < 0) return err_set(err, "grammar: no start rule '%s'", root);
    uint8_t *nullable = xcalloc((size_t)b->n, 1), *productive = xcalloc((size_t)b->n, 1);
    fixpoint(b, nullable, 0);
    fixpoint(b, productive, 1);
    int rc = -1;
    if (!productive[ro]) {
        err_set(err, "grammar: the start rule '%s' matches nothing (unsatisfiable)", root);
        goto out;
    }
    if (left_recursive(b, nullable, err) < 0) goto out;
    /* flatten, leaving out alternatives that can never complete */
    size_t n_el = 0, n_alts = 0;
    for (int r = 0; r < b->n; r++)
        for (int j = 0; j < b->r[r].n_alts; j++)
            if (alt_all(&b->r[r].alts[j], productive, 1)) {
                n_el += (size_t)b->r[r].alts[j].n + 1;
                n_alts++;
            }
    g->el = xmalloc(sizeof *g->el * (n_el + 1));
    g->alts = xmalloc(sizeof *g->alts * (n_alts + 1));
    g->alt_off = xmalloc(sizeof *g->alt_off * ((size_t)b->n + 1));
    uint32_t ne = 0, na = 0;
    for (int r = 0; r < b->n; r++) {
        g->alt_off[r] = na;
        for (int j = 0; j < b->r[r].n_alts; j++) {
            const struct galt *a = &b->r[r].alts[j];
            if (!alt_all(a, productive, 1)) continue;
            g->alts[na++] = ne;
            if (a->n) memcpy(g->el + ne, a->e, sizeof *a->e * (size_t)a->n);
            ne += (uint32_t)a->n;
            g->el[ne++] = (struct gelem){E_END, 0};
        }
    }
    g->alt_off[b->n] = na;
    g->n_el = ne;
    g->n_rules = (uint32_t)b->n;
    g->root = (uint32_t)ro;
    g->n_cls = (uint32_t)b->n_cls;
    g->cls = b->cls;
    g->uq_cls = (uint32_t)b->uq_cls;
    b->uq_cls = 0;
    b->cls = NULL;
    b->n_cls = b->cap_cls = 0;
    rc = 0;
out:
    free(nullable);
    free(productive);
    return rc;
}

void gram_free(struct gram *g) {
    free(g->el);
    free(g->cls);
    free(g->alt_off);
    free(g->alts);
    free(g->rest);
    memset(g, 0, sizeof *g);
}

/* Code point ranges [lo, hi], sorted and merged. */

void cps_add(struct cpset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->r = xrealloc(s->r, sizeof *s->r * (size_t)s->cap);
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

void cps_norm(struct cpset *s) {
    if (s->n == 0) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int o = 0;
    for (int k = 1; k < s->n; k++) {
        if (s->r[k][0] <= s->r[o][1] + 1) {
            if (s->r[k][1] > s->r[o][1]) s->r[o][1] = s->r[k][1];
        } else {
            s->r[++o][0] = s->r[k][0];
            s->r[o][1] = s->r[k][1];
        }
    }
    s->n = o + 1;
}

void cps_negate(struct cpset *s) {
    cps_norm(s);
    struct cpset o = {0};
    uint32_t next = 0;
    for (int k = 0; k < s->n; k++) {
        if (s->r[k][0] > next) cps_add(&o, next, s->r[k][0] - 1);
        next = s->r[k][1] + 1;
    }
    if (next <= 0x10FFFF) cps_add(&o, next, 0x10FFFF);
    free(s->r);
    *s = o;
}
