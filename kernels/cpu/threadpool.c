#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "../../util/fatal.h"

/* Workers spin briefly on a generation counter before sleeping on a condvar: a decode
 * step issues hundreds of small tasks, and a futex wake per task would dominate. */
struct threadpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;
    atomic_int pending;
    atomic_int stop;
    threadpool_fn fn;
    void *ctx;
};

struct worker_arg {
    struct threadpool *tp;
    int ith;
};

static void *worker_main(void *p) {
    struct worker_arg *wa = p;
    struct threadpool *tp = wa->tp;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen) {
            if (++spins < 20000) {
#if defined(__x86_64__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while ((g = atomic_load(&tp->generation)) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
            break;
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        tp->fn(tp->ctx, ith, tp->n);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_acq_rel);
    }
}

struct threadpool *threadpool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    struct threadpool *tp = xcalloc(1, sizeof *tp);
    tp->n = n_threads;
    tp->threads = xcalloc((unsigned long)n_threads, sizeof(pthread_t));
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = xmalloc(sizeof *wa);
        wa->tp = tp;
        wa->ith = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0)
            FATAL("pthread_create failed for worker %d", i);
    }
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
    atomic_store(&tp->pending, tp->n - 1);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    fn(ctx, 0, tp->n);
    while (atomic_load_explicit(&tp->pending, memory_order_acquire) > 0) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
}
