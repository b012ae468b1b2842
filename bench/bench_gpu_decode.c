/* Decode and prefill speed of the forward pass on a synthetic model (random weights of a
 * real geometry built on the device, no file): tokens per second at each batch size with
 * every sequence `ctx` positions deep, and one long prefill. Prints the memory plan and one
 * "BENCH key=value ..." line per result, with the bytes of weights and KV cache streamed per
 * second (per rank) so tests/gpu/run can set them against the streaming-read floor.
 *
 *   [mpirun -np TP] bench_gpu_decode [--model llama3-8b[:bf16]] [--batch 1,8,64] [--ctx 512]
 *                                    [--steps 32] [--prefill 2048] [--backend cuda] [--comm auto]
 *                                    [--kv f16|fp8|f32] [--debug.NAME true|false ...]
 * --debug.NAME: the [debug] switches as tpd takes them (kernels/backend.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/gpu_comm.h"
#include "kernels/backend.h"
#include "kernels/profile.h"
#include "parallel/forward.h"
#include "parallel/kvcache.h"
#include "parallel/plan.h"
#include "parallel/synthetic.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/logit_cand.h"
#include "util/fatal.h"
#if TPD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static int blocks_for(int tokens, int bs) { return (tokens + bs - 1) / bs; }

int main(int argc, char **argv) {
    struct comm c;
    comm_init(&c, &argc, &argv);
    const char *geometry = "llama3-8b", *backend = "cuda", *comm_mode = NULL;
    int batches[16] = {1, 8, 64}, n_batches = 3, ctx = 512, steps = 32, prefill = 2048;
    enum dtype kv_type = DT_F16;
    char kv_err[256];
    struct backend_debug dbg = backend_debug_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
#define DEBUG_FLAG(name, dflt, help) \
    if (!strcmp(a, "--debug." #name)) { \
        if (strcmp(v, "true") && strcmp(v, "false")) goto usage; \
        dbg.name = !strcmp(v, "true"); \
    } else
        BACKEND_DEBUG_SWITCHES(DEBUG_FLAG)
#undef DEBUG_FLAG
        if (!strcmp(a, "--model")) geometry = v;
        else if (!strcmp(a, "--backend")) backend = v;
        else if (!strcmp(a, "--comm")) comm_mode = v;
        else if (!strcmp(a, "--batch")) {
            if ((n_batches = parse_list(v, batches, 16)) < 1) goto usage;
        } else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--prefill")) prefill = atoi(v);
        else if (!strcmp(a, "--kv")) {
            if (kvcache_type_parse(v, &kv_type, kv_err)) goto usage;
        } else goto usage;
        i++;
    }
    if (ctx < 0 || steps < 1 || prefill < 0) goto usage;
#if !TPD_HAVE_CUDA
    if (!strcmp(backend, "cuda")) {
        if (c.rank == 0) printf("skipped: built without CUDA\n");
        comm_finalize(&c);
        return 0;
    }
#else
    {
        int n_dev = 0;
        if (!strcmp(backend, "cuda") && (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1)) {
            if (c.rank == 0) printf("skipped: no GPU\n");
            comm_finalize(&c);
            return 0;
        }
    }
#endif
    char err[ERR_LEN] = "";
    struct backend be;
    if (backend_open(&be, backend, 0, c.local_rank, &dbg, err)) FATAL("backend: %s", err);
    if (dbg.profile_ops) backend_profile_wrap(&be);
    const struct comm_opts co = {.mode = comm_mode};
    struct monitor *mon = monitor_start(c.rank, c.size);
    if (gpu_comm_init(&c, &be, &co, mon, err)) FATAL("communicator: %s", err);
    struct model m;
    double t0 = clock_now();
    if (model_synthesize(&m, geometry, &be, c.size, c.rank, 1, 0, err)) FATAL("%s", err);
    const struct model_hparams *hp = &m.hp;
    int max_b = 1;
    for (int i = 0; i < n_batches; i++) max_b = batches[i] > max_b ? batches[i] : max_b;
    const int bs = 16;
    const int per_seq = blocks_for(ctx + steps + 8, bs);
    const int n_blocks = max_b * per_seq + blocks_for(prefill, bs) + 1;
    struct kvcache kv;
    if (kvcache_init(&kv, &be, kv_type, hp->n_layers, n_blocks, bs, m.sp.n_kv, hp->head_dim, 0,
                     err))
        FATAL("%s", err);
    if (c.rank == 0) {
        size_t total_b = 0; /* device memory, for how many KV positions fit */
#if TPD_HAVE_CUDA
        size_t free_b = 0;
        if (be.kind == BACKEND_CUDA && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
            total_b = 0;
#endif
        struct mem_plan mp;
        int max_t = prefill > max_b ? prefill : max_b;
        synthetic_mem_plan(&m, kv_type, (long long)n_blocks * bs, max_t, total_b, &mp);
        char line[512];
        synthetic_mem_plan_format(&mp, line, sizeof line);
        printf("model %s: %d layers, dim %d, %d/%d heads, ffn %d, vocab %d, tp %d; built in %.1f "
               "s; comm %s\n%s\n",
               geometry, hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->ffn_dim,
               hp->vocab_size, c.size, clock_now() - t0, gpu_comm_describe(&c), line);
        fflush(stdout);
    }
    /* bytes one decode step must read: every matrix but the embedding table (only B rows
     * of it), plus each sequence's KV cache */
    size_t embd_bytes = 0;
    if (m.output.data != m.tok_embd.data)
        embd_bytes = (size_t)dtype_row_bytes(m.tok_embd.type, m.tok_embd.cols) *
                     (size_t)m.tok_embd.rows;
    const size_t stream_bytes = m.weight_bytes - embd_bytes;
    const size_t kv_tok = kvcache_token_bytes(kv_type, hp->n_layers, m.sp.n_kv, hp->head_dim);

    /* the candidates op on every rank, as engine_info's max_cands requires of the daemon */
    const int cands = comm_min_int(&c, be.top_cands ? LOGIT_CANDS_MAX : 0);
    struct forward_state fs;
    forward_state_init(&fs);
    struct step_plan plan;
    plan_init(&plan);
    int n_logit_rows = max_b > 1 ? max_b : 1;
    float *logits = c.rank == 0
                        ? xmalloc(sizeof(float) * (size_t)n_logit_rows * (size_t)hp->vocab_size)
                        : NULL;
    int32_t *blocks = xmalloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int i = 0; i < n_blocks; i++) blocks[i] = i;
    unsigned seed = 12345;

    for (int bi = 0; bi < n_batches; bi++) {
        const int B = batches[bi];
        double t_run = 0;
        for (int s = -3; s < steps; s++) { /* three warm-up steps */
            plan_clear(&plan);
            int pos = ctx + (s < 0 ? 0 : s);
            for (int q = 0; q < B; q++) {
                int32_t tok = (int32_t)((seed = seed * 1103515245u + 12345u) %
                                        (unsigned)hp->vocab_size);
                plan_add(&plan, &tok, 1, pos, blocks + q * per_seq, blocks_for(pos + 1, bs), 0);
            }
            /* light rows, as the daemon asks for them when every rank has top_cands: each
             * row's LOGIT_CANDS_MAX best logits come back instead of the whole row */
            if (cands) {
                plan.n_cands = cands;
                for (int i = 0; i < plan.n_out; i++) plan.out_full[i] = 0;
            }
            double a = clock_now();
            forward(&m, &kv, &fs, &plan, &c, logits);
            if (s >= 0) t_run += clock_now() - a;
        }
        comm_barrier(&c);
        if (c.rank == 0) {
            double step = t_run / steps;
            printf("BENCH decode model=%s tp=%d batch=%d ctx=%d tok_s=%.1f ms_step=%.3f "
                   "stream_GBps=%.1f kv=%s "
                   "cands=%d\n",
                   geometry, c.size, B, ctx, B / step, step * 1e3,
                   ((double)stream_bytes + (double)B * ctx * kv_tok) / step / 1e9,
                   kvcache_type_name(kv_type), cands);
            fflush(stdout);
        }
    }
    if (prefill > 0) {
        int32_t *toks = xmalloc(sizeof(int32_t) * (size_t)prefill);
        for (int i = 0; i < prefill; i++)
            toks[i] = (int32_t)((seed = seed * 1103515245u + 12345u) % (unsigned)hp->vocab_size);
        double best = 1e30;
        for (int r = 0; r < 4; r++) { /* the first is a warm-up */
            plan_clear(&plan);
            plan_add(&plan, toks, prefill, 0, blocks + max_b * per_seq, blocks_for(prefill, bs), 0);
            double a = clock_now();
            forward(&m, &kv, &fs, &plan, &c, logits);
            double t = clock_now() - a;
            if (r > 0 && t < best) best = t;
        }
        if (c.rank == 0) {
            /* 2 flops per weight per token in the matrices (the embedding excluded) */
            double flops = 2.0 * (double)prefill *
                           (double)(stream_bytes / (size_t)dtype_block_bytes(m.output.type) *
                                    (size_t)dtype_block_elems(m.output.type)) *
                           c.size;
            printf("BENCH prefill model=%s tp=%d tokens=%d tok_s=%.1f s=%.4f TFLOPs=%.1f kv=%s\n",
                   geometry, c.size, prefill, prefill / best, best, flops / best / 1e12,
                   kvcache_type_name(kv_type));
        }
        free(toks);
    }
    free(blocks);
    free(logits);
    plan_free(&plan);
    forward_state_free(&fs, &be);
    kvcache_free(&kv);
    model_free(&m);
    gpu_comm_free(&c);
    monitor_free(mon);
    backend_close(&be);
    comm_finalize(&c);
    return 0;
usage:
    if (c.rank == 0)
        fprintf(stderr, "usage: bench_gpu_decode [--model llama3-8b[:bf16]] [--batch 1,8,64] "
                        "[--ctx 512] [--steps 32] "
                        "[--prefill 2048] [--backend cuda] [--comm auto] [--kv f16|fp8|f32] "
                        "[--debug.NAME true|false]\n");
    comm_finalize(&c);
    return 2;
}
