// link: tpd_util
/* util/memtrim: the idle trim runs once after requests stop for MEMTRIM_QUIET_S, not before
 * and not again without new ones; and it gives back what a thread freed in its own arena
 * (as an HTTP thread does after parsing a large body), which glibc otherwise keeps. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/memtrim.h"

static void test_trims_once_when_quiet(void **state) {
    (void)state;
    assert_int_equal(memtrim_idle(1.0), 0); /* nothing finished yet */
    assert_int_equal(memtrim_idle(9.0), 0);
    memtrim_note();
    assert_int_equal(memtrim_idle(10.0), 0); /* first seen now */
    assert_int_equal(memtrim_idle(10.0 + MEMTRIM_QUIET_S / 2), 0);
    memtrim_note(); /* another one finished: the quiet period starts again */
    assert_int_equal(memtrim_idle(10.0 + MEMTRIM_QUIET_S * 1.2), 0);
    assert_int_equal(memtrim_idle(10.0 + MEMTRIM_QUIET_S * 2), 0);
    assert_int_equal(memtrim_idle(10.0 + MEMTRIM_QUIET_S * 2.3), 1);
    assert_int_equal(memtrim_idle(20.0), 0); /* nothing new since */
    memtrim_note();
    assert_int_equal(memtrim_idle(21.0), 0);
    assert_int_equal(memtrim_idle(21.0 + MEMTRIM_QUIET_S), 1);
}

static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu %lu", &size, &res), 2);
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

#define N_BLOCKS 32768
#define BLOCK 2048 /* 64 MiB in all */
static void *kept[N_BLOCKS / 64];

/* Like an HTTP thread parsing a large body: many small blocks in this thread's arena, all
 * freed but one in 64, which keeps the free space between them from reaching the top. */
static void *churn(void *arg) {
    (void)arg;
    char **b = malloc(sizeof *b * N_BLOCKS);
    for (int i = 0; i < N_BLOCKS; i++) {
        b[i] = malloc(BLOCK);
        memset(b[i], i & 0xff, BLOCK);
    }
    for (int i = 0; i < N_BLOCKS; i++)
        if (i % 64 == 63) kept[i / 64] = b[i];
        else free(b[i]);
    free(b);
    return NULL;
}

static void test_gives_back_a_thread_arena(void **state) {
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip(); /* a sanitizer's allocator, with its quarantine, is not glibc's */
#endif
    memtrim_init();
    size_t before = rss_bytes();
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    size_t held = rss_bytes();
    const size_t total = (size_t)N_BLOCKS * BLOCK;
    /* the free blocks are still resident: what the trim is for */
    if (held < before + total / 2) skip();
    memtrim_note();
    assert_int_equal(memtrim_idle(100.0), 0);
    assert_int_equal(memtrim_idle(100.0 + MEMTRIM_QUIET_S), 1);
    size_t after = rss_bytes();
    fprintf(stderr, "rss: before %.1f MiB, after the frees %.1f, after the trim %.1f\n",
            before / 1048576.0, held / 1048576.0, after / 1048576.0);
    assert_true(after < before + total / 8);
    for (int i = 0; i < N_BLOCKS / 64; i++) free(kept[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trims_once_when_quiet),
        cmocka_unit_test(test_gives_back_a_thread_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
