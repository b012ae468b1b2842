/* A fork-join thread pool: threadpool_run() runs one task on every thread (the caller is
 * thread 0) and returns when all are done. Used by the CPU backend's kernels (one pool per
 * rank, owned by its compute thread) and by rank 0's scheduler (parallel sampling). Each
 * pool has one owner thread; not re-entrant. */
#ifndef TPD_THREADPOOL_H
#define TPD_THREADPOOL_H

struct threadpool;

typedef void (*threadpool_fn)(void *ctx, int ith, int nth);

struct threadpool *threadpool_create(int n_threads);
void threadpool_free(struct threadpool *tp);
int threadpool_size(const struct threadpool *tp);
/* tp may be NULL: fn runs on the caller alone with nth = 1. */
void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx);

#endif
