#include "ring.h"

#include <stdlib.h>
#include <string.h>

#include "../util/clock.h"
#include "../util/fatal.h"
#include "queue.h"

void ring_init(struct mb_ring *r, struct engine *e, int max_mb, size_t rows, int vocab) {
    memset(r, 0, sizeof *r);
    r->e = e;
    /* one micro-batch per pipeline stage keeps every stage busy; with one stage, one */
    r->max_mb = max_mb > 0 ? max_mb : engine_info(e)->pp;
    if (r->max_mb > ENGINE_MAX_IN_FLIGHT) r->max_mb = ENGINE_MAX_IN_FLIGHT;
    for (int k = 0; k < r->max_mb; k++)
        r->mb[k].logits = xmalloc(sizeof(float) * rows * (size_t)vocab);
}

void ring_free(struct mb_ring *r) {
    for (int k = 0; k < r->max_mb; k++) free(r->mb[k].logits);
}

int ring_has_room(const struct mb_ring *r) { return r->n_mb < r->max_mb; }

int ring_submit(struct mb_ring *r, const struct step_plan *plan, int decode_only,
                struct sched_queue *queue) {
    struct micro_batch *mb = &r->mb[(r->head + r->n_mb) % r->max_mb];
    mb->id = r->last_id = r->last_id % 1000000000 + 1;
    mb->n_tokens = plan->n_tokens;
    mb->decode_only = decode_only;
    mb->n_cands = plan->n_cands;
    mb->n_out = plan->n_out;
    mb->n_light = 0;
    for (int i = 0; plan->n_cands > 0 && i < plan->n_out; i++) mb->n_light += !plan->out_full[i];
    mb->t0 = clock_now();
    if (r->n_mb++ == 0) queue_set_step_started(queue, mb->t0);
    engine_submit(r->e, plan, mb->logits);
    return mb->id;
}

const struct micro_batch *ring_collect(struct mb_ring *r, struct sched_queue *queue) {
    const struct micro_batch *mb = &r->mb[r->head];
    engine_collect(r->e);
    r->head = (r->head + 1) % r->max_mb;
    r->n_mb--;
    queue_set_step_started(queue, r->n_mb ? r->mb[r->head].t0 : 0);
    return mb;
}
