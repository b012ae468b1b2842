// link: tpd_model
/* modelfile tests: tiny Llama/Qwen2/Qwen3 models written here as GGUF files and as Hugging
 * Face directories (config.json + safetensors, single file and sharded) must open with the
 * right hyperparameters, GGUF tensor names, shapes in ne order and readable data; broken
 * variants (missing or misshapen tensors, bad types, bad configs, missing shards) must be
 * refused with messages naming the tensor or field. The real SmolLM2 GGUF is compared
 * against tests/data/smollm2_q4_1.json, written from the `gguf` Python package's reading.
 *
 * With TPD_MF_MODEL and TPD_MF_EXPECT set, only that comparison runs, on that model
 * (tests/py/test_modelfile_py.py uses this for models written by gguf / safetensors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/modelfile.h"
#include "util/err.h"

static char tmpdir[64];

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (!lstat(path, &st) && S_ISDIR(st.st_mode))
            rm_tree(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tpd_test_mf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    rm_tree(tmpdir);
    return 0;
}

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void putf(struct buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && n < (int)sizeof tmp);
    put(b, tmp, (size_t)n);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(n ? fwrite(p, 1, n, fp) : 0, n);
    fclose(fp);
}

static uint8_t pattern(int t, uint64_t j) { return (uint8_t)(t * 131 + j * 7 + 3); }

/* Bytes of a [ne0, ne1] tensor, from the GGML block layouts (worked out by hand). */
static uint64_t tensor_bytes(uint32_t type, int64_t ne0, int64_t ne1) {
    switch (type) {
    case DT_F32: return (uint64_t)(ne0 * ne1 * 4);
    case DT_F16: case DT_BF16: return (uint64_t)(ne0 * ne1 * 2);
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

struct spec {
    const char *arch; /* GGUF arch or HF architectures[0] */
    int dim, heads, kv, head_dim, ffn, vocab, layers;
    int tied;       /* leave out output.weight / lm_head.weight */
    int bias, qknorm, rope_freqs;
    uint32_t mat_type, emb_type, norm_type;
    const char *drop;   /* tensor (GGUF name) to leave out */
    const char *alter;  /* tensor (GGUF name) to write with alter_type / alter_ne */
    uint32_t alter_type;
    int64_t alter_ne0, alter_ne1;
    const char *skip_key;   /* GGUF: metadata suffix to leave out */
    const char *string_key; /* GGUF: metadata suffix to write as a string */
    int meta_layers;        /* GGUF: block_count to claim instead of layers */
};

struct tensor_desc {
    char gguf[64], hf[96];
    uint32_t type;
    int n_dims;
    int64_t ne0, ne1;
};

static struct spec default_spec(void) {
    return (struct spec){.arch = "llama", .dim = 64, .heads = 4, .kv = 2, .head_dim = 16,
                         .ffn = 96, .vocab = 128, .layers = 2, .tied = 1,
                         .mat_type = DT_Q4_1, .emb_type = DT_Q8_0, .norm_type = DT_F32};
}

static int add_t(struct tensor_desc *t, int n, const struct spec *s, const char *gguf,
                 const char *hf, uint32_t type, int n_dims, int64_t ne0, int64_t ne1) {
    if (s->drop && !strcmp(s->drop, gguf)) return n;
    struct tensor_desc *d = &t[n];
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
static int model_tensors(const struct spec *s, struct tensor_desc *t) {
    int n = 0, hd = s->head_dim, q = s->heads * hd, kv = s->kv * hd;
    char g[64], h[96];
    n = add_t(t, n, s, "token_embd.weight", "model.embed_tokens.weight", s->emb_type, 2, s->dim, s->vocab);
    n = add_t(t, n, s, "output_norm.weight", "model.norm.weight", s->norm_type, 1, s->dim, 1);
    if (!s->tied)
        n = add_t(t, n, s, "output.weight", "lm_head.weight", s->mat_type, 2, s->dim, s->vocab);
    if (s->rope_freqs) n = add_t(t, n, s, "rope_freqs.weight", "-", DT_F32, 1, hd / 2, 1);
    static const struct { const char *g, *h; int kind, a, b; } per[] = {
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
            else
                n = add_t(t, n, s, g, h, s->norm_type, 1, sz[per[i].a], 1);
        }
    return n;
}

/* ---- GGUF writer ---------------------------------------------------------------------- */

static void kv_key(struct buf *b, uint64_t *n, const struct spec *s, const char *suffix,
                   uint32_t type, int with_arch) {
    char k[128];
    if (with_arch)
        snprintf(k, sizeof k, "%s.%s", s->arch, suffix);
    else
        snprintf(k, sizeof k, "%s", suffix);
    put_str(b, k);
    put_u32(b, type);
    (*n)++;
}

static void kv_u32(struct buf *b, uint64_t *n, const struct spec *s, const char *suffix,
                   uint32_t v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    if (s->string_key && !strcmp(s->string_key, suffix)) {
        kv_key(b, n, s, suffix, GGUF_STRING, 1);
        put_str(b, "12");
        return;
    }
    kv_key(b, n, s, suffix, GGUF_UINT32, 1);
    put_u32(b, v);
}

static void kv_f32(struct buf *b, uint64_t *n, const struct spec *s, const char *suffix,
                   float v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    kv_key(b, n, s, suffix, GGUF_FLOAT32, 1);
    put(b, &v, 4);
}

static const char *write_gguf(const struct spec *s, const char *fname, struct tensor_desc *t,
                              int *nt) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, fname);
    *nt = model_tensors(s, t);
    struct buf kv = {0}, b = {0};
    uint64_t n_kv = 0;
    kv_key(&kv, &n_kv, s, "general.architecture", GGUF_STRING, 0);
    put_str(&kv, s->arch);
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
    put_u32(&kv, 1);
    kv_key(&kv, &n_kv, s, "tokenizer.ggml.eos_token_id", GGUF_UINT32, 0);
    put_u32(&kv, 2);
    kv_key(&kv, &n_kv, s, "tokenizer.ggml.tokens", GGUF_ARRAY, 0);
    put_u32(&kv, GGUF_STRING);
    put_u64(&kv, (uint64_t)s->vocab);
    for (int i = 0; i < s->vocab; i++) {
        char tok[16];
        snprintf(tok, sizeof tok, "t%d", i);
        put_str(&kv, tok);
    }
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)*nt);
    put_u64(&b, n_kv);
    put(&b, kv.p, kv.n);
    uint64_t rel = 0;
    for (int i = 0; i < *nt; i++) {
        put_str(&b, t[i].gguf);
        put_u32(&b, (uint32_t)t[i].n_dims);
        put_u64(&b, (uint64_t)t[i].ne0);
        if (t[i].n_dims == 2) put_u64(&b, (uint64_t)t[i].ne1);
        put_u32(&b, t[i].type);
        put_u64(&b, rel);
        rel = (rel + tensor_bytes(t[i].type, t[i].ne0, t[i].ne1) + 31) / 32 * 32;
    }
    for (int i = 0; i < *nt; i++) {
        while (b.n % 32) put(&b, "", 1);
        for (uint64_t j = 0; j < tensor_bytes(t[i].type, t[i].ne0, t[i].ne1); j++) {
            uint8_t v = pattern(i, j);
            put(&b, &v, 1);
        }
    }
    write_file(path, b.p, b.n);
    free(kv.p);
    free(b.p);
    return path;
}

/* Every listed tensor is found under its GGUF name with its shape and bytes. */
static void check_tensors(const struct model_file *m, const struct tensor_desc *t, int nt) {
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
            if (got[j] != pattern(i, j)) fail_msg("%s: byte %llu differs", t[i].gguf, (unsigned long long)j);
        /* A partial read from the middle. */
        if (nb > 3) {
            assert_int_equal(modelfile_read(m, mt, 2, 1, got, err), 0);
            assert_int_equal(got[0], pattern(i, 2));
        }
        free(got);
    }
    assert_int_equal(m->n_tensors, mapped);
}

static void expect_open_fails(const char *path, const char *msg) {
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, path, err) != -1) fail_msg("%s: accepted (want \"%s\")", path, msg);
    if (!strstr(err, msg)) fail_msg("message \"%s\" lacks \"%s\"", err, msg);
    print_message("  -> %s\n", err);
    assert_int_equal(m.n_tensors, 0);
    assert_null(m.tensors);
    assert_null(m.gguf);
}

static void test_gguf_llama(void **state) {
    (void)state;
    struct spec s = default_spec();
    struct tensor_desc t[128];
    int nt;
    const char *path = write_gguf(&s, "llama.gguf", t, &nt);
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(nt, 2 + 2 * 9);
    const struct model_hparams *hp = &m.hp;
    assert_int_equal(hp->arch, ARCH_LLAMA);
    assert_int_equal(hp->n_layers, 2);
    assert_int_equal(hp->dim, 64);
    assert_int_equal(hp->n_heads, 4);
    assert_int_equal(hp->n_kv_heads, 2);
    assert_int_equal(hp->head_dim, 16);
    assert_int_equal(hp->ffn_dim, 96);
    assert_int_equal(hp->vocab_size, 128);
    assert_int_equal(hp->max_ctx, 4096);
    assert_true(hp->norm_eps == 1e-5f);
    assert_true(hp->rope_theta == 500000.0f);
    assert_int_equal(hp->rope_neox, 0);
    assert_int_equal(hp->rope_scaling_llama3, 0);
    assert_int_equal(hp->tied_embeddings, 1);
    assert_int_equal(hp->qkv_bias, 0);
    assert_int_equal(hp->qk_norm, 0);
    assert_int_equal(hp->bos_id, 1);
    assert_int_equal(hp->eos_id, 2);
    assert_non_null(m.gguf);
    assert_null(m.hf_dir);
    assert_int_equal(m.n_files, 1);
    assert_string_equal(m.paths[0], path);
    check_tensors(&m, t, nt);
    assert_null(modelfile_find(&m, "output.weight"));
    assert_null(modelfile_find(&m, "blk.2.attn_q.weight"));
    /* Reads outside the tensor are refused. */
    const struct mf_tensor *q = modelfile_find(&m, "blk.1.attn_q.weight");
    uint8_t tmp[8];
    assert_int_equal(modelfile_read(&m, q, q->nbytes - 2, 4, tmp, err), -1);
    assert_non_null(strstr(err, "tensor 'blk.1.attn_q.weight': read of 4 bytes"));
    assert_int_equal(modelfile_read(&m, q, UINT64_MAX, 2, tmp, err), -1);
    assert_int_equal(modelfile_read(&m, q, q->nbytes, 0, tmp, err), 0);
    modelfile_close(&m);
}

static void test_gguf_qwen(void **state) {
    (void)state;
    struct spec s = default_spec();
    s.arch = "qwen2";
    s.tied = 0;
    s.bias = 1;
    s.mat_type = DT_F16;
    s.emb_type = DT_BF16;
    struct tensor_desc t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *path = write_gguf(&s, "qwen2.gguf", t, &nt);
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN2);
    assert_int_equal(m.hp.rope_neox, 1);
    assert_int_equal(m.hp.tied_embeddings, 0);
    assert_int_equal(m.hp.qkv_bias, 1);
    check_tensors(&m, t, nt);
    modelfile_close(&m);
    /* Qwen2 without biases is a broken file. */
    s.bias = 0;
    expect_open_fails(write_gguf(&s, "qwen2nb.gguf", t, &nt), "missing tensor 'blk.0.attn_q.bias'");

    /* Qwen3: head_dim differs from dim / heads, per-head q/k norms, rope_freqs tensor. */
    s = default_spec();
    s.arch = "qwen3";
    s.head_dim = 32;
    s.qknorm = 1;
    s.rope_freqs = 1;
    s.mat_type = DT_Q8_0;
    path = write_gguf(&s, "qwen3.gguf", t, &nt);
    if (modelfile_open(&m, path, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN3);
    assert_int_equal(m.hp.head_dim, 32);
    assert_int_equal(m.hp.qk_norm, 1);
    assert_int_equal(m.hp.qkv_bias, 0);
    assert_int_equal(modelfile_find(&m, "blk.0.attn_q.weight")->ne[1], 4 * 32);
    assert_int_equal(modelfile_find(&m, "rope_freqs.weight")->ne[0], 16);
    check_tensors(&m, t, nt);
    modelfile_close(&m);
    s.qknorm = 0;
    expect_open_fails(write_gguf(&s, "qwen3nn.gguf", t, &nt), "missing tensor 'blk.0.attn_q_norm.weight'");
}

static void test_gguf_bad_models(void **state) {
    (void)state;
    struct tensor_desc t[128];
    int nt;
    static const struct {
        const char *arch, *drop, *alter;
        uint32_t alter_type;
        int64_t ne0, ne1;
        const char *skip_key, *string_key;
        int kv, heads, head_dim, meta_layers;
        const char *msg;
    } cases[] = {
        {NULL, "blk.1.ffn_up.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, "missing tensor 'blk.1.ffn_up.weight'"},
        {NULL, "token_embd.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, "missing tensor 'token_embd.weight'"},
        {NULL, "output_norm.weight", NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, "missing tensor 'output_norm.weight'"},
        {NULL, NULL, "blk.0.attn_k.weight", 0xffffffffu, 0, 64, NULL, NULL, 0, 0, 0, 0, "tensor 'blk.0.attn_k.weight': expected shape [64, 32] (ne order), found [64, 64]"},
        {NULL, NULL, "blk.1.ffn_down.weight", 0xffffffffu, 64, 96, NULL, NULL, 0, 0, 0, 0, "tensor 'blk.1.ffn_down.weight': expected shape [96, 64] (ne order), found [64, 96]"},
        {NULL, NULL, "blk.0.attn_norm.weight", 0xffffffffu, 32, 0, NULL, NULL, 0, 0, 0, 0, "tensor 'blk.0.attn_norm.weight': expected shape [64] (ne order), found [32]"},
        {NULL, NULL, "token_embd.weight", 0xffffffffu, 0, 100, NULL, NULL, 0, 0, 0, 0, "tensor 'token_embd.weight': expected shape [64, 128] (ne order), found [64, 100]"},
        {NULL, NULL, "blk.0.ffn_norm.weight", DT_Q8_0, 0, 0, NULL, NULL, 0, 0, 0, 0, "tensor 'blk.0.ffn_norm.weight': type Q8_0 is not allowed here (expected F32, F16 or BF16)"},
        {"gemma", NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 0, "unsupported architecture 'gemma'"},
        {NULL, NULL, NULL, 0, 0, 0, "block_count", NULL, 0, 0, 0, 0, "metadata 'llama.block_count' is missing"},
        {NULL, NULL, NULL, 0, 0, 0, "attention.layer_norm_rms_epsilon", NULL, 0, 0, 0, 0, "metadata 'llama.attention.layer_norm_rms_epsilon' is missing"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, "embedding_length", 0, 0, 0, 0, "metadata 'llama.embedding_length' is not an integer"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 3, 0, 0, 0, "n_heads 4 is not divisible by n_kv_heads 3"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, -1, 0, "head_dim = 0 is out of range [1, 1024]"},
        {NULL, NULL, NULL, 0, 0, 0, NULL, NULL, 0, 0, 0, 2000, "n_layers = 2000 is out of range [1, 1024]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct spec s = default_spec();
        if (cases[i].arch) s.arch = cases[i].arch;
        s.drop = cases[i].drop;
        s.alter = cases[i].alter;
        s.alter_type = cases[i].alter_type;
        s.alter_ne0 = cases[i].ne0;
        s.alter_ne1 = cases[i].ne1;
        s.skip_key = cases[i].skip_key;
        s.string_key = cases[i].string_key;
        if (cases[i].kv) s.kv = cases[i].kv;
        if (cases[i].head_dim) s.head_dim = cases[i].head_dim < 0 ? 0 : cases[i].head_dim;
        s.meta_layers = cases[i].meta_layers;
        const char *path = write_gguf(&s, "bad.gguf", t, &nt);
        expect_open_fails(path, cases[i].msg);
        expect_open_fails(path, path);
    }
    expect_open_fails("/nonexistent/model.gguf", "/nonexistent/model.gguf: No such file");
    /* Not a GGUF at all. */
    char path[256];
    snprintf(path, sizeof path, "%s/text.gguf", tmpdir);
    write_file(path, "hello world, not a model", 24);
    expect_open_fails(path, "not a GGUF file (bad magic");
}

/* ---- Hugging Face directories ---------------------------------------------------------- */

struct hfopts {
    const char *arch_hf;      /* architectures[0] */
    int lm_head;              /* write lm_head.weight */
    int tie_config;           /* "tie_word_embeddings": true */
    int shards;               /* 1: model.safetensors; 2: two shards + index */
    const char *dtype;        /* dtype string for every tensor */
    const char *config_extra; /* appended inside config.json's object */
    const char *config_text;  /* replaces config.json entirely */
    const char *bad_hf;       /* HF tensor written with dtype bad_dtype */
    const char *bad_dtype;
    int missing_shard, index_bad_name, index_ghost;
};

static uint32_t dtype_of(const char *s) {
    return !strcmp(s, "F32") ? DT_F32 : !strcmp(s, "F16") ? DT_F16 : DT_BF16;
}

static int dsize(const char *s) {
    return !strcmp(s, "F32") ? 4 : !strcmp(s, "I64") ? 8 : 2;
}

/* Writes dir/name with the tensors whose index i has i % nshards == shard. Tensor data
 * follows the ne order: an [ne1, ne0] row-major array in safetensors terms. */
static void write_st(const char *dir, const char *name, const struct tensor_desc *t, int nt,
                     int shard, int nshards, const struct hfopts *o) {
    struct buf hdr = {0}, data = {0};
    put(&hdr, "{\"__metadata__\":{\"format\":\"pt\"}", 31);
    for (int i = 0; i < nt; i++) {
        if (i % nshards != shard) continue;
        const char *dt = o->bad_hf && !strcmp(o->bad_hf, t[i].hf) ? o->bad_dtype : o->dtype;
        uint64_t nb = (uint64_t)(t[i].ne0 * t[i].ne1 * dsize(dt));
        if (t[i].n_dims == 2)
            putf(&hdr, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                 t[i].hf, dt, (long long)t[i].ne1, (long long)t[i].ne0, data.n, data.n + nb);
        else
            putf(&hdr, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                 t[i].hf, dt, (long long)t[i].ne0, data.n, data.n + nb);
        for (uint64_t j = 0; j < nb; j++) {
            uint8_t v = pattern(i, j);
            put(&data, &v, 1);
        }
    }
    /* Tensors we do not use: rotary inverse frequencies, an integer buffer. */
    if (shard == 0) {
        putf(&hdr, ",\"model.layers.0.self_attn.rotary_emb.inv_freq\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[%zu,%zu]}", data.n, data.n + 32);
        put(&data, (uint8_t[32]){0}, 32);
        putf(&hdr, ",\"model.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,4],\"data_offsets\":[%zu,%zu]}", data.n, data.n + 32);
        put(&data, (uint8_t[32]){0}, 32);
    }
    put(&hdr, "}", 1);
    struct buf f = {0};
    put_u64(&f, hdr.n);
    put(&f, hdr.p, hdr.n);
    put(&f, data.p, data.n);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, f.p, f.n);
    free(hdr.p);
    free(data.p);
    free(f.p);
}

static const char *write_hf(const struct spec *s, const struct hfopts *o, const char *name,
                            struct tensor_desc *t, int *nt) {
    static char dir[256];
    char path[512];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    rm_tree(dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    struct spec hs = *s;
    hs.tied = !o->lm_head;
    *nt = model_tensors(&hs, t);
    uint32_t type = dtype_of(o->dtype);
    for (int i = 0; i < *nt; i++) t[i].type = type;
    struct buf c = {0};
    if (o->config_text) {
        put(&c, o->config_text, strlen(o->config_text));
    } else {
        putf(&c, "{\"architectures\":[\"%s\"],\"hidden_size\":%d,\"num_hidden_layers\":%d,"
                 "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"intermediate_size\":%d,"
                 "\"vocab_size\":%d,\"max_position_embeddings\":2048,\"rms_norm_eps\":1e-06,"
                 "\"rope_theta\":1000000.0,\"tie_word_embeddings\":%s,\"bos_token_id\":5,"
                 "\"eos_token_id\":[7,8],\"head_dim\":%d,\"torch_dtype\":\"bfloat16\"%s}",
             o->arch_hf, s->dim, s->layers, s->heads, s->kv, s->ffn, s->vocab,
             o->tie_config ? "true" : "false", s->head_dim, o->config_extra ? o->config_extra : "");
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_file(path, c.p, c.n);
    free(c.p);
    if (o->shards <= 1) {
        write_st(dir, "model.safetensors", t, *nt, 0, 1, o);
        return dir;
    }
    static const char *shard_names[] = {"model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    for (int k = 0; k < 2; k++)
        if (!(o->missing_shard && k == 1)) write_st(dir, shard_names[k], t, *nt, k, 2, o);
    struct buf idx = {0};
    putf(&idx, "{\"metadata\":{\"total_size\":1},\"weight_map\":{");
    for (int i = 0; i < *nt; i++)
        putf(&idx, "%s\"%s\":\"%s\"", i ? "," : "", t[i].hf,
             o->index_bad_name && i == 3 ? "../escape.safetensors" : shard_names[i % 2]);
    putf(&idx, ",\"model.layers.0.self_attn.rotary_emb.inv_freq\":\"%s\"", shard_names[0]);
    if (o->index_ghost) putf(&idx, ",\"model.layers.0.mlp.ghost.weight\":\"%s\"", shard_names[1]);
    putf(&idx, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_file(path, idx.p, idx.n);
    free(idx.p);
    return dir;
}

static struct hfopts default_hf(void) {
    return (struct hfopts){.arch_hf = "LlamaForCausalLM", .tie_config = 1, .shards = 1,
                           .dtype = "BF16"};
}

static void test_hf_llama(void **state) {
    (void)state;
    struct spec s = default_spec();
    struct hfopts o = default_hf();
    struct tensor_desc t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *dir = write_hf(&s, &o, "llama", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    const struct model_hparams *hp = &m.hp;
    assert_int_equal(hp->arch, ARCH_LLAMA);
    assert_int_equal(hp->n_layers, 2);
    assert_int_equal(hp->dim, 64);
    assert_int_equal(hp->n_heads, 4);
    assert_int_equal(hp->n_kv_heads, 2);
    assert_int_equal(hp->head_dim, 16);
    assert_int_equal(hp->ffn_dim, 96);
    assert_int_equal(hp->vocab_size, 128);
    assert_int_equal(hp->max_ctx, 2048);
    assert_true(hp->norm_eps == 1e-6f);
    assert_true(hp->rope_theta == 1e6f);
    assert_int_equal(hp->rope_neox, 1);
    assert_int_equal(hp->tied_embeddings, 1);
    assert_int_equal(hp->qkv_bias, 0);
    assert_int_equal(hp->bos_id, 5);
    assert_int_equal(hp->eos_id, 7);
    assert_null(m.gguf);
    assert_string_equal(m.hf_dir, dir);
    check_tensors(&m, t, nt); /* also: inv_freq and position_ids were not taken */
    const struct mf_tensor *q = modelfile_find(&m, "blk.0.attn_q.weight");
    assert_string_equal(q->src_name, "model.layers.0.self_attn.q_proj.weight");
    assert_int_equal(q->n_dims, 2);
    modelfile_close(&m);

    /* Untied with lm_head, F32, llama3 rope scaling, Mistral name. */
    o.arch_hf = "MistralForCausalLM";
    o.lm_head = 1;
    o.tie_config = 0;
    o.dtype = "F32";
    o.config_extra = ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                     "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                     "\"original_max_position_embeddings\":8192}";
    dir = write_hf(&s, &o, "mistral", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.tied_embeddings, 0);
    assert_int_equal(m.hp.rope_scaling_llama3, 1);
    assert_true(m.hp.rope_factor == 8.0f);
    assert_true(m.hp.rope_low_freq_factor == 1.0f);
    assert_true(m.hp.rope_high_freq_factor == 4.0f);
    assert_int_equal(m.hp.rope_orig_ctx, 8192);
    assert_int_equal(modelfile_find(&m, "output.weight")->type, DT_F32);
    check_tensors(&m, t, nt);
    modelfile_close(&m);

    /* tie_word_embeddings false but no lm_head: tied anyway. */
    o = default_hf();
    o.tie_config = 0;
    dir = write_hf(&s, &o, "untied", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.tied_embeddings, 1);
    modelfile_close(&m);
}

static void test_hf_qwen_sharded(void **state) {
    (void)state;
    struct spec s = default_spec();
    s.bias = 1;
    struct hfopts o = default_hf();
    o.arch_hf = "Qwen2ForCausalLM";
    o.shards = 2;
    o.lm_head = 1;
    o.tie_config = 0;
    o.dtype = "F16";
    struct tensor_desc t[128];
    int nt;
    struct model_file m;
    char err[ERR_LEN] = "";
    const char *dir = write_hf(&s, &o, "qwen2", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN2);
    assert_int_equal(m.hp.qkv_bias, 1);
    assert_int_equal(m.n_files, 2);
    check_tensors(&m, t, nt);
    /* Tensors alternate between the shards. */
    assert_int_equal(modelfile_find(&m, t[0].gguf)->file, 0);
    assert_int_equal(modelfile_find(&m, t[1].gguf)->file, 1);
    assert_non_null(strstr(m.paths[modelfile_find(&m, t[1].gguf)->file], "model-00002-of-00002"));
    modelfile_close(&m);

    /* Qwen3 with q/k norms and a head_dim that differs from hidden / heads. */
    s = default_spec();
    s.head_dim = 32;
    s.qknorm = 1;
    o = default_hf();
    o.arch_hf = "Qwen3ForCausalLM";
    dir = write_hf(&s, &o, "qwen3", t, &nt);
    if (modelfile_open(&m, dir, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_QWEN3);
    assert_int_equal(m.hp.head_dim, 32);
    assert_int_equal(m.hp.qk_norm, 1);
    check_tensors(&m, t, nt);
    modelfile_close(&m);

    s = default_spec();
    o = default_hf();
    o.shards = 2;
    o.missing_shard = 1;
    expect_open_fails(write_hf(&s, &o, "noshard", t, &nt), "shard 'model-00002-of-00002.safetensors' listed in model.safetensors.index.json: No such file");
    o.missing_shard = 0;
    o.index_bad_name = 1;
    expect_open_fails(write_hf(&s, &o, "escape", t, &nt), "must name a file in the model directory");
    o.index_bad_name = 0;
    o.index_ghost = 1;
    expect_open_fails(write_hf(&s, &o, "ghost", t, &nt), "tensor 'model.layers.0.mlp.ghost.weight' listed in the index is not in this shard");
}

static void test_hf_bad(void **state) {
    (void)state;
    struct spec s = default_spec();
    struct tensor_desc t[128];
    int nt;
    struct hfopts o = default_hf();

    o.bad_hf = "model.layers.1.mlp.up_proj.weight";
    o.bad_dtype = "I64";
    expect_open_fails(write_hf(&s, &o, "i64", t, &nt), "tensor 'model.layers.1.mlp.up_proj.weight': dtype I64 is not supported");
    o = default_hf();

    struct spec bad = s;
    bad.alter = "blk.0.attn_v.weight";
    bad.alter_type = 0xffffffffu;
    bad.alter_ne1 = 48;
    expect_open_fails(write_hf(&bad, &o, "shape", t, &nt), "tensor 'model.layers.0.self_attn.v_proj.weight': expected shape [64, 32] (ne order), found [64, 48]");
    bad = s;
    bad.drop = "blk.1.attn_output.weight";
    expect_open_fails(write_hf(&bad, &o, "drop", t, &nt), "missing tensor 'blk.1.attn_output.weight'");

    static const struct { const char *extra, *text, *msg; } cfg[] = {
        {",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}", NULL, "rope_scaling type 'yarn' is not supported"},
        {",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,\"high_freq_factor\":1.0}", NULL, "llama3 rope scaling (factor 8, low 4, high 1"},
        {",\"rope_scaling\":[1]", NULL, "\"rope_scaling\" must be an object (found array)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2}", "missing \"hidden_size\""},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":\"64\"}", "\"hidden_size\" must be an integer (found string)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64.5}", "\"hidden_size\" = 64.5 is not an integer"},
        {NULL, "{\"architectures\":[\"GPT2LMHeadModel\"]}", "unsupported architecture 'GPT2LMHeadModel'"},
        {NULL, "{\"hidden_size\":64}", "missing \"architectures\""},
        {NULL, "[1,2]", "config.json: not a JSON object"},
        {NULL, "{\"architectures\":", "config.json: not valid JSON"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}", "n_heads 4 is not divisible by n_kv_heads 3"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":0,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}", "n_heads = 0 is out of range"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":true}", "\"rms_norm_eps\" must be a number (found bool)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"eos_token_id\":\"x\"}", "\"eos_token_id\" must be a non-negative integer"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":1}", "\"tie_word_embeddings\" must be true or false"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"bos_token_id\":500}", "bos/eos token id 500/-1 is outside the vocabulary (128)"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"head_dim\":15}", "head_dim 15 is odd"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":262144,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5}", "dim = 262144 is out of range [1, 131072]"},
        {NULL, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_hidden_layers\":2,"
               "\"num_attention_heads\":4,\"intermediate_size\":96,\"vocab_size\":128,"
               "\"max_position_embeddings\":64,\"rms_norm_eps\":-1}", "rms norm epsilon -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        o = default_hf();
        o.config_extra = cfg[i].extra;
        o.config_text = cfg[i].text;
        expect_open_fails(write_hf(&s, &o, "cfg", t, &nt), cfg[i].msg);
    }
    /* Defaults: no head_dim (null), no kv heads, no rope_theta, model_type instead of
     * architectures, eos absent. */
    o = default_hf();
    o.config_text = "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"
                    "\"vocab_size\":128,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,"
                    "\"head_dim\":null,\"rope_scaling\":null,\"bos_token_id\":null}";
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, write_hf(&s, &o, "defaults", t, &nt), err)) fail_msg("%s", err);
    assert_int_equal(m.hp.head_dim, 16);
    assert_true(m.hp.rope_theta == 10000.0f);
    assert_int_equal(m.hp.bos_id, -1);
    assert_int_equal(m.hp.eos_id, -1);
    assert_int_equal(m.hp.rope_scaling_llama3, 0);
    modelfile_close(&m);

    /* A directory without weights, and one without config.json. */
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s/empty", tmpdir);
    mkdir(dir, 0755);
    expect_open_fails(dir, "config.json: cannot open");
    o = default_hf();
    write_hf(&s, &o, "noweights", t, &nt);
    snprintf(dir, sizeof dir, "%s/noweights", tmpdir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    expect_open_fails(dir, "no model.safetensors or model.safetensors.index.json");
}

/* ---- comparison with the gguf / safetensors Python packages ------------------------- */

static uint32_t crc_table[256];

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    if (!crc_table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, fp), (size_t)n);
    s[n] = 0;
    fclose(fp);
    return s;
}

static const char *ref_model, *ref_json;

static int jint(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j)) fail_msg("expectation: \"%s\" missing", key);
    return j->valueint;
}

static void compare_model(const char *model, const char *json) {
    char *text = slurp(json);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, model, err)) fail_msg("%s", err);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "hparams");
    const struct model_hparams *hp = &m.hp;
#define HP_INT(f) if ((int)hp->f != jint(h, #f)) fail_msg("hparams." #f ": %d != %d", (int)hp->f, jint(h, #f))
    HP_INT(arch); HP_INT(n_layers); HP_INT(dim); HP_INT(n_heads); HP_INT(n_kv_heads);
    HP_INT(head_dim); HP_INT(ffn_dim); HP_INT(vocab_size); HP_INT(max_ctx); HP_INT(rope_neox);
    HP_INT(rope_scaling_llama3); HP_INT(tied_embeddings); HP_INT(qkv_bias); HP_INT(qk_norm);
    HP_INT(bos_id); HP_INT(eos_id);
#undef HP_INT
    assert_true(hp->norm_eps == (float)cJSON_GetObjectItemCaseSensitive(h, "norm_eps")->valuedouble);
    assert_true(hp->rope_theta == (float)cJSON_GetObjectItemCaseSensitive(h, "rope_theta")->valuedouble);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    assert_int_equal(m.n_tensors, cJSON_GetArraySize(ts));
    size_t cap = 1 << 20;
    uint8_t *chunk = malloc(cap);
    for (const cJSON *e = ts->child; e; e = e->next) {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        const struct mf_tensor *t = modelfile_find(&m, name);
        if (!t) fail_msg("tensor %s not found", name);
        assert_int_equal(t->type, jint(e, "type"));
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(e, "ne");
        assert_int_equal(t->n_dims, cJSON_GetArraySize(ne));
        int d = 0;
        for (const cJSON *x = ne->child; x; x = x->next, d++) assert_int_equal(t->ne[d], strtoll(x->valuestring, NULL, 10));
        for (; d < 4; d++) assert_int_equal(t->ne[d], 1);
        assert_int_equal(t->nbytes, strtoull(cJSON_GetObjectItemCaseSensitive(e, "nbytes")->valuestring, NULL, 10));
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "offset");
        if (off) assert_int_equal(t->offset, strtoull(off->valuestring, NULL, 10));
        uint32_t crc = 0;
        for (uint64_t pos = 0; pos < t->nbytes; pos += cap) {
            uint64_t n = t->nbytes - pos < cap ? t->nbytes - pos : cap;
            if (modelfile_read(&m, t, pos, n, chunk, err)) fail_msg("%s", err);
            crc = crc32_update(crc, chunk, n);
        }
        unsigned want = (unsigned)strtoul(cJSON_GetObjectItemCaseSensitive(e, "crc32")->valuestring, NULL, 16);
        if (crc != want) fail_msg("tensor %s: crc %08x != %08x", name, crc, want);
    }
    free(chunk);
    modelfile_close(&m);
    cJSON_Delete(root);
}

static void test_compare_reference(void **state) {
    (void)state;
    if (access(ref_model, R_OK) || access(ref_json, R_OK)) {
        print_message("skipped: %s or %s absent\n", ref_model, ref_json);
        skip();
    }
    compare_model(ref_model, ref_json);
}

/* The facts about SmolLM2-135M-Instruct (its model card and config.json). */
static void test_smollm2(void **state) {
    (void)state;
    if (access(ref_model, R_OK) || getenv("TPD_MF_MODEL")) skip();
    struct model_file m;
    char err[ERR_LEN] = "";
    if (modelfile_open(&m, ref_model, err)) fail_msg("%s", err);
    assert_int_equal(m.hp.arch, ARCH_LLAMA);
    assert_int_equal(m.hp.n_layers, 30);
    assert_int_equal(m.hp.dim, 576);
    assert_int_equal(m.hp.n_heads, 9);
    assert_int_equal(m.hp.n_kv_heads, 3);
    assert_int_equal(m.hp.head_dim, 64);
    assert_int_equal(m.hp.ffn_dim, 1536);
    assert_int_equal(m.hp.vocab_size, 49152);
    assert_int_equal(m.hp.tied_embeddings, 1);
    assert_int_equal(m.hp.rope_neox, 0);
    assert_int_equal(modelfile_find(&m, "token_embd.weight")->type, DT_Q8_0);
    assert_int_equal(modelfile_find(&m, "blk.0.attn_q.weight")->type, DT_Q4_1);
    assert_int_equal(modelfile_find(&m, "blk.29.ffn_down.weight")->ne[0], 1536);
    assert_int_equal(m.n_tensors, 2 + 30 * 9);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    assert_int_equal(gguf_get_arr(m.gguf, "tokenizer.ggml.tokens", &et, &n, &data), 0);
    assert_int_equal(n, 49152);
    modelfile_close(&m);
}

int main(void) {
    static char file[4096], json[4096];
    const char *src = getenv("TPD_SOURCE_DIR");
    snprintf(file, sizeof file, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", src ? src : ".");
    snprintf(json, sizeof json, "%s/tests/data/smollm2_q4_1.json", src ? src : ".");
    ref_model = getenv("TPD_MF_MODEL") ? getenv("TPD_MF_MODEL") : file;
    ref_json = getenv("TPD_MF_EXPECT") ? getenv("TPD_MF_EXPECT") : json;
    const struct CMUnitTest only_compare[] = {cmocka_unit_test(test_compare_reference)};
    if (getenv("TPD_MF_MODEL")) return cmocka_run_group_tests(only_compare, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_llama),
        cmocka_unit_test(test_gguf_qwen),
        cmocka_unit_test(test_gguf_bad_models),
        cmocka_unit_test(test_hf_llama),
        cmocka_unit_test(test_hf_qwen_sharded),
        cmocka_unit_test(test_hf_bad),
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_compare_reference),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
