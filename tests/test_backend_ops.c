// link: tpd_kernels
/* The backend op list (kernels/backend.h BACKEND_OPS) against the struct, the CPU backend's
 * table and the profiler: each op's name and slot are its own (clearing one field makes
 * exactly that op missing, and backend_check name it unless it is optional); the CPU table
 * has every required op; the profiler replaces exactly the timed ops. The CUDA table is
 * checked the same way by backend_open on a GPU machine. The CPU backend's matmul of a weight
 * with a gather index (INT4 act-order) is the plain matmul of the gathered activations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/profile.h"
#include "util/err.h"

static void test_names(void **state) {
    (void)state;
    for (int a = 0; a < BACKEND_OP_COUNT; a++) {
        assert_string_not_equal(backend_op_name(a), "?");
        for (int b = a + 1; b < BACKEND_OP_COUNT; b++)
            assert_string_not_equal(backend_op_name(a), backend_op_name(b));
    }
    assert_string_equal(backend_op_name(BACKEND_OP_MATMUL), "matmul");
    assert_string_equal(backend_op_name(BACKEND_OP_TOP_CANDS), "top_cands");
    assert_string_equal(backend_op_name(BACKEND_OP_COUNT), "?");
    assert_true(backend_op_flags(BACKEND_OP_GRAPH_RUN) & BOP_OPTIONAL);
    assert_false(backend_op_flags(BACKEND_OP_SYNC) & BOP_TIMED);
}

/* Clearing field `field` of a full table leaves op ID, and only it, missing. */
static void expect_slot(const struct backend *full, enum backend_op id, struct backend *cleared,
                        int flags, const char *field) {
    char err[ERR_LEN] = "";
    assert_false(backend_has_op(cleared, id));
    for (int op = 0; op < BACKEND_OP_COUNT; op++)
        if (op != (int)id) assert_int_equal(backend_has_op(cleared, op), backend_has_op(full, op));
    if (flags & BOP_OPTIONAL) {
        assert_int_equal(backend_check(cleared, err), 0);
        return;
    }
    assert_int_equal(backend_check(cleared, err), -1);
    char want[64];
    snprintf(want, sizeof want, "has no %s", field);
    assert_non_null(strstr(err, want));
}

static void test_cpu_table(void **state) {
    (void)state;
    char err[ERR_LEN] = "";
    struct backend be;
    if (backend_open(&be, "cpu", 1, 0, NULL, err)) fail_msg("%s", err);
    assert_int_equal(backend_check(&be, err), 0);
    /* the CPU backend has every op but the graphs */
    for (int op = 0; op < BACKEND_OP_COUNT; op++)
        assert_int_equal(backend_has_op(&be, op), op != BACKEND_OP_GRAPH_RUN);
#define CLEAR_ONE(ID, field, flags) \
    { \
        struct backend c = be; \
        c.field = NULL; \
        expect_slot(&be, BACKEND_OP_##ID, &c, flags, #field); \
    }
    BACKEND_OPS(CLEAR_ONE)
#undef CLEAR_ONE
    backend_close(&be);
}

static void test_profiler_wraps_timed_ops(void **state) {
    (void)state;
    char err[ERR_LEN] = "";
    struct backend inner, w;
    if (backend_open(&inner, "cpu", 1, 0, NULL, err)) fail_msg("%s", err);
    w = inner;
    backend_profile_wrap(&w);
    assert_int_equal(backend_check(&w, err), 0);
    /* timed ops the backend has are wrapped; the others are its own, but graphs, which the
     * wrappers' synchronizations would spoil */
#define WRAPPED(ID, field, flags) \
    if (((flags)&BOP_TIMED) && inner.field) assert_true(w.field != inner.field); \
    else if (BACKEND_OP_##ID != BACKEND_OP_GRAPH_RUN) assert_true(w.field == inner.field);
    BACKEND_OPS(WRAPPED)
#undef WRAPPED
    assert_null(w.graph_run);
    backend_close(&inner);
}

/* An I4_S32 weight of 8 rows x 96 stored columns over an input of 70 columns: stored
 * column j takes input column gather[j], or nothing (-1: padding, its codes random, as the
 * product must not depend on them). matmul and matmul_grouped at T 1..9 (the integer tiles
 * below 4 tokens, the f32 ones from 4) give exactly what they give for the gathered
 * activations with no index. */
static void test_cpu_gather_matmul(void **state) {
    (void)state;
    enum { ROWS = 8, COLS = 96, IN = 70, TMAX = 9 };
    char err[ERR_LEN] = "";
    struct backend be;
    if (backend_open(&be, "cpu", 2, 0, NULL, err)) fail_msg("%s", err);
    static uint8_t w[ROWS * COLS / 32 * 24];
    static int32_t gather[COLS];
    static float x[TMAX * IN], xg[TMAX * COLS], y[TMAX * ROWS], want[TMAX * ROWS];
    srand(29);
    for (int b = 0; b < ROWS * COLS / 32; b++) {
        float d = (float)(rand() % 100 + 1) / 512, z = (float)(rand() % 17);
        memcpy(w + b * 24, &d, 4);
        memcpy(w + b * 24 + 4, &z, 4);
        for (int k = 8; k < 24; k++) w[b * 24 + k] = (uint8_t)rand();
    }
    for (int j = 0; j < COLS; j++) gather[j] = j < IN ? (j * 37 + 11) % IN : -1;
    for (int j = 0; j < 12; j++) { /* padding inside runs too, as whole groups leave it */
        int a = rand() % COLS, b = rand() % COLS, g = gather[a];
        gather[a] = gather[b], gather[b] = g;
    }
    for (int i = 0; i < TMAX * IN; i++) x[i] = (float)(rand() % 2001 - 1000) / 250;
    for (int t = 0; t < TMAX; t++)
        for (int j = 0; j < COLS; j++)
            xg[t * COLS + j] = gather[j] >= 0 ? x[t * IN + gather[j]] : 0.0f;
    const struct bweight plain = {w, DT_I4_S32, ROWS, COLS, 0, NULL, 0};
    const struct bweight idx = {w, DT_I4_S32, ROWS, COLS, 0, gather, 0};
    for (int T = 1; T <= TMAX; T++) {
        be.matmul(be.ctx, want, ROWS, xg, COLS, T, &plain);
        memset(y, 0xff, sizeof y);
        be.matmul(be.ctx, y, ROWS, x, IN, T, &idx);
        assert_memory_equal(y, want, sizeof(float) * (size_t)(T * ROWS));
        /* grouped: the gathered op beside a plain one sharing nothing */
        float y2[TMAX * ROWS], want2[TMAX * ROWS];
        const struct bmatmul ops[2] = {{y, ROWS, x, IN, T, &idx}, {y2, ROWS, xg, COLS, 1, &plain}};
        be.matmul(be.ctx, want2, ROWS, xg, COLS, 1, &plain);
        memset(y, 0xff, sizeof y);
        be.matmul_grouped(be.ctx, ops, 2);
        assert_memory_equal(y, want, sizeof(float) * (size_t)(T * ROWS));
        assert_memory_equal(y2, want2, sizeof(float) * ROWS);
    }
    backend_close(&be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_cpu_table),
        cmocka_unit_test(test_profiler_wraps_timed_ops),
        cmocka_unit_test(test_cpu_gather_matmul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
