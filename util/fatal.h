/* Fatal errors: print where and why, then end the whole job. comm/ installs a hook that
 * calls MPI_Abort so that one failing rank never leaves the others hanging. */
#ifndef TPD_FATAL_H
#define TPD_FATAL_H

void fatal_set_hook(void (*hook)(int code));
void fatal_exit(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* Ends the process through the hook (the whole job, under MPI), else exit(code): for a
 * caller that printed its own message (the step deadline). */
void fatal_abort(int code) __attribute__((noreturn));

#define FATAL(...) fatal_exit(__FILE__, __LINE__, __VA_ARGS__)

/* For calls that return 0 on success: prints the statement on failure. */
#define CHECK(call) \
    do { \
        if ((call) != 0) fatal_exit(__FILE__, __LINE__, "check failed: %s", #call); \
    } while (0)

/* Allocation that cannot return NULL: out of memory ends the job. Sizes that come from
 * input must be checked against a limit (with err_set) before they get here. */
void *xmalloc(unsigned long n);
void *xcalloc(unsigned long n, unsigned long size);
void *xrealloc(void *p, unsigned long n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, unsigned long n);

#endif
