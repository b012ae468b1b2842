// link: tpd_parallel
/* kernels/att_tiles.h, the prefill attention's tile planner: a hand-made ragged step (decode
 * tokens, short and long chunks) gives the tiles expected one by one; steps that break
 * plan_add's layout (a sequence's tokens apart, gaps and repeats in positions) still give
 * tiles of one sequence's consecutive positions; and thousands of random steps built with
 * plan_add itself (decode tokens mixed with chunks of up to 300 tokens at any offset, tile
 * sizes 1, 7 and 64) are checked for: every token in exactly one tile, each tile one
 * sequence at consecutive positions, at most max_rows tokens, its keys its last position + 1,
 * a decode token alone, as few tiles as the layout allows (ceil(n / max_rows) a sequence),
 * and att_tiles_order's order (most keys first, then token order; the same tiles). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/att_tiles.h"
#include "parallel/plan.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static int rnd_in(int lo, int hi) {
    return lo + (int)(rnd() % (uint32_t)(hi - lo + 1));
} /* [lo, hi] */

/* The properties every plan has, whatever the arrays hold: every token in exactly one tile,
 * each tile 1..max_rows tokens of one sequence at consecutive positions, keys = its last
 * position + 1, and tiles in token order (att_tiles_cut's order). */
static void check_tiles(const int32_t *seq_of, const int32_t *pos, int T, int max_rows,
                        const struct att_tile *tl, int n) {
    int *seen = calloc((size_t)T + 1, sizeof *seen);
    assert_non_null(seen);
    assert_true(n >= (T > 0) && n <= T);
    for (int i = 0; i < n; i++) {
        assert_true(tl[i].n >= 1 && tl[i].n <= max_rows);
        assert_true(tl[i].t0 >= 0 && tl[i].t0 + tl[i].n <= T);
        if (i) assert_int_equal(tl[i].t0, tl[i - 1].t0 + tl[i - 1].n);
        for (int k = 0; k < tl[i].n; k++) {
            const int t = tl[i].t0 + k;
            seen[t]++;
            assert_int_equal(seq_of[t], seq_of[tl[i].t0]);
            assert_int_equal(pos[t], pos[tl[i].t0] + k);
        }
        assert_int_equal(tl[i].keys, pos[tl[i].t0 + tl[i].n - 1] + 1);
    }
    for (int t = 0; t < T; t++) assert_int_equal(seen[t], 1);
    free(seen);
}

/* att_tiles_order's result: the same tiles as cut (tokens T), most keys first, then token order. */
static void check_order(const struct att_tile *cut, const struct att_tile *ord, int n, int T) {
    for (int i = 1; i < n; i++) {
        assert_true(ord[i - 1].keys >= ord[i].keys);
        if (ord[i - 1].keys == ord[i].keys) assert_true(ord[i - 1].t0 < ord[i].t0);
    }
    int *at = malloc(sizeof *at * ((size_t)T + 1)); /* cut tile starting at token t, or -1 */
    assert_non_null(at);
    for (int t = 0; t < T; t++) at[t] = -1;
    for (int i = 0; i < n; i++) at[cut[i].t0] = i;
    for (int i = 0; i < n; i++) { /* each ordered tile a cut one, once (n of them, t0 distinct) */
        assert_true(ord[i].t0 >= 0 && ord[i].t0 < T && at[ord[i].t0] >= 0);
        const struct att_tile *c = &cut[at[ord[i].t0]];
        assert_int_equal(ord[i].n, c->n);
        assert_int_equal(ord[i].keys, c->keys);
        at[ord[i].t0] = -1;
    }
    free(at);
}

/* A step as the scheduler makes them: a decode token of sequence 0 at position 99, a 5-token
 * chunk (positions 10..14), a first token (position 0), a 130-token chunk at 200..329 (two
 * full tiles and a 2-token one), a decode token at 4095. */
static void test_mixed_step(void **state) {
    (void)state;
    int32_t seq_of[138], pos[138];
    int T = 0;
    seq_of[T] = 0, pos[T++] = 99;
    for (int p = 10; p < 15; p++) seq_of[T] = 1, pos[T++] = p;
    seq_of[T] = 2, pos[T++] = 0;
    for (int p = 200; p < 330; p++) seq_of[T] = 3, pos[T++] = p;
    seq_of[T] = 4, pos[T++] = 4095;
    assert_int_equal(T, 138);
    struct att_tile tl[138];
    const int n = att_tiles_cut(seq_of, pos, T, 64, tl);
    const struct att_tile want[] = {{0, 1, 100},   {1, 5, 15},    {6, 1, 1},     {7, 64, 264},
                                    {71, 64, 328}, {135, 2, 330}, {137, 1, 4096}};
    assert_int_equal(n, 7);
    for (int i = 0; i < n; i++) {
        assert_int_equal(tl[i].t0, want[i].t0);
        assert_int_equal(tl[i].n, want[i].n);
        assert_int_equal(tl[i].keys, want[i].keys);
    }
    check_tiles(seq_of, pos, T, 64, tl, n);
    struct att_tile ord[7];
    memcpy(ord, tl, sizeof ord);
    att_tiles_order(ord, n);
    const int32_t order[] = {137, 135, 71, 7, 0, 1, 6}; /* keys 4096, 330, 328, 264, 100, 15, 1 */
    for (int i = 0; i < n; i++) assert_int_equal(ord[i].t0, order[i]);
    check_order(tl, ord, n, T);

    assert_int_equal(att_tiles_cut(seq_of, pos, 0, 64, tl), 0); /* no tokens, no tiles */
    att_tiles_order(tl, 0);
}

/* Arrays that break plan_add's layout still give tiles the flash kernel can take: a
 * sequence's tokens apart (0, 1, 0), a gap and a repeat in positions, positions falling. */
static void test_unusual_layouts(void **state) {
    (void)state;
    const int32_t seq_of[] = {0, 0, 1, 0, 0, 2, 2, 2, 2, 3, 3};
    const int32_t pos[] = {5, 6, 9, 7, 8, 0, 2, 2, 3, 9, 8};
    const int T = 11;
    struct att_tile tl[11];
    const int n = att_tiles_cut(seq_of, pos, T, 64, tl);
    /* {5,6} {9} {7,8} {0} {2} {2,3} {9} {8} */
    const int32_t t0[] = {0, 2, 3, 5, 6, 7, 9, 10}, len[] = {2, 1, 2, 1, 1, 2, 1, 1};
    assert_int_equal(n, 8);
    for (int i = 0; i < n; i++) {
        assert_int_equal(tl[i].t0, t0[i]);
        assert_int_equal(tl[i].n, len[i]);
    }
    check_tiles(seq_of, pos, T, 64, tl, n);
    for (int rows = 1; rows <= 3; rows++) {
        const int m = att_tiles_cut(seq_of, pos, T, rows, tl);
        check_tiles(seq_of, pos, T, rows, tl, m);
    }
}

/* Random steps laid out by plan_add: each sequence decode (one token, most of them) or a chunk
 * of 2..300 tokens from any position, with tiles of 1, 7 or 64 rows. */
static void test_random_plans(void **state) {
    (void)state;
    struct step_plan p;
    plan_init(&p);
    int32_t tokens[300], blocks[1] = {0};
    for (int k = 0; k < 300; k++) tokens[k] = k;
    struct att_tile *tl = NULL, *ord = NULL;
    long n_tiles = 0, n_decode = 0;
    for (int iter = 0; iter < 3000; iter++) {
        plan_clear(&p);
        const int n_seqs = rnd_in(1, 40);
        for (int s = 0; s < n_seqs; s++) {
            const int n = rnd() % 8 < 5 ? 1 : rnd() % 4 == 0 ? rnd_in(2, 300) : rnd_in(2, 70);
            plan_add(&p, tokens, n, rnd_in(0, 5000) * (rnd() % 5 != 0), blocks, 0, 0);
        }
        const int T = p.n_tokens, rows = (const int[]){1, 7, 64}[iter % 3];
        tl = realloc(tl, sizeof *tl * (size_t)T);
        ord = realloc(ord, sizeof *ord * (size_t)T);
        assert_true(tl && ord);
        const int n = att_tiles_cut(p.seq_of, p.pos, T, rows, tl);
        check_tiles(p.seq_of, p.pos, T, rows, tl, n);
        /* the layout's fewest: ceil(n / rows) per sequence, cut at its start + k rows; a
         * decode token (its sequence's only one) alone */
        int want = 0;
        for (int s = 0; s < p.n_seqs; s++) {
            int first = -1, count = 0;
            for (int t = 0; t < T; t++)
                if (p.seq_of[t] == s) {
                    if (first < 0) first = t;
                    count++;
                }
            want += (count + rows - 1) / rows;
            if (count == 1) {
                n_decode++;
                int alone = 0;
                for (int i = 0; i < n; i++) alone += tl[i].t0 == first && tl[i].n == 1;
                assert_int_equal(alone, 1);
            }
            for (int i = 0; i < n; i++)
                if (p.seq_of[tl[i].t0] == s) assert_int_equal((tl[i].t0 - first) % rows, 0);
        }
        assert_int_equal(n, want);
        memcpy(ord, tl, sizeof *tl * (size_t)n);
        att_tiles_order(ord, n);
        check_order(tl, ord, n, T);
        n_tiles += n;
    }
    printf("3000 random steps: %ld tiles, %ld decode tokens\n", n_tiles, n_decode);
    free(tl);
    free(ord);
    plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_step),
        cmocka_unit_test(test_unusual_layouts),
        cmocka_unit_test(test_random_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
