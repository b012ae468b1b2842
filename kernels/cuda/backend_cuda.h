/* The CUDA backend: the op table of kernels/backend.h on one GPU, all work queued on one
 * stream per rank (cuBLAS for large 16-bit products, own kernels elsewhere). One per rank,
 * used by that rank's compute thread; the communicator (comm/gpu_comm.c) shares its stream. */
#ifndef TPD_BACKEND_CUDA_H
#define TPD_BACKEND_CUDA_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA driver and at least one device are usable, else 0 (never prints, never
 * fails: a machine without a GPU or driver simply answers 0). */
int backend_cuda_available(void);
/* The device backend_cuda_init(local_rank) would open: its index, the device count and its
 * free / total memory (cudaMemGetInfo; creates the device's primary context, which the
 * backend then reuses). 0, or -1 with err. */
int backend_cuda_memory(int local_rank, int *device, int *n_devices, size_t *free_bytes,
                        size_t *total_bytes, char *err);
/* Opens device local_rank % devices: stream, cuBLAS handle, op table, with the [debug]
 * switches of dbg (not NULL). 0, or -1 with err. */
int backend_cuda_init(struct backend *b, int local_rank, const struct backend_debug *dbg,
                      char *err);

/* For the communicator and benchmarks: the backend's stream (a cudaStream_t) and device.
 * NULL / -1 when b is not a CUDA backend. */
void *backend_cuda_stream(const struct backend *b);
int backend_cuda_device(const struct backend *b);

#ifdef __cplusplus
}
#endif

#endif
