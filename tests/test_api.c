// link: tpd_daemon
/* The OpenAI request layer without sockets: a table of bad requests, each refused with
 * the right status and a message (and "param") naming the offending field; good requests
 * parsed into the right parameters; the stop-string matcher checked on hand cases and
 * against a naive whole-text search over random texts and random split points; strict
 * UTF-8; the Prometheus rendering. Uses SmolLM2's tokenizer (skips without the model). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "server/api.h"
#include "server/api_grammar.h"
#include "util/sbuf.h"
#include "server/api_stop.h"
#include "sched/metrics.h"
#include "sched/scheduler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

#define MODEL "smol"
#define CTX 64

static struct tokenizer *tok;
static struct chat_template chat;

static struct api_ctx ctx(void) {
    struct api_ctx c = {.tok = tok, .model_name = MODEL, .max_ctx = CTX, .chat = &chat};
    return c;
}

/* ---- bad requests ---- */

enum ep { COMP, CHAT, TOKENIZE, DETOK };

struct bad {
    enum ep ep;
    const char *body;
    int status;
    const char *param; /* expected "param"; also must appear in the message when non-empty */
};

static const struct bad bad[] = {
    /* not JSON, or not an object */
    {COMP, "not json", 400, ""},
    {COMP, "[1, 2]", 400, ""},
    {COMP, "{\"prompt\": \"x\"} trailing", 400, ""},
    {COMP, "{\"prompt\": \"x\"", 400, ""},
    {COMP, "{\"prompt\": \"\\ud800\"}", 400, ""}, /* lone surrogate escape */
    {COMP, "", 400, ""},
    /* prompt */
    {COMP, "{}", 400, "prompt"},
    {COMP, "{\"prompt\": 5}", 400, "prompt"},
    {COMP, "{\"prompt\": \"\"}", 400, "prompt"},
    {COMP, "{\"prompt\": []}", 400, "prompt"},
    {COMP, "{\"prompt\": [1, 99999999]}", 400, "prompt"},
    {COMP, "{\"prompt\": [1, 49152]}", 400, "prompt"}, /* == vocab size */
    {COMP, "{\"prompt\": [1, -1]}", 400, "prompt"},
    {COMP, "{\"prompt\": [1, 2.5]}", 400, "prompt"},
    {COMP, "{\"prompt\": [1, \"2\"]}", 400, "prompt"},
    {COMP, "{\"prompt\": [\"a\", 5]}", 400, "prompt"},
    {COMP, "{\"prompt\": [\"a\", \"\"]}", 400, "prompt"},
    {COMP, "{\"prompt\": [[1], [2, 3], []]}", 400, "prompt"},
    {COMP, "{\"prompt\": [\"a\", \"b\", \"c\"], \"n\": 6}", 400,
     "prompt"}, /* 18 choices > API_MAX_N */
    {COMP, "{\"prompt\": {\"text\": \"a\"}}", 400, "prompt"},
    {COMP, "{\"prompt\": [[]]}", 400, "prompt"},
    /* sampling */
    {COMP, "{\"prompt\": \"x\", \"temperature\": \"hot\"}", 400, "temperature"},
    {COMP, "{\"prompt\": \"x\", \"temperature\": 2.5}", 400, "temperature"},
    {COMP, "{\"prompt\": \"x\", \"temperature\": -0.1}", 400, "temperature"},
    {COMP, "{\"prompt\": \"x\", \"top_p\": 0}", 400, "top_p"},
    {COMP, "{\"prompt\": \"x\", \"top_p\": 1.01}", 400, "top_p"},
    {COMP, "{\"prompt\": \"x\", \"top_k\": -2}", 400, "top_k"},
    {COMP, "{\"prompt\": \"x\", \"top_k\": 1.5}", 400, "top_k"},
    {COMP, "{\"prompt\": \"x\", \"min_p\": 1.5}", 400, "min_p"},
    {COMP, "{\"prompt\": \"x\", \"repetition_penalty\": 0}", 400, "repetition_penalty"},
    {COMP, "{\"prompt\": \"x\", \"repetition_penalty\": 2.5}", 400, "repetition_penalty"},
    {COMP, "{\"prompt\": \"x\", \"presence_penalty\": 2.5}", 400, "presence_penalty"},
    {COMP, "{\"prompt\": \"x\", \"frequency_penalty\": -3}", 400, "frequency_penalty"},
    {COMP, "{\"prompt\": \"x\", \"frequency_penalty\": true}", 400, "frequency_penalty"},
    {COMP, "{\"prompt\": \"x\", \"seed\": \"abc\"}", 400, "seed"},
    {COMP, "{\"prompt\": \"x\", \"seed\": 1.5}", 400, "seed"},
    {COMP, "{\"prompt\": \"x\", \"seed\": 1e30}", 400, "seed"},
    /* lengths */
    {COMP, "{\"prompt\": \"x\", \"max_tokens\": 0}", 400, "max_tokens"},
    {COMP, "{\"prompt\": \"x\", \"max_tokens\": \"10\"}", 400, "max_tokens"},
    {COMP, "{\"prompt\": \"x\", \"max_tokens\": 64}", 400, "max_tokens"}, /* 1 + 64 > CTX */
    {COMP, "{\"prompt\": \"x\", \"max_tokens\": 1e12}", 400, "max_tokens"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": -1}",
     400, "max_completion_tokens"},
    {COMP,
     "{\"prompt\": "
     "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,"
     "33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,"
     "64]}",
     400, "prompt"},
    /* n, stop */
    {COMP, "{\"prompt\": \"x\", \"n\": 0}", 400, "n"},
    {COMP, "{\"prompt\": \"x\", \"n\": 17}", 400, "n"},
    {COMP, "{\"prompt\": \"x\", \"stop\": 5}", 400, "stop"},
    {COMP, "{\"prompt\": \"x\", \"stop\": [\"\"]}", 400, "stop"},
    {COMP, "{\"prompt\": \"x\", \"stop\": \"\"}", 400, "stop"},
    {COMP, "{\"prompt\": \"x\", \"stop\": [\"a\", 1]}", 400, "stop"},
    {COMP,
     "{\"prompt\": \"x\", \"stop\": "
     "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\","
     "\"p\",\"q\"]}",
     400, "stop"},
    /* logprobs */
    {COMP, "{\"prompt\": \"x\", \"logprobs\": 21}", 400, "logprobs"},
    {COMP, "{\"prompt\": \"x\", \"logprobs\": true}", 400, "logprobs"},
    {CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 3}", 400,
     "logprobs"},
    {CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 5}", 400,
     "top_logprobs"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, "
     "\"top_logprobs\": 21}",
     400, "top_logprobs"},
    {COMP, "{\"prompt\": \"x\", \"echo\": \"yes\"}", 400, "echo"},
    /* logit_bias */
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": [1]}", 400, "logit_bias"},
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", 400, "logit_bias"},
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": {\"99999999\": 1}}", 400, "logit_bias"},
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": {\"-5\": 1}}", 400, "logit_bias"},
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 200}}", 400, "logit_bias"},
    {COMP, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"a\"}}", 400, "logit_bias"},
    /* stream */
    {COMP, "{\"prompt\": \"x\", \"stream\": \"yes\"}", 400, "stream"},
    {COMP, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", 400,
     "stream_options"},
    {COMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}", 400, "stream_options"},
    {COMP, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}", 400,
     "stream_options.include_usage"},
    {COMP, "{\"prompt\": \"x\", \"ignore_eos\": 1}", 400, "ignore_eos"},
    /* model */
    {COMP, "{\"prompt\": \"x\", \"model\": \"gpt-4\"}", 404, "model"},
    {COMP, "{\"prompt\": \"x\", \"model\": 5}", 400, "model"},
    {CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"model\": \"other\"}", 404,
     "model"},
    /* messages */
    {CHAT, "{}", 400, "messages"},
    {CHAT, "{\"messages\": \"hi\"}", 400, "messages"},
    {CHAT, "{\"messages\": []}", 400, "messages"},
    {CHAT, "{\"messages\": [5]}", 400, "messages[0]"},
    {CHAT, "{\"messages\": [{\"content\": \"x\"}]}", 400, "messages[0].role"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"wizard\", "
     "\"content\": \"x\"}]}",
     400, "messages[1].role"},
    {CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400, "messages[0].content"},
    {CHAT, "{\"messages\": [{\"role\": \"user\"}]}", 400, "messages[0].content"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": "
     "{}}]}]}",
     400, "messages[0].content[0]"},
    {CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", 400,
     "messages[0].content[0]"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": 1}",
     400, "add_generation_prompt"},
/* tools (server/api_tools.c; SmolLM2's own template knows no call format) */
#define U "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
#define F1 "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]"
    {CHAT, U "\"tools\": 5}", 400, "tools"},
    {CHAT, U "\"tools\": [5]}", 400, "tools[0]"},
    {CHAT, U "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", 400,
     "tools[0]"},
    {CHAT, U "\"tools\": " F1 "}", 400, "tools"}, /* no call format to parse calls in */
    {CHAT, U "\"tools\": " F1 ", \"tool_choice\": \"maybe\"}", 400, "tool_choice"},
    {CHAT,
     U "\"tools\": " F1
       ", \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
     400, "tool_choice"},
    {CHAT, U "\"tool_choice\": \"auto\"}", 400, "tool_choice"},
    {CHAT, U "\"tools\": " F1 ", \"tool_choice\": \"none\", \"parallel_tool_calls\": 1}", 400,
     "parallel_tool_calls"},
    {CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", 400,
     "messages[0].tool_call_id"},
    {CHAT,
     "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
     "\"a\", \"function\": {\"name\": \"f\", \"arguments\": \"[1]\"}}]}]}",
     400, "messages[0].tool_calls[0]"},
#undef U
#undef F1
    /* known but not implemented: named, never ignored */
    {COMP, "{\"prompt\": \"x\", \"suffix\": \"end\"}", 400, "suffix"},
    {COMP, "{\"prompt\": \"x\", \"best_of\": 2}", 400, "best_of"},
    {COMP, "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 3}", 400, "best_of"},
    {COMP, "{\"prompt\": \"x\", \"use_beam_search\": true}", 400, "use_beam_search"},
    {COMP, "{\"prompt\": \"x\", \"min_tokens\": 4}", 400, "min_tokens"},
    {COMP, "{\"prompt\": \"x\", \"prompt_logprobs\": 1}", 400, "prompt_logprobs"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"functions\": [{\"name\": "
     "\"f\"}]}",
     400, "functions"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"function_call\": \"auto\"}", 400,
     "function_call"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"audio\": {\"voice\": \"a\"}}",
     400, "audio"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"modalities\": [\"text\", "
     "\"audio\"]}",
     400, "modalities"},
    {CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"prediction\": {\"type\": "
     "\"content\"}}",
     400, "prediction"},
    /* tokenize / detokenize */
    {TOKENIZE, "{}", 400, "prompt"},
    {TOKENIZE, "{\"prompt\": 3}", 400, "prompt"},
    {TOKENIZE, "{\"messages\": [{\"role\": \"nobody\", \"content\": \"x\"}]}", 400,
     "messages[0].role"},
    {TOKENIZE, "{\"prompt\": \"x\", \"add_special_tokens\": \"no\"}", 400, "add_special_tokens"},
    {DETOK, "{}", 400, "tokens"},
    {DETOK, "{\"tokens\": \"1 2\"}", 400, "tokens"},
    {DETOK, "{\"tokens\": [1, 49152]}", 400, "tokens"},
    {DETOK, "{\"tokens\": [1, null]}", 400, "tokens"},
};

static int run_parse(enum ep ep, const char *body, size_t len, struct api_error *e) {
    struct api_ctx c = ctx();
    struct api_params p;
    int32_t *ids = NULL;
    int n = 0, rc;
    switch (ep) {
    case COMP: rc = api_parse_generate(&c, API_COMPLETION, body, len, &p, e); break;
    case CHAT: rc = api_parse_generate(&c, API_CHAT, body, len, &p, e); break;
    case TOKENIZE: rc = api_parse_tokenize(&c, body, len, &ids, &n, e); break;
    default: rc = api_parse_detokenize(&c, body, len, &ids, &n, e); break;
    }
    if (rc == 0) {
        if (ep == COMP || ep == CHAT) api_params_free(&p);
        free(ids);
    }
    return rc;
}

static void test_bad_requests(void **state) {
    (void)state;
    assert_true(sizeof bad / sizeof *bad >= 30);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct api_error e;
        memset(&e, 0, sizeof e);
        int rc = run_parse(bad[i].ep, bad[i].body, strlen(bad[i].body), &e);
        if (rc != -1 || e.status != bad[i].status || strcmp(e.param, bad[i].param) ||
            (bad[i].param[0] && !strstr(e.message, bad[i].param)))
            fail_msg("case %zu %s: rc %d status %d param \"%s\" message \"%s\"", i, bad[i].body, rc,
                     e.status, e.param, e.message);
        /* the error body is OpenAI's shape and valid JSON */
        size_t len;
        char *js = api_error_json(&e, &len);
        assert_non_null(strstr(js, "{\"error\":{\"message\":"));
        assert_true(utf8_valid(js, len));
        free(js);
    }
}

static void test_invalid_utf8_and_nul(void **state) {
    (void)state;
    const char bodies[][32] = {"{\"prompt\": \"\xff\"}", "{\"prompt\": \"\xc0\xaf\"}",
                               "{\"prompt\": \"\xed\xa0\x80\"}", "{\"prompt\": \"\xe2\x82\"}"};
    for (unsigned i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        struct api_error e;
        assert_int_equal(run_parse(COMP, bodies[i], strlen(bodies[i]), &e), -1);
        assert_int_equal(e.status, 400);
        assert_non_null(strstr(e.message, "UTF-8"));
    }
    const char nul[] = "{\"prompt\": \"a\"}\0{}";
    struct api_error e;
    assert_int_equal(run_parse(COMP, nul, sizeof nul - 1, &e), -1);
    assert_int_equal(e.status, 400);
}

/* A \u0000 escape would reach the tokenizer and stop matching as a C string's end: refused
 * with a 400 that says so, wherever it stands; an escaped backslash before "u0000" is text. */
static void test_nul_escape(void **state) {
    (void)state;
    const char *refused[] = {"{\"prompt\": \"abc\\u0000def\"}",
                             "{\"prompt\": \"x\", \"stop\": [\"\\u0000\"]}",
                             "{\"prompt\": \"\\\\\\u0000\"}"};
    for (unsigned i = 0; i < sizeof refused / sizeof *refused; i++) {
        struct api_error e;
        assert_int_equal(run_parse(COMP, refused[i], strlen(refused[i]), &e), -1);
        assert_int_equal(e.status, 400);
        assert_non_null(strstr(e.message, "\\u0000"));
        assert_int_equal(run_parse(TOKENIZE, refused[i], strlen(refused[i]), &e), -1);
    }
    const char *ok =
        "{\"prompt\": \"a\\\\u0000b\", \"max_tokens\": 1}"; /* the text a\u0000b, no NUL */
    struct api_error e;
    assert_int_equal(run_parse(COMP, ok, strlen(ok), &e), 0);
}

/* Limits known at start: no sequence longer than the whole KV cache, no n larger than the
 * queue; each refused up front with a 400 naming the field and the limit. */
static void test_cache_and_queue_limits(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    c.kv_tokens = 32; /* < CTX */
    c.max_queue = 4;
    struct api_params p;
    struct api_error e;
    const char *fits = "{\"prompt\": [1, 2], \"max_tokens\": 30}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, fits, strlen(fits), &p, &e), 0);
    api_params_free(&p);
    const char *too_long = "{\"prompt\": [1, 2], \"max_tokens\": 31}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, too_long, strlen(too_long), &p, &e),
                     -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "max_tokens");
    assert_non_null(strstr(e.message, "KV cache holds 32 tokens"));
    const char *chat_default = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
    c.kv_tokens = 64;
    if (api_parse_generate(&c, API_CHAT, chat_default, strlen(chat_default), &p, &e) == 0) {
        assert_true(p.n_prompt + p.max_tokens <=
                    64); /* the default fills the cache, not the context */
        api_params_free(&p);
    } else {
        assert_string_equal(e.param, "messages"); /* the template's system prompt alone is longer */
    }
    const char *many = "{\"prompt\": [1], \"max_tokens\": 1, \"n\": 5}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, many, strlen(many), &p, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "n");
    assert_non_null(strstr(e.message, "scheduler.max_queue"));
}

static void test_utf8_validator(void **state) {
    (void)state;
    static const struct {
        const char *s;
        int ok;
    } t[] = {
        {"plain", 1},
        {"caf\xc3\xa9", 1},
        {"\xe2\x82\xac", 1},
        {"\xf0\x9f\x98\x80", 1},
        {"\xf4\x8f\xbf\xbf", 1}, /* U+10FFFF */
        {"\xf4\x90\x80\x80", 0}, /* past U+10FFFF */
        {"\xc0\x80", 0},
        {"\xe0\x80\xaf", 0},
        {"\xf0\x80\x80\xaf", 0}, /* overlong */
        {"\xed\xa0\x80", 0},     /* surrogate */
        {"\x80", 0},
        {"\xc3", 0},
        {"\xe2\x82", 0},
        {"\xf8\x88\x80\x80\x80", 0},
        {"\xfe", 0},
    };
    for (unsigned i = 0; i < sizeof t / sizeof *t; i++)
        if (utf8_valid(t[i].s, strlen(t[i].s)) != t[i].ok) fail_msg("case %u", i);
}

/* ---- good requests ---- */

/* vLLM's structured-output fields (issue 27): guided_choice and structured_outputs are
 * honoured (before, they were ignored and the text came out unconstrained), and a
 * structured-output field tpd does not implement is a 400 naming it, never dropped. */
static int sentence(struct grammar *g, const char *text) {
    struct grammar_matcher *m = grammar_matcher_new(g);
    int ok = grammar_matcher_accept_bytes(m, text, strlen(text)) == 0 && grammar_matcher_can_end(m);
    grammar_matcher_free(m);
    return ok;
}

/* A completion request with one more field, parsed with c. */
static int parse_with(struct api_ctx *c, const char *field, struct api_params *p,
                      struct api_error *e) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"x\", %s}", field);
    memset(e, 0, sizeof *e);
    return api_parse_generate(c, API_COMPLETION, body, strlen(body), p, e);
}

static void test_structured_output_fields(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    c.gvocab = api_grammar_vocab(tok);
    static const struct {
        const char *field, *yes, *no;
    } good[] = {
        {"\"guided_choice\": [\"yes\", \"no \\\"x\\\"\"]", "no \"x\"", "maybe"},
        {"\"structured_outputs\": {\"choice\": [\"red\", \"blue\"]}", "blue", "green"},
        {"\"structured_outputs\": {\"json\": {\"type\": \"integer\"}}", "42", "\"42\""},
        {"\"structured_outputs\": {\"regex\": \"[a-c]{2}\"}", "ab", "abc"},
        {"\"structured_outputs\": {\"grammar\": \"root ::= \\\"x\\\"+\"}", "xxx", "y"},
        {"\"structured_outputs\": {\"json_object\": true}", "{\"k\": 1}", "[1]"},
        {"\"guided_json\": {\"enum\": [1, 2]}, \"guided_close\": false", "2", "3"},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        struct api_params p;
        struct api_error e;
        if (parse_with(&c, good[i].field, &p, &e) != 0)
            fail_msg("%s: %d %s", good[i].field, e.status, e.message);
        assert_non_null(p.grammar);
        if (!sentence(p.grammar, good[i].yes) || sentence(p.grammar, good[i].no))
            fail_msg("%s", good[i].field);
        api_params_free(&p);
    }
    static const struct {
        const char *field, *param, *needle;
    } bad_fields[] = {
        {"\"guided_decoding_backend\": \"xgrammar\"", "guided_decoding_backend", "unsupported"},
        {"\"guided_whitespace_pattern\": \" \"", "guided_whitespace_pattern", "unsupported"},
        {"\"structured_outputs\": {\"structural_tag\": \"{}\"}", "structured_outputs",
         "structural_tag"},
        {"\"structured_outputs\": {\"json\": {}, \"regex\": \"a\"}", "structured_outputs",
         "at most one"},
        {"\"structured_outputs\": [1]", "structured_outputs", "object"},
        {"\"guided_choice\": []", "guided_choice", "non-empty"},
        {"\"guided_choice\": [\"a\", 1]", "guided_choice", "strings"},
        {"\"guided_choice\": [\"a\"], \"guided_regex\": \"a\"", "response_format", "at most one"},
    };
    for (size_t i = 0; i < sizeof bad_fields / sizeof *bad_fields; i++) {
        struct api_params p;
        struct api_error e;
        int rc = parse_with(&c, bad_fields[i].field, &p, &e);
        if (rc == 0) api_params_free(&p);
        if (rc != -1 || e.status != 400 || strcmp(e.param, bad_fields[i].param) ||
            !strstr(e.message, bad_fields[i].needle))
            fail_msg("%s: rc %d status %d param %s message %s", bad_fields[i].field, rc, e.status,
                     e.param, e.message);
    }
    grammar_vocab_free(c.gvocab);
}

static void test_good_completion(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    struct api_params p;
    struct api_error e;
    const char *body =
        "{\"model\": \"smol\", \"prompt\": \"Hello world\", \"temperature\": 0.5, \"top_p\": 0.9,"
        " \"top_k\": 40, \"min_p\": 0.05, \"repetition_penalty\": 1.1, \"presence_penalty\": -1,"
        " \"frequency_penalty\": 0.5, \"seed\": 42, \"n\": 3, \"stop\": [\"\\n\", \"END\"],"
        " \"logprobs\": 2, \"logit_bias\": {\"17\": -100, \"5\": 2.5}, \"stream\": true,"
        " \"stream_options\": {\"include_usage\": true}, \"user\": \"u\", \"unknown_field\": [1],"
        " \"suffix\": \"\", \"best_of\": 3, \"min_tokens\": 0, \"use_beam_search\": false}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    int32_t *ids;
    size_t n;
    char err[ERR_LEN];
    assert_int_equal(tokenizer_encode(tok, "Hello world", 11, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL,
                                      &ids, &n, err),
                     0);
    assert_int_equal(p.n_prompt, (int)n);
    assert_memory_equal(p.prompt, ids, n * sizeof *ids);
    free(ids);
    assert_int_equal(p.max_tokens, 16); /* OpenAI's completions default */
    assert_true(p.sp.temperature == 0.5f && p.sp.top_p == 0.9f && p.sp.top_k == 40);
    assert_true(p.sp.min_p == 0.05f && p.sp.repetition_penalty == 1.1f);
    assert_true(p.sp.presence_penalty == -1.0f && p.sp.frequency_penalty == 0.5f);
    assert_true(p.sp.has_seed && p.sp.seed == 42);
    assert_int_equal(p.n, 3);
    assert_int_equal(p.n_stops, 2);
    assert_string_equal(p.stops[0], "\n");
    assert_string_equal(p.stops[1], "END");
    assert_true(p.logprobs && p.top_logprobs == 2 && p.sp.logprobs && p.sp.top_logprobs == 2);
    assert_int_equal(p.sp.n_logit_bias, 2);
    assert_int_equal(p.sp.logit_bias_ids[0], 17);
    assert_true(p.sp.logit_bias[0] == -100.0f && p.sp.logit_bias_ids[1] == 5 &&
                p.sp.logit_bias[1] == 2.5f);
    assert_true(p.stream && p.include_usage);
    api_params_free(&p);

    /* token ids, an array of one string, a negative seed, defaults */
    body = "{\"prompt\": [1, 2, 3], \"max_tokens\": 61, \"seed\": -1, \"top_k\": -1}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.n_prompt, 3);
    assert_int_equal(p.prompt[2], 3);
    assert_int_equal(p.max_tokens, 61); /* exactly fills CTX */
    assert_true(p.sp.seed == UINT64_MAX && p.sp.top_k == 0);
    assert_true(p.sp.temperature == 1.0f && p.sp.top_p == 1.0f && p.sp.repetition_penalty == 1.0f);
    assert_int_equal(p.n, 1);
    api_params_free(&p);
    body = "{\"prompt\": [\"Hi\"], \"echo\": true}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    assert_true(p.echo && p.echo_len == 2 && !memcmp(p.echo_text, "Hi", 2));
    api_params_free(&p);
    body = "{\"prompt\": [[5, 6]]}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.n_prompt, 2);
    api_params_free(&p);
}

/* A list of prompts (strings or token-id arrays): each parsed, echo text for each. */
static void test_prompt_list(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    struct api_params p;
    struct api_error e;
    const char *body =
        "{\"prompt\": [\"Hi\", [5, 6, 7], \"Hello world\"], \"n\": 2, \"echo\": true, "
        "\"logprobs\": 1, \"max_tokens\": 1}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.n_prompts, 3);
    assert_int_equal(p.n, 2);
    assert_true(p.echo && p.logprobs);
    assert_true(p.echo_len == 2 && !memcmp(p.echo_text, "Hi", 2));
    assert_int_equal(p.more[0].n, 3);
    assert_int_equal(p.more[0].ids[2], 7);
    assert_non_null(p.more[0].echo_text);
    assert_true(p.more[1].echo_len == 11 && !memcmp(p.more[1].echo_text, "Hello world", 11));
    api_params_free(&p);
    /* token-id lists only, no echo: no text kept */
    body = "{\"prompt\": [[1, 2], [3]]}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.n_prompts, 2);
    assert_int_equal(p.n_prompt, 2);
    assert_int_equal(p.more[0].n, 1);
    assert_null(p.more[0].echo_text);
    api_params_free(&p);
}

/* Echo with logprobs keeps an event per prompt token and choice: past API_MAX_SCORED, 400. */
static void test_scored_tokens_bounded(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    c.max_ctx = 8192;
    struct api_params p;
    struct api_error e;
    struct sbuf b = {0};
    sbuf_adds(&b, "{\"prompt\": \"");
    for (int i = 0; i < 5000; i++) sbuf_adds(&b, "hello ");
    sbuf_adds(&b, "\", \"n\": 16, \"echo\": true, \"logprobs\": 1, \"max_tokens\": 1}");
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, b.p, b.len, &p, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "echo");
    assert_non_null(strstr(e.message, "at most 65536 prompt tokens"));
    /* without logprobs nothing is kept: the same request is fine */
    char *no_lp = strstr(b.p, ", \"logprobs\": 1");
    memmove(no_lp, no_lp + 15, strlen(no_lp + 15) + 1);
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, b.p, strlen(b.p), &p, &e), 0);
    api_params_free(&p);
    sbuf_free(&b);
}

static void test_seed_drawn(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    struct api_params p1, p2;
    struct api_error e;
    const char *body = "{\"prompt\": \"x\"}";
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p1, &e), 0);
    assert_int_equal(api_parse_generate(&c, API_COMPLETION, body, strlen(body), &p2, &e), 0);
    assert_true(p1.sp.has_seed && p2.sp.has_seed);
    assert_true(p1.sp.seed != p2.sp.seed); /* 64 random bits each */
    api_params_free(&p1);
    api_params_free(&p2);
}

static void test_good_chat(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    struct api_params p;
    struct api_error e;
    const char *body =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}],"
        " \"logprobs\": true, \"top_logprobs\": 3, \"max_completion_tokens\": 5, \"max_tokens\": "
        "9}";
    assert_int_equal(api_parse_generate(&c, API_CHAT, body, strlen(body), &p, &e), 0);
    const char *want = "<|im_start|>system\nBe "
                       "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    int32_t *ids;
    size_t n;
    char err[ERR_LEN];
    assert_int_equal(tokenizer_encode(tok, want, strlen(want), TOK_PARSE_SPECIAL, &ids, &n, err),
                     0);
    assert_int_equal(p.n_prompt, (int)n);
    assert_memory_equal(p.prompt, ids, n * sizeof *ids);
    assert_int_equal(ids[0],
                     tokenizer_find(tok, "<|im_start|>", 12)); /* a special token, not text */
    free(ids);
    assert_int_equal(p.max_tokens, 5); /* max_completion_tokens wins */
    assert_true(p.logprobs && p.top_logprobs == 3);
    api_params_free(&p);
    /* no max_tokens: the rest of the context */
    body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": "
           "false}";
    struct api_ctx big = c;
    big.max_ctx = 4096; /* SmolLM2's template adds its default system prompt */
    assert_int_equal(api_parse_generate(&big, API_CHAT, body, strlen(body), &p, &e), 0);
    assert_int_equal(p.max_tokens, 4096 - p.n_prompt);
    assert_int_equal(p.prompt[p.n_prompt - 1], 198); /* ends "<|im_end|>\n", no assistant turn */
    assert_int_equal(p.prompt[p.n_prompt - 2], tokenizer_find(tok, "<|im_end|>", 10));
    api_params_free(&p);
    /* without a chat template, chat requests are refused with the reason */
    struct api_ctx none = c;
    none.chat = NULL;
    none.chat_err = "the model has no chat template";
    assert_int_equal(api_parse_generate(&none, API_CHAT, body, strlen(body), &p, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "messages");
    assert_non_null(strstr(e.message, "no chat template"));
}

static void test_tokenize_detokenize(void **state) {
    (void)state;
    struct api_ctx c = ctx();
    struct api_error e;
    int32_t *ids;
    int n;
    const char *body = "{\"prompt\": \"Hello there\", \"add_special_tokens\": false}";
    assert_int_equal(api_parse_tokenize(&c, body, strlen(body), &ids, &n, &e), 0);
    assert_true(n >= 2);
    free(ids);
    body = "{\"tokens\": [1, 2, 3]}";
    assert_int_equal(api_parse_detokenize(&c, body, strlen(body), &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 2);
    free(ids);
}

/* ---- stop strings ---- */

struct feed_result {
    char out[512];
    int matched;
};

/* Feeds the pieces in order, checking the matcher's contract after each one. */
static void feed_all(const char *const *stops, int n_stops, const char *const *pieces, int n,
                     struct feed_result *r) {
    struct stop_matcher m;
    stop_init(&m, stops, n_stops);
    struct sbuf out = {0};
    sbuf_add(&out, "", 0);
    r->matched = -1;
    for (int i = 0; i < n; i++)
        if (stop_feed(&m, pieces[i], strlen(pieces[i]), &out)) r->matched = m.matched;
    if (r->matched < 0) stop_flush(&m, &out);
    snprintf(r->out, sizeof r->out, "%s", out.p);
    sbuf_free(&out);
    stop_free(&m);
}

static void test_stop_across_boundaries(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    const char *pieces[] = {"Hel", "lo ST", "O", "P here"};
    struct feed_result r;
    feed_all(stops, 1, pieces, 4, &r);
    assert_string_equal(r.out, "Hello ");
    assert_int_equal(r.matched, 0);
}

static void test_stop_hold_back(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    struct stop_matcher m;
    stop_init(&m, stops, 1);
    struct sbuf out = {0};
    sbuf_add(&out, "", 0);
    assert_int_equal(stop_feed(&m, "abc S", 5, &out), 0);
    assert_string_equal(out.p, "abc "); /* "S" could begin STOP */
    assert_int_equal(stop_feed(&m, "TO", 2, &out), 0);
    assert_string_equal(out.p, "abc ");
    assert_int_equal(stop_feed(&m, "x", 1, &out), 0); /* STOx: not a stop after all */
    assert_string_equal(out.p, "abc STOx");
    assert_int_equal(stop_feed(&m, "ST", 2, &out), 0);
    stop_flush(&m, &out); /* end of stream: the held text is released */
    assert_string_equal(out.p, "abc STOxST");
    sbuf_free(&out);
    stop_free(&m);
}

static void test_stop_several(void **state) {
    (void)state;
    const char *stops[] = {"world", "lo w", "\n\n"};
    const char *pieces[] = {"hel", "lo", " world"};
    struct feed_result r;
    feed_all(stops, 3, pieces, 3, &r);
    assert_string_equal(r.out, "hel"); /* "lo w" is complete before "world" */
    assert_int_equal(r.matched, 1);
    const char *p2[] = {"a\n", "\nb world"};
    feed_all(stops, 3, p2, 2, &r);
    assert_string_equal(r.out, "a");
    assert_int_equal(r.matched, 2);
    /* overlapping prefixes: "aab" inside "aaab" */
    const char *s3[] = {"aab"};
    const char *p3[] = {"a", "a", "a", "b", "zzz"};
    feed_all(s3, 1, p3, 5, &r);
    assert_string_equal(r.out, "a");
    /* a stop at the very start, and multibyte text */
    const char *s4[] = {"\xc3\xa9!"};
    const char *p4[] = {"caf", "\xc3\xa9", "!", "more"};
    feed_all(s4, 1, p4, 4, &r);
    assert_string_equal(r.out, "caf");
    const char *p5[] = {"\xc3\xa9!x"};
    feed_all(s4, 1, p5, 1, &r);
    assert_string_equal(r.out, "");
    assert_int_equal(r.matched, 0);
    /* the stop completed first wins even when a longer one started earlier and
     * would complete within the same piece */
    const char *s7[] = {"caa", "a"};
    const char *p7a[] = {"bc", "aa"}, *p7b[] = {"bcaa"}, *p7c[] = {"b", "c", "a", "a"};
    feed_all(s7, 2, p7a, 2, &r);
    assert_string_equal(r.out, "bc");
    assert_int_equal(r.matched, 1);
    feed_all(s7, 2, p7b, 1, &r);
    assert_string_equal(r.out, "bc");
    feed_all(s7, 2, p7c, 4, &r);
    assert_string_equal(r.out, "bc");
    /* two stops ending at the same byte: the longer (earlier start) one */
    const char *s8[] = {"b", "ab"};
    const char *p8[] = {"xa", "b"};
    feed_all(s8, 2, p8, 2, &r);
    assert_string_equal(r.out, "x");
    assert_int_equal(r.matched, 1);
    /* no stops: everything passes straight through */
    const char *p6[] = {"a", "b"};
    feed_all(NULL, 0, p6, 2, &r);
    assert_string_equal(r.out, "ab");
    assert_int_equal(r.matched, -1);
}

static void test_stop_after_match_releases_nothing(void **state) {
    (void)state;
    const char *stops[] = {"X"};
    struct stop_matcher m;
    stop_init(&m, stops, 1);
    struct sbuf out = {0};
    sbuf_add(&out, "", 0);
    assert_int_equal(stop_feed(&m, "abXcd", 5, &out), 1);
    assert_int_equal(stop_feed(&m, "ef", 2, &out), 1);
    stop_flush(&m, &out);
    assert_string_equal(out.p, "ab");
    sbuf_free(&out);
    stop_free(&m);
}

/* Random texts over a tiny alphabet (so stops occur and overlap), cut at random points:
 * the released text must always be a prefix of the naive answer (the text before the
 * stop that is completed first), and equal it at the end, however the text was cut. */
static void test_stop_random_vs_naive(void **state) {
    (void)state;
    uint64_t rng = 0x1234567;
#define RND() (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (unsigned)(rng >> 33))
    for (int iter = 0; iter < 3000; iter++) {
        char text[80], stopbuf[4][6];
        const char *stops[4];
        int len = 1 + (int)(RND() % 60), ns = 1 + (int)(RND() % 4);
        for (int i = 0; i < len; i++) text[i] = "abc"[RND() % 3];
        text[len] = 0;
        for (int s = 0; s < ns; s++) {
            int sl = 1 + (int)(RND() % 5);
            for (int i = 0; i < sl; i++) stopbuf[s][i] = "abc"[RND() % 3];
            stopbuf[s][sl] = 0;
            stops[s] = stopbuf[s];
        }
        /* naive: the first end position at which some stop ends; of the stops ending
         * there, the earliest start */
        size_t want = (size_t)len;
        int found = 0;
        for (int e = 1; e <= len && !found; e++)
            for (int s = 0; s < ns; s++) {
                int sl = (int)strlen(stops[s]);
                if (sl <= e && !memcmp(text + e - sl, stops[s], (size_t)sl)) {
                    if (!found || (size_t)(e - sl) < want) want = (size_t)(e - sl);
                    found = 1;
                }
            }
        struct stop_matcher m;
        stop_init(&m, stops, ns);
        struct sbuf out = {0};
        sbuf_add(&out, "", 0);
        int pos = 0, matched = 0;
        while (pos < len && !matched) {
            int k = 1 + (int)(RND() % 7);
            if (k > len - pos) k = len - pos;
            matched = stop_feed(&m, text + pos, (size_t)k, &out);
            pos += k;
            if (out.len > want || memcmp(out.p, text, out.len))
                fail_msg("iter %d: released past a stop: \"%s\" of \"%s\" (stops %s %s %s %s)",
                         iter, out.p, text, stops[0], ns > 1 ? stops[1] : "",
                         ns > 2 ? stops[2] : "", ns > 3 ? stops[3] : "");
        }
        if (!matched) stop_flush(&m, &out);
        if (out.len != want || memcmp(out.p, text, want))
            fail_msg("iter %d: got \"%s\", want %zu bytes of \"%s\"", iter, out.p, want, text);
        assert_int_equal(matched, want < (size_t)len);
        sbuf_free(&out);
        stop_free(&m);
    }
#undef RND
}

/* ---- metrics ---- */

static double value_of(const char *text, const char *line_start) {
    char want[256];
    snprintf(want, sizeof want, "\n%s", line_start);
    const char *p = strstr(text, want);
    if (!p) fail_msg("no line %s", line_start);
    return atof(p + strlen(want));
}

static void test_metrics_render(void **state) {
    (void)state;
    struct metrics *m = metrics_new();
    metrics_request(m, 200);
    metrics_request(m, 200);
    metrics_request(m, 429);
    metrics_tokens(m, 10, 5);
    metrics_tokens(m, 3, 2);
    metrics_preemption(m);
    metrics_observe(m, HIST_TTFT, 0.003);  /* <= 0.005 */
    metrics_observe(m, HIST_TTFT, 0.3);    /* <= 0.5 */
    metrics_observe(m, HIST_TTFT, 1000.0); /* +Inf only */
    metrics_observe(m, HIST_ITL, 0.02);    /* exactly a bound: counts in le="0.02" */
    struct sched_stats st = {.queued = 4,
                             .running = 7,
                             .kv_blocks_used = 100,
                             .kv_blocks_free = 924,
                             .max_ctx = 8192,
                             .draining = 0,
                             .last_step = 0};
    char *text;
    size_t len;
    assert_int_equal(metrics_render(m, &st, &text, &len), 0);
    assert_int_equal(strlen(text), len);
    assert_true(value_of(text, "tpd_requests_total{code=\"200\"} ") == 2);
    assert_true(value_of(text, "tpd_requests_total{code=\"429\"} ") == 1);
    assert_true(value_of(text, "tpd_queue_depth ") == 4);
    assert_true(value_of(text, "tpd_running_sequences ") == 7);
    assert_true(value_of(text, "tpd_kv_blocks_used ") == 100);
    assert_true(value_of(text, "tpd_kv_blocks_free ") == 924);
    assert_true(value_of(text, "tpd_prompt_tokens_total ") == 13);
    assert_true(value_of(text, "tpd_generation_tokens_total ") == 7);
    assert_true(value_of(text, "tpd_preemptions_total ") == 1);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_bucket{le=\"0.001\"} ") == 0);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_bucket{le=\"0.005\"} ") == 1);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_bucket{le=\"0.5\"} ") == 2);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_bucket{le=\"80\"} ") == 2);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_bucket{le=\"+Inf\"} ") == 3);
    assert_true(value_of(text, "tpd_time_to_first_token_seconds_count ") == 3);
    double sum = value_of(text, "tpd_time_to_first_token_seconds_sum ");
    assert_true(sum > 1000.302 && sum < 1000.304);
    assert_true(value_of(text, "tpd_inter_token_latency_seconds_bucket{le=\"0.015\"} ") == 0);
    assert_true(value_of(text, "tpd_inter_token_latency_seconds_bucket{le=\"0.02\"} ") == 1);
    assert_true(value_of(text, "tpd_e2e_request_latency_seconds_count ") == 0);
    /* every sample line belongs to a family announced with # TYPE */
    assert_non_null(strstr(text, "# TYPE tpd_time_to_first_token_seconds histogram\n"));
    assert_non_null(strstr(text, "# TYPE tpd_requests_total counter\n"));
    free(text);
    metrics_free(m);
}

int main(void) {
    const char *src = getenv("TPD_SOURCE_DIR");
    char path[4096], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    if (access(path, R_OK)) {
        fprintf(stderr, "skip: %s not found\n", path);
        return 77;
    }
    if (tokenizer_load(&tok, path, err) || chat_template_load(&chat, tok, NULL, err)) {
        fprintf(stderr, "tokenizer: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_invalid_utf8_and_nul),
        cmocka_unit_test(test_nul_escape),
        cmocka_unit_test(test_cache_and_queue_limits),
        cmocka_unit_test(test_utf8_validator),
        cmocka_unit_test(test_good_completion),
        cmocka_unit_test(test_structured_output_fields),
        cmocka_unit_test(test_seed_drawn),
        cmocka_unit_test(test_prompt_list),
        cmocka_unit_test(test_scored_tokens_bounded),
        cmocka_unit_test(test_good_chat),
        cmocka_unit_test(test_tokenize_detokenize),
        cmocka_unit_test(test_stop_across_boundaries),
        cmocka_unit_test(test_stop_hold_back),
        cmocka_unit_test(test_stop_several),
        cmocka_unit_test(test_stop_after_match_releases_nothing),
        cmocka_unit_test(test_stop_random_vs_naive),
        cmocka_unit_test(test_metrics_render),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    chat_template_free(&chat);
    tokenizer_free(tok);
    return rc;
}
