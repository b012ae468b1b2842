/* Server-sent events splitter for tpctl: turns a text/event-stream body, fed in arbitrary
 * pieces, into events (event name + data lines joined by LF), per the WHATWG rules (CRLF, LF
 * or CR line ends; comments; one optional space after the colon). Bounded; one per stream. */
#ifndef TPD_HTTPC_SSE_H
#define TPD_HTTPC_SSE_H

#include <stddef.h>

#include "util/sbuf.h"

#define SSE_MAX_EVENT_NAME 64

struct sse_parser {
    size_t max_event; /* bound on one line and on one event's data */
    struct sbuf line; /* current, incomplete line */
    struct sbuf data; /* data of the event being assembled */
    int has_data;     /* a data field was seen (possibly empty) */
    char event[SSE_MAX_EVENT_NAME];
    int after_cr;    /* the last byte was CR: a following LF belongs to the same line end */
    int started;     /* past the optional byte order mark */
    size_t n_events; /* events delivered so far */
};

/* Called per event; data is NUL-terminated (len excludes the NUL); event is "" when the
 * stream named none ("message"). Returning non-zero stops the parse. */
typedef int (*sse_event_fn)(void *ud, const char *event, const char *data, size_t len);

void sse_init(struct sse_parser *s, size_t max_event);
void sse_free(struct sse_parser *s);
/* 0, or -1 with err (line or event over max_event, or the callback stopped). */
int sse_feed(struct sse_parser *s, const char *buf, size_t n, sse_event_fn on_event, void *ud,
             char *err);
/* The stream ended: 0 when it ended on an event boundary, -1 with err when a partial line or
 * an undelivered event was cut off (that event is dropped, as the spec says). */
int sse_finish(struct sse_parser *s, char *err);

#endif
