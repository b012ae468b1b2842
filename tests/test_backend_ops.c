// link: tpd_kernels
/* The backend op list (kernels/backend.h BACKEND_OPS) against the struct, the CPU backend's
 * table and the profiler: each op's name and slot are its own (clearing one field makes
 * exactly that op missing, and backend_check name it unless it is optional); the CPU table
 * has every required op; the profiler replaces exactly the timed ops. The CUDA table is
 * checked the same way by backend_open on a GPU machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_cpu_table),
        cmocka_unit_test(test_profiler_wraps_timed_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
