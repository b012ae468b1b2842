#include "conns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../sched/request.h"
#include "../util/clock.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "api_err.h"
#include "reqhead.h"

#define TICK_S 0.25      /* deadlines and suspended clients are looked at this often */
#define FD_RESERVE 256   /* descriptors kept for everything but connections */
#define ACCEPT_BATCH 256 /* connections accepted per wake before the others get a turn */
#define MAX_EVENTS 256
/* SO_PEEK_OFF set when a connection is handed to libmicrohttpd: the kernel counts it down by
 * every byte libmicrohttpd reads, so we learn whether it read past what we looked at */
#define PEEK_MARK INT_MAX /* more than a body may have (server.max_body_bytes <= 2^30) */

enum rec_state {
    REC_FRESH, /* ours: accepted, its first request's head not all here yet */
    REC_HTTP,  /* handed to libmicrohttpd */
    REC_NEXT,  /* libmicrohttpd's, suspended after an answer until we have seen the next head */
};

enum drop_reason { DROP_IDLE, DROP_HEADER, N_DROP };
enum refuse_reason { REFUSE_LIMIT, REFUSE_UID, REFUSE_MALFORMED, N_REFUSE };

struct conn_rec {
    struct conn_rec *prev, *next;
    struct conns *cs;
    int fd;
    unsigned uid;
    enum rec_state state;
    int in_request;       /* a request's header is complete and its answer not ended */
    int shut;             /* shut down past its deadline; libmicrohttpd closes it */
    int close_after;      /* without SO_PEEK_OFF: the request handed over is to be its last */
    int counted;          /* SO_PEEK_OFF counts what libmicrohttpd reads since the hand-over */
    size_t seen;          /* bytes from the hand-over that are whole requests we passed */
    int n_seen;           /* of those requests, how many libmicrohttpd has not answered yet */
    int continued;        /* 100 Continue sent for the request being looked at (accept thread) */
    double deadline;      /* when not in a request */
    enum drop_reason why; /* what the deadline is for */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    /* suspension while waiting for tokens */
    struct MHD_Connection *mc;
    int suspended, pending;
    double suspended_at;
};

struct uid_count {
    unsigned uid;
    int n;
};

struct conns {
    struct conns_config cfg;
    conns_handoff_fn handoff;
    void *handoff_arg;
    int lfds[2];
    int n_lfds;
    int ep, wake_fd, reserve_fd;
    pthread_t thread;
    atomic_int quit;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct conn_rec *head;
    struct conn_rec **by_fd; /* the record of each descriptor handed out, to find it again */
    int cap_fd;
    int n_open, n_suspended;
    struct uid_count *uids;
    int n_uids, cap_uids;
    int stop_listen, listen_closed, releasing;
    long refused[N_REFUSE], dropped[N_DROP];
    struct pollfd *pfds;
    struct conn_rec **precs;
    int cap_pfds;
    char *view; /* REQHEAD_VIEW bytes: what a fresh connection sent so far (accept thread) */
};

/* ---------------------------------------------------------------- fd limit */

void conns_raise_fd_limit(int *max) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) {
        LOG(LOG_WARN, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
        return;
    }
    rlim_t want = rl.rlim_max;
    if (want == RLIM_INFINITY) { /* the kernel refuses more than fs.nr_open */
        want = 1 << 20;
        FILE *f = fopen("/proc/sys/fs/nr_open", "r");
        unsigned long v;
        if (f && fscanf(f, "%lu", &v) == 1) want = v;
        if (f) fclose(f);
    }
    if (rl.rlim_cur < want) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl)) {
            LOG(LOG_WARN, "cannot raise the open-file limit from %llu to %llu: %s",
                (unsigned long long)old, (unsigned long long)want, strerror(errno));
            rl.rlim_cur = old;
        } else {
            LOG(LOG_INFO, "open-file limit raised from %llu to the hard limit %llu",
                (unsigned long long)old, (unsigned long long)want);
        }
    } else {
        LOG(LOG_INFO, "open-file limit %llu (the hard limit)", (unsigned long long)rl.rlim_cur);
    }
    long long fit = (long long)rl.rlim_cur - FD_RESERVE;
    if (fit < 1) fit = 1;
    if (*max > fit) {
        LOG(LOG_WARN,
            "server.max_connections %d does not fit in the open-file limit %llu (%d kept for other "
            "files): serving at most %lld connections; raise the hard limit (ulimit -Hn, "
            "LimitNOFILE=) for more",
            *max, (unsigned long long)rl.rlim_cur, FD_RESERVE, fit);
        *max = (int)fit;
    }
}

/* ---------------------------------------------------------------- records (under mu) */

static struct uid_count *uid_find(struct conns *cs, unsigned uid) {
    for (int i = 0; i < cs->n_uids; i++)
        if (cs->uids[i].uid == uid) return &cs->uids[i];
    return NULL;
}

static void uid_add(struct conns *cs, unsigned uid, int d) {
    struct uid_count *u = uid_find(cs, uid);
    if (!u) {
        if (d <= 0) return;
        if (cs->n_uids == cs->cap_uids) {
            cs->cap_uids = cs->cap_uids ? 2 * cs->cap_uids : 8;
            cs->uids = xrealloc(cs->uids, sizeof *cs->uids * (size_t)cs->cap_uids);
        }
        u = &cs->uids[cs->n_uids++];
        u->uid = uid;
        u->n = 0;
    }
    u->n += d;
    if (u->n <= 0) *u = cs->uids[--cs->n_uids];
}

static void rec_insert(struct conns *cs, struct conn_rec *r) {
    if (r->fd >= cs->cap_fd) {
        int cap = cs->cap_fd ? cs->cap_fd : 1024;
        while (cap <= r->fd) cap *= 2;
        cs->by_fd = xrealloc(cs->by_fd, sizeof *cs->by_fd * (size_t)cap);
        memset(cs->by_fd + cs->cap_fd, 0, sizeof *cs->by_fd * (size_t)(cap - cs->cap_fd));
        cs->cap_fd = cap;
    }
    cs->by_fd[r->fd] = r;
    r->next = cs->head;
    if (cs->head) cs->head->prev = r;
    cs->head = r;
    cs->n_open++;
    uid_add(cs, r->uid, 1);
}

static void rec_remove(struct conns *cs, struct conn_rec *r) {
    if (r->fd >= 0 && r->fd < cs->cap_fd && cs->by_fd[r->fd] == r) cs->by_fd[r->fd] = NULL;
    if (r->prev) r->prev->next = r->next;
    else cs->head = r->next;
    if (r->next) r->next->prev = r->prev;
    if (r->suspended) cs->n_suspended--;
    cs->n_open--;
    uid_add(cs, r->uid, -1);
}

static void resume_locked(struct conns *cs, struct conn_rec *r) {
    r->suspended = 0;
    cs->n_suspended--;
    MHD_resume_connection(r->mc);
}

/* ---------------------------------------------------------------- accepting */

static unsigned peer_uid(int fd, const struct sockaddr_storage *sa) {
    if (sa->ss_family != AF_UNIX) return REQ_UID_UNKNOWN;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len)) return REQ_UID_UNKNOWN;
    return (unsigned)cr.uid;
}

/* Answers e and shuts the socket down (libmicrohttpd, if it holds the connection, then
 * reads the end and closes it). What the client sent so far is read first, so that closing
 * does not turn into a reset that could discard the answer. */
static void answer_shut(int fd, const struct api_error *e) {
    size_t nb;
    char *body = api_error_json(e, &nb), head[256];
    /* libmicrohttpd's phrase for the status (413's older name "Payload Too Large") */
    const char *reason = MHD_get_reason_phrase_for((unsigned)e->status);
    int nh = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\n%sContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      e->status, reason, e->status == 503 ? "Retry-After: 1\r\n" : "", nb);
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    struct iovec iov[2] = {{head, (size_t)nh}, {body, nb}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t k = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)k; /* a client that cannot take a few hundred bytes gets nothing */
    free(body);
    shutdown(fd, SHUT_WR);
}

/* Answers e and closes: no HTTP state is made for a connection refused here. */
static void answer_close(int fd, const struct api_error *e) {
    answer_shut(fd, e);
    close(fd);
}

/* A 503 at once, at a connection limit. */
static void refuse(int fd, const char *why) {
    struct api_error e;
    api_err(&e, 503, "", "%s; retry later", why);
    e.code = "too_many_connections";
    answer_close(fd, &e);
}

static void admit(struct conns *cs, int fd, const struct sockaddr_storage *sa, socklen_t sa_len) {
    unsigned uid = peer_uid(fd, sa);
    pthread_mutex_lock(&cs->mu);
    /* a record left by a connection closed without a notification (libmicrohttpd failed
     * to set it up) */
    if (fd < cs->cap_fd && cs->by_fd[fd]) {
        struct conn_rec *stale = cs->by_fd[fd];
        rec_remove(cs, stale);
        free(stale);
    }
    struct uid_count *u = uid_find(cs, uid);
    int reason = -1;
    if (cs->n_open >= cs->cfg.max_connections) reason = REFUSE_LIMIT;
    else if (u && u->n >= cs->cfg.max_per_uid) reason = REFUSE_UID;
    if (reason >= 0) {
        cs->refused[reason]++;
        pthread_mutex_unlock(&cs->mu);
        refuse(fd, reason == REFUSE_LIMIT ? "the server is at its connection limit"
                                          : "this client uid holds its share of the connections");
        return;
    }
    struct conn_rec *r = xcalloc(1, sizeof *r);
    r->cs = cs;
    r->fd = fd;
    r->uid = uid;
    r->state = REC_FRESH;
    r->deadline = clock_now() + cs->cfg.idle_timeout_s;
    r->why = DROP_IDLE;
    memcpy(&r->sa, sa, sa_len);
    r->sa_len = sa_len;
    rec_insert(cs, r);
    pthread_mutex_unlock(&cs->mu);
    /* edge-triggered: bytes are only peeked at until the request head is all here */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = r};
    if (epoll_ctl(cs->ep, EPOLL_CTL_ADD, fd, &ev)) {
        LOG(LOG_WARN, "epoll_ctl: %s", strerror(errno));
        pthread_mutex_lock(&cs->mu);
        rec_remove(cs, r);
        pthread_mutex_unlock(&cs->mu);
        free(r);
        close(fd);
    }
}

static void accept_some(struct conns *cs, int lfd) {
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && cs->reserve_fd >= 0) {
            /* out of descriptors: the reserved one lets the client hear why */
            close(cs->reserve_fd);
            fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd >= 0) {
                pthread_mutex_lock(&cs->mu);
                cs->refused[REFUSE_LIMIT]++;
                pthread_mutex_unlock(&cs->mu);
                refuse(fd, "the server is out of file descriptors");
            }
            cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            continue;
        }
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                LOG(LOG_WARN, "accept: %s", strerror(errno));
            return;
        }
        admit(cs, fd, &sa, len);
    }
}

/* The request head is here (or the end came): libmicrohttpd takes the connection over,
 * its deadline unchanged. */
static void hand_over(struct conns *cs, struct conn_rec *r) {
    epoll_ctl(cs->ep, EPOLL_CTL_DEL, r->fd, NULL);
    pthread_mutex_lock(&cs->mu);
    r->state = REC_HTTP;
    pthread_mutex_unlock(&cs->mu);
    int fd = r->fd;
    if (cs->handoff(cs->handoff_arg, fd, (const struct sockaddr *)&r->sa, r->sa_len)) {
        /* closed by libmicrohttpd, which never saw it start */
        pthread_mutex_lock(&cs->mu);
        if (fd < cs->cap_fd && cs->by_fd[fd] == r) {
            rec_remove(cs, r);
            free(r);
        }
        pthread_mutex_unlock(&cs->mu);
    }
}

/* A connection suspended between requests (REC_NEXT) goes back to libmicrohttpd, which
 * reads on from the socket (and, if we shut it down, sees the end and closes). Under mu. */
static void give_back_locked(struct conns *cs, struct conn_rec *r) {
    epoll_ctl(cs->ep, EPOLL_CTL_DEL, r->fd, NULL);
    r->state = REC_HTTP;
    MHD_resume_connection(r->mc);
}

static void give_back(struct conns *cs, struct conn_rec *r) {
    pthread_mutex_lock(&cs->mu);
    give_back_locked(cs, r);
    pthread_mutex_unlock(&cs->mu);
}

/* Before a hand-over: what libmicrohttpd may read without a further look, the request in
 * view (ending at end, 0 if it does not) and, on a Unix socket, the whole requests behind it
 * that pass too (pipelined: libmicrohttpd answers them in order); and SO_PEEK_OFF set to
 * count its reads. Over TCP a request with another behind it stays the connection's last:
 * there libmicrohttpd 0.9.75 ended the connection with a reset, both answers lost, when the
 * second was answered at once (a 404). Without SO_PEEK_OFF (TCP before Linux 6.10) a
 * request with anything behind it is the connection's last. */
static void mark_seen(struct conns *cs, struct conn_rec *r, size_t n, size_t end) {
    size_t seen = end, e2;
    int n_seen = end > 0;
    struct api_error e;
    while (end && seen < n && r->sa.ss_family == AF_UNIX &&
           reqhead_screen(cs->view + seen, n - seen, REQHEAD_VIEW - seen, &e, &e2) ==
               REQHEAD_PASS &&
           e2) {
        seen += e2;
        n_seen++;
    }
    int mark = PEEK_MARK;
    int counted = !setsockopt(r->fd, SOL_SOCKET, SO_PEEK_OFF, &mark, sizeof mark);
    pthread_mutex_lock(&cs->mu);
    r->counted = counted;
    r->seen = seen;
    r->n_seen = counted ? n_seen : 1;
    r->close_after = end == 0 || n != end;
    pthread_mutex_unlock(&cs->mu);
}

/* Whether libmicrohttpd has read past the requests we looked at. Under mu. */
static int read_past_locked(const struct conn_rec *r) {
    if (!r->counted) return r->close_after;
    int off;
    socklen_t len = sizeof off;
    if (getsockopt(r->fd, SOL_SOCKET, SO_PEEK_OFF, &off, &len) || off <= 0) return 1;
    return (size_t)(PEEK_MARK - off) > r->seen;
}

/* Bytes (or the end) on a connection of ours: a new one, or one libmicrohttpd suspended
 * after an answer (conns_next). From its first byte, the whole request must come within
 * header_timeout_s. A head libmicrohttpd would answer wrongly is answered here (reqhead.h);
 * any other goes to libmicrohttpd once it is all here (a chunked body too), or at the end. A
 * request that is not all in view, or with bytes behind it, is made the connection's last:
 * libmicrohttpd may read the next request with it, and that one we would not see. */
static void fresh_event(struct conns *cs, struct conn_rec *r, uint32_t events) {
    ssize_t n = recv(r->fd, cs->view, REQHEAD_VIEW, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    struct api_error e;
    enum reqhead_verdict v = REQHEAD_PASS;
    size_t end = 0;
    if (n > 0) v = reqhead_screen(cs->view, (size_t)n, REQHEAD_VIEW, &e, &end);
    if (v == REQHEAD_CONTINUE) { /* its chunked body is looked at here too: ask for it */
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!r->continued) {
            ssize_t k = send(r->fd, cont, sizeof cont - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
            (void)k; /* a client that cannot take it sends its body after its own wait */
        }
        r->continued = 1;
        v = REQHEAD_MORE;
    }
    if (v == REQHEAD_REFUSE) {
        epoll_ctl(cs->ep, EPOLL_CTL_DEL, r->fd, NULL);
        pthread_mutex_lock(&cs->mu);
        cs->refused[REFUSE_MALFORMED]++;
        if (r->state == REC_FRESH) rec_remove(cs, r);
        pthread_mutex_unlock(&cs->mu);
        if (r->state == REC_NEXT) { /* libmicrohttpd's: it closes and tells conns_closed */
            answer_shut(r->fd, &e);
            shutdown(r->fd, SHUT_RD);
            give_back(cs, r);
            return;
        }
        answer_close(r->fd, &e);
        free(r);
        return;
    }
    pthread_mutex_lock(&cs->mu);
    if (r->why == DROP_IDLE) { /* its first bytes */
        r->deadline = clock_now() + cs->cfg.header_timeout_s;
        r->why = DROP_HEADER;
    }
    pthread_mutex_unlock(&cs->mu);
    if (v == REQHEAD_PASS || (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        mark_seen(cs, r, (size_t)(n > 0 ? n : 0), v == REQHEAD_PASS ? end : 0);
        if (r->state == REC_NEXT) give_back(cs, r);
        else hand_over(cs, r);
    }
}

static void close_listeners(struct conns *cs) {
    for (int i = 0; i < cs->n_lfds; i++) {
        epoll_ctl(cs->ep, EPOLL_CTL_DEL, cs->lfds[i], NULL);
        shutdown(cs->lfds[i], SHUT_RDWR);
        close(cs->lfds[i]);
    }
    cs->n_lfds = 0;
}

/* Deadlines, and suspended connections whose client left or whose stream is due a
 * keep-alive. */
static void tick(struct conns *cs) {
    double now = clock_now();
    int n_close = 0, cap_close = 16;
    int *to_close = xmalloc(sizeof *to_close * (size_t)cap_close);
    pthread_mutex_lock(&cs->mu);
    if (cs->n_suspended > cs->cap_pfds) {
        cs->cap_pfds = cs->n_suspended * 2;
        cs->pfds = xrealloc(cs->pfds, sizeof *cs->pfds * (size_t)cs->cap_pfds);
        cs->precs = xrealloc(cs->precs, sizeof *cs->precs * (size_t)cs->cap_pfds);
    }
    int np = 0;
    for (struct conn_rec *r = cs->head, *next; r; r = next) {
        next = r->next;
        if (r->suspended) {
            if (np < cs->cap_pfds) {
                cs->pfds[np] = (struct pollfd){.fd = r->fd, .events = POLLRDHUP};
                cs->precs[np++] = r;
            }
            continue;
        }
        if (r->in_request || r->shut || now < r->deadline) continue;
        cs->dropped[r->why]++;
        if (r->state == REC_FRESH) { /* ours: closed here (which also takes it out of epoll) */
            if (n_close == cap_close) {
                cap_close *= 2;
                to_close = xrealloc(to_close, sizeof *to_close * (size_t)cap_close);
            }
            to_close[n_close++] = r->fd;
            rec_remove(cs, r);
            free(r);
        } else { /* libmicrohttpd's: it sees the end, closes and tells conns_closed */
            shutdown(r->fd, SHUT_RDWR);
            r->shut = 1;
            if (r->state == REC_NEXT) give_back_locked(cs, r); /* it looks again once resumed */
        }
    }
    if (np && poll(cs->pfds, (nfds_t)np, 0) < 0) np = 0;
    for (int i = 0; i < np; i++) {
        struct conn_rec *r = cs->precs[i];
        int gone = cs->pfds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL);
        if (r->suspended && (gone || now - r->suspended_at >= cs->cfg.keepalive_s))
            resume_locked(cs, r);
    }
    pthread_mutex_unlock(&cs->mu);
    for (int i = 0; i < n_close; i++) close(to_close[i]);
    free(to_close);
}

static void *accept_main(void *arg) {
    struct conns *cs = arg;
    struct epoll_event ev[MAX_EVENTS];
    double next_tick = clock_now() + TICK_S;
    while (!atomic_load(&cs->quit)) {
        int ms = (int)ceil((next_tick - clock_now()) * 1000);
        int n = epoll_wait(cs->ep, ev, MAX_EVENTS, ms > 0 ? ms : 0);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &cs->wake_fd) {
                uint64_t v;
                ssize_t k = read(cs->wake_fd, &v, sizeof v);
                (void)k;
            } else if (p >= (void *)&cs->lfds[0] && p < (void *)&cs->lfds[2]) {
                accept_some(cs, *(int *)p);
            } else {
                fresh_event(cs, p, ev[i].events);
            }
        }
        pthread_mutex_lock(&cs->mu);
        if (cs->stop_listen && !cs->listen_closed) {
            close_listeners(cs);
            cs->listen_closed = 1;
            pthread_cond_broadcast(&cs->cv);
        }
        pthread_mutex_unlock(&cs->mu);
        if (clock_now() >= next_tick) {
            tick(cs);
            next_tick = clock_now() + TICK_S;
        }
    }
    return NULL;
}

static void wake_thread(struct conns *cs) {
    uint64_t one = 1;
    ssize_t k = write(cs->wake_fd, &one, sizeof one);
    (void)k;
}

/* ---------------------------------------------------------------- lifetime */

int conns_start(struct conns **out, const struct conns_config *cfg, const int *listen_fds, int n,
                conns_handoff_fn handoff, void *arg, char *err) {
    if (n < 1 || n > 2) return err_set(err, "conns_start: %d listening sockets", n);
    struct conns *cs = xcalloc(1, sizeof *cs);
    cs->cfg = *cfg;
    if (cs->cfg.max_per_uid < 1 || cs->cfg.max_per_uid > cs->cfg.max_connections)
        cs->cfg.max_per_uid = cs->cfg.max_connections;
    cs->handoff = handoff;
    cs->handoff_arg = arg;
    pthread_mutex_init(&cs->mu, NULL);
    clock_cond_init(&cs->cv);
    cs->ep = epoll_create1(EPOLL_CLOEXEC);
    cs->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    cs->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    cs->view = xmalloc(REQHEAD_VIEW);
    if (cs->ep < 0 || cs->wake_fd < 0) {
        int e = errno;
        if (cs->ep >= 0) close(cs->ep);
        if (cs->wake_fd >= 0) close(cs->wake_fd);
        if (cs->reserve_fd >= 0) close(cs->reserve_fd);
        free(cs->view);
        free(cs);
        return err_set(err, "epoll/eventfd: %s", strerror(e));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs->wake_fd};
    epoll_ctl(cs->ep, EPOLL_CTL_ADD, cs->wake_fd, &ev);
    for (int i = 0; i < n; i++) {
        cs->lfds[i] = listen_fds[i];
        int fl = fcntl(listen_fds[i], F_GETFL);
        fcntl(listen_fds[i], F_SETFL, fl | O_NONBLOCK);
        ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = &cs->lfds[i]};
        epoll_ctl(cs->ep, EPOLL_CTL_ADD, listen_fds[i], &ev);
    }
    cs->n_lfds = n;
    *out = cs; /* before the first hand-over: the engine's callbacks find it there */
    if (pthread_create(&cs->thread, NULL, accept_main, cs)) {
        *out = NULL;
        close(cs->ep);
        close(cs->wake_fd);
        if (cs->reserve_fd >= 0) close(cs->reserve_fd);
        free(cs->view);
        free(cs);
        return err_set(err, "cannot start the accept thread");
    }
    LOG(LOG_INFO,
        "connections: at most %d open, %d per client uid; header timeout %.3g s, idle timeout %.3g "
        "s",
        cs->cfg.max_connections, cs->cfg.max_per_uid, cs->cfg.header_timeout_s,
        cs->cfg.idle_timeout_s);
    return 0;
}

void conns_stop_accepting(struct conns *cs) {
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    cs->stop_listen = 1;
    wake_thread(cs);
    while (!cs->listen_closed) pthread_cond_wait(&cs->cv, &cs->mu);
    pthread_mutex_unlock(&cs->mu);
}

static void stop_thread(struct conns *cs) {
    conns_stop_accepting(cs);
    if (atomic_exchange(&cs->quit, 1)) return;
    wake_thread(cs);
    pthread_join(cs->thread, NULL);
}

void conns_release_all(struct conns *cs) {
    if (!cs) return;
    stop_thread(cs);
    pthread_mutex_lock(&cs->mu);
    cs->releasing = 1;
    for (struct conn_rec *r = cs->head; r; r = r->next) {
        if (r->suspended) resume_locked(cs, r);
        if (r->state == REC_NEXT) give_back_locked(cs, r);
    }
    pthread_mutex_unlock(&cs->mu);
}

void conns_wake_all(struct conns *cs) {
    if (!cs) return;
    pthread_mutex_lock(&cs->mu);
    for (struct conn_rec *r = cs->head; r; r = r->next)
        if (r->suspended) resume_locked(cs, r);
    pthread_mutex_unlock(&cs->mu);
}

void conns_free(struct conns *cs) {
    if (!cs) return;
    stop_thread(cs);
    /* what is left was never handed over (libmicrohttpd has stopped and told us of the rest) */
    while (cs->head) {
        struct conn_rec *r = cs->head;
        rec_remove(cs, r);
        if (r->state == REC_FRESH) close(r->fd);
        free(r);
    }
    close(cs->ep);
    close(cs->wake_fd);
    if (cs->reserve_fd >= 0) close(cs->reserve_fd);
    pthread_mutex_destroy(&cs->mu);
    pthread_cond_destroy(&cs->cv);
    free(cs->by_fd);
    free(cs->uids);
    free(cs->pfds);
    free(cs->precs);
    free(cs->view);
    free(cs);
}

/* ---------------------------------------------------------------- from the HTTP engine */

void conns_started(struct conns *cs, int fd, void **ctx) {
    pthread_mutex_lock(&cs->mu);
    *ctx = fd >= 0 && fd < cs->cap_fd ? cs->by_fd[fd] : NULL;
    pthread_mutex_unlock(&cs->mu);
}

void conns_closed(struct conns *cs, void **ctx) {
    struct conn_rec *r = *ctx;
    if (!r) return;
    pthread_mutex_lock(&cs->mu);
    rec_remove(cs, r);
    pthread_mutex_unlock(&cs->mu);
    free(r);
    *ctx = NULL;
}

int conns_close_after(struct conns *cs, struct conn_rec *r) {
    if (!r) return 0;
    pthread_mutex_lock(&cs->mu);
    int c = read_past_locked(r);
    pthread_mutex_unlock(&cs->mu);
    return c;
}

void conns_next(struct conns *cs, struct conn_rec *r, struct MHD_Connection *mc) {
    if (!r) return;
    pthread_mutex_lock(&cs->mu);
    if (cs->releasing || atomic_load(&cs->quit) || r->state != REC_HTTP || r->shut) {
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    if (read_past_locked(r)) { /* kept alive though (it read after the answer began): end it */
        shutdown(r->fd, SHUT_RDWR);
        r->shut = 1;
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    if (--r->n_seen > 0) { /* the next request is one we passed: libmicrohttpd goes on */
        pthread_mutex_unlock(&cs->mu);
        return;
    }
    int off = -1; /* our peeks start at the first unread byte again */
    setsockopt(r->fd, SOL_SOCKET, SO_PEEK_OFF, &off, sizeof off);
    r->state = REC_NEXT;
    r->continued = 0;
    r->mc = mc;
    MHD_suspend_connection(mc);
    /* edge-triggered: reported at once if the next request is already here */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = r};
    if (epoll_ctl(cs->ep, EPOLL_CTL_ADD, r->fd, &ev)) {
        LOG(LOG_WARN, "epoll_ctl: %s", strerror(errno));
        r->state = REC_HTTP;
        MHD_resume_connection(mc);
    }
    pthread_mutex_unlock(&cs->mu);
}

void conns_request_begin(struct conns *cs, struct conn_rec *r) {
    if (!r) return;
    pthread_mutex_lock(&cs->mu);
    r->in_request = 1;
    r->pending = 0;
    pthread_mutex_unlock(&cs->mu);
}

void conns_request_end(struct conns *cs, struct conn_rec *r) {
    if (!r) return;
    pthread_mutex_lock(&cs->mu);
    r->in_request = 0;
    r->deadline = clock_now() + cs->cfg.idle_timeout_s;
    r->why = DROP_IDLE;
    pthread_mutex_unlock(&cs->mu);
}

int conns_suspend(struct conns *cs, struct conn_rec *r, struct MHD_Connection *mc) {
    if (!r) { /* not one of ours: cannot be woken, so look again soon */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        return 0;
    }
    pthread_mutex_lock(&cs->mu);
    int ok = !cs->releasing && !r->pending;
    r->pending = 0;
    if (ok) {
        r->mc = mc;
        r->suspended = 1;
        r->suspended_at = clock_now();
        cs->n_suspended++;
        MHD_suspend_connection(mc);
    }
    pthread_mutex_unlock(&cs->mu);
    return ok;
}

void conns_wake(struct conn_rec *r) {
    struct conns *cs = r->cs;
    pthread_mutex_lock(&cs->mu);
    if (r->suspended) resume_locked(cs, r);
    else r->pending = 1;
    pthread_mutex_unlock(&cs->mu);
}

void conns_metrics(struct conns *cs, struct sbuf *b) {
    pthread_mutex_lock(&cs->mu);
    sbuf_addf(
        b,
        "# HELP tpd_connections_open open client connections\n# TYPE tpd_connections_open gauge\n"
        "tpd_connections_open %d\n",
        cs->n_open);
    sbuf_addf(b,
              "# HELP tpd_connections_limit server.max_connections in effect\n"
              "# TYPE tpd_connections_limit gauge\ntpd_connections_limit %d\n",
              cs->cfg.max_connections);
    sbuf_addf(b,
              "# HELP tpd_connections_waiting connections suspended while their generation waits "
              "for tokens\n"
              "# TYPE tpd_connections_waiting gauge\ntpd_connections_waiting %d\n",
              cs->n_suspended);
    sbuf_adds(b,
              "# HELP tpd_uid_connections_open open connections per client uid (TCP: uid=\"tcp\")\n"
              "# TYPE tpd_uid_connections_open gauge\n");
    for (int i = 0; i < cs->n_uids; i++) {
        if (cs->uids[i].uid == REQ_UID_UNKNOWN)
            sbuf_addf(b, "tpd_uid_connections_open{uid=\"tcp\"} %d\n", cs->uids[i].n);
        else
            sbuf_addf(b, "tpd_uid_connections_open{uid=\"%u\"} %d\n", cs->uids[i].uid,
                      cs->uids[i].n);
    }
    sbuf_addf(b,
              "# HELP tpd_connections_refused_total connections answered at once and closed: "
              "503 at a limit, 400 or 413 for a malformed request head\n"
              "# TYPE tpd_connections_refused_total counter\n"
              "tpd_connections_refused_total{reason=\"limit\"} %ld\n"
              "tpd_connections_refused_total{reason=\"uid_share\"} %ld\n"
              "tpd_connections_refused_total{reason=\"malformed\"} %ld\n",
              cs->refused[REFUSE_LIMIT], cs->refused[REFUSE_UID], cs->refused[REFUSE_MALFORMED]);
    sbuf_addf(b,
              "# HELP tpd_connections_timed_out_total connections closed for sending no complete "
              "request in time\n"
              "# TYPE tpd_connections_timed_out_total counter\n"
              "tpd_connections_timed_out_total{reason=\"idle\"} %ld\n"
              "tpd_connections_timed_out_total{reason=\"header\"} %ld\n",
              cs->dropped[DROP_IDLE], cs->dropped[DROP_HEADER]);
    pthread_mutex_unlock(&cs->mu);
}
