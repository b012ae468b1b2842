// link: tpd_grammar
/* The budget-aware closer (grammar_matcher_mask_budget) on a vocabulary of single bytes,
 * hand-picked JSON-ish tokens and seeded random ones, over a JSON Schema with nested
 * required objects and arrays, json_object, a recursive GBNF, a regex and a grammar deep
 * enough that the cached keys are cut. Checked three ways, each independent of the mask
 * code: need (grammar_matcher_need) is 0 exactly at complete states and elsewhere some
 * token lowers it by one (tried token by token) at every state visited; every budgeted
 * mask equals, token by token, the rule in grammar.h computed by accepting each token on
 * the matcher and reading the need; and random walks through budgeted masks always end
 * as complete sentences within budget. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/grammar.h"

#define N_FIXED 40
#define N_DEEP 30
#define N_RANDOM 400
#define NV (256 + N_FIXED + N_DEEP + N_RANDOM + 1)
#define EOG (NV - 1)
#define WORDS ((NV + 63) / 64)

static const char *tok_bytes[NV];
static size_t tok_lens[NV];
static char single[256];
static char rnd_text[N_RANDOM][8];

static uint64_t rng;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ids 0..255 single bytes; then tokens that open and close structures, several at once
 * (jumpers and shortcuts), thirty closers (reach below a cut key); then random strings
 * over JSON's punctuation and a few letters and digits; the last id ends generation. */
static struct grammar_vocab *vocab(void) {
    /* 8..31 closers, and k closers then k + 3 or k - 1 openers: around the cut of a deep
     * key (24 entries, 12 levels of DEEP), so that some reach below the cut only at their
     * last byte, and some open more than they close there (need up) or one less (need
     * down by exactly one, force mode's bound), decided at run time */
    static char closers[24][32], reopen[6][64];
    for (int i = 0; i < 24; i++) memset(closers[i], ']', (size_t)(8 + i));
    for (int i = 0; i < 6;
         i++) { /* byte by byte: GCC's -Warray-bounds misreads two memsets here under ASan */
        const int n_close = 10 + i, n_open = i % 2 ? 13 + i : 9 + i;
        for (int c = 0; c < n_close + n_open; c++) reopen[i][c] = c < n_close ? ']' : '[';
    }
    static const char *fixed[N_FIXED] = {"{\"",
                                         "\"}",
                                         "\"},",
                                         "\":",
                                         "\": \"",
                                         "\", \"",
                                         "[{\"",
                                         "}]",
                                         "]}",
                                         "true",
                                         "false",
                                         "null",
                                         "ab",
                                         "abc",
                                         "name",
                                         "\"name\": \"",
                                         "\n  ",
                                         "  ",
                                         "123",
                                         "0.5",
                                         "-1",
                                         "\xc3\xa9",
                                         "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}",
                                         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
                                         "[[[[",
                                         "{{{{",
                                         "]]]]",
                                         "}}",
                                         "{\"a\":",
                                         "\"]}",
                                         "\"]",
                                         "[\"",
                                         "x0",
                                         "(1+",
                                         ")",
                                         "+(",
                                         "))))",
                                         "\"tags\": [\"",
                                         "\"pos\": {\"x\": ",
                                         "\"kids\": []}"};
    static const char alpha[] = "{}[]\":, \nabcxyz0123-.tfnuel+()";
    uint8_t usable[NV];
    for (int i = 0; i < 256; i++) {
        single[i] = (char)i;
        tok_bytes[i] = &single[i];
        tok_lens[i] = 1;
    }
    for (int i = 0; i < N_FIXED; i++) {
        tok_bytes[256 + i] = fixed[i];
        tok_lens[256 + i] = strlen(fixed[i]);
    }
    for (int i = 0; i < N_DEEP; i++) {
        tok_bytes[256 + N_FIXED + i] = i < 24 ? closers[i] : reopen[i - 24];
        tok_lens[256 + N_FIXED + i] = strlen(tok_bytes[256 + N_FIXED + i]);
    }
    rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < N_RANDOM; i++) {
        int len = 2 + (int)(next_rand() % 5);
        for (int k = 0; k < len; k++) rnd_text[i][k] = alpha[next_rand() % (sizeof alpha - 1)];
        rnd_text[i][len] = 0;
        tok_bytes[256 + N_FIXED + N_DEEP + i] = rnd_text[i];
        tok_lens[256 + N_FIXED + N_DEEP + i] = (size_t)len;
    }
    tok_bytes[EOG] = "";
    tok_lens[EOG] = 0;
    for (int i = 0; i < NV; i++) usable[i] = i != EOG;
    int32_t eog = EOG;
    return grammar_vocab_new(NV, tok_bytes, tok_lens, usable, &eog, 1);
}

static int allowed(const uint64_t *m, int id) { return (int)((m[id >> 6] >> (id & 63)) & 1); }

static struct grammar *compile(struct grammar_vocab *v, enum grammar_kind k, const char *text) {
    char err[ERR_LEN] = "";
    struct grammar *g = grammar_compile(v, k, text, strlen(text), err);
    if (!g) fail_msg("%s", err);
    return g;
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1},"
    "\"pos\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"y\":{\"type\":"
    "\"number\"}},"
    "\"required\":[\"x\",\"y\"]},"
    "\"kids\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":"
    "\"integer\"},"
    "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"id\"]}}},"
    "\"required\":[\"name\",\"tags\",\"pos\",\"kids\"]}";
static const char *GBNF = "root ::= expr\n"
                          "expr ::= term ((\"+\" | \"-\") term)*\n"
                          "term ::= num | \"(\" expr \")\" | \"[\" list \"]\"\n"
                          "list ::= expr (\",\" expr)*\n"
                          "num ::= [0-9]+\n";
static const char *REGEX = "(ab|c)+x[0-9]{3,5}(-[a-z]+)?";
static const char *DEEP = "root ::= (\"[\" root? \"]\" | \"{\" root? \"}\" | \"x\")+\n";
static const char *DEEP_BANG = "root ::= (\"[\" root? \"]\" | \"{\" root? \"}\" | \"!\" \"]\"*)+\n";
static const char *DEEP_LONG = "root ::= (\"[\" root? \"]\" | \"{\" root? \"}\" | \"xxxxxxxx\")+\n";

/* need is what the closer relies on: 0 exactly where the grammar may end, and elsewhere
 * some token (found here by trying every one) leads to a need at most one less; so from
 * any state, `need` tokens suffice to finish (the walks below follow such tokens). */
static void check_need_progress(struct grammar_matcher *m) {
    uint32_t need = grammar_matcher_need(m);
    if (grammar_matcher_can_end(m)) {
        assert_int_equal(need, 0);
        return;
    }
    assert_true(need > 0);
    uint32_t best = UINT32_MAX;
    for (int id = 0; id < EOG; id++) {
        if (grammar_matcher_accept(m, id) < 0) continue;
        uint32_t n = grammar_matcher_need(m);
        if (n < best) best = n;
        assert_int_equal(grammar_matcher_rollback(m, 1), 0);
    }
    if (best == UINT32_MAX || best > need - 1)
        fail_msg("need %u, but the least need after a token is %u", need, best);
}

/* The budgeted mask equals the rule of grammar.h, computed by accepting each token:
 * allowed when accepted and need after <= max(budget - 1, need - 1); the end where the
 * grammar may end; the plain mask where nothing else would remain. The return value says
 * whether it differs from the plain mask. */
static void check_budget_mask(struct grammar_matcher *m, int64_t budget) {
    uint64_t got[WORDS], plain[WORDS], want[WORDS];
    int restricted = grammar_matcher_mask_budget(m, got, budget);
    grammar_matcher_mask(m, plain);
    memset(want, 0, sizeof want);
    int64_t need = grammar_matcher_need(m), lim = budget - 1;
    int any = 0;
    for (int id = 0; id < EOG; id++) {
        if (grammar_matcher_accept(m, id) < 0) continue;
        int64_t after = grammar_matcher_need(m);
        assert_int_equal(grammar_matcher_rollback(m, 1), 0);
        assert_true(allowed(plain, id));
        int64_t allow = lim > need - 1 ? lim : need - 1;
        if (after <= allow) {
            want[id >> 6] |= 1ull << (id & 63);
            any = 1;
        }
    }
    if (grammar_matcher_can_end(m)) {
        want[EOG >> 6] |= 1ull << (EOG & 63);
        any = 1;
    }
    if (!any) memcpy(want, plain, sizeof want);
    for (int id = 0; id < NV; id++)
        if (allowed(got, id) != allowed(want, id))
            fail_msg("budget %lld need %lld: token %d (\"%.*s\") allowed %d, expected %d",
                     (long long)budget, (long long)need, id, (int)tok_lens[id], tok_bytes[id],
                     allowed(got, id), allowed(want, id));
    assert_int_equal(restricted, memcmp(got, plain, sizeof got) != 0);
}

/* A random allowed token, the end with probability 1/8 when it is allowed. */
static int32_t pick(const uint64_t *mask) {
    if (allowed(mask, EOG) && next_rand() % 8 == 0) return EOG;
    int count = 0;
    for (int i = 0; i < NV; i++) count += allowed(mask, i);
    if (count == 0) fail_msg("empty mask");
    int k = (int)(next_rand() % (uint64_t)count);
    for (int i = 0; i < NV; i++)
        if (allowed(mask, i) && k-- == 0) return i;
    return -1;
}

/* Walks of random tokens from the budgeted mask, budget need(start) + 0..max_extra: each
 * step keeps need <= the budget left, and the walk ends complete within the budget. Every
 * `check_every`th state also gets the brute-force checks above. */
static void budget_walks(struct grammar *g, int walks, int max_extra, int check_every) {
    int steps = 0, closed = 0;
    for (int w = 0; w < walks; w++) {
        struct grammar_matcher *m = grammar_matcher_new(g);
        int64_t need0 = grammar_matcher_need(m);
        int64_t budget = need0 + (int64_t)(next_rand() % (uint64_t)(max_extra + 1));
        int64_t left = budget;
        int restricted = 0;
        while (left > 0 && !grammar_matcher_done(m)) {
            uint64_t mask[WORDS];
            if (check_every && steps % check_every == 0) {
                check_need_progress(m);
                check_budget_mask(m, left);
                check_budget_mask(
                    m, 1 + (int64_t)(next_rand() % (uint64_t)(grammar_matcher_need(m) + 3)));
            }
            restricted |= grammar_matcher_mask_budget(m, mask, left);
            int32_t t = pick(mask);
            assert_int_equal(grammar_matcher_accept(m, t), 0);
            left--;
            steps++;
            if (t == EOG) break;
            if ((int64_t)grammar_matcher_need(m) > left)
                fail_msg("walk %d: need %u after a token, %lld tokens left", w,
                         grammar_matcher_need(m), (long long)left);
        }
        if (!grammar_matcher_can_end(m))
            fail_msg("walk %d (budget %lld): not complete", w, (long long)budget);
        closed += restricted;
        grammar_matcher_free(m);
    }
    assert_true(closed > 0); /* the budget did bite in some walks */
}

static void test_need_counts_tokens(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    /* a literal costs the fewest tokens that spell it: "name" is one, "ame" three (no
     * token spells two of its bytes), so need goes up when "n" breaks the word */
    struct grammar *g = compile(v, GRAMMAR_GBNF, "root ::= \"name\" [0-9]\n");
    struct grammar_matcher *m = grammar_matcher_new(g);
    assert_int_equal(grammar_matcher_need(m), 2);
    check_need_progress(m);
    assert_int_equal(grammar_matcher_accept(m, 'n'), 0);
    assert_int_equal(grammar_matcher_need(m), 4);
    check_need_progress(m);
    grammar_matcher_free(m);
    grammar_unref(g);
    g = compile(v, GRAMMAR_JSON_SCHEMA, SCHEMA);
    m = grammar_matcher_new(g);
    const char *shortest = "{\"name\":\"\",\"tags\":[\"\"],\"pos\":{\"x\":0,\"y\":0},\"kids\":[]}";
    uint32_t need0 = grammar_matcher_need(m);
    assert_true(need0 > 0 &&
                need0 < strlen(shortest)); /* {" "name" ": ... fewer tokens than bytes */
    check_need_progress(m);
    assert_int_equal(grammar_matcher_accept_bytes(m, shortest, strlen(shortest)), 0);
    assert_int_equal(grammar_matcher_need(m), 0);
    assert_true(grammar_matcher_can_end(m));
    grammar_matcher_free(m);
    grammar_unref(g);
    g = compile(v, GRAMMAR_GBNF, "root ::= \"q\"{1000} \"w\"\n");
    m = grammar_matcher_new(g);
    assert_int_equal(grammar_matcher_need(m), 1001); /* no token holds two of these bytes */
    grammar_matcher_free(m);
    grammar_unref(g);
    /* nested repetitions saturate instead of overflowing */
    g = compile(v, GRAMMAR_GBNF, "root ::= ((((\"a\"{1000}){1000}){1000}){1000})\n");
    m = grammar_matcher_new(g);
    assert_int_equal(grammar_matcher_need(m), 1u << 30);
    assert_int_equal(grammar_matcher_accept(m, 'a'), 0);
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

static void test_budget_walks(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    rng = 12345;
    struct {
        enum grammar_kind k;
        const char *text;
    } gs[] = {{GRAMMAR_JSON_SCHEMA, SCHEMA},
              {GRAMMAR_JSON_OBJECT, ""},
              {GRAMMAR_GBNF, GBNF},
              {GRAMMAR_REGEX, REGEX},
              {GRAMMAR_GBNF, DEEP}};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
        struct grammar *g = compile(v, gs[i].k, gs[i].text);
        budget_walks(g, 150, 40, 0);
        budget_walks(g, 25, 25, 3);
        grammar_unref(g);
    }
    grammar_vocab_free(v);
}

/* Deep states: keys cut at the cache's depth, tokens that reach below the cut (thirty
 * closers) decided at run time, with the exact need. */
/* States d levels deep (then `tail`), checked for every budget up to past their need. */
static void check_deep_states(struct grammar_vocab *v, const char *grammar, const char *tail) {
    struct grammar *g = compile(v, GRAMMAR_GBNF, grammar);
    char deep[80];
    for (int d = 20; d <= 40; d += 2) {
        for (int k = 0; k < d; k++) deep[k] = d % 8 == 0 || k % 3 ? '[' : '{';
        strcpy(deep + d, tail);
        struct grammar_matcher *m = grammar_matcher_new(g);
        assert_int_equal(grammar_matcher_accept_bytes(m, deep, strlen(deep)), 0);
        assert_int_equal(grammar_matcher_need(m), d); /* the closers */
        check_need_progress(m);
        for (int64_t b = 1; b <= d + 12; b++) check_budget_mask(m, b);
        grammar_matcher_free(m);
    }
    grammar_unref(g);
}

static void test_budget_deep_states(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    check_deep_states(v, DEEP, "");
    check_deep_states(v, DEEP_LONG, ""); /* going on at a level costs more than closing it */
    /* "]" is content after "!" as well as a closer: a token of closers then openers has an
     * upper bound (as content, need up by the openers) far above its exact need (closing) */
    check_deep_states(v, DEEP_BANG, "!");
    struct grammar *g = compile(v, GRAMMAR_JSON_OBJECT, "");
    struct grammar_matcher *m = grammar_matcher_new(g);
    const char *p = "{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1, [";
    assert_int_equal(grammar_matcher_accept_bytes(m, p, strlen(p)), 0);
    check_need_progress(m);
    for (int64_t b = 1; b <= 45; b++) check_budget_mask(m, b);
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

/* Far from the end the closer changes nothing; a budget below the shortest sentence
 * finishes as soon as it can (force mode from the first token); budget 1 at a complete
 * state allows only what keeps it complete. */
static void test_budget_far_and_short(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(v, GRAMMAR_JSON_SCHEMA, SCHEMA);
    struct grammar_matcher *m = grammar_matcher_new(g);
    uint64_t a[WORDS], b[WORDS];
    grammar_matcher_mask(m, a);
    assert_int_equal(grammar_matcher_mask_budget(m, b, 1000), 0);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(grammar_matcher_mask_budget(m, b, 1ll << 40), 0);
    assert_memory_equal(a, b, sizeof a);
    /* 20 tokens for a 54-byte shortest sentence: every step lowers the need by its length */
    uint32_t need = grammar_matcher_need(m);
    int restricted = 0;
    for (int64_t left = 20; left > 0; left--) {
        check_budget_mask(m, left);
        restricted += grammar_matcher_mask_budget(m, b,
                                                  left); /* 0 where a literal allows one way on */
        int32_t t = pick(b);
        assert_int_equal(grammar_matcher_accept(m, t), 0);
        uint32_t after = grammar_matcher_need(m);
        if (after > need - 1 && after > left - 1)
            fail_msg("need %u -> %u, %lld tokens left", need, after, (long long)left);
        need = after;
    }
    assert_true(restricted >= 5); /* 10 with this vocabulary: after ":" and "," spaces are out */
    grammar_matcher_free(m);
    m = grammar_matcher_new(g);
    const char *p = "{\"name\":\"\",\"tags\":[\"\"],\"pos\":{\"x\":0,\"y\":0},\"kids\":[]}";
    assert_int_equal(grammar_matcher_accept_bytes(m, p, strlen(p)), 0);
    assert_true(grammar_matcher_can_end(m));
    check_budget_mask(m, 1);
    grammar_matcher_mask_budget(m, b, 1);
    assert_true(allowed(b, EOG));
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

/* The mask is a union over stacks: a token one stack allows within the budget stays
 * allowed when another stack, processed after it, would take it out ("ab" ends a word
 * from the first alternative's stack, but opens ten "!" from the second's). */
static void test_budget_union_over_stacks(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(v, GRAMMAR_GBNF,
                                "root ::= [a-z]+ | \"a\" (\"b\" \"!\"{10} | \"c\")\n");
    struct grammar_matcher *m = grammar_matcher_new(g);
    uint64_t mask[WORDS];
    grammar_matcher_mask_budget(m, mask, 3);
    assert_true(allowed(mask, 256 + 12)); /* "ab" */
    for (int64_t b = 1; b <= 15; b++) check_budget_mask(m, b);
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

/* apply_budget says "length" (returns 1) only when the budget took out the model's first
 * choice, the token of highest logit the plain mask allows. */
static void test_apply_budget_first_choice(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(v, GRAMMAR_GBNF, "root ::= [a-z]* \".\"\n");
    struct grammar_matcher *m = grammar_matcher_new(g);
    static float lg[NV];
    const int cases[3][3] = {
        /* budget, first choice, want */ {1, 'x', 1}, {1, '.', 0}, {100, 'x', 0}};
    for (int c = 0; c < 3; c++) {
        for (int i = 0; i < NV; i++) lg[i] = 0.0f;
        lg['x'] = lg['.'] = 1.0f;
        lg[cases[c][1]] = 5.0f;
        assert_int_equal(grammar_matcher_apply_budget(m, lg, NV, cases[c][0]), cases[c][2]);
        assert_true(lg['.'] > 0.0f);                        /* "." always fits */
        assert_true((lg['x'] > 0.0f) == (cases[c][0] > 1)); /* "x" only with room after it */
    }
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_need_counts_tokens),
        cmocka_unit_test(test_budget_walks),
        cmocka_unit_test(test_budget_deep_states),
        cmocka_unit_test(test_budget_far_and_short),
        cmocka_unit_test(test_budget_union_over_stacks),
        cmocka_unit_test(test_apply_budget_first_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
