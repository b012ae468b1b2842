/* Communicators between the ranks of one tpd job: MPI bootstrap, the process groups
 * (pp pipeline stages x tp tensor-parallel ranks, stage-major: world rank = stage * tp +
 * tp_rank), the collectives the forward pass needs inside a stage's TP group (all-reduce
 * after row-parallel matmuls, gather of vocab shards, broadcast of the step plan), the
 * point-to-point messages between stages (activations, plans, logits) and startup
 * agreement so no rank is left hanging. Every rank's compute thread owns its comm;
 * collective calls are made in the same order on every rank of their group. The CPU
 * backend uses MPI; GPU backends (NCCL, IPC) plug in behind this. */
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
    /* Process groups (comm_groups_init; until then one stage of every rank). */
    int tp, pp;     /* ranks per stage, stages; tp * pp == size */
    int tp_rank;    /* rank inside this stage's TP group (rank % tp) */
    int stage;      /* pipeline stage (rank / tp) */
    void *tp_group; /* the stage's MPI communicator (an MPI_Comm, see comm_tp_mpi) */
    /* The all-reduce of the forward pass works on backend memory: MPI on host buffers by
     * default; a GPU backend installs its own (NCCL, IPC) with comm_set_allreduce. */
    void (*allreduce)(void *impl, float *buf, size_t n);
    void *allreduce_impl;
    /* Activations between stages (backend memory): MPI on host buffers by default; a GPU
     * backend installs its own (NCCL send/recv, or host staging) with comm_set_p2p. */
    void (*p2p)(void *impl, float *buf, size_t n, int peer, int send);
    void *p2p_impl;
    void *sends;    /* comm_send_detached's sends in flight */
    float *scratch; /* comm_allreduce_host's at tp > 2 (the compute thread's) */
    size_t scratch_n;
};

/* The communicator's options (the [parallel] comm keys and debug.ipc_sync,
 * docs/configuration.md). A zero number takes its default below (callers without a
 * configuration: tests, benchmarks). */
#define COMM_TIMEOUT_S 300            /* a GPU collective not done by then ends the job */
#define COMM_START_TIMEOUT_S 60       /* the startup checks, on every path */
#define COMM_IPC_SMALL_BYTES 524288   /* with NCCL, messages up to this size go over IPC */
#define COMM_IPC_BUFFER_BYTES 8388608 /* each of a rank's two IPC slots */
struct comm_opts {
    const char *mode; /* GPU all-reduce: "auto", "nccl", "ipc", "mpi"; NULL or "": auto */
    double timeout_s, start_timeout_s;
    long ipc_small_bytes, ipc_buffer_bytes;
    const char
        *ipc_sync; /* IPC barrier: "host", "device", else auto (host when ranks share a GPU) */
};

/* Message tags between stages: each kind keeps its order (MPI does not overtake within
 * one source and tag). */
enum {
    COMM_TAG_PLAN_HDR = 11,
    COMM_TAG_PLAN = 12,
    COMM_TAG_ACT = 13,
    COMM_TAG_LOGITS = 14,
    COMM_TAG_LOAD = 15 /* loading progress to rank 0 */
};

/* MPI_Init and a fatal hook that aborts the whole job. Fatal on failure. */
void comm_init(struct comm *c, int *argc, char ***argv);
/* Collective: ends MPI. */
void comm_finalize(struct comm *c);
/* Ends every rank of the job now (for fatal errors on one rank). */
void comm_abort(int code) __attribute__((noreturn));

/* Collective over the world: arranges the ranks as pp stages of tp ranks (stage-major) and
 * splits each stage's TP group off (MPI_Comm_split). tp <= 0: size / pp. Fails (-1, err,
 * the same verdict on every rank) unless tp * pp is the number of ranks started. */
int comm_groups_init(struct comm *c, int tp, int pp, char *err);
/* Collective, after comm_groups_init (CPU path; GPU communicators run their own on device
 * memory): a timed all-reduce of known values in every TP group, then a timed send/recv of
 * known values between each pair of neighbouring stages. Each must finish within
 * start_timeout_s seconds (0: COMM_START_TIMEOUT_S), else the job ends with a message naming
 * the group's ranks or the pair (a peer hung or unreachable); wrong values: -1 with err
 * naming them. */
int comm_startup_check(struct comm *c, double start_timeout_s, char *err);
/* Where the ranks run, as MPI_COMM_TYPE_SHARED groups them into nodes (comm_init): what
 * the daemon logs at startup, and a TP group on several nodes (every all-reduce of the
 * forward pass over the network) it warns about. Filled on rank 0 only. */
struct comm_placement {
    int n_nodes;      /* distinct nodes */
    int split_groups; /* TP groups whose ranks sit on more than one node */
    char nodes[1024]; /* "node0: ranks 0-1; node1: ranks 2-3" (truncated with "...") */
    char split[512];  /* "stage 0's TP group (ranks 0-3) spans 2 nodes; ..." */
};
/* Collective over the world, after comm_groups_init: every rank's node and host name
 * (MPI_Get_processor_name) gathered to rank 0. */
void comm_placement(const struct comm *c, struct comm_placement *p);
/* World rank of this rank's counterpart (same tp_rank) in stage s. */
static inline int comm_stage_peer(const struct comm *c, int s) { return s * c->tp + c->tp_rank; }

/* Sum of buf (backend memory) over this stage's TP group, in place. */
void comm_allreduce_sum(struct comm *c, float *buf, size_t n);
/* Sum of buf (host memory) over the TP group through MPI, in place, whatever comm_set_allreduce
 * installed: the default all-reduce, and the GPU path's host staging. */
void comm_allreduce_host(struct comm *c, float *buf, size_t n);
/* Routes comm_allreduce_sum to fn (NULL: back to MPI on host memory). */
void comm_set_allreduce(struct comm *c, void (*fn)(void *impl, float *buf, size_t n), void *impl);
/* Broadcast over the whole job (world ranks). */
void comm_bcast(struct comm *c, void *buf, size_t bytes, int root);
/* comm_bcast for a receiver that may wait long (a follower between steps): it does not
 * keep a core busy while nothing arrives, and adds at most ~1 ms after a long idle.
 * Every rank, the root included, must use it for that broadcast (MPI matches a
 * non-blocking collective only with non-blocking ones). */
void comm_bcast_wait(struct comm *c, void *buf, size_t bytes, int root);
/* comm_bcast and comm_bcast_wait inside this stage's TP group, from its TP rank 0. */
void comm_tp_bcast(struct comm *c, void *buf, size_t bytes);
void comm_tp_bcast_wait(struct comm *c, void *buf, size_t bytes);
void comm_tp_barrier(struct comm *c);
/* Point to point (host memory, world ranks). comm_recv_wait is comm_recv for a receiver
 * that may wait long (a later stage between steps), polling like comm_bcast_wait. */
void comm_send(struct comm *c, const void *buf, size_t bytes, int peer, int tag);
void comm_recv(struct comm *c, void *buf, size_t bytes, int peer, int tag);
void comm_recv_wait(struct comm *c, void *buf, size_t bytes, int peer, int tag);
/* A message of `bytes` bytes with this tag from any rank if one has arrived (1, its sender in
 * *peer), else 0 at once: nothing waits for a rank that never sends. */
int comm_recv_any(struct comm *c, void *buf, size_t bytes, int tag, int *peer);
/* comm_send that returns at once: the bytes are copied and sent while the caller goes on,
 * so a stage never waits for its receiver to be ready (MPI_Send of more than the eager
 * limit, ~4 KiB, waits until the receive is posted: a stage would wait for the next one to
 * finish its step, and micro-batches would not overlap). Order per (peer, tag) is kept.
 * Sends still in flight are completed by comm_finalize, or by a later call when more than
 * a few are. */
void comm_send_detached(struct comm *c, const void *buf, size_t bytes, int peer, int tag);
/* A receive of n floats (host memory) from world rank peer left in flight: the handle for
 * comm_wait, which completes and frees it. The buffer is the caller's until then. */
void *comm_irecv_floats(struct comm *c, float *buf, size_t n, int peer, int tag);
/* A send of n floats (host memory) to world rank peer left in flight, without a copy: the
 * buffer stays untouched until comm_wait on the handle (for a send too large to copy each
 * step, such as the logits). */
void *comm_isend_floats(struct comm *c, const float *buf, size_t n, int peer, int tag);
void comm_wait(struct comm *c, void *req);
/* Activations (backend memory, n floats) to or from world rank peer, whatever comm_set_p2p
 * installed (default: MPI on host memory). */
void comm_send_act(struct comm *c, float *buf, size_t n, int peer);
void comm_recv_act(struct comm *c, float *buf, size_t n, int peer);
void comm_set_p2p(struct comm *c, void (*fn)(void *impl, float *buf, size_t n, int peer, int send),
                  void *impl);
/* TP rank 0 of the stage receives, for each TP rank r, counts[r] floats into out + displs[r]. */
void comm_gatherv(struct comm *c, const float *send, int count, float *out, const int *counts,
                  const int *displs);
/* Collective over the world: world rank 0 receives each rank r's `bytes` bytes at out + r *
 * bytes (out: size x bytes there; ignored elsewhere). */
void comm_gather_world(struct comm *c, const void *send, size_t bytes, void *out);
/* Collective over the world: 1 if ok is non-zero on every rank. Lets ranks fail together at
 * startup. */
int comm_all_ok(struct comm *c, int ok);
/* Collective: the smallest v of all ranks. */
int comm_min_int(struct comm *c, int v);
/* Collective: comm_all_ok, and where another rank failed and this one did not, err says
 * "another rank failed to set up <what>" so every rank can tell why. */
int comm_agree(struct comm *c, int ok, char *err, const char *what);
void comm_barrier(struct comm *c);

#endif
