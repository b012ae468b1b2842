// link: tpd_tokenizer
/* Fuzz target for the tokenizer: tokenizer.json loading, GGUF tokenizer metadata, encode
 * (with both fixture tokenizers), decode and streaming, and chat-template parse/render.
 * Built with -DTPD_LIBFUZZER by tests/reference/tok_fuzz.py as a libFuzzer binary (clang,
 * ASan/UBSan); built normally it is a ctest that replays a deterministic mutation run, so
 * every build exercises the same entry point. The first input byte picks the target. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "model/gguf.h"
#include "testutil.h"
#include "tokenizer/chat.h"
#include "tokenizer/detok.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"

static struct tokenizer *fixtures[2];

static void load_fixtures(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *names[2] = {"tests/data/tok/bytelevel.json", "tests/data/tok/spm.json"};
    char err[ERR_LEN];
    for (int i = 0; i < 2; i++) {
        size_t len;
        char *j = tu_read_source(names[i], &len);
        if (j && tokenizer_load_json(&fixtures[i], j, len, NULL, 0, err)) fixtures[i] = NULL;
        free(j);
    }
}

static void fuzz_encode(struct tokenizer *t, const uint8_t *d, size_t n, int flags) {
    char err[ERR_LEN];
    int32_t *ids;
    size_t nid;
    if (!t || tokenizer_encode(t, (const char *)d, n, flags, &ids, &nid, err)) return;
    char *dec;
    size_t dl;
    if (tokenizer_decode(t, ids, nid, flags & 4 ? TOK_SKIP_SPECIAL : 0, &dec, &dl, err) == 0) {
        /* the stream must reproduce the decode exactly */
        struct detok dt;
        detok_init(&dt, t, flags & 4 ? TOK_SKIP_SPECIAL : 0);
        size_t k = 0;
        for (size_t i = 0; i < nid; i++) {
            size_t ol;
            const char *o = detok_push(&dt, ids[i], &ol);
            if (!o || k + ol > dl || memcmp(dec + k, o, ol)) abort();
            k += ol;
        }
        size_t ol;
        const char *o = detok_flush(&dt, &ol);
        if (!o || k + ol != dl || memcmp(dec + k, o, ol)) abort();
        detok_free(&dt);
        free(dec);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 20)) return 0;
    load_fixtures();
    uint8_t sel = data[0];
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    char err[ERR_LEN];
    switch (sel % 5) {
    case 0: { /* tokenizer.json loading, then encode with whatever loaded */
        struct tokenizer *t;
        if (tokenizer_load_json(&t, (const char *)d, n, NULL, 0, err) == 0) {
            static const char probe[] = "Hello wörld 123 <|im_start|> \xf0\x9f\x98\x80 \xff";
            fuzz_encode(t, (const uint8_t *)probe, sizeof(probe) - 1,
                        TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL);
            tokenizer_free(t);
        }
        break;
    }
    case 1:
    case 2: /* encode with the fixture tokenizers */
        fuzz_encode(fixtures[sel % 5 - 1], d, n, sel >> 3);
        break;
    case 3: { /* chat templates: the input is the template */
        char *out;
        size_t ol;
        static const char ctx[] =
            "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
            "{\"role\": \"user\", \"content\": \"u\"}], \"add_generation_prompt\": true, "
            "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";
        if (chat_render_json((const char *)d, n, ctx, &out, &ol, err) == 0) free(out);
        break;
    }
    case 4: { /* GGUF tokenizer metadata */
        struct gguf_file *g;
        if (gguf_open_buf(&g, d, n, "fuzz.gguf", err) == 0) {
            struct tokenizer *t;
            if (tokenizer_load_gguf(&t, g, err) == 0) {
                static const char probe[] = "Hello world \xe2\x96\x81 <s> 42";
                fuzz_encode(t, (const uint8_t *)probe, sizeof(probe) - 1,
                            TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL);
                tokenizer_free(t);
            }
            gguf_close(g);
        }
        break;
    }
    }
    return 0;
}

#ifndef TPD_LIBFUZZER
#include <cmocka.h>

/* Deterministic stand-in for a fuzzing session: seeds (fixtures, templates, texts) under
 * random byte mutations, splices and truncations. */
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void mutate_and_run(uint8_t sel, const char *seed, size_t len, int rounds) {
    uint8_t *buf = malloc(len + 65);
    for (int r = 0; r < rounds; r++) {
        buf[0] = sel;
        memcpy(buf + 1, seed, len);
        size_t n = len;
        int edits = 1 + (int)(next() % 8);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = next() % n;
            switch (next() % 4) {
            case 0: buf[1 + at] = (uint8_t)next(); break;
            case 1: n = at; break;
            case 2: buf[1 + at] = "{}[]\",:\\<|%#"[next() % 13]; break;
            case 3:
                if (n < len + 64) {
                    memmove(buf + 2 + at, buf + 1 + at, n - at);
                    buf[1 + at] = (uint8_t)next();
                    n++;
                }
                break;
            }
        }
        LLVMFuzzerTestOneInput(buf, n + 1);
    }
    free(buf);
}

static void test_fuzz_replay(void **state) {
    (void)state;
    size_t len;
    char *j = tu_read_source("tests/data/tok/spm.json", &len);
    assert_non_null(j);
    mutate_and_run(0, j, len, 40);
    free(j);
    j = tu_read_source("tests/data/tok/templates.json", &len);
    assert_non_null(j);
    mutate_and_run(
        3, "{% for m in messages %}{{ m.role | upper }}{% if loop.last %}!{% endif %}{% endfor %}",
        77, 3000);
    free(j);
    static const char *const texts[] = {"Hello <|im_start|> world 123",
                                        "\xf0\x9f\x98\x80\xe2\x82 x", "  \t\n\n a's",
                                        "<s>\xe2\x96\x81</s>"};
    for (int i = 0; i < 4; i++) {
        mutate_and_run((uint8_t)(1 + 8 * i), texts[i], strlen(texts[i]), 2000);
        mutate_and_run((uint8_t)(2 + 8 * i), texts[i], strlen(texts[i]), 2000);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fuzz_replay)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < 2; i++) tokenizer_free(fixtures[i]);
    return rc;
}
#endif
