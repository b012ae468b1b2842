/* GPU all-reduce for the CUDA backend, installed into struct comm and run on the backend's
 * stream: picks NCCL, CUDA IPC or MPI host staging (comm/nccl, ipc_allreduce, mpi_staging) and
 * runs them under comm/watchdog. Owned by the rank's compute thread; callable in every build. */
#ifndef TPD_GPU_COMM_H
#define TPD_GPU_COMM_H

#include "../kernels/backend.h"
#include "comm.h"

/* Collective: every rank calls it after backend_open, with its backend. Nothing happens when
 * every rank uses the CPU backend or the job has one rank; ranks that disagree (some CUDA,
 * some CPU) fail together. mode: "auto", "nccl", "ipc" or "mpi"; NULL or "" reads TPD_COMM
 * from the environment, else "auto" (NCCL, with IPC for messages up to TPD_IPC_SMALL bytes
 * when all ranks share a node; IPC alone when ranks share a GPU).
 * Then a timed all-reduce checks the path on every rank; if it does not finish within
 * TPD_COMM_START_TIMEOUT seconds (60) the job ends with the likely causes (P2P, IOMMU,
 * NCCL environment). Later collectives get TPD_COMM_TIMEOUT seconds (300).
 * Returns 0, or -1 with err on every rank. */
int gpu_comm_init(struct comm *c, struct backend *be, const char *mode, char *err);
/* Collective: stops the watchdog, frees the communicators, restores the MPI all-reduce.
 * Call before backend_close. */
void gpu_comm_free(struct comm *c);
/* The path in use, for logs: "nccl", "nccl+ipc", "ipc", "ipc (host sync)",
 * "mpi (host staging)" or "none". */
const char *gpu_comm_describe(const struct comm *c);

#endif
