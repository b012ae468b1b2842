/* The GPU communicator's fallback all-reduce: device memory through a pinned host buffer and
 * MPI (comm_allreduce_host), wherever MPI works. Used by the rank's compute thread. CUDA builds
 * (comm/ modules) only. */
#ifndef TPD_MPI_STAGING_H
#define TPD_MPI_STAGING_H

#include <stddef.h>

#include "comm.h"

/* Zero-initialized is empty; the buffer grows on demand. */
struct mpi_staging {
    float *host; /* pinned */
    size_t cap;  /* floats */
};

/* Collective: sum of buf (device memory, n floats) over all ranks, in place. Waits for the
 * work queued on stream (a cudaStream_t) before it; the copy back is queued on stream. */
void mpi_staging_allreduce(struct mpi_staging *s, struct comm *c, float *buf, size_t n,
                           void *stream);
void mpi_staging_free(struct mpi_staging *s);

#endif
