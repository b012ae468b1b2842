/* The MPI handles behind struct comm, for the comm/ modules that call MPI themselves
 * (the GPU communicator, NCCL, IPC): the stage's TP group. Owned like struct comm. */
#ifndef TPD_COMM_MPI_H
#define TPD_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

/* This stage's TP group (MPI_COMM_WORLD before comm_groups_init, or with one stage). */
MPI_Comm comm_tp_mpi(const struct comm *c);

#endif
