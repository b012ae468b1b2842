/* The CPU backend: the op table of kernels/backend.h on host memory, threaded over a
 * thread pool. One per rank; used by that rank's compute thread. */
#ifndef TPD_BACKEND_CPU_H
#define TPD_BACKEND_CPU_H

#include "../backend.h"

/* n_threads < 1 picks the number of online CPUs. */
void backend_cpu_init(struct backend *b, int n_threads);
void backend_cpu_free(struct backend *b);

#endif
