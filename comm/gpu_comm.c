#include "gpu_comm.h"

#include <string.h>

#include "../util/err.h"

#if TPD_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../kernels/cuda/backend_cuda.h"
#include "../util/check_cuda.h"
#include "../util/check_mpi.h"
#include "../util/env.h"
#include "../util/fatal.h"
#include "ipc_allreduce.h"
#include "mpi_staging.h"
#include "nccl.h"
#include "watchdog.h"

enum { PATH_NCCL = 1, PATH_IPC = 2, PATH_MPI = 4 };

struct gpu_comm {
    struct comm *c;
    int device;
    void *stream;     /* the backend's cudaStream_t */
    int paths;        /* PATH_* in use */
    size_t ipc_small; /* with NCCL as well: messages up to this many bytes go over IPC */
    int ipc_host_sync;
    char desc[32];
    double timeout_s, start_timeout_s;
    struct watchdog *wd;
    struct nccl *nccl;
    struct ipc_allreduce *ipc;
    struct mpi_staging staging;
};

/* The comm's all-reduce: same choice on every rank (it depends on the size only). */
static void gpu_allreduce(void *impl, float *buf, size_t n) {
    struct gpu_comm *g = impl;
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(g->device));
    const size_t bytes = n * sizeof(float);
    if ((g->paths & PATH_IPC) && (!(g->paths & PATH_NCCL) || bytes <= g->ipc_small))
        ipc_allreduce_sum(g->ipc, buf, n);
    else if (g->paths & PATH_NCCL)
        nccl_allreduce(g->nccl, buf, n, g->stream);
    else
        mpi_staging_allreduce(&g->staging, g->c, buf, n, g->stream);
    watchdog_note(g->wd, g->stream);
}

/* Collective: an all-reduce of known values through every path in use, under the watchdog
 * (a hang ends the job with the likely causes); the sums are checked exactly. */
static int startup_check(struct gpu_comm *g, char *err) {
    const size_t sizes[2] = {4096, (size_t)1 << 18}; /* 16 KiB (IPC when present), 1 MiB */
    const int rank = g->c->rank, size = g->c->size;
    const double S = (double)size * (size + 1) / 2;
    cudaStream_t stream = (cudaStream_t)g->stream;
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *h = xmalloc(n * sizeof(float)), *d = NULL;
        for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) * (float)(i % 13 + 1);
        CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        watchdog_arm(g->wd, g->start_timeout_s,
                     "the startup all-reduce of %zu bytes over %d ranks (%s) did not finish within %.0f s "
                     "(TPD_COMM_START_TIMEOUT); " HANG_HINTS, n * sizeof(float), size, g->desc, g->start_timeout_s);
        gpu_allreduce(g, d, n);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        watchdog_disarm(g->wd);
        CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d));
        for (size_t i = 0; i < n && ok; i++)
            if (h[i] != (float)(S * (double)(i % 13 + 1)))
                ok = !err_set(err, "the startup all-reduce over %d ranks (%s) returned %g at element %zu of %zu, "
                              "expected %g: this path corrupts data; " HANG_HINTS, size, g->desc, h[i], i, n,
                              S * (double)(i % 13 + 1));
        free(h);
    }
    return comm_agree(g->c, ok, err, "the startup all-reduce") ? 0 : -1;
}

/* Where the ranks are. A rank's node is that of its shared-memory communicator (comm_init). */
struct placement {
    int one_node;   /* every rank on one node */
    int shared_gpu; /* two ranks of one node on one GPU: share_a and share_b, on bus */
    int share_a, share_b;
    char bus[32];
};

/* Collective: every rank gets the same facts, so verdicts drawn from them agree without
 * another collective. */
static void placement_find(struct comm *c, int device, struct placement *p) {
    struct rank_gpu {
        int node;
        char bus[32];
    } me, *all = xcalloc((size_t)c->size, sizeof *all);
    memset(&me, 0, sizeof me);
    memset(p, 0, sizeof *p);
    me.node = c->node;
    CUDA_CHECK(cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, device));
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD));
    p->one_node = c->local_size == c->size;
    for (int r = 0; r < c->size && !p->shared_gpu; r++)
        for (int s = r + 1; s < c->size && !p->shared_gpu; s++)
            if (all[r].node == all[s].node && !strcmp(all[r].bus, all[s].bus)) {
                p->shared_gpu = 1;
                p->share_a = r;
                p->share_b = s;
            }
    snprintf(p->bus, sizeof p->bus, "%s", all[p->share_a].bus);
    free(all);
}

/* Frees everything; each module withdraws its watchdog probe before the watchdog stops (no
 * collective: the caller makes sure no peer still reads this rank's IPC region). */
static void gpu_comm_destroy(struct gpu_comm *g) {
    nccl_close(g->nccl);
    ipc_allreduce_close(g->ipc);
    mpi_staging_free(&g->staging);
    watchdog_stop(g->wd);
    free(g);
}

int gpu_comm_init(struct comm *c, struct backend *be, const char *mode, char *err) {
    const int is_cuda = be && be->kind == BACKEND_CUDA;
    const int all_cuda = comm_all_ok(c, is_cuda), none_cuda = comm_all_ok(c, !is_cuda);
    if (none_cuda || c->size == 1) return 0; /* the MPI all-reduce on host memory serves */
    if (!all_cuda)
        return err_set(err, "ranks chose different backends (rank %d: %s); set the backend to cuda or cpu on every "
                       "rank", c->rank, be && be->name ? be->name : "none");
    if (!mode || !*mode) mode = getenv("TPD_COMM");
    if (!mode || !*mode) mode = "auto";
    if (strcmp(mode, "auto") && strcmp(mode, "nccl") && strcmp(mode, "ipc") && strcmp(mode, "mpi"))
        return err_set(err, "communicator \"%s\": expected auto, nccl, ipc or mpi", mode);

    struct gpu_comm *g = xcalloc(1, sizeof *g);
    g->c = c;
    g->device = backend_cuda_device(be);
    g->stream = backend_cuda_stream(be);
    strcpy(g->desc, "none");
    int ok = !env_seconds("TPD_COMM_TIMEOUT", 300, &g->timeout_s, err) &&
             !env_seconds("TPD_COMM_START_TIMEOUT", 60, &g->start_timeout_s, err) &&
             !env_bytes("TPD_IPC_SMALL", (size_t)512 << 10, 0, (size_t)1 << 32, &g->ipc_small, err);
    if (ok) {
        cudaError_t e = cudaSetDevice(g->device);
        if (e != cudaSuccess) ok = !err_set(err, "device %d: %s (%s)", g->device, cudaGetErrorString(e),
                                            cudaGetErrorName(e));
    }
    if (ok && !(g->wd = watchdog_start(c->rank, c->size, g->device, g->desc, g->timeout_s, err))) ok = 0;
    if (!comm_agree(c, ok, err, "the GPU communicator")) goto fail;

    struct placement pl;
    placement_find(c, g->device, &pl);
    const int ipc_possible = pl.one_node && c->size <= IPC_MAX_RANKS;
    /* NCCL refuses two ranks on one GPU of one host; with NCCL_HOSTID set per rank they look
     * like separate hosts and talk over its network transport (how the single-GPU machine
     * checks the NCCL path: tests/gpu/check_hf.py). Every rank sees the same placement, and
     * comm_all_ok makes the verdict the same where NCCL_HOSTID is set on some ranks only. */
    const char *hostid = getenv("NCCL_HOSTID");
    const int hostid_all = comm_all_ok(c, hostid && *hostid);
    if (!strcmp(mode, "nccl") && pl.shared_gpu && !hostid_all) {
        err_set(err, "NCCL cannot run two ranks on one GPU (ranks %d and %d share %s); use the ipc or mpi "
                "communicator (or give each rank its own NCCL_HOSTID)", pl.share_a, pl.share_b, pl.bus);
        goto fail;
    }
    if (!strcmp(mode, "ipc") && !ipc_possible) {
        err_set(err, "the ipc communicator needs every rank on one node and at most %d ranks", IPC_MAX_RANKS);
        goto fail;
    }

    /* without NCCL in this build, auto means IPC or MPI, and nccl_open says why "nccl" fails */
    const int want_nccl = !strcmp(mode, "nccl") || (TPD_HAVE_NCCL && !strcmp(mode, "auto") && !pl.shared_gpu);
    const int want_ipc = !strcmp(mode, "ipc") || (!strcmp(mode, "auto") && ipc_possible);
    if (want_nccl) {
        if (!(g->nccl = nccl_open(c, g->device, g->wd, g->start_timeout_s, err))) goto fail;
        g->paths |= PATH_NCCL;
    }
    if (want_ipc) {
        char ipc_err[ERR_LEN];
        g->ipc_host_sync = pl.shared_gpu;
        const char *sync = getenv("TPD_IPC_SYNC");
        if (sync && !strcmp(sync, "host")) g->ipc_host_sync = 1;
        if (sync && !strcmp(sync, "device")) g->ipc_host_sync = 0;
        g->ipc = ipc_allreduce_open(c, g->device, g->stream, g->ipc_host_sync, g->timeout_s, g->wd, ipc_err);
        if (g->ipc) {
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

void gpu_comm_free(struct comm *c) {
    if (c->allreduce != gpu_allreduce) return;
    struct gpu_comm *g = c->allreduce_impl;
    CUDA_CHECK(cudaSetDevice(g->device));
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)g->stream));
    comm_barrier(c); /* no peer still reads this rank's IPC slots */
    comm_set_allreduce(c, NULL, NULL);
    gpu_comm_destroy(g);
}

const char *gpu_comm_describe(const struct comm *c) {
    if (c->allreduce != gpu_allreduce) return "none";
    return ((const struct gpu_comm *)c->allreduce_impl)->desc;
}

#else /* no CUDA in this build: the CPU backend's MPI all-reduce is the only one */

int gpu_comm_init(struct comm *c, struct backend *be, const char *mode, char *err) {
    (void)mode;
    const int is_cuda = be && be->kind == BACKEND_CUDA;
    if (!comm_all_ok(c, !is_cuda)) return err_set(err, "this build has no CUDA communicator");
    return 0;
}

void gpu_comm_free(struct comm *c) { (void)c; }

const char *gpu_comm_describe(const struct comm *c) {
    (void)c;
    return "none";
}

#endif
