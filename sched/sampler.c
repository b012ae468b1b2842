#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"
#include "../util/logit_cand.h"

/* Below this temperature vLLM samples greedily (its _SAMPLING_EPS). */
#define GREEDY_EPS 1e-5f
/* top_k up to this size is found with a heap in one read of the row; larger k by
 * quickselect over the whole row. */
#define TOPK_HEAP 2048
/* Quickselect rounds before giving the rest of the range to qsort (bad pivots). */
#define SELECT_ROUNDS 64
/* Ids per block of the dense weights: the draw finds its block from the block sums, then
 * walks one block, instead of a serial walk over the whole vocabulary. */
#define BLOCK 256

struct sampler_count {
    int32_t id;    /* -1: empty slot */
    int32_t count; /* times in the output; 0 for a prompt-only id */
};
struct sampler_saved {
    int32_t id;
    float v;
};

struct sampler {
    struct sampling_params sp; /* copy; the logit_bias arrays are the sampler's own below */
    int n_vocab;
    uint64_t rng[4];
    int n_bias;
    int32_t *bias_ids;
    float *bias;
    int track_prompt, track_output; /* whether the penalties need the id counts */
    struct sampler_count *counts;   /* open addressing on the token id */
    int counts_cap, counts_len;     /* cap: power of two */
    struct sampler_saved *saved;    /* logits overwritten by bias/penalties, restored */
    int saved_cap;
    /* the distribution being drawn from: dense weights by id, or a candidate list */
    struct logit_cand *cand; /* (n_vocab) */
    float *w;                /* (n_vocab) */
    double *block_sum;       /* (n_vocab / BLOCK + 1) sums of w over blocks of ids */
    int dense, n_cand;
    double total; /* sum of the weights kept */
};

/* ---- generator: xoshiro256**, seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t st[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(r >> 11) * 0x1.0p-53;
}

/* ---- row passes in 4-wide vectors (GCC vector extensions: SSE2 on any x86-64, NEON on
 * arm64). The loops over a 150k vocabulary are most of the sampler's time. ---- */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4_load(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline v4f v4_splat(float x) { return (v4f){x, x, x, x}; }
static inline v4f v4_select(v4i mask, v4f a, v4f b) {
    return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask));
}
static inline float v4_hmax(v4f v) {
    float m = v[0];
    for (int i = 1; i < 4; i++) m = v[i] > m ? v[i] : m;
    return m;
}
static inline double v4_hsum(v4f v) {
    double s = 0;
    for (int i = 0; i < 4; i++) s += v[i];
    return s;
}

/* exp(x) for x <= 0 to about 2 ulp (Cody-Waite reduction, Cephes polynomial); 0 below
 * -87 (where float would go subnormal), for -inf and for NaN: those lanes compute garbage
 * that the final mask drops. */
static inline v4f v4_exp(v4f x) {
    v4i ok = x >= v4_splat(-87.0f);
    v4f big = v4_splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
    v4f n = (x * v4_splat(1.44269504088896341f) + big) - big;
    v4f r = x - n * v4_splat(0.693359375f) - n * v4_splat(-2.12194440e-4f);
    v4f p = v4_splat(1.9875691500e-4f);
    p = p * r + v4_splat(1.3981999507e-3f);
    p = p * r + v4_splat(8.3334519073e-3f);
    p = p * r + v4_splat(4.1665795894e-2f);
    p = p * r + v4_splat(1.6666665459e-1f);
    p = p * r + v4_splat(5.0000001201e-1f);
    p = p * r * r + r + v4_splat(1.0f);
    n = (v4f)((v4i)n & ok); /* in range for the conversion */
    v4i scale = (__builtin_convertvector(n, v4i) + 127) << 23;
    return (v4f)((v4i)(p * (v4f)scale) & ok);
}

static inline float exp1(float x) {
    v4f v = v4_exp(v4_splat(x));
    return v[0];
}

/* The row passes get an AVX2+FMA build beside the baseline one on x86-64, picked at load
 * time (GCC function multiversioning); the 4-wide code then runs as VEX with fused
 * multiply-adds. SAMPLER_BASELINE_ONLY leaves the baseline alone, so tests can run it; so
 * does a ThreadSanitizer build, whose instrumented resolver would run before its runtime. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(SAMPLER_BASELINE_ONLY) && !defined(__SANITIZE_THREAD__)
#define ROW_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define ROW_CLONES
#endif

/* Largest value of x[0, n), ignoring NaN; -inf if none. Four accumulators, as each step
 * waits on the last. */
ROW_CLONES static float row_max(const float *x, int n) {
    v4f m0 = v4_splat(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        v4f a = v4_load(x + i), b = v4_load(x + i + 4), c = v4_load(x + i + 8),
            d = v4_load(x + i + 12);
        m0 = v4_select(a > m0, a, m0);
        m1 = v4_select(b > m1, b, m1);
        m2 = v4_select(c > m2, c, m2);
        m3 = v4_select(d > m3, d, m3);
    }
    m0 = v4_select(m1 > m0, m1, m0);
    m2 = v4_select(m3 > m2, m3, m2);
    m0 = v4_select(m2 > m0, m2, m0);
    float r = v4_hmax(m0);
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

int sampler_argmax(const float *logits, int n) {
    float m = row_max(logits, n);
    v4f mv = v4_splat(m);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        v4i eq = v4_load(logits + i) == mv;
        if (eq[0] | eq[1] | eq[2] | eq[3]) break;
    }
    for (; i < n; i++)
        if (logits[i] == m) return i;
    return 0; /* all NaN */
}

/* log-sum-exp of the raw row, for its log_softmax */
ROW_CLONES static double log_sum_exp(const float *x, int n) {
    float mx = row_max(x, n);
    if (mx == -INFINITY) return -INFINITY;
    v4f acc = v4_splat(0);
    double sum = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        acc += v4_exp(v4_load(x + i) - v4_splat(mx));
        if ((i & (BLOCK - 1)) == BLOCK - 4) { /* float lanes over one block only */
            sum += v4_hsum(acc);
            acc = v4_splat(0);
        }
    }
    sum += v4_hsum(acc);
    for (; i < n; i++) sum += exp1(x[i] - mx);
    return mx + log(sum);
}

/* ---- ordering: larger value first, lower id on ties ---- */

/* One integer key per (value, id) whose order is that strict total order, so selection
 * loops compare once and can run branch-free: the float's bits made monotone (+0 and -0
 * merged), then the id reversed. */
static inline uint64_t cand_key(float v, int32_t id) {
    uint32_t u;
    v += 0.0f;
    memcpy(&u, &v, sizeof u);
    u ^= (uint32_t)((int32_t)u >> 31) | 0x80000000u;
    return ((uint64_t)u << 32) | (uint32_t)(INT32_MAX - id);
}

static inline uint64_t ckey(const struct logit_cand *c) { return cand_key(c->v, c->id); }

static int cand_cmp(const void *a, const void *b) {
    uint64_t x = ckey(a), y = ckey(b);
    return x > y ? -1 : x < y;
}

static inline void cand_swap(struct logit_cand *a, struct logit_cand *b) {
    struct logit_cand t = *a;
    *a = *b;
    *b = t;
}

/* Lomuto partition of c[lo, hi) around a median-of-three pivot: afterwards c[lo, p) are
 * better than c[p] and c[p+1, hi) worse. Returns p and the mass (sum of v) of c[lo, p) in
 * *mass. Branch-free, as on real rows the comparison is a coin toss. */
static int partition(struct logit_cand *c, int lo, int hi, double *mass) {
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (ckey(&c[mid]) > ckey(&c[lo])) cand_swap(&c[mid], &c[lo]);
    if (ckey(&c[last]) > ckey(&c[lo])) cand_swap(&c[last], &c[lo]);
    if (ckey(&c[mid]) > ckey(&c[last])) cand_swap(&c[mid], &c[last]);
    /* now c[last] holds the median */
    uint64_t pk = ckey(&c[last]);
    int p = lo;
    double m = 0;
    for (int i = lo; i < last; i++) {
        struct logit_cand t = c[i];
        int b = ckey(&t) > pk;
        c[i] = c[p];
        c[p] = t;
        p += b;
        m += b ? t.v : 0.0f;
    }
    cand_swap(&c[p], &c[last]);
    *mass = m;
    return p;
}

/* Reorders c[0, n) so that c[0, k) hold its k best (in no particular order). Expected O(n). */
static void select_best(struct logit_cand *c, int n, int k) {
    int lo = 0, hi = n, rounds = 0;
    while (hi - lo > 1) {
        if (++rounds > SELECT_ROUNDS) {
            qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
            return;
        }
        double m;
        int p = partition(c, lo, hi, &m);
        if (k == p || k == p + 1) return;
        if (k < p) hi = p;
        else lo = p + 1;
    }
}

/* Reorders c[0, n) (v = weight) so that c[0, cut) is the smallest set of the best
 * candidates whose weight reaches target, and returns cut (at least 1). This is top-p
 * without a full sort: a quickselect that keeps descending into the side holding the
 * boundary, so expected O(n). */
static int select_mass(struct logit_cand *c, int n, double target) {
    if (n <= 0) return 0;
    int lo = 0, hi = n, rounds = 0;
    double need = target; /* weight still missing once all of c[0, lo) is taken */
    while (hi - lo > 0) {
        if (hi - lo <= 16 || ++rounds > SELECT_ROUNDS) {
            qsort(c + lo, (size_t)(hi - lo), sizeof *c, cand_cmp);
            for (int i = lo; i < hi; i++) {
                need -= c[i].v;
                if (need <= 0) return i + 1;
            }
            return hi;
        }
        double m;
        int p = partition(c, lo, hi, &m);
        if (m >= need) {
            hi = p;
        } else if (m + c[p].v >= need) {
            return p + 1;
        } else {
            need -= m + c[p].v;
            lo = p + 1;
        }
    }
    return lo > 0 ? lo : 1;
}

/* Min-heap on the key: h[0] is the worst of the kept. */
static void heap_down(struct logit_cand *h, int n, int i) {
    struct logit_cand x = h[i];
    uint64_t kx = ckey(&x);
    for (;;) {
        int j = 2 * i + 1;
        if (j >= n) break;
        if (j + 1 < n && ckey(&h[j + 1]) < ckey(&h[j])) j++;
        if (ckey(&h[j]) >= kx) break;
        h[i] = h[j];
        i = j;
    }
    h[i] = x;
}

/* The k best of x[0, n) into out[0, k) (unordered), NaN never. One read of the row: nearly
 * every entry loses its first comparison with the current k-th, so this beats a quickselect
 * for the top_k and top_logprobs sizes people use. Returns how many: k, or fewer when the
 * row has fewer entries that are not NaN. */
static int top_heap(const float *x, int n, int k, struct logit_cand *out) {
    /* the first k entries that are not NaN (NaN's key is the largest: it would hold a slot;
     * util/logit_cand.h's candidates never list it either) */
    int m = 0, i = 0;
    for (; i < n && m < k; i++)
        if (x[i] == x[i]) out[m++] = (struct logit_cand){x[i], i};
    k = m;
    if (k == 0) return 0;
    for (int j = k / 2 - 1; j >= 0; j--) heap_down(out, k, j);
    v4f worst = v4_splat(out[0].v);
    while (i < n) {
        /* eight at a time past the ones that cannot enter */
        if (i + 8 <= n) {
            v4i in = (v4_load(x + i) >= worst) | (v4_load(x + i + 4) >= worst);
            if (!(in[0] | in[1] | in[2] | in[3])) {
                i += 8;
                continue;
            }
        }
        for (int end = i + 8 < n ? i + 8 : n; i < end; i++) {
            if (!(x[i] >= worst[0]) || cand_key(x[i], i) <= ckey(&out[0])) continue;
            out[0] = (struct logit_cand){x[i], i};
            heap_down(out, k, 0);
            worst = v4_splat(out[0].v);
        }
    }
    return k;
}

/* ---- token counts for the penalties ---- */

static inline uint32_t slot_of(int32_t id, int cap) {
    return ((uint32_t)id * 0x9e3779b1u) & (uint32_t)(cap - 1);
}

/* The count of id; inserted (at 0) when absent. Grows the table at half load, and the
 * restore list with it: every counted id may be overwritten once per step. */
static struct sampler_count *count_get(struct sampler *s, int32_t id) {
    if (2 * (s->counts_len + 1) > s->counts_cap) {
        int cap = s->counts_cap ? 2 * s->counts_cap : 64;
        struct sampler_count *t = xmalloc(sizeof *t * (size_t)cap);
        for (int i = 0; i < cap; i++) t[i].id = -1;
        for (int i = 0; i < s->counts_cap; i++) {
            if (s->counts[i].id < 0) continue;
            uint32_t h = slot_of(s->counts[i].id, cap);
            while (t[h].id >= 0) h = (h + 1) & (uint32_t)(cap - 1);
            t[h] = s->counts[i];
        }
        free(s->counts);
        s->counts = t;
        s->counts_cap = cap;
    }
    uint32_t h = slot_of(id, s->counts_cap);
    while (s->counts[h].id >= 0) {
        if (s->counts[h].id == id) return &s->counts[h];
        h = (h + 1) & (uint32_t)(s->counts_cap - 1);
    }
    s->counts[h] = (struct sampler_count){id, 0};
    s->counts_len++;
    if (s->n_bias + s->counts_len > s->saved_cap) {
        s->saved_cap = 2 * (s->n_bias + s->counts_len);
        free(s->saved);
        s->saved = xmalloc(sizeof *s->saved * (size_t)s->saved_cap);
    }
    return &s->counts[h];
}

/* ---- lifetime ---- */

struct sampler *sampler_new(const struct sampling_params *sp, int n_vocab, const int32_t *prompt,
                            int n_prompt) {
    if (n_vocab < 1) return NULL;
    struct sampler *s = xcalloc(1, sizeof *s);
    s->sp = *sp;
    if (s->sp.top_logprobs < 0) s->sp.top_logprobs = 0;
    if (s->sp.top_logprobs > REQ_MAX_TOP_LOGPROBS) s->sp.top_logprobs = REQ_MAX_TOP_LOGPROBS;
    /* the frontend validates like vLLM; out of range these would empty the kept set */
    if (s->sp.min_p > 1) s->sp.min_p = 1;
    if (!(s->sp.top_p > 0)) s->sp.top_p = 0;
    if (!(s->sp.repetition_penalty > 0)) s->sp.repetition_penalty = 1; /* would divide by 0 */
    s->n_vocab = n_vocab;
    rng_seed(s->rng, sp->seed);
    s->cand = xmalloc(sizeof *s->cand * (size_t)n_vocab);
    s->w = xmalloc(sizeof *s->w * (size_t)n_vocab);
    s->block_sum = xmalloc(sizeof *s->block_sum * (size_t)(n_vocab / BLOCK + 1));
    /* the request owns its bias arrays: keep our own copy of the valid entries */
    int nb = sp->n_logit_bias > 0 ? sp->n_logit_bias : 0;
    s->bias_ids = xmalloc(sizeof *s->bias_ids * (size_t)(nb + 1));
    s->bias = xmalloc(sizeof *s->bias * (size_t)(nb + 1));
    for (int i = 0; i < nb; i++) {
        if (sp->logit_bias_ids[i] < 0 || sp->logit_bias_ids[i] >= n_vocab) continue;
        s->bias_ids[s->n_bias] = sp->logit_bias_ids[i];
        s->bias[s->n_bias++] = sp->logit_bias[i];
    }
    s->sp.logit_bias_ids = NULL;
    s->sp.logit_bias = NULL;
    s->sp.n_logit_bias = 0;
    s->saved_cap = s->n_bias;
    s->saved = xmalloc(sizeof *s->saved * (size_t)(s->saved_cap + 1));
    s->track_output = sp->presence_penalty != 0 || sp->frequency_penalty != 0 ||
                      s->sp.repetition_penalty != 1;
    s->track_prompt = s->sp.repetition_penalty != 1;
    if (s->track_prompt)
        for (int i = 0; i < n_prompt; i++)
            if (prompt[i] >= 0 && prompt[i] < n_vocab) count_get(s, prompt[i]);
    return s;
}

void sampler_delete(struct sampler *s) {
    if (!s) return;
    free(s->bias_ids);
    free(s->bias);
    free(s->counts);
    free(s->saved);
    free(s->cand);
    free(s->w);
    free(s->block_sum);
    free(s);
}

/* ---- the pipeline ---- */

/* Steps 2-4 of the header, in place; the old values go to s->saved (returns how many). */
static int apply_bias_penalties(struct sampler *s, float *logits) {
    int n = 0;
    for (int i = 0; i < s->n_bias; i++) {
        int32_t id = s->bias_ids[i];
        s->saved[n++] = (struct sampler_saved){id, logits[id]};
        logits[id] += s->bias[i];
    }
    if (!s->track_output) return n;
    float rep = s->sp.repetition_penalty, freq = s->sp.frequency_penalty,
          pres = s->sp.presence_penalty;
    for (int i = 0; i < s->counts_cap; i++) {
        const struct sampler_count *c = &s->counts[i];
        if (c->id < 0) continue;
        float l = logits[c->id];
        s->saved[n++] = (struct sampler_saved){c->id, l};
        if (rep != 1) l = l > 0 ? l / rep : l * rep;
        if (c->count > 0) {
            l -= freq * (float)c->count;
            l -= pres;
        }
        logits[c->id] = l;
    }
    return n;
}

static void restore(const struct sampler *s, float *logits, int n_saved) {
    /* in reverse, so an id written twice (bias, then penalty) gets its first value back */
    for (int i = n_saved - 1; i >= 0; i--) logits[s->saved[i].id] = s->saved[i].v;
}

/* The top_k candidates s->cand[0..n), best first (logits), through temperature, min_p and
 * top_p: scalar passes over them. The order is the candidates' canonical one, so a row and
 * its best candidates (sampler_next_cands) give the same weights in the same order. */
static void filter_sorted(struct sampler *s, int n) {
    const struct sampling_params *sp = &s->sp;
    struct logit_cand *c = s->cand;
    float xmax = -INFINITY;
    for (int i = 0; i < n; i++) {
        c[i].v /= sp->temperature;
        xmax = c[i].v > xmax ? c[i].v : xmax;
    }
    double total = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        c[m] = (struct logit_cand){exp1(c[i].v - xmax), c[i].id};
        if (c[m].v >= sp->min_p) total += c[m++].v; /* best weighs 1: min_p compares w */
    }
    if (sp->top_p < 1) {
        m = select_mass(c, m, (double)sp->top_p * total);
        total = 0;
        for (int i = 0; i < m; i++) total += c[i].v;
    }
    s->dense = 0;
    s->n_cand = m;
    s->total = total;
}

/* top_k <= TOPK_HEAP: the k candidates from a heap, sorted, then filter_sorted. */
static void filter_few(struct sampler *s, const float *logits) {
    int n = top_heap(logits, s->n_vocab, s->sp.top_k, s->cand);
    qsort(s->cand, (size_t)n, sizeof *s->cand, cand_cmp);
    filter_sorted(s, n);
}

/* Weights w[i] = exp((logits[i] - lmax) * inv_t), zeroed under min_w; their sums per
 * BLOCK ids into block_sum. Returns the total. The sampler's hottest loop. */
ROW_CLONES static double row_weights(const float *logits, int V, float lmax, float inv_t,
                                     float min_w, float *w, double *block_sum) {
    v4f shift = v4_splat(lmax), scale = v4_splat(inv_t), min_v = v4_splat(min_w);
    double total = 0;
    int i = 0;
    for (int b = 0; b * BLOCK < V; b++) {
        int end = (b + 1) * BLOCK < V ? (b + 1) * BLOCK : V;
        v4f acc0 = v4_splat(0), acc1 = acc0;
        for (; i + 8 <= end; i += 8) {
            v4f x0 = v4_exp((v4_load(logits + i) - shift) * scale);
            v4f x1 = v4_exp((v4_load(logits + i + 4) - shift) * scale);
            x0 = (v4f)((v4i)x0 & (x0 >= min_v));
            x1 = (v4f)((v4i)x1 & (x1 >= min_v));
            memcpy(w + i, &x0, sizeof x0);
            memcpy(w + i + 4, &x1, sizeof x1);
            acc0 += x0;
            acc1 += x1;
        }
        double bs = v4_hsum(acc0 + acc1);
        for (; i < end; i++) {
            float x = exp1((logits[i] - lmax) * inv_t);
            w[i] = x >= min_w ? x : 0;
            bs += w[i];
        }
        block_sum[b] = bs;
        total += bs;
    }
    return total;
}

/* The ids with w >= min_w into c, with their weights; returns how many. */
static int list_weights(const float *w, int V, float min_w, struct logit_cand *c) {
    v4f min_v = v4_splat(min_w);
    int n = 0, i = 0;
    for (; i + 8 <= V; i += 8) {
        v4i in = (v4_load(w + i) >= min_v) | (v4_load(w + i + 4) >= min_v);
        if (!(in[0] | in[1] | in[2] | in[3])) continue;
        for (int j = i; j < i + 8; j++)
            if (w[j] >= min_w) c[n++] = (struct logit_cand){w[j], j};
    }
    for (; i < V; i++)
        if (w[i] >= min_w) c[n++] = (struct logit_cand){w[i], i};
    return n;
}

/* No top_k, or a large one: weights for the whole row in vector passes. */
static void filter_all(struct sampler *s, const float *logits) {
    const struct sampling_params *sp = &s->sp;
    int V = s->n_vocab, top_k = sp->top_k > 0 && sp->top_k < V ? sp->top_k : 0;
    /* min_p keeps weight exp((l - lmax) / T) >= min_p, the best token weighing 1. */
    float min_w = sp->min_p > 0 ? sp->min_p : 0;
    double total = row_weights(logits, V, row_max(logits, V), 1 / sp->temperature, min_w, s->w,
                               s->block_sum);
    struct logit_cand *c = s->cand;
    int nc = 0;
    /* top_p never keeps a token whose weight is under (1 - top_p) / V: it and every worse
     * one weigh less than (1 - top_p) of a total of at least 1. Such tokens count in the
     * total, but are not listed for the selection, which on a real row leaves a few. */
    int list = sp->top_p < 1 && !top_k;
    if (list)
        nc = list_weights(s->w, V, fmaxf(fminf((1 - sp->top_p) / (float)V * 0.999f, 1), FLT_MIN),
                          c);
    if (top_k) { /* rare: a top_k too large for the heap */
        nc = list_weights(s->w, V, FLT_MIN, c);
        if (nc > top_k) {
            select_best(c, nc, top_k);
            nc = top_k;
        }
        total = 0;
        for (int j = 0; j < nc; j++) total += c[j].v;
    }
    s->dense = !top_k && !list;
    s->total = total;
    if (s->dense) return;
    if (sp->top_p < 1) {
        nc = select_mass(c, nc, (double)sp->top_p * total);
        total = 0;
        for (int j = 0; j < nc; j++) total += c[j].v;
    }
    s->n_cand = nc;
    s->total = total;
}

/* Runs steps 2-6 up to the draw. Greedy: returns the token. Otherwise returns -1 and leaves
 * the weights to draw from in s (dense w, or the candidate list). logits is restored. */
static int32_t prepare(struct sampler *s, float *logits) {
    int n_saved = apply_bias_penalties(s, logits);
    const struct sampling_params *sp = &s->sp;
    int32_t tok = -1;
    if (!(sp->temperature >= GREEDY_EPS)) /* NaN temperature reads as greedy too */
        tok = sampler_argmax(logits, s->n_vocab);
    else if (sp->top_k > 0 && sp->top_k < s->n_vocab && sp->top_k <= TOPK_HEAP)
        filter_few(s, logits);
    else filter_all(s, logits);
    restore(s, logits, n_saved);
    return tok;
}

/* The token at cumulative weight u * total. */
static int32_t draw(const struct sampler *s, double u) {
    double r = u * s->total, acc = 0;
    if (!s->dense) {
        const struct logit_cand *c = s->cand;
        for (int i = 0; i < s->n_cand; i++) {
            acc += c[i].v;
            if (r < acc) return c[i].id;
        }
        /* rounding left r at the very top: the last token with any weight */
        for (int i = s->n_cand - 1; i >= 0; i--)
            if (c[i].v > 0) return c[i].id;
        return s->n_cand ? c[0].id : 0; /* nothing has weight (a NaN row) */
    }
    int V = s->n_vocab, nb = (V + BLOCK - 1) / BLOCK, b = 0;
    while (b < nb - 1 && acc + s->block_sum[b] <= r) acc += s->block_sum[b++];
    int lo = b * BLOCK, hi = lo + BLOCK < V ? lo + BLOCK : V;
    for (int i = lo; i < hi; i++) {
        acc += s->w[i];
        if (r < acc) return i;
    }
    for (; b >= 0; b--, hi = lo, lo -= BLOCK)
        for (int i = hi - 1; i >= lo; i--)
            if (s->w[i] > 0) return i;
    return 0;
}

void sampler_probs(struct sampler *s, float *logits, float *probs) {
    memset(probs, 0, sizeof *probs * (size_t)s->n_vocab);
    int32_t tok = prepare(s, logits);
    if (tok >= 0) {
        probs[tok] = 1;
    } else if (s->dense) {
        for (int i = 0; i < s->n_vocab; i++) probs[i] = (float)(s->w[i] / s->total);
    } else {
        for (int i = 0; i < s->n_cand; i++) probs[s->cand[i].id] = (float)(s->cand[i].v / s->total);
    }
}

/* Step 1 of the header: ev's top_logprobs, and the log-sum-exp of the raw row for the
 * chosen token's logprob (0 when not asked). */
static double event_logprobs(struct sampler *s, const float *logits, struct token_event *ev) {
    if (ev) memset(ev, 0, sizeof *ev);
    if (!ev || !(s->sp.logprobs || s->sp.top_logprobs > 0)) return 0;
    double lse = log_sum_exp(logits, s->n_vocab);
    if (s->sp.top_logprobs > 0) {
        struct logit_cand top[REQ_MAX_TOP_LOGPROBS];
        ev->n_top = top_heap(logits, s->n_vocab, s->sp.top_logprobs, top);
        qsort(top, (size_t)ev->n_top, sizeof *top, cand_cmp);
        for (int i = 0; i < ev->n_top; i++) {
            ev->top_ids[i] = top[i].id;
            ev->top_logprobs[i] = (float)(top[i].v - lse);
        }
    }
    return lse;
}

/* The chosen token into ev and into the penalty counts. */
static void record(struct sampler *s, const float *logits, double lse, int32_t tok,
                   struct token_event *ev) {
    if (ev) {
        ev->token = tok;
        if (s->sp.logprobs || s->sp.top_logprobs > 0) ev->logprob = (float)(logits[tok] - lse);
    }
    if (s->track_output) count_get(s, tok)->count++;
}

void sampler_score(struct sampler *s, const float *logits, int32_t tok, struct token_event *ev) {
    double lse = event_logprobs(s, logits, ev);
    ev->token = tok;
    ev->logprob = (float)(logits[tok] - lse);
}

int32_t sampler_next(struct sampler *s, float *logits, struct token_event *ev) {
    double lse = event_logprobs(s, logits, ev);
    double u = rng_uniform(s->rng); /* one draw per token, greedy or not */
    int32_t tok = prepare(s, logits);
    if (tok < 0) tok = draw(s, u);
    record(s, logits, lse, tok, ev);
    return tok;
}

int sampler_light(const struct sampler *s, int k) {
    const struct sampling_params *sp = &s->sp;
    if (k < 1 || s->n_bias || s->track_output || sp->logprobs || sp->top_logprobs > 0) return 0;
    if (!(sp->temperature >= GREEDY_EPS)) return 1;
    return sp->top_k > 0 && sp->top_k <= k && sp->top_k < s->n_vocab && sp->top_k <= TOPK_HEAP;
}

/* prepare() for a light sampler over its row's best k candidates: the same token (greedy)
 * or the same kept list, in the same order, as prepare() over the whole row. */
static int32_t prepare_cands(struct sampler *s, const struct logit_cand *c, int k) {
    if (!(s->sp.temperature >= GREEDY_EPS))
        return c[0].id >= 0 ? c[0].id : 0; /* an all-NaN row: 0, as argmax */
    int n = 0;
    for (; n < s->sp.top_k && n < k && c[n].id >= 0; n++) s->cand[n] = c[n];
    filter_sorted(s, n);
    return -1;
}

/* One draw (u, already taken) from what prepare_cands left, recorded into ev. */
static int32_t next_from_cands(struct sampler *s, const struct logit_cand *c, int k, double u,
                               struct token_event *ev) {
    if (ev) memset(ev, 0, sizeof *ev);
    int32_t tok = prepare_cands(s, c, k);
    if (tok < 0) tok = draw(s, u);
    record(s, NULL, 0, tok, ev); /* light: no logprobs to read, no penalty counts */
    return tok;
}

int32_t sampler_next_cands(struct sampler *s, const struct logit_cand *c, int k,
                           struct token_event *ev) {
    return next_from_cands(s, c, k, rng_uniform(s->rng), ev);
}

int32_t sampler_verify_cands(struct sampler *s, const struct logit_cand *c, int k, int32_t draft,
                             int *accepted, struct token_event *ev) {
    int32_t tok = next_from_cands(s, c, k, rng_uniform(s->rng),
                                  ev); /* sampler_verify's point-mass case */
    *accepted = tok == draft;
    return tok;
}

/* p(id) of the distribution prepare() left (not greedy). */
static double kept_prob(const struct sampler *s, int32_t id) {
    if (s->total <= 0) return 0;
    if (s->dense) return s->w[id] / s->total;
    for (int i = 0; i < s->n_cand; i++)
        if (s->cand[i].id == id) return s->cand[i].v / s->total;
    return 0;
}

/* A draw from norm(max(0, p - q)) over the kept tokens; -1 when that is empty (p <= q
 * everywhere, so p == q and no draft could have been rejected). */
static int32_t draw_residual(const struct sampler *s, const float *q, double u) {
    double sum = 0;
    int n = s->dense ? s->n_vocab : s->n_cand;
    for (int pass = 0; pass < 2; pass++) {
        double acc = 0, r = u * sum;
        int32_t last = -1;
        for (int i = 0; i < n; i++) {
            int32_t id = s->dense ? i : s->cand[i].id;
            double w = (s->dense ? s->w[i] : s->cand[i].v) / s->total - q[id];
            if (w <= 0) continue;
            acc += w;
            last = id;
            if (pass == 1 && r < acc) return id;
        }
        if (pass == 1 || !(acc > 0)) return last;
        sum = acc;
    }
    return -1;
}

int32_t sampler_verify(struct sampler *s, float *logits, int32_t draft, const float *q,
                       int *accepted, struct token_event *ev) {
    double lse = event_logprobs(s, logits, ev);
    double u = rng_uniform(s->rng);
    int32_t tok = prepare(s, logits);
    if (tok < 0 && (!q || draft < 0 || draft >= s->n_vocab)) {
        tok = draw(s, u); /* point mass: accepted exactly when the ordinary draw hits it */
    } else if (tok < 0) {
        double p = kept_prob(s, draft), qx = q[draft];
        if (qx > 0 && u * qx < p) {
            tok = draft;
        } else {
            tok = draw_residual(s, q, rng_uniform(s->rng));
            if (tok < 0) tok = draw(s, rng_uniform(s->rng));
        }
    }
    *accepted = tok == draft;
    record(s, logits, lse, tok, ev);
    return tok;
}
