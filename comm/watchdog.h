/* The GPU communicator's watchdog thread: ends the job with a message when a blocking step or
 * an all-reduce overruns its time, fails on the device, or a probe reports trouble. Fed by the
 * rank's compute thread; the watchdog only observes. CUDA builds (comm/ modules) only. */
#ifndef TPD_WATCHDOG_H
#define TPD_WATCHDOG_H

#include <stddef.h>

/* What a job whose collectives hang should look at first. */
#define HANG_HINTS                                                                                          \
    "likely causes: GPU peer-to-peer transfers failing or blocked (check `nvidia-smi topo -m`; try "         \
    "NCCL_P2P_DISABLE=1 or parallel.comm = \"mpi\"), an IOMMU or PCIe ACS setting that breaks P2P (check `dmesg | grep " \
    "-i -e iommu -e dmar`; boot with iommu=pt or disable ACS), or the NCCL environment (NCCL_SOCKET_IFNAME, " \
    "NCCL_IB_DISABLE=1; rerun with NCCL_DEBUG=INFO)"

struct watchdog;

/* Starts watching the collectives of this rank (rank of size) on device: each must finish
 * within timeout_s seconds (parallel.comm_timeout_s). desc names the path in messages; the caller
 * keeps it alive and sets it before the first watchdog_note. NULL with err on failure. */
struct watchdog *watchdog_start(int rank, int size, int device, const char *desc, double timeout_s, char *err);
/* Stops the thread and frees w (NULL: nothing to do). */
void watchdog_stop(struct watchdog *w);

/* Puts a blocking step under watch: past timeout_s seconds the job ends with the message. */
void watchdog_arm(struct watchdog *w, double timeout_s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void watchdog_disarm(struct watchdog *w);
/* After an all-reduce is queued on stream (a cudaStream_t): it must finish within the timeout. */
void watchdog_note(struct watchdog *w, void *stream);

/* A check the thread runs every tick while holding its lock, so probes come and go safely
 * while it runs. check returns 1 with msg (cap bytes, without the "rank N: " prefix) when the
 * job must end; before it ends, every probe's abort (when not NULL) runs, so that no peer is
 * left inside a collective. The key is arg: one probe per arg. */
void watchdog_add_probe(struct watchdog *w, int (*check)(void *arg, char *msg, size_t cap), void (*abort)(void *arg),
                        void *arg);
void watchdog_remove_probe(struct watchdog *w, void *arg);

#endif
