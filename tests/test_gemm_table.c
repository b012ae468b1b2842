/* The GEMM tuning table (kernels/gemm_table.h): lines of other GPUs and library versions
 * skipped, the bucket of a step's token count, defaults, every malformed line refused with its
 * line number, and the committed table (kernels/cuda/gemm_table.inc) parses. */
// link: tpd_kernels
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/gemm_table.h"

static const char committed[] =
#include "kernels/cuda/gemm_table.inc"
    ;

static const char text[] = "# comment\n"
                           "GPU A\t1300\tbf16\t4096\t4096\t1\tmmv\t40.1 50.2\n"
                           "GPU A\t1300\tbf16\t4096\t4096\t8\tmmv\n"
                           "GPU A\t1300\tbf16\t4096\t4096\t32\tlt3\n"
                           "GPU A\t1300\tbf16\t4096\t4096\t2048\tex\n"
                           "GPU A\t1300\tf16\t4096\t4096\t2048\tlt1\n"
                           "\n"
                           "GPU A\t1200\tbf16\t4096\t4096\t2048\tlt7\n"
                           "GPU B\t1300\tbf16\t4096\t4096\t2048\tlt6\n"
                           "GPU A\t1300\tbf16\t14336\t4096\t4\tmmv";

static struct gemm_pick pick(const struct gemm_table *t, int half, int rows, int cols, int T) {
    return gemm_table_pick(t, half, rows, cols, T);
}

static void test_buckets(void **state) {
    (void)state;
    struct gemm_table t;
    char err[256] = "";
    assert_int_equal(gemm_table_load(&t, text, "GPU A", 1300, err), 0);
    assert_int_equal(t.n, 6); /* other versions and GPUs skipped */
    assert_int_equal(pick(&t, 0, 4096, 4096, 1).kind, GEMM_MMV);
    assert_int_equal(pick(&t, 0, 4096, 4096, 5).kind, GEMM_MMV);
    struct gemm_pick p = pick(&t, 0, 4096, 4096, 9);
    assert_int_equal(p.kind, GEMM_LT);
    assert_int_equal(p.rank, 3);
    assert_int_equal(pick(&t, 0, 4096, 4096, 32).kind, GEMM_LT);
    assert_int_equal(pick(&t, 0, 4096, 4096, 33).kind, GEMM_EX);
    assert_int_equal(pick(&t, 0, 4096, 4096, 100000).kind,
                     GEMM_EX); /* above every bucket: the top one */
    p = pick(&t, 1, 4096, 4096, 3);
    assert_int_equal(p.kind, GEMM_LT);
    assert_int_equal(p.rank, 1);
    assert_int_equal(pick(&t, 0, 4096, 1024, 3).kind, GEMM_DEFAULT); /* no line for the shape */
    assert_int_equal(pick(&t, 0, 14336, 4096, 2).kind, GEMM_MMV);
    assert_int_equal(pick(&t, 0, 14336, 4096, 9).kind, GEMM_DEFAULT); /* mmv never above 8 */
    gemm_table_free(&t);
    assert_int_equal(gemm_table_load(&t, text, "GPU C", 1300, err), 0);
    assert_int_equal(t.n, 0);
    assert_int_equal(pick(&t, 0, 4096, 4096, 1).kind, GEMM_DEFAULT);
    gemm_table_free(&t);
}

static void refused(const char *bad, const char *what) {
    struct gemm_table t;
    char err[256] = "";
    assert_int_equal(gemm_table_load(&t, bad, "G", 1, err), -1);
    if (!strstr(err, what)) fail_msg("\"%s\": error \"%s\" does not say \"%s\"", bad, err, what);
    assert_null(t.e);
    assert_int_equal(t.n, 0);
}

static void test_malformed(void **state) {
    (void)state;
    refused("G\t1\tbf16\t1\t1\t1\n", "line 1: expected 7");
    refused("# x\nG\t1\tbf16\t1\t1\t1\tmmv\nG\t1\tbf32\t1\t1\t1\tmmv\n", "line 3: dtype");
    refused("G\tx\tbf16\t1\t1\t1\tmmv\n", "version");
    refused("G\t-1\tbf16\t1\t1\t1\tmmv\n", "version");
    refused("G\t1\tbf16\t0\t1\t1\tmmv\n", "rows or cols");
    refused("G\t1\tbf16\t1\t99999999999999999999\t1\tmmv\n", "rows or cols");
    refused("G\t1\tbf16\t1\t1\t0\tmmv\n", "T-MAX");
    refused("G\t1\tbf16\t1\t1\t1x\tmmv\n", "T-MAX");
    refused("G\t1\tbf16\t1\t1\t9\tmmv\n", "at most 8");
    refused("G\t1\tbf16\t1\t1\t9\tlt8\n", "PICK");
    refused("G\t1\tbf16\t1\t1\t9\tlt\n", "PICK");
    refused("G\t1\tbf16\t1\t1\t9\tcublas\n", "PICK");
    char longf[300];
    memset(longf, 'a', sizeof longf);
    memcpy(longf + 200, "\t1\tbf16\t1\t1\t1\tmmv", 18);
    longf[218] = 0;
    refused(longf, "fields of < 128 bytes");
}

static void test_pick_names(void **state) {
    (void)state;
    const char *names[] = {"mmv", "ex", "lt0", "lt7"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        struct gemm_pick p;
        char buf[16];
        assert_int_equal(gemm_pick_parse(names[i], &p), 0);
        assert_string_equal(gemm_pick_name(p, buf, sizeof buf), names[i]);
    }
}

/* The table the CUDA backend reads parses: every line well formed, whatever GPU it names. */
static void test_committed_table(void **state) {
    (void)state;
    struct gemm_table t;
    char err[256] = "";
    if (gemm_table_load(&t, committed, "", 0, err))
        fail_msg("kernels/cuda/gemm_table.inc: %s", err);
    gemm_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_pick_names),
        cmocka_unit_test(test_committed_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
