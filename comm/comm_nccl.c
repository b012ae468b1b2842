#include "comm_nccl.h"

#include <string.h>

#include "../util/clock.h"
#include "../util/err.h"

#if TPD_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if TPD_HAVE_NCCL
#include <nccl.h>
#endif

#include "../kernels/cuda/backend_cuda.h"
#include "../kernels/cuda/comm_kernels.h"
#include "../util/fatal.h"

#define CUDA_OK(call)                                                                                       \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess)                                                                              \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s (%s)", #call, cudaGetErrorString(e_),             \
                       cudaGetErrorName(e_));                                                               \
    } while (0)

#define MPI_OK(call)                                                                                        \
    do {                                                                                                    \
        int rc_ = (call);                                                                                   \
        if (rc_ != MPI_SUCCESS) {                                                                           \
            char s_[MPI_MAX_ERROR_STRING];                                                                  \
            int n_ = 0;                                                                                     \
            MPI_Error_string(rc_, s_, &n_);                                                                 \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s", #call, s_);                                     \
        }                                                                                                   \
    } while (0)

#if TPD_HAVE_NCCL
#define NCCL_OK(g, call)                                                                                    \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess)                                                                              \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s (%s)", #call, ncclGetErrorString(r_),             \
                       ncclGetLastError((g)->nccl));                                                        \
    } while (0)
#endif

/* What a job whose collectives hang should look at first. */
#define HANG_HINTS                                                                                          \
    "likely causes: GPU peer-to-peer transfers failing or blocked (check `nvidia-smi topo -m`; try "         \
    "NCCL_P2P_DISABLE=1 or TPD_COMM=mpi), an IOMMU or PCIe ACS setting that breaks P2P (check `dmesg | grep " \
    "-i -e iommu -e dmar`; boot with iommu=pt or disable ACS), or the NCCL environment (NCCL_SOCKET_IFNAME, " \
    "NCCL_IB_DISABLE=1; rerun with NCCL_DEBUG=INFO)"

enum { PATH_NCCL = 1, PATH_IPC = 2, PATH_MPI = 4 };

struct gpu_comm {
    struct comm *c;
    int rank, size, device;
    cudaStream_t stream;
    int paths;        /* PATH_* in use */
    size_t ipc_small; /* with NCCL as well: messages up to this many bytes go over IPC */
    char desc[32];
#if TPD_HAVE_NCCL
    ncclComm_t nccl;
    int have_nccl;
#endif
    /* IPC: each rank's region is [flag (256 B) | slot 0 | slot 1], slots of ipc_cap bytes */
    char *ipc_base;
    char *ipc_peer[IPC_MAX_RANKS]; /* every rank's region as mapped here (own at [rank]) */
    size_t ipc_cap;
    uint64_t epoch;
    int ipc_host_sync;     /* ranks share a GPU: wait in MPI, not in a spinning kernel */
    int *ipc_timed_out;    /* host-mapped; set by the barrier kernel */
    int *ipc_timed_out_dev;
    /* MPI path: pinned host staging */
    float *host;
    size_t host_cap;
    /* watchdog */
    pthread_t wd;
    int wd_running, stop;
    pthread_mutex_t mu;
    const char *phase; /* a blocking step under watch (message when it overruns), or NULL */
    char phase_buf[1024];
    double phase_deadline;
    cudaEvent_t ev; /* recorded after each collective */
    int pending;
    double pending_since;
    double timeout_s, start_timeout_s;
};

/* ---- watchdog ---- */

/* Ends the job from the watchdog thread: the communicator is aborted first so that no rank
 * stays inside a collective, then the fatal hook takes the whole MPI job down. */
static void wd_fire(struct gpu_comm *g, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void wd_fire(struct gpu_comm *g, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#if TPD_HAVE_NCCL
    if (g->have_nccl) ncclCommAbort(g->nccl);
#else
    (void)g;
#endif
    fatal_exit(__FILE__, __LINE__, "%s", msg);
}

static void *wd_main(void *arg) {
    struct gpu_comm *g = arg;
    if (cudaSetDevice(g->device) != cudaSuccess) return NULL;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g->mu);
        if (g->stop) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        double t = clock_now();
        if (g->phase && t > g->phase_deadline) wd_fire(g, "rank %d: %s", g->rank, g->phase);
        if (g->pending) {
            cudaError_t q = cudaEventQuery(g->ev);
            if (q == cudaSuccess)
                g->pending = 0;
            else if (q != cudaErrorNotReady)
                wd_fire(g, "rank %d: CUDA error while an all-reduce (%s) was in flight: %s (%s)", g->rank, g->desc,
                        cudaGetErrorString(q), cudaGetErrorName(q));
            else if (t - g->pending_since > g->timeout_s)
                wd_fire(g, "rank %d: an all-reduce over %d ranks (%s) has not finished after %.0f s "
                        "(TPD_COMM_TIMEOUT); a peer may have died or hung; " HANG_HINTS,
                        g->rank, g->size, g->desc, g->timeout_s);
        }
        if (g->ipc_timed_out && *(volatile int *)g->ipc_timed_out)
            wd_fire(g, "rank %d: the CUDA IPC all-reduce waited %.0f s for a peer that never arrived; " HANG_HINTS,
                    g->rank, g->timeout_s);
#if TPD_HAVE_NCCL
        if (g->have_nccl) {
            ncclResult_t st = ncclSuccess;
            if (ncclCommGetAsyncError(g->nccl, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
                wd_fire(g, "rank %d: NCCL reported an asynchronous error: %s (%s)", g->rank, ncclGetErrorString(st),
                        ncclGetLastError(g->nccl));
        }
#endif
        pthread_mutex_unlock(&g->mu);
    }
}

/* Puts a blocking step under watch: past `timeout` seconds the job ends with `what`. */
static void wd_arm(struct gpu_comm *g, double timeout, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void wd_arm(struct gpu_comm *g, double timeout, const char *fmt, ...) {
    pthread_mutex_lock(&g->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->phase_buf, sizeof g->phase_buf, fmt, ap);
    va_end(ap);
    g->phase = g->phase_buf;
    g->phase_deadline = clock_now() + timeout;
    pthread_mutex_unlock(&g->mu);
}

static void wd_disarm(struct gpu_comm *g) {
    pthread_mutex_lock(&g->mu);
    g->phase = NULL;
    pthread_mutex_unlock(&g->mu);
}

/* After a collective is queued: the watchdog checks that it finishes in time. */
static void wd_note(struct gpu_comm *g) {
    CUDA_OK(cudaEventRecord(g->ev, g->stream));
    pthread_mutex_lock(&g->mu);
    g->pending = 1;
    g->pending_since = clock_now();
    pthread_mutex_unlock(&g->mu);
}

/* ---- the three paths ---- */

static void *ipc_slot(struct gpu_comm *g, int rank, int slot) {
    return g->ipc_peer[rank] + 256 + (size_t)slot * g->ipc_cap;
}

/* One-shot: each rank copies its part into its own slot, the ranks meet at a barrier, then
 * every rank sums all slots in rank order. Slots alternate between calls, so a rank that
 * runs ahead never overwrites a slot a peer may still be reading: it has to pass the next
 * barrier first, which peers reach only after finishing the previous sum. */
static void ipc_allreduce(struct gpu_comm *g, float *buf, size_t n) {
    const size_t chunk = g->ipc_cap / sizeof(float);
    for (size_t off = 0; off < n; off += chunk) {
        const size_t m = n - off < chunk ? n - off : chunk;
        const uint64_t e = ++g->epoch;
        const int slot = (int)(e & 1);
        CUDA_OK(cudaMemcpyAsync(ipc_slot(g, g->rank, slot), buf + off, m * sizeof(float), cudaMemcpyDeviceToDevice,
                                g->stream));
        if (g->ipc_host_sync) {
            CUDA_OK(cudaStreamSynchronize(g->stream));
            MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        } else {
            uint64_t *flags[IPC_MAX_RANKS] = {0};
            for (int r = 0; r < g->size; r++) flags[r] = (uint64_t *)g->ipc_peer[r];
            ipc_flag_barrier(g->stream, (uint64_t *)g->ipc_base, flags, g->size, e,
                             (uint64_t)(g->timeout_s * 1e9), g->ipc_timed_out_dev);
        }
        const float *src[IPC_MAX_RANKS] = {0};
        for (int r = 0; r < g->size; r++) src[r] = ipc_slot(g, r, slot);
        ipc_sum(g->stream, buf + off, src, g->size, m);
    }
}

static void mpi_allreduce(struct gpu_comm *g, float *buf, size_t n) {
    if (n > g->host_cap) {
        if (g->host) CUDA_OK(cudaFreeHost(g->host));
        g->host = NULL;
        CUDA_OK(cudaMallocHost((void **)&g->host, n * sizeof(float)));
        g->host_cap = n;
    }
    CUDA_OK(cudaMemcpyAsync(g->host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    CUDA_OK(cudaStreamSynchronize(g->stream));
    for (size_t off = 0; off < n;) {
        const int chunk = n - off > (size_t)INT_MAX ? INT_MAX : (int)(n - off);
        MPI_OK(MPI_Allreduce(MPI_IN_PLACE, g->host + off, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        off += (size_t)chunk;
    }
    CUDA_OK(cudaMemcpyAsync(buf, g->host, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
}

/* The comm's all-reduce: same choice on every rank (it depends on the size only). */
static void gpu_allreduce(void *impl, float *buf, size_t n) {
    struct gpu_comm *g = impl;
    if (n == 0) return;
    CUDA_OK(cudaSetDevice(g->device));
    const size_t bytes = n * sizeof(float);
    if ((g->paths & PATH_IPC) && (!(g->paths & PATH_NCCL) || bytes <= g->ipc_small))
        ipc_allreduce(g, buf, n);
#if TPD_HAVE_NCCL
    else if (g->paths & PATH_NCCL)
        NCCL_OK(g, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, g->stream));
#endif
    else
        mpi_allreduce(g, buf, n);
    wd_note(g);
}

/* ---- setup ---- */

/* Seconds from the environment, or def. */
static int env_seconds(const char *name, double def, double *out, char *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0) || d > 1e6) return err_set(err, "%s=%s: expected seconds in (0, 1e6]", name, v);
    *out = d;
    return 0;
}

static int env_bytes(const char *name, size_t def, size_t lo, size_t hi, size_t *out, char *err) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !*v) return 0;
    char *end = NULL;
    unsigned long long b = strtoull(v, &end, 10);
    if (end == v || *end || b < lo || b > hi)
        return err_set(err, "%s=%s: expected a byte count in [%zu, %zu]", name, v, lo, hi);
    *out = (size_t)b;
    return 0;
}

/* Collective: 1 on every rank if ok on every rank; else fills err on the ranks that were
 * fine, so every rank can say why. */
static int agree(struct comm *c, int ok, char *err, const char *what) {
    if (comm_all_ok(c, ok)) return 1;
    if (ok) err_set(err, "another rank failed to set up %s", what);
    return 0;
}

struct node_info {
    char host[64];
    char bus[32];
};

/* Collective. Maps every rank's IPC region; 0 when every rank managed, else -1 (then
 * nothing is left mapped). */
static int ipc_open(struct gpu_comm *g, char *err) {
    struct comm *c = g->c;
    size_t cap = 0;
    int ok = !env_bytes("TPD_IPC_BYTES", (size_t)8 << 20, 4096, (size_t)1 << 32, &cap, err);
    cap = (cap + 255) & ~(size_t)255;
    g->ipc_cap = cap;
    cudaIpcMemHandle_t mine;
    memset(&mine, 0, sizeof mine);
    int *tflag = NULL, *tflag_dev = NULL; /* published to the watchdog only once all is well */
    cudaError_t e = cudaSuccess;
    if (ok && (e = cudaMalloc((void **)&g->ipc_base, 256 + 2 * cap)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaMemsetAsync(g->ipc_base, 0, 256, g->stream)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaStreamSynchronize(g->stream)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaIpcGetMemHandle(&mine, g->ipc_base)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaHostAlloc((void **)&tflag, sizeof(int), cudaHostAllocMapped)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaHostGetDevicePointer((void **)&tflag_dev, tflag, 0)) != cudaSuccess) ok = 0;
    if (!ok && e != cudaSuccess) {
        cudaGetLastError();
        err_set(err, "CUDA IPC buffers on device %d: %s (%s)", g->device, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (tflag) *tflag = 0;
    if (agree(c, ok, err, "CUDA IPC buffers")) {
        cudaIpcMemHandle_t *all = calloc((size_t)g->size, sizeof *all);
        if (!all) FATAL("out of memory");
        MPI_OK(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD));
        for (int r = 0; r < g->size && ok; r++) {
            if (r == g->rank) {
                g->ipc_peer[r] = g->ipc_base;
                continue;
            }
            e = cudaIpcOpenMemHandle((void **)&g->ipc_peer[r], all[r], cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                cudaGetLastError();
                g->ipc_peer[r] = NULL;
                ok = 0;
                err_set(err, "cudaIpcOpenMemHandle of rank %d's buffer on device %d: %s (%s)", r, g->device,
                        cudaGetErrorString(e), cudaGetErrorName(e));
            }
        }
        free(all);
        if (agree(c, ok, err, "CUDA IPC mappings")) {
            pthread_mutex_lock(&g->mu);
            g->ipc_timed_out = tflag;
            g->ipc_timed_out_dev = tflag_dev;
            pthread_mutex_unlock(&g->mu);
            return 0;
        }
    }
    for (int r = 0; r < g->size; r++)
        if (r != g->rank && g->ipc_peer[r]) cudaIpcCloseMemHandle(g->ipc_peer[r]);
    memset(g->ipc_peer, 0, sizeof g->ipc_peer);
    if (g->ipc_base) cudaFree(g->ipc_base);
    if (tflag) cudaFreeHost(tflag);
    g->ipc_base = NULL;
    cudaGetLastError();
    return -1;
}

#if TPD_HAVE_NCCL
/* Collective: rank 0 makes the id, MPI broadcasts it, every rank joins under the watchdog. */
static int nccl_open(struct gpu_comm *g, char *err) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = 1;
    if (g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) ok = !err_set(err, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (!agree(g->c, ok, err, "the NCCL id")) return -1;
    MPI_OK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    wd_arm(g, g->start_timeout_s,
           "NCCL initialisation (ncclCommInitRank over %d ranks) did not finish within %.0f s "
           "(TPD_COMM_START_TIMEOUT); " HANG_HINTS, g->size, g->start_timeout_s);
    ncclResult_t r = ncclCommInitRank(&g->nccl, g->size, id, g->rank);
    wd_disarm(g);
    if (r != ncclSuccess) ok = !err_set(err, "ncclCommInitRank (rank %d of %d, device %d): %s (%s)", g->rank, g->size,
                                        g->device, ncclGetErrorString(r), ncclGetLastError(NULL));
    if (ok) {
        pthread_mutex_lock(&g->mu);
        g->have_nccl = 1;
        pthread_mutex_unlock(&g->mu);
    }
    if (agree(g->c, ok, err, "NCCL")) return 0;
    if (ok) {
        pthread_mutex_lock(&g->mu);
        g->have_nccl = 0;
        pthread_mutex_unlock(&g->mu);
        ncclCommDestroy(g->nccl);
    }
    return -1;
}
#endif

/* Collective: an all-reduce of known values through every path in use, under the watchdog
 * (a hang ends the job with the likely causes); the sums are checked exactly. */
static int startup_check(struct gpu_comm *g, char *err) {
    const size_t sizes[2] = {4096, (size_t)1 << 18}; /* 16 KiB (IPC when present), 1 MiB */
    const double S = (double)g->size * (g->size + 1) / 2;
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *h = malloc(n * sizeof(float)), *d = NULL;
        if (!h) FATAL("out of memory");
        for (size_t i = 0; i < n; i++) h[i] = (float)(g->rank + 1) * (float)(i % 13 + 1);
        CUDA_OK(cudaMalloc((void **)&d, n * sizeof(float)));
        CUDA_OK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
        wd_arm(g, g->start_timeout_s,
               "the startup all-reduce of %zu bytes over %d ranks (%s) did not finish within %.0f s "
               "(TPD_COMM_START_TIMEOUT); " HANG_HINTS, n * sizeof(float), g->size, g->desc, g->start_timeout_s);
        gpu_allreduce(g, d, n);
        CUDA_OK(cudaStreamSynchronize(g->stream));
        wd_disarm(g);
        CUDA_OK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaFree(d));
        for (size_t i = 0; i < n && ok; i++)
            if (h[i] != (float)(S * (double)(i % 13 + 1)))
                ok = !err_set(err, "the startup all-reduce over %d ranks (%s) returned %g at element %zu of %zu, "
                              "expected %g: this path corrupts data; " HANG_HINTS, g->size, g->desc, h[i], i, n,
                              S * (double)(i % 13 + 1));
        free(h);
    }
    return agree(g->c, ok, err, "the startup all-reduce") ? 0 : -1;
}

/* Stops the watchdog and frees everything (collective only in that the caller makes sure no
 * peer still reads this rank's IPC region). */
static void gpu_comm_destroy(struct gpu_comm *g) {
    if (g->wd_running) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->wd, NULL);
    }
#if TPD_HAVE_NCCL
    if (g->have_nccl) ncclCommDestroy(g->nccl);
#endif
    for (int r = 0; r < g->size && r < IPC_MAX_RANKS; r++)
        if (r != g->rank && g->ipc_peer[r]) cudaIpcCloseMemHandle(g->ipc_peer[r]);
    if (g->ipc_base) cudaFree(g->ipc_base);
    if (g->ipc_timed_out) cudaFreeHost(g->ipc_timed_out);
    if (g->host) cudaFreeHost(g->host);
    if (g->ev) cudaEventDestroy(g->ev);
    cudaGetLastError();
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int comm_nccl_init(struct comm *c, struct backend *be, const char *mode, char *err) {
    const int is_cuda = be && be->name && !strcmp(be->name, "cuda");
    const int all_cuda = comm_all_ok(c, is_cuda), none_cuda = comm_all_ok(c, !is_cuda);
    if (none_cuda || c->size == 1) return 0; /* the MPI all-reduce on host memory serves */
    if (!all_cuda)
        return err_set(err, "ranks chose different backends (rank %d: %s); set the backend to cuda or cpu on every "
                       "rank", c->rank, be && be->name ? be->name : "none");
    if (!mode || !*mode) mode = getenv("TPD_COMM");
    if (!mode || !*mode) mode = "auto";
    if (strcmp(mode, "auto") && strcmp(mode, "nccl") && strcmp(mode, "ipc") && strcmp(mode, "mpi"))
        return err_set(err, "communicator \"%s\": expected auto, nccl, ipc or mpi", mode);

    struct gpu_comm *g = calloc(1, sizeof *g);
    if (!g) FATAL("out of memory");
    g->c = c;
    g->rank = c->rank;
    g->size = c->size;
    g->device = backend_cuda_device(be);
    g->stream = (cudaStream_t)backend_cuda_stream(be);
    pthread_mutex_init(&g->mu, NULL);
    strcpy(g->desc, "none");
    int ok = !env_seconds("TPD_COMM_TIMEOUT", 300, &g->timeout_s, err) &&
             !env_seconds("TPD_COMM_START_TIMEOUT", 60, &g->start_timeout_s, err) &&
             !env_bytes("TPD_IPC_SMALL", (size_t)512 << 10, 0, (size_t)1 << 32, &g->ipc_small, err);
    if (ok) {
        cudaError_t e = cudaSetDevice(g->device);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&g->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) ok = !err_set(err, "device %d: %s (%s)", g->device, cudaGetErrorString(e),
                                            cudaGetErrorName(e));
    }
    if (ok) {
        if (pthread_create(&g->wd, NULL, wd_main, g) != 0)
            ok = !err_set(err, "cannot start the communicator watchdog thread");
        else
            g->wd_running = 1;
    }
    if (!agree(c, ok, err, "the GPU communicator")) goto fail;

    /* where the ranks are: one node? two ranks on one GPU? */
    struct node_info me, *all = calloc((size_t)g->size, sizeof *all);
    if (!all) FATAL("out of memory");
    memset(&me, 0, sizeof me);
    gethostname(me.host, sizeof me.host - 1);
    CUDA_OK(cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, g->device));
    MPI_OK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD));
    int one_node = 1, shared_gpu = 0, share_a = 0, share_b = 0;
    for (int r = 0; r < g->size; r++) {
        if (strcmp(all[r].host, all[0].host)) one_node = 0;
        for (int s = r + 1; s < g->size; s++)
            if (!strcmp(all[r].host, all[s].host) && !strcmp(all[r].bus, all[s].bus) && !shared_gpu) {
                shared_gpu = 1;
                share_a = r;
                share_b = s;
            }
    }
    char shared_bus[32];
    snprintf(shared_bus, sizeof shared_bus, "%s", all[share_a].bus);
    free(all);
    const int ipc_possible = one_node && g->size <= IPC_MAX_RANKS;

    /* every rank sees the same facts, so these verdicts agree without a collective */
    if (!strcmp(mode, "nccl") && shared_gpu) {
        err_set(err, "NCCL cannot run two ranks on one GPU (ranks %d and %d share %s); use the ipc or mpi "
                "communicator", share_a, share_b, shared_bus);
        goto fail;
    }
    if (!strcmp(mode, "ipc") && !ipc_possible) {
        err_set(err, "the ipc communicator needs every rank on one node and at most %d ranks", IPC_MAX_RANKS);
        goto fail;
    }
#if !TPD_HAVE_NCCL
    if (!strcmp(mode, "nccl")) {
        err_set(err, "this build has no NCCL (nccl.h / libnccl not found at configure time)");
        goto fail;
    }
#endif

    const int want_nccl = !strcmp(mode, "nccl") || (!strcmp(mode, "auto") && !shared_gpu);
    const int want_ipc = !strcmp(mode, "ipc") || (!strcmp(mode, "auto") && ipc_possible);
#if !TPD_HAVE_NCCL
    (void)want_nccl; /* no NCCL in this build: IPC or MPI */
#endif
#if TPD_HAVE_NCCL
    if (want_nccl) {
        if (nccl_open(g, err)) goto fail;
        g->paths |= PATH_NCCL;
    }
#endif
    if (want_ipc) {
        char ipc_err[ERR_LEN];
        g->ipc_host_sync = shared_gpu;
        const char *sync = getenv("TPD_IPC_SYNC");
        if (sync && !strcmp(sync, "host")) g->ipc_host_sync = 1;
        if (sync && !strcmp(sync, "device")) g->ipc_host_sync = 0;
        if (!ipc_open(g, ipc_err)) {
            g->paths |= PATH_IPC;
        } else if (!strcmp(mode, "ipc")) {
            err_set(err, "%s", ipc_err);
            goto fail;
        } /* auto: IPC is an extra; without it NCCL (or MPI) carries everything */
    }
    if (!g->paths) g->paths = PATH_MPI;
    snprintf(g->desc, sizeof g->desc, "%s", g->paths == (PATH_NCCL | PATH_IPC) ? "nccl+ipc"
                                            : g->paths == PATH_NCCL            ? "nccl"
                                            : g->paths == PATH_IPC             ? (g->ipc_host_sync ? "ipc (host sync)" : "ipc")
                                                                               : "mpi (host staging)");
    comm_set_allreduce(c, gpu_allreduce, g);
    if (startup_check(g, err)) {
        comm_set_allreduce(c, NULL, NULL);
        goto fail;
    }
    return 0;
fail:
    gpu_comm_destroy(g);
    return -1;
}

void comm_nccl_free(struct comm *c) {
    if (c->allreduce != gpu_allreduce) return;
    struct gpu_comm *g = c->allreduce_impl;
    CUDA_OK(cudaSetDevice(g->device));
    CUDA_OK(cudaStreamSynchronize(g->stream));
    comm_barrier(c); /* no peer still reads this rank's IPC slots */
    comm_set_allreduce(c, NULL, NULL);
    gpu_comm_destroy(g);
}

const char *comm_nccl_describe(const struct comm *c) {
    if (c->allreduce != gpu_allreduce) return "none";
    return ((const struct gpu_comm *)c->allreduce_impl)->desc;
}

#else /* no CUDA in this build: the CPU backend's MPI all-reduce is the only one */

int comm_nccl_init(struct comm *c, struct backend *be, const char *mode, char *err) {
    (void)mode;
    const int is_cuda = be && be->name && !strcmp(be->name, "cuda");
    if (!comm_all_ok(c, !is_cuda)) return err_set(err, "this build has no CUDA communicator");
    return 0;
}

void comm_nccl_free(struct comm *c) { (void)c; }

const char *comm_nccl_describe(const struct comm *c) {
    (void)c;
    return "none";
}

#endif
