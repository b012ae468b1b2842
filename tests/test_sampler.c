// link: tpd_daemon
/* sched/sampler: greedy and ties, seeds, top-k = greedy, logit_bias bans and forces,
 * penalties against hand-computed logits, top-k / top-p / min-p kept sets against sorts
 * written here (also on a 150k vocabulary, where the quickselect paths run), logprobs,
 * and the empirical distribution of 100k draws against softmax (chi-square).
 * Logit candidates (util/logit_cand.h): selection against a sort written here, merging of
 * vocabulary shards' lists against selection over the whole row, which requests are light,
 * and a light sampler fed each row's candidates giving the very tokens (same seed, same
 * draws) as one fed the whole row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sampler.h"
#include "util/logit_cand.h"

#define BIG_V 151936

static uint64_t lcg_state = 12345;
static double urand(void) { /* test-local generator, independent of the sampler's */
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}

static void random_logits(float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] = (float)((urand() * 2 - 1) * scale);
}

static struct sampling_params params(float temperature) {
    return (struct sampling_params){
        .temperature = temperature, .top_p = 1, .repetition_penalty = 1, .seed = 7, .has_seed = 1};
}

/* softmax of x / T in double */
static void softmax(const float *x, int n, double T, double *p) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) mx = fmax(mx, x[i] / T);
    for (int i = 0; i < n; i++) s += p[i] = exp(x[i] / T - mx);
    for (int i = 0; i < n; i++) p[i] /= s;
}

static void test_greedy(void **state) {
    (void)state;
    enum { V = 1000 };
    float x[V];
    struct sampling_params sp = params(0);
    struct sampler *s = sampler_new(&sp, V, NULL, 0);
    for (int t = 0; t < 50; t++) {
        random_logits(x, V, 10);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (x[i] > x[best]) best = i;
        assert_int_equal(sampler_next(s, x, NULL), best);
    }
    /* ties: the lowest id */
    for (int i = 0; i < V; i++) x[i] = 0;
    x[700] = x[300] = x[999] = 5;
    assert_int_equal(sampler_next(s, x, NULL), 300);
    sampler_delete(s);
}

static void run_seq(uint64_t seed, float T, int top_k, float top_p, int n, int32_t *out) {
    enum { V = 500 };
    float x[V];
    struct sampling_params sp = params(T);
    sp.seed = seed;
    sp.top_k = top_k;
    sp.top_p = top_p;
    struct sampler *s = sampler_new(&sp, V, NULL, 0);
    lcg_state = 99; /* same logits every run */
    for (int t = 0; t < n; t++) {
        random_logits(x, V, 3);
        out[t] = sampler_next(s, x, NULL);
    }
    sampler_delete(s);
}

static void test_seed(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N], c[N];
    float Ts[] = {1, 0.7f, 1.5f};
    for (int k = 0; k < 3; k++) {
        run_seq(42, Ts[k], k == 1 ? 50 : 0, k == 2 ? 0.9f : 1, N, a);
        run_seq(42, Ts[k], k == 1 ? 50 : 0, k == 2 ? 0.9f : 1, N, b);
        run_seq(43, Ts[k], k == 1 ? 50 : 0, k == 2 ? 0.9f : 1, N, c);
        assert_memory_equal(a, b, sizeof a);
        int diff = 0;
        for (int i = 0; i < N; i++) diff += a[i] != c[i];
        assert_true(diff > N / 2); /* near-flat logits: two seeds rarely agree */
    }
}

static void test_topk1_is_greedy(void **state) {
    (void)state;
    enum { V = 2000 };
    float x[V];
    struct sampling_params sp = params(1.3f);
    sp.top_k = 1;
    struct sampler *s = sampler_new(&sp, V, NULL, 0);
    for (int t = 0; t < 100; t++) {
        random_logits(x, V, 2);
        if (t % 10 == 0) x[t] = x[t + 500] = 10; /* a tie at the top: lower id */
        assert_int_equal(sampler_next(s, x, NULL), sampler_argmax(x, V));
    }
    sampler_delete(s);
}

static void test_logit_bias(void **state) {
    (void)state;
    enum { V = 64 };
    float x[V];
    random_logits(x, V, 1);
    x[10] = 8;                           /* the clear favourite */
    int32_t ids[] = {10, 33, -5, V + 3}; /* out-of-range ids are ignored */
    float bias[] = {-100, 0, 50, 50};
    struct sampling_params sp = params(1);
    sp.n_logit_bias = 4;
    sp.logit_bias_ids = ids;
    sp.logit_bias = bias;
    struct sampler *s = sampler_new(&sp, V, NULL, 0);
    for (int t = 0; t < 20000; t++) assert_int_not_equal(sampler_next(s, x, NULL), 10);
    sampler_delete(s);
    sp.temperature = 0;
    s = sampler_new(&sp, V, NULL, 0);
    assert_int_not_equal(sampler_next(s, x, NULL), 10);
    sampler_delete(s);

    bias[0] = 0;
    bias[1] = 100; /* forces 33 */
    for (int greedy = 0; greedy < 2; greedy++) {
        sp.temperature = greedy ? 0 : 1;
        s = sampler_new(&sp, V, NULL, 0);
        for (int t = 0; t < 2000; t++) assert_int_equal(sampler_next(s, x, NULL), 33);
        sampler_delete(s);
    }
    /* the row is restored after the call */
    float y[V];
    memcpy(y, x, sizeof x);
    s = sampler_new(&sp, V, NULL, 0);
    sampler_next(s, x, NULL);
    assert_memory_equal(x, y, sizeof x);
    sampler_delete(s);
}

/* Drives s to emit `tok` by a row where it dominates every other id by 1000 nats. */
static void emit(struct sampler *s, int V, int tok) {
    float *x = calloc((size_t)V, sizeof *x);
    x[tok] = 1000;
    assert_int_equal(sampler_next(s, x, NULL), tok);
    free(x);
}

static void test_penalties(void **state) {
    (void)state;
    enum { V = 12 };
    const float rep = 1.7f, pres = 0.4f, freq = 0.3f;
    int32_t prompt[] = {1, 3, 3, 9};
    int outs[] = {2, 2, 5, 9, 2};
    float x[V] = {0.5f, 2.0f, -1.0f, -0.25f, 1.5f, 3.0f, 0.0f, -2.0f, 1.0f, 0.75f, -0.5f, 0.1f};
    for (int mode = 0; mode < 4; mode++) {
        struct sampling_params sp = params(1);
        if (mode == 0 || mode == 3) sp.repetition_penalty = rep;
        if (mode == 1 || mode == 3) sp.presence_penalty = pres;
        if (mode == 2 || mode == 3) sp.frequency_penalty = freq;
        struct sampler *s = sampler_new(&sp, V, prompt, 4);
        for (int i = 0; i < 5; i++) emit(s, V, outs[i]);
        /* expected logits, by hand */
        float want[V];
        for (int id = 0; id < V; id++) {
            int in_prompt = 0, count = 0;
            for (int i = 0; i < 4; i++) in_prompt |= prompt[i] == id;
            for (int i = 0; i < 5; i++) count += outs[i] == id;
            float l = x[id];
            if (in_prompt || count)
                l = l > 0 ? l / sp.repetition_penalty : l * sp.repetition_penalty;
            l -= sp.frequency_penalty * count + sp.presence_penalty * (count > 0);
            want[id] = l;
        }
        double pw[V];
        float pg[V], row[V];
        softmax(want, V, 1, pw);
        memcpy(row, x, sizeof x);
        sampler_probs(s, row, pg);
        for (int id = 0; id < V; id++) assert_float_equal(pg[id], pw[id], 1e-6);
        /* a changed value is visible in the ratios, i.e. the test could fail */
        if (mode == 0) assert_float_equal(log(pg[5] / pg[0]), (3.0 / rep) - 0.5, 1e-5);
        if (mode == 2) assert_float_equal(log(pg[2] / pg[0]), -1.0 - 3 * freq - 0.5, 1e-5);
        sampler_delete(s);
    }
    /* greedy sees the penalties: 5 leads by 1, presence 1.5 pushes it below 1 (id 1) */
    struct sampling_params sp = params(0);
    sp.presence_penalty = 1.5f;
    struct sampler *s = sampler_new(&sp, V, prompt, 4);
    float row[V];
    memcpy(row, x, sizeof x);
    assert_int_equal(sampler_next(s, row, NULL), 5);
    assert_int_equal(sampler_next(s, row, NULL), 1);
    sampler_delete(s);
}

/* The kept set by sorting: ids in order (prob desc, id asc), then the cuts. */
static const double *sort_base;
static int by_prob(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_base[i] != sort_base[j]) return sort_base[i] > sort_base[j] ? -1 : 1;
    return i - j;
}

static void kept_by_sort(const float *x, int V, double T, int top_k, double top_p, double min_p,
                         char *keep) {
    double *p = malloc(sizeof *p * (size_t)V);
    int *ord = malloc(sizeof *ord * (size_t)V);
    softmax(x, V, T, p);
    for (int i = 0; i < V; i++) ord[i] = i;
    sort_base = p;
    qsort(ord, (size_t)V, sizeof *ord, by_prob);
    int n = top_k > 0 && top_k < V ? top_k : V, m = 0;
    double pmax = p[ord[0]], mass = 0, acc = 0;
    for (int i = 0; i < n; i++)
        if (p[ord[i]] >= min_p * pmax) ord[m++] = ord[i];
    for (int i = 0; i < m; i++) mass += p[ord[i]];
    memset(keep, 0, (size_t)V);
    for (int i = 0; i < m; i++) {
        keep[ord[i]] = 1;
        acc += p[ord[i]];
        if (acc >= top_p * mass) break;
    }
    free(p);
    free(ord);
}

static void test_filters_exclude(void **state) {
    (void)state;
    enum { V = 40, DRAWS = 20000 };
    float x[V];
    char keep[V];
    int seen[V];
    struct {
        float T, top_p, min_p;
        int top_k;
    } cases[] = {{1, 0.5f, 0, 0},
                 {1, 1, 0.2f, 0},
                 {0.8f, 0.9f, 0.05f, 0},
                 {1.2f, 0.7f, 0, 10},
                 {1, 1, 0.1f, 6}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        random_logits(x, V, 3);
        struct sampling_params sp = params(cases[c].T);
        sp.top_p = cases[c].top_p;
        sp.min_p = cases[c].min_p;
        sp.top_k = cases[c].top_k;
        sp.seed = c;
        kept_by_sort(x, V, cases[c].T, sp.top_k, sp.top_p, sp.min_p, keep);
        int n_keep = 0;
        for (int i = 0; i < V; i++) n_keep += keep[i];
        assert_true(n_keep > 1 && n_keep < V); /* the case filters something, keeps a choice */
        memset(seen, 0, sizeof seen);
        struct sampler *s = sampler_new(&sp, V, NULL, 0);
        for (int t = 0; t < DRAWS; t++) {
            int tok = sampler_next(s, x, NULL);
            assert_true(tok >= 0 && tok < V);
            if (!keep[tok]) fail_msg("case %zu drew excluded token %d", c, tok);
            seen[tok]++;
        }
        sampler_delete(s);
    }
}

/* Chi-square of counts against probabilities; the 1e-6 tail for up to 40 dof is < 100. */
static double chi_square(const int *count, const double *p, int V, int n) {
    double chi = 0;
    for (int i = 0; i < V; i++) {
        double e = p[i] * n;
        if (e > 0) chi += (count[i] - e) * (count[i] - e) / e;
        else assert_int_equal(count[i], 0);
    }
    return chi;
}

static void test_distribution(void **state) {
    (void)state;
    enum { V = 10, N = 100000 };
    float x[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.7f, 0.3f, -2.0f};
    double p[V];
    int count[V];
    /* temperature 1, no filters: softmax */
    struct sampling_params sp = params(1);
    struct sampler *s = sampler_new(&sp, V, NULL, 0);
    memset(count, 0, sizeof count);
    for (int t = 0; t < N; t++) count[sampler_next(s, x, NULL)]++;
    sampler_delete(s);
    softmax(x, V, 1, p);
    double chi = chi_square(count, p, V, N);
    print_message("chi-square T=1: %.2f (9 dof)\n", chi);
    assert_true(chi < 45); /* p < 1e-6 at 9 dof */
    for (int i = 0; i < V; i++)
        assert_true(fabs(count[i] - p[i] * N) <= 5 * sqrt(N * p[i] * (1 - p[i])));

    /* temperature 0.6 with top_k 6 and top_p 0.85: renormalised softmax of the kept set */
    sp = params(0.6f);
    sp.top_k = 6;
    sp.top_p = 0.85f;
    sp.seed = 1234;
    char keep[V];
    kept_by_sort(x, V, 0.6, 6, 0.85, 0, keep);
    softmax(x, V, 0.6, p);
    double mass = 0;
    for (int i = 0; i < V; i++) mass += p[i] *= keep[i];
    for (int i = 0; i < V; i++) p[i] /= mass;
    s = sampler_new(&sp, V, NULL, 0);
    memset(count, 0, sizeof count);
    for (int t = 0; t < N; t++) count[sampler_next(s, x, NULL)]++;
    sampler_delete(s);
    chi = chi_square(count, p, V, N);
    print_message("chi-square T=0.6 top_k=6 top_p=0.85: %.2f\n", chi);
    assert_true(chi < 45);
}

static void test_logprobs(void **state) {
    (void)state;
    enum { V = 300 };
    float x[V];
    random_logits(x, V, 5);
    x[17] = x[18] = 6; /* a tie among the top: 17 first */
    double p[V];
    softmax(x, V, 1, p);
    struct sampling_params sp = params(0.9f);
    sp.logprobs = 1;
    sp.top_logprobs = 5;
    sp.repetition_penalty = 2; /* processing must not leak into the logprobs */
    sp.logit_bias_ids = (int32_t[]){17};
    sp.logit_bias = (float[]){-3};
    sp.n_logit_bias = 1;
    int32_t prompt[] = {18, 4};
    struct sampler *s = sampler_new(&sp, V, prompt, 2);
    struct token_event ev;
    for (int t = 0; t < 20; t++) {
        int tok = sampler_next(s, x, &ev);
        assert_int_equal(ev.token, tok);
        assert_float_equal(ev.logprob, log(p[tok]), 1e-5);
        assert_int_equal(ev.n_top, 5);
        assert_int_equal(ev.top_ids[0], 17);
        assert_int_equal(ev.top_ids[1], 18);
        for (int i = 0; i < 5; i++) {
            assert_float_equal(ev.top_logprobs[i], log(p[ev.top_ids[i]]), 1e-5);
            if (i) assert_true(ev.top_logprobs[i] <= ev.top_logprobs[i - 1]);
            for (int j = 0; j < V; j++) /* nothing outside the list beats its last */
                if (p[j] > p[ev.top_ids[4]]) {
                    int in = 0;
                    for (int k = 0; k < 5; k++) in |= ev.top_ids[k] == j;
                    assert_true(in);
                }
        }
    }
    sampler_delete(s);
    /* not asked: nothing filled */
    sp.logprobs = 0;
    sp.top_logprobs = 0;
    s = sampler_new(&sp, V, NULL, 0);
    sampler_next(s, x, &ev);
    assert_int_equal(ev.n_top, 0);
    assert_true(ev.logprob == 0);
    sampler_delete(s);
}

/* On a real-size vocabulary the quickselect paths (top_k > 32, top_p) must give exactly
 * the sets a full sort gives; also prints the time per call. */
static void test_big_vocab(void **state) {
    (void)state;
    float *x = malloc(sizeof *x * BIG_V), *pr = malloc(sizeof *pr * BIG_V);
    char *keep = malloc(BIG_V);
    struct {
        float T, top_p, min_p;
        int top_k, logprobs;
        const char *name;
    } cases[] = {{0, 1, 0, 0, 0, "greedy"},
                 {1, 1, 0, 0, 0, "T=1"},
                 {0.8f, 1, 0, 40, 0, "top_k=40"},
                 {0.8f, 1, 0, 1000, 0, "top_k=1000"},
                 {1, 0.95f, 0, 0, 0, "top_p=0.95"},
                 {1, 0.9f, 0, 50, 0, "top_k=50 top_p=0.9"},
                 {1, 0.95f, 0.001f, 0, 0, "top_p=0.95 min_p=0.001"},
                 {1, 1, 0, 0, 1, "T=1 top_logprobs=20"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        /* a peaked row, like a model's: a few large logits over a noisy floor */
        random_logits(x, BIG_V, 4);
        for (int i = 0; i < 300; i++) x[(int)(urand() * BIG_V)] += 8 + (float)urand() * 6;
        struct sampling_params sp = params(cases[c].T);
        sp.top_p = cases[c].top_p;
        sp.min_p = cases[c].min_p;
        sp.top_k = cases[c].top_k;
        sp.top_logprobs = cases[c].logprobs ? 20 : 0;
        sp.logprobs = cases[c].logprobs;
        struct sampler *s = sampler_new(&sp, BIG_V, NULL, 0);
        if (cases[c].T > 0) {
            kept_by_sort(x, BIG_V, cases[c].T, sp.top_k, sp.top_p, sp.min_p, keep);
            sampler_probs(s, x, pr);
            int n_keep = 0;
            for (int i = 0; i < BIG_V; i++) {
                n_keep += keep[i];
                if ((pr[i] > 0) != keep[i])
                    fail_msg("%s: token %d kept %d, prob %g", cases[c].name, i, keep[i], pr[i]);
            }
            assert_true(n_keep > 1);
        }
        struct token_event ev;
        int reps = 200;
        struct timespec t0, t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (int r = 0; r < reps; r++) sampler_next(s, x, &ev);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
                    1e3 / reps;
        print_message("V=%d %-24s %8.1f us/token\n", BIG_V, cases[c].name, us);
        sampler_delete(s);
    }
    free(x);
    free(pr);
    free(keep);
}

static void test_edges(void **state) {
    (void)state;
    struct sampling_params sp = params(1);
    assert_null(sampler_new(&sp, 0, NULL, 0));
    sampler_delete(NULL);
    /* vocabulary of one; rows with -inf entries never pick them */
    float one = 3;
    struct sampler *s = sampler_new(&sp, 1, NULL, 0);
    assert_int_equal(sampler_next(s, &one, NULL), 0);
    sampler_delete(s);
    float x[5] = {-INFINITY, 0, -INFINITY, 1, -INFINITY};
    sp.top_p = 0.999f;
    s = sampler_new(&sp, 5, NULL, 0);
    for (int t = 0; t < 1000; t++) {
        int tok = sampler_next(s, x, NULL);
        assert_true(tok == 1 || tok == 3);
    }
    sampler_delete(s);
    /* many distinct output ids grow the count table and its restore list */
    sp = params(1);
    sp.frequency_penalty = 0.01f;
    sp.repetition_penalty = 1.1f;
    enum { V = 5000 };
    float *row = malloc(sizeof *row * V);
    int32_t prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = (i * 37) % V;
    s = sampler_new(&sp, V, prompt, 300);
    for (int t = 0; t < 3000; t++) {
        random_logits(row, V, 0.1f);
        float copy0 = row[0];
        int tok = sampler_next(s, row, NULL);
        assert_true(tok >= 0 && tok < V);
        assert_true(row[0] == copy0);
    }
    sampler_delete(s);
    free(row);
}

/* The order of util/logit_cand.h, for qsort; NaN entries are not listed. */
static int cand_order(const void *a, const void *b) {
    const struct logit_cand *x = a, *y = b;
    return logit_cand_before(x->v, x->id, y->v, y->id)
               ? -1
               : logit_cand_before(y->v, y->id, x->v, x->id);
}

/* Rows that stress the order: few distinct levels (ties everywhere), both zeros, NaN,
 * infinities, or plain random values. */
static void tricky_row(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        double u = urand();
        switch (kind) {
        case 0: x[i] = (float)((u * 2 - 1) * 8); break;
        case 1: x[i] = (float)(int)(u * 4); break;    /* 4 levels */
        case 2: x[i] = u < 0.5 ? 0.0f : -0.0f; break; /* all equal */
        case 3: x[i] = u < 0.3 ? NAN : u < 0.5 ? -INFINITY : u < 0.52 ? INFINITY : (float)u; break;
        default: x[i] = u < 0.97 ? NAN : (float)u; break; /* mostly NaN */
        }
    }
}

static void test_cands_select_merge(void **state) {
    (void)state;
    const int sizes[] = {1, 5, 64, 65, 1000, 49152};
    const int ks[] = {1, 2, 40, 64};
    float *x = malloc(sizeof *x * 49152);
    struct logit_cand *ref = malloc(sizeof *ref * 49152), got[LOGIT_CANDS_MAX],
                      merged[LOGIT_CANDS_MAX];
    struct logit_cand *lists = malloc(sizeof *lists * 4 * LOGIT_CANDS_MAX);
    int cases = 0;
    for (unsigned si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (unsigned ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (int kind = 0; kind < 5; kind++) {
                const int n = sizes[si], k = ks[ki];
                tricky_row(x, n, kind);
                int m = 0;
                for (int i = 0; i < n; i++)
                    if (x[i] == x[i]) ref[m++] = (struct logit_cand){x[i], 100 + i};
                qsort(ref, (size_t)m, sizeof *ref, cand_order);
                logit_cands_select(got, x, n, 100, k);
                for (int j = 0; j < k; j++) {
                    struct logit_cand want = j < m ? ref[j] : (struct logit_cand){-INFINITY, -1};
                    assert_int_equal(got[j].id, want.id);
                    assert_memory_equal(&got[j].v, &want.v, sizeof want.v);
                }
                /* the row cut into 1..4 shards (uneven), each listing its best k: merged, the same
                 */
                for (int parts = 1; parts <= 4; parts++) {
                    for (int r = 0; r < parts; r++) {
                        int v0 = (int)((int64_t)n * r / parts),
                            v1 = (int)((int64_t)n * (r + 1) / parts);
                        if (v1 - v0 < 1) { /* an empty shard lists padding only */
                            for (int j = 0; j < k; j++)
                                lists[r * k + j] = (struct logit_cand){-INFINITY, -1};
                            continue;
                        }
                        logit_cands_select(lists + r * k, x + v0, v1 - v0, 100 + v0, k);
                    }
                    const struct logit_cand *heads[4] = {lists, lists + k, lists + 2 * k,
                                                         lists + 3 * k};
                    logit_cands_merge(merged, heads, parts, k);
                    assert_memory_equal(merged, got, sizeof *got * (size_t)k);
                }
                cases++;
            }
    printf("candidate selection and shard merging: %d rows, each cut 1-4 ways\n", cases);
    free(x);
    free(ref);
    free(lists);
}

static void test_light(void **state) {
    (void)state;
    enum { V = 1000 };
    struct {
        struct sampling_params sp;
        int light;
    } cases[16];
    int n = 0;
    struct sampling_params sp = params(0);
    cases[n++] = (typeof(cases[0])){sp, 1}; /* greedy */
    sp = params(1);
    cases[n++] = (typeof(cases[0])){sp, 0}; /* the whole distribution */
    sp.top_k = 64;
    cases[n++] = (typeof(cases[0])){sp, 1};
    sp.top_p = 0.5f;
    sp.min_p = 0.1f;
    cases[n++] = (typeof(cases[0])){sp, 1}; /* top_p and min_p act inside the top_k */
    sp.top_k = 65;
    cases[n++] = (typeof(cases[0])){sp, 0};
    sp = params(0);
    sp.repetition_penalty = 1.1f;
    cases[n++] = (typeof(cases[0])){sp, 0}; /* penalties can lift a token from outside the list */
    sp = params(0);
    sp.presence_penalty = -1;
    cases[n++] = (typeof(cases[0])){sp, 0};
    sp = params(0);
    sp.logprobs = 1;
    cases[n++] = (typeof(cases[0])){sp, 0}; /* logprobs need the whole row's normaliser */
    sp = params(0);
    sp.top_logprobs = 2;
    cases[n++] = (typeof(cases[0])){sp, 0};
    int32_t bias_id = 3;
    float bias = 5;
    sp = params(0);
    sp.n_logit_bias = 1;
    sp.logit_bias_ids = &bias_id;
    sp.logit_bias = &bias;
    cases[n++] = (typeof(cases[0])){sp, 0};
    for (int i = 0; i < n; i++) {
        struct sampler *s = sampler_new(&cases[i].sp, V, NULL, 0);
        assert_int_equal(sampler_light(s, 64), cases[i].light);
        if (cases[i].light) assert_int_equal(sampler_light(s, 0), 0);
        sampler_delete(s);
    }
    struct sampling_params tiny = params(1);
    tiny.top_k = 8;
    struct sampler *s = sampler_new(&tiny, 8, NULL,
                                    0); /* top_k the whole vocabulary: not a candidate list */
    assert_int_equal(sampler_light(s, 64), 0);
    sampler_delete(s);
}

/* A light sampler fed each row's best 64 candidates draws exactly the tokens of one fed the
 * whole row, with the same seed: greedy, top_k with temperature, top_p and min_p inside
 * top_k; on rows with ties; and verification of drafts the same way. */
static void test_cands_same_tokens(void **state) {
    (void)state;
    enum { V = 3000, STEPS = 1500, K = LOGIT_CANDS_MAX };
    struct sampling_params ps[8];
    int n = 0;
    ps[n++] = params(0);
    for (int i = 0; i < 5; i++) {
        struct sampling_params sp = params(i == 0 ? 0.5f : i == 1 ? 1.0f : 1.7f);
        sp.top_k = (int[]){1, 5, 40, 64, 64}[i];
        if (i == 3) sp.top_p = 0.9f;
        if (i == 4) sp.min_p = 0.05f;
        sp.seed = 1000 + (uint64_t)i;
        ps[n++] = sp;
    }
    float *row = malloc(sizeof *row * V);
    struct logit_cand c[K];
    long drawn = 0, differ_from_greedy = 0;
    for (int i = 0; i < n; i++) {
        struct sampler *full = sampler_new(&ps[i], V, NULL, 0),
                       *light = sampler_new(&ps[i], V, NULL, 0);
        assert_true(sampler_light(light, K));
        for (int t = 0; t < STEPS; t++) {
            /* every third row: four levels, ties everywhere; every seventh: NaN and infinities */
            tricky_row(row, V, t % 7 == 6 ? 3 : t % 3 == 2 ? 1 : 0);
            logit_cands_select(c, row, V, 0, K);
            struct token_event ea, eb;
            int32_t a, b;
            if (t % 5 == 4) { /* verifying a draft: the ordinary draw, accepted when it hits */
                int32_t draft = c[t % 3].id;
                int oka, okb;
                a = sampler_verify(full, row, draft, NULL, &oka, &ea);
                b = sampler_verify_cands(light, c, K, draft, &okb, &eb);
                assert_int_equal(oka, okb);
            } else {
                a = sampler_next(full, row, &ea);
                b = sampler_next_cands(light, c, K, &eb);
            }
            assert_int_equal(a, b);
            assert_int_equal(ea.token, eb.token);
            differ_from_greedy += a != c[0].id;
            drawn++;
        }
        sampler_delete(full);
        sampler_delete(light);
    }
    printf("light sampling over candidates: %ld tokens equal to whole-row sampling (%ld not the "
           "argmax)\n",
           drawn, differ_from_greedy);
    assert_true(differ_from_greedy > drawn / 10); /* the draws did sample */
    free(row);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_topk1_is_greedy),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_filters_exclude),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_big_vocab),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_cands_select_merge),
        cmocka_unit_test(test_light),
        cmocka_unit_test(test_cands_same_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
