#include "spec_setup.h"

#include <string.h>

#include "../sched/drafter.h"
#include "../util/err.h"

int spec_setup(const struct config *cfg, const struct engine *target, struct spec_opts *o, char *err) {
    (void)target;
    memset(o, 0, sizeof *o);
    const char *m = cfg->spec_method ? cfg->spec_method : "none";
    o->k = (int)cfg->spec_k;
    o->max_batch_tokens = (int)cfg->spec_max_batch_tokens;
    if (!strcmp(m, "none")) return 0;
    if (!strcmp(m, "ngram")) {
        o->drafter = drafter_ngram_new((int)cfg->spec_ngram_min, (int)cfg->spec_ngram_max);
        return 0;
    }
    return err_set(err, "speculative.method \"%s\" is not available in this build", m);
}

void spec_teardown(struct spec_opts *o) {
    drafter_free(o->drafter);
    o->drafter = NULL;
}
