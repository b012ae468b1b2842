/* The budget-aware closer (grammar.h's grammar_matcher_mask_budget) rests on need: a bound
 * on the tokens that finish a stack, the sum of gram.rest[] over its entries (compile.c's
 * need tables), and of a state the least over its stacks. The mask cache's trie walk
 * records, per cached stack, the change of need most of its allowed tokens share (the base:
 * 0, or -1 where the stack's top is a string's next character) and the tokens that differ,
 * sorted by delta (those that open or close structures: few), so a budget far away costs a
 * comparison or two per stack, and near the end only those tokens are visited. */
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "grammar.h"
#include "mask_cache.h"
#include "matcher_internal.h"

uint32_t grammar_matcher_need(const struct grammar_matcher *m) {
    return m->ended || m->failed ? 0 : sset_need(&m->g->g, &m->cur);
}

static int bit_get(const uint64_t *mask, int32_t id) {
    return (int)((mask[id >> 6] >> (id & 63)) & 1);
}
static void bit_set(uint64_t *mask, int32_t id) { mask[id >> 6] |= 1ull << (id & 63); }

static void push_clr(struct grammar_matcher *m, int32_t id) {
    if (m->n_clr == m->cap_clr) {
        m->cap_clr = m->cap_clr ? 2 * m->cap_clr : 256;
        m->clr = xrealloc(m->clr, sizeof *m->clr * (size_t)m->cap_clr);
    }
    m->clr[m->n_clr++] = id;
}

/* One stack's part of a budgeted mask: its allowed tokens whose need after, need_stk + d,
 * is at most allow. Where the entry's base fits (most of its tokens do), that is the cached
 * mask minus the jumps past it; as the mask is a union over stacks, a token taken out
 * stays when an earlier stack allowed it: those not yet set are noted, the entry ORed in,
 * and the noted ones cleared. Where the base does not fit, only the jumps up to it. The
 * uncertain tokens of a cut key get their exact need. Sets *any when the part is not
 * empty; returns 1 when it may lack some token of the plain mask. */
static int mask_stack_budget(struct grammar_matcher *m, const struct mentry *e, const int32_t *stk,
                             int len, uint32_t need_stk, int64_t allow, uint64_t *mask, int *any) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    int64_t fit = allow - need_stk; /* the largest delta that fits */
    int removed = 0;
    if (e->base <= fit) {
        m->n_clr = 0;
        int k = e->n_jmp;
        while (k > 0 && e->jmp[k - 1].d > fit) k--;
        for (; k < e->n_jmp; k++) {
            removed++;
            if (!bit_get(mask, e->jmp[k].id)) push_clr(m, e->jmp[k].id);
        }
        k = e->n_bnd;
        while (k > 0 && e->bnd[k - 1].d > fit) k--;
        for (; k < e->n_bnd; k++) {
            uint32_t need;
            if (matcher_token_need(m, stk, len, e->bnd[k].id, &need) && need <= allow) continue;
            removed++;
            if (!bit_get(mask, e->bnd[k].id)) push_clr(m, e->bnd[k].id);
        }
        mentry_or(e, mask, words);
        for (int i = 0; i < m->n_clr; i++) mask[m->clr[i] >> 6] &= ~(1ull << (m->clr[i] & 63));
        if (e->n_acc > removed) *any = 1;
    } else {
        removed = e->n_acc > 0;
        for (int k = 0; k < e->n_jmp && e->jmp[k].d <= fit; k++) {
            bit_set(mask, e->jmp[k].id);
            *any = 1;
        }
        for (int k = 0; k < e->n_bnd; k++) {
            int32_t id = e->bnd[k].id;
            uint32_t need;
            if (bit_get(mask, id)) continue;
            if (e->bnd[k].d <= fit ||
                (matcher_token_need(m, stk, len, id, &need) && need <= allow)) {
                bit_set(mask, id);
                *any = 1;
            }
        }
    }
    for (int k = 0; k < e->n_held; k++) { /* exact need: only the unique quote's check */
        const struct held *h = &e->held[k];
        if (bit_get(mask, h->id)) continue;
        if (h->d > fit) removed++;
        else if (held_ok(m, h)) bit_set(mask, h->id), *any = 1;
    }
    for (int k = 0; k < e->n_unc; k++) {
        int32_t id = e->unc[k];
        uint32_t need;
        if (bit_get(mask, id) || !matcher_token_need(m, stk, len, id, &need)) continue;
        if (need <= allow) {
            bit_set(mask, id);
            *any = 1;
        } else {
            removed++;
        }
    }
    return removed > 0;
}

/* grammar_matcher_mask_budget inside an operation (the meter may be hit: the caller checks). */
static int mask_budget(struct grammar_matcher *m, uint64_t *mask, int64_t budget) {
    const struct grammar_vocab *v = m->g->v;
    const struct gram *g = &m->g->g;
    size_t words = ((size_t)v->n + 63) / 64;
    if (m->ended || budget >= GRAM_NEED_INF) { /* nothing to close, or no sentence is that long */
        matcher_mask_plain(m, mask);
        return 0;
    }
    int64_t lim = (budget < 1 ? 1 : budget) - 1; /* the need left after this token must fit */
    uint32_t need_min = sset_need(g, &m->cur);
    /* force mode (the need does not fit): the tokens that lower it */
    int force = need_min > lim;
    int64_t allow = force ? (int64_t)need_min - 1 : lim;
    memset(mask, 0, words * sizeof *mask);
    int any = 0, maybe = force; /* maybe: some token the plain mask allows may be out */
    for (int i = 0; i < m->cur.n && !m->meter.hit; i++) {
        int len = m->cur.len[i];
        if (len == 0) continue;
        const int32_t *stk = sset_stack(&m->cur, i);
        struct mentry *tmp, *e = mask_entry(m->g, stk, len, &tmp, &m->meter);
        if (!e) break;
        maybe |= mask_stack_budget(m, e, stk, len, stack_need(g, stk, len), allow, mask, &any);
        mentry_free(tmp);
    }
    int can_end = grammar_matcher_can_end(m);
    if (!any &&
        !can_end) { /* no token fits (a vocabulary without the bytes the shortest ending needs) */
        matcher_mask_plain(m, mask);
        return 0;
    }
    if (can_end)
        for (int i = 0; i < v->n_eog; i++) bit_set(mask, v->eog[i]);
    if (!maybe) return 0;
    if (!m->plain) m->plain = xmalloc(words * sizeof *m->plain);
    matcher_mask_plain(m, m->plain);
    return memcmp(mask, m->plain, words * sizeof *mask) != 0;
}

int grammar_matcher_mask_budget(struct grammar_matcher *m, uint64_t *mask, int64_t budget) {
    if (m->failed) {
        matcher_mask_end(m, mask);
        return 0;
    }
    matcher_begin(m);
    int rc = mask_budget(m, mask, budget);
    matcher_end(m);
    if (!m->failed) return rc;
    matcher_mask_end(m, mask);
    return 0;
}

/* The highest of logits[0 .. n) among the tokens in mask (the first on ties); -1: none. */
static int masked_argmax(const uint64_t *mask, const float *logits, int n) {
    int best = -1;
    for (int id = 0; id < n; id++)
        if ((mask[id >> 6] >> (id & 63) & 1) && (best < 0 || logits[id] > logits[best])) best = id;
    return best;
}

int grammar_matcher_apply_budget(struct grammar_matcher *m, float *logits, int n, int64_t budget) {
    size_t words = ((size_t)m->g->v->n + 63) / 64;
    uint64_t stackbuf[4096], *mask = words <= 4096 ? stackbuf : xmalloc(words * sizeof *mask);
    int changed = 0;
    if (grammar_matcher_mask_budget(m, mask,
                                    budget)) { /* did the budget take out the first choice? */
        /* mask_budget returns 1 only after comparing with the plain mask, left in m->plain */
        const int top = masked_argmax(m->plain, logits, n < m->g->v->n ? n : m->g->v->n);
        changed = top >= 0 && !(mask[top >> 6] >> (top & 63) & 1);
    }
    apply_mask(m, mask, logits, n);
    if (mask != stackbuf) free(mask);
    return changed;
}
