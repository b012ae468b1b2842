// link: tpd_testutil_sched tpd_testutil_model
/* The scheduler always makes progress, whatever the KV cache size and the fairness setting
 * (a tiny synthetic model at tp 1; issue 24):
 * - four 100 + 40-token requests in a 256-token cache, and eight 120 + 40, with fairness at
 *   its default (max_share 0.5) all finish (they used to preempt each other forever), each
 *   with the greedy tokens it gets alone;
 * - a few hundred seeded random workloads (caches of one to three times the largest request,
 *   block sizes 1 to 16, mixed prompt and generation lengths, requests with several choices
 *   and several uids, max_share from 0 to 1, prefix caching on and off, one or two
 *   micro-batches in flight, requests arriving while others run): every request that fits
 *   the cache alone finishes within a step bound with the greedy tokens it gets alone, one
 *   that does not is refused at submit, and every KV block comes back.
 * TPD_SANITIZE=1 (the ASan pass of tests/run) runs fewer workloads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sched/request.h"
#include "testutil.h"
#include "testutil_model.h"
#include "testutil_sched.h"
#include "util/dtype.h"
#include "util/log.h"

#define VOCAB 128 /* the tiny model's */
#define MAX_CTX 256
#define N_POOL 48 /* prompts the workloads draw from */
#define MAX_PROMPT 120
#define MAX_GEN 40
#define N_BS 5
static const int g_bs[N_BS] = {1, 2, 4, 8, 16};

static struct comm g_comm;
static char g_tiny[4096];
static int g_workloads = 300;

/* The pool: prompt p, and the greedy tokens it gets alone (MAX_GEN of them) at each block size. */
static int32_t g_prompt[N_POOL][MAX_PROMPT];
static int g_n_prompt[N_POOL];
static int32_t g_alone[N_BS][N_POOL][MAX_GEN];

struct setup {
    int bs, n_blocks, max_running, step_tokens, caching, micro_batches;
    double max_share;
};

static void run_open(struct sched_run *r, const struct setup *u) {
    struct engine_opts eo = {.model_path = g_tiny,
                             .threads = 1,
                             .kv_type = DT_F32,
                             .block_size = u->bs,
                             .n_blocks = u->n_blocks,
                             .max_ctx = MAX_CTX};
    struct sched_opts so = {.max_running = u->max_running,
                            .max_queue = 256,
                            .step_tokens = u->step_tokens,
                            .max_share = u->max_share,
                            .prefix_caching = u->caching,
                            .micro_batches = u->micro_batches};
    sched_run_open(r, &g_comm, &eo, &so);
}

/* A greedy request for pool prompt p (one choice of API request `group`, from `uid`). */
static struct gen_request *pool_req(int p, int max_tokens, uint64_t id, uint64_t group,
                                    unsigned uid) {
    struct gen_request *q = req_new();
    q->id = id;
    q->group = group;
    q->uid = uid;
    q->n_prompt = g_n_prompt[p];
    q->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt);
    memcpy(q->prompt, g_prompt[p], sizeof(int32_t) * (size_t)q->n_prompt);
    q->max_tokens = max_tokens;
    q->ignore_eos = 1;
    q->sp.temperature = 0;
    return q;
}

/* Every request finished with the max_tokens greedy tokens pool prompt pool[i] gets alone. */
static void assert_alone_tokens(int bi, struct gen_request **reqs, const int *pool, int n) {
    for (int i = 0; i < n; i++) {
        struct gen_request *q = reqs[i];
        assert_int_equal(q->finish, FINISH_LENGTH);
        assert_int_equal(q->n_events, q->max_tokens);
        for (int k = 0; k < q->n_events; k++)
            assert_int_equal(q->events[k].token, g_alone[bi][pool[i]][k]);
    }
}

/* ---- the issue's cases ---- */

/* n requests of pool prompts with n_prompt tokens (the pool's last ones are MAX_PROMPT long)
 * and max_tokens 40 arrive together in 16 blocks of 16 tokens, fairness at the daemon's
 * default: all finish within max_steps. */
static void small_cache_case(int n, int n_prompt, int max_steps) {
    struct setup u = {.bs = 16,
                      .n_blocks = 16,
                      .max_running = 32,
                      .step_tokens = 512,
                      .max_share = 0.5,
                      .caching = 1,
                      .micro_batches = 1}; /* the daemon's defaults */
    struct sched_run r;
    run_open(&r, &u);
    struct gen_request *reqs[8];
    int pool[8];
    char err[512];
    for (int i = 0; i < n; i++) {
        pool[i] = N_POOL - 1 - i;
        reqs[i] = pool_req(pool[i], MAX_GEN, (uint64_t)i + 1, 0, 1000);
        reqs[i]->n_prompt = n_prompt; /* a prefix of the MAX_PROMPT-token prompt */
        assert_int_equal(sched_submit(r.s, reqs[i], err), SUBMIT_OK);
    }
    int steps = 0;
    while (sched_step(r.s, 0) > 0) {
        if (++steps > max_steps) break;
    }
    struct sched_stats st;
    sched_stats(r.s, &st);
    int done = 0;
    for (int i = 0; i < n; i++) done += reqs[i]->finish != FINISH_NONE;
    print_message("%d requests of %d + %d tokens in 256 KV tokens: %d finished in %d steps, %ld "
                  "preemptions\n",
                  n, n_prompt, MAX_GEN, done, steps, st.preemptions);
    if (done < n) sched_abort_all(r.s);
    assert_int_equal(done, n);
    sched_run_assert_idle(&r);
    sched_run_close(&r);
    for (int i = 0; i < n; i++) {
        /* the solo tokens of the prefix prompt: run it alone in the same setup */
        struct sched_run solo;
        run_open(&solo, &u);
        struct gen_request *a = pool_req(pool[i], MAX_GEN, 99, 0, 1000);
        a->n_prompt = n_prompt;
        assert_int_equal(sched_submit(solo.s, a, err), SUBMIT_OK);
        sched_run_drain(&solo, 1000);
        assert_int_equal(reqs[i]->n_events, MAX_GEN);
        for (int k = 0; k < MAX_GEN; k++)
            assert_int_equal(reqs[i]->events[k].token, a->events[k].token);
        req_unref(a);
        sched_run_close(&solo);
        req_unref(reqs[i]);
    }
}

static void test_issue_cases(void **state) {
    (void)state;
    small_cache_case(4, 100, 2000);
    small_cache_case(8, 120, 4000);
}

/* ---- random workloads ---- */

#define MAX_REQ 16

struct workload {
    struct setup u;
    int bi; /* index of u.bs in g_bs */
    int n;
    int pool[MAX_REQ], max_tokens[MAX_REQ], arrival[MAX_REQ], fits[MAX_REQ];
    uint64_t group[MAX_REQ];
    unsigned uid[MAX_REQ];
};

/* Workload w: 2 to 16 requests (some the choices of one API request), a cache of one to three
 * times the largest that must fit, and now and then one request larger than the cache. */
static void workload_make(int w, struct workload *wl) {
    uint64_t x = 0x51ed270b0000ull + (uint64_t)w;
    static const double shares[] = {0, 0.5, 0.5, 0.25, 0.34, 0.75, 1};
    memset(wl, 0, sizeof *wl);
    wl->bi = tu_rand_int(&x, N_BS);
    wl->u.bs = g_bs[wl->bi];
    wl->u.max_running = 1 + tu_rand_int(&x, 8);
    wl->u.step_tokens = wl->u.max_running + tu_rand_int(&x, 64);
    wl->u.max_share = shares[tu_rand_int(&x, (int)(sizeof shares / sizeof *shares))];
    wl->u.caching = tu_rand_int(&x, 2);
    wl->u.micro_batches = 1 + tu_rand_int(&x, 2);
    int n_req = 2 + tu_rand_int(&x, 8), largest = 0;
    for (int i = 0; i < n_req && wl->n < MAX_REQ; i++) {
        int p = tu_rand_int(&x, N_POOL), gen = 1 + tu_rand_int(&x, MAX_GEN);
        int arrival = tu_rand_int(&x, 2) ? 0 : tu_rand_int(&x, 40);
        int choices = tu_rand_int(&x, 4) ? 1 : 2 + tu_rand_int(&x, 3);
        unsigned uid = 1 + (unsigned)tu_rand_int(&x, 3);
        for (int c = 0; c < choices && wl->n < MAX_REQ; c++, wl->n++) {
            wl->pool[wl->n] = p;
            wl->max_tokens[wl->n] = gen;
            wl->arrival[wl->n] = arrival;
            wl->group[wl->n] = 1000 + (uint64_t)i;
            wl->uid[wl->n] = uid;
        }
        if (g_n_prompt[p] + gen > largest) largest = g_n_prompt[p] + gen;
    }
    int kv = largest + tu_rand_int(&x, 2 * largest + 1); /* 1 to 3 times the largest */
    wl->u.n_blocks = (kv + wl->u.bs - 1) / wl->u.bs;
    if (tu_rand_int(&x, 4) == 0 && wl->n < MAX_REQ) { /* one that could never be admitted */
        int p = tu_rand_int(&x, N_POOL);
        wl->pool[wl->n] = p;
        wl->max_tokens[wl->n] = wl->u.n_blocks * wl->u.bs - g_n_prompt[p] + 1;
        wl->arrival[wl->n] = tu_rand_int(&x, 10);
        wl->group[wl->n] = 999;
        wl->uid[wl->n++] = 1;
    }
    for (int i = 0; i < wl->n; i++)
        wl->fits[i] = g_n_prompt[wl->pool[i]] + wl->max_tokens[i] <= wl->u.n_blocks * wl->u.bs;
}

/* A bound on the steps a workload may take: the last arrival, then twice each request's
 * tokens (prompt and output, a second time for recomputing them once after a preemption)
 * at one token a step, per micro-batch in flight. A schedule that keeps its oldest running
 * request progressing stays well within it (the test prints the largest share used); one
 * that livelocks never ends. */
static int step_bound(const struct workload *wl) {
    int steps = 40 + 50;
    for (int i = 0; i < wl->n; i++)
        if (wl->fits[i]) steps += 2 * (g_n_prompt[wl->pool[i]] + wl->max_tokens[i]);
    return steps * wl->u.micro_batches;
}

/* Runs workload w; returns the steps it took (its preemptions in *preemptions, its share of
 * step_bound in *used). */
static int workload_run(int w, long *preemptions, double *used) {
    struct workload wl;
    workload_make(w, &wl);
    struct sched_run r;
    run_open(&r, &wl.u);
    struct gen_request *reqs[MAX_REQ];
    for (int i = 0; i < wl.n; i++)
        reqs[i] = pool_req(wl.pool[i], wl.max_tokens[i], (uint64_t)i + 1, wl.group[i], wl.uid[i]);
    int bound = step_bound(&wl), steps = 0, submitted = 0;
    char err[512];
    for (;;) {
        for (int i = 0; i < wl.n; i++) {
            if (wl.arrival[i] != steps) continue;
            int rc = sched_submit(r.s, reqs[i], err);
            assert_int_equal(rc, wl.fits[i] ? SUBMIT_OK : SUBMIT_TOO_LONG);
            submitted++;
        }
        int left = sched_step(r.s, 0);
        if (left == 0 && submitted == wl.n) break;
        if (++steps > bound) {
            struct sched_stats st;
            sched_stats(r.s, &st);
            fail_msg("workload %d (block size %d, %d blocks, max_running %d, step_tokens %d, "
                     "max_share %g, "
                     "caching %d, micro-batches %d, %d requests): %d still queued or running after "
                     "%d steps, "
                     "%ld preemptions",
                     w, wl.u.bs, wl.u.n_blocks, wl.u.max_running, wl.u.step_tokens, wl.u.max_share,
                     wl.u.caching, wl.u.micro_batches, wl.n, left, steps, st.preemptions);
        }
    }
    struct sched_stats st;
    sched_stats(r.s, &st);
    *preemptions = st.preemptions;
    *used = (double)steps / bound;
    sched_run_assert_idle(&r);
    sched_run_close(&r);
    int n_fit = 0;
    for (int i = 0; i < wl.n; i++) {
        if (wl.fits[i]) {
            reqs[n_fit] = reqs[i];
            wl.pool[n_fit++] = wl.pool[i];
        } else {
            assert_int_equal(reqs[i]->finish, FINISH_NONE); /* refused: never ran */
            req_unref(reqs[i]);
        }
    }
    assert_alone_tokens(wl.bi, reqs, wl.pool, n_fit);
    for (int i = 0; i < n_fit; i++) req_unref(reqs[i]);
    return steps;
}

static void test_random_workloads(void **state) {
    (void)state;
    long preemptions = 0, steps = 0;
    int with_preemption = 0;
    double most = 0;
    for (int w = 0; w < g_workloads; w++) {
        long p;
        double used;
        steps += workload_run(w, &p, &used);
        preemptions += p;
        with_preemption += p > 0;
        most = used > most ? used : most;
    }
    print_message("%d workloads: %ld steps, %ld preemptions (in %d workloads); at most %.0f%% of "
                  "the step bound "
                  "used\n",
                  g_workloads, steps, preemptions, with_preemption, 100 * most);
    assert_true(with_preemption > g_workloads / 4); /* the caches were small enough to matter */
}

/* ---- setup: the tiny model, the pool and what each prompt gets alone ---- */

/* Prompts in four families sharing their first 24 tokens (prefix-cache hits across
 * requests); the last ones MAX_PROMPT long. */
static void pool_make(void) {
    uint64_t x = 77;
    for (int p = 0; p < N_POOL; p++) {
        g_n_prompt[p] = p >= N_POOL - 8 ? MAX_PROMPT : 1 + tu_rand_int(&x, 60);
        uint64_t fam = 1000 + (uint64_t)(p % 4);
        for (int k = 0; k < g_n_prompt[p]; k++)
            g_prompt[p][k] = tu_rand_int(k < 24 ? &fam : &x, VOCAB);
    }
    for (int bi = 0; bi < N_BS; bi++) {
        struct setup u = {.bs = g_bs[bi],
                          .n_blocks = (MAX_CTX + g_bs[bi] - 1) / g_bs[bi],
                          .max_running = 1,
                          .step_tokens = 64,
                          .micro_batches = 1};
        struct sched_run r;
        run_open(&r, &u);
        char err[512];
        for (int p = 0; p < N_POOL; p++) {
            struct gen_request *q = pool_req(p, MAX_GEN, (uint64_t)p, 0, 1);
            assert_int_equal(sched_submit(r.s, q, err), SUBMIT_OK);
            sched_run_drain(&r, 1000);
            assert_int_equal(q->n_events, MAX_GEN);
            for (int k = 0; k < MAX_GEN; k++) g_alone[bi][p][k] = q->events[k].token;
            req_unref(q);
        }
        sched_run_close(&r);
    }
}

int main(int argc, char **argv) {
    const char *san = getenv("TPD_SANITIZE");
    if (san && strcmp(san, "1") == 0) g_workloads = 60;
    assert_int_equal(tu_tmpdir_setup(NULL), 0);
    /* outputs that spread: a wrong token shows */
    snprintf(g_tiny, sizeof g_tiny, "%s", tm_write_random_gguf("tiny.gguf"));
    comm_init(&g_comm, &argc, &argv);
    log_init(0, LOG_WARN, 0); /* not a line for each of the hundreds of engines opened */
    pool_make();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_issue_cases),
        cmocka_unit_test(test_random_workloads),
    };
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    comm_finalize(&g_comm);
    tu_tmpdir_teardown(NULL);
    return rc;
}
