// link: tpd_tokenizer
/* Tokenizer unit tests on the small fixtures of tests/data/tok/ (derived by
 * tests/reference/tok_fixtures.py from HF tokenizers and jinja2): ids equal HF's, decode and
 * the streaming detokenizer agree, corrupt inputs are refused, and the chat-template
 * engine renders what jinja2 renders. The corpus-wide comparisons are in tests/py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "jinja/jinja.h"
#include "testutil.h"
#include "tokenizer/chat.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

static char *read_all(const char *name, size_t *len) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/tok/%s", name);
    return tu_read_source(rel, len);
}

static struct tokenizer *load_fixture(const char *name) {
    size_t len;
    char *json = read_all(name, &len);
    assert_non_null(json);
    struct tokenizer *t = NULL;
    char err[ERR_LEN] = "";
    int rc = tokenizer_load_json(&t, json, len, NULL, 0, err);
    free(json);
    if (rc) fprintf(stderr, "%s: %s\n", name, err);
    assert_int_equal(rc, 0);
    return t;
}

static void check_ids(const cJSON *want, const int32_t *ids, size_t n, const char *text) {
    if ((size_t)cJSON_GetArraySize(want) != n) fprintf(stderr, "text '%s': %zu ids\n", text, n);
    assert_int_equal(cJSON_GetArraySize(want), n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(cJSON_GetArrayItem(want, (int)i)->valueint, ids[i]);
}

/* Concatenated streaming output must equal the full decode. */
static void check_stream(const struct tokenizer *t, const int32_t *ids, size_t n, const char *dec,
                         size_t dl) {
    struct detok d;
    detok_init(&d, t, 0);
    char *all = calloc(1, dl * 2 + 64);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t ol;
        const char *o = detok_push(&d, ids[i], &ol);
        assert_non_null(o);
        memcpy(all + k, o, ol);
        k += ol;
    }
    size_t ol;
    const char *o = detok_flush(&d, &ol);
    memcpy(all + k, o, ol);
    k += ol;
    assert_int_equal(k, dl);
    assert_memory_equal(all, dec, dl);
    free(all);
    detok_free(&d);
}

static void run_fixture(const char *name, const char *key) {
    struct tokenizer *t = load_fixture(name);
    size_t len;
    char *exp = read_all("expected.json", &len);
    assert_non_null(exp);
    cJSON *root = cJSON_Parse(exp);
    free(exp);
    const cJSON *c;
    char err[ERR_LEN];
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, key)) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        int32_t *ids;
        size_t n;
        assert_int_equal(tokenizer_encode(t, text, strlen(text),
                                          TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &ids, &n, err),
                         0);
        check_ids(cJSON_GetObjectItem(c, "ids"), ids, n, text);
        char *dec;
        size_t dl;
        assert_int_equal(tokenizer_decode(t, ids, n, 0, &dec, &dl, err), 0);
        assert_string_equal(dec, cJSON_GetObjectItem(c, "decoded")->valuestring);
        check_stream(t, ids, n, dec, dl);
        free(dec);
        free(ids);
        assert_int_equal(tokenizer_encode(t, text, strlen(text), 0, &ids, &n, err), 0);
        check_ids(cJSON_GetObjectItem(c, "ids_plain"), ids, n, text);
        free(ids);
    }
    cJSON_Delete(root);
    tokenizer_free(t);
}

static void test_bytelevel_matches_hf(void **state) {
    (void)state;
    run_fixture("bytelevel.json", "bytelevel");
}
static void test_spm_matches_hf(void **state) {
    (void)state;
    run_fixture("spm.json", "spm");
}

static void test_special_tokens_need_the_flag(void **state) {
    (void)state;
    struct tokenizer *t = load_fixture("bytelevel.json");
    char err[ERR_LEN];
    int32_t id = tokenizer_find(t, "<|im_start|>", 12);
    assert_true(id >= 0);
    assert_true(tokenizer_is_special(t, id));
    int32_t *ids;
    size_t n;
    const char *text = "<|im_start|>";
    assert_int_equal(tokenizer_encode(t, text, strlen(text), TOK_PARSE_SPECIAL, &ids, &n, err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], id);
    free(ids);
    /* default: user text never produces a special token */
    assert_int_equal(tokenizer_encode(t, text, strlen(text), 0, &ids, &n, err), 0);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], id);
    char *dec;
    size_t dl;
    assert_int_equal(tokenizer_decode(t, ids, n, 0, &dec, &dl, err), 0);
    assert_string_equal(dec, text);
    free(dec);
    free(ids);
    /* a non-special added token is always matched */
    int32_t think = tokenizer_find(t, "<think>", 7);
    assert_int_equal(tokenizer_encode(t, "<think>", 7, 0, &ids, &n, err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], think);
    free(ids);
    tokenizer_free(t);
}

static void test_stream_never_splits_utf8(void **state) {
    (void)state;
    struct tokenizer *t = load_fixture("spm.json");
    char err[ERR_LEN];
    /* rare characters fall back to <0xNN> byte tokens: one token per byte */
    const char *text = "\xf0\x9f\xa6\x84\xe2\x82\xac";
    int32_t *ids;
    size_t n;
    assert_int_equal(tokenizer_encode(t, text, strlen(text), 0, &ids, &n, err), 0);
    assert_true(n >= 4);
    struct detok d;
    detok_init(&d, t, 0);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t ol;
        const char *o = detok_push(&d, ids[i], &ol);
        assert_non_null(o);
        /* every chunk is whole characters: valid UTF-8 on its own */
        for (size_t k = 0; k < ol;) {
            size_t l = utf8_valid_len((const uint8_t *)o + k, ol - k);
            assert_true(l > 0);
            k += l;
        }
        total += ol;
    }
    size_t ol;
    detok_flush(&d, &ol);
    assert_int_equal(ol, 0);
    assert_int_equal(total, strlen(text)); /* the prepended ▁ is stripped at the start */
    detok_free(&d);
    free(ids);
    /* an unfinished sequence at the end of a stream becomes U+FFFD at flush */
    int32_t b0 = tokenizer_find(t, "<0xF0>", 6);
    assert_true(b0 >= 0);
    detok_init(&d, t, 0);
    const char *o = detok_push(&d, b0, &ol);
    assert_int_equal(ol, 0);
    o = detok_flush(&d, &ol);
    assert_int_equal(ol, 3);
    assert_memory_equal(o, "\xef\xbf\xbd", 3);
    detok_free(&d);
    tokenizer_free(t);
}

static void test_corrupt_json_is_refused(void **state) {
    (void)state;
    size_t len;
    char *json = read_all("bytelevel.json", &len);
    assert_non_null(json);
    char err[ERR_LEN];
    struct tokenizer *t;
    /* every truncation point is invalid JSON or an incomplete tokenizer */
    for (size_t cut = 0; cut < len; cut += len / 97 + 1) {
        err[0] = 0;
        assert_int_equal(tokenizer_load_json(&t, json, cut, NULL, 0, err), -1);
        assert_true(strlen(err) > 0);
    }
    static const char *const bad[] = {
        "{}",
        "[]",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
        "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
        "\"Isolated\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
        "\"pre_tokenizer\": {\"type\": \"Whatever\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": "
        "{\"type\": \"Precompiled\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": "
        "[{\"id\": 2000000000, \"content\": \"x\"}]}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": "
        "\"<zzz>\"}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        assert_int_equal(tokenizer_load_json(&t, bad[i], strlen(bad[i]), NULL, 0, err), -1);
        assert_true(strlen(err) > 0);
    }
    free(json);
}

static void test_decode_rejects_bad_ids(void **state) {
    (void)state;
    struct tokenizer *t = load_fixture("bytelevel.json");
    char err[ERR_LEN];
    int32_t ids[] = {1, -5};
    char *dec;
    size_t dl;
    assert_int_equal(tokenizer_decode(t, ids, 2, 0, &dec, &dl, err), -1);
    struct detok d;
    detok_init(&d, t, 0);
    size_t ol;
    assert_null(detok_push(&d, (int32_t)tokenizer_n_vocab(t), &ol));
    detok_free(&d);
    tokenizer_free(t);
}

static void test_templates_match_jinja2(void **state) {
    (void)state;
    size_t len;
    char *j = read_all("templates.json", &len);
    assert_non_null(j);
    cJSON *root = cJSON_Parse(j);
    free(j);
    const cJSON *c;
    char err[ERR_LEN];
    int n = 0;
    cJSON_ArrayForEach(c, root) {
        const char *tpl = cJSON_GetObjectItem(c, "template")->valuestring;
        char *ctx = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "context"));
        char *out;
        size_t ol;
        int rc = chat_render_json(tpl, strlen(tpl), ctx, &out, &ol, err);
        if (rc) fprintf(stderr, "render: %s\n", err);
        assert_int_equal(rc, 0);
        assert_string_equal(out, cJSON_GetObjectItem(c, "text")->valuestring);
        free(out);
        free(ctx);
        n++;
    }
    assert_true(n >= 6);
    cJSON_Delete(root);
}

static void test_template_errors(void **state) {
    (void)state;
    static const char *const bad[] = {"{% if x %}",   "{{ a + }}",   "{% for %}",       "{{ 'x }}",
                                      "{% endfor %}", "{% bogus %}", "{{ f(a=1, 2) }}", "{#"};
    char err[ERR_LEN];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct jtemplate *t = NULL;
        err[0] = 0;
        assert_int_equal(jinja_load(&t, bad[i], strlen(bad[i]), err), -1);
        assert_non_null(strstr(err, "template line"));
    }
    /* runtime refusals: raise_exception, undefined calls, runaway loops */
    static const char *const stop[] = {
        "{{ raise_exception('no') }}", "{{ nope() }}",
        "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
        "{{ 'x' * 1000000000 }}", "{{ 1 // 0 }}"};
    for (size_t i = 0; i < sizeof(stop) / sizeof(stop[0]); i++) {
        char *out;
        size_t ol;
        err[0] = 0;
        assert_int_equal(chat_render_json(stop[i], strlen(stop[i]), "{}", &out, &ol, err), -1);
        assert_true(strlen(err) > 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytelevel_matches_hf),
        cmocka_unit_test(test_spm_matches_hf),
        cmocka_unit_test(test_special_tokens_need_the_flag),
        cmocka_unit_test(test_stream_never_splits_utf8),
        cmocka_unit_test(test_corrupt_json_is_refused),
        cmocka_unit_test(test_decode_rejects_bad_ids),
        cmocka_unit_test(test_templates_match_jinja2),
        cmocka_unit_test(test_template_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
