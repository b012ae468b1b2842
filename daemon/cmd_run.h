/* One-shot commands that run the model under mpirun without the server:
 * `tpd generate` (prompt in, completion out) and `tpd eval` (logits of token sequences
 * run as ragged batches, for tests and references). Every rank runs them. */
#ifndef TPD_CMD_RUN_H
#define TPD_CMD_RUN_H

struct comm;

int cmd_generate(struct comm *c, int argc, char **argv);
int cmd_eval(struct comm *c, int argc, char **argv);

#endif
