/* The check every MPI call goes through: on failure the statement, file:line and MPI's own
 * error string, then the job ends (fatal_exit, which comm/ hooks to MPI_Abort). Needs the
 * communicators to return errors (MPI_ERRORS_RETURN, set by comm_init). */
#ifndef TPD_CHECK_MPI_H
#define TPD_CHECK_MPI_H

#include <mpi.h>

#include "fatal.h"

#define MPI_CHECK(call) \
    do { \
        int rc_ = (call); \
        if (rc_ != MPI_SUCCESS) { \
            char s_[MPI_MAX_ERROR_STRING]; \
            int n_ = 0; \
            MPI_Error_string(rc_, s_, &n_); \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s", #call, s_); \
        } \
    } while (0)

#endif
