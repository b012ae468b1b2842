// link: tpd_grammar
/* The grammar's cost limits (grammar.h's struct grammar_limits) on a vocabulary of single
 * bytes and a few long tokens: the ambiguous regex (.*){N}x, whose states hold N + 2
 * parses (over ASCII) and whose masks cost about N^2 expansion steps per byte, is refused at
 * compile time past max_stacks, past max_token_work (exactly at the limit: one unit less refuses,
 * the limit itself compiles) and past max_compile_ms, each error naming the limit and its
 * value; a grammar whose costly part lies beyond the first mask's reach compiles and stops
 * the matcher when a state goes past a limit (sticky error, the end tokens only); every
 * operation stays within max_token_work; and threads compiling and masking the same and
 * different grammars at once (the HTTP threads) agree with one thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/grammar.h"

#define NV 260 /* 0..255 single bytes, 256 "abc", 257 "xx", 258 twenty 'a', 259 the end */
#define EOG 259
#define WORDS ((NV + 63) / 64)
static const char *tok_bytes[NV];
static size_t tok_lens[NV];
static char single[256];

static struct grammar_vocab *vocab(int max_stacks, long work, double ms) {
    static const char *multi[] = {"abc", "xx", "aaaaaaaaaaaaaaaaaaaa", ""};
    uint8_t usable[NV];
    for (int i = 0; i < 256; i++) {
        single[i] = (char)i;
        tok_bytes[i] = &single[i];
        tok_lens[i] = 1;
    }
    for (int i = 0; i < 4; i++) {
        tok_bytes[256 + i] = multi[i];
        tok_lens[256 + i] = strlen(multi[i]);
    }
    for (int i = 0; i < NV; i++) usable[i] = i != EOG;
    int32_t eog = EOG;
    struct grammar_vocab *v = grammar_vocab_new(NV, tok_bytes, tok_lens, usable, &eog, 1);
    grammar_vocab_set_limits(v, &(struct grammar_limits){max_stacks, work, ms});
    return v;
}

static int allowed(const uint64_t *m, int id) { return (int)((m[id >> 6] >> (id & 63)) & 1); }

/* grammar_compile of the regex head([ -~]*){n}x: (.*){n}x over ASCII, so that each repeat
 * is one parse (`.` takes UTF-8 sequences too, a parse per length); NULL with err. */
static struct grammar *compile_rep(struct grammar_vocab *v, const char *head, int n, char *err) {
    char re[128];
    snprintf(re, sizeof re, "%s([ -~]*){%d}x", head, n);
    return grammar_compile(v, GRAMMAR_REGEX, re, strlen(re), err);
}

static void expect_refused(struct grammar *g, const char *err, const char *needle) {
    if (g) fail_msg("compiled, expected '%s'", needle);
    if (!strstr(err, needle)) fail_msg("error '%s' lacks '%s'", err, needle);
    if (!strstr(err, "too costly")) fail_msg("error '%s' does not say it is too costly", err);
}

static void test_max_stacks(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab(8, 1l << 30, 60000);
    char err[ERR_LEN] = "";
    /* after an x, n + 2 parses: the x continues any of the n repeats, or is the last x (then
     * the end): at the limit for n = 6, one past it for 7 */
    struct grammar *g = compile_rep(v, "", 6, err);
    if (!g) fail_msg("%s", err);
    grammar_unref(g);
    expect_refused(compile_rep(v, "", 7, err), err,
                   "more than 8 parses of the output at once (limit grammar.max_stacks = 8)");
    grammar_vocab_free(v);
    /* the defaults: (.*){1000}x has 1002 parses after an x, under 1024, and is refused for its work
     */
    v = vocab(GRAMMAR_DEFAULT_MAX_STACKS, GRAMMAR_DEFAULT_MAX_TOKEN_WORK,
              GRAMMAR_DEFAULT_MAX_COMPILE_MS);
    expect_refused(compile_rep(v, "", 1000, err), err, "limit grammar.max_token_work = 4194304");
    g = compile_rep(v, "", 3, err);
    if (!g) fail_msg("%s", err);
    grammar_unref(g);
    grammar_vocab_free(v);
}

/* The least max_token_work under which g compiles: the first mask's work is deterministic,
 * so one unit less refuses it, naming that value. */
static void test_max_token_work_exact(void **state) {
    (void)state;
    char err[ERR_LEN] = "";
    long lo = 1024, hi = 1l << 26; /* refused at lo, compiles at hi */
    struct grammar_vocab *v = vocab(4096, lo, 60000);
    expect_refused(compile_rep(v, "", 6, err), err, "grammar.max_token_work = 1024");
    grammar_vocab_free(v);
    while (hi - lo > 1) {
        long mid = lo + (hi - lo) / 2;
        v = vocab(4096, mid, 60000);
        struct grammar *g = compile_rep(v, "", 6, err);
        if (g) hi = mid;
        else lo = mid;
        grammar_unref(g);
        grammar_vocab_free(v);
    }
    v = vocab(4096, hi - 1, 60000);
    char want[128];
    snprintf(want, sizeof want,
             "more than %ld units of work for one token (limit grammar.max_token_work = %ld)",
             hi - 1, hi - 1);
    expect_refused(compile_rep(v, "", 6, err), err, want);
    grammar_vocab_free(v);
    v = vocab(4096, hi, 60000);
    struct grammar *g = compile_rep(v, "", 6, err);
    if (!g) fail_msg("at the limit %ld: %s", hi, err);
    /* more parses cost more: (.*){7}x does not fit where (.*){6}x just did */
    expect_refused(compile_rep(v, "", 7, err), err, "grammar.max_token_work");
    grammar_unref(g);
    grammar_vocab_free(v);
}

static void test_max_compile_ms(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab(4096, 1l << 40, 1);
    char err[ERR_LEN] = "";
    /* ~10^8 expansion steps for the first mask: far more than 1 ms */
    expect_refused(compile_rep(v, "", 200, err), err, "limit grammar.max_compile_ms = 1)");
    grammar_vocab_free(v);
}

/* Twenty-one letters first: the first mask's walk (tokens of up to 20 bytes) never reaches
 * the ambiguous part, so the grammar compiles, and the matcher stops when it gets there. */
static void test_runtime_stop(void **state) {
    (void)state;
    static const struct {
        int max_stacks;
        long work;
        const char *needle;
    } cases[] = {{8, 1l << 30, "limit grammar.max_stacks = 8"},
                 {4096, 20000, "limit grammar.max_token_work = 20000"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct grammar_vocab *v = vocab(cases[c].max_stacks, cases[c].work, 60000);
        char err[ERR_LEN] = "";
        struct grammar *g = compile_rep(v, "[a-z]{21}", 40, err);
        if (!g) fail_msg("%s", err);
        struct grammar_matcher *m = grammar_matcher_new(g);
        uint64_t mask[WORDS];
        int failed_at = -1;
        for (int i = 0; i < 22 && failed_at < 0; i++) {
            grammar_matcher_mask(m, mask);
            assert_true(grammar_matcher_work(m) <=
                        cases[c].work + 64); /* a unit's overshoot at most */
            if (grammar_matcher_error(m)) {
                failed_at = i;
                break;
            }
            assert_true(allowed(mask, 'q') || i >= 21);
            if (grammar_matcher_accept(m, i < 21 ? 'q' : 'z') < 0) failed_at = i;
            assert_true(grammar_matcher_work(m) <= cases[c].work + 64);
        }
        if (failed_at < 0) fail_msg("case %zu: the matcher never stopped", c);
        const char *why = grammar_matcher_error(m);
        assert_non_null(why);
        if (!strstr(why, cases[c].needle)) fail_msg("'%s' lacks '%s'", why, cases[c].needle);
        /* sticky: only the end from now on, at a constant cost */
        grammar_matcher_mask(m, mask);
        for (int id = 0; id < NV; id++) assert_int_equal(allowed(mask, id), id == EOG);
        assert_int_equal(grammar_matcher_mask_budget(m, mask, 3), 0);
        for (int id = 0; id < NV; id++) assert_int_equal(allowed(mask, id), id == EOG);
        assert_int_equal(grammar_matcher_accept(m, 'z'), -1);
        assert_int_equal(grammar_matcher_need(m), 0);
        assert_int_equal(grammar_matcher_rollback(m, 1), 0);
        assert_non_null(grammar_matcher_error(m));
        assert_int_equal(grammar_matcher_accept(m, EOG), 0);
        assert_true(grammar_matcher_done(m));
        grammar_matcher_free(m);
        grammar_unref(g);
        grammar_vocab_free(v);
    }
}

/* Threads compile the same grammars (the vocabulary's LRU and each grammar's mask cache
 * shared) and different ones at once, and walk them; every mask equals the one a single
 * thread computes on a vocabulary of its own. */
struct job {
    struct grammar_vocab *v;
    int seed;
    int bad;
};

static const char *const texts[] = {"(ab|a)*c([ -~]*){4}x", "[a-c]{3,9}(xx|x)+", "(.*){5}x",
                                    "(a|b|abc)*xx"};

static void walk_masks(struct grammar_vocab *v, const char *re, uint64_t out[8][WORDS]) {
    char err[ERR_LEN] = "";
    struct grammar *g = grammar_compile(v, GRAMMAR_REGEX, re, strlen(re), err);
    if (!g) fail_msg("%s: %s", re, err);
    struct grammar_matcher *m = grammar_matcher_new(g);
    static const char path[] = "abcabcxx";
    for (int i = 0; i < 8; i++) {
        grammar_matcher_mask(m, out[i]);
        if (grammar_matcher_accept_bytes(m, &path[i], 1) < 0) {
            for (int k = i + 1; k < 8; k++) memset(out[k], 0, sizeof out[k]);
            break;
        }
    }
    grammar_matcher_free(m);
    grammar_unref(g);
}

static uint64_t ref_masks[4][8][WORDS];

static void *run_job_ref(void *arg) {
    struct job *j = arg;
    uint64_t got[8][WORDS];
    for (int r = 0; r < 6; r++) {
        int t = (j->seed + r) % 4;
        memset(got, 0, sizeof got);
        walk_masks(j->v, texts[t], got);
        if (memcmp(got, ref_masks[t], sizeof got)) j->bad++;
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    for (int t = 0; t < 4; t++) {
        struct grammar_vocab *own = vocab(GRAMMAR_DEFAULT_MAX_STACKS,
                                          GRAMMAR_DEFAULT_MAX_TOKEN_WORK, 60000);
        memset(ref_masks[t], 0, sizeof ref_masks[t]);
        walk_masks(own, texts[t], ref_masks[t]);
        grammar_vocab_free(own);
    }
    struct grammar_vocab *v = vocab(GRAMMAR_DEFAULT_MAX_STACKS, GRAMMAR_DEFAULT_MAX_TOKEN_WORK,
                                    60000);
    pthread_t th[6];
    struct job jobs[6];
    for (int i = 0; i < 6; i++) {
        jobs[i] = (struct job){v, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_job_ref, &jobs[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].bad, 0);
    }
    grammar_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_stacks),     cmocka_unit_test(test_max_token_work_exact),
        cmocka_unit_test(test_max_compile_ms), cmocka_unit_test(test_runtime_stop),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
