#include "forward.h"

#include <stdlib.h>
#include <string.h>

#include "../util/fatal.h"

void forward_state_init(struct forward_state *fs) { memset(fs, 0, sizeof *fs); }

static void bfree(struct backend *be, void *p) {
    if (p) be->free(be->ctx, p);
}

void forward_state_free(struct forward_state *fs, struct backend *be) {
    void *bufs[] = {fs->x,  fs->xb,  fs->qkv, fs->att,          fs->y,          fs->gu,
                    fs->hb, fs->idx, fs->xo,  fs->logits_local, fs->cands_local};
    for (unsigned i = 0; i < sizeof bufs / sizeof *bufs; i++) bfree(be, bufs[i]);
    free(fs->idx_host);
    if (fs->host_local) be->free_host(be->ctx, fs->host_local);
    free(fs->host_gather);
    free(fs->host_logits);
    moe_free(&fs->moe, be);
    memset(fs, 0, sizeof *fs);
}

void forward_state_settle(struct forward_state *fs, struct comm *c) {
    if (fs->logits_send) comm_wait(c, fs->logits_send);
    fs->logits_send = NULL;
}

static void *regrow(struct backend *be, void *p, size_t bytes) {
    bfree(be, p);
    return be->alloc(be->ctx, bytes);
}

static int qkv_rows(const struct model *m) { return (m->sp.n_q + 2 * m->sp.n_kv) * m->hp.head_dim; }

/* Bytes per row of each activation buffer: forward_prepare sizes the buffers with these and
 * forward_activation_bytes sums them, so the memory plan is what forward allocates. */
struct act_widths {
    size_t x;      /* x, xb and y: [T][dim] */
    size_t qkv;    /* [T][qkv rows] */
    size_t att;    /* [T][wo_ncols] */
    size_t gu, hb; /* [T][2 * n_ffn], [T][n_ffn] */
    size_t idx;    /* tokens, seq_of, pos and out_rows: one int32 per token each */
    size_t xo;     /* [n_out][dim] */
    size_t logits; /* [n_out][n_vocab local] */
    size_t cands;  /* [n_out][LOGIT_CANDS_MAX] */
};

static struct act_widths act_widths(const struct model *m) {
    const size_t f = sizeof(float);
    struct act_widths w = {
        .x = (size_t)m->hp.dim * f,
        .qkv = (size_t)qkv_rows(m) * f,
        .att = (size_t)m->sp.wo_ncols * f,
        .gu = 2 * (size_t)m->sp.n_ffn * f,
        .hb = (size_t)m->sp.n_ffn * f,
        .idx = sizeof(int32_t),
        .xo = (size_t)m->hp.dim * f,
        .logits = (size_t)m->sp.n_vocab * f,
        .cands = LOGIT_CANDS_MAX * sizeof(struct logit_cand),
    };
    return w;
}

size_t forward_activation_bytes(const struct model *m, int max_tokens) {
    const struct act_widths w = act_widths(m);
    const size_t T = (size_t)(max_tokens > 0 ? max_tokens : 1);
    /* every token may want logits; block_off and blocks are counted as one int32 per token */
    return T * (3 * w.x + w.qkv + w.att + w.gu + w.hb + 4 * w.idx) +
           T * (w.xo + w.logits + w.cands) + T * 2 * sizeof(int32_t) +
           moe_activation_bytes(m, (int)T);
}

/* The plan's index arrays, in one backend buffer at offsets that depend only on the step's
 * shape (tokens, sequences, logits rows: what graph_key holds, so a captured graph's addresses
 * stay right), each 16-byte aligned, the block table last; filled from one host copy by one
 * upload. The buffer is doubled when a step needs more (a move frees the old one, which ends
 * the backend's captured graphs), so it rarely moves. */
static void upload_plan(struct backend *be, struct forward_state *fs, const struct step_plan *p) {
    const size_t a4 = 4; /* int32 words per 16 bytes */
    const size_t nt = (p->n_tokens + a4 - 1) / a4 * a4, no = (p->n_out + a4 - 1) / a4 * a4;
    const size_t ns = ((size_t)p->n_seqs + 1 + a4 - 1) / a4 * a4;
    const size_t o_seq = nt, o_pos = 2 * nt, o_out = 3 * nt, o_boff = 3 * nt + no,
                 o_blk = o_boff + ns;
    const size_t words = o_blk + (size_t)p->n_blocks;
    if (words > fs->cap_idx) {
        fs->cap_idx = words > 2 * fs->cap_idx ? words : 2 * fs->cap_idx;
        fs->idx = regrow(be, fs->idx, fs->cap_idx * sizeof(int32_t));
        fs->idx_host = xrealloc(fs->idx_host, fs->cap_idx * sizeof(int32_t));
    }
    int32_t *h = fs->idx_host;
    memcpy(h, p->tokens, (size_t)p->n_tokens * sizeof *h);
    memcpy(h + o_seq, p->seq_of, (size_t)p->n_tokens * sizeof *h);
    memcpy(h + o_pos, p->pos, (size_t)p->n_tokens * sizeof *h);
    memcpy(h + o_out, p->out_rows, (size_t)p->n_out * sizeof *h);
    memcpy(h + o_boff, p->block_off, ((size_t)p->n_seqs + 1) * sizeof *h);
    memcpy(h + o_blk, p->blocks, (size_t)p->n_blocks * sizeof *h);
    fs->tokens = fs->idx, fs->seq_of = fs->idx + o_seq, fs->pos = fs->idx + o_pos;
    fs->out_rows = fs->idx + o_out, fs->block_off = fs->idx + o_boff, fs->blocks = fs->idx + o_blk;
    be->upload(be->ctx, fs->idx, h, words * sizeof *h);
}

/* Sizes every activation buffer for the plan (regrowing only when a step is larger than
 * any before) and copies the plan's index arrays to the backend. */
static void forward_prepare(struct model *m, struct forward_state *fs, const struct step_plan *p) {
    struct backend *be = m->be;
    const struct model_hparams *hp = &m->hp;
    const struct act_widths w = act_widths(m);
    if (p->n_tokens > fs->cap_tokens) {
        size_t T = (size_t)p->n_tokens;
        fs->x = regrow(be, fs->x, T * w.x);
        fs->xb = regrow(be, fs->xb, T * w.x);
        fs->y = regrow(be, fs->y, T * w.x);
        fs->qkv = regrow(be, fs->qkv, T * w.qkv);
        /* zeroed once: the padding columns around this rank's heads stay zero */
        fs->att = regrow(be, fs->att, T * w.att);
        fs->gu = regrow(be, fs->gu, T * w.gu);
        fs->hb = regrow(be, fs->hb, T * w.hb);
        fs->cap_tokens = p->n_tokens;
    }
    if (p->n_out > fs->cap_out) {
        size_t n = (size_t)p->n_out;
        fs->xo = regrow(be, fs->xo, n * w.xo);
        fs->logits_local = regrow(be, fs->logits_local, n * w.logits);
        fs->cands_local = regrow(be, fs->cands_local, n * w.cands);
        if (fs->host_local) be->free_host(be->ctx, fs->host_local);
        free(fs->host_gather);
        free(fs->host_logits);
        /* page-locked: the logits download is the step's largest copy (32 MiB at 64 rows of
         * a 128k vocabulary), several times faster into it than into pageable memory */
        /* whole rows, and with logit candidates (gather_cands) every row's pairs beside them */
        fs->host_local = be->alloc_host(be->ctx, n * (w.logits + w.cands) + 1);
        fs->host_gather = xmalloc(
            n * ((size_t)hp->vocab_size * sizeof(float) + (size_t)m->sp.tp * w.cands));
        fs->host_logits = m->sp.last && m->sp.pp > 1
                              ? xmalloc(n * (size_t)hp->vocab_size * sizeof(float))
                              : NULL;
        fs->cap_out = p->n_out;
    }
    moe_reserve(&fs->moe, m, p->n_tokens);
    upload_plan(be, fs, p);
}

/* Matrices stored fused (one matmul) or as parts written side by side into y. */
static void matmul_parts(struct backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
                         int T, const struct bweight *w, int n_parts, int fused) {
    if (fused) {
        be->matmul(be->ctx, y, ldy, x, ldx, T, &w[0]);
        return;
    }
    for (int i = 0, col = 0; i < n_parts; col += w[i].rows, i++)
        be->matmul(be->ctx, y + col, ldy, x, ldx, T, &w[i]);
}

/* What a step's work needs; forward_layers' argument. */
struct step_args {
    struct model *m;
    struct kvcache *kv;
    struct forward_state *fs;
    const struct step_plan *p;
    struct comm *c;
};

/* The step's work on the backend after forward_prepare: the embedding (or the activations
 * from the previous stage), this stage's layers, and on the last stage the final norm and
 * LM head into fs->logits_local; queued, not waited for. A graph's body (graph_key). */
static void forward_layers(void *arg) {
    const struct step_args *a = arg;
    struct model *m = a->m;
    struct kvcache *kv = a->kv;
    struct forward_state *fs = a->fs;
    const struct step_plan *p = a->p;
    struct comm *c = a->c;
    struct backend *be = m->be;
    void *bc = be->ctx;
    const struct model_hparams *hp = &m->hp;
    const struct shard_plan *sp = &m->sp;
    const int T = p->n_tokens, dim = hp->dim, hd = hp->head_dim;
    const int nq = sp->n_q, nkv = sp->n_kv, ldqkv = qkv_rows(m), nffn = sp->n_ffn;
    struct attn_batch ab = {
        T,          p->n_seqs,      fs->seq_of, fs->pos, fs->block_off,
        fs->blocks, kv->block_size, p->seq_of,  p->pos}; /* host copies: the CUDA backend's prefill
                                                            tiles */
    float *x = fs->x, *xb = fs->xb, *y = fs->y, *qkv = fs->qkv;
    float *q = qkv, *k = qkv + nq * hd, *v = qkv + (nq + nkv) * hd;

    const int prev = sp->first ? -1 : comm_stage_peer(c, sp->stage - 1);
    if (sp->first) {
        // token embedding: each rank looks up the ids in its vocab rows, zeros elsewhere
        be->embed(bc, x, fs->tokens, T, &m->tok_embd, sp->vocab0);
        comm_allreduce_sum(c, x, (size_t)T * dim); // after vocab-parallel embedding
    } else {
        comm_recv_act(c, x, (size_t)T * dim, prev); // the residual stream from the previous stage
    }

    // the first layer's attention rmsnorm (each later one comes with the residual add before it)
    if (sp->n_layers > 0) be->rmsnorm(bc, xb, x, m->layers[0].attn_norm, T, dim, hp->norm_eps);
    for (int il = 0; il < sp->n_layers;
         il++) { /* this stage's layers: sp->layer0 + il of the model */
        const struct layer_weights *lw = &m->layers[il];
        // q, k, v for this rank's heads (column-parallel)
        matmul_parts(be, qkv, ldqkv, xb, dim, T, lw->qkv, 3, lw->qkv_fused);
        if (lw->qkv_bias) be->add_bias(bc, qkv, ldqkv, T, ldqkv, lw->qkv_bias);
        if (lw->q_norm) { // Qwen3: per-head RMSNorm before rotary
            be->head_rmsnorm(bc, q, ldqkv, T, nq, hd, lw->q_norm, hp->norm_eps);
            be->head_rmsnorm(bc, k, ldqkv, T, nkv, hd, lw->k_norm, hp->norm_eps);
        }
        // rotary embedding of q and k at each token's position
        // (k's heads follow q's in each row of qkv: one call covers both)
        be->rope(bc, q, ldqkv, T, nq + nkv, hd, fs->pos, m->inv_freq, hp->rope_neox);
        // k, v into the paged cache, then attention over each sequence's cached positions
        be->kv_store(bc, &kv->layers[il], kv->type, k, v, ldqkv, nkv, hd, &ab);
        be->attention(bc, fs->att + sp->wo_pad, sp->wo_ncols, q, ldqkv, nq, sp->q_head0,
                      hp->n_heads / hp->n_kv_heads, sp->kv_head0, &kv->layers[il], kv->type, nkv,
                      hd, &ab);
        // output projection on this rank's columns (row-parallel), then sum over ranks
        be->matmul(bc, y, dim, fs->att, sp->wo_ncols, T, &lw->wo);
        comm_allreduce_sum(c, y, (size_t)T * dim); // after row-parallel Wo
        // residual add, then the MLP rmsnorm, in one pass
        be->add_rmsnorm(bc, x, y, xb, lw->ffn_norm, T, dim, hp->norm_eps);
        if (lw->moe) {
            // mixture of experts: this rank's experts (or slices of them) and shared expert
            moe_forward(m, &fs->moe, lw, y, xb, T);
        } else if (nffn > 0) {
            // gate and up on this rank's MLP columns (column-parallel), SwiGLU, then the
            // down projection (row-parallel)
            moe_swiglu(be, y, xb, dim, T, lw->gate_up, lw->gate_up_fused, &lw->down, nffn, fs->gu,
                       fs->hb);
        } else {
            be->zero(bc, y, sizeof(float) * (size_t)T * dim); /* this rank holds no MLP columns */
        }
        comm_allreduce_sum(c, y, (size_t)T * dim); // after row-parallel W_down
        // residual add, then the next layer's attention rmsnorm, in one pass
        if (il + 1 < sp->n_layers)
            be->add_rmsnorm(bc, x, y, xb, m->layers[il + 1].attn_norm, T, dim, hp->norm_eps);
        else be->add(bc, x, y, (size_t)T * dim);
    }

    if (!sp->last) { // on to the next stage; rank 0 receives the logits from the last
                     // (engine_submit)
        comm_send_act(c, x, (size_t)T * dim, comm_stage_peer(c, sp->stage + 1));
        return;
    }

    // final norm of the rows whose logits are wanted, LM head on this rank's vocab rows
    be->gather_rows(bc, fs->xo, x, fs->out_rows, p->n_out, dim);
    be->rmsnorm(bc, fs->xo, fs->xo, m->output_norm, p->n_out, dim, hp->norm_eps);
    be->matmul(bc, fs->logits_local, sp->n_vocab, fs->xo, dim, p->n_out, &m->output);
}

/* Steps of at most this many tokens run as graphs (forward). */
enum { FORWARD_GRAPH_MAX_T = 16 };

/* The last stage's logits to its TP rank 0, which puts them together in out (then sends them
 * on to rank 0 when that is another stage). Each rank sends the whole shard of every row
 * that comes back whole (plan_row_whole: all of them when plan->n_cands is 0) and, with
 * plan->n_cands = k, its k best entries of every row (backend top_cands), which rank 0 merges
 * into the light rows' first k entries: a light row costs k pairs per rank instead of the
 * vocabulary's floats. */
static void gather_logits(struct model *m, struct forward_state *fs, const struct step_plan *p,
                          struct comm *c, float *out) {
    struct backend *be = m->be;
    const struct shard_plan *sp = &m->sp;
    const int k = p->n_cands, n_out = p->n_out, nv = sp->n_vocab, vocab = m->hp.vocab_size;
    if (k > LOGIT_CANDS_MAX || 2 * k > nv) /* engine_info's max_cands keeps within both */
        FATAL("step plan asks for %d logit candidates (at most %d here)", k,
              nv / 2 < LOGIT_CANDS_MAX ? nv / 2 : LOGIT_CANDS_MAX);
    if (k > 0)
        be->top_cands(be->ctx, fs->cands_local, fs->logits_local, n_out, nv, nv, sp->vocab0, k);
    be->sync(be->ctx);
    /* host_local: every row's k pairs (two floats each), then the whole rows, in row order */
    const size_t pairs = (size_t)n_out * k * 2;
    if (k > 0) be->download(be->ctx, fs->host_local, fs->cands_local, pairs * sizeof(float));
    int n_full = 0;
    for (int i = 0; i < n_out;) { /* runs of adjacent whole rows in one download each */
        if (!plan_row_whole(p, i)) {
            i++;
            continue;
        }
        int j = i;
        while (j < n_out && plan_row_whole(p, j)) j++;
        be->download(be->ctx, fs->host_local + pairs + (size_t)n_full * nv,
                     fs->logits_local + (size_t)i * nv, (size_t)(j - i) * nv * sizeof(float));
        n_full += j - i;
        i = j;
    }
    int counts[c->tp], displs[c->tp], v0[c->tp], nvr[c->tp];
    for (int r = 0, at = 0; r < c->tp; r++) {
        shard_split(vocab, c->tp, r, &v0[r], &nvr[r]);
        counts[r] = (int)pairs + n_full * nvr[r];
        displs[r] = at;
        at += counts[r];
    }
    comm_gatherv(c, fs->host_local, counts[c->tp_rank], fs->host_gather, counts, displs);
    if (c->tp_rank != 0 || !out) return;
    for (int i = 0, f = 0; i < n_out; i++) {
        float *row = out + (size_t)i * vocab;
        if (!plan_row_whole(
                p, i)) { /* rank r's list for row i: at displs[r] (in floats), k pairs a row */
            const struct logit_cand *lists[c->tp];
            for (int r = 0; r < c->tp; r++)
                lists[r] = (const struct logit_cand *)(fs->host_gather + displs[r]) + (size_t)i * k;
            logit_cands_merge((struct logit_cand *)row, lists, c->tp, k);
            continue;
        }
        for (int r = 0; r < c->tp; r++)
            memcpy(row + v0[r], fs->host_gather + displs[r] + pairs + (size_t)f * nvr[r],
                   sizeof(float) * (size_t)nvr[r]);
        f++;
    }
    if (sp->pp > 1) /* back to rank 0, which runs the scheduler; light rows shrink to their
                       candidates on the way */
        fs->logits_send = comm_isend_floats(c, out, plan_rows_pack(p, out, vocab), 0,
                                            COMM_TAG_LOGITS);
}

/* A step's work is the same when the plan has the same shape (tokens, sequences, logits
 * rows; each at most FORWARD_GRAPH_MAX_T, so 16 bits apiece): the buffers it uses move only
 * when they are freed, which the backend notices. */
static uint64_t graph_key(const struct step_plan *p) {
    return (uint64_t)p->n_tokens | (uint64_t)p->n_seqs << 16 | (uint64_t)p->n_out << 32;
}

void forward(struct model *m, struct kvcache *kv, struct forward_state *fs,
             const struct step_plan *p, struct comm *c, float *logits) {
    struct backend *be = m->be;
    void *bc = be->ctx;
    const struct shard_plan *sp = &m->sp;
    const int pp = sp->pp;
    forward_state_settle(fs, c); /* forward_prepare may move host_logits */
    forward_prepare(m, fs, p);
    struct step_args a = {m, kv, fs, p, c};
    /* Decode-sized steps (many small kernels, launch-bound) as graphs where the backend has
     * them; one rank per stage and one stage only: the all-reduce and stage-to-stage paths
     * wait on the host, which a capture cannot hold; so does the experts' routing. */
    const int graphable = be->graph_run && c->tp == 1 && pp == 1 && m->hp.n_experts == 0 &&
                          p->n_tokens <= FORWARD_GRAPH_MAX_T;
    if (!graphable || !be->graph_run(bc, graph_key(p), forward_layers, &a)) forward_layers(&a);
    if (!sp->last) return;
    gather_logits(m, fs, p, c, pp > 1 ? fs->host_logits : logits);
}
