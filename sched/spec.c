#include "spec.h"

#include <math.h>

#define ACCEPT_WEIGHT 0.3
#define FULL_K_AT 0.5
#define OFF_BELOW 0.1
#define PROBE_EVERY 16

int spec_want(const struct spec_opts *o, struct spec_seq *q, int n_decoding, int room) {
    if (!o->drafter || o->k < 1 || room < 1) return 0;
    int k = o->k;
    if (o->max_batch_tokens > 0) {
        int cap = o->max_batch_tokens / (n_decoding > 0 ? n_decoding : 1) - 1;
        k = cap < k ? cap : k;
    }
    if (q->started && q->accept < FULL_K_AT) {
        if (q->accept < OFF_BELOW) {
            k = ++q->idle_steps % PROBE_EVERY == 0 ? (k < 1 ? k : 1) : 0;
        } else {
            int ka = (int)ceil(o->k * q->accept / FULL_K_AT);
            k = ka < k ? ka : k;
        }
    }
    return k < room ? (k > 0 ? k : 0) : room;
}

void spec_observe(struct spec_seq *q, struct spec_stats *st, int drafted, int accepted) {
    if (drafted <= 0) return;
    double rate = (double)accepted / drafted;
    if (!q->started) q->accept = 1;
    q->started = 1;
    q->accept = (1 - ACCEPT_WEIGHT) * q->accept + ACCEPT_WEIGHT * rate;
    if (q->accept >= OFF_BELOW) q->idle_steps = 0;
    st->drafted += drafted;
    st->accepted += accepted;
    st->verified++;
}
