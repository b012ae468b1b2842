#include "httpc_sse.h"

#include <stdlib.h>
#include <string.h>

#include "util/err.h"

void sse_init(struct sse_parser *s, size_t max_event) {
    memset(s, 0, sizeof *s);
    s->max_event = max_event;
}

void sse_free(struct sse_parser *s) {
    sbuf_free(&s->line);
    sbuf_free(&s->data);
    memset(s, 0, sizeof *s);
}

static int dispatch(struct sse_parser *s, sse_event_fn on_event, void *ud, char *err) {
    int rc = 0;
    if (s->has_data) {
        size_t n = s->data.len - 1; /* every data line appended a LF; the last one goes */
        s->data.p[n] = 0;
        s->n_events++;
        if (on_event && on_event(ud, s->event, s->data.p, n))
            rc = err_set(err, "event handler stopped the stream");
    }
    s->data.len = 0;
    s->has_data = 0;
    s->event[0] = 0;
    return rc;
}

static int process_line(struct sse_parser *s, sse_event_fn on_event, void *ud, char *err) {
    const char *l = s->line.p ? s->line.p : "";
    size_t n = s->line.len;
    s->line.len = 0;
    if (!s->started) {
        s->started = 1;
        if (n >= 3 && memcmp(l, "\xEF\xBB\xBF", 3) == 0) l += 3, n -= 3;
    }
    if (n == 0) return dispatch(s, on_event, ud, err);
    if (l[0] == ':') return 0; /* comment, e.g. a keep-alive ping */
    const char *colon = memchr(l, ':', n);
    size_t fn = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vn = colon ? n - fn - 1 : 0;
    if (vn && v[0] == ' ') v++, vn--;
    if (fn == 4 && memcmp(l, "data", 4) == 0) {
        if (s->data.len + vn + 1 > s->max_event)
            return err_set(err, "event data longer than %zu bytes", s->max_event);
        sbuf_add(&s->data, v, vn);
        sbuf_add(&s->data, "\n", 1);
        s->has_data = 1;
    } else if (fn == 5 && memcmp(l, "event", 5) == 0) {
        size_t k = vn < SSE_MAX_EVENT_NAME - 1 ? vn : SSE_MAX_EVENT_NAME - 1;
        memcpy(s->event, v, k);
        s->event[k] = 0;
    }
    /* id, retry and unknown fields do not matter to a one-shot client */
    return 0;
}

int sse_feed(struct sse_parser *s, const char *buf, size_t n, sse_event_fn on_event, void *ud,
             char *err) {
    size_t i = 0;
    while (i < n) {
        if (s->after_cr) {
            s->after_cr = 0;
            if (buf[i] == '\n') {
                i++;
                continue;
            }
        }
        size_t j = i;
        while (j < n && buf[j] != '\n' && buf[j] != '\r') j++;
        size_t take = j - i;
        if (s->line.len + take > s->max_event)
            return err_set(err, "event-stream line longer than %zu bytes", s->max_event);
        if (take) sbuf_add(&s->line, buf + i, take);
        i = j;
        if (i == n) break;
        s->after_cr = buf[i] == '\r';
        i++;
        if (process_line(s, on_event, ud, err)) return -1;
    }
    return 0;
}

int sse_finish(struct sse_parser *s, char *err) {
    if (s->line.len || s->has_data) {
        s->line.len = 0;
        s->data.len = 0;
        s->has_data = 0;
        return err_set(err, "event stream ended in the middle of an event");
    }
    return 0;
}
