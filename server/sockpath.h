/* The Unix socket's path made safe to listen on: every directory on the way to it checked
 * (the trust walk: changeable by nobody but us and root), the socket's own directory created
 * 0700 where missing, and a stale socket at the path removed (a live one refused). Called
 * at start-up by http.c (http_check, http_start), on rank 0's main thread. */
#ifndef TPD_SOCKPATH_H
#define TPD_SOCKPATH_H

#include <sys/un.h>

/* Fills sa with path's address once its directory is made and checked and nothing live is
 * at the path; -1 with the reason in err otherwise. */
int sockpath_ready(const char *path, struct sockaddr_un *sa, char *err);

#endif
