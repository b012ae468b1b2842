// link: tpd_sched
/* sched/block_pool: the prefix cache's block hash chain (a hit needs the same tokens,
 * salt and the same chain before it), a block computed twice at once is kept once, LRU
 * eviction (least recently released first, a chain's leaves before the blocks they
 * extend, a hit makes a chain recent again), reference counts across preemption and
 * cancellation, and a randomized run of thousands of admit / step / finish / cancel /
 * preempt operations of simulated sequences checking after each that every block is
 * exactly one of free, held or idle, that reference counts equal the sequences holding a
 * block, that every block a sequence reads holds exactly the K/V it expects (a model of
 * the cache contents computed independently of the pool), and that nothing leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "sched/block_pool.h"

#define BS 4

/* Takes n fresh blocks, "computes" them and commits them as one chain over tokens. */
static void fill_chain(struct block_pool *bp, const int32_t *tokens, int n, int32_t *ids) {
    assert_int_equal(block_pool_take(bp, n, ids, 0), 0);
    for (int k = 0; k < n; k++)
        ids[k] = block_pool_commit(bp, ids[k], k ? ids[k - 1] : -1, 0, tokens + k * BS);
}

static void test_hash_chain(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 16, BS, 1, 0);
    int32_t a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, ids[3], hit[3];
    fill_chain(&bp, a, 3, ids);
    assert_int_equal(bp.n_cached, 3);
    int idle;
    assert_int_equal(block_pool_match(&bp, 0, a, 3, hit, &idle), 3);
    assert_memory_equal(hit, ids, sizeof ids);
    assert_int_equal(idle, 0); /* still held */
    assert_int_equal(block_pool_match(&bp, 0, a, 2, hit, &idle), 2);

    int32_t b[12];
    memcpy(b, a, sizeof b);
    b[5] = 99; /* the second block differs: only the first is a hit */
    assert_int_equal(block_pool_match(&bp, 0, b, 3, hit, &idle), 1);
    memcpy(b, a, sizeof b);
    b[0] = 99; /* the first differs: the later ones, though equal, follow another chain */
    assert_int_equal(block_pool_match(&bp, 0, b, 3, hit, &idle), 0);
    /* blocks 2..3 of a as the first blocks of a prompt: same tokens, no parent: a miss */
    assert_int_equal(block_pool_match(&bp, 0, a + BS, 2, hit, &idle), 0);
    assert_int_equal(block_pool_match(&bp, 7, a, 3, hit, &idle), 0); /* another salt */

    block_pool_release(&bp, 3, ids);
    assert_int_equal(bp.n_idle, 3);
    assert_int_equal(block_pool_available(&bp), 16);
    assert_int_equal(block_pool_match(&bp, 0, a, 3, hit, &idle), 3);
    assert_int_equal(idle, 3);
    block_pool_ref(&bp, 3, hit); /* a hit takes them out of the idle list */
    assert_int_equal(bp.n_idle, 0);
    assert_int_equal(block_pool_available(&bp), 13);
    block_pool_release(&bp, 3, hit);
    block_pool_free(&bp);
}

/* Two sequences computing the same new prefix at once: the second commit moves its
 * reference to the first copy and frees its own block. */
static void test_commit_duplicate(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 8, BS, 1, 0);
    int32_t t[BS] = {5, 6, 7, 8}, x, y;
    assert_int_equal(block_pool_take(&bp, 1, &x, 0), 0);
    assert_int_equal(block_pool_take(&bp, 1, &y, 0), 0);
    assert_int_equal(block_pool_commit(&bp, x, -1, 0, t), x);
    assert_int_equal(block_pool_commit(&bp, y, -1, 0, t), x);
    assert_int_equal(bp.refs[x], 2);
    assert_int_equal(bp.refs[y], 0);
    assert_int_equal(bp.n_free, 7);
    assert_int_equal(bp.n_cached, 1);
    block_pool_release(&bp, 1, &x);
    block_pool_release(&bp, 1, &x);
    assert_int_equal(bp.n_idle, 1);
    block_pool_free(&bp);
}

static void test_lru(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 6, BS, 1, 0);
    int32_t a[3 * BS], b[3 * BS], ia[3], ib[3], hit[3], extra[6];
    for (int i = 0; i < 3 * BS; i++) a[i] = 100 + i, b[i] = 200 + i;
    int idle;
    fill_chain(&bp, a, 3, ia);
    fill_chain(&bp, b, 3, ib);
    block_pool_release(&bp, 3, ia); /* a first: least recent */
    block_pool_release(&bp, 3, ib);
    assert_int_equal(bp.n_free, 0);
    assert_int_equal(block_pool_available(&bp), 6);
    /* a hit on a's first two blocks makes them recent: a's leaf, then b's chain leaf first */
    assert_int_equal(block_pool_match(&bp, 0, a, 2, hit, &idle), 2);
    block_pool_ref(&bp, 2, hit);
    block_pool_release(&bp, 2, hit);
    int expect_left[][2] = {{2, 3}, {2, 2}, {2, 1},
                            {2, 0}, {1, 0}, {0, 0}}; /* {a hit, b hit} after each eviction */
    for (int k = 0; k < 6; k++) {
        assert_int_equal(block_pool_take(&bp, 1, &extra[k], 0), 0);
        assert_int_equal(block_pool_match(&bp, 0, a, 3, hit, &idle), expect_left[k][0]);
        assert_int_equal(block_pool_match(&bp, 0, b, 3, hit, &idle), expect_left[k][1]);
    }
    assert_int_equal(bp.evictions, 6);
    assert_int_equal(bp.n_cached, 0);
    assert_int_equal(block_pool_take(&bp, 1, hit, 0), -1); /* all held */
    block_pool_release(&bp, 6, extra);
    assert_int_equal(bp.n_free, 6);
    block_pool_free(&bp);
}

/* A shared chain survives its first holder's preemption and a cancellation: no block a
 * sequence holds is handed out again, however many blocks others ask for. */
static void test_refs_across_preempt_cancel(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 8, BS, 1, 0);
    int32_t t[2 * BS] = {1, 2, 3, 4, 5, 6, 7, 8}, s1[2], s2[2], s3[2], rest[8];
    int idle;
    fill_chain(&bp, t, 2, s1);                                      /* sequence 1 computed it */
    assert_int_equal(block_pool_match(&bp, 0, t, 2, s2, &idle), 2); /* sequence 2 hits */
    block_pool_ref(&bp, 2, s2);
    assert_int_equal(block_pool_match(&bp, 0, t, 2, s3, &idle), 2); /* and sequence 3 */
    block_pool_ref(&bp, 2, s3);
    assert_int_equal(bp.refs[s1[0]], 3);
    block_pool_release(&bp, 2, s1); /* sequence 1 preempted */
    block_pool_release(&bp, 2, s3); /* sequence 3 cancelled */
    assert_int_equal(bp.refs[s2[0]], 1);
    assert_int_equal(bp.n_idle, 0);
    assert_int_equal(block_pool_available(&bp), 6);
    assert_int_equal(block_pool_take(&bp, 7, rest, 0), -1);
    assert_int_equal(block_pool_take(&bp, 6, rest, 0), 0);
    for (int i = 0; i < 6; i++) assert_true(rest[i] != s2[0] && rest[i] != s2[1]);
    /* sequence 1 resumes: its prefix is still there, held by sequence 2 */
    assert_int_equal(block_pool_match(&bp, 0, t, 2, s1, &idle), 2);
    assert_memory_equal(s1, s2, sizeof s1);
    block_pool_release(&bp, 2, s2);
    block_pool_release(&bp, 6, rest);
    assert_int_equal(block_pool_available(&bp), 8);
    block_pool_free(&bp);
}

static void test_caching_off(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 4, BS, 0, 0);
    int32_t t[BS] = {1, 2, 3, 4}, id, hit;
    int idle;
    assert_int_equal(block_pool_take(&bp, 1, &id, 0), 0);
    assert_int_equal(block_pool_commit(&bp, id, -1, 0, t), id);
    assert_int_equal(block_pool_match(&bp, 0, t, 1, &hit, &idle), 0);
    block_pool_release(&bp, 1, &id);
    assert_int_equal(bp.n_free, 4);
    block_pool_free(&bp);
}

/* ---- randomized: simulated sequences over one pool ---- */

#define NB 48
#define MAXSEQ 12
#define MAXTOK 64

struct simseq {
    int live, running;
    int32_t tokens[MAXTOK];
    int n_tokens, n_cached, n_committed;
    int32_t blocks[MAXTOK / BS + 1];
    int n_blocks;
};

/* What a block holding positions [k*BS, (k+1)*BS) of these tokens must contain: a digest of
 * the whole prefix up to its end (K/V depends on every token before). FNV-1a, unrelated
 * to the pool's hash. */
static uint64_t kv_digest_upto(const int32_t *tokens, int k, int upto) {
    uint64_t h = 1469598103934665603ull;
    int end = (k + 1) * BS < upto ? (k + 1) * BS : upto;
    for (int i = 0; i < end; i++) h = (h ^ (uint32_t)tokens[i]) * 1099511628211ull;
    return h;
}

static uint64_t kv_digest(const int32_t *tokens, int k) {
    return kv_digest_upto(tokens, k, (k + 1) * BS);
}

static uint64_t g_content[NB]; /* the simulated cache: what each block holds */
static long g_firsts[2];       /* first blocks taken outside / inside the sink blocks */

static void check_invariants(const struct block_pool *bp, const struct simseq *sq) {
    int holders[NB] = {0}, in_free[NB] = {0}, in_lru[NB] = {0};
    for (int i = 0; i < MAXSEQ; i++) {
        if (!sq[i].live || !sq[i].running) {
            if (sq[i].live) assert_int_equal(sq[i].n_blocks, 0); /* preempted: holds nothing */
            continue;
        }
        for (int k = 0; k < sq[i].n_blocks; k++) {
            holders[sq[i].blocks[k]]++;
            for (int j = 0; j < k; j++) assert_true(sq[i].blocks[j] != sq[i].blocks[k]);
        }
        /* every block whose K/V the sequence has holds exactly that */
        for (int k = 0; k * BS < sq[i].n_cached && k < sq[i].n_blocks; k++)
            if ((k + 1) * BS <= sq[i].n_cached)
                assert_true(g_content[sq[i].blocks[k]] == kv_digest(sq[i].tokens, k));
    }
    for (int i = 0; i < bp->n_free; i++) {
        int32_t b = bp->free_ids[i];
        assert_true(b >= bp->sink_blocks && b < NB);
        assert_int_equal(in_free[b]++, 0);
    }
    for (int i = 0; i < bp->n_free_sink; i++) {
        int32_t b = bp->free_sink[i];
        assert_true(b >= 0 && b < bp->sink_blocks);
        assert_int_equal(in_free[b]++, 0);
    }
    int n_lru = 0;
    for (int32_t b = bp->lru_head, prev = -1; b >= 0; prev = b, b = bp->lru_next[b]) {
        assert_int_equal(bp->lru_prev[b], prev);
        assert_int_equal(in_lru[b]++, 0);
        n_lru++;
    }
    assert_int_equal(n_lru, bp->n_idle);
    int n_cached = 0;
    for (int b = 0; b < NB; b++) {
        assert_int_equal(bp->refs[b], holders[b]);
        int state = (in_free[b] ? 1 : 0) + (in_lru[b] ? 1 : 0) + (holders[b] ? 1 : 0);
        assert_int_equal(state, 1); /* exactly one of free, idle, held */
        if (in_free[b]) assert_true(bp->serial[b] == 0);
        if (in_lru[b]) assert_true(bp->serial[b] != 0);
        n_cached += bp->serial[b] != 0;
    }
    assert_int_equal(n_cached, bp->n_cached);
}

static void sim_release(struct block_pool *bp, struct simseq *q) {
    block_pool_release(bp, q->n_blocks, q->blocks);
    q->n_blocks = q->n_cached = q->n_committed = 0;
}

/* Admission as the scheduler does it: a prefix hit (never the block of the last token),
 * then room for the rest. 0: admitted. */
static int sim_admit(struct block_pool *bp, struct simseq *q) {
    int idle, hit = block_pool_match(bp, 0, q->tokens, (q->n_tokens - 1) / BS, q->blocks, &idle);
    int need = block_pool_blocks_for(q->n_tokens + 1, BS) - hit;
    if (need > block_pool_available(bp) - idle) return -1;
    for (int k = 0; k < hit; k++) assert_true(g_content[q->blocks[k]] == kv_digest(q->tokens, k));
    block_pool_ref(bp, hit, q->blocks);
    q->n_blocks = q->n_committed = hit;
    q->n_cached = hit * BS;
    q->running = 1;
    return 0;
}

/* One step of q: computes up to n more tokens (a sampled token appended when the known
 * ones are all computed), writing the simulated K/V of each block it completes. */
static int sim_step(struct block_pool *bp, struct simseq *q, int n) {
    if (q->n_cached == q->n_tokens) {
        if (q->n_tokens == MAXTOK) return -1;
        q->tokens[q->n_tokens++] = rand() % 3; /* "sampled": few values, so chains collide often */
    }
    if (n > q->n_tokens - q->n_cached) n = q->n_tokens - q->n_cached;
    int need = block_pool_blocks_for(q->n_cached + n, BS) - q->n_blocks;
    if (need > 0) {
        if (block_pool_take(bp, need, q->blocks + q->n_blocks, q->n_blocks == 0)) return -1;
        if (q->n_blocks == 0) g_firsts[q->blocks[0] < bp->sink_blocks]++;
        for (int k = 0; k < need; k++)
            g_content[q->blocks[q->n_blocks + k]] = 0; /* garbage until written */
        q->n_blocks += need;
    }
    /* the K/V writes of this step: every block it touches (a shared block would be ruined) */
    for (int k = q->n_cached / BS; k * BS < q->n_cached + n; k++)
        g_content[q->blocks[k]] = kv_digest_upto(q->tokens, k, q->n_cached + n);
    q->n_cached += n;
    for (; (q->n_committed + 1) * BS <= q->n_cached; q->n_committed++) {
        int k = q->n_committed;
        int32_t b = block_pool_commit(bp, q->blocks[k], k ? q->blocks[k - 1] : -1, 0,
                                      q->tokens + k * BS);
        if (b != q->blocks[k]) assert_true(g_content[b] == kv_digest(q->tokens, k));
        q->blocks[k] = b;
    }
    return 0;
}

static void run_randomized(int sink_blocks) {
    srand(12345);
    g_firsts[0] = g_firsts[1] = 0;
    struct block_pool bp;
    block_pool_init(&bp, NB, BS, 1, sink_blocks);
    struct simseq sq[MAXSEQ];
    memset(sq, 0, sizeof sq);
    static const int32_t shared[3][16] = {{1, 2, 1, 2, 1, 2, 1, 2, 0, 0, 1, 1, 2, 2, 0, 1},
                                          {1, 2, 1, 2, 1, 2, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0},
                                          {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}};
    long hits = 0, admits = 0;
    for (int op = 0; op < 20000; op++) {
        struct simseq *q = &sq[rand() % MAXSEQ];
        int r = rand() % 100;
        if (!q->live) { /* a new request: a shared prefix cut anywhere, then its own tokens */
            memset(q, 0, sizeof *q);
            int pre = rand() % 17, own = 1 + rand() % 20;
            memcpy(q->tokens, shared[rand() % 3], sizeof(int32_t) * (size_t)pre);
            for (int i = 0; i < own; i++) q->tokens[pre + i] = rand() % 3;
            q->n_tokens = pre + own;
            q->live = 1;
        } else if (!q->running) { /* waiting or preempted: try to admit */
            if (sim_admit(&bp, q) == 0) {
                admits++;
                hits += q->n_cached;
            }
        } else if (r < 60) {
            if (sim_step(&bp, q,
                         1 + rand() % 9)) { /* out of blocks: preempted, as the scheduler would */
                sim_release(&bp, q);
                q->running = 0;
            }
        } else if (r < 70) { /* preempted */
            sim_release(&bp, q);
            q->running = 0;
        } else if (r < 85) { /* finished or cancelled, computed or not */
            sim_release(&bp, q);
            q->live = q->running = 0;
        }
        check_invariants(&bp, sq);
    }
    for (int i = 0; i < MAXSEQ; i++)
        if (sq[i].live && sq[i].running) sim_release(&bp, &sq[i]);
    memset(sq, 0, sizeof sq);
    check_invariants(&bp, sq);
    assert_int_equal(block_pool_available(&bp), NB); /* no leak */
    print_message("randomized (%d sink blocks): %ld admissions, %ld tokens from the cache, %ld "
                  "evictions; first blocks "
                  "%ld in the sink blocks, %ld elsewhere\n",
                  sink_blocks, admits, hits, bp.evictions, g_firsts[1], g_firsts[0]);
    assert_true(hits > 0 && bp.evictions > 0); /* both paths were exercised */
    if (sink_blocks >= MAXSEQ)
        assert_int_equal(g_firsts[0], 0); /* room for every sequence: always a sink block */
    if (sink_blocks) assert_true(g_firsts[1] > 0);
    block_pool_free(&bp);
}

static void test_randomized(void **state) {
    (void)state;
    run_randomized(0);
}

/* Sink blocks fewer than the sequences (some first blocks land elsewhere), and enough. */
static void test_randomized_sink(void **state) {
    (void)state;
    run_randomized(MAXSEQ / 2);
    run_randomized(MAXSEQ);
}

/* First blocks go to the sink blocks (free, else the least recently released idle one),
 * other blocks elsewhere while anything else is left. */
static void test_sink_first_blocks(void **state) {
    (void)state;
    struct block_pool bp;
    block_pool_init(&bp, 8, BS, 1, 2);
    int32_t a[3], b[2], c[1], d[1], e[5];
    assert_int_equal(block_pool_take(&bp, 3, a, 1), 0);
    assert_int_equal(a[0], 0); /* first block: a sink block */
    assert_true(a[1] >= 2 && a[2] >= 2);
    assert_int_equal(block_pool_take(&bp, 2, b, 1), 0);
    assert_int_equal(b[0], 1);
    assert_int_equal(block_pool_take(&bp, 1, c, 1), 0);
    assert_true(c[0] >= 2); /* both sink blocks held: any block */
    /* b's chain cached and released: idle; a new first block evicts its sink block even
     * though free blocks remain */
    static const int32_t t[2 * BS] = {1, 2, 3, 4, 5, 6, 7, 8};
    b[0] = block_pool_commit(&bp, b[0], -1, 0, t);
    b[1] = block_pool_commit(&bp, b[1], b[0], 0, t + BS);
    block_pool_release(&bp, 2, b);
    assert_int_equal(bp.n_idle, 2);
    long ev = bp.evictions;
    assert_int_equal(block_pool_take(&bp, 1, d, 1), 0);
    assert_int_equal(d[0], 1);
    assert_int_equal(bp.evictions, ev + 1);
    int32_t hit[2];
    int idle;
    assert_int_equal(block_pool_match(&bp, 0, t, 2, hit, &idle), 0); /* the chain's head is gone */
    /* non-first blocks: the rest first, a free sink block only when nothing else is left */
    block_pool_release(&bp, 3, a); /* uncached: sink block 0 and two others free */
    assert_int_equal(bp.n_free_sink, 1);
    const int others = bp.n_free + bp.n_idle;
    assert_int_equal(others, 5); /* two never taken, two of a's, b's orphaned second block (idle) */
    assert_int_equal(block_pool_take(&bp, 5, e, 0), 0);
    for (int i = 0; i < 5; i++) assert_true(e[i] >= 2);
    assert_int_equal(bp.n_free_sink, 1);
    int32_t f;
    assert_int_equal(block_pool_take(&bp, 1, &f, 0), 0);
    assert_int_equal(f, 0);
    assert_int_equal(block_pool_available(&bp), 0);
    block_pool_free(&bp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_chain),
        cmocka_unit_test(test_commit_duplicate),
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_sink_first_blocks),
        cmocka_unit_test(test_randomized_sink),
        cmocka_unit_test(test_refs_across_preempt_cancel),
        cmocka_unit_test(test_caching_off),
        cmocka_unit_test(test_randomized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
