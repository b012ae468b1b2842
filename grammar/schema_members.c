/* JSON Schema -> GBNF, an object's members (schema_members.h): states R_k(f, w, n) that
 * write properties k.. and then the extra keys, f = nothing written yet (no comma needed),
 * w = which of the properties in dependencies (bits, rel) were written, as far as a later
 * property's dependencies still ask (need: those property k needs written before it; owed:
 * those whose dependencies name k, so that k cannot be left out once one is), n = how many
 * properties were written, counted up to maxProperties (or up to minProperties where there
 * is no maximum: more makes no difference). The states are explored from R_0(1, 0, 0), then
 * those from which no object can be finished (a required property past maxProperties, too
 * few properties left for minProperties, a dependency that can no longer be met) are left
 * out with the choices that lead to them, so that the grammar never starts an object it
 * cannot end. Toward minProperties one extra key counts at most: two could be one key
 * written twice, which a validator reads as one property. */
#include "schema_members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "grammar.h"
#include "regex.h"

#define DEP_BITS 16
#define MORE_STATES 4096 /* beyond two a property, as without dependencies or counts */

struct mstate {
    int k, f, cnt;
    unsigned w;
    int next[2];        /* the state after writing property k, after leaving it out; -1: none */
    char live, reached; /* an object can be finished from it; reached through live ones */
};

struct machine {
    const struct members *m;
    long min, max; /* max -1: none (also where it cannot bind) */
    int counting;  /* min or max asks to count */
    int *rel;      /* property k's dependency bit, -1: none */
    unsigned *need, *owed, *live;
    struct mstate *st;
    int n_st, cap_st;
    int *slot; /* hash of the states: index + 1, 0: empty */
    unsigned n_slot;
};

static void state_name(const struct machine *q, const char *base, const struct mstate *s, char *nm,
                       size_t len) {
    int n = snprintf(nm, len, "%s-%d-%d", base, s->k, s->f);
    if (s->w) n += snprintf(nm + n, len - (size_t)n, "-w%u", s->w);
    if (q->counting) snprintf(nm + n, len - (size_t)n, "-c%d", s->cnt);
}

/* The index of state (k, f, w, cnt) (w reduced to the bits still asked, cnt to what still
 * counts), added unless there; -1 when there are too many. */
static int state_at(struct machine *q, int k, int f, unsigned w, long cnt) {
    w &= q->live[k];
    if (q->max < 0 && cnt > q->min) cnt = q->min;
    unsigned h = ((unsigned)k * 2654435761u) ^ ((unsigned)f * 40503u) ^ (w * 2246822519u) ^
                 ((unsigned)cnt * 3266489917u);
    for (unsigned i = h & (q->n_slot - 1);; i = (i + 1) & (q->n_slot - 1)) {
        int x = q->slot[i] - 1;
        if (x < 0) {
            if (q->n_st == q->cap_st) return -1;
            q->st[q->n_st] = (struct mstate){k, f, (int)cnt, w, {-1, -1}, 0, 0};
            q->slot[i] = ++q->n_st;
            return q->n_st - 1;
        }
        const struct mstate *s = &q->st[x];
        if (s->k == k && s->f == f && s->w == w && s->cnt == cnt) return x;
    }
}

/* The index in pl[0..n) of name, -1 if none. */
static int prop_index(const struct obj_prop *pl, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(pl[k].key, name) == 0) return k;
    return -1;
}

/* q's dependency bits from deps: a property whose names cannot all be written is never
 * written itself; more than DEP_BITS properties involved: the properties with dependencies
 * are left out (fewer objects, never a wrong one). */
static void dep_bits(struct machine *q, const cJSON *deps) {
    const struct obj_prop *pl = q->m->pl;
    char(*vals)[RN] = q->m->vals;
    int n = q->m->n;
    for (int changed = 1; changed;) { /* a property left out may be another's name */
        changed = 0;
        for (const cJSON *d = deps ? deps->child : NULL; d; d = d->next) {
            int k = prop_index(pl, n, d->string), ok = 1;
            for (const cJSON *x = d->child; x && k >= 0 && ok; x = x->next) {
                int j = prop_index(pl, n, x->valuestring);
                ok = j >= 0 && j != k && vals[j][0];
            }
            if (k >= 0 && vals[k][0] && !ok) vals[k][0] = 0, changed = 1;
        }
    }
    int nb = 0;
    for (const cJSON *d = deps ? deps->child : NULL; d && nb <= DEP_BITS; d = d->next) {
        int k = prop_index(pl, n, d->string);
        if (k < 0 || !vals[k][0]) continue;
        for (const cJSON *x = d->child; x && nb <= DEP_BITS; x = x->next) {
            int j = prop_index(pl, n, x->valuestring);
            if (q->rel[j] < 0) q->rel[j] = nb++;
            if (q->rel[k] < 0) q->rel[k] = nb++;
            if (nb > DEP_BITS) break;
            if (j < k) q->need[k] |= 1u << q->rel[j];
            else q->owed[j] |= 1u << q->rel[k];
        }
    }
    if (nb > DEP_BITS) {
        for (const cJSON *d = deps->child; d; d = d->next) {
            int k = prop_index(pl, n, d->string);
            if (k >= 0 && !pl[k].required) vals[k][0] = 0;
        }
        for (int k = 0; k < n; k++) q->need[k] = q->owed[k] = 0;
    }
    q->live[n] = 0;
    for (int k = n - 1; k >= 0; k--) q->live[k] = q->live[k + 1] | q->need[k] | q->owed[k];
}

/* 1 when an object can be finished from the last state s with extra keys alone: one at
 * most toward minProperties (two could be the same key, and a validator counts it once) */
static int end_live(const struct machine *q, const struct mstate *s) {
    long need = q->min - s->cnt;
    return need <= 0 || (need == 1 && q->m->entry[0] && (q->max < 0 || q->max > s->cnt));
}

/* The states reachable from R_0(1, 0, 0), in order of k (each level is found from the one
 * before it), with their choices; -1 when there are too many. */
static int explore(struct machine *q) {
    const struct members *m = q->m;
    if (state_at(q, 0, 1, 0, 0) < 0) return -1;
    for (int i = 0; i < q->n_st; i++) {
        struct mstate s = q->st[i];
        if (s.k == m->n) continue;
        int k = s.k;
        int write = m->vals[k][0] && !(q->need[k] & ~s.w) && (q->max < 0 || s.cnt < q->max);
        int skip = !m->pl[k].required && !(s.w & q->owed[k]);
        unsigned w2 = q->rel[k] >= 0 ? s.w | 1u << q->rel[k] : s.w;
        int a = write ? state_at(q, k + 1, 0, w2, s.cnt + 1) : -1;
        int b = skip ? state_at(q, k + 1, s.f, s.w, s.cnt) : -1;
        if ((write && a < 0) || (skip && b < 0)) return -1;
        q->st[i].next[0] = a;
        q->st[i].next[1] = b;
    }
    /* live: from the last level back; reached: from the first, through live states only */
    for (int i = q->n_st - 1; i >= 0; i--) {
        struct mstate *s = &q->st[i];
        s->live = s->k == m->n ? (char)end_live(q, s)
                               : (s->next[0] >= 0 && q->st[s->next[0]].live) ||
                                     (s->next[1] >= 0 && q->st[s->next[1]].live);
    }
    q->st[0].reached = q->st[0].live;
    for (int i = 0; i < q->n_st; i++)
        for (int t = 0; t < 2 && q->st[i].reached; t++) {
            int x = q->st[i].next[t];
            if (x >= 0 && q->st[x].live) q->st[x].reached = 1;
        }
    return 0;
}

/* The extra keys of the last state s into r: min - cnt (none or one, end_live) to max - cnt
 * (no bound where max is -1) entries; the most after the first one into *chain (the rules
 * base-xN: up to N more entries). */
static void end_rule(struct sc *c, const struct machine *q, const struct mstate *s,
                     const char *base, struct sbuf *r, long *chain) {
    const char *e = q->m->entry, *j = c->j;
    long need = q->min - s->cnt > 0 ? q->min - s->cnt : 0;
    long room = q->max < 0 ? -1 : q->max - s->cnt;
    if (!e[0] || room == 0) {
        sbuf_adds(r, "\"\"");
        return;
    }
    char sep[RN + 16] = "";
    if (!s->f) snprintf(sep, sizeof sep, "\",\" %s-ws ", j);
    sbuf_addf(r, "(%s%s %s-ws", sep, e, j);
    if (room < 0) sbuf_addf(r, " (\",\" %s-ws %s %s-ws)*", j, e, j);
    else if (room > 1) {
        sbuf_addf(r, " %s-x%ld", base, room - 1);
        if (room - 1 > *chain) *chain = room - 1;
    }
    sbuf_adds(r, need > 0 ? ")" : ")?");
}

/* The rule of state s (not a last one) into r: its live choices. */
static void state_rule(struct sc *c, const struct machine *q, const struct mstate *s,
                       const char *base, struct sbuf *r) {
    char nx[RN + 64];
    const struct mstate *a = s->next[0] >= 0 ? &q->st[s->next[0]] : NULL;
    const struct mstate *b = s->next[1] >= 0 ? &q->st[s->next[1]] : NULL;
    if (a && a->live) {
        if (!s->f) sbuf_addf(r, "\",\" %s-ws ", c->j);
        cJSON *key = cJSON_CreateString(q->m->pl[s->k].key);
        char *t = cJSON_PrintUnformatted(key);
        gbnf_put_literal(r, t, strlen(t));
        free(t);
        cJSON_Delete(key);
        state_name(q, base, a, nx, sizeof nx);
        sbuf_addf(r, " %s-ws \":\" %s-ws %s %s-ws %s", c->j, c->j, q->m->vals[s->k], c->j, nx);
    }
    if (b && b->live) {
        state_name(q, base, b, nx, sizeof nx);
        sbuf_addf(r, "%s%s", a && a->live ? " | " : "", nx);
    }
}

/* The rules of the reached states, and the chain base-x1..x{chain} their ends use. */
static void emit(struct sc *c, const struct machine *q, const char *base) {
    char nm[RN + 64];
    long chain = 0;
    for (int i = 0; i < q->n_st; i++) {
        const struct mstate *s = &q->st[i];
        if (!s->reached) continue;
        struct sbuf r = {0};
        if (s->k == q->m->n) end_rule(c, q, s, base, &r, &chain);
        else state_rule(c, q, s, base, &r);
        state_name(q, base, s, nm, sizeof nm);
        sc_emit(c, nm, r.p);
        sbuf_free(&r);
    }
    for (long x = 1; x <= chain; x++) {
        struct sbuf r = {0};
        sbuf_addf(&r, "(\",\" %s-ws %s %s-ws", c->j, q->m->entry, c->j);
        if (x > 1) sbuf_addf(&r, " %s-x%ld", base, x - 1);
        sbuf_adds(&r, ")?");
        snprintf(nm, sizeof nm, "%s-x%ld", base, x);
        sc_emit(c, nm, r.p);
        sbuf_free(&r);
    }
}

/* The bounds as the states count them: maxProperties left out where the properties that
 * can be written never reach it; -1 with err where a count is beyond what tpd writes. */
static int bounds(struct sc *c, struct machine *q) {
    const struct members *m = q->m;
    int writable = 0, required = 0;
    for (int k = 0; k < m->n; k++) {
        writable += m->vals[k][0] != 0;
        required += m->pl[k].required;
    }
    q->min = m->min;
    q->max = m->max;
    if (q->max >= 0 && required > q->max)
        return sc_serr(c, "%s",
                       "unsatisfiable schema: more required properties than maxProperties");
    if (q->max >= 0 && !m->entry[0] && q->max >= writable) q->max = -1;
    if (m->entry[0] && q->max > GRAMMAR_MAX_REPEAT)
        return sc_serr(c, "%s", "maxProperties above 1000 beside extra keys is not supported");
    q->counting = q->min > 0 || q->max >= 0;
    return 0;
}

int sc_gen_members(struct sc *c, const struct members *m, char *nm) {
    struct machine q = {.m = m};
    int n = m->n, rc = -1;
    q.rel = xmalloc(sizeof *q.rel * ((size_t)n + 1));
    q.need = xcalloc((size_t)n + 1, sizeof *q.need);
    q.owed = xcalloc((size_t)n + 1, sizeof *q.owed);
    q.live = xcalloc((size_t)n + 1, sizeof *q.live);
    for (int k = 0; k <= n; k++) q.rel[k] = -1;
    dep_bits(&q, m->deps);
    q.cap_st = 2 * (n + 1) + MORE_STATES;
    for (q.n_slot = 16; q.n_slot < 2u * (unsigned)q.cap_st;) q.n_slot *= 2;
    q.st = xmalloc(sizeof *q.st * (size_t)q.cap_st);
    q.slot = xcalloc(q.n_slot, sizeof *q.slot);
    char base[RN];
    if (bounds(c, &q) < 0) goto out;
    if (explore(&q) < 0) {
        sc_serr(c, "%s",
                q.counting ? "minProperties/maxProperties: too many combinations of properties "
                             "to count (with dependencies)"
                           : "dependencies: too many combinations of properties to write");
        goto out;
    }
    if (!q.st[0].live) {
        sc_serr(c, "%s",
                q.counting ? "minProperties/maxProperties: tpd writes no object here with a "
                             "count of properties they allow (beside required properties and "
                             "dependencies; toward minProperties it writes the declared "
                             "properties and one extra key at most, as two could be the same)"
                           : "dependencies: no object meets them beside required properties");
        goto out;
    }
    sc_new_rule(c, base);
    emit(c, &q, base);
    snprintf(nm, RN, "%.100s-0-1%s", base, q.counting ? "-c0" : "");
    rc = 0;
out:
    free(q.rel);
    free(q.need);
    free(q.owed);
    free(q.live);
    free(q.st);
    free(q.slot);
    return rc;
}
