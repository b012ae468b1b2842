#include "tpctl_bench.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/fatal.h"
#include "util/sbuf.h"

/* What one request measured. */
struct req_sample {
    double t_start, t_last;
    double ttft;  /* seconds to the first token chunk */
    double *gaps; /* seconds between consecutive token chunks */
    size_t n_gaps, cap_gaps;
    long chunks; /* token chunks seen */
    long tokens; /* usage.completion_tokens, else chunks */
    long prompt_tokens;
    long cached_tokens; /* of the prompt, found in the server's prefix cache; -1: not said */
    int ok;
};

/* One concurrency level, shared by its worker threads. */
struct level_run {
    const struct bench_opts *o;
    int total;
    int first_prompt; /* prompts are numbered across the whole run, so none repeats */
    atomic_int next;
    struct req_sample *reqs;
    pthread_mutex_t mu; /* guards the two below */
    int n_failed;
    char first_err[ERR_LEN];
};

/* Common English words, each one token (with its leading space) in the usual BPE vocabularies,
 * so that a prompt of P words is about P tokens. */
static const char *const WORDS[] = {
    " the",  " of",    " and",  " to",    " in",  " is",    " it",    " that",  " was",  " for",
    " on",   " are",   " with", " as",    " at",  " be",    " this",  " have",  " from", " or",
    " one",  " had",   " by",   " but",   " not", " what",  " all",   " were",  " we",   " when",
    " your", " can",   " said", " there", " use", " an",    " each",  " which", " she",  " do",
    " how",  " their", " if",   " will",  " up",  " other", " about", " out",   " many", " then",
    " them", " these", " so",   " some",  " her", " would", " make",  " like",  " him",  " into",
    " time", " has",   " look", " two",
};
#define N_WORDS (sizeof WORDS / sizeof *WORDS)

/* A different word sequence per request, so that no two prompts share a long prefix. */
static char *make_prompt(int idx, int n_words) {
    size_t cap = (size_t)n_words * 8 + 1, len = 0;
    char *p = xmalloc(cap);
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(idx + 1);
    for (int k = 0; k < n_words; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        const char *w = WORDS[x % N_WORDS];
        size_t wl = strlen(w);
        const char *s = (k == 0) ? w + 1 : w; /* no leading space on the first word */
        size_t sl = (k == 0) ? wl - 1 : wl;
        memcpy(p + len, s, sl);
        len += sl;
    }
    p[len] = 0;
    return p;
}

static int on_piece(void *ud, const char *text, size_t len, int finished) {
    struct req_sample *s = ud;
    (void)text;
    double t = clock_now();
    /* a closing chunk with no text carries the finish reason, not a token; an empty chunk
     * without one is a token whose bytes are still an incomplete UTF-8 sequence */
    if (len == 0 && finished) return 0;
    if (s->chunks == 0) {
        s->ttft = t - s->t_start;
    } else {
        if (s->n_gaps == s->cap_gaps) {
            s->cap_gaps = s->cap_gaps ? 2 * s->cap_gaps : 64;
            s->gaps = xrealloc(s->gaps, s->cap_gaps * sizeof *s->gaps);
        }
        s->gaps[s->n_gaps++] = t - s->t_last;
    }
    s->t_last = t;
    s->chunks++;
    return 0;
}

static void record_failure(struct level_run *L, const char *msg) {
    pthread_mutex_lock(&L->mu);
    if (L->n_failed++ == 0) snprintf(L->first_err, sizeof L->first_err, "%s", msg);
    pthread_mutex_unlock(&L->mu);
}

/* Sends prompt as request idx; on success appends the answer to *reply (when not NULL)
 * and returns 0. */
static int run_one(struct level_run *L, struct httpc *c, int *open, int idx, const char *prompt,
                   struct sbuf *reply) {
    const struct bench_opts *o = L->o;
    struct req_sample *s = &L->reqs[idx];
    char err[ERR_LEN];
    if (!*open) {
        if (api_connect(c, &o->target, err)) {
            record_failure(L, err);
            return -1;
        }
        *open = 1;
    }
    struct gen_opts g = {.model = o->model,
                         .max_tokens = o->max_tokens,
                         .temperature = o->temperature,
                         .seed = -1,
                         .stream = 1,
                         .ignore_eos = 1};
    cJSON *body = api_completion_body(&g, prompt);
    struct api_result res;
    s->t_start = clock_now();
    int rc = api_generate(c, "/v1/completions", body, on_piece, s, &res, err);
    cJSON_Delete(body);
    if (rc == 0 && s->chunks == 0) rc = err_set(err, "the stream carried no tokens");
    if (rc == 0) {
        s->ok = 1;
        s->tokens = res.completion_tokens >= 0 ? res.completion_tokens : s->chunks;
        s->prompt_tokens = res.prompt_tokens;
        s->cached_tokens = res.cached_tokens;
        if (reply && res.text) sbuf_add(reply, res.text, res.text_len);
    } else {
        record_failure(L, err);
    }
    if (rc || !c->parser.keep_alive) {
        httpc_close(c);
        *open = 0;
    }
    api_result_free(&res);
    return rc;
}

/* The system prompt of the shared-prefix workload: the same for every request of the run
 * (its seed is one no request's own words use). */
#define SHARED_SEED (1 << 30)

/* Conversation k (0-based) of the level: requests k*turns .. k*turns+turns-1. Each turn's
 * prompt is the shared system prompt (if any), then every earlier turn's words and
 * answer, then this turn's own words; a failed turn ends the conversation. */
static void run_conversation(struct level_run *L, struct httpc *c, int *open, int k) {
    const struct bench_opts *o = L->o;
    int turns = o->turns > 1 ? o->turns : 1;
    struct sbuf convo = {0};
    sbuf_add(&convo, "", 0);
    if (o->shared_prefix > 0) {
        char *sys = make_prompt(SHARED_SEED, o->shared_prefix);
        sbuf_adds(&convo, sys);
        free(sys);
    }
    for (int t = 0; t < turns && k * turns + t < L->total; t++) {
        int idx = k * turns + t;
        char *words = make_prompt(L->first_prompt + idx, o->prompt_len);
        if (convo.len) sbuf_add(&convo, " ", 1);
        sbuf_adds(&convo, words);
        free(words);
        if (run_one(L, c, open, idx, convo.p, turns > 1 ? &convo : NULL)) break;
    }
    sbuf_free(&convo);
}

static void *worker(void *arg) {
    struct level_run *L = arg;
    struct httpc *c = xmalloc(sizeof *c);
    int open = 0, turns = L->o->turns > 1 ? L->o->turns : 1;
    for (;;) {
        int k = atomic_fetch_add(&L->next, 1);
        if (k * turns >= L->total) break;
        run_conversation(L, c, &open, k);
    }
    if (open) httpc_close(c);
    free(c);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double q) {
    if (n == 0) return NAN;
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    double f = pos - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * f;
}

/* Runs `total` requests over `conc` threads; returns the wall time in seconds. */
static double run_level(struct level_run *L, int conc, char *err) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t *th = xmalloc(sizeof *th * (size_t)conc);
    int started = 0;
    double t0 = clock_now();
    for (; started < conc; started++)
        if (pthread_create(&th[started], &attr, worker, L)) break;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    double wall = clock_now() - t0;
    pthread_attr_destroy(&attr);
    free(th);
    if (started == 0) {
        err_set(err, "cannot start a bench thread");
        return -1;
    }
    return wall;
}

static void level_init(struct level_run *L, const struct bench_opts *o, int total,
                       int first_prompt) {
    memset(L, 0, sizeof *L);
    L->o = o;
    L->total = total;
    L->first_prompt = first_prompt;
    atomic_init(&L->next, 0);
    L->reqs = xcalloc((size_t)total, sizeof *L->reqs);
    pthread_mutex_init(&L->mu, NULL);
}

static void level_free(struct level_run *L) {
    for (int i = 0; i < L->total; i++) free(L->reqs[i].gaps);
    free(L->reqs);
    pthread_mutex_destroy(&L->mu);
}

static cJSON *double_array(const double *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* bench_run's warm-up: o->warmup requests one at a time, none of them measured. */
static int bench_warmup(const struct bench_opts *o, char *err) {
    struct level_run W;
    level_init(&W, o, o->warmup, 0);
    double wall = run_level(&W, 1, err);
    int failed = W.n_failed;
    if (failed) err_set(err, "warm-up request failed: %s", W.first_err);
    level_free(&W);
    if (wall < 0 || failed) return -1;
    return 0;
}

/* bench_run's table header (text output only). */
static void bench_header(const struct bench_opts *o, FILE *out) {
    if (o->shared_prefix > 0 || o->turns > 1)
        fprintf(out,
                "# shared-prefix workload: a %d-word system prompt, conversations of %d turns "
                "of ~%d "
                "words each\n",
                o->shared_prefix, o->turns > 1 ? o->turns : 1, o->prompt_len);
    fprintf(out,
            "# prompt ~%d tokens, max_tokens %d (ignore_eos), %d requests per level, socket %s\n"
            "%5s %6s %5s %9s %11s %10s %10s %6s %10s %10s\n",
            o->prompt_len, o->max_tokens, o->requests, o->target.socket, "conc", "reqs", "errs",
            "req/s", "out tok/s", "TTFT p50", "TTFT p99", "hit", "ITL p50", "ITL p99");
}

/* One level's figures, gathered from its successful requests. */
struct level_stats {
    double *ttft, *gaps; /* sorted; the caller frees them */
    size_t n_ttft, n_gaps;
    long tokens, ok, prompt_sum, prompt_n, cached_sum, cached_prompt_sum;
    double hit, rps, tps, t50, t99, i50, i99;
};

/* bench_run's per-level statistics: TTFTs and inter-token gaps sorted, their percentiles,
 * throughput and the prefix cache's hit rate. */
static void level_gather(const struct level_run *L, int total, double wall,
                         struct level_stats *st) {
    st->ttft = xmalloc(sizeof(double) * (size_t)total);
    st->n_ttft = 0;
    size_t n_gaps = 0;
    st->tokens = st->ok = st->prompt_sum = st->prompt_n = st->cached_sum = 0;
    st->cached_prompt_sum = 0;
    for (int i = 0; i < total; i++) n_gaps += L->reqs[i].ok ? L->reqs[i].n_gaps : 0;
    st->gaps = xmalloc(sizeof(double) * (n_gaps ? n_gaps : 1));
    n_gaps = 0;
    for (int i = 0; i < total; i++) {
        const struct req_sample *s = &L->reqs[i];
        if (!s->ok) continue;
        st->ok++;
        st->tokens += s->tokens;
        st->ttft[st->n_ttft++] = s->ttft;
        memcpy(st->gaps + n_gaps, s->gaps, s->n_gaps * sizeof(double));
        n_gaps += s->n_gaps;
        if (s->prompt_tokens >= 0) st->prompt_sum += s->prompt_tokens, st->prompt_n++;
        if (s->prompt_tokens >= 0 && s->cached_tokens >= 0)
            st->cached_sum += s->cached_tokens, st->cached_prompt_sum += s->prompt_tokens;
    }
    st->n_gaps = n_gaps;
    /* the share of prompt tokens the server's prefix cache held (NaN: it did not say) */
    st->hit = st->cached_prompt_sum > 0 ? (double)st->cached_sum / (double)st->cached_prompt_sum
                                        : NAN;
    qsort(st->ttft, st->n_ttft, sizeof(double), cmp_double);
    qsort(st->gaps, st->n_gaps, sizeof(double), cmp_double);
    st->rps = st->ok / wall;
    st->tps = st->tokens / wall;
    st->t50 = 1e3 * bench_percentile(st->ttft, st->n_ttft, 0.50);
    st->t99 = 1e3 * bench_percentile(st->ttft, st->n_ttft, 0.99);
    st->i50 = 1e3 * bench_percentile(st->gaps, st->n_gaps, 0.50);
    st->i99 = 1e3 * bench_percentile(st->gaps, st->n_gaps, 0.99);
}

/* bench_run's line for one level: a JSON object (--json) or a table row. */
static void level_print(const struct bench_opts *o, FILE *out, int conc, int n_failed, double wall,
                        const struct level_stats *st) {
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "concurrency", conc);
        cJSON_AddNumberToObject(j, "requests", (double)st->ok);
        cJSON_AddNumberToObject(j, "errors", n_failed);
        cJSON_AddNumberToObject(j, "wall_s", wall);
        cJSON_AddNumberToObject(j, "req_per_s", st->rps);
        cJSON_AddNumberToObject(j, "output_tokens", (double)st->tokens);
        cJSON_AddNumberToObject(j, "output_tok_per_s", st->tps);
        if (st->prompt_n)
            cJSON_AddNumberToObject(j, "prompt_tokens_mean",
                                    (double)st->prompt_sum / (double)st->prompt_n);
        if (!isnan(st->hit)) {
            cJSON_AddNumberToObject(j, "cached_tokens", (double)st->cached_sum);
            cJSON_AddNumberToObject(j, "prefix_hit_rate", st->hit);
        }
        /* NaN has no JSON form: a missing percentile is null */
        const char *keys[4] = {"ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"};
        double vals[4] = {st->t50, st->t99, st->i50, st->i99};
        for (int k = 0; k < 4; k++)
            if (isnan(vals[k])) cJSON_AddNullToObject(j, keys[k]);
            else cJSON_AddNumberToObject(j, keys[k], vals[k]);
        char *s = cJSON_PrintUnformatted(j);
        fprintf(out, "%s\n", s);
        free(s);
        cJSON_Delete(j);
    } else {
        char hs[16] = "-";
        if (!isnan(st->hit)) snprintf(hs, sizeof hs, "%.1f%%", 100 * st->hit);
        fprintf(out, "%5d %6ld %5d %9.3f %11.2f %7.2f ms %7.2f ms %6s %7.2f ms %7.2f ms\n", conc,
                st->ok, n_failed, st->rps, st->tps, st->t50, st->t99, hs, st->i50, st->i99);
    }
}

/* bench_run's --samples file: every level's TTFTs and gaps; rc unless it cannot be written. */
static int write_samples(const struct bench_opts *o, cJSON *samples, int rc, char *err) {
    char *s = cJSON_PrintUnformatted(samples);
    FILE *f = fopen(o->samples_path, "w");
    int bad = !f || fputs(s, f) < 0;
    if (f && fclose(f)) bad = 1;
    if (bad && rc == 0) rc = err_set(err, "cannot write %s", o->samples_path);
    free(s);
    cJSON_Delete(samples);
    return rc;
}

int bench_run(const struct bench_opts *o, FILE *out, char *err) {
    char lerr[ERR_LEN];
    if (o->warmup > 0 && bench_warmup(o, err)) return -1;
    if (!o->json) bench_header(o, out);
    cJSON *samples = o->samples_path ? cJSON_CreateArray() : NULL;
    int rc = 0, n_prompts = o->warmup > 0 ? o->warmup : 0;
    for (int li = 0; li < o->n_levels; li++) {
        int conc = o->levels[li];
        int total = o->requests > conc ? o->requests : conc;
        struct level_run L;
        level_init(&L, o, total, n_prompts);
        n_prompts += total;
        double wall = run_level(&L, conc, lerr);
        if (wall < 0) {
            level_free(&L);
            rc = err_set(err, "%s", lerr);
            break;
        }
        struct level_stats st;
        level_gather(&L, total, wall, &st);
        level_print(o, out, conc, L.n_failed, wall, &st);
        fflush(out);
        if (samples) {
            cJSON *lv = cJSON_CreateObject();
            cJSON_AddNumberToObject(lv, "concurrency", conc);
            cJSON_AddItemToObject(lv, "ttft_s", double_array(st.ttft, st.n_ttft));
            cJSON_AddItemToObject(lv, "itl_s", double_array(st.gaps, st.n_gaps));
            cJSON_AddItemToArray(samples, lv);
        }
        if (L.n_failed && rc == 0)
            rc = err_set(err, "%d of %d requests failed at concurrency %d; first: %s", L.n_failed,
                         total, conc, L.first_err);
        free(st.ttft);
        free(st.gaps);
        level_free(&L);
    }
    if (samples) rc = write_samples(o, samples, rc, err);
    return rc;
}
