/* Encode speed: bench_tokenizer TOKENIZER TEXT_FILE [REPEATS]
 * Encodes the whole file as one text (single thread, special tokens parsed) REPEATS times
 * and prints the best MB/s and the token count. bench_tokenizer.py runs it next to HF
 * tokenizers on the same text and prints the ratio. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/err.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT_FILE [REPEATS]\n");
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 5;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "read failed\n");
        return 1;
    }
    fclose(f);
    char err[ERR_LEN];
    struct tokenizer *t;
    double t0 = clock_now();
    if (tokenizer_load(&t, argv[1], err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double load = clock_now() - t0;
    double best = 1e30;
    size_t n_ids = 0;
    for (int r = 0; r < repeats; r++) {
        int32_t *ids;
        t0 = clock_now();
        if (tokenizer_encode(t, text, (size_t)n, TOK_PARSE_SPECIAL, &ids, &n_ids, err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        double dt = clock_now() - t0;
        if (dt < best) best = dt;
        free(ids);
    }
    printf("{\"bytes\": %ld, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f, \"load_s\": "
           "%.3f}\n",
           n, n_ids, best, (double)n / best / 1e6, load);
    tokenizer_free(t);
    free(text);
    return 0;
}
