// link: tpd_testutil_sched
/* The scheduler on the real SmolLM2 model at tp 1: continuous batching gives every
 * request exactly the tokens it gets alone; a KV cache too small for the batch forces
 * preemption by recompute with the same result; cancelled requests give back their
 * blocks; limits are refused up front. Skipped when the model has not been fetched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "sched/request.h"
#include "testutil_sched.h"

#define N_REQ 32
#define MAX_TOK 10

/* Requests per batch: N_REQ; 12 under the sanitizers (TPD_SANITIZE=1, the ASan pass of
 * tests/run), which check the same paths (batching, preemption) for memory errors while the
 * Release pass runs the full batch. */
static int g_n_req = N_REQ;

static struct comm g_comm;
static double
    g_max_share; /* scheduler.max_share of the next run_open (0: first come, first served) */
static char g_model[4096];

static void run_open(struct sched_run *r, int kv_tokens, int max_running, int step_tokens) {
    struct engine_opts eo = {.model_path = g_model,
                             .threads = 2,
                             .kv_type = DT_F16,
                             .block_size = 16,
                             .n_blocks = kv_tokens / 16,
                             .max_ctx = 512};
    struct sched_opts so = {.max_running = max_running,
                            .max_queue = 64,
                            .step_tokens = step_tokens,
                            .max_share = g_max_share};
    sched_run_open(r, &g_comm, &eo, &so);
}

static struct gen_request *make_req(int i, float temperature) {
    struct gen_request *q = req_new();
    q->id = (uint64_t)i;
    q->n_prompt = 3 + (i * 7) % 37; /* 3..39 tokens */
    q->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt);
    for (int k = 0; k < q->n_prompt; k++) q->prompt[k] = (int32_t)(1 + (i * 131 + k * 977) % 49000);
    q->max_tokens = MAX_TOK;
    q->ignore_eos = 1;
    q->sp.temperature = temperature;
    q->sp.seed = 1000 + (uint64_t)i;
    q->sp.has_seed = 1;
    return q;
}

static void drain(struct sched_run *r) { sched_run_drain(r, 100000); }

/* Tokens of each request: all submitted together, or one at a time. */
static void collect(struct sched_run *r, int together, float temperature,
                    int32_t out[N_REQ][MAX_TOK]) {
    struct gen_request *reqs[N_REQ];
    char err[512];
    for (int i = 0; i < g_n_req; i++) {
        reqs[i] = make_req(i, temperature);
        if (!together) {
            assert_int_equal(sched_submit(r->s, reqs[i], err), SUBMIT_OK);
            drain(r);
        }
    }
    if (together) {
        for (int i = 0; i < g_n_req; i++)
            assert_int_equal(sched_submit(r->s, reqs[i], err), SUBMIT_OK);
        drain(r);
    }
    for (int i = 0; i < g_n_req; i++) {
        assert_int_equal(reqs[i]->n_events, MAX_TOK);
        assert_int_equal(reqs[i]->finish, FINISH_LENGTH);
        for (int k = 0; k < MAX_TOK; k++) out[i][k] = reqs[i]->events[k].token;
        req_unref(reqs[i]);
    }
    struct sched_stats st;
    sched_stats(r->s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.kv_blocks_used, 0); /* every block came back */
}

static void test_batched_equals_alone(void **state) {
    (void)state;
    static int32_t alone[N_REQ][MAX_TOK], together[N_REQ][MAX_TOK], tight[N_REQ][MAX_TOK];
    struct sched_run r;
    run_open(&r, 8192, 32, 256);
    collect(&r, 0, 0, alone);
    collect(&r, 1, 0, together);
    struct sched_stats st;
    sched_stats(r.s, &st);
    assert_int_equal(st.preemptions, 0);
    sched_run_close(&r);
    assert_memory_equal(alone, together, sizeof alone);

    /* 12 blocks of 16 tokens for 32 requests of up to 49 tokens: preemption must happen */
    run_open(&r, 12 * 16, 32, 64);
    collect(&r, 1, 0, tight);
    sched_stats(r.s, &st);
    assert_true(st.preemptions > 0);
    sched_run_close(&r);
    assert_memory_equal(alone, tight, sizeof alone);
}

static void test_seeded_sampling_batched_equals_alone(void **state) {
    (void)state;
    static int32_t alone[N_REQ][MAX_TOK], together[N_REQ][MAX_TOK];
    struct sched_run r;
    run_open(&r, 8192, 32, 256);
    collect(&r, 0, 0.9f, alone);
    collect(&r, 1, 0.9f, together);
    sched_run_close(&r);
    assert_memory_equal(alone, together, sizeof alone);
    int differs = 0; /* seeds differ per request, so sampling really happened */
    for (int i = 1; i < g_n_req; i++) differs |= memcmp(alone[0], alone[i], sizeof alone[0]) != 0;
    assert_true(differs);
}

/* Steps until b finishes, with eight 60-token choices of request A already running in all
 * eight slots and b (another request, 4 tokens) arriving after them. */
static int steps_for_late_short_request(double max_share, int *a_unfinished) {
    g_max_share = max_share;
    struct sched_run r;
    run_open(&r, 8192, 8, 64);
    g_max_share = 0;
    char err[512];
    struct gen_request *a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = make_req(i, 0);
        a[i]->max_tokens = 60;
        a[i]->group = 1000; /* one API request with n = 8 */
        a[i]->uid = 7;
        assert_int_equal(sched_submit(r.s, a[i], err), SUBMIT_OK);
    }
    for (int k = 0; k < 4; k++) sched_step(r.s, 0); /* A holds every slot */
    struct gen_request *b = make_req(40, 0);
    b->max_tokens = 4;
    b->group = 2000;
    b->uid = 7; /* the same user: request-level fairness */
    assert_int_equal(sched_submit(r.s, b, err), SUBMIT_OK);
    int steps = 0;
    while (b->finish == FINISH_NONE) {
        sched_step(r.s, 0);
        assert_true(++steps < 1000);
    }
    *a_unfinished = 0;
    for (int i = 0; i < 8; i++) *a_unfinished += a[i]->finish == FINISH_NONE;
    drain(&r);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(a[i]->n_events, 60); /* preempted choices still ran to the end */
        req_unref(a[i]);
    }
    assert_int_equal(b->n_events, 4);
    req_unref(b);
    sched_run_close(&r);
    return steps;
}

/* Fairness: an n = 8 request holding every slot gives one up (preemption by recompute) to
 * a later short request under its share, which then finishes in a few steps; first come,
 * first served (max_share 1) makes it wait for A's end. */
static void test_fair_share(void **state) {
    (void)state;
    int a_left_fair, a_left_fcfs;
    int fair = steps_for_late_short_request(0.5, &a_left_fair);
    int fcfs = steps_for_late_short_request(1.0, &a_left_fcfs);
    print_message(
        "late 4-token request: %d steps with max_share 0.5 (%d of A's 8 unfinished), %d first come "
        "first served (%d unfinished)\n",
        fair, a_left_fair, fcfs, a_left_fcfs);
    assert_true(fair <= 12);
    assert_true(a_left_fair >= 7); /* b did not wait for A's choices to end */
    assert_true(fcfs > 40);
}

static void test_cancel_frees_blocks(void **state) {
    (void)state;
    struct sched_run r;
    run_open(&r, 4096, 8, 16); /* small step budget: prompts take several steps */
    char err[512];
    struct gen_request *reqs[8];
    for (int i = 0; i < 8; i++) {
        reqs[i] = make_req(i + 3, 0);
        reqs[i]->max_tokens = 50;
        assert_int_equal(sched_submit(r.s, reqs[i], err), SUBMIT_OK);
    }
    sched_step(r.s, 0); /* some mid-prefill */
    for (int i = 0; i < 4; i++) req_cancel(reqs[i]);
    for (int k = 0; k < 6; k++) sched_step(r.s, 0); /* the rest mid-decode */
    for (int i = 4; i < 8; i++) req_cancel(reqs[i]);
    sched_step(r.s, 0);
    struct sched_stats st;
    sched_stats(r.s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.kv_blocks_used, 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(reqs[i]->finish, FINISH_CANCELLED);
        req_unref(reqs[i]);
    }
    sched_run_close(&r);
}

static void test_limits(void **state) {
    (void)state;
    struct sched_run r;
    run_open(&r, 4096, 4, 64);
    char err[512];
    struct gen_request *q = make_req(1, 0);
    q->max_tokens = 510; /* 10-token prompt + 510 > context 512 */
    assert_int_equal(sched_submit(r.s, q, err), SUBMIT_TOO_LONG);
    assert_non_null(strstr(err, "512"));
    req_unref(q);
    struct gen_request *many[65];
    int full = 0;
    for (int i = 0; i < 65; i++) {
        many[i] = make_req(i, 0);
        int rc = sched_submit(r.s, many[i], err);
        if (i < 64 && rc != SUBMIT_OK) fail_msg("request %d: %s", i, err);
        else full = rc == SUBMIT_QUEUE_FULL;
    }
    assert_true(full);
    sched_drain(r.s);
    struct gen_request *late = make_req(99, 0);
    assert_int_equal(sched_submit(r.s, late, err), SUBMIT_DRAINING);
    req_unref(late);
    sched_abort_all(r.s);
    for (int i = 0; i < 65; i++) {
        if (i < 64) assert_int_equal(many[i]->finish, FINISH_ABORTED);
        req_unref(many[i]);
    }
    sched_run_close(&r);
}

int main(int argc, char **argv) {
    if (sched_run_smollm2(g_model, sizeof g_model)) return 77;
    const char *san = getenv("TPD_SANITIZE");
    if (san && strcmp(san, "1") == 0) g_n_req = 12;
    comm_init(&g_comm, &argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_seeded_sampling_batched_equals_alone),
        cmocka_unit_test(test_cancel_frees_blocks),
        cmocka_unit_test(test_fair_share),
        cmocka_unit_test(test_limits),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    comm_finalize(&g_comm);
    return rc;
}
