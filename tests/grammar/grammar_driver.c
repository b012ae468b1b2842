/* Test driver for the grammar module (tests/py/test_grammar*.py, bench/bench_grammar.py):
 *   grammar_driver TOKENIZER KIND FILE MODE [args]
 * TOKENIZER: a GGUF or tokenizer.json ("-": none, for gbnf/compile modes that need no vocabulary:
 * a 256-token vocabulary of single bytes is used). KIND: gbnf | regex | schema | schema-open
 * (objects without additionalProperties open: GRAMMAR_SCHEMA_OPEN_OBJECTS) | schema-spec (the
 * specification's reading: GRAMMAR_SCHEMA_OPEN_OBJECTS | GRAMMAR_SCHEMA_EVERY_TYPE) | json.
 * MODE:
 *   gbnf               print the GBNF the converters make of FILE
 *   compile            print "ok" or "error: ..." and the milliseconds taken
 *   vocab              print each token: id, usable (0/1), bytes in hex
 *   match FILE2        for each line of FILE2 (a text to match whole, in hex), "1" when the
 *                      grammar takes it as a complete sentence, else "0" (one line each)
 *   masks FILE2        for each line of FILE2 (a prefix in hex, accepted as bytes), the
 *                      allowed token ids: "plain ID..." then " near ID..." (the closer's
 *                      mask with need + 2 tokens left) on one line; "refused" if not taken
 *   walk SEED STEPS    a random walk through allowed tokens; one JSON line per state:
 *                      {"prefix": hex, "allowed": [ids], "can_end": 0|1}
 *   bench STEPS        mask time per step along a random walk: first a line with the
 *                      walk's costliest mask and accept (us, work units; "stopped": the
 *                      limit the matcher hit, if any), then median/p99 us (cold: first
 *                      visit of each state; warm: the same walk again; budget_far: the
 *                      closer's mask with 2^20 tokens left; budget_near: with need + 2
 *                      left, tokens that would overrun taken out; budget_force: with need
 *                      left, only tokens that lower the need; plain_again: the plain
 *                      mask timed just before them, as warm in the CPU's caches) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "server/api_grammar.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/fatal.h"
#include "util/sbuf.h"

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    struct sbuf b = {0};
    sbuf_add_stream(&b, f);
    fclose(f);
    *n = b.len;
    return b.p;
}

static enum grammar_kind kind_of(const char *k) {
    if (!strcmp(k, "gbnf")) return GRAMMAR_GBNF;
    if (!strcmp(k, "regex")) return GRAMMAR_REGEX;
    if (!strncmp(k, "schema", 6)) return GRAMMAR_JSON_SCHEMA;
    return GRAMMAR_JSON_OBJECT;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (uint8_t)s[i]);
}

/* Picks a random allowed token that is not an end token; -1 when only ends remain. */
static int32_t pick(const uint64_t *mask, int n, const uint8_t *is_end) {
    int count = 0;
    for (int i = 0; i < n; i++)
        if (((mask[i >> 6] >> (i & 63)) & 1) && !is_end[i]) count++;
    if (count == 0) return -1;
    int k = (int)(next_rand() % (uint64_t)count);
    for (int i = 0; i < n; i++)
        if (((mask[i >> 6] >> (i & 63)) & 1) && !is_end[i] && k-- == 0) return i;
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: grammar_driver TOKENIZER KIND FILE MODE [args]\n");
        return 2;
    }
    size_t len;
    char *text = read_all(argv[3], &len);
    enum grammar_kind kind = kind_of(argv[2]);
    const char *mode = argv[4];
    const unsigned reading = !strcmp(argv[2], "schema-open") ? GRAMMAR_SCHEMA_OPEN_OBJECTS
                             : !strcmp(argv[2], "schema-spec")
                                 ? GRAMMAR_SCHEMA_OPEN_OBJECTS | GRAMMAR_SCHEMA_EVERY_TYPE
                                 : 0;
    char err[ERR_LEN];
    if (!strcmp(mode, "gbnf")) {
        struct sbuf out = {0};
        int rc = 0;
        if (kind == GRAMMAR_JSON_SCHEMA)
            rc = grammar_gbnf_from_json_schema(text, len, "root", reading, &out, err);
        else if (kind == GRAMMAR_REGEX) rc = grammar_gbnf_from_regex(text, len, "root", &out, err);
        else if (kind == GRAMMAR_JSON_OBJECT) {
            grammar_gbnf_json_value("json", &out);
            sbuf_adds(&out, "root ::= json-object\n");
        } else sbuf_add(&out, text, len);
        free(text);
        if (rc < 0) {
            printf("error: %s\n", err);
            sbuf_free(&out);
            return 1;
        }
        fwrite(out.p, 1, out.len, stdout);
        sbuf_free(&out);
        return 0;
    }
    struct grammar_vocab *v;
    struct tokenizer *tok = NULL;
    int n_vocab;
    if (!strcmp(argv[1], "-")) {
        n_vocab = 257;
        const char *bytes[257];
        size_t lens[257];
        uint8_t usable[257];
        static char b[256];
        for (int i = 0; i < 256; i++) {
            b[i] = (char)i;
            bytes[i] = &b[i];
            lens[i] = 1;
            usable[i] = 1;
        }
        bytes[256] = "";
        lens[256] = 0;
        usable[256] = 0;
        int32_t eog = 256;
        v = grammar_vocab_new(n_vocab, bytes, lens, usable, &eog, 1);
    } else {
        if (tokenizer_load(&tok, argv[1], err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        v = api_grammar_vocab(tok);
        n_vocab = (int)tokenizer_n_vocab(tok);
    }
    if (!strcmp(mode, "vocab")) {
        for (int i = 0; i < n_vocab; i++) {
            size_t l = 0;
            const char *s = tok ? tokenizer_token_bytes(tok, i, &l) : NULL;
            int usable = tok ? !tokenizer_is_special(tok, i) && l > 0 && !tokenizer_is_eog(tok, i)
                             : i < 256;
            int end = tok ? tokenizer_is_eog(tok, i) : i == 256;
            printf("%d %d %d ", i, usable, end);
            if (s) hex(s, l);
            else if (!tok && i < 256) printf("%02x", i);
            printf("\n");
        }
        free(text);
        grammar_vocab_free(v);
        tokenizer_free(tok);
        return 0;
    }
    /* the checks here are about what a grammar matches: a loaded machine or a sanitizer
     * build must not turn a large schema into a compile-time refusal */
    struct grammar_limits lim = {GRAMMAR_DEFAULT_MAX_STACKS, GRAMMAR_DEFAULT_MAX_TOKEN_WORK,
                                 60000.0};
    grammar_vocab_set_limits(v, &lim);
    grammar_vocab_set_schema_reading(v, reading);
    double t0 = clock_now();
    struct grammar *g = grammar_compile(v, kind, text, len, err);
    double ms = (clock_now() - t0) * 1e3;
    if (!strcmp(mode, "compile")) {
        if (g) printf("ok %.3f\n", ms);
        else printf("error: %s\n%.3f\n", err, ms);
        grammar_unref(g);
        grammar_vocab_free(v);
        free(text);
        return g ? 0 : 1;
    }
    if (!g) {
        printf("error: %s\n", err);
        grammar_vocab_free(v);
        free(text);
        return 1;
    }
    if (!strcmp(mode, "match") || !strcmp(mode, "where")) {
        /* where: each line's count of bytes accepted before the first refused one, or -1
         * when the whole line is accepted and the grammar can end there */
        const int where = !strcmp(mode, "where");
        size_t n2;
        char *lines = read_all(argv[5], &n2);
        for (size_t a = 0; a < n2;) {
            size_t b = a;
            while (b < n2 && lines[b] != '\n') b++;
            struct grammar_matcher *m = grammar_matcher_new(g);
            size_t n = 0;
            for (size_t i = a; i + 1 < b; i += 2) {
                unsigned x;
                if (sscanf(lines + i, "%2x", &x) != 1) break;
                lines[a + n++] = (char)x;
            }
            if (where) {
                size_t k = 0;
                while (k < n && grammar_matcher_accept_bytes(m, lines + a + k, 1) == 0) k++;
                printf("%ld\n", k == n && grammar_matcher_can_end(m) ? -1L : (long)k);
            } else {
                int ok = grammar_matcher_accept_bytes(m, lines + a, n) == 0 &&
                         grammar_matcher_can_end(m);
                printf("%d\n", ok);
            }
            grammar_matcher_free(m);
            a = b + 1;
        }
        free(lines);
        free(text);
        grammar_unref(g);
        grammar_vocab_free(v);
        tokenizer_free(tok);
        return 0;
    }
    uint8_t *is_end = calloc((size_t)n_vocab, 1);
    for (int i = 0; i < n_vocab; i++)
        is_end[i] = tok ? (uint8_t)tokenizer_is_eog(tok, i) : i == 256;
    size_t words = ((size_t)n_vocab + 63) / 64;
    uint64_t *mask = calloc(words, 8);
    if (!strcmp(mode, "walk")) {
        rng ^= strtoull(argv[5], NULL, 10) * 0x9E3779B97F4A7C15ull;
        int steps = atoi(argv[6]);
        struct grammar_matcher *m = grammar_matcher_new(g);
        struct sbuf prefix = {0};
        for (int s = 0; s < steps; s++) {
            grammar_matcher_mask(m, mask);
            printf("{\"prefix\": \"");
            hex(prefix.p ? prefix.p : "", prefix.len);
            printf("\", \"can_end\": %d, \"allowed\": [", grammar_matcher_can_end(m));
            int first = 1;
            for (int i = 0; i < n_vocab; i++)
                if ((mask[i >> 6] >> (i & 63)) & 1) {
                    printf(first ? "%d" : ", %d", i);
                    first = 0;
                }
            printf("]}\n");
            int32_t t = pick(mask, n_vocab, is_end);
            if (t < 0) break;
            if (grammar_matcher_accept(m, t) < 0) {
                printf("{\"error\": \"accept refused an allowed token %d\"}\n", t);
                return 1;
            }
            size_t l;
            const char *b = tok ? tokenizer_token_bytes(tok, t, &l)
                                : (const char *)&(char){(char)t};
            if (!tok) l = 1;
            sbuf_add(&prefix, b, l);
        }
        sbuf_free(&prefix);
        grammar_matcher_free(m);
    } else if (!strcmp(mode, "masks")) {
        /* masks FILE2: for each line of FILE2 (a prefix in hex), the mask after it is accepted
         * as bytes: "plain" ids, then "near" ids (the closer's mask with need + 2 tokens
         * left); "refused" where the prefix is not taken */
        size_t n2;
        char *lines = read_all(argv[5], &n2);
        for (size_t a = 0; a < n2;) {
            size_t b = a, n = 0;
            while (b < n2 && lines[b] != '\n') b++;
            for (size_t i = a; i + 1 < b; i += 2) {
                unsigned x;
                if (sscanf(lines + i, "%2x", &x) != 1) break;
                lines[a + n++] = (char)x;
            }
            struct grammar_matcher *m = grammar_matcher_new(g);
            if (grammar_matcher_accept_bytes(m, lines + a, n) < 0) {
                printf("refused\n");
            } else {
                for (int k = 0; k < 2; k++) {
                    if (k == 0) grammar_matcher_mask(m, mask);
                    else grammar_matcher_mask_budget(m, mask, grammar_matcher_need(m) + 2);
                    printf("%s", k ? " near" : "plain");
                    for (int i = 0; i < n_vocab; i++)
                        if ((mask[i >> 6] >> (i & 63)) & 1) printf(" %d", i);
                }
                printf("\n");
            }
            grammar_matcher_free(m);
            a = b + 1;
        }
        free(lines);
    } else if (!strcmp(mode, "bench")) {
        int steps = atoi(argv[5]);
        double *cold = calloc((size_t)steps, sizeof *cold),
               *warm = calloc((size_t)steps, sizeof *warm);
        int32_t *path = calloc((size_t)steps, sizeof *path);
        int n = 0;
        double worst_us = 0, worst_acc_us = 0;
        long worst_work = 0, worst_acc_work = 0;
        struct grammar_matcher *m = grammar_matcher_new(g);
        for (; n < steps; n++) {
            double a = clock_now();
            grammar_matcher_mask(m, mask);
            cold[n] = (clock_now() - a) * 1e6;
            if (cold[n] > worst_us) worst_us = cold[n];
            if (grammar_matcher_work(m) > worst_work) worst_work = grammar_matcher_work(m);
            int32_t t = pick(mask, n_vocab, is_end);
            if (t < 0) break;
            path[n] = t;
            a = clock_now();
            grammar_matcher_accept(m, t);
            a = (clock_now() - a) * 1e6;
            if (a > worst_acc_us) worst_acc_us = a;
            if (grammar_matcher_work(m) > worst_acc_work) worst_acc_work = grammar_matcher_work(m);
        }
        const char *stopped = grammar_matcher_error(m);
        printf("{\"worst_mask_us\": %.1f, \"worst_mask_work\": %ld, \"worst_accept_us\": %.1f, "
               "\"worst_accept_work\": %ld, \"stopped\": \"%s\"}\n",
               worst_us, worst_work, worst_acc_us, worst_acc_work, stopped ? stopped : "");
        grammar_matcher_free(m);
        m = grammar_matcher_new(g);
        double acc_us = 0, *apply = calloc((size_t)steps + 1, sizeof *apply);
        double *bud[4]; /* budget far, near, force; the plain mask timed just before them */
        for (int k = 0; k < 4; k++) bud[k] = calloc((size_t)steps + 1, sizeof *bud[k]);
        float *logits = calloc((size_t)n_vocab, sizeof *logits);
        for (int i = 0; i < n; i++) {
            double a = clock_now();
            grammar_matcher_mask(m, mask);
            warm[i] = (clock_now() - a) * 1e6;
            a = clock_now();
            grammar_matcher_apply(m, logits, n_vocab); /* mask + -inf written: what a step pays */
            apply[i] = (clock_now() - a) * 1e6;
            memset(logits, 0, sizeof *logits * (size_t)n_vocab);
            a = clock_now();
            grammar_matcher_accept(m, path[i]);
            acc_us += (clock_now() - a) * 1e6;
        }
        grammar_matcher_free(m);
        /* the closer's masks, on a third pass (so that the passes above time what they did
         * before it existed) */
        m = grammar_matcher_new(g);
        for (int i = 0; i < n; i++) {
            int64_t need = grammar_matcher_need(m),
                    budgets[3] = {1 << 20, need + 2, need > 0 ? need : 1};
            double a =
                clock_now(); /* the plain mask again, as warm as the budgeted ones after it */
            grammar_matcher_mask(m, mask);
            bud[3][i] = (clock_now() - a) * 1e6;
            for (int k = 0; k < 3; k++) {
                a = clock_now();
                grammar_matcher_mask_budget(m, mask, budgets[k]);
                bud[k][i] = (clock_now() - a) * 1e6;
            }
            grammar_matcher_accept(m, path[i]);
        }
        grammar_matcher_free(m);
        double total_cold = 0;
        for (int i = 0; i < n; i++) total_cold += cold[i];
        qsort(cold, (size_t)n, sizeof *cold, cmp_d);
        qsort(warm, (size_t)n, sizeof *warm, cmp_d);
        qsort(apply, (size_t)n, sizeof *apply, cmp_d);
        for (int k = 0; k < 4; k++) qsort(bud[k], (size_t)n, sizeof *bud[k], cmp_d);
        int p99 = (int)floor(0.99 * (n - 1));
        printf("{\"vocab\": %d, \"steps\": %d, \"compile_ms\": %.3f, \"cold_median_us\": %.2f, "
               "\"cold_p99_us\": %.2f, "
               "\"cold_total_ms\": %.2f, \"warm_median_us\": %.2f, \"warm_p99_us\": %.2f, "
               "\"accept_mean_us\": %.2f, "
               "\"apply_median_us\": %.2f, \"budget_far_median_us\": %.2f, \"budget_far_p99_us\": "
               "%.2f, "
               "\"budget_near_median_us\": %.2f, \"budget_near_p99_us\": %.2f, "
               "\"budget_force_median_us\": %.2f, "
               "\"budget_force_p99_us\": %.2f, \"plain_again_median_us\": %.2f, "
               "\"plain_again_p99_us\": %.2f}\n",
               n_vocab, n, ms, n ? cold[n / 2] : 0, n ? cold[p99] : 0, total_cold / 1e3,
               n ? warm[n / 2] : 0, n ? warm[p99] : 0, n ? acc_us / n : 0, n ? apply[n / 2] : 0,
               n ? bud[0][n / 2] : 0, n ? bud[0][p99] : 0, n ? bud[1][n / 2] : 0,
               n ? bud[1][p99] : 0, n ? bud[2][n / 2] : 0, n ? bud[2][p99] : 0,
               n ? bud[3][n / 2] : 0, n ? bud[3][p99] : 0);
        free(logits);
        free(apply);
        for (int k = 0; k < 4; k++) free(bud[k]);
    }
    free(is_end);
    free(mask);
    free(text);
    grammar_unref(g);
    grammar_vocab_free(v);
    tokenizer_free(tok);
    return 0;
}
