/* `tpd serve`'s start-up checks that need no weights, run on every rank before any weight
 * is read (a typo must not cost the minutes a large model takes to load): the socket, pid
 * file, TCP port, access log and tokenizer (rank 0), the model files' headers and shard set,
 * and the memory plan. */
#ifndef TPD_PREFLIGHT_H
#define TPD_PREFLIGHT_H

#include "../util/dtype.h"

struct comm;
struct config;

struct tokenizer;

/* Collective. 0 when every rank passed; -1 with err where this rank failed, -2 with err
 * ("another rank failed ...") where only others did. Rank 0 also loads the tokenizer
 * (model.tokenizer, else the model's own) into *tok, for the server: a missing one is one
 * more problem found before the weights (*tok NULL elsewhere and on failure). */
int preflight_serve(struct comm *c, const struct config *cfg, enum dtype kv_type,
                    struct tokenizer **tok, char *err);
/* A file at path (rank 0's SOCKET.pid) that is not a pid file of ours: -1 with err. A
 * missing one, or a regular file of ours with one link (a stale one), passes. */
int pid_file_check(const char *path, char *err);

#endif
