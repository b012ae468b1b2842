/* Prometheus metrics of the daemon on rank 0: counters and latency histograms updated
 * from any thread (atomics / a mutex), rendered as text for GET /metrics together with
 * the scheduler's gauges. */
#ifndef TPD_METRICS_H
#define TPD_METRICS_H

#include <stddef.h>

struct sched_stats;
struct metrics;

enum metric_hist {
    HIST_TTFT, /* submit -> first token, seconds */
    HIST_ITL,  /* between consecutive tokens of one request, seconds */
    HIST_E2E,  /* submit -> finish, seconds */
    HIST_COUNT
};

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);
/* One finished HTTP request, counted by the frontend (499: the client left before any
 * answer). Tokens, latencies and preemptions are counted by the step loop. */
void metrics_request(struct metrics *m, int http_status);
void metrics_tokens(struct metrics *m, long prompt_tokens, long generated_tokens);
void metrics_preemption(struct metrics *m);
/* A request's first admission: its prompt tokens looked up in the prefix cache, and found. */
void metrics_prefix_cache(struct metrics *m, long queried_tokens, long hit_tokens);
/* Prompt tokens the model computed in one step (not found in the prefix cache). */
void metrics_prompt_computed(struct metrics *m, long tokens);
/* Logits rows one step brought back: whole, and as their best candidates. */
void metrics_logits_rows(struct metrics *m, long full_rows, long cand_rows);
/* A mixture-of-experts model split expert-parallel over `ranks`: the (token, expert) pairs of
 * the busiest rank and of all, summed over layers and steps so far (engine_moe_load). */
void metrics_moe_load(struct metrics *m, double busiest, double all, int ranks);
void metrics_observe(struct metrics *m, enum metric_hist h, double seconds);
/* Running totals since start, for the periodic stats line: HTTP requests answered, prompt
 * tokens computed, tokens generated, prompt tokens looked up in the prefix cache and found. */
struct metrics_totals {
    unsigned long requests, prompt_computed, generated, prefix_queried, prefix_hit;
};
void metrics_totals(struct metrics *m, struct metrics_totals *t);
/* Prometheus text exposition format; *out malloc'ed. */
int metrics_render(struct metrics *m, const struct sched_stats *st, char **out, size_t *len);

#endif
