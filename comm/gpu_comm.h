/* GPU all-reduce for the CUDA backend, installed into struct comm (comm_set_allreduce) and
 * run on the backend's stream: NCCL (comm/nccl.c), a one-shot all-reduce over CUDA IPC
 * buffers for small messages and for ranks sharing one GPU, which NCCL refuses
 * (comm/ipc_allreduce.c), or MPI through pinned host buffers (comm/mpi_staging.c), all under a
 * watchdog that ends the job with a message when a collective fails or hangs
 * (comm/watchdog.c). Owned by the rank's compute thread. Callable in every build. */
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
