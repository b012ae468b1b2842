/* One generation call of the OpenAI API (rank 0, the HTTP thread of the request): submits
 * the n choices to the scheduler, follows their token events, detokenizes incrementally,
 * applies stop strings (cancelling the sequence on a match) and writes the response:
 * server-sent events while it runs when streaming, one JSON body at the end otherwise. */
#ifndef TPD_API_GEN_H
#define TPD_API_GEN_H

#include "api.h"

struct scheduler;
struct tokenizer;
struct api_gen;

/* Takes p over (it is cleared) and submits its choices as one group of the client uid
 * (the scheduler's fairness counts them together). 0, or -1 with e: 429 queue full,
 * 503 draining, 400 too long for the context. */
int gen_start(struct api_gen **out, struct scheduler *s, const struct tokenizer *tok,
              const char *model_name, unsigned uid, struct api_params *p, struct api_error *e);
/* Waits up to timeout_s for new tokens and handles what arrived; when streaming, appends
 * the SSE events (ending with `data: [DONE]`) to out. Returns 1 once every choice has
 * finished, 0 otherwise. */
int gen_poll(struct api_gen *g, struct sbuf *out, double timeout_s);
int gen_done(const struct api_gen *g);
int gen_streaming(const struct api_gen *g);
/* Non-streaming, after gen_poll returned 1: the response body and its HTTP status (200,
 * or 503 with an error body when the daemon aborted the request). */
int gen_body(struct api_gen *g, struct sbuf *out);
/* Stops every unfinished choice (client gone); the scheduler frees them within a step. */
void gen_cancel(struct api_gen *g);
/* Every choice calls fn(arg) (from the step loop) when it gets an event or finishes;
 * fn NULL clears it, after which fn is not running and is not called again. */
void gen_set_notify(struct api_gen *g, void (*fn)(void *arg), void *arg);
/* For the access log, from the thread that polls g: tokens of every prompt, those of the
 * first found in the prefix cache, completion tokens of all choices, the first token's
 * time since submission (-1: none yet), the first choice's finish reason (NULL: none). */
struct gen_summary {
    int prompt_tokens, cached_tokens, completion_tokens;
    double ttft_s;
    const char *finish;
};
void gen_summary(struct api_gen *g, struct gen_summary *out);
void gen_ref(struct api_gen *g);
void gen_unref(struct api_gen *g); /* the last reference cancels what still runs */

#endif
