/* The CUDA backend's context and op table: memory (zero-filled cudaMalloc, copies on the
 * rank's stream), the ops wired to their launchers in the other .cu files, device choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.cuh"

extern "C" {
#include "../../util/err.h"
#include "backend_cuda.h"
}

/* debug.cuda_sync: synchronize after every kernel. Set when a backend opens (one per rank, so
 * one per process); the communicator's kernels check their launches here too. */
static int launch_sync;

void cuda_launch_check(cudaStream_t s, const char *kernel, const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        fatal_exit(file, line, "launch of %s failed: %s (%s)", kernel, cudaGetErrorString(e),
                   cudaGetErrorName(e));
    if (launch_sync) {
        e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            fatal_exit(file, line, "%s failed while running: %s (%s)", kernel,
                       cudaGetErrorString(e), cudaGetErrorName(e));
    }
}

/* Makes the context's device current for the calling thread (cheap; the ops may be called
 * from a thread other than the one that opened the backend). */
static struct cuda_ctx *bind(void *ctx) {
    struct cuda_ctx *c = (struct cuda_ctx *)ctx;
    CUDA_CHECK(cudaSetDevice(c->device));
    return c;
}

/* Frees the workspaces outgrown during captures (the stream must be idle or about to be
 * synchronized here). */
static void free_retired(struct cuda_ctx *c) {
    if (!c->n_retired) return;
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (int i = 0; i < c->n_retired; i++) CUDA_CHECK(cudaFree(c->retired[i]));
    c->n_retired = 0;
}

void *cuda_ws(struct cuda_ctx *c, size_t bytes) {
    if (bytes <= c->ws_bytes) return c->ws;
    size_t want = bytes > 2 * c->ws_bytes ? bytes : 2 * c->ws_bytes;
    want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    c->epoch++; /* graphs captured with the old one are stale */
    if (c->capturing) {
        /* work captured so far uses the old one: kept until the capture has run; this
         * capture is not kept for replay (its sizes were not settled) */
        c->capture_spoiled = 1;
        if (c->ws) {
            if (c->n_retired == CUDA_RETIRED_MAX)
                FATAL("cuda_ws: %d workspaces outgrown in one capture", CUDA_RETIRED_MAX);
            c->retired[c->n_retired++] = c->ws;
        }
    } else {
        free_retired(c);
        if (c->ws) {
            CUDA_CHECK(
                cudaStreamSynchronize(c->stream)); /* queued work may still use the old one */
            CUDA_CHECK(cudaFree(c->ws));
        }
    }
    c->ws = NULL;
    CUDA_CHECK(cudaMalloc(&c->ws, want));
    c->ws_bytes = want;
    return c->ws;
}

void *cuda_host_scratch(struct cuda_ctx *c, size_t bytes) {
    if (bytes <= c->host_pinned_bytes) return c->host_pinned;
    if (c->host_pinned) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        CUDA_CHECK(cudaFreeHost(c->host_pinned));
    }
    c->host_pinned = NULL;
    CUDA_CHECK(cudaMallocHost(&c->host_pinned, bytes));
    c->host_pinned_bytes = bytes;
    return c->host_pinned;
}

/* ---- memory ---- */

static void *cu_alloc(void *ctx, size_t bytes) {
    struct cuda_ctx *c = bind(ctx);
    void *p = NULL;
    size_t n = bytes ? bytes : 256;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        FATAL("cudaMalloc of %zu bytes on device %d failed: %s (%s); %.1f of %.1f GiB free", n,
              c->device, cudaGetErrorString(e), cudaGetErrorName(e), free_b / 1073741824.0,
              total_b / 1073741824.0);
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, n, c->stream));
    return p;
}

static void cu_free(void *ctx, void *p) {
    struct cuda_ctx *c = bind(ctx);
    if (!p) return;
    c->epoch++; /* a captured graph may use it: none of them is replayed again */
    CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* queued kernels may still read it */
    CUDA_CHECK(cudaFree(p));
}

/* Page-locked host memory: device-to-host copies into it run at the link's speed (a
 * pageable destination is staged through a driver buffer, several times slower). */
static void *cu_alloc_host(void *ctx, size_t bytes) {
    (void)bind(ctx);
    void *p = NULL;
    size_t n = bytes ? bytes : 64;
    CUDA_CHECK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    memset(p, 0, n);
    return p;
}

static void cu_free_host(void *ctx, void *p) {
    struct cuda_ctx *c = bind(ctx);
    if (!p) return;
    CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* a queued copy may still use it */
    CUDA_CHECK(cudaFreeHost(p));
}

/* The source is pageable host memory the caller may free or reuse at once (the loader
 * does), and CUDA does not promise that an asynchronous copy from pageable memory has read
 * it on return: so wait. Uploads come at load time and a few small ones at the start of a
 * step, when the stream is idle anyway. */
/* From pageable memory the runtime has the bytes staged when cudaMemcpyAsync returns, so
 * src may be reused at once and the copy needs no wait (a step's one plan upload,
 * forward.c's upload_plan); from page-locked memory the DMA reads src later, so wait. */
static void cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    struct cuda_ctx *c = bind(ctx);
    if (!bytes) return;
    cudaPointerAttributes at;
    CUDA_CHECK(cudaPointerGetAttributes(&at, src));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    if (at.type != cudaMemoryTypeUnregistered) CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

static void cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
    struct cuda_ctx *c = bind(ctx);
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

static void cu_zero(void *ctx, void *p, size_t bytes) {
    struct cuda_ctx *c = bind(ctx);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
}

static void cu_sync(void *ctx) {
    struct cuda_ctx *c = bind(ctx);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

/* ---- ops ---- */

static void cu_matmul(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                      const struct bweight *w);

/* one launch sequence per product, on the stream in order (the CPU backend is where one
 * dispatch for all of them pays) */
static void cu_matmul_grouped(void *ctx, const struct bmatmul *ops, int n) {
    for (int i = 0; i < n; i++)
        cu_matmul(ctx, ops[i].y, ops[i].ldy, ops[i].x, ops[i].ldx, ops[i].T, ops[i].w);
}

static void cu_matmul(void *ctx, float *y, int64_t ldy, const float *x, int64_t ldx, int T,
                      const struct bweight *w) {
    cuda_matmul(bind(ctx), y, ldy, x, ldx, T, w);
}

static void cu_embed(void *ctx, float *x, const int32_t *tok, int T, const struct bweight *table,
                     int row0) {
    cuda_embed(bind(ctx), x, tok, T, table, row0);
}

static void cu_rmsnorm(void *ctx, float *y, const float *x, const float *w, int T, int n,
                       float eps) {
    cuda_rmsnorm(bind(ctx), y, x, w, T, n, eps);
}

static void cu_add_rmsnorm(void *ctx, float *x, const float *y, float *y_norm, const float *w,
                           int T, int n, float eps) {
    cuda_add_rmsnorm(bind(ctx), x, y, y_norm, w, T, n, eps);
}

static void cu_head_rmsnorm(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd,
                            const float *w, float eps) {
    cuda_head_rmsnorm(bind(ctx), x, ld, T, n_heads, hd, w, eps);
}

static void cu_add_bias(void *ctx, float *x, int64_t ld, int T, int n, const float *b) {
    cuda_add_bias(bind(ctx), x, ld, T, n, b);
}

static void cu_rope(void *ctx, float *x, int64_t ld, int T, int n_heads, int hd, const int32_t *pos,
                    const float *inv_freq, int neox) {
    cuda_rope(bind(ctx), x, ld, T, n_heads, hd, pos, inv_freq, neox);
}

static void cu_kv_store(void *ctx, struct kv_layer *kv, enum dtype kv_type, const float *k,
                        const float *v, int64_t ld, int n_kv, int hd, const struct attn_batch *b) {
    cuda_kv_store(bind(ctx), kv, kv_type, k, v, ld, n_kv, hd, b);
}

static void cu_attention(void *ctx, float *out, int64_t ldo, const float *q, int64_t ldq, int n_q,
                         int q_head0, int group, int kv_head0, const struct kv_layer *kv,
                         enum dtype kv_type, int n_kv, int hd, const struct attn_batch *b) {
    cuda_attention(bind(ctx), out, ldo, q, ldq, n_q, q_head0, group, kv_head0, kv, kv_type, n_kv,
                   hd, b);
}

static void cu_silu_mul(void *ctx, float *out, int64_t ldo, const float *g, const float *u,
                        int64_t ld, int T, int n) {
    cuda_silu_mul(bind(ctx), out, ldo, g, u, ld, T, n);
}

static void cu_gather_rows(void *ctx, float *dst, const float *src, const int32_t *idx, int n_rows,
                           int n) {
    cuda_gather_rows(bind(ctx), dst, src, idx, n_rows, n);
}

static void cu_moe_combine(void *ctx, float *y, int64_t ldy, const float *src, int64_t lds,
                           const int32_t *pos, const float *w, int T, int k, int n) {
    cuda_moe_combine(bind(ctx), y, ldy, src, lds, pos, w, T, k, n);
}

static void cu_top_cands(void *ctx, struct logit_cand *out, const float *x, int n_rows, int n_cols,
                         int64_t ld, int32_t id0, int k) {
    cuda_top_cands(bind(ctx), out, x, n_rows, n_cols, ld, id0, k);
}

static void cu_add(void *ctx, float *x, const float *y, size_t n) { cuda_add(bind(ctx), x, y, n); }

/* ---- graphs ---- */

/* debug.cuda_graphs (on by default since the H200 run of 2026-11-27: every GPU check passed
 * with graphs, and they gain 7% at batch 1, bench/RESULTS.md) turns them off when false.
 * Never with debug.cuda_sync, whose synchronizations a capture cannot hold. */
static int graphs_off(const struct cuda_ctx *c) { return !c->dbg.cuda_graphs || c->dbg.cuda_sync; }

static struct cuda_graph_slot *graph_slot(struct cuda_ctx *c, uint64_t key) {
    struct cuda_graph_slot *victim = &c->graphs[0];
    for (int i = 0; i < CUDA_GRAPH_SLOTS; i++) {
        struct cuda_graph_slot *g = &c->graphs[i];
        if (g->used && g->key == key) return g;
        if (!g->used || (victim->used && g->last_use < victim->last_use)) victim = g;
    }
    if (victim->exec) CUDA_CHECK(cudaGraphExecDestroy(victim->exec));
    memset(victim, 0, sizeof *victim);
    victim->used = 1;
    victim->key = key;
    return victim;
}

/* The step's work as a graph: replayed when this key was captured in the current epoch;
 * captured (then launched) on the key's second sighting, so that the first, run uncaptured
 * by the caller, has settled the workspaces and the kernels' one-time attributes. The body
 * only queues work on c->stream (no synchronization, no copies from pageable memory). */
static int cu_graph_run(void *ctx, uint64_t key, void (*body)(void *), void *arg) {
    struct cuda_ctx *c = bind(ctx);
    if (graphs_off(c)) return 0;
    struct cuda_graph_slot *g = graph_slot(c, key);
    g->last_use = ++c->graph_clock;
    if (g->exec && g->epoch == c->epoch) {
        CUDA_CHECK(cudaGraphLaunch(g->exec, c->stream));
        return 1;
    }
    if (g->exec) { /* stale: a workspace it uses has moved */
        CUDA_CHECK(cudaGraphExecDestroy(g->exec));
        g->exec = NULL;
        g->seen = 0;
    }
    if (!g->seen) {
        g->seen = 1;
        return 0;
    }
    cudaGraph_t graph;
    c->capturing = 1;
    c->capture_spoiled = 0;
    CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    body(arg);
    CUDA_CHECK(cudaStreamEndCapture(c->stream, &graph));
    c->capturing = 0;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphLaunch(exec, c->stream));
    if (c->capture_spoiled) { /* ran once; captured again at the next sighting */
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        free_retired(c);
    } else {
        g->exec = exec;
        g->epoch = c->epoch;
    }
    return 1;
}

static void cu_destroy(struct backend *b) {
    struct cuda_ctx *c = (struct cuda_ctx *)b->ctx;
    if (!c) return;
    bind(c);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    free_retired(c);
    for (int i = 0; i < CUDA_GRAPH_SLOTS; i++)
        if (c->graphs[i].exec) CUDA_CHECK(cudaGraphExecDestroy(c->graphs[i].exec));
    if (c->ws) CUDA_CHECK(cudaFree(c->ws));
    if (c->host_pinned) CUDA_CHECK(cudaFreeHost(c->host_pinned));
    cuda_lt_close(c);
    CUBLAS_CHECK(cublasDestroy(c->cublas));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    free(c);
    b->ctx = NULL;
}

/* ---- opening ---- */

extern "C" int backend_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error for "auto" */
        return 0;
    }
    return n > 0;
}

extern "C" int backend_cuda_memory(int local_rank, int *device, int *n_devices, size_t *free_bytes,
                                   size_t *total_bytes, char *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n < 1) return err_set(err, "backend \"cuda\": no CUDA device visible");
    const int dev = (local_rank < 0 ? 0 : local_rank) % (n > 0 ? n : 1);
    if (e == cudaSuccess) e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "backend \"cuda\": no usable GPU: %s (%s)", cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    *device = dev;
    *n_devices = n;
    return 0;
}

/* The table at the end of backend_cuda_init has every op of kernels/backend.h: a new one is
 * added there, then count it here (backend_open refuses a table without a required op). */
static_assert(BACKEND_OP_COUNT == 25, "a new backend op: add it to the CUDA backend's table");

extern "C" int backend_cuda_init(struct backend *b, int local_rank, const struct backend_debug *dbg,
                                 char *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "backend \"cuda\": no usable GPU: %s (%s)", cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    if (n < 1) return err_set(err, "backend \"cuda\": no CUDA device visible");
    const int dev = (local_rank < 0 ? 0 : local_rank) % n;
    struct cuda_ctx *c = (struct cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return err_set(err, "backend \"cuda\": out of host memory");
    c->device = dev;
    c->dbg = *dbg;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cudaGetLastError();
        free(c);
        return err_set(err, "backend \"cuda\": device %d: %s (%s)", dev, cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    if (prop.major < 8) {
        cudaStreamDestroy(c->stream);
        free(c);
        return err_set(err,
                       "backend \"cuda\": device %d (%s) is compute capability %d.%d; tpd is built "
                       "for 8.0 and 9.0",
                       dev, prop.name, prop.major, prop.minor);
    }
    c->n_sm = prop.multiProcessorCount;
    c->cc = prop.major * 10 + prop.minor;
    cublasStatus_t s = cublasCreate(&c->cublas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(c->cublas, c->stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH); /* no TF32 for F32 */
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(c);
        return err_set(err, "backend \"cuda\": cuBLAS: %s", cublasGetStatusString(s));
    }
    snprintf(c->gpu_name, sizeof c->gpu_name, "%s", prop.name);
    if (cuda_lt_open(c, c->gpu_name, err)) {
        CUBLAS_CHECK(cublasDestroy(c->cublas));
        cudaStreamDestroy(c->stream);
        free(c);
        return -1;
    }
    memset(b, 0, sizeof *b);
    launch_sync = dbg->cuda_sync;
    b->kind = BACKEND_CUDA;
    b->name = "cuda";
    b->ctx = c;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->alloc_host = cu_alloc_host;
    b->free_host = cu_free_host;
    b->upload = cu_upload;
    b->download = cu_download;
    b->matmul = cu_matmul;
    b->matmul_grouped = cu_matmul_grouped;
    b->embed = cu_embed;
    b->rmsnorm = cu_rmsnorm;
    b->add_rmsnorm = cu_add_rmsnorm;
    b->head_rmsnorm = cu_head_rmsnorm;
    b->add_bias = cu_add_bias;
    b->rope = cu_rope;
    b->kv_store = cu_kv_store;
    b->attention = cu_attention;
    b->silu_mul = cu_silu_mul;
    b->gather_rows = cu_gather_rows;
    b->moe_combine = cu_moe_combine;
    /* debug.top_cands (on by default: test_cuda_topk bit-exact and the end-to-end greedy
     * checks passed on an H200, 2026-11-27). false: every step downloads whole rows. */
    b->top_cands = dbg->top_cands ? cu_top_cands : NULL;
    b->zero = cu_zero;
    b->add = cu_add;
    b->sync = cu_sync;
    b->graph_run = cu_graph_run;
    b->destroy = cu_destroy;
    return 0;
}

extern "C" void *backend_cuda_stream(const struct backend *b) {
    if (!b || b->kind != BACKEND_CUDA || !b->ctx) return NULL;
    return (void *)((struct cuda_ctx *)b->ctx)->stream;
}

extern "C" int backend_cuda_device(const struct backend *b) {
    if (!b || b->kind != BACKEND_CUDA || !b->ctx) return -1;
    return ((struct cuda_ctx *)b->ctx)->device;
}
