/* A scheduler over a one-rank engine, as the scheduler tests (test_scheduler, test_prefix_cache,
 * test_spec) drive it: opened from engine and scheduler options, stepped until idle, closed.
 * Single-threaded test code; link tpd_testutil_sched. */
#ifndef TPD_TESTUTIL_SCHED_H
#define TPD_TESTUTIL_SCHED_H

#include "comm/comm.h"
#include "parallel/engine.h"
#include "sched/metrics.h"
#include "sched/scheduler.h"

struct sched_run {
    struct engine *e;
    struct metrics *m;
    struct scheduler *s;
};

/* Opens the engine (asserting it opens) and a scheduler over it with its own metrics. */
void sched_run_open(struct sched_run *r, struct comm *c, const struct engine_opts *eo,
                    const struct sched_opts *so);
void sched_run_close(struct sched_run *r);
/* Steps until nothing is queued or running (asserting it gets there within max_steps). */
void sched_run_drain(struct sched_run *r, int max_steps);
/* Nothing is queued or running and every KV block came back. */
void sched_run_assert_idle(struct sched_run *r);
/* SmolLM2-135M Q4_1 under TPD_SOURCE_DIR into path; 0, or -1 (with the "skipped" line
 * printed) when it has not been fetched, for main to return 77. */
int sched_run_smollm2(char *path, size_t size);

#endif
