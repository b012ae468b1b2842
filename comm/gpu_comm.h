/* GPU all-reduce for the CUDA backend, installed into struct comm and run on the backend's
 * stream: picks NCCL, CUDA IPC or MPI host staging (comm/nccl, ipc_allreduce, mpi_staging) and
 * runs them under the rank's monitor (comm/monitor). Owned by the rank's compute thread; callable
 * in every build. */
#ifndef TPD_GPU_COMM_H
#define TPD_GPU_COMM_H

#include "../kernels/backend.h"
#include "comm.h"
#include "monitor.h"

/* Collective: every rank calls it after backend_open, with its backend. Nothing happens when
 * every rank uses the CPU backend or the job has one rank; ranks that disagree (some CUDA,
 * some CPU) fail together. o->mode: "auto", "nccl", "ipc" or "mpi"; NULL or "": "auto" (NCCL,
 * with IPC for messages up to o->ipc_small_bytes when all ranks share a node; IPC alone when
 * ranks share a GPU). o NULL: every option its default (comm.h).
 * Then a timed all-reduce checks the path on every rank; if it does not finish within
 * o->start_timeout_s the job ends with the likely causes (P2P, IOMMU, NCCL environment).
 * Later collectives get o->timeout_s; mon (monitor_start) watches them all. Returns 0, or -1
 * with err on every rank. */
int gpu_comm_init(struct comm *c, struct backend *be, const struct comm_opts *o,
                  struct monitor *mon, char *err);
/* Collective: stops watching the device, frees the communicators, restores the MPI all-reduce.
 * Call before backend_close. */
void gpu_comm_free(struct comm *c);
/* The path in use, for logs: "nccl", "nccl+ipc", "ipc", "ipc (host sync)",
 * "mpi (host staging)" or "none". */
const char *gpu_comm_describe(const struct comm *c);

#endif
