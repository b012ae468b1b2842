/* One-shot all-reduce over CUDA IPC buffers for ranks on one node (small messages, ranks
 * sharing a GPU): copy in, barrier, sum in rank order so every rank gets identical bits. Used by
 * the GPU communicator on the rank's compute thread. CUDA builds (comm/ modules) only. */
#ifndef TPD_IPC_ALLREDUCE_H
#define TPD_IPC_ALLREDUCE_H

#include <stddef.h>

#include "../kernels/cuda/comm_kernels.h" /* IPC_MAX_RANKS */
#include "comm.h"
#include "monitor.h"

struct ipc_allreduce;

/* Collective over the stage's TP group; every rank of it on one node, at most IPC_MAX_RANKS of
 * them. Maps every rank's region (two slots of slot_bytes, rounded up to 256) on device; work is
 * queued on stream (a cudaStream_t). host_sync: meet at an MPI barrier rather than in a spinning
 * kernel. A peer missing the device barrier for timeout_s seconds ends the job (a probe added to
 * mon). NULL with err on every rank when any rank failed; then nothing is left mapped. */
struct ipc_allreduce *ipc_allreduce_open(struct comm *c, int device, void *stream, int host_sync,
                                         size_t slot_bytes, double timeout_s, struct monitor *mon,
                                         char *err);
/* Collective: sum of buf (device memory, n floats) over all ranks, in place, on the stream. */
void ipc_allreduce_sum(struct ipc_allreduce *p, float *buf, size_t n);
/* Unmaps and frees (NULL: nothing to do). No peer may still read this rank's region. */
void ipc_allreduce_close(struct ipc_allreduce *p);

#endif
