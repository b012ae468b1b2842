/* What the scheduler reports of itself (sched_stats): queue, running set, KV blocks,
 * limits, drain and step timing. A plain struct, read by metrics and the HTTP layer. */
#ifndef TPD_SCHED_STATS_H
#define TPD_SCHED_STATS_H

/* One peer uid's share of the daemon. */
struct sched_uid_usage {
    unsigned uid; /* 0xffffffff: unknown (TCP) */
    int running, queued, kv_blocks;
};
#define SCHED_MAX_UID_STATS 16 /* the uids holding most; the rest are not itemised */

struct sched_stats {
    int queued, running;
    int kv_blocks_used, kv_blocks_free; /* held by sequences; free or idle in the prefix cache */
    int kv_blocks_cached;               /* in the prefix cache, held or idle */
    int max_ctx;
    int kv_tokens; /* the whole cache, in tokens */
    int max_queue;
    int draining;
    long preemptions;
    /* speculative decoding: drafted tokens, accepted ones, and sequence-steps that verified
     * at least one draft */
    long spec_drafted, spec_accepted, spec_verified;
    double last_step;    /* monotonic time the loop last ran (stepping or idle) */
    double step_started; /* monotonic start of the step in progress; 0 between steps */
    double step_timeout_s;
    int n_uids;
    struct sched_uid_usage uids[SCHED_MAX_UID_STATS];
};

#endif
