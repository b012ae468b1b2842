#include "synthetic.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/err.h"
#include "../util/fatal.h"
#include "../util/fp8.h"
#include "../util/half.h"
#include "forward.h"
#include "kvcache.h"

struct geometry {
    const char *name;
    struct model_hparams hp;
};

/* The published configurations (config.json of each model). */
static const struct geometry GEOMETRIES[] = {
    {"llama3-8b",
     {.arch = ARCH_LLAMA,
      .n_layers = 32,
      .dim = 4096,
      .n_heads = 32,
      .n_kv_heads = 8,
      .head_dim = 128,
      .ffn_dim = 14336,
      .vocab_size = 128256,
      .max_ctx = 131072,
      .norm_eps = 1e-5f,
      .rope_theta = 500000.0f,
      .rope_neox = 1,
      .rope_scaling_llama3 = 1,
      .rope_factor = 8.0f,
      .rope_low_freq_factor = 1.0f,
      .rope_high_freq_factor = 4.0f,
      .rope_orig_ctx = 8192,
      .bos_id = -1,
      .eos_id = -1}},
    {"llama3-70b",
     {.arch = ARCH_LLAMA,
      .n_layers = 80,
      .dim = 8192,
      .n_heads = 64,
      .n_kv_heads = 8,
      .head_dim = 128,
      .ffn_dim = 28672,
      .vocab_size = 128256,
      .max_ctx = 131072,
      .norm_eps = 1e-5f,
      .rope_theta = 500000.0f,
      .rope_neox = 1,
      .rope_scaling_llama3 = 1,
      .rope_factor = 8.0f,
      .rope_low_freq_factor = 1.0f,
      .rope_high_freq_factor = 4.0f,
      .rope_orig_ctx = 8192,
      .bos_id = -1,
      .eos_id = -1}},
    {"qwen2.5-72b",
     {.arch = ARCH_QWEN2,
      .n_layers = 80,
      .dim = 8192,
      .n_heads = 64,
      .n_kv_heads = 8,
      .head_dim = 128,
      .ffn_dim = 29568,
      .vocab_size = 152064,
      .max_ctx = 32768,
      .norm_eps = 1e-6f,
      .rope_theta = 1000000.0f,
      .rope_neox = 1,
      .qkv_bias = 1,
      .bos_id = -1,
      .eos_id = -1}},
    /* small enough for the CPU backend and the tests */
    {"tiny",
     {.arch = ARCH_LLAMA,
      .n_layers = 2,
      .dim = 256,
      .n_heads = 4,
      .n_kv_heads = 2,
      .head_dim = 64,
      .ffn_dim = 512,
      .vocab_size = 1000,
      .max_ctx = 4096,
      .norm_eps = 1e-5f,
      .rope_theta = 10000.0f,
      .rope_neox = 1,
      .bos_id = -1,
      .eos_id = -1}},
};

/* A host pool of random values in one type, uploaded slice after slice: every matrix gets
 * data of the right distribution (uniform, variance 1/cols, so activations keep their scale
 * through the layers) without generating gigabytes on the host. */
struct pool {
    enum dtype type;
    int cols;
    size_t bytes;
    unsigned char *data;
    size_t at;
};

enum { POOL_BYTES = 16 << 20, N_POOLS = 4 };

struct synth {
    struct model *m;
    enum dtype type;
    struct pool pools[N_POOLS];
    uint64_t rng;
};

static uint32_t rnd(struct synth *s) {
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return (uint32_t)(s->rng >> 16);
}

static float rnd_uniform(struct synth *s, float a) {
    return a * ((float)(rnd(s) & 0xffffff) / 8388608.0f - 1.0f);
}

static struct pool *pool_for(struct synth *s, int cols) {
    for (int i = 0; i < N_POOLS; i++)
        if (s->pools[i].data && s->pools[i].cols == cols) return &s->pools[i];
    struct pool *p = NULL;
    for (int i = 0; i < N_POOLS && !p; i++)
        if (!s->pools[i].data) p = &s->pools[i];
    if (!p) FATAL("synthetic: more than %d distinct row lengths", N_POOLS);
    const float a = sqrtf(3.0f / (float)cols); /* uniform(-a, a) has variance 1/cols */
    p->type = s->type;
    p->cols = cols;
    p->bytes = POOL_BYTES;
    p->data = xmalloc(p->bytes);
    p->at = 0;
    if (s->type == DT_Q8_0) { /* 34-byte blocks: f16 scale, 32 int8 */
        size_t nb = p->bytes / 34;
        p->bytes = nb * 34;
        for (size_t b = 0; b < nb; b++) {
            unsigned char *w = p->data + b * 34;
            uint16_t d = f32_to_f16(a / 127.0f);
            memcpy(w, &d, 2);
            for (int j = 0; j < 32; j++)
                w[2 + j] = (unsigned char)(int8_t)((int)(rnd(s) % 255) - 127);
        }
    } else if (s->type == DT_F8_E4M3_S32) { /* 36-byte blocks: f32 scale, 32 E4M3 codes */
        size_t nb = p->bytes / 36;
        p->bytes = nb * 36;
        for (size_t b = 0; b < nb; b++) {
            unsigned char *w = p->data + b * 36;
            float d = a / 256.0f; /* codes of uniform(-256, 256): values uniform(-a, a) */
            memcpy(w, &d, 4);
            for (int j = 0; j < 32; j++) w[4 + j] = fp8_e4m3_from_f32(rnd_uniform(s, 256.0f));
        }
    } else if (s->type == DT_I4_S32) { /* 24-byte blocks: f32 d, f32 z = 8, 16 B nibbles */
        size_t nb = p->bytes / 24;
        p->bytes = nb * 24;
        /* q uniform in 1..15: (q - 8) d has mean 0 and variance 56/3 d^2 = a^2 / 3, as above */
        const float dz[2] = {a / sqrtf(56.0f), 8.0f};
        for (size_t b = 0; b < nb; b++) {
            unsigned char *w = p->data + b * 24;
            memcpy(w, dz, 8);
            for (int j = 0; j < 16; j++)
                w[8 + j] = (unsigned char)((1 + rnd(s) % 15) | (1 + rnd(s) % 15) << 4);
        }
    } else if (s->type == DT_F32) {
        for (size_t i = 0; i < p->bytes / 4; i++) {
            float v = rnd_uniform(s, a);
            memcpy(p->data + 4 * i, &v, 4);
        }
    } else {
        for (size_t i = 0; i < p->bytes / 2; i++) {
            float v = rnd_uniform(s, a);
            uint16_t h = s->type == DT_F16 ? f32_to_f16(v) : f32_to_bf16(v);
            memcpy(p->data + 2 * i, &h, 2);
        }
    }
    return p;
}

/* rows x cols of the synthetic type, filled from the pool for that row length. */
static void make_matrix(struct synth *s, struct bweight *w, int rows, int cols) {
    struct backend *be = s->m->be;
    int64_t rb = dtype_row_bytes(s->type, cols);
    size_t bytes = (size_t)rb * (size_t)rows;
    /* FP8: every block of the pool has the scale a / 256 of its row length (pool_for), so
     * every row is row-scaled (the CUDA backend's W8A8 prefill applies, as for per-channel
     * checkpoints) */
    *w = (struct bweight){be->alloc(be->ctx, bytes ? bytes : 1),
                          s->type,
                          rows,
                          cols,
                          0,
                          NULL,
                          s->type == DT_F8_E4M3_S32};
    s->m->weight_bytes += bytes;
    struct pool *p = pool_for(s, cols);
    /* whole blocks per piece: the pool is a whole number of blocks, and so is every offset */
    const size_t unit = (size_t)dtype_block_bytes(s->type);
    for (size_t done = 0; done < bytes;) {
        size_t n = p->bytes - p->at;
        if (n > bytes - done) n = bytes - done;
        be->upload(be->ctx, (char *)w->data + done, p->data + p->at, n);
        done += n;
        /* move on by an odd number of blocks so that matrices do not repeat each other */
        p->at = (p->at + n + 7 * unit) % p->bytes;
        p->at -= p->at % unit;
    }
}

static float *make_vec(struct synth *s, int n, float value, float jitter) {
    struct backend *be = s->m->be;
    float *h = xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) h[i] = value + (jitter > 0 ? rnd_uniform(s, jitter) : 0.0f);
    float *d = be->alloc(be->ctx, sizeof(float) * (size_t)(n ? n : 1));
    be->upload(be->ctx, d, h, sizeof(float) * (size_t)n);
    s->m->weight_bytes += sizeof(float) * (size_t)n;
    free(h);
    return d;
}

/* The rotary table, as a loaded model without rope_freqs gets it. */
static float *make_inv_freq(struct synth *s) {
    const struct model_hparams *hp = &s->m->hp;
    int half = hp->head_dim / 2;
    float *f = xmalloc(sizeof(float) * (size_t)half);
    model_inv_freq(hp, NULL, f);
    struct backend *be = s->m->be;
    float *d = be->alloc(be->ctx, sizeof(float) * (size_t)half);
    be->upload(be->ctx, d, f, sizeof(float) * (size_t)half);
    free(f);
    return d;
}

static int parse_geometry(const char *spec, const struct geometry **g, enum dtype *type,
                          char *err) {
    char name[64];
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len >= sizeof name) return err_set(err, "synthetic model \"%s\": name too long", spec);
    memcpy(name, spec, len);
    name[len] = 0;
    *g = NULL;
    for (size_t i = 0; i < sizeof GEOMETRIES / sizeof *GEOMETRIES; i++)
        if (!strcmp(GEOMETRIES[i].name, name)) *g = &GEOMETRIES[i];
    if (!*g)
        return err_set(
            err, "synthetic model \"%s\": expected llama3-8b, llama3-70b, qwen2.5-72b or tiny",
            name);
    *type = DT_BF16;
    if (colon) {
        const char *t = colon + 1;
        if (!strcmp(t, "bf16")) *type = DT_BF16;
        else if (!strcmp(t, "f16")) *type = DT_F16;
        else if (!strcmp(t, "f32")) *type = DT_F32;
        else if (!strcmp(t, "q8_0")) *type = DT_Q8_0;
        else if (!strcmp(t, "fp8")) *type = DT_F8_E4M3_S32;
        else if (!strcmp(t, "int4")) *type = DT_I4_S32;
        else
            return err_set(err,
                           "synthetic model \"%s\": weight type \"%s\" (bf16, f16, f32, q8_0, "
                           "fp8 or int4)",
                           spec, t);
    }
    return 0;
}

int model_synthesize(struct model *m, const char *geometry, struct backend *be, int tp, int rank,
                     int pp, int stage, char *err) {
    memset(m, 0, sizeof *m);
    const struct geometry *g = NULL;
    enum dtype type = DT_BF16;
    if (parse_geometry(geometry, &g, &type, err)) return -1;
    m->be = be;
    m->hp = g->hp;
    const struct model_hparams *hp = &m->hp;
    const int blk = dtype_block_elems(type);
    if (hp->dim % blk || hp->ffn_dim % blk || (hp->n_heads * hp->head_dim) % blk)
        return err_set(err, "synthetic model \"%s\": rows are not whole %s blocks", geometry,
                       dtype_name(type));
    /* every matrix has one type here: the head's cost is its share of the elements */
    const double layer = (double)hp->dim * ((hp->n_heads + 2.0 * hp->n_kv_heads) * hp->head_dim) +
                         (double)hp->n_heads * hp->head_dim * hp->dim + 3.0 * hp->dim * hp->ffn_dim;
    if (shard_plan_make(&m->sp, hp, tp, rank, blk, blk, err) ||
        shard_stage(&m->sp, hp->n_layers, pp, stage,
                    shard_head_layers((double)hp->vocab_size * hp->dim, layer), err))
        return -1;
    const struct shard_plan *sp = &m->sp;
    struct synth s = {.m = m, .type = type, .rng = 0x2545f4914f6cdd1dull ^ (uint64_t)(rank + 1)};
    const int hd = hp->head_dim;

    if (sp->first) make_matrix(&s, &m->tok_embd, sp->n_vocab, hp->dim);
    if (sp->last) {
        make_matrix(&s, &m->output, sp->n_vocab, hp->dim);
        m->output_norm = make_vec(&s, hp->dim, 1.0f, 0.0f);
    }
    m->inv_freq = make_inv_freq(&s);
    m->layers = xcalloc((unsigned long)sp->n_layers + 1, sizeof *m->layers);
    for (int il = 0; il < sp->n_layers; il++) {
        struct layer_weights *lw = &m->layers[il];
        lw->attn_norm = make_vec(&s, hp->dim, 1.0f, 0.0f);
        lw->ffn_norm = make_vec(&s, hp->dim, 1.0f, 0.0f);
        lw->qkv_fused = 1;
        make_matrix(&s, &lw->qkv[0], (sp->n_q + 2 * sp->n_kv) * hd, hp->dim);
        if (hp->qkv_bias) lw->qkv_bias = make_vec(&s, (sp->n_q + 2 * sp->n_kv) * hd, 0.0f, 0.1f);
        make_matrix(&s, &lw->wo, hp->dim, sp->wo_ncols);
        lw->gate_up_fused = 1;
        make_matrix(&s, &lw->gate_up[0], 2 * sp->n_ffn, hp->dim);
        make_matrix(&s, &lw->down, hp->dim, sp->n_ffn);
    }
    be->sync(be->ctx); /* before the pools go: a backend may still be reading them */
    for (int i = 0; i < N_POOLS; i++) free(s.pools[i].data);
    return 0;
}

void synthetic_mem_plan(const struct model *m, enum dtype kv_type, long long kv_tokens,
                        int max_tokens, size_t mem_bytes, struct mem_plan *out) {
    const struct model_hparams *hp = &m->hp;
    const struct shard_plan *sp = &m->sp;
    memset(out, 0, sizeof *out);
    const size_t f = sizeof(float), T = (size_t)(max_tokens > 0 ? max_tokens : 1);
    out->weights = m->weight_bytes;
    out->kv_type = kv_type;
    out->kv_tokens = kv_tokens > 0 ? kv_tokens : 0;
    out->kv_per_token = kvcache_token_bytes(kv_type, sp->n_layers, sp->n_kv, hp->head_dim);
    out->kv = out->kv_per_token * (size_t)out->kv_tokens;
    out->activations = forward_activation_bytes(m, max_tokens);
    /* the largest scratch an op asks for: 16-bit activations of the widest matrix input, or
     * the decode attention's split partials; plus what cuBLAS keeps for itself */
    size_t widest = (size_t)hp->dim > (size_t)sp->n_ffn ? (size_t)hp->dim : (size_t)sp->n_ffn;
    if ((size_t)sp->wo_ncols > widest) widest = (size_t)sp->wo_ncols;
    size_t ws = T * widest * 2;
    /* a quantized matrix in a prefill-sized step: an F16 copy of it beside them (the CUDA
     * backend's matmul_q.cu), or for row-scaled FP8 its codes, the step's codes, both scale
     * vectors and at most a BF16 product (matmul_w8a8.cu; 1 KiB for the alignment) */
    size_t dq = 0;
    for (int l = 0; l < sp->n_layers; l++) {
        const struct layer_weights *lw = &m->layers[l];
        const struct bweight *mats[] = {&lw->qkv[0],     &lw->qkv[1],     &lw->qkv[2], &lw->wo,
                                        &lw->gate_up[0], &lw->gate_up[1], &lw->down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
            const size_t r = (size_t)mats[i]->rows, c = (size_t)mats[i]->cols;
            size_t b = r * c * 2;
            if (mats[i]->row_scaled) {
                const size_t w8 = r * c + T * c + 4 * (r + T) + 2 * T * r + 1024;
                if (w8 > b + T * widest * 2) b = w8 - T * widest * 2;
            }
            if (mats[i]->data && dtype_block_elems(mats[i]->type) > 1 && b > dq) dq = b;
        }
    }
    ws += dq;
    size_t att = 64 * (size_t)sp->n_q * 32 * ((size_t)hp->head_dim + 2) * f;
    out->workspace = (ws > att ? ws : att) + ((size_t)64 << 20);
    out->total = out->weights + out->kv + out->activations + out->workspace;
    size_t rest = out->weights + out->activations + out->workspace;
    out->kv_tokens_fit = mem_bytes > rest && out->kv_per_token
                             ? (long long)((mem_bytes - rest) / out->kv_per_token)
                             : 0;
}

void synthetic_mem_plan_sink(const struct model *m, int block_size, int sink_blocks,
                             struct mem_plan *p) {
    p->sink_blocks = kvcache_sink_blocks(p->kv_type, INT32_MAX, sink_blocks);
    p->kv_sink = kvcache_sink_bytes(p->kv_type, m->sp.n_layers, m->sp.n_kv, m->hp.head_dim,
                                    block_size, p->sink_blocks);
    p->kv += p->kv_sink;
    p->total += p->kv_sink;
    if (p->kv_sink && p->kv_tokens_fit > 0)
        p->kv_tokens_fit -= (long long)(p->kv_sink / p->kv_per_token);
}

void synthetic_mem_plan_format(const struct mem_plan *p, char *buf, size_t len) {
    const double G = 1073741824.0;
    int n = snprintf(
        buf, len,
        "memory plan per rank: weights %.2f GiB, KV cache %.2f GiB for %lld tokens of %s (%.2f KiB "
        "per "
        "token, %.0f tokens per GiB), activations %.2f GiB, workspace %.2f GiB, total %.2f GiB",
        p->weights / G, p->kv / G, p->kv_tokens, kvcache_type_name(p->kv_type),
        p->kv_per_token / 1024.0, p->kv_per_token ? G / (double)p->kv_per_token : 0.0,
        p->activations / G, p->workspace / G, p->total / G);
    if (p->kv_sink && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n,
                      "; the KV cache includes an F16 sink of %.2f MiB (the first %d positions "
                      "of up to %d sequences)",
                      p->kv_sink / 1048576.0, KV_SINK_ROWS, p->sink_blocks);
    if (p->kv_tokens_fit > 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; KV tokens that fit: %lld", p->kv_tokens_fit);
}
