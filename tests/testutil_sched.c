#include "testutil_sched.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

void sched_run_open(struct sched_run *r, struct comm *c, const struct engine_opts *eo,
                    const struct sched_opts *so) {
    char err[512];
    int rc = engine_open(&r->e, c, eo, err);
    if (rc) print_error("engine_open: %s\n", err);
    assert_int_equal(rc, 0);
    r->m = metrics_new();
    r->s = sched_new(r->e, so, r->m);
}

void sched_run_close(struct sched_run *r) {
    sched_free(r->s);
    metrics_free(r->m);
    engine_close(r->e);
}

void sched_run_drain(struct sched_run *r, int max_steps) {
    for (int guard = 0; sched_step(r->s, 0) > 0; guard++) assert_true(guard < max_steps);
}

void sched_run_assert_idle(struct sched_run *r) {
    struct sched_stats st;
    sched_stats(r->s, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.kv_blocks_used, 0);
}

int sched_run_smollm2(char *path, size_t size) {
    const char *src = getenv("TPD_SOURCE_DIR");
    snprintf(path, size, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    if (access(path, R_OK) == 0) return 0;
    printf("skipped: %s not present (./launch/get-model smollm2)\n", path);
    return -1;
}
