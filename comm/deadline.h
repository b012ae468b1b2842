/* The step deadline, on every backend: a thread per rank that ends the whole job when a
 * forward step does not finish within its time (the sign of a hung, stopped or dead peer:
 * the other ranks wait for it inside a collective), or when the process was asked to stop
 * and has not finished within a grace period (a stop that arrives during such a hang).
 * The rank's compute thread marks steps; the thread only watches. */
#ifndef TPD_DEADLINE_H
#define TPD_DEADLINE_H

#include <stdatomic.h>

struct deadline;

/* Starts watching (NULL: step_timeout_s <= 0 and no stop flag: nothing to watch).
 * stop_flag: when it becomes non-zero, the job must be gone within stop_grace_s. */
struct deadline *deadline_start(int rank, int size, double step_timeout_s, const atomic_int *stop_flag,
                                double stop_grace_s);
void deadline_free(struct deadline *d);
/* Around each step (cheap: two clock reads and a store each). */
void deadline_step_begin(struct deadline *d);
void deadline_step_end(struct deadline *d);

#endif
