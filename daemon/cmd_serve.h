/* `tpd serve`: the daemon. Every rank loads its shards and runs the step loop; rank 0 also
 * runs the HTTP frontend, tokenizer, scheduler and sampler. SIGTERM to rank 0 drains:
 * stop accepting, finish in-flight requests up to server.drain_timeout_s, then every
 * rank exits 0. Also `tpd config`, which prints one key of the effective configuration
 * (for launch/tpd-launch). */
#ifndef TPD_CMD_SERVE_H
#define TPD_CMD_SERVE_H

struct comm;

int cmd_serve(struct comm *c, int argc, char **argv);
int cmd_config(struct comm *c, int argc, char **argv);

#endif
