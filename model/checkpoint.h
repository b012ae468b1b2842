/* A model file opened for loading: modelfile_open, then, in a Hugging Face directory, the
 * checks of its FP8 and INT4 weights against their scales, zero points and group indices
 * (fp8w.h, int4w.h), which read through the opened file. What the weight loader and the
 * start-up checks open, on every rank. */
#ifndef TPD_CHECKPOINT_H
#define TPD_CHECKPOINT_H

#include "modelfile.h"

/* 0, or -1 with err (m then closed and empty), as modelfile_open. */
int checkpoint_open(struct model_file *m, const char *path, char *err);

#endif
