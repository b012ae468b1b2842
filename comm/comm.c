#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "../util/fatal.h"

/* Every MPI call is checked; MPI's own error string goes into the message. */
#define CHECK_MPI(call)                                                          \
    do {                                                                         \
        int rc_ = (call);                                                        \
        if (rc_ != MPI_SUCCESS) {                                                \
            char s_[MPI_MAX_ERROR_STRING];                                       \
            int n_ = 0;                                                          \
            MPI_Error_string(rc_, s_, &n_);                                      \
            fatal_exit(__FILE__, __LINE__, "%s failed: %s", #call, s_);          \
        }                                                                        \
    } while (0)

void comm_abort(int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code ? code : 1);
}

void comm_init(struct comm *c, int *argc, char ***argv) {
    int provided = 0;
    /* Rank 0 will run HTTP threads beside the step loop; only the main thread calls MPI. */
    CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    fatal_set_hook(comm_abort);
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    c->allreduce = NULL;
    c->allreduce_impl = NULL;
    MPI_Comm node;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    CHECK_MPI(MPI_Comm_rank(node, &c->local_rank));
    CHECK_MPI(MPI_Comm_free(&node));
}

void comm_finalize(struct comm *c) {
    (void)c;
    CHECK_MPI(MPI_Finalize());
}

void comm_set_allreduce(struct comm *c, void (*fn)(void *impl, float *buf, size_t n), void *impl) {
    c->allreduce = fn;
    c->allreduce_impl = impl;
}

void comm_allreduce_sum(struct comm *c, float *buf, size_t n) {
    if (c->size == 1) return;
    if (c->allreduce) {
        c->allreduce(c->allreduce_impl, buf, n);
        return;
    }
    while (n > 0) { /* MPI counts are int */
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        buf += chunk;
        n -= (size_t)chunk;
    }
}

void comm_bcast(struct comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return;
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        CHECK_MPI(MPI_Bcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
        p += chunk;
        bytes -= (size_t)chunk;
    }
}

void comm_gatherv(struct comm *c, const float *send, int count, float *out, const int *counts,
                  const int *displs) {
    if (c->size == 1) {
        for (int i = 0; i < count; i++) out[displs[0] + i] = send[i];
        return;
    }
    CHECK_MPI(MPI_Gatherv(send, count, MPI_FLOAT, out, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
}

int comm_all_ok(struct comm *c, int ok) {
    if (c->size == 1) return ok != 0;
    int in = ok != 0, all = 0;
    CHECK_MPI(MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all;
}

void comm_barrier(struct comm *c) {
    if (c->size > 1) CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
}
