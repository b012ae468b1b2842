/* What the scheduler reports of itself (sched_stats): queue, running set, KV blocks,
 * limits, drain and step timing. A plain struct, read by metrics and the HTTP layer. */
#ifndef TPD_SCHED_STATS_H
#define TPD_SCHED_STATS_H

struct sched_stats {
    int queued, running;
    int kv_blocks_used, kv_blocks_free;
    int max_ctx;
    int kv_tokens; /* the whole cache, in tokens */
    int max_queue;
    int draining;
    long preemptions;
    double last_step;    /* monotonic time the loop last ran (stepping or idle) */
    double step_started; /* monotonic start of the step in progress; 0 between steps */
    double step_timeout_s;
};

#endif
