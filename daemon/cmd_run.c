#include "cmd_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../comm/comm.h"
#include "../parallel/engine.h"
#include "../grammar/grammar.h"
#include "../server/api_grammar.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/detok.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "../util/parse.h"
#include "../util/sbuf.h"
#include "../sched/block_pool.h"
#include "spec_setup.h"
#include "../sched/metrics.h"
#include "options.h"
#include "../sched/request.h"
#include "../sched/scheduler.h"
#include "../util/clock.h"

#define MAX_IDS (1 << 20)

/* Opens the engine on every rank; on failure each rank that failed says why. */
static struct engine *open_engine(struct comm *c, struct engine_opts *eo) {
    char err[ERR_LEN] = "";
    struct engine *e;
    eo->local_rank = c->local_rank;
    if (engine_open(&e, c, eo, err) == 0) return e;
    fprintf(stderr, "tpd: rank %d: %s\n", c->rank, err);
    return NULL;
}

static int check_ids(const int32_t *ids, int n, int vocab, char *err) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return err_set(err, "token id %d is outside the vocabulary (size %d)", ids[i], vocab);
    return 0;
}

/* --prompt TEXT [--chat]: rank 0 loads the tokenizer, renders the chat template when
 * asked, encodes, and broadcasts the ids; every rank returns the same verdict. Rank 0
 * keeps the tokenizer (*tok) to print the completion as text. */
static int prompt_from_text(struct comm *c, const struct run_opts *o, struct tokenizer **tok,
                            int32_t **ids, int *n, char *err) {
    int32_t status[2] = {0, 0}; /* ok, count */
    int32_t *out = NULL;
    if (c->rank == 0) {
        size_t text_len = strlen(o->cfg.prompt), n_ids = 0;
        int flags = TOK_ADD_SPECIAL;
        if (tokenizer_load(tok, o->cfg.tokenizer ? o->cfg.tokenizer : o->eng.model_path, err))
            goto done;
        if (o->cfg.chat) { /* the template writes BOS and the role markers itself */
            struct chat_template ct;
            cJSON *msgs = cJSON_CreateArray();
            if (o->cfg.system) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "system");
                cJSON_AddStringToObject(m, "content", o->cfg.system);
                cJSON_AddItemToArray(msgs, m);
            }
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", o->cfg.prompt);
            cJSON_AddItemToArray(msgs, m);
            char *json = cJSON_PrintUnformatted(msgs);
            cJSON_Delete(msgs);
            /* special-token text in --prompt/--system stays plain text (chat.h) */
            int r = chat_template_load(&ct, *tok, NULL, err);
            if (!r) {
                r = chat_template_encode(&ct, *tok, json, 1, NULL, 0, &out, &n_ids, NULL, NULL,
                                         err);
                chat_template_free(&ct);
            }
            free(json);
            if (r) goto done;
        }
        if (!o->cfg.chat &&
            tokenizer_encode(*tok, o->cfg.prompt, text_len, flags, &out, &n_ids, err))
            goto done;
        if (n_ids == 0 || n_ids > MAX_IDS)
            err_set(err, "the prompt encodes to %zu tokens (1..%d allowed)", n_ids, MAX_IDS);
        else status[0] = 1, status[1] = (int32_t)n_ids;
    done:;
    }
    comm_bcast(c, status, sizeof status, 0);
    if (!status[0]) {
        if (c->rank != 0) err_set(err, "rank 0 could not tokenize the prompt");
        free(out);
        tokenizer_free(*tok);
        *tok = NULL;
        return -1;
    }
    if (c->rank != 0) out = xmalloc(sizeof(int32_t) * (size_t)status[1]);
    comm_bcast(c, out, sizeof(int32_t) * (size_t)status[1], 0);
    *ids = out;
    *n = status[1];
    return 0;
}

/* --json-schema FILE / --grammar FILE: r's output is constrained to the grammar. 0, or 2
 * with err. */
static int constrain(struct gen_request *r, const struct run_opts *o, const struct tokenizer *tok,
                     struct grammar_vocab **gv, char *err) {
    if (o->cfg.json_schema && o->cfg.grammar)
        return err_set(err, "give at most one of --json-schema and --grammar"), 2;
    if (!tok)
        return err_set(err, "--json-schema and --grammar need the tokenizer (give --prompt, not "
                            "--prompt-ids)"),
               2;
    const char *path = o->cfg.json_schema ? o->cfg.json_schema : o->cfg.grammar;
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, "%s: cannot open", path), 2;
    struct sbuf text = {0};
    int rc = sbuf_add_stream(&text, f);
    fclose(f);
    if (rc) {
        sbuf_free(&text);
        return err_set(err, "%s: read error", path), 2;
    }
    *gv = api_grammar_vocab(tok);
    char why[ERR_LEN];
    struct grammar *g = grammar_compile(
        *gv, o->cfg.json_schema ? GRAMMAR_JSON_SCHEMA : GRAMMAR_GBNF, text.p, text.len, why);
    sbuf_free(&text);
    if (!g) return err_set(err, "%s: %s", path, why), 2;
    r->grammar = grammar_matcher_new(g);
    grammar_unref(g);
    return 0;
}

/* Rank 0: submits the prompt as one request to the scheduler the daemon uses and runs its
 * step loop until the request ends, printing tokens as they arrive. */
static int generate_rank0(struct engine *e, const struct run_opts *o, const struct tokenizer *tok,
                          int32_t *prompt, int n_prompt) {
    struct metrics *m = metrics_new();
    struct sched_opts so;
    options_sched(&o->cfg, CMD_GENERATE, tok, engine_info(e), &so);
    char err[ERR_LEN] = "";
    if (spec_setup(&o->cfg, e, &so.spec, err)) {
        fprintf(stderr, "tpd generate: %s\n", err);
        metrics_free(m);
        free(prompt);
        return 2;
    }
    struct scheduler *s = sched_new(e, &so, m);
    struct gen_request *r = req_new();
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    r->max_tokens = (int)o->cfg.n_predict;
    r->ignore_eos = o->cfg.ignore_eos;
    r->sp.temperature = (float)o->cfg.temperature;
    r->sp.top_k = (int)o->cfg.top_k;
    r->sp.top_p = (float)o->cfg.top_p;
    r->sp.seed = (uint64_t)o->cfg.seed;
    r->sp.has_seed = 1;
    int rc = 0;
    struct grammar_vocab *gv = NULL;
    if (o->cfg.json_schema || o->cfg.grammar) {
        rc = constrain(r, o, tok, &gv, err);
        if (rc) fprintf(stderr, "tpd generate: %s\n", err);
    }
    if (!rc && sched_submit(s, r, err) != SUBMIT_OK) {
        fprintf(stderr, "tpd generate: %s\n", err);
        rc = 2;
    }
    struct detok dt;
    int as_text = tok != NULL && !o->cfg.print_ids;
    if (as_text) detok_init(&dt, tok, TOK_SKIP_SPECIAL);
    enum finish_reason fin = FINISH_NONE;
    int n_gen = 0;
    while (!rc && fin == FINISH_NONE) {
        sched_step(s, 0);
        struct token_event ev[64];
        int n;
        while ((n = req_wait(r, n_gen, ev, 64, 0, &fin)) > 0)
            for (int i = 0; i < n; i++, n_gen++) {
                if (as_text) {
                    size_t len;
                    const char *piece = detok_push(&dt, ev[i].token, &len);
                    if (piece) fwrite(piece, 1, len, stdout);
                } else {
                    printf(n_gen ? ",%d" : "%d", ev[i].token);
                }
                fflush(stdout);
            }
    }
    double t_end = clock_now();
    if (as_text) {
        size_t len;
        const char *rest = detok_flush(&dt, &len);
        if (rest) fwrite(rest, 1, len, stdout);
        detok_free(&dt);
    }
    if (!rc && so.spec.drafter) {
        struct sched_stats sst;
        sched_stats(s, &sst);
        fprintf(stderr, "speculative: drafted=%ld accepted=%ld verify_steps=%ld\n",
                sst.spec_drafted, sst.spec_accepted, sst.spec_verified);
    }
    if (!rc && r->grammar && grammar_matcher_error(r->grammar)) { /* the output ends there, cut */
        fprintf(stderr,
                "tpd generate: the grammar became too costly to match after %d tokens: %s\n", n_gen,
                grammar_matcher_error(r->grammar));
        rc = 2;
    }
    if (!rc) {
        printf("\n");
        fflush(stdout); /* the line ends before the timing line on stderr (2>&1 keeps the order) */
        /* decode steps = generated tokens after the first, which came from the prefill */
        double t_first = n_gen ? r->t_first_token : t_end;
        fprintf(stderr, "timing: prefill_tokens=%d prefill_s=%.6f decode_tokens=%d decode_s=%.6f\n",
                n_prompt, t_first - r->t_submit, n_gen > 0 ? n_gen - 1 : 0, t_end - t_first);
    }
    req_unref(r); /* owns the prompt and the grammar state */
    grammar_vocab_free(gv);
    sched_free(s);
    spec_teardown(&so.spec);
    metrics_free(m);
    return rc;
}

/* The command after its options are parsed; o is a copy (its strings stay owned by the caller's).
 */
static int generate(struct comm *c, struct run_opts o) {
    char err[ERR_LEN] = "";
    if (!o.cfg.prompt_ids == !o.cfg.prompt) {
        if (c->rank == 0)
            fprintf(stderr,
                    "tpd generate: give exactly one of --prompt TEXT and --prompt-ids 1,2,3\n");
        return 2;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    struct tokenizer *tok = NULL;
    if (o.cfg.prompt_ids ? parse_ids(o.cfg.prompt_ids, MAX_IDS, &prompt, &n_prompt, err)
                         : prompt_from_text(c, &o, &tok, &prompt, &n_prompt, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd generate: %s\n", err);
        return 2;
    }
    /* the cache holds exactly this request: prompt + every token it may generate */
    int total = n_prompt + (int)o.cfg.n_predict;
    o.eng.n_blocks = block_pool_blocks_for(total + 1, o.eng.block_size);
    o.eng.sink_blocks = o.eng.n_blocks;
    if (!o.eng.max_ctx) o.eng.max_ctx = total;
    struct engine *e = open_engine(c, &o.eng);
    if (!e) {
        free(prompt);
        tokenizer_free(tok);
        return 1;
    }
    int rc = 0;
    const struct engine_info *info = engine_info(e);
    if (check_ids(prompt, n_prompt, info->vocab,
                  err)) { /* the context is the scheduler's to check */
        if (c->rank == 0) fprintf(stderr, "tpd generate: %s\n", err);
        free(prompt);
        rc = 2;
    } else if (c->rank != 0) {
        free(prompt);
        engine_follow(e);
    } else {
        rc = generate_rank0(e, &o, tok, prompt, n_prompt);
        engine_stop(e);
    }
    engine_close(e);
    tokenizer_free(tok);
    return rc;
}

struct seq {
    int32_t *ids;
    int n, done;
    int32_t *blocks;
    size_t out_at; /* first row of this sequence in the output */
};

static int parse_seqs(const char *s, struct seq **out, int *n_out, char *err) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ';';
    struct seq *seqs = xcalloc((unsigned long)n, sizeof *seqs);
    char *copy = strdup(s), *part = copy;
    for (int i = 0; i < n; i++) {
        char *semi = strchr(part, ';');
        if (semi) *semi = 0;
        if (parse_ids(part, MAX_IDS, &seqs[i].ids, &seqs[i].n, err)) {
            err_set(err, "sequence %d: invalid id list", i + 1);
            for (int j = 0; j < i; j++) free(seqs[j].ids);
            free(seqs);
            free(copy);
            return -1;
        }
        part = semi ? semi + 1 : part;
    }
    free(copy);
    *out = seqs;
    *n_out = n;
    return 0;
}

/* Runs the given sequences together, each fed `chunk` tokens per step; stores the
 * logits of every token at its row of `all`. */
static void eval_group(struct engine *e, struct block_pool *pool, struct step_plan *plan,
                       struct seq *seqs, int n, int chunk, float *all, float *step_logits) {
    int vocab = engine_info(e)->vocab, bs = engine_info(e)->block_size;
    for (int i = 0; i < n; i++) {
        seqs[i].done = 0;
        seqs[i].blocks = xmalloc(sizeof(int32_t) * (size_t)block_pool_blocks_for(seqs[i].n, bs) +
                                 1);
        if (block_pool_take(pool, block_pool_blocks_for(seqs[i].n, bs), seqs[i].blocks, 1))
            FATAL("KV cache smaller than planned");
    }
    for (;;) {
        plan_clear(plan);
        for (int i = 0; i < n; i++) {
            struct seq *s = &seqs[i];
            if (s->done >= s->n) continue;
            int k = s->n - s->done < chunk ? s->n - s->done : chunk;
            plan_add(plan, s->ids + s->done, k, s->done, s->blocks,
                     block_pool_blocks_for(s->done + k, bs), 1);
        }
        if (plan->n_seqs == 0) break;
        engine_step(e, plan, step_logits);
        int row = 0;
        for (int i = 0; i < n; i++) {
            struct seq *s = &seqs[i];
            if (s->done >= s->n) continue;
            int k = s->n - s->done < chunk ? s->n - s->done : chunk;
            memcpy(all + (s->out_at + (size_t)s->done) * (size_t)vocab,
                   step_logits + (size_t)row * vocab, sizeof(float) * (size_t)k * (size_t)vocab);
            row += k;
            s->done += k;
        }
    }
    for (int i = 0; i < n; i++) {
        block_pool_release(pool, block_pool_blocks_for(seqs[i].n, bs), seqs[i].blocks);
        free(seqs[i].blocks);
    }
}

static int eval(struct comm *c, struct run_opts o) {
    char err[ERR_LEN] = "";
    if ((!o.cfg.seqs && !err_set(err, "--seqs \"1,2;3\" is required")) ||
        (!o.cfg.out && !err_set(err, "--out FILE is required"))) {
        if (c->rank == 0) fprintf(stderr, "tpd eval: %s\n", err);
        return 2;
    }
    struct seq *seqs;
    int n_seqs;
    if (parse_seqs(o.cfg.seqs, &seqs, &n_seqs, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd eval: --seqs: %s\n", err);
        return 2;
    }
    size_t total = 0;
    int longest = 0;
    o.eng.n_blocks = 0;
    for (int i = 0; i < n_seqs; i++) {
        seqs[i].out_at = total;
        total += (size_t)seqs[i].n;
        if (seqs[i].n > longest) longest = seqs[i].n;
        o.eng.n_blocks += block_pool_blocks_for(seqs[i].n, o.eng.block_size);
    }
    o.eng.sink_blocks = o.eng.n_blocks; /* every sequence's first block has its sink */
    if (!o.eng.max_ctx) o.eng.max_ctx = longest;
    int rc = 0;
    struct engine *e = open_engine(c, &o.eng);
    if (!e) {
        rc = 1;
        goto out;
    }
    int vocab = engine_info(e)->vocab, max_ctx = engine_info(e)->max_ctx;
    for (int i = 0; i < n_seqs && !rc; i++)
        if (check_ids(seqs[i].ids, seqs[i].n, vocab, err) ||
            (seqs[i].n > max_ctx &&
             !err_set(err, "sequence %d is longer than the context %d", i + 1, max_ctx))) {
            if (c->rank == 0) fprintf(stderr, "tpd eval: %s\n", err);
            rc = 2;
        }
    if (!rc && c->rank != 0) {
        engine_follow(e);
    } else if (!rc) {
        /* eval tests the engine itself: a plan built here, blocks from its own pool */
        struct block_pool pool;
        struct step_plan plan;
        block_pool_init(&pool, engine_info(e)->n_blocks, engine_info(e)->block_size, 0,
                        engine_info(e)->sink_blocks);
        plan_init(&plan);
        float *all = xmalloc(sizeof(float) * total * (size_t)vocab);
        int step_cap = o.cfg.separate ? longest : (int)total;
        const int chunk = (int)o.cfg.chunk;
        float *step = xmalloc(sizeof(float) *
                                  (size_t)(step_cap < chunk * n_seqs ? step_cap : chunk * n_seqs) *
                                  (size_t)vocab +
                              4);
        if (o.cfg.separate)
            for (int i = 0; i < n_seqs; i++)
                eval_group(e, &pool, &plan, &seqs[i], 1, chunk, all, step);
        else eval_group(e, &pool, &plan, seqs, n_seqs, chunk, all, step);
        engine_stop(e);
        plan_free(&plan);
        block_pool_free(&pool);
        FILE *f = fopen(o.cfg.out, "wb");
        if (!f || fwrite(all, sizeof(float) * (size_t)vocab, total, f) != total) {
            fprintf(stderr, "tpd eval: cannot write %s\n", o.cfg.out);
            rc = 1;
        }
        if (f && fclose(f)) rc = 1;
        free(step);
        free(all);
    }
    engine_close(e);
out:
    for (int i = 0; i < n_seqs; i++) free(seqs[i].ids);
    free(seqs);
    return rc;
}

/* Both commands: parse the options from the one table, run, free what parsing made. */
static int run_command(struct comm *c, int argc, char **argv,
                       int (*fn)(struct comm *, struct run_opts)) {
    struct run_opts o;
    char err[ERR_LEN] = "";
    if (run_opts_parse(c, argc, argv, &o, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd %s: %s\n", argv[0], err);
        return 2;
    }
    enum log_level lvl;
    if (!log_parse_level(o.cfg.log_level, &lvl)) log_init(c->rank, lvl, 0);
    int rc = fn(c, o);
    run_opts_free(&o);
    return rc;
}

int cmd_generate(struct comm *c, int argc, char **argv) {
    return run_command(c, argc, argv, generate);
}
int cmd_eval(struct comm *c, int argc, char **argv) { return run_command(c, argc, argv, eval); }
