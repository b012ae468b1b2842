/* The access log on rank 0: one line per finished HTTP request (time, peer uid, method,
 * path, status, prompt / cached / completion tokens, time to first token, total time,
 * finish reason), to stderr or appended to a file (log.access). Successful GET /health and
 * /metrics, which monitors poll, are left out. Any libmicrohttpd thread writes. */
#ifndef TPD_ACCESS_LOG_H
#define TPD_ACCESS_LOG_H

struct access_log;

struct access_rec {
    unsigned uid; /* REQ_UID_UNKNOWN over TCP */
    const char *method, *path;
    int status; /* 499: the client left before any answer */
    int gen;    /* 1: a generation (the fields below are set) */
    int prompt_tokens, cached_tokens, completion_tokens;
    double ttft_s; /* < 0: no token came */
    double total_s;
    const char *finish; /* "stop", "length", ...; NULL: none */
};

/* where: "stderr", "off" (NULL returned, nothing logged) or a file path (created 0600,
 * appended to). 0, or -1 with err. */
int access_log_open(struct access_log **out, const char *where, char *err);
void access_log_write(struct access_log *al, const struct access_rec *r);
void access_log_close(struct access_log *al);

#endif
