#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "../util/sbuf.h"
#include "stats.h"

#define MAX_CODES 32
#define MAX_BUCKETS 24

/* Bucket bounds in seconds, vLLM-like: TTFT spans queueing and long prefills, inter-token
 * latency one decode step, end-to-end whole generations. */
static const double ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
                                 0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, -1};
static const double itl_le[] = {0.001, 0.0025, 0.005, 0.01,  0.015, 0.02, 0.025,
                                0.03,  0.04,   0.05,  0.075, 0.1,   0.15, 0.2,
                                0.3,   0.4,    0.5,   0.75,  1.0,   2.5,  -1};
static const double e2e_le[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0, 15.0,
                                20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, -1};

static const struct {
    const char *name, *help;
    const double *le;
} hist_def[HIST_COUNT] = {
    [HIST_TTFT] = {"tpd_time_to_first_token_seconds",
                   "Time from submission to the first generated token.", ttft_le},
    [HIST_ITL] = {"tpd_inter_token_latency_seconds",
                  "Time between consecutive generated tokens of one request.", itl_le},
    [HIST_E2E] = {"tpd_e2e_request_latency_seconds",
                  "Time from submission to the end of a request.", e2e_le},
};

struct hist {
    unsigned long bucket[MAX_BUCKETS]; /* not cumulative; summed when rendered */
    unsigned long count;
    double sum;
};

struct counts {
    int codes[MAX_CODES];
    unsigned long code_count[MAX_CODES];
    int n_codes;
    unsigned long prompt_tokens, generated_tokens, preemptions;
    unsigned long prefix_queried, prefix_hit, prompt_computed;
    unsigned long logits_rows[2]; /* [0]: whole rows, [1]: candidates */
    double moe_busiest, moe_all;  /* expert-parallel pairs (metrics_moe_load) */
    int moe_ranks;
    struct hist h[HIST_COUNT];
};

struct metrics {
    pthread_mutex_t mu;
    struct counts c;
};

struct metrics *metrics_new(void) {
    struct metrics *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(struct metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(struct metrics *m, int http_status) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->c.n_codes && m->c.codes[i] != http_status) i++;
    if (i == m->c.n_codes && m->c.n_codes < MAX_CODES) m->c.codes[m->c.n_codes++] = http_status;
    if (i < m->c.n_codes) m->c.code_count[i]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_totals(struct metrics *m, struct metrics_totals *t) {
    pthread_mutex_lock(&m->mu);
    t->requests = 0;
    for (int i = 0; i < m->c.n_codes; i++) t->requests += m->c.code_count[i];
    t->prompt_computed = m->c.prompt_computed;
    /* a token as it is emitted: the first of a request is a TTFT sample, each later one an ITL
     * sample (metrics_tokens counts only when a request finishes) */
    t->generated = m->c.h[HIST_TTFT].count + m->c.h[HIST_ITL].count;
    t->prefix_queried = m->c.prefix_queried;
    t->prefix_hit = m->c.prefix_hit;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(struct metrics *m, long prompt_tokens, long generated_tokens) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (prompt_tokens > 0) m->c.prompt_tokens += (unsigned long)prompt_tokens;
    if (generated_tokens > 0) m->c.generated_tokens += (unsigned long)generated_tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_preemption(struct metrics *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->c.preemptions++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_prefix_cache(struct metrics *m, long queried_tokens, long hit_tokens) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (queried_tokens > 0) m->c.prefix_queried += (unsigned long)queried_tokens;
    if (hit_tokens > 0) m->c.prefix_hit += (unsigned long)hit_tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_prompt_computed(struct metrics *m, long tokens) {
    if (!m || tokens <= 0) return;
    pthread_mutex_lock(&m->mu);
    m->c.prompt_computed += (unsigned long)tokens;
    pthread_mutex_unlock(&m->mu);
}

void metrics_logits_rows(struct metrics *m, long full_rows, long cand_rows) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (full_rows > 0) m->c.logits_rows[0] += (unsigned long)full_rows;
    if (cand_rows > 0) m->c.logits_rows[1] += (unsigned long)cand_rows;
    pthread_mutex_unlock(&m->mu);
}

void metrics_moe_load(struct metrics *m, double busiest, double all, int ranks) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->c.moe_busiest = busiest;
    m->c.moe_all = all;
    m->c.moe_ranks = ranks;
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe(struct metrics *m, enum metric_hist h, double seconds) {
    if (!m || (unsigned)h >= HIST_COUNT || !isfinite(seconds)) return;
    if (seconds < 0) seconds = 0;
    const double *le = hist_def[h].le;
    int b = 0;
    while (le[b] >= 0 && seconds > le[b]) b++; /* le[b] < 0 is +Inf */
    pthread_mutex_lock(&m->mu);
    m->c.h[h].bucket[b]++;
    m->c.h[h].count++;
    m->c.h[h].sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

static void head(struct sbuf *b, const char *name, const char *type, const char *help) {
    sbuf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric of one value: its HELP and TYPE lines, then the line "name value". */
static void metric_int(struct sbuf *b, const char *name, const char *type, const char *help,
                       long long v) {
    head(b, name, type, help);
    sbuf_addf(b, "%s %lld\n", name, v);
}

static void metric_real(struct sbuf *b, const char *name, const char *type, const char *help,
                        double v) {
    head(b, name, type, help);
    sbuf_addf(b, "%s %.6f\n", name, v);
}

int metrics_render(struct metrics *m, const struct sched_stats *st, char **out, size_t *len) {
    struct sbuf b = {0};
    sbuf_add(&b, "", 0);
    pthread_mutex_lock(&m->mu);
    struct counts snap = m->c; /* render from a copy: the lock is held only briefly */
    pthread_mutex_unlock(&m->mu);

    head(&b, "tpd_requests_total", "counter", "HTTP requests answered, by status code.");
    for (int i = 0; i < snap.n_codes; i++)
        sbuf_addf(&b, "tpd_requests_total{code=\"%d\"} %lu\n", snap.codes[i], snap.code_count[i]);
    if (st) {
        metric_int(&b, "tpd_queue_depth", "gauge", "Requests waiting for admission.", st->queued);
        metric_int(&b, "tpd_running_sequences", "gauge",
                   "Sequences in the running batch (preempted ones included).", st->running);
        metric_int(&b, "tpd_kv_blocks_used", "gauge",
                   "KV cache blocks held by running sequences (a shared block once).",
                   st->kv_blocks_used);
        metric_int(&b, "tpd_kv_blocks_free", "gauge",
                   "KV cache blocks available: free, or cached and held by no sequence "
                   "(reclaimable).",
                   st->kv_blocks_free);
        metric_int(&b, "tpd_prefix_cache_blocks", "gauge",
                   "KV cache blocks in the prefix cache (held by sequences or idle).",
                   st->kv_blocks_cached);
        metric_int(&b, "tpd_max_context_tokens", "gauge",
                   "Longest sequence (prompt + generated) served.", st->max_ctx);
        metric_int(&b, "tpd_spec_draft_tokens_total", "counter",
                   "Speculative decoding: tokens drafted.", st->spec_drafted);
        metric_int(&b, "tpd_spec_accepted_tokens_total", "counter",
                   "Speculative decoding: drafted tokens accepted.", st->spec_accepted);
        metric_int(&b, "tpd_spec_verify_steps_total", "counter",
                   "Speculative decoding: sequence-steps that verified drafts.", st->spec_verified);
        metric_real(&b, "tpd_spec_acceptance_rate", "gauge",
                    "Speculative decoding: accepted / drafted tokens so far (0: none drafted).",
                    st->spec_drafted ? (double)st->spec_accepted / (double)st->spec_drafted : 0.0);
        metric_real(&b, "tpd_spec_mean_accepted_length", "gauge",
                    "Speculative decoding: accepted drafts per verifying sequence-step (tokens "
                    "per step = this + 1).",
                    st->spec_verified ? (double)st->spec_accepted / (double)st->spec_verified
                                      : 0.0);
        metric_int(&b, "tpd_draining", "gauge",
                   "1 while the server finishes in-flight requests before exiting.",
                   st->draining ? 1 : 0);
        static const char *per_uid[3][2] = {
            {"tpd_uid_running_sequences", "Sequences running (or preempted) per client uid."},
            {"tpd_uid_queued_requests", "Requests waiting per client uid."},
            {"tpd_uid_kv_blocks", "KV cache blocks held per client uid."}};
        for (int k = 0; k < 3 && st->n_uids; k++) {
            head(&b, per_uid[k][0], "gauge", per_uid[k][1]);
            for (int i = 0; i < st->n_uids; i++) {
                const struct sched_uid_usage *u = &st->uids[i];
                int v = k == 0 ? u->running : k == 1 ? u->queued : u->kv_blocks;
                if (u->uid == 0xffffffffu)
                    sbuf_addf(&b, "%s{uid=\"unknown\"} %d\n", per_uid[k][0], v);
                else sbuf_addf(&b, "%s{uid=\"%u\"} %d\n", per_uid[k][0], u->uid, v);
            }
        }
    }
    metric_int(&b, "tpd_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
               (long long)snap.prompt_tokens);
    metric_int(&b, "tpd_generation_tokens_total", "counter",
               "Tokens generated by finished requests.", (long long)snap.generated_tokens);
    metric_int(&b, "tpd_prefix_cache_queries_total", "counter",
               "Prompt tokens looked up in the prefix cache (first admission of each request).",
               (long long)snap.prefix_queried);
    metric_int(&b, "tpd_prefix_cache_hits_total", "counter",
               "Prompt tokens found in the prefix cache (not computed).",
               (long long)snap.prefix_hit);
    metric_int(&b, "tpd_prompt_tokens_computed_total", "counter",
               "Prompt tokens the model computed (prefill; again after a preemption; not those "
               "found in the prefix cache).",
               (long long)snap.prompt_computed);
    head(&b, "tpd_logits_rows_total", "counter",
         "Logits rows brought back to rank 0: whole vocabulary rows, or a row's best candidates "
         "(rows of greedy "
         "or small-top_k requests without penalties, bias or logprobs).");
    sbuf_addf(&b, "tpd_logits_rows_total{form=\"full\"} %lu\n", snap.logits_rows[0]);
    sbuf_addf(&b, "tpd_logits_rows_total{form=\"candidates\"} %lu\n", snap.logits_rows[1]);
    if (snap.moe_all > 0) { /* a mixture-of-experts model split expert-parallel */
        metric_int(&b, "tpd_moe_expert_pairs_total", "counter",
                   "Expert parallel: (token, expert) pairs routed, summed over the MoE layers of "
                   "every step.",
                   (long long)snap.moe_all);
        metric_int(&b, "tpd_moe_busiest_rank_pairs_total", "counter",
                   "Expert parallel: of those, the pairs of the rank with the most in each layer "
                   "of each step.",
                   (long long)snap.moe_busiest);
        metric_real(&b, "tpd_moe_load_imbalance", "gauge",
                    "Expert parallel: busiest rank's pairs x ranks / all pairs so far (1: even; a "
                    "step's own from the counters' increase).",
                    snap.moe_busiest * snap.moe_ranks / snap.moe_all);
    }
    metric_int(&b, "tpd_preemptions_total", "counter",
               "Sequences preempted (KV blocks given back, recomputed later).",
               (long long)snap.preemptions);
    for (int h = 0; h < HIST_COUNT; h++) {
        const char *name = hist_def[h].name;
        head(&b, name, "histogram", hist_def[h].help);
        unsigned long cum = 0;
        int k = 0;
        for (; hist_def[h].le[k] >= 0; k++) {
            cum += snap.h[h].bucket[k];
            sbuf_addf(&b, "%s_bucket{le=\"%g\"} %lu\n", name, hist_def[h].le[k], cum);
        }
        cum += snap.h[h].bucket[k];
        sbuf_addf(&b, "%s_bucket{le=\"+Inf\"} %lu\n", name, cum);
        sbuf_addf(&b, "%s_sum %.9g\n", name, snap.h[h].sum);
        sbuf_addf(&b, "%s_count %lu\n", name, snap.h[h].count);
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
