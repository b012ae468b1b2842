#include "spec_setup.h"

#include <string.h>

#include "../parallel/engine.h"
#include "../sched/draft_model.h"
#include "../sched/drafter.h"
#include "options.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"

/* The draft model's tokenizer must be the model's: same ids for the same bytes. Skipped
 * where a tokenizer cannot be loaded (a synthetic model): the engines' vocab sizes are still
 * compared when the draft model opens. */
static int same_tokenizer(const char *target, const char *draft, char *err) {
    struct tokenizer *a = NULL, *b = NULL;
    char e[ERR_LEN];
    int rc = 0;
    if (!target || tokenizer_load(&a, target, e)) goto done;
    if (tokenizer_load(&b, draft, e)) {
        rc = err_set(err, "speculative.draft_model %s: its tokenizer: %s", draft, e);
        goto done;
    }
    if (tokenizer_n_vocab(a) != tokenizer_n_vocab(b)) {
        rc = err_set(err,
                     "speculative.draft_model %s has %u tokens, the model's tokenizer %u: a draft "
                     "model must share "
                     "the model's tokenizer",
                     draft, tokenizer_n_vocab(b), tokenizer_n_vocab(a));
        goto done;
    }
    for (uint32_t id = 0; id < tokenizer_n_vocab(a); id++) {
        size_t la, lb;
        const char *ta = tokenizer_token_bytes(a, (int32_t)id, &la),
                   *tb = tokenizer_token_bytes(b, (int32_t)id, &lb);
        if (la != lb || (la && memcmp(ta, tb, la))) {
            rc = err_set(err,
                         "speculative.draft_model %s: token %u differs from the model's: a draft "
                         "model must share "
                         "the model's tokenizer",
                         draft, id);
            goto done;
        }
    }
done:
    tokenizer_free(a);
    tokenizer_free(b);
    return rc;
}

int spec_setup(const struct config *cfg, const struct engine *target, struct spec_opts *o,
               char *err) {
    memset(o, 0, sizeof *o);
    const char *m = cfg->spec_method ? cfg->spec_method : "none";
    o->k = (int)cfg->spec_k;
    /* auto: the CPU's matmul kernels are compute-bound beyond a few tokens per weight read
     * (bench_matmul: 5 tokens cost 4-5x one), a GPU's only past dozens */
    o->max_batch_tokens = cfg->spec_max_batch_tokens ? (int)cfg->spec_max_batch_tokens
                          : engine_info(target)->gpu ? 64
                                                     : 4;
    if (!strcmp(m, "none")) return 0;
    if (!strcmp(m, "ngram")) {
        o->drafter = drafter_ngram_new((int)cfg->spec_ngram_min, (int)cfg->spec_ngram_max);
        return 0;
    }
    /* "draft" (config_validate_for checked the choices) */
    if (!cfg->spec_draft_model)
        return err_set(err, "speculative.method \"draft\" needs speculative.draft_model (a model "
                            "with the same tokenizer)");
    if (same_tokenizer(cfg->tokenizer ? cfg->tokenizer : cfg->model_path, cfg->spec_draft_model,
                       err))
        return -1;
    const struct engine_info *ti = engine_info(target);
    /* the target's options, for one rank and the target's cache shape */
    struct engine_opts eo;
    const enum dtype kv = cfg->kv_type && !strcmp(cfg->kv_type, "f32") ? DT_F32 : DT_F16;
    options_engine(cfg, CMD_GENERATE, kv, &eo);
    eo.model_path = cfg->spec_draft_model;
    eo.synthetic = NULL;
    eo.pp = 0;
    eo.block_size = ti->block_size;
    eo.n_blocks = ti->n_blocks;
    eo.max_ctx = ti->max_ctx;
    o->drafter = draft_model_new(&eo, ti->vocab, err);
    return o->drafter ? 0 : -1;
}

void spec_teardown(struct spec_opts *o) {
    drafter_free(o->drafter);
    o->drafter = NULL;
}
