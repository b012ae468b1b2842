#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "fatal.h"

/* A run is split into nth chunks (chunk i is fn(ctx, i, nth)) that any thread may claim
 * from a counter, the caller included. A worker the OS has not scheduled therefore never
 * holds the caller up: its chunks are done by whoever comes first, and a late worker
 * finds nothing left. Workers spin briefly before sleeping: a decode step issues
 * hundreds of small runs, and a futex wake per run would dominate. */
struct threadpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation; /* bumped to publish a run */
    atomic_int sleepers;
    atomic_int stop;
    /* the current run */
    threadpool_fn fn;
    void *ctx;
    atomic_int open;   /* workers may join the run */
    atomic_int active; /* workers inside the run */
    atomic_int next;   /* next chunk to claim */
    atomic_int done;   /* chunks finished */
};

static void run_chunks(struct threadpool *tp) {
    int i;
    while ((i = atomic_fetch_add(&tp->next, 1)) < tp->n) {
        tp->fn(tp->ctx, i, tp->n);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
    }
}

static void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    struct threadpool *tp = p;
    unsigned seen = atomic_load(&tp->generation);
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop)) {
            if (++spins < 20000) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            atomic_fetch_add(&tp->sleepers, 1);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            atomic_fetch_sub(&tp->sleepers, 1);
            pthread_mutex_unlock(&tp->mu);
            spins = 0;
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        /* join only while the run is open; the caller closes it and waits for `active`
         * to drain before it reuses the fields for the next run */
        atomic_fetch_add(&tp->active, 1);
        if (atomic_load(&tp->open) && atomic_load(&tp->generation) == g) run_chunks(tp);
        atomic_fetch_sub(&tp->active, 1);
    }
}

struct threadpool *threadpool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = xcalloc(1, sizeof *tp);
    tp->n = n_threads;
    tp->threads = xcalloc((unsigned long)n_threads, sizeof(pthread_t));
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    for (int i = 1; i < n_threads; i++)
        if (pthread_create(&tp->threads[i], NULL, worker_main, tp) != 0)
            FATAL("pthread_create failed for worker %d", i);
    return tp;
}

void threadpool_free(struct threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    atomic_fetch_add(&tp->generation, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const struct threadpool *tp) { return tp ? tp->n : 1; }

void threadpool_run(struct threadpool *tp, threadpool_fn fn, void *ctx) {
    if (!tp || tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store(&tp->next, 0);
    atomic_store(&tp->done, 0);
    atomic_store(&tp->open, 1);
    atomic_fetch_add(&tp->generation, 1);
    if (atomic_load(&tp->sleepers) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    run_chunks(tp);
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n) cpu_relax();
    atomic_store(&tp->open, 0);
    while (atomic_load(&tp->active) > 0) cpu_relax();
}
