/* The HTTP endpoints (server/endpoints.c): what http.c's request callback routes to. */
#ifndef TPD_ENDPOINTS_H
#define TPD_ENDPOINTS_H

#include <stddef.h>

#include "http_internal.h"

/* The routes, in the order they are tried; endpoints_n of them. */
extern const struct route endpoints[];
extern const size_t endpoints_n;

/* A non-streamed generation resumed by its connection: answers when it has ended, else
 * suspends the connection again until it does. */
enum MHD_Result endpoints_gen_wait(struct conn *c, struct MHD_Connection *mc);

#endif
