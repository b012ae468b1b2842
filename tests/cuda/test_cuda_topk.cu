/* kernels/cuda/sampling.cu's cuda_top_cands (the CUDA backend's top_cands) on the GPU against
 * a plain host reference: the row's non-NaN entries sorted by (value desc, id asc) with
 * util/logit_cand.h's order, the first k kept, then {-inf, -1}. Every v and id must be equal
 * bit for bit. Cases: rows of 1, 7, 64, 1000, 24576, 64128, 37984 columns (and 4096 + 1,
 * 300000 and 600000: one, two and three levels of merging) in steps of 1, 3, 64 and 200 rows;
 * k 1, 2, 40, 64 and k == n_cols for small rows; ld > n_cols (the gap filled with +inf, which
 * a read past the row would pick); id0 != 0. Rows take turns among fills: random logits, a
 * few levels (many ties), all +-0 (-0 equal to +0: by id), all one value, NaN / -inf / +inf
 * / denormals / +-FLT_MAX mixed in, fewer than k non-NaN entries (none at all on some), a
 * plateau of equal maxima spread over every chunk (ties across chunk and merge boundaries),
 * denormals and zeros only. A write past the k entries of the last row is an error too. One
 * case is also captured in a CUDA graph and replayed.
 *
 * The reference also checks util/logit_cand.c's logit_cands_select (the CPU backend's
 * top_cands) on every matrix. The same cases also run through a serial emulation of the kernels'
 * algorithm written here (chunks, 11/11/10-bit radix passes over the same keys with the same early
 * stop, ordered compaction, merges of the same groups of lists): it checks the algorithm, not the
 * kernels, and runs without a GPU too.
 *
 *   test_cuda_topk    every case, then "BENCH top_cands ..." lines: microseconds a call for 1 and
 *                     64 rows of 64128 columns at k = 64, beside a device-to-device copy of
 *                     the same bytes; exit 1 on any mismatch
 * Without a GPU it runs the emulation, prints "skipped: no GPU" and exits 77 (ctest counts it
 * skipped), or 1 if the emulation failed. sampling.cu is compiled into this test (its
 * kernels are static); backend_cuda.cu's two helpers that it calls are stood in for below. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <vector>

#include "../../kernels/cuda/sampling.cu"

enum { BENCH_WARMUP = 5, BENCH_ITERS = 100, MAX_FAIL_LINES = 20 };

#include "stand_ins.cuh"

/* ---- the reference ---- */

/* out[0..k): the row's non-NaN entries in util/logit_cand.h's order, then {-inf, -1}. */
static void reference_row(const float *row, int n, int32_t id0, int k, struct logit_cand *out) {
    std::vector<struct logit_cand> all;
    for (int j = 0; j < n; j++)
        if (!isnan(row[j])) all.push_back({row[j], id0 + j});
    const size_t kk = std::min((size_t)k, all.size());
    std::partial_sort(all.begin(), all.begin() + kk, all.end(),
                      [](const logit_cand &a, const logit_cand &b) {
                          return logit_cand_before(a.v, a.id, b.v, b.id) != 0;
                      });
    for (int i = 0; i < k; i++) out[i] = (size_t)i < kk ? all[i] : logit_cand{-INFINITY, -1};
}

/* ---- the emulation: topc_select and cuda_top_cands' plan, one entry at a time ---- */

/* The k best of v[0..m) (NaN: no entry; entry j's id ids[j], or base + j), as topc_select
 * finds them: radix passes to a threshold T and a count `need` of entries equal to it, the
 * first `need` of those in array order, then sorted by (key, id). */
static void emu_select(const float *v, const int32_t *ids, int32_t base, int m, int k,
                       struct logit_cand *out, int32_t id_add) {
    std::vector<uint32_t> hist(TOPC_BINS);
    uint32_t prefix = 0, pmask = 0, k_rem = (uint32_t)k, T = 0, need = 0;
    for (int p = 0; p < TOPC_PASSES; p++) {
        const int shift = topc_shift(p);
        const uint32_t dmask = (1u << topc_width(p)) - 1;
        std::fill(hist.begin(), hist.end(), 0u);
        uint32_t total = 0;
        for (int j = 0; j < m; j++) {
            const uint32_t key = topc_key(v[j]);
            if (key == 0 || (key & pmask) != prefix) continue;
            hist[(key >> shift) & dmask]++;
            total++;
        }
        if (p == 0 && total <= (uint32_t)k) {
            T = 0;
            need = 0;
            break;
        }
        uint32_t above = 0, bin = TOPC_BINS;
        for (int b = TOPC_BINS - 1; b >= 0; b--) {
            if (above + hist[b] >= k_rem) {
                bin = (uint32_t)b;
                break;
            }
            above += hist[b];
        }
        if (bin == TOPC_BINS)
            fatal_exit(__FILE__, __LINE__, "emulation: no bin holds the %u-th", k_rem);
        k_rem -= above;
        prefix |= bin << shift;
        pmask |= dmask << shift;
        if (hist[bin] == k_rem) {
            T = prefix - 1;
            need = 0;
            break;
        }
        T = prefix;
        need = k_rem;
    }
    std::vector<struct logit_cand> sel;
    std::vector<uint32_t> keys;
    uint32_t taken_eq = 0;
    for (int j = 0; j < m; j++) {
        const uint32_t key = topc_key(v[j]);
        if (key > T || (need && key == T && taken_eq++ < need)) {
            sel.push_back({v[j], ids ? ids[j] : base + j});
            keys.push_back(key);
        }
    }
    if (sel.size() > (size_t)k)
        fatal_exit(__FILE__, __LINE__, "emulation: %zu chosen for k = %d", sel.size(), k);
    std::vector<int> order(sel.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = (int)i;
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return keys[a] > keys[b] || (keys[a] == keys[b] && sel[a].id < sel[b].id);
    });
    for (int i = 0; i < k; i++)
        out[i] = (size_t)i < sel.size() ? logit_cand{sel[order[i]].v, sel[order[i]].id + id_add}
                                        : logit_cand{-INFINITY, -1};
}

static void emu_top_cands(struct logit_cand *out, const float *x, int n_rows, int n_cols,
                          int64_t ld, int32_t id0, int k) {
    const int per_block = TOPC_CHUNK / k;
    for (int r = 0; r < n_rows; r++) {
        const float *row = x + (int64_t)r * ld;
        int n_lists = (n_cols + TOPC_CHUNK - 1) / TOPC_CHUNK;
        std::vector<struct logit_cand> cur((size_t)n_lists * k);
        for (int l = 0; l < n_lists; l++) {
            const int c0 = l * TOPC_CHUNK;
            emu_select(row + c0, NULL, c0, std::min((int)TOPC_CHUNK, n_cols - c0), k,
                       &cur[(size_t)l * k], n_lists == 1 ? id0 : 0);
        }
        while (n_lists > 1) {
            const int n_next = (n_lists + per_block - 1) / per_block;
            std::vector<struct logit_cand> next((size_t)n_next * k);
            for (int g = 0; g < n_next; g++) {
                const int l0 = g * per_block, m = std::min(per_block, n_lists - l0) * k;
                std::vector<float> v(m);
                std::vector<int32_t> ids(m);
                for (int j = 0; j < m; j++) {
                    const struct logit_cand cd = cur[(size_t)l0 * k + j];
                    v[j] = cd.id < 0 ? NAN : cd.v;
                    ids[j] = cd.id;
                }
                emu_select(v.data(), ids.data(), 0, m, k, &next[(size_t)g * k],
                           n_next == 1 ? id0 : 0);
            }
            cur.swap(next);
            n_lists = n_next;
        }
        std::copy(cur.begin(), cur.begin() + k, out + (size_t)r * k);
    }
}

/* ---- cases ---- */

enum fill {
    F_RANDOM,
    F_LEVELS,
    F_ZEROS,
    F_CONST,
    F_SPECIAL,
    F_FEW,
    F_PLATEAU,
    F_DENORMAL,
    N_FILLS
};
static const char *fill_names[N_FILLS] = {"random",  "levels", "zeros",   "const",
                                          "special", "few",    "plateau", "denormal"};

static std::mt19937 rng(4321);
static float urand(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
}
static int irand(int n) { return (int)(rng() % (uint32_t)n); }
static float bits_float(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static uint32_t float_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static float denormal(void) { return bits_float((rng() & 0x807fffffu) | (irand(2) ? 0 : 1u)); }

static void fill_row(float *row, int n, enum fill f, int kmax) {
    std::normal_distribution<float> logit(0.0f, 3.0f);
    switch (f) {
    case F_RANDOM:
        for (int j = 0; j < n; j++) row[j] = logit(rng);
        break;
    case F_LEVELS: { /* five values (+-0 among them) */
        static const float lv[5] = {-1.0f, 0.0f, -0.0f, 0.5f, 2.0f};
        for (int j = 0; j < n; j++) row[j] = lv[irand(5)];
        break;
    }
    case F_ZEROS:
        for (int j = 0; j < n; j++) row[j] = irand(2) ? 0.0f : -0.0f;
        break;
    case F_CONST:
        for (int j = 0; j < n; j++) row[j] = 1.25f;
        break;
    case F_SPECIAL:
        for (int j = 0; j < n; j++) {
            const int u = irand(100);
            row[j] = u < 10   ? NAN
                     : u < 15 ? -INFINITY
                     : u < 16 ? INFINITY
                     : u < 20 ? denormal()
                     : u < 22 ? (irand(2) ? FLT_MAX : -FLT_MAX)
                     : u < 25 ? (irand(2) ? 0.0f : -0.0f)
                              : logit(rng);
        }
        if (n > 2) row[irand(n)] = bits_float(0xffc00001u); /* a negative NaN */
        break;
    case F_FEW: { /* fewer than k non-NaN entries (none on a third of these rows) */
        for (int j = 0; j < n; j++) row[j] = NAN;
        const int n_valid = irand(3) == 0 ? 0 : irand(std::max(1, std::min(n, kmax)));
        for (int i = 0; i < n_valid; i++) {
            const int u = irand(4);
            row[irand(n)] = u == 0 ? -INFINITY : u == 1 ? 0.0f : u == 2 ? -0.0f : logit(rng);
        }
        break;
    }
    case F_PLATEAU: /* equal maxima (about 1 in 600) over every chunk, then ties of -inf */
        for (int j = 0; j < n; j++) {
            const int u = irand(600);
            row[j] = u == 0 ? 7.0f : u < 60 ? -INFINITY : urand(-5.0f, 1.0f);
        }
        break;
    case F_DENORMAL:
        for (int j = 0; j < n; j++) row[j] = irand(8) == 0 ? (irand(2) ? 0.0f : -0.0f) : denormal();
        break;
    default: break;
    }
}

struct tc_case {
    int n_rows, n_cols;
    int64_t ld;
    int32_t id0;
    std::vector<int> ks;
};

/* Totals over the cases run. */
static int n_cases, n_rows_checked, n_gpu_failed, n_emu_failed, n_util_failed, n_fail_lines;

static int same(const struct logit_cand &a, const struct logit_cand &b) {
    return float_bits(a.v) == float_bits(b.v) && a.id == b.id;
}

/* 0 when got == want for every row; else prints the first mismatch (a FAIL line). */
static int compare(const char *who, const struct tc_case &cs, int k,
                   const std::vector<enum fill> &fills, const struct logit_cand *want,
                   const struct logit_cand *got) {
    for (int r = 0; r < cs.n_rows; r++)
        for (int i = 0; i < k; i++) {
            const struct logit_cand &w = want[(size_t)r * k + i], &g = got[(size_t)r * k + i];
            if (same(w, g)) continue;
            if (n_fail_lines++ < MAX_FAIL_LINES)
                printf("FAIL  %s: rows=%d cols=%d ld=%lld id0=%d k=%d: row %d (%s) position %d: "
                       "expected {%a (%08x), "
                       "%d}, got {%a (%08x), %d}\n",
                       who, cs.n_rows, cs.n_cols, (long long)cs.ld, cs.id0, k, r,
                       fill_names[fills[r]], i, w.v, float_bits(w.v), w.id, g.v, float_bits(g.v),
                       g.id);
            return 1;
        }
    return 0;
}

/* One matrix, every k of the case: reference, emulation, and the kernels when gpu. */
static void run_case(struct cuda_ctx *c, const struct tc_case &cs, int gpu, int capture) {
    const int kmax = std::min(LOGIT_CANDS_MAX, cs.n_cols);
    std::vector<float> x((size_t)cs.n_rows * cs.ld, INFINITY); /* the gap past n_cols: +inf */
    std::vector<enum fill> fills(cs.n_rows);
    const int f0 = irand(N_FILLS);
    for (int r = 0; r < cs.n_rows; r++) {
        fills[r] = (enum fill)((f0 + r) % N_FILLS);
        fill_row(&x[(size_t)r * cs.ld], cs.n_cols, fills[r], kmax);
    }
    std::vector<struct logit_cand> ref((size_t)cs.n_rows * kmax);
    for (int r = 0; r < cs.n_rows; r++)
        reference_row(&x[(size_t)r * cs.ld], cs.n_cols, cs.id0, kmax, &ref[(size_t)r * kmax]);
    /* the CPU backend's top_cands (util/logit_cand.c) against the same reference */
    std::vector<struct logit_cand> cpu((size_t)cs.n_rows * kmax);
    for (int r = 0; r < cs.n_rows; r++)
        logit_cands_select(&cpu[(size_t)r * kmax], &x[(size_t)r * cs.ld], cs.n_cols, cs.id0, kmax);
    n_util_failed += compare("logit_cands_select", cs, kmax, fills, ref.data(), cpu.data());

    float *dx = NULL;
    struct logit_cand *dout = NULL;
    const size_t out_max = (size_t)(cs.n_rows + 1) *
                           LOGIT_CANDS_MAX; /* a row of guard past the end */
    if (gpu) {
        CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc(&dout, out_max * sizeof *dout));
    }
    for (int k : cs.ks) {
        if (k > cs.n_cols) continue;
        n_cases++;
        n_rows_checked += cs.n_rows;
        std::vector<struct logit_cand> want((size_t)cs.n_rows * k), got((size_t)cs.n_rows * k);
        for (int r = 0; r < cs.n_rows; r++)
            std::copy(&ref[(size_t)r * kmax], &ref[(size_t)r * kmax] + k, &want[(size_t)r * k]);

        emu_top_cands(got.data(), x.data(), cs.n_rows, cs.n_cols, cs.ld, cs.id0, k);
        n_emu_failed += compare("emulation", cs, k, fills, want.data(), got.data());
        if (!gpu) continue;

        std::vector<struct logit_cand> back(out_max);
        CUDA_CHECK(cudaMemset(dout, 0xab, out_max * sizeof *dout));
        cuda_top_cands(c, dout, dx, cs.n_rows, cs.n_cols, cs.ld, cs.id0, k);
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        CUDA_CHECK(cudaMemcpy(back.data(), dout, out_max * sizeof *dout, cudaMemcpyDeviceToHost));
        int bad = compare("cuda_top_cands", cs, k, fills, want.data(), back.data());
        const unsigned char *guard = (const unsigned char *)&back[(size_t)cs.n_rows * k];
        for (size_t b = 0; !bad && b < (out_max - (size_t)cs.n_rows * k) * sizeof *dout; b++)
            if (guard[b] != 0xab) {
                if (n_fail_lines++ < MAX_FAIL_LINES)
                    printf("FAIL  cuda_top_cands: rows=%d cols=%d k=%d wrote past its %d x %d "
                           "entries (byte %zu)\n",
                           cs.n_rows, cs.n_cols, k, cs.n_rows, k, b);
                bad = 1;
            }
        if (!bad && capture && k == LOGIT_CANDS_MAX) { /* the same call captured, then replayed */
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CUDA_CHECK(cudaMemset(dout, 0xab, out_max * sizeof *dout));
            sync_launches = 0;
            c->capturing = 1;
            CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
            cuda_top_cands(c, dout, dx, cs.n_rows, cs.n_cols, cs.ld, cs.id0, k);
            CUDA_CHECK(cudaStreamEndCapture(c->stream, &graph));
            c->capturing = 0;
            sync_launches = 1;
            CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            CUDA_CHECK(cudaGraphLaunch(exec, c->stream));
            CUDA_CHECK(cudaStreamSynchronize(c->stream));
            CUDA_CHECK(
                cudaMemcpy(back.data(), dout, out_max * sizeof *dout, cudaMemcpyDeviceToHost));
            bad = compare("cuda_top_cands in a CUDA graph", cs, k, fills, want.data(), back.data());
            CUDA_CHECK(cudaGraphExecDestroy(exec));
            CUDA_CHECK(cudaGraphDestroy(graph));
        }
        n_gpu_failed += bad;
    }
    if (gpu) {
        CUDA_CHECK(cudaFree(dx));
        CUDA_CHECK(cudaFree(dout));
    }
}

/* Microseconds a call of cuda_top_cands (k = 64) on n_rows random rows of n_cols, and of a
 * device-to-device copy of the same bytes, both timed over BENCH_ITERS calls in a row. */
static void bench(struct cuda_ctx *c, int n_rows, int n_cols) {
    const int k = LOGIT_CANDS_MAX;
    const size_t n = (size_t)n_rows * n_cols;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = urand(-10.0f, 10.0f);
    float *dx, *dcopy;
    struct logit_cand *dout;
    CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dcopy, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dout, (size_t)n_rows * k * sizeof *dout));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float us[2];
    sync_launches = 0;
    for (int what = 0; what < 2; what++) {
        for (int it = 0; it < BENCH_WARMUP + BENCH_ITERS; it++) {
            if (it == BENCH_WARMUP) CUDA_CHECK(cudaEventRecord(e0, c->stream));
            if (what == 0) cuda_top_cands(c, dout, dx, n_rows, n_cols, n_cols, 0, k);
            else
                CUDA_CHECK(cudaMemcpyAsync(dcopy, dx, n * sizeof(float), cudaMemcpyDeviceToDevice,
                                           c->stream));
        }
        CUDA_CHECK(cudaEventRecord(e1, c->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        us[what] = 1000.0f * ms / BENCH_ITERS;
    }
    sync_launches = 1;
    printf("BENCH top_cands rows=%d cols=%d k=%d us=%.2f d2d_copy_us=%.2f ratio=%.2f\n", n_rows,
           n_cols, k, us[0], us[1], us[0] / us[1]);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(dcopy));
    CUDA_CHECK(cudaFree(dout));
}

int main(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "usage: %s\n", argv[0]);
        return 2;
    }
    int n_dev = 0;
    const int gpu = cudaGetDeviceCount(&n_dev) == cudaSuccess && n_dev > 0;
    if (!gpu) cudaGetLastError();
    struct cuda_ctx c;
    memset(&c, 0, sizeof c);
    if (gpu) {
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        CUDA_CHECK(cudaStreamCreate(&c.stream));
        printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    }

    /* the sizes asked for, each with every row count; ld and id0 vary from case to case */
    std::vector<struct tc_case> cases;
    const int sizes[] = {1, 7, 64, 1000, 49152 / 2, 128256 / 2, 151936 / 4};
    const int rows[] = {1, 3, 64, 200};
    int i = 0;
    for (int n : sizes)
        for (int nr : rows) {
            std::vector<int> ks = {1, 2, 40, 64};
            if (n <= LOGIT_CANDS_MAX && std::find(ks.begin(), ks.end(), n) == ks.end())
                ks.push_back(n);
            const int64_t ld = n + (i % 3 == 1 ? 3 : i % 3 == 2 ? 64 : 0);
            const int32_t id0 = i % 2 ? 3 * n + 17 : 0;
            cases.push_back({nr, n, ld, id0, ks});
            i++;
        }
    /* chunk edges, and rows long enough for two and three merge levels at k = 64 */
    cases.push_back({3, 4096, 4096, 5, {1, 64}});
    cases.push_back({5, 4097, 4099, 0, {1, 2, 40, 64}});
    cases.push_back({9, 8191, 8191, 100000, {64}});
    cases.push_back({2, 300000, 300001, 7, {1, 40, 64}});
    cases.push_back({2, 600000, 600000, 0, {2, 64}});
    for (const struct tc_case &cs : cases)
        run_case(&c, cs, gpu, cs.n_rows == 64 && cs.n_cols == 128256 / 2);

    char on_gpu[64];
    snprintf(on_gpu, sizeof on_gpu, "%d failed on the GPU", n_gpu_failed);
    printf("test_cuda_topk: %d cases (%d matrices, %d rows), %s, %d failed in the host emulation "
           "of the "
           "algorithm; the CPU backend's logit_cands_select: %d of %d matrices differ from the "
           "reference\n",
           n_cases, (int)cases.size(), n_rows_checked, gpu ? on_gpu : "not run on a GPU (none)",
           n_emu_failed, n_util_failed, (int)cases.size());
    if (!gpu) {
        printf("skipped: no GPU\n");
        return n_emu_failed || n_util_failed ? 1 : 77;
    }
    bench(&c, 1, 128256 / 2);
    bench(&c, 64, 128256 / 2);
    CUDA_CHECK(cudaFree(c.ws));
    CUDA_CHECK(cudaStreamDestroy(c.stream));
    return n_gpu_failed || n_emu_failed || n_util_failed ? 1 : 0;
}
