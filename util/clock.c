#include "clock.h"

double clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct timespec clock_deadline(double seconds) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    if (seconds < 0) seconds = 0;
    time_t whole = (time_t)seconds;
    long ns = dl.tv_nsec + (long)((seconds - (double)whole) * 1e9);
    dl.tv_sec += whole + ns / 1000000000L;
    dl.tv_nsec = ns % 1000000000L;
    return dl;
}

void clock_cond_init(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}
