#include "ipc_allreduce.h"

#if TPD_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/check_cuda.h"
#include "../util/check_mpi.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "comm_mpi.h"

/* Each rank's region is [flag (256 B) | slot 0 | slot 1], slots of cap bytes. */
struct ipc_allreduce {
    int rank, size, device; /* in the stage's TP group */
    MPI_Comm group;
    cudaStream_t stream;
    char *base;
    char *peer[IPC_MAX_RANKS]; /* every rank's region as mapped here (own at [rank]) */
    size_t cap;
    uint64_t epoch;
    int host_sync;
    double timeout_s;
    int *timed_out; /* host-mapped; set by the barrier kernel */
    int *timed_out_dev;
    struct monitor *mon; /* holds the probe once the open succeeded */
};

/* Monitor probe: the barrier kernel gave up waiting for a peer. */
static int peer_missing(void *arg, char *msg, size_t cap) {
    const struct ipc_allreduce *p = arg;
    if (!*(volatile int *)p->timed_out) return 0;
    snprintf(msg, cap,
             "the CUDA IPC all-reduce waited %.0f s for a peer that never arrived; " HANG_HINTS,
             p->timeout_s);
    return 1;
}

/* Unmaps and frees whatever is there, probe and struct aside. */
static void release(struct ipc_allreduce *p) {
    for (int r = 0; r < p->size && r < IPC_MAX_RANKS; r++)
        if (r != p->rank && p->peer[r]) cudaIpcCloseMemHandle(p->peer[r]);
    if (p->base) cudaFree(p->base);
    if (p->timed_out) cudaFreeHost(p->timed_out);
    cudaGetLastError();
}

struct ipc_allreduce *ipc_allreduce_open(struct comm *c, int device, void *stream, int host_sync,
                                         size_t slot_bytes, double timeout_s, struct monitor *mon,
                                         char *err) {
    if (c->tp > IPC_MAX_RANKS) { /* the same verdict on every rank */
        err_set(err, "the ipc communicator needs at most %d ranks", IPC_MAX_RANKS);
        return NULL;
    }
    struct ipc_allreduce *p = xcalloc(1, sizeof *p);
    p->rank = c->tp_rank; /* the stage's TP group */
    p->size = c->tp;
    p->group = comm_tp_mpi(c);
    p->device = device;
    p->stream = (cudaStream_t)stream;
    p->host_sync = host_sync;
    p->timeout_s = timeout_s;
    const size_t cap = (slot_bytes + 255) & ~(size_t)255;
    int ok = 1;
    p->cap = cap;
    cudaIpcMemHandle_t mine;
    memset(&mine, 0, sizeof mine);
    cudaError_t e = cudaSuccess;
    if (ok && (e = cudaMalloc((void **)&p->base, 256 + 2 * cap)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaMemsetAsync(p->base, 0, 256, p->stream)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaStreamSynchronize(p->stream)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaIpcGetMemHandle(&mine, p->base)) != cudaSuccess) ok = 0;
    if (ok && (e = cudaHostAlloc((void **)&p->timed_out, sizeof(int), cudaHostAllocMapped)) !=
                  cudaSuccess)
        ok = 0;
    if (ok &&
        (e = cudaHostGetDevicePointer((void **)&p->timed_out_dev, p->timed_out, 0)) != cudaSuccess)
        ok = 0;
    if (!ok && e != cudaSuccess) {
        cudaGetLastError();
        err_set(err, "CUDA IPC buffers on device %d: %s (%s)", device, cudaGetErrorString(e),
                cudaGetErrorName(e));
    }
    if (p->timed_out) *p->timed_out = 0;
    if (comm_agree(c, ok, err, "CUDA IPC buffers")) {
        cudaIpcMemHandle_t *all = xcalloc((size_t)p->size, sizeof *all);
        MPI_CHECK(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                                p->group));
        for (int r = 0; r < p->size && ok; r++) {
            if (r == p->rank) {
                p->peer[r] = p->base;
                continue;
            }
            e = cudaIpcOpenMemHandle((void **)&p->peer[r], all[r], cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                cudaGetLastError();
                p->peer[r] = NULL;
                ok = 0;
                err_set(err, "cudaIpcOpenMemHandle of rank %d's buffer on device %d: %s (%s)", r,
                        device, cudaGetErrorString(e), cudaGetErrorName(e));
            }
        }
        free(all);
        if (comm_agree(c, ok, err, "CUDA IPC mappings")) {
            p->mon = mon; /* the flag is watched only once all is well */
            monitor_add_probe(mon, peer_missing, NULL, p);
            return p;
        }
    }
    release(p);
    free(p);
    return NULL;
}

static void *slot(struct ipc_allreduce *p, int rank, int s) {
    return p->peer[rank] + 256 + (size_t)s * p->cap;
}

/* One-shot: each rank copies its part into its own slot, the ranks meet at a barrier, then
 * every rank sums all slots in rank order. Slots alternate between calls, so a rank that
 * runs ahead never overwrites a slot a peer may still be reading: it has to pass the next
 * barrier first, which peers reach only after finishing the previous sum. */
void ipc_allreduce_sum(struct ipc_allreduce *p, float *buf, size_t n) {
    const size_t chunk = p->cap / sizeof(float);
    for (size_t off = 0; off < n; off += chunk) {
        const size_t m = n - off < chunk ? n - off : chunk;
        const uint64_t e = ++p->epoch;
        const int s = (int)(e & 1);
        CUDA_CHECK(cudaMemcpyAsync(slot(p, p->rank, s), buf + off, m * sizeof(float),
                                   cudaMemcpyDeviceToDevice, p->stream));
        if (p->host_sync) {
            CUDA_CHECK(cudaStreamSynchronize(p->stream));
            MPI_CHECK(MPI_Barrier(p->group));
        } else {
            uint64_t *flags[IPC_MAX_RANKS] = {0};
            for (int r = 0; r < p->size; r++) flags[r] = (uint64_t *)p->peer[r];
            ipc_flag_barrier(p->stream, (uint64_t *)p->base, flags, p->size, e,
                             (uint64_t)(p->timeout_s * 1e9), p->timed_out_dev);
        }
        const float *src[IPC_MAX_RANKS] = {0};
        for (int r = 0; r < p->size; r++) src[r] = slot(p, r, s);
        ipc_sum(p->stream, buf + off, src, p->size, m);
    }
}

void ipc_allreduce_close(struct ipc_allreduce *p) {
    if (!p) return;
    if (p->mon) monitor_remove_probe(p->mon, p);
    release(p);
    free(p);
}

#endif
