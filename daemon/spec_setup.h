/* Speculative decoding from the [speculative] options: builds the drafter the scheduler
 * gets in sched_opts.spec (serve and generate share it). Rank 0. */
#ifndef TPD_SPEC_SETUP_H
#define TPD_SPEC_SETUP_H

#include "../sched/spec.h"
#include "config.h"

struct engine;

/* Fills o (o->drafter NULL for method "none"). -1 with err on failure. */
int spec_setup(const struct config *cfg, const struct engine *target, struct spec_opts *o,
               char *err);
void spec_teardown(struct spec_opts *o);

#endif
