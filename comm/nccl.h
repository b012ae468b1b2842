/* NCCL for the GPU communicator: a communicator over the stage's TP group (the all-reduce) or
 * over every rank (send/recv between pipeline stages), joined and watched by comm/monitor. Used by
 * the rank's compute thread. CUDA builds (comm/ modules) only; a build without NCCL fails nccl_open
 * with the reason. */
#ifndef TPD_NCCL_H
#define TPD_NCCL_H

#include <stddef.h>

#include "comm.h"
#include "monitor.h"

struct nccl;

/* Collective over the world (world = 1: one communicator of every rank, by world rank) or
 * over each stage's TP group (world = 0: one per group, by TP rank): the group's rank 0
 * makes the id, MPI broadcasts it, every rank joins (ncclCommInitRank),
 * which must finish within start_timeout_s seconds or the monitor ends the job. Adds a probe
 * to mon for NCCL's asynchronous errors. device: this rank's GPU, for messages. NULL with err
 * on every rank when any rank failed. */
struct nccl *nccl_open(struct comm *c, int world, int device, struct monitor *mon,
                       double start_timeout_s, char *err);
/* Sum of buf (device memory, n floats) over all ranks, in place, queued on stream (a
 * cudaStream_t). */
void nccl_allreduce(struct nccl *n, float *buf, size_t count, void *stream);
/* Point to point with rank peer of the communicator, queued on stream (a pair: one sends,
 * the other receives the same count). */
void nccl_send(struct nccl *n, const float *buf, size_t count, int peer, void *stream);
void nccl_recv(struct nccl *n, float *buf, size_t count, int peer, void *stream);
/* Removes the probe and destroys the communicator (NULL: nothing to do). */
void nccl_close(struct nccl *n);

#endif
