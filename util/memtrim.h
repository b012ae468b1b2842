/* Giving the C library's free heap memory back to the system once the daemon goes quiet.
 * glibc keeps what a thread freed in that thread's arena (one per HTTP thread here), and
 * returns only the free space at a heap's top, so a burst of large request bodies leaves
 * every arena at its peak for good. Rank 0: any thread notes a finished request; the step
 * loop, while it has nothing to run, trims once the requests have stopped for a moment. */
#ifndef TPD_MEMTRIM_H
#define TPD_MEMTRIM_H

#include <stddef.h>

/* Seconds without a finished request before the idle step loop trims. */
#define MEMTRIM_QUIET_S 0.5

/* Fixes glibc's thresholds (before the threads start). Left to itself glibc raises the trim
 * threshold after the first large free (up to 64 MiB), and malloc_trim never touches a
 * thread arena's top, so each HTTP thread's arena would keep its peak at its top. Fixed: a
 * thread arena's free top past MEMTRIM_TOP_BYTES goes back when a large block is freed into
 * it. Fixing one fixes both, so the mmap threshold is set too: at glibc's own ceiling, as
 * a lower one would map and fault in the step loop's per-step buffers (a few hundred KiB to
 * some MiB) anew at every step. */
#define MEMTRIM_MMAP_BYTES (32 << 20)
#define MEMTRIM_TOP_BYTES (1 << 20)
void memtrim_init(void);
/* A request finished and freed what it held (any thread). */
void memtrim_note(void);
/* Called by the step loop whenever it is idle (now: clock_now()): gives every arena's free
 * pages back (malloc_trim) when requests finished since the last trim and none has for
 * MEMTRIM_QUIET_S. 1 when it trimmed. */
int memtrim_idle(double now);

#endif
