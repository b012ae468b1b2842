// link: tpd_server
/* The tool-call parser (server/toolcall.c) on model outputs written by hand in each
 * family's documented format: well-formed calls, several calls, content before and after,
 * malformed JSON, unknown function names, unterminated calls, look-alikes that are not
 * calls. Each output is parsed whole, cut at every byte position into two pieces, fed byte
 * by byte and cut at random points: the content and the calls must be the expected ones
 * every time (a stream must not depend on how the model's text was cut into tokens). The
 * format picked for real chat templates' sources is checked too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall.h"

static const char *const names[] = {"get_weather", "get_time", "no_args"};

struct call_x {
    const char *name, *args;
};

struct tcase {
    enum tool_format f;
    const char *out;
    const char *content; /* expected content */
    struct call_x calls[4];
    int parallel_off; /* parse with parallel_tool_calls false */
};

#define H TOOL_FORMAT_HERMES
#define L TOOL_FORMAT_LLAMA3
#define M TOOL_FORMAT_MISTRAL
#define N TOOL_FORMAT_NONE

static const struct tcase cases[] = {
    /* ---- Hermes / Qwen ---- */
    {H,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {H,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
     "\"unit\": \"celsius\"}}\n</tool_call>",
     "Let me check.\n",
     {{"get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}},
     0},
    {H,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
     "\"CET\"}}\n</tool_call>",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{\"tz\": \"CET\"}"}},
     0},
    /* parallel_tool_calls false: the first call only */
    {H,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
     "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": "
     "\"CET\"}}\n</tool_call>",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     1},
    /* arguments kept exactly as written: nesting, escapes, big numbers, unicode, braces in strings
     */
    {H,
     "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"q\":\"a}\\\"b{\",\"n\":"
     "12345678901234567890,\"l\":[1,{\"x\":null}],\"u\":\"h\\u00e9 \xe4\xbd\xa0\"}}</tool_call>",
     "",
     {{"get_weather", "{\"q\":\"a}\\\"b{\",\"n\":12345678901234567890,\"l\":[1,{\"x\":null}],\"u\":"
                      "\"h\\u00e9 \xe4\xbd\xa0\"}"}},
     0},
    /* arguments encoded as a string holding an object */
    {H,
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
     "\\\"Oslo\\\"}\"}</tool_call>",
     "",
     {{"get_weather", "{\"city\": \"Oslo\"}"}},
     0},
    /* no arguments at all */
    {H, "<tool_call>{\"name\": \"no_args\"}</tool_call>", "", {{"no_args", "{}"}}, 0},
    /* the model stopped after the JSON without the closing tag */
    {H,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n",
     "",
     {{"get_weather", "{\"city\": \"Rome\"}"}},
     0},
    /* malformed JSON: content, verbatim */
    {H,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}\n</tool_call>",
     {{0}},
     0},
    /* unknown function: content */
    {H,
     "<tool_call>{\"name\": \"launch_rocket\", \"arguments\": {}}</tool_call>",
     "<tool_call>{\"name\": \"launch_rocket\", \"arguments\": {}}</tool_call>",
     {{0}},
     0},
    /* arguments not an object: content */
    {H,
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>",
     "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>",
     {{0}},
     0},
    /* a good call and a bad one: the good one is a call, the bad one content */
    {H,
     "<tool_call>{\"name\": \"get_time\", \"arguments\": "
     "{}}</tool_call>\n<tool_call>{oops}</tool_call>",
     "<tool_call>{oops}</tool_call>",
     {{"get_time", "{}"}},
     0},
    /* content after a call is kept; blank content between calls is dropped */
    {H,
     "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\n\nDone.",
     "\n\nDone.",
     {{"get_time", "{}"}},
     0},
    /* an unfinished call at the end: content */
    {H,
     "Sure <tool_call>{\"name\": \"get_time\", \"argu",
     "Sure <tool_call>{\"name\": \"get_time\", \"argu",
     {{0}},
     0},
    /* look-alikes */
    {H, "use the <tool tag> or <tool_c", "use the <tool tag> or <tool_c", {{0}}, 0},
    {H, "plain answer", "plain answer", {{0}}, 0},
    {H, "", "", {{0}}, 0},
    {H, "  \n", "  \n", {{0}}, 0},
    /* ---- Llama 3.1 / 3.2 ---- */
    {L,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {L,
     "\n {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {L,
     "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {L,
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {L,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", "
     "\"parameters\": {}}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{}"}},
     0},
    {L,
     "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}; <|python_tag|>{\"name\": "
     "\"no_args\", \"parameters\": {}}",
     "",
     {{"get_time", "{}"}, {"no_args", "{}"}},
     0},
    /* JSON that is not a call (a JSON answer): content, verbatim */
    {L, "{\"answer\": 42}", "{\"answer\": 42}", {{0}}, 0},
    {L,
     " {\"name\": \"unknown\", \"parameters\": {}}",
     " {\"name\": \"unknown\", \"parameters\": {}}",
     {{0}},
     0},
    /* text first: a JSON object later is content (Llama 3 calls stand alone) */
    {L,
     "Here: {\"name\": \"get_time\", \"parameters\": {}}",
     "Here: {\"name\": \"get_time\", \"parameters\": {}}",
     {{0}},
     0},
    /* python_tag with code (a built-in tool): content */
    {L,
     "<|python_tag|>brave_search.call(query=\"x\")",
     "<|python_tag|>brave_search.call(query=\"x\")",
     {{0}},
     0},
    /* cut off inside the JSON */
    {L,
     "{\"name\": \"get_time\", \"parameters\": {\"tz\": ",
     "{\"name\": \"get_time\", \"parameters\": {\"tz\": ",
     {{0}},
     0},
    {L, "The weather is nice.", "The weather is nice.", {{0}}, 0},
    {L, "<|eom|> <|python", "<|eom|> <|python", {{0}}, 0},
    /* both keys: ambiguous, content */
    {L,
     "{\"name\": \"get_time\", \"parameters\": {}, \"arguments\": {}}",
     "{\"name\": \"get_time\", \"parameters\": {}, \"arguments\": {}}",
     {{0}},
     0},
    /* ---- Mistral ---- */
    {M,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {M,
     "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
     "\"abcdefghi\"}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}]",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{\"tz\": \"UTC\"}"}},
     0},
    {M,
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}},
     0},
    {M,
     "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": "
     "\"Paris\"}[TOOL_CALLS]get_time[ARGS]{}",
     "",
     {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{}"}},
     0},
    /* one bad element makes the whole array content */
    {M,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": 5}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": 5}]",
     {{0}},
     0},
    {M,
     "Sure. [TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
     "Sure. ",
     {{"get_time", "{}"}},
     0},
    {M, "[TOOL_CALLS] hello world", "[TOOL_CALLS] hello world", {{0}}, 0},
    {M,
     "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}",
     "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}",
     {{0}},
     0},
    {M, "[TOOL_CALL] not a marker", "[TOOL_CALL] not a marker", {{0}}, 0},
    /* ---- no format: everything is content ---- */
    {N,
     "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
     "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
     {{0}},
     0},
};

struct result {
    char *content;
    int n;
    char names[4][32];
    char args[4][256];
};

/* Parses out cut at the given sorted positions. */
static void parse_cut(const struct tcase *c, const size_t *cuts, int n_cuts, struct result *r) {
    struct toolcall_parser p;
    toolcall_parser_init(&p, c->f, names, 3, !c->parallel_off);
    struct sbuf content = {0};
    sbuf_add(&content, "", 0);
    size_t len = strlen(c->out), prev = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t at = i < n_cuts ? cuts[i] : len;
        toolcall_feed(&p, c->out + prev, at - prev, &content);
        prev = at;
    }
    toolcall_finish(&p, &content);
    r->content = content.p;
    r->n = p.n_calls;
    for (int i = 0; i < p.n_calls && i < 4; i++) {
        snprintf(r->names[i], sizeof r->names[i], "%s", p.calls[i].name);
        snprintf(r->args[i], sizeof r->args[i], "%s", p.calls[i].arguments);
        const char *id = p.calls[i].id;
        if (c->f == TOOL_FORMAT_MISTRAL) {
            assert_int_equal(strlen(id), 9);
        } else {
            assert_int_equal(strncmp(id, "call_", 5), 0);
            assert_int_equal(strlen(id), 29);
        }
        for (const char *k = c->f == TOOL_FORMAT_MISTRAL ? id : id + 5; *k; k++)
            assert_true((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
                        (*k >= '0' && *k <= '9'));
    }
    toolcall_parser_free(&p);
}

static void check(const struct tcase *c, const struct result *r, const char *how) {
    int want = 0;
    while (want < 4 && c->calls[want].name) want++;
    if (strcmp(r->content, c->content) || r->n != want) {
        print_error("case %s (%s):\n  got content [%s], %d calls\n  want [%s], %d calls\n", c->out,
                    how, r->content, r->n, c->content, want);
        fail();
    }
    for (int i = 0; i < want; i++) {
        assert_string_equal(r->names[i], c->calls[i].name);
        assert_string_equal(r->args[i], c->calls[i].args);
    }
}

static void test_cases(void **state) {
    (void)state;
    unsigned seed = 12345;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const struct tcase *c = &cases[k];
        size_t len = strlen(c->out);
        struct result r;
        parse_cut(c, NULL, 0, &r);
        check(c, &r, "whole");
        free(r.content);
        for (size_t at = 0; at <= len; at++) { /* two pieces */
            parse_cut(c, &at, 1, &r);
            char how[32];
            snprintf(how, sizeof how, "cut at %zu", at);
            check(c, &r, how);
            free(r.content);
        }
        size_t *every = malloc(sizeof *every * (len + 1));
        for (size_t i = 0; i < len; i++) every[i] = i;
        parse_cut(c, every, (int)len, &r); /* byte by byte */
        check(c, &r, "bytes");
        free(r.content);
        for (int t = 0; t < 50; t++) { /* random cuts */
            int n = 0;
            for (size_t i = 1; i < len; i++) {
                seed = seed * 1103515245u + 12345u;
                if ((seed >> 16) % 5 == 0) every[n++] = i;
            }
            parse_cut(c, every, n, &r);
            check(c, &r, "random");
            free(r.content);
        }
        free(every);
    }
}

/* The format rule on template sources as the families write them (excerpts); the real
 * templates are checked in tests/py/test_tool_calls.py. */
static void test_detect(void **state) {
    (void)state;
    assert_int_equal(toolcall_detect(NULL), TOOL_FORMAT_NONE);
    assert_int_equal(toolcall_detect("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"),
                     TOOL_FORMAT_NONE);
    assert_int_equal(
        toolcall_detect("{{- '<tool_call>\\n{\"name\": \"' }}{{- '\", \"arguments\": ' }}"),
        TOOL_FORMAT_HERMES);
    assert_int_equal(toolcall_detect("{{- '<tool_call>\\n<function=' + tc.name }}\"arguments\""),
                     TOOL_FORMAT_NONE);
    assert_int_equal(toolcall_detect("<tool_call>{{ tc.name }}<arg_key>\"arguments\""),
                     TOOL_FORMAT_NONE);
    assert_int_equal(toolcall_detect("{{- '<|python_tag|>' }}{\"name\": x, \"parameters\": y}"),
                     TOOL_FORMAT_LLAMA3);
    assert_int_equal(
        toolcall_detect("<|start_header_id|>{\"name\": function name, \"parameters\": dictionary}"),
        TOOL_FORMAT_LLAMA3);
    assert_int_equal(toolcall_detect("<|start_header_id|>>>>all\n\"parameters\""),
                     TOOL_FORMAT_NONE);
    assert_int_equal(toolcall_detect("{{- '[TOOL_CALLS][' }}<tool_call>"), TOOL_FORMAT_MISTRAL);
    for (int f = 0; f <= TOOL_FORMAT_MISTRAL; f++)
        assert_int_equal(toolcall_format_parse(toolcall_format_name((enum tool_format)f)), f);
    assert_int_equal(toolcall_format_parse("qwen"), -1);
}

/* Ids differ from call to call. */
static void test_ids(void **state) {
    (void)state;
    char a[40], b[40];
    toolcall_new_id(TOOL_FORMAT_HERMES, a);
    toolcall_new_id(TOOL_FORMAT_HERMES, b);
    assert_string_not_equal(a, b);
    toolcall_new_id(TOOL_FORMAT_MISTRAL, a);
    assert_int_equal(strlen(a), 9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
