/* Idle trimming of the heaps (memtrim.h). */
#include "memtrim.h"

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "clock.h"
#include "log.h"

static atomic_ulong finished; /* requests finished (memtrim_note) */
static unsigned long seen;    /* finished as the step loop last saw it */
static unsigned long trimmed; /* finished at the last trim */
static double seen_at;        /* when seen was last changed */

void memtrim_init(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, MEMTRIM_MMAP_BYTES);
    mallopt(M_TRIM_THRESHOLD, MEMTRIM_TOP_BYTES);
#endif
}

void memtrim_note(void) { atomic_fetch_add_explicit(&finished, 1, memory_order_relaxed); }

#ifdef __GLIBC__
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f) return 0;
    int n = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    return n == 2 ? (size_t)res * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

#endif

/* The bytes of resident memory malloc_trim gave back, as /proc/self/statm sees them (0
 * where unknown, or on a C library without it). */
static size_t trim_now(void) {
#ifdef __GLIBC__
    size_t before = resident_bytes();
    malloc_trim(0); /* every arena: free pages inside the heaps too, not only at the top */
    size_t after = resident_bytes();
    return before > after ? before - after : 0;
#else
    return 0;
#endif
}

/* Only the step loop calls this, so seen, trimmed and seen_at need no lock. */
int memtrim_idle(double now) {
    unsigned long f = atomic_load_explicit(&finished, memory_order_relaxed);
    if (f != seen) {
        seen = f;
        seen_at = now;
        return 0;
    }
    if (f == trimmed || now - seen_at < MEMTRIM_QUIET_S) return 0;
    trimmed = f;
    size_t freed = trim_now();
    LOG(LOG_DEBUG, "idle: gave %.1f MiB of free heap back in %.1f ms", (double)freed / (1 << 20),
        (clock_now() - now) * 1e3);
    return 1;
}
