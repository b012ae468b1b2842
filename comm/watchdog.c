#include "watchdog.h"

#if TPD_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../util/check_cuda.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"

enum { WATCHDOG_PROBES = 4 };

struct probe {
    int (*check)(void *arg, char *msg, size_t cap);
    void (*abort)(void *arg);
    void *arg;
};

struct watchdog {
    int rank, size, device;
    const char *desc;
    double timeout_s;
    pthread_t thread;
    pthread_mutex_t mu; /* guards everything below */
    int stop;
    const char *phase; /* a blocking step under watch (message when it overruns), or NULL */
    char phase_buf[1024];
    double phase_deadline;
    cudaEvent_t ev; /* recorded after each all-reduce */
    int pending;
    double pending_since;
    struct probe probes[WATCHDOG_PROBES];
};

/* Ends the job from the watchdog thread, holding the lock: the probes' aborts run first so that
 * no rank stays inside a collective, then the fatal hook takes the whole MPI job down. */
static void fire(struct watchdog *w, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void fire(struct watchdog *w, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (int i = 0; i < WATCHDOG_PROBES; i++)
        if (w->probes[i].abort) w->probes[i].abort(w->probes[i].arg);
    fatal_exit(__FILE__, __LINE__, "rank %d: %s", w->rank, msg);
}

static void *watchdog_main(void *arg) {
    struct watchdog *w = arg;
    if (cudaSetDevice(w->device) != cudaSuccess) return NULL;
    for (;;) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&w->mu);
        if (w->stop) {
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        double t = clock_now();
        if (w->phase && t > w->phase_deadline) fire(w, "%s", w->phase);
        if (w->pending) {
            cudaError_t q = cudaEventQuery(w->ev);
            if (q == cudaSuccess)
                w->pending = 0;
            else if (q != cudaErrorNotReady)
                fire(w, "CUDA error while an all-reduce (%s) was in flight: %s (%s)", w->desc, cudaGetErrorString(q),
                     cudaGetErrorName(q));
            else if (t - w->pending_since > w->timeout_s)
                fire(w, "an all-reduce over %d ranks (%s) has not finished after %.0f s (parallel.comm_timeout_s); a peer may "
                     "have died or hung; " HANG_HINTS, w->size, w->desc, w->timeout_s);
        }
        for (int i = 0; i < WATCHDOG_PROBES; i++) {
            char msg[1024];
            if (w->probes[i].check && w->probes[i].check(w->probes[i].arg, msg, sizeof msg)) fire(w, "%s", msg);
        }
        pthread_mutex_unlock(&w->mu);
    }
}

struct watchdog *watchdog_start(int rank, int size, int device, const char *desc, double timeout_s, char *err) {
    struct watchdog *w = xcalloc(1, sizeof *w);
    w->rank = rank;
    w->size = size;
    w->device = device;
    w->desc = desc;
    w->timeout_s = timeout_s;
    cudaError_t e = cudaEventCreateWithFlags(&w->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        err_set(err, "device %d: %s (%s)", device, cudaGetErrorString(e), cudaGetErrorName(e));
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0) {
        err_set(err, "cannot start the communicator watchdog thread");
        pthread_mutex_destroy(&w->mu);
        cudaEventDestroy(w->ev);
        free(w);
        return NULL;
    }
    return w;
}

void watchdog_stop(struct watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    cudaEventDestroy(w->ev);
    cudaGetLastError();
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void watchdog_arm(struct watchdog *w, double timeout_s, const char *fmt, ...) {
    pthread_mutex_lock(&w->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->phase_buf, sizeof w->phase_buf, fmt, ap);
    va_end(ap);
    w->phase = w->phase_buf;
    w->phase_deadline = clock_now() + timeout_s;
    pthread_mutex_unlock(&w->mu);
}

void watchdog_disarm(struct watchdog *w) {
    pthread_mutex_lock(&w->mu);
    w->phase = NULL;
    pthread_mutex_unlock(&w->mu);
}

void watchdog_note(struct watchdog *w, void *stream) {
    CUDA_CHECK(cudaEventRecord(w->ev, (cudaStream_t)stream));
    pthread_mutex_lock(&w->mu);
    w->pending = 1;
    w->pending_since = clock_now();
    pthread_mutex_unlock(&w->mu);
}

void watchdog_add_probe(struct watchdog *w, int (*check)(void *arg, char *msg, size_t cap), void (*abort)(void *arg),
                        void *arg) {
    pthread_mutex_lock(&w->mu);
    int i = 0;
    while (i < WATCHDOG_PROBES && w->probes[i].arg) i++;
    if (i == WATCHDOG_PROBES) FATAL("more than %d watchdog probes", WATCHDOG_PROBES);
    w->probes[i] = (struct probe){check, abort, arg};
    pthread_mutex_unlock(&w->mu);
}

void watchdog_remove_probe(struct watchdog *w, void *arg) {
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < WATCHDOG_PROBES; i++)
        if (w->probes[i].arg == arg) w->probes[i] = (struct probe){0};
    pthread_mutex_unlock(&w->mu);
}

#endif
