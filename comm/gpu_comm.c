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
#include "../util/fatal.h"
#include "ipc_allreduce.h"
#include "mpi_staging.h"
#include "comm_mpi.h"
#include "nccl.h"
#include "monitor.h"

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
    struct monitor *mon; /* the engine's; watching the device once mon_watching */
    int mon_watching;
    struct nccl *nccl;
    struct ipc_allreduce *ipc;
    struct mpi_staging staging;
    /* between pipeline stages: NCCL send/recv over every rank, else MPI through pinned host memory
     */
    struct nccl *pipe;
    float *p2p_host;
    size_t p2p_cap;
};

/* The comm's all-reduce: same choice on every rank (it depends on the size only). */
static void gpu_allreduce(void *impl, float *buf, size_t n) {
    struct gpu_comm *g = impl;
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(g->device));
    const size_t bytes = n * sizeof(float);
    if ((g->paths & PATH_IPC) && (!(g->paths & PATH_NCCL) || bytes <= g->ipc_small))
        ipc_allreduce_sum(g->ipc, buf, n);
    else if (g->paths & PATH_NCCL) nccl_allreduce(g->nccl, buf, n, g->stream);
    else mpi_staging_allreduce(&g->staging, g->c, buf, n, g->stream);
    monitor_note(g->mon, g->stream);
}

/* The comm's activations between stages (device memory): NCCL send/recv on the stream, or
 * through pinned host memory and MPI (the step deadline watches the MPI wait). */
static void gpu_p2p(void *impl, float *buf, size_t n, int peer, int send) {
    struct gpu_comm *g = impl;
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(g->device));
    cudaStream_t stream = (cudaStream_t)g->stream;
    if (g->pipe) {
        if (send) nccl_send(g->pipe, buf, n, peer, g->stream);
        else nccl_recv(g->pipe, buf, n, peer, g->stream);
        monitor_note(g->mon, g->stream);
        return;
    }
    if (n > g->p2p_cap) {
        if (g->p2p_host) CUDA_CHECK(cudaFreeHost(g->p2p_host));
        g->p2p_host = NULL;
        CUDA_CHECK(cudaMallocHost((void **)&g->p2p_host, n * sizeof(float)));
        g->p2p_cap = n;
    }
    if (send) {
        CUDA_CHECK(
            cudaMemcpyAsync(g->p2p_host, buf, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        comm_send_detached(g->c, g->p2p_host, n * sizeof(float), peer,
                           COMM_TAG_ACT); /* as on the CPU path */
    } else {
        comm_recv(g->c, g->p2p_host, n * sizeof(float), peer, COMM_TAG_ACT);
        CUDA_CHECK(
            cudaMemcpyAsync(buf, g->p2p_host, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(
            cudaStreamSynchronize(stream)); /* the host buffer is free for the next message */
    }
}

/* Collective: known values from each stage to its next through the path in use, under the
 * monitor naming the pair of ranks; checked exactly by the receiver. */
static int p2p_check(struct gpu_comm *g, char *err) {
    struct comm *c = g->c;
    const size_t n = (size_t)1 << 16;
    cudaStream_t stream = (cudaStream_t)g->stream;
    float *h = xmalloc(n * sizeof(float)), *d = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(float)));
    int ok = 1;
    for (int dir = 0; dir < 2; dir++) { /* send to the next stage, then receive from the previous */
        int other = dir == 0 ? c->stage + 1 : c->stage - 1;
        if (other < 0 || other >= c->pp) continue;
        int peer = comm_stage_peer(c, other);
        int from = dir == 0 ? c->rank : peer, to = dir == 0 ? peer : c->rank;
        if (dir == 0) {
            for (size_t i = 0; i < n; i++) h[i] = (float)(from + 1) * (float)(i % 17 + 1);
            CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        }
        monitor_arm(g->mon, g->start_timeout_s,
                    "the startup send/recv of %zu bytes from rank %d (stage %d) to rank %d (stage "
                    "%d) over %s did not "
                    "finish within %.0f s (parallel.comm_start_timeout_s); " HANG_HINTS,
                    n * sizeof(float), from, from / c->tp, to, to / c->tp, g->pipe ? "NCCL" : "MPI",
                    g->start_timeout_s);
        gpu_p2p(g, d, n, peer, dir == 0);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        monitor_disarm(g->mon);
        if (dir == 1) {
            CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n && ok; i++)
                if (h[i] != (float)(from + 1) * (float)(i % 17 + 1))
                    ok = !err_set(err,
                                  "the startup send/recv from rank %d (stage %d) to rank %d (stage "
                                  "%d) delivered "
                                  "%g at element %zu, expected %g: this path corrupts data",
                                  from, from / c->tp, to, to / c->tp, h[i], i,
                                  (double)(from + 1) * (double)(i % 17 + 1));
        }
    }
    CUDA_CHECK(cudaFree(d));
    free(h);
    return comm_agree(c, ok, err, "the startup send/recv between stages") ? 0 : -1;
}

/* Collective: an all-reduce of known values through every path in use, under the monitor
 * (a hang ends the job with the likely causes); the sums are checked exactly. */
static int startup_check(struct gpu_comm *g, char *err) {
    const size_t sizes[2] = {4096, (size_t)1 << 18}; /* 16 KiB (IPC when present), 1 MiB */
    const int rank = g->c->tp_rank, size = g->c->tp, first = g->c->stage * size;
    const double S = (double)size * (size + 1) / 2;
    cudaStream_t stream = (cudaStream_t)g->stream;
    int ok = 1;
    for (int k = 0; k < 2; k++) {
        const size_t n = sizes[k];
        float *h = xmalloc(n * sizeof(float)), *d = NULL;
        for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) * (float)(i % 13 + 1);
        CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, stream));
        monitor_arm(g->mon, g->start_timeout_s,
                    "the startup all-reduce of %zu bytes over stage %d's TP group (world ranks "
                    "%d-%d, %s) did not "
                    "finish within %.0f s (parallel.comm_start_timeout_s); " HANG_HINTS,
                    n * sizeof(float), g->c->stage, first, first + size - 1, g->desc,
                    g->start_timeout_s);
        gpu_allreduce(g, d, n);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        monitor_disarm(g->mon);
        CUDA_CHECK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaFree(d));
        for (size_t i = 0; i < n && ok; i++)
            if (h[i] != (float)(S * (double)(i % 13 + 1)))
                ok = !err_set(
                    err,
                    "the startup all-reduce over stage %d's TP group (world ranks %d-%d, %s) "
                    "returned "
                    "%g at element %zu of %zu, expected %g: this path corrupts data; " HANG_HINTS,
                    g->c->stage, first, first + size - 1, g->desc, h[i], i, n,
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

/* Collective over the stage's TP group (world = 0) or every rank (1): every rank of it gets
 * the same facts, so verdicts drawn from them agree without another collective. Ranks are
 * named by world rank. */
static void placement_find(struct comm *c, int world, int device, struct placement *p) {
    const int size = world ? c->size : c->tp, first = world ? 0 : c->stage * c->tp;
    struct rank_gpu {
        int node;
        char bus[32];
    } me, *all = xcalloc((size_t)size, sizeof *all);
    memset(&me, 0, sizeof me);
    memset(p, 0, sizeof *p);
    me.node = c->node;
    CUDA_CHECK(cudaDeviceGetPCIBusId(me.bus, (int)sizeof me.bus, device));
    MPI_CHECK(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE,
                            world ? MPI_COMM_WORLD : comm_tp_mpi(c)));
    p->one_node = 1;
    for (int r = 1; r < size; r++) p->one_node &= all[r].node == all[0].node;
    for (int r = 0; r < size && !p->shared_gpu; r++)
        for (int s = r + 1; s < size && !p->shared_gpu; s++)
            if (all[r].node == all[s].node && !strcmp(all[r].bus, all[s].bus)) {
                p->shared_gpu = 1;
                p->share_a = first + r;
                p->share_b = first + s;
            }
    snprintf(p->bus, sizeof p->bus, "%s", all[p->share_a - first].bus);
    free(all);
}

/* Frees everything; each module withdraws its monitor probe before the device is unwatched (no
 * collective: the caller makes sure no peer still reads this rank's IPC region). */
static void gpu_comm_destroy(struct gpu_comm *g) {
    nccl_close(g->pipe);
    if (g->p2p_host) cudaFreeHost(g->p2p_host);
    cudaGetLastError();
    nccl_close(g->nccl);
    ipc_allreduce_close(g->ipc);
    mpi_staging_free(&g->staging);
    if (g->mon_watching) monitor_unwatch_device(g->mon);
    free(g);
}

int gpu_comm_init(struct comm *c, struct backend *be, const struct comm_opts *o,
                  struct monitor *mon, char *err) {
    static const struct comm_opts defaults;
    if (!o) o = &defaults;
    const int is_cuda = be && be->kind == BACKEND_CUDA;
    const int all_cuda = comm_all_ok(c, is_cuda), none_cuda = comm_all_ok(c, !is_cuda);
    if (none_cuda || c->size == 1) return 0; /* the MPI all-reduce on host memory serves */
    if (!all_cuda)
        return err_set(
            err,
            "ranks chose different backends (rank %d: %s); set the backend to cuda or cpu on every "
            "rank",
            c->rank, be && be->name ? be->name : "none");
    const char *mode = o->mode && *o->mode ? o->mode : "auto";
    if (strcmp(mode, "auto") && strcmp(mode, "nccl") && strcmp(mode, "ipc") && strcmp(mode, "mpi"))
        return err_set(err, "communicator \"%s\": expected auto, nccl, ipc or mpi", mode);

    struct gpu_comm *g = xcalloc(1, sizeof *g);
    g->c = c;
    g->mon = mon;
    g->device = backend_cuda_device(be);
    g->stream = backend_cuda_stream(be);
    strcpy(g->desc, "none");
    g->timeout_s = o->timeout_s > 0 ? o->timeout_s : COMM_TIMEOUT_S;
    g->start_timeout_s = o->start_timeout_s > 0 ? o->start_timeout_s : COMM_START_TIMEOUT_S;
    g->ipc_small = (size_t)(o->ipc_small_bytes > 0 ? o->ipc_small_bytes : COMM_IPC_SMALL_BYTES);
    const size_t ipc_bytes = (size_t)(o->ipc_buffer_bytes > 0 ? o->ipc_buffer_bytes
                                                              : COMM_IPC_BUFFER_BYTES);
    int ok = 1;
    {
        cudaError_t e = cudaSetDevice(g->device);
        if (e != cudaSuccess)
            ok = !err_set(err, "device %d: %s (%s)", g->device, cudaGetErrorString(e),
                          cudaGetErrorName(e));
    }
    if (ok && monitor_watch_device(mon, g->device, g->desc, g->timeout_s, err)) ok = 0;
    g->mon_watching = ok;
    if (!comm_agree(c, ok, err, "the GPU communicator")) goto fail;

    struct placement pl;
    placement_find(c, 0, g->device, &pl);
    const int ipc_possible = pl.one_node && c->tp <= IPC_MAX_RANKS;
    /* NCCL refuses two ranks on one GPU of one host; with NCCL_HOSTID set per rank they look
     * like separate hosts and talk over its network transport (how the single-GPU machine
     * checks the NCCL path: tests/gpu/check_hf.py). Every rank sees the same placement, and
     * comm_all_ok makes the verdict the same where NCCL_HOSTID is set on some ranks only. */
    const char *hostid = getenv("NCCL_HOSTID");
    const int hostid_all = comm_all_ok(c, hostid && *hostid);
    if (!strcmp(mode, "nccl") && pl.shared_gpu && !hostid_all) {
        err_set(
            err,
            "NCCL cannot run two ranks on one GPU (ranks %d and %d share %s); use the ipc or mpi "
            "communicator (or give each rank its own NCCL_HOSTID)",
            pl.share_a, pl.share_b, pl.bus);
        goto fail;
    }
    if (!strcmp(mode, "ipc") && !ipc_possible) {
        err_set(err, "the ipc communicator needs every rank on one node and at most %d ranks",
                IPC_MAX_RANKS);
        goto fail;
    }

    /* without NCCL in this build, auto means IPC or MPI, and nccl_open says why "nccl" fails */
    const int want_nccl = !strcmp(mode, "nccl") ||
                          (TPD_HAVE_NCCL && !strcmp(mode, "auto") && !pl.shared_gpu);
    const int want_ipc = !strcmp(mode, "ipc") || (!strcmp(mode, "auto") && ipc_possible);
    if (want_nccl) {
        if (!(g->nccl = nccl_open(c, 0, g->device, g->mon, g->start_timeout_s, err))) goto fail;
        g->paths |= PATH_NCCL;
    }
    if (want_ipc) {
        char ipc_err[ERR_LEN];
        g->ipc_host_sync = pl.shared_gpu;
        if (o->ipc_sync && !strcmp(o->ipc_sync, "host")) g->ipc_host_sync = 1;
        if (o->ipc_sync && !strcmp(o->ipc_sync, "device")) g->ipc_host_sync = 0;
        g->ipc = ipc_allreduce_open(c, g->device, g->stream, g->ipc_host_sync, ipc_bytes,
                                    g->timeout_s, g->mon, ipc_err);
        if (g->ipc) {
            g->paths |= PATH_IPC;
        } else if (!strcmp(mode, "ipc")) {
            err_set(err, "%s", ipc_err);
            goto fail;
        } /* auto: IPC is an extra; without it NCCL (or MPI) carries everything */
    }
    if (!g->paths) g->paths = PATH_MPI;
    snprintf(g->desc, sizeof g->desc, "%s",
             g->paths == (PATH_NCCL | PATH_IPC) ? "nccl+ipc"
             : g->paths == PATH_NCCL            ? "nccl"
             : g->paths == PATH_IPC             ? (g->ipc_host_sync ? "ipc (host sync)" : "ipc")
                                                : "mpi (host staging)");
    comm_set_allreduce(c, gpu_allreduce, g);
    if (startup_check(g, err)) {
        comm_set_allreduce(c, NULL, NULL);
        goto fail;
    }
    if (c->pp > 1) {
        /* between stages: NCCL send/recv where NCCL carries the all-reduce and no two ranks of
         * the job share a GPU (or NCCL_HOSTID separates them); else MPI through host memory */
        struct placement wpl;
        placement_find(c, 1, g->device, &wpl);
        if ((g->paths & PATH_NCCL) && (!wpl.shared_gpu || hostid_all) &&
            !(g->pipe = nccl_open(c, 1, g->device, g->mon, g->start_timeout_s, err)))
            goto fail_installed;
        comm_set_p2p(c, gpu_p2p, g);
        size_t at = strlen(g->desc);
        snprintf(g->desc + at, sizeof g->desc - at, "; stages %s", g->pipe ? "nccl" : "mpi");
        if (p2p_check(g, err)) goto fail_installed;
    }
    return 0;
fail_installed:
    comm_set_p2p(c, NULL, NULL);
    comm_set_allreduce(c, NULL, NULL);
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
    comm_set_p2p(c, NULL, NULL);
    gpu_comm_destroy(g);
}

const char *gpu_comm_describe(const struct comm *c) {
    if (c->allreduce != gpu_allreduce) return "none";
    return ((const struct gpu_comm *)c->allreduce_impl)->desc;
}

#else /* no CUDA in this build: the CPU backend's MPI all-reduce is the only one */

int gpu_comm_init(struct comm *c, struct backend *be, const struct comm_opts *o,
                  struct monitor *mon, char *err) {
    (void)o, (void)mon;
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
