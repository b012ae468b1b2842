/* The rank's monitor: one thread per rank that ends the whole job when something it watches
 * runs past its time, one configuration key per timeout. Every backend: a forward step
 * (parallel.step_timeout_s: a hung, stopped or dead peer keeps the others inside a collective)
 * and a stop that does not finish within its grace (server.drain_timeout_s + 10 s on rank 0).
 * CUDA builds, once the GPU communicator watches its device: each all-reduce
 * (parallel.comm_timeout_s), each armed start-up step (parallel.comm_start_timeout_s) and the
 * communicators' probes. The rank's compute thread feeds it; the thread only watches. */
#ifndef TPD_MONITOR_H
#define TPD_MONITOR_H

#include <stdatomic.h>
#include <stddef.h>

/* What a job whose collectives hang should look at first. */
#define HANG_HINTS \
    "likely causes: GPU peer-to-peer transfers failing or blocked (check `nvidia-smi topo -m`; " \
    "try " \
    "NCCL_P2P_DISABLE=1 or parallel.comm = \"mpi\"), an IOMMU or PCIe ACS setting that breaks " \
    "P2P (check `dmesg | grep " \
    "-i -e iommu -e dmar`; boot with iommu=pt or disable ACS), or the NCCL environment " \
    "(NCCL_SOCKET_IFNAME, " \
    "NCCL_IB_DISABLE=1; rerun with NCCL_DEBUG=INFO)"

struct monitor;

struct monitor_steps {
    double step_timeout_s;       /* a step not done by then ends the job; 0: no limit */
    const atomic_int *stop_flag; /* when it becomes non-zero, the job must be gone within... */
    double stop_grace_s;         /* ...this many seconds; stop_flag NULL: no stop to watch */
};

/* A monitor for this rank (rank of size), watching nothing yet. Its thread starts with the
 * first thing to watch (a step limit, a stop flag or a device); fatal when it cannot. */
struct monitor *monitor_start(int rank, int size);
/* Stops the thread and frees m (NULL: nothing to do); the device must be unwatched first. */
void monitor_free(struct monitor *m);
/* Watches steps and the stop flag from now on as o says (NULL: no more). */
void monitor_watch_steps(struct monitor *m, const struct monitor_steps *o);
/* Around each step (cheap: two clock reads and a store each); m NULL: nothing. */
void monitor_step_begin(struct monitor *m);
void monitor_step_end(struct monitor *m);

/* The GPU communicator's part (CUDA builds; the functions exist only there). */
/* Watches the collectives queued on device: each must finish within timeout_s seconds. desc
 * names the path in messages; the caller keeps it alive and sets it before the first
 * monitor_note. Returns 0, or -1 with err. */
int monitor_watch_device(struct monitor *m, int device, const char *desc, double timeout_s,
                         char *err);
/* Stops watching the device (probes withdrawn first by their owners); not watched: nothing. */
void monitor_unwatch_device(struct monitor *m);
/* Puts a blocking step under watch: past timeout_s seconds the job ends with the message. */
void monitor_arm(struct monitor *m, double timeout_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void monitor_disarm(struct monitor *m);
/* After an all-reduce is queued on stream (a cudaStream_t): it must finish within the timeout. */
void monitor_note(struct monitor *m, void *stream);
/* A check the thread runs every tick while holding its lock, so probes come and go safely
 * while it runs. check returns 1 with msg (cap bytes, without the "rank N: " prefix) when the
 * job must end; before it ends, every probe's abort (when not NULL) runs, so that no peer is
 * left inside a collective. The key is arg: one probe per arg. */
void monitor_add_probe(struct monitor *m, int (*check)(void *arg, char *msg, size_t cap),
                       void (*abort)(void *arg), void *arg);
void monitor_remove_probe(struct monitor *m, void *arg);

#endif
