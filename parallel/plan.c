#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void plan_init(struct step_plan *p) {
    memset(p, 0, sizeof *p);
    p->block_off = xcalloc(1, sizeof(int32_t));
    p->cap_seqs = 1;
}

void plan_free(struct step_plan *p) {
    free(p->tokens);
    free(p->seq_of);
    free(p->pos);
    free(p->block_off);
    free(p->blocks);
    free(p->out_rows);
    free(p->out_full);
    memset(p, 0, sizeof *p);
}

void plan_clear(struct step_plan *p) {
    p->n_seqs = p->n_tokens = p->n_blocks = p->n_out = p->n_cands = 0;
    p->block_off[0] = 0;
}

/* Doubling capacity of at least need (16 at the start). */
static int next_cap(int cap, int need) {
    int c = cap ? cap : 16;
    while (c < need) c *= 2;
    return c;
}

static void *resize(void *ptr, int n, size_t elem) {
    void *q = realloc(ptr, (size_t)n * elem);
    if (!q) FATAL("out of memory growing the step plan");
    return q;
}

/* Room for `tokens` tokens, `seqs` sequences and `blocks` block-table entries. The four
 * per-token arrays share cap_tokens. */
static void reserve(struct step_plan *p, int tokens, int seqs, int blocks) {
    if (tokens > p->cap_tokens) {
        int c = next_cap(p->cap_tokens, tokens);
        p->tokens = resize(p->tokens, c, sizeof(int32_t));
        p->seq_of = resize(p->seq_of, c, sizeof(int32_t));
        p->pos = resize(p->pos, c, sizeof(int32_t));
        p->out_rows = resize(p->out_rows, c, sizeof(int32_t));
        p->out_full = resize(p->out_full, c, sizeof(int32_t));
        p->cap_tokens = c;
    }
    if (seqs + 1 > p->cap_seqs) {
        p->cap_seqs = next_cap(p->cap_seqs, seqs + 1);
        p->block_off = resize(p->block_off, p->cap_seqs, sizeof(int32_t));
    }
    if (blocks > p->cap_blocks) {
        p->cap_blocks = next_cap(p->cap_blocks, blocks);
        p->blocks = resize(p->blocks, p->cap_blocks, sizeof(int32_t));
    }
}

void plan_add(struct step_plan *p, const int32_t *tokens, int n, int pos0, const int32_t *blocks,
              int n_blocks, int logits_all) {
    reserve(p, p->n_tokens + n, p->n_seqs + 1, p->n_blocks + n_blocks);
    int s = p->n_seqs;
    for (int i = 0; i < n; i++) {
        int t = p->n_tokens + i;
        p->tokens[t] = tokens[i];
        p->seq_of[t] = s;
        p->pos[t] = pos0 + i;
        if (logits_all || i == n - 1) {
            p->out_full[p->n_out] = 1; /* whole rows unless the caller marks them light */
            p->out_rows[p->n_out++] = t;
        }
    }
    if (n_blocks) memcpy(p->blocks + p->n_blocks, blocks, sizeof(int32_t) * (size_t)n_blocks);
    p->n_blocks += n_blocks;
    p->n_tokens += n;
    p->n_seqs++;
    p->block_off[p->n_seqs] = p->n_blocks;
}

/* The counts that travel ahead of the arrays: n_seqs, n_tokens, n_blocks, n_out, n_cands. */
#define PLAN_HDR 5
/* The arrays that follow: tokens, seq_of, pos, block_off, blocks, out_rows, out_full (only
 * with n_cands > 0). */
#define PLAN_ARRAYS 7

/* The arrays in broadcast order with their lengths. */
static void plan_arrays(const struct step_plan *p, int32_t *arrays[PLAN_ARRAYS],
                        size_t lens[PLAN_ARRAYS]) {
    int32_t *a[PLAN_ARRAYS] = {p->tokens, p->seq_of,   p->pos,     p->block_off,
                               p->blocks, p->out_rows, p->out_full};
    size_t l[PLAN_ARRAYS] = {(size_t)p->n_tokens,
                             (size_t)p->n_tokens,
                             (size_t)p->n_tokens,
                             (size_t)p->n_seqs + 1,
                             (size_t)p->n_blocks,
                             (size_t)p->n_out,
                             p->n_cands > 0 ? (size_t)p->n_out : 0};
    memcpy(arrays, a, sizeof a);
    memcpy(lens, l, sizeof l);
}

/* The plan in one buffer: every array packed in order. */
static int32_t *plan_pack(const struct step_plan *p, size_t *n_out) {
    int32_t *arrays[PLAN_ARRAYS];
    size_t lens[PLAN_ARRAYS], n = 0;
    plan_arrays(p, arrays, lens);
    for (int i = 0; i < PLAN_ARRAYS; i++) n += lens[i];
    int32_t *buf = xmalloc(n * sizeof(int32_t) + 1);
    for (size_t i = 0, at = 0; i < PLAN_ARRAYS; at += lens[i++])
        if (lens[i]) memcpy(buf + at, arrays[i], lens[i] * sizeof(int32_t));
    *n_out = n;
    return buf;
}

/* To the next stage, when there is one: the counts, then the arrays. */
static void plan_pass_on(struct comm *c, const int32_t hdr[PLAN_HDR], const int32_t *buf,
                         size_t n) {
    if (c->stage + 1 >= c->pp) return;
    int next = comm_stage_peer(c, c->stage + 1);
    comm_send_detached(c, hdr, PLAN_HDR * sizeof(int32_t), next, COMM_TAG_PLAN_HDR);
    if (n) comm_send_detached(c, buf, n * sizeof(int32_t), next, COMM_TAG_PLAN);
}

/* Inside stage 0: two broadcasts, the counts, then every array packed into one buffer. */
void plan_send(struct comm *c, const struct step_plan *p) {
    if (c->size == 1) return;
    int32_t hdr[PLAN_HDR] = {p->n_seqs, p->n_tokens, p->n_blocks, p->n_out, p->n_cands};
    comm_tp_bcast_wait(c, hdr, sizeof hdr); /* matches plan_recv's: MPI pairs a non-blocking
                                               collective only with its like */
    size_t n;
    int32_t *buf = plan_pack(p, &n);
    comm_tp_bcast(c, buf, n * sizeof(int32_t));
    plan_pass_on(c, hdr, buf, n);
    free(buf);
}

void plan_recv(struct comm *c, struct step_plan *p) {
    int32_t hdr[PLAN_HDR];
    int prev = c->stage > 0 ? comm_stage_peer(c, c->stage - 1) : -1;
    /* the next step may be long in coming */
    if (prev < 0) comm_tp_bcast_wait(c, hdr, sizeof hdr);
    else comm_recv_wait(c, hdr, sizeof hdr, prev, COMM_TAG_PLAN_HDR);
    reserve(p, hdr[1], hdr[0] > 0 ? hdr[0] : 0, hdr[2]);
    p->n_seqs = hdr[0];
    p->n_tokens = hdr[1];
    p->n_blocks = hdr[2];
    p->n_out = hdr[3];
    p->n_cands = hdr[4];
    int32_t *arrays[PLAN_ARRAYS];
    size_t lens[PLAN_ARRAYS], n = 0;
    plan_arrays(p, arrays, lens);
    for (int i = 0; i < PLAN_ARRAYS; i++) n += lens[i];
    int32_t *buf = xmalloc(n * sizeof(int32_t) + 1);
    if (prev < 0) comm_tp_bcast(c, buf, n * sizeof(int32_t));
    else if (n) comm_recv(c, buf, n * sizeof(int32_t), prev, COMM_TAG_PLAN);
    for (size_t i = 0, at = 0; i < PLAN_ARRAYS; at += lens[i++])
        if (lens[i]) memcpy(arrays[i], buf + at, lens[i] * sizeof(int32_t));
    plan_pass_on(c, hdr, buf, n);
    free(buf);
}

/* Row i's length in a packed buffer: a light row's k pairs (2k floats), else the vocabulary. */
static size_t packed_len(const int32_t *full, int n_cands, int i, int vocab) {
    return n_cands > 0 && !full[i] ? 2 * (size_t)n_cands : (size_t)vocab;
}

size_t plan_rows_pack(const struct step_plan *p, float *rows, int vocab) {
    if (p->n_cands == 0) return (size_t)p->n_out * vocab; /* every row whole: nothing moves */
    size_t at = 0;
    for (int i = 0; i < p->n_out;
         i++) { /* row i lands at or before i x vocab: front to back is safe */
        size_t len = packed_len(p->out_full, p->n_cands, i, vocab);
        memmove(rows + at, rows + (size_t)i * vocab, len * sizeof(float));
        at += len;
    }
    return at;
}

void plan_rows_unpack(int n_out, int n_cands, const int32_t *full, float *rows, int vocab) {
    size_t at = 0;
    for (int i = 0; i < n_out; i++) at += packed_len(full, n_cands, i, vocab);
    for (int i = n_out - 1; i >= 0;
         i--) { /* back to front: row i's place is at or after its packed one */
        size_t len = packed_len(full, n_cands, i, vocab);
        at -= len;
        memmove(rows + (size_t)i * vocab, rows + at, len * sizeof(float));
    }
}
