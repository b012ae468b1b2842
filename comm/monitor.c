#include "monitor.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if TPD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../util/check_cuda.h"
#endif
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"

enum { MONITOR_PROBES = 4 };

struct probe {
    int (*check)(void *arg, char *msg, size_t cap);
    void (*abort)(void *arg);
    void *arg;
};

struct monitor {
    int rank, size;
    pthread_t thread;
    int started;
    pthread_mutex_t mu; /* guards everything below but the step marks */
    int quit;
    /* steps (every backend) */
    double step_timeout_s, stop_grace_s;
    const atomic_int *stop_flag;
    double stop_seen;
    _Atomic double step_began; /* 0 between steps */
    _Atomic long steps;
    /* the GPU communicator (CUDA builds): device -1 while not watched */
    int device, device_set;
    const char *desc;
    double comm_timeout_s;
    const char *phase; /* a blocking step under watch (message when it overruns), or NULL */
    char phase_buf[1024];
    double phase_deadline;
#if TPD_HAVE_CUDA
    cudaEvent_t ev; /* recorded after each all-reduce */
#endif
    int pending;
    double pending_since;
    struct probe probes[MONITOR_PROBES];
};

#define TICK_NS 50000000L /* 0.05 s: timeouts are seconds to minutes */

/* A step past its limit or a stop past its grace: the job ends through the fatal hook. */
static void check_steps(struct monitor *m, double now) {
    double began = atomic_load(&m->step_began);
    if (m->step_timeout_s > 0 && began > 0 && now - began > m->step_timeout_s) {
        fprintf(stderr,
                "tpd: rank %d: step %ld did not finish within parallel.step_timeout_s = %g s: "
                "another of the %d "
                "ranks did not arrive (stopped, hung, or much slower); ending the job\n",
                m->rank, atomic_load(&m->steps), m->step_timeout_s, m->size);
        fatal_abort(3);
    }
    if (m->stop_flag && atomic_load(m->stop_flag) && m->stop_seen == 0) m->stop_seen = now;
    if (m->stop_seen > 0 && now - m->stop_seen > m->stop_grace_s) {
        fprintf(stderr,
                "tpd: rank %d: asked to stop %.0f s ago and still running (a step is stuck): "
                "ending the job\n",
                m->rank, now - m->stop_seen);
        fatal_abort(3);
    }
}

#if TPD_HAVE_CUDA
/* Ends the job from the monitor thread, holding the lock: the probes' aborts run first so that
 * no rank stays inside a collective, then the fatal hook takes the whole MPI job down. */
static void fire(struct monitor *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void fire(struct monitor *m, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (int i = 0; i < MONITOR_PROBES; i++)
        if (m->probes[i].abort) m->probes[i].abort(m->probes[i].arg);
    fatal_exit(__FILE__, __LINE__, "rank %d: %s", m->rank, msg);
}

/* The armed step, the last all-reduce and the probes. */
static void check_device(struct monitor *m, double now) {
    if (m->device_set != m->device) {
        if (cudaSetDevice(m->device) != cudaSuccess) return; /* cannot look: as if not watched */
        m->device_set = m->device;
    }
    if (m->phase && now > m->phase_deadline) fire(m, "%s", m->phase);
    if (m->pending) {
        cudaError_t q = cudaEventQuery(m->ev);
        if (q == cudaSuccess) m->pending = 0;
        else if (q != cudaErrorNotReady)
            fire(m, "CUDA error while an all-reduce (%s) was in flight: %s (%s)", m->desc,
                 cudaGetErrorString(q), cudaGetErrorName(q));
        else if (now - m->pending_since > m->comm_timeout_s)
            fire(m,
                 "an all-reduce over %d ranks (%s) has not finished after %.0f s "
                 "(parallel.comm_timeout_s); a peer may "
                 "have died or hung; " HANG_HINTS,
                 m->size, m->desc, m->comm_timeout_s);
    }
    for (int i = 0; i < MONITOR_PROBES; i++) {
        char msg[1024];
        if (m->probes[i].check && m->probes[i].check(m->probes[i].arg, msg, sizeof msg))
            fire(m, "%s", msg);
    }
}
#endif

static void *monitor_main(void *arg) {
    struct monitor *m = arg;
    for (;;) {
        struct timespec ts = {0, TICK_NS};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&m->mu);
        if (m->quit) {
            pthread_mutex_unlock(&m->mu);
            return NULL;
        }
        double now = clock_now();
        check_steps(m, now);
#if TPD_HAVE_CUDA
        if (m->device >= 0) check_device(m, now);
#endif
        pthread_mutex_unlock(&m->mu);
    }
}

/* Called holding mu (or before anyone else sees m). */
static void start_thread(struct monitor *m) {
    if (m->started) return;
    if (pthread_create(&m->thread, NULL, monitor_main, m)) FATAL("cannot start the monitor thread");
    m->started = 1;
}

struct monitor *monitor_start(int rank, int size) {
    struct monitor *m = xcalloc(1, sizeof *m);
    m->rank = rank;
    m->size = size;
    m->device = m->device_set = -1;
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void monitor_free(struct monitor *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->quit = 1;
    pthread_mutex_unlock(&m->mu);
    if (m->started) pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void monitor_watch_steps(struct monitor *m, const struct monitor_steps *o) {
    pthread_mutex_lock(&m->mu);
    m->step_timeout_s = o ? o->step_timeout_s : 0;
    m->stop_flag = o ? o->stop_flag : NULL;
    m->stop_grace_s = o ? o->stop_grace_s : 0;
    m->stop_seen = 0;
    if (m->step_timeout_s > 0 || m->stop_flag) start_thread(m);
    pthread_mutex_unlock(&m->mu);
}

void monitor_step_begin(struct monitor *m) {
    if (!m) return;
    atomic_fetch_add(&m->steps, 1);
    atomic_store(&m->step_began, clock_now());
}

void monitor_step_end(struct monitor *m) {
    if (m) atomic_store(&m->step_began, 0.0);
}

#if TPD_HAVE_CUDA

int monitor_watch_device(struct monitor *m, int device, const char *desc, double timeout_s,
                         char *err) {
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "device %d: %s (%s)", device, cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    pthread_mutex_lock(&m->mu);
    m->ev = ev;
    m->desc = desc;
    m->comm_timeout_s = timeout_s;
    m->pending = 0;
    m->phase = NULL;
    m->device = device;
    start_thread(m);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

void monitor_unwatch_device(struct monitor *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (m->device >= 0) {
        cudaEventDestroy(m->ev);
        cudaGetLastError();
    }
    m->device = -1;
    m->pending = 0;
    m->phase = NULL;
    pthread_mutex_unlock(&m->mu);
}

void monitor_arm(struct monitor *m, double timeout_s, const char *fmt, ...) {
    pthread_mutex_lock(&m->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->phase_buf, sizeof m->phase_buf, fmt, ap);
    va_end(ap);
    m->phase = m->phase_buf;
    m->phase_deadline = clock_now() + timeout_s;
    pthread_mutex_unlock(&m->mu);
}

void monitor_disarm(struct monitor *m) {
    pthread_mutex_lock(&m->mu);
    m->phase = NULL;
    pthread_mutex_unlock(&m->mu);
}

void monitor_note(struct monitor *m, void *stream) {
    CUDA_CHECK(cudaEventRecord(m->ev, (cudaStream_t)stream));
    pthread_mutex_lock(&m->mu);
    m->pending = 1;
    m->pending_since = clock_now();
    pthread_mutex_unlock(&m->mu);
}

void monitor_add_probe(struct monitor *m, int (*check)(void *arg, char *msg, size_t cap),
                       void (*abort)(void *arg), void *arg) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < MONITOR_PROBES && m->probes[i].arg) i++;
    if (i == MONITOR_PROBES) FATAL("more than %d monitor probes", MONITOR_PROBES);
    m->probes[i] = (struct probe){check, abort, arg};
    pthread_mutex_unlock(&m->mu);
}

void monitor_remove_probe(struct monitor *m, void *arg) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < MONITOR_PROBES; i++)
        if (m->probes[i].arg == arg) m->probes[i] = (struct probe){0};
    pthread_mutex_unlock(&m->mu);
}

#endif
