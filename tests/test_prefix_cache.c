// link: tpd_testutil_sched
/* Automatic prefix caching, the scheduler over the real SmolLM2 model at tp 1 (tp 2 and 3
 * and the daemon's API: tests/py/test_prefix_cache.py):
 * - greedy output with the cache on equals output with it off, for 32 requests sharing
 *   prefixes in every pattern (identical prompts, a shared system prompt with different
 *   questions, multi-turn conversations, a prefix ending mid-block, requests arriving
 *   together with the same new prefix), with a roomy cache and with one so small that
 *   sequences are preempted and cached blocks evicted;
 * - each request is told exactly the prompt tokens the chain of cached blocks covers, and
 *   the metrics count exactly the rest as computed;
 * - a request whose 2,000-token prefix (608 under the sanitizers) is cached reaches its
 *   first token in at most 25% of the time the uncached request took (both measured here,
 *   one after the other), and only its new tokens are prefilled.
 * Every block comes back after each run. Skipped when the model has not been fetched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm/comm.h"
#include "parallel/engine.h"
#include "sched/metrics.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "testutil_sched.h"
#include "util/clock.h"

#define BS 16
#define N_REQ 32
#define MAX_TOK 10
#define MAX_PROMPT 160

static struct comm g_comm;
static char g_model[4096];

static void run_open(struct sched_run *r, int kv_tokens, int max_ctx, int step_tokens,
                     int caching) {
    struct engine_opts eo = {.model_path = g_model,
                             .threads = 2,
                             .kv_type = DT_F16,
                             .block_size = BS,
                             .n_blocks = kv_tokens / BS,
                             .max_ctx = max_ctx};
    struct sched_opts so = {
        .max_running = 32, .max_queue = 64, .step_tokens = step_tokens, .prefix_caching = caching};
    sched_run_open(r, &g_comm, &eo, &so);
}

static void drain(struct sched_run *r) { sched_run_drain(r, 100000); }

/* The value of one counter or gauge in the metrics text. */
static double metric(struct sched_run *r, const char *name) {
    struct sched_stats st;
    sched_stats(r->s, &st);
    char *text;
    size_t len;
    assert_int_equal(metrics_render(r->m, &st, &text, &len), 0);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    assert_non_null(p);
    double v = atof(p + strlen(key));
    free(text);
    return v;
}

static void fill(int32_t *t, int n, unsigned seed) {
    for (int k = 0; k < n; k++)
        t[k] = (int32_t)(1 + (seed * 2654435761u + (unsigned)k * 40503u) % 49000u);
}

/* The 32 prompts and the order they arrive in. Multi-turn prompts are built from the
 * previous turn's output, so they are made when their turn comes. */
struct pattern {
    int32_t prompt[N_REQ][MAX_PROMPT];
    int n[N_REQ];
    int expect_cached[N_REQ]; /* with a roomy cache; -1: not known in advance */
};

static struct gen_request *submit(struct sched_run *r, const int32_t *prompt, int n, int id,
                                  int max_tokens) {
    struct gen_request *q = req_new();
    q->id = (uint64_t)id + 1;
    q->n_prompt = n;
    q->prompt = malloc(sizeof(int32_t) * (size_t)n);
    memcpy(q->prompt, prompt, sizeof(int32_t) * (size_t)n);
    q->max_tokens = max_tokens;
    q->ignore_eos = 1;
    char err[512];
    assert_int_equal(sched_submit(r->s, q, err), SUBMIT_OK);
    return q;
}

static int full_blocks_before_last(int n) { return (n - 1) / BS * BS; }

/* Runs the 32 requests; out: their tokens, cached: what each was told came from the cache. */
static void run_patterns(struct sched_run *r, int32_t out[N_REQ][MAX_TOK], int cached[N_REQ],
                         int expect[N_REQ], long *prompt_total) {
    static struct pattern p;
    memset(&p, 0, sizeof p);
    struct gen_request *q[N_REQ] = {0};
    int32_t sys[48], mid[37], fresh[70];
    fill(sys, 48, 7);
    fill(mid, 37, 8);
    fill(fresh, 70, 9);
    for (int i = 0; i < N_REQ; i++) expect[i] = 0;
    /* 0..3 identical (40 tokens); 4..11 the system prompt + a question; 20..23 the 37-token
     * prefix + a few tokens; 24..31 a new 70-token prefix + 4 tokens, all at once */
    for (int i = 0; i < 4; i++) p.n[i] = 40, fill(p.prompt[i], 40, 1);
    for (int i = 4; i < 12; i++) {
        memcpy(p.prompt[i], sys, sizeof sys);
        p.n[i] = 48 + 5 + i;
        fill(p.prompt[i] + 48, p.n[i] - 48, 100 + (unsigned)i);
    }
    for (int i = 20; i < 24; i++) {
        memcpy(p.prompt[i], mid, sizeof mid);
        p.n[i] = 37 + 3 + 2 * (i - 20);
        fill(p.prompt[i] + 37, p.n[i] - 37, 200 + (unsigned)i);
    }
    for (int i = 24; i < 32; i++) {
        memcpy(p.prompt[i], fresh, sizeof fresh);
        p.n[i] = 74;
        fill(p.prompt[i] + 70, 4, 300 + (unsigned)i);
    }
    /* phase 1: the first of each shared kind, alone */
    int first[] = {0, 4, 20};
    for (int k = 0; k < 3; k++)
        q[first[k]] = submit(r, p.prompt[first[k]], p.n[first[k]], first[k], MAX_TOK);
    drain(r);
    /* phase 2: the rest of them, and the new prefix 8 times, together */
    for (int i = 0; i < N_REQ; i++) {
        if (q[i] || (i >= 12 && i < 20)) continue;
        q[i] = submit(r, p.prompt[i], p.n[i], i, MAX_TOK);
        if (i < 4) expect[i] = full_blocks_before_last(40);
        else if (i < 12) expect[i] = 48;
        else if (i < 24) expect[i] = 32; /* the mid-block prefix's whole blocks */
    }
    drain(r);
    /* phase 3: two conversations of four turns; a turn resends the last prompt, its answer
     * and 7 new tokens */
    for (int t = 0; t < 4; t++) {
        for (int c = 0; c < 2; c++) {
            int i = 12 + c * 4 + t;
            if (t == 0) {
                p.n[i] = 30 + 9 * c;
                fill(p.prompt[i], p.n[i], 400 + (unsigned)c);
            } else {
                int prev = i - 1;
                memcpy(p.prompt[i], p.prompt[prev], sizeof(int32_t) * (size_t)p.n[prev]);
                for (int k = 0; k < MAX_TOK; k++)
                    p.prompt[i][p.n[prev] + k] = q[prev]->events[k].token;
                p.n[i] = p.n[prev] + MAX_TOK + 7;
                fill(p.prompt[i] + p.n[prev] + MAX_TOK, 7, 500 + (unsigned)i);
                /* the previous turn cached every block it filled: its prompt and all but
                 * the last of its answer tokens */
                int had = (p.n[prev] + MAX_TOK - 1) / BS * BS,
                    most = full_blocks_before_last(p.n[i]);
                expect[i] = had < most ? had : most;
            }
            q[i] = submit(r, p.prompt[i], p.n[i], i, MAX_TOK);
        }
        drain(r);
    }
    *prompt_total = 0;
    for (int i = 0; i < N_REQ; i++) {
        assert_int_equal(q[i]->n_events, MAX_TOK);
        assert_int_equal(q[i]->finish, FINISH_LENGTH);
        for (int k = 0; k < MAX_TOK; k++) out[i][k] = q[i]->events[k].token;
        cached[i] = req_cached_tokens(q[i]);
        *prompt_total += p.n[i];
        req_unref(q[i]);
    }
    struct sched_stats st;
    sched_stats(r->s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.kv_blocks_used, 0); /* every block came back: free, or idle in the cache */
    assert_int_equal(st.kv_blocks_free, st.kv_tokens / BS);
}

static void test_cached_equals_uncached(void **state) {
    (void)state;
    static int32_t off[N_REQ][MAX_TOK], on[N_REQ][MAX_TOK], tight[N_REQ][MAX_TOK];
    int cached[N_REQ], expect[N_REQ];
    long prompt_total;
    struct sched_run r;

    run_open(&r, 8192, 512, 256, 0);
    run_patterns(&r, off, cached, expect, &prompt_total);
    for (int i = 0; i < N_REQ; i++) assert_int_equal(cached[i], 0);
    assert_int_equal((long)metric(&r, "tpd_prompt_tokens_computed_total"), prompt_total);
    assert_int_equal((long)metric(&r, "tpd_prefix_cache_blocks"), 0);
    sched_run_close(&r);

    run_open(&r, 8192, 512, 256, 1);
    run_patterns(&r, on, cached, expect, &prompt_total);
    long hits = 0;
    for (int i = 0; i < N_REQ; i++) {
        if (cached[i] != expect[i])
            fail_msg("request %d: %d cached tokens, expected %d", i, cached[i], expect[i]);
        hits += cached[i];
    }
    assert_true(hits > 600);
    struct sched_stats st;
    sched_stats(r.s, &st);
    assert_int_equal(st.preemptions, 0);
    assert_int_equal((long)metric(&r, "tpd_prefix_cache_queries_total"), prompt_total);
    assert_int_equal((long)metric(&r, "tpd_prefix_cache_hits_total"), hits);
    /* only what the cache did not hold was computed */
    assert_int_equal((long)metric(&r, "tpd_prompt_tokens_computed_total"), prompt_total - hits);
    assert_true(metric(&r, "tpd_prefix_cache_blocks") > 20);
    sched_run_close(&r);
    assert_memory_equal(off, on, sizeof off);

    /* 14 blocks for up to 32 sequences of up to 150 tokens: preemption and eviction */
    run_open(&r, 14 * BS, 512, 64, 1);
    run_patterns(&r, tight, cached, expect, &prompt_total);
    sched_stats(r.s, &st);
    print_message("tight cache: %ld preemptions\n", st.preemptions);
    assert_true(st.preemptions > 0);
    sched_run_close(&r);
    assert_memory_equal(off, tight, sizeof off);
}

/* Eight requests share a cached 64-token prefix; four are cancelled mid-prefill or
 * mid-decode, while the prefix blocks they hold are shared: the other four still produce
 * exactly their tokens with the cache off, and every block comes back. */
static void shared_prefix_with_cancels(int caching, int cancel, int32_t out[8][MAX_TOK]) {
    int32_t prompt[8][80];
    struct sched_run r;
    run_open(&r, 4096, 512, 16, caching); /* 16 tokens a step: prefills take several */
    for (int i = 0; i < 8; i++) {
        fill(prompt[i], 64, 21);
        fill(prompt[i] + 64, 16, 30 + (unsigned)i);
    }
    struct gen_request *warm = submit(&r, prompt[0], 70, 99, 1); /* caches the prefix */
    drain(&r);
    req_unref(warm);
    struct gen_request *q[8];
    for (int i = 0; i < 8; i++) q[i] = submit(&r, prompt[i], 80, i, MAX_TOK);
    sched_step(r.s, 0);
    if (cancel) req_cancel(q[0]), req_cancel(q[2]); /* mid-prefill */
    for (int k = 0; k < 8; k++) sched_step(r.s, 0);
    if (cancel) req_cancel(q[4]), req_cancel(q[6]); /* mid-decode */
    drain(&r);
    for (int i = 0; i < 8; i++) {
        if (cancel && i % 2 == 0) {
            assert_int_equal(q[i]->finish, FINISH_CANCELLED);
        } else {
            assert_int_equal(q[i]->n_events, MAX_TOK);
            for (int k = 0; k < MAX_TOK; k++) out[i][k] = q[i]->events[k].token;
            assert_int_equal(req_cached_tokens(q[i]), caching ? 64 : 0);
        }
        req_unref(q[i]);
    }
    struct sched_stats st;
    sched_stats(r.s, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(st.kv_blocks_free, 4096 / BS);
    sched_run_close(&r);
}

static void test_cancel_while_shared(void **state) {
    (void)state;
    static int32_t off[8][MAX_TOK], on[8][MAX_TOK];
    shared_prefix_with_cancels(0, 0, off);
    shared_prefix_with_cancels(1, 1, on);
    for (int i = 1; i < 8; i += 2) assert_memory_equal(off[i], on[i], sizeof off[i]);
}

/* Submit to first token, stepping the scheduler. */
static double ttft(struct sched_run *r, const int32_t *prompt, int n, int id, int *cached) {
    struct gen_request *q = submit(r, prompt, n, id, 1);
    double t0 = clock_now();
    while (q->n_events == 0) assert_true(sched_step(r->s, 0) > 0 || q->n_events);
    double t = clock_now() - t0;
    drain(r);
    *cached = req_cached_tokens(q);
    req_unref(q);
    return t;
}

/* The long prefix: 2,000 tokens; 608 (38 blocks) under the sanitizers (TPD_SANITIZE=1, the ASan
 * pass of tests/run), still two prefill chunks, where the instrumented kernels make 2,000 cost
 * minutes. */
#define LONG_PREFIX 2000
static int g_long_prefix = LONG_PREFIX;

static void test_long_prefix_ttft(void **state) {
    (void)state;
    enum { TAIL = 20 };
    const int PREFIX = g_long_prefix;
    static int32_t a[LONG_PREFIX + TAIL], b[LONG_PREFIX + TAIL];
    fill(a, PREFIX, 11);
    memcpy(b, a, sizeof(int32_t) * PREFIX);
    fill(a + PREFIX, TAIL, 12);
    fill(b + PREFIX, TAIL, 13);
    struct sched_run r;
    run_open(&r, 8192, 4096, 512, 1);
    int ca, cb;
    double before = metric(&r, "tpd_prompt_tokens_computed_total");
    double t_uncached = ttft(&r, a, PREFIX + TAIL, 1, &ca);
    double mid = metric(&r, "tpd_prompt_tokens_computed_total");
    double t_cached = ttft(&r, b, PREFIX + TAIL, 2, &cb);
    double after = metric(&r, "tpd_prompt_tokens_computed_total");
    print_message("TTFT with a %d-token prefix: %.3f s uncached, %.3f s cached (%.1f%%)\n", PREFIX,
                  t_uncached, t_cached, 100 * t_cached / t_uncached);
    assert_int_equal(ca, 0);
    assert_int_equal(cb, PREFIX);
    assert_int_equal((long)(mid - before), PREFIX + TAIL);
    assert_int_equal((long)(after - mid), TAIL); /* only the new tokens were prefilled */
    assert_true(t_cached <= 0.25 * t_uncached);
    sched_run_close(&r);
}

int main(int argc, char **argv) {
    if (sched_run_smollm2(g_model, sizeof g_model)) return 77;
    const char *san = getenv("TPD_SANITIZE");
    if (san && !strcmp(san, "1")) g_long_prefix = 608; /* whole blocks of BS */
    comm_init(&g_comm, &argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_equals_uncached),
        cmocka_unit_test(test_cancel_while_shared),
        cmocka_unit_test(test_long_prefix_ttft),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    comm_finalize(&g_comm);
    return rc;
}
