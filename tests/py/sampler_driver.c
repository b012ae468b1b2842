/* Test driver for sched/sampler (built by tests/py/test_sampler_ref.py). Reads cases from
 * stdin, all numbers whitespace-separated:
 *   n_cases
 *   per case: V n_steps
 *             temperature top_k top_p min_p repetition presence frequency seed logprobs
 * top_logprobs n_bias (id bias)...   n_prompt id... n_steps rows of V logits and per step prints
 * two lines: P p_0 ... p_{V-1}        the distribution the draw uses (sampler_probs) T token
 * logprob n_top (id logprob)...   what sampler_next returned The row passed to sampler_next is the
 * one passed to sampler_probs, which must have left it untouched; the driver checks that too. Exit
 * 1 on malformed input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sampler.h"

static int rd_int(int *x) { return scanf("%d", x) == 1 ? 0 : -1; }
static int rd_float(float *x) { return scanf("%f", x) == 1 ? 0 : -1; }

static int run_case(void) {
    int V, steps, n_bias, n_prompt;
    struct sampling_params sp = {0};
    unsigned long long seed;
    if (rd_int(&V) || rd_int(&steps) || V < 1 || steps < 0) return -1;
    if (rd_float(&sp.temperature) || rd_int(&sp.top_k) || rd_float(&sp.top_p) ||
        rd_float(&sp.min_p) || rd_float(&sp.repetition_penalty) || rd_float(&sp.presence_penalty) ||
        rd_float(&sp.frequency_penalty) || scanf("%llu", &seed) != 1 || rd_int(&sp.logprobs) ||
        rd_int(&sp.top_logprobs))
        return -1;
    sp.seed = seed;
    sp.has_seed = 1;
    if (rd_int(&n_bias) || n_bias < 0 || n_bias > 1 << 20) return -1;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n_bias + 1));
    float *bias = malloc(sizeof *bias * (size_t)(n_bias + 1));
    for (int i = 0; i < n_bias; i++)
        if (rd_int(&ids[i]) || rd_float(&bias[i])) return -1;
    sp.n_logit_bias = n_bias;
    sp.logit_bias_ids = ids;
    sp.logit_bias = bias;
    if (rd_int(&n_prompt) || n_prompt < 0 || n_prompt > 1 << 20) return -1;
    int32_t *prompt = malloc(sizeof *prompt * (size_t)(n_prompt + 1));
    for (int i = 0; i < n_prompt; i++)
        if (rd_int(&prompt[i])) return -1;
    struct sampler *s = sampler_new(&sp, V, prompt, n_prompt);
    /* the sampler keeps its own copies */
    memset(ids, 0xff, sizeof *ids * (size_t)(n_bias + 1));
    memset(prompt, 0xff, sizeof *prompt * (size_t)(n_prompt + 1));
    free(ids);
    free(bias);
    free(prompt);
    float *row = malloc(sizeof *row * (size_t)V), *copy = malloc(sizeof *copy * (size_t)V),
          *probs = malloc(sizeof *probs * (size_t)V);
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < V; i++)
            if (rd_float(&row[i])) return -1;
        memcpy(copy, row, sizeof *row * (size_t)V);
        sampler_probs(s, row, probs);
        if (memcmp(copy, row, sizeof *row * (size_t)V)) {
            fprintf(stderr, "sampler_probs left the row changed\n");
            return -1;
        }
        printf("P");
        for (int i = 0; i < V; i++) printf(" %.9g", probs[i]);
        struct token_event ev;
        int32_t tok = sampler_next(s, row, &ev);
        if (memcmp(copy, row, sizeof *row * (size_t)V) || ev.token != tok) {
            fprintf(stderr, "sampler_next left the row changed or the event wrong\n");
            return -1;
        }
        printf("\nT %d %.9g %d", tok, ev.logprob, ev.n_top);
        for (int i = 0; i < ev.n_top; i++) printf(" %d %.9g", ev.top_ids[i], ev.top_logprobs[i]);
        printf("\n");
    }
    sampler_delete(s);
    free(row);
    free(copy);
    free(probs);
    return 0;
}

int main(void) {
    int n;
    if (rd_int(&n)) return 1;
    for (int c = 0; c < n; c++) {
        if (run_case()) {
            fprintf(stderr, "case %d: malformed input\n", c);
            return 1;
        }
    }
    return 0;
}
