#include "deadline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../util/clock.h"
#include "../util/fatal.h"

struct deadline {
    int rank, size;
    double step_timeout_s, stop_grace_s;
    const atomic_int *stop_flag;
    _Atomic double step_began; /* 0 between steps */
    _Atomic long steps;
    atomic_int quit;
    pthread_t thread;
};

#define TICK_NS 100000000L /* 0.1 s: deadlines are seconds to minutes */

static void *deadline_main(void *arg) {
    struct deadline *d = arg;
    double stop_seen = 0;
    while (!atomic_load(&d->quit)) {
        struct timespec ts = {0, TICK_NS};
        nanosleep(&ts, NULL);
        double now = clock_now(), began = atomic_load(&d->step_began);
        if (d->step_timeout_s > 0 && began > 0 && now - began > d->step_timeout_s) {
            fprintf(stderr,
                    "tpd: rank %d: step %ld did not finish within parallel.step_timeout_s = %g s: another of the %d "
                    "ranks did not arrive (stopped, hung, or much slower); ending the job\n",
                    d->rank, atomic_load(&d->steps), d->step_timeout_s, d->size);
            fatal_abort(3);
        }
        if (d->stop_flag && atomic_load(d->stop_flag) && stop_seen == 0) stop_seen = now;
        if (stop_seen > 0 && now - stop_seen > d->stop_grace_s) {
            fprintf(stderr, "tpd: rank %d: asked to stop %.0f s ago and still running (a step is stuck): ending the job\n",
                    d->rank, now - stop_seen);
            fatal_abort(3);
        }
    }
    return NULL;
}

struct deadline *deadline_start(int rank, int size, double step_timeout_s, const atomic_int *stop_flag,
                                double stop_grace_s) {
    if (step_timeout_s <= 0 && !stop_flag) return NULL;
    struct deadline *d = xcalloc(1, sizeof *d);
    d->rank = rank;
    d->size = size;
    d->step_timeout_s = step_timeout_s;
    d->stop_flag = stop_flag;
    d->stop_grace_s = stop_grace_s;
    if (pthread_create(&d->thread, NULL, deadline_main, d)) FATAL("cannot start the step-deadline thread");
    return d;
}

void deadline_free(struct deadline *d) {
    if (!d) return;
    atomic_store(&d->quit, 1);
    pthread_join(d->thread, NULL);
    free(d);
}

void deadline_step_begin(struct deadline *d) {
    if (!d) return;
    atomic_fetch_add(&d->steps, 1);
    atomic_store(&d->step_began, clock_now());
}

void deadline_step_end(struct deadline *d) {
    if (d) atomic_store(&d->step_began, 0.0);
}
