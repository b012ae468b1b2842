/* Device pieces of the one-shot CUDA-IPC all-reduce (comm/ipc_allreduce.c drives them): a flag
 * barrier between ranks done on the GPU, and the sum of the ranks' buffers in rank order (so
 * every rank gets bit-identical results). Launched on the caller's stream; C-callable. */
#ifndef TPD_CUDA_COMM_KERNELS_H
#define TPD_CUDA_COMM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { IPC_MAX_RANKS = 8 };

/* Stores epoch into *mine (visible to the peers, after everything queued before it on the
 * stream), then waits until flags[r] >= epoch for every r < n. Past timeout_ns it stops
 * waiting and sets *timed_out (host-mapped memory) to 1. */
void ipc_flag_barrier(void *stream, uint64_t *mine, uint64_t *const flags[IPC_MAX_RANKS], int n,
                      uint64_t epoch, uint64_t timeout_ns, int *timed_out);
/* out[i] = (((src[0][i] + src[1][i]) + src[2][i]) + ...) for i < count. */
void ipc_sum(void *stream, float *out, const float *const src[IPC_MAX_RANKS], int n, size_t count);

#ifdef __cplusplus
}
#endif

#endif
