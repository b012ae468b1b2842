// link: tpd_grammar
/* The grammar module's C API on a small vocabulary (single bytes, a few multi-byte tokens,
 * an end token): acceptance, masks against the tokens' bytes run through accept_bytes,
 * end-of-generation placement, rollback, the compile cache and refused inputs. The masks are
 * checked against an independent recogniser in tests/py/test_grammar_mask.py. */
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

#define NV 264
static const char *tok_bytes[NV];
static size_t tok_lens[NV];
static char single[256];

/* ids 0..255: single bytes; 256 "ab", 257 "\"}", 258 "{\"", 259 "true", 260 "é", 261 "}}", 262
 * thirty
 * '}' (pops below the cached key depth: an uncertain token); 263 the end */
static struct grammar_vocab *vocab(void) {
    uint8_t usable[NV];
    for (int i = 0; i < 256; i++) {
        single[i] = (char)i;
        tok_bytes[i] = &single[i];
        tok_lens[i] = 1;
    }
    const char *multi[] = {
        "ab", "\"}", "{\"", "true", "\xc3\xa9", "}}", "}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}", ""};
    for (int i = 0; i < 8; i++) {
        tok_bytes[256 + i] = multi[i];
        tok_lens[256 + i] = strlen(multi[i]);
    }
    for (int i = 0; i < NV; i++) usable[i] = i != 263;
    int32_t eog = 263;
    return grammar_vocab_new(NV, tok_bytes, tok_lens, usable, &eog, 1);
}

static int allowed(const uint64_t *m, int id) { return (int)((m[id >> 6] >> (id & 63)) & 1); }

static struct grammar *compile(struct grammar_vocab *v, enum grammar_kind k, const char *text) {
    char err[ERR_LEN] = "";
    struct grammar *g = grammar_compile(v, k, text, strlen(text), err);
    if (!g) fail_msg("%s", err);
    return g;
}

/* Every token's mask bit equals whether accept_bytes of its bytes succeeds on a copy of the
 * state (the matcher checked against its own byte path; the Python test checks both against
 * an independent recogniser). */
static void check_mask_consistent(struct grammar *g, const char *prefix) {
    struct grammar_matcher *m = grammar_matcher_new(g);
    assert_int_equal(grammar_matcher_accept_bytes(m, prefix, strlen(prefix)), 0);
    uint64_t mask[(NV + 63) / 64];
    grammar_matcher_mask(m, mask);
    for (int id = 0; id < 263; id++) {
        int ok = grammar_matcher_accept_bytes(m, tok_bytes[id], tok_lens[id]) == 0;
        if (ok) assert_int_equal(grammar_matcher_rollback(m, 1), 0);
        if (ok != allowed(mask, id))
            fail_msg("prefix '%s' token %d: mask %d, accept %d", prefix, id, allowed(mask, id), ok);
    }
    assert_int_equal(allowed(mask, 263), grammar_matcher_can_end(m));
    grammar_matcher_free(m);
}

static void test_gbnf_accept_and_end(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(v, GRAMMAR_GBNF, "root ::= \"a\" \"b\"* (\"c\" | [0-9]{2,3})\n");
    struct grammar_matcher *m = grammar_matcher_new(g);
    uint64_t mask[(NV + 63) / 64];
    assert_int_equal(grammar_matcher_accept(m, 'x'), -1);
    assert_int_equal(grammar_matcher_accept(m, 256), 0); /* "ab" */
    assert_int_equal(grammar_matcher_can_end(m), 0);
    grammar_matcher_mask(m, mask);
    assert_true(allowed(mask, 'b') && allowed(mask, 'c') && allowed(mask, '7'));
    assert_false(allowed(mask, 'a') || allowed(mask, 263) || allowed(mask, 256));
    assert_int_equal(grammar_matcher_accept(m, 263), -1); /* cannot end yet */
    assert_int_equal(grammar_matcher_accept(m, '4'), 0);
    assert_int_equal(grammar_matcher_accept(m, '2'), 0);
    assert_true(grammar_matcher_can_end(m));
    assert_false(grammar_matcher_done(m)); /* a third digit may follow */
    assert_int_equal(grammar_matcher_accept(m, '0'), 0);
    assert_true(grammar_matcher_done(m));
    grammar_matcher_mask(m, mask);
    for (int i = 0; i < 263; i++) assert_false(allowed(mask, i));
    assert_true(allowed(mask, 263));
    /* rollback: back before "20", then another path */
    assert_int_equal(grammar_matcher_rollback(m, 2), 0);
    assert_int_equal(grammar_matcher_accept(m, 'c'), -1);
    assert_int_equal(grammar_matcher_rollback(m, 1), 0);
    assert_int_equal(grammar_matcher_accept(m, 'c'), 0);
    assert_true(grammar_matcher_done(m));
    assert_int_equal(grammar_matcher_accept(m, 263), 0);
    assert_int_equal(grammar_matcher_rollback(m, 99), -1);
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

static void test_masks_match_byte_acceptance(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(
        v, GRAMMAR_JSON_SCHEMA,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},"
        "\"b\":{\"type\":\"boolean\"},\"c\":{\"enum\":[\"\\u00e9\",1]}},\"required\":[\"a\"]}");
    const char *prefixes[] = {"",
                              "{",
                              "{\"a\":",
                              "{\"a\": \"x",
                              "{\"a\":\"xyz",
                              "{\"a\":\"\",\"b\":",
                              "{\"a\":\"\",\"c\":\"",
                              "{\"a\":\"\",\"c\":\"\xc3",
                              "{\"a\":\"\"}",
                              "{\"a\":\"\"\n    "};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        check_mask_consistent(g, prefixes[i]);
    grammar_unref(g);
    /* a deep grammar: keys cut below the cached depth, uncertain tokens checked against the whole
     * stack */
    g = compile(v, GRAMMAR_GBNF, "root ::= \"{\" root? \"}\"\n");
    char deep[128];
    for (int d = 0; d < 40; d++) { /* 262 (thirty '}') is allowed from depth 30 on */
        memset(deep, '{', (size_t)d);
        deep[d] = 0;
        check_mask_consistent(g, deep);
        struct grammar_matcher *m = grammar_matcher_new(g);
        uint64_t mask[(NV + 63) / 64];
        assert_int_equal(grammar_matcher_accept_bytes(m, deep, (size_t)d), 0);
        grammar_matcher_mask(m, mask);
        assert_int_equal(allowed(mask, 262), d >= 30);
        assert_int_equal(allowed(mask, 261), d >= 2);
        grammar_matcher_free(m);
    }
    grammar_unref(g);
    g = compile(v, GRAMMAR_REGEX, "(ab|c)+\"}?");
    check_mask_consistent(g, "");
    check_mask_consistent(g, "ab");
    check_mask_consistent(g, "abc\"");
    grammar_unref(g);
    grammar_vocab_free(v);
}

static void test_cache_and_json_object(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *a = compile(v, GRAMMAR_JSON_OBJECT, ""),
                   *b = compile(v, GRAMMAR_JSON_OBJECT, "");
    assert_ptr_equal(a, b); /* cached by kind and text */
    struct grammar_matcher *m = grammar_matcher_new(a);
    const char *doc = "{\"k\": [1, -2.5e3, true, null, {\"x\": \"\\u00e9\\n\"}]}";
    assert_int_equal(grammar_matcher_accept_bytes(m, doc, strlen(doc)), 0);
    assert_true(grammar_matcher_can_end(m));
    assert_int_equal(grammar_matcher_accept_bytes(m, "x", 1), -1);
    grammar_matcher_free(m);
    grammar_unref(a);
    grammar_unref(b);
    grammar_vocab_free(v);
}

/* The vocabulary's cache bytes bound the compiled grammars and their masks together:
 * distinct grammars past the bound push the least recently used out (a recompile gives a
 * new grammar), the count never stays above the bound once they are unreferenced, masks
 * that do not fit are still right, and everything is given back when the last user ends. */
static void test_cache_bytes_bound(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    const size_t limit = 16 << 10; /* some 14 of these small grammars */
    grammar_vocab_set_cache_bytes(v, limit);
    struct grammar *first = compile(v, GRAMMAR_REGEX, "[a-z]{1,8}x0");
    struct grammar *same = compile(v, GRAMMAR_REGEX, "[a-z]{1,8}x0");
    assert_ptr_equal(first, same); /* cached while there is room */
    grammar_unref(same);
    char re[64];
    for (int i = 1; i < 60; i++) { /* fewer than the LRU's 64: the bytes push them out */
        snprintf(re, sizeof re, "[a-z]{1,8}x%d(ab|c)+", i);
        struct grammar *g = compile(v, GRAMMAR_REGEX, re);
        check_mask_consistent(g, "q");
        grammar_unref(g);
        assert_true(grammar_vocab_cache_bytes(v) <= limit);
    }
    assert_true(grammar_vocab_cache_bytes(v) > limit / 4); /* it does keep some */
    same = compile(v, GRAMMAR_REGEX, "[a-z]{1,8}x0");
    assert_ptr_not_equal(first, same); /* recompiled: the first one (still held) left the cache */
    grammar_unref(first);
    grammar_unref(same);
    /* held grammars count until released; with no room, nothing is kept, masks still right */
    grammar_vocab_set_cache_bytes(v, 0);
    struct grammar *g = compile(v, GRAMMAR_JSON_OBJECT, "");
    assert_true(grammar_vocab_cache_bytes(v) > 0);
    check_mask_consistent(g, "{\"k\": [1, ");
    struct grammar *h = compile(v, GRAMMAR_JSON_OBJECT, "");
    assert_ptr_not_equal(g, h); /* not cached */
    grammar_unref(g);
    grammar_unref(h);
    assert_int_equal(grammar_vocab_cache_bytes(v), 0);
    grammar_vocab_free(v);
}

/* Threads compiling their own grammars and masking under a shared one, in a cache too
 * small for them all: eviction from both compile and mask_entry while others use what is
 * evicted (ThreadSanitizer: the tsan build of this test; every grammar is freed at the end). */
struct churn_arg {
    struct grammar_vocab *v;
    struct grammar *shared;
    int id;
};

static void *churn_grammars(void *p) {
    struct churn_arg *a = p;
    char re[64];
    for (int i = 0; i < 40; i++) {
        snprintf(re, sizeof re, "(ab|c)+x%d-%d[a-z]{1,6}", a->id, i);
        struct grammar *g = compile(a->v, GRAMMAR_REGEX, re);
        struct grammar_matcher *m = grammar_matcher_new(g), *s = grammar_matcher_new(a->shared);
        uint64_t mask[(NV + 63) / 64];
        const char *doc = "{\"k\": [1, {\"x\": \"ab\"}]}";
        for (size_t k = 0; k < strlen(doc); k++) {
            grammar_matcher_mask(s, mask);
            assert_true(allowed(mask, (unsigned char)doc[k]));
            assert_int_equal(grammar_matcher_accept_bytes(s, doc + k, 1), 0);
        }
        grammar_matcher_mask(m, mask);
        assert_true(allowed(mask, 'a') && allowed(mask, 'c') && !allowed(mask, 'x'));
        grammar_matcher_free(s);
        grammar_matcher_free(m);
        grammar_unref(g);
    }
    return NULL;
}

static void test_cache_bytes_threads(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    grammar_vocab_set_cache_bytes(v, 8 << 10);
    struct grammar *shared = compile(v, GRAMMAR_JSON_OBJECT, "");
    pthread_t t[4];
    struct churn_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct churn_arg){v, shared, i};
        assert_int_equal(pthread_create(&t[i], NULL, churn_grammars, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    grammar_unref(shared);
    assert_true(grammar_vocab_cache_bytes(v) <= 8 << 10);
    grammar_vocab_free(v);
}

static void expect_error(struct grammar_vocab *v, enum grammar_kind k, const char *text,
                         const char *needle) {
    char err[ERR_LEN] = "";
    struct grammar *g = grammar_compile(v, k, text, strlen(text), err);
    if (g) fail_msg("compiled: %s", text);
    if (!strstr(err, needle)) fail_msg("'%s': error '%s' lacks '%s'", text, err, needle);
}

static void test_refused(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    expect_error(v, GRAMMAR_JSON_SCHEMA,
                 "{\"type\":\"array\",\"contains\":{\"const\":1},"
                 "\"maxItems\":2}",
                 "contains beside");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"$dynamicRef\":\"#x\"}", "unsupported keyword");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"type\":", "not valid JSON");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"enum\":[]}", "non-empty");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}",
                 "unsatisfiable");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"#\"}", "refers to itself");
    expect_error(v, GRAMMAR_JSON_SCHEMA,
                 "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
                 "no value meets both 'type'");
    /* cJSON's strings end at a NUL: a pattern or const holding \u0000 would be cut short */
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[^/\\u0000]+$\"}",
                 "NUL characters");
    expect_error(v, GRAMMAR_JSON_SCHEMA, "{\"const\":\"a\\u0000b\"}", "\\u0000");
    grammar_unref(compile(v, GRAMMAR_JSON_SCHEMA, "{\"const\":\"a\\\\u0000b\"}")); /* text \u0000 */
    expect_error(v, GRAMMAR_REGEX, "a{5,2}", "n < m");
    expect_error(v, GRAMMAR_REGEX, "[z-a]", "bad character range");
    expect_error(v, GRAMMAR_REGEX, "a**", "multiple repeat");
    expect_error(v, GRAMMAR_GBNF, "root ::= [a-", "unterminated character class");
    expect_error(v, GRAMMAR_GBNF, "root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    expect_error(v, GRAMMAR_GBNF, "root ::= x\nx ::= x \"a\" | \"b\"", "left recursion");
    expect_error(v, GRAMMAR_GBNF, "root ::= \"a\"{2000}", "above 1000");
    char *big = malloc(GRAMMAR_MAX_TEXT + 2);
    memset(big, ' ', GRAMMAR_MAX_TEXT + 1);
    big[GRAMMAR_MAX_TEXT + 1] = 0;
    expect_error(v, GRAMMAR_JSON_SCHEMA, big, "longer than the limit");
    free(big);
    grammar_vocab_free(v);
}

static int accepts(struct grammar_matcher *m, const char *s) {
    return grammar_matcher_accept_bytes(m, s, strlen(s)) == 0;
}

/* uniqueItems over strings: the unique quote refuses a repeat (decoded: an escape equals its
 * character), the masks agree with acceptance around it, and rollback restores the text its
 * check reads. */
static void test_unique_strings(void **state) {
    (void)state;
    struct grammar_vocab *v = vocab();
    struct grammar *g = compile(
        v, GRAMMAR_JSON_SCHEMA,
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}");
    static const char *const prefixes[] = {
        "[\"a\",\"ab\",\"a", "[\"a\",\"ab\",\"",    "[\"ab\",\"a",      "[\"\\u0061\",\"",
        "[\"\",\"",          "[\"x\\\\\", \"x\\\\", "[\"é\",\"\\u00e9", "[\"\\\"}\",\"\\\""};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        check_mask_consistent(g, prefixes[i]);
    struct grammar_matcher *m = grammar_matcher_new(g);
    assert_true(accepts(m, "[\"a\",\"ab\""));
    assert_false(accepts(m, ",\"a\"\"")); /* nothing of a refused text is taken */
    assert_true(accepts(m, ",\"ab"));
    assert_false(accepts(m, "\""));
    assert_true(accepts(m, "c\""));                      /* "abc" */
    assert_int_equal(grammar_matcher_rollback(m, 2), 0); /* back to ["a","ab" */
    assert_true(accepts(m, ",\"\\u0061"));
    assert_false(accepts(m, "\""));
    assert_true(accepts(m, "\\n\""));
    assert_true(accepts(m, "]"));
    assert_true(grammar_matcher_done(m));
    grammar_matcher_free(m);
    m = grammar_matcher_new(g); /* whitespace and a ',' or '"' inside an item */
    assert_true(accepts(m, "[ \"a,\\\"b\" ,\n \"a\", \"a,\\\""));
    assert_false(accepts(m, "b\""));
    assert_true(accepts(m, "\""));
    grammar_matcher_free(m);
    grammar_unref(g);
    /* in GBNF: an item of no array differs from nothing; an unknown %-item is refused */
    g = compile(v, GRAMMAR_GBNF, "root ::= \"[\\\"\" [a-z]* %unique-quote \"]\"\n");
    m = grammar_matcher_new(g);
    assert_true(accepts(m, "[\"ab\"]"));
    grammar_matcher_free(m);
    grammar_unref(g);
    char err[ERR_LEN] = "";
    assert_null(grammar_compile(v, GRAMMAR_GBNF, "root ::= %unique\n", 17, err));
    assert_non_null(strstr(err, "%unique-quote"));
    grammar_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gbnf_accept_and_end),
        cmocka_unit_test(test_masks_match_byte_acceptance),
        cmocka_unit_test(test_cache_and_json_object),
        cmocka_unit_test(test_cache_bytes_bound),
        cmocka_unit_test(test_cache_bytes_threads),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_unique_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
