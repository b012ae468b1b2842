/* A generation request as it passes between an HTTP thread and the step loop on rank 0.
 * The frontend fills the prompt and parameters and submits it; the step loop appends one
 * event per sampled token; the frontend reads events, detokenizes, matches stop strings
 * and may cancel. Both sides hold a reference; the last req_unref frees it. */
#ifndef TPD_REQUEST_H
#define TPD_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define REQ_MAX_TOP_LOGPROBS 20
#define REQ_UID_UNKNOWN 0xffffffffu

struct sampling_params {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off; HF/llama.cpp style, over prompt + output */
    float presence_penalty;   /* 0: off; OpenAI style, over output tokens */
    float frequency_penalty;  /* 0: off */
    uint64_t seed;            /* used when has_seed; else drawn by the frontend */
    int has_seed;
    int n_logit_bias;
    int32_t *logit_bias_ids; /* owned by the request */
    float *logit_bias;
    int logprobs;     /* 1: return the chosen token's logprob */
    int top_logprobs; /* 0..REQ_MAX_TOP_LOGPROBS alternatives per token */
};

/* The defaults every entry point starts from (the API, tpd generate, req_new): OpenAI's,
 * temperature 1 with every filter and penalty off and no seed. */
struct sampling_params sampling_defaults(void);

enum finish_reason {
    FINISH_NONE = 0,
    FINISH_LENGTH,    /* max_tokens or the context reached */
    FINISH_EOS,       /* an end-of-generation token */
    FINISH_CANCELLED, /* the frontend cancelled (disconnect, stop string matched) */
    FINISH_ABORTED,   /* the daemon is shutting down */
};

struct token_event {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[REQ_MAX_TOP_LOGPROBS];
    float top_logprobs[REQ_MAX_TOP_LOGPROBS];
};

struct gen_request {
    /* set before submit, read-only afterwards */
    uint64_t id;
    uint64_t group; /* the API request this is one choice of (its n choices share it); 0: its own */
    unsigned uid;   /* the client's peer uid (SO_PEERCRED); REQ_UID_UNKNOWN over TCP */
    int32_t *prompt; /* owned */
    int n_prompt;
    int max_tokens;
    int ignore_eos;
    int no_speculation; /* 1: never draft for this request (the API's "speculative": false) */
    struct sampling_params sp;
    struct grammar_matcher *grammar; /* owned: constrained decoding (NULL: none); the step loop's */
    int grammar_no_close; /* 1: no budget-aware closer (the API's "guided_close": false): output cut
                             at max_tokens as is; 0: the grammar's mask keeps the output completable
                             within max_tokens and the context (grammar_matcher_mask_budget) */
    uint64_t cache_salt;  /* separates prefix-cache entries (0: shared by all); see block_pool.h */
    /* echo with logprobs: prompt_events[i], i >= 1, is prompt token i scored given the ones
     * before it (sampler_score); [0] stays zero. Allocated [n_prompt] by the frontend, written
     * by the step loop, read by the frontend once req_prompt_scored says so. NULL: none. */
    struct token_event *prompt_events;
    double t_submit;
    uint64_t arrival; /* set by sched_submit: its place in arrival order (lower: older) */

    /* step loop -> frontend, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct token_event *events;
    int n_events, cap_events;
    enum finish_reason finish; /* set once, with the last event */
    double t_first_token;
    int cached_tokens; /* prompt tokens found in the prefix cache (set on admission) */
    int prompt_scored; /* prompt_events complete (set before the first event) */

    /* optional, set by the frontend (req_set_notify): called under mu after each event
     * and at the finish, so that a waiter that sleeps elsewhere can be woken */
    void (*notify)(void *arg);
    void *notify_arg;

    atomic_int cancelled; /* frontend -> step loop */
    atomic_int refs;
};

struct gen_request *req_new(void);
void req_ref(struct gen_request *r);
void req_unref(struct gen_request *r);
/* Step loop side. */
void req_push(struct gen_request *r, const struct token_event *ev);
void req_finish(struct gen_request *r, enum finish_reason why);
void req_set_cached_tokens(struct gen_request *r, int n);
void req_set_prompt_scored(struct gen_request *r);
/* Either side: 1 once every prompt_events entry is written (the step loop no longer touches them).
 */
int req_prompt_scored(struct gen_request *r);
/* Frontend side: the prompt tokens that came from the prefix cache (0 before admission). */
int req_cached_tokens(struct gen_request *r);
/* Frontend side: waits until events beyond `seen` exist or the request finished, or until
 * timeout_s passes; copies up to max new events into out and returns how many (0 on
 * timeout or when finished with nothing new). *finish receives the finish reason (or
 * FINISH_NONE while running). */
int req_wait(struct gen_request *r, int seen, struct token_event *out, int max, double timeout_s,
             enum finish_reason *finish);
void req_cancel(struct gen_request *r);
/* Sets (fn NULL: clears) the notifier; once this returns with NULL, the old one is not
 * running and will not be called again. */
void req_set_notify(struct gen_request *r, void (*fn)(void *arg), void *arg);

#endif
