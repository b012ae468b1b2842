/* Op-level profiler for a backend (debug.profile_ops): every op of the table is timed with
 * the device synchronized before and after it, and at exit a table of calls, total and mean
 * time per op (matmul and attention split by tokens per step) goes to stderr. Synchronizing
 * each op removes all overlap, so totals are an upper bound of each op's share, meant for
 * finding which op dominates a step, not for end-to-end figures. One profiled backend per
 * process (each MPI rank is its own process). */
#ifndef TPD_PROFILE_H
#define TPD_PROFILE_H

#include "backend.h"

/* Replaces b's ops by timed wrappers around them; b->ctx is unchanged. */
void backend_profile_wrap(struct backend *b);

#endif
