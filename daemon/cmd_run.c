#include "cmd_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../comm/comm.h"
#include "../parallel/engine.h"
#include "../tokenizer/chat.h"
#include "../tokenizer/detok.h"
#include "../tokenizer/tokenizer.h"
#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/log.h"
#include "../util/parse.h"
#include "options.h"
#include "../sched/request.h"
#include "../sched/sampler.h"

#define MAX_IDS (1 << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int blocks_for(int tokens, int bs) { return (tokens + bs - 1) / bs; }

/* Opens the engine on every rank; on failure each rank that failed says why. */
static int open_engine(struct engine *e, struct comm *c, struct engine_opts *eo) {
    char err[ERR_LEN] = "";
    eo->local_rank = c->local_rank;
    if (engine_open(e, c, eo, err) == 0) return 0;
    fprintf(stderr, "tpd: rank %d: %s\n", c->rank, err);
    return -1;
}

static int check_ids(const int32_t *ids, int n, int vocab, char *err) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= vocab) return err_set(err, "token id %d is outside the vocabulary (size %d)", ids[i], vocab);
    return 0;
}

/* --prompt TEXT [--chat]: rank 0 loads the tokenizer, renders the chat template when
 * asked, encodes, and broadcasts the ids; every rank returns the same verdict. Rank 0
 * keeps the tokenizer (*tok) to print the completion as text. */
static int prompt_from_text(struct comm *c, const struct run_opts *o, struct tokenizer **tok, int32_t **ids, int *n,
                            char *err) {
    int32_t status[2] = {0, 0}; /* ok, count */
    int32_t *out = NULL;
    if (c->rank == 0) {
        char *text = NULL;
        size_t text_len = strlen(o->prompt), n_ids = 0;
        int flags = TOK_ADD_SPECIAL;
        if (tokenizer_load(tok, o->tokenizer ? o->tokenizer : o->eng.model_path, err)) goto done;
        if (o->chat) { /* the template writes BOS and the role markers itself */
            struct chat_template ct;
            cJSON *msgs = cJSON_CreateArray();
            if (o->system) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "system");
                cJSON_AddStringToObject(m, "content", o->system);
                cJSON_AddItemToArray(msgs, m);
            }
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", o->prompt);
            cJSON_AddItemToArray(msgs, m);
            char *json = cJSON_PrintUnformatted(msgs);
            cJSON_Delete(msgs);
            int r = chat_template_load(&ct, *tok, NULL, err);
            if (!r) {
                r = chat_template_render(&ct, json, 1, NULL, &text, &text_len, err);
                chat_template_free(&ct);
            }
            free(json);
            if (r) goto done;
            flags = TOK_PARSE_SPECIAL;
        }
        if (!tokenizer_encode(*tok, text ? text : o->prompt, text_len, flags, &out, &n_ids, err)) {
            if (n_ids == 0 || n_ids > MAX_IDS) err_set(err, "the prompt encodes to %zu tokens (1..%d allowed)", n_ids, MAX_IDS);
            else status[0] = 1, status[1] = (int32_t)n_ids;
        }
    done:
        free(text);
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

int cmd_generate(struct comm *c, int argc, char **argv) {
    struct run_opts o;
    char err[ERR_LEN] = "";
    if (run_opts_parse(c, argc, argv, &o, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd generate: %s\n", err);
        return 2;
    }
    if (!o.prompt_ids == !o.prompt) {
        if (c->rank == 0) fprintf(stderr, "tpd generate: give exactly one of --prompt TEXT and --prompt-ids 1,2,3\n");
        return 2;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    struct tokenizer *tok = NULL;
    if (o.prompt_ids ? parse_ids(o.prompt_ids, MAX_IDS, &prompt, &n_prompt, err)
                     : prompt_from_text(c, &o, &tok, &prompt, &n_prompt, err)) {
        if (c->rank == 0) fprintf(stderr, "tpd generate: %s\n", err);
        return 2;
    }
    int total = n_prompt + (int)o.n_predict;
    o.eng.n_blocks = blocks_for(total, o.eng.block_size);
    if (!o.eng.max_ctx) o.eng.max_ctx = total;
    struct engine e;
    if (open_engine(&e, c, &o.eng)) {
        free(prompt);
        tokenizer_free(tok);
        return 1;
    }
    int rc = 0;
    const struct model_hparams *hp = &e.model.hp;
    if (check_ids(prompt, n_prompt, hp->vocab_size, err) ||
        (total > e.max_ctx &&
         !err_set(err, "prompt (%d tokens) + %ld new tokens exceeds the context of %d", n_prompt, o.n_predict, e.max_ctx))) {
        if (c->rank == 0) fprintf(stderr, "tpd generate: %s\n", err);
        rc = 2;
    } else if (c->rank != 0) {
        engine_follow(&e);
    } else {
        int32_t *blocks = xmalloc(sizeof(int32_t) * (size_t)o.eng.n_blocks);
        if (kvcache_take(&e.kv, o.eng.n_blocks, blocks)) FATAL("KV cache smaller than planned");
        float *logits = xmalloc(sizeof(float) * (size_t)hp->vocab_size);
        struct sampling_params sp = {.temperature = o.temperature, .top_k = (int)o.top_k, .top_p = o.top_p,
                                     .repetition_penalty = 1, .seed = (uint64_t)o.seed, .has_seed = 1};
        struct sampler *smp = sampler_new(&sp, hp->vocab_size, prompt, n_prompt);
        double t0 = now_s();
        int32_t next = -1;
        // prefill in chunks of at most --chunk tokens
        for (int at = 0; at < n_prompt; at += o.chunk) {
            int n = n_prompt - at < o.chunk ? n_prompt - at : o.chunk;
            plan_clear(&e.plan);
            plan_add(&e.plan, prompt + at, n, at, blocks, blocks_for(at + n, o.eng.block_size), 0);
            engine_step(&e, logits);
        }
        double t1 = now_s();
        int n_gen = 0, pos = n_prompt;
        struct detok dt;
        int as_text = tok != NULL && !o.print_ids;
        if (as_text) detok_init(&dt, tok, TOK_SKIP_SPECIAL);
        for (; n_gen < o.n_predict; n_gen++) {
            next = sampler_next(smp, logits, NULL);
            if (as_text) {
                size_t len;
                const char *piece = detok_push(&dt, next, &len);
                if (piece) fwrite(piece, 1, len, stdout);
            } else {
                printf(n_gen ? ",%d" : "%d", next);
            }
            fflush(stdout);
            int eog = tok ? tokenizer_is_eog(tok, next) : next == hp->eos_id;
            if (!o.ignore_eos && eog) {
                n_gen++;
                break;
            }
            if (n_gen + 1 == o.n_predict) {
                n_gen++;
                break;
            }
            plan_clear(&e.plan);
            plan_add(&e.plan, &next, 1, pos, blocks, blocks_for(pos + 1, o.eng.block_size), 0);
            engine_step(&e, logits);
            pos++;
        }
        if (as_text) {
            size_t len;
            const char *rest = detok_flush(&dt, &len);
            if (rest) fwrite(rest, 1, len, stdout);
            detok_free(&dt);
        }
        printf("\n");
        double t2 = now_s();
        engine_stop(&e);
        /* decode steps = generated tokens after the first, which came from the prefill */
        fprintf(stderr, "timing: prefill_tokens=%d prefill_s=%.6f decode_tokens=%d decode_s=%.6f\n", n_prompt, t1 - t0,
                n_gen > 0 ? n_gen - 1 : 0, t2 - t1);
        sampler_delete(smp);
        free(logits);
        free(blocks);
    }
    engine_close(&e);
    free(prompt);
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
static void eval_group(struct engine *e, struct seq *seqs, int n, int chunk, float *all, float *step_logits) {
    int vocab = e->model.hp.vocab_size, bs = e->kv.block_size;
    for (int i = 0; i < n; i++) {
        seqs[i].done = 0;
        seqs[i].blocks = xmalloc(sizeof(int32_t) * (size_t)blocks_for(seqs[i].n, bs) + 1);
        if (kvcache_take(&e->kv, blocks_for(seqs[i].n, bs), seqs[i].blocks)) FATAL("KV cache smaller than planned");
    }
    for (;;) {
        plan_clear(&e->plan);
        for (int i = 0; i < n; i++) {
            struct seq *s = &seqs[i];
            if (s->done >= s->n) continue;
            int k = s->n - s->done < chunk ? s->n - s->done : chunk;
            plan_add(&e->plan, s->ids + s->done, k, s->done, s->blocks, blocks_for(s->done + k, bs), 1);
        }
        if (e->plan.n_seqs == 0) break;
        engine_step(e, step_logits);
        int row = 0;
        for (int i = 0; i < n; i++) {
            struct seq *s = &seqs[i];
            if (s->done >= s->n) continue;
            int k = s->n - s->done < chunk ? s->n - s->done : chunk;
            memcpy(all + (s->out_at + (size_t)s->done) * (size_t)vocab, step_logits + (size_t)row * vocab,
                   sizeof(float) * (size_t)k * (size_t)vocab);
            row += k;
            s->done += k;
        }
    }
    for (int i = 0; i < n; i++) {
        kvcache_give(&e->kv, blocks_for(seqs[i].n, bs), seqs[i].blocks);
        free(seqs[i].blocks);
    }
}

int cmd_eval(struct comm *c, int argc, char **argv) {
    struct run_opts o;
    char err[ERR_LEN] = "";
    if (run_opts_parse(c, argc, argv, &o, err) || (!o.seqs && !err_set(err, "--seqs \"1,2;3\" is required")) ||
        (!o.out && !err_set(err, "--out FILE is required"))) {
        if (c->rank == 0) fprintf(stderr, "tpd eval: %s\n", err);
        return 2;
    }
    struct seq *seqs;
    int n_seqs;
    if (parse_seqs(o.seqs, &seqs, &n_seqs, err)) {
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
        o.eng.n_blocks += blocks_for(seqs[i].n, o.eng.block_size);
    }
    if (!o.eng.max_ctx) o.eng.max_ctx = longest;
    struct engine e;
    int rc = 0;
    if (open_engine(&e, c, &o.eng)) {
        rc = 1;
        goto out;
    }
    int vocab = e.model.hp.vocab_size;
    for (int i = 0; i < n_seqs && !rc; i++)
        if (check_ids(seqs[i].ids, seqs[i].n, vocab, err) ||
            (seqs[i].n > e.max_ctx && !err_set(err, "sequence %d is longer than the context %d", i + 1, e.max_ctx))) {
            if (c->rank == 0) fprintf(stderr, "tpd eval: %s\n", err);
            rc = 2;
        }
    if (!rc && c->rank != 0) {
        engine_follow(&e);
    } else if (!rc) {
        float *all = xmalloc(sizeof(float) * total * (size_t)vocab);
        int step_cap = o.separate ? longest : (int)total;
        float *step = xmalloc(sizeof(float) * (size_t)(step_cap < o.chunk * n_seqs ? step_cap : o.chunk * n_seqs) * (size_t)vocab + 4);
        if (o.separate)
            for (int i = 0; i < n_seqs; i++) eval_group(&e, &seqs[i], 1, o.chunk, all, step);
        else
            eval_group(&e, seqs, n_seqs, o.chunk, all, step);
        engine_stop(&e);
        FILE *f = fopen(o.out, "wb");
        if (!f || fwrite(all, sizeof(float) * (size_t)vocab, total, f) != total) {
            fprintf(stderr, "tpd eval: cannot write %s\n", o.out);
            rc = 1;
        }
        if (f && fclose(f)) rc = 1;
        free(step);
        free(all);
    }
    engine_close(&e);
out:
    for (int i = 0; i < n_seqs; i++) free(seqs[i].ids);
    free(seqs);
    return rc;
}
