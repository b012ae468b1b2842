/* Token sampling on rank 0: one sampler per request turns a row of logits into the next
 * token (greedy or seeded random, with vLLM's penalties and filters) plus its logprobs.
 * Used by the thread that steps the engine; samplers share nothing, so the rows of one
 * step may be sampled on several threads, one sampler per thread at a time. */
#ifndef TPD_SAMPLER_H
#define TPD_SAMPLER_H

#include <stdint.h>

#include "../util/logit_cand.h"
#include "request.h"

/* What sampler_next does with a row of logits, in vLLM's (v1 engine) order:
 *  1. logprobs: the chosen token's logprob and the top_logprobs best alternatives come from
 *     log_softmax of the raw, unmodified logits (vLLM's default "raw_logprobs").
 *  2. logit_bias is added.
 *  3. repetition_penalty (HF style) for every id seen in the prompt or the output:
 *     logit > 0 ? logit / p : logit * p.
 *  4. frequency and presence penalties (OpenAI style) over output tokens only:
 *     logit -= frequency * count + presence * (count > 0).
 *  5. temperature < 1e-5: greedy argmax of these logits (ties: lowest id); the filters
 *     below are skipped.
 *  6. otherwise logits / temperature, then
 *     min_p: drop p < min_p * p_max;
 *     top_k: keep the k largest (ties: lower id first);
 *     top_p: keep the smallest set, best first, whose mass reaches top_p (mass taken after
 *     top_k and min_p, as vLLM does);
 *     then one uniform draw from the renormalised rest.
 * With top_k the kept tokens are listed best first for the draw (since 2026-11-26: before,
 * in heap order, so a seed gave other tokens with top_k than it gives now).
 * min_p and top_k commute (min_p compares ratios to the best token, which top_k keeps), so
 * the order between them is immaterial; top_p comes last. The generator is xoshiro256**
 * seeded through splitmix64 from sp->seed; every sampler_next call takes exactly one draw,
 * so the same seed, parameters and logits give the same tokens. */

struct sampler;

/* Builds the state for one request: copies sp (and its logit_bias arrays), seeds the
 * generator, counts the prompt for the repetition penalty. Ids outside [0, n_vocab) in
 * prompt or logit_bias are ignored. Returns NULL when n_vocab < 1. */
struct sampler *sampler_new(const struct sampling_params *sp, int n_vocab, const int32_t *prompt,
                            int n_prompt);
void sampler_delete(struct sampler *s);

/* Samples one token from logits[n_vocab], fills ev (when not NULL) with the token and,
 * if sp->logprobs or sp->top_logprobs asked for them, its logprob and the top_logprobs best
 * (best first, ties lower id; logprob and n_top are 0 when not asked), and records the
 * token for the penalties. logits is written during the call and restored before it
 * returns. Cost for a 152k vocabulary on one x86 core (tests/test_sampler.c prints it):
 * ~0.04 ms greedy or top_k <= 2048, ~0.15 ms over the whole row, ~0.15 ms more for logprobs. */
int32_t sampler_next(struct sampler *s, float *logits, struct token_event *ev);
/* A prompt token's score (echo with logprobs): ev gets tok, its logprob under the raw row
 * and the top_logprobs best, as sampler_next reports them; nothing is drawn or recorded. */
void sampler_score(struct sampler *s, const float *logits, int32_t tok, struct token_event *ev);

/* Speculative decoding: verifies the drafted token `draft` against this row of the target
 * model (the row computed with every earlier accepted token in the history, which the
 * penalties see because each verified token is recorded like sampler_next's). Returns the
 * token to emit, with *accepted = (token == draft), and fills ev as sampler_next does.
 *  - greedy: the argmax (the draft is accepted when it is the argmax);
 *  - q == NULL (a deterministic drafter, q a point mass on draft): one ordinary draw from
 *    p, exactly sampler_next's. It equals the draft with probability p(draft) = min(1,
 *    p/q), and otherwise is distributed as p without the draft, renormalised, which is
 *    norm(max(0, p - q)): the rejection rule, and the very tokens sampler_next would give
 *    for the same seed, whatever was drafted;
 *  - q[n_vocab] (the drafter's distribution, from which draft was drawn): accepted with
 *    probability min(1, p(draft) / q(draft)) (one draw); on rejection a second draw from
 *    norm(max(0, p - q)).
 * p is the distribution after every transform of sampler_next (bias, penalties,
 * temperature, min_p, top_k, top_p), so the emitted tokens follow the target's exactly. */
int32_t sampler_verify(struct sampler *s, float *logits, int32_t draft, const float *q,
                       int *accepted, struct token_event *ev);

/* Whether this request's tokens depend only on each row's k best candidates
 * (util/logit_cand.h): no logit_bias, no penalties, no logprobs, and greedy or
 * 0 < top_k <= k. Such a request's rows may come back as candidates (the step loop marks
 * them so in the plan). */
int sampler_light(const struct sampler *s, int k);
/* sampler_next for a light sampler over its row's best k candidates c[0..k) (best first,
 * padding {-inf, -1} last): the same token, the same draw and the same ev as sampler_next
 * over the whole row. */
int32_t sampler_next_cands(struct sampler *s, const struct logit_cand *c, int k,
                           struct token_event *ev);
/* sampler_verify with q == NULL (a drafter that proposes tokens) over candidates, as above. */
int32_t sampler_verify_cands(struct sampler *s, const struct logit_cand *c, int k, int32_t draft,
                             int *accepted, struct token_event *ev);

/* The distribution the next sampler_next would draw from, densely into probs[n_vocab]
 * (zeros outside the kept set; one-hot when greedy). Draws nothing, records nothing.
 * For tests and debugging. */
void sampler_probs(struct sampler *s, float *logits, float *probs);

/* Greedy choice over a plain row: the largest logit, lowest id on ties. */
int sampler_argmax(const float *logits, int n);

#endif
