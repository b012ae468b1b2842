#include "testutil_model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/gguf.h"
#include "model/checkpoint.h"
#include "testutil.h"
#include "util/err.h"

static uint8_t pattern(int t, uint64_t j) { return (uint8_t)(t * 131 + j * 7 + 3); }

/* Bytes of a [ne0, ne1] tensor, from the GGML block layouts (worked out by hand). */
static uint64_t tensor_bytes(uint32_t type, int64_t ne0, int64_t ne1) {
    switch (type) {
    case DT_F32: return (uint64_t)(ne0 * ne1 * 4);
    case DT_F16:
    case DT_BF16: return (uint64_t)(ne0 * ne1 * 2);
    case DT_Q8_0: return (uint64_t)(ne0 / 32 * 34 * ne1);
    case DT_Q4_0: return (uint64_t)(ne0 / 32 * 18 * ne1);
    case DT_Q4_1: return (uint64_t)(ne0 / 32 * 20 * ne1);
    case DT_Q4_K: return (uint64_t)(ne0 / 256 * 144 * ne1);
    case DT_Q6_K: return (uint64_t)(ne0 / 256 * 210 * ne1);
    }
    fail_msg("type %u", type);
    return 0;
}

/* ---- model description shared by the GGUF and HF writers ------------------------------ */

struct tm_spec tm_default_spec(void) {
    return (struct tm_spec){.arch = "llama",
                            .dim = 64,
                            .heads = 4,
                            .kv = 2,
                            .head_dim = 16,
                            .ffn = 96,
                            .vocab = 128,
                            .layers = 2,
                            .tied = 1,
                            .mat_type = DT_Q4_1,
                            .emb_type = DT_Q8_0,
                            .norm_type = DT_F32};
}

static int add_t(struct tm_tensor *t, int n, const struct tm_spec *s, const char *gguf,
                 const char *hf, uint32_t type, int n_dims, int64_t ne0, int64_t ne1) {
    if (s->drop && !strcmp(s->drop, gguf)) return n;
    struct tm_tensor *d = &t[n];
    snprintf(d->gguf, sizeof d->gguf, "%s", gguf);
    snprintf(d->hf, sizeof d->hf, "%s", hf);
    d->type = type;
    d->n_dims = n_dims;
    d->ne0 = ne0;
    d->ne1 = ne1;
    if (s->alter && !strcmp(s->alter, gguf)) {
        if (s->alter_type != 0xffffffffu) d->type = s->alter_type;
        if (s->alter_ne0) d->ne0 = s->alter_ne0;
        if (s->alter_ne1) {
            d->ne1 = s->alter_ne1;
            d->n_dims = 2;
        }
    }
    return n + 1;
}

/* Every tensor of the model, in ne order, with both names. */
static int model_tensors(const struct tm_spec *s, struct tm_tensor *t) {
    int n = 0, hd = s->head_dim, q = s->heads * hd, kv = s->kv * hd;
    char g[64], h[96];
    n = add_t(t, n, s, "token_embd.weight", "model.embed_tokens.weight", s->emb_type, 2, s->dim,
              s->vocab);
    n = add_t(t, n, s, "output_norm.weight", "model.norm.weight", s->norm_type, 1, s->dim, 1);
    if (!s->tied)
        n = add_t(t, n, s, "output.weight", "lm_head.weight", s->mat_type, 2, s->dim, s->vocab);
    if (s->rope_freqs) n = add_t(t, n, s, "rope_freqs.weight", "-", DT_F32, 1, hd / 2, 1);
    static const struct {
        const char *g, *h;
        int kind, a, b;
    } per[] = {
        /* kind 0 norm, 1 matrix, 2 bias, 3 qk-norm; a, b: 0 dim, 1 q, 2 kv, 3 ffn, 4 hd */
        {"attn_norm.weight", "input_layernorm.weight", 0, 0, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", 1, 0, 1},
        {"attn_k.weight", "self_attn.k_proj.weight", 1, 0, 2},
        {"attn_v.weight", "self_attn.v_proj.weight", 1, 0, 2},
        {"attn_output.weight", "self_attn.o_proj.weight", 1, 1, 0},
        {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0, 0},
        {"ffn_gate.weight", "mlp.gate_proj.weight", 1, 0, 3},
        {"ffn_up.weight", "mlp.up_proj.weight", 1, 0, 3},
        {"ffn_down.weight", "mlp.down_proj.weight", 1, 3, 0},
        {"attn_q.bias", "self_attn.q_proj.bias", 2, 1, 0},
        {"attn_k.bias", "self_attn.k_proj.bias", 2, 2, 0},
        {"attn_v.bias", "self_attn.v_proj.bias", 2, 2, 0},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", 3, 4, 0},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", 3, 4, 0},
    };
    const int64_t sz[] = {s->dim, q, kv, s->ffn, hd};
    for (int l = 0; l < s->layers; l++)
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
            if ((per[i].kind == 2 && !s->bias) || (per[i].kind == 3 && !s->qknorm)) continue;
            snprintf(g, sizeof g, "blk.%d.%s", l, per[i].g);
            snprintf(h, sizeof h, "model.layers.%d.%s", l, per[i].h);
            if (per[i].kind == 1)
                n = add_t(t, n, s, g, h, s->mat_type, 2, sz[per[i].a], sz[per[i].b]);
            else n = add_t(t, n, s, g, h, s->norm_type, 1, sz[per[i].a], 1);
        }
    return n;
}

/* ---- GGUF writer ---------------------------------------------------------------------- */

static void kv_key(struct tu_buf *b, uint64_t *n, const struct tm_spec *s, const char *suffix,
                   uint32_t type, int with_arch) {
    char k[128];
    if (with_arch) snprintf(k, sizeof k, "%s.%s", s->arch, suffix);
    else snprintf(k, sizeof k, "%s", suffix);
    tu_put_str(b, k);
    tu_put_u32(b, type);
    (*n)++;
}

static void kv_u32(struct tu_buf *b, uint64_t *n, const struct tm_spec *s, const char *suffix,
                   uint32_t v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    if (s->string_key && !strcmp(s->string_key, suffix)) {
        kv_key(b, n, s, suffix, GGUF_STRING, 1);
        tu_put_str(b, "12");
        return;
    }
    kv_key(b, n, s, suffix, GGUF_UINT32, 1);
    tu_put_u32(b, v);
}

static void kv_f32(struct tu_buf *b, uint64_t *n, const struct tm_spec *s, const char *suffix,
                   float v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    kv_key(b, n, s, suffix, GGUF_FLOAT32, 1);
    tu_put(b, &v, 4);
}

const char *tm_write_gguf(const struct tm_spec *s, const char *fname, struct tm_tensor *t,
                          int *nt) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir, fname);
    *nt = model_tensors(s, t);
    struct tu_buf kv = {0}, b = {0};
    uint64_t n_kv = 0;
    kv_key(&kv, &n_kv, s, "general.architecture", GGUF_STRING, 0);
    tu_put_str(&kv, s->arch);
    kv_u32(&kv, &n_kv, s, "block_count", (uint32_t)(s->meta_layers ? s->meta_layers : s->layers));
    kv_u32(&kv, &n_kv, s, "embedding_length", (uint32_t)s->dim);
    kv_u32(&kv, &n_kv, s, "attention.head_count", (uint32_t)s->heads);
    kv_u32(&kv, &n_kv, s, "attention.head_count_kv", (uint32_t)s->kv);
    if (s->head_dim != s->dim / s->heads)
        kv_u32(&kv, &n_kv, s, "attention.key_length", (uint32_t)s->head_dim);
    kv_u32(&kv, &n_kv, s, "feed_forward_length", (uint32_t)s->ffn);
    kv_u32(&kv, &n_kv, s, "context_length", 4096);
    kv_f32(&kv, &n_kv, s, "attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&kv, &n_kv, s, "rope.freq_base", 500000.0f);
    kv_key(&kv, &n_kv, s, "tokenizer.ggml.bos_token_id", GGUF_UINT32, 0);
    tu_put_u32(&kv, 1);
    kv_key(&kv, &n_kv, s, "tokenizer.ggml.eos_token_id", GGUF_UINT32, 0);
    tu_put_u32(&kv, 2);
    kv_key(&kv, &n_kv, s, "tokenizer.ggml.tokens", GGUF_ARRAY, 0);
    tu_put_u32(&kv, GGUF_STRING);
    tu_put_u64(&kv, (uint64_t)s->vocab);
    for (int i = 0; i < s->vocab; i++) {
        char tok[16];
        snprintf(tok, sizeof tok, "t%d", i);
        tu_put_str(&kv, tok);
    }
    tu_put(&b, "GGUF", 4);
    tu_put_u32(&b, 3);
    tu_put_u64(&b, (uint64_t)*nt);
    tu_put_u64(&b, n_kv);
    tu_put(&b, kv.p, kv.n);
    uint64_t rel = 0;
    for (int i = 0; i < *nt; i++) {
        tu_put_str(&b, t[i].gguf);
        tu_put_u32(&b, (uint32_t)t[i].n_dims);
        tu_put_u64(&b, (uint64_t)t[i].ne0);
        if (t[i].n_dims == 2) tu_put_u64(&b, (uint64_t)t[i].ne1);
        tu_put_u32(&b, t[i].type);
        tu_put_u64(&b, rel);
        rel = (rel + tensor_bytes(t[i].type, t[i].ne0, t[i].ne1) + 31) / 32 * 32;
    }
    for (int i = 0; i < *nt; i++) {
        while (b.n % 32) tu_put(&b, "", 1);
        uint64_t nb = tensor_bytes(t[i].type, t[i].ne0, t[i].ne1);
        if (s->random_f32 > 0 && t[i].type == DT_F32) {
            uint64_t x = 0x12345u + (uint64_t)i;
            for (uint64_t j = 0; j < nb / 4; j++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                float u = (float)((x >> 40) * 0x1.0p-24) * 2 - 1;
                tu_put_f32(&b, strstr(t[i].gguf, "norm") ? 1.0f : u * s->random_f32);
            }
            continue;
        }
        for (uint64_t j = 0; j < nb; j++) {
            uint8_t v = pattern(i, j);
            tu_put(&b, &v, 1);
        }
    }
    tu_write_file(path, b.p, b.n);
    free(kv.p);
    free(b.p);
    return path;
}

const char *tm_write_random_gguf(const char *fname) {
    struct tm_spec ts = tm_default_spec();
    ts.mat_type = ts.emb_type = ts.norm_type = DT_F32;
    ts.random_f32 = 0.3f;
    struct tm_tensor t[128];
    int nt;
    return tm_write_gguf(&ts, fname, t, &nt);
}

void tm_check_default_shape(const struct model_hparams *hp) {
    assert_int_equal(hp->arch, ARCH_LLAMA);
    assert_int_equal(hp->n_layers, 2);
    assert_int_equal(hp->dim, 64);
    assert_int_equal(hp->n_heads, 4);
    assert_int_equal(hp->n_kv_heads, 2);
    assert_int_equal(hp->head_dim, 16);
    assert_int_equal(hp->ffn_dim, 96);
    assert_int_equal(hp->vocab_size, 128);
    assert_int_equal(hp->tied_embeddings, 1);
    assert_int_equal(hp->qkv_bias, 0);
}

void tm_check_tensors(const struct model_file *m, const struct tm_tensor *t, int nt) {
    char err[ERR_LEN];
    int mapped = 0;
    for (int i = 0; i < nt; i++) {
        const struct mf_tensor *mt = modelfile_find(m, t[i].gguf);
        if (!mt) fail_msg("tensor %s not found", t[i].gguf);
        mapped++;
        assert_int_equal(mt->type, t[i].type);
        assert_int_equal(mt->ne[0], t[i].ne0);
        assert_int_equal(mt->ne[1], t[i].ne1);
        assert_int_equal(mt->ne[2], 1);
        assert_int_equal(mt->ne[3], 1);
        uint64_t nb = tensor_bytes(t[i].type, t[i].ne0, t[i].ne1);
        assert_int_equal(mt->nbytes, nb);
        uint8_t *got = malloc(nb);
        assert_int_equal(modelfile_read(m, mt, 0, nb, got, err), 0);
        for (uint64_t j = 0; j < nb; j++)
            if (got[j] != pattern(i, j))
                fail_msg("%s: byte %llu differs", t[i].gguf, (unsigned long long)j);
        /* A partial read from the middle. */
        if (nb > 3) {
            assert_int_equal(modelfile_read(m, mt, 2, 1, got, err), 0);
            assert_int_equal(got[0], pattern(i, 2));
        }
        free(got);
    }
    assert_int_equal(m->n_tensors, mapped);
}

void tm_expect_open_fails(const char *path, const char *msg) {
    struct model_file m;
    char err[ERR_LEN] = "";
    if (checkpoint_open(&m, path, err) != -1) fail_msg("%s: accepted (want \"%s\")", path, msg);
    if (!strstr(err, msg)) fail_msg("message \"%s\" lacks \"%s\"", err, msg);
    print_message("  -> %s\n", err);
    assert_int_equal(m.n_tensors, 0);
    assert_null(m.tensors);
    assert_null(m.gguf);
}

/* ---- Hugging Face directories ---------------------------------------------------------- */

static uint32_t dtype_of(const char *s) {
    return !strcmp(s, "F32") ? DT_F32 : !strcmp(s, "F16") ? DT_F16 : DT_BF16;
}

static int dsize(const char *s) { return !strcmp(s, "F32") ? 4 : !strcmp(s, "I64") ? 8 : 2; }

/* Writes dir/name with the tensors whose index i has i % nshards == shard. Tensor data
 * follows the ne order: an [ne1, ne0] row-major array in safetensors terms. */
static void write_st(const char *dir, const char *name, const struct tm_tensor *t, int nt,
                     int shard, int nshards, const struct tm_hf *o) {
    struct tu_buf hdr = {0}, data = {0};
    tu_put(&hdr, "{\"__metadata__\":{\"format\":\"pt\"}", 31);
    for (int i = 0; i < nt; i++) {
        if (i % nshards != shard) continue;
        const char *dt = o->bad_hf && !strcmp(o->bad_hf, t[i].hf) ? o->bad_dtype : o->dtype;
        uint64_t nb = (uint64_t)(t[i].ne0 * t[i].ne1 * dsize(dt));
        if (t[i].n_dims == 2)
            tu_putf(&hdr,
                    ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                    t[i].hf, dt, (long long)t[i].ne1, (long long)t[i].ne0, data.n, data.n + nb);
        else
            tu_putf(&hdr, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                    t[i].hf, dt, (long long)t[i].ne0, data.n, data.n + nb);
        for (uint64_t j = 0; j < nb; j++) {
            uint8_t v = pattern(i, j);
            tu_put(&data, &v, 1);
        }
    }
    /* Tensors we do not use: rotary inverse frequencies, an integer buffer. */
    if (shard == 0) {
        tu_putf(&hdr,
                ",\"model.layers.0.self_attn.rotary_emb.inv_freq\":{\"dtype\":\"F32\",\"shape\":[8]"
                ",\"data_offsets\":[%zu,%zu]}",
                data.n, data.n + 32);
        tu_put(&data, (uint8_t[32]){0}, 32);
        tu_putf(&hdr,
                ",\"model.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,4],\"data_offsets\":[%zu,%"
                "zu]}",
                data.n, data.n + 32);
        tu_put(&data, (uint8_t[32]){0}, 32);
    }
    tu_put(&hdr, "}", 1);
    struct tu_buf f = {0};
    tu_put_u64(&f, hdr.n);
    tu_put(&f, hdr.p, hdr.n);
    tu_put(&f, data.p, data.n);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, f.p, f.n);
    free(hdr.p);
    free(data.p);
    free(f.p);
}

const char *tm_write_hf(const struct tm_spec *s, const struct tm_hf *o, const char *name,
                        struct tm_tensor *t, int *nt) {
    static char dir[256];
    char path[512];
    snprintf(dir, sizeof dir, "%s/%s", tu_tmpdir, name);
    tu_rm_tree(dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    struct tm_spec hs = *s;
    hs.tied = !o->lm_head;
    *nt = model_tensors(&hs, t);
    uint32_t type = dtype_of(o->dtype);
    for (int i = 0; i < *nt; i++) t[i].type = type;
    struct tu_buf c = {0};
    if (o->config_text) {
        tu_put(&c, o->config_text, strlen(o->config_text));
    } else {
        tu_putf(&c,
                "{\"architectures\":[\"%s\"],\"hidden_size\":%d,\"num_hidden_layers\":%d,"
                "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"intermediate_size\":%d,"
                "\"vocab_size\":%d,\"max_position_embeddings\":2048,\"rms_norm_eps\":1e-06,"
                "\"rope_theta\":1000000.0,\"tie_word_embeddings\":%s,\"bos_token_id\":5,"
                "\"eos_token_id\":[7,8],\"head_dim\":%d,\"torch_dtype\":\"bfloat16\"%s}",
                o->arch_hf, s->dim, s->layers, s->heads, s->kv, s->ffn, s->vocab,
                o->tie_config ? "true" : "false", s->head_dim,
                o->config_extra ? o->config_extra : "");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    tu_write_file(path, c.p, c.n);
    free(c.p);
    if (o->shards <= 1) {
        write_st(dir, "model.safetensors", t, *nt, 0, 1, o);
        return dir;
    }
    static const char *shard_names[] = {"model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    for (int k = 0; k < 2; k++)
        if (!(o->missing_shard && k == 1)) write_st(dir, shard_names[k], t, *nt, k, 2, o);
    struct tu_buf idx = {0};
    tu_putf(&idx, "{\"metadata\":{\"total_size\":1},\"weight_map\":{");
    for (int i = 0; i < *nt; i++)
        tu_putf(&idx, "%s\"%s\":\"%s\"", i ? "," : "", t[i].hf,
                o->index_bad_name && i == 3 ? "../escape.safetensors" : shard_names[i % 2]);
    tu_putf(&idx, ",\"model.layers.0.self_attn.rotary_emb.inv_freq\":\"%s\"", shard_names[0]);
    if (o->index_ghost)
        tu_putf(&idx, ",\"model.layers.0.mlp.ghost.weight\":\"%s\"", shard_names[1]);
    tu_putf(&idx, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    tu_write_file(path, idx.p, idx.n);
    free(idx.p);
    return dir;
}

struct tm_hf tm_default_hf(void) {
    return (struct tm_hf){
        .arch_hf = "LlamaForCausalLM", .tie_config = 1, .shards = 1, .dtype = "BF16"};
}
