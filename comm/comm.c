#include "comm.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../util/check_mpi.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "comm_mpi.h"

void comm_abort(int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    exit(code ? code : 1);
}

void comm_init(struct comm *c, int *argc, char ***argv) {
    int provided = 0;
    /* Rank 0 will run HTTP threads beside the step loop; only the main thread calls MPI. */
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    fatal_set_hook(comm_abort);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    c->allreduce = NULL;
    c->allreduce_impl = NULL;
    c->p2p = NULL;
    c->p2p_impl = NULL;
    c->scratch = NULL;
    c->scratch_n = 0;
    c->tp = c->size;
    c->pp = 1;
    c->tp_rank = c->rank;
    c->stage = 0;
    c->tp_group = NULL;
    c->sends = NULL;
    MPI_Comm node;
    MPI_CHECK(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &c->local_size));
    MPI_CHECK(MPI_Allreduce(&c->rank, &c->node, 1, MPI_INT, MPI_MIN, node));
    MPI_CHECK(MPI_Comm_free(&node));
}

static void sends_finish(struct comm *c);

void comm_finalize(struct comm *c) {
    sends_finish(c);
    free(c->scratch);
    c->scratch = NULL;
    c->scratch_n = 0;
    if (c->tp_group) {
        MPI_CHECK(MPI_Comm_free((MPI_Comm *)c->tp_group));
        free(c->tp_group);
        c->tp_group = NULL;
    }
    MPI_CHECK(MPI_Finalize());
}

MPI_Comm comm_tp_mpi(const struct comm *c) {
    return c->tp_group ? *(const MPI_Comm *)c->tp_group : MPI_COMM_WORLD;
}

int comm_groups_init(struct comm *c, int tp, int pp, char *err) {
    if (pp < 1) return err_set(err, "parallel.pp = %d: expected at least 1", pp);
    if (tp <= 0) {
        if (c->size % pp)
            return err_set(
                err,
                "parallel.pp = %d does not divide the %d ranks mpirun started (ranks = tp x pp)",
                pp, c->size);
        tp = c->size / pp;
    }
    if ((long)tp * pp != c->size)
        return err_set(err,
                       "parallel.tp = %d x parallel.pp = %d = %ld ranks, but mpirun started %d", tp,
                       pp, (long)tp * pp, c->size);
    if (c->tp_group) { /* already split: only the same arrangement again */
        if (tp != c->tp || pp != c->pp)
            return err_set(err, "process groups already arranged as tp %d x pp %d", c->tp, c->pp);
        return 0;
    }
    c->tp = tp;
    c->pp = pp;
    c->stage = c->rank / tp;
    c->tp_rank = c->rank % tp;
    if (pp == 1) return 0; /* the TP group is the world */
    MPI_Comm *g = xmalloc(sizeof *g);
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c->stage, c->tp_rank, g));
    MPI_CHECK(MPI_Comm_set_errhandler(*g, MPI_ERRORS_RETURN));
    c->tp_group = g;
    return 0;
}

void comm_set_allreduce(struct comm *c, void (*fn)(void *impl, float *buf, size_t n), void *impl) {
    c->allreduce = fn;
    c->allreduce_impl = impl;
}

void comm_allreduce_sum(struct comm *c, float *buf, size_t n) {
    if (c->tp == 1) return;
    if (c->allreduce) c->allreduce(c->allreduce_impl, buf, n);
    else comm_allreduce_host(c, buf, n);
}

/* The sum in a fixed order for three ranks or more: element i is x_0[i] + x_1[i] + ... in
 * rank order, whatever n. MPI_Allreduce picks its algorithm by message size, and with three
 * ranks some of them sum an element in an order that depends on where it falls in the
 * message; a token's activations would then differ in their last bits with the number of
 * tokens sharing its step (`tpd eval` of 1,005 tokens at tp 3 gave other logits batched than
 * one sequence at a time), and a near-tie could flip a greedy token. (Two operands sum the
 * same in either order, so tp 2 keeps MPI_Allreduce.) Each rank sums one slice: every rank's
 * part of it arrives (alltoallv), is added in rank order, and the slices are gathered. */
static float *scratch(struct comm *c, size_t n) {
    if (n > c->scratch_n) {
        free(c->scratch);
        c->scratch = xmalloc(n * sizeof(float));
        c->scratch_n = n;
    }
    return c->scratch;
}

/* Up to this many floats from all ranks together, every rank gathers every rank's whole
 * buffer and sums it itself (one collective: a decode step's messages are a few KB, where
 * latency counts), in the same rank order as the sliced path, so an element's sum is the
 * same whichever path its message took. */
#define ORDERED_GATHER_MAX (64 * 1024)

static void allreduce_ordered(struct comm *c, MPI_Comm g, float *buf, int n) {
    const int tp = c->tp, me = c->tp_rank;
    if ((size_t)n * (size_t)tp <= ORDERED_GATHER_MAX) {
        float *all = scratch(c, (size_t)n * (size_t)tp);
        MPI_CHECK(MPI_Allgather(buf, n, MPI_FLOAT, all, n, MPI_FLOAT, g));
        for (int i = 0; i < n; i++) {
            float x = all[i];
            for (int r = 1; r < tp; r++) x += all[(size_t)r * n + i];
            buf[i] = x;
        }
        return;
    }
    int counts[tp], displs[tp], mine[tp], at[tp];
    for (int r = 0; r < tp; r++) {
        displs[r] = (int)((int64_t)n * r / tp);
        counts[r] = (int)((int64_t)n * (r + 1) / tp) - displs[r];
    }
    const int len = counts[me];
    for (int r = 0; r < tp; r++) {
        mine[r] = len;
        at[r] = r * len;
    }
    float *parts = scratch(c, (size_t)tp * (size_t)(len > 0 ? len : 1));
    MPI_CHECK(MPI_Alltoallv(buf, counts, displs, MPI_FLOAT, parts, mine, at, MPI_FLOAT, g));
    float *out = buf + displs[me];
    for (int i = 0; i < len; i++) {
        float x = parts[i];
        for (int r = 1; r < tp; r++) x += parts[(size_t)r * len + i];
        out[i] = x;
    }
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, counts, displs, MPI_FLOAT, g));
}

void comm_allreduce_host(struct comm *c, float *buf, size_t n) {
    if (c->tp == 1) return;
    MPI_Comm g = comm_tp_mpi(c);
    if (c->tp > 2) {
        while (n > 0) {
            int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
            allreduce_ordered(c, g, buf, chunk);
            buf += chunk;
            n -= (size_t)chunk;
        }
        return;
    }
    while (n > 0) { /* MPI counts are int */
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, g));
        buf += chunk;
        n -= (size_t)chunk;
    }
}

static void bcast_on(MPI_Comm g, void *buf, size_t bytes, int root) {
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_CHECK(MPI_Bcast(p, chunk, MPI_BYTE, root, g));
        p += chunk;
        bytes -= (size_t)chunk;
    }
}

void comm_bcast(struct comm *c, void *buf, size_t bytes, int root) {
    if (c->size > 1) bcast_on(MPI_COMM_WORLD, buf, bytes, root);
}

void comm_tp_bcast(struct comm *c, void *buf, size_t bytes) {
    if (c->tp > 1) bcast_on(comm_tp_mpi(c), buf, bytes, 0);
}

/* A follower waits here between steps, possibly for hours. MPI_Bcast (or MPI_Recv) would
 * busy-poll a core all that time, so the operation is started non-blocking and polled:
 * spinning for the first SPIN_S (a busy daemon's next plan arrives within it, at no added
 * latency), then sleeping between polls, from 20 us doubling up to 1 ms, and 2 ms once it has
 * waited IDLE_S (no step for that long: the daemon is idle; the first step after it waits at
 * most 2 ms, against a forward pass of several). An idle follower wakes ~500 times a second
 * (2-core VM, tp 2: 0.35 s of CPU in 20 s, 0.57 s when it napped 1 ms). */
#define WAIT_SPIN_S 0.002
#define WAIT_IDLE_S 0.1
#define WAIT_SLEEP_MAX_NS 1000000L
#define WAIT_IDLE_SLEEP_NS 2000000L
static void wait_polling(MPI_Request *req) {
    int done = 0;
    double spin_until = clock_now() + WAIT_SPIN_S, idle_at = spin_until + WAIT_IDLE_S;
    long sleep_ns = 20000;
    for (;;) {
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        double now = clock_now();
        if (now < spin_until) continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < WAIT_SLEEP_MAX_NS)
            sleep_ns = sleep_ns * 2 < WAIT_SLEEP_MAX_NS ? sleep_ns * 2 : WAIT_SLEEP_MAX_NS;
        else if (now > idle_at) sleep_ns = WAIT_IDLE_SLEEP_NS;
    }
}

static void bcast_wait_on(MPI_Comm g, void *buf, size_t bytes, int root) {
    if (bytes > (size_t)INT_MAX) {
        bcast_on(g, buf, bytes, root);
        return;
    }
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, g, &req));
    wait_polling(&req);
}

void comm_bcast_wait(struct comm *c, void *buf, size_t bytes, int root) {
    if (c->size > 1) bcast_wait_on(MPI_COMM_WORLD, buf, bytes, root);
}

void comm_tp_bcast_wait(struct comm *c, void *buf, size_t bytes) {
    if (c->tp > 1) bcast_wait_on(comm_tp_mpi(c), buf, bytes, 0);
}

void comm_tp_barrier(struct comm *c) {
    if (c->tp > 1) MPI_CHECK(MPI_Barrier(comm_tp_mpi(c)));
}

/* Point to point, in chunks of at most INT_MAX bytes (each chunk one message, same tag). */
void comm_send(struct comm *c, const void *buf, size_t bytes, int peer, int tag) {
    (void)c;
    const char *p = buf;
    do {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_CHECK(MPI_Send(p, chunk, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
        p += chunk;
        bytes -= (size_t)chunk;
    } while (bytes > 0);
}

/* comm_send_detached's sends in flight, oldest first: each owns a copy of its bytes. */
#define SENDS_MAX \
    16 /* more in flight: the oldest are waited for (a receiver this far behind is stuck) */
struct detached {
    int n;
    MPI_Request req[SENDS_MAX];
    void *buf[SENDS_MAX];
};

/* Frees the leading sends that are complete; with wait, waits for the oldest first. */
static void sends_reap(struct detached *d, int wait) {
    int k = 0;
    for (; k < d->n; k++) {
        int done = 1;
        if (wait && k == 0) MPI_CHECK(MPI_Wait(&d->req[0], MPI_STATUS_IGNORE));
        else MPI_CHECK(MPI_Test(&d->req[k], &done, MPI_STATUS_IGNORE));
        if (!done) break;
        free(d->buf[k]);
    }
    memmove(d->req, d->req + k, sizeof *d->req * (size_t)(d->n - k));
    memmove(d->buf, d->buf + k, sizeof *d->buf * (size_t)(d->n - k));
    d->n -= k;
}

void comm_send_detached(struct comm *c, const void *buf, size_t bytes, int peer, int tag) {
    if (bytes > (size_t)INT_MAX) { /* past what one message carries: not the step's traffic */
        comm_send(c, buf, bytes, peer, tag);
        return;
    }
    struct detached *d = c->sends ? c->sends : (c->sends = xcalloc(1, sizeof *d));
    sends_reap(d, 0);
    if (d->n == SENDS_MAX) sends_reap(d, 1);
    void *copy = xmalloc(bytes ? bytes : 1);
    if (bytes) memcpy(copy, buf, bytes);
    d->buf[d->n] = copy;
    MPI_CHECK(MPI_Isend(copy, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &d->req[d->n]));
    d->n++;
}

static void sends_finish(struct comm *c) {
    struct detached *d = c->sends;
    if (!d) return;
    while (d->n) sends_reap(d, 1);
    free(d);
    c->sends = NULL;
}

void comm_recv(struct comm *c, void *buf, size_t bytes, int peer, int tag) {
    (void)c;
    char *p = buf;
    do {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_CHECK(MPI_Recv(p, chunk, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        p += chunk;
        bytes -= (size_t)chunk;
    } while (bytes > 0);
}

void comm_recv_wait(struct comm *c, void *buf, size_t bytes, int peer, int tag) {
    if (bytes > (size_t)INT_MAX) {
        comm_recv(c, buf, bytes, peer, tag);
        return;
    }
    MPI_Request req;
    MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req));
    wait_polling(&req);
}

int comm_recv_any(struct comm *c, void *buf, size_t bytes, int tag, int *peer) {
    (void)c;
    int flag;
    MPI_Status st;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &st));
    if (!flag) return 0;
    /* the probed message, here already: a receive of more than it holds fails, so a
     * message of another size ends the job through the check */
    MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD, &st));
    int n;
    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
    if ((size_t)n != bytes)
        FATAL("a message of %d bytes with tag %d from rank %d: %zu expected", n, tag, st.MPI_SOURCE,
              bytes);
    *peer = st.MPI_SOURCE;
    return 1;
}

void *comm_irecv_floats(struct comm *c, float *buf, size_t n, int peer, int tag) {
    (void)c;
    if (n > (size_t)INT_MAX) FATAL("a receive of %zu floats is more than MPI counts", n);
    MPI_Request *req = xmalloc(sizeof *req);
    MPI_CHECK(MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, req));
    return req;
}

void *comm_isend_floats(struct comm *c, const float *buf, size_t n, int peer, int tag) {
    (void)c;
    if (n > (size_t)INT_MAX) FATAL("a send of %zu floats is more than MPI counts", n);
    MPI_Request *req = xmalloc(sizeof *req);
    MPI_CHECK(MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, MPI_COMM_WORLD, req));
    return req;
}

void comm_wait(struct comm *c, void *req) {
    (void)c;
    MPI_CHECK(MPI_Wait((MPI_Request *)req, MPI_STATUS_IGNORE));
    free(req);
}

/* Polls req until done or timeout_s passed (then the job ends with what). */
static void wait_timed(MPI_Request *req, double timeout_s, int rank, const char *what) {
    double until = clock_now() + timeout_s;
    int done = 0;
    while (!done) {
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) break;
        if (clock_now() > until)
            FATAL("rank %d: %s did not finish within %.0f s (parallel.comm_start_timeout_s): a "
                  "rank is hung, "
                  "stopped or unreachable",
                  rank, what, timeout_s);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

int comm_startup_check(struct comm *c, double start_timeout_s, char *err) {
    const double timeout_s = start_timeout_s > 0 ? start_timeout_s : COMM_START_TIMEOUT_S;
    int ok = 1;
    char what[160];
    enum { N = 1024 };
    float buf[N];
    const int first = c->stage * c->tp;
    if (c->tp > 1) {
        for (int i = 0; i < N; i++) buf[i] = (float)(c->tp_rank + 1) * (float)(i % 7 + 1);
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, N, MPI_FLOAT, MPI_SUM, comm_tp_mpi(c), &req));
        snprintf(what, sizeof what,
                 "the startup all-reduce over stage %d's TP group (world ranks %d-%d)", c->stage,
                 first, first + c->tp - 1);
        wait_timed(&req, timeout_s, c->rank, what);
        const double S = (double)c->tp * (c->tp + 1) / 2;
        for (int i = 0; i < N && ok; i++)
            if (buf[i] != (float)(S * (i % 7 + 1)))
                ok = !err_set(err, "%s returned %g at element %d, expected %g", what, buf[i], i,
                              S * (i % 7 + 1));
    }
    /* to the next stage, from the previous one, and an answer back (so the sender learns the
     * receiver is there even when the message went out eagerly): each pair named by its ranks */
    float out[N];
    int32_t ack_in = 0, ack_out = 1;
    MPI_Request sreq = MPI_REQUEST_NULL, rreq = MPI_REQUEST_NULL, areq = MPI_REQUEST_NULL;
    int next = c->stage + 1 < c->pp ? comm_stage_peer(c, c->stage + 1) : -1;
    int prev = c->stage > 0 ? comm_stage_peer(c, c->stage - 1) : -1;
    if (next >= 0) {
        for (int i = 0; i < N; i++) out[i] = (float)(c->rank + 1) * (float)(i % 5 + 1);
        MPI_CHECK(MPI_Isend(out, N, MPI_FLOAT, next, COMM_TAG_ACT, MPI_COMM_WORLD, &sreq));
        MPI_CHECK(MPI_Irecv(&ack_in, 1, MPI_INT32_T, next, COMM_TAG_LOGITS, MPI_COMM_WORLD, &areq));
    }
    if (prev >= 0) {
        MPI_CHECK(MPI_Irecv(buf, N, MPI_FLOAT, prev, COMM_TAG_ACT, MPI_COMM_WORLD, &rreq));
        snprintf(what, sizeof what,
                 "the startup send/recv from rank %d (stage %d) to rank %d (stage %d)", prev,
                 c->stage - 1, c->rank, c->stage);
        wait_timed(&rreq, timeout_s, c->rank, what);
        for (int i = 0; i < N && ok; i++)
            if (buf[i] != (float)(prev + 1) * (float)(i % 5 + 1))
                ok = !err_set(err, "%s delivered %g at element %d, expected %g", what, buf[i], i,
                              (double)(prev + 1) * (i % 5 + 1));
        MPI_CHECK(MPI_Send(&ack_out, 1, MPI_INT32_T, prev, COMM_TAG_LOGITS, MPI_COMM_WORLD));
    }
    if (next >= 0) {
        snprintf(what, sizeof what,
                 "the startup send/recv from rank %d (stage %d) to rank %d (stage %d)", c->rank,
                 c->stage, next, c->stage + 1);
        wait_timed(&sreq, timeout_s, c->rank, what);
        wait_timed(&areq, timeout_s, c->rank, what);
    }
    return comm_agree(c, ok, err, "the startup check") ? 0 : -1;
}

/* printf onto the end of buf (cap bytes), which ends in "..." once it is full */
static void appendf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= cap - len && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

void comm_placement(const struct comm *c, struct comm_placement *p) {
    memset(p, 0, sizeof *p);
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    const int root = c->rank == 0, n = c->size;
    int *node = root ? xmalloc((size_t)n * sizeof *node) : NULL;
    char *names = root ? xcalloc((size_t)n, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_CHECK(MPI_Gather(&c->node, 1, MPI_INT, node, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME,
                         MPI_CHAR, 0, MPI_COMM_WORLD));
    if (!root) return;
    /* each node once (its lowest rank names it), its ranks as ranges */
    for (int r = 0; r < n; r++) {
        if (node[r] != r) continue;
        names[(size_t)r * MPI_MAX_PROCESSOR_NAME + MPI_MAX_PROCESSOR_NAME - 1] = 0;
        int count = 0;
        for (int q = r; q < n; q++) count += node[q] == r;
        appendf(p->nodes, sizeof p->nodes, "%s%s: rank%s ", p->n_nodes ? "; " : "",
                names + (size_t)r * MPI_MAX_PROCESSOR_NAME, count > 1 ? "s" : "");
        p->n_nodes++;
        int first = 1;
        for (int q = r; q < n; q++) {
            if (node[q] != r) continue;
            int end = q;
            while (end + 1 < n && node[end + 1] == r) end++;
            if (end > q) appendf(p->nodes, sizeof p->nodes, "%s%d-%d", first ? "" : ",", q, end);
            else appendf(p->nodes, sizeof p->nodes, "%s%d", first ? "" : ",", q);
            first = 0;
            q = end;
        }
    }
    for (int s = 0; s < c->pp; s++) {
        int spans = 0;
        for (int q = s * c->tp; q < (s + 1) * c->tp; q++) {
            int seen = 0;
            for (int o = s * c->tp; o < q && !seen; o++) seen = node[o] == node[q];
            spans += !seen;
        }
        if (spans < 2) continue;
        appendf(p->split, sizeof p->split, "%sstage %d's TP group (ranks %d-%d) spans %d nodes",
                p->split_groups ? "; " : "", s, s * c->tp, (s + 1) * c->tp - 1, spans);
        p->split_groups++;
    }
    free(node);
    free(names);
}

void comm_set_p2p(struct comm *c, void (*fn)(void *impl, float *buf, size_t n, int peer, int send),
                  void *impl) {
    c->p2p = fn;
    c->p2p_impl = impl;
}

void comm_send_act(struct comm *c, float *buf, size_t n, int peer) {
    if (c->p2p) c->p2p(c->p2p_impl, buf, n, peer, 1);
    else comm_send_detached(c, buf, n * sizeof(float), peer, COMM_TAG_ACT);
}

void comm_recv_act(struct comm *c, float *buf, size_t n, int peer) {
    if (c->p2p) c->p2p(c->p2p_impl, buf, n, peer, 0);
    else comm_recv(c, buf, n * sizeof(float), peer, COMM_TAG_ACT);
}

void comm_gatherv(struct comm *c, const float *send, int count, float *out, const int *counts,
                  const int *displs) {
    if (c->tp == 1) {
        for (int i = 0; i < count; i++) out[displs[0] + i] = send[i];
        return;
    }
    MPI_CHECK(
        MPI_Gatherv(send, count, MPI_FLOAT, out, counts, displs, MPI_FLOAT, 0, comm_tp_mpi(c)));
}

void comm_gather_world(struct comm *c, const void *send, size_t bytes, void *out) {
    if (c->size == 1) {
        memcpy(out, send, bytes);
        return;
    }
    if (bytes > INT32_MAX) FATAL("comm_gather_world: %zu bytes", bytes);
    MPI_CHECK(MPI_Gather(send, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
}

int comm_min_int(struct comm *c, int v) {
    if (c->size == 1) return v;
    int all = v;
    MPI_CHECK(MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all;
}

int comm_all_ok(struct comm *c, int ok) { return comm_min_int(c, ok != 0); }

int comm_agree(struct comm *c, int ok, char *err, const char *what) {
    if (comm_all_ok(c, ok)) return 1;
    if (ok) err_set(err, "another rank failed to set up %s", what);
    return 0;
}

void comm_barrier(struct comm *c) {
    if (c->size > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}
