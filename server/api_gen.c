#include "api_gen.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../grammar/grammar.h"
#include "../tokenizer/detok.h"
#include "../tokenizer/tokenizer.h"
#include "../util/clock.h"
#include "../util/fatal.h"
#include "api_stop.h"
#include "toolcall.h"
#include "../sched/scheduler.h"

#define EVENTS_PER_WAIT 64

struct gen_choice {
    struct gen_request *r;
    int seen;     /* events consumed */
    int n_tokens; /* completion tokens counted (up to and with a stop match) */
    struct detok dt;
    struct stop_matcher sm;
    size_t text_pos;    /* bytes of text produced so far (completions' text_offset) */
    const char *finish; /* "stop", "length", "abort"; NULL while running */
    int aborted;
    const char *grammar_err; /* the grammar's limit hit while generating (grammar_matcher_error) */
    /* non-streaming: the whole output */
    struct sbuf text;
    cJSON *lp;          /* logprobs object, or NULL */
    int prompt_lp_sent; /* echo with logprobs: the prompt's entries are in an lp already */
    /* tool calling on: the output goes through the call parser */
    int tc_on;
    struct toolcall_parser tc;
    int calls_sent; /* streaming: calls already sent as deltas */
};

struct api_gen {
    atomic_int refs;
    const struct tokenizer *tok;
    char id[64];
    char *model;
    long created;
    struct api_params p;
    int started;  /* streaming: the opening events were written */
    int finished; /* every choice done, and (streaming) [DONE] written */
    int n;
    struct gen_choice c[API_MAX_N];
    /* the call format's markers that are control tokens (the detokenizer drops those) */
    int n_markers;
    int32_t marker_id[4];
    const char *marker_text[4];
};

static void make_id(char *out, size_t n, const char *prefix) {
    uint64_t r[2];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        static atomic_ulong ctr;
        r[0] = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
        r[1] = atomic_fetch_add(&ctr, 1) + (uint64_t)clock_now();
    }
    snprintf(out, n, "%s-%016llx%016llx", prefix, (unsigned long long)r[0],
             (unsigned long long)r[1]);
}

static void free_choice(struct gen_choice *c) {
    if (c->r) {
        if (!c->finish) req_cancel(c->r);
        req_unref(c->r);
    }
    detok_free(&c->dt);
    stop_free(&c->sm);
    sbuf_free(&c->text);
    cJSON_Delete(c->lp);
    if (c->tc_on) toolcall_parser_free(&c->tc);
}

static void gen_free(struct api_gen *g) {
    for (int i = 0; i < g->n; i++) free_choice(&g->c[i]);
    api_params_free(&g->p);
    free(g->model);
    free(g);
}

void gen_ref(struct api_gen *g) { atomic_fetch_add(&g->refs, 1); }

void gen_summary(struct api_gen *g, struct gen_summary *out) {
    memset(out, 0, sizeof *out);
    out->ttft_s = -1;
    out->prompt_tokens = g->p.n_prompt;
    for (int k = 1; k < g->p.n_prompts; k++) out->prompt_tokens += g->p.more[k - 1].n;
    out->cached_tokens = g->n && g->c[0].r ? req_cached_tokens(g->c[0].r) : 0;
    out->finish = g->n ? g->c[0].finish : NULL;
    for (int i = 0; i < g->n; i++) {
        const struct gen_choice *c = &g->c[i];
        out->completion_tokens += c->n_tokens;
        /* t_first_token is written before the first event, which req_wait handed over */
        double t = c->seen > 0 ? c->r->t_first_token - c->r->t_submit : -1;
        if (t >= 0 && (out->ttft_s < 0 || t < out->ttft_s)) out->ttft_s = t;
    }
}

void gen_unref(struct api_gen *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) gen_free(g);
}

void gen_cancel(struct api_gen *g) {
    for (int i = 0; i < g->n; i++)
        if (g->c[i].r && !g->c[i].finish) req_cancel(g->c[i].r);
}

void gen_set_notify(struct api_gen *g, void (*fn)(void *arg), void *arg) {
    for (int i = 0; i < g->n; i++)
        if (g->c[i].r) req_set_notify(g->c[i].r, fn, arg);
}

int gen_done(const struct api_gen *g) { return g->finished; }
int gen_streaming(const struct api_gen *g) { return g->p.stream; }

/* Prompt k of p (0: the first), with its echo text. */
static const int32_t *prompt_of(const struct api_params *p, int k, int *n, const char **text,
                                size_t *len) {
    if (k == 0) {
        *n = p->n_prompt, *text = p->echo_text, *len = p->echo_len;
        return p->prompt;
    }
    *n = p->more[k - 1].n, *text = p->more[k - 1].echo_text, *len = p->more[k - 1].echo_len;
    return p->more[k - 1].ids;
}

/* Choice i: the (i % n)-th of prompt i / n. */
static struct gen_request *make_request(const struct api_params *p, int i) {
    struct gen_request *r = req_new();
    const char *text;
    size_t text_len;
    int n_prompt;
    const int32_t *prompt = prompt_of(p, i / p->n, &n_prompt, &text, &text_len);
    r->prompt = xmalloc(sizeof *r->prompt * (size_t)n_prompt);
    memcpy(r->prompt, prompt, sizeof *r->prompt * (size_t)n_prompt);
    r->n_prompt = n_prompt;
    r->max_tokens = p->max_tokens;
    r->ignore_eos = p->ignore_eos;
    r->no_speculation = !p->speculative;
    if (p->grammar) r->grammar = grammar_matcher_new(p->grammar); /* each choice its own state */
    r->grammar_no_close = !p->guided_close;
    r->sp = p->sp;
    r->sp.seed = p->sp.seed +
                 (uint64_t)(i % p->n); /* n choices: n different streams (per prompt) */
    r->sp.logit_bias_ids = NULL;
    r->sp.logit_bias = NULL;
    if (p->sp.n_logit_bias) {
        size_t k = (size_t)p->sp.n_logit_bias;
        r->sp.logit_bias_ids = xmalloc(sizeof(int32_t) * k);
        r->sp.logit_bias = xmalloc(sizeof(float) * k);
        memcpy(r->sp.logit_bias_ids, p->sp.logit_bias_ids, sizeof(int32_t) * k);
        memcpy(r->sp.logit_bias, p->sp.logit_bias, sizeof(float) * k);
    }
    /* echo with logprobs: the step loop scores the prompt too (lm-evaluation-harness's
     * loglikelihood requests) */
    if (p->echo && p->logprobs)
        r->prompt_events = xcalloc((size_t)n_prompt, sizeof *r->prompt_events);
    r->t_submit = clock_now();
    return r;
}

int gen_start(struct api_gen **out, struct scheduler *s, const struct tokenizer *tok,
              const char *model_name, unsigned uid, struct api_params *p, struct api_error *e) {
    static atomic_ullong next_id = 1;
    struct api_gen *g = xcalloc(1, sizeof *g);
    atomic_init(&g->refs, 1);
    g->tok = tok;
    g->p = *p;
    memset(p, 0, sizeof *p);
    g->model = xstrdup(model_name ? model_name : "tpd");
    g->created = (long)time(NULL);
    make_id(g->id, sizeof g->id, g->p.kind == API_CHAT ? "chatcmpl" : "cmpl");
    const struct api_tools *tools = &g->p.tools;
    int tc_on = g->p.kind == API_CHAT && tools->n && tools->choice != TOOL_CHOICE_NONE;
    for (const char *const *m = toolcall_markers(tc_on ? tools->format : TOOL_FORMAT_NONE);
         *m && g->n_markers < 4; m++) {
        int32_t id = tokenizer_find(tok, *m, strlen(*m));
        if (id >= 0 && tokenizer_is_special(tok, id)) {
            g->marker_id[g->n_markers] = id;
            g->marker_text[g->n_markers++] = *m;
        }
    }
    for (int i = 0; i < g->p.n * g->p.n_prompts; i++) {
        struct gen_choice *c = &g->c[i];
        if (tc_on) {
            c->tc_on = 1;
            toolcall_parser_init(&c->tc, tools->format, (const char *const *)tools->names, tools->n,
                                 tools->parallel);
            if (tools->prefix) { /* the call's start the prompt ended with: the output continues it
                                  */
                struct sbuf none = {0};
                toolcall_feed(&c->tc, tools->prefix, strlen(tools->prefix), &none);
                sbuf_free(&none);
            }
        }
        detok_init(&c->dt, tok, TOK_SKIP_SPECIAL);
        stop_init(&c->sm, (const char *const *)g->p.stops, g->p.n_stops);
        const char *echo;
        size_t echo_len;
        int n_prompt;
        prompt_of(&g->p, i / g->p.n, &n_prompt, &echo, &echo_len);
        c->text_pos = g->p.echo ? echo_len : 0;
        if (g->p.echo) sbuf_add(&c->text, echo, echo_len);
        g->n = i + 1;
        struct gen_request *r = make_request(&g->p, i);
        r->id = atomic_fetch_add(&next_id, 1);
        r->group = i == 0 ? r->id : g->c[0].r->id;
        r->uid = uid;
        char err[ERR_LEN] = "";
        int rc = sched_submit(s, r, err);
        if (rc != SUBMIT_OK) {
            req_unref(r);
            if (rc == SUBMIT_QUEUE_FULL) {
                api_err(e, 429, "", "the request queue is full; retry later");
                e->code = "queue_full";
            } else if (rc == SUBMIT_DRAINING) {
                api_err(e, 503, "", "the server is shutting down");
                e->code = "draining";
            } else if (rc == SUBMIT_TOO_LONG) {
                api_err(e, 400, "max_tokens", "max_tokens: %s",
                        err[0] ? err : "prompt + max_tokens exceed the context");
            } else {
                api_err(e, 503, "", "the request was refused: %s", err);
            }
            gen_unref(g); /* cancels the choices already submitted */
            return -1;
        }
        c->r = r;
    }
    *out = g;
    return 0;
}

/* ---- logprobs ---- */

static cJSON *token_string(const struct tokenizer *t, int32_t id) {
    size_t n = 0;
    const char *b = tokenizer_token_bytes(t, id, &n);
    if (!b) return cJSON_CreateString("");
    struct sbuf s = {0};
    utf8_lossy_append((const uint8_t *)b, n, &s);
    cJSON *j = cJSON_CreateString(s.p ? s.p : "");
    sbuf_free(&s);
    return j;
}

static cJSON *token_bytes(const struct tokenizer *t, int32_t id) {
    size_t n = 0;
    const char *b = tokenizer_token_bytes(t, id, &n);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; b && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    return a;
}

static cJSON *lp_new(enum api_kind kind) {
    cJSON *o = cJSON_CreateObject();
    if (kind == API_CHAT) {
        cJSON_AddArrayToObject(o, "content");
    } else {
        cJSON_AddArrayToObject(o, "tokens");
        cJSON_AddArrayToObject(o, "token_logprobs");
        cJSON_AddArrayToObject(o, "top_logprobs");
        cJSON_AddArrayToObject(o, "text_offset");
    }
    return o;
}

static void lp_add(const struct api_gen *g, cJSON *lp, const struct token_event *ev, size_t pos) {
    const struct tokenizer *t = g->tok;
    int ntop = ev->n_top < g->p.top_logprobs ? ev->n_top : g->p.top_logprobs;
    if (g->p.kind == API_CHAT) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "token", token_string(t, ev->token));
        cJSON_AddNumberToObject(e, "logprob", ev->logprob);
        cJSON_AddItemToObject(e, "bytes", token_bytes(t, ev->token));
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < ntop; k++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddItemToObject(x, "token", token_string(t, ev->top_ids[k]));
            cJSON_AddNumberToObject(x, "logprob", ev->top_logprobs[k]);
            cJSON_AddItemToObject(x, "bytes", token_bytes(t, ev->top_ids[k]));
            cJSON_AddItemToArray(top, x);
        }
        cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "content"), e);
        return;
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"), token_string(t, ev->token));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"),
                         cJSON_CreateNumber(ev->logprob));
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"), cJSON_CreateNumber((double)pos));
    cJSON *top = cJSON_CreateObject();
    for (int k = 0; k < ntop; k++) {
        cJSON *s = token_string(t, ev->top_ids[k]);
        /* two ids can decode to one string; the object keeps the first (most likely) */
        if (!cJSON_GetObjectItemCaseSensitive(top, s->valuestring))
            cJSON_AddNumberToObject(top, s->valuestring, ev->top_logprobs[k]);
        cJSON_Delete(s);
    }
    cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), top);
}

/* Echo with logprobs: the prompt's tokens ahead of the output's, as OpenAI's legacy
 * completions give them: the first token's logprob and top_logprobs null (nothing comes
 * before it), text offsets from 0 in the echoed prompt. */
static void lp_add_prompt(const struct api_gen *g, struct gen_choice *c, cJSON *lp) {
    struct gen_request *r = c->r;
    int scored = req_prompt_scored(r);
    size_t pos = 0;
    for (int i = 0; i < r->n_prompt; i++) {
        if (i > 0 && scored) {
            lp_add(g, lp, &r->prompt_events[i], pos);
        } else {
            cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "tokens"),
                                 token_string(g->tok, r->prompt[i]));
            cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "token_logprobs"), cJSON_CreateNull());
            cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "top_logprobs"), cJSON_CreateNull());
            cJSON_AddItemToArray(cJSON_GetObjectItem(lp, "text_offset"),
                                 cJSON_CreateNumber((double)pos));
        }
        size_t n = 0;
        if (tokenizer_token_bytes(g->tok, r->prompt[i], &n)) pos += n;
    }
    c->prompt_lp_sent = 1;
}

/* ---- SSE ---- */

static cJSON *chunk_new(const struct api_gen *g) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object",
                            g->p.kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)g->created);
    cJSON_AddStringToObject(o, "model", g->model);
    return o;
}

static void sse_emit(struct sbuf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) FATAL("out of memory for an event");
    sbuf_adds(out, "data: ");
    sbuf_adds(out, s);
    sbuf_adds(out, "\n\n");
    free(s);
}

/* One event for choice i: text (may be empty), its tokens' logprobs, and finish. */
static void sse_choice(const struct api_gen *g, struct sbuf *out, int i, const char *text,
                       size_t len, cJSON *lp, const char *finish, int role) {
    cJSON *o = chunk_new(g);
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    char *t = xmalloc(len + 1);
    memcpy(t, text, len);
    t[len] = 0;
    if (g->p.kind == API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(ch, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (len || role) cJSON_AddStringToObject(d, "content", t);
    } else {
        cJSON_AddStringToObject(ch, "text", t);
    }
    free(t);
    if (lp) cJSON_AddItemToObject(ch, "logprobs", lp);
    else cJSON_AddNullToObject(ch, "logprobs");
    if (finish) cJSON_AddStringToObject(ch, "finish_reason", finish);
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
    if (g->p.include_usage) cJSON_AddNullToObject(o, "usage");
    sse_emit(out, o);
}

static cJSON *usage(const struct api_gen *g) {
    long gen = 0;
    for (int i = 0; i < g->n; i++) gen += g->c[i].n_tokens;
    cJSON *u = cJSON_CreateObject();
    long prompt = g->p.n_prompt; /* a list of prompts: all of them, as OpenAI counts */
    for (int k = 1; k < g->p.n_prompts; k++) prompt += g->p.more[k - 1].n;
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(gen + prompt));
    /* the prompt is shared by the n choices: the first one's prefix-cache hit */
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens",
                            g->n && g->c[0].r ? req_cached_tokens(g->c[0].r) : 0);
    return u;
}

/* The error of a choice whose grammar went past its limits while generating: the client
 * gets it instead of the output (grammar_matcher_error; compile-time refusals are 400s too). */
static void grammar_error(const struct gen_choice *c, struct api_error *e) {
    api_err(e, 400, "", "the grammar became too costly to match after %d tokens: %s", c->n_tokens,
            c->grammar_err);
    e->code = "grammar_too_costly";
}

static const char *finish_name(enum finish_reason f) {
    switch (f) {
    case FINISH_LENGTH: return "length";
    case FINISH_EOS: return "stop";
    default: return "abort";
    }
}

/* The format's marker text when id is one of its markers spelled as a control token. */
static const char *marker_of(const struct api_gen *g, int32_t id) {
    for (int i = 0; i < g->n_markers; i++)
        if (g->marker_id[i] == id) return g->marker_text[i];
    return NULL;
}

/* Streaming: tool calls calls[from..to) of choice i as OpenAI sends them: a delta naming the
 * call (index, id, type, name, empty arguments), then one with its arguments. */
static void sse_tool_calls(const struct api_gen *g, struct sbuf *out, int i,
                           const struct tool_call *calls, int from, int to) {
    for (int k = from; k < to; k++) {
        for (int part = 0; part < 2; part++) {
            cJSON *o = chunk_new(g);
            cJSON *ch = cJSON_CreateObject();
            cJSON_AddNumberToObject(ch, "index", i);
            cJSON *d = cJSON_AddObjectToObject(ch, "delta");
            cJSON *tc = cJSON_CreateObject();
            cJSON_AddNumberToObject(tc, "index", k);
            if (part == 0) {
                cJSON_AddStringToObject(tc, "id", calls[k].id);
                cJSON_AddStringToObject(tc, "type", "function");
            }
            cJSON *fn = cJSON_AddObjectToObject(tc, "function");
            if (part == 0) cJSON_AddStringToObject(fn, "name", calls[k].name);
            cJSON_AddStringToObject(fn, "arguments", part == 0 ? "" : calls[k].arguments);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "tool_calls"), tc);
            cJSON_AddNullToObject(ch, "logprobs");
            cJSON_AddNullToObject(ch, "finish_reason");
            cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), ch);
            if (g->p.include_usage) cJSON_AddNullToObject(o, "usage");
            sse_emit(out, o);
        }
    }
}

/* Takes what choice c has ready (waiting up to timeout_s). Returns how many events or
 * finishes it handled. */
static int step_choice(struct api_gen *g, int i, double timeout_s, struct sbuf *out) {
    struct gen_choice *c = &g->c[i];
    struct token_event ev[EVENTS_PER_WAIT];
    enum finish_reason fin;
    int n = req_wait(c->r, c->seen, ev, EVENTS_PER_WAIT, timeout_s, &fin);
    if (n == 0 && fin == FINISH_NONE) return 0;
    struct sbuf text = {0};
    sbuf_add(&text, "", 0);
    cJSON *lp = NULL;
    if (g->p.logprobs)
        lp = g->p.stream ? lp_new(g->p.kind) : (c->lp ? c->lp : (c->lp = lp_new(g->p.kind)));
    if (lp && c->r->prompt_events && !c->prompt_lp_sent) lp_add_prompt(g, c, lp);
    for (int k = 0; k < n && !c->finish; k++) {
        c->seen++;
        c->n_tokens++;
        size_t plen;
        const char *piece = detok_push(&c->dt, ev[k].token, &plen);
        if (!piece) piece = "", plen = 0; /* an id past the tokenizer: nothing to show */
        const char *marker = c->tc_on ? marker_of(g, ev[k].token) : NULL;
        if (marker) piece = marker, plen = strlen(marker); /* the call parser must see it */
        if (lp) lp_add(g, lp, &ev[k], c->text_pos);
        c->text_pos += plen;
        if (stop_feed(&c->sm, piece, plen, &text)) {
            req_cancel(c->r);
            c->finish = "stop";
        }
    }
    if (!c->finish && fin != FINISH_NONE) {
        size_t plen;
        const char *piece = detok_flush(&c->dt, &plen);
        if (piece && stop_feed(&c->sm, piece, plen, &text)) c->finish = "stop";
        else stop_flush(&c->sm, &text);
        if (!c->finish) c->finish = finish_name(fin);
        c->aborted = fin == FINISH_ABORTED;
        /* the step loop is done with the matcher once the request finished */
        const char *ge = c->r->grammar ? grammar_matcher_error(c->r->grammar) : NULL;
        if (ge && fin != FINISH_CANCELLED && !c->aborted) {
            c->grammar_err = ge;
            c->finish = "error";
        }
    }
    if (c->tc_on) { /* the text the client sees as content is what is not a call */
        struct sbuf shown = {0};
        sbuf_add(&shown, "", 0);
        toolcall_feed(&c->tc, text.p, text.len, &shown);
        if (c->finish) {
            toolcall_finish(&c->tc, &shown);
            if (c->tc.n_calls && !strcmp(c->finish, "stop")) c->finish = "tool_calls";
        }
        sbuf_free(&text);
        text = shown;
    }
    if (g->p.stream) {
        int new_calls = c->tc_on && c->tc.n_calls > c->calls_sent;
        const char *finish = new_calls || c->grammar_err ? NULL : c->finish;
        if (text.len || finish ||
            (lp && cJSON_GetArraySize(
                       cJSON_GetObjectItem(lp, g->p.kind == API_CHAT ? "content" : "tokens"))))
            sse_choice(g, out, i, text.p, text.len, lp, finish, 0);
        else cJSON_Delete(lp);
        if (new_calls) {
            sse_tool_calls(g, out, i, c->tc.calls, c->calls_sent, c->tc.n_calls);
            c->calls_sent = c->tc.n_calls;
            if (c->finish && !c->grammar_err) sse_choice(g, out, i, "", 0, NULL, c->finish, 0);
        }
        if (c->grammar_err) { /* an error event in OpenAI's shape, where the finish would be */
            struct api_error e;
            grammar_error(c, &e);
            size_t len;
            char *j = api_error_json(&e, &len);
            sbuf_adds(out, "data: ");
            sbuf_add(out, j, len);
            sbuf_adds(out, "\n\n");
            free(j);
        }
    } else {
        sbuf_add(&c->text, text.p, text.len);
    }
    sbuf_free(&text);
    return n + (c->finish != NULL);
}

int gen_poll(struct api_gen *g, struct sbuf *out, double timeout_s) {
    if (g->finished) return 1;
    if (g->p.stream && !g->started) {
        /* the opening events go out at once: the client sees its stream start (chat: the
         * role) before the prompt is even processed */
        g->started = 1;
        for (int i = 0; i < g->n; i++) {
            if (g->p.kind == API_CHAT) sse_choice(g, out, i, "", 0, NULL, NULL, 1);
            else if (g->p.echo) {
                const char *echo;
                size_t echo_len;
                int n_prompt;
                prompt_of(&g->p, i / g->p.n, &n_prompt, &echo, &echo_len);
                sse_choice(g, out, i, echo, echo_len, NULL, NULL, 0);
            }
        }
        if (out->len) return 0;
    }
    /* all choices step together, so blocking on the first unfinished one and then
     * collecting the others without waiting keeps every stream moving */
    int got = 0;
    for (int pass = 0; pass < 2 && !got; pass++) {
        int blocked = 0;
        for (int i = 0; i < g->n; i++) {
            if (g->c[i].finish) continue;
            double t = pass == 1 && !blocked ? timeout_s : 0;
            blocked = 1;
            got += step_choice(g, i, t, out);
        }
        if (!blocked) break;
    }
    for (int i = 0; i < g->n; i++)
        if (!g->c[i].finish) return 0;
    if (g->p.stream) {
        if (g->p.include_usage) {
            cJSON *o = chunk_new(g);
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage(g));
            sse_emit(out, o);
        }
        sbuf_adds(out, "data: [DONE]\n\n");
    }
    g->finished = 1;
    return 1;
}

int gen_body(struct api_gen *g, struct sbuf *out) {
    for (int i = 0; i < g->n; i++)
        if (g->c[i].aborted || g->c[i].grammar_err) {
            struct api_error e;
            if (g->c[i].aborted) {
                api_err(&e, 503, "", "the server is shutting down; the request was aborted");
                e.code = "aborted";
            } else {
                grammar_error(&g->c[i], &e);
            }
            size_t len;
            char *s = api_error_json(&e, &len);
            sbuf_add(out, s, len);
            free(s);
            return e.status;
        }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", g->id);
    cJSON_AddStringToObject(o, "object",
                            g->p.kind == API_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)g->created);
    cJSON_AddStringToObject(o, "model", g->model);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < g->n; i++) {
        struct gen_choice *c = &g->c[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        if (g->p.kind == API_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (c->tc_on && c->tc.n_calls && !c->text.len) cJSON_AddNullToObject(m, "content");
            else cJSON_AddStringToObject(m, "content", c->text.p ? c->text.p : "");
            if (c->tc_on && c->tc.n_calls) {
                cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
                for (int k = 0; k < c->tc.n_calls; k++) {
                    const struct tool_call *tc = &c->tc.calls[k];
                    cJSON *x = cJSON_CreateObject();
                    cJSON_AddStringToObject(x, "id", tc->id);
                    cJSON_AddStringToObject(x, "type", "function");
                    cJSON *fn = cJSON_AddObjectToObject(x, "function");
                    cJSON_AddStringToObject(fn, "name", tc->name);
                    cJSON_AddStringToObject(fn, "arguments", tc->arguments);
                    cJSON_AddItemToArray(arr, x);
                }
            }
        } else {
            cJSON_AddStringToObject(ch, "text", c->text.p ? c->text.p : "");
        }
        if (c->lp) {
            cJSON_AddItemToObject(ch, "logprobs", c->lp);
            c->lp = NULL;
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddStringToObject(ch, "finish_reason", c->finish ? c->finish : "abort");
        cJSON_AddItemToArray(arr, ch);
    }
    cJSON_AddItemToObject(o, "usage", usage(g));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) FATAL("out of memory for a response");
    sbuf_adds(out, s);
    free(s);
    return 200;
}
