#include "access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../sched/request.h"
#include "../util/err.h"
#include "../util/fatal.h"

struct access_log {
    FILE *f;
    int owned; /* a file of ours (closed at the end), not stderr */
};

int access_log_open(struct access_log **out, const char *where, char *err) {
    *out = NULL;
    if (!where || !where[0] || !strcmp(where, "off")) return 0;
    FILE *f = stderr;
    if (strcmp(where, "stderr")) {
        int fd = open(where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) return err_set(err, "log.access %s: %s", where, strerror(errno));
        f = fdopen(fd, "a");
        if (!f) {
            close(fd);
            return err_set(err, "log.access %s: %s", where, strerror(errno));
        }
        setvbuf(f, NULL, _IOLBF, 0); /* a line at a time: tail -f sees each request */
    }
    struct access_log *al = xcalloc(1, sizeof *al);
    al->f = f;
    al->owned = f != stderr;
    *out = al;
    return 0;
}

void access_log_write(struct access_log *al, const struct access_rec *r) {
    if (!al) return;
    if (r->status == 200 && !strcmp(r->method, "GET") &&
        (!strcmp(r->path, "/health") || !strcmp(r->path, "/metrics")))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40], uid[16] = "tcp";
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    if (r->uid != REQ_UID_UNKNOWN) snprintf(uid, sizeof uid, "%u", r->uid);
    char gen[200] = "";
    if (r->gen) {
        char ttft[24] = "-";
        if (r->ttft_s >= 0) snprintf(ttft, sizeof ttft, "%.3f", r->ttft_s);
        snprintf(gen, sizeof gen,
                 " prompt_tokens=%d cached_tokens=%d completion_tokens=%d ttft_s=%s finish=%s",
                 r->prompt_tokens, r->cached_tokens, r->completion_tokens, ttft,
                 r->finish ? r->finish : "-");
    }
    /* one fprintf: the stream's lock keeps concurrent lines whole */
    fprintf(al->f, "%s.%03ldZ access uid=%s method=%s path=%s status=%d total_s=%.3f%s\n", when,
            ts.tv_nsec / 1000000, uid, r->method, r->path, r->status, r->total_s, gen);
}

void access_log_close(struct access_log *al) {
    if (!al) return;
    if (al->owned) fclose(al->f);
    free(al);
}
