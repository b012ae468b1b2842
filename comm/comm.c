#include "comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../util/check_mpi.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"

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
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &c->local_size));
    MPI_CHECK(MPI_Allreduce(&c->rank, &c->node, 1, MPI_INT, MPI_MIN, node));
    MPI_CHECK(MPI_Comm_free(&node));
}

void comm_finalize(struct comm *c) {
    (void)c;
    MPI_CHECK(MPI_Finalize());
}

void comm_set_allreduce(struct comm *c, void (*fn)(void *impl, float *buf, size_t n), void *impl) {
    c->allreduce = fn;
    c->allreduce_impl = impl;
}

void comm_allreduce_sum(struct comm *c, float *buf, size_t n) {
    if (c->size == 1) return;
    if (c->allreduce)
        c->allreduce(c->allreduce_impl, buf, n);
    else
        comm_allreduce_host(c, buf, n);
}

void comm_allreduce_host(struct comm *c, float *buf, size_t n) {
    if (c->size == 1) return;
    while (n > 0) { /* MPI counts are int */
        int chunk = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        buf += chunk;
        n -= (size_t)chunk;
    }
}

void comm_bcast(struct comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return;
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_CHECK(MPI_Bcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
        p += chunk;
        bytes -= (size_t)chunk;
    }
}

/* A follower waits here between steps, possibly for hours. MPI_Bcast would busy-poll a
 * core all that time, so the broadcast is started non-blocking and polled: spinning for
 * the first SPIN_S (a busy daemon's next plan arrives within it, at no added latency),
 * then sleeping between polls, from 20 us doubling up to 1 ms (an idle rank wakes ~1000
 * times a second for a microsecond; the first step after idling waits at most 1 ms). */
#define WAIT_SPIN_S 0.002
#define WAIT_SLEEP_MAX_NS 1000000L
void comm_bcast_wait(struct comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return;
    if (bytes > (size_t)INT_MAX) {
        comm_bcast(c, buf, bytes, root);
        return;
    }
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req));
    int done = 0;
    double spin_until = clock_now() + WAIT_SPIN_S;
    long sleep_ns = 20000;
    for (;;) {
        MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (clock_now() < spin_until) continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < WAIT_SLEEP_MAX_NS) sleep_ns = sleep_ns * 2 < WAIT_SLEEP_MAX_NS ? sleep_ns * 2 : WAIT_SLEEP_MAX_NS;
    }
}

void comm_gatherv(struct comm *c, const float *send, int count, float *out, const int *counts,
                  const int *displs) {
    if (c->size == 1) {
        for (int i = 0; i < count; i++) out[displs[0] + i] = send[i];
        return;
    }
    MPI_CHECK(MPI_Gatherv(send, count, MPI_FLOAT, out, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD));
}

int comm_all_ok(struct comm *c, int ok) {
    if (c->size == 1) return ok != 0;
    int in = ok != 0, all = 0;
    MPI_CHECK(MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return all;
}

int comm_agree(struct comm *c, int ok, char *err, const char *what) {
    if (comm_all_ok(c, ok)) return 1;
    if (ok) err_set(err, "another rank failed to set up %s", what);
    return 0;
}

void comm_barrier(struct comm *c) {
    if (c->size > 1) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}
