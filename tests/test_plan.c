// link: tpd_parallel
/* parallel/plan: a step's logits rows packed for the last stage's send to rank 0 and put
 * back in place (plan_rows_pack / plan_rows_unpack): for random mixes of light rows (their
 * candidates only) and whole rows, odd vocabulary sizes and k from 1 to 64, every light row's
 * 2k floats and every whole row come back where they were, bit for bit, and the packed size
 * is what the rows hold. Also plan_add's default (whole rows) and plan_clear's reset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "parallel/plan.h"

static uint64_t lcg = 88172645463325252ull;
static uint32_t next_u32(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(lcg >> 33);
}

static void test_pack_unpack(void **state) {
    (void)state;
    struct step_plan p;
    plan_init(&p);
    int32_t blocks[1] = {0}, tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int rounds = 0;
    for (int round = 0; round < 400; round++) {
        const int vocab = 129 + (int)(next_u32() % 700), n_seqs = 1 + (int)(next_u32() % 12);
        const int k = 1 + (int)(next_u32() % (vocab / 2 < 64 ? vocab / 2 : 64));
        plan_clear(&p);
        assert_int_equal(p.n_cands, 0);
        for (int q = 0; q < n_seqs; q++) {
            const int n = 1 + (int)(next_u32() % 4), all = next_u32() % 2;
            const int row0 = p.n_out;
            plan_add(&p, tok, n, 0, blocks, 1, all);
            for (int r = row0; r < p.n_out; r++)
                assert_int_equal(p.out_full[r], 1); /* whole by default */
            if (next_u32() % 3) {
                for (int r = row0; r < p.n_out; r++) p.out_full[r] = 0;
                p.n_cands = k;
            }
        }
        const size_t total = (size_t)p.n_out * vocab;
        float *rows = malloc(sizeof *rows * total), *orig = malloc(sizeof *orig * total);
        for (size_t i = 0; i < total; i++) rows[i] = orig[i] = (float)next_u32();
        size_t want = 0;
        for (int r = 0; r < p.n_out; r++)
            want += p.n_cands > 0 && !p.out_full[r] ? 2 * (size_t)k : (size_t)vocab;
        assert_int_equal(plan_rows_pack(&p, rows, vocab), want);
        plan_rows_unpack(p.n_out, p.n_cands, p.out_full, rows, vocab);
        for (int r = 0; r < p.n_out; r++) {
            const size_t len = p.n_cands > 0 && !p.out_full[r] ? 2 * (size_t)k : (size_t)vocab;
            assert_memory_equal(rows + (size_t)r * vocab, orig + (size_t)r * vocab,
                                sizeof *rows * len);
        }
        free(rows);
        free(orig);
        rounds++;
    }
    plan_free(&p);
    assert_int_equal(rounds, 400);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pack_unpack)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
