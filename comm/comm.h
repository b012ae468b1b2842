/* Communicators between the ranks of one tpd job: MPI bootstrap, the collectives the
 * forward pass needs (all-reduce after row-parallel matmuls, gather of vocab shards,
 * broadcast of the step plan) and startup agreement so no rank is left hanging.
 * Every rank's compute thread owns its comm; calls are collective and in the same order
 * on every rank. The CPU backend uses MPI; GPU backends (NCCL, IPC) plug in behind this. */
#ifndef TPD_COMM_H
#define TPD_COMM_H

#include <stddef.h>

struct comm {
    int rank;
    int size;
    /* This node: the ranks that share memory with this one (MPI_COMM_TYPE_SHARED). */
    int local_rank; /* rank among those on this node: picks the GPU */
    int local_size; /* ranks on this node; == size when the whole job runs on one node */
    int node;       /* lowest world rank on this node: equal exactly on ranks of one node */
    /* The all-reduce of the forward pass works on backend memory: MPI on host buffers by
     * default; a GPU backend installs its own (NCCL, IPC) with comm_set_allreduce. */
    void (*allreduce)(void *impl, float *buf, size_t n);
    void *allreduce_impl;
};

/* MPI_Init and a fatal hook that aborts the whole job. Fatal on failure. */
void comm_init(struct comm *c, int *argc, char ***argv);
/* Collective: ends MPI. */
void comm_finalize(struct comm *c);
/* Ends every rank of the job now (for fatal errors on one rank). */
void comm_abort(int code) __attribute__((noreturn));

/* Sum of buf (backend memory) over all ranks, in place. */
void comm_allreduce_sum(struct comm *c, float *buf, size_t n);
/* Sum of buf (host memory) over all ranks through MPI, in place, whatever comm_set_allreduce
 * installed: the default all-reduce, and the GPU path's host staging. */
void comm_allreduce_host(struct comm *c, float *buf, size_t n);
/* Routes comm_allreduce_sum to fn (NULL: back to MPI on host memory). */
void comm_set_allreduce(struct comm *c, void (*fn)(void *impl, float *buf, size_t n), void *impl);
void comm_bcast(struct comm *c, void *buf, size_t bytes, int root);
/* comm_bcast for a receiver that may wait long (a follower between steps): it does not
 * keep a core busy while nothing arrives, and adds at most ~1 ms after a long idle.
 * Every rank, the root included, must use it for that broadcast (MPI matches a
 * non-blocking collective only with non-blocking ones). */
void comm_bcast_wait(struct comm *c, void *buf, size_t bytes, int root);
/* Rank 0 receives, for each rank r, counts[r] floats into out + displs[r]. */
void comm_gatherv(struct comm *c, const float *send, int count, float *out, const int *counts,
                  const int *displs);
/* Collective: 1 if ok is non-zero on every rank. Lets ranks fail together at startup. */
int comm_all_ok(struct comm *c, int ok);
/* Collective: comm_all_ok, and where another rank failed and this one did not, err says
 * "another rank failed to set up <what>" so every rank can tell why. */
int comm_agree(struct comm *c, int ok, char *err, const char *what);
void comm_barrier(struct comm *c);

#endif
