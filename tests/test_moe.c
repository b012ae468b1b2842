// link: tpd_parallel
/* The experts' routing and grouping (parallel/moe.h) and their split over ranks
 * (shard_plan_moe): the k largest logits with ties to the lower id and NaN last, softmax
 * weights over all experts renormalized or not, every (token, expert) pair grouped under
 * exactly one rank's expert in token order, and the ranks' expert ranges and column slices
 * covering every expert and column once. (Logits against the float64 reference:
 * tests/py/test_moe.py.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "parallel/moe.h"
#include "parallel/shard.h"

static void test_route_ties_and_weights(void **state) {
    (void)state;
    /* token 0: experts 1 and 3 tie for the top; token 1: a NaN and a tie for second */
    const float logits[2][5] = {{0.5f, 2.0f, -1.0f, 2.0f, 1.0f}, {NAN, 0.25f, 3.0f, 0.25f, -2.0f}};
    int32_t ids[2 * 3];
    float w[2 * 3];
    moe_route(&logits[0][0], 5, 2, 5, 3, 1, ids, w);
    const int32_t want[6] = {1, 3, 4, 2, 1, 3};
    assert_memory_equal(ids, want, sizeof want);
    for (int t = 0; t < 2; t++) {
        double sum = 0;
        for (int j = 0; j < 3; j++) sum += w[t * 3 + j];
        assert_true(fabs(sum - 1.0) < 1e-6); /* renormalized over the chosen */
    }
    assert_true(w[0] == w[1]); /* the tied pair weighs the same */
    /* without renormalization: the softmax over all five (NaN counts as nothing) */
    moe_route(&logits[0][0], 5, 2, 5, 3, 0, ids, w);
    double z = exp(0.5) + 2 * exp(2.0) + exp(-1.0) + exp(1.0);
    assert_true(fabs(w[0] - exp(2.0) / z) < 1e-6);
    assert_true(fabs(w[2] - exp(1.0) / z) < 1e-6);
}

static void test_route_all_nan(void **state) {
    (void)state;
    const float logits[3] = {NAN, NAN, NAN};
    int32_t ids[2];
    float w[2];
    moe_route(logits, 3, 1, 3, 2, 1, ids, w);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_true(w[0] == 0.0f && w[1] == 0.0f); /* contributes nothing, never NaN */
}

/* Every pair lands once: under the rank that holds its expert, in token order within each
 * expert; pos -1 on the other ranks. */
static void test_group_over_ranks(void **state) {
    (void)state;
    enum { T = 7, K = 2, E = 5 };
    const int32_t ids[T * K] = {0, 4, 4, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1};
    for (int tp = 1; tp <= 4; tp++) {
        int seen[T * K] = {0};
        for (int r = 0; r < tp; r++) {
            int e0, ne;
            shard_split(E, tp, r, &e0, &ne);
            int32_t count[E + 1], start[E + 1], rows[T * K], pos[T * (K + 1)];
            int n = moe_group(ids, T, K, K + 1, e0, ne, count, start, rows, pos);
            int total = 0;
            for (int e = 0; e < ne; e++) {
                assert_int_equal(start[e], total);
                total += count[e];
                for (int i = 1; i < count[e]; i++)
                    assert_true(rows[start[e] + i - 1] < rows[start[e] + i]);
            }
            assert_int_equal(n, total);
            for (int t = 0; t < T; t++)
                for (int j = 0; j < K; j++) {
                    int32_t p = pos[t * (K + 1) + j], e = ids[t * K + j];
                    if (e < e0 || e >= e0 + ne) {
                        assert_int_equal(p, -1);
                        continue;
                    }
                    assert_true(p >= start[e - e0] && p < start[e - e0] + count[e - e0]);
                    assert_int_equal(rows[p], t);
                    seen[t * K + j]++;
                }
        }
        for (int i = 0; i < T * K; i++) assert_int_equal(seen[i], 1);
    }
}

/* Expert ranges (ep) and column slices (tp) cover every expert and column once, at any tp,
 * including more ranks than experts or than blocks. */
static void test_split(void **state) {
    (void)state;
    struct model_hparams hp = {.n_heads = 8,
                               .n_kv_heads = 8,
                               .head_dim = 8,
                               .dim = 64,
                               .ffn_dim = 64,
                               .vocab_size = 100,
                               .n_experts = 5,
                               .n_experts_used = 2,
                               .expert_ffn_dim = 96,
                               .shexp_ffn_dim = 64};
    char err[256];
    for (int tp = 1; tp <= 8; tp++)
        for (int ep = 0; ep < 2; ep++) {
            int next_e = 0, cols = 0, scols = 0;
            for (int r = 0; r < tp; r++) {
                struct shard_plan sp;
                assert_int_equal(shard_plan_make(&sp, &hp, tp, r, 1, 1, err), 0);
                assert_int_equal(shard_plan_moe(&sp, &hp, ep, 32, 32, err), 0);
                assert_int_equal(sp.exp0, ep ? next_e : 0);
                next_e += sp.n_exp;
                if (ep) assert_int_equal(sp.n_effn, 96);
                if (!ep) assert_int_equal(sp.effn0, cols);
                cols += sp.n_effn;
                assert_int_equal(sp.sffn0, scols);
                scols += sp.n_sffn;
                assert_true(sp.effn0 % 32 == 0 && sp.n_effn % 32 == 0);
            }
            assert_int_equal(next_e, ep ? 5 : 5 * tp);
            assert_int_equal(cols, ep ? 96 * tp : 96);
            assert_int_equal(scols, 64);
        }
    struct shard_plan sp;
    assert_int_equal(shard_plan_make(&sp, &hp, 2, 0, 1, 1, err), 0);
    assert_int_equal(shard_plan_moe(&sp, &hp, 0, 64, 32, err), -1); /* 64 does not divide 96 */
    assert_non_null(strstr(err, "ffn_down_exps"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_ties_and_weights),
        cmocka_unit_test(test_route_all_nan),
        cmocka_unit_test(test_group_over_ranks),
        cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
