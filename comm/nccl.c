#include "nccl.h"

#include "../util/err.h"

#if TPD_HAVE_CUDA && TPD_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/check_cuda.h"
#include "../util/check_mpi.h"
#include "../util/fatal.h"
#include "comm_mpi.h"

struct nccl {
    ncclComm_t comm;
    struct monitor *mon;
};

/* Monitor probe: an error NCCL found on its own (a peer gone, a network failure). */
static int async_error(void *arg, char *msg, size_t cap) {
    struct nccl *n = arg;
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(n->comm, &st) != ncclSuccess || st == ncclSuccess ||
        st == ncclInProgress)
        return 0;
    snprintf(msg, cap, "NCCL reported an asynchronous error: %s (%s)", ncclGetErrorString(st),
             ncclGetLastError(n->comm));
    return 1;
}

/* Monitor abort: no rank stays inside a collective once the job ends. */
static void abort_comm(void *arg) { ncclCommAbort(((struct nccl *)arg)->comm); }

struct nccl *nccl_open(struct comm *c, int world, int device, struct monitor *mon,
                       double start_timeout_s, char *err) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    int ok = 1;
    const int rank = world ? c->rank : c->tp_rank, size = world ? c->size : c->tp;
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) ok = !err_set(err, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (!comm_agree(c, ok, err, "the NCCL id")) return NULL;
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, world ? MPI_COMM_WORLD : comm_tp_mpi(c)));
    struct nccl *n = xcalloc(1, sizeof *n);
    n->mon = mon;
    monitor_arm(mon, start_timeout_s,
                "NCCL initialisation (ncclCommInitRank over %d ranks) did not finish within %.0f s "
                "(parallel.comm_start_timeout_s); " HANG_HINTS,
                size, start_timeout_s);
    ncclResult_t r = ncclCommInitRank(&n->comm, size, id, rank);
    monitor_disarm(mon);
    if (r != ncclSuccess)
        ok = !err_set(err, "ncclCommInitRank (%s rank %d of %d, device %d): %s (%s)",
                      world ? "world" : "TP group", rank, size, device, ncclGetErrorString(r),
                      ncclGetLastError(NULL));
    if (ok) monitor_add_probe(mon, async_error, abort_comm, n);
    if (comm_agree(c, ok, err, "NCCL")) return n;
    if (ok) nccl_close(n);
    else free(n);
    return NULL;
}

void nccl_allreduce(struct nccl *n, float *buf, size_t count, void *stream) {
    NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, n->comm, (cudaStream_t)stream));
}

void nccl_send(struct nccl *n, const float *buf, size_t count, int peer, void *stream) {
    NCCL_CHECK(ncclSend(buf, count, ncclFloat32, peer, n->comm, (cudaStream_t)stream));
}

void nccl_recv(struct nccl *n, float *buf, size_t count, int peer, void *stream) {
    NCCL_CHECK(ncclRecv(buf, count, ncclFloat32, peer, n->comm, (cudaStream_t)stream));
}

void nccl_close(struct nccl *n) {
    if (!n) return;
    monitor_remove_probe(n->mon, n);
    ncclCommDestroy(n->comm);
    free(n);
}

#elif TPD_HAVE_CUDA /* CUDA without NCCL: the GPU communicator uses IPC or MPI staging */

struct nccl *nccl_open(struct comm *c, int world, int device, struct monitor *mon,
                       double start_timeout_s, char *err) {
    (void)c, (void)world, (void)device, (void)mon, (void)start_timeout_s;
    err_set(err, "this build has no NCCL (nccl.h / libnccl not found at configure time)");
    return NULL;
}

void nccl_allreduce(struct nccl *n, float *buf, size_t count, void *stream) {
    (void)n, (void)buf, (void)count, (void)stream;
}

void nccl_send(struct nccl *n, const float *buf, size_t count, int peer, void *stream) {
    (void)n, (void)buf, (void)count, (void)peer, (void)stream;
}

void nccl_recv(struct nccl *n, float *buf, size_t count, int peer, void *stream) {
    (void)n, (void)buf, (void)count, (void)peer, (void)stream;
}

void nccl_close(struct nccl *n) { (void)n; }

#endif
