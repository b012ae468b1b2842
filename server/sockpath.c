#include "sockpath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/err.h"

#define PROBE_TIMEOUT_MS 1000 /* how long a socket already at the path may take to answer */

/* The socket's path must be one that nobody but us (the effective uid) and root can
 * change, as OpenSSH's StrictModes asks of its files: otherwise another local user could
 * put a listener of their own in the socket's place and read what clients send
 * (Authorization headers included), or plant a symlink where SOCKET.pid goes. */

#define MAX_SYMLINKS 40
#define PRIVATE_HINT \
    "put server.socket in a private directory such as /tmp/tpd/ or $XDG_RUNTIME_DIR/tpd/ " \
    "(created 0700 when missing)"

/* Where a walk of the socket's directory stands. */
struct walk {
    int fd;               /* O_PATH descriptor of the directory reached */
    struct stat st;       /* its stat */
    char shown[PATH_MAX]; /* its path, for messages */
    int links;            /* symlinks followed so far */
};

static const char *uid_name(uid_t uid, char *buf, size_t n) {
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (!getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) && res)
        snprintf(buf, n, "uid %u (%s)", (unsigned)uid, pw.pw_name);
    else snprintf(buf, n, "uid %u", (unsigned)uid);
    return buf;
}

/* "uid 1000 (tpd) or root", or "root" for a daemon running as root. */
static const char *trusted_names(char *buf, size_t n) {
    char me[128];
    if (geteuid() == 0) snprintf(buf, n, "root");
    else snprintf(buf, n, "%s or root", uid_name(geteuid(), me, sizeof me));
    return buf;
}

/* A directory on the way (final: the socket's own). Ours or root's; the socket's own
 * writable by nobody else; one on the way may be world-writable if sticky (/tmp): then
 * nobody else can rename or remove what we put in it. */
static int dir_trusted(const struct walk *w, int final, char *err) {
    uid_t me = geteuid();
    unsigned mode = (unsigned)w->st.st_mode & 07777;
    char owner[128], self[160];
    if (w->st.st_uid != me && w->st.st_uid != 0)
        return err_set(err, "%s is owned by %s, not by %s: its owner could replace the socket; %s",
                       w->shown, uid_name(w->st.st_uid, owner, sizeof owner),
                       trusted_names(self, sizeof self), PRIVATE_HINT);
    if (!(mode & 022)) return 0;
    const char *who = mode & 002 ? "everyone" : "its group";
    if (final)
        return err_set(err,
                       "the socket's directory %s is writable by %s (mode %04o): another "
                       "user could replace the socket; %s",
                       w->shown, who, mode, PRIVATE_HINT);
    if (!(mode & S_ISVTX))
        return err_set(err,
                       "%s is writable by %s (mode %04o, not sticky): another user could "
                       "rename what is in it and replace the socket; %s",
                       w->shown, who, mode, PRIVATE_HINT);
    return 0;
}

/* Moves the walk to the directory at name (relative to the current one, or "/"). */
static int walk_enter(struct walk *w, const char *name, char *err) {
    int fd = openat(w->fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return err_set(err, "cannot open directory %s: %s", w->shown, strerror(errno));
    if (w->fd >= 0) close(w->fd);
    w->fd = fd;
    if (fstat(fd, &w->st)) return err_set(err, "cannot stat %s: %s", w->shown, strerror(errno));
    return 0;
}

static void shown_push(struct walk *w, const char *comp) {
    size_t n = strlen(w->shown);
    snprintf(w->shown + n, sizeof w->shown - n, "%s%s", n > 1 ? "/" : "", comp);
}

static void shown_pop(struct walk *w) {
    char *s = strrchr(w->shown, '/');
    if (s) s[s == w->shown] = 0; /* "/a" -> "/" */
}

/* Follows path from the walk's directory as the kernel would, each directory and symlink
 * checked before anything in it is trusted; a missing directory is created 0700 (so only
 * inside one already checked). */
static int walk_path(struct walk *w, const char *path, char *err) {
    if (path[0] == '/') {
        snprintf(w->shown, sizeof w->shown, "/");
        if (walk_enter(w, "/", err)) return -1;
    }
    for (const char *p = path; *p;) {
        if (*p == '/') {
            p++;
            continue;
        }
        size_t n = strcspn(p, "/");
        char comp[NAME_MAX + 1];
        if (n > NAME_MAX)
            return err_set(err, "a component of %s is longer than %d bytes", path, NAME_MAX);
        memcpy(comp, p, n);
        comp[n] = 0;
        p += n;
        if (!strcmp(comp, ".")) continue;
        /* judged before anything in it is looked up; the socket's own, last, more strictly */
        if (dir_trusted(w, 0, err)) return -1;
        if (!strcmp(comp, "..")) {
            shown_pop(w);
            if (walk_enter(w, "..", err)) return -1;
            continue;
        }
        struct stat st;
        shown_push(w, comp);
        if (fstatat(w->fd, comp, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno != ENOENT)
                return err_set(err, "cannot stat %s: %s", w->shown, strerror(errno));
            if (mkdirat(w->fd, comp, 0700) && errno != EEXIST)
                return err_set(err, "cannot create directory %s: %s", w->shown, strerror(errno));
            if (fstatat(w->fd, comp, &st, AT_SYMLINK_NOFOLLOW))
                return err_set(err, "cannot stat %s: %s", w->shown, strerror(errno));
        }
        if (S_ISLNK(st.st_mode)) {
            /* in a sticky directory others may write to, only the link's owner can swap it */
            char owner[128], self[160];
            if ((w->st.st_mode & 022) && st.st_uid != geteuid() && st.st_uid != 0)
                return err_set(err,
                               "%s is a symlink owned by %s, not by %s, in a directory others "
                               "may write to: its owner could point it elsewhere; %s",
                               w->shown, uid_name(st.st_uid, owner, sizeof owner),
                               trusted_names(self, sizeof self), PRIVATE_HINT);
            if (++w->links > MAX_SYMLINKS)
                return err_set(err, "too many symlinks under %s", w->shown);
            char target[PATH_MAX];
            ssize_t k = readlinkat(w->fd, comp, target, sizeof target - 1);
            if (k < 0)
                return err_set(err, "cannot read the symlink %s: %s", w->shown, strerror(errno));
            target[k] = 0;
            shown_pop(w);
            if (walk_path(w, target, err)) return -1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) return err_set(err, "%s is not a directory", w->shown);
        if (walk_enter(w, comp, err)) return -1;
    }
    return 0;
}

/* Creates the socket's directory (0700) where missing and checks that it and every
 * directory on the way to it can be changed by nobody but us and root. */
static int ensure_dir(const char *dir, char *err) {
    struct walk w = {.fd = AT_FDCWD};
    char abs[PATH_MAX];
    if (dir[0] != '/') { /* relative: the working directory's own ancestors count too */
        if (!getcwd(abs, sizeof abs)) return err_set(err, "getcwd: %s", strerror(errno));
        size_t n = strlen(abs);
        snprintf(abs + n, sizeof abs - n, "/%s", dir);
        dir = abs;
    }
    int rc = walk_path(&w, dir, err);
    if (!rc) rc = dir_trusted(&w, 1, err);
    if (w.fd >= 0) close(w.fd);
    return rc;
}

/* A file already at path: a stale socket (nobody accepts) is removed; a live one means
 * another daemon serves there; anything that is not a socket is left alone. */
static int clear_path(const char *path, const struct sockaddr_un *sa, char *err) {
    struct stat st;
    if (lstat(path, &st)) {
        if (errno == ENOENT) return 0;
        return err_set(err, "cannot stat %s: %s", path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        return err_set(err,
                       "%s exists and is not a socket; not removing it (choose another "
                       "server.socket)",
                       path);
    /* non-blocking, with a short wait: a listener that never accepts (its backlog full)
     * must not hold the start-up */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return err_set(err, "socket: %s", strerror(errno));
    int rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa), e = errno;
    /* a Unix socket says EAGAIN while the listener's backlog is full: try again for a while */
    for (int waited = 0; rc && e == EAGAIN && waited < PROBE_TIMEOUT_MS; waited += 50) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa);
        e = errno;
    }
    close(fd);
    if (rc && e == EAGAIN)
        return err_set(err,
                       "a process listens on %s but does not accept connections (waited "
                       "%d ms); not replacing it: stop it or choose another server.socket",
                       path, PROBE_TIMEOUT_MS);
    if (rc == 0)
        return err_set(err,
                       "another daemon is already listening on %s; stop it or choose "
                       "another server.socket",
                       path);
    if (e != ECONNREFUSED)
        return err_set(err, "cannot probe the existing socket %s: %s", path, strerror(e));
    if (unlink(path) && errno != ENOENT)
        return err_set(err, "cannot remove the stale socket %s: %s", path, strerror(errno));
    return 0;
}

int sockpath_ready(const char *path, struct sockaddr_un *sa, char *err) {
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (!path[0] || strlen(path) >= sizeof sa->sun_path)
        return err_set(err, "socket path \"%s\" is empty or longer than %zu bytes", path,
                       sizeof sa->sun_path - 1);
    memcpy(sa->sun_path, path, strlen(path));
    const char *slash = strrchr(path, '/');
    char dir[sizeof sa->sun_path];
    int n_dir = slash ? (int)(slash - path) + (slash == path) : 1; /* "/x": "/", "x": "." */
    snprintf(dir, sizeof dir, "%.*s", n_dir, slash ? path : ".");
    if (ensure_dir(dir, err)) return -1;
    return clear_path(path, sa, err);
}
