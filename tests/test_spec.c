// link: tpd_testutil_sched tpd_testutil_model
/* Speculative decoding through the real scheduler and engine (tp 1):
 *  - the n-gram lookup proposes the continuation of the latest earlier occurrence;
 *  - greedy output with speculation is token for token (and logprob for logprob) the output
 *    without it, for 32 SmolLM2 prompts with the n-gram drafter and with an oracle drafter
 *    that proposes the true continuation with random corruptions (long accepted runs and
 *    rejections), including prompts that run into the context limit and end-of-generation
 *    tokens inside an accepted run (nothing after them is emitted);
 *  - sampling is exact: on a tiny model with a 128-token vocabulary, the first 3 sampled
 *    tokens of 20,000 seeded runs with speculation follow the same distribution as 20,000
 *    without (two-sample chi-square, p > 0.001), for temperature 0.7, top-k, top-p, a logit
 *    bias and penalties, with a stochastic drafter (q not a point mass: drafts drawn from a
 *    known q) and with a deterministic one proposing random tokens, which with the same seeds
 *    gives exactly the tokens of the runs without speculation;
 *  - KV accounting: 1,000 steps of random traffic with rejections, cancellations and
 *    preemptions leave no block behind, and every request that was not cancelled got the
 *    tokens it gets alone without speculation. */
#include <math.h>
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
#include "sched/drafter.h"
#include "sched/metrics.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "sched/spec.h"
#include "testutil.h"
#include "testutil_model.h"
#include "testutil_sched.h"
#include "util/dtype.h"

static struct comm g_comm;
static char g_smol[4096], g_tiny[4096];

/* ---- a scheduler over an engine ---- */

static void run_open(struct sched_run *r, const char *model, int block_size, int n_blocks,
                     int max_ctx, int max_running, const int32_t *eog, int n_eog, struct drafter *d,
                     int k) {
    struct engine_opts eo = {.model_path = model,
                             .threads = 2,
                             .kv_type = DT_F32,
                             .block_size = block_size,
                             .n_blocks = n_blocks,
                             .max_ctx = max_ctx};
    struct sched_opts so = {.max_running = max_running,
                            .max_queue = 1 << 16,
                            .step_tokens = 4096,
                            .eog_ids = eog,
                            .n_eog = n_eog,
                            .spec = {.drafter = d, .k = k, .no_cost = 1}};
    /* no_cost: what is drafted depends on acceptance alone, not on this machine's step times
     * (under a sanitizer the cost part keeps k at 1, and no draft run would hold an end token) */
    sched_run_open(r, &g_comm, &eo, &so);
}

static void drain(struct sched_run *r) { sched_run_drain(r, 1000000); }

/* ---- test drafters ---- */

/* Knows each request's true continuation (by its id, an index into truth) and
 * proposes it, corrupting each drafted token with probability corrupt. Counts proposals
 * holding an end-of-generation token with more drafts after it. */
struct oracle {
    const int32_t *truth; /* [n_req][stride] */
    int stride;
    int *n_truth;
    int n_req, vocab;
    double corrupt;
    uint64_t rng;
    const int32_t *eog;
    int n_eog;
    int eog_inside;
};

static void oracle_propose(void *self, struct draft_job *jobs, int n_jobs) {
    struct oracle *o = self;
    for (int j = 0; j < n_jobs; j++) {
        struct draft_job *b = &jobs[j];
        int i = (int)b->request;
        assert_true(i >= 0 && i < o->n_req);
        int at = b->n_tokens; /* index of the next token in prompt + output */
        for (int t = 0; t < b->k && at + t < o->n_truth[i]; t++) {
            int32_t tok = o->truth[(size_t)i * (size_t)o->stride + (size_t)(at + t)];
            if (tu_rand_unit(&o->rng) < o->corrupt)
                tok = (tok + 1 + tu_rand_int(&o->rng, 50)) % o->vocab;
            b->out[b->n_out++] = tok;
        }
        for (int t = 0; t + 1 < b->n_out; t++)
            for (int e = 0; e < o->n_eog; e++) o->eog_inside += b->out[t] == o->eog[e];
    }
}

static struct drafter *oracle_drafter(struct oracle *o) {
    struct drafter *d = calloc(1, sizeof *d);
    d->self = o;
    d->propose = oracle_propose;
    return d;
}

/* Draws each draft token from a known q that depends on the previous token: mass 0.5 on
 * (prev * 7 + 3) mod V, 0.25 on (prev + 1) mod V, the rest uniform. Deterministic (q a
 * point mass) when stochastic is 0: then it proposes that draw without reporting q. */
struct randd {
    int vocab;
    uint64_t rng;
    int lie; /* report a uniform q instead of the one drawn from (a negative control) */
};

static void randd_q(int vocab, int32_t prev, float *q) {
    for (int v = 0; v < vocab; v++) q[v] = 0.25f / (float)vocab;
    q[(prev * 7 + 3) % vocab] += 0.5f;
    q[(prev + 1) % vocab] += 0.25f;
}

static void randd_propose(void *self, struct draft_job *jobs, int n_jobs) {
    struct randd *rd = self;
    float q[1024];
    for (int j = 0; j < n_jobs; j++) {
        struct draft_job *b = &jobs[j];
        int32_t prev = b->tokens[b->n_tokens - 1];
        for (int t = 0; t < b->k; t++) {
            randd_q(rd->vocab, prev, q);
            double u = tu_rand_unit(&rd->rng), acc = 0;
            int32_t x = rd->vocab - 1;
            for (int v = 0; v < rd->vocab; v++) {
                acc += q[v];
                if (u < acc) {
                    x = v;
                    break;
                }
            }
            if (b->q) {
                float *dst = b->q + (size_t)t * (size_t)rd->vocab;
                for (int v = 0; v < rd->vocab; v++)
                    dst[v] = rd->lie ? 1.0f / (float)rd->vocab : q[v];
            }
            b->out[b->n_out++] = x;
            prev = x;
        }
    }
}

static struct drafter *random_drafter(struct randd *rd, int stochastic) {
    struct drafter *d = calloc(1, sizeof *d);
    d->self = rd;
    d->stochastic = stochastic;
    d->propose = randd_propose;
    return d;
}

/* ---- n-gram lookup ---- */

static void test_ngram_lookup(void **state) {
    (void)state;
    int32_t out[8];
    /* ... 5 6 7 [8 9] ... 5 6 7: the trigram 5 6 7 recurs, its continuation is 8 9 */
    const int32_t a[] = {1, 5, 6, 7, 8, 9, 2, 5, 6, 7};
    assert_int_equal(drafter_ngram_lookup(a, 10, 2, 3, 4, out), 4);
    const int32_t want_a[] = {8, 9, 2, 5};
    assert_memory_equal(out, want_a, sizeof want_a);
    /* the latest occurrence wins: 3 4 twice, continued by 10 then by 11 */
    const int32_t b[] = {3, 4, 10, 3, 4, 11, 0, 3, 4};
    assert_int_equal(drafter_ngram_lookup(b, 9, 2, 2, 2, out), 2);
    assert_int_equal(out[0], 11);
    assert_int_equal(out[1], 0);
    /* the longest n-gram is tried first: 2-gram "1 2" recurs only as the tail's suffix of a
     * longer match elsewhere; the 3-gram "0 1 2" picks its own continuation 7 */
    const int32_t c[] = {0, 1, 2, 7, 5, 1, 2, 9, 0, 1, 2};
    assert_int_equal(drafter_ngram_lookup(c, 11, 2, 3, 1, out), 1);
    assert_int_equal(out[0], 7);
    assert_int_equal(drafter_ngram_lookup(c, 11, 2, 2, 1, out), 1);
    assert_int_equal(out[0], 9);
    /* continuation cut at the end of the known tokens; nothing below ngram_min */
    const int32_t d[] = {4, 4};
    assert_int_equal(drafter_ngram_lookup(d, 2, 1, 3, 5, out), 1);
    assert_int_equal(out[0], 4);
    const int32_t e[] = {1, 2, 3, 4};
    assert_int_equal(drafter_ngram_lookup(e, 4, 1, 3, 5, out), 0);
}

/* ---- the rule for k (sched/spec.h) ---- */

/* the rule without its cost part */
static int spec_want_nc(const struct spec_opts *o, struct spec_seq *q, int n, int room) {
    return spec_want(o, q, n, room, NULL);
}

static void test_adaptive_k(void **state) {
    (void)state;
    struct drafter *d = drafter_ngram_new(1, 3);
    struct spec_opts o = {.drafter = d, .k = 4, .max_batch_tokens = 32};
    struct spec_seq q = {0};
    struct spec_stats st = {0};
    assert_int_equal(spec_want_nc(&o, &q, 1, 100), 4);  /* fresh: full k */
    assert_int_equal(spec_want_nc(&o, &q, 1, 2), 2);    /* room (max_tokens, context) */
    assert_int_equal(spec_want_nc(&o, &q, 8, 100), 3);  /* 32 / 8 - 1 */
    assert_int_equal(spec_want_nc(&o, &q, 16, 100), 1); /* 32 / 16 - 1 */
    assert_int_equal(spec_want_nc(&o, &q, 17, 100), 0); /* decode no longer weight-bound: off */
    /* acceptance falls: fewer drafts, then none but a one-token probe every 16 steps */
    for (int i = 0; i < 3; i++) spec_observe(&q, &st, 4, 0);
    assert_true(q.accept < 0.5 && q.accept > 0.1); /* 0.7^3 = 0.343 */
    assert_int_equal(spec_want_nc(&o, &q, 1, 100), (int)ceil(4 * q.accept / 0.5));
    for (int i = 0; i < 4; i++) spec_observe(&q, &st, 4, 0);
    int drafts = 0, probes = 0;
    for (int i = 0; i < 32; i++) {
        int k = spec_want_nc(&o, &q, 1, 100);
        drafts += k;
        probes += k > 0;
    }
    assert_int_equal(probes, 2);
    assert_int_equal(drafts, 2);
    /* and recovers when the probes are accepted */
    for (int i = 0; i < 8; i++) spec_observe(&q, &st, 1, 1);
    assert_int_equal(spec_want_nc(&o, &q, 1, 100), 4);
    assert_int_equal(st.drafted, 7 * 4 + 8);
    assert_int_equal(st.accepted, 8);
    o.max_batch_tokens = 0; /* no batch limit */
    assert_int_equal(spec_want_nc(&o, &q, 1000, 100), 4);
    o.drafter = NULL; /* off */
    assert_int_equal(spec_want_nc(&o, &q, 1, 100), 0);
    drafter_free(d);
}

/* the cost part: drafts only where the tokens a step yields beat what it costs */
static void test_cost_k(void **state) {
    (void)state;
    struct drafter *d = drafter_ngram_new(1, 3);
    struct spec_opts o = {.drafter = d, .k = 4, .max_batch_tokens = 0};
    struct spec_seq q = {0};
    struct spec_stats st = {0};
    struct spec_cost c = {0};
    assert_int_equal(spec_want(&o, &q, 1, 100, &c),
                     0); /* t(1) unknown: a step without drafts first */
    spec_cost_observe(&c, 1, 1.0);
    /* other sizes unknown: counted free, the smallest first, one more each time one is timed */
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 1);
    spec_cost_observe(&c, 2, 1.1);
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 2);
    spec_cost_observe(&c, 3, 1.2);
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 3);
    spec_cost_observe(&c, 4, 1.3);
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 4);
    /* fresh (p = 1): E(j) = j + 1; r = 1.1, 1.2, 1.3, 2.0: E / r = 1.8, 2.5, 3.1, 2.5 */
    spec_cost_observe(&c, 5, 2.0);
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 3);
    assert_int_equal(spec_want(&o, &q, 1, 2, &c), 2); /* within room */
    /* p from chains of acceptances: 2 of 4 accepted is 2 successes in 3 tries */
    spec_observe(&q, &st, 4, 2);
    assert_true(fabs(q.chain - (0.7 + 0.3 * 2.0 / 3.0)) < 1e-12);
    assert_true(fabs(q.accept - (0.7 + 0.3 * 0.5)) < 1e-12);
    /* p = 0.9: E = 1.9, 2.71, 3.44, 4.10 over r: 1.73, 2.26, 2.65, 2.05: k = 3 */
    q.chain = 0.9;
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 3);
    /* p = 0.5: E = 1.5, 1.75, 1.875, 1.94: 1.36, 1.46, 1.44, 0.97: k = 2 */
    q.chain = 0.5;
    assert_int_equal(spec_want(&o, &q, 1, 100, &c), 2);
    /* drafting costs more than it yields at every size: none, but a probe every 16 steps */
    struct spec_cost dear = {0};
    spec_cost_observe(&dear, 2, 1.0);
    for (int j = 1; j <= 4; j++) spec_cost_observe(&dear, 2 * (1 + j), 3.0 + j);
    q.chain = 1.0;
    int drafts = 0, probes = 0;
    for (int i = 0; i < 32; i++) {
        int k = spec_want(&o, &q, 2, 100, &dear); /* n = 2: t(4), t(6), ... over t(2) */
        drafts += k;
        probes += k > 0;
    }
    assert_int_equal(probes, 2);
    assert_int_equal(drafts, 2);
    /* measurements are moving averages; nonsense is ignored */
    spec_cost_observe(&c, 1, 2.0);
    assert_true(fabs(c.t[1] - 1.2) < 1e-12);
    spec_cost_observe(&c, 0, 1.0);
    spec_cost_observe(&c, SPEC_COST_T + 1, 1.0);
    spec_cost_observe(&c, 3, -1.0);
    assert_true(fabs(c.t[3] - 1.2) < 1e-12);
    spec_cost_observe(&c, 3, 100.0); /* a hiccup counts as 3x the average */
    assert_true(fabs(c.t[3] - (0.8 * 1.2 + 0.2 * 3.6)) < 1e-12);
    /* the average falls half way to a lower sample */
    spec_cost_observe(&c, 3, 0.2);
    assert_true(fabs(c.t[3] - (0.5 * (0.8 * 1.2 + 0.2 * 3.6) + 0.5 * 0.2)) < 1e-12);
    /* a size measured fewer than 3 times and not in the last SPEC_COST_CONFIRM steps counts
     * as free again, and its next sample replaces the old average: one slow first sample of
     * t(5) cannot keep k = 4 out for good */
    struct spec_cost st_c = {0};
    spec_cost_observe(&st_c, 1, 1.0);
    spec_cost_observe(&st_c, 2, 1.1);
    spec_cost_observe(&st_c, 3, 1.2);
    spec_cost_observe(&st_c, 4, 1.3);
    spec_cost_observe(&st_c, 5, 4.0);
    q.chain = 0.9;
    assert_int_equal(spec_want(&o, &q, 1, 100, &st_c), 3);
    for (int i = 0; i < SPEC_COST_CONFIRM; i++) { /* steps of 1..4 tokens only: t(5) goes stale */
        assert_int_equal(spec_want(&o, &q, 1, 100, &st_c), 3);
        spec_cost_observe(&st_c, 1 + i % 4, 1.0 + 0.1 * (i % 4));
    }
    spec_cost_observe(&st_c, 1, 1.0);
    assert_int_equal(spec_want(&o, &q, 1, 100, &st_c), 4); /* stale t(5): tried again */
    spec_cost_observe(&st_c, 5, 1.4);
    assert_true(fabs(st_c.t[5] - 1.4) < 1e-12);            /* replaced, not averaged with 4.0 */
    assert_int_equal(spec_want(&o, &q, 1, 100, &st_c), 4); /* 4.10 / 1.4 beats 3.44 / 1.3 */
    /* measured 3 times, a size stays current for SPEC_COST_STALE steps */
    spec_cost_observe(&st_c, 5, 1.4);
    spec_cost_observe(&st_c, 5, 1.4);
    for (int i = 0; i < SPEC_COST_STALE - 1; i++)
        spec_cost_observe(&st_c, 1 + i % 4, 1.0 + 0.1 * (i % 4));
    spec_cost_observe(&st_c, 5, 2.8); /* not stale: averaged */
    assert_true(fabs(st_c.t[5] - (0.8 * 1.4 + 0.2 * 2.8)) < 1e-12);
    drafter_free(d);
}

/* ---- greedy equality on SmolLM2 ---- */

#define N_GREEDY 32
#define SMOL_CTX 160

struct greedy_out {
    int32_t tok[N_GREEDY][600];
    float lp[N_GREEDY][600];
    int n[N_GREEDY];
    enum finish_reason fin[N_GREEDY];
};

/* Prompts that repeat themselves (so n-grams recur), of 8..47 tokens; every fourth one is
 * long enough (130..149) that generation runs into the 160-token context. */
static struct gen_request *greedy_req(int i) {
    uint64_t x = 77 + (uint64_t)i;
    struct gen_request *q = req_new();
    q->id = (uint64_t)i;
    int period = 3 + tu_rand_int(&x, 12),
        len = i % 4 == 3 ? 130 + tu_rand_int(&x, 20) : 8 + tu_rand_int(&x, 40);
    q->n_prompt = len;
    q->prompt = malloc(sizeof(int32_t) * (size_t)len);
    q->prompt[0] = 1000 + i;
    for (int k = 1; k < len; k++)
        q->prompt[k] = k < period ? (int32_t)(2000 + tu_rand_int(&x, 40000))
                                  : q->prompt[k - period + (k % period == 0)];
    q->max_tokens = i % 4 == 3 ? SMOL_CTX - len : 20 + i % 12;
    q->sp.temperature = 0;
    q->sp.logprobs = i % 2;
    q->sp.top_logprobs = i % 3 ? 2 : 0;
    q->sp.seed = 5;
    q->sp.has_seed = 1;
    return q;
}

static void greedy_collect(const int32_t *eog, int n_eog, struct drafter *d, struct greedy_out *o,
                           struct sched_stats *st_out) {
    struct sched_run r;
    run_open(&r, g_smol, 16, SMOL_CTX / 16 * 32, SMOL_CTX, 32, eog, n_eog, d, 5);
    struct gen_request *reqs[N_GREEDY];
    char err[512];
    for (int i = 0; i < N_GREEDY; i++) {
        reqs[i] = greedy_req(i);
        assert_int_equal(sched_submit(r.s, reqs[i], err), SUBMIT_OK);
    }
    drain(&r);
    for (int i = 0; i < N_GREEDY; i++) {
        o->n[i] = reqs[i]->n_events;
        o->fin[i] = reqs[i]->finish;
        for (int k = 0; k < o->n[i]; k++) {
            o->tok[i][k] = reqs[i]->events[k].token;
            o->lp[i][k] = reqs[i]->events[k].logprob +
                          (reqs[i]->events[k].n_top ? reqs[i]->events[k].top_logprobs[1] : 0);
        }
        req_unref(reqs[i]);
    }
    sched_run_assert_idle(&r);
    sched_stats(r.s, st_out);
    sched_run_close(&r);
}

static void assert_same_output(const struct greedy_out *a, const struct greedy_out *b) {
    for (int i = 0; i < N_GREEDY; i++) {
        assert_int_equal(a->fin[i], b->fin[i]);
        assert_int_equal(a->n[i], b->n[i]);
        assert_memory_equal(a->tok[i], b->tok[i], sizeof(int32_t) * (size_t)a->n[i]);
        for (int k = 0; k < a->n[i]; k++) assert_true(fabsf(a->lp[i][k] - b->lp[i][k]) < 1e-3f);
    }
}

static void test_greedy_equal(void **state) {
    (void)state;
    if (access(g_smol, R_OK) != 0) skip();
    static struct greedy_out ref0, ref, ngram, oracle;
    struct sched_stats st;
    const int32_t none[1] = {-1};
    greedy_collect(none, 0, NULL, &ref0, &st);
    /* end-of-generation tokens: ones the model emits mid-output in some requests */
    int32_t eog[4];
    for (int e = 0; e < 4; e++) eog[e] = ref0.tok[4 * e + 1][10 + e];
    greedy_collect(eog, 4, NULL, &ref, &st);
    int n_eos = 0, n_ctx = 0;
    for (int i = 0; i < N_GREEDY; i++) {
        n_eos += ref.fin[i] == FINISH_EOS && ref.n[i] < 20;
        struct gen_request *q = greedy_req(i);
        n_ctx += q->n_prompt + ref.n[i] == SMOL_CTX;
        req_unref(q);
    }
    assert_true(n_eos >= 4);
    assert_true(n_ctx >= 4);

    struct drafter *ng = drafter_ngram_new(1, 4);
    greedy_collect(eog, 4, ng, &ngram, &st);
    drafter_free(ng);
    assert_same_output(&ref, &ngram);
    assert_true(st.spec_accepted > 20 && st.spec_accepted < st.spec_drafted);
    printf("n-gram: drafted %ld, accepted %ld over %ld verifications\n", st.spec_drafted,
           st.spec_accepted, st.spec_verified);

    /* the oracle knows each request's prompt + output without speculation */
    static int32_t truth[N_GREEDY][600];
    static int n_truth[N_GREEDY];
    for (int i = 0; i < N_GREEDY; i++) {
        struct gen_request *q = greedy_req(i);
        memcpy(truth[i], q->prompt, sizeof(int32_t) * (size_t)q->n_prompt);
        memcpy(truth[i] + q->n_prompt, ref0.tok[i], sizeof(int32_t) * (size_t)ref0.n[i]);
        n_truth[i] = q->n_prompt + ref0.n[i];
        req_unref(q);
    }
    struct oracle orc = {.truth = &truth[0][0],
                         .stride = 600,
                         .n_truth = n_truth,
                         .n_req = N_GREEDY,
                         .vocab = 49152,
                         .corrupt = 0.1,
                         .rng = 3,
                         .eog = eog,
                         .n_eog = 4};
    struct drafter *od = oracle_drafter(&orc);
    greedy_collect(eog, 4, od, &oracle, &st);
    drafter_free(od);
    assert_same_output(&ref, &oracle);
    assert_true(orc.eog_inside > 0);
    assert_true(st.spec_accepted > st.spec_drafted / 2 && st.spec_accepted < st.spec_drafted);
    printf(
        "oracle: drafted %ld, accepted %ld; %d proposals with an end token before further drafts\n",
        st.spec_drafted, st.spec_accepted, orc.eog_inside);
}

/* ---- sampling exactness on the tiny model ---- */

#define TINY_V 128
#define N_RUNS 20000
/* Runs per sample: N_RUNS; 512 under the sanitizers (TPD_SANITIZE=1, set by tests/run for
 * the ASan pass), which check the same paths for memory errors while the Release pass checks
 * the statistics at full power. */
static int g_runs = N_RUNS;

/* Q(a, x), the regularized upper incomplete gamma function (series below a + 1, Lentz's
 * continued fraction above), for the chi-square tail: P(X > x) = Q(df / 2, x / 2). */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1;
    double lg = lgamma(a);
    if (x < a + 1) {
        double sum = 1 / a, term = sum;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-15) break;
        }
        return 1 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* Two-sample chi-square (equal sizes) over the cells key[0..n) of a and b: cells with fewer
 * than 10 pooled counts are merged into one. Returns the p-value. */
static double chi2_two_sample(const int *keys_a, const int *keys_b, int n, int n_cells) {
    int *ca = calloc((size_t)n_cells, sizeof *ca), *cb = calloc((size_t)n_cells, sizeof *cb);
    for (int i = 0; i < n; i++) {
        ca[keys_a[i]]++;
        cb[keys_b[i]]++;
    }
    double x2 = 0;
    int df = -1, ra = 0, rb = 0;
    for (int c = 0; c < n_cells; c++) {
        if (ca[c] + cb[c] < 10) {
            ra += ca[c];
            rb += cb[c];
            continue;
        }
        x2 += (double)(ca[c] - cb[c]) * (ca[c] - cb[c]) / (ca[c] + cb[c]);
        df++;
    }
    if (ra + rb > 0) {
        x2 += (double)(ra - rb) * (ra - rb) / (ra + rb);
        df++;
    }
    free(ca);
    free(cb);
    return df > 0 ? gamma_q(df / 2.0, x2 / 2) : 1;
}

struct setting {
    const char *name;
    float temperature, top_p, min_p, rep, freq;
    int top_k, bias;
};

/* The first 3 tokens of g_runs seeded runs (seeds from seed0) into out[run][3]. */
static void tiny_runs(const struct setting *st, struct drafter *d, uint64_t seed0,
                      int32_t (*out)[3], struct sched_stats *stats) {
    struct sched_run r;
    run_open(&r, g_tiny, 4, 4096, 64, 256, NULL, 0, d, 3);
    static int32_t bias_ids[2] = {5, 77};
    static float bias[2] = {2.5f, -1.5f};
    char err[512];
    for (int base = 0; base < g_runs; base += 2048) {
        int n = g_runs - base < 2048 ? g_runs - base : 2048;
        struct gen_request *reqs[2048];
        for (int i = 0; i < n; i++) {
            struct gen_request *q = req_new();
            q->id = (uint64_t)(base + i);
            q->n_prompt = 4;
            q->prompt = malloc(sizeof(int32_t) * 4);
            const int32_t prompt[4] = {3, 17, 3, 17};
            memcpy(q->prompt, prompt, sizeof prompt);
            q->max_tokens = 5; /* drafts at positions 1..3: chains of up to 3 verified rows */
            q->ignore_eos = 1;
            q->sp = (struct sampling_params){.temperature = st->temperature,
                                             .top_k = st->top_k,
                                             .top_p = st->top_p,
                                             .min_p = st->min_p,
                                             .repetition_penalty = st->rep,
                                             .frequency_penalty = st->freq,
                                             .seed = seed0 + (uint64_t)(base + i),
                                             .has_seed = 1};
            if (st->bias) {
                q->sp.n_logit_bias = 2;
                q->sp.logit_bias_ids = malloc(sizeof bias_ids);
                q->sp.logit_bias = malloc(sizeof bias);
                memcpy(q->sp.logit_bias_ids, bias_ids, sizeof bias_ids);
                memcpy(q->sp.logit_bias, bias, sizeof bias);
            }
            reqs[i] = q;
            assert_int_equal(sched_submit(r.s, q, err), SUBMIT_OK);
        }
        drain(&r);
        for (int i = 0; i < n; i++) {
            assert_int_equal(reqs[i]->n_events, 5);
            for (int k = 0; k < 3; k++) out[base + i][k] = reqs[i]->events[k].token;
            req_unref(reqs[i]);
        }
    }
    sched_run_assert_idle(&r);
    sched_stats(r.s, stats);
    sched_run_close(&r);
}

/* p-value of each of the 3 positions' marginals and of the joint (hashed into 4096
 * cells, then merged as chi2_two_sample does): the smallest. */
static double min_p_value(int32_t (*a)[3], int32_t (*b)[3]) {
    static int ka[N_RUNS], kb[N_RUNS];
    double pmin = 1;
    for (int pos = 0; pos < 4; pos++) {
        for (int i = 0; i < g_runs; i++) {
            if (pos < 3) {
                ka[i] = a[i][pos];
                kb[i] = b[i][pos];
            } else {
                ka[i] = (a[i][0] * TINY_V + a[i][1]) * TINY_V + a[i][2];
                kb[i] = (b[i][0] * TINY_V + b[i][1]) * TINY_V + b[i][2];
            }
        }
        double p = chi2_two_sample(ka, kb, g_runs, pos < 3 ? TINY_V : TINY_V * TINY_V * TINY_V);
        if (getenv("SPEC_DEBUG")) {
            printf("pos %d p %.4g\n", pos, p);
            if (pos < 3) {
                int ca[TINY_V] = {0}, cb[TINY_V] = {0};
                for (int i = 0; i < g_runs; i++) ca[ka[i]]++, cb[kb[i]]++;
                for (int v = 0; v < TINY_V; v++)
                    if (ca[v] + cb[v] > 200) printf("  tok %d: %d %d\n", v, ca[v], cb[v]);
            }
        }
        pmin = p < pmin ? p : pmin;
    }
    return pmin;
}

static void test_sampling_exact(void **state) {
    (void)state;
    /* point-mass drafts: the runs with speculation use other seeds than those without (with
     * the same seeds they would give the same tokens, see sampler_verify) */
    static const struct setting settings[] = {
        {"temperature 0.7", 0.7f, 1, 0, 1, 0, 0, 0},
        {"top_k 5", 1.0f, 1, 0, 1, 0, 5, 0},
        {"top_p 0.8", 1.0f, 0.8f, 0, 1, 0, 0, 0},
        {"logit bias", 0.9f, 1, 0, 1, 0, 0, 1},
        {"penalties + min_p", 1.0f, 1, 0.05f, 1.3f, 0.8f, 0, 0},
    };
    static int32_t plain[N_RUNS][3], spec[N_RUNS][3];
    for (size_t si = 0; si < sizeof settings / sizeof *settings; si++) {
        const struct setting *st = &settings[si];
        struct sched_stats stats;
        tiny_runs(st, NULL, 1, plain, &stats);
        for (int stochastic = 1; stochastic >= (si % 2 ? 1 : 0);
             stochastic--) { /* point mass: 3 of the 5 */
            struct randd rd = {.vocab = TINY_V, .rng = 99 + si};
            struct drafter *d = random_drafter(&rd, stochastic);
            tiny_runs(st, d, 1000000, spec, &stats);
            drafter_free(d);
            double p = min_p_value(plain, spec);
            printf("%-18s %s drafter: drafted %ld, accepted %ld; smallest p = %.4f\n", st->name,
                   stochastic ? "stochastic" : "point-mass", stats.spec_drafted,
                   stats.spec_accepted, p);
            assert_true(stats.spec_accepted > 0 && stats.spec_accepted < stats.spec_drafted);
            assert_true(p > 0.001);
        }
    }
    /* a deterministic drafter keeps seeded sampling reproducible: the same seeds give the very
     * tokens of the runs without speculation (here with penalties over the accepted drafts) */
    {
        struct sched_stats stats;
        static int32_t same[N_RUNS][3];
        tiny_runs(&settings[4], NULL, 1, plain, &stats);
        struct randd rd = {.vocab = TINY_V, .rng = 5};
        struct drafter *d = random_drafter(&rd, 0);
        tiny_runs(&settings[4], d, 1, same, &stats);
        drafter_free(d);
        assert_true(stats.spec_accepted > 0);
        assert_memory_equal(plain, same, sizeof same[0] * (size_t)g_runs);
    }
    /* the check has power: a drafter that misreports its q (claims uniform) is caught (at
     * full N_RUNS only: the sanitizer pass's smaller samples are not meant to have it) */
    if (g_runs < N_RUNS) return;
    struct sched_stats stats;
    tiny_runs(&settings[0], NULL, 1, plain, &stats);
    struct randd rd = {.vocab = TINY_V, .rng = 7, .lie = 1};
    struct drafter *d = random_drafter(&rd, 1);
    tiny_runs(&settings[0], d, 1000000, spec, &stats);
    drafter_free(d);
    double p = min_p_value(plain, spec);
    printf("negative control (q misreported): smallest p = %.3g\n", p);
    assert_true(p < 0.001);
}

/* ---- KV accounting under random traffic ---- */

/* The tokens request i (a prompt from seed i) gets alone, greedy, without speculation. */
static struct gen_request *kv_req(int i) {
    uint64_t x = 5000 + (uint64_t)i;
    struct gen_request *q = req_new();
    q->id = (uint64_t)i;
    q->n_prompt = 1 + tu_rand_int(&x, 30);
    q->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt);
    int period = 1 + tu_rand_int(&x, 5);
    for (int k = 0; k < q->n_prompt; k++)
        q->prompt[k] = k < period ? tu_rand_int(&x, TINY_V) : q->prompt[k - period];
    q->max_tokens = 1 + tu_rand_int(&x, 40);
    q->ignore_eos = 1;
    q->sp.temperature = 0;
    return q;
}

#define KV_REQS 400

static void test_kv_accounting(void **state) {
    (void)state;
    static int32_t want[KV_REQS][64], truth[KV_REQS][128];
    static int n_truth[KV_REQS];
    struct sched_run r;
    char err[512];
    run_open(&r, g_tiny, 4, 4096, 128, 64, NULL, 0, NULL, 0);
    struct gen_request *reqs[KV_REQS];
    for (int i = 0; i < KV_REQS; i++) {
        reqs[i] = kv_req(i);
        assert_int_equal(sched_submit(r.s, reqs[i], err), SUBMIT_OK);
    }
    drain(&r);
    for (int i = 0; i < KV_REQS; i++) {
        assert_int_equal(reqs[i]->n_events, reqs[i]->max_tokens);
        for (int k = 0; k < reqs[i]->n_events; k++) want[i][k] = reqs[i]->events[k].token;
        memcpy(truth[i], reqs[i]->prompt, sizeof(int32_t) * (size_t)reqs[i]->n_prompt);
        memcpy(truth[i] + reqs[i]->n_prompt, want[i], sizeof(int32_t) * (size_t)reqs[i]->n_events);
        n_truth[i] = reqs[i]->n_prompt + reqs[i]->n_events;
        req_unref(reqs[i]);
    }
    sched_run_close(&r);

    /* 24 blocks of 4 tokens for up to 16 sequences of up to 70 tokens: preemptions; drafts
     * from an oracle that corrupts 30% of its tokens: accepted runs of every length */
    struct oracle orc = {.truth = &truth[0][0],
                         .stride = 128,
                         .n_truth = n_truth,
                         .n_req = KV_REQS,
                         .vocab = TINY_V,
                         .corrupt = 0.3,
                         .rng = 9};
    struct drafter *d = oracle_drafter(&orc);
    run_open(&r, g_tiny, 4, 24, 128, 16, NULL, 0, d, 4);
    uint64_t x = 42;
    int next = 0, n_cancel = 0;
    for (int step = 0; step < 1000; step++) {
        for (int n = tu_rand_int(&x, 3); n > 0 && next < KV_REQS; n--) {
            reqs[next] = kv_req(next);
            assert_int_equal(sched_submit(r.s, reqs[next], err), SUBMIT_OK);
            next++;
        }
        if (next > 0 && tu_rand_int(&x, 8) == 0) { /* cancel a random request, running or not */
            struct gen_request *c = reqs[tu_rand_int(&x, next)];
            if (c->finish == FINISH_NONE) {
                req_cancel(c);
                n_cancel++;
            }
        }
        sched_step(r.s, 0);
        struct sched_stats st;
        sched_stats(r.s, &st);
        assert_true(st.kv_blocks_used >= 0 && st.kv_blocks_used <= 24);
    }
    drain(&r);
    struct sched_stats st;
    sched_stats(r.s, &st);
    sched_run_assert_idle(&r);
    assert_true(st.preemptions > 0);
    assert_true(st.spec_accepted > 0 && st.spec_accepted < st.spec_drafted);
    printf("%d requests, %d cancelled, %ld preemptions, drafted %ld, accepted %ld\n", next,
           n_cancel, st.preemptions, st.spec_drafted, st.spec_accepted);
    int n_full = 0;
    for (int i = 0; i < next; i++) {
        struct gen_request *q = reqs[i];
        assert_true(q->finish == FINISH_LENGTH || q->finish == FINISH_CANCELLED);
        if (q->finish == FINISH_LENGTH) assert_int_equal(q->n_events, q->max_tokens);
        n_full += q->finish == FINISH_LENGTH;
        for (int k = 0; k < q->n_events; k++) assert_int_equal(q->events[k].token, want[i][k]);
        req_unref(q);
    }
    assert_true(n_full > next / 2);
    sched_run_close(&r);
    drafter_free(d);
}

int main(int argc, char **argv) {
    tu_source_path(g_smol, sizeof g_smol, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    const char *san = getenv("TPD_SANITIZE");
    if (san && strcmp(san, "1") == 0) g_runs = 512;
    assert_int_equal(tu_tmpdir_setup(NULL), 0);
    snprintf(g_tiny, sizeof g_tiny, "%s", tm_write_random_gguf("tiny.gguf"));
    comm_init(&g_comm, &argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_lookup),   cmocka_unit_test(test_adaptive_k),
        cmocka_unit_test(test_cost_k),         cmocka_unit_test(test_kv_accounting),
        cmocka_unit_test(test_sampling_exact), cmocka_unit_test(test_greedy_equal),
    };
    if (getenv("TEST_FILTER")) cmocka_set_test_filter(getenv("TEST_FILTER"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    comm_finalize(&g_comm);
    tu_tmpdir_teardown(NULL);
    return rc;
}
