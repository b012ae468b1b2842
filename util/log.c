#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int log_min_level = LOG_INFO;
static int log_rank;
static int log_all_ranks;

void log_init(int rank, enum log_level level, int all_ranks) {
    log_rank = rank;
    log_min_level = level;
    log_all_ranks = all_ranks;
}

int log_parse_level(const char *s, enum log_level *out) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        for (int j = 0;; j++) {
            char a = s[j], b = names[i][j];
            if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
            if (a != b) break;
            if (a == 0) {
                *out = (enum log_level)i;
                return 0;
            }
        }
    return -1;
}

void log_write(enum log_level level, const char *file, int line, const char *fmt, ...) {
    static const char *tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    /* Chatty levels only from rank 0: N ranks repeating the same line helps no one. */
    if (level < LOG_WARN && log_rank != 0 && !log_all_ranks) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    /* never cut: a message longer than the stack buffer (the effective configuration is
     * several KB) is formatted again into one of its own size */
    char buf[1024], *msg = buf;
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf) {
        char *big = malloc((size_t)n + 1);
        if (big && vsnprintf(big, (size_t)n + 1, fmt, ap2) >= 0) msg = big;
        else free(big);
    }
    va_end(ap2);
    const char *base = file;
    for (const char *p = file; *p; p++)
        if (*p == '/') base = p + 1;
    fprintf(stderr, "%02d:%02d:%02d.%03ld [r%d] %-5s %s (%s:%d)\n", tm.tm_hour, tm.tm_min,
            tm.tm_sec, ts.tv_nsec / 1000000, log_rank, tags[level], msg, base, line);
    if (msg != buf) free(msg);
}
