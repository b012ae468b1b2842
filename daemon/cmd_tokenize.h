/* `tpd tokenize`: prints the token ids of a text as a JSON array (like llama-tokenize).
 * Runs on the command line only; no ranks. */
#ifndef TPD_CMD_TOKENIZE_H
#define TPD_CMD_TOKENIZE_H

/* argv[0] is the command name ("tokenize"). Returns the process exit code. */
int cmd_tokenize(int argc, char **argv);

#endif
