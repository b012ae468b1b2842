// link: tpd_parallel
/* The sharding plan: for many model shapes and every tp from 1 to n_heads, the ranks'
 * pieces cover each query head, MLP column and vocab row exactly once, each rank holds
 * the KV heads its query heads use, and Wo column spans are block-aligned and contain
 * the rank's heads; pipeline stages cover the layers near-evenly in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "parallel/shard.h"

static struct model_hparams shape(int n_heads, int n_kv, int hd, int ffn, int vocab) {
    struct model_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_heads = n_heads;
    hp.n_kv_heads = n_kv;
    hp.head_dim = hd;
    hp.dim = n_heads * hd;
    hp.ffn_dim = ffn;
    hp.vocab_size = vocab;
    return hp;
}

static void check_all_tp(const struct model_hparams *hp, int wo_block, int down_block) {
    char err[512];
    int group = hp->n_heads / hp->n_kv_heads;
    for (int tp = 1; tp <= hp->n_heads; tp++) {
        int next_q = 0, next_ffn = 0, next_vocab = 0, min_q = 1 << 30, max_q = 0;
        for (int r = 0; r < tp; r++) {
            struct shard_plan sp;
            assert_int_equal(shard_plan_make(&sp, hp, tp, r, wo_block, down_block, err), 0);
            assert_int_equal(sp.q_head0, next_q); /* contiguous, in rank order */
            assert_true(sp.n_q >= 1);
            next_q += sp.n_q;
            if (sp.n_q < min_q) min_q = sp.n_q;
            if (sp.n_q > max_q) max_q = sp.n_q;
            for (int h = sp.q_head0; h < sp.q_head0 + sp.n_q; h++) {
                int kv = h / group;
                assert_true(kv >= sp.kv_head0 && kv < sp.kv_head0 + sp.n_kv);
            }
            assert_true(sp.kv_head0 + sp.n_kv <= hp->n_kv_heads);
            assert_int_equal(sp.ffn0, next_ffn);
            assert_int_equal(sp.ffn0 % down_block, 0);
            assert_int_equal(sp.n_ffn % down_block, 0);
            next_ffn += sp.n_ffn;
            assert_int_equal(sp.vocab0, next_vocab);
            next_vocab += sp.n_vocab;
            assert_int_equal(sp.wo_col0 % wo_block, 0);
            assert_int_equal(sp.wo_ncols % wo_block, 0);
            assert_int_equal(sp.wo_col0 + sp.wo_pad, sp.q_head0 * hp->head_dim);
            assert_true(sp.wo_pad + sp.n_q * hp->head_dim <= sp.wo_ncols);
            assert_true(sp.wo_col0 + sp.wo_ncols <= hp->n_heads * hp->head_dim);
        }
        assert_int_equal(next_q, hp->n_heads);
        assert_true(max_q - min_q <= 1); /* near-even */
        assert_int_equal(next_ffn, hp->ffn_dim);
        assert_int_equal(next_vocab, hp->vocab_size);
    }
}

static void test_smollm2_shapes(void **state) {
    (void)state;
    struct model_hparams hp = shape(9, 3, 64, 1536, 49152);
    check_all_tp(&hp, 32, 32);  /* Q4_1 */
    check_all_tp(&hp, 1, 1);    /* F32 */
    check_all_tp(&hp, 64, 256); /* head-sized and k-quant blocks */
}

static void test_llama_70b_shapes(void **state) {
    (void)state;
    struct model_hparams hp = shape(64, 8, 128, 28672, 128256);
    check_all_tp(&hp, 256, 256);
    hp = shape(7, 1, 32, 96, 301); /* MQA, odd everything */
    check_all_tp(&hp, 32, 32);
}

static void test_refuses_tp_beyond_heads(void **state) {
    (void)state;
    struct model_hparams hp = shape(9, 3, 64, 1536, 49152);
    struct shard_plan sp;
    char err[512];
    assert_int_equal(shard_plan_make(&sp, &hp, 10, 0, 32, 32, err), -1);
    assert_non_null(strstr(err, "1..9"));
    assert_int_equal(shard_plan_make(&sp, &hp, 0, 0, 32, 32, err), -1);
}

static void test_kv_replicated_when_group_straddles(void **state) {
    (void)state;
    struct model_hparams hp = shape(9, 3, 64, 1536, 49152);
    struct shard_plan a, b;
    char err[512];
    /* tp 2: ranks get heads 0-3 and 4-8; head 3 and 4..5 share KV head 1 */
    assert_int_equal(shard_plan_make(&a, &hp, 2, 0, 32, 32, err), 0);
    assert_int_equal(shard_plan_make(&b, &hp, 2, 1, 32, 32, err), 0);
    assert_int_equal(a.n_q, 4);
    assert_int_equal(b.n_q, 5);
    assert_int_equal(a.kv_head0 + a.n_kv - 1, 1);
    assert_int_equal(b.kv_head0, 1);
}

static double stage_cost(int n_layers, int pp, int n_last, double head) {
    double others = pp > 1 ? (n_layers - n_last + pp - 2) / (pp - 1) : 0, last = n_last + head;
    return others > last ? others : last;
}

/* Pipeline stages: for every layer count up to 130, every pp up to it and LM head costs
 * from none to 14 layers' worth, the stages cover each layer exactly once in order, exactly
 * the first and the last are marked so, no other size of the last stage makes the most
 * loaded stage cheaper (checked against every alternative), the other stages differ by at
 * most one with stage 0 never the larger, and with no head cost all sizes differ by at most
 * one. */
static void test_stages_cover_layers_balanced(void **state) {
    (void)state;
    struct shard_plan sp;
    char err[512];
    const double heads[] = {0, 0.66, 1.3, 8.0, 13.6};
    for (int h = 0; h < 5; h++)
        for (int n = 1; n <= 130; n++)
            for (int pp = 1; pp <= n; pp++) {
                int next = 0, size[130], lo = n, hi = 0;
                for (int s = 0; s < pp; s++) {
                    assert_int_equal(shard_stage(&sp, n, pp, s, heads[h], err), 0);
                    assert_int_equal(sp.layer0, next);
                    assert_true(sp.n_layers >= 1);
                    assert_int_equal(sp.first, s == 0);
                    assert_int_equal(sp.last, s == pp - 1);
                    size[s] = sp.n_layers;
                    next += sp.n_layers;
                    if (s < pp - 1 || pp == 1) {
                        lo = sp.n_layers < lo ? sp.n_layers : lo;
                        hi = sp.n_layers > hi ? sp.n_layers : hi;
                    }
                }
                assert_int_equal(next, n);
                assert_true(hi - lo <= 1);
                assert_int_equal(size[0], lo);
                const double got = stage_cost(n, pp, size[pp - 1], heads[h]);
                for (int alt = 1; pp > 1 && alt <= n - (pp - 1); alt++)
                    assert_true(stage_cost(n, pp, alt, heads[h]) >= got - 1e-9);
                const int last = size[pp - 1];
                if (heads[h] == 0)
                    assert_true((last > hi ? last : hi) - (last < lo ? last : lo) <= 1);
            }
    /* SmolLM2 (30 layers, LM head 49152 x 576 = 8.0 layers' worth) at pp 2: 19 + 11, at pp
     * 4: 9, 10, 9, 2; with no head: 7, 8, 7, 8. Llama-3.1-405B (126 layers, head 0.66) at
     * pp 2: 63 + 63. */
    assert_true(shard_head_layers(49152.0 * 576, 576.0 * 960 + 576.0 * 576 + 3.0 * 576 * 1536) ==
                8.0);
    assert_int_equal(shard_stage(&sp, 30, 2, 1, 8.0, err), 0);
    assert_int_equal(sp.layer0, 19);
    assert_int_equal(sp.n_layers, 11);
    const int smol4[4] = {9, 10, 9, 2}, even4[4] = {7, 8, 7, 8};
    for (int s = 0, at = 0, at0 = 0; s < 4; at += smol4[s], at0 += even4[s], s++) {
        assert_int_equal(shard_stage(&sp, 30, 4, s, 8.0, err), 0);
        assert_int_equal(sp.layer0, at);
        assert_int_equal(sp.n_layers, smol4[s]);
        assert_int_equal(shard_stage(&sp, 30, 4, s, 0, err), 0);
        assert_int_equal(sp.layer0, at0);
        assert_int_equal(sp.n_layers, even4[s]);
    }
    assert_int_equal(shard_stage(&sp, 126, 2, 1, 0.66, err), 0);
    assert_int_equal(sp.layer0, 63);
    assert_int_equal(shard_stage(&sp, 2, 3, 0, 0, err), -1);
    assert_non_null(strstr(err, "pp must be one of 1..2"));
    assert_int_equal(shard_stage(&sp, 30, 0, 0, 0, err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_shapes),
        cmocka_unit_test(test_llama_70b_shapes),
        cmocka_unit_test(test_refuses_tp_beyond_heads),
        cmocka_unit_test(test_kv_replicated_when_group_straddles),
        cmocka_unit_test(test_stages_cover_layers_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
