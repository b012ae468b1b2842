/* Time for timeouts and metrics: the monotonic clock in seconds, absolute deadlines for
 * pthread_cond_timedwait, and condition variables that wait on that clock (so a change of
 * the wall clock never stretches or cuts a timeout). Any thread. */
#ifndef TPD_CLOCK_H
#define TPD_CLOCK_H

#include <pthread.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
double clock_now(void);
/* The CLOCK_MONOTONIC time `seconds` from now, for pthread_cond_timedwait on a condvar made
 * by clock_cond_init. */
struct timespec clock_deadline(double seconds);
/* Initializes *cv to wait on CLOCK_MONOTONIC. */
void clock_cond_init(pthread_cond_t *cv);

#endif
